//! An in-memory ensemble of three voters and one observer, each server the real
//! `warden_driver::Driver` around its `Node`. The harness is a shell, like the server's owner and
//! the simulator's world: it only carries out the driver's commands. Quorum packets go through one
//! FIFO queue per (from, to) pair (TCP semantics); storage ops are carried out at once by an
//! in-memory store per server and reported `Synced` right after the turn that issued them; a
//! leader's quorum port opens at once; elections are decided by fiat (`Event::Decided`). What the
//! node's outputs lead to (group commit, epoch files, snapshot installs, the decision held until
//! every persisted txn is durable) is the driver's, as in the server and the simulator.
//! Everything is deterministic: queues are drained in (from, to) order, time moves only on `tick`.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use warden_driver::{Command, Driver, DriverConfig, Event, DURABLE_CHUNK};
use warden_node::{Clock, Input, Node, NodeConfig, QuorumSetup, RoleKind, SnapshotData};
use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::header::ReplyHeader;
use warden_proto::quorum::{packet_type as pt, QuorumPacket};
use warden_proto::request::{AuthPacket, ReconfigRequest};
use warden_proto::request::{CreateRequest, PathWatch, Request};
use warden_proto::response::{decode_reply, Response};
use warden_proto::{Acl, ErrorCode, Membership, OpCode, Record, Txn, TxnDigest, TxnHeader};
use warden_quorum::{Elected, ServerState, Sid};
use warden_storage::{EpochFile, Report, StoreOp};

const TICK_MS: u64 = 100;

/// Large enough that the driver asks for no snapshot during a test (only at a restart).
const SNAP_COUNT: u64 = 1_000_000;

enum Item {
    Packet(QuorumPacket),
    Snapshot(SnapshotData),
}

/// One server's storage, in memory: carries out `StoreOp`s as `Store::execute` does on disk and
/// reports what each one made durable.
#[derive(Default)]
struct MemStore {
    /// The txns in the log, in order: appended, and not cut by a TRUNC or an installed snapshot.
    log: Vec<(TxnHeader, Txn)>,
    /// The zxid of the last snapshot installed from a leader (the log continues after it).
    installed: i64,
    accepted_epoch: Option<i64>,
    current_epoch: Option<i64>,
}

impl MemStore {
    /// Carries out `op` durably and returns its report: an append reports its last zxid, an
    /// installed snapshot its zxid, an epoch file (which, epoch); a cut or a roll reports nothing.
    fn carry_out(&mut self, op: StoreOp) -> Report {
        let mut report = Report::default();
        match op {
            StoreOp::Append(batch) => {
                for (hdr, txn) in batch {
                    let last = self.log.last().map_or(self.installed, |(h, _)| h.zxid);
                    assert!(hdr.zxid > last, "append of {:#x} after {last:#x}", hdr.zxid);
                    report.last = Some(hdr.zxid);
                    self.log.push((hdr, Arc::unwrap_or_clone(txn)));
                }
            }
            StoreOp::Roll => {}
            StoreOp::Epoch { which, epoch } => {
                match which {
                    EpochFile::Accepted => self.accepted_epoch = Some(epoch),
                    EpochFile::Current => self.current_epoch = Some(epoch),
                }
                report.epochs.push((which, epoch));
            }
            StoreOp::Truncate(zxid) => self.log.retain(|(h, _)| h.zxid <= zxid),
            StoreOp::Install { zxid, .. } => {
                // The snapshot holds everything up to its zxid: it replaces the log.
                self.log.clear();
                self.installed = zxid;
                report.last = Some(zxid);
            }
            StoreOp::TruncateAndReload(zxid) => {
                panic!("no test cuts below the applied tree, yet a TRUNC to {zxid:#x} asks for a reload")
            }
        }
        report
    }
}

struct Server {
    driver: Driver,
    store: MemStore,
}

struct Cluster {
    servers: BTreeMap<Sid, Server>,
    now: Clock,
    queues: BTreeMap<(Sid, Sid), VecDeque<Item>>,
    /// Client frames (`Command::Send`) and closes (`Command::Close`) per server, in order.
    client_out: BTreeMap<Sid, Vec<Command>>,
    elect_requests: Vec<(Sid, String)>,
    /// Hand-overs asked for: (server, designated leader, configuration version).
    hand_overs: Vec<(Sid, Sid, i64)>,
    /// Snapshot streams delivered (SNAP syncs).
    snapshots: usize,
    /// The election round, one per `elect`.
    round: i64,
    /// A TxnDigest appended to each PROPOSAL or INFORM sent to a server, as a ZooKeeper leader
    /// appends the tree's digest after the txn.
    stamp_digest: BTreeMap<Sid, TxnDigest>,
    /// Configurations each server's driver reported active (`Command::Reconfigured`), in order.
    configs: Vec<(Sid, Membership)>,
}

fn node_config(sid: Sid) -> NodeConfig {
    NodeConfig {
        tick_time_ms: TICK_MS as u32,
        min_session_timeout_ms: 200,
        max_session_timeout_ms: 10_000,
        server_id: sid as u8,
        ..NodeConfig::default()
    }
}

fn driver(sid: Sid, node: Node) -> Driver {
    let cfg =
        DriverConfig { my_sid: Some(sid), snap_count: SNAP_COUNT, seed: sid as u64, durable_chunk: DURABLE_CHUNK };
    Driver::new(node, cfg)
}

fn addr() -> SocketAddr {
    "127.0.0.1:5000".parse().unwrap()
}

impl Cluster {
    /// Voters 1..=3 and observer 4, all LOOKING.
    fn new() -> Self {
        Self::with(node_config, Membership::default())
    }

    /// As `new`, with each server's node configuration from `cfg` and `membership` (its text is
    /// `/zookeeper/config`; empty: none).
    fn with(cfg: impl Fn(Sid) -> NodeConfig, membership: Membership) -> Self {
        let now = Clock { mono_ms: 10_000, wall_ms: 1_700_000_000_000 };
        let mut servers = BTreeMap::new();
        for sid in 1..=4 {
            let mut setup = QuorumSetup::new(sid, [1, 2, 3]);
            setup.membership = membership.clone();
            let node = Node::new_quorum(cfg(sid), setup, now);
            servers.insert(sid, Server { driver: driver(sid, node), store: MemStore::default() });
        }
        Self {
            servers,
            now,
            queues: BTreeMap::new(),
            client_out: BTreeMap::new(),
            elect_requests: Vec::new(),
            hand_overs: Vec::new(),
            snapshots: 0,
            round: 0,
            stamp_digest: BTreeMap::new(),
            configs: Vec::new(),
        }
    }

    fn node(&self, sid: Sid) -> &Node {
        self.servers[&sid].driver.node()
    }

    /// Brings a server (back) into the ensemble and carries out what its driver asked for before
    /// (a restored driver's snapshot).
    fn start(&mut self, sid: Sid, server: Server, cmds: Vec<Command>) {
        self.servers.insert(sid, server);
        self.carry_out_all(sid, cmds);
    }

    /// Steps one server with a node input (see `event`).
    fn step(&mut self, sid: Sid, input: Input) {
        self.event(sid, Event::Node(input));
    }

    /// Steps one server's driver with `ev` and carries out what it asks for (see `carry_out_all`).
    fn event(&mut self, sid: Sid, ev: Event) {
        let now = self.now;
        let Some(s) = self.servers.get_mut(&sid) else { return };
        let mut cmds = Vec::new();
        s.driver.step(now, ev, &mut cmds);
        self.carry_out_all(sid, cmds);
    }

    /// Carries out `cmds` and ends the driver's turn, as often as that asks for more; then steps
    /// the answers the commands brought (storage's `Synced`, the leader port's `Leading`), in
    /// order, each as a turn of its own.
    fn carry_out_all(&mut self, sid: Sid, cmds: Vec<Command>) {
        let mut answers = VecDeque::new();
        self.turn(sid, cmds, &mut answers);
        while let Some(ev) = answers.pop_front() {
            let now = self.now;
            let Some(s) = self.servers.get_mut(&sid) else { return };
            let mut cmds = Vec::new();
            s.driver.step(now, ev, &mut cmds);
            self.turn(sid, cmds, &mut answers);
        }
    }

    /// One turn of a shell: the commands are carried out in order, then the driver's turn ends
    /// (handing what was persisted to storage, taking a decision) and what that asks for is
    /// carried out too; then every invariant must hold.
    fn turn(&mut self, sid: Sid, mut cmds: Vec<Command>, answers: &mut VecDeque<Event>) {
        loop {
            for cmd in std::mem::take(&mut cmds) {
                self.carry_out(sid, cmd, answers);
            }
            let now = self.now;
            let s = self.servers.get_mut(&sid).unwrap();
            s.driver.end_turn(now, &mut cmds);
            if cmds.is_empty() {
                break;
            }
        }
        if let Err(e) = self.servers[&sid].driver.check_invariants() {
            panic!("server {sid}: {e}");
        }
    }

    /// Carries out one command of server `sid`: client output is recorded, storage ops are
    /// carried out by its store (their report is an answer), packets are queued, a leader's port
    /// opens at once (an answer too), election requests are recorded.
    fn carry_out(&mut self, sid: Sid, cmd: Command, answers: &mut VecDeque<Event>) {
        match cmd {
            Command::Send { .. } | Command::Close { .. } => self.client_out.entry(sid).or_default().push(cmd),
            // `may_inline` is a standalone server's; this storage is synchronous anyway.
            Command::Store { op, .. } => {
                let report = self.servers.get_mut(&sid).unwrap().store.carry_out(op);
                if !report.is_empty() {
                    answers.push_back(Event::Synced(report));
                }
            }
            // No snapshot writer: only a restart asks for a snapshot, and no test reads it back.
            Command::Snapshot { .. } => {}
            Command::PeerSend { to, mut packet } => {
                if let (Some(d), pt::PROPOSAL | pt::INFORM) = (self.stamp_digest.get(&to), packet.packet_type) {
                    let mut w = warden_proto::jute::Writer::new();
                    d.encode(&mut w);
                    packet.data.as_mut().expect("a proposal has data").extend_from_slice(&w.into_inner());
                }
                self.queues.entry((sid, to)).or_default().push_back(Item::Packet(packet));
            }
            Command::SendSnapshot { to, snapshot } => {
                let queue = self.queues.entry((sid, to)).or_default();
                match queue.back() {
                    Some(Item::Packet(p)) if p.packet_type == pt::SNAP => {
                        queue.pop_back();
                        queue.push_back(Item::Snapshot(snapshot));
                    }
                    _ => panic!("SendSnapshot without a SNAP just before"),
                }
            }
            // The in-memory store keeps no log files: the log never holds a learner's zxid, so a
            // learner behind the leader's in-memory history gets SNAP.
            Command::ProbeLog { to, after } => {
                let probe = warden_quorum::zab::LogProbe { after, found: false, log_bytes: 0, snapshot_bytes: 0 };
                answers.push_back(Event::Node(Input::LogProbed { sid: to, probe }));
            }
            Command::SendLogDiff { .. } => panic!("{sid}: a DIFF from disk with no log on disk"),
            Command::PeerClose { sid: other, reason } => panic!("{sid} closed its link to {other}: {reason}"),
            Command::Lead => answers.push_back(Event::Leading(Ok(()))),
            Command::Elect { reason, .. } => self.elect_requests.push((sid, reason)),
            Command::HandOver { leader, zxid } => self.hand_overs.push((sid, leader, zxid)),
            Command::Serving { .. } => {}
            Command::Reconfigured { membership } => self.configs.push((sid, membership)),
        }
    }

    /// Delivers queued packets, one at a time in (from, to) order, until none is left.
    fn run(&mut self) {
        for _ in 0..100_000 {
            let Some((&(from, to), _)) = self.queues.iter().find(|(_, q)| !q.is_empty()) else { return };
            let item = self.queues.get_mut(&(from, to)).and_then(VecDeque::pop_front).unwrap();
            if !self.servers.contains_key(&to) {
                continue;
            }
            let input = match item {
                Item::Packet(packet) => Input::Peer { from, packet },
                Item::Snapshot(snapshot) => {
                    self.snapshots += 1;
                    Input::PeerSnapshot { from, snapshot }
                }
            };
            self.step(to, input);
        }
        panic!("the ensemble never went quiet");
    }

    /// The election's decision as `FastLeaderElection` reports it: `leader`, with the vote it
    /// won by (its last zxid and current epoch), in this round.
    fn decision(&self, leader: Sid, state: ServerState) -> Elected {
        let (zxid, epoch) = self.servers[&leader].driver.vote();
        Elected { leader, state, epoch, zxid, election_epoch: self.round }
    }

    /// Election by fiat: the highest sid among the voters alive leads; every server is told.
    fn elect(&mut self) -> Sid {
        self.round += 1;
        let leader = *self.servers.keys().filter(|s| **s <= 3).max().unwrap();
        let decisions: Vec<(Sid, Elected)> = self
            .servers
            .keys()
            .map(|&sid| {
                let state = match sid {
                    s if s == leader => ServerState::Leading,
                    4 => ServerState::Observing,
                    _ => ServerState::Following,
                };
                (sid, self.decision(leader, state))
            })
            .collect();
        for (sid, e) in decisions {
            self.event(sid, Event::Decided(e));
        }
        self.run();
        for (sid, s) in &self.servers {
            assert!(s.driver.node().serving(), "server {sid} is not serving after the election");
        }
        assert_eq!(self.node(leader).role(), RoleKind::Leader);
        assert_eq!(self.node(4).role(), RoleKind::Observer);
        leader
    }

    /// Moves time by one tick on every server, delivering what the ticks send.
    fn tick(&mut self, n: usize) {
        for _ in 0..n {
            self.now.mono_ms += TICK_MS;
            self.now.wall_ms += TICK_MS as i64;
            let sids: Vec<Sid> = self.servers.keys().copied().collect();
            for sid in sids {
                self.step(sid, Input::Tick);
                self.run();
            }
        }
    }

    /// Kills a server: it is dropped and every peer sees the connection close.
    fn kill(&mut self, dead: Sid) {
        self.servers.remove(&dead);
        self.queues.retain(|(from, to), _| *from != dead && *to != dead);
        let sids: Vec<Sid> = self.servers.keys().copied().collect();
        for sid in sids {
            self.step(sid, Input::PeerDisconnected { sid: dead });
        }
        self.run();
    }

    fn take_client(&mut self, sid: Sid, conn: u64) -> Vec<Command> {
        let all = self.client_out.remove(&sid).unwrap_or_default();
        let (mine, rest): (Vec<Command>, Vec<Command>) = all.into_iter().partition(|c| match c {
            Command::Send { conn: c, .. } | Command::Close { conn: c } => *c == conn,
            _ => false,
        });
        self.client_out.insert(sid, rest);
        mine
    }

    fn connect(&mut self, sid: Sid, conn: u64, session_id: i64, passwd: Vec<u8>) -> ConnectResponse {
        let req = ConnectRequest { timeout_ms: 1_000, session_id, passwd, ..Default::default() };
        self.step(sid, Input::Connect { conn, addr: addr(), req, x509: None });
        self.run();
        let out = self.take_client(sid, conn);
        let Some(Command::Send { frame, .. }) = out.first() else { panic!("no handshake reply: {out:?}") };
        ConnectResponse::from_bytes(&frame[4..]).unwrap()
    }

    /// Sends a request and returns the only reply (panics on none or more than one).
    fn request(&mut self, sid: Sid, conn: u64, xid: i32, req: Request) -> (ReplyHeader, Option<Response>) {
        let op = req.op_code().code();
        self.step(sid, Input::Request { conn, xid, req });
        self.run();
        let replies: Vec<bytes::Bytes> = self
            .take_client(sid, conn)
            .into_iter()
            .filter_map(|c| match c {
                Command::Send { frame, completes_request: true, .. } => Some(frame),
                _ => None,
            })
            .collect();
        assert_eq!(replies.len(), 1, "exactly one reply");
        decode_reply(op, &replies[0][4..]).unwrap()
    }

    fn data(&self, sid: Sid, path: &str) -> Option<Vec<u8>> {
        self.node(sid).tree().node(path).map(|n| n.data.as_deref().unwrap_or_default().to_vec())
    }

    /// Every live server applied the same history.
    fn assert_converged(&self) {
        let zxids: Vec<i64> = self.servers.values().map(|s| s.driver.node().last_processed_zxid()).collect();
        assert!(zxids.windows(2).all(|w| w[0] == w[1]), "servers applied different prefixes: {zxids:?}");
    }
}

fn create(path: &str, data: &[u8], flags: i32) -> Request {
    Request::Create(CreateRequest { path: path.into(), data: Some(data.to_vec()), acl: Acl::open_unsafe(), flags })
}

fn get(path: &str) -> Request {
    Request::GetData(PathWatch { path: path.into(), watch: false })
}

fn epoch_of(zxid: i64) -> i64 {
    zxid >> 32
}

#[test]
fn a_write_on_the_leader_commits_everywhere_and_is_answered_once() {
    let mut c = Cluster::new();
    let leader = c.elect();
    assert_eq!(leader, 3);
    assert_eq!(c.snapshots, 0, "fresh servers sync by DIFF");
    let hs = c.connect(3, 1, 0, Vec::new());
    assert_ne!(hs.session_id, 0);
    assert_eq!((hs.session_id as u64) >> 56, 3, "the leader's sid is in its session ids");
    let (hdr, body) = c.request(3, 1, 1, create("/a", b"x", 0));
    assert_eq!(hdr.err, 0);
    assert_eq!(body, Some(Response::Create { path: "/a".into() }));
    assert_eq!(epoch_of(hdr.zxid), 1);
    for sid in 1..=4 {
        assert_eq!(c.data(sid, "/a").as_deref(), Some(&b"x"[..]), "server {sid}");
    }
    c.assert_converged();
    for sid in 1..=2 {
        assert!(c.client_out.get(&sid).is_none_or(Vec::is_empty), "followers have no client to answer");
    }
}

#[test]
fn a_write_on_a_follower_is_forwarded_committed_and_answered_by_the_follower() {
    let mut c = Cluster::new();
    c.elect();
    let hs = c.connect(1, 7, 0, Vec::new());
    assert_eq!((hs.session_id as u64) >> 56, 1);
    assert!(c.node(3).tree().node("/").is_some());
    let (hdr, _) = c.request(1, 7, 1, create("/b", b"from-1", 0));
    assert_eq!(hdr.err, 0);
    for sid in 1..=4 {
        assert_eq!(c.data(sid, "/b").as_deref(), Some(&b"from-1"[..]), "server {sid}");
    }
    // The same session reads its write on the follower.
    let (hdr, body) = c.request(1, 7, 2, get("/b"));
    assert_eq!(hdr.err, 0);
    let Some(Response::GetData { data, .. }) = body else { panic!("{body:?}") };
    assert_eq!(data.as_deref(), Some(&b"from-1"[..]));
    // A failing write is answered with the leader's error.
    let (hdr, _) = c.request(1, 7, 3, create("/b", b"again", 0));
    assert_eq!(hdr.err, warden_proto::ErrorCode::NodeExists.code());
    // sync goes to the leader and comes back.
    let (hdr, body) = c.request(1, 7, 4, Request::Sync(warden_proto::request::SyncRequest { path: "/b".into() }));
    assert_eq!(hdr.err, 0);
    assert_eq!(body, Some(Response::Sync { path: "/b".into() }));
    // An observer forwards too.
    c.connect(4, 8, 0, Vec::new());
    let (hdr, _) = c.request(4, 8, 1, create("/obs", b"", 0));
    assert_eq!(hdr.err, 0);
    assert!(c.data(2, "/obs").is_some());
    c.assert_converged();
    assert!(c.client_out.get(&3).is_none_or(Vec::is_empty), "the leader answers no forwarded request");
}

/// A ZooKeeper leader sends each txn with the tree's digest after it (`TxnDigest`); a learner
/// compares it with its own tree's once it has applied the txn. A digest that differs is counted
/// (`digest_mismatches_count`) and serving goes on; one of another digest version is not compared.
#[test]
fn a_learner_counts_a_leader_digest_that_differs_from_its_tree() {
    let mut c = Cluster::new();
    let leader = c.elect();
    assert_eq!(leader, 3);
    let wrong = TxnDigest { version: 2, tree_digest: 1 };
    c.stamp_digest.insert(1, wrong);
    c.stamp_digest.insert(2, TxnDigest { version: 3, tree_digest: 1 });
    c.stamp_digest.insert(4, wrong);
    c.connect(3, 7, 0, Vec::new());
    for (xid, path) in [(1, "/a"), (2, "/b")] {
        assert_eq!(c.request(3, 7, xid, create(path, b"v", 0)).0.err, 0);
    }
    let counts: Vec<u64> = (1..=4).map(|sid| c.node(sid).digest_mismatches()).collect();
    // Three txns (the createSession, two creates), each with a wrong digest for 1 and 4.
    assert_eq!(counts, [3, 0, 0, 3], "follower 1 and observer 4 got wrong digests, follower 2 another version");
    c.assert_converged();
    // The digest a learner computes is the leader's own.
    let leader_digest = c.node(3).tree().zk_digest();
    assert!((1..=4).all(|sid| c.node(sid).tree().zk_digest() == leader_digest));
}

#[test]
fn an_ephemeral_made_through_a_follower_goes_when_the_leader_expires_its_session() {
    let mut c = Cluster::new();
    c.elect();
    let hs = c.connect(2, 5, 0, Vec::new());
    let (hdr, _) = c.request(2, 5, 1, create("/e", b"", 1));
    assert_eq!(hdr.err, 0);
    for sid in 1..=4 {
        assert_eq!(c.node(sid).tree().node("/e").unwrap().stat.ephemeral_owner, hs.session_id);
    }
    // Pings from the client keep it alive through the follower's PING touch reports.
    for xid in 2..12 {
        c.tick(2);
        let (hdr, _) = c.request(2, 5, xid, Request::Ping);
        assert_eq!(hdr.err, 0);
    }
    assert!(c.data(3, "/e").is_some(), "a session touched on a follower does not expire on the leader");
    // Silence: the leader expires it, and the closeSession removes the ephemeral everywhere.
    c.tick(20);
    for sid in 1..=4 {
        assert!(c.data(sid, "/e").is_none(), "server {sid} still has the ephemeral");
    }
    let out = c.take_client(2, 5);
    assert!(out.iter().any(|o| matches!(o, Command::Close { conn: 5 })), "the follower closes the expired client");
    c.assert_converged();
}

#[test]
fn a_session_made_on_one_follower_reconnects_to_another_with_its_password() {
    let mut c = Cluster::new();
    c.elect();
    let hs = c.connect(1, 1, 0, Vec::new());
    c.request(1, 1, 1, create("/s", b"1", 0));
    c.step(1, Input::Disconnected { conn: 1 });
    let again = c.connect(2, 2, hs.session_id, hs.passwd.clone());
    assert_eq!(again.session_id, hs.session_id);
    assert!(again.timeout_ms > 0);
    let (hdr, _) = c.request(2, 2, 2, create("/s2", b"2", 1));
    assert_eq!(hdr.err, 0);
    assert_eq!(c.node(3).tree().node("/s2").unwrap().stat.ephemeral_owner, hs.session_id);
    // A wrong password is refused.
    let bad = c.connect(2, 3, hs.session_id, vec![0; 16]);
    assert_eq!(bad.session_id, 0);
}

#[test]
fn after_the_leader_dies_a_new_leader_keeps_every_acknowledged_write_in_a_new_epoch() {
    let mut c = Cluster::new();
    assert_eq!(c.elect(), 3);
    c.connect(3, 1, 0, Vec::new());
    c.connect(1, 2, 0, Vec::new());
    let mut acked = Vec::new();
    for i in 0..5 {
        let (sid, conn) = if i % 2 == 0 { (3, 1) } else { (1, 2) };
        let path = format!("/k{i}");
        let (hdr, _) = c.request(sid, conn, i + 1, create(&path, path.as_bytes(), 0));
        assert_eq!(hdr.err, 0);
        acked.push(path);
    }
    let before = c.node(1).last_processed_zxid();
    c.kill(3);
    assert!(c.elect_requests.iter().any(|(s, _)| *s == 1) && c.elect_requests.iter().any(|(s, _)| *s == 2));
    for sid in [1, 2, 4] {
        assert_eq!(c.node(sid).role(), RoleKind::Looking);
    }
    assert_eq!(c.elect(), 2);
    for sid in [1, 2, 4] {
        for path in &acked {
            assert_eq!(c.data(sid, path).as_deref(), Some(path.as_bytes()), "server {sid} lost {path}");
        }
        assert_eq!(c.node(sid).epochs(), Some((2, 2)), "server {sid}");
    }
    let hs = c.connect(1, 3, 0, Vec::new());
    assert_ne!(hs.session_id, 0);
    let (hdr, _) = c.request(1, 3, 1, create("/after", b"", 0));
    assert_eq!(hdr.err, 0);
    assert_eq!(epoch_of(hdr.zxid), 2);
    assert!(hdr.zxid > before);
    assert_eq!(hdr.zxid & 0xffff_ffff, 2, "counter restarts in the new epoch (createSession was 1)");
    c.assert_converged();
}

#[test]
fn close_session_through_a_follower_is_answered_then_the_connection_closes() {
    let mut c = Cluster::new();
    c.elect();
    let hs = c.connect(1, 9, 0, Vec::new());
    c.request(1, 9, 1, create("/mine", b"", 1));
    c.step(1, Input::Request { conn: 9, xid: 2, req: Request::CloseSession });
    c.run();
    let out = c.take_client(1, 9);
    assert!(matches!(out.first(), Some(Command::Send { completes_request: true, .. })), "{out:?}");
    assert!(matches!(out.last(), Some(Command::Close { conn: 9 })), "{out:?}");
    for sid in 1..=4 {
        assert!(c.data(sid, "/mine").is_none(), "server {sid}");
    }
    let gone = c.connect(2, 10, hs.session_id, hs.passwd);
    assert_eq!(gone.session_id, 0, "a closed session cannot be resumed anywhere");
    c.assert_converged();
}

#[test]
fn a_follower_that_joins_after_the_in_memory_log_is_synced_by_snapshot() {
    let mut c = Cluster::new();
    let late = c.servers.remove(&1).unwrap();
    assert_eq!(c.elect(), 3);
    c.connect(3, 1, 0, Vec::new());
    for i in 0..510 {
        let (hdr, _) = c.request(3, 1, i + 1, create(&format!("/n{i}"), b"v", 0));
        assert_eq!(hdr.err, 0);
    }
    c.servers.insert(1, late);
    let e = c.decision(3, ServerState::Following);
    c.event(1, Event::Decided(e));
    c.run();
    assert_eq!(c.snapshots, 1, "synced by SNAP, not DIFF");
    // The leader recorded the syncs in flight as each started: 2 and 4 by DIFF at the election,
    // then this one SNAP on its own (`inflight_diff_count`, `inflight_snap_count`).
    let s = c.node(3).summaries();
    assert_eq!((s.inflight_snap_count.count, s.inflight_snap_count.max), (1, 1));
    assert_eq!(s.inflight_diff_count.count, 2);
    assert!(c.node(1).serving());
    assert_eq!(c.data(1, "/n0").as_deref(), Some(&b"v"[..]));
    assert_eq!(c.data(1, "/n509").as_deref(), Some(&b"v"[..]));
    c.assert_converged();
    // The synced follower takes part in later commits.
    let hs = c.connect(1, 2, 0, Vec::new());
    assert_ne!(hs.session_id, 0);
    let (hdr, _) = c.request(1, 2, 1, create("/late", b"", 0));
    assert_eq!(hdr.err, 0);
    c.assert_converged();
}

/// ZooKeeper fills its committedLog while replaying the txn log at load. A restarted leader given
/// the txns it replayed (`Driver::restore`) syncs a follower a few txns behind by DIFF; without them
/// (as before) that follower got a SNAP.
#[test]
fn a_restarted_leader_syncs_a_follower_a_few_txns_behind_by_diff() {
    for with_history in [true, false] {
        let mut c = Cluster::new();
        assert_eq!(c.elect(), 3);
        c.connect(3, 1, 0, Vec::new());
        let mut paths = Vec::new();
        let mut write = |c: &mut Cluster, i: i32| {
            let path = format!("/k{i}");
            let (hdr, _) = c.request(3, 1, i + 1, create(&path, path.as_bytes(), 0));
            assert_eq!(hdr.err, 0);
            paths.push(path);
        };
        for i in 0..10 {
            write(&mut c, i);
        }
        // Follower 1 stops, keeping its state (as on disk), and misses three txns.
        let late = c.servers.remove(&1).unwrap();
        c.queues.retain(|(from, to), _| *from != 1 && *to != 1);
        c.step(3, Input::PeerDisconnected { sid: 1 });
        c.run();
        for i in 10..13 {
            write(&mut c, i);
        }
        // The leader restarts from its storage: the tree and its sessions (as a snapshot holds
        // them), the txns in its log, its epoch files.
        let old = c.servers.remove(&3).unwrap();
        c.queues.retain(|(from, to), _| *from != 3 && *to != 3);
        let (tree, sessions) = old.driver.node().snapshot_state();
        let store = old.store;
        let (accepted_epoch, current_epoch) = (store.accepted_epoch.unwrap(), store.current_epoch.unwrap());
        assert_eq!(old.driver.node().epochs(), Some((accepted_epoch, current_epoch)), "the epoch files are current");
        let setup = QuorumSetup { accepted_epoch, current_epoch, ..QuorumSetup::new(3, [1, 2, 3]) };
        let mut restarted = driver(3, Node::new_quorum(node_config(3), setup, c.now));
        let zxid = tree.last_processed_zxid();
        // With the history, no snapshot was loaded and the whole log is replayed; without it, as
        // if a snapshot held everything.
        let (replayed, snapshot_zxid) = if with_history { (store.log.clone(), None) } else { (Vec::new(), Some(zxid)) };
        assert_eq!(replayed.last().map(|(h, _)| h.zxid).unwrap_or(zxid), zxid);
        let mut cmds = Vec::new();
        restarted.restore(tree, &sessions, replayed, snapshot_zxid, &mut cmds);
        for sid in [2, 4] {
            c.step(sid, Input::PeerDisconnected { sid: 3 });
        }
        c.run();
        c.start(3, Server { driver: restarted, store }, cmds);
        c.servers.insert(1, late);
        assert_eq!(c.elect(), 3);
        let want = if with_history { 0 } else { 1 };
        assert_eq!(c.snapshots, want, "SNAP syncs after the restart (history replayed: {with_history})");
        for path in &paths {
            assert_eq!(c.data(1, path).as_deref(), Some(path.as_bytes()), "follower 1 lacks {path}");
        }
        c.assert_converged();
        // The ensemble keeps working after the restart.
        c.connect(1, 2, 0, Vec::new());
        let (hdr, _) = c.request(1, 2, 1, create("/after", b"", 0));
        assert_eq!(hdr.err, 0);
        c.assert_converged();
    }
}

/// The REVALIDATE packets queued from `from` to `to`, as (session id, timeout).
fn queued_revalidates(c: &Cluster, from: Sid, to: Sid) -> Vec<(i64, i32)> {
    let Some(q) = c.queues.get(&(from, to)) else { return Vec::new() };
    q.iter()
        .filter_map(|item| match item {
            Item::Packet(p) if p.packet_type == pt::REVALIDATE => {
                let data = p.data.as_deref().unwrap();
                assert_eq!(p.zxid, -1);
                assert_eq!(data.len(), 12, "long sessionId, int timeout");
                let id = i64::from_be_bytes(data[..8].try_into().unwrap());
                Some((id, i32::from_be_bytes(data[8..].try_into().unwrap())))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_reconnect_to_a_learner_is_answered_after_the_leaders_revalidate_reply() {
    let mut c = Cluster::new();
    c.elect();
    let hs = c.connect(1, 1, 0, Vec::new());
    c.request(1, 1, 1, create("/r", b"1", 0));
    c.step(1, Input::Disconnected { conn: 1 });
    for (sid, conn) in [(2, 2), (4, 3)] {
        // The learner asks the leader and answers nothing until the reply is back; a request sent
        // meanwhile waits behind the handshake.
        let req = ConnectRequest {
            timeout_ms: 1_000,
            session_id: hs.session_id,
            passwd: hs.passwd.clone(),
            ..Default::default()
        };
        c.step(sid, Input::Connect { conn, addr: addr(), req, x509: None });
        c.step(sid, Input::Request { conn, xid: 5, req: get("/r") });
        assert!(c.take_client(sid, conn).is_empty(), "server {sid} answered before the leader did");
        assert_eq!(queued_revalidates(&c, sid, 3), [(hs.session_id, 1_000)]);
        c.run();
        let out = c.take_client(sid, conn);
        let frames: Vec<&bytes::Bytes> = out
            .iter()
            .filter_map(|o| match o {
                Command::Send { frame, .. } => Some(frame),
                _ => None,
            })
            .collect();
        assert_eq!(frames.len(), 2, "handshake reply, then the read: {out:?}");
        let again = ConnectResponse::from_bytes(&frames[0][4..]).unwrap();
        assert_eq!(again.session_id, hs.session_id);
        assert!(again.timeout_ms > 0);
        let (hdr, body) = decode_reply(OpCode::GetData.code(), &frames[1][4..]).unwrap();
        assert_eq!((hdr.xid, hdr.err), (5, 0));
        assert!(matches!(body, Some(Response::GetData { .. })));
    }
}

#[test]
fn a_learner_refuses_a_session_the_leader_is_expiring_although_it_still_holds_it() {
    let mut c = Cluster::new();
    c.elect();
    let hs = c.connect(1, 1, 0, Vec::new());
    c.step(1, Input::Disconnected { conn: 1 });
    // The leader ticks past the session's deadline (PINGs delivered); its closeSession proposal is
    // held back, so the followers still hold the session.
    let proposing = |c: &Cluster| {
        c.queues.iter().any(|(_, q)| q.iter().any(|i| matches!(i, Item::Packet(p) if p.packet_type == pt::PROPOSAL)))
    };
    for _ in 0..100 {
        c.now.mono_ms += TICK_MS;
        c.step(3, Input::Tick);
        if proposing(&c) {
            break;
        }
        c.run();
    }
    assert!(proposing(&c), "the leader expires the session");
    let holds = |c: &Cluster, sid: Sid| c.node(sid).snapshot_state().1.iter().any(|(id, _)| *id == hs.session_id);
    assert!(holds(&c, 2), "the follower still holds the session");
    let req = ConnectRequest {
        timeout_ms: 1_000,
        session_id: hs.session_id,
        passwd: hs.passwd.clone(),
        ..Default::default()
    };
    c.step(2, Input::Connect { conn: 2, addr: addr(), req, x509: None });
    assert!(c.take_client(2, 2).is_empty(), "the follower's own table must not decide");
    c.run();
    let out = c.take_client(2, 2);
    let Some(Command::Send { frame, .. }) = out.first() else { panic!("no handshake reply: {out:?}") };
    let answer = ConnectResponse::from_bytes(&frame[4..]).unwrap();
    assert_eq!((answer.session_id, answer.timeout_ms), (0, 0), "expired");
    assert!(matches!(out.last(), Some(Command::Close { conn: 2 })));
    assert!(!holds(&c, 2), "the leader's closeSession reached the follower");
}

#[test]
fn a_session_moves_to_a_follower_after_the_leader_changed_and_expires_under_the_new_leader() {
    let mut c = Cluster::new();
    assert_eq!(c.elect(), 3);
    let kept = c.connect(1, 1, 0, Vec::new());
    let lost = c.connect(1, 2, 0, Vec::new());
    c.kill(3);
    assert_eq!(c.elect(), 2);
    // `kept` moves to follower 1 at once: the new leader knows it (fresh deadline).
    let again = c.connect(1, 3, kept.session_id, kept.passwd.clone());
    assert_eq!(again.session_id, kept.session_id);
    let (hdr, _) = c.request(1, 3, 1, create("/moved", b"", 1));
    assert_eq!(hdr.err, 0);
    assert_eq!(c.node(2).tree().node("/moved").unwrap().stat.ephemeral_owner, kept.session_id);
    // `lost` stays away until the new leader expires it (pings keep `kept` alive).
    for xid in 2..12 {
        c.tick(2);
        c.request(1, 3, xid, Request::Ping);
    }
    let refused = c.connect(1, 4, lost.session_id, lost.passwd.clone());
    assert_eq!((refused.session_id, refused.timeout_ms), (0, 0));
    let still = c.connect(4, 5, kept.session_id, kept.passwd.clone());
    assert_eq!(still.session_id, kept.session_id, "the observer revalidates through the leader too");
}

fn reconfig(joining: Option<&str>, leaving: Option<&str>, cur_config_id: i64) -> Request {
    Request::Reconfig(ReconfigRequest {
        joining: joining.map(String::from),
        leaving: leaving.map(String::from),
        new_members: None,
        cur_config_id,
    })
}

fn config_text(c: &Cluster, sid: Sid) -> String {
    String::from_utf8(c.data(sid, "/zookeeper/config").unwrap()).unwrap()
}

/// Voters 1-3 and observer 4 with their addresses in the configuration, `reconfigEnabled`, and
/// `super:test` as the superuser.
fn reconfig_cluster() -> Cluster {
    let super_digest = warden_tree::digest_id(b"super:test");
    let cfg = |sid| NodeConfig { reconfig_enabled: true, super_digest: Some(super_digest.clone()), ..node_config(sid) };
    let servers = "server.1=127.0.0.1:2881:3881;2181\nserver.2=127.0.0.2:2881:3881;2181\n\
                   server.3=127.0.0.3:2881:3881;2181\nserver.4=127.0.0.4:2881:3881:observer;2181";
    Cluster::with(cfg, Membership::parse_text(servers).unwrap())
}

/// kazoo's TestReconfig and the leader's rules, through the one driver: the first leader gives
/// the configuration its NEWLEADER zxid as version and every server takes it from NEWLEADER;
/// a reconfig forwarded by a follower is checked in ZooKeeper's order (bad version and bad
/// arguments before the missing permission, no quorum for a new configuration of absent
/// servers), commits, answers with the new text, and becomes active on every server, which
/// reports it to its shell. A voter removed stays a non-voting follower, and later writes commit
/// with the new voters only.
#[test]
fn a_reconfig_commits_on_both_quorums_and_activates_everywhere() {
    let mut c = reconfig_cluster();
    assert_eq!(c.elect(), 3);
    let v1 = format!("version={:x}", 1i64 << 32);
    for sid in 1..=4 {
        let text = config_text(&c, sid);
        assert!(text.ends_with(&v1), "server {sid}: {text}");
        assert!(text.contains("server.4=127.0.0.4:2881:3881:observer;0.0.0.0:2181"), "{text}");
    }
    c.connect(1, 1, 0, Vec::new());
    c.connect(1, 2, 0, Vec::new());
    let auth = Request::Auth(AuthPacket { auth_type: 0, scheme: "digest".into(), auth: b"super:test".to_vec() });
    c.step(1, Input::Request { conn: 2, xid: -4, req: auth });
    c.run();
    c.take_client(1, 2);

    let joiner = "server.100=0.0.0.0:1234:2345:observer;0.0.0.0:3456";
    let (hdr, _) = c.request(1, 1, 1, reconfig(Some(joiner), None, -1));
    assert_eq!(hdr.err, ErrorCode::NoAuth.code(), "no superuser, no reconfig");
    let (hdr, _) = c.request(1, 1, 2, reconfig(Some("some thing"), None, -1));
    assert_eq!(hdr.err, ErrorCode::BadArguments.code(), "bad arguments come before the permission check");
    let (hdr, _) = c.request(1, 1, 3, reconfig(Some(joiner), None, 7));
    assert_eq!(hdr.err, ErrorCode::BadVersion.code(), "a stale version comes before the permission check");
    let absent = "server.7=127.0.0.7:1:2;3,server.8=127.0.0.8:1:2;3,server.9=127.0.0.9:1:2;3";
    let (hdr, _) = c.request(1, 2, 4, reconfig(Some(absent), Some("1,2"), -1));
    assert_eq!(hdr.err, ErrorCode::NewConfigNoQuorum.code(), "servers 3, 7, 8, 9: only 3 is synced");

    let (hdr, body) = c.request(1, 2, 5, reconfig(Some(joiner), None, -1));
    assert_eq!(hdr.err, 0);
    let Some(Response::GetData { data: Some(data), stat }) = body else { panic!("reply {body:?}") };
    let text = String::from_utf8(data).unwrap();
    assert!(text.contains(joiner), "{text}");
    assert_eq!(text.lines().last(), Some(format!("version={:x}", hdr.zxid).as_str()), "the version is the txn's zxid");
    assert_eq!((stat.mzxid, stat.version), (hdr.zxid, -1));
    for sid in 1..=4 {
        assert_eq!(config_text(&c, sid), text, "server {sid}");
        let (_, m) = c.configs.iter().rev().find(|(s, _)| *s == sid).expect("reported to the shell");
        assert_eq!(m.version, hdr.zxid);
    }
    let (hdr, _) = c.request(1, 2, 6, reconfig(None, Some("100"), -1));
    assert_eq!(hdr.err, 0);
    assert!(!config_text(&c, 2).contains("server.100"));

    // Server 1 leaves the voters: it keeps following, without a vote.
    let (hdr, body) = c.request(1, 2, 7, reconfig(None, Some("1"), -1));
    assert_eq!(hdr.err, 0, "{body:?}");
    assert_eq!(c.node(1).role(), RoleKind::Follower, "a removed follower goes on as a non-voting one");
    assert_eq!(c.node(3).quorum_size(), Some(2));
    let (hdr, _) = c.request(1, 1, 8, create("/after", b"x", 0));
    assert_eq!(hdr.err, 0);
    for sid in 1..=4 {
        assert_eq!(c.data(sid, "/after").as_deref(), Some(&b"x"[..]), "server {sid}");
    }
    c.assert_converged();
}

/// A learner takes its leader's configuration from NEWLEADER only at UPTODATE, once a quorum has
/// acknowledged that leader (ZooKeeper's `syncWithLeader`): a leader that dies before it is
/// established leaves no configuration behind (a simulator seed found a follower ending with
/// the version a failed leader had given the configuration, above the next leader's).
#[test]
fn a_configuration_from_newleader_waits_for_uptodate() {
    let mut c = reconfig_cluster();
    let before = config_text(&c, 2);
    c.round += 1;
    for (sid, state) in [(3, ServerState::Leading), (2, ServerState::Following)] {
        let e = c.decision(3, state);
        c.event(sid, Event::Decided(e));
    }
    // Deliver packets until server 2 has taken NEWLEADER, then the leader dies.
    loop {
        let (&(from, to), _) = c.queues.iter().find(|(_, q)| !q.is_empty()).expect("NEWLEADER never came");
        let item = c.queues.get_mut(&(from, to)).and_then(VecDeque::pop_front).unwrap();
        let Item::Packet(packet) = item else { panic!("a snapshot to an empty follower") };
        let newleader = packet.packet_type == pt::NEWLEADER;
        c.step(to, Input::Peer { from, packet });
        if newleader {
            assert_eq!(to, 2);
            break;
        }
    }
    assert_eq!(config_text(&c, 2), before, "not active before UPTODATE");
    c.kill(3);
    assert!(!c.node(2).serving());
    assert_eq!(config_text(&c, 2), before, "the dead leader's configuration never became active");
    assert!(c.configs.iter().all(|(sid, _)| *sid != 2), "nothing reported to server 2's shell");

    // The next leader's NEWLEADER and UPTODATE make its configuration active everywhere.
    let mut c = reconfig_cluster();
    assert_eq!(c.elect(), 3);
    let v1 = format!("version={:x}", 1i64 << 32);
    assert!(config_text(&c, 2).ends_with(&v1), "{}", config_text(&c, 2));
}

/// Two first leaders can give the version-0 configuration different versions (ZOOKEEPER-1783)
/// when the first never got its UPTODATE out: a learner holding the same servers under a higher
/// version takes its leader's at UPTODATE (a simulator seed ended with followers on one version
/// and their leader on another).
#[test]
fn a_learner_takes_its_leaders_version_of_the_same_servers_at_uptodate() {
    let mut c = reconfig_cluster();
    let mut renumbered = c.node(2).membership().cloned().expect("a configuration");
    renumbered.version = 5 << 32;
    let super_digest = warden_tree::digest_id(b"super:test");
    let cfg = NodeConfig { reconfig_enabled: true, super_digest: Some(super_digest), ..node_config(2) };
    let mut setup = QuorumSetup::new(2, [1, 2, 3]);
    setup.membership = renumbered;
    let node = Node::new_quorum(cfg, setup, c.now);
    c.servers.insert(2, Server { driver: driver(2, node), store: MemStore::default() });
    assert!(config_text(&c, 2).ends_with("version=500000000"), "{}", config_text(&c, 2));

    assert_eq!(c.elect(), 3);
    let v1 = format!("version={:x}", 1i64 << 32);
    for sid in 1..=4 {
        assert!(config_text(&c, sid).ends_with(&v1), "server {sid}: {}", config_text(&c, sid));
        assert_eq!(c.node(sid).membership().map(|m| m.version), Some(1 << 32), "server {sid}");
    }
}

/// A leader its own reconfig removes designates the new voter that ACKed the most, and every
/// server goes straight to it (ZooKeeper's COMMITANDACTIVATE / INFORMANDACTIVATE hand-over):
/// no election is asked for, the designated voter leads, the old leader follows without a vote.
#[test]
fn a_leader_removed_by_its_own_reconfig_hands_over_to_a_designated_voter() {
    let mut c = reconfig_cluster();
    assert_eq!(c.elect(), 3);
    c.connect(1, 1, 0, Vec::new());
    let auth = Request::Auth(AuthPacket { auth_type: 0, scheme: "digest".into(), auth: b"super:test".to_vec() });
    c.step(1, Input::Request { conn: 1, xid: -4, req: auth });
    c.run();
    c.take_client(1, 1);
    let (hdr, _) = c.request(1, 1, 1, create("/before", b"x", 0));
    assert_eq!(hdr.err, 0);

    let (hdr, body) = c.request(1, 1, 2, reconfig(None, Some("3"), -1));
    assert_eq!(hdr.err, 0, "{body:?}");
    assert!(c.elect_requests.is_empty(), "no election: {:?}", c.elect_requests);
    let mut handed: Vec<(Sid, Sid, i64)> = c.hand_overs.clone();
    handed.sort();
    // Servers 1 and 2 ACKed everything; the tie goes to the higher sid.
    let expected: Vec<(Sid, Sid, i64)> = (1..=4).map(|sid| (sid, 2, hdr.zxid)).collect();
    assert_eq!(handed, expected, "every server hands over to server 2, for the new configuration");
    for sid in 1..=4 {
        assert_eq!(c.node(sid).role(), RoleKind::Looking, "server {sid} left its role");
    }

    // The shell's election reports the designated leader as its decision.
    c.round += 1;
    let epoch = hdr.zxid >> 32;
    for (sid, state) in [
        (2, ServerState::Leading),
        (1, ServerState::Following),
        (3, ServerState::Following),
        (4, ServerState::Observing),
    ] {
        let decided = Elected { leader: 2, state, epoch, zxid: hdr.zxid, election_epoch: c.round };
        c.event(sid, Event::Decided(decided));
    }
    c.run();
    assert_eq!(c.node(2).role(), RoleKind::Leader);
    assert_eq!(c.node(3).role(), RoleKind::Follower, "the old leader follows without a vote");
    assert_eq!(c.node(4).role(), RoleKind::Observer);
    assert_eq!(c.node(2).quorum_size(), Some(2));
    assert!(c.node(2).epochs().unwrap().1 > epoch, "the designated leader leads in a new epoch");
    c.connect(2, 1, 0, Vec::new());
    let (hdr, _) = c.request(2, 1, 1, create("/after", b"y", 0));
    assert_eq!(hdr.err, 0);
    for sid in 1..=4 {
        assert!(c.node(sid).serving(), "server {sid}");
        assert_eq!(c.data(sid, "/after").as_deref(), Some(&b"y"[..]), "server {sid}");
        assert_eq!(c.data(sid, "/before").as_deref(), Some(&b"x"[..]), "server {sid}");
        assert!(!config_text(&c, sid).contains("server.3=127.0.0.3:2881:3881:participant"), "server {sid}");
    }
    c.assert_converged();
}
