//! The storage thread: appends every persisted txn to the transaction log, fsyncs once per batch
//! (group commit: the batch is whatever queued up during the previous fsync), then reports the highest
//! durable zxid to the owner. It is the only producer of `Input::Durable`.

use std::thread::JoinHandle;

use std::path::PathBuf;
use tokio::sync::{mpsc, oneshot};
use warden_node::Input;
use warden_proto::{Txn, TxnHeader};

use warden_quorum::zab::EpochKind;
use warden_storage::{recover, write_epoch, write_snapshot, EpochFile, TxnLog};
use warden_tree::DataTree;

use crate::owner::Event;

/// Batches of txns queued to the storage thread before the owner waits.
pub(crate) const STORAGE_QUEUE: usize = 1024;

pub(crate) type Batch = Vec<(TxnHeader, Txn)>;

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
pub(crate) type Reloaded = (DataTree, Vec<(i64, i32)>, Vec<(TxnHeader, Txn)>);

/// Where the storage thread's files live.
pub(crate) struct StorageDirs {
    pub data_dir: PathBuf,
    pub data_log_dir: PathBuf,
    pub pre_alloc_bytes: u64,
}

/// Starts the thread. It ends when the batch sender is dropped. A failed append or fsync stops the
/// server (a hole in the log must never be skipped): the thread reports `Event::Fatal` and ends.
pub(crate) fn spawn(
    mut log: TxnLog,
    dirs: StorageDirs,
    force_sync: bool,
    mut batches: mpsc::Receiver<StorageMsg>,
    events: mpsc::Sender<Event>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("warden-storage".into()).spawn(move || {
        while let Some(first) = batches.blocking_recv() {
            let mut last = None;
            let mut epochs = Vec::new();
            let mut result = append(&mut log, &dirs, first, &mut last, &mut epochs);
            while result.is_ok() && epochs.is_empty() {
                match batches.try_recv() {
                    Ok(more) => result = append(&mut log, &dirs, more, &mut last, &mut epochs),
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
    log: &mut TxnLog,
    dirs: &StorageDirs,
    msg: StorageMsg,
    last: &mut Option<i64>,
    epochs: &mut Vec<(EpochKind, i64)>,
) -> Result<(), String> {
    let batch = match msg {
        StorageMsg::Append(batch) => batch,
        StorageMsg::Roll => return log.roll().map_err(|e| e.to_string()),
        StorageMsg::Epoch { kind, epoch } => {
            // Everything appended before it is made durable first (an epoch file never gets ahead
            // of the log it vouches for).
            log.sync().map_err(|e| e.to_string())?;
            let which = match kind {
                EpochKind::Accepted => EpochFile::Accepted,
                EpochKind::Current => EpochFile::Current,
            };
            write_epoch(&dirs.data_dir, which, epoch).map_err(|e| e.to_string())?;
            epochs.push((kind, epoch));
            return Ok(());
        }
        StorageMsg::InstallSnapshot { tree, sessions, zxid } => {
            // Snapshot first: once the log is cut, recovery must find the snapshot.
            write_snapshot(&dirs.data_dir, &tree, &sessions, zxid).map_err(|e| e.to_string())?;
            log.truncate_after(zxid).map_err(|e| e.to_string())?;
            *last = Some(zxid);
            return Ok(());
        }
        StorageMsg::TruncateAndReload { zxid, reply } => {
            let result = log.truncate_after(zxid).map_err(|e| e.to_string()).and_then(|()| {
                remove_snapshots_after(&dirs.data_dir, zxid)?;
                let r = recover(&dirs.data_dir, &dirs.data_log_dir, dirs.pre_alloc_bytes).map_err(|e| e.to_string())?;
                *log = r.log;
                Ok((r.tree, r.sessions, r.txns_after_snapshot))
            });
            let failed = result.as_ref().err().cloned();
            let _ = reply.send(result);
            *last = None;
            return match failed {
                Some(why) => Err(why),
                None => Ok(()),
            };
        }
        StorageMsg::Truncate(zxid) => {
            log.truncate_after(zxid).map_err(|e| e.to_string())?;
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

/// Removes (durably) every `snapshot.<hex zxid>` above `zxid`, as ZooKeeper's `truncateLog` does:
/// such a snapshot may hold the txns being cut (the start-up snapshot of a server that recovered
/// its own uncommitted proposals).
fn remove_snapshots_after(data_dir: &std::path::Path, zxid: i64) -> Result<(), String> {
    let dir = data_dir.join("version-2");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    let mut removed = false;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("snapshot.") else { continue };
        let hex = rest.split('.').next().unwrap_or_default();
        let Ok(z) = u64::from_str_radix(hex, 16) else { continue };
        if (z as i64) > zxid {
            tracing::info!(file = %entry.path().display(), "removing a snapshot above the TRUNC point");
            std::fs::remove_file(entry.path()).map_err(|e| format!("removing {}: {e}", entry.path().display()))?;
            removed = true;
        }
    }
    if removed {
        std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| format!("fsync {}: {e}", dir.display()))?;
    }
    Ok(())
}
