//! The snapshot thread: serialises a tree taken at a zxid boundary (a structural-sharing clone, so the
//! owner never waits), writes it in ZooKeeper's format, then purges old snapshots and logs. Only a
//! snapshot that is durable (fsynced and renamed) lets purge remove anything.

use std::path::PathBuf;
use std::thread::JoinHandle;

use tokio::sync::mpsc;
use warden_storage::{purge, write_snapshot};
use warden_tree::DataTree;

/// One snapshot to write.
pub(crate) struct SnapshotJob {
    pub tree: DataTree,
    pub sessions: Vec<(i64, i32)>,
    pub zxid: i64,
}

pub(crate) struct SnapshotDirs {
    pub data_dir: PathBuf,
    pub data_log_dir: PathBuf,
    /// Snapshots to keep (`autopurge.snapRetainCount`, at least 3); `None` disables purge.
    pub retain: Option<usize>,
}

/// Starts the thread; it ends when the job sender is dropped. A failed snapshot is logged and the
/// server goes on: the log still holds every txn, and purge only runs after a successful snapshot.
pub(crate) fn spawn(dirs: SnapshotDirs, mut jobs: mpsc::Receiver<SnapshotJob>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("warden-snapshot".into()).spawn(move || {
        while let Some(job) = jobs.blocking_recv() {
            let started = std::time::Instant::now();
            match write_snapshot(&dirs.data_dir, &job.tree, &job.sessions, job.zxid) {
                Ok(path) => {
                    tracing::info!(file = %path.display(), nodes = job.tree.znode_count(), ms = started.elapsed().as_millis() as u64, "snapshot written");
                    purge_old(&dirs);
                }
                Err(e) => tracing::error!(error = %e, zxid = format_args!("{:#x}", job.zxid), "snapshot failed"),
            }
        }
    })
}

fn purge_old(dirs: &SnapshotDirs) {
    let Some(keep) = dirs.retain else { return };
    match purge(&dirs.data_dir, &dirs.data_log_dir, keep) {
        Ok(removed) if !removed.is_empty() => tracing::info!(files = removed.len(), "purged old snapshots and logs"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "purge failed"),
    }
}
