//! Snapshot support for `DataTree`: the node walk a snapshot writer serialises (ZooKeeper's
//! `DataTree.serializeNode` order) and rebuilding a tree from stored nodes
//! (`DataTree.deserialize`). The byte format lives in `warden-storage`.

use std::collections::BTreeSet;
use std::sync::Arc;

use imbl::{HashMap, OrdMap, OrdSet};
use warden_proto::Acl;

use crate::path::{basename, join, parent};
use crate::quota::{quota_target, QuotaIndex, LIMIT_NODE};
use crate::tree::{node_size, DataTree, CONFIG_NODE, QUOTA_ROOT};
use crate::znode::Znode;

/// Pre-order walk over the tree: the root (path `""`), then each child subtree, children in
/// sorted name order. Lazy: holds one stack of pending paths.
pub struct SnapshotNodes<'a> {
    tree: &'a DataTree,
    stack: Vec<String>,
}

impl<'a> Iterator for SnapshotNodes<'a> {
    type Item = (String, &'a Znode);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let path = self.stack.pop()?;
            // Every listed child exists (tree invariant); skip defensively if not.
            let Some(node) = self.tree.node(&path) else { continue };
            self.stack.extend(node.children.iter().rev().map(|c| join(&path, c)));
            let out = if path == "/" { String::new() } else { path };
            return Some((out, node));
        }
    }
}

impl DataTree {
    /// The nodes in ZooKeeper's snapshot order (`serializeNode`): root first with path `""`,
    /// then depth-first, children sorted by name. Pair it with a `clone()` of the tree taken on
    /// the owner task to serialise a consistent (non-fuzzy) snapshot on another thread.
    pub fn snapshot_nodes(&self) -> SnapshotNodes<'_> {
        SnapshotNodes { tree: self, stack: vec!["/".to_string()] }
    }

    /// Rebuilds a tree from snapshot nodes (ZooKeeper's `DataTree.deserialize`). Paths are as
    /// stored (`""` or `"/"` for the root). Each node's `children` is ignored and rebuilt from
    /// the paths; the ephemeral, container, TTL and quota indexes, the data size and the quota
    /// stats nodes (`setupQuota`) are recomputed. Rejects a missing root, a duplicate path and a
    /// node whose parent is missing. `/zookeeper`, `/zookeeper/quota` and `/zookeeper/config`
    /// are added (zero Stat) when absent.
    pub fn from_snapshot(nodes: Vec<(String, Znode)>, last_zxid: i64) -> Result<DataTree, String> {
        let mut map: HashMap<String, Arc<Znode>> = HashMap::new();
        let mut order = Vec::with_capacity(nodes.len());
        for (path, mut node) in nodes {
            let path = if path.is_empty() { "/".to_string() } else { path };
            if !path.starts_with('/') || (path.len() > 1 && path.ends_with('/')) {
                return Err(format!("invalid path {path:?} in snapshot"));
            }
            node.children = BTreeSet::new();
            if map.insert(path.clone(), Arc::new(node)).is_some() {
                return Err(format!("duplicate path {path} in snapshot"));
            }
            order.push(path);
        }
        if !map.contains_key("/") {
            return Err("snapshot has no root node".into());
        }
        let mut tree = DataTree {
            nodes: map,
            ephemerals: OrdMap::new(),
            containers: OrdSet::new(),
            ttls: OrdSet::new(),
            quotas: QuotaIndex::default(),
            last_processed_zxid: last_zxid,
            data_size: 0,
        };
        for path in &order {
            if path == "/" {
                continue;
            }
            let p = parent(path);
            let Some(pn) = tree.node_mut(p) else {
                return Err(format!("invalid data tree: parent {p} of {path} is missing"));
            };
            pn.children.insert(basename(path).to_string());
        }
        for (path, data, acl) in [
            ("/zookeeper", Some(Vec::new()), Acl::open_unsafe()),
            (QUOTA_ROOT, Some(Vec::new()), Acl::open_unsafe()),
            (CONFIG_NODE, Some(Vec::new()), Acl::read_unsafe()),
        ] {
            if !tree.nodes.contains_key(path) {
                if let Some(pn) = tree.node_mut(parent(path)) {
                    pn.children.insert(basename(path).to_string());
                }
                let node = Znode { data, acl, ..Znode::default() };
                tree.nodes.insert(path.to_string(), Arc::new(node));
                order.push(path.to_string());
            }
        }
        let mut size = 0;
        let mut limits = Vec::new();
        for path in &order {
            let (owner, bytes) = {
                let n = &tree.nodes[path];
                (n.stat.ephemeral_owner, node_size(path, n.data.as_ref()))
            };
            size += bytes;
            if path != "/" {
                tree.index_owner(path, owner);
            }
            if basename(path) == LIMIT_NODE {
                if let Some(target) = quota_target(path) {
                    limits.push(target.to_string());
                }
            }
        }
        tree.data_size = size;
        for target in limits {
            tree.quotas.paths.insert(target.clone());
            tree.recompute_quota_stats(&target);
        }
        Ok(tree)
    }
}
