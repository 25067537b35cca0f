//! Structured fuzzing (issue 32): fuzz bytes become a script of client and server steps, run in
//! the simulator's [`World`] with every one of its invariants checked after every event.
//!
//! [`standalone_ops`] drives one standalone server; [`cluster_ops`] a 3-voter ensemble. The bytes
//! are read twice over: first with `arbitrary` as a script of at most [`MAX_STEPS`] [`Step`]s
//! (connect a session: new, reattached, another client's, a wrong password, an unknown id;
//! disconnect; well-formed requests of every kind over a small path alphabet so that they
//! collide; advance the virtual clock, past session timeouts too; crash, restart, fail the disk,
//! pause, partition, heal), then the bytes left over become the world's choices (delays, fsync
//! times, in the ensemble also the simulated clients' requests and the random faults) through
//! `Choices`, a fixed RNG deciding once they run out. The script's clients ("scripted") live next
//! to the simulator's own (`client.rs`) on the same simulated connections, through the same
//! encoders and decoders.
//!
//! Checked, besides the world's invariants (`check.rs`, every machine's `check_invariants`):
//! every reply decodes for its request's opcode, comes in request order (FIFO per connection),
//! carries one of ZooKeeper's error codes (and never MarshallingError or Unimplemented for these
//! well-formed requests), and a zxid that never goes below one the client saw before; a new
//! session's id was never handed out before, a wrong password or an unknown session is refused
//! (session 0), the negotiated timeout is within the server's bounds; a successful write's stat
//! agrees with its reply's zxid and is acknowledged to the checker (so it must be visible and
//! survive crashes); a read's stat is no newer than its reply and sees the client's own earlier
//! writes (read-your-writes over reconnects); a multi's results match its ops; a notification is
//! well-formed and covered by a registration that it consumes (a one-time watch fires at most
//! once); and at the end, with every fault healed and the liveness phase passed, every request
//! on a connection that is still open has its reply (exactly one reply, or the connection
//! closed).
//!
//! A violated invariant is a panic naming it (`standalone_ops`, `cluster_ops`) or an `Err`
//! (`run_standalone_ops`, `run_cluster_ops`); nothing else panics. One input does bounded work:
//! at most [`MAX_STEPS`] steps, [`SCRIPT_MS`] of virtual time ([`CLUSTER_SCRIPT_MS`] for the
//! ensemble) and [`MAX_SCRIPT_EVENTS`] world events for the script, then the
//! liveness phase (bounded by `LIVENESS_BOUND_MS`) and [`SETTLE_MS`].

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use arbitrary::{Arbitrary, Unstructured};
use warden_node::ConnId;
use warden_proto::request::{
    AddWatchRequest, AuthPacket, CreateRequest, CreateTtlRequest, GetEphemeralsRequest, MultiOp, PathRequest,
    PathVersion, PathWatch, ReconfigRequest, SetAclRequest, SetDataRequest, SetWatches, SetWatches2, WatchesRequest,
};
use warden_proto::response::{decode_notification, decode_reply, MultiResult, Response};
use warden_proto::{Acl, ConnectRequest, ConnectResponse, ErrorCode, ReplyHeader, Request, Stat};
use warden_quorum::Sid;

use crate::check::Acked;
use crate::choices::Choices;
use crate::client::ClientMsg;
use crate::world::{Ev, Phase, ToServer, World};
use crate::Options;

/// Client indices of scripted connections start here (`CConn::client`).
pub(crate) const SCRIPTED: usize = 1 << 20;
/// Script steps per input, at most.
pub const MAX_STEPS: usize = 200;
/// Virtual time the script may advance, at most; later advances are skipped.
pub const SCRIPT_MS: u64 = 60_000;
/// The same for the ensemble, whose virtual time costs more events.
pub const CLUSTER_SCRIPT_MS: u64 = 20_000;
/// World events the script may take, at most; the script ends there.
pub const MAX_SCRIPT_EVENTS: u64 = 30_000;
/// After the liveness phase: virtual time for the last replies to arrive.
pub const SETTLE_MS: u64 = 5_000;
const CLIENTS: usize = 4;
/// The RNG that decides once the bytes run out.
const FALLBACK_SEED: u64 = 0x5eed_f022;
const MIN_TIMEOUT_MS: i32 = 400;
const MAX_TIMEOUT_MS: i32 = 8_000;

/// Paths: the first [`VALID`] are valid and nest, the rest are not valid paths.
const VALID: usize = 10;
const PATHS: [&str; 14] =
    ["/", "/a", "/a/b", "/a/b/c", "/a/c", "/b", "/b/a", "/c", "/zookeeper", "/zookeeper/config", "", "a", "/a/", "//a"];

/// One step of a script (decoded from a first byte that weighs the kinds: requests are half).
#[derive(Debug, Clone)]
pub enum Step {
    /// Client `client` opens a connection to server `server` (dropping the one it has); with
    /// `keepalive` it pings when idle for a third of the session timeout, as ZooKeeper's clients
    /// do, else its session expires unless requests keep it alive.
    Connect { client: u8, server: u8, session: SessionSel, timeout: TimeoutSel, keepalive: bool },
    /// The client's socket goes away.
    Disconnect { client: u8 },
    /// A request on the client's connection, sent once its session is established; a client
    /// without a connection first connects to a server of its own, resuming its session.
    Request { client: u8, req: Req },
    /// The world runs for ms + 1 virtual ms.
    Advance { ms: u8 },
    /// The world runs for 1 to 12 virtual seconds (past session timeouts).
    Sleep { secs: u8 },
    /// Power loss on a server.
    Crash { server: u8 },
    /// A stopped server starts again from its disk.
    Restart { server: u8 },
    /// The server's next fsync fails or its disk fills up (it stops, and restarts later).
    DiskError { server: u8 },
    /// The server's process pauses for 20 * (ms + 1) virtual ms.
    Pause { server: u8, ms: u8 },
    /// Ensemble: the server is cut off from the others (or only what it sends is lost).
    Isolate { server: u8, both: bool },
    /// Every network fault ends.
    Heal,
}

impl<'a> Arbitrary<'a> for Step {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let kind: u8 = u.arbitrary()?;
        Ok(match kind {
            0..=127 => Step::Request { client: u.arbitrary()?, req: u.arbitrary()? },
            128..=167 => Step::Advance { ms: u.arbitrary()? },
            168..=187 => Step::Connect {
                client: u.arbitrary()?,
                server: u.arbitrary()?,
                session: u.arbitrary()?,
                timeout: u.arbitrary()?,
                keepalive: u.arbitrary()?,
            },
            188..=195 => Step::Disconnect { client: u.arbitrary()? },
            196..=203 => Step::Sleep { secs: u.arbitrary()? },
            204..=209 => Step::Crash { server: u.arbitrary()? },
            210..=217 => Step::Restart { server: u.arbitrary()? },
            218..=221 => Step::DiskError { server: u.arbitrary()? },
            222..=227 => Step::Pause { server: u.arbitrary()?, ms: u.arbitrary()? },
            228..=237 => Step::Isolate { server: u.arbitrary()?, both: u.arbitrary()? },
            238..=245 => Step::Heal,
            _ => Step::Advance { ms: u.arbitrary()? },
        })
    }
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum SessionSel {
    New,
    /// The client's own last session (new when it has none).
    Resume,
    /// A session another client got, with its password.
    Other(u8),
    /// A known session with a wrong password.
    WrongPassword(u8),
    /// A session id nobody was given.
    Unknown,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum TimeoutSel {
    Min,
    Short,
    Long,
    /// Above the maximum (negotiated down).
    TooLong,
    Zero,
}

/// A path: one of [`PATHS`], or one the script's creates returned (sequential names).
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum PathSel {
    Fixed(u8),
    Created(u8),
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum AclSel {
    Open,
    ReadOnly,
    /// `auth` ids: the connection's authenticated identities.
    Creator,
    /// digest `alice`, all permissions.
    Alice,
    /// world: create and read only.
    CreateRead,
    /// No ACL at all (InvalidAcl).
    Empty,
    /// An ip ACL for the simulated client's address.
    Ip,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum AuthSel {
    Alice,
    AliceWrongPassword,
    Super,
    /// A scheme no provider has (AuthFailed, connection closed).
    Unknown,
    Ip,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum CreateKind {
    Create,
    Create2,
    Container,
    Ttl,
}

#[derive(Debug, Clone, Arbitrary)]
pub struct CreateSel {
    kind: CreateKind,
    path: PathSel,
    data: Option<u8>,
    /// Mostly open; else an [`AclSel`].
    acl: (bool, AclSel),
    /// CreateMode: 0..=6 are ZooKeeper's, others invalid.
    mode: u8,
    ttl: u8,
}

#[derive(Debug, Clone, Arbitrary)]
pub enum SubOp {
    Create(CreateSel),
    Delete { path: PathSel, version: i8 },
    SetData { path: PathSel, data: Option<u8>, version: i8 },
    Check { path: PathSel, version: i8 },
}

#[derive(Debug, Clone, Arbitrary)]
pub enum Req {
    Create(CreateSel),
    Delete { path: PathSel, version: i8 },
    DeleteContainer { path: PathSel },
    SetData { path: PathSel, data: Option<u8>, version: i8 },
    GetData { path: PathSel, watch: bool },
    Exists { path: PathSel, watch: bool },
    GetChildren { path: PathSel, watch: bool },
    GetChildren2 { path: PathSel, watch: bool },
    GetAcl { path: PathSel },
    SetAcl { path: PathSel, acl: AclSel, version: i8 },
    Sync { path: PathSel },
    Multi(Vec<SubOp>),
    MultiRead(Vec<(bool, PathSel, bool)>),
    AddWatch { path: PathSel, recursive: bool },
    RemoveWatches { path: PathSel, kind: u8 },
    CheckWatches { path: PathSel, kind: u8 },
    SetWatches { relative: u8, data: Vec<PathSel>, exist: Vec<PathSel>, child: Vec<PathSel> },
    SetWatches2 { relative: u8, data: Vec<PathSel>, persistent: Vec<PathSel>, recursive: Vec<PathSel> },
    Auth(AuthSel),
    GetEphemerals { prefix: PathSel },
    GetAllChildrenNumber { path: PathSel },
    WhoAmI,
    Ping,
    Reconfig,
    CloseSession,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct FuzzSummary {
    /// Script steps carried out.
    pub steps: usize,
    /// World events handled.
    pub events: u64,
    pub end_ms: u64,
    pub sessions: u64,
    pub requests: u64,
    pub replies: u64,
    pub errors: u64,
    pub notifications: u64,
    pub acked_writes: u64,
}

/// Decodes `data` into a script and runs it on one standalone server; panics with the violated
/// invariant.
pub fn standalone_ops(data: &[u8]) {
    if let Err(e) = run_standalone_ops(data) {
        panic!("warden-sim standalone_ops: invariant violated: {e}");
    }
}

/// Decodes `data` into a script and runs it on a 3-voter ensemble under the world's random faults
/// (decided by the rest of the bytes); panics with the violated invariant.
pub fn cluster_ops(data: &[u8]) {
    if let Err(e) = run_cluster_ops(data) {
        panic!("warden-sim cluster_ops: invariant violated: {e}");
    }
}

pub fn run_standalone_ops(data: &[u8]) -> Result<FuzzSummary, String> {
    run(data, false)
}

pub fn run_cluster_ops(data: &[u8]) -> Result<FuzzSummary, String> {
    run(data, true)
}

/// The script, and the bytes left for the world's choices: the first byte says how many steps
/// (up to [`MAX_STEPS`]), then the steps follow while the bytes last.
pub fn decode(data: &[u8]) -> (Vec<Step>, &[u8]) {
    let mut u = Unstructured::new(data);
    let n = u.arbitrary::<u8>().map_or(0, |b| b as usize * MAX_STEPS / 255);
    let mut steps = Vec::new();
    while steps.len() < n && !u.is_empty() {
        match u.arbitrary::<Step>() {
            Ok(step) => steps.push(step),
            Err(_) => break,
        }
    }
    (steps, u.take_rest())
}

fn run(data: &[u8], cluster: bool) -> Result<FuzzSummary, String> {
    let (steps, rest) = decode(data);
    let trace = std::env::var_os("WARDEN_FUZZ_TRACE").is_some();
    let opts = Options {
        seed: FALLBACK_SEED,
        servers: if cluster { 3 } else { 1 },
        standalone: !cluster,
        observers: 0,
        clients: if cluster { 2 } else { 0 },
        // The fault phase (the ensemble's random faults, the script's own) lasts as long as the
        // script.
        fault_ms: u64::MAX,
        faults: cluster,
        scenario: None,
        linearizable_reads: false,
        reconfig: false,
        short_history: cluster,
        trace,
    };
    let progress = Rc::new(Cell::new((0, 0)));
    let mut w = World::with_choices(opts, progress.clone(), Choices::from_bytes(rest, FALLBACK_SEED));
    w.snap_count = 8;
    w.fuzz_config = true;
    w.script = Some(Box::new(Script::new(cluster)));
    let at = |w: &World, e: String| format!("{e} (script step {}, t={} ms)", script(w).steps, w.now);
    w.start()?;
    for client in 0..CLIENTS {
        w.at(50 + client as u64 * 10, Ev::ClientWake { client: SCRIPTED + client });
    }
    for step in steps {
        if w.phase != Phase::Faults || progress.get().0 > MAX_SCRIPT_EVENTS {
            break;
        }
        if trace {
            eprintln!("[{:>7}] script: {step:?}", w.now);
        }
        script_mut(&mut w).steps += 1;
        apply(&mut w, step).map_err(|e| at(&w, e))?;
    }
    // The end: every fault heals (the liveness phase starts with the next event), every server
    // must serve again within the bound, then the last replies arrive.
    if w.phase == Phase::Faults {
        w.opts.fault_ms = w.opts.fault_ms.min(w.now);
    }
    // An event to start it with: a standalone server the script crashed leaves nothing queued.
    w.at(w.now, Ev::Heal);
    while w.step().map_err(|e| at(&w, e))? {}
    // A fault injected before the healing (a failing fsync) may still stop a server: it restarts
    // at once, and the run ends with every server up.
    // The last replies arrive; keepalive pings stop (sessions may expire, closing connections).
    script_mut(&mut w).ending = true;
    let end = w.now + SETTLE_MS;
    let up = |w: &World| w.servers.iter().all(|s| s.run.is_some());
    while w.next_event_at().is_some_and(|t| t <= end || (!up(&w) && t <= end + SETTLE_MS)) {
        w.step().map_err(|e| at(&w, e))?;
    }
    w.now = w.now.max(end);
    end_checks(&w)?;
    let s = FuzzSummary { steps: script(&w).steps, ..script(&w).summary.clone() };
    let events = progress.get().0;
    let sum = w.finish()?;
    Ok(FuzzSummary { events, end_ms: sum.end_ms, acked_writes: sum.acked_writes, ..s })
}

fn script(w: &World) -> &Script {
    w.script.as_deref().expect("a fuzz world has a script")
}

fn script_mut(w: &mut World) -> &mut Script {
    w.script.as_deref_mut().expect("a fuzz world has a script")
}

/// Runs the world for `ms` of virtual time (within the script's budget).
fn advance(w: &mut World, ms: u64) -> Result<(), String> {
    let s = script_mut(w);
    let budget = if s.cluster { CLUSTER_SCRIPT_MS } else { SCRIPT_MS };
    let ms = ms.min(budget.saturating_sub(s.elapsed_ms));
    s.elapsed_ms += ms;
    let end = w.now + ms;
    while w.next_event_at().is_some_and(|t| t <= end) {
        if !w.step()? {
            return Ok(());
        }
    }
    w.now = w.now.max(end);
    Ok(())
}

fn server_of(w: &World, server: u8) -> Sid {
    (server as usize % w.servers.len()) as Sid + 1
}

fn apply(w: &mut World, step: Step) -> Result<(), String> {
    match step {
        Step::Connect { client, server, session, timeout, keepalive } => {
            connect(w, client as usize % CLIENTS, server, session, timeout, keepalive)
        }
        Step::Disconnect { client } => {
            let c = &mut script_mut(w).clients[client as usize % CLIENTS];
            if let Some(conn) = c.conn.take() {
                w.send_to_server(conn.id, ToServer::Gone);
                w.cconns.remove(&conn.id);
            }
            Ok(())
        }
        Step::Request { client, req } => {
            let client = client as usize % CLIENTS;
            if script(w).clients[client].conn.is_none() {
                connect(w, client, client as u8, SessionSel::Resume, TimeoutSel::Long, true)?;
            }
            request(w, client, req)
        }
        Step::Advance { ms } => advance(w, ms as u64 + 1),
        Step::Sleep { secs } => advance(w, 1_000 * (secs as u64 % 12 + 1)),
        Step::Crash { server } => {
            let sid = server_of(w, server);
            w.crash(sid, "fuzz script: power loss");
            Ok(())
        }
        Step::Restart { server } => {
            let sid = server_of(w, server);
            w.server(sid).fs.set_space_left(None);
            if w.server(sid).run.is_none() {
                w.start_server(sid)?;
            }
            Ok(())
        }
        Step::DiskError { server } => {
            let sid = server_of(w, server);
            if w.server(sid).run.is_some() {
                crate::faults::disk_error(w, sid);
            }
            Ok(())
        }
        Step::Pause { server, ms } => {
            let sid = server_of(w, server);
            w.pause(sid, 20 * (ms as u64 + 1));
            Ok(())
        }
        Step::Isolate { server, both } => {
            if w.servers.len() > 1 {
                let sid = server_of(w, server);
                crate::faults::isolate(w, sid, both);
            }
            Ok(())
        }
        Step::Heal => {
            crate::faults::heal_network(w);
            Ok(())
        }
    }
}

// ----- scripted clients -----

#[derive(Debug, Default)]
pub(crate) struct Script {
    cluster: bool,
    clients: Vec<SClient>,
    /// Every session handed out, with its password, in order.
    sessions: Vec<(i64, Vec<u8>)>,
    issued: BTreeSet<i64>,
    /// Paths the script's creates returned (sequential names), most recent last.
    created: Vec<String>,
    elapsed_ms: u64,
    steps: usize,
    /// The run is settling: no more keepalive pings.
    ending: bool,
    summary: FuzzSummary,
}

impl Script {
    fn new(cluster: bool) -> Script {
        Script { cluster, clients: (0..CLIENTS).map(|_| SClient::default()).collect(), ..Script::default() }
    }

    fn path(&self, p: PathSel) -> String {
        match p {
            PathSel::Created(i) if !self.created.is_empty() => {
                self.created[self.created.len() - 1 - i as usize % self.created.len()].clone()
            }
            // Mostly valid paths: the four invalid ones take one value in sixteen.
            PathSel::Created(i) | PathSel::Fixed(i) if i >= 240 => {
                PATHS[VALID + i as usize % (PATHS.len() - VALID)].to_string()
            }
            PathSel::Created(i) | PathSel::Fixed(i) => PATHS[i as usize % VALID].to_string(),
        }
    }
}

#[derive(Debug, Default)]
struct SClient {
    conn: Option<SConn>,
    session: Option<(i64, Vec<u8>)>,
    /// The highest zxid any reply showed this client.
    last_zxid: i64,
    next_xid: i32,
    /// The client's own acknowledged writes by path: the zxid, and whether it deleted the node.
    writes: BTreeMap<String, (i64, bool)>,
}

#[derive(Debug)]
struct SConn {
    id: ConnId,
    state: ConnState,
    pending: VecDeque<SPending>,
    /// Requests made while the handshake is out, sent once the session is established (as
    /// ZooKeeper's clients queue them).
    queued: Vec<(SPending, Request)>,
    watches: Watches,
    keepalive: bool,
    /// The negotiated session timeout.
    timeout_ms: u64,
    last_sent: u64,
}

#[derive(Debug, PartialEq, Eq)]
enum ConnState {
    /// The ConnectRequest is out; `expect` is what the answer may be.
    Connecting {
        expect: Expect,
    },
    Established,
    /// Answered with session 0: only the close may follow.
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    New,
    /// Session `id` or 0 (it may have expired).
    Resume(i64),
    /// Session 0.
    Refusal,
}

#[derive(Debug)]
struct SPending {
    xid: i32,
    op: i32,
    what: What,
}

/// What a reply is checked against.
#[derive(Debug)]
enum What {
    Plain,
    Create {
        path: String,
        sequential: bool,
        stat: bool,
    },
    SetData {
        path: String,
    },
    Delete {
        path: String,
    },
    /// A read with a stat of `path` (getData, exists, getChildren2, getAcl); `watch`: the
    /// registration it makes (data or child table).
    Read {
        path: String,
        watch: Option<Table>,
    },
    Children {
        path: String,
        watch: bool,
    },
    Multi {
        ops: Vec<MultiOp>,
    },
    MultiRead {
        n: usize,
    },
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Data,
    /// exists: registers on NoNode too.
    Exist,
    Child,
}

/// The watches a connection may be notified for: one-time registrations counted per path, and
/// persistent ones.
#[derive(Debug, Default)]
struct Watches {
    one_time: BTreeMap<String, Counts>,
    persistent: BTreeSet<String>,
    recursive: BTreeSet<String>,
}

/// One path's one-time registrations (data table: getData, exists, setWatches' data and exist
/// lists; child table: getChildren, setWatches' child list) and the events they answered.
#[derive(Debug, Default)]
struct Counts {
    data: u32,
    child: u32,
    /// NodeCreated and NodeDataChanged; NodeChildrenChanged; NodeDeleted.
    data_events: u32,
    child_events: u32,
    deleted: u32,
}

impl Watches {
    fn add(&mut self, table: Table, path: &str) {
        let c = self.one_time.entry(path.to_string()).or_default();
        match table {
            Table::Child => c.child += 1,
            Table::Data | Table::Exist => c.data += 1,
        }
    }

    fn persistent_covers(&self, path: &str, event: i32) -> bool {
        if self.persistent.contains(path) {
            return true;
        }
        // A recursive watch fires for a node and its descendants, never NodeChildrenChanged.
        event != 4
            && self.recursive.iter().any(|r| {
                r == path || r == "/" || path.strip_prefix(r.as_str()).is_some_and(|rest| rest.starts_with('/'))
            })
    }

    /// Counts `event` on `path` against the registrations; false if they cannot account for it.
    /// Each registration fires at most once: data events need data registrations, children
    /// events child ones, and a NodeDeleted takes at least one of either (a delete sends one for
    /// both tables; setWatches answers a missing path with one per list naming it, as
    /// ZooKeeper's does), so the events can never outnumber the registrations.
    fn fire(&mut self, event: i32, path: &str) -> bool {
        if self.persistent_covers(path, event) {
            return true;
        }
        let c = self.one_time.entry(path.to_string()).or_default();
        match event {
            1 | 3 => c.data_events += 1,
            4 => c.child_events += 1,
            2 => c.deleted += 1,
            _ => return false,
        }
        c.data_events <= c.data
            && c.child_events <= c.child
            && c.data_events + c.child_events + c.deleted <= c.data + c.child
    }
}

fn timeout_ms(t: TimeoutSel) -> i32 {
    match t {
        TimeoutSel::Min => MIN_TIMEOUT_MS,
        TimeoutSel::Short => 1_000,
        TimeoutSel::Long => 4_000,
        TimeoutSel::TooLong => 100_000,
        TimeoutSel::Zero => 0,
    }
}

fn connect(
    w: &mut World,
    client: usize,
    server: u8,
    session: SessionSel,
    timeout: TimeoutSel,
    keepalive: bool,
) -> Result<(), String> {
    let sid = server_of(w, server);
    let s = script_mut(w);
    if let Some(old) = s.clients[client].conn.take() {
        w.send_to_server(old.id, ToServer::Gone);
        w.cconns.remove(&old.id);
    }
    let s = script_mut(w);
    let pick = |i: u8| (!s.sessions.is_empty()).then(|| s.sessions[i as usize % s.sessions.len()].clone());
    let (session_id, passwd, expect) = match session {
        SessionSel::Resume if s.clients[client].session.is_some() => {
            let (id, pw) = s.clients[client].session.clone().expect("checked");
            (id, pw, Expect::Resume(id))
        }
        SessionSel::Other(i) if !s.sessions.is_empty() => {
            let (id, pw) = pick(i).expect("checked");
            (id, pw, Expect::Resume(id))
        }
        SessionSel::WrongPassword(i) if !s.sessions.is_empty() => {
            let (id, mut pw) = pick(i).expect("checked");
            match pw.first_mut() {
                Some(b) => *b ^= 0x5a,
                None => pw.push(1),
            }
            (id, pw, Expect::Refusal)
        }
        SessionSel::Unknown => (0x0077_0000_0000_0001, vec![0; 16], Expect::Refusal),
        _ => (0, vec![0; 16], Expect::New),
    };
    let last_zxid = s.clients[client].last_zxid;
    let Some(id) = w.new_client_conn(SCRIPTED + client, sid) else { return Ok(()) };
    let now = w.now;
    let s = script_mut(w);
    s.clients[client].conn = Some(SConn {
        id,
        state: ConnState::Connecting { expect },
        pending: VecDeque::new(),
        queued: Vec::new(),
        watches: Watches::default(),
        keepalive,
        timeout_ms: 0,
        last_sent: now,
    });
    let req = ConnectRequest {
        timeout_ms: timeout_ms(timeout),
        session_id,
        passwd,
        last_zxid_seen: last_zxid,
        ..Default::default()
    };
    w.send_to_server(id, ToServer::Connect(req));
    Ok(())
}

fn acl(a: AclSel) -> Vec<Acl> {
    use warden_proto::{perms, Id};
    match a {
        AclSel::Open => Acl::open_unsafe(),
        AclSel::ReadOnly => Acl::read_unsafe(),
        AclSel::Creator => Acl::creator_all(),
        AclSel::Alice => {
            vec![Acl::new(perms::ALL, Id::new("digest", warden_tree::acl::digest_id(b"alice:secret")))]
        }
        AclSel::CreateRead => vec![Acl::new(perms::CREATE | perms::READ, Id::anyone())],
        AclSel::Empty => Vec::new(),
        AclSel::Ip => vec![Acl::new(perms::ALL, Id::new("ip", "127.0.0.1"))],
    }
}

fn data(d: Option<u8>) -> Option<Vec<u8>> {
    d.map(|n| vec![b'd'; n as usize % 24])
}

fn version(v: i8) -> i32 {
    // Mostly -1 (any), else small versions that can match.
    if v < 0 {
        -1
    } else {
        (v % 4) as i32
    }
}

fn create_request(s: &Script, c: &CreateSel) -> (Request, MultiOp, What) {
    let path = s.path(c.path);
    // Mostly ZooKeeper's plain modes 0..=4, sometimes the TTL ones, rarely invalid ones.
    let mode = match c.mode {
        0..=199 => (c.mode % 5) as i32,
        200..=239 => 5 + (c.mode % 2) as i32,
        240..=247 => -1,
        _ => 7,
    };
    let req = CreateRequest {
        path: path.clone(),
        data: data(c.data),
        acl: if c.acl.0 { Acl::open_unsafe() } else { acl(c.acl.1) },
        flags: mode,
    };
    let ttl = match c.ttl % 4 {
        0 => 0,
        1 => -5,
        2 => 1 + c.ttl as i64 * 10,
        _ => 60_000,
    };
    let (request, op, stat) = match c.kind {
        CreateKind::Create => (Request::Create(req.clone()), MultiOp::Create(req), false),
        CreateKind::Create2 => (Request::Create2(req.clone()), MultiOp::Create2(req), true),
        CreateKind::Container => {
            let req = CreateRequest { flags: 4, ..req };
            (Request::CreateContainer(req.clone()), MultiOp::CreateContainer(req), true)
        }
        CreateKind::Ttl => {
            let req = CreateTtlRequest { path: req.path, data: req.data, acl: req.acl, flags: req.flags, ttl };
            (Request::CreateTtl(req.clone()), MultiOp::CreateTtl(req), true)
        }
    };
    let flags = match &op {
        MultiOp::CreateTtl(q) => q.flags,
        MultiOp::Create(q) | MultiOp::Create2(q) | MultiOp::CreateContainer(q) => q.flags,
        _ => mode,
    };
    (request, op, What::Create { path, sequential: matches!(flags, 2 | 3 | 6), stat })
}

fn paths(s: &Script, ps: &[PathSel]) -> Vec<String> {
    ps.iter().take(4).map(|p| s.path(*p)).collect()
}

fn relative_zxid(c: &SClient, r: u8) -> i64 {
    match r % 3 {
        0 => 0,
        1 => c.last_zxid,
        _ => c.last_zxid.saturating_add(1 << 20),
    }
}

fn request(w: &mut World, client: usize, req: Req) -> Result<(), String> {
    let mut s = w.script.take().expect("a fuzz world has a script");
    make_request(&mut s, w, client, req);
    w.script = Some(s);
    Ok(())
}

fn make_request(s: &mut Script, w: &mut World, client: usize, req: Req) {
    let c = &s.clients[client];
    if !c.conn.as_ref().is_some_and(|c| c.state != ConnState::Refused) {
        return;
    }
    let cluster = s.cluster;
    let p = |ps: PathSel| s.path(ps);
    let (request, what) = match req {
        Req::Create(cs) => {
            let (r, _, what) = create_request(s, &cs);
            (r, what)
        }
        Req::Delete { path, version: v } => {
            let path = p(path);
            (Request::Delete(PathVersion { path: path.clone(), version: version(v) }), What::Delete { path })
        }
        Req::DeleteContainer { path } => {
            let path = p(path);
            (Request::DeleteContainer(PathRequest { path: path.clone() }), What::Delete { path })
        }
        Req::SetData { path, data: d, version: v } => {
            let path = p(path);
            let req = SetDataRequest { path: path.clone(), data: data(d).map(Into::into), version: version(v) };
            (Request::SetData(req), What::SetData { path })
        }
        Req::GetData { path, watch } => {
            let path = p(path);
            let what = What::Read { path: path.clone(), watch: watch.then_some(Table::Data) };
            (Request::GetData(PathWatch { path, watch }), what)
        }
        Req::Exists { path, watch } => {
            let path = p(path);
            let what = What::Read { path: path.clone(), watch: watch.then_some(Table::Exist) };
            (Request::Exists(PathWatch { path, watch }), what)
        }
        Req::GetChildren { path, watch } => {
            let path = p(path);
            (Request::GetChildren(PathWatch { path: path.clone(), watch }), What::Children { path, watch })
        }
        Req::GetChildren2 { path, watch } => {
            let path = p(path);
            let what = What::Read { path: path.clone(), watch: watch.then_some(Table::Child) };
            (Request::GetChildren2(PathWatch { path, watch }), what)
        }
        Req::GetAcl { path } => {
            let path = p(path);
            (Request::GetAcl(PathRequest { path: path.clone() }), What::Read { path, watch: None })
        }
        Req::SetAcl { path, acl: a, version: v } => {
            let mut path = p(path);
            if cluster && path == "/" {
                // The simulator's own clients create under the root and must keep being able to.
                path = "/a".into();
            }
            (Request::SetAcl(SetAclRequest { path, acl: acl(a), version: version(v) }), What::Plain)
        }
        Req::Sync { path } => (Request::Sync(PathRequest { path: p(path) }), What::Plain),
        Req::Multi(ops) => {
            let ops: Vec<MultiOp> = ops
                .iter()
                .take(6)
                .map(|op| match op {
                    SubOp::Create(cs) => create_request(s, cs).1,
                    SubOp::Delete { path, version: v } => {
                        MultiOp::Delete(PathVersion { path: p(*path), version: version(*v) })
                    }
                    SubOp::SetData { path, data: d, version: v } => MultiOp::SetData(SetDataRequest {
                        path: p(*path),
                        data: data(*d).map(Into::into),
                        version: version(*v),
                    }),
                    SubOp::Check { path, version: v } => {
                        MultiOp::Check(PathVersion { path: p(*path), version: version(*v) })
                    }
                })
                .collect();
            (Request::Multi(ops.clone()), What::Multi { ops })
        }
        Req::MultiRead(ops) => {
            let ops: Vec<MultiOp> = ops
                .iter()
                .take(6)
                .map(|(children, path, watch)| {
                    let pw = PathWatch { path: p(*path), watch: *watch };
                    if *children {
                        MultiOp::GetChildren(pw)
                    } else {
                        MultiOp::GetData(pw)
                    }
                })
                .collect();
            let n = ops.len();
            (Request::MultiRead(ops), What::MultiRead { n })
        }
        Req::AddWatch { path, recursive } => {
            let path = p(path);
            (Request::AddWatch(AddWatchRequest { path, mode: recursive as i32 }), What::Plain)
        }
        Req::RemoveWatches { path, kind } => {
            let req = WatchesRequest { path: p(path), watcher_type: (kind % 4) as i32 };
            (Request::RemoveWatches(req), What::Plain)
        }
        Req::CheckWatches { path, kind } => {
            let req = WatchesRequest { path: p(path), watcher_type: (kind % 4) as i32 };
            (Request::CheckWatches(req), What::Plain)
        }
        Req::SetWatches { relative, data: d, exist, child } => {
            let sw = SetWatches {
                relative_zxid: relative_zxid(c, relative),
                data: paths(s, &d),
                exist: paths(s, &exist),
                child: paths(s, &child),
            };
            (Request::SetWatches(sw), What::Plain)
        }
        Req::SetWatches2 { relative, data: d, persistent: pers, recursive } => {
            let sw = SetWatches2 {
                base: SetWatches {
                    relative_zxid: relative_zxid(c, relative),
                    data: paths(s, &d),
                    exist: Vec::new(),
                    child: Vec::new(),
                },
                persistent: paths(s, &pers),
                persistent_recursive: paths(s, &recursive),
            };
            (Request::SetWatches2(sw), What::Plain)
        }
        Req::Auth(a) => {
            let (scheme, auth): (&str, &[u8]) = match a {
                AuthSel::Alice => ("digest", b"alice:secret"),
                AuthSel::AliceWrongPassword => ("digest", b"alice:wrong"),
                AuthSel::Super => ("digest", b"super:secret"),
                AuthSel::Unknown => ("kerberos-ish", b"who"),
                AuthSel::Ip => ("ip", b"127.0.0.1"),
            };
            (Request::Auth(AuthPacket { auth_type: 0, scheme: scheme.into(), auth: auth.to_vec() }), What::Plain)
        }
        Req::GetEphemerals { prefix } => {
            (Request::GetEphemerals(GetEphemeralsRequest { prefix: p(prefix) }), What::Plain)
        }
        Req::GetAllChildrenNumber { path } => {
            (Request::GetAllChildrenNumber(PathRequest { path: p(path) }), What::Plain)
        }
        Req::WhoAmI => (Request::WhoAmI, What::Plain),
        Req::Ping => (Request::Ping, What::Plain),
        Req::Reconfig => {
            let req =
                ReconfigRequest { joining: None, leaving: Some("2".into()), new_members: None, cur_config_id: -1 };
            (Request::Reconfig(req), What::Plain)
        }
        Req::CloseSession => (Request::CloseSession, What::Close),
    };
    let c = &mut s.clients[client];
    let xid = match request {
        Request::Ping => warden_proto::xid::PING,
        Request::Auth(_) => warden_proto::xid::AUTH,
        Request::SetWatches(_) | Request::SetWatches2(_) => warden_proto::xid::SET_WATCHES,
        _ => {
            c.next_xid += 1;
            c.next_xid
        }
    };
    let conn = c.conn.as_mut().expect("checked above");
    s.summary.requests += 1;
    let p = SPending { xid, op: request.op_code().code(), what };
    if conn.state != ConnState::Established {
        // Its watches are registered when it is sent.
        conn.queued.push((p, request));
        return;
    }
    send_request(s, w, client, p, request);
}

/// Sends a request on the client's established connection.
fn send_request(s: &mut Script, w: &mut World, client: usize, p: SPending, request: Request) {
    let mut register: Vec<(Table, String)> = Vec::new();
    let mut persistent: Vec<(bool, String)> = Vec::new();
    match &request {
        Request::MultiRead(ops) => {
            for op in ops {
                match op {
                    MultiOp::GetData(pw) if pw.watch => register.push((Table::Data, pw.path.clone())),
                    MultiOp::GetChildren(pw) if pw.watch => register.push((Table::Child, pw.path.clone())),
                    _ => {}
                }
            }
        }
        Request::AddWatch(a) => persistent.push((a.mode == 1, a.path.clone())),
        Request::SetWatches(sw) => {
            register.extend(sw.data.iter().chain(&sw.exist).map(|p| (Table::Data, p.clone())));
            register.extend(sw.child.iter().map(|p| (Table::Child, p.clone())));
        }
        Request::SetWatches2(sw) => {
            register.extend(sw.base.data.iter().chain(&sw.base.exist).map(|p| (Table::Data, p.clone())));
            register.extend(sw.base.child.iter().map(|p| (Table::Child, p.clone())));
            persistent.extend(sw.persistent.iter().map(|p| (false, p.clone())));
            persistent.extend(sw.persistent_recursive.iter().map(|p| (true, p.clone())));
        }
        _ => {}
    }
    let conn = s.clients[client].conn.as_mut().expect("an established connection");
    for (table, path) in register {
        conn.watches.add(table, &path);
    }
    for (recursive, path) in persistent {
        if recursive {
            conn.watches.recursive.insert(path);
        } else {
            conn.watches.persistent.insert(path);
        }
    }
    let (id, xid) = (conn.id, p.xid);
    conn.last_sent = w.now;
    conn.pending.push_back(p);
    w.send_to_server(id, ToServer::Request { xid, req: request });
}

/// Scripted client `client`'s periodic wake-up: a keepalive connection idle for a third of its
/// session timeout pings.
pub(crate) fn wake(w: &mut World, client: usize) -> Result<(), String> {
    w.at(w.now + 50, Ev::ClientWake { client: SCRIPTED + client });
    let now = w.now;
    let mut s = w.script.take().expect("a fuzz world has a script");
    let idle = s.clients[client].conn.as_ref().is_some_and(|c| {
        c.keepalive && c.state == ConnState::Established && now.saturating_sub(c.last_sent) > c.timeout_ms / 3
    }) && !s.ending;
    if idle {
        let p = SPending { xid: warden_proto::xid::PING, op: warden_proto::OpCode::Ping.code(), what: What::Plain };
        send_request(&mut s, w, client, p, Request::Ping);
    }
    w.script = Some(s);
    Ok(())
}

/// A message from the server on scripted client `client`'s connection `conn`.
pub(crate) fn on_message(w: &mut World, client: usize, conn: ConnId, msg: ClientMsg) -> Result<(), String> {
    // The script is taken out while its client handles the message: acknowledging a write
    // needs the world's checker.
    let mut s = w.script.take().expect("a fuzz world has a script");
    let result = handle(&mut s, w, client, conn, msg);
    w.script = Some(s);
    result
}

fn handle(s: &mut Script, w: &mut World, client: usize, conn: ConnId, msg: ClientMsg) -> Result<(), String> {
    let zxid_floor = s.clients[client].last_zxid;
    let c = &mut s.clients[client];
    let Some(cur) = c.conn.as_mut().filter(|cur| cur.id == conn) else { return Ok(()) };
    let frame = match msg {
        ClientMsg::Closed => {
            w.trace(|| format!("scripted client {client}: connection {conn} closed by the server"));
            c.conn = None;
            return Ok(());
        }
        ClientMsg::Frame(f) => f,
    };
    let who = format!("scripted client {client} (connection {conn})");
    let body = frame.get(4..).ok_or_else(|| format!("{who}: a frame shorter than its length"))?;
    match cur.state {
        ConnState::Refused => return Err(format!("{who}: a frame after the server refused the session")),
        ConnState::Connecting { expect } => {
            let resp = <ConnectResponse as warden_proto::Record>::from_bytes(body)
                .map_err(|e| format!("{who}: the ConnectResponse does not decode: {e}"))?;
            let got = resp.session_id;
            match expect {
                Expect::New if got == 0 => return Err(format!("{who}: a new session was answered with session 0")),
                Expect::New if s.issued.contains(&got) => {
                    return Err(format!("{who}: new session {got:#x} was handed out before"));
                }
                Expect::Resume(id) if got != 0 && got != id => {
                    return Err(format!("{who}: asked to resume {id:#x}, got session {got:#x}"));
                }
                Expect::Refusal if got != 0 => {
                    return Err(format!(
                        "{who}: a wrong password or an unknown session was accepted as session {got:#x}"
                    ));
                }
                _ => {}
            }
            if got == 0 {
                cur.state = ConnState::Refused;
                if resp.timeout_ms != 0 {
                    return Err(format!("{who}: a refusal with timeout {}", resp.timeout_ms));
                }
                return Ok(());
            }
            if !(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&resp.timeout_ms) {
                return Err(format!("{who}: negotiated timeout {} outside the server's bounds", resp.timeout_ms));
            }
            if resp.passwd.len() != 16 {
                return Err(format!("{who}: a session password of {} bytes", resp.passwd.len()));
            }
            if expect == Expect::New {
                s.issued.insert(got);
                s.sessions.push((got, resp.passwd.clone()));
                s.summary.sessions += 1;
            }
            cur.state = ConnState::Established;
            cur.timeout_ms = resp.timeout_ms as u64;
            c.session = Some((got, resp.passwd));
            for (p, request) in std::mem::take(&mut cur.queued) {
                send_request(s, w, client, p, request);
            }
            return Ok(());
        }
        ConnState::Established => {}
    }
    let hdr = <ReplyHeader as warden_proto::Record>::from_bytes(body)
        .map_err(|e| format!("{who}: the reply header does not decode: {e}"))?;
    if hdr.xid == warden_proto::xid::NOTIFICATION {
        let (_, ev) = decode_notification(body).map_err(|e| format!("{who}: a notification does not decode: {e}"))?;
        s.summary.notifications += 1;
        // The path is not checked: setWatches registers paths as given, valid or not, and
        // answers one that does not exist with NodeDeleted at once (as ZooKeeper's does).
        if ev.state != 3 || !(1..=4).contains(&ev.event_type) {
            return Err(format!("{who}: a malformed notification {ev:?}"));
        }
        if !cur.watches.fire(ev.event_type, &ev.path) {
            return Err(format!(
                "{who}: event {} on {} without a registered watch (a one-time watch fired twice?)",
                ev.event_type, ev.path
            ));
        }
        return Ok(());
    }
    // Auth is answered before the pipeline, as ZooKeeper answers it: ahead of requests still
    // in flight. Everything else in request order.
    let next = match hdr.xid {
        warden_proto::xid::AUTH => cur.pending.iter().position(|p| p.xid == hdr.xid),
        _ => (!cur.pending.is_empty()).then_some(0),
    };
    let Some(p) = next.and_then(|i| cur.pending.remove(i)) else {
        return Err(format!("{who}: a reply (xid {}) with no such request outstanding", hdr.xid));
    };
    if p.xid != hdr.xid {
        return Err(format!("{who}: reply xid {} but the oldest request is xid {} (not FIFO)", hdr.xid, p.xid));
    }
    s.summary.replies += 1;
    w.trace(|| format!("{who}: reply xid {} op {} err {} zxid {:#x}", hdr.xid, p.op, hdr.err, hdr.zxid));
    let err = hdr.err;
    let op = p.op;
    match ErrorCode::from_code(err) {
        None => return Err(format!("{who}: op {op} answered with {err}, not a ZooKeeper error code")),
        Some(ErrorCode::MarshallingError | ErrorCode::Unimplemented) => {
            return Err(format!("{who}: the well-formed op {op} answered {err}"));
        }
        Some(_) => {}
    }
    if hdr.zxid > 0 && hdr.zxid < zxid_floor {
        return Err(format!(
            "{who}: op {op} answered at zxid {:#x}, below {zxid_floor:#x} which the client saw before",
            hdr.zxid
        ));
    }
    if hdr.zxid > 0 {
        c.last_zxid = c.last_zxid.max(hdr.zxid);
    }
    let (_, resp) = decode_reply(op, body).map_err(|e| format!("{who}: the reply to op {op} does not decode: {e}"))?;
    if err != 0 {
        s.summary.errors += 1;
        if let What::Read { path, watch: Some(Table::Exist) } = &p.what {
            if err == ErrorCode::NoNode.code() {
                cur.watches.add(Table::Exist, path);
            }
        }
        return Ok(());
    }
    let zxid = hdr.zxid;
    let mut acked = false;
    match p.what {
        What::Plain => {}
        What::Close => c.session = None,
        What::Create { path, sequential, stat } => {
            let (got, st) = match resp {
                Some(Response::Create { path }) if !stat => (path, None),
                Some(Response::Create2 { path, stat: st }) if stat => (path, Some(st)),
                other => return Err(format!("{who}: create of {path} answered {other:?}")),
            };
            check_created(&who, &path, &got, sequential)?;
            if let Some(st) = st {
                if st.czxid != zxid || st.mzxid != zxid {
                    return Err(format!("{who}: create of {got} at {zxid:#x} answered {st:?}"));
                }
            }
            c.writes.insert(got.clone(), (zxid, false));
            remember(&mut s.created, got);
            acked = true;
        }
        What::SetData { path } => {
            let Some(Response::Stat(st)) = resp else { return Err(format!("{who}: setData answered {resp:?}")) };
            if st.mzxid != zxid {
                return Err(format!("{who}: setData of {path} at {zxid:#x} answered mzxid {:#x}", st.mzxid));
            }
            c.writes.insert(path, (zxid, false));
            acked = true;
        }
        What::Delete { path } => {
            c.writes.insert(path, (zxid, true));
            acked = true;
        }
        What::Read { path, watch } => {
            let st = match &resp {
                Some(
                    Response::GetData { stat, .. } | Response::Children2 { stat, .. } | Response::GetAcl { stat, .. },
                ) => stat,
                Some(Response::Stat(stat)) => stat,
                other => return Err(format!("{who}: read of {path} answered {other:?}")),
            };
            read_sees_writes(&who, &c.writes, &path, st, zxid)?;
            if let Some(t) = watch {
                cur.watches.add(t, &path);
            }
        }
        What::Children { path, watch } => {
            if !matches!(resp, Some(Response::Children { .. })) {
                return Err(format!("{who}: getChildren of {path} answered {resp:?}"));
            }
            if watch {
                cur.watches.add(Table::Child, &path);
            }
        }
        What::Multi { ops } => {
            let Some(Response::Multi(results)) = resp else { return Err(format!("{who}: multi answered {resp:?}")) };
            if results.len() != ops.len() {
                return Err(format!("{who}: a multi of {} ops answered {} results", ops.len(), results.len()));
            }
            if results.iter().any(|r| matches!(r, MultiResult::Error(_))) {
                return failed_multi(&who, &results);
            }
            for (op, r) in ops.iter().zip(&results) {
                match (op, r) {
                    (MultiOp::Create(q), MultiResult::Create { path }) => {
                        check_created(&who, &q.path, path, matches!(q.flags, 2 | 3 | 6))?;
                        c.writes.insert(path.clone(), (zxid, false));
                        remember(&mut s.created, path.clone());
                    }
                    (MultiOp::Create2(q) | MultiOp::CreateContainer(q), MultiResult::Create2 { path, .. }) => {
                        check_created(&who, &q.path, path, matches!(q.flags, 2 | 3 | 6))?;
                        c.writes.insert(path.clone(), (zxid, false));
                        remember(&mut s.created, path.clone());
                    }
                    (MultiOp::CreateTtl(q), MultiResult::Create2 { path, .. }) => {
                        check_created(&who, &q.path, path, matches!(q.flags, 2 | 3 | 6))?;
                        c.writes.insert(path.clone(), (zxid, false));
                        remember(&mut s.created, path.clone());
                    }
                    (MultiOp::Delete(q), MultiResult::Delete) => {
                        c.writes.insert(q.path.clone(), (zxid, true));
                    }
                    (MultiOp::SetData(q), MultiResult::SetData { stat }) => {
                        if stat.mzxid != zxid {
                            return Err(format!("{who}: a multi's setData at {zxid:#x} answered {stat:?}"));
                        }
                        c.writes.insert(q.path.clone(), (zxid, false));
                    }
                    (MultiOp::Check(_), MultiResult::Check) => {}
                    (op, r) => return Err(format!("{who}: a successful multi answered {op:?} with {r:?}")),
                }
            }
            acked = !ops.is_empty() && zxid > 0;
        }
        What::MultiRead { n } => {
            let Some(Response::Multi(results)) = resp else {
                return Err(format!("{who}: multiRead answered {resp:?}"));
            };
            if results.len() != n {
                return Err(format!("{who}: a multiRead of {n} ops answered {} results", results.len()));
            }
        }
    }
    if acked {
        s.summary.acked_writes += 1;
        w.check.acked(zxid, Acked::Write).map_err(|e| format!("{who}: {e}"))?;
    }
    Ok(())
}

/// A multi that failed (as ZooKeeper answers one, with header error 0): every result an error,
/// 0 for the ops before the one that failed, its code, then RuntimeInconsistency for the rest.
fn failed_multi(who: &str, results: &[MultiResult]) -> Result<(), String> {
    let codes: Vec<Option<i32>> =
        results.iter().map(|r| if let MultiResult::Error(e) = r { Some(*e) } else { None }).collect();
    let failed = codes.iter().position(|c| c.is_some_and(|c| c != 0));
    let ok = failed.is_some_and(|i| {
        codes[..i].iter().all(|c| *c == Some(0))
            && codes[i]
                .is_some_and(|c| c != ErrorCode::RuntimeInconsistency.code() && ErrorCode::from_code(c).is_some())
            && codes[i + 1..].iter().all(|c| *c == Some(ErrorCode::RuntimeInconsistency.code()))
    });
    match ok {
        true => Ok(()),
        false => Err(format!("{who}: a failed multi answered {results:?}")),
    }
}

fn remember(created: &mut Vec<String>, path: String) {
    if !created.contains(&path) {
        if created.len() >= 32 {
            created.remove(0);
        }
        created.push(path);
    }
}

fn check_created(who: &str, asked: &str, got: &str, sequential: bool) -> Result<(), String> {
    let ok = match sequential {
        false => got == asked,
        true => got
            .strip_prefix(asked)
            .is_some_and(|suffix| suffix.len() == 10 && suffix.bytes().all(|b| b.is_ascii_digit())),
    };
    match ok {
        true => Ok(()),
        false => Err(format!("{who}: create of {asked} (sequential: {sequential}) answered {got}")),
    }
}

/// A read of `path` answered at `zxid` with `st`: no newer than the reply, and it sees the client's
/// own earlier acknowledged write to the path (a node it created or set has mzxid at least that
/// write's; one it deleted, if there, was created after).
fn read_sees_writes(
    who: &str,
    writes: &BTreeMap<String, (i64, bool)>,
    path: &str,
    st: &Stat,
    zxid: i64,
) -> Result<(), String> {
    if st.czxid > st.mzxid || (zxid > 0 && (st.mzxid > zxid || st.pzxid > zxid)) {
        return Err(format!("{who}: read of {path} answered at {zxid:#x} with stat {st:?}"));
    }
    match writes.get(path) {
        Some(&(z, false)) if st.mzxid < z => Err(format!(
            "{who}: read of {path} shows mzxid {:#x}, older than the client's acknowledged write at {z:#x}",
            st.mzxid
        )),
        Some(&(z, true)) if st.czxid <= z => Err(format!(
            "{who}: read of {path} shows the node created at {:#x}, which the client deleted at {z:#x}",
            st.czxid
        )),
        _ => Ok(()),
    }
}

/// At the end, after the liveness phase and [`SETTLE_MS`]: every request on a connection still
/// open has its reply, and every handshake its answer.
fn end_checks(w: &World) -> Result<(), String> {
    for (i, c) in script(w).clients.iter().enumerate() {
        let Some(conn) = &c.conn else { continue };
        if !w.cconns.contains_key(&conn.id) {
            continue;
        }
        if let ConnState::Connecting { .. } = conn.state {
            return Err(format!(
                "scripted client {i}: its handshake on connection {} was neither answered nor closed",
                conn.id
            ));
        }
        if let Some(p) = conn.pending.front() {
            return Err(format!(
                "scripted client {i}: {} request(s) on open connection {} unanswered {SETTLE_MS} ms after recovery (oldest: xid {} op {})",
                conn.pending.len(),
                conn.id,
                p.xid,
                p.op
            ));
        }
    }
    Ok(())
}
