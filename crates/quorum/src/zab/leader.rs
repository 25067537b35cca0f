//! The leader side of ZAB: one [`Leader`] per leadership attempt (epoch), holding a small
//! handshake/broadcast state per connected learner, as ZooKeeper's `Leader` plus its
//! `LearnerHandler`s.
//!
//! Phases: discovery (a quorum of FOLLOWERINFO including the leader fixes `newEpoch =
//! max(acceptedEpoch) + 1`, persisted as `acceptedEpoch` before any LEADERINFO), epoch agreement
//! (a quorum of ACKEPOCH; a learner more recent than the leader makes it step down), sync (DIFF /
//! TRUNC / SNAP, the committed txns as PROPOSAL+COMMIT pairs, then NEWLEADER), establishment (a
//! quorum of NEWLEADER ACKs counting the leader only once its `currentEpoch` is durable; then
//! UPTODATE), and broadcast.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use warden_proto::membership::Membership;
use warden_proto::quorum::{packet_type as pt, LearnerInfo, QuorumPacket};
use warden_proto::txn::{Txn, TxnHeader};

use super::codec;
use super::{counter_of, epoch_of, follows, make_zxid, Action, EpochKind, Sid, TxnEntry, Zxid};

/// Static settings of a leader.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub my_sid: Sid,
    /// Every voting member, the leader included.
    pub voters: BTreeSet<Sid>,
    pub tick_ms: u64,
    /// Ticks a learner has to finish the handshake, and the leader to establish itself.
    pub init_limit: u32,
    /// Ticks a synced follower may stay silent (or leave a proposal unacknowledged).
    pub sync_limit: u32,
    /// Committed txns kept in memory for DIFF (ZooKeeper's `commitLogCount`, 500).
    pub max_committed_log: usize,
    /// ZooKeeper's `snapshotSizeFactor`: a learner behind the in-memory history is synced by a
    /// DIFF read from the on-disk log when the log holds its last zxid and the log files to read
    /// are at most this fraction of the newest snapshot's size; below 0, never (SNAP). Here `-1`
    /// by default; the node sets it from zoo.cfg (ZooKeeper's default 0.33).
    pub snapshot_size_factor: f64,
    /// The active configuration, sent in NEWLEADER as ZooKeeper sends its quorum verifier's
    /// text (`None`: NEWLEADER carries no data).
    pub membership: Option<Membership>,
    /// `reconfigEnabled`: a configuration still at version 0 takes the NEWLEADER zxid as its
    /// version once the epoch is fixed, as ZooKeeper's leader does (ZOOKEEPER-1783).
    pub reconfig_enabled: bool,
    /// The highest zxid counter proposed in one epoch (0xffffffff, the 32-bit counter's top);
    /// reaching it makes `propose` fail with `ZxidExhausted` so the leader steps down and a new
    /// epoch starts (ZOOKEEPER-1277). Tests and the simulator lower it to exercise rollover.
    pub max_counter: i64,
}

impl LeaderConfig {
    /// The leader's lease: how long after a quorum of voters last vouched for it (answered a
    /// packet the leader sent) it may still serve. A follower gives up on a leader it has not
    /// heard from for `sync_limit` ticks of its own clock, counted from a packet the leader sent
    /// no earlier than that vouching; so no other leader can be elected within `sync_limit` ticks
    /// of it. The lease is half a tick shorter, which covers clocks whose rates differ by less
    /// than one part in `2 * sync_limit` (10% with the default 5) over the lease. It is never
    /// shorter than one and a half ticks: the leader PINGs once a tick, and the answers must
    /// renew it before it runs out (kazoo's test ensembles run syncLimit=2). With syncLimit=1 it
    /// is therefore longer than the followers' patience, and protects less. Syncs and
    /// linearizable reads do not rest on it: a quorum confirms each. See [`Leader::check_lease`].
    pub fn lease_ms(&self) -> u64 {
        let limit = self.tick_ms * u64::from(self.sync_limit);
        limit.saturating_sub(self.tick_ms / 2).max(self.tick_ms + self.tick_ms / 2)
    }

    pub fn new(my_sid: Sid, voters: impl IntoIterator<Item = Sid>) -> Self {
        Self {
            my_sid,
            voters: voters.into_iter().collect(),
            tick_ms: 2000,
            init_limit: 10,
            sync_limit: 5,
            max_committed_log: 500,
            snapshot_size_factor: -1.0,
            membership: None,
            reconfig_enabled: false,
            max_counter: 0xffff_ffff,
        }
    }
}

/// What the leader's storage holds when it starts leading.
#[derive(Debug, Clone)]
pub struct LeaderInit {
    pub accepted_epoch: i64,
    pub current_epoch: i64,
    /// Last zxid of the durable log; the tree reflects it.
    pub last_zxid: Zxid,
    /// The zxid just before `history` (the state a DIFF can start from).
    pub history_base: Zxid,
    /// The tail of the log after `history_base`, in zxid order, ending at `last_zxid`.
    pub history: Vec<TxnEntry>,
    /// A reconfig in the history that this server never saw committed (its zxid and the
    /// configuration it makes): `LeaderConfig::voters` is the configuration before it. The epoch
    /// and NEWLEADER then need a quorum of both, and the new configuration becomes active once
    /// established (ZooKeeper's last-seen quorum verifier in the NEWLEADER proposal).
    pub pending_config: Option<(Zxid, Membership)>,
}

/// Why a leader cannot start from what its storage holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaderInitError {
    #[error("leader {0} is not a voter")]
    NotAVoter(Sid),
    /// A hole would be synced to learners as if it were history (ZOOKEEPER-4925).
    #[error("history has a hole: {at:#x} after {after:#x}")]
    HistoryHole { after: Zxid, at: Zxid },
    #[error("history ends at {history:#x}, log at {log:#x}")]
    HistoryEnd { history: Zxid, log: Zxid },
}

/// Why `propose` refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProposeError {
    /// No quorum has ACKed NEWLEADER yet.
    NotEstablished,
    /// The leader stepped down.
    Stopped,
    /// The epoch's 32-bit counter is used up: call `step_down` and elect again (ZOOKEEPER-1277).
    ZxidExhausted,
    /// A reconfig txn whose data is not a configuration text.
    BadConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Follower,
    Observer,
}

/// A leader's learners and syncs, as ZooKeeper's leader-only gauges count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaderGauges {
    /// Connected learners, followers and observers, synced or not.
    pub learners: usize,
    /// Followers synced and receiving proposals.
    pub synced_followers: usize,
    /// Observers synced and receiving INFORMs.
    pub synced_observers: usize,
    /// `sync` requests waiting for their answer.
    pub pending_syncs: usize,
    /// Learners sent their DIFF, TRUNC or SNAP and not yet done syncing (NEWLEADER not ACKed).
    pub syncing: usize,
}

/// What the leader's storage found in the on-disk txn log for a learner behind the in-memory
/// history: the answer to [`Action::ProbeLog`], the facts ZooKeeper's `ZKDatabase`
/// (`getProposalsFromTxnLog`, `calculateTxnLogSizeLimit`) looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogProbe {
    /// The learner's last zxid the probe looked for.
    pub after: Zxid,
    /// The log holds a record with exactly the zxid `after` (ZooKeeper refuses a log whose first
    /// record at or above it is above it).
    pub found: bool,
    /// Bytes of the log files after the one holding `after` (ZooKeeper's
    /// `FileTxnIterator.getStorageSize`, which leaves that first file out).
    pub log_bytes: u64,
    /// Size of the newest snapshot file; 0 if there is none.
    pub snapshot_bytes: u64,
}

impl LogProbe {
    /// Whether a DIFF from disk is allowed at `factor` (ZooKeeper's rule: the limit is
    /// `snapshot_bytes * factor`, checked only when above 0; a factor below 0 disables it).
    pub fn allows_diff(&self, factor: f64) -> bool {
        if !self.found || factor < 0.0 {
            return false;
        }
        let limit = (self.snapshot_bytes as f64 * factor) as u64;
        limit == 0 || self.log_bytes <= limit
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum PeerPhase {
    /// FOLLOWERINFO / OBSERVERINFO received; waiting for the epoch to be fixed.
    Info,
    LeaderInfoSent,
    /// ACKEPOCH received; waiting for the epoch quorum before sync.
    EpochAcked,
    /// Behind the in-memory history: waiting for the on-disk log's answer (`Action::ProbeLog`).
    Probing,
    NewLeaderSent,
    NewLeaderAcked,
    UpToDate,
}

#[derive(Debug, Clone)]
struct Peer {
    role: Role,
    accepted_epoch: i64,
    phase: PeerPhase,
    connected_ms: u64,
    last_heard_ms: u64,
    /// From ACKEPOCH.
    last_zxid: Zxid,
    /// Highest proposal zxid ACKed (cumulative: a follower logs in order).
    acked: Zxid,
    /// Receives later PROPOSAL/COMMIT (followers) or INFORM (observers).
    forwarding: bool,
    /// When each PING sent to it and not yet answered was sent (a learner answers every PING
    /// with one PING, in order, as ZooKeeper's followers and observers do).
    pings: VecDeque<u64>,
    /// PINGs sent to it and answered by it since it connected.
    pings_sent: u64,
    pings_answered: u64,
    /// The latest send time of a packet it has answered: it followed this leader then, and
    /// will not give up on it before `sync_limit` ticks after (the lease counts from here).
    vouched_ms: u64,
}

impl Peer {
    fn synced(&self) -> bool {
        self.phase >= PeerPhase::NewLeaderAcked
    }
}

/// Where a leadership attempt stands. The phases follow each other in this order (or end in
/// `Stopped`), each reached only through the one before, so no state can claim, say, to be
/// established before its epoch files are durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a quorum of FOLLOWERINFO (the leader included) to fix the new epoch.
    Discovery,
    /// The epoch is fixed; `acceptedEpoch` is being made durable before any LEADERINFO.
    AcceptingEpoch { epoch: i64 },
    /// `acceptedEpoch` is durable and LEADERINFO goes out; waiting for a quorum of ACKEPOCH.
    AgreeingEpoch { epoch: i64 },
    /// A quorum agreed: `currentEpoch` is being made durable while learners are synced.
    WritingCurrentEpoch { epoch: i64 },
    /// `currentEpoch` is durable: waiting for a quorum of NEWLEADER ACKs (the leader counts).
    Syncing { epoch: i64 },
    /// Established: UPTODATE sent, proposals broadcast.
    Broadcast { epoch: i64 },
    /// Stepped down; the epoch it had fixed, and whether it had been established.
    Stopped { epoch: Option<i64>, established: bool },
}

impl Phase {
    /// The epoch being established or led, once fixed.
    fn epoch(self) -> Option<i64> {
        match self {
            Phase::Discovery => None,
            Phase::AcceptingEpoch { epoch }
            | Phase::AgreeingEpoch { epoch }
            | Phase::WritingCurrentEpoch { epoch }
            | Phase::Syncing { epoch }
            | Phase::Broadcast { epoch } => Some(epoch),
            Phase::Stopped { epoch, .. } => epoch,
        }
    }

    fn accepted_durable(self) -> bool {
        matches!(
            self,
            Phase::AgreeingEpoch { .. }
                | Phase::WritingCurrentEpoch { .. }
                | Phase::Syncing { .. }
                | Phase::Broadcast { .. }
        )
    }

    fn epoch_quorum(self) -> bool {
        matches!(self, Phase::WritingCurrentEpoch { .. } | Phase::Syncing { .. } | Phase::Broadcast { .. })
    }

    fn established(self) -> bool {
        matches!(self, Phase::Broadcast { .. } | Phase::Stopped { established: true, .. })
    }

    fn stopped(self) -> bool {
        matches!(self, Phase::Stopped { .. })
    }
}

/// The leader's state machine. See the module docs.
#[derive(Debug)]
pub struct Leader {
    cfg: LeaderConfig,
    accepted_epoch: i64,
    current_epoch: i64,
    phase: Phase,
    started_ms: u64,
    now_ms: u64,
    epoch_ackers: BTreeSet<Sid>,
    newleader_ackers: BTreeSet<Sid>,
    peers: BTreeMap<Sid, Peer>,
    /// Txns after `history_base`, up to `last_proposed`.
    history: VecDeque<TxnEntry>,
    history_base: Zxid,
    committed: Zxid,
    last_proposed: Zxid,
    self_durable: Zxid,
    /// When each outstanding (uncommitted) proposal was made.
    proposed_at_ms: BTreeMap<Zxid, u64>,
    /// How long each proposal committed since the last [`Leader::take_ack_latencies`] waited
    /// for its quorum of ACKs, in ms (ZooKeeper's `quorum_ack_latency`); drained by the caller,
    /// so its capacity is reused.
    ack_latencies: Vec<u64>,
    /// Syncs waiting for their confirmation round and for a zxid to commit, in arrival order.
    pending_syncs: VecDeque<PendingSync>,
    /// PING rounds sent and not yet confirmed by a quorum, oldest first.
    rounds: VecDeque<Round>,
    /// The last round started and the last one a quorum confirmed.
    round_started: u64,
    round_confirmed: u64,
    /// The round started for waiting syncs, until it is confirmed.
    sync_round: Option<u64>,
    /// Learners whose DIFF from disk failed: their next sync is a SNAP.
    no_log_diff: BTreeSet<Sid>,
    /// Proposed and not yet committed reconfigs: each one's zxid and the voters of the
    /// configuration it makes. Every proposal from that zxid on needs a quorum of those voters
    /// too, besides one of `cfg.voters` (ZooKeeper's proposals carrying both verifiers).
    pending_configs: Vec<(Zxid, Membership)>,
    out: Vec<Action>,
}

impl Leader {
    /// Starts leading. A one-voter ensemble fixes its epoch at once (the actions pushed to `out`).
    pub fn new(
        cfg: LeaderConfig,
        init: LeaderInit,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) -> Result<Self, LeaderInitError> {
        if !cfg.voters.contains(&cfg.my_sid) {
            return Err(LeaderInitError::NotAVoter(cfg.my_sid));
        }
        let mut prev = init.history_base;
        for e in &init.history {
            if !follows(prev, e.zxid()) {
                return Err(LeaderInitError::HistoryHole { after: prev, at: e.zxid() });
            }
            prev = e.zxid();
        }
        if prev != init.last_zxid {
            return Err(LeaderInitError::HistoryEnd { history: prev, log: init.last_zxid });
        }
        let pending_configs: Vec<(Zxid, Membership)> = init.pending_config.into_iter().collect();
        let mut leader = Leader {
            accepted_epoch: init.accepted_epoch,
            current_epoch: init.current_epoch,
            phase: Phase::Discovery,
            started_ms: now_ms,
            now_ms,
            epoch_ackers: BTreeSet::new(),
            newleader_ackers: BTreeSet::new(),
            peers: BTreeMap::new(),
            history: init.history.into(),
            history_base: init.history_base,
            committed: init.last_zxid,
            last_proposed: init.last_zxid,
            self_durable: init.last_zxid,
            proposed_at_ms: BTreeMap::new(),
            ack_latencies: Vec::new(),
            pending_syncs: VecDeque::new(),
            rounds: VecDeque::new(),
            round_started: 0,
            round_confirmed: 0,
            sync_round: None,
            no_log_diff: BTreeSet::new(),
            pending_configs,
            out: Vec::new(),
            cfg,
        };
        leader.trim_history();
        leader.check_discovery_quorum();
        leader.take(out);
        Ok(leader)
    }

    // ----- queries -----

    /// The epoch being established or led, once fixed.
    pub fn epoch(&self) -> Option<i64> {
        self.phase.epoch()
    }
    pub fn is_established(&self) -> bool {
        matches!(self.phase, Phase::Broadcast { .. })
    }
    pub fn is_stopped(&self) -> bool {
        self.phase.stopped()
    }
    pub fn last_committed(&self) -> Zxid {
        self.committed
    }
    pub fn last_proposed(&self) -> Zxid {
        self.last_proposed
    }
    /// What ZooKeeper's leader gauges count (`learners`, `synced_followers`,
    /// `synced_observers`, `pending_syncs`).
    pub fn gauges(&self) -> LeaderGauges {
        let synced = |role: Role| self.peers.values().filter(|p| p.role == role && p.synced() && p.forwarding).count();
        LeaderGauges {
            learners: self.peers.len(),
            synced_followers: synced(Role::Follower),
            synced_observers: self.synced_observers().count(),
            pending_syncs: self.pending_syncs.len(),
            syncing: self.peers.values().filter(|p| p.phase == PeerPhase::NewLeaderSent).count(),
        }
    }

    /// Hands each commit's quorum ACK latency (ms) since the last call to `record`.
    pub fn take_ack_latencies(&mut self, mut record: impl FnMut(u64)) {
        for ms in self.ack_latencies.drain(..) {
            record(ms);
        }
    }

    /// The observers the `synced_observers` gauge counts (synced and receiving INFORMs), in sid
    /// order: ZooKeeper's `Leader.getObservingLearners`, for the `observers` command.
    pub fn synced_observers(&self) -> impl Iterator<Item = Sid> + '_ {
        self.peers.iter().filter(|(_, p)| p.role == Role::Observer && p.synced() && p.forwarding).map(|(s, _)| *s)
    }

    /// Learners that ACKed NEWLEADER (synced), in sid order.
    pub fn synced_learners(&self) -> Vec<Sid> {
        self.peers.iter().filter(|(_, p)| p.synced()).map(|(s, _)| *s).collect()
    }

    // ----- inputs -----

    /// A packet from learner `from`. The shell keys connections by the sid in the first packet
    /// (FOLLOWERINFO / OBSERVERINFO: `LearnerInfo.server_id`); a new FOLLOWERINFO from a known sid
    /// replaces that learner's old connection.
    pub fn on_packet(&mut self, from: Sid, packet: &QuorumPacket, now_ms: u64, out: &mut Vec<Action>) {
        self.now_ms = self.now_ms.max(now_ms);
        if self.phase.stopped() {
            return;
        }
        match packet.packet_type {
            pt::FOLLOWERINFO => self.on_info(from, packet, Role::Follower),
            pt::OBSERVERINFO => self.on_info(from, packet, Role::Observer),
            _ => self.on_peer_packet(from, packet),
        }
        self.take(out);
    }

    /// Storage reports the leader's own log durable through `zxid`.
    pub fn on_durable(&mut self, zxid: Zxid, out: &mut Vec<Action>) {
        if !self.phase.stopped() {
            self.self_durable = self.self_durable.max(zxid.min(self.last_proposed));
            self.try_commit();
        }
        self.take(out);
    }

    /// Storage reports an epoch file durable.
    pub fn on_epoch_durable(&mut self, kind: EpochKind, epoch: i64, out: &mut Vec<Action>) {
        match (kind, self.phase) {
            (EpochKind::Accepted, Phase::AcceptingEpoch { epoch: e }) if e == epoch => {
                self.phase = Phase::AgreeingEpoch { epoch };
                self.accepted_epoch = epoch;
                let waiting: Vec<Sid> =
                    self.peers.iter().filter(|(_, p)| p.phase == PeerPhase::Info).map(|(s, _)| *s).collect();
                for sid in waiting {
                    self.send_leader_info(sid);
                }
                self.check_epoch_quorum();
            }
            (EpochKind::Current, Phase::WritingCurrentEpoch { epoch: e }) if e == epoch => {
                self.phase = Phase::Syncing { epoch };
                self.current_epoch = epoch;
                self.check_established();
            }
            _ => {}
        }
        self.take(out);
    }

    /// Storage's answer to `Action::ProbeLog` for learner `sid`: its sync goes on, by DIFF from
    /// disk or by SNAP. An answer for a learner no longer waiting for it (reconnected, gone) is
    /// dropped.
    pub fn on_log_probe(&mut self, sid: Sid, probe: LogProbe, out: &mut Vec<Action>) {
        let waiting = self.peers.get(&sid).is_some_and(|p| p.phase == PeerPhase::Probing && p.last_zxid == probe.after);
        if waiting && !self.phase.stopped() {
            self.sync_peer_with(sid, Some(probe));
        }
        self.take(out);
    }

    /// The shell could not stream `Action::SendLogDiff` to `sid` and closed its connection: the
    /// learner's next sync is a SNAP.
    pub fn on_log_diff_failed(&mut self, sid: Sid, out: &mut Vec<Action>) {
        self.no_log_diff.insert(sid);
        if self.peers.contains_key(&sid) {
            self.disconnect(sid, "DIFF from the on-disk log failed");
        }
        self.take(out);
    }

    /// The connection to `sid` closed.
    pub fn on_disconnect(&mut self, sid: Sid, out: &mut Vec<Action>) {
        self.remove_peer(sid);
        self.take(out);
    }

    /// A tick: timeouts, the quorum check and PINGs.
    pub fn on_tick(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        self.now_ms = self.now_ms.max(now_ms);
        if self.phase.stopped() {
            return;
        }
        let now = self.now_ms;
        let init_ms = self.cfg.tick_ms * u64::from(self.cfg.init_limit);
        let sync_ms = self.cfg.tick_ms * u64::from(self.cfg.sync_limit);
        if !self.is_established() && now.saturating_sub(self.started_ms) > init_ms {
            self.stop("no quorum established within initLimit");
            return self.take(out);
        }
        let mut drop = Vec::new();
        for (sid, p) in &self.peers {
            if !p.synced() {
                if now.saturating_sub(p.connected_ms) > init_ms {
                    drop.push((*sid, "handshake not finished within initLimit"));
                }
            } else if now.saturating_sub(p.last_heard_ms) > sync_ms {
                drop.push((*sid, "silent for syncLimit"));
            } else if p.role == Role::Follower {
                if let Some((_, at)) = self.proposed_at_ms.range(p.acked + 1..).next() {
                    if now.saturating_sub(*at) > sync_ms {
                        drop.push((*sid, "proposal not acknowledged within syncLimit"));
                    }
                }
            }
        }
        for (sid, reason) in drop {
            self.disconnect(sid, reason);
        }
        if self.is_established() {
            let synced = self.peers.iter().filter(|(_, p)| p.role == Role::Follower && p.synced()).map(|(s, _)| *s);
            if !self.is_quorum(synced.chain([self.cfg.my_sid])) {
                self.stop("lost quorum of synced followers");
                return self.take(out);
            }
        }
        self.ping_round();
        self.take(out);
    }

    /// Proposes a txn in the established epoch: Persist locally, PROPOSAL to forwarding followers.
    pub fn propose(
        &mut self,
        client_id: i64,
        cxid: i32,
        time_ms: i64,
        txn: Txn,
        out: &mut Vec<Action>,
    ) -> Result<Zxid, ProposeError> {
        let txn_type = txn.op().code();
        self.propose_typed(client_id, cxid, time_ms, txn_type, txn, out)
    }

    /// As `propose`, with the TxnHeader type given (`Txn::header_type`: a create2 request's
    /// CreateTxn is type 15).
    pub fn propose_typed(
        &mut self,
        client_id: i64,
        cxid: i32,
        time_ms: i64,
        txn_type: i32,
        txn: Txn,
        out: &mut Vec<Action>,
    ) -> Result<Zxid, ProposeError> {
        if self.phase.stopped() {
            return Err(ProposeError::Stopped);
        }
        let Phase::Broadcast { epoch } = self.phase else { return Err(ProposeError::NotEstablished) };
        let zxid = if epoch_of(self.last_proposed) == epoch {
            if counter_of(self.last_proposed) >= self.cfg.max_counter {
                return Err(ProposeError::ZxidExhausted);
            }
            self.last_proposed + 1
        } else {
            make_zxid(epoch, 1)
        };
        if let Txn::Reconfig { data, .. } = &txn {
            let members = data.as_deref().and_then(|d| Membership::parse_text(std::str::from_utf8(d).ok()?).ok());
            match members {
                Some(m) => self.pending_configs.push((zxid, m)),
                None => return Err(ProposeError::BadConfig),
            }
        }
        let hdr = TxnHeader { client_id, cxid, zxid, time_ms, txn_type };
        let entry = TxnEntry { hdr, txn: txn.into(), digest: None };
        self.last_proposed = zxid;
        self.proposed_at_ms.insert(zxid, self.now_ms);
        let packet = codec::proposal(&entry);
        self.history.push_back(entry.clone());
        self.out.push(Action::Persist(entry));
        let targets: Vec<Sid> =
            self.peers.iter().filter(|(_, p)| p.forwarding && p.role == Role::Follower).map(|(s, _)| *s).collect();
        for sid in targets {
            self.send(sid, packet.clone());
        }
        self.take(out);
        Ok(zxid)
    }

    /// A sync from learner `from` (a SYNC answers it) or from this server's own client (`from`
    /// is the leader's sid; [`Action::SyncDone`] answers it). It is answered once everything
    /// proposed before it is committed and a quorum of voters has answered a PING sent after it
    /// arrived, proving this server still led the epoch then. ZooKeeper's leader answers at once
    /// when nothing is pending, so a leader that was paused or cut off while the others elected
    /// a new one answers a sync its clients then read stale data after; Warden's cannot.
    /// Syncs batch: while one confirmation round is out, later syncs wait for the next, which
    /// starts when it returns (or with the next tick's PINGs).
    pub fn sync(&mut self, from: Sid, out: &mut Vec<Action>) {
        if self.phase.stopped() {
            return;
        }
        let round = self.round_started + 1;
        self.pending_syncs.push_back(PendingSync { zxid: self.last_proposed, from, round });
        if self.sync_round.is_none() {
            self.sync_round = Some(round);
            self.ping_round();
        }
        self.take(out);
    }

    /// Steps down at once if the lease ([`LeaderConfig::lease_ms`]) ran out: no quorum of voters
    /// has vouched for this leader recently enough to rule out a newer leader. The shell calls
    /// it before every input, so a leader that wakes from a pause (or whose clock jumped) serves
    /// no read and no sync before it notices.
    pub fn check_lease(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        self.now_ms = self.now_ms.max(now_ms);
        if self.is_established() && self.now_ms.saturating_sub(self.lease_start()) > self.cfg.lease_ms() {
            self.stop("lease expired: no quorum of followers heard within the lease");
        }
        self.take(out);
    }

    /// The latest time at which a quorum of voters (the leader counting as now) vouched for it.
    fn lease_start(&self) -> u64 {
        let needed = self.cfg.voters.len() / 2; // followers, besides the leader
        if needed == 0 {
            return self.now_ms;
        }
        // The `needed`-th latest vouching among voting followers (no allocation: called per input).
        let vouched = || {
            self.peers
                .iter()
                .filter(|(s, p)| p.role == Role::Follower && p.synced() && self.cfg.voters.contains(s))
                .map(|(_, p)| p.vouched_ms)
        };
        vouched().filter(|t| vouched().filter(|u| u >= t).count() >= needed).max().unwrap_or(0)
    }

    /// Gives up leadership (shutdown, or after `ProposeError::ZxidExhausted`).
    pub fn step_down(&mut self, reason: &str, out: &mut Vec<Action>) {
        if !self.phase.stopped() {
            self.stop(reason);
        }
        self.take(out);
    }

    // ----- discovery -----

    fn on_info(&mut self, from: Sid, packet: &QuorumPacket, role: Role) {
        let info = match packet.data.as_deref().map(LearnerInfo::decode_lenient) {
            Some(Ok(info)) => info,
            _ => return self.disconnect(from, "malformed LearnerInfo"),
        };
        if info.server_id != from {
            return self.disconnect(from, "LearnerInfo sid differs from the connection's");
        }
        // A follower outside the voters is a non-voting follower (a server about to be added by
        // a reconfig, or one a reconfig removed): it follows, and its ACKs count only in a
        // configuration that makes it a voter. An observer is taken as one whatever the
        // configuration says (it may know a newer one than this leader has committed); its
        // ACKs never count, as in ZooKeeper's LearnerHandler.
        if from == self.cfg.my_sid {
            return self.disconnect(from, "learner type does not match the configuration");
        }
        if let Some(epoch) = self
            .phase
            .epoch()
            .filter(|e| role == Role::Follower && self.cfg.voters.contains(&from) && epoch_of(packet.zxid) > *e)
        {
            // The voter promised a newer epoch (a leader attempt that never established) and will
            // refuse ours for good; stepping down lets the next discovery pick an epoch above it.
            return self.stop(&format!(
                "voter {from} accepted epoch {} above ours ({epoch}); a new election must pick a higher one",
                epoch_of(packet.zxid)
            ));
        }
        self.remove_peer(from);
        let peer = Peer {
            role,
            accepted_epoch: epoch_of(packet.zxid),
            phase: PeerPhase::Info,
            connected_ms: self.now_ms,
            last_heard_ms: self.now_ms,
            last_zxid: -1,
            acked: -1,
            forwarding: false,
            pings: VecDeque::new(),
            pings_sent: 0,
            pings_answered: 0,
            vouched_ms: 0,
        };
        self.peers.insert(from, peer);
        if self.phase.accepted_durable() {
            self.send_leader_info(from);
        } else {
            self.check_discovery_quorum();
        }
    }

    fn check_discovery_quorum(&mut self) {
        if self.phase != Phase::Discovery {
            return;
        }
        let connecting: Vec<(Sid, i64)> = self
            .peers
            .iter()
            .filter(|(_, p)| p.role == Role::Follower && p.phase == PeerPhase::Info)
            .map(|(s, p)| (*s, p.accepted_epoch))
            .chain([(self.cfg.my_sid, self.accepted_epoch)])
            .collect();
        if self.is_quorum(connecting.iter().map(|(s, _)| *s)) {
            let max = connecting.iter().map(|(_, e)| *e).max().unwrap_or(self.accepted_epoch);
            let epoch = max.max(self.current_epoch) + 1;
            self.phase = Phase::AcceptingEpoch { epoch };
            if let Some(m) = self.cfg.membership.as_mut().filter(|m| m.version == 0 && self.cfg.reconfig_enabled) {
                m.version = make_zxid(epoch, 0);
            }
            self.out.push(Action::PersistEpoch { kind: EpochKind::Accepted, epoch });
        }
    }

    fn send_leader_info(&mut self, sid: Sid) {
        let Some(epoch) = self.phase.epoch() else { return };
        if let Some(p) = self.peers.get_mut(&sid) {
            p.phase = PeerPhase::LeaderInfoSent;
            self.send(sid, codec::leader_info(epoch));
        }
    }

    fn on_ack_epoch(&mut self, from: Sid, packet: &QuorumPacket) {
        let Ok(current) = codec::decode_int(packet) else {
            return self.disconnect(from, "malformed ACKEPOCH");
        };
        let current = i64::from(current);
        if current != -1 {
            let mine = (self.current_epoch, self.last_proposed);
            if (current, packet.zxid) > mine {
                return self.stop(&format!(
                    "learner {from} is more recent (epoch {current}, zxid {:#x}) than the leader (epoch {}, zxid {:#x})",
                    packet.zxid, mine.0, mine.1
                ));
            }
        }
        let Some(p) = self.peers.get_mut(&from) else { return };
        p.phase = PeerPhase::EpochAcked;
        p.last_zxid = packet.zxid;
        if current != -1 && p.role == Role::Follower && self.counts(from) {
            self.epoch_ackers.insert(from);
        }
        if self.phase.epoch_quorum() {
            self.sync_peer(from);
        } else {
            self.check_epoch_quorum();
        }
    }

    fn check_epoch_quorum(&mut self) {
        let Phase::AgreeingEpoch { epoch } = self.phase else { return };
        let ackers: BTreeSet<Sid> =
            self.epoch_ackers.iter().copied().filter(|s| self.peers.contains_key(s)).chain([self.cfg.my_sid]).collect();
        if !self.is_quorum_of_all(&ackers) {
            return;
        }
        self.phase = Phase::WritingCurrentEpoch { epoch };
        self.out.push(Action::PersistEpoch { kind: EpochKind::Current, epoch });
        let waiting: Vec<Sid> =
            self.peers.iter().filter(|(_, p)| p.phase == PeerPhase::EpochAcked).map(|(s, _)| *s).collect();
        for sid in waiting {
            self.sync_peer(sid);
        }
    }

    // ----- sync -----

    /// DIFF / TRUNC / SNAP for one learner, the txns it lacks, then NEWLEADER.
    fn sync_peer(&mut self, sid: Sid) {
        self.sync_peer_with(sid, None);
    }

    /// As `sync_peer`, with what the on-disk log holds for a learner behind the in-memory
    /// history (`None`: not asked yet; such a learner is then asked about first).
    fn sync_peer_with(&mut self, sid: Sid, probe: Option<LogProbe>) {
        let Some(epoch) = self.phase.epoch() else { return };
        let Some(peer) = self.peers.get(&sid) else { return };
        let role = peer.role;
        let peer_last = peer.last_zxid;
        let upto = if role == Role::Follower { self.last_proposed } else { self.committed };
        let plan = self.plan_sync(sid, peer_last, upto, probe);
        let from = match plan {
            SyncPlan::Diff { from } => {
                self.send(sid, QuorumPacket::new(pt::DIFF, self.committed));
                from
            }
            SyncPlan::ProbeLog => {
                if let Some(p) = self.peers.get_mut(&sid) {
                    p.phase = PeerPhase::Probing;
                }
                self.out.push(Action::ProbeLog { to: sid, after: peer_last });
                return;
            }
            SyncPlan::LogDiff { from } => {
                // LearnerHandler: DIFF, the txns from the on-disk log up to where the in-memory
                // history starts, then the history (below), then NEWLEADER.
                self.send(sid, QuorumPacket::new(pt::DIFF, self.committed));
                self.out.push(Action::SendLogDiff { to: sid, after: from, upto: self.history_base });
                self.history_base
            }
            SyncPlan::Trunc { to } => {
                self.send(sid, QuorumPacket::new(pt::TRUNC, to));
                to
            }
            SyncPlan::Snap => {
                self.no_log_diff.remove(&sid);
                self.send(sid, QuorumPacket::new(pt::SNAP, self.committed));
                self.out.push(Action::SendSnapshot { to: sid, zxid: self.committed });
                self.committed
            }
        };
        let start = self.history.partition_point(|e| e.zxid() <= from);
        let mut packets = Vec::new();
        for e in self.history.iter().skip(start).take_while(|e| e.zxid() <= upto) {
            packets.push(codec::proposal(e));
            if e.zxid() <= self.committed {
                packets.push(QuorumPacket::new(pt::COMMIT, e.zxid()));
            }
        }
        for p in packets {
            self.send(sid, p);
        }
        let data = self.cfg.membership.as_ref().map_or_else(Vec::new, |m| m.to_text().into_bytes());
        let nl = QuorumPacket::with_data(pt::NEWLEADER, make_zxid(epoch, 0), data);
        self.send(sid, nl);
        let now = self.now_ms;
        if let Some(p) = self.peers.get_mut(&sid) {
            p.phase = PeerPhase::NewLeaderSent;
            p.forwarding = true;
            // Its ACK of NEWLEADER vouches from here.
            p.pings.push_back(now);
        }
    }

    /// ZooKeeper's `LearnerHandler.syncFollower` choice, over the in-memory log `(base, upto]`
    /// and, for a learner behind it, the on-disk log (`probe`).
    fn plan_sync(&self, sid: Sid, peer_last: Zxid, upto: Zxid, probe: Option<LogProbe>) -> SyncPlan {
        if peer_last == upto {
            return SyncPlan::Diff { from: peer_last };
        }
        let in_log = |z: Zxid| z == self.history_base || self.history.iter().any(|e| e.zxid() == z);
        if peer_last > upto {
            // The learner has txns the leader never saw (it may have led): roll it back to the
            // last committed txn, as ZooKeeper does, then forward the outstanding proposals.
            return SyncPlan::Trunc { to: self.committed.min(upto) };
        }
        if peer_last < self.history_base {
            // Older than the in-memory history: from the on-disk log if it holds the learner's
            // zxid and is small enough next to a snapshot (`txnLogSyncEnabled`,
            // `getProposalsFromTxnLog`), else SNAP. The log is durable through `committed`, so
            // the records up to `history_base` are all there unless purged since the probe; the
            // shell reports that (`on_log_diff_failed`) and the learner gets SNAP next time.
            if self.cfg.snapshot_size_factor < 0.0 || self.no_log_diff.contains(&sid) {
                return SyncPlan::Snap;
            }
            return match probe {
                None => SyncPlan::ProbeLog,
                Some(p) if p.after == peer_last && p.allows_diff(self.cfg.snapshot_size_factor) => {
                    SyncPlan::LogDiff { from: peer_last }
                }
                Some(_) => SyncPlan::Snap,
            };
        }
        if in_log(peer_last) || (counter_of(peer_last) == 0 && peer_last > self.history_base) {
            return SyncPlan::Diff { from: peer_last };
        }
        // peer_last lies inside the log's range but is not in it: the learner has a tail in an
        // epoch where our (gap-free) history stops earlier, so our next txn is in a later epoch.
        // ZooKeeper sends a snapshot here too: TRUNC must not cross an epoch boundary, because the
        // learner may not hold our txn before it. (A divergent tail inside one epoch cannot
        // exist: a log holds a gap-free prefix of each epoch's proposals.)
        SyncPlan::Snap
    }

    // ----- established phases -----

    fn on_peer_packet(&mut self, from: Sid, packet: &QuorumPacket) {
        let now = self.now_ms;
        let Some(p) = self.peers.get_mut(&from) else { return };
        p.last_heard_ms = now;
        let phase = p.phase;
        match packet.packet_type {
            pt::ACKEPOCH if phase == PeerPhase::LeaderInfoSent => self.on_ack_epoch(from, packet),
            pt::ACK => self.on_ack(from, packet.zxid),
            pt::PING if phase >= PeerPhase::NewLeaderAcked => {
                if p.pings_answered < p.pings_sent {
                    p.pings_answered += 1;
                    if let Some(sent) = p.pings.pop_front() {
                        p.vouched_ms = p.vouched_ms.max(sent);
                    }
                }
                match codec::decode_touches(packet.data.as_deref().unwrap_or(&[])) {
                    Ok(touches) if !touches.is_empty() => self.out.push(Action::TouchSessions { from, touches }),
                    Ok(_) => {}
                    Err(_) => return self.disconnect(from, "malformed PING"),
                }
                self.check_rounds();
            }
            pt::REQUEST if phase >= PeerPhase::NewLeaderAcked => match codec::ForwardedRequest::from_packet(packet) {
                Ok(request) => self.out.push(Action::Forwarded { from, request }),
                Err(_) => self.disconnect(from, "malformed REQUEST"),
            },
            pt::REVALIDATE => match codec::decode_revalidate(packet.data.as_deref().unwrap_or(&[])) {
                Ok((session_id, timeout_ms)) => self.out.push(Action::Revalidate { from, session_id, timeout_ms }),
                Err(_) => self.disconnect(from, "malformed REVALIDATE"),
            },
            _ => self.disconnect(from, "unexpected packet for the learner's phase"),
        }
    }

    fn on_ack(&mut self, from: Sid, zxid: Zxid) {
        let Some(epoch) = self.phase.epoch() else { return };
        let newleader_zxid = make_zxid(epoch, 0);
        let Some(p) = self.peers.get_mut(&from) else { return };
        match p.phase {
            PeerPhase::NewLeaderSent if zxid == newleader_zxid => {
                p.phase = PeerPhase::NewLeaderAcked;
                if let Some(sent) = p.pings.pop_front() {
                    p.vouched_ms = p.vouched_ms.max(sent);
                }
                if p.role == Role::Follower && self.counts(from) {
                    self.newleader_ackers.insert(from);
                }
                if self.is_established() {
                    self.send_uptodate(from);
                } else {
                    self.check_established();
                }
            }
            PeerPhase::NewLeaderAcked | PeerPhase::UpToDate => {
                if zxid == newleader_zxid {
                    return; // the UPTODATE ack
                }
                if zxid > self.last_proposed || epoch_of(zxid) != epoch {
                    return self.disconnect(from, "ACK for a zxid never proposed in this epoch");
                }
                if p.role == Role::Follower {
                    p.acked = p.acked.max(zxid);
                    self.try_commit();
                }
            }
            _ => self.disconnect(from, "ACK before the learner ACKed NEWLEADER"),
        }
    }

    fn check_established(&mut self) {
        let Phase::Syncing { epoch } = self.phase else { return };
        let ackers: BTreeSet<Sid> = self
            .newleader_ackers
            .iter()
            .copied()
            .filter(|s| self.peers.contains_key(s))
            .chain([self.cfg.my_sid])
            .collect();
        if !self.is_quorum_of_all(&ackers) {
            return;
        }
        // The history is committed now, a reconfig in it too: its configuration is active.
        while let Some(&(rz, _)) = self.pending_configs.first().filter(|(rz, _)| *rz <= self.committed) {
            self.activate_config(rz);
        }
        let ready: Vec<Sid> =
            self.peers.iter().filter(|(_, p)| p.phase == PeerPhase::NewLeaderAcked).map(|(s, _)| *s).collect();
        if !self.cfg.voters.contains(&self.cfg.my_sid) {
            // The learners take the configuration NEWLEADER carried at UPTODATE, and leave this
            // leader for it, as ZooKeeper's do after its leader, no longer designated, starts up.
            for sid in ready {
                self.send_uptodate(sid);
            }
            let reason = "this leader is not a voter of the configuration its history makes active".to_string();
            return self.stop_with(Action::StepAside { reason });
        }
        self.phase = Phase::Broadcast { epoch };
        self.out.push(Action::Broadcasting { epoch });
        for sid in ready {
            self.send_uptodate(sid);
        }
    }

    fn send_uptodate(&mut self, sid: Sid) {
        if let Some(p) = self.peers.get_mut(&sid) {
            p.phase = PeerPhase::UpToDate;
            self.send(sid, QuorumPacket::new(pt::UPTODATE, -1));
        }
    }

    /// Commits outstanding proposals in zxid order while each has a quorum of durable ACKs that
    /// includes the leader's own: `ApplyCommitted` (and the client reply that follows it) must
    /// never precede the leader's own fsync, even when the followers are faster.
    ///
    /// A proposal made after a sync arrived commits only once that sync is answered, so the sync
    /// (a learner's SYNC, this server's `SyncDone`) comes before the COMMITs of later proposals,
    /// as ZooKeeper's leader sends it: a session's reads queued behind its sync are then served
    /// before its own later writes apply, never on a tree that already holds them. (The sync
    /// waits for a PING round; without this, later writes could commit first.)
    fn try_commit(&mut self) {
        if !self.is_established() {
            return;
        }
        loop {
            let idx = self.history.partition_point(|e| e.zxid() <= self.committed);
            let Some(entry) = self.history.get(idx) else { break };
            let z = entry.zxid();
            if self.self_durable < z {
                break;
            }
            if self.pending_syncs.front().is_some_and(|s| s.zxid < z && s.round > self.round_confirmed) {
                break;
            }
            let ackers: BTreeSet<Sid> = self
                .peers
                .iter()
                .filter(|(_, p)| p.role == Role::Follower && p.synced() && p.acked >= z)
                .map(|(s, _)| *s)
                .chain([self.cfg.my_sid])
                .collect();
            if !self.is_quorum(ackers.iter().copied()) {
                break;
            }
            let pending = self.pending_configs.iter().take_while(|(rz, _)| *rz <= z);
            if !pending.into_iter().all(|(_, m)| majority_of(&voter_sids(m), &ackers)) {
                break;
            }
            let entry = entry.clone();
            self.commit(entry);
        }
    }

    fn commit(&mut self, entry: TxnEntry) {
        let z = entry.zxid();
        self.committed = z;
        if let Some(at) = self.proposed_at_ms.remove(&z) {
            self.ack_latencies.push(self.now_ms.saturating_sub(at));
        }
        let activated = self.pending_configs.first().filter(|(rz, _)| *rz == z).is_some();
        let designated = activated.then(|| self.activate_config(z));
        let commit = match designated {
            None => QuorumPacket::new(pt::COMMIT, z),
            Some(sid) => QuorumPacket::with_data(pt::COMMITANDACTIVATE, z, sid.to_be_bytes().to_vec()),
        };
        let targets: Vec<(Sid, Role)> =
            self.peers.iter().filter(|(_, p)| p.forwarding).map(|(s, p)| (*s, p.role)).collect();
        // An INFORM carries the whole txn: encoded only when an observer is there to take it.
        let mut inform = None;
        for (sid, role) in targets {
            let packet = if role == Role::Follower {
                commit.clone()
            } else {
                inform.get_or_insert_with(|| codec::inform_activate(&entry, designated)).clone()
            };
            self.send(sid, packet);
        }
        self.out.push(Action::ApplyCommitted(entry));
        if let Some(d) = designated.filter(|d| *d != self.cfg.my_sid) {
            // Removed from the voters by its own reconfig: it commits nothing more and hands
            // over to the designated voter, which its followers now follow too. (ZooKeeper's
            // leader lingers until its followers leave; this one leaves at once.)
            self.phase = Phase::Stopped { epoch: self.phase.epoch(), established: self.phase.established() };
            self.out.push(Action::HandOver { leader: d });
        }
        self.answer_syncs();
        self.trim_history();
    }

    fn trim_history(&mut self) {
        while self.history.len() > self.cfg.max_committed_log
            && self.history.front().is_some_and(|e| e.zxid() <= self.committed)
        {
            if let Some(e) = self.history.pop_front() {
                self.history_base = e.zxid();
            }
        }
    }

    // ----- confirmation rounds -----

    /// PINGs every synced learner; the answers of voting followers confirm the round.
    fn ping_round(&mut self) {
        self.round_started += 1;
        let ping = QuorumPacket::new(pt::PING, self.last_proposed);
        let now = self.now_ms;
        let targets: Vec<Sid> = self.peers.iter().filter(|(_, p)| p.synced()).map(|(s, _)| *s).collect();
        let mut marks = BTreeMap::new();
        for sid in targets {
            let Some(p) = self.peers.get_mut(&sid) else { continue };
            p.pings.push_back(now);
            p.pings_sent += 1;
            if p.role == Role::Follower && self.cfg.voters.contains(&sid) {
                marks.insert(sid, p.pings_sent);
            }
            self.send(sid, ping.clone());
        }
        self.rounds.push_back(Round { id: self.round_started, marks });
        if self.rounds.len() > MAX_ROUNDS {
            // A later round's confirmation covers everything an older one would have.
            self.rounds.pop_front();
        }
        self.check_rounds();
    }

    /// Confirms the newest round a quorum has answered (older ones with it), answers the syncs
    /// it covers, and starts the next round for syncs still waiting.
    fn check_rounds(&mut self) {
        let newest = self
            .rounds
            .iter()
            .rev()
            .find(|r| {
                let answered =
                    r.marks.iter().filter(|(sid, seq)| self.peers.get(sid).is_some_and(|p| p.pings_answered >= **seq));
                self.is_quorum(answered.map(|(s, _)| *s).chain([self.cfg.my_sid]))
            })
            .map(|r| r.id);
        if let Some(id) = newest {
            self.round_confirmed = id;
            self.rounds.retain(|r| r.id > id);
            if self.sync_round.is_some_and(|r| r <= id) {
                self.sync_round = None;
            }
        }
        self.answer_syncs();
        // Proposals held behind the syncs just answered.
        self.try_commit();
        let waiting = self.pending_syncs.back().is_some_and(|s| s.round > self.round_confirmed);
        if waiting && self.sync_round.is_none() && self.is_established() {
            self.sync_round = Some(self.round_started + 1);
            self.ping_round();
        }
    }

    /// Answers, in order, the syncs whose round is confirmed and whose txns are committed.
    fn answer_syncs(&mut self) {
        while let Some(s) =
            self.pending_syncs.pop_front_if(|s| s.round <= self.round_confirmed && s.zxid <= self.committed)
        {
            if s.from == self.cfg.my_sid {
                self.out.push(Action::SyncDone);
            } else {
                self.send(s.from, QuorumPacket::new(pt::SYNC, 0));
            }
        }
    }

    /// The reconfig proposed at `z` commits: its voters become the configuration. Returns the
    /// designated leader (`Leader.getDesignatedLeader`): this server while it stays a voter,
    /// else the new configuration's synced voter that ACKed the most.
    fn activate_config(&mut self, z: Zxid) -> Sid {
        let (_, membership) = self.pending_configs.remove(0);
        self.cfg.voters = voter_sids(&membership);
        self.cfg.membership = Some(membership);
        // Quorums gathered under the old configuration are not counted under the new one.
        let voters = &self.cfg.voters;
        self.newleader_ackers.retain(|s| voters.contains(s));
        self.epoch_ackers.retain(|s| voters.contains(s));
        if self.cfg.voters.contains(&self.cfg.my_sid) {
            return self.cfg.my_sid;
        }
        self.peers
            .iter()
            .filter(|(s, p)| p.role == Role::Follower && p.synced() && p.acked >= z && self.cfg.voters.contains(s))
            .max_by_key(|(s, p)| (p.acked, **s))
            .map_or(self.cfg.my_sid, |(s, _)| *s)
    }

    /// Whether `sid`'s ACKs count: a voter of the active configuration or of a pending one.
    fn counts(&self, sid: Sid) -> bool {
        self.cfg.voters.contains(&sid) || self.pending_configs.iter().any(|(_, m)| voter_sids(m).contains(&sid))
    }

    /// A quorum of the active voters and of every pending configuration's voters.
    fn is_quorum_of_all(&self, ackers: &BTreeSet<Sid>) -> bool {
        majority_of(&self.cfg.voters, ackers)
            && self.pending_configs.iter().all(|(_, m)| majority_of(&voter_sids(m), ackers))
    }

    /// Whether a reconfig is proposed and not yet committed.
    pub fn reconfig_in_flight(&self) -> bool {
        !self.pending_configs.is_empty()
    }

    /// Whether `voters` has a quorum among this leader (if it is one of them) and the followers
    /// synced with it (`Leader.isQuorumSynced`): a reconfig to them could commit.
    pub fn is_quorum_synced(&self, voters: &BTreeSet<Sid>) -> bool {
        let synced: BTreeSet<Sid> = self
            .peers
            .iter()
            .filter(|(_, p)| p.role == Role::Follower && p.synced())
            .map(|(s, _)| *s)
            .chain([self.cfg.my_sid])
            .collect();
        majority_of(voters, &synced)
    }

    /// The voters of the active configuration.
    pub fn voters(&self) -> &BTreeSet<Sid> {
        &self.cfg.voters
    }

    /// The active configuration (its version set from the epoch once that is fixed).
    pub fn membership(&self) -> Option<&Membership> {
        self.cfg.membership.as_ref()
    }

    // ----- helpers -----

    fn is_quorum(&self, sids: impl Iterator<Item = Sid>) -> bool {
        // (`majority_of` over `cfg.voters`, without collecting when the caller has an iterator.)
        let set: BTreeSet<Sid> = sids.filter(|s| self.cfg.voters.contains(s)).collect();
        set.len() * 2 > self.cfg.voters.len()
    }

    fn send(&mut self, to: Sid, packet: QuorumPacket) {
        self.out.push(Action::Send { to, packet });
    }

    fn disconnect(&mut self, sid: Sid, reason: &str) {
        self.remove_peer(sid);
        self.out.push(Action::Disconnect { sid, reason: reason.to_string() });
    }

    fn remove_peer(&mut self, sid: Sid) {
        self.peers.remove(&sid);
        self.epoch_ackers.remove(&sid);
        self.newleader_ackers.remove(&sid);
        self.pending_syncs.retain(|s| s.from != sid);
    }

    fn stop(&mut self, reason: &str) {
        self.stop_with(Action::GoLooking { reason: reason.to_string() });
    }

    /// Stops the machine with `leaving`, the action that gives up the role.
    fn stop_with(&mut self, leaving: Action) {
        self.phase = Phase::Stopped { epoch: self.phase.epoch(), established: self.phase.established() };
        self.out.push(leaving);
    }

    /// Moves the staged actions into the caller's buffer; both keep their capacity.
    fn take(&mut self, out: &mut Vec<Action>) {
        out.append(&mut self.out);
    }

    /// The rules that cost O(1) per learner to check: the zxids' order, the epochs, each learner's
    /// ACK and phase. The server checks them after every turn in release builds too.
    pub fn check_cheap_invariants(&self) -> Result<(), String> {
        if self.committed > self.last_proposed || self.committed < self.history_base {
            return Err("committed zxid outside the history".into());
        }
        if self.self_durable > self.last_proposed {
            return Err("own log durable beyond the last proposal".into());
        }
        if self.committed > self.self_durable {
            return Err("committed beyond the leader's own durable log".into());
        }
        if self.accepted_epoch < self.current_epoch {
            return Err("acceptedEpoch below currentEpoch".into());
        }
        for (sid, p) in &self.peers {
            if p.acked > self.last_proposed {
                return Err(format!("learner {sid} acked beyond the last proposal"));
            }
            if p.forwarding != (p.phase >= PeerPhase::NewLeaderSent) {
                return Err(format!("learner {sid} forwarding flag disagrees with its phase"));
            }
        }
        if self.newleader_ackers.iter().chain(&self.epoch_ackers).any(|s| !self.counts(*s)) {
            return Err("a non-voter counted in a quorum".into());
        }
        if self.pending_configs.windows(2).any(|w| w[0].0 >= w[1].0)
            || self.pending_configs.iter().any(|(rz, _)| *rz > self.last_proposed)
            || (self.phase.established() && self.pending_configs.iter().any(|(rz, _)| *rz <= self.committed))
        {
            return Err("a pending configuration out of order, never proposed, or committed".into());
        }
        Ok(())
    }

    /// Checks the leader's internal consistency; `Err` names the first broken rule.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_cheap_invariants()?;
        let mut prev = self.history_base;
        for e in &self.history {
            if !follows(prev, e.zxid()) {
                return Err(format!("history has a hole before {:#x}", e.zxid()));
            }
            prev = e.zxid();
        }
        if prev != self.last_proposed {
            return Err(format!("history ends at {prev:#x}, last proposed {:#x}", self.last_proposed));
        }
        let outstanding: Vec<Zxid> = self.history.iter().map(TxnEntry::zxid).filter(|z| *z > self.committed).collect();
        if !outstanding.iter().copied().eq(self.proposed_at_ms.keys().copied()) {
            return Err("outstanding proposals and their timestamps disagree".into());
        }
        if !outstanding.is_empty()
            && (!self.phase.established() || outstanding.iter().any(|z| Some(epoch_of(*z)) != self.phase.epoch()))
        {
            return Err("a proposal outside the established epoch".into());
        }
        if let Some(e) = self.phase.epoch() {
            if self.phase.accepted_durable() && self.accepted_epoch != e {
                return Err("acceptedEpoch differs from the epoch being led".into());
            }
            if matches!(self.phase, Phase::Syncing { .. } | Phase::Broadcast { .. }) && self.current_epoch != e {
                return Err("currentEpoch differs from the epoch being led".into());
            }
        }
        Ok(())
    }
}

/// Unconfirmed PING rounds kept; an older one is dropped (a newer one covers it).
const MAX_ROUNDS: usize = 64;

/// A sync waiting to be answered.
#[derive(Debug, Clone, Copy)]
struct PendingSync {
    /// Everything proposed when it arrived: answered once this is committed.
    zxid: Zxid,
    /// A learner, or the leader itself for its own client's sync.
    from: Sid,
    /// The first round started after it arrived: answered once that round is confirmed.
    round: u64,
}

/// One PING broadcast: for each voting follower, how many PINGs it must have answered to have
/// answered this one.
#[derive(Debug, Clone)]
struct Round {
    id: u64,
    marks: BTreeMap<Sid, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SyncPlan {
    /// Send every txn after `from`.
    Diff {
        from: Zxid,
    },
    /// Roll the learner back to `to`, then send every txn after it.
    Trunc {
        to: Zxid,
    },
    /// Ask storage what the on-disk log holds first (`Action::ProbeLog`).
    ProbeLog,
    /// Send the txns after `from` up to `history_base` from the on-disk log, then the history.
    LogDiff {
        from: Zxid,
    },
    Snap,
}

/// Whether more than half of `voters` are in `ackers` (`QuorumMaj.containsQuorum`).
fn majority_of(voters: &BTreeSet<Sid>, ackers: &BTreeSet<Sid>) -> bool {
    voters.intersection(ackers).count() * 2 > voters.len()
}

/// A configuration's voters as sids.
pub fn voter_sids(m: &Membership) -> BTreeSet<Sid> {
    m.voters().filter_map(|v| Sid::try_from(v).ok()).collect()
}
