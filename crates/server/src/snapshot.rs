//! The snapshot thread: serialises a tree taken at a zxid boundary (a structural-sharing clone, so the
//! owner never waits), writes it in ZooKeeper's format, then purges old snapshots and logs. Only a
//! snapshot that is durable (fsynced and renamed) lets purge remove anything.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// The owner's handle on the snapshot thread. At most one snapshot is in hand at a time, as in
/// ZooKeeper (`SyncRequestProcessor`'s `snapThreadMutex`): a snapshot due while the previous one is
/// still being written is skipped, not queued. A queued one would be written straight after, and
/// its tree clone would make every write until then copy the map chunks on its path.
pub(crate) struct Snapshots {
    pub jobs: mpsc::Sender<SnapshotJob>,
    busy: Arc<AtomicBool>,
}

impl Snapshots {
    /// Takes the thread for one job; false while it still has one (written and purged or not).
    pub fn claim(&self) -> bool {
        !self.busy.swap(true, Ordering::AcqRel)
    }
}

/// Starts the thread; it ends when the job sender is dropped. A failed snapshot is logged and the
/// server goes on: the log still holds every txn, and purge only runs after a successful snapshot.
pub(crate) fn spawn(dirs: SnapshotDirs) -> std::io::Result<(Snapshots, JoinHandle<()>)> {
    let (tx, mut jobs) = mpsc::channel::<SnapshotJob>(1);
    let busy = Arc::new(AtomicBool::new(false));
    let handle = Snapshots { jobs: tx, busy: busy.clone() };
    let thread = std::thread::Builder::new().name("warden-snapshot".into()).spawn(move || {
        while let Some(job) = jobs.blocking_recv() {
            let started = std::time::Instant::now();
            match write_snapshot(&dirs.data_dir, &job.tree, &job.sessions, job.zxid) {
                Ok(path) => {
                    tracing::info!(file = %path.display(), nodes = job.tree.znode_count(), ms = started.elapsed().as_millis() as u64, "snapshot written");
                    purge_old(&dirs);
                }
                Err(e) => tracing::error!(error = %e, zxid = format_args!("{:#x}", job.zxid), "snapshot failed"),
            }
            // The tree goes before the thread says it is free, so the next job's clone is the
            // only one the owner's writes have to copy around.
            drop(job);
            busy.store(false, Ordering::Release);
        }
    })?;
    Ok((handle, thread))
}

fn purge_old(dirs: &SnapshotDirs) {
    let Some(keep) = dirs.retain else { return };
    match purge(&dirs.data_dir, &dirs.data_log_dir, keep) {
        Ok(removed) if !removed.is_empty() => tracing::info!(files = removed.len(), "purged old snapshots and logs"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "purge failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_due_while_one_is_in_hand_is_refused_until_it_is_written() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dirs = SnapshotDirs { data_dir: dir.path().into(), data_log_dir: dir.path().into(), retain: None };
        let (snapshots, thread) = spawn(dirs).expect("the thread starts");
        assert!(snapshots.claim(), "an idle thread takes a job");
        assert!(!snapshots.claim(), "a claimed thread refuses a second job");
        let job = SnapshotJob { tree: DataTree::new(), sessions: vec![(7, 30_000)], zxid: 0x500000003 };
        snapshots.jobs.try_send(job).expect("the slot is free");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !snapshots.claim() {
            assert!(std::time::Instant::now() < deadline, "the thread never became free");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let written = dir.path().join("version-2").join("snapshot.500000003");
        assert!(written.is_file(), "the thread is free only once {} is written", written.display());
        drop(snapshots);
        thread.join().expect("the thread ends when its sender is dropped");
    }
}
