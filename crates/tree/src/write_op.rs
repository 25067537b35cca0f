//! The input of `Prep`: a write request, already decoded, plus the caller's context.

use bytes::Bytes;
use warden_proto::{Acl, Id};

/// Which create opcode carried the request; the node type itself comes from `flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateKind {
    /// create (1) or create2 (15): no TTL.
    Regular,
    /// createContainer (19).
    Container,
    /// createTTL (21) with its TTL in milliseconds.
    Ttl(i64),
}

/// A write as `Prep` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// create / create2 / createContainer / createTTL.
    Create { path: String, data: Option<Vec<u8>>, acl: Vec<Acl>, flags: i32, kind: CreateKind },
    /// delete (2); `version` -1 = any.
    Delete { path: String, version: i32 },
    /// deleteContainer (20), issued by the container manager.
    DeleteContainer { path: String },
    /// setData (5).
    SetData { path: String, data: Option<Bytes>, version: i32 },
    /// setACL (7); `version` is the expected aversion.
    SetAcl { path: String, acl: Vec<Acl>, version: i32 },
    /// check (13), inside a multi.
    Check { path: String, version: i32 },
    /// multi (14).
    Multi(Vec<WriteOp>),
}

/// Who is writing and what the server allows.
#[derive(Debug, Clone, Copy)]
pub struct PrepContext<'a> {
    /// The session issuing the write (owner of ephemerals it creates).
    pub session_id: i64,
    /// The connection's auth ids, including the implicit `ip` id and possibly `super`.
    pub auth_ids: &'a [Id],
    /// `extendedTypesEnabled`: TTL nodes allowed.
    pub ttl_enabled: bool,
    /// False for a local session that could not be upgraded (ephemeral create fails with -120).
    pub is_ephemeral_allowed: bool,
    /// `SASLAuthenticationProvider` is registered: `sasl` ACL ids are valid.
    pub sasl_provider: bool,
}

/// The node type a CreateMode flag value denotes (ZooKeeper's `CreateMode.fromFlag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CreateMode {
    /// Owned by the session.
    pub ephemeral: bool,
    /// Gets a `%010d` suffix.
    pub sequential: bool,
    /// Container node.
    pub container: bool,
    /// TTL node.
    pub ttl: bool,
}

impl CreateMode {
    /// Decodes flags 0..=6; anything else is `None` (BadArguments).
    pub fn from_flags(flags: i32) -> Option<Self> {
        let m = CreateMode::default();
        Some(match flags {
            0 => m,
            1 => CreateMode { ephemeral: true, ..m },
            2 => CreateMode { sequential: true, ..m },
            3 => CreateMode { ephemeral: true, sequential: true, ..m },
            4 => CreateMode { container: true, ..m },
            5 => CreateMode { ttl: true, ..m },
            6 => CreateMode { ttl: true, sequential: true, ..m },
            _ => return None,
        })
    }
}
