//! ZooKeeper's tree digest (3.6+, `zookeeper.digest.enabled`, on by default): every node outside
//! `/zookeeper/` has a 32-bit CRC of its path, data and persisted Stat (`DigestCalculator`), and
//! the tree's digest is the 64-bit wrapping sum of them (`AdHash`), kept up to date as nodes
//! change (`NodeHashMapImpl`). Servers that applied the same txns hold the same digest, so
//! ZooKeeper sends it with each txn (`TxnDigest`), writes it into snapshots (`ZxidDigest`) and
//! keeps a history of it for the `hash` admin command.
//!
//! Warden computes the same value: a Warden and a ZooKeeper server at the same zxid report the
//! same digest, and each can check the other's.

use warden_proto::StatPersisted;

use crate::znode::Znode;

/// `DigestCalculator.DIGEST_VERSION` of ZooKeeper 3.6 - 3.9: a digest of another version is not
/// compared.
pub const DIGEST_VERSION: i32 = 2;
/// `DataTree.DIGEST_LOG_INTERVAL`: the history records the digest after every txn whose zxid is
/// a multiple of it.
pub const DIGEST_LOG_INTERVAL: i64 = 128;
/// `DataTree.DIGEST_LOG_LIMIT`: how many digests the history keeps.
pub const DIGEST_LOG_LIMIT: usize = 1024;

/// The nodes ZooKeeper leaves out of the digest (its quota bookkeeping is updated locally).
const EXCLUDED_SUBTREE: &str = "/zookeeper/";

/// A tree digest and the zxid it was taken after (`DataTree.ZxidDigest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZxidDigest {
    pub zxid: i64,
    pub version: i32,
    pub digest: i64,
}

/// The digest bookkeeping a `DataTree` carries. Small, as the tree is moved by value: what is
/// rarely written sits behind an `Arc` (a clone of the tree shares it).
#[derive(Debug, Clone, Default)]
pub(crate) struct DigestState {
    /// The sum of the node digests (`AdHash`).
    pub(crate) sum: i64,
    /// Digests that differed from the tree's (`digest_mismatches_count`).
    pub(crate) mismatches: u64,
    pub(crate) history: std::sync::Arc<History>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    /// Every `DIGEST_LOG_INTERVAL`-th zxid's digest, the newest last, at most `DIGEST_LOG_LIMIT`.
    pub(crate) log: std::collections::VecDeque<ZxidDigest>,
    /// A loaded snapshot's digest not yet compared: the snapshot was fuzzy, and the tree matches
    /// it once the txns up to its zxid are replayed (`digestFromLoadedSnapshot`). Nothing is
    /// logged or compared meanwhile.
    pub(crate) awaited: Option<ZxidDigest>,
}

impl DigestState {
    /// Compares `expected` with the tree's digest; a mismatch is counted. A digest of another
    /// version is not compared.
    pub(crate) fn compare(&mut self, expected: ZxidDigest) -> bool {
        if expected.version != DIGEST_VERSION || expected.digest == self.sum {
            return true;
        }
        self.mismatches += 1;
        false
    }

    pub(crate) fn awaited(&self) -> Option<ZxidDigest> {
        self.history.awaited
    }

    pub(crate) fn set_awaited(&mut self, d: Option<ZxidDigest>) {
        std::sync::Arc::make_mut(&mut self.history).awaited = d;
    }

    /// After applying the txn at `zxid`: settles an awaited snapshot digest, else records the
    /// digest in the history when `zxid` is one of its multiples.
    pub(crate) fn applied(&mut self, zxid: i64) {
        if let Some(awaited) = self.awaited() {
            if zxid >= awaited.zxid {
                self.set_awaited(None);
                if zxid == awaited.zxid {
                    self.compare(awaited);
                }
            }
            return;
        }
        if zxid % DIGEST_LOG_INTERVAL == 0 {
            let d = ZxidDigest { zxid, version: DIGEST_VERSION, digest: self.sum };
            let log = &mut std::sync::Arc::make_mut(&mut self.history).log;
            log.push_back(d);
            if log.len() > DIGEST_LOG_LIMIT {
                log.pop_front();
            }
        }
    }
}

/// CRC32 of a node's path and data as `DigestCalculator` feeds them (the root's path is "", as
/// in ZooKeeper's node map; a null buffer adds nothing), 0 for a node the digest leaves out: the
/// part of the node's digest a Stat change leaves alone (`Znode::data_crc`).
pub(crate) fn data_crc(path: &str, data: Option<&[u8]>) -> u32 {
    if path.starts_with(EXCLUDED_SUBTREE) {
        return 0;
    }
    let mut h = crc32fast::Hasher::new();
    if path != "/" {
        h.update(path.as_bytes());
    }
    if let Some(d) = data {
        h.update(d);
    }
    h.finalize()
}

/// A node's digest (`DigestCalculator.calculateDigest`) from its `data_crc`: the CRC continued
/// over the Stat fields, big-endian; 0 for a node the digest leaves out.
pub(crate) fn digest_with(path: &str, data_crc: u32, stat: &StatPersisted) -> i64 {
    if path.starts_with(EXCLUDED_SUBTREE) {
        return 0;
    }
    let mut b = [0u8; 60];
    let longs = [stat.czxid, stat.mzxid, stat.pzxid, stat.ctime, stat.mtime];
    for (i, v) in longs.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
    }
    for (i, v) in [stat.version, stat.cversion, stat.aversion].iter().enumerate() {
        b[40 + i * 4..44 + i * 4].copy_from_slice(&v.to_be_bytes());
    }
    b[52..60].copy_from_slice(&stat.ephemeral_owner.to_be_bytes());
    let mut h = crc32fast::Hasher::new_with_initial(data_crc);
    h.update(&b);
    i64::from(h.finalize())
}

impl Znode {
    /// For a node entering the tree at `path`: computes and keeps its data CRC and digest, and
    /// returns the digest.
    pub(crate) fn seal_digest(&mut self, path: &str) -> i64 {
        self.data_crc = data_crc(path, self.data.as_deref());
        self.restat_digest(path).1
    }

    /// After a change of the Stat alone: recomputes the kept digest; returns (old, new).
    pub(crate) fn restat_digest(&mut self, path: &str) -> (i64, i64) {
        let old = i64::from(self.digest);
        let new = digest_with(path, self.data_crc, &self.stat);
        self.digest = u32::try_from(new).expect("a digest is a CRC32");
        (old, new)
    }

    /// After a change of the data (and the Stat): recomputes the kept CRC and digest; returns
    /// (old, new).
    pub(crate) fn redata_digest(&mut self, path: &str) -> (i64, i64) {
        self.data_crc = data_crc(path, self.data.as_deref());
        self.restat_digest(path)
    }
}

impl DigestState {
    /// Replaces a node's old digest by its new one in the sum.
    pub(crate) fn replace(&mut self, (old, new): (i64, i64)) {
        self.sum = self.sum.wrapping_sub(old).wrapping_add(new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_digest(path: &str, data: Option<&[u8]>, stat: &StatPersisted) -> i64 {
        digest_with(path, data_crc(path, data), stat)
    }

    /// Values computed with `java.util.zip.CRC32` the way `DigestCalculator` feeds it.
    #[test]
    fn node_digest_is_zookeepers_crc() {
        let zero = StatPersisted::default();
        // The root: "" then 60 zero bytes.
        assert_eq!(node_digest("/", Some(&[]), &zero), i64::from(crc32fast::hash(&[0u8; 60])));
        // The path, the data, then the Stat; a null buffer hashes as an empty one.
        let stat = StatPersisted {
            czxid: 0x1_0000_0002,
            mzxid: 0x1_0000_0003,
            pzxid: 0x1_0000_0002,
            ctime: 1_700_000_000_000,
            mtime: 1_700_000_000_500,
            version: 1,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0x0100_0000_0000_0001,
        };
        let mut bytes = b"/app".to_vec();
        bytes.extend_from_slice(b"hello");
        for v in [stat.czxid, stat.mzxid, stat.pzxid, stat.ctime, stat.mtime] {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
        for v in [stat.version, stat.cversion, stat.aversion] {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
        bytes.extend_from_slice(&stat.ephemeral_owner.to_be_bytes());
        assert_eq!(node_digest("/app", Some(b"hello"), &stat), i64::from(crc32fast::hash(&bytes)));
        assert_eq!(node_digest("/app", None, &zero), node_digest("/app", Some(&[]), &zero));
        // `/zookeeper` itself counts; what is under it does not.
        assert_ne!(node_digest("/zookeeper", Some(&[]), &zero), 0);
        assert_eq!(node_digest("/zookeeper/quota", Some(&[]), &zero), 0);
    }

    #[test]
    fn history_keeps_every_128th_zxid_up_to_its_limit() {
        let mut s = DigestState::default();
        for zxid in 1..=(DIGEST_LOG_INTERVAL * (DIGEST_LOG_LIMIT as i64 + 5)) {
            s.sum = zxid * 3;
            s.applied(zxid);
        }
        let log = &s.history.log;
        assert_eq!(log.len(), DIGEST_LOG_LIMIT);
        assert_eq!(log.front().unwrap().zxid, 6 * DIGEST_LOG_INTERVAL);
        let last = *log.back().unwrap();
        assert_eq!((last.zxid, last.digest), (DIGEST_LOG_INTERVAL * 1029, DIGEST_LOG_INTERVAL * 1029 * 3));
    }

    #[test]
    fn an_awaited_snapshot_digest_is_compared_at_its_zxid_and_nothing_is_logged_before() {
        let mut s = DigestState { sum: 7, ..Default::default() };
        s.set_awaited(Some(ZxidDigest { zxid: 256, version: DIGEST_VERSION, digest: 8 }));
        s.applied(128);
        assert!(s.history.log.is_empty() && s.awaited().is_some());
        s.applied(256);
        assert_eq!((s.mismatches, s.awaited()), (1, None));
        s.applied(384);
        assert_eq!(s.history.log.len(), 1);
        // Another digest version is not compared.
        assert!(s.compare(ZxidDigest { zxid: 385, version: 1, digest: 0 }));
        assert_eq!(s.mismatches, 1);
    }
}
