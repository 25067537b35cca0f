//! One watch table (ZooKeeper's `WatchManager`): path -> connections and connection -> path ->
//! modes (standard, persistent, persistent-recursive).

use std::collections::{BTreeMap, BTreeSet};

use crate::path::parent;

/// Mode bits of one (connection, path) registration.
pub(crate) mod mode {
    pub const STANDARD: u8 = 1;
    pub const PERSISTENT: u8 = 2;
    pub const RECURSIVE: u8 = 4;
    pub const ALL: u8 = 7;
}

/// A table of watches keyed both ways.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatchTable {
    by_path: BTreeMap<String, BTreeSet<u64>>,
    by_conn: BTreeMap<u64, BTreeMap<String, u8>>,
    recursive: usize,
}

impl WatchTable {
    /// Adds `bits` for (conn, path); true if anything new was registered.
    pub fn add(&mut self, conn: u64, path: &str, bits: u8) -> bool {
        let modes = self.by_conn.entry(conn).or_default().entry(path.to_string()).or_insert(0);
        let old = *modes;
        *modes |= bits;
        if *modes == old {
            return false;
        }
        if old & mode::RECURSIVE == 0 && *modes & mode::RECURSIVE != 0 {
            self.recursive += 1;
        }
        self.by_path.entry(path.to_string()).or_default().insert(conn);
        true
    }

    /// Does (conn, path) hold any of `bits`?
    pub fn contains(&self, conn: u64, path: &str, bits: u8) -> bool {
        self.modes(conn, path) & bits != 0
    }

    fn modes(&self, conn: u64, path: &str) -> u8 {
        self.by_conn.get(&conn).and_then(|m| m.get(path)).copied().unwrap_or(0)
    }

    /// Removes `bits` from (conn, path); true if something was removed.
    pub fn remove(&mut self, conn: u64, path: &str, bits: u8) -> bool {
        let old = self.modes(conn, path);
        if old & bits == 0 {
            return false;
        }
        self.set_modes(conn, path, old & !bits);
        true
    }

    fn set_modes(&mut self, conn: u64, path: &str, new: u8) {
        let old = self.modes(conn, path);
        if old & mode::RECURSIVE != 0 && new & mode::RECURSIVE == 0 {
            self.recursive -= 1;
        }
        if new != 0 {
            self.by_conn.entry(conn).or_default().insert(path.to_string(), new);
            return;
        }
        if let Some(m) = self.by_conn.get_mut(&conn) {
            m.remove(path);
            if m.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
        if let Some(s) = self.by_path.get_mut(path) {
            s.remove(&conn);
            if s.is_empty() {
                self.by_path.remove(path);
            }
        }
    }

    /// Fires the table for `path`: exact-path registrations of any mode fire (standard ones are
    /// removed), and recursive registrations on ancestors fire. Returns the connections hit, in
    /// ascending order, each once. The exact path's set is taken whole rather than emptied one
    /// connection at a time: a storm fires thousands of one-shot watches on one path.
    pub fn trigger(&mut self, path: &str) -> Vec<u64> {
        let mut hit = Vec::new();
        if let Some(conns) = self.by_path.remove(path) {
            hit.reserve_exact(conns.len());
            // Connections whose registration outlives the trigger (persistent modes).
            let mut kept = BTreeSet::new();
            for conn in conns {
                hit.push(conn);
                let Some(paths) = self.by_conn.get_mut(&conn) else { continue };
                let Some(bits) = paths.get_mut(path) else { continue };
                *bits &= !mode::STANDARD;
                if *bits != 0 {
                    kept.insert(conn);
                } else {
                    paths.remove(path);
                    if paths.is_empty() {
                        self.by_conn.remove(&conn);
                    }
                }
            }
            if !kept.is_empty() {
                self.by_path.insert(path.to_string(), kept);
            }
        }
        if self.recursive > 0 {
            let exact = hit.len();
            let mut p = path;
            while p != "/" {
                p = parent(p);
                for conn in self.by_path.get(p).into_iter().flatten() {
                    if self.contains(*conn, p, mode::RECURSIVE) {
                        hit.push(*conn);
                    }
                }
            }
            if hit.len() > exact {
                hit.sort_unstable();
                hit.dedup();
            }
        }
        hit
    }

    /// Drops every registration of `conn`.
    pub fn remove_connection(&mut self, conn: u64) {
        let paths: Vec<String> = self.by_conn.get(&conn).map(|m| m.keys().cloned().collect()).unwrap_or_default();
        for p in paths {
            self.set_modes(conn, &p, 0);
        }
    }

    /// Number of (path, connection) pairs.
    pub fn size(&self) -> usize {
        self.by_path.values().map(BTreeSet::len).sum()
    }

    /// Connections with at least one registration.
    pub fn connection_count(&self) -> usize {
        self.by_conn.len()
    }

    /// Paths with at least one registration.
    pub fn path_count(&self) -> usize {
        self.by_path.len()
    }

    /// Paths watched per connection.
    pub fn by_connection(&self) -> BTreeMap<u64, Vec<String>> {
        self.by_conn.iter().map(|(c, m)| (*c, m.keys().cloned().collect())).collect()
    }

    /// Connections per watched path.
    pub fn by_path(&self) -> BTreeMap<String, Vec<u64>> {
        self.by_path.iter().map(|(p, s)| (p.clone(), s.iter().copied().collect())).collect()
    }

    /// Both maps agree, no empty entries, and the recursive counter is right.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut recursive = 0;
        for (conn, m) in &self.by_conn {
            if m.is_empty() {
                return Err(format!("conn {conn}: empty path map"));
            }
            for (p, bits) in m {
                if *bits == 0 || *bits & !mode::ALL != 0 {
                    return Err(format!("conn {conn} {p}: bad mode bits {bits}"));
                }
                recursive += usize::from(*bits & mode::RECURSIVE != 0);
                if !self.by_path.get(p).is_some_and(|s| s.contains(conn)) {
                    return Err(format!("conn {conn} {p}: missing from by_path"));
                }
            }
        }
        let pairs: usize = self.by_conn.values().map(BTreeMap::len).sum();
        if pairs != self.size() || self.by_path.values().any(BTreeSet::is_empty) {
            return Err("by_path and by_conn disagree".into());
        }
        if recursive != self.recursive {
            return Err(format!("recursive count {} != {recursive}", self.recursive));
        }
        Ok(())
    }
}
