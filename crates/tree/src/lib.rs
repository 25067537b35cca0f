//! Warden's znode tree: the `DataTree` with Stat bookkeeping, ephemerals, containers, TTL nodes
//! and quotas; `Prep`, which turns validated writes into txns against pending changes; ACL
//! checks; and the `WatchManager`.
//!
//! Pure: no I/O, clock, threads or randomness. Time arrives in txn headers and arguments.

pub mod acl;
pub(crate) mod acl_cache;
pub mod digest;
pub(crate) mod node_key;
pub mod outcome;
pub mod owner;
pub mod path;
pub mod prep;
pub mod quota;
pub mod snapshot;
pub mod stats_track;
pub mod tree;
pub mod watch;
pub(crate) mod watch_table;
pub mod watch_types;
pub mod write_op;
pub mod znode;

pub use acl::{check_acl, digest_id, fixup_acl, mask_digests_for_get_acl};
pub use digest::ZxidDigest;
pub use outcome::{ApplyOutcome, TreeEvent, TreeEventKind, TxnResult};
pub use path::{basename, parent, validate_path};
pub use prep::Prep;
pub use tree::DataTree;
pub use watch::{SetWatchesLists, WatchManager, WatchTableKind};
pub use watch_types::{AddWatchMode, FiredWatch, Triggered, WatchEventType, WatchSummary, WatcherType};
pub use write_op::{CreateKind, CreateMode, PrepContext, WriteOp};
pub use znode::{empty_acl, open_acl, read_acl, Znode};

/// The hasher of the maps on the per-request path (pending changes here; connections, sessions and
/// proposals in the node): ahash with fixed keys, much cheaper than the standard SipHash for short
/// keys and deterministic. The keys are server-assigned ids or paths of pending changes (a map
/// bounded by the requests in flight), so hash flooding has little to aim at.
pub type FastHash = std::hash::BuildHasherDefault<ahash::AHasher>;
