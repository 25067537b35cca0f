//! Scripted Fast Leader Election scenarios: small ensembles on an instant, lossless network, or one
//! machine driven message by message, asserting the decisions and the exact answers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use warden_quorum::{
    Elected, ElectionAction, FastLeaderElection, Notification, QuorumConfig, ServerState, Sid, FINALIZE_WAIT_MS,
    MAX_NOTIFICATION_INTERVAL_MS,
};

/// Servers on an instant network; `down` servers neither send nor receive.
struct Cluster {
    nodes: BTreeMap<Sid, FastLeaderElection>,
    elected: BTreeMap<Sid, Elected>,
    queue: VecDeque<(Sid, Sid, Notification)>,
    down: BTreeSet<Sid>,
    now_ms: u64,
}

impl Cluster {
    fn new(config: &QuorumConfig) -> Self {
        let ids = config.voters.iter().chain(&config.observers);
        let nodes = ids.map(|&id| (id, FastLeaderElection::new(id, config.clone()))).collect();
        Self { nodes, elected: BTreeMap::new(), queue: VecDeque::new(), down: BTreeSet::new(), now_ms: 0 }
    }

    fn start(&mut self, id: Sid, zxid: i64, epoch: i64) {
        let actions = acts(|o| self.nodes.get_mut(&id).unwrap().start(self.now_ms, zxid, epoch, o));
        self.elected.remove(&id);
        self.apply(id, actions);
    }

    fn apply(&mut self, from: Sid, actions: Vec<ElectionAction>) {
        self.nodes[&from].check_invariants().unwrap();
        for a in actions {
            match a {
                ElectionAction::Send { to, notification } => self.queue.push_back((from, to, notification)),
                ElectionAction::Elected(e) => assert!(self.elected.insert(from, e).is_none(), "decided twice"),
            }
        }
    }

    /// Delivers until no message is in flight.
    fn deliver_all(&mut self) {
        let mut budget = 100_000;
        while let Some((from, to, n)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "message storm");
            if self.down.contains(&from) || self.down.contains(&to) {
                continue;
            }
            let actions = acts(|o| self.nodes.get_mut(&to).unwrap().receive(from, &n, self.now_ms, o));
            self.apply(to, actions);
        }
    }

    /// Advances time in 50 ms steps, ticking every machine and delivering everything.
    fn run_for(&mut self, ms: u64) {
        self.deliver_all();
        let end = self.now_ms + ms;
        while self.now_ms < end {
            self.now_ms += 50;
            let ids: Vec<Sid> = self.nodes.keys().copied().filter(|id| !self.down.contains(id)).collect();
            for id in ids {
                let actions = acts(|o| self.nodes.get_mut(&id).unwrap().tick(self.now_ms, o));
                self.apply(id, actions);
            }
            self.deliver_all();
        }
    }

    fn role(&self, id: Sid) -> Option<(ServerState, Sid)> {
        self.elected.get(&id).map(|e| (e.state, e.leader))
    }
}

fn three() -> QuorumConfig {
    QuorumConfig::new([1, 2, 3], [])
}

fn five_and_observer() -> QuorumConfig {
    QuorumConfig::new([1, 2, 3, 4, 5], [9])
}

fn looking(leader: Sid, zxid: i64, election_epoch: i64, peer_epoch: i64) -> Notification {
    Notification {
        state: ServerState::Looking,
        leader,
        zxid,
        election_epoch,
        peer_epoch,
        version: 2,
        config: Vec::new(),
    }
}

fn sends(actions: &[ElectionAction]) -> Vec<(Sid, Notification)> {
    actions
        .iter()
        .filter_map(|a| match a {
            ElectionAction::Send { to, notification } => Some((*to, notification.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn equal_zxids_highest_sid_wins() {
    let mut c = Cluster::new(&three());
    for id in [1, 2, 3] {
        c.start(id, 0x1_0000_0005, 1);
    }
    c.deliver_all();
    // Every voter's vote agrees once all notifications are in: early finalize decides without
    // waiting finalizeWait (no tick has run).
    assert_eq!(c.now_ms, 0);
    assert_eq!(c.role(3), Some((ServerState::Leading, 3)));
    assert_eq!(c.role(1), Some((ServerState::Following, 3)));
    assert_eq!(c.role(2), Some((ServerState::Following, 3)));
    assert_eq!(c.elected[&1].zxid, 0x1_0000_0005);
    assert_eq!(c.elected[&1].election_epoch, 1);
}

#[test]
fn five_voters_and_an_observer() {
    let mut c = Cluster::new(&five_and_observer());
    for id in [1, 2, 3, 4, 5, 9] {
        c.start(id, if id == 9 { 1000 } else { 7 }, 1);
    }
    c.run_for(1_000);
    for id in [1, 2, 3, 4] {
        assert_eq!(c.role(id), Some((ServerState::Following, 5)), "{id}");
    }
    assert_eq!(c.role(5), Some((ServerState::Leading, 5)));
    assert_eq!(c.role(9), Some((ServerState::Observing, 5)), "the observer's zxid does not make it win");
}

#[test]
fn higher_zxid_beats_higher_sid() {
    let mut c = Cluster::new(&three());
    c.start(1, 10, 1);
    c.start(2, 5, 1);
    c.start(3, 5, 1);
    c.run_for(500);
    assert_eq!(c.role(1), Some((ServerState::Leading, 1)));
    assert_eq!(c.role(3), Some((ServerState::Following, 1)));
}

#[test]
fn higher_epoch_beats_higher_zxid() {
    let mut c = Cluster::new(&three());
    c.start(1, 0x2_0000_0009, 2);
    c.start(2, 0x3_0000_0001, 3);
    c.start(3, 0x2_0000_00ff, 2);
    c.run_for(500);
    assert_eq!(c.role(2), Some((ServerState::Leading, 2)));
    assert_eq!(c.elected[&1].epoch, 3);
}

#[test]
fn a_better_vote_during_finalize_wait_reopens_the_round() {
    let mut m = FastLeaderElection::new(1, three());
    acts(|o| m.start(0, 5, 1, o));
    let out = acts(|o| m.receive(2, &looking(2, 5, 1, 1), 10, o));
    assert_eq!(sends(&out).len(), 2, "adopts 2 and re-broadcasts");
    assert_eq!(m.next_deadline_ms(), Some(10 + FINALIZE_WAIT_MS), "quorum {{1, 2}} holds 2: finalizeWait");
    // A worse vote restarts the wait and is not counted; its sender is told our vote.
    assert_eq!(sends(&acts(|o| m.receive(3, &looking(1, 5, 1, 1), 100, o))), [(3, looking(2, 5, 1, 1))]);
    assert_eq!(m.next_deadline_ms(), Some(100 + FINALIZE_WAIT_MS));
    let out = acts(|o| m.receive(3, &looking(3, 5, 1, 1), 150, o));
    assert_eq!(m.proposal().sid, 3);
    assert_eq!(sends(&out).iter().map(|(to, n)| (*to, n.leader)).collect::<Vec<_>>(), [(2, 3), (3, 3)]);
    assert!(acts(|o| m.tick(349, o)).is_empty());
    let out = acts(|o| m.tick(350, o));
    assert_eq!(out.len(), 1);
    assert_eq!(m.state(), ServerState::Following);
    assert_eq!(m.current_vote().unwrap().leader, 3);
    m.check_invariants().unwrap();
}

#[test]
fn a_newer_round_resets_the_clock_and_the_votes() {
    let mut m = FastLeaderElection::new(3, five_and_observer());
    acts(|o| m.start(0, 50, 1, o));
    acts(|o| m.receive(4, &looking(4, 50, 1, 1), 1, o));
    acts(|o| m.receive(5, &looking(5, 50, 1, 1), 2, o));
    assert_eq!(m.proposal().sid, 5);
    // Round 4 proposes 1, which is worse than our own vote: we return to voting for ourselves.
    let out = acts(|o| m.receive(1, &looking(1, 10, 4, 1), 3, o));
    assert_eq!(m.logical_clock(), 4);
    assert_eq!(m.proposal().sid, 3);
    let s = sends(&out);
    assert_eq!(s.len(), 4);
    assert!(s.iter().all(|(_, n)| n.leader == 3 && n.election_epoch == 4 && n.zxid == 50));
    // Round-1 votes were cleared: 5's old vote does not count towards a quorum for 5 in round 4.
    acts(|o| m.receive(4, &looking(5, 50, 4, 1), 4, o));
    assert_eq!(m.proposal().sid, 5);
    assert_eq!(m.next_deadline_ms(), Some(4 + 200), "no finalizeWait: only 3 and 4 hold 5 in round 4");
    acts(|o| m.receive(2, &looking(5, 50, 4, 1), 5, o));
    assert_eq!(m.next_deadline_ms(), Some(5 + FINALIZE_WAIT_MS), "2, 3, 4 hold 5: finalizeWait");
    m.check_invariants().unwrap();
}

#[test]
fn an_older_round_is_ignored_but_answered() {
    let mut m = FastLeaderElection::new(1, three());
    acts(|o| m.start(0, 5, 1, o));
    acts(|o| m.start(10, 5, 1, o));
    acts(|o| m.start(20, 5, 1, o));
    assert_eq!(m.logical_clock(), 3);
    let out = acts(|o| m.receive(3, &looking(3, 99, 1, 1), 30, o));
    assert_eq!(m.proposal().sid, 1, "the better vote of an older round is not adopted");
    let s = sends(&out);
    assert_eq!(s, [(3, looking(1, 5, 3, 1))]);
    // Older FOLLOWING/LEADING notifications are not answered.
    let mut leading = looking(3, 99, 1, 1);
    leading.state = ServerState::Leading;
    assert!(acts(|o| m.receive(3, &leading, 31, o)).is_empty());
}

/// A voter answers a non-voter at once and does not count its vote, so an observer must not
/// answer voters: an observer in a newer round (or with a better proposal) answering a voter of
/// an older round would get the voter's answer back, and so on without end.
#[test]
fn an_observer_and_a_voter_in_different_rounds_do_not_answer_each_other_forever() {
    let mut voter = FastLeaderElection::new(2, five_and_observer());
    acts(|o| voter.start(0, 5, 1, o));
    let mut observer = FastLeaderElection::new(9, five_and_observer());
    for t in 0..3 {
        acts(|o| observer.start(t, 7, 1, o));
    }
    assert!(observer.logical_clock() > voter.logical_clock());
    // The voter's round-1 vote reaches the observer (round 3): no answer.
    let from_voter = looking(2, 5, 1, 1);
    assert!(sends(&acts(|o| observer.receive(2, &from_voter, 10, o))).is_empty(), "the observer answered a voter");
    // The observer's notification reaches the voter: answered with the voter's vote, once.
    let from_observer = sends(&acts(|o| observer.start(11, 7, 1, o)));
    let to_voter = from_observer.iter().find(|(to, _)| *to == 2).map(|(_, n)| n.clone()).expect("sent to 2");
    let answer = sends(&acts(|o| voter.receive(9, &to_voter, 12, o)));
    assert_eq!(answer.len(), 1);
    // ... which the observer does not answer again.
    assert!(sends(&acts(|o| observer.receive(2, &answer[0].1, 13, o))).is_empty(), "the exchange goes on");
    // Nor does an observer that has decided (OBSERVING) answer a LOOKING voter.
    let mut c = Cluster::new(&five_and_observer());
    for id in [1, 2, 3, 4, 5, 9] {
        c.start(id, 7, 1);
    }
    c.run_for(1_000);
    assert_eq!(c.role(9), Some((ServerState::Observing, 5)));
    let from_looking_voter = looking(2, 5, 99, 1);
    let out = acts(|o| c.nodes.get_mut(&9).unwrap().receive(2, &from_looking_voter, c.now_ms, o));
    assert!(sends(&out).is_empty(), "the decided observer answered a LOOKING voter");
    voter.check_invariants().unwrap();
    observer.check_invariants().unwrap();
}

#[test]
fn a_restarted_server_joins_the_established_leader_without_a_new_round() {
    for rounds_before in [1, 3] {
        let mut c = Cluster::new(&three());
        for _ in 0..rounds_before {
            for id in [1, 2, 3] {
                c.start(id, 0x1_0000_0010, 1);
            }
            c.run_for(500);
        }
        assert_eq!(c.role(3), Some((ServerState::Leading, 3)));
        let clocks: Vec<i64> = [2, 3].iter().map(|id| c.nodes[id].logical_clock()).collect();
        // Server 1 restarts with an empty process (logical clock 0) and an older history.
        c.nodes.insert(1, FastLeaderElection::new(1, three()));
        c.start(1, 0x1_0000_0002, 1);
        c.deliver_all();
        assert_eq!(c.role(1), Some((ServerState::Following, 3)), "joins at once, no finalizeWait");
        assert_eq!(c.nodes[&1].logical_clock(), rounds_before, "adopts the leader's round");
        let after: Vec<i64> = [2, 3].iter().map(|id| c.nodes[id].logical_clock()).collect();
        assert_eq!(clocks, after, "no new round");
        assert_eq!(c.nodes[&3].state(), ServerState::Leading);
    }
}

#[test]
fn a_decided_server_answers_looking_voters_only() {
    let mut c = Cluster::new(&three());
    for id in [1, 2, 3] {
        c.start(id, 8, 1);
    }
    c.run_for(500);
    let m = c.nodes.get_mut(&2).unwrap();
    let out = acts(|o| m.receive(1, &looking(1, 8, 7, 1), 600, o));
    let mut want = looking(3, 8, 1, 1);
    want.state = ServerState::Following;
    assert_eq!(sends(&out), [(1, want)]);
    let mut following = looking(3, 8, 1, 1);
    following.state = ServerState::Following;
    assert!(acts(|o| m.receive(1, &following, 601, o)).is_empty());
    // A LOOKING non-voter is answered; a decided one is not (ZooKeeper answers every
    // non-voter: two servers that each take the other for a non-voter, as two configurations
    // can, would answer each other forever).
    assert_eq!(sends(&acts(|o| m.receive(42, &looking(1, 8, 7, 1), 602, o))).len(), 1);
    assert!(acts(|o| m.receive(42, &following, 603, o)).is_empty());
}

#[test]
fn a_minority_never_elects() {
    let mut c = Cluster::new(&five_and_observer());
    c.down.extend([3, 4, 5]);
    for id in [1, 2, 9] {
        c.start(id, 1, 1);
    }
    c.run_for(5 * 60_000);
    assert!(c.elected.is_empty());
    // Healing lets the whole ensemble decide.
    c.down.clear();
    for id in [3, 4, 5] {
        c.start(id, 1, 1);
    }
    c.run_for(MAX_NOTIFICATION_INTERVAL_MS + 1_000);
    assert_eq!(c.elected.len(), 6);
    assert!(c.elected.values().all(|e| e.leader == 5));
}

#[test]
fn resends_back_off_from_200_ms_to_60_s() {
    let mut m = FastLeaderElection::new(1, three());
    acts(|o| m.start(0, 1, 1, o));
    let mut times = Vec::new();
    let mut now = 0;
    while now < 400_000 {
        now += 1;
        if !acts(|o| m.tick(now, o)).is_empty() {
            times.push(now);
        }
    }
    assert_eq!(&times[..5], [200, 600, 1_400, 3_000, 6_200]);
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(*gaps.last().unwrap(), MAX_NOTIFICATION_INTERVAL_MS);
    assert!(gaps.iter().all(|g| *g <= MAX_NOTIFICATION_INTERVAL_MS));
}

#[test]
fn a_server_without_history_does_not_take_part() {
    let mut c = Cluster::new(&three());
    c.start(1, -1, 0);
    c.start(2, 4, 1);
    c.start(3, 4, 1);
    c.run_for(500);
    assert_eq!(c.role(3), Some((ServerState::Leading, 3)));
    assert_eq!(c.role(2), Some((ServerState::Following, 3)));
    assert_eq!(c.role(1), Some((ServerState::Following, 3)), "joins through FOLLOWING/LEADING answers");
}

#[test]
fn early_finalize_when_every_reachable_voter_agrees() {
    // Server 3 (the old leader) is gone: its election connection ended.
    let mut m = FastLeaderElection::new(1, three());
    assert!(acts(|o| m.peer_reachable(3, false, 0, o)).is_empty());
    acts(|o| m.start(0, 5, 1, o));
    let out = acts(|o| m.receive(2, &looking(2, 5, 1, 1), 10, o));
    let elected: Vec<_> = out.iter().filter(|a| matches!(a, ElectionAction::Elected(_))).collect();
    assert_eq!(elected.len(), 1, "{{1, 2}} hold 2 and 3 is unreachable: decided at once");
    assert_eq!(m.state(), ServerState::Following);
    assert_eq!(m.current_vote().unwrap().leader, 2);
    m.check_invariants().unwrap();
}

#[test]
fn an_unreachable_report_during_finalize_wait_decides_at_once() {
    let mut m = FastLeaderElection::new(1, three());
    acts(|o| m.start(0, 5, 1, o));
    acts(|o| m.receive(2, &looking(2, 5, 1, 1), 10, o));
    assert_eq!(m.next_deadline_ms(), Some(10 + FINALIZE_WAIT_MS), "3 has not voted: finalizeWait");
    let out = acts(|o| m.peer_reachable(3, false, 20, o));
    assert!(matches!(out.as_slice(), [ElectionAction::Elected(e)] if e.leader == 2));
    assert_eq!(m.state(), ServerState::Following);
}

#[test]
fn a_reachable_voter_that_has_not_voted_keeps_finalize_wait() {
    let mut m = FastLeaderElection::new(1, three());
    acts(|o| m.peer_reachable(3, false, 0, o));
    acts(|o| m.peer_reachable(3, true, 1, o));
    acts(|o| m.start(2, 5, 1, o));
    acts(|o| m.receive(2, &looking(2, 5, 1, 1), 10, o));
    assert_eq!(m.state(), ServerState::Looking, "3 is reachable again and has not voted");
    assert!(acts(|o| m.tick(10 + FINALIZE_WAIT_MS - 1, o)).is_empty());
    assert_eq!(acts(|o| m.tick(10 + FINALIZE_WAIT_MS, o)).len(), 1, "finalizeWait still decides");
    assert_eq!(m.state(), ServerState::Following);
}

#[test]
fn an_agreeing_vote_during_finalize_wait_is_counted_for_early_finalize() {
    let mut m = FastLeaderElection::new(1, three());
    acts(|o| m.start(0, 5, 1, o));
    acts(|o| m.receive(2, &looking(2, 5, 1, 1), 10, o));
    assert_eq!(m.state(), ServerState::Looking);
    // 3 now agrees (its vote for 2 is not better than ours, ZooKeeper would drop it).
    let out = acts(|o| m.receive(3, &looking(2, 5, 1, 1), 20, o));
    assert!(matches!(out.as_slice(), [ElectionAction::Elected(e)] if e.leader == 2));
}

#[test]
fn a_disagreeing_reachable_voter_blocks_early_finalize() {
    let mut m = FastLeaderElection::new(3, QuorumConfig::new([1, 2, 3, 4, 5], []));
    acts(|o| m.start(0, 9, 1, o));
    acts(|o| m.receive(4, &looking(3, 9, 1, 1), 1, o));
    acts(|o| m.receive(5, &looking(3, 9, 1, 1), 2, o));
    assert_eq!(m.next_deadline_ms(), Some(2 + FINALIZE_WAIT_MS), "{{3, 4, 5}} hold 3: finalizeWait");
    acts(|o| m.peer_reachable(1, false, 3, o));
    // 2 is reachable and still votes for itself (a worse vote): restarts the wait, blocks.
    assert_eq!(sends(&acts(|o| m.receive(2, &looking(2, 9, 1, 1), 4, o))), [(2, looking(3, 9, 1, 1))]);
    assert_eq!(m.state(), ServerState::Looking);
    assert_eq!(m.next_deadline_ms(), Some(4 + FINALIZE_WAIT_MS));
    // Once 2 is also unreachable, the reachable voters {3, 4, 5} all agree.
    let out = acts(|o| m.peer_reachable(2, false, 5, o));
    assert!(matches!(out.as_slice(), [ElectionAction::Elected(e)] if e.leader == 3));
    assert_eq!(m.state(), ServerState::Leading);
}

#[test]
fn early_finalize_never_decides_without_a_quorum() {
    let mut m = FastLeaderElection::new(1, three());
    acts(|o| m.peer_reachable(2, false, 0, o));
    acts(|o| m.peer_reachable(3, false, 0, o));
    let mut decided = !acts(|o| m.start(0, 5, 1, o)).iter().all(|a| matches!(a, ElectionAction::Send { .. }));
    for now in (50..120_000).step_by(50) {
        decided |= acts(|o| m.tick(now, o)).iter().any(|a| matches!(a, ElectionAction::Elected(_)));
    }
    assert!(!decided, "every other voter unreachable: our own vote is no quorum");
    assert_eq!(m.state(), ServerState::Looking);
}

#[test]
fn survivors_of_a_dead_leader_elect_without_finalize_wait() {
    let mut c = Cluster::new(&three());
    for id in [1, 2, 3] {
        c.start(id, 0x1_0000_0010, 1);
    }
    c.deliver_all();
    assert_eq!(c.role(3), Some((ServerState::Leading, 3)));
    // 3 dies; 1 and 2 see its election connections end, then start a new round.
    c.down.insert(3);
    for id in [1, 2] {
        let actions = acts(|o| c.nodes.get_mut(&id).unwrap().peer_reachable(3, false, c.now_ms, o));
        c.apply(id, actions);
    }
    for id in [1, 2] {
        c.start(id, 0x1_0000_0012, 1);
    }
    c.deliver_all();
    assert_eq!(c.role(2), Some((ServerState::Leading, 2)), "decided without a tick");
    assert_eq!(c.role(1), Some((ServerState::Following, 2)));
}

#[test]
fn a_worse_vote_of_our_round_is_answered_with_ours() {
    // Server 3 started round 2 voting for itself; server 1 was still FOLLOWING then and starts
    // round 2 later, voting for itself.
    let mut m = FastLeaderElection::new(3, three());
    acts(|o| m.start(0, 9, 1, o));
    acts(|o| m.start(1, 9, 1, o));
    let out = acts(|o| m.receive(1, &looking(1, 9, 2, 1), 5, o));
    assert_eq!(sends(&out), [(1, looking(3, 9, 2, 1))]);
    // An equal vote is not answered.
    assert!(acts(|o| m.receive(2, &looking(3, 9, 2, 1), 6, o))
        .iter()
        .all(|a| !matches!(a, ElectionAction::Send { .. })));
}

#[test]
fn a_vote_answered_while_following_is_recovered_without_a_resend() {
    // 1 and 2 follow 3; 3 dies. 2 starts round 2 first; 1 is still FOLLOWING when 2's vote arrives
    // (it answers with its old vote and forgets it), then starts round 2 voting for itself.
    let mut c = Cluster::new(&three());
    for id in [1, 2, 3] {
        c.start(id, 0x1_0000_0010, 1);
    }
    c.deliver_all();
    assert_eq!(c.role(1), Some((ServerState::Following, 3)));
    c.down.insert(3);
    for id in [1, 2] {
        let actions = acts(|o| c.nodes.get_mut(&id).unwrap().peer_reachable(3, false, c.now_ms, o));
        c.apply(id, actions);
    }
    c.start(2, 0x1_0000_0012, 1);
    c.deliver_all();
    assert_eq!(c.nodes[&1].state(), ServerState::Following);
    c.start(1, 0x1_0000_0012, 1);
    c.deliver_all();
    assert_eq!(c.now_ms, 0, "no resend timeout needed");
    assert_eq!(c.role(2), Some((ServerState::Leading, 2)));
    assert_eq!(c.role(1), Some((ServerState::Following, 2)));
}

/// Found by the simulator (regression seed 0x3197dcdf0f023e6b): a leader and a follower that
/// decided in different rounds (the follower joined the leader's later epoch without a new round)
/// answer a restarted LOOKING server with the epochs of their old votes; they disagree, so the
/// newcomer never counts a quorum behind the leader. Once the shell reports the settled epoch
/// (`update_peer_epoch`, ZooKeeper's `updateElectionVote`), their answers agree and it joins.
#[test]
fn a_newcomer_joins_a_leader_once_its_servers_report_the_settled_epoch() {
    let config = QuorumConfig::new([1, 2, 3], []);
    let answer =
        |e: &mut FastLeaderElection, newcomer: &Notification| match acts(|o| e.receive(2, newcomer, 0, o)).as_slice() {
            [ElectionAction::Send { to: 2, notification }] => notification.clone(),
            other => panic!("{other:?}"),
        };
    let decide = |id: Sid, round: i64, epoch: i64| {
        // A server that decided for leader 3 in `round`, with 3's vote at `epoch`.
        let mut e = FastLeaderElection::new(id, config.clone());
        acts(|o| e.start(0, 10, epoch, o));
        for peer in [1, 3].into_iter().filter(|p| *p != id) {
            let n = Notification {
                state: ServerState::Looking,
                leader: 3,
                zxid: 10,
                election_epoch: round,
                peer_epoch: epoch,
                version: 2,
                config: Vec::new(),
            };
            acts(|o| e.receive(peer, &n, 0, o));
        }
        acts(|o| e.tick(FINALIZE_WAIT_MS, o));
        assert_ne!(e.state(), ServerState::Looking);
        e
    };
    let run = |update: bool| {
        let mut leader = decide(3, 3, 2);
        let mut follower = decide(1, 2, 1);
        if update {
            leader.update_peer_epoch(3);
            follower.update_peer_epoch(3);
        }
        let mut newcomer = FastLeaderElection::new(2, config.clone());
        let hello = match acts(|o| newcomer.start(0, 5, 3, o)).first() {
            Some(ElectionAction::Send { notification, .. }) => notification.clone(),
            other => panic!("{other:?}"),
        };
        let from_leader = answer(&mut leader, &hello);
        let from_follower = answer(&mut follower, &hello);
        let mut out = acts(|o| newcomer.receive(3, &from_leader, 0, o));
        out.extend(acts(|o| newcomer.receive(1, &from_follower, 0, o)));
        out.into_iter().find_map(|a| match a {
            ElectionAction::Elected(e) => Some(e),
            ElectionAction::Send { .. } => None,
        })
    };
    assert_eq!(run(false), None, "answers from different epochs do not make a quorum");
    let joined = run(true).expect("joins once both answer with the settled epoch");
    assert_eq!((joined.leader, joined.state), (3, ServerState::Following));
}

/// Leader 4's reconfig removed it and its commit designated server 3: the election of every
/// server that got the commit takes 3 as decided without a round (3 leads, the others follow,
/// 4 without a vote), and server 1, which missed the commit and is LOOKING in the new
/// configuration, joins 3 from the answers of the servers that handed over.
#[test]
fn a_hand_over_decides_the_designated_leader_without_a_round() {
    let mut c = Cluster::new(&QuorumConfig::new([1, 2, 3, 4], []));
    for id in 1..=4 {
        c.start(id, 0x1_0000_0005, 1);
    }
    c.run_for(FINALIZE_WAIT_MS * 2);
    assert!(
        (1..=4).all(|id| c.role(id) == Some((if id == 4 { ServerState::Leading } else { ServerState::Following }, 4)))
    );
    let new_config = QuorumConfig::new([1, 2, 3], []);
    let reconfig_zxid = 0x1_0000_0009;
    let text = format!("server.1=a:1:2\nversion={reconfig_zxid:x}").into_bytes();
    for id in [2, 3, 4] {
        let e = c.nodes.get_mut(&id).unwrap();
        let out = acts(|o| e.reconfigure(new_config.clone(), text.clone(), 0, o));
        assert!(out.is_empty(), "a decided server only takes the configuration: {out:?}");
        let out = acts(|o| e.hand_over(3, reconfig_zxid, o));
        c.elected.remove(&id);
        assert!(matches!(out.as_slice(), [ElectionAction::Elected(_)]), "no round: {out:?}");
        c.apply(id, out);
    }
    assert_eq!(c.role(3), Some((ServerState::Leading, 3)));
    assert_eq!(c.role(2), Some((ServerState::Following, 3)));
    assert_eq!(c.role(4), Some((ServerState::Following, 3)), "the removed leader follows without a vote");
    assert_eq!((c.elected[&2].zxid, c.elected[&2].epoch), (reconfig_zxid, 1), "the reconfig's zxid and epoch");

    let e1 = c.nodes.get_mut(&1).unwrap();
    acts(|o| e1.reconfigure(new_config.clone(), text.clone(), 0, o));
    c.start(1, 0x1_0000_0008, 1);
    c.run_for(FINALIZE_WAIT_MS);
    assert_eq!(c.role(1), Some((ServerState::Following, 3)), "joins the designated leader");
}

/// What one call of a machine pushed into its caller's buffer.
fn acts<A>(call: impl FnOnce(&mut Vec<A>)) -> Vec<A> {
    let mut out = Vec::new();
    call(&mut out);
    out
}
