//! The node state machine: inputs in, outputs out.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use warden_proto::ensure;

use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::header::{keeper_state, ReplyHeader, WatcherEvent};
use warden_proto::request::Request;
use warden_proto::response::{encode_notification, encode_reply, Response};
use warden_proto::{perms, xid, ErrorCode, Txn, TxnHeader};
use warden_tree::{check_acl, ApplyOutcome, DataTree, Prep, TreeEvent, TreeEventKind, WatchEventType, WatchManager};

use warden_proto::quorum::QuorumPacket;
use warden_quorum::zab::EpochKind;
use warden_quorum::Sid;

use crate::conn::{Conn, Pending};
use crate::roles::{Quorum, SnapshotData};
use crate::session::{session_password, SessionTracker};
use crate::stats::Latency;
use crate::stats::LatencyKind;

/// Identifies one client connection; assigned by the shell, never reused while the node runs.
pub type ConnId = u64;

/// The two clocks a step needs: monotonic time for session expiry, wall time for znode ctime/mtime
/// and TTLs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Clock {
    pub mono_ms: u64,
    pub wall_ms: i64,
}

/// Settings the node acts on (a subset of zoo.cfg).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub tick_time_ms: u32,
    pub min_session_timeout_ms: u32,
    pub max_session_timeout_ms: u32,
    /// myid; 0 when standalone. Goes into the top byte of session ids.
    pub server_id: u8,
    /// `user:BASE64(SHA1)`, as `zookeeper.DigestAuthenticationProvider.superDigest`.
    pub super_digest: Option<String>,
    pub skip_acl: bool,
    pub ttl_enabled: bool,
    pub reconfig_enabled: bool,
    /// `standaloneEnabled`: a reconfig must leave at least two voters (one when false).
    pub standalone_enabled: bool,
    pub container_check_interval_ms: u64,
    /// `readonlymode.enabled`: a quorum member that has been LOOKING for a while serves read-only
    /// clients (see `read_only.rs`).
    pub read_only_enabled: bool,
    /// `linearizableReads` (a Warden setting, off by default as ZooKeeper has none): in an
    /// ensemble every data read is served as if a sync preceded it, after a quorum-confirmed sync
    /// that started after the read arrived; reads arriving together share one (`roles/reads.rs`).
    pub linearizable_reads: bool,
    /// `SASLAuthenticationProvider` is registered (`authProvider.N=...`): `sasl` ACL ids are valid.
    pub sasl_provider: bool,
    /// `zookeeper.superUser` and every `zookeeper.superUser.<suffix>`: SASL ids that also get `super`.
    pub sasl_super_users: Vec<String>,
    /// `zookeeper.X509AuthenticationProvider.superUser`: the certificate subject that is also `super`.
    pub x509_super_user: Option<String>,
    /// `enforce.auth.schemes` when `enforce.auth.enabled` (`sessionRequireClientSASLAuth` means
    /// `sasl`); empty: not enforced. The shell checks each has a provider at start-up.
    pub enforce_auth_schemes: Vec<String>,
    /// `zookeeper.allowSaslFailedClients`: a failed SASL exchange keeps the connection (unless
    /// `sasl` is enforced).
    pub allow_sasl_failed_clients: bool,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            tick_time_ms: 3000,
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 60000,
            server_id: 0,
            super_digest: None,
            skip_acl: false,
            ttl_enabled: false,
            reconfig_enabled: false,
            standalone_enabled: true,
            container_check_interval_ms: 60_000,
            read_only_enabled: false,
            linearizable_reads: false,
            sasl_provider: false,
            sasl_super_users: Vec::new(),
            x509_super_user: None,
            enforce_auth_schemes: Vec::new(),
            allow_sasl_failed_clients: false,
        }
    }
}

/// What the shell tells the node.
#[derive(Debug)]
pub enum Input {
    /// A connection's first frame. `x509`: the subject (RFC 2253) of the certificate the client
    /// presented over TLS and the shell verified; the connection then holds `x509:<dn>`.
    Connect { conn: ConnId, addr: SocketAddr, req: ConnectRequest, x509: Option<String> },
    /// A decoded request frame.
    Request { conn: ConnId, xid: i32, req: Request },
    /// A SASL packet (opcode 102) after the shell stepped the connection's SASL mechanism with its
    /// token: the node replies at once and records the identity (`sasl.rs`).
    Sasl { conn: ConnId, xid: i32, outcome: crate::SaslOutcome },
    /// A request frame that could not be turned into a request: unknown opcode (`Unimplemented`) or
    /// undecodable body (`MarshallingError`). The node answers and closes the connection.
    Invalid { conn: ConnId, xid: i32, err: ErrorCode },
    /// The socket is gone.
    Disconnected { conn: ConnId },
    /// A timer tick: expire due session buckets, reap containers and TTL nodes.
    Tick,
    /// Every txn up to this zxid is durable. Only storage produces this.
    Durable { zxid: i64 },
    /// Quorum mode: a packet from peer `from` on the quorum port (in order per peer, TCP).
    Peer { from: Sid, packet: QuorumPacket },
    /// Quorum mode: a leader's snapshot stream, delivered in place of the SNAP packet it followed.
    PeerSnapshot { from: Sid, snapshot: SnapshotData },
    /// Quorum mode: the quorum connection to `sid` closed.
    PeerDisconnected { sid: Sid },
    /// Quorum mode, leader: what the on-disk log holds for learner `sid` (the answer to
    /// `QuorumOutput::ProbeLog`).
    LogProbed { sid: Sid, probe: warden_quorum::zab::LogProbe },
    /// Quorum mode, leader: the shell could not stream `QuorumOutput::SendLogDiff` to `sid` and
    /// closed its connection.
    LogDiffFailed { sid: Sid },
    /// Election result: lead.
    BecomeLeader,
    /// Election result: follow `leader`.
    BecomeFollower { leader: Sid },
    /// Election result (or configuration): observe `leader`.
    BecomeObserver { leader: Sid },
    /// Give up the current role (an election is starting). No `Elect` is emitted for it.
    BecomeLooking,
    /// An epoch file written for `QuorumOutput::PersistEpoch` is durable. Only storage produces this.
    EpochDurable { kind: EpochKind, epoch: i64 },
}

/// What the node asks the shell to do.
#[derive(Debug)]
pub enum Output {
    /// Write this complete frame to the connection. `completes_request` is true for the reply to a
    /// client request (not for notifications), so the shell can count outstanding requests. The
    /// notifications of one event share one `frame`'s bytes.
    Send { conn: ConnId, frame: Bytes, completes_request: bool },
    /// Close the connection once what was sent before is flushed.
    Close { conn: ConnId },
    /// Make this txn durable, then answer with `Input::Durable`. Shared with the node's own
    /// in-flight copy (no per-write copy of the data).
    Persist { hdr: TxnHeader, txn: Arc<Txn> },
    /// Quorum mode: work on the quorum port, the epoch files or the log's history, in order with
    /// the outputs around it.
    Quorum(crate::QuorumOutput),
}

/// Who is waiting for a txn. `fwd` marks a request this learner forwarded to the leader: its
/// queue entry is keyed by cxid (`Pending::Forwarded`), not by zxid.
#[derive(Debug)]
pub(crate) enum Origin {
    /// A client write; `ops` are the request's opcode(s), which choose the reply's shape.
    Client { conn: ConnId, xid: i32, ops: crate::writes::WriteOps, fwd: bool },
    /// A new session's handshake.
    Connect { conn: ConnId, fwd: bool },
    /// Expiry or reaping: nobody waits.
    Internal,
}

/// How a node runs. Standalone-only and ensemble-only state live in their variant, so code of
/// one mode cannot touch the other's; role code reaches the ensemble's through
/// [`Node::ensemble_mut`], which only quorum inputs dispatched by [`Node::step`] reach.
#[derive(Debug)]
pub(crate) enum Mode {
    /// One server: txns persisted and not yet applied, in zxid order.
    Standalone { in_flight: VecDeque<(TxnHeader, Arc<Txn>, Origin)> },
    /// A member of an ensemble.
    Ensemble(Box<Quorum>),
}

/// Why [`Node::replace_data`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreRefused {
    /// Only a standalone server replaces its data: an ensemble member's would diverge.
    Ensemble,
    /// A write is on its way to disk; its zxid would follow the old data.
    WritesInFlight,
}

impl std::fmt::Display for RestoreRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RestoreRefused::Ensemble => {
                "restore replaces one server's data: Warden does it on a standalone server only (start \
                 an ensemble from a restored server's data directory instead)"
            }
            RestoreRefused::WritesInFlight => "writes are in flight; retry when the server is idle",
        })
    }
}

impl std::error::Error for RestoreRefused {}

/// One Warden server's state.
pub struct Node {
    pub(crate) cfg: NodeConfig,
    pub(crate) tree: DataTree,
    pub(crate) prep: Prep,
    pub(crate) watches: WatchManager,
    pub(crate) sessions: SessionTracker,
    /// Boxed: a table of tens of thousands of connections keeps its nodes small. Ordered: a watch
    /// storm visits its watchers in ascending id, which here walks the map's leaves in order
    /// rather than a hash table's buckets at random.
    pub(crate) conns: BTreeMap<ConnId, Box<Conn>>,
    pub(crate) session_conn: HashMap<i64, ConnId, warden_tree::FastHash>,
    /// The last zxid handed out.
    last_zxid: i64,
    /// The last applied txn's event list, emptied: the next apply fills it without allocating.
    spare_events: Vec<TreeEvent>,
    pub(crate) now: Clock,
    last_reap_ms: u64,
    pub(crate) latency: Latency,
    pub(crate) counters: crate::stats::Counters,
    pub(crate) summaries: crate::stats::Summaries,
    /// Bytes read and written per namespace (`read_per_namespace`, `write_per_namespace`).
    pub(crate) namespace_sizes: crate::stats::NamespaceSizes,
    pub(crate) response_sizes: crate::stats::ResponseSizes,
    /// Standalone, or a member of an ensemble.
    pub(crate) mode: Mode,
    /// Read-only mode: sessions created locally, never replicated (`read_only.rs`).
    pub(crate) local_sessions: BTreeSet<i64>,
    /// Expired sessions (marked closing) whose closeSession is not proposed yet, oldest first.
    pub(crate) expiring: VecDeque<i64>,
    /// The last closeSession proposed for an expiry: the next batch waits until it applied.
    pub(crate) expiry_zxid: i64,
}

/// At most this many expired sessions' closeSession txns are in flight at once: an expiry storm
/// goes out in batches, each proposed once the one before has applied, so that the requests of
/// everyone else are served between them instead of queueing behind thousands of closes.
pub const EXPIRY_BATCH: usize = 256;

impl Node {
    pub fn new(cfg: NodeConfig, now: Clock) -> Self {
        let sessions = SessionTracker::new(cfg.tick_time_ms, cfg.server_id, now.mono_ms);
        Self {
            cfg,
            tree: DataTree::new(),
            prep: Prep::new(),
            watches: WatchManager::new(),
            sessions,
            conns: BTreeMap::new(),
            session_conn: HashMap::default(),
            last_zxid: 0,
            spare_events: Vec::new(),
            namespace_sizes: Default::default(),
            now,
            last_reap_ms: now.mono_ms,
            latency: Latency::default(),
            counters: Default::default(),
            summaries: Default::default(),
            response_sizes: Default::default(),
            mode: Mode::Standalone { in_flight: VecDeque::new() },
            local_sessions: BTreeSet::new(),
            expiring: VecDeque::new(),
            expiry_zxid: 0,
        }
    }

    pub fn tree(&self) -> &DataTree {
        &self.tree
    }

    pub fn last_processed_zxid(&self) -> i64 {
        self.tree.last_processed_zxid()
    }

    /// Starts from recovered state (snapshot plus log, already applied to `tree`): the zxid counter
    /// continues from the tree's, and recovered sessions get a fresh deadline, so a client has one
    /// session timeout after the restart to reconnect.
    ///
    /// `replayed`: the log txns replayed onto the snapshot to build `tree`, in zxid order (what
    /// `warden_storage::Recovered::txns_after_snapshot` holds). In an ensemble their gap-free tail
    /// ending at the tree's last zxid becomes the in-memory committed history (up to `LOG_KEEP`
    /// txns after the first one kept as its base), so a restarted leader syncs a learner a few txns
    /// behind by DIFF, as ZooKeeper fills its committedLog while replaying the log at load.
    pub fn restore(&mut self, tree: DataTree, sessions: &[(i64, i32)], replayed: Vec<(TxnHeader, Txn)>) {
        self.last_zxid = tree.last_processed_zxid();
        if let Mode::Ensemble(q) = &mut self.mode {
            q.restored(self.last_zxid, replayed);
        }
        self.install_tree(tree);
        self.restored_config();
        self.prep.clear();
        for &(id, timeout_ms) in sessions {
            self.sessions.add(id, timeout_ms.max(0) as u32, self.now.mono_ms);
        }
    }

    /// Puts `tree` in place of the current one, keeping the count of digest mismatches the old
    /// one saw (a server-wide counter, as ZooKeeper's).
    pub(crate) fn install_tree(&mut self, tree: DataTree) {
        self.counters.digest_mismatches_count += self.tree.digest_mismatches();
        self.tree = tree;
    }

    /// Change records the writes prepared here added, and dropped once applied
    /// (`outstanding_changes_queued`, `outstanding_changes_removed`).
    pub fn outstanding_changes(&self) -> (u64, u64) {
        self.prep.changes_queued_and_removed()
    }

    /// Digests that differed from this server's tree, in its life (`digest_mismatches_count`):
    /// those of loaded snapshots and of txns from a ZooKeeper leader.
    pub fn digest_mismatches(&self) -> u64 {
        self.counters.digest_mismatches_count + self.tree.digest_mismatches()
    }

    /// The admin `restore` command: `tree` (standing at its last processed zxid) and `sessions`
    /// replace this standalone server's data, as ZooKeeper 3.9's `restoreFromSnapshot` replaces
    /// its database. Every client connection is closed (their sessions are those of the old
    /// data), the next zxid follows the restored one. Refused in an ensemble (the other members
    /// would not follow) and while a write is on its way to disk.
    pub fn replace_data(
        &mut self,
        tree: DataTree,
        sessions: &[(i64, i32)],
        out: &mut Vec<Output>,
    ) -> Result<(), RestoreRefused> {
        match &self.mode {
            Mode::Ensemble(_) => return Err(RestoreRefused::Ensemble),
            Mode::Standalone { in_flight } if !in_flight.is_empty() => return Err(RestoreRefused::WritesInFlight),
            Mode::Standalone { .. } => {}
        }
        self.close_all_connections(out);
        let live: Vec<i64> = self.sessions.iter().map(|s| s.id).collect();
        for id in live {
            self.sessions.remove(id);
        }
        self.last_zxid = tree.last_processed_zxid();
        self.install_tree(tree);
        self.prep.clear();
        for &(id, timeout_ms) in sessions {
            self.sessions.add(id, timeout_ms.max(0) as u32, self.now.mono_ms);
        }
        Ok(())
    }

    /// What a snapshot needs, taken at a zxid boundary: the tree (a cheap structural-sharing clone)
    /// and the live sessions with their timeouts.
    pub fn snapshot_state(&self) -> (DataTree, Vec<(i64, i32)>) {
        let sessions = self.sessions.iter().map(|s| (s.id, s.timeout_ms as i32)).collect();
        (self.tree.clone(), sessions)
    }

    /// Handles one input at time `now`, appending what must be done to `out`.
    pub fn step(&mut self, now: Clock, input: Input, out: &mut Vec<Output>) {
        self.now = now;
        if let Mode::Ensemble(_) = self.mode {
            // Before anything is served: a role whose lease ran out (a pause, a clock jump) is
            // given up first.
            self.check_lease(out);
        }
        match input {
            Input::Connect { conn, addr, req, x509 } => self.on_connect(conn, addr, req, x509, out),
            Input::Request { conn, xid, req } => self.on_request(conn, xid, req, out),
            Input::Sasl { conn, xid, outcome } => self.on_sasl(conn, xid, outcome, out),
            Input::Invalid { conn, xid, err } => {
                let frame = self.reply_frame(xid, err.code(), None);
                out.push(Output::Send { conn, frame: frame.into(), completes_request: true });
                out.push(Output::Close { conn });
            }
            Input::Disconnected { conn } => self.on_disconnect(conn),
            Input::Tick => self.on_tick(out),
            Input::Durable { zxid } => match self.mode {
                Mode::Standalone { .. } => self.on_durable(zxid, out),
                Mode::Ensemble(_) => self.quorum_durable(zxid, out),
            },
            other => match self.mode {
                Mode::Standalone { .. } => tracing::warn!(input = ?other, "quorum input on a standalone node ignored"),
                Mode::Ensemble(_) => self.quorum_input(other, out),
            },
        }
        if !self.expiring.is_empty() {
            self.propose_expiries(out);
        }
    }

    fn on_connect(
        &mut self,
        conn: ConnId,
        addr: SocketAddr,
        req: ConnectRequest,
        x509: Option<String>,
        out: &mut Vec<Output>,
    ) {
        self.counters.connection_request_count += 1;
        let mut c = Conn::new(addr);
        if let Some(dn) = x509 {
            // X509AuthenticationProvider: the certificate's subject, and super when it is the
            // configured superuser's.
            if self.cfg.x509_super_user.as_deref() == Some(dn.as_str()) {
                c.auth.push(warden_proto::data::Id::new("super", dn.clone()));
            }
            c.auth.push(warden_proto::data::Id::new("x509", dn));
        }
        let read_only = !self.serving() && self.read_only();
        if !self.serving() && !read_only {
            // ZooKeeper serves clients only once its role is established (synced or leading).
            self.counters.cnxn_closed_without_zk_server_running += 1;
            out.push(Output::Close { conn });
            return;
        }
        if read_only && req.read_only != Some(true) {
            tracing::info!(conn, "refusing a session request from a client that is not read-only");
            out.push(Output::Close { conn });
            return;
        }
        if req.last_zxid_seen > self.last_processed_zxid() {
            tracing::info!(conn, seen = req.last_zxid_seen, "client has seen a newer zxid than this server; refusing");
            out.push(Output::Close { conn });
            return;
        }
        if req.session_id != 0 {
            // processConnectRequest counts every reconnect with a session, valid or not.
            self.counters.connection_revalidate_count += 1;
        }
        c.read_only_byte = req.read_only.map(|_| read_only);
        let timeout =
            (req.timeout_ms.max(0) as u32).clamp(self.cfg.min_session_timeout_ms, self.cfg.max_session_timeout_ms);
        c.timeout_ms = timeout;
        if read_only {
            self.read_only_connect(conn, c, req, out);
            return;
        }
        if req.session_id == 0 {
            let id = self.sessions.next_session_id();
            self.conns.insert(conn, Box::new(c));
            if self.is_learner() {
                self.forward_create_session(conn, id, timeout, out);
                return;
            }
            let origin = Origin::Connect { conn, fwd: false };
            let zxid = self.propose(id, 0, Txn::CreateSession { timeout_ms: timeout as i32 }, origin, out);
            if let Some(c) = self.conns.get_mut(&conn) {
                c.queue.push_back(Pending::Write { zxid, arrived_ms: self.now.mono_ms });
            }
            return;
        }
        self.reconnect(conn, c, req, out);
    }

    pub(crate) fn reconnect(&mut self, conn: ConnId, c: Conn, req: ConnectRequest, out: &mut Vec<Output>) {
        let id = req.session_id;
        if req.passwd != session_password(id) {
            return self.answer_expired(conn, c.read_only_byte, out);
        }
        if self.is_learner() {
            // The leader owns sessions: ask it (REVALIDATE) and answer when it replies.
            return self.learner_revalidate(conn, c, id, out);
        }
        let valid = self.sessions.get(id).is_some_and(|s| !s.closing) && self.sessions.touch(id, self.now.mono_ms);
        if !valid {
            return self.answer_expired(conn, c.read_only_byte, out);
        }
        self.resume_session(conn, c, id, out);
    }

    /// ZooKeeper's answer to a reconnect with an invalid session: timeout 0, session 0, then close.
    pub(crate) fn answer_expired(&mut self, conn: ConnId, read_only: Option<bool>, out: &mut Vec<Output>) {
        let frame = ConnectResponse::expired(read_only).encode_frame();
        out.push(Output::Send { conn, frame: frame.into(), completes_request: false });
        out.push(Output::Close { conn });
    }

    /// A valid existing session moves to connection `conn`: the old connection of the session is
    /// closed, the client gets its ConnectResponse, and requests it sent meanwhile are handled.
    pub(crate) fn resume_session(&mut self, conn: ConnId, mut c: Conn, id: i64, out: &mut Vec<Output>) {
        if let Some(old) = self.session_conn.insert(id, conn) {
            if old != conn {
                self.drop_conn(old);
                out.push(Output::Close { conn: old });
            }
        }
        let timeout = self.sessions.get(id).map_or(c.timeout_ms, |s| s.timeout_ms);
        c.session_id = id;
        c.timeout_ms = timeout;
        self.learner_touched(id, timeout);
        let frame = c.handshake_frame(id);
        let early = std::mem::take(&mut c.before_session);
        self.conns.insert(conn, Box::new(c));
        out.push(Output::Send { conn, frame: frame.into(), completes_request: false });
        self.replay_early(conn, early, out);
    }

    fn on_disconnect(&mut self, conn: ConnId) {
        self.drop_conn(conn);
    }

    /// Forgets a connection: its state, its watches, a revalidation it waited for, and its
    /// session's link to it (the session itself lives on until it is closed or expires).
    /// Closes every client connection (in id order), with its watches.
    pub(crate) fn close_all_connections(&mut self, out: &mut Vec<Output>) {
        let mut conns: Vec<ConnId> = self.conns.keys().copied().collect();
        conns.sort_unstable();
        for conn in conns {
            self.drop_conn(conn);
            out.push(Output::Close { conn });
        }
        self.session_conn.clear();
    }

    pub(crate) fn drop_conn(&mut self, conn: ConnId) {
        self.forget_revalidation(conn);
        if let Some(c) = self.conns.remove(&conn) {
            if self.session_conn.get(&c.session_id) == Some(&conn) {
                self.session_conn.remove(&c.session_id);
            }
        }
        self.watches.remove_connection(conn);
    }

    pub(crate) fn on_request(&mut self, conn: ConnId, xid: i32, req: Request, out: &mut Vec<Output>) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.session_id == 0 {
            c.before_session.push_back((xid, crate::conn::Early::Request(req)));
            return;
        }
        c.received += 1;
        let session_id = c.session_id;
        if !self.enforce_auth(conn, xid, &req, out) {
            return;
        }
        if let Request::Auth(auth) = req {
            // Auth is handled before the pipeline, as ZooKeeper does: it neither touches nor waits.
            self.on_auth(conn, xid, &auth.scheme, &auth.auth, out);
            return;
        }
        if !self.sessions.touch(session_id, self.now.mono_ms) {
            // ZooKeeper drops requests of a closing or unknown session; its close ends the connection.
            return;
        }
        if self.in_read_only_role() && !self.read_only_admits(conn, xid, session_id, &req, out) {
            return;
        }
        if self.is_learner() {
            let timeout = self.sessions.get(session_id).map_or(0, |s| s.timeout_ms);
            self.learner_touched(session_id, timeout);
            if matches!(req, Request::Sync(_)) || crate::writes::write_ops(&req).is_some() {
                self.forward_request(conn, xid, session_id, req, out);
                return;
            }
        }
        if let Request::Sync(r) = &req {
            if self.leader().is_some() {
                return self.leader_sync(conn, xid, r.path.clone(), out);
            }
        }
        if let Some(ops) = crate::writes::write_ops(&req) {
            self.on_write(conn, xid, session_id, req, ops, out);
        } else {
            let arrived_ms = self.now.mono_ms;
            let barrier = self.read_barrier(conn, &req, out);
            let passed = self.barriers_passed();
            let Some(c) = self.conns.get_mut(&conn) else { return };
            if !(c.queue.is_empty() && barrier <= passed) {
                c.queue.push_back(Pending::Read { xid, req, arrived_ms, barrier });
                return self.drain(conn, out);
            }
            // Nothing ahead of it: answered at once. A ping marks an idle connection, which
            // keeps no queue capacity from an earlier burst.
            if matches!(req, Request::Ping) && c.queue.capacity() > 0 {
                c.queue = std::collections::VecDeque::new();
            }
            if self.run_read(conn, xid, req, arrived_ms, out) {
                self.drop_conn(conn);
                out.push(Output::Close { conn });
            }
        }
    }

    fn on_write(
        &mut self,
        conn: ConnId,
        xid: i32,
        session_id: i64,
        req: Request,
        ops: crate::writes::WriteOps,
        out: &mut Vec<Output>,
    ) {
        let zxid = self.next_zxid();
        let txn = if matches!(req, Request::CloseSession) {
            self.sessions.set_closing(session_id);
            self.prep.prep_close_session(&self.tree, session_id, zxid)
        } else if let Request::Reconfig(r) = &req {
            let auth = self.conns.get(&conn).map_or(&[][..], |c| c.auth.as_slice());
            self.prep_reconfig(auth, zxid, r)
        } else {
            let auth = self.conns.get(&conn).map_or(&[][..], |c| c.auth.as_slice());
            Self::prep_write(&mut self.prep, &self.tree, &self.cfg, session_id, auth, zxid, req)
        };
        let txn_type = txn.header_type(ops.codes().first().copied().unwrap_or_default());
        let zxid =
            self.propose_typed(session_id, xid, txn_type, txn, Origin::Client { conn, xid, ops, fwd: false }, out);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.push_back(Pending::Write { zxid, arrived_ms: self.now.mono_ms });
        }
    }

    /// Turns a client write into its txn under `zxid` (a failed check becomes an error txn), as
    /// the session with these auth ids; with skipACL every caller also counts as `super`. Takes
    /// the fields it needs so callers can lend `auth` from the node.
    pub(crate) fn prep_write(
        prep: &mut warden_tree::Prep,
        tree: &warden_tree::DataTree,
        cfg: &NodeConfig,
        session_id: i64,
        auth: &[warden_proto::Id],
        zxid: i64,
        req: Request,
    ) -> Txn {
        let with_super;
        let auth = if cfg.skip_acl {
            with_super = [auth, &[warden_proto::Id::new("super", "")]].concat();
            &with_super[..]
        } else {
            auth
        };
        let ctx = warden_tree::PrepContext {
            session_id,
            auth_ids: auth,
            ttl_enabled: cfg.ttl_enabled,
            is_ephemeral_allowed: true,
            sasl_provider: cfg.sasl_provider,
        };
        match crate::writes::to_write_op(req) {
            Ok(op) => prep.prep_owned(tree, &ctx, zxid, op).unwrap_or_else(|e| Txn::Error { err: e.code() }),
            Err(e) => Txn::Error { err: e.code() },
        }
    }

    /// The zxid the next proposal gets (prep records pending changes under it).
    pub(crate) fn next_zxid(&self) -> i64 {
        match self.leader() {
            Some(l) => crate::roles::leader_next_zxid(l),
            None => self.last_zxid + 1,
        }
    }

    /// Assigns the next zxid and asks for the txn to be made durable (as leader: proposes it).
    pub(crate) fn propose(
        &mut self,
        session_id: i64,
        cxid: i32,
        txn: Txn,
        origin: Origin,
        out: &mut Vec<Output>,
    ) -> i64 {
        let txn_type = txn.op().code();
        self.propose_typed(session_id, cxid, txn_type, txn, origin, out)
    }

    /// As `propose`, with the header's txn type (`Txn::header_type` of the request's opcode).
    pub(crate) fn propose_typed(
        &mut self,
        session_id: i64,
        cxid: i32,
        txn_type: i32,
        txn: Txn,
        origin: Origin,
        out: &mut Vec<Output>,
    ) -> i64 {
        let Mode::Standalone { in_flight } = &mut self.mode else {
            return self.leader_propose(session_id, cxid, txn_type, txn, origin, out);
        };
        self.last_zxid += 1;
        let hdr = TxnHeader { client_id: session_id, cxid, zxid: self.last_zxid, time_ms: self.now.wall_ms, txn_type };
        let txn = Arc::new(txn);
        out.push(Output::Persist { hdr, txn: txn.clone() });
        in_flight.push_back((hdr, txn, origin));
        self.last_zxid
    }

    /// Standalone: applies every in-flight txn up to `zxid`, now durable.
    fn on_durable(&mut self, zxid: i64, out: &mut Vec<Output>) {
        loop {
            let Mode::Standalone { in_flight } = &mut self.mode else { return };
            let Some((hdr, txn, origin)) = in_flight.pop_front_if(|(h, _, _)| h.zxid <= zxid) else { return };
            // Written and let go by the storage side: its data can move into the tree.
            match Arc::try_unwrap(txn) {
                Ok(mut txn) => {
                    let outcome = self.tree.apply_taking_data(&hdr, &mut txn, std::mem::take(&mut self.spare_events));
                    self.applied(hdr, &txn, outcome, origin, out);
                }
                Err(txn) => self.apply(hdr, &txn, origin, out),
            }
        }
    }

    /// Applies one durable txn: tree, watches, sessions, then the waiting reply.
    pub(crate) fn apply(&mut self, hdr: TxnHeader, txn: &Txn, origin: Origin, out: &mut Vec<Output>) {
        let outcome = self.tree.apply(&hdr, txn);
        self.applied(hdr, txn, outcome, origin, out);
    }

    /// What follows applying a txn to the tree: watches, sessions, then the waiting reply. `txn`
    /// may have lost its data to the tree.
    fn applied(&mut self, hdr: TxnHeader, txn: &Txn, outcome: ApplyOutcome, origin: Origin, out: &mut Vec<Output>) {
        self.prep.applied(hdr.zxid);
        let ApplyOutcome { result, mut events } = outcome;
        // FinalRequestProcessor's propagation_latency: wall clocks, so skew can make it negative.
        if let Ok(ms) = u64::try_from(self.now.wall_ms - hdr.time_ms) {
            self.summaries.propagation_latency.record(ms);
        }
        for ev in &events {
            match ev.kind {
                TreeEventKind::Created | TreeEventKind::DataChanged => {
                    self.namespace_sizes.write(&ev.path, ev.data_len)
                }
                TreeEventKind::Deleted => self.namespace_sizes.write(&ev.path, 0),
                TreeEventKind::ChildrenChanged => {}
            }
            let fired = self.watches.trigger(ev);
            if !fired.is_empty() {
                let s = &mut self.summaries;
                let summary = match ev.kind {
                    TreeEventKind::Created => &mut s.node_created_watch_count,
                    TreeEventKind::Deleted => &mut s.node_deleted_watch_count,
                    TreeEventKind::DataChanged => &mut s.node_changed_watch_count,
                    TreeEventKind::ChildrenChanged => &mut s.node_children_watch_count,
                };
                summary.record(fired.len() as u64);
            }
            // A storm's notifications are equal bytes: encoded once per event type (every
            // notification of one event is about its path) and shared by every watcher, with no
            // allocation per watcher.
            let mut encoded: Option<(WatchEventType, Bytes)> = None;
            // Most nodes anyone may read: then no watcher's ids need looking up.
            let anyone_reads = self.cfg.skip_acl || warden_tree::acl::world_readable(&ev.acl);
            for fired in fired {
                if !anyone_reads && !check_acl(&ev.acl, perms::READ, self.conn_ids(fired.conn)) {
                    // 3.9.2+: a watcher that may not read the node is not told about it (ZOOKEEPER-4799).
                    continue;
                }
                let frame = match &encoded {
                    Some((t, frame)) if *t == fired.event_type => frame.clone(),
                    _ => {
                        let notification = WatcherEvent {
                            event_type: fired.event_type.code(),
                            state: keeper_state::SYNC_CONNECTED,
                            path: ev.path.to_string(),
                        };
                        let frame = Bytes::from(encode_notification(hdr.zxid, &notification));
                        encoded = Some((fired.event_type, frame.clone()));
                        frame
                    }
                };
                self.notify(fired.conn, frame, out);
            }
        }
        events.clear();
        self.spare_events = events;
        match txn {
            Txn::CreateSession { timeout_ms } => self.sessions.add(hdr.client_id, *timeout_ms as u32, self.now.mono_ms),
            Txn::CloseSession { .. } => self.session_closed(hdr.client_id, &origin, out),
            Txn::Reconfig { data, .. } => self.reconfig_applied(data.as_deref(), out),
            _ => {}
        }
        match origin {
            Origin::Client { conn, xid, ops, fwd } => {
                let close_after = matches!(txn, Txn::CloseSession { .. });
                let (err, body) = match (ops.codes(), result) {
                    // A reconfig answers with this server's configuration, now the new one.
                    ([op], warden_tree::TxnResult::SetData { stat })
                        if *op == warden_proto::OpCode::Reconfig.code() =>
                    {
                        let data = self.tree.node(warden_tree::tree::CONFIG_NODE).and_then(|n| n.data.as_deref());
                        (0, Some(Response::GetData { data: data.map(<[u8]>::to_vec), stat }))
                    }
                    (codes, result) => crate::writes::reply_body(codes, result),
                };
                let frame = self.reply_frame(xid, err, body.as_ref());
                match self.conns.get_mut(&conn) {
                    Some(c) if fwd => {
                        c.complete_forwarded(xid, frame, close_after);
                    }
                    Some(c) => {
                        c.complete_write(hdr.zxid, frame, close_after);
                    }
                    // The client went away before its write was applied (`stale_replies`).
                    None => self.counters.stale_replies += 1,
                }
                self.drain(conn, out);
            }
            Origin::Connect { conn, fwd } => self.finish_handshake(conn, hdr, fwd, out),
            Origin::Internal => {}
        }
    }

    pub(crate) fn finish_handshake(&mut self, conn: ConnId, hdr: TxnHeader, fwd: bool, out: &mut Vec<Output>) {
        let id = hdr.client_id;
        let Some(c) = self.conns.get_mut(&conn) else { return };
        c.session_id = id;
        let frame = c.handshake_frame(id);
        if fwd {
            c.complete_forwarded(hdr.cxid, frame, false);
        } else {
            c.complete_write(hdr.zxid, frame, false);
        }
        let early = std::mem::take(&mut c.before_session);
        self.session_conn.insert(id, conn);
        self.drain(conn, out);
        self.replay_early(conn, early, out);
    }

    /// After a closeSession is applied: forget the session and close its connection (the client that
    /// asked for the close gets its reply first; an expired one gets none).
    fn session_closed(&mut self, session_id: i64, origin: &Origin, out: &mut Vec<Output>) {
        self.sessions.remove(session_id);
        if let Some(conn) = self.session_conn.remove(&session_id) {
            let asked = matches!(origin, Origin::Client { conn: c, .. } if *c == conn);
            if !asked {
                self.drop_conn(conn);
                out.push(Output::Close { conn });
            }
        }
    }

    pub(crate) fn conn_ids(&self, conn: ConnId) -> &[warden_proto::Id] {
        self.conns.get(&conn).map_or(&[], |c| c.auth.as_slice())
    }

    /// Sends a notification's frame to `conn`.
    fn notify(&mut self, conn: ConnId, frame: Bytes, out: &mut Vec<Output>) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.sent += 1;
            let size = frame.len().saturating_sub(4);
            self.counters.watch_bytes += size as u64;
            self.response_sizes.record(size);
            out.push(Output::Send { conn, frame, completes_request: false });
        }
    }

    /// Sends every finished reply at the head of the queue, running reads as they reach the head.
    pub(crate) fn drain(&mut self, conn: ConnId, out: &mut Vec<Output>) {
        loop {
            let passed = self.barriers_passed();
            let Some(c) = self.conns.get_mut(&conn) else { return };
            let Some(head) = c.queue.front() else {
                // An idle connection keeps no queue (a few hundred bytes once it held a request).
                c.queue = VecDeque::new();
                return;
            };
            match head {
                Pending::Write { .. } | Pending::Forwarded { .. } => return,
                Pending::Done { .. } => {
                    let Some(Pending::Done { frame, arrived_ms, close_after }) = c.queue.pop_front() else { return };
                    self.send_reply(conn, frame, arrived_ms, LatencyKind::Update, out);
                    if close_after {
                        self.drop_conn(conn);
                        out.push(Output::Close { conn });
                        return;
                    }
                }
                Pending::Read { barrier, .. } if *barrier > passed => return,
                Pending::Read { .. } => {
                    let Some(Pending::Read { xid, req, arrived_ms, .. }) = c.queue.pop_front() else { return };
                    let close = self.run_read(conn, xid, req, arrived_ms, out);
                    if close {
                        self.drop_conn(conn);
                        out.push(Output::Close { conn });
                        return;
                    }
                }
            }
        }
    }

    pub(crate) fn send_reply(
        &mut self,
        conn: ConnId,
        frame: Vec<u8>,
        arrived_ms: u64,
        kind: LatencyKind,
        out: &mut Vec<Output>,
    ) {
        let ms = self.now.mono_ms.saturating_sub(arrived_ms);
        self.latency.record(ms);
        match kind {
            LatencyKind::Read => self.summaries.read_latency.record(ms),
            LatencyKind::Update => self.summaries.update_latency.record(ms),
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.sent += 1;
            c.last_zxid = self.tree.last_processed_zxid();
        }
        let size = frame.len().saturating_sub(4);
        self.counters.response_bytes += size as u64;
        self.response_sizes.record(size);
        out.push(Output::Send { conn, frame: frame.into(), completes_request: true });
    }

    pub(crate) fn reply_frame(&self, xid: i32, err: i32, body: Option<&Response>) -> Vec<u8> {
        encode_reply(&self.reply_header(xid, err), body)
    }

    /// The header of a reply: the last processed zxid, except 0 for the auth xid, as ZooKeeper.
    pub(crate) fn reply_header(&self, xid: i32, err: i32) -> ReplyHeader {
        let zxid = if xid == xid::AUTH { 0 } else { self.tree.last_processed_zxid() };
        ReplyHeader { xid, zxid, err }
    }

    fn on_auth(&mut self, conn: ConnId, xid: i32, scheme: &str, auth: &[u8], out: &mut Vec<Output>) {
        let ids = crate::reads::authenticate(scheme, auth, self.cfg.super_digest.as_deref(), self.conn_ids(conn));
        let ok = ids.is_some();
        if !ok {
            self.counters.auth_failed_count += 1;
        }
        let frame =
            encode_reply(&ReplyHeader { xid, zxid: 0, err: if ok { 0 } else { ErrorCode::AuthFailed.code() } }, None);
        if let Some(c) = self.conns.get_mut(&conn) {
            for id in ids.into_iter().flatten() {
                if !c.auth.contains(&id) {
                    c.auth.push(id);
                }
            }
            c.sent += 1;
        }
        out.push(Output::Send { conn, frame: frame.into(), completes_request: true });
        if !ok {
            self.drop_conn(conn);
            out.push(Output::Close { conn });
        }
    }

    fn on_tick(&mut self, out: &mut Vec<Output>) {
        if let Mode::Ensemble(_) = self.mode {
            self.quorum_tick(out);
            self.expire_local_sessions(out);
            if !self.is_established_leader() {
                // Sessions expire and nodes are reaped only where proposals are made.
                return;
            }
        }
        let expired = self.sessions.expire(self.now.mono_ms);
        self.counters.stale_sessions_expired += expired.len() as u64;
        self.expiring.extend(expired);
        if self.now.mono_ms.saturating_sub(self.last_reap_ms) >= self.cfg.container_check_interval_ms {
            self.last_reap_ms = self.now.mono_ms;
            self.reap(out);
        }
    }

    /// Proposes the next batch of expired sessions' closeSession txns, once the last batch has
    /// applied (`EXPIRY_BATCH`). Only where proposals are made; a role change empties the queue
    /// (a new leader gives every session a fresh deadline).
    fn propose_expiries(&mut self, out: &mut Vec<Output>) {
        let proposing = match self.mode {
            Mode::Standalone { .. } => true,
            Mode::Ensemble(_) => self.is_established_leader(),
        };
        if !proposing || self.last_processed_zxid() < self.expiry_zxid {
            return;
        }
        let mut proposed = 0;
        while proposed < EXPIRY_BATCH {
            let Some(id) = self.expiring.pop_front() else { break };
            if !self.sessions.get(id).is_some_and(|s| s.closing) {
                continue;
            }
            let zxid = self.next_zxid();
            let txn = self.prep.prep_close_session(&self.tree, id, zxid);
            self.expiry_zxid = self.propose(id, 0, txn, Origin::Internal, out);
            proposed += 1;
        }
    }

    /// Deletes empty containers and expired TTL nodes through ordinary txns.
    fn reap(&mut self, out: &mut Vec<Output>) {
        let ctx_ids = vec![warden_proto::Id::new("super", "")];
        for (path, _) in self.tree.containers_and_ttls_to_reap(self.now.wall_ms) {
            let zxid = self.next_zxid();
            let ctx = warden_tree::PrepContext {
                session_id: 0,
                auth_ids: &ctx_ids,
                ttl_enabled: true,
                is_ephemeral_allowed: false,
                sasl_provider: self.cfg.sasl_provider,
            };
            let op = warden_tree::WriteOp::DeleteContainer { path };
            if let Ok(txn) = self.prep.prep(&self.tree, &ctx, zxid, &op) {
                self.propose(0, 0, txn, Origin::Internal, out);
            }
        }
    }

    /// The invariants that cost O(1) to check (zxid counters, the role machine's own cheap
    /// rules); the server checks them after every turn in release builds too.
    pub fn check_cheap_invariants(&self) -> Result<(), String> {
        let applied = self.tree.last_processed_zxid();
        match &self.mode {
            Mode::Standalone { in_flight } => {
                ensure!(applied <= self.last_zxid, "applied {applied:#x} beyond the last zxid {:#x}", self.last_zxid);
                let (first, last) = match (in_flight.front(), in_flight.back()) {
                    (Some((f, _, _)), Some((l, _, _))) => (f.zxid, l.zxid),
                    _ => (applied + 1, applied),
                };
                ensure!(first == applied + 1, "first in-flight txn {first:#x} does not follow applied {applied:#x}");
                ensure!(last == self.last_zxid, "in-flight ends at {last:#x}, last zxid {:#x}", self.last_zxid);
            }
            Mode::Ensemble(q) => self.check_cheap_quorum_invariants(q)?,
        }
        Ok(())
    }

    /// Asserts the node's cross-structure invariants; tests run it after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_cheap_invariants()?;
        self.tree.check_invariants().map_err(|e| format!("tree invariant: {e}"))?;
        self.watches.check_invariants().map_err(|e| format!("watch invariant: {e}"))?;
        self.prep.check_against(&self.tree).map_err(|e| format!("prep invariant: {e}"))?;
        self.sessions.check_invariants().map_err(|e| format!("session invariant: {e}"))?;
        for (sid, conn) in &self.session_conn {
            let c = self.conns.get(conn);
            ensure!(c.is_some_and(|c| c.session_id == *sid), "session {sid:#x} maps to connection {conn}, not its own");
        }
        let in_flight = match &self.mode {
            Mode::Ensemble(q) => return self.check_quorum_invariants(q).map_err(|e| format!("quorum invariant: {e}")),
            Mode::Standalone { in_flight } => in_flight,
        };
        let mut last = self.tree.last_processed_zxid();
        for (h, _, _) in in_flight {
            ensure!(h.zxid == last + 1, "in-flight txn {:#x} after {last:#x}: not gap-free and ordered", h.zxid);
            last = h.zxid;
        }
        ensure!(last == self.last_zxid, "last zxid {:#x}, in-flight ends at {last:#x}", self.last_zxid);
        Ok(())
    }
}
