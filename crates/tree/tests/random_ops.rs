//! Random scripts: invariants hold after every step, and every txn Prep accepts applies cleanly
//! even when several are pipelined before applying.

mod common;
use common::*;
use proptest::prelude::*;
use warden_proto::{Acl, Txn, TxnHeader};
use warden_tree::{AddWatchMode, CreateKind, TxnResult, WriteOp};

const PATHS: [&str; 7] = ["/a", "/a/b", "/a/b/c", "/d", "/a/", "/d/e", "/zookeeper/quota/a"];

#[derive(Debug, Clone)]
enum Step {
    Write(i64, WriteOp),
    Close(i64),
    Watch(u64, usize, u8),
    DropConn(u64),
    Flush,
}

fn op_strategy() -> impl Strategy<Value = WriteOp> {
    let path = (0..PATHS.len()).prop_map(|i| PATHS[i].to_string());
    let leaf = prop_oneof![
        (path.clone(), 0..7i32, any::<bool>()).prop_map(|(path, flags, data)| {
            let kind = if flags >= 5 { CreateKind::Ttl(100) } else { CreateKind::Regular };
            WriteOp::Create { path, data: data.then(|| b"xy".to_vec()), acl: Acl::open_unsafe(), flags, kind }
        }),
        (path.clone(), -1..2i32).prop_map(|(path, version)| WriteOp::Delete { path, version }),
        path.clone().prop_map(|path| WriteOp::DeleteContainer { path }),
        (path.clone(), -1..2i32).prop_map(|(path, version)| WriteOp::SetData {
            path,
            data: Some(vec![1; 3].into()),
            version
        }),
        (path.clone(), -1..2i32).prop_map(|(path, version)| WriteOp::Check { path, version }),
    ];
    prop_oneof![4 => leaf.clone(), 1 => prop::collection::vec(leaf, 0..4).prop_map(WriteOp::Multi)]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (1..4i64, op_strategy()).prop_map(|(s, op)| Step::Write(s, op)),
        1 => (1..4i64).prop_map(Step::Close),
        2 => (1..4u64, 0..PATHS.len(), 0..4u8).prop_map(|(c, p, k)| Step::Watch(c, p, k)),
        1 => (1..4u64).prop_map(Step::DropConn),
        2 => Just(Step::Flush),
    ]
}

fn has_prep_error(t: &Txn) -> bool {
    matches!(t, Txn::Multi(subs) if subs.iter().any(|s| matches!(s, Txn::Error { .. })))
}

fn flush(h: &mut Harness, queue: &mut Vec<(TxnHeader, Txn)>) {
    for (hdr, txn) in queue.drain(..) {
        let r = h.apply(&hdr, &txn);
        if !has_prep_error(&txn) {
            assert!(r.err() == warden_proto::ErrorCode::Ok, "prepped txn failed to apply: {txn:?} -> {r:?}");
            if let TxnResult::Multi(rs) = &r {
                assert!(rs.iter().all(|x| !matches!(x, TxnResult::Error(_))));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn invariants_hold(steps in prop::collection::vec(step_strategy(), 1..60)) {
        let mut h = Harness::new();
        let mut queue = Vec::new();
        for step in steps {
            match step {
                Step::Write(s, op) => {
                    if let Ok(p) = h.prep_only(s, &op) {
                        queue.push(p);
                    }
                }
                Step::Close(s) => {
                    h.zxid += 1;
                    let txn = h.prep.prep_close_session(&h.tree, s, h.zxid);
                    queue.push((h.header(s, h.zxid, &txn), txn));
                }
                Step::Watch(c, p, k) => match k {
                    0 => h.watches.add_data_watch(c, PATHS[p]),
                    1 => h.watches.add_child_watch(c, PATHS[p]),
                    2 => h.watches.add_watch(c, PATHS[p], AddWatchMode::Persistent),
                    _ => h.watches.add_watch(c, PATHS[p], AddWatchMode::PersistentRecursive),
                },
                Step::DropConn(c) => h.watches.remove_connection(c),
                Step::Flush => flush(&mut h, &mut queue),
            }
            h.check();
        }
        flush(&mut h, &mut queue);
        prop_assert_eq!(h.prep.pending_count(), 0);
        for s in 1..4 {
            for p in h.tree.ephemerals(s) {
                prop_assert_eq!(h.tree.node(&p).map(|n| n.stat.ephemeral_owner), Some(s));
            }
        }
    }
}
