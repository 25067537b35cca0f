//! `warden bench --workload watches`: the memory a server spends per watch, and whether its
//! watch reports (`wchs`, `wchc`, `wchp`) still answer with that many.
//!
//! 1. A control session creates `--keys` nodes `PREFIX/w/n<i>`.
//! 2. `--sessions` raw-protocol sessions connect (round-robin over `--servers`, `--depth`
//!    handshakes in flight) and stay idle; after `--warmup` the RSS of every `--server-pid`
//!    process is read.
//! 3. Every session sets a data watch (`exists` with watch) on every node, its requests
//!    pipelined; after `--warmup` again the RSS is read: its growth divided by the watches is
//!    the memory per watch.
//! 4. Each of `wchs`, `wchc` and `wchp` is sent to the first server on a connection of its own;
//!    reported: the time to the end of its answer and the answer's size.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use async_io::{Async, Timer};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use serde::Serialize;
use warden_proto::header::ReplyHeader;
use warden_proto::request::{CreateRequest, PathWatch, Request};
use warden_proto::{Acl, ErrorCode, Reader, Record};

use super::raw::{rss_kib, Session};
use super::BenchArgs;

const XID_SETUP: i32 = 2;
const XID_EXISTS: i32 = 1;
/// Requests written before their replies are read, while arming and creating.
const PIPELINE: usize = 500;

#[derive(Serialize, Debug, Default)]
struct WatchesReport {
    servers: Vec<String>,
    sessions: usize,
    nodes: usize,
    /// Watches the servers acknowledged (exists replies).
    watches: u64,
    arm_secs: f64,
    rss_sessions_kib: Option<u64>,
    rss_watches_kib: Option<u64>,
    /// (RSS with the watches - RSS before them) / watches.
    rss_per_watch_bytes: Option<f64>,
    commands: Vec<CommandReport>,
}

#[derive(Serialize, Debug)]
struct CommandReport {
    command: String,
    ms: f64,
    bytes: usize,
    lines: usize,
}

pub(super) async fn run(args: BenchArgs, json: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    super::more_executor_threads(std::thread::available_parallelism().map_or(1, usize::from).saturating_sub(1));
    let targets: Vec<SocketAddr> = super::resolve_servers(&args.servers)?.into_iter().map(|(a, _)| a).collect();
    let prefix = args.prefix.trim_end_matches('/').to_string();
    let dir = format!("{prefix}/w");
    let paths: Arc<Vec<String>> = Arc::new((0..args.keys).map(|i| format!("{dir}/n{i}")).collect());
    let timeout_ms = i32::try_from(args.session_timeout.as_millis()).context("--session-timeout too large")?;

    // 1. The nodes.
    let mut control = Session::connect(targets[0], 30_000).await?;
    control.ensure_nodes(&[&prefix, &dir]).await?;
    let creates: Vec<Request> = paths.iter().map(|p| create(p)).collect();
    for (err, path) in pipelined(&mut control, XID_SETUP, &creates).await?.into_iter().zip(paths.iter()) {
        if err != 0 && err != ErrorCode::NodeExists.code() {
            bail!("create {path}: error {err}");
        }
    }

    // 2. The sessions.
    let mut report = WatchesReport {
        servers: args.servers.clone(),
        sessions: args.sessions,
        nodes: args.keys,
        ..Default::default()
    };
    let established = Arc::new(AtomicUsize::new(0));
    let armed = Arc::new(AtomicUsize::new(0));
    let watches = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let (gate_tx, gate_rx) = async_channel::bounded::<()>(args.depth.max(1));
    let (arm_tx, arm_rx) = async_channel::bounded::<()>(1);
    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
    let mut tasks = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        let addr = targets[i % targets.len()];
        let (established, armed, watches) = (established.clone(), armed.clone(), watches.clone());
        let (errors, first_error, paths) = (errors.clone(), first_error.clone(), paths.clone());
        let (gate_tx, gate_rx, arm, stop) = (gate_tx.clone(), gate_rx.clone(), arm_rx.clone(), stop_rx.clone());
        tasks.push(super::spawn(async move {
            let _ = gate_tx.send(()).await;
            let session = Session::connect(addr, timeout_ms).await;
            let _ = gate_rx.recv().await;
            let outcome = async {
                let mut s = session?;
                established.fetch_add(1, Ordering::Relaxed);
                // Idle until the sessions' RSS is read.
                let _ = arm.recv().await;
                let exists: Vec<Request> =
                    paths.iter().map(|p| Request::Exists(PathWatch { path: p.clone(), watch: true })).collect();
                let codes = pipelined(&mut s, XID_EXISTS, &exists).await?;
                // exists answers NoNode for a missing node and leaves a watch all the same.
                let ok = codes.iter().filter(|&&e| e == 0 || e == ErrorCode::NoNode.code()).count();
                watches.fetch_add(ok as u64, Ordering::Relaxed);
                armed.fetch_add(1, Ordering::Relaxed);
                s.keep_alive(timeout_ms, stop).await
            }
            .await;
            if let Err(e) = outcome {
                errors.fetch_add(1, Ordering::Relaxed);
                first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(format!("{addr}: {e:#}"));
            }
        }));
    }
    while established.load(Ordering::Relaxed) + errors.load(Ordering::Relaxed) < args.sessions {
        Timer::after(Duration::from_millis(5)).await;
    }
    let up = established.load(Ordering::Relaxed);
    eprintln!("bench: {up} sessions established, {} errors", errors.load(Ordering::Relaxed));
    if up == 0 {
        bail!("no session could be established: {:?}", first_error.lock().unwrap());
    }
    Timer::after(args.warmup).await;
    report.rss_sessions_kib = rss_kib(&args.server_pid);

    // 3. The watches.
    let start = Instant::now();
    drop(arm_tx);
    while armed.load(Ordering::Relaxed) + errors.load(Ordering::Relaxed) < args.sessions {
        Timer::after(Duration::from_millis(5)).await;
    }
    report.arm_secs = start.elapsed().as_secs_f64();
    report.watches = watches.load(Ordering::Relaxed);
    eprintln!("bench: {} watches set in {:.2} s", report.watches, report.arm_secs);
    Timer::after(args.warmup).await;
    report.rss_watches_kib = rss_kib(&args.server_pid);
    if let (Some(before), Some(after)) = (report.rss_sessions_kib, report.rss_watches_kib) {
        if report.watches > 0 {
            report.rss_per_watch_bytes = Some((after as f64 - before as f64) * 1024.0 / report.watches as f64);
        }
    }

    // 4. The reports.
    for cmd in ["wchs", "wchc", "wchp"] {
        let t = Instant::now();
        let answer = four_letter(targets[0], cmd).await?;
        report.commands.push(CommandReport {
            command: cmd.into(),
            ms: t.elapsed().as_secs_f64() * 1000.0,
            bytes: answer.len(),
            lines: answer.iter().filter(|&&b| b == b'\n').count(),
        });
    }

    drop(stop_tx);
    for t in tasks {
        t.await;
    }
    let failed = errors.load(Ordering::Relaxed);
    print(&report);
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if failed > 0 {
        bail!("{failed} sessions failed (first: {:?})", first_error.lock().unwrap());
    }
    Ok(())
}

fn create(path: &str) -> Request {
    Request::Create(CreateRequest { path: path.into(), data: Some(Vec::new()), acl: Acl::open_unsafe(), flags: 0 })
}

/// Sends `reqs` (all with `xid`), at most `PIPELINE` ahead of their replies; their error codes,
/// in order (a server answers a session's requests in order).
async fn pipelined(s: &mut Session, xid: i32, reqs: &[Request]) -> anyhow::Result<Vec<i32>> {
    let mut codes = Vec::with_capacity(reqs.len());
    for chunk in reqs.chunks(PIPELINE) {
        let mut frames = Vec::new();
        for r in chunk {
            frames.extend_from_slice(&r.encode_frame(xid));
        }
        s.stream.write_all(&frames).await?;
        let done = codes.len() + chunk.len();
        while codes.len() < done {
            let frame = s.next_frame().await?;
            let hdr = ReplyHeader::decode(&mut Reader::new(&frame))?;
            if hdr.xid == xid {
                codes.push(hdr.err);
            }
        }
    }
    Ok(codes)
}

/// A four-letter command's whole answer (the server closes the connection after it).
async fn four_letter(addr: SocketAddr, cmd: &str) -> anyhow::Result<Vec<u8>> {
    let mut stream = Async::<TcpStream>::connect(addr).await.with_context(|| format!("{cmd}: connect"))?;
    stream.write_all(cmd.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.with_context(|| format!("{cmd}: read"))?;
    Ok(answer)
}

fn print(r: &WatchesReport) {
    println!(
        "watches: {} sessions x {} nodes on {}: {} watches set in {:.2} s",
        r.sessions,
        r.nodes,
        r.servers.join(","),
        r.watches,
        r.arm_secs
    );
    if let (Some(b), Some(a), Some(per)) = (r.rss_sessions_kib, r.rss_watches_kib, r.rss_per_watch_bytes) {
        println!(
            "server RSS: {:.1} MiB with the sessions, {:.1} MiB with the watches: {per:.0} bytes per watch",
            b as f64 / 1024.0,
            a as f64 / 1024.0
        );
    }
    for c in &r.commands {
        println!("{}: {:.1} ms, {} bytes, {} lines", c.command, c.ms, c.bytes, c.lines);
    }
}
