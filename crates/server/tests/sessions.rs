//! Sessions (ZooKeeper's `ZooKeeperServer.processConnectRequest`, `SessionTrackerImpl`,
//! `DataTree.setWatches`): timeout negotiation, the handshake's shape, explicit close and expiry
//! with ephemeral cleanup, keep-alive by ping, resuming a session with id + password (also after
//! expiry and with a wrong password), and watches re-armed with setWatches / setWatches2 after a
//! reconnect.

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden_proto::{xid, ConnectRequest, EventType as Ev, Request, SetWatches, SetWatches2};
use zk::{Acls, CreateMode, EventType, SessionState};
use zookeeper_client as zk;

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

fn new_session_req(timeout_ms: i32, read_only: Option<bool>) -> ConnectRequest {
    ConnectRequest { protocol_version: 0, last_zxid_seen: 0, timeout_ms, session_id: 0, passwd: vec![0; 16], read_only }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_negotiation_and_handshake_shape_raw() {
    let srv = TestServer::start().await;
    for (asked, want) in [(100, 400), (5_000, 5_000), (60_000, 20_000)] {
        let (_c, resp) = RawClient::handshake(srv.addr, &new_session_req(asked, Some(false))).await;
        assert_eq!(resp.timeout_ms, want, "timeout {asked} must be clamped to [400, 20000]");
        assert_eq!(resp.protocol_version, 0);
        assert_ne!(resp.session_id, 0);
        assert_eq!(resp.passwd.len(), 16, "password is always 16 bytes");
        assert_eq!(resp.read_only, Some(false), "readOnly byte echoed when the request had it");
    }
    // go-zookeeper style: no readOnly byte -> none in the reply either.
    let (_c, resp) = RawClient::handshake(srv.addr, &new_session_req(5_000, None)).await;
    assert_eq!(resp.read_only, None, "legacy handshake must get a legacy reply");
    assert_eq!(resp.timeout_ms, 5_000);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_sessions_get_distinct_ids() {
    let srv = TestServer::start().await;
    let a = RawClient::new_session(srv.addr, 5_000).await;
    let b = RawClient::new_session(srv.addr, 5_000).await;
    assert_ne!(a.session_id, b.session_id);
    assert_ne!(a.passwd, b.passwd);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crate_sees_negotiated_timeout() {
    let srv = TestServer::start().await;
    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_millis(100))
        .connect(&srv.connect_string())
        .await
        .unwrap();
    assert_eq!(c.session_timeout(), Duration::from_millis(400));
    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(120))
        .connect(&srv.connect_string())
        .await
        .unwrap();
    assert_eq!(c.session_timeout(), Duration::from_secs(20));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_session_removes_ephemerals_and_fires_watches() {
    let srv = TestServer::start().await;
    let (a, b) = (srv.client().await, srv.client().await);
    b.create("/grp", b"", &persistent()).await.unwrap();
    a.create("/grp/m1", b"", &ephemeral()).await.unwrap();
    a.create("/grp/m2", b"", &ephemeral()).await.unwrap();
    let (_, w1) = b.check_and_watch_stat("/grp/m1").await.unwrap();
    let (_, w2) = b.check_and_watch_stat("/grp/m2").await.unwrap();
    let (_, wc) = b.list_and_watch_children("/grp").await.unwrap();
    drop(a);
    let e1 = within("m1 deleted", w1.changed()).await;
    let e2 = within("m2 deleted", w2.changed()).await;
    let ec = within("children changed", wc.changed()).await;
    assert_eq!((e1.event_type, e1.path.as_str()), (EventType::NodeDeleted, "/grp/m1"));
    assert_eq!((e2.event_type, e2.path.as_str()), (EventType::NodeDeleted, "/grp/m2"));
    assert_eq!((ec.event_type, ec.path.as_str()), (EventType::NodeChildrenChanged, "/grp"));
    assert_eq!(e1.zxid, e2.zxid, "all ephemerals go in the one closeSession txn");
    assert!(b.list_children("/grp").await.unwrap().is_empty());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_session_raw_then_resume_is_expired() {
    let srv = TestServer::start().await;
    let mut r = RawClient::new_session(srv.addr, 5_000).await;
    let (h, _) = r.call(&Request::Create(create_req("/rc", Some(b""), 1))).await;
    assert_eq!(h.err, 0);
    let (h, body) = r.call(&Request::CloseSession).await;
    assert_eq!(h.err, 0);
    assert_eq!(body, Some(warden_proto::Response::Empty));
    r.expect_closed().await;
    let c = srv.client().await;
    assert_eq!(c.check_stat("/rc").await.unwrap(), None, "closeSession deletes the session's ephemerals");
    let (mut r2, resp) = RawClient::resume(srv.addr, r.session_id, &r.passwd, r.last_zxid, 5_000).await;
    assert!(resp.timeout_ms <= 0, "closed session must be reported expired: {resp:?}");
    assert_eq!(resp.session_id, 0);
    assert_eq!(resp.passwd, vec![0; 16]);
    r2.expect_closed().await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_session_expires_and_ephemerals_go() {
    let srv = TestServer::start().await;
    let observer = srv.client().await;
    let mut r = RawClient::new_session(srv.addr, 400).await;
    assert_eq!(r.timeout_ms, 400);
    let (h, _) = r.call(&Request::Create(create_req("/silent", Some(b""), 1))).await;
    assert_eq!(h.err, 0);
    let last_packet = Instant::now();
    let (stat, watcher) = observer.check_and_watch_stat("/silent").await.unwrap();
    assert_eq!(stat.expect("ephemeral exists").ephemeral_owner, r.session_id);
    // The raw client now goes silent: no pings.
    let e = within("ephemeral deleted by expiry", watcher.changed()).await;
    let elapsed = last_packet.elapsed();
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeDeleted, "/silent"));
    assert!(elapsed >= Duration::from_millis(350), "session expired too early: {elapsed:?} < 400 ms timeout");
    assert!(
        elapsed < Duration::from_millis(3_000),
        "session expired too late: {elapsed:?} (timeout 400 ms, tick 200 ms)"
    );
    assert_eq!(observer.check_stat("/silent").await.unwrap(), None);
    // The server closes the expired session's connection.
    r.expect_closed().await;
    // And refuses to resume it.
    let (mut r2, resp) = RawClient::resume(srv.addr, r.session_id, &r.passwd, r.last_zxid, 400).await;
    assert!(resp.timeout_ms <= 0, "expired session resumed: {resp:?}");
    assert_eq!(resp.session_id, 0);
    r2.expect_closed().await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_keep_a_short_session_alive() {
    let srv = TestServer::start().await;
    let observer = srv.client().await;
    let mut r = RawClient::new_session(srv.addr, 400).await;
    r.call(&Request::Create(create_req("/alive", Some(b""), 1))).await;
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while start.elapsed() < Duration::from_millis(1_600) {
        tick.tick().await;
        let h = r.ping().await;
        assert_eq!((h.xid, h.err), (xid::PING, 0));
        assert!(
            observer.check_stat("/alive").await.unwrap().is_some(),
            "session expired despite pings after {:?}",
            start.elapsed()
        );
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_also_keep_a_session_alive() {
    let srv = TestServer::start().await;
    let observer = srv.client().await;
    let mut r = RawClient::new_session(srv.addr, 400).await;
    r.call(&Request::Create(create_req("/alive2", Some(b""), 1))).await;
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while start.elapsed() < Duration::from_millis(1_600) {
        tick.tick().await;
        let (h, _) = r.call(&Request::Exists(path_watch("/", false))).await;
        assert_eq!(h.err, 0);
        assert!(observer.check_stat("/alive2").await.unwrap().is_some(), "every request must touch the session");
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crate_session_expires_behind_black_hole() {
    let srv = TestServer::start().await;
    let proxy = Proxy::start(srv.addr).await;
    let observer = srv.client().await;
    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_millis(1_000))
        .connect(&proxy.connect_string())
        .await
        .unwrap();
    let mut states = c.state_watcher();
    c.create("/bh", b"", &ephemeral()).await.unwrap();
    let (_, watcher) = observer.check_and_watch_stat("/bh").await.unwrap();
    proxy.block();
    let e = within("ephemeral removed after expiry", watcher.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeDeleted, "/bh"));
    proxy.unblock();
    let state = within("client learns of expiry", async {
        loop {
            let s = states.changed().await;
            if s.is_terminated() {
                return s;
            }
        }
    })
    .await;
    assert_eq!(state, SessionState::Expired);
    assert_eq!(c.get_data("/").await.unwrap_err(), zk::Error::SessionExpired);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_keeps_session_and_rearms_watches() {
    let srv = TestServer::start().await;
    let proxy = Proxy::start(srv.addr).await;
    let w = srv.client().await;
    w.create("/rd", b"0", &persistent()).await.unwrap();
    w.create("/rc", b"", &persistent()).await.unwrap();
    w.create("/rx", b"", &persistent()).await.unwrap();
    w.create("/ru", b"", &persistent()).await.unwrap();
    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(&proxy.connect_string())
        .await
        .unwrap();
    let sid = c.session_id();
    c.create("/reph", b"", &ephemeral()).await.unwrap();
    let (_, _, wd) = c.get_and_watch_data("/rd").await.unwrap();
    let (none, we) = c.check_and_watch_stat("/rn").await.unwrap();
    assert_eq!(none, None);
    let (_, wc) = c.list_and_watch_children("/rc").await.unwrap();
    let (_, _, wx) = c.get_and_watch_data("/rx").await.unwrap();
    let (_, _, wu) = c.get_and_watch_data("/ru").await.unwrap();
    let mut states = c.state_watcher();

    proxy.block();
    within("client notices the cut", async { while states.changed().await != SessionState::Disconnected {} }).await;
    w.set_data("/rd", b"1", None).await.unwrap();
    w.create("/rn", b"", &persistent()).await.unwrap();
    w.create("/rc/k", b"", &persistent()).await.unwrap();
    w.delete("/rx", None).await.unwrap();
    proxy.unblock();
    within("client reconnects", async { while states.changed().await != SessionState::SyncConnected {} }).await;
    assert_eq!(c.session_id(), sid);

    let e = within("data change while away", wd.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeDataChanged, "/rd"));
    assert_eq!(e.zxid, -1, "events sent by setWatches catch-up carry zxid -1");
    let e = within("creation while away", we.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeCreated, "/rn"));
    let e = within("child change while away", wc.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeChildrenChanged, "/rc"));
    let e = within("deletion while away", wx.changed()).await;
    assert_eq!((e.event_type, e.path.as_str()), (EventType::NodeDeleted, "/rx"));
    // The unchanged node's watch is re-armed, not fired; it fires on the next change.
    let stat = w.set_data("/ru", b"1", None).await.unwrap();
    let e = within("re-armed watch fires", wu.changed()).await;
    assert_eq!((e.event_type, e.path.as_str(), e.zxid), (EventType::NodeDataChanged, "/ru", stat.mzxid));

    let eph = w.check_stat("/reph").await.unwrap().expect("ephemeral survives a reconnect");
    assert_eq!(eph.ephemeral_owner, sid.0);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_session_from_a_new_client() {
    let srv = TestServer::start().await;
    let observer = srv.client().await;
    let first = zk::Client::connector().with_detached().connect(&srv.connect_string()).await.unwrap();
    first.create("/handoff", b"", &ephemeral()).await.unwrap();
    let info = first.session().clone();
    let sid = first.session_id();
    drop(first);
    let second = zk::Client::connector().with_session(info).connect(&srv.connect_string()).await.unwrap();
    assert_eq!(second.session_id(), sid);
    assert_eq!(second.list_ephemerals("/").await.unwrap(), vec!["/handoff"]);
    let (_, watcher) = observer.check_and_watch_stat("/handoff").await.unwrap();
    drop(second);
    let e = within("ephemeral removed when the resumed session closes", watcher.changed()).await;
    assert_eq!(e.event_type, EventType::NodeDeleted);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_with_wrong_password_is_refused_raw() {
    let srv = TestServer::start().await;
    let r = RawClient::new_session(srv.addr, 5_000).await;
    let mut wrong = r.passwd.clone();
    wrong[0] ^= 0xff;
    let (mut r2, resp) = RawClient::resume(srv.addr, r.session_id, &wrong, 0, 5_000).await;
    assert!(resp.timeout_ms <= 0, "wrong password accepted: {resp:?}");
    assert_eq!(resp.session_id, 0);
    assert_eq!(resp.passwd, vec![0; 16]);
    assert_eq!(resp.read_only, Some(false));
    r2.expect_closed().await;
    // Unknown session id, too.
    let (mut r3, resp) = RawClient::resume(srv.addr, r.session_id ^ 0x5555, &r.passwd, 0, 5_000).await;
    assert!(resp.timeout_ms <= 0);
    r3.expect_closed().await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_closes_the_older_connection_raw() {
    let srv = TestServer::start().await;
    let mut r1 = RawClient::new_session(srv.addr, 5_000).await;
    r1.call(&Request::Create(create_req("/moved", Some(b""), 1))).await;
    let (mut r2, resp) = RawClient::resume(srv.addr, r1.session_id, &r1.passwd, r1.last_zxid, 5_000).await;
    assert_eq!(resp.session_id, r1.session_id);
    assert_eq!(resp.timeout_ms, 5_000);
    assert_eq!(resp.passwd, r1.passwd, "resumed session keeps its password");
    r1.expect_closed().await;
    let (h, body) = r2.call(&Request::GetEphemerals(warden_proto::GetEphemeralsRequest { prefix: "/".into() })).await;
    assert_eq!(h.err, 0);
    assert_eq!(body, Some(warden_proto::Response::Ephemerals(vec!["/moved".into()])));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_zxid_ahead_of_server_is_refused() {
    let srv = TestServer::start().await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let req = ConnectRequest { last_zxid_seen: 1 << 40, ..new_session_req(5_000, Some(false)) };
    s.write_all(&warden_proto::encode_frame(&req)).await.unwrap();
    let mut buf = Vec::new();
    let n = within("server closes", s.read_to_end(&mut buf)).await.unwrap_or(0);
    assert_eq!(n, 0, "a client whose lastZxidSeen is ahead must get no ConnectResponse, got {buf:?}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_watches_rearms_against_relative_zxid_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    for p in ["/sd", "/sc", "/sx", "/sxc", "/su", "/se"] {
        w.create(p, b"", &persistent()).await.unwrap();
    }
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    r.call(&Request::Exists(path_watch("/", false))).await; // learn the current zxid
    let (sid, passwd, rel) = (r.session_id, r.passwd.clone(), r.last_zxid);
    r.disconnect().await;

    w.set_data("/sd", b"1", None).await.unwrap();
    w.create("/sc/k", b"", &persistent()).await.unwrap();
    w.delete("/sx", None).await.unwrap();
    w.delete("/sxc", None).await.unwrap();
    w.create("/sn", b"", &persistent()).await.unwrap();

    let (mut r, resp) = RawClient::resume(srv.addr, sid, &passwd, rel, 10_000).await;
    assert_eq!(resp.session_id, sid);
    let sw = SetWatches {
        relative_zxid: rel,
        data: vec!["/sd".into(), "/sx".into(), "/su".into()],
        exist: vec!["/sn".into(), "/smissing".into(), "/se".into()],
        child: vec!["/sc".into(), "/sxc".into()],
    };
    let (h, _) = r.call_with_xid(xid::SET_WATCHES, &Request::SetWatches(sw)).await;
    assert_eq!((h.xid, h.err), (xid::SET_WATCHES, 0));
    let (h, _) = r.call(&Request::Exists(path_watch("/", false))).await;
    assert_eq!(h.err, 0);
    let mut got: Vec<(i64, i32, String)> =
        r.notifications.drain(..).map(|(h, e)| (h.zxid, e.event_type, e.path)).collect();
    got.sort_by(|a, b| a.2.cmp(&b.2));
    // /se exists and is an exist watch: NodeCreated now (as `DataTree.setWatches` does).
    let mut want = vec![
        (-1, Ev::NodeDataChanged.code(), "/sd".to_string()),
        (-1, Ev::NodeChildrenChanged.code(), "/sc".to_string()),
        (-1, Ev::NodeDeleted.code(), "/sx".to_string()),
        (-1, Ev::NodeDeleted.code(), "/sxc".to_string()),
        (-1, Ev::NodeCreated.code(), "/sn".to_string()),
        (-1, Ev::NodeCreated.code(), "/se".to_string()),
    ];
    want.sort_by(|a, b| a.2.cmp(&b.2));
    assert_eq!(got, want);

    // Armed ones fire later with real zxids.
    let s1 = w.set_data("/su", b"x", None).await.unwrap();
    let (s2, _) = w.create("/smissing", b"", &persistent()).await.unwrap();
    let (h1, e1) = r.next_notification().await;
    let (h2, e2) = r.next_notification().await;
    assert_eq!((h1.zxid, e1.event_type, e1.path.as_str()), (s1.mzxid, Ev::NodeDataChanged.code(), "/su"));
    assert_eq!((h2.zxid, e2.event_type, e2.path.as_str()), (s2.czxid, Ev::NodeCreated.code(), "/smissing"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_watches2_rearms_persistent_watches_raw() {
    let srv = TestServer::start().await;
    let w = srv.client().await;
    w.create("/sq", b"", &persistent()).await.unwrap();
    let mut r = RawClient::new_session(srv.addr, 10_000).await;
    r.call(&Request::Exists(path_watch("/", false))).await;
    let (sid, passwd, rel) = (r.session_id, r.passwd.clone(), r.last_zxid);
    r.disconnect().await;
    let (mut r, resp) = RawClient::resume(srv.addr, sid, &passwd, rel, 10_000).await;
    assert_eq!(resp.session_id, sid);
    let sw = SetWatches2 {
        base: warden_proto::request::SetWatches { relative_zxid: rel, ..Default::default() },
        persistent: vec!["/sp".into()],
        persistent_recursive: vec!["/sq".into()],
    };
    let (h, _) = r.call_with_xid(xid::SET_WATCHES, &Request::SetWatches2(sw)).await;
    assert_eq!((h.xid, h.err), (xid::SET_WATCHES, 0));
    assert!(r.notifications.is_empty(), "persistent watches never fire at setWatches2 time");
    w.create("/sp", b"", &persistent()).await.unwrap();
    w.create("/sq/a", b"", &persistent()).await.unwrap();
    w.set_data("/sp", b"1", None).await.unwrap();
    w.create("/sp/c", b"", &persistent()).await.unwrap();
    w.set_data("/sq/a", b"1", None).await.unwrap();
    let (h, _) = r.call(&Request::Exists(path_watch("/", false))).await;
    assert_eq!(h.err, 0);
    let got: Vec<(i32, String)> = r.notifications.drain(..).map(|(_, e)| (e.event_type, e.path)).collect();
    assert_eq!(
        got,
        vec![
            (Ev::NodeCreated.code(), "/sp".to_string()),
            (Ev::NodeCreated.code(), "/sq/a".to_string()),
            (Ev::NodeDataChanged.code(), "/sp".to_string()),
            (Ev::NodeChildrenChanged.code(), "/sp".to_string()),
            (Ev::NodeDataChanged.code(), "/sq/a".to_string()),
        ]
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_pipelined_behind_connect_request_belongs_to_the_new_session() {
    // ZooKeeper stops reading until the session exists, then runs the request in that session.
    let srv = TestServer::start().await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let mut bytes = warden_proto::encode_frame(&new_session_req(5_000, Some(false)));
    bytes.extend(Request::Create2(create_req("/pipe", Some(b""), 1)).encode_frame(1));
    s.write_all(&bytes).await.unwrap();
    let frames = within("two frames", async {
        let mut out = Vec::new();
        for _ in 0..2 {
            let mut len = [0u8; 4];
            s.read_exact(&mut len).await.expect("frame length");
            let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
            s.read_exact(&mut body).await.expect("frame body");
            out.push(body);
        }
        out
    })
    .await;
    let resp =
        <warden_proto::ConnectResponse as warden_proto::Record>::decode(&mut warden_proto::Reader::new(&frames[0]))
            .unwrap();
    assert!(resp.timeout_ms > 0 && resp.session_id != 0, "first frame must be the ConnectResponse: {resp:?}");
    let (h, body) = warden_proto::decode_reply(15, &frames[1]).unwrap();
    assert_eq!((h.xid, h.err), (1, 0));
    match body {
        Some(warden_proto::Response::Create2 { stat, .. }) => {
            assert_eq!(stat.ephemeral_owner, resp.session_id, "the pipelined ephemeral belongs to the new session")
        }
        other => panic!("{other:?}"),
    }
    srv.stop().await;
}
