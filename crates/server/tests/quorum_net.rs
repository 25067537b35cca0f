//! The quorum port shell over real loopback TCP.
//!
//! - The pure ZAB machines (`warden_quorum::zab`) run over `LeaderNet` / `LearnerNet` with an
//!   in-memory "storage" (a `Persist` is durable at once; the log is a `Vec`): 1 leader, 2
//!   followers and 1 observer complete discovery, DIFF sync, NEWLEADER and UPTODATE; every
//!   proposal reaches every follower in order and the observer by INFORM; a follower whose
//!   connection is cut mid-stream (from either end) reconnects, resyncs by DIFF and ends with the
//!   leader's log.
//! - The shells on their own: registration by sid, replacement by a newer connection from the
//!   same sid, refusal of a bad first packet or malformed bytes, a slow learner disconnected
//!   instead of a packet dropped, connect retries, the deadline, and the bound source address.
//!
//! Every wait polls with a deadline.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use warden_proto::jute::Record;
use warden_proto::quorum::{packet_type as pt, LearnerInfo, QuorumPacket, LEARNER_PROTOCOL_VERSION};
use warden_proto::txn::{Txn, TxnHeader};
use warden_quorum::zab::{
    codec, make_zxid, Action, EpochKind, Leader, LeaderConfig, LeaderInit, Learner, LearnerConfig, LearnerRole,
    LocalState, Sid, TxnEntry, Zxid,
};
use warden_server::quorum_net::{LeaderEvent, LeaderNet, LearnerEvent, LearnerNet, QuorumNetConfig, SendError};

const WAIT: Duration = Duration::from_secs(20);
const TICK_MS: u64 = 50;

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn net_cfg() -> QuorumNetConfig {
    QuorumNetConfig::from_ticks(TICK_MS, 40, 20)
}

/// Polls `cond` every 10 ms until it holds or `WAIT` passes.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn entry(zxid: Zxid, n: u64) -> TxnEntry {
    let txn = Txn::SetData { path: "/x".into(), data: Some(n.to_be_bytes().to_vec().into()), version: -1 };
    TxnEntry {
        hdr: TxnHeader { client_id: 1, cxid: n as i32, zxid, time_ms: 0, txn_type: txn.op().code() },
        txn: txn.into(),
        digest: None,
    }
}

// ----- in-memory storage and the node tasks -----

#[derive(Debug, Default)]
struct Store {
    log: Vec<TxnEntry>,
    tree: Vec<TxnEntry>,
    accepted: i64,
    current: i64,
    synced: bool,
    broadcasting: bool,
    /// Packet types received from the leader, over every connection.
    seen: Vec<i32>,
    connections: u32,
    lookings: Vec<String>,
}

type Shared = Arc<Mutex<Store>>;

fn store(log: Vec<TxnEntry>, epoch: i64) -> Shared {
    Arc::new(Mutex::new(Store { tree: log.clone(), log, accepted: epoch, current: epoch, ..Store::default() }))
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Store> {
    s.lock().unwrap()
}

/// Where a node's Send and Disconnect actions go.
trait Transport {
    fn send_to(&mut self, to: Sid, packet: QuorumPacket);
    fn drop_learner(&mut self, sid: Sid);
}

impl Transport for LeaderNet {
    fn send_to(&mut self, to: Sid, packet: QuorumPacket) {
        // A failure is followed by Disconnected, which the leader loop hands to the machine.
        let _ = self.send(to, packet);
    }
    fn drop_learner(&mut self, sid: Sid) {
        self.disconnect(sid);
    }
}

impl Transport for LearnerNet {
    fn send_to(&mut self, _to: Sid, packet: QuorumPacket) {
        let _ = self.send(packet);
    }
    fn drop_learner(&mut self, _sid: Sid) {
        unreachable!("a learner never disconnects a learner")
    }
}

/// Durability facts produced by carrying out a batch of actions.
#[derive(Default)]
struct Durable {
    zxid: Option<Zxid>,
    epochs: Vec<(EpochKind, i64)>,
}

/// Carries out `actions` in order against the in-memory store.
fn carry_out(actions: Vec<Action>, store: &Shared, net: &mut dyn Transport) -> Durable {
    let mut durable = Durable::default();
    for action in actions {
        let mut s = lock(store);
        match action {
            Action::Send { to, packet } => {
                drop(s);
                net.send_to(to, packet);
            }
            Action::PingReply { to, zxid } => {
                drop(s);
                net.send_to(to, codec::ping_reply(zxid, &[]));
            }
            Action::Disconnect { sid, .. } => {
                drop(s);
                net.drop_learner(sid);
            }
            Action::ProbeLog { .. } | Action::SendLogDiff { .. } => {
                unreachable!("these leaders keep snapshot_size_factor below 0 (no DIFF from disk)")
            }
            Action::Persist(e) => {
                let last = s.log.last().map_or(0, TxnEntry::zxid);
                assert!(e.zxid() > last, "persist {:#x} after {last:#x}", e.zxid());
                durable.zxid = Some(e.zxid());
                s.log.push(e);
            }
            Action::PersistEpoch { kind, epoch } => {
                match kind {
                    EpochKind::Accepted => s.accepted = epoch,
                    EpochKind::Current => s.current = epoch,
                }
                durable.epochs.push((kind, epoch));
            }
            Action::Truncate { zxid } => {
                s.log.retain(|e| e.zxid() <= zxid);
                s.tree.retain(|e| e.zxid() <= zxid);
            }
            Action::ApplyCommitted(e) => {
                let last = s.tree.last().map_or(0, TxnEntry::zxid);
                assert!(e.zxid() > last, "applied {:#x} after {last:#x}", e.zxid());
                assert!(s.log.contains(&e), "applied {:#x} that is not in the log", e.zxid());
                s.tree.push(e);
            }
            Action::Synced { .. } => s.synced = true,
            Action::Broadcasting { .. } => s.broadcasting = true,
            Action::GoLooking { reason } | Action::StepAside { reason } => {
                s.synced = false;
                s.lookings.push(reason);
            }
            Action::HandOver { leader } => {
                s.synced = false;
                s.lookings.push(format!("handed over to {leader}"));
            }
            Action::SendSnapshot { .. } | Action::InstallSnapshot { .. } => {
                panic!("SNAP sync is not supported by the shell yet: {action:?}")
            }
            Action::TouchSessions { .. }
            | Action::Forwarded { .. }
            | Action::Revalidate { .. }
            | Action::Revalidated { .. }
            | Action::LeaderConfig(_)
            | Action::SyncDone => {}
        }
    }
    durable
}

enum LeaderCmd {
    Propose(u64),
    Disconnect(Sid),
}

async fn run_leader(
    mut net: LeaderNet,
    mut leader: Leader,
    first: Vec<Action>,
    store: Shared,
    mut cmds: mpsc::Receiver<LeaderCmd>,
) {
    let started = Instant::now();
    let now = || started.elapsed().as_millis() as u64;
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    let mut actions = first;
    let mut proposed = 0u64;
    loop {
        // Carry out, feeding durability back until nothing is left.
        while !actions.is_empty() {
            let durable = carry_out(std::mem::take(&mut actions), &store, &mut net);
            if let Some(z) = durable.zxid {
                leader.on_durable(z, &mut actions);
            }
            for (kind, epoch) in durable.epochs {
                leader.on_epoch_durable(kind, epoch, &mut actions);
            }
        }
        leader.check_invariants().expect("leader invariants");
        tokio::select! {
            event = net.recv() => match event {
                Some(LeaderEvent::Packet { from, packet }) => leader.on_packet(from, &packet, now(), &mut actions),
                Some(LeaderEvent::Disconnected { sid }) => leader.on_disconnect(sid, &mut actions),
                Some(LeaderEvent::LogDiffFailed { sid }) => leader.on_log_diff_failed(sid, &mut actions),
                None => break,
            },
            _ = tick.tick() => leader.on_tick(now(), &mut actions),
            cmd = cmds.recv() => match cmd {
                Some(LeaderCmd::Propose(n)) => {
                    for _ in 0..n {
                        proposed += 1;
                        let txn = (*entry(0, proposed).txn).clone();
                        leader.propose(1, proposed as i32, 0, txn, &mut actions).expect("propose");
                    }
                }
                Some(LeaderCmd::Disconnect(sid)) => {
                    net.disconnect(sid);
                }
                None => break,
            },
        }
        // Losing the learners at the end (commands closed) may stop it; nothing else may.
        assert!(!leader.is_stopped() || cmds.is_closed(), "leader stepped down: {:?}", lock(&store).lookings);
    }
    net.stop().await;
}

enum LearnerCmd {
    Cut,
}

/// A learner node: connects, runs one `Learner` per connection, and reconnects to the same
/// leader whenever the machine goes LOOKING (a real server would elect first).
async fn run_learner(
    sid: Sid,
    role: LearnerRole,
    leader_sid: Sid,
    leader_addr: SocketAddr,
    store: Shared,
    mut cmds: mpsc::Receiver<LearnerCmd>,
) {
    let started = Instant::now();
    let now = || started.elapsed().as_millis() as u64;
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    loop {
        let state = {
            let mut s = lock(&store);
            // The tree reflects the whole durable log, as ZooKeeper loads it.
            s.tree = s.log.clone();
            s.connections += 1;
            LocalState {
                accepted_epoch: s.accepted,
                current_epoch: s.current,
                last_zxid: s.log.last().map_or(0, TxnEntry::zxid),
            }
        };
        let mut cfg = LearnerConfig::new(sid, leader_sid, role);
        cfg.tick_ms = TICK_MS;
        cfg.init_limit = 40;
        cfg.sync_limit = 20;
        let mut actions = Vec::new();
        let mut learner = Learner::new(cfg, state, now(), &mut actions);
        let first = match actions.remove(0) {
            Action::Send { packet, .. } => packet,
            other => panic!("a learner starts by sending its info, not {other:?}"),
        };
        let cfg = net_cfg();
        let connect = LearnerNet::connect(leader_addr, sid, first, None, &cfg);
        let mut net = tokio::select! {
            net = connect => match net {
                Ok(net) => net,
                Err(e) => {
                    // Only at the end (the leader is gone); a test waiting on this node fails.
                    lock(&store).lookings.push(format!("connect: {e}"));
                    return;
                }
            },
            // Stopped while connecting.
            None = cmds.recv() => return,
        };
        loop {
            while !actions.is_empty() {
                let durable = carry_out(std::mem::take(&mut actions), &store, &mut net);
                if let Some(z) = durable.zxid {
                    learner.on_durable(z, &mut actions);
                }
                for (kind, epoch) in durable.epochs {
                    learner.on_epoch_durable(kind, epoch, &mut actions);
                }
            }
            learner.check_invariants().expect("learner invariants");
            if learner.is_stopped() {
                break;
            }
            tokio::select! {
                event = net.recv() => match event {
                    Some(LearnerEvent::Packet(p)) => {
                        lock(&store).seen.push(p.packet_type);
                        learner.on_packet(&p, now(), &mut actions);
                    }
                    Some(LearnerEvent::Disconnected) | None => learner.on_disconnect(&mut actions),
                    Some(LearnerEvent::Snapshot { .. }) => panic!("no snapshot is sent in this test"),
                },
                _ = tick.tick() => learner.on_tick(now(), &mut actions),
                cmd = cmds.recv() => match cmd {
                    Some(LearnerCmd::Cut) => net.disconnect(),
                    None => {
                        net.stop().await;
                        return;
                    }
                },
            }
        }
        net.stop().await;
    }
}

struct Ensemble {
    leader: Shared,
    learners: BTreeMap<Sid, Shared>,
    leader_cmds: mpsc::Sender<LeaderCmd>,
    learner_cmds: BTreeMap<Sid, mpsc::Sender<LearnerCmd>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Leader 1 with 5 txns in epoch 1; follower 2 holds the first 3, follower 3 all 5, observer 4
/// none: each is synced by DIFF.
async fn start_ensemble() -> Ensemble {
    let history: Vec<TxnEntry> = (1..=5).map(|n| entry(make_zxid(1, n), 1000 + n as u64)).collect();
    let leader_store = store(history.clone(), 1);
    let init = LeaderInit {
        accepted_epoch: 1,
        current_epoch: 1,
        last_zxid: make_zxid(1, 5),
        history_base: 0,
        history: history.clone(),
        pending_config: None,
    };
    let mut cfg = LeaderConfig::new(1, [1, 2, 3]);
    cfg.tick_ms = TICK_MS;
    cfg.init_limit = 40;
    cfg.sync_limit = 20;
    let mut first = Vec::new();
    let leader = Leader::new(cfg, init, 0, &mut first).expect("leader");
    let net = LeaderNet::start(localhost(), net_cfg()).await.expect("start leader net");
    let addr = net.local_addr();
    let (leader_cmds, rx) = mpsc::channel(16);
    let mut tasks = vec![tokio::spawn(run_leader(net, leader, first, leader_store.clone(), rx))];
    let mut learners = BTreeMap::new();
    let mut learner_cmds = BTreeMap::new();
    for (sid, role, log, epoch) in [
        (2, LearnerRole::Follower, history[..3].to_vec(), 1),
        (3, LearnerRole::Follower, history.clone(), 1),
        (4, LearnerRole::Observer, Vec::new(), 0),
    ] {
        let s = store(log, epoch);
        let (tx, rx) = mpsc::channel(16);
        tasks.push(tokio::spawn(run_learner(sid, role, 1, addr, s.clone(), rx)));
        learners.insert(sid, s);
        learner_cmds.insert(sid, tx);
    }
    Ensemble { leader: leader_store, learners, leader_cmds, learner_cmds, tasks }
}

impl Ensemble {
    async fn wait_synced(&self) {
        wait_until("the leader to establish", || lock(&self.leader).broadcasting).await;
        for (sid, s) in &self.learners {
            wait_until(&format!("learner {sid} to sync"), || lock(s).synced).await;
        }
    }

    /// Waits until every node's log and tree equal the leader's log of `len` txns.
    async fn wait_converged(&self, len: usize) {
        wait_until("the leader to apply everything", || lock(&self.leader).tree.len() == len).await;
        let want = lock(&self.leader).log.clone();
        assert_eq!(lock(&self.leader).tree, want);
        for (sid, s) in &self.learners {
            wait_until(&format!("learner {sid} to apply {len} txns"), || lock(s).tree.len() == len).await;
            let s = lock(s);
            assert_eq!(s.tree, want, "learner {sid} applied a different history");
            assert_eq!(s.log, want, "learner {sid} logged a different history");
        }
    }

    /// Stops the leader, then the learners (which then fail to reconnect, or see their commands
    /// closed, and end).
    async fn stop(self) {
        drop(self.leader_cmds);
        drop(self.learner_cmds);
        for t in self.tasks {
            tokio::time::timeout(WAIT, t).await.expect("node task ends").expect("node task panicked");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zab_handshake_and_broadcast_over_tcp() {
    let ens = start_ensemble().await;
    ens.wait_synced().await;
    for (sid, s) in &ens.learners {
        let seen = lock(s).seen.clone();
        assert_eq!(seen.first(), Some(&pt::LEADERINFO), "learner {sid}: {seen:?}");
        assert_eq!(seen.get(1), Some(&pt::DIFF), "learner {sid} synced by DIFF: {seen:?}");
        for t in [pt::NEWLEADER, pt::UPTODATE] {
            assert!(seen.contains(&t), "learner {sid} got no {}: {seen:?}", pt::name(t).unwrap());
        }
        assert!(!seen.contains(&pt::SNAP) && !seen.contains(&pt::TRUNC), "learner {sid}: {seen:?}");
    }
    ens.leader_cmds.send(LeaderCmd::Propose(200)).await.unwrap();
    ens.wait_converged(205).await;
    let observer = lock(&ens.learners[&4]).seen.clone();
    assert!(observer.iter().filter(|t| **t == pt::INFORM).count() >= 200, "observer saw {observer:?}");
    // PROPOSAL/COMMIT pairs carry the DIFF to an observer too; after UPTODATE it gets INFORM only.
    let uptodate = observer.iter().position(|t| *t == pt::UPTODATE).unwrap();
    assert!(!observer[uptodate..].contains(&pt::PROPOSAL), "an observer gets no proposals: {observer:?}");
    for sid in [2, 3] {
        let seen = lock(&ens.learners[&sid]).seen.clone();
        assert!(seen.iter().filter(|t| **t == pt::PROPOSAL).count() >= 200, "follower {sid}");
        assert_eq!(lock(&ens.learners[&sid]).connections, 1, "follower {sid} reconnected");
    }
    ens.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_cut_mid_stream_resyncs_by_diff() {
    let ens = start_ensemble().await;
    ens.wait_synced().await;

    // Cut follower 3 from its own end while proposals stream.
    ens.leader_cmds.send(LeaderCmd::Propose(100)).await.unwrap();
    ens.learner_cmds[&3].send(LearnerCmd::Cut).await.unwrap();
    ens.leader_cmds.send(LeaderCmd::Propose(50)).await.unwrap();
    wait_until("follower 3 to reconnect and sync", || {
        let s = lock(&ens.learners[&3]);
        s.connections >= 2 && s.synced
    })
    .await;

    // Cut follower 2 from the leader's end.
    ens.leader_cmds.send(LeaderCmd::Propose(100)).await.unwrap();
    ens.leader_cmds.send(LeaderCmd::Disconnect(2)).await.unwrap();
    ens.leader_cmds.send(LeaderCmd::Propose(50)).await.unwrap();
    wait_until("follower 2 to reconnect and sync", || {
        let s = lock(&ens.learners[&2]);
        s.connections >= 2 && s.synced
    })
    .await;

    ens.leader_cmds.send(LeaderCmd::Propose(20)).await.unwrap();
    ens.wait_converged(5 + 320).await;
    for sid in [2, 3] {
        let s = lock(&ens.learners[&sid]);
        assert_eq!(
            s.seen.iter().filter(|t| **t == pt::DIFF).count(),
            2,
            "follower {sid} resynced by DIFF: {:?}",
            s.lookings
        );
        assert!(!s.seen.contains(&pt::SNAP), "follower {sid} needed a SNAP");
        assert!(!s.lookings.is_empty());
    }
    ens.stop().await;
}

// ----- the shells on their own -----

fn info_packet(kind: i32, sid: Sid) -> QuorumPacket {
    let info = LearnerInfo { server_id: sid, protocol_version: LEARNER_PROTOCOL_VERSION, config_version: 0 };
    QuorumPacket::with_data(kind, make_zxid(1, 0), info.to_bytes())
}

async fn next_event(net: &mut LeaderNet) -> LeaderEvent {
    tokio::time::timeout(WAIT, net.recv()).await.expect("leader event in time").expect("leader net running")
}

/// Reads until EOF (or an error) on a blocking socket; what was read.
fn read_to_close(s: &mut StdTcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                panic!("connection not closed within {WAIT:?}")
            }
            Err(_) => return all,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_net_registers_replaces_and_refuses() {
    let mut net = LeaderNet::start(localhost(), net_cfg()).await.unwrap();
    let addr = net.local_addr();

    // A first packet that is not FOLLOWERINFO / OBSERVERINFO, and undecodable bytes: closed, no event.
    let mut ping_first = StdTcpStream::connect(addr).unwrap();
    ping_first.write_all(&QuorumPacket::new(pt::PING, 0).to_bytes()).unwrap();
    read_to_close(&mut ping_first);
    let mut garbage = StdTcpStream::connect(addr).unwrap();
    garbage.write_all(&[0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xf0]).unwrap();
    read_to_close(&mut garbage);
    let mut no_info = StdTcpStream::connect(addr).unwrap();
    no_info.write_all(&QuorumPacket::new(pt::FOLLOWERINFO, 0).to_bytes()).unwrap();
    read_to_close(&mut no_info);

    // Registration by the sid in LearnerInfo; the first packet is delivered.
    let mut a = StdTcpStream::connect(addr).unwrap();
    a.write_all(&info_packet(pt::FOLLOWERINFO, 7).to_bytes()).unwrap();
    assert_eq!(next_event(&mut net).await, LeaderEvent::Packet { from: 7, packet: info_packet(pt::FOLLOWERINFO, 7) });
    assert_eq!(net.connected(), vec![7]);

    // Packets split across writes and several in one write arrive whole and in order.
    let ack1 = QuorumPacket::new(pt::ACK, 1).to_bytes();
    let ack2 = QuorumPacket::new(pt::ACK, 2).to_bytes();
    a.write_all(&ack1[..5]).unwrap();
    a.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.write_all(&[&ack1[5..], &ack2[..]].concat()).unwrap();
    assert_eq!(next_event(&mut net).await, LeaderEvent::Packet { from: 7, packet: QuorumPacket::new(pt::ACK, 1) });
    assert_eq!(next_event(&mut net).await, LeaderEvent::Packet { from: 7, packet: QuorumPacket::new(pt::ACK, 2) });

    // A newer connection from sid 7 replaces the old one: Disconnected first, then its info.
    let mut b = StdTcpStream::connect(addr).unwrap();
    b.write_all(&info_packet(pt::OBSERVERINFO, 7).to_bytes()).unwrap();
    assert_eq!(next_event(&mut net).await, LeaderEvent::Disconnected { sid: 7 });
    assert_eq!(next_event(&mut net).await, LeaderEvent::Packet { from: 7, packet: info_packet(pt::OBSERVERINFO, 7) });
    read_to_close(&mut a);

    // send reaches the current connection with ZooKeeper's framing (the bare jute record).
    let proposal = QuorumPacket::with_data(pt::PROPOSAL, make_zxid(2, 1), vec![1, 2, 3]);
    net.send(7, proposal.clone()).unwrap();
    let mut got = vec![0u8; proposal.to_bytes().len()];
    b.set_read_timeout(Some(WAIT)).unwrap();
    b.read_exact(&mut got).unwrap();
    assert_eq!(got, proposal.to_bytes());

    // A malformed packet on a registered connection closes it and reports it.
    b.write_all(&[0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0, 0, 0]).unwrap();
    assert_eq!(next_event(&mut net).await, LeaderEvent::Disconnected { sid: 7 });
    read_to_close(&mut b);
    assert!(net.connected().is_empty());
    assert_eq!(net.send(7, proposal), Err(SendError::NotConnected));

    // disconnect() reports Disconnected too; a peer close does as well.
    let mut c = StdTcpStream::connect(addr).unwrap();
    c.write_all(&info_packet(pt::FOLLOWERINFO, 8).to_bytes()).unwrap();
    assert!(matches!(next_event(&mut net).await, LeaderEvent::Packet { from: 8, .. }));
    assert!(net.disconnect(8));
    assert_eq!(next_event(&mut net).await, LeaderEvent::Disconnected { sid: 8 });
    read_to_close(&mut c);
    let d = StdTcpStream::connect(addr).unwrap();
    (&d).write_all(&info_packet(pt::FOLLOWERINFO, 9).to_bytes()).unwrap();
    assert!(matches!(next_event(&mut net).await, LeaderEvent::Packet { from: 9, .. }));
    drop(d);
    assert_eq!(next_event(&mut net).await, LeaderEvent::Disconnected { sid: 9 });
    net.stop().await;
}

/// The per-connection figures the `observers` AdminServer command reports, counted as ZooKeeper's
/// `LearnerHandler` counts them, over a real connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_net_counts_each_learners_packets_as_zookeeper_does() {
    let mut net = LeaderNet::start(localhost(), net_cfg()).await.unwrap();
    let before_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut o = StdTcpStream::connect(net.local_addr()).unwrap();
    o.set_read_timeout(Some(WAIT)).unwrap();
    o.write_all(&info_packet(pt::OBSERVERINFO, 4).to_bytes()).unwrap();
    assert!(matches!(next_event(&mut net).await, LeaderEvent::Packet { from: 4, .. }));
    let link = net.learner_link(4).expect("a link for sid 4");
    assert_eq!(link.remote_socket_address, o.local_addr().unwrap());
    assert!(link.established_ms >= before_ms - 1000 && link.established_ms <= before_ms + 60_000, "{link:?}");
    assert_eq!((link.packets_received, link.packets_sent, link.requests, link.last_zxid), (0, 0, 0, -1));

    // The handshake: LEADERINFO (written straight to the socket in ZooKeeper: not counted),
    // ACKEPOCH and the ACK of NEWLEADER (read before the main loop: not counted).
    let sent = [
        QuorumPacket::with_data(pt::LEADERINFO, make_zxid(2, 0), vec![0, 1, 0, 0]),
        QuorumPacket::new(pt::NEWLEADER, make_zxid(2, 0)),
        QuorumPacket::new(pt::UPTODATE, -1),
        QuorumPacket::with_data(pt::INFORM, make_zxid(2, 1), vec![7; 20]),
        QuorumPacket::new(pt::PING, 0),
    ];
    for p in &sent {
        net.send(4, p.clone()).unwrap();
    }
    let mut got = vec![0u8; sent.iter().map(|p| p.to_bytes().len()).sum()];
    o.read_exact(&mut got).unwrap();
    let received = [
        QuorumPacket::with_data(pt::ACKEPOCH, 0, vec![0; 12]),
        QuorumPacket::new(pt::ACK, make_zxid(2, 0)),
        QuorumPacket::new(pt::ACK, make_zxid(2, 0)),
        QuorumPacket::with_data(pt::PING, 0, vec![]),
        QuorumPacket::with_data(pt::REQUEST, 0, vec![0; 16]),
    ];
    for p in &received {
        o.write_all(&p.to_bytes()).unwrap();
        assert!(matches!(next_event(&mut net).await, LeaderEvent::Packet { from: 4, .. }));
    }
    let link = net.learner_link(4).unwrap();
    // NEWLEADER and UPTODATE are taken off the size without having been added, as in ZooKeeper.
    assert_eq!((link.queued_packets, link.queued_packets_size), (0, -2 * 28), "{link:?}");
    assert_eq!(link.packets_sent, 4, "{link:?}");
    assert_eq!(link.last_zxid, make_zxid(2, 1), "{link:?}");
    assert_eq!((link.packets_received, link.requests), (3, 1), "{link:?}");

    // observer_connection_stat_reset: the counts and the last zxid, not the queue or the time.
    net.reset_learner_link(4);
    let after = net.learner_link(4).unwrap();
    assert_eq!((after.packets_received, after.packets_sent, after.requests, after.last_zxid), (0, 0, 0, -1));
    assert_eq!(after.established_ms, link.established_ms);
    assert!(net.learner_link(5).is_none());
    drop(o);
    assert_eq!(next_event(&mut net).await, LeaderEvent::Disconnected { sid: 4 });
    assert!(net.learner_link(4).is_none());
    net.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_learner_is_disconnected_not_dropped() {
    let cfg = QuorumNetConfig { send_queue: 4, ..net_cfg() };
    let mut net = LeaderNet::start(localhost(), cfg).await.unwrap();
    let mut slow = StdTcpStream::connect(net.local_addr()).unwrap();
    slow.write_all(&info_packet(pt::FOLLOWERINFO, 5).to_bytes()).unwrap();
    assert!(matches!(next_event(&mut net).await, LeaderEvent::Packet { from: 5, .. }));
    // The learner never reads: once the socket buffers are full the queue fills.
    let big = QuorumPacket::with_data(pt::PROPOSAL, 1, vec![7; 256 * 1024]);
    let mut sent = 0;
    let outcome = loop {
        match net.send(5, big.clone()) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 10_000, "the queue never filled");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    assert_eq!(outcome, SendError::QueueFull);
    assert_eq!(next_event(&mut net).await, LeaderEvent::Disconnected { sid: 5 });
    // What arrived before the close is a prefix of what was queued (the packet the full queue refused
    // never goes out).
    let bytes = read_to_close(&mut slow);
    let unit = big.to_bytes();
    let whole = bytes.len() / unit.len();
    assert!(whole <= sent, "{whole} packets arrived, {sent} were queued");
    for i in 0..whole {
        assert_eq!(&bytes[i * unit.len()..(i + 1) * unit.len()], &unit[..]);
    }
    net.stop().await;
}

/// A leader that hands over stops its quorum port only after each learner's queue is written:
/// the learner reads every packet queued before the stop (its COMMITANDACTIVATE), then the close.
/// A plain stop may drop what is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_stop_writes_what_was_queued_before_closing() {
    let mut net = LeaderNet::start(localhost(), net_cfg()).await.unwrap();
    let mut learners = Vec::new();
    for sid in [5, 6] {
        let mut s = StdTcpStream::connect(net.local_addr()).unwrap();
        s.write_all(&info_packet(pt::FOLLOWERINFO, sid).to_bytes()).unwrap();
        assert!(matches!(next_event(&mut net).await, LeaderEvent::Packet { from, .. } if from == sid));
        learners.push(s);
    }
    let packets: Vec<QuorumPacket> =
        (1..=200).map(|i| QuorumPacket::with_data(pt::PROPOSAL, i, vec![i as u8; 4096])).collect();
    for p in &packets {
        net.send(5, p.clone()).unwrap();
        net.send(6, p.clone()).unwrap();
    }
    let last = QuorumPacket::with_data(pt::COMMITANDACTIVATE, 201, 6i64.to_be_bytes().to_vec());
    net.send(5, last.clone()).unwrap();
    net.send(6, last.clone()).unwrap();
    net.stop_flushed(WAIT).await;
    let want: Vec<u8> = packets.iter().chain([&last]).flat_map(QuorumPacket::to_bytes).collect();
    for s in &mut learners {
        assert!(read_to_close(s) == want, "every queued packet, in order, then the close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_net_retries_binds_and_exchanges() {
    // The leader comes up after the learner starts dialing.
    let port = std::net::TcpListener::bind(localhost()).unwrap().local_addr().unwrap().port();
    let leader_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let bind: SocketAddr = "127.0.0.2:0".parse().unwrap();
    let cfg = QuorumNetConfig { max_connect_tries: 50, connect_timeout: Duration::from_secs(10), ..net_cfg() };
    let first = info_packet(pt::FOLLOWERINFO, 2);
    let dialing = tokio::spawn(async move { LearnerNet::connect(leader_addr, 2, first, Some(bind), &cfg).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut leader = LeaderNet::start(leader_addr, net_cfg()).await.unwrap();
    let mut learner = dialing.await.unwrap().expect("connected after retries");
    assert_eq!(
        next_event(&mut leader).await,
        LeaderEvent::Packet { from: 2, packet: info_packet(pt::FOLLOWERINFO, 2) }
    );
    // The source address is the bound one (what per-source iptables rules match).
    assert_eq!(leader.peer_addr(2).unwrap().ip().to_string(), "127.0.0.2");
    assert_eq!(learner.local_addr().ip().to_string(), "127.0.0.2");

    // Both directions, in order.
    for z in 1..=100 {
        leader.send(2, QuorumPacket::new(pt::COMMIT, z)).unwrap();
        learner.send(QuorumPacket::new(pt::ACK, z)).unwrap();
    }
    for z in 1..=100 {
        let got = tokio::time::timeout(WAIT, learner.recv()).await.unwrap();
        assert_eq!(got, Some(LearnerEvent::Packet(QuorumPacket::new(pt::COMMIT, z))));
        assert_eq!(
            next_event(&mut leader).await,
            LeaderEvent::Packet { from: 2, packet: QuorumPacket::new(pt::ACK, z) }
        );
    }

    // The leader closing is seen once by the learner.
    leader.disconnect(2);
    assert_eq!(next_event(&mut leader).await, LeaderEvent::Disconnected { sid: 2 });
    assert_eq!(tokio::time::timeout(WAIT, learner.recv()).await.unwrap(), Some(LearnerEvent::Disconnected));
    assert_eq!(learner.recv().await, None);
    assert_eq!(learner.send(QuorumPacket::new(pt::PING, 0)), Err(SendError::NotConnected));
    learner.stop().await;
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_net_gives_up_at_the_deadline_and_checks_its_info() {
    let port = std::net::TcpListener::bind(localhost()).unwrap().local_addr().unwrap().port();
    let nobody: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let cfg = QuorumNetConfig { max_connect_tries: 1000, connect_timeout: Duration::from_millis(500), ..net_cfg() };
    let started = Instant::now();
    let err =
        LearnerNet::connect(nobody, 2, info_packet(pt::FOLLOWERINFO, 2), None, &cfg).await.err().expect("no leader");
    assert!(started.elapsed() < Duration::from_secs(3), "gave up after {:?}", started.elapsed());
    assert!(err.to_string().contains("could not connect"), "{err}");

    let cfg = QuorumNetConfig { max_connect_tries: 2, connect_timeout: Duration::from_secs(10), ..net_cfg() };
    let started = Instant::now();
    let err =
        LearnerNet::connect(nobody, 2, info_packet(pt::FOLLOWERINFO, 2), None, &cfg).await.err().expect("no leader");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(err.to_string().contains("in 2 attempts"), "{err}");

    let wrong =
        LearnerNet::connect(nobody, 3, info_packet(pt::FOLLOWERINFO, 2), None, &cfg).await.err().expect("bad info");
    assert!(wrong.to_string().contains("LearnerInfo sid is 2"), "{wrong}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_net_wire_bytes_and_malformed_leader() {
    // A raw "leader": checks the FOLLOWERINFO bytes as ZooKeeper's jute reads them, then sends a
    // good packet followed by a buffer length above the limit.
    let listener = std::net::TcpListener::bind(localhost()).unwrap();
    let addr = listener.local_addr().unwrap();
    let leader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = [0u8; 4 + 8 + 4 + 20 + 4];
        s.read_exact(&mut got).unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(&11i32.to_be_bytes()); // FOLLOWERINFO
        want.extend_from_slice(&0x1_0000_0000i64.to_be_bytes()); // makeZxid(acceptedEpoch 1, 0)
        want.extend_from_slice(&20i32.to_be_bytes()); // data length
        want.extend_from_slice(&2i64.to_be_bytes()); // LearnerInfo.serverid
        want.extend_from_slice(&0x10000i32.to_be_bytes()); // protocolVersion
        want.extend_from_slice(&0i64.to_be_bytes()); // configVersion
        want.extend_from_slice(&(0i32).to_be_bytes()); // authinfo: empty vector
        assert_eq!(got.to_vec(), want);
        s.write_all(&QuorumPacket::new(pt::UPTODATE, -1).to_bytes()).unwrap();
        let mut bad = Vec::new();
        bad.extend_from_slice(&pt::PROPOSAL.to_be_bytes());
        bad.extend_from_slice(&1i64.to_be_bytes());
        bad.extend_from_slice(&(64 * 1024 * 1024i32).to_be_bytes());
        s.write_all(&bad).unwrap();
        read_to_close(&mut s);
    });
    let mut learner = LearnerNet::connect(addr, 2, info_packet(pt::FOLLOWERINFO, 2), None, &net_cfg()).await.unwrap();
    let first = tokio::time::timeout(WAIT, learner.recv()).await.unwrap();
    assert_eq!(first, Some(LearnerEvent::Packet(QuorumPacket::new(pt::UPTODATE, -1))));
    assert_eq!(tokio::time::timeout(WAIT, learner.recv()).await.unwrap(), Some(LearnerEvent::Disconnected));
    assert_eq!(learner.recv().await, None);
    learner.stop().await;
    leader.join().unwrap();
}

// ----- TLS between servers (sslQuorum, portUnification) -----

/// The quorum port's TLS from zoo.cfg keys: `key_store` (a PKCS12 file of scripts/make-test-certs)
/// and the test CA as trust store.
fn peer_tls(key_store: &str, ssl_quorum: bool, port_unification: bool) -> warden_server::tls::peer::PeerTls {
    let mut c = quorum_tls_config(&common::test_certs().join(key_store));
    c.ssl_quorum = ssl_quorum;
    c.port_unification = port_unification;
    c.quorum_tls().unwrap()
}

/// A config whose `ssl.quorum.*` keys name `key_store` and the test CA's PKCS12 trust store.
fn quorum_tls_config(key_store: &std::path::Path) -> warden_server::Config {
    let mut c = warden_server::Config::default();
    for (k, v) in [
        ("keyStore.location", key_store.display().to_string()),
        ("keyStore.password", "testpass".into()),
        ("trustStore.location", common::test_certs().join("truststore.p12").display().to_string()),
        ("trustStore.password", "testpass".into()),
        ("handshakeDetectionTimeoutMillis", "1000".into()),
    ] {
        c.ssl.insert(format!("ssl.quorum.{k}"), v);
    }
    c
}

/// Connects learner `sid` with `tls` to `leader`; `Some` once the connection is up.
async fn dial_learner(leader: SocketAddr, sid: Sid, tls: warden_server::tls::peer::PeerTls) -> Option<LearnerNet> {
    let cfg = QuorumNetConfig { tls, max_connect_tries: 1, ..net_cfg() };
    LearnerNet::connect(leader, sid, info_packet(pt::FOLLOWERINFO, sid), None, &cfg).await.ok()
}

/// Whether the leader registers learner `sid` (its FOLLOWERINFO arrives) within two seconds.
async fn registers(net: &mut LeaderNet, sid: Sid) -> bool {
    match tokio::time::timeout(Duration::from_secs(2), net.recv()).await {
        Ok(Some(LeaderEvent::Packet { from, packet })) => from == sid && packet == info_packet(pt::FOLLOWERINFO, sid),
        _ => false,
    }
}

/// A TLS-only quorum port exchanges packets with a TLS learner and refuses a plaintext learner
/// and one whose certificate another CA signed; a unified port (portUnification) takes TLS and
/// plaintext learners both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_port_over_tls_and_unified() {
    let cfg = QuorumNetConfig { tls: peer_tls("server.p12", true, false), ..net_cfg() };
    let mut leader = LeaderNet::start(localhost(), cfg).await.unwrap();
    let addr = leader.local_addr();
    let mut learner = dial_learner(addr, 2, peer_tls("server.p12", true, false)).await.expect("TLS learner connects");
    assert!(registers(&mut leader, 2).await, "the TLS learner registers");
    for z in 1..=50 {
        leader.send(2, QuorumPacket::new(pt::COMMIT, z)).unwrap();
        learner.send(QuorumPacket::new(pt::ACK, z)).unwrap();
    }
    for z in 1..=50 {
        let got = tokio::time::timeout(WAIT, learner.recv()).await.unwrap();
        assert_eq!(got, Some(LearnerEvent::Packet(QuorumPacket::new(pt::COMMIT, z))));
        assert_eq!(
            next_event(&mut leader).await,
            LeaderEvent::Packet { from: 2, packet: QuorumPacket::new(pt::ACK, z) }
        );
    }
    // Plaintext: its FOLLOWERINFO is not a TLS record; the connection is closed unregistered.
    let mut plain = dial_learner(addr, 3, warden_server::tls::peer::PeerTls::default()).await.expect("TCP connects");
    assert!(!registers(&mut leader, 3).await, "a plaintext learner registered on a TLS-only port");
    assert_eq!(tokio::time::timeout(WAIT, plain.recv()).await.unwrap(), Some(LearnerEvent::Disconnected));
    // A certificate from another CA fails the leader's side of the handshake (in TLS 1.3 the
    // learner's side may finish first and then sees the connection closed).
    if let Some(mut foreign) = dial_learner(addr, 4, peer_tls("other-server.p12", true, false)).await {
        assert_eq!(tokio::time::timeout(WAIT, foreign.recv()).await.unwrap(), Some(LearnerEvent::Disconnected));
        foreign.stop().await;
    }
    assert!(!registers(&mut leader, 4).await, "a foreign certificate registered");
    // The TLS learner is still served.
    leader.send(2, QuorumPacket::new(pt::PING, 7)).unwrap();
    let got = tokio::time::timeout(WAIT, learner.recv()).await.unwrap();
    assert_eq!(got, Some(LearnerEvent::Packet(QuorumPacket::new(pt::PING, 7))));
    learner.stop().await;
    plain.stop().await;
    leader.stop().await;

    // portUnification: both kinds register on one port.
    let cfg = QuorumNetConfig { tls: peer_tls("server.p12", false, true), ..net_cfg() };
    let mut leader = LeaderNet::start(localhost(), cfg).await.unwrap();
    let addr = leader.local_addr();
    let tls = dial_learner(addr, 2, peer_tls("server.p12", true, true)).await.expect("TLS learner connects");
    assert!(registers(&mut leader, 2).await, "a TLS learner registers on a unified port");
    let plain = dial_learner(addr, 3, peer_tls("server.p12", false, true)).await.expect("plaintext learner connects");
    assert!(registers(&mut leader, 3).await, "a plaintext learner registers on a unified port");
    tls.stop().await;
    plain.stop().await;
    leader.stop().await;
}

/// `sslQuorumReloadCertFiles=true`: a replaced quorum key store is used for new connections
/// without a restart (here the leader's certificate is swapped for one another CA signed, which
/// its learners then refuse, and back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_key_store_is_reloaded_when_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let key_store = dir.path().join("quorum.p12");
    let certs = common::test_certs();
    std::fs::copy(certs.join("server.p12"), &key_store).unwrap();
    let mut c = quorum_tls_config(&key_store);
    c.ssl_quorum = true;
    c.ssl_quorum_reload_cert_files = true;
    let cfg = QuorumNetConfig { tls: c.quorum_tls().unwrap(), ..net_cfg() };
    let mut leader = LeaderNet::start(localhost(), cfg).await.unwrap();
    let addr = leader.local_addr();
    let learner = dial_learner(addr, 2, peer_tls("server.p12", true, false)).await.expect("first certificate");
    assert!(registers(&mut leader, 2).await);
    learner.stop().await;
    let _ = tokio::time::timeout(WAIT, leader.recv()).await; // its Disconnected

    std::fs::copy(certs.join("other-server.p12"), &key_store).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        dial_learner(addr, 3, peer_tls("server.p12", true, false)).await.is_none(),
        "the learner refuses the reloaded foreign certificate"
    );
    std::fs::copy(certs.join("server.p12"), &key_store).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let learner =
        dial_learner(addr, 4, peer_tls("server.p12", true, false)).await.expect("the right certificate again");
    assert!(registers(&mut leader, 4).await);
    learner.stop().await;
    leader.stop().await;
}
