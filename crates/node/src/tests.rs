//! Drives one node through scripted inputs and checks the exact outputs.

use std::net::SocketAddr;

use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::header::ReplyHeader;
use warden_proto::request::{CreateRequest, MultiOp, PathVersion, PathWatch, Request, SetDataRequest};
use warden_proto::response::{decode_notification, decode_reply, Response};
use warden_proto::{Acl, ErrorCode, Record, Txn};

use crate::session::session_password;
use crate::{Clock, Input, Node, NodeConfig, Output, SaslOutcome};

struct Harness {
    node: Node,
    now: Clock,
    out: Vec<Output>,
}

fn addr() -> SocketAddr {
    "127.0.0.1:5000".parse().unwrap()
}

impl Harness {
    fn new() -> Self {
        Self::with(NodeConfig::default())
    }

    /// A harness with short session timeouts and `cfg`'s other settings.
    fn with(cfg: NodeConfig) -> Self {
        let cfg = NodeConfig { tick_time_ms: 100, min_session_timeout_ms: 200, max_session_timeout_ms: 10_000, ..cfg };
        let now = Clock { mono_ms: 1_000, wall_ms: 1_700_000_000_000 };
        Self { node: Node::new(cfg, now), now, out: Vec::new() }
    }

    /// Steps one input, then reports every persisted txn durable (in-memory storage), and returns the
    /// frames sent and connections closed.
    fn step(&mut self, input: Input) -> Vec<Output> {
        self.node.step(self.now, input, &mut self.out);
        self.node.check_invariants().unwrap();
        let mut all = Vec::new();
        while !self.out.is_empty() {
            let batch = std::mem::take(&mut self.out);
            let durable = batch
                .iter()
                .filter_map(|o| match o {
                    Output::Persist { hdr, .. } => Some(hdr.zxid),
                    _ => None,
                })
                .max();
            all.extend(batch.into_iter().filter(|o| !matches!(o, Output::Persist { .. })));
            if let Some(zxid) = durable {
                self.node.step(self.now, Input::Durable { zxid }, &mut self.out);
                self.node.check_invariants().unwrap();
            }
        }
        all
    }

    fn connect(&mut self, conn: u64, session_id: i64, passwd: Vec<u8>) -> ConnectResponse {
        let req =
            ConnectRequest { timeout_ms: 1_000, session_id, passwd, read_only: Some(false), ..Default::default() };
        let out = self.step(Input::Connect { conn, addr: addr(), req, x509: None });
        let Some(Output::Send { frame, .. }) = out.first() else { panic!("no handshake reply: {out:?}") };
        ConnectResponse::from_bytes(&frame[4..]).unwrap()
    }

    fn request(&mut self, conn: u64, xid: i32, req: Request) -> (ReplyHeader, Option<Response>, Vec<Output>) {
        let op = req.op_code().code();
        let out = self.step(Input::Request { conn, xid, req });
        let reply = out
            .iter()
            .find_map(|o| match o {
                Output::Send { frame, completes_request: true, .. } => Some(frame.clone()),
                _ => None,
            })
            .expect("a reply");
        let (hdr, body) = decode_reply(op, &reply[4..]).unwrap();
        (hdr, body, out)
    }
}

fn create(path: &str, flags: i32) -> Request {
    Request::Create(CreateRequest { path: path.into(), data: Some(b"x".to_vec()), acl: Acl::open_unsafe(), flags })
}

#[test]
fn handshake_creates_a_session_with_javas_password() {
    let mut h = Harness::new();
    let resp = h.connect(1, 0, vec![0; 16]);
    assert_ne!(resp.session_id, 0);
    assert_eq!(resp.timeout_ms, 1_000);
    assert_eq!(resp.passwd, session_password(resp.session_id).to_vec());
    assert_eq!(resp.read_only, Some(false));
    assert_eq!(h.node.last_processed_zxid(), 1, "createSession consumes a zxid");
}

#[test]
fn failed_writes_consume_a_zxid_and_replies_keep_request_order() {
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    let (hdr, body, _) = h.request(1, 1, create("/a", 0));
    assert_eq!((hdr.xid, hdr.err, hdr.zxid), (1, 0, 2));
    assert_eq!(body, Some(Response::Create { path: "/a".into() }));
    let (hdr, body, _) = h.request(1, 2, create("/a", 0));
    assert_eq!((hdr.err, hdr.zxid, body), (ErrorCode::NodeExists.code(), 3, None));
    let (hdr, _, _) = h.request(1, 3, Request::GetData(PathWatch { path: "/a".into(), watch: false }));
    assert_eq!((hdr.xid, hdr.err, hdr.zxid), (3, 0, 3));
}

#[test]
fn data_watch_fires_before_the_reply_that_changed_the_node() {
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    h.request(1, 1, create("/w", 0));
    h.request(1, 2, Request::GetData(PathWatch { path: "/w".into(), watch: true }));
    let (_, _, out) = h.request(1, 3, Request::Delete(PathVersion { path: "/w".into(), version: -1 }));
    let frames: Vec<&bytes::Bytes> = out
        .iter()
        .filter_map(|o| match o {
            Output::Send { frame, .. } => Some(frame),
            _ => None,
        })
        .collect();
    assert_eq!(frames.len(), 2, "{out:?}");
    let (nh, ev) = decode_notification(&frames[0][4..]).unwrap();
    assert_eq!((nh.xid, ev.event_type, ev.path.as_str()), (-1, 2, "/w"));
    assert_eq!(nh.zxid, h.node.last_processed_zxid(), "3.9: notification carries the txn zxid");
}

#[test]
fn a_storms_notifications_share_one_encoded_frame() {
    let mut h = Harness::new();
    for conn in 1..=5 {
        h.connect(conn, 0, vec![0; 16]);
    }
    h.request(1, 1, create("/storm", 0));
    for conn in 1..=5 {
        h.request(conn, 2, Request::GetData(PathWatch { path: "/storm".into(), watch: true }));
    }
    let set = Request::SetData(SetDataRequest { path: "/storm".into(), data: Some(b"y".to_vec().into()), version: -1 });
    let (_, _, out) = h.request(1, 3, set);
    let notes: Vec<(u64, &bytes::Bytes)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Send { conn, frame, completes_request: false } => Some((*conn, frame)),
            _ => None,
        })
        .collect();
    assert_eq!(
        notes.iter().map(|n| n.0).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5],
        "every watcher, in connection order"
    );
    let (nh, ev) = decode_notification(&notes[0].1[4..]).unwrap();
    assert_eq!((nh.xid, ev.event_type, ev.path.as_str()), (-1, 3, "/storm"));
    // Encoded once: every watcher's frame is the same buffer, not a copy.
    assert!(notes.iter().all(|n| n.1.as_ptr() == notes[0].1.as_ptr() && n.1 == notes[0].1));
}

#[test]
fn expired_session_loses_its_ephemerals_and_its_connection() {
    let mut h = Harness::new();
    let s = h.connect(1, 0, vec![0; 16]);
    h.request(1, 1, create("/e", 1));
    h.connect(2, 0, vec![0; 16]);
    h.request(2, 1, Request::Exists(PathWatch { path: "/e".into(), watch: true }));
    h.now.mono_ms += 1_300;
    let out = h.step(Input::Tick);
    assert!(out.iter().any(|o| matches!(o, Output::Close { conn: 1 })), "{out:?}");
    assert!(h.node.tree().node("/e").is_none());
    assert!(
        out.iter().any(|o| matches!(o, Output::Send { conn: 2, completes_request: false, .. })),
        "watcher notified: {out:?}"
    );
    // Reconnecting to the expired session is refused with timeout 0.
    let resp = h.connect(3, s.session_id, s.passwd.clone());
    assert_eq!((resp.timeout_ms, resp.session_id), (0, 0));
}

#[test]
fn reconnect_with_a_wrong_password_is_refused_and_a_right_one_moves_the_session() {
    let mut h = Harness::new();
    let s = h.connect(1, 0, vec![0; 16]);
    let bad = h.connect(2, s.session_id, vec![1; 16]);
    assert_eq!(bad.timeout_ms, 0);
    let req = ConnectRequest {
        timeout_ms: 1_000,
        session_id: s.session_id,
        passwd: s.passwd.clone(),
        read_only: None,
        ..Default::default()
    };
    let out = h.step(Input::Connect { conn: 3, addr: addr(), req, x509: None });
    assert!(out.iter().any(|o| matches!(o, Output::Close { conn: 1 })), "the old connection is closed: {out:?}");
    let Some(Output::Send { frame, .. }) = out.iter().find(|o| matches!(o, Output::Send { conn: 3, .. })) else {
        panic!()
    };
    let resp = ConnectResponse::from_bytes(&frame[4..]).unwrap();
    assert_eq!((resp.session_id, resp.read_only), (s.session_id, None));
    // Both reconnects with the session, refused or not, count (`connection_revalidate_count`).
    assert_eq!(h.node.counters().connection_revalidate_count, 2);
}

/// A write whose client left before it was durable is still applied; its reply has nowhere to
/// go and is counted (`stale_replies`). Its change records are dropped once it is applied.
#[test]
fn a_write_whose_client_left_is_applied_and_its_reply_counted_stale() {
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    let mut out = Vec::new();
    h.node.step(h.now, Input::Request { conn: 1, xid: 1, req: create("/a", 0) }, &mut out);
    let persisted = out.iter().find_map(|o| match o {
        Output::Persist { hdr, .. } => Some(hdr.zxid),
        _ => None,
    });
    let zxid = persisted.expect("the create is persisted");
    let (queued, removed) = h.node.outstanding_changes();
    assert!(queued > removed, "the create's change records wait for it to apply");
    h.node.step(h.now, Input::Disconnected { conn: 1 }, &mut out);
    h.node.step(h.now, Input::Durable { zxid }, &mut out);
    assert!(h.node.tree().node("/a").is_some());
    assert_eq!(h.node.counters().stale_replies, 1);
    let (queued_after, removed_after) = h.node.outstanding_changes();
    assert_eq!((queued_after, removed_after), (queued, queued));
}

#[test]
fn unknown_opcode_gets_unimplemented_and_a_close() {
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    let out = h.step(Input::Invalid { conn: 1, xid: 7, err: ErrorCode::Unimplemented });
    let Some(Output::Send { frame, .. }) = out.first() else { panic!() };
    let hdr = ReplyHeader::from_bytes(&frame[4..]).unwrap();
    assert_eq!((hdr.xid, hdr.err), (7, -6));
    assert!(matches!(out.last(), Some(Output::Close { conn: 1 })), "{out:?}");
}

#[test]
fn restored_state_keeps_sessions_for_reconnect_and_continues_zxids() {
    let mut first = Harness::new();
    let s = first.connect(1, 0, vec![0; 16]);
    first.request(1, 1, create("/eph", 1));
    let (tree, sessions) = first.node.snapshot_state();
    assert_eq!(sessions, vec![(s.session_id, 1_000)]);

    let mut restarted = Harness::new();
    restarted.node.restore(tree, &sessions, Vec::new());
    restarted.node.check_invariants().unwrap();
    assert_eq!(restarted.node.last_processed_zxid(), 2);
    assert_eq!(restarted.node.tree().stat("/eph").map(|st| st.ephemeral_owner), Some(s.session_id));
    let resp = restarted.connect(9, s.session_id, s.passwd.clone());
    assert_eq!(resp.session_id, s.session_id, "the recovered session accepts its reconnect");
    let (hdr, _, _) = restarted.request(9, 1, create("/after", 0));
    assert_eq!(hdr.zxid, 3, "zxids continue after the recovered ones");
}

#[test]
fn a_recovered_session_that_never_reconnects_expires_and_loses_its_ephemerals() {
    let mut first = Harness::new();
    first.connect(1, 0, vec![0; 16]);
    first.request(1, 1, create("/eph", 1));
    let (tree, sessions) = first.node.snapshot_state();
    let mut restarted = Harness::new();
    restarted.node.restore(tree, &sessions, Vec::new());
    restarted.now.mono_ms += 1_200;
    restarted.step(Input::Tick);
    assert!(restarted.node.tree().node("/eph").is_none());
}

#[test]
fn requests_behind_the_connect_request_wait_for_the_session() {
    let mut h = Harness::new();
    let req = ConnectRequest { timeout_ms: 1_000, passwd: vec![0; 16], read_only: Some(false), ..Default::default() };
    let mut out = Vec::new();
    h.node.step(h.now, Input::Connect { conn: 1, addr: addr(), req, x509: None }, &mut out);
    let auth = warden_proto::request::AuthPacket { auth_type: 0, scheme: "digest".into(), auth: b"u:p".to_vec() };
    h.node.step(h.now, Input::Request { conn: 1, xid: -4, req: Request::Auth(auth) }, &mut out);
    h.node.step(h.now, Input::Request { conn: 1, xid: 1, req: create("/early", 1) }, &mut out);
    assert!(
        out.iter().all(|o| matches!(o, Output::Persist { .. })),
        "nothing is sent before the session exists: {out:?}"
    );
    let all = h.step(Input::Durable { zxid: 1 });
    let sends: Vec<&bytes::Bytes> = all
        .iter()
        .filter_map(|o| match o {
            Output::Send { frame, .. } => Some(frame),
            _ => None,
        })
        .collect();
    let resp = ConnectResponse::from_bytes(&sends[0][4..]).unwrap();
    assert_eq!(ReplyHeader::from_bytes(&sends[1][4..]).unwrap().xid, -4, "auth answered after the handshake");
    assert_eq!(h.node.tree().stat("/early").map(|s| s.ephemeral_owner), Some(resp.session_id));
}

/// ZooKeeper logs (and proposes) a create2 request's CreateTxn under header type create2 (15); a
/// ZooKeeper follower needs that type to build the create2 reply's Stat.
#[test]
fn a_create2_request_is_logged_as_type_create2() {
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    let req = |path: &str| CreateRequest { path: path.into(), data: None, acl: Acl::open_unsafe(), flags: 0 };
    let mut types = Vec::new();
    for (xid, req) in [
        (1, create("/a", 0)),
        (2, Request::Create2(req("/b"))),
        // Inside a multi a create2 stays a create, as ZooKeeper 3.8 logs it (and requires).
        (3, Request::Multi(vec![MultiOp::Create(req("/c")), MultiOp::Create2(req("/d"))])),
    ] {
        h.node.step(h.now, Input::Request { conn: 1, xid, req }, &mut h.out);
        types.extend(h.out.iter().filter_map(|o| match o {
            Output::Persist { hdr, txn } => match &**txn {
                Txn::Multi(sub) => {
                    Some(format!("{} {:?}", hdr.txn_type, sub.iter().map(|t| t.op().code()).collect::<Vec<_>>()))
                }
                _ => Some(hdr.txn_type.to_string()),
            },
            _ => None,
        }));
        h.step(Input::Tick);
    }
    assert_eq!(types, ["1", "15", "14 [1, 1]"]);
}

/// skipACL: every client counts as `super`, so a write the node's ACL forbids succeeds.
#[test]
fn skip_acl_lets_a_write_past_the_acl() {
    let locked = |path: &str| {
        Request::Create(CreateRequest {
            path: path.into(),
            data: Some(b"x".to_vec()),
            acl: vec![Acl { perms: warden_proto::perms::READ, id: warden_proto::Id::new("world", "anyone") }],
            flags: 0,
        })
    };
    let set = |path: &str| {
        Request::SetData(warden_proto::request::SetDataRequest {
            path: path.into(),
            data: Some(b"y".to_vec().into()),
            version: -1,
        })
    };
    for (skip, want) in [(false, ErrorCode::NoAuth), (true, ErrorCode::Ok)] {
        let mut h = Harness::new();
        h.node.cfg.skip_acl = skip;
        h.connect(1, 0, vec![0; 16]);
        assert_eq!(h.request(1, 1, locked("/r")).0.err, 0);
        assert_eq!(h.request(1, 2, set("/r")).0.err, want.code(), "skipACL {skip}");
    }
}

/// ZooKeeper's digest provider accepts any credential (no colon, empty, several colons) and adds
/// `digest:<text before the first colon>:<hash>`; its ip provider accepts anything and adds the
/// connection's own address; a scheme without a provider fails and closes the connection.
#[test]
fn auth_follows_zookeepers_providers() {
    use warden_proto::request::AuthPacket;
    use warden_proto::response::ClientInfo;
    let auth = |scheme: &str, cred: &[u8]| {
        Request::Auth(AuthPacket { auth_type: 0, scheme: scheme.into(), auth: cred.to_vec() })
    };
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    for (i, cred) in [&b"blah"[..], b"", b"a:b:c", b"user:password"].into_iter().enumerate() {
        let (hdr, _, out) = h.request(1, -4, auth("digest", cred));
        assert_eq!((hdr.err, hdr.zxid), (0, 0), "digest {cred:?}");
        assert!(!out.iter().any(|o| matches!(o, Output::Close { .. })), "digest {cred:?} closed the connection");
        // The ACL `digest:<id>` of this credential now lets the connection read.
        let id = warden_tree::acl::digest_id(cred);
        let acl = vec![Acl::new(warden_proto::perms::ALL, warden_proto::Id::new("digest", id))];
        let path = format!("/n{i}");
        let req = CreateRequest { path: path.clone(), data: Some(b"d".to_vec()), acl, flags: 0 };
        assert_eq!(h.request(1, 10 + i as i32, Request::Create(req)).0.err, 0);
        let (hdr, _, _) = h.request(1, 20 + i as i32, Request::GetData(PathWatch { path, watch: false }));
        assert_eq!(hdr.err, 0, "digest {cred:?} does not match its own ACL");
    }
    let (hdr, _, _) = h.request(1, -4, auth("ip", b"anything"));
    assert_eq!(hdr.err, 0, "ip auth is accepted");
    let (_, body, _) = h.request(1, 30, Request::WhoAmI);
    let user = |s: &str, u: &str| ClientInfo { auth_scheme: s.into(), user: u.into() };
    let expected = vec![
        user("ip", "127.0.0.1"),
        user("digest", "blah"),
        user("digest", ""),
        user("digest", "a"),
        user("digest", "user"),
    ];
    assert_eq!(body, Some(Response::WhoAmI(expected)), "ip auth adds no second ip id");
    for scheme in ["world", "sasl", "super", "x509", "auth", "nosuchscheme"] {
        let mut h = Harness::new();
        h.connect(1, 0, vec![0; 16]);
        let (hdr, _, out) = h.request(1, -4, auth(scheme, b"x"));
        assert_eq!(hdr.err, ErrorCode::AuthFailed.code(), "{scheme}");
        assert!(out.iter().any(|o| matches!(o, Output::Close { conn: 1 })), "{scheme} must close the connection");
    }
}

/// ZooKeeper bounds what a server reads by jute.maxbuffer, not what it sends: replies above it
/// (a long child list, data written under a higher limit, a multiRead of both) are answered whole.
#[test]
fn replies_above_jute_maxbuffer_are_answered() {
    use warden_proto::response::MultiResult;
    const MAX_BUFFER: usize = 0xfffff;
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    h.request(1, 1, create("/big", 0));
    let names: Vec<String> = (0..300).map(|i| format!("{i:04}{}", "f".repeat(3996))).collect();
    for (i, name) in names.iter().enumerate() {
        assert_eq!(h.request(1, 2 + i as i32, create(&format!("/big/{name}"), 0)).0.err, 0);
    }
    let data = vec![7u8; 2 * MAX_BUFFER];
    let req = CreateRequest { path: "/data".into(), data: Some(data.clone()), acl: Acl::open_unsafe(), flags: 0 };
    assert_eq!(h.request(1, 400, Request::Create(req)).0.err, 0);

    let (hdr, body, out) = h.request(1, 701, Request::GetChildren2(PathWatch { path: "/big".into(), watch: true }));
    assert!(!out.iter().any(|o| matches!(o, Output::Close { .. })), "a large reply closed the connection");
    let Some(Output::Send { frame, .. }) = out.first() else { panic!("{out:?}") };
    assert!(frame.len() > MAX_BUFFER, "the reply ({} bytes) should be above jute.maxbuffer", frame.len());
    let Some(Response::Children2 { children, stat }) = body else { panic!("{hdr:?} {body:?}") };
    assert_eq!((children, stat.num_children), (names.clone(), 300));
    let (_, body, _) = h.request(1, 702, Request::GetData(PathWatch { path: "/data".into(), watch: false }));
    assert!(matches!(body, Some(Response::GetData { data: Some(ref d), .. }) if *d == data));
    let ops = vec![
        MultiOp::GetChildren(PathWatch { path: "/big".into(), watch: false }),
        MultiOp::GetData(PathWatch { path: "/data".into(), watch: false }),
        MultiOp::GetData(PathWatch { path: "/missing".into(), watch: false }),
    ];
    let (_, body, _) = h.request(1, 703, Request::MultiRead(ops));
    let Some(Response::Multi(results)) = body else { panic!("{body:?}") };
    assert_eq!(results[0], MultiResult::GetChildren { children: names });
    assert!(matches!(&results[1], MultiResult::GetData { data: Some(d), .. } if *d == data));
    assert_eq!(results[2], MultiResult::Error(ErrorCode::NoNode.code()));
    // The child watch set by the large read fires.
    let out = h.step(Input::Request { conn: 1, xid: 704, req: create("/big/new", 0) });
    let note = out.iter().find_map(|o| match o {
        Output::Send { frame, completes_request: false, .. } => Some(decode_notification(&frame[4..]).unwrap().1),
        _ => None,
    });
    assert_eq!(note.map(|e| e.path), Some("/big".to_string()));
}

fn sasl_cfg() -> NodeConfig {
    NodeConfig { sasl_provider: true, sasl_super_users: vec!["admin".into()], ..NodeConfig::default() }
}

/// Steps one SASL outcome and decodes the single reply it must produce.
fn sasl_step(
    h: &mut Harness,
    conn: u64,
    xid: i32,
    outcome: SaslOutcome,
) -> (ReplyHeader, Option<Response>, Vec<Output>) {
    let out = h.step(Input::Sasl { conn, xid, outcome });
    let frames: Vec<&bytes::Bytes> = out
        .iter()
        .filter_map(|o| match o {
            Output::Send { frame, completes_request: true, .. } => Some(frame),
            _ => None,
        })
        .collect();
    assert_eq!(frames.len(), 1, "{out:?}");
    let (hdr, body) = decode_reply(102, &frames[0][4..]).unwrap();
    (hdr, body, out)
}

fn closes(out: &[Output], conn: u64) -> bool {
    out.iter().any(|o| matches!(o, Output::Close { conn: c } if *c == conn))
}

fn who_am_i(h: &mut Harness, conn: u64, xid: i32) -> Vec<(String, String)> {
    let (_, body, _) = h.request(conn, xid, Request::WhoAmI);
    let Some(Response::WhoAmI(infos)) = body else { panic!("{body:?}") };
    infos.into_iter().map(|i| (i.auth_scheme, i.user)).collect()
}

fn sasl_acl_create(path: &str, id: &str) -> Request {
    let acl = vec![Acl::new(warden_proto::perms::ALL, warden_proto::Id::new("sasl", id))];
    Request::Create(CreateRequest { path: path.into(), data: Some(b"x".to_vec()), acl, flags: 0 })
}

#[test]
fn sasl_steps_reply_at_once_with_zxid_zero_and_success_adds_the_sasl_id() {
    let mut h = Harness::with(sasl_cfg());
    h.connect(1, 0, vec![0; 16]);
    h.request(1, 1, create("/a", 0));
    let (hdr, body, out) = sasl_step(&mut h, 1, 2, SaslOutcome::Continue { challenge: b"nonce".to_vec() });
    assert_eq!((hdr.xid, hdr.zxid, hdr.err), (2, 0, 0));
    assert_eq!(body, Some(Response::Sasl { token: Some(b"nonce".to_vec()) }));
    assert!(!closes(&out, 1));
    let done = SaslOutcome::Done { authorization_id: "jaasuser".into(), token: Some(b"rspauth=1".to_vec()) };
    let (hdr, body, _) = sasl_step(&mut h, 1, 3, done);
    assert_eq!((hdr.xid, hdr.zxid, hdr.err), (3, 0, 0));
    assert_eq!(body, Some(Response::Sasl { token: Some(b"rspauth=1".to_vec()) }));
    let ids = who_am_i(&mut h, 1, 4);
    assert_eq!(ids, vec![("ip".into(), "127.0.0.1".into()), ("sasl".into(), "jaasuser".into())]);
    // The sasl id works in ACLs: the owner reads, another connection may not.
    assert_eq!(h.request(1, 5, sasl_acl_create("/s", "jaasuser")).0.err, 0);
    assert_eq!(h.request(1, 6, Request::GetData(PathWatch { path: "/s".into(), watch: false })).0.err, 0);
    h.connect(2, 0, vec![0; 16]);
    let (hdr, _, _) = h.request(2, 1, Request::GetData(PathWatch { path: "/s".into(), watch: false }));
    assert_eq!(hdr.err, ErrorCode::NoAuth.code());
    // `auth` expands to the sasl id.
    let auth_acl = Request::Create(CreateRequest { path: "/t".into(), data: None, acl: Acl::creator_all(), flags: 0 });
    assert_eq!(h.request(1, 7, auth_acl).0.err, 0);
    let (_, body, _) = h.request(1, 8, Request::GetAcl(warden_proto::request::PathRequest { path: "/t".into() }));
    let Some(Response::GetAcl { acl, .. }) = body else { panic!("{body:?}") };
    assert_eq!(acl, vec![Acl::new(warden_proto::perms::ALL, warden_proto::Id::new("sasl", "jaasuser"))]);
}

#[test]
fn a_configured_super_user_gets_super_too() {
    let mut h = Harness::with(sasl_cfg());
    h.connect(1, 0, vec![0; 16]);
    h.request(1, 1, sasl_acl_create("/locked", "someoneelse"));
    h.connect(2, 0, vec![0; 16]);
    sasl_step(&mut h, 2, 1, SaslOutcome::Done { authorization_id: "admin".into(), token: None });
    let ids = who_am_i(&mut h, 2, 2);
    assert!(ids.contains(&("super".into(), "".into())) && ids.contains(&("sasl".into(), "admin".into())), "{ids:?}");
    let (hdr, _, _) = h.request(2, 3, Request::GetData(PathWatch { path: "/locked".into(), watch: false }));
    assert_eq!(hdr.err, 0, "super reads everything");
}

#[test]
fn a_failed_sasl_exchange_is_authfailed_with_a_null_token_and_a_close() {
    let mut h = Harness::with(sasl_cfg());
    h.connect(1, 0, vec![0; 16]);
    let (hdr, body, out) = sasl_step(&mut h, 1, 1, SaslOutcome::Failed);
    assert_eq!((hdr.xid, hdr.zxid, hdr.err), (1, 0, ErrorCode::AuthFailed.code()));
    assert_eq!(body, None);
    let Some(Output::Send { frame, .. }) = out.first() else { panic!("{out:?}") };
    assert_eq!(frame.len(), 4 + 16 + 4, "the body is present: a null token (length -1)");
    assert_eq!(frame[20..], [0xff; 4]);
    assert!(closes(&out, 1));
    // Others are still served.
    h.connect(2, 0, vec![0; 16]);
    assert_eq!(h.request(2, 1, create("/still", 0)).0.err, 0);
}

#[test]
fn no_sasl_server_answers_a_null_token_and_keeps_the_connection() {
    let mut h = Harness::with(sasl_cfg());
    h.connect(1, 0, vec![0; 16]);
    let (hdr, body, out) = sasl_step(&mut h, 1, 1, SaslOutcome::NoServer);
    assert_eq!((hdr.err, body), (0, Some(Response::Sasl { token: None })));
    assert!(!closes(&out, 1));
    assert_eq!(who_am_i(&mut h, 1, 2), vec![("ip".into(), "127.0.0.1".into())]);
}

#[test]
fn allow_sasl_failed_clients_keeps_the_connection_unless_sasl_is_enforced() {
    let mut h = Harness::with(NodeConfig { allow_sasl_failed_clients: true, ..sasl_cfg() });
    h.connect(1, 0, vec![0; 16]);
    let (hdr, body, out) = sasl_step(&mut h, 1, 1, SaslOutcome::Failed);
    assert_eq!((hdr.err, body), (0, Some(Response::Sasl { token: None })));
    assert!(!closes(&out, 1));
    let enforced =
        NodeConfig { allow_sasl_failed_clients: true, enforce_auth_schemes: vec!["sasl".into()], ..sasl_cfg() };
    let mut h = Harness::with(enforced);
    h.connect(1, 0, vec![0; 16]);
    let (hdr, _, out) = sasl_step(&mut h, 1, 1, SaslOutcome::Failed);
    assert_eq!(hdr.err, ErrorCode::SessionClosedRequireSaslAuth.code(), "-124 when sasl is enforced");
    assert!(closes(&out, 1));
}

#[test]
fn enforcement_closes_unauthenticated_connections_but_lets_auth_and_sasl_through() {
    let mut h = Harness::with(NodeConfig { enforce_auth_schemes: vec!["sasl".into()], ..sasl_cfg() });
    let resp = h.connect(1, 0, vec![0; 16]);
    assert_ne!(resp.session_id, 0, "the session is still created");
    // An auth packet passes (and a digest id does not satisfy a sasl enforcement).
    let auth = Request::Auth(warden_proto::request::AuthPacket {
        auth_type: 0,
        scheme: "digest".into(),
        auth: b"u:p".to_vec(),
    });
    assert_eq!(h.request(1, -4, auth).0.err, 0);
    let (hdr, body, out) = h.request(1, 7, Request::Exists(PathWatch { path: "/".into(), watch: false }));
    assert_eq!((hdr.xid, hdr.zxid, hdr.err, body), (7, 0, ErrorCode::SessionClosedRequireSaslAuth.code(), None));
    assert!(closes(&out, 1));
    // After SASL succeeds everything is served.
    h.connect(2, 0, vec![0; 16]);
    sasl_step(&mut h, 2, 1, SaslOutcome::Continue { challenge: vec![1] });
    sasl_step(&mut h, 2, 2, SaslOutcome::Done { authorization_id: "jaasuser".into(), token: None });
    assert_eq!(h.request(2, 3, create("/ok", 0)).0.err, 0);
    assert_eq!(h.request(2, 4, Request::Ping).0.err, 0);
    // Another scheme can be enforced instead.
    let mut h = Harness::with(NodeConfig { enforce_auth_schemes: vec!["digest".into()], ..sasl_cfg() });
    h.connect(1, 0, vec![0; 16]);
    let (hdr, _, _) = h.request(1, 1, Request::Ping);
    assert_eq!(hdr.err, ErrorCode::SessionClosedRequireSaslAuth.code());
    h.connect(2, 0, vec![0; 16]);
    let auth = Request::Auth(warden_proto::request::AuthPacket {
        auth_type: 0,
        scheme: "digest".into(),
        auth: b"u:p".to_vec(),
    });
    assert_eq!(h.request(2, -4, auth).0.err, 0);
    assert_eq!(h.request(2, 1, Request::Ping).0.err, 0);
}

#[test]
fn sasl_acls_are_invalid_without_the_provider() {
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    assert_eq!(h.request(1, 1, sasl_acl_create("/s", "jaasuser")).0.err, ErrorCode::InvalidAcl.code());
    let mut h = Harness::with(sasl_cfg());
    h.connect(1, 0, vec![0; 16]);
    assert_eq!(h.request(1, 1, sasl_acl_create("/s", "jaasuser")).0.err, 0);
    assert_eq!(h.request(1, 2, sasl_acl_create("/bad", "a@b@c")).0.err, ErrorCode::InvalidAcl.code());
}

#[test]
fn a_sasl_packet_pipelined_behind_the_connect_request_is_answered_after_the_handshake() {
    let mut h = Harness::with(sasl_cfg());
    let req = ConnectRequest { timeout_ms: 1_000, passwd: vec![0; 16], read_only: Some(false), ..Default::default() };
    let mut out = Vec::new();
    h.node.step(h.now, Input::Connect { conn: 1, addr: addr(), req, x509: None }, &mut out);
    let zxid = out.iter().find_map(|o| if let Output::Persist { hdr, .. } = o { Some(hdr.zxid) } else { None });
    out.clear();
    let outcome = SaslOutcome::Continue { challenge: b"c".to_vec() };
    h.node.step(h.now, Input::Sasl { conn: 1, xid: 1, outcome }, &mut out);
    assert!(out.is_empty(), "nothing before the session exists: {out:?}");
    h.node.step(h.now, Input::Durable { zxid: zxid.expect("createSession persisted") }, &mut out);
    let frames: Vec<&bytes::Bytes> =
        out.iter().filter_map(|o| if let Output::Send { frame, .. } = o { Some(frame) } else { None }).collect();
    assert_eq!(frames.len(), 2, "{out:?}");
    assert!(ConnectResponse::from_bytes(&frames[0][4..]).is_ok(), "the handshake first");
    let (hdr, body) = decode_reply(102, &frames[1][4..]).unwrap();
    assert_eq!((hdr.xid, hdr.err, body), (1, 0, Some(Response::Sasl { token: Some(b"c".to_vec()) })));
    h.node.check_invariants().unwrap();
}

/// `read_per_namespace` / `write_per_namespace` count what ZooKeeper 3.8 counted for the same
/// requests (seen on its `monitor`): a write the path and the data, a delete the path, a read the
/// path, the data or the child names, and a 68-byte Stat; per first path component, none for `/`.
#[test]
fn bytes_per_namespace_are_counted_as_zookeeper_counts_them() {
    let mut h = Harness::new();
    h.connect(1, 0, vec![0; 16]);
    h.request(1, 1, create("/a", 0)); // "x": 2 + 1
    let set = Request::SetData(warden_proto::request::SetDataRequest {
        path: "/a".into(),
        data: Some(b"299".to_vec().into()),
        version: -1,
    });
    h.request(1, 2, set); // 2 + 3
    h.request(1, 3, create("/a/b", 0)); // 4 + 1
    h.request(1, 4, Request::Delete(PathVersion { path: "/a/b".into(), version: -1 })); // 4
    h.request(1, 5, Request::GetData(PathWatch { path: "/a".into(), watch: false })); // 2 + 3 + 68
    h.request(1, 6, Request::GetChildren(PathWatch { path: "/a".into(), watch: false })); // 2 + 0 + 68
    h.request(1, 7, Request::Exists(PathWatch { path: "/a".into(), watch: false })); // 2 + 68
    h.request(1, 8, Request::Exists(PathWatch { path: "/nope".into(), watch: false })); // NoNode: none
    h.request(1, 9, Request::GetChildren(PathWatch { path: "/".into(), watch: false })); // the root: none
    let sizes = h.node.namespace_sizes();
    assert_eq!(sizes.writes.keys().map(|k| &**k).collect::<Vec<_>>(), ["a"]);
    assert_eq!(sizes.reads.keys().map(|k| &**k).collect::<Vec<_>>(), ["a"]);
    let (w, r) = (&sizes.writes["a"], &sizes.reads["a"]);
    assert_eq!((w.count, w.sum, w.min, w.max), (4, 3 + 5 + 5 + 4, 3, 5));
    assert_eq!((r.count, r.sum, r.min, r.max), (3, 73 + 70 + 70, 70, 73));
}

/// An expiry storm goes out in batches: a tick that expires more sessions than `EXPIRY_BATCH`
/// proposes one batch, a client's write made meanwhile is proposed right after it, and each
/// later batch follows once the one before is durable, until every session's ephemeral is gone.
#[test]
fn an_expiry_storm_is_proposed_in_batches_with_other_writes_between() {
    const SESSIONS: usize = 600;
    let mut h = Harness::new();
    for i in 0..SESSIONS {
        let conn = i as u64 + 1;
        h.connect(conn, 0, vec![0; 16]);
        h.request(conn, 1, create(&format!("/e{i}"), 1));
    }
    let bystander = 100_000;
    let req = ConnectRequest { timeout_ms: 10_000, passwd: vec![0; 16], ..Default::default() };
    h.step(Input::Connect { conn: bystander, addr: addr(), req, x509: None });
    h.now.mono_ms += 1_300;

    let persisted = |out: &mut Vec<Output>| -> Vec<(i64, bool)> {
        std::mem::take(out)
            .into_iter()
            .filter_map(|o| match o {
                Output::Persist { hdr, txn } => Some((hdr.zxid, matches!(*txn, Txn::CloseSession { .. }))),
                _ => None,
            })
            .collect()
    };
    let mut out = Vec::new();
    h.node.step(h.now, Input::Tick, &mut out);
    let first = persisted(&mut out);
    assert_eq!(first.len(), crate::EXPIRY_BATCH);
    assert!(first.iter().all(|&(_, close)| close));
    // The bystander's write is proposed at once, before any further close.
    h.node.step(h.now, Input::Request { conn: bystander, xid: 1, req: create("/b", 0) }, &mut out);
    let write = persisted(&mut out);
    assert_eq!(write, vec![(first.last().unwrap().0 + 1, false)]);
    let mut closes = first.len();
    let mut last = write[0].0;
    let mut rounds = 1;
    loop {
        h.node.step(h.now, Input::Durable { zxid: last }, &mut out);
        h.node.check_invariants().unwrap();
        let batch = persisted(&mut out);
        let Some(&(zxid, _)) = batch.last() else { break };
        assert!(batch.len() <= crate::EXPIRY_BATCH && batch.iter().all(|&(_, close)| close), "{batch:?}");
        closes += batch.len();
        last = zxid;
        rounds += 1;
    }
    assert_eq!(closes, SESSIONS);
    assert_eq!(rounds, SESSIONS.div_ceil(crate::EXPIRY_BATCH));
    assert_eq!(h.node.tree().ephemerals_count(), 0);
    assert!(h.node.tree().node("/b").is_some());
    assert_eq!(h.node.counters().stale_sessions_expired, SESSIONS as u64);
}
