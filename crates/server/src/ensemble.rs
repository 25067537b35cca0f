//! Ensemble membership for the owner task: the election port (`ElectionNet`) and the quorum port
//! (`LeaderNet` while leading, `LearnerNet` while following or observing), turned into node inputs.
//!
//! The owner asks `next` for the next event (an election decision, a quorum packet, a closed quorum
//! connection) and carries out the node's `QuorumOutput`s through `send`, `close`, `connect_learner`
//! and `elect`. Epoch files and log truncation go through the storage thread (see `storage.rs`), so
//! they are ordered after every txn appended before them.
//!
//! Limits of this first version: a learner's connection to its leader is dialed inside the owner
//! task (bounded by `initLimit * tickTime` and 5 tries), so the owner handles no other event while
//! it dials (clients are refused then anyway: the server is not serving). The snapshot after SNAP
//! travels as in ZooKeeper (see `quorum_net`), so Warden and ZooKeeper servers sync each other.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::Context;
use tokio::sync::watch;
use warden_node::{Input, SnapshotData};
use warden_proto::quorum::QuorumPacket;
use warden_quorum::{Elected, Sid};
use warden_storage::SnapshotBody;
use warden_tree::DataTree;

use crate::config::{Config, ServerSpec};

/// How long a leader that hands over waits for its learners to take what is queued for them.
const HAND_OVER_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);
use crate::election::{ElectionNet, ElectionStatus};
use crate::quorum_net::{LeaderEvent, LeaderNet, LearnerEvent, LearnerNet, QuorumNetConfig};

pub(crate) enum Net {
    None,
    Leader(LeaderNet),
    Learner { leader: Sid, net: LearnerNet },
}

/// What the ensemble side has for the owner.
pub(crate) enum EnsEvent {
    /// The election decided; not yet carried out.
    Decided(Elected),
    /// A node input from the quorum port (`Peer` or `PeerDisconnected`).
    Node(Input),
}

pub(crate) struct Ensemble {
    pub(crate) my_sid: Sid,
    servers: BTreeMap<u64, ServerSpec>,
    election: ElectionNet,
    status: watch::Receiver<ElectionStatus>,
    /// Waiting for a decision of the current round.
    awaiting: bool,
    pub(crate) net: Net,
    net_cfg: QuorumNetConfig,
}

/// Resolves `host:port` (the first address).
async fn resolve(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    let text = match host.contains(':') && !host.starts_with('[') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    let first = tokio::net::lookup_host(text.as_str()).await.with_context(|| format!("resolving {text}"))?.next();
    first.with_context(|| format!("{text} resolves to no address"))
}

impl Ensemble {
    /// Binds the election port and starts the first round.
    pub(crate) async fn start(cfg: &Config, last_zxid: i64, current_epoch: i64) -> anyhow::Result<Ensemble> {
        let my_id = cfg.my_id.context("zoo.cfg lists several servers but the dataDir has no myid file")?;
        let my_sid = Sid::try_from(my_id).context("myid does not fit a Java long")?;
        let tls = cfg.quorum_tls().context("TLS between servers (sslQuorum, ssl.quorum.*)")?;
        tracing::info!(?tls, "quorum and election ports");
        let sasl = cfg.quorum_sasl().context("SASL between servers (quorum.auth.*)")?;
        if sasl.is_enabled() {
            tracing::info!(settings = ?cfg.quorum_sasl, "quorum SASL (DIGEST-MD5)");
        }
        let election =
            ElectionNet::start_with(my_id, &cfg.servers, last_zxid, current_epoch, tls.clone(), sasl.clone()).await?;
        if cfg.config_version != 0 {
            // Notifications carry the configuration's version (a dynamic file's), so LOOKING
            // peers with an older one adopt it.
            election.reconfigure(&cfg.membership()).await?;
        }
        let status = election.subscribe();
        let tick = u64::from(cfg.tick_time_ms);
        let mut net_cfg = QuorumNetConfig::from_ticks(tick, cfg.init_limit, cfg.sync_limit);
        net_cfg.max_buffer = cfg.jute_max_buffer.max(net_cfg.max_buffer);
        net_cfg.tls = tls;
        net_cfg.sasl = sasl;
        Ok(Ensemble { my_sid, servers: cfg.servers.clone(), election, status, awaiting: true, net: Net::None, net_cfg })
    }

    /// The next event. Cancel-safe.
    pub(crate) async fn next(&mut self) -> EnsEvent {
        loop {
            if self.awaiting {
                let decided = self.status.borrow_and_update().elected();
                if let Some(e) = decided {
                    self.awaiting = false;
                    return EnsEvent::Decided(e);
                }
            }
            let awaiting = self.awaiting;
            tokio::select! {
                changed = self.status.changed(), if awaiting => {
                    if changed.is_err() {
                        // The election driver is gone; nothing more will be decided.
                        self.awaiting = false;
                    }
                }
                ev = net_recv(&mut self.net) => match ev {
                    Some(ev) => return ev,
                    None => self.net = Net::None,
                },
            }
        }
    }

    /// Starts the leader's quorum port on this server's `server.N` quorum address.
    pub(crate) async fn start_leading(&mut self) -> anyhow::Result<()> {
        self.stop_net().await;
        let me = self.spec(self.my_sid)?;
        let addr = resolve(&me.host, me.quorum_port).await?;
        self.net = Net::Leader(LeaderNet::start(addr, self.net_cfg.clone()).await?);
        Ok(())
    }

    /// A new configuration is active: the peers' addresses and the election's voters follow it.
    pub(crate) async fn reconfigure(&mut self, membership: &warden_proto::Membership) {
        for (id, spec) in &membership.servers {
            self.servers.insert(*id, spec.clone());
        }
        if let Err(e) = self.election.reconfigure(membership).await {
            tracing::warn!(error = %e, "the election did not take the new configuration");
        }
    }

    fn spec(&self, sid: Sid) -> anyhow::Result<ServerSpec> {
        let id = u64::try_from(sid).context("negative sid")?;
        self.servers.get(&id).cloned().with_context(|| format!("no server.{sid} line"))
    }

    /// Dials the leader's quorum port from this server's own address, with `first` (FOLLOWERINFO /
    /// OBSERVERINFO) as the first packet.
    pub(crate) async fn connect_learner(&mut self, leader: Sid, first: QuorumPacket) -> anyhow::Result<()> {
        self.stop_net().await;
        let spec = self.spec(leader)?;
        let to = resolve(&spec.host, spec.quorum_port).await?;
        let me = self.spec(self.my_sid)?;
        let bind = resolve(&me.host, 0).await?;
        let net = LearnerNet::connect_named(to, &spec.host, self.my_sid, first, Some(bind), &self.net_cfg).await?;
        self.net = Net::Learner { leader, net };
        Ok(())
    }

    /// The quorum port while leading (its learner connections' figures).
    pub(crate) fn leader_net(&self) -> Option<&LeaderNet> {
        match &self.net {
            Net::Leader(n) => Some(n),
            _ => None,
        }
    }

    /// Whether packets to `to` have a connection to go on (false: a learner still has to dial).
    pub(crate) fn learner_needs_dial(&self) -> bool {
        matches!(self.net, Net::None)
    }

    pub(crate) fn send(&mut self, to: Sid, packet: QuorumPacket) {
        let result = match &mut self.net {
            Net::Leader(n) => n.send(to, packet),
            Net::Learner { leader, net, .. } if *leader == to => net.send(packet),
            _ => return tracing::debug!(to, "no quorum connection for this packet; dropped with its role"),
        };
        if let Err(e) = result {
            tracing::info!(to, error = %e, "quorum send failed; the connection is closed");
        }
    }

    /// Queues the snapshot that follows the SNAP packet just sent to learner `to`.
    pub(crate) fn send_snapshot(&mut self, to: Sid, snapshot: SnapshotData) {
        let Net::Leader(n) = &mut self.net else { return };
        tracing::info!(to, zxid = format_args!("{:#x}", snapshot.zxid), "sending snapshot");
        if let Err(e) = n.send_snapshot(to, *snapshot.tree, snapshot.sessions) {
            tracing::info!(to, error = %e, "snapshot send failed; the connection is closed");
        }
    }

    /// Queues the on-disk log's txns `(after, upto]` that follow the DIFF packet just sent to
    /// learner `to`, ahead of whatever is queued for it later.
    pub(crate) fn send_log_diff(&mut self, to: Sid, data: warden_storage::DataDir, after: i64, upto: i64) {
        let Net::Leader(n) = &mut self.net else { return };
        if let Err(e) = n.send_log_diff(to, data, after, upto) {
            tracing::info!(to, error = %e, "DIFF from disk not queued; the connection is closed");
        }
    }

    pub(crate) fn close(&mut self, sid: Sid, reason: &str) {
        tracing::info!(sid, reason, "closing quorum connection");
        match &mut self.net {
            Net::Leader(n) => {
                n.disconnect(sid);
            }
            Net::Learner { leader, net, .. } if *leader == sid => net.disconnect(),
            _ => {}
        }
    }

    /// As `stop_net`, but a leader's learners first get what was queued for them (within
    /// `HAND_OVER_FLUSH`).
    async fn stop_net_flushed(&mut self) {
        match std::mem::replace(&mut self.net, Net::None) {
            Net::Leader(n) => n.stop_flushed(self.net_cfg.write_timeout.min(HAND_OVER_FLUSH)).await,
            Net::Learner { net, .. } => net.stop().await,
            Net::None => {}
        }
    }

    async fn stop_net(&mut self) {
        match std::mem::replace(&mut self.net, Net::None) {
            Net::None => {}
            Net::Leader(n) => n.stop().await,
            Net::Learner { net, .. } => net.stop().await,
        }
    }

    /// The role is established in `epoch`: election answers carry it (see
    /// `ElectionNet::update_peer_epoch`).
    pub(crate) async fn settled(&mut self, epoch: i64) {
        if let Err(e) = self.election.update_peer_epoch(epoch).await {
            tracing::error!(error = %e, "cannot update the election vote's epoch");
        }
    }

    /// Leaves the role's connections and starts a new election round; with `flush`, a leader's
    /// learners get what was queued for them first (within the hand-over's bound).
    pub(crate) async fn elect(&mut self, last_zxid: i64, current_epoch: i64, flush: bool) {
        if flush {
            self.stop_net_flushed().await;
        } else {
            self.stop_net().await;
        }
        if let Err(e) = self.election.restart_election(last_zxid, current_epoch).await {
            tracing::error!(error = %e, "cannot restart the election");
        }
        self.awaiting = true;
    }

    /// Leaves the role's connections and takes `leader`, designated by a reconfig's commit, as
    /// the election's decision (reported like any other).
    pub(crate) async fn hand_over(&mut self, leader: Sid, zxid: i64) {
        // The learners must get the COMMITANDACTIVATE queued for them: it tells them whom to
        // follow now.
        self.stop_net_flushed().await;
        if let Err(e) = self.election.hand_over(leader, zxid).await {
            tracing::error!(error = %e, "cannot hand the election over to the designated leader");
        }
        self.awaiting = true;
    }

    pub(crate) async fn stop(mut self) {
        self.stop_net().await;
        self.election.stop().await;
    }
}

fn to_snapshot(zxid: i64, body: SnapshotBody) -> Result<SnapshotData, String> {
    let tree = DataTree::from_snapshot(body.nodes, zxid)?;
    Ok(SnapshotData { zxid, tree: Box::new(tree), sessions: body.sessions })
}

async fn net_recv(net: &mut Net) -> Option<EnsEvent> {
    match net {
        Net::None => std::future::pending().await,
        Net::Leader(n) => match n.recv().await? {
            LeaderEvent::Packet { from, packet } => Some(EnsEvent::Node(Input::Peer { from, packet })),
            LeaderEvent::Disconnected { sid } => Some(EnsEvent::Node(Input::PeerDisconnected { sid })),
            LeaderEvent::LogDiffFailed { sid } => Some(EnsEvent::Node(Input::LogDiffFailed { sid })),
        },
        Net::Learner { leader, net } => {
            let from = *leader;
            loop {
                match net.recv().await {
                    Some(LearnerEvent::Packet(packet)) => return Some(EnsEvent::Node(Input::Peer { from, packet })),
                    Some(LearnerEvent::Snapshot { zxid, body }) => match to_snapshot(zxid, body) {
                        Ok(snapshot) => return Some(EnsEvent::Node(Input::PeerSnapshot { from, snapshot })),
                        Err(why) => {
                            tracing::error!(why, "bad snapshot from the leader; disconnecting");
                            net.disconnect();
                        }
                    },
                    Some(LearnerEvent::Disconnected) => {
                        return Some(EnsEvent::Node(Input::PeerDisconnected { sid: from }));
                    }
                    None => return None,
                }
            }
        }
    }
}
