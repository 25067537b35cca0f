//! The learner's side of the quorum port: one connection to the leader (`Learner.connectToLeader`),
//! dialed from a chosen local address and retried within a deadline; the first packet written is
//! the learner's FOLLOWERINFO / OBSERVERINFO. One `LearnerNet` serves one ZAB `Learner` machine: a
//! learner that goes back to LOOKING drops it and connects afresh.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use warden_proto::quorum::{packet_type as pt, LearnerInfo, QuorumPacket};
use warden_quorum::Sid;
use warden_storage::SnapshotBody;

use super::conn::{self, Incoming, Outgoing, PacketReader};
use super::{QuorumNetConfig, SendError};
use crate::tls::peer::PeerStream;

/// The longest pause between connection attempts.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);

/// What the learner's consumer receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LearnerEvent {
    /// A packet from the leader.
    Packet(QuorumPacket),
    /// A SNAP packet's zxid and the snapshot stream that followed it (sessions and nodes; the
    /// "BenWasHere" signature was checked).
    Snapshot { zxid: i64, body: SnapshotBody },
    /// The connection ended (reported once; `recv` returns `None` afterwards).
    Disconnected,
}

/// Why `connect` gave up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the first packet must be FOLLOWERINFO or OBSERVERINFO with LearnerInfo for sid {my_sid}: {why}")]
    BadFirstPacket { my_sid: Sid, why: String },
    #[error("binding {bind}: {source}")]
    Bind { bind: SocketAddr, source: std::io::Error },
    #[error("could not connect to leader {leader} in {attempts} attempts within {timeout:?}: {last}")]
    Unreachable { leader: SocketAddr, attempts: u32, timeout: Duration, last: String },
}

enum Raw {
    Packet(QuorumPacket),
    Snapshot { zxid: i64, body: SnapshotBody },
    Closed,
}

enum State {
    Connected {
        out: mpsc::Sender<Outgoing>,
        _kill: oneshot::Sender<()>,
    },
    /// Closed by this side; `Disconnected` not yet returned.
    Closing,
    Done,
}

/// A learner's connection to its leader.
pub struct LearnerNet {
    leader: SocketAddr,
    local_addr: SocketAddr,
    events: mpsc::Receiver<Raw>,
    state: State,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl LearnerNet {
    /// Connects to the leader's quorum port from `bind` (when given: bound before connecting, so
    /// traffic leaves from that address), retrying with backoff until `cfg.connect_timeout` or
    /// `cfg.max_connect_tries`, then queues `first` (this learner's FOLLOWERINFO / OBSERVERINFO,
    /// whose LearnerInfo must carry `my_sid`) as the connection's first packet.
    pub async fn connect(
        leader: SocketAddr,
        my_sid: Sid,
        first: QuorumPacket,
        bind: Option<SocketAddr>,
        cfg: &QuorumNetConfig,
    ) -> Result<LearnerNet, ConnectError> {
        Self::connect_named(leader, &leader.ip().to_string(), my_sid, first, bind, cfg).await
    }

    /// [`connect`](Self::connect) to a leader whose `server.N` line names it `host` (Kerberos
    /// between servers asks for a ticket to that host's quorum service).
    pub async fn connect_named(
        leader: SocketAddr,
        host: &str,
        my_sid: Sid,
        first: QuorumPacket,
        bind: Option<SocketAddr>,
        cfg: &QuorumNetConfig,
    ) -> Result<LearnerNet, ConnectError> {
        check_first(my_sid, &first).map_err(|why| ConnectError::BadFirstPacket { my_sid, why })?;
        let (stream, leftover) = dial_with_retries(leader, host, bind, cfg).await?;
        let local_addr = stream.local_addr().map_err(|e| ConnectError::Unreachable {
            leader,
            attempts: 1,
            timeout: cfg.connect_timeout,
            last: e.to_string(),
        })?;
        tracing::info!(my_sid, %leader, local = %local_addr, tls = stream.is_tls(), "connected to leader");

        let (out_tx, out_rx) = mpsc::channel(cfg.send_queue.max(1));
        // A fresh channel with capacity >= 1 has room.
        let _ = out_tx.try_send(Outgoing::Packet(first));
        let (kill_tx, kill_rx) = oneshot::channel();
        let (events_tx, events) = mpsc::channel(cfg.recv_queue.max(1));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (rd, wr) = stream.into_split();
        let reader = PacketReader::new(rd, cfg.max_buffer).with_buffered(leftover).with_snapshots();
        let write_timeout = cfg.write_timeout;
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let wrap = |incoming| match incoming {
                Incoming::Packet(p) => Some(Raw::Packet(p)),
                Incoming::Snapshot { zxid, body } => Some(Raw::Snapshot { zxid, body }),
            };
            let run = conn::run(reader, wr, out_rx, kill_rx, events_tx.clone(), wrap, write_timeout, None);
            tokio::select! {
                _ = conn::stopped(shutdown_rx) => {}
                end = run => {
                    match &end {
                        conn::ConnEnd::Killed | conn::ConnEnd::ConsumerGone => {
                            tracing::debug!(my_sid, %leader, %end, "leader connection ended")
                        }
                        _ => tracing::warn!(my_sid, %leader, error = %end, "leader connection ended"),
                    }
                    let _ = events_tx.send(Raw::Closed).await;
                }
            }
        });
        Ok(LearnerNet {
            leader,
            local_addr,
            events,
            state: State::Connected { out: out_tx, _kill: kill_tx },
            shutdown,
            tasks,
        })
    }

    /// The leader's address.
    pub fn leader_addr(&self) -> SocketAddr {
        self.leader
    }

    /// This end's address (the bound source address).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The next event; `None` after `Disconnected` was returned. Cancel-safe.
    pub async fn recv(&mut self) -> Option<LearnerEvent> {
        loop {
            match self.state {
                State::Done => return None,
                State::Closing => {
                    self.state = State::Done;
                    return Some(LearnerEvent::Disconnected);
                }
                State::Connected { .. } => {}
            }
            match self.events.recv().await {
                Some(Raw::Packet(p)) if matches!(self.state, State::Connected { .. }) => {
                    return Some(LearnerEvent::Packet(p));
                }
                Some(Raw::Snapshot { zxid, body }) if matches!(self.state, State::Connected { .. }) => {
                    return Some(LearnerEvent::Snapshot { zxid, body });
                }
                Some(Raw::Packet(_) | Raw::Snapshot { .. }) => {}
                Some(Raw::Closed) | None => self.state = State::Closing,
            }
        }
    }

    /// Queues `packet` to the leader. A full queue closes the connection; either error is
    /// followed by `Disconnected` (unless it was already returned).
    pub fn send(&mut self, packet: QuorumPacket) -> Result<(), SendError> {
        let State::Connected { out, .. } = &self.state else { return Err(SendError::NotConnected) };
        match out.try_send(Outgoing::Packet(packet)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(leader = %self.leader, "send queue to the leader full; closing");
                self.state = State::Closing;
                Err(SendError::QueueFull)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.state = State::Closing;
                Err(SendError::NotConnected)
            }
        }
    }

    /// Closes the connection; `Disconnected` follows (unless it was already returned).
    pub fn disconnect(&mut self) {
        if matches!(self.state, State::Connected { .. }) {
            tracing::info!(leader = %self.leader, "closing the connection to the leader");
            self.state = State::Closing;
        }
    }

    /// Whether the connection is still open as far as this side knows.
    pub fn is_connected(&self) -> bool {
        matches!(self.state, State::Connected { .. })
    }

    /// Closes the connection and waits for its task to end.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        self.state = State::Done;
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(e) = joined {
                if e.is_panic() {
                    tracing::error!(error = %e, "quorum connection task panicked");
                }
            }
        }
    }
}

fn check_first(my_sid: Sid, first: &QuorumPacket) -> Result<(), String> {
    if first.packet_type != pt::FOLLOWERINFO && first.packet_type != pt::OBSERVERINFO {
        return Err(format!("packet type {}", first.packet_type));
    }
    let data = first.data.as_deref().ok_or("no LearnerInfo")?;
    let info = LearnerInfo::decode_lenient(data).map_err(|e| e.to_string())?;
    match info.server_id == my_sid {
        true => Ok(()),
        false => Err(format!("LearnerInfo sid is {}", info.server_id)),
    }
}

async fn dial_with_retries(
    leader: SocketAddr,
    host: &str,
    bind: Option<SocketAddr>,
    cfg: &QuorumNetConfig,
) -> Result<(PeerStream, Vec<u8>), ConnectError> {
    let deadline = tokio::time::Instant::now() + cfg.connect_timeout;
    let mut delay = cfg.retry_delay;
    let mut attempts = 0;
    let mut last = String::from("no attempt made");
    let unreachable =
        |attempts, last| ConnectError::Unreachable { leader, attempts, timeout: cfg.connect_timeout, last };
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if remaining.is_zero() || attempts >= cfg.max_connect_tries.max(1) {
            return Err(unreachable(attempts, last));
        }
        attempts += 1;
        match tokio::time::timeout(remaining, dial(leader, host, bind, cfg)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(DialError::Bind(source))) => {
                return Err(ConnectError::Bind { bind: bind.unwrap_or(leader), source });
            }
            Ok(Err(DialError::Connect(e))) => last = e.to_string(),
            Err(_) => last = "connect timed out".to_string(),
        }
        tracing::debug!(%leader, attempts, error = %last, "connecting to leader failed; retrying");
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        tokio::time::sleep(delay.min(remaining)).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

enum DialError {
    Bind(std::io::Error),
    Connect(std::io::Error),
}

/// Connects, then TLS (`sslQuorum`) and SASL (`quorum.auth.learnerRequireSasl`); returns the
/// stream and any bytes read past the SASL exchange.
async fn dial(
    leader: SocketAddr,
    host: &str,
    bind: Option<SocketAddr>,
    cfg: &QuorumNetConfig,
) -> Result<(PeerStream, Vec<u8>), DialError> {
    let socket = if leader.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() };
    let socket = socket.map_err(DialError::Connect)?;
    if let Some(bind) = bind {
        socket.bind(bind).map_err(DialError::Bind)?;
    }
    let stream = socket.connect(leader).await.map_err(DialError::Connect)?;
    let stream = crate::peer_conn::refuse_self_connection(stream).map_err(DialError::Connect)?;
    let _ = stream.set_nodelay(true);
    let mut stream = cfg.tls.dial(stream, leader).await.map_err(DialError::Connect)?;
    let mut leftover = Vec::new();
    cfg.sasl.dial(&mut stream, &mut leftover, host).await.map_err(|why| {
        DialError::Connect(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("quorum SASL with {leader}: {why}"),
        ))
    })?;
    Ok((stream, leftover))
}
