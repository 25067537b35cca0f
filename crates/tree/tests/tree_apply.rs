//! DataTree scripts: Stats, names, results and events of applied txns.

mod common;
use common::*;
use warden_proto::{Acl, ErrorCode, Stat, Txn, TxnHeader};
use warden_tree::{CreateKind, DataTree, TreeEventKind, TxnResult, WriteOp};

fn hdr(zxid: i64, time_ms: i64, client_id: i64) -> TxnHeader {
    TxnHeader { client_id, cxid: 0, zxid, time_ms, txn_type: 0 }
}

#[test]
fn initial_tree() {
    let t = DataTree::new();
    assert_eq!(t.children("/").unwrap(), vec!["zookeeper"]);
    assert_eq!(t.children("/zookeeper").unwrap(), vec!["config", "quota"]);
    // Client cversion = 2 * 0 - numChildren, as ZooKeeper shows for a fresh root.
    assert_eq!(t.stat("/").unwrap(), Stat { cversion: -1, num_children: 1, ..Stat::default() });
    assert_eq!(t.stat("/zookeeper").unwrap().cversion, -2);
    assert_eq!(t.stat("/zookeeper/quota").unwrap(), Stat::default());
    assert_eq!(t.node("/zookeeper/config").unwrap().acl.to_vec(), Acl::read_unsafe());
    assert_eq!(t.node("/zookeeper").unwrap().acl.to_vec(), Acl::open_unsafe());
    assert_eq!(t.node("/zookeeper/config").unwrap().data.as_deref(), Some(&[][..]));
    assert_eq!(t.all_children_number("/"), Some(3));
    assert_eq!(t.all_children_number("/zookeeper"), Some(2));
    assert_eq!(t.all_children_number("/nope"), None);
    assert_eq!(t.node_count(), 5);
    assert_eq!(
        t.approximate_data_size(),
        ("/".len() + "/zookeeper".len() + "/zookeeper/quota".len() + "/zookeeper/config".len()) as u64
    );
    t.check_invariants().unwrap();
}

#[test]
fn create_stat_and_cversion_arithmetic() {
    let mut h = Harness::new();
    h.time_ms = 5000;
    let r = h.write(7, create_data("/a", 0, b"hello")).unwrap();
    let stat = Stat {
        czxid: 1,
        mzxid: 1,
        ctime: 5000,
        mtime: 5000,
        version: 0,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: 0,
        data_length: 5,
        num_children: 0,
        pzxid: 1,
    };
    assert_eq!(r, TxnResult::Created { path: "/a".into(), stat });
    h.write(7, create("/a/b", 0)).unwrap();
    h.write(7, create("/a/c", 0)).unwrap();
    assert_eq!(h.tree.node("/a").unwrap().stat.cversion, 2);
    let s = h.tree.stat("/a").unwrap();
    assert_eq!((s.cversion, s.num_children, s.pzxid), (2, 2, 3));
    h.write(7, delete("/a/b", -1)).unwrap();
    let s = h.tree.stat("/a").unwrap();
    // 2 * 2 - 1: +1 per create and per delete.
    assert_eq!((s.cversion, s.num_children, s.pzxid), (3, 1, 4));
    assert_eq!(h.tree.node("/a").unwrap().stat.cversion, 2);
    h.time_ms = 6000;
    let r = h.write(7, set_data("/a", b"xy", 0)).unwrap();
    let TxnResult::SetData { stat } = r else { panic!() };
    assert_eq!((stat.version, stat.mzxid, stat.mtime, stat.ctime, stat.data_length), (1, 5, 6000, 5000, 2));
    let r = h.write(7, WriteOp::SetAcl { path: "/a".into(), acl: Acl::read_unsafe(), version: 0 }).unwrap();
    let TxnResult::SetAcl { stat } = r else { panic!() };
    assert_eq!((stat.aversion, stat.mzxid, stat.version), (1, 5, 1));
    assert_eq!(h.tree.last_processed_zxid(), 6);
}

#[test]
fn null_and_empty_data_are_distinct() {
    let mut h = Harness::new();
    h.write(
        1,
        WriteOp::Create { path: "/n".into(), data: None, acl: Acl::open_unsafe(), flags: 0, kind: CreateKind::Regular },
    )
    .unwrap();
    h.write(1, create("/e", 0)).unwrap();
    assert_eq!(h.tree.node("/n").unwrap().data, None);
    assert_eq!(h.tree.node("/e").unwrap().data.as_deref(), Some(&[][..]));
    assert_eq!(h.tree.stat("/n").unwrap().data_length, 0);
}

#[test]
fn events_of_each_txn() {
    let mut t = DataTree::new();
    let c =
        Txn::Create { path: "/a".into(), data: None, acl: Acl::open_unsafe(), ephemeral: false, parent_cversion: 1 };
    let out = t.apply(&hdr(1, 0, 0), &c);
    let kinds: Vec<_> = out.events.iter().map(|e| (&*e.path, e.kind, e.zxid)).collect();
    assert_eq!(kinds, vec![("/a", TreeEventKind::Created, 1), ("/", TreeEventKind::ChildrenChanged, 1)]);
    let out = t.apply(&hdr(2, 0, 0), &Txn::SetData { path: "/a".into(), data: None, version: 1 });
    assert_eq!(out.events.len(), 1);
    assert_eq!(out.events[0].kind, TreeEventKind::DataChanged);
    let out = t.apply(&hdr(3, 0, 0), &Txn::SetAcl { path: "/a".into(), acl: Acl::read_unsafe(), version: 1 });
    assert!(out.events.is_empty());
    let out = t.apply(&hdr(4, 0, 0), &Txn::Delete { path: "/a".into() });
    let kinds: Vec<_> = out.events.iter().map(|e| (&*e.path, e.kind)).collect();
    assert_eq!(kinds, vec![("/a", TreeEventKind::Deleted), ("/", TreeEventKind::ChildrenChanged)]);
    assert_eq!(*out.events[0].acl, *Acl::read_unsafe(), "deleted node's ACL travels with the event");
}

#[test]
fn txns_that_do_not_fit_yield_errors() {
    let mut t = DataTree::new();
    let mk = |p: &str| Txn::Create { path: p.into(), data: None, acl: vec![], ephemeral: false, parent_cversion: -1 };
    let (count, size) = (t.znode_count(), t.approximate_data_size());
    assert_eq!(t.apply(&hdr(1, 0, 0), &mk("/x/y")).result, TxnResult::Error(ErrorCode::NoNode));
    // The create under a missing parent left nothing behind.
    assert!(t.node("/x/y").is_none());
    assert_eq!((t.znode_count(), t.approximate_data_size()), (count, size));
    assert_eq!(t.apply(&hdr(2, 0, 0), &mk("/zookeeper")).result, TxnResult::Error(ErrorCode::NodeExists));
    // The node that was there stays as it was.
    let kept = t.node("/zookeeper").unwrap();
    assert_eq!((kept.stat.czxid, kept.num_children), (0, 2));
    assert_eq!(t.apply(&hdr(3, 0, 0), &Txn::Delete { path: "/x".into() }).result, TxnResult::Error(ErrorCode::NoNode));
    assert_eq!(
        t.apply(&hdr(4, 0, 0), &Txn::Delete { path: "/zookeeper".into() }).result,
        TxnResult::Error(ErrorCode::NotEmpty)
    );
    assert_eq!(
        t.apply(&hdr(5, 0, 0), &Txn::SetData { path: "/x".into(), data: None, version: 1 }).result,
        TxnResult::Error(ErrorCode::NoNode)
    );
    assert_eq!(t.apply(&hdr(6, 0, 0), &Txn::Error { err: -101 }).result, TxnResult::Error(ErrorCode::NoNode));
    assert_eq!(t.last_processed_zxid(), 6);
    // The NODEEXISTS create above still moved the parent's cversion (replay over a fuzzy
    // snapshot), and parentCVersion -1 (legacy CreateTxnV0) means parent cversion + 1.
    assert_eq!(t.node("/").unwrap().stat.cversion, 1);
    t.apply(&hdr(7, 0, 0), &mk("/v0"));
    assert_eq!(t.node("/").unwrap().stat.cversion, 2);
    t.check_invariants().unwrap();
}

#[test]
fn multi_apply_is_all_or_nothing() {
    let mut t = DataTree::new();
    let create = |p: &str| Txn::Create {
        path: p.into(),
        data: None,
        acl: Acl::open_unsafe(),
        ephemeral: false,
        parent_cversion: -1,
    };
    let bad = Txn::Multi(vec![
        create("/a"),
        Txn::Error { err: ErrorCode::NoNode.code() },
        Txn::Error { err: -2 },
        create("/b"),
    ]);
    let out = t.apply(&hdr(1, 0, 0), &bad);
    assert_eq!(
        out.result,
        TxnResult::Multi(vec![
            TxnResult::Error(ErrorCode::Ok),
            TxnResult::Error(ErrorCode::NoNode),
            TxnResult::Error(ErrorCode::RuntimeInconsistency),
            TxnResult::Error(ErrorCode::RuntimeInconsistency),
        ])
    );
    assert_eq!(out.result.err(), ErrorCode::NoNode);
    assert!(out.events.is_empty());
    assert!(t.node("/a").is_none());
    let good = Txn::Multi(vec![create("/a"), create("/a/b"), Txn::Check { path: "/a".into(), version: 1 }]);
    let out = t.apply(&hdr(2, 0, 0), &good);
    let TxnResult::Multi(rs) = &out.result else { panic!() };
    assert!(matches!(rs[0], TxnResult::Created { .. }));
    assert_eq!(rs[2], TxnResult::Check);
    assert_eq!(out.events.len(), 4);
    assert_eq!(t.stat("/a/b").unwrap().czxid, 2);
}

#[test]
fn ephemeral_container_ttl_owners() {
    let mut h = Harness::new();
    h.write(0x55, create("/e", 1)).unwrap();
    h.write(0x55, create("/c", 4)).unwrap();
    h.write(
        0x55,
        WriteOp::Create {
            path: "/t".into(),
            data: None,
            acl: Acl::open_unsafe(),
            flags: 5,
            kind: CreateKind::Ttl(100),
        },
    )
    .unwrap();
    assert_eq!(h.tree.stat("/e").unwrap().ephemeral_owner, 0x55);
    assert_eq!(h.tree.node("/c").unwrap().stat.ephemeral_owner, i64::MIN);
    assert_eq!(h.tree.stat("/c").unwrap().ephemeral_owner, 0);
    assert_eq!(h.tree.node("/t").unwrap().stat.ephemeral_owner as u64, 0xFF00_0000_0000_0064);
    assert_eq!(h.tree.stat("/t").unwrap().ephemeral_owner, 0);
    assert_eq!(h.tree.ephemerals(0x55), vec!["/e"]);
    assert_eq!(h.tree.sessions_with_ephemerals(), vec![0x55]);
}

#[test]
fn close_session_deletes_ephemerals_with_events() {
    let mut h = Harness::new();
    h.write(1, create("/p", 0)).unwrap();
    h.write(9, create("/p/e1", 1)).unwrap();
    h.write(9, create("/e2", 1)).unwrap();
    h.write(8, create("/other", 1)).unwrap();
    h.watches.add_data_watch(100, "/p/e1");
    h.watches.add_child_watch(100, "/p");
    assert_eq!(h.close_session(9), TxnResult::SessionClosed);
    assert!(h.tree.ephemerals(9).is_empty());
    assert!(h.tree.node("/p/e1").is_none() && h.tree.node("/e2").is_none());
    assert!(h.tree.node("/other").is_some());
    assert_eq!(h.tree.stat("/p").unwrap().pzxid, 5);
    assert_eq!(h.take_fired(), vec![(100, 2, "/p/e1".into()), (100, 4, "/p".into())]);
    // Empty path list (closeSessionTxn disabled): the index decides.
    let mut t = DataTree::new();
    let c = Txn::Create { path: "/x".into(), data: None, acl: Acl::open_unsafe(), ephemeral: true, parent_cversion: 1 };
    t.apply(&hdr(1, 0, 3), &c);
    let out = t.apply(&hdr(2, 0, 3), &Txn::CloseSession { paths_to_delete: vec![] });
    assert_eq!(out.result, TxnResult::SessionClosed);
    assert!(t.node("/x").is_none());
    assert_eq!(out.events.len(), 2);
}

#[test]
fn container_and_ttl_reaping() {
    let mut h = Harness::new();
    h.time_ms = 1000;
    h.write(1, create("/c", 4)).unwrap();
    h.write(1, create("/unused", 4)).unwrap();
    h.write(
        1,
        WriteOp::Create {
            path: "/t".into(),
            data: None,
            acl: Acl::open_unsafe(),
            flags: 5,
            kind: CreateKind::Ttl(500),
        },
    )
    .unwrap();
    h.write(
        1,
        WriteOp::Create {
            path: "/tp".into(),
            data: None,
            acl: Acl::open_unsafe(),
            flags: 5,
            kind: CreateKind::Ttl(500),
        },
    )
    .unwrap();
    h.write(1, create("/tp/kid", 0)).unwrap();
    assert!(h.tree.containers_and_ttls_to_reap(1000).is_empty());
    h.write(1, create("/c/x", 0)).unwrap();
    assert!(h.tree.containers_and_ttls_to_reap(1400).is_empty(), "container has a child; ttl not expired");
    h.write(1, delete("/c/x", -1)).unwrap();
    assert_eq!(h.tree.containers_and_ttls_to_reap(1500), vec![("/c".to_string(), true)]);
    assert_eq!(h.tree.containers_and_ttls_to_reap(1501), vec![("/c".to_string(), true), ("/t".to_string(), false)]);
    assert_eq!(h.tree.containers_and_ttls_to_reap_with(1501, 100).len(), 3, "never-used container too");
    // setData resets mtime.
    h.time_ms = 1400;
    h.write(1, set_data("/t", b"x", -1)).unwrap();
    assert_eq!(h.tree.containers_and_ttls_to_reap(1501), vec![("/c".to_string(), true)]);
    // Reaping goes through deleteContainer.
    h.write(0, WriteOp::DeleteContainer { path: "/c".into() }).unwrap();
    assert!(h.tree.node("/c").is_none());
}

#[test]
fn config_node_internal_write() {
    let mut t = DataTree::new();
    t.set_config_data(b"server.1=a:1:2:participant;0.0.0.0:2181\nversion=100000000".to_vec(), 0x1_0000_0000);
    let s = t.stat("/zookeeper/config").unwrap();
    assert_eq!((s.mzxid, s.version), (0x1_0000_0000, -1));
    t.check_invariants().unwrap();
}

#[test]
fn approximate_size_tracks_changes() {
    let mut h = Harness::new();
    let base = h.tree.approximate_data_size();
    h.write(1, create_data("/abc", 0, b"12345")).unwrap();
    assert_eq!(h.tree.approximate_data_size(), base + 4 + 5);
    h.write(1, set_data("/abc", b"1", -1)).unwrap();
    assert_eq!(h.tree.approximate_data_size(), base + 4 + 1);
    h.write(1, delete("/abc", -1)).unwrap();
    assert_eq!(h.tree.approximate_data_size(), base);
    assert_eq!(h.tree.all_children_number("/"), Some(3));
}

#[test]
fn quota_stats_follow_the_subtree() {
    let mut h = Harness::new();
    h.write(1, create_data("/q", 0, b"ab")).unwrap();
    h.write(1, create_data("/q/x", 0, b"abc")).unwrap();
    h.write(1, create("/zookeeper/quota/q", 0)).unwrap();
    h.write(1, create_data("/zookeeper/quota/q/zookeeper_limits", 0, b"count=3,bytes=100")).unwrap();
    h.write(1, create_data("/zookeeper/quota/q/zookeeper_stats", 0, b"count=0,bytes=0")).unwrap();
    let stats = |h: &Harness| {
        String::from_utf8(h.tree.node("/zookeeper/quota/q/zookeeper_stats").unwrap().data.clone().unwrap().into_vec())
            .unwrap()
    };
    assert_eq!(stats(&h), "count=2,bytes=5");
    h.write(1, create_data("/q/y", 0, b"1234")).unwrap();
    assert_eq!(stats(&h), "count=3,bytes=9");
    assert!(!h.tree.quota_exceeded("/q/y"));
    h.write(1, create("/q/y/z", 0)).unwrap();
    assert_eq!(stats(&h), "count=4,bytes=9");
    assert!(h.tree.quota_exceeded("/q"), "count 4 > limit 3 (warn only)");
    h.write(1, set_data("/q/y", b"", -1)).unwrap();
    assert_eq!(stats(&h), "count=4,bytes=5");
    h.write(1, delete("/q/y/z", -1)).unwrap();
    assert_eq!(stats(&h), "count=3,bytes=5");
    h.write(1, create("/qq", 0)).unwrap();
    assert_eq!(stats(&h), "count=3,bytes=5", "a sibling with a common string prefix is outside");
    h.write(1, delete("/zookeeper/quota/q/zookeeper_limits", -1)).unwrap();
    h.write(1, create("/q/w", 0)).unwrap();
    assert_eq!(stats(&h), "count=3,bytes=5", "no quota after the limits node is deleted");
    assert_eq!(h.tree.quota_index().paths().count(), 0);
}

#[test]
fn the_empty_path_reads_as_the_root() {
    let tree = warden_tree::DataTree::new();
    assert_eq!(tree.stat(""), tree.stat("/"));
    assert_eq!(tree.children(""), tree.children("/"));
    assert_eq!(tree.all_children_number(""), Some(3));
}

#[test]
fn digest_is_equal_for_equal_histories_and_sees_data_stat_and_acl() {
    let mut a = Harness::new();
    let mut b = Harness::new();
    assert_eq!(a.tree.fingerprint(), DataTree::new().fingerprint());
    for h in [&mut a, &mut b] {
        h.write(7, create_data("/d", 0, b"x")).unwrap();
    }
    assert_eq!(a.tree.fingerprint(), b.tree.fingerprint());
    let before = a.tree.fingerprint();
    // Same data, new version and mzxid: the Stat alone changes the digest.
    a.write(7, WriteOp::SetData { path: "/d".into(), data: Some(b"x".to_vec().into()), version: -1 }).unwrap();
    assert_ne!(a.tree.fingerprint(), before);
    b.write(7, WriteOp::SetData { path: "/d".into(), data: Some(b"x".to_vec().into()), version: -1 }).unwrap();
    assert_eq!(a.tree.fingerprint(), b.tree.fingerprint());
    // An ACL change shows too.
    let mut n = Harness::new();
    let mut e = Harness::new();
    n.write(7, create_data("/z", 0, b"")).unwrap();
    e.write(7, create_data("/z", 0, b"")).unwrap();
    assert_eq!(n.tree.fingerprint(), e.tree.fingerprint());
    let acl = vec![Acl { perms: 1, id: warden_proto::Id::new("world", "anyone") }];
    n.write(7, WriteOp::SetAcl { path: "/z".into(), acl, version: -1 }).unwrap();
    assert_ne!(n.tree.fingerprint(), e.tree.fingerprint());
}

/// `apply_taking_data` moves a create's and a setData's data into the node and a create's path into
/// its result (the txn keeps neither) and otherwise applies exactly as `apply` does; a multi's data
/// is copied.
#[test]
fn taking_data_applies_as_copying_does() {
    let txns = vec![
        Txn::Create {
            path: "/a".into(),
            data: Some(b"one".to_vec()),
            acl: Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: -1,
        },
        Txn::Create { path: "/n".into(), data: None, acl: Acl::open_unsafe(), ephemeral: false, parent_cversion: -1 },
        Txn::SetData { path: "/a".into(), data: Some(b"two".to_vec().into()), version: 1 },
        Txn::Create {
            path: "/a".into(),
            data: Some(b"dup".to_vec()),
            acl: Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: -1,
        },
        Txn::Multi(vec![
            Txn::Create {
                path: "/m".into(),
                data: Some(b"multi".to_vec()),
                acl: Acl::open_unsafe(),
                ephemeral: false,
                parent_cversion: -1,
            },
            Txn::SetData { path: "/n".into(), data: Some(b"set".to_vec().into()), version: 1 },
        ]),
    ];
    let (mut copying, mut taking) = (DataTree::new(), DataTree::new());
    for (i, txn) in txns.into_iter().enumerate() {
        let h = hdr(i as i64 + 1, 1000, 5);
        let want = copying.apply(&h, &txn);
        let mut moved = txn.clone();
        let path_at = match &moved {
            Txn::Create { path, .. } => Some(path.as_ptr()),
            _ => None,
        };
        let got = taking.apply_taking_data(&h, &mut moved, Vec::new());
        assert_eq!(got.result, want.result, "{txn:?}");
        assert_eq!(got.events.len(), want.events.len());
        if let (Some(at), TxnResult::Created { path, .. }) = (path_at, &got.result) {
            assert_eq!(path.as_ptr(), at, "the result holds the txn's own path");
        }
        match moved {
            Txn::Create { data, path, .. } => {
                assert_eq!(data, None, "data moved out of {txn:?}");
                assert_eq!(path, "", "path moved out of {txn:?}");
            }
            // A setData's data (a slice of the frame it came in) is copied, not taken.
            other => assert_eq!(other, txn, "a setData or a multi keeps its data"),
        }
    }
    assert_eq!(taking.fingerprint(), copying.fingerprint());
    assert_eq!(taking.node("/a").unwrap().data.as_deref(), Some(&b"two"[..]));
    assert_eq!(taking.node("/n").unwrap().data.as_deref(), Some(&b"set"[..]));
    assert_eq!(taking.node("/m").unwrap().data.as_deref(), Some(&b"multi"[..]));
    assert_eq!(taking.approximate_data_size(), copying.approximate_data_size());
    taking.check_invariants().unwrap();
}

#[test]
fn set_data_of_the_same_length_rewrites_the_held_buffer() {
    let mut t = DataTree::new();
    let c = Txn::Create {
        path: "/a".into(),
        data: Some(b"one".to_vec()),
        acl: Acl::open_unsafe(),
        ephemeral: false,
        parent_cversion: -1,
    };
    t.apply(&hdr(1, 1000, 5), &c);
    let held = t.node("/a").unwrap().data.as_ref().unwrap().as_ptr();
    let s = Txn::SetData { path: "/a".into(), data: Some(b"two".to_vec().into()), version: 1 };
    t.apply(&hdr(2, 1001, 5), &s);
    let n = t.node("/a").unwrap();
    assert_eq!(n.data.as_deref(), Some(&b"two"[..]));
    assert_eq!(n.data.as_ref().unwrap().as_ptr(), held, "same length: the node keeps its buffer");
    for (zxid, data) in [(3, Some(b"longer".to_vec())), (4, None), (5, Some(Vec::new())), (6, Some(b"abc".to_vec()))] {
        let s = Txn::SetData { path: "/a".into(), data: data.clone().map(Into::into), version: zxid as i32 - 1 };
        t.apply(&hdr(zxid, 1000 + zxid, 5), &s);
        assert_eq!(t.node("/a").unwrap().data.as_deref(), data.as_deref());
        assert_eq!(t.node("/a").unwrap().stat.version, zxid as i32 - 1);
    }
    assert_eq!(t.approximate_data_size(), DataTree::new().approximate_data_size() + "/a".len() as u64 + 3);
    t.check_invariants().unwrap();
}
