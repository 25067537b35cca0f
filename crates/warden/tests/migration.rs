//! Live migration of an Apache ZooKeeper 3.8 ensemble to Warden (docs/migration.md): three
//! ZooKeeper 3.8.0 servers (Debian's package, the mixed harness) under client load are replaced
//! one at a time by `warden serve` on the same zoo.cfg, data directory and myid, by
//! `scripts/migrate-from-zookeeper --local`: the followers first, the leader last.
//!
//! The load: a writer (one session, every server in its connect string) alternating sequential
//! creates and compare-and-set setData (paced, at most ~200 a second), recording each acknowledged write with its zxid and the
//! time of its reply; four more sessions (one pinned to each server, one with all three) each
//! holding an ephemeral node and a data watch, their session states recorded.
//!
//! Checked afterwards: every server runs Warden (srvr), the steps went followers first and the
//! leader last; every acknowledged write is on every server with its data and zxid; the acked
//! zxids increase; no session saw Expired, each keeps its id and its ephemeral, answers a request,
//! and its watch, set on ZooKeeper, fires on a write made once every server is Warden. Printed
//! (and bounded): the longest gap between two acknowledged writes, overall and per step.
//!
//! Every process started is killed by its PID when the test ends (also on failure): ZooKeeper by
//! the harness, the Warden servers the script started by the PIDs it wrote.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use zk::{Acls, CreateMode, SessionState};
use zookeeper_client as zk;

mod common;
use common::mixed::{four_letters, op, persistent, Kind, Mixed, OP};

/// Clients' session timeout (the harness's maxSessionTimeout): a session expires only if it stays
/// away from the ensemble this long.
const SESSION: Duration = Duration::from_secs(20);
/// The longest write pause the test accepts: below the session timeout. Most of a pause at the
/// leader's replacement is the client library's back-off (zookeeper-client 0.11 waits 300 ms,
/// doubling, after each round of servers that refused it while they elected), not the election.
const MAX_PAUSE_MS: u64 = 15_000;

/// The writer's pause after each acknowledged write.
const WRITE_PACE: Duration = Duration::from_millis(5);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Kills (SIGKILL, by PID) the Warden servers the script started, from the PID files it wrote.
struct ScriptServers(PathBuf);

impl Drop for ScriptServers {
    fn drop(&mut self) {
        for id in 1..=3 {
            if let Ok(pid) = std::fs::read_to_string(self.0.join(format!("warden-{id}.pid"))) {
                let _ = std::process::Command::new("kill").arg("-9").arg(pid.trim()).status();
            }
        }
    }
}

/// The script, killed by its PID if the test stops before it has finished.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").arg("-9").arg(self.0.to_string()).status();
    }
}

#[derive(Clone, Debug)]
enum Write {
    /// A sequential create: the path the server gave, its data, its czxid.
    Create { path: String, data: Vec<u8>, zxid: i64 },
    /// A setData of /mig/reg: the data, the version and mzxid it made.
    Set { data: Vec<u8>, version: i32, zxid: i64 },
}

struct Ack {
    at_ms: u64,
    write: Write,
}

async fn connect(servers: &str) -> zk::Client {
    op(zk::Client::connector().with_session_timeout(SESSION).connect(servers))
        .await
        .unwrap_or_else(|e| panic!("connect to {servers}: {e}"))
}

/// Writes until `stop`: a sequential create under /mig/seq, then a setData of /mig/reg with the
/// version it knows, and so on; an unanswered setData is resolved by reading /mig/reg back before
/// going on, so the register's every change is known. Returns the acknowledged writes in order.
async fn writer(servers: String, stop: Arc<AtomicBool>) -> Vec<Ack> {
    let c = connect(&servers).await;
    let seq = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    let mut acks = Vec::new();
    let mut version = op(c.get_data("/mig/reg")).await.expect("read /mig/reg").1.version;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let data = format!("w{i}").into_bytes();
        if i.is_multiple_of(2) {
            match tokio::time::timeout(OP, c.create("/mig/seq/n-", &data, &seq)).await {
                Ok(Ok((stat, n))) => acks.push(Ack {
                    at_ms: now_ms(),
                    write: Write::Create { path: format!("/mig/seq/n-{n}"), data, zxid: stat.czxid },
                }),
                Ok(Err(e @ (zk::Error::SessionExpired | zk::Error::ClientClosed))) => {
                    panic!("the writer's session: {e}")
                }
                Ok(Err(_)) | Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            }
        } else {
            loop {
                match tokio::time::timeout(OP, c.set_data("/mig/reg", &data, Some(version))).await {
                    Ok(Ok(stat)) => {
                        version = stat.version;
                        acks.push(Ack { at_ms: now_ms(), write: Write::Set { data, version, zxid: stat.mzxid } });
                        break;
                    }
                    Ok(Err(e @ (zk::Error::SessionExpired | zk::Error::ClientClosed))) => {
                        panic!("the writer's session: {e}")
                    }
                    Ok(Err(e @ zk::Error::BadVersion)) => panic!("the writer is /mig/reg's only writer: {e}"),
                    Ok(Err(_)) | Err(_) => {
                        // Unanswered: applied or not? Read it back (through whichever server).
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let Ok(Ok((got, stat))) = tokio::time::timeout(OP, c.get_data("/mig/reg")).await else {
                            continue;
                        };
                        if stat.version == version + 1 {
                            assert_eq!(got, data, "/mig/reg changed by someone else");
                            version = stat.version;
                            acks.push(Ack { at_ms: now_ms(), write: Write::Set { data, version, zxid: stat.mzxid } });
                            break;
                        }
                        assert_eq!(stat.version, version, "/mig/reg moved on without the writer");
                    }
                }
            }
        }
        i += 1;
        // Paced (at most ~200 writes a second): uncapped, two ZooKeeper servers committed ~750 txns
        // a second, more than a debug-build Warden follower on a busy 2-core machine keeps up
        // with, and the ZooKeeper leader drops a follower that lags syncLimit ticks behind.
        tokio::time::sleep(WRITE_PACE).await;
    }
    acks
}

/// A session holding the ephemeral `/mig/eph/<name>` and a data watch on /mig/watched, with its
/// every session state recorded.
struct Holder {
    name: String,
    client: zk::Client,
    id: i64,
    watch: zk::OneshotWatcher,
    states: Arc<Mutex<Vec<SessionState>>>,
}

async fn holder(name: &str, servers: &str) -> Holder {
    let client = connect(servers).await;
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    op(client.create(&format!("/mig/eph/{name}"), name.as_bytes(), &eph)).await.expect("create the ephemeral");
    let (_, _, watch) = op(client.get_and_watch_data("/mig/watched")).await.expect("watch /mig/watched");
    let states = Arc::new(Mutex::new(Vec::new()));
    let mut watcher = client.state_watcher();
    let record = states.clone();
    tokio::spawn(async move {
        loop {
            let s = watcher.changed().await;
            record.lock().unwrap().push(s);
            if s.is_terminated() {
                return;
            }
        }
    });
    let id = client.session_id().0;
    Holder { name: name.to_owned(), client, id, watch, states }
}

/// `key=value` fields of a line the script printed on stdout.
fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace().filter_map(|f| f.split_once('=')).collect()
}

/// The longest gap between consecutive acks that overlaps [from, to] (ms since the epoch), if any
/// ack came after `from`.
fn longest_gap(acks: &[Ack], from: u64, to: u64) -> u64 {
    acks.windows(2)
        .filter(|w| w[1].at_ms >= from && w[0].at_ms <= to)
        .map(|w| w[1].at_ms - w[0].at_ms)
        .max()
        .unwrap_or(0)
}

/// Every acknowledged write, read through the server at `addr` (after a sync).
async fn check_writes(addr: SocketAddr, what: &str, acks: &[Ack]) {
    let c = connect(&addr.to_string()).await;
    op(c.sync("/")).await.expect("sync");
    let mut last_set = None;
    for a in acks {
        match &a.write {
            Write::Create { path, data, zxid } => {
                let got = op(c.get_data(path)).await.unwrap_or_else(|e| panic!("{what}: lost the acked {path}: {e}"));
                assert_eq!((&got.0, got.1.czxid), (data, *zxid), "{what}: {path}");
            }
            Write::Set { .. } => last_set = Some(&a.write),
        }
    }
    let Some(Write::Set { data, version, zxid }) = last_set else { panic!("no acked setData") };
    let (got, stat) = op(c.get_data("/mig/reg")).await.expect("read /mig/reg");
    assert_eq!((&got, stat.version, stat.mzxid), (data, *version, *zxid), "{what}: /mig/reg is the last acked setData");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zookeeper_ensemble_is_replaced_by_warden_under_load() {
    let t0 = Instant::now();
    let mut e = Mixed::new(&[Kind::ZooKeeper, Kind::ZooKeeper, Kind::ZooKeeper]);
    let run_dir = e.dir.path().join("migration");
    let _servers = ScriptServers(run_dir.clone());
    for id in 1..=3 {
        e.start(id);
    }
    let zk_leader = e.wait_quorum().await;
    let addrs: Vec<SocketAddr> = (1..=3).map(|id| e.member(id).client).collect();
    let all = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    println!("ZooKeeper 3.8 ensemble serving after {:?}, leader server.{zk_leader}", t0.elapsed());

    let setup = connect(&all).await;
    for path in ["/mig", "/mig/seq", "/mig/reg", "/mig/eph", "/mig/watched"] {
        op(setup.create(path, b"", &persistent())).await.unwrap_or_else(|e| panic!("create {path}: {e}"));
    }
    let mut holders = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        holders.push(holder(&format!("pinned{}", i + 1), &a.to_string()).await);
    }
    holders.push(holder("any", &all).await);

    let stop = Arc::new(AtomicBool::new(false));
    let writing = tokio::spawn(writer(all.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The migration, by the script, while the writer writes.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/migrate-from-zookeeper");
    let mut cmd = std::process::Command::new(script);
    cmd.arg("--local")
        .args(["--warden", env!("CARGO_BIN_EXE_warden")])
        .arg("--run-dir")
        .arg(&run_dir)
        .args(["--settle", "2", "--timeout", "60", "--stop-timeout", "20"])
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for id in 1..=3u64 {
        let m = e.member(id);
        let pid = m.child.as_ref().expect("ZooKeeper runs").id();
        cmd.arg("--server").arg(format!("{id}={}", m.client));
        cmd.arg("--zk-pid").arg(format!("{id}={pid}"));
        cmd.arg("--cfg").arg(format!("{id}={}", m.cfg.display()));
    }
    let migration_start = now_ms();
    let child = cmd.spawn().expect("run scripts/migrate-from-zookeeper");
    let script_pid = KillOnDrop(child.id());
    let out = tokio::time::timeout(Duration::from_secs(150), tokio::task::spawn_blocking(|| child.wait_with_output()))
        .await
        .expect("the migration in time")
        .unwrap()
        .expect("the script's output");
    std::mem::forget(script_pid);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("migrate-from-zookeeper said:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "migrate-from-zookeeper failed ({}):\n{stdout}", out.status);
    let migration_end = now_ms();

    // The writer goes on for a while on the all-Warden ensemble.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let acks = writing.await.expect("the writer");

    // Every server is Warden; the steps went followers first, the leader last.
    for (i, a) in addrs.iter().enumerate() {
        let srvr = four_letters(*a, "srvr").unwrap_or_default();
        assert!(srvr.contains("-warden-"), "server.{} is not Warden at the end: {srvr}", i + 1);
    }
    let steps: Vec<BTreeMap<&str, &str>> = stdout.lines().filter(|l| l.starts_with("step=")).map(fields).collect();
    let order: Vec<(&str, &str)> = steps.iter().map(|s| (s["id"], s["was"])).collect();
    assert_eq!(order.len(), 3, "three steps: {stdout}");
    assert_eq!(order[2], (zk_leader.to_string().as_str(), "leader"), "the leader last: {order:?}");
    assert!(order[..2].iter().all(|(_, was)| *was == "follower"), "followers first: {order:?}");
    assert!(stdout.lines().any(|l| l.starts_with("done servers=1,2,3")), "the script finished: {stdout}");

    // The writes: every acked one on every server, zxids increasing, and the pauses.
    assert!(acks.windows(2).all(|w| zxid(&w[0].write) < zxid(&w[1].write)), "acked zxids increase");
    for (i, a) in addrs.iter().enumerate() {
        check_writes(*a, &format!("server.{} (Warden)", i + 1), &acks).await;
    }
    let (creates, sets) = acks.iter().fold((0, 0), |(c, s), a| match a.write {
        Write::Create { .. } => (c + 1, s),
        Write::Set { .. } => (c, s + 1),
    });
    println!("writes acknowledged: {} ({creates} sequential creates, {sets} setData)", acks.len());
    let overall = longest_gap(&acks, migration_start, migration_end);
    println!("longest write pause during the migration: {overall} ms");
    let mut last_ack_before = migration_start;
    for s in &steps {
        let n = |k: &str| s[k].parse::<u64>().unwrap();
        let (stop_ms, synced_ms) = (n("stop_ms"), n("synced_ms"));
        let pause = longest_gap(&acks, stop_ms, synced_ms);
        println!(
            "step {} (server.{}, ZooKeeper {}): stopped in {} ms, Warden serving after {} ms, synced after {} ms; \
             longest write pause {pause} ms; writes acked during the step: {}",
            s["step"],
            s["id"],
            s["was"],
            n("stopped_ms") - stop_ms,
            n("serving_ms") - stop_ms,
            synced_ms - stop_ms,
            acks.iter().filter(|a| (stop_ms..=synced_ms).contains(&a.at_ms)).count(),
        );
        assert!(
            acks.iter().any(|a| (last_ack_before..stop_ms).contains(&a.at_ms)),
            "the writer wrote before step {}",
            s["step"]
        );
        last_ack_before = synced_ms;
    }
    assert!(acks.iter().any(|a| a.at_ms > migration_end), "the writer writes to the all-Warden ensemble");
    assert!(overall < MAX_PAUSE_MS, "longest write pause {overall} ms (at most {MAX_PAUSE_MS} ms)");

    // The sessions: kept, with their ids, ephemerals and watches.
    op(setup.set_data("/mig/watched", b"after", None)).await.expect("set /mig/watched");
    for h in holders {
        let states = h.states.lock().unwrap().clone();
        assert!(!states.contains(&SessionState::Expired), "{}: saw Expired: {states:?}", h.name);
        assert_eq!(h.client.session_id().0, h.id, "{}: the same session", h.name);
        let (data, stat) = op(h.client.get_data(&format!("/mig/eph/{}", h.name)))
            .await
            .unwrap_or_else(|e| panic!("{}: its ephemeral: {e}", h.name));
        assert_eq!((data.as_slice(), stat.ephemeral_owner), (h.name.as_bytes(), h.id), "{}: its ephemeral", h.name);
        let event = op(h.watch.changed()).await;
        assert_eq!(event.event_type, zk::EventType::NodeDataChanged, "{}: its watch", h.name);
        println!(
            "session {} 0x{:x}: kept; states seen {:?}",
            h.name,
            h.id,
            states.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>()
        );
        for a in &addrs {
            let c = connect(&a.to_string()).await;
            op(c.sync("/")).await.expect("sync");
            let stat = op(c.check_stat(&format!("/mig/eph/{}", h.name))).await.expect("exists");
            assert_eq!(stat.map(|s| s.ephemeral_owner), Some(h.id), "{}: its ephemeral on {a}", h.name);
        }
    }
    println!("sessions kept: 5 of 5 (4 holders and the writer); test took {:?}", t0.elapsed());
}

fn zxid(w: &Write) -> i64 {
    match w {
        Write::Create { zxid, .. } | Write::Set { zxid, .. } => *zxid,
    }
}
