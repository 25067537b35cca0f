//! The AdminServer's commands (ZooKeeper's `Commands.java`): names, aliases, and what each
//! reports, as JSON fields under ZooKeeper's names. They read the same figures as the
//! four-letter words (`fourlw.rs`), so `mntr` and `monitor`, `srvr` and `server_stats`, agree.
//!
//! Where ZooKeeper reports something Warden does not have (a JVM, Jackson's dump of address
//! objects), the field is left out or carries Warden's own figure, as noted per command.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use warden_node::{Node, RoleKind};

use crate::config::{Config, ServerRole};
use crate::election::host_port;
use crate::fourlw::{self, Metric};
use crate::metrics::ShellMetrics;
use crate::quorum_net::{LeaderNet, LearnerLink};

/// The error ZooKeeper answers for a command that needs a serving server.
pub const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

/// One command: its primary name, its aliases, and whether it needs a server that is serving
/// clients (else it answers [`NOT_SERVING`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Command {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub needs_server: bool,
}

const fn cmd(name: &'static str, aliases: &'static [&'static str], needs_server: bool) -> Command {
    Command { name, aliases, needs_server }
}

/// ZooKeeper 3.9's commands, sorted by primary name.
pub const COMMANDS: &[Command] = &[
    cmd("configuration", &["conf", "config"], true),
    cmd("connection_stat_reset", &["crst"], true),
    cmd("connections", &["cons"], true),
    cmd("dirs", &[], true),
    cmd("dump", &[], true),
    cmd("environment", &["env", "envi"], false),
    cmd("get_trace_mask", &["gtmk"], false),
    cmd("hash", &[], true),
    cmd("initial_configuration", &["icfg"], true),
    cmd("is_read_only", &["isro"], true),
    cmd("last_snapshot", &["lsnp"], true),
    cmd("leader", &["lead"], true),
    cmd("monitor", &["mntr"], false),
    cmd("observer_connection_stat_reset", &["orst"], true),
    cmd("observers", &["obsr"], true),
    // Answered by `backup.rs` (POST, authenticated), never by `run`.
    cmd("restore", &["rest"], true),
    cmd("ruok", &[], true),
    cmd("server_stats", &["srvr"], true),
    cmd("set_trace_mask", &["stmk"], false),
    // Answered by `backup.rs` (authenticated, a stream), never by `run`.
    cmd("snapshot", &["snap"], true),
    cmd("stat_reset", &["srst"], true),
    cmd("stats", &["stat"], true),
    cmd("system_properties", &["sysp"], false),
    cmd("voting_view", &[], true),
    cmd("watch_summary", &["wchs"], true),
    cmd("watches", &["wchc"], true),
    cmd("watches_by_path", &["wchp"], true),
    cmd("zabstate", &[], false),
];

/// The command called `name` (its primary name or an alias).
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name || c.aliases.contains(&name))
}

/// What a command answered: its fields, and the error ZooKeeper puts after `command`.
#[derive(Debug, Default)]
pub struct Answer {
    pub fields: Map<String, Value>,
    pub error: Option<String>,
}

impl Answer {
    fn error(why: impl Into<String>) -> Self {
        Answer { fields: Map::new(), error: Some(why.into()) }
    }

    /// The response body: the fields, then `command` and `error` (unless a field named `error`
    /// came first, which keeps its place and value, as in ZooKeeper).
    pub fn into_json(self, command: &str) -> Value {
        let mut m = self.fields;
        m.insert("command".into(), Value::String(command.into()));
        if !m.contains_key("error") {
            m.insert("error".into(), self.error.map_or(Value::Null, Value::String));
        }
        Value::Object(m)
    }
}

/// Runs `cmd` with the query parameters `args` against the node. Resets change the node's
/// counters, as the four-letter words do. `links` is the leader's quorum port, while leading: its
/// learner connections' figures (`observers`, `observer_connection_stat_reset`).
pub(crate) fn run(
    cmd: &Command,
    args: &BTreeMap<String, String>,
    node: &mut Node,
    cfg: &Config,
    shell: &mut ShellMetrics,
    links: Option<&LeaderNet>,
) -> Answer {
    if cmd.needs_server && !node.serving() && !node.read_only() {
        return Answer::error(NOT_SERVING);
    }
    let mut f = Map::new();
    match cmd.name {
        "configuration" => configuration(&mut f, cfg),
        "connection_stat_reset" | "stat_reset" => fourlw::reset_stats(node, shell),
        "connections" => {
            f.insert("connections".into(), Value::Array(connections(node, true)));
            f.insert("secure_connections".into(), json!([]));
        }
        "dirs" => {
            f.insert("datadir_size".into(), json!(fourlw::dir_size(&cfg.data_dir)));
            f.insert("logdir_size".into(), json!(fourlw::dir_size(&cfg.data_log_dir)));
        }
        "dump" => dump(&mut f, node),
        "environment" => {
            for (k, v) in fourlw::environment_rows(cfg) {
                f.insert(k.into(), Value::String(v));
            }
        }
        // Warden has no request tracing to mask: the mask is 0, and setting it changes nothing.
        "get_trace_mask" => {
            f.insert("tracemask".into(), json!(0));
        }
        "set_trace_mask" => match args.get("traceMask").map(|v| v.parse::<i64>()) {
            Some(Ok(_)) => {
                f.insert("tracemask".into(), json!(0));
            }
            // ZooKeeper puts this error among the fields, ahead of `command`.
            _ => {
                f.insert("error".into(), json!("setTraceMask requires long traceMask argument"));
            }
        },
        "initial_configuration" => {
            f.insert("initial_configuration".into(), json!(cfg.initial_text.clone().unwrap_or_default()));
        }
        // The tree digest after every 128th zxid, the last 1024 (`DataTree.getDigestLog`).
        "hash" => {
            let digests: Vec<Value> = node
                .tree()
                .digest_log()
                .map(|d| json!({"zxid": d.zxid, "digest": d.digest, "digest_version": d.version}))
                .collect();
            f.insert("digests".into(), Value::Array(digests));
        }
        "is_read_only" => {
            f.insert("read_only".into(), json!(node.read_only()));
        }
        "last_snapshot" => last_snapshot(&mut f, cfg),
        "leader" => match node.leader_id() {
            None if node.role() == RoleKind::Standalone => {
                f.insert("error".into(), json!("server is not initialized"));
            }
            None => return Answer::error(NOT_SERVING),
            Some(leader) => {
                let leader_ip = cfg.servers.get(&(leader as u64)).map_or(String::new(), |s| s.host.clone());
                f.insert("is_leader".into(), json!(node.role() == RoleKind::Leader));
                f.insert("leader_id".into(), json!(leader));
                f.insert("leader_ip".into(), json!(leader_ip));
            }
        },
        "monitor" => monitor(&mut f, node, shell),
        // ZooKeeper resets its leader's observer handlers' figures; a follower's only with an
        // observer-master port, which Warden does not have, so elsewhere nothing changes.
        "observer_connection_stat_reset" => {
            if let Some(net) = links {
                for sid in node.synced_observers() {
                    net.reset_learner_link(sid);
                }
            }
        }
        "observers" => observers(&mut f, node, links),
        "ruok" => {}
        "server_stats" => server_stats(&mut f, node, cfg, shell),
        "stats" => {
            server_stats(&mut f, node, cfg, shell);
            f.insert("connections".into(), Value::Array(connections(node, false)));
            f.insert("secure_connections".into(), json!([]));
        }
        "system_properties" => system_properties(&mut f),
        "voting_view" => voting_view(&mut f, node, cfg),
        "watch_summary" => {
            let s = node.stats();
            f.insert("num_connections".into(), json!(s.watching_connections));
            f.insert("num_paths".into(), json!(s.watched_paths));
            f.insert("num_total_watches".into(), json!(s.data_watches));
        }
        "watches" => {
            let by_session: Map<String, Value> =
                node.watches_by_session().into_iter().map(|(sid, paths)| (sid.to_string(), json!(paths))).collect();
            f.insert("session_id_to_watched_paths".into(), Value::Object(by_session));
        }
        "watches_by_path" => {
            let by_path: Map<String, Value> =
                node.watches_by_path().into_iter().map(|(path, sids)| (path, json!(sids))).collect();
            f.insert("path_to_session_ids".into(), Value::Object(by_path));
        }
        "zabstate" => zabstate(&mut f, node, cfg),
        other => return Answer::error(format!("Unknown command: {other}")),
    }
    Answer { fields: f, error: None }
}

fn configuration(f: &mut Map<String, Value>, cfg: &Config) {
    f.insert("client_port".into(), json!(cfg.client_port));
    f.insert("data_dir".into(), json!(cfg.data_dir.join("version-2").display().to_string()));
    f.insert("data_log_dir".into(), json!(cfg.data_log_dir.join("version-2").display().to_string()));
    f.insert("tick_time".into(), json!(cfg.tick_time_ms));
    f.insert("max_client_cnxns".into(), json!(cfg.max_client_cnxns));
    f.insert("min_session_timeout".into(), json!(cfg.min_session_timeout_ms));
    f.insert("max_session_timeout".into(), json!(cfg.max_session_timeout_ms));
    f.insert("server_id".into(), json!(cfg.my_id.unwrap_or(0)));
    f.insert("client_port_listen_backlog".into(), json!(-1));
}

/// `observers`: on a leader, its synced observers (`Leader.getObservingLearners`) and each one's
/// connection figures (`LearnerHandler.getLearnerHandlerInfo`), in sid order (ZooKeeper's set has
/// no order). Anywhere else 0 and an empty list, as ZooKeeper answers without a leader's
/// observers (a follower has some only with an observer-master port, which Warden lacks).
fn observers(f: &mut Map<String, Value>, node: &Node, links: Option<&LeaderNet>) {
    let sids = match (node.role(), links) {
        (RoleKind::Leader, Some(_)) => node.synced_observers(),
        _ => Vec::new(),
    };
    let infos: Vec<Value> =
        sids.iter().filter_map(|&sid| Some(learner_handler_info(sid, &links?.learner_link(sid)?))).collect();
    f.insert("synced_observers".into(), json!(sids.len()));
    f.insert("observers".into(), Value::Array(infos));
}

/// `LearnerHandler.getLearnerHandlerInfo`'s map, in its order; `established` is a
/// `java.util.Date`, which Jackson writes as ms since the epoch.
fn learner_handler_info(sid: warden_quorum::Sid, l: &LearnerLink) -> Value {
    let mut m = Map::new();
    m.insert("remote_socket_address".into(), json!(java_socket_address(l.remote_socket_address)));
    m.insert("sid".into(), json!(sid));
    m.insert("established".into(), json!(l.established_ms));
    m.insert("queued_packets".into(), json!(l.queued_packets));
    m.insert("queued_packets_size".into(), json!(l.queued_packets_size));
    m.insert("packets_received".into(), json!(l.packets_received));
    m.insert("packets_sent".into(), json!(l.packets_sent));
    m.insert("requests".into(), json!(l.requests));
    m.insert("last_zxid".into(), json!(l.last_zxid));
    Value::Object(m)
}

/// A socket address as Java's `InetSocketAddress.toString()` prints one the socket reported (no
/// host name looked up): `/127.0.0.1:2888`, `/[0:0:0:0:0:0:0:1]:2888` (JDK 14 and later bracket
/// IPv6; an IPv4-mapped address is IPv4 to Java).
fn java_socket_address(addr: std::net::SocketAddr) -> String {
    use std::net::IpAddr;
    let ip = match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => format!("/{v4}:{}", addr.port()),
        IpAddr::V6(v6) => {
            let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:x}")).collect();
            format!("/[{}]:{}", groups.join(":"), addr.port())
        }
    }
}

/// conn-info: `brief` as `stat` lists them, else in full as `cons` (the fields Warden keeps).
fn connections(node: &Node, full: bool) -> Vec<Value> {
    node.connections()
        .into_iter()
        .map(|c| {
            let mut m = Map::new();
            m.insert("remote_socket_address".into(), json!(c.addr.to_string()));
            m.insert("interest_ops".into(), json!(1));
            m.insert("outstanding_requests".into(), json!(c.queued));
            m.insert("packets_received".into(), json!(c.received));
            m.insert("packets_sent".into(), json!(c.sent));
            if full {
                m.insert("session_id".into(), json!(c.session_id));
                m.insert("session_timeout".into(), json!(c.timeout_ms));
                m.insert("last_zxid".into(), json!(c.last_zxid));
            }
            Value::Object(m)
        })
        .collect()
}

fn dump(f: &mut Map<String, Value>, node: &Node) {
    // Only the leader (or a standalone server) expires sessions; a learner's expiry map is empty
    // in ZooKeeper too (its session tracker does not time sessions out).
    let expiring = matches!(node.role(), RoleKind::Leader | RoleKind::Standalone);
    let expiry: Map<String, Value> = node
        .session_buckets()
        .into_iter()
        .filter(|_| expiring)
        .map(|(at_ms, ids)| (at_ms.to_string(), json!(ids)))
        .collect();
    let ephemerals: Map<String, Value> =
        node.session_ephemerals().into_iter().map(|(sid, paths)| (sid.to_string(), json!(paths))).collect();
    f.insert("expiry_time_to_session_ids".into(), Value::Object(expiry));
    f.insert("session_id_to_ephemeral_paths".into(), Value::Object(ephemerals));
}

/// The newest `snapshot.<zxid>` file of the data directory: its zxid in hex and its time.
fn last_snapshot(f: &mut Map<String, Value>, cfg: &Config) {
    let newest = std::fs::read_dir(cfg.data_dir.join("version-2"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let zxid = u64::from_str_radix(name.strip_prefix("snapshot.")?.split('.').next()?, 16).ok()?;
            let modified = e.metadata().ok()?.modified().ok()?;
            Some((zxid, modified))
        })
        .max_by_key(|(zxid, _)| *zxid);
    let (zxid, secs) = match newest {
        Some((zxid, at)) => {
            let secs = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            (format!("{zxid:x}"), secs as i64)
        }
        None => ("ffffffffffffffff".into(), -1),
    };
    f.insert("zxid".into(), json!(zxid));
    f.insert("timestamp".into(), json!(secs));
}

fn monitor(f: &mut Map<String, Value>, node: &Node, shell: &ShellMetrics) {
    for (k, v) in fourlw::monitor_rows(node, shell) {
        let k = k.as_str();
        let value = match v {
            Metric::Int(i) => json!(i),
            Metric::Float(x) => json!(x),
            Metric::Text(t) => json!(t),
        };
        f.insert(k.into(), value);
        if k == "server_state" {
            if let Some(peer) = peer_state(node) {
                f.insert("peer_state".into(), json!(peer));
            }
        }
    }
}

/// `peer_state`: the quorum state and, once one is known, the Zab phase.
fn peer_state(node: &Node) -> Option<String> {
    let state = match node.role() {
        RoleKind::Standalone => return None,
        RoleKind::Looking => return Some("looking".into()),
        RoleKind::Leader => "leading",
        RoleKind::Follower => "following",
        RoleKind::Observer => "observing",
    };
    let phase = if node.serving() { "broadcast" } else { "synchronization" };
    Some(format!("{state} - {phase}"))
}

fn server_stats(f: &mut Map<String, Value>, node: &Node, cfg: &Config, shell: &ShellMetrics) {
    let s = node.stats();
    f.insert("version".into(), json!(fourlw::version()));
    f.insert("read_only".into(), json!(node.read_only()));
    let stats = json!({
        "packets_sent": s.sent,
        "packets_received": s.received,
        "data_dir_size": fourlw::dir_size(&cfg.data_dir),
        "log_dir_size": fourlw::dir_size(&cfg.data_log_dir),
        "server_state": fourlw::mode(node),
        "last_processed_zxid": s.zxid,
        "outstanding_requests": s.outstanding,
        "avg_latency": (s.latency.avg() * 10_000.0).round() / 10_000.0,
        "max_latency": s.latency.max_ms,
        "min_latency": s.latency.min(),
        "num_alive_client_connections": s.connections,
        "uptime": shell.uptime_ms(),
    });
    f.insert("server_stats".into(), stats);
    f.insert("node_count".into(), json!(s.node_count));
}

/// ZooKeeper lists its JVM's system properties; Warden lists the `-D` properties of
/// `SERVER_JVMFLAGS` / `JVMFLAGS` (what a ZooKeeper started with the same environment would
/// have been given), sorted by name.
fn system_properties(f: &mut Map<String, Value>) {
    let flags = crate::config::jvm_flags_from_env();
    let props: BTreeMap<&str, &str> = flags
        .split_whitespace()
        .filter_map(|flag| flag.strip_prefix("-D"))
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    for (k, v) in props {
        f.insert(k.into(), json!(v));
    }
}

fn voting_view(f: &mut Map<String, Value>, node: &Node, cfg: &Config) {
    let mut view = Map::new();
    if node.role() != RoleKind::Standalone {
        for (id, s) in cfg.servers.iter().filter(|(_, s)| s.role == ServerRole::Participant) {
            let host_port = |port: u16| host_port(&s.host, port);
            view.insert(
                id.to_string(),
                json!({
                    "server_addresses": [host_port(s.quorum_port)],
                    "election_addresses": [host_port(s.election_port)],
                    "client_address": "",
                    "learner_type": "participant",
                }),
            );
        }
    }
    f.insert("current_config".into(), Value::Object(view));
}

/// ZooKeeper's `MultipleAddresses` of one address as Jackson prints the bean: the address in each
/// of its views (Warden's server lines carry one address per port).
fn multiple_addresses(host: &str, port: u16) -> Value {
    let addr = host_port(host, port);
    json!({
        "empty": false,
        "all_addresses": [addr],
        "all_reachable_addresses": [addr],
        "one": addr,
        "reachable_address": addr,
        "wildcard_addresses": [format!("0.0.0.0:{port}")],
        "all_ports": [port],
        "all_host_strings": [host],
        "all_reachable_addresses_or_all": [addr],
        "reachable_or_one": addr,
    })
}

fn zabstate(f: &mut Map<String, Value>, node: &Node, cfg: &Config) {
    let Some(my_sid) = node.my_sid() else {
        f.insert("voting".into(), json!(false));
        f.insert("zabstate".into(), json!(""));
        return;
    };
    let me = cfg.servers.get(&(my_sid as u64));
    let zxid = node.stats().zxid;
    let (epoch, _) = node.epochs().unwrap_or((0, 0));
    let phase = match (node.role(), node.serving()) {
        (RoleKind::Looking, _) => "election",
        (_, true) => "broadcast",
        (_, false) => "synchronization",
    };
    f.insert("myid".into(), json!(my_sid));
    f.insert("is_leader".into(), json!(node.role() == RoleKind::Leader));
    f.insert("quorum_address".into(), me.map_or(Value::Null, |s| multiple_addresses(&s.host, s.quorum_port)));
    f.insert("election_address".into(), me.map_or(Value::Null, |s| multiple_addresses(&s.host, s.election_port)));
    f.insert("client_address".into(), Value::Null);
    f.insert("voting".into(), json!(me.is_some_and(|s| s.role == ServerRole::Participant)));
    f.insert("last_zxid".into(), json!(format!("0x{zxid:x}")));
    f.insert("zab_epoch".into(), json!(epoch));
    f.insert("zab_counter".into(), json!(zxid & 0xffff_ffff));
    f.insert("zabstate".into(), json!(phase));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_and_alias_is_found_once() {
        let mut seen = std::collections::BTreeSet::new();
        for c in COMMANDS {
            for name in std::iter::once(&c.name).chain(c.aliases) {
                assert!(seen.insert(*name), "{name} twice");
                assert_eq!(find(name), Some(c));
            }
        }
        assert_eq!(COMMANDS.len(), 28, "ZooKeeper 3.9 has 28 commands");
        let names: Vec<_> = COMMANDS.iter().map(|c| c.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert_eq!(find("mntr").map(|c| c.name), Some("monitor"));
        assert_eq!(find("nope"), None);
    }

    #[test]
    fn socket_addresses_print_as_java_does() {
        assert_eq!(java_socket_address("127.0.0.1:2888".parse().unwrap()), "/127.0.0.1:2888");
        assert_eq!(java_socket_address("[::1]:2888".parse().unwrap()), "/[0:0:0:0:0:0:0:1]:2888");
        assert_eq!(java_socket_address("[::ffff:10.0.0.2]:5".parse().unwrap()), "/10.0.0.2:5");
        assert_eq!(java_socket_address("[fe80::1:ab]:5".parse().unwrap()), "/[fe80:0:0:0:0:0:1:ab]:5");
    }

    #[test]
    fn command_and_error_follow_the_fields() {
        let mut a = Answer::default();
        a.fields.insert("read_only".into(), json!(false));
        assert_eq!(
            crate::admin::json::to_jackson(&a.into_json("is_read_only")),
            "{\n  \"read_only\" : false,\n  \"command\" : \"is_read_only\",\n  \"error\" : null\n}"
        );
        // A command's own `error` field keeps its place (standalone `leader`).
        let mut a = Answer::default();
        a.fields.insert("error".into(), json!("server is not initialized"));
        let v = a.into_json("leader");
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["error", "command"]);
    }
}
