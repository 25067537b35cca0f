//! What a vote proposes: a server together with its history, ordered as ZooKeeper's
//! `totalOrderPredicate` orders them.

use crate::config::QuorumConfig;
use crate::Sid;

/// The proposed leader of a vote and the history it would lead with (`proposedLeader`,
/// `proposedZxid`, `proposedEpoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// The proposed leader's sid (`i64::MIN` for an observer's initial non-vote).
    pub sid: Sid,
    /// The proposed leader's last logged zxid.
    pub zxid: i64,
    /// The proposed leader's current epoch (`peerEpoch`).
    pub epoch: i64,
}

impl Candidate {
    /// What an observer "proposes" before it learns anything: it can never win and loses to
    /// every voter (`getInitId` / `getInitLastLoggedZxid` / `getPeerEpoch` for non-participants).
    pub const NONE: Candidate = Candidate { sid: i64::MIN, zxid: i64::MIN, epoch: i64::MIN };

    /// `totalOrderPredicate(self, current)`: whether `self` should replace `current`. Higher epoch
    /// wins, then higher zxid, then higher sid; a server without a vote (weight 0) never wins.
    pub fn beats(&self, current: &Candidate, config: &QuorumConfig) -> bool {
        if !config.is_voter(self.sid) {
            return false;
        }
        (self.epoch, self.zxid, self.sid) > (current.epoch, current.zxid, current.sid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(sid: Sid, zxid: i64, epoch: i64) -> Candidate {
        Candidate { sid, zxid, epoch }
    }

    #[test]
    fn order_is_epoch_then_zxid_then_sid() {
        let cfg = QuorumConfig::new([1, 2, 3], [9]);
        assert!(c(3, 5, 1).beats(&c(2, 5, 1), &cfg));
        assert!(!c(2, 5, 1).beats(&c(3, 5, 1), &cfg));
        assert!(c(1, 6, 1).beats(&c(3, 5, 1), &cfg), "higher zxid beats higher sid");
        assert!(c(1, 1, 2).beats(&c(3, 9, 1), &cfg), "higher epoch beats higher zxid");
        assert!(!c(3, 5, 1).beats(&c(3, 5, 1), &cfg), "equal is not better");
        assert!(!c(9, 99, 9).beats(&c(1, 0, 0), &cfg), "observers never win");
        assert!(c(1, 0, 0).beats(&Candidate::NONE, &cfg));
    }
}
