//! The fault model and the directed scenarios.
//!
//! Random faults (fault phase only), one every ~300 ms of virtual time on average:
//! - crash a server (power loss: `FaultFs::crash` keeps synced data and a random part of the
//!   rest, so a crash between a write and its fsync loses that write), restarted 0.2-3 s later;
//!   at most a minority is down at once;
//! - crash a server right after its storage wrote a batch and before the fsync;
//! - a failing fsync or a full disk (ENOSPC) on a running server: the server must stop rather
//!   than skip (ZOOKEEPER-4882), and is restarted later;
//! - symmetric partitions (a minority cut off) and one-way cuts (a -> b dropped, b -> a
//!   delivered), healed 0.3-3 s later;
//! - election notifications lost (up to 40%) and duplicated; every message delayed 1-5 ms, with
//!   spikes of up to 400 ms (reordering election notifications; quorum connections stay FIFO);
//! - a quorum connection breaks (TCP "loss": queued packets gone, both ends hear it);
//! - disk corruption of a stopped server: a flipped bit or a cut in its newest log file. The
//!   server must refuse to start or drop only a torn tail; if it refuses, the operator wipes
//!   the disk and it rejoins empty. Either way it may have lost data it acknowledged, which ZAB
//!   does not tolerate in general, so this fault is injected only while every other server runs
//!   and already holds every txn a client could have seen (the damaged server may form the next
//!   quorum with any one of them), and the network stays healed until the damaged server has
//!   resynced ("replace the disk in a calm period").
//!
//! Quorum connections are TCP: FIFO per connection, a cut direction holds packets until it heals
//! (retransmission) unless a timeout closes the connection first. Duplication or reordering
//! inside one TCP connection is not physical; they happen at the connection level, when a learner
//! reconnects and the leader re-sends through a new sync.

use std::collections::BTreeSet;

use rand::Rng;

use warden_node::RoleKind;
use warden_proto::quorum::{packet_type as pt, QuorumPacket};
use warden_quorum::zab::counter_of;
use warden_quorum::Sid;

use crate::choices::Choices;
use crate::world::{data_dir, disk, Ev, Phase, World};
use crate::Options;

/// A directed schedule reproducing the conditions of one of ZooKeeper's replication bugs (each
/// variant names its ZOOKEEPER JIRA), checked by the same invariants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// ZOOKEEPER-3911: a follower is DIFF-synced with txns the old leader never committed, then
    /// the new leader dies before NEWLEADER is acked: nothing uncommitted may be served.
    Zk3911,
    /// ZOOKEEPER-3023 / 4646 / 4685: followers crash right after syncing (before and after the
    /// fsync of the synced history) while the leader is killed: committed txns must survive.
    Zk3023,
    /// ZOOKEEPER-4643: crash between writing currentEpoch and the history, repeatedly.
    Zk4643,
    /// ZOOKEEPER-4785: the learner's sync is interrupted (connection breaks mid-sync) many times.
    Zk4785,
    /// ZOOKEEPER-4925: a follower falls behind behind a partition; while it is being synced
    /// (DIFF/TRUNC/SNAP) the leader dies, so the stale server takes part in the next election
    /// with a partly synced log: no hole may be propagated, no committed txn lost.
    Zk4925,
    /// ZOOKEEPER-4882: fsync failures and a full disk on the leader and followers.
    Zk4882,
    /// ZOOKEEPER-1277: the zxid counter starts near 2^32 and rolls over under load.
    Zk1277,
    /// The leader is paused for longer than syncLimit while its clients keep sending: the others
    /// elect a new leader and take writes, and the old one wakes to syncs and reads queued
    /// meanwhile. ZooKeeper's leader answers such a sync at once (its SYNC needs no quorum), so
    /// the read after it is stale; Warden's needs a quorum to confirm it still leads, and its
    /// lease makes it step down before it serves anything.
    PausedLeader,
}

impl Scenario {
    pub const ALL: [Scenario; 8] = [
        Scenario::Zk3911,
        Scenario::Zk3023,
        Scenario::Zk4643,
        Scenario::Zk4785,
        Scenario::Zk4925,
        Scenario::Zk4882,
        Scenario::Zk1277,
        Scenario::PausedLeader,
    ];
}

pub(crate) struct Faults {
    enabled: bool,
    /// Directed pairs (from, to) whose messages are dropped.
    cuts: BTreeSet<(Sid, Sid)>,
    pub(crate) vote_loss: f64,
    pub(crate) vote_dup: f64,
    pub(crate) spike: f64,
    /// Servers whose next storage write is followed by a crash before the fsync.
    pub(crate) crash_after_write: BTreeSet<Sid>,
    pub(crate) injected: u64,
    pub(crate) scenario: Option<Scenario>,
    /// ZOOKEEPER-1277 scenario: the zxid counter limit per epoch (`QuorumSetup::max_counter`).
    pub(crate) max_counter: Option<i64>,
}

impl Faults {
    pub(crate) fn new(opts: &Options) -> Faults {
        Faults {
            enabled: opts.faults,
            cuts: BTreeSet::new(),
            vote_loss: 0.0,
            vote_dup: 0.0,
            spike: 0.0,
            crash_after_write: BTreeSet::new(),
            injected: 0,
            scenario: opts.scenario,
            max_counter: (opts.scenario == Some(Scenario::Zk1277)).then_some(20 + (opts.seed % 40) as i64),
        }
    }

    pub(crate) fn cut(&self, from: Sid, to: Sid) -> bool {
        self.cuts.contains(&(from, to))
    }

    pub(crate) fn schedule_first(&mut self, rng: &mut Choices, opts: &Options) -> Vec<(u64, Ev)> {
        let mut evs = Vec::new();
        if opts.faults {
            evs.push((rng.gen_range(300..1_000), Ev::Fault));
        }
        if opts.scenario.is_some() {
            evs.push((rng.gen_range(400..900), Ev::Scenario));
        }
        evs
    }
}

pub(crate) fn calm(w: &World) -> bool {
    w.servers.iter().any(|s| s.amnesiac)
}

fn down(w: &World) -> Vec<Sid> {
    w.servers.iter().filter(|s| s.run.is_none()).map(|s| s.sid).collect()
}

fn up(w: &World) -> Vec<Sid> {
    w.servers.iter().filter(|s| s.run.is_some()).map(|s| s.sid).collect()
}

fn pick(w: &mut World, from: &[Sid]) -> Option<Sid> {
    if from.is_empty() {
        return None;
    }
    Some(from[w.rng.gen_range(0..from.len())])
}

/// One random fault, then the next one is scheduled.
pub(crate) fn inject(w: &mut World) -> Result<(), String> {
    if w.phase != Phase::Faults || !w.faults.enabled {
        return Ok(());
    }
    let next = w.now + w.rng.gen_range(50..600);
    w.at(next, Ev::Fault);
    if calm(w) {
        heal_network(w);
        for sid in down(w) {
            w.at(w.now + 10, Ev::Restart { sid });
        }
        return Ok(());
    }
    w.faults.injected += 1;
    w.summary.faults += 1;
    // An ensemble keeps a majority up; a standalone server may go down itself.
    let minority = if w.opts.standalone { 1 } else { (w.voters.len() - 1) / 2 };
    let roll = w.rng.gen_range(0..100);
    match roll {
        0..=14 => {
            if down(w).len() < minority {
                let ups = up(w);
                if let Some(sid) = pick(w, &ups) {
                    w.crash(sid, "fault: crash");
                    let t = w.now + w.rng.gen_range(200..3_000);
                    w.at(t, Ev::Restart { sid });
                }
            }
        }
        15..=22 => {
            if down(w).len() < minority {
                let ups = up(w);
                if let Some(sid) = pick(w, &ups) {
                    w.trace(|| format!("fault: server {sid} crashes after its next write, before the fsync"));
                    w.faults.crash_after_write.insert(sid);
                }
            }
        }
        23..=27 => {
            let ups = up(w);
            if let Some(sid) = pick(w, &ups) {
                disk_error(w, sid);
            }
        }
        // A standalone server has no peers to be cut off from.
        28..=52 if w.opts.standalone => {}
        28..=42 => partition(w),
        43..=52 => one_way(w),
        53..=62 => {
            w.faults.vote_loss = w.rng.gen_range(0.05..0.4);
            w.faults.vote_dup = w.rng.gen_range(0.0..0.3);
            let t = w.now + w.rng.gen_range(300..3_000);
            w.at(t, Ev::Heal);
        }
        63..=70 => {
            w.faults.spike = w.rng.gen_range(0.01..0.1);
            let t = w.now + w.rng.gen_range(300..2_000);
            w.at(t, Ev::Heal);
        }
        71..=84 => {
            let open: Vec<u64> = w.qconns.iter().filter(|(_, c)| c.open).map(|(id, _)| *id).collect();
            if !open.is_empty() {
                let conn = open[w.rng.gen_range(0..open.len())];
                w.break_quorum(conn);
            }
        }
        85..=88 => {
            for sid in down(w) {
                w.at(w.now, Ev::Restart { sid });
            }
        }
        89..=90 => pause(w),
        91..=92 => {
            // An NTP step: one server's wall clock jumps forward or back.
            let ups = up(w);
            if let Some(sid) = pick(w, &ups) {
                let jump = w.rng.gen_range(-20_000..=20_000);
                w.trace(|| format!("fault: server {sid}'s wall clock jumps by {jump} ms"));
                w.server_mut(sid).wall_skew_ms += jump;
            }
        }
        _ => {
            // A standalone server has nobody to resync a damaged disk from: no corruption there.
            if !w.opts.standalone && w.rng.gen_bool(0.3) && down(w).is_empty() && w.faults.cuts.is_empty() {
                let ups = up(w);
                if let Some(sid) = pick(w, &ups) {
                    // Losing a disk is survivable only if every other voter already holds what
                    // clients have seen: the damaged server may form the next quorum with any
                    // one of them.
                    if ups.iter().all(|&o| o == sid || w.check.holds_visible(o)) {
                        corrupt(w, sid)?;
                    } else {
                        w.trace(|| {
                            format!("no disk corruption on server {sid}: another voter lags behind what clients saw")
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

/// A process pause (SIGSTOP, a stop-the-world GC): a server, the leader one time in two, handles
/// nothing for a while; peers may elect another leader meanwhile, and it wakes up to its backlog.
fn pause(w: &mut World) {
    let ups = up(w);
    let sid = match leader(w) {
        Some(l) if w.rng.gen_bool(0.5) => Some(l),
        _ => pick(w, &ups),
    };
    let Some(sid) = sid else { return };
    let ms = w.rng.gen_range(100..6_000);
    w.trace(|| format!("fault: server {sid} pauses for {ms} ms"));
    w.pause(sid, ms);
}

fn partition(w: &mut World) {
    let n = w.voters.len();
    let size = w.rng.gen_range(1..=(n - 1) / 2);
    let mut side = BTreeSet::new();
    while side.len() < size {
        side.insert(w.rng.gen_range(1..=n as Sid));
    }
    w.trace(|| format!("fault: partition {side:?} from the rest"));
    for &a in &side {
        for b in 1..=n as Sid {
            if !side.contains(&b) {
                w.faults.cuts.insert((a, b));
                w.faults.cuts.insert((b, a));
            }
        }
    }
    let t = w.now + w.rng.gen_range(300..3_000);
    w.at(t, Ev::Heal);
}

fn one_way(w: &mut World) {
    let n = w.voters.len() as Sid;
    let a = w.rng.gen_range(1..=n);
    let mut b = w.rng.gen_range(1..=n);
    if a == b {
        b = a % n + 1;
    }
    let all = w.rng.gen_bool(0.3);
    w.trace(|| format!("fault: one-way cut from {a} to {}", if all { "everyone".into() } else { b.to_string() }));
    for to in 1..=n {
        if to != a && (all || to == b) {
            w.faults.cuts.insert((a, to));
        }
    }
    let t = w.now + w.rng.gen_range(300..3_000);
    w.at(t, Ev::Heal);
}

/// A failing fsync or a full disk: the next storage operation fails and the server stops.
pub(crate) fn disk_error(w: &mut World, sid: Sid) {
    let fs = w.server(sid).fs.clone();
    let log =
        fs.files().into_iter().rev().find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("log.")));
    if w.rng.gen_bool(0.5) {
        if let Some(path) = log {
            w.trace(|| format!("fault: the next fsync of {} on server {sid} fails", path.display()));
            fs.fail_next_sync(&path);
        }
    } else {
        let bytes = w.rng.gen_range(0..4_096);
        w.trace(|| format!("fault: server {sid}'s disk fills after {bytes} more bytes"));
        fs.set_space_left(Some(bytes));
    }
    let t = w.now + w.rng.gen_range(500..3_000);
    w.at(t, Ev::Restart { sid });
}

/// Crashes `sid`, damages its newest log file, and restarts it in a calm period.
fn corrupt(w: &mut World, sid: Sid) -> Result<(), String> {
    w.crash(sid, "fault: crash before disk corruption");
    let fs = w.server(sid).fs.clone();
    let dir = data_dir().join("version-2");
    let newest = fs
        .files()
        .into_iter()
        .filter(|p| p.parent() == Some(dir.as_path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            let z = u64::from_str_radix(name.strip_prefix("log.")?, 16).ok()?;
            Some((z, p))
        })
        .max();
    let before = disk(fs.crash(0)).recover(16 * 1024).map(|r| r.tree.last_processed_zxid());
    if let Some((_, path)) = newest {
        let len = fs_len(&fs, &path);
        if len > 16 {
            let offset = w.rng.gen_range(16..len);
            if w.rng.gen_bool(0.5) {
                let bit = w.rng.gen_range(0..8);
                w.trace(|| format!("fault: flip bit {bit} at {offset} of {} on server {sid}", path.display()));
                fs.flip_bit(&path, offset, bit).map_err(|e| e.to_string())?;
            } else {
                w.trace(|| format!("fault: cut {} of server {sid} at {offset}", path.display()));
                fs.truncate(&path, offset).map_err(|e| e.to_string())?;
            }
        }
    }
    // A cut through durable records can pass for a torn tail and silently drop acknowledged
    // txns while the epoch files still vouch for them; ZAB cannot survive that (the server may
    // win the next election), so the operator treats such a server as lost and wipes it.
    let after = disk(fs.crash(0)).recover(16 * 1024).map(|r| r.tree.last_processed_zxid());
    if let (Ok(b), Ok(a)) = (&before, &after) {
        if a < b {
            w.trace(|| format!("server {sid} would silently lose {a:#x}..{b:#x}: wiped"));
            w.server_mut(sid).fs = warden_storage::FaultFs::new();
            w.check.wiped(sid);
            w.summary.wiped += 1;
        }
    }
    w.server_mut(sid).amnesiac = true;
    w.faults.crash_after_write.clear();
    heal_network(w);
    w.at(w.now + 50, Ev::Restart { sid });
    Ok(())
}

fn fs_len(fs: &warden_storage::FaultFs, path: &std::path::Path) -> u64 {
    use warden_storage::Fs;
    fs.file_len(path).unwrap_or(0)
}

/// A fuzz script's partition: `sid` cut off from every other server (`both`), or only what it
/// sends, until the network heals.
pub(crate) fn isolate(w: &mut World, sid: Sid, both: bool) {
    for other in w.all_sids() {
        if other != sid {
            w.faults.cuts.insert((sid, other));
            if both {
                w.faults.cuts.insert((other, sid));
            }
        }
    }
}

/// Every network fault ends: cuts, loss, duplication, delay spikes.
pub(crate) fn heal_network(w: &mut World) {
    if w.faults.cuts.is_empty() && w.faults.vote_loss == 0.0 && w.faults.spike == 0.0 && w.faults.vote_dup == 0.0 {
        return;
    }
    w.trace(|| "heal: network faults end".into());
    w.faults.cuts.clear();
    w.faults.vote_loss = 0.0;
    w.faults.vote_dup = 0.0;
    w.faults.spike = 0.0;
    w.release_held();
}

/// The liveness phase: no more faults, every server running.
pub(crate) fn heal_all(w: &mut World) -> Result<(), String> {
    w.faults.enabled = false;
    w.faults.crash_after_write.clear();
    heal_network(w);
    let now = w.now;
    for s in &mut w.servers {
        s.fs.set_space_left(None);
        s.paused_until = s.paused_until.min(now);
    }
    for sid in w.all_sids() {
        w.at(now, Ev::Resume { sid });
    }
    for sid in down(w) {
        w.start_server(sid)?;
    }
    Ok(())
}

// ----- directed scenarios -----

fn leader(w: &World) -> Option<Sid> {
    w.servers.iter().find(|s| s.run.as_ref().is_some_and(|r| r.driver.node().role() == RoleKind::Leader)).map(|s| s.sid)
}

fn crash_soon(w: &mut World, sid: Sid, after_ms: u64, why: &'static str) {
    let inc = w.server(sid).inc;
    w.at(w.now + after_ms, Ev::ScenarioCrash { sid, inc, why });
}

/// A quorum packet is about to leave `from` for `to`.
pub(crate) fn on_send(w: &mut World, from: Sid, to: Sid, p: &QuorumPacket) {
    let Some(sc) = w.faults.scenario else { return };
    if w.phase != Phase::Faults || calm(w) {
        return;
    }
    let newleader_ack = p.packet_type == pt::ACK && counter_of(p.zxid) == 0;
    match sc {
        Scenario::Zk3911 if p.packet_type == pt::NEWLEADER && w.rng.gen_bool(0.3) => {
            // The new leader dies before the DIFF-synced follower's ACK: the follower must not
            // have applied or served the synced txns.
            crash_soon(w, from, 0, "scenario 3911: leader dies right after NEWLEADER");
        }
        Scenario::Zk3023 if newleader_ack => {
            // The follower acked NEWLEADER: its synced history must already be durable.
            if w.rng.gen_bool(0.5) {
                crash_soon(w, from, 0, "scenario 3023: follower dies right after ACK of NEWLEADER");
            } else {
                w.faults.crash_after_write.insert(from);
            }
            if w.rng.gen_bool(0.5) {
                let t = w.rng.gen_range(5..200);
                crash_soon(w, to, t, "scenario 3023: leader dies after its followers synced");
            }
        }
        Scenario::Zk4785 => {
            let sync = matches!(p.packet_type, pt::DIFF | pt::TRUNC | pt::SNAP | pt::NEWLEADER | pt::UPTODATE);
            if sync && w.rng.gen_bool(0.3) {
                if let Some(conn) =
                    w.qconns.iter().find(|(_, c)| c.open && c.leader == from && c.learner == to).map(|(id, _)| *id)
                {
                    w.break_quorum(conn);
                }
            }
        }
        Scenario::Zk4925 if matches!(p.packet_type, pt::DIFF | pt::SNAP | pt::TRUNC) && w.rng.gen_bool(0.4) => {
            // A stale follower is being synced: the leader and another up-to-date server die.
            let t = w.rng.gen_range(0..20);
            crash_soon(w, from, t, "scenario 4925: leader dies while syncing a stale follower");
        }
        _ => {}
    }
}

/// A learner's storage just wrote currentEpoch (before the fsync of what follows).
pub(crate) fn on_current_epoch_written(w: &mut World, sid: Sid) {
    if w.faults.scenario == Some(Scenario::Zk4643) && w.phase == Phase::Faults && !calm(w) && w.rng.gen_bool(0.5) {
        w.faults.crash_after_write.insert(sid);
    }
}

/// The scenario's periodic part, and restarts of servers that have been down long enough.
pub(crate) fn scenario_tick(w: &mut World) -> Result<(), String> {
    let Some(sc) = w.faults.scenario else { return Ok(()) };
    if w.phase != Phase::Faults {
        return Ok(());
    }
    let next = w.now + w.rng.gen_range(300..900);
    w.at(next, Ev::Scenario);
    if calm(w) {
        // A server that lost data is resyncing: no fault until it has (see `corrupt`).
        return Ok(());
    }
    for sid in down(w) {
        if w.now.saturating_sub(w.server(sid).down_since) > 1_500 {
            w.at(w.now, Ev::Restart { sid });
        }
    }
    if !down(w).is_empty() && w.rng.gen_bool(0.5) {
        return Ok(());
    }
    let n = w.voters.len() as Sid;
    match sc {
        Scenario::Zk3911 => {
            // Followers' ACKs stop reaching the leader while clients write (uncommitted
            // proposals pile up on the followers), then the leader dies.
            if let Some(l) = leader(w) {
                for f in (1..=n).filter(|f| *f != l) {
                    w.faults.cuts.insert((f, l));
                }
                let t = w.rng.gen_range(100..400);
                crash_soon(w, l, t, "scenario 3911: leader dies with uncommitted proposals");
                w.at(w.now + t + 1, Ev::Heal);
            }
        }
        Scenario::Zk3023 | Scenario::Zk4643 | Scenario::Zk4785 => {
            // New epochs and syncs keep coming: the leader or a follower dies now and then.
            if w.rng.gen_bool(0.5) {
                if let Some(l) = leader(w) {
                    crash_soon(w, l, 0, "scenario: leader dies");
                }
            } else {
                let ups = up(w);
                if let Some(sid) = pick(w, &ups) {
                    crash_soon(w, sid, 0, "scenario: a server dies");
                }
            }
        }
        Scenario::Zk4925 => {
            // One follower falls behind behind a partition, then rejoins.
            if let Some(l) = leader(w) {
                let stale = (1..=n).filter(|f| *f != l).nth(w.rng.gen_range(0..(n as usize - 1))).unwrap_or(l);
                for other in (1..=n).filter(|o| *o != stale) {
                    w.faults.cuts.insert((stale, other));
                    w.faults.cuts.insert((other, stale));
                }
                let t = w.rng.gen_range(300..1_200);
                w.at(w.now + t, Ev::Heal);
            }
        }
        Scenario::Zk4882 => {
            let target = if w.rng.gen_bool(0.5) { leader(w) } else { None };
            let ups = up(w);
            if let Some(sid) = target.or_else(|| pick(w, &ups)) {
                disk_error(w, sid);
            }
        }
        Scenario::Zk1277 => {
            // The counter limit does the work; writes keep rolling the epoch over.
        }
        Scenario::PausedLeader => {
            // One pause at a time, so a new leader is elected and takes writes meanwhile; shorter
            // than the clients' patience, so they stay connected to the paused one.
            let paused = w.servers.iter().any(|s| s.paused_until > w.now);
            if let Some(l) = leader(w).filter(|_| !paused) {
                let ms = w.rng.gen_range(1_800..2_600);
                w.trace(|| format!("scenario: leader {l} pauses for {ms} ms"));
                w.pause(l, ms);
            }
        }
    }
    Ok(())
}
