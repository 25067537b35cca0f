//! A linearizability checker for versioned registers: one register per key holding a ZooKeeper
//! znode's data and `stat.version` (issue 27; used by the nemesis test, `tests/nemesis.rs`).
//!
//! Operations: a read (sync then getData) observes `(value, version)`; a blind write (setData with
//! version -1) returns the new version; a compare-and-set (setData with an expected version) returns
//! the new version or fails with BadVersion. Every operation carries its call and return times on
//! the client's monotonic clock and an outcome: a result, a failure (it definitely did not take
//! effect: NoNode, say), BadVersion (a compare-and-set that did not take effect because the version
//! differed: ZooKeeper commits a failed write as an error txn in the write order, so this is an
//! observation that the version was not the expected one), or unknown (a timeout or a lost
//! connection: it may take effect at any time after its call, or never; its return time counts as
//! +infinity). Other failures and reads of unknown outcome constrain nothing and are left out of
//! the search.
//!
//! The search is Wing & Gong's with Lowe's memoisation, as in Knossos and Porcupine: repeatedly
//! linearize one of the minimal pending operations (those called before every other pending
//! operation returned) whose result the model explains, backtrack when none does, and never visit
//! the same (set of linearized operations, register state) twice. Keys are independent, so each
//! key's history is checked on its own; histories of a few hundred operations per key check in
//! milliseconds. A history that is not linearizable is reported with its smallest failing prefix
//! (binary search on the return times) and the operations around the point where the deepest
//! partial linearization of that prefix got stuck, with the server and zxid each one saw.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// A znode's `stat.version`.
pub type Version = i32;

/// The register of one key: a node's data (`None`: no such node) and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Register {
    pub value: Option<String>,
    pub version: Version,
}

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// sync then getData.
    Read,
    /// setData with version -1.
    Write(String),
    /// setData with an expected version.
    Cas { value: String, expected: Version },
}

/// What the client saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A read's result; `value: None` is NoNode.
    Read { value: Option<String>, version: Version },
    /// A write or compare-and-set took effect and made this version.
    Written(Version),
    /// A compare-and-set did not take effect: the version was not the expected one.
    BadVersion,
    /// It definitely did not take effect (the reason, e.g. NoNode).
    Fail(String),
    /// It may have taken effect at any time after its call, or never (the reason, e.g. a timeout).
    Unknown(String),
}

/// One operation of a history.
#[derive(Clone, Debug)]
pub struct Op {
    pub key: String,
    /// The client (session) that made it.
    pub client: u32,
    /// The server it went through.
    pub server: u32,
    /// Call and return times in nanoseconds on one monotonic clock; for an unknown outcome the
    /// return time is when the client gave up (the checker treats it as +infinity).
    pub call_at: u64,
    pub return_at: u64,
    pub call: Call,
    pub outcome: Outcome,
    /// The zxid the reply carried: the node's mzxid for a read, the write's own for a write.
    pub zxid: Option<i64>,
}

/// The result of checking one key.
#[derive(Clone, Debug)]
pub enum Verdict {
    Linearizable,
    NotLinearizable(Box<Failure>),
    /// The search visited `states` states without deciding (see [`Checker::max_states`]).
    Undecided {
        states: usize,
    },
}

/// Why one key's history is not linearizable.
#[derive(Clone, Debug)]
pub struct Failure {
    pub key: String,
    /// The key's operations that were checked (failed ones and unknown reads excluded).
    pub checked: usize,
    /// Return time of the last operation of the smallest failing prefix.
    pub prefix_end: u64,
    /// At most how many completed operations of that prefix one linearization explained.
    pub deepest: usize,
    /// The register state where that deepest linearization got stuck.
    pub stuck_at: Register,
    /// The operations around the stuck point, in call order, with their role.
    pub window: Vec<(Role, Op)>,
    /// Operations overlapping the stuck one left out of `window` (the middle ones).
    pub elided: usize,
}

/// What an operation of a failure's window is to the stuck operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Returned before the stuck operation was called: it comes first in every order.
    Before,
    /// Completed, but no linearization could place it: the first such to return.
    Stuck,
    /// Overlaps the stuck operation in time.
    Concurrent,
    /// Overlaps it but is left out of the search (a failure, a read of unknown outcome).
    Ignored,
}

/// The report over all keys of a history.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub ops: usize,
    pub keys: usize,
    pub bad: Vec<Failure>,
    /// Keys the search gave up on, with the states it visited.
    pub undecided: Vec<(String, usize)>,
}

/// The checker, with its search budget.
#[derive(Clone, Copy, Debug)]
pub struct Checker {
    /// States one key's search may visit before it reports [`Verdict::Undecided`].
    pub max_states: usize,
}

impl Default for Checker {
    fn default() -> Self {
        Checker { max_states: 2_000_000 }
    }
}

impl Checker {
    /// Checks every key of `history`, each register starting at `init`.
    pub fn check(&self, history: &[Op], init: &Register) -> Report {
        let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
        for op in history {
            by_key.entry(&op.key).or_default().push(op);
        }
        let mut report = Report { ops: history.len(), keys: by_key.len(), ..Report::default() };
        for (key, ops) in by_key {
            match self.check_key(&ops, init) {
                Verdict::Linearizable => {}
                Verdict::NotLinearizable(f) => report.bad.push(*f),
                Verdict::Undecided { states } => report.undecided.push((key.to_owned(), states)),
            }
        }
        report
    }

    /// Checks the operations of one key (all must have the same key), starting at `init`.
    pub fn check_key(&self, ops: &[&Op], init: &Register) -> Verdict {
        let key = ops.first().map(|o| o.key.clone()).unwrap_or_default();
        let full = Problem::new(ops, init, u64::MAX);
        match full.search(self.max_states) {
            Search::Ok => return Verdict::Linearizable,
            Search::Budget(states) => return Verdict::Undecided { states },
            Search::Stuck(_) => {}
        }
        // The smallest failing prefix: prefixes of a linearizable history are linearizable, so
        // binary search on the completed operations' return times.
        let mut ends: Vec<u64> = full.entries[..full.finite].iter().map(|e| e.ret).collect();
        ends.sort_unstable();
        ends.dedup();
        let (mut lo, mut hi) = (0, ends.len() - 1); // ends[hi] fails (it is the whole history)
        while lo < hi {
            let mid = (lo + hi) / 2;
            match Problem::new(ops, init, ends[mid]).search(self.max_states) {
                Search::Ok => lo = mid + 1,
                _ => hi = mid,
            }
        }
        let prefix = Problem::new(ops, init, ends[hi]);
        let stuck = match prefix.search(self.max_states) {
            Search::Stuck(s) => s,
            // Undecided for this prefix: explain the whole history instead.
            _ => match full.search(self.max_states) {
                Search::Stuck(s) => s,
                _ => unreachable!("the same search decided before"),
            },
        };
        Verdict::NotLinearizable(Box::new(prefix.explain(&key, ops, &stuck)))
    }
}

/// A register state in the search: an interned value (0: no node) and a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct State {
    value: u32,
    version: Version,
}

const ABSENT: u32 = 0;
/// A value no write wrote: a read that returns it can never be explained.
const UNWRITTEN: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Read {
        value: u32,
        version: Version,
    },
    /// A write; `version` is the one it returned, `None` when unknown.
    Write {
        value: u32,
        version: Option<Version>,
    },
    Cas {
        value: u32,
        expected: Version,
        version: Option<Version>,
    },
    /// A compare-and-set that failed with BadVersion: the node existed with another version.
    Mismatch {
        expected: Version,
    },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    call: u64,
    /// `u64::MAX` for an operation of unknown outcome.
    ret: u64,
    kind: Kind,
    /// Index in the key's operations as given.
    op: usize,
}

impl Kind {
    fn step(self, s: State) -> Option<State> {
        match self {
            Kind::Read { value, version } => (s.value == value && s.version == version).then_some(s),
            Kind::Write { value, version } => {
                let next = s.version.checked_add(1)?;
                (s.value != ABSENT && version.is_none_or(|v| v == next)).then_some(State { value, version: next })
            }
            Kind::Mismatch { expected } => (s.value != ABSENT && s.version != expected).then_some(s),
            Kind::Cas { value, expected, version } => {
                let next = expected.checked_add(1)?;
                (s.value != ABSENT && s.version == expected && version.is_none_or(|v| v == next))
                    .then_some(State { value, version: next })
            }
        }
    }
}

/// One key's history prepared for the search: completed operations first (`..finite`), then those
/// of unknown outcome, each group in call order.
struct Problem {
    entries: Vec<Entry>,
    finite: usize,
    init: State,
    values: Vec<Option<String>>,
    /// Where the history was cut (`u64::MAX`: not cut).
    end: u64,
}

enum Search {
    Ok,
    Budget(usize),
    Stuck(Box<Deepest>),
}

/// The deepest point the search reached: how many completed operations were linearized, which,
/// and the state.
struct Deepest {
    done: usize,
    bits: Vec<u64>,
    state: State,
}

fn bit(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

fn flip(bits: &mut [u64], i: usize) {
    bits[i / 64] ^= 1 << (i % 64);
}

/// The memo key of a set of linearized operations: the index of the first word not all ones, then
/// the words from there to the last non-zero one (linearized sets are mostly a prefix).
fn memo_key(bits: &[u64], state: State) -> (Vec<u64>, State) {
    let first = bits.iter().position(|w| *w != u64::MAX).unwrap_or(bits.len());
    let last = bits.iter().rposition(|w| *w != 0).map_or(first, |l| (l + 1).max(first));
    let mut key = Vec::with_capacity(1 + last - first);
    key.push(first as u64);
    key.extend_from_slice(&bits[first..last]);
    (key, state)
}

impl Problem {
    /// The operations of `ops` that constrain the history, cut at `end`: operations called after
    /// `end` are dropped and those returning after it count as pending (unknown outcome).
    fn new(ops: &[&Op], init: &Register, end: u64) -> Problem {
        let mut values: Vec<Option<String>> = vec![None];
        let mut ids: HashMap<String, u32> = HashMap::new();
        let written = ops.iter().filter_map(|op| match &op.call {
            Call::Write(v) | Call::Cas { value: v, .. } => Some(v),
            Call::Read => None,
        });
        for v in init.value.iter().chain(written) {
            if !ids.contains_key(v) {
                ids.insert(v.clone(), values.len() as u32);
                values.push(Some(v.clone()));
            }
        }
        let id = |v: &Option<String>| v.as_ref().map_or(ABSENT, |v| ids.get(v).copied().unwrap_or(UNWRITTEN));
        let init_state = State { value: id(&init.value), version: init.version };
        let mut finite = Vec::new();
        let mut unknown = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if op.call_at > end {
                continue;
            }
            let known = op.return_at <= end;
            let result = match &op.outcome {
                Outcome::Fail(_) => continue,
                // Pending at the cut, it might not have been checked yet: no effect either way.
                Outcome::BadVersion if !known || !matches!(op.call, Call::Cas { .. }) => continue,
                Outcome::Unknown(_) => None,
                o if known => Some(o),
                _ => None,
            };
            let version = match result {
                Some(Outcome::Written(v)) => Some(*v),
                _ => None,
            };
            let kind = match (&op.call, result) {
                (Call::Read, Some(Outcome::Read { value, version })) => {
                    Kind::Read { value: id(value), version: *version }
                }
                // A read of unknown outcome constrains nothing; a read answered like a write is
                // not a read: leave both out.
                (Call::Read, _) => continue,
                (Call::Cas { expected, .. }, Some(Outcome::BadVersion)) => Kind::Mismatch { expected: *expected },
                (Call::Write(v), _) => Kind::Write { value: ids[v], version },
                (Call::Cas { value, expected }, _) => Kind::Cas { value: ids[value], expected: *expected, version },
            };
            let entry = Entry { call: op.call_at, ret: op.return_at, kind, op: i };
            if result.is_some() {
                finite.push(entry);
            } else {
                unknown.push(Entry { ret: u64::MAX, ..entry });
            }
        }
        finite.sort_by_key(|e| (e.call, e.ret));
        unknown.sort_by_key(|e| e.call);
        let n = finite.len();
        finite.extend(unknown);
        Problem { entries: finite, finite: n, init: init_state, values, end }
    }

    /// The operations that may be linearized next, given the linearized set `bits`: the pending
    /// ones called no later than every pending completed operation returned (completed ones first,
    /// in call order, then those of unknown outcome).
    fn candidates(&self, bits: &[u64], out: &mut Vec<usize>) {
        out.clear();
        let first = bits
            .iter()
            .enumerate()
            .find(|(_, w)| **w != u64::MAX)
            .map_or(self.entries.len(), |(i, w)| i * 64 + w.trailing_ones() as usize)
            .min(self.finite);
        // Sorted by call: once a call is later than the earliest pending return seen so far, no
        // later operation can return earlier or be minimal.
        let mut min_ret = u64::MAX;
        let mut end = first;
        while end < self.finite && self.entries[end].call <= min_ret {
            if !bit(bits, end) {
                min_ret = min_ret.min(self.entries[end].ret);
            }
            end += 1;
        }
        out.extend((first..end).filter(|&i| !bit(bits, i) && self.entries[i].call <= min_ret));
        for i in self.finite..self.entries.len() {
            if self.entries[i].call > min_ret {
                break;
            }
            if !bit(bits, i) {
                out.push(i);
            }
        }
    }

    fn search(&self, max_states: usize) -> Search {
        if self.finite == 0 {
            return Search::Ok;
        }
        struct Frame {
            candidates: Vec<usize>,
            next: usize,
            /// The operation this frame linearized and the state before it.
            applied: Option<(usize, State)>,
        }
        let mut bits = vec![0u64; self.entries.len().div_ceil(64)];
        let mut state = self.init;
        let mut done = 0;
        let mut memo: HashSet<(Vec<u64>, State)> = HashSet::new();
        let mut deepest = Deepest { done: 0, bits: bits.clone(), state };
        let mut root = Vec::new();
        self.candidates(&bits, &mut root);
        let mut stack = vec![Frame { candidates: root, next: 0, applied: None }];
        while let Some(top) = stack.last_mut() {
            let Some(&i) = top.candidates.get(top.next) else {
                if let Some((op, before)) = top.applied {
                    flip(&mut bits, op);
                    state = before;
                    done -= usize::from(op < self.finite);
                }
                stack.pop();
                continue;
            };
            top.next += 1;
            let Some(after) = self.entries[i].kind.step(state) else { continue };
            flip(&mut bits, i);
            if !memo.insert(memo_key(&bits, after)) {
                flip(&mut bits, i);
                continue;
            }
            if memo.len() > max_states {
                return Search::Budget(memo.len());
            }
            let before = state;
            state = after;
            done += usize::from(i < self.finite);
            if done == self.finite {
                return Search::Ok;
            }
            let mut candidates = Vec::new();
            self.candidates(&bits, &mut candidates);
            stack.push(Frame { candidates, next: 0, applied: Some((i, before)) });
            if done > deepest.done {
                deepest = Deepest { done, bits: bits.clone(), state };
            }
        }
        Search::Stuck(Box::new(deepest))
    }

    fn register(&self, s: State) -> Register {
        let value = self.values.get(s.value as usize).cloned().flatten();
        Register { value, version: s.version }
    }

    /// The failure report for a stuck search, around the stuck operation (the completed one that
    /// returned first among those the deepest linearization could not place): the last few
    /// operations that returned before it was called (they precede it in every order) and the
    /// last write among them, and the first and last few reads and writes that overlap it.
    fn explain(&self, key: &str, ops: &[&Op], d: &Deepest) -> Failure {
        let stuck = (0..self.finite).filter(|&i| !bit(&d.bits, i)).min_by_key(|&i| self.entries[i].ret);
        let stuck = stuck.expect("a stuck search left a completed operation out");
        let (call, ret) = (self.entries[stuck].call, self.entries[stuck].ret);
        let mut roles: BTreeMap<usize, Role> = BTreeMap::new();
        roles.insert(self.entries[stuck].op, Role::Stuck);
        let mut before: Vec<&Entry> = self.entries[..self.finite].iter().filter(|e| e.ret < call).collect();
        before.sort_by_key(|e| e.ret);
        for e in before.iter().rev().take(BEFORE) {
            roles.insert(e.op, Role::Before);
        }
        if let Some(w) = before.iter().rev().find(|e| !matches!(e.kind, Kind::Read { .. } | Kind::Mismatch { .. })) {
            roles.insert(w.op, Role::Before);
        }
        // Everything else of the key that overlaps it, failed and unknown operations included.
        let (mut reads, mut others) = (Vec::new(), Vec::new());
        for (i, op) in ops.iter().enumerate() {
            let op_ret = if matches!(op.outcome, Outcome::Unknown(_)) { u64::MAX } else { op.return_at };
            if op.call_at > ret || op_ret < call || roles.contains_key(&i) || op.call_at > self.end {
                continue;
            }
            if op.call == Call::Read {
                reads.push(i);
            } else {
                others.push(i);
            }
        }
        let mut elided = 0;
        for (list, keep) in [(&mut reads, CONCURRENT_READS), (&mut others, CONCURRENT_WRITES)] {
            if list.len() > 2 * keep {
                elided += list.len() - 2 * keep;
                list.drain(keep..list.len() - keep);
            }
        }
        let searched: HashSet<usize> = self.entries.iter().map(|e| e.op).collect();
        for i in reads.into_iter().chain(others) {
            roles.insert(i, if searched.contains(&i) { Role::Concurrent } else { Role::Ignored });
        }
        let mut window: Vec<(Role, Op)> = roles.into_iter().map(|(i, r)| (r, ops[i].clone())).collect();
        window.sort_by_key(|(_, o)| (o.call_at, o.return_at));
        Failure {
            key: key.to_owned(),
            checked: self.entries.len(),
            prefix_end: self.end,
            deepest: d.done,
            stuck_at: self.register(d.state),
            window,
            elided,
        }
    }
}

/// Operations shown that returned before the stuck one was called.
const BEFORE: usize = 4;
/// Reads and other operations overlapping the stuck one shown from the start and from the end of
/// its interval.
const CONCURRENT_READS: usize = 3;
const CONCURRENT_WRITES: usize = 4;

/// A zxid as `0x<epoch>_<counter>`.
pub fn zxid(z: i64) -> String {
    format!("0x{:x}_{:08x}", (z as u64) >> 32, z as u64 & 0xffff_ffff)
}

impl fmt::Display for Register {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{v:?} v{}", self.version),
            None => write!(f, "(no node)"),
        }
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Read => write!(f, "read"),
            Call::Write(v) => write!(f, "write {v:?}"),
            Call::Cas { value, expected } => write!(f, "cas {value:?} if v{expected}"),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Read { value, version } => {
                write!(f, "ok {}", Register { value: value.clone(), version: *version })
            }
            Outcome::Written(v) => write!(f, "ok v{v}"),
            Outcome::BadVersion => write!(f, "fail (BadVersion)"),
            Outcome::Fail(why) => write!(f, "fail ({why})"),
            Outcome::Unknown(why) => write!(f, "unknown ({why})"),
        }
    }
}

impl fmt::Display for Op {
    /// One line: call and return times in ms, client, server, operation, outcome, zxid.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |t: u64| t as f64 / 1e6;
        let zxid = self.zxid.map(zxid).unwrap_or_else(|| "-".into());
        write!(
            f,
            "{:>11.3} {:>11.3}  c{:<3} s{:<2} {:<32} {:<28} {zxid}",
            ms(self.call_at),
            ms(self.return_at),
            self.client,
            self.server,
            self.call.to_string(),
            self.outcome.to_string(),
        )
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "key {}: not linearizable ({} operations checked); smallest failing prefix ends at {:.3} ms; \
             at most {} of its completed operations linearize, then the register is {} and no \
             pending operation fits",
            self.key,
            self.checked,
            self.prefix_end as f64 / 1e6,
            self.deepest,
            self.stuck_at
        )?;
        writeln!(
            f,
            "    {:>11} {:>11}  {:<4} {:<3} {:<32} {:<28} zxid",
            "call ms", "return ms", "cli", "via", "operation", "outcome"
        )?;
        for (role, op) in &self.window {
            let mark = match role {
                Role::Before => " <",
                Role::Stuck => "=>",
                Role::Concurrent => " |",
                Role::Ignored => " -",
            };
            writeln!(f, "  {mark}{op}")?;
        }
        if self.elided > 0 {
            writeln!(f, "     ... and {} more operations overlapping the => one", self.elided)?;
        }
        write!(
            f,
            "  (=> the first completed operation no order explains; < returned before it was called; \
             | overlaps it; - overlaps it, left out of the search)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init() -> Register {
        Register { value: Some("init".into()), version: 0 }
    }

    struct H(Vec<Op>);

    impl H {
        fn new() -> H {
            H(Vec::new())
        }
        fn op(mut self, client: u32, call: u64, ret: u64, c: Call, outcome: Outcome) -> H {
            let (call_at, return_at) = (call * 1_000_000, ret * 1_000_000);
            self.0.push(Op { key: "k".into(), client, server: 1, call_at, return_at, call: c, outcome, zxid: None });
            self
        }
        fn read(self, client: u32, call: u64, ret: u64, value: &str, version: Version) -> H {
            self.op(client, call, ret, Call::Read, Outcome::Read { value: Some(value.into()), version })
        }
        fn write(self, client: u32, call: u64, ret: u64, value: &str, version: Version) -> H {
            self.op(client, call, ret, Call::Write(value.into()), Outcome::Written(version))
        }
        fn check(&self) -> Report {
            Checker::default().check(&self.0, &init())
        }
        fn ok(&self) -> bool {
            let r = self.check();
            assert!(r.undecided.is_empty());
            r.bad.is_empty()
        }
    }

    #[test]
    fn empty_and_sequential_histories_are_linearizable() {
        assert!(H::new().ok());
        let h = H::new().read(1, 0, 1, "init", 0).write(1, 2, 3, "a", 1).read(2, 4, 5, "a", 1).write(2, 6, 7, "b", 2);
        assert!(h.ok());
    }

    #[test]
    fn a_stale_read_after_an_acknowledged_write_is_not() {
        let h = H::new().write(1, 0, 10, "a", 1).read(2, 20, 30, "init", 0);
        let r = h.check();
        assert_eq!(r.bad.len(), 1, "{r:?}");
        let f = &r.bad[0];
        assert_eq!(f.stuck_at, Register { value: Some("a".into()), version: 1 });
        assert!(f.window.iter().any(|(role, op)| *role == Role::Stuck && op.call == Call::Read), "{f}");
        let text = f.to_string();
        assert!(text.contains("=>") && text.contains("read"), "{text}");
    }

    #[test]
    fn a_read_concurrent_with_a_write_may_see_either() {
        assert!(H::new().write(1, 0, 10, "a", 1).read(2, 5, 15, "init", 0).ok());
        assert!(H::new().write(1, 0, 10, "a", 1).read(2, 5, 15, "a", 1).ok());
        // ... but not the old value after having seen the new one.
        let h = H::new().write(1, 0, 100, "a", 1).read(2, 5, 15, "a", 1).read(3, 20, 30, "init", 0);
        assert!(!h.ok());
    }

    #[test]
    fn concurrent_writes_linearize_in_either_order() {
        let ab = H::new().write(1, 0, 10, "a", 1).write(2, 1, 11, "b", 2).read(3, 20, 21, "b", 2);
        let ba = H::new().write(1, 0, 10, "a", 2).write(2, 1, 11, "b", 1).read(3, 20, 21, "a", 2);
        assert!(ab.ok() && ba.ok());
        // Versions must follow the order: both cannot have made version 1.
        let both = H::new().write(1, 0, 10, "a", 1).write(2, 1, 11, "b", 1);
        assert!(!both.ok());
        // The later one in real time must have the higher version.
        let backwards = H::new().write(1, 0, 10, "a", 2).write(2, 20, 30, "b", 1);
        assert!(!backwards.ok());
    }

    #[test]
    fn an_unknown_write_may_take_effect_later_or_never() {
        let unknown = |h: H, client, call, value: &str| {
            h.op(client, call, call + 5, Call::Write(value.into()), Outcome::Unknown("timeout".into()))
        };
        // Never: later reads see the old value.
        assert!(unknown(H::new(), 1, 0, "a").read(2, 10, 11, "init", 0).read(2, 50, 51, "init", 0).ok());
        // Much later: a read long after the client gave up sees it.
        assert!(unknown(H::new(), 1, 0, "a").read(2, 10, 11, "init", 0).read(2, 50, 51, "a", 1).ok());
        // But never before it was called.
        assert!(!unknown(H::new(), 1, 20, "a").read(2, 0, 10, "a", 1).ok());
        // And not twice: once it is seen and overwritten, it cannot come back.
        let h = unknown(H::new(), 1, 0, "a").read(2, 10, 11, "a", 1).write(2, 12, 13, "b", 2).read(2, 14, 15, "a", 3);
        assert!(!h.ok());
    }

    #[test]
    fn failed_and_unknown_reads_constrain_nothing() {
        let h = H::new()
            .write(1, 0, 10, "a", 1)
            .op(2, 20, 30, Call::Read, Outcome::Unknown("connection loss".into()))
            .op(3, 20, 30, Call::Write("x".into()), Outcome::Fail("NoNode".into()))
            .read(2, 40, 50, "a", 1);
        assert!(h.ok());
    }

    #[test]
    fn compare_and_set_needs_the_expected_version() {
        let cas = |h: H, client, call, ret, value: &str, expected, outcome| {
            h.op(client, call, ret, Call::Cas { value: value.into(), expected }, outcome)
        };
        // Succeeds from the expected version; a failed one changes nothing.
        let h = cas(H::new(), 1, 0, 1, "a", 0, Outcome::Written(1));
        let h = cas(h, 2, 2, 3, "b", 0, Outcome::BadVersion).read(3, 4, 5, "a", 1);
        assert!(h.ok());
        // BadVersion says the version differed at some point during the call.
        let h = H::new().read(1, 0, 1, "init", 0);
        assert!(!cas(h, 2, 2, 3, "b", 0, Outcome::BadVersion).ok(), "nothing changed version 0");
        let h = H::new().read(1, 0, 1, "init", 0).write(3, 2, 10, "a", 1);
        assert!(cas(h, 2, 2, 3, "b", 0, Outcome::BadVersion).ok(), "a concurrent write changed it");
        let h = cas(H::new(), 2, 2, 3, "b", 0, Outcome::BadVersion);
        assert!(h.op(3, 0, 10, Call::Write("a".into()), Outcome::Unknown("timeout".into())).ok(), "maybe it did");
        // Pending at a cut, a BadVersion constrains nothing: a stale read after it is still caught
        // as the first failure (the smallest failing prefix ends with the read).
        let h = H::new().write(1, 0, 1, "a", 1).read(2, 2, 3, "init", 0);
        let r = cas(h, 3, 1, 9, "b", 1, Outcome::BadVersion).check();
        assert_eq!(r.bad.len(), 1);
        assert_eq!(r.bad[0].prefix_end, 3_000_000);
        // A successful cas from a version the register no longer had.
        let h = H::new().write(1, 0, 1, "a", 1);
        assert!(!cas(h, 2, 2, 3, "b", 0, Outcome::Written(1)).ok());
        // Two concurrent cas from the same version cannot both succeed.
        let h = cas(H::new(), 1, 0, 10, "a", 0, Outcome::Written(1));
        assert!(!cas(h, 2, 0, 10, "b", 0, Outcome::Written(1)).ok());
        // An unknown cas takes effect only where the version matched.
        let h = H::new().write(1, 0, 1, "a", 1);
        let h = cas(h, 2, 2, 3, "b", 0, Outcome::Unknown("timeout".into())).read(3, 10, 11, "b", 1);
        assert!(!h.ok());
        let h = H::new().write(1, 0, 1, "a", 1);
        let h = cas(h, 2, 2, 3, "b", 1, Outcome::Unknown("timeout".into())).read(3, 10, 11, "b", 2);
        assert!(h.ok());
    }

    #[test]
    fn a_read_of_a_missing_node_or_an_unwritten_value_is_not_explained() {
        let h = H::new().op(1, 0, 1, Call::Read, Outcome::Read { value: None, version: 0 });
        assert!(!h.ok());
        assert!(!H::new().read(1, 0, 1, "never written", 0).ok());
    }

    #[test]
    fn keys_are_checked_independently_and_the_failure_names_its_key() {
        let mut h = H::new().write(1, 0, 10, "a", 1).read(2, 20, 30, "init", 0);
        h.0[1].key = "other".into();
        assert!(h.ok(), "each key alone is linearizable");
        let h = h.write(1, 40, 41, "b", 2).read(2, 50, 51, "a", 1);
        let r = h.check();
        assert_eq!((r.keys, r.ops, r.bad.len()), (2, 4, 1));
        assert_eq!(r.bad[0].key, "k");
    }

    #[test]
    fn the_failure_is_cut_to_the_smallest_failing_prefix() {
        // 200 good operations, one stale read at op 100, 100 more good ones.
        let mut h = H::new();
        let mut version = 0;
        for i in 0..200u64 {
            let t = 10 * i + 1000;
            if i == 100 {
                h = h.read(9, t, t + 2, "init", 0);
            } else if i % 2 == 0 {
                version += 1;
                h = h.write(1, t, t + 2, &format!("v{version}"), version);
            } else {
                h = h.read(2, t, t + 2, &format!("v{version}"), version);
            }
        }
        let r = h.check();
        assert_eq!(r.bad.len(), 1);
        let f = &r.bad[0];
        assert_eq!(f.prefix_end, 2002 * 1_000_000, "{f}");
        assert!(f.window.len() <= 8, "{f}");
        let (role, op) = f.window.iter().find(|(r, _)| *r == Role::Stuck).expect("a stuck op");
        assert_eq!((role, op.client), (&Role::Stuck, 9));
    }

    #[test]
    fn the_failure_shows_what_came_before_and_a_few_of_many_overlapping_reads() {
        // Three writes, then a slow stale read overlapped by twenty good reads and a write.
        let mut h = H::new().write(1, 0, 1, "a", 1).write(1, 2, 3, "b", 2).read(2, 4, 5, "b", 2).write(1, 6, 7, "c", 3);
        h = h.read(9, 10, 200, "a", 1);
        for i in 0..20 {
            h = h.read(2, 20 + 5 * i, 22 + 5 * i, "c", 3);
        }
        let h = h.write(1, 150, 151, "d", 4);
        let r = h.check();
        assert_eq!(r.bad.len(), 1);
        let f = &r.bad[0];
        let roles = |role| f.window.iter().filter(|(r, _)| *r == role).count();
        assert_eq!((roles(Role::Before), roles(Role::Stuck), roles(Role::Concurrent)), (4, 1, 7), "{f}");
        assert_eq!(f.elided, 14, "{f}");
        assert!(f.to_string().contains("14 more operations"), "{f}");
    }

    #[test]
    fn the_search_gives_up_at_its_budget() {
        // Many concurrent unknown writes and a read no order explains: exponential without a bound.
        let mut h = H::new();
        for c in 0..24 {
            h = h.op(c, 0, 1, Call::Write(format!("w{c}")), Outcome::Unknown("timeout".into()));
        }
        let h = h.read(99, 5, 6, "w3", 30);
        let r = Checker { max_states: 10_000 }.check(&h.0, &init());
        assert_eq!(r.undecided.len(), 1, "{r:?}");
    }

    #[test]
    fn many_keys_with_long_histories_check_quickly() {
        // ~100k operations over 500 keys, 8 clients each with overlapping operations.
        let mut ops = Vec::new();
        for k in 0..500 {
            let mut version = 0;
            let mut value = "init".to_string();
            for i in 0..200u64 {
                let t = i * 100;
                let client = (i % 8) as u32;
                let (call, outcome) = if i % 3 == 0 {
                    version += 1;
                    value = format!("k{k}-{i}");
                    (Call::Write(value.clone()), Outcome::Written(version))
                } else {
                    (Call::Read, Outcome::Read { value: Some(value.clone()), version })
                };
                ops.push(Op {
                    key: format!("k{k}"),
                    client,
                    server: 1,
                    call_at: t,
                    return_at: t + 250,
                    call,
                    outcome,
                    zxid: None,
                });
            }
        }
        let started = std::time::Instant::now();
        let r = Checker::default().check(&ops, &init());
        assert!(r.bad.is_empty() && r.undecided.is_empty());
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    }

    /// A sequential execution with each operation's interval stretched around its point in
    /// time: always linearizable, whatever the overlaps and unknown outcomes.
    mod generated {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Gen {
            Read,
            Write,
            Cas { off_by: i32 },
        }

        fn gen() -> impl Strategy<Value = Gen> {
            prop_oneof![Just(Gen::Read), Just(Gen::Write), (-1i32..=1).prop_map(|off_by| Gen::Cas { off_by })]
        }

        /// Runs `steps` sequentially on a register and stretches each operation's interval around
        /// its point in time (100 apart; `before` and `after` up to 400 either side).
        fn execute(steps: Vec<(Gen, u64, u64, u8, u32)>) -> Vec<Op> {
            let mut reg = init();
            let mut ops = Vec::new();
            for (i, (g, before, after, fate, client)) in steps.into_iter().enumerate() {
                let point = 1_000 + 100 * i as u64;
                let (call_at, return_at) = (point - before.min(999), point + after);
                // fate 0: an unknown outcome that did not take effect; 1: a write that took effect
                // but whose client never heard.
                let unknown = fate == 0;
                let (call, outcome) = match g {
                    Gen::Read => (Call::Read, Outcome::Read { value: reg.value.clone(), version: reg.version }),
                    Gen::Write => {
                        let v = format!("w{i}");
                        if !unknown {
                            reg = Register { value: Some(v.clone()), version: reg.version + 1 };
                        }
                        (Call::Write(v), Outcome::Written(reg.version))
                    }
                    Gen::Cas { off_by } => {
                        let v = format!("c{i}");
                        let expected = reg.version + off_by;
                        if off_by != 0 {
                            (Call::Cas { value: v, expected }, Outcome::BadVersion)
                        } else {
                            if !unknown {
                                reg = Register { value: Some(v.clone()), version: reg.version + 1 };
                            }
                            (Call::Cas { value: v, expected }, Outcome::Written(reg.version))
                        }
                    }
                };
                let outcome = if unknown && !matches!(outcome, Outcome::BadVersion) {
                    Outcome::Unknown("timeout".into())
                } else if fate == 1 && !matches!(outcome, Outcome::BadVersion | Outcome::Read { .. }) {
                    Outcome::Unknown("connection loss".into())
                } else {
                    outcome
                };
                ops.push(Op { key: "k".into(), client, server: 1, call_at, return_at, call, outcome, zxid: None });
            }
            ops
        }

        fn steps() -> impl Strategy<Value = Vec<(Gen, u64, u64, u8, u32)>> {
            proptest::collection::vec((gen(), 0u64..400, 0u64..400, 0u8..10, 0u32..4), 0..60)
        }

        proptest::proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]
            #[test]
            fn sequential_executions_with_overlapping_intervals_are_linearizable(steps in steps()) {
                let r = Checker::default().check(&execute(steps), &init());
                prop_assert!(r.bad.is_empty(), "{}", r.bad[0]);
                prop_assert!(r.undecided.is_empty());
            }

            /// Versions only grow: a read that sees a version older than one a completed write
            /// made before the read was called is always caught.
            #[test]
            fn a_read_older_than_a_write_completed_before_it_is_always_caught(steps in steps(), pick in 0usize..1000) {
                let mut ops = execute(steps);
                let stale: Vec<usize> = (0..ops.len())
                    .filter(|&r| {
                        matches!(ops[r].outcome, Outcome::Read { .. })
                            && ops.iter().any(|w| {
                                matches!(w.outcome, Outcome::Written(v) if v > 0) && w.return_at < ops[r].call_at
                            })
                    })
                    .collect();
                prop_assume!(!stale.is_empty());
                let r = stale[pick % stale.len()];
                ops[r].outcome = Outcome::Read { value: Some("init".into()), version: 0 };
                let report = Checker::default().check(&ops, &init());
                prop_assert_eq!(report.bad.len(), 1);
            }
        }
    }
}
