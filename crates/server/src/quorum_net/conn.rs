//! One established quorum connection: a reader cutting QuorumPackets out of the byte stream and
//! handing them to the consumer, and a writer draining the connection's send queue. The first end
//! on either side (or the kill signal) ends both.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, watch};
use warden_proto::jute::Record;
use warden_proto::quorum::QuorumPacket;

/// Bytes a packet may hold beyond its one large buffer: type, zxid, lengths and authinfo.
const PACKET_OVERHEAD_MAX: usize = 64 * 1024;
/// Queued packets written with one `write_all`, up to about this many bytes.
const WRITE_BATCH: usize = 64 * 1024;
/// Free space kept in the read buffer before each read.
const READ_CHUNK: usize = 64 * 1024;

/// Largest snapshot blob a learner accepts after SNAP.
const MAX_BLOB: u64 = 1 << 34;

/// What goes out on a connection: a packet, or (leader, right after a SNAP packet) the snapshot
/// blob, written as an 8-byte big-endian length and the bytes (a Warden deviation: ZooKeeper
/// writes the serialized snapshot and "BenWasHere" with no length in front).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outgoing {
    Packet(QuorumPacket),
    Blob(Vec<u8>),
}

/// What comes in: a packet, or (learner) the snapshot blob that follows a SNAP packet.
#[derive(Debug)]
pub(crate) enum Incoming {
    Packet(QuorumPacket),
    Blob(Vec<u8>),
}

pub(crate) use crate::peer_conn::ConnEnd;

/// Buffered reading of back-to-back QuorumPackets.
pub(crate) struct PacketReader {
    rd: OwnedReadHalf,
    buf: BytesMut,
    max_buffer: usize,
    /// Learner side: a SNAP packet is followed by a length-prefixed snapshot blob.
    blobs_after_snap: bool,
    expect_blob: bool,
}

impl PacketReader {
    pub(crate) fn new(rd: OwnedReadHalf, max_buffer: usize) -> Self {
        PacketReader {
            rd,
            buf: BytesMut::with_capacity(READ_CHUNK),
            max_buffer,
            blobs_after_snap: false,
            expect_blob: false,
        }
    }

    /// A reader for the learner's side: after SNAP comes the snapshot blob.
    pub(crate) fn with_snapshot_blobs(mut self) -> Self {
        self.blobs_after_snap = true;
        self
    }

    /// The next packet, or the blob after a SNAP packet (learner side).
    pub(crate) async fn next_incoming(&mut self) -> Result<Incoming, ConnEnd> {
        if !self.expect_blob {
            let packet = self.next().await?;
            self.expect_blob = self.blobs_after_snap && packet.packet_type == warden_proto::quorum::packet_type::SNAP;
            return Ok(Incoming::Packet(packet));
        }
        self.expect_blob = false;
        self.fill(8).await?;
        let len = u64::from_be_bytes(self.buf[..8].try_into().unwrap_or_default());
        if len > MAX_BLOB {
            return Err(ConnEnd::Malformed(format!("snapshot blob of {len} bytes (limit {MAX_BLOB})")));
        }
        self.buf.advance(8);
        let len = len as usize;
        self.buf.reserve(len.saturating_sub(self.buf.len()));
        self.fill(len).await?;
        Ok(Incoming::Blob(self.buf.split_to(len).to_vec()))
    }

    /// Reads until at least `n` bytes are buffered.
    async fn fill(&mut self, n: usize) -> Result<(), ConnEnd> {
        while self.buf.len() < n {
            if self.buf.capacity() - self.buf.len() < READ_CHUNK / 8 {
                self.buf.reserve(READ_CHUNK);
            }
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) => {
                    return Err(ConnEnd::Malformed(format!("closed inside a snapshot blob ({} bytes)", self.buf.len())))
                }
                Ok(_) => {}
                Err(e) => return Err(ConnEnd::Io(e)),
            }
        }
        Ok(())
    }

    /// The next whole packet.
    pub(crate) async fn next(&mut self) -> Result<QuorumPacket, ConnEnd> {
        loop {
            match QuorumPacket::decode_stream(&self.buf, self.max_buffer) {
                Ok(Some((packet, used))) => {
                    self.buf.advance(used);
                    return Ok(packet);
                }
                Ok(None) => {}
                Err(e) => return Err(ConnEnd::Malformed(format!("undecodable packet: {e}"))),
            }
            if self.buf.len() > self.max_buffer + PACKET_OVERHEAD_MAX {
                return Err(ConnEnd::Malformed(format!(
                    "packet still incomplete after {} bytes (limit {} + {PACKET_OVERHEAD_MAX})",
                    self.buf.len(),
                    self.max_buffer
                )));
            }
            if self.buf.capacity() - self.buf.len() < READ_CHUNK / 8 {
                self.buf.reserve(READ_CHUNK);
            }
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) if self.buf.is_empty() => return Err(ConnEnd::Closed),
                Ok(0) => return Err(ConnEnd::Malformed(format!("closed inside a packet ({} bytes)", self.buf.len()))),
                Ok(_) => {}
                Err(e) => return Err(ConnEnd::Io(e)),
            }
        }
    }
}

/// Runs an established connection until it ends: packets read go to `deliver` (wrapped by
/// `wrap`), packets queued on `out` are written. Ends on the first error, when `kill` fires or its
/// sender is dropped, or when `out`'s senders are all dropped (after writing what was queued).
pub(crate) async fn run<T>(
    mut reader: PacketReader,
    wr: OwnedWriteHalf,
    out: mpsc::Receiver<Outgoing>,
    kill: oneshot::Receiver<()>,
    deliver: mpsc::Sender<T>,
    wrap: impl Fn(Incoming) -> Option<T>,
    write_timeout: Duration,
) -> ConnEnd {
    let read = async {
        loop {
            let incoming = match reader.next_incoming().await {
                Ok(p) => p,
                Err(end) => return end,
            };
            let Some(item) = wrap(incoming) else {
                return ConnEnd::Malformed("unexpected snapshot blob".into());
            };
            if deliver.send(item).await.is_err() {
                return ConnEnd::ConsumerGone;
            }
        }
    };
    tokio::select! {
        end = read => end,
        end = write_loop(wr, out, write_timeout) => end,
        _ = kill => ConnEnd::Killed,
    }
}

fn encode(item: &Outgoing, batch: &mut Vec<u8>) {
    match item {
        Outgoing::Packet(p) => batch.extend_from_slice(&p.to_bytes()),
        Outgoing::Blob(b) => {
            batch.extend_from_slice(&(b.len() as u64).to_be_bytes());
            batch.extend_from_slice(b);
        }
    }
}

async fn write_loop(mut wr: OwnedWriteHalf, mut out: mpsc::Receiver<Outgoing>, timeout: Duration) -> ConnEnd {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    loop {
        let Some(packet) = out.recv().await else {
            let _ = wr.shutdown().await;
            return ConnEnd::Killed;
        };
        batch.clear();
        encode(&packet, &mut batch);
        while batch.len() < WRITE_BATCH {
            match out.try_recv() {
                Ok(p) => encode(&p, &mut batch),
                Err(_) => break,
            }
        }
        match tokio::time::timeout(timeout, wr.write_all(&batch)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return ConnEnd::Io(e),
            Err(_) => return ConnEnd::WriteTimeout(timeout),
        }
    }
}

/// Resolves once shutdown is signalled or its sender is gone.
pub(crate) async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
