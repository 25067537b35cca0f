//! Durable storage in ZooKeeper's on-disk formats (`FileTxnLog`, `FileSnap`): the transaction log
//! (`dataLogDir/version-2/log.<hex zxid>`), snapshots (`dataDir/version-2/snapshot.<hex zxid>`),
//! start-up recovery and purging, all with synchronous I/O. Callers run it on a dedicated thread.
//! File access goes through the `Fs` trait: the plain functions use `RealFs` (std::fs), the
//! `_with_fs` variants take any `Fs`, such as the crash- and fault-injecting `FaultFs`.

mod epoch;
mod error;
mod fs;
mod log_format;
mod recover;
mod snapshot;
mod store;
mod txn_log;

pub use epoch::{read_epoch, read_epoch_with_fs, write_epoch, write_epoch_with_fs, EpochFile};
pub use error::StorageError;
pub use fs::{FaultFs, Fs, FsFile, RealFs};
pub use log_format::{
    read_log_file, read_log_file_with_fs, LogFileContents, LOG_FILE_MAGIC, LOG_FILE_VERSION, RECORD_END,
};
pub use recover::{purge, purge_with_fs, recover, recover_with_fs, Recovered};
pub use snapshot::{
    decode_snapshot, encode_snap_sync, encode_snapshot, find_valid_snapshots, find_valid_snapshots_with_fs,
    read_snapshot, read_snapshot_with_fs, snapshot_file_name, write_snapshot, Compression, Snapshot, SnapshotBody,
    SnapshotBodyDecoder, SnapshotDigest, SnapshotOptions, DIGEST_VERSION, OPEN_ACL_KEY, SNAPSHOTS_TRIED, SNAP_DB_ID,
    SNAP_FILE_MAGIC, SNAP_FILE_VERSION, SNAP_SYNC_SIGNATURE,
};
pub use store::{read_epochs_with_fs, Reloaded, Report, Store, StoreOp};
pub use txn_log::{log_file_name, TxnLog, DEFAULT_PRE_ALLOC_BYTES};
