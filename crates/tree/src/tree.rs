//! `DataTree`: the replicated znode tree and the rules for applying committed txns, as ZooKeeper's
//! `DataTree` (node types, Stat upkeep, quotas, `/zookeeper/config`).
//!
//! Applying never fails the process: a txn that does not fit the tree yields
//! `TxnResult::Error`, as ZooKeeper's `DataTree.processTxn` does.

use std::ops::Bound;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use warden_proto::{Acl, ErrorCode, Stat, StatPersisted, Txn, TxnHeader};

use crate::acl_cache::AclCache;
use crate::digest::{data_crc, digest_with, DigestState, ZxidDigest, DIGEST_VERSION};
use crate::node_key::{child_word, high_half, is_child_of, parent_half, KeyView, NodeKey, Probe};
use crate::outcome::{ApplyOutcome, TreeEvent, TreeEventKind, TxnResult};
use crate::owner::{ttl_owner, OwnerKind, CONTAINER_OWNER};
use crate::path::{basename, join, parent, validate_path};
use crate::quota::QuotaIndex;
use crate::znode::{open_acl, read_acl, Znode};

/// Path of the ensemble configuration node.
pub const CONFIG_NODE: &str = "/zookeeper/config";
/// Root of the quota subtree.
pub const QUOTA_ROOT: &str = "/zookeeper/quota";

/// The znode tree with its ephemeral, container and TTL indexes.
///
/// Every map is a persistent (structurally shared) one and nodes sit behind `Arc`, so `clone()`
/// is O(1) and the clone is `Send + 'static`: take it on the owner task, serialise it elsewhere.
/// A write after a clone copies only the map chunks on its path and the nodes it touches.
///
/// Nodes are keyed by path behind an order word (`NodeKey`): a lookup compares integers
/// and reads one path. Child names are not stored separately: the children of `P` are one
/// contiguous run of keys (`child_names`); a node keeps only its child count. Walks that need
/// parents first (snapshots, subtree counts) descend through those runs (`walk`).
#[derive(Debug, Clone)]
pub struct DataTree {
    pub(crate) nodes: NodeMap,
    pub(crate) acls: AclCache,
    pub(crate) ephemerals: OrdMap<i64, OrdSet<String>>,
    pub(crate) containers: OrdSet<String>,
    pub(crate) ttls: OrdSet<String>,
    pub(crate) quotas: QuotaIndex,
    pub(crate) last_processed_zxid: i64,
    pub(crate) data_size: u64,
    /// ZooKeeper's tree digest, its history and the mismatches seen (`digest.rs`).
    pub(crate) digest: DigestState,
}

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

/// Size of a node for `approximate_data_size`: path length plus data length.
pub(crate) fn node_size(path: &str, data: Option<&[u8]>) -> u64 {
    (path.len() + data.map_or(0, <[u8]>::len)) as u64
}

/// The node map: see `NodeKey` for its order.
pub(crate) type NodeMap = OrdMap<NodeKey, Arc<Znode>>;

impl DataTree {
    /// A fresh tree: `/`, `/zookeeper`, `/zookeeper/quota` (open ACL) and `/zookeeper/config`
    /// (read-only ACL, empty data), all with zero Stats.
    pub fn new() -> Self {
        let mut t = Self {
            nodes: OrdMap::new(),
            acls: AclCache::default(),
            ephemerals: OrdMap::new(),
            containers: OrdSet::new(),
            ttls: OrdSet::new(),
            quotas: QuotaIndex::default(),
            last_processed_zxid: 0,
            data_size: 0,
            digest: DigestState::default(),
        };
        t.insert_raw("/", open_acl());
        t.insert_raw("/zookeeper", open_acl());
        t.insert_raw(QUOTA_ROOT, open_acl());
        t.insert_raw(CONFIG_NODE, read_acl());
        t
    }

    /// Adds a node with empty data and a zero Stat, linking it to its parent if present.
    pub(crate) fn insert_raw(&mut self, path: &str, acl: Arc<[Acl]>) {
        if path != "/" {
            if let Some(p) = self.node_mut(parent(path)) {
                p.num_children += 1;
                p.child_bound = p.child_bound.max(child_word(path));
            }
        }
        self.data_size += node_size(path, Some(&[]));
        let mut node = Znode::new(Some(Box::default()), acl, StatPersisted::default());
        self.digest.sum = self.digest.sum.wrapping_add(node.seal_digest(path));
        self.nodes.insert(NodeKey::new(path.into()), Arc::new(node));
    }

    /// The node at `path`. The empty path names the root too, as in ZooKeeper, whose node map holds
    /// the root under both "" and "/" (reads of "" succeed; writes never get here, path validation
    /// rejects "").
    pub fn node(&self, path: &str) -> Option<&Znode> {
        self.get(if path.is_empty() { "/" } else { path }).map(|n| &**n)
    }

    /// The node at `path` for writing; copies it first if a clone of the tree still shares it.
    pub(crate) fn node_mut(&mut self, path: &str) -> Option<&mut Znode> {
        stored_mut(&mut self.nodes, path)
    }

    /// The client-visible Stat of `path`.
    pub fn stat(&self, path: &str) -> Option<Stat> {
        self.node(path).map(Znode::client_stat)
    }

    /// Child names of `path`, sorted, borrowed from the tree (a reply is encoded straight from
    /// them).
    pub fn children(&self, path: &str) -> Option<Vec<&str>> {
        let path = if path.is_empty() { "/" } else { path };
        self.node(path)?;
        let mut names = self.child_names(path);
        names.sort_unstable();
        Some(names)
    }

    /// Names of the children of `path`, in the map's order (empty if it has none or does not
    /// exist): one seek, then the run of keys whose order word has `path`'s hash in its high
    /// half, less those of another parent with the same hash.
    pub(crate) fn child_names(&self, path: &str) -> Vec<&str> {
        let mut out = Vec::new();
        match self.get(path) {
            Some(n) if n.num_children > 0 => out.reserve(n.num_children as usize),
            _ => return out,
        }
        for (key, _) in self.children_run(path) {
            if is_child_of(key.path(), path) {
                out.push(basename(key.path()));
            }
        }
        out
    }

    /// The keys whose order word's high half is `path`'s hash: its children and, rarely, those of
    /// another parent whose hash is the same.
    fn children_run<'a>(&'a self, path: &str) -> impl Iterator<Item = (&'a NodeKey, &'a Arc<Znode>)> + 'a {
        let half = parent_half(path);
        let start = Probe::first_child_of(path);
        self.nodes
            .range::<_, dyn KeyView>((Bound::Included(start.view()), Bound::Unbounded))
            .take_while(move |(k, _)| high_half(k) == half)
    }

    /// `path` and its descendants, each parent before its children (pre-order); empty if `path`
    /// does not exist. Holds one scan per level of the subtree; leaves cost no seek.
    pub(crate) fn walk<'a>(&'a self, path: &str) -> impl Iterator<Item = (&'a str, &'a Znode)> + 'a {
        let root = self.nodes.get_key_value(Probe::new(path).view());
        let mut pending: Option<(&'a str, &'a Znode)> = root.map(|(k, n)| (k.path(), &**n));
        let mut stack: Vec<(&'a str, ReadAhead<'a>)> = Vec::new();
        std::iter::from_fn(move || {
            // The root first, then the next child of the innermost run that has one.
            let (p, n) = match pending.take() {
                Some(root) => root,
                None => loop {
                    let (parent_path, run) = stack.last_mut()?;
                    match run.next() {
                        Some((k, n)) if is_child_of(k.path(), parent_path) => break (k.path(), &**n),
                        Some(_) => {}
                        None => {
                            stack.pop();
                        }
                    }
                },
            };
            if n.num_children > 0 {
                stack.push((p, ReadAhead::new(Box::new(self.children_run(p)))));
            }
            Some((p, n))
        })
    }

    /// `path`'s strict descendants, parents first.
    pub(crate) fn descendants<'a>(&'a self, path: &str) -> impl Iterator<Item = (&'a str, &'a Znode)> + 'a {
        self.walk(path).skip(1)
    }

    /// The stored node at `path`.
    pub(crate) fn get(&self, path: &str) -> Option<&Arc<Znode>> {
        self.nodes.get(Probe::new(path).view())
    }

    /// The stored node at `path` with the map's own copy of the path, which callers that keep
    /// the path (pending change records) share instead of copying.
    pub(crate) fn get_with_path(&self, path: &str) -> Option<(&Arc<str>, &Znode)> {
        self.nodes.get_key_value(Probe::new(path).view()).map(|(k, n)| (k.shared_path(), &**n))
    }

    /// True if a node is stored at `path`.
    pub(crate) fn has(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// getAllChildrenNumber: all descendants of `path`; for `/`, ZooKeeper's `nodes.size() - 2`
    /// (its map holds the root twice), i.e. every node except the root.
    pub fn all_children_number(&self, path: &str) -> Option<usize> {
        self.node(path)?;
        if path == "/" || path.is_empty() {
            return Some(self.nodes.len() - 1);
        }
        Some(self.descendants(path).count())
    }

    /// Paths of the ephemeral nodes owned by `session_id`, sorted.
    pub fn ephemerals(&self, session_id: i64) -> Vec<String> {
        self.ephemeral_paths(session_id).map(str::to_string).collect()
    }

    /// Paths of the ephemeral nodes owned by `session_id`, sorted, borrowed from the tree.
    pub fn ephemeral_paths(&self, session_id: i64) -> impl Iterator<Item = &str> + '_ {
        self.ephemerals.get(&session_id).into_iter().flat_map(|s| s.iter().map(String::as_str))
    }

    /// Sessions that own at least one ephemeral node.
    pub fn sessions_with_ephemerals(&self) -> Vec<i64> {
        self.ephemerals.keys().copied().collect()
    }

    /// Total number of ephemeral nodes.
    pub fn ephemerals_count(&self) -> usize {
        self.ephemerals.values().map(OrdSet::len).sum()
    }

    /// Node count as ZooKeeper reports it (`zk_znode_count`): its map holds the root under both
    /// `""` and `/`, so this is the number of znodes plus one.
    pub fn node_count(&self) -> usize {
        self.nodes.len() + 1
    }

    /// Number of znodes (root counted once).
    pub fn znode_count(&self) -> usize {
        self.nodes.len()
    }

    /// Sum over nodes of path length plus data length.
    pub fn approximate_data_size(&self) -> u64 {
        self.data_size
    }

    /// Highest zxid applied.
    pub fn last_processed_zxid(&self) -> i64 {
        self.last_processed_zxid
    }

    /// Sets the applied zxid (after restoring a snapshot).
    pub fn set_last_processed_zxid(&mut self, zxid: i64) {
        self.last_processed_zxid = zxid;
    }

    /// All paths, sorted (for dumps and tests).
    pub fn paths(&self) -> Vec<String> {
        let mut out: Vec<String> = self.nodes.keys().map(|k| k.path().to_string()).collect();
        out.sort_unstable();
        out
    }

    /// Containers and TTL nodes the container manager should delete now (ZooKeeper's
    /// `ContainerManager.getCandidates`), with never-used containers kept forever (3.8/3.9
    /// default). `bool` = is a container.
    pub fn containers_and_ttls_to_reap(&self, now_ms: i64) -> Vec<(String, bool)> {
        self.containers_and_ttls_to_reap_with(now_ms, 0)
    }

    /// As `containers_and_ttls_to_reap`, with `znode.container.maxNeverUsedIntervalMs`
    /// (0 = never delete a container that never had a child).
    pub fn containers_and_ttls_to_reap_with(&self, now_ms: i64, max_never_used_ms: i64) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        for path in &self.containers {
            let Some(n) = self.get(path) else { continue };
            let elapsed = now_ms.saturating_sub(n.stat.mtime);
            let never_used_expired = max_never_used_ms != 0 && elapsed > max_never_used_ms;
            if n.num_children == 0 && (n.stat.cversion > 0 || never_used_expired) {
                out.push((path.clone(), true));
            }
        }
        for path in &self.ttls {
            let Some(n) = self.get(path) else { continue };
            if let OwnerKind::Ttl(ttl) = OwnerKind::of(n.stat.ephemeral_owner) {
                if n.num_children == 0 && ttl != 0 && now_ms.saturating_sub(n.stat.mtime) > ttl {
                    out.push((path.clone(), false));
                }
            }
        }
        out
    }

    /// Writes the ensemble configuration into `/zookeeper/config` as ZooKeeper's internal write
    /// does: data replaced, mzxid = config version, version = -1; no event.
    pub fn set_config_data(&mut self, data: Vec<u8>, config_version: i64) {
        if let Some(n) = stored_mut(&mut self.nodes, CONFIG_NODE) {
            self.data_size = self.data_size + data.len() as u64 - n.data_len() as u64;
            n.data = Some(data.into_boxed_slice());
            n.stat.mzxid = config_version;
            n.stat.version = -1;
        }
    }

    /// Applies a committed txn. Updates `last_processed_zxid` to the header's zxid if higher.
    pub fn apply(&mut self, hdr: &TxnHeader, txn: &Txn) -> ApplyOutcome {
        self.apply_with(hdr, txn, &mut Taken::default(), Vec::new())
    }

    /// As `apply`, moving the data of a create into the node instead of copying it, and its path
    /// into its result (the txn is left with neither; a multi's are copied). A setData's data is
    /// copied: into the node's own buffer when the length is unchanged, the usual case.
    /// The events go into `events`, an empty list whose allocation the caller reuses from one
    /// apply to the next.
    pub fn apply_taking_data(&mut self, hdr: &TxnHeader, txn: &mut Txn, events: Vec<TreeEvent>) -> ApplyOutcome {
        let mut taken = match txn {
            Txn::Create { data, path, .. }
            | Txn::CreateContainer { data, path, .. }
            | Txn::CreateTtl { data, path, .. } => Taken { data: Some(data.take()), path: Some(std::mem::take(path)) },
            _ => Taken::default(),
        };
        self.apply_with(hdr, txn, &mut taken, events)
    }

    fn apply_with(
        &mut self,
        hdr: &TxnHeader,
        txn: &Txn,
        taken: &mut Taken,
        mut events: Vec<TreeEvent>,
    ) -> ApplyOutcome {
        debug_assert!(events.is_empty());
        let result = self.apply_one(hdr, txn, taken, &mut events);
        if hdr.zxid > self.last_processed_zxid {
            self.last_processed_zxid = hdr.zxid;
        }
        self.digest.applied(hdr.zxid);
        ApplyOutcome { result, events }
    }

    fn apply_one(&mut self, hdr: &TxnHeader, txn: &Txn, taken: &mut Taken, ev: &mut Vec<TreeEvent>) -> TxnResult {
        let (zxid, time) = (hdr.zxid, hdr.time_ms);
        match txn {
            Txn::Create { path, data, acl, ephemeral, parent_cversion } => {
                let owner = if *ephemeral { hdr.client_id } else { 0 };
                let (path, data) = taken.create(path, data);
                let r = self.create_node(&path, data, acl, owner, *parent_cversion, zxid, time, ev);
                if r == Err(ErrorCode::NodeExists) {
                    self.adjust_parent_cversion(&path, *parent_cversion, zxid);
                }
                created(path, r)
            }
            Txn::CreateContainer { path, data, acl, parent_cversion } => {
                let (path, data) = taken.create(path, data);
                let r = self.create_node(&path, data, acl, CONTAINER_OWNER, *parent_cversion, zxid, time, ev);
                created(path, r)
            }
            Txn::CreateTtl { path, data, acl, parent_cversion, ttl_ms } => {
                let owner = ttl_owner(*ttl_ms);
                let (path, data) = taken.create(path, data);
                let r = self.create_node(&path, data, acl, owner, *parent_cversion, zxid, time, ev);
                created(path, r)
            }
            Txn::Delete { path } | Txn::DeleteContainer { path } => match self.delete_node(path, zxid, ev) {
                Ok(()) => TxnResult::Deleted,
                Err(e) => TxnResult::Error(e),
            },
            Txn::SetData { path, data, version } | Txn::Reconfig { path, data, version } => {
                match self.set_data(path, data.as_deref(), *version, zxid, time, ev) {
                    Ok(stat) => TxnResult::SetData { stat },
                    Err(e) => TxnResult::Error(e),
                }
            }
            Txn::SetAcl { path, acl, version } => match self.set_acl(path, acl, *version) {
                Ok(stat) => TxnResult::SetAcl { stat },
                Err(e) => TxnResult::Error(e),
            },
            Txn::Check { .. } => TxnResult::Check,
            Txn::CreateSession { .. } => TxnResult::SessionCreated,
            Txn::CloseSession { paths_to_delete } => {
                self.kill_session(hdr.client_id, paths_to_delete, zxid, ev);
                TxnResult::SessionClosed
            }
            Txn::Error { err } => TxnResult::Error(error_code(*err)),
            Txn::Multi(txns) => self.apply_multi(hdr, txns, ev),
        }
    }

    /// The multi case of `processTxn`: if any sub-txn is an error txn nothing is applied, the
    /// others before it report Ok (0) and after it RuntimeInconsistency (-2).
    fn apply_multi(&mut self, hdr: &TxnHeader, txns: &[Txn], ev: &mut Vec<TreeEvent>) -> TxnResult {
        let failed = txns.iter().any(|t| matches!(t, Txn::Error { .. }));
        let mut post_failed = false;
        let mut results = Vec::with_capacity(txns.len());
        for t in txns {
            let r = match t {
                Txn::Error { err } => {
                    post_failed = true;
                    TxnResult::Error(error_code(*err))
                }
                _ if failed && post_failed => TxnResult::Error(ErrorCode::RuntimeInconsistency),
                _ if failed => TxnResult::Error(ErrorCode::Ok),
                Txn::Multi(_) | Txn::CreateSession { .. } | Txn::CloseSession { .. } => {
                    TxnResult::Error(ErrorCode::BadArguments)
                }
                _ => self.apply_one(hdr, t, &mut Taken::default(), ev),
            };
            results.push(r);
        }
        TxnResult::Multi(results)
    }

    /// `createNode`.
    #[allow(clippy::too_many_arguments)]
    fn create_node(
        &mut self,
        path: &str,
        data: Option<Box<[u8]>>,
        acl: &[Acl],
        owner: i64,
        parent_cversion: i32,
        zxid: i64,
        time: i64,
        ev: &mut Vec<TreeEvent>,
    ) -> Result<Stat, ErrorCode> {
        if path == "/" {
            return Err(ErrorCode::NodeExists);
        }
        validate_path(path)?;
        let parent_path = parent(path);
        let stat = StatPersisted {
            czxid: zxid,
            mzxid: zxid,
            ctime: time,
            mtime: time,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: owner,
            pzxid: zxid,
        };
        let acl = self.acls.intern(acl);
        let data_len = data.as_ref().map_or(0, |d| d.len());
        let size = node_size(path, data.as_deref());
        let mut node = Znode::new(data, acl.clone(), stat);
        let node_digest = node.seal_digest(path);
        let client_stat = node.client_stat();
        // One descent to the new key and one to the parent. Whether the node exists is learnt from
        // the insert, which puts back a node it displaced (log replay over a fuzzy snapshot). A
        // node whose parent is missing never exists (tree invariant), so a missing parent is seen
        // after an insert that displaced nothing, which is undone: NoNode comes before NodeExists.
        let key = NodeKey::new(path.into());
        if let Some(present) = self.nodes.insert(key.clone(), Arc::new(node)) {
            self.nodes.insert(key, present);
            return Err(ErrorCode::NodeExists);
        }
        let Some((parent_key, parent_node)) = stored_mut_with_path(&mut self.nodes, parent_path) else {
            self.nodes.remove(&key);
            return Err(ErrorCode::NoNode);
        };
        self.data_size += size;
        self.digest.sum = self.digest.sum.wrapping_add(node_digest);
        let parent_acl = parent_node.acl.clone();
        let pcv = if parent_cversion == -1 { parent_node.stat.cversion.wrapping_add(1) } else { parent_cversion };
        if pcv > parent_node.stat.cversion {
            parent_node.stat.cversion = pcv;
            parent_node.stat.pzxid = zxid;
            self.digest.replace(parent_node.restat_digest(&parent_key));
        }
        parent_node.num_children += 1;
        parent_node.child_bound = parent_node.child_bound.max(child_word(path));
        self.index_owner(path, owner);
        self.quota_on_create(path, data_len);
        ev.push(TreeEvent { data_len, ..event(key.shared_path().clone(), TreeEventKind::Created, zxid, acl) });
        ev.push(event(parent_key, TreeEventKind::ChildrenChanged, zxid, parent_acl));
        Ok(client_stat)
    }

    /// `setCversionPzxid` after a create that found its node present (log replay over a fuzzy
    /// snapshot): the parent's cversion still moves forward.
    fn adjust_parent_cversion(&mut self, path: &str, parent_cversion: i32, zxid: i64) {
        let parent_path = parent(path);
        if let Some(p) = stored_mut(&mut self.nodes, parent_path) {
            let pcv = if parent_cversion == -1 { p.stat.cversion.wrapping_add(1) } else { parent_cversion };
            if pcv > p.stat.cversion {
                p.stat.cversion = pcv;
                p.stat.pzxid = zxid;
                self.digest.replace(p.restat_digest(parent_path));
            }
        }
    }

    pub(crate) fn index_owner(&mut self, path: &str, owner: i64) {
        match OwnerKind::of(owner) {
            OwnerKind::Persistent => {}
            OwnerKind::Container => {
                self.containers.insert(path.to_string());
            }
            OwnerKind::Ttl(_) => {
                self.ttls.insert(path.to_string());
            }
            OwnerKind::Ephemeral(s) => {
                let mut set = self.ephemerals.remove(&s).unwrap_or_default();
                set.insert(path.to_string());
                self.ephemerals.insert(s, set);
            }
        }
    }

    fn unindex_owner(&mut self, path: &str, owner: i64) {
        match OwnerKind::of(owner) {
            OwnerKind::Persistent => {}
            OwnerKind::Container => {
                self.containers.remove(path);
            }
            OwnerKind::Ttl(_) => {
                self.ttls.remove(path);
            }
            OwnerKind::Ephemeral(s) => {
                if let Some(mut set) = self.ephemerals.remove(&s) {
                    set.remove(path);
                    if !set.is_empty() {
                        self.ephemerals.insert(s, set);
                    }
                }
            }
        }
    }

    /// `deleteNode`. Unlike ZooKeeper, refuses (NotEmpty) to delete a node that has children, so
    /// a diverged log cannot orphan nodes.
    fn delete_node(&mut self, path: &str, zxid: i64, ev: &mut Vec<TreeEvent>) -> Result<(), ErrorCode> {
        if path == "/" || !path.starts_with('/') {
            return Err(ErrorCode::BadArguments);
        }
        if self.get(path).is_some_and(|n| n.num_children != 0) {
            return Err(ErrorCode::NotEmpty);
        }
        let parent_path = parent(path);
        let exists = self.has(path);
        let (parent_key, p) = stored_mut_with_path(&mut self.nodes, parent_path).ok_or(ErrorCode::NoNode)?;
        if exists {
            p.num_children -= 1;
        }
        if zxid > p.stat.pzxid {
            p.stat.pzxid = zxid;
            self.digest.replace(p.restat_digest(&parent_key));
        }
        let parent_acl = p.acl.clone();
        let (key, node) = self.nodes.remove_with_key(Probe::new(path).view()).ok_or(ErrorCode::NoNode)?;
        self.data_size -= node_size(path, node.data.as_deref());
        self.digest.sum = self.digest.sum.wrapping_sub(i64::from(node.digest));
        self.unindex_owner(path, node.stat.ephemeral_owner);
        self.quota_on_delete(path, node.data_len());
        ev.push(event(key.shared_path().clone(), TreeEventKind::Deleted, zxid, node.acl.clone()));
        ev.push(event(parent_key, TreeEventKind::ChildrenChanged, zxid, parent_acl));
        Ok(())
    }

    fn set_data(
        &mut self,
        path: &str,
        data: Option<&[u8]>,
        version: i32,
        zxid: i64,
        time: i64,
        ev: &mut Vec<TreeEvent>,
    ) -> Result<Stat, ErrorCode> {
        let (key, n) = stored_mut_with_path(&mut self.nodes, path).ok_or(ErrorCode::NoNode)?;
        let old_len = n.data_len();
        match (&mut n.data, data) {
            // The same length (a value rewritten in place, the usual case): the bytes go into the
            // node's buffer, and nothing is allocated or freed (the request's data is a slice of
            // the frame it came in). Freeing the node's buffer (cold by now) would cost the
            // allocator cache misses and coalescing.
            (Some(held), Some(new)) if held.len() == new.len() => held.copy_from_slice(new),
            (held, new) => *held = new.map(Box::from),
        }
        n.stat.mtime = time;
        n.stat.mzxid = zxid;
        n.stat.version = version;
        self.digest.replace(n.redata_digest(path));
        let stat = n.client_stat();
        let acl = n.acl.clone();
        let new_len = n.data_len();
        self.data_size = self.data_size + new_len as u64 - old_len as u64;
        self.quota_on_set_data(path, new_len as i64 - old_len as i64);
        ev.push(TreeEvent { data_len: new_len, ..event(key, TreeEventKind::DataChanged, zxid, acl) });
        Ok(stat)
    }

    fn set_acl(&mut self, path: &str, acl: &[Acl], version: i32) -> Result<Stat, ErrorCode> {
        let acl = self.acls.intern(acl);
        let n = stored_mut(&mut self.nodes, path).ok_or(ErrorCode::NoNode)?;
        n.acl = acl;
        n.stat.aversion = version;
        self.digest.replace(n.restat_digest(path));
        Ok(n.client_stat())
    }

    /// `killSession`: deletes the listed paths, then any other ephemerals the index still holds
    /// for the session; missing nodes are skipped.
    fn kill_session(&mut self, session: i64, paths: &[String], zxid: i64, ev: &mut Vec<TreeEvent>) {
        let local = self.ephemerals.remove(&session).unwrap_or_default();
        for p in paths {
            let _ = self.delete_node(p, zxid, ev);
        }
        for p in local.iter().filter(|p| !paths.contains(p)) {
            let _ = self.delete_node(p, zxid, ev);
        }
    }

    /// ZooKeeper's digest of the tree (`DataTree.getTreeDigest`, see `digest.rs`).
    pub fn zk_digest(&self) -> i64 {
        self.digest.sum
    }

    /// The digest history the `hash` admin command lists, oldest first.
    pub fn digest_log(&self) -> impl Iterator<Item = &ZxidDigest> + '_ {
        self.digest.history.log.iter()
    }

    /// The digest section of a snapshot of this tree: the digest after `last_processed_zxid`, or
    /// the empty one (zxid 0, never compared) before any txn or while a loaded snapshot's digest
    /// is still awaited (the tree is between a fuzzy snapshot and the txns that settle it).
    pub fn snapshot_digest(&self) -> ZxidDigest {
        let zxid = if self.digest.awaited().is_some() { 0 } else { self.last_processed_zxid };
        ZxidDigest { zxid, version: DIGEST_VERSION, digest: if zxid == 0 { 0 } else { self.digest.sum } }
    }

    /// Takes a loaded snapshot's digest section (`deserializeZxidDigest`, `compareSnapshotDigests`):
    /// compared now when it is at the tree's zxid, once the txn at its zxid is applied when ahead
    /// (a fuzzy snapshot), and dropped when empty or behind. False on a mismatch now.
    pub fn expect_snapshot_digest(&mut self, d: ZxidDigest) -> bool {
        if d.zxid == 0 || d.zxid < self.last_processed_zxid {
            return true;
        }
        if d.zxid == self.last_processed_zxid {
            return self.digest.compare(d);
        }
        self.digest.set_awaited(Some(d));
        true
    }

    /// Compares the digest a txn came with (ZooKeeper's `TxnDigest`: the tree's digest after the
    /// txn, from the leader that proposed it) with the tree's, just after applying that txn
    /// (`DataTree.compareDigest`). Not compared while a snapshot digest is awaited. False on a
    /// mismatch, which is counted.
    pub fn check_txn_digest(&mut self, version: i32, digest: i64) -> bool {
        if self.digest.awaited().is_some() {
            return true;
        }
        self.digest.compare(ZxidDigest { zxid: self.last_processed_zxid, version, digest })
    }

    /// Digests that differed from this tree's (`digest_mismatches_count`).
    pub fn digest_mismatches(&self) -> u64 {
        self.digest.mismatches
    }

    /// A 64-bit fingerprint of the tree's content: the path, data (null distinct from empty),
    /// persisted Stat, child count and ACL of every node, in the node map's order, the same in
    /// every process (FNV-1a over their serial form). Stricter than ZooKeeper's digest
    /// ([`DataTree::zk_digest`]: ACLs and child counts count too) and O(nodes): for tests and the
    /// simulator.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv64::new();
        for (key, n) in &self.nodes {
            h.bytes(key.path().as_bytes());
            match &n.data {
                None => h.bytes(&[0xff]),
                Some(d) => {
                    h.bytes(&[0]);
                    h.bytes(d);
                }
            }
            let mut w = warden_proto::jute::Writer::new();
            warden_proto::Record::encode(&n.stat, &mut w);
            w.write_i32(i32::try_from(n.num_children).unwrap_or(i32::MAX));
            for acl in n.acl.iter() {
                warden_proto::Record::encode(acl, &mut w);
            }
            h.bytes(&w.into_inner());
        }
        h.0
    }

    /// Checks the structural invariants: parent/child links, the ephemeral, container and TTL
    /// indexes, ephemeral nodes without children, and the data size and digest kept as nodes
    /// change against their values computed afresh.
    pub fn check_invariants(&self) -> Result<(), String> {
        if !self.has("/") {
            return Err("root missing".into());
        }
        let (mut size, mut digest) = (0u64, 0i64);
        for (key, n) in &self.nodes {
            let path = key.path();
            size += node_size(path, n.data.as_deref());
            let crc = data_crc(path, n.data.as_deref());
            let node_digest = digest_with(path, crc, &n.stat);
            if (n.data_crc, i64::from(n.digest)) != (crc, node_digest) {
                let kept = (n.data_crc, n.digest);
                return Err(format!("{path}: data CRC and digest kept {kept:x?}, computed {crc:#x} {node_digest:#x}"));
            }
            digest = digest.wrapping_add(node_digest);
            self.check_links(path, n)?;
            self.check_owner_index(path, n.stat.ephemeral_owner)?;
        }
        if size != self.data_size {
            return Err(format!("data size {} != computed {size}", self.data_size));
        }
        if digest != self.digest.sum {
            return Err(format!("digest {} != computed {digest}", self.digest.sum));
        }
        self.check_indexes_point_to_nodes()
    }

    fn check_links(&self, path: &str, n: &Znode) -> Result<(), String> {
        if path != "/" && !self.has(parent(path)) {
            return Err(format!("{path}: parent missing"));
        }
        let children = self.child_names(path);
        if children.len() != n.num_children as usize {
            return Err(format!("{path}: num_children {} but {} children", n.num_children, children.len()));
        }
        if let Some(c) = children.iter().find(|c| !self.has(&join(path, c))) {
            return Err(format!("{path}: child {c} missing"));
        }
        if let Some(c) = children.iter().find(|c| child_word(&join(path, c)) > n.child_bound) {
            return Err(format!("{path}: child {c} above the child bound {}", n.child_bound));
        }
        if crate::owner::is_session_ephemeral(n.stat.ephemeral_owner) && n.num_children != 0 {
            return Err(format!("{path}: ephemeral node has children"));
        }
        Ok(())
    }

    fn check_owner_index(&self, path: &str, owner: i64) -> Result<(), String> {
        let ok = match OwnerKind::of(owner) {
            OwnerKind::Persistent => true,
            OwnerKind::Container => self.containers.contains(path),
            OwnerKind::Ttl(_) => self.ttls.contains(path),
            OwnerKind::Ephemeral(s) => self.ephemerals.get(&s).is_some_and(|set| set.contains(path)),
        };
        if ok {
            Ok(())
        } else {
            Err(format!("{path}: owner {owner:#x} not indexed"))
        }
    }

    fn check_indexes_point_to_nodes(&self) -> Result<(), String> {
        for (s, set) in &self.ephemerals {
            if set.is_empty() {
                return Err(format!("session {s:#x}: empty ephemeral set kept"));
            }
            for p in set {
                let owner = self.get(p).map(|n| n.stat.ephemeral_owner);
                if owner != Some(*s) {
                    return Err(format!("{p}: indexed for session {s:#x}, owner {owner:?}"));
                }
            }
        }
        let kinds = self.containers.iter().map(|p| (p, true)).chain(self.ttls.iter().map(|p| (p, false)));
        for (p, is_container) in kinds {
            let kind = self.get(p).map(|n| OwnerKind::of(n.stat.ephemeral_owner));
            let ok = match kind {
                Some(OwnerKind::Container) => is_container,
                Some(OwnerKind::Ttl(_)) => !is_container,
                _ => false,
            };
            if !ok {
                return Err(format!("{p}: container/ttl index stale"));
            }
        }
        Ok(())
    }
}

/// The node at `path` in `nodes` for writing, copied first if a clone of the tree still shares it.
pub(crate) fn stored_mut<'a>(nodes: &'a mut NodeMap, path: &str) -> Option<&'a mut Znode> {
    nodes.get_mut(Probe::new(path).view()).map(Arc::make_mut)
}

/// As [`stored_mut`], with the map's copy of the path (for events, which share it).
fn stored_mut_with_path<'a>(nodes: &'a mut NodeMap, path: &str) -> Option<(Arc<str>, &'a mut Znode)> {
    nodes.get_key_value_mut(Probe::new(path).view()).map(|(k, n)| (k.shared_path().clone(), Arc::make_mut(n)))
}

/// What `apply_taking_data` moved out of the top-level txn: a create's data and path.
#[derive(Default)]
struct Taken {
    /// The data of a create.
    data: Option<Option<Vec<u8>>>,
    /// The path of a create, which becomes the path of its result.
    path: Option<String>,
}

impl Taken {
    /// A create's path (for its result) and data (for its node): moved if taken, else copied.
    fn create(&mut self, path: &str, data: &Option<Vec<u8>>) -> (String, Option<Box<[u8]>>) {
        let path = self.path.take().unwrap_or_else(|| path.to_string());
        let data = match self.data.take() {
            Some(moved) => moved.map(Vec::into_boxed_slice),
            None => data.as_deref().map(Box::from),
        };
        (path, data)
    }
}

fn created(path: String, r: Result<Stat, ErrorCode>) -> TxnResult {
    match r {
        Ok(stat) => TxnResult::Created { path, stat },
        Err(e) => TxnResult::Error(e),
    }
}

fn event(path: Arc<str>, kind: TreeEventKind, zxid: i64, acl: Arc<[Acl]>) -> TreeEvent {
    TreeEvent { path, kind, zxid, acl, data_len: 0 }
}

/// Maps a wire error value; codes ZooKeeper does not define become `SystemError`.
fn error_code(err: i32) -> ErrorCode {
    ErrorCode::from_code(err).unwrap_or(ErrorCode::SystemError)
}

/// FNV-1a, 64 bits, with each field's length mixed in first so adjacent fields cannot alias.
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, b: &[u8]) {
        for x in (b.len() as u64).to_be_bytes().iter().chain(b) {
            self.0 ^= u64::from(*x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

type Run<'a> = Box<dyn Iterator<Item = (&'a NodeKey, &'a Arc<Znode>)> + 'a>;

/// A run of keys read a few entries ahead of the walk. A key's path and its node are separate
/// allocations met in hash order, so on a tree larger than the caches each is a miss; prefetching
/// them as they enter the window starts those misses while the entries before them are still
/// being used, so they overlap instead of coming one after another. (Prefetching the node's data
/// as well measured no better: the hardware streams it once its first line is asked for.)
struct ReadAhead<'a> {
    run: Run<'a>,
    window: std::collections::VecDeque<(&'a NodeKey, &'a Arc<Znode>)>,
}

impl<'a> ReadAhead<'a> {
    const AHEAD: usize = 8;

    fn new(run: Run<'a>) -> Self {
        ReadAhead { run, window: std::collections::VecDeque::with_capacity(Self::AHEAD) }
    }
}

impl<'a> Iterator for ReadAhead<'a> {
    type Item = (&'a NodeKey, &'a Arc<Znode>);

    fn next(&mut self) -> Option<Self::Item> {
        while self.window.len() < Self::AHEAD {
            let Some((key, node)) = self.run.next() else { break };
            prefetch(key.path().as_ptr());
            prefetch(Arc::as_ptr(node).cast());
            self.window.push_back((key, node));
        }
        self.window.pop_front()
    }
}

/// Asks the CPU to start loading the cache line at `p`. Unlike a load, it does not hold up the
/// instructions after it while the line comes in.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that reads nothing the program sees and never faults, whatever
    // the address; SSE, which it needs, is part of every x86_64 target.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
