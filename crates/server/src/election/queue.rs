//! One peer's outgoing election messages: `QuorumCnxManager`'s `queueSendMap` entry (a circular
//! queue of capacity `SEND_CAPACITY` = 1) and `lastMessageSent`.
//!
//! The queue holds only the newest message: a notification replaces an unsent older one, which
//! would be stale anyway. Each new connection first resends the last message written if the
//! queue is empty, because the previous connection may have died before the peer read it.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// A framed election message (length prefix included).
pub(crate) type Frame = Arc<[u8]>;

/// The send slot shared by a peer's link and its current connection's writer.
#[derive(Debug, Default)]
pub(crate) struct PeerQueue {
    slot: Mutex<Option<Frame>>,
    last_sent: Mutex<Option<Frame>>,
    ready: Notify,
}

impl PeerQueue {
    /// Queues `frame`, replacing an unsent older one.
    pub(crate) fn put(&self, frame: Frame) {
        *lock(&self.slot) = Some(frame);
        self.ready.notify_one();
    }

    /// Whether a message waits for a connection.
    pub(crate) fn is_pending(&self) -> bool {
        lock(&self.slot).is_some()
    }

    /// Takes the queued message, recording it as the last one sent.
    fn take(&self) -> Option<Frame> {
        let frame = lock(&self.slot).take()?;
        *lock(&self.last_sent) = Some(frame.clone());
        Some(frame)
    }

    /// What a fresh connection writes first: nothing if a message is queued (it goes next),
    /// else the last message sent on an earlier connection.
    pub(crate) fn resend_on_connect(&self) -> Option<Frame> {
        if self.is_pending() {
            return None;
        }
        lock(&self.last_sent).clone()
    }

    /// Waits for the next queued message.
    pub(crate) async fn next(&self) -> Frame {
        loop {
            if let Some(frame) = self.take() {
                return frame;
            }
            // `notify_one` stores a permit when nobody waits, so a `put` between `take` and
            // here is not missed.
            self.ready.notified().await;
        }
    }
}

/// The slot's mutexes guard plain data and are never held across an await; a poisoned one
/// still holds a usable value.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Shared handle to a peer's queue.
pub(crate) type SharedQueue = Arc<PeerQueue>;
