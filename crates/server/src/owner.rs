//! The one task that owns the `Node`. Connection tasks send it events; it steps the node and carries
//! out the outputs: frames to connection writers, closes, and persistence.
//!
//! Persisted txns are collected while a batch of events is stepped, then handed to the storage thread
//! in one message; the storage thread answers with `Input::Durable`. A standalone owner writes a lone
//! writer's small batch itself when the storage thread is idle (`Storage::append_inline`) and steps
//! `Input::Durable` at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;
use tokio::sync::{mpsc, oneshot, watch};
use warden_node::{Clock, ConnId, Input, Node, NodeConfig, Output, QuorumOutput, QuorumSetup, RoleKind};
use warden_proto::frame::FourLetterWord;
use warden_proto::{Txn, TxnHeader};
use warden_tree::DataTree;

use crate::config::{Config, PeerRole};
use crate::ensemble::{become_input, EnsEvent, Ensemble};
use crate::fourlw;
use crate::snapshot::{SnapshotJob, Snapshots, Start};
use crate::storage::{lone_writer, Batch, Storage, StorageMsg};

/// Bound of the queue from connection tasks to the owner.
pub(crate) const EVENT_QUEUE: usize = 4096;
/// Frames buffered for one connection's writer; a client that lets this fill is disconnected.
/// Counted in frames (`ConnTx::queued`), not messages: a message carries many.
pub(crate) const CONN_QUEUE: usize = 16_384;
/// Events stepped per batch before persisted txns are reported durable.
const BATCH: usize = 256;
/// Standalone: durable txns applied per turn of the owner's loop (by zxid, which a standalone
/// server numbers consecutively). Between chunks the loop yields, so the connection writers send
/// the replies of one chunk while the next is applied, and handles the events that came in: the
/// clients answer early replies with new requests, and the storage thread gets their txns while
/// the rest of the batch is applied, instead of the owner and the storage thread taking turns with
/// every request in flight (a batch's fsync, then its apply: each idle while the other works).
const DURABLE_CHUNK: i64 = 64;

pub(crate) enum Event {
    /// Storage failed; the server must stop rather than go on with a hole in its log.
    Fatal(String),
    Register {
        conn: ConnId,
        tx: ConnTx,
    },
    Node(Input),
    /// Inputs from one connection, in order (the requests one read brought).
    Inputs(Vec<Input>),
    FourLetter {
        cmd: FourLetterWord,
        reply: oneshot::Sender<String>,
    },
}

/// The owner's end of a connection's writer queue.
pub(crate) struct ConnTx {
    pub tx: mpsc::Sender<ConnMsg>,
    /// Frames sent and not yet written; the writer takes off what it wrote.
    pub queued: Arc<AtomicUsize>,
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
    pub bytes: Vec<u8>,
    pub frames: u32,
    pub completes: u32,
}

impl Frames {
    /// Appends one frame (the first is taken as it is, not copied).
    fn push(&mut self, frame: Vec<u8>, completes_request: bool) {
        if self.bytes.is_empty() {
            self.bytes = frame;
        } else {
            self.bytes.extend_from_slice(&frame);
        }
        self.frames += 1;
        self.completes += u32::from(completes_request);
    }
}

/// Collected frames for one connection go out once they reach this many bytes, so that a large
/// turn does not copy a growing buffer over and over; a frame this large goes out alone.
const PENDING_BYTES: usize = 64 * 1024;

pub(crate) struct Owner {
    cfg: Arc<Config>,
    node: Node,
    conns: HashMap<ConnId, ConnTx>,
    events: mpsc::Receiver<Event>,
    shutdown: watch::Receiver<bool>,
    started: Instant,
    mono_base_ms: u64,
    out: Vec<Output>,
    /// Frames of the current turn of the loop, per connection: each connection's writer gets one
    /// message per turn (or per 64 KiB) instead of one per frame.
    pending: HashMap<ConnId, Frames>,
    /// Txns persisted while stepping the current batch of events, for the storage thread.
    to_persist: Batch,
    storage: Storage,
    snapshots: Snapshots,
    /// zxid of the last snapshot taken (or recovered from).
    last_snapshot_zxid: i64,
    /// Txns between snapshots: random in [snapCount/2 + 1, snapCount], so servers do not snapshot together.
    snap_threshold: i64,
    fatal: Option<String>,
    /// Quorum mode: the election and quorum ports.
    ens: Option<Ensemble>,
    /// Quorum outputs not yet carried out, in order.
    qpending: VecDeque<QuorumOutput>,
    /// A decision waiting until every persisted txn is durable (the node's contract for `Become*`).
    decision: Option<warden_quorum::Elected>,
    /// Highest zxid handed to the storage thread, and highest reported durable.
    persisted: i64,
    durable: i64,
    /// Standalone: the highest zxid stepped as durable. Up to `durable`, the rest is applied
    /// `DURABLE_CHUNK` txns per turn of the loop.
    applied_to: i64,
    /// The session that wrote every txn of the previous batch, if one did.
    last_writer: Option<i64>,
}

impl Owner {
    pub(crate) fn new(
        cfg: Arc<Config>,
        events: mpsc::Receiver<Event>,
        shutdown: watch::Receiver<bool>,
        storage: Storage,
        snapshots: Snapshots,
        quorum: Option<(Ensemble, QuorumSetup)>,
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
            container_check_interval_ms: cfg.container_check_interval_ms,
            read_only_enabled: cfg.read_only,
        };
        let mono_base_ms = wall.max(0) as u64;
        let now = Clock { mono_ms: mono_base_ms, wall_ms: wall };
        let node = match &quorum {
            Some((_, setup)) => Node::new_quorum(node_cfg, setup.clone(), now),
            None => Node::new(node_cfg, now),
        };
        let snap_threshold = snap_threshold(cfg.snap_count);
        Self {
            cfg,
            node,
            conns: HashMap::new(),
            events,
            shutdown,
            started: Instant::now(),
            mono_base_ms,
            out: Vec::new(),
            pending: HashMap::new(),
            to_persist: Vec::new(),
            storage,
            snapshots,
            last_snapshot_zxid: 0,
            snap_threshold,
            fatal: None,
            ens: quorum.map(|(e, _)| e),
            qpending: VecDeque::new(),
            decision: None,
            persisted: 0,
            durable: 0,
            applied_to: 0,
            last_writer: None,
        }
    }

    /// Starts from recovered data. Like ZooKeeper, takes a snapshot at start-up unless the newest one
    /// already holds everything, so the data directory always has a snapshot to start from.
    /// `replayed`: the log txns replayed after the snapshot (the node keeps their tail as its
    /// in-memory history for DIFF sync).
    pub(crate) fn restore(
        &mut self,
        tree: DataTree,
        sessions: &[(i64, i32)],
        replayed: Vec<(TxnHeader, Txn)>,
        snapshot_zxid: i64,
        had_snapshot: bool,
    ) {
        let zxid = tree.last_processed_zxid();
        self.persisted = zxid;
        self.durable = zxid;
        self.applied_to = zxid;
        self.node.restore(tree, sessions, replayed);
        self.last_snapshot_zxid = snapshot_zxid;
        if !had_snapshot || zxid != snapshot_zxid {
            self.take_snapshot();
        }
    }

    /// Hands the current state to the snapshot thread and rolls the log; skipped (with a warning) if
    /// the previous snapshot is still being written, as ZooKeeper does.
    fn take_snapshot(&mut self) {
        let zxid = self.node.last_processed_zxid();
        self.last_snapshot_zxid = zxid;
        self.snap_threshold = snap_threshold(self.cfg.snap_count);
        // The log rolls either way, as ZooKeeper's SyncRequestProcessor rolls it before it asks for
        // the snapshot thread. Queued behind every batch sent so far; the storage thread is never
        // blocked here.
        if self.storage.try_send(StorageMsg::Roll).is_err() {
            tracing::debug!("storage queue full; the log rolls at the next snapshot");
        }
        let node = &self.node;
        let job = || {
            let (tree, sessions) = node.snapshot_state();
            SnapshotJob { tree, sessions, zxid }
        };
        match self.snapshots.try_start(job) {
            Start::Started => {}
            Start::Busy => tracing::warn!("too busy to snapshot; skipping"),
            Start::Gone => tracing::warn!("the snapshot thread has ended; skipping"),
        }
    }

    fn clock(&self) -> Clock {
        Clock { mono_ms: self.mono_base_ms + self.started.elapsed().as_millis() as u64, wall_ms: wall_ms() }
    }

    pub(crate) async fn run(mut self) -> anyhow::Result<()> {
        let tick = Duration::from_millis(self.cfg.tick_time_ms as u64);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.ens.is_none() && self.applied_to < self.durable {
                // The writers send the last chunk's replies, the readers bring what came in.
                tokio::task::yield_now().await;
                self.step_durable_chunk();
                self.handle_queued(0);
            } else {
                tokio::select! {
                    ev = self.events.recv() => {
                        let Some(ev) = ev else { break };
                        let n = self.handle(ev);
                        self.handle_queued(n);
                    }
                    _ = ticker.tick() => self.step(Input::Tick),
                    _ = self.shutdown.changed() => break,
                    ev = ens_next(self.ens.as_mut()) => match ev {
                        EnsEvent::Decided(e) => {
                            tracing::info!(leader = e.leader, state = ?e.state, epoch = e.epoch, "election decided");
                            self.decision = Some(e);
                        }
                        EnsEvent::Node(input) => self.step(input),
                    },
                }
            }
            self.carry_quorum().await;
            self.flush_persist().await;
            if self.decision.is_some() && self.durable >= self.persisted {
                self.take_decision().await;
                self.carry_quorum().await;
                self.flush_persist().await;
            }
            if self.node.last_processed_zxid() - self.last_snapshot_zxid >= self.snap_threshold {
                self.take_snapshot();
            }
            self.send_all_pending();
            if self.fatal.is_some() {
                break;
            }
        }
        self.send_all_pending();
        for (_, c) in self.conns.drain() {
            let _ = c.tx.try_send(ConnMsg::Close);
        }
        if let Some(ens) = self.ens.take() {
            ens.stop().await;
        }
        match self.fatal {
            Some(why) => Err(anyhow::anyhow!(why)),
            None => Ok(()),
        }
    }

    async fn flush_persist(&mut self) {
        while !self.to_persist.is_empty() {
            let batch = std::mem::take(&mut self.to_persist);
            if let Some((hdr, _)) = batch.last() {
                self.persisted = self.persisted.max(hdr.zxid);
            }
            // Standalone only (in quorum mode durability also orders ACKs and epoch files), and only
            // for a lone writer with nothing else waiting: an fsync here holds the owner up.
            let lone = lone_writer(&batch, &mut self.last_writer);
            if self.ens.is_none() && lone && self.events.is_empty() {
                match self.storage.append_inline(&batch) {
                    Some(Ok(zxid)) => {
                        // Let go of the txns first, so applying can move their data into the tree.
                        drop(batch);
                        // As if the storage thread had reported it. Applying may persist more (it
                        // does not today): the loop writes that too.
                        self.handle(Event::Node(Input::Durable { zxid }));
                        continue;
                    }
                    Some(Err(why)) => {
                        tracing::error!(%why, "transaction log write failed; stopping");
                        self.fatal.get_or_insert_with(|| format!("transaction log write failed: {why}"));
                        return;
                    }
                    None => {}
                }
            }
            if self.storage.send(StorageMsg::Append(batch)).await.is_err() {
                self.fatal.get_or_insert_with(|| "storage thread ended".into());
            }
            return;
        }
    }

    async fn send_storage(&mut self, msg: StorageMsg) {
        self.flush_persist().await;
        if self.storage.send(msg).await.is_err() {
            self.fatal.get_or_insert_with(|| "storage thread ended".into());
        }
    }

    /// Carries out an election decision: a leader opens its quorum port first, then the node takes
    /// the role (a learner dials its leader when the node sends its first packet).
    async fn take_decision(&mut self) {
        let Some(e) = self.decision.take() else { return };
        let Some(ens) = self.ens.as_mut() else { return };
        let Some(input) = become_input(&e, ens.my_sid) else {
            tracing::warn!(?e, "election decided nothing this server can act on; electing again");
            return self.elect().await;
        };
        if matches!(input, Input::BecomeLeader) {
            if let Err(e) = ens.start_leading().await {
                tracing::error!(error = %e, "cannot open the quorum port; electing again");
                tokio::time::sleep(Duration::from_millis(200)).await;
                return self.elect().await;
            }
        }
        self.step(input);
    }

    async fn reload_below(&mut self, zxid: i64) {
        let (reply, rx) = oneshot::channel();
        self.send_storage(StorageMsg::TruncateAndReload { zxid, reply }).await;
        match rx.await {
            Ok(Ok((tree, sessions, replayed))) => {
                let at = tree.last_processed_zxid();
                tracing::info!(
                    zxid = format_args!("{zxid:#x}"),
                    tree = format_args!("{at:#x}"),
                    "log truncated; data reloaded from storage"
                );
                self.node.restore(tree, &sessions, replayed);
                self.persisted = at;
                self.durable = at;
            }
            Ok(Err(why)) => {
                self.fatal.get_or_insert(format!("truncating and reloading the data: {why}"));
            }
            Err(_) => {
                self.fatal.get_or_insert_with(|| "storage thread ended".into());
            }
        }
    }

    async fn elect(&mut self) {
        let last_zxid = self.node.last_processed_zxid();
        let current_epoch = self.node.epochs().map_or(0, |(_, c)| c);
        if let Some(ens) = self.ens.as_mut() {
            ens.elect(last_zxid, current_epoch).await;
        }
    }

    /// Carries out the node's quorum outputs in order (stepping the node may add more).
    async fn carry_quorum(&mut self) {
        while let Some(o) = self.qpending.pop_front() {
            let Some(ens) = self.ens.as_mut() else { continue };
            match o {
                QuorumOutput::PeerSend { to, packet } => {
                    let learner = matches!(self.node.role(), RoleKind::Follower | RoleKind::Observer);
                    if learner && ens.learner_needs_dial() {
                        if let Err(e) = ens.connect_learner(to, packet).await {
                            tracing::warn!(leader = to, error = %e, "cannot connect to the leader");
                            self.step(Input::PeerDisconnected { sid: to });
                        }
                    } else {
                        ens.send(to, packet);
                    }
                }
                QuorumOutput::PeerClose { sid, reason } => ens.close(sid, &reason),
                QuorumOutput::PersistEpoch { kind, epoch } => {
                    self.send_storage(StorageMsg::Epoch { kind, epoch }).await
                }
                QuorumOutput::Truncate { zxid } => {
                    self.persisted = self.persisted.min(zxid);
                    self.durable = self.durable.min(zxid);
                    if self.node.last_processed_zxid() > zxid {
                        // The tree applied txns the leader cut (this server's own uncommitted
                        // proposals, recovered at start-up): rebuild it from storage, as ZooKeeper
                        // reloads its database. The node already gave up its role (Elect follows).
                        self.reload_below(zxid).await;
                    } else {
                        self.send_storage(StorageMsg::Truncate(zxid)).await
                    }
                }
                QuorumOutput::SendSnapshot { to, snapshot } => ens.send_snapshot(to, snapshot),
                QuorumOutput::InstallSnapshot { snapshot } => {
                    let zxid = snapshot.zxid;
                    tracing::info!(zxid = format_args!("{zxid:#x}"), "installing the leader's snapshot");
                    self.persisted = zxid;
                    self.durable = self.durable.min(zxid);
                    self.last_snapshot_zxid = zxid;
                    let msg = StorageMsg::InstallSnapshot { tree: snapshot.tree, sessions: snapshot.sessions, zxid };
                    self.send_storage(msg).await
                }
                QuorumOutput::Serving { epoch } => {
                    tracing::info!(epoch, role = ?self.node.role(), "serving clients");
                    ens.settled(epoch).await;
                }
                QuorumOutput::Elect { reason } => {
                    tracing::info!(%reason, "leaving the role; electing a leader");
                    self.elect().await;
                }
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
            Event::Node(input) => self.input(input),
            Event::Inputs(inputs) => {
                let n = inputs.len();
                for input in inputs {
                    self.input(input);
                }
                return n.max(1);
            }
            Event::FourLetter { cmd, reply } => {
                let text = fourlw::run(cmd, &mut self.node, &self.cfg, self.started.elapsed().as_millis() as u64);
                let _ = reply.send(text);
            }
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

    fn input(&mut self, input: Input) {
        if let Input::Durable { zxid } = input {
            self.durable = self.durable.max(zxid);
            if self.ens.is_none() {
                // The first chunk now; the loop applies the rest.
                self.step_durable_chunk();
                return;
            }
        }
        self.step(input)
    }

    /// Standalone: applies the next chunk of the txns reported durable.
    fn step_durable_chunk(&mut self) {
        if let Some(to) = durable_chunk_end(self.applied_to, self.node.last_processed_zxid(), self.durable) {
            self.applied_to = to;
            self.step(Input::Durable { zxid: to });
        }
    }

    fn step(&mut self, input: Input) {
        let now = self.clock();
        if let Input::Disconnected { conn } = &input {
            self.conns.remove(conn);
        }
        self.node.step(now, input, &mut self.out);
        self.dispatch();
    }

    fn dispatch(&mut self) {
        while !self.out.is_empty() {
            self.dispatch_batch();
        }
    }

    fn dispatch_batch(&mut self) {
        let mut out = std::mem::take(&mut self.out);
        for o in out.drain(..) {
            match o {
                Output::Send { conn, frame, completes_request } => {
                    if frame.len() >= PENDING_BYTES {
                        // A large reply goes to the writer on its own, as it is: what was collected
                        // before it goes first, and it is never copied into a collecting buffer.
                        self.send_pending(conn);
                    }
                    let p = self.pending.entry(conn).or_default();
                    p.push(frame, completes_request);
                    if p.bytes.len() >= PENDING_BYTES {
                        self.send_pending(conn);
                    }
                }
                Output::Close { conn } => {
                    // What was collected for it goes first.
                    self.send_pending(conn);
                    if let Some(c) = self.conns.remove(&conn) {
                        let _ = c.tx.try_send(ConnMsg::Close);
                    }
                }
                Output::Persist { hdr, txn } => self.to_persist.push((hdr, txn)),
                Output::Quorum(q) => self.qpending.push_back(q),
            }
        }
        // Keep the buffer's capacity for the next step, unless a failed send queued more.
        if self.out.is_empty() {
            self.out = out;
        }
    }

    /// Sends what was collected for every connection: once per turn of the owner's loop, so that
    /// the replies to a batch of requests, or to a batch of txns found durable, go to each
    /// connection's writer as one message.
    fn send_all_pending(&mut self) {
        // A failed send steps the node (the connection is gone), whose outputs may collect more.
        while !self.pending.is_empty() || !self.out.is_empty() {
            let mut pending = std::mem::take(&mut self.pending);
            for (conn, p) in pending.drain() {
                self.send(conn, p);
            }
            if self.pending.is_empty() {
                // Keep the map's capacity.
                self.pending = pending;
            }
            self.dispatch();
        }
    }

    /// Sends the frames collected for `conn`, if any.
    fn send_pending(&mut self, conn: ConnId) {
        let Some(p) = self.pending.remove(&conn) else { return };
        self.send(conn, p);
    }

    fn send(&mut self, conn: ConnId, p: Frames) {
        let Some(c) = self.conns.get(&conn) else { return };
        let frames = p.frames as usize;
        let full = c.queued.load(Ordering::Acquire) + frames > CONN_QUEUE;
        let sent = !full && {
            c.queued.fetch_add(frames, Ordering::AcqRel);
            c.tx.try_send(ConnMsg::Frames(p)).is_ok()
        };
        if !sent {
            if full {
                tracing::warn!(conn, "client is not reading its replies; closing the connection");
            }
            self.conns.remove(&conn);
            self.out.push(Output::Close { conn });
            let now = self.clock();
            self.node.step(now, Input::Disconnected { conn }, &mut self.out);
        }
    }
}

async fn ens_next(ens: Option<&mut Ensemble>) -> EnsEvent {
    match ens {
        Some(e) => e.next().await,
        None => std::future::pending().await,
    }
}

/// The node's view of the ensemble from zoo.cfg: voters are the participants.
pub(crate) fn quorum_setup(cfg: &Config, my_sid: i64, accepted_epoch: i64, current_epoch: i64) -> QuorumSetup {
    let voters = cfg.servers.values().filter(|s| s.role == PeerRole::Participant).map(|s| s.id as i64);
    let mut setup = QuorumSetup::new(my_sid, voters);
    setup.init_limit = cfg.init_limit;
    setup.sync_limit = cfg.sync_limit;
    setup.accepted_epoch = accepted_epoch;
    setup.current_epoch = current_epoch;
    setup
}

fn snap_threshold(snap_count: u64) -> i64 {
    let snap_count = snap_count.max(2);
    rand::thread_rng().gen_range(snap_count / 2 + 1..=snap_count) as i64
}

/// The zxid to step as durable next: `DURABLE_CHUNK` past what was stepped (or processed), at most
/// `durable`; `None` once everything durable has been stepped.
fn durable_chunk_end(applied_to: i64, processed: i64, durable: i64) -> Option<i64> {
    let to = durable.min(applied_to.max(processed).saturating_add(DURABLE_CHUNK));
    (to > applied_to).then_some(to)
}

fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_txns_are_stepped_a_chunk_at_a_time() {
        assert_eq!(durable_chunk_end(100, 100, 300), Some(100 + DURABLE_CHUNK));
        assert_eq!(durable_chunk_end(100 + DURABLE_CHUNK, 100 + DURABLE_CHUNK, 300), Some(100 + 2 * DURABLE_CHUNK));
        assert_eq!(durable_chunk_end(290, 290, 300), Some(300), "the last chunk ends at what is durable");
        assert_eq!(durable_chunk_end(300, 300, 300), None);
        // Restored or processed beyond what was stepped: the chunk starts there.
        assert_eq!(durable_chunk_end(0, 5000, 5010), Some(5010));
        assert_eq!(durable_chunk_end(0, 5000, 5000), Some(5000));
        assert_eq!(durable_chunk_end(5000, 5000, 4000), None);
    }
}
