//! `Prep`: turns a write into a txn against the tree plus pending (prepped, not yet applied)
//! changes, like ZooKeeper's `PrepRequestProcessor` with its `ChangeRecord`s (check order of
//! `pRequest2Txn`; multi as `MultiOperationRecord`).
//!
//! Deviations from ZooKeeper, both towards what the applied tree will show: a pending setACL
//! record carries the new ACL, and a pending closeSession lowers its parents' child counts.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use warden_proto::{perms, Acl, ErrorCode, StatPersisted, Txn};

use crate::acl::{check_acl, fixup_acl_owned};
use crate::node_key::child_word;
use crate::owner::{is_session_ephemeral, ttl_owner, CONTAINER_OWNER, MAX_TTL_MS};
use crate::path::{is_special_path, validate_path};
use crate::tree::DataTree;
use crate::write_op::{CreateKind, CreateMode, PrepContext, WriteOp};
use crate::znode::Znode;

/// What a node will look like once pending txns apply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PendingNode {
    stat: StatPersisted,
    child_count: i64,
    acl: Arc<[Acl]>,
    /// `Znode::child_bound` as the applied tree will hold it.
    child_bound: u32,
    /// The child counter wrapped in this record or one it was made from: the applied tree keeps
    /// the counter from before the wrap (`createNode` only moves it forward), so from here on the
    /// records of this node differ from what the tree will hold.
    wrapped: bool,
}

impl PendingNode {
    /// What the tree holds of `n`.
    fn held(n: &Znode) -> Self {
        PendingNode {
            stat: n.stat,
            child_count: i64::from(n.num_children),
            acl: n.acl.clone(),
            child_bound: n.child_bound,
            wrapped: false,
        }
    }
}

/// One pending change; `node` is `None` for a pending delete.
#[derive(Debug, Clone)]
struct ChangeRecord {
    seq: u64,
    zxid: i64,
    path: Arc<str>,
    node: Option<PendingNode>,
    /// What `applied_parents` does with the path once the record's txn applies.
    then: Then,
    /// A newer record of the path is outstanding (`latest` does not point here).
    superseded: bool,
}

impl ChangeRecord {
    /// The node's ephemeral owner (a session, container or TTL marker), if it has one.
    fn owner(&self) -> Option<i64> {
        self.node.as_ref().map(|n| n.stat.ephemeral_owner).filter(|&o| o != 0)
    }
}

/// What an applied record does to `applied_parents`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// A parent whose children changed, as the tree now holds it: keep it.
    Keep,
    /// The node changed otherwise (or went): drop any kept state.
    Forget,
    /// A new node, which `applied_parents` cannot hold.
    Nothing,
}

/// Pending change records, oldest first, plus the latest record per path (as its `seq`).
///
/// The records in `outstanding` have consecutive `seq` numbers, so the record with sequence
/// number `s` sits at index `s - front.seq`: the latest map holds only that number.
///
/// `applied_parents` keeps, for parents whose children changed recently, the state their last
/// applied record gave them: the tree's state of those fields, since in the role that preps (leader
/// or standalone) every change to the tree is prepped here first and applies as prepped. Creates
/// under one parent (sequential nodes, queues, locks) then find the parent without a descent of the
/// node map. A role change or a new tree clears it with the rest (`clear`, `Prep::new`).
#[derive(Debug, Clone, Default)]
pub struct Prep {
    outstanding: VecDeque<ChangeRecord>,
    latest: HashMap<Arc<str>, u64, crate::FastHash>,
    next_seq: u64,
    applied_parents: HashMap<Arc<str>, PendingNode, crate::FastHash>,
    /// Outstanding records of a node with an ephemeral owner, per owner: a closeSession looks
    /// through the records for its session's new ephemerals only when it has some.
    owned: HashMap<i64, u32, crate::FastHash>,
    /// Change records added, and dropped once their txn was applied, in this `Prep`'s life
    /// (ZooKeeper's `outstanding_changes_queued` / `outstanding_changes_removed`).
    queued: u64,
    removed: u64,
}

/// At most this many applied parents are kept; reaching it starts the map again.
const APPLIED_PARENTS: usize = 2048;

/// A create request after flag and TTL decoding.
/// A create's request fields; the path and ACL are taken from the op (it is not used again).
struct CreateArgs<'a> {
    path: &'a mut String,
    data: Option<Vec<u8>>,
    acl: &'a mut Vec<Acl>,
    mode: CreateMode,
    ttl: i64,
}

impl Prep {
    /// No pending changes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of pending change records.
    pub fn pending_count(&self) -> usize {
        self.outstanding.len()
    }

    /// Change records added so far (a rolled-back multi's included) and dropped once applied.
    pub fn changes_queued_and_removed(&self) -> (u64, u64) {
        (self.queued, self.removed)
    }

    /// Validates `op` and returns its txn, recording its changes as pending under `zxid`.
    /// Single ops fail with the first failing check's code (nothing recorded); a multi always
    /// yields `Txn::Multi` (with error sub-txns on failure, and its records rolled back).
    pub fn prep(&mut self, tree: &DataTree, ctx: &PrepContext<'_>, zxid: i64, op: &WriteOp) -> Result<Txn, ErrorCode> {
        self.prep_owned(tree, ctx, zxid, op.clone())
    }

    /// As `prep`, taking the op by value: its data moves into the txn instead of being copied.
    pub fn prep_owned(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        zxid: i64,
        mut op: WriteOp,
    ) -> Result<Txn, ErrorCode> {
        match &mut op {
            WriteOp::Multi(ops) => Ok(self.prep_multi(tree, ctx, zxid, ops)),
            _ => self.prep_single(tree, ctx, zxid, &mut op),
        }
    }

    /// Preps one op; its data is moved out into the txn (the op is not used again).
    fn prep_single(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        zxid: i64,
        op: &mut WriteOp,
    ) -> Result<Txn, ErrorCode> {
        match op {
            WriteOp::Create { path, data, acl, flags, kind } => {
                let data = std::mem::take(data);
                let mode = CreateMode::from_flags(*flags).ok_or(ErrorCode::BadArguments)?;
                let ttl = match kind {
                    CreateKind::Ttl(t) => *t,
                    _ => -1,
                };
                validate_create_mode(mode, ttl, ctx)?;
                self.prep_create(tree, ctx, zxid, CreateArgs { path, data, acl, mode, ttl })
            }
            WriteOp::Delete { path, version } => self.prep_delete(tree, ctx, zxid, std::mem::take(path), *version),
            WriteOp::DeleteContainer { path } => self.prep_delete_container(tree, zxid, path),
            WriteOp::SetData { path, data, version } => {
                self.prep_set_data(tree, ctx, zxid, std::mem::take(path), std::mem::take(data), *version)
            }
            WriteOp::SetAcl { path, acl, version } => {
                self.prep_set_acl(tree, ctx, zxid, std::mem::take(path), std::mem::take(acl), *version)
            }
            WriteOp::Check { path, version } => self.prep_check(tree, ctx, path, *version),
            WriteOp::Multi(_) => Err(ErrorCode::BadArguments),
        }
    }

    /// Sub-ops are prepped in order against the pending state; on the first failure the multi's
    /// records are rolled back, that slot becomes `Error{code}` and later slots `Error{-2}`.
    fn prep_multi(&mut self, tree: &DataTree, ctx: &PrepContext<'_>, zxid: i64, ops: &mut [WriteOp]) -> Txn {
        let mut txns = Vec::with_capacity(ops.len());
        let mut failed = false;
        for op in ops {
            if failed {
                txns.push(Txn::Error { err: ErrorCode::RuntimeInconsistency.code() });
                continue;
            }
            match self.prep_single(tree, ctx, zxid, op) {
                Ok(t) => txns.push(t),
                Err(e) => {
                    failed = true;
                    txns.push(Txn::Error { err: e.code() });
                    self.rollback(zxid);
                }
            }
        }
        Txn::Multi(txns)
    }

    /// `getRecordForPath`: the pending state of `path`, else the tree's; NoNode if neither has it.
    fn record(&self, tree: &DataTree, path: &str) -> Result<PendingNode, ErrorCode> {
        self.record_with_path(tree, path).map(|(_, node)| node)
    }

    /// As `record`, with a shared copy of the path (the pending record's or the node map's) for
    /// `add_shared`, so that recording a change to an existing node copies no path.
    fn record_with_path(&self, tree: &DataTree, path: &str) -> Result<(Arc<str>, PendingNode), ErrorCode> {
        if let Some(rec) = self.latest_record(path) {
            let node = rec.node.clone().ok_or(ErrorCode::NoNode)?;
            return Ok((rec.path.clone(), node));
        }
        if let Some((stored, node)) = self.applied_parents.get_key_value(path) {
            return Ok((stored.clone(), node.clone()));
        }
        // The paths recorded here are validated, never "" (which `DataTree::node` maps to "/").
        let (stored, n) = tree.get_with_path(path).ok_or(ErrorCode::NoNode)?;
        Ok((stored.clone(), PendingNode::held(n)))
    }

    /// Whether `path` exists once pending changes apply (`record(..).is_ok()` without the copy).
    fn exists(&self, tree: &DataTree, path: &str) -> bool {
        match self.latest_record(path) {
            Some(rec) => rec.node.is_some(),
            None => self.applied_parents.contains_key(path) || tree.node(path).is_some(),
        }
    }

    fn latest_record(&self, path: &str) -> Option<&ChangeRecord> {
        let seq = *self.latest.get(path)?;
        let front = self.outstanding.front()?.seq;
        self.outstanding.get((seq - front) as usize)
    }

    fn add(&mut self, zxid: i64, path: &str, node: Option<PendingNode>, then: Then) {
        self.add_shared(zxid, self.shared(path), node, then);
    }

    /// Records a parent's new state (its children changed), kept once applied unless its child
    /// counter wrapped (the tree will not hold it then).
    fn add_parent(&mut self, zxid: i64, path: Arc<str>, node: PendingNode) {
        let then = if node.wrapped { Then::Forget } else { Then::Keep };
        self.add_shared(zxid, path, Some(node), then);
    }

    /// `path` as the latest map already holds it, else a new copy.
    fn shared(&self, path: &str) -> Arc<str> {
        match self.latest.get_key_value(path) {
            Some((k, _)) => k.clone(),
            None => path.into(),
        }
    }

    fn add_shared(&mut self, zxid: i64, path: Arc<str>, node: Option<PendingNode>, then: Then) {
        let rec = ChangeRecord { seq: self.next_seq, zxid, path: path.clone(), node, then, superseded: false };
        self.next_seq += 1;
        self.queued += 1;
        if let Some(owner) = rec.owner() {
            *self.owned.entry(owner).or_default() += 1;
        }
        if let Some(older) = self.latest.insert(path, rec.seq) {
            let front = self.outstanding.front().map_or(rec.seq, |r| r.seq);
            if let Some(r) = self.outstanding.get_mut((older - front) as usize) {
                r.superseded = true;
            }
        }
        self.outstanding.push_back(rec);
    }

    /// `r` leaves `outstanding`: one record fewer for its owner.
    fn disown(&mut self, r: &ChangeRecord) {
        if let Some(owner) = r.owner() {
            if let Some(n) = self.owned.get_mut(&owner) {
                *n -= 1;
                if *n == 0 {
                    self.owned.remove(&owner);
                }
            }
        }
    }

    /// Drops every record of `zxid` (a failed multi) and restores the latest-per-path map.
    fn rollback(&mut self, zxid: i64) {
        let mut touched = BTreeSet::new();
        while self.outstanding.back().is_some_and(|r| r.zxid == zxid) {
            if let Some(r) = self.outstanding.pop_back() {
                self.disown(&r);
                // Keep the sequence numbers consecutive.
                self.next_seq = r.seq;
                touched.insert(r.path);
            }
        }
        for path in touched {
            match self.outstanding.iter_mut().rev().find(|r| r.path == path) {
                Some(r) => {
                    r.superseded = false;
                    self.latest.insert(path, r.seq)
                }
                None => self.latest.remove(&path),
            };
        }
    }

    /// The txn with `zxid` (and everything before it) has been applied to the tree: drop its
    /// change records.
    pub fn applied(&mut self, zxid: i64) {
        while self.outstanding.front().is_some_and(|r| r.zxid <= zxid) {
            let Some(r) = self.outstanding.pop_front() else { break };
            self.disown(&r);
            self.removed += 1;
            if !r.superseded {
                self.latest.remove(&r.path);
            }
            match (r.then, r.node) {
                (Then::Keep, Some(node)) => {
                    if self.applied_parents.len() >= APPLIED_PARENTS {
                        self.applied_parents.clear();
                    }
                    self.applied_parents.insert(r.path, node);
                }
                (Then::Nothing, _) => {}
                // Any other change to the node: the tree holds its state.
                _ => {
                    if !self.applied_parents.is_empty() {
                        self.applied_parents.remove(&r.path);
                    }
                }
            }
        }
    }

    /// Forgets every pending change and applied parent (e.g. when leadership is lost: the tree
    /// changes next by txns prepped elsewhere).
    pub fn clear(&mut self) {
        self.outstanding.clear();
        self.owned.clear();
        self.latest.clear();
        self.applied_parents.clear();
    }

    fn prep_create(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        zxid: i64,
        a: CreateArgs<'_>,
    ) -> Result<Txn, ErrorCode> {
        let parent_len = parent_and_validate(a.path, false)?.len();
        let acl = fixup_acl_owned(std::mem::take(a.acl), ctx.auth_ids, ctx.sasl_provider)?;
        let (parent_path, mut parent) = self.record_with_path(tree, &a.path[..parent_len])?;
        if !check_acl(&parent.acl, perms::CREATE, ctx.auth_ids) {
            return Err(ErrorCode::NoAuth);
        }
        let cversion = parent.stat.cversion;
        let mut path = std::mem::take(a.path);
        if a.mode.sequential {
            use std::fmt::Write;
            let _ = write!(path, "{cversion:010}");
        }
        validate_path(&path)?;
        // A name word above the parent's bound (the next number of a sequence, usually) is a
        // child the parent never had, applied or pending (a pending create raised the bound of
        // the parent's pending record): no descent of the node map then.
        let word = child_word(&path);
        if word <= parent.child_bound && self.exists(tree, &path) {
            return Err(ErrorCode::NodeExists);
        }
        if is_session_ephemeral(parent.stat.ephemeral_owner) {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        let new_cversion = cversion.wrapping_add(1);
        // The pending record shares the tree's copy of the list when there is one (the usual case),
        // so the txn can take the list itself.
        let pending_acl = tree.acls.shared(&acl).unwrap_or_else(|| acl.as_slice().into());
        parent.child_count += 1;
        parent.child_bound = parent.child_bound.max(word);
        parent.stat.cversion = new_cversion;
        parent.stat.pzxid = zxid;
        parent.wrapped |= new_cversion < cversion;
        self.add_parent(zxid, parent_path, parent);
        let owner = create_owner(&a, ctx.session_id);
        let stat =
            StatPersisted { czxid: zxid, mzxid: zxid, pzxid: zxid, ephemeral_owner: owner, ..StatPersisted::default() };
        self.add(
            zxid,
            &path,
            Some(PendingNode { stat, child_count: 0, acl: pending_acl, child_bound: 0, wrapped: false }),
            Then::Nothing,
        );
        Ok(create_txn(a, path, acl, new_cversion))
    }

    fn prep_delete(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        zxid: i64,
        path: String,
        version: i32,
    ) -> Result<Txn, ErrorCode> {
        let (parent_path, parent) = self.record_with_path(tree, parent_and_validate(&path, true)?)?;
        if !check_acl(&parent.acl, perms::DELETE, ctx.auth_ids) {
            return Err(ErrorCode::NoAuth);
        }
        let (node_path, node) = self.record_with_path(tree, &path)?;
        check_and_inc_version(node.stat.version, version)?;
        if node.child_count > 0 {
            return Err(ErrorCode::NotEmpty);
        }
        self.record_delete(zxid, parent_path, parent, node_path);
        Ok(Txn::Delete { path })
    }

    fn prep_delete_container(&mut self, tree: &DataTree, zxid: i64, path: &str) -> Result<Txn, ErrorCode> {
        let parent_path = parent_and_validate(path, true)?;
        let (node_path, node) = self.record_with_path(tree, path)?;
        if node.child_count > 0 {
            return Err(ErrorCode::NotEmpty);
        }
        if is_session_ephemeral(node.stat.ephemeral_owner) {
            return Err(ErrorCode::BadVersion);
        }
        let (parent_path, parent) = self.record_with_path(tree, parent_path)?;
        self.record_delete(zxid, parent_path, parent, node_path);
        Ok(Txn::DeleteContainer { path: path.to_string() })
    }

    fn record_delete(&mut self, zxid: i64, parent_path: Arc<str>, mut parent: PendingNode, path: Arc<str>) {
        parent.child_count -= 1;
        parent.stat.pzxid = zxid;
        self.add_parent(zxid, parent_path, parent);
        self.add_shared(zxid, path, None, Then::Forget);
    }

    fn prep_set_data(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        zxid: i64,
        path: String,
        data: Option<Bytes>,
        version: i32,
    ) -> Result<Txn, ErrorCode> {
        validate_path(&path)?;
        let (stored, mut node) = self.record_with_path(tree, &path)?;
        if !check_acl(&node.acl, perms::WRITE, ctx.auth_ids) {
            return Err(ErrorCode::NoAuth);
        }
        let new_version = check_and_inc_version(node.stat.version, version)?;
        node.stat.version = new_version;
        node.stat.mzxid = zxid;
        self.add_shared(zxid, stored, Some(node), Then::Forget);
        Ok(Txn::SetData { path, data, version: new_version })
    }

    fn prep_set_acl(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        zxid: i64,
        path: String,
        acl: Vec<Acl>,
        version: i32,
    ) -> Result<Txn, ErrorCode> {
        validate_path(&path)?;
        let acl = fixup_acl_owned(acl, ctx.auth_ids, ctx.sasl_provider)?;
        let mut node = self.record(tree, &path)?;
        if !check_acl(&node.acl, perms::ADMIN, ctx.auth_ids) {
            return Err(ErrorCode::NoAuth);
        }
        let new_version = check_and_inc_version(node.stat.aversion, version)?;
        node.stat.aversion = new_version;
        node.acl = acl.as_slice().into();
        self.add(zxid, &path, Some(node), Then::Forget);
        Ok(Txn::SetAcl { path, acl, version: new_version })
    }

    fn prep_check(
        &mut self,
        tree: &DataTree,
        ctx: &PrepContext<'_>,
        path: &str,
        version: i32,
    ) -> Result<Txn, ErrorCode> {
        validate_path(path)?;
        let node = self.record(tree, path)?;
        if !check_acl(&node.acl, perms::READ, ctx.auth_ids) {
            return Err(ErrorCode::NoAuth);
        }
        let v = check_and_inc_version(node.stat.version, version)?;
        Ok(Txn::Check { path: path.to_string(), version: v })
    }

    /// The closeSession txn for `session_id`: the session's ephemerals in the tree, adjusted by
    /// pending creates and deletes; records their deletion as pending.
    pub fn prep_close_session(&mut self, tree: &DataTree, session_id: i64, zxid: i64) -> Txn {
        // The session's ephemerals once pending changes apply: the tree's, less those whose latest
        // record deletes them (or, after a delete, makes them another's), plus those pending
        // records create. Thousands of sessions expiring in one tick each cost their own nodes
        // only, not a pass over every outstanding record.
        let ours = |r: &ChangeRecord| r.node.as_ref().is_some_and(|n| n.stat.ephemeral_owner == session_id);
        let mut es: BTreeSet<String> = tree
            .ephemeral_paths(session_id)
            .filter(|p| self.latest_record(p).is_none_or(ours))
            .map(str::to_string)
            .collect();
        if self.owned.contains_key(&session_id) {
            es.extend(self.outstanding.iter().filter(|r| !r.superseded && ours(r)).map(|r| r.path.to_string()));
        }
        for path in &es {
            if let Ok((parent_path, parent)) = self.record_with_path(tree, crate::path::parent(path)) {
                self.record_delete(zxid, parent_path, parent, self.shared(path));
            } else {
                self.add(zxid, path, None, Then::Forget);
            }
        }
        Txn::CloseSession { paths_to_delete: es.into_iter().collect() }
    }

    /// Checks that the latest-per-path map mirrors the newest outstanding record of each path,
    /// that zxids never decrease, and that each applied parent without a pending record shows
    /// what `tree` holds.
    pub fn check_against(&self, tree: &DataTree) -> Result<(), String> {
        let mut last = i64::MIN;
        let mut newest: HashMap<&str, u64> = HashMap::new();
        for (i, r) in self.outstanding.iter().enumerate() {
            if let Some(front) = self.outstanding.front() {
                if r.seq != front.seq + i as u64 {
                    return Err(format!("record seq {} at index {i} after {}", r.seq, front.seq));
                }
            }
            if r.zxid < last {
                return Err(format!("zxid {} after {last}", r.zxid));
            }
            last = r.zxid;
            if r.superseded != (self.latest.get(&r.path) != Some(&r.seq)) {
                return Err(format!(
                    "{}: record {} marked superseded {}, latest {:?}",
                    r.path,
                    r.seq,
                    r.superseded,
                    self.latest.get(&r.path)
                ));
            }
            newest.insert(&r.path, r.seq);
        }
        if newest.len() != self.latest.len() {
            return Err(format!("{} paths pending, {} in latest map", newest.len(), self.latest.len()));
        }
        let mut owned: HashMap<i64, u32, crate::FastHash> = HashMap::default();
        for owner in self.outstanding.iter().filter_map(ChangeRecord::owner) {
            *owned.entry(owner).or_default() += 1;
        }
        if owned != self.owned {
            return Err(format!("records per ephemeral owner {owned:?}, counted {:?}", self.owned));
        }
        for (path, seq) in &self.latest {
            if newest.get(&**path) != Some(seq) {
                return Err(format!("{path}: latest record is not the newest outstanding one"));
            }
        }
        let seen = |n: &PendingNode| {
            let s = &n.stat;
            (s.version, s.cversion, s.aversion, s.ephemeral_owner, n.child_count, n.child_bound, n.acl.to_vec())
        };
        for (path, kept) in &self.applied_parents {
            if self.latest.contains_key(path) {
                continue;
            }
            let Some(n) = tree.get(path) else {
                return Err(format!("applied parent {path} is not in the tree"));
            };
            let held = PendingNode::held(n);
            if seen(kept) != seen(&held) {
                return Err(format!("applied parent {path}: kept {:?}, tree {:?}", seen(kept), seen(&held)));
            }
        }
        Ok(())
    }
}

/// TTL and session rules of `validateCreateRequest`, in ZooKeeper's order.
fn validate_create_mode(mode: CreateMode, ttl: i64, ctx: &PrepContext<'_>) -> Result<(), ErrorCode> {
    if mode.ttl && !ctx.ttl_enabled {
        return Err(ErrorCode::Unimplemented);
    }
    let ttl_ok = if mode.ttl { ttl > 0 && ttl <= MAX_TTL_MS } else { ttl < 0 };
    if !ttl_ok {
        return Err(ErrorCode::BadArguments);
    }
    if mode.ephemeral && !ctx.is_ephemeral_allowed {
        return Err(ErrorCode::EphemeralOnLocalSession);
    }
    Ok(())
}

/// The parent part of `path` (before the last `/`, `""` meaning `/`); BadArguments if there is
/// no `/`, a NUL, or (for deletes) the path is special.
fn parent_and_validate(path: &str, reject_special: bool) -> Result<&str, ErrorCode> {
    let slash = path.rfind('/').ok_or(ErrorCode::BadArguments)?;
    if path.contains('\0') || (reject_special && is_special_path(path)) {
        return Err(ErrorCode::BadArguments);
    }
    Ok(if slash == 0 { "/" } else { &path[..slash] })
}

/// `checkAndIncVersion`: -1 matches anything; returns the next version.
fn check_and_inc_version(current: i32, expected: i32) -> Result<i32, ErrorCode> {
    if expected != -1 && expected != current {
        return Err(ErrorCode::BadVersion);
    }
    Ok(current.wrapping_add(1))
}

/// The create txn for a mode, and the owner value the node will have.
/// The ephemeral owner a create gives its node.
fn create_owner(a: &CreateArgs<'_>, session_id: i64) -> i64 {
    if a.mode.container {
        CONTAINER_OWNER
    } else if a.mode.ttl {
        ttl_owner(a.ttl)
    } else if a.mode.ephemeral {
        session_id
    } else {
        0
    }
}

fn create_txn(a: CreateArgs<'_>, path: String, acl: Vec<Acl>, parent_cversion: i32) -> Txn {
    let data = a.data;
    if a.mode.container {
        Txn::CreateContainer { path, data, acl, parent_cversion }
    } else if a.mode.ttl {
        Txn::CreateTtl { path, data, acl, parent_cversion, ttl_ms: a.ttl }
    } else {
        Txn::Create { path, data, acl, ephemeral: a.mode.ephemeral, parent_cversion }
    }
}
