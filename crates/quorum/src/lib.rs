//! Replication for Warden, as pure state machines: inputs in, actions out (no socket, file, thread
//! or clock; the pure-crate invariant in ARCHITECTURE.md).
//!
//! So far: ZooKeeper's Fast Leader Election ([`FastLeaderElection`]), wire-compatible with Apache
//! ZooKeeper 3.8 peers through [`warden_proto::election::Notification`]. The machine never reads a
//! clock, sleeps, or touches a socket: the shell passes `now_ms` into every input, carries out the
//! returned [`ElectionAction`]s, and calls [`FastLeaderElection::tick`] when
//! [`FastLeaderElection::next_deadline_ms`] is due.
//!
//! ZAB ([`zab`]): the leader and learner machines for discovery (FOLLOWERINFO/LEADERINFO/ACKEPOCH),
//! synchronisation (DIFF/TRUNC/SNAP, NEWLEADER, UPTODATE) and broadcast (PROPOSAL/ACK/COMMIT, INFORM
//! to observers), with the transport contract the shell must keep documented there.
//!
//! The server runs both over real sockets (`warden_server::election`, `warden_server::quorum_net`,
//! `warden_server::ensemble`). Absent (later work): dynamic reconfiguration (configs inside notifications are carried, not interpreted);
//! hierarchical (weighted) quorums and the two-node oracle.

pub mod action;
pub mod candidate;
pub mod config;
pub mod election;
pub mod vote;
pub mod zab;

pub use action::{Elected, ElectionAction};
pub use candidate::Candidate;
pub use config::QuorumConfig;
pub use election::{FastLeaderElection, FINALIZE_WAIT_MS, MAX_NOTIFICATION_INTERVAL_MS, MIN_NOTIFICATION_INTERVAL_MS};
pub use vote::Vote;
pub use warden_proto::election::{Notification, ServerState};

/// A server id (`myid`), a Java long as on the wire.
pub type Sid = i64;
