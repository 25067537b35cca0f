//! One znode as the tree stores it.

use std::sync::{Arc, OnceLock};
use warden_proto::{Acl, Stat, StatPersisted};

use crate::owner::client_visible_owner;

/// A znode: data (keeping null distinct from empty), ACL, persisted Stat and its child count.
///
/// Laid out for memory: the data is a boxed slice (no spare capacity), the ACL list is shared
/// (`Arc<[Acl]>`, interned by the tree, as ZooKeeper's `ReferenceCountedACLCache` does) and the
/// child names are not stored here: they are the tree's paths one level down
/// (`DataTree::children`).
#[derive(Debug, Clone)]
pub struct Znode {
    /// Node data; `None` is the null buffer a client may send.
    pub data: Option<Box<[u8]>>,
    /// The fixed-up ACL, shared between nodes with equal lists.
    pub acl: Arc<[Acl]>,
    /// The Stat as persisted (cversion counts child creations).
    pub stat: StatPersisted,
    /// Number of children. Maintained by the tree; `DataTree::from_snapshot` recomputes it.
    pub num_children: u32,
    /// At least the name word (`node_key::child_word`) of every child; it only grows while the
    /// node lives. A new child whose word is above it cannot exist yet: creates of sequential or
    /// numbered nodes skip the descent that would look for it. A hint that fits the struct's
    /// padding, not state: two nodes that differ only here are equal.
    pub child_bound: u32,
    /// CRC32 of the node's path and data, the part of its digest (`digest.rs`) a Stat change
    /// leaves alone; 0 for a node the digest leaves out. Kept by the tree as the node enters it
    /// and as its data changes, so a Stat change costs the digest no pass over the data. Not
    /// state either: two nodes that differ only here are equal.
    pub(crate) data_crc: u32,
    /// The node's digest as of its last change (kept as ZooKeeper's `DataNode` keeps it), so
    /// taking it out of the tree's digest costs nothing. Fits the struct's padding.
    pub(crate) digest: u32,
}

impl PartialEq for Znode {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
            && self.acl == other.acl
            && self.stat == other.stat
            && self.num_children == other.num_children
    }
}

impl Eq for Znode {}

impl Default for Znode {
    fn default() -> Self {
        Znode::new(None, empty_acl(), StatPersisted::default())
    }
}

impl Znode {
    /// A node with no children.
    pub fn new(data: Option<Box<[u8]>>, acl: Arc<[Acl]>, stat: StatPersisted) -> Self {
        Znode { data, acl, stat, num_children: 0, child_bound: 0, data_crc: 0, digest: 0 }
    }

    /// Length of the data; null counts as 0.
    pub fn data_len(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.len())
    }

    /// The Stat a client sees (as ZooKeeper's `DataNode.copyStat` builds it).
    pub fn client_stat(&self) -> Stat {
        let s = &self.stat;
        let num_children = i32::try_from(self.num_children).unwrap_or(i32::MAX);
        Stat {
            czxid: s.czxid,
            mzxid: s.mzxid,
            ctime: s.ctime,
            mtime: s.mtime,
            version: s.version,
            cversion: s.cversion.wrapping_mul(2).wrapping_sub(num_children),
            aversion: s.aversion,
            ephemeral_owner: client_visible_owner(s.ephemeral_owner),
            data_length: i32::try_from(self.data_len()).unwrap_or(i32::MAX),
            num_children,
            pzxid: s.pzxid,
        }
    }
}

fn shared(cell: &'static OnceLock<Arc<[Acl]>>, make: fn() -> Vec<Acl>) -> Arc<[Acl]> {
    cell.get_or_init(|| make().into()).clone()
}

/// The shared empty ACL list.
pub fn empty_acl() -> Arc<[Acl]> {
    static CELL: OnceLock<Arc<[Acl]>> = OnceLock::new();
    shared(&CELL, Vec::new)
}

/// The shared `OPEN_ACL_UNSAFE` list (all permissions to world:anyone).
pub fn open_acl() -> Arc<[Acl]> {
    static CELL: OnceLock<Arc<[Acl]>> = OnceLock::new();
    shared(&CELL, Acl::open_unsafe)
}

/// The shared `READ_ACL_UNSAFE` list (read permission to world:anyone).
pub fn read_acl() -> Arc<[Acl]> {
    static CELL: OnceLock<Arc<[Acl]>> = OnceLock::new();
    shared(&CELL, Acl::read_unsafe)
}
