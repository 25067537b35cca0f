//! Read-only mode (`readonlymode.enabled`), as ZooKeeper's `ReadOnlyZooKeeperServer`.
//!
//! A quorum member that has been LOOKING for `max(2000 ms, tickTime)` (ZooKeeper's grace period
//! before it starts its read-only server) serves clients that said they can live with a read-only
//! server (the `readOnly` byte of their ConnectRequest); others are refused by closing the
//! connection. The ConnectResponse carries `readOnly = true`. Reads are answered from the local
//! tree; every write, `sync`, and the close of a session created before the partition get
//! `NOTREADONLY`. New sessions are local: created here without a txn, never replicated, expired
//! here, and forgotten when the server takes a role again. Taking a role (the election ended)
//! closes every connection, as ZooKeeper shuts its read-only server down.
//!
//! The timing is decided here from the clock the shell passes in: nothing starts a timer.

use warden_proto::connect::ConnectRequest;
use warden_proto::request::Request;
use warden_proto::ErrorCode;

use crate::conn::{Conn, Pending};
use crate::node::{ConnId, Node, Output};

/// ZooKeeper's lower bound on the grace period before a LOOKING server goes read-only.
const MIN_GRACE_MS: u64 = 2000;

impl Node {
    /// Whether this server currently serves read-only clients: quorum mode with read-only mode
    /// enabled, LOOKING for at least the grace period (as of the time of the last step).
    pub fn read_only(&self) -> bool {
        let grace_ms = MIN_GRACE_MS.max(u64::from(self.cfg.tick_time_ms));
        self.cfg.read_only_enabled
            && self.looking_since_ms().is_some_and(|since| self.now.mono_ms >= since.saturating_add(grace_ms))
    }

    /// Whether connections are served by the read-only rules: every connection alive while the
    /// node is LOOKING was accepted in read-only mode (taking or losing a role closes them all).
    pub(crate) fn in_read_only_role(&self) -> bool {
        self.looking_since_ms().is_some()
    }

    /// A ConnectRequest from a read-only client while read-only (`on_connect` checked the rest):
    /// resume a known session or create a local one.
    pub(crate) fn read_only_connect(&mut self, conn: ConnId, c: Conn, req: ConnectRequest, out: &mut Vec<Output>) {
        if req.session_id != 0 {
            self.reconnect(conn, c, req, out);
            return;
        }
        let id = self.sessions.next_session_id();
        self.sessions.add(id, c.timeout_ms, self.now.mono_ms);
        self.local_sessions.insert(id);
        self.resume_session(conn, c, id, out);
    }

    /// Applies the read-only rules to a request of a live session: returns true if it goes on to
    /// the ordinary read path, false if it was answered here.
    pub(crate) fn read_only_admits(
        &mut self,
        conn: ConnId,
        xid: i32,
        session_id: i64,
        req: &Request,
        out: &mut Vec<Output>,
    ) -> bool {
        let is_write = matches!(req, Request::Sync(_)) || crate::writes::write_ops(req).is_some();
        if !is_write {
            return true;
        }
        let local = self.local_sessions.contains(&session_id);
        let (code, close_after) = match req {
            Request::CloseSession if local => {
                self.local_sessions.remove(&session_id);
                self.sessions.remove(session_id);
                self.session_conn.remove(&session_id);
                (0, true)
            }
            _ => (ErrorCode::NotReadOnly.code(), false),
        };
        let frame = self.reply_frame(xid, code, None);
        let arrived_ms = self.now.mono_ms;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.push_back(Pending::Done { frame, arrived_ms, close_after });
        }
        self.drain(conn, out);
        false
    }

    /// Local sessions whose deadline passed are forgotten and their connections closed (no txn:
    /// they were never replicated). Sessions created before the partition belong to the leader and
    /// are not expired here.
    pub(crate) fn expire_local_sessions(&mut self, out: &mut Vec<Output>) {
        let now_ms = self.now.mono_ms;
        let mut due: Vec<i64> = self
            .local_sessions
            .iter()
            .copied()
            .filter(|id| self.sessions.get(*id).is_none_or(|s| s.expires_at_ms <= now_ms))
            .collect();
        due.sort_unstable();
        for id in due {
            tracing::info!(session = format_args!("{id:#x}"), "local read-only session expired");
            self.local_sessions.remove(&id);
            self.sessions.remove(id);
            if let Some(conn) = self.session_conn.remove(&id) {
                self.drop_conn(conn);
                out.push(Output::Close { conn });
            }
        }
    }

    /// Forgets every local session (the server takes a role; their connections are closed).
    pub(crate) fn forget_local_sessions(&mut self) {
        let ids: Vec<i64> = std::mem::take(&mut self.local_sessions).into_iter().collect();
        for id in ids {
            self.sessions.remove(id);
        }
    }
}
