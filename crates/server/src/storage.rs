//! The storage thread: appends every persisted txn to the transaction log, fsyncs once per batch
//! (group commit: the batch is whatever queued up during the previous fsync), then reports the highest
//! durable zxid to the owner.
//!
//! A standalone owner instead appends and fsyncs a batch itself when one session wrote it and the
//! batch before it (the driver marks it `may_inline`), no other event waits and the storage thread has nothing queued
//! (`Storage::append_inline`): a lone synchronous client then waits for one fdatasync and no thread
//! hand-offs (two wake-ups, 40-80 us on this VM). With several writers the fsync stays on the thread,
//! so the owner prepares the next batch meanwhile (letting any small batch through cost eight
//! synchronous clients 15% of their throughput).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use warden_driver::Batch;
use warden_storage::{Reloaded, Report, StorageError, Store, StoreOp};

use crate::owner::{Event, Fatal};
use crate::snapshot::LogActivity;

/// Batches of txns queued to the storage thread before the owner waits.
const STORAGE_QUEUE: usize = 1024;

/// Work for the storage thread, in order: one of the driver's storage ops, and for
/// `StoreOp::TruncateAndReload` where to hand the data rebuilt from disk.
pub(crate) struct StorageMsg {
    pub op: StoreOp,
    pub reloaded: Option<oneshot::Sender<Result<Reloaded, StorageError>>>,
    /// When it was queued (its wait and its time to durability are ZooKeeper's sync processor
    /// figures).
    pub queued_at: Instant,
}

impl StorageMsg {
    pub(crate) fn reload(op: StoreOp, reloaded: oneshot::Sender<Result<Reloaded, StorageError>>) -> Self {
        StorageMsg { op, reloaded: Some(reloaded), queued_at: Instant::now() }
    }
}

impl From<StoreOp> for StorageMsg {
    fn from(op: StoreOp) -> Self {
        StorageMsg { op, reloaded: None, queued_at: Instant::now() }
    }
}

/// ZooKeeper's SyncRequestProcessor figures for one message the storage thread carried out (a
/// message is one step's storage op, usually a batch of txns): how many messages still waited
/// when it was taken (`sync_processor_queue_size`), how long it waited (`sync_processor_queue_time_ms`),
/// how long writing it took (`sync_process_time`), and from queued to durable
/// (`sync_processor_queue_and_flush_time_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MsgTiming {
    pub queue_size: u64,
    pub queue_ms: u64,
    pub process_ms: u64,
    pub queue_and_flush_ms: u64,
}

/// Batches of at most this many txns may be written by the owner itself (`append_inline`).
const INLINE_BATCH: usize = 4;

/// The log and its work queue, as the owner holds them.
pub(crate) struct Storage {
    tx: mpsc::Sender<StorageMsg>,
    shared: Arc<Shared>,
}

/// What the owner and the storage thread share.
struct Shared {
    store: Mutex<Store>,
    force_sync: bool,
    /// Messages sent to the thread and not yet finished (written, synced and reported). Only the
    /// owner adds to it, so when it reads 0 the thread is idle and stays idle until the owner sends.
    queued: AtomicUsize,
    /// Told of every fsync, so that the snapshot writer gives way to the log.
    activity: Arc<LogActivity>,
}

impl Storage {
    /// Queues `msg` behind everything sent before; Err if the thread has ended.
    pub(crate) async fn send(&self, msg: StorageMsg) -> Result<(), ()> {
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        self.tx.send(msg).await.map_err(|_| {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
        })
    }

    /// As `send`, without waiting: Err if the queue is full or the thread has ended.
    #[cfg(test)]
    pub(crate) fn try_send(&self, msg: StorageMsg) -> Result<(), ()> {
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        self.tx.try_send(msg).map_err(|_| {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
        })
    }

    /// Appends and syncs a batch of at most `INLINE_BATCH` txns on the caller's thread if the
    /// storage thread has nothing queued: `Some(Ok(zxid))` when the batch is durable up to `zxid`,
    /// `Some(Err)` when the log failed (fatal, as on the thread), `None` when the caller must queue
    /// it instead. Blocks for one fdatasync.
    /// On success: the batch's last zxid, and how long its fsync took (none without forceSync).
    pub(crate) fn append_inline(&self, batch: &Batch) -> Option<Result<(i64, Option<Duration>), StorageError>> {
        let (last, _) = batch.last()?;
        if batch.len() > INLINE_BATCH || self.shared.queued.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let mut log = self.shared.store.try_lock().ok()?;
        let mut result = Ok(());
        for (hdr, txn) in batch {
            result = log.append(hdr, txn);
            if result.is_err() {
                break;
            }
        }
        Some(result.and_then(|()| sync_or_flush(&mut log, &self.shared)).map(|took| (last.zxid, took)))
    }
}

/// Syncs the log (flushes it without forceSync); returns how long the fsync took.
fn sync_or_flush(log: &mut Store, shared: &Shared) -> Result<Option<Duration>, StorageError> {
    if !shared.force_sync {
        return log.flush().map(|()| None);
    }
    let started = Instant::now();
    log.sync()?;
    let took = started.elapsed();
    shared.activity.synced();
    Ok(Some(took))
}

/// Starts the thread and returns the owner's handle to it. The thread ends when the handle is
/// dropped. A failed append or fsync stops the server (a hole in the log must never be skipped):
/// the thread reports `Event::Fatal` and ends.
pub(crate) fn spawn(
    log: Store,
    force_sync: bool,
    activity: Arc<LogActivity>,
    events: mpsc::Sender<Event>,
) -> std::io::Result<(Storage, JoinHandle<()>)> {
    let (tx, mut batches) = mpsc::channel(STORAGE_QUEUE);
    let shared = Arc::new(Shared { store: Mutex::new(log), force_sync, queued: AtomicUsize::new(0), activity });
    let thread_shared = shared.clone();
    let thread = std::thread::Builder::new().name("warden-storage".into()).spawn(move || {
        let shared = thread_shared;
        while let Some(first) = batches.blocking_recv() {
            let mut report = Report::default();
            let mut taken = 1;
            // Each message of this sync: when it was queued, and its figures but the last.
            let mut timings: Vec<(Instant, MsgTiming)> = Vec::new();
            let mut log = shared.store.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut result = execute_timed(&mut log, first, batches.len(), &mut report, &mut timings);
            // Everything queued goes into this sync, up to the first epoch file (reported with
            // the batch that wrote it).
            while result.is_ok() && report.epochs.is_empty() {
                match batches.try_recv() {
                    Ok(more) => {
                        taken += 1;
                        result = execute_timed(&mut log, more, batches.len(), &mut report, &mut timings);
                    }
                    Err(_) => break,
                }
            }
            let synced = result.and_then(|()| sync_or_flush(&mut log, &shared));
            drop(log);
            let done = Instant::now();
            let timings = timings
                .into_iter()
                .map(|(queued_at, t)| MsgTiming { queue_and_flush_ms: millis(done.duration_since(queued_at)), ..t })
                .collect();
            let fsync = match synced {
                Ok(took) => took,
                Err(why) => {
                    tracing::error!(%why, "transaction log write failed; stopping");
                    let _ = events.blocking_send(Event::Fatal(Fatal::LogWrite(why)));
                    return;
                }
            };
            if !report.is_empty() && events.blocking_send(Event::Synced { report, fsync, timings }).is_err() {
                return;
            }
            // After the report: an owner that reads 0 has it queued before anything it does next.
            shared.queued.fetch_sub(taken, Ordering::SeqCst);
        }
    })?;
    Ok((Storage { tx, shared }, thread))
}

/// [`execute`], timed: `waiting` is how many messages are still queued behind it.
fn execute_timed(
    log: &mut Store,
    msg: StorageMsg,
    waiting: usize,
    report: &mut Report,
    timings: &mut Vec<(Instant, MsgTiming)>,
) -> Result<(), StorageError> {
    let (queued_at, started) = (msg.queued_at, Instant::now());
    let result = execute(log, msg, report);
    let t = MsgTiming {
        queue_size: waiting as u64,
        queue_ms: millis(started.duration_since(queued_at)),
        process_ms: millis(started.elapsed()),
        queue_and_flush_ms: 0,
    };
    timings.push((queued_at, t));
    result
}

/// Whole milliseconds, as ZooKeeper's `Time.currentElapsedTime` differences count them.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Carries out one message. A reload's data, or why it failed, goes back on its channel (the
/// owner stops on a failure; nothing more is sent here).
fn execute(log: &mut Store, msg: StorageMsg, report: &mut Report) -> Result<(), StorageError> {
    let result = log.execute(msg.op, report);
    match (result, msg.reloaded) {
        (Ok(Some(data)), Some(reply)) => {
            let _ = reply.send(Ok(data));
            Ok(())
        }
        (Err(why), Some(reply)) => {
            let _ = reply.send(Err(why));
            Ok(())
        }
        (result, _) => result.map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_proto::{Txn, TxnHeader};

    /// The storage thread on an in-memory file system, its log activity and the owner's events.
    fn start(force_sync: bool) -> (Storage, JoinHandle<()>, Arc<LogActivity>, mpsc::Receiver<Event>) {
        let data = warden_storage::DataDir::with_fs(Arc::new(warden_storage::FaultFs::new()), "/data", "/data");
        let recovered = data.recover(4096).expect("an empty data dir");
        let store = Store::new(data, 4096, recovered.log);
        let activity = LogActivity::new();
        let (events_tx, events) = mpsc::channel(16);
        let (storage, thread) = spawn(store, force_sync, activity.clone(), events_tx).expect("the thread starts");
        (storage, thread, activity, events)
    }

    fn create(zxid: i64) -> Batch {
        let txn = Txn::Create {
            path: format!("/n{zxid}"),
            data: Some(vec![1; 10]),
            acl: warden_proto::Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: 1,
        };
        vec![(TxnHeader { client_id: 7, cxid: 1, zxid, time_ms: 0, txn_type: txn.op().code() }, Arc::new(txn))]
    }

    fn durable(events: &mut mpsc::Receiver<Event>) -> i64 {
        match events.blocking_recv() {
            Some(Event::Synced { report: Report { last: Some(zxid), .. }, .. }) => zxid,
            Some(Event::Fatal(why)) => panic!("the log failed: {why}"),
            _ => panic!("expected Durable"),
        }
    }

    /// Waits until the thread has finished its batches: it reports `Durable` before it counts the
    /// batch done, so an inline append right after the report may still see it queued.
    fn idle(storage: &Storage) {
        while storage.shared.queued.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// Each message a sync covered is reported with its sync processor figures: a message queued
    /// 30 ms before the thread could take it waited at least that long, and was durable no sooner.
    #[test]
    fn each_message_of_a_sync_comes_with_its_wait_and_its_time_to_durability() {
        let (storage, thread, _activity, mut events) = start(true);
        let mut msg = StorageMsg::from(StoreOp::Append(create(1)));
        msg.queued_at -= Duration::from_millis(30);
        storage.try_send(msg).expect("queued");
        let Some(Event::Synced { timings, .. }) = events.blocking_recv() else { panic!("expected Synced") };
        let [t] = timings.as_slice() else { panic!("one message: {timings:?}") };
        assert_eq!(t.queue_size, 0, "nothing queued behind it");
        assert!(t.queue_ms >= 30 && t.queue_and_flush_ms >= t.queue_ms, "{t:?}");
        drop((storage, events));
        thread.join().expect("the thread ends");
    }

    /// The snapshot writer gives way to the log while it syncs: every sync, on the thread or
    /// inline, is reported; a flush without fsync (forceSync=no) is not.
    #[test]
    fn syncs_are_reported_as_log_activity_and_flushes_are_not() {
        let (storage, thread, activity, mut events) = start(true);
        assert!(!activity.has_synced());
        storage.try_send(StoreOp::Append(create(1)).into()).expect("queued");
        assert_eq!(durable(&mut events), 1);
        assert!(activity.has_synced(), "the thread's sync is reported");
        drop((storage, events));
        thread.join().expect("the thread ends");

        let (storage, thread, activity, _events) = start(true);
        assert!(matches!(storage.append_inline(&create(1)), Some(Ok((1, Some(_))))));
        assert!(activity.has_synced(), "an inline sync is reported");
        drop(storage);
        thread.join().expect("the thread ends");

        let (storage, thread, activity, mut events) = start(false);
        storage.try_send(StoreOp::Append(create(1)).into()).expect("queued");
        assert_eq!(durable(&mut events), 1);
        idle(&storage);
        assert!(matches!(storage.append_inline(&create(2)), Some(Ok((2, None)))));
        assert!(!activity.has_synced(), "forceSync=no: nothing waits on the disk");
        drop((storage, events));
        thread.join().expect("the thread ends");
    }
}
