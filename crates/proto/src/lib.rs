//! ZooKeeper's wire vocabulary for Warden: jute encoding, records, opcodes, error codes and framing.
//!
//! Pure: no sockets, files, threads or clocks. Every decoder distrusts its input: lengths are bounded
//! before allocation, truncated input is `Incomplete`, never a panic.

pub mod data;
pub mod error;
pub mod jute;
pub mod opcode;
pub mod txn;

pub use data::{perms, Acl, Id, Stat, StatPersisted};
pub use error::ErrorCode;
pub use jute::{DecodeError, Reader, Record, Writer};
pub use opcode::{xid, OpCode};
pub use txn::{Txn, TxnHeader};
