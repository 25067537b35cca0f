//! Read-only mode (`readonlymode.enabled`) of one quorum member that cannot find a leader: when it
//! starts serving, whom it serves, what it answers, and how it stops.

use std::net::SocketAddr;

use warden_node::session::session_password;
use warden_node::{Clock, Input, Node, NodeConfig, Output, QuorumSetup};
use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::header::ReplyHeader;
use warden_proto::request::{CreateRequest, PathWatch, Request};
use warden_proto::response::{decode_reply, Response};
use warden_proto::{Acl, ErrorCode, Record};
use warden_tree::DataTree;

const TICK_MS: u32 = 500;
const START_MS: u64 = 100_000;

struct Harness {
    node: Node,
    now: Clock,
}

fn addr() -> SocketAddr {
    "127.0.0.1:5000".parse().unwrap()
}

impl Harness {
    /// Server 1 of voters {1, 2, 3}, LOOKING since `START_MS`, with a session 0x77 known from
    /// before (as if replicated) and the node /a.
    fn new(read_only_enabled: bool) -> Self {
        let cfg = NodeConfig {
            tick_time_ms: TICK_MS,
            min_session_timeout_ms: 1_000,
            max_session_timeout_ms: 10_000,
            server_id: 1,
            read_only_enabled,
            ..NodeConfig::default()
        };
        let now = Clock { mono_ms: START_MS, wall_ms: 1_700_000_000_000 };
        let mut node = Node::new_quorum(cfg, QuorumSetup::new(1, [1, 2, 3]), now);
        let mut tree = DataTree::new();
        let hdr = warden_proto::TxnHeader { client_id: 0x77, cxid: 1, zxid: 1, time_ms: 0, txn_type: 1 };
        let txn = warden_proto::Txn::Create {
            path: "/a".into(),
            data: Some(b"v".to_vec()),
            acl: Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: 1,
        };
        tree.apply(&hdr, &txn);
        node.restore(tree, &[(0x77, 5_000)], Vec::new());
        Self { node, now }
    }

    /// Moves the clock; the node sees the time with a tick.
    fn at(&mut self, mono_ms: u64) -> Vec<Output> {
        self.now.mono_ms = mono_ms;
        self.step(Input::Tick)
    }

    fn step(&mut self, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        self.node.step(self.now, input, &mut out);
        self.node.check_invariants().unwrap();
        out.retain(|o| !matches!(o, Output::Quorum(_)));
        out
    }

    fn connect(&mut self, conn: u64, session_id: i64, read_only: bool) -> Vec<Output> {
        let req = ConnectRequest {
            timeout_ms: 2_000,
            session_id,
            passwd: if session_id == 0 { vec![0; 16] } else { session_password(session_id).to_vec() },
            read_only: Some(read_only),
            ..Default::default()
        };
        self.step(Input::Connect { conn, addr: addr(), req, x509: None })
    }

    fn request(&mut self, conn: u64, xid: i32, req: Request) -> (ReplyHeader, Option<Response>, Vec<Output>) {
        let op = req.op_code().code();
        let out = self.step(Input::Request { conn, xid, req });
        let frame = out
            .iter()
            .find_map(|o| match o {
                Output::Send { frame, completes_request: true, .. } => Some(frame.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no reply in {out:?}"));
        let (hdr, body) = decode_reply(op, &frame[4..]).unwrap();
        (hdr, body, out)
    }
}

fn handshake(out: &[Output]) -> ConnectResponse {
    match out.first() {
        Some(Output::Send { frame, .. }) => ConnectResponse::from_bytes(&frame[4..]).unwrap(),
        other => panic!("no handshake reply: {other:?}"),
    }
}

fn closes(out: &[Output], conn: u64) -> bool {
    out.iter().any(|o| matches!(o, Output::Close { conn: c } if *c == conn))
}

#[test]
fn a_looking_server_turns_read_only_after_the_grace_period_and_serves_only_read_only_clients() {
    let mut h = Harness::new(true);
    // ZooKeeper waits max(2 s, tickTime) before starting its read-only server.
    h.at(START_MS + 1_999);
    assert!(!h.node.read_only());
    assert!(closes(&h.connect(1, 0, true), 1), "not read-only yet: refused");
    h.at(START_MS + 2_000);
    assert!(h.node.read_only());
    assert!(closes(&h.connect(2, 0, false), 2), "a client that did not ask for read-only is refused");

    let resp = handshake(&h.connect(3, 0, true));
    assert_eq!(resp.read_only, Some(true));
    assert_ne!(resp.session_id, 0);
    assert_eq!(resp.passwd, session_password(resp.session_id).to_vec());
    assert_eq!(h.node.last_processed_zxid(), 1, "a local session is created without a txn");

    let (hdr, body, _) = h.request(3, 1, Request::GetData(PathWatch { path: "/a".into(), watch: false }));
    assert_eq!(hdr.err, 0);
    assert!(matches!(body, Some(Response::GetData { ref data, .. }) if data.as_deref() == Some(&b"v"[..])));
    let create = CreateRequest { path: "/b".into(), data: None, acl: Acl::open_unsafe(), flags: 0 };
    let (hdr, _, out) = h.request(3, 2, Request::Create(create));
    assert_eq!((hdr.xid, hdr.err, hdr.zxid), (2, ErrorCode::NotReadOnly.code(), 1));
    assert!(!closes(&out, 3), "a refused write keeps the connection");
    let (hdr, _, _) = h.request(3, 3, Request::Sync(warden_proto::request::PathRequest { path: "/".into() }));
    assert_eq!(hdr.err, ErrorCode::NotReadOnly.code(), "sync needs a leader");
    let (hdr, _, _) = h.request(3, 4, Request::Exists(PathWatch { path: "/a".into(), watch: false }));
    assert_eq!((hdr.xid, hdr.err), (4, 0), "replies stay in order after an error");
}

#[test]
fn a_session_from_before_the_partition_resumes_but_cannot_be_closed_here() {
    let mut h = Harness::new(true);
    h.at(START_MS + 2_500);
    let resp = handshake(&h.connect(1, 0x77, true));
    assert_eq!((resp.session_id, resp.read_only), (0x77, Some(true)));
    let (hdr, _, out) = h.request(1, 1, Request::CloseSession);
    assert_eq!(hdr.err, ErrorCode::NotReadOnly.code(), "the leader owns that session");
    assert!(!closes(&out, 1));
}

#[test]
fn local_sessions_close_and_expire_locally() {
    let mut h = Harness::new(true);
    h.at(START_MS + 3_000);
    let closed = handshake(&h.connect(1, 0, true)).session_id;
    let (hdr, _, out) = h.request(1, 1, Request::CloseSession);
    assert_eq!(hdr.err, 0);
    assert!(closes(&out, 1), "closeSession of a local session answers and closes");
    assert!(handshake(&h.connect(2, closed, true)).session_id == 0, "a closed local session is gone");

    let idle = handshake(&h.connect(3, 0, true)).session_id;
    let out = h.at(START_MS + 3_000 + 2_000 + u64::from(TICK_MS));
    assert!(closes(&out, 3), "an idle local session expires here, without a txn");
    assert_eq!(h.node.last_processed_zxid(), 1);
    assert_eq!(handshake(&h.connect(4, idle, true)).session_id, 0, "expired");
}

#[test]
fn taking_a_role_closes_read_only_connections_and_forgets_local_sessions() {
    let mut h = Harness::new(true);
    h.at(START_MS + 2_000);
    let local = handshake(&h.connect(1, 0, true)).session_id;
    let out = h.step(Input::BecomeFollower { leader: 2 });
    assert!(closes(&out, 1));
    assert!(!h.node.read_only());
    // Back to LOOKING: a new grace period starts, and the local session is unknown.
    h.at(START_MS + 10_000);
    h.step(Input::BecomeLooking);
    assert!(!h.node.read_only());
    h.at(START_MS + 12_000);
    assert!(h.node.read_only());
    assert_eq!(handshake(&h.connect(2, local, true)).session_id, 0);
}

#[test]
fn without_read_only_mode_a_looking_server_refuses_everyone() {
    let mut h = Harness::new(false);
    h.at(START_MS + 60_000);
    assert!(!h.node.read_only());
    assert!(closes(&h.connect(1, 0, true), 1));
}
