//! The task that owns the [`FastLeaderElection`] machine: it feeds it received notifications,
//! ticks at its deadline and restart commands, and carries out its actions (queue a
//! notification for a peer, publish the outcome). Every protocol decision stays in the machine.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use warden_proto::election::frame_message;
use warden_quorum::{ElectionAction, FastLeaderElection, QuorumConfig, ServerState, Sid};

use super::conn::Received;
use super::link::LinkEvent;
use super::peers::Peers;
use super::ElectionStatus;

/// What the handle asks the driver.
#[derive(Debug)]
pub(crate) enum Command {
    /// Start a new round (`lookForLeader`).
    Restart { last_zxid: i64, current_epoch: i64, done: oneshot::Sender<()> },
    /// A reconfig's commit designated this leader (`FastLeaderElection::hand_over`).
    HandOver { leader: Sid, zxid: i64, done: oneshot::Sender<()> },
    /// ZAB settled this epoch (`QuorumPeer.updateElectionVote`): answers carry it from now on.
    PeerEpoch(i64),
    /// A reconfig made this configuration active (`FastLeaderElection::reconfigure`); links to
    /// its new members (sid, election host and port) start at once.
    Configure(QuorumConfig, Vec<u8>, Vec<(Sid, String, u16)>),
}

pub(crate) struct Driver {
    pub election: FastLeaderElection,
    pub started: Instant,
    pub peers: Arc<Peers>,
    pub received: mpsc::Receiver<Received>,
    pub commands: mpsc::Receiver<Command>,
    pub status: watch::Sender<ElectionStatus>,
    pub shutdown: watch::Receiver<bool>,
}

impl Driver {
    /// Starts the first round and runs until shutdown.
    pub(crate) async fn run(mut self, last_zxid: i64, current_epoch: i64) {
        let mut actions = Vec::new();
        self.election.start(self.now_ms(), last_zxid, current_epoch, &mut actions);
        self.carry_out(&mut actions);
        loop {
            let deadline =
                self.election.next_deadline_ms().map(|ms| self.started + std::time::Duration::from_millis(ms));
            let mut restarted = None;
            let now_ms = self.now_ms();
            tokio::select! {
                _ = self.shutdown.changed() => break,
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Restart { last_zxid, current_epoch, done }) => {
                        restarted = Some(done);
                        self.election.start(now_ms, last_zxid, current_epoch, &mut actions)
                    }
                    Some(Command::HandOver { leader, zxid, done }) => {
                        restarted = Some(done);
                        self.election.hand_over(leader, zxid, &mut actions)
                    }
                    Some(Command::PeerEpoch(epoch)) => self.election.update_peer_epoch(epoch),
                    Some(Command::Configure(config, text, members)) => {
                        for (sid, host, port) in members {
                            self.peers.ensure(sid, &host, port);
                        }
                        self.election.reconfigure(config, text, now_ms, &mut actions);
                    }
                    None => break,
                },
                Some(received) = self.received.recv() => match received {
                    Received::Notification(from, n) => {
                        tracing::debug!(
                            from,
                            state = ?n.state,
                            leader = n.leader,
                            zxid = format_args!("{:#x}", n.zxid),
                            round = n.election_epoch,
                            peer_epoch = n.peer_epoch,
                            "notification"
                        );
                        self.election.receive(from, &n, now_ms, &mut actions)
                    }
                    Received::Reachable(sid, up) => {
                        tracing::debug!(sid, up, "election peer reachability");
                        self.election.peer_reachable(sid, up, now_ms, &mut actions)
                    }
                },
                _ = sleep_until(deadline) => self.election.tick(self.now_ms(), &mut actions),
            }
            self.carry_out(&mut actions);
            if let Some(done) = restarted {
                // After `carry_out`, so the caller already sees the new round's status.
                let _ = done.send(());
            }
            if *self.shutdown.borrow() {
                break;
            }
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Carries out the election's actions, emptying `actions`.
    fn carry_out(&mut self, actions: &mut Vec<ElectionAction>) {
        // O(voters): checked in every build; a broken rule is a bug, so the server stops.
        if let Err(e) = self.election.check_invariants() {
            panic!("election invariant: {e}");
        }
        let mut decided = None;
        for action in actions.drain(..) {
            match action {
                ElectionAction::Send { to, notification } => self.send(to, frame_message(&notification.encode())),
                ElectionAction::Elected(elected) => {
                    tracing::info!(
                        my_id = self.election.my_id(),
                        leader = elected.leader,
                        state = ?elected.state,
                        epoch = elected.epoch,
                        zxid = format_args!("{:#x}", elected.zxid),
                        round = elected.election_epoch,
                        "election decided"
                    );
                    decided = Some(elected);
                }
            }
        }
        let next = match (decided, self.election.state()) {
            (Some(elected), _) => ElectionStatus::Decided(elected),
            (None, ServerState::Looking) => ElectionStatus::Looking { round: self.election.logical_clock() },
            // Still decided: answering LOOKING peers does not change the outcome.
            (None, _) => return,
        };
        self.status.send_if_modified(|current| {
            let changed = *current != next;
            *current = next;
            changed
        });
    }

    fn send(&self, to: Sid, frame: Vec<u8>) {
        let Some(peer) = self.peers.get(to) else {
            return tracing::warn!(to, "election wants to send to a server that is not configured");
        };
        peer.queue.put(frame.into());
        // A full event queue already holds a wake-up for this link.
        let _ = peer.link.try_send(LinkEvent::Wanted);
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
