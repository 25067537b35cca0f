//! A client connection as the node sees it: its session, its authenticated ids and the queue that
//! keeps its replies in request order.

use std::collections::VecDeque;
use std::net::SocketAddr;

use warden_proto::connect::ConnectResponse;
use warden_proto::request::Request;
use warden_proto::Id;

/// One entry of a connection's reply queue. Replies leave strictly in queue order, which is request
/// order: the Java client drops the connection on an out-of-order xid.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A write waiting for its txn to be applied.
    Write { zxid: i64, arrived_ms: u64 },
    /// A write (or sync) a learner forwarded to the leader, waiting for the txn with this session's
    /// `cxid` to be applied (or for the leader's SYNC); or a sync on the leader, waiting for its
    /// quorum confirmation round. The zxid is the leader's to assign.
    Forwarded { cxid: i32, arrived_ms: u64 },
    /// A read waiting for the writes ahead of it (per-session FIFO) and, with linearizable reads,
    /// for read barrier `barrier` to pass (0: none; `roles/reads.rs`).
    Read { xid: i32, req: Request, arrived_ms: u64, barrier: u64 },
    /// A finished reply waiting for the entries ahead of it.
    Done { frame: Vec<u8>, arrived_ms: u64, close_after: bool },
}

/// Something that arrived before the handshake's session existed.
#[derive(Debug)]
pub(crate) enum Early {
    Request(Request),
    /// A SASL packet the shell already stepped (clients may pipeline it behind the ConnectRequest).
    Sasl(crate::SaslOutcome),
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub addr: SocketAddr,
    /// 0 until the handshake's session exists.
    pub session_id: i64,
    /// Whether the client sent the readOnly byte (the reply then carries one too).
    pub read_only_byte: Option<bool>,
    pub auth: Vec<Id>,
    pub queue: VecDeque<Pending>,
    /// Requests that arrived before the handshake's session existed; ZooKeeper stops reading the
    /// socket until then, so they run, in order, once the session is created.
    pub before_session: VecDeque<(i32, Early)>,
    pub received: u64,
    pub sent: u64,
    pub last_zxid: i64,
    pub timeout_ms: u32,
}

impl Conn {
    /// The ConnectResponse frame that opens session `id` on this connection.
    pub fn handshake_frame(&self, id: i64) -> Vec<u8> {
        ConnectResponse {
            protocol_version: 0,
            timeout_ms: self.timeout_ms as i32,
            session_id: id,
            passwd: crate::session::session_password(id).to_vec(),
            read_only: self.read_only_byte,
        }
        .encode_frame()
    }

    pub fn new(addr: SocketAddr) -> Self {
        let ip = addr.ip().to_string();
        Self {
            addr,
            session_id: 0,
            read_only_byte: None,
            // The scheme borrowed: one allocation fewer per connection.
            auth: vec![Id { scheme: std::borrow::Cow::Borrowed("ip"), id: ip.into() }],
            queue: VecDeque::new(),
            before_session: VecDeque::new(),
            received: 0,
            sent: 0,
            last_zxid: 0,
            timeout_ms: 0,
        }
    }

    /// Resolves the write with this zxid into a finished reply.
    pub fn complete_write(&mut self, zxid: i64, frame: Vec<u8>, close_after: bool) -> bool {
        for p in self.queue.iter_mut() {
            if let Pending::Write { zxid: z, arrived_ms } = *p {
                if z == zxid {
                    *p = Pending::Done { frame, arrived_ms, close_after };
                    return true;
                }
            }
        }
        false
    }

    /// Resolves the forwarded write (or sync) with this cxid into a finished reply.
    pub fn complete_forwarded(&mut self, cxid: i32, frame: Vec<u8>, close_after: bool) -> bool {
        for p in self.queue.iter_mut() {
            if let Pending::Forwarded { cxid: c, arrived_ms } = *p {
                if c == cxid {
                    *p = Pending::Done { frame, arrived_ms, close_after };
                    return true;
                }
            }
        }
        false
    }
}
