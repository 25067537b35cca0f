//! Snapshot support for `DataTree`: the node walk a snapshot writer serialises (root first, then
//! parents before children) and rebuilding a tree from stored nodes
//! (`DataTree.deserialize`). The byte format lives in `warden-storage`.

use std::sync::Arc;

use imbl::ordmap::Entry;
use imbl::{OrdMap, OrdSet};

use crate::acl_cache::AclCache;
use crate::digest::DigestState;
use crate::node_key::{child_word, NodeKey, Probe};
use crate::path::{basename, parent};
use crate::quota::{quota_target, QuotaIndex, LIMIT_NODE};
use crate::tree::{node_size, DataTree, NodeMap, CONFIG_NODE, QUOTA_ROOT};
use crate::znode::{open_acl, read_acl, Znode};

impl DataTree {
    /// The nodes in snapshot order: the root first with path `""` (as ZooKeeper's
    /// `serializeNode` writes it), then the rest in pre-order, each parent before its children,
    /// all that ZooKeeper's `DataTree.deserialize` (and [`DataTree::from_snapshot`]) require.
    /// Siblings come in the node map's order, which is the same in every process. A walk through
    /// the children runs: one seek per node that has children, none per leaf. Pair it with a
    /// `clone()` of the tree taken on the owner task to serialise a consistent (non-fuzzy)
    /// snapshot on another thread.
    pub fn snapshot_nodes(&self) -> impl Iterator<Item = (&str, &Znode)> + '_ {
        self.walk("/").map(|(path, node)| (if path == "/" { "" } else { path }, node))
    }

    /// Every node in the node map's order, which starts with the root and is the same in every
    /// process: a plain scan, cheaper than [`DataTree::snapshot_nodes`] for passes that need no
    /// parent-first order (such as collecting the ACL lists a snapshot writes).
    pub fn nodes_in_map_order(&self) -> impl Iterator<Item = &Znode> + '_ {
        self.nodes.values().map(|n| &**n)
    }

    /// Rebuilds a tree from snapshot nodes (ZooKeeper's `DataTree.deserialize`). Paths are as
    /// stored (`""` or `"/"` for the root). Each node's `num_children` is ignored and recomputed
    /// from the paths; equal ACL lists are shared; the ephemeral, container, TTL and quota
    /// indexes, the data size and the quota stats nodes (`setupQuota`) are recomputed. Rejects a
    /// missing root, a duplicate path and a node whose parent is missing. `/zookeeper`,
    /// `/zookeeper/quota` and `/zookeeper/config` are added (zero Stat) when absent.
    /// Paths may come as `String`s or already shared (`Arc<str>`, as the snapshot decoder hands
    /// them over: a path copied into the key here would leave the decoder's string behind as a
    /// hole in the heap, some 30 bytes per node of a loaded tree).
    pub fn from_snapshot<P>(nodes: Vec<(P, Znode)>, last_zxid: i64) -> Result<DataTree, String>
    where
        P: AsRef<str> + Into<Arc<str>>,
    {
        let mut map = NodeMap::new();
        let mut acls = AclCache::default();
        let mut last_acl: Option<Arc<[warden_proto::Acl]>> = None;
        let mut limits = Vec::new();
        for (path, mut node) in nodes {
            let path: Arc<str> = if path.as_ref().is_empty() { "/".into() } else { path.into() };
            // An empty segment (`//`) would file the node under a parent whose child list names
            // it differently; no ZooKeeper client can create one.
            if !path.starts_with('/') || (path.len() > 1 && path.ends_with('/')) || path.contains("//") {
                return Err(format!("invalid path {path:?} in snapshot"));
            }
            node.num_children = 0;
            node.child_bound = 0;
            node.seal_digest(&path);
            // Neighbouring nodes usually share their ACL: skip the cache lookup then.
            node.acl = match &last_acl {
                Some(prev) if Arc::ptr_eq(prev, &node.acl) || **prev == *node.acl => prev.clone(),
                _ => acls.adopt(node.acl),
            };
            last_acl = Some(node.acl.clone());
            if basename(&path) == LIMIT_NODE {
                if let Some(target) = quota_target(&path) {
                    limits.push(target.to_string());
                }
            }
            match map.entry(NodeKey::new(path)) {
                Entry::Occupied(e) => return Err(format!("duplicate path {} in snapshot", e.key().path())),
                Entry::Vacant(e) => {
                    e.insert(Arc::new(node));
                }
            }
        }
        if !map.contains_key(Probe::new("/").view()) {
            return Err("snapshot has no root node".into());
        }
        let mut tree = DataTree {
            nodes: map,
            acls,
            ephemerals: OrdMap::new(),
            containers: OrdSet::new(),
            ttls: OrdSet::new(),
            quotas: QuotaIndex::default(),
            last_processed_zxid: last_zxid,
            data_size: 0,
            digest: DigestState::default(),
        };
        // Count children and collect the owned nodes in one pass over the keys, holding copies
        // of parent paths and non-persistent paths only.
        let mut counts: std::collections::HashMap<String, (u32, u32)> = std::collections::HashMap::new();
        let mut owned = Vec::new();
        for (key, n) in &tree.nodes {
            let path = key.path();
            if path == "/" {
                continue;
            }
            let p = parent(path);
            if !tree.has(p) {
                return Err(format!("invalid data tree: parent {p} of {path} is missing"));
            }
            let word = child_word(path);
            match counts.get_mut(p) {
                Some((c, bound)) => {
                    *c += 1;
                    *bound = (*bound).max(word);
                }
                None => {
                    counts.insert(p.to_string(), (1, word));
                }
            }
            if n.stat.ephemeral_owner != 0 {
                owned.push((path.to_string(), n.stat.ephemeral_owner));
            }
        }
        for (p, (c, bound)) in counts {
            if let Some(pn) = tree.node_mut(&p) {
                pn.num_children = c;
                pn.child_bound = bound;
            }
        }
        // The root is nobody's: an owned root would be deleted with its session, as a container
        // or when its TTL ran out.
        let root_owner = tree.get("/").map_or(0, |n| n.stat.ephemeral_owner);
        if root_owner != 0 {
            return Err(format!("invalid data tree: the root has owner {root_owner:#x}"));
        }
        for (path, owner) in &owned {
            tree.index_owner(path, *owner);
        }
        for (path, acl) in [("/zookeeper", open_acl()), (QUOTA_ROOT, open_acl()), (CONFIG_NODE, read_acl())] {
            if !tree.has(path) {
                tree.insert_raw(path, acl);
            }
        }
        // A session can own no node with children (NOCHILDRENFOREPHEMERALS), and
        // `check_invariants` holds the tree to it: such a snapshot is not a tree any server wrote
        // (counted after the system nodes, which may have become an ephemeral /zookeeper's).
        for (path, owner) in &owned {
            if crate::owner::is_session_ephemeral(*owner) && tree.get(path).is_some_and(|n| n.num_children != 0) {
                return Err(format!("invalid data tree: ephemeral node {path} has children"));
            }
        }
        let (mut size, mut digest) = (0, 0i64);
        for (key, n) in &tree.nodes {
            size += node_size(key.path(), n.data.as_deref());
            digest = digest.wrapping_add(i64::from(n.digest));
        }
        tree.data_size = size;
        tree.digest.sum = digest;
        for target in limits {
            tree.quotas.paths.insert(target.clone());
            tree.recompute_quota_stats(&target);
        }
        Ok(tree)
    }
}
