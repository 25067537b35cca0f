//! Per-learner connection figures on the leader, as ZooKeeper's `LearnerHandler` keeps them for
//! the `observers` AdminServer command (`getLearnerHandlerInfo`) and resets them for
//! `observer_connection_stat_reset` (`resetObserverConnectionStats`).
//!
//! Each figure is counted where it happens, with a relaxed atomic add and nothing else: the
//! owner task when it queues a packet ([`LinkStats::queued`]), the connection's writer when it
//! takes a packet off the queue and writes it ([`LinkStats::taken`], [`LinkStats::written`]), its
//! reader when a packet arrives ([`LinkStats::received`]). The owner reads them when asked.
//!
//! ZooKeeper's rules, followed here:
//! - `packets_received` counts what `LearnerHandler.run`'s main loop reads, which starts after the
//!   ACK of NEWLEADER: the first packet (FOLLOWERINFO / OBSERVERINFO), ACKEPOCH and that first
//!   ACK are read before it and not counted.
//! - `packets_sent` counts what the sender thread writes from the queue; LEADERINFO and SNAP (and
//!   the snapshot stream after it) are written straight to the socket and not counted. Each
//!   counted packet with a zxid above 0 becomes `last_zxid` (-1 until then and after a reset).
//! - `requests` counts REQUEST packets (writes and syncs the learner forwards).
//! - `queued_packets` / `queued_packets_size`: packets queued and not yet taken by the writer,
//!   and their approximate size as `LearnerHandler.packetSize` reckons it (28 bytes plus the data).
//!   ZooKeeper puts NEWLEADER and UPTODATE on the queue without adding their size but subtracts it
//!   when they are sent, so after a sync its figure stays below 0 by their size (-234 with a
//!   178-byte NEWLEADER config): so does Warden's, as a monitor comparing the two would expect.
//! - A reset zeroes `packets_received`, `packets_sent` and `requests`, and sets `last_zxid` to -1.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

use warden_proto::quorum::{packet_type as pt, QuorumPacket};

/// The figures of one learner connection (leader side). Shared by the owner's handle and the
/// connection's reader and writer.
#[derive(Debug)]
pub(crate) struct LinkStats {
    peer: SocketAddr,
    established_ms: i64,
    queued: AtomicU64,
    queued_size: AtomicI64,
    received: AtomicU64,
    sent: AtomicU64,
    requests: AtomicU64,
    last_zxid: AtomicI64,
    /// Reader only: the ACK of NEWLEADER has arrived (ZooKeeper's main loop has begun).
    past_newleader_ack: AtomicBool,
}

/// A copy of one learner connection's figures, under ZooKeeper's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnerLink {
    /// The learner's address as the leader's socket sees it.
    pub remote_socket_address: SocketAddr,
    /// When the connection was accepted, in ms since the Unix epoch.
    pub established_ms: i64,
    pub queued_packets: u64,
    /// Below 0 after a sync, as ZooKeeper's (see the module docs).
    pub queued_packets_size: i64,
    pub packets_received: u64,
    pub packets_sent: u64,
    pub requests: u64,
    pub last_zxid: i64,
}

/// `LearnerHandler.packetSize`: type, zxid, and two references, plus the data.
fn packet_size(p: &QuorumPacket) -> i64 {
    28 + p.data.as_ref().map_or(0, |d| d.len() as i64)
}

impl LinkStats {
    pub(crate) fn new(peer: SocketAddr, established_ms: i64) -> Self {
        LinkStats {
            peer,
            established_ms,
            queued: AtomicU64::new(0),
            queued_size: AtomicI64::new(0),
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            last_zxid: AtomicI64::new(-1),
            past_newleader_ack: AtomicBool::new(false),
        }
    }

    /// The owner queued `p` to the writer. NEWLEADER and UPTODATE add no size, as in ZooKeeper
    /// (`LearnerHandler` puts them on its queue directly, not through `queuePacket`).
    pub(crate) fn queued(&self, p: &QuorumPacket) {
        self.queued.fetch_add(1, Relaxed);
        if p.packet_type != pt::NEWLEADER && p.packet_type != pt::UPTODATE {
            self.queued_size.fetch_add(packet_size(p), Relaxed);
        }
    }

    /// The owner's queueing of `p` failed: undoes [`LinkStats::queued`].
    pub(crate) fn unqueued(&self, p: &QuorumPacket) {
        self.queued.fetch_sub(1, Relaxed);
        if p.packet_type != pt::NEWLEADER && p.packet_type != pt::UPTODATE {
            self.queued_size.fetch_sub(packet_size(p), Relaxed);
        }
    }

    /// The writer took `p` off the queue (ZooKeeper's `sendPackets` subtracts every packet's size).
    pub(crate) fn taken(&self, p: &QuorumPacket) {
        self.queued.fetch_sub(1, Relaxed);
        self.queued_size.fetch_sub(packet_size(p), Relaxed);
    }

    /// The writer wrote `p` to the connection.
    pub(crate) fn written(&self, p: &QuorumPacket) {
        if p.packet_type == pt::LEADERINFO || p.packet_type == pt::SNAP {
            return;
        }
        if p.zxid > 0 {
            self.last_zxid.store(p.zxid, Relaxed);
        }
        self.sent.fetch_add(1, Relaxed);
    }

    /// The reader read `p`, a packet after the connection's first.
    pub(crate) fn received(&self, p: &QuorumPacket) {
        match p.packet_type {
            pt::ACKEPOCH => return,
            pt::ACK if !self.past_newleader_ack.load(Relaxed) => {
                self.past_newleader_ack.store(true, Relaxed);
                return;
            }
            pt::REQUEST => {
                self.requests.fetch_add(1, Relaxed);
            }
            _ => {}
        }
        self.received.fetch_add(1, Relaxed);
    }

    /// `resetObserverConnectionStats`.
    pub(crate) fn reset(&self) {
        self.received.store(0, Relaxed);
        self.sent.store(0, Relaxed);
        self.requests.store(0, Relaxed);
        self.last_zxid.store(-1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LearnerLink {
        LearnerLink {
            remote_socket_address: self.peer,
            established_ms: self.established_ms,
            queued_packets: self.queued.load(Relaxed),
            queued_packets_size: self.queued_size.load(Relaxed),
            packets_received: self.received.load(Relaxed),
            packets_sent: self.sent.load(Relaxed),
            requests: self.requests.load(Relaxed),
            last_zxid: self.last_zxid.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(packet_type: i32, zxid: i64, data: Option<&[u8]>) -> QuorumPacket {
        QuorumPacket { packet_type, zxid, data: data.map(<[u8]>::to_vec), authinfo: Vec::new() }
    }

    #[test]
    fn counts_as_zookeepers_learner_handler_and_resets_its_figures() {
        let s = LinkStats::new("127.0.0.1:4000".parse().unwrap(), 1_700_000_000_000);
        let fresh = s.snapshot();
        assert_eq!((fresh.packets_received, fresh.packets_sent, fresh.requests, fresh.last_zxid), (0, 0, 0, -1));

        // Handshake: ACKEPOCH and the ACK of NEWLEADER come before the main loop.
        s.received(&packet(pt::ACKEPOCH, 0, Some(&[0; 12])));
        s.received(&packet(pt::ACK, 0x1_0000_0000, None));
        assert_eq!(s.snapshot().packets_received, 0);
        // The main loop: every packet, REQUESTs also as requests.
        s.received(&packet(pt::ACK, 0x1_0000_0000, None));
        s.received(&packet(pt::PING, 0, Some(&[])));
        s.received(&packet(pt::REQUEST, -1, Some(&[0; 16])));
        s.received(&packet(pt::REQUEST, -1, Some(&[0; 16])));
        let l = s.snapshot();
        assert_eq!((l.packets_received, l.requests), (4, 2));

        // Queued, then taken and written; LEADERINFO and SNAP go straight to the socket in
        // ZooKeeper and are not counted as sent.
        let sent = [
            packet(pt::LEADERINFO, 0x1_0000_0000, Some(&[0; 4])),
            packet(pt::DIFF, 0x5, None),
            packet(pt::NEWLEADER, 0x1_0000_0000, None),
            packet(pt::UPTODATE, -1, None),
            packet(pt::INFORM, 0x1_0000_0001, Some(&[1; 10])),
            packet(pt::PING, 0, None),
        ];
        for p in &sent {
            s.queued(p);
        }
        // NEWLEADER and UPTODATE add no size but take theirs off when sent, as in ZooKeeper.
        let l = s.snapshot();
        assert_eq!((l.queued_packets, l.queued_packets_size), (6, 4 * 28 + 4 + 10));
        for p in &sent {
            s.taken(p);
            s.written(p);
        }
        let l = s.snapshot();
        assert_eq!((l.queued_packets, l.queued_packets_size), (0, -2 * 28));
        // A queueing that failed is undone exactly.
        s.queued(&sent[1]);
        s.queued(&sent[2]);
        s.unqueued(&sent[1]);
        s.unqueued(&sent[2]);
        assert_eq!((s.snapshot().queued_packets, s.snapshot().queued_packets_size), (0, -2 * 28));
        assert_eq!(l.packets_sent, 5);
        // The last packet with a zxid above 0 (the PING carried 0).
        assert_eq!(l.last_zxid, 0x1_0000_0001);

        s.reset();
        let l = s.snapshot();
        assert_eq!((l.packets_received, l.packets_sent, l.requests, l.last_zxid), (0, 0, 0, -1));
        assert_eq!(l.established_ms, 1_700_000_000_000);
        // After a reset the main loop goes on counting every packet (no second handshake ACK).
        s.received(&packet(pt::ACK, 0x1_0000_0001, None));
        assert_eq!(s.snapshot().packets_received, 1);
    }
}
