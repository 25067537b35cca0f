//! ZooKeeper's Fast Leader Election (`FastLeaderElection.lookForLeader` and
//! `Messenger.WorkerReceiver`) as a pure state machine.
//!
//! Inputs: [`FastLeaderElection::start`] (become LOOKING), [`FastLeaderElection::receive`] (a
//! decoded notification from a peer) and [`FastLeaderElection::tick`] (time passed). Outputs:
//! [`ElectionAction`]s. Time only enters as `now_ms`; the machine owns no timer, it reports its
//! next deadline through [`FastLeaderElection::next_deadline_ms`].
//!
//! Rules, as in ZooKeeper 3.8:
//! - A new round increments the logical clock and votes for this server: (current epoch, last
//!   zxid, sid). Observers vote for nobody ([`Candidate::NONE`]).
//! - Votes are ordered by ([`Candidate::beats`]) epoch, zxid, sid; observers never win.
//! - A LOOKING notification from a newer round moves the clock forward, clears the round's votes
//!   and re-decides between the sender's vote and our own initial vote; from an older round it is
//!   ignored (the sender gets our vote back); in our round a better vote is adopted and
//!   re-broadcast. Every vote counted is kept per sid (`recvset`).
//! - Once our vote is held by a quorum of voters we wait `finalizeWait` (200 ms, restarted by
//!   every notification that is not better) and then decide; a better notification reopens
//!   the round. Deviation (early finalize, below): we decide at once when, besides the quorum,
//!   every voter not known to be unreachable holds our vote.
//! - FOLLOWING / LEADING notifications in our round are counted in `recvset`; from any round in
//!   `outofelection`. When a quorum agrees on a leader that itself says LEADING, we join it at once
//!   (this is how a restarted server rejoins an established leader).
//! - Without notifications we resend ours with a backoff of 200 ms doubling to 60 s.
//! - A server that is not LOOKING answers each LOOKING voter with its final vote; a decided
//!   server or a voter answers a LOOKING non-voter immediately with its vote (ZooKeeper answers
//!   every non-voter whatever its state; two servers that each take the other for a non-voter,
//!   as two configurations can, would then answer each other forever).
//! - Reconfiguration: a LOOKING server takes a newer configuration (a higher `version=`) from any
//!   notification and restarts its round under it, as ZooKeeper's `WorkerReceiver` does; its own
//!   newly active configuration is in use at once, a LOOKING server's round restarting under it
//!   ([`FastLeaderElection::reconfigure`]). A server the configuration does not name keeps the
//!   kind (participant or observer) the last one that named it gave.
//! - A non-voter (an observer) never answers a voter's LOOKING notification: a voter does not
//!   count a non-voter's vote, and answers it at once, so an observer that answered (for being in
//!   a newer round, holding a better proposal, or having decided) would start an endless exchange
//!   of notifications with every voter still LOOKING. ZooKeeper's WorkerReceiver has that
//!   exchange (its observers answer older rounds and, once decided, any LOOKING voter; its voters
//!   answer non-voters); found by
//!   warden-sim with an observer and duplicated notifications, which made it grow without bound.
//!
//! Deviation: while LOOKING, a reply to a non-voter carries our current proposal; ZooKeeper sends
//! `QuorumPeer.getCurrentVote()`, which is the previous round's result until the round ends. Both
//! let observers finish through FOLLOWING/LEADING answers; ours lets them finish in the same round.
//! Our own notification is counted directly instead of being delivered to ourselves.
//!
//! Deviation: a LOOKING voter that receives a LOOKING vote of its own round that is worse than its
//! proposal answers the sender with its proposal (ZooKeeper answers only votes of older rounds and
//! otherwise relies on the 200 ms resend). This matters after a leader dies: a follower that is
//! still FOLLOWING when a peer's new-round vote arrives answers it and forgets it, then starts the
//! same round voting for itself; without the answer it would learn the better vote only from the
//! peer's resend. It cannot loop: each answer carries a strictly better vote, which the sender
//! adopts, and proposals only improve within a round.
//!
//! Early finalize (a Warden rule; ZooKeeper always waits `finalizeWait`). The shell reports which
//! voters it cannot reach ([`FastLeaderElection::peer_reachable`]: a dial to it failed;
//! reachable again once a connection is up). While LOOKING, as soon as a quorum
//! holds our proposal *and* every voter not known unreachable (ourselves included) has sent us a
//! notification of this round agreeing with it, we decide without waiting. With no reports every
//! voter counts as reachable, so the rule becomes "all voters agree". (Warden's shell reports a
//! voter unreachable only after it had a connection to it, so a server that has not started yet
//! still gets finalizeWait, as in ZooKeeper; and only when a dial fails, not when a connection
//! ends, since peers close connections on purpose in the dial-back handshake.) Why this is safe:
//! `finalizeWait` only gives a better vote time to arrive so that the best-placed server leads; it
//! plays no part in safety. What makes an elected leader safe is the quorum itself: each supporter
//! adopted the vote only because it is not worse (epoch, zxid) than its own history, so the leader's
//! history is at least that of a quorum of voters, which intersects the quorum behind every
//! committed txn; ZAB's discovery and sync then bring everyone to the leader's history. Deciding
//! earlier changes only *which* qualifying server may lead (a voter that was unreachable or slow may
//! carry more history, uncommitted, that sync truncates) and, at worst, lets a late better vote
//! find us already decided, which costs a new round after the ZAB connection fails; the
//! rule cannot elect a server that a quorum has not endorsed. Against ZooKeeper peers the rule
//! changes only when this server decides; they still wait their own `finalizeWait`.

use std::collections::{BTreeMap, BTreeSet};

use warden_proto::election::{Notification, ServerState};
use warden_proto::ensure;

use crate::action::{Elected, ElectionAction};
use crate::candidate::Candidate;
use crate::config::QuorumConfig;
use crate::vote::Vote;
use crate::Sid;

/// `finalizeWait`: how long a quorum-held vote waits for a better notification.
pub const FINALIZE_WAIT_MS: u64 = 200;
/// `minNotificationInterval`: the first resend timeout.
pub const MIN_NOTIFICATION_INTERVAL_MS: u64 = FINALIZE_WAIT_MS;
/// `maxNotificationInterval`: the resend backoff ceiling.
pub const MAX_NOTIFICATION_INTERVAL_MS: u64 = 60_000;

/// Where the machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the first [`FastLeaderElection::start`]: inputs are ignored.
    Idle,
    /// LOOKING; `finalize_at_ms` is set while our vote is held by a quorum.
    Looking { finalize_at_ms: Option<u64> },
    /// Left the election with this final vote (its state is ours).
    Decided(Vote),
}

/// One server's Fast Leader Election.
#[derive(Debug, Clone)]
pub struct FastLeaderElection {
    my_id: Sid,
    config: QuorumConfig,
    config_text: Vec<u8>,
    /// The version of `config_text` (0 without one): a LOOKING server adopts a newer
    /// configuration from a notification.
    config_version: i64,
    /// Whether this server is a participant by the last configuration that named it (its
    /// learner type; [`FastLeaderElection::learning_state`] for one outside the configuration).
    participant: bool,
    /// The `last_zxid` and `current_epoch` of the latest [`FastLeaderElection::start`], for a
    /// round restarted on a newer configuration.
    start_vote: (i64, i64),
    logical_clock: i64,
    phase: Phase,
    own: Candidate,
    proposal: Candidate,
    recvset: BTreeMap<Sid, Vote>,
    outofelection: BTreeMap<Sid, Vote>,
    /// Voters the shell reported unreachable (early finalize ignores them).
    unreachable: BTreeSet<Sid>,
    not_timeout_ms: u64,
    resend_at_ms: u64,
}

impl FastLeaderElection {
    /// A machine for server `my_id` in `config`; idle until [`FastLeaderElection::start`].
    pub fn new(my_id: Sid, config: QuorumConfig) -> Self {
        Self {
            participant: !config.observers.contains(&my_id),
            my_id,
            config,
            config_text: Vec::new(),
            config_version: 0,
            start_vote: (-1, -1),
            logical_clock: 0,
            phase: Phase::Idle,
            own: Candidate::NONE,
            proposal: Candidate::NONE,
            recvset: BTreeMap::new(),
            outofelection: BTreeMap::new(),
            unreachable: BTreeSet::new(),
            not_timeout_ms: MIN_NOTIFICATION_INTERVAL_MS,
            resend_at_ms: 0,
        }
    }

    /// Sets the QuorumVerifier text sent in every notification (ZooKeeper peers parse it; give
    /// them the dynamic-config form, e.g. `server.1=h:2888:3888:participant\nversion=0`).
    pub fn set_config_text(&mut self, text: Vec<u8>) {
        self.config_version = self.config_version.max(config_version(&text).unwrap_or(0));
        self.config_text = text;
    }

    /// A configuration became active on this server (`text` its `QuorumMaj.toString`). It is in
    /// use at once: answers carry it and whom a decided server answers follows it; while LOOKING
    /// the round restarts under it, so no tally mixes two configurations. Ignored if older than
    /// the one in use (a notification may have brought a newer one meanwhile).
    pub fn reconfigure(&mut self, config: QuorumConfig, text: Vec<u8>, now_ms: u64, out: &mut Vec<ElectionAction>) {
        let version = config_version(&text).unwrap_or(0);
        if version < self.config_version || (version == self.config_version && text == self.config_text) {
            return;
        }
        self.config_text = text;
        self.config_version = version;
        match self.phase {
            Phase::Looking { .. } => {
                self.config = config;
                let (last_zxid, current_epoch) = self.start_vote;
                self.start(now_ms, last_zxid, current_epoch, out);
            }
            Phase::Idle | Phase::Decided(_) => {
                self.config = config;
                self.note_kind();
            }
        }
    }

    /// The voters and observers counted in the current round.
    pub fn config(&self) -> &QuorumConfig {
        &self.config
    }

    /// This server's id.
    pub fn my_id(&self) -> Sid {
        self.my_id
    }

    /// The current round (`logicalclock`).
    pub fn logical_clock(&self) -> i64 {
        self.logical_clock
    }

    /// LOOKING until decided, then LEADING, FOLLOWING or OBSERVING.
    pub fn state(&self) -> ServerState {
        match self.phase {
            Phase::Decided(v) => v.state,
            _ => ServerState::Looking,
        }
    }

    /// Whom we currently vote for (meaningful while LOOKING).
    pub fn proposal(&self) -> Candidate {
        self.proposal
    }

    /// The final vote once decided.
    pub fn current_vote(&self) -> Option<Vote> {
        match self.phase {
            Phase::Decided(v) => Some(v),
            _ => None,
        }
    }

    /// When [`FastLeaderElection::tick`] next has work: the end of finalizeWait or the resend
    /// timeout. `None` when not LOOKING.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        match self.phase {
            Phase::Looking { finalize_at_ms: Some(t) } => Some(t),
            Phase::Looking { finalize_at_ms: None } => Some(self.resend_at_ms),
            _ => None,
        }
    }

    /// `QuorumPeer.updateElectionVote`: after ZAB settles a new epoch, answers carry it.
    pub fn update_peer_epoch(&mut self, epoch: i64) {
        if let Phase::Decided(v) = &mut self.phase {
            v.peer_epoch = epoch;
        }
    }

    /// Starts a round (`lookForLeader`): LOOKING, next logical clock, a vote for ourselves with
    /// our `current_epoch` and `last_zxid` (-1 for a server that must not take part), broadcast.
    pub fn start(&mut self, now_ms: u64, last_zxid: i64, current_epoch: i64, out: &mut Vec<ElectionAction>) {
        self.start_vote = (last_zxid, current_epoch);
        self.note_kind();
        self.logical_clock += 1;
        self.recvset.clear();
        self.outofelection.clear();
        self.own = match self.config.is_voter(self.my_id) {
            true => Candidate { sid: self.my_id, zxid: last_zxid, epoch: current_epoch },
            false => Candidate::NONE,
        };
        self.proposal = self.own;
        self.phase = Phase::Looking { finalize_at_ms: None };
        self.not_timeout_ms = MIN_NOTIFICATION_INTERVAL_MS;
        self.resend_at_ms = now_ms + self.not_timeout_ms;
        self.broadcast(out);
        self.check_quorum(now_ms, out);
    }

    /// A reconfig's commit designated `leader` for the configuration of version `zxid` (the
    /// reconfig's zxid), and the node left its role for it: the election takes that leader as
    /// decided without a round, as `QuorumPeer.processReconfig` sets the current vote to the
    /// designated leader and `updateServerState` skips `lookForLeader`. This server leads if it
    /// is the designated one, else follows or observes as the configuration in use says. The
    /// vote's epoch is the reconfig's, the same on every server handed over, so a LOOKING peer's
    /// out-of-election count agrees across them.
    pub fn hand_over(&mut self, leader: Sid, zxid: i64, out: &mut Vec<ElectionAction>) {
        let vote = Vote {
            leader,
            zxid,
            election_epoch: self.logical_clock,
            peer_epoch: zxid >> 32,
            state: ServerState::Looking,
            version: 0,
        };
        self.recvset.clear();
        self.outofelection.clear();
        self.decide(vote, out);
    }

    /// The configuration in a notification, if it is newer than ours and names voters.
    fn newer_config(&self, text: &[u8]) -> Option<warden_proto::Membership> {
        if config_version(text)? <= self.config_version {
            return None;
        }
        let m = warden_proto::Membership::parse_text(std::str::from_utf8(text).ok()?).ok()?;
        let has_voters = m.voters().next().is_some();
        has_voters.then_some(m)
    }

    /// Whether this server is a voter: only a voter's answers teach anyone anything.
    fn votes(&self) -> bool {
        self.config.is_voter(self.my_id)
    }

    /// The shell's view of peer `sid`: `false` when a dial to it failed, `true` once a
    /// connection is up. Only early finalize uses it; a report that makes
    /// every reachable voter agree with our quorum-held proposal decides at once.
    pub fn peer_reachable(&mut self, sid: Sid, reachable: bool, _now_ms: u64, out: &mut Vec<ElectionAction>) {
        match reachable {
            true => self.unreachable.remove(&sid),
            false => self.unreachable.insert(sid),
        };
        if let Phase::Looking { finalize_at_ms: Some(_) } = self.phase {
            self.finalize_early(out);
        }
    }

    /// A notification from peer `from` (`WorkerReceiver` then `lookForLeader`).
    pub fn receive(&mut self, from: Sid, n: &Notification, now_ms: u64, out: &mut Vec<ElectionAction>) {
        if let (Phase::Looking { .. }, Some(m)) = (self.phase, self.newer_config(&n.config)) {
            // `WorkerReceiver`: a LOOKING server takes a newer configuration from any peer's
            // notification and restarts the election under it (a server that missed reconfigs
            // while down would otherwise count the wrong voters, or come back in the wrong role).
            self.config = QuorumConfig::from_membership(&m);
            self.config_text = n.config.clone();
            self.config_version = m.version;
            let (last_zxid, current_epoch) = self.start_vote;
            return self.start(now_ms, last_zxid, current_epoch, out);
        }
        match self.phase {
            Phase::Idle => {}
            _ if !self.config.is_voter(from) => self.answer_non_voter(from, n, out),
            Phase::Decided(_) if !self.votes() => {}
            Phase::Decided(vote) => self.answer_looking_voter(from, n, vote, out),
            Phase::Looking { .. } => {
                if n.state == ServerState::Looking && n.election_epoch < self.logical_clock && self.votes() {
                    out.push(self.send(from, Vote::looking(self.proposal, self.logical_clock)));
                }
                self.resend_at_ms = now_ms + self.not_timeout_ms;
                self.process(from, n, now_ms, out);
            }
        }
    }

    /// Time passed: decide after finalizeWait, or resend our vote and back off.
    pub fn tick(&mut self, now_ms: u64, out: &mut Vec<ElectionAction>) {
        match self.phase {
            Phase::Looking { finalize_at_ms: Some(t) } if now_ms >= t => self.decide_proposal(out),
            Phase::Looking { finalize_at_ms: None } if now_ms >= self.resend_at_ms => {
                self.broadcast(out);
                self.not_timeout_ms = (self.not_timeout_ms * 2).min(MAX_NOTIFICATION_INTERVAL_MS);
                self.resend_at_ms = now_ms + self.not_timeout_ms;
                self.check_quorum(now_ms, out);
            }
            _ => {}
        }
    }

    /// A voter's notification while LOOKING. During finalizeWait only a better vote counts (it
    /// reopens the round); anything else restarts the wait, as ZooKeeper's
    /// `recvqueue.poll(finalizeWait)` loop does, and is dropped, except that a LOOKING vote of
    /// this round agreeing with ours is recorded for early finalize.
    fn process(&mut self, from: Sid, n: &Notification, now_ms: u64, out: &mut Vec<ElectionAction>) {
        if let Phase::Looking { finalize_at_ms: Some(_) } = self.phase {
            if !candidate_of(n).beats(&self.proposal, &self.config) {
                self.phase = Phase::Looking { finalize_at_ms: Some(now_ms + FINALIZE_WAIT_MS) };
                let theirs = Vote::looking(candidate_of(n), n.election_epoch);
                let mine = Vote::looking(self.proposal, self.logical_clock);
                let this_round =
                    n.state == ServerState::Looking && n.zxid != -1 && n.election_epoch == self.logical_clock;
                if this_round && theirs.agrees_with(&mine) {
                    self.recvset.insert(from, theirs);
                    self.finalize_early(out);
                } else if this_round && self.own.zxid != -1 && self.votes() {
                    out.push(self.send(from, mine));
                }
                return;
            }
            self.phase = Phase::Looking { finalize_at_ms: None };
        }
        if !self.config.is_voter(n.leader) {
            return;
        }
        match n.state {
            ServerState::Looking => self.on_looking(from, n, now_ms, out),
            ServerState::Following | ServerState::Leading => self.on_out_of_election(from, n, out),
            ServerState::Observing => {}
        }
    }

    /// The LOOKING case of `lookForLeader`.
    fn on_looking(&mut self, from: Sid, n: &Notification, now_ms: u64, out: &mut Vec<ElectionAction>) {
        if self.own.zxid == -1 || n.zxid == -1 {
            return;
        }
        let theirs = candidate_of(n);
        if n.election_epoch > self.logical_clock {
            self.logical_clock = n.election_epoch;
            self.recvset.clear();
            self.proposal = if theirs.beats(&self.own, &self.config) { theirs } else { self.own };
            self.broadcast(out);
        } else if n.election_epoch < self.logical_clock {
            return;
        } else if theirs.beats(&self.proposal, &self.config) {
            self.proposal = theirs;
            self.broadcast(out);
        } else if theirs != self.proposal && self.votes() {
            // A worse vote of our round: tell the sender ours (deviation, module docs).
            out.push(self.send(from, Vote::looking(self.proposal, self.logical_clock)));
        }
        self.recvset.insert(from, Vote::looking(theirs, n.election_epoch));
        self.check_quorum(now_ms, out);
    }

    /// `receivedFollowingNotification`: join a leader a quorum agrees on, in our round through
    /// `recvset`, or from any round through `outofelection` (then adopting that round).
    fn on_out_of_election(&mut self, from: Sid, n: &Notification, out: &mut Vec<ElectionAction>) {
        let theirs = Vote::from_notification(n);
        if n.election_epoch == self.logical_clock {
            self.recvset.insert(from, Vote { version: 0, ..theirs });
            if self.quorum_follows(&self.recvset, &theirs) {
                return self.decide(theirs, out);
            }
        }
        self.outofelection.insert(from, theirs);
        if self.quorum_follows(&self.outofelection, &theirs) {
            self.logical_clock = n.election_epoch;
            self.decide(theirs, out);
        }
    }

    /// `getVoteTracker(..).hasAllQuorums() && checkLeader(..)`.
    fn quorum_follows(&self, votes: &BTreeMap<Sid, Vote>, vote: &Vote) -> bool {
        let acks = votes.iter().filter(|(_, v)| v.agrees_with(vote)).map(|(sid, _)| sid);
        self.config.is_quorum(acks) && self.check_leader(votes, vote.leader, vote.election_epoch)
    }

    /// `checkLeader`: another leader must itself have said LEADING; we may lead only in our round.
    fn check_leader(&self, votes: &BTreeMap<Sid, Vote>, leader: Sid, election_epoch: i64) -> bool {
        if leader == self.my_id {
            return self.logical_clock == election_epoch;
        }
        votes.get(&leader).is_some_and(|v| v.state == ServerState::Leading)
    }

    /// Starts finalizeWait when a quorum of voters holds our proposal in this round (and decides
    /// at once if early finalize allows).
    fn check_quorum(&mut self, now_ms: u64, out: &mut Vec<ElectionAction>) {
        if self.phase != (Phase::Looking { finalize_at_ms: None }) {
            return;
        }
        let mine = Vote::looking(self.proposal, self.logical_clock);
        let acks = self.recvset.iter().filter(|(_, v)| v.agrees_with(&mine)).map(|(sid, _)| sid);
        if self.config.is_quorum(acks) {
            self.phase = Phase::Looking { finalize_at_ms: Some(now_ms + FINALIZE_WAIT_MS) };
            self.finalize_early(out);
        }
    }

    /// Early finalize (module docs): during finalizeWait, decide now if every voter not known
    /// unreachable holds our proposal in this round.
    fn finalize_early(&mut self, out: &mut Vec<ElectionAction>) {
        let mine = Vote::looking(self.proposal, self.logical_clock);
        let all_agree = self
            .config
            .voters
            .iter()
            .filter(|sid| **sid == self.my_id || !self.unreachable.contains(sid))
            .all(|sid| self.recvset.get(sid).is_some_and(|v| v.agrees_with(&mine)));
        if all_agree {
            self.decide_proposal(out);
        }
    }

    /// Ends the round on our own proposal.
    fn decide_proposal(&mut self, out: &mut Vec<ElectionAction>) {
        let vote = Vote::looking(self.proposal, self.logical_clock);
        self.decide(vote, out);
    }

    /// Leaves LOOKING with `vote`'s leader.
    fn decide(&mut self, vote: Vote, out: &mut Vec<ElectionAction>) {
        let state = if vote.leader == self.my_id { ServerState::Leading } else { self.learning_state() };
        let final_vote = Vote { state, version: 0, ..vote };
        self.phase = Phase::Decided(final_vote);
        out.push(ElectionAction::Elected(Elected {
            leader: vote.leader,
            state,
            epoch: vote.peer_epoch,
            zxid: vote.zxid,
            election_epoch: vote.election_epoch,
        }));
    }

    /// FOLLOWING for voters, OBSERVING for observers.
    /// FOLLOWING for a participant, OBSERVING for an observer. A server outside the
    /// configuration (about to be added, or removed) keeps the kind the last configuration that
    /// named it gave (ZooKeeper's learner type), so a joiner follows without a vote.
    fn learning_state(&self) -> ServerState {
        let participant = match self.config.is_member(self.my_id) {
            true => self.config.is_voter(self.my_id),
            false => self.participant,
        };
        match participant {
            true => ServerState::Following,
            false => ServerState::Observing,
        }
    }

    /// Remembers this server's kind while a configuration names it.
    fn note_kind(&mut self) {
        if self.config.is_member(self.my_id) {
            self.participant = self.config.is_voter(self.my_id);
        }
    }

    /// Sends our proposal to every other voter, and counts it as our own notification.
    fn broadcast(&mut self, out: &mut Vec<ElectionAction>) {
        let mine = Vote::looking(self.proposal, self.logical_clock);
        for &to in self.config.voters.iter().filter(|&&v| v != self.my_id) {
            out.push(self.send(to, mine));
        }
        if self.config.is_voter(self.my_id) && self.own.zxid != -1 && mine.zxid != -1 {
            self.recvset.insert(self.my_id, mine);
        }
    }

    /// Answers a non-voter (observer or unknown) right away with our vote and state.
    fn answer_non_voter(&self, to: Sid, n: &Notification, out: &mut Vec<ElectionAction>) {
        // Only a LOOKING sender needs an answer, and only a decided server or a voter has one
        // worth giving. (ZooKeeper answers every non-voter; two servers that each take the
        // other for a non-voter, as two configurations can, would answer each other forever.)
        let vote = match self.phase {
            _ if n.state != ServerState::Looking => return,
            Phase::Decided(v) => v,
            _ if !self.votes() => return,
            _ => Vote::looking(self.proposal, self.logical_clock),
        };
        out.push(self.send_with_epoch(to, vote, self.logical_clock));
    }

    /// Out of election: a LOOKING voter learns who leads.
    fn answer_looking_voter(&self, to: Sid, n: &Notification, vote: Vote, out: &mut Vec<ElectionAction>) {
        if n.state == ServerState::Looking {
            out.push(self.send_with_epoch(to, vote, vote.election_epoch));
        }
    }

    fn send(&self, to: Sid, vote: Vote) -> ElectionAction {
        self.send_with_epoch(to, vote, vote.election_epoch)
    }

    fn send_with_epoch(&self, to: Sid, vote: Vote, election_epoch: i64) -> ElectionAction {
        let notification = vote.to_notification(self.state(), election_epoch, &self.config_text);
        ElectionAction::Send { to, notification }
    }

    /// Checks the machine's invariants; run after every step in tests and simulation.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.config.check_invariants()?;
        let interval = MIN_NOTIFICATION_INTERVAL_MS..=MAX_NOTIFICATION_INTERVAL_MS;
        ensure!(interval.contains(&self.not_timeout_ms), "notification interval {} out of range", self.not_timeout_ms);
        match self.phase {
            Phase::Idle => {
                ensure!(self.logical_clock == 0, "idle only before the first round");
                Ok(())
            }
            Phase::Looking { finalize_at_ms } => self.check_looking(finalize_at_ms.is_some()),
            Phase::Decided(v) => self.check_decided(v),
        }
    }

    fn check_looking(&self, finalizing: bool) -> Result<(), String> {
        ensure!(self.logical_clock >= 1, "looking before the first round");
        ensure!(
            self.proposal == self.own || self.proposal.beats(&self.own, &self.config),
            "the proposal is never worse than our own vote"
        );
        ensure!(
            self.proposal == Candidate::NONE || self.config.is_voter(self.proposal.sid),
            "only voters are proposed"
        );
        for (sid, v) in &self.recvset {
            ensure!(self.config.is_voter(*sid), "only voters are counted ({sid} is not)");
            ensure!(v.election_epoch == self.logical_clock, "recvset holds only this round");
        }
        if finalizing {
            let mine = Vote::looking(self.proposal, self.logical_clock);
            let acks = self.recvset.iter().filter(|(_, v)| v.agrees_with(&mine)).map(|(s, _)| s);
            ensure!(self.config.is_quorum(acks), "finalizeWait only with a quorum behind the proposal");
        }
        Ok(())
    }

    fn check_decided(&self, v: Vote) -> Result<(), String> {
        // A configuration activated since the decision may have changed who votes (the node
        // then leaves a role it no longer fits and starts a new round); the decision stands.
        ensure!(v.leader != self.my_id || v.state == ServerState::Leading, "decided for ourselves but not LEADING");
        ensure!(v.state != ServerState::Looking, "decided while LOOKING");
        Ok(())
    }
}

/// The version of a configuration text (`version=<hex>` line), if it has one.
fn config_version(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.lines().rev().find_map(|l| l.trim().strip_prefix("version="))?;
    i64::from_str_radix(line.trim(), 16).ok()
}

/// The candidate a notification proposes.
fn candidate_of(n: &Notification) -> Candidate {
    Candidate { sid: n.leader, zxid: n.zxid, epoch: n.peer_epoch }
}
