//! A learner's side of the node: forwarding writes, sessions and reconnects to the leader, syncs.

use super::*;

impl Node {
    pub(crate) fn learner_touched(&mut self, session_id: i64, timeout_ms: u32) {
        if self.is_learner() {
            self.ensemble_mut().touched.insert(session_id, timeout_ms as i32);
        }
    }

    pub(super) fn forward(
        &mut self,
        request: codec::ForwardedRequest,
        waiter: Option<(Expected, Origin)>,
        out: &mut Vec<Output>,
    ) {
        self.drive(out, |q, a| {
            let Machine::Learner(l) = &mut q.machine else { return };
            l.forward(&request, a);
            if let Some(waiter) = waiter {
                q.awaiting.insert((request.session_id, request.cxid), waiter);
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
        let expected = Expected { op: OpCode::CreateSession, path: None };
        self.forward(request, Some((expected, Origin::Connect { conn, fwd: true })), out);
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
        let waiter = match &req {
            Request::Sync(r) => {
                self.ensemble_mut().syncs.push_back(SyncWaiter::Client { conn, xid, path: r.path.clone() });
                None
            }
            _ => {
                if matches!(req, Request::CloseSession) {
                    self.sessions.set_closing(session_id);
                }
                let ops = crate::writes::write_ops(&req).unwrap_or_default();
                Some((Expected::of(&req), Origin::Client { conn, xid, ops, fwd: true }))
            }
        };
        self.forward(request, waiter, out);
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

/// What the txn of a request this learner forwarded can look like.
///
/// A commit is paired with the request waiting for it by session id and cxid, as ZooKeeper's
/// CommitProcessor pairs them. Two connections on two servers can share a session (a client
/// took it over while the old connection lives on) and each numbers its own requests, so another
/// server's txn can carry the pair of a request waiting here. A txn that cannot be that request's
/// outcome (another kind of write, another path) does not answer it: it is applied like any other
/// server's txn, and the request waits on for its own. An error txn fits every request; a
/// collision of two failing writes stays as ambiguous as it is in ZooKeeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    op: OpCode,
    /// The hash of the request's path, for writes of one node.
    path: Option<u64>,
}

/// A create's sequential suffix: ten digits (`%010d`).
const SEQUENTIAL_SUFFIX: usize = 10;

fn path_hash(path: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    warden_tree::FastHash::default().hash_one(path)
}

impl Expected {
    pub(crate) fn of(req: &Request) -> Self {
        let path = match req {
            Request::Create(r) | Request::Create2(r) | Request::CreateContainer(r) => Some(&r.path),
            Request::CreateTtl(r) => Some(&r.path),
            Request::Delete(r) => Some(&r.path),
            Request::DeleteContainer(r) => Some(&r.path),
            Request::SetData(r) => Some(&r.path),
            Request::SetAcl(r) => Some(&r.path),
            _ => None,
        };
        Expected { op: req.op_code(), path: path.map(|p| path_hash(p.as_bytes())) }
    }

    /// Whether `txn` can be the outcome of the request.
    pub(crate) fn fits(&self, txn: &Txn) -> bool {
        use OpCode as O;
        let path = match (self.op, txn) {
            (_, Txn::Error { .. }) => return true,
            (O::Create | O::Create2 | O::CreateContainer | O::CreateTtl, Txn::Create { path, .. })
            | (O::Create | O::Create2 | O::CreateContainer | O::CreateTtl, Txn::CreateContainer { path, .. })
            | (O::Create | O::Create2 | O::CreateContainer | O::CreateTtl, Txn::CreateTtl { path, .. }) => {
                // A sequential create's txn names the node with its suffix.
                let p = path.as_bytes();
                return self.path.is_some_and(|h| {
                    h == path_hash(p)
                        || p.len() > SEQUENTIAL_SUFFIX && h == path_hash(&p[..p.len() - SEQUENTIAL_SUFFIX])
                });
            }
            (O::Delete | O::DeleteContainer, Txn::Delete { path } | Txn::DeleteContainer { path })
            | (O::SetData, Txn::SetData { path, .. })
            | (O::SetAcl, Txn::SetAcl { path, .. }) => path,
            (O::Multi, Txn::Multi(_))
            | (O::Reconfig, Txn::Reconfig { .. })
            | (O::CloseSession, Txn::CloseSession { .. })
            | (O::CreateSession, Txn::CreateSession { .. }) => return true,
            _ => return false,
        };
        self.path == Some(path_hash(path.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_proto::request::{CreateRequest, SetDataRequest};

    fn create2(path: &str) -> Request {
        Request::Create2(CreateRequest { path: path.into(), data: None, acl: Vec::new(), flags: 0 })
    }

    fn set_data(path: &str) -> Request {
        Request::SetData(SetDataRequest { path: path.into(), data: None, version: -1 })
    }

    fn created(path: &str) -> Txn {
        Txn::Create { path: path.into(), data: None, acl: Vec::new(), ephemeral: false, parent_cversion: 1 }
    }

    fn data_set(path: &str) -> Txn {
        Txn::SetData { path: path.into(), data: None, version: 1 }
    }

    #[test]
    fn another_connections_close_session_does_not_answer_a_create_with_the_same_cxid() {
        // The fuzz finding: client 2 took client 0's session over on another server, and both
        // had xid 5 in flight, a closeSession and a create2.
        let waiting = Expected::of(&create2("/a"));
        assert!(!waiting.fits(&Txn::CloseSession { paths_to_delete: vec!["/e".into()] }));
        assert!(waiting.fits(&created("/a")));
        // Every write can fail: an error txn answers it, whoever's it was.
        assert!(waiting.fits(&Txn::Error { err: ErrorCode::NodeExists.code() }));
        assert!(Expected::of(&Request::CloseSession).fits(&Txn::CloseSession { paths_to_delete: Vec::new() }));
        assert!(!Expected::of(&Request::CloseSession).fits(&created("/a")));
    }

    #[test]
    fn a_txn_fits_only_a_request_of_its_kind_on_its_path() {
        let waiting = Expected::of(&set_data("/a"));
        assert!(waiting.fits(&data_set("/a")));
        assert!(!waiting.fits(&data_set("/b")));
        assert!(!waiting.fits(&created("/a")));
        assert!(!Expected::of(&create2("/a")).fits(&created("/b")));
        assert!(!Expected::of(&create2("/a")).fits(&data_set("/a")));
        // A create with container flags is logged as a createContainer: the same kind.
        let container = Txn::CreateContainer { path: "/a".into(), data: None, acl: Vec::new(), parent_cversion: 1 };
        assert!(Expected::of(&create2("/a")).fits(&container));
        // A multi is answered by a multi txn, whatever its ops.
        assert!(Expected::of(&Request::Multi(Vec::new())).fits(&Txn::Multi(vec![data_set("/x")])));
        assert!(!Expected::of(&Request::Multi(Vec::new())).fits(&data_set("/x")));
    }

    #[test]
    fn a_sequential_create_fits_its_txn_with_the_ten_digit_suffix() {
        let waiting = Expected::of(&create2("/q/n-"));
        assert!(waiting.fits(&created("/q/n-0000000007")));
        assert!(!waiting.fits(&created("/q/m-0000000007")));
        // Cutting the suffix counts bytes: a short path with multibyte characters is no trouble.
        assert!(!Expected::of(&create2("/é")).fits(&created("/ééééé")));
    }

    #[test]
    fn a_new_sessions_handshake_fits_only_a_create_session() {
        let handshake = Expected { op: OpCode::CreateSession, path: None };
        assert!(handshake.fits(&Txn::CreateSession { timeout_ms: 4_000 }));
        assert!(!handshake.fits(&Txn::CloseSession { paths_to_delete: Vec::new() }));
        assert!(!handshake.fits(&created("/a")));
    }
}
