//! Keys of the node map: a path behind a 64-bit order word, so a lookup compares integers held in
//! the map's own nodes and reads a key's path (a separate heap allocation) only when the words tie.
//! The path is shared (`Arc<str>`): while a snapshot holds a clone of the map, every write copies
//! the B-tree nodes on its way, and copying a node's keys must not allocate a path for each.
//!
//! The word is `hash(parent) << 32 | name_word(name)` (the hash is ahash with fixed keys, 32 bits),
//! and keys sort by (word, path). A node's children therefore sit together: they are the keys whose
//! word's high half is the parent's hash and whose parent is the node (another parent with the same
//! 32-bit hash interleaves, so a scan checks the parent). Within that run, a name that ends in a
//! decimal number sorts by the number (its last nine digits) and any other name by its hash: the
//! nodes of a sequence (sequential znodes, numbered items) sit side by side, so a run of creates
//! appends to one hot leaf instead of descending to a random one each time, and while a snapshot
//! shares the map it copies few leaves. Ties (equal numbers, hash collisions) fall back to the path,
//! so they cost time, never correctness. The order says nothing about paths otherwise: walks that
//! need parents before children (snapshots) descend through the children runs.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::sync::Arc;

use crate::path::{basename, parent, split_last};

/// A stored key.
#[derive(Debug, Clone)]
pub(crate) struct NodeKey {
    order: u64,
    path: Arc<str>,
}

impl NodeKey {
    pub(crate) fn new(path: Arc<str>) -> Self {
        NodeKey { order: order_of(&path), path }
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The path as stored, for holders that share it rather than copy it.
    pub(crate) fn shared_path(&self) -> &Arc<str> {
        &self.path
    }
}

/// What both a stored key and a lookup probe show the map's comparisons.
pub(crate) trait KeyView {
    fn order(&self) -> u64;
    fn path(&self) -> &str;
}

impl KeyView for NodeKey {
    fn order(&self) -> u64 {
        self.order
    }
    fn path(&self) -> &str {
        &self.path
    }
}

/// A lookup key borrowing its path: built per lookup without allocating.
pub(crate) struct Probe<'a> {
    order: u64,
    path: &'a str,
}

impl<'a> Probe<'a> {
    pub(crate) fn new(path: &'a str) -> Self {
        Probe { order: order_of(path), path }
    }

    /// The first key a scan of `parent_path`'s children can meet.
    pub(crate) fn first_child_of(parent_path: &'a str) -> Self {
        Probe { order: hash32(parent_path) << 32, path: "" }
    }

    pub(crate) fn view(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl KeyView for Probe<'_> {
    fn order(&self) -> u64 {
        self.order
    }
    fn path(&self) -> &str {
        self.path
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order() && self.path() == other.path()
    }
}

impl Eq for dyn KeyView + '_ {}

impl PartialOrd for dyn KeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn KeyView + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order().cmp(&other.order()).then_with(|| self.path().cmp(other.path()))
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for NodeKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

// The stored key orders exactly as its view does (`Borrow`'s contract).
impl PartialEq for NodeKey {
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order && self.path == other.path
    }
}

impl Eq for NodeKey {}

impl PartialOrd for NodeKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for NodeKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order.cmp(&other.order).then_with(|| self.path.cmp(&other.path))
    }
}

/// True if `key` names a child of `parent_path` (the root is nobody's child).
pub(crate) fn is_child_of(key: &str, parent_path: &str) -> bool {
    key != "/" && parent(key) == parent_path
}

/// The high half of the order words of `parent_path`'s children.
pub(crate) fn parent_half(parent_path: &str) -> u64 {
    hash32(parent_path)
}

pub(crate) fn high_half(key: &NodeKey) -> u64 {
    key.order >> 32
}

fn order_of(path: &str) -> u64 {
    if path == "/" {
        return 0;
    }
    let (parent, name) = split_last(path);
    (hash32(parent) << 32) | name_word(name)
}

/// The low half of `path`'s order word: what `Znode::child_bound` bounds.
pub(crate) fn child_word(path: &str) -> u32 {
    name_word(basename(path)) as u32
}

/// The low half of a key's order word: the number a name ends with (its last nine digits at most,
/// which fit 32 bits), or the name's hash if it does not end in a digit.
fn name_word(name: &str) -> u64 {
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count().min(9);
    if digits == 0 {
        return hash32(name);
    }
    name[name.len() - digits..].bytes().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'))
}

fn hash32(s: &str) -> u64 {
    // Fixed keys: the order (and so every walk of the map) is the same in every process.
    static STATE: ahash::RandomState = ahash::RandomState::with_seeds(
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    );
    STATE.hash_one(s) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_and_key_agree() {
        let paths =
            ["/", "/a", "/a/b", "/a/c", "/b", "/a b", "/zookeeper/quota", "/a/1", "/a/01", "/a/x1", "/a/2", "/a/b9"];
        for a in paths {
            for b in paths {
                let (ka, kb) = (NodeKey::new(a.into()), NodeKey::new(b.into()));
                let (pa, pb) = (Probe::new(a), Probe::new(b));
                let via_view = <NodeKey as Borrow<dyn KeyView>>::borrow(&ka).cmp(pb.view());
                assert_eq!(ka.cmp(&kb), via_view, "{a} vs {b}");
                assert_eq!(pa.view().cmp(pb.view()), via_view, "{a} vs {b}");
                assert_eq!(ka == kb, a == b);
            }
        }
    }

    #[test]
    fn siblings_share_the_high_half() {
        let (x, y) = (NodeKey::new("/p/x".into()), NodeKey::new("/p/y".into()));
        assert_eq!(high_half(&x), parent_half("/p"));
        assert_eq!(high_half(&y), parent_half("/p"));
        assert!(Probe::first_child_of("/p").view() <= <NodeKey as Borrow<dyn KeyView>>::borrow(&x));
        assert_eq!(high_half(&NodeKey::new("/q".into())), parent_half("/"));
        assert!(is_child_of("/p/x", "/p") && !is_child_of("/p/x/y", "/p") && !is_child_of("/", "/"));
    }

    #[test]
    fn numbered_siblings_sort_by_their_number() {
        let word = |p: &str| NodeKey::new(p.into()).order & 0xffff_ffff;
        assert_eq!(word("/q/lock-0000000042"), 42);
        assert_eq!(word("/q/7"), 7);
        // Only the last nine digits count: ten-digit sequence numbers still fit the low half.
        assert_eq!(word("/q/n1234567890"), 234_567_890);
        assert_eq!(word("/q/name"), hash32("name"));
        // Consecutive numbers are neighbours in the map, ties are broken by the path.
        let mut keys: Vec<NodeKey> =
            ["/q/x-10", "/q/x-9", "/q/y-9", "/q/x-11"].into_iter().map(|p| NodeKey::new(p.into())).collect();
        keys.sort();
        let sorted: Vec<&str> = keys.iter().map(NodeKey::path).collect();
        assert_eq!(sorted, ["/q/x-9", "/q/y-9", "/q/x-10", "/q/x-11"]);
    }

    /// Tree events carry the node map's own copy of their path, not a new one.
    #[test]
    fn events_share_the_stored_path() {
        use std::sync::Arc;
        use warden_proto::{Acl, Txn, TxnHeader};
        let mut t = crate::DataTree::new();
        let mut zxid = 0;
        let mut apply = |t: &mut crate::DataTree, txn: Txn| {
            zxid += 1;
            let hdr = TxnHeader { client_id: 1, cxid: 0, zxid, time_ms: zxid, txn_type: 1 };
            t.apply(&hdr, &txn).events
        };
        let create = |path: &str| Txn::Create {
            path: path.into(),
            data: None,
            acl: Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: -1,
        };
        let stored = |t: &crate::DataTree, path: &str| t.get_with_path(path).unwrap().0.clone();
        apply(&mut t, create("/p"));
        let events = apply(&mut t, create("/p/c"));
        assert_eq!(events.len(), 2);
        assert!(Arc::ptr_eq(&events[0].path, &stored(&t, "/p/c")));
        assert!(Arc::ptr_eq(&events[1].path, &stored(&t, "/p")));
        let events = apply(&mut t, Txn::SetData { path: "/p/c".into(), data: Some(vec![1].into()), version: 1 });
        assert!(Arc::ptr_eq(&events[0].path, &stored(&t, "/p/c")));
        let events = apply(&mut t, Txn::Delete { path: "/p/c".into() });
        assert_eq!(&*events[0].path, "/p/c");
        assert!(Arc::ptr_eq(&events[1].path, &stored(&t, "/p")));
    }

    /// Two parents whose hashes collide share one run of keys: children, subtree walks and
    /// deletes still see only their own.
    #[test]
    fn colliding_parents_keep_their_children_apart() {
        use std::collections::HashMap;
        use warden_proto::{Acl, Txn, TxnHeader};
        let mut seen: HashMap<u64, String> = HashMap::new();
        let (a, b) = (0u32..)
            .find_map(|i| {
                let p = format!("/c{i}");
                seen.insert(hash32(&p), p.clone()).map(|q| (q, p))
            })
            .unwrap();
        assert_eq!(parent_half(&a), parent_half(&b));
        let mut t = crate::DataTree::new();
        let mut zxid = 0;
        let mut create = |t: &mut crate::DataTree, path: String| {
            zxid += 1;
            let hdr = TxnHeader { client_id: 1, cxid: 0, zxid, time_ms: zxid, txn_type: 1 };
            let txn = Txn::Create { path, data: None, acl: Acl::open_unsafe(), ephemeral: false, parent_cversion: -1 };
            assert!(matches!(t.apply(&hdr, &txn).result, crate::TxnResult::Created { .. }));
        };
        for p in [a.clone(), b.clone()] {
            create(&mut t, p.clone());
            // Numbered children of the two parents tie on the whole order word.
            for c in ["x", "y", "z", "1", "2"] {
                create(&mut t, format!("{p}/{c}"));
            }
            create(&mut t, format!("{p}/x/deep"));
        }
        t.check_invariants().unwrap();
        assert_eq!(t.children(&a).unwrap(), ["1", "2", "x", "y", "z"]);
        assert_eq!(t.children(&b).unwrap(), ["1", "2", "x", "y", "z"]);
        assert_eq!(t.all_children_number(&a), Some(6));
        let walked: Vec<&str> = t.walk(&b).map(|(p, _)| p).collect();
        assert_eq!(walked.len(), 7);
        assert!(walked.iter().all(|p| p.starts_with(b.as_str())), "{walked:?}");
        assert_eq!(t.snapshot_nodes().count(), t.znode_count());
    }
}
