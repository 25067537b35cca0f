//! Who votes: the static ensemble membership (the `server.N=` lines of zoo.cfg).

use std::collections::BTreeSet;

use crate::Sid;

/// Voting members and observers. A quorum is more than half of the voters (ZooKeeper's
/// `QuorumMaj`); observers never count and never win an election.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuorumConfig {
    /// Participants: they vote and may lead.
    pub voters: BTreeSet<Sid>,
    /// Observers: they learn the leader but have no vote (weight 0).
    pub observers: BTreeSet<Sid>,
}

impl QuorumConfig {
    /// A configuration from voter and observer ids.
    pub fn new(voters: impl IntoIterator<Item = Sid>, observers: impl IntoIterator<Item = Sid>) -> Self {
        Self { voters: voters.into_iter().collect(), observers: observers.into_iter().collect() }
    }

    /// The voters and observers of a configuration (ids that do not fit a sid are left out).
    pub fn from_membership(m: &warden_proto::Membership) -> Self {
        let sid = |id: u64| Sid::try_from(id).ok();
        Self::new(m.voters().filter_map(sid), m.observers().filter_map(sid))
    }

    /// Whether `sid` votes (ZooKeeper's `validVoter`, and weight > 0).
    pub fn is_voter(&self, sid: Sid) -> bool {
        self.voters.contains(&sid)
    }

    /// Whether `sid` is a member at all.
    pub fn is_member(&self, sid: Sid) -> bool {
        self.is_voter(sid) || self.observers.contains(&sid)
    }

    /// Whether the voters among `acks` are more than half of all voters (`containsQuorum`).
    pub fn is_quorum<'a>(&self, acks: impl IntoIterator<Item = &'a Sid>) -> bool {
        let voting = acks.into_iter().filter(|s| self.is_voter(**s)).count();
        voting > self.voters.len() / 2
    }

    /// A configuration is usable if it has a voter and no id is both voter and observer.
    pub fn check_invariants(&self) -> Result<(), String> {
        warden_proto::ensure!(!self.voters.is_empty(), "a configuration needs at least one voter");
        warden_proto::ensure!(self.voters.is_disjoint(&self.observers), "an id is both voter and observer");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_majority_of_voters_only() {
        let c = QuorumConfig::new([1, 2, 3], [4]);
        c.check_invariants().unwrap();
        assert!(!c.is_quorum(&[1]));
        assert!(c.is_quorum(&[1, 2]));
        assert!(!c.is_quorum(&[1, 4]), "observers do not count");
        let c4 = QuorumConfig::new([1, 2, 3, 4], []);
        assert!(!c4.is_quorum(&[1, 2]));
        assert!(c4.is_quorum(&[1, 2, 3]));
    }
}
