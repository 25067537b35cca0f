//! `warden serve` as a service manager runs it: the log format (`--log-format`, WARDEN_LOG_FORMAT),
//! the zoo.cfg path from ZOO_CFG, a clean exit on SIGTERM, the zoo.cfg key reference
//! (`warden config-keys`, committed as docs/zoo-cfg.md), and the systemd unit, environment file
//! and zoo.cfg of dist/systemd.

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
        assert!(v["target"].as_str().is_some_and(|t| !t.is_empty()), "target: {v}");
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

fn dist(file: &str) -> String {
    std::fs::read_to_string(format!("{}/../../dist/systemd/{file}", env!("CARGO_MANIFEST_DIR"))).expect(file)
}

/// The `KEY=value` lines of an EnvironmentFile (comments and blank lines skipped).
fn env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("not KEY=value: {l:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The unit's one `key=value` setting.
fn unit_setting<'a>(unit: &'a str, key: &str) -> &'a str {
    let mut values = unit.lines().filter_map(|l| l.strip_prefix(key)?.strip_prefix('='));
    let value = values.next().unwrap_or_else(|| panic!("{key}= missing from warden.service"));
    assert!(values.next().is_none(), "{key}= is set twice");
    value
}

/// warden.service's ExecStart, run with warden.env's environment and the shipped zoo.cfg (its
/// dataDir and clientPort moved to a temporary directory and a free port): the server starts,
/// every key of the zoo.cfg is one Warden reads, the log is in warden.env's format, and SIGTERM
/// (the unit's KillSignal) stops it with status 0, which Restart=on-failure leaves stopped.
#[test]
fn the_systemd_unit_starts_and_stops_warden_with_its_environment_file() {
    let unit = dist("warden.service");
    let env = env_file(&dist("warden.env"));
    let exec: Vec<&str> = unit_setting(&unit, "ExecStart").split_whitespace().collect();
    assert_eq!(exec[0], "/usr/local/bin/warden");
    assert_eq!(unit_setting(&unit, "EnvironmentFile"), "/etc/warden/warden.env");
    assert_eq!(unit_setting(&unit, "KillSignal"), "SIGTERM");
    assert_eq!(unit_setting(&unit, "Restart"), "on-failure");
    let var = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    assert_eq!(var("ZOO_CFG"), Some("/etc/warden/zoo.cfg"));
    let format = var("WARDEN_LOG_FORMAT").expect("WARDEN_LOG_FORMAT in warden.env");
    let state_dir = format!("/var/lib/{}", unit_setting(&unit, "StateDirectory"));
    let shipped = dist("zoo.cfg");
    assert!(shipped.lines().any(|l| l == format!("dataDir={state_dir}")), "zoo.cfg's dataDir is the StateDirectory");

    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let cfg_text: String = shipped
        .lines()
        .map(|l| match l.split_once('=').map(|(k, _)| k) {
            Some("dataDir") => format!("dataDir={}\n", dir.path().display()),
            Some("clientPort") => format!("clientPort={port}\nclientPortAddress=127.0.0.1\n"),
            Some("admin.serverAddress") => "admin.enableServer=false\n".to_string(),
            _ => format!("{l}\n"),
        })
        .collect();
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(&cfg, cfg_text).unwrap();
    let log_path = dir.path().join("stderr.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.args(&exec[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("ZOO_CFG", &cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap());
    let mut server = common::Killed(cmd.spawn().expect("spawn warden"));
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(wait_until(30, || common::ruok(addr)), "no ruok on {addr}:\n{}", log());
    let pid = server.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let mut status = None;
    assert!(wait_until(20, || {
        status = server.0.try_wait().unwrap();
        status.is_some()
    }));
    assert_eq!(status.unwrap().code(), Some(0), "{}", log());
    let stderr = log();
    assert!(stderr.contains("serving clients"), "{stderr}");
    assert!(!stderr.contains("zoo.cfg key"), "every key of the shipped zoo.cfg is read:\n{stderr}");
    match format {
        "plain" => assert!(stderr.lines().all(|l| !l.starts_with('{')), "{stderr}"),
        "json" => assert!(stderr.lines().all(|l| l.starts_with('{')), "{stderr}"),
        other => panic!("WARDEN_LOG_FORMAT={other}"),
    }
}

/// `systemd-analyze verify` accepts the unit (its ExecStart pointed at the binary under test,
/// since verify wants it to exist). scripts/install-deps installs systemd for it.
#[test]
fn systemd_analyze_verifies_the_unit() {
    let version = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .expect("systemd-analyze (Debian's systemd package; scripts/install-deps installs it)");
    assert!(version.status.success());
    let dir = tempfile::tempdir().unwrap();
    let unit = dist("warden.service")
        .replace("ExecStart=/usr/local/bin/warden", &format!("ExecStart={}", env!("CARGO_BIN_EXE_warden")));
    let path = dir.path().join("warden.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().expect("run systemd-analyze");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify:\n{said}");
}
