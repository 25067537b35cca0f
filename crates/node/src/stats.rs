//! Figures the four-letter words and metrics report, read from the node without changing it.

use std::collections::HashMap;
use std::net::SocketAddr;

use warden_tree::WatchTableKind;

use crate::node::{ConnId, Node};

/// Request latency in milliseconds: min, max, total and count since the last reset.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub min_ms: u64,
    pub max_ms: u64,
    pub total_ms: u64,
    pub count: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Self { min_ms: u64::MAX, max_ms: 0, total_ms: 0, count: 0 }
    }
}

impl Latency {
    pub fn record(&mut self, ms: u64) {
        self.min_ms = self.min_ms.min(ms);
        self.max_ms = self.max_ms.max(ms);
        self.total_ms += ms;
        self.count += 1;
    }

    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min_ms
        }
    }

    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ms as f64 / self.count as f64
        }
    }
}

/// Which latency summary a reply counts in: ZooKeeper's `readlatency` (reads answered here) or
/// `updatelatency` (writes from this server's clients, once committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatencyKind {
    Read,
    Update,
}

/// One of ZooKeeper's summaries, in milliseconds: count, sum, min and max since the last reset,
/// and an HdrHistogram (2 significant digits, up to an hour) for its quantiles. Made once;
/// recording allocates nothing.
#[derive(Debug, Clone)]
pub struct Summary {
    hist: hdrhistogram::Histogram<u64>,
    pub count: u64,
    pub sum: u64,
    pub min: u64,
    pub max: u64,
}

/// The largest value a summary tells apart (an hour in ms); larger ones count as this.
const SUMMARY_MAX: u64 = 3_600_000;

impl Default for Summary {
    fn default() -> Self {
        Self {
            hist: hdrhistogram::Histogram::new_with_max(SUMMARY_MAX, 2).expect("valid histogram bounds"),
            count: 0,
            sum: 0,
            min: 0,
            max: 0,
        }
    }
}

impl Summary {
    pub fn record(&mut self, v: u64) {
        // In range by construction: clamped to the histogram's maximum.
        let _ = self.hist.record(v.min(SUMMARY_MAX));
        self.min = if self.count == 0 { v } else { self.min.min(v) };
        self.max = self.max.max(v);
        self.count += 1;
        self.sum += v;
    }

    /// The value at quantile `q` (0.0-1.0); 0 before the first sample.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.hist.value_at_quantile(q)
        }
    }

    /// ZooKeeper's `avg_`: the mean rounded half-up to 4 decimals, 0.0 when empty.
    pub fn avg(&self) -> f64 {
        match self.count {
            0 => 0.0,
            n => (self.sum as f64 / n as f64 * 10_000.0).round() / 10_000.0,
        }
    }

    /// A summary whose quantiles need only be rough (1 significant digit): an eighth of the
    /// memory, for summaries kept per key.
    pub fn coarse() -> Self {
        Self {
            hist: hdrhistogram::Histogram::new_with_max(SUMMARY_MAX, 1).expect("valid histogram bounds"),
            ..Self::default()
        }
    }

    pub fn reset(&mut self) {
        self.hist.reset();
        self.count = 0;
        self.sum = 0;
        self.min = 0;
        self.max = 0;
    }
}

/// ZooKeeper's counters this node keeps: they only grow (`srst` leaves them, as it leaves
/// ZooKeeper's Prometheus counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// ConnectRequests received (`connection_request_count`).
    pub connection_request_count: u64,
    /// Times this server went LOOKING, its start included (`looking_count`).
    pub looking_count: u64,
    /// Leader: txns proposed (`proposal_count`).
    pub proposal_count: u64,
    /// Leader: txns committed (`commit_count`).
    pub commit_count: u64,
    /// Leader: learners synced by DIFF or TRUNC (`diff_count`) and by SNAP (`snap_count`).
    pub diff_count: u64,
    pub snap_count: u64,
    /// Learner: PROPOSAL and COMMIT packets received once synced
    /// (`learner_proposal_received_count`, `learner_commit_received_count`).
    pub learner_proposal_received_count: u64,
    pub learner_commit_received_count: u64,
    /// Learner: sessions of reconnecting clients sent to the leader for revalidation
    /// (`revalidate_count`).
    pub revalidate_count: u64,
    /// Digest mismatches seen by trees this server has since replaced (`Node::digest_mismatches`).
    pub digest_mismatches_count: u64,
    /// Client connections closed because this server was not serving (LOOKING, or syncing with
    /// its leader) (`cnxn_closed_without_zk_server_running`).
    pub cnxn_closed_without_zk_server_running: u64,
    /// Clients that reconnected with their session (`connection_revalidate_count`).
    pub connection_revalidate_count: u64,
    /// Replies to requests whose connection had closed before they were answered
    /// (`stale_replies`).
    pub stale_replies: u64,
    /// Sessions this server expired (`stale_sessions_expired`).
    pub stale_sessions_expired: u64,
    /// Authentications refused: a bad digest, a failed SASL exchange (`auth_failed_count`).
    pub auth_failed_count: u64,
    /// Bytes of request replies (`response_bytes`) and of watch notifications (`watch_bytes`)
    /// sent, frames without their 4-byte length.
    pub response_bytes: u64,
    pub watch_bytes: u64,
}

/// ZooKeeper's `client_response_stats` (`BufferStats`): the size of the last packet sent to a
/// client (a reply or a notification, without its length prefix) and the smallest and largest
/// since the last reset; -1 before the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseSizes {
    pub last: i64,
    pub min: i64,
    pub max: i64,
}

impl Default for ResponseSizes {
    fn default() -> Self {
        Self { last: -1, min: -1, max: -1 }
    }
}

impl ResponseSizes {
    pub fn record(&mut self, size: usize) {
        let size = size as i64;
        self.last = size;
        self.min = if self.min == -1 { size } else { self.min.min(size) };
        self.max = self.max.max(size);
    }
}

/// The most namespaces (top-level znodes) kept apart in each of [`NamespaceSizes`]' sets; the
/// reads and writes of any more are not counted (ZooKeeper keeps one summary per namespace,
/// without a limit).
pub const NAMESPACES_KEPT: usize = 256;

/// ZooKeeper's `read_per_namespace` and `write_per_namespace` (`DataTree.updateReadStat` /
/// `updateWriteStat`): bytes read and written, per namespace, the first component of the path.
/// A read counts the path, the data or the child names, and a Stat (68 bytes); a write the path
/// and the data written (a delete: the path).
#[derive(Debug, Clone, Default)]
pub struct NamespaceSizes {
    pub reads: HashMap<Box<str>, Summary, warden_tree::FastHash>,
    pub writes: HashMap<Box<str>, Summary, warden_tree::FastHash>,
}

/// ZooKeeper's `DataTree.STAT_OVERHEAD_BYTES`: a serialized Stat.
pub const STAT_OVERHEAD_BYTES: u64 = 6 * 8 + 5 * 4;

impl NamespaceSizes {
    pub fn read(&mut self, path: &str, bytes: usize) {
        record_in(&mut self.reads, path, (path.len() + bytes) as u64 + STAT_OVERHEAD_BYTES);
    }

    pub fn write(&mut self, path: &str, bytes: usize) {
        record_in(&mut self.writes, path, (path.len() + bytes) as u64);
    }
}

/// `PathUtils.getTopNamespace`: the first component of the path, none for the root.
pub fn top_namespace(path: &str) -> Option<&str> {
    let rest = path.strip_prefix('/')?;
    // A byte scan: paths are short, and this runs on every read and write.
    let end = rest.bytes().position(|b| b == b'/').unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

fn record_in(set: &mut HashMap<Box<str>, Summary, warden_tree::FastHash>, path: &str, v: u64) {
    let Some(ns) = top_namespace(path) else { return };
    if let Some(s) = set.get_mut(ns) {
        s.record(v);
    } else if set.len() < NAMESPACES_KEPT {
        set.entry(ns.into()).or_insert_with(Summary::coarse).record(v);
    }
}

/// ZooKeeper's summaries this node keeps (milliseconds, or counts where the name says so), reset
/// by `srst`.
#[derive(Debug, Clone, Default)]
pub struct Summaries {
    /// Reads answered here, arrival to reply (`readlatency`).
    pub read_latency: Summary,
    /// Writes of this server's clients, arrival to reply (`updatelatency`).
    pub update_latency: Summary,
    /// Every txn applied: wall time now minus the txn's time, as the leader stamped it
    /// (`propagation_latency`).
    pub propagation_latency: Summary,
    /// Leader: a proposal's age when a quorum had ACKed it (`quorum_ack_latency`).
    pub quorum_ack_latency: Summary,
    /// LOOKING to a role (`election_time`).
    pub election_time: Summary,
    /// Following (observing) to synced with the leader (`follower_sync_time`, `observer_sync_time`).
    pub follower_sync_time: Summary,
    pub observer_sync_time: Summary,
    /// From going LOOKING until serving again in the new role (`unavailable_time`); the leader's
    /// alone (`leader_unavailable_time`).
    pub unavailable_time: Summary,
    pub leader_unavailable_time: Summary,
    /// Watches one change fired, when it fired any (`node_created_watch_count`, ...).
    pub node_created_watch_count: Summary,
    pub node_deleted_watch_count: Summary,
    pub node_changed_watch_count: Summary,
    pub node_children_watch_count: Summary,
    /// Follower: a proposal's age (wall time minus the txn's) when it arrived once synced
    /// (`proposal_latency`).
    pub proposal_latency: Summary,
    /// Learner: a txn's age when its COMMIT (an observer's INFORM) was applied
    /// (`commit_propagation_latency`).
    pub commit_propagation_latency: Summary,
    /// A txn's age when this server's log made it durable, which is when it ACKs it (the
    /// leader's own ACK included) (`proposal_ack_creation_latency`).
    pub proposal_ack_creation_latency: Summary,
    /// Leader: syncs in progress (this one included) when a DIFF or a SNAP starts
    /// (`inflight_diff_count`, `inflight_snap_count`).
    pub inflight_diff_count: Summary,
    pub inflight_snap_count: Summary,
}

impl Summaries {
    /// Each summary under ZooKeeper's name, in `ServerMetrics`' order.
    pub fn named(&self) -> [(&'static str, &Summary); 18] {
        [
            ("readlatency", &self.read_latency),
            ("updatelatency", &self.update_latency),
            ("propagation_latency", &self.propagation_latency),
            ("follower_sync_time", &self.follower_sync_time),
            ("observer_sync_time", &self.observer_sync_time),
            ("election_time", &self.election_time),
            ("node_created_watch_count", &self.node_created_watch_count),
            ("node_deleted_watch_count", &self.node_deleted_watch_count),
            ("node_changed_watch_count", &self.node_changed_watch_count),
            ("node_children_watch_count", &self.node_children_watch_count),
            ("quorum_ack_latency", &self.quorum_ack_latency),
            ("unavailable_time", &self.unavailable_time),
            ("leader_unavailable_time", &self.leader_unavailable_time),
            ("proposal_latency", &self.proposal_latency),
            ("commit_propagation_latency", &self.commit_propagation_latency),
            ("proposal_ack_creation_latency", &self.proposal_ack_creation_latency),
            ("inflight_diff_count", &self.inflight_diff_count),
            ("inflight_snap_count", &self.inflight_snap_count),
        ]
    }

    fn reset(&mut self) {
        *self = Summaries::default();
    }
}

/// A snapshot of the node's counters.
#[derive(Debug, Clone)]
pub struct NodeStats {
    pub zxid: i64,
    pub node_count: usize,
    pub connections: usize,
    pub outstanding: usize,
    pub sessions: usize,
    pub ephemerals: usize,
    /// Watches in both tables (`mntr` zk_watch_count).
    pub watch_count: usize,
    /// (path, connection) pairs in the data table (`wchs` Total watches).
    pub data_watches: usize,
    pub watched_paths: usize,
    pub watching_connections: usize,
    pub approximate_data_size: u64,
    pub latency: Latency,
    pub received: u64,
    pub sent: u64,
}

/// One connection, as `cons` and `stat` list it.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub conn: ConnId,
    pub addr: SocketAddr,
    pub session_id: i64,
    pub timeout_ms: u32,
    pub queued: usize,
    pub received: u64,
    pub sent: u64,
    pub last_zxid: i64,
}

impl Node {
    pub fn stats(&self) -> NodeStats {
        // ZooKeeper's wchs/mntr report the data-watch table.
        let summary = self.watches.summary(WatchTableKind::Data);
        NodeStats {
            zxid: self.tree.last_processed_zxid(),
            node_count: self.tree.node_count(),
            connections: self.conns.len(),
            outstanding: self.conns.values().map(|c| c.queue.len()).sum(),
            sessions: self.sessions.len(),
            ephemerals: self.tree.ephemerals_count(),
            watch_count: self.watches.watch_count(),
            data_watches: summary.total,
            watched_paths: summary.paths,
            watching_connections: summary.connections,
            approximate_data_size: self.tree.approximate_data_size(),
            latency: self.latency,
            received: self.conns.values().map(|c| c.received).sum(),
            sent: self.conns.values().map(|c| c.sent).sum(),
        }
    }

    pub fn connections(&self) -> Vec<ConnInfo> {
        let mut v: Vec<ConnInfo> = self
            .conns
            .iter()
            .map(|(id, c)| ConnInfo {
                conn: *id,
                addr: c.addr,
                session_id: c.session_id,
                timeout_ms: c.timeout_ms,
                queued: c.queue.len(),
                received: c.received,
                sent: c.sent,
                last_zxid: c.last_zxid,
            })
            .collect();
        v.sort_by_key(|c| c.conn);
        v
    }

    /// ZooKeeper's counters this node keeps.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The sizes of the packets sent to clients (`last_client_response_size`, ...).
    pub fn response_sizes(&self) -> ResponseSizes {
        self.response_sizes
    }

    /// ZooKeeper's summaries this node keeps.
    pub fn summaries(&self) -> &Summaries {
        &self.summaries
    }

    /// Bytes read and written per namespace.
    pub fn namespace_sizes(&self) -> &NamespaceSizes {
        &self.namespace_sizes
    }

    /// Resets latency and packet counters (`srst`, `crst`).
    pub fn reset_stats(&mut self) {
        self.latency = Latency::default();
        self.summaries.reset();
        self.namespace_sizes = NamespaceSizes::default();
        self.response_sizes = ResponseSizes::default();
        for c in self.conns.values_mut() {
            c.received = 0;
            c.sent = 0;
        }
    }

    /// Live sessions with their ephemeral paths, for `dump`.
    pub fn session_ephemerals(&self) -> Vec<(i64, Vec<String>)> {
        let mut v: Vec<(i64, Vec<String>)> = self.sessions.iter().map(|s| (s.id, self.tree.ephemerals(s.id))).collect();
        v.sort();
        v
    }

    /// Live sessions grouped by expiry bucket, soonest first, as wall-clock ms (for `dump`).
    pub fn session_buckets(&self) -> Vec<(i64, Vec<i64>)> {
        let mut by_time: std::collections::BTreeMap<u64, Vec<i64>> = std::collections::BTreeMap::new();
        for s in self.sessions.iter().filter(|s| !s.closing) {
            by_time.entry(s.expires_at_ms).or_default().push(s.id);
        }
        let (now_mono, now_wall) = (self.now.mono_ms as i64, self.now.wall_ms);
        by_time
            .into_iter()
            .map(|(at, mut ids)| {
                ids.sort();
                (now_wall + (at as i64 - now_mono), ids)
            })
            .collect()
    }

    /// Watches by connection's session (`wchc`) and by path (`wchp`).
    pub fn watches_by_session(&self) -> Vec<(i64, Vec<String>)> {
        self.watches
            .watches_by_connection(WatchTableKind::Data)
            .into_iter()
            .map(|(conn, paths)| (self.conns.get(&conn).map_or(0, |c| c.session_id), paths))
            .collect()
    }

    pub fn watches_by_path(&self) -> Vec<(String, Vec<i64>)> {
        self.watches
            .watches_by_path(WatchTableKind::Data)
            .into_iter()
            .map(|(path, conns)| (path, conns.iter().map(|c| self.conns.get(c).map_or(0, |c| c.session_id)).collect()))
            .collect()
    }
}
