//! The driver: the orchestration between one server's [`Node`], its election and its storage,
//! as a pure state machine. Events go in ([`Driver::step`]); commands come out, in the order they
//! must be carried out. The server's owner task and the simulator's world both run this one
//! driver and only carry out its commands over real or simulated I/O, so the orchestration the
//! simulator checks is the orchestration the server runs.
//!
//! What the driver decides (and no shell does):
//! - **Group commit.** Txns the node persists are collected and handed to storage as one
//!   `StoreOp::Append` at the end of the shell's turn ([`Driver::end_turn`]), or earlier when a
//!   storage op that must follow them comes up (an epoch file, a TRUNC, a snapshot install).
//!   Storage carries ops out in order and reports what is durable with [`Event::Synced`].
//! - **A lone writer** (standalone): a batch written by the session that also wrote the batch
//!   before it is marked `may_inline`; a shell whose storage is idle may append and sync it on the
//!   spot and report `Synced` at once (one fdatasync, no thread hand-off).
//! - **Chunked apply** (standalone): a large `Synced` is applied `DURABLE_CHUNK` txns at a time
//!   ([`Driver::apply_chunk`] while [`Driver::unapplied`]); the shell yields between chunks, so
//!   the replies of one chunk go out while the next is applied.
//! - **The election decision** is held until every persisted txn is durable (the node's contract
//!   for `Become*`), and dropped when the node asks for a new election meanwhile. A leader's
//!   quorum port is opened first (`Command::Lead`, answered by [`Event::Leading`]).
//! - **TRUNC**: a cut at or above the applied tree is a `StoreOp::Truncate`; below it, a
//!   `StoreOp::TruncateAndReload`, which the shell answers with [`Event::Reloaded`] before any
//!   other event (the node is rebuilt from disk, as ZooKeeper reloads its database).
//! - **Snapshots**: every [snapCount/2+1, snapCount] txns (jittered so servers do not snapshot
//!   together), never while LOOKING (a LOOKING node's tree may hold txns a new leader cuts): the
//!   log rolls (`StoreOp::Roll`) and `Command::Snapshot` hands the tree over. A shell whose
//!   snapshot writer is still busy skips the snapshot, as ZooKeeper's SyncRequestProcessor does.
//!
//! Architecture invariant: the driver performs no I/O and reads no clock; time comes in with each
//! call and randomness from the seed in [`DriverConfig`].

use std::sync::Arc;

use warden_node::{Clock, ConnId, Input, Node, Output, QuorumOutput, RestoreRefused, RoleKind, SnapshotData};
use warden_proto::election::ServerState;
use warden_proto::quorum::QuorumPacket;
use warden_proto::{ensure, Txn, TxnHeader};
use warden_quorum::zab::EpochKind;
use warden_quorum::{Elected, Sid};
use warden_storage::{EpochFile, Reloaded, Report, StoreOp};
use warden_tree::DataTree;

/// Standalone: durable txns applied per [`Driver::apply_chunk`] by default (by zxid, which a
/// standalone server numbers consecutively; `DriverConfig::durable_chunk`). Between chunks the shell yields, so its connection writers send
/// the replies of one chunk while the next is applied, and the requests clients send back reach
/// storage before the whole batch is applied: the node and storage overlap instead of taking
/// turns (a batch's fsync, then its apply, each idle while the other works).
pub const DURABLE_CHUNK: i64 = 64;

/// A batch of txns for the log.
pub type Batch = Vec<(TxnHeader, Arc<Txn>)>;

/// How the driver is set up.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// This server's id in an ensemble; `None` when standalone.
    pub my_sid: Option<Sid>,
    /// ZooKeeper's snapCount: a snapshot every [snapCount/2+1, snapCount] txns.
    pub snap_count: u64,
    /// Seeds the jitter of the snapshot interval.
    pub seed: u64,
    /// Standalone: txns applied per `apply_chunk` (the server: [`DURABLE_CHUNK`]; the simulator
    /// uses a small one, so its few clients exercise the chunking).
    pub durable_chunk: i64,
}

/// What happened, for the driver.
#[derive(Debug)]
pub enum Event {
    /// A node input from a client connection, the timer or the quorum port. Never `Durable`,
    /// `EpochDurable` or `Become*`: those come from storage and from the driver itself.
    Node(Input),
    /// Storage synced what it reports (the answer to `Command::Store` ops).
    Synced(Report),
    /// The election decided for this server.
    Decided(Elected),
    /// The leader's quorum port is open (`Ok`), or could not be opened.
    Leading(Result<(), String>),
    /// The data rebuilt from disk after `StoreOp::TruncateAndReload`.
    Reloaded(Reloaded),
}

/// What the shell must do, in order.
#[derive(Debug)]
pub enum Command {
    /// Write this complete frame to a client connection (see `Output::Send`).
    Send { conn: ConnId, frame: bytes::Bytes, completes_request: bool },
    /// Close a client connection once what was sent before is flushed.
    Close { conn: ConnId },
    /// Storage work, in order behind every earlier one. `may_inline`: a lone writer's append,
    /// which a shell whose storage is idle may carry out and sync on the spot.
    Store { op: StoreOp, may_inline: bool },
    /// Write this snapshot (unless a snapshot is still being written).
    Snapshot { tree: DataTree, sessions: Vec<(i64, i32)>, zxid: i64 },
    /// Write `packet` on the quorum connection of `to`.
    PeerSend { to: Sid, packet: QuorumPacket },
    /// Write this snapshot stream to `to`, right after the SNAP packet sent before it.
    SendSnapshot { to: Sid, snapshot: SnapshotData },
    /// Leader: look in the on-disk txn log for the record `after` and measure the log after it
    /// (warden-storage's `probe_log`), off the shell's turn, then step `Event::Node(Input::LogProbed)`.
    /// Reads only: it need not wait for storage ops before it.
    ProbeLog { to: Sid, after: i64 },
    /// Leader: right after the DIFF packet sent before it, write the on-disk log's txns
    /// `(after, upto]` to `to` as PROPOSAL + COMMIT pairs (storage's `read_log_range`, in bounded
    /// chunks), ahead of every later packet for `to`: the shell holds that learner's later packets
    /// until the stream is written. The range is durable (the leader committed it). On failure:
    /// close the connection and step `Event::Node(Input::LogDiffFailed)`.
    SendLogDiff { to: Sid, after: i64, upto: i64 },
    /// Close the quorum connection of `sid`.
    PeerClose { sid: Sid, reason: String },
    /// Open the leader's quorum port, then answer `Event::Leading`.
    Lead,
    /// Leave the role's quorum connections and start an election round with [`Driver::vote`],
    /// read when the command is carried out (a reload before it changes it). With `flush`, a
    /// leader's connections deliver what was queued on them first (`QuorumOutput::Elect`).
    Elect { reason: String, flush: bool },
    /// Leave the role's quorum connections and take `leader`, designated by a reconfig's commit
    /// for the configuration of version `zxid`, as the election's decision without a round
    /// (`FastLeaderElection::hand_over`), reported back as `Event::Decided`.
    HandOver { leader: Sid, zxid: i64 },
    /// The role is established in `epoch` (election answers carry it from now on).
    Serving { epoch: i64 },
    /// A new configuration is active: the election and the peers follow it, and (with
    /// `reconfigEnabled`) the dynamic config file is rewritten.
    Reconfigured { membership: warden_proto::Membership },
}

/// The snapshot interval: the zxid of the last snapshot and the txns until the next one.
#[derive(Debug)]
struct SnapshotPolicy {
    snap_count: u64,
    last_zxid: i64,
    threshold: i64,
    /// xorshift64* state for the jitter.
    rng: u64,
}

impl SnapshotPolicy {
    fn new(snap_count: u64, seed: u64) -> Self {
        let mut p = SnapshotPolicy { snap_count: snap_count.max(2), last_zxid: 0, threshold: 0, rng: seed | 1 };
        p.threshold = p.next_threshold();
        p
    }

    /// A random count in [snapCount/2 + 1, snapCount].
    fn next_threshold(&mut self) -> i64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let low = self.snap_count / 2 + 1;
        (low + r % (self.snap_count - low + 1)) as i64
    }
}

/// One server's orchestration; see the crate documentation.
pub struct Driver {
    node: Node,
    my_sid: Option<Sid>,
    /// Highest zxid handed to storage, and highest reported durable.
    persisted: i64,
    durable: i64,
    /// Standalone: the highest zxid stepped as durable; up to `durable`, the rest is applied
    /// `DURABLE_CHUNK` txns per `apply_chunk`.
    applied_to: i64,
    /// Txns persisted since the last flush, for one `StoreOp::Append`.
    to_persist: Batch,
    /// The session that wrote every txn of the previous batch, if one did.
    last_writer: Option<i64>,
    /// A decision waiting until every persisted txn is durable.
    decision: Option<Elected>,
    snapshots: SnapshotPolicy,
    durable_chunk: i64,
    /// The node's output buffer, reused from one step to the next.
    out: Vec<Output>,
}

impl Driver {
    pub fn new(node: Node, cfg: DriverConfig) -> Driver {
        Driver {
            node,
            my_sid: cfg.my_sid,
            persisted: 0,
            durable: 0,
            applied_to: 0,
            to_persist: Vec::new(),
            last_writer: None,
            decision: None,
            snapshots: SnapshotPolicy::new(cfg.snap_count, cfg.seed),
            durable_chunk: cfg.durable_chunk.max(1),
            out: Vec::new(),
        }
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The node, for what does not go through events (four-letter words resetting counters).
    pub fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }

    /// Starts from recovered data: the tree, its sessions and the log txns replayed after the
    /// snapshot (`snapshot_zxid`, `None` when no snapshot was loaded). Like ZooKeeper, takes a
    /// snapshot at once unless the newest one already holds everything, so the data directory
    /// always has a snapshot to start from.
    pub fn restore(
        &mut self,
        tree: DataTree,
        sessions: &[(i64, i32)],
        replayed: Vec<(TxnHeader, Txn)>,
        snapshot_zxid: Option<i64>,
        cmds: &mut Vec<Command>,
    ) {
        let zxid = self.load(tree, sessions, replayed);
        self.snapshots.last_zxid = snapshot_zxid.unwrap_or(0);
        if snapshot_zxid != Some(zxid) {
            self.take_snapshot(cmds);
        }
    }

    /// Data read from disk replaces the node's: everything up to its zxid is persisted, durable
    /// and applied. Returns that zxid.
    fn load(&mut self, tree: DataTree, sessions: &[(i64, i32)], replayed: Vec<(TxnHeader, Txn)>) -> i64 {
        let zxid = tree.last_processed_zxid();
        self.persisted = zxid;
        self.durable = zxid;
        self.applied_to = zxid;
        self.node.restore(tree, sessions, replayed);
        zxid
    }

    /// The admin `restore` command: `snapshot` replaces a standalone server's data
    /// ([`Node::replace_data`]). Storage installs it (the snapshot written durably, every log
    /// record and snapshot above its zxid removed) behind everything handed to it before, so a
    /// write acknowledged after the restore finds it on disk. Refused while anything persisted is
    /// not durable and applied yet.
    pub fn replace_data(&mut self, snapshot: SnapshotData, cmds: &mut Vec<Command>) -> Result<(), RestoreRefused> {
        if let Some(why) = self.replace_data_refused() {
            return Err(why);
        }
        let SnapshotData { zxid, tree, sessions } = snapshot;
        let mut out = std::mem::take(&mut self.out);
        let replaced = self.node.replace_data((*tree).clone(), &sessions, &mut out);
        for o in out.drain(..) {
            if let Output::Close { conn } = o {
                cmds.push(Command::Close { conn });
            }
        }
        self.out = out;
        replaced?;
        tracing::info!(zxid = format_args!("{zxid:#x}"), "data replaced by a restored snapshot");
        self.persisted = zxid;
        self.durable = zxid;
        self.applied_to = zxid;
        self.snapshots.last_zxid = zxid;
        self.store(StoreOp::Install { tree, sessions, zxid }, cmds);
        Ok(())
    }

    /// Why [`Driver::replace_data`] would refuse now, if it would.
    pub fn replace_data_refused(&self) -> Option<RestoreRefused> {
        if self.my_sid.is_some() {
            Some(RestoreRefused::Ensemble)
        } else if !self.to_persist.is_empty() || self.persisted != self.durable || self.applied_to != self.durable {
            Some(RestoreRefused::WritesInFlight)
        } else {
            None
        }
    }

    /// The vote an election round starts with: (last zxid, current epoch).
    pub fn vote(&self) -> (i64, i64) {
        (self.node.last_processed_zxid(), self.node.epochs().map_or(0, |(_, current)| current))
    }

    /// Handles one event.
    pub fn step(&mut self, now: Clock, ev: Event, cmds: &mut Vec<Command>) {
        match ev {
            Event::Node(input) => {
                debug_assert!(
                    !matches!(
                        input,
                        Input::Durable { .. }
                            | Input::EpochDurable { .. }
                            | Input::BecomeLeader
                            | Input::BecomeFollower { .. }
                            | Input::BecomeObserver { .. }
                    ),
                    "{input:?} comes from storage or the driver, not the shell"
                );
                self.step_node(now, input, cmds);
            }
            Event::Synced(report) => self.synced(now, report, cmds),
            Event::Decided(e) => self.decision = Some(e),
            Event::Leading(Ok(())) => self.step_node(now, Input::BecomeLeader, cmds),
            Event::Leading(Err(why)) => {
                tracing::error!(%why, "cannot open the quorum port; electing again");
                self.elect(format!("cannot lead: {why}"), false, cmds);
            }
            Event::Reloaded((tree, sessions, replayed)) => {
                let at = self.load(tree, &sessions, replayed);
                tracing::info!(tree = format_args!("{at:#x}"), "log truncated; data reloaded from storage");
            }
        }
    }

    /// The end of the shell's turn (a batch of events): what was persisted goes to storage as
    /// one append, a decision whose txns are durable is taken, a due snapshot is taken.
    pub fn end_turn(&mut self, now: Clock, cmds: &mut Vec<Command>) {
        self.flush(cmds);
        if self.decision.is_some() && self.durable >= self.persisted {
            self.take_decision(now, cmds);
            self.flush(cmds);
        }
        let due = self.node.last_processed_zxid() - self.snapshots.last_zxid >= self.snapshots.threshold;
        if due && self.node.role() != RoleKind::Looking {
            self.take_snapshot(cmds);
        }
    }

    /// Standalone: txns reported durable and not applied yet (apply them with `apply_chunk`).
    pub fn unapplied(&self) -> bool {
        self.my_sid.is_none() && self.applied_to < self.durable
    }

    /// Standalone: applies the next chunk of the txns reported durable.
    pub fn apply_chunk(&mut self, now: Clock, cmds: &mut Vec<Command>) {
        let processed = self.node.last_processed_zxid();
        if let Some(to) = durable_chunk_end(self.applied_to, processed, self.durable, self.durable_chunk) {
            self.applied_to = to;
            self.step_node(now, Input::Durable { zxid: to }, cmds);
        }
    }

    /// Every machine's invariants, and the driver's own: nothing is durable that was not handed
    /// to storage, and (standalone) nothing applied that is not durable.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_own_invariants()?;
        self.node.check_invariants()
    }

    /// The invariants that cost nothing to check, the driver's own and the node's cheap ones: the
    /// server checks them after every turn, in release builds too.
    pub fn check_cheap_invariants(&self) -> Result<(), String> {
        self.check_own_invariants()?;
        self.node.check_cheap_invariants()
    }

    fn check_own_invariants(&self) -> Result<(), String> {
        let persisted = self.to_persist.last().map_or(self.persisted, |(h, _)| h.zxid.max(self.persisted));
        ensure!(self.durable <= persisted, "durable {:#x} above persisted {persisted:#x}", self.durable);
        if self.my_sid.is_none() {
            ensure!(
                self.applied_to <= self.durable,
                "applied {:#x} above durable {:#x}",
                self.applied_to,
                self.durable
            );
        }
        Ok(())
    }

    fn synced(&mut self, now: Clock, report: Report, cmds: &mut Vec<Command>) {
        if let Some(zxid) = report.last {
            self.durable = self.durable.max(zxid);
            if self.my_sid.is_none() {
                // The first chunk now; the shell applies the rest.
                self.apply_chunk(now, cmds);
            } else {
                self.step_node(now, Input::Durable { zxid }, cmds);
            }
        }
        for (which, epoch) in report.epochs {
            let kind = match which {
                EpochFile::Accepted => EpochKind::Accepted,
                EpochFile::Current => EpochKind::Current,
            };
            self.step_node(now, Input::EpochDurable { kind, epoch }, cmds);
        }
    }

    fn step_node(&mut self, now: Clock, input: Input, cmds: &mut Vec<Command>) {
        let mut out = std::mem::take(&mut self.out);
        self.node.step(now, input, &mut out);
        for o in out.drain(..) {
            match o {
                Output::Send { conn, frame, completes_request } => {
                    cmds.push(Command::Send { conn, frame, completes_request })
                }
                Output::Close { conn } => cmds.push(Command::Close { conn }),
                Output::Persist { hdr, txn } => self.to_persist.push((hdr, txn)),
                Output::Quorum(q) => self.quorum_output(q, cmds),
            }
        }
        self.out = out;
    }

    fn quorum_output(&mut self, q: QuorumOutput, cmds: &mut Vec<Command>) {
        match q {
            QuorumOutput::PeerSend { to, packet } => cmds.push(Command::PeerSend { to, packet }),
            QuorumOutput::SendSnapshot { to, snapshot } => cmds.push(Command::SendSnapshot { to, snapshot }),
            QuorumOutput::ProbeLog { to, after } => cmds.push(Command::ProbeLog { to, after }),
            QuorumOutput::SendLogDiff { to, after, upto } => cmds.push(Command::SendLogDiff { to, after, upto }),
            QuorumOutput::PeerClose { sid, reason } => cmds.push(Command::PeerClose { sid, reason }),
            QuorumOutput::PersistEpoch { kind, epoch } => {
                let which = match kind {
                    EpochKind::Accepted => EpochFile::Accepted,
                    EpochKind::Current => EpochFile::Current,
                };
                self.store(StoreOp::Epoch { which, epoch }, cmds);
            }
            QuorumOutput::Truncate { zxid } => {
                self.flush(cmds);
                self.persisted = self.persisted.min(zxid);
                self.durable = self.durable.min(zxid);
                if self.node.last_processed_zxid() > zxid {
                    // The tree applied txns the leader cut (this server's own uncommitted
                    // proposals, recovered at start-up): rebuild it from storage. The node has
                    // given up its role; its Elect follows.
                    self.store(StoreOp::TruncateAndReload(zxid), cmds);
                } else {
                    self.store(StoreOp::Truncate(zxid), cmds);
                }
            }
            QuorumOutput::InstallSnapshot { snapshot } => {
                let SnapshotData { zxid, tree, sessions } = snapshot;
                tracing::info!(zxid = format_args!("{zxid:#x}"), "installing the leader's snapshot");
                self.flush(cmds);
                self.persisted = zxid;
                self.durable = self.durable.min(zxid);
                self.snapshots.last_zxid = zxid;
                self.store(StoreOp::Install { tree, sessions, zxid }, cmds);
            }
            QuorumOutput::Serving { epoch } => {
                tracing::info!(epoch, role = ?self.node.role(), "serving clients");
                cmds.push(Command::Serving { epoch });
            }
            QuorumOutput::Elect { reason, flush } => self.elect(reason, flush, cmds),
            QuorumOutput::HandOver { leader, zxid } => {
                tracing::info!(leader, "leaving the role for the leader the reconfig designated");
                self.decision = None;
                cmds.push(Command::HandOver { leader, zxid });
            }
            QuorumOutput::ConfigChanged { membership } => cmds.push(Command::Reconfigured { membership }),
        }
    }

    /// A storage op behind everything persisted so far.
    fn store(&mut self, op: StoreOp, cmds: &mut Vec<Command>) {
        self.flush(cmds);
        cmds.push(Command::Store { op, may_inline: false });
    }

    /// Hands what was persisted to storage as one append.
    fn flush(&mut self, cmds: &mut Vec<Command>) {
        if self.to_persist.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.to_persist);
        if let Some((hdr, _)) = batch.last() {
            self.persisted = self.persisted.max(hdr.zxid);
        }
        let lone = lone_writer(&batch, &mut self.last_writer);
        cmds.push(Command::Store { op: StoreOp::Append(batch), may_inline: lone && self.my_sid.is_none() });
    }

    fn elect(&mut self, reason: String, flush: bool, cmds: &mut Vec<Command>) {
        tracing::info!(%reason, "leaving the role; electing a leader");
        self.decision = None;
        cmds.push(Command::Elect { reason, flush });
    }

    fn take_decision(&mut self, now: Clock, cmds: &mut Vec<Command>) {
        let Some(e) = self.decision.take() else { return };
        tracing::info!(leader = e.leader, state = ?e.state, epoch = e.epoch, "taking the election's decision");
        match e.state {
            ServerState::Leading if Some(e.leader) == self.my_sid => cmds.push(Command::Lead),
            ServerState::Following => self.step_node(now, Input::BecomeFollower { leader: e.leader }, cmds),
            ServerState::Observing => self.step_node(now, Input::BecomeObserver { leader: e.leader }, cmds),
            _ => self.elect(format!("the election decided nothing this server can act on: {e:?}"), false, cmds),
        }
    }

    /// Rolls the log and hands the tree to the snapshot writer.
    fn take_snapshot(&mut self, cmds: &mut Vec<Command>) {
        let zxid = self.node.last_processed_zxid();
        self.snapshots.last_zxid = zxid;
        self.snapshots.threshold = self.snapshots.next_threshold();
        // The log rolls whether or not the writer is free, as ZooKeeper's SyncRequestProcessor
        // rolls it before it asks for the snapshot thread.
        self.store(StoreOp::Roll, cmds);
        let (tree, sessions) = self.node.snapshot_state();
        cmds.push(Command::Snapshot { tree, sessions, zxid });
    }
}

/// True if one session wrote every txn of `batch` and of the batch before it (`last` is updated to
/// this batch's writer, or `None`).
fn lone_writer(batch: &Batch, last: &mut Option<i64>) -> bool {
    let writer = batch.first().map(|(h, _)| h.client_id).filter(|s| batch.iter().all(|(h, _)| h.client_id == *s));
    let before = std::mem::replace(last, writer);
    writer.is_some() && before == writer
}

/// The zxid to step as durable next: `chunk` past what was stepped (or processed), at most
/// `durable`; `None` once everything durable has been stepped.
fn durable_chunk_end(applied_to: i64, processed: i64, durable: i64, chunk: i64) -> Option<i64> {
    let to = durable.min(applied_to.max(processed).saturating_add(chunk));
    (to > applied_to).then_some(to)
}

#[cfg(test)]
mod tests;
