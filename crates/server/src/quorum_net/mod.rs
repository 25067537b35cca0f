//! The quorum port shell: the leader-learner transport that ZAB runs over, as ZooKeeper's
//! `LearnerCnxAcceptor` + `LearnerHandler` (leader side, [`LeaderNet`]) and
//! `Learner.connectToLeader` / `readPacket` / `writePacket` (learner side, [`LearnerNet`]).
//!
//! Wire: jute `QuorumPacket`s written back to back with no extra length prefix, as ZooKeeper's
//! `BinaryOutputArchive.writeRecord(qp, "packet")` does over a buffered socket stream. Each jute
//! buffer in a packet is limited to `max_buffer` (jute.maxbuffer + extrasize, as
//! `BinaryInputArchive.readBuffer` checks), and the bytes buffered for one undecoded packet to
//! `max_buffer` + 64 KiB (header and authinfo); a packet beyond either limit, or one that does not
//! decode, closes that connection with a log line (bad input costs its sender the connection,
//! never the server: see ARCHITECTURE.md).
//!
//! The contract the pure ZAB machines rely on (`warden_quorum::zab`): per connection, packets are
//! delivered in order, each once, and nothing is dropped silently. So:
//! - incoming packets go to the consumer through a bounded channel with backpressure (a reader
//!   waits, TCP's window closes, the peer's writer waits) — never dropped;
//! - outgoing packets go through a bounded per-connection queue; when it is full (the peer reads
//!   too slowly) the connection is closed and reported, rather than a packet being dropped;
//! - every connection the consumer has seen ends with exactly one `Disconnected`, whatever ended
//!   it (peer close, I/O error, malformed input, full queue, write timeout, `disconnect`, or — on
//!   the leader — a newer connection from the same sid), and nothing of that connection is
//!   delivered after it.
//!
//! Tasks: each shell owns its tasks (acceptor and connections, or the one connection) and ends
//! them in `stop` (or when dropped: the tasks watch the shutdown sender).
//!
//! Snapshot stream: after a SNAP packet the leader writes, raw and with no length in front, what
//! ZooKeeper 3.8's `LearnerHandler.run` writes: `ZKDatabase.serializeSnapshot` (session count and
//! (id, timeout) pairs, the ACL cache, the nodes parents first, the "/" terminator; no file header,
//! checksum or digest) and the ustring "BenWasHere" (`LeaderNet::send_snapshot`, encoded by
//! `warden_storage::encode_snap_sync` on the writer's side). The learner decodes it item by item
//! as bytes arrive (`warden_storage::SnapshotBodyDecoder`, each string and buffer within
//! `max_buffer`, 16 GiB in all) and checks the signature, as `Learner.syncWithLeader` does, before
//! reporting `LearnerEvent::Snapshot`; anything else closes that connection.
//!
//! TLS (`sslQuorum`, `portUnification`): the leader's accepted connections and the learner's dial go
//! through [`PeerTls`] (`tls/peer.rs`); the packet layer sees a byte stream either way. SASL
//! (`quorum.auth.*`, `sasl/quorum.rs`) runs next, before the learner's first packet.
//!
//! Figures (leader side): each learner connection's packets received and sent, forwarded
//! requests, queue and last zxid, counted by ZooKeeper's `LearnerHandler` rules with relaxed
//! atomics where they happen (`stats.rs`), for the `observers` AdminServer command.
//!
//! Absent: multiple leader addresses; the observer-master port.
//! Deviations: a FOLLOWERINFO/OBSERVERINFO without LearnerInfo data (pre-3.4 learners, to which
//! ZooKeeper assigns a negative counter sid) is refused; the learner retries with backoff (10 ms
//! doubling to 1 s, at most 10 tries) where ZooKeeper sleeps a fixed 100 ms between at most 5 tries,
//! both within `initLimit * tickTime`. The short first pause matters after an election: a follower
//! often decides a moment before its new leader has opened the quorum port, and a fixed 100 ms
//! would be most of a failover.

mod conn;
mod leader;
mod learner;
mod stats;

use std::time::Duration;

use warden_proto::quorum::QuorumPacket;

use crate::sasl::quorum::QuorumSasl;
use crate::tls::peer::PeerTls;

pub use leader::{LeaderEvent, LeaderNet};
pub use learner::{ConnectError, LearnerEvent, LearnerNet};
pub use stats::LearnerLink;

/// Limits and timeouts of the quorum port shell.
#[derive(Debug, Clone)]
pub struct QuorumNetConfig {
    /// Largest jute buffer in a packet (jute.maxbuffer + `zookeeper.jute.maxbuffer.extrasize`).
    pub max_buffer: usize,
    /// Packets queued to one connection; a peer that lets it fill is disconnected.
    pub send_queue: usize,
    /// Received packets (and connection events) waiting for the consumer.
    pub recv_queue: usize,
    /// Leader: how long a new connection may take to send its first packet (ZooKeeper's socket
    /// timeout, `initLimit * tickTime`).
    pub handshake_timeout: Duration,
    /// Learner: the deadline for connecting to the leader (`initLimit * tickTime`).
    pub connect_timeout: Duration,
    /// Learner: connection attempts before giving up (ZooKeeper: 5, with longer pauses).
    pub max_connect_tries: u32,
    /// Learner: first pause between attempts; doubles up to 1 s.
    pub retry_delay: Duration,
    /// A batch of queued packets (about 64 KiB, or one larger packet) not written within this
    /// long closes the connection (a peer that stopped reading).
    pub write_timeout: Duration,
    /// Leader: learner connections open at once (registered or in handshake).
    pub max_connections: usize,
    /// TLS on the port and on the dial (`sslQuorum`, `portUnification`).
    pub tls: PeerTls,
    /// SASL after TLS, before the first packet (`quorum.auth.*`).
    pub sasl: QuorumSasl,
}

impl QuorumNetConfig {
    /// Timeouts from zoo.cfg's `tickTime`, `initLimit` and `syncLimit`.
    pub fn from_ticks(tick_ms: u64, init_limit: u32, sync_limit: u32) -> Self {
        let init = Duration::from_millis(tick_ms.saturating_mul(u64::from(init_limit)));
        let sync = Duration::from_millis(tick_ms.saturating_mul(u64::from(sync_limit)));
        QuorumNetConfig { handshake_timeout: init, connect_timeout: init, write_timeout: sync, ..Self::default() }
    }
}

impl Default for QuorumNetConfig {
    /// ZooKeeper's defaults: tickTime 2000 ms, initLimit 10, syncLimit 5.
    fn default() -> Self {
        QuorumNetConfig {
            max_buffer: QuorumPacket::DEFAULT_MAX_LEN,
            send_queue: 16_384,
            recv_queue: 4096,
            handshake_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(20),
            max_connect_tries: 10,
            retry_delay: Duration::from_millis(10),
            write_timeout: Duration::from_secs(10),
            max_connections: 256,
            tls: PeerTls::default(),
            sasl: QuorumSasl::default(),
        }
    }
}

/// Why a packet could not be queued. The connection is closed (if it was open) and its
/// `Disconnected` event is on its way; the packet was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("no connection")]
    NotConnected,
    #[error("send queue full; the connection was closed")]
    QueueFull,
}
