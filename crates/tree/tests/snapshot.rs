//! Snapshot walk and rebuild: `snapshot_nodes` order, `from_snapshot` indexes, O(1) clones.

use warden_proto::{perms, Acl, Id, Txn, TxnHeader};
use warden_tree::{DataTree, Znode};

fn hdr(zxid: i64, client_id: i64) -> TxnHeader {
    TxnHeader { client_id, cxid: 0, zxid, time_ms: 1000 + zxid, txn_type: 0 }
}

fn create(path: &str, data: Option<&[u8]>, ephemeral: bool) -> Txn {
    Txn::Create {
        path: path.into(),
        data: data.map(<[u8]>::to_vec),
        acl: Acl::open_unsafe(),
        ephemeral,
        parent_cversion: -1,
    }
}

/// A tree with persistent, ephemeral, container, TTL, quota and digest-ACL nodes.
fn sample() -> DataTree {
    let mut t = DataTree::new();
    let digest = vec![Acl::new(perms::ALL, Id::new("digest", "u:abc=")), Acl::new(perms::READ, Id::anyone())];
    let txns = vec![
        (1, create("/b", Some(b"bee"), false)),
        (1, create("/a", None, false)),
        (1, create("/a/z", Some(b""), false)),
        (1, create("/a/y", Some(b"y"), false)),
        (0x55, create("/a/eph", Some(b"e"), true)),
        (
            1,
            Txn::CreateContainer {
                path: "/c".into(),
                data: Some(b"c".to_vec()),
                acl: Acl::open_unsafe(),
                parent_cversion: -1,
            },
        ),
        (
            1,
            Txn::CreateTtl {
                path: "/t".into(),
                data: Some(vec![]),
                acl: Acl::open_unsafe(),
                parent_cversion: -1,
                ttl_ms: 5000,
            },
        ),
        (
            1,
            Txn::Create {
                path: "/d".into(),
                data: Some(b"secret".to_vec()),
                acl: digest,
                ephemeral: false,
                parent_cversion: -1,
            },
        ),
        (1, create("/zookeeper/quota/a", None, false)),
        (1, create("/zookeeper/quota/a/zookeeper_limits", Some(b"count=10,bytes=-1"), false)),
        (1, create("/zookeeper/quota/a/zookeeper_stats", Some(b"count=0,bytes=0"), false)),
        (1, Txn::SetData { path: "/b".into(), data: Some(b"bee2".to_vec().into()), version: 1 }),
        (1, create("/c/child", None, false)),
    ];
    for (i, (session, txn)) in txns.into_iter().enumerate() {
        let out = t.apply(&hdr(i as i64 + 1, session), &txn);
        assert!(!matches!(out.result, warden_tree::TxnResult::Error(_)), "{txn:?}: {:?}", out.result);
    }
    t.check_invariants().unwrap();
    t
}

fn owned(t: &DataTree) -> Vec<(String, Znode)> {
    t.snapshot_nodes().map(|(p, n)| (p.to_string(), n.clone())).collect()
}

/// Asserts that `order` starts with the root (as `""`), names every path in `expected` (sorted)
/// once, and puts each parent before its children.
fn assert_parents_first(order: &[String], expected: &[&str]) {
    assert_eq!(order.first().map(String::as_str), Some(""), "root first");
    let mut sorted = order.to_vec();
    sorted.sort();
    assert_eq!(sorted, expected, "every node once");
    let mut seen = std::collections::HashSet::from(["/"]);
    for p in &order[1..] {
        assert!(seen.contains(warden_tree::parent(p)), "{p} before its parent in {order:?}");
        seen.insert(p.as_str());
    }
}

#[test]
fn root_first_then_parents_before_children() {
    let t = sample();
    let paths: Vec<String> = t.snapshot_nodes().map(|(p, _)| p.to_string()).collect();
    assert_parents_first(
        &paths,
        &[
            "",
            "/a",
            "/a/eph",
            "/a/y",
            "/a/z",
            "/b",
            "/c",
            "/c/child",
            "/d",
            "/t",
            "/zookeeper",
            "/zookeeper/config",
            "/zookeeper/quota",
            "/zookeeper/quota/a",
            "/zookeeper/quota/a/zookeeper_limits",
            "/zookeeper/quota/a/zookeeper_stats",
        ],
    );
    assert_eq!(t.snapshot_nodes().count(), t.znode_count());
}

#[test]
fn round_trip_rebuilds_indexes() {
    let t = sample();
    let back = DataTree::from_snapshot(owned(&t), t.last_processed_zxid()).unwrap();
    back.check_invariants().unwrap();
    assert_eq!(owned(&back), owned(&t));
    assert_eq!(back.ephemerals(0x55), vec!["/a/eph"]);
    assert_eq!(back.sessions_with_ephemerals(), vec![0x55]);
    assert_eq!(back.quota_index().paths().cloned().collect::<Vec<_>>(), vec!["/a"]);
    assert_eq!(back.approximate_data_size(), t.approximate_data_size());
    assert_eq!(back.last_processed_zxid(), t.last_processed_zxid());
    assert_eq!(back.node("/a").unwrap().data, None);
    assert_eq!(back.node("/a/z").unwrap().data.as_deref(), Some(&[][..]));
    // Container /c (now with a child) and TTL /t are indexed: after deleting the child the
    // container is reaped; the TTL node expires.
    let mut back = back;
    back.apply(&hdr(100, 1), &Txn::Delete { path: "/c/child".into() });
    let reap = back.containers_and_ttls_to_reap(1_000_000);
    assert_eq!(reap, vec![("/c".to_string(), true), ("/t".to_string(), false)]);
}

#[test]
fn quota_stats_are_recomputed() {
    let t = sample();
    let mut nodes = owned(&t);
    for (p, n) in &mut nodes {
        if p == "/zookeeper/quota/a/zookeeper_stats" {
            n.data = Some(b"count=99,bytes=99"[..].into());
        }
    }
    let back = DataTree::from_snapshot(nodes, 0).unwrap();
    back.check_invariants().unwrap();
    let stats = back.node("/zookeeper/quota/a/zookeeper_stats").unwrap().data.clone().unwrap().into_vec();
    // /a, /a/eph, /a/y, /a/z: 4 nodes, 0 + 1 + 1 + 0 bytes.
    assert_eq!(String::from_utf8(stats).unwrap(), "count=4,bytes=2");
}

#[test]
fn rejects_orphans_duplicates_and_missing_root() {
    let t = sample();
    let mut nodes = owned(&t);
    nodes.retain(|(p, _)| p != "/a");
    let err = DataTree::from_snapshot(nodes, 0).unwrap_err();
    assert!(err.contains("parent /a"), "{err}");

    let mut nodes = owned(&t);
    nodes.push(nodes[1].clone());
    assert!(DataTree::from_snapshot(nodes, 0).unwrap_err().contains("duplicate"));

    let mut nodes = owned(&t);
    nodes.remove(0);
    assert!(DataTree::from_snapshot(nodes, 0).is_err());
}

#[test]
fn rejects_a_path_with_an_empty_segment() {
    // Found by the snap_sync fuzz target: `//x` loaded as a node whose parent `/` listed a child
    // `x` that the tree did not hold at `/x`, which broke check_invariants.
    let t = sample();
    let mut nodes = owned(&t);
    let mut extra = nodes[1].clone();
    extra.0 = "//x".to_string();
    nodes.push(extra);
    let err = DataTree::from_snapshot(nodes, 0).unwrap_err();
    assert!(err.contains("invalid path \"//x\""), "{err}");
}

#[test]
fn rejects_an_ephemeral_parent_and_an_owned_root() {
    // Found by the snap_sync fuzz target: such a tree loaded and then broke check_invariants.
    let t = sample();
    let mut nodes = owned(&t);
    for (p, n) in &mut nodes {
        if p == "/a" {
            n.stat.ephemeral_owner = 0x1000_0000_0000_0001;
        }
    }
    let err = DataTree::from_snapshot(nodes, 0).unwrap_err();
    assert!(err.contains("ephemeral node /a has children"), "{err}");
    // An ephemeral /zookeeper alone in the snapshot: the loader adds its children itself.
    let root = (String::new(), Znode::new(Some(Box::default()), Acl::open_unsafe().into(), Default::default()));
    let mut zk = ("/zookeeper".to_string(), root.1.clone());
    zk.1.stat.ephemeral_owner = 2;
    let err = DataTree::from_snapshot(vec![root, zk], 0).unwrap_err();
    assert!(err.contains("ephemeral node /zookeeper has children"), "{err}");

    // A root alone (so with no children yet): a session's, a container, a TTL node.
    for owner in [0x1000_0000_0000_0001, i64::MIN, 0xff00_0000_0000_0001u64 as i64] {
        let mut root = (String::new(), Znode::new(Some(Box::default()), Acl::open_unsafe().into(), Default::default()));
        root.1.stat.ephemeral_owner = owner;
        let err = DataTree::from_snapshot(vec![root], 0).unwrap_err();
        assert!(err.contains("the root has owner"), "{err}");
    }
}

#[test]
fn system_nodes_are_added_when_absent() {
    let root = (String::new(), Znode::new(Some(Box::default()), Acl::open_unsafe().into(), Default::default()));
    let t = DataTree::from_snapshot(vec![root], 7).unwrap();
    t.check_invariants().unwrap();
    assert_eq!(t.children("/zookeeper").unwrap(), vec!["config", "quota"]);
    assert_eq!(t.node("/zookeeper/config").unwrap().acl.to_vec(), Acl::read_unsafe());
    assert_eq!(t.last_processed_zxid(), 7);
}

#[test]
fn clone_is_shared_send_and_isolated() {
    fn assert_send_static<T: Send + Sync + 'static>(_: &T) {}
    let mut t = sample();
    let snap = t.clone();
    assert_send_static(&snap);
    // Unchanged nodes are shared, not copied.
    assert!(std::ptr::eq(t.node("/b").unwrap(), snap.node("/b").unwrap()));
    t.apply(&hdr(200, 1), &Txn::SetData { path: "/b".into(), data: Some(b"new".to_vec().into()), version: 2 });
    t.apply(&hdr(201, 1), &create("/new", None, false));
    assert_eq!(snap.node("/b").unwrap().data.as_deref(), Some(&b"bee2"[..]));
    assert!(snap.node("/new").is_none());
    assert!(std::ptr::eq(t.node("/d").unwrap(), snap.node("/d").unwrap()));
    let handle = std::thread::spawn(move || snap.snapshot_nodes().count());
    assert_eq!(handle.join().unwrap(), 16);
}

/// Child names with characters that sort before `/` (`-`, `.`, space, `!`) interleave with
/// subtrees in byte order; children, counts, the snapshot walk and ACL sharing must not care.
#[test]
fn names_sorting_before_slash() {
    let mut t = DataTree::new();
    let digest = vec![Acl::new(perms::ALL, Id::new("digest", "u:abc="))];
    let paths = [
        "/a", "/a-b", "/a/x", "/a-b/y", "/a.c", "/a/x/z", "/a/x-1", "/a/x/z/w", "/a0", "/ab", "/a b", "/a!", "/a/x.",
        "/a-",
    ];
    for (i, p) in paths.iter().enumerate() {
        let txn = Txn::Create {
            path: p.to_string(),
            data: Some(vec![i as u8]),
            acl: if i % 2 == 0 { digest.clone() } else { Acl::open_unsafe() },
            ephemeral: false,
            parent_cversion: -1,
        };
        assert!(matches!(t.apply(&hdr(i as i64 + 1, 1), &txn).result, warden_tree::TxnResult::Created { .. }));
    }
    t.check_invariants().unwrap();
    assert_eq!(t.children("/").unwrap(), vec!["a", "a b", "a!", "a-", "a-b", "a.c", "a0", "ab", "zookeeper"]);
    assert_eq!(t.children("/a").unwrap(), vec!["x", "x-1", "x."]);
    assert_eq!(t.children("/a/x").unwrap(), vec!["z"]);
    assert_eq!(t.children("/a/x/z/w").unwrap(), Vec::<String>::new());
    assert_eq!(t.children("/nope"), None);
    assert_eq!(t.stat("/a").unwrap().num_children, 3);
    assert_eq!(t.all_children_number("/a"), Some(5));
    assert_eq!(t.all_children_number("/a-b"), Some(1));
    let order: Vec<String> = t.snapshot_nodes().map(|(p, _)| p.to_string()).collect();
    assert_parents_first(
        &order,
        &[
            "",
            "/a",
            "/a b",
            "/a!",
            "/a-",
            "/a-b",
            "/a-b/y",
            "/a.c",
            "/a/x",
            "/a/x-1",
            "/a/x.",
            "/a/x/z",
            "/a/x/z/w",
            "/a0",
            "/ab",
            "/zookeeper",
            "/zookeeper/config",
            "/zookeeper/quota",
        ],
    );
    // Equal ACLs share one list, in the live tree and after a rebuild.
    let same =
        |t: &DataTree, a: &str, b: &str| std::sync::Arc::ptr_eq(&t.node(a).unwrap().acl, &t.node(b).unwrap().acl);
    assert!(same(&t, "/a", "/a/x") && same(&t, "/a", "/a.c") && same(&t, "/a-b/y", "/zookeeper"));
    assert!(!same(&t, "/a", "/a-b"));
    let back = DataTree::from_snapshot(owned(&t), t.last_processed_zxid()).unwrap();
    back.check_invariants().unwrap();
    assert_eq!(back.snapshot_nodes().map(|(p, _)| p).collect::<Vec<_>>(), order);
    assert!(same(&back, "/a", "/a/x") && same(&back, "/a-b/y", "/zookeeper"));
    // Deleting a leaf among them keeps the counts right.
    let del = Txn::Delete { path: "/a/x-1".into() };
    assert_eq!(t.apply(&hdr(100, 1), &del).result, warden_tree::TxnResult::Deleted);
    assert_eq!(t.children("/a").unwrap(), vec!["x", "x."]);
    t.check_invariants().unwrap();
}
