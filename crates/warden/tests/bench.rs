//! `warden bench` works end to end (issue 5: CI runs it briefly only to check that it works):
//! start `warden serve` on a temporary data directory and a free loopback port, run a short mixed
//! workload with `--json`, and check that every operation of the mix completed and that the
//! percentiles are ordered; `warden floor` likewise.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_warden");

mod common;
use common::{free_port, start_standalone, start_standalone_with};

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
/// every raw session is established, watches one node and hears each of three changes (the
/// watch set again between them) exactly once; with the server's PID the RSS before, idle and
/// at the storm's peak is read and the growth per session is reported.
#[test]
fn bench_sessions_notifies_every_session_once_and_reads_the_servers_rss() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = start_standalone(dir.path(), |_| {});
    let pid = server.0.id().to_string();
    let (report, stdout, _) = run_bench(
        dir.path(),
        port,
        &["--workload", "sessions", "--sessions", "50", "--depth", "16", "--watches", "--storms", "3"],
        &["--warmup", "0.5s", "--duration", "0.2s", "--server-pid", &pid],
    );
    assert_eq!(report["sessions"], 50);
    assert_eq!(f(&report, "connect_errors"), 0.0, "{report}");
    assert!(f(&report, "accept_per_sec") > 0.0, "{report}");
    let storm = &report["storm"];
    assert_eq!((f(storm, "armed"), f(storm, "notified"), f(storm, "duplicates")), (50.0, 50.0, 0.0), "{report}");
    assert!(f(storm, "storm_ms") > 0.0, "{report}");
    let each: Vec<f64> = storm["storms_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert!(each.len() == 3 && each.iter().all(|ms| *ms > 0.0), "{report}");
    assert!(each.contains(&f(storm, "storm_median_ms")), "{report}");
    assert!(f(&report, "rss_idle_kib") > 0.0 && f(storm, "rss_peak_kib") >= f(&report, "rss_watched_kib"), "{report}");
    assert!(report["rss_per_session_bytes"].is_number(), "{report}");
    assert!(stdout.contains("watch storm: 50 armed, 50 notified, 0 duplicates"), "{stdout}");
}

/// The expiry workload: sessions with an ephemeral each vanish at once; every ephemeral is gone
/// within two ticks of the latest deadline, and the bystander's writes were measured idle, at
/// the vanish and while the sessions expired.
#[test]
fn bench_expiry_sees_every_ephemeral_go_after_the_clients_vanish() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_standalone_with(dir.path(), "tickTime=200\nmaxClientCnxns=0\n", |_| {});
    let (report, stdout, _) = run_bench(
        dir.path(),
        port,
        &["--workload", "expiry", "--sessions", "300", "--depth", "16"],
        &["--warmup", "1s", "--session-timeout", "600ms"],
    );
    assert_eq!(
        (f(&report, "established"), f(&report, "ephemerals"), f(&report, "left")),
        (300.0, 300.0, 0.0),
        "{report}"
    );
    assert!(f(&report, "first_gone_ms") > 0.0 && f(&report, "first_gone_ms") <= f(&report, "last_gone_ms"), "{report}");
    assert!(f(&report, "last_gone_after_deadline_ms") <= 2.0 * 200.0 + 300.0, "later than two ticks: {report}");
    for window in ["idle", "at_vanish", "during_expiry"] {
        assert!(f(&report[window], "writes") > 0.0, "no bystander write {window}: {report}");
    }
    assert!(stdout.contains("ephemerals: 300 at the vanish"), "{stdout}");
}

/// The watches workload: every session watches every node, the RSS growth per watch is
/// reported, and wchs/wchc/wchp answer with every watch.
#[test]
fn bench_watches_sets_every_watch_and_reads_the_watch_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = start_standalone_with(dir.path(), "4lw.commands.whitelist=*\n", |_| {});
    let pid = server.0.id().to_string();
    let (report, stdout, _) = run_bench(
        dir.path(),
        port,
        &["--workload", "watches", "--sessions", "20", "--keys", "700", "--depth", "8"],
        &["--warmup", "0.3s", "--server-pid", &pid],
    );
    assert_eq!(f(&report, "watches"), 20.0 * 700.0, "{report}");
    assert!(report["rss_per_watch_bytes"].is_number(), "{report}");
    let commands = report["commands"].as_array().unwrap();
    let lines = |name: &str| {
        let c = commands.iter().find(|c| c["command"] == name).unwrap_or_else(|| panic!("{name} missing: {report}"));
        f(c, "lines")
    };
    assert_eq!(lines("wchs"), 2.0, "{report}");
    // wchc: a line per session and per watch; wchp: a line per path and per watch.
    assert_eq!(lines("wchc"), 20.0 + 14_000.0, "{report}");
    assert_eq!(lines("wchp"), 700.0 + 14_000.0, "{report}");
    assert!(stdout.contains("14000 watches set"), "{stdout}");
}
