//! One established election connection (`SendWorker` + `RecvWorker`): reads length-framed
//! notifications and hands them to the driver, writes the peer's queued messages. The first
//! error on either side ends the whole connection; the link decides what happens next.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use warden_proto::election::{split_message, Notification};
use warden_quorum::Sid;

use super::queue::SharedQueue;
use crate::tls::peer::{PeerRead, PeerStream, PeerWrite};

/// A stalled peer must not hold a connection forever (ZooKeeper has no write timeout; its
/// election messages are tiny, so a write that takes this long means the peer is gone).
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) use crate::peer_conn::ConnEnd;

/// What the links and their connections tell the driver.
#[derive(Debug)]
pub(crate) enum Received {
    /// A notification, tagged with its sender.
    Notification(Sid, Notification),
    /// The link's view of a peer changed: a connection is up (`true`), or the connection ended or
    /// could not be opened (`false`). Feeds the machine's early finalize.
    Reachable(Sid, bool),
}

/// Runs the connection to `sid` until it breaks. `leftover` holds bytes read past the
/// handshake.
pub(crate) async fn run(
    sid: Sid,
    stream: PeerStream,
    leftover: Vec<u8>,
    queue: SharedQueue,
    received: mpsc::Sender<Received>,
) -> ConnEnd {
    let (rd, wr) = stream.into_split();
    tokio::select! {
        end = read_loop(sid, rd, leftover, received) => end,
        end = write_loop(wr, queue) => end,
    }
}

async fn read_loop(sid: Sid, mut rd: PeerRead, leftover: Vec<u8>, received: mpsc::Sender<Received>) -> ConnEnd {
    let mut buf = leftover;
    loop {
        while let Some((notification, used)) = match next_notification(&buf) {
            Ok(next) => next,
            Err(why) => return ConnEnd::Malformed(why),
        } {
            buf.drain(..used);
            if received.send(Received::Notification(sid, notification)).await.is_err() {
                return ConnEnd::ConsumerGone;
            }
        }
        // `split_message` rejects a length above 512 KiB before its payload is read, so the
        // buffer stays below that plus one read.
        match rd.read_buf(&mut buf).await {
            Ok(0) => return ConnEnd::Closed,
            Ok(_) => {}
            Err(e) => return ConnEnd::Io(e),
        }
    }
}

/// Decodes the first whole message in `buf`, if any.
fn next_notification(buf: &[u8]) -> Result<Option<(Notification, usize)>, String> {
    let Some((payload, used)) = split_message(buf).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let notification =
        Notification::decode(payload).map_err(|e| format!("notification of {} bytes: {e}", payload.len()))?;
    Ok(Some((notification, used)))
}

async fn write_loop(mut wr: PeerWrite, queue: SharedQueue) -> ConnEnd {
    if let Some(frame) = queue.resend_on_connect() {
        if let Err(end) = write(&mut wr, &frame).await {
            return end;
        }
    }
    loop {
        let frame = queue.next().await;
        if let Err(end) = write(&mut wr, &frame).await {
            return end;
        }
    }
}

async fn write(wr: &mut PeerWrite, frame: &[u8]) -> Result<(), ConnEnd> {
    // Flushed: a TLS writer holds what it encrypted until then.
    let write = async {
        wr.write_all(frame).await?;
        wr.flush().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ConnEnd::Io(e)),
        Err(_) => Err(ConnEnd::WriteTimeout(WRITE_TIMEOUT)),
    }
}
