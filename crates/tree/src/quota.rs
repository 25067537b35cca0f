//! Quota bookkeeping (ZooKeeper's `Quotas` and the quota `PathTrie` of `DataTree`): paths with a
//! `zookeeper_limits` node are indexed; every create, delete and setData below such a path updates
//! its `zookeeper_stats` node. Warn-only: exceeding a limit is not enforced here (enforcement is
//! off by default in ZooKeeper).

use imbl::OrdSet;

use crate::path::{basename, parent};
use crate::stats_track::StatsTrack;
use crate::tree::{node_size, DataTree, QUOTA_ROOT};

/// Name of the limits node under `/zookeeper/quota<path>`.
pub const LIMIT_NODE: &str = "zookeeper_limits";
/// Name of the stats node under `/zookeeper/quota<path>`.
pub const STAT_NODE: &str = "zookeeper_stats";

/// The set of paths that have a quota (ZooKeeper's `PathTrie`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuotaIndex {
    pub(crate) paths: OrdSet<String>,
}

impl QuotaIndex {
    /// The deepest quota path that is `path` or one of its ancestors; never `/`.
    pub fn max_prefix(&self, path: &str) -> Option<&str> {
        // Most trees have no quota: skip the walk up the path.
        if self.paths.is_empty() {
            return None;
        }
        let mut p = path;
        loop {
            if p == "/" || p.is_empty() {
                return None;
            }
            if let Some(found) = self.paths.get(p) {
                return Some(found.as_str());
            }
            p = parent(p);
        }
    }

    /// All quota paths.
    pub fn paths(&self) -> impl Iterator<Item = &String> {
        self.paths.iter()
    }
}

/// `/zookeeper/quota<path>/zookeeper_stats`.
pub fn stat_path(path: &str) -> String {
    format!("{QUOTA_ROOT}{path}/{STAT_NODE}")
}

/// `/zookeeper/quota<path>/zookeeper_limits`.
pub fn limit_path(path: &str) -> String {
    format!("{QUOTA_ROOT}{path}/{LIMIT_NODE}")
}

/// For a node directly under the quota tree, the quota path it belongs to
/// (`/zookeeper/quota/a/b/zookeeper_limits` -> `/a/b`).
pub(crate) fn quota_target(node_path: &str) -> Option<&str> {
    let p = parent(node_path);
    let rest = p.strip_prefix(QUOTA_ROOT)?;
    rest.starts_with('/').then_some(rest)
}

impl DataTree {
    /// Quota effects of a create: registering a limits node, initialising a stats node, and
    /// counting the new node in its quota.
    pub(crate) fn quota_on_create(&mut self, path: &str, bytes: usize) {
        if let Some(target) = quota_target(path) {
            let target = target.to_string();
            match basename(path) {
                LIMIT_NODE => {
                    self.quotas.paths.insert(target);
                }
                STAT_NODE => self.recompute_quota_stats(&target),
                _ => {}
            }
        }
        self.update_count_bytes(path, bytes as i64, 1);
    }

    /// Quota effects of a delete.
    pub(crate) fn quota_on_delete(&mut self, path: &str, bytes: usize) {
        if basename(path) == LIMIT_NODE {
            if let Some(target) = quota_target(path) {
                self.quotas.paths.remove(target);
            }
        }
        self.update_count_bytes(path, -(bytes as i64), -1);
    }

    /// Quota effects of a setData.
    pub(crate) fn quota_on_set_data(&mut self, path: &str, bytes_diff: i64) {
        self.update_count_bytes(path, bytes_diff, 0);
    }

    /// `updateCountBytes`: adds the deltas to the stats node of the deepest quota covering `path`.
    fn update_count_bytes(&mut self, path: &str, bytes_diff: i64, count_diff: i64) {
        let Some(prefix) = self.quotas.max_prefix(path).map(str::to_string) else { return };
        let sp = stat_path(&prefix);
        let Some(text) = self.get(&sp).map(|n| String::from_utf8_lossy(n.data.as_deref().unwrap_or(&[])).into_owned())
        else {
            return;
        };
        let mut st = StatsTrack::parse(&text);
        st.set_count(st.count() + count_diff);
        st.set_bytes(st.bytes() + bytes_diff);
        self.write_stats_raw(&sp, st.to_string().into_bytes());
    }

    /// `updateQuotaForPath`: counts the subtree of `target` (itself included) and writes the
    /// totals into its stats node.
    pub(crate) fn recompute_quota_stats(&mut self, target: &str) {
        let (count, bytes) = self.subtree_counts(target);
        let mut st = StatsTrack::default();
        st.set_count(count);
        st.set_bytes(bytes);
        self.write_stats_raw(&stat_path(target), st.to_string().into_bytes());
    }

    fn subtree_counts(&self, root: &str) -> (i64, i64) {
        let Some(n) = self.get(root) else { return (0, 0) };
        let (mut count, mut bytes) = (1i64, n.data_len() as i64);
        for (_, n) in self.descendants(root) {
            count += 1;
            bytes += n.data_len() as i64;
        }
        (count, bytes)
    }

    /// Replaces a stats node's data without touching its Stat, as ZooKeeper does.
    fn write_stats_raw(&mut self, path: &str, data: Vec<u8>) {
        if let Some(n) = crate::tree::stored_mut(&mut self.nodes, path) {
            let old = node_size(path, n.data.as_deref());
            n.data = Some(data.into_boxed_slice());
            self.data_size = self.data_size + node_size(path, n.data.as_deref()) - old;
        }
    }

    /// The quota index (paths with a limits node).
    pub fn quota_index(&self) -> &QuotaIndex {
        &self.quotas
    }

    /// True if the stats of the quota covering `path` exceed its limits (the warning ZooKeeper
    /// logs; hard limits are `countHardLimit` / `byteHardLimit` when present).
    pub fn quota_exceeded(&self, path: &str) -> bool {
        let Some(prefix) = self.quotas.max_prefix(path) else { return false };
        let read = |p: String| {
            self.get(&p).map(|n| StatsTrack::parse(&String::from_utf8_lossy(n.data.as_deref().unwrap_or(&[]))))
        };
        let (Some(stats), Some(limits)) = (read(stat_path(prefix)), read(limit_path(prefix))) else { return false };
        let over = |limit: i64, used: i64| limit > -1 && used > limit;
        over(limits.count(), stats.count()) || over(limits.bytes(), stats.bytes())
    }
}
