//! Four-letter words (ZooKeeper's `FourLetterCommands` and the `*Command` classes of
//! `org.apache.zookeeper.server.command`), formatted as Apache ZooKeeper formats them.

use std::fmt::Write;

use warden_node::{Node, RoleKind};
use warden_proto::frame::FourLetterWord;

use crate::config::Config;
use crate::metrics::ShellMetrics;
use crate::{BUILT_ON, ZK_VERSION};

const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests\n";

/// The mode `srvr` and `mntr` report: `standalone`, `leader`, `follower`, `observer`, `read-only`
/// (or `looking`).
pub(crate) fn mode(node: &Node) -> &'static str {
    match node.role() {
        RoleKind::Standalone => "standalone",
        RoleKind::Looking if node.read_only() => "read-only",
        RoleKind::Looking => "looking",
        RoleKind::Leader => "leader",
        RoleKind::Follower => "follower",
        RoleKind::Observer => "observer",
    }
}

/// Runs one command against the node and returns the text to send before closing.
pub(crate) fn run(cmd: FourLetterWord, node: &mut Node, cfg: &Config, shell: &mut ShellMetrics) -> String {
    let not_serving = !node.serving() && !node.read_only();
    match cmd.name() {
        "ruok" => "imok".into(),
        // ZooKeeper answers these only from a server with an established role.
        "srvr" | "stat" | "cons" | "wchs" | "wchc" | "wchp" | "dump" if not_serving => NOT_SERVING.into(),
        // ZooKeeper: "null" when no server runs (LOOKING), "ro" from its read-only server.
        "isro" if node.read_only() => "ro".into(),
        "isro" if not_serving => "null".into(),
        "isro" => "rw".into(),
        "srvr" => server_stats(node, false),
        "stat" => server_stats(node, true),
        "envi" => environment(cfg),
        "conf" => configuration(cfg),
        "cons" => connections(node),
        "crst" => {
            reset_stats(node, shell);
            "Connection stats reset.\n".into()
        }
        "srst" => {
            reset_stats(node, shell);
            "Server stats reset.\n".into()
        }
        "mntr" => monitor(node, shell),
        "wchs" => watch_summary(node),
        "wchc" => watches_by_session(node),
        "wchp" => watches_by_path(node),
        "dump" => dump(node),
        "dirs" => dirs(cfg),
        "gtmk" | "stmk" => "0\n".into(),
        other => format!("Unknown command: {other}\n"),
    }
}

/// `srst` / `crst` and their admin commands: the node's counters and the summaries the owner
/// keeps (ZooKeeper's default provider resets its summaries too).
pub(crate) fn reset_stats(node: &mut Node, shell: &mut ShellMetrics) {
    node.reset_stats();
    shell.reset();
}

/// The version as `srvr`, `mntr`, `envi` and their admin commands report it.
pub(crate) fn version() -> String {
    format!("{ZK_VERSION}, built on {BUILT_ON}")
}

pub(crate) fn version_line() -> String {
    format!("Zookeeper version: {}", version())
}

fn server_stats(node: &Node, with_clients: bool) -> String {
    let s = node.stats();
    let mut o = String::new();
    let _ = writeln!(o, "{}", version_line());
    if with_clients {
        o.push_str("Clients:\n");
        for c in node.connections() {
            let _ = writeln!(o, " /{}[1](queued={},recved={},sent={})", c.addr, c.queued, c.received, c.sent);
        }
        o.push('\n');
    }
    let _ =
        writeln!(o, "Latency min/avg/max: {}/{}/{}", s.latency.min(), java_double(s.latency.avg()), s.latency.max_ms);
    let _ = writeln!(o, "Received: {}", s.received);
    let _ = writeln!(o, "Sent: {}", s.sent);
    let _ = writeln!(o, "Connections: {}", s.connections);
    let _ = writeln!(o, "Outstanding: {}", s.outstanding);
    let _ = writeln!(o, "Zxid: 0x{:x}", s.zxid);
    let _ = writeln!(o, "Mode: {}", mode(node));
    let _ = writeln!(o, "Node count: {}", s.node_count);
    o
}

fn environment(cfg: &Config) -> String {
    let mut o = String::from("Environment:\n");
    for (k, v) in environment_rows(cfg) {
        let _ = writeln!(o, "{k}={v}");
    }
    o
}

/// What `envi` and the `environment` admin command list. ZooKeeper lists its JVM's properties;
/// Warden has no JVM, so the `java.*` entries are absent, and `os.memory.total` (the JVM heap in
/// ZooKeeper) carries the process's resident memory.
pub(crate) fn environment_rows(cfg: &Config) -> Vec<(&'static str, String)> {
    let mut rows = vec![
        ("zookeeper.version", version()),
        ("host.name", std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into())),
        ("warden.version", env!("CARGO_PKG_VERSION").into()),
        ("os.name", if cfg!(target_os = "linux") { "Linux".into() } else { std::env::consts::OS.into() }),
        ("os.arch", if cfg!(target_arch = "x86_64") { "amd64".into() } else { std::env::consts::ARCH.into() }),
    ];
    if let Ok(v) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        rows.push(("os.version", v.trim().into()));
    }
    if let Ok(user) = std::env::var("USER") {
        rows.push(("user.name", user));
    }
    if let Ok(home) = std::env::var("HOME") {
        rows.push(("user.home", home));
    }
    if let Ok(dir) = std::env::current_dir() {
        rows.push(("user.dir", dir.display().to_string()));
    }
    if let Some(rss) = resident_bytes() {
        rows.push(("os.memory.total", format!("{}MB", rss / (1024 * 1024))));
    }
    rows.push(("zookeeper.dataDir", cfg.data_dir.display().to_string()));
    rows
}

/// The process's resident set size, from /proc/self/statm.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn configuration(cfg: &Config) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "clientPort={}", cfg.client_port);
    let _ = writeln!(o, "secureClientPort={}", cfg.secure_client_port.map_or(-1, i32::from));
    let _ = writeln!(o, "dataDir={}", cfg.data_dir.join("version-2").display());
    let _ = writeln!(o, "dataDirSize={}", dir_size(&cfg.data_dir));
    let _ = writeln!(o, "dataLogDir={}", cfg.data_log_dir.join("version-2").display());
    let _ = writeln!(o, "dataLogSize={}", dir_size(&cfg.data_log_dir));
    let _ = writeln!(o, "tickTime={}", cfg.tick_time_ms);
    let _ = writeln!(o, "maxClientCnxns={}", cfg.max_client_cnxns);
    let _ = writeln!(o, "minSessionTimeout={}", cfg.min_session_timeout_ms);
    let _ = writeln!(o, "maxSessionTimeout={}", cfg.max_session_timeout_ms);
    let _ = writeln!(o, "clientPortListenBacklog=-1");
    let _ = writeln!(o, "serverId=0");
    o
}

fn connections(node: &Node) -> String {
    let mut o = String::new();
    for c in node.connections() {
        let _ = writeln!(
            o,
            " /{}[1](queued={},recved={},sent={},sid=0x{:x},to={},lzxid=0x{:x})",
            c.addr, c.queued, c.received, c.sent, c.session_id, c.timeout_ms, c.last_zxid
        );
    }
    o.push('\n');
    o
}

/// One `mntr` / `monitor` value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Metric {
    Int(i64),
    Float(f64),
    Text(String),
}

impl Metric {
    /// A count (u64) as `mntr` prints it, saturating at `i64::MAX`.
    pub(crate) fn count(v: u64) -> Metric {
        Metric::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Metric::Int(v) => write!(f, "{v}"),
            Metric::Float(v) => f.write_str(&java_double(*v)),
            Metric::Text(v) => f.write_str(v),
        }
    }
}

/// What `mntr` and the `monitor` admin command report, in order, under ZooKeeper's names
/// without the `zk_` prefix `mntr` adds: the version and state, then every metric of
/// [`crate::metrics::families`] (summaries expanded as ZooKeeper's default provider does).
pub(crate) fn monitor_rows(node: &Node, shell: &ShellMetrics) -> Vec<(String, Metric)> {
    let mut rows = vec![
        ("version".to_string(), Metric::Text(version())),
        ("server_state".to_string(), Metric::Text(mode(node).into())),
    ];
    for (name, family) in crate::metrics::families(node, shell) {
        family.expand(name, &mut rows);
    }
    rows
}

fn monitor(node: &Node, shell: &ShellMetrics) -> String {
    monitor_rows(node, shell).iter().map(|(k, v)| format!("zk_{k}\t{v}\n")).collect()
}

/// A double as Java's `Double.toString` prints small values: always with a fraction (`3.0`, `4.5`).
fn java_double(v: f64) -> String {
    format!("{v:?}")
}

fn watch_summary(node: &Node) -> String {
    let s = node.stats();
    format!(
        "{} connections watching {} paths\nTotal watches:{}\n",
        s.watching_connections, s.watched_paths, s.data_watches
    )
}

fn watches_by_session(node: &Node) -> String {
    let mut o = String::new();
    for (sid, paths) in node.watches_by_session() {
        let _ = writeln!(o, "0x{sid:x}");
        for p in paths {
            let _ = writeln!(o, "\t{p}");
        }
    }
    o
}

fn watches_by_path(node: &Node) -> String {
    let mut o = String::new();
    for (path, sids) in node.watches_by_path() {
        let _ = writeln!(o, "{path}");
        for sid in sids {
            let _ = writeln!(o, "\t0x{sid:x}");
        }
    }
    o
}

fn dump(node: &Node) -> String {
    let mut o = String::from("SessionTracker dump:\n");
    let buckets = node.session_buckets();
    let total: usize = buckets.iter().map(|(_, ids)| ids.len()).sum();
    let _ = writeln!(o, "Session Sets ({})/({}):", buckets.len(), total);
    for (at_ms, ids) in &buckets {
        let _ = writeln!(o, "{} expire at {}:", ids.len(), java_date(*at_ms));
        for id in ids {
            let _ = writeln!(o, "\t0x{id:x}");
        }
    }
    o.push_str("ephemeral nodes dump:\n");
    let eph: Vec<_> = node.session_ephemerals().into_iter().filter(|(_, p)| !p.is_empty()).collect();
    let _ = writeln!(o, "Sessions with Ephemerals ({}):", eph.len());
    for (id, paths) in eph {
        let _ = writeln!(o, "0x{id:x}:");
        for p in paths {
            let _ = writeln!(o, "\t{p}");
        }
    }
    o
}

/// A wall-clock time as Java's `Date.toString()` prints it in UTC: `Sun Nov 29 23:12:32 UTC 2026`.
fn java_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = crate::civil::civil_from_days(days);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let month = MONTHS[(m - 1).clamp(0, 11) as usize];
    format!("{weekday} {month} {d:02} {:02}:{:02}:{:02} UTC {y}", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn dirs(cfg: &Config) -> String {
    format!("datadir_size: {}\nlogdir_size: {}\n", dir_size(&cfg.data_dir), dir_size(&cfg.data_log_dir))
}

pub(crate) fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir.join("version-2")) else { return 0 };
    rd.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_print_as_java_does() {
        // 2026-11-29T23:12:32Z, a Sunday (as ZooKeeper 3.8's dump printed it on this machine).
        assert_eq!(super::java_date(1_795_993_952_000), "Sun Nov 29 23:12:32 UTC 2026");
        assert_eq!(super::java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
    }

    #[test]
    fn build_dates_print_in_zookeeper_3_9s_form() {
        // 3.9.3's Info.BUILD_DATE is 2024-10-17 23:21 UTC.
        assert_eq!(crate::civil::built_on(1_729_207_260), "2024-10-17 23:21 UTC");
        assert_eq!(crate::civil::built_on(951_782_459), "2000-02-29 00:00 UTC");
        assert_eq!(crate::civil::built_on(0), "1970-01-01 00:00 UTC");
        let line = super::version_line();
        let built = line.rsplit_once(", built on ").map(|(_, b)| b);
        assert_eq!(built, Some(crate::BUILT_ON));
        let b = crate::BUILT_ON.as_bytes();
        assert!(b.len() == 20 && b[4] == b'-' && b[7] == b'-' && b[10] == b' ' && b[13] == b':', "{line}");
        assert!(crate::BUILT_ON.ends_with(" UTC"), "{line}");
    }
}
