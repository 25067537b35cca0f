//! Dynamic reconfiguration (ZooKeeper's `reconfig`): the leader's checks of a request, in
//! ZooKeeper's order (`PrepRequestProcessor`, case reconfig); the configuration becoming active
//! on every server as the reconfig txn is applied; `/zookeeper/config` kept equal to the active
//! configuration's text; and the role change a new configuration forces.
//!
//! The configuration is part of the replicated history: a reconfig is a txn (type 16, a
//! SetDataTxn on `/zookeeper/config` whose data is the new configuration with the txn's zxid as
//! its version). The leader machine commits it only with a quorum of the old voters and one of
//! the new (`zab::leader`), and every server activates it when it applies it, so a server
//! restarted from its log or synced by DIFF or SNAP ends with the same configuration.
//!
//! After activation, as ZooKeeper's `processReconfig`: a leader that is no longer a voter hands
//! over to the voter its commit designated (COMMITANDACTIVATE and INFORMANDACTIVATE carry that
//! sid), and a learner whose leader is no longer a voter, or whose own kind changed (observer
//! made a voter, voter made an observer), goes straight to the designated leader in its new
//! role, with no election (`QuorumOutput::HandOver`). Without a designation (a configuration
//! taken from NEWLEADER, active from UPTODATE) such a learner goes back to election. A removed follower stays a
//! non-voting follower, as in ZooKeeper.

use warden_proto::request::ReconfigRequest;
use warden_proto::{perms, Id, Membership};
use warden_tree::acl::check_acl;
use warden_tree::tree::CONFIG_NODE;

use super::*;

impl Node {
    /// The reconfig request's txn under `zxid`, or its error as ZooKeeper checks them (the first
    /// failing check wins; the ACL is checked last, so a client without rights still learns of
    /// a bad version or bad arguments first, as kazoo's tests expect).
    pub(crate) fn prep_reconfig(&self, auth: &[Id], zxid: Zxid, r: &ReconfigRequest) -> Txn {
        match self.reconfig_checked(auth, zxid, r) {
            Ok(next) => Txn::Reconfig {
                path: CONFIG_NODE.to_string(),
                data: Some(next.to_text().into_bytes().into()),
                version: -1,
            },
            Err(e) => {
                tracing::info!(error = ?e, "reconfig refused");
                Txn::Error { err: e.code() }
            }
        }
    }

    fn reconfig_checked(&self, auth: &[Id], zxid: Zxid, r: &ReconfigRequest) -> Result<Membership, ErrorCode> {
        if !self.cfg.reconfig_enabled {
            return Err(ErrorCode::ReconfigDisabled);
        }
        let (Some(leader), Some(q)) = (self.leader(), self.ensemble()) else { return Err(ErrorCode::Unimplemented) };
        if leader.reconfig_in_flight() {
            return Err(ErrorCode::ReconfigInProgress);
        }
        let current = leader.membership().unwrap_or(&q.setup.membership);
        if r.cur_config_id != -1 && r.cur_config_id != current.version {
            return Err(ErrorCode::BadVersion);
        }
        let next = match &r.new_members {
            Some(members) => Membership::from_new_members(members),
            None => current.incremental(r.joining.as_deref(), r.leaving.as_deref()),
        };
        let mut next = next.map_err(|e| {
            tracing::info!(error = %e, "reconfig: bad arguments");
            ErrorCode::BadArguments
        })?;
        next.version = zxid;
        let voters = warden_quorum::zab::voter_sids(&next);
        if voters.len() < if self.cfg.standalone_enabled { 2 } else { 1 } {
            return Err(ErrorCode::BadArguments);
        }
        if !leader.is_quorum_synced(&voters) {
            return Err(ErrorCode::NewConfigNoQuorum);
        }
        let acl = self.tree.node(CONFIG_NODE).map(|n| n.acl.clone()).unwrap_or_default();
        let allowed = self.cfg.skip_acl || check_acl(&acl, perms::WRITE, auth);
        if !allowed {
            return Err(ErrorCode::NoAuth);
        }
        Ok(next)
    }

    /// Writes the active configuration into `/zookeeper/config` without a txn, as ZooKeeper's
    /// `initConfigInZKDatabase` does at start-up and when a new leader sets the version.
    pub(crate) fn write_config_node(&mut self) {
        let Some(q) = self.ensemble() else { return };
        if q.setup.membership.servers.is_empty() {
            return;
        }
        let (text, version) = (q.setup.membership.to_text(), q.setup.membership.version);
        self.tree.set_config_data(text.into_bytes(), version);
    }

    /// After a start or a reload from storage. The configuration in use is the one last
    /// activated (the dynamic config file a reconfig-enabled server writes at each activation,
    /// which it boots from). A newer one in the recovered tree's `/zookeeper/config` came from
    /// the log and was never seen committed: it becomes the last-seen configuration and the tree
    /// keeps it. Otherwise the configuration in use is written into the node, as ZooKeeper's
    /// `initConfigInZKDatabase` does when it loads its database.
    pub(crate) fn restored_config(&mut self) {
        let Some(q) = self.ensemble_mut_if() else { return };
        q.last_seen = None;
        let stored = self.tree.node(CONFIG_NODE).and_then(|n| n.data.as_deref());
        let stored = stored.and_then(|d| std::str::from_utf8(d).ok()).and_then(|t| Membership::parse_text(t).ok());
        self.saw_config(stored);
        if self.ensemble().is_some_and(|q| q.last_seen.is_none()) {
            self.write_config_node();
        }
    }

    /// The ensemble state, if any (restore runs in both modes).
    fn ensemble_mut_if(&mut self) -> Option<&mut Quorum> {
        match &mut self.mode {
            Mode::Ensemble(q) => Some(q),
            Mode::Standalone { .. } => None,
        }
    }

    /// A configuration this server's history holds without it being known committed: kept as
    /// the last-seen one when newer than the active one.
    pub(super) fn saw_config(&mut self, m: Option<Membership>) {
        let Some(q) = self.ensemble_mut_if() else { return };
        if let Some(m) = m.filter(|m| !m.servers.is_empty() && m.version > q.setup.membership.version) {
            if q.last_seen.as_ref().is_none_or(|l| l.version < m.version) {
                q.last_seen = Some(m);
            }
        }
    }

    /// A reconfig txn was applied (the tree holds its text): the configuration it carries
    /// becomes the active one.
    pub(crate) fn reconfig_applied(&mut self, data: Option<&[u8]>, out: &mut Vec<Output>) {
        let parsed = data.and_then(|d| std::str::from_utf8(d).ok()).map(Membership::parse_text);
        match self.ensemble() {
            None => return, // a standalone server replaying an ensemble's log
            // Never seen committed: the last-seen configuration, not the active one.
            Some(q) if q.replaying_log => return self.saw_config(parsed.and_then(Result::ok)),
            Some(_) => {}
        }
        match parsed {
            Some(Ok(m)) => self.activate(m, out),
            other => tracing::error!(?other, "a committed reconfig carries no configuration; ignored"),
        }
    }

    /// A NEWLEADER carried the leader's configuration: adopted at UPTODATE (`Action::Synced`,
    /// [`Node::leader_config_synced`]) if newer than ours, or if it is ours under another version.
    pub(super) fn leader_config(&mut self, text: &[u8]) {
        let Some(Ok(m)) = std::str::from_utf8(text).ok().map(Membership::parse_text) else {
            tracing::warn!("NEWLEADER carries no readable configuration; ignored");
            return;
        };
        let Some(q) = self.ensemble_mut_if() else { return };
        let ours = &q.setup.membership;
        let renumbered = m.servers == ours.servers && m.version != ours.version;
        if (m.version > ours.version || renumbered) && !m.servers.is_empty() {
            q.newleader_config = Some(m);
        }
    }

    /// UPTODATE: the configuration NEWLEADER carried becomes active. The same servers under a
    /// lower version are taken too: two first leaders (ZOOKEEPER-1783) can give a version-0
    /// configuration different versions when the first never got its UPTODATE out (ZooKeeper's
    /// learners keep NEWLEADER's as the last-seen configuration on disk, which a later leader
    /// then carries on); the leader's history holds every committed reconfig, so a higher
    /// version of the same servers here was never committed, and the leader's is the one.
    pub(super) fn leader_config_synced(&mut self, out: &mut Vec<Output>) {
        let Some(m) = self.ensemble_mut().newleader_config.take() else { return };
        let q = self.ensemble_mut();
        if m.version < q.setup.membership.version && m.servers == q.setup.membership.servers {
            tracing::info!(version = format_args!("{:x}", m.version), "configuration renumbered by the leader");
            q.setup.membership = m.clone();
            out.push(Output::Quorum(QuorumOutput::ConfigChanged { membership: m }));
        } else {
            self.activate(m, out);
        }
        self.write_config_node();
    }

    /// Makes `m` the active configuration, tells the shell, and leaves a role it no longer fits.
    pub(super) fn activate(&mut self, m: Membership, out: &mut Vec<Output>) {
        let my_sid = self.ensemble_mut().setup.my_sid;
        let q = self.ensemble_mut();
        // Configurations only move forward: a learner that took its leader's from NEWLEADER then
        // applies the synced txns, older reconfigs among them.
        if q.setup.membership == m || (m.version < q.setup.membership.version && !q.setup.membership.servers.is_empty())
        {
            return;
        }
        tracing::info!(version = format_args!("{:x}", m.version), config = %m.to_text(), "configuration activated");
        if q.last_seen.as_ref().is_some_and(|l| l.version <= m.version) {
            q.last_seen = None;
        }
        q.setup.voters = warden_quorum::zab::voter_sids(&m);
        q.setup.membership = m.clone();
        let me = u64::try_from(my_sid).ok().and_then(|id| m.servers.get(&id)).map(|s| s.is_voter());
        let version = m.version;
        let leaving = match &q.machine {
            Machine::Looking => None,
            // A leader that committed its own removal hands over (`Action::HandOver` follows);
            // one that finished a last-seen configuration without it at establishment elects.
            Machine::Leader(_) => match me {
                Some(true) => None,
                _ => Some(RoleExit::Elect("this leader is no longer a voter".to_string())),
            },
            Machine::Learner(l) => {
                let leader_votes = q.setup.voters.contains(&l.leader());
                let follower = l.role() == LearnerRole::Follower;
                // Unchanged, or removed: a removed follower goes on as a non-voting one.
                let role_kept = me == Some(follower) || me.is_none();
                match l.designated(version) {
                    // ZooKeeper's learners go straight to the designated leader in their new role.
                    Some(d) if d != l.leader() || !role_kept => Some(RoleExit::HandOver { leader: d, zxid: version }),
                    _ if !leader_votes => Some(RoleExit::Elect(format!("leader {} is no longer a voter", l.leader()))),
                    _ if role_kept => None,
                    _ => Some(RoleExit::Elect("this server's role changed".to_string())),
                }
            }
        };
        out.push(Output::Quorum(QuorumOutput::ConfigChanged { membership: m }));
        self.ensemble_mut().role_exit = leaving;
    }
}
