//! Broadcast-phase rules, scripted against one leader (sid 1; voters 1, 2, 3) with followers 2
//! and 3 and observer 4: commit needs a quorum including the leader's own durable ACK; COMMITs go
//! out strictly in zxid order; a stale leader never commits; observers get INFORM only after
//! commit, never a PROPOSAL.

use std::collections::{BTreeMap, VecDeque};

use warden_proto::quorum::{packet_type as pt, QuorumPacket};
use warden_proto::txn::Txn;
use warden_quorum::zab::*;

struct Ens {
    leader: Leader,
    learners: BTreeMap<Sid, Learner>,
    /// Packets from the leader that the test holds back instead of delivering.
    to_learner: Vec<(Sid, QuorumPacket)>,
    /// Everything the leader emitted, in order.
    leader_log: Vec<Action>,
}

impl Ens {
    /// Runs discovery and sync with every learner; learners report durability at once, the
    /// leader's own epoch files too.
    fn established() -> Self {
        Self::established_with(LeaderConfig::new(1, [1, 2, 3]))
    }

    fn established_with(cfg: LeaderConfig) -> Self {
        Self::established_learners(
            cfg,
            &[(2, LearnerRole::Follower), (3, LearnerRole::Follower), (4, LearnerRole::Observer)],
        )
    }

    fn established_learners(cfg: LeaderConfig, learners: &[(Sid, LearnerRole)]) -> Self {
        let init = LeaderInit {
            accepted_epoch: 0,
            current_epoch: 0,
            last_zxid: 0,
            history_base: 0,
            history: vec![],
            pending_config: None,
        };
        let leader = Leader::new(cfg, init, 0, &mut Vec::new()).unwrap();
        let mut e = Ens { leader, learners: BTreeMap::new(), to_learner: vec![], leader_log: vec![] };
        for &(sid, role) in learners {
            let state = LocalState { accepted_epoch: 0, current_epoch: 0, last_zxid: 0 };
            let mut out = Vec::new();
            let l = Learner::new(LearnerConfig::new(sid, 1, role), state, 0, &mut out);
            e.learners.insert(sid, l);
            e.learner_actions(sid, out);
        }
        e.deliver_all();
        assert!(e.leader.is_established());
        assert!(e.learners.values().all(Learner::is_synced));
        e.leader_log.clear();
        e
    }

    fn leader_actions(&mut self, out: Vec<Action>) {
        for a in out {
            match &a {
                Action::Send { to, packet } => self.to_learner.push((*to, packet.clone())),
                Action::PersistEpoch { kind, epoch } => {
                    let more = acts(|o| self.leader.on_epoch_durable(*kind, *epoch, o));
                    self.leader_log.push(a.clone());
                    self.leader_actions(more);
                    continue;
                }
                _ => {}
            }
            self.leader_log.push(a);
        }
        self.leader.check_invariants().unwrap();
    }

    fn learner_actions(&mut self, sid: Sid, out: Vec<Action>) {
        for a in out {
            let more = match a {
                Action::Send { packet, .. } => acts(|o| self.leader.on_packet(sid, &packet, 0, o)),
                Action::Persist(e) => {
                    let more = acts(|o| self.learners.get_mut(&sid).unwrap().on_durable(e.zxid(), o));
                    self.learner_actions(sid, more);
                    continue;
                }
                Action::PersistEpoch { kind, epoch } => {
                    let more = acts(|o| self.learners.get_mut(&sid).unwrap().on_epoch_durable(kind, epoch, o));
                    self.learner_actions(sid, more);
                    continue;
                }
                Action::GoLooking { reason } => panic!("learner {sid} went LOOKING: {reason}"),
                _ => continue,
            };
            self.leader_actions(more);
        }
        self.learners[&sid].check_invariants().unwrap();
    }

    /// Delivers queued leader packets (and whatever they cause) until none is left.
    fn deliver_all(&mut self) {
        let mut queue: VecDeque<_> = std::mem::take(&mut self.to_learner).into();
        while let Some((sid, p)) = queue.pop_front() {
            let out = acts(|o| self.learners.get_mut(&sid).unwrap().on_packet(&p, 0, o));
            self.learner_actions(sid, out);
            queue.extend(std::mem::take(&mut self.to_learner));
        }
    }

    fn propose(&mut self, n: i64) -> Zxid {
        let txn = Txn::SetData { path: "/x".into(), data: Some(n.to_be_bytes().to_vec().into()), version: -1 };
        let mut out = Vec::new();
        let zxid = self.leader.propose(7, n as i32, n, txn, &mut out).unwrap();
        self.leader_actions(out);
        zxid
    }

    /// Packets the leader queued for `sid` since the last call, of the given type (held back).
    fn queued(&self, sid: Sid, ty: i32) -> Vec<Zxid> {
        self.to_learner.iter().filter(|(s, p)| *s == sid && p.packet_type == ty).map(|(_, p)| p.zxid).collect()
    }

    fn leader_applied(&self) -> Vec<Zxid> {
        self.leader_log
            .iter()
            .filter_map(|a| match a {
                Action::ApplyCommitted(e) => Some(e.zxid()),
                _ => None,
            })
            .collect()
    }

    /// The leader's own log has `zxid` durable.
    fn leader_durable(&mut self, zxid: Zxid) {
        let out = acts(|o| self.leader.on_durable(zxid, o));
        self.leader_actions(out);
    }

    fn ack(&mut self, from: Sid, zxid: Zxid) {
        let out = acts(|o| self.leader.on_packet(from, &QuorumPacket::new(pt::ACK, zxid), 0, o));
        self.leader_actions(out);
    }
}

#[test]
fn commit_waits_for_the_leaders_own_durable_ack() {
    let mut e = Ens::established();
    let z1 = e.propose(1);
    assert_eq!(z1, make_zxid(1, 1));
    // Both followers ACK (a majority of the three voters without the leader), but the leader's
    // own log is not durable yet: no COMMIT, no apply on the leader.
    e.ack(2, z1);
    e.ack(3, z1);
    assert!(e.queued(2, pt::COMMIT).is_empty() && e.leader_applied().is_empty(), "{:?}", e.leader_log);
    assert_eq!(e.leader.last_committed(), 0);
    e.leader_durable(z1);
    assert_eq!(e.queued(2, pt::COMMIT), [z1]);
    assert_eq!(e.leader_applied(), [z1]);

    // The leader's durable ACK alone is not a quorum either.
    let z2 = e.propose(2);
    e.leader_durable(z2);
    assert_eq!(e.leader.last_committed(), z1);
    e.ack(3, z2);
    assert_eq!(e.leader.last_committed(), z2);
    assert_eq!(e.queued(3, pt::COMMIT), [z1, z2]);
}

#[test]
fn commits_go_out_strictly_in_zxid_order() {
    let mut e = Ens::established();
    let zs: Vec<Zxid> = (1..=4).map(|n| e.propose(n)).collect();
    // The leader's log is durable only through the second proposal; follower 2 ACKs the fourth
    // first (its ACKs are cumulative: it logs in order), then the first.
    e.leader_durable(zs[1]);
    e.ack(2, zs[3]);
    e.ack(2, zs[0]);
    assert_eq!(e.queued(2, pt::COMMIT), zs[..2]);
    e.leader_durable(zs[3]);
    assert_eq!(e.queued(2, pt::COMMIT), zs);
    assert_eq!(e.queued(4, pt::INFORM), zs);
    assert_eq!(e.leader_applied(), zs);
    e.deliver_all();
    for l in e.learners.values() {
        assert_eq!(l.last_applied(), zs[3]);
    }
}

#[test]
fn a_leader_that_lost_its_quorum_never_commits() {
    let mut e = Ens::established();
    let z1 = e.propose(1);
    e.leader_durable(z1);
    // Both followers leave (they will follow a newer leader); the leader notices at its next tick.
    acts(|o| e.leader.on_disconnect(2, o));
    acts(|o| e.leader.on_disconnect(3, o));
    let out = acts(|o| e.leader.on_tick(1, o));
    assert!(out.iter().any(|a| matches!(a, Action::GoLooking { .. })), "{out:?}");
    assert!(e.leader.is_stopped());
    let txn = Txn::SetData { path: "/x".into(), data: None, version: -1 };
    assert_eq!(e.leader.propose(7, 2, 2, txn, &mut Vec::new()).unwrap_err(), ProposeError::Stopped);
    // Late ACKs (even a quorum of them) and durability change nothing.
    for from in [2, 3] {
        assert!(acts(|o| e.leader.on_packet(from, &QuorumPacket::new(pt::ACK, z1), 0, o)).is_empty());
    }
    assert!(acts(|o| e.leader.on_durable(z1, o)).is_empty());
    assert_eq!(e.leader.last_committed(), 0);
}

#[test]
fn a_stale_leader_cannot_count_acks_for_another_epoch_or_from_unsynced_learners() {
    let mut e = Ens::established();
    let z1 = e.propose(1);
    e.leader_durable(z1);
    // Follower 3 moved on to epoch 2 (a newer leader); an ACK of an epoch-2 zxid is refused.
    let out = acts(|o| e.leader.on_packet(3, &QuorumPacket::new(pt::ACK, make_zxid(2, 1)), 0, o));
    assert!(matches!(out.as_slice(), [Action::Disconnect { sid: 3, .. }]), "{out:?}");
    assert_eq!(e.leader.last_committed(), 0);
    // Follower 3 reconnects but has not ACKed NEWLEADER: its ACK does not count.
    let state = LocalState { accepted_epoch: 1, current_epoch: 1, last_zxid: 0 };
    let mut out = Vec::new();
    let _ = Learner::new(LearnerConfig::new(3, 1, LearnerRole::Follower), state, 0, &mut out);
    let Some(Action::Send { packet: info, .. }) = out.first() else { panic!("{out:?}") };
    acts(|o| e.leader.on_packet(3, info, 0, o));
    let out = acts(|o| e.leader.on_packet(3, &QuorumPacket::new(pt::ACK, z1), 0, o));
    assert!(matches!(out.as_slice(), [Action::Disconnect { sid: 3, .. }]), "{out:?}");
    assert_eq!(e.leader.last_committed(), 0);
    // Follower 2, synced in this epoch, completes the quorum.
    e.ack(2, z1);
    assert_eq!(e.leader.last_committed(), z1);
}

#[test]
fn observers_get_inform_only_after_commit_and_never_a_proposal() {
    let mut e = Ens::established();
    let z1 = e.propose(1);
    assert_eq!(e.queued(2, pt::PROPOSAL), [z1]);
    assert!(e.to_learner.iter().all(|(s, _)| *s != 4), "observer got something before commit");
    e.leader_durable(z1);
    assert!(e.to_learner.iter().all(|(s, _)| *s != 4));
    e.ack(2, z1);
    let to_observer: Vec<_> = e.to_learner.iter().filter(|(s, _)| *s == 4).map(|(_, p)| p.packet_type).collect();
    assert_eq!(to_observer, [pt::INFORM]);
    e.deliver_all();
    assert_eq!(e.learners[&4].last_applied(), z1);
}

#[test]
fn the_synced_observers_are_the_observers_the_gauge_counts_until_they_leave() {
    let mut e = Ens::established();
    assert_eq!(e.leader.synced_observers().collect::<Vec<_>>(), [4]);
    assert_eq!(e.leader.gauges().synced_observers, 1);
    let out = acts(|o| e.leader.on_disconnect(4, o));
    e.leader_actions(out);
    assert_eq!(e.leader.synced_observers().count(), 0);
    assert_eq!(e.leader.gauges().synced_observers, 0);
}

#[test]
fn revalidate_goes_to_the_leader_and_its_answer_comes_back_to_the_learner() {
    let mut e = Ens::established();
    let sid = 0x0200_0000_0000_0007;
    for learner in [2, 4] {
        let out = acts(|o| e.learners.get_mut(&learner).unwrap().revalidate(sid, 4_000, o));
        let [Action::Send { to: 1, packet }] = out.as_slice() else { panic!("{out:?}") };
        // Learner.validateSession: type REVALIDATE, zxid -1, long sessionId + int timeout.
        assert_eq!((packet.packet_type, packet.zxid), (pt::REVALIDATE, -1));
        let mut want = sid.to_be_bytes().to_vec();
        want.extend_from_slice(&4_000i32.to_be_bytes());
        assert_eq!(packet.data.as_deref(), Some(&want[..]));
        // The leader machine hands the question to the node, which answers from its sessions.
        let asked = acts(|o| e.leader.on_packet(learner, packet, 0, o));
        assert_eq!(asked, [Action::Revalidate { from: learner, session_id: sid, timeout_ms: 4_000 }]);
        for valid in [true, false] {
            let reply = codec::revalidate_reply(sid, valid);
            assert_eq!(reply.data.as_deref().map(<[u8]>::len), Some(9), "long sessionId + boolean");
            let got = acts(|o| e.learners.get_mut(&learner).unwrap().on_packet(&reply, 0, o));
            assert_eq!(got, [Action::Revalidated { session_id: sid, valid }]);
        }
        // A reply without its boolean is a protocol error.
        let mut short = codec::revalidate_reply(sid, true);
        short.data.as_mut().unwrap().pop();
        let got = acts(|o| e.learners.get_mut(&learner).unwrap().on_packet(&short, 0, o));
        assert!(matches!(got.as_slice(), [Action::GoLooking { .. }]), "{got:?}");
    }
}

#[test]
fn the_counter_limit_stops_proposals_in_the_epoch_so_a_new_epoch_starts() {
    let init = LeaderInit {
        accepted_epoch: 0,
        current_epoch: 0,
        last_zxid: 0,
        history_base: 0,
        history: vec![],
        pending_config: None,
    };
    let mut cfg = LeaderConfig::new(1, [1]);
    cfg.max_counter = 2;
    let mut out = Vec::new();
    let mut leader = Leader::new(cfg, init, 0, &mut out).unwrap();
    let mut pending = out;
    while let Some(a) = pending.pop() {
        if let Action::PersistEpoch { kind, epoch } = a {
            pending.extend(acts(|o| leader.on_epoch_durable(kind, epoch, o)));
        }
    }
    assert!(leader.is_established(), "a one-voter ensemble establishes alone");
    let txn = || Txn::CreateSession { timeout_ms: 1000 };
    let z1 = leader.propose(1, 1, 0, txn(), &mut Vec::new()).unwrap();
    let z2 = leader.propose(1, 2, 0, txn(), &mut Vec::new()).unwrap();
    assert_eq!((counter_of(z1), counter_of(z2)), (1, 2));
    assert!(matches!(leader.propose(1, 3, 0, txn(), &mut Vec::new()), Err(ProposeError::ZxidExhausted)));
    assert_eq!(leader.last_proposed(), z2, "nothing was assigned past the limit");
}

/// Found by the simulator (seed 0xcd1e1928299fd3ca): a follower answered a client's sync as soon
/// as the leader's SYNC arrived, although COMMITs received before it still waited for the txns to
/// be durable locally, so the read after the sync missed an acknowledged write.
#[test]
fn a_sync_is_done_only_once_every_commit_before_it_is_applied() {
    let mut e = Ens::established();
    let mut f = e.learners.remove(&2).unwrap();
    let txn = Txn::CreateSession { timeout_ms: 1000 };
    let zxid = e.leader.propose(7, 1, 1, txn.clone(), &mut Vec::new()).unwrap();
    let entry = TxnEntry {
        hdr: warden_proto::txn::TxnHeader { client_id: 7, cxid: 1, zxid, time_ms: 1, txn_type: txn.op().code() },
        txn: txn.into(),
        // As a ZooKeeper leader sends it: the learner keeps the digest to check on applying.
        digest: Some(warden_proto::TxnDigest { version: 2, tree_digest: 0x1234_5678_9abc }),
    };
    let out = acts(|o| f.on_packet(&codec::proposal(&entry), 0, o));
    assert!(out.contains(&Action::Persist(entry.clone())), "{out:?}");
    let out = acts(|o| f.on_packet(&QuorumPacket::new(pt::COMMIT, zxid), 0, o));
    assert!(out.is_empty(), "not applied before it is durable here: {out:?}");
    let out = acts(|o| f.on_packet(&QuorumPacket::new(pt::SYNC, 0), 0, o));
    assert!(!out.contains(&Action::SyncDone), "the sync waits for the commit before it: {out:?}");
    f.check_invariants().unwrap();
    let out = acts(|o| f.on_durable(zxid, o));
    let applied = out.iter().position(|a| matches!(a, Action::ApplyCommitted(x) if x.zxid() == zxid));
    let done = out.iter().position(|a| *a == Action::SyncDone);
    assert!(applied.is_some() && done.is_some() && applied < done, "apply, then sync done: {out:?}");
    // With nothing pending, a SYNC is done at once.
    assert!(acts(|o| f.on_packet(&QuorumPacket::new(pt::SYNC, 0), 0, o)).contains(&Action::SyncDone));
    f.check_invariants().unwrap();
}

/// Found migrating a ZooKeeper 3.8 ensemble to Warden (crates/warden/tests/migration.rs): a
/// ZooKeeper leader's LearnerHandler (its `SyncLimitCheck`) waits for the ACK of one proposal it
/// sent at a time and closes the connection ("transaction timeout") when that ACK has not come
/// within syncLimit ticks; ZooKeeper's follower ACKs every proposal it logs, committed or not.
/// A Warden follower whose COMMIT arrived (the leader and the other follower being quicker)
/// before the txn was durable here never ACKed it, so a ZooKeeper leader dropped it syncLimit
/// ticks after it joined under load. Every proposal is ACKed once durable, even if committed.
#[test]
fn a_proposal_committed_before_it_is_durable_is_still_acked() {
    let mut e = Ens::established();
    let mut f = e.learners.remove(&2).unwrap();
    let txn = Txn::CreateSession { timeout_ms: 1000 };
    let zxid = e.leader.propose(7, 1, 1, txn.clone(), &mut Vec::new()).unwrap();
    let entry = TxnEntry {
        hdr: warden_proto::txn::TxnHeader { client_id: 7, cxid: 1, zxid, time_ms: 1, txn_type: txn.op().code() },
        txn: txn.into(),
        digest: None,
    };
    acts(|o| f.on_packet(&codec::proposal(&entry), 0, o));
    acts(|o| f.on_packet(&QuorumPacket::new(pt::COMMIT, zxid), 0, o));
    let out = acts(|o| f.on_durable(zxid, o));
    let acks: Vec<Zxid> = out
        .iter()
        .filter_map(|a| match a {
            Action::Send { to: 1, packet } if packet.packet_type == pt::ACK => Some(packet.zxid),
            _ => None,
        })
        .collect();
    assert_eq!(acks, [zxid], "the ACK of a durable proposal, although its COMMIT came first: {out:?}");
    assert!(out.iter().any(|a| matches!(a, Action::ApplyCommitted(x) if x.zxid() == zxid)), "{out:?}");
    f.check_invariants().unwrap();
}

/// Found by the simulator (seed 0xcb09400282a07c4d): a voter that accepted a newer epoch from a
/// leader attempt that never established refuses this leader's older epoch on every try, and the
/// election keeps sending it back here; the leader steps down so the next epoch is above it.
#[test]
fn a_voter_with_a_newer_accepted_epoch_makes_the_leader_step_down() {
    let mut e = Ens::established();
    let epoch = e.leader.epoch().unwrap();
    let state = LocalState { accepted_epoch: epoch, current_epoch: epoch - 1, last_zxid: 0 };
    let mut out = Vec::new();
    let _ = Learner::new(LearnerConfig::new(3, 1, LearnerRole::Follower), state, 0, &mut out);
    let [Action::Send { packet: same, .. }] = out.as_slice() else { panic!("{out:?}") };
    let out = acts(|o| e.leader.on_packet(3, same, 0, o));
    assert!(!out.iter().any(|a| matches!(a, Action::GoLooking { .. })), "an equal epoch reconnects: {out:?}");
    let state = LocalState { accepted_epoch: epoch + 1, current_epoch: epoch - 1, last_zxid: 0 };
    let mut out = Vec::new();
    let _ = Learner::new(LearnerConfig::new(3, 1, LearnerRole::Follower), state, 0, &mut out);
    let [Action::Send { packet: newer, .. }] = out.as_slice() else { panic!("{out:?}") };
    let out = acts(|o| e.leader.on_packet(3, newer, 0, o));
    assert!(out.iter().any(|a| matches!(a, Action::GoLooking { .. })), "{out:?}");
    assert!(e.leader.is_stopped());
}

impl Ens {
    /// Learner `sid` answers every PING queued for it (held packets of other types stay queued).
    fn answer_pings(&mut self, sid: Sid) {
        let pings = self.queued(sid, pt::PING).len();
        self.to_learner.retain(|(s, p)| !(*s == sid && p.packet_type == pt::PING));
        for _ in 0..pings {
            let reply = QuorumPacket::new(pt::PING, 0);
            let out = acts(|o| self.leader.on_packet(sid, &reply, 0, o));
            self.leader_actions(out);
        }
    }

    fn sync(&mut self, from: Sid) {
        let out = acts(|o| self.leader.sync(from, o));
        self.leader_actions(out);
    }

    fn sync_done(&self) -> usize {
        self.leader_log.iter().filter(|a| matches!(a, Action::SyncDone)).count()
    }
}

/// A leader answers a sync only after a quorum of voters answered a PING sent after the sync
/// arrived: a leader that was paused or cut off while a new one was elected cannot answer one
/// (ZooKeeper's answers at once when nothing is pending).
#[test]
fn a_sync_waits_for_a_quorum_to_answer_a_ping_sent_after_it() {
    let mut e = Ens::established();
    e.to_learner.clear();
    e.sync(2);
    assert_eq!(e.queued(2, pt::SYNC), Vec::<Zxid>::new(), "no SYNC before the quorum confirms");
    // Every synced learner got one PING for the round; the observer's answer does not count.
    assert_eq!(e.queued(2, pt::PING).len(), 1);
    assert_eq!(e.queued(4, pt::PING).len(), 1);
    e.answer_pings(4);
    assert_eq!(e.queued(2, pt::SYNC), Vec::<Zxid>::new(), "an observer confirms nothing");
    e.answer_pings(3);
    assert_eq!(e.queued(2, pt::SYNC), vec![0], "follower 3 and the leader are a quorum");
    // The leader's own client's sync: the same rule, answered with SyncDone.
    e.to_learner.clear();
    e.sync(1);
    assert_eq!(e.sync_done(), 0);
    e.answer_pings(3);
    assert_eq!(e.sync_done(), 1);
    e.leader.check_invariants().unwrap();
}

/// Syncs batch: those arriving while a round is out wait for the next round, which starts when
/// that one is confirmed; an answer to a PING sent before a sync never confirms it.
#[test]
fn a_sync_arriving_during_a_round_waits_for_the_next_one() {
    let mut e = Ens::established();
    e.to_learner.clear();
    e.sync(2);
    assert_eq!(e.queued(3, pt::PING).len(), 1);
    e.sync(3); // the round's PINGs went out before this sync arrived
    e.sync(2);
    assert_eq!(e.queued(3, pt::PING).len(), 1, "one round at a time");
    e.answer_pings(3);
    assert_eq!(e.queued(2, pt::SYNC), vec![0], "the first sync is confirmed");
    assert_eq!(e.queued(3, pt::SYNC), Vec::<Zxid>::new(), "the second needs a later PING");
    assert_eq!(e.queued(3, pt::PING).len(), 1, "the next round started for the waiting syncs");
    e.answer_pings(3);
    assert_eq!(e.queued(3, pt::SYNC), vec![0]);
    assert_eq!(e.queued(2, pt::SYNC), vec![0, 0]);
}

/// A confirmed sync still waits for everything proposed before it to commit.
#[test]
fn a_confirmed_sync_still_waits_for_earlier_proposals_to_commit() {
    let mut e = Ens::established();
    let z1 = e.propose(1);
    e.to_learner.clear();
    e.sync(2);
    e.answer_pings(3);
    assert_eq!(e.queued(2, pt::SYNC), Vec::<Zxid>::new(), "{z1:#x} is not committed yet");
    e.leader_durable(z1);
    e.ack(3, z1);
    assert_eq!(e.queued(2, pt::SYNC), vec![0]);
}

/// A proposal made after a sync commits only once the sync is answered, so the SYNC (and the
/// leader's own SyncDone) precedes the COMMITs of later proposals, as ZooKeeper's leader orders
/// them. Found by the cluster_ops fuzz target: a client's sync and the reads behind it were
/// answered on a tree that already held the same client's later write.
#[test]
fn a_proposal_after_a_sync_commits_only_after_the_sync_is_answered() {
    let mut e = Ens::established();
    let before = e.propose(1);
    e.to_learner.clear();
    e.sync(2);
    e.sync(1);
    let after = e.propose(2);
    for z in [before, after] {
        e.leader_durable(z);
        e.ack(3, z);
    }
    assert_eq!(e.queued(2, pt::COMMIT), vec![before], "{after:#x} waits for the sync's PING round");
    assert_eq!(e.leader_applied().last(), Some(&before));
    assert_eq!(e.sync_done(), 0);
    e.answer_pings(3);
    assert_eq!(e.queued(2, pt::SYNC), vec![0], "learner 2's sync is answered");
    assert_eq!(e.queued(2, pt::COMMIT), vec![before], "the leader's own sync came during the round: the next one");
    e.answer_pings(3);
    let to_2: Vec<(i32, Zxid)> =
        e.to_learner.iter().filter(|(s, _)| *s == 2).map(|(_, p)| (p.packet_type, p.zxid)).collect();
    let sync_at = to_2.iter().position(|p| *p == (pt::SYNC, 0)).expect("the SYNC went out");
    let commit_at = to_2.iter().position(|p| *p == (pt::COMMIT, after)).expect("the later COMMIT went out");
    assert!(sync_at < commit_at, "SYNC before the later COMMIT: {to_2:?}");
    // The leader's own client: SyncDone before the later txn applies.
    let done_at = e.leader_log.iter().position(|a| matches!(a, Action::SyncDone)).expect("SyncDone");
    let applied_at = e
        .leader_log
        .iter()
        .position(|a| matches!(a, Action::ApplyCommitted(t) if t.zxid() == after))
        .expect("the later txn applied");
    assert!(done_at < applied_at);
    e.leader.check_invariants().unwrap();
}

/// The lease: a leader that no quorum vouched for within `lease_ms` steps down as soon as it is
/// asked (`check_lease` before every input), before any tick; answers to its PINGs renew it.
#[test]
fn a_leader_whose_lease_ran_out_steps_down_before_serving() {
    let mut e = Ens::established();
    let lease = LeaderConfig::new(1, [1, 2, 3]).lease_ms();
    assert!(lease < 2000 * 5, "shorter than the followers' syncLimit");
    // Renewed: a PING at `lease` answered by follower 2.
    e.to_learner.clear();
    let out = acts(|o| e.leader.on_tick(lease, o));
    e.leader_actions(out);
    e.answer_pings(2);
    let out = acts(|o| e.leader.check_lease(2 * lease, o));
    assert!(out.is_empty(), "vouched at {lease}: {out:?}");
    // A pause: nothing heard since; the first input after it finds the lease expired.
    let out = acts(|o| e.leader.check_lease(2 * lease + 1, o));
    assert!(matches!(out.as_slice(), [Action::GoLooking { .. }]), "{out:?}");
    assert!(e.leader.is_stopped());
    e.sync(2);
    assert_eq!(e.queued(2, pt::SYNC), Vec::<Zxid>::new(), "a stopped leader answers no sync");
}

/// The lease outlasts the PING interval: followers that answer each tick's PING keep it alive even
/// with kazoo's syncLimit=2, where a lease of syncLimit ticks less one tick (one tick) ran out
/// just before every answer and the leader stepped down every tick (kazoo's ensemble suite).
#[test]
fn followers_answering_every_tick_keep_the_lease_with_sync_limit_2() {
    for sync_limit in 1..=6 {
        let mut cfg = LeaderConfig::new(1, [1, 2, 3]);
        cfg.sync_limit = sync_limit;
        assert!(cfg.lease_ms() >= cfg.tick_ms * 3 / 2, "syncLimit {sync_limit}: {}", cfg.lease_ms());
        if sync_limit >= 2 {
            assert!(cfg.lease_ms() < cfg.tick_ms * u64::from(sync_limit), "syncLimit {sync_limit}");
        }
    }
    let mut cfg = LeaderConfig::new(1, [1, 2, 3]);
    cfg.sync_limit = 2;
    let mut e = Ens::established_with(cfg);
    for k in 1..=20u64 {
        let tick = k * 2000;
        e.to_learner.clear();
        let out = acts(|o| e.leader.on_tick(tick, o));
        e.leader_actions(out);
        // An input just before the answers to this tick's PINGs arrive, 300 ms later.
        let out = acts(|o| e.leader.check_lease(tick + 299, o));
        assert!(out.is_empty(), "tick {k}: {out:?}");
        let out = acts(|o| e.leader.check_lease(tick + 300, o));
        e.leader_actions(out);
        e.answer_pings(2);
        e.answer_pings(3);
    }
    assert!(!e.leader.is_stopped());
}

/// What one call of a machine pushed into its caller's buffer.
fn acts<A>(call: impl FnOnce(&mut Vec<A>)) -> Vec<A> {
    let mut out = Vec::new();
    call(&mut out);
    out
}

/// A reconfig commits only with a quorum of the old voters and one of the new, and so does every
/// proposal after it until it commits; then the new voters alone count. Followers get
/// COMMITANDACTIVATE and observers INFORMANDACTIVATE, each naming the leader (still a voter).
#[test]
fn a_reconfig_needs_both_quorums_then_the_new_voters_alone_count() {
    use warden_proto::membership::Membership;
    // 5 follows without a vote; the new configuration is {1, 5, 6} (6 is not even running).
    let mut e = Ens::established_learners(
        LeaderConfig::new(1, [1, 2, 3]),
        &[
            (2, LearnerRole::Follower),
            (3, LearnerRole::Follower),
            (4, LearnerRole::Observer),
            (5, LearnerRole::Follower),
        ],
    );
    let next =
        Membership::parse_text("server.1=a:1:2\nserver.5=e:1:2\nserver.6=f:1:2\nserver.4=d:1:2:observer").unwrap();
    let mut out = Vec::new();
    let data = Some(next.to_text().into_bytes().into());
    let txn = Txn::Reconfig { path: "/zookeeper/config".into(), data, version: -1 };
    let z1 = e.leader.propose(7, 1, 1, txn, &mut out).unwrap();
    e.leader_actions(out);
    assert!(e.leader.reconfig_in_flight());
    let z2 = e.propose(2);
    e.leader_durable(z2);
    // The old voters' quorum alone commits neither the reconfig nor the proposal after it.
    e.ack(2, z2);
    e.ack(3, z2);
    assert_eq!(e.leader.last_committed(), 0, "{:?}", e.leader_log);
    // 5's ACK of the reconfig completes the new quorum {1, 5}: the reconfig commits.
    e.ack(5, z1);
    assert_eq!(e.leader.last_committed(), z1);
    assert!(!e.leader.reconfig_in_flight());
    assert_eq!(e.leader.voters().iter().copied().collect::<Vec<_>>(), [1, 5, 6]);
    for sid in [2, 3, 5] {
        let activate: Vec<&QuorumPacket> =
            e.to_learner.iter().filter(|(s, p)| *s == sid && p.zxid == z1).map(|(_, p)| p).collect();
        assert_eq!(activate.len(), 2, "follower {sid}: the PROPOSAL, then the commit");
        assert_eq!(activate[1].packet_type, pt::COMMITANDACTIVATE);
        assert_eq!(activate[1].data.as_deref(), Some(&1i64.to_be_bytes()[..]), "the designated leader is 1");
    }
    let inform: Vec<&QuorumPacket> = e.to_learner.iter().filter(|(s, _)| *s == 4).map(|(_, p)| p).collect();
    assert_eq!(inform.iter().map(|p| p.packet_type).collect::<Vec<_>>(), [pt::INFORMANDACTIVATE]);
    assert_eq!(codec::decode_designated(inform[0]).unwrap(), 1);
    assert_eq!(codec::decode_entry(inform[0]).unwrap().zxid(), z1);
    // Now only {1, 5, 6} count: 2's and 3's ACKs of z2 do not commit it, 5's does.
    assert_eq!(e.leader.last_committed(), z1);
    e.ack(5, z2);
    assert_eq!(e.leader.last_committed(), z2);
    let z3 = e.propose(3);
    e.leader_durable(z3);
    e.ack(2, z3);
    e.ack(3, z3);
    assert_eq!(e.leader.last_committed(), z2, "removed voters no longer make a quorum");
    e.deliver_all();
    assert_eq!(e.leader.last_committed(), z3, "5 ACKed once delivered");
    for l in e.learners.values() {
        assert_eq!(l.last_applied(), z2.max(l.last_applied()));
    }
}
