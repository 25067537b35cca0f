//! Prep scripts: check order and error codes (ZooKeeper's `PrepRequestProcessor.pRequest2Txn`),
//! pending changes, multi layout.

mod common;
use common::*;
use warden_proto::{perms, Acl, ErrorCode, Id, Txn};
use warden_tree::{CreateKind, Prep, PrepContext, TxnResult, WriteOp};

fn ttl_create(path: &str, flags: i32, ttl: i64) -> WriteOp {
    WriteOp::Create { path: path.into(), data: None, acl: Acl::open_unsafe(), flags, kind: CreateKind::Ttl(ttl) }
}

fn acl_for(perms: i32, id: Id) -> Vec<Acl> {
    vec![Acl::new(perms, id)]
}

#[test]
fn create_check_order() {
    let mut h = Harness::new();
    h.write(5, create("/eph", 1)).unwrap();
    h.write(1, create_acl("/locked", acl_for(perms::ALL & !perms::CREATE, Id::anyone()))).unwrap();
    let cases: Vec<(WriteOp, ErrorCode)> = vec![
        (create("/a", 7), ErrorCode::BadArguments),
        (create("/a", -1), ErrorCode::BadArguments),
        (ttl_create("/a", 0, 100), ErrorCode::BadArguments),
        (ttl_create("/a", 5, 0), ErrorCode::BadArguments),
        (ttl_create("/a", 5, 0x0000_0100_0000_0000), ErrorCode::BadArguments),
        (create("/a", 5), ErrorCode::BadArguments),
        (create("a", 0), ErrorCode::BadArguments),
        (create("/a\0b", 0), ErrorCode::BadArguments),
        // No slash beats a bad ACL; bad ACL beats a missing parent.
        (create_acl("nope", vec![]), ErrorCode::BadArguments),
        (create_acl("/x/y", vec![]), ErrorCode::InvalidAcl),
        (create_acl("/a", Acl::creator_all()), ErrorCode::InvalidAcl),
        (create("/x/y", 0), ErrorCode::NoNode),
        (create("a/b", 0), ErrorCode::NoNode),
        (create("/locked/c", 0), ErrorCode::NoAuth),
        // The parent is looked up before the full path is validated.
        (create("/a/", 0), ErrorCode::NoNode),
        (create("/zookeeper/", 0), ErrorCode::BadArguments),
        (create("/zookeeper/..", 0), ErrorCode::BadArguments),
        (create("/zookeeper", 0), ErrorCode::NodeExists),
        (create("/", 0), ErrorCode::NodeExists),
        (create("/eph/child", 0), ErrorCode::NoChildrenForEphemerals),
        (create("/eph", 1), ErrorCode::NodeExists),
    ];
    for (op, code) in cases {
        assert_eq!(h.prep_only(5, &op).map(|_| ()), Err(code), "{op:?}");
    }
    assert_eq!(h.prep.pending_count(), 0, "failed preps record nothing");
    // Sequential under "/a/" is legal once the suffix is appended.
    h.write(1, create("/q", 0)).unwrap();
    assert_eq!(created_path(&h.write(1, create("/q/", 2)).unwrap()), "/q/0000000000");
}

#[test]
fn ttl_disabled_and_local_sessions() {
    let mut h = Harness::new();
    h.ttl_enabled = false;
    assert_eq!(h.prep_only(1, &ttl_create("/t", 5, 100)).map(|_| ()), Err(ErrorCode::Unimplemented));
    // TTL disabled is checked before the TTL value.
    assert_eq!(h.prep_only(1, &ttl_create("/t", 6, -5)).map(|_| ()), Err(ErrorCode::Unimplemented));
    let ids = vec![];
    let ctx = PrepContext {
        session_id: 1,
        auth_ids: &ids,
        ttl_enabled: false,
        is_ephemeral_allowed: false,
        sasl_provider: true,
    };
    let mut prep = Prep::new();
    assert_eq!(prep.prep(&h.tree, &ctx, 1, &create("/e", 3)), Err(ErrorCode::EphemeralOnLocalSession));
    assert!(prep.prep(&h.tree, &ctx, 1, &create("/p", 0)).is_ok());
}

#[test]
fn create_txn_shapes() {
    let mut h = Harness::new();
    let (_, t) = h.prep_only(9, &create("/e", 1)).unwrap();
    assert_eq!(
        t,
        Txn::Create {
            path: "/e".into(),
            data: Some(vec![]),
            acl: Acl::open_unsafe(),
            ephemeral: true,
            parent_cversion: 1
        }
    );
    let (_, t) = h.prep_only(9, &ttl_create("/t", 6, 42)).unwrap();
    assert_eq!(
        t,
        Txn::CreateTtl {
            path: "/t0000000001".into(),
            data: None,
            acl: Acl::open_unsafe(),
            parent_cversion: 2,
            ttl_ms: 42
        }
    );
    let (_, t) = h
        .prep_only(
            9,
            &WriteOp::Create {
                path: "/c".into(),
                data: None,
                acl: Acl::open_unsafe(),
                flags: 4,
                kind: CreateKind::Container,
            },
        )
        .unwrap();
    assert!(matches!(t, Txn::CreateContainer { parent_cversion: 3, .. }));
}

#[test]
fn sequential_names_count_pending_creates() {
    let mut h = Harness::new();
    h.write(1, create("/s", 0)).unwrap();
    let (h1, t1) = h.prep_only(1, &create("/s/n-", 2)).unwrap();
    let (h2, t2) = h.prep_only(1, &create("/s/n-", 3)).unwrap();
    let names: Vec<_> = [&t1, &t2]
        .iter()
        .map(|t| match t {
            Txn::Create { path, .. } => path.clone(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(names, vec!["/s/n-0000000000", "/s/n-0000000001"]);
    assert_eq!(created_path(&h.apply(&h1, &t1)), "/s/n-0000000000");
    assert_eq!(created_path(&h.apply(&h2, &t2)), "/s/n-0000000001");
    // Deletes do not move the counter.
    h.write(1, delete("/s/n-0000000000", -1)).unwrap();
    assert_eq!(created_path(&h.write(1, create("/s/n-", 2)).unwrap()), "/s/n-0000000002");
    assert_eq!(h.tree.node("/s").unwrap().stat.cversion, 3);
}

#[test]
fn sequential_counter_is_signed() {
    let mut h = Harness::new();
    let c =
        Txn::Create { path: "/s".into(), data: None, acl: Acl::open_unsafe(), ephemeral: false, parent_cversion: 1 };
    h.tree.apply(&h.header(1, 1, &c), &c);
    let c = Txn::Create {
        path: "/s/x".into(),
        data: None,
        acl: Acl::open_unsafe(),
        ephemeral: false,
        parent_cversion: i32::MAX,
    };
    h.tree.apply(&h.header(1, 2, &c), &c);
    h.zxid = 2;
    let (h1, t1) = h.prep_only(1, &create("/s/", 2)).unwrap();
    let (h2, t2) = h.prep_only(1, &create("/s/", 2)).unwrap();
    assert_eq!(created_path(&h.apply(&h1, &t1)), "/s/2147483647");
    assert_eq!(created_path(&h.apply(&h2, &t2)), "/s/-2147483648");
    // As in ZooKeeper's createNode, a parentCVersion that wrapped is not larger, so the stored
    // counter stays at i32::MAX and the next sequential name collides.
    assert_eq!(h.tree.node("/s").unwrap().stat.cversion, i32::MAX);
    assert_eq!(h.prep_only(1, &create("/s/", 2)).map(|_| ()), Err(ErrorCode::NodeExists));
}

#[test]
fn pending_state_is_visible_to_later_preps() {
    let mut h = Harness::new();
    let (ha, ta) = h.prep_only(1, &create("/p", 0)).unwrap();
    // Child of a pending node, then versions of pending setData.
    let (hb, tb) = h.prep_only(1, &create("/p/c", 0)).unwrap();
    assert_eq!(h.prep_only(1, &create("/p", 0)).map(|_| ()), Err(ErrorCode::NodeExists));
    assert_eq!(h.prep_only(1, &delete("/p", -1)).map(|_| ()), Err(ErrorCode::NotEmpty));
    let (hc, tc) = h.prep_only(1, &set_data("/p/c", b"1", 0)).unwrap();
    assert_eq!(h.prep_only(1, &set_data("/p/c", b"2", 0)).map(|_| ()), Err(ErrorCode::BadVersion));
    let (hd, td) = h.prep_only(1, &set_data("/p/c", b"2", 1)).unwrap();
    assert!(matches!(td, Txn::SetData { version: 2, .. }));
    let (he, te) = h.prep_only(1, &delete("/p/c", 2)).unwrap();
    assert_eq!(h.prep_only(1, &set_data("/p/c", b"3", -1)).map(|_| ()), Err(ErrorCode::NoNode));
    for (hh, t) in [(ha, ta), (hb, tb), (hc, tc), (hd, td), (he, te)] {
        assert!(h.apply(&hh, &t).err() == ErrorCode::Ok);
    }
    assert_eq!(h.prep.pending_count(), 0);
    assert_eq!(h.tree.children("/p").unwrap(), Vec::<String>::new());
}

#[test]
fn delete_check_order() {
    let mut h = Harness::new();
    h.write(1, create_acl("/nodel", acl_for(perms::ALL & !perms::DELETE, Id::anyone()))).unwrap();
    h.write(1, create("/nodel/x", 0)).unwrap();
    h.write(1, create("/full", 0)).unwrap();
    h.write(1, create("/full/kid", 0)).unwrap();
    h.write(1, set_data("/full", b"v", -1)).unwrap();
    let cases = [
        (delete("/", -1), ErrorCode::BadArguments),
        (delete("/zookeeper", -1), ErrorCode::BadArguments),
        (delete("/zookeeper/quota", -1), ErrorCode::BadArguments),
        (delete("/zookeeper/config", -1), ErrorCode::BadArguments),
        (delete("nodel", -1), ErrorCode::BadArguments),
        (delete("/a\0", -1), ErrorCode::BadArguments),
        (delete("/missing/x", -1), ErrorCode::NoNode),
        (delete("/nodel/x", -1), ErrorCode::NoAuth),
        (delete("/nodel/missing", -1), ErrorCode::NoAuth),
        (delete("/missing", -1), ErrorCode::NoNode),
        (delete("/full", 0), ErrorCode::BadVersion),
        (delete("/full", 1), ErrorCode::NotEmpty),
        (delete("/full", -1), ErrorCode::NotEmpty),
    ];
    for (op, code) in cases {
        assert_eq!(h.prep_only(1, &op).map(|_| ()), Err(code), "{op:?}");
    }
    assert_eq!(h.write(1, delete("/full/kid", 0)).unwrap(), TxnResult::Deleted);
}

#[test]
fn set_data_set_acl_check_order() {
    let mut h = Harness::new();
    h.write(1, create_acl("/ro", acl_for(perms::READ, Id::anyone()))).unwrap();
    h.write(1, create_acl("/secret", acl_for(perms::ALL, Id::new("digest", "u:h")))).unwrap();
    h.write(1, create("/v", 0)).unwrap();
    let sa = |p: &str, acl: Vec<Acl>, v: i32| WriteOp::SetAcl { path: p.into(), acl, version: v };
    let ck = |p: &str, v: i32| WriteOp::Check { path: p.into(), version: v };
    let cases = [
        (set_data("bad", b"", -1), ErrorCode::BadArguments),
        (set_data("/missing", b"", -1), ErrorCode::NoNode),
        (set_data("/ro", b"", -1), ErrorCode::NoAuth),
        (set_data("/v", b"", 3), ErrorCode::BadVersion),
        (sa("/v/", Acl::open_unsafe(), -1), ErrorCode::BadArguments),
        (sa("/missing", vec![], -1), ErrorCode::InvalidAcl),
        (sa("/missing", Acl::open_unsafe(), -1), ErrorCode::NoNode),
        (sa("/ro", Acl::open_unsafe(), -1), ErrorCode::NoAuth),
        (sa("/v", Acl::open_unsafe(), 1), ErrorCode::BadVersion),
        (ck("//", 0), ErrorCode::BadArguments),
        (ck("/missing", 0), ErrorCode::NoNode),
        (ck("/secret", 0), ErrorCode::NoAuth),
        (ck("/v", 1), ErrorCode::BadVersion),
    ];
    for (op, code) in cases {
        assert_eq!(h.prep_only(1, &op).map(|_| ()), Err(code), "{op:?}");
    }
    let (_, t) = h.prep_only(1, &ck("/v", 0)).unwrap();
    assert_eq!(t, Txn::Check { path: "/v".into(), version: 1 });
    let (_, t) = h.prep_only(1, &sa("/v", Acl::read_unsafe(), 0)).unwrap();
    assert_eq!(t, Txn::SetAcl { path: "/v".into(), acl: Acl::read_unsafe(), version: 1 });
    // The pending ACL already applies to later preps.
    assert_eq!(h.prep_only(1, &set_data("/v", b"", -1)).map(|_| ()), Err(ErrorCode::NoAuth));
}

#[test]
fn acl_auth_expansion_and_super() {
    let mut h = Harness::new();
    h.ids.push(Id::new("digest", "bob:hash"));
    let (hh, t) = h.prep_only(1, &create_acl("/mine", Acl::creator_all())).unwrap();
    let Txn::Create { acl, .. } = &t else { panic!() };
    assert_eq!(acl, &vec![Acl::new(perms::ALL, Id::new("digest", "bob:hash"))]);
    h.apply(&hh, &t);
    h.ids = vec![Id::new("ip", "10.0.0.1")];
    assert_eq!(h.prep_only(1, &set_data("/mine", b"", -1)).map(|_| ()), Err(ErrorCode::NoAuth));
    h.ids.push(Id::new("super", ""));
    assert!(h.write(1, set_data("/mine", b"", -1)).is_ok());
    h.ids = vec![Id::new("ip", "10.0.0.1")];
    h.write(1, create_acl("/net", acl_for(perms::ALL, Id::new("ip", "10.0.0.0/8")))).unwrap();
    assert!(h.write(1, create("/net/ok", 0)).is_ok());
    h.ids = vec![Id::new("ip", "192.168.0.1")];
    assert_eq!(h.prep_only(1, &create("/net/no", 0)).map(|_| ()), Err(ErrorCode::NoAuth));
}

#[test]
fn delete_container_rules() {
    let mut h = Harness::new();
    h.write(1, create("/c", 4)).unwrap();
    h.write(1, create("/c/x", 0)).unwrap();
    h.write(3, create("/e", 1)).unwrap();
    let dc = |p: &str| WriteOp::DeleteContainer { path: p.into() };
    assert_eq!(h.prep_only(0, &dc("/zookeeper")).map(|_| ()), Err(ErrorCode::BadArguments));
    assert_eq!(h.prep_only(0, &dc("/c")).map(|_| ()), Err(ErrorCode::NotEmpty));
    assert_eq!(h.prep_only(0, &dc("/e")).map(|_| ()), Err(ErrorCode::BadVersion));
    assert_eq!(h.prep_only(0, &dc("/nope")).map(|_| ()), Err(ErrorCode::NoNode));
    h.write(1, delete("/c/x", -1)).unwrap();
    let (hh, t) = h.prep_only(0, &dc("/c")).unwrap();
    assert_eq!(t, Txn::DeleteContainer { path: "/c".into() });
    assert_eq!(h.apply(&hh, &t), TxnResult::Deleted);
}

#[test]
fn multi_failure_layout_and_rollback() {
    let mut h = Harness::new();
    h.write(1, create("/s", 0)).unwrap();
    let op = WriteOp::Multi(vec![create("/s/a", 2), create("/m", 0), set_data("/m", b"x", 5), create("/z", 0)]);
    let (hh, t) = h.prep_only(1, &op).unwrap();
    let Txn::Multi(subs) = &t else { panic!() };
    assert!(matches!(&subs[0], Txn::Create { path, .. } if path == "/s/a0000000000"));
    assert!(matches!(&subs[1], Txn::Create { path, .. } if path == "/m"));
    assert_eq!(subs[2], Txn::Error { err: ErrorCode::BadVersion.code() });
    assert_eq!(subs[3], Txn::Error { err: -2 });
    assert_eq!(h.prep.pending_count(), 0, "rolled back");
    // The rolled-back sequential create did not consume a number.
    let (h2, t2) = h.prep_only(1, &create("/s/a", 2)).unwrap();
    assert!(matches!(&t2, Txn::Create { path, .. } if path == "/s/a0000000000"));
    let r = h.apply(&hh, &t);
    assert_eq!(
        r,
        TxnResult::Multi(vec![
            TxnResult::Error(ErrorCode::Ok),
            TxnResult::Error(ErrorCode::Ok),
            TxnResult::Error(ErrorCode::BadVersion),
            TxnResult::Error(ErrorCode::RuntimeInconsistency),
        ])
    );
    assert!(h.tree.node("/m").is_none());
    assert_eq!(created_path(&h.apply(&h2, &t2)), "/s/a0000000000");
}

#[test]
fn multi_success_sees_earlier_sub_ops() {
    let mut h = Harness::new();
    let op = WriteOp::Multi(vec![
        create("/m", 0),
        create("/m/", 2),
        create("/m/", 2),
        set_data("/m", b"v", 0),
        WriteOp::Check { path: "/m".into(), version: 1 },
        delete("/m/0000000000", 0),
    ]);
    let r = h.write(1, op).unwrap();
    let TxnResult::Multi(rs) = r else { panic!() };
    assert_eq!(created_path(&rs[2]), "/m/0000000001");
    assert_eq!(rs[4], TxnResult::Check);
    assert_eq!(rs[5], TxnResult::Deleted);
    assert_eq!(h.tree.children("/m").unwrap(), vec!["0000000001"]);
    let s = h.tree.stat("/m").unwrap();
    assert_eq!((s.version, s.cversion, s.czxid, s.mzxid, s.pzxid), (1, 3, 1, 1, 1));
    // A nested multi is refused in its slot.
    let r = h.write(1, WriteOp::Multi(vec![create("/n", 0), WriteOp::Multi(vec![])])).unwrap();
    assert_eq!(r.err(), ErrorCode::BadArguments);
    assert!(h.write(1, WriteOp::Multi(vec![])).unwrap() == TxnResult::Multi(vec![]));
}

#[test]
fn close_session_includes_pending_ephemerals() {
    let mut h = Harness::new();
    h.write(7, create("/a", 1)).unwrap();
    h.write(7, create("/b", 1)).unwrap();
    h.write(7, create("/d", 1)).unwrap();
    let (h1, t1) = h.prep_only(7, &create("/c", 1)).unwrap();
    let (h2, t2) = h.prep_only(7, &delete("/b", -1)).unwrap();
    // /d is deleted and made again by session 9, pending: it is not 7's to delete.
    let (h3, t3) = h.prep_only(7, &delete("/d", -1)).unwrap();
    let (h4, t4) = h.prep_only(9, &create("/d", 1)).unwrap();
    // A pending setData of 7's /a keeps it 7's.
    let (h5, t5) = h.prep_only(8, &set_data("/a", b"x", -1)).unwrap();
    h.zxid += 1;
    let close = h.prep.prep_close_session(&h.tree, 7, h.zxid);
    assert_eq!(close, Txn::CloseSession { paths_to_delete: vec!["/a".into(), "/c".into()] });
    let hc = h.header(7, h.zxid, &close);
    // After the close is prepped, the session's nodes are pending deletes.
    assert_eq!(h.prep_only(8, &set_data("/a", b"", -1)).map(|_| ()), Err(ErrorCode::NoNode));
    for (hdr, txn) in [(h1, t1), (h2, t2), (h3, t3), (h4, t4), (h5, t5)] {
        h.apply(&hdr, &txn);
    }
    h.apply(&hc, &close);
    assert_eq!(h.tree.ephemerals(9), vec!["/d".to_string()]);
    h.close_session(9);
    assert!(h.tree.ephemerals(7).is_empty());
    assert_eq!(h.tree.children("/").unwrap(), vec!["zookeeper"]);
    assert_eq!(h.prep.pending_count(), 0);
}

#[test]
fn applied_parents_follow_the_tree() {
    // Creates and deletes under one parent, each applied before the next prep: the parent's
    // applied state serves the next prep (the harness checks it against the tree after every
    // apply), so sequence numbers, NotEmpty and NodeExists still follow the tree.
    let mut h = Harness::new();
    h.write(1, create("/q", 0)).unwrap();
    for i in 0..5 {
        assert_eq!(created_path(&h.write(1, create("/q/n-", 2)).unwrap()), format!("/q/n-{i:010}"));
    }
    h.write(1, delete("/q/n-0000000001", -1)).unwrap();
    assert_eq!(h.prep_only(1, &delete("/q", -1)).map(|_| ()), Err(ErrorCode::NotEmpty));
    assert_eq!(h.prep_only(1, &create("/q/n-0000000002", 0)).map(|_| ()), Err(ErrorCode::NodeExists));
    assert_eq!(created_path(&h.write(1, create("/q/n-", 2)).unwrap()), "/q/n-0000000005");
    for i in [0, 2, 3, 4, 5] {
        h.write(1, delete(&format!("/q/n-{i:010}"), -1)).unwrap();
    }
    h.write(1, delete("/q", -1)).unwrap();
    assert_eq!(h.prep_only(1, &create("/q/x", 0)).map(|_| ()), Err(ErrorCode::NoNode));

    // A txn prepped elsewhere (as a follower applies the leader's) changes the parent behind
    // this Prep's back; `clear`, which every role change does, makes the next prep read the tree.
    h.write(1, create("/r", 0)).unwrap();
    h.write(1, create("/r/", 2)).unwrap();
    h.zxid += 1;
    let c =
        Txn::Create { path: "/r/b".into(), data: None, acl: Acl::open_unsafe(), ephemeral: false, parent_cversion: 2 };
    h.tree.apply(&h.header(1, h.zxid, &c), &c);
    assert!(h.prep.check_against(&h.tree).is_err(), "the kept parent no longer matches the tree");
    h.prep.clear();
    h.check();
    assert_eq!(created_path(&h.write(1, create("/r/", 2)).unwrap()), "/r/0000000002");
}

#[test]
fn creates_above_the_child_bound_skip_the_lookup_and_stay_exact() {
    // The parent's child bound (the largest name word of a child it ever had) lets a create of
    // a name above it skip the node-map lookup; names at or below it are still looked up, and a
    // pending create raises the bound of the parent's pending record.
    let mut h = Harness::new();
    h.write(1, create("/b", 0)).unwrap();
    h.write(1, create("/b/5", 0)).unwrap();
    h.write(1, create("/b/3", 0)).unwrap();
    assert_eq!(h.prep_only(1, &create("/b/5", 0)).map(|_| ()), Err(ErrorCode::NodeExists));
    assert_eq!(h.prep_only(1, &create("/b/3", 0)).map(|_| ()), Err(ErrorCode::NodeExists));
    h.write(1, create("/b/7", 0)).unwrap();
    assert_eq!(h.prep_only(1, &create("/b/7", 0)).map(|_| ()), Err(ErrorCode::NodeExists));
    let (h9, t9) = h.prep_only(1, &create("/b/9", 0)).unwrap();
    assert_eq!(h.prep_only(1, &create("/b/9", 0)).map(|_| ()), Err(ErrorCode::NodeExists));
    h.apply(&h9, &t9);
    // A delete keeps the bound; the name can be created again.
    h.write(1, delete("/b/9", -1)).unwrap();
    h.write(1, create("/b/9", 0)).unwrap();
    // Sequential names are numbers, always above the bound until the counter's last nine digits
    // wrap; a non-numeric name's word is its hash.
    h.write(1, create("/b/x", 0)).unwrap();
    assert_eq!(h.prep_only(1, &create("/b/x", 0)).map(|_| ()), Err(ErrorCode::NodeExists));
    assert_eq!(created_path(&h.write(1, create("/b/s-", 2)).unwrap()), "/b/s-0000000006");
    assert_eq!(h.prep_only(1, &create("/b/s-0000000006", 0)).map(|_| ()), Err(ErrorCode::NodeExists));
    // A tree rebuilt from its nodes recomputes the bound from the children it has.
    let nodes: Vec<(String, warden_tree::Znode)> =
        h.tree.snapshot_nodes().map(|(p, n)| (p.to_string(), n.clone())).collect();
    let rebuilt = warden_tree::DataTree::from_snapshot(nodes, h.zxid).unwrap();
    rebuilt.check_invariants().unwrap();
    let ctx = h.ctx(1);
    assert_eq!(
        Prep::new().prep(&rebuilt, &ctx, h.zxid + 1, &create("/b/9", 0)).map(|_| ()),
        Err(ErrorCode::NodeExists)
    );
}
