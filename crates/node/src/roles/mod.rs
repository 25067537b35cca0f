//! The node in a ZAB ensemble: LEADER, FOLLOWER or OBSERVER (ZooKeeper's `Leader`, `Follower`,
//! `Observer`), on top of the pure `warden_quorum::zab` machines. Standalone mode (no [`Quorum`])
//! is untouched by this file.
//!
//! * The role is one of Looking, Leader (`zab::Leader`) or Learner (`zab::Learner`, follower or
//!   observer). Election results come in as `Input::Become*`; a machine that gives up its role
//!   (`Action::GoLooking`) makes the node emit [`QuorumOutput::Elect`]; a leader removed by its
//!   own reconfig (`Action::HandOver`), or a learner whose role the activated configuration
//!   changed, emits [`QuorumOutput::HandOver`] to the leader the reconfig's commit designated.
//! * Leader: client writes are prepped as in standalone mode against the zxid the leader machine
//!   will assign (`epoch << 32 | counter`), then `Leader::propose`d. A learner's forwarded REQUEST
//!   (session id, cxid, type, request bytes) is decoded with `Request::decode` and prepped as that
//!   session's write, with the REQUEST's authinfo as the caller's ids. Sessions are owned by the
//!   leader: only it expires them (and reaps containers / TTL nodes); learners report the sessions
//!   their clients touched in each PING reply (`codec::encode_touches`).
//! * Learner: reads are answered locally behind the session's earlier writes (per-session FIFO, as
//!   standalone); writes, createSession, closeSession and sync are forwarded to the leader. When a
//!   committed txn is applied and it carries one of this server's waiting (session id, cxid) pairs,
//!   this server replies to its client. A sync is answered when the leader's SYNC comes back and every
//!   COMMIT sent before it (the quorum connection is in order) is applied, which waits for those
//!   txns to be durable here too (`SyncDone`).
//! * Every server applies `ApplyCommitted` txns through the standalone `apply`, in zxid order, so
//!   watches, sessions and ephemerals behave exactly as in standalone mode.
//!
//! Quorum work leaves in the same ordered stream as everything else (`Output::Quorum`), so a shell
//! carries out one list in order and needs no rule for interleaving two. Log writes stay
//! `Output::Persist` in both modes (one storage path, answered by `Input::Durable`).
//!
//! Shell contract, in addition to `zab`'s: deliver `Become*` only once every `Persist` so far is
//! durable (the new machine is told the log's last zxid is durable); on becoming anything, the node
//! applies its whole log to the tree first (as ZooKeeper reloads its database), then closes every
//! client connection (as a ZooKeeper server that changes role drops its clients; sessions survive,
//! clients reconnect).
//!
//! * Reconnects: a client that reconnects to a learner with an existing session (right password)
//!   is answered only after the leader's REVALIDATE reply (`Learner.validateSession` /
//!   `LearnerHandler`): valid keeps the session (the leader touched it), invalid gets the expired
//!   answer. Meanwhile its requests wait, as ZooKeeper stops reading the socket. A second reconnect
//!   of the same session replaces the first, which is closed. The leader answers from its own
//!   session table (touching the session), as it does for its own clients.
//!
//! Deviations and absences, for now: a TRUNC below what this server already applied cannot rebuild the tree in memory, so the node
//! gives up the role (`Elect`) and logs an error (the shell must restart it from its storage);
//! local sessions and reconfig are not supported.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use warden_proto::ensure;
use warden_proto::quorum::{packet_type as pt, QuorumPacket};
use warden_proto::request::Request;
use warden_proto::response::Response;
use warden_proto::{ErrorCode, OpCode, Txn, TxnDigest, TxnHeader};
use warden_quorum::zab::{
    codec, counter_of, epoch_of, follows, make_zxid, Action, EpochKind, Leader, LeaderConfig, LeaderInit, Learner,
    LearnerConfig, LearnerRole, LocalState, TxnEntry, Zxid,
};
use warden_quorum::Sid;
use warden_tree::DataTree;

use crate::conn::Pending;
use crate::node::{ConnId, Mode, Node, Origin, Output};

mod change;
mod leader;
mod learner;
mod reads;
mod reconfig;

pub(crate) use learner::Awaiting;
pub(crate) use reads::{Barriers, SyncWaiter};

/// Committed txns kept in memory for DIFF sync (ZooKeeper's `commitLogCount`); older learners get
/// a SNAP.
const LOG_KEEP: usize = 500;

/// What the node needs to take part in an ensemble.
#[derive(Debug, Clone)]
pub struct QuorumSetup {
    pub my_sid: Sid,
    /// Every voting member (observers are not listed).
    pub voters: BTreeSet<Sid>,
    pub init_limit: u32,
    pub sync_limit: u32,
    /// The active configuration (`server.N` lines and version); empty in tests that do not need
    /// one, and then `/zookeeper/config` stays empty. Kept in step with `voters`.
    pub membership: warden_proto::Membership,
    /// The `acceptedEpoch` / `currentEpoch` files as loaded at start-up.
    pub accepted_epoch: i64,
    pub current_epoch: i64,
    /// `LeaderConfig::snapshot_size_factor` (zoo.cfg `snapshotSizeFactor`, ZooKeeper's 0.33; below
    /// 0 a learner behind the in-memory history always gets SNAP).
    pub snapshot_size_factor: f64,
    /// `LeaderConfig::max_committed_log`: committed txns a leader keeps in memory for DIFF
    /// (500, ZooKeeper's commitLogCount; the simulator lowers it so that learners fall behind it).
    pub max_committed_log: usize,
    /// `LeaderConfig::max_counter`: the zxid counter at which a leader steps down for a new
    /// epoch (0xffffffff; lowered only to test rollover).
    pub max_counter: i64,
}

impl QuorumSetup {
    pub fn new(my_sid: Sid, voters: impl IntoIterator<Item = Sid>) -> Self {
        Self {
            my_sid,
            voters: voters.into_iter().collect(),
            membership: warden_proto::Membership::default(),
            init_limit: 10,
            sync_limit: 5,
            accepted_epoch: 0,
            current_epoch: 0,
            snapshot_size_factor: 0.33,
            max_committed_log: LOG_KEEP,
            max_counter: 0xffff_ffff,
        }
    }
}

/// A snapshot as it travels after a SNAP packet: the tree at `zxid` and the sessions.
#[derive(Debug, Clone)]
pub struct SnapshotData {
    pub zxid: Zxid,
    pub tree: Box<DataTree>,
    pub sessions: Vec<(i64, i32)>,
}

/// Quorum work for the shell, in order (after the step's `Output`s).
#[derive(Debug, Clone)]
pub enum QuorumOutput {
    /// Write `packet` on the quorum connection of `to`.
    PeerSend { to: Sid, packet: QuorumPacket },
    /// Close the quorum connection of `sid`.
    PeerClose { sid: Sid, reason: String },
    /// Write the epoch file durably, then answer `Input::EpochDurable`.
    PersistEpoch { kind: EpochKind, epoch: i64 },
    /// Drop every log record above `zxid`; durable before anything later is carried out.
    Truncate { zxid: Zxid },
    /// Write this snapshot stream to `to` right after the SNAP packet sent just before.
    SendSnapshot { to: Sid, snapshot: SnapshotData },
    /// Leader: look in the on-disk log for the record `after` and measure the log after it, then
    /// answer `Input::LogProbed` (`Action::ProbeLog`). Reads only.
    ProbeLog { to: Sid, after: Zxid },
    /// Leader: right after the DIFF packet sent just before, stream the on-disk log's txns
    /// `(after, upto]` to `to` as PROPOSAL + COMMIT pairs, ahead of every later packet for `to`;
    /// on failure close the connection and answer `Input::LogDiffFailed` (`Action::SendLogDiff`).
    SendLogDiff { to: Sid, after: Zxid, upto: Zxid },
    /// The snapshot from the leader replaced the tree: write it durably, keep no log record above
    /// its zxid, then answer `Input::Durable { zxid }`.
    InstallSnapshot { snapshot: SnapshotData },
    /// The role is established: the server serves clients in `epoch`.
    Serving { epoch: i64 },
    /// A new configuration is active (a reconfig applied, a leader's newer one adopted, or the
    /// first leader's version given): the shell updates its peers and the dynamic config file.
    ConfigChanged { membership: warden_proto::Membership },
    /// The role was lost: start a leader election. With `flush`, a leader's learners get what
    /// it sent them before its connections close (as for a hand-over).
    Elect { reason: String, flush: bool },
    /// A reconfig's commit designated `leader` to lead the configuration it activated (version
    /// `zxid`), and this server left its role for it: the election takes that leader as decided,
    /// without a round (ZooKeeper's `processReconfig` with a designated leader), and reports it
    /// as its decision; this server then leads, follows or observes as the configuration says.
    HandOver { leader: Sid, zxid: Zxid },
}

/// Why a newly active configuration ends this server's role, and where it goes next.
#[derive(Debug)]
pub(crate) enum RoleExit {
    /// To an election.
    Elect(String),
    /// Straight to the leader the reconfig's commit designated (a new leader, or the same one in
    /// a new role), for the configuration of version `zxid`.
    HandOver { leader: Sid, zxid: Zxid },
}

/// The node's role, as the outside sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    Standalone,
    Looking,
    Leader,
    Follower,
    Observer,
}

#[derive(Debug)]
pub(crate) enum Machine {
    Looking,
    Leader(Box<Leader>),
    Learner(Box<Learner>),
}

/// Quorum-mode state of a node.
#[derive(Debug)]
pub(crate) struct Quorum {
    setup: QuorumSetup,
    machine: Machine,
    accepted_epoch: i64,
    current_epoch: i64,
    /// The log tail held in memory (persisted txns after `log_base`, gap-free).
    log: VecDeque<TxnEntry>,
    log_base: Zxid,
    durable: Zxid,
    /// Leader: this server's clients waiting for the txn with this zxid.
    origins: HashMap<Zxid, Origin, warden_tree::FastHash>,
    /// Learner: this server's clients waiting for the txns of the requests it forwarded.
    awaiting: Awaiting,
    /// Syncs of this server's clients, oldest first: a learner's forwarded to the leader, the
    /// leader's waiting for their confirmation round.
    syncs: VecDeque<SyncWaiter>,
    /// Linearizable reads: the read barriers issued, passed and waited on.
    barriers: Barriers,
    /// Learner: reconnects waiting for the leader's REVALIDATE answer, by session id (the
    /// connection sits in `conns` with no session yet).
    revalidating: HashMap<i64, ConnId>,
    /// Learner: sessions touched since the last PING reply.
    touched: BTreeMap<i64, i32>,
    /// A snapshot received in place of SNAP, consumed by the learner's `InstallSnapshot`.
    incoming_snapshot: Option<SnapshotData>,
    /// When the machine last became `Looking` (read-only mode's grace period and
    /// `election_time` count from it).
    looking_since_ms: u64,
    /// Learner: when it started following or observing (`follower_sync_time` counts from it).
    learning_since_ms: u64,
    /// When the election that gave the current role began: `unavailable_time` runs from it
    /// until the role serves.
    unavailable_since_ms: u64,
    /// The machines push their actions here ([`Node::drive`]); kept to reuse its capacity.
    actions: Vec<Action>,
    /// A newly active configuration no longer fits the role: left once the machine's actions
    /// of this step are carried out (`Node::drive`).
    role_exit: Option<RoleExit>,
    /// A reload from storage changed the configuration: reported at the next step.
    /// The log is being applied on a role change: a reconfig met there is not active yet.
    replaying_log: bool,
    /// A configuration newer than the active one that this server's history holds (a reconfig
    /// in its log or its recovered tree) but never saw committed: ZooKeeper's last-seen
    /// configuration. A leader finishes it (`LeaderInit::pending_config`).
    last_seen: Option<warden_proto::Membership>,
    /// Learner: the configuration its leader's NEWLEADER carried, newer than the active one. It
    /// becomes active at UPTODATE, when a quorum has acknowledged that leader (ZooKeeper's
    /// `syncWithLeader` likewise only notes it at NEWLEADER and processes it at UPTODATE): a
    /// leader that never gets a quorum must leave no configuration behind.
    newleader_config: Option<warden_proto::Membership>,
}

impl Quorum {
    /// Restarts from storage at `zxid`, with the replayed log txns as the in-memory history: the
    /// longest gap-free run (`follows`) ending at `zxid`, at most `LOG_KEEP` txns after a base txn
    /// (the base itself is not resent: it only marks where a DIFF may start). Anything else (a
    /// history not ending at `zxid`) is dropped with a warning; lagging learners then get SNAP.
    pub(crate) fn restored(&mut self, zxid: Zxid, replayed: Vec<(TxnHeader, Txn)>) {
        self.log.clear();
        self.log_base = zxid;
        self.durable = zxid;
        if replayed.last().is_some_and(|(h, _)| h.zxid != zxid) {
            tracing::warn!(
                zxid = format_args!("{zxid:#x}"),
                last = format_args!("{:#x}", replayed.last().map_or(0, |(h, _)| h.zxid)),
                "replayed txns do not end at the recovered zxid; starting without in-memory history"
            );
            return;
        }
        // Walk back from the end while each txn directly follows the one before it.
        let mut start = replayed.len().saturating_sub(LOG_KEEP + 1);
        for i in (start + 1..replayed.len()).rev() {
            if !follows(replayed[i - 1].0.zxid, replayed[i].0.zxid) {
                start = i;
                break;
            }
        }
        let mut kept = replayed.into_iter().skip(start);
        let Some((base, _)) = kept.next() else { return };
        self.log_base = base.zxid;
        self.log.extend(kept.map(|(hdr, txn)| TxnEntry { hdr, txn: txn.into(), digest: None }));
    }

    fn last_logged(&self) -> Zxid {
        self.log.back().map_or(self.log_base, TxnEntry::zxid)
    }
}

/// The zxid `Leader::propose` will assign next.
pub(crate) fn leader_next_zxid(l: &Leader) -> Zxid {
    let last = l.last_proposed();
    match l.epoch() {
        Some(e) if epoch_of(last) == e => last + 1,
        Some(e) => make_zxid(e, 1),
        None => last + 1,
    }
}

impl Node {
    /// A node that takes part in an ensemble. It starts LOOKING: the shell runs the election and
    /// reports its result with `Input::Become*`. `cfg.server_id` should be `setup.my_sid` (it
    /// goes into the top byte of the session ids this server hands out).
    pub fn new_quorum(cfg: crate::NodeConfig, mut setup: QuorumSetup, now: crate::Clock) -> Self {
        if !setup.membership.servers.is_empty() {
            // The configuration decides who votes.
            setup.voters = warden_quorum::zab::voter_sids(&setup.membership);
        }
        let mut node = Node::new(cfg, now);
        // A member starts LOOKING.
        node.counters.looking_count = 1;
        node.mode = Mode::Ensemble(Box::new(Quorum {
            accepted_epoch: setup.accepted_epoch,
            current_epoch: setup.current_epoch,
            setup,
            machine: Machine::Looking,
            looking_since_ms: now.mono_ms,
            learning_since_ms: now.mono_ms,
            unavailable_since_ms: now.mono_ms,
            log: VecDeque::new(),
            log_base: 0,
            durable: 0,
            origins: HashMap::default(),
            awaiting: Awaiting::default(),
            syncs: VecDeque::new(),
            barriers: Barriers::default(),
            revalidating: HashMap::new(),
            touched: BTreeMap::new(),
            incoming_snapshot: None,
            actions: Vec::new(),
            role_exit: None,
            replaying_log: false,
            last_seen: None,
            newleader_config: None,
        }));
        node.write_config_node();
        node
    }

    /// The ensemble state, if the node is a member of one.
    pub(crate) fn ensemble(&self) -> Option<&Quorum> {
        match &self.mode {
            Mode::Ensemble(q) => Some(q),
            Mode::Standalone { .. } => None,
        }
    }

    /// The ensemble state, for role code. Only quorum inputs, which [`Node::step`] dispatches to a
    /// member of an ensemble, and the machines' actions reach role code, so a standalone node here
    /// is a bug in that dispatch: it stops the server rather than being ignored.
    pub(crate) fn ensemble_mut(&mut self) -> &mut Quorum {
        match &mut self.mode {
            Mode::Ensemble(q) => q,
            Mode::Standalone { .. } => unreachable!("role code reached on a standalone node"),
        }
    }

    /// Calls the role's machine with the reusable action buffer, then carries out what it pushed.
    pub(super) fn drive(&mut self, out: &mut Vec<Output>, call: impl FnOnce(&mut Quorum, &mut Vec<Action>)) {
        let q = self.ensemble_mut();
        let mut actions = std::mem::take(&mut q.actions);
        call(q, &mut actions);
        if let Mode::Ensemble(q) = &mut self.mode {
            if let Machine::Leader(l) = &mut q.machine {
                let acks = &mut self.summaries.quorum_ack_latency;
                l.take_ack_latencies(|ms| acks.record(ms));
            }
        }
        self.run(&mut actions, out);
        let q = self.ensemble_mut();
        if q.actions.capacity() < actions.capacity() {
            q.actions = actions;
        }
        if let Some(exit) = q.role_exit.take() {
            if !matches!(q.machine, Machine::Looking) {
                match exit {
                    RoleExit::Elect(reason) => self.lose_role(reason, out),
                    RoleExit::HandOver { leader, zxid } => self.hand_over(leader, zxid, out),
                }
            }
        }
    }

    pub fn role(&self) -> RoleKind {
        match self.ensemble().map(|q| &q.machine) {
            None => RoleKind::Standalone,
            Some(Machine::Looking) => RoleKind::Looking,
            Some(Machine::Leader(_)) => RoleKind::Leader,
            Some(Machine::Learner(l)) if l.role() == LearnerRole::Follower => RoleKind::Follower,
            Some(Machine::Learner(_)) => RoleKind::Observer,
        }
    }

    /// The leader this node is or follows (`None` standalone or LOOKING), for `lead` and
    /// `zabstate`.
    pub fn leader_id(&self) -> Option<Sid> {
        let q = self.ensemble()?;
        match &q.machine {
            Machine::Looking => None,
            Machine::Leader(_) => Some(q.setup.my_sid),
            Machine::Learner(l) => Some(l.leader()),
        }
    }

    /// The active configuration, in an ensemble (empty when none was given).
    pub fn membership(&self) -> Option<&warden_proto::Membership> {
        self.ensemble().map(|q| &q.setup.membership)
    }

    /// The number of voting members (ZooKeeper's `quorum_size`), in an ensemble.
    pub fn quorum_size(&self) -> Option<usize> {
        self.ensemble().map(|q| q.setup.voters.len())
    }

    /// The leader-only gauges, on a leader.
    pub fn leader_gauges(&self) -> Option<warden_quorum::zab::LeaderGauges> {
        self.leader().map(Leader::gauges)
    }

    /// On a leader, the observers synced and receiving INFORMs, in sid order (the `observers`
    /// command); empty in any other role.
    pub fn synced_observers(&self) -> Vec<Sid> {
        self.leader().map_or_else(Vec::new, |l| l.synced_observers().collect())
    }

    /// This server's id in an ensemble.
    pub fn my_sid(&self) -> Option<Sid> {
        self.ensemble().map(|q| q.setup.my_sid)
    }

    /// The (accepted, current) epochs this node knows to be durable.
    pub fn epochs(&self) -> Option<(i64, i64)> {
        self.ensemble().map(|q| (q.accepted_epoch, q.current_epoch))
    }

    /// When the node became LOOKING, if it is LOOKING.
    pub(crate) fn looking_since_ms(&self) -> Option<u64> {
        match self.ensemble() {
            Some(q) if matches!(q.machine, Machine::Looking) => Some(q.looking_since_ms),
            _ => None,
        }
    }

    /// Whether clients are served: always standalone; once established or synced in a quorum.
    pub fn serving(&self) -> bool {
        match self.ensemble().map(|q| &q.machine) {
            None => true,
            Some(Machine::Looking) => false,
            Some(Machine::Leader(l)) => l.is_established(),
            Some(Machine::Learner(l)) => l.is_synced(),
        }
    }

    pub(crate) fn leader(&self) -> Option<&Leader> {
        match self.ensemble().map(|q| &q.machine) {
            Some(Machine::Leader(l)) => Some(l),
            _ => None,
        }
    }

    pub(crate) fn is_learner(&self) -> bool {
        matches!(self.ensemble().map(|q| &q.machine), Some(Machine::Learner(_)))
    }

    pub(crate) fn is_established_leader(&self) -> bool {
        self.leader().is_some_and(Leader::is_established)
    }

    // ----- inputs -----

    pub(crate) fn quorum_input(&mut self, input: crate::Input, out: &mut Vec<Output>) {
        use crate::Input as I;
        let now_ms = self.now.mono_ms;
        match input {
            I::Peer { from, packet } => {
                let from_leader_synced =
                    matches!(&self.ensemble_mut().machine, Machine::Learner(l) if l.leader() == from && l.is_synced());
                if from_leader_synced {
                    match packet.packet_type {
                        pt::PROPOSAL => self.counters.learner_proposal_received_count += 1,
                        pt::COMMIT => self.counters.learner_commit_received_count += 1,
                        _ => {}
                    }
                }
                self.drive(out, |q, a| match &mut q.machine {
                    Machine::Leader(l) => l.on_packet(from, &packet, now_ms, a),
                    Machine::Learner(l) if l.leader() == from => l.on_packet(&packet, now_ms, a),
                    _ => {}
                })
            }
            I::PeerSnapshot { from, snapshot } => {
                let packet = QuorumPacket::new(pt::SNAP, snapshot.zxid);
                self.ensemble_mut().incoming_snapshot = Some(snapshot);
                self.quorum_input(I::Peer { from, packet }, out);
                self.ensemble_mut().incoming_snapshot = None;
            }
            I::PeerDisconnected { sid } => self.drive(out, |q, a| match &mut q.machine {
                Machine::Leader(l) => l.on_disconnect(sid, a),
                Machine::Learner(l) if l.leader() == sid => l.on_disconnect(a),
                _ => {}
            }),
            I::LogProbed { sid, probe } => self.drive(out, |q, a| {
                if let Machine::Leader(l) = &mut q.machine {
                    l.on_log_probe(sid, probe, a);
                }
            }),
            I::LogDiffFailed { sid } => self.drive(out, |q, a| {
                if let Machine::Leader(l) = &mut q.machine {
                    l.on_log_diff_failed(sid, a);
                }
            }),
            I::BecomeLeader => self.become_leader(out),
            I::BecomeFollower { leader } => self.become_learner(leader, LearnerRole::Follower, out),
            I::BecomeObserver { leader } => self.become_learner(leader, LearnerRole::Observer, out),
            I::BecomeLooking => self.leave_role(out),
            I::EpochDurable { kind, epoch } => self.drive(out, |q, a| {
                match kind {
                    EpochKind::Accepted => q.accepted_epoch = q.accepted_epoch.max(epoch),
                    EpochKind::Current => q.current_epoch = q.current_epoch.max(epoch),
                }
                match &mut q.machine {
                    Machine::Leader(l) => l.on_epoch_durable(kind, epoch, a),
                    Machine::Learner(l) => l.on_epoch_durable(kind, epoch, a),
                    Machine::Looking => {}
                }
            }),
            I::Connect { .. }
            | I::Request { .. }
            | I::Sasl { .. }
            | I::Invalid { .. }
            | I::Disconnected { .. }
            | I::Tick
            | I::Durable { .. } => {}
        }
    }

    pub(crate) fn quorum_durable(&mut self, zxid: Zxid, out: &mut Vec<Output>) {
        self.record_ack_creation(zxid);
        self.drive(out, |q, a| {
            q.durable = q.durable.max(zxid.min(q.last_logged()));
            match &mut q.machine {
                Machine::Leader(l) => l.on_durable(zxid, a),
                Machine::Learner(l) => l.on_durable(zxid, a),
                Machine::Looking => {}
            }
        });
    }

    /// Gives the role up at once if its lease ran out (`Leader::check_lease`,
    /// `Learner::check_lease`).
    pub(crate) fn check_lease(&mut self, out: &mut Vec<Output>) {
        let now_ms = self.now.mono_ms;
        if matches!(self.ensemble_mut().machine, Machine::Looking) {
            return;
        }
        self.drive(out, |q, a| match &mut q.machine {
            Machine::Leader(l) => l.check_lease(now_ms, a),
            Machine::Learner(l) => l.check_lease(now_ms, a),
            Machine::Looking => {}
        });
    }

    pub(crate) fn quorum_tick(&mut self, out: &mut Vec<Output>) {
        let now_ms = self.now.mono_ms;
        self.drive(out, |q, a| match &mut q.machine {
            Machine::Leader(l) => l.on_tick(now_ms, a),
            Machine::Learner(l) => l.on_tick(now_ms, a),
            Machine::Looking => {}
        });
    }

    // ----- carrying out the machines' actions -----

    /// Carries out the machine's actions, emptying `actions`.
    fn run(&mut self, actions: &mut Vec<Action>, out: &mut Vec<Output>) {
        for action in actions.drain(..) {
            let leaving =
                matches!(action, Action::GoLooking { .. } | Action::StepAside { .. } | Action::HandOver { .. });
            if matches!(self.ensemble_mut().machine, Machine::Looking) && !leaving {
                // The role was given up earlier in this batch; the rest is moot.
                continue;
            }
            self.run_one(action, out);
        }
    }

    pub(super) fn run_one(&mut self, action: Action, out: &mut Vec<Output>) {
        let leading = matches!(self.ensemble_mut().machine, Machine::Leader(_));
        match action {
            Action::Send { to, packet } => {
                if matches!(packet.packet_type, pt::DIFF | pt::TRUNC) {
                    self.counters.diff_count += 1;
                    let syncing = self.syncs_in_flight();
                    self.summaries.inflight_diff_count.record(syncing);
                }
                out.push(Output::Quorum(QuorumOutput::PeerSend { to, packet }))
            }
            Action::SendSnapshot { to, zxid } => {
                self.counters.snap_count += 1;
                let syncing = self.syncs_in_flight();
                self.summaries.inflight_snap_count.record(syncing);
                let (tree, sessions) = self.snapshot_state();
                out.push(Output::Quorum(QuorumOutput::SendSnapshot {
                    to,
                    snapshot: SnapshotData { zxid, tree: Box::new(tree), sessions },
                }));
            }
            Action::ProbeLog { to, after } => out.push(Output::Quorum(QuorumOutput::ProbeLog { to, after })),
            Action::SendLogDiff { to, after, upto } => {
                tracing::info!(
                    sid = to,
                    after = format_args!("{after:#x}"),
                    upto = format_args!("{upto:#x}"),
                    "syncing a learner by DIFF from the on-disk txn log"
                );
                out.push(Output::Quorum(QuorumOutput::SendLogDiff { to, after, upto }))
            }
            Action::Disconnect { sid, reason } => out.push(Output::Quorum(QuorumOutput::PeerClose { sid, reason })),
            Action::Persist(entry) => {
                if leading {
                    self.counters.proposal_count += 1;
                } else if self.broadcasting_follower() {
                    // Follower.processPacket: the age of a PROPOSAL as it arrives (wall clocks).
                    if let Ok(ms) = u64::try_from(self.now.wall_ms - entry.hdr.time_ms) {
                        self.summaries.proposal_latency.record(ms);
                    }
                }
                out.push(Output::Persist { hdr: entry.hdr, txn: entry.txn.clone() });
                self.ensemble_mut().log.push_back(entry);
                self.trim_log();
            }
            Action::PersistEpoch { kind, epoch } => {
                out.push(Output::Quorum(QuorumOutput::PersistEpoch { kind, epoch }))
            }
            Action::Truncate { zxid } => self.truncate(zxid, out),
            Action::InstallSnapshot { zxid } => self.install_snapshot(zxid, out),
            Action::ApplyCommitted(entry) => {
                if leading {
                    self.counters.commit_count += 1;
                } else if let Ok(ms) = u64::try_from(self.now.wall_ms - entry.hdr.time_ms) {
                    self.summaries.commit_propagation_latency.record(ms);
                }
                self.apply_committed(entry, out)
            }
            Action::Synced { epoch } => {
                self.leader_config_synced(out);
                let now_ms = self.now.mono_ms;
                let q = self.ensemble_mut();
                let took = now_ms.saturating_sub(q.learning_since_ms);
                let unavailable = now_ms.saturating_sub(q.unavailable_since_ms);
                let observing = matches!(&q.machine, Machine::Learner(l) if l.role() == LearnerRole::Observer);
                let s = &mut self.summaries;
                if observing { &mut s.observer_sync_time } else { &mut s.follower_sync_time }.record(took);
                s.unavailable_time.record(unavailable);
                out.push(Output::Quorum(QuorumOutput::Serving { epoch }))
            }
            Action::Broadcasting { epoch } => {
                // The first leader with reconfig enabled gave a version-0 configuration its
                // NEWLEADER zxid as version.
                if let Some(m) = self.leader().and_then(Leader::membership).cloned() {
                    if m != self.ensemble_mut().setup.membership {
                        self.ensemble_mut().setup.membership = m.clone();
                        self.write_config_node();
                        out.push(Output::Quorum(QuorumOutput::ConfigChanged { membership: m }));
                    }
                }
                let unavailable = self.now.mono_ms.saturating_sub(self.ensemble_mut().unavailable_since_ms);
                self.summaries.unavailable_time.record(unavailable);
                self.summaries.leader_unavailable_time.record(unavailable);
                out.push(Output::Quorum(QuorumOutput::Serving { epoch }))
            }
            Action::PingReply { to, zxid } => {
                let touches: Vec<codec::SessionTouch> = std::mem::take(&mut self.ensemble_mut().touched)
                    .into_iter()
                    .map(|(session_id, timeout_ms)| codec::SessionTouch { session_id, timeout_ms })
                    .collect();
                out.push(Output::Quorum(QuorumOutput::PeerSend { to, packet: codec::ping_reply(zxid, &touches) }));
            }
            Action::TouchSessions { touches, .. } => {
                for t in touches {
                    self.sessions.touch(t.session_id, self.now.mono_ms);
                }
            }
            Action::Forwarded { from, request } => self.on_forwarded(from, request, out),
            Action::Revalidate { from, session_id, .. } => {
                let valid = self.sessions.touch(session_id, self.now.mono_ms);
                out.push(Output::Quorum(QuorumOutput::PeerSend {
                    to: from,
                    packet: codec::revalidate_reply(session_id, valid),
                }));
            }
            Action::Revalidated { session_id, valid } => self.revalidated(session_id, valid, out),
            Action::SyncDone => self.sync_done(out),
            Action::LeaderConfig(text) => self.leader_config(&text),
            Action::GoLooking { reason } => self.lose_role(reason, out),
            Action::StepAside { reason } => self.leave_for_election(reason, true, out),
            Action::HandOver { leader } => {
                let zxid = self.ensemble_mut().setup.membership.version;
                self.hand_over(leader, zxid, out)
            }
        }
    }

    pub(super) fn trim_log(&mut self) {
        let applied = self.tree.last_processed_zxid();
        let q = self.ensemble_mut();
        while q.log.len() > LOG_KEEP && q.log.front().is_some_and(|e| e.zxid() <= applied) {
            if let Some(e) = q.log.pop_front() {
                q.log_base = e.zxid();
            }
        }
    }

    pub(super) fn truncate(&mut self, zxid: Zxid, out: &mut Vec<Output>) {
        let q = self.ensemble_mut();
        q.log.retain(|e| e.zxid() <= zxid);
        if q.log_base > zxid {
            q.log_base = zxid;
        }
        q.durable = q.durable.min(zxid);
        out.push(Output::Quorum(QuorumOutput::Truncate { zxid }));
        if self.tree.last_processed_zxid() > zxid {
            tracing::error!(zxid, applied = self.tree.last_processed_zxid(), "TRUNC below the applied tree");
            self.lose_role(format!("cannot roll the tree back to {zxid:#x} in memory; restart from storage"), out);
        }
    }

    pub(super) fn install_snapshot(&mut self, zxid: Zxid, out: &mut Vec<Output>) {
        let snapshot = self.ensemble_mut().incoming_snapshot.take();
        let Some(snapshot) = snapshot.filter(|s| s.zxid == zxid && s.tree.last_processed_zxid() == zxid) else {
            return self.lose_role("SNAP without a matching snapshot stream".into(), out);
        };
        self.install_tree((*snapshot.tree).clone());
        // The leader's history replaces ours: a reconfig our log held is not in it.
        self.ensemble_mut().last_seen = None;
        self.prep.clear();
        let live: Vec<i64> = self.sessions.iter().map(|s| s.id).collect();
        for id in live {
            self.sessions.remove(id);
        }
        for &(id, timeout_ms) in &snapshot.sessions {
            self.sessions.add(id, timeout_ms.max(0) as u32, self.now.mono_ms);
        }
        let q = self.ensemble_mut();
        q.log.clear();
        q.log_base = zxid;
        q.durable = q.durable.min(zxid);
        out.push(Output::Quorum(QuorumOutput::InstallSnapshot { snapshot }));
    }

    /// `proposal_ack_creation_latency`: the age of each txn the log has just made durable, which
    /// is when this server ACKs it (a leader its own ACK), once past the sync.
    fn record_ack_creation(&mut self, zxid: Zxid) {
        let wall_ms = self.now.wall_ms;
        let Mode::Ensemble(q) = &self.mode else { return };
        let broadcasting = match &q.machine {
            Machine::Leader(l) => l.is_established(),
            Machine::Learner(l) => l.is_synced(),
            Machine::Looking => false,
        };
        if !broadcasting {
            return;
        }
        let from = q.log.partition_point(|e| e.zxid() <= q.durable);
        let newly = q.log.range(from..).take_while(|e| e.zxid() <= zxid);
        let summary = &mut self.summaries.proposal_ack_creation_latency;
        for ms in newly.filter_map(|e| u64::try_from(wall_ms - e.hdr.time_ms).ok()) {
            summary.record(ms);
        }
    }

    /// A synced follower (not an observer, which gets no PROPOSALs).
    fn broadcasting_follower(&self) -> bool {
        self.ensemble().is_some_and(
            |q| matches!(&q.machine, Machine::Learner(l) if l.is_synced() && l.role() == LearnerRole::Follower),
        )
    }

    /// Learner syncs in progress on this leader (`inflight_*_count`), the one starting included.
    fn syncs_in_flight(&self) -> u64 {
        self.leader_gauges().map_or(1, |g| g.syncing.max(1) as u64)
    }

    pub(super) fn apply_committed(&mut self, entry: TxnEntry, out: &mut Vec<Output>) {
        // A committed txn after the last-seen configuration's commits it too (a committed
        // history is a prefix): it becomes active, though its own txn was applied before (a
        // restart recovered it from the log) and will not be applied again.
        if let Some(m) = self.ensemble_mut().last_seen.clone().filter(|m| m.version < entry.zxid()) {
            self.activate(m, out);
        }
        let q = self.ensemble_mut();
        let origin = match q.machine {
            Machine::Leader(_) => q.origins.remove(&entry.zxid()),
            _ => q.awaiting.take(&entry.hdr, &entry.txn),
        };
        self.apply(entry.hdr, &entry.txn, origin.unwrap_or(Origin::Internal), out);
        if let Some(d) = entry.digest {
            self.check_leader_digest(&entry.hdr, d);
        }
        self.trim_log();
    }

    /// `DataTree.compareDigest`: the tree's digest after a txn against the one its (ZooKeeper)
    /// leader computed. A mismatch means this server's data differs from the leader's: it is
    /// counted (`digest_mismatches_count`) and logged (the first with its txn, then at each power
    /// of two), as ZooKeeper does, and serving goes on.
    fn check_leader_digest(&mut self, hdr: &TxnHeader, d: TxnDigest) {
        if self.tree.check_txn_digest(d.version, d.tree_digest) {
            return;
        }
        let (zxid, actual, seen) =
            (format_args!("{:#x}", hdr.zxid), self.tree.zk_digest(), self.tree.digest_mismatches());
        if seen == 1 {
            tracing::error!(%zxid, txn_type = hdr.txn_type, expected = d.tree_digest, actual,
                "first digest mismatch: the data tree differs from the leader's after this txn");
        } else if seen.is_power_of_two() {
            // Once a tree has diverged every txn may mismatch: the log thins out.
            tracing::warn!(%zxid, expected = d.tree_digest, actual, seen, "digest mismatches");
        }
    }

    // ----- invariants -----

    /// The ensemble's O(1) invariants (part of `Node::check_cheap_invariants`).
    pub(crate) fn check_cheap_quorum_invariants(&self, q: &Quorum) -> Result<(), String> {
        let applied = self.tree.last_processed_zxid();
        ensure!(q.accepted_epoch >= q.current_epoch, "acceptedEpoch below currentEpoch");
        match &q.machine {
            Machine::Looking => {}
            Machine::Leader(l) => {
                l.check_cheap_invariants()?;
                ensure!(
                    !l.is_established() || l.last_committed() == applied,
                    "leader committed {:#x} but applied {applied:#x}",
                    l.last_committed()
                );
            }
            Machine::Learner(l) => {
                l.check_cheap_invariants()?;
                ensure!(
                    !l.is_synced() || l.last_applied() == applied,
                    "learner applied {:#x}, tree at {applied:#x}",
                    l.last_applied()
                );
            }
        }
        Ok(())
    }

    /// The ensemble's invariants beyond `Node::check_cheap_invariants`, which runs first.
    pub(crate) fn check_quorum_invariants(&self, q: &Quorum) -> Result<(), String> {
        q.barriers.check_invariants(&q.syncs)?;
        let mut prev = q.log_base;
        for e in &q.log {
            if !follows(prev, e.zxid()) {
                return Err(format!("log has a hole: {:#x} after {prev:#x}", e.zxid()));
            }
            prev = e.zxid();
        }
        let applied = self.tree.last_processed_zxid();
        if applied > q.last_logged() && !matches!(&q.machine, Machine::Learner(_)) {
            return Err(format!("applied {applied:#x} beyond the log's end {:#x}", q.last_logged()));
        }
        if q.durable > q.last_logged() {
            return Err("durable beyond the log's end".into());
        }
        if !matches!(q.machine, Machine::Looking) && !self.local_sessions.is_empty() {
            return Err("local read-only sessions outside LOOKING".into());
        }
        match &q.machine {
            Machine::Looking => {
                if !self.conns.is_empty() && !self.cfg.read_only_enabled {
                    return Err("clients connected while LOOKING".into());
                }
                if !q.origins.is_empty() || !q.awaiting.is_empty() {
                    return Err("requests waiting while LOOKING".into());
                }
            }
            Machine::Leader(l) => {
                l.check_invariants()?;
                if !q.awaiting.is_empty() || !q.revalidating.is_empty() {
                    return Err("leader holds learner-side waits".into());
                }
                if q.origins.keys().any(|z| *z <= applied || *z > l.last_proposed()) {
                    return Err("a client waits for a txn already applied or never proposed".into());
                }
            }
            Machine::Learner(l) => {
                l.check_invariants()?;
                if !q.origins.is_empty() {
                    return Err("learner holds leader-side waits".into());
                }
                for (session, conn) in &q.revalidating {
                    if self.conns.get(conn).is_none_or(|c| c.session_id != 0) {
                        return Err(format!(
                            "revalidation of {session:#x} waits on a connection without a pending handshake"
                        ));
                    }
                }
                if epoch_of(applied) > l.accepted_epoch() && counter_of(applied) != 0 {
                    return Err("applied a txn of an epoch never accepted".into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(epoch: i64, counter: i64) -> (TxnHeader, Txn) {
        let zxid = make_zxid(epoch, counter);
        (TxnHeader { client_id: 1, cxid: 0, zxid, time_ms: 0, txn_type: OpCode::Error.code() }, Txn::Error { err: 0 })
    }

    fn restored(zxid: Zxid, replayed: Vec<(TxnHeader, Txn)>) -> (Zxid, Vec<Zxid>) {
        let now = crate::Clock { mono_ms: 0, wall_ms: 0 };
        let mut node = Node::new_quorum(crate::NodeConfig::default(), QuorumSetup::new(1, [1]), now);
        let q = node.ensemble_mut();
        q.restored(zxid, replayed);
        assert_eq!(q.last_logged(), zxid);
        (q.log_base, q.log.iter().map(TxnEntry::zxid).collect())
    }

    #[test]
    fn restored_history_is_the_gap_free_tail_after_a_base_txn() {
        // At most LOG_KEEP txns after the base.
        let (base, log) = restored(make_zxid(1, 600), (1..=600).map(|c| entry(1, c)).collect());
        assert_eq!(base, make_zxid(1, 100));
        assert_eq!(log.len(), LOG_KEEP);
        // Across an epoch change (counter 1 of the next epoch follows anything earlier).
        let replayed = vec![entry(1, 1), entry(1, 2), entry(2, 1), entry(2, 2)];
        assert_eq!(
            restored(make_zxid(2, 2), replayed),
            (make_zxid(1, 1), vec![make_zxid(1, 2), make_zxid(2, 1), make_zxid(2, 2)])
        );
        // A hole: only the run after it, its first txn as the base.
        let replayed = vec![entry(1, 1), entry(1, 2), entry(1, 4), entry(1, 5), entry(1, 6)];
        assert_eq!(restored(make_zxid(1, 6), replayed), (make_zxid(1, 4), vec![make_zxid(1, 5), make_zxid(1, 6)]));
        // Not ending at the recovered zxid, or nothing replayed: no history.
        assert_eq!(restored(make_zxid(1, 9), vec![entry(1, 1), entry(1, 2)]), (make_zxid(1, 9), vec![]));
        assert_eq!(restored(make_zxid(1, 9), vec![]), (make_zxid(1, 9), vec![]));
        assert_eq!(restored(make_zxid(1, 9), vec![entry(1, 9)]), (make_zxid(1, 9), vec![]));
    }
}
