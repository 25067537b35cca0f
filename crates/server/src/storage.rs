//! The storage thread: appends every persisted txn to the transaction log, fsyncs once per batch
//! (group commit: the batch is whatever queued up during the previous fsync), then reports the highest
//! durable zxid to the owner. It is the only producer of `Input::Durable`.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};
use warden_node::Input;
use warden_proto::{Txn, TxnHeader};

use warden_quorum::zab::EpochKind;
use warden_storage::{EpochFile, Store};
use warden_tree::DataTree;

use crate::owner::Event;

/// Batches of txns queued to the storage thread before the owner waits.
pub(crate) const STORAGE_QUEUE: usize = 1024;

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

/// Starts the thread. It ends when the batch sender is dropped. A failed append or fsync stops the
/// server (a hole in the log must never be skipped): the thread reports `Event::Fatal` and ends.
pub(crate) fn spawn(
    mut log: Store,
    force_sync: bool,
    mut batches: mpsc::Receiver<StorageMsg>,
    events: mpsc::Sender<Event>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("warden-storage".into()).spawn(move || {
        while let Some(first) = batches.blocking_recv() {
            let mut last = None;
            let mut epochs = Vec::new();
            let mut result = append(&mut log, first, &mut last, &mut epochs);
            while result.is_ok() && epochs.is_empty() {
                match batches.try_recv() {
                    Ok(more) => result = append(&mut log, more, &mut last, &mut epochs),
                    Err(_) => break,
                }
            }
            if result.is_ok() && force_sync {
                result = log.sync().map_err(|e| e.to_string());
            } else if result.is_ok() {
                result = log.flush().map_err(|e| e.to_string());
            }
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
        }
    })
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
