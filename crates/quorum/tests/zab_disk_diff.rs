//! The leader's choice for a learner behind its in-memory history: DIFF read from the on-disk
//! log (asked of storage with `Action::ProbeLog`, streamed by the shell for `SendLogDiff`) or
//! SNAP, as ZooKeeper's `LearnerHandler.syncFollower` with `snapshotSizeFactor`.

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

fn z(c: i64) -> Zxid {
    make_zxid(1, c)
}

fn acts(call: impl FnOnce(&mut Vec<Action>)) -> Vec<Action> {
    let mut out = Vec::new();
    call(&mut out);
    out
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

/// A leader in epoch 1 whose in-memory history is (1,51)..=(1,60) over base (1,50), with
/// `factor` as snapshotSizeFactor; learner 2 (log ending at `last`) connected and past ACKEPOCH.
/// Returns the leader and its actions after the ACKEPOCH.
fn leader_syncing(factor: f64, last: Zxid) -> (Leader, Vec<Action>) {
    let history: Vec<TxnEntry> = (51..=60).map(|c| entry(z(c))).collect();
    let init = LeaderInit {
        accepted_epoch: 1,
        current_epoch: 1,
        last_zxid: z(60),
        history_base: z(50),
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
    let (_, out) = leader_syncing(0.33, z(55));
    assert!(!out.iter().any(|a| matches!(a, Action::ProbeLog { .. } | Action::SendLogDiff { .. })));
    let sync = sends(&out, 2);
    assert_eq!(types(&sync)[0], pt::DIFF);
    assert_eq!(sync[1].zxid, z(56));
    assert_eq!(types(&sync).last(), Some(&pt::NEWLEADER));
}

#[test]
fn a_learner_behind_memory_is_synced_from_disk_when_the_log_holds_it_and_is_small() {
    let (mut leader, out) = leader_syncing(0.33, z(10));
    // First the question to storage; nothing is sent yet.
    assert!(out.contains(&Action::ProbeLog { to: 2, after: z(10) }), "{out:?}");
    assert!(sends(&out, 2).is_empty());
    assert_eq!(leader.gauges().syncing, 0);
    // 300 bytes of later log files against a 1000-byte snapshot: within 0.33.
    let out = acts(|o| leader.on_log_probe(2, probe(z(10), true, 300, 1000), o));
    leader.check_invariants().unwrap();
    // DIFF, the on-disk part (10, 50], then the in-memory history (50, 60], then NEWLEADER.
    let diff = out.iter().position(|a| matches!(a, Action::Send { packet, .. } if packet.packet_type == pt::DIFF));
    let disk = out.iter().position(|a| *a == Action::SendLogDiff { to: 2, after: z(10), upto: z(50) });
    let (diff, disk) = (diff.expect("DIFF"), disk.expect("SendLogDiff"));
    assert_eq!(disk, diff + 1, "the disk part right after the DIFF packet: {out:?}");
    let after: Vec<QuorumPacket> = sends(&out[disk..], 2);
    assert_eq!(after.len(), 21, "ten PROPOSAL + COMMIT pairs, then NEWLEADER");
    assert_eq!((after[0].packet_type, after[0].zxid), (pt::PROPOSAL, z(51)));
    assert_eq!(after[20].packet_type, pt::NEWLEADER);

    // A learner fed exactly that stream (the disk part as the shell writes it) accepts it.
    let state = LocalState { accepted_epoch: 2, current_epoch: 1, last_zxid: z(10) };
    let mut learner = Learner::new(LearnerConfig::new(2, 1, LearnerRole::Follower), state, 0, &mut Vec::new());
    let li = QuorumPacket::with_data(pt::LEADERINFO, make_zxid(2, 0), 0x10000i32.to_be_bytes().to_vec());
    acts(|o| learner.on_packet(&li, 0, o));
    let mut stream = vec![QuorumPacket::new(pt::DIFF, z(60))];
    for c in 11..=50 {
        stream.push(codec::proposal(&entry(z(c))));
        stream.push(QuorumPacket::new(pt::COMMIT, z(c)));
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
    assert_eq!(persisted, (11..=60).map(z).collect::<Vec<_>>());
}

#[test]
fn a_log_larger_than_the_factor_allows_or_missing_the_zxid_gets_a_snapshot() {
    // 400 bytes after the learner's file against a 1000-byte snapshot at 0.33: too large.
    let (mut leader, _) = leader_syncing(0.33, z(10));
    let out = acts(|o| leader.on_log_probe(2, probe(z(10), true, 400, 1000), o));
    assert_eq!(types(&sends(&out, 2)), [pt::SNAP, pt::NEWLEADER]);
    assert!(out.contains(&Action::SendSnapshot { to: 2, zxid: z(60) }));
    assert!(!out.iter().any(|a| matches!(a, Action::SendLogDiff { .. })));

    // The log does not hold the learner's zxid.
    let (mut leader, _) = leader_syncing(0.33, z(10));
    let out = acts(|o| leader.on_log_probe(2, probe(z(10), false, 0, 1000), o));
    assert_eq!(types(&sends(&out, 2)), [pt::SNAP, pt::NEWLEADER]);

    // As ZooKeeper: no snapshot (limit 0) means no size limit.
    let (mut leader, _) = leader_syncing(0.33, z(10));
    let out = acts(|o| leader.on_log_probe(2, probe(z(10), true, 1 << 40, 0), o));
    assert_eq!(types(&sends(&out, 2))[0], pt::DIFF);

    // An answer about another zxid (an older connection's) is ignored.
    let (mut leader, _) = leader_syncing(0.33, z(10));
    let out = acts(|o| leader.on_log_probe(2, probe(z(9), true, 0, 1000), o));
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_negative_factor_disables_the_diff_from_disk() {
    let (_, out) = leader_syncing(-1.0, z(10));
    assert!(!out.iter().any(|a| matches!(a, Action::ProbeLog { .. })));
    assert_eq!(types(&sends(&out, 2)), [pt::SNAP, pt::NEWLEADER]);
}

#[test]
fn a_failed_disk_stream_disconnects_and_the_next_sync_is_a_snapshot() {
    let (mut leader, _) = leader_syncing(0.33, z(10));
    acts(|o| leader.on_log_probe(2, probe(z(10), true, 0, 1000), o));
    let out = acts(|o| leader.on_log_diff_failed(2, o));
    assert!(out.iter().any(|a| matches!(a, Action::Disconnect { sid: 2, .. })), "{out:?}");
    leader.check_invariants().unwrap();
    // The learner reconnects: SNAP without asking storage again.
    let out = connect(&mut leader, z(10));
    assert!(!out.iter().any(|a| matches!(a, Action::ProbeLog { .. })), "{out:?}");
    assert_eq!(types(&sends(&out, 2)), [pt::SNAP, pt::NEWLEADER]);
}
