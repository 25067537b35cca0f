//! Durable storage in ZooKeeper's on-disk formats (`FileTxnLog`, `FileSnap`): the transaction log
//! (`dataLogDir/version-2/log.<hex zxid>`), snapshots (`dataDir/version-2/snapshot.<hex zxid>`),
//! start-up recovery and purging, all with synchronous I/O. Callers run it on a dedicated thread.
//!
//! Everything done to a server's data directories goes through one handle, `DataDir`: `dataDir`
//! (snapshots, epoch files) and `dataLogDir` (the txn log, possibly another directory) on one file
//! system, `DataDir::real` for std::fs or `DataDir::with_fs` for any `Fs`, such as the crash- and
//! fault-injecting `FaultFs`. Its methods recover (`recover`), open the log (`open_log`,
//! `open_log_after`), read and write epoch files (`read_epoch`, `read_epochs`, `write_epoch`),
//! write, find and purge snapshots (`write_snapshot`, `find_valid_snapshots`, `purge`), and read a
//! zxid range of the log for a leader's DIFF from disk (`probe_log`, `read_log_range`). `Store`
//! holds a `DataDir` and the open log. The two readers of a single file, which tools use on any
//! path, take the file system as an argument instead: `read_snapshot(fs, path)` and
//! `read_log_file(fs, path)`.

mod data_dir;
mod epoch;
mod error;
mod fs;
mod log_format;
mod log_range;
mod recover;
mod snapshot;
mod store;
mod txn_log;

pub use data_dir::DataDir;
pub use epoch::EpochFile;
pub use error::StorageError;
pub use fs::{FaultFs, Fs, FsFile, RealFs};
pub use log_format::{parse_log_file, read_log_file, LogFileContents, LOG_FILE_MAGIC, LOG_FILE_VERSION, RECORD_END};
pub use log_range::{LogProbeFacts, LogRange};
pub use recover::Recovered;
pub use snapshot::{
    decode_snapshot, decode_snapshot_stream, decompress, encode_snap_sync, encode_snapshot,
    encode_snapshot_with_last_zxid, read_snapshot, snapshot_file_name, Compression, Snapshot, SnapshotBody,
    SnapshotBodyDecoder, SnapshotOptions, StreamSnapshot, OPEN_ACL_KEY, SNAPSHOTS_TRIED, SNAP_DB_ID, SNAP_FILE_MAGIC,
    SNAP_FILE_VERSION, SNAP_SYNC_SIGNATURE,
};
pub use store::{Reloaded, Report, Store, StoreOp};
pub use txn_log::{log_file_name, TxnLog, DEFAULT_PRE_ALLOC_BYTES};
