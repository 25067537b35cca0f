//! Records of ZooKeeper's `data` module (`zookeeper.jute`): Id, ACL, Stat, StatPersisted; and the
//! permission bits of `ZooDefs.Perms`.

use std::borrow::Cow;

use crate::jute::{DecodeError, Reader, Record, Writer};

/// Permission bits of an ACL entry.
pub mod perms {
    pub const READ: i32 = 1;
    pub const WRITE: i32 = 2;
    pub const CREATE: i32 = 4;
    pub const DELETE: i32 = 8;
    pub const ADMIN: i32 = 16;
    pub const ALL: i32 = 31;
}

/// An identity: scheme plus id, e.g. `world:anyone`, `digest:user:hash`, `ip:10.0.0.0/8`.
///
/// Decoding borrows the schemes ZooKeeper defines and the id `anyone` from static strings, so the
/// ACL of nearly every create (`world:anyone`), of every txn replayed from a log, costs no string
/// allocations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    pub scheme: Cow<'static, str>,
    pub id: Cow<'static, str>,
}

/// The schemes decoding borrows rather than allocates.
const KNOWN_SCHEMES: &[&str] = &["world", "digest", "ip", "auth", "sasl", "x509", "super"];
/// The ids decoding borrows rather than allocates.
const KNOWN_IDS: &[&str] = &["anyone"];

impl Id {
    pub fn new(scheme: impl Into<String>, id: impl Into<String>) -> Self {
        Self { scheme: Cow::Owned(scheme.into()), id: Cow::Owned(id.into()) }
    }

    pub fn anyone() -> Self {
        Self { scheme: Cow::Borrowed("world"), id: Cow::Borrowed("anyone") }
    }
}

impl Record for Id {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.scheme);
        w.write_ustring(&self.id);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { scheme: r.read_ustring_known(KNOWN_SCHEMES)?, id: r.read_ustring_known(KNOWN_IDS)? })
    }
}

/// One ACL entry: permission bits granted to an identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    pub perms: i32,
    pub id: Id,
}

impl Acl {
    pub fn new(perms: i32, id: Id) -> Self {
        Self { perms, id }
    }

    /// `OPEN_ACL_UNSAFE`: all permissions to world:anyone.
    pub fn open_unsafe() -> Vec<Acl> {
        vec![Acl::new(perms::ALL, Id::anyone())]
    }

    /// `READ_ACL_UNSAFE`: read permission to world:anyone.
    pub fn read_unsafe() -> Vec<Acl> {
        vec![Acl::new(perms::READ, Id::anyone())]
    }

    /// `CREATOR_ALL_ACL`: all permissions to the authenticated creator.
    pub fn creator_all() -> Vec<Acl> {
        vec![Acl::new(perms::ALL, Id::new("auth", ""))]
    }
}

impl Record for Acl {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.perms);
        self.id.encode(w);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { perms: r.read_i32()?, id: Id::decode(r)? })
    }
}

/// The Stat clients see (68 bytes on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Stat {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
    pub pzxid: i64,
}

impl Record for Stat {
    fn encode(&self, w: &mut Writer) {
        w.write_i64(self.czxid);
        w.write_i64(self.mzxid);
        w.write_i64(self.ctime);
        w.write_i64(self.mtime);
        w.write_i32(self.version);
        w.write_i32(self.cversion);
        w.write_i32(self.aversion);
        w.write_i64(self.ephemeral_owner);
        w.write_i32(self.data_length);
        w.write_i32(self.num_children);
        w.write_i64(self.pzxid);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            czxid: r.read_i64()?,
            mzxid: r.read_i64()?,
            ctime: r.read_i64()?,
            mtime: r.read_i64()?,
            version: r.read_i32()?,
            cversion: r.read_i32()?,
            aversion: r.read_i32()?,
            ephemeral_owner: r.read_i64()?,
            data_length: r.read_i32()?,
            num_children: r.read_i32()?,
            pzxid: r.read_i64()?,
        })
    }
}

/// The Stat as stored in snapshots: no dataLength or numChildren, and `cversion` is the persisted
/// counter of child creations (the client-visible cversion is derived, as in `DataNode.copyStat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct StatPersisted {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub pzxid: i64,
}

impl Record for StatPersisted {
    fn encode(&self, w: &mut Writer) {
        w.write_i64(self.czxid);
        w.write_i64(self.mzxid);
        w.write_i64(self.ctime);
        w.write_i64(self.mtime);
        w.write_i32(self.version);
        w.write_i32(self.cversion);
        w.write_i32(self.aversion);
        w.write_i64(self.ephemeral_owner);
        w.write_i64(self.pzxid);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            czxid: r.read_i64()?,
            mzxid: r.read_i64()?,
            ctime: r.read_i64()?,
            mtime: r.read_i64()?,
            version: r.read_i32()?,
            cversion: r.read_i32()?,
            aversion: r.read_i32()?,
            ephemeral_owner: r.read_i64()?,
            pzxid: r.read_i64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_68_bytes_and_round_trips() {
        let s = Stat {
            czxid: 1,
            mzxid: 2,
            ctime: 3,
            mtime: 4,
            version: 5,
            cversion: -6,
            aversion: 7,
            ephemeral_owner: i64::MIN,
            data_length: 9,
            num_children: 10,
            pzxid: 11,
        };
        let b = s.to_bytes();
        assert_eq!(b.len(), 68);
        assert_eq!(Stat::from_bytes(&b).unwrap(), s);
    }

    /// Known schemes and `anyone` decode as borrowed static strings; anything else is owned.
    #[test]
    fn known_ids_decode_without_allocating() {
        let anyone = Acl::from_bytes(&Acl::new(perms::ALL, Id::new("world", "anyone")).to_bytes()).unwrap();
        assert_eq!(anyone, Acl::open_unsafe()[0]);
        assert!(matches!((&anyone.id.scheme, &anyone.id.id), (Cow::Borrowed("world"), Cow::Borrowed("anyone"))));
        let digest = Id::from_bytes(&Id::new("digest", "u:h").to_bytes()).unwrap();
        assert!(matches!(digest.scheme, Cow::Borrowed("digest")));
        assert!(matches!(&digest.id, Cow::Owned(id) if id == "u:h"));
        let other = Id::from_bytes(&Id::new("worlds", "any").to_bytes()).unwrap();
        assert!(matches!((&other.scheme, &other.id), (Cow::Owned(_), Cow::Owned(_))));
        assert_eq!(other, Id::new("worlds", "any"));
        assert_eq!(Id::from_bytes(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).unwrap(), Id::new("", ""));
        assert!(Id::from_bytes(&[0, 0, 0, 1, 0xff, 0, 0, 0, 0]).is_err(), "not UTF-8");
    }
}
