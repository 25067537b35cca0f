//! What applying a txn produces: a result for the reply and the events for the watch registry.

use std::sync::Arc;

use warden_proto::{Acl, ErrorCode, Stat};

/// The result of applying one txn (ZooKeeper's `ProcessTxnResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnResult {
    /// A node was created; `stat` is the new node's client Stat.
    Created { path: String, stat: Stat },
    /// A node was deleted (delete or deleteContainer).
    Deleted,
    /// Data was set; the node's Stat afterwards.
    SetData { stat: Stat },
    /// ACL was set; the node's Stat afterwards.
    SetAcl { stat: Stat },
    /// A version check passed (multi only).
    Check,
    /// A session was created.
    SessionCreated,
    /// A session was closed and its ephemerals deleted.
    SessionClosed,
    /// The txn failed (or was an error txn): the code to report.
    Error(ErrorCode),
    /// Results of a multi, one per sub-txn.
    Multi(Vec<TxnResult>),
}

impl TxnResult {
    /// The error code of this result: `Ok` unless it is an error; for a multi the first non-zero
    /// sub-result's code.
    pub fn err(&self) -> ErrorCode {
        match self {
            TxnResult::Error(e) => *e,
            TxnResult::Multi(rs) => {
                rs.iter().map(TxnResult::err).find(|e| *e != ErrorCode::Ok).unwrap_or(ErrorCode::Ok)
            }
            _ => ErrorCode::Ok,
        }
    }
}

/// The kind of change a tree event describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeEventKind {
    /// A node appeared at `path`.
    Created,
    /// The node at `path` was deleted.
    Deleted,
    /// The data of `path` changed.
    DataChanged,
    /// The children of `path` changed.
    ChildrenChanged,
}

/// One change to the tree, in apply order, for watch triggering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEvent {
    /// The path the event is about (the parent for `ChildrenChanged`), shared with the node map's
    /// key.
    pub path: Arc<str>,
    /// What happened.
    pub kind: TreeEventKind,
    /// The zxid of the txn that caused it.
    pub zxid: i64,
    /// The ACL of the node the event is about (for a deleted node, the ACL it had), for the
    /// READ filter on delivery (ZOOKEEPER-4799).
    pub acl: Arc<[Acl]>,
    /// `Created` and `DataChanged`: the node's data length after the change; 0 otherwise (what
    /// ZooKeeper's `write_per_namespace` adds to the path's length).
    pub data_len: usize,
}

/// Result plus events of one applied txn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// What to reply.
    pub result: TxnResult,
    /// Events to feed the watch registry, in order.
    pub events: Vec<TreeEvent>,
}
