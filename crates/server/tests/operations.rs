//! Every client operation through `zookeeper-client`, with the Stat bookkeeping ZooKeeper defines
//! (`PrepRequestProcessor`, `FinalRequestProcessor`, `DataTree`): create in all modes and
//! sequential naming, create2 stats, versioned delete / setData / setACL, the reads,
//! getAllChildrenNumber, getEphemerals, sync and whoAmI. A few behaviours the crate cannot express
//! are checked with the raw client.

mod common;

use common::*;
use warden_proto::{ErrorCode, Request, Response};
use zk::{Acls, CreateMode, Error};
use zookeeper_client as zk;

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_persistent_returns_create2_stat() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let (stat, seq) = c.create("/a", b"hello", &persistent()).await.unwrap();
    assert_eq!(seq.into_i64(), -1, "non-sequential create has no sequence");
    assert!(!stat.is_invalid(), "create2 must return a real Stat");
    assert!(stat.czxid > 0);
    assert_eq!(stat.mzxid, stat.czxid, "mzxid == czxid at create");
    assert_eq!(stat.pzxid, stat.czxid, "pzxid == czxid at create");
    assert_eq!(stat.ctime, stat.mtime);
    assert!(stat.ctime > 1_600_000_000_000, "ctime is wall-clock ms, got {}", stat.ctime);
    assert_eq!((stat.version, stat.cversion, stat.aversion), (0, 0, 0));
    assert_eq!(stat.ephemeral_owner, 0);
    assert_eq!(stat.data_length, 5);
    assert_eq!(stat.num_children, 0);

    let (data, got) = c.get_data("/a").await.unwrap();
    assert_eq!(data, b"hello");
    assert_eq!(got, stat, "getData stat equals the create2 stat");
    let exists = c.check_stat("/a").await.unwrap().expect("exists");
    assert_eq!(exists, stat);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_create_opcode_1_works() {
    // A 3.4-era client uses opcode 1 (CreateResponse: path only).
    let srv = TestServer::start().await;
    let c = zk::Client::connector().with_server_version(3, 4, 0).connect(&srv.connect_string()).await.unwrap();
    let (stat, _) = c.create("/old", b"x", &persistent()).await.unwrap();
    assert!(stat.is_invalid(), "opcode 1 carries no stat");
    let (stat, seq) =
        c.create("/old/s-", b"", &CreateMode::PersistentSequential.with_acls(Acls::anyone_all())).await.unwrap();
    assert!(stat.is_invalid());
    assert_eq!(seq.to_string(), "0000000000");
    assert_eq!(c.list_children("/old").await.unwrap(), vec!["s-0000000000".to_string()]);
    assert_eq!(c.get_data("/old").await.unwrap().0, b"x");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_create_sets_owner_and_forbids_children() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let (stat, _) = c.create("/e", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
    assert_eq!(stat.ephemeral_owner, c.session_id().0, "ephemeralOwner is the session id");
    assert_eq!(c.get_data("/e").await.unwrap().1.ephemeral_owner, c.session_id().0);
    assert_eq!(c.create("/e/child", b"", &persistent()).await.unwrap_err(), Error::NoChildrenForEphemerals);
    assert_eq!(
        c.create("/e/child", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap_err(),
        Error::NoChildrenForEphemerals
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_names_use_parent_cversion_with_ten_digits() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/q", b"", &persistent()).await.unwrap();
    let seq_p = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    let seq_e = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());

    let (_, s0) = c.create("/q/job-", b"", &seq_p).await.unwrap();
    assert_eq!(s0.into_i64(), 0);
    // A non-sequential child create also bumps the counter.
    c.create("/q/plain", b"", &persistent()).await.unwrap();
    let (stat2, s2) = c.create("/q/job-", b"", &seq_e).await.unwrap();
    assert_eq!(s2.into_i64(), 2, "counter counts every child create");
    assert_eq!(stat2.ephemeral_owner, c.session_id().0);
    // Deletes do not move the counter back.
    c.delete("/q/job-0000000000", None).await.unwrap();
    c.delete("/q/plain", None).await.unwrap();
    let (_, s3) = c.create("/q/job-", b"", &seq_p).await.unwrap();
    assert_eq!(s3.into_i64(), 3, "deletes must not reuse sequence numbers");
    // Path ending in "/" gets the bare suffix.
    let (_, s4) = c.create("/q/", b"", &seq_p).await.unwrap();
    assert_eq!(s4.into_i64(), 4);

    let mut kids = c.list_children("/q").await.unwrap();
    kids.sort();
    assert_eq!(kids, vec!["0000000004", "job-0000000002", "job-0000000003"]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_stat_tracks_children() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let (p0, _) = c.create("/p", b"data", &persistent()).await.unwrap();
    let (k1, _) = c.create("/p/k1", b"", &persistent()).await.unwrap();
    let (k2, _) = c.create("/p/k2", b"", &persistent()).await.unwrap();
    let (_, p1) = c.get_children("/p").await.unwrap();
    assert_eq!(p1.num_children, 2);
    assert_eq!(p1.cversion, 2);
    assert_eq!(p1.pzxid, k2.czxid, "pzxid = zxid of the last child change");
    assert_eq!(p1.mzxid, p0.mzxid, "child changes do not touch mzxid");
    assert_eq!(p1.version, 0, "child changes do not touch version");
    assert!(k1.czxid < k2.czxid);

    c.delete("/p/k1", None).await.unwrap();
    let (kids, p2) = c.get_children("/p").await.unwrap();
    assert_eq!(kids, vec!["k2".to_string()]);
    assert_eq!(p2.num_children, 1);
    assert_eq!(p2.cversion, 3, "a child delete also bumps the visible cversion");
    assert!(p2.pzxid > k2.czxid, "delete moves pzxid forward");
    assert_eq!(p2.data_length, 4);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_errors() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/x", b"", &persistent()).await.unwrap();
    assert_eq!(c.create("/x", b"", &persistent()).await.unwrap_err(), Error::NodeExists);
    assert_eq!(c.create("/missing/child", b"", &persistent()).await.unwrap_err(), Error::NoNode);
    assert_eq!(c.create("/zookeeper", b"", &persistent()).await.unwrap_err(), Error::NodeExists);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_data_versions() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let (s0, _) = c.create("/v", b"one", &persistent()).await.unwrap();
    let s1 = c.set_data("/v", b"two!", Some(0)).await.unwrap();
    assert_eq!(s1.version, 1);
    assert!(s1.mzxid > s0.mzxid);
    assert_eq!(s1.czxid, s0.czxid);
    assert_eq!(s1.pzxid, s0.pzxid, "setData leaves pzxid alone");
    assert_eq!(s1.data_length, 4);
    assert!(s1.mtime >= s0.mtime);
    assert_eq!(s1.ctime, s0.ctime);
    assert_eq!(c.set_data("/v", b"three", Some(0)).await.unwrap_err(), Error::BadVersion);
    assert_eq!(c.get_data("/v").await.unwrap().0, b"two!", "failed setData changes nothing");
    let s2 = c.set_data("/v", b"", None).await.unwrap();
    assert_eq!(s2.version, 2, "version -1 skips the check");
    assert_eq!(s2.data_length, 0);
    assert_eq!(c.set_data("/nope", b"", None).await.unwrap_err(), Error::NoNode);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_versions_and_errors() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/d", b"", &persistent()).await.unwrap();
    c.create("/d/child", b"", &persistent()).await.unwrap();
    assert_eq!(c.delete("/d", None).await.unwrap_err(), Error::NotEmpty);
    c.set_data("/d/child", b"x", None).await.unwrap();
    assert_eq!(c.delete("/d/child", Some(0)).await.unwrap_err(), Error::BadVersion);
    assert!(c.check_stat("/d/child").await.unwrap().is_some());
    c.delete("/d/child", Some(1)).await.unwrap();
    assert_eq!(c.check_stat("/d/child").await.unwrap(), None);
    assert_eq!(c.delete("/d/child", None).await.unwrap_err(), Error::NoNode);
    c.delete("/d", Some(0)).await.unwrap();
    assert_eq!(c.get_data("/d").await.unwrap_err(), Error::NoNode);
    assert_eq!(c.list_children("/d").await.unwrap_err(), Error::NoNode);
    assert_eq!(c.get_children("/d").await.unwrap_err(), Error::NoNode);
    assert_eq!(c.get_acl("/d").await.unwrap_err(), Error::NoNode);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_nodes_cannot_be_deleted() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    for p in ["/zookeeper", "/zookeeper/quota", "/zookeeper/config"] {
        let err = c.delete(p, None).await.unwrap_err();
        assert!(matches!(err, Error::BadArguments(_)), "delete {p}: expected BADARGUMENTS, got {err:?}");
        assert!(c.check_stat(p).await.unwrap().is_some(), "{p} must still exist");
    }
    let mut kids = c.list_children("/zookeeper").await.unwrap();
    kids.sort();
    assert_eq!(kids, vec!["config", "quota"]);
    let (acl, _) = c.get_acl("/zookeeper/config").await.unwrap();
    assert_eq!(
        acl,
        vec![zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())],
        "/zookeeper/config is READ_ACL_UNSAFE"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_acl_versions_and_get_acl() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let (s0, _) = c.create("/acl", b"", &persistent()).await.unwrap();
    let (acl, st) = c.get_acl("/acl").await.unwrap();
    assert_eq!(acl, vec![zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())]);
    assert_eq!(st, s0);

    let new_acl = [zk::Acl::new(zk::Permission::READ | zk::Permission::ADMIN, zk::AuthId::anyone())];
    assert_eq!(c.set_acl("/acl", &new_acl, Some(1)).await.unwrap_err(), Error::BadVersion);
    let s1 = c.set_acl("/acl", &new_acl, Some(0)).await.unwrap();
    assert_eq!(s1.aversion, 1);
    assert_eq!(s1.version, 0, "setACL leaves version alone");
    assert_eq!(s1.mzxid, s0.mzxid, "setACL leaves mzxid alone");
    let (acl, st) = c.get_acl("/acl").await.unwrap();
    assert_eq!(acl, new_acl.to_vec());
    assert_eq!(st.aversion, 1);
    assert_eq!(c.set_acl("/acl", &new_acl, Some(0)).await.unwrap_err(), Error::BadVersion);
    assert_eq!(c.set_acl("/acl", &new_acl, None).await.unwrap().aversion, 2);
    assert_eq!(c.set_acl("/missing", &new_acl, None).await.unwrap_err(), Error::NoNode);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exists_and_children_listing() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    assert_eq!(c.check_stat("/nothing").await.unwrap(), None);
    c.create("/l", b"", &persistent()).await.unwrap();
    for k in ["c", "a", "b"] {
        c.create(&format!("/l/{k}"), b"", &persistent()).await.unwrap();
    }
    let mut names = c.list_children("/l").await.unwrap();
    names.sort();
    assert_eq!(names, vec!["a", "b", "c"], "children are names, not paths");
    let (mut names2, stat) = c.get_children("/l").await.unwrap();
    names2.sort();
    assert_eq!(names2, names);
    assert_eq!(stat.num_children, 3);
    assert_eq!(c.check_stat("/l").await.unwrap().unwrap(), stat);
    let mut root = c.list_children("/").await.unwrap();
    root.sort();
    assert_eq!(root, vec!["l", "zookeeper"]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_all_children_number() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    assert_eq!(
        c.count_descendants_number("/").await.unwrap(),
        3,
        "empty tree: /zookeeper, /zookeeper/quota, /zookeeper/config"
    );
    c.create("/n", b"", &persistent()).await.unwrap();
    c.create("/n/a", b"", &persistent()).await.unwrap();
    c.create("/n/a/b", b"", &persistent()).await.unwrap();
    c.create("/n/c", b"", &persistent()).await.unwrap();
    c.create("/nx", b"", &persistent()).await.unwrap();
    assert_eq!(c.count_descendants_number("/n").await.unwrap(), 3, "descendants only, and not /nx");
    assert_eq!(c.count_descendants_number("/n/a/b").await.unwrap(), 0);
    assert_eq!(c.count_descendants_number("/").await.unwrap(), 8);
    assert_eq!(c.count_descendants_number("/missing").await.unwrap_err(), Error::NoNode);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_ephemerals_lists_own_session_with_prefix() {
    let srv = TestServer::start().await;
    let a = srv.client().await;
    let b = srv.client().await;
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    a.create("/dir", b"", &persistent()).await.unwrap();
    a.create("/dir/e1", b"", &eph).await.unwrap();
    a.create("/dir/e10", b"", &eph).await.unwrap();
    a.create("/top", b"", &eph).await.unwrap();
    a.create("/dir/p", b"", &persistent()).await.unwrap();
    b.create("/dir/b1", b"", &eph).await.unwrap();

    let mut all = a.list_ephemerals("/").await.unwrap();
    all.sort();
    assert_eq!(all, vec!["/dir/e1", "/dir/e10", "/top"]);
    let mut pre = a.list_ephemerals("/dir/e1").await.unwrap();
    pre.sort();
    assert_eq!(pre, vec!["/dir/e1", "/dir/e10"], "prefix is a plain string match");
    assert_eq!(b.list_ephemerals("/").await.unwrap(), vec!["/dir/b1"]);
    assert!(a.list_ephemerals("/nothing").await.unwrap().is_empty());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_succeeds_and_orders_with_writes() {
    let srv = TestServer::start().await;
    let a = srv.client().await;
    let b = srv.client().await;
    a.create("/s", b"1", &persistent()).await.unwrap();
    a.set_data("/s", b"2", None).await.unwrap();
    b.sync("/s").await.unwrap();
    assert_eq!(b.get_data("/s").await.unwrap().0, b"2");
    // sync on a missing path is still fine: the path is not used semantically.
    b.sync("/not/there").await.unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_reply_echoes_path_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let (h, body) = r.call(&Request::Sync(warden_proto::PathRequest { path: "/any/path".into() })).await;
    assert_eq!(h.err, 0);
    assert_eq!(body, Some(Response::Sync { path: "/any/path".into() }));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_am_i_lists_ip_and_digest() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let users = c.list_auth_users().await.unwrap();
    assert_eq!(users, vec![zk::AuthUser::new("ip", "127.0.0.1")], "every connection has its ip id");
    c.auth("digest", b"alice:pw").await.unwrap();
    let mut users = c.list_auth_users().await.unwrap();
    users.sort_by(|a, b| a.scheme().cmp(b.scheme()));
    assert_eq!(users, vec![zk::AuthUser::new("digest", "alice"), zk::AuthUser::new("ip", "127.0.0.1")]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_and_empty_data_stay_distinct_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let (h, _) = r.call(&Request::Create(create_req("/null", None, 0))).await;
    assert_eq!(h.err, 0);
    let (h, _) = r.call(&Request::Create(create_req("/empty", Some(b""), 0))).await;
    assert_eq!(h.err, 0);
    let (_, body) = r.call(&Request::GetData(path_watch("/null", false))).await;
    match body {
        Some(Response::GetData { data, stat }) => {
            assert_eq!(data, None, "null data comes back as a null buffer");
            assert_eq!(stat.data_length, 0);
        }
        other => panic!("unexpected {other:?}"),
    }
    let (_, body) = r.call(&Request::GetData(path_watch("/empty", false))).await;
    match body {
        Some(Response::GetData { data, .. }) => assert_eq!(data, Some(vec![])),
        other => panic!("unexpected {other:?}"),
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let bad = ErrorCode::BadArguments.code();
    let (h, _) = r.call(&Request::Create(create_req("/t", Some(b""), 0))).await;
    assert_eq!(h.err, 0);
    // The parent ("/t" or "/") exists, so the full-path validation decides.
    for p in ["/t/", "no-slash", "/t/.", "/t/..", "/ctl\u{1}", "/t/\u{7f}x"] {
        let (h, body) = r.call(&Request::Create(create_req(p, Some(b""), 0))).await;
        assert_eq!(h.err, bad, "create {p:?} must be BADARGUMENTS");
        assert_eq!(body, None, "no body on error");
    }
    // Check order (`PrepRequestProcessor`): the parent lookup comes before full-path validation, so
    // an empty segment whose "parent" ("/t/") does not exist is NONODE, as in ZooKeeper.
    let (h, _) = r.call(&Request::Create(create_req("/t//b", Some(b""), 0))).await;
    assert_eq!(h.err, ErrorCode::NoNode.code(), "create /t//b");
    // Invalid create flags.
    let (h, _) = r.call(&Request::Create(create_req("/flags", Some(b""), 7))).await;
    assert_eq!(h.err, bad, "flags 7 is not a CreateMode");
    // A TTL given to a non-TTL mode.
    let req = warden_proto::CreateTtlRequest {
        path: "/ttlbad".into(),
        data: Some(vec![]),
        acl: open_acl(),
        flags: 0,
        ttl: 1000,
    };
    let (h, _) = r.call(&Request::CreateTtl(req)).await;
    assert_eq!(h.err, bad, "createTTL with PERSISTENT flags");
    // TTL out of range.
    let req = warden_proto::CreateTtlRequest {
        path: "/ttlbad".into(),
        data: Some(vec![]),
        acl: open_acl(),
        flags: 5,
        ttl: 0,
    };
    let (h, _) = r.call(&Request::CreateTtl(req)).await;
    assert_eq!(h.err, bad, "ttl 0");
    // Empty ACL list.
    let req = warden_proto::CreateRequest { path: "/noacl".into(), data: Some(vec![]), acl: vec![], flags: 0 };
    let (h, _) = r.call(&Request::Create(req)).await;
    assert_eq!(h.err, ErrorCode::InvalidAcl.code(), "empty ACL list");
    // Nothing was created.
    let (_, body) = r.call(&Request::GetChildren(path_watch("/", false))).await;
    match body {
        Some(Response::Children { mut children }) => {
            children.sort();
            assert_eq!(children, vec!["t".to_string(), "zookeeper".to_string()]);
        }
        other => panic!("unexpected {other:?}"),
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_check_is_unimplemented_and_closes() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    // Opcode 13 is only valid inside multi; encode it by hand.
    let mut w = warden_proto::Writer::new();
    w.write_i32(42); // xid
    w.write_i32(13); // check
    w.write_ustring("/");
    w.write_i32(-1);
    let body = w.into_inner();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    r.write(&frame).await;
    let (h, _) = r.reply_to(42, 13).await;
    assert_eq!(h.err, ErrorCode::Unimplemented.code());
    r.expect_closed().await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_zxid_tracks_last_processed() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let (h1, body) = r.call(&Request::Create2(create_req("/z", Some(b"a"), 0))).await;
    let czxid = match body {
        Some(Response::Create2 { path, stat }) => {
            assert_eq!(path, "/z");
            stat.czxid
        }
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(h1.zxid, czxid, "a write's reply header carries its zxid");
    let (h2, _) = r.call(&Request::Exists(path_watch("/z", false))).await;
    assert_eq!(h2.zxid, czxid, "a read's reply header carries the last processed zxid");
    let ping = r.ping().await;
    assert_eq!(ping.xid, warden_proto::xid::PING);
    assert_eq!(ping.err, 0);
    assert_eq!(ping.zxid, czxid);
    let (h3, _) = r.call(&Request::Exists(path_watch("/missing", false))).await;
    assert_eq!(h3.err, ErrorCode::NoNode.code());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_opcode_is_unimplemented_and_closes() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let mut w = warden_proto::Writer::new();
    w.write_i32(7); // xid
    w.write_i32(999); // no such opcode
    let body = w.into_inner();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    r.write(&frame).await;
    let (h, _) = r.reply_to(7, 999).await;
    assert_eq!((h.xid, h.err), (7, ErrorCode::Unimplemented.code()));
    r.expect_closed().await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_ephemerals_empty_prefix_means_all_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    r.call(&Request::Create(create_req("/e1", Some(b""), 1))).await;
    r.call(&Request::Create(create_req("/e2", Some(b""), 1))).await;
    let (h, body) = r.call(&Request::GetEphemerals(warden_proto::GetEphemeralsRequest { prefix: "".into() })).await;
    assert_eq!(h.err, 0);
    match body {
        Some(Response::Ephemerals(mut v)) => {
            v.sort();
            assert_eq!(v, vec!["/e1".to_string(), "/e2".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    srv.stop().await;
}
