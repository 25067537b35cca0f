//! Dynamic reconfiguration with real `warden serve` processes (`reconfigEnabled=true`, the super
//! user `super:test`), under a writer that keeps writing through one session the whole time:
//!
//! 1. servers 1-3 form the ensemble; 4 and 5 start with a configuration of 1-5, join as
//!    non-voting followers, and a reconfig adds them (5 voters), then another removes them (3);
//! 2. server 6 joins and replaces voter 2 in one reconfig;
//! 3. server 4, still following without a vote, is made an observer, then promoted to a voter;
//! 4. the leader is removed by a reconfig sent to a follower: it hands over to the voter its
//!    COMMITANDACTIVATE designates, which every server then follows (no election), and goes on
//!    as a non-voting follower.
//!
//! And in mixed ensembles: an Apache ZooKeeper 3.8 server joins a Warden ensemble by reconfig,
//! and a Warden server joins a ZooKeeper ensemble by reconfig (both then serve the writes made
//! before and after).
//!
//! After each step every server's `/zookeeper/config` (after a sync) is the new configuration,
//! the leader's `mntr` quorum size counts its voters, and `zoo<N>.cfg.dynamic.<version>` exists
//! beside each running server's zoo.cfg. At the end: every write the writer saw acknowledged is
//! on every running server, its session never expired, and the longest pause between two
//! acknowledged writes is printed. Every process started is killed by its PID (also on failure).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zk::{Acls, CreateMode, EnsembleUpdate};
use zookeeper_client as zk;

mod common;
use common::mixed::{four_letters, mode, op, zk_classpath, Kind, ELECT, OP};
use common::{free_port, stop, warden_command, WorkDir};

/// `super:test`, as kazoo's harness configures it.
const SUPER_DIGEST: &str = "super:D/InIHSb7yEEbrWz8b9l71RjZJU=";

struct Server {
    client: SocketAddr,
    quorum: u16,
    election: u16,
    cfg: PathBuf,
    out: PathBuf,
    child: Option<Child>,
}

struct Cluster {
    dir: WorkDir,
    servers: BTreeMap<u64, Server>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for s in self.servers.values_mut() {
            stop(s.child.take());
        }
    }
}

impl Cluster {
    fn new(ids: std::ops::RangeInclusive<u64>) -> Cluster {
        let dir = WorkDir::new("warden-reconfig-");
        let mut servers = BTreeMap::new();
        for id in ids {
            let client = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let cfg = dir.path().join(format!("zoo{id}.cfg"));
            let out = dir.path().join(format!("server{id}.out"));
            servers.insert(id, Server { client, quorum: free_port(), election: free_port(), cfg, out, child: None });
        }
        Cluster { dir, servers }
    }

    /// The dynamic-config line of server `id` with `role`.
    fn line(&self, id: u64, role: &str) -> String {
        let s = &self.servers[&id];
        format!("server.{id}=127.0.0.1:{}:{}:{role};127.0.0.1:{}", s.quorum, s.election, s.client.port())
    }

    /// Starts server `id` (Warden) with a zoo.cfg naming `members` (all participants).
    fn start(&mut self, id: u64, members: &[u64]) {
        self.start_kind(id, members, Kind::Warden);
    }

    /// Starts server `id` of `kind` with a zoo.cfg naming `members` (all participants).
    fn start_kind(&mut self, id: u64, members: &[u64], kind: Kind) {
        let data = self.dir.member_data_dir(id);
        let lines: String = members.iter().map(|m| format!("{}\n", self.line(*m, "participant"))).collect();
        let s = &self.servers[&id];
        let cfg = format!(
            "tickTime=200\ninitLimit=20\nsyncLimit=10\nclientPort={}\nclientPortAddress=127.0.0.1\n\
             dataDir={}\n4lw.commands.whitelist=*\npreAllocSize=1024\nmaxSessionTimeout=30000\n\
             admin.enableServer=false\n\
             reconfigEnabled=true\nDigestAuthenticationProvider.superDigest={SUPER_DIGEST}\n{lines}",
            s.client.port(),
            data.display()
        );
        std::fs::write(&s.cfg, cfg).unwrap();
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&s.out).unwrap();
        let child = match kind {
            Kind::Warden => warden_command(&s.cfg, out).spawn().expect("spawn warden"),
            // ZooKeeper sets unknown zoo.cfg keys as `zookeeper.`-prefixed system properties, so
            // the superDigest line above reaches it too.
            Kind::ZooKeeper => std::process::Command::new("java")
                .args(["-Xmx256m", "-cp", &zk_classpath(), "org.apache.zookeeper.server.quorum.QuorumPeerMain"])
                .arg(&s.cfg)
                .stdin(std::process::Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .expect("spawn java"),
        };
        self.servers.get_mut(&id).unwrap().child = Some(child);
    }

    fn kill(&mut self, id: u64) {
        stop(self.servers.get_mut(&id).unwrap().child.take());
    }

    fn running(&self) -> Vec<u64> {
        self.servers.iter().filter(|(_, s)| s.child.is_some()).map(|(id, _)| *id).collect()
    }

    fn connect_string(&self, ids: &[u64]) -> String {
        ids.iter().map(|id| self.servers[id].client.to_string()).collect::<Vec<_>>().join(",")
    }

    fn log_tail(&self, id: u64) -> String {
        let log = std::fs::read_to_string(&self.servers[&id].out).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Waits until each of `want` reports its mode; returns the leader.
    async fn wait_modes(&self, want: &[(u64, &str)]) -> u64 {
        let deadline = Instant::now() + ELECT;
        loop {
            let addrs: Vec<(u64, SocketAddr)> = want.iter().map(|(id, _)| (*id, self.servers[id].client)).collect();
            let modes: Vec<(u64, Option<String>)> =
                tokio::task::spawn_blocking(move || addrs.into_iter().map(|(id, a)| (id, mode(a))).collect())
                    .await
                    .unwrap();
            let ok = want.iter().zip(&modes).all(|((_, w), (_, m))| m.as_deref() == Some(*w));
            if ok {
                return modes.iter().find(|(_, m)| m.as_deref() == Some("leader")).map_or(0, |(id, _)| *id);
            }
            if Instant::now() > deadline {
                let tails: String =
                    want.iter().map(|(id, _)| format!("--- server {id}:\n{}\n", self.log_tail(*id))).collect();
                panic!("modes {modes:?}, want {want:?}\n{tails}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every running server's `/zookeeper/config` (after a sync) is `text`; its dynamic file of
    /// `version` exists; the leader counts `voters` voters.
    async fn check_config(&self, text: &str, version: &str, voters: usize) {
        for id in self.running() {
            let c = client(&self.connect_string(&[id])).await;
            op(c.sync("/")).await.unwrap();
            let (data, _) = op(c.get_config()).await.unwrap_or_else(|e| panic!("server {id}: getConfig: {e}"));
            assert_eq!(String::from_utf8(data).unwrap(), text, "server {id}'s /zookeeper/config");
            let cfg = &self.servers[&id].cfg;
            let mut dynamic = cfg.as_os_str().to_os_string();
            dynamic.push(format!(".dynamic.{version}"));
            let written = std::fs::read_to_string(PathBuf::from(&dynamic))
                .unwrap_or_else(|e| panic!("server {id}: {}: {e}", PathBuf::from(&dynamic).display()));
            assert_eq!(format!("{written}\nversion={version}"), text, "server {id}'s dynamic file");
            let static_cfg = std::fs::read_to_string(cfg).unwrap();
            assert!(static_cfg.contains("dynamicConfigFile="), "server {id}: {static_cfg}");
            if mode(self.servers[&id].client).as_deref() == Some("leader") {
                let mntr = four_letters(self.servers[&id].client, "mntr").unwrap();
                assert!(mntr.contains(&format!("zk_quorum_size\t{voters}\n")), "leader {id}: {mntr}");
            }
        }
    }
}

async fn client(connect: &str) -> zk::Client {
    op(zk::Client::connector().with_session_timeout(Duration::from_secs(30)).connect(connect))
        .await
        .unwrap_or_else(|e| panic!("connect to {connect}: {e}"))
}

/// A reconfig through `admin`; the new configuration's text and its version (hex).
async fn reconfig(admin: &zk::Client, joining: &[String], leaving: &[&str]) -> (String, String) {
    let joining: Vec<&str> = joining.iter().map(String::as_str).collect();
    let leaving: Vec<&str> = leaving.to_vec();
    let update =
        EnsembleUpdate::Incremental { joinings: joining.clone().into_iter(), leavings: leaving.clone().into_iter() };
    let (data, _) = tokio::time::timeout(ELECT, admin.update_ensemble(update, None))
        .await
        .expect("reconfig in time")
        .unwrap_or_else(|e| panic!("reconfig +{joining:?} -{leaving:?}: {e}"));
    let text = String::from_utf8(data).unwrap();
    let version = text.lines().last().and_then(|l| l.strip_prefix("version=")).expect("a version line").to_string();
    (text, version)
}

/// A superuser client of server `via` removes `leader` by reconfig (its reply may be lost with
/// the hand-over: ZooKeeper's client sees ConnectionLoss too); then waits until exactly one of
/// `voters` leads and the others follow, and returns the new leader.
async fn remove_leader(c: &Cluster, via: u64, leader: u64, voters: &[u64]) -> u64 {
    let admin = client(&c.connect_string(&[via])).await;
    op(admin.auth("digest", b"super:test")).await.unwrap();
    let gone = leader.to_string();
    let update =
        EnsembleUpdate::Incremental { joinings: Vec::new().into_iter(), leavings: vec![gone.as_str()].into_iter() };
    let answered = tokio::time::timeout(ELECT, admin.update_ensemble(update, None)).await.expect("in time");
    println!("reconfig removing leader {leader} answered {:?}", answered.as_ref().map(|(d, _)| d.len()));
    let deadline = Instant::now() + ELECT;
    loop {
        let modes: Vec<(u64, Option<String>)> = voters.iter().map(|id| (*id, mode(c.servers[id].client))).collect();
        let leaders: Vec<u64> =
            modes.iter().filter(|(_, m)| m.as_deref() == Some("leader")).map(|(id, _)| *id).collect();
        if leaders.len() == 1 && modes.iter().all(|(_, m)| matches!(m.as_deref(), Some("leader" | "follower"))) {
            return leaders[0];
        }
        assert!(Instant::now() < deadline, "no leader after removing {leader}: {modes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes `/load/w-<seq>` through one session until told to stop; the acknowledged paths and
/// the longest gap between two acknowledgements.
struct Writer {
    acked: Arc<Mutex<Vec<String>>>,
    longest_pause: Arc<Mutex<Duration>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(i64, Vec<zk::SessionState>)>,
}

impl Writer {
    fn start(c: zk::Client) -> Writer {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let longest_pause = Arc::new(Mutex::new(Duration::ZERO));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, p, s) = (acked.clone(), longest_pause.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let session = c.session_id().0;
            let mut states = c.state_watcher();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let seen2 = seen.clone();
            let watch = tokio::spawn(async move {
                loop {
                    let st = states.changed().await;
                    seen2.lock().unwrap().push(st);
                    if st.is_terminated() {
                        break;
                    }
                }
            });
            let opts = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
            let mut last = Instant::now();
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) {
                i += 1;
                let data = format!("w{i}");
                match tokio::time::timeout(OP, c.create("/load/w-", data.as_bytes(), &opts)).await {
                    Ok(Ok((_, seq))) => {
                        a.lock().unwrap().push(format!("/load/w-{seq}={data}"));
                        let gap = last.elapsed();
                        last = Instant::now();
                        let mut longest = p.lock().unwrap();
                        *longest = (*longest).max(gap);
                    }
                    // Connection loss during a leader change: the write may or may not have
                    // happened; it is not counted as acknowledged.
                    Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            watch.abort();
            let seen = seen.lock().unwrap().clone();
            (session, seen)
        });
        Writer { acked, longest_pause, stop, task }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_shrink_replace_promote_and_remove_the_leader_under_writes() {
    let mut c = Cluster::new(1..=6);
    for id in 1..=3 {
        c.start(id, &[1, 2, 3]);
    }
    c.wait_modes(&[(1, "follower"), (2, "follower"), (3, "leader")]).await;
    let first = client(&c.connect_string(&[1, 2, 3])).await;
    op(first.create("/load", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all()))).await.unwrap();
    // The writer's session lives through every step: it may move between servers 1 and 3
    // (2 leaves in step 2; 3, the first leader, leaves in step 4 and stays a non-voting follower).
    let writer = Writer::start(client(&c.connect_string(&[1, 3])).await);
    let admin = client(&c.connect_string(&[1])).await;
    op(admin.auth("digest", b"super:test")).await.unwrap();
    let (text0, _) = op(admin.get_config()).await.unwrap();
    let text0 = String::from_utf8(text0).unwrap();
    assert!(text0.ends_with("version=100000000"), "the first leader's NEWLEADER zxid: {text0}");

    // A client of follower 2 watches the configuration (`getConfig` with a watch).
    let watching = client(&c.connect_string(&[2])).await;
    let (seen, _, config_watch) = op(watching.get_and_watch_config()).await.unwrap();
    assert_eq!(String::from_utf8(seen).unwrap(), text0);

    // 1. Grow to five voters and shrink back.
    let t = Instant::now();
    for id in [4, 5] {
        c.start(id, &[1, 2, 3, 4, 5]);
    }
    c.wait_modes(&[(4, "follower"), (5, "follower")]).await;
    let (text, version) = reconfig(&admin, &[c.line(4, "participant"), c.line(5, "participant")], &[]).await;
    for id in 1..=5 {
        assert!(text.contains(&c.line(id, "participant")), "{text}");
    }
    let event = tokio::time::timeout(ELECT, config_watch.changed()).await.expect("the config watch fires");
    assert_eq!((event.event_type, event.path.as_str()), (zk::EventType::NodeDataChanged, "/zookeeper/config"));
    let (seen, _) = op(watching.get_config()).await.unwrap();
    assert_eq!(String::from_utf8(seen).unwrap(), text, "the watcher reads the new configuration");
    c.check_config(&text, &version, 5).await;
    let (text, version) = reconfig(&admin, &[], &["4", "5"]).await;
    assert!(!text.contains("server.4") && !text.contains("server.5"), "{text}");
    c.check_config(&text, &version, 3).await;
    println!("grow to 5 and shrink to 3: {:?}", t.elapsed());

    // 2. Server 6 replaces voter 2.
    let t = Instant::now();
    c.start(6, &[1, 2, 3, 6]);
    c.wait_modes(&[(6, "follower")]).await;
    let (text, version) = reconfig(&admin, &[c.line(6, "participant")], &["2"]).await;
    assert!(text.contains(&c.line(6, "participant")) && !text.contains("server.2="), "{text}");
    c.check_config(&text, &version, 3).await;
    c.kill(2);
    c.kill(5);
    println!("replace voter 2 by 6: {:?}", t.elapsed());

    // 3. Server 4 (following without a vote since step 1) becomes an observer, then a voter.
    let t = Instant::now();
    let (text, version) = reconfig(&admin, &[c.line(4, "observer")], &[]).await;
    c.wait_modes(&[(4, "observer")]).await;
    c.check_config(&text, &version, 3).await;
    let (text, version) = reconfig(&admin, &[c.line(4, "participant")], &[]).await;
    c.wait_modes(&[(4, "follower")]).await;
    c.check_config(&text, &version, 4).await;
    println!("observer 4 promoted: {:?}", t.elapsed());

    // 4. The leader is removed by a reconfig sent to a follower.
    let t = Instant::now();
    let leader = c.wait_modes(&[(3, "leader")]).await;
    assert_eq!(leader, 3);
    let new_leader = remove_leader(&c, 1, 3, &[1, 4, 6]).await;
    let after = client(&c.connect_string(&[new_leader])).await;
    op(after.sync("/")).await.unwrap();
    let (data, _) = op(after.get_config()).await.unwrap();
    let text = String::from_utf8(data).unwrap();
    assert!(!text.contains("server.3="), "server 3 is no longer a member: {text}");
    println!("leader 3 removed, {new_leader} leads: {:?}", t.elapsed());
    c.wait_modes(&[(3, "follower")]).await;
    let log = std::fs::read_to_string(&c.servers[&3].out).unwrap();
    assert!(
        log.contains(&format!("leaving the quorum role for the designated leader leader={new_leader}")),
        "server 3 handed over to {new_leader}: {}",
        c.log_tail(3)
    );

    // The writer went on through all of it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    writer.stop.store(true, Ordering::Relaxed);
    let (session, states) = writer.task.await.unwrap();
    let acked = writer.acked.lock().unwrap().clone();
    let pause = *writer.longest_pause.lock().unwrap();
    assert!(acked.len() > 50, "the writer kept writing: {} acknowledged", acked.len());
    assert!(!states.contains(&zk::SessionState::Expired), "the writer's session expired: {states:?}");
    for id in c.running() {
        let r = client(&c.connect_string(&[id])).await;
        op(r.sync("/")).await.unwrap();
        for entry in &acked {
            let (path, data) = entry.split_once('=').unwrap();
            let (got, _) = op(r.get_data(path)).await.unwrap_or_else(|e| panic!("server {id}: {path}: {e}"));
            assert_eq!(got, data.as_bytes(), "server {id}: {path}");
        }
    }
    println!(
        "writer session {session:#x}: {} writes acknowledged, none lost on servers {:?}; longest pause {pause:?}; states {states:?}",
        acked.len(),
        c.running()
    );
}

/// Writes `n` nodes `/<prefix><i>` through `c`; returns their paths.
async fn write_some(c: &zk::Client, prefix: &str, n: usize) -> Vec<String> {
    let mut paths = Vec::new();
    for i in 0..n {
        let path = format!("/{prefix}{i}");
        op(c.create(&path, path.as_bytes(), &CreateMode::Persistent.with_acls(Acls::anyone_all())))
            .await
            .unwrap_or_else(|e| panic!("create {path}: {e}"));
        paths.push(path);
    }
    paths
}

/// Every path reads back with its own name on server `id` (after a sync).
async fn check_paths(c: &Cluster, id: u64, paths: &[String]) {
    let r = client(&c.connect_string(&[id])).await;
    op(r.sync("/")).await.unwrap();
    for path in paths {
        let (got, _) = op(r.get_data(path)).await.unwrap_or_else(|e| panic!("server {id}: {path}: {e}"));
        assert_eq!(got, path.as_bytes(), "server {id}: {path}");
    }
}

/// A ZooKeeper 3.8 server joins a Warden ensemble: it follows without a vote, a reconfig through
/// a Warden server adds it, every member (ZooKeeper included) reports the new configuration,
/// and the ZooKeeper server serves writes made before and after. Then a reconfig removes a
/// Warden voter, and one sent through the ZooKeeper server removes the Warden leader, which hands
/// over to the voter its COMMITANDACTIVATE designates; the ZooKeeper server goes to that leader
/// (or leads), and the two voters left, one of each, commit writes together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_server_joins_a_warden_ensemble_by_reconfig() {
    let mut c = Cluster::new(1..=4);
    for id in 1..=3 {
        c.start(id, &[1, 2, 3]);
    }
    c.wait_modes(&[(1, "follower"), (2, "follower"), (3, "leader")]).await;
    let w = client(&c.connect_string(&[1])).await;
    let before = write_some(&w, "before", 20).await;
    c.start_kind(4, &[1, 2, 3, 4], Kind::ZooKeeper);
    c.wait_modes(&[(4, "follower")]).await;
    let admin = client(&c.connect_string(&[2])).await;
    op(admin.auth("digest", b"super:test")).await.unwrap();
    let (text, version) = reconfig(&admin, &[c.line(4, "participant")], &[]).await;
    assert!(text.contains(&c.line(4, "participant")), "{text}");
    let after = write_some(&w, "after", 20).await;
    for id in 1..=4 {
        let r = client(&c.connect_string(&[id])).await;
        op(r.sync("/")).await.unwrap();
        let (data, _) = op(r.get_config()).await.unwrap();
        assert_eq!(String::from_utf8(data).unwrap(), text, "server {id}'s /zookeeper/config (version {version})");
        check_paths(&c, id, &before).await;
        check_paths(&c, id, &after).await;
    }
    let (text, _) = reconfig(&admin, &[], &["1"]).await;
    assert!(!text.contains("server.1="), "{text}");
    let new_leader = remove_leader(&c, 4, 3, &[2, 4]).await;
    println!("Warden leader 3 removed; {new_leader} leads");
    c.wait_modes(&[(3, "follower")]).await;
    // Voters {2, 4}: every write needs the ZooKeeper server's ACK and the Warden server's.
    let last = write_some(&client(&c.connect_string(&[2])).await, "last", 5).await;
    for id in 2..=4 {
        check_paths(&c, id, &last).await;
    }
    let log = std::fs::read_to_string(&c.servers[&3].out).unwrap();
    assert!(
        log.contains(&format!("leaving the quorum role for the designated leader leader={new_leader}")),
        "Warden leader 3 handed over: {}",
        c.log_tail(3)
    );
}

/// A Warden server joins an Apache ZooKeeper 3.8 ensemble: it follows a ZooKeeper leader without
/// a vote, takes the leader's configuration from NEWLEADER, is added by a reconfig through a
/// ZooKeeper server (a type-16 txn and COMMITANDACTIVATE from ZooKeeper), reports the new
/// configuration, writes its dynamic config file, and serves and forwards writes. Then a reconfig
/// sent through the Warden server removes the ZooKeeper leader, which hands over to the voter it
/// designates; the Warden server goes to that leader (or leads) and writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warden_server_joins_a_zookeeper_ensemble_by_reconfig() {
    let mut c = Cluster::new(1..=4);
    for id in 1..=3 {
        c.start_kind(id, &[1, 2, 3], Kind::ZooKeeper);
    }
    let deadline = Instant::now() + ELECT;
    loop {
        let modes: Vec<Option<String>> = (1..=3).map(|id| mode(c.servers[&id].client)).collect();
        let leaders = modes.iter().filter(|m| m.as_deref() == Some("leader")).count();
        if leaders == 1 && modes.iter().all(|m| matches!(m.as_deref(), Some("leader" | "follower"))) {
            break;
        }
        assert!(Instant::now() < deadline, "no ZooKeeper quorum: {modes:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let z = client(&c.connect_string(&[1])).await;
    let before = write_some(&z, "before", 20).await;
    c.start(4, &[1, 2, 3, 4]);
    c.wait_modes(&[(4, "follower")]).await;
    let admin = client(&c.connect_string(&[1])).await;
    op(admin.auth("digest", b"super:test")).await.unwrap();
    let (text, version) = reconfig(&admin, &[c.line(4, "participant")], &[]).await;
    assert!(text.contains(&c.line(4, "participant")), "{text}");
    let w = client(&c.connect_string(&[4])).await;
    let through_warden = write_some(&w, "via4-", 20).await;
    for id in 1..=4 {
        let r = client(&c.connect_string(&[id])).await;
        op(r.sync("/")).await.unwrap();
        let (data, _) = op(r.get_config()).await.unwrap();
        assert_eq!(String::from_utf8(data).unwrap(), text, "server {id}'s /zookeeper/config");
        check_paths(&c, id, &before).await;
        check_paths(&c, id, &through_warden).await;
    }
    let mut dynamic = c.servers[&4].cfg.as_os_str().to_os_string();
    dynamic.push(format!(".dynamic.{version}"));
    let written = std::fs::read_to_string(PathBuf::from(dynamic)).expect("Warden's dynamic config file");
    assert!(written.contains(&c.line(4, "participant")), "{written}");

    let zk_leader = (1..=3).find(|id| mode(c.servers[id].client).as_deref() == Some("leader")).expect("a ZK leader");
    let voters: Vec<u64> = (1..=4).filter(|id| *id != zk_leader).collect();
    let new_leader = remove_leader(&c, 4, zk_leader, &voters).await;
    println!("ZooKeeper leader {zk_leader} removed; {new_leader} leads");
    let last = write_some(&client(&c.connect_string(&[4])).await, "last", 10).await;
    for id in voters {
        check_paths(&c, id, &last).await;
        check_paths(&c, id, &before).await;
    }
    let log = std::fs::read_to_string(&c.servers[&4].out).unwrap();
    assert!(
        log.contains(&format!("leaving the quorum role for the designated leader leader={new_leader}")),
        "the Warden server took the ZooKeeper leader's designation: {}",
        c.log_tail(4)
    );
}
