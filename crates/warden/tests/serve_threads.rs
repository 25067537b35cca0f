//! How many worker threads `warden serve` runs: `--worker-threads`, else TOKIO_WORKER_THREADS, else
//! one fewer than the CPUs available (at least one). Counted from the threads the process holds
//! once it answers `ruok`.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{free_port, ruok, Killed};

/// Starts a standalone server with `args` after the config and `env` set (or, for `None` values,
/// removed), waits for `ruok`, and returns how many of its threads are tokio workers.
fn workers_of(args: &[&str], env: &[(&str, Option<&str>)]) -> usize {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = free_port();
    let cfg = dir.path().join("zoo.cfg");
    let cfg_text = format!(
        "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n4lw.commands.whitelist=ruok\n",
        dir.path().join("data").display()
    );
    std::fs::write(&cfg, cfg_text).expect("the config is written");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.arg("serve").arg(&cfg).args(["--log", "warn"]).args(args).stdin(Stdio::null());
    for (key, value) in env {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    let server = Killed(cmd.spawn().expect("warden serve starts"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("an address");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ruok(addr) {
        assert!(Instant::now() < deadline, "warden serve did not answer ruok on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let tasks = std::fs::read_dir(format!("/proc/{}/task", server.0.id())).expect("the server's threads");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "tokio-rt-worker")
        .count()
}

#[test]
fn the_flag_sets_the_worker_count() {
    assert_eq!(workers_of(&["--worker-threads", "3"], &[("TOKIO_WORKER_THREADS", Some("2"))]), 3);
}

#[test]
fn tokio_worker_threads_is_honoured_without_the_flag() {
    assert_eq!(workers_of(&[], &[("TOKIO_WORKER_THREADS", Some("2"))]), 2);
}

#[test]
fn by_default_one_core_is_left_to_the_log_and_snapshot_threads() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(workers_of(&[], &[("TOKIO_WORKER_THREADS", None)]), cpus.saturating_sub(1).max(1));
}

#[test]
fn zero_workers_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["serve", "--worker-threads", "0"])
        .stdin(Stdio::null())
        .output()
        .expect("warden runs");
    assert!(!out.status.success(), "--worker-threads 0 was accepted");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--worker-threads"), "the error names the flag: {stderr}");
}
