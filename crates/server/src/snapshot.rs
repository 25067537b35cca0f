//! The snapshot thread: serialises a tree taken at a zxid boundary (a structural-sharing clone, so the
//! owner never waits), writes it in ZooKeeper's format, then purges old snapshots and logs. Only a
//! snapshot that is durable (fsynced and renamed) lets purge remove anything.
//!
//! The thread runs at the lowest CPU priority (nice 19): a snapshot is background work, and under a
//! write load it would otherwise take a core's share from the threads that serve requests. On an idle
//! or lightly loaded machine it runs as fast as before; on a saturated one it is written more slowly
//! and the snapshots that fall due meanwhile are skipped, so the log since the last snapshot grows.
//!
//! It also gives way to the log on the disk. Each fdatasync of the log has to wait for every byte
//! written before it on the device, and a snapshot writes hundreds of megabytes: under a write load
//! the log's fsyncs took three times as long while a snapshot write was under way. So while the log
//! has synced within the last `LOG_BUSY_WINDOW`, the thread sleeps `PACE` times as long as each of
//! its writes took (`Pacer`): the snapshot keeps at most 1/(PACE + 1) of the disk's time, and takes
//! that many times longer to write under load. An idle log lets it write at full speed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use warden_storage::{DataDir, SnapshotOptions};
use warden_tree::DataTree;

/// One snapshot to write.
pub(crate) struct SnapshotJob {
    pub tree: DataTree,
    pub sessions: Vec<(i64, i32)>,
    pub zxid: i64,
}

/// The owner's handle on the snapshot thread. At most one snapshot is in hand at a time, as in
/// ZooKeeper (`SyncRequestProcessor`'s `snapThreadMutex`): a snapshot due while the previous one is
/// still being written is skipped, not queued. A queued one would be written straight after, and
/// its tree clone would make every write until then copy the map chunks on its path.
pub(crate) struct Snapshots {
    jobs: mpsc::Sender<SnapshotJob>,
    /// Set by `try_start`, cleared by the thread once the job is written, purged and dropped.
    busy: Arc<AtomicBool>,
    /// How long the last successful snapshot took to write (ms), until the owner takes it
    /// (`u64::MAX`: none new). One job at a time, so none is overwritten before it is taken.
    written_ms: Arc<AtomicU64>,
    /// How long that snapshot paused to let the transaction log's fsyncs through (the pacer),
    /// stored before `written_ms`.
    paused_ms: Arc<AtomicU64>,
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
    /// How long the snapshot written since the last call took (ZooKeeper's `snapshottime`).
    /// With it, how long it paused for the log (Warden's `warden_snapshot_paused_ms`).
    pub fn take_written_ms(&self) -> Option<(u64, u64)> {
        let written = Some(self.written_ms.swap(u64::MAX, Ordering::AcqRel)).filter(|&ms| ms != u64::MAX)?;
        Some((written, self.paused_ms.load(Ordering::Acquire)))
    }

    /// Whether a snapshot is being written (or waits to be).
    pub fn in_hand(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

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

/// Starts the thread writing snapshots into `data` and purging it, keeping `retain` snapshots
/// (`autopurge.snapRetainCount`, at least 3; `None` disables purge); it ends when the job sender
/// is dropped. A failed snapshot is logged and the server goes on: the log still holds every txn,
/// and purge only runs after a successful snapshot.
pub(crate) fn spawn(
    data: DataDir,
    retain: Option<usize>,
    log: Arc<LogActivity>,
) -> std::io::Result<(Snapshots, JoinHandle<()>)> {
    let (tx, mut jobs) = mpsc::channel::<SnapshotJob>(1);
    let busy = Arc::new(AtomicBool::new(false));
    let written_ms = Arc::new(AtomicU64::new(u64::MAX));
    let paused_ms = Arc::new(AtomicU64::new(0));
    let handle =
        Snapshots { jobs: tx, busy: busy.clone(), written_ms: written_ms.clone(), paused_ms: paused_ms.clone() };
    let thread = std::thread::Builder::new().name("warden-snapshot".into()).spawn(move || {
        lower_priority();
        while let Some(job) = jobs.blocking_recv() {
            let started = Instant::now();
            let mut pacer = Pacer::default();
            let mut pace = |took| {
                if let Some(pause) = pacer.after_write(took, log.busy()) {
                    std::thread::sleep(pause);
                }
            };
            match data.write_snapshot(
                &job.tree,
                &job.sessions,
                job.zxid,
                SnapshotOptions { pace: Some(&mut pace), ..Default::default() },
            ) {
                Ok(path) => {
                    paused_ms.store(pacer.paused.as_millis() as u64, Ordering::Release);
                    written_ms.store(started.elapsed().as_millis() as u64, Ordering::Release);
                    tracing::info!(
                        file = %path.display(),
                        nodes = job.tree.znode_count(),
                        ms = started.elapsed().as_millis() as u64,
                        paused_ms = pacer.paused.as_millis() as u64,
                        "snapshot written"
                    );
                    purge_old(&data, retain);
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

/// When the transaction log last synced to disk, as the storage side reports it and the snapshot
/// thread reads it.
#[derive(Debug)]
pub(crate) struct LogActivity {
    start: Instant,
    /// Microseconds from `start` to the end of the last sync, plus one; 0: none yet.
    last_sync: AtomicU64,
}

/// A log that synced this recently is busy: the snapshot writer gives way to it.
const LOG_BUSY_WINDOW: Duration = Duration::from_millis(100);

impl LogActivity {
    pub fn new() -> Arc<LogActivity> {
        Arc::new(LogActivity { start: Instant::now(), last_sync: AtomicU64::new(0) })
    }

    /// The log has just synced.
    pub fn synced(&self) {
        let since = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX - 1);
        self.last_sync.store(since + 1, Ordering::Relaxed);
    }

    /// True if the log has ever synced (tests of the reporting side, free of the clock).
    #[cfg(test)]
    pub(crate) fn has_synced(&self) -> bool {
        self.last_sync.load(Ordering::Relaxed) != 0
    }

    /// True if the log synced within `LOG_BUSY_WINDOW`.
    pub fn busy(&self) -> bool {
        self.busy_at(Instant::now())
    }

    /// True if the log synced within `LOG_BUSY_WINDOW` before `now`.
    fn busy_at(&self, now: Instant) -> bool {
        match self.last_sync.load(Ordering::Relaxed) {
            0 => false,
            at => now.saturating_duration_since(self.start + Duration::from_micros(at - 1)) < LOG_BUSY_WINDOW,
        }
    }
}

/// While the log is busy, the snapshot writer sleeps this many times as long as its writes took.
const PACE: u32 = 10;

/// Sleeps shorter than this are saved up: most writes into the snapshot file only copy into its
/// buffer (microseconds), and a sleep costs a timer wake-up.
const MIN_PAUSE: Duration = Duration::from_millis(1);

/// Turns the time the snapshot's writes took into the pauses that keep its share of the disk's
/// time at most 1/(PACE + 1) while the log is busy.
#[derive(Debug, Default)]
struct Pacer {
    /// Pause owed and not yet taken.
    owed: Duration,
    /// Pauses taken (for the log line).
    paused: Duration,
}

impl Pacer {
    /// A write took `took`; `log_busy` says whether the log synced lately. Returns the pause to
    /// take now, if any. An idle log forgives what was owed.
    fn after_write(&mut self, took: Duration, log_busy: bool) -> Option<Duration> {
        if !log_busy {
            self.owed = Duration::ZERO;
            return None;
        }
        self.owed += took * PACE;
        if self.owed < MIN_PAUSE {
            return None;
        }
        let pause = std::mem::take(&mut self.owed);
        self.paused += pause;
        Some(pause)
    }
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

fn purge_old(data: &DataDir, retain: Option<usize>) {
    let Some(keep) = retain else { return };
    match data.purge(keep) {
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
    fn the_log_is_busy_for_a_window_after_each_sync() {
        let log = LogActivity::new();
        assert!(!log.busy(), "no sync yet");
        log.synced();
        let now = Instant::now();
        assert!(log.busy_at(now));
        assert!(log.busy_at(now + LOG_BUSY_WINDOW - Duration::from_millis(1)));
        assert!(!log.busy_at(now + LOG_BUSY_WINDOW));
        std::thread::sleep(Duration::from_millis(2));
        log.synced();
        assert!(log.busy_at(now + LOG_BUSY_WINDOW), "a later sync moves the window");
    }

    #[test]
    fn the_pacer_pauses_only_while_the_log_is_busy_and_saves_up_short_pauses() {
        let mut pacer = Pacer::default();
        let us = Duration::from_micros;
        assert_eq!(pacer.after_write(Duration::from_millis(3), false), None, "an idle log: full speed");
        // Copies into the file's buffer take microseconds: their pauses add up before one is taken.
        assert_eq!(pacer.after_write(us(40), true), None);
        assert_eq!(pacer.after_write(us(40), true), None);
        assert_eq!(pacer.after_write(us(40), true), Some(us(120) * PACE), "three writes' pauses at once");
        assert_eq!(pacer.after_write(Duration::from_millis(3), true), Some(Duration::from_millis(3) * PACE));
        assert_eq!(pacer.paused, us(120) * PACE + Duration::from_millis(3) * PACE);
        // What is owed when the log goes idle is forgiven.
        assert_eq!(pacer.after_write(us(40), true), None);
        assert_eq!(pacer.after_write(us(40), false), None);
        assert_eq!(pacer.after_write(us(40), true), None, "the earlier 40 us were forgiven");
        assert_eq!(pacer.after_write(us(40), true), None);
        assert_eq!(pacer.after_write(us(40), true), Some(us(120) * PACE));
    }

    #[test]
    fn the_snapshot_thread_runs_at_the_lowest_priority() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let data = DataDir::real(dir.path(), dir.path());
        let own = std::path::Path::new("/proc/thread-self/stat");
        let own_before = nice_in(own);
        let (snapshots, thread) = spawn(data, None, LogActivity::new()).expect("the thread starts");
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
        let data = DataDir::real(dir.path(), dir.path());
        let (snapshots, thread) = spawn(data, None, LogActivity::new()).expect("the thread starts");
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
