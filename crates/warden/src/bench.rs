//! `warden bench`: load generator for any ZooKeeper-compatible ensemble (Warden or Apache
//! ZooKeeper), over the real client protocol (the `zookeeper-client` crate).
//!
//! N sessions are spread round-robin over the servers (each session talks to one server); each
//! session runs D request loops on its connection, so D requests are in flight per session. A
//! warm-up runs first, then a fixed measured duration. Latency is recorded per operation type in
//! HDR histograms (microseconds). A progress line goes to stderr every second; the final table
//! goes to stdout, and `--json FILE` writes the same figures as JSON.
//!
//! Key space (created before the warm-up): `PREFIX/bNNNNN/kNNNNNNNN`, `--keys` nodes of
//! `--value-size` bytes in buckets of 100. getData, setData and exists pick a key uniformly;
//! getChildren lists a random bucket (up to 100 names). create makes new nodes under a per-loop
//! directory `PREFIX/new/<run>s<session>l<loop>/<n / 10000>/<n % 10000>` (so no parent's child list
//! outgrows jute.maxbuffer); delete removes a node this loop created (when it has none, it first
//! creates one, unmeasured); multi is one transaction of check(key) + setData(key) + create(tmp) +
//! delete(tmp). With `--watches`, reads leave a watch (one per session, node and read type at a
//! time; a fired watch is re-armed by the next read of that node), and fired watches are counted.
//!
//! Operation errors are counted, not fatal. Losing every session is fatal: the run stops with a
//! message once all sessions are expired/closed, or none has been connected for 5 seconds.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use async_io::Timer;
use futures_lite::future;
use hdrhistogram::Histogram;
use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use zookeeper_client as zk;

mod connect;
mod expiry;
mod raw;
mod reconnect;
mod sessions;
mod watches;

/// Keys per bucket directory (and so the size of a getChildren answer).
const BUCKET: usize = 100;
/// Created nodes per sub-directory of a loop's create directory.
const CREATE_DIR: u64 = 10_000;
/// How long every session may be disconnected before the run gives up.
const ALL_LOST_LIMIT: Duration = Duration::from_secs(5);
/// How long in-flight requests may take to finish after the measured window.
const DRAIN_LIMIT: Duration = Duration::from_secs(15);
/// Concurrent requests used to create (and clean up) the key space.
const SETUP_WIDTH: usize = 64;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Servers, `host:port[,host:port...]`. Sessions are spread round-robin; each talks to one server.
    #[arg(long, default_value = "127.0.0.1:2181", value_delimiter = ',')]
    servers: Vec<String>,
    /// Number of client sessions (connections).
    #[arg(long, default_value_t = 8)]
    sessions: usize,
    /// Requests kept in flight per session.
    #[arg(long, default_value_t = 100)]
    depth: usize,
    /// Measured duration (`10s`, `500ms`, `2m`; a bare number is seconds).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Warm-up before measuring (same syntax as --duration).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    /// One of create, setData (set), getData (get), getChildren (children), exists, delete, multi,
    /// sync, syncGet (sync then getData, timed as one), mixed, connect (new connections: see
    /// bench/connect.rs), sessions (idle sessions on raw connections, their memory and, with
    /// --watches, a watch storm: see bench/sessions.rs), expiry (sessions whose clients vanish
    /// at once, and a bystander's write latency meanwhile: see bench/expiry.rs), watches (a
    /// watch per session on each of --keys nodes: memory per watch and the wchs/wchc/wchp
    /// answers: see bench/watches.rs), reconnect (sessions over an ensemble reconnecting after
    /// its leader is killed: see bench/reconnect.rs); or weights such as `get=70,set=30`.
    /// mixed = getData=35,setData=15,exists=15, getChildren=10,create=10,delete=10,multi=5.
    #[arg(long, default_value = "mixed")]
    workload: String,
    /// Bytes of data per node written (setup keys, setData, create, multi).
    #[arg(long, default_value_t = 1024)]
    value_size: usize,
    /// Number of keys in the key space read and updated.
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// Leave watches on reads (getData, exists, getChildren) and count the events.
    #[arg(long)]
    watches: bool,
    /// The sessions workload with --watches: fire this many storms, each session re-arming its
    /// watch between them; the report gives each storm's time and their median.
    #[arg(long, default_value_t = 1)]
    storms: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Root of everything the benchmark creates.
    #[arg(long, default_value = "/warden-bench")]
    prefix: String,
    /// Delete the whole prefix tree at the end.
    #[arg(long)]
    cleanup: bool,
    /// Session timeout requested from the servers.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    session_timeout: Duration,
    /// Connect over TLS, trusting the CA certificates in this PEM file (servers listed without a
    /// scheme become `tcp+tls://host:port`).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Client certificate chain (PEM) to present over TLS; needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Open loop: offer this many requests per second in total, on a fixed schedule, instead of
    /// sending the next request as soon as one completes. Each of the sessions x depth request
    /// loops starts one request every sessions*depth/rate seconds; latency is measured from the
    /// scheduled start, so a server that falls behind shows its queueing in the figures. The
    /// depth bounds the requests in flight per session: give enough for rate x latency.
    #[arg(long)]
    rate: Option<f64>,
    /// The server processes (Warden, or ZooKeeper's JVM) whose RSS the sessions workload reads
    /// (VmRSS, summed), comma-separated PIDs.
    #[arg(long, value_delimiter = ',')]
    server_pid: Vec<u32>,
    /// The reconnect workload sends SIGKILL to this process (the ensemble's leader) after the
    /// warm-up; without it, it waits for a connection to drop.
    #[arg(long)]
    kill_pid: Option<u32>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, "s"),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad duration {s:?} (use e.g. 10s, 500ms, 2m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" | "sec" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?} (ms, s, m, h)")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("bad duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Op {
    Create,
    SetData,
    GetData,
    GetChildren,
    Exists,
    Delete,
    Multi,
    /// sync("/") alone.
    Sync,
    /// sync("/") then getData of a key, timed as one operation: ZooKeeper's way to a read that
    /// sees every write acknowledged before it.
    SyncGet,
}

const ALL_OPS: [Op; 9] =
    [Op::Create, Op::SetData, Op::GetData, Op::GetChildren, Op::Exists, Op::Delete, Op::Multi, Op::Sync, Op::SyncGet];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::SetData => "setData",
            Op::GetData => "getData",
            Op::GetChildren => "getChildren",
            Op::Exists => "exists",
            Op::Delete => "delete",
            Op::Multi => "multi",
            Op::Sync => "sync",
            Op::SyncGet => "syncGet",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "create" => Op::Create,
            "set" | "setdata" => Op::SetData,
            "get" | "getdata" => Op::GetData,
            "children" | "getchildren" | "ls" => Op::GetChildren,
            "exists" => Op::Exists,
            "delete" => Op::Delete,
            "multi" => Op::Multi,
            "sync" => Op::Sync,
            "syncget" | "sync+get" => Op::SyncGet,
            _ => return None,
        })
    }

    fn idx(self) -> usize {
        self as usize
    }
}

/// Parses `--workload` into (op, weight) pairs with positive weights.
fn parse_workload(s: &str) -> anyhow::Result<Vec<(Op, u32)>> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("mixed") {
        return Ok(vec![
            (Op::GetData, 35),
            (Op::SetData, 15),
            (Op::Exists, 15),
            (Op::GetChildren, 10),
            (Op::Create, 10),
            (Op::Delete, 10),
            (Op::Multi, 5),
        ]);
    }
    if let Some(op) = Op::parse(s) {
        return Ok(vec![(op, 1)]);
    }
    let mut out: Vec<(Op, u32)> = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((name, w)) = part.split_once('=') else {
            bail!("bad workload {s:?}: expected an operation name, `mixed`, or weights like get=70,set=30");
        };
        let op = Op::parse(name).with_context(|| format!("unknown operation {name:?} in workload {s:?}"))?;
        let w: u32 = w.trim().parse().with_context(|| format!("bad weight {w:?} in workload {s:?}"))?;
        if w == 0 {
            continue;
        }
        match out.iter_mut().find(|(o, _)| *o == op) {
            Some(e) => e.1 += w,
            None => out.push((op, w)),
        }
    }
    if out.is_empty() {
        bail!("workload {s:?} has no operation with a positive weight");
    }
    Ok(out)
}

pub(crate) fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn bucket_path(prefix: &str, b: usize) -> String {
    format!("{prefix}/b{b:05}")
}

fn key_path(prefix: &str, i: usize) -> String {
    format!("{prefix}/b{:05}/k{i:08}", i / BUCKET)
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

/// Per-loop (and then merged) measurements of the measured window.
struct Stats {
    hist: Vec<Histogram<u64>>,
    errors: Vec<u64>,
    error_kinds: BTreeMap<String, u64>,
    last_done: Option<Instant>,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            hist: ALL_OPS.iter().map(|_| new_histogram()).collect(),
            errors: vec![0; ALL_OPS.len()],
            error_kinds: BTreeMap::new(),
            last_done: None,
        }
    }

    fn merge(&mut self, o: &Stats) {
        for (a, b) in self.hist.iter_mut().zip(&o.hist) {
            a.add(b).expect("same histogram bounds");
        }
        for (a, b) in self.errors.iter_mut().zip(&o.errors) {
            *a += b;
        }
        for (k, v) in &o.error_kinds {
            *self.error_kinds.entry(k.clone()).or_default() += v;
        }
        self.last_done = self.last_done.max(o.last_done);
    }
}

const ST_CONNECTED: u8 = 0;
const ST_DISCONNECTED: u8 = 1;
const ST_TERMINATED: u8 = 2;

struct Ctx {
    prefix: String,
    keys: usize,
    value: Vec<u8>,
    watches: bool,
    ops: Vec<Op>,
    dist: WeightedIndex<u32>,
    run_id: u32,
    measure_start: Instant,
    end: Instant,
    /// Open loop (`--rate`): the schedule's step for each request loop.
    interval: Option<Duration>,
    stop: AtomicBool,
    /// Completed requests, warm-up included (progress line).
    completed: AtomicU64,
    /// Failed requests, warm-up included (progress line).
    failed: AtomicU64,
    watch_events: AtomicU64,
    session_state: Vec<AtomicU8>,
}

/// What a session has a watch on right now: (op index, key or bucket).
type Watched = Arc<Mutex<HashSet<(usize, usize)>>>;

fn is_terminal(e: &zk::Error) -> bool {
    matches!(e, zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed)
}

/// Spawns a task that counts the watch event (not session events) and forgets the watch.
fn track_watch(ctx: &Arc<Ctx>, watched: &Watched, key: (usize, usize), w: zk::OneshotWatcher) {
    let ctx = ctx.clone();
    let watched = watched.clone();
    spawn(async move {
        let ev = w.changed().await;
        if ev.event_type != zk::EventType::Session {
            ctx.watch_events.fetch_add(1, Ordering::Relaxed);
        }
        watched.lock().unwrap().remove(&key);
    })
    .detach();
}

/// Arms a watch for `key` unless the session already has one.
fn want_watch(ctx: &Ctx, watched: &Watched, key: (usize, usize)) -> bool {
    ctx.watches && watched.lock().unwrap().insert(key)
}

struct Loop {
    client: zk::Client,
    ctx: Arc<Ctx>,
    watched: Watched,
    rng: StdRng,
    dir: String,
    counter: u64,
    created: Vec<String>,
    /// Open loop: when this loop's next request is due.
    next_due: Instant,
    /// What the loops of this session measured (one set of histograms per session, not per loop:
    /// a histogram is about 190 KB).
    stats: Arc<Mutex<Stats>>,
}

impl Loop {
    /// When the next request starts: now (closed loop), or its scheduled time (open loop), after
    /// waiting for it if it is still ahead.
    async fn next_start(&mut self) -> Instant {
        let Some(step) = self.ctx.interval else { return Instant::now() };
        let due = self.next_due;
        self.next_due += step;
        if due > Instant::now() {
            Timer::at(due).await;
        }
        due
    }

    async fn run(mut self) {
        if let Err(e) = self.client.create(&self.dir, b"", &persistent()).await {
            if !matches!(e, zk::Error::NodeExists) {
                *self.stats.lock().unwrap().error_kinds.entry(format!("creating loop directory: {e}")).or_default() +=
                    1;
                return;
            }
        }
        loop {
            if self.ctx.stop.load(Ordering::Relaxed) || Instant::now() >= self.ctx.end {
                break;
            }
            let op = self.ctx.ops[self.ctx.dist.sample(&mut self.rng)];
            if op == Op::Delete && self.created.is_empty() {
                // Nothing of ours to delete: make one, unmeasured.
                if let Err(e) = self.create_one().await {
                    if is_terminal(&e) {
                        break;
                    }
                    if matches!(e, zk::Error::ConnectionLoss) {
                        Timer::after(Duration::from_millis(5)).await;
                    }
                    continue;
                }
                if Instant::now() >= self.ctx.end {
                    break;
                }
            }
            let start = self.next_start().await;
            if start >= self.ctx.end {
                break;
            }
            let res = self.one(op).await;
            let done = Instant::now();
            self.ctx.completed.fetch_add(1, Ordering::Relaxed);
            let measured = start >= self.ctx.measure_start;
            if measured {
                self.stats.lock().unwrap().last_done = Some(done);
            }
            match res {
                Ok(()) => {
                    if measured {
                        let us = done.duration_since(start).as_micros().max(1) as u64;
                        self.stats.lock().unwrap().hist[op.idx()].saturating_record(us);
                    }
                }
                Err(e) => {
                    self.ctx.failed.fetch_add(1, Ordering::Relaxed);
                    if measured {
                        let mut stats = self.stats.lock().unwrap();
                        stats.errors[op.idx()] += 1;
                        *stats.error_kinds.entry(format!("{}: {e}", op.name())).or_default() += 1;
                    }
                    if matches!(e, zk::Error::ConnectionLoss) {
                        Timer::after(Duration::from_millis(5)).await;
                    }
                    if is_terminal(&e) {
                        break;
                    }
                }
            }
        }
    }

    /// Creates the next node of this loop; makes its sub-directory first when needed (unmeasured).
    async fn create_one(&mut self) -> Result<(), zk::Error> {
        let n = self.counter;
        let (dir_no, idx) = (n / CREATE_DIR, n % CREATE_DIR);
        if idx == 0 {
            match self.client.create(&format!("{}/{dir_no}", self.dir), b"", &persistent()).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(e),
            }
        }
        let path = format!("{}/{dir_no}/{idx}", self.dir);
        self.client.create(&path, &self.ctx.value, &persistent()).await?;
        self.counter += 1;
        // Only deletes need the paths: a create-only run would otherwise hold every path it made.
        if self.ctx.ops.contains(&Op::Delete) {
            self.created.push(path);
        }
        Ok(())
    }

    async fn one(&mut self, op: Op) -> Result<(), zk::Error> {
        let key = self.rng.gen_range(0..self.ctx.keys);
        match op {
            Op::Create => {
                // The sub-directory create (once per 10000) is inside the measured time; rare enough.
                self.create_one().await
            }
            Op::Delete => {
                let path = self.created.pop().expect("delete has a node to delete");
                match self.client.delete(&path, None).await {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        if !matches!(e, zk::Error::NoNode) {
                            self.created.push(path);
                        }
                        Err(e)
                    }
                }
            }
            Op::SetData => {
                self.client.set_data(&key_path(&self.ctx.prefix, key), &self.ctx.value, None).await?;
                Ok(())
            }
            Op::GetData => {
                let path = key_path(&self.ctx.prefix, key);
                let wkey = (op.idx(), key);
                if want_watch(&self.ctx, &self.watched, wkey) {
                    match self.client.get_and_watch_data(&path).await {
                        Ok((_, _, w)) => track_watch(&self.ctx, &self.watched, wkey, w),
                        Err(e) => {
                            self.watched.lock().unwrap().remove(&wkey);
                            return Err(e);
                        }
                    }
                } else {
                    self.client.get_data(&path).await?;
                }
                Ok(())
            }
            Op::Exists => {
                let path = key_path(&self.ctx.prefix, key);
                let wkey = (op.idx(), key);
                let stat = if want_watch(&self.ctx, &self.watched, wkey) {
                    match self.client.check_and_watch_stat(&path).await {
                        Ok((stat, w)) => {
                            track_watch(&self.ctx, &self.watched, wkey, w);
                            stat
                        }
                        Err(e) => {
                            self.watched.lock().unwrap().remove(&wkey);
                            return Err(e);
                        }
                    }
                } else {
                    self.client.check_stat(&path).await?
                };
                match stat {
                    Some(_) => Ok(()),
                    None => Err(zk::Error::NoNode),
                }
            }
            Op::GetChildren => {
                let b = key / BUCKET;
                let path = bucket_path(&self.ctx.prefix, b);
                let wkey = (op.idx(), b);
                if want_watch(&self.ctx, &self.watched, wkey) {
                    match self.client.get_and_watch_children(&path).await {
                        Ok((_, _, w)) => track_watch(&self.ctx, &self.watched, wkey, w),
                        Err(e) => {
                            self.watched.lock().unwrap().remove(&wkey);
                            return Err(e);
                        }
                    }
                } else {
                    self.client.get_children(&path).await?;
                }
                Ok(())
            }
            Op::Sync => self.client.sync("/").await,
            Op::SyncGet => {
                self.client.sync("/").await?;
                self.client.get_data(&key_path(&self.ctx.prefix, key)).await?;
                Ok(())
            }
            Op::Multi => {
                let path = key_path(&self.ctx.prefix, key);
                let tmp = format!("{}/m", self.dir);
                let mut m = self.client.new_multi_writer();
                m.add_check_version(&path, -1)?;
                m.add_set_data(&path, &self.ctx.value, None)?;
                m.add_create(&tmp, &self.ctx.value, &persistent())?;
                m.add_delete(&tmp, None)?;
                match m.commit().await {
                    Ok(_) => Ok(()),
                    Err(zk::MultiWriteError::OperationFailed { source, .. }) => Err(source),
                    Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
                }
            }
        }
    }
}

/// Runs `f` over `items` with `width` tasks, each on a clone of one of `clients` (round-robin).
/// Returns the first error.
async fn par_each<F, Fut>(clients: &[zk::Client], items: Vec<String>, width: usize, f: F) -> anyhow::Result<()>
where
    F: Fn(zk::Client, String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let width = width.max(1);
    let mut parts: Vec<Vec<String>> = (0..width).map(|_| Vec::new()).collect();
    for (i, it) in items.into_iter().enumerate() {
        parts[i % width].push(it);
    }
    let mut tasks = Vec::new();
    for (t, part) in parts.into_iter().enumerate().filter(|(_, p)| !p.is_empty()) {
        let client = clients[t % clients.len()].clone();
        let f = f.clone();
        tasks.push(spawn(async move {
            for it in part {
                f(client.clone(), it).await?;
            }
            anyhow::Ok(())
        }));
    }
    let mut first = Ok(());
    for task in tasks {
        let r = task.await;
        if first.is_ok() {
            first = r;
        }
    }
    first
}

async fn ensure(client: &zk::Client, path: &str, data: &[u8]) -> anyhow::Result<()> {
    match client.create(path, data, &persistent()).await {
        Ok(_) => Ok(()),
        Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {path}")),
    }
}

/// Creates (or resizes) the key space.
async fn setup(clients: &[zk::Client], prefix: &str, keys: usize, value: &Arc<Vec<u8>>) -> anyhow::Result<()> {
    let c = &clients[0];
    let mut acc = String::new();
    for part in prefix.split('/').filter(|p| !p.is_empty()) {
        acc.push('/');
        acc.push_str(part);
        ensure(c, &acc, b"").await?;
    }
    ensure(c, &format!("{prefix}/new"), b"").await?;
    let buckets: Vec<String> = (0..keys.div_ceil(BUCKET)).map(|b| bucket_path(prefix, b)).collect();
    par_each(clients, buckets, SETUP_WIDTH, |c, p| async move { ensure(&c, &p, b"").await }).await?;
    let key_paths: Vec<String> = (0..keys).map(|i| key_path(prefix, i)).collect();
    let value = value.clone();
    par_each(clients, key_paths, SETUP_WIDTH, move |c, p| {
        let value = value.clone();
        async move {
            match c.create(&p, &value, &persistent()).await {
                Ok(_) => Ok(()),
                Err(zk::Error::NodeExists) => {
                    c.set_data(&p, &value, None).await.with_context(|| format!("setting {p}"))?;
                    Ok(())
                }
                Err(e) => Err(e).with_context(|| format!("creating {p}")),
            }
        }
    })
    .await
}

/// Deletes `root` and everything under it.
async fn delete_tree(clients: &[zk::Client], root: &str) -> anyhow::Result<usize> {
    let mut levels: Vec<Vec<String>> = vec![vec![root.to_string()]];
    loop {
        let parents = levels.last().unwrap().clone();
        let found = Arc::new(Mutex::new(Vec::new()));
        let f2 = found.clone();
        par_each(clients, parents, SETUP_WIDTH, move |c, p| {
            let found = f2.clone();
            async move {
                match c.list_children(&p).await {
                    Ok(children) => {
                        let mut f = found.lock().unwrap();
                        let base = if p == "/" { String::new() } else { p.clone() };
                        f.extend(children.into_iter().map(|ch| format!("{base}/{ch}")));
                        Ok(())
                    }
                    Err(zk::Error::NoNode) => Ok(()),
                    Err(e) => Err(e).with_context(|| format!("listing {p}")),
                }
            }
        })
        .await?;
        let next = std::mem::take(&mut *found.lock().unwrap());
        if next.is_empty() {
            break;
        }
        levels.push(next);
    }
    let mut n = 0;
    for level in levels.into_iter().rev() {
        n += level.len();
        par_each(clients, level, SETUP_WIDTH, |c, p| async move {
            match c.delete(&p, None).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(e) => Err(e).with_context(|| format!("deleting {p}")),
            }
        })
        .await?;
    }
    Ok(n)
}

#[derive(Serialize)]
struct OpReport {
    op: String,
    count: u64,
    ops_per_sec: f64,
    errors: u64,
    mean_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
}

#[derive(Serialize)]
struct ConfigReport {
    servers: Vec<String>,
    sessions: usize,
    depth: usize,
    duration_s: f64,
    warmup_s: f64,
    workload: BTreeMap<String, u32>,
    value_size: usize,
    keys: usize,
    watches: bool,
    prefix: String,
    /// Offered requests per second (open loop), or null for a closed loop.
    rate: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    config: ConfigReport,
    /// Measured seconds: from the end of the warm-up to the last measured completion.
    elapsed_s: f64,
    ops: Vec<OpReport>,
    total: OpReport,
    watch_events: u64,
    errors_by_kind: BTreeMap<String, u64>,
}

fn op_report(name: &str, h: &Histogram<u64>, errors: u64, elapsed: f64) -> OpReport {
    let ms = |us: u64| us as f64 / 1000.0;
    let count = h.len();
    OpReport {
        op: name.to_string(),
        count,
        ops_per_sec: if elapsed > 0.0 { count as f64 / elapsed } else { 0.0 },
        errors,
        mean_ms: if count > 0 { h.mean() / 1000.0 } else { 0.0 },
        p50_ms: ms(h.value_at_quantile(0.5)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
    }
}

fn print_table(r: &Report) {
    println!(
        "{:<12} {:>10} {:>11} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "op", "count", "ops/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "errors"
    );
    for o in r.ops.iter().chain(std::iter::once(&r.total)) {
        println!(
            "{:<12} {:>10} {:>11.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8}",
            o.op, o.count, o.ops_per_sec, o.p50_ms, o.p99_ms, o.p999_ms, o.max_ms, o.errors
        );
    }
    if r.config.watches {
        println!("watch events: {}", r.watch_events);
    }
    for (k, v) in &r.errors_by_kind {
        println!("error x{v}: {k}");
    }
}

#[inline(never)]
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.servers.iter().all(|s| s.trim().is_empty()) {
        bail!("--servers is empty");
    }
    if args.sessions == 0 || args.depth == 0 {
        bail!("--sessions and --depth must be at least 1");
    }
    // zookeeper-client builds its TLS configuration with rustls' process-wide provider.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let tls = tls_config(&args)?;
    if args.workload.trim().eq_ignore_ascii_case("connect") {
        if args.duration.is_zero() {
            bail!("--duration must be positive");
        }
        return block_on(connect::run(args, tls.map(|t| t.1)));
    }
    // The scale workloads speak the protocol themselves (bench/raw.rs), in plaintext.
    let raw = args.workload.trim().to_ascii_lowercase();
    if matches!(raw.as_str(), "sessions" | "expiry" | "watches" | "reconnect") {
        if tls.is_some() {
            bail!("the {raw} workload speaks plaintext only");
        }
        let json = args.json.clone();
        return match raw.as_str() {
            "sessions" => block_on(sessions::run(args, json)),
            "watches" => block_on(watches::run(args, json)),
            "reconnect" => block_on(reconnect::run(args, json)),
            _ => block_on(expiry::run(args, json)),
        };
    }
    let workload = parse_workload(&args.workload)?;
    if args.keys == 0 {
        bail!("--keys must be at least 1");
    }
    if args.duration.is_zero() {
        bail!("--duration must be positive");
    }
    if args.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        bail!("--rate must be a positive number of requests per second");
    }
    let prefix = args.prefix.trim_end_matches('/').to_string();
    if !prefix.starts_with('/') || prefix.len() < 2 {
        bail!("--prefix must be an absolute path other than / (got {:?})", args.prefix);
    }
    block_on(run_async(args, workload, prefix, tls.map(|t| t.0)))
}

/// The TLS client settings from `--tls-ca`/`--tls-cert`/`--tls-key`, for `zookeeper-client` and
/// for the connect workload's own handshakes; `None` without `--tls-ca`.
fn tls_config(args: &BenchArgs) -> anyhow::Result<Option<(zk::TlsOptions, Arc<rustls::ClientConfig>)>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let Some(ca_path) = &args.tls_ca else {
        if args.tls_cert.is_some() {
            bail!("--tls-cert needs --tls-ca");
        }
        return Ok(None);
    };
    let read = |p: &PathBuf| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let ca = read(ca_path)?;
    let mut options = zk::TlsOptions::new().with_pem_ca(&ca).map_err(|e| anyhow::anyhow!("--tls-ca: {e:?}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.context("--tls-ca")?).context("--tls-ca")?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots);
    let config = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let (cert_pem, key_pem) = (read(cert)?, read(key)?);
            options = options
                .with_pem_identity(&cert_pem, &key_pem)
                .map_err(|e| anyhow::anyhow!("--tls-cert/--tls-key: {e:?}"))?;
            let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .context("--tls-cert")?;
            let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).context("--tls-key")?;
            builder.with_client_auth_cert(chain, key).context("--tls-cert does not match --tls-key")?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Some((options, Arc::new(config))))
}

/// `host:port` as a TLS endpoint of the connect string when TLS is on.
fn endpoint(server: &str, tls: bool) -> String {
    if tls && !server.contains("://") {
        format!("tcp+tls://{server}")
    } else {
        server.to_string()
    }
}

/// Runs `f` to completion on [`EXECUTOR`], driven by this thread, with the tasks
/// `zookeeper-client` spawns on the same executor.
pub(crate) fn block_on<T>(f: impl Future<Output = T>) -> T {
    let _scope = spawns_core::enter(&ExecutorSpawn);
    async_io::block_on(EXECUTOR.run(f))
}

/// The bench's executor. The `zookeeper-client` crate's sockets and timers run on `async-io`'s
/// reactor; a task on another runtime (tokio) hears of every reply through the reactor's own thread
/// and a wake-up of its worker, two thread hand-offs per request that a synchronous client pays in
/// full (docs/benchmarks.md, "Where the client's time goes"). So the bench runs every task, the
/// sessions' own included, on one thread that drives the reactor itself (`async_io::block_on`).
static EXECUTOR: async_executor::Executor<'static> = async_executor::Executor::new();

/// Sends the tasks `zookeeper-client` spawns (through `spawns`) to [`EXECUTOR`].
struct ExecutorSpawn;

impl spawns_core::Spawn for ExecutorSpawn {
    fn spawn(&self, task: spawns_core::Task) {
        EXECUTOR.spawn(Box::into_pin(task.future)).detach();
    }
}

/// Runs [`EXECUTOR`] on `n` more threads, for the rest of the process: a workload whose tasks
/// are many and independent (the sessions workload's thousands of connections) is then not
/// bound by one client thread.
fn more_executor_threads(n: usize) {
    for _ in 0..n {
        std::thread::spawn(|| async_io::block_on(EXECUTOR.run(future::pending::<()>())));
    }
}

fn spawn<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> async_executor::Task<T> {
    EXECUTOR.spawn(f)
}

/// Each of `servers` (`host:port`, or `scheme://host:port`) resolved to its first address, with
/// its host as written (brackets of an IPv6 literal removed).
fn resolve_servers(servers: &[String]) -> anyhow::Result<Vec<(std::net::SocketAddr, String)>> {
    use std::net::ToSocketAddrs;
    let mut out = Vec::new();
    for s in servers.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let hostport = s.split_once("://").map_or(s, |(_, rest)| rest);
        let addr = hostport
            .to_socket_addrs()
            .with_context(|| format!("resolving {hostport}"))?
            .next()
            .with_context(|| format!("{hostport} has no address"))?;
        let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h).trim_matches(['[', ']']);
        out.push((addr, host.to_string()));
    }
    Ok(out)
}

/// `f`'s output, or `None` if it takes longer than `limit`.
async fn timeout<T>(limit: Duration, f: impl Future<Output = T>) -> Option<T> {
    future::or(async { Some(f.await) }, async {
        Timer::after(limit).await;
        None
    })
    .await
}

async fn run_async(
    args: BenchArgs,
    workload: Vec<(Op, u32)>,
    prefix: String,
    tls: Option<zk::TlsOptions>,
) -> anyhow::Result<()> {
    let servers: Vec<String> =
        args.servers.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).map(|s| endpoint(s, tls.is_some())).collect();
    // Connect.
    let mut clients = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let server = &servers[i % servers.len()];
        let mut connector = zk::Client::connector();
        if let Some(tls) = &tls {
            connector = connector.with_tls(tls.clone());
        }
        let connect = connector.with_session_timeout(args.session_timeout).with_fail_eagerly().connect(server);
        let client = timeout(Duration::from_secs(15), connect)
            .await
            .ok_or_else(|| anyhow::anyhow!("timed out"))
            .and_then(|r| r.map_err(anyhow::Error::from))
            .with_context(|| format!("session {i}: connecting to {server}"))?;
        clients.push(client);
    }
    eprintln!("bench: {} sessions x {} in flight over {}", args.sessions, args.depth, servers.join(","));

    // Key space.
    let value = Arc::new(vec![b'x'; args.value_size]);
    let t = Instant::now();
    setup(&clients, &prefix, args.keys, &value).await.context("setting up the key space")?;
    eprintln!(
        "bench: key space ready: {} keys of {} bytes under {prefix} ({:.1}s)",
        args.keys,
        args.value_size,
        t.elapsed().as_secs_f64()
    );

    let ops: Vec<Op> = workload.iter().map(|(o, _)| *o).collect();
    let dist = WeightedIndex::new(workload.iter().map(|(_, w)| *w)).context("workload weights")?;
    let now = Instant::now();
    let measure_start = now + args.warmup;
    let ctx = Arc::new(Ctx {
        prefix: prefix.clone(),
        keys: args.keys,
        value: (*value).clone(),
        watches: args.watches,
        ops,
        dist,
        run_id: rand::thread_rng().gen(),
        measure_start,
        end: measure_start + args.duration,
        interval: args.rate.map(|r| Duration::from_secs_f64((args.sessions * args.depth) as f64 / r)),
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        watch_events: AtomicU64::new(0),
        session_state: (0..args.sessions).map(|_| AtomicU8::new(ST_CONNECTED)).collect(),
    });

    // Session state trackers.
    for (i, c) in clients.iter().enumerate() {
        let mut w = c.state_watcher();
        let ctx = ctx.clone();
        spawn(async move {
            loop {
                let st = w.changed().await;
                let v = if st.is_terminated() {
                    ST_TERMINATED
                } else if matches!(st, zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly) {
                    ST_CONNECTED
                } else {
                    ST_DISCONNECTED
                };
                ctx.session_state[i].store(v, Ordering::Relaxed);
                if v == ST_TERMINATED {
                    break;
                }
            }
        })
        .detach();
    }

    // Request loops.
    let mut set = VecDeque::new();
    let mut seeder = StdRng::from_entropy();
    let mut session_stats = Vec::new();
    for (s, c) in clients.iter().enumerate() {
        let watched: Watched = Arc::new(Mutex::new(HashSet::new()));
        let stats = Arc::new(Mutex::new(Stats::new()));
        session_stats.push(stats.clone());
        for l in 0..args.depth {
            // Open loop: spread the loops' schedules evenly over one step.
            let offset = ctx.interval.map_or(Duration::ZERO, |iv| {
                iv.mul_f64((s * args.depth + l) as f64 / (args.sessions * args.depth) as f64)
            });
            let lp = Loop {
                next_due: Instant::now() + offset,
                client: c.clone(),
                ctx: ctx.clone(),
                watched: watched.clone(),
                rng: StdRng::seed_from_u64(seeder.gen()),
                dir: format!("{prefix}/new/{:08x}s{s}l{l}", ctx.run_id),
                counter: 0,
                created: Vec::new(),
                stats: stats.clone(),
            };
            set.push_back(spawn(lp.run()));
        }
    }

    // Progress, fatal-loss detection, and collection.
    let mut total = Stats::new();
    let mut next_tick = Instant::now() + Duration::from_secs(1);
    let mut last_count = 0u64;
    let mut last_t = Instant::now();
    let mut none_connected_since: Option<Instant> = None;
    let mut fatal: Option<String> = None;
    let mut unfinished = 0usize;
    // Loops are awaited in start order, a progress line every second in between.
    enum Wake {
        Finished,
        Tick,
    }
    while let Some(first) = set.front_mut() {
        let wake = future::or(
            async {
                first.await;
                Wake::Finished
            },
            async {
                Timer::at(next_tick).await;
                Wake::Tick
            },
        )
        .await;
        match wake {
            Wake::Finished => {
                set.pop_front();
            }
            Wake::Tick => {
                next_tick = Instant::now() + Duration::from_secs(1);
                let t = Instant::now();
                let c = ctx.completed.load(Ordering::Relaxed);
                let rate = (c - last_count) as f64 / t.duration_since(last_t).as_secs_f64();
                last_count = c;
                last_t = t;
                let phase = if t < ctx.measure_start {
                    format!("warm-up {:>4.0}s/{:.0}s", (t - now).as_secs_f64(), args.warmup.as_secs_f64())
                } else if t < ctx.end {
                    format!(
                        "measure {:>4.0}s/{:.0}s",
                        (t - ctx.measure_start).as_secs_f64(),
                        args.duration.as_secs_f64()
                    )
                } else {
                    "draining".to_string()
                };
                let states: Vec<u8> = ctx.session_state.iter().map(|s| s.load(Ordering::Relaxed)).collect();
                let connected = states.iter().filter(|&&s| s == ST_CONNECTED).count();
                eprintln!(
                    "bench: {phase}  {rate:>9.0} ops/s  errors {}  sessions connected {connected}/{}",
                    ctx.failed.load(Ordering::Relaxed),
                    states.len()
                );
                if fatal.is_none() {
                    if states.iter().all(|&s| s == ST_TERMINATED) {
                        fatal = Some("every session has expired or been closed".to_string());
                    } else if connected == 0 {
                        let since = *none_connected_since.get_or_insert(t);
                        if t.duration_since(since) >= ALL_LOST_LIMIT {
                            fatal = Some(format!("no session has been connected for {}s", ALL_LOST_LIMIT.as_secs()));
                        }
                    } else {
                        none_connected_since = None;
                    }
                    if fatal.is_some() {
                        ctx.stop.store(true, Ordering::Relaxed);
                    }
                }
                if t >= ctx.end + DRAIN_LIMIT {
                    // Dropping the loops that have not finished cancels them.
                    unfinished = set.iter().filter(|t| !t.is_finished()).count();
                    set.clear();
                    break;
                }
            }
        }
    }
    for stats in &session_stats {
        total.merge(&stats.lock().unwrap());
    }
    if let Some(why) = fatal {
        bail!("lost the connection to all servers ({}): {why}; giving up", servers.join(","));
    }

    let elapsed = match total.last_done {
        Some(t) if t > ctx.measure_start => t.duration_since(ctx.measure_start).as_secs_f64(),
        _ => bail!("no request completed in the measured window"),
    };
    let mut all = new_histogram();
    let mut all_errors = 0;
    let mut reports = Vec::new();
    for (op, _) in &workload {
        let h = &total.hist[op.idx()];
        all.add(h).expect("same bounds");
        all_errors += total.errors[op.idx()];
        reports.push(op_report(op.name(), h, total.errors[op.idx()], elapsed));
    }
    let report = Report {
        config: ConfigReport {
            servers: servers.clone(),
            sessions: args.sessions,
            depth: args.depth,
            duration_s: args.duration.as_secs_f64(),
            warmup_s: args.warmup.as_secs_f64(),
            workload: workload.iter().map(|(o, w)| (o.name().to_string(), *w)).collect(),
            value_size: args.value_size,
            keys: args.keys,
            watches: args.watches,
            prefix: prefix.clone(),
            rate: args.rate,
        },
        elapsed_s: elapsed,
        ops: reports,
        total: op_report("total", &all, all_errors, elapsed),
        watch_events: ctx.watch_events.load(Ordering::Relaxed),
        errors_by_kind: total.error_kinds,
    };
    print_table(&report);
    if unfinished > 0 {
        eprintln!(
            "bench: {unfinished} request loops had not finished {}s after the end; abandoned",
            DRAIN_LIMIT.as_secs()
        );
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }

    if args.cleanup {
        let t = Instant::now();
        let n = delete_tree(&clients, &prefix).await.context("cleanup")?;
        eprintln!("bench: cleanup: deleted {n} nodes under {prefix} ({:.1}s)", t.elapsed().as_secs_f64());
    }
    drop(clients);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("3x").is_err());
    }

    #[test]
    fn workloads() {
        assert_eq!(parse_workload("get").unwrap(), vec![(Op::GetData, 1)]);
        assert_eq!(parse_workload("syncget").unwrap(), vec![(Op::SyncGet, 1)]);
        assert_eq!(parse_workload("sync=1,get=3").unwrap(), vec![(Op::Sync, 1), (Op::GetData, 3)]);
        assert_eq!(parse_workload("get=70,set=30").unwrap(), vec![(Op::GetData, 70), (Op::SetData, 30)]);
        assert_eq!(parse_workload("mixed").unwrap().len(), 7);
        assert!(parse_workload("get=0").is_err());
        assert!(parse_workload("frob=1").is_err());
    }

    #[test]
    fn paths() {
        assert_eq!(key_path("/p", 1234), "/p/b00012/k00001234");
        assert_eq!(bucket_path("/p", 12), "/p/b00012");
    }
}
