//! Mixed ensembles of `warden serve` processes and Apache ZooKeeper 3.8.0 servers (Debian package,
//! `scripts/zk-classpath`): the quorum port protocol between them, including SNAP sync in
//! ZooKeeper's own stream format (serialized sessions and tree, then "BenWasHere").
//!
//! * ZooKeeper leads, a Warden follower is synced by DIFF (PROPOSAL/COMMIT), serves the data, and
//!   forwards writes; it is killed, misses more txns than ZooKeeper keeps for DIFF
//!   (`zookeeper.commitLogCount` 500, on-disk DIFF off with `zookeeper.snapshotSizeFactor=-1`),
//!   restarts, is synced by SNAP and serves every node.
//! * Warden leads, a ZooKeeper follower misses more than Warden's 500 in-memory txns, restarts, is
//!   synced by SNAP from Warden and serves every node on its own client port.
//!
//! Every process started is killed by its PID when its guard drops (also on failure).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zk::{Acls, CreateMode};
use zookeeper_client as zk;

mod common;
use common::{free_port, oracle, spawn_warden, stop, WorkDir};
use oracle::MISSING as MISSING_ZK;

const ELECT: Duration = Duration::from_secs(60);
const OP: Duration = Duration::from_secs(20);
/// More txns than either side keeps in memory for DIFF (500), so a server that missed them gets SNAP.
const MISSED: usize = 700;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Warden,
    ZooKeeper,
}

struct Member {
    id: u64,
    kind: Kind,
    client: SocketAddr,
    cfg: PathBuf,
    out: PathBuf,
    child: Option<Child>,
}

struct Mixed {
    /// Holds the servers' data and logs for as long as they run.
    _dir: WorkDir,
    classpath: String,
    members: Vec<Member>,
}

impl Drop for Mixed {
    fn drop(&mut self) {
        for m in &mut self.members {
            stop(m.child.take());
        }
    }
}

/// Debian's ZooKeeper server classpath (fails, never skips, without ZooKeeper or java), with
/// slf4j-simple instead of slf4j-nop: ZooKeeper's INFO log lands in the server's output file.
fn zk_classpath() -> String {
    oracle::zk_classpath().replace("slf4j-nop.jar", "slf4j-simple.jar")
}

impl Mixed {
    /// `kinds[i]` is server.(i+1). Nothing is started.
    fn new(kinds: &[Kind]) -> Mixed {
        let dir = WorkDir::new("warden-mixed-");
        let ports: Vec<(u16, u16, u16)> = kinds.iter().map(|_| (free_port(), free_port(), free_port())).collect();
        let mut servers = String::new();
        for (i, (_, q, e)) in ports.iter().enumerate() {
            servers.push_str(&format!("server.{}=127.0.0.1:{q}:{e}\n", i + 1));
        }
        let mut members = Vec::new();
        for (i, (&kind, (c, _, _))) in kinds.iter().zip(&ports).enumerate() {
            let id = i as u64 + 1;
            let data = dir.member_data_dir(id);
            let cfg = dir.path().join(format!("zoo{id}.cfg"));
            std::fs::write(
                &cfg,
                format!(
                    "tickTime=500\ninitLimit=20\nsyncLimit=10\nclientPort={c}\nclientPortAddress=127.0.0.1\n\
                     dataDir={}\n4lw.commands.whitelist=*\nadmin.enableServer=false\npreAllocSize=1024\n\
                     maxSessionTimeout=20000\n{servers}",
                    data.display()
                ),
            )
            .unwrap();
            let out = dir.path().join(format!("server{id}.out"));
            members.push(Member { id, kind, client: format!("127.0.0.1:{c}").parse().unwrap(), cfg, out, child: None });
        }
        Mixed { _dir: dir, classpath: zk_classpath(), members }
    }

    fn member(&self, id: u64) -> &Member {
        self.members.iter().find(|m| m.id == id).unwrap()
    }

    fn start(&mut self, id: u64) {
        let classpath = self.classpath.clone();
        let m = self.members.iter_mut().find(|m| m.id == id).unwrap();
        assert!(m.child.is_none(), "server.{id} already running");
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&m.out).unwrap();
        m.child = Some(match m.kind {
            Kind::Warden => spawn_warden(&m.cfg, out),
            Kind::ZooKeeper => Command::new("java")
                .arg("-Xmx256m")
                .arg("-Dzookeeper.admin.enableServer=false")
                // No DIFF from the on-disk log: a learner behind the in-memory history gets SNAP.
                .arg("-Dzookeeper.snapshotSizeFactor=-1")
                .arg("-Dzookeeper.commitLogCount=500")
                .arg("-cp")
                .arg(&classpath)
                .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
                .arg(&m.cfg)
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("{MISSING_ZK}: spawning java: {e}")),
        });
    }

    /// SIGKILL by PID.
    fn kill(&mut self, id: u64) {
        let m = self.members.iter_mut().find(|m| m.id == id).unwrap();
        let mut c = m.child.take().expect("running");
        let status = Command::new("kill").arg("-9").arg(c.id().to_string()).status().expect("kill -9");
        assert!(status.success());
        let _ = c.wait();
    }

    fn log(&self, id: u64) -> String {
        std::fs::read_to_string(&self.member(id).out).unwrap_or_default()
    }

    fn live(&self) -> Vec<(u64, SocketAddr)> {
        self.members.iter().filter(|m| m.child.is_some()).map(|m| (m.id, m.client)).collect()
    }

    /// Waits until every live server reports leader or follower with `leader` the one leader.
    async fn wait_roles(&mut self, leader: u64) {
        let deadline = Instant::now() + ELECT;
        loop {
            for m in &mut self.members {
                if let Some(c) = m.child.as_mut() {
                    if let Ok(Some(status)) = c.try_wait() {
                        m.child = None;
                        let log = std::fs::read_to_string(&m.out).unwrap_or_default();
                        let tail: Vec<&str> = log.lines().rev().take(40).collect();
                        panic!(
                            "server.{} ({:?}) exited: {status}; the end of its output:\n{}",
                            m.id,
                            m.kind,
                            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                        );
                    }
                }
            }
            let live = self.live();
            let modes =
                tokio::task::spawn_blocking(move || live.into_iter().map(|(id, a)| (id, mode(a))).collect::<Vec<_>>())
                    .await
                    .unwrap();
            let ok = modes.iter().all(|(id, m)| {
                let want = if *id == leader { "leader" } else { "follower" };
                m.as_deref() == Some(want)
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "no leader {leader} with followers within {ELECT:?}: {modes:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn four_letters(addr: SocketAddr, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    Some(out)
}

fn mode(addr: SocketAddr) -> Option<String> {
    four_letters(addr, "srvr")?.lines().find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_owned()))
}

/// A ZooKeeper 3.8 leader's `mntr` counter of DIFF or SNAP syncs it served (`zk_diff_count`,
/// `zk_snap_count`).
fn sync_count(addr: SocketAddr, name: &str) -> u64 {
    let mntr = four_letters(addr, "mntr").expect("mntr");
    let key = format!("zk_{name}\t");
    mntr.lines()
        .find_map(|l| l.strip_prefix(key.as_str()).map(|v| v.trim().parse().expect("a count")))
        .unwrap_or_else(|| panic!("no {key:?} in mntr:\n{mntr}"))
}

async fn client(addr: SocketAddr) -> zk::Client {
    tokio::time::timeout(
        OP,
        zk::Client::connector().with_session_timeout(Duration::from_secs(10)).connect(&addr.to_string()),
    )
    .await
    .unwrap_or_else(|_| panic!("connect to {addr} in time"))
    .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// Creates `/<prefix><i>` for i in 0..n through `addr`, a few at a time; returns the paths.
async fn write_many(addr: SocketAddr, prefix: &str, n: usize) -> Vec<String> {
    let c = client(addr).await;
    let mut tasks = tokio::task::JoinSet::new();
    let mut paths = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        for &i in chunk {
            let c = c.clone();
            let path = format!("/{prefix}{i}");
            paths.push(path.clone());
            tasks.spawn(async move {
                tokio::time::timeout(OP, c.create(&path, path.as_bytes(), &persistent()))
                    .await
                    .unwrap_or_else(|_| panic!("create {path} in time"))
                    .unwrap_or_else(|e| panic!("create {path}: {e}"));
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.expect("writer task");
        }
    }
    paths
}

/// Every path reads back with its own name as data on the server at `addr` (after a sync).
async fn check(addr: SocketAddr, what: &str, paths: &[String]) {
    let c = client(addr).await;
    tokio::time::timeout(OP, c.sync("/")).await.expect("sync in time").expect("sync");
    for path in paths {
        let got = tokio::time::timeout(OP, c.get_data(path)).await.expect("read in time");
        let got = got.unwrap_or_else(|e| panic!("{what}: reading {path}: {e}"));
        assert_eq!(got.0, path.as_bytes(), "{what}: {path}");
    }
    let children = tokio::time::timeout(OP, c.list_children("/")).await.expect("list in time").expect("list /");
    for path in paths {
        assert!(children.iter().any(|c| *c == path[1..]), "{what}: / lists no {path}");
    }
}

/// `f`, which must finish within `OP`.
async fn op<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(OP, f).await.expect("in time")
}

/// Client operations through `via` (a server of one kind) seen through `other` (of the other
/// kind): an ephemeral, a multi with a create and a setData, setData and delete with versions, a data watch set on `other` fired by a write through `via`, and the
/// ephemeral gone everywhere once its session is closed.
async fn exercise(via: SocketAddr, other: SocketAddr, what: &str) {
    let c = client(via).await;
    let o = client(other).await;
    op(c.create("/ops", b"0", &persistent())).await.unwrap_or_else(|e| panic!("{what}: create /ops: {e}"));
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    op(c.create("/ops/eph", b"e", &eph)).await.unwrap_or_else(|e| panic!("{what}: create ephemeral: {e}"));
    let mut multi = c.new_multi_writer();
    multi.add_create("/ops/m", b"m", &persistent()).unwrap();
    multi.add_set_data("/ops", b"multi", Some(0)).unwrap();
    let results = op(multi.commit()).await.unwrap_or_else(|e| panic!("{what}: multi: {e:?}"));
    // (Through a ZooKeeper server the create's Stat is not filled: ZooKeeper 3.8 turns a create2
    // inside a multi into a plain create, ZOOKEEPER-4026.)
    match &results[..] {
        [zk::MultiWriteResult::Create { path, .. }, zk::MultiWriteResult::SetData { stat }] => {
            assert_eq!(path, "/ops/m", "{what}");
            assert_eq!(stat.version, 1, "{what}");
        }
        other => panic!("{what}: multi results {other:?}"),
    }
    op(o.sync("/")).await.unwrap();
    let (data, stat, watcher) = op(o.get_and_watch_data("/ops")).await.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!((data.as_slice(), stat.version), (&b"multi"[..], 1), "{what}: /ops after the multi");
    assert_eq!(op(o.get_data("/ops/eph")).await.expect("ephemeral").1.ephemeral_owner, c.session_id().0, "{what}");
    op(c.set_data("/ops/m", b"m2", Some(0))).await.unwrap_or_else(|e| panic!("{what}: setData: {e}"));
    op(c.set_data("/ops", b"fired", Some(1))).await.unwrap_or_else(|e| panic!("{what}: setData: {e}"));
    let event = op(watcher.changed()).await;
    assert_eq!(event.event_type, zk::EventType::NodeDataChanged, "{what}: watch on the other server");
    op(c.delete("/ops/m", Some(1))).await.unwrap_or_else(|e| panic!("{what}: delete: {e}"));
    drop(c);
    // The ephemeral goes when its session closes (closeSession through `via`).
    let deadline = Instant::now() + OP;
    loop {
        op(o.sync("/")).await.unwrap();
        if op(o.check_stat("/ops/eph")).await.unwrap().is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "{what}: the ephemeral outlived its closed session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(op(o.check_stat("/ops/m")).await.unwrap().is_none(), "{what}: /ops/m deleted");
    let children = op(o.list_children("/ops")).await.unwrap();
    assert!(children.is_empty(), "{what}: /ops children {children:?}");
}

/// ZooKeeper 3.8 leads (server.3, the highest sid) with a ZooKeeper follower (server.2); Warden
/// (server.1) follows: it is synced by DIFF, serves reads and forwards writes; killed, it misses
/// more txns than ZooKeeper keeps for DIFF, restarts and is synced by SNAP in ZooKeeper's stream
/// format.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_leader_syncs_a_warden_follower_by_diff_and_by_snap() {
    let mut e = Mixed::new(&[Kind::Warden, Kind::ZooKeeper, Kind::ZooKeeper]);
    // Two servers first, so the leader is certain (both end up voting for the higher sid); with
    // all three at once a loaded machine can let server.2 win a race, as in ZooKeeper itself.
    e.start(3);
    e.start(1);
    e.wait_roles(3).await;
    e.start(2);
    e.wait_roles(3).await;
    let (warden, zk_leader) = (e.member(1).client, e.member(3).client);

    // Broadcast: PROPOSAL/COMMIT from ZooKeeper's leader applied on Warden.
    let mut acked = write_many(zk_leader, "a", 20).await;
    check(warden, "Warden follower, broadcast", &acked).await;
    // Writes through Warden are forwarded (REQUEST) to ZooKeeper's leader and reach everyone.
    acked.extend(write_many(warden, "w", 20).await);
    check(zk_leader, "ZooKeeper leader, writes forwarded by Warden", &acked).await;
    check(warden, "Warden follower, its own writes", &acked).await;
    exercise(warden, zk_leader, "through a Warden follower of ZooKeeper").await;

    // Restart with a few txns missed: DIFF.
    let (diffs, snaps) = (sync_count(zk_leader, "diff_count"), sync_count(zk_leader, "snap_count"));
    e.kill(1);
    acked.extend(write_many(zk_leader, "d", 10).await);
    e.start(1);
    e.wait_roles(3).await;
    check(warden, "Warden follower after DIFF", &acked).await;
    // (At least one: a connection attempt that fails after the handshake counts too.)
    assert!(sync_count(zk_leader, "diff_count") > diffs, "ZooKeeper's leader synced Warden by DIFF");
    assert_eq!(sync_count(zk_leader, "snap_count"), snaps, "no SNAP for a Warden follower ten txns behind");

    // Restart with more missed than ZooKeeper's committed log holds: SNAP.
    e.kill(1);
    acked.extend(write_many(zk_leader, "s", MISSED).await);
    e.start(1);
    e.wait_roles(3).await;
    check(warden, "Warden follower after SNAP", &acked).await;
    assert!(sync_count(zk_leader, "snap_count") > snaps, "ZooKeeper's leader synced Warden by SNAP");
    assert!(e.log(1).contains("installing the leader's snapshot"), "Warden installed ZooKeeper's snapshot");
    // And it still takes part: a write through Warden after the SNAP.
    acked.extend(write_many(warden, "after", 5).await);
    check(e.member(2).client, "ZooKeeper follower at the end", &acked).await;
    check(warden, "Warden follower at the end", &acked).await;
}

/// Warden (server.3) leads ZooKeeper 3.8 followers (server.1 and 2); a ZooKeeper follower misses
/// more than Warden's in-memory history, restarts, is synced by SNAP from Warden and serves every
/// node on its own client port.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_leader_syncs_a_zookeeper_follower_by_snap() {
    let mut e = Mixed::new(&[Kind::ZooKeeper, Kind::ZooKeeper, Kind::Warden]);
    e.start(3);
    e.start(1);
    e.wait_roles(3).await;
    e.start(2);
    e.wait_roles(3).await;
    let (warden, zk1) = (e.member(3).client, e.member(1).client);

    let mut acked = write_many(warden, "a", 20).await;
    check(zk1, "ZooKeeper follower, broadcast from Warden", &acked).await;
    acked.extend(write_many(zk1, "z", 20).await);
    check(warden, "Warden leader, writes forwarded by ZooKeeper", &acked).await;
    exercise(zk1, warden, "through a ZooKeeper follower of Warden").await;

    e.kill(1);
    acked.extend(write_many(warden, "s", MISSED).await);
    e.start(1);
    e.wait_roles(3).await;
    check(zk1, "ZooKeeper follower after SNAP from Warden", &acked).await;
    assert!(e.log(1).contains("Getting a snapshot from leader"), "ZooKeeper was synced by SNAP");
    assert!(e.log(3).contains("sending snapshot"), "Warden's leader sent a snapshot");
    acked.extend(write_many(zk1, "after", 5).await);
    check(e.member(2).client, "the other ZooKeeper follower at the end", &acked).await;
    check(warden, "Warden leader at the end", &acked).await;
}
