//! An in-memory ensemble for the ZAB machines: nodes with a durable/volatile storage model, a
//! network of per-connection FIFO queues with seeded connection loss, duplication and reordering
//! between connections, crashes that keep a random prefix of unsynced writes, and an election
//! oracle that picks the live voter with the highest (currentEpoch, last durable zxid, sid), as
//! Fast Leader Election would.
//!
//! The transport contract (what the real shell's TCP connections give, and what ZAB, like
//! ZooKeeper, relies on): a connection delivers its packets in order, each once, with no silent
//! loss; a lost packet shows up as the connection closing at both ends. The harness keeps the
//! order: each direction of a connection is FIFO, and a "reorder" only lets another connection's
//! oldest packet go first (connections are independent). A "drop" closes the connection at both
//! ends, as TCP does when a segment cannot get through. The one breach kept on purpose is the
//! duplicate (a packet delivered again right after itself, never skipping one): the machines must
//! refuse it and go back to LOOKING. A silently lost UPTODATE would leave a learner in sync forever
//! (kept alive by PINGs, as in ZooKeeper), so when faults heal (`settle`), every connection that had
//! a duplicate is closed at both ends; liveness is owed only from there.
//!
//! Why not in-connection reordering or silent loss (lossy seed 1782): a PROPOSAL of the new epoch,
//! counter 1, that overtakes (or survives the silent loss of) the end of a DIFF stream is accepted
//! by the learner, because zxids cannot tell that hole from a leader whose history ends there
//! (`zab::follows`; scripted in zab_sync.rs); the learner then persists a log missing committed
//! txns. TCP never delivers that stream, so the harness must not either.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use warden_proto::quorum::{packet_type as pt, QuorumPacket};
use warden_proto::txn::Txn;
use warden_quorum::zab::*;

/// xorshift64*: deterministic, seedable.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

#[derive(Debug, Clone)]
pub enum StorageOp {
    Append(TxnEntry),
    Epoch(EpochKind, i64),
    Snapshot(Vec<TxnEntry>),
}

pub enum Role {
    Down,
    Looking,
    Leader(Box<Leader>),
    Learner(Box<Learner>, u64),
}

pub struct Node {
    pub sid: Sid,
    pub voter: bool,
    /// Durable history (snapshot + log, as txns).
    pub log: Vec<TxnEntry>,
    pub accepted: i64,
    pub current: i64,
    pub pending: Vec<StorageOp>,
    /// Applied txns (the "tree").
    pub tree: Vec<TxnEntry>,
    pub role: Role,
    /// Snapshot that arrived with a SNAP packet, waiting for InstallSnapshot.
    pub incoming_snapshot: Option<Vec<TxnEntry>>,
}

impl Node {
    pub fn last_zxid(&self) -> Zxid {
        self.log.last().map_or(0, TxnEntry::zxid)
    }
}

pub struct Msg {
    pub from: Sid,
    pub to: Sid,
    pub conn: u64,
    pub packet: QuorumPacket,
    pub snapshot: Option<Vec<TxnEntry>>,
}

#[derive(Default, Clone, Copy)]
pub struct Faults {
    pub drop: u64,
    pub dup: u64,
    pub reorder: u64,
    pub crash: u64,
    pub restart: u64,
    pub flush: u64,
}

pub struct Cluster {
    pub nodes: BTreeMap<Sid, Node>,
    pub voters: Vec<Sid>,
    pub net: Vec<Msg>,
    pub rng: Rng,
    pub now_ms: u64,
    pub tick_ms: u64,
    pub next_conn: u64,
    pub leader: Option<Sid>,
    /// Every txn any leader committed, by zxid.
    pub committed: BTreeMap<Zxid, TxnEntry>,
    pub proposals: u64,
    pub faults: Faults,
    pub trace: Vec<String>,
    /// Connections that delivered a duplicate (closed on `settle`).
    pub faulted_conns: BTreeSet<u64>,
}

impl Cluster {
    pub fn new(seed: u64, voters: &[Sid], observers: &[Sid]) -> Self {
        let mut nodes = BTreeMap::new();
        for (sid, voter) in voters.iter().map(|s| (*s, true)).chain(observers.iter().map(|s| (*s, false))) {
            nodes.insert(
                sid,
                Node {
                    sid,
                    voter,
                    log: Vec::new(),
                    accepted: 0,
                    current: 0,
                    pending: Vec::new(),
                    tree: Vec::new(),
                    role: Role::Looking,
                    incoming_snapshot: None,
                },
            );
        }
        Cluster {
            nodes,
            voters: voters.to_vec(),
            net: Vec::new(),
            rng: Rng::new(seed),
            now_ms: 0,
            tick_ms: 100,
            next_conn: 1,
            leader: None,
            committed: BTreeMap::new(),
            proposals: 0,
            faults: Faults::default(),
            trace: Vec::new(),
            faulted_conns: BTreeSet::new(),
        }
    }

    fn leader_cfg(&self, sid: Sid) -> LeaderConfig {
        let mut cfg = LeaderConfig::new(sid, self.voters.iter().copied());
        cfg.tick_ms = self.tick_ms;
        cfg.init_limit = 10;
        cfg.sync_limit = 5;
        cfg.max_committed_log = 6;
        cfg
    }

    /// The election oracle: with a quorum of live voters, the best of them leads; every other live
    /// node follows or observes it.
    pub fn elect(&mut self) {
        let live: Vec<Sid> =
            self.voters.iter().copied().filter(|s| !matches!(self.nodes[s].role, Role::Down)).collect();
        if live.len() * 2 <= self.voters.len() {
            return;
        }
        for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.flush_silently(sid);
        }
        let best = live.iter().copied().max_by_key(|s| (self.nodes[s].current, self.nodes[s].last_zxid(), *s)).unwrap();
        // A new leader holds every committed txn.
        let node = &self.nodes[&best];
        for (z, e) in &self.committed {
            assert!(
                node.log.iter().any(|x| x == e),
                "new leader {best} lacks committed {z:#x}\n{}",
                self.trace.join("\n")
            );
        }
        self.trace.push(format!("elect {best}"));
        self.net.clear();
        self.leader = Some(best);
        let node = self.nodes.get_mut(&best).unwrap();
        node.tree = node.log.clone();
        let init = LeaderInit {
            accepted_epoch: node.accepted,
            current_epoch: node.current,
            last_zxid: node.last_zxid(),
            history_base: 0,
            history: node.log.clone(),
            pending_config: None,
        };
        let cfg = self.leader_cfg(best);
        let mut out = Vec::new();
        let leader = Leader::new(cfg, init, self.now_ms, &mut out).unwrap();
        self.nodes.get_mut(&best).unwrap().role = Role::Leader(Box::new(leader));
        self.run_actions(best, out);
        for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
            if sid != best && matches!(self.nodes[&sid].role, Role::Looking) {
                self.join(sid, best);
            }
        }
    }

    fn join(&mut self, sid: Sid, leader: Sid) {
        self.flush_silently(sid);
        let conn = self.next_conn;
        self.next_conn += 1;
        let node = self.nodes.get_mut(&sid).unwrap();
        node.tree = node.log.clone();
        let role = if node.voter { LearnerRole::Follower } else { LearnerRole::Observer };
        let mut cfg = LearnerConfig::new(sid, leader, role);
        cfg.tick_ms = self.tick_ms;
        cfg.init_limit = 10;
        cfg.sync_limit = 5;
        let state =
            LocalState { accepted_epoch: node.accepted, current_epoch: node.current, last_zxid: node.last_zxid() };
        let mut out = Vec::new();
        let learner = Learner::new(cfg, state, self.now_ms, &mut out);
        node.role = Role::Learner(Box::new(learner), conn);
        self.run_actions(sid, out);
    }

    /// Completes pending writes without telling a machine (the role that asked is gone).
    fn flush_silently(&mut self, sid: Sid) {
        let node = self.nodes.get_mut(&sid).unwrap();
        for op in std::mem::take(&mut node.pending) {
            apply_op(node, op);
        }
    }

    fn conn_of(&self, learner: Sid) -> Option<u64> {
        match &self.nodes[&learner].role {
            Role::Learner(l, conn) if Some(l.leader()) == self.leader => Some(*conn),
            _ => None,
        }
    }

    pub fn run_actions(&mut self, sid: Sid, actions: Vec<Action>) {
        for a in actions {
            self.run_action(sid, a);
        }
        self.check(sid);
    }

    fn run_action(&mut self, sid: Sid, a: Action) {
        let now = self.now_ms;
        if std::env::var("ZAB_TRACE").is_ok() {
            self.trace.push(format!("{now} {sid}: {}", brief(&a)));
        }
        match a {
            Action::Send { to, packet } => {
                let conn =
                    if matches!(self.nodes[&sid].role, Role::Leader(_)) { self.conn_of(to) } else { self.conn_of(sid) };
                if let Some(conn) = conn {
                    self.net.push(Msg { from: sid, to, conn, packet, snapshot: None });
                }
            }
            Action::SendSnapshot { to, zxid } => {
                let tree = self.nodes[&sid].tree.clone();
                assert_eq!(tree.last().map_or(0, TxnEntry::zxid), zxid, "snapshot zxid differs from the tree");
                let m = self
                    .net
                    .iter_mut()
                    .rev()
                    .find(|m| m.to == to && m.packet.packet_type == pt::SNAP)
                    .expect("SNAP before the snapshot");
                m.snapshot = Some(tree);
            }
            Action::ProbeLog { .. } | Action::SendLogDiff { .. } => {
                unreachable!("the harness's leaders keep snapshot_size_factor below 0 (no DIFF from disk)")
            }
            Action::Disconnect { sid: peer, .. } => self.disconnect_learner(peer),
            Action::Persist(e) => self.nodes.get_mut(&sid).unwrap().pending.push(StorageOp::Append(e)),
            Action::PersistEpoch { kind, epoch } => {
                self.nodes.get_mut(&sid).unwrap().pending.push(StorageOp::Epoch(kind, epoch))
            }
            Action::Truncate { zxid } => {
                let node = self.nodes.get_mut(&sid).unwrap();
                assert!(node.pending.is_empty());
                node.log.retain(|e| e.zxid() <= zxid);
                node.tree = node.log.clone();
            }
            Action::InstallSnapshot { zxid } => {
                let node = self.nodes.get_mut(&sid).unwrap();
                let snap = node.incoming_snapshot.take().expect("snapshot stream");
                assert_eq!(snap.last().map_or(0, TxnEntry::zxid), zxid);
                node.tree = snap.clone();
                node.pending.push(StorageOp::Snapshot(snap));
            }
            Action::ApplyCommitted(e) => {
                let node = self.nodes.get_mut(&sid).unwrap();
                let last = node.tree.last().map_or(0, TxnEntry::zxid);
                assert!(e.zxid() > last, "node {sid} applied {:#x} after {last:#x}", e.zxid());
                // Every server applies only txns durable in its own log (the leader included).
                assert!(
                    node.log.last().is_some_and(|l| l.zxid() >= e.zxid()),
                    "node {sid} applied {:#x} before its log was durable",
                    e.zxid()
                );
                node.tree.push(e.clone());
                if matches!(node.role, Role::Leader(_)) {
                    if let Some(prev) = self.committed.insert(e.zxid(), e.clone()) {
                        assert_eq!(prev, e, "two different txns committed at {:#x}", e.zxid());
                    }
                } else {
                    assert_eq!(
                        self.committed.get(&e.zxid()),
                        Some(&e),
                        "node {sid} applied an uncommitted txn {:#x}\n{}",
                        e.zxid(),
                        self.trace.join("\n")
                    );
                }
            }
            Action::PingReply { to, zxid } => {
                self.run_action(sid, Action::Send { to, packet: codec::ping_reply(zxid, &[]) })
            }
            Action::HandOver { leader } => {
                // This harness elects by fiat: the removed leader just leaves its role.
                self.run_action(sid, Action::GoLooking { reason: format!("handed over to {leader}") })
            }
            Action::GoLooking { reason } | Action::StepAside { reason } => {
                self.trace.push(format!("{now} node {sid} LOOKING: {reason}"));
                let was_leader = matches!(self.nodes[&sid].role, Role::Leader(_));
                self.nodes.get_mut(&sid).unwrap().role = Role::Looking;
                if was_leader {
                    self.leader_gone();
                } else if let Some(l) = self.leader {
                    self.notify_leader_disconnect(l, sid);
                }
            }
            Action::Broadcasting { .. } => {
                // A quorum ACKed NEWLEADER: the leader's whole initial history is committed.
                for e in self.nodes[&sid].log.clone() {
                    if let Some(prev) = self.committed.insert(e.zxid(), e.clone()) {
                        assert_eq!(prev, e, "two different txns committed at {:#x}", e.zxid());
                    }
                }
            }
            Action::Synced { .. }
            | Action::TouchSessions { .. }
            | Action::Forwarded { .. }
            | Action::Revalidate { .. }
            | Action::Revalidated { .. }
            | Action::LeaderConfig(_)
            | Action::SyncDone => {}
        }
    }

    fn leader_gone(&mut self) {
        self.leader = None;
        self.net.clear();
        for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
            if let Role::Learner(l, _) = &mut self.nodes.get_mut(&sid).unwrap().role {
                let out = acts(|o| l.on_disconnect(o));
                self.run_actions(sid, out);
            }
        }
    }

    fn notify_leader_disconnect(&mut self, leader: Sid, learner: Sid) {
        self.net.retain(|m| m.from != learner && m.to != learner);
        if let Role::Leader(l) = &mut self.nodes.get_mut(&leader).unwrap().role {
            let out = acts(|o| l.on_disconnect(learner, o));
            self.run_actions(leader, out);
        }
    }

    fn disconnect_learner(&mut self, sid: Sid) {
        self.net.retain(|m| m.from != sid && m.to != sid);
        if let Role::Learner(l, _) = &mut self.nodes.get_mut(&sid).unwrap().role {
            let out = acts(|o| l.on_disconnect(o));
            self.run_actions(sid, out);
        }
    }

    fn check(&self, sid: Sid) {
        let node = &self.nodes[&sid];
        match &node.role {
            Role::Leader(l) => l.check_invariants(),
            Role::Learner(l, _) => l.check_invariants(),
            _ => Ok(()),
        }
        .unwrap_or_else(|e| panic!("node {sid}: {e}\n{}", self.trace.join("\n")));
        for w in node.tree.windows(2) {
            assert!(w[0].zxid() < w[1].zxid(), "node {sid} tree not increasing");
        }
        for w in node.log.windows(2) {
            assert!(w[0].zxid() < w[1].zxid(), "node {sid} log not increasing");
        }
    }

    /// Delivers one message: the oldest in the network, or (a reorder) the oldest of a random
    /// connection and direction, never one that overtakes an earlier packet of its own
    /// connection and direction. It may be duplicated (delivered now and again later), or its
    /// connection may be dropped (closed at both ends, the packet lost with it).
    pub fn deliver_one(&mut self) -> bool {
        if self.net.is_empty() {
            return false;
        }
        let idx = if self.rng.chance(self.faults.reorder) {
            let pick = &self.net[self.rng.below(self.net.len() as u64) as usize];
            let (conn, from) = (pick.conn, pick.from);
            self.net.iter().position(|m| m.conn == conn && m.from == from).unwrap_or(0)
        } else {
            0
        };
        if self.rng.chance(self.faults.drop) {
            let m = self.net.remove(idx);
            self.trace.push(format!(
                "drop the connection {}->{} at {:?}",
                m.from,
                m.to,
                pt::name(m.packet.packet_type)
            ));
            // The learner's end, if this is still its connection; a stale packet just goes.
            let learner = if matches!(self.nodes[&m.to].role, Role::Leader(_)) { m.from } else { m.to };
            if matches!(&self.nodes[&learner].role, Role::Learner(_, conn) if *conn == m.conn) {
                // The learner's GoLooking closes the leader's end too (`notify_leader_disconnect`).
                self.disconnect_learner(learner);
            }
            return true;
        }
        let m = if self.rng.chance(self.faults.dup) {
            let m = &self.net[idx];
            self.faulted_conns.insert(m.conn);
            Msg { from: m.from, to: m.to, conn: m.conn, packet: m.packet.clone(), snapshot: m.snapshot.clone() }
        } else {
            self.net.remove(idx)
        };
        let now = self.now_ms;
        let to = m.to;
        let out = match &mut self.nodes.get_mut(&to).unwrap().role {
            Role::Leader(_) => {
                let current = match &self.nodes[&m.from].role {
                    Role::Learner(x, conn) => *conn == m.conn && x.leader() == to,
                    _ => false,
                };
                if !current {
                    return true;
                }
                match &mut self.nodes.get_mut(&to).unwrap().role {
                    Role::Leader(l) => acts(|o| l.on_packet(m.from, &m.packet, now, o)),
                    _ => unreachable!(),
                }
            }
            Role::Learner(l, conn) if *conn == m.conn => {
                if m.packet.packet_type == pt::SNAP {
                    self.nodes.get_mut(&to).unwrap().incoming_snapshot = m.snapshot.clone();
                }
                match &mut self.nodes.get_mut(&to).unwrap().role {
                    Role::Learner(l, _) => acts(|o| l.on_packet(&m.packet, now, o)),
                    _ => unreachable!(),
                }
            }
            _ => Vec::new(),
        };
        self.run_actions(to, out);
        true
    }

    /// Completes every pending write of `sid` and reports it.
    pub fn flush(&mut self, sid: Sid) {
        let ops = std::mem::take(&mut self.nodes.get_mut(&sid).unwrap().pending);
        let mut durable = None;
        for op in ops {
            let node = self.nodes.get_mut(&sid).unwrap();
            match &op {
                StorageOp::Append(e) => durable = Some(e.zxid()),
                StorageOp::Snapshot(s) => durable = Some(s.last().map_or(0, TxnEntry::zxid)),
                StorageOp::Epoch(..) => {}
            }
            apply_op(node, op.clone());
            if let StorageOp::Epoch(kind, epoch) = op {
                self.report(sid, durable.take(), Some((kind, epoch)));
            }
        }
        self.report(sid, durable, None);
    }

    fn report(&mut self, sid: Sid, durable: Option<Zxid>, epoch: Option<(EpochKind, i64)>) {
        let mut out = Vec::new();
        match &mut self.nodes.get_mut(&sid).unwrap().role {
            Role::Leader(l) => {
                if let Some(z) = durable {
                    out.extend(acts(|o| l.on_durable(z, o)));
                }
                if let Some((k, e)) = epoch {
                    out.extend(acts(|o| l.on_epoch_durable(k, e, o)));
                }
            }
            Role::Learner(l, _) => {
                if let Some(z) = durable {
                    out.extend(acts(|o| l.on_durable(z, o)));
                }
                if let Some((k, e)) = epoch {
                    out.extend(acts(|o| l.on_epoch_durable(k, e, o)));
                }
            }
            _ => {}
        }
        self.run_actions(sid, out);
    }

    pub fn tick(&mut self) {
        self.now_ms += self.tick_ms;
        let now = self.now_ms;
        for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
            let out = match &mut self.nodes.get_mut(&sid).unwrap().role {
                Role::Leader(l) => acts(|o| l.on_tick(now, o)),
                Role::Learner(l, _) => acts(|o| l.on_tick(now, o)),
                _ => Vec::new(),
            };
            self.run_actions(sid, out);
        }
    }

    pub fn propose(&mut self) -> bool {
        let Some(sid) = self.leader else { return false };
        let n = self.proposals;
        let Role::Leader(l) = &mut self.nodes.get_mut(&sid).unwrap().role else { return false };
        let txn = Txn::SetData { path: "/x".into(), data: Some(n.to_be_bytes().to_vec().into()), version: -1 };
        let mut out = Vec::new();
        match l.propose(7, n as i32, n as i64, txn, &mut out) {
            Ok(_) => {
                self.proposals += 1;
                self.run_actions(sid, out);
                true
            }
            Err(_) => false,
        }
    }

    /// Crash: volatile state is lost, except a random prefix of unsynced writes.
    pub fn crash(&mut self, sid: Sid) {
        let keep = {
            let n = self.nodes[&sid].pending.len() as u64;
            self.rng.below(n + 1) as usize
        };
        self.trace.push(format!("{} crash {sid} keeping {keep} writes", self.now_ms));
        let was_leader = matches!(self.nodes[&sid].role, Role::Leader(_));
        let node = self.nodes.get_mut(&sid).unwrap();
        let ops: Vec<StorageOp> = std::mem::take(&mut node.pending).into_iter().take(keep).collect();
        for op in ops {
            apply_op(node, op);
        }
        node.role = Role::Down;
        node.tree.clear();
        if was_leader {
            self.leader_gone();
        } else if let Some(l) = self.leader {
            self.notify_leader_disconnect(l, sid);
        }
    }

    pub fn restart(&mut self, sid: Sid) {
        self.trace.push(format!("{} restart {sid}", self.now_ms));
        let node = self.nodes.get_mut(&sid).unwrap();
        node.tree = node.log.clone();
        node.role = Role::Looking;
        if let Some(l) = self.leader {
            self.join(sid, l);
        }
    }

    /// One scheduler step.
    pub fn step(&mut self) {
        let f = self.faults;
        if self.leader.is_none() {
            self.elect();
        }
        // Rejoin LOOKING learners to the current leader.
        if let Some(l) = self.leader {
            for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
                if sid != l && matches!(self.nodes[&sid].role, Role::Looking) {
                    self.join(sid, l);
                }
            }
        }
        match self.rng.below(100) {
            0..=39 => {
                self.deliver_one();
            }
            40..=59 => {
                let sids: Vec<Sid> = self.nodes.keys().copied().collect();
                let sid = sids[self.rng.below(sids.len() as u64) as usize];
                if self.rng.chance(f.flush.max(1)) || f.flush == 0 {
                    self.flush(sid);
                }
            }
            60..=69 => {
                self.propose();
            }
            70..=74 => self.tick(),
            75 => {
                let sids: Vec<Sid> = self.nodes.keys().copied().collect();
                let sid = sids[self.rng.below(sids.len() as u64) as usize];
                if self.rng.chance(f.crash) && !matches!(self.nodes[&sid].role, Role::Down) {
                    self.crash(sid);
                } else if matches!(self.nodes[&sid].role, Role::Down) && self.rng.chance(f.restart) {
                    self.restart(sid);
                }
            }
            _ => {
                self.deliver_one();
            }
        }
    }

    /// Heals faults and runs until quiet: everything delivered, written and committed. Healing
    /// restores the transport contract (module docs): a connection that delivered a duplicate is
    /// closed at both ends.
    pub fn settle(&mut self) {
        self.faults = Faults::default();
        for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
            let faulted = match &self.nodes[&sid].role {
                Role::Learner(_, conn) => self.faulted_conns.contains(conn),
                _ => false,
            };
            if faulted {
                self.trace.push(format!("{} heal: close the faulted connection of {sid}", self.now_ms));
                self.disconnect_learner(sid);
            }
        }
        self.faulted_conns.clear();
        for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
            if matches!(self.nodes[&sid].role, Role::Down) {
                self.restart(sid);
            }
        }
        for round in 0..2000 {
            if self.leader.is_none() {
                self.elect();
            }
            if let Some(l) = self.leader {
                for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
                    if sid != l && matches!(self.nodes[&sid].role, Role::Looking) {
                        self.join(sid, l);
                    }
                }
            }
            while self.deliver_one() {}
            for sid in self.nodes.keys().copied().collect::<Vec<_>>() {
                self.flush(sid);
            }
            if round % 5 == 0 {
                self.tick();
            }
            if self.net.is_empty() && self.nodes.values().all(|n| n.pending.is_empty()) && self.all_synced() {
                return;
            }
        }
        panic!("cluster did not settle\n{}", self.trace.join("\n"));
    }

    pub fn all_synced(&self) -> bool {
        let Some(l) = self.leader else { return false };
        let Role::Leader(leader) = &self.nodes[&l].role else { return false };
        leader.is_established()
            && leader.last_committed() == leader.last_proposed()
            && self.nodes.values().all(|n| match &n.role {
                Role::Learner(x, _) => x.is_synced(),
                Role::Leader(_) => true,
                _ => false,
            })
    }
}

fn apply_op(node: &mut Node, op: StorageOp) {
    match op {
        StorageOp::Append(e) => {
            assert!(
                e.zxid() > node.last_zxid(),
                "node {} appended {:#x} after {:#x}",
                node.sid,
                e.zxid(),
                node.last_zxid()
            );
            node.log.push(e);
        }
        StorageOp::Epoch(EpochKind::Accepted, e) => node.accepted = e,
        StorageOp::Epoch(EpochKind::Current, e) => node.current = e,
        StorageOp::Snapshot(s) => node.log = s,
    }
}

fn brief(a: &Action) -> String {
    match a {
        Action::Send { to, packet } => {
            format!("send {to} {} {:#x}", pt::name(packet.packet_type).unwrap_or("?"), packet.zxid)
        }
        Action::Persist(e) => format!("persist {:#x}", e.zxid()),
        Action::ApplyCommitted(e) => format!("apply {:#x}", e.zxid()),
        other => format!("{other:?}"),
    }
}

/// What one call of a machine pushed into its caller's buffer.
fn acts<A>(call: impl FnOnce(&mut Vec<A>)) -> Vec<A> {
    let mut out = Vec::new();
    call(&mut out);
    out
}
