//! What the election asks its shell to do.

use warden_proto::election::{Notification, ServerState};

use crate::Sid;

/// The outcome of an election round for this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Elected {
    /// The elected leader.
    pub leader: Sid,
    /// `Leading`, `Following` or `Observing`.
    pub state: ServerState,
    /// The leader's epoch as voted (`peerEpoch`): ZAB's new epoch will be above it.
    pub epoch: i64,
    /// The leader's last zxid as voted.
    pub zxid: i64,
    /// The round the decision belongs to (the logical clock).
    pub election_epoch: i64,
}

/// One output of [`crate::FastLeaderElection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionAction {
    /// Send `notification` to server `to` on the election port.
    Send { to: Sid, notification: Notification },
    /// This server has left LOOKING: start leading, following or observing.
    Elected(Elected),
}
