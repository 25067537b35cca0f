//! One peer's link (`QuorumCnxManager.connectOne` / `initiateConnection` and the worker
//! bookkeeping): owns at most one connection to the peer and decides when to dial.
//!
//! Only the connection initiated by the larger sid survives:
//! - we dial, send our [`InitialMessage`], and keep the connection if our sid is larger;
//!   otherwise we close it right away (the peer sees our smaller sid and dials back);
//! - the listener hands us connections the larger peer initiated ([`LinkEvent::Inbound`]), which
//!   replace the current one; for a connection from a smaller peer it closes the socket and
//!   tells us to drop ours and dial back ([`LinkEvent::DialBack`]).
//!
//! As in ZooKeeper, dialing is driven by sends: a queued message with no connection triggers a
//! dial. Unlike ZooKeeper, a message still waiting after a failed or lost dial is retried with a
//! backoff instead of waiting for the election's next resend.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use warden_proto::election::{InitialMessage, PROTOCOL_VERSION_V1};
use warden_quorum::Sid;

use super::conn::{self, ConnEnd, Received};
use super::queue::SharedQueue;
use crate::sasl::quorum::QuorumSasl;
use crate::tls::peer::{PeerStream, PeerTls};

/// `QuorumCnxManager.cnxTO`: how long a dial may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(5000);
/// First and largest delay before re-dialing for a message still waiting.
pub(crate) const REDIAL_MIN: Duration = Duration::from_millis(100);
pub(crate) const REDIAL_MAX: Duration = Duration::from_millis(5000);
/// Events queued for one link before further ones are dropped (they are all retried).
pub(crate) const LINK_EVENT_QUEUE: usize = 16;
/// When the connection from a larger peer ends, how long we wait for the peer's replacement
/// connection (the dial-back handshake closes a connection on purpose and dials again at once)
/// before we dial it ourselves to learn whether it is still there.
pub(crate) const DIAL_BACK_GRACE: Duration = Duration::from_millis(20);

/// What the listener and the driver tell a link.
#[derive(Debug)]
pub(crate) enum LinkEvent {
    /// The peer (larger sid) connected and introduced itself; `leftover` is what followed its
    /// initial message.
    Inbound { stream: PeerStream, leftover: Vec<u8> },
    /// The peer (smaller sid) connected: drop any connection to it and dial it.
    DialBack,
    /// A message was queued.
    Wanted,
}

/// A connection task, aborted when dropped.
struct ConnTask(JoinHandle<ConnEnd>);

impl Drop for ConnTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The peer's address and our own introduction.
#[derive(Debug, Clone)]
pub(crate) struct LinkSpec {
    pub my_id: Sid,
    pub sid: Sid,
    /// `host:port` of the peer's election port, resolved at each dial.
    pub peer_addr: String,
    /// The initial message we send (our sid and election address).
    pub hello: Vec<u8>,
    /// Our own `server.N` host: dials leave from it (port 0), so that every server's peer traffic
    /// carries its own source address.
    pub local_host: String,
    /// TLS on the dial (`sslQuorum`).
    pub tls: PeerTls,
    /// SASL after the introduction (`quorum.auth.learnerRequireSasl`).
    pub sasl: QuorumSasl,
    /// The peer's host as its `server.N` line names it (Kerberos's `_HOST`).
    pub peer_host: String,
}

impl LinkSpec {
    pub(crate) fn new(
        my_id: Sid,
        sid: Sid,
        (peer_host, peer_port): (&str, u16),
        my_host: &str,
        my_addr: String,
        (tls, sasl): (PeerTls, QuorumSasl),
    ) -> Self {
        let hello =
            InitialMessage::Versioned { protocol_version: PROTOCOL_VERSION_V1, sid: my_id, addr: my_addr }.encode();
        Self {
            my_id,
            sid,
            peer_addr: super::host_port(peer_host, peer_port),
            hello,
            local_host: super::host_port(my_host, 0),
            tls,
            sasl,
            peer_host: peer_host.to_string(),
        }
    }
}

pub(crate) struct Link {
    spec: LinkSpec,
    queue: SharedQueue,
    events: mpsc::Receiver<LinkEvent>,
    received: mpsc::Sender<Received>,
    shutdown: watch::Receiver<bool>,
    conn: Option<ConnTask>,
    redial_at: Option<Instant>,
    /// The next redial checks the peer is still there even with nothing to send (set when a
    /// connection ended).
    probe: bool,
    backoff: Duration,
    /// The reachability last reported to the driver.
    reported: Option<bool>,
}

impl Link {
    pub(crate) fn new(
        spec: LinkSpec,
        queue: SharedQueue,
        events: mpsc::Receiver<LinkEvent>,
        received: mpsc::Sender<Received>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            spec,
            queue,
            events,
            received,
            shutdown,
            conn: None,
            redial_at: None,
            probe: false,
            backoff: REDIAL_MIN,
            reported: None,
        }
    }

    /// Runs until shutdown; the connection task is aborted with the link.
    pub(crate) async fn run(mut self) {
        loop {
            let redial_at = self.redial_at;
            tokio::select! {
                _ = self.shutdown.changed() => break,
                ev = self.events.recv() => match ev {
                    Some(ev) => self.on_event(ev).await,
                    None => break,
                },
                end = wait_conn(&mut self.conn) => self.on_conn_end(end).await,
                _ = sleep_until(redial_at) => {
                    self.redial_at = None;
                    if std::mem::take(&mut self.probe) {
                        self.dial().await;
                    } else {
                        self.dial_if_needed().await;
                    }
                }
            }
            if *self.shutdown.borrow() {
                break;
            }
        }
        tracing::debug!(sid = self.spec.sid, "election link stopped");
    }

    async fn on_event(&mut self, ev: LinkEvent) {
        match ev {
            LinkEvent::Inbound { stream, leftover } => {
                tracing::info!(
                    my_id = self.spec.my_id,
                    sid = self.spec.sid,
                    "election connection from larger sid accepted"
                );
                self.adopt(stream, leftover).await;
            }
            LinkEvent::DialBack => {
                self.conn = None;
                self.redial_at = None;
                self.dial().await;
            }
            LinkEvent::Wanted => {
                if self.redial_at.is_none() {
                    self.dial_if_needed().await;
                }
            }
        }
    }

    /// Tells the driver when the peer becomes reachable or unreachable (changes only).
    /// - Reachable: a connection to it came up, or it accepted our dial.
    /// - Unreachable: a dial failed (refused, unresolvable, timed out). A connection that merely
    ///   ended is no evidence: the peer closes connections on purpose in the dial-back handshake,
    ///   and an unreachable report there would let early finalize decide without a live voter's
    ///   vote. A connection that ends is re-dialed instead: at once by the larger sid (the
    ///   smaller never closes it on purpose), after [`DIAL_BACK_GRACE`] by the smaller if no
    ///   replacement arrived. So a dead peer is known unreachable within milliseconds.
    /// - Never reported unreachable before it was first reached: a peer that has not started yet
    ///   (ensemble start-up) gets finalizeWait, as ZooKeeper peers in the same ensemble do.
    async fn report(&mut self, reachable: bool) {
        if self.reported.is_none() && !reachable {
            return;
        }
        if self.reported != Some(reachable) {
            self.reported = Some(reachable);
            let _ = self.received.send(Received::Reachable(self.spec.sid, reachable)).await;
        }
    }

    async fn on_conn_end(&mut self, end: ConnEnd) {
        self.conn = None;
        match &end {
            ConnEnd::Malformed(_) => tracing::warn!(sid = self.spec.sid, %end, "closing election connection"),
            _ => tracing::info!(sid = self.spec.sid, %end, "election connection ended"),
        }
        if self.spec.my_id > self.spec.sid {
            self.redial_at = None;
            self.dial().await;
        } else {
            self.redial_at = Some(Instant::now() + DIAL_BACK_GRACE);
            self.probe = true;
        }
    }

    async fn adopt(&mut self, stream: PeerStream, leftover: Vec<u8>) {
        self.report(true).await;
        let task = conn::run(self.spec.sid, stream, leftover, self.queue.clone(), self.received.clone());
        self.conn = Some(ConnTask(tokio::spawn(task)));
        self.redial_at = None;
        self.probe = false;
        self.backoff = REDIAL_MIN;
    }

    async fn dial_if_needed(&mut self) {
        if self.conn.is_none() && self.queue.is_pending() {
            self.dial().await;
        }
    }

    /// `connectOne` + `startConnection`: dial, introduce ourselves, keep the connection only if
    /// our sid is the larger one.
    async fn dial(&mut self) {
        let mut shutdown = self.shutdown.clone();
        let result = tokio::select! {
            _ = shutdown.changed() => return,
            r = tokio::time::timeout(CONNECT_TIMEOUT, self.connect_and_introduce()) => r,
        };
        match result {
            Ok(Ok((stream, leftover))) if self.spec.my_id > self.spec.sid => {
                tracing::info!(my_id = self.spec.my_id, sid = self.spec.sid, "election connection established");
                self.adopt(stream, leftover).await;
            }
            Ok(Ok((stream, _))) => {
                tracing::debug!(
                    my_id = self.spec.my_id,
                    sid = self.spec.sid,
                    "smaller sid: dropping our connection, the peer dials back"
                );
                drop(stream);
                self.report(true).await;
                self.schedule_redial();
            }
            Ok(Err(e)) => {
                tracing::debug!(sid = self.spec.sid, addr = %self.spec.peer_addr, error = %e, "cannot open election channel");
                self.report(false).await;
                self.schedule_redial();
            }
            Err(_) => {
                tracing::debug!(sid = self.spec.sid, addr = %self.spec.peer_addr, "election connect timed out");
                self.report(false).await;
                self.schedule_redial();
            }
        }
    }

    /// Returns the stream and any bytes read past the SASL exchange.
    async fn connect_and_introduce(&self) -> std::io::Result<(PeerStream, Vec<u8>)> {
        use tokio::io::AsyncWriteExt;
        let addr: SocketAddr = tokio::net::lookup_host(&self.spec.peer_addr)
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other("election address resolves to nothing"))?;
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        match self.local_addr(addr).await {
            Some(local) => {
                if let Err(e) = socket.bind(local) {
                    tracing::warn!(sid = self.spec.sid, %local, error = %e, "cannot bind the election dial to our own address");
                }
            }
            None => {
                tracing::debug!(host = self.spec.local_host, "our own address does not resolve for this peer's family")
            }
        }
        let stream = crate::peer_conn::refuse_self_connection(socket.connect(addr).await?)?;
        stream.set_nodelay(true)?;
        let mut stream = self.spec.tls.dial(stream, addr).await?;
        stream.write_all(&self.spec.hello).await?;
        stream.flush().await?;
        let mut leftover = Vec::new();
        self.spec
            .sasl
            .dial(&mut stream, &mut leftover, &self.spec.peer_host)
            .await
            .map_err(|why| std::io::Error::new(std::io::ErrorKind::PermissionDenied, format!("quorum SASL: {why}")))?;
        Ok((stream, leftover))
    }

    /// Our `server.N` host, port 0, in the address family of `peer`.
    async fn local_addr(&self, peer: SocketAddr) -> Option<SocketAddr> {
        let mut addrs = tokio::net::lookup_host(&self.spec.local_host).await.ok()?;
        addrs.find(|a| a.is_ipv4() == peer.is_ipv4())
    }

    fn schedule_redial(&mut self) {
        self.redial_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(REDIAL_MAX);
    }
}

async fn wait_conn(conn: &mut Option<ConnTask>) -> ConnEnd {
    match conn {
        Some(task) => match (&mut task.0).await {
            Ok(end) => end,
            Err(e) => ConnEnd::Io(std::io::Error::other(format!("connection task failed: {e}"))),
        },
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
