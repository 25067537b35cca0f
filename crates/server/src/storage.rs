//! The storage thread: appends every persisted txn to the transaction log, fsyncs once per batch
//! (group commit: the batch is whatever queued up during the previous fsync), then reports the highest
//! durable zxid to the owner. It is the only producer of `Input::Durable`.

use std::thread::JoinHandle;

use tokio::sync::mpsc;
use warden_node::Input;
use warden_proto::{Txn, TxnHeader};
use warden_storage::TxnLog;

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
}

/// Starts the thread. It ends when the batch sender is dropped. A failed append or fsync stops the
/// server (a hole in the log must never be skipped): the thread reports `Event::Fatal` and ends.
pub(crate) fn spawn(
    mut log: TxnLog,
    force_sync: bool,
    mut batches: mpsc::Receiver<StorageMsg>,
    events: mpsc::Sender<Event>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("warden-storage".into()).spawn(move || {
        while let Some(first) = batches.blocking_recv() {
            let mut last = None;
            let mut result = append(&mut log, first, &mut last);
            while result.is_ok() {
                match batches.try_recv() {
                    Ok(more) => result = append(&mut log, more, &mut last),
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
        }
    })
}

fn append(log: &mut TxnLog, msg: StorageMsg, last: &mut Option<i64>) -> Result<(), String> {
    let batch = match msg {
        StorageMsg::Append(batch) => batch,
        StorageMsg::Roll => return log.roll().map_err(|e| e.to_string()),
    };
    for (hdr, txn) in &batch {
        log.append(hdr, txn).map_err(|e| e.to_string())?;
        *last = Some(hdr.zxid);
    }
    Ok(())
}
