//! `WatchManager`: the data-watch and child-watch tables of one server, keyed by connection id
//! (ZooKeeper's `DataTree.dataWatches` / `childWatches`, each a `WatchManager`). Watches are local
//! to a server: never replicated or snapshotted.

use std::collections::BTreeMap;

use crate::outcome::{TreeEvent, TreeEventKind};
use crate::tree::DataTree;
use crate::watch_table::{mode, WatchTable};
use crate::watch_types::{AddWatchMode, FiredWatch, Triggered, WatchEventType, WatchSummary, WatcherType};

/// Which of the two tables a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchTableKind {
    /// exists / getData / persistent / recursive registrations.
    Data,
    /// getChildren / persistent registrations.
    Child,
}

/// The lists of a setWatches / setWatches2 request.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetWatchesLists<'a> {
    /// getData watches to re-arm.
    pub data: &'a [String],
    /// exists watches to re-arm.
    pub exist: &'a [String],
    /// getChildren watches to re-arm.
    pub child: &'a [String],
    /// PERSISTENT watches (setWatches2).
    pub persistent: &'a [String],
    /// PERSISTENT_RECURSIVE watches (setWatches2).
    pub recursive: &'a [String],
}

/// The data and child watch tables.
#[derive(Debug, Clone, Default)]
pub struct WatchManager {
    data: WatchTable,
    child: WatchTable,
}

impl WatchManager {
    /// No watches.
    pub fn new() -> Self {
        Self::default()
    }

    /// exists / getData with watch=true: a one-shot data watch.
    pub fn add_data_watch(&mut self, conn: u64, path: &str) {
        self.data.add(conn, path, mode::STANDARD);
    }

    /// getChildren with watch=true: a one-shot child watch.
    pub fn add_child_watch(&mut self, conn: u64, path: &str) {
        self.child.add(conn, path, mode::STANDARD);
    }

    /// addWatch: PERSISTENT goes into both tables, PERSISTENT_RECURSIVE into the data table.
    pub fn add_watch(&mut self, conn: u64, path: &str, watch_mode: AddWatchMode) {
        match watch_mode {
            AddWatchMode::Persistent => {
                self.data.add(conn, path, mode::PERSISTENT);
                self.child.add(conn, path, mode::PERSISTENT);
            }
            AddWatchMode::PersistentRecursive => {
                self.data.add(conn, path, mode::RECURSIVE);
            }
        }
    }

    /// Fires the watches a tree event triggers (as `DataTree.createNode`, `deleteNode` and
    /// `setData` trigger them), one notification per connection per table, each about the event's
    /// own path; for a delete, child-table watchers already notified by the data table are skipped
    /// (their one-shot entries are still consumed). Connections in ascending order per table.
    pub fn trigger(&mut self, ev: &TreeEvent) -> Vec<Triggered> {
        let fire = |conns: Vec<u64>, event_type: WatchEventType| -> Vec<Triggered> {
            conns.into_iter().map(|conn| Triggered { conn, event_type }).collect()
        };
        match ev.kind {
            TreeEventKind::Created => fire(self.data.trigger(&ev.path), WatchEventType::NodeCreated),
            TreeEventKind::DataChanged => fire(self.data.trigger(&ev.path), WatchEventType::NodeDataChanged),
            TreeEventKind::ChildrenChanged => fire(self.child.trigger(&ev.path), WatchEventType::NodeChildrenChanged),
            TreeEventKind::Deleted => {
                let by_data = self.data.trigger(&ev.path);
                let mut by_child = self.child.trigger(&ev.path);
                by_child.retain(|c| by_data.binary_search(c).is_err());
                let mut out = fire(by_data, WatchEventType::NodeDeleted);
                out.extend(fire(by_child, WatchEventType::NodeDeleted));
                out
            }
        }
    }

    /// Drops every watch of a closed connection.
    pub fn remove_connection(&mut self, conn: u64) {
        self.data.remove_connection(conn);
        self.child.remove_connection(conn);
    }

    /// checkWatches (17): does `conn` hold a watch of this type on `path`?
    pub fn check(&self, conn: u64, path: &str, watcher_type: WatcherType) -> bool {
        match watcher_type {
            WatcherType::Children => self.child.contains(conn, path, mode::STANDARD),
            WatcherType::Data => self.data.contains(conn, path, mode::STANDARD),
            WatcherType::Any => self.child.contains(conn, path, mode::ALL) || self.data.contains(conn, path, mode::ALL),
            WatcherType::Persistent => {
                self.child.contains(conn, path, mode::PERSISTENT) || self.data.contains(conn, path, mode::PERSISTENT)
            }
            WatcherType::PersistentRecursive => self.data.contains(conn, path, mode::RECURSIVE),
        }
    }

    /// removeWatches (18): removes `conn`'s watches of this type on `path`; false (NOWATCHER)
    /// if there were none.
    pub fn remove(&mut self, conn: u64, path: &str, watcher_type: WatcherType) -> bool {
        match watcher_type {
            WatcherType::Children => self.child.remove(conn, path, mode::STANDARD),
            WatcherType::Data => self.data.remove(conn, path, mode::STANDARD),
            WatcherType::Any => {
                let c = self.child.remove(conn, path, mode::ALL);
                self.data.remove(conn, path, mode::ALL) | c
            }
            WatcherType::Persistent => {
                let c = self.child.remove(conn, path, mode::PERSISTENT);
                self.data.remove(conn, path, mode::PERSISTENT) | c
            }
            WatcherType::PersistentRecursive => self.data.remove(conn, path, mode::RECURSIVE),
        }
    }

    /// setWatches / setWatches2 (ZooKeeper's `DataTree.setWatches`): re-arms watches after a
    /// reconnect, returning the events to send at once (zxid -1) for changes the client missed
    /// since `relative_zxid`.
    pub fn set_watches(
        &mut self,
        tree: &DataTree,
        conn: u64,
        relative_zxid: i64,
        lists: SetWatchesLists<'_>,
    ) -> Vec<FiredWatch> {
        let mut out = Vec::new();
        let mut now = |t: WatchEventType, path: &str| {
            out.push(FiredWatch { conn, event_type: t, path: path.to_string(), zxid: -1 })
        };
        for path in lists.data {
            match tree.node(path) {
                None => now(WatchEventType::NodeDeleted, path),
                Some(n) if n.stat.mzxid > relative_zxid => now(WatchEventType::NodeDataChanged, path),
                Some(_) => self.add_data_watch(conn, path),
            }
        }
        for path in lists.exist {
            match tree.node(path) {
                Some(_) => now(WatchEventType::NodeCreated, path),
                None => self.add_data_watch(conn, path),
            }
        }
        for path in lists.child {
            match tree.node(path) {
                None => now(WatchEventType::NodeDeleted, path),
                Some(n) if n.stat.pzxid > relative_zxid => now(WatchEventType::NodeChildrenChanged, path),
                Some(_) => self.add_child_watch(conn, path),
            }
        }
        for path in lists.persistent {
            self.add_watch(conn, path, AddWatchMode::Persistent);
        }
        for path in lists.recursive {
            self.add_watch(conn, path, AddWatchMode::PersistentRecursive);
        }
        out
    }

    /// Total watches, both tables (`zk_watch_count`): (path, connection) pairs.
    pub fn watch_count(&self) -> usize {
        self.data.size() + self.child.size()
    }

    /// Counts for `wchs` (ZooKeeper reports the data table).
    pub fn summary(&self, table: WatchTableKind) -> WatchSummary {
        let t = self.table(table);
        WatchSummary { connections: t.connection_count(), paths: t.path_count(), total: t.size() }
    }

    /// Paths per connection for `wchc` (ZooKeeper reports the data table).
    pub fn watches_by_connection(&self, table: WatchTableKind) -> BTreeMap<u64, Vec<String>> {
        self.table(table).by_connection()
    }

    /// Connections per path for `wchp` (ZooKeeper reports the data table).
    pub fn watches_by_path(&self, table: WatchTableKind) -> BTreeMap<String, Vec<u64>> {
        self.table(table).by_path()
    }

    fn table(&self, table: WatchTableKind) -> &WatchTable {
        match table {
            WatchTableKind::Data => &self.data,
            WatchTableKind::Child => &self.child,
        }
    }

    /// Both tables are internally consistent and the child table holds no recursive entries.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.data.check_invariants().map_err(|e| format!("data table: {e}"))?;
        self.child.check_invariants().map_err(|e| format!("child table: {e}"))?;
        let recursive_in_child = self
            .child
            .by_connection()
            .iter()
            .any(|(c, ps)| ps.iter().any(|p| self.child.contains(*c, p, mode::RECURSIVE)));
        if recursive_in_child {
            return Err("child table holds a recursive watch".into());
        }
        Ok(())
    }
}
