//! `warden bench --workload connect`: how many new client connections a server takes per second.
//!
//! Each of the sessions x depth loops opens a TCP connection to its server (round-robin), does a
//! TLS handshake on it when `--tls-ca` is given (presenting `--tls-cert` when given), sends the
//! four-letter word `ruok`, reads the answer up to the server's close, checks it is `imok`, and
//! starts again. The `ruok` round trip makes every counted connection one the server has fully
//! accepted (a TLS 1.3 client finishes its handshake before the server has checked its
//! certificate). No session is created, so the figure is the cost of a connection and its
//! handshake, not of a session's two transactions. Servers must allow `ruok`
//! (`4lw.commands.whitelist`).

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use async_io::{Async, Timer};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use futures_rustls::rustls;
use futures_rustls::rustls::pki_types::ServerName;
use hdrhistogram::Histogram;

use super::{op_report, print_table, BenchArgs, ConfigReport, Report, DRAIN_LIMIT};

/// Where a loop connects: the resolved address and the name its certificate must carry.
#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    name: ServerName<'static>,
}

/// What one loop measured.
struct Tally {
    hist: Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
}

pub(super) async fn run(args: BenchArgs, tls: Option<Arc<rustls::ClientConfig>>) -> anyhow::Result<()> {
    let mut targets = Vec::new();
    for (addr, host) in super::resolve_servers(&args.servers)? {
        let name = ServerName::try_from(host.clone()).with_context(|| format!("{host} is no server name"))?;
        targets.push(Target { addr, name });
    }
    let loops = args.sessions * args.depth;
    let start = Instant::now();
    let measure_start = start + args.warmup;
    let end = measure_start + args.duration;
    let connector = tls.map(futures_rustls::TlsConnector::from);
    eprintln!(
        "bench: {loops} connection loops ({}) over {}",
        if connector.is_some() { "TLS" } else { "plaintext" },
        args.servers.join(",")
    );
    let tasks: Vec<_> = (0..loops)
        .map(|i| {
            let target = targets[i % targets.len()].clone();
            let connector = connector.clone();
            super::spawn(one_loop(target, connector, measure_start, end))
        })
        .collect();
    let progress = super::spawn(async move {
        let mut last = Instant::now();
        while last < end + DRAIN_LIMIT {
            Timer::after(Duration::from_secs(1)).await;
            last = Instant::now();
            let phase = if last < measure_start {
                "warm-up"
            } else if last < end {
                "measure"
            } else {
                "draining"
            };
            eprintln!("bench: {phase}");
        }
    });
    let tallies = block_on_tasks(tasks, end + DRAIN_LIMIT).await;
    drop(progress);
    let unfinished = loops - tallies.len();
    let mut all = Histogram::<u64>::new(3)?;
    let mut errors = 0;
    let mut first_error = None;
    for t in tallies {
        all.add(&t.hist)?;
        errors += t.errors;
        first_error = first_error.or(t.first_error);
    }
    let elapsed = args.duration.as_secs_f64();
    let total = op_report("connect", &all, errors, elapsed);
    let report = Report {
        config: ConfigReport {
            servers: args.servers.clone(),
            sessions: args.sessions,
            depth: args.depth,
            duration_s: elapsed,
            warmup_s: args.warmup.as_secs_f64(),
            workload: [("connect".to_string(), 1)].into(),
            value_size: 0,
            keys: 0,
            watches: false,
            prefix: String::new(),
            rate: None,
        },
        elapsed_s: elapsed,
        ops: Vec::new(),
        total,
        watch_events: 0,
        errors_by_kind: first_error.map(|e| (e, errors)).into_iter().collect(),
    };
    print_table(&report);
    if unfinished > 0 {
        eprintln!("bench: {unfinished} connection loops had not finished {}s after the end", DRAIN_LIMIT.as_secs());
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if all.is_empty() {
        bail!("no connection completed in the measured window");
    }
    Ok(())
}

async fn one_loop(
    target: Target,
    connector: Option<futures_rustls::TlsConnector>,
    measure_start: Instant,
    end: Instant,
) -> Tally {
    let mut tally = Tally { hist: Histogram::new(3).expect("histogram"), errors: 0, first_error: None };
    loop {
        let t = Instant::now();
        if t >= end {
            return tally;
        }
        let outcome = super::timeout(Duration::from_secs(10), connect_once(&target, connector.as_ref()))
            .await
            .unwrap_or_else(|| Err(anyhow::anyhow!("timed out after 10 s")));
        let done = Instant::now();
        if t < measure_start || done > end {
            continue;
        }
        match outcome {
            Ok(()) => {
                let us = done.duration_since(t).as_micros().max(1) as u64;
                let _ = tally.hist.record(us);
            }
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| format!("{e:#}"));
                // A refusing server must not turn the loop into a busy spin.
                Timer::after(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn connect_once(target: &Target, connector: Option<&futures_rustls::TlsConnector>) -> anyhow::Result<()> {
    let tcp = Async::<TcpStream>::connect(target.addr).await.context("connect")?;
    tcp.get_ref().set_nodelay(true)?;
    let mut answer = Vec::with_capacity(8);
    match connector {
        Some(c) => {
            let mut tls = c.connect(target.name.clone(), tcp).await.context("TLS handshake")?;
            tls.write_all(b"ruok").await?;
            tls.flush().await?;
            // A server may close without a TLS close_notify after its answer.
            match tls.read_to_end(&mut answer).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {}
                Err(e) => return Err(e).context("reading the answer"),
            }
        }
        None => {
            let mut tcp = tcp;
            tcp.write_all(b"ruok").await?;
            tcp.read_to_end(&mut answer).await.context("reading the answer")?;
        }
    }
    if answer != b"imok" {
        bail!("ruok answered {:?}", String::from_utf8_lossy(&answer));
    }
    Ok(())
}

/// Each task's output, waiting until `deadline` at most; tasks not finished by then are dropped
/// (and so cancelled).
async fn block_on_tasks<T: Send + 'static>(tasks: Vec<async_executor::Task<T>>, deadline: Instant) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Some(v) = super::timeout(left, task).await {
            out.push(v);
        }
    }
    out
}
