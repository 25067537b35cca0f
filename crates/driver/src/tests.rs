//! The driver's decisions, on a real node with storage answered by hand.

use warden_node::{NodeConfig, QuorumSetup};
use warden_proto::request::{CreateRequest, Request};
use warden_proto::{Acl, ConnectRequest};

use super::*;

fn clock() -> Clock {
    Clock { mono_ms: 1_000, wall_ms: 1_700_000_000_000 }
}

fn standalone(snap_count: u64) -> Driver {
    let node = Node::new(NodeConfig::default(), clock());
    Driver::new(node, DriverConfig { my_sid: None, snap_count, seed: 7, durable_chunk: DURABLE_CHUNK })
}

fn create(path: &str) -> Request {
    Request::Create(CreateRequest { path: path.into(), data: Some(b"x".to_vec()), acl: Acl::open_unsafe(), flags: 0 })
}

fn connect(d: &mut Driver, conn: u64) {
    let req = ConnectRequest { timeout_ms: 10_000, passwd: vec![0; 16], read_only: Some(false), ..Default::default() };
    let mut cmds = Vec::new();
    d.step(
        clock(),
        Event::Node(Input::Connect { conn, addr: "127.0.0.1:1".parse().unwrap(), req, x509: None }),
        &mut cmds,
    );
    d.end_turn(clock(), &mut cmds);
    sync_all(d, cmds);
}

/// Carries out every storage op as a storage that syncs at once; returns the other commands.
fn sync_all(d: &mut Driver, mut cmds: Vec<Command>) -> Vec<Command> {
    let mut rest = Vec::new();
    while !cmds.is_empty() {
        let mut next = Vec::new();
        for c in cmds {
            match c {
                Command::Store { op: StoreOp::Append(batch), .. } => {
                    let last = batch.last().map(|(h, _)| h.zxid);
                    d.step(clock(), Event::Synced(Report { last, ..Report::default() }), &mut next);
                    while d.unapplied() {
                        d.apply_chunk(clock(), &mut next);
                    }
                }
                other => rest.push(other),
            }
        }
        d.end_turn(clock(), &mut next);
        cmds = next;
    }
    rest
}

fn replies(cmds: &[Command]) -> usize {
    cmds.iter().filter(|c| matches!(c, Command::Send { completes_request: true, .. })).count()
}

#[test]
fn durable_txns_are_stepped_a_chunk_at_a_time() {
    assert_eq!(durable_chunk_end(100, 100, 300, DURABLE_CHUNK), Some(100 + DURABLE_CHUNK));
    assert_eq!(
        durable_chunk_end(100 + DURABLE_CHUNK, 100 + DURABLE_CHUNK, 300, DURABLE_CHUNK),
        Some(100 + 2 * DURABLE_CHUNK)
    );
    assert_eq!(durable_chunk_end(290, 290, 300, DURABLE_CHUNK), Some(300), "the last chunk ends at what is durable");
    assert_eq!(durable_chunk_end(300, 300, 300, DURABLE_CHUNK), None);
    // Restored or processed beyond what was stepped: the chunk starts there.
    assert_eq!(durable_chunk_end(0, 5000, 5010, DURABLE_CHUNK), Some(5010));
    assert_eq!(durable_chunk_end(0, 5000, 5000, DURABLE_CHUNK), Some(5000));
    assert_eq!(durable_chunk_end(5000, 5000, 4000, DURABLE_CHUNK), None);
}

#[test]
fn only_a_session_writing_twice_in_a_row_is_a_lone_writer() {
    let batch = |sessions: &[i64]| -> Batch {
        let txn = Arc::new(Txn::Check { path: "/x".into(), version: -1 });
        sessions
            .iter()
            .map(|&client_id| (TxnHeader { client_id, cxid: 0, zxid: 1, time_ms: 0, txn_type: 13 }, txn.clone()))
            .collect()
    };
    let mut last = None;
    assert!(!lone_writer(&batch(&[7]), &mut last), "a first batch has no predecessor");
    assert!(lone_writer(&batch(&[7]), &mut last));
    assert!(lone_writer(&batch(&[7, 7]), &mut last));
    assert!(!lone_writer(&batch(&[8]), &mut last), "another session");
    assert!(!lone_writer(&batch(&[7]), &mut last), "the one before was 8's");
    assert!(!lone_writer(&batch(&[7, 8]), &mut last), "two sessions in one batch");
    assert_eq!(last, None);
    assert!(!lone_writer(&batch(&[7]), &mut last), "after a mixed batch");
    assert!(!lone_writer(&batch(&[]), &mut last));
    assert_eq!(last, None);
}

/// Persisted txns of one turn go to storage as one append, after the turn; replies wait for
/// `Synced`, and a large one is applied a chunk at a time.
#[test]
fn a_turns_writes_are_one_append_and_replies_wait_for_the_sync() {
    let mut d = standalone(100_000);
    connect(&mut d, 1);
    let mut cmds = Vec::new();
    for i in 0..200 {
        d.step(clock(), Event::Node(Input::Request { conn: 1, xid: i + 1, req: create(&format!("/n{i}")) }), &mut cmds);
    }
    assert!(cmds.is_empty(), "nothing before the turn ends: {cmds:?}");
    d.end_turn(clock(), &mut cmds);
    let [Command::Store { op: StoreOp::Append(batch), may_inline }] = &cmds[..] else { panic!("{cmds:?}") };
    assert_eq!(batch.len(), 200);
    assert!(may_inline, "the session also wrote the batch before (its createSession)");
    let last = batch.last().unwrap().0.zxid;
    d.check_invariants().unwrap();

    let mut cmds = Vec::new();
    d.step(clock(), Event::Synced(Report { last: Some(last), ..Report::default() }), &mut cmds);
    assert_eq!(replies(&cmds), DURABLE_CHUNK as usize, "the first chunk only");
    let mut chunks = 1;
    while d.unapplied() {
        d.apply_chunk(clock(), &mut cmds);
        chunks += 1;
        d.check_invariants().unwrap();
    }
    assert_eq!((replies(&cmds), chunks), (200, 4));

    // The same session writes again: a lone writer's batch may be appended inline.
    let mut cmds = Vec::new();
    d.step(clock(), Event::Node(Input::Request { conn: 1, xid: 500, req: create("/again") }), &mut cmds);
    d.end_turn(clock(), &mut cmds);
    assert!(matches!(cmds[..], [Command::Store { may_inline: true, .. }]), "{cmds:?}");
}

/// Every [snapCount/2+1, snapCount] txns the log rolls and the tree goes to the snapshot writer;
/// a restore without a current snapshot takes one at once.
#[test]
fn snapshots_follow_the_jittered_interval() {
    let mut d = standalone(20);
    let mut cmds = Vec::new();
    d.restore(DataTree::new(), &[], Vec::new(), None, &mut cmds);
    assert!(
        matches!(&cmds[..], [Command::Store { op: StoreOp::Roll, .. }, Command::Snapshot { zxid: 0, .. }]),
        "{cmds:?}"
    );
    let mut cmds = Vec::new();
    d.restore(DataTree::new(), &[], Vec::new(), Some(0), &mut cmds);
    assert!(cmds.is_empty(), "the snapshot is current: {cmds:?}");
    connect(&mut d, 1);
    let mut taken = Vec::new();
    for i in 0..100 {
        let mut cmds = Vec::new();
        d.step(clock(), Event::Node(Input::Request { conn: 1, xid: i + 1, req: create(&format!("/n{i}")) }), &mut cmds);
        d.end_turn(clock(), &mut cmds);
        for c in sync_all(&mut d, cmds) {
            if let Command::Snapshot { zxid, tree, .. } = c {
                assert_eq!(tree.last_processed_zxid(), zxid);
                taken.push(zxid);
            }
        }
    }
    assert!(taken.len() >= 4, "{taken:?}");
    for w in taken.windows(2) {
        assert!((11..=20).contains(&(w[1] - w[0])), "interval {} outside [11, 20]: {taken:?}", w[1] - w[0]);
    }
    let mut policy = SnapshotPolicy::new(1000, 1);
    let counts: std::collections::BTreeSet<i64> = (0..2000).map(|_| policy.next_threshold()).collect();
    assert!(counts.first() >= Some(&501) && counts.last() <= Some(&1000) && counts.len() > 300, "{counts:?}");
}

/// The admin `restore`: refused while a write is on its way to disk; then the snapshot replaces
/// the data, every connection is closed, storage installs it behind what came before, and the
/// next write follows its zxid. An ensemble member refuses.
#[test]
fn a_restored_snapshot_replaces_the_data_and_goes_to_storage() {
    let mut d = standalone(100_000);
    connect(&mut d, 1);
    let mut cmds = Vec::new();
    d.step(clock(), Event::Node(Input::Request { conn: 1, xid: 1, req: create("/old") }), &mut cmds);
    d.end_turn(clock(), &mut cmds);
    let mut other = DataTree::new();
    let hdr = TxnHeader { client_id: 7, cxid: 1, zxid: 0x500, time_ms: 1, txn_type: 1 };
    let txn = Txn::Create {
        path: "/restored".into(),
        data: Some(b"r".to_vec()),
        acl: Acl::open_unsafe(),
        ephemeral: false,
        parent_cversion: 1,
    };
    other.apply(&hdr, &txn);
    let snapshot = || SnapshotData { zxid: 0x500, tree: Box::new(other.clone()), sessions: vec![(7, 4000)] };
    let mut out = Vec::new();
    assert_eq!(d.replace_data(snapshot(), &mut out), Err(RestoreRefused::WritesInFlight));
    assert!(out.is_empty());
    sync_all(&mut d, cmds);

    let mut cmds = Vec::new();
    d.replace_data(snapshot(), &mut cmds).expect("an idle standalone server restores");
    assert!(matches!(cmds[0], Command::Close { conn: 1 }), "{cmds:?}");
    let Command::Store { op: StoreOp::Install { zxid: 0x500, ref sessions, .. }, .. } = cmds[1] else {
        panic!("{cmds:?}")
    };
    assert_eq!(sessions, &[(7, 4000)]);
    assert!(d.node().tree().node("/old").is_none() && d.node().tree().node("/restored").is_some());
    d.check_invariants().unwrap();
    // A new client's session is the next txn.
    connect(&mut d, 2);
    assert_eq!(d.node().last_processed_zxid(), 0x501);

    let node = Node::new_quorum(NodeConfig::default(), QuorumSetup::new(1, [1, 2, 3]), clock());
    let mut member =
        Driver::new(node, DriverConfig { my_sid: Some(1), snap_count: 100, seed: 7, durable_chunk: DURABLE_CHUNK });
    assert_eq!(member.replace_data(snapshot(), &mut Vec::new()), Err(RestoreRefused::Ensemble));
}
