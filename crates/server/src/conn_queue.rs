//! The queue from the owner task to one client connection's writer.
//!
//! A mutex-guarded queue (its oldest message inline, the others in a `VecDeque` that holds a
//! buffer only while more than one message waits) and a `Notify` behind one `Arc`: about 140
//! bytes for an idle connection, where a tokio mpsc channel allocates a block of 32 slots up front (about
//! 1 KiB per connection, which at tens of thousands of sessions is most of what an idle one
//! costs). The owner never waits on it: a push either succeeds or finds the writer gone, and
//! the bound is counted in frames (`queued`), which the owner checks before pushing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::owner::ConnMsg;

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Notify,
    /// Frames pushed and not yet written; the writer takes off what it wrote.
    queued: AtomicUsize,
}

#[derive(Default)]
struct State {
    /// The oldest message, kept inline: a connection that is written one message at a time (the
    /// usual case, and every connection of a watch storm) never allocates a queue.
    head: Option<ConnMsg>,
    /// The messages behind `head`, in order; empty (no buffer) when it is.
    rest: VecDeque<ConnMsg>,
    /// The owner dropped its end: the writer ends once the queue is empty.
    owner_gone: bool,
    /// The writer ended: pushes fail.
    writer_gone: bool,
}

/// The owner's end.
pub(crate) struct ConnTx(Arc<Shared>);

/// The writer's end.
pub(crate) struct ConnRx(Arc<Shared>);

/// A queue's two ends.
pub(crate) fn conn_queue() -> (ConnTx, ConnRx) {
    let shared = Arc::new(Shared::default());
    (ConnTx(shared.clone()), ConnRx(shared))
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, State> {
    s.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl ConnTx {
    /// Queues `msg` carrying `frames` frames; `false` if the writer has ended.
    pub(crate) fn push(&self, msg: ConnMsg, frames: usize) -> bool {
        let mut st = lock(&self.0);
        if st.writer_gone {
            return false;
        }
        self.0.queued.fetch_add(frames, Ordering::AcqRel);
        if st.head.is_none() {
            st.head = Some(msg);
        } else {
            st.rest.push_back(msg);
        }
        drop(st);
        self.0.wake.notify_one();
        true
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

    /// The next message if one is queued.
    pub(crate) fn try_recv(&self) -> Option<ConnMsg> {
        let mut st = lock(&self.0);
        let m = st.head.take();
        st.head = st.rest.pop_front();
        if st.rest.is_empty() && st.rest.capacity() > 0 {
            // A burst's queue is not kept by an idle connection.
            st.rest = VecDeque::new();
        }
        m
    }

    /// `frames` frames were written.
    pub(crate) fn written(&self, frames: usize) {
        self.0.queued.fetch_sub(frames, Ordering::AcqRel);
    }
}

impl Drop for ConnRx {
    fn drop(&mut self) {
        let mut st = lock(&self.0);
        st.writer_gone = true;
        st.head = None;
        st.rest.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::Frames;

    fn frames(n: u8) -> ConnMsg {
        ConnMsg::Frames(Frames { bytes: vec![n], frames: 1, completes: 0 })
    }

    #[test]
    fn pushes_and_takes_interleaved_keep_order_and_a_drained_queue_holds_no_buffer() {
        let (tx, rx) = conn_queue();
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
        let (tx, rx) = conn_queue();
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
}
