//! The election port shell: ZooKeeper's `QuorumCnxManager` behaviour over tokio TCP, running the
//! pure [`FastLeaderElection`] (ZooKeeper's `FastLeaderElection` and its `Messenger`).
//!
//! Tasks, all owned by [`ElectionNet`] and ended by [`ElectionNet::stop`] (or by dropping it):
//! - the listener on this server's election port ([`listener`]), which reads each initiator's
//!   introduction and routes the socket by sid;
//! - one link per other server ([`link`]), owning at most one connection ([`conn`]) and dialing
//!   when a message waits; only the connection initiated by the larger sid survives;
//! - the driver ([`driver`]), owning the election machine: received notifications, ticks at its
//!   deadline, and restart commands go in; queued notifications and the published
//!   [`ElectionStatus`] come out.
//!
//! Limits: one queued message per peer (ZooKeeper's `SEND_CAPACITY` = 1, newest wins), 100
//! received notifications waiting for the driver (`RECV_CAPACITY`), 512 KiB per message, 5 s to
//! connect and to introduce, 64 introductions at once. Malformed input from a peer closes only
//! that connection, with a log line. Deviation: ZooKeeper closes on a bad length but skips an
//! undecodable notification (shorter than 28 bytes, unknown state) and keeps the connection;
//! Warden closes it (bad input costs its sender the connection, never the server: see
//! ARCHITECTURE.md). ZooKeeper never sends either.
//!
//! Outgoing election connections are bound to this server's own `server.N` host (port 0) before
//! connecting, as the learner's quorum connection is, so peer traffic leaves from the server's own
//! address (ZooKeeper leaves the source to the kernel; on one machine with 127.0.0.1/.2/.3 that
//! would make every server's traffic look alike). If the bind fails the dial goes out unbound,
//! with a warning.
//!
//! TLS (`sslQuorum`, `portUnification`): accepted connections and dials go through
//! [`PeerTls`] (`tls/peer.rs`) before the introduction, which then travels inside TLS as in
//! ZooKeeper.
//!
//! SASL (`quorum.auth.*`, `sasl/quorum.rs`): after the introduction, both ways, as
//! `QuorumCnxManager` runs its `QuorumAuthServer` / `QuorumAuthLearner`.
//!
//! Absent: multiple addresses per server (protocol V2 is
//! accepted, V1 is sent, as ZooKeeper does without `multiAddress.enabled`), reconfiguration
//! (configs in notifications are carried, not applied), observers without ids (`OBSERVER_ID`),
//! and `quorumListenOnAllIPs`.

mod conn;
mod driver;
mod link;
mod listener;
mod peers;
mod queue;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use warden_quorum::{Elected, FastLeaderElection, QuorumConfig, Sid};

use crate::config::{ServerRole, ServerSpec};
use crate::sasl::quorum::QuorumSasl;
use crate::tls::peer::PeerTls;
use driver::{Command, Driver};
use listener::Listener;
use peers::{LinkFactory, Peers};

/// `QuorumCnxManager.RECV_CAPACITY`: received notifications waiting for the driver.
pub const RECV_CAPACITY: usize = 100;

/// Where this server's election stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionStatus {
    /// Electing, in this round (logical clock).
    Looking { round: i64 },
    /// Left the election: the leader, our state (LEADING, FOLLOWING or OBSERVING) and epochs.
    Decided(Elected),
}

impl ElectionStatus {
    /// The outcome, once decided.
    pub fn elected(&self) -> Option<Elected> {
        match self {
            ElectionStatus::Decided(e) => Some(*e),
            ElectionStatus::Looking { .. } => None,
        }
    }
}

/// A running election shell.
pub struct ElectionNet {
    my_id: Sid,
    local_addr: SocketAddr,
    commands: mpsc::Sender<Command>,
    status: watch::Receiver<ElectionStatus>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
    peers: Arc<Peers>,
}

impl ElectionNet {
    /// Binds this server's election port (host and port from its `server.N` line), starts the
    /// links to every other server and the first round with our `last_zxid` and
    /// `current_epoch`.
    pub async fn start(
        my_id: u64,
        servers: &BTreeMap<u64, ServerSpec>,
        last_zxid: i64,
        current_epoch: i64,
    ) -> anyhow::Result<ElectionNet> {
        Self::start_with(my_id, servers, last_zxid, current_epoch, PeerTls::default(), QuorumSasl::default()).await
    }

    /// [`start`](Self::start) with TLS on the election port and on the dials (`sslQuorum`,
    /// `portUnification`) and SASL after each introduction (`quorum.auth.*`).
    pub async fn start_with(
        my_id: u64,
        servers: &BTreeMap<u64, ServerSpec>,
        last_zxid: i64,
        current_epoch: i64,
        tls: PeerTls,
        sasl: QuorumSasl,
    ) -> anyhow::Result<ElectionNet> {
        let me = servers.get(&my_id).with_context(|| format!("myid {my_id} has no server.{my_id} line"))?;
        let sid = |id: u64| Sid::try_from(id).with_context(|| format!("server id {id} does not fit a Java long"));
        let my_sid = sid(my_id)?;
        let bind = format!("{}:{}", me.host, me.election_port);
        let listener = TcpListener::bind(&bind).await.with_context(|| format!("binding election port {bind}"))?;
        let local_addr = listener.local_addr()?;

        let mut voters = Vec::new();
        let mut observers = Vec::new();
        for spec in servers.values() {
            match spec.role {
                ServerRole::Participant => voters.push(sid(spec.id)?),
                ServerRole::Observer => observers.push(sid(spec.id)?),
            }
        }
        let mut election = FastLeaderElection::new(my_sid, QuorumConfig::new(voters, observers));
        // The QuorumVerifier text ZooKeeper peers expect in notifications (`QuorumMaj.toString`); they
        // act only on a version above their own, which 0 never is.
        let text = warden_proto::Membership { servers: servers.clone(), version: 0 }.to_text();
        election.set_config_text(text.into_bytes());

        let (shutdown, shutdown_rx) = watch::channel(false);
        let (received_tx, received_rx) = mpsc::channel(RECV_CAPACITY);
        let my_addr = host_port(&me.host, local_addr.port());
        let mut tasks = JoinSet::new();
        let peers = Peers::new(LinkFactory {
            my_sid,
            my_host: me.host.clone(),
            my_addr,
            tls: tls.clone(),
            sasl: sasl.clone(),
            received: received_tx,
            shutdown: shutdown_rx.clone(),
        });
        for spec in servers.values().filter(|s| s.id != my_id) {
            peers.ensure(sid(spec.id)?, &spec.host, spec.election_port);
        }
        tasks.spawn(
            Listener { my_id: my_sid, listener, peers: peers.clone(), shutdown: shutdown_rx.clone(), tls, sasl }.run(),
        );

        let (status_tx, status_rx) = watch::channel(ElectionStatus::Looking { round: 0 });
        let (commands_tx, commands_rx) = mpsc::channel(4);
        let driver = Driver {
            election,
            started: tokio::time::Instant::now(),
            peers: peers.clone(),
            received: received_rx,
            commands: commands_rx,
            status: status_tx,
            shutdown: shutdown_rx,
        };
        tasks.spawn(driver.run(last_zxid, current_epoch));
        tracing::info!(my_id, addr = %local_addr, "election port listening");
        Ok(ElectionNet { my_id: my_sid, local_addr, commands: commands_tx, status: status_rx, shutdown, tasks, peers })
    }

    /// This server's sid.
    pub fn my_id(&self) -> Sid {
        self.my_id
    }

    /// The bound election address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The current status.
    pub fn status(&self) -> ElectionStatus {
        *self.status.borrow()
    }

    /// A receiver that sees every status change.
    pub fn subscribe(&self) -> watch::Receiver<ElectionStatus> {
        self.status.clone()
    }

    /// Waits up to `timeout` for a decision; `None` if still LOOKING then.
    pub async fn wait_decided(&self, timeout: Duration) -> Option<Elected> {
        let mut rx = self.status.clone();
        let decided = async { rx.wait_for(|s| s.elected().is_some()).await.ok().and_then(|s| s.elected()) };
        tokio::time::timeout(timeout, decided).await.ok().flatten()
    }

    /// Starts a new round, as a server does when it loses its leader (`lookForLeader` again);
    /// returns once the driver has started it (the status is LOOKING until a decision).
    pub async fn restart_election(&self, last_zxid: i64, current_epoch: i64) -> anyhow::Result<()> {
        let (done, started) = oneshot::channel();
        self.commands
            .send(Command::Restart { last_zxid, current_epoch, done })
            .await
            .map_err(|_| anyhow::anyhow!("election driver stopped"))?;
        started.await.map_err(|_| anyhow::anyhow!("election driver stopped"))
    }

    /// A reconfig's commit designated `leader` (`FastLeaderElection::hand_over`): the status
    /// becomes that decision; returns once the driver has taken it.
    pub async fn hand_over(&self, leader: Sid, zxid: i64) -> anyhow::Result<()> {
        let (done, taken) = oneshot::channel();
        self.commands
            .send(Command::HandOver { leader, zxid, done })
            .await
            .map_err(|_| anyhow::anyhow!("election driver stopped"))?;
        taken.await.map_err(|_| anyhow::anyhow!("election driver stopped"))
    }

    /// ZAB settled `epoch` for this server's role: its election answers (to LOOKING servers) carry
    /// it from now on, as `QuorumPeer.updateElectionVote` does. Without it a server that restarts
    /// hears FOLLOWING and LEADING answers that disagree on the epoch and never joins.
    pub async fn update_peer_epoch(&self, epoch: i64) -> anyhow::Result<()> {
        self.commands.send(Command::PeerEpoch(epoch)).await.map_err(|_| anyhow::anyhow!("election driver stopped"))
    }

    /// A reconfig made `membership` active: links to its new members start now, and the
    /// election uses it at once (`FastLeaderElection::reconfigure`).
    pub async fn reconfigure(&self, membership: &warden_proto::Membership) -> anyhow::Result<()> {
        let sid = |id: u64| Sid::try_from(id).ok();
        let config = QuorumConfig::from_membership(membership);
        let text = membership.to_text().into_bytes();
        let members = membership
            .servers
            .values()
            .filter_map(|s| Some((sid(s.id)?, s.host.clone(), s.election_port)))
            .filter(|(s, _, _)| *s != self.my_id)
            .collect();
        self.commands
            .send(Command::Configure(config, text, members))
            .await
            .map_err(|_| anyhow::anyhow!("election driver stopped"))
    }

    /// Stops every task and closes every connection; returns when all have ended.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        // The listener and the driver first: after them no link is started.
        join_all(&mut self.tasks).await;
        join_all(&mut self.peers.take_tasks()).await;
    }
}

async fn join_all(tasks: &mut JoinSet<()>) {
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined {
            if e.is_panic() {
                tracing::error!(error = %e, "election task panicked");
            }
        }
    }
}

/// `host:port`, with brackets around an IPv6 literal (`NetUtils.formatInetAddr`).
pub(crate) fn host_port(host: &str, port: u16) -> String {
    match host.contains(':') && !host.starts_with('[') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}
