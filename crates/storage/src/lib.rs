//! Durable storage in ZooKeeper's on-disk formats (reference section 16): the transaction log
//! (`dataLogDir/version-2/log.<hex zxid>`), snapshots (`dataDir/version-2/snapshot.<hex zxid>`),
//! start-up recovery and purging, all with synchronous `std::fs` I/O. Callers run it on a
//! dedicated thread.

mod error;
mod log_format;
mod recover;
mod snapshot;
mod txn_log;

pub use error::StorageError;
pub use log_format::{read_log_file, LogFileContents, LOG_FILE_MAGIC, LOG_FILE_VERSION, RECORD_END};
pub use recover::{purge, recover, Recovered};
pub use snapshot::{
    decode_snapshot, encode_snapshot, find_valid_snapshots, read_snapshot, snapshot_file_name, write_snapshot,
    write_snapshot_with, Compression, Snapshot, SnapshotDigest, DIGEST_VERSION, OPEN_ACL_KEY, SNAPSHOTS_TRIED,
    SNAP_DB_ID, SNAP_FILE_MAGIC, SNAP_FILE_VERSION,
};
pub use txn_log::{log_file_name, TxnLog, DEFAULT_PRE_ALLOC_BYTES};
