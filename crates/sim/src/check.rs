//! The invariants, checked after every event (the rules ZooKeeper's replication bugs imply; the
//! ZOOKEEPER JIRA ids are on `Scenario` in `faults.rs`).
//!
//! The checker follows each server's log as the simulator sees it (every `Persist`, TRUNC,
//! installed snapshot, and what a restart recovered) and compares servers through shared maps:
//!
//! - one txn per zxid across the whole run (two different txns with one zxid mean two
//!   proposers in one epoch);
//! - at most one established leader per epoch;
//! - a server's applied zxid never goes back, except when it reloads from disk (restart, TRUNC
//!   below its tree) or installs a leader's snapshot;
//! - equal applied zxid implies equal tree digest (`DataTree::digest`);
//! - "visible" txns (applied by a server while it served clients) form one history: every server
//!   that applied past a visible zxid holds that txn, and a leader, when it becomes established,
//!   holds every visible txn (so committed prefixes agree and nothing served is ever rolled back,
//!   the ZOOKEEPER-3911 rule);
//! - every write acknowledged to a client is visible, and its effect (a persistent node with that
//!   czxid, a data version at least the acknowledged one) is in the tree of every server that
//!   applied past it, and of the final leader;
//! - no ephemeral node outlives its session on any server;
//! - each machine's own `check_invariants` (node, tree, sessions, ZAB, FLE) after each step.
//!
//! Client-side invariants (replies FIFO per session, read-your-writes, sync then read, a watch
//! fires once and never before its change is visible) are checked in `client.rs`.

use std::collections::{BTreeMap, BTreeSet};

use warden_node::{Node, RoleKind};
use warden_proto::{Txn, TxnHeader, Writer};
use warden_quorum::Sid;
use warden_tree::DataTree;

/// A short stable hash of a txn (header and body) to compare logs.
pub(crate) fn fingerprint(hdr: &TxnHeader, txn: &Txn) -> u64 {
    let mut w = Writer::new();
    warden_proto::Record::encode(hdr, &mut w);
    txn.encode_body(&mut w);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in w.into_inner() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// An acknowledged write and what it must leave in the tree.
#[derive(Debug, Clone)]
pub(crate) enum Acked {
    Create {
        path: String,
    },
    SetData {
        path: String,
        version: i32,
    },
    /// A fuzz script's write (`crate::fuzz`): scripts delete and recreate nodes, so only its
    /// zxid is checked (visible when acknowledged, held by every new and the final leader).
    Write,
}

#[derive(Debug, Default)]
struct Track {
    /// The server's history: its log as persisted, plus what a snapshot from a leader stood for.
    log: BTreeMap<i64, u64>,
    applied: i64,
    /// Applied moved for a reason other than applying (reload, snapshot): skip the monotonic check.
    reset: bool,
    /// Visible and acknowledged txns checked up to this zxid.
    verified: i64,
    established: bool,
    /// The history each local snapshot stood for, by its zxid: a restart from one recovers that
    /// history even when a TRUNC had since dropped part of it from `log` without the cut ever
    /// reaching the disk.
    snapshots: BTreeMap<i64, BTreeMap<i64, u64>>,
}

#[derive(Debug, Default)]
pub(crate) struct Checker {
    txns: BTreeMap<i64, u64>,
    digests: BTreeMap<i64, (u64, Sid)>,
    leaders: BTreeMap<i64, Sid>,
    tracks: BTreeMap<Sid, Track>,
    visible: BTreeSet<i64>,
    acked: BTreeMap<i64, Acked>,
    /// Latest acknowledged data version per path (for sync-then-read checks).
    versions: BTreeMap<String, i32>,
    /// Every configuration any server made active or a client saw acknowledged, by version.
    configs: BTreeMap<i64, String>,
    /// The highest version of an acknowledged reconfig.
    acked_config: i64,
}

impl Checker {
    /// At most one configuration per version: every server that activates version `v`, and
    /// the client whose reconfig made it, see the same members. (A server may go back to an
    /// older version: a learner that applied an uncommitted reconfig from its log on a role
    /// change reverts when the new leader's TRUNC reloads its data.)
    pub(crate) fn config_activated(&mut self, sid: Sid, inc: u64, m: &warden_proto::Membership) -> Result<(), String> {
        self.one_config_per_version(m.version, m.to_text(), &format!("server {sid} (inc {inc})"))
    }

    /// A client's reconfig was acknowledged with `text` at `zxid`: a committed change.
    pub(crate) fn reconfig_acked(&mut self, zxid: i64, text: &str) -> Result<(), String> {
        let version = text.lines().last().and_then(|l| l.strip_prefix("version="));
        let version =
            version.and_then(|v| i64::from_str_radix(v, 16).ok()).ok_or("a reconfig reply without version")?;
        if version != zxid {
            return Err(format!("reconfig acknowledged at {zxid:#x} answers version {version:#x}"));
        }
        self.acked_config = self.acked_config.max(version);
        self.one_config_per_version(version, text.to_string(), "a client's reconfig")
    }

    fn one_config_per_version(&mut self, version: i64, text: String, who: &str) -> Result<(), String> {
        match self.configs.get(&version) {
            Some(known) if *known != text => {
                Err(format!("{who}: two configurations with version {version:#x}:\n{known}\n---\n{text}"))
            }
            _ => {
                self.configs.insert(version, text);
                Ok(())
            }
        }
    }

    /// Committed configuration changes are never lost: the configuration every server ends with
    /// is at least as new as every acknowledged reconfig.
    pub(crate) fn final_config(&self, version: i64) -> Result<(), String> {
        if version < self.acked_config {
            return Err(format!(
                "the final configuration {version:#x} is older than an acknowledged reconfig {:#x}",
                self.acked_config
            ));
        }
        Ok(())
    }

    fn track(&mut self, sid: Sid) -> &mut Track {
        self.tracks.entry(sid).or_default()
    }

    /// One txn per zxid over the whole run: `fp` is the txn `sid` holds at `zxid` (`how`:
    /// "persisted" or "recovered").
    fn one_txn_per_zxid(&mut self, sid: Sid, zxid: i64, fp: u64, how: &str) -> Result<(), String> {
        match *self.txns.entry(zxid).or_insert(fp) {
            other if other != fp => {
                Err(format!("server {sid} {how} a txn at {zxid:#x} different from another server's"))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn persisted(&mut self, sid: Sid, zxid: i64, fp: u64) -> Result<(), String> {
        self.one_txn_per_zxid(sid, zxid, fp, "persisted")?;
        let t = self.track(sid);
        if let Some((&last, _)) = t.log.last_key_value() {
            if zxid <= last {
                return Err(format!("server {sid} persisted {zxid:#x} after {last:#x}: zxids must increase"));
            }
        }
        t.log.insert(zxid, fp);
        Ok(())
    }

    /// Every txn of a batch handed to storage, in order.
    pub(crate) fn persisted_batch(&mut self, sid: Sid, batch: &warden_driver::Batch) -> Result<(), String> {
        batch.iter().try_for_each(|(hdr, txn)| self.persisted(sid, hdr.zxid, fingerprint(hdr, txn)))
    }

    pub(crate) fn truncated(&mut self, sid: Sid, zxid: i64) {
        let t = self.track(sid);
        t.log.split_off(&(zxid + 1));
    }

    pub(crate) fn reloaded(&mut self, sid: Sid, at: i64) {
        let t = self.track(sid);
        t.log.split_off(&(at + 1));
        t.applied = at;
        t.verified = t.verified.min(at);
        t.reset = true;
    }

    /// `sid` took a snapshot of its tree at `zxid`.
    pub(crate) fn snapshot_taken(&mut self, sid: Sid, zxid: i64) {
        let t = self.track(sid);
        let hist = t.log.range(..=zxid).map(|(k, v)| (*k, *v)).collect();
        t.snapshots.insert(zxid, hist);
    }

    /// A restart recovered up to `last_zxid` from its snapshot at `snapshot_zxid` (0: none) and
    /// the log txns `replayed` after it (zxid, fingerprint): the server's history is what that
    /// snapshot stood for plus what the log gave back. That can hold txns the checker had dropped:
    /// a TRUNC whose write failed before it was durable leaves them on disk.
    pub(crate) fn restarted(
        &mut self,
        sid: Sid,
        last_zxid: i64,
        snapshot_zxid: i64,
        replayed: impl IntoIterator<Item = (i64, u64)>,
    ) -> Result<(), String> {
        self.reloaded(sid, last_zxid);
        let t = self.track(sid);
        if let Some(hist) = t.snapshots.get(&snapshot_zxid).cloned() {
            for (zxid, fp) in hist {
                t.log.entry(zxid).or_insert(fp);
            }
        }
        for (zxid, fp) in replayed {
            self.one_txn_per_zxid(sid, zxid, fp, "recovered")?;
            self.track(sid).log.insert(zxid, fp);
        }
        Ok(())
    }

    /// A standalone server restarted at `last_zxid`: txns above it were persisted but never
    /// synced (lost with the crash, never applied, never seen), and a standalone server numbers
    /// its next txns from there, as ZooKeeper's does. Only an ensemble moves to a new epoch.
    pub(crate) fn forget_unsynced(&mut self, last_zxid: i64) {
        self.txns.split_off(&(last_zxid + 1));
    }

    /// Whether `sid`'s persisted history holds every txn a client could have seen.
    pub(crate) fn holds_visible(&self, sid: Sid) -> bool {
        self.tracks.get(&sid).is_some_and(|t| self.visible.iter().all(|z| t.log.contains_key(z)))
    }

    /// The server lost its disk: it holds and has applied nothing until it resyncs.
    pub(crate) fn wiped(&mut self, sid: Sid) {
        self.reloaded(sid, 0);
        self.track(sid).snapshots.clear();
    }

    pub(crate) fn crashed(&mut self, sid: Sid) {
        self.track(sid).established = false;
    }

    pub(crate) fn history_upto(&mut self, sid: Sid, zxid: i64) -> BTreeMap<i64, u64> {
        self.track(sid).log.range(..=zxid).map(|(k, v)| (*k, *v)).collect()
    }

    pub(crate) fn snapshot_installed(&mut self, sid: Sid, zxid: i64, hist: &BTreeMap<i64, u64>) {
        let t = self.track(sid);
        t.log = hist.range(..=zxid).map(|(k, v)| (*k, *v)).collect();
        t.snapshots.insert(zxid, t.log.clone());
        t.reset = true;
    }

    /// A failed write or fsync stops the server (checked by the caller), unless it reveals a
    /// broken order.
    pub(crate) fn storage_failed(&mut self, why: &str) -> Result<(), String> {
        if why.contains("is not after the last logged zxid") {
            return Err(format!("storage refused an out-of-order append: {why}"));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn after_step(
        &mut self,
        sid: Sid,
        role: RoleKind,
        serving: bool,
        applied: i64,
        epoch: i64,
        tree: &DataTree,
        node: &Node,
    ) -> Result<(), String> {
        self.check_leader(sid, role, serving, epoch)?;
        let t = self.tracks.entry(sid).or_default();
        if applied == t.applied && !t.reset {
            return Ok(());
        }
        if applied < t.applied && !t.reset {
            return Err(format!("server {sid}: applied zxid went back from {:#x} to {applied:#x}", t.applied));
        }
        let from = if t.reset { 0 } else { t.verified };
        let prev = if t.reset { 0 } else { t.applied };
        t.reset = false;
        t.applied = applied;
        t.verified = applied;
        // Digest.
        let digest = tree.fingerprint();
        match self.digests.get(&applied) {
            Some(&(d, other)) if d != digest => {
                return Err(format!(
                    "servers {sid} and {other} applied up to {applied:#x} but their trees differ (digest {digest:#x} vs {d:#x})"
                ));
            }
            Some(_) => {}
            None => {
                self.digests.insert(applied, (digest, sid));
            }
        }
        if applied <= from {
            return Ok(());
        }
        // Every visible txn up to here is in this server's history.
        let t = &self.tracks[&sid];
        if let Some(z) = self.visible.range(from + 1..=applied).find(|z| !t.log.contains_key(z)) {
            return Err(format!(
                "server {sid} applied up to {applied:#x} without the committed txn {z:#x} (committed prefixes disagree)"
            ));
        }
        // What this server applied while serving is visible now.
        if serving {
            self.serves(sid, prev, applied)?;
        }
        // Acknowledged writes are in the tree.
        for (z, a) in self.acked.range(from + 1..=applied) {
            check_acked(sid, tree, *z, a)?;
        }
        // No ephemeral outlives its session.
        let (_, sessions) = node.snapshot_state();
        let live: BTreeSet<i64> = sessions.iter().map(|(id, _)| *id).collect();
        if let Some(s) = tree.sessions_with_ephemerals().into_iter().find(|s| !live.contains(s)) {
            return Err(format!(
                "server {sid}: ephemerals of session {s:#x} outlive its session ({:?})",
                tree.ephemerals(s)
            ));
        }
        Ok(())
    }

    /// `sid` serves what it applied in `(prev, applied]`: those txns become visible, and every
    /// other server that applied past one of them must hold it.
    fn serves(&mut self, sid: Sid, prev: i64, applied: i64) -> Result<(), String> {
        let t = &self.tracks[&sid];
        let new: Vec<i64> = t.log.range(prev + 1..=applied).map(|(z, _)| *z).collect();
        for z in new {
            if self.visible.insert(z) {
                for (other, o) in &self.tracks {
                    if o.verified >= z && !o.log.contains_key(&z) && *other != sid {
                        return Err(format!(
                            "server {other} applied past {z:#x} without the txn that server {sid} serves there"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_leader(&mut self, sid: Sid, role: RoleKind, serving: bool, epoch: i64) -> Result<(), String> {
        let established = role == RoleKind::Leader && serving;
        if !established {
            self.track(sid).established = false;
            return Ok(());
        }
        if let Some(&other) = self.leaders.get(&epoch) {
            if other != sid {
                return Err(format!("servers {other} and {sid} both established leaders of epoch {epoch}"));
            }
        }
        self.leaders.insert(epoch, sid);
        let t = self.tracks.entry(sid).or_default();
        if !t.established {
            t.established = true;
            if let Some(z) = self.visible.iter().find(|z| !t.log.contains_key(z)) {
                return Err(format!("new leader {sid} of epoch {epoch} lacks the committed txn {z:#x}"));
            }
        }
        Ok(())
    }

    /// A client got a successful reply for a write at `zxid`.
    pub(crate) fn acked(&mut self, zxid: i64, a: Acked) -> Result<(), String> {
        if !self.visible.contains(&zxid) {
            return Err(format!("write {a:?} acknowledged at {zxid:#x}, which no serving server applied"));
        }
        if let Acked::SetData { path, version } = &a {
            let v = self.versions.entry(path.clone()).or_insert(*version);
            *v = (*v).max(*version);
        } else if let Acked::Create { path } = &a {
            self.versions.entry(path.clone()).or_insert(0);
        }
        self.acked.insert(zxid, a);
        Ok(())
    }

    pub(crate) fn acked_version(&self, path: &str) -> Option<i32> {
        self.versions.get(path).copied()
    }

    pub(crate) fn acked_count(&self) -> u64 {
        self.acked.len() as u64
    }

    pub(crate) fn final_leader(&self, sid: Sid) -> Result<(), String> {
        let t = self.tracks.get(&sid).ok_or("final leader untracked")?;
        if let Some(z) = self.visible.iter().find(|z| !t.log.contains_key(z)) {
            return Err(format!("final leader {sid} lacks the committed txn {z:#x}"));
        }
        if let Some(z) = self.acked.keys().find(|z| !t.log.contains_key(z)) {
            return Err(format!("final leader {sid} lacks the acknowledged txn {z:#x}"));
        }
        Ok(())
    }

    pub(crate) fn acked_paths(&self) -> impl DoubleEndedIterator<Item = (&i64, &Acked)> {
        self.acked.iter()
    }
}

pub(crate) fn check_acked(sid: Sid, tree: &DataTree, z: i64, a: &Acked) -> Result<(), String> {
    match a {
        Acked::Create { path } => match tree.node(path) {
            Some(n) if n.stat.czxid == z => Ok(()),
            Some(n) => {
                Err(format!("server {sid}: {path} acknowledged as created at {z:#x} has czxid {:#x}", n.stat.czxid))
            }
            None => Err(format!("server {sid} applied past {z:#x} but the acknowledged create of {path} is missing")),
        },
        Acked::SetData { path, version } => match tree.node(path) {
            Some(n) if n.stat.version >= *version => Ok(()),
            Some(n) => Err(format!(
                "server {sid}: {path} has version {} below the acknowledged {version} (set at {z:#x})",
                n.stat.version
            )),
            None => Err(format!("server {sid}: {path} (set at {z:#x}) is missing")),
        },
        Acked::Write => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Server 1 has logged and applied 0x5 and 0x6, and was checked up to 0x6.
    fn applied_by_one() -> Checker {
        let mut c = Checker::default();
        for z in [5, 6] {
            c.persisted(1, z, 100 + z as u64).unwrap();
        }
        let t = c.track(1);
        t.applied = 6;
        t.verified = 6;
        c
    }

    #[test]
    fn a_server_that_applied_past_a_served_txn_must_hold_it() {
        let mut c = applied_by_one();
        c.truncated(1, 5); // its log lost 0x6 but it still counts as applied past it
        c.persisted(5, 6, 106).unwrap();
        let err = c.serves(5, 0, 6).unwrap_err();
        assert!(err.contains("server 1 applied past 0x6"), "{err}");
    }

    #[test]
    fn a_wiped_server_has_applied_nothing() {
        let mut c = applied_by_one();
        c.wiped(1);
        c.persisted(5, 6, 106).unwrap();
        c.serves(5, 0, 6).unwrap();
        assert!(c.visible.contains(&6));
    }

    /// A TRUNC dropped 0x6 from the checker's record, but the truncation never became durable
    /// and the restart recovered 0x6 from disk (from a snapshot taken before the TRUNC, or from
    /// the log): the server holds it again.
    #[test]
    fn a_restart_restores_what_the_disk_gave_back() {
        let mut c = applied_by_one();
        c.snapshot_taken(1, 6);
        c.truncated(1, 5);
        c.restarted(1, 6, 6, []).unwrap();
        c.track(1).verified = 6;
        c.persisted(5, 6, 106).unwrap();
        c.serves(5, 0, 6).unwrap();
        // The same through the log instead of a snapshot.
        c.truncated(1, 5);
        c.restarted(1, 6, 0, [(6, 106)]).unwrap();
        assert!(c.track(1).log.contains_key(&6));
        assert!(c.restarted(2, 6, 0, [(6, 999)]).unwrap_err().contains("different"));
    }

    #[test]
    fn a_reload_lowers_what_was_verified() {
        let mut c = applied_by_one();
        c.reloaded(1, 5);
        c.persisted(5, 6, 106).unwrap();
        c.serves(5, 0, 6).unwrap();
    }
}
