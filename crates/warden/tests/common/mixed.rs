//! A 3-server ensemble of `warden serve` processes and Apache ZooKeeper 3.8.0 servers (Debian
//! package, `scripts/zk-classpath`) in any mix, each with its own zoo.cfg that a test may change
//! between restarts, and the client helpers the mixed-ensemble tests share. Every process started
//! is killed by its PID when its guard drops (also on failure).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk::{Acls, CreateMode};
use zookeeper_client as zk;

use super::oracle::MISSING as MISSING_ZK;
use super::{free_port, oracle, stop, warden_command, WorkDir};

pub const ELECT: Duration = Duration::from_secs(60);
pub const OP: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Warden,
    ZooKeeper,
}

pub struct Member {
    pub id: u64,
    pub kind: Kind,
    pub client: SocketAddr,
    pub cfg: PathBuf,
    /// The config every member shares (ports, servers); `extra` lines follow it.
    base: String,
    /// Extra `-D` flags: a ZooKeeper member's JVM arguments, a Warden member's `SERVER_JVMFLAGS`
    /// (which Warden reads as zkServer.sh would pass them).
    jvm_flags: Vec<String>,
    pub out: PathBuf,
    pub child: Option<Child>,
}

pub struct Mixed {
    /// Holds the servers' data and logs for as long as they run.
    pub dir: WorkDir,
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
pub fn zk_classpath() -> String {
    oracle::zk_classpath().replace("slf4j-nop.jar", "slf4j-simple.jar")
}

impl Mixed {
    /// `kinds[i]` is server.(i+1). Nothing is started.
    pub fn new(kinds: &[Kind]) -> Mixed {
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
            let base = format!(
                "tickTime=500\ninitLimit=20\nsyncLimit=10\nclientPort={c}\nclientPortAddress=127.0.0.1\n\
                 dataDir={}\n4lw.commands.whitelist=*\nadmin.enableServer=false\npreAllocSize=1024\n\
                 maxSessionTimeout=20000\n{servers}",
                data.display()
            );
            std::fs::write(&cfg, &base).unwrap();
            let out = dir.path().join(format!("server{id}.out"));
            let client = format!("127.0.0.1:{c}").parse().unwrap();
            members.push(Member { id, kind, client, cfg, base, jvm_flags: Vec::new(), out, child: None });
        }
        Mixed { dir, classpath: zk_classpath(), members }
    }

    /// Makes server.`id` an observer (before any start): its `server.N` line says so in every
    /// member's config, and its own config has `peerType=observer`.
    pub fn make_observer(&mut self, id: u64) {
        let prefix = format!("server.{id}=");
        for m in &mut self.members {
            m.base = m
                .base
                .lines()
                .map(|l| if l.starts_with(&prefix) { format!("{l}:observer\n") } else { format!("{l}\n") })
                .collect();
            if m.id == id {
                m.base.push_str("peerType=observer\n");
            }
            std::fs::write(&m.cfg, &m.base).unwrap();
        }
    }

    /// The classpath ZooKeeper members start with (e.g. `oracle::zk_admin_classpath()`, which
    /// adds Jetty and Jackson for the AdminServer).
    pub fn set_classpath(&mut self, classpath: String) {
        self.classpath = classpath;
    }

    /// Each live server's `srvr` mode, by id.
    pub async fn modes(&self) -> Vec<(u64, Option<String>)> {
        self.live_modes().await
    }

    /// Rewrites server.`id`'s zoo.cfg as the shared lines plus `extra`; read at its next start.
    pub fn set_extra(&mut self, id: u64, extra: &str) {
        let m = self.members.iter().find(|m| m.id == id).unwrap();
        std::fs::write(&m.cfg, format!("{}{extra}", m.base)).unwrap();
    }

    /// Turns on server.`id`'s AdminServer on a free loopback port (its zoo.cfg extra lines, read
    /// at its next start); returns the address.
    pub fn admin_server(&mut self, id: u64) -> SocketAddr {
        let port = super::free_port();
        self.set_extra(
            id,
            &format!("admin.enableServer=true\nadmin.serverAddress=127.0.0.1\nadmin.serverPort={port}\n"),
        );
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Sets the extra JVM flags of server.`id` for its next start (a Warden member gets them in
    /// `SERVER_JVMFLAGS`).
    pub fn set_jvm_flags(&mut self, id: u64, flags: &[String]) {
        self.members.iter_mut().find(|m| m.id == id).unwrap().jvm_flags = flags.to_vec();
    }

    /// The election port of server.`id` (from the shared `server.N` lines).
    pub fn election_port(&self, id: u64) -> u16 {
        self.port(id, 2)
    }

    /// The quorum port of server.`id`.
    pub fn quorum_port(&self, id: u64) -> u16 {
        self.port(id, 1)
    }

    fn port(&self, id: u64, i: usize) -> u16 {
        let line = self.members[0].base.lines().find(|l| l.starts_with(&format!("server.{id}="))).unwrap();
        line.rsplit('=').next().unwrap().split(':').nth(i).unwrap().parse().unwrap()
    }

    pub fn member(&self, id: u64) -> &Member {
        self.members.iter().find(|m| m.id == id).unwrap()
    }

    pub fn start(&mut self, id: u64) {
        let classpath = self.classpath.clone();
        let m = self.members.iter_mut().find(|m| m.id == id).unwrap();
        assert!(m.child.is_none(), "server.{id} already running");
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&m.out).unwrap();
        m.child = Some(match m.kind {
            Kind::Warden => {
                warden_command(&m.cfg, out).env("SERVER_JVMFLAGS", m.jvm_flags.join(" ")).spawn().expect("spawn warden")
            }
            Kind::ZooKeeper => Command::new("java")
                .arg("-Xmx256m")
                .arg("-Dzookeeper.admin.enableServer=false")
                // No DIFF from the on-disk log: a learner behind the in-memory history gets SNAP.
                .arg("-Dzookeeper.snapshotSizeFactor=-1")
                .arg("-Dzookeeper.commitLogCount=500")
                .args(&m.jvm_flags)
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
    pub fn kill(&mut self, id: u64) {
        let m = self.members.iter_mut().find(|m| m.id == id).unwrap();
        let mut c = m.child.take().expect("running");
        let status = Command::new("kill").arg("-9").arg(c.id().to_string()).status().expect("kill -9");
        assert!(status.success());
        let _ = c.wait();
    }

    pub fn log(&self, id: u64) -> String {
        std::fs::read_to_string(&self.member(id).out).unwrap_or_default()
    }

    pub fn live(&self) -> Vec<(u64, SocketAddr)> {
        self.members.iter().filter(|m| m.child.is_some()).map(|m| (m.id, m.client)).collect()
    }

    /// Waits until every live server reports leader or follower, with one leader; returns it.
    pub async fn wait_quorum(&mut self) -> u64 {
        let deadline = Instant::now() + ELECT;
        loop {
            self.check_alive();
            let modes = self.live_modes().await;
            let leaders: Vec<u64> =
                modes.iter().filter(|(_, m)| m.as_deref() == Some("leader")).map(|(id, _)| *id).collect();
            let all = modes.iter().all(|(_, m)| matches!(m.as_deref(), Some("leader" | "follower")));
            if all && leaders.len() == 1 {
                return leaders[0];
            }
            assert!(
                Instant::now() < deadline,
                "no leader with every live server following within {ELECT:?}: {modes:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Each live server's `srvr` mode.
    async fn live_modes(&self) -> Vec<(u64, Option<String>)> {
        let live = self.live();
        tokio::task::spawn_blocking(move || live.into_iter().map(|(id, a)| (id, mode(a))).collect()).await.unwrap()
    }

    /// Panics with the end of its output if a started server has exited.
    pub fn check_alive(&mut self) {
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
    }

    /// Rolling restarts under a writing client: `rounds` times, each server in turn is killed,
    /// given `extra(round, id)` as its zoo.cfg lines and restarted, and the ensemble waited for.
    /// Returns the acknowledged writes, after checking that every server has each of them.
    pub async fn roll_under_writes(&mut self, rounds: usize, extra: impl Fn(usize, u64) -> String) -> Vec<String> {
        let writer = Writer::start(self);
        tokio::time::sleep(Duration::from_secs(1)).await;
        for round in 0..rounds {
            let ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
            for id in ids {
                self.kill(id);
                self.set_extra(id, &extra(round, id));
                self.start(id);
                self.wait_quorum().await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let acked = writer.finish(50).await;
        for m in &self.members {
            check_rolled(m.client, &format!("server.{}", m.id), &acked).await;
        }
        acked
    }

    /// Starts a 3-server ensemble with server.3 certain to lead: servers 3 and 1 first (both end
    /// up voting for the higher sid), then server 2 once they have settled. With all three at
    /// once a loaded machine can let server.2 win a race, as in ZooKeeper itself.
    pub async fn start_with_3_leading(&mut self) {
        self.start(3);
        self.start(1);
        self.wait_roles(3).await;
        self.start(2);
        self.wait_roles(3).await;
    }

    /// Waits until every live server reports leader or follower with `leader` the one leader.
    pub async fn wait_roles(&mut self, leader: u64) {
        let deadline = Instant::now() + ELECT;
        loop {
            self.check_alive();
            let modes = self.live_modes().await;
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

pub fn four_letters(addr: SocketAddr, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    Some(out)
}

pub fn mode(addr: SocketAddr) -> Option<String> {
    four_letters(addr, "srvr")?.lines().find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_owned()))
}

/// A ZooKeeper 3.8 leader's `mntr` counter of DIFF or SNAP syncs it served (`zk_diff_count`,
/// `zk_snap_count`).
pub fn sync_count(addr: SocketAddr, name: &str) -> u64 {
    let mntr = four_letters(addr, "mntr").expect("mntr");
    let key = format!("zk_{name}\t");
    mntr.lines()
        .find_map(|l| l.strip_prefix(key.as_str()).map(|v| v.trim().parse().expect("a count")))
        .unwrap_or_else(|| panic!("no {key:?} in mntr:\n{mntr}"))
}

pub async fn client(addr: SocketAddr) -> zk::Client {
    tokio::time::timeout(
        OP,
        zk::Client::connector().with_session_timeout(Duration::from_secs(10)).connect(&addr.to_string()),
    )
    .await
    .unwrap_or_else(|_| panic!("connect to {addr} in time"))
    .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

pub fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// Creates `/<prefix><i>` for i in 0..n through `addr`, a few at a time; returns the paths.
pub async fn write_many(addr: SocketAddr, prefix: &str, n: usize) -> Vec<String> {
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
pub async fn check(addr: SocketAddr, what: &str, paths: &[String]) {
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
pub async fn op<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(OP, f).await.expect("in time")
}

/// Makes the test certificates (`scripts/make-test-certs`) in `dir/certs`.
pub fn make_certs(dir: &Path) -> PathBuf {
    let certs = dir.join("certs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/make-test-certs");
    let out = Command::new(script).arg(&certs).output().expect("run scripts/make-test-certs");
    assert!(out.status.success(), "make-test-certs: {}", String::from_utf8_lossy(&out.stderr));
    certs
}

/// A client that creates `/roll/<i>` through any of the servers until stopped, retrying an
/// unanswered create, while a test restarts servers under it.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Writer {
    fn start(e: &Mixed) -> Writer {
        let servers: Vec<String> = e.members.iter().map(|m| m.client.to_string()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(write_until(servers.join(","), stop.clone()));
        Writer { stop, task }
    }

    /// Stops it; returns the paths whose create was acknowledged (or found done on a retry),
    /// after checking that it made `at_least` of them.
    async fn finish(self, at_least: usize) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        let acked = self.task.await.expect("the writer");
        assert!(acked.len() >= at_least, "the writer made progress through the restarts: {} writes", acked.len());
        acked
    }
}

async fn write_until(servers: String, stop: Arc<AtomicBool>) -> Vec<String> {
    let c = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(&servers)
        .await
        .expect("connect the writer");
    c.create("/roll", b"", &persistent()).await.expect("create /roll");
    let mut acked = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let path = format!("/roll/{i}");
        match tokio::time::timeout(OP, c.create(&path, b"x", &persistent())).await {
            Ok(Ok(_)) | Ok(Err(zk::Error::NodeExists)) => {
                acked.push(path);
                i += 1;
            }
            Ok(Err(zk::Error::SessionExpired | zk::Error::ClientClosed)) => panic!("the writer's session ended"),
            Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    acked
}

/// Every `/roll/<i>` in `acked` is listed by the server at `addr` (after a sync).
async fn check_rolled(addr: SocketAddr, what: &str, acked: &[String]) {
    let c = client(addr).await;
    op(c.sync("/")).await.expect("sync");
    let children = op(c.list_children("/roll")).await.expect("/roll");
    for path in acked {
        assert!(children.iter().any(|c| *c == path[6..]), "{what}: lost the acknowledged {path}");
    }
}
