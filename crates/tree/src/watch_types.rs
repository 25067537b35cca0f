//! Watch enumerations (`Watcher.Event.EventType`, `Watcher.WatcherType`, `AddWatchMode`) and the
//! notification a trigger produces.

/// Event types a server sends (WatcherEvent.type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchEventType {
    /// 1
    NodeCreated = 1,
    /// 2
    NodeDeleted = 2,
    /// 3
    NodeDataChanged = 3,
    /// 4
    NodeChildrenChanged = 4,
}

impl WatchEventType {
    /// The wire value.
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// `WatcherType` of checkWatches / removeWatches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatcherType {
    /// 1: child table, standard entries.
    Children = 1,
    /// 2: data table, standard entries.
    Data = 2,
    /// 3: every mode in both tables.
    Any = 3,
    /// 4: PERSISTENT in both tables.
    Persistent = 4,
    /// 5: PERSISTENT_RECURSIVE in the data table.
    PersistentRecursive = 5,
}

impl WatcherType {
    /// Decodes a wire value.
    pub fn from_code(code: i32) -> Option<Self> {
        Some(match code {
            1 => WatcherType::Children,
            2 => WatcherType::Data,
            3 => WatcherType::Any,
            4 => WatcherType::Persistent,
            5 => WatcherType::PersistentRecursive,
            _ => return None,
        })
    }
}

/// addWatch mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddWatchMode {
    /// 0: data and child table, this path only.
    Persistent = 0,
    /// 1: data table, this path and every descendant.
    PersistentRecursive = 1,
}

impl AddWatchMode {
    /// Decodes a wire value.
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => Some(AddWatchMode::Persistent),
            1 => Some(AddWatchMode::PersistentRecursive),
            _ => None,
        }
    }
}

/// One notification to deliver: `conn` gets `{event_type, SyncConnected, path}` with `zxid`
/// in the reply header (-1 for events sent by setWatches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredWatch {
    /// The connection to notify.
    pub conn: u64,
    /// What happened.
    pub event_type: WatchEventType,
    /// The path the event is about.
    pub path: String,
    /// The txn zxid, or -1.
    pub zxid: i64,
}

/// One connection a change notifies, and of what: the notification is about the change's own
/// path (one encoding serves every watcher of a storm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triggered {
    /// The connection to notify.
    pub conn: u64,
    /// What happened.
    pub event_type: WatchEventType,
}

/// Watch counts for the `wchs` four-letter word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchSummary {
    /// Connections with at least one watch.
    pub connections: usize,
    /// Watched paths.
    pub paths: usize,
    /// (path, connection) pairs.
    pub total: usize,
}
