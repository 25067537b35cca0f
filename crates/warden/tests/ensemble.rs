//! Three `warden serve zoo.cfg` processes as an ensemble on 127.0.0.1 (distinct client, quorum and
//! election ports each, a `myid` in each dataDir): they elect a leader (checked with `srvr`'s
//! Mode), a session on a follower creates nodes that every server then reads (after sync), the
//! leader process is killed with SIGKILL, the other two elect a new leader and take writes, and no
//! acknowledged write is lost; after 600 more writes the killed server restarts and rejoins (synced
//! by SNAP). The time from the kill to the first successful write is printed.
//! Every process started is killed by its PID at the end (also on failure, via Drop).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use zk::{Acls, CreateMode};
use zookeeper_client as zk;

mod common;
use common::mixed::write_many;
use common::{free_port, spawn_warden, stop, WorkDir};

/// Bound on each wait for an election or a role.
const ELECT: Duration = Duration::from_secs(30);
const OP: Duration = Duration::from_secs(10);

struct Member {
    id: u64,
    client: SocketAddr,
    cfg: PathBuf,
    child: Option<Child>,
}

struct Ensemble {
    dir: WorkDir,
    members: Vec<Member>,
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        for m in &mut self.members {
            stop(m.child.take());
        }
    }
}

impl Ensemble {
    fn new(n: u64) -> Ensemble {
        Ensemble::with_cfg(n, "")
    }

    /// As `new`, with `extra` zoo.cfg lines for every member.
    fn with_cfg(n: u64, extra: &str) -> Ensemble {
        let dir = WorkDir::new("warden-ensemble-");
        let ports: Vec<(u16, u16, u16)> = (0..n).map(|_| (free_port(), free_port(), free_port())).collect();
        let mut servers = String::new();
        for (i, (_, q, e)) in ports.iter().enumerate() {
            servers.push_str(&format!("server.{}=127.0.0.1:{q}:{e}\n", i + 1));
        }
        let mut members = Vec::new();
        for (i, (c, _, _)) in ports.iter().enumerate() {
            let id = i as u64 + 1;
            let data = dir.member_data_dir(id);
            let cfg = dir.path().join(format!("zoo{id}.cfg"));
            std::fs::write(
                &cfg,
                format!(
                    "tickTime=200\ninitLimit=10\nsyncLimit=5\nclientPort={c}\nclientPortAddress=127.0.0.1\n\
                     dataDir={}\n4lw.commands.whitelist=*\npreAllocSize=1024\nmaxSessionTimeout=20000\n{servers}{extra}",
                    data.display()
                ),
            )
            .unwrap();
            members.push(Member { id, client: format!("127.0.0.1:{c}").parse().unwrap(), cfg, child: None });
        }
        let mut e = Ensemble { dir, members };
        for i in 0..e.members.len() {
            e.spawn(i);
        }
        e
    }

    fn spawn(&mut self, i: usize) {
        let m = &mut self.members[i];
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("server{}.stderr", m.id)))
            .unwrap();
        m.child = Some(spawn_warden(&m.cfg, err));
    }

    /// SIGKILL by PID.
    fn kill(&mut self, id: u64) {
        let m = self.members.iter_mut().find(|m| m.id == id).unwrap();
        let mut c = m.child.take().expect("running");
        let status = Command::new("kill").arg("-9").arg(c.id().to_string()).status().expect("kill -9");
        assert!(status.success());
        let _ = c.wait();
    }

    fn live(&self) -> Vec<&Member> {
        self.members.iter().filter(|m| m.child.is_some()).collect()
    }
}

fn mode(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"srvr").ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().find_map(|l| l.strip_prefix("Mode: ").map(str::to_owned))
}

/// Waits until every live member reports leader or follower, with exactly one leader.
async fn wait_roles(e: &Ensemble) -> u64 {
    let deadline = Instant::now() + ELECT;
    loop {
        let addrs: Vec<(u64, SocketAddr)> = e.live().iter().map(|m| (m.id, m.client)).collect();
        let modes =
            tokio::task::spawn_blocking(move || addrs.into_iter().map(|(id, a)| (id, mode(a))).collect::<Vec<_>>())
                .await
                .unwrap();
        let leaders: Vec<u64> = modes.iter().filter(|(_, m)| m.as_deref() == Some("leader")).map(|(i, _)| *i).collect();
        let followers = modes.iter().filter(|(_, m)| m.as_deref() == Some("follower")).count();
        if leaders.len() == 1 && followers + 1 == modes.len() {
            return leaders[0];
        }
        assert!(Instant::now() < deadline, "no stable leader/followers within {ELECT:?}: {modes:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn client(addr: SocketAddr) -> zk::Client {
    tokio::time::timeout(
        OP,
        zk::Client::connector().with_session_timeout(Duration::from_secs(6)).connect(&addr.to_string()),
    )
    .await
    .expect("connect in time")
    .expect("connect")
}

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

async fn check_all(e: &Ensemble, paths: &[String]) {
    for m in e.live() {
        let r = client(m.client).await;
        tokio::time::timeout(OP, r.sync("/")).await.expect("sync in time").expect("sync");
        for path in paths {
            let got = tokio::time::timeout(OP, r.get_data(path)).await.expect("read in time");
            assert_eq!(got.expect("read").0, path.as_bytes(), "server {} {path}", m.id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_processes_elect_replicate_and_survive_kill_9_of_the_leader() {
    // No DIFF from the on-disk log: a learner behind the in-memory history gets SNAP.
    let mut e = Ensemble::with_cfg(3, "snapshotSizeFactor=-1\n");
    let leader = wait_roles(&e).await;
    let follower = e.members.iter().find(|m| m.id != leader).unwrap().client;
    let c = client(follower).await;
    let mut acked = Vec::new();
    for i in 0..50 {
        let path = format!("/k{i}");
        tokio::time::timeout(OP, c.create(&path, path.as_bytes(), &persistent()))
            .await
            .expect("write in time")
            .expect("write through a follower");
        acked.push(path);
    }
    check_all(&e, &acked).await;
    drop(c);

    e.kill(leader);
    let killed = Instant::now();
    let mut took = None;
    let deadline = killed + ELECT;
    'retry: while Instant::now() < deadline {
        for m in e.live() {
            let addr = m.client;
            let attempt = async move {
                let c = zk::Client::connector()
                    .with_session_timeout(Duration::from_secs(6))
                    .connect(&addr.to_string())
                    .await
                    .ok()?;
                c.create("/after", b"/after", &persistent()).await.ok()
            };
            if let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(3), attempt).await {
                took = Some(killed.elapsed());
                break 'retry;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = took.expect("a write succeeds after the leader was killed");
    println!("FAILOVER: kill -9 of leader {leader} -> first successful write after {} ms", took.as_millis());
    let new_leader = wait_roles(&e).await;
    assert_ne!(new_leader, leader);
    acked.push("/after".into());
    check_all(&e, &acked).await;

    // More txns than the leader keeps in memory for DIFF (500), so the killed server, when it
    // comes back, is synced by SNAP (snapshotSizeFactor=-1: not from the on-disk log).
    acked.extend(write_many(e.live()[0].client, "m", 600).await);

    // The killed server restarts on its data directory and rejoins as a follower of the new leader.
    let idx = e.members.iter().position(|m| m.id == leader).unwrap();
    e.spawn(idx);
    let again = wait_roles(&e).await;
    assert_eq!(again, new_leader, "a rejoining server does not take the lead from a working leader");
    let c = client(e.members[idx].client).await;
    tokio::time::timeout(OP, c.create("/rejoined", b"/rejoined", &persistent()))
        .await
        .expect("write in time")
        .expect("write through the rejoined server");
    acked.push("/rejoined".into());
    check_all(&e, &acked).await;
    let log = std::fs::read_to_string(e.dir.path().join(format!("server{new_leader}.stderr"))).unwrap();
    assert!(log.contains("sending snapshot"), "the rejoining server was synced by SNAP");
}

/// Writers keep creating nodes (each through some live server) while the leader is killed with
/// SIGKILL and restarted, three rounds; every acknowledged create must be on every server at the
/// end. A killed leader may restart with proposals no one else logged: the new leader's TRUNC
/// makes it cut them and reload its data from disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_repeated_kill_9_of_the_leader_under_load() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let mut e = Ensemble::new(3);
    wait_roles(&e).await;
    let addrs: Vec<SocketAddr> = e.members.iter().map(|m| m.client).collect();
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4usize {
        let (acked, stop, addrs) = (acked.clone(), stop.clone(), addrs.clone());
        writers.spawn(async move {
            let mut i = 0u64;
            let mut target = w;
            while !stop.load(Ordering::Relaxed) {
                target = (target + 1) % addrs.len();
                let addr = addrs[target].to_string();
                let connect = zk::Client::connector().with_session_timeout(Duration::from_secs(6)).connect(&addr);
                let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(2), connect).await else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                while !stop.load(Ordering::Relaxed) {
                    let path = format!("/w{w}-{i}");
                    i += 1;
                    match tokio::time::timeout(Duration::from_secs(2), c.create(&path, path.as_bytes(), &persistent()))
                        .await
                    {
                        Ok(Ok(_)) => acked.lock().unwrap().push(path),
                        _ => break,
                    }
                }
            }
        });
    }
    for _round in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let leader = wait_roles(&e).await;
        e.kill(leader);
        wait_roles(&e).await;
        let idx = e.members.iter().position(|m| m.id == leader).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        e.spawn(idx);
        wait_roles(&e).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    while writers.join_next().await.is_some() {}
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 50, "writers made progress: {}", acked.len());
    println!("UNDER LOAD: {} acknowledged creates, all present on 3 servers after 3 leader kills", acked.len());
    wait_roles(&e).await;
    check_all(&e, &acked).await;
    let mut reloads = 0;
    let mut snaps = 0;
    for m in &e.members {
        let log = std::fs::read_to_string(e.dir.path().join(format!("server{}.stderr", m.id))).unwrap_or_default();
        reloads += log.matches("data reloaded from storage").count();
        snaps += log.matches("sending snapshot").count();
    }
    println!("UNDER LOAD: TRUNC-and-reload happened {reloads} times, SNAP syncs {snaps}");
}

/// A server restarted from its data directory rebuilds the in-memory history it syncs learners
/// from out of the txns it replays at start-up (as ZooKeeper fills its committedLog while loading),
/// so a follower only a few txns behind a restarted leader is synced by DIFF, not SNAP.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_leader_syncs_a_follower_a_few_txns_behind_by_diff() {
    let mut e = Ensemble::new(3);
    let leader = wait_roles(&e).await;
    let lagging = e.members.iter().find(|m| m.id != leader).unwrap().id;
    let other = e.members.iter().find(|m| m.id != leader && m.id != lagging).unwrap().id;
    let c = client(e.members.iter().find(|m| m.id == leader).unwrap().client).await;
    let mut acked = Vec::new();
    for i in 0..30 {
        let path = format!("/r{i}");
        if i == 20 {
            // The lagging follower misses the last ten.
            e.kill(lagging);
        }
        tokio::time::timeout(OP, c.create(&path, path.as_bytes(), &persistent()))
            .await
            .expect("write in time")
            .expect("write");
        acked.push(path);
    }
    drop(c);
    // Both servers that have everything restart from disk, so whichever leads has only what it
    // recovered; then the lagging follower comes back.
    e.kill(leader);
    e.kill(other);
    let snaps = |e: &Ensemble| -> usize {
        e.members
            .iter()
            .map(|m| {
                let log = std::fs::read_to_string(e.dir.path().join(format!("server{}.stderr", m.id)));
                log.unwrap_or_default().matches("sending snapshot").count()
            })
            .sum()
    };
    for id in [leader, other] {
        let idx = e.members.iter().position(|m| m.id == id).unwrap();
        e.spawn(idx);
    }
    wait_roles(&e).await;
    let before = snaps(&e);
    let idx = e.members.iter().position(|m| m.id == lagging).unwrap();
    e.spawn(idx);
    wait_roles(&e).await;
    check_all(&e, &acked).await;
    assert_eq!(snaps(&e), before, "the follower ten txns behind a restarted leader was synced by SNAP");
}

/// `zk_<name>` from a server's `mntr`.
fn mntr_count(addr: SocketAddr, name: &str) -> u64 {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).expect("connect for mntr");
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(b"mntr").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let key = format!("zk_{name}\t");
    out.lines()
        .find_map(|l| l.strip_prefix(key.as_str()).map(|v| v.trim().parse().expect("a count")))
        .unwrap_or_else(|| panic!("no {key:?} in mntr:\n{out}"))
}

/// A follower killed, then 2,000 txns written (four times the 500 the leader keeps in memory),
/// then restarted, is synced by a DIFF read from the leader's on-disk txn log (ZooKeeper's
/// snapshotSizeFactor path), not by SNAP, and serves every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_2000_txns_behind_is_synced_by_diff_from_the_on_disk_log() {
    let started = Instant::now();
    // A longer tick than the other tests: a burst of writes must not starve the PINGs of a debug
    // build on a busy machine past the leader's lease (about syncLimit ticks).
    let mut e = Ensemble::with_cfg(3, "tickTime=1000\n");
    let leader = wait_roles(&e).await;
    let lagging = e.members.iter().find(|m| m.id != leader).unwrap().id;
    let leader_addr = e.members.iter().find(|m| m.id == leader).unwrap().client;
    let c = client(leader_addr).await;
    let mut acked = Vec::new();
    for i in 0..10 {
        let path = format!("/before{i}");
        tokio::time::timeout(OP, c.create(&path, path.as_bytes(), &persistent()))
            .await
            .expect("in time")
            .expect("write");
        acked.push(path);
    }
    e.kill(lagging);
    drop(c);
    acked.extend(write_many(leader_addr, "d", 2000).await);
    let (diffs, snaps) = (mntr_count(leader_addr, "diff_count"), mntr_count(leader_addr, "snap_count"));

    let idx = e.members.iter().position(|m| m.id == lagging).unwrap();
    e.spawn(idx);
    assert_eq!(wait_roles(&e).await, leader, "the working leader keeps the lead");
    // Every node, read on the restarted follower itself (and on the others).
    check_all(&e, &acked).await;
    assert_eq!(mntr_count(leader_addr, "snap_count"), snaps, "no SNAP was sent");
    assert_eq!(mntr_count(leader_addr, "diff_count"), diffs + 1, "one DIFF was sent");
    let log = std::fs::read_to_string(e.dir.path().join(format!("server{leader}.stderr"))).unwrap();
    assert!(log.contains("syncing a learner by DIFF from the on-disk txn log"), "{log}");
    let wrote = log
        .lines()
        .find(|l| l.contains("wrote the DIFF's txns from the on-disk log"))
        .expect("the disk part was written");
    assert!(!log.contains("sending snapshot"), "no snapshot was sent");
    // At least the 1,500 txns older than the in-memory history came from disk.
    let txns: u64 =
        wrote.split_whitespace().find_map(|w| w.strip_prefix("txns=")).expect("txns= in the log line").parse().unwrap();
    assert!(txns >= 1500, "{wrote}");
    println!("DIFF FROM DISK: {wrote} (test took {} ms)", started.elapsed().as_millis());
}

/// A client reconnecting with an existing session to a follower is answered after the leader's
/// REVALIDATE reply: after the leader is killed, a session made before moves to a follower of the
/// new leader (same id, its ephemeral kept), while a short session the new leader expired meanwhile
/// gets the session-expired answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_move_to_a_follower_of_a_new_leader_or_are_told_they_expired() {
    let mut e = Ensemble::new(3);
    let leader = wait_roles(&e).await;
    let first = e.members.iter().find(|m| m.id != leader).unwrap().client.to_string();
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let mut sessions = Vec::new();
    for (name, timeout) in [("kept", Duration::from_secs(6)), ("short", Duration::from_millis(400))] {
        let connect = zk::Client::connector().with_session_timeout(timeout).with_detached().connect(&first);
        let c = tokio::time::timeout(OP, connect).await.expect("connect in time").expect("connect");
        let path = format!("/reval-{name}");
        tokio::time::timeout(OP, c.create(&path, b"", &ephemeral)).await.expect("in time").expect("ephemeral");
        sessions.push((path, c.session_id(), c.into_session()));
    }
    e.kill(leader);
    let new_leader = wait_roles(&e).await;
    let follower = e.live().iter().find(|m| m.id != new_leader).unwrap().client.to_string();
    let watcher = client(e.members.iter().find(|m| m.id == new_leader).unwrap().client).await;

    // The short session: wait until the new leader has expired it (its ephemeral is gone).
    let (short_path, _, short) = sessions.pop().unwrap();
    let deadline = Instant::now() + ELECT;
    while tokio::time::timeout(OP, watcher.check_stat(&short_path)).await.expect("in time").expect("stat").is_some() {
        assert!(Instant::now() < deadline, "the new leader never expired the short session");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let again = zk::Client::connector().with_session(short).connect(&follower);
    let refused = tokio::time::timeout(OP, again).await.expect("answered in time");
    assert!(
        matches!(refused, Err(zk::Error::SessionExpired)),
        "expired session accepted: {:?}",
        refused.map(|c| c.session_id())
    );

    // The kept session moves to the follower and still owns its ephemeral.
    let (kept_path, kept_id, kept) = sessions.pop().unwrap();
    let again =
        zk::Client::connector().with_session(kept).with_session_timeout(Duration::from_secs(6)).connect(&follower);
    let c = tokio::time::timeout(OP, again).await.expect("connect in time").expect("the session is still valid");
    assert_eq!(c.session_id(), kept_id);
    let stat = tokio::time::timeout(OP, c.check_stat(&kept_path)).await.expect("in time").expect("stat");
    assert_eq!(stat.expect("ephemeral kept").ephemeral_owner, kept_id.0);
    tokio::time::timeout(OP, c.create("/reval-after", b"", &persistent())).await.expect("in time").expect("write");
}
