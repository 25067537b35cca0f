//! Role changes: becoming leader or learner, and losing the role (the node then goes LOOKING).

use super::*;

impl Node {
    /// Closes every client connection, forgets what they waited for, and applies the whole log.
    pub(super) fn reset_for_role(&mut self, out: &mut Vec<Output>) {
        self.close_all_connections(out);
        self.forget_local_sessions();
        self.prep.clear();
        self.expiring.clear();
        self.expiry_zxid = 0;
        let applied = self.tree.last_processed_zxid();
        let q = self.ensemble_mut();
        q.origins.clear();
        q.awaiting.clear();
        // A NEWLEADER whose UPTODATE never came: its configuration is kept as the last-seen one
        // (ZooKeeper's learner writes it as such at NEWLEADER), so that, should this server
        // lead, it finishes it rather than leading under an older configuration (below).
        let newleader_config = q.newleader_config.take();
        q.syncs.clear();
        q.barriers.reset();
        q.revalidating.clear();
        q.touched.clear();
        let pending: Vec<TxnEntry> = q.log.iter().filter(|e| e.zxid() > applied).cloned().collect();
        // The log is this server's history: a new role starts from all of it, as ZooKeeper
        // reloads its database (the new leader's sync confirms or truncates it). A reconfig
        // among these txns was never seen committed: its configuration does not become active
        // (a leader finishes it, `LeaderInit::pending_config`).
        self.ensemble_mut().replaying_log = true;
        for e in pending {
            self.apply(e.hdr, &e.txn, Origin::Internal, out);
        }
        self.ensemble_mut().replaying_log = false;
        // Only a reconfig's configuration, whose version is its txn's zxid: a first leader's
        // version for the servers in use (ZOOKEEPER-1783) is its NEWLEADER zxid, counter 0, and
        // no txn a later leader could finish.
        self.saw_config(newleader_config.filter(|m| counter_of(m.version) != 0));
    }

    /// Stops the current machine without asking for an election.
    pub(super) fn stop_machine(&mut self) {
        let now_ms = self.now.mono_ms;
        let q = self.ensemble_mut();
        if let Machine::Leader(l) = &mut q.machine {
            // Its GoLooking is the reason we are here; nothing to carry out.
            l.step_down("role change", &mut Vec::new());
        }
        let was_looking = matches!(q.machine, Machine::Looking);
        q.machine = Machine::Looking;
        q.looking_since_ms = now_ms;
        if !was_looking {
            self.counters.looking_count += 1;
        }
    }

    pub(super) fn leave_role(&mut self, out: &mut Vec<Output>) {
        self.stop_machine();
        self.reset_for_role(out);
    }

    /// The machine gave up its role: go LOOKING and ask for an election.
    pub(super) fn lose_role(&mut self, reason: String, out: &mut Vec<Output>) {
        self.leave_for_election(reason, false, out);
    }

    /// As `lose_role`; with `flush`, what the leader sent reaches its learners first
    /// (`QuorumOutput::Elect`).
    pub(super) fn leave_for_election(&mut self, reason: String, flush: bool, out: &mut Vec<Output>) {
        tracing::info!(%reason, "leaving the quorum role");
        self.leave_role(out);
        out.push(Output::Quorum(QuorumOutput::Elect { reason, flush }));
    }

    /// A reconfig's commit designated `leader` for the configuration of version `zxid`: leave
    /// this role and take that leader without an election.
    pub(super) fn hand_over(&mut self, leader: Sid, zxid: Zxid, out: &mut Vec<Output>) {
        tracing::info!(leader, version = format_args!("{zxid:x}"), "leaving the quorum role for the designated leader");
        self.leave_role(out);
        out.push(Output::Quorum(QuorumOutput::HandOver { leader, zxid }));
    }

    /// `election_time`: from going LOOKING to the role the election gave (and where
    /// `unavailable_time` starts).
    fn election_done(&mut self) {
        let now_ms = self.now.mono_ms;
        let q = self.ensemble_mut();
        if matches!(q.machine, Machine::Looking) {
            q.unavailable_since_ms = q.looking_since_ms;
            let took = now_ms.saturating_sub(q.looking_since_ms);
            self.summaries.election_time.record(took);
        }
    }

    pub(super) fn become_leader(&mut self, out: &mut Vec<Output>) {
        self.election_done();
        self.leave_role(out);
        let tick_ms = u64::from(self.cfg.tick_time_ms);
        let now_ms = self.now.mono_ms;
        let reconfig_enabled = self.cfg.reconfig_enabled;
        let q = self.ensemble_mut();
        // A reconfig in this server's history above the active configuration, never seen
        // committed: the leader finishes it (its version is its txn's zxid).
        let pending_config = q.last_seen.clone().map(|m| (m.version, m));
        let mut cfg = LeaderConfig::new(q.setup.my_sid, q.setup.voters.iter().copied());
        cfg.tick_ms = tick_ms;
        cfg.init_limit = q.setup.init_limit;
        cfg.sync_limit = q.setup.sync_limit;
        cfg.max_committed_log = q.setup.max_committed_log;
        cfg.snapshot_size_factor = q.setup.snapshot_size_factor;
        cfg.max_counter = q.setup.max_counter;
        // NEWLEADER carries the last configuration seen, as ZooKeeper's.
        let last_seen = pending_config.as_ref().map_or(&q.setup.membership, |(_, m)| m);
        cfg.membership = Some(last_seen.clone()).filter(|m| !m.servers.is_empty());
        cfg.reconfig_enabled = reconfig_enabled;
        let init = LeaderInit {
            accepted_epoch: q.accepted_epoch,
            current_epoch: q.current_epoch,
            last_zxid: q.last_logged(),
            history_base: q.log_base,
            history: q.log.iter().cloned().collect(),
            pending_config,
        };
        // The leader owns expiry now: every session gets a fresh deadline, as ZooKeeper's new
        // leader does when it builds its session tracker.
        let sessions: Vec<(i64, u32)> = self.sessions.iter().map(|s| (s.id, s.timeout_ms)).collect();
        for (id, timeout_ms) in sessions {
            self.sessions.add(id, timeout_ms, now_ms);
        }
        let mut failed = None;
        self.drive(out, |q, a| match Leader::new(cfg, init, now_ms, a) {
            Ok(leader) => q.machine = Machine::Leader(Box::new(leader)),
            Err(e) => failed = Some(e),
        });
        if let Some(e) = failed {
            tracing::error!(error = %e, "cannot lead");
            out.push(Output::Quorum(QuorumOutput::Elect { reason: format!("cannot lead: {e}"), flush: false }));
        }
    }

    pub(super) fn become_learner(&mut self, leader: Sid, role: LearnerRole, out: &mut Vec<Output>) {
        self.election_done();
        self.leave_role(out);
        let tick_ms = u64::from(self.cfg.tick_time_ms);
        let now_ms = self.now.mono_ms;
        let q = self.ensemble_mut();
        q.learning_since_ms = now_ms;
        let mut cfg = LearnerConfig::new(q.setup.my_sid, leader, role);
        cfg.tick_ms = tick_ms;
        cfg.init_limit = q.setup.init_limit;
        cfg.sync_limit = q.setup.sync_limit;
        let state =
            LocalState { accepted_epoch: q.accepted_epoch, current_epoch: q.current_epoch, last_zxid: q.last_logged() };
        self.drive(out, |q, a| q.machine = Machine::Learner(Box::new(Learner::new(cfg, state, now_ms, a))));
    }
}
