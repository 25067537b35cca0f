//! `DataDir`: one server's data directories on one file system, the handle every operation on
//! them goes through. ZooKeeper keeps snapshots and epoch files in `dataDir` and the txn log in
//! `dataLogDir`, which defaults to `dataDir` but may be another directory (another disk); both
//! hold their files in a `version-2` subdirectory.
//!
//! The operations are implemented next to the formats they read and write: epoch files
//! (`read_epoch`, `write_epoch`, `read_epochs`) in `epoch.rs`, snapshots (`write_snapshot`,
//! `find_valid_snapshots`) in `snapshot.rs`, the txn log (`open_log`, `open_log_after`) in
//! `txn_log.rs`, and `recover` and `purge` in `recover.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::fs::{Fs, RealFs};

/// A server's `dataDir` and `dataLogDir` on a file system: `RealFs` for a server, `FaultFs` for
/// the simulator and tests. Cloning it is cheap; clones share the file system.
#[derive(Debug, Clone)]
pub struct DataDir {
    fs: Arc<dyn Fs>,
    data_dir: PathBuf,
    data_log_dir: PathBuf,
}

impl DataDir {
    /// The directories on the real file system (std::fs).
    pub fn real(data_dir: impl Into<PathBuf>, data_log_dir: impl Into<PathBuf>) -> DataDir {
        DataDir::with_fs(Arc::new(RealFs), data_dir, data_log_dir)
    }

    /// The directories on the file system `fs`; a log opened through it keeps using `fs`.
    pub fn with_fs(fs: Arc<dyn Fs>, data_dir: impl Into<PathBuf>, data_log_dir: impl Into<PathBuf>) -> DataDir {
        DataDir { fs, data_dir: data_dir.into(), data_log_dir: data_log_dir.into() }
    }

    /// The file system the directories are on.
    pub fn fs(&self) -> &dyn Fs {
        &*self.fs
    }

    /// `dataDir`: snapshots and epoch files (in its `version-2`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// `dataLogDir`: the txn log (in its `version-2`).
    pub fn data_log_dir(&self) -> &Path {
        &self.data_log_dir
    }

    /// `<dataDir>/version-2`, where snapshots and epoch files are.
    pub(crate) fn snap_dir(&self) -> PathBuf {
        self.data_dir.join("version-2")
    }

    /// `<dataLogDir>/version-2`, where the log files are.
    pub(crate) fn log_dir(&self) -> PathBuf {
        self.data_log_dir.join("version-2")
    }

    /// A shared handle on the file system, for a log that outlives this borrow.
    pub(crate) fn shared_fs(&self) -> Arc<dyn Fs> {
        self.fs.clone()
    }
}
