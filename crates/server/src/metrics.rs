//! Warden's metrics under ZooKeeper's names (`ServerMetrics`, `ZooKeeperServer.registerMetrics`):
//! one list, [`families`], read from the node when asked, that feeds both `mntr` / the `monitor`
//! admin command (ZooKeeper's default provider's keys) and the Prometheus endpoint
//! (`metricsProvider.className=...PrometheusMetricsProvider`, text format 0.0.4 on
//! `metricsProvider.httpHost:httpPort/metrics`).
//!
//! Recording costs the request path nothing extra: the counters and summaries live in the node,
//! which one task owns, so a sample is a plain add (and, for a summary, an HdrHistogram
//! increment, allocation-free); gauges are computed at read time.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use warden_node::{Node, Summary};

use crate::fourlw::Metric;

/// The figures the shell keeps (the node keeps the rest): when the server started, and how long
/// the transaction log's fsyncs take (ZooKeeper's `fsynctime`, recorded by the owner from what
/// the storage thread reports, or from its own inline sync).
pub(crate) struct ShellMetrics {
    started: std::time::Instant,
    /// What the connection tasks count.
    pub edge: Arc<EdgeCounters>,
    /// Txns per append handed to the storage thread or written inline: the group-commit batch
    /// (`sync_processor_batch_size`), and their total (`sync_processor_request_queued`).
    pub batch_size: Summary,
    pub txns_queued: u64,
    /// Start-up: log txns replayed after the snapshot, and how long the snapshot and the replay
    /// took (`startup_txns_loaded`, `startup_snap_load_time`, `startup_txns_load_time`).
    pub startup_txns_loaded: Summary,
    pub startup_snap_load_time: Summary,
    pub startup_txns_load_time: Summary,
    pub fsync: Summary,
    /// Snapshot writes (`snapshottime`), taken from the snapshot thread.
    pub snapshot: Summary,
    /// Warden's own: how long each snapshot paused so the transaction log's fsyncs went first
    /// (`warden_snapshot_paused_ms`; the snapshot thread's pacing).
    pub snapshot_paused: Summary,
    /// The admin `snapshot` / `restore` commands: refused by the rate limiter, failed, and how
    /// long a restore took (`snapshot_rate_limited_count`, `snapshot_error_count`,
    /// `restore_rate_limited_count`, `restore_error_count`, `restore_time`; ZooKeeper 3.9).
    pub snapshot_rate_limited: u64,
    pub snapshot_errors: u64,
    pub restore_rate_limited: u64,
    pub restore_errors: u64,
    pub restore_time: Summary,
    /// Loading the data at start-up (`dbinittime`).
    pub dbinit: Summary,
    /// The summary of the figures Warden never records (`families`): always empty.
    pub never: Summary,
    /// ZooKeeper's SyncRequestProcessor figures, per message the storage thread carried out
    /// (`MsgTiming`): `sync_processor_queue_size`, `sync_processor_queue_time_ms`,
    /// `sync_process_time`, `sync_processor_queue_and_flush_time_ms`.
    pub sync_queue_size: Summary,
    pub sync_queue_time: Summary,
    pub sync_process_time: Summary,
    pub sync_queue_and_flush: Summary,
}

impl ShellMetrics {
    pub(crate) fn record_sync_message(&mut self, t: crate::storage::MsgTiming) {
        self.sync_queue_size.record(t.queue_size);
        self.sync_queue_time.record(t.queue_ms);
        self.sync_process_time.record(t.process_ms);
        self.sync_queue_and_flush.record(t.queue_and_flush_ms);
    }

    pub(crate) fn new(edge: Arc<EdgeCounters>) -> Self {
        Self {
            started: std::time::Instant::now(),
            edge,
            batch_size: Summary::default(),
            txns_queued: 0,
            startup_txns_loaded: Summary::default(),
            startup_snap_load_time: Summary::default(),
            startup_txns_load_time: Summary::default(),
            fsync: Summary::default(),
            snapshot: Summary::default(),
            snapshot_paused: Summary::default(),
            snapshot_rate_limited: 0,
            snapshot_errors: 0,
            restore_rate_limited: 0,
            restore_errors: 0,
            restore_time: Summary::default(),
            dbinit: Summary::default(),
            never: Summary::default(),
            sync_queue_size: Summary::default(),
            sync_queue_time: Summary::default(),
            sync_process_time: Summary::default(),
            sync_queue_and_flush: Summary::default(),
        }
    }

    pub(crate) fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// `srst`: ZooKeeper's default provider resets its summaries too.
    pub(crate) fn reset(&mut self) {
        self.fsync.reset();
        self.snapshot.reset();
        self.snapshot_paused.reset();
        self.restore_time.reset();
        self.dbinit.reset();
        self.batch_size.reset();
    }
}

/// The counters the connection tasks keep (they run apart from the owner): a relaxed atomic add
/// each, no lock; and the client port's TLS context, for its handshakes in flight. Shared by the
/// accept loop, every connection task and the owner, which reads them into [`families`].
#[derive(Default)]
pub(crate) struct EdgeCounters {
    /// Bytes read from client connections (`bytes_received_count`).
    pub bytes_received: AtomicU64,
    /// Connections closed at accept by `maxClientCnxns` (`connection_rejected`).
    pub connection_rejected: AtomicU64,
    /// TLS handshakes with clients that failed or timed out (`unsuccessful_handshake`; ZooKeeper
    /// counts them in `auth_failed_count` too).
    pub unsuccessful_handshake: AtomicU64,
    /// TLS connections closed because too many handshakes were in flight
    /// (`netty.server.outstandingHandshake.limit`; `tls_handshake_exceeded`).
    pub tls_handshake_exceeded: AtomicU64,
    /// The client port's TLS context, whose handshake slots count the handshakes in progress
    /// (`outstanding_tls_handshake`).
    pub client_tls: Option<Arc<crate::tls::TlsContext>>,
    /// Client connections accepted without TLS, from a non-loopback and a loopback address
    /// (`non_mtls_remote_conn_count`, `non_mtls_local_conn_count`, as ZooKeeper's Netty factory
    /// counts them).
    pub non_mtls_remote_conn: AtomicU64,
    pub non_mtls_local_conn: AtomicU64,
    /// Connections closed for sending no ConnectRequest in time
    /// (`sessionless_connections_expired`).
    pub sessionless_connections_expired: AtomicU64,
}

impl EdgeCounters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// One metric's value when read.
pub(crate) enum Family<'a> {
    Gauge(Metric),
    /// Only grows (Prometheus type `counter`, without `_total`, as simpleclient 0.9 wrote it).
    Counter(u64),
    /// A summary; `advanced` ones also report p50/p95/p99/p999 in `mntr` and the 0.9 and 0.99
    /// quantiles in Prometheus (ZooKeeper's `SummaryLevel.ADVANCED`).
    Summary {
        summary: &'a Summary,
        advanced: bool,
    },
    /// A BASIC summary per key (ZooKeeper's `SummarySet`): `avg_<key>_<name>`, ... in `mntr`,
    /// the label `key` in Prometheus. Keys sorted.
    Set(Vec<(&'a str, &'a Summary)>),
}

impl Family<'_> {
    /// The `mntr` / `monitor` rows of this metric (ZooKeeper's default provider's names).
    pub(crate) fn expand(&self, name: &str, rows: &mut Vec<(String, Metric)>) {
        match self {
            Family::Gauge(v) => rows.push((name.to_string(), v.clone())),
            Family::Counter(n) => rows.push((name.to_string(), Metric::count(*n))),
            Family::Summary { summary: s, advanced } => {
                let int = Metric::count;
                rows.push((format!("avg_{name}"), Metric::Float(s.avg())));
                rows.push((format!("min_{name}"), int(s.min)));
                rows.push((format!("max_{name}"), int(s.max)));
                rows.push((format!("cnt_{name}"), int(s.count)));
                rows.push((format!("sum_{name}"), int(s.sum)));
                if *advanced {
                    for (p, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999)] {
                        rows.push((format!("{p}_{name}"), int(s.quantile(q))));
                    }
                }
            }
            Family::Set(set) => {
                for (key, summary) in set {
                    Family::Summary { summary, advanced: false }.expand(&format!("{key}_{name}"), rows);
                }
            }
        }
    }
}

/// A set's summaries in key order.
fn sorted_set(set: &std::collections::HashMap<Box<str>, Summary, warden_tree::FastHash>) -> Vec<(&str, &Summary)> {
    let mut v: Vec<(&str, &Summary)> = set.iter().map(|(k, s)| (&**k, s)).collect();
    v.sort_unstable_by_key(|(k, _)| *k);
    v
}

/// Every metric Warden reports, in a fixed order.
pub(crate) fn families<'a>(node: &'a Node, shell: &'a ShellMetrics) -> Vec<(&'static str, Family<'a>)> {
    let s = node.stats();
    let int = |v: u64| Family::Gauge(Metric::count(v));
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let mut v = vec![
        ("uptime", int(shell.uptime_ms())),
        ("open_file_descriptor_count", int(open_fds as u64)),
        ("max_file_descriptor_count", int(max_open_files())),
        ("local_sessions", int(0)),
        ("avg_latency", Family::Gauge(Metric::Float(s.latency.avg()))),
        ("max_latency", int(s.latency.max_ms)),
        ("min_latency", int(s.latency.min())),
        ("packets_received", int(s.received)),
        ("packets_sent", int(s.sent)),
        ("num_alive_connections", int(s.connections as u64)),
        ("outstanding_requests", int(s.outstanding as u64)),
        ("znode_count", int(s.node_count as u64)),
        ("watch_count", int(s.watch_count as u64)),
        ("ephemerals_count", int(s.ephemerals as u64)),
        ("approximate_data_size", int(s.approximate_data_size)),
        ("global_sessions", int(s.sessions as u64)),
    ];
    let c = node.counters();
    let e = &shell.edge;
    let (changes_queued, changes_removed) = node.outstanding_changes();
    let counters = [
        ("connection_request_count", c.connection_request_count),
        ("looking_count", c.looking_count),
        ("diff_count", c.diff_count),
        ("snap_count", c.snap_count),
        ("commit_count", c.commit_count),
        ("proposal_count", c.proposal_count),
        ("learner_proposal_received_count", c.learner_proposal_received_count),
        ("learner_commit_received_count", c.learner_commit_received_count),
        ("revalidate_count", c.revalidate_count),
        ("stale_sessions_expired", c.stale_sessions_expired),
        ("digest_mismatches_count", node.digest_mismatches()),
        ("connection_revalidate_count", c.connection_revalidate_count),
        ("stale_replies", c.stale_replies),
        ("cnxn_closed_without_zk_server_running", c.cnxn_closed_without_zk_server_running),
        ("outstanding_changes_queued", changes_queued),
        ("outstanding_changes_removed", changes_removed),
        ("bytes_received_count", EdgeCounters::get(&e.bytes_received)),
        ("connection_rejected", EdgeCounters::get(&e.connection_rejected)),
        ("unsuccessful_handshake", EdgeCounters::get(&e.unsuccessful_handshake)),
        ("tls_handshake_exceeded", EdgeCounters::get(&e.tls_handshake_exceeded)),
        ("sessionless_connections_expired", EdgeCounters::get(&e.sessionless_connections_expired)),
        ("sync_processor_request_queued", shell.txns_queued),
        ("snapshot_rate_limited_count", shell.snapshot_rate_limited),
        ("snapshot_error_count", shell.snapshot_errors),
        ("restore_rate_limited_count", shell.restore_rate_limited),
        ("restore_error_count", shell.restore_errors),
        ("response_bytes", c.response_bytes),
        ("watch_bytes", c.watch_bytes),
        // ZooKeeper counts plain HTTP on an AdminServer port unified with HTTPS; Warden's
        // AdminServer has no HTTPS to unify with, so, as on a ZooKeeper without it, none.
        ("insecure_admin_count", 0),
        // Counted by ZooKeeper's `ensemble` auth scheme (`zookeeper.ensembleAuthName`), which
        // Warden does not offer: as on a ZooKeeper server without it, nothing is ever counted.
        ("ensemble_auth_success", 0),
        ("ensemble_auth_fail", 0),
        ("ensemble_auth_skip", 0),
        // Features Warden does not have, counted as ZooKeeper counts them with the feature off,
        // its default: request throttling (`RequestThrottler`, `zookeeper.request_throttle_*`),
        // large-request limits (`largeRequestThreshold`), connection throttling (BlueThrottle),
        // the response cache (Warden serialises each answer), the optimised watch manager's
        // dead-watcher cleaner, and giving up leadership after `leader.maxTimeToWaitForEpoch`.
        ("throttled_ops", 0),
        ("request_throttle_wait_count", 0),
        ("stale_requests", 0),
        ("stale_requests_dropped", 0),
        ("large_requests_rejected", 0),
        ("connection_drop_count", 0),
        ("response_packet_cache_hits", 0),
        ("response_packet_cache_misses", 0),
        ("response_packet_get_children_cache_hits", 0),
        ("response_packet_get_children_cache_misses", 0),
        ("dead_watchers_queued", 0),
        ("dead_watchers_cleared", 0),
        ("add_dead_watcher_stall_time", 0),
        ("quit_leading_due_to_disloyal_voter", 0),
        // ZooKeeper registers it and counts nothing in it.
        ("prep_processor_request_queued", 0),
        // Warden stops at its first unrecoverable error (a failed log write), so a server that
        // answers has had none.
        ("unrecoverable_error_count", 0),
    ];
    v.extend(counters.into_iter().map(|(name, n)| (name, Family::Counter(n))));
    // ZooKeeper's `auth_failed_count` counts refused auth packets and failed TLS handshakes.
    v.push(("auth_failed_count", int(c.auth_failed_count + EdgeCounters::get(&e.unsuccessful_handshake))));
    let handshakes = e.client_tls.as_ref().map_or(0, |t| t.handshakes_in_flight());
    v.push(("outstanding_tls_handshake", int(handshakes as u64)));
    // BlueThrottle's drop chance: no connection throttling, so none.
    v.push(("connection_drop_probability", Family::Gauge(Metric::Float(0.0))));
    v.push(("non_mtls_remote_conn_count", int(EdgeCounters::get(&e.non_mtls_remote_conn))));
    v.push(("non_mtls_local_conn_count", int(EdgeCounters::get(&e.non_mtls_local_conn))));
    let sizes = node.response_sizes();
    let signed = |v: i64| Family::Gauge(Metric::Int(v));
    v.push(("last_client_response_size", signed(sizes.last)));
    v.push(("min_client_response_size", signed(sizes.min)));
    v.push(("max_client_response_size", signed(sizes.max)));
    if let Some(n) = node.quorum_size() {
        v.push(("quorum_size", int(n as u64)));
    }
    if let Some(g) = node.leader_gauges() {
        v.push(("learners", int(g.learners as u64)));
        v.push(("synced_followers", int(g.synced_followers as u64)));
        v.push(("synced_observers", int(g.synced_observers as u64)));
        v.push(("pending_syncs", int(g.pending_syncs as u64)));
    }
    for (name, summary) in node.summaries().named() {
        v.push((name, Family::Summary { summary, advanced: is_advanced(name) }));
    }
    let sizes = node.namespace_sizes();
    v.push(("write_per_namespace", Family::Set(sorted_set(&sizes.writes))));
    v.push(("read_per_namespace", Family::Set(sorted_set(&sizes.reads))));
    let basic = |summary| Family::Summary { summary, advanced: false };
    v.push(("fsynctime", basic(&shell.fsync)));
    v.push(("snapshottime", basic(&shell.snapshot)));
    v.push(("dbinittime", basic(&shell.dbinit)));
    v.push(("sync_processor_batch_size", basic(&shell.batch_size)));
    v.push(("sync_processor_queue_size", basic(&shell.sync_queue_size)));
    v.push(("sync_process_time", basic(&shell.sync_process_time)));
    let advanced = |summary| Family::Summary { summary, advanced: true };
    v.push(("sync_processor_queue_time_ms", advanced(&shell.sync_queue_time)));
    v.push(("sync_processor_queue_and_flush_time_ms", advanced(&shell.sync_queue_and_flush)));
    v.push(("startup_txns_loaded", basic(&shell.startup_txns_loaded)));
    v.push(("startup_txns_load_time", basic(&shell.startup_txns_load_time)));
    v.push(("startup_snap_load_time", basic(&shell.startup_snap_load_time)));
    v.push(("restore_time", basic(&shell.restore_time)));
    // Summaries of what Warden never does, empty as on a ZooKeeper with the feature off:
    // request and connection throttling, the ObserverMaster (observers served by followers), the
    // Netty connection factory's buffers, the optimised watch manager's cleaner, the JVM pause
    // monitor (`jvm.pause.monitor`, off by default), and one ZooKeeper registers and never fills.
    for (name, advanced) in [
        ("request_throttle_queue_time_ms", true),
        ("connection_token_deficit", false),
        ("om_proposal_process_time_ms", true),
        ("om_commit_process_time_ms", true),
        ("netty_queued_buffer_capacity", false),
        ("dead_watchers_cleaner_latency", true),
        ("jvm_pause_time_ms", true),
        ("sync_processor_queue_flush_time_ms", true),
    ] {
        v.push((name, Family::Summary { summary: &shell.never, advanced }));
    }
    // Warden's own, under its prefix.
    v.push(("warden_snapshot_paused_ms", basic(&shell.snapshot_paused)));
    v
}

/// ZooKeeper's `DetailLevel.ADVANCED` summaries among the node's (the rest are BASIC).
fn is_advanced(name: &str) -> bool {
    matches!(
        name,
        "readlatency"
            | "updatelatency"
            | "propagation_latency"
            | "quorum_ack_latency"
            | "proposal_latency"
            | "commit_propagation_latency"
            | "proposal_ack_creation_latency"
    )
}

/// The soft limit on open files (ZooKeeper's `max_file_descriptor_count`).
fn max_open_files() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The Prometheus text exposition (format 0.0.4) of [`families`], as ZooKeeper's
/// PrometheusMetricsProvider (simpleclient 0.9) writes it: `# HELP` and `# TYPE` lines, values as
/// doubles, counters without `_total`, summaries with quantiles, `_count` and `_sum`.
pub(crate) fn prometheus_text(node: &Node, shell: &ShellMetrics) -> String {
    let mut out = String::new();
    for (name, family) in families(node, shell) {
        match family {
            Family::Gauge(v) => {
                let value = match v {
                    Metric::Int(i) => i as f64,
                    Metric::Float(f) => f,
                    Metric::Text(_) => continue,
                };
                let _ = write!(out, "# HELP {name} {name}\n# TYPE {name} gauge\n{name} {}\n", double(value));
            }
            Family::Counter(n) => {
                let _ = write!(out, "# HELP {name} {name}\n# TYPE {name} counter\n{name} {}\n", double(n as f64));
            }
            Family::Summary { summary, advanced } => {
                let _ = write!(out, "# HELP {name} {name}\n# TYPE {name} summary\n");
                let quantiles: &[f64] = if advanced { &[0.5, 0.9, 0.99] } else { &[0.5] };
                for q in quantiles {
                    let _ = writeln!(out, "{name}{{quantile=\"{q}\",}} {}", double(summary.quantile(*q) as f64));
                }
                let _ = writeln!(out, "{name}_count {}", double(summary.count as f64));
                let _ = writeln!(out, "{name}_sum {}", double(summary.sum as f64));
            }
            Family::Set(set) => {
                let _ = write!(out, "# HELP {name} {name}\n# TYPE {name} summary\n");
                for (key, s) in set {
                    let key = key.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                    let _ =
                        writeln!(out, "{name}{{key=\"{key}\",quantile=\"0.5\",}} {}", double(s.quantile(0.5) as f64));
                    let _ = writeln!(out, "{name}_count{{key=\"{key}\",}} {}", double(s.count as f64));
                    let _ = writeln!(out, "{name}_sum{{key=\"{key}\",}} {}", double(s.sum as f64));
                }
            }
        }
    }
    out
}

/// A value as Java prints a double (`10.0`, `0.25`).
fn double(v: f64) -> String {
    format!("{v:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summary set expands as ZooKeeper's `AvgMinMaxCounterSet`: `avg_<key>_<name>`, ... per key.
    #[test]
    fn summary_sets_expand_per_key() {
        let mut s = Summary::coarse();
        s.record(3);
        s.record(5);
        let mut rows = Vec::new();
        Family::Set(vec![("app", &s)]).expand("write_per_namespace", &mut rows);
        let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "avg_app_write_per_namespace",
                "min_app_write_per_namespace",
                "max_app_write_per_namespace",
                "cnt_app_write_per_namespace",
                "sum_app_write_per_namespace"
            ]
        );
        assert_eq!(rows[0].1, Metric::Float(4.0));
    }

    #[test]
    fn summaries_expand_as_zookeepers_default_provider() {
        let mut s = Summary::default();
        for v in [1, 2, 3, 10] {
            s.record(v);
        }
        let mut rows = Vec::new();
        Family::Summary { summary: &s, advanced: true }.expand("readlatency", &mut rows);
        let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "avg_readlatency",
                "min_readlatency",
                "max_readlatency",
                "cnt_readlatency",
                "sum_readlatency",
                "p50_readlatency",
                "p95_readlatency",
                "p99_readlatency",
                "p999_readlatency"
            ]
        );
        assert_eq!(rows[0].1, Metric::Float(4.0));
        assert_eq!(
            (rows[1].1.clone(), rows[2].1.clone(), rows[3].1.clone()),
            (Metric::Int(1), Metric::Int(10), Metric::Int(4))
        );
        assert_eq!(rows[5].1, Metric::Int(2), "p50");
        assert_eq!(rows[8].1, Metric::Int(10), "p999");
        let mut basic = Vec::new();
        Family::Summary { summary: &Summary::default(), advanced: false }.expand("fsynctime", &mut basic);
        assert_eq!(basic.len(), 5);
        assert_eq!(basic[0].1, Metric::Float(0.0), "avg of nothing");
    }
}
