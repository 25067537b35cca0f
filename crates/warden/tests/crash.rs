//! Crash test (issue 3): kill the `warden` binary with SIGKILL at random points under concurrent
//! write load, restart it on the same data directory, many times in a row, and check after every
//! restart that
//!
//! * every acknowledged create is present with the data that was written,
//! * nothing that was present after an earlier restart has disappeared (old rounds are frozen),
//! * the counter node's version is >= every acknowledged setData version (and >= every version a
//!   read returned), and its data is consistent with its version,
//! * every acknowledged sequential name exists, and a new sequential create returns a suffix greater
//!   than every acknowledged one and every existing child (sequence counters never go backwards);
//!   each round's sequential nodes go under their own parent `/seq/rN` (one parent's child list would
//!   outgrow jute.maxbuffer in a long soak), and every parent is probed after every restart,
//! * every node present is one a writer attempted, with exactly the data attempted.
//!
//! Unacknowledged writes may or may not be present.
//!
//! Knobs (environment): `WARDEN_CRASH_ROUNDS` (default 8), `WARDEN_CRASH_SEED` (default: random,
//! always printed), `WARDEN_CRASH_SESSIONS` (writer sessions, default 4), `WARDEN_CRASH_KEEP=1`
//! (keep the data directory even on success; it is always kept on failure). The seed replays the
//! kill delays and the operation mix; thread timing is not replayable. `scripts/crash-soak` runs a
//! long version.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zk::{Acls, CreateMode};
use zookeeper_client as zk;

/// How long the server may take to answer after a (re)start; replay of a long log is included.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// Any single client operation.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Writers must all have stopped this long after the kill.
const WRITER_STOP_DEADLINE: Duration = Duration::from_secs(30);
/// Concurrent operation loops per writer session (pipelined on its connection).
const LOOPS_PER_SESSION: usize = 4;
/// Older rounds' nodes whose data is re-read each verification (presence is always checked in full).
const OLD_DATA_SAMPLE: usize = 256;

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn sequential() -> zk::CreateOptions<'static> {
    CreateMode::PersistentSequential.with_acls(Acls::anyone_all())
}

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        _ => default,
    }
}

mod common;
use common::{free_port, ruok, spawn_warden};

/// The data directory, the server child process, and what to print when something goes wrong.
struct Harness {
    dir: Option<tempfile::TempDir>,
    cfg: PathBuf,
    addr: SocketAddr,
    child: Option<Child>,
    starts: u32,
    keep: bool,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::Builder::new().prefix("warden-crash-").tempdir().expect("temp dir");
        let port = free_port();
        let data = dir.path().join("data");
        let cfg = dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=200\ninitLimit=10\nsyncLimit=5\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 dataDir={}\n4lw.commands.whitelist=*\npreAllocSize=1024\nmaxSessionTimeout=20000\n",
                data.display()
            ),
        )
        .expect("write zoo.cfg");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let keep = env_num("WARDEN_CRASH_KEEP", 0) != 0;
        Harness { dir: Some(dir), cfg, addr, child: None, starts: 0, keep }
    }

    fn root(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    fn stderr_path(&self, n: u32) -> PathBuf {
        self.root().join(format!("server-{n:04}.stderr"))
    }

    /// Spawns `warden serve zoo.cfg`; stderr goes to `server-NNNN.stderr` in the temp dir.
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "a server is already running");
        self.starts += 1;
        let err = std::fs::File::create(self.stderr_path(self.starts)).expect("stderr file");
        self.child = Some(spawn_warden(&self.cfg, err));
    }

    /// Polls `ruok` until the server answers; fails (with diagnostics) if it exits or the deadline passes.
    async fn wait_ready(&mut self) -> Duration {
        let t0 = Instant::now();
        let deadline = t0 + START_DEADLINE;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("try_wait") {
                self.child = None;
                self.fail(&format!("server start #{} exited during start-up with {status}", self.starts));
            }
            let addr = self.addr;
            if tokio::task::spawn_blocking(move || ruok(addr)).await.unwrap() {
                return t0.elapsed();
            }
            if Instant::now() > deadline {
                self.fail(&format!("server start #{} did not answer ruok within {START_DEADLINE:?}", self.starts));
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // poll interval
        }
    }

    /// SIGKILL (`Child::kill` on Unix) and reap.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let status = c.wait().expect("wait for killed server");
            if let Some(code) = status.code() {
                // It exited by itself before the kill landed: that is a finding, not a crash point.
                self.fail(&format!(
                    "server start #{} had already exited with code {code} when it was killed",
                    self.starts
                ));
            }
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit. Returns the exit status text.
    fn terminate(&mut self) -> String {
        let Some(mut c) = self.child.take() else { return "not running".into() };
        let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = c.try_wait().expect("try_wait") {
                return status.to_string();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return "did not exit within 20 s of SIGTERM; killed".into();
            }
            std::thread::sleep(Duration::from_millis(20)); // poll interval
        }
    }

    fn diagnostics(&self) -> String {
        let mut out = String::new();
        let root = self.root();
        out.push_str(&format!("data directory: {}\n", root.display()));
        let v2 = root.join("data").join("version-2");
        out.push_str(&format!("ls -la {}:\n", v2.display()));
        match std::fs::read_dir(&v2) {
            Ok(rd) => {
                let mut rows: Vec<String> = rd
                    .filter_map(|e| e.ok())
                    .map(|e| {
                        let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                        format!("  {:>12}  {}", len, e.file_name().to_string_lossy())
                    })
                    .collect();
                rows.sort();
                for r in rows {
                    out.push_str(&r);
                    out.push('\n');
                }
            }
            Err(e) => out.push_str(&format!("  ({e})\n")),
        }
        for n in self.starts.saturating_sub(1).max(1)..=self.starts {
            let p = self.stderr_path(n);
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            out.push_str(&format!("--- last {} lines of {} ---\n", tail.len(), p.display()));
            for l in tail {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    fn fail(&mut self, what: &str) -> ! {
        self.keep = true;
        panic!("{what}\n{}", self.diagnostics());
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(dir) = self.dir.take() {
            if self.keep || std::thread::panicking() {
                let p = dir.keep();
                eprintln!("crash test: data directory kept at {}", p.display());
            }
        }
    }
}

/// What the writers of one round attempted and what was acknowledged.
#[derive(Default)]
struct RoundLedger {
    /// path -> data of every create attempted (acknowledged or not).
    attempted_nodes: HashMap<String, Vec<u8>>,
    acked_nodes: Vec<String>,
    /// data of every sequential create attempted.
    attempted_seq: HashSet<Vec<u8>>,
    /// suffix -> data of acknowledged sequential creates.
    acked_seq: Vec<(i64, Vec<u8>)>,
    /// Highest version an acknowledged setData on /counter returned.
    counter_acked: i32,
    counter_acks: u64,
    /// Highest /counter version a read returned.
    counter_observed: i32,
    /// Errors other than the expected connection loss, and protocol-level surprises.
    violations: Vec<String>,
    unknown_outcomes: u64,
}

/// Everything acknowledged (or observed) so far, over all rounds.
#[derive(Default)]
struct Truth {
    /// round -> (node name -> data) acknowledged.
    acked_nodes: BTreeMap<u32, BTreeMap<String, Vec<u8>>>,
    /// round -> names present at the first verification after that round (must never shrink or change).
    frozen_children: BTreeMap<u32, BTreeSet<String>>,
    /// Data of every node verified present, by full path (for later sampling).
    present_data: HashMap<String, Vec<u8>>,
    attempted_seq: HashSet<Vec<u8>>,
    /// round -> suffix -> data of acknowledged sequential creates under /seq/r{round}.
    acked_seq: BTreeMap<u32, BTreeMap<i64, Vec<u8>>>,
    /// seq children (full paths) already data-checked.
    seq_checked: HashMap<String, Vec<u8>>,
    /// Highest acknowledged setData version on /counter.
    counter_acked: i32,
    /// Highest /counter version any read returned (under load, or at an earlier verification).
    counter_observed: i32,
}

fn seq_name(n: i64) -> String {
    format!("s-{}", zk_seq_fmt(n))
}

fn zk_seq_fmt(n: i64) -> String {
    if n <= i32::MAX as i64 {
        format!("{n:010}")
    } else {
        format!("{n:019}")
    }
}

fn parse_seq(name: &str) -> Option<i64> {
    name.strip_prefix("s-")?.parse().ok()
}

async fn connect(addr: SocketAddr) -> Result<zk::Client, String> {
    match tokio::time::timeout(
        OP_TIMEOUT,
        zk::Client::connector().with_session_timeout(Duration::from_secs(4)).connect(&addr.to_string()),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("connect: {e}")),
        Err(_) => Err("connect timed out".into()),
    }
}

async fn op<T>(fut: impl std::future::Future<Output = Result<T, zk::Error>>) -> Result<T, zk::Error> {
    match tokio::time::timeout(OP_TIMEOUT, fut).await {
        Ok(r) => r,
        Err(_) => Err(zk::Error::Timeout),
    }
}

/// One operation loop: random creates, sequential creates and versioned counter updates until
/// `stop`, or until the first failure (the server died: the outcome of that request is unknown).
async fn writer_loop(
    client: zk::Client,
    round: u32,
    w: usize,
    l: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<RoundLedger>>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut known_version: i32 = -2; // unknown: read first
    let mut i: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let pick = rng.gen_range(0..10);
        if pick < 5 {
            let name = format!("w{w}-{l}-{i}");
            let path = format!("/data/r{round}/{name}");
            let len = rng.gen_range(8..400);
            let mut data = format!("{round}/{w}/{l}/{i}/{:016x}:", rng.gen::<u64>()).into_bytes();
            while data.len() < len {
                data.push(b'a' + (data.len() % 26) as u8);
            }
            ledger.lock().unwrap().attempted_nodes.insert(name.clone(), data.clone());
            match op(client.create(&path, &data, &persistent())).await {
                Ok(_) => ledger.lock().unwrap().acked_nodes.push(name),
                Err(zk::Error::NodeExists) => {
                    ledger
                        .lock()
                        .unwrap()
                        .violations
                        .push(format!("create {path}: NodeExists for a name never created before"));
                    return;
                }
                Err(e) => return unknown(&ledger, &format!("create {path}"), e),
            }
        } else if pick < 8 {
            let data = format!("seq:{round}:{w}:{l}:{i}").into_bytes();
            ledger.lock().unwrap().attempted_seq.insert(data.clone());
            match op(client.create(&format!("/seq/r{round}/s-"), &data, &sequential())).await {
                Ok((_, seq)) => ledger.lock().unwrap().acked_seq.push((seq.into_i64(), data)),
                Err(e) => return unknown(&ledger, "sequential create", e),
            }
        } else {
            if known_version < 0 {
                match op(client.get_data("/counter")).await {
                    Ok((data, stat)) => {
                        observe_counter(&ledger, &data, stat.version);
                        known_version = stat.version;
                    }
                    Err(e) => return unknown(&ledger, "get_data /counter", e),
                }
                continue;
            }
            let next = known_version + 1;
            match op(client.set_data("/counter", next.to_string().as_bytes(), Some(known_version))).await {
                Ok(stat) => {
                    let mut g = ledger.lock().unwrap();
                    if stat.version != next {
                        g.violations.push(format!(
                            "setData /counter expecting version {known_version} returned version {}",
                            stat.version
                        ));
                    }
                    g.counter_acked = g.counter_acked.max(stat.version);
                    g.counter_acks += 1;
                    known_version = stat.version;
                }
                Err(zk::Error::BadVersion) => known_version = -2,
                Err(e) => return unknown(&ledger, "setData /counter", e),
            }
        }
    }
}

fn observe_counter(ledger: &Mutex<RoundLedger>, data: &[u8], version: i32) {
    let mut g = ledger.lock().unwrap();
    if data != version.to_string().as_bytes() {
        g.violations.push(format!("/counter read: version {version} but data {:?}", String::from_utf8_lossy(data)));
    }
    g.counter_observed = g.counter_observed.max(version);
}

fn unknown(ledger: &Mutex<RoundLedger>, what: &str, e: zk::Error) {
    let mut g = ledger.lock().unwrap();
    g.unknown_outcomes += 1;
    match e {
        // The connection died with the server (a reset surfaces as `Custom` with the I/O error).
        zk::Error::ConnectionLoss
        | zk::Error::Timeout
        | zk::Error::SessionExpired
        | zk::Error::ClientClosed
        | zk::Error::Custom(_) => {}
        other => g.violations.push(format!("{what}: unexpected error {other:?}")),
    }
}

/// Pipelined get_data of many paths.
async fn get_many(c: &zk::Client, paths: Vec<String>) -> Vec<(String, Result<Vec<u8>, zk::Error>)> {
    let mut out = Vec::with_capacity(paths.len());
    for chunk in paths.chunks(512) {
        let futs: Vec<_> = chunk.iter().map(|p| (p.clone(), c.get_data(p))).collect();
        for (p, f) in futs {
            out.push((p, op(f).await.map(|(d, _)| d)));
        }
    }
    out
}

/// Checks everything in `truth` against the restarted server; returns (violations, summary).
async fn verify(c: &zk::Client, truth: &mut Truth, upto_round: u32, rng: &mut StdRng) -> (Vec<String>, String) {
    let mut v = Vec::new();

    // Counter: version never below an acknowledged or observed version; data matches version.
    let counter_version = match op(c.get_data("/counter")).await {
        Ok((data, stat)) => {
            if stat.version < truth.counter_acked {
                v.push(format!(
                    "/counter version {} < acknowledged setData version {}",
                    stat.version, truth.counter_acked
                ));
            }
            if stat.version < truth.counter_observed {
                v.push(format!(
                    "/counter version {} < version {} an earlier read returned",
                    stat.version, truth.counter_observed
                ));
            }
            if data != stat.version.to_string().as_bytes() {
                v.push(format!("/counter version {} has data {:?}", stat.version, String::from_utf8_lossy(&data)));
            }
            truth.counter_observed = truth.counter_observed.max(stat.version);
            stat.version
        }
        Err(e) => {
            v.push(format!("get_data /counter: {e:?}"));
            -1
        }
    };

    // Nodes, round by round.
    let mut acked_total = 0usize;
    let mut sample_pool: Vec<String> = Vec::new();
    for r in 0..=upto_round {
        let parent = format!("/data/r{r}");
        let children: BTreeSet<String> = match op(c.get_children(&parent)).await {
            Ok((names, _)) => names.into_iter().collect(),
            Err(zk::Error::NoNode)
                if !truth.acked_nodes.contains_key(&r) && !truth.frozen_children.contains_key(&r) =>
            {
                continue
            }
            Err(e) => {
                v.push(format!("get_children {parent}: {e:?}"));
                continue;
            }
        };
        if let Some(acked) = truth.acked_nodes.get(&r) {
            acked_total += acked.len();
            for name in acked.keys() {
                if !children.contains(name) {
                    v.push(format!("acknowledged node {parent}/{name} is missing"));
                }
            }
        }
        match truth.frozen_children.get(&r) {
            Some(frozen) => {
                if frozen != &children {
                    let lost: Vec<_> = frozen.difference(&children).take(10).collect();
                    let new: Vec<_> = children.difference(frozen).take(10).collect();
                    v.push(format!("{parent} changed after it was frozen: lost {lost:?}, new {new:?}"));
                }
                sample_pool.extend(children.iter().map(|n| format!("{parent}/{n}")));
            }
            None => {
                // First look at this round: read every node present and compare with what was attempted.
                let attempted = truth.acked_nodes.get(&r).cloned().unwrap_or_default();
                let paths: Vec<String> = children.iter().map(|n| format!("{parent}/{n}")).collect();
                for (p, res) in get_many(c, paths).await {
                    let name = p.rsplit('/').next().unwrap().to_string();
                    match res {
                        Ok(d) => {
                            if let Some(want) = attempted.get(&name) {
                                if &d != want {
                                    v.push(format!(
                                        "{p}: data {:?} != acknowledged {:?}",
                                        String::from_utf8_lossy(&d),
                                        String::from_utf8_lossy(want)
                                    ));
                                }
                            }
                            truth.present_data.insert(p, d);
                        }
                        Err(e) => v.push(format!("get_data {p} (listed): {e:?}")),
                    }
                }
                truth.frozen_children.insert(r, children);
            }
        }
    }

    // Sample older rounds' data.
    let n = sample_pool.len().min(OLD_DATA_SAMPLE);
    let sample: Vec<String> = (0..n).map(|_| sample_pool[rng.gen_range(0..sample_pool.len())].clone()).collect();
    for (p, res) in get_many(c, sample).await {
        match res {
            Ok(d) => {
                if truth.present_data.get(&p) != Some(&d) {
                    v.push(format!("{p}: data changed across restarts"));
                }
            }
            Err(e) => v.push(format!("get_data {p} (sampled): {e:?}")),
        }
    }

    // Sequential nodes: one parent per round (a single parent's child list would outgrow
    // jute.maxbuffer in a long soak). Every parent gets a probe create each verification.
    let mut new_seq = -1i64;
    let mut acked_seq_total = 0usize;
    for r in 0..=upto_round {
        let parent = format!("/seq/r{r}");
        let acked = truth.acked_seq.entry(r).or_default();
        let names: HashSet<String> = match op(c.get_children(&parent)).await {
            Ok((names, _)) => names.into_iter().collect(),
            Err(e) => {
                v.push(format!("get_children {parent}: {e:?}"));
                continue;
            }
        };
        for &n in acked.keys() {
            if !names.contains(&seq_name(n)) {
                v.push(format!("acknowledged sequential node {parent}/{} is missing", seq_name(n)));
            }
        }
        let mut max_existing = -1i64;
        let mut fresh = Vec::new();
        for name in &names {
            match parse_seq(name) {
                Some(n) => max_existing = max_existing.max(n),
                None => v.push(format!("{parent}/{name}: not a sequential name")),
            }
            let p = format!("{parent}/{name}");
            if !truth.seq_checked.contains_key(&p) {
                fresh.push(p);
            }
        }
        for (p, res) in get_many(c, fresh).await {
            let name = p.rsplit('/').next().unwrap().to_string();
            match res {
                Ok(d) => {
                    if let Some(want) = parse_seq(&name).and_then(|n| acked.get(&n)) {
                        if &d != want {
                            v.push(format!(
                                "{p}: data {:?} != acknowledged {:?}",
                                String::from_utf8_lossy(&d),
                                String::from_utf8_lossy(want)
                            ));
                        }
                    } else if !truth.attempted_seq.contains(&d) {
                        v.push(format!("{p}: data {:?} was never written", String::from_utf8_lossy(&d)));
                    }
                    truth.seq_checked.insert(p, d);
                }
                Err(e) => v.push(format!("get_data {p} (listed): {e:?}")),
            }
        }
        let prefix = format!("{parent}/");
        for (p, d) in truth.seq_checked.iter().filter(|(p, _)| p.starts_with(&prefix)) {
            if !names.contains(&p[prefix.len()..]) {
                v.push(format!(
                    "{p} (data {:?}) was present after an earlier restart and is gone",
                    String::from_utf8_lossy(d)
                ));
            }
        }
        let acked_max = acked.keys().next_back().copied().unwrap_or(-1);
        let probe = format!("seq:verify:{upto_round}:{r}").into_bytes();
        truth.attempted_seq.insert(probe.clone());
        match op(c.create(&format!("{parent}/s-"), &probe, &sequential())).await {
            Ok((_, seq)) => {
                let n = seq.into_i64();
                if n <= acked_max {
                    v.push(format!(
                        "sequence of {parent} went backwards: new suffix {n} <= acknowledged suffix {acked_max}"
                    ));
                }
                if n <= max_existing {
                    v.push(format!(
                        "sequence of {parent} went backwards: new suffix {n} <= existing child suffix {max_existing}"
                    ));
                }
                acked.insert(n, probe.clone());
                truth.seq_checked.insert(format!("{parent}/{}", seq_name(n)), probe);
                if r == upto_round {
                    new_seq = n;
                }
            }
            Err(e) => v.push(format!("verification sequential create under {parent}: {e:?}")),
        }
        acked_seq_total += acked.len();
    }

    let summary = format!(
        "verified {acked_total} acked nodes in {} rounds, {acked_seq_total} acked sequential (new suffix {new_seq}), counter version {counter_version} (acked max {})",
        upto_round + 1,
        truth.counter_acked
    );
    (v, summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_restart_keeps_acknowledged_writes() {
    let rounds = env_num("WARDEN_CRASH_ROUNDS", 8) as u32;
    let sessions = env_num("WARDEN_CRASH_SESSIONS", 4).max(1) as usize;
    let seed = match std::env::var("WARDEN_CRASH_SEED") {
        Ok(s) if !s.trim().is_empty() => s.trim().parse().expect("WARDEN_CRASH_SEED is a u64"),
        _ => rand::random::<u64>(),
    };
    eprintln!("crash test: seed {seed} (replay with WARDEN_CRASH_SEED={seed}), {rounds} rounds, {sessions} sessions x {LOOPS_PER_SESSION} loops");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = Harness::new();
    eprintln!("crash test: data directory {}", h.root().display());
    let mut truth = Truth::default();

    h.spawn();
    let t = h.wait_ready().await;
    eprintln!("crash test: first start ready in {t:?}");
    {
        let c = connect(h.addr).await.unwrap_or_else(|e| h.fail(&e));
        for (p, d) in [("/data", &b""[..]), ("/seq", b""), ("/counter", b"0")] {
            if let Err(e) = op(c.create(p, d, &persistent())).await {
                h.fail(&format!("setting up {p}: {e:?}"));
            }
        }
    }

    let mut total_acked = 0u64;
    let mut total_unknown = 0u64;
    for round in 0..rounds {
        // Sometimes crash during start-up / replay too.
        if round > 0 && rng.gen_range(0..8) == 0 {
            h.kill9();
            h.spawn();
            let d = rng.gen_range(0..40);
            tokio::time::sleep(Duration::from_millis(d)).await; // random kill point, not a wait
            let pid = h.child.as_ref().map(|c| c.id());
            h.kill9();
            eprintln!("crash test: round {round}: extra SIGKILL {d} ms after spawn (pid {pid:?})");
            h.spawn();
            h.wait_ready().await;
        }

        let c = connect(h.addr).await.unwrap_or_else(|e| h.fail(&e));
        for parent in [format!("/data/r{round}"), format!("/seq/r{round}")] {
            if let Err(e) = op(c.create(&parent, b"", &persistent())).await {
                h.fail(&format!("creating {parent}: {e:?}"));
            }
        }
        drop(c);

        let ledger = Arc::new(Mutex::new(RoundLedger::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..sessions {
            let client = connect(h.addr).await.unwrap_or_else(|e| h.fail(&e));
            for l in 0..LOOPS_PER_SESSION {
                let s = rng.gen::<u64>();
                tasks.push(tokio::spawn(writer_loop(client.clone(), round, w, l, s, stop.clone(), ledger.clone())));
            }
        }
        let delay = rng.gen_range(50..=500);
        tokio::time::sleep(Duration::from_millis(delay)).await; // the random kill point
        stop.store(true, Ordering::SeqCst);
        h.kill9();
        let deadline = tokio::time::Instant::now() + WRITER_STOP_DEADLINE;
        for t in tasks {
            if tokio::time::timeout_at(deadline, t).await.is_err() {
                h.fail(&format!("round {round}: writers did not stop within {WRITER_STOP_DEADLINE:?} of the kill"));
            }
        }

        let ledger = std::mem::take(&mut *ledger.lock().unwrap());
        if !ledger.violations.is_empty() {
            h.fail(&format!(
                "round {round} (seed {seed}): violations under load:\n  {}",
                ledger.violations.join("\n  ")
            ));
        }
        let acked_here = ledger.acked_nodes.len() + ledger.acked_seq.len() + ledger.counter_acks as usize;
        total_acked += acked_here as u64;
        total_unknown += ledger.unknown_outcomes;
        let mut nodes = BTreeMap::new();
        for name in &ledger.acked_nodes {
            nodes.insert(name.clone(), ledger.attempted_nodes[name].clone());
        }
        let attempted_nodes = ledger.attempted_nodes.len();
        truth.acked_nodes.insert(round, nodes);
        truth.attempted_seq.extend(ledger.attempted_seq.iter().cloned());
        for (n, d) in &ledger.acked_seq {
            if let Some(old) = truth.acked_seq.entry(round).or_default().insert(*n, d.clone()) {
                h.fail(&format!(
                    "round {round} (seed {seed}): sequential suffix {n} acknowledged twice ({:?} and {:?})",
                    String::from_utf8_lossy(&old),
                    String::from_utf8_lossy(d)
                ));
            }
        }
        truth.counter_acked = truth.counter_acked.max(ledger.counter_acked);
        truth.counter_observed = truth.counter_observed.max(ledger.counter_observed);

        h.spawn();
        let ready = h.wait_ready().await;
        let c = connect(h.addr).await.unwrap_or_else(|e| h.fail(&e));
        let (violations, summary) = verify(&c, &mut truth, round, &mut rng).await;
        drop(c);
        eprintln!(
            "crash test: round {round}: killed after {delay} ms; acked {} creates (of {attempted_nodes} attempted), {} sequential, {} setData (max version {}), {} unknown; restart ready in {ready:?}; {summary}",
            ledger.acked_nodes.len(),
            ledger.acked_seq.len(),
            ledger.counter_acks,
            ledger.counter_acked,
            ledger.unknown_outcomes,
        );
        if !violations.is_empty() {
            h.fail(&format!(
                "round {round} (seed {seed}): {} violations after restart:\n  {}",
                violations.len(),
                violations.join("\n  ")
            ));
        }
    }

    // Clean shutdown, then one more restart and verification.
    let status = h.terminate();
    eprintln!("crash test: SIGTERM -> {status}");
    h.spawn();
    h.wait_ready().await;
    let c = connect(h.addr).await.unwrap_or_else(|e| h.fail(&e));
    let (violations, summary) = verify(&c, &mut truth, rounds.saturating_sub(1), &mut rng).await;
    drop(c);
    if !violations.is_empty() {
        h.fail(&format!("after clean restart (seed {seed}): violations:\n  {}", violations.join("\n  ")));
    }
    eprintln!("crash test: after SIGTERM and restart: {summary}");
    let status = h.terminate();
    eprintln!("crash test: done: seed {seed}, {rounds} rounds, {total_acked} acknowledged writes, {total_unknown} unknown outcomes; final SIGTERM -> {status}");
}
