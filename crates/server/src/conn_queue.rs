//! The queue from the owner task to one client connection's writer.
//!
//! A mutex-guarded queue (its oldest message inline, the others in a `VecDeque` that holds a
//! buffer only while more than one message waits) and a `Notify` behind one `Arc`: about 140
//! bytes for an idle connection, where a tokio mpsc channel allocates a block of 32 slots up front (about
//! 1 KiB per connection, which at tens of thousands of sessions is most of what an idle one
//! costs). The owner never waits on it: a push either succeeds or finds the writer gone, and
//! the bound is counted in frames (`queued`), which the owner checks before pushing.
//!
//! A plain connection's queue also holds its socket: frames that answer no request (watch
//! notifications) for a writer that is idle with nothing queued are written by the owner
//! straight to the socket (`push_frames`), as far as it takes them without waiting, and only
//! what it does not take is queued. A watch storm then costs one non-blocking write per watcher,
//! not a queue hand-off, a task wake-up and a poll of that task as well. That write is a plain
//! `send(2)` with `MSG_DONTWAIT`, not tokio's `try_write`, whose readiness check reads one more
//! structure per connection (a cache miss each, in a storm); a `WouldBlock` here leaves tokio's
//! readiness set, so the writer tries once more, meets the full socket and waits as usual.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustix::net::SendFlags;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::owner::{ConnMsg, Frames};

/// In C order, what a direct write reads (`queued`, the lock, the flags, `direct`, `head`) comes
/// first, so that a storm, which touches one connection after another once each, mostly finds
/// it in one cache line rather than spread over the structure's three.
#[derive(Default)]
#[repr(C)]
struct Shared {
    /// Frames pushed and not yet written; the writer takes off what it wrote.
    queued: AtomicUsize,
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Default)]
#[repr(C)]
struct State {
    /// The owner dropped its end: the writer ends once the queue is empty.
    owner_gone: bool,
    /// The writer ended: pushes fail.
    writer_gone: bool,
    /// The writer took a message and has not finished writing it (`ConnRx::written`): the owner
    /// must not write to the socket meanwhile.
    writing: bool,
    /// A plain connection's socket, for the owner's direct writes; dropped with the writer.
    direct: Option<Arc<TcpStream>>,
    /// The oldest message, kept inline: a connection that is written one message at a time (the
    /// usual case, and every connection of a watch storm) never allocates a queue.
    head: Option<ConnMsg>,
    /// The messages behind `head`, in order; empty (no buffer) when it is.
    rest: VecDeque<ConnMsg>,
}

/// The owner's end.
pub(crate) struct ConnTx(Arc<Shared>);

/// The writer's end.
pub(crate) struct ConnRx(Arc<Shared>);

/// A queue's two ends; `direct` is the socket of a plain connection (`None` for TLS, whose
/// bytes only the writer's stream can encrypt).
pub(crate) fn conn_queue(direct: Option<Arc<TcpStream>>) -> (ConnTx, ConnRx) {
    let shared = Arc::new(Shared { state: Mutex::new(State { direct, ..State::default() }), ..Shared::default() });
    (ConnTx(shared.clone()), ConnRx(shared))
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl ConnTx {
    /// Queues `msg` carrying `frames` frames; `false` if the writer has ended.
    pub(crate) fn push(&self, msg: ConnMsg, frames: usize) -> bool {
        let st = lock(&self.0);
        if st.writer_gone {
            return false;
        }
        self.enqueue(st, msg, frames);
        true
    }

    /// Queues `f`, or writes it to the socket at once when it answers no request and the writer
    /// is idle with nothing queued (what the socket does not take without waiting is queued for
    /// the writer); `false` if the writer has ended.
    pub(crate) fn push_frames(&self, mut f: Frames) -> bool {
        let st = lock(&self.0);
        if st.writer_gone {
            return false;
        }
        if f.completes == 0 && st.head.is_none() && !st.writing {
            if let Some(sock) = &st.direct {
                match rustix::net::send(&**sock, &f.bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
                    Ok(n) if n == f.bytes.len() => return true,
                    Ok(n) => f.bytes.consume(n),
                    // WouldBlock, or an error the writer meets too and ends the connection on.
                    Err(_) => {}
                }
            }
        }
        let frames = f.frames as usize;
        self.enqueue(st, ConnMsg::Frames(f), frames);
        true
    }

    fn enqueue(&self, mut st: std::sync::MutexGuard<'_, State>, msg: ConnMsg, frames: usize) {
        self.0.queued.fetch_add(frames, Ordering::AcqRel);
        if st.head.is_none() {
            st.head = Some(msg);
        } else {
            st.rest.push_back(msg);
        }
        drop(st);
        self.0.wake.notify_one();
    }

    /// Frames queued and not yet written.
    pub(crate) fn queued(&self) -> usize {
        self.0.queued.load(Ordering::Acquire)
    }
}

impl Drop for ConnTx {
    fn drop(&mut self) {
        lock(&self.0).owner_gone = true;
        self.0.wake.notify_one();
    }
}

impl ConnRx {
    /// The next message; `None` once the owner's end is dropped and everything is taken.
    pub(crate) async fn recv(&self) -> Option<ConnMsg> {
        loop {
            if let Some(m) = self.try_recv() {
                return Some(m);
            }
            if lock(&self.0).owner_gone {
                return None;
            }
            // A notify_one sent since the check above left a permit: no wake-up is lost.
            self.0.wake.notified().await;
        }
    }

    /// The next message if one is queued; taking one marks the writer busy until `written`.
    pub(crate) fn try_recv(&self) -> Option<ConnMsg> {
        let mut st = lock(&self.0);
        let m = st.head.take();
        st.writing |= m.is_some();
        st.head = st.rest.pop_front();
        if st.rest.is_empty() && st.rest.capacity() > 0 {
            // A burst's queue is not kept by an idle connection.
            st.rest = VecDeque::new();
        }
        m
    }

    /// `frames` frames were written: the writer is idle again.
    pub(crate) fn written(&self, frames: usize) {
        self.0.queued.fetch_sub(frames, Ordering::AcqRel);
        lock(&self.0).writing = false;
    }
}

impl Drop for ConnRx {
    fn drop(&mut self) {
        let mut st = lock(&self.0);
        st.writer_gone = true;
        st.head = None;
        st.rest.clear();
        st.direct = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::{FrameBytes, Frames};

    fn frames(n: u8) -> ConnMsg {
        ConnMsg::Frames(Frames { bytes: FrameBytes::One(vec![n].into()), frames: 1, completes: 0 })
    }

    #[test]
    fn pushes_and_takes_interleaved_keep_order_and_a_drained_queue_holds_no_buffer() {
        let (tx, rx) = conn_queue(None);
        let mut got = Vec::new();
        let take = |rx: &ConnRx| match rx.try_recv() {
            Some(ConnMsg::Frames(f)) => Some(f.bytes[0]),
            _ => None,
        };
        for round in 0..3u8 {
            for n in 0..5 {
                assert!(tx.push(frames(round * 10 + n), 1));
            }
            got.extend(take(&rx));
            got.extend(take(&rx));
        }
        while let Some(n) = take(&rx) {
            got.push(n);
        }
        assert_eq!(got, vec![0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24]);
        let st = lock(&rx.0);
        assert!(st.head.is_none() && st.rest.capacity() == 0, "an idle connection keeps no queue buffer");
    }

    #[tokio::test]
    async fn messages_arrive_in_order_and_the_owner_dropping_its_end_ends_the_writer() {
        let (tx, rx) = conn_queue(None);
        assert!(tx.push(frames(1), 1) && tx.push(frames(2), 1));
        assert_eq!(tx.queued(), 2);
        let writer = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(ConnMsg::Frames(f)) = rx.recv().await {
                got.push(f.bytes[0]);
                rx.written(1);
            }
            got
        });
        tokio::task::yield_now().await;
        assert!(tx.push(frames(3), 1));
        let probe = ConnTx(tx.0.clone());
        drop(tx);
        assert_eq!(writer.await.unwrap(), vec![1, 2, 3]);
        assert_eq!(probe.queued(), 0);
        assert!(!probe.push(frames(4), 1), "the writer is gone");
        std::mem::forget(probe);
    }

    /// A loopback connection: the server's end (shared, as a plain connection's is) and the client's.
    async fn socket_pair() -> (Arc<TcpStream>, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Arc::new(server), client)
    }

    fn notification(bytes: Vec<u8>) -> Frames {
        Frames { bytes: FrameBytes::One(bytes.into()), frames: 1, completes: 0 }
    }

    async fn read_exactly(client: &mut TcpStream, n: usize) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut got = vec![0; n];
        client.read_exact(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_notification_to_an_idle_writer_goes_straight_to_the_socket_and_a_reply_is_queued() {
        let (sock, mut client) = socket_pair().await;
        let (tx, rx) = conn_queue(Some(sock));
        assert!(tx.push_frames(notification(b"event".to_vec())));
        assert!(rx.try_recv().is_none(), "written directly, nothing queued");
        assert_eq!(tx.queued(), 0);
        assert_eq!(read_exactly(&mut client, 5).await, b"event");

        // A reply returns a permit to the reader: it goes through the writer.
        assert!(tx.push_frames(Frames { bytes: FrameBytes::Joined(b"reply".to_vec()), frames: 1, completes: 1 }));
        assert_eq!(tx.queued(), 1);
        // The writer holds it (and is writing): a notification meanwhile queues behind it.
        let Some(ConnMsg::Frames(reply)) = rx.try_recv() else { panic!("the reply is queued") };
        assert_eq!(&reply.bytes[..], b"reply");
        assert!(tx.push_frames(notification(b"later".to_vec())));
        let Some(ConnMsg::Frames(later)) = rx.try_recv() else { panic!("queued behind the writer") };
        assert_eq!(&later.bytes[..], b"later");
        rx.written(2);
        // Idle again: the next one is direct once more.
        assert!(tx.push_frames(notification(b"again".to_vec())));
        assert!(rx.try_recv().is_none());
        assert_eq!(read_exactly(&mut client, 5).await, b"again");
    }

    #[tokio::test]
    async fn what_the_socket_does_not_take_is_queued_in_order_and_nothing_is_written_past_it() {
        let (sock, mut client) = socket_pair().await;
        let (tx, rx) = conn_queue(Some(sock));
        // Far more than the socket buffers take while the client reads nothing.
        let big: Vec<u8> = (0..32 << 20).map(|i: u32| (i % 251) as u8).collect();
        assert!(tx.push_frames(notification(big.clone())));
        let Some(ConnMsg::Frames(rest)) = rx.try_recv() else { panic!("the rest is queued") };
        let taken = big.len() - rest.bytes.len();
        assert!(taken > 0 && !rest.bytes.is_empty(), "the socket took part: {taken}");
        assert_eq!(&big[taken..], &rest.bytes[..]);
        assert_eq!(tx.queued(), 1, "the frame counts as queued until the writer finishes it");
        // The writer is busy with the rest: the next notification waits behind it.
        assert!(tx.push_frames(notification(b"tail".to_vec())));
        let Some(ConnMsg::Frames(tail)) = rx.try_recv() else { panic!("queued behind the rest") };
        let total = big.len();
        let reader = tokio::spawn(async move { read_exactly(&mut client, total + 4).await });
        // The writer's part, as the connection's writer does it.
        let sock = lock(&rx.0).direct.clone().unwrap();
        for chunk in [&rest.bytes[..], &tail.bytes[..]] {
            let mut off = 0;
            while off < chunk.len() {
                sock.writable().await.unwrap();
                match sock.try_write(&chunk[off..]) {
                    Ok(n) => off += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
        rx.written(2);
        let got = reader.await.unwrap();
        assert!(got[..total] == big[..], "the direct part and the writer's rest arrive whole, in order");
        assert_eq!(&got[total..], b"tail");
        assert_eq!(tx.queued(), 0);
    }

    #[tokio::test]
    async fn a_gone_writer_drops_the_socket_and_refuses_pushes() {
        let (sock, _client) = socket_pair().await;
        let (tx, rx) = conn_queue(Some(sock.clone()));
        assert_eq!(Arc::strong_count(&sock), 2);
        drop(rx);
        assert_eq!(Arc::strong_count(&sock), 1, "the queue keeps no socket past its writer");
        assert!(!tx.push_frames(notification(b"x".to_vec())));
    }
}
