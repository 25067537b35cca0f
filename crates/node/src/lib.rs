//! One Warden server as a pure state machine: sessions and their expiry buckets, the request pipeline
//! (prep, persist, apply, reply), per-session ordering and watch delivery.
//!
//! The shell feeds [`Input`]s with the current [`Clock`] and carries out the [`Output`]s. Nothing here
//! touches a socket, a file, a thread or the clock. The only way a txn gets applied is an
//! `Input::Durable` that the storage side produces after the txn is safe.

mod conn;
mod node;
mod read_only;
mod reads;
mod roles;
mod sasl;
pub mod session;
mod stats;
mod writes;

pub use node::{Clock, ConnId, Input, Node, NodeConfig, Output, RestoreRefused, EXPIRY_BATCH};
pub use reads::digest_identities;
pub use roles::{QuorumOutput, QuorumSetup, RoleKind, SnapshotData};
pub use sasl::SaslOutcome;
pub use stats::{ConnInfo, Counters, LatencyKind, NamespaceSizes, NodeStats, ResponseSizes, Summaries, Summary};
#[cfg(test)]
mod tests;
