//! Three Warden servers in one process as an ensemble on 127.0.0.1 (distinct client, quorum and
//! election ports each): election, writes through a follower readable everywhere, then the leader
//! is stopped and the other two elect a new leader that keeps every acknowledged write.

mod common;
mod oracle;
use oracle::free_port;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{four_letter, test_config};
use warden_server::config::ServerSpec;
use warden_server::{Config, Server};
use zk::{Acls, CreateMode};
use zookeeper_client as zk;

/// Bound on each wait for an election or a role.
const ELECT: Duration = Duration::from_secs(30);

struct Member {
    id: u64,
    addr: SocketAddr,
    server: Option<Server>,
    _dir: tempfile::TempDir,
}

fn configs(n: u64) -> Vec<(Config, tempfile::TempDir)> {
    let mut servers = BTreeMap::new();
    for id in 1..=n {
        let line = format!("127.0.0.1:{}:{}", free_port(), free_port());
        servers.insert(id, ServerSpec::parse(id, &line).expect("server line"));
    }
    (1..=n)
        .map(|id| {
            let dir = tempfile::tempdir().expect("temp dir");
            std::fs::write(dir.path().join("myid"), format!("{id}\n")).unwrap();
            let mut cfg = test_config(dir.path());
            cfg.client_port = free_port();
            cfg.servers = servers.clone();
            cfg.my_id = Some(id);
            cfg.init_limit = 10;
            cfg.sync_limit = 5;
            (cfg, dir)
        })
        .collect()
}

async fn mode(addr: SocketAddr) -> Option<String> {
    let text = tokio::time::timeout(Duration::from_secs(2), four_letter(addr, "srvr")).await.ok()?;
    text.lines().find_map(|l| l.strip_prefix("Mode: ").map(str::to_owned))
}

/// Waits until every member reports leader or follower, exactly one leader; returns its id.
async fn wait_roles(members: &[&Member]) -> u64 {
    let deadline = Instant::now() + ELECT;
    loop {
        let mut leaders = Vec::new();
        let mut ok = true;
        for m in members {
            match mode(m.addr).await.as_deref() {
                Some("leader") => leaders.push(m.id),
                Some("follower") => {}
                _ => ok = false,
            }
        }
        if ok && leaders.len() == 1 {
            return leaders[0];
        }
        assert!(Instant::now() < deadline, "no stable leader/followers within {ELECT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn client(addr: SocketAddr) -> zk::Client {
    tokio::time::timeout(
        Duration::from_secs(10),
        zk::Client::connector().with_session_timeout(Duration::from_secs(6)).connect(&addr.to_string()),
    )
    .await
    .expect("connect in time")
    .expect("connect")
}

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_servers_elect_replicate_and_survive_the_leader() {
    let mut members = Vec::new();
    for (cfg, dir) in configs(3) {
        let id = cfg.my_id.unwrap();
        let server = Server::start(cfg).await.expect("ensemble member starts");
        members.push(Member { id, addr: server.local_addr, server: Some(server), _dir: dir });
    }
    let leader = tokio::time::timeout(ELECT * 2, wait_roles(&members.iter().collect::<Vec<_>>())).await.unwrap();
    let follower = members.iter().find(|m| m.id != leader).unwrap();
    let c = client(follower.addr).await;
    let mut acked = Vec::new();
    for i in 0..20 {
        let path = format!("/k{i}");
        tokio::time::timeout(Duration::from_secs(10), c.create(&path, path.as_bytes(), &persistent()))
            .await
            .expect("write in time")
            .expect("write through a follower");
        acked.push(path);
    }
    for m in &members {
        let r = client(m.addr).await;
        r.sync("/").await.expect("sync");
        for path in &acked {
            assert_eq!(r.get_data(path).await.expect("read").0, path.as_bytes(), "server {} {path}", m.id);
        }
    }
    drop(c);

    // Stop the leader; the other two must elect a new one and take writes.
    let idx = members.iter().position(|m| m.id == leader).unwrap();
    let old = members.remove(idx);
    let killed = Instant::now();
    let server = old.server.unwrap();
    tokio::time::timeout(Duration::from_secs(10), server.stop()).await.expect("leader stops in time").ok();
    let mut first_write = None;
    let deadline = Instant::now() + ELECT;
    'retry: while Instant::now() < deadline {
        for m in &members {
            let attempt = async {
                let c = zk::Client::connector()
                    .with_session_timeout(Duration::from_secs(6))
                    .connect(&m.addr.to_string())
                    .await
                    .ok()?;
                c.create("/after", b"new leader", &persistent()).await.ok()?;
                Some(c)
            };
            if let Ok(Some(c)) = tokio::time::timeout(Duration::from_secs(3), attempt).await {
                first_write = Some((killed.elapsed(), c));
                break 'retry;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (took, c) = first_write.expect("a write succeeds after the leader stopped");
    println!("FAILOVER: leader {leader} stopped -> first successful write after {} ms", took.as_millis());
    let new_leader = tokio::time::timeout(ELECT, wait_roles(&members.iter().collect::<Vec<_>>())).await.unwrap();
    assert_ne!(new_leader, leader);
    c.sync("/").await.unwrap();
    for m in &members {
        let r = client(m.addr).await;
        r.sync("/").await.expect("sync");
        for path in acked.iter().chain(std::iter::once(&"/after".to_string())) {
            assert!(r.get_data(path).await.is_ok(), "server {} lost {path}", m.id);
        }
    }
    for m in members {
        if let Some(s) = m.server {
            let _ = tokio::time::timeout(Duration::from_secs(10), s.stop()).await;
        }
    }
}

/// A leader stops with a txn in its log that no one else has (forged here: an uncommitted proposal
/// of epoch 1); the other two go on in epoch 2. When it comes back, the new leader TRUNCs it below
/// what its recovered tree applied: it must cut the log, reload its data from disk, follow, and
/// never show the phantom node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_leader_drops_its_uncommitted_proposal_on_trunc() {
    let cfgs = configs(3);
    let mut members = Vec::new();
    let mut saved = BTreeMap::new();
    for (cfg, dir) in cfgs {
        let id = cfg.my_id.unwrap();
        saved.insert(id, cfg.clone());
        let server = Server::start(cfg).await.expect("ensemble member starts");
        members.push(Member { id, addr: server.local_addr, server: Some(server), _dir: dir });
    }
    let leader = tokio::time::timeout(ELECT * 2, wait_roles(&members.iter().collect::<Vec<_>>())).await.unwrap();
    let lm = members.iter().position(|m| m.id == leader).unwrap();
    let c = client(members[lm].addr).await;
    for i in 0..5 {
        c.create(&format!("/a{i}"), b"x", &persistent()).await.expect("write");
    }
    drop(c);
    let server = members[lm].server.take().unwrap();
    tokio::time::timeout(Duration::from_secs(10), server.stop()).await.expect("stops").ok();

    // Forge an uncommitted epoch-1 proposal at the end of the stopped leader's log.
    let cfg = saved[&leader].clone();
    {
        let data = warden_storage::DataDir::real(&cfg.data_dir, &cfg.data_log_dir);
        let (mut log, _) = data.open_log(0).unwrap();
        let zxid = log.last_zxid() + 1;
        assert_eq!(zxid >> 32, 1, "still epoch 1");
        let txn = warden_proto::Txn::Create {
            path: "/phantom".into(),
            data: Some(b"never committed".to_vec()),
            acl: warden_proto::Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: 6,
        };
        let hdr = warden_proto::TxnHeader { client_id: 0, cxid: 0, zxid, time_ms: 0, txn_type: txn.op().code() };
        log.append(&hdr, &txn).unwrap();
        log.sync().unwrap();
    }

    let others: Vec<&Member> = members.iter().filter(|m| m.id != leader).collect();
    let new_leader = tokio::time::timeout(ELECT, wait_roles(&others)).await.unwrap();
    // Back before any epoch-2 write: its last zxid is above the new leader's, so it gets TRUNC.
    let server = Server::start(cfg).await.expect("old leader restarts");
    members[lm].addr = server.local_addr;
    members[lm].server = Some(server);
    let again = tokio::time::timeout(ELECT, wait_roles(&members.iter().collect::<Vec<_>>())).await.unwrap();
    assert_eq!(again, new_leader);
    let c = client(members[lm].addr).await;
    for i in 0..5 {
        c.create(&format!("/b{i}"), b"y", &persistent()).await.expect("write in epoch 2");
    }
    drop(c);
    for m in &members {
        let r = client(m.addr).await;
        r.sync("/").await.expect("sync");
        for i in 0..5 {
            assert!(r.get_data(&format!("/a{i}")).await.is_ok(), "server {} lost /a{i}", m.id);
            assert!(r.get_data(&format!("/b{i}")).await.is_ok(), "server {} lacks /b{i}", m.id);
        }
        assert!(r.get_data("/phantom").await.is_err(), "server {} shows the uncommitted /phantom", m.id);
    }
    for m in members {
        if let Some(s) = m.server {
            let _ = tokio::time::timeout(Duration::from_secs(10), s.stop()).await;
        }
    }
}

/// Three voters and an observer: the observer follows the elected leader, reports Mode observer,
/// forwards its client's writes and serves reads of everything committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_observer_syncs_forwards_writes_and_reports_its_mode() {
    let mut servers = BTreeMap::new();
    for id in 1..=4u64 {
        let role = if id == 4 { ":observer" } else { "" };
        let line = format!("127.0.0.1:{}:{}{role}", free_port(), free_port());
        servers.insert(id, ServerSpec::parse(id, &line).expect("server line"));
    }
    let mut members = Vec::new();
    for id in 1..=4u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = test_config(dir.path());
        cfg.client_port = free_port();
        cfg.servers = servers.clone();
        cfg.my_id = Some(id);
        if id == 4 {
            cfg.peer_type = warden_server::config::ServerRole::Observer;
        }
        let server = Server::start(cfg).await.expect("member starts");
        members.push(Member { id, addr: server.local_addr, server: Some(server), _dir: dir });
    }
    let voters: Vec<&Member> = members.iter().filter(|m| m.id != 4).collect();
    tokio::time::timeout(ELECT * 2, wait_roles(&voters)).await.unwrap();
    let observer = members[3].addr;
    let deadline = Instant::now() + ELECT;
    while mode(observer).await.as_deref() != Some("observer") {
        assert!(Instant::now() < deadline, "the observer never reported Mode: observer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = client(observer).await;
    c.create("/via-observer", b"o", &persistent()).await.expect("write through the observer");
    for m in &members {
        let r = client(m.addr).await;
        r.sync("/").await.expect("sync");
        assert_eq!(r.get_data("/via-observer").await.expect("read").0, b"o", "server {}", m.id);
    }
    let mntr = four_letter(observer, "mntr").await;
    assert!(mntr.contains("zk_server_state\tobserver"), "{mntr}");
    // ZooKeeper's quorum gauges: every member counts 3 voters; only the leader has the learner
    // gauges (2 followers and the observer, all synced, the observer not counted as a follower).
    let mut leaders = 0;
    for m in &members {
        let mntr = four_letter(m.addr, "mntr").await;
        assert!(mntr.contains("zk_quorum_size\t3\n"), "server {}: {mntr}", m.id);
        let looking: u64 = mntr.lines().find_map(|l| l.strip_prefix("zk_looking_count\t")).unwrap().parse().unwrap();
        assert!(looking >= 1, "server {} went LOOKING at start: {mntr}", m.id);
        let n = |key: &str| -> u64 {
            let v = mntr.lines().find_map(|l| l.strip_prefix(&format!("zk_{key}\t")));
            v.unwrap_or_else(|| panic!("server {}: no zk_{key} in {mntr}", m.id)).parse::<f64>().unwrap() as u64
        };
        // Every member was elected into its role, saw the txns applied, and synced them to disk.
        for key in
            ["cnt_election_time", "cnt_unavailable_time", "cnt_propagation_latency", "cnt_sync_processor_batch_size"]
        {
            assert!(n(key) >= 1, "server {}: {key} {}", m.id, n(key));
        }
        assert!(n("sync_processor_request_queued") >= n("cnt_propagation_latency"), "server {}", m.id);
        if mntr.contains("zk_server_state\tleader") {
            leaders += 1;
            for line in
                ["zk_learners\t3\n", "zk_synced_followers\t2\n", "zk_synced_observers\t1\n", "zk_pending_syncs\t0\n"]
            {
                assert!(mntr.contains(line), "leader's mntr lacks {line:?}: {mntr}");
            }
            // Each commit of this epoch's proposals counts once, with its quorum ACK latency.
            assert!(n("commit_count") >= 2 && n("proposal_count") >= n("commit_count"), "{mntr}");
            assert_eq!(n("cnt_quorum_ack_latency"), n("commit_count"), "{mntr}");
            assert!(n("diff_count") + n("snap_count") >= 3, "three learners synced: {mntr}");
            assert_eq!(n("cnt_leader_unavailable_time"), 1, "{mntr}");
            assert_eq!(n("learner_proposal_received_count"), 0, "{mntr}");
        } else {
            assert!(!mntr.contains("zk_learners"), "server {}: {mntr}", m.id);
            assert_eq!(n("commit_count"), 0, "server {}: only a leader commits", m.id);
            assert_eq!(n("cnt_leader_unavailable_time"), 0, "server {}", m.id);
            if m.id == 4 {
                assert_eq!(n("cnt_observer_sync_time"), 1, "{mntr}");
                // An observer gets INFORMs, not PROPOSAL and COMMIT.
                assert_eq!(n("learner_commit_received_count"), 0, "{mntr}");
            } else if mntr.contains("zk_server_state\tfollower") {
                assert_eq!(n("cnt_follower_sync_time"), 1, "server {}: {mntr}", m.id);
                assert!(n("learner_proposal_received_count") >= 1, "server {}: {mntr}", m.id);
                assert!(n("learner_commit_received_count") >= 1, "server {}: {mntr}", m.id);
            }
        }
    }
    assert_eq!(leaders, 1);
    for m in members {
        if let Some(s) = m.server {
            let _ = tokio::time::timeout(Duration::from_secs(10), s.stop()).await;
        }
    }
}

/// `linearizableReads=true`: a read through any server right after a write acknowledged through
/// another returns it, with no sync in between; reads through the leader and a follower both go
/// through a quorum-confirmed barrier (many in flight at once share one).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn linearizable_reads_see_every_write_acknowledged_elsewhere() {
    let mut members = Vec::new();
    for (mut cfg, dir) in configs(3) {
        cfg.linearizable_reads = true;
        let id = cfg.my_id.unwrap();
        let server = Server::start(cfg).await.expect("ensemble member starts");
        members.push(Member { id, addr: server.local_addr, server: Some(server), _dir: dir });
    }
    tokio::time::timeout(ELECT * 2, wait_roles(&members.iter().collect::<Vec<_>>())).await.unwrap();
    let mut clients = Vec::new();
    for m in &members {
        clients.push(client(m.addr).await);
    }
    for i in 0..60 {
        let path = format!("/lin{i}");
        let writer = &clients[i % 3];
        writer.create(&path, b"0", &persistent()).await.expect("create");
        let version = writer.set_data(&path, format!("{i}").as_bytes(), None).await.expect("set").version;
        // Every other server, at once and with several reads in flight: none may be stale.
        for (j, reader) in clients.iter().enumerate().filter(|(j, _)| *j != i % 3) {
            let (a, b, c) = tokio::join!(reader.get_data(&path), reader.get_data(&path), reader.get_data(&path));
            for got in [a, b, c] {
                let (data, stat) = got.unwrap_or_else(|e| panic!("read of {path} through client {j}: {e}"));
                assert_eq!(stat.version, version, "{path} through client {j}: stale read");
                assert_eq!(data, format!("{i}").as_bytes());
            }
        }
    }
    for m in members {
        if let Some(s) = m.server {
            s.stop().await.ok();
        }
    }
}
