//! The learner side of ZAB (ZooKeeper's `Learner`, `Follower`, `Observer`): one [`Learner`] per
//! connection to a leader. When it emits [`Action::GoLooking`] it is finished; the server goes back
//! to election and builds a new one for the next leader.
//!
//! Ordering (the rules behind the fixes of ZOOKEEPER-3023, -3911, -4643 and -4646; ZooKeeper's
//! side is `Learner.registerWithLeader` and `Learner.syncWithLeader`):
//! * `acceptedEpoch` durable, then ACKEPOCH;
//! * every txn received in sync is `Persist`ed as it arrives (or the tree is replaced by
//!   `InstallSnapshot`); on NEWLEADER the learner waits until all of it is durable, then
//!   `PersistEpoch{Current}`, waits until that is durable, then ACKs NEWLEADER;
//! * proposal ACKs are sent only after the NEWLEADER ACK and only for durable txns, and then for
//!   every txn of the leader's epoch but those the sync stream committed before NEWLEADER;
//! * nothing but the NEWLEADER ACK is sent between NEWLEADER and that ACK (a PING is answered
//!   after it);
//! * nothing is applied before UPTODATE, and then only txns both committed and durable.

use std::collections::VecDeque;

use warden_proto::jute::Record;
use warden_proto::quorum::{packet_type as pt, LearnerInfo, QuorumPacket, LEARNER_PROTOCOL_VERSION};

use super::codec;
use super::{epoch_of, follows, make_zxid, Action, EpochKind, Sid, TxnEntry, Zxid};

/// Why a learner gives up its connection to the leader (it goes LOOKING).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnerError {
    #[error("unexpected packet for the learner's stage")]
    Unexpected,
    #[error("malformed {0}: {1}")]
    Malformed(&'static str, warden_proto::DecodeError),
    #[error("leader protocol version {0:#x} is too old")]
    ProtocolTooOld(i32),
    #[error("current epoch {0} exceeds an int")]
    EpochOverflow(i64),
    #[error("leader's epoch {epoch} is below our accepted epoch {accepted}")]
    EpochBelowAccepted { epoch: i64, accepted: i64 },
    #[error("TRUNC beyond our log")]
    TruncBeyondLog,
    #[error("txn {zxid:#x} does not follow {last:#x}")]
    NotAfter { zxid: Zxid, last: Zxid },
    #[error("txn {0:#x} from a later epoch")]
    LaterEpoch(Zxid),
    /// Accepting it would persist a hole that no later DIFF repairs (ZOOKEEPER-4925).
    #[error("gap: {zxid:#x} does not directly follow {last:#x}")]
    Gap { zxid: Zxid, last: Zxid },
    #[error("old-epoch txn {0:#x} after NEWLEADER")]
    OldEpochAfterNewLeader(Zxid),
    #[error("COMMIT for {0:#x}, a txn we do not hold")]
    CommitUnknown(Zxid),
    #[error("observer got a PROPOSAL")]
    ObserverProposal,
    #[error("INFORM before NEWLEADER")]
    InformBeforeNewLeader,
    #[error("NEWLEADER for another epoch")]
    NewLeaderOtherEpoch,
    #[error("UPTODATE before our NEWLEADER ACK")]
    UpToDateBeforeAck,
}

/// Follower (votes, ACKs proposals) or observer (receives INFORM, never counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LearnerRole {
    Follower,
    Observer,
}

/// Static settings of a learner.
#[derive(Debug, Clone)]
pub struct LearnerConfig {
    pub my_sid: Sid,
    pub leader_sid: Sid,
    pub role: LearnerRole,
    pub tick_ms: u64,
    /// Ticks the leader may stay silent before UPTODATE.
    pub init_limit: u32,
    /// Ticks the leader may stay silent after UPTODATE.
    pub sync_limit: u32,
    /// LearnerInfo.configVersion.
    pub config_version: i64,
}

impl LearnerConfig {
    pub fn new(my_sid: Sid, leader_sid: Sid, role: LearnerRole) -> Self {
        Self { my_sid, leader_sid, role, tick_ms: 2000, init_limit: 10, sync_limit: 5, config_version: 0 }
    }
}

/// What this server's storage holds when it connects to a leader. `last_zxid` is durable and the
/// tree reflects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalState {
    pub accepted_epoch: i64,
    pub current_epoch: i64,
    pub last_zxid: Zxid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    AwaitLeaderInfo,
    /// acceptedEpoch being persisted.
    AcceptingEpoch,
    /// ACKEPOCH sent; waiting for DIFF / TRUNC / SNAP.
    AwaitSyncMode,
    /// Receiving the sync stream (and, after NEWLEADER, forwarded txns) until UPTODATE.
    Syncing,
    Broadcast,
    Stopped,
}

#[derive(Debug, Clone, Copy, Default)]
struct NewLeader {
    /// Last txn of the history the NEWLEADER ACK vouches for.
    history_end: Zxid,
    /// Last txn the sync stream committed before NEWLEADER: ZooKeeper's learner applies those
    /// without ACKing them, and ACKs every later one (see `ack_durable`).
    sync_committed: Zxid,
    /// A PING that came before the NEWLEADER ACK went out, answered right after it.
    deferred_ping: Option<Zxid>,
    epoch_requested: bool,
    epoch_durable: bool,
    acked: bool,
}

/// The learner's state machine. See the module docs.
#[derive(Debug)]
pub struct Learner {
    cfg: LearnerConfig,
    stage: Stage,
    accepted_epoch: i64,
    current_epoch: i64,
    /// The leader's epoch, from LEADERINFO.
    new_epoch: i64,
    /// Epoch to report in ACKEPOCH.
    ack_epoch_current: i32,
    initial_last_zxid: Zxid,
    /// Received, not yet applied, in zxid order.
    entries: VecDeque<TxnEntry>,
    last_received: Zxid,
    durable: Zxid,
    committed: Zxid,
    applied: Zxid,
    acked: Zxid,
    /// InstallSnapshot emitted, its durability not yet reported.
    snapshot_pending: bool,
    /// SYNCs from the leader, each with the last zxid committed when it arrived: answered
    /// (`SyncDone`) only once that txn is applied, since applying waits for local durability.
    syncs: VecDeque<Zxid>,
    newleader: Option<NewLeader>,
    /// The latest COMMITANDACTIVATE / INFORMANDACTIVATE: the reconfig's zxid and the leader its
    /// leader designated to lead the new configuration (`QuorumPeer.processReconfig`).
    designated: Option<(Zxid, Sid)>,
    last_heard_ms: u64,
    out: Vec<Action>,
}

impl Learner {
    /// Connects: sends FOLLOWERINFO / OBSERVERINFO.
    pub fn new(cfg: LearnerConfig, state: LocalState, now_ms: u64, out: &mut Vec<Action>) -> Self {
        let mut l = Learner {
            stage: Stage::AwaitLeaderInfo,
            accepted_epoch: state.accepted_epoch,
            current_epoch: state.current_epoch,
            new_epoch: -1,
            ack_epoch_current: -1,
            initial_last_zxid: state.last_zxid,
            entries: VecDeque::new(),
            last_received: state.last_zxid,
            durable: state.last_zxid,
            committed: state.last_zxid,
            applied: state.last_zxid,
            acked: state.last_zxid,
            snapshot_pending: false,
            syncs: VecDeque::new(),
            newleader: None,
            designated: None,
            last_heard_ms: now_ms,
            out: Vec::new(),
            cfg,
        };
        let info = LearnerInfo {
            server_id: l.cfg.my_sid,
            protocol_version: LEARNER_PROTOCOL_VERSION,
            config_version: l.cfg.config_version,
        };
        let kind = if l.cfg.role == LearnerRole::Follower { pt::FOLLOWERINFO } else { pt::OBSERVERINFO };
        l.send(QuorumPacket::with_data(kind, make_zxid(state.accepted_epoch, 0), info.to_bytes()));
        l.take(out);
        l
    }

    // ----- queries -----

    pub fn is_synced(&self) -> bool {
        self.stage == Stage::Broadcast
    }
    pub fn is_stopped(&self) -> bool {
        self.stage == Stage::Stopped
    }
    pub fn leader(&self) -> Sid {
        self.cfg.leader_sid
    }
    /// The leader designated for the configuration the reconfig at `zxid` activates, when its
    /// COMMITANDACTIVATE or INFORMANDACTIVATE came on this connection.
    pub fn designated(&self, zxid: Zxid) -> Option<Sid> {
        self.designated.filter(|(z, _)| *z == zxid).map(|(_, sid)| sid)
    }
    pub fn role(&self) -> LearnerRole {
        self.cfg.role
    }
    pub fn accepted_epoch(&self) -> i64 {
        self.accepted_epoch
    }
    pub fn current_epoch(&self) -> i64 {
        self.current_epoch
    }
    pub fn last_received(&self) -> Zxid {
        self.last_received
    }
    pub fn last_applied(&self) -> Zxid {
        self.applied
    }
    pub fn durable(&self) -> Zxid {
        self.durable
    }

    // ----- inputs -----

    /// A packet from the leader.
    pub fn on_packet(&mut self, packet: &QuorumPacket, now_ms: u64, out: &mut Vec<Action>) {
        if self.stage == Stage::Stopped {
            return;
        }
        self.last_heard_ms = self.last_heard_ms.max(now_ms);
        if let Err(reason) = self.handle(packet) {
            self.stop(format!(
                "{reason} ({} zxid {:#x})",
                pt::name(packet.packet_type).unwrap_or("unknown"),
                packet.zxid
            ));
        } else {
            self.pump();
        }
        self.take(out);
    }

    /// Storage reports the log durable through `zxid` (or the installed snapshot durable).
    pub fn on_durable(&mut self, zxid: Zxid, out: &mut Vec<Action>) {
        if self.stage != Stage::Stopped {
            self.durable = self.durable.max(zxid.min(self.last_received));
            if self.snapshot_pending && self.durable >= self.applied {
                self.snapshot_pending = false;
            }
            self.pump();
        }
        self.take(out);
    }

    /// Storage reports an epoch file durable.
    pub fn on_epoch_durable(&mut self, kind: EpochKind, epoch: i64, out: &mut Vec<Action>) {
        if self.stage == Stage::Stopped || epoch != self.new_epoch {
            return;
        }
        match kind {
            EpochKind::Accepted if self.stage == Stage::AcceptingEpoch => {
                self.accepted_epoch = epoch;
                self.send_ack_epoch();
            }
            EpochKind::Current => {
                if let Some(nl) = self.newleader.as_mut().filter(|nl| nl.epoch_requested) {
                    nl.epoch_durable = true;
                    self.current_epoch = epoch;
                    self.pump();
                }
            }
            _ => {}
        }
        self.take(out);
    }

    /// A tick: see [`Learner::check_lease`].
    pub fn on_tick(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        self.check_lease(now_ms, out);
    }

    /// The leader must be heard within initLimit (before UPTODATE) or syncLimit ticks, else the
    /// learner gives it up (ZooKeeper's follower socket timeout). The shell calls it before every
    /// input, not only on ticks, so a learner that wakes from a pause longer than that answers no
    /// sync and serves no read before it notices; the leader's lease relies on this bound.
    pub fn check_lease(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        if self.stage == Stage::Stopped {
            return;
        }
        let limit = if self.stage == Stage::Broadcast { self.cfg.sync_limit } else { self.cfg.init_limit };
        if now_ms.saturating_sub(self.last_heard_ms) > self.cfg.tick_ms * u64::from(limit) {
            self.stop(format!("leader {} silent for {limit} ticks", self.cfg.leader_sid));
        }
        self.take(out);
    }

    /// The connection to the leader closed.
    pub fn on_disconnect(&mut self, out: &mut Vec<Action>) {
        if self.stage != Stage::Stopped {
            self.stop("connection to the leader closed".to_string());
        }
        self.take(out);
    }

    /// Forwards a client request to the leader.
    pub fn forward(&mut self, request: &codec::ForwardedRequest, out: &mut Vec<Action>) {
        if self.stage != Stage::Stopped {
            self.send(request.to_packet());
        }
        self.take(out);
    }

    /// Asks the leader whether a client's existing session is still valid (a client reconnecting
    /// to this server). The answer comes back as [`Action::Revalidated`]. Only once synced:
    /// before that this server serves no client.
    pub fn revalidate(&mut self, session_id: i64, timeout_ms: i32, out: &mut Vec<Action>) {
        if self.stage == Stage::Broadcast {
            self.send(codec::revalidate_request(session_id, timeout_ms));
        }
        self.take(out);
    }

    // ----- packet handling -----

    fn handle(&mut self, p: &QuorumPacket) -> Result<(), LearnerError> {
        match (p.packet_type, self.stage) {
            (pt::LEADERINFO, Stage::AwaitLeaderInfo) => self.on_leader_info(p),
            (pt::DIFF, Stage::AwaitSyncMode) => {
                self.stage = Stage::Syncing;
                Ok(())
            }
            (pt::TRUNC, Stage::AwaitSyncMode) => self.on_trunc(p.zxid),
            (pt::SNAP, Stage::AwaitSyncMode) => {
                self.stage = Stage::Syncing;
                self.entries.clear();
                self.last_received = p.zxid;
                self.committed = p.zxid;
                self.applied = p.zxid;
                self.acked = p.zxid;
                // Durable only once storage reports the installed snapshot.
                self.durable = -1;
                self.snapshot_pending = true;
                self.out.push(Action::InstallSnapshot { zxid: p.zxid });
                Ok(())
            }
            (pt::PROPOSAL, Stage::Syncing | Stage::Broadcast) => {
                if self.cfg.role == LearnerRole::Observer && self.stage == Stage::Broadcast {
                    return Err(LearnerError::ObserverProposal);
                }
                self.on_txn(p)
            }
            // A reconfig's commit: the node activates the configuration as it applies the txn.
            (pt::INFORM | pt::INFORMANDACTIVATE, Stage::Syncing | Stage::Broadcast)
                if self.cfg.role == LearnerRole::Observer =>
            {
                if self.newleader.is_none() {
                    return Err(LearnerError::InformBeforeNewLeader);
                }
                if p.packet_type == pt::INFORMANDACTIVATE {
                    let sid =
                        codec::decode_designated(p).map_err(|e| LearnerError::Malformed("INFORMANDACTIVATE", e))?;
                    self.designated = Some((p.zxid, sid));
                }
                self.on_txn(p)?;
                self.committed = p.zxid;
                Ok(())
            }
            (pt::COMMIT, Stage::Syncing | Stage::Broadcast) => self.on_commit(p.zxid),
            (pt::COMMITANDACTIVATE, Stage::Syncing | Stage::Broadcast) => {
                let sid = codec::decode_designated(p).map_err(|e| LearnerError::Malformed("COMMITANDACTIVATE", e))?;
                self.designated = Some((p.zxid, sid));
                self.on_commit(p.zxid)
            }
            (pt::NEWLEADER, Stage::Syncing) if self.newleader.is_none() => {
                if epoch_of(p.zxid) != self.new_epoch {
                    return Err(LearnerError::NewLeaderOtherEpoch);
                }
                self.newleader = Some(NewLeader {
                    history_end: self.last_received,
                    sync_committed: self.committed,
                    ..NewLeader::default()
                });
                if let Some(text) = p.data.as_ref().filter(|d| d.len() > 1) {
                    self.out.push(Action::LeaderConfig(text.to_vec()));
                }
                Ok(())
            }
            (pt::UPTODATE, Stage::Syncing) => {
                if !self.newleader.is_some_and(|nl| nl.acked) {
                    return Err(LearnerError::UpToDateBeforeAck);
                }
                self.stage = Stage::Broadcast;
                self.send(QuorumPacket::new(pt::ACK, make_zxid(self.new_epoch, 0)));
                self.out.push(Action::Synced { epoch: self.new_epoch });
                Ok(())
            }
            (pt::PING, s) if s >= Stage::AwaitSyncMode => {
                match &mut self.newleader {
                    // ZooKeeper's leader PINGs a learner as soon as it has queued NEWLEADER, but
                    // takes nothing but the NEWLEADER ACK as the learner's next packet (its
                    // LearnerHandler: "Next packet was supposed to be an ACK"; so does ours).
                    Some(nl) if !nl.acked => nl.deferred_ping = Some(p.zxid),
                    _ => self.out.push(Action::PingReply { to: self.cfg.leader_sid, zxid: p.zxid }),
                }
                Ok(())
            }
            (pt::SYNC, Stage::Broadcast) => {
                // Every COMMIT sent before this SYNC has arrived (the connection is in order),
                // but a committed txn is applied only once it is durable here too.
                self.syncs.push_back(self.committed);
                Ok(())
            }
            (pt::REVALIDATE, Stage::Broadcast) => {
                let data = p.data.as_deref().unwrap_or_default();
                let (session_id, valid) =
                    codec::decode_revalidate_reply(data).map_err(|e| LearnerError::Malformed("REVALIDATE reply", e))?;
                self.out.push(Action::Revalidated { session_id, valid });
                Ok(())
            }
            _ => Err(LearnerError::Unexpected),
        }
    }

    fn on_leader_info(&mut self, p: &QuorumPacket) -> Result<(), LearnerError> {
        let version = codec::decode_int(p).map_err(|e| LearnerError::Malformed("LEADERINFO", e))?;
        if version < LEARNER_PROTOCOL_VERSION {
            return Err(LearnerError::ProtocolTooOld(version));
        }
        let epoch = epoch_of(p.zxid);
        self.new_epoch = epoch;
        if epoch > self.accepted_epoch {
            self.ack_epoch_current =
                i32::try_from(self.current_epoch).map_err(|_| LearnerError::EpochOverflow(self.current_epoch))?;
            self.stage = Stage::AcceptingEpoch;
            self.out.push(Action::PersistEpoch { kind: EpochKind::Accepted, epoch });
        } else if epoch == self.accepted_epoch {
            // Already accepted this epoch: ZAB forbids acking it twice, so report -1.
            self.ack_epoch_current = -1;
            self.send_ack_epoch();
        } else {
            return Err(LearnerError::EpochBelowAccepted { epoch, accepted: self.accepted_epoch });
        }
        Ok(())
    }

    fn send_ack_epoch(&mut self) {
        self.stage = Stage::AwaitSyncMode;
        let data = codec::int_data(self.ack_epoch_current);
        self.send(QuorumPacket::with_data(pt::ACKEPOCH, self.initial_last_zxid, data));
    }

    fn on_trunc(&mut self, zxid: Zxid) -> Result<(), LearnerError> {
        if zxid > self.last_received {
            return Err(LearnerError::TruncBeyondLog);
        }
        self.stage = Stage::Syncing;
        self.last_received = zxid;
        self.durable = self.durable.min(zxid);
        self.committed = zxid;
        self.applied = self.applied.min(zxid);
        self.acked = self.acked.min(zxid);
        self.out.push(Action::Truncate { zxid });
        Ok(())
    }

    /// A PROPOSAL (or INFORM): must extend the history without a gap in the leader's epoch.
    fn on_txn(&mut self, p: &QuorumPacket) -> Result<(), LearnerError> {
        let entry = codec::decode_entry(p).map_err(|e| LearnerError::Malformed("txn", e))?;
        let z = entry.zxid();
        if z <= self.last_received {
            return Err(LearnerError::NotAfter { zxid: z, last: self.last_received });
        }
        if epoch_of(z) > self.new_epoch {
            return Err(LearnerError::LaterEpoch(z));
        }
        // Every leader proposes 1, 2, 3... in its epoch, and every log is a gap-free prefix of
        // those runs, epoch after epoch. So a txn must directly follow the last one we hold: the
        // next counter in the same epoch, or counter 1 of a later epoch. Accepting anything else
        // would persist a hole that no later DIFF repairs (a DIFF starts after our last zxid) and
        // that the leader's cumulative ACK counting would vouch for (ZOOKEEPER-4925).
        if !follows(self.last_received, z) {
            return Err(LearnerError::Gap { zxid: z, last: self.last_received });
        }
        if self.newleader.is_some() && epoch_of(z) != self.new_epoch {
            return Err(LearnerError::OldEpochAfterNewLeader(z));
        }
        self.last_received = z;
        self.entries.push_back(entry.clone());
        self.out.push(Action::Persist(entry));
        Ok(())
    }

    fn on_commit(&mut self, zxid: Zxid) -> Result<(), LearnerError> {
        if zxid <= self.applied {
            return Ok(()); // already in the tree (our own log before this connection)
        }
        // `entries` is in zxid order (checked by `check_invariants`).
        if zxid <= self.committed || self.entries.binary_search_by_key(&zxid, TxnEntry::zxid).is_err() {
            return Err(LearnerError::CommitUnknown(zxid));
        }
        self.committed = zxid;
        Ok(())
    }

    /// Emits whatever the current facts allow, in the required order.
    fn pump(&mut self) {
        if let Some(mut nl) = self.newleader {
            if !nl.epoch_requested && self.durable >= nl.history_end {
                nl.epoch_requested = true;
                if self.current_epoch == self.new_epoch {
                    nl.epoch_durable = true;
                } else {
                    self.out.push(Action::PersistEpoch { kind: EpochKind::Current, epoch: self.new_epoch });
                }
            }
            if nl.epoch_durable && !nl.acked {
                nl.acked = true;
                self.send(QuorumPacket::new(pt::ACK, make_zxid(self.new_epoch, 0)));
                if let Some(zxid) = nl.deferred_ping.take() {
                    self.out.push(Action::PingReply { to: self.cfg.leader_sid, zxid });
                }
            }
            self.newleader = Some(nl);
            if nl.acked && self.cfg.role == LearnerRole::Follower {
                self.ack_durable();
            }
        }
        if self.stage == Stage::Broadcast {
            while let Some(e) = self.entries.front() {
                if e.zxid() > self.committed || e.zxid() > self.durable {
                    break;
                }
                if let Some(e) = self.entries.pop_front() {
                    self.applied = e.zxid();
                    self.out.push(Action::ApplyCommitted(e));
                }
            }
            while self.syncs.front().is_some_and(|z| *z <= self.applied) {
                self.syncs.pop_front();
                self.out.push(Action::SyncDone);
            }
        }
    }

    /// One ACK per durable txn of the leader's epoch but those the sync stream committed before
    /// NEWLEADER, as ZooKeeper's follower ACKs every txn it logs: ZooKeeper's leader counts ACKs
    /// per zxid, and its LearnerHandler drops a follower that has not ACKed a proposal it sent
    /// within syncLimit ticks (`SyncLimitCheck`), even one a quorum has committed meanwhile.
    fn ack_durable(&mut self) {
        let Some(nl) = self.newleader else { return };
        let upto = self.durable;
        // `entries` is in zxid order: start after what was acked already, not at the front (with
        // hundreds of txns in flight, a scan from the front per packet took 5-7% of a follower's
        // CPU).
        let from = self.entries.partition_point(|e| e.zxid() <= self.acked);
        let zxids: Vec<Zxid> = self
            .entries
            .range(from..)
            .map(TxnEntry::zxid)
            .take_while(|z| *z <= upto)
            .filter(|z| *z > nl.sync_committed && epoch_of(*z) == self.new_epoch)
            .collect();
        for z in zxids {
            self.send(QuorumPacket::new(pt::ACK, z));
        }
        self.acked = self.acked.max(upto);
    }

    fn send(&mut self, packet: QuorumPacket) {
        self.out.push(Action::Send { to: self.cfg.leader_sid, packet });
    }

    fn stop(&mut self, reason: String) {
        self.stage = Stage::Stopped;
        self.out.push(Action::GoLooking { reason });
    }

    /// Moves the staged actions into the caller's buffer; both keep their capacity.
    fn take(&mut self, out: &mut Vec<Action>) {
        out.append(&mut self.out);
    }

    /// The rules that cost O(1) to check: the order of applied, committed, durable and received
    /// zxids and the epochs. The server checks them after every turn in release builds too.
    pub fn check_cheap_invariants(&self) -> Result<(), String> {
        if self.applied > self.committed {
            return Err("applied beyond the committed zxid".into());
        }
        if self.applied > self.durable && !self.snapshot_pending {
            return Err("applied a txn that is not durable".into());
        }
        if self.durable > self.last_received {
            return Err("durable beyond the last received txn".into());
        }
        if self.stage == Stage::Broadcast && !self.newleader.is_some_and(|nl| nl.acked) {
            return Err("broadcasting without a NEWLEADER ACK".into());
        }
        if let Some(nl) = self.newleader {
            if nl.acked && !(nl.epoch_durable && self.current_epoch == self.new_epoch) {
                return Err("NEWLEADER ACKed before currentEpoch was durable".into());
            }
            if nl.epoch_requested && self.durable < nl.history_end {
                return Err("currentEpoch requested before the synced history was durable".into());
            }
        }
        if self.accepted_epoch < self.current_epoch {
            return Err("acceptedEpoch below currentEpoch".into());
        }
        Ok(())
    }

    /// Checks the learner's internal consistency; `Err` names the first broken rule.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_cheap_invariants()?;
        let mut prev = self.applied;
        for e in &self.entries {
            if e.zxid() <= prev {
                return Err(format!("pending txns not increasing at {:#x}", e.zxid()));
            }
            prev = e.zxid();
        }
        if prev != self.last_received {
            return Err("pending txns do not end at the last received zxid".into());
        }
        if self.syncs.iter().any(|z| *z > self.committed)
            || self.syncs.iter().zip(self.syncs.iter().skip(1)).any(|(a, b)| a > b)
        {
            return Err("a pending SYNC waits for a txn not committed, or out of order".into());
        }
        if self.stage < Stage::Broadcast && self.entries.iter().any(|e| e.zxid() <= self.applied) {
            return Err("applied a txn during sync".into());
        }
        Ok(())
    }
}
