//! Sessions and their expiry buckets, as ZooKeeper's `SessionTrackerImpl` and `ExpiryQueue`: a
//! deadline is rounded up to the next multiple of tickTime, and one tick expires a whole bucket.
//! Time comes in as monotonic milliseconds; nothing here reads a clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use warden_proto::ensure;

/// One client session as the leader (or standalone server) tracks it.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: i64,
    pub timeout_ms: u32,
    /// The bucket this session sits in: it expires at this monotonic time unless touched.
    pub expires_at_ms: u64,
    /// Set when expiry or closeSession began; later touches fail.
    pub closing: bool,
}

/// Tracks sessions, hands out ids and expires idle ones bucket by bucket.
#[derive(Debug)]
pub struct SessionTracker {
    sessions: HashMap<i64, Session, warden_tree::FastHash>,
    buckets: BTreeMap<u64, BTreeSet<i64>>,
    tick_ms: u64,
    next_id: i64,
}

/// ZooKeeper's `superSecret`, mixed into the seed of a session's password.
const SUPER_SECRET: i64 = 0xB341_5C00;

impl SessionTracker {
    /// `server_id` goes into the top byte of every id; `mono_ms` seeds the middle 40 bits, as
    /// ZooKeeper's `initializeNextSessionId` does.
    pub fn new(tick_ms: u32, server_id: u8, mono_ms: u64) -> Self {
        let initial = (((mono_ms as i64) << 24) as u64 >> 8) as i64 | ((server_id as i64) << 56);
        Self {
            sessions: HashMap::default(),
            buckets: BTreeMap::new(),
            tick_ms: tick_ms.max(1) as u64,
            next_id: initial,
        }
    }

    fn round_up(&self, t: u64) -> u64 {
        (t / self.tick_ms + 1) * self.tick_ms
    }

    /// Allocates the next session id (never `i64::MIN`, which marks containers).
    pub fn next_session_id(&mut self) -> i64 {
        if self.next_id == i64::MIN {
            self.next_id += 1;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    /// Registers a session (from a createSession txn being applied) and puts it in its bucket.
    pub fn add(&mut self, id: i64, timeout_ms: u32, now_ms: u64) {
        let expires_at_ms = self.round_up(now_ms + timeout_ms as u64);
        if let Some(old) = self.sessions.insert(id, Session { id, timeout_ms, expires_at_ms, closing: false }) {
            self.unbucket(old.id, old.expires_at_ms);
        }
        self.buckets.entry(expires_at_ms).or_default().insert(id);
    }

    pub fn get(&self, id: i64) -> Option<&Session> {
        self.sessions.get(&id)
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Session> {
        self.sessions.values()
    }

    /// Moves a live session's deadline; false if the session is unknown or closing.
    pub fn touch(&mut self, id: i64, now_ms: u64) -> bool {
        let tick = self.tick_ms;
        let Some(s) = self.sessions.get_mut(&id) else { return false };
        if s.closing {
            return false;
        }
        let new_at = (now_ms + s.timeout_ms as u64) / tick * tick + tick;
        if new_at == s.expires_at_ms {
            return true;
        }
        let old_at = std::mem::replace(&mut s.expires_at_ms, new_at);
        self.unbucket(id, old_at);
        self.buckets.entry(new_at).or_default().insert(id);
        true
    }

    fn unbucket(&mut self, id: i64, at: u64) {
        if let Some(b) = self.buckets.get_mut(&at) {
            b.remove(&id);
            if b.is_empty() {
                self.buckets.remove(&at);
            }
        }
    }

    /// Marks a session closing (expiry or explicit close); returns false if it was unknown or already closing.
    pub fn set_closing(&mut self, id: i64) -> bool {
        match self.sessions.get_mut(&id) {
            Some(s) if !s.closing => {
                s.closing = true;
                true
            }
            _ => false,
        }
    }

    /// Forgets a session once its closeSession txn is applied.
    pub fn remove(&mut self, id: i64) {
        if let Some(s) = self.sessions.remove(&id) {
            self.unbucket(id, s.expires_at_ms);
        }
    }

    /// Takes every bucket whose time has come and marks its sessions closing. Returns their ids.
    pub fn expire(&mut self, now_ms: u64) -> Vec<i64> {
        let due: Vec<u64> = self.buckets.range(..=now_ms).map(|(t, _)| *t).collect();
        let mut expired = Vec::new();
        for t in due {
            for id in self.buckets.remove(&t).unwrap_or_default() {
                if self.set_closing(id) {
                    expired.push(id);
                }
            }
        }
        expired
    }

    /// Checks the bucket index against the sessions: every live session is in exactly its bucket.
    pub fn check_invariants(&self) -> Result<(), String> {
        let bucketed: usize = self.buckets.values().map(BTreeSet::len).sum();
        let live = self.sessions.values().filter(|s| !s.closing || self.in_bucket(s)).count();
        ensure!(bucketed == live, "bucket index out of step with sessions ({bucketed} bucketed, {live} live)");
        for s in self.sessions.values().filter(|s| !s.closing) {
            ensure!(self.in_bucket(s), "session {:#x} missing from bucket {}", s.id, s.expires_at_ms);
            ensure!(s.expires_at_ms % self.tick_ms == 0, "session {:#x} deadline off the tick grid", s.id);
        }
        Ok(())
    }

    fn in_bucket(&self, s: &Session) -> bool {
        self.buckets.get(&s.expires_at_ms).is_some_and(|b| b.contains(&s.id))
    }
}

/// The 16-byte password of a session: `java.util.Random(id ^ superSecret).nextBytes(16)`, so that every
/// server of an ensemble (Warden or Apache ZooKeeper) validates a reconnect the same way.
pub fn session_password(session_id: i64) -> [u8; 16] {
    const MULT: i64 = 0x5DEECE66D;
    const MASK: i64 = (1 << 48) - 1;
    let mut seed = (session_id ^ SUPER_SECRET ^ MULT) & MASK;
    let mut out = [0u8; 16];
    for chunk in out.chunks_mut(4) {
        seed = (seed.wrapping_mul(MULT).wrapping_add(0xB)) & MASK;
        let mut rnd = (seed >> 16) as i32;
        for b in chunk {
            *b = rnd as u8;
            rnd >>= 8;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_to_the_next_tick_and_touch_moves_buckets() {
        let mut t = SessionTracker::new(2000, 0, 0);
        t.add(7, 10_000, 1_500);
        assert_eq!(t.get(7).unwrap().expires_at_ms, 12_000);
        assert!(t.touch(7, 3_999));
        assert_eq!(t.get(7).unwrap().expires_at_ms, 14_000);
        t.check_invariants().unwrap();
        assert!(t.expire(13_999).is_empty());
        assert_eq!(t.expire(14_000), vec![7]);
        assert!(!t.touch(7, 14_001), "a closing session cannot be touched");
        t.check_invariants().unwrap();
        t.remove(7);
        assert!(t.is_empty());
    }

    #[test]
    fn session_ids_carry_the_server_id_and_skip_the_container_marker() {
        let mut t = SessionTracker::new(2000, 3, 0x12_3456_789A);
        let id = t.next_session_id();
        assert_eq!((id as u64) >> 56, 3);
        assert_eq!(id & 0xffff, 0);
        assert_eq!(t.next_session_id(), id + 1);
        let mut t = SessionTracker::new(2000, 0, 0);
        t.next_id = i64::MIN;
        assert_ne!(t.next_session_id(), i64::MIN);
    }

    #[test]
    fn password_matches_java_util_random() {
        // Printed by `new java.util.Random(id ^ 0xB3415C00L).nextBytes(new byte[16])` on OpenJDK 17.
        assert_eq!(session_password(42), [200, 19, 238, 73, 86, 32, 195, 166, 135, 148, 239, 39, 162, 57, 232, 169]);
        assert_eq!(
            session_password(0x0123_4567_89ab_cdef),
            [247, 205, 27, 139, 63, 148, 108, 71, 116, 37, 212, 27, 227, 246, 103, 198]
        );
    }
}
