//! How many worker threads `warden serve` runs: `--worker-threads`, else TOKIO_WORKER_THREADS, else
//! one fewer than the CPUs available (at least one). One worker is the main thread itself (a
//! single-threaded runtime, no tokio worker threads); more are tokio worker threads. Counted from
//! the threads the process holds once it answers `ruok`.

use std::process::{Command, Stdio};

mod common;
use common::start_standalone;

/// Starts a standalone server with `args` after the config and `env` set (or, for `None` values,
/// removed), waits for `ruok`, and returns how many of its threads are tokio workers.
fn workers_of(args: &[&str], env: &[(&str, Option<&str>)]) -> usize {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (server, _) = start_standalone(dir.path(), |cmd| {
        cmd.args(args);
        for (key, value) in env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
    });
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
fn one_worker_is_the_main_thread() {
    assert_eq!(workers_of(&["--worker-threads", "1"], &[]), 0);
    assert_eq!(workers_of(&[], &[("TOKIO_WORKER_THREADS", Some("1"))]), 0);
}

#[test]
fn by_default_one_core_is_left_to_the_log_and_snapshot_threads() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = cpus.saturating_sub(1).max(1);
    let threads = if workers == 1 { 0 } else { workers };
    assert_eq!(workers_of(&[], &[("TOKIO_WORKER_THREADS", None)]), threads);
}

/// Runs `warden serve` with `args` and `env`, expects it to fail, and returns its stderr.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("warden runs");
    assert!(!out.status.success(), "warden serve {args:?} with {env:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_bad_tokio_worker_threads_is_refused() {
    for bad in ["0", "two"] {
        let stderr = refused(&[], &[("TOKIO_WORKER_THREADS", bad)]);
        assert!(stderr.contains("TOKIO_WORKER_THREADS must be a positive integer"), "{bad}: {stderr}");
    }
}

#[test]
fn zero_workers_is_refused() {
    let stderr = refused(&["--worker-threads", "0"], &[]);
    assert!(stderr.contains("--worker-threads"), "the error names the flag: {stderr}");
}
