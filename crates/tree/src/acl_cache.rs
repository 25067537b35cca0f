//! Interned ACL lists (ZooKeeper's `ReferenceCountedACLCache`): nodes with equal ACLs share one
//! `Arc<[Acl]>`. The cache only saves memory; correctness never depends on a hit.

use std::sync::Arc;

use imbl::HashMap;
use warden_proto::Acl;

use crate::znode::{open_acl, read_acl};

/// ACL lists in use, keyed by content. A persistent map, so cloning the tree stays O(1).
#[derive(Debug, Clone, Default)]
pub(crate) struct AclCache {
    lists: HashMap<Arc<[Acl]>, ()>,
    /// Size after the last sweep; the next one runs when the cache has doubled since.
    swept_len: usize,
}

impl AclCache {
    /// The shared list equal to `acl`, adding it if new.
    pub(crate) fn intern(&mut self, acl: &[Acl]) -> Arc<[Acl]> {
        if let Some(shared) = well_known(acl) {
            return shared;
        }
        if let Some((k, ())) = self.lists.get_key_value(acl) {
            return k.clone();
        }
        let list: Arc<[Acl]> = acl.into();
        self.insert(list.clone());
        list
    }

    /// The shared list equal to `acl` if one is cached (or well known); never adds one.
    pub(crate) fn shared(&self, acl: &[Acl]) -> Option<Arc<[Acl]>> {
        well_known(acl).or_else(|| self.lists.get_key_value(acl).map(|(k, ())| k.clone()))
    }

    /// Adopts `list` (e.g. from a snapshot): returns the cached equal list if any, else caches it.
    pub(crate) fn adopt(&mut self, list: Arc<[Acl]>) -> Arc<[Acl]> {
        if let Some(shared) = well_known(&list) {
            return shared;
        }
        if let Some((k, ())) = self.lists.get_key_value(&*list) {
            return k.clone();
        }
        self.insert(list.clone());
        list
    }

    fn insert(&mut self, list: Arc<[Acl]>) {
        if self.lists.len() >= 2 * self.swept_len.max(32) {
            // Drop lists no node uses any more (only the cache holds them). A list still held by a
            // clone of the tree may survive a sweep; that only costs memory until the next one.
            // (Not `retain`: it copies the root node first, which raises the counts it reads.)
            let unused: Vec<Arc<[Acl]>> = self.lists.keys().filter(|k| Arc::strong_count(k) == 1).cloned().collect();
            for k in unused {
                self.lists.remove(&k);
            }
            self.swept_len = self.lists.len();
        }
        self.lists.insert(list, ());
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lists.len()
    }
}

fn well_known(acl: &[Acl]) -> Option<Arc<[Acl]>> {
    let open = open_acl();
    if *open == *acl {
        return Some(open);
    }
    let read = read_acl();
    (*read == *acl).then_some(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_proto::Id;

    fn digest(i: usize) -> Vec<Acl> {
        vec![Acl::new(31, Id::new("digest", format!("u{i}:x")))]
    }

    #[test]
    fn equal_lists_share_one_allocation() {
        let mut c = AclCache::default();
        assert!(Arc::ptr_eq(&c.intern(&Acl::open_unsafe()), &open_acl()));
        let a = c.intern(&digest(1));
        let b = c.intern(&digest(1));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c.intern(&digest(2))));
        let adopted = c.adopt(digest(1).into());
        assert!(Arc::ptr_eq(&a, &adopted));
        assert!(Arc::ptr_eq(&a, &c.shared(&digest(1)).unwrap()));
        assert!(Arc::ptr_eq(&open_acl(), &c.shared(&Acl::open_unsafe()).unwrap()));
        assert!(c.shared(&digest(3)).is_none(), "shared() does not add");
        assert!(c.shared(&digest(3)).is_none());
    }

    #[test]
    fn unused_lists_are_swept() {
        let mut c = AclCache::default();
        let kept = c.intern(&digest(0));
        for i in 1..1000 {
            drop(c.intern(&digest(i)));
        }
        assert!(c.len() < 100, "cache holds {} lists", c.len());
        assert!(Arc::ptr_eq(&kept, &c.intern(&digest(0))));
    }
}
