//! A vote as recorded from a notification, and ZooKeeper's rule for when two votes agree.

use warden_proto::election::{Notification, ServerState};

use crate::candidate::Candidate;
use crate::Sid;

/// A recorded vote (ZooKeeper's `Vote`): what a peer proposes, in which round, in which state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Vote {
    /// The proposed leader's sid.
    pub leader: Sid,
    /// The proposed leader's last zxid.
    pub zxid: i64,
    /// The round (logical clock) the vote was cast in.
    pub election_epoch: i64,
    /// The proposed leader's epoch.
    pub peer_epoch: i64,
    /// The voter's state when it sent the vote.
    pub state: ServerState,
    /// The notification format version (0 for legacy forms, 2 today).
    pub version: i32,
}

impl Vote {
    /// The vote a candidate gets in a round, as a LOOKING server casts it.
    pub fn looking(c: Candidate, election_epoch: i64) -> Self {
        Self {
            leader: c.sid,
            zxid: c.zxid,
            election_epoch,
            peer_epoch: c.epoch,
            state: ServerState::Looking,
            version: 0,
        }
    }

    /// The vote a notification carries, keeping its state and version.
    pub fn from_notification(n: &Notification) -> Self {
        Self {
            leader: n.leader,
            zxid: n.zxid,
            election_epoch: n.election_epoch,
            peer_epoch: n.peer_epoch,
            state: n.state,
            version: n.version,
        }
    }

    /// The candidate this vote proposes.
    pub fn candidate(&self) -> Candidate {
        Candidate { sid: self.leader, zxid: self.zxid, epoch: self.peer_epoch }
    }

    /// `Vote.equals`: votes involving a LOOKING state agree on every field but state and version;
    /// votes of servers out of election agree on the leader and its epoch, or only on the leader
    /// when one of them predates versioned notifications (ZOOKEEPER-1805, ZOOKEEPER-1732).
    pub fn agrees_with(&self, other: &Vote) -> bool {
        if self.state == ServerState::Looking || other.state == ServerState::Looking {
            return self.leader == other.leader
                && self.zxid == other.zxid
                && self.election_epoch == other.election_epoch
                && self.peer_epoch == other.peer_epoch;
        }
        if (self.version > 0) != (other.version > 0) {
            return self.leader == other.leader;
        }
        self.leader == other.leader && self.peer_epoch == other.peer_epoch
    }

    /// The notification that announces this vote.
    pub fn to_notification(&self, state: ServerState, election_epoch: i64, config: &[u8]) -> Notification {
        Notification {
            state,
            leader: self.leader,
            zxid: self.zxid,
            election_epoch,
            peer_epoch: self.peer_epoch,
            version: warden_proto::election::NOTIFICATION_VERSION,
            config: config.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(state: ServerState, version: i32, peer_epoch: i64, zxid: i64) -> Vote {
        Vote { leader: 3, zxid, election_epoch: 4, peer_epoch, state, version }
    }

    #[test]
    fn agreement_follows_zookeeper_vote_equals() {
        use ServerState::*;
        assert!(v(Looking, 2, 1, 5).agrees_with(&v(Looking, 0, 1, 5)));
        assert!(!v(Looking, 2, 1, 5).agrees_with(&v(Following, 2, 1, 6)), "zxid counts when LOOKING");
        assert!(v(Following, 2, 1, 5).agrees_with(&v(Leading, 2, 1, 9)), "zxid ignored out of election");
        assert!(!v(Following, 2, 1, 5).agrees_with(&v(Leading, 2, 2, 5)));
        assert!(v(Following, 0, 1, 5).agrees_with(&v(Leading, 2, 2, 5)), "mixed versions: leader only");
    }
}
