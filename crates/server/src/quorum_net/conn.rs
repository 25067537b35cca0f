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

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnEnd {
    #[error("peer closed the connection")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("write made no progress for {0:?}")]
    WriteTimeout(Duration),
    #[error("malformed input: {0}")]
    Malformed(String),
    #[error("closed by this server")]
    Killed,
    #[error("the consumer is gone")]
    ConsumerGone,
}

/// Buffered reading of back-to-back QuorumPackets.
pub(crate) struct PacketReader {
    rd: OwnedReadHalf,
    buf: BytesMut,
    max_buffer: usize,
}

impl PacketReader {
    pub(crate) fn new(rd: OwnedReadHalf, max_buffer: usize) -> Self {
        PacketReader { rd, buf: BytesMut::with_capacity(READ_CHUNK), max_buffer }
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
    out: mpsc::Receiver<QuorumPacket>,
    kill: oneshot::Receiver<()>,
    deliver: mpsc::Sender<T>,
    wrap: impl Fn(QuorumPacket) -> T,
    write_timeout: Duration,
) -> ConnEnd {
    let read = async {
        loop {
            let packet = match reader.next().await {
                Ok(p) => p,
                Err(end) => return end,
            };
            if deliver.send(wrap(packet)).await.is_err() {
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

async fn write_loop(mut wr: OwnedWriteHalf, mut out: mpsc::Receiver<QuorumPacket>, timeout: Duration) -> ConnEnd {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    loop {
        let Some(packet) = out.recv().await else {
            let _ = wr.shutdown().await;
            return ConnEnd::Killed;
        };
        batch.clear();
        batch.extend_from_slice(&packet.to_bytes());
        while batch.len() < WRITE_BATCH {
            match out.try_recv() {
                Ok(p) => batch.extend_from_slice(&p.to_bytes()),
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
