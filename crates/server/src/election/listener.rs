//! The election port listener (`QuorumCnxManager.Listener` + `handleConnection`): reads each
//! initiator's [`InitialMessage`] and routes the socket by sid.
//!
//! - a larger sid keeps its connection: the socket goes to that peer's link;
//! - a smaller sid loses: the socket is closed and the link dials back;
//! - a sid outside the configuration: a link to the address it introduced itself with is
//!   started ([`Peers::ensure`]) and the rules above apply;
//! - our own sid or a malformed introduction: closed and logged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use warden_proto::election::{InitialMessage, INITIAL_ADDR_MAX};
use warden_quorum::Sid;

use super::link::LinkEvent;
use super::peers::Peers;
use crate::sasl::quorum::QuorumSasl;
use crate::tls::peer::PeerTls;

/// How long an initiator may take to introduce itself (ZooKeeper uses the socket timeout,
/// `initLimit * tickTime`).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Introductions being read at once; further connections are closed until one finishes.
pub(crate) const MAX_PENDING_HANDSHAKES: usize = 64;
/// The longest introduction: version, sid, length and the largest address.
const INITIAL_MESSAGE_MAX: usize = 8 + 8 + 4 + INITIAL_ADDR_MAX;

pub(crate) struct Listener {
    pub my_id: Sid,
    pub listener: TcpListener,
    pub peers: Arc<Peers>,
    pub shutdown: watch::Receiver<bool>,
    pub tls: PeerTls,
    pub sasl: QuorumSasl,
}

impl Listener {
    /// Accepts until shutdown; pending handshakes are aborted with the listener.
    pub(crate) async fn run(mut self) {
        let mut handshakes = JoinSet::new();
        loop {
            tokio::select! {
                _ = self.shutdown.changed() => break,
                Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) if handshakes.len() < MAX_PENDING_HANDSHAKES => {
                        tracing::debug!(%peer, "election connection request");
                        handshakes.spawn(handshake(
                            self.my_id,
                            stream,
                            peer,
                            (self.tls.clone(), self.sasl.clone()),
                            self.peers.clone(),
                        ));
                    }
                    Ok((_, peer)) => tracing::warn!(%peer, "too many election handshakes in progress; closing"),
                    Err(e) => {
                        tracing::warn!(error = %e, "election accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
            if *self.shutdown.borrow() {
                break;
            }
        }
    }
}

/// Reads the introduction and routes the socket.
async fn handshake(
    my_id: Sid,
    stream: TcpStream,
    peer: SocketAddr,
    (tls, sasl): (PeerTls, QuorumSasl),
    peers: Arc<Peers>,
) {
    let _ = stream.set_nodelay(true);
    let mut stream = match tls.accept(stream, peer).await {
        Ok(s) => s,
        Err(why) => return tracing::warn!(%peer, %why, "election connection refused"),
    };
    let peer = Some(peer);
    let (msg, mut leftover) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read_initial(&mut stream)).await {
        Ok(Ok(ok)) => ok,
        Ok(Err(why)) => return tracing::warn!(?peer, %why, "bad election introduction; closing"),
        Err(_) => return tracing::warn!(?peer, "no election introduction in time; closing"),
    };
    // quorum.auth.*: after the introduction, before anything else (`QuorumCnxManager.handleConnection`).
    match sasl.accept(&mut stream, &mut leftover, HANDSHAKE_TIMEOUT).await {
        Ok(Some(user)) => tracing::debug!(?peer, %user, "election peer authenticated (quorum SASL)"),
        Ok(None) => {}
        Err(why) => return tracing::warn!(?peer, sid = msg.sid(), %why, "election connection refused"),
    }
    let Some(addresses) = msg.addresses() else {
        return tracing::warn!(?peer, ?msg, "badly formed election address; closing");
    };
    let sid = msg.sid();
    if sid == my_id {
        return tracing::warn!(?peer, sid, "election connection from a server with our own id; closing");
    }
    // A server outside the configuration (one about to be added by a reconfig) gets a link
    // to the election address it gave, as ZooKeeper answers it too.
    let known = peers.get(sid);
    let link = match (known, addresses.first()) {
        (Some(h), _) => h.link,
        (None, Some((host, port))) => match peers.ensure(sid, host, *port) {
            Some(h) => {
                tracing::info!(?peer, sid, host, port, "election connection from a server outside the configuration");
                h.link
            }
            None => return,
        },
        (None, None) => {
            return tracing::warn!(?peer, sid, "election connection from an unknown sid without an address; closing")
        }
    };
    let event = if sid < my_id {
        drop(stream);
        LinkEvent::DialBack
    } else {
        LinkEvent::Inbound { stream, leftover }
    };
    if link.try_send(event).is_err() {
        tracing::warn!(sid, "election link busy; dropping the connection (the peer retries)");
    }
}

/// Reads until a whole [`InitialMessage`] arrived; returns it with any bytes after it.
async fn read_initial(stream: &mut (impl AsyncRead + Unpin)) -> Result<(InitialMessage, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(64);
    loop {
        match InitialMessage::decode(&buf) {
            Ok(Some((msg, used))) => return Ok((msg, buf.split_off(used))),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if buf.len() > INITIAL_MESSAGE_MAX + 4096 {
            return Err("introduction too long".into());
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) => return Err("closed before introducing itself".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}
