//! The storage thread: appends every persisted txn to the transaction log, fsyncs once per batch
//! (group commit: the batch is whatever queued up during the previous fsync), then reports the highest
//! durable zxid to the owner.
//!
//! A standalone owner instead appends and fsyncs a batch itself when one session wrote it and the
//! batch before it (`lone_writer`), no other event waits and the storage thread has nothing queued
//! (`Storage::append_inline`): a lone synchronous client then waits for one fdatasync and no thread
//! hand-offs (two wake-ups, 40-80 us on this VM). With several writers the fsync stays on the thread,
//! so the owner prepares the next batch meanwhile (letting any small batch through cost eight
//! synchronous clients 15% of their throughput).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};
use warden_node::Input;
use warden_proto::{Txn, TxnHeader};

use warden_quorum::zab::EpochKind;
use warden_storage::{EpochFile, Store};
use warden_tree::DataTree;

use crate::owner::Event;
use crate::snapshot::LogActivity;

/// Batches of txns queued to the storage thread before the owner waits.
const STORAGE_QUEUE: usize = 1024;

pub(crate) type Batch = Vec<(TxnHeader, Arc<Txn>)>;

/// Work for the storage thread, in order.
pub(crate) enum StorageMsg {
    /// Append these txns.
    Append(Batch),
    /// Start a new log file at the next append (a snapshot was just taken).
    Roll,
    /// Quorum mode: write an epoch file durably (after every append queued before it), then answer
    /// `Input::EpochDurable`.
    Epoch { kind: EpochKind, epoch: i64 },
    /// Quorum mode: drop every log record above this zxid, durably (ZAB's TRUNC).
    Truncate(i64),
    /// Quorum mode: the leader's snapshot replaced the tree: write it durably, drop every log
    /// record above its zxid, then answer `Input::Durable { zxid }`.
    InstallSnapshot { tree: DataTree, sessions: Vec<(i64, i32)>, zxid: i64 },
    /// Quorum mode: a TRUNC below what the tree already applied: cut the log durably, then rebuild
    /// the tree from snapshot + log (recovery) and hand it back.
    TruncateAndReload { zxid: i64, reply: oneshot::Sender<Result<Reloaded, String>> },
}

/// A tree, its sessions and the log txns replayed after the snapshot, rebuilt from disk.
pub(crate) type Reloaded = warden_storage::Reloaded;

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
    pub(crate) fn append_inline(&self, batch: &Batch) -> Option<Result<i64, String>> {
        let (last, _) = batch.last()?;
        if batch.len() > INLINE_BATCH || self.shared.queued.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let mut log = self.shared.store.try_lock().ok()?;
        let mut result = Ok(());
        for (hdr, txn) in batch {
            result = log.append(hdr, txn).map_err(|e| e.to_string());
            if result.is_err() {
                break;
            }
        }
        Some(result.and_then(|()| sync_or_flush(&mut log, &self.shared)).map(|()| last.zxid))
    }
}

/// True if one session wrote every txn of `batch` and of the batch before it (`last` is updated to
/// this batch's writer, or `None`).
pub(crate) fn lone_writer(batch: &Batch, last: &mut Option<i64>) -> bool {
    let writer = batch.first().map(|(h, _)| h.client_id).filter(|s| batch.iter().all(|(h, _)| h.client_id == *s));
    let before = std::mem::replace(last, writer);
    writer.is_some() && before == writer
}

fn sync_or_flush(log: &mut Store, shared: &Shared) -> Result<(), String> {
    if !shared.force_sync {
        return log.flush().map_err(|e| e.to_string());
    }
    log.sync().map_err(|e| e.to_string())?;
    shared.activity.synced();
    Ok(())
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
            let mut last = None;
            let mut epochs = Vec::new();
            let mut taken = 1;
            let mut log = shared.store.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut result = append(&mut log, first, &mut last, &mut epochs);
            while result.is_ok() && epochs.is_empty() {
                match batches.try_recv() {
                    Ok(more) => {
                        taken += 1;
                        result = append(&mut log, more, &mut last, &mut epochs);
                    }
                    Err(_) => break,
                }
            }
            result = result.and_then(|()| sync_or_flush(&mut log, &shared));
            drop(log);
            if let Err(why) = result {
                tracing::error!(%why, "transaction log write failed; stopping");
                let _ = events.blocking_send(Event::Fatal(format!("transaction log write failed: {why}")));
                return;
            }
            if let Some(zxid) = last {
                if events.blocking_send(Event::Node(Input::Durable { zxid })).is_err() {
                    return;
                }
            }
            for (kind, epoch) in epochs {
                if events.blocking_send(Event::Node(Input::EpochDurable { kind, epoch })).is_err() {
                    return;
                }
            }
            // After the reports: an owner that reads 0 has them queued before anything it does next.
            shared.queued.fetch_sub(taken, Ordering::SeqCst);
        }
    })?;
    Ok((Storage { tx, shared }, thread))
}

fn append(
    log: &mut Store,
    msg: StorageMsg,
    last: &mut Option<i64>,
    epochs: &mut Vec<(EpochKind, i64)>,
) -> Result<(), String> {
    let batch = match msg {
        StorageMsg::Append(batch) => batch,
        StorageMsg::Roll => return log.roll().map_err(|e| e.to_string()),
        StorageMsg::Epoch { kind, epoch } => {
            let which = match kind {
                EpochKind::Accepted => EpochFile::Accepted,
                EpochKind::Current => EpochFile::Current,
            };
            log.write_epoch(which, epoch).map_err(|e| e.to_string())?;
            epochs.push((kind, epoch));
            return Ok(());
        }
        StorageMsg::InstallSnapshot { tree, sessions, zxid } => {
            log.install_snapshot(&tree, &sessions, zxid).map_err(|e| e.to_string())?;
            *last = Some(zxid);
            return Ok(());
        }
        StorageMsg::TruncateAndReload { zxid, reply } => {
            let result = log.truncate_and_reload(zxid).map_err(|e| e.to_string());
            let failed = result.as_ref().err().cloned();
            let _ = reply.send(result);
            *last = None;
            return match failed {
                Some(why) => Err(why),
                None => Ok(()),
            };
        }
        StorageMsg::Truncate(zxid) => {
            log.truncate(zxid).map_err(|e| e.to_string())?;
            *last = None;
            return Ok(());
        }
    };
    for (hdr, txn) in &batch {
        log.append(hdr, txn).map_err(|e| e.to_string())?;
        *last = Some(hdr.zxid);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(sessions: &[i64]) -> Batch {
        let txn = Arc::new(Txn::Check { path: "/x".into(), version: -1 });
        sessions
            .iter()
            .map(|&client_id| (TxnHeader { client_id, cxid: 0, zxid: 1, time_ms: 0, txn_type: 13 }, txn.clone()))
            .collect()
    }

    /// The storage thread on an in-memory file system, its log activity and the owner's events.
    fn start(force_sync: bool) -> (Storage, JoinHandle<()>, Arc<LogActivity>, mpsc::Receiver<Event>) {
        let fs = Arc::new(warden_storage::FaultFs::new());
        let dir = std::path::Path::new("/data");
        let recovered = warden_storage::recover_with_fs(fs.clone(), dir, dir, 4096).expect("an empty data dir");
        let store = Store::new(fs, dir, dir, 4096, recovered.log);
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
            Some(Event::Node(Input::Durable { zxid })) => zxid,
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

    /// The snapshot writer gives way to the log while it syncs: every sync, on the thread or
    /// inline, is reported; a flush without fsync (forceSync=no) is not.
    #[test]
    fn syncs_are_reported_as_log_activity_and_flushes_are_not() {
        let (storage, thread, activity, mut events) = start(true);
        assert!(!activity.has_synced());
        storage.try_send(StorageMsg::Append(create(1))).expect("queued");
        assert_eq!(durable(&mut events), 1);
        assert!(activity.has_synced(), "the thread's sync is reported");
        drop((storage, events));
        thread.join().expect("the thread ends");

        let (storage, thread, activity, _events) = start(true);
        assert_eq!(storage.append_inline(&create(1)), Some(Ok(1)));
        assert!(activity.has_synced(), "an inline sync is reported");
        drop(storage);
        thread.join().expect("the thread ends");

        let (storage, thread, activity, mut events) = start(false);
        storage.try_send(StorageMsg::Append(create(1))).expect("queued");
        assert_eq!(durable(&mut events), 1);
        idle(&storage);
        assert_eq!(storage.append_inline(&create(2)), Some(Ok(2)));
        assert!(!activity.has_synced(), "forceSync=no: nothing waits on the disk");
        drop((storage, events));
        thread.join().expect("the thread ends");
    }

    #[test]
    fn only_a_session_writing_twice_in_a_row_is_a_lone_writer() {
        let mut last = None;
        assert!(!lone_writer(&batch(&[7]), &mut last), "a first batch has no predecessor");
        assert!(lone_writer(&batch(&[7]), &mut last));
        assert!(lone_writer(&batch(&[7, 7]), &mut last));
        assert!(!lone_writer(&batch(&[8]), &mut last), "another session");
        assert!(!lone_writer(&batch(&[7]), &mut last), "the one before was 8's");
        assert!(!lone_writer(&batch(&[7, 8]), &mut last), "two sessions in one batch");
        assert_eq!(last, None);
        assert!(!lone_writer(&batch(&[7]), &mut last), "after a mixed batch");
        assert!(!lone_writer(&batch(&[]), &mut last));
        assert_eq!(last, None);
    }
}
