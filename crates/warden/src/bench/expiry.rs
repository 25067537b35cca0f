//! `warden bench --workload expiry`: an expiry storm. Thousands of sessions whose clients vanish
//! at once must all expire (their ephemerals deleted) about one session timeout later, while a
//! bystander's writes keep their latency.
//!
//! 1. `--sessions` raw-protocol sessions connect (round-robin over `--servers`, `--depth`
//!    handshakes in flight), each creates one ephemeral `PREFIX/expiry/e<i>` and keeps its session
//!    alive with PINGs (every third of `--session-timeout`).
//! 2. A bystander session on the first server writes (setData of `PREFIX/probe`, 64 bytes) on a
//!    fixed schedule, every `BYSTANDER_EVERY`; each write's latency is measured from its scheduled
//!    start, so a stall shows in full. Its figures over `--warmup` are the idle latency.
//! 3. Every session's connection is dropped at once, without closeSession ("vanish"): the servers
//!    must expire them. Each server's deadline for a session is at most one timeout after the
//!    vanish (the last PING was at most a third of a timeout before it), rounded up to its tick.
//! 4. A control session counts the ephemerals left (numChildren of `exists`, every 10 ms) until none
//!    is; reported: when the first and the last went, after the vanish and after the latest
//!    possible deadline (vanish + timeout), and the bystander's latency while they went (from the
//!    first removal seen to 500 ms after the last) against its idle latency.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use async_io::Timer;
use hdrhistogram::Histogram;
use serde::Serialize;
use warden_proto::request::{CreateRequest, PathWatch, Request, SetDataRequest};
use warden_proto::{Acl, Reader, Record, Stat};

use super::raw::Session;
use super::BenchArgs;

const XID_SETUP: i32 = 2;
const XID_WRITE: i32 = 3;
const XID_COUNT: i32 = 4;
/// The bystander's write schedule.
const BYSTANDER_EVERY: Duration = Duration::from_millis(5);
/// The bystander's idle window ends this long before the vanish.
const VANISH_MARGIN: Duration = Duration::from_millis(500);
/// How long after the latest possible deadline the bench waits for the last ephemeral.
const EXPIRY_LIMIT: Duration = Duration::from_secs(60);
/// CreateMode EPHEMERAL.
const EPHEMERAL: i32 = 1;

#[derive(Serialize, Debug, Default)]
struct ExpiryReport {
    servers: Vec<String>,
    sessions: usize,
    established: usize,
    connect_errors: u64,
    session_timeout_ms: u64,
    /// Ephemerals that existed when the clients vanished.
    ephemerals: u64,
    /// Ephemerals left when the bench gave up (must be 0).
    left: u64,
    /// From the vanish to the first and to the last ephemeral gone.
    first_gone_ms: f64,
    last_gone_ms: f64,
    /// The last ephemeral gone, after the latest possible deadline (vanish + session timeout).
    last_gone_after_deadline_ms: f64,
    /// The bystander's writes over `--warmup` before the vanish (less `VANISH_MARGIN`).
    idle: Latency,
    /// Its writes scheduled from `VANISH_MARGIN` before the vanish to a second after it: the
    /// servers take every connection's close then.
    at_vanish: Latency,
    /// The bystander's writes scheduled from the first removal seen to 500 ms after the last.
    during_expiry: Latency,
}

#[derive(Serialize, Debug, Default, Clone, Copy)]
struct Latency {
    writes: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

impl Latency {
    fn of(samples: &[(Duration, Duration)], from: Duration, to: Duration) -> Latency {
        let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds");
        for (_, lat) in samples.iter().filter(|(at, _)| *at >= from && *at < to) {
            h.saturating_record(lat.as_micros() as u64);
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            writes: h.len(),
            p50_ms: ms(h.value_at_quantile(0.5)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

pub(super) async fn run(args: BenchArgs, json: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    super::more_executor_threads(std::thread::available_parallelism().map_or(1, usize::from).saturating_sub(1));
    let targets: Vec<SocketAddr> = super::resolve_servers(&args.servers)?.into_iter().map(|(a, _)| a).collect();
    let prefix = args.prefix.trim_end_matches('/').to_string();
    let dir = format!("{prefix}/expiry");
    let probe = format!("{prefix}/probe");
    let timeout_ms = i32::try_from(args.session_timeout.as_millis()).context("--session-timeout too large")?;

    let mut control = Session::connect(targets[0], 30_000).await?;
    control.ensure_nodes(&[&prefix, &dir, &probe]).await?;
    if count(&mut control, &dir).await? != 0 {
        bail!("{dir} already has children: the sessions of an earlier run have not expired yet");
    }

    // 1. The sessions, each with its ephemeral.
    let start = Instant::now();
    let established = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let (gate_tx, gate_rx) = async_channel::bounded::<()>(args.depth.max(1));
    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
    let mut tasks = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let addr = targets[i % targets.len()];
        let (established, errors, first_error) = (established.clone(), errors.clone(), first_error.clone());
        let (gate_tx, gate_rx, stop) = (gate_tx.clone(), gate_rx.clone(), stop_rx.clone());
        let path = format!("{dir}/e{i}");
        tasks.push(super::spawn(async move {
            let _ = gate_tx.send(()).await;
            let session = async {
                let mut s = Session::connect(addr, timeout_ms).await?;
                let req = Request::Create(CreateRequest {
                    path: path.clone(),
                    data: Some(Vec::new()),
                    acl: Acl::open_unsafe(),
                    flags: EPHEMERAL,
                });
                match s.call(XID_SETUP, &req).await? {
                    0 => Ok(s),
                    err => bail!("create {path}: error {err}"),
                }
            }
            .await;
            let _ = gate_rx.recv().await;
            let outcome = match session {
                Ok(s) => {
                    established.fetch_add(1, Ordering::Relaxed);
                    s.keep_alive(timeout_ms, stop).await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                errors.fetch_add(1, Ordering::Relaxed);
                first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(format!("{addr}: {e:#}"));
            }
        }));
    }
    while established.load(Ordering::Relaxed) + (errors.load(Ordering::Relaxed) as usize) < args.sessions {
        Timer::after(Duration::from_millis(5)).await;
    }
    let mut report = ExpiryReport {
        servers: args.servers.clone(),
        sessions: args.sessions,
        established: established.load(Ordering::Relaxed),
        connect_errors: errors.load(Ordering::Relaxed),
        session_timeout_ms: args.session_timeout.as_millis() as u64,
        ..Default::default()
    };
    eprintln!(
        "bench: {} sessions with an ephemeral each in {:.2} s, {} errors{}",
        report.established,
        start.elapsed().as_secs_f64(),
        report.connect_errors,
        first_error.lock().unwrap().as_deref().map(|e| format!(" (first: {e})")).unwrap_or_default()
    );
    if report.established == 0 {
        bail!("no session could be established");
    }

    // 2. The bystander, on its own schedule until told to stop.
    let samples = Arc::new(Mutex::new(Vec::<(Duration, Duration)>::new()));
    let writing = Arc::new(AtomicBool::new(true));
    let bystander = {
        let mut s = Session::connect(targets[0], 30_000).await?;
        let (samples, writing, probe) = (samples.clone(), writing.clone(), probe.clone());
        super::spawn(async move {
            let set = Request::SetData(SetDataRequest { path: probe, data: Some(vec![7u8; 64].into()), version: -1 });
            let mut next = Instant::now();
            while writing.load(Ordering::Relaxed) {
                Timer::at(next).await;
                let err = s.call(XID_WRITE, &set).await?;
                if err != 0 {
                    bail!("bystander setData: error {err}");
                }
                samples.lock().unwrap().push((next - start, next.elapsed()));
                next += BYSTANDER_EVERY;
            }
            Ok(())
        })
    };
    Timer::after(args.warmup).await;

    // 3. Vanish.
    report.ephemerals = count(&mut control, &dir).await?;
    let vanish = start.elapsed();
    drop(stop_tx);
    for t in tasks {
        t.await;
    }
    eprintln!(
        "bench: {} clients vanished (connections dropped in {:.0} ms)",
        report.established,
        (start.elapsed() - vanish).as_secs_f64() * 1000.0
    );

    // 4. Count until none is left.
    let deadline = vanish + args.session_timeout;
    let give_up = deadline + EXPIRY_LIMIT;
    let (mut first_gone, mut last_gone) = (None, None);
    loop {
        let left = count(&mut control, &dir).await?;
        let now = start.elapsed();
        if left < report.ephemerals && first_gone.is_none() {
            first_gone = Some(now);
        }
        if left == 0 {
            last_gone = Some(now);
            break;
        }
        if now > give_up {
            report.left = left;
            break;
        }
        Timer::after(Duration::from_millis(10)).await;
    }
    Timer::after(Duration::from_millis(600)).await;
    writing.store(false, Ordering::Relaxed);
    bystander.await?;

    let samples = samples.lock().unwrap();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // The idle window ends before the vanish: a write in flight then waits for the servers to take
    // thousands of disconnections, which the vanish window shows.
    report.idle = Latency::of(&samples, vanish.saturating_sub(args.warmup), vanish.saturating_sub(VANISH_MARGIN));
    report.at_vanish = Latency::of(&samples, vanish.saturating_sub(VANISH_MARGIN), vanish + Duration::from_secs(1));
    if let (Some(first), Some(last)) = (first_gone, last_gone) {
        report.first_gone_ms = ms(first - vanish);
        report.last_gone_ms = ms(last - vanish);
        report.last_gone_after_deadline_ms = ms(last) - ms(deadline);
        report.during_expiry =
            Latency::of(&samples, first.saturating_sub(Duration::from_millis(10)), last + Duration::from_millis(500));
    }
    print(&report);
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if report.left > 0 {
        bail!("{} ephemerals still there {} s after the latest deadline", report.left, EXPIRY_LIMIT.as_secs());
    }
    Ok(())
}

/// The number of children of `path` (the numChildren of exists' Stat: a count the server keeps,
/// so polling it costs the server nothing that grows with the storm).
async fn count(control: &mut Session, path: &str) -> anyhow::Result<u64> {
    let req = Request::Exists(PathWatch { path: path.into(), watch: false });
    let (hdr, body) = control.call_body(XID_COUNT, &req).await?;
    if hdr.err != 0 {
        bail!("exists {path}: error {}", hdr.err);
    }
    let stat = Stat::decode(&mut Reader::new(&body)).context("exists reply")?;
    u64::try_from(stat.num_children).context("negative child count")
}

fn print(r: &ExpiryReport) {
    println!(
        "expiry storm: {} sessions on {} ({} connect errors), timeout {} ms",
        r.established,
        r.servers.join(","),
        r.connect_errors,
        r.session_timeout_ms
    );
    println!(
        "ephemerals: {} at the vanish, first gone after {:.0} ms, last after {:.0} ms ({:+.0} ms from the latest deadline), {} left",
        r.ephemerals, r.first_gone_ms, r.last_gone_ms, r.last_gone_after_deadline_ms, r.left
    );
    for (name, l) in [("idle", r.idle), ("at the vanish", r.at_vanish), ("during expiry", r.during_expiry)] {
        println!(
            "bystander writes {name}: {} writes, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            l.writes, l.p50_ms, l.p99_ms, l.max_ms
        );
    }
}
