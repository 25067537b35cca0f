//! `Store`: one server's data directories as the storage side of a server uses them, on any `Fs`.
//! The server's storage thread runs it over `RealFs`; the simulator (`warden-sim`) runs the very
//! same code over `FaultFs`, so what the simulator checks is what the server does on disk.
//!
//! What it adds over the pieces it uses (`TxnLog`, epoch files, snapshots, recovery): the order
//! rules of quorum mode. An epoch file is written only after every txn appended before it is
//! durable (an epoch never vouches for a log it is ahead of); an installed snapshot is durable
//! before the log is cut above it (recovery must find it once the log is cut); a TRUNC below the
//! applied tree also removes snapshots above the cut (they may hold the txns being cut, as
//! ZooKeeper's `truncateLog` does) before the data is reloaded.

use std::sync::Arc;

use warden_proto::{Txn, TxnHeader};
use warden_tree::DataTree;

use crate::epoch::EpochFile;
use crate::snapshot::{snapshot_files, sync_dir, SnapshotOptions};
use crate::{DataDir, StorageError, TxnLog};

/// A tree, its live sessions (id, timeout ms) and the log txns replayed after the snapshot,
/// rebuilt from disk.
pub type Reloaded = (DataTree, Vec<(i64, i32)>, Vec<(TxnHeader, Txn)>);

/// One piece of work for the storage side. A server's storage thread and the simulator's storage
/// carry these out in the order they were issued, with [`Store::execute`].
#[derive(Debug)]
pub enum StoreOp {
    /// Append these txns (durable at the next sync).
    Append(Vec<(TxnHeader, Arc<Txn>)>),
    /// Start a new log file at the next append (a snapshot was just taken).
    Roll,
    /// Write an epoch file durably, after every txn appended before it.
    Epoch { which: EpochFile, epoch: i64 },
    /// ZAB's TRUNC: drop every log record above this zxid, durably.
    Truncate(i64),
    /// The leader's snapshot replaced the tree: write it durably, keep no log record above it.
    Install { tree: Box<DataTree>, sessions: Vec<(i64, i32)>, zxid: i64 },
    /// A TRUNC below what the tree already applied: cut the log, then rebuild the tree from disk.
    TruncateAndReload(i64),
}

/// What executed ops leave to report once the log is synced: the highest zxid now in the log
/// (appended, or the installed snapshot's) and the epoch files written, in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub last: Option<i64>,
    pub epochs: Vec<(EpochFile, i64)>,
    /// Txns appended since the last sync: the group commit this sync makes durable.
    pub appended: usize,
}

impl Report {
    /// Nothing to report: no zxid written and no epoch file.
    pub fn is_empty(&self) -> bool {
        self.last.is_none() && self.epochs.is_empty()
    }
}

/// The open transaction log plus the data directories it belongs to.
#[derive(Debug)]
pub struct Store {
    data: DataDir,
    pre_alloc_bytes: u64,
    log: TxnLog,
}

impl Store {
    /// Wraps the log that recovery of `data` opened (`Recovered::log`).
    pub fn new(data: DataDir, pre_alloc_bytes: u64, log: TxnLog) -> Store {
        Store { data, pre_alloc_bytes, log }
    }

    /// Carries out one op, adding what is to be reported after the next sync to `report`; a
    /// `TruncateAndReload` returns the data rebuilt from disk. A cut (Truncate, TruncateAndReload)
    /// forgets the appends before it: they are gone from the log, so they are not reported.
    pub fn execute(&mut self, op: StoreOp, report: &mut Report) -> Result<Option<Reloaded>, StorageError> {
        match op {
            StoreOp::Append(batch) => {
                for (hdr, txn) in &batch {
                    self.append(hdr, txn)?;
                    report.last = Some(hdr.zxid);
                    report.appended += 1;
                }
            }
            StoreOp::Roll => self.roll()?,
            StoreOp::Epoch { which, epoch } => {
                self.write_epoch(which, epoch)?;
                report.epochs.push((which, epoch));
            }
            StoreOp::Truncate(zxid) => {
                self.truncate(zxid)?;
                report.last = None;
            }
            StoreOp::Install { tree, sessions, zxid } => {
                self.install_snapshot(&tree, &sessions, zxid)?;
                report.last = Some(zxid);
            }
            StoreOp::TruncateAndReload(zxid) => {
                report.last = None;
                return self.truncate_and_reload(zxid).map(Some);
            }
        }
        Ok(None)
    }

    /// The open log.
    pub fn log(&self) -> &TxnLog {
        &self.log
    }

    /// Buffers one txn record (not durable until `sync`).
    pub fn append(&mut self, hdr: &TxnHeader, txn: &Txn) -> Result<(), StorageError> {
        self.log.append(hdr, txn)
    }

    /// fdatasyncs the log (`forceSync=yes`).
    pub fn sync(&mut self) -> Result<(), StorageError> {
        self.log.sync()
    }

    /// Hands buffered records to the operating system only (`forceSync=no`).
    pub fn flush(&mut self) -> Result<(), StorageError> {
        self.log.flush()
    }

    /// The next append starts a new log file (a snapshot was just taken).
    pub fn roll(&mut self) -> Result<(), StorageError> {
        self.log.roll()
    }

    /// Writes an epoch file durably, after making every txn appended so far durable.
    pub fn write_epoch(&mut self, which: EpochFile, epoch: i64) -> Result<(), StorageError> {
        self.log.sync()?;
        self.data.write_epoch(which, epoch)
    }

    /// The leader's snapshot replaced the tree: writes it durably, removes every local snapshot
    /// above its zxid (such a snapshot holds txns the leader did not keep, such as this server's
    /// own uncommitted ones in its start-up snapshot, and recovery would load it as the newest),
    /// then drops every log record above its zxid. Found by warden-sim seed 0x8af8a8.
    pub fn install_snapshot(
        &mut self,
        tree: &DataTree,
        sessions: &[(i64, i32)],
        zxid: i64,
    ) -> Result<(), StorageError> {
        self.data.write_snapshot(tree, sessions, zxid, SnapshotOptions::default())?;
        self.remove_snapshots_after(zxid)?;
        self.log.truncate_after(zxid)
    }

    /// ZAB's TRUNC: drops every log record above `zxid`, durably.
    pub fn truncate(&mut self, zxid: i64) -> Result<(), StorageError> {
        self.log.truncate_after(zxid)
    }

    /// A TRUNC below what the tree already applied: cuts the log, removes snapshots above the cut,
    /// and rebuilds the tree from disk (the log is reopened by recovery).
    pub fn truncate_and_reload(&mut self, zxid: i64) -> Result<Reloaded, StorageError> {
        self.log.truncate_after(zxid)?;
        self.remove_snapshots_after(zxid)?;
        let r = self.data.recover(self.pre_alloc_bytes)?;
        self.log = r.log;
        Ok((r.tree, r.sessions, r.txns_after_snapshot))
    }

    /// Removes (durably) every `snapshot.<hex zxid>` above `zxid`.
    fn remove_snapshots_after(&self, zxid: i64) -> Result<(), StorageError> {
        let fs = self.data.fs();
        let dir = self.data.snap_dir();
        let mut removed = false;
        for (z, path) in snapshot_files(fs, &dir) {
            if z > zxid {
                tracing::info!(file = %path.display(), "removing a snapshot above the TRUNC point");
                fs.remove_file(&path).map_err(StorageError::io("remove", &path))?;
                removed = true;
            }
        }
        if removed {
            sync_dir(fs, &dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FaultFs, Fs};
    use crate::snapshot::SnapshotOptions;
    use std::path::Path;
    use warden_proto::{Txn, TxnHeader};

    fn txn(zxid: i64, path: &str) -> (TxnHeader, Txn) {
        let txn = Txn::Create {
            path: path.into(),
            data: Some(Vec::new()),
            acl: warden_proto::Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: 1,
        };
        (TxnHeader { client_id: 1, cxid: 1, zxid, time_ms: 0, txn_type: txn.op().code() }, txn)
    }

    /// A local snapshot above the leader's (here the start-up snapshot holding this server's own
    /// uncommitted txn) must not survive a SNAP install: recovery would load it as the newest.
    #[test]
    fn install_snapshot_removes_local_snapshots_above_it() {
        let fs = FaultFs::new();
        let data = DataDir::with_fs(Arc::new(fs.clone()), "/d", "/d");
        let r = data.recover(4096).unwrap();
        let mut store = Store::new(data.clone(), 4096, r.log);
        let mut mine = DataTree::new();
        for z in [1, 2] {
            let (h, t) = txn(z, &format!("/n{z}"));
            store.append(&h, &t).unwrap();
            mine.apply(&h, &t);
        }
        store.sync().unwrap();
        data.write_snapshot(&mine, &[], 2, SnapshotOptions::default()).unwrap();
        // The leader kept only zxid 1.
        let mut leaders = DataTree::new();
        let (h, t) = txn(1, "/n1");
        leaders.apply(&h, &t);
        store.install_snapshot(&leaders, &[], 1).unwrap();
        let r = DataDir::with_fs(Arc::new(fs.crash(7)), "/d", "/d").recover(4096).unwrap();
        assert_eq!(r.tree.last_processed_zxid(), 1);
        assert!(r.tree.node("/n2").is_none(), "the cut txn came back from the old snapshot");
    }

    /// A file system on which `victim` is purged by someone else the moment it is first read, as
    /// the snapshot thread's purge may do between a truncation's listing and its reads.
    #[derive(Debug)]
    struct PurgedWhileRead {
        inner: FaultFs,
        victim: std::path::PathBuf,
        armed: std::sync::atomic::AtomicBool,
    }

    impl Fs for PurgedWhileRead {
        fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
            self.inner.create_dir_all(dir)
        }
        fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
            self.inner.list_dir(dir)
        }
        fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
            if path == self.victim && self.armed.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = self.inner.remove_file(path);
            }
            self.inner.read(path)
        }
        fn file_len(&self, path: &Path) -> std::io::Result<u64> {
            self.inner.file_len(path)
        }
        fn read_at(&self, path: &Path, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
            self.inner.read_at(path, offset, len)
        }
        fn create(&self, path: &Path) -> std::io::Result<Box<dyn crate::FsFile>> {
            self.inner.create(path)
        }
        fn open_write(&self, path: &Path) -> std::io::Result<Box<dyn crate::FsFile>> {
            self.inner.open_write(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            self.inner.rename(from, to)
        }
        fn remove_file(&self, path: &Path) -> std::io::Result<()> {
            self.inner.remove_file(path)
        }
        fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
            self.inner.sync_dir(dir)
        }
    }

    /// Found by the nemesis test: a follower installing the leader's snapshot truncated its log
    /// while the snapshot thread purged an old log file; the read of the vanished file stopped the
    /// server. A file purged under a truncation is skipped: none of its records are left to cut.
    #[test]
    fn a_log_file_purged_during_a_truncation_is_skipped() {
        let fs = FaultFs::new();
        let data = DataDir::with_fs(Arc::new(fs.clone()), "/d", "/d");
        let r = data.recover(4096).unwrap();
        let mut store = Store::new(data, 4096, r.log);
        for z in 1..=4 {
            if z == 3 {
                store.roll().unwrap();
            }
            let (h, t) = txn(z, &format!("/n{z}"));
            store.append(&h, &t).unwrap();
            store.sync().unwrap();
        }
        let victim = std::path::PathBuf::from("/d/version-2/log.1");
        assert!(fs.files().contains(&victim), "{:?}", fs.files());
        let purging = Arc::new(PurgedWhileRead { inner: fs.clone(), victim: victim.clone(), armed: false.into() });
        let data = DataDir::with_fs(purging.clone(), "/d", "/d");
        let (log, _) = data.open_log(4096).unwrap();
        let mut store = Store::new(data, 4096, log);
        purging.armed.store(true, std::sync::atomic::Ordering::Relaxed);
        store.truncate(3).expect("a purged file does not stop the truncation");
        assert!(!fs.files().contains(&victim));
        let r = DataDir::with_fs(Arc::new(fs.crash(3)), "/d", "/d").open_log(4096).unwrap();
        assert_eq!(
            r.1.iter().map(|(h, _)| h.zxid).collect::<Vec<_>>(),
            vec![3],
            "only what the purge and the cut left"
        );
    }
}
