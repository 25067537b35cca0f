//! `warden bench --workload reconnect`: a reconnect storm after the leader of an ensemble dies,
//! on raw protocol connections (as the sessions workload: a socket, a small buffer and a task per
//! session, so tens of thousands fit in one process).
//!
//! 1. `--sessions` sessions connect, spread round-robin over `--servers`, `--depth` handshakes in
//!    flight at a time. Each PINGs every third of `--session-timeout` and remembers the highest
//!    zxid a reply header carried (pings' included), its session id and password.
//! 2. After `--warmup`, the bench sends SIGKILL to `--kill-pid` (the leader's PID; without it, it
//!    waits for the first connection to drop, so the leader can be killed by hand).
//! 3. A session whose connection drops reconnects: a ConnectRequest with its session id, password
//!    and last zxid seen, to the next server of `--servers` and on in turn, at most `--depth`
//!    handshakes in flight, 50 to 150 ms apart after a failed attempt, each attempt given the
//!    session timeout divided by the number of servers (the Java client's connect timeout). A
//!    ConnectResponse with a non-zero session id and a positive timeout re-establishes it; session
//!    id 0 or timeout 0 means the ensemble expired it (counted, not retried). A server that is
//!    electing closes the connection or refuses it; that is a failed attempt.
//! 4. The storm is over when no session is down and no connection has dropped for a second; it may
//!    last [`STORM_LIMIT`]. Reported: sessions disconnected after the kill, re-established,
//!    expired, still down at the limit, the time from the kill to the last re-establishment, and
//!    the reconnect time (from a drop to the ConnectResponse that re-established the session; a
//!    session dropped twice counts twice) at p50, p99 and max.
//!    The run fails if any session expired, was not re-established, or none dropped at all.
//!
//! In ZooKeeper (and Warden) the followers drop their clients too while they elect a new leader,
//! so every session reconnects, not only the dead leader's third.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use async_io::Timer;
use futures_lite::AsyncWriteExt;
use rand::Rng;
use serde::Serialize;
use warden_proto::connect::ConnectRequest;
use warden_proto::header::ReplyHeader;
use warden_proto::request::Request;
use warden_proto::{Reader, Record};

use super::raw::Session;
use super::BenchArgs;

const XID_PING: i32 = -2;
/// How long after the kill the sessions may take to come back before the bench gives up.
const STORM_LIMIT: Duration = Duration::from_secs(120);
/// The storm is over once no session is down and no connection dropped for this long.
const QUIET: Duration = Duration::from_secs(1);

/// What the run measured (printed, and written by `--json`).
#[derive(Serialize, Debug, Default)]
struct ReconnectReport {
    servers: Vec<String>,
    sessions: usize,
    established: usize,
    /// Sessions that could not be opened at the start.
    connect_errors: u64,
    /// Seconds from the first dial to the last session established.
    connect_s: f64,
    killed_pid: Option<u32>,
    /// Sessions whose connection dropped after the kill (at least once).
    disconnected: usize,
    /// Of those, sessions connected again at the end.
    reestablished: usize,
    /// Sessions the ensemble answered as expired.
    expired: usize,
    /// Sessions still down when the bench gave up (after `STORM_LIMIT`), or lost to an error.
    not_reestablished: usize,
    /// Connections dropped after the kill (a session may drop more than once).
    drops: u64,
    /// Connections dropped before the kill (should be 0).
    drops_before_kill: u64,
    /// Reconnect attempts, failed ones included.
    attempts: u64,
    /// Failed attempts by what went wrong (`refused`, `closed`, `timed out`, or the error).
    failed_attempts: BTreeMap<String, u64>,
    /// Unexpected failures (bad frames, a different session id in a ConnectResponse, ...).
    errors: u64,
    first_error: Option<String>,
    /// From the kill to the first connection drop seen.
    kill_to_first_drop_ms: Option<f64>,
    /// From the kill to the last session re-established.
    kill_to_last_reconnect_ms: Option<f64>,
    /// Per reconnect: from a connection's drop to the ConnectResponse re-establishing its session.
    reconnect_p50_ms: Option<f64>,
    reconnect_p99_ms: Option<f64>,
    reconnect_max_ms: Option<f64>,
}

/// What the session tasks share with the run.
#[derive(Default)]
struct Shared {
    established: AtomicUsize,
    connect_errors: AtomicU64,
    /// Sessions currently without a connection (dropped, not yet back).
    down: AtomicUsize,
    /// Sessions that dropped after the kill, at least once.
    disconnected: AtomicUsize,
    expired: AtomicUsize,
    /// Sessions given up on an unexpected error while down.
    lost: AtomicUsize,
    /// Connections dropped after the kill, and before it.
    drops: AtomicU64,
    drops_before_kill: AtomicU64,
    attempts: AtomicU64,
    failed_attempts: Mutex<BTreeMap<String, u64>>,
    /// Set at the end of the warm-up when there is no `--kill-pid`: the next drop is the kill.
    armed: AtomicBool,
    /// Set when the leader is killed (or, without `--kill-pid`, at the first drop).
    killed: AtomicBool,
    /// Microseconds since the run's start: the kill, the first and last drop, the last reconnect.
    kill_us: AtomicU64,
    first_drop_us: AtomicU64,
    last_drop_us: AtomicU64,
    last_reconnect_us: AtomicU64,
    /// Per-session reconnect times, microseconds.
    reconnect_us: Mutex<Vec<u64>>,
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

/// One session's identity, kept across connections.
struct Identity {
    session_id: i64,
    passwd: Vec<u8>,
    timeout_ms: i32,
    last_zxid: i64,
    /// Whether its connection dropped after the kill (counted once in `disconnected`).
    dropped_after_kill: bool,
}

/// How a connection ended.
enum End {
    Stop,
    Dropped,
    Failed(String),
}

pub(super) async fn run(args: BenchArgs, json: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    super::more_executor_threads(std::thread::available_parallelism().map_or(1, usize::from).saturating_sub(1));
    let targets: Vec<SocketAddr> = super::resolve_servers(&args.servers)?.into_iter().map(|(a, _)| a).collect();
    if targets.len() < 2 {
        bail!("the reconnect workload needs the ensemble's servers in --servers (at least two)");
    }
    let timeout_ms = i32::try_from(args.session_timeout.as_millis()).context("--session-timeout too large")?;
    if timeout_ms <= 0 {
        bail!("--session-timeout must be positive");
    }
    let mut report = ReconnectReport {
        servers: args.servers.clone(),
        sessions: args.sessions,
        killed_pid: args.kill_pid,
        ..Default::default()
    };
    let shared = Arc::new(Shared::default());
    let start = Instant::now();
    let (gate_tx, gate_rx) = async_channel::bounded::<()>(args.depth.max(1));
    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
    let attempt_limit = Duration::from_millis(timeout_ms as u64 / targets.len() as u64).max(Duration::from_secs(1));
    let targets = Arc::new(targets);
    let mut tasks = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let shared = shared.clone();
        let gate = (gate_tx.clone(), gate_rx.clone());
        let stop = stop_rx.clone();
        let targets = targets.clone();
        tasks.push(super::spawn(async move {
            let mut at = i % targets.len();
            let _ = gate.0.send(()).await;
            let opened = super::timeout(
                attempt_limit,
                Session::handshake(targets[at], &ConnectRequest::new_session(timeout_ms)),
            )
            .await;
            let _ = gate.1.recv().await;
            let (mut session, resp) = match opened {
                Some(Ok((s, r))) if r.session_id != 0 && r.timeout_ms > 0 => (s, r),
                Some(Ok(_)) => return refused(&shared, targets[at], "session refused".into()),
                Some(Err(e)) => return refused(&shared, targets[at], format!("{e:#}")),
                None => return refused(&shared, targets[at], "no ConnectResponse in time".into()),
            };
            shared.established.fetch_add(1, Ordering::Relaxed);
            let mut me = Identity {
                session_id: resp.session_id,
                passwd: resp.passwd,
                timeout_ms: resp.timeout_ms,
                last_zxid: 0,
                dropped_after_kill: false,
            };
            loop {
                match session.keep(&mut me, &stop).await {
                    End::Stop => return,
                    End::Failed(e) => return shared.error(format!("session {:#x}: {e}", me.session_id)),
                    End::Dropped => {}
                }
                let dropped = Instant::now();
                let at_us = start.elapsed().as_micros() as u64;
                shared.down.fetch_add(1, Ordering::Relaxed);
                if shared.armed.load(Ordering::Relaxed) && !shared.killed.swap(true, Ordering::Relaxed) {
                    // Without --kill-pid, the first drop after the warm-up starts the clock.
                    shared.kill_us.store(at_us, Ordering::Relaxed);
                }
                if shared.killed.load(Ordering::Relaxed) {
                    shared.drops.fetch_add(1, Ordering::Relaxed);
                    let _ = shared.first_drop_us.compare_exchange(0, at_us, Ordering::Relaxed, Ordering::Relaxed);
                    shared.last_drop_us.fetch_max(at_us, Ordering::Relaxed);
                    if !me.dropped_after_kill {
                        me.dropped_after_kill = true;
                        shared.disconnected.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    shared.drops_before_kill.fetch_add(1, Ordering::Relaxed);
                }
                match reconnect(&mut me, &mut at, &targets, attempt_limit, &gate, &shared, &stop).await {
                    Reconnected::Yes(s) => {
                        session = s;
                        shared.down.fetch_sub(1, Ordering::Relaxed);
                        let now_us = start.elapsed().as_micros() as u64;
                        shared.last_reconnect_us.fetch_max(now_us, Ordering::Relaxed);
                        shared
                            .reconnect_us
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(dropped.elapsed().as_micros() as u64);
                    }
                    Reconnected::Expired => {
                        shared.down.fetch_sub(1, Ordering::Relaxed);
                        shared.expired.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Reconnected::Failed(e) => {
                        shared.down.fetch_sub(1, Ordering::Relaxed);
                        shared.lost.fetch_add(1, Ordering::Relaxed);
                        return shared.error(format!("session {:#x}: {e}", me.session_id));
                    }
                    Reconnected::Stopped => return,
                }
            }
        }));
    }
    // Every session established (or failed).
    loop {
        let done = shared.established.load(Ordering::Relaxed) + shared.connect_errors.load(Ordering::Relaxed) as usize;
        if done >= args.sessions {
            break;
        }
        Timer::after(Duration::from_millis(5)).await;
    }
    report.established = shared.established.load(Ordering::Relaxed);
    report.connect_errors = shared.connect_errors.load(Ordering::Relaxed);
    report.connect_s = start.elapsed().as_secs_f64();
    eprintln!(
        "bench: {} sessions established in {:.2} s, {} connect errors{}",
        report.established,
        report.connect_s,
        report.connect_errors,
        shared.first_error.lock().unwrap().as_deref().map(|e| format!(" (first: {e})")).unwrap_or_default()
    );
    if report.established == 0 {
        bail!("no session could be established");
    }
    Timer::after(args.warmup).await;
    let drops_before = shared.drops_before_kill.load(Ordering::Relaxed);
    if drops_before > 0 {
        eprintln!("bench: {drops_before} connections dropped before the kill");
    }
    match args.kill_pid {
        Some(pid) => {
            shared.kill_us.store(start.elapsed().as_micros() as u64, Ordering::Relaxed);
            shared.killed.store(true, Ordering::Relaxed);
            let status = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .context("running kill -9")?;
            if !status.success() {
                bail!("kill -9 {pid} failed: {status}");
            }
            eprintln!("bench: sent SIGKILL to {pid}");
        }
        None => {
            eprintln!("bench: waiting for a connection to drop (kill the leader now)");
            shared.armed.store(true, Ordering::Relaxed);
            let deadline = Instant::now() + STORM_LIMIT;
            while !shared.killed.load(Ordering::Relaxed) {
                if Instant::now() > deadline {
                    bail!("no connection dropped within {STORM_LIMIT:?}");
                }
                Timer::after(Duration::from_millis(5)).await;
            }
        }
    }
    let kill_at = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        Timer::after(Duration::from_millis(5)).await;
        let now_us = start.elapsed().as_micros() as u64;
        let last_drop = shared.last_drop_us.load(Ordering::Relaxed);
        let down = shared.down.load(Ordering::Relaxed);
        let quiet = now_us.saturating_sub(last_drop.max(shared.kill_us.load(Ordering::Relaxed)));
        if down == 0 && quiet >= QUIET.as_micros() as u64 {
            break;
        }
        if kill_at.elapsed() > STORM_LIMIT {
            eprintln!("bench: {down} sessions still down {STORM_LIMIT:?} after the kill; giving up");
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            eprintln!(
                "bench: {:.1} s after the kill: {} drops, {down} sessions down, {} expired, {} attempts",
                kill_at.elapsed().as_secs_f64(),
                shared.drops.load(Ordering::Relaxed),
                shared.expired.load(Ordering::Relaxed),
                shared.attempts.load(Ordering::Relaxed)
            );
        }
    }
    let down = shared.down.load(Ordering::Relaxed);
    drop(stop_tx);
    for t in tasks {
        t.await;
    }
    let kill_us = shared.kill_us.load(Ordering::Relaxed);
    report.disconnected = shared.disconnected.load(Ordering::Relaxed);
    report.expired = shared.expired.load(Ordering::Relaxed);
    report.not_reestablished = down + shared.lost.load(Ordering::Relaxed);
    report.reestablished = report.disconnected.saturating_sub(report.expired + report.not_reestablished);
    report.drops = shared.drops.load(Ordering::Relaxed);
    report.drops_before_kill = shared.drops_before_kill.load(Ordering::Relaxed);
    report.attempts = shared.attempts.load(Ordering::Relaxed);
    report.failed_attempts = std::mem::take(&mut *shared.failed_attempts.lock().unwrap_or_else(|p| p.into_inner()));
    report.errors = shared.errors.load(Ordering::Relaxed);
    report.first_error = shared.first_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let ms = |us: u64| us as f64 / 1000.0;
    let first_drop = shared.first_drop_us.load(Ordering::Relaxed);
    if first_drop > 0 {
        report.kill_to_first_drop_ms = Some(ms(first_drop.saturating_sub(kill_us)));
    }
    let last = shared.last_reconnect_us.load(Ordering::Relaxed);
    if last > kill_us {
        report.kill_to_last_reconnect_ms = Some(ms(last - kill_us));
    }
    let mut times = std::mem::take(&mut *shared.reconnect_us.lock().unwrap_or_else(|p| p.into_inner()));
    times.sort_unstable();
    if !times.is_empty() {
        let at = |q: f64| ms(times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1]);
        report.reconnect_p50_ms = Some(at(0.5));
        report.reconnect_p99_ms = Some(at(0.99));
        report.reconnect_max_ms = Some(ms(*times.last().unwrap()));
    }
    print(&report);
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if report.disconnected == 0 {
        bail!("no session was disconnected: was the leader killed?");
    }
    if report.expired > 0 || report.not_reestablished > 0 {
        bail!(
            "{} sessions expired and {} were not re-established (of {} disconnected)",
            report.expired,
            report.not_reestablished,
            report.disconnected
        );
    }
    Ok(())
}

fn refused(shared: &Shared, addr: SocketAddr, what: String) {
    shared.connect_errors.fetch_add(1, Ordering::Relaxed);
    let mut first = shared.first_error.lock().unwrap_or_else(|p| p.into_inner());
    first.get_or_insert(format!("{addr}: {what}"));
}

enum Reconnected {
    Yes(Session),
    Expired,
    Failed(String),
    Stopped,
}

/// Dials the servers in turn from the one after `at` with the session's identity until one
/// re-establishes or expires it; `at` ends on the server that answered.
async fn reconnect(
    me: &mut Identity,
    at: &mut usize,
    targets: &[SocketAddr],
    attempt_limit: Duration,
    gate: &(async_channel::Sender<()>, async_channel::Receiver<()>),
    shared: &Shared,
    stop: &async_channel::Receiver<()>,
) -> Reconnected {
    let req = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: me.last_zxid,
        timeout_ms: me.timeout_ms,
        session_id: me.session_id,
        passwd: me.passwd.clone(),
        read_only: Some(false),
    };
    loop {
        if stop.is_closed() {
            return Reconnected::Stopped;
        }
        *at = (*at + 1) % targets.len();
        let addr = targets[*at];
        shared.attempts.fetch_add(1, Ordering::Relaxed);
        let _ = gate.0.send(()).await;
        let answer = super::timeout(attempt_limit, Session::handshake(addr, &req)).await;
        let _ = gate.1.recv().await;
        let failure = match answer {
            Some(Ok((s, resp))) => {
                if resp.session_id == 0 || resp.timeout_ms <= 0 {
                    return Reconnected::Expired;
                }
                if resp.session_id != me.session_id {
                    let e = format!("{addr} answered a reconnect with session {:#x}", resp.session_id);
                    return Reconnected::Failed(e);
                }
                me.timeout_ms = resp.timeout_ms;
                return Reconnected::Yes(s);
            }
            // Refused, closed (the server is electing), or no answer in time: the next server.
            Some(Err(e)) => {
                let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
                if chain[0] == "connect" {
                    format!("refused ({})", chain.get(1).map_or("", String::as_str))
                } else if chain.iter().any(|c| c.contains("closed by the server")) {
                    "closed".to_string()
                } else {
                    chain.join(": ")
                }
            }
            None => "timed out".to_string(),
        };
        *shared.failed_attempts.lock().unwrap_or_else(|p| p.into_inner()).entry(failure).or_default() += 1;
        let pause = Duration::from_millis(rand::thread_rng().gen_range(50..150));
        Timer::after(pause).await;
    }
}

fn print(r: &ReconnectReport) {
    println!(
        "sessions: {} on {} ({} established in {:.2} s)",
        r.sessions,
        r.servers.join(","),
        r.established,
        r.connect_s
    );
    if let Some(pid) = r.killed_pid {
        println!("killed: pid {pid} (SIGKILL)");
    }
    println!(
        "after the kill: {} disconnected, {} re-established, {} expired, {} not re-established, {} drops, {} attempts, {} errors",
        r.disconnected, r.reestablished, r.expired, r.not_reestablished, r.drops, r.attempts, r.errors
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    println!(
        "time from the kill: first drop {} ms, last re-establishment {} ms",
        f(r.kill_to_first_drop_ms),
        f(r.kill_to_last_reconnect_ms)
    );
    println!(
        "per-session reconnect time: p50 {} ms, p99 {} ms, max {} ms",
        f(r.reconnect_p50_ms),
        f(r.reconnect_p99_ms),
        f(r.reconnect_max_ms)
    );
    for (what, n) in &r.failed_attempts {
        println!("failed attempts: {n} {what}");
    }
    if let Some(e) = &r.first_error {
        println!("first error: {e}");
    }
}

impl Session {
    /// Keeps the session alive on this connection (a PING every third of the timeout; the
    /// highest zxid of any reply header goes to `me.last_zxid`) until it drops or `stop` closes.
    async fn keep(&mut self, me: &mut Identity, stop: &async_channel::Receiver<()>) -> End {
        let ping_every = Duration::from_millis(u64::try_from(me.timeout_ms / 3).unwrap_or(1000).max(100));
        let mut next_ping = Instant::now() + ping_every;
        loop {
            enum Step {
                Read(anyhow::Result<()>),
                Ping,
                Stop,
            }
            let step = futures_lite::future::or(
                futures_lite::future::or(async { Step::Read(self.fill().await) }, async {
                    Timer::at(next_ping).await;
                    Step::Ping
                }),
                async {
                    let _ = stop.recv().await;
                    Step::Stop
                },
            )
            .await;
            match step {
                Step::Stop => return End::Stop,
                Step::Ping => {
                    next_ping = Instant::now() + ping_every;
                    if self.stream.write_all(&Request::Ping.encode_frame(XID_PING)).await.is_err() {
                        return End::Dropped;
                    }
                }
                Step::Read(Err(_)) => return End::Dropped,
                Step::Read(Ok(())) => loop {
                    let frame = match self.take_frame() {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(e) => return End::Failed(format!("{e:#}")),
                    };
                    let Ok(hdr) = ReplyHeader::decode(&mut Reader::new(&frame)) else {
                        return End::Failed("bad reply header".into());
                    };
                    me.last_zxid = me.last_zxid.max(hdr.zxid);
                },
            }
        }
    }
}
