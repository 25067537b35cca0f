use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why a storage operation failed.
#[derive(Debug, Error)]
pub enum StorageError {
    /// An I/O call failed; `op` says what was being done to `path`.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file holds data that cannot be trusted or understood. Never skipped silently.
    #[error("corrupt txn log {} at offset {offset}: {reason}", file.display())]
    Corrupt { file: PathBuf, offset: u64, reason: String },
    /// A snapshot file is damaged or not a snapshot (bad magic, checksum, truncated, ...).
    #[error("corrupt snapshot {}: {reason}", file.display())]
    CorruptSnapshot { file: PathBuf, reason: String },
    /// Snapshots exist but none of the newest could be read.
    #[error("no valid snapshot in {}: {reason}", dir.display())]
    NoValidSnapshot { dir: PathBuf, reason: String },
    /// `append` was given a zxid not above the last logged one.
    #[error("txn zxid {zxid:#x} is not after the last logged zxid {last:#x}")]
    OutOfOrder { zxid: i64, last: i64 },
}

impl StorageError {
    /// The error for a failed `op` on `path`. The path is copied only if the error happens: the
    /// log's writes build this on every record.
    pub(crate) fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Self + 'a {
        move |source| StorageError::Io { op, path: path.to_path_buf(), source }
    }
}
