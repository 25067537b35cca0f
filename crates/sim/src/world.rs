//! The simulated world: servers (election + node + storage), the virtual network and disk, the
//! clients, and the event loop. Events are ordered by (virtual time, sequence number); one source
//! of choices (`Choices`: the `StdRng` seeded from the run's seed, or fuzz bytes in front of a
//! fixed one) makes every choice.
//!
//! Each server runs the same `warden_driver::Driver` as `warden_server`'s owner task, and this file
//! carries out its commands over simulated I/O as the owner, the storage thread and the ensemble
//! shell carry them out over real I/O: storage ops go to the storage queue; the storage "thread"
//! executes everything queued with `Store::execute`, then fsyncs (a later event: a crash in
//! between loses the unsynced part) and reports `Synced`; a reload is carried out at once; a
//! snapshot is written later unless one is still being written, then old files are purged.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use rand::Rng;
use warden_driver::{Command, Driver, DriverConfig, Event as DriverEvent};
use warden_node::{Clock, ConnId, Input, Node, NodeConfig, QuorumSetup, RoleKind, SnapshotData};
use warden_proto::election::Notification;
use warden_proto::quorum::{packet_type as pt, QuorumPacket};
use warden_proto::ConnectRequest;
use warden_quorum::zab::{LogProbe, TxnEntry};
use warden_quorum::{ElectionAction, FastLeaderElection, QuorumConfig, Sid};
use warden_storage::{DataDir, EpochFile, FaultFs, Report, SnapshotOptions, Store, StoreOp};
use warden_tree::DataTree;

use crate::check::{fingerprint, Checker};
use crate::choices::Choices;
use crate::client::{Client, ClientMsg};
use crate::faults::Faults;
use crate::{Options, Summary, LIVENESS_BOUND_MS};

pub(crate) const TICK_MS: u64 = 100;
const SNAP_COUNT: u64 = 60;
/// Log preallocation: small, the disk is in memory.
const PRE_ALLOC: u64 = 16 * 1024;
const MONO_BASE_MS: u64 = 1_000_000;
const WALL_BASE_MS: i64 = 1_700_000_000_000;
/// Servers' wall clocks differ by up to twice this at the start.
const MAX_SKEW_MS: i64 = 5_000;
/// A learner's dial across a cut link fails after this long (connect timeout).
const DIAL_TIMEOUT_MS: u64 = 1_000;
/// A refused dial is tried again this long after, doubling each time, at most this many times
/// (the server's `QuorumNetConfig::retry_delay` and `max_connect_tries`).
const DIAL_RETRY_MS: u64 = 10;
const MAX_DIAL_TRIES: u32 = 10;

pub(crate) fn data_dir() -> PathBuf {
    PathBuf::from("/data")
}

/// A server's data directories (dataDir and dataLogDir both `data_dir()`) on its disk `fs`.
pub(crate) fn disk(fs: FaultFs) -> DataDir {
    DataDir::with_fs(Arc::new(fs), data_dir(), data_dir())
}

/// What travels on a quorum connection.
#[derive(Debug, Clone)]
pub(crate) enum QItem {
    /// An encoded `QuorumPacket` (`wire::encode_packet`).
    Packet(Vec<u8>),
    /// The snapshot blob after a SNAP packet, as the server's quorum port sends it; `hist` is the
    /// sender's applied history up to the snapshot's zxid (for the checker only).
    Blob { bytes: Arc<Vec<u8>>, hist: Arc<BTreeMap<i64, u64>> },
}

/// What a client connection carries to a server.
#[derive(Debug)]
pub(crate) enum ToServer {
    Connect(ConnectRequest),
    Request { xid: i32, req: warden_proto::Request },
    Gone,
}

/// What a client connection carries to a server on the wire: encoded frames (`wire`).
#[derive(Debug)]
pub(crate) enum Wire {
    Connect(Vec<u8>),
    Request(Vec<u8>),
    Gone,
}

#[derive(Debug)]
pub(crate) enum Ev {
    Tick {
        sid: Sid,
        inc: u64,
    },
    FleTimer {
        sid: Sid,
        inc: u64,
    },
    Vote {
        from: Sid,
        to: Sid,
        /// A framed notification (`wire::encode_vote`).
        n: Vec<u8>,
    },
    Dial {
        conn: u64,
    },
    Quorum {
        conn: u64,
        to_leader: bool,
        item: QItem,
    },
    QuorumClosed {
        conn: u64,
        sid: Sid,
    },
    StoreWrite {
        sid: Sid,
        inc: u64,
    },
    StoreSynced {
        sid: Sid,
        inc: u64,
    },
    SnapshotWrite {
        sid: Sid,
        inc: u64,
        tree: Box<DataTree>,
        sessions: Vec<(i64, i32)>,
        zxid: i64,
    },
    ToServer {
        conn: ConnId,
        msg: Wire,
    },
    ToClient {
        conn: ConnId,
        msg: ClientMsg,
    },
    ClientWake {
        client: usize,
    },
    Fault,
    Scenario,
    ScenarioCrash {
        sid: Sid,
        inc: u64,
        why: &'static str,
    },
    Restart {
        sid: Sid,
    },
    Heal,
    /// Standalone: the owner's next turn applies the next chunk of what is durable.
    ApplyChunk {
        sid: Sid,
        inc: u64,
    },
    /// A paused server resumes: its backlog is handled, in order.
    Resume {
        sid: Sid,
    },
    /// A leader's look into its on-disk log (`Command::ProbeLog`) is answered.
    LogProbed {
        sid: Sid,
        inc: u64,
        to: Sid,
        probe: warden_quorum::zab::LogProbe,
    },
}

impl Ev {
    fn kind(&self) -> u64 {
        match self {
            Ev::Tick { .. } => 1,
            Ev::FleTimer { .. } => 2,
            Ev::Vote { .. } => 3,
            Ev::Dial { .. } => 4,
            Ev::Quorum { .. } => 5,
            Ev::QuorumClosed { .. } => 6,
            Ev::StoreWrite { .. } => 7,
            Ev::StoreSynced { .. } => 8,
            Ev::SnapshotWrite { .. } => 9,
            Ev::ToServer { .. } => 10,
            Ev::ToClient { .. } => 11,
            Ev::ClientWake { .. } => 12,
            Ev::Fault => 13,
            Ev::Scenario => 16,
            Ev::ScenarioCrash { .. } => 17,
            Ev::Restart { .. } => 14,
            Ev::Heal => 15,
            Ev::ApplyChunk { .. } => 18,
            Ev::Resume { .. } => 19,
            Ev::LogProbed { .. } => 20,
        }
    }
}

/// A quorum-port connection, learner -> leader.
#[derive(Debug)]
pub(crate) struct QConn {
    pub(crate) leader: Sid,
    pub(crate) learner: Sid,
    pub(crate) open: bool,
    /// Accepted by the leader (its first packet was delivered).
    accepted: bool,
    /// Time of the last delivery scheduled in each direction (index: to_leader as usize), so a
    /// connection stays FIFO.
    last: [u64; 2],
    /// Items held because their direction is cut (TCP retransmits once it heals).
    held: [VecDeque<QItem>; 2],
    /// Dials refused so far: the learner's dial loop tries again (`dial_with_retries`).
    refused: u32,
    /// Closed by a leader that flushed it first (`close_quorum_flushed`): what the leader sent
    /// before still reaches the learner.
    draining: bool,
}

/// A client connection.
#[derive(Debug)]
pub(crate) struct CConn {
    pub(crate) client: usize,
    pub(crate) sid: Sid,
    inc: u64,
    last: [u64; 2],
}

pub(crate) struct Running {
    pub(crate) driver: Driver,
    fle: FastLeaderElection,
    store: Store,
    /// Storage ops queued for the storage "thread", in order.
    queue: VecDeque<StoreOp>,
    busy: bool,
    /// What the batch written and not yet synced will report.
    inflight: Option<Report>,
    snapshot_busy: bool,
    /// Standalone: an `ApplyChunk` is queued.
    chunk_scheduled: bool,
    fle_timer_at: Option<u64>,
    learner_conn: Option<(Sid, u64)>,
    leader_conns: BTreeMap<Sid, u64>,
    snap_zxid: Option<i64>,
    pub(crate) clients: BTreeSet<ConnId>,
}

pub(crate) struct Server {
    pub(crate) sid: Sid,
    pub(crate) inc: u64,
    pub(crate) fs: FaultFs,
    pub(crate) run: Option<Running>,
    /// Lost durable data (wiped or silently truncated disk) and not yet resynced.
    pub(crate) amnesiac: bool,
    pub(crate) down_since: u64,
    /// A paused process (SIGSTOP, a long GC) handles nothing before this time: its events wait,
    /// in order, and its clock runs on meanwhile.
    pub(crate) paused_until: u64,
    /// Events for the paused server, in the order they arrived; `Ev::Resume` hands them over.
    backlog: VecDeque<Ev>,
    /// This server's clocks: its wall clock's skew from the others' (which a clock jump moves),
    /// and the base of its monotonic clock.
    pub(crate) wall_skew_ms: i64,
    mono_base_ms: u64,
    /// The configuration last made active here, as the server's dynamic config file keeps it
    /// (written at each activation, outside the data directory, read at start-up).
    dynamic_config: Option<warden_proto::Membership>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Faults,
    Liveness { since: u64 },
    Done,
}

pub(crate) struct World {
    pub(crate) opts: Options,
    pub(crate) rng: Choices,
    pub(crate) now: u64,
    seq: u64,
    progress: Rc<Cell<(u64, u64)>>,
    steps: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    pub(crate) servers: Vec<Server>,
    pub(crate) voters: Vec<Sid>,
    /// Observers: the sids after the voters'.
    pub(crate) observers: Vec<Sid>,
    pub(crate) qconns: BTreeMap<u64, QConn>,
    pub(crate) cconns: BTreeMap<ConnId, CConn>,
    next_conn: u64,
    pub(crate) clients: Vec<Client>,
    pub(crate) check: Checker,
    pub(crate) faults: Faults,
    pub(crate) phase: Phase,
    pub(crate) summary: Summary,
    trace_hash: u64,
    /// Txns between snapshots (the driver's snapCount).
    pub(crate) snap_count: u64,
    /// Servers run with TTL nodes enabled, containers reaped every few ticks and a superDigest
    /// (`super:secret`), so that a fuzz script reaches those paths.
    pub(crate) fuzz_config: bool,
    /// The fuzz module's scripted clients (`crate::fuzz`), whose connections carry a client index
    /// of `fuzz::SCRIPTED` or more.
    pub(crate) script: Option<Box<crate::fuzz::Script>>,
}

impl World {
    pub(crate) fn new(opts: Options, progress: Rc<Cell<(u64, u64)>>) -> World {
        let rng = Choices::seeded(opts.seed);
        World::with_choices(opts, progress, rng)
    }

    /// A world whose choices come from `rng` (fuzz bytes, see `crate::fuzz`).
    pub(crate) fn with_choices(opts: Options, progress: Rc<Cell<(u64, u64)>>, mut rng: Choices) -> World {
        let voters: Vec<Sid> = (1..=opts.servers as Sid).collect();
        let observers: Vec<Sid> = (1..=opts.observers as Sid).map(|i| opts.servers as Sid + i).collect();
        let servers = voters
            .iter()
            .chain(&observers)
            .map(|&sid| Server {
                sid,
                inc: 0,
                fs: FaultFs::new(),
                run: None,
                amnesiac: false,
                down_since: 0,
                paused_until: 0,
                backlog: VecDeque::new(),
                wall_skew_ms: rng.gen_range(-MAX_SKEW_MS..=MAX_SKEW_MS),
                mono_base_ms: MONO_BASE_MS + rng.gen_range(0..1_000_000),
                dynamic_config: None,
            })
            .collect();
        let clients = (0..opts.clients).map(Client::new).collect();
        let faults = Faults::new(&opts);
        World {
            opts,
            rng,
            now: 0,
            seq: 0,
            progress,
            steps: 0,
            queue: BTreeMap::new(),
            servers,
            voters,
            observers,
            qconns: BTreeMap::new(),
            cconns: BTreeMap::new(),
            next_conn: 1,
            clients,
            check: Checker::default(),
            faults,
            phase: Phase::Faults,
            summary: Summary::default(),
            trace_hash: 0xcbf2_9ce4_8422_2325,
            snap_count: SNAP_COUNT,
            fuzz_config: false,
            script: None,
        }
    }

    pub(crate) fn at(&mut self, when: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((when.max(self.now), self.seq), ev);
    }

    pub(crate) fn trace(&self, what: impl FnOnce() -> String) {
        if self.opts.trace {
            eprintln!("[{:>7} #{:<6}] {}", self.now, self.steps, what());
        }
    }

    /// Server `sid`'s clocks now: its own monotonic base, its own (skewed) wall clock.
    pub(crate) fn clock(&self, sid: Sid) -> Clock {
        let s = self.server(sid);
        Clock { mono_ms: s.mono_base_ms + self.now, wall_ms: WALL_BASE_MS + s.wall_skew_ms + self.now as i64 }
    }

    /// The paused server an event is for, if it is for one: the event waits until it resumes.
    fn paused_target(&self, ev: &Ev) -> Option<(Sid, u64)> {
        let sid = match ev {
            Ev::Tick { sid, .. }
            | Ev::FleTimer { sid, .. }
            | Ev::StoreWrite { sid, .. }
            | Ev::StoreSynced { sid, .. }
            | Ev::SnapshotWrite { sid, .. }
            | Ev::ApplyChunk { sid, .. }
            | Ev::LogProbed { sid, .. }
            | Ev::QuorumClosed { sid, .. } => *sid,
            Ev::Vote { to, .. } => *to,
            Ev::Quorum { conn, to_leader, .. } => {
                let c = self.qconns.get(conn)?;
                if *to_leader {
                    c.leader
                } else {
                    c.learner
                }
            }
            Ev::Dial { conn } => self.qconns.get(conn)?.leader,
            Ev::ToServer { conn, .. } => self.cconns.get(conn)?.sid,
            _ => return None,
        };
        let s = self.server(sid);
        (s.paused_until > self.now || !s.backlog.is_empty()).then_some((sid, s.paused_until))
    }

    /// Pauses server `sid` for `ms` (a fault): its events wait in its backlog until it resumes.
    pub(crate) fn pause(&mut self, sid: Sid, ms: u64) {
        let until = self.now + ms;
        let s = self.server_mut(sid);
        if until > s.paused_until {
            s.paused_until = until;
            self.at(until, Ev::Resume { sid });
        }
    }

    /// The start-up configuration of a reconfig run: the voters and the observers.
    fn initial_membership(&self) -> warden_proto::Membership {
        use warden_proto::ServerRole;
        let voters = self.voters.iter().map(|s| sim_server(*s, ServerRole::Participant));
        let observers = self.observers.iter().map(|s| sim_server(*s, ServerRole::Observer));
        warden_proto::Membership::new(voters.chain(observers), 0)
    }

    /// Every server: the voters, then the observers.
    pub(crate) fn all_sids(&self) -> Vec<Sid> {
        self.voters.iter().chain(&self.observers).copied().collect()
    }

    pub(crate) fn server(&self, sid: Sid) -> &Server {
        &self.servers[(sid - 1) as usize]
    }

    pub(crate) fn server_mut(&mut self, sid: Sid) -> &mut Server {
        &mut self.servers[(sid - 1) as usize]
    }

    fn running(&mut self, sid: Sid, inc: u64) -> Option<&mut Running> {
        let s = self.server_mut(sid);
        if s.inc != inc {
            return None;
        }
        s.run.as_mut()
    }

    pub(crate) fn run(mut self) -> Result<Summary, String> {
        self.start()?;
        while self.step()? {}
        self.finish()
    }

    /// Starts every server, wakes the clients and schedules the first faults.
    pub(crate) fn start(&mut self) -> Result<(), String> {
        for sid in self.all_sids() {
            self.start_server(sid)?;
        }
        for c in 0..self.clients.len() {
            let t = self.rng.gen_range(50..500);
            self.at(t, Ev::ClientWake { client: c });
        }
        self.faults.schedule_first(&mut self.rng, &self.opts).into_iter().for_each(|(t, ev)| self.at(t, ev));
        Ok(())
    }

    /// The time of the next event, if any.
    pub(crate) fn next_event_at(&self) -> Option<u64> {
        self.queue.first_key_value().map(|((t, _), _)| *t)
    }

    /// Handles the next event and checks the invariants after it. False once the run is over
    /// (nothing left to do, or the liveness phase completed).
    pub(crate) fn step(&mut self) -> Result<bool, String> {
        let Some(((t, _), ev)) = self.queue.pop_first() else { return Ok(false) };
        self.now = t;
        self.steps += 1;
        self.progress.set((self.steps, self.now));
        self.trace_hash = (self.trace_hash ^ (ev.kind() << 40 ^ t)).wrapping_mul(0x0100_0000_01b3);
        if self.opts.trace {
            let ev_text = format!("{ev:?}");
            self.trace(|| ev_text.chars().take(300).collect());
        }
        if let Some((sid, until)) = self.paused_target(&ev) {
            // Everything for it waits, in arrival order, also what arrives at the very end
            // of the pause before its Resume: nothing overtakes the backlog.
            self.trace(|| format!("server {sid} is paused until {until}: the event waits"));
            self.server_mut(sid).backlog.push_back(ev);
            return Ok(true);
        }
        self.handle(ev)?;
        self.after_step()?;
        if self.phase == Phase::Done {
            return Ok(false);
        }
        if self.steps > 3_000_000 {
            return Err("run did not finish within 3,000,000 steps".into());
        }
        Ok(true)
    }

    /// The checks at the end of a run, and its summary.
    pub(crate) fn finish(mut self) -> Result<Summary, String> {
        self.final_checks()?;
        self.summary.steps = self.steps;
        self.summary.end_ms = self.now;
        self.summary.trace_hash = self.trace_hash;
        Ok(self.summary)
    }

    fn handle(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::Tick { sid, inc } => {
                if self.running(sid, inc).is_some() {
                    self.step_node(sid, Input::Tick)?;
                    self.at(self.now + TICK_MS, Ev::Tick { sid, inc });
                }
            }
            Ev::FleTimer { sid, inc } => {
                let now = self.now;
                let Some(r) = self.running(sid, inc) else { return Ok(()) };
                r.fle_timer_at = None;
                let mut actions = Vec::new();
                r.fle.tick(now, &mut actions);
                self.election_actions(sid, actions)?;
            }
            Ev::Vote { from, to, n } => {
                let now = self.now;
                let inc = self.server(to).inc;
                let n = crate::wire::decode_vote(&n).map_err(|e| format!("vote from {from} to {to}: {e}"))?;
                let Some(r) = self.running(to, inc) else { return Ok(()) };
                let mut actions = Vec::new();
                r.fle.receive(from, &n, now, &mut actions);
                self.election_actions(to, actions)?;
            }
            Ev::LogProbed { sid, inc, to, probe } => {
                if self.running(sid, inc).is_some() {
                    self.step_node(sid, Input::LogProbed { sid: to, probe })?;
                }
            }
            Ev::Dial { conn } => self.on_dial(conn)?,
            Ev::Quorum { conn, to_leader, item } => self.on_quorum(conn, to_leader, item)?,
            Ev::QuorumClosed { conn, sid } => self.on_quorum_closed(conn, sid)?,
            Ev::StoreWrite { sid, inc } => self.store_write(sid, inc)?,
            Ev::StoreSynced { sid, inc } => self.store_synced(sid, inc)?,
            Ev::SnapshotWrite { sid, inc, tree, sessions, zxid } => {
                self.snapshot_write(sid, inc, *tree, sessions, zxid)
            }
            Ev::ToServer { conn, msg } => self.deliver_to_server(conn, msg)?,
            Ev::ToClient { conn, msg } => self.deliver_to_client(conn, msg)?,
            Ev::ClientWake { client } => self.client_wake(client)?,
            Ev::Fault => crate::faults::inject(self)?,
            Ev::Scenario => crate::faults::scenario_tick(self)?,
            Ev::ScenarioCrash { sid, inc, why } => {
                if self.running(sid, inc).is_some() && self.phase == Phase::Faults && !crate::faults::calm(self) {
                    self.crash(sid, why);
                    let t = self.now + self.rng.gen_range(300..1_500);
                    self.at(t, Ev::Restart { sid });
                }
            }
            Ev::Restart { sid } => {
                self.server(sid).fs.set_space_left(None);
                if self.server(sid).run.is_none() {
                    self.start_server(sid)?;
                }
            }
            Ev::Heal => crate::faults::heal_network(self),
            Ev::Resume { sid } => {
                if self.server(sid).paused_until > self.now {
                    return Ok(()); // Paused again for longer: a later Resume hands the backlog over.
                }
                self.trace(|| format!("server {sid} resumes"));
                if self.rng.gen_bool(0.5) {
                    // A process that wakes up finds its timers due and its sockets readable at
                    // once, and may read the sockets first: the timers go after the rest.
                    let backlog = std::mem::take(&mut self.server_mut(sid).backlog);
                    let (timers, rest): (VecDeque<Ev>, VecDeque<Ev>) =
                        backlog.into_iter().partition(|ev| matches!(ev, Ev::Tick { .. } | Ev::FleTimer { .. }));
                    self.server_mut(sid).backlog = rest.into_iter().chain(timers).collect();
                }
                while let Some(ev) = self.server_mut(sid).backlog.pop_front() {
                    self.trace(|| format!("server {sid} takes from its backlog: {ev:?}"));
                    self.handle(ev)?;
                    self.after_step()?;
                }
            }
            Ev::ApplyChunk { sid, inc } => {
                self.trace(|| format!("server {sid}: applies the next chunk"));
                let now = self.clock(sid);
                let Some(r) = self.running(sid, inc) else { return Ok(()) };
                r.chunk_scheduled = false;
                let mut cmds = Vec::new();
                r.driver.apply_chunk(now, &mut cmds);
                self.carry_out_all(sid, inc, cmds)?;
            }
        }
        Ok(())
    }

    // ----- servers: start, crash -----

    /// Starts a server from its disk, as `warden_server::Server::start` does: recovery (a server
    /// that cannot recover refuses to start; the operator then wipes its disk), epoch files, a
    /// snapshot unless the newest one is current, then the first election round.
    pub(crate) fn start_server(&mut self, sid: Sid) -> Result<(), String> {
        let data = disk(self.server(sid).fs.clone());
        let recovered = match data.recover(PRE_ALLOC) {
            Ok(r) => r,
            Err(e) => {
                self.trace(|| format!("server {sid} refuses to start: {e}; wiping its disk"));
                self.summary.wiped += 1;
                let s = self.server_mut(sid);
                s.fs = FaultFs::new();
                s.amnesiac = true;
                self.check.wiped(sid);
                return self.start_server(sid);
            }
        };
        if let Some(tail) = recovered.log.recovered_tail() {
            self.trace(|| format!("server {sid} truncated a torn log tail: {tail}"));
        }
        let last_zxid = recovered.tree.last_processed_zxid();
        let (accepted, current) = data.read_epochs(last_zxid).map_err(|e| format!("epoch files: {e}"))?;
        let replayed = recovered.txns_after_snapshot.iter().map(|(hdr, txn)| (hdr.zxid, fingerprint(hdr, txn)));
        self.check.restarted(sid, last_zxid, recovered.snapshot_zxid, replayed)?;
        let inc = self.server(sid).inc + 1;
        let cfg = NodeConfig {
            tick_time_ms: TICK_MS as u32,
            min_session_timeout_ms: 400,
            max_session_timeout_ms: 8_000,
            server_id: sid as u8,
            linearizable_reads: self.opts.linearizable_reads,
            reconfig_enabled: self.opts.reconfig,
            // The reconfiguring client needs no superuser.
            skip_acl: self.opts.reconfig,
            ..NodeConfig::default()
        };
        let cfg = match self.fuzz_config {
            true => NodeConfig {
                ttl_enabled: true,
                container_check_interval_ms: 3 * TICK_MS,
                super_digest: Some(format!("super:{}", warden_tree::acl::digest_id(b"super:secret"))),
                ..cfg
            },
            false => cfg,
        };
        let mut setup = QuorumSetup::new(sid, self.voters.iter().copied());
        if self.opts.reconfig {
            setup.membership = self.server(sid).dynamic_config.clone().unwrap_or_else(|| self.initial_membership());
        }
        setup.accepted_epoch = accepted;
        setup.current_epoch = current;
        if let Some(limit) = self.faults.max_counter {
            setup.max_counter = limit;
        }
        if self.opts.short_history {
            setup.max_committed_log = 20;
        }
        let standalone = self.opts.standalone;
        let node = match standalone {
            true => Node::new(NodeConfig { server_id: 0, ..cfg }, self.clock(sid)),
            false => Node::new_quorum(cfg, setup, self.clock(sid)),
        };
        let had_snapshot = recovered.snapshot.is_some();
        let snapshot_zxid = recovered.snapshot_zxid;
        let seed = self.rng.gen();
        let my_sid = (!standalone).then_some(sid);
        let mut driver =
            Driver::new(node, DriverConfig { my_sid, snap_count: self.snap_count, seed, durable_chunk: 1 });
        let mut cmds = Vec::new();
        driver.restore(
            recovered.tree,
            &recovered.sessions,
            recovered.txns_after_snapshot,
            had_snapshot.then_some(snapshot_zxid),
            &mut cmds,
        );
        let store = Store::new(data, PRE_ALLOC, recovered.log);
        // The configuration the recovered data made active (the start-up one without reconfig).
        let (quorum, text) = match driver.node().membership().filter(|m| !m.servers.is_empty()) {
            Some(m) => (QuorumConfig::from_membership(m), m.to_text().into_bytes()),
            None => (QuorumConfig::new(self.voters.iter().copied(), self.observers.iter().copied()), Vec::new()),
        };
        let mut fle = FastLeaderElection::new(sid, quorum);
        fle.set_config_text(text);
        let run = Running {
            driver,
            fle,
            store,
            queue: VecDeque::new(),
            busy: false,
            inflight: None,
            snapshot_busy: false,
            chunk_scheduled: false,
            fle_timer_at: None,
            learner_conn: None,
            leader_conns: BTreeMap::new(),
            snap_zxid: None,
            clients: BTreeSet::new(),
        };
        let s = self.server_mut(sid);
        s.inc = inc;
        s.run = Some(run);
        s.paused_until = 0;
        s.backlog.clear();
        self.trace(|| format!("server {sid} started (inc {inc}) at zxid {last_zxid:#x} (snapshot {snapshot_zxid:#x}), epochs {accepted}/{current}"));
        self.carry_out_all(sid, inc, cmds)?;
        let first_tick = self.now + self.rng.gen_range(1..=TICK_MS);
        self.at(first_tick, Ev::Tick { sid, inc });
        if standalone {
            // Nothing to resync from: a standalone server must come back with everything it served.
            if !self.check.holds_visible(sid) {
                return Err(format!("standalone server {sid} restarted at {last_zxid:#x} without txns it served"));
            }
            self.check.forget_unsynced(last_zxid);
            return Ok(());
        }
        self.elect(sid)
    }

    /// Power loss (or a process that died on a storage error): the disk keeps what was synced
    /// plus a random part of the rest; every connection of the server breaks.
    pub(crate) fn crash(&mut self, sid: Sid, why: &str) {
        let seed = self.rng.gen();
        let now = self.now;
        let s = self.server_mut(sid);
        if s.run.take().is_none() {
            return;
        }
        s.fs = s.fs.crash(seed);
        s.down_since = now;
        self.summary.crashes += 1;
        self.trace(|| format!("server {sid} crashed: {why}"));
        let conns: Vec<u64> = self
            .qconns
            .iter()
            .filter(|(_, c)| c.open && (c.leader == sid || c.learner == sid))
            .map(|(id, _)| *id)
            .collect();
        for conn in conns {
            self.close_quorum(conn, sid, false);
        }
        let cconns: Vec<ConnId> = self.cconns.iter().filter(|(_, c)| c.sid == sid).map(|(id, _)| *id).collect();
        for conn in cconns {
            self.close_client_conn_from_server(conn);
        }
        self.check.crashed(sid);
        if self.phase != Phase::Faults {
            // A fault injected before healing (a failing fsync) may still fire: restart again.
            self.at(now + 100, Ev::Restart { sid });
        }
    }

    // ----- stepping a node and carrying out its outputs -----

    /// A node input for server `sid`.
    pub(crate) fn step_node(&mut self, sid: Sid, input: Input) -> Result<(), String> {
        self.step_driver(sid, DriverEvent::Node(input))
    }

    /// Steps the server's driver with one event, then carries out its commands and ends its turn,
    /// as the server's owner does after each batch of events.
    fn step_driver(&mut self, sid: Sid, ev: DriverEvent) -> Result<(), String> {
        let now = self.clock(sid);
        let inc = self.server(sid).inc;
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        let mut cmds = Vec::new();
        r.driver.step(now, ev, &mut cmds);
        self.carry_out_all(sid, inc, cmds)
    }

    /// Carries out `cmds` in order, then ends the driver's turn and carries out what that asks
    /// for, until nothing is left; then checks the server's invariants.
    fn carry_out_all(&mut self, sid: Sid, inc: u64, mut cmds: Vec<Command>) -> Result<(), String> {
        loop {
            for cmd in std::mem::take(&mut cmds) {
                if self.running(sid, inc).is_none() {
                    return Ok(());
                }
                self.carry_out(sid, inc, cmd)?;
            }
            let now = self.clock(sid);
            let Some(r) = self.running(sid, inc) else { return Ok(()) };
            r.driver.end_turn(now, &mut cmds);
            if cmds.is_empty() {
                break;
            }
        }
        // The invariants hold once the commands are carried out (a TRUNC below the applied tree
        // leaves the node above its log until the data is reloaded from disk).
        if let Some(r) = self.running(sid, inc) {
            r.driver.check_invariants().map_err(|e| format!("server {sid}: {e}"))?;
        }
        self.after_node_step(sid)
    }

    fn carry_out(&mut self, sid: Sid, inc: u64, cmd: Command) -> Result<(), String> {
        match cmd {
            Command::Send { conn, frame, .. } => self.send_to_client(conn, ClientMsg::Frame(frame)),
            Command::Close { conn } => {
                if let Some(r) = self.running(sid, inc) {
                    r.clients.remove(&conn);
                }
                self.send_to_client(conn, ClientMsg::Closed);
            }
            Command::Store { op: StoreOp::Append(batch), may_inline: true } if self.storage_idle(sid, inc) => {
                self.append_inline(sid, inc, batch)?
            }
            Command::Store { op, .. } => self.store(sid, inc, op)?,
            Command::Snapshot { tree, sessions, zxid } => {
                let delay = self.rng.gen_range(1..=20);
                let Some(r) = self.running(sid, inc) else { return Ok(()) };
                if r.snapshot_busy {
                    self.trace(|| format!("server {sid}: too busy to snapshot at {zxid:#x}; skipping"));
                    return Ok(());
                }
                r.snapshot_busy = true;
                self.check.snapshot_taken(sid, zxid);
                let now = self.now;
                self.at(now + delay, Ev::SnapshotWrite { sid, inc, tree: Box::new(tree), sessions, zxid });
            }
            Command::PeerSend { to, packet } => {
                crate::faults::on_send(self, sid, to, &packet);
                self.peer_send(sid, to, QItem::Packet(crate::wire::encode_packet(&packet)));
            }
            Command::SendSnapshot { to, snapshot } => {
                let bytes = Arc::new(warden_storage::encode_snap_sync(&snapshot.tree, &snapshot.sessions));
                let hist = Arc::new(self.check.history_upto(sid, snapshot.zxid));
                self.summary.snap_syncs += 1;
                self.peer_send(sid, to, QItem::Blob { bytes, hist });
            }
            Command::ProbeLog { to, after } => {
                // Storage reads off the owner's turn: the answer comes a little later.
                let data = disk(self.server(sid).fs.clone());
                let probe = match data.probe_log(after) {
                    Ok(f) => {
                        LogProbe { after, found: f.found, log_bytes: f.log_bytes, snapshot_bytes: f.snapshot_bytes }
                    }
                    Err(e) => {
                        self.trace(|| format!("server {sid}: probing the log after {after:#x} failed: {e}"));
                        LogProbe { after, found: false, log_bytes: 0, snapshot_bytes: 0 }
                    }
                };
                self.trace(|| format!("server {sid}: log probe for {to}: {probe:?}"));
                let delay = self.rng.gen_range(1..=20);
                let now = self.now;
                self.at(now + delay, Ev::LogProbed { sid, inc, to, probe });
            }
            Command::SendLogDiff { to, after, upto } => self.send_log_diff(sid, inc, to, after, upto)?,
            Command::PeerClose { sid: other, reason } => {
                self.trace(|| format!("server {sid} closes its quorum connection to {other}: {reason}"));
                let Some(r) = self.running(sid, inc) else { return Ok(()) };
                // Its Disconnected follows (and removes it), as the server's `disconnect` does.
                let conn = match r.learner_conn {
                    Some((l, c)) if l == other => Some(c),
                    _ => r.leader_conns.get(&other).copied(),
                };
                if let Some(conn) = conn {
                    self.close_quorum(conn, sid, true);
                }
            }
            Command::Lead => self.step_driver(sid, DriverEvent::Leading(Ok(())))?,
            Command::Elect { reason, flush } => {
                self.trace(|| format!("server {sid} elects: {reason}"));
                if flush {
                    self.close_leader_conns_flushed(sid);
                }
                self.elect(sid)?;
            }
            Command::HandOver { leader, zxid } => {
                self.trace(|| format!("server {sid} hands over to designated leader {leader}"));
                self.hand_over(sid, leader, zxid)?;
            }
            Command::Serving { epoch } => {
                // As the server's owner does (`QuorumPeer.updateElectionVote`).
                if let Some(r) = self.running(sid, inc) {
                    r.fle.update_peer_epoch(epoch);
                }
            }
            Command::Reconfigured { membership } => {
                if !self.opts.reconfig {
                    return Err(format!("server {sid}: a configuration without reconfig: {}", membership.to_text()));
                }
                self.trace(|| {
                    let (v, o): (Vec<u64>, Vec<u64>) =
                        (membership.voters().collect(), membership.observers().collect());
                    format!(
                        "server {sid} activates configuration {:#x}: voters {v:?} observers {o:?}",
                        membership.version
                    )
                });
                self.check.config_activated(sid, inc, &membership)?;
                self.summary.reconfigs_activated += 1;
                let now = self.now;
                let mut actions = Vec::new();
                if let Some(r) = self.running(sid, inc) {
                    r.fle.reconfigure(
                        QuorumConfig::from_membership(&membership),
                        membership.to_text().into_bytes(),
                        now,
                        &mut actions,
                    );
                }
                self.server_mut(sid).dynamic_config = Some(membership);
                self.election_actions(sid, actions)?;
            }
        }
        Ok(())
    }

    /// The leader's DIFF from disk: the log's txns `(after, upto]` read from this server's disk in
    /// chunks and queued to `to` as PROPOSAL + COMMIT pairs, in order, where the command stands
    /// among the packets (as the server's connection writer does). On failure the connection is
    /// closed and the leader told.
    fn send_log_diff(&mut self, sid: Sid, inc: u64, to: Sid, after: i64, upto: i64) -> Result<(), String> {
        let data = disk(self.server(sid).fs.clone());
        let mut packets = Vec::new();
        let read = data.read_log_range(after, upto).and_then(|mut range| loop {
            let chunk = range.next_chunk(64 << 10)?;
            if chunk.is_empty() {
                return Ok(());
            }
            for (hdr, txn) in chunk {
                let zxid = hdr.zxid;
                let entry = TxnEntry { hdr, txn: txn.into(), digest: None };
                packets.push(crate::wire::encode_packet(&warden_quorum::zab::codec::proposal(&entry)));
                packets.push(crate::wire::encode_packet(&QuorumPacket::new(pt::COMMIT, zxid)));
            }
        });
        match read {
            Ok(()) => {
                self.summary.log_diff_syncs += 1;
                for bytes in packets {
                    self.peer_send(sid, to, QItem::Packet(bytes));
                }
                Ok(())
            }
            Err(e) => {
                self.trace(|| format!("server {sid}: DIFF from disk to {to} failed: {e}"));
                let Some(r) = self.running(sid, inc) else { return Ok(()) };
                if let Some(conn) = r.leader_conns.get(&to).copied() {
                    self.close_quorum(conn, sid, false);
                }
                self.step_node(sid, Input::LogDiffFailed { sid: to })
            }
        }
    }

    /// A storage op: queued for the storage "thread" (kicked after the step), except a reload,
    /// which the server's owner waits for.
    fn store(&mut self, sid: Sid, inc: u64, op: StoreOp) -> Result<(), String> {
        match &op {
            StoreOp::Append(batch) => self.check.persisted_batch(sid, batch)?,
            StoreOp::Truncate(zxid) => self.check.truncated(sid, *zxid),
            StoreOp::TruncateAndReload(zxid) => {
                self.check.truncated(sid, *zxid);
                return self.reload_below(sid, inc, *zxid);
            }
            _ => {}
        }
        if let Some(r) = self.running(sid, inc) {
            r.queue.push_back(op);
        }
        Ok(())
    }

    fn storage_idle(&mut self, sid: Sid, inc: u64) -> bool {
        self.running(sid, inc).is_some_and(|r| !r.busy && r.queue.is_empty())
    }

    /// Standalone: the owner appends and syncs a lone writer's batch itself while the storage
    /// thread is idle, then steps `Synced` at once. A crash may come between the write and the
    /// fsync, as on the storage thread.
    fn append_inline(&mut self, sid: Sid, inc: u64, batch: warden_driver::Batch) -> Result<(), String> {
        self.check.persisted_batch(sid, &batch)?;
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        let mut report = Report::default();
        if let Err(e) = r.store.execute(StoreOp::Append(batch), &mut report) {
            return self.log_failed(sid, "write", e);
        }
        if self.crash_before_fsync(sid) {
            return Ok(());
        }
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        if let Err(e) = r.store.sync() {
            return self.log_failed(sid, "fsync", e);
        }
        self.trace(|| format!("server {sid}: inline append up to {:?}", report.last));
        self.step_driver(sid, DriverEvent::Synced(report))
    }

    /// Storage kick, the next chunk of a standalone apply, and the election timer.
    fn after_node_step(&mut self, sid: Sid) -> Result<(), String> {
        let inc = self.server(sid).inc;
        let now = self.now;
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        if r.driver.unapplied() && !r.chunk_scheduled {
            // The owner yields between chunks: whatever is already queued runs first.
            r.chunk_scheduled = true;
            self.at(now, Ev::ApplyChunk { sid, inc });
        }
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        let kick = !r.busy && !r.queue.is_empty();
        if kick {
            r.busy = true;
        }
        let timer = match (r.fle.next_deadline_ms(), r.fle_timer_at) {
            (Some(d), None) => Some(d),
            (Some(d), Some(t)) if d < t => Some(d),
            _ => None,
        };
        if let Some(d) = timer {
            r.fle_timer_at = Some(d);
        }
        if kick {
            let delay = self.rng.gen_range(0..=1);
            self.at(now + delay, Ev::StoreWrite { sid, inc });
        }
        if let Some(d) = timer {
            self.at(d, Ev::FleTimer { sid, inc });
        }
        Ok(())
    }

    /// The snapshot thread: write (temp, fsync, rename, fsync dir), then purge keeping 3.
    fn snapshot_write(&mut self, sid: Sid, inc: u64, tree: DataTree, sessions: Vec<(i64, i32)>, zxid: i64) {
        let data = disk(self.server(sid).fs.clone());
        let Some(r) = self.running(sid, inc) else { return };
        r.snapshot_busy = false;
        match data.write_snapshot(&tree, &sessions, zxid, SnapshotOptions::default()) {
            Ok(_) => {
                if let Err(e) = data.purge(3) {
                    self.trace(|| format!("server {sid}: purge failed: {e}"));
                }
            }
            Err(e) => self.trace(|| format!("server {sid}: snapshot failed: {e}")),
        }
    }

    /// Leaves the role's connections and starts an election round with the driver's vote.
    pub(crate) fn elect(&mut self, sid: Sid) -> Result<(), String> {
        self.close_all_quorum(sid);
        let now = self.now;
        let inc = self.server(sid).inc;
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        let (last_zxid, current_epoch) = r.driver.vote();
        let mut actions = Vec::new();
        r.fle.start(now, last_zxid, current_epoch, &mut actions);
        self.election_actions(sid, actions)
    }

    /// As the server's `Ensemble::hand_over`: the role's connections close and the election
    /// takes the designated leader as its decision.
    fn hand_over(&mut self, sid: Sid, leader: Sid, zxid: i64) -> Result<(), String> {
        let inc = self.server(sid).inc;
        self.close_leader_conns_flushed(sid);
        self.close_all_quorum(sid);
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        let mut actions = Vec::new();
        r.fle.hand_over(leader, zxid, &mut actions);
        self.summary.hand_overs += 1;
        self.election_actions(sid, actions)
    }

    fn election_actions(&mut self, sid: Sid, actions: Vec<ElectionAction>) -> Result<(), String> {
        let inc = self.server(sid).inc;
        if let Some(r) = self.running(sid, inc) {
            r.fle.check_invariants().map_err(|e| format!("server {sid}: election invariant: {e}"))?;
        }
        for a in actions {
            match a {
                ElectionAction::Send { to, notification } => self.send_vote(sid, to, notification),
                ElectionAction::Elected(e) => {
                    self.summary.elections += 1;
                    self.trace(|| format!("server {sid} decided {e:?}"));
                    self.step_driver(sid, DriverEvent::Decided(e))?;
                }
            }
        }
        self.after_node_step(sid)
    }

    /// Election notifications tolerate anything: lost, delayed, duplicated, reordered.
    fn send_vote(&mut self, from: Sid, to: Sid, n: Notification) {
        if self.faults.cut(from, to) || self.rng.gen_bool(self.faults.vote_loss) {
            return;
        }
        let copies = if self.rng.gen_bool(self.faults.vote_dup) { 2 } else { 1 };
        let bytes = crate::wire::encode_vote(&n);
        for _ in 0..copies {
            let t = self.now + self.delay();
            self.at(t, Ev::Vote { from, to, n: bytes.clone() });
        }
    }

    pub(crate) fn delay(&mut self) -> u64 {
        let base = self.rng.gen_range(1..=5);
        if self.faults.spike > 0.0 && self.rng.gen_bool(self.faults.spike) {
            base + self.rng.gen_range(20..=400)
        } else {
            base
        }
    }

    /// The owner's reload: everything queued is written first (the storage thread is FIFO), then
    /// the log is cut and the data rebuilt from disk, which the driver takes at once.
    fn reload_below(&mut self, sid: Sid, inc: u64, zxid: i64) -> Result<(), String> {
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        let mut report = Report::default();
        let mut result = Ok(None);
        let queued: Vec<StoreOp> = r.queue.drain(..).collect();
        for op in queued.into_iter().chain([StoreOp::TruncateAndReload(zxid)]) {
            result = r.store.execute(op, &mut report);
            if result.is_err() {
                break;
            }
        }
        match result {
            Ok(Some(data)) => {
                let at = data.0.last_processed_zxid();
                self.trace(|| format!("server {sid}: TRUNC to {zxid:#x} below the tree; reloaded at {at:#x}"));
                self.check.reloaded(sid, at);
                self.step_driver(sid, DriverEvent::Reloaded(data))
            }
            Ok(None) => Err(format!("server {sid}: TruncateAndReload returned no data")),
            Err(e) => {
                self.crash(sid, &format!("truncating and reloading: {e}"));
                Ok(())
            }
        }
    }

    // ----- storage -----

    /// A failed log write or fsync stops the server: a hole in the log must never be skipped.
    fn log_failed(&mut self, sid: Sid, what: &str, e: warden_storage::StorageError) -> Result<(), String> {
        let why = e.to_string();
        self.check.storage_failed(&why)?;
        self.crash(sid, &format!("transaction log {what} failed: {why}"));
        Ok(())
    }

    /// The injected fault "crash after the next write, before its fsync": true when it fired
    /// (the server is down, its restart scheduled).
    fn crash_before_fsync(&mut self, sid: Sid) -> bool {
        if !self.faults.crash_after_write.remove(&sid) || crate::faults::calm(self) {
            return false;
        }
        self.crash(sid, "fault: crash after a write, before its fsync");
        let t = self.now + self.rng.gen_range(200..2_000);
        self.at(t, Ev::Restart { sid });
        true
    }

    /// The storage thread's write half: everything queued is written (not yet synced), up to the
    /// first epoch file (reported with the batch that wrote it).
    fn store_write(&mut self, sid: Sid, inc: u64) -> Result<(), String> {
        let fsync_ms = self.rng.gen_range(1..=8);
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        let mut report = Report::default();
        while let Some(op) = r.queue.pop_front() {
            if let Err(e) = r.store.execute(op, &mut report) {
                return self.log_failed(sid, "write", e);
            }
            if !report.epochs.is_empty() {
                break;
            }
        }
        let wrote_current = report.epochs.iter().any(|(k, _)| *k == EpochFile::Current);
        r.inflight = Some(report);
        if wrote_current {
            crate::faults::on_current_epoch_written(self, sid);
        }
        if self.crash_before_fsync(sid) {
            return Ok(());
        }
        let now = self.now;
        self.at(now + fsync_ms, Ev::StoreSynced { sid, inc });
        Ok(())
    }

    /// The fsync completed: report what it made durable, then start the next batch.
    fn store_synced(&mut self, sid: Sid, inc: u64) -> Result<(), String> {
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        if let Err(e) = r.store.sync() {
            return self.log_failed(sid, "fsync", e);
        }
        let report = r.inflight.take().unwrap_or_default();
        r.busy = false;
        if !report.is_empty() {
            self.step_driver(sid, DriverEvent::Synced(report))?;
        }
        self.after_node_step(sid)
    }

    // ----- quorum connections -----

    fn peer_send(&mut self, sid: Sid, to: Sid, item: QItem) {
        let inc = self.server(sid).inc;
        let now = self.now;
        let Some(r) = self.running(sid, inc) else { return };
        let learner = matches!(r.driver.node().role(), RoleKind::Follower | RoleKind::Observer);
        if learner {
            match r.learner_conn {
                Some((l, conn)) if l == to => self.enqueue_quorum(conn, true, item),
                Some(_) => {}
                None => {
                    // Dial the leader; the first packet goes with the connection.
                    let conn = self.next_conn;
                    self.next_conn += 1;
                    if let Some(r) = self.running(sid, inc) {
                        r.learner_conn = Some((to, conn));
                    }
                    let qc = QConn {
                        leader: to,
                        learner: sid,
                        open: true,
                        accepted: false,
                        last: [now, now],
                        held: [VecDeque::new(), VecDeque::new()],
                        refused: 0,
                        draining: false,
                    };
                    self.qconns.insert(conn, qc);
                    if self.faults.cut(sid, to) || self.faults.cut(to, sid) {
                        self.at(now + DIAL_TIMEOUT_MS, Ev::Dial { conn });
                    } else {
                        let t = now + self.delay();
                        self.at(t, Ev::Dial { conn });
                    }
                    self.enqueue_quorum(conn, true, item);
                }
            }
        } else if let Some(&conn) = r.leader_conns.get(&to) {
            self.enqueue_quorum(conn, false, item);
        }
    }

    fn enqueue_quorum(&mut self, conn: u64, to_leader: bool, item: QItem) {
        let d = to_leader as usize;
        let delay = self.delay();
        let now = self.now;
        let Some(c) = self.qconns.get(&conn) else { return };
        if !c.open {
            return;
        }
        let (from, to) = if to_leader { (c.learner, c.leader) } else { (c.leader, c.learner) };
        let held = !c.held[d].is_empty() || self.faults.cut(from, to) || !c.accepted;
        let c = self.qconns.get_mut(&conn).expect("checked above");
        if held {
            c.held[d].push_back(item);
            return;
        }
        let t = (now + delay).max(c.last[d]);
        c.last[d] = t;
        self.at(t, Ev::Quorum { conn, to_leader, item });
    }

    /// Re-sends what a cut held back, once the direction is open again.
    pub(crate) fn release_held(&mut self) {
        let ids: Vec<u64> = self.qconns.keys().copied().collect();
        for id in ids {
            for to_leader in [true, false] {
                let d = to_leader as usize;
                let Some(c) = self.qconns.get(&id) else { continue };
                let (from, to) = if to_leader { (c.learner, c.leader) } else { (c.leader, c.learner) };
                if !c.open || !c.accepted || c.held[d].is_empty() || self.faults.cut(from, to) {
                    continue;
                }
                let items: Vec<QItem> =
                    self.qconns.get_mut(&id).map(|c| c.held[d].drain(..).collect()).unwrap_or_default();
                for item in items {
                    self.enqueue_quorum(id, to_leader, item);
                }
            }
        }
    }

    fn on_dial(&mut self, conn: u64) -> Result<(), String> {
        let Some(c) = self.qconns.get(&conn) else { return Ok(()) };
        if !c.open {
            return Ok(());
        }
        let (leader, learner, refused) = (c.leader, c.learner, c.refused);
        let listening = self.server(leader).run.as_ref().is_some_and(|r| r.driver.node().role() == RoleKind::Leader);
        let cut = self.faults.cut(learner, leader) || self.faults.cut(leader, learner);
        if !listening && !cut && refused < MAX_DIAL_TRIES {
            // Refused (the leader has not opened its port yet): the dial loop tries again after a
            // growing delay, as the server's does.
            self.trace(|| format!("server {learner}: leader {leader} refused the dial; retrying"));
            if let Some(c) = self.qconns.get_mut(&conn) {
                c.refused += 1;
            }
            let t = self.now + (DIAL_RETRY_MS << refused.min(6));
            self.at(t, Ev::Dial { conn });
            return Ok(());
        }
        if !listening || cut {
            // The learner always hears of a failed dial (refused, or its connect times out), as
            // the server's dial loop reports `PeerDisconnected`.
            self.trace(|| format!("server {learner} cannot connect to leader {leader}"));
            if let Some(c) = self.qconns.get_mut(&conn) {
                c.open = false;
            }
            self.at(self.now, Ev::QuorumClosed { conn, sid: learner });
            return Ok(());
        }
        let linc = self.server(leader).inc;
        let old = self.running(leader, linc).and_then(|r| r.leader_conns.insert(learner, conn));
        if let Some(old) = old {
            // A new connection replaces the learner's old one; its Disconnected comes first.
            if let Some(c) = self.qconns.get_mut(&old) {
                c.open = false;
            }
            self.step_node(leader, Input::PeerDisconnected { sid: learner })?;
        }
        if let Some(c) = self.qconns.get_mut(&conn) {
            c.accepted = true;
            c.last = [self.now, self.now];
        }
        // Everything the learner sent so far (starting with its FOLLOWERINFO) now flows.
        let items: Vec<QItem> = self.qconns.get_mut(&conn).map(|c| c.held[1].drain(..).collect()).unwrap_or_default();
        for item in items {
            self.enqueue_quorum(conn, true, item);
        }
        Ok(())
    }

    fn on_quorum(&mut self, conn: u64, to_leader: bool, item: QItem) -> Result<(), String> {
        let Some(c) = self.qconns.get(&conn) else { return Ok(()) };
        // A connection a leader closed after flushing still delivers what the leader sent.
        let delivers = c.open || (c.draining && !to_leader);
        if !delivers {
            return Ok(());
        }
        let (from, to) = if to_leader { (c.learner, c.leader) } else { (c.leader, c.learner) };
        let inc = self.server(to).inc;
        let Some(r) = self.running(to, inc) else { return Ok(()) };
        let current =
            if to_leader { r.leader_conns.get(&from) == Some(&conn) } else { r.learner_conn == Some((from, conn)) };
        if !current {
            return Ok(());
        }
        match item {
            QItem::Packet(bytes) => {
                let packet =
                    crate::wire::decode_packet(&bytes).map_err(|e| format!("packet from {from} to {to}: {e}"))?;
                if !to_leader && packet.packet_type == pt::SNAP {
                    r.snap_zxid = Some(packet.zxid);
                    return Ok(());
                }
                self.step_node(to, Input::Peer { from, packet })
            }
            QItem::Blob { bytes, hist } => {
                let Some(zxid) = r.snap_zxid.take() else {
                    return Err(format!("server {to} got a snapshot blob without a SNAP packet"));
                };
                let snapshot =
                    decode_snap_sync(&bytes, zxid).map_err(|e| format!("snapshot from {from} does not decode: {e}"))?;
                self.check.snapshot_installed(to, zxid, &hist);
                self.step_node(to, Input::PeerSnapshot { from, snapshot })
            }
        }
    }

    /// Closes a quorum connection. Each end still holding it hears `PeerDisconnected` (the
    /// closer only when `notify_closer`, as the server's `disconnect` reports; a server that
    /// stops its net, or crashed, hears nothing). A cut direction carries no FIN: that end
    /// finds out by its own timeouts.
    pub(crate) fn close_quorum(&mut self, conn: u64, closer: Sid, notify_closer: bool) {
        let Some(c) = self.qconns.get_mut(&conn) else { return };
        if !c.open {
            return;
        }
        c.open = false;
        let (leader, learner) = (c.leader, c.learner);
        for (end, other) in [(leader, learner), (learner, leader)] {
            if end == closer && !notify_closer {
                self.forget_conn(end, conn);
                continue;
            }
            if end != closer && self.faults.cut(closer, end) {
                continue;
            }
            let t = self.now + if end == closer { 0 } else { self.delay() };
            let _ = other;
            self.at(t, Ev::QuorumClosed { conn, sid: end });
        }
    }

    /// Closes every connection `sid` leads, flushed (`close_quorum_flushed`).
    fn close_leader_conns_flushed(&mut self, sid: Sid) {
        let inc = self.server(sid).inc;
        let flushed: Vec<u64> =
            self.running(sid, inc).map(|r| r.leader_conns.values().copied().collect()).unwrap_or_default();
        for conn in flushed {
            self.close_quorum_flushed(conn, sid);
        }
    }

    /// As the server's `LeaderNet::stop_flushed`: the leader's end is gone at once, but what it
    /// sent before still reaches the learner, which then hears the close (TCP delivers what
    /// was written before the FIN).
    fn close_quorum_flushed(&mut self, conn: u64, leader: Sid) {
        let now = self.now;
        let Some(c) = self.qconns.get_mut(&conn) else { return };
        if !c.open {
            return;
        }
        c.open = false;
        c.draining = true;
        let (learner, t) = (c.learner, c.last[0].max(now) + 1);
        self.forget_conn(leader, conn);
        if !self.faults.cut(leader, learner) {
            self.at(t, Ev::QuorumClosed { conn, sid: learner });
        }
    }

    fn forget_conn(&mut self, sid: Sid, conn: u64) {
        let inc = self.server(sid).inc;
        if let Some(r) = self.running(sid, inc) {
            if r.learner_conn.is_some_and(|(_, c)| c == conn) {
                r.learner_conn = None;
            }
            r.leader_conns.retain(|_, c| *c != conn);
        }
    }

    fn on_quorum_closed(&mut self, conn: u64, sid: Sid) -> Result<(), String> {
        let Some(c) = self.qconns.get(&conn) else { return Ok(()) };
        let other = if c.leader == sid { c.learner } else { c.leader };
        let inc = self.server(sid).inc;
        let Some(r) = self.running(sid, inc) else { return Ok(()) };
        let holds = r.learner_conn == Some((other, conn)) || r.leader_conns.get(&other) == Some(&conn);
        if !holds {
            return Ok(());
        }
        self.forget_conn(sid, conn);
        self.step_node(sid, Input::PeerDisconnected { sid: other })
    }

    /// `stop_net`: the role's connections close; this server hears nothing more of them.
    fn close_all_quorum(&mut self, sid: Sid) {
        let inc = self.server(sid).inc;
        let Some(r) = self.running(sid, inc) else { return };
        let mut conns: Vec<u64> = r.leader_conns.values().copied().collect();
        conns.extend(r.learner_conn.map(|(_, c)| c));
        r.leader_conns.clear();
        r.learner_conn = None;
        r.snap_zxid = None;
        for conn in conns {
            self.close_quorum(conn, sid, false);
        }
    }

    /// Loss on a TCP connection: it breaks (both ends hear it, queued packets are gone).
    pub(crate) fn break_quorum(&mut self, conn: u64) {
        let Some(c) = self.qconns.get(&conn) else { return };
        if !c.open {
            return;
        }
        let (leader, learner) = (c.leader, c.learner);
        self.trace(|| format!("quorum connection {learner} -> {leader} breaks"));
        if let Some(c) = self.qconns.get_mut(&conn) {
            c.open = false;
        }
        for end in [leader, learner] {
            let t = self.now + self.delay();
            self.at(t, Ev::QuorumClosed { conn, sid: end });
        }
        // QuorumClosed checks `open`-independent ownership, so both ends still hear it.
    }

    // ----- clients -----

    pub(crate) fn new_client_conn(&mut self, client: usize, sid: Sid) -> Option<ConnId> {
        let s = self.server(sid);
        s.run.as_ref()?;
        let inc = s.inc;
        let conn = self.next_conn;
        self.next_conn += 1;
        self.cconns.insert(conn, CConn { client, sid, inc, last: [self.now, self.now] });
        if let Some(r) = self.running(sid, inc) {
            r.clients.insert(conn);
        }
        Some(conn)
    }

    pub(crate) fn send_to_server(&mut self, conn: ConnId, msg: ToServer) {
        let msg = match msg {
            ToServer::Connect(req) => Wire::Connect(crate::wire::encode_connect(&req)),
            ToServer::Request { xid, req } => Wire::Request(crate::wire::encode_request(xid, &req)),
            ToServer::Gone => Wire::Gone,
        };
        let delay = self.delay().min(10);
        let Some(c) = self.cconns.get_mut(&conn) else { return };
        let t = (self.now + delay).max(c.last[0]);
        c.last[0] = t;
        self.at(t, Ev::ToServer { conn, msg });
    }

    fn send_to_client(&mut self, conn: ConnId, msg: ClientMsg) {
        let delay = self.delay().min(10);
        let closing = matches!(msg, ClientMsg::Closed);
        let Some(c) = self.cconns.get_mut(&conn) else { return };
        let t = (self.now + delay).max(c.last[1]);
        c.last[1] = t;
        let (sid, inc) = (c.sid, c.inc);
        if closing {
            // The server is done with it; later client frames find no connection.
            c.inc = u64::MAX;
        }
        self.at(t, Ev::ToClient { conn, msg });
        if closing {
            if let Some(r) = self.running(sid, inc) {
                r.clients.remove(&conn);
            }
        }
    }

    fn close_client_conn_from_server(&mut self, conn: ConnId) {
        self.send_to_client(conn, ClientMsg::Closed);
    }

    fn deliver_to_server(&mut self, conn: ConnId, msg: Wire) -> Result<(), String> {
        let Some(c) = self.cconns.get(&conn) else { return Ok(()) };
        let (sid, inc) = (c.sid, c.inc);
        if self.running(sid, inc).is_none() {
            return Ok(());
        }
        let input = match msg {
            Wire::Connect(frame) => {
                let req = crate::wire::decode_connect(&frame)?;
                Input::Connect { conn, addr: "127.0.0.1:40000".parse().expect("literal address"), req, x509: None }
            }
            Wire::Request(frame) => crate::wire::decode_request(conn, &frame)?,
            Wire::Gone => {
                if let Some(r) = self.running(sid, inc) {
                    r.clients.remove(&conn);
                }
                self.cconns.remove(&conn);
                Input::Disconnected { conn }
            }
        };
        self.step_node(sid, input)
    }

    fn deliver_to_client(&mut self, conn: ConnId, msg: ClientMsg) -> Result<(), String> {
        let Some(c) = self.cconns.get(&conn) else { return Ok(()) };
        let client = c.client;
        if matches!(msg, ClientMsg::Closed) {
            self.cconns.remove(&conn);
        }
        if client >= crate::fuzz::SCRIPTED {
            return crate::fuzz::on_message(self, client - crate::fuzz::SCRIPTED, conn, msg);
        }
        crate::client::on_message(self, client, conn, msg)
    }

    fn client_wake(&mut self, client: usize) -> Result<(), String> {
        if client >= crate::fuzz::SCRIPTED {
            return crate::fuzz::wake(self, client - crate::fuzz::SCRIPTED);
        }
        crate::client::wake(self, client)
    }

    // ----- checks and phases -----

    fn after_step(&mut self) -> Result<(), String> {
        let sids = self.all_sids();
        for sid in sids {
            let s = &self.servers[(sid - 1) as usize];
            let Some(r) = s.run.as_ref() else { continue };
            let role = r.driver.node().role();
            let serving = r.driver.node().serving();
            let applied = r.driver.node().last_processed_zxid();
            let epoch = r.driver.node().epochs().map_or(0, |(_, c)| c);
            let tree = r.driver.node().tree();
            self.check.after_step(sid, role, serving, applied, epoch, tree, r.driver.node())?;
            if serving && s.amnesiac {
                self.server_mut(sid).amnesiac = false;
                self.trace(|| format!("server {sid} resynced after losing its disk"));
            }
        }
        self.check_phase()
    }

    fn check_phase(&mut self) -> Result<(), String> {
        match self.phase {
            Phase::Faults if self.now >= self.opts.fault_ms => {
                self.phase = Phase::Liveness { since: self.now };
                self.trace(|| "liveness phase: healing every fault".into());
                crate::faults::heal_all(self)?;
                for c in &mut self.clients {
                    c.live_ok = (false, false);
                }
                Ok(())
            }
            Phase::Liveness { since } => {
                let leader = self.servers.iter().any(|s| {
                    s.run.as_ref().is_some_and(|r| {
                        matches!(r.driver.node().role(), RoleKind::Leader | RoleKind::Standalone)
                            && r.driver.node().serving()
                    })
                });
                let all_serving =
                    self.servers.iter().all(|s| s.run.as_ref().is_some_and(|r| r.driver.node().serving()));
                let clients_ok = self.clients.iter().all(|c| c.live_ok == (true, true));
                if leader && all_serving && clients_ok {
                    self.summary.recovery_ms = self.now - since;
                    self.phase = Phase::Done;
                    return Ok(());
                }
                if self.now - since > LIVENESS_BOUND_MS {
                    let state: Vec<String> = self
                        .servers
                        .iter()
                        .map(|s| match &s.run {
                            Some(r) => {
                                format!("{}: {:?} serving={}", s.sid, r.driver.node().role(), r.driver.node().serving())
                            }
                            None => format!("{}: down", s.sid),
                        })
                        .collect();
                    let clients: Vec<String> =
                        self.clients.iter().map(|c| format!("{}:{:?}", c.idx, c.live_ok)).collect();
                    return Err(format!(
                        "liveness: not recovered {LIVENESS_BOUND_MS} ms after healing (servers [{}], clients write/read ok [{}])",
                        state.join(", "),
                        clients.join(" ")
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn final_checks(&mut self) -> Result<(), String> {
        if self.phase != Phase::Done {
            return Err("the run ended before the liveness phase completed".into());
        }
        let leader = self
            .servers
            .iter()
            .find(|s| {
                s.run
                    .as_ref()
                    .is_some_and(|r| matches!(r.driver.node().role(), RoleKind::Leader | RoleKind::Standalone))
            })
            .map(|s| s.sid)
            .ok_or("no leader at the end")?;
        self.check.final_leader(leader)?;
        if self.opts.reconfig {
            // Every server that applied as far as the leader's configuration holds it (one still
            // catching up may hold an older one), and no acknowledged reconfig is lost.
            let held = |s: &Server| {
                let node = s.run.as_ref().map(|r| r.driver.node())?;
                Some((node.membership()?.version, node.last_processed_zxid()))
            };
            let (leader_version, _) =
                held(&self.servers[(leader - 1) as usize]).ok_or("the leader has no configuration")?;
            for s in &self.servers {
                let Some((version, applied)) = held(s) else { continue };
                if (applied >= leader_version) != (version == leader_version) || version > leader_version {
                    return Err(format!(
                        "server {} ends with configuration {version:#x} having applied {applied:#x}; the leader's is {leader_version:#x}",
                        s.sid
                    ));
                }
            }
            self.check.final_config(leader_version)?;
        }
        let r = self.servers[(leader - 1) as usize].run.as_ref().expect("leader runs");
        let (zxid, digest) = (r.driver.node().last_processed_zxid(), r.driver.node().tree().fingerprint());
        self.summary.final_zxid = zxid;
        self.summary.final_digest = digest;
        self.summary.acked_writes = self.check.acked_count();
        Ok(())
    }
}

/// The line of simulated server `sid` (addresses are never dialed: the network is simulated).
pub(crate) fn sim_server(sid: Sid, role: warden_proto::ServerRole) -> warden_proto::ServerSpec {
    warden_proto::ServerSpec {
        id: sid as u64,
        host: format!("10.0.0.{sid}"),
        quorum_port: 2888,
        election_port: 3888,
        role,
        client: Some(("0.0.0.0".into(), 2181)),
    }
}

/// The learner's side of a SNAP sync, as the server's quorum port reads it: the sessions-and-tree
/// stream, then the "BenWasHere" signature.
fn decode_snap_sync(bytes: &[u8], zxid: i64) -> Result<SnapshotData, String> {
    let mut dec = warden_storage::SnapshotBodyDecoder::new(warden_proto::DEFAULT_MAX_BUFFER);
    let used = dec.feed(bytes)?;
    if !dec.is_done() {
        return Err("the snapshot stream is incomplete".into());
    }
    let mut r = warden_proto::Reader::new(&bytes[used..]);
    let sig = r.read_ustring().map_err(|e| e.to_string())?;
    if sig != warden_storage::SNAP_SYNC_SIGNATURE {
        return Err(format!("signature {sig:?}"));
    }
    let body = dec.finish()?;
    let tree = DataTree::from_snapshot(body.nodes, zxid)?;
    Ok(SnapshotData { zxid, tree: Box::new(tree), sessions: body.sessions })
}
