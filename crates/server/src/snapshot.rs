//! The snapshot thread: serialises a tree taken at a zxid boundary (a structural-sharing clone, so the
//! owner never waits), writes it in ZooKeeper's format, then purges old snapshots and logs. Only a
//! snapshot that is durable (fsynced and renamed) lets purge remove anything.
//!
//! The thread runs at the lowest CPU priority (nice 19): a snapshot is background work, and under a
//! write load it would otherwise take a core's share from the threads that serve requests. On an idle
//! or lightly loaded machine it runs as fast as before; on a saturated one it is written more slowly
//! and the snapshots that fall due meanwhile are skipped, so the log since the last snapshot grows.

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
    jobs: mpsc::Sender<SnapshotJob>,
    /// Set by `try_start`, cleared by the thread once the job is written, purged and dropped.
    busy: Arc<AtomicBool>,
}

/// What `Snapshots::try_start` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Start {
    Started,
    /// The previous job is still in hand; the new one was not built.
    Busy,
    /// The thread has ended.
    Gone,
}

impl Snapshots {
    /// Builds the job and hands it to the thread, unless the thread still has one.
    pub fn try_start(&self, job: impl FnOnce() -> SnapshotJob) -> Start {
        if self.busy.swap(true, Ordering::AcqRel) {
            return Start::Busy;
        }
        match self.jobs.try_send(job()) {
            Ok(()) => Start::Started,
            Err(_) => Start::Gone,
        }
    }
}

/// Starts the thread; it ends when the job sender is dropped. A failed snapshot is logged and the
/// server goes on: the log still holds every txn, and purge only runs after a successful snapshot.
pub(crate) fn spawn(dirs: SnapshotDirs) -> std::io::Result<(Snapshots, JoinHandle<()>)> {
    let (tx, mut jobs) = mpsc::channel::<SnapshotJob>(1);
    let busy = Arc::new(AtomicBool::new(false));
    let handle = Snapshots { jobs: tx, busy: busy.clone() };
    let thread = std::thread::Builder::new().name("warden-snapshot".into()).spawn(move || {
        lower_priority();
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

/// The snapshot thread's nice value: the lowest priority a normal thread can have.
const SNAPSHOT_NICE: i32 = 19;

/// Moves the calling thread to `SNAPSHOT_NICE`. On Linux the nice value belongs to the thread, so
/// the rest of the server keeps its own. Raising it needs no privilege; if it fails all the same,
/// the snapshot is written at the normal priority.
fn lower_priority() {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), SNAPSHOT_NICE) {
        tracing::warn!(error = %e, "could not lower the snapshot thread's priority");
    }
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

    /// The nice value in a `/proc/.../stat` file: field 19, counting from the pid.
    fn nice_in(stat: &std::path::Path) -> i32 {
        let stat = std::fs::read_to_string(stat).expect("a task's stat");
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
        rest.split_whitespace().nth(16).and_then(|n| n.parse().ok()).expect("a nice field")
    }

    /// The nice values of every thread named `warden-snapshot` in this process.
    fn snapshot_thread_nices() -> Vec<i32> {
        let mut out = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
            let dir = task.expect("a task entry").path();
            if std::fs::read_to_string(dir.join("comm")).unwrap_or_default().trim_end() == "warden-snapshot" {
                out.push(nice_in(&dir.join("stat")));
            }
        }
        out
    }

    #[test]
    fn the_snapshot_thread_runs_at_the_lowest_priority() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dirs = SnapshotDirs { data_dir: dir.path().into(), data_log_dir: dir.path().into(), retain: None };
        let own = std::path::Path::new("/proc/thread-self/stat");
        let own_before = nice_in(own);
        let (snapshots, thread) = spawn(dirs).expect("the thread starts");
        let job = SnapshotJob { tree: DataTree::new(), sessions: Vec::new(), zxid: 0x100000001 };
        assert_eq!(snapshots.try_start(|| job), Start::Started);
        // The thread lowers its priority before it takes its first job; once the job is written,
        // it has.
        let written = dir.path().join("version-2").join("snapshot.100000001");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !written.is_file() {
            assert!(std::time::Instant::now() < deadline, "the snapshot was never written");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let nices = snapshot_thread_nices();
        assert!(!nices.is_empty(), "a thread named warden-snapshot runs");
        assert!(nices.iter().all(|&n| n == SNAPSHOT_NICE), "snapshot threads' nice values: {nices:?}");
        assert_eq!(nice_in(own), own_before, "the thread that started it keeps its own priority");
        drop(snapshots);
        thread.join().expect("the thread ends");
    }

    #[test]
    fn a_snapshot_due_while_one_is_in_hand_is_refused_until_it_is_written() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dirs = SnapshotDirs { data_dir: dir.path().into(), data_log_dir: dir.path().into(), retain: None };
        let (snapshots, thread) = spawn(dirs).expect("the thread starts");
        let job = |zxid| SnapshotJob { tree: DataTree::new(), sessions: vec![(7, 30_000)], zxid };
        assert_eq!(snapshots.try_start(|| job(0x500000003)), Start::Started);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let built = std::cell::Cell::new(0);
        loop {
            let second = || {
                built.set(built.get() + 1);
                job(0x500000004)
            };
            match snapshots.try_start(second) {
                Start::Busy => {}
                Start::Started => break,
                Start::Gone => panic!("the thread ended"),
            }
            assert!(std::time::Instant::now() < deadline, "the thread never became free");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(built.get(), 1, "a refused job is not built (no tree clone)");
        let first = dir.path().join("version-2").join("snapshot.500000003");
        assert!(first.is_file(), "the second job starts only once {} is written", first.display());
        drop(snapshots);
        thread.join().expect("the thread ends when its sender is dropped");
        assert!(dir.path().join("version-2").join("snapshot.500000004").is_file(), "the second job was written");
    }
}
