//! One established quorum connection: a reader cutting QuorumPackets out of the byte stream and
//! handing them to the consumer, and a writer draining the connection's send queue. The first end
//! on either side (or the kill signal) ends both.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use warden_proto::jute::{DecodeError, Reader, Record};
use warden_proto::quorum::QuorumPacket;
use warden_storage::{SnapshotBody, SnapshotBodyDecoder, SNAP_SYNC_SIGNATURE};
use warden_tree::DataTree;

use super::stats::LinkStats;
use crate::tls::peer::{PeerRead, PeerWrite};

/// Bytes a packet may hold beyond its one large buffer: type, zxid, lengths and authinfo.
const PACKET_OVERHEAD_MAX: usize = 64 * 1024;
/// Queued packets written with one `write_all`, up to about this many bytes.
const WRITE_BATCH: usize = 64 * 1024;
/// Free space kept in the read buffer before each read.
const READ_CHUNK: usize = 64 * 1024;

/// Largest snapshot stream a learner accepts after SNAP (sessions, ACLs and nodes, in bytes).
const MAX_SNAPSHOT: u64 = 1 << 34;

/// What goes out on a connection: a packet, or (leader, right after a SNAP packet) the state to
/// write as ZooKeeper's snapshot stream: `ZKDatabase.serializeSnapshot` then "BenWasHere"
/// (`warden_storage::encode_snap_sync`), raw, with no length in front.
///
/// Or (leader, right after a DIFF packet) the txns `(after, upto]` of the on-disk log, read by the
/// writer a chunk at a time and written as PROPOSAL + COMMIT pairs before anything queued after.
#[derive(Debug, Clone)]
pub(crate) enum Outgoing {
    Packet(QuorumPacket),
    Snapshot(Box<(DataTree, Vec<(i64, i32)>)>),
    LogDiff(Box<LogDiffJob>),
}

/// A DIFF's part from the on-disk log: where to read and which txns.
#[derive(Debug, Clone)]
pub(crate) struct LogDiffJob {
    pub data: warden_storage::DataDir,
    pub after: i64,
    pub upto: i64,
}

/// Bytes of log records read (and packets encoded) at a time for a DIFF from disk.
const LOG_DIFF_CHUNK: usize = 1 << 20;

/// Writes the DIFF's part from the on-disk log: each chunk read and encoded on a blocking thread,
/// then written, so at most about two chunks are in memory whatever the range.
async fn write_log_diff(
    wr: &mut PeerWrite,
    job: LogDiffJob,
    timeout: Duration,
    stats: Option<&LinkStats>,
) -> Result<(), ConnEnd> {
    let started = std::time::Instant::now();
    let LogDiffJob { data, after, upto } = job;
    let range = tokio::task::spawn_blocking(move || data.read_log_range(after, upto))
        .await
        .map_err(|e| ConnEnd::LogDiff(e.to_string()))?
        .map_err(|e| ConnEnd::LogDiff(e.to_string()))?;
    let mut range = Some(range);
    let (mut txns, mut bytes) = (0u64, 0u64);
    loop {
        let mut r = range.take().expect("the range comes back with each chunk");
        let (r, chunk) = tokio::task::spawn_blocking(move || {
            let chunk = r.next_chunk(LOG_DIFF_CHUNK).map(|recs| {
                let mut packets = Vec::with_capacity(recs.len() * 2);
                for (hdr, txn) in recs {
                    let zxid = hdr.zxid;
                    let entry = warden_quorum::zab::TxnEntry { hdr, txn: txn.into(), digest: None };
                    packets.push(warden_quorum::zab::codec::proposal(&entry));
                    packets.push(QuorumPacket::new(warden_proto::quorum::packet_type::COMMIT, zxid));
                }
                packets
            });
            (r, chunk)
        })
        .await
        .map_err(|e| ConnEnd::LogDiff(e.to_string()))?;
        let packets = chunk.map_err(|e| ConnEnd::LogDiff(e.to_string()))?;
        if packets.is_empty() {
            break;
        }
        range = Some(r);
        let mut buf = Vec::with_capacity(LOG_DIFF_CHUNK + LOG_DIFF_CHUNK / 4);
        for p in &packets {
            buf.extend_from_slice(&p.to_bytes());
            // Never queued by the owner: written, not taken off the queue.
            if let Some(stats) = stats {
                stats.written(p);
            }
        }
        txns += packets.len() as u64 / 2;
        bytes += buf.len() as u64;
        write_pieces(wr, &buf, timeout).await?;
    }
    tracing::info!(
        after = format_args!("{after:#x}"),
        upto = format_args!("{upto:#x}"),
        txns,
        bytes,
        ms = started.elapsed().as_millis() as u64,
        "wrote the DIFF's txns from the on-disk log"
    );
    Ok(())
}

/// Writes `buf` in pieces of about WRITE_BATCH, each within the timeout, then flushes.
async fn write_pieces(wr: &mut PeerWrite, buf: &[u8], timeout: Duration) -> Result<(), ConnEnd> {
    for piece in buf.chunks(WRITE_BATCH.max(1)) {
        match tokio::time::timeout(timeout, wr.write_all(piece)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(ConnEnd::Io(e)),
            Err(_) => return Err(ConnEnd::WriteTimeout(timeout)),
        }
    }
    match tokio::time::timeout(timeout, wr.flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ConnEnd::Io(e)),
        Err(_) => Err(ConnEnd::WriteTimeout(timeout)),
    }
}

/// What comes in: a packet, or (learner) a SNAP packet's zxid with the snapshot stream after it.
#[derive(Debug)]
pub(crate) enum Incoming {
    Packet(QuorumPacket),
    Snapshot { zxid: i64, body: SnapshotBody },
}

pub(crate) use crate::peer_conn::ConnEnd;

/// Buffered reading of back-to-back QuorumPackets.
pub(crate) struct PacketReader {
    rd: PeerRead,
    buf: BytesMut,
    max_buffer: usize,
    /// Learner side: a SNAP packet is followed by the snapshot stream.
    snapshot_after_snap: bool,
}

impl PacketReader {
    pub(crate) fn new(rd: PeerRead, max_buffer: usize) -> Self {
        PacketReader { rd, buf: BytesMut::with_capacity(READ_CHUNK), max_buffer, snapshot_after_snap: false }
    }

    /// Starts with `bytes` already read from the stream (past a SASL exchange).
    pub(crate) fn with_buffered(mut self, bytes: Vec<u8>) -> Self {
        self.buf.extend_from_slice(&bytes);
        self
    }

    /// A reader for the learner's side: after SNAP comes the snapshot stream.
    pub(crate) fn with_snapshots(mut self) -> Self {
        self.snapshot_after_snap = true;
        self
    }

    /// The next packet; on the learner's side a SNAP packet comes back with the snapshot stream
    /// that follows it.
    pub(crate) async fn next_incoming(&mut self) -> Result<Incoming, ConnEnd> {
        let packet = self.next().await?;
        if !(self.snapshot_after_snap && packet.packet_type == warden_proto::quorum::packet_type::SNAP) {
            return Ok(Incoming::Packet(packet));
        }
        let body = self.read_snapshot().await?;
        Ok(Incoming::Snapshot { zxid: packet.zxid, body })
    }

    /// Reads the snapshot stream after SNAP as `Learner.syncWithLeader` does: sessions and the
    /// tree (`deserializeSnapshot`), then the string "BenWasHere". Decoded item by item as bytes
    /// arrive; an item above the field limits, a stream above `MAX_SNAPSHOT` bytes, or a wrong
    /// signature closes the connection.
    async fn read_snapshot(&mut self) -> Result<SnapshotBody, ConnEnd> {
        let malformed = |e: String| ConnEnd::Malformed(format!("snapshot stream after SNAP: {e}"));
        let mut dec = SnapshotBodyDecoder::new(self.max_buffer);
        loop {
            let used = dec.feed(&self.buf).map_err(malformed)?;
            self.buf.advance(used);
            if dec.is_done() {
                break;
            }
            if dec.consumed() > MAX_SNAPSHOT {
                return Err(malformed(format!("more than {MAX_SNAPSHOT} bytes")));
            }
            if self.buf.len() > 2 * self.max_buffer + PACKET_OVERHEAD_MAX {
                return Err(malformed(format!("an item still incomplete after {} bytes", self.buf.len())));
            }
            self.read_more("the snapshot stream").await?;
        }
        loop {
            // The signature is a short ustring; a longer length is garbage.
            let mut r = Reader::with_max_len(&self.buf, 64);
            match r.read_ustring() {
                Ok(sig) if sig == SNAP_SYNC_SIGNATURE => {
                    self.buf.advance(r.position());
                    break;
                }
                Ok(sig) => return Err(malformed(format!("signature {sig:?} instead of {SNAP_SYNC_SIGNATURE:?}"))),
                Err(DecodeError::Incomplete { .. }) => self.read_more("the snapshot signature").await?,
                Err(e) => return Err(malformed(format!("signature: {e}"))),
            }
        }
        dec.finish().map_err(malformed)
    }

    /// Reads more bytes into the buffer; the peer closing here ends the connection as malformed.
    async fn read_more(&mut self, inside: &str) -> Result<(), ConnEnd> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 8 {
            self.buf.reserve(READ_CHUNK);
        }
        match self.rd.read_buf(&mut self.buf).await {
            Ok(0) => Err(ConnEnd::Malformed(format!("closed inside {inside} ({} bytes buffered)", self.buf.len()))),
            Ok(_) => Ok(()),
            Err(e) => Err(ConnEnd::Io(e)),
        }
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
/// With `stats` (the leader's side), the writer counts each packet it takes off the queue and
/// writes.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run<T>(
    mut reader: PacketReader,
    wr: PeerWrite,
    out: mpsc::Receiver<Outgoing>,
    kill: oneshot::Receiver<()>,
    deliver: mpsc::Sender<T>,
    wrap: impl Fn(Incoming) -> Option<T>,
    write_timeout: Duration,
    stats: Option<&LinkStats>,
) -> ConnEnd {
    let read = async {
        loop {
            let incoming = match reader.next_incoming().await {
                Ok(p) => p,
                Err(end) => return end,
            };
            let Some(item) = wrap(incoming) else {
                return ConnEnd::Malformed("unexpected snapshot stream".into());
            };
            if deliver.send(item).await.is_err() {
                return ConnEnd::ConsumerGone;
            }
        }
    };
    tokio::select! {
        end = read => end,
        end = write_loop(wr, out, write_timeout, stats) => end,
        _ = kill => ConnEnd::Killed,
    }
}

/// Appends the bytes of `item` to `batch`. A snapshot is serialised on a blocking thread (it
/// walks the whole tree); `None` if that thread failed.
async fn encode(item: Outgoing, batch: &mut Vec<u8>, stats: Option<&LinkStats>) -> Option<()> {
    match item {
        Outgoing::Packet(p) => {
            batch.extend_from_slice(&p.to_bytes());
            if let Some(stats) = stats {
                stats.taken(&p);
                stats.written(&p);
            }
        }
        Outgoing::Snapshot(s) => {
            let bytes = tokio::task::spawn_blocking(move || warden_storage::encode_snap_sync(&s.0, &s.1)).await.ok()?;
            tracing::info!(bytes = bytes.len(), "writing the snapshot stream");
            batch.extend_from_slice(&bytes);
        }
        Outgoing::LogDiff(_) => unreachable!("write_loop streams a DIFF from disk itself"),
    }
    Some(())
}

async fn write_loop(
    mut wr: PeerWrite,
    mut out: mpsc::Receiver<Outgoing>,
    timeout: Duration,
    stats: Option<&LinkStats>,
) -> ConnEnd {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    loop {
        let Some(item) = out.recv().await else {
            let _ = wr.shutdown().await;
            return ConnEnd::Killed;
        };
        batch.clear();
        let mut next = Some(item);
        // A DIFF's part from the on-disk log, taken off the queue after the packets before it:
        // written once they are, before anything queued after it (which waits in the queue).
        let mut log_diff = None;
        while let Some(item) = next.take() {
            if let Outgoing::LogDiff(job) = item {
                log_diff = Some(*job);
                break;
            }
            if encode(item, &mut batch, stats).await.is_none() {
                return ConnEnd::Malformed("serialising the snapshot failed".into());
            }
            if batch.len() < WRITE_BATCH {
                next = out.try_recv().ok();
            }
        }
        // In pieces of about WRITE_BATCH, each within the timeout: a large snapshot may take
        // long in total, but a peer that stops reading is still noticed. A TLS writer holds what
        // it encrypted until flushed; a socket's flush does nothing.
        if let Err(end) = write_pieces(&mut wr, &batch, timeout).await {
            return end;
        }
        if let Some(job) = log_diff {
            if let Err(end) = write_log_diff(&mut wr, job, timeout, stats).await {
                return end;
            }
        }
        if batch.capacity() > 4 * WRITE_BATCH {
            batch = Vec::with_capacity(WRITE_BATCH);
        }
    }
}

/// Resolves once shutdown is signalled or its sender is gone.
pub(crate) async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
