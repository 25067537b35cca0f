//! The leader's side of the node: proposing prepped txns, and writes forwarded by learners.

use super::*;

impl Node {
    /// Proposes a prepped txn through the leader machine (its zxid was `next_zxid()`).
    pub(crate) fn leader_propose(
        &mut self,
        session_id: i64,
        cxid: i32,
        txn_type: i32,
        mut txn: Txn,
        origin: Origin,
        out: &mut Vec<Output>,
    ) -> i64 {
        // The leader keeps committed txns for DIFF; they must not hold client read buffers.
        txn.detach_data();
        let wall_ms = self.now.wall_ms;
        let mut result = Err("not leading".to_string());
        self.drive(out, |q, a| {
            let Machine::Leader(l) = &mut q.machine else { return };
            result = l.propose_typed(session_id, cxid, wall_ms, txn_type, txn, a).map_err(|e| format!("{e:?}"));
            if let Ok(zxid) = result {
                if !matches!(origin, Origin::Internal) {
                    q.origins.insert(zxid, origin);
                }
            }
        });
        match result {
            Ok(zxid) => zxid,
            Err(e) => {
                // Prepped changes were recorded under a zxid that will never apply.
                let zxid = self.next_zxid();
                if self.leader().is_some() {
                    self.drive(out, |q, a| {
                        if let Machine::Leader(l) = &mut q.machine {
                            l.step_down(&format!("cannot propose: {e}"), a);
                        }
                    });
                } else {
                    self.lose_role(format!("cannot propose: {e}"), out);
                }
                zxid
            }
        }
    }

    /// A sync from this leader's own client: answered (`Action::SyncDone`, in order with the
    /// learners' syncs) once a quorum confirms this server still leads (`Leader::sync`).
    pub(crate) fn leader_sync(&mut self, conn: ConnId, xid: i32, path: String, out: &mut Vec<Output>) {
        let arrived_ms = self.now.mono_ms;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.push_back(Pending::Forwarded { cxid: xid, arrived_ms });
        }
        let q = self.ensemble_mut();
        q.syncs.push_back(SyncWaiter::Client { conn, xid, path });
        let me = q.setup.my_sid;
        self.leader_machine_sync(me, out);
    }

    /// Hands a sync from `from` (a learner, or this leader for its own `syncs`) to the leader
    /// machine, which answers it once a quorum confirms it still leads.
    pub(super) fn leader_machine_sync(&mut self, from: Sid, out: &mut Vec<Output>) {
        self.drive(out, |q, a| {
            if let Machine::Leader(l) = &mut q.machine {
                l.sync(from, a);
            }
        });
    }

    /// A learner's forwarded client request: prepped as that session's write, then proposed.
    pub(super) fn on_forwarded(&mut self, from: Sid, req: codec::ForwardedRequest, out: &mut Vec<Output>) {
        let codec::ForwardedRequest { session_id, cxid, op_type, request, authinfo } = req;
        let zxid = self.next_zxid();
        let live = self.sessions.get(session_id).is_some_and(|s| !s.closing);
        let txn = if op_type == OpCode::CreateSession.code() {
            let Ok(bytes) = <[u8; 4]>::try_from(request.get(..4).unwrap_or_default()) else {
                out.push(Output::Quorum(QuorumOutput::PeerClose {
                    sid: from,
                    reason: "malformed createSession".into(),
                }));
                return;
            };
            Txn::CreateSession { timeout_ms: i32::from_be_bytes(bytes) }
        } else if op_type == OpCode::Sync.code() {
            return self.leader_machine_sync(from, out);
        } else if op_type == OpCode::CloseSession.code() {
            self.sessions.set_closing(session_id);
            self.prep.prep_close_session(&self.tree, session_id, zxid)
        } else if !live {
            Txn::Error { err: ErrorCode::SessionExpired.code() }
        } else {
            self.prep_forwarded(session_id, op_type, &request, authinfo, zxid)
        };
        let txn_type = txn.header_type(op_type);
        self.propose_typed(session_id, cxid, txn_type, txn, Origin::Internal, out);
    }

    pub(super) fn prep_forwarded(
        &mut self,
        session_id: i64,
        op_type: i32,
        request: &[u8],
        auth: Vec<warden_proto::Id>,
        zxid: Zxid,
    ) -> Txn {
        let req = match Request::decode(op_type, request) {
            Ok(r) if crate::writes::write_ops(&r).is_some() => r,
            _ => return Txn::Error { err: ErrorCode::MarshallingError.code() },
        };
        if let Request::Reconfig(r) = &req {
            return self.prep_reconfig(&auth, zxid, r);
        }
        Self::prep_write(&mut self.prep, &self.tree, &self.cfg, session_id, &auth, zxid, req)
    }
}
