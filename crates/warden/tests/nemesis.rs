//! A Jepsen-style nemesis test (issue 27): three real `warden serve` processes in a private network
//! namespace (`common/netns.rs`: servers on 127.0.0.1/.2/.3, tickTime 200 ms, syncLimit 5), client
//! sessions doing register operations while a nemesis injects faults, and every key's history
//! checked for linearizability (`warden::lincheck`).
//!
//! Clients: sessions of the `zookeeper-client` crate, six of different [`KINDS`] on each server,
//! each connected to that server only and opening a new session when its session ends, doing random
//! operations on the keys of the current key group: `sync` then `getData` (a read; some clients
//! send the getData right behind the sync), blind `setData`, and `setData` with the last version
//! seen of the key (a compare-and-set); three clients per server only read, two of them now and
//! then. Each client gives up waiting for a reply after its patience (0.25 s to 5 s) and issues its
//! next operation while the earlier one stays pending on the same session (up to 1, 8 or 16); a
//! pending operation is recorded with the real time its reply came, or as unknown if its
//! connection was lost or no reply came within [`OP_LIMIT`]. So a client whose server is paused or
//! cut off keeps queueing requests there, and a server that answers them stale after a new leader
//! took writes is caught. Every
//! operation is recorded with its call and return times, the server it went through and the zxid
//! it saw (the node's mzxid for a read, the write's own zxid for a write). Keys come in groups of
//! [`KEYS_PER_GROUP`]; the clients move to the next group (created beforehand with data `init`)
//! after about [`OPS_PER_KEY`] operations per key, which keeps per-key histories short, and each
//! group is checked once it is complete (left, nothing in flight) and its operations dropped, so
//! that a long soak's memory stays bounded. Each client leaves at least [`GAP`] between two
//! operations.
//!
//! The nemesis cycles through its faults in a random order per round: kill -9 of a follower, of the
//! leader, of all three (restarted on the same data directories); SIGSTOP/SIGCONT of the leader and
//! of a follower for 2-4 s (longer than syncLimit × tickTime = 1 s); the leader or a follower cut off
//! from both other servers both ways, deaf (it cannot hear them) or mute (they cannot hear it), for
//! 2-5 s. After each fault it heals, waits for a leader and lets the clients run for a second.
//!
//! At the end: `nemesis: <ops> operations, <faults> faults, <keys> keys, <bad> non-linearizable`,
//! and for each key whose history is not linearizable its smallest failing part, one operation a
//! line with its server and zxid, and the faults around it; the test fails if any key is not
//! linearizable (or the checker could not decide one), or if the ensemble did not get back to a
//! leader and two followers within 30 s of a fault (the servers' logs are then kept).
//!
//! Knobs (environment): `WARDEN_NEMESIS_SECS` (seconds of faults, default 60), `WARDEN_NEMESIS_SEED`
//! (the nemesis' and clients' choices; default random, always printed; thread timing is not
//! replayable), `WARDEN_NEMESIS_FAULTS` (only these faults, e.g. `pause-leader,partition-leader`),
//! `WARDEN_NEMESIS_HISTORY` (a file to write the whole history to, one operation a line).
//! `scripts/nemesis-soak` runs a long one. Root and `unshare`, `ip`, `iptables` are needed, as for
//! the partition tests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use warden::lincheck::{Call, Checker, Failure, Op, Outcome, Register};
use zk::{Acls, CreateMode};
use zookeeper_client as zk;

mod common;
use common::netns::{client_addr, cut, find_leader, heal, in_netns, net_setup, wait_leader, Ensemble, ELECT};

/// A client's behaviour.
#[derive(Clone, Copy)]
struct Kind {
    session_s: u64,
    /// How long it waits for a reply before it issues its next operation (the earlier one stays
    /// pending on the session).
    patience_ms: u64,
    /// Operations it may have waiting for a reply at once.
    pending: usize,
    reads_only: bool,
    /// Reads send the getData right behind the sync, without waiting for its reply.
    pipelined: bool,
    /// It waits up to this long (uniformly at random) before each operation.
    think_ms: u64,
}

/// How the clients of each server behave (one client of each kind per server).
const KINDS: [Kind; 6] = [
    // Keeps queueing operations on a paused or cut-off server.
    Kind { session_s: 12, patience_ms: 400, pending: 8, reads_only: false, pipelined: true, think_ms: 0 },
    // Loses its connection soon (after 0.4 × 3 s without a reply) and its session sooner than most.
    Kind { session_s: 3, patience_ms: 1000, pending: 8, reads_only: false, pipelined: false, think_ms: 0 },
    // Waits for most replies.
    Kind { session_s: 12, patience_ms: 5000, pending: 8, reads_only: false, pipelined: false, think_ms: 0 },
    // Reads only, queueing many: no write of its own holds its reads back on a deposed leader.
    Kind { session_s: 12, patience_ms: 250, pending: 16, reads_only: true, pipelined: true, think_ms: 0 },
    // Reads now and then, one at a time: a read it calls late in a pause or a cut is the first
    // request its session has queued on that server, not behind requests from before the fault.
    Kind { session_s: 12, patience_ms: 5000, pending: 1, reads_only: true, pipelined: true, think_ms: 4000 },
    Kind { session_s: 12, patience_ms: 5000, pending: 1, reads_only: true, pipelined: true, think_ms: 4000 },
];
const KEYS_PER_GROUP: usize = 16;
const OPS_PER_KEY: usize = 200;
/// A reply later than this counts as never (the operation's outcome is unknown). A session's
/// connection timeout (0.4 × its session timeout) ends most waits sooner.
const OP_LIMIT: Duration = Duration::from_secs(15);
const SERVERS: [u8; 3] = [1, 2, 3];
/// The least time between two operations of one client: at most about 4,000 operations a second
/// in all, so that a long soak's history stays of a size to check (a release build would do five
/// times as many, mostly reads).
const GAP: Duration = Duration::from_millis(3);

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        _ => default,
    }
}

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn key(group: usize, k: usize) -> String {
    format!("/nemesis/g{group}k{k}")
}

/// One fault as it was injected: from, to (ns on the history's clock) and what.
struct Injected {
    start: u64,
    end: u64,
    what: String,
}

/// The key groups: the one in use, when to move on, and the operations of each group picked but
/// not yet recorded (a group the clients have left with none in flight is complete).
#[derive(Default)]
struct Groups {
    active: usize,
    issued: usize,
    next_at: usize,
    in_flight: HashMap<usize, usize>,
}

/// What the clients, the key creator and the nemesis share.
struct Shared {
    epoch: Instant,
    stop: AtomicBool,
    /// Recorded operations not yet checked, with their key group.
    history: Mutex<Vec<(usize, Op)>>,
    groups: Mutex<Groups>,
    /// Groups below this exist.
    created: AtomicUsize,
    /// The highest version seen of each key (compare-and-set expects it).
    latest: Mutex<HashMap<String, i32>>,
}

impl Shared {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn active(&self) -> usize {
        self.groups.lock().unwrap().active
    }

    /// A key of the current group (and the group) for an operation about to be called, after
    /// moving to the next group if this one has had its share of operations and the next one
    /// exists. The operation is in flight until [`Shared::record`].
    fn pick_key(&self, rng: &mut StdRng) -> (usize, String) {
        let mut g = self.groups.lock().unwrap();
        g.issued += 1;
        if g.issued >= g.next_at && self.created.load(Ordering::SeqCst) > g.active + 1 {
            g.active += 1;
            g.next_at = g.issued + KEYS_PER_GROUP * OPS_PER_KEY;
        }
        let group = g.active;
        *g.in_flight.entry(group).or_default() += 1;
        (group, key(group, rng.gen_range(0..KEYS_PER_GROUP)))
    }

    /// The complete groups from `from` on: left by the clients, with no operation in flight.
    fn complete_groups(&self, from: usize) -> std::ops::Range<usize> {
        let g = self.groups.lock().unwrap();
        let end = (from..g.active).find(|x| g.in_flight.get(x).is_some_and(|n| *n > 0)).unwrap_or(g.active.max(from));
        from..end
    }

    fn record(&self, group: usize, op: Op) {
        let seen = match op.outcome {
            Outcome::Read { version, .. } | Outcome::Written(version) => Some(version),
            _ => None,
        };
        if let Some(v) = seen {
            let mut latest = self.latest.lock().unwrap();
            let e = latest.entry(op.key.clone()).or_insert(v);
            *e = (*e).max(v);
        }
        self.history.lock().unwrap().push((group, op));
        // After the push: a group with nothing in flight has all its operations recorded.
        *self.groups.lock().unwrap().in_flight.get_mut(&group).expect("picked") -= 1;
    }
}

/// The checked part of the history: counts, and the keys that are not linearizable.
#[derive(Default)]
struct Tally {
    /// Groups below this are checked; recorded operations of later groups wait in `waiting`.
    checked_below: usize,
    waiting: std::collections::BTreeMap<usize, Vec<Op>>,
    ops: usize,
    keys: usize,
    reads_ok: usize,
    reads_unknown: usize,
    writes_ok: usize,
    failed: usize,
    writes_unknown: usize,
    bad: Vec<Failure>,
    undecided: Vec<(String, usize)>,
    checking: Duration,
    /// `WARDEN_NEMESIS_HISTORY`: every checked operation is written there.
    dump: Option<std::io::BufWriter<std::fs::File>>,
}

impl Tally {
    fn new() -> Tally {
        let dump = std::env::var("WARDEN_NEMESIS_HISTORY").ok().map(|path| {
            std::io::BufWriter::new(std::fs::File::create(&path).unwrap_or_else(|e| panic!("create {path}: {e}")))
        });
        Tally { dump, ..Tally::default() }
    }

    /// Checks the groups that are complete (all of them with `all`, once the clients have
    /// stopped) and drops their operations, so that memory stays bounded however long the run.
    fn check_complete(&mut self, shared: &Shared, all: bool) {
        let complete = if all { self.checked_below..usize::MAX } else { shared.complete_groups(self.checked_below) };
        for (group, op) in std::mem::take(&mut *shared.history.lock().unwrap()) {
            self.waiting.entry(group).or_default().push(op);
        }
        let started = Instant::now();
        let init = Register { value: Some("init".into()), version: 0 };
        while let Some(entry) = self.waiting.first_entry() {
            if !complete.contains(entry.key()) {
                break;
            }
            let mut ops = entry.remove();
            ops.sort_by_key(|o| o.call_at);
            if let Some(dump) = &mut self.dump {
                use std::io::Write;
                for o in &ops {
                    writeln!(dump, "{} {o}", o.key).expect("write the history");
                }
            }
            let report = Checker::default().check(&ops, &init);
            self.ops += report.ops;
            self.keys += report.keys;
            self.bad.extend(report.bad);
            self.undecided.extend(report.undecided);
            for o in &ops {
                let read = o.call == Call::Read;
                match (&o.outcome, read) {
                    (Outcome::Read { .. } | Outcome::Written(_), true) => self.reads_ok += 1,
                    (Outcome::Read { .. } | Outcome::Written(_), false) => self.writes_ok += 1,
                    (Outcome::Unknown(_), true) => self.reads_unknown += 1,
                    (Outcome::Unknown(_), false) => self.writes_unknown += 1,
                    (Outcome::Fail(_) | Outcome::BadVersion, _) => self.failed += 1,
                }
            }
        }
        self.checked_below = complete.end;
        self.checking += started.elapsed();
    }
}

/// Carries out one operation through `client` and records it. A read is a sync then a getData;
/// `pipelined`, the getData is sent right behind the sync instead of after its reply (the session's
/// FIFO order puts it after the sync all the same).
async fn run_op(
    client: zk::Client,
    shared: Arc<Shared>,
    id: u32,
    server: u8,
    (group, key): (usize, String),
    call: Call,
    pipelined: bool,
) {
    let call_at = shared.now();
    let attempt = async {
        match &call {
            Call::Read => {
                let got = if pipelined {
                    let (synced, got) = futures_lite::future::zip(client.sync(&key), client.get_data(&key)).await;
                    synced.and(got)
                } else {
                    client.sync(&key).await?;
                    client.get_data(&key).await
                };
                match got {
                    Ok((data, stat)) => {
                        let value = Some(String::from_utf8_lossy(&data).into_owned());
                        Ok((Outcome::Read { value, version: stat.version }, Some(stat.mzxid)))
                    }
                    Err(zk::Error::NoNode) => Ok((Outcome::Read { value: None, version: 0 }, None)),
                    Err(e) => Err(e),
                }
            }
            Call::Write(v) => {
                let stat = client.set_data(&key, v.as_bytes(), None).await?;
                Ok((Outcome::Written(stat.version), Some(stat.mzxid)))
            }
            Call::Cas { value, expected } => {
                let stat = client.set_data(&key, value.as_bytes(), Some(*expected)).await?;
                Ok((Outcome::Written(stat.version), Some(stat.mzxid)))
            }
        }
    };
    let (outcome, zxid) = match tokio::time::timeout(OP_LIMIT, attempt).await {
        Ok(Ok(done)) => done,
        Ok(Err(zk::Error::BadVersion)) => (Outcome::BadVersion, None),
        Ok(Err(zk::Error::NoNode)) => (Outcome::Fail("NoNode".into()), None),
        Ok(Err(e)) => (Outcome::Unknown(e.to_string()), None),
        Err(_) => (Outcome::Unknown(format!("no reply in {OP_LIMIT:?}")), None),
    };
    let return_at = shared.now();
    shared.record(group, Op { key, client: id, server: u32::from(server), call_at, return_at, call, outcome, zxid });
}

/// One client: a session on `server` (a new one whenever it ends), issuing operations until stopped.
async fn client_loop(id: u32, server: u8, kind: Kind, shared: Arc<Shared>, seed: u64) {
    let session = Duration::from_secs(kind.session_s);
    let patience = Duration::from_millis(kind.patience_ms);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seq = 0u64;
    let mut pending: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let addr = client_addr(server).to_string();
    let mut next = tokio::time::Instant::now();
    while !shared.stopped() {
        let connect = zk::Client::connector().with_session_timeout(session).connect(&addr);
        let client = match tokio::time::timeout(session + Duration::from_secs(1), connect).await {
            Ok(Ok(c)) => c,
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while !shared.stopped() {
            match client.state() {
                s if s.is_terminated() => break,
                zk::SessionState::Disconnected => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                _ => {}
            }
            let think = Duration::from_millis(rng.gen_range(0..=kind.think_ms));
            tokio::time::sleep_until(next.max(tokio::time::Instant::now() + think)).await;
            next = tokio::time::Instant::now() + GAP;
            let (group, key) = shared.pick_key(&mut rng);
            seq += 1;
            let value = format!("c{id}-{seq}");
            let call = match rng.gen_range(0..4) {
                _ if kind.reads_only => Call::Read,
                0 | 1 => Call::Read,
                2 => Call::Write(value),
                _ => {
                    let latest = shared.latest.lock().unwrap().get(&key).copied().unwrap_or(0);
                    // Now and then a version that is likely stale, for BadVersion failures.
                    let expected = if rng.gen_bool(0.25) { (latest - 1).max(0) } else { latest };
                    Call::Cas { value, expected }
                }
            };
            let op = run_op(client.clone(), shared.clone(), id, server, (group, key), call, kind.pipelined);
            let mut op = tokio::spawn(op);
            if tokio::time::timeout(patience, &mut op).await.is_err() {
                pending.push(op);
            }
            pending.retain(|op| !op.is_finished());
            while pending.len() >= kind.pending {
                let _ = pending.remove(0).await;
            }
        }
    }
    for op in pending {
        let _ = op.await;
    }
}

/// Creates every key of `group` (data `init`), retrying through faults; false if stopped first.
async fn create_group(client: &mut Option<zk::Client>, shared: &Shared, group: usize) -> bool {
    let hosts = SERVERS.iter().map(|&n| client_addr(n).to_string()).collect::<Vec<_>>().join(",");
    for k in 0..KEYS_PER_GROUP {
        let path = key(group, k);
        loop {
            if shared.stopped() {
                return false;
            }
            if client.as_ref().is_none_or(|c| c.state().is_terminated()) {
                let connect = zk::Client::connector().with_session_timeout(Duration::from_secs(6)).connect(&hosts);
                *client = tokio::time::timeout(Duration::from_secs(10), connect).await.ok().and_then(Result::ok);
            }
            if let Some(c) = client.as_ref() {
                let create = tokio::time::timeout(Duration::from_secs(5), c.create(&path, b"init", &persistent()));
                if let Ok(Ok(_) | Err(zk::Error::NodeExists)) = create.await {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    true
}

/// Keeps two key groups ahead of the clients.
async fn creator_loop(shared: Arc<Shared>) {
    let mut client = None;
    while !shared.stopped() {
        let group = shared.created.load(Ordering::SeqCst);
        if group >= shared.active() + 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        } else if create_group(&mut client, &shared, group).await {
            shared.created.store(group + 1, Ordering::SeqCst);
        }
    }
}

/// Which peer packets a partition drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Both,
    /// The victim cannot hear the others (their packets to it are dropped).
    Deaf,
    /// The others cannot hear the victim (its packets are dropped).
    Mute,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    KillFollower,
    KillLeader,
    KillAll,
    PauseLeader,
    PauseFollower,
    PartitionLeader(Cut),
    PartitionFollower(Cut),
}

const FAULTS: [Fault; 11] = [
    Fault::KillFollower,
    Fault::KillLeader,
    Fault::KillAll,
    Fault::PauseLeader,
    Fault::PauseFollower,
    Fault::PartitionLeader(Cut::Both),
    Fault::PartitionLeader(Cut::Deaf),
    Fault::PartitionLeader(Cut::Mute),
    Fault::PartitionFollower(Cut::Both),
    Fault::PartitionFollower(Cut::Deaf),
    Fault::PartitionFollower(Cut::Mute),
];

impl Fault {
    /// The name `WARDEN_NEMESIS_FAULTS` selects it by.
    fn name(self) -> String {
        match self {
            Fault::KillFollower => "kill-follower".into(),
            Fault::KillLeader => "kill-leader".into(),
            Fault::KillAll => "kill-all".into(),
            Fault::PauseLeader => "pause-leader".into(),
            Fault::PauseFollower => "pause-follower".into(),
            Fault::PartitionLeader(how) => format!("partition-leader-{how:?}").to_lowercase(),
            Fault::PartitionFollower(how) => format!("partition-follower-{how:?}").to_lowercase(),
        }
    }
}

/// The faults to cycle through: all, or those `WARDEN_NEMESIS_FAULTS` names (comma-separated
/// prefixes of [`Fault::name`], e.g. `pause-leader,partition-leader`).
fn selected_faults() -> Vec<Fault> {
    let Ok(names) = std::env::var("WARDEN_NEMESIS_FAULTS") else { return FAULTS.to_vec() };
    let picked: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| names.split(',').map(str::trim).any(|n| !n.is_empty() && f.name().starts_with(n)))
        .collect();
    let all: Vec<String> = FAULTS.iter().map(|f| f.name()).collect();
    assert!(!picked.is_empty(), "WARDEN_NEMESIS_FAULTS={names:?} names none of {all:?}");
    picked
}

fn sleep_between(rng: &mut StdRng, lo_ms: u64, hi_ms: u64) -> Duration {
    let d = Duration::from_millis(rng.gen_range(lo_ms..=hi_ms));
    std::thread::sleep(d);
    d
}

/// Injects one fault and undoes it; returns what it did, and when.
fn inject(e: &mut Ensemble, fault: Fault, shared: &Shared, rng: &mut StdRng) -> Injected {
    let leader = find_leader(&SERVERS, ELECT).ok();
    let follower = SERVERS.iter().copied().filter(|n| Some(*n) != leader).collect::<Vec<_>>()[rng.gen_range(0..2)];
    let leader = leader.unwrap_or_else(|| SERVERS[rng.gen_range(0..3)]);
    let start = shared.now();
    let what = match fault {
        Fault::KillFollower | Fault::KillLeader => {
            let (n, role) =
                if matches!(fault, Fault::KillLeader) { (leader, "leader") } else { (follower, "follower") };
            e.kill(n);
            let down = sleep_between(rng, 500, 3000);
            e.spawn(n);
            format!("kill -9 {role} {n}, restarted after {down:.1?}")
        }
        Fault::KillAll => {
            SERVERS.iter().for_each(|&n| e.kill(n));
            let down = sleep_between(rng, 500, 2000);
            SERVERS.iter().for_each(|&n| e.spawn(n));
            format!("kill -9 all three (leader was {leader}), restarted after {down:.1?}")
        }
        Fault::PauseLeader | Fault::PauseFollower => {
            let (n, role) =
                if matches!(fault, Fault::PauseLeader) { (leader, "leader") } else { (follower, "follower") };
            e.signal(n, "STOP");
            let paused = sleep_between(rng, 2000, 4000);
            e.signal(n, "CONT");
            format!("SIGSTOP {role} {n} for {paused:.1?}")
        }
        Fault::PartitionLeader(how) | Fault::PartitionFollower(how) => {
            let (n, role) =
                if matches!(fault, Fault::PartitionLeader(_)) { (leader, "leader") } else { (follower, "follower") };
            for peer in SERVERS.into_iter().filter(|p| *p != n) {
                match how {
                    Cut::Both => {
                        cut(n, peer);
                        cut(peer, n);
                    }
                    Cut::Deaf => cut(peer, n),
                    Cut::Mute => cut(n, peer),
                }
            }
            let cut_for = sleep_between(rng, 2000, 5000);
            heal();
            format!("partition {role} {n} ({how:?}) for {cut_for:.1?}")
        }
    };
    Injected { start, end: shared.now(), what }
}

/// Waits for a leader with both others following; on failure prints what each server is doing (and
/// the end of the log of one that exited) and returns the problem.
fn recovered(e: &mut Ensemble, shared: &Shared, after: &str) -> Result<(), String> {
    match find_leader(&SERVERS, ELECT) {
        Ok(l) => {
            eprintln!("nemesis {:>9.3} s: leader {l}", shared.now() as f64 / 1e9);
            Ok(())
        }
        Err(m) => {
            let mut problem = format!("no leader with two followers within {ELECT:?} after {after}: {m:?}");
            for (n, mode) in m {
                if let Some(status) = e.exited(n) {
                    problem += &format!("\nserver {n} exited ({status}); its log says:\n{}", e.log_errors(n, 5));
                } else if mode.is_none() {
                    problem += &format!("\nserver {n} does not answer srvr; its log says:\n{}", e.log_errors(n, 5));
                }
            }
            eprintln!("nemesis: {problem}");
            Err(problem)
        }
    }
}

/// Runs faults until `until`, healing and waiting for a leader after each; returns the faults and
/// the times the ensemble did not recover.
fn run_nemesis(
    e: &mut Ensemble,
    shared: &Shared,
    tally: &mut Tally,
    until: Instant,
    rng: &mut StdRng,
) -> (Vec<Injected>, Vec<String>) {
    let faults = selected_faults();
    let mut done = Vec::new();
    let mut stuck = Vec::new();
    let mut round = Vec::new();
    while Instant::now() < until {
        if round.is_empty() {
            round = faults.clone();
            round.shuffle(rng);
        }
        let fault = round.pop().expect("a fault");
        let i = inject(e, fault, shared, rng);
        eprintln!("nemesis {:>9.3} s .. {:>9.3} s: {}", i.start as f64 / 1e9, i.end as f64 / 1e9, i.what);
        if let Err(problem) = recovered(e, shared, &i.what) {
            stuck.push(problem);
            // Restart whatever exited, so that the run goes on.
            SERVERS.iter().for_each(|&n| e.spawn(n));
        }
        done.push(i);
        tally.check_complete(shared, false);
        sleep_between(rng, 1000, 2000);
    }
    (done, stuck)
}

fn nemesis() {
    net_setup();
    let secs = env_num("WARDEN_NEMESIS_SECS", 60);
    let seed = match std::env::var("WARDEN_NEMESIS_SEED") {
        Ok(_) => env_num("WARDEN_NEMESIS_SEED", 0),
        Err(_) => rand::random(),
    };
    eprintln!("nemesis: {secs} s of faults, seed {seed} (WARDEN_NEMESIS_SEED={seed} to replay the choices)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut e = Ensemble::start("warden-nemesis-");
    eprintln!("nemesis: servers in {}", e.dir().display());
    wait_leader(&SERVERS);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        stop: AtomicBool::new(false),
        history: Mutex::new(Vec::new()),
        groups: Mutex::new(Groups { next_at: KEYS_PER_GROUP * OPS_PER_KEY, ..Groups::default() }),
        created: AtomicUsize::new(0),
        latest: Mutex::new(HashMap::new()),
    });
    rt.block_on(async {
        let hosts = client_addr(1).to_string();
        let c = zk::Client::connect(&hosts).await.expect("connect");
        c.create("/nemesis", b"", &persistent()).await.expect("create /nemesis");
        let mut creator = Some(c);
        for group in 0..2 {
            assert!(create_group(&mut creator, &shared, group).await);
            shared.created.store(group + 1, Ordering::SeqCst);
        }
    });
    let mut tasks = vec![rt.spawn(creator_loop(shared.clone()))];
    for (k, kind) in KINDS.into_iter().enumerate() {
        for (s, server) in SERVERS.into_iter().enumerate() {
            let id = (k * SERVERS.len() + s) as u32;
            tasks.push(rt.spawn(client_loop(id, server, kind, shared.clone(), rng.gen())));
        }
    }

    let mut tally = Tally::new();
    let (faults, stuck) =
        run_nemesis(&mut e, &shared, &mut tally, Instant::now() + Duration::from_secs(secs), &mut rng);
    heal();
    let last = recovered(&mut e, &shared, "the last fault");
    shared.stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for t in tasks {
            tokio::time::timeout(OP_LIMIT + Duration::from_secs(30), t)
                .await
                .expect("clients stop in time")
                .expect("client task");
        }
    });
    drop(rt);
    tally.check_complete(&shared, true);

    let t = &tally;
    eprintln!(
        "nemesis: reads {} ok, {} unknown; writes and cas {} ok, {} failed, {} unknown; checked in {:.1?}",
        t.reads_ok, t.reads_unknown, t.writes_ok, t.failed, t.writes_unknown, t.checking
    );
    for f in &t.bad {
        eprintln!("\n{f}");
        let from = f.window.iter().map(|(_, o)| o.call_at).min().unwrap_or(0);
        let to = f.prefix_end;
        for i in faults.iter().filter(|i| i.start <= to && i.end + 3_000_000_000 >= from) {
            eprintln!("  fault {:.3} s .. {:.3} s: {}", i.start as f64 / 1e9, i.end as f64 / 1e9, i.what);
        }
    }
    for (key, states) in &t.undecided {
        eprintln!("nemesis: key {key} undecided after {states} search states");
    }
    println!(
        "nemesis: {} operations, {} faults, {} keys, {} non-linearizable",
        t.ops,
        faults.len(),
        t.keys,
        t.bad.len()
    );
    assert!(t.reads_ok > 100 && t.writes_ok > 100, "too few operations");
    assert!(t.undecided.is_empty(), "the checker could not decide {} keys", t.undecided.len());
    assert!(stuck.is_empty() && last.is_ok(), "the ensemble did not recover from every fault: {stuck:?} {last:?}");
    assert!(t.bad.is_empty(), "{} keys with non-linearizable histories (above)", t.bad.len());
    drop(e);
}

#[test]
fn registers_stay_linearizable_under_kills_pauses_and_partitions() {
    in_netns("registers_stay_linearizable_under_kills_pauses_and_partitions", nemesis);
}
