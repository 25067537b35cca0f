//! One znode as the tree stores it.

use std::collections::BTreeSet;
use warden_proto::{Acl, Stat, StatPersisted};

use crate::owner::client_visible_owner;

/// A znode: data (keeping null distinct from empty), ACL, persisted Stat and child names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Znode {
    /// Node data; `None` is the null buffer a client may send.
    pub data: Option<Vec<u8>>,
    /// The fixed-up ACL.
    pub acl: Vec<Acl>,
    /// The Stat as persisted (cversion counts child creations).
    pub stat: StatPersisted,
    /// Names (not paths) of the children.
    pub children: BTreeSet<String>,
}

impl Znode {
    /// Length of the data; null counts as 0.
    pub fn data_len(&self) -> usize {
        self.data.as_ref().map_or(0, Vec::len)
    }

    /// The Stat a client sees (reference section 10.1).
    pub fn client_stat(&self) -> Stat {
        let s = &self.stat;
        let num_children = i32::try_from(self.children.len()).unwrap_or(i32::MAX);
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
