//! `warden bench` works end to end (issue 5: CI runs it briefly only to check that it works):
//! start `warden serve` on a temporary data directory and a free loopback port, run a short mixed
//! workload with `--json`, and check that every operation of the mix completed and that the
//! percentiles are ordered; `warden floor` likewise.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_warden");

mod common;
use common::{free_port, start_standalone};

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// Runs `warden bench` against `port` with `args`, its JSON in `dir`; checks that it succeeded.
/// Returns the JSON report, stdout and stderr.
fn run_bench(dir: &std::path::Path, port: u16, args: &[&str], more: &[&str]) -> (serde_json::Value, String, String) {
    let json = dir.join("out.json");
    let out = Command::new(BIN)
        .args(["bench", "--servers", &format!("127.0.0.1:{port}")])
        .args(args)
        .args(more)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .output()
        .expect("run warden bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "warden bench failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (report, stdout, stderr)
}

#[test]
fn bench_mixed_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_standalone(dir.path(), |_| {});
    let (report, stdout, stderr) = run_bench(
        dir.path(),
        port,
        &["--sessions", "2", "--depth", "8", "--duration", "2s", "--warmup", "1s"],
        &["--workload", "mixed", "--keys", "500", "--value-size", "256", "--watches", "--cleanup"],
    );
    assert!(stderr.contains("ops/s"), "no progress line on stderr:\n{stderr}");
    assert!(stdout.contains("p99.9 ms"), "no table on stdout:\n{stdout}");

    let ops = report["ops"].as_array().expect("ops array");
    let names: Vec<&str> = ops.iter().map(|o| o["op"].as_str().unwrap()).collect();
    for want in ["getData", "setData", "exists", "getChildren", "create", "delete", "multi"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    for o in ops.iter().chain(std::iter::once(&report["total"])) {
        assert!(f(o, "count") > 0.0, "no successful {}: {o}", o["op"]);
        assert!(f(o, "ops_per_sec") > 0.0, "{o}");
        let (p50, p99, p999, max) = (f(o, "p50_ms"), f(o, "p99_ms"), f(o, "p999_ms"), f(o, "max_ms"));
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999 && p999 <= max, "percentiles out of order: {o}");
        assert!(max < 10_000.0, "a request took over 10 s: {o}");
        assert_eq!(f(o, "errors"), 0.0, "errors in {o}; by kind: {}", report["errors_by_kind"]);
    }
    let elapsed = f(&report, "elapsed_s");
    assert!((1.9..10.0).contains(&elapsed), "elapsed {elapsed}");
}

#[test]
fn bench_reports_unreachable_server() {
    let port = free_port();
    let out = Command::new(BIN)
        .args(["bench", "--servers", &format!("127.0.0.1:{port}"), "--duration", "1s", "--warmup", "0s"])
        .stdin(Stdio::null())
        .output()
        .expect("run warden bench");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "unclear error:\n{stderr}");
}

/// Runs `warden floor` with `args`, its probe file and JSON in `dir`; checks that it succeeded and
/// that each of `keys` is a plausible time. Returns its stdout.
fn run_floor(dir: &std::path::Path, args: &[&str], keys: &[&str]) -> String {
    let json = dir.join("floor.json");
    let out = Command::new(BIN)
        .arg("floor")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .output()
        .expect("run warden floor");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "warden floor failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in keys {
        let v = f(&report, key);
        assert!(v > 0.0 && v < 10_000.0, "{key} = {v}");
    }
    stdout
}

/// `warden floor` runs its three probes, removes its probe file, and writes the medians as JSON.
#[test]
fn floor_measures_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let stdout =
        run_floor(dir.path(), &["--rounds", "50"], &["round_trip_ms", "write_ms", "fdatasync_back_to_back_ms"]);
    assert!(stdout.contains("write floor"), "no figures on stdout:\n{stdout}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("floor.json")], "probe file left behind");
}

/// `warden floor --server` times both clients against a live server in segments, and leaves no
/// node of its own behind.
#[test]
fn floor_against_a_server_times_both_clients_and_leaves_no_node() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_standalone(dir.path(), |_| {});
    let server = format!("127.0.0.1:{port}");
    let stdout = run_floor(
        dir.path(),
        &["--rounds", "60", "--segments", "3", "--server", &server],
        &["write_ms", "write_alone_ms", "server_set_data_ms", "client_set_data_ms"],
    );
    assert!(stdout.contains("through zookeeper-client"), "no client figure on stdout:\n{stdout}");
    let children = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = zookeeper_client::Client::connect(&server).await.unwrap();
        client.list_children("/").await.unwrap()
    });
    assert!(!children.iter().any(|c| c.starts_with("warden-floor")), "probe nodes left: {children:?}");
}

/// `--workload connect` opens connections one after another on each loop and counts the ones that
/// answered `ruok` with `imok` in the measured window.
#[test]
fn bench_connect_counts_new_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_standalone(dir.path(), |_| {});
    let (report, _, _) = run_bench(
        dir.path(),
        port,
        &["--workload", "connect"],
        &["--sessions", "2", "--depth", "2", "--duration", "1s", "--warmup", "0.5s"],
    );
    let total = &report["total"];
    assert_eq!(total["op"], "connect");
    assert!(f(total, "count") > 10.0, "too few connections: {total}");
    assert_eq!(f(total, "errors"), 0.0, "errors: {}", report["errors_by_kind"]);
}

/// The sessions workload (fewer sessions than the default maxClientCnxns of 60 per address):
/// every raw session is established, watches one node and hears its
/// change exactly once; with the server's PID the RSS before, idle and at the storm's peak is
/// read and the growth per session is reported.
#[test]
fn bench_sessions_notifies_every_session_once_and_reads_the_servers_rss() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = start_standalone(dir.path(), |_| {});
    let pid = server.0.id().to_string();
    let (report, stdout, _) = run_bench(
        dir.path(),
        port,
        &["--workload", "sessions", "--sessions", "50", "--depth", "16", "--watches"],
        &["--warmup", "0.5s", "--duration", "0.2s", "--server-pid", &pid],
    );
    assert_eq!(report["sessions"], 50);
    assert_eq!(f(&report, "connect_errors"), 0.0, "{report}");
    assert!(f(&report, "accept_per_sec") > 0.0, "{report}");
    let storm = &report["storm"];
    assert_eq!((f(storm, "armed"), f(storm, "notified"), f(storm, "duplicates")), (50.0, 50.0, 0.0), "{report}");
    assert!(f(storm, "storm_ms") > 0.0, "{report}");
    assert!(f(&report, "rss_idle_kib") > 0.0 && f(storm, "rss_peak_kib") >= f(&report, "rss_idle_kib"), "{report}");
    assert!(report["rss_per_session_bytes"].is_number(), "{report}");
    assert!(stdout.contains("watch storm: 50 armed, 50 notified, 0 duplicates"), "{stdout}");
}
