//! Scripted ZAB handshakes: DIFF / TRUNC / SNAP choices and the learner's durability order; for a
//! learner behind the leader's in-memory history, DIFF read from the on-disk log (asked of storage
//! with `Action::ProbeLog`, streamed by the shell for `SendLogDiff`) or SNAP, as ZooKeeper's
//! `LearnerHandler.syncFollower` with `snapshotSizeFactor`.

use warden_proto::quorum::{packet_type as pt, QuorumPacket};
use warden_proto::txn::{Txn, TxnHeader};
use warden_quorum::zab::*;

fn entry(zxid: Zxid) -> TxnEntry {
    let txn = Txn::SetData { path: "/x".into(), data: Some(zxid.to_be_bytes().to_vec().into()), version: -1 };
    TxnEntry {
        hdr: TxnHeader { client_id: 1, cxid: 1, zxid, time_ms: 0, txn_type: txn.op().code() },
        txn: txn.into(),
        digest: None,
    }
}

fn z(e: i64, c: i64) -> Zxid {
    make_zxid(e, c)
}

fn sends(actions: &[Action], to: Sid) -> Vec<QuorumPacket> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { to: t, packet } if *t == to => Some(packet.clone()),
            _ => None,
        })
        .collect()
}

fn types(packets: &[QuorumPacket]) -> Vec<i32> {
    packets.iter().map(|p| p.packet_type).collect()
}

fn leader_with(history: &[Zxid], base: Zxid, epoch: i64) -> Leader {
    let last = history.last().copied().unwrap_or(base);
    let init = LeaderInit {
        accepted_epoch: epoch,
        current_epoch: epoch,
        last_zxid: last,
        history_base: base,
        history: history.iter().map(|z| entry(*z)).collect(),
        pending_config: None,
    };
    let mut out = Vec::new();
    let l = Leader::new(LeaderConfig::new(1, [1, 2, 3]), init, 0, &mut out).unwrap();
    assert!(out.is_empty(), "one of three voters cannot fix an epoch alone");
    l
}

/// Runs discovery between `leader` and a fresh follower 2 whose log ends at `last`; returns the
/// learner, every learner action so far, and the leader's sync packets to 2.
fn handshake(leader: &mut Leader, last: Zxid, epoch: i64) -> (Learner, Vec<Action>, Vec<QuorumPacket>) {
    handshake_from(leader, last, epoch, epoch)
}

fn handshake_from(
    leader: &mut Leader,
    last: Zxid,
    epoch: i64,
    current: i64,
) -> (Learner, Vec<Action>, Vec<QuorumPacket>) {
    let state = LocalState { accepted_epoch: epoch, current_epoch: current, last_zxid: last };
    let mut log = Vec::new();
    let mut learner = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut log);
    let info = sends(&log, 1);
    assert_eq!(types(&info), [pt::FOLLOWERINFO]);
    assert_eq!(info[0].zxid, z(epoch, 0));
    let out = acts(|o| leader.on_packet(2, &info[0], 0, o));
    assert_eq!(out, [Action::PersistEpoch { kind: EpochKind::Accepted, epoch: epoch + 1 }]);
    let out = acts(|o| leader.on_epoch_durable(EpochKind::Accepted, epoch + 1, o));
    let li = sends(&out, 2);
    assert_eq!(types(&li), [pt::LEADERINFO]);
    assert_eq!(li[0].zxid, z(epoch + 1, 0));
    let out = acts(|o| learner.on_packet(&li[0], 0, o));
    // acceptedEpoch must be durable before ACKEPOCH.
    assert_eq!(out, [Action::PersistEpoch { kind: EpochKind::Accepted, epoch: epoch + 1 }]);
    log.extend(out);
    let out = acts(|o| learner.on_epoch_durable(EpochKind::Accepted, epoch + 1, o));
    let ack = sends(&out, 1);
    assert_eq!(types(&ack), [pt::ACKEPOCH]);
    assert_eq!(ack[0].zxid, last);
    assert_eq!(ack[0].data.as_deref(), Some(&(current as i32).to_be_bytes()[..]));
    log.extend(out);
    let out = acts(|o| leader.on_packet(2, &ack[0], 0, o));
    assert!(out.contains(&Action::PersistEpoch { kind: EpochKind::Current, epoch: epoch + 1 }));
    let sync = sends(&out, 2);
    assert_eq!(sync.last().map(|p| p.packet_type), Some(pt::NEWLEADER));
    learner.check_invariants().unwrap();
    leader.check_invariants().unwrap();
    (learner, log, sync)
}

fn feed(learner: &mut Learner, packets: &[QuorumPacket], log: &mut Vec<Action>) {
    for p in packets {
        let out = acts(|o| learner.on_packet(p, 0, o));
        assert!(!out.iter().any(|a| matches!(a, Action::GoLooking { .. })), "{out:?}");
        log.extend(out);
        learner.check_invariants().unwrap();
    }
}

fn position(log: &[Action], f: impl Fn(&Action) -> bool) -> usize {
    log.iter().position(f).unwrap_or_else(|| panic!("action missing in {log:#?}"))
}

#[test]
fn diff_then_persist_history_then_current_epoch_then_ack_newleader() {
    let mut leader = leader_with(&[z(1, 1), z(1, 2), z(1, 3)], 0, 1);
    let (mut learner, mut log, sync) = handshake(&mut leader, z(1, 1), 1);
    assert_eq!(types(&sync), [pt::DIFF, pt::PROPOSAL, pt::COMMIT, pt::PROPOSAL, pt::COMMIT, pt::NEWLEADER]);
    assert_eq!(sync[1].zxid, z(1, 2));
    assert_eq!(sync[5].zxid, z(2, 0));
    feed(&mut learner, &sync, &mut log);
    // Nothing is ACKed, epoch-written or applied until the synced history is durable.
    assert!(sends(&log, 1).iter().all(|p| p.packet_type != pt::ACK));
    assert!(!log.iter().any(|a| matches!(a, Action::PersistEpoch { kind: EpochKind::Current, .. })));
    let out = acts(|o| learner.on_durable(z(1, 2), o));
    assert!(out.is_empty(), "only part of the history is durable: {out:?}");
    log.extend(acts(|o| learner.on_durable(z(1, 3), o)));
    assert!(sends(&log, 1).iter().all(|p| p.packet_type != pt::ACK), "ACK before currentEpoch is durable");
    log.extend(acts(|o| learner.on_epoch_durable(EpochKind::Current, 2, o)));
    learner.check_invariants().unwrap();
    let persisted = position(&log, |a| matches!(a, Action::Persist(e) if e.zxid() == z(1, 3)));
    let epoch = position(&log, |a| matches!(a, Action::PersistEpoch { kind: EpochKind::Current, epoch: 2 }));
    let ack = position(
        &log,
        |a| matches!(a, Action::Send { packet, .. } if packet.packet_type == pt::ACK && packet.zxid == z(2, 0)),
    );
    assert!(persisted < epoch && epoch < ack, "{log:#?}");
    assert!(!log.iter().any(|a| matches!(a, Action::ApplyCommitted(_))), "applied during sync (ZOOKEEPER-3911)");

    // The leader establishes only with its own currentEpoch durable too.
    let nl_ack = QuorumPacket::new(pt::ACK, z(2, 0));
    assert!(acts(|o| leader.on_packet(2, &nl_ack, 0, o)).is_empty());
    let out = acts(|o| leader.on_epoch_durable(EpochKind::Current, 2, o));
    assert_eq!(out[0], Action::Broadcasting { epoch: 2 });
    assert_eq!(types(&sends(&out, 2)), [pt::UPTODATE]);
    leader.check_invariants().unwrap();

    let out = acts(|o| learner.on_packet(&QuorumPacket::new(pt::UPTODATE, -1), 0, o));
    assert_eq!(types(&sends(&out, 1)), [pt::ACK]);
    let synced = position(&out, |a| matches!(a, Action::Synced { epoch: 2 }));
    let applied: Vec<Zxid> = out
        .iter()
        .filter_map(|a| match a {
            Action::ApplyCommitted(e) => Some(e.zxid()),
            _ => None,
        })
        .collect();
    assert_eq!(applied, [z(1, 2), z(1, 3)]);
    assert!(synced < position(&out, |a| matches!(a, Action::ApplyCommitted(_))));
    assert!(learner.is_synced());
    learner.check_invariants().unwrap();
}

#[test]
fn equal_zxid_gets_an_empty_diff() {
    let mut leader = leader_with(&[z(1, 1), z(1, 2)], 0, 1);
    let (_, _, sync) = handshake(&mut leader, z(1, 2), 1);
    assert_eq!(types(&sync), [pt::DIFF, pt::NEWLEADER]);
}

#[test]
fn diff_from_the_history_base() {
    let mut leader = leader_with(&[z(1, 6), z(1, 7)], z(1, 5), 1);
    let (_, _, sync) = handshake(&mut leader, z(1, 5), 1);
    assert_eq!(types(&sync), [pt::DIFF, pt::PROPOSAL, pt::COMMIT, pt::PROPOSAL, pt::COMMIT, pt::NEWLEADER]);
}

#[test]
fn learner_ahead_of_the_leader_is_truncated() {
    // The learner led epoch 1 and logged (1,3), (1,4) that no quorum saw; the leader acked a later
    // NEWLEADER (current epoch 2), so FLE preferred it.
    let mut leader = leader_with(&[z(1, 1), z(1, 2)], 0, 2);
    let (mut learner, mut log, sync) = handshake_from(&mut leader, z(1, 4), 2, 1);
    assert_eq!(types(&sync), [pt::TRUNC, pt::NEWLEADER]);
    assert_eq!(sync[0].zxid, z(1, 2));
    feed(&mut learner, &sync, &mut log);
    let trunc = position(&log, |a| *a == Action::Truncate { zxid: z(1, 2) });
    let epoch = position(&log, |a| matches!(a, Action::PersistEpoch { kind: EpochKind::Current, .. }));
    assert!(trunc < epoch);
    assert_eq!(learner.last_received(), z(1, 2));
}

#[test]
fn leader_refuses_a_history_with_a_hole() {
    // ZOOKEEPER-4925: a hole in the leader's log would be synced as if it were history.
    for (history, base) in [(&[z(1, 1), z(1, 2), z(1, 5)][..], 0), (&[z(1, 7)][..], z(1, 5)), (&[z(2, 2)][..], z(1, 5))]
    {
        let init = LeaderInit {
            accepted_epoch: 2,
            current_epoch: 2,
            last_zxid: *history.last().unwrap(),
            history_base: base,
            history: history.iter().map(|z| entry(*z)).collect(),
            pending_config: None,
        };
        let err = Leader::new(LeaderConfig::new(1, [1, 2, 3]), init, 0, &mut Vec::new()).unwrap_err();
        assert!(matches!(err, LeaderInitError::HistoryHole { .. }), "{err}");
    }
}

#[test]
fn divergent_tail_across_an_epoch_gets_a_snapshot() {
    // TRUNC may not cross an epoch boundary: the learner's (2,4) was never seen by the leader,
    // whose next txn is (3,1).
    let mut leader = leader_with(&[z(1, 1), z(3, 1)], 0, 3);
    let (_, _, sync) = handshake(&mut leader, z(2, 4), 3);
    assert_eq!(types(&sync), [pt::SNAP, pt::NEWLEADER]);
}

#[test]
fn far_behind_learner_gets_a_snapshot_installed_durably_before_the_ack() {
    let mut leader = leader_with(&[z(1, 51), z(1, 52), z(1, 53)], z(1, 50), 1);
    let state = LocalState { accepted_epoch: 1, current_epoch: 1, last_zxid: z(1, 10) };
    let mut log = Vec::new();
    let mut learner = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut log);
    let mut to_leader = sends(&log, 1);
    let mut actions_of_leader = Vec::new();
    // Drive discovery generically this time.
    for _ in 0..4 {
        for p in std::mem::take(&mut to_leader) {
            actions_of_leader.extend(acts(|o| leader.on_packet(2, &p, 0, o)));
        }
        actions_of_leader.extend(acts(|o| leader.on_epoch_durable(EpochKind::Accepted, 2, o)));
        for p in sends(&std::mem::take(&mut actions_of_leader), 2) {
            let out = acts(|o| learner.on_packet(&p, 0, o));
            to_leader.extend(sends(&out, 1));
            log.extend(out);
        }
        let out = acts(|o| learner.on_epoch_durable(EpochKind::Accepted, 2, o));
        to_leader.extend(sends(&out, 1));
        log.extend(out);
    }
    assert!(log.contains(&Action::InstallSnapshot { zxid: z(1, 53) }), "{log:#?}");
    assert!(!log.iter().any(|a| matches!(a, Action::PersistEpoch { kind: EpochKind::Current, .. })));
    log.extend(acts(|o| learner.on_durable(z(1, 53), o)));
    log.extend(acts(|o| learner.on_epoch_durable(EpochKind::Current, 2, o)));
    let install = position(&log, |a| matches!(a, Action::InstallSnapshot { .. }));
    let epoch = position(&log, |a| matches!(a, Action::PersistEpoch { kind: EpochKind::Current, .. }));
    let ack = position(&log, |a| matches!(a, Action::Send { packet, .. } if packet.packet_type == pt::ACK));
    assert!(install < epoch && epoch < ack);
    learner.check_invariants().unwrap();
}

#[test]
fn leader_snapshot_action_follows_the_snap_packet() {
    let mut leader = leader_with(&[z(1, 51)], z(1, 50), 1);
    let state = LocalState { accepted_epoch: 1, current_epoch: 1, last_zxid: z(1, 3) };
    let mut out = Vec::new();
    let _ = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut out);
    acts(|o| leader.on_packet(2, &sends(&out, 1)[0], 0, o));
    acts(|o| leader.on_epoch_durable(EpochKind::Accepted, 2, o));
    let ack = QuorumPacket::with_data(pt::ACKEPOCH, z(1, 3), 1i32.to_be_bytes().to_vec());
    let out = acts(|o| leader.on_packet(2, &ack, 0, o));
    let snap = position(&out, |a| matches!(a, Action::Send { packet, .. } if packet.packet_type == pt::SNAP));
    assert_eq!(out[snap + 1], Action::SendSnapshot { to: 2, zxid: z(1, 51) });
}

#[test]
fn learner_more_recent_than_the_leader_makes_it_step_down() {
    let mut leader = leader_with(&[z(1, 1)], 0, 1);
    let state = LocalState { accepted_epoch: 1, current_epoch: 1, last_zxid: z(1, 9) };
    let mut out = Vec::new();
    let _ = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut out);
    acts(|o| leader.on_packet(2, &sends(&out, 1)[0], 0, o));
    acts(|o| leader.on_epoch_durable(EpochKind::Accepted, 2, o));
    // Same current epoch, higher zxid: ZooKeeper's StateSummary.isMoreRecentThan.
    let ack = QuorumPacket::with_data(pt::ACKEPOCH, z(1, 9), 1i32.to_be_bytes().to_vec());
    let out = acts(|o| leader.on_packet(2, &ack, 0, o));
    assert!(matches!(out.last(), Some(Action::GoLooking { .. })), "{out:?}");
    assert!(leader.is_stopped());
}

#[test]
fn learner_rejects_an_older_epoch_and_acks_an_already_accepted_one_with_minus_one() {
    let state = LocalState { accepted_epoch: 5, current_epoch: 4, last_zxid: z(4, 2) };
    let mut l = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut Vec::new());
    let out = acts(|o| l.on_packet(&warden_quorum::zab::codec::leader_info(4), 0, o));
    assert!(matches!(out.as_slice(), [Action::GoLooking { .. }]));
    let mut l = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut Vec::new());
    let out = acts(|o| l.on_packet(&warden_quorum::zab::codec::leader_info(5), 0, o));
    let ack = sends(&out, 1);
    assert_eq!(types(&ack), [pt::ACKEPOCH]);
    assert_eq!(ack[0].data.as_deref(), Some(&(-1i32).to_be_bytes()[..]));
}

#[test]
fn learner_rejects_a_gap_and_a_commit_it_cannot_match() {
    let mut leader = leader_with(&[z(1, 1), z(1, 2)], 0, 1);
    let (mut learner, _, sync) = handshake(&mut leader, z(1, 2), 1);
    let mut log = Vec::new();
    feed(&mut learner, &sync, &mut log);
    let out = acts(|o| learner.on_packet(&QuorumPacket::new(pt::COMMIT, z(2, 7)), 0, o));
    assert!(matches!(out.as_slice(), [Action::GoLooking { .. }]), "{out:?}");
}

/// Seed 5 of `lossy_network_keeps_committed_prefixes_in_agreement`: a DIFF stream whose txns of
/// an old epoch arrive out of order. The learner used to check contiguity only in the leader's
/// epoch, so it persisted (7,0x16) right after (7,0x13); its log kept that hole for good (a later
/// DIFF starts after its last zxid) and it lost two committed txns. Any txn that does not directly
/// follow the last one held must be refused before it is persisted.
#[test]
fn learner_refuses_a_txn_that_leaves_a_hole_in_its_log() {
    let mut leader = leader_with(&[z(1, 1), z(1, 2), z(1, 3), z(1, 4), z(1, 5)], 0, 1);
    let (mut learner, mut log, sync) = handshake(&mut leader, z(1, 2), 1);
    assert_eq!(types(&sync)[..3], [pt::DIFF, pt::PROPOSAL, pt::COMMIT]);
    feed(&mut learner, &sync[..1], &mut log);
    // (1,4) before (1,3): refused, nothing persisted.
    let out = acts(|o| learner.on_packet(&sync[3], 0, o));
    assert_eq!(sync[3].zxid, z(1, 4));
    assert!(matches!(out.as_slice(), [Action::GoLooking { .. }]), "{out:?}");
    assert_eq!(learner.last_received(), z(1, 2));

    // Across epochs: after (1,3) only (1,4) or (e,1) with e > 1 may follow.
    for (next, ok) in [(z(1, 4), true), (z(2, 1), true), (z(2, 2), false), (z(1, 5), false), (z(1, 3), false)] {
        assert_eq!(follows(z(1, 3), next), ok, "{next:#x}");
    }
    assert!(follows(0, z(1, 1)) && !follows(0, z(1, 2)));
}

/// The liveness failures of `crashes_and_resyncs_never_lose_a_committed_txn` (seeds 157, 175,
/// 299; lossy seeds 186, 209, 243): the harness silently dropped UPTODATE. The learner cannot
/// notice (the leader keeps PINGing it, as ZooKeeper's LearnerHandler does during sync), so it
/// waits forever; only a closed connection ends it. ZAB relies on the transport contract (in order,
/// once, no silent loss; a loss closes the connection), which TCP gives the real shell.
#[test]
fn a_lost_uptodate_is_noticed_only_through_the_connection_closing() {
    let mut leader = leader_with(&[z(1, 1)], 0, 1);
    let (mut learner, mut log, sync) = handshake(&mut leader, z(1, 1), 1);
    feed(&mut learner, &sync, &mut log);
    log.extend(acts(|o| learner.on_epoch_durable(EpochKind::Current, 2, o)));
    let ack = sends(&log, 1).into_iter().find(|p| p.packet_type == pt::ACK).unwrap();
    acts(|o| leader.on_packet(2, &ack, 0, o));
    let out = acts(|o| leader.on_epoch_durable(EpochKind::Current, 2, o));
    assert_eq!(types(&sends(&out, 2)), [pt::UPTODATE]); // ...lost on the way
    let tick_ms = LearnerConfig::new(2, 1, LearnerRole::Follower).tick_ms;
    for t in 1..100 {
        let now = t * tick_ms;
        let out = acts(|o| leader.on_tick(now, o));
        assert!(!leader.is_stopped());
        for p in sends(&out, 2) {
            let out = acts(|o| learner.on_packet(&p, now, o));
            let [Action::PingReply { to: 1, zxid }] = out.as_slice() else { panic!("{out:?}") };
            acts(|o| leader.on_packet(2, &codec::ping_reply(*zxid, &[]), now, o));
        }
        assert!(acts(|o| learner.on_tick(now, o)).is_empty());
        assert!(!learner.is_synced() && !learner.is_stopped());
    }
    assert!(matches!(acts(|o| learner.on_disconnect(o)).as_slice(), [Action::GoLooking { .. }]));
}

/// Found migrating a ZooKeeper 3.8 ensemble to Warden (crates/warden/tests/migration.rs): a
/// ZooKeeper leader PINGs a learner from the moment it has queued NEWLEADER, and its LearnerHandler
/// closes the connection if the learner's next packet is anything but the NEWLEADER ACK ("Next
/// packet was supposed to be an ACK, but received packet: PING"); ZooKeeper's learner does not
/// answer PINGs during sync. A PING that comes while the learner makes the synced history and
/// currentEpoch durable is answered only after the NEWLEADER ACK.
#[test]
fn a_ping_before_the_newleader_ack_is_answered_after_it() {
    let mut leader = leader_with(&[z(1, 1), z(1, 2)], 0, 1);
    let (mut learner, mut log, sync) = handshake(&mut leader, z(1, 1), 1);
    feed(&mut learner, &sync, &mut log);
    let out = acts(|o| learner.on_packet(&QuorumPacket::new(pt::PING, z(1, 2)), 0, o));
    assert!(out.is_empty(), "nothing before the NEWLEADER ACK: {out:?}");
    let mut out = acts(|o| learner.on_durable(z(1, 2), o));
    out.extend(acts(|o| learner.on_epoch_durable(EpochKind::Current, 2, o)));
    let sent: Vec<(i32, Zxid)> = out
        .iter()
        .filter_map(|a| match a {
            Action::Send { to: 1, packet } => Some((packet.packet_type, packet.zxid)),
            Action::PingReply { to: 1, zxid } => Some((pt::PING, *zxid)),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [(pt::ACK, z(2, 0)), (pt::PING, z(1, 2))], "{out:?}");
    learner.check_invariants().unwrap();
    // Once the ACK is out, a PING is answered at once.
    let out = acts(|o| learner.on_packet(&QuorumPacket::new(pt::PING, z(1, 2)), 0, o));
    assert_eq!(out, [Action::PingReply { to: 1, zxid: z(1, 2) }]);
}

/// The case the migration test met first (see `a_proposal_committed_before_it_is_durable_is_still_acked`
/// in zab_broadcast.rs): a proposal a ZooKeeper leader forwards after NEWLEADER is committed by
/// the leader and its other follower before this learner has it durable. It is ACKed all the
/// same once durable (ZooKeeper's learner logs and ACKs every proposal after NEWLEADER), while the
/// txns the sync stream committed before NEWLEADER are not.
#[test]
fn a_proposal_after_newleader_committed_before_it_is_durable_is_acked() {
    let mut leader = leader_with(&[z(1, 1), z(1, 2)], 0, 1);
    let (mut learner, mut log, sync) = handshake(&mut leader, z(1, 1), 1);
    feed(&mut learner, &sync, &mut log);
    feed(&mut learner, &[codec::proposal(&entry(z(2, 1))), QuorumPacket::new(pt::COMMIT, z(2, 1))], &mut log);
    let mut out = acts(|o| learner.on_durable(z(1, 2), o));
    out.extend(acts(|o| learner.on_epoch_durable(EpochKind::Current, 2, o)));
    out.extend(acts(|o| learner.on_durable(z(2, 1), o)));
    let acks: Vec<Zxid> = sends(&out, 1).iter().filter(|p| p.packet_type == pt::ACK).map(|p| p.zxid).collect();
    assert_eq!(acks, [z(2, 0), z(2, 1)], "the NEWLEADER ACK, then the committed proposal's: {out:?}");
    learner.check_invariants().unwrap();
    let out = acts(|o| learner.on_packet(&QuorumPacket::new(pt::UPTODATE, -1), 0, o));
    let applied: Vec<Zxid> = out
        .iter()
        .filter_map(|a| match a {
            Action::ApplyCommitted(e) => Some(e.zxid()),
            _ => None,
        })
        .collect();
    assert_eq!(applied, [z(1, 2), z(2, 1)]);
}

/// Lossy seed 1782 of zab_cluster: the harness let PROPOSAL (2,1) overtake the end of a DIFF
/// stream on the same connection, and the learner persisted (1,3) then (2,1), without the
/// committed (1,4) and (1,5). The learner cannot refuse it: counter 1 of a new epoch follows any
/// earlier zxid, and a leader whose history ended at (1,3) sends exactly that stream (new-epoch
/// proposals may come before NEWLEADER, as ZooKeeper's LearnerHandler forwards outstanding ones to
/// a late joiner). So the sync relies on in-order delivery, which TCP gives and the harness now
/// keeps; delivered in order, the same packets leave the whole history.
#[test]
fn a_new_epoch_txn_overtaking_the_diff_stream_is_indistinguishable_from_a_short_history() {
    let mut leader = leader_with(&[z(1, 1), z(1, 2), z(1, 3), z(1, 4), z(1, 5)], 0, 1);
    let (mut overtaken, mut log, sync) = handshake(&mut leader, z(1, 2), 1);
    assert_eq!(
        types(&sync),
        [pt::DIFF, pt::PROPOSAL, pt::COMMIT, pt::PROPOSAL, pt::COMMIT, pt::PROPOSAL, pt::COMMIT, pt::NEWLEADER]
    );
    let next_epoch = codec::proposal(&entry(z(2, 1)));
    // Out of order: DIFF, (1,3), then (2,1) before (1,4) and (1,5). Accepted: a hole.
    feed(&mut overtaken, &sync[..3], &mut log);
    feed(&mut overtaken, std::slice::from_ref(&next_epoch), &mut log);
    assert_eq!(overtaken.last_received(), z(2, 1));
    // In order, the same packets give the whole history, then the new epoch's txn.
    let mut leader = leader_with(&[z(1, 1), z(1, 2), z(1, 3), z(1, 4), z(1, 5)], 0, 1);
    let (mut in_order, mut log, sync) = handshake(&mut leader, z(1, 2), 1);
    feed(&mut in_order, &sync[..7], &mut log);
    feed(&mut in_order, &[next_epoch], &mut log);
    let persisted: Vec<Zxid> = log
        .iter()
        .filter_map(|a| match a {
            Action::Persist(e) => Some(e.zxid()),
            _ => None,
        })
        .collect();
    assert_eq!(persisted, [z(1, 3), z(1, 4), z(1, 5), z(2, 1)]);
}

/// What one call of a machine pushed into its caller's buffer.
fn acts<A>(call: impl FnOnce(&mut Vec<A>)) -> Vec<A> {
    let mut out = Vec::new();
    call(&mut out);
    out
}

// ----- a learner behind the in-memory history: DIFF from the on-disk log or SNAP -----

/// A leader in epoch 1 whose in-memory history is (1,51)..=(1,60) over base (1,50), with
/// `factor` as snapshotSizeFactor; learner 2 (log ending at `last`) connected and past ACKEPOCH.
/// Returns the leader and its actions after the ACKEPOCH.
fn leader_syncing(factor: f64, last: Zxid) -> (Leader, Vec<Action>) {
    let history: Vec<TxnEntry> = (51..=60).map(|c| entry(z(1, c))).collect();
    let init = LeaderInit {
        accepted_epoch: 1,
        current_epoch: 1,
        last_zxid: z(1, 60),
        history_base: z(1, 50),
        history,
        pending_config: None,
    };
    let mut cfg = LeaderConfig::new(1, [1, 2, 3]);
    cfg.snapshot_size_factor = factor;
    let mut leader = Leader::new(cfg, init, 0, &mut Vec::new()).unwrap();
    let out = connect(&mut leader, last);
    (leader, out)
}

/// Learner 2, its log ending at `last`, connects to `leader` and ACKs its epoch; the leader's
/// actions after the ACKEPOCH.
fn connect(leader: &mut Leader, last: Zxid) -> Vec<Action> {
    let state = LocalState { accepted_epoch: 1, current_epoch: 1, last_zxid: last };
    let mut out = Vec::new();
    let _ = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut out);
    acts(|o| leader.on_packet(2, &sends(&out, 1)[0], 0, o));
    acts(|o| leader.on_epoch_durable(EpochKind::Accepted, 2, o));
    let ack = QuorumPacket::with_data(pt::ACKEPOCH, last, 1i32.to_be_bytes().to_vec());
    let out = acts(|o| leader.on_packet(2, &ack, 0, o));
    leader.check_invariants().unwrap();
    out
}

fn probe(after: Zxid, found: bool, log_bytes: u64, snapshot_bytes: u64) -> LogProbe {
    LogProbe { after, found, log_bytes, snapshot_bytes }
}

#[test]
fn a_learner_within_the_in_memory_history_gets_an_in_memory_diff() {
    let (_, out) = leader_syncing(0.33, z(1, 55));
    assert!(!out.iter().any(|a| matches!(a, Action::ProbeLog { .. } | Action::SendLogDiff { .. })));
    let sync = sends(&out, 2);
    assert_eq!(types(&sync)[0], pt::DIFF);
    assert_eq!(sync[1].zxid, z(1, 56));
    assert_eq!(types(&sync).last(), Some(&pt::NEWLEADER));
}

#[test]
fn a_learner_behind_memory_is_synced_from_disk_when_the_log_holds_it_and_is_small() {
    let (mut leader, out) = leader_syncing(0.33, z(1, 10));
    // First the question to storage; nothing is sent yet.
    assert!(out.contains(&Action::ProbeLog { to: 2, after: z(1, 10) }), "{out:?}");
    assert!(sends(&out, 2).is_empty());
    assert_eq!(leader.gauges().syncing, 0);
    // 300 bytes of later log files against a 1000-byte snapshot: within 0.33.
    let out = acts(|o| leader.on_log_probe(2, probe(z(1, 10), true, 300, 1000), o));
    leader.check_invariants().unwrap();
    // DIFF, the on-disk part (10, 50], then the in-memory history (50, 60], then NEWLEADER.
    let diff = out.iter().position(|a| matches!(a, Action::Send { packet, .. } if packet.packet_type == pt::DIFF));
    let disk = out.iter().position(|a| *a == Action::SendLogDiff { to: 2, after: z(1, 10), upto: z(1, 50) });
    let (diff, disk) = (diff.expect("DIFF"), disk.expect("SendLogDiff"));
    assert_eq!(disk, diff + 1, "the disk part right after the DIFF packet: {out:?}");
    let after: Vec<QuorumPacket> = sends(&out[disk..], 2);
    assert_eq!(after.len(), 21, "ten PROPOSAL + COMMIT pairs, then NEWLEADER");
    assert_eq!((after[0].packet_type, after[0].zxid), (pt::PROPOSAL, z(1, 51)));
    assert_eq!(after[20].packet_type, pt::NEWLEADER);

    // A learner fed exactly that stream (the disk part as the shell writes it) accepts it.
    let state = LocalState { accepted_epoch: 2, current_epoch: 1, last_zxid: z(1, 10) };
    let mut learner = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut Vec::new());
    let li = QuorumPacket::with_data(pt::LEADERINFO, make_zxid(2, 0), 0x10000i32.to_be_bytes().to_vec());
    acts(|o| learner.on_packet(&li, 0, o));
    let mut stream = vec![QuorumPacket::new(pt::DIFF, z(1, 60))];
    for c in 11..=50 {
        stream.push(codec::proposal(&entry(z(1, c))));
        stream.push(QuorumPacket::new(pt::COMMIT, z(1, c)));
    }
    stream.extend(after);
    let mut log = Vec::new();
    for p in &stream {
        let out = acts(|o| learner.on_packet(p, 0, o));
        assert!(!out.iter().any(|a| matches!(a, Action::GoLooking { .. })), "{out:?}");
        log.extend(out);
    }
    let persisted: Vec<Zxid> =
        log.iter().filter_map(|a| if let Action::Persist(e) = a { Some(e.zxid()) } else { None }).collect();
    assert_eq!(persisted, (11..=60).map(|c| z(1, c)).collect::<Vec<_>>());
}

#[test]
fn a_log_larger_than_the_factor_allows_or_missing_the_zxid_gets_a_snapshot() {
    // 400 bytes after the learner's file against a 1000-byte snapshot at 0.33: too large.
    let (mut leader, _) = leader_syncing(0.33, z(1, 10));
    let out = acts(|o| leader.on_log_probe(2, probe(z(1, 10), true, 400, 1000), o));
    assert_eq!(types(&sends(&out, 2)), [pt::SNAP, pt::NEWLEADER]);
    assert!(out.contains(&Action::SendSnapshot { to: 2, zxid: z(1, 60) }));
    assert!(!out.iter().any(|a| matches!(a, Action::SendLogDiff { .. })));

    // The log does not hold the learner's zxid.
    let (mut leader, _) = leader_syncing(0.33, z(1, 10));
    let out = acts(|o| leader.on_log_probe(2, probe(z(1, 10), false, 0, 1000), o));
    assert_eq!(types(&sends(&out, 2)), [pt::SNAP, pt::NEWLEADER]);

    // As ZooKeeper: no snapshot (limit 0) means no size limit.
    let (mut leader, _) = leader_syncing(0.33, z(1, 10));
    let out = acts(|o| leader.on_log_probe(2, probe(z(1, 10), true, 1 << 40, 0), o));
    assert_eq!(types(&sends(&out, 2))[0], pt::DIFF);

    // An answer about another zxid (an older connection's) is ignored.
    let (mut leader, _) = leader_syncing(0.33, z(1, 10));
    let out = acts(|o| leader.on_log_probe(2, probe(z(1, 9), true, 0, 1000), o));
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_negative_factor_disables_the_diff_from_disk() {
    let (_, out) = leader_syncing(-1.0, z(1, 10));
    assert!(!out.iter().any(|a| matches!(a, Action::ProbeLog { .. })));
    assert_eq!(types(&sends(&out, 2)), [pt::SNAP, pt::NEWLEADER]);
}

#[test]
fn a_failed_disk_stream_disconnects_and_the_next_sync_is_a_snapshot() {
    let (mut leader, _) = leader_syncing(0.33, z(1, 10));
    acts(|o| leader.on_log_probe(2, probe(z(1, 10), true, 0, 1000), o));
    let out = acts(|o| leader.on_log_diff_failed(2, o));
    assert!(out.iter().any(|a| matches!(a, Action::Disconnect { sid: 2, .. })), "{out:?}");
    leader.check_invariants().unwrap();
    // The learner reconnects: SNAP without asking storage again.
    let out = connect(&mut leader, z(1, 10));
    assert!(!out.iter().any(|a| matches!(a, Action::ProbeLog { .. })), "{out:?}");
    assert_eq!(types(&sends(&out, 2)), [pt::SNAP, pt::NEWLEADER]);
}
