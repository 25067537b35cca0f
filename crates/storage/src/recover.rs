//! Start-up recovery (newest valid snapshot, then the txn log) and purging of old files, as
//! ZooKeeper's `FileTxnSnapLog.restore` and `PurgeTxnLog` do.
//!
//! Recovery removes `.snapshot.*.tmp` leftovers, loads the newest snapshot whose checksums verify
//! (up to 3 tried; if snapshot files exist and none loads, it stops rather than replay the log onto
//! an empty tree), then every log txn after it. A zxid gap within an epoch (a missing log segment)
//! stops the server with the file and zxid. A torn last record of the newest log (short, or with an
//! unwritten all-zero sector) is truncated with a warning, while a last record written in full that
//! fails its checksum is refused like any other damage, since it may have been acknowledged.

use std::path::{Path, PathBuf};

use warden_proto::{Txn, TxnHeader};
use warden_tree::{DataTree, TxnResult};

use crate::fs::Fs;
use crate::snapshot::{read_snapshot, snapshot_files, sync_dir, zxid_from_name, SNAPSHOTS_TRIED};
use crate::{DataDir, StorageError, TxnLog};

/// A snapshot loaded into a tree.
struct LoadedSnapshot {
    file: PathBuf,
    tree: DataTree,
    sessions: Vec<(i64, i32)>,
    zxid: i64,
}

/// Applies the log txns after the snapshot to its tree and sessions. Txns that no longer fit
/// (over a fuzzy snapshot) change nothing, as in ZooKeeper.
fn replay(tree: &mut DataTree, sessions: &mut Vec<(i64, i32)>, txns: &[(TxnHeader, Txn)]) {
    for (hdr, txn) in txns {
        let out = tree.apply(hdr, txn);
        if let TxnResult::Error(code) = out.result {
            tracing::debug!(zxid = hdr.zxid, ?code, "replayed txn did not apply (expected over a fuzzy snapshot)");
        }
        track_sessions(sessions, hdr, txn);
    }
}

/// What `DataDir::recover` rebuilt.
#[derive(Debug)]
pub struct Recovered {
    /// The tree: snapshot plus every log txn after it; `last_processed_zxid` is the last zxid.
    pub tree: DataTree,
    /// Live sessions (id, timeout ms): the snapshot's, updated by the replayed createSession and
    /// closeSession txns.
    pub sessions: Vec<(i64, i32)>,
    /// The snapshot loaded, if any.
    pub snapshot: Option<PathBuf>,
    /// The zxid of that snapshot (0 without one).
    pub snapshot_zxid: i64,
    /// The log txns with zxid above `snapshot_zxid`, in order, already applied to `tree`.
    pub txns_after_snapshot: Vec<(TxnHeader, Txn)>,
    /// The open txn log, ready for appends.
    pub log: TxnLog,
    /// How long loading the snapshot took, and reading and replaying the log after it
    /// (ZooKeeper's `startup_snap_load_time`, `startup_txns_load_time`).
    pub snapshot_load_time: std::time::Duration,
    pub txns_load_time: std::time::Duration,
}

impl DataDir {
    /// Loads the newest snapshot of `<dataDir>/version-2` whose checksums verify (a damaged newest
    /// one is skipped with a warning; up to `SNAPSHOTS_TRIED` are tried), then opens the txn log
    /// of `<dataLogDir>/version-2` and replays the txns with zxid > the snapshot's zxid. Replay
    /// tolerates txns that no longer fit (NodeExists, NoNode, ...), as ZooKeeper's does over its
    /// fuzzy snapshots: `DataTree::apply` reports them and changes nothing. With no snapshot the
    /// whole log is replayed onto a fresh tree. The returned log keeps using this file system.
    pub fn recover(&self, pre_alloc_bytes: u64) -> Result<Recovered, StorageError> {
        remove_unfinished_snapshots(self.fs(), &self.snap_dir());
        let started = std::time::Instant::now();
        let (snapshot, mut tree, mut sessions, snapshot_zxid) = match self.load_newest_snapshot()? {
            Some(loaded) => (Some(loaded.file), loaded.tree, loaded.sessions, loaded.zxid),
            None => (None, DataTree::new(), Vec::new(), 0),
        };
        let snapshot_load_time = started.elapsed();
        let (log, txns_after_snapshot) = self.open_log_after(pre_alloc_bytes, snapshot_zxid)?;
        check_no_gap(log.dir(), snapshot_zxid, &txns_after_snapshot)?;
        replay(&mut tree, &mut sessions, &txns_after_snapshot);
        let txns_load_time = started.elapsed() - snapshot_load_time;
        Ok(Recovered {
            tree,
            sessions,
            snapshot,
            snapshot_zxid,
            txns_after_snapshot,
            log,
            snapshot_load_time,
            txns_load_time,
        })
    }

    /// The tree and sessions [`recover`](Self::recover) would rebuild, without changing anything
    /// on disk: no unfinished snapshot is removed, a torn record at the end of the newest log is
    /// left (the records before it are used), and no log is opened for writing. For tools that
    /// read a directory a server may be using (`warden data export`, `warden data diff`).
    pub fn load_read_only(&self) -> Result<(DataTree, Vec<(i64, i32)>), StorageError> {
        let (mut tree, mut sessions, snapshot_zxid) = match self.load_newest_snapshot()? {
            Some(loaded) => (loaded.tree, loaded.sessions, loaded.zxid),
            None => (DataTree::new(), Vec::new(), 0),
        };
        let log_dir = self.log_dir();
        let read = match self.fs().list_dir(&log_dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
            _ => crate::txn_log::read_logs_after(self.fs(), &log_dir, snapshot_zxid)?,
        };
        check_no_gap(&log_dir, snapshot_zxid, &read.txns)?;
        replay(&mut tree, &mut sessions, &read.txns);
        Ok((tree, sessions))
    }

    /// The newest snapshot that loads, of the newest `SNAPSHOTS_TRIED` that pass the quick check
    /// (a damaged one is skipped with a warning); `None` when there is no snapshot file. When
    /// snapshot files exist and none loads, an error: replaying the log onto an empty tree would
    /// silently drop what the snapshot held (purge may have removed those logs).
    fn load_newest_snapshot(&self) -> Result<Option<LoadedSnapshot>, StorageError> {
        let fs = self.fs();
        let mut failures = Vec::new();
        for path in self.find_valid_snapshots().iter().take(SNAPSHOTS_TRIED) {
            match read_snapshot(fs, path).and_then(|s| {
                let zxid = s.zxid;
                s.into_tree(path).map(|(tree, sessions)| (tree, sessions, zxid))
            }) {
                Ok((tree, sessions, zxid)) => {
                    return Ok(Some(LoadedSnapshot { file: path.clone(), tree, sessions, zxid }))
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "skipping unreadable snapshot");
                    failures.push(e.to_string());
                }
            }
        }
        let snap_dir = self.snap_dir();
        let all = snapshot_files(fs, &snap_dir);
        if all.is_empty() {
            return Ok(None);
        }
        let names = all.iter().map(|(_, p)| p.display().to_string()).collect::<Vec<_>>().join(", ");
        failures.push(format!("none of [{names}] is a complete snapshot"));
        Err(StorageError::NoValidSnapshot { dir: snap_dir, reason: failures.join("; ") })
    }

    /// Deletes old snapshots and logs like ZooKeeper's `PurgeTxnLog.purge`: keeps the newest
    /// `keep` valid snapshots (at least 3), every file named with a zxid at or above the oldest
    /// kept snapshot's, and the newest log file starting at or before it (it may hold the txns
    /// right after that snapshot). Returns the removed paths. Does nothing without a valid
    /// snapshot.
    pub fn purge(&self, keep: usize) -> Result<Vec<PathBuf>, StorageError> {
        let fs = self.fs();
        let keep = keep.max(3);
        let snaps = self.find_valid_snapshots();
        let Some(oldest_kept) = snaps.get(keep.min(snaps.len()).wrapping_sub(1)) else { return Ok(Vec::new()) };
        let name = oldest_kept.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(least) = zxid_from_name(name, "snapshot") else { return Ok(Vec::new()) };

        let log_dir = self.log_dir();
        let logs = log_files(fs, &log_dir);
        // FileTxnLog.getLogFiles: the newest log starting at or before `least` is retained.
        let retained_log = logs.iter().filter(|(z, _)| *z <= least).map(|(z, _)| *z).max();
        let mut doomed: Vec<PathBuf> =
            logs.into_iter().filter(|(z, _)| *z < least && Some(*z) != retained_log).map(|(_, p)| p).collect();
        let snap_dir = self.snap_dir();
        doomed.extend(snapshot_files(fs, &snap_dir).into_iter().filter(|(z, _)| *z < least).map(|(_, p)| p));
        for f in &doomed {
            tracing::info!(file = %f.display(), "purging");
            fs.remove_file(f).map_err(StorageError::io("remove", f))?;
        }
        if !doomed.is_empty() {
            sync_dir(fs, &snap_dir)?;
            if log_dir != snap_dir {
                sync_dir(fs, &log_dir)?;
            }
        }
        Ok(doomed)
    }
}

/// Within an epoch zxids are consecutive: every zxid is logged (failed requests as error txns).
/// A jump after the snapshot (or after zxid 0 without one) means txns are missing, for example a
/// lost or purged log file: replaying past it would silently build the wrong tree.
fn check_no_gap(log_dir: &Path, snapshot_zxid: i64, txns: &[(TxnHeader, Txn)]) -> Result<(), StorageError> {
    let mut prev = snapshot_zxid;
    for (h, _) in txns {
        if h.zxid >> 32 == prev >> 32 && h.zxid != prev + 1 {
            return Err(StorageError::Corrupt {
                file: log_dir.to_path_buf(),
                offset: 0,
                reason: format!(
                    "txns {:#x}..{:#x} are missing: the log jumps from {prev:#x} (snapshot at {snapshot_zxid:#x}) to {:#x}",
                    prev + 1,
                    h.zxid - 1,
                    h.zxid
                ),
            });
        }
        prev = h.zxid;
    }
    Ok(())
}

/// `FileTxnSnapLog.processTransaction`'s session bookkeeping.
fn track_sessions(sessions: &mut Vec<(i64, i32)>, hdr: &TxnHeader, txn: &Txn) {
    match txn {
        Txn::CreateSession { timeout_ms } => {
            sessions.retain(|(id, _)| *id != hdr.client_id);
            sessions.push((hdr.client_id, *timeout_ms));
        }
        Txn::CloseSession { .. } => sessions.retain(|(id, _)| *id != hdr.client_id),
        _ => {}
    }
}

/// `log.<hex>` files of `dir` with their zxids.
fn log_files(fs: &dyn Fs, dir: &Path) -> Vec<(i64, PathBuf)> {
    let Ok(names) = fs.list_dir(dir) else { return Vec::new() };
    names.into_iter().filter_map(|name| Some((zxid_from_name(&name, "log")?, dir.join(name)))).collect()
}

/// Deletes `.snapshot.<zxid>.tmp` files left by a crash during a snapshot: they were never renamed, so
/// nothing refers to them, and they would pile up with every such crash.
fn remove_unfinished_snapshots(fs: &dyn Fs, dir: &Path) {
    let Ok(names) = fs.list_dir(dir) else { return };
    for name in names {
        if name.starts_with(".snapshot.") && name.ends_with(".tmp") {
            let path = dir.join(&name);
            match fs.remove_file(&path) {
                Ok(()) => tracing::info!(file = %path.display(), "removed an unfinished snapshot"),
                Err(e) => tracing::warn!(file = %path.display(), error = %e, "cannot remove an unfinished snapshot"),
            }
        }
    }
}
