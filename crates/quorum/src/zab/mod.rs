//! ZAB (ZooKeeper Atomic Broadcast) as pure state machines: discovery, synchronisation and
//! broadcast between one [`Leader`] and its [`Learner`]s (followers and observers).
//!
//! Nothing here touches a socket, a file, a thread or the clock. Each machine takes inputs
//! (a decoded [`QuorumPacket`] from a peer, "the log is durable through zxid", "this epoch file is
//! durable", a tick with the current time) and returns [`Action`]s as data, in the order they must
//! be carried out. The shell executes them in that order; durability facts come back only from the
//! storage layer as `on_durable` / `on_epoch_durable` inputs, so an ACK can never precede the fsync
//! it depends on.
//!
//! Wire facts follow ZooKeeper's `Leader`, `LearnerHandler`, `Learner`, `Follower` and `Observer`.
//! The ordering rules from ZooKeeper's sync-phase bugs (JIRA ids below) are structural here:
//!
//! * a learner persists the synced history (fsync), then writes `currentEpoch`, then ACKs
//!   NEWLEADER (ZOOKEEPER-3023, -4643, -4646);
//! * nothing received during sync is applied before UPTODATE, and nothing is applied before it is
//!   both committed and durable locally (ZOOKEEPER-3911);
//! * `acceptedEpoch` is durable before ACKEPOCH; the leader's own ACK counts only once its log is
//!   durable; a follower's proposal ACK counts only after it ACKed NEWLEADER (its `currentEpoch`
//!   is durable), so a stale leader or a half-synced follower can never complete a quorum.
//!
//! Contracts the shell keeps (each action's doc repeats its part):
//! * the tree reflects the whole durable log at construction (as ZooKeeper loads it); the
//!   `last_zxid` given to a machine is durable;
//! * actions are carried out in the order returned; `Truncate` is durable before the next action,
//!   `InstallSnapshot` before any later `Persist`;
//! * `on_durable(z)` means every `Persist` up to and including zxid `z` is fsynced;
//! * the transport contract: a leader-learner connection delivers packets in order, each once,
//!   with no silent loss, and a lost packet shows up as the connection closing (`on_disconnect`
//!   at both ends). TCP gives this; ZAB, like ZooKeeper, has no retransmission and relies on it
//!   for liveness (a silently lost UPTODATE leaves a learner syncing forever, kept alive by
//!   PINGs). A learner refuses a txn that does not directly follow its log ([`follows`]), a
//!   COMMIT it cannot match, and packets out of phase, and goes LOOKING; the leader's ACK
//!   counting is cumulative and per connection. Safety does rely on the order in one place:
//!   counter 1 of a later epoch may follow any zxid, so a new-epoch PROPOSAL that overtook (or
//!   outlived the silent loss of) the end of a DIFF stream would be accepted over a hole of
//!   committed txns; zxids cannot tell that from a leader whose history ends there.

pub mod codec;
pub mod leader;
pub mod learner;

pub use leader::{voter_sids, Leader, LeaderConfig, LeaderGauges, LeaderInit, LeaderInitError, LogProbe, ProposeError};
pub use learner::{Learner, LearnerConfig, LearnerError, LearnerRole, LocalState};

use warden_proto::quorum::QuorumPacket;
use warden_proto::txn::{Txn, TxnHeader};

pub use crate::Sid;
/// `(epoch << 32) | counter`.
pub type Zxid = i64;

/// `ZxidUtils.makeZxid`.
pub const fn make_zxid(epoch: i64, counter: i64) -> Zxid {
    (epoch << 32) | (counter & 0xffff_ffff)
}

/// `ZxidUtils.getEpochFromZxid`.
pub const fn epoch_of(zxid: Zxid) -> i64 {
    zxid >> 32
}

/// `ZxidUtils.getCounterFromZxid`.
pub const fn counter_of(zxid: Zxid) -> i64 {
    zxid & 0xffff_ffff
}

/// Whether a log ending at `last` (0: empty) may be extended by `next`: the next counter in the
/// same epoch, or counter 1 of a later epoch. A leader proposes 1, 2, 3... in its epoch and every
/// log is a gap-free prefix of such runs, so any other successor is a hole.
pub const fn follows(last: Zxid, next: Zxid) -> bool {
    if epoch_of(next) == epoch_of(last) {
        next == last + 1
    } else {
        epoch_of(next) > epoch_of(last) && counter_of(next) == 1
    }
}

/// One transaction as the log stores it and a PROPOSAL / INFORM carries it. The txn is shared:
/// the machine's history, the node's in-memory log and the storage thread's write hold the same
/// one (a txn's data is often most of its size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnEntry {
    pub hdr: TxnHeader,
    pub txn: std::sync::Arc<Txn>,
    /// The tree's digest after this txn, as the ZooKeeper leader that proposed it computed it;
    /// checked when the txn is applied. Warden's own proposals carry none.
    pub digest: Option<warden_proto::TxnDigest>,
}

impl TxnEntry {
    pub fn zxid(&self) -> Zxid {
        self.hdr.zxid
    }
}

/// Which epoch file (`version-2/acceptedEpoch` or `version-2/currentEpoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EpochKind {
    Accepted,
    Current,
}

/// Work for the shell, in the order it must be done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `packet` on the quorum connection of `to`.
    Send { to: Sid, packet: QuorumPacket },
    /// Leader: right after the SNAP packet just sent to `to`, write the snapshot stream of the tree
    /// as it stands once every earlier `ApplyCommitted` is applied (its last zxid is `zxid`).
    SendSnapshot { to: Sid, zxid: Zxid },
    /// Leader: look in the on-disk txn log for a record with exactly the zxid `after` (the
    /// learner `to`'s last zxid, older than the in-memory history) and measure the log after it,
    /// then answer [`Leader::on_log_probe`] with a [`LogProbe`]. Reads only; nothing is sent.
    ProbeLog { to: Sid, after: Zxid },
    /// Leader: right after the DIFF packet just sent to `to`, read the txns `(after, upto]` from
    /// the on-disk log and write each as PROPOSAL then COMMIT, in zxid order, before any packet
    /// for `to` that comes after this action (in bounded chunks, never the whole range in
    /// memory). If the log cannot give exactly that gap-free run (a read error, a missing or
    /// purged file, a hole), close the connection of `to` and report
    /// [`Leader::on_log_diff_failed`].
    SendLogDiff { to: Sid, after: Zxid, upto: Zxid },
    /// Leader: close the connection of learner `sid` (protocol error or timeout).
    Disconnect { sid: Sid, reason: String },
    /// Append to the txn log. Durability comes back as `on_durable`.
    Persist(TxnEntry),
    /// Write the epoch file durably (temp, fsync, rename); then report `on_epoch_durable`.
    PersistEpoch { kind: EpochKind, epoch: i64 },
    /// Learner: drop every log record above `zxid` and rebuild the tree at `zxid` if it has
    /// applied beyond it. Synchronous: durable before the next action is carried out.
    Truncate { zxid: Zxid },
    /// Learner: the snapshot stream that followed the SNAP packet replaces the tree (its last
    /// zxid is `zxid`). Write it durably, keep no log record above `zxid`, then report
    /// `on_durable(zxid)`.
    InstallSnapshot { zxid: Zxid },
    /// Apply a committed txn to the tree. Emitted in strictly increasing zxid order, only once
    /// the txn is committed and durable on this server.
    ApplyCommitted(TxnEntry),
    /// Learner: UPTODATE received; the learner may serve clients in `epoch`.
    Synced { epoch: i64 },
    /// Leader: a quorum ACKed NEWLEADER; the leader may propose in `epoch`.
    Broadcasting { epoch: i64 },
    /// Learner: answer the leader's PING with a PING carrying the session touch table
    /// (`codec::encode_touches`) and this zxid.
    PingReply { to: Sid, zxid: Zxid },
    /// Leader: a learner reported sessions it touched (PING data).
    TouchSessions { from: Sid, touches: Vec<codec::SessionTouch> },
    /// Leader: a learner forwarded a client request.
    Forwarded { from: Sid, request: codec::ForwardedRequest },
    /// Leader: a learner asks whether a session is still valid; the node answers with
    /// `codec::revalidate_reply` (touching the session when it is valid).
    Revalidate { from: Sid, session_id: i64, timeout_ms: i32 },
    /// Learner: the leader's answer to our REVALIDATE of `session_id`.
    Revalidated { session_id: i64, valid: bool },
    /// Learner: the leader's configuration text, as NEWLEADER carried it (adopted when newer
    /// than this server's).
    LeaderConfig(Vec<u8>),
    /// Learner: the leader answered a forwarded sync (everything it committed before is applied
    /// here once the preceding ApplyCommitted actions are done).
    SyncDone,
    /// Leave this role and go back to leader election (LOOKING). The machine ignores further input.
    GoLooking { reason: String },
    /// Leader: established, but not a voter of the configuration its history made active. It
    /// sent UPTODATE to its synced learners, which take that configuration from NEWLEADER and
    /// leave for it (ZooKeeper's leader starts up, no longer designated, and so do they); as
    /// `GoLooking`, but what it sent must reach them before its connections close.
    StepAside { reason: String },
    /// Leader: its own reconfig removed it from the voters; leave this role and follow `leader`,
    /// the voter it designated in COMMITANDACTIVATE, without an election (ZooKeeper's
    /// `processReconfig` with a designated leader). The machine ignores further input.
    HandOver { leader: Sid },
}
