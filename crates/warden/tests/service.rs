//! `warden serve` as a service manager runs it: the log format (`--log-format`, WARDEN_LOG_FORMAT),
//! the zoo.cfg path from ZOO_CFG, a clean exit on SIGTERM, and the zoo.cfg key reference
//! (`warden config-keys`, committed as docs/zoo-cfg.md).

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

/// What one run of a server left behind.
struct Run {
    stderr: String,
    port: u16,
}

/// Polls `done` every 50 ms until it holds or `secs` pass; says whether it held.
fn wait_until(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// Runs a standalone `warden serve --log info` whose zoo.cfg also holds a key Warden does not
/// know, after `configure` adds its arguments and environment (NO_COLOR is removed: colours must
/// depend on the terminal alone). A client connects, creates a node and goes away; then the
/// server gets SIGTERM (by its PID) and must exit cleanly. Returns its standard error.
fn serve_once(configure: impl FnOnce(&mut Command, &std::path::Path)) -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = common::free_port();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             4lw.commands.whitelist=ruok\nadmin.enableServer=false\nnoSuchWardenKey=1\n",
            data.display()
        ),
    )
    .unwrap();
    let log_path = dir.path().join("stderr.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.arg("serve")
        .args(["--log", "info"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .env_remove("WARDEN_LOG_FORMAT")
        .env_remove("ZOO_CFG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap());
    configure(&mut cmd, &cfg);
    let mut server = common::Killed(cmd.spawn().expect("spawn warden serve"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(wait_until(30, || common::ruok(addr)), "no ruok on {addr}; stderr:\n{}", log());

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = tokio::time::timeout(Duration::from_secs(20), zk::Client::connector().connect(&addr.to_string()))
            .await
            .expect("connect in time")
            .expect("connect");
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client.create("/service", b"up", &open).await.expect("create");
    });
    drop(rt);
    // A client that sends a request length beyond jute.maxbuffer: the server logs the connection's
    // close, with the reason, at info.
    {
        use std::io::Write as _;
        let mut bad = std::net::TcpStream::connect(addr).expect("connect");
        bad.write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]).expect("write");
    }
    assert!(wait_until(20, || log().contains("closing client connection")), "no close logged:\n{}", log());

    let pid = server.0.id().to_string();
    let kill = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
    assert!(kill.success(), "kill -TERM {pid}");
    let mut status = None;
    assert!(
        wait_until(20, || {
            status = server.0.try_wait().expect("try_wait");
            status.is_some()
        }),
        "warden serve did not exit within 20 s of SIGTERM"
    );
    assert!(status.unwrap().success(), "exit after SIGTERM: {status:?}; stderr:\n{}", log());
    Run { stderr: log(), port }
}

/// Every line of `stderr` as a JSON object with a timestamp, a level, a target and a message.
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}")))
        .collect();
    assert!(lines.len() >= 4, "a start, a warning, a closed connection, a shutdown at least:\n{stderr}");
    for v in &lines {
        assert!(v["timestamp"].as_str().is_some_and(|t| t.contains('T')), "timestamp: {v}");
        assert!(["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&v["level"].as_str().unwrap_or("")), "level: {v}");
        assert!(v["target"].as_str().is_some_and(|t| t.starts_with("warden")), "target: {v}");
        assert!(v["fields"]["message"].as_str().is_some_and(|m| !m.is_empty()), "message: {v}");
    }
    lines
}

fn message<'a>(lines: &'a [serde_json::Value], text: &str) -> Option<&'a serde_json::Value> {
    lines.iter().find(|v| v["fields"]["message"] == text)
}

#[test]
fn json_logs_are_one_object_per_line_with_fields() {
    let run = serve_once(|cmd, cfg| {
        cmd.arg(cfg).args(["--log-format", "json"]);
    });
    let lines = json_lines(&run.stderr);
    let serving = message(&lines, "serving clients").expect("the startup line");
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["fields"]["addr"], format!("127.0.0.1:{}", run.port));
    let closed = message(&lines, "closing client connection").expect("the bad client's close");
    assert!(closed["fields"]["why"].as_str().is_some_and(|w| !w.is_empty()), "{closed}");
    let unknown = lines.iter().find(|v| v["fields"]["key"] == "noSuchWardenKey").expect("the unknown key's warning");
    assert_eq!(unknown["level"], "WARN");
    assert!(message(&lines, "shutting down").is_some(), "SIGTERM is logged");
}

/// The environment file of dist/systemd sets the format and the config path this way.
#[test]
fn the_format_and_the_config_path_come_from_the_environment() {
    let run = serve_once(|cmd, cfg| {
        cmd.env("WARDEN_LOG_FORMAT", "json").env("ZOO_CFG", cfg);
    });
    let lines = json_lines(&run.stderr);
    let serving = message(&lines, "serving clients").expect("the startup line");
    assert_eq!(serving["fields"]["addr"], format!("127.0.0.1:{}", run.port), "the port of ZOO_CFG's file");
}

#[test]
fn plain_logs_stay_plain_and_uncoloured_off_a_terminal() {
    let run = serve_once(|cmd, cfg| {
        cmd.arg(cfg);
    });
    assert!(!run.stderr.contains('\u{1b}'), "no escape codes in a file:\n{}", run.stderr);
    assert!(run.stderr.lines().all(|l| !l.trim_start().starts_with('{')), "{}", run.stderr);
    let serving = run.stderr.lines().find(|l| l.contains("serving clients")).expect("the startup line");
    assert!(serving.contains(" INFO ") && serving.contains(&format!("addr=127.0.0.1:{}", run.port)), "{serving}");
    assert!(run.stderr.lines().any(|l| l.contains(" WARN ") && l.contains("noSuchWardenKey")), "{}", run.stderr);
}

#[test]
fn an_unknown_log_format_is_refused_with_the_choices() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["serve", "--log-format", "xml"])
        .stdin(Stdio::null())
        .output()
        .expect("run warden");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("plain") && err.contains("json"), "{err}");
}

#[test]
fn serve_help_names_the_environment_the_key_reference_and_the_log_format() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden")).args(["serve", "--help"]).output().expect("run warden");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["ZOO_CFG", "WARDEN_LOG_FORMAT", "--log-format", "warden config-keys", "SERVER_JVMFLAGS"] {
        assert!(help.contains(needle), "{needle} missing from serve --help:\n{help}");
    }
}

/// docs/zoo-cfg.md is what `warden config-keys` prints: regenerate it with
/// `cargo run -p warden -- config-keys > docs/zoo-cfg.md` when the table changes.
#[test]
fn the_committed_key_reference_is_what_config_keys_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden")).arg("config-keys").output().expect("run warden");
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/zoo-cfg.md"))
        .expect("docs/zoo-cfg.md");
    assert!(
        printed == committed,
        "docs/zoo-cfg.md is stale: run `cargo run -p warden -- config-keys > docs/zoo-cfg.md`"
    );
    for key in ["| `tickTime` |", "| `server.<N>` |", "| `ssl.keyStore.location` |", "| `localSessionsEnabled` |"] {
        assert!(printed.contains(key), "{key} missing");
    }
    let ignored = printed.split("## Accepted and ignored").nth(1).expect("the ignored keys' section");
    assert!(ignored.contains("`group.<N>`") && !ignored.contains("`tickTime`"));
}
