//! Durable storage in ZooKeeper's on-disk formats (reference section 16). This first slice is the
//! transaction log: `dataLogDir/version-2/log.<hex zxid>`, written and read with synchronous
//! `std::fs` I/O. Callers run it on a dedicated thread.

mod error;
mod log_format;
mod txn_log;

pub use error::StorageError;
pub use log_format::{LOG_FILE_MAGIC, LOG_FILE_VERSION, RECORD_END};
pub use txn_log::{log_file_name, TxnLog, DEFAULT_PRE_ALLOC_BYTES};
