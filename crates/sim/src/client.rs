//! Simulated client sessions. Each keeps one connection at a time to a random server, issues
//! creates (persistent, sequential, ephemeral), setData with the expected version, getData (some
//! with a watch), sync followed by a read of another client's node, pings and, rarely,
//! closeSession; it moves to another server when its connection closes or goes quiet
//! (reconnecting with its session id, password and last zxid seen). Replies are decoded with
//! `warden_proto`.
//!
//! Checked here: replies come in request order (FIFO per session); a read of one's own node sees
//! every acknowledged write to it (read-your-writes) and never NoNode; a read after sync sees
//! every write acknowledged to anyone before the sync was sent; a data watch fires at most once
//! per registration, and a read sent right after the event sees the change.

use std::collections::{BTreeMap, VecDeque};

use rand::Rng;
use warden_node::ConnId;
use warden_proto::request::{CreateRequest, PathWatch, SetDataRequest, SyncRequest};
use warden_proto::response::{decode_notification, decode_reply, Response};
use warden_proto::{Acl, ConnectRequest, ConnectResponse, ErrorCode, ReplyHeader, Request};
use warden_quorum::Sid;

use crate::check::Acked;
use crate::world::{Phase, ToServer, World};

/// What a server sends a client.
#[derive(Debug)]
pub(crate) enum ClientMsg {
    Frame(bytes::Bytes),
    Closed,
}

#[derive(Debug)]
enum Op {
    Create { ephemeral: bool },
    SetData { path: String },
    Get { path: String, watch: bool, min_version: Option<i32>, after_watch: Option<i64> },
    Sync,
    Close,
    Ping,
    Reconfig,
}

#[derive(Debug)]
struct Pending {
    xid: i32,
    op: Op,
    sent_ms: u64,
}

#[derive(Debug)]
struct Conn {
    id: ConnId,
    established: bool,
    pending: VecDeque<Pending>,
    last_heard: u64,
    last_sent: u64,
    timeout_ms: u64,
}

pub(crate) struct Client {
    pub(crate) idx: usize,
    session_id: i64,
    passwd: Vec<u8>,
    last_zxid: i64,
    conn: Option<Conn>,
    next_xid: i32,
    counter: u32,
    /// Own persistent nodes and their data version (`None`: a setData's outcome is unknown).
    own: BTreeMap<String, Option<i32>>,
    /// Registered data watches: path -> mzxid seen when it was set.
    watches: BTreeMap<String, i64>,
    /// Liveness phase: a write and a read answered since healing.
    pub(crate) live_ok: (bool, bool),
    /// Do not reconnect before this time (after closing the session).
    pause_until: u64,
}

const REQUESTED_TIMEOUT_MS: i32 = 4_000;
const MAX_OUTSTANDING: usize = 3;
/// A request unanswered this long stops counting toward `MAX_OUTSTANDING`, so the client goes on
/// sending on the same connection, as an application whose call timed out does (its reply is
/// still awaited and checked): a server that wakes from a pause finds requests sent at any point
/// of it, not only at its start.
const OP_TIMEOUT_MS: u64 = 400;

impl Client {
    pub(crate) fn new(idx: usize) -> Client {
        Client {
            idx,
            session_id: 0,
            passwd: Vec::new(),
            last_zxid: 0,
            conn: None,
            next_xid: 1,
            counter: 0,
            own: BTreeMap::new(),
            watches: BTreeMap::new(),
            live_ok: (false, false),
            pause_until: 0,
        }
    }

    fn lose_conn(&mut self) {
        if let Some(c) = self.conn.take() {
            for p in c.pending {
                if let Op::SetData { path } = p.op {
                    self.own.insert(path, None);
                }
            }
        }
        self.watches.clear();
    }
}

fn send(w: &mut World, client: usize, op: Op, req: Request) {
    let now = w.now;
    let c = &mut w.clients[client];
    let Some(conn) = c.conn.as_mut() else { return };
    let xid = match op {
        Op::Ping => warden_proto::xid::PING,
        _ => {
            c.next_xid += 1;
            c.next_xid
        }
    };
    conn.pending.push_back(Pending { xid, op, sent_ms: now });
    conn.last_sent = now;
    let id = conn.id;
    w.send_to_server(id, ToServer::Request { xid, req });
}

/// Periodic work: connect, give up on a quiet server, issue a request or a ping.
pub(crate) fn wake(w: &mut World, client: usize) -> Result<(), String> {
    let next = w.now + w.rng.gen_range(10..=80);
    w.at(next, crate::world::Ev::ClientWake { client });
    if w.phase == Phase::Done {
        return Ok(());
    }
    let now = w.now;
    let c = &mut w.clients[client];
    match &c.conn {
        None => {
            if now < c.pause_until {
                return Ok(());
            }
            let sid = w.rng.gen_range(1..=w.servers.len() as Sid);
            let Some(id) = w.new_client_conn(client, sid) else { return Ok(()) };
            let c = &mut w.clients[client];
            c.conn = Some(Conn {
                id,
                established: false,
                pending: VecDeque::new(),
                last_heard: now,
                last_sent: now,
                timeout_ms: REQUESTED_TIMEOUT_MS as u64,
            });
            let req = ConnectRequest {
                timeout_ms: REQUESTED_TIMEOUT_MS,
                session_id: c.session_id,
                passwd: c.passwd.clone(),
                last_zxid_seen: c.last_zxid,
                ..Default::default()
            };
            w.send_to_server(id, ToServer::Connect(req));
            Ok(())
        }
        Some(conn) => {
            let quiet = now.saturating_sub(conn.last_heard);
            if quiet > conn.timeout_ms * 2 / 3 || (!conn.established && quiet > 2_000) {
                let id = conn.id;
                c.lose_conn();
                w.send_to_server(id, ToServer::Gone);
                w.cconns.remove(&id);
                return Ok(());
            }
            if !conn.established {
                return Ok(());
            }
            let live = conn.pending.iter().filter(|p| now.saturating_sub(p.sent_ms) < OP_TIMEOUT_MS).count();
            if live < MAX_OUTSTANDING && conn.pending.len() < 4 * MAX_OUTSTANDING && w.rng.gen_bool(0.7) {
                issue(w, client);
            } else if now.saturating_sub(conn.last_sent) > conn.timeout_ms / 3 {
                send(w, client, Op::Ping, Request::Ping);
            }
            Ok(())
        }
    }
}

fn issue(w: &mut World, client: usize) {
    // Membership changes are part of the fault phase: the liveness phase, which heals every
    // fault, also stops the churn (a LOOKING server restarts its round at each newer
    // configuration, so endless reconfigs can keep it from ever finishing one).
    if w.opts.reconfig && client == 0 && w.phase == Phase::Faults && w.rng.gen_bool(0.1) {
        let req = reconfig_request(w);
        return send(w, client, Op::Reconfig, req);
    }
    let mut roll = w.rng.gen_range(0..100);
    if w.faults.scenario == Some(crate::Scenario::PausedLeader) && client % 2 == 1 && roll >= 20 {
        // Half the clients mostly sync and read others' nodes: one that sits on a paused leader
        // sends syncs with no write of its own ahead of them.
        roll = 93 + roll % 6;
    }
    let c = &mut w.clients[client];
    let known: Vec<String> = c.own.iter().filter(|(_, v)| v.is_some()).map(|(p, _)| p.clone()).collect();
    let idx = c.idx;
    if roll < 40 || known.is_empty() {
        c.counter += 1;
        let (path, flags, ephemeral) = match roll % 8 {
            0 => (format!("/q{idx}_"), 2, false),
            1 | 2 => (format!("/e{idx}_{}", c.counter), 1, true),
            _ => (format!("/p{idx}_{}", c.counter), 0, false),
        };
        let data = Some(format!("{idx}:{}", c.counter).into_bytes());
        let req = Request::Create2(CreateRequest { path, data, acl: Acl::open_unsafe(), flags });
        send(w, client, Op::Create { ephemeral }, req);
        return;
    }
    let path = known[w.rng.gen_range(0..known.len())].clone();
    if roll < 65 {
        // Until the reply, the version is unknown: no second setData on it in flight.
        let version = w.clients[client].own.insert(path.clone(), None).flatten().unwrap_or(-1);
        let data = Some(format!("v{}", version + 1).into_bytes().into());
        let req = Request::SetData(SetDataRequest { path: path.clone(), data, version });
        send(w, client, Op::SetData { path }, req);
    } else if roll < 93 {
        let watch = w.rng.gen_bool(0.3);
        let min_version = w.clients[client].own[&path];
        let req = Request::GetData(PathWatch { path: path.clone(), watch });
        send(w, client, Op::Get { path, watch, min_version, after_watch: None }, req);
    } else if roll < 99 {
        // sync, then read some other client's node: sees every write acknowledged before.
        // One of the last nodes anyone created: the writes a stale server would miss.
        let others: Vec<String> = w
            .check
            .acked_paths()
            .rev()
            .filter_map(|(_, a)| match a {
                Acked::Create { path } => Some(path.clone()),
                _ => None,
            })
            .take(4)
            .collect();
        let path = if others.is_empty() { path } else { others[w.rng.gen_range(0..others.len())].clone() };
        let min_version = w.check.acked_version(&path);
        // With linearizable reads the read alone must see as much, half the time it goes alone.
        if !w.opts.linearizable_reads || w.rng.gen_bool(0.5) {
            send(w, client, Op::Sync, Request::Sync(SyncRequest { path: path.clone() }));
        }
        let req = Request::GetData(PathWatch { path: path.clone(), watch: false });
        send(w, client, Op::Get { path, watch: false, min_version, after_watch: None }, req);
    } else {
        send(w, client, Op::Close, Request::CloseSession);
    }
}

/// A random membership change over the run's servers: a server leaves (at least two voters
/// stay, or the leader refuses), or joins back as a voter or an observer.
fn reconfig_request(w: &mut World) -> Request {
    use warden_proto::request::ReconfigRequest;
    use warden_proto::ServerRole;
    let all = w.all_sids();
    let sid = all[w.rng.gen_range(0..all.len())];
    let (joining, leaving) = match w.rng.gen_range(0..3) {
        0 => (None, Some(sid.to_string())),
        r => {
            let role = if r == 1 { ServerRole::Participant } else { ServerRole::Observer };
            let mut line = format!("server.{sid}=");
            crate::world::sim_server(sid, role).render(&mut line);
            (Some(line), None)
        }
    };
    Request::Reconfig(ReconfigRequest { joining, leaving, new_members: None, cur_config_id: -1 })
}

pub(crate) fn on_message(w: &mut World, client: usize, conn: ConnId, msg: ClientMsg) -> Result<(), String> {
    let now = w.now;
    let c = &mut w.clients[client];
    let Some(cur) = c.conn.as_mut().filter(|cur| cur.id == conn) else { return Ok(()) };
    cur.last_heard = now;
    let frame = match msg {
        ClientMsg::Closed => {
            c.lose_conn();
            return Ok(());
        }
        ClientMsg::Frame(f) => f,
    };
    let body = frame.get(4..).ok_or("short frame")?;
    if !cur.established {
        let resp = <ConnectResponse as warden_proto::Record>::from_bytes(body)
            .map_err(|e| format!("client {client}: bad handshake: {e}"))?;
        if resp.session_id == 0 {
            // Expired: start over with a new session (the server closes this connection).
            c.session_id = 0;
            c.passwd.clear();
            c.lose_conn();
            return Ok(());
        }
        if c.session_id != 0 && resp.session_id != c.session_id {
            return Err(format!("client {client}: resumed {:#x} but got session {:#x}", c.session_id, resp.session_id));
        }
        c.session_id = resp.session_id;
        c.passwd = resp.passwd;
        cur.established = true;
        cur.timeout_ms = resp.timeout_ms.max(1) as u64;
        return Ok(());
    }
    let hdr = <ReplyHeader as warden_proto::Record>::from_bytes(body).map_err(|e| format!("reply header: {e}"))?;
    if hdr.xid == warden_proto::xid::NOTIFICATION {
        return on_notification(w, client, body);
    }
    let Some(p) = cur.pending.pop_front() else {
        return Err(format!("client {client}: reply xid {} with nothing outstanding", hdr.xid));
    };
    if p.xid != hdr.xid {
        return Err(format!(
            "client {client}: reply xid {} but the oldest request is xid {} (not FIFO)",
            hdr.xid, p.xid
        ));
    }
    if hdr.zxid > 0 {
        c.last_zxid = c.last_zxid.max(hdr.zxid);
    }
    let op_code = match &p.op {
        Op::Create { .. } => warden_proto::OpCode::Create2.code(),
        Op::SetData { .. } => warden_proto::OpCode::SetData.code(),
        Op::Get { .. } => warden_proto::OpCode::GetData.code(),
        Op::Sync => warden_proto::OpCode::Sync.code(),
        Op::Close => warden_proto::OpCode::CloseSession.code(),
        Op::Ping => warden_proto::OpCode::Ping.code(),
        Op::Reconfig => warden_proto::OpCode::Reconfig.code(),
    };
    let (_, resp) = decode_reply(op_code, body).map_err(|e| format!("client {client}: bad reply: {e}"))?;
    let liveness = matches!(w.phase, Phase::Liveness { .. });
    let err = hdr.err;
    match p.op {
        Op::Create { ephemeral } => {
            if err != 0 {
                return Ok(());
            }
            let Some(Response::Create2 { path, stat }) = resp else { return Err(format!("create reply {resp:?}")) };
            if !ephemeral {
                w.clients[client].own.insert(path.clone(), Some(0));
                w.check.acked(stat.czxid, Acked::Create { path })?;
            }
            w.summary.acked_writes += 1;
            if liveness {
                w.clients[client].live_ok.0 = true;
            }
        }
        Op::SetData { path } => {
            if err == 0 {
                let Some(Response::Stat(stat)) = resp else { return Err(format!("setData reply {resp:?}")) };
                w.clients[client].own.insert(path.clone(), Some(stat.version));
                w.check.acked(stat.mzxid, Acked::SetData { path, version: stat.version })?;
                if liveness {
                    w.clients[client].live_ok.0 = true;
                }
            } else if err == ErrorCode::BadVersion.code() || err == ErrorCode::NoNode.code() {
                return Err(format!(
                    "client {client}: setData of its own {path} failed with {err}: an acknowledged write was lost or a phantom one applied"
                ));
            }
        }
        Op::Get { path, watch, min_version, after_watch } => {
            if err == ErrorCode::NoNode.code() {
                return Err(format!("client {client}: read of {path} says NoNode after its create was acknowledged"));
            }
            if err != 0 {
                return Ok(());
            }
            let Some(Response::GetData { stat, .. }) = resp else { return Err(format!("getData reply {resp:?}")) };
            w.summary.reads_checked += 1;
            if let Some(v) = min_version {
                if stat.version < v {
                    return Err(format!(
                        "client {client}: read of {path} shows version {} below the acknowledged {v}",
                        stat.version
                    ));
                }
            }
            if let Some(m) = after_watch {
                if stat.mzxid <= m {
                    return Err(format!(
                        "client {client}: watch on {path} fired but a read right after still shows mzxid {:#x} <= {m:#x}",
                        stat.mzxid
                    ));
                }
            }
            let c = &mut w.clients[client];
            if watch && c.conn.is_some() {
                c.watches.entry(path).or_insert(stat.mzxid);
            }
            if liveness {
                c.live_ok.1 = true;
            }
        }
        Op::Sync | Op::Ping => {}
        Op::Reconfig => {
            // Refusals (a reconfig in flight, no synced quorum for it, too few voters) are fine.
            if err == 0 {
                let Some(Response::GetData { data: Some(data), .. }) = resp else {
                    return Err(format!("reconfig reply {resp:?}"));
                };
                let text = String::from_utf8(data).map_err(|_| "a reconfig reply that is not text")?;
                w.check.reconfig_acked(hdr.zxid, &text)?;
                w.summary.reconfigs_acked += 1;
            }
        }
        Op::Close => {
            let c = &mut w.clients[client];
            c.session_id = 0;
            c.passwd.clear();
            c.pause_until = now + 200;
        }
    }
    Ok(())
}

fn on_notification(w: &mut World, client: usize, body: &[u8]) -> Result<(), String> {
    let (_, ev) = decode_notification(body).map_err(|e| format!("client {client}: bad notification: {e}"))?;
    w.summary.watch_events += 1;
    let c = &mut w.clients[client];
    let Some(m) = c.watches.remove(&ev.path) else {
        return Err(format!(
            "client {client}: watch event {} on {} without a registered watch (fired twice?)",
            ev.event_type, ev.path
        ));
    };
    if ev.event_type == warden_proto::EventType::NodeDeleted.code() {
        return Err(format!("client {client}: its persistent node {} reported deleted", ev.path));
    }
    let path = ev.path.clone();
    let req = Request::GetData(PathWatch { path: path.clone(), watch: false });
    send(w, client, Op::Get { path, watch: false, min_version: None, after_watch: Some(m) }, req);
    Ok(())
}
