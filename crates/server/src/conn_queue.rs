//! The queue from the owner task to one client connection's writer.
//!
//! A mutex-guarded `VecDeque` and a `Notify` behind one `Arc`: about a hundred bytes for an
//! idle connection, where a tokio mpsc channel allocates a block of 32 slots up front (about
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
    msgs: VecDeque<ConnMsg>,
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
        st.msgs.push_back(msg);
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
        let m = st.msgs.pop_front();
        if st.msgs.is_empty() {
            // An idle connection keeps no queue: the next push allocates one again, which costs
            // less than the 144 bytes every idle session would otherwise hold.
            st.msgs = VecDeque::new();
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
        st.msgs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::Frames;

    fn frames(n: u8) -> ConnMsg {
        ConnMsg::Frames(Frames { bytes: vec![n], frames: 1, completes: 0 })
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
