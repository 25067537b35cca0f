//! Storage conformance suite (the check behind the storage invariants in ARCHITECTURE.md), run on
//! the real file system and on the fault-injecting `FaultFs`. Every case is generated from a seed
//! (printed on failure) and checks:
//!
//! - crash / restart: every acknowledged txn (appended, then successfully synced) is recovered, in
//!   order; what is recovered is a prefix of what was appended (nothing after a gap);
//! - a torn last write: the prefix before it is recovered, without an error;
//! - a flipped bit in any record but the newest file's last one: `Corrupt`, never skipped; in that
//!   last record: `Corrupt`, or cut as a torn tail and reported;
//! - a flipped bit in a snapshot: that snapshot is rejected (an older one is used and the tree is
//!   right) or recovery fails; never a wrong tree;
//! - ENOSPC and failing fsync (FaultFs only): the call fails, the log refuses further use, the
//!   failed batch is not acknowledged, nothing acknowledged is lost;
//! - snapshots + roll + purge, as the server does them: recovery still rebuilds the right tree.
//!
//! On FaultFs a "crash" is a power loss (`FaultFs::crash`: un-synced data partly lost, torn); on
//! the real file system it is dropping every handle (a process crash) and reopening.
//! `WARDEN_CONFORMANCE_CASES` multiplies the number of cases.

mod common;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use warden_proto::data::Acl;
use warden_proto::{Txn, TxnHeader};
use warden_storage::{read_log_file, DataDir, FaultFs, Fs, RealFs, Recovered, SnapshotOptions, StorageError, TxnLog};
use warden_tree::DataTree;

type Rec = (TxnHeader, Txn);

// ---------------------------------------------------------------------------------------------
// The two environments.

trait Env {
    const NAME: &'static str;
    fn new() -> Self;
    fn fs(&self) -> Arc<dyn Fs>;
    /// The data directory (snapshots) and the data log directory.
    fn dirs(&self) -> (PathBuf, PathBuf);
    /// Both directories on the current file system (a crash replaces it: take a new one after).
    fn data(&self) -> DataDir {
        let (data, log) = self.dirs();
        DataDir::with_fs(self.fs(), data, log)
    }
    /// A crash: FaultFs loses what a power loss may lose; the real one keeps what was written.
    fn crash(&mut self, seed: u64);
    fn fault(&self) -> Option<&FaultFs>;
    /// Durably flips one bit.
    fn flip_bit(&self, path: &Path, offset: u64, bit: u8);
    /// Durably cuts a file.
    fn truncate(&self, path: &Path, len: u64);
}

struct RealEnv {
    tmp: tempfile::TempDir,
}

impl Env for RealEnv {
    const NAME: &'static str = "RealFs";

    fn new() -> Self {
        RealEnv { tmp: tempfile::tempdir().unwrap() }
    }

    fn fs(&self) -> Arc<dyn Fs> {
        Arc::new(RealFs)
    }

    fn dirs(&self) -> (PathBuf, PathBuf) {
        (self.tmp.path().join("data"), self.tmp.path().join("log"))
    }

    fn crash(&mut self, _seed: u64) {}

    fn fault(&self) -> Option<&FaultFs> {
        None
    }

    fn flip_bit(&self, path: &Path, offset: u64, bit: u8) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[offset as usize] ^= 1 << bit;
        overwrite(&RealFs, path, &bytes);
    }

    fn truncate(&self, path: &Path, len: u64) {
        let mut f = RealFs.open_write(path).unwrap();
        f.set_len(len).unwrap();
        f.sync_all().unwrap();
    }
}

struct FaultEnv {
    fs: FaultFs,
}

impl Env for FaultEnv {
    const NAME: &'static str = "FaultFs";

    fn new() -> Self {
        FaultEnv { fs: FaultFs::new() }
    }

    fn fs(&self) -> Arc<dyn Fs> {
        Arc::new(self.fs.clone())
    }

    fn dirs(&self) -> (PathBuf, PathBuf) {
        (PathBuf::from("/data"), PathBuf::from("/log"))
    }

    fn crash(&mut self, seed: u64) {
        self.fs = self.fs.crash(seed);
    }

    fn fault(&self) -> Option<&FaultFs> {
        Some(&self.fs)
    }

    fn flip_bit(&self, path: &Path, offset: u64, bit: u8) {
        self.fs.flip_bit(path, offset, bit).unwrap();
    }

    fn truncate(&self, path: &Path, len: u64) {
        self.fs.truncate(path, len).unwrap();
    }
}

fn overwrite(fs: &dyn Fs, path: &Path, bytes: &[u8]) {
    let mut f = fs.create(path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

use std::io::Write as _;

// ---------------------------------------------------------------------------------------------
// Case bookkeeping.

fn cases(base: usize) -> u64 {
    let mult = std::env::var("WARDEN_CONFORMANCE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    (base * mult) as u64
}

thread_local! {
    static CURRENT: Cell<Option<(&'static str, u64)>> = const { Cell::new(None) };
    static OUTCOMES: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Counts how a case ended, for the summary line.
fn outcome(what: &'static str) {
    OUTCOMES.with(|o| *o.borrow_mut().entry(what).or_default() += 1);
}

/// Prints the environment and seed of a failing case.
struct CaseGuard;

impl Drop for CaseGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some((env, seed)) = CURRENT.with(Cell::get) {
                eprintln!("conformance case failed on {env} with seed {seed}");
            }
        }
    }
}

/// Runs `case` for `n` seeds and prints how many ran.
fn run<E: Env>(name: &str, n: u64, case: impl Fn(E, u64)) {
    let started = std::time::Instant::now();
    for seed in 0..n {
        CURRENT.with(|c| c.set(Some((E::NAME, seed))));
        let _guard = CaseGuard;
        case(E::new(), seed);
    }
    let outcomes = OUTCOMES.with(|o| std::mem::take(&mut *o.borrow_mut()));
    eprintln!("{name} on {}: {n} cases in {:?} {outcomes:?}", E::NAME, started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// Txns, the model and the workload.

/// Txn `z`: creates `/n<z>` (data of varied size), sets the data of `/n<z-1>`, or opens and
/// closes sessions, so that replay builds a real tree.
fn gen_txn(z: i64, rng: &mut StdRng) -> Rec {
    let size = if rng.gen_bool(0.05) { rng.gen_range(2_000..9_000) } else { rng.gen_range(0..200) };
    let mut data = vec![0u8; size];
    rng.fill(&mut data[..]);
    let txn = match rng.gen_range(0..10) {
        0 => Txn::SetData { path: format!("/n{}", z - 1), data: Some(data.into()), version: -1 },
        1 => Txn::CreateSession { timeout_ms: 30_000 },
        2 => Txn::CloseSession { paths_to_delete: vec![] },
        _ => Txn::Create {
            path: format!("/n{z}"),
            data: Some(data),
            acl: Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: z as i32,
        },
    };
    let hdr = TxnHeader {
        client_id: 0x100 + z % 3,
        cxid: z as i32,
        zxid: z,
        time_ms: 1_700_000_000_000 + z,
        txn_type: txn.op().code(),
    };
    (hdr, txn)
}

/// What was appended (zxids 1..) and how much of it was acknowledged.
#[derive(Default)]
struct Model {
    appended: Vec<Rec>,
    acked: usize,
}

impl Model {
    fn next(&mut self, rng: &mut StdRng) -> Rec {
        let rec = gen_txn(self.appended.len() as i64 + 1, rng);
        self.appended.push(rec.clone());
        rec
    }

    /// After recovery of `n` txns: checks them against the model and forgets what was lost.
    fn recovered(&mut self, n: usize, ctx: &str) {
        assert!(n >= self.acked, "{ctx}: {} acknowledged txns, only {n} recovered", self.acked);
        assert!(n <= self.appended.len(), "{ctx}: recovered {n} txns, only {} appended", self.appended.len());
        self.appended.truncate(n);
        self.acked = n;
    }

    fn check_log(&mut self, txns: &[Rec], ctx: &str) {
        for (i, rec) in txns.iter().enumerate() {
            assert_eq!(Some(rec), self.appended.get(i), "{ctx}: recovered txn {i} differs (gap or reorder)");
        }
        self.recovered(txns.len(), ctx);
    }

    fn tree(&self, upto: usize) -> (DataTree, Vec<(i64, i32)>) {
        let mut tree = DataTree::new();
        let mut sessions: Vec<(i64, i32)> = Vec::new();
        for (h, t) in &self.appended[..upto] {
            tree.apply(h, t);
            match t {
                Txn::CreateSession { timeout_ms } => {
                    sessions.retain(|(id, _)| *id != h.client_id);
                    sessions.push((h.client_id, *timeout_ms));
                }
                Txn::CloseSession { .. } => sessions.retain(|(id, _)| *id != h.client_id),
                _ => {}
            }
        }
        (tree, sessions)
    }
}

fn nodes(tree: &DataTree) -> Vec<(String, Option<Vec<u8>>, warden_proto::StatPersisted)> {
    tree.snapshot_nodes().map(|(p, n)| (p.to_string(), n.data.as_deref().map(<[u8]>::to_vec), n.stat)).collect()
}

/// One random step: append 1-4 txns, then sync (acknowledging them), flush, roll or nothing.
fn step(log: &mut TxnLog, m: &mut Model, rng: &mut StdRng) -> Result<(), StorageError> {
    for _ in 0..rng.gen_range(1..=4) {
        let (h, t) = m.next(rng);
        log.append(&h, &t)?;
    }
    match rng.gen_range(0..10) {
        0..=5 => log.sync()?,
        6 => return log.flush(),
        7 => log.roll()?,
        _ => return Ok(()),
    }
    m.acked = m.appended.len();
    Ok(())
}

fn pre_alloc(rng: &mut StdRng) -> u64 {
    [0, 512, 4096, 65536][rng.gen_range(0..4)]
}

fn open<E: Env>(env: &E, pre: u64) -> Result<(TxnLog, Vec<Rec>), StorageError> {
    env.data().open_log(pre)
}

/// Appends and syncs `n` txns, rolling now and then; all acknowledged.
fn synced_log<E: Env>(env: &E, m: &mut Model, rng: &mut StdRng, n: usize) -> TxnLog {
    let (mut log, _) = open(env, pre_alloc(rng)).unwrap();
    for _ in 0..n {
        let (h, t) = m.next(rng);
        log.append(&h, &t).unwrap();
        if rng.gen_bool(0.15) {
            log.roll().unwrap();
        }
    }
    log.sync().unwrap();
    m.acked = m.appended.len();
    log
}

/// Every record of the log as (file, start, end), in order.
fn record_spans(fs: &dyn Fs, log_dir: &Path) -> Vec<(PathBuf, u64, u64)> {
    let dir = log_dir.join("version-2");
    let mut files: Vec<PathBuf> = fs.list_dir(&dir).unwrap().into_iter().map(|n| dir.join(n)).collect();
    files.sort_by_key(|p| {
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        i64::from_str_radix(name.trim_start_matches("log."), 16).unwrap()
    });
    let mut spans = Vec::new();
    for f in files {
        let bytes = fs.read(&f).unwrap();
        for (off, _, _) in read_log_file(fs, &f).unwrap().records {
            let o = off as usize;
            let len = i32::from_be_bytes(bytes[o + 8..o + 12].try_into().unwrap()) as u64;
            spans.push((f.clone(), off, off + len + 13));
        }
    }
    spans
}

// ---------------------------------------------------------------------------------------------
// The cases.

/// Rounds of random appends / syncs / flushes / rolls, each ended by a crash and a reopen.
fn crash_keeps_acknowledged<E: Env>(mut env: E, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let pre = pre_alloc(&mut rng);
    for round in 0..4 {
        let ctx = format!("round {round}");
        let (mut log, txns) = open(&env, pre).unwrap();
        m.check_log(&txns, &ctx);
        for _ in 0..rng.gen_range(1..15) {
            step(&mut log, &mut m, &mut rng).unwrap();
        }
        drop(log);
        env.crash(rng.gen());
    }
    let (_, txns) = open(&env, pre).unwrap();
    m.check_log(&txns, "final");
}

/// The last record is cut short (file truncated, or its tail zeroed as in a preallocated file).
fn torn_last_write<E: Env>(env: E, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let n = rng.gen_range(1..20);
    drop(synced_log(&env, &mut m, &mut rng, n));
    let fs = env.fs();
    let (file, start, end) = record_spans(&*fs, &env.dirs().1).pop().unwrap();
    let cut = rng.gen_range(start..end);
    if rng.gen_bool(0.5) {
        env.truncate(&file, cut);
    } else {
        let mut bytes = fs.read(&file).unwrap();
        bytes[cut as usize..end as usize].fill(0);
        overwrite(&*fs, &file, &bytes);
    }
    m.acked = n - 1;
    // (An all-zero prefix of the record reads as padding: nothing to report then.)
    let (mut log, txns) = open(&env, 0).unwrap();
    outcome(if log.recovered_tail().is_some() { "tail cut and reported" } else { "ends in padding" });
    m.check_log(&txns, "after tear");
    // The lost zxid is appended again (possibly to a file of the same name) and survives.
    let (h, t) = m.next(&mut rng);
    log.append(&h, &t).unwrap();
    log.sync().unwrap();
    m.acked = n;
    drop(log);
    let (_, txns) = open(&env, 0).unwrap();
    m.check_log(&txns, "after re-append");
}

/// One bit flipped in a record that is not the newest file's last: `Corrupt`.
fn flipped_bit_in_log<E: Env>(env: E, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let n = rng.gen_range(2..25);
    drop(synced_log(&env, &mut m, &mut rng, n));
    let spans = record_spans(&*env.fs(), &env.dirs().1);
    let (file, start, end) = spans[rng.gen_range(0..spans.len() - 1)].clone();
    env.flip_bit(&file, rng.gen_range(start..end), rng.gen_range(0..8));
    match open(&env, 0) {
        Err(StorageError::Corrupt { file: f, .. }) => assert_eq!(f, file, "the damaged file is named"),
        other => panic!("a flipped bit in a middle record must be Corrupt, got {:?}", other.map(|(_, t)| t.len())),
    }
}

/// One bit flipped in the newest file's last record: `Corrupt`, or cut as a torn tail and
/// reported (a flip there can look exactly like a torn write).
fn flipped_bit_in_last_record<E: Env>(env: E, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let n = rng.gen_range(1..10);
    drop(synced_log(&env, &mut m, &mut rng, n));
    let (file, start, end) = record_spans(&*env.fs(), &env.dirs().1).pop().unwrap();
    env.flip_bit(&file, rng.gen_range(start..end), rng.gen_range(0..8));
    match open(&env, 0) {
        Err(StorageError::Corrupt { .. }) => {}
        Ok((log, txns)) => {
            assert!(log.recovered_tail().is_some(), "a damaged last record is never dropped silently");
            assert_eq!(txns.len(), n - 1);
            outcome("cut as a torn tail (reported)");
            return;
        }
        Err(e) => panic!("unexpected error {e}"),
    }
    outcome("Corrupt");
}

/// The server's cycle: batches, then now and then a snapshot of the acknowledged state, a roll
/// and a purge (keep 3); on FaultFs some snapshot fsyncs fail. Crash, recover: the right tree.
fn snapshots_and_purge<E: Env>(mut env: E, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let pre = pre_alloc(&mut rng);
    for round in 0..3 {
        let r = env.data().recover(pre).unwrap();
        let mut log = check_recovered(r, &mut m, &format!("round {round}"));
        for _ in 0..rng.gen_range(1..20) {
            step(&mut log, &mut m, &mut rng).unwrap();
            if rng.gen_bool(0.3) {
                snapshot_roll_purge(&env, &mut log, &mut m, &mut rng);
            }
        }
        drop(log);
        env.crash(rng.gen());
    }
    let r = env.data().recover(pre).unwrap();
    check_recovered(r, &mut m, "final");
}

fn snapshot_roll_purge<E: Env>(env: &E, log: &mut TxnLog, m: &mut Model, rng: &mut StdRng) {
    log.sync().unwrap();
    m.acked = m.appended.len();
    let (tree, sessions) = m.tree(m.acked);
    let data = env.data();
    if let (Some(f), true) = (env.fault(), rng.gen_bool(0.2)) {
        outcome("snapshot fsync failed");
        let name = format!(".snapshot.{:x}.tmp", m.acked);
        let snap_dir = data.data_dir().join("version-2");
        let path = if rng.gen_bool(0.5) { snap_dir.join(name) } else { snap_dir };
        f.fail_next_sync(&path);
        assert!(data.write_snapshot(&tree, &sessions, m.acked as i64, SnapshotOptions::default()).is_err());
        return;
    }
    data.write_snapshot(&tree, &sessions, m.acked as i64, SnapshotOptions::default()).unwrap();
    log.roll().unwrap();
    data.purge(3).unwrap();
}

/// Checks a recovery against the model: the txns after the snapshot follow it without a gap,
/// at least everything acknowledged is there, and the tree and sessions are the model's.
fn check_recovered(r: Recovered, m: &mut Model, ctx: &str) -> TxnLog {
    let snap = r.snapshot_zxid as usize;
    for (i, rec) in r.txns_after_snapshot.iter().enumerate() {
        assert_eq!(Some(rec), m.appended.get(snap + i), "{ctx}: txn {} after the snapshot differs", snap + i + 1);
    }
    m.recovered(snap + r.txns_after_snapshot.len(), ctx);
    let (want, mut want_sessions) = m.tree(m.acked);
    assert!(nodes(&want) == nodes(&r.tree), "{ctx}: recovered tree differs from the model's");
    let mut sessions = r.sessions.clone();
    sessions.sort();
    want_sessions.sort();
    assert_eq!(want_sessions, sessions, "{ctx}: sessions");
    r.log
}

/// One bit flipped in the newest snapshot (biased towards its last bytes, which the quick
/// validity check reads): rejected, and an older snapshot plus the log give the right tree; or
/// recovery fails. Sometimes the damaged snapshot is the only one and purge removed older logs.
fn flipped_bit_in_snapshot<E: Env>(env: E, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let data = env.data();
    let (mut log, _) = open(&env, pre_alloc(&mut rng)).unwrap();
    for _ in 0..rng.gen_range(1..=4) {
        for _ in 0..rng.gen_range(1..6) {
            step(&mut log, &mut m, &mut rng).unwrap();
        }
        log.sync().unwrap();
        m.acked = m.appended.len();
        let (tree, sessions) = m.tree(m.acked);
        data.write_snapshot(&tree, &sessions, m.acked as i64, SnapshotOptions::default()).unwrap();
        log.roll().unwrap();
        data.purge(3).unwrap();
    }
    drop(log);
    let newest = data.find_valid_snapshots().remove(0);
    let len = data.fs().file_len(&newest).unwrap();
    let at = if rng.gen_bool(0.3) { len - rng.gen_range(1..=5) } else { rng.gen_range(0..len) };
    env.flip_bit(&newest, at, rng.gen_range(0..8));
    match data.recover(0) {
        Ok(r) => {
            assert_ne!(r.snapshot.as_ref(), Some(&newest), "the damaged snapshot was loaded");
            check_recovered(r, &mut m, "after snapshot damage");
            outcome("older snapshot used");
        }
        Err(e @ (StorageError::NoValidSnapshot { .. } | StorageError::CorruptSnapshot { .. })) => {
            outcome("error");
            let _ = e;
        }
        Err(e) => panic!("unexpected error {e}"),
    }
}

/// The disk fills up at a random point: the failing call errs, the log refuses further use,
/// and after freeing space (and maybe a crash) nothing acknowledged is lost.
fn enospc<E: Env>(mut env: E, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let f = env.fault().cloned().unwrap();
    let (mut log, _) = open(&env, pre_alloc(&mut rng)).unwrap();
    for _ in 0..rng.gen_range(0..8) {
        step(&mut log, &mut m, &mut rng).unwrap();
    }
    f.set_space_left(Some(rng.gen_range(0..6000)));
    let failed = (0..40).any(|_| step(&mut log, &mut m, &mut rng).is_err());
    if failed {
        assert_refuses(&mut log, &mut m, &mut rng);
        outcome("ENOSPC hit");
    }
    drop(log);
    f.set_space_left(None);
    if rng.gen_bool(0.5) {
        env.crash(rng.gen());
    }
    let (_, txns) = open(&env, 0).unwrap();
    m.check_log(&txns, "after ENOSPC");
}

/// A failed call leaves the log unusable: the server must stop (and recover on restart).
fn assert_refuses(log: &mut TxnLog, m: &mut Model, rng: &mut StdRng) {
    let (h, t) = m.next(rng);
    assert!(log.append(&h, &t).is_err(), "append after a failure");
    assert!(log.sync().is_err(), "sync after a failure");
    assert!(log.flush().is_err(), "flush after a failure");
    assert!(log.roll().is_err(), "roll after a failure");
}

/// An fsync of the log file (or its directory) fails: the sync errs, its txns are not
/// acknowledged, the log refuses further use, and nothing acknowledged before is lost.
fn failing_fsync<E: Env>(mut env: E, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let f = env.fault().cloned().unwrap();
    let (mut log, _) = open(&env, pre_alloc(&mut rng)).unwrap();
    for _ in 0..rng.gen_range(0..8) {
        step(&mut log, &mut m, &mut rng).unwrap();
    }
    for _ in 0..rng.gen_range(1..4) {
        let (h, t) = m.next(&mut rng);
        log.append(&h, &t).unwrap();
    }
    let file_fails = rng.gen_bool(0.7);
    let target = match (file_fails, log.current_file()) {
        (true, Some(p)) => p.to_path_buf(),
        _ => log.dir().to_path_buf(),
    };
    f.fail_next_sync(&target);
    match log.sync() {
        Err(_) => {
            assert_refuses(&mut log, &mut m, &mut rng);
            outcome("fsync failed");
        }
        Ok(()) => {
            assert!(!file_fails, "a failing fsync of the log file was not reported");
            m.acked = m.appended.len();
            outcome("no directory sync was needed");
        }
    }
    drop(log);
    if rng.gen_bool(0.7) {
        env.crash(rng.gen());
    }
    let (_, txns) = open(&env, 0).unwrap();
    m.check_log(&txns, "after failed fsync");
}

macro_rules! on_both {
    ($($name:ident: $real:expr, $fault:expr;)*) => {
        mod real {
            $(#[test]
            fn $name() {
                super::run::<super::RealEnv>(stringify!($name), super::cases($real), super::$name::<super::RealEnv>);
            })*
        }
        mod fault {
            $(#[test]
            fn $name() {
                super::run::<super::FaultEnv>(stringify!($name), super::cases($fault), super::$name::<super::FaultEnv>);
            })*

            #[test]
            fn enospc() {
                super::run::<super::FaultEnv>("enospc", super::cases(400), super::enospc::<super::FaultEnv>);
            }

            #[test]
            fn failing_fsync() {
                super::run::<super::FaultEnv>("failing_fsync", super::cases(400), super::failing_fsync::<super::FaultEnv>);
            }
        }
    };
}

on_both! {
    crash_keeps_acknowledged: 30, 250;
    torn_last_write: 30, 400;
    flipped_bit_in_log: 30, 400;
    flipped_bit_in_last_record: 30, 400;
    flipped_bit_in_snapshot: 30, 300;
    snapshots_and_purge: 20, 120;
}
