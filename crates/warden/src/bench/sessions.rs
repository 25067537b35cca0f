//! `warden bench --workload sessions`: the cost of many client sessions, and of a watch storm
//! over them, on raw protocol connections (no client library in the way: a session here costs
//! the bench a socket, a small buffer and a task).
//!
//! 1. `--sessions` sessions connect (ConnectRequest, ConnectResponse), spread round-robin over
//!    `--servers`, `--depth` handshakes in flight at a time: the accept rate is sessions per
//!    second from the first dial to the last session established.
//! 2. They stay idle (each PINGs every third of the session timeout) for `--warmup`; the RSS of
//!    every `--server-pid` process is read before step 1 and after this: its growth divided by
//!    the sessions is the memory per idle session (no watch set yet).
//! 3. With `--watches`: every session sets a data watch on one node (`exists` with watch), the
//!    RSS is read again a second later, then one setData changes the node; the storm's time runs
//!    from the setData to the last session's notification, every session must be notified
//!    exactly once, and the servers' RSS is sampled every 10 ms meanwhile (its peak is
//!    reported). With `--storms K`, every session then sets its watch again and the next storm
//!    fires, K times in all: each storm's time is reported, and their median.
//! 4. The sessions then stay for `--duration` (so a server's expiry and pings run at this size)
//!    and close.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use async_io::Timer;
use futures_lite::AsyncWriteExt;
use serde::Serialize;
use warden_proto::header::ReplyHeader;
use warden_proto::request::{PathWatch, Request, SetDataRequest};

use super::raw::{rss_kib, Session};
use warden_proto::{Reader, Record};

use super::BenchArgs;

/// xids the bench uses: the watch-setting `exists`, setup and the storm's setData.
const XID_EXISTS: i32 = 1;
const XID_SETUP: i32 = 2;
const XID_PING: i32 = -2;
const XID_NOTIFICATION: i32 = -1;
/// How long the storm may take before the bench gives up on the sessions not notified.
const STORM_LIMIT: Duration = Duration::from_secs(120);
/// From the last watch set to the RSS read before the storm.
const WATCHED_SETTLE: Duration = Duration::from_secs(1);

/// What the run measured (printed, and written by `--json`).
#[derive(Serialize, Debug, Default)]
struct SessionsReport {
    servers: Vec<String>,
    sessions: usize,
    connect_errors: u64,
    /// Sessions established per second, first dial to last ConnectResponse.
    accept_per_sec: f64,
    rss_before_kib: Option<u64>,
    rss_idle_kib: Option<u64>,
    /// With `--watches`: the RSS once every session has set its watch.
    rss_watched_kib: Option<u64>,
    /// (idle RSS - RSS before) / sessions, before any watch is set.
    rss_per_session_bytes: Option<f64>,
    /// With `--watches`.
    storm: Option<StormReport>,
}

#[derive(Serialize, Debug, Default)]
struct StormReport {
    armed: usize,
    notified: usize,
    /// Sessions that got more than one notification (must be 0).
    duplicates: usize,
    /// From the setData to the last notification, the first storm.
    storm_ms: f64,
    /// Every storm's, in order (`--storms`).
    storms_ms: Vec<f64>,
    /// Their median.
    storm_median_ms: f64,
    rss_peak_kib: Option<u64>,
}

/// What the session tasks share with the run.
#[derive(Default)]
struct Shared {
    established: AtomicUsize,
    armed: AtomicUsize,
    notified: AtomicUsize,
    duplicates: AtomicUsize,
    /// Microseconds since the run's start of the latest notification of the current storm.
    last_notified_us: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Shared {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(what);
    }
}

pub(super) async fn run(args: BenchArgs, json: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    // The sessions are thousands of independent tasks: run them on every CPU, so the storm's
    // time is the server's, not one client thread's.
    super::more_executor_threads(std::thread::available_parallelism().map_or(1, usize::from).saturating_sub(1));
    let targets: Vec<SocketAddr> = super::resolve_servers(&args.servers)?.into_iter().map(|(a, _)| a).collect();
    let prefix = args.prefix.trim_end_matches('/').to_string();
    let storm_path = format!("{prefix}/storm");
    let timeout_ms = i32::try_from(args.session_timeout.as_millis()).context("--session-timeout too large")?;

    // A control session makes the watched node.
    let mut control = Session::connect(targets[0], timeout_ms).await?;
    control.ensure_nodes(&[&prefix, &storm_path]).await?;

    let pids = args.server_pid.clone();
    let mut report = SessionsReport { servers: args.servers.clone(), sessions: args.sessions, ..Default::default() };
    report.rss_before_kib = rss_kib(&pids);
    let shared = Arc::new(Shared::default());
    let start = Instant::now();
    // At most `--depth` handshakes in flight: a slot is a message in this bounded channel.
    let (gate_tx, gate_rx) = async_channel::bounded::<()>(args.depth.max(1));
    let mut tasks = Vec::with_capacity(args.sessions);
    // Dropping the sender ends every session.
    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
    // The storm round: each new value has every session set its watch for that storm (the first
    // after the idle RSS is read).
    let (arm_tx, arm_rx) = tokio::sync::watch::channel(0usize);
    for i in 0..args.sessions {
        let addr = targets[i % targets.len()];
        let shared = shared.clone();
        let (gate_tx, gate_rx) = (gate_tx.clone(), gate_rx.clone());
        let (stop, arm) = (stop_rx.clone(), arm_rx.clone());
        let watch = args.watches.then(|| storm_path.clone());
        tasks.push(super::spawn(async move {
            let _ = gate_tx.send(()).await;
            let session = Session::connect(addr, timeout_ms).await;
            let _ = gate_rx.recv().await;
            match session {
                Ok(s) => {
                    shared.established.fetch_add(1, Ordering::Relaxed);
                    s.idle(watch, arm, timeout_ms, start, &shared, stop).await;
                }
                Err(e) => shared.error(format!("{addr}: {e:#}")),
            }
        }));
    }
    // Every session established (or failed).
    loop {
        let done = shared.established.load(Ordering::Relaxed) + shared.errors.load(Ordering::Relaxed) as usize;
        if done >= args.sessions {
            break;
        }
        Timer::after(Duration::from_millis(5)).await;
    }
    let established = shared.established.load(Ordering::Relaxed);
    report.connect_errors = shared.errors.load(Ordering::Relaxed);
    report.accept_per_sec = established as f64 / start.elapsed().as_secs_f64();
    eprintln!(
        "bench: {established} sessions established in {:.2} s ({:.0}/s), {} errors{}",
        start.elapsed().as_secs_f64(),
        report.accept_per_sec,
        report.connect_errors,
        shared.first_error.lock().unwrap().as_deref().map(|e| format!(" (first: {e})")).unwrap_or_default()
    );
    if established == 0 {
        bail!("no session could be established");
    }
    Timer::after(args.warmup).await;
    report.rss_idle_kib = rss_kib(&pids);
    if let (Some(before), Some(idle)) = (report.rss_before_kib, report.rss_idle_kib) {
        report.rss_per_session_bytes = Some((idle as f64 - before as f64) * 1024.0 / established as f64);
    }

    if args.watches {
        let peak = Arc::new(AtomicU64::new(0));
        let mut storm = StormReport::default();
        for round in 1..=args.storms.max(1) {
            let armed_before = shared.armed.load(Ordering::Relaxed);
            let _ = arm_tx.send(round);
            let deadline = Instant::now() + STORM_LIMIT;
            while shared.armed.load(Ordering::Relaxed) - armed_before < established && Instant::now() < deadline {
                Timer::after(Duration::from_millis(5)).await;
            }
            Timer::after(WATCHED_SETTLE).await;
            let armed = shared.armed.load(Ordering::Relaxed) - armed_before;
            if round == 1 {
                report.rss_watched_kib = rss_kib(&pids);
                peak.store(report.rss_watched_kib.unwrap_or(0), Ordering::Relaxed);
                storm.armed = armed;
            }
            let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let sampler = {
                let (peak, sampling, pids) = (peak.clone(), sampling.clone(), pids.clone());
                super::spawn(async move {
                    while sampling.load(Ordering::Relaxed) {
                        if let Some(kib) = rss_kib(&pids) {
                            peak.fetch_max(kib, Ordering::Relaxed);
                        }
                        Timer::after(Duration::from_millis(10)).await;
                    }
                })
            };
            let notified_before = shared.notified.load(Ordering::Relaxed);
            shared.last_notified_us.store(0, Ordering::Relaxed);
            let fired_at = start.elapsed();
            let set = Request::SetData(SetDataRequest {
                path: storm_path.clone(),
                data: Some(format!("storm {round}").into_bytes().into()),
                version: -1,
            });
            let err = control.call(XID_SETUP, &set).await?;
            if err != 0 {
                bail!("setData {storm_path}: error {err}");
            }
            let deadline = Instant::now() + STORM_LIMIT;
            while shared.notified.load(Ordering::Relaxed) - notified_before < armed && Instant::now() < deadline {
                Timer::after(Duration::from_millis(1)).await;
            }
            // Late duplicates would show within a moment.
            Timer::after(Duration::from_millis(200)).await;
            sampling.store(false, Ordering::Relaxed);
            sampler.await;
            let last = Duration::from_micros(shared.last_notified_us.load(Ordering::Relaxed));
            let ms = last.saturating_sub(fired_at).as_secs_f64() * 1000.0;
            storm.storms_ms.push(ms);
            let notified = shared.notified.load(Ordering::Relaxed) - notified_before;
            if round == 1 {
                storm.storm_ms = ms;
                storm.notified = notified;
            } else {
                // Every storm must notify every session it armed; the report keeps the fewest.
                storm.notified = storm.notified.min(notified);
            }
            if args.storms > 1 {
                eprintln!("bench: storm {round}: {notified} notified in {ms:.1} ms");
            }
        }
        storm.duplicates = shared.duplicates.load(Ordering::Relaxed);
        storm.storm_median_ms = crate::floor::median(storm.storms_ms.clone());
        storm.rss_peak_kib = report.rss_watched_kib.map(|_| peak.load(Ordering::Relaxed));
        report.storm = Some(storm);
    }
    Timer::after(args.duration).await;
    drop(stop_tx);
    for t in tasks {
        t.await;
    }
    print(&report);
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn print(r: &SessionsReport) {
    println!("sessions: {} on {}", r.sessions, r.servers.join(","));
    println!("accept rate: {:.0} sessions/s ({} connect errors)", r.accept_per_sec, r.connect_errors);
    if let (Some(b), Some(i), Some(per)) = (r.rss_before_kib, r.rss_idle_kib, r.rss_per_session_bytes) {
        println!(
            "server RSS: {:.1} MiB before, {:.1} MiB idle: {:.0} bytes per session",
            b as f64 / 1024.0,
            i as f64 / 1024.0,
            per
        );
    }
    if let Some(s) = &r.storm {
        println!(
            "watch storm: {} armed, {} notified, {} duplicates, {:.1} ms from setData to the last notification",
            s.armed, s.notified, s.duplicates, s.storm_ms
        );
        if s.storms_ms.len() > 1 {
            println!("watch storms: {} in all, median {:.1} ms", s.storms_ms.len(), s.storm_median_ms);
        }
        if let Some(w) = r.rss_watched_kib {
            println!("server RSS with a watch per session: {:.1} MiB", w as f64 / 1024.0);
        }
        if let Some(p) = s.rss_peak_kib {
            println!("server RSS peak during the storm: {:.1} MiB", p as f64 / 1024.0);
        }
    }
}

impl Session {
    /// Keeps the session alive until `stop` closes: PINGs every third of the timeout, sets the
    /// watch (when given a path) each time `arm` moves to a new storm round, and counts one
    /// notification per round (any more are duplicates).
    #[allow(clippy::too_many_arguments)]
    async fn idle(
        mut self,
        watch: Option<String>,
        mut arm: tokio::sync::watch::Receiver<usize>,
        timeout_ms: i32,
        start: Instant,
        shared: &Shared,
        stop: async_channel::Receiver<()>,
    ) {
        let ping_every = Duration::from_millis(u64::try_from(timeout_ms / 3).unwrap_or(1000).max(100));
        // The storm round whose watch is set, and the last round notified.
        let (mut armed_round, mut notified_round) = (0, 0);
        let mut next_ping = Instant::now() + ping_every;
        loop {
            enum Step {
                Read(anyhow::Result<()>),
                Ping,
                Arm,
                Stop,
            }
            let watching = watch.is_some();
            let step = futures_lite::future::or(
                futures_lite::future::or(async { Step::Read(self.fill().await) }, async {
                    Timer::at(next_ping).await;
                    Step::Ping
                }),
                futures_lite::future::or(
                    async {
                        let _ = stop.recv().await;
                        Step::Stop
                    },
                    async {
                        if !watching || arm.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                        Step::Arm
                    },
                ),
            )
            .await;
            match step {
                Step::Stop => return,
                Step::Arm => {
                    let round = *arm.borrow_and_update();
                    let Some(path) = watch.clone().filter(|_| round > armed_round) else { continue };
                    armed_round = round;
                    let exists = Request::Exists(PathWatch { path, watch: true });
                    if let Err(e) = self.stream.write_all(&exists.encode_frame(XID_EXISTS)).await {
                        return shared.error(format!("exists: {e}"));
                    }
                }
                Step::Ping => {
                    next_ping = Instant::now() + ping_every;
                    if let Err(e) = self.stream.write_all(&Request::Ping.encode_frame(XID_PING)).await {
                        return shared.error(format!("ping: {e}"));
                    }
                }
                Step::Read(Err(e)) => return shared.error(format!("{e:#}")),
                Step::Read(Ok(())) => loop {
                    let frame = match self.take_frame() {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(e) => return shared.error(format!("{e:#}")),
                    };
                    let Ok(hdr) = ReplyHeader::decode(&mut Reader::new(&frame)) else {
                        return shared.error("bad reply header".into());
                    };
                    match hdr.xid {
                        XID_EXISTS => {
                            shared.armed.fetch_add(1, Ordering::Relaxed);
                        }
                        XID_NOTIFICATION => {
                            if notified_round < armed_round {
                                notified_round = armed_round;
                                let at = start.elapsed().as_micros() as u64;
                                shared.last_notified_us.fetch_max(at, Ordering::Relaxed);
                                shared.notified.fetch_add(1, Ordering::Relaxed);
                            } else {
                                shared.duplicates.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ => {}
                    }
                },
            }
        }
    }
}
