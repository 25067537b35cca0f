//! A learner's side of the node: forwarding writes, sessions and reconnects to the leader, syncs.

use super::*;

impl Node {
    pub(crate) fn learner_touched(&mut self, session_id: i64, timeout_ms: u32) {
        if self.is_learner() {
            self.ensemble_mut().touched.insert(session_id, timeout_ms as i32);
        }
    }

    pub(super) fn forward(&mut self, request: codec::ForwardedRequest, origin: Option<Origin>, out: &mut Vec<Output>) {
        self.drive(out, |q, a| {
            let Machine::Learner(l) = &mut q.machine else { return };
            l.forward(&request, a);
            if let Some(origin) = origin {
                q.awaiting.insert((request.session_id, request.cxid), origin);
            }
        });
    }

    /// A new session on a learner: the id is ours (our sid in its top byte), the createSession txn
    /// is the leader's.
    pub(crate) fn forward_create_session(&mut self, conn: ConnId, id: i64, timeout_ms: u32, out: &mut Vec<Output>) {
        let arrived_ms = self.now.mono_ms;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.push_back(Pending::Forwarded { cxid: 0, arrived_ms });
        }
        let request = codec::ForwardedRequest {
            session_id: id,
            cxid: 0,
            op_type: OpCode::CreateSession.code(),
            request: (timeout_ms as i32).to_be_bytes().to_vec(),
            authinfo: Vec::new(),
        };
        self.forward(request, Some(Origin::Connect { conn, fwd: true }), out);
    }

    /// A write, closeSession or sync from a learner's client goes to the leader; the reply waits
    /// in the connection's queue (reads behind it wait too).
    pub(crate) fn forward_request(
        &mut self,
        conn: ConnId,
        xid: i32,
        session_id: i64,
        req: Request,
        out: &mut Vec<Output>,
    ) {
        let arrived_ms = self.now.mono_ms;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.push_back(Pending::Forwarded { cxid: xid, arrived_ms });
        }
        let mut w = warden_proto::jute::Writer::new();
        req.encode_body(&mut w);
        let request = codec::ForwardedRequest {
            session_id,
            cxid: xid,
            op_type: req.op_code().code(),
            request: w.into_inner(),
            authinfo: self.conns.get(&conn).map(|c| c.auth.clone()).unwrap_or_default(),
        };
        let origin = match &req {
            Request::Sync(r) => {
                self.ensemble_mut().syncs.push_back(SyncWaiter::Client { conn, xid, path: r.path.clone() });
                None
            }
            _ => {
                if matches!(req, Request::CloseSession) {
                    self.sessions.set_closing(session_id);
                }
                let ops = crate::writes::write_ops(&req).unwrap_or_default();
                Some(Origin::Client { conn, xid, ops, fwd: true })
            }
        };
        self.forward(request, origin, out);
    }

    /// A reconnect with an existing session (password already checked): the connection waits
    /// for the leader's answer to REVALIDATE.
    pub(crate) fn learner_revalidate(&mut self, conn: ConnId, c: crate::conn::Conn, id: i64, out: &mut Vec<Output>) {
        let timeout_ms = c.timeout_ms as i32;
        self.conns.insert(conn, Box::new(c));
        let q = self.ensemble_mut();
        if !matches!(q.machine, Machine::Learner(_)) {
            return;
        }
        if let Some(old) = q.revalidating.insert(id, conn) {
            // ZooKeeper keeps only the newest waiting connection of a session; the older one would
            // never be answered, so it is closed.
            self.drop_conn(old);
            out.push(Output::Close { conn: old });
        }
        self.counters.revalidate_count += 1;
        self.drive(out, |q, a| {
            if let Machine::Learner(l) = &mut q.machine {
                l.revalidate(id, timeout_ms, a);
            }
        });
    }

    /// A connection waiting for a REVALIDATE answer is gone (the answer will be ignored).
    pub(crate) fn forget_revalidation(&mut self, conn: ConnId) {
        if let Mode::Ensemble(q) = &mut self.mode {
            q.revalidating.retain(|_, c| *c != conn);
        }
    }

    /// The leader's REVALIDATE answer.
    pub(super) fn revalidated(&mut self, session_id: i64, valid: bool, out: &mut Vec<Output>) {
        let Some(conn) = self.ensemble_mut().revalidating.remove(&session_id) else {
            return tracing::debug!(session_id, "REVALIDATE answer for no waiting connection");
        };
        let Some(c) = self.conns.remove(&conn) else { return };
        if !valid {
            self.drop_conn(conn);
            return self.answer_expired(conn, c.read_only_byte, out);
        }
        if self.sessions.get(session_id).is_none() {
            // The leader vouches for it; our table follows the leader's (this can only lag).
            self.sessions.add(session_id, c.timeout_ms, self.now.mono_ms);
        }
        self.resume_session(conn, *c, session_id, out);
    }

    /// The leader answered this server's oldest sync (a client's, or a read barrier).
    pub(super) fn sync_done(&mut self, out: &mut Vec<Output>) {
        let (conn, xid, path) = match self.ensemble_mut().syncs.pop_front() {
            Some(SyncWaiter::Client { conn, xid, path }) => (conn, xid, path),
            Some(SyncWaiter::Barrier(id)) => return self.barrier_done(id, out),
            None => return,
        };
        let frame = self.reply_frame(xid, 0, Some(&Response::Sync { path }));
        if let Some(c) = self.conns.get_mut(&conn) {
            c.complete_forwarded(xid, frame, false);
        }
        self.drain(conn, out);
    }
}
