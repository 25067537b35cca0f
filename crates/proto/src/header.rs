//! Frame headers of the client protocol (`RequestHeader`, `ReplyHeader`, `MultiHeader`,
//! `WatcherEvent` in `zookeeper.jute`): the request and reply headers, the multi sub-operation
//! header, watch notifications and the watch enumerations (ZooKeeper's `Watcher`).

use crate::jute::{DecodeError, Reader, Record, Writer};

/// First record of every client frame after the handshake: `int xid, int type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RequestHeader {
    /// Client-chosen id echoed in the reply; negative values are the reserved xids of [`crate::xid`].
    pub xid: i32,
    /// The opcode (see [`crate::OpCode`]).
    pub op_type: i32,
}

impl Record for RequestHeader {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.xid);
        w.write_i32(self.op_type);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { xid: r.read_i32()?, op_type: r.read_i32()? })
    }
}

/// First record of every server frame after the handshake: `int xid, long zxid, int err`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ReplyHeader {
    /// The request's xid, or -1 for a watch notification.
    pub xid: i32,
    /// The server's last processed zxid when the reply was built (or the firing txn's zxid).
    pub zxid: i64,
    /// Error code; when non-zero the reply carries no body.
    pub err: i32,
}

impl Record for ReplyHeader {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.xid);
        w.write_i64(self.zxid);
        w.write_i32(self.err);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { xid: r.read_i32()?, zxid: r.read_i64()?, err: r.read_i32()? })
    }
}

/// Header before each multi sub-operation or sub-result: `int type, boolean done, int err`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct MultiHeader {
    /// Sub-op opcode, or -1 for an error result and for the terminator.
    pub op_type: i32,
    /// True only on the terminating header.
    pub done: bool,
    /// -1 in requests; 0 or the error code in responses; -1 on the terminator.
    pub err: i32,
}

impl MultiHeader {
    /// The header that ends a multi request or response: `{-1, true, -1}`.
    pub const END: MultiHeader = MultiHeader { op_type: -1, done: true, err: -1 };
}

impl Record for MultiHeader {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.op_type);
        w.write_bool(self.done);
        w.write_i32(self.err);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { op_type: r.read_i32()?, done: r.read_bool()?, err: r.read_i32()? })
    }
}

/// Body of a watch notification (xid -1): `int type, int state, ustring path`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct WatcherEvent {
    /// An [`EventType`] code.
    pub event_type: i32,
    /// A keeper state; servers always send [`keeper_state::SYNC_CONNECTED`].
    pub state: i32,
    /// Server-side (un-chrooted) path of the node the event is about.
    pub path: String,
}

impl WatcherEvent {
    /// A server-sent event: the given type, state SyncConnected.
    pub fn new(event_type: EventType, path: impl Into<String>) -> Self {
        Self { event_type: event_type.code(), state: keeper_state::SYNC_CONNECTED, path: path.into() }
    }
}

impl Record for WatcherEvent {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.event_type);
        w.write_i32(self.state);
        w.write_ustring(&self.path);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { event_type: r.read_i32()?, state: r.read_i32()?, path: r.read_ustring()? })
    }
}

/// Watch event types a server sends (`Watcher.Event.EventType`). Types 5-7 are client-local.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum EventType {
    /// Connection-state change; never sent for a node.
    None = -1,
    NodeCreated = 1,
    NodeDeleted = 2,
    NodeDataChanged = 3,
    NodeChildrenChanged = 4,
}

impl EventType {
    /// The wire value.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The event type for a wire value, if a server may send it.
    pub fn from_code(code: i32) -> Option<Self> {
        use EventType::*;
        [None, NodeCreated, NodeDeleted, NodeDataChanged, NodeChildrenChanged].into_iter().find(|e| e.code() == code)
    }
}

/// `Watcher.Event.KeeperState` values. A server only ever sends `SYNC_CONNECTED`.
pub mod keeper_state {
    /// Disconnected (client-local).
    pub const DISCONNECTED: i32 = 0;
    /// The state carried by every server-sent notification.
    pub const SYNC_CONNECTED: i32 = 3;
    /// AuthFailed (client-local).
    pub const AUTH_FAILED: i32 = 4;
    /// ConnectedReadOnly (client-local).
    pub const CONNECTED_READ_ONLY: i32 = 5;
    /// Expired (client-local; same value as SESSIONEXPIRED).
    pub const EXPIRED: i32 = -112;
}

/// `Watcher.WatcherType` values of checkWatches / removeWatches requests.
pub mod watcher_type {
    /// Standard child watches.
    pub const CHILDREN: i32 = 1;
    /// Standard data (and exist) watches.
    pub const DATA: i32 = 2;
    /// Every kind.
    pub const ANY: i32 = 3;
    /// Persistent watches (3.9.0+).
    pub const PERSISTENT: i32 = 4;
    /// Persistent recursive watches (3.9.0+).
    pub const PERSISTENT_RECURSIVE: i32 = 5;
}

/// ZooKeeper's `AddWatchMode` values of addWatch requests.
pub mod add_watch_mode {
    /// A watch on one path that survives firing.
    pub const PERSISTENT: i32 = 0;
    /// A watch on a whole subtree that survives firing.
    pub const PERSISTENT_RECURSIVE: i32 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_with_fixed_sizes() {
        let h = RequestHeader { xid: -2, op_type: 11 };
        assert_eq!(h.to_bytes(), [0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11]);
        assert_eq!(RequestHeader::from_bytes(&h.to_bytes()), Ok(h));
        let r = ReplyHeader { xid: 7, zxid: 0x1_0000_0002, err: -101 };
        assert_eq!(r.to_bytes().len(), 16);
        assert_eq!(ReplyHeader::from_bytes(&r.to_bytes()), Ok(r));
        assert_eq!(MultiHeader::END.to_bytes(), [0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(MultiHeader::from_bytes(&MultiHeader::END.to_bytes()), Ok(MultiHeader::END));
    }

    #[test]
    fn watcher_event_round_trips() {
        let e = WatcherEvent::new(EventType::NodeDataChanged, "/a/b");
        assert_eq!(e.state, 3);
        let b = e.to_bytes();
        assert_eq!(&b[..8], [0, 0, 0, 3, 0, 0, 0, 3]);
        assert_eq!(WatcherEvent::from_bytes(&b), Ok(e));
        for n in 0..b.len() {
            assert!(matches!(WatcherEvent::from_bytes(&b[..n]), Err(DecodeError::Incomplete { .. })));
        }
    }

    #[test]
    fn event_type_codes() {
        for c in -2..8 {
            if let Some(e) = EventType::from_code(c) {
                assert_eq!(e.code(), c);
            }
        }
        assert_eq!(EventType::from_code(4), Some(EventType::NodeChildrenChanged));
        assert_eq!(EventType::from_code(5), None);
    }
}
