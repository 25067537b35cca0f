//! The one task that owns the server's `Driver` (and through it the `Node`). Connection tasks,
//! the storage thread, the timer and the ensemble's ports send it events; it steps the driver and
//! carries out the driver's commands: frames to connection writers, closes, storage ops for the
//! storage thread, snapshots for the snapshot thread, quorum packets and election rounds. What
//! happens in which order is the driver's decision (`warden_driver`); this task only does it.
//!
//! A turn of the loop handles a batch of events (up to `BATCH`), then ends the driver's turn: the
//! txns persisted meanwhile go to storage as one append (group commit). A standalone owner carries
//! out a lone writer's small append itself when the storage thread is idle and no other event
//! waits (`Storage::append_inline`), and applies a large durable batch a chunk per turn, yielding
//! between chunks.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use indexmap::IndexMap;
use tokio::sync::{mpsc, oneshot, watch};
use warden_driver::{Command, Driver, DriverConfig, Event as DriverEvent};
use warden_node::{Clock, ConnId, Input, Node, NodeConfig, QuorumSetup, RestoreRefused, RoleKind, SnapshotData};
use warden_proto::frame::FourLetterWord;
use warden_proto::{Txn, TxnHeader};
use warden_quorum::zab::LogProbe;
use warden_storage::{Report, StoreOp};
use warden_tree::DataTree;

use crate::admin::backup::{Refusal, RestoreAnswer};
use crate::config::{Config, ServerRole};
use crate::conn_queue::ConnTx;
use crate::ensemble::{EnsEvent, Ensemble};
use crate::fourlw;
use crate::snapshot::{SnapshotJob, Snapshots, Start};
use crate::storage::{millis, MsgTiming, Storage, StorageMsg};
use crate::wall_ms;

/// Bound of the queue from connection tasks to the owner.
pub(crate) const EVENT_QUEUE: usize = 4096;
/// Frames buffered for one connection's writer; a client that lets this fill is disconnected.
/// Counted in frames (`ConnTx::queued`), not messages: a message carries many.
pub(crate) const CONN_QUEUE: usize = 16_384;
/// Events stepped per turn before the driver's turn ends (and persisted txns go to storage).
const BATCH: usize = 256;

/// Why the server stops on its own: storage failed, and it must not go on with a hole in its log
/// or a tree it cannot trust.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Fatal {
    #[error("transaction log write failed")]
    LogWrite(#[source] warden_storage::StorageError),
    #[error("truncating the log and reloading the data failed")]
    Reload(#[source] warden_storage::StorageError),
    #[error("the storage thread ended")]
    StorageGone,
}

pub(crate) enum Event {
    /// Storage failed; the server must stop rather than go on with a hole in its log.
    Fatal(Fatal),
    Register {
        conn: ConnId,
        tx: ConnTx,
    },
    Node(Input),
    /// Inputs from one connection, in order (the requests one read brought).
    Inputs(Vec<Input>),
    /// The storage thread synced what it reports (its fsync took `fsync`; none without forceSync).
    Synced {
        report: Report,
        fsync: Option<std::time::Duration>,
        /// The sync processor figures of each message this sync covered.
        timings: Vec<MsgTiming>,
    },
    FourLetter {
        cmd: FourLetterWord,
        reply: oneshot::Sender<String>,
    },
    /// A Prometheus scrape: the text exposition of the metrics.
    Metrics {
        reply: oneshot::Sender<String>,
    },
    /// An AdminServer command with its query parameters.
    Admin {
        cmd: &'static crate::admin::commands::Command,
        args: std::collections::BTreeMap<String, String>,
        reply: oneshot::Sender<crate::admin::commands::Answer>,
    },
    /// The admin `snapshot` command: authenticate (`Authorization` header, caller's address),
    /// limit, and answer the tree and sessions as they stand.
    AdminSnapshot {
        authorization: Option<String>,
        peer: std::net::IpAddr,
        reply: oneshot::Sender<Result<SnapshotData, Refusal>>,
    },
    /// The admin `restore` command, before its body is read: authenticated, enabled, not limited?
    AdminRestoreAllowed {
        authorization: Option<String>,
        peer: std::net::IpAddr,
        reply: oneshot::Sender<Result<(), Refusal>>,
    },
    /// The admin `restore` command's decoded snapshot: replace the data; the answer (the zxid)
    /// comes once it is durable.
    AdminRestore {
        /// The decoded stream, or why it could not be decoded (counted in `restore_error_count`).
        snapshot: Result<SnapshotData, String>,
        reply: oneshot::Sender<RestoreAnswer>,
    },
}

#[derive(Debug)]
pub(crate) enum ConnMsg {
    /// What one turn of the owner's loop collected for the connection (or 64 KiB of it).
    Frames(Frames),
    Close,
}

/// Complete frames for one connection, back to back: `frames` of them, `completes` of those
/// replies to client requests (the rest are notifications), each returning a permit. Collected
/// during a turn of the owner's loop, then sent to the connection's writer as they are.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    pub bytes: FrameBytes,
    pub frames: u32,
    pub completes: u32,
}

impl Frames {
    /// Appends one frame (the first is taken as it is, not copied).
    fn push(&mut self, frame: Bytes, completes_request: bool) {
        if self.bytes.is_empty() {
            self.bytes = FrameBytes::One(frame);
        } else {
            self.bytes.append(&frame);
        }
        self.frames += 1;
        self.completes += u32::from(completes_request);
    }
}

/// The bytes of a connection's frames: one frame as the node made it (the notifications of a
/// watch storm are one buffer that every watcher's `One` shares, so fanning them out copies and
/// allocates nothing), or frames joined back to back.
#[derive(Debug)]
pub(crate) enum FrameBytes {
    One(Bytes),
    Joined(Vec<u8>),
}

impl Default for FrameBytes {
    fn default() -> Self {
        FrameBytes::One(Bytes::new())
    }
}

impl std::ops::Deref for FrameBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FrameBytes::One(b) => b,
            FrameBytes::Joined(v) => v,
        }
    }
}

impl FrameBytes {
    /// Appends `more` (a frame of its own, or frames joined); a lone frame's buffer is reused
    /// when nothing else shares it.
    pub fn append(&mut self, more: &[u8]) {
        match self {
            FrameBytes::Joined(v) => v.extend_from_slice(more),
            FrameBytes::One(b) => {
                let mut v = Vec::from(std::mem::take(b));
                v.extend_from_slice(more);
                *self = FrameBytes::Joined(v);
            }
        }
    }

    /// Drops the first `n` bytes (what a socket took).
    pub fn consume(&mut self, n: usize) {
        match self {
            FrameBytes::One(b) => bytes::Buf::advance(b, n),
            FrameBytes::Joined(v) => drop(v.drain(..n)),
        }
    }
}

/// Collected frames for one connection go out once they reach this many bytes, so that a large
/// turn does not copy a growing buffer over and over; a frame this large goes out alone.
const PENDING_BYTES: usize = 64 * 1024;

pub(crate) struct Owner {
    cfg: Arc<Config>,
    driver: Driver,
    /// By connection id, in order (see `pending`).
    conns: BTreeMap<ConnId, ConnTx>,
    events: mpsc::Receiver<Event>,
    shutdown: watch::Receiver<bool>,
    started: Instant,
    /// The figures the owner keeps for `mntr` and `/metrics` (fsync times, uptime).
    metrics: crate::metrics::ShellMetrics,
    mono_base_ms: u64,
    /// Commands the driver emitted and the owner has not routed yet.
    cmds: Vec<Command>,
    /// Commands other than client frames, in order, until the end of the turn carries them out.
    later: VecDeque<Command>,
    /// Frames of the current turn of the loop, per connection: each connection's writer gets one
    /// message per turn (or per 64 KiB) instead of one per frame. Sent in the order the node
    /// emitted them: a storm's watchers come in ascending connection id, the order in which their
    /// sockets and records were allocated, and walking those in memory order rather than in hash
    /// order took a fifth off a 16,000-watcher storm (docs/benchmarks.md).
    pending: IndexMap<ConnId, Frames>,
    storage: Storage,
    snapshots: Snapshots,
    fatal: Option<Fatal>,
    /// Quorum mode: the election and quorum ports.
    ens: Option<Ensemble>,
    /// The admin `snapshot` / `restore` rate limiters.
    backup: crate::admin::backup::Backup,
    /// A restore waiting for its snapshot to be durable: its zxid and whom to tell.
    restoring: Option<(i64, Instant, oneshot::Sender<RestoreAnswer>)>,
    /// Reads of the on-disk log for a leader's DIFF from disk.
    log_reader: LogReader,
}

/// What the owner needs to read the on-disk log for a leader's DIFF from disk (`Command::ProbeLog`,
/// `Command::SendLogDiff`): the data directories, and a way to send the probe's answer back as an
/// event (weak, so the owner does not keep its own event channel open).
pub(crate) struct LogReader {
    pub data: warden_storage::DataDir,
    pub events: mpsc::WeakSender<Event>,
}

impl Owner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        cfg: Arc<Config>,
        events: mpsc::Receiver<Event>,
        log_reader: LogReader,
        shutdown: watch::Receiver<bool>,
        storage: Storage,
        snapshots: Snapshots,
        quorum: Option<(Ensemble, QuorumSetup)>,
        edge: Arc<crate::metrics::EdgeCounters>,
    ) -> Self {
        let wall = wall_ms();
        let server_id = if cfg.servers.len() > 1 { cfg.my_id.unwrap_or(0) as u8 } else { 0 };
        let node_cfg = NodeConfig {
            tick_time_ms: cfg.tick_time_ms,
            min_session_timeout_ms: cfg.min_session_timeout_ms,
            max_session_timeout_ms: cfg.max_session_timeout_ms,
            server_id,
            super_digest: cfg.super_digest.clone(),
            skip_acl: cfg.skip_acl,
            ttl_enabled: cfg.extended_types_enabled,
            reconfig_enabled: cfg.reconfig_enabled,
            standalone_enabled: cfg.standalone_enabled,
            container_check_interval_ms: cfg.container_check_interval_ms,
            read_only_enabled: cfg.read_only,
            linearizable_reads: cfg.linearizable_reads,
            sasl_provider: cfg.sasl_provider(),
            sasl_super_users: cfg.sasl_super_users.clone(),
            x509_super_user: cfg.x509_super_user.clone(),
            // Checked by `Server::start` before the owner exists.
            enforce_auth_schemes: cfg.enforced_auth_schemes().unwrap_or_default(),
            allow_sasl_failed_clients: cfg.allow_sasl_failed_clients,
        };
        let mono_base_ms = wall.max(0) as u64;
        let now = Clock { mono_ms: mono_base_ms, wall_ms: wall };
        let node = match &quorum {
            Some((_, setup)) => Node::new_quorum(node_cfg, setup.clone(), now),
            None => Node::new(node_cfg, now),
        };
        let my_sid = quorum.as_ref().map(|(e, _)| e.my_sid);
        let driver_cfg = DriverConfig {
            my_sid,
            snap_count: cfg.snap_count,
            seed: rand::random(),
            durable_chunk: warden_driver::DURABLE_CHUNK,
        };
        let driver = Driver::new(node, driver_cfg);
        Self {
            backup: crate::admin::backup::Backup::new(&cfg.admin),
            cfg,
            driver,
            conns: BTreeMap::new(),
            events,
            shutdown,
            started: Instant::now(),
            metrics: crate::metrics::ShellMetrics::new(edge),
            mono_base_ms,
            cmds: Vec::new(),
            later: VecDeque::new(),
            pending: IndexMap::new(),
            storage,
            snapshots,
            fatal: None,
            ens: quorum.map(|(e, _)| e),
            restoring: None,
            log_reader,
        }
    }

    /// Starts from recovered data (`snapshot_zxid`: the snapshot loaded, if one was); the driver
    /// asks for a snapshot unless the newest one is current, which `run` carries out first.
    pub(crate) fn restore(
        &mut self,
        tree: DataTree,
        sessions: &[(i64, i32)],
        replayed: Vec<(TxnHeader, Txn)>,
        snapshot_zxid: Option<i64>,
    ) {
        self.driver.restore(tree, sessions, replayed, snapshot_zxid, &mut self.cmds);
        self.route();
    }

    fn clock(&self) -> Clock {
        Clock { mono_ms: self.mono_base_ms + self.started.elapsed().as_millis() as u64, wall_ms: wall_ms() }
    }

    pub(crate) async fn run(mut self) -> anyhow::Result<()> {
        // Ticks fall on the sessions' expiry grid (multiples of tickTime on the node's clock, 1 ms
        // after each), so a bucket expires when its time comes rather than up to a tick later,
        // and stay on it after a late tick (Skip, not Delay).
        let tick_ms = u64::from(self.cfg.tick_time_ms).max(1);
        let tick = Duration::from_millis(tick_ms);
        let to_grid = Duration::from_millis(tick_ms - self.clock().mono_ms % tick_ms + 1);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + to_grid, tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        self.end_turn().await;
        loop {
            if self.driver.unapplied() {
                // The writers send the last chunk's replies, the readers bring what came in.
                tokio::task::yield_now().await;
                let now = self.clock();
                self.driver.apply_chunk(now, &mut self.cmds);
                self.route();
                self.handle_queued(0);
            } else {
                tokio::select! {
                    ev = self.events.recv() => {
                        let Some(ev) = ev else { break };
                        let n = self.handle(ev);
                        self.handle_queued(n);
                    }
                    _ = ticker.tick() => self.step(DriverEvent::Node(Input::Tick)),
                    _ = self.shutdown.changed() => break,
                    ev = ens_next(self.ens.as_mut()) => match ev {
                        EnsEvent::Decided(e) => {
                            tracing::info!(leader = e.leader, state = ?e.state, epoch = e.epoch, "election decided");
                            self.step(DriverEvent::Decided(e));
                        }
                        EnsEvent::Node(input) => self.step(DriverEvent::Node(input)),
                    },
                }
            }
            self.end_turn().await;
            self.send_all_pending();
            if self.fatal.is_some() {
                break;
            }
        }
        self.send_all_pending();
        for (_, c) in std::mem::take(&mut self.conns) {
            c.push(ConnMsg::Close, 0);
        }
        if let Some(ens) = self.ens.take() {
            ens.stop().await;
        }
        match self.fatal {
            Some(why) => Err(anyhow::Error::new(why)),
            None => Ok(()),
        }
    }

    /// Ends the driver's turn and carries out what it asks for, until it asks for nothing more
    /// (carrying out a command may step the driver again: a reload, an inline append, a leader's
    /// port).
    async fn end_turn(&mut self) {
        loop {
            let now = self.clock();
            self.driver.end_turn(now, &mut self.cmds);
            self.route();
            if self.fatal.is_some() {
                return;
            }
            if self.later.is_empty() {
                // Once everything is carried out (a TRUNC below the tree holds the node above its
                // log until the reload it asked for).
                return self.check_invariants();
            }
            while let Some(cmd) = self.later.pop_front() {
                self.carry_out(cmd).await;
                if self.fatal.is_some() {
                    return;
                }
            }
        }
    }

    /// The cheap invariants (the driver's, the node's zxid counters, the role machine's O(1)
    /// rules) after every turn in every build; all of them, every machine's, in debug builds. A broken invariant is a bug: the server stops rather than go on.
    fn check_invariants(&self) {
        let checked =
            if cfg!(debug_assertions) { self.driver.check_invariants() } else { self.driver.check_cheap_invariants() };
        if let Err(e) = checked {
            panic!("invariant: {e}");
        }
    }

    fn step(&mut self, ev: DriverEvent) {
        if let DriverEvent::Node(Input::Disconnected { conn }) = ev {
            self.conns.remove(&conn);
        }
        let now = self.clock();
        self.driver.step(now, ev, &mut self.cmds);
        self.route();
    }

    /// Client frames and closes go to the connections' collected frames at once; every other
    /// command waits, in order, for the end of the turn.
    fn route(&mut self) {
        while !self.cmds.is_empty() {
            let mut cmds = std::mem::take(&mut self.cmds);
            for c in cmds.drain(..) {
                match c {
                    Command::Send { conn, frame, completes_request } => {
                        if frame.len() >= PENDING_BYTES {
                            // A large reply goes to the writer on its own, as it is: what was
                            // collected before it goes first, and it is never copied into a
                            // collecting buffer.
                            self.send_pending(conn);
                        }
                        let p = self.pending.entry(conn).or_default();
                        p.push(frame, completes_request);
                        if p.bytes.len() >= PENDING_BYTES {
                            self.send_pending(conn);
                        }
                    }
                    Command::Close { conn } => {
                        // What was collected for it goes first.
                        self.send_pending(conn);
                        if let Some(c) = self.conns.remove(&conn) {
                            c.push(ConnMsg::Close, 0);
                        }
                    }
                    other => self.later.push_back(other),
                }
            }
            // Keep the buffer's capacity for the next step, unless a failed send queued more.
            if self.cmds.is_empty() {
                self.cmds = cmds;
            }
        }
    }

    async fn carry_out(&mut self, cmd: Command) {
        match cmd {
            Command::Store { op, may_inline } => self.store(op, may_inline).await,
            Command::Snapshot { tree, sessions, zxid } => {
                self.collect_snapshot_time();
                match self.snapshots.try_start(|| SnapshotJob { tree, sessions, zxid }) {
                    Start::Started => {}
                    Start::Busy => tracing::warn!("too busy to snapshot; skipping"),
                    Start::Gone => tracing::warn!("the snapshot thread has ended; skipping"),
                }
            }
            Command::PeerSend { to, packet } => {
                let learner = matches!(self.driver.node().role(), RoleKind::Follower | RoleKind::Observer);
                let Some(ens) = self.ens.as_mut() else { return };
                if learner && ens.learner_needs_dial() {
                    if let Err(e) = ens.connect_learner(to, packet).await {
                        tracing::warn!(leader = to, error = %e, "cannot connect to the leader");
                        self.step(DriverEvent::Node(Input::PeerDisconnected { sid: to }));
                    }
                } else {
                    ens.send(to, packet);
                }
            }
            Command::SendSnapshot { to, snapshot } => {
                if let Some(ens) = self.ens.as_mut() {
                    ens.send_snapshot(to, snapshot);
                }
            }
            Command::ProbeLog { to, after } => self.probe_log(to, after),
            Command::SendLogDiff { to, after, upto } => {
                if let Some(ens) = self.ens.as_mut() {
                    ens.send_log_diff(to, self.log_reader.data.clone(), after, upto);
                }
            }
            Command::PeerClose { sid, reason } => {
                if let Some(ens) = self.ens.as_mut() {
                    ens.close(sid, &reason);
                }
            }
            Command::Lead => {
                let Some(ens) = self.ens.as_mut() else { return };
                let opened = ens.start_leading().await.map_err(|e| format!("{e:#}"));
                if opened.is_err() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                self.step(DriverEvent::Leading(opened));
            }
            Command::Elect { flush, .. } => {
                let (last_zxid, current_epoch) = self.driver.vote();
                if let Some(ens) = self.ens.as_mut() {
                    ens.elect(last_zxid, current_epoch, flush).await;
                }
            }
            Command::HandOver { leader, zxid } => {
                if let Some(ens) = self.ens.as_mut() {
                    ens.hand_over(leader, zxid).await;
                }
            }
            Command::Serving { epoch } => {
                if let Some(ens) = self.ens.as_mut() {
                    ens.settled(epoch).await;
                }
            }
            Command::Reconfigured { membership } => {
                if let Some(ens) = self.ens.as_mut() {
                    ens.reconfigure(&membership).await;
                }
                // ZooKeeper writes the dynamic files only with reconfig enabled.
                if let (true, Some(path)) = (self.cfg.reconfig_enabled, self.cfg.config_path.as_deref()) {
                    match crate::dynamic_config::write(path, &membership) {
                        Ok(file) => tracing::info!(file = %file.display(), "dynamic config file written"),
                        Err(e) => {
                            tracing::error!(error = %e, config = %path.display(), "cannot write the dynamic config file")
                        }
                    }
                }
            }
            Command::Send { .. } | Command::Close { .. } => {
                // Routed when they were emitted; only a logic error brings one here.
                self.cmds.push(cmd);
                self.route();
            }
        }
    }

    /// The admin `snapshot` command (`admin/backup.rs`): the tree as it stands now.
    fn admin_snapshot(&mut self, authorization: Option<&str>, peer: std::net::IpAddr) -> Result<SnapshotData, Refusal> {
        crate::admin::backup::authorize(authorization, peer, self.driver.node(), self.cfg.super_digest.as_deref())?;
        if !self.cfg.admin.snapshot_enabled {
            return Err(Refusal::Disabled);
        }
        if !self.backup.snapshot_limiter.allow(Instant::now()) {
            self.metrics.snapshot_rate_limited += 1;
            return Err(Refusal::RateLimited);
        }
        let (tree, sessions) = self.driver.node().snapshot_state();
        Ok(SnapshotData { zxid: tree.last_processed_zxid(), tree: Box::new(tree), sessions })
    }

    /// The admin `restore` command's checks before its body is read.
    fn admin_restore_allowed(&mut self, authorization: Option<&str>, peer: std::net::IpAddr) -> Result<(), Refusal> {
        crate::admin::backup::authorize(authorization, peer, self.driver.node(), self.cfg.super_digest.as_deref())?;
        if !self.cfg.admin.restore_enabled {
            return Err(Refusal::Disabled);
        }
        if let Some(why @ RestoreRefused::Ensemble) = self.driver.replace_data_refused() {
            return Err(Refusal::Failed(why.to_string()));
        }
        if !self.backup.restore_limiter.allow(Instant::now()) {
            self.metrics.restore_rate_limited += 1;
            return Err(Refusal::RateLimited);
        }
        Ok(())
    }

    /// The admin `restore` command: the data is replaced now; the answer waits until the
    /// snapshot is durable. A snapshot still being written (of the old data, perhaps above the
    /// restored zxid) would outlive the restore on disk: the restore waits for none to be in hand.
    fn admin_restore(&mut self, snapshot: Result<SnapshotData, String>, reply: oneshot::Sender<RestoreAnswer>) {
        let snapshot = match snapshot {
            Ok(s) => s,
            Err(why) => {
                self.metrics.restore_errors += 1;
                let _ = reply.send(RestoreAnswer::Refused(Refusal::Failed(why)));
                return;
            }
        };
        match self.driver.replace_data_refused() {
            Some(RestoreRefused::WritesInFlight) => {
                let _ = reply.send(RestoreAnswer::Busy(snapshot));
                return;
            }
            Some(why) => {
                self.metrics.restore_errors += 1;
                let _ = reply.send(RestoreAnswer::Refused(Refusal::Failed(why.to_string())));
                return;
            }
            None => {}
        }
        if self.snapshots.in_hand() || self.restoring.is_some() {
            let _ = reply.send(RestoreAnswer::Busy(snapshot));
            return;
        }
        let zxid = snapshot.zxid;
        match self.driver.replace_data(snapshot, &mut self.cmds) {
            Ok(()) => {
                self.route();
                self.restoring = Some((zxid, Instant::now(), reply));
            }
            Err(why) => {
                self.metrics.restore_errors += 1;
                let _ = reply.send(RestoreAnswer::Refused(Refusal::Failed(why.to_string())));
            }
        }
    }

    /// Counts the snapshot written since the last look in `snapshottime` (before a new one
    /// starts, and before the metrics are read, so none is missed).
    fn collect_snapshot_time(&mut self) {
        if let Some((ms, paused_ms)) = self.snapshots.take_written_ms() {
            self.metrics.snapshot.record(ms);
            self.metrics.snapshot_paused.record(paused_ms);
        }
    }

    /// What loading the data at start-up took (`dbinittime`, `startup_*`).
    pub(crate) fn record_startup(
        &mut self,
        dbinit: Duration,
        txns_loaded: usize,
        snap_load: Duration,
        txns_load: Duration,
    ) {
        let m = &mut self.metrics;
        m.dbinit.record(dbinit.as_millis() as u64);
        m.startup_txns_loaded.record(txns_loaded as u64);
        m.startup_snap_load_time.record(snap_load.as_millis() as u64);
        m.startup_txns_load_time.record(txns_load.as_millis() as u64);
    }

    /// Counts a transaction-log sync: its fsync in `fsynctime`, the txns it made durable in
    /// `sync_processor_batch_size`.
    fn record_sync(&mut self, took: Option<Duration>, appended: usize) {
        if let Some(d) = took {
            self.metrics.fsync.record(d.as_millis() as u64);
        }
        if appended > 0 {
            self.metrics.batch_size.record(appended as u64);
            self.metrics.txns_queued += appended as u64;
        }
    }

    /// Hands a storage op to the storage thread (behind every earlier one), or carries out a lone
    /// writer's append here when nothing else waits. A reload is waited for and stepped at once.
    async fn store(&mut self, op: StoreOp, may_inline: bool) {
        let op = match op {
            StoreOp::Append(batch) if may_inline && self.events.is_empty() => {
                let started = Instant::now();
                match self.storage.append_inline(&batch) {
                    Some(Ok((zxid, fsync))) => {
                        let appended = batch.len();
                        // Let go of the txns first, so applying can move their data into the tree.
                        drop(batch);
                        self.record_sync(fsync, appended);
                        // Written here, never queued: no wait, and the write is what the fsync left.
                        let total = started.elapsed();
                        self.metrics.record_sync_message(MsgTiming {
                            queue_size: 0,
                            queue_ms: 0,
                            process_ms: millis(total.saturating_sub(fsync.unwrap_or_default())),
                            queue_and_flush_ms: millis(total),
                        });
                        return self.step(DriverEvent::Synced(Report {
                            last: Some(zxid),
                            epochs: Vec::new(),
                            appended,
                        }));
                    }
                    Some(Err(why)) => {
                        tracing::error!(%why, "transaction log write failed; stopping");
                        self.fatal.get_or_insert(Fatal::LogWrite(why));
                        return;
                    }
                    None => StoreOp::Append(batch),
                }
            }
            StoreOp::TruncateAndReload(zxid) => return self.reload(zxid).await,
            op => op,
        };
        if self.storage.send(op.into()).await.is_err() {
            self.fatal.get_or_insert(Fatal::StorageGone);
        }
    }

    /// A TRUNC below the applied tree: the storage thread cuts the log (after everything queued
    /// before) and rebuilds the data from disk, which the driver takes before anything else.
    async fn reload(&mut self, zxid: i64) {
        let (reply, rx) = oneshot::channel();
        let msg = StorageMsg::reload(StoreOp::TruncateAndReload(zxid), reply);
        if self.storage.send(msg).await.is_err() {
            self.fatal.get_or_insert(Fatal::StorageGone);
            return;
        }
        match rx.await {
            Ok(Ok(data)) => self.step(DriverEvent::Reloaded(data)),
            Ok(Err(why)) => {
                tracing::error!(%why, "truncating the log and reloading the data failed; stopping");
                self.fatal.get_or_insert(Fatal::Reload(why));
            }
            Err(_) => {
                self.fatal.get_or_insert(Fatal::StorageGone);
            }
        }
    }

    /// Handles one event; returns the number of inputs it held (at least 1), which counts towards
    /// the loop's batch.
    fn handle(&mut self, ev: Event) -> usize {
        match ev {
            Event::Fatal(why) => self.fatal = Some(why),
            Event::Register { conn, tx } => {
                self.conns.insert(conn, tx);
            }
            Event::Node(input) => self.step(DriverEvent::Node(input)),
            Event::Inputs(inputs) => {
                let n = inputs.len();
                for input in inputs {
                    self.step(DriverEvent::Node(input));
                }
                return n.max(1);
            }
            Event::Synced { report, fsync, timings } => {
                self.record_sync(fsync, report.appended);
                for t in timings {
                    self.metrics.record_sync_message(t);
                }
                let durable = report.last;
                self.step(DriverEvent::Synced(report));
                if let (Some(at), Some((zxid, _, _))) = (durable, &self.restoring) {
                    if at >= *zxid {
                        if let Some((zxid, started, reply)) = self.restoring.take() {
                            self.metrics.restore_time.record(started.elapsed().as_millis() as u64);
                            let _ = reply.send(RestoreAnswer::Done(zxid));
                        }
                    }
                }
            }
            Event::FourLetter { cmd, reply } => {
                self.collect_snapshot_time();
                let text = fourlw::run(cmd, self.driver.node_mut(), &self.cfg, &mut self.metrics);
                let _ = reply.send(text);
            }
            Event::Metrics { reply } => {
                self.collect_snapshot_time();
                let _ = reply.send(crate::metrics::prometheus_text(self.driver.node(), &self.metrics));
            }
            Event::Admin { cmd, args, reply } => {
                self.collect_snapshot_time();
                let links = self.ens.as_ref().and_then(Ensemble::leader_net);
                let answer = crate::admin::commands::run(
                    cmd,
                    &args,
                    self.driver.node_mut(),
                    &self.cfg,
                    &mut self.metrics,
                    links,
                );
                let _ = reply.send(answer);
            }
            Event::AdminSnapshot { authorization, peer, reply } => {
                let _ = reply.send(self.admin_snapshot(authorization.as_deref(), peer));
            }
            Event::AdminRestoreAllowed { authorization, peer, reply } => {
                let _ = reply.send(self.admin_restore_allowed(authorization.as_deref(), peer));
            }
            Event::AdminRestore { snapshot, reply } => self.admin_restore(snapshot, reply),
        }
        1
    }

    /// Handles queued events until `BATCH` (counting `handled` so far) or none is left.
    fn handle_queued(&mut self, mut handled: usize) {
        while handled < BATCH {
            match self.events.try_recv() {
                Ok(ev) => handled += self.handle(ev),
                Err(_) => break,
            }
        }
    }

    /// Sends what was collected for every connection: once per turn of the owner's loop, so that
    /// the replies to a batch of requests, or to a batch of txns found durable, go to each
    /// connection's writer as one message.
    fn send_all_pending(&mut self) {
        // A failed send steps the driver (the connection is gone), which may collect more.
        while !self.pending.is_empty() {
            let mut pending = std::mem::take(&mut self.pending);
            for (conn, p) in pending.drain(..) {
                self.send(conn, p);
            }
            if self.pending.is_empty() {
                // Keep the map's capacity.
                self.pending = pending;
            }
        }
    }

    /// Sends the frames collected for `conn`, if any.
    fn send_pending(&mut self, conn: ConnId) {
        // The order of the rest is only a help to the cache: the last entry may take this slot.
        let Some(p) = self.pending.swap_remove(&conn) else { return };
        self.send(conn, p);
    }

    fn send(&mut self, conn: ConnId, p: Frames) {
        let Some(c) = self.conns.get(&conn) else { return };
        let frames = p.frames as usize;
        let full = c.queued() + frames > CONN_QUEUE;
        let sent = !full && c.push_frames(p);
        if !sent {
            if full {
                tracing::warn!(conn, "client is not reading its replies; closing the connection");
            }
            if let Some(c) = self.conns.remove(&conn) {
                c.push(ConnMsg::Close, 0);
            }
            self.step(DriverEvent::Node(Input::Disconnected { conn }));
        }
    }
}

async fn ens_next(ens: Option<&mut Ensemble>) -> EnsEvent {
    match ens {
        Some(e) => e.next().await,
        None => std::future::pending().await,
    }
}

impl Owner {
    /// Looks for `after` in the on-disk log on a blocking thread, off the owner's turn; the
    /// answer comes back as `Input::LogProbed` (not found if the log cannot be read).
    fn probe_log(&self, to: i64, after: i64) {
        let data = self.log_reader.data.clone();
        let Some(events) = self.log_reader.events.upgrade() else { return };
        tokio::spawn(async move {
            let facts = tokio::task::spawn_blocking(move || data.probe_log(after)).await;
            let probe = match facts {
                Ok(Ok(f)) => {
                    LogProbe { after, found: f.found, log_bytes: f.log_bytes, snapshot_bytes: f.snapshot_bytes }
                }
                Ok(Err(e)) => {
                    tracing::warn!(to, error = %e, "cannot look into the txn log for a DIFF from disk");
                    LogProbe { after, found: false, log_bytes: 0, snapshot_bytes: 0 }
                }
                Err(_) => LogProbe { after, found: false, log_bytes: 0, snapshot_bytes: 0 },
            };
            tracing::info!(
                sid = to,
                after = format_args!("{after:#x}"),
                found = probe.found,
                log_bytes = probe.log_bytes,
                snapshot_bytes = probe.snapshot_bytes,
                "looked into the txn log for a DIFF from disk"
            );
            let _ = events.send(Event::Node(Input::LogProbed { sid: to, probe })).await;
        });
    }
}

pub(crate) fn quorum_setup(cfg: &Config, my_sid: i64, accepted_epoch: i64, current_epoch: i64) -> QuorumSetup {
    let voters = cfg.servers.values().filter(|s| s.role == ServerRole::Participant).map(|s| s.id as i64);
    let mut setup = QuorumSetup::new(my_sid, voters);
    setup.membership = cfg.membership();
    setup.init_limit = cfg.init_limit;
    setup.sync_limit = cfg.sync_limit;
    setup.accepted_epoch = accepted_epoch;
    setup.current_epoch = current_epoch;
    setup.snapshot_size_factor = cfg.snapshot_size_factor;
    setup
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_frame_is_kept_as_it_came_and_more_frames_are_joined_in_order() {
        let note = Bytes::from(b"note".to_vec());
        let (mut a, mut b) = (Frames::default(), Frames::default());
        a.push(note.clone(), false);
        b.push(note.clone(), false);
        // Two watchers of one storm: both hold the one buffer, neither a copy.
        for f in [&a, &b] {
            assert!(matches!(&f.bytes, FrameBytes::One(x) if x.as_ptr() == note.as_ptr()));
        }
        b.push(Bytes::from_static(b"reply"), true);
        assert_eq!((&b.bytes[..], b.frames, b.completes), (&b"notereply"[..], 2, 1));
        assert_eq!(&a.bytes[..], b"note", "joining one connection's frames leaves the shared buffer alone");
        b.bytes.consume(3);
        a.bytes.consume(3);
        assert_eq!((&a.bytes[..], &b.bytes[..]), (&b"e"[..], &b"ereply"[..]));
    }
}
