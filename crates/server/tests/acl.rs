//! ACLs and authentication (ZooKeeper's `ZooKeeperServer.checkACL`, `PrepRequestProcessor.fixupACL`
//! and auth providers, plus the 3.9.2+ READ checks on exists and on watch delivery, the latter
//! ZOOKEEPER-4799): digest auth, NOAUTH per operation and permission, `auth` scheme expansion,
//! super digest, world read-only nodes, ip ids, getACL masking, invalid ACLs, auth failure, and the
//! ACL filter on watch delivery.

mod common;

use common::*;
use warden_proto::{add_watch_mode, AuthPacket, ErrorCode, EventType as Ev, Request};
use zk::{Acl, Acls, AuthId, CreateMode, Error, Permission};
use zookeeper_client as zk;

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn digest_acl(perm: Permission, user: &str, pw: &str) -> Acl {
    Acl::new(perm, AuthId::new("digest", &digest_id(user, pw)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_acl_denies_others_until_they_authenticate() {
    let srv = TestServer::start().await;
    let alice = srv.client().await;
    alice.auth("digest", b"alice:secret").await.unwrap();
    let acl = [digest_acl(Permission::ALL, "alice", "secret")];
    alice.create("/sec", b"s", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();
    alice.create("/sec/kid", b"", &persistent()).await.unwrap();
    assert_eq!(alice.get_data("/sec").await.unwrap().0, b"s");

    let other = srv.client().await;
    assert_eq!(other.get_data("/sec").await.unwrap_err(), Error::NoAuth, "getData");
    assert_eq!(other.set_data("/sec", b"x", None).await.unwrap_err(), Error::NoAuth, "setData");
    assert_eq!(other.list_children("/sec").await.unwrap_err(), Error::NoAuth, "getChildren");
    assert_eq!(other.get_children("/sec").await.unwrap_err(), Error::NoAuth, "getChildren2");
    assert_eq!(other.check_stat("/sec").await.unwrap_err(), Error::NoAuth, "exists checks READ since 3.9.2");
    assert_eq!(other.create("/sec/new", b"", &persistent()).await.unwrap_err(), Error::NoAuth, "create under it");
    assert_eq!(other.delete("/sec/kid", None).await.unwrap_err(), Error::NoAuth, "delete needs DELETE on the parent");
    assert_eq!(
        other.set_acl("/sec", &[Acl::new(Permission::ALL, AuthId::anyone())], None).await.unwrap_err(),
        Error::NoAuth
    );
    assert_eq!(other.get_acl("/sec").await.unwrap_err(), Error::NoAuth, "getACL needs READ or ADMIN");
    assert_eq!(
        other.count_descendants_number("/sec").await.unwrap_err(),
        Error::NoAuth,
        "getAllChildrenNumber checks READ"
    );
    // The unreadable node's children remain readable on their own ACL.
    assert_eq!(other.get_data("/sec/kid").await.unwrap().0, b"");

    // A wrong password authenticates (digest never fails) but grants nothing.
    other.auth("digest", b"alice:wrong").await.unwrap();
    assert_eq!(other.get_data("/sec").await.unwrap_err(), Error::NoAuth);
    // Ids accumulate: the right one now works.
    other.auth("digest", b"alice:secret").await.unwrap();
    assert_eq!(other.get_data("/sec").await.unwrap().0, b"s");
    other.set_data("/sec", b"t", None).await.unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_scheme_expands_to_authenticated_ids() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    assert_eq!(
        c.create("/creator", b"", &CreateMode::Persistent.with_acls(Acls::creator_all())).await.unwrap_err(),
        Error::InvalidAcl,
        "auth scheme with no authenticated id (ip does not count)"
    );
    c.auth("digest", b"alice:a").await.unwrap();
    c.auth("digest", b"bob:b").await.unwrap();
    c.create("/creator", b"", &CreateMode::Persistent.with_acls(Acls::creator_all())).await.unwrap();
    let (mut acl, _) = c.get_acl("/creator").await.unwrap();
    acl.sort_by(|a, b| a.id().cmp(b.id()));
    assert_eq!(acl, vec![digest_acl(Permission::ALL, "alice", "a"), digest_acl(Permission::ALL, "bob", "b")]);

    // setACL expands the same way, and the duplicate world entry is removed. (ADMIN is kept for
    // the caller so getACL shows the unmasked digests.)
    let new_acl = [
        Acl::new(Permission::READ | Permission::ADMIN, AuthId::authed()),
        Acl::new(Permission::READ, AuthId::anyone()),
        Acl::new(Permission::READ, AuthId::anyone()),
    ];
    c.set_acl("/creator", &new_acl, None).await.unwrap();
    let (mut acl, _) = c.get_acl("/creator").await.unwrap();
    acl.sort_by(|a, b| (a.scheme(), a.id()).cmp(&(b.scheme(), b.id())));
    assert_eq!(
        acl,
        vec![
            digest_acl(Permission::READ | Permission::ADMIN, "alice", "a"),
            digest_acl(Permission::READ | Permission::ADMIN, "bob", "b"),
            Acl::new(Permission::READ, AuthId::anyone()),
        ]
    );
    // A caller without ADMIN sees the same entries masked.
    let other = srv.client().await;
    let (mut acl, _) = other.get_acl("/creator").await.unwrap();
    acl.sort_by(|a, b| (a.scheme(), a.id()).cmp(&(b.scheme(), b.id())));
    assert_eq!(acl[0], Acl::new(Permission::READ | Permission::ADMIN, AuthId::new("digest", "alice:x")));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn super_digest_bypasses_acls() {
    let super_id = digest_id("super", "admin");
    let srv = TestServer::start_with(|cfg| cfg.super_digest = Some(super_id.clone())).await;
    let alice = srv.client().await;
    alice.auth("digest", b"alice:secret").await.unwrap();
    let acl = [digest_acl(Permission::ALL, "alice", "secret")];
    alice.create("/locked", b"l", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();
    alice.create("/locked/k", b"", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();

    let not_super = srv.client().await;
    not_super.auth("digest", b"super:wrong").await.unwrap();
    assert_eq!(not_super.get_data("/locked").await.unwrap_err(), Error::NoAuth);

    let root = srv.client().await;
    root.auth("digest", b"super:admin").await.unwrap();
    let mut who = root.list_auth_users().await.unwrap();
    who.sort_by(|a, b| (a.scheme(), a.user()).cmp(&(b.scheme(), b.user())));
    assert_eq!(
        who,
        vec![
            zk::AuthUser::new("digest", "super"),
            zk::AuthUser::new("ip", "127.0.0.1"),
            zk::AuthUser::new("super", "")
        ],
        "the super digest adds super:\"\" next to the digest id"
    );
    assert_eq!(root.get_data("/locked").await.unwrap().0, b"l");
    root.set_data("/locked", b"m", None).await.unwrap();
    root.delete("/locked/k", None).await.unwrap();
    let s = root.set_acl("/locked", &[Acl::new(Permission::READ, AuthId::anyone())], None).await.unwrap();
    assert_eq!(s.aversion, 1);
    root.delete("/locked", None).await.unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn world_read_only_node() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/ro", b"r", &CreateMode::Persistent.with_acls(Acls::anyone_read())).await.unwrap();
    let other = srv.client().await;
    assert_eq!(other.get_data("/ro").await.unwrap().0, b"r");
    assert!(other.check_stat("/ro").await.unwrap().is_some());
    assert_eq!(other.set_data("/ro", b"x", None).await.unwrap_err(), Error::NoAuth);
    assert_eq!(other.create("/ro/kid", b"", &persistent()).await.unwrap_err(), Error::NoAuth);
    assert_eq!(
        other.set_acl("/ro", &[Acl::new(Permission::ALL, AuthId::anyone())], None).await.unwrap_err(),
        Error::NoAuth
    );
    let (acl, _) = other.get_acl("/ro").await.unwrap();
    assert_eq!(acl, vec![Acl::new(Permission::READ, AuthId::anyone())], "READ suffices for getACL");
    // Deleting needs DELETE on the parent ("/", open), not on the node itself.
    other.delete("/ro", None).await.unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permission_bit_guards_its_operation() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let only = |p: Permission| [Acl::new(p, AuthId::anyone())];
    let read_create = [Acl::new(Permission::READ | Permission::CREATE, AuthId::anyone())];
    c.create("/pc", b"", &CreateMode::Persistent.with_acls(Acls::new(&read_create))).await.unwrap();
    c.create("/pc/k", b"", &persistent()).await.unwrap();
    assert_eq!(c.delete("/pc/k", None).await.unwrap_err(), Error::NoAuth, "no DELETE on the parent");

    let w = only(Permission::WRITE);
    c.create("/pw", b"", &CreateMode::Persistent.with_acls(Acls::new(&w))).await.unwrap();
    c.set_data("/pw", b"ok", None).await.unwrap();
    assert_eq!(c.get_data("/pw").await.unwrap_err(), Error::NoAuth);
    assert_eq!(c.set_acl("/pw", &only(Permission::ALL), None).await.unwrap_err(), Error::NoAuth, "setACL needs ADMIN");

    let a = only(Permission::ADMIN);
    c.create("/pa", b"", &CreateMode::Persistent.with_acls(Acls::new(&a))).await.unwrap();
    assert_eq!(c.get_data("/pa").await.unwrap_err(), Error::NoAuth);
    let (acl, _) = c.get_acl("/pa").await.unwrap();
    assert_eq!(acl, only(Permission::ADMIN).to_vec(), "ADMIN suffices for getACL");
    c.set_acl("/pa", &only(Permission::ALL), Some(0)).await.unwrap();
    c.set_data("/pa", b"now", None).await.unwrap();

    let d = only(Permission::DELETE);
    c.create("/pd", b"", &CreateMode::Persistent.with_acls(Acls::new(&d))).await.unwrap();
    assert_eq!(c.create("/pd/k", b"", &persistent()).await.unwrap_err(), Error::NoAuth, "no CREATE");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_acl_masks_digest_for_non_admins() {
    let srv = TestServer::start().await;
    let alice = srv.client().await;
    alice.auth("digest", b"alice:secret").await.unwrap();
    let acl = [Acl::new(Permission::READ, AuthId::anyone()), digest_acl(Permission::ALL, "alice", "secret")];
    alice.create("/masked", b"", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();
    let (got, _) = alice.get_acl("/masked").await.unwrap();
    assert_eq!(got, acl.to_vec(), "an ADMIN sees the real digest");
    let other = srv.client().await;
    let (got, _) = other.get_acl("/masked").await.unwrap();
    assert_eq!(
        got,
        vec![Acl::new(Permission::READ, AuthId::anyone()), Acl::new(Permission::ALL, AuthId::new("digest", "alice:x"))],
        "without ADMIN digest ids are masked to user:x"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_acls_are_rejected() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    for (scheme, id) in [("digest", "nocolon"), ("ip", "not-an-ip"), ("ip", "10.0.0.1/99"), ("nosuchscheme", "x")] {
        let acl = [Acl::new(Permission::ALL, AuthId::new(scheme, id))];
        assert_eq!(
            c.create("/bad", b"", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap_err(),
            Error::InvalidAcl,
            "{scheme}:{id}"
        );
    }
    c.create("/good", b"", &persistent()).await.unwrap();
    let acl = [Acl::new(Permission::ALL, AuthId::new("digest", "nocolon"))];
    assert_eq!(c.set_acl("/good", &acl, None).await.unwrap_err(), Error::InvalidAcl);
    assert_eq!(c.set_acl("/good", &[], None).await.unwrap_err(), Error::InvalidAcl, "empty ACL list");
    assert_eq!(c.get_acl("/good").await.unwrap().1.aversion, 0, "failed setACL changes nothing");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_acls_match_the_connection_address() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let local = [Acl::new(Permission::ALL, AuthId::new("ip", "127.0.0.1"))];
    let local_net = [Acl::new(Permission::ALL, AuthId::new("ip", "127.0.0.0/8"))];
    let elsewhere = [Acl::new(Permission::ALL, AuthId::new("ip", "10.0.0.0/8"))];
    c.create("/ip1", b"1", &CreateMode::Persistent.with_acls(Acls::new(&local))).await.unwrap();
    c.create("/ip2", b"2", &CreateMode::Persistent.with_acls(Acls::new(&local_net))).await.unwrap();
    c.create("/ip3", b"3", &CreateMode::Persistent.with_acls(Acls::new(&elsewhere))).await.unwrap();
    assert_eq!(c.get_data("/ip1").await.unwrap().0, b"1");
    assert_eq!(c.get_data("/ip2").await.unwrap().0, b"2");
    assert_eq!(c.get_data("/ip3").await.unwrap_err(), Error::NoAuth);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_auth_scheme_fails_the_session() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    assert_eq!(c.auth("nosuchscheme", b"whatever").await.unwrap_err(), Error::AuthFailed);
    let state = eventually("AuthFailed state", || async { c.state().is_terminated().then_some(c.state()) }).await;
    assert_eq!(state, zk::SessionState::AuthFailed);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_packet_replies_raw() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    r.call(&Request::Create(create_req("/z", Some(b""), 0))).await; // make lastZxid non-zero
    let ok = AuthPacket { auth_type: 0, scheme: "digest".into(), auth: b"u:p".to_vec() };
    let (h, _) = r.call_with_xid(warden_proto::xid::AUTH, &Request::Auth(ok)).await;
    assert_eq!((h.xid, h.zxid, h.err), (-4, 0, 0), "auth reply: xid -4, zxid 0, err 0");
    let bad = AuthPacket { auth_type: 0, scheme: "bogus".into(), auth: b"u:p".to_vec() };
    let (h, _) = r.call_with_xid(warden_proto::xid::AUTH, &Request::Auth(bad)).await;
    assert_eq!((h.xid, h.zxid, h.err), (-4, 0, ErrorCode::AuthFailed.code()));
    r.expect_closed().await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_resent_after_reconnect() {
    let srv = TestServer::start().await;
    let proxy = Proxy::start(srv.addr).await;
    let owner = srv.client().await;
    owner.auth("digest", b"alice:secret").await.unwrap();
    let acl = [digest_acl(Permission::ALL, "alice", "secret")];
    owner.create("/re", b"r", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();
    let c = zk::Client::connector().connect(&proxy.connect_string()).await.unwrap();
    c.auth("digest", b"alice:secret").await.unwrap();
    assert_eq!(c.get_data("/re").await.unwrap().0, b"r");
    let mut states = c.state_watcher();
    proxy.cut();
    within("reconnect", async { while states.changed().await != zk::SessionState::SyncConnected {} }).await;
    assert_eq!(c.get_data("/re").await.unwrap().0, b"r", "ids come back with the re-sent auth packet");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_ops_check_acls() {
    let srv = TestServer::start().await;
    let alice = srv.client().await;
    alice.auth("digest", b"alice:secret").await.unwrap();
    let acl = [digest_acl(Permission::ALL, "alice", "secret")];
    alice.create("/ma", b"", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();
    let other = srv.client().await;
    let mut w = other.new_multi_writer();
    w.add_check_version("/ma", 0).unwrap();
    assert_eq!(
        w.commit().await.unwrap_err(),
        zk::MultiWriteError::OperationFailed { index: 0, source: Error::NoAuth },
        "check needs READ"
    );
    let mut w = other.new_multi_writer();
    w.add_create("/free", b"", &persistent()).unwrap();
    w.add_set_data("/ma", b"x", None).unwrap();
    assert_eq!(w.commit().await.unwrap_err(), zk::MultiWriteError::OperationFailed { index: 1, source: Error::NoAuth });
    assert_eq!(other.check_stat("/free").await.unwrap(), None);
    let mut rd = other.new_multi_reader();
    rd.add_get_data("/ma").unwrap();
    rd.add_get_data("/").unwrap();
    let res = rd.commit().await.unwrap();
    assert!(matches!(res[0], zk::MultiReadResult::Error { err: Error::NoAuth }), "{:?}", res[0]);
    assert!(matches!(res[1], zk::MultiReadResult::Data { .. }), "{:?}", res[1]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_are_filtered_by_read_permission_raw() {
    // 3.8.4+/3.9.2+ (ZOOKEEPER-4799): no READ on the node the event is about -> no event.
    let srv = TestServer::start().await;
    let alice = srv.client().await;
    alice.auth("digest", b"alice:secret").await.unwrap();
    let secret = [digest_acl(Permission::ALL, "alice", "secret")];
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    let (h, _) = r
        .call(&Request::AddWatch(warden_proto::AddWatchRequest {
            path: "/f".into(),
            mode: add_watch_mode::PERSISTENT_RECURSIVE,
        }))
        .await;
    assert_eq!(h.err, 0);
    alice.create("/f", b"", &persistent()).await.unwrap();
    alice.create("/f/secret", b"", &CreateMode::Persistent.with_acls(Acls::new(&secret))).await.unwrap();
    alice.create("/f/public", b"", &persistent()).await.unwrap();
    alice.set_data("/f/secret", b"x", None).await.unwrap();
    alice.set_data("/f/public", b"x", None).await.unwrap();
    let (h, _) = r.call(&Request::Exists(path_watch("/", false))).await;
    assert_eq!(h.err, 0);
    let got: Vec<(i32, String)> = r.notifications.drain(..).map(|(_, e)| (e.event_type, e.path)).collect();
    assert_eq!(
        got,
        vec![
            (Ev::NodeCreated.code(), "/f".to_string()),
            (Ev::NodeCreated.code(), "/f/public".to_string()),
            (Ev::NodeDataChanged.code(), "/f/public".to_string()),
        ]
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_with_auth_option() {
    // The crate (like the Java client) pipelines its auth packets right behind the ConnectRequest.
    let srv = TestServer::start().await;
    let owner = srv.client().await;
    owner.auth("digest", b"alice:secret").await.unwrap();
    let acl = [digest_acl(Permission::ALL, "alice", "secret")];
    owner.create("/wa", b"w", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();
    let c = within(
        "connect with an auth option",
        zk::Client::connector().with_auth("digest", b"alice:secret").connect(&srv.connect_string()),
    )
    .await
    .expect("connect with auth");
    assert_eq!(c.get_data("/wa").await.unwrap().0, b"w");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_pipelined_behind_connect_request_raw() {
    use tokio::io::AsyncWriteExt;
    let srv = TestServer::start().await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let req = warden_proto::ConnectRequest::new_session(5_000);
    let mut bytes = warden_proto::encode_frame(&req);
    let auth = AuthPacket { auth_type: 0, scheme: "digest".into(), auth: b"u:p".to_vec() };
    bytes.extend(Request::Auth(auth).encode_frame(warden_proto::xid::AUTH));
    s.write_all(&bytes).await.unwrap();
    let mut frames = read_frames(&mut s, 2).await;
    let first = frames.remove(0);
    assert_eq!(first.len(), 37, "first frame must be the 37-byte ConnectResponse, got {first:?}");
    let resp = <warden_proto::ConnectResponse as warden_proto::Record>::decode(&mut warden_proto::Reader::new(&first))
        .unwrap();
    assert!(resp.timeout_ms > 0 && resp.session_id != 0, "{resp:?}");
    let (h, _) = warden_proto::decode_reply(100, &frames[0]).unwrap();
    assert_eq!((h.xid, h.err), (warden_proto::xid::AUTH, 0));
    srv.stop().await;
}

async fn read_frames(s: &mut tokio::net::TcpStream, n: usize) -> Vec<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    within("frames", async {
        let mut out = Vec::new();
        for _ in 0..n {
            let mut len = [0u8; 4];
            s.read_exact(&mut len).await.expect("frame length");
            let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
            s.read_exact(&mut body).await.expect("frame body");
            out.push(body);
        }
        out
    })
    .await
}
