//! Shared harness: prep -> apply -> applied -> watches, like the node's pipeline.
#![allow(dead_code)]

use warden_proto::{Acl, ErrorCode, Id, Txn, TxnHeader};
use warden_tree::{CreateKind, DataTree, FiredWatch, Prep, PrepContext, TxnResult, WatchManager, WriteOp};

pub struct Harness {
    pub tree: DataTree,
    pub prep: Prep,
    pub watches: WatchManager,
    pub zxid: i64,
    pub time_ms: i64,
    pub ids: Vec<Id>,
    pub ttl_enabled: bool,
    pub fired: Vec<FiredWatch>,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    pub fn new() -> Self {
        Self {
            tree: DataTree::new(),
            prep: Prep::new(),
            watches: WatchManager::new(),
            zxid: 0,
            time_ms: 1000,
            ids: vec![Id::new("ip", "127.0.0.1")],
            ttl_enabled: true,
            fired: Vec::new(),
        }
    }

    pub fn ctx(&self, session: i64) -> PrepContext<'_> {
        PrepContext {
            session_id: session,
            auth_ids: &self.ids,
            ttl_enabled: self.ttl_enabled,
            is_ephemeral_allowed: true,
            sasl_provider: true,
        }
    }

    /// Preps a write for `session` with the next zxid (not applied).
    pub fn prep_only(&mut self, session: i64, op: &WriteOp) -> Result<(TxnHeader, Txn), ErrorCode> {
        let zxid = self.zxid + 1;
        let ids = self.ids.clone();
        let ctx = PrepContext {
            session_id: session,
            auth_ids: &ids,
            ttl_enabled: self.ttl_enabled,
            is_ephemeral_allowed: true,
            sasl_provider: true,
        };
        let txn = self.prep.prep(&self.tree, &ctx, zxid, op)?;
        self.zxid = zxid;
        Ok((self.header(session, zxid, &txn), txn))
    }

    pub fn header(&self, session: i64, zxid: i64, txn: &Txn) -> TxnHeader {
        TxnHeader { client_id: session, cxid: 1, zxid, time_ms: self.time_ms, txn_type: txn.op().code() }
    }

    /// Applies a prepped txn, drops its change records, fires watches, checks invariants.
    pub fn apply(&mut self, hdr: &TxnHeader, txn: &Txn) -> TxnResult {
        let out = self.tree.apply(hdr, txn);
        self.prep.applied(hdr.zxid);
        for ev in &out.events {
            let f = self.watches.trigger(ev);
            self.fired.extend(f.into_iter().map(|t| FiredWatch {
                conn: t.conn,
                event_type: t.event_type,
                path: ev.path.to_string(),
                zxid: ev.zxid,
            }));
        }
        self.check();
        out.result
    }

    pub fn write(&mut self, session: i64, op: WriteOp) -> Result<TxnResult, ErrorCode> {
        let (hdr, txn) = self.prep_only(session, &op)?;
        Ok(self.apply(&hdr, &txn))
    }

    pub fn close_session(&mut self, session: i64) -> TxnResult {
        self.zxid += 1;
        let txn = self.prep.prep_close_session(&self.tree, session, self.zxid);
        let hdr = self.header(session, self.zxid, &txn);
        self.apply(&hdr, &txn)
    }

    pub fn check(&self) {
        self.tree.check_invariants().expect("tree invariants");
        self.prep.check_against(&self.tree).expect("prep invariants");
        self.watches.check_invariants().expect("watch invariants");
    }

    pub fn take_fired(&mut self) -> Vec<(u64, i32, String)> {
        std::mem::take(&mut self.fired).into_iter().map(|f| (f.conn, f.event_type.code(), f.path)).collect()
    }
}

pub fn create(path: &str, flags: i32) -> WriteOp {
    create_data(path, flags, b"")
}

pub fn create_data(path: &str, flags: i32, data: &[u8]) -> WriteOp {
    WriteOp::Create {
        path: path.into(),
        data: Some(data.to_vec()),
        acl: Acl::open_unsafe(),
        flags,
        kind: CreateKind::Regular,
    }
}

pub fn create_acl(path: &str, acl: Vec<Acl>) -> WriteOp {
    WriteOp::Create { path: path.into(), data: None, acl, flags: 0, kind: CreateKind::Regular }
}

pub fn delete(path: &str, version: i32) -> WriteOp {
    WriteOp::Delete { path: path.into(), version }
}

pub fn set_data(path: &str, data: &[u8], version: i32) -> WriteOp {
    WriteOp::SetData { path: path.into(), data: Some(data.to_vec().into()), version }
}

pub fn created_path(r: &TxnResult) -> String {
    match r {
        TxnResult::Created { path, .. } => path.clone(),
        other => panic!("expected Created, got {other:?}"),
    }
}
