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
            if let Some((expected, origin)) = waiter {
                // The leader proposes the request's txn after everything it had sent us.
                let expected = Expected { after: q.last_logged(), ..expected };
                q.awaiting.push(request.session_id, request.cxid, expected, origin);
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
        let expected = Expected { op: OpCode::CreateSession, path: None, after: 0 };
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

/// Learner: this server's requests forwarded to the leader and not answered yet, per session in
/// the order they were forwarded, which is the order the leader proposes their txns in.
#[derive(Debug, Default)]
pub(crate) struct Awaiting(HashMap<i64, VecDeque<Waiter>, warden_tree::FastHash>);

#[derive(Debug)]
struct Waiter {
    cxid: i32,
    expected: Expected,
    origin: Origin,
}

impl Awaiting {
    pub(crate) fn push(&mut self, session_id: i64, cxid: i32, expected: Expected, origin: Origin) {
        self.0.entry(session_id).or_default().push_back(Waiter { cxid, expected, origin });
    }

    /// Who waits for this committed txn: the session's oldest forwarded request, if the txn
    /// carries its cxid and can be its outcome ([`Expected`]); else nobody here (ZooKeeper's
    /// CommitProcessor likewise answers only the head of the session's queue).
    pub(crate) fn take(&mut self, hdr: &TxnHeader, txn: &Txn) -> Option<Origin> {
        let queue = self.0.get_mut(&hdr.client_id)?;
        let head = queue.front()?;
        if head.cxid != hdr.cxid || !head.expected.fits(hdr.zxid, txn) {
            let zxid = format_args!("{:#x}", hdr.zxid);
            tracing::debug!(session_id = hdr.client_id, cxid = hdr.cxid, head = head.cxid, %zxid,
                txn_type = hdr.txn_type, "a txn of this session not answering its oldest forwarded request: \
                another server's connection to the session sent it");
            return None;
        }
        let origin = queue.pop_front().map(|w| w.origin);
        if queue.is_empty() {
            self.0.remove(&hdr.client_id);
        }
        origin
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

/// What the txn of a request this learner forwarded can look like.
///
/// A commit is paired with the request waiting for it by session id and cxid, as ZooKeeper's
/// CommitProcessor pairs them. Two connections on two servers can share a session (a client
/// took it over while the old connection lives on) and each numbers its own requests, so another
/// server's txn can carry the pair of a request waiting here. A txn that cannot be that request's
/// outcome does not answer it: a txn the leader proposed before it could have had the request
/// (at or below this server's log end when it forwarded it), another kind of write, or a write of
/// another path. Such a txn is applied like any other server's, and the request waits on for its
/// own. An error txn of the right age fits every request: two failing writes with the same cxid,
/// forwarded at the same time from two servers, stay as ambiguous as they are in ZooKeeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    op: OpCode,
    /// The hash of the request's path, for writes of one node.
    path: Option<u64>,
    /// The learner's last logged zxid when it forwarded the request: the txn's is above it.
    after: i64,
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
        Expected { op: req.op_code(), path: path.map(|p| path_hash(p.as_bytes())), after: 0 }
    }

    /// Whether `txn`, committed at `zxid`, can be the outcome of the request.
    pub(crate) fn fits(&self, zxid: i64, txn: &Txn) -> bool {
        use OpCode as O;
        if zxid <= self.after {
            return false;
        }
        let path = match (self.op, txn) {
            (_, Txn::Error { .. }) => return true,
            (
                O::Create | O::Create2 | O::CreateContainer | O::CreateTtl,
                Txn::Create { path, .. } | Txn::CreateContainer { path, .. } | Txn::CreateTtl { path, .. },
            ) => {
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

    /// The zxid the tests' txns commit at, above every request's `after` but the one that says.
    const ZXID: i64 = 0x1_0000_0010;

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
        assert!(!waiting.fits(ZXID, &Txn::CloseSession { paths_to_delete: vec!["/e".into()] }));
        assert!(waiting.fits(ZXID, &created("/a")));
        // Every write can fail: an error txn answers it, whoever's it was.
        assert!(waiting.fits(ZXID, &Txn::Error { err: ErrorCode::NodeExists.code() }));
        assert!(Expected::of(&Request::CloseSession).fits(ZXID, &Txn::CloseSession { paths_to_delete: Vec::new() }));
        assert!(!Expected::of(&Request::CloseSession).fits(ZXID, &created("/a")));
    }

    #[test]
    fn a_txn_fits_only_a_request_of_its_kind_on_its_path() {
        let waiting = Expected::of(&set_data("/a"));
        assert!(waiting.fits(ZXID, &data_set("/a")));
        assert!(!waiting.fits(ZXID, &data_set("/b")));
        assert!(!waiting.fits(ZXID, &created("/a")));
        assert!(!Expected::of(&create2("/a")).fits(ZXID, &created("/b")));
        assert!(!Expected::of(&create2("/a")).fits(ZXID, &data_set("/a")));
        // A create with container flags is logged as a createContainer: the same kind.
        let container = Txn::CreateContainer { path: "/a".into(), data: None, acl: Vec::new(), parent_cversion: 1 };
        assert!(Expected::of(&create2("/a")).fits(ZXID, &container));
        // A multi is answered by a multi txn, whatever its ops.
        assert!(Expected::of(&Request::Multi(Vec::new())).fits(ZXID, &Txn::Multi(vec![data_set("/x")])));
        assert!(!Expected::of(&Request::Multi(Vec::new())).fits(ZXID, &data_set("/x")));
    }

    #[test]
    fn a_sequential_create_fits_its_txn_with_the_ten_digit_suffix() {
        let waiting = Expected::of(&create2("/q/n-"));
        assert!(waiting.fits(ZXID, &created("/q/n-0000000007")));
        assert!(!waiting.fits(ZXID, &created("/q/m-0000000007")));
        // Cutting the suffix counts bytes: a short path with multibyte characters is no trouble.
        assert!(!Expected::of(&create2("/é")).fits(ZXID, &created("/ééééé")));
    }

    #[test]
    fn a_txn_proposed_before_the_request_was_forwarded_is_not_its_outcome() {
        // The second fuzz finding: client 1's delete (xid 9), forwarded after its server had
        // applied 0xc00000023, was answered by the error txn 0xc00000021 of client 0's create2
        // with the same xid on another server: a zxid below one client 1 had already seen.
        let waiting = Expected { after: ZXID + 2, ..Expected::of(&set_data("/a")) };
        assert!(!waiting.fits(ZXID, &Txn::Error { err: ErrorCode::NoNode.code() }));
        assert!(!waiting.fits(ZXID + 2, &data_set("/a")));
        assert!(waiting.fits(ZXID + 3, &Txn::Error { err: ErrorCode::NoNode.code() }));
        assert!(waiting.fits(ZXID + 3, &data_set("/a")));
    }

    #[test]
    fn a_commit_answers_only_the_sessions_oldest_forwarded_request() {
        // The same input, past that: client 1 had writes up to xid 10 and a closeSession xid 11 forwarded when
        // client 0's closeSession xid 11 (same session, another server) committed; pairing it
        // with client 1's close answered that before the writes ahead of it, at a lower zxid.
        let hdr = |cxid, zxid| TxnHeader { client_id: 7, cxid, zxid, time_ms: 0, txn_type: 0 };
        let origin = |xid| Origin::Client { conn: 1, xid, ops: crate::writes::WriteOps::One(5), fwd: true };
        let mut awaiting = Awaiting::default();
        awaiting.push(7, 5, Expected::of(&set_data("/a")), origin(5));
        awaiting.push(7, 11, Expected::of(&Request::CloseSession), origin(11));
        let closed = Txn::CloseSession { paths_to_delete: Vec::new() };
        assert!(awaiting.take(&hdr(11, ZXID), &closed).is_none(), "xid 5 is still ahead of it");
        assert!(awaiting.take(&hdr(5, ZXID + 1), &data_set("/a")).is_some());
        assert!(matches!(awaiting.take(&hdr(11, ZXID + 2), &closed), Some(Origin::Client { xid: 11, .. })));
        assert!(awaiting.is_empty());
    }

    #[test]
    fn a_new_sessions_handshake_fits_only_a_create_session() {
        let handshake = Expected { op: OpCode::CreateSession, path: None, after: 0 };
        assert!(handshake.fits(ZXID, &Txn::CreateSession { timeout_ms: 4_000 }));
        assert!(!handshake.fits(ZXID, &Txn::CloseSession { paths_to_delete: Vec::new() }));
        assert!(!handshake.fits(ZXID, &created("/a")));
    }
}
