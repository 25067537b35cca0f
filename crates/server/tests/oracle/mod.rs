//! Apache ZooKeeper 3.8 (Debian package) as an oracle for tests: its classpath, four-letter words,
//! and a server process on a given or private data directory, killed by PID when dropped.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The jars Debian's `zookeeper` package installs; the same list as `scripts/zk-classpath`.
const JARS: &[&str] = &[
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-transport.jar",
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "commons-io.jar",
    "commons-cli.jar",
    "metrics-core.jar",
    "snappy-java.jar",
    "slf4j-api.jar",
    "slf4j-nop.jar",
];

pub const MISSING: &str =
    "Apache ZooKeeper 3.8 (Debian package `zookeeper`) or java not found: run scripts/install-deps";

/// Apache ZooKeeper's server classpath: `scripts/zk-classpath` if present, else built from the jar list.
/// Panics (never skips) when ZooKeeper or java is not installed.
pub fn zk_classpath() -> String {
    let java = Command::new("java").arg("-version").output();
    assert!(java.is_ok_and(|o| o.status.success()), "{MISSING} (no java)");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/zk-classpath");
    if script.exists() {
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("{MISSING}: running {}: {e}", script.display()));
        if !out.status.success() {
            panic!("{MISSING}\nscripts/zk-classpath said: {}", String::from_utf8_lossy(&out.stderr));
        }
        return String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    let dir = std::env::var("ZK_JAVA_DIR").unwrap_or_else(|_| "/usr/share/java".into());
    let mut parts = Vec::new();
    for jar in JARS {
        let p = PathBuf::from(&dir).join(jar);
        if !p.exists() {
            panic!("{MISSING} (missing {})", p.display());
        }
        parts.push(p.display().to_string());
    }
    parts.join(":")
}

/// [`zk_classpath`] plus the Jetty and Jackson jars ZooKeeper's AdminServer loads (Debian's
/// jetty9 and jackson2 packages, installed with `zookeeper`).
pub fn zk_admin_classpath() -> String {
    let dir = std::env::var("ZK_JAVA_DIR").unwrap_or_else(|_| "/usr/share/java".into());
    let mut cp = zk_classpath().replace("slf4j-nop.jar", "slf4j-simple.jar");
    for jar in [
        "jetty9-server.jar",
        "jetty9-servlet.jar",
        "jetty9-http.jar",
        "jetty9-io.jar",
        "jetty9-util.jar",
        "jetty9-security.jar",
        "jetty9-util-ajax.jar",
        "servlet-api.jar",
        "jackson-core.jar",
        "jackson-databind.jar",
        "jackson-annotations.jar",
    ] {
        let p = PathBuf::from(&dir).join(jar);
        assert!(p.exists(), "{MISSING} (missing {}, which ZooKeeper's AdminServer needs)", p.display());
        cp.push(':');
        cp.push_str(&p.display().to_string());
    }
    cp
}

/// A loopback port that is free now and that nothing else takes before the caller's server binds
/// it: ports come from 20000-31999, below the kernel's ephemeral range (32768+), so no outgoing
/// connection can be given one meanwhile (a port from `bind(0)` can be, and a ZooKeeper server then
/// exits on its client port). Each port is handed out once per process, from a start that differs
/// between processes, and checked free by binding it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let _ = NEXT.compare_exchange(u32::MAX, (std::process::id() ^ nanos) % SPAN, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN)
}

/// Sends a four-letter word and returns the whole answer.
pub fn four_letter(addr: SocketAddr, cmd: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(cmd.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// A running Apache ZooKeeper standalone server on a caller-owned data directory; killed with
/// SIGKILL (by PID, `Child::kill`) when dropped, also on panic.
pub struct ZkProcess {
    child: Option<Child>,
    pub addr: SocketAddr,
    out_path: PathBuf,
    _dir: tempfile::TempDir,
    /// The data directory when the oracle owns it (`start_fresh`).
    _data: Option<tempfile::TempDir>,
}

impl ZkProcess {
    /// Starts ZooKeeper with `dataDir=data_dir`; `extra` is appended to its zoo.cfg (also passed as
    /// `-Dzookeeper.<key>=<value>` so static initialisers see it whatever the class load order).
    /// `container_check_ms`: `znode.container.checkIntervalMs` (container and TTL deletion).
    ///
    /// ZooKeeper logs warnings and errors (slf4j-simple in place of slf4j-nop) to its output file,
    /// which a failure prints. A start that lost its port to another process between
    /// `free_port` and the bind is retried on another port.
    pub fn start(classpath: &str, data_dir: &Path, extra: &[(&str, String)], container_check_ms: u64) -> ZkProcess {
        let classpath = classpath.replace("slf4j-nop.jar", "slf4j-simple.jar");
        for attempt in 1.. {
            match ZkProcess::try_start(&classpath, data_dir, extra, container_check_ms) {
                Ok(zk) => return zk,
                Err(out) if attempt < 3 && out.contains("Address already in use") => {
                    eprintln!("Apache ZooKeeper lost its port to another process; retrying:\n{out}");
                }
                Err(out) => panic!("Apache ZooKeeper exited early; output:\n{out}\n{MISSING}"),
            }
        }
        unreachable!()
    }

    /// One start; the output of a ZooKeeper that exited before serving is the error.
    fn try_start(
        classpath: &str,
        data_dir: &Path,
        extra: &[(&str, String)],
        container_check_ms: u64,
    ) -> Result<ZkProcess, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let cfg = dir.path().join("zoo.cfg");
        let mut text = format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             4lw.commands.whitelist=*\nextendedTypesEnabled=true\nadmin.enableServer=false\nmaxClientCnxns=0\n",
            data_dir.display()
        );
        for (k, v) in extra {
            text.push_str(&format!("{k}={v}\n"));
        }
        std::fs::write(&cfg, text).unwrap();
        let out_path = dir.path().join("zk.out");
        let log = std::fs::File::create(&out_path).unwrap();
        let mut cmd = Command::new("java");
        cmd.arg("-Xmx256m")
            .arg(format!("-Dznode.container.checkIntervalMs={container_check_ms}"))
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn");
        for (k, v) in extra {
            cmd.arg(format!("-Dzookeeper.{k}={v}"));
        }
        let child = cmd
            .arg("-cp")
            .arg(classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{MISSING}: spawning java: {e}"));
        let mut zk = ZkProcess {
            child: Some(child),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            out_path,
            _dir: dir,
            _data: None,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = zk.child.as_mut().unwrap().try_wait() {
                return Err(format!("({status})\n{}", zk.output()));
            }
            // `ruok` answers imok before the server serves; `srvr` then still says "not currently serving".
            if four_letter(zk.addr, "ruok").map(|s| s == "imok").unwrap_or(false)
                && four_letter(zk.addr, "srvr").map(|s| s.contains("Mode:")).unwrap_or(false)
            {
                return Ok(zk);
            }
            assert!(Instant::now() < deadline, "Apache ZooKeeper did not serve within 60 s; output:\n{}", zk.output());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts ZooKeeper on a private temporary data directory, removed when dropped.
    pub fn start_fresh(classpath: &str) -> ZkProcess {
        let data = tempfile::tempdir().expect("tempdir");
        let mut zk = ZkProcess::start(classpath, data.path(), &[], 3_600_000);
        zk._data = Some(data);
        zk
    }

    /// What ZooKeeper printed so far: JVM messages, and its warnings and errors.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out_path).unwrap_or_default()
    }

    /// SIGKILL (by PID) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ZkProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A blocking raw client connection usable against either server: one session, frames built and
/// read with `warden_proto` (whose golden-byte tests pin it to ZooKeeper's format), so tests can
/// send what client libraries refuse to (odd paths, null data) and see the wire answer.
pub struct RawConn {
    s: TcpStream,
}

impl RawConn {
    pub fn connect(addr: SocketAddr, read_timeout: Duration) -> std::io::Result<RawConn> {
        use warden_proto::connect::{ConnectRequest, ConnectResponse};
        use warden_proto::Record;
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(read_timeout))?;
        s.set_nodelay(true)?;
        let mut c = RawConn { s };
        let req =
            ConnectRequest { timeout_ms: 30_000, passwd: vec![0; 16], read_only: Some(false), ..Default::default() };
        c.s.write_all(&warden_proto::frame::encode_frame(&req))?;
        let resp = ConnectResponse::from_bytes(&c.recv()?).map_err(std::io::Error::other)?;
        if resp.timeout_ms <= 0 {
            return Err(std::io::Error::other("session refused"));
        }
        Ok(c)
    }

    fn recv(&mut self) -> std::io::Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len)?;
        let n = i32::from_be_bytes(len);
        if !(0..=4 << 20).contains(&n) {
            return Err(std::io::Error::other(format!("bad frame length {n}")));
        }
        let mut body = vec![0u8; n as usize];
        self.s.read_exact(&mut body)?;
        Ok(body)
    }

    /// Sends the request; returns the header and body of the reply with that xid (notifications
    /// skipped).
    pub fn call(
        &mut self,
        xid: i32,
        req: &warden_proto::request::Request,
    ) -> std::io::Result<(warden_proto::header::ReplyHeader, Option<warden_proto::response::Response>)> {
        use warden_proto::Record;
        self.s.write_all(&req.encode_frame(xid))?;
        loop {
            let r = self.recv()?;
            let hdr = warden_proto::header::ReplyHeader::from_bytes(&r).map_err(std::io::Error::other)?;
            if hdr.xid == xid {
                return warden_proto::response::decode_reply(req.op_code().code(), &r).map_err(std::io::Error::other);
            }
        }
    }

    /// Sends closeSession and waits for its reply (or the connection closing).
    pub fn close(mut self, xid: i32) {
        if self.s.write_all(&warden_proto::request::Request::CloseSession.encode_frame(xid)).is_ok() {
            let _ = self.recv();
        }
    }
}

/// Warden's keys appear in ZooKeeper's answer, in the same order (when `ordered`: `monitor`'s
/// order in ZooKeeper is a hash map's) and with the same JSON types, down through objects (maps
/// keyed by session id or path are compared by their values' shape).
pub fn same_shape(what: &str, z: &serde_json::Value, w: &serde_json::Value, ordered: bool) {
    use serde_json::Value;
    let short = |v: &Value| v.to_string().chars().take(1500).collect::<String>();
    let (zs, ws) = (short(z), short(w));
    match (z, w) {
        (Value::Object(zm), Value::Object(wm)) => {
            let data_keyed = zm.keys().chain(wm.keys()).any(|k| k.starts_with('/') || k.parse::<i64>().is_ok());
            if data_keyed {
                // Maps of lists (sessions by expiry bucket, paths by session, sessions by path)
                // are compared by the items they hold: which bucket a session sits in depends on
                // when it was last touched, and ZooKeeper keeps a bucket a session moved out of
                // (an empty list) until its time passes. Other maps by their entries.
                let held = |m: &serde_json::Map<String, Value>| -> usize {
                    if m.values().all(Value::is_array) {
                        m.values().filter_map(Value::as_array).map(Vec::len).sum()
                    } else {
                        m.len()
                    }
                };
                assert_eq!(held(zm), held(wm), "{what}: entries\nZK: {zs}\nWarden: {ws}");
                if let (Some(zv), Some(wv)) = (first_held(zm), first_held(wm)) {
                    // For lists, the shape of an item (their lengths were counted above).
                    let item =
                        |v: &'_ Value| v.as_array().and_then(|a| a.first()).cloned().unwrap_or_else(|| v.clone());
                    same_shape(&format!("{what}[*]"), &item(zv), &item(wv), ordered);
                }
                return;
            }
            let mut order: Vec<&String> = zm.keys().filter(|k| wm.contains_key(*k)).collect();
            // Warden's own extras (`warden_*`, `avg_warden_*`, ...) and 3.9's names are not
            // ZooKeeper 3.8's to compare.
            let mut mine: Vec<&String> = wm.keys().filter(|k| comparable_with_38(k)).collect();
            if !ordered {
                order.sort();
                mine.sort();
            }
            assert_eq!(mine, order, "{what}: Warden's keys, in ZooKeeper's order\nZK: {zs}\nWarden: {ws}");
            for (k, wv) in wm.iter().filter(|(k, _)| comparable_with_38(k)) {
                same_shape(&format!("{what}.{k}"), &zm[k], wv, ordered);
            }
        }
        (Value::Array(za), Value::Array(wa)) => {
            assert_eq!(za.len(), wa.len(), "{what}: items\nZK: {zs}\nWarden: {ws}");
            for (zv, wv) in za.iter().zip(wa) {
                same_shape(&format!("{what}[]"), zv, wv, ordered);
            }
        }
        (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_))
        | (Value::Bool(_), Value::Bool(_)) => {}
        (Value::Null, _) | (_, Value::Null) => {}
        _ => panic!("{what}: ZooKeeper has {zs}, Warden {ws}"),
    }
}

/// The first value of a data-keyed map that holds something (not an empty list).
fn first_held(m: &serde_json::Map<String, serde_json::Value>) -> Option<&serde_json::Value> {
    m.values().find(|v| v.as_array().is_none_or(|a| !a.is_empty()))
}

/// Metric names ZooKeeper 3.9 added (the `snapshot` and `restore` admin commands'), which 3.8
/// does not report.
pub const ZK_39_METRICS: &[&str] = &[
    "snapshot_rate_limited_count",
    "snapshot_error_count",
    "restore_rate_limited_count",
    "restore_error_count",
    "restore_time",
];

/// Whether a key of Warden's answer has a ZooKeeper 3.8 counterpart to compare with: not
/// Warden's own (`warden_*`) nor a 3.9 metric (also under `avg_`, `cnt_`, ... prefixes).
pub fn comparable_with_38(key: &str) -> bool {
    !key.contains("warden_") && !ZK_39_METRICS.iter().any(|m| key.ends_with(m))
}

/// The AdminServer names the oracle comparisons run: every ZooKeeper 3.8 command name and alias,
/// one with an argument, and an unknown one.
pub const ADMIN_NAMES: &[&str] = &[
    "configuration",
    "conf",
    "config",
    "connection_stat_reset",
    "crst",
    "connections",
    "cons",
    "dirs",
    "dump",
    "environment",
    "env",
    "envi",
    "get_trace_mask",
    "gtmk",
    "initial_configuration",
    "icfg",
    "is_read_only",
    "isro",
    "last_snapshot",
    "lsnp",
    "leader",
    "lead",
    "monitor",
    "mntr",
    "observer_connection_stat_reset",
    "orst",
    "ruok",
    "server_stats",
    "srvr",
    "set_trace_mask",
    "stmk",
    "stmk?traceMask=7",
    "stat_reset",
    "srst",
    "stats",
    "stat",
    "system_properties",
    "sysp",
    "voting_view",
    "watch_summary",
    "wchs",
    "watches",
    "wchc",
    "watches_by_path",
    "wchp",
    "zabstate",
    "hash",
    "observers",
    "obsr",
    "nope",
];

/// One command's answers from ZooKeeper (`z`) and Warden (`w`) (`what` names it in failures): the
/// same primary name, the same failing or not, and Warden's keys ZooKeeper's in ZooKeeper's order (except for the primary
/// names in `unordered`) with the same JSON types. `environment` and `system_properties` describe
/// a JVM: only their shape counts.
pub fn compare_admin_answers(what: &str, z: &serde_json::Value, w: &serde_json::Value, unordered: &[&str]) {
    assert_eq!(w["command"], z["command"], "{what}: primary name");
    assert_eq!(w["error"].is_null(), z["error"].is_null(), "{what}: error\nZK: {:.1500}\nWarden: {w}", z.to_string());
    let primary = w["command"].as_str().unwrap_or_default();
    if ["environment", "system_properties"].contains(&primary) {
        assert!(w.as_object().unwrap().values().all(|v| v.is_string() || v.is_null()), "{what}: {w}");
        return;
    }
    same_shape(what, z, w, !unordered.contains(&primary));
}
