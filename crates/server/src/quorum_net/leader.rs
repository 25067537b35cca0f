//! The leader's side of the quorum port: accepts learner connections, registers each by the sid
//! in its first packet (FOLLOWERINFO / OBSERVERINFO carrying LearnerInfo, as `LearnerHandler.run`
//! requires), and multiplexes them into one event stream for the task owning the ZAB `Leader`.
//!
//! Registration is decided on the consumer's side of the event channel, in event order, so the
//! consumer's view is always consistent: when a new connection from a known sid arrives, the old
//! one is closed and its `Disconnected` comes before the new connection's first packet; `send`
//! addresses the connection whose packets the consumer has seen.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use warden_proto::quorum::{packet_type as pt, LearnerInfo, QuorumPacket};
use warden_quorum::Sid;
use warden_tree::DataTree;

use super::conn::{self, ConnEnd, Incoming, Outgoing, PacketReader};
use super::stats::{LearnerLink, LinkStats};
use super::{QuorumNetConfig, SendError};

/// What the leader's consumer receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderEvent {
    /// A packet from learner `from`; a connection's first one is its FOLLOWERINFO / OBSERVERINFO.
    Packet { from: Sid, packet: QuorumPacket },
    /// The connection of `sid` ended (once per connection; nothing of it follows).
    Disconnected { sid: Sid },
    /// The connection of `sid` ended because the txns of a DIFF could not be read from the
    /// on-disk log (`send_log_diff`); its `Disconnected` follows.
    LogDiffFailed { sid: Sid },
}

/// What connection tasks report.
enum Raw {
    Open { sid: Sid, first: QuorumPacket, conn: ConnHandle },
    Packet { sid: Sid, id: u64, packet: QuorumPacket },
    Closed { sid: Sid, id: u64, why: String, log_diff_failed: bool },
}

/// The consumer's hold on a registered connection; dropping it closes the connection.
struct ConnHandle {
    id: u64,
    peer: SocketAddr,
    out: mpsc::Sender<Outgoing>,
    /// Counted by the owner (queueing) and the connection's reader and writer.
    stats: Arc<LinkStats>,
    _kill: oneshot::Sender<()>,
}

/// A running quorum port (leader side).
pub struct LeaderNet {
    local_addr: SocketAddr,
    events: mpsc::Receiver<Raw>,
    conns: BTreeMap<Sid, ConnHandle>,
    pending: VecDeque<LeaderEvent>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl LeaderNet {
    /// Binds the quorum port at `bind` and starts accepting learners.
    pub async fn start(bind: SocketAddr, cfg: QuorumNetConfig) -> anyhow::Result<LeaderNet> {
        let listener = TcpListener::bind(bind).await.with_context(|| format!("binding quorum port {bind}"))?;
        let local_addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (events_tx, events) = mpsc::channel(cfg.recv_queue.max(1));
        let mut tasks = JoinSet::new();
        tasks.spawn(accept_loop(listener, Arc::new(cfg), events_tx, shutdown_rx));
        tracing::info!(addr = %local_addr, "quorum port listening");
        Ok(LeaderNet { local_addr, events, conns: BTreeMap::new(), pending: VecDeque::new(), shutdown, tasks })
    }

    /// The bound quorum address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The next event; `None` once the shell has stopped. Cancel-safe.
    pub async fn recv(&mut self) -> Option<LeaderEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            let raw = self.events.recv().await?;
            self.absorb(raw);
        }
    }

    fn absorb(&mut self, raw: Raw) {
        match raw {
            Raw::Open { sid, first, conn } => {
                tracing::info!(sid, peer = %conn.peer, "learner connected");
                if let Some(old) = self.conns.insert(sid, conn) {
                    tracing::info!(sid, old_peer = %old.peer, "a new connection replaces the learner's old one");
                    self.pending.push_back(LeaderEvent::Disconnected { sid });
                }
                self.pending.push_back(LeaderEvent::Packet { from: sid, packet: first });
            }
            Raw::Packet { sid, id, packet } => {
                if self.is_current(sid, id) {
                    self.pending.push_back(LeaderEvent::Packet { from: sid, packet });
                }
            }
            Raw::Closed { sid, id, why, log_diff_failed } => {
                if self.is_current(sid, id) {
                    if log_diff_failed {
                        self.pending.push_back(LeaderEvent::LogDiffFailed { sid });
                    }
                    self.close(sid, &why);
                }
            }
        }
    }

    fn is_current(&self, sid: Sid, id: u64) -> bool {
        self.conns.get(&sid).is_some_and(|c| c.id == id)
    }

    /// Queues `packet` to learner `to`. A full queue closes that connection (the learner reads too
    /// slowly); either error is followed by `Disconnected` if the connection was known.
    pub fn send(&mut self, to: Sid, packet: QuorumPacket) -> Result<(), SendError> {
        self.send_item(to, Outgoing::Packet(packet))
    }

    /// Queues the snapshot stream that must follow a SNAP packet just sent to `to`: `tree` and
    /// `sessions` as ZooKeeper's `ZKDatabase.serializeSnapshot`, then "BenWasHere", raw in the
    /// stream. Serialised by the connection's writer (off the caller's task).
    pub fn send_snapshot(&mut self, to: Sid, tree: DataTree, sessions: Vec<(i64, i32)>) -> Result<(), SendError> {
        self.send_item(to, Outgoing::Snapshot(Box::new((tree, sessions))))
    }

    /// Queues the txns `(after, upto]` of the on-disk log in `data`, to be written as PROPOSAL +
    /// COMMIT pairs right after the DIFF packet just sent to `to` and before anything queued
    /// later. The connection's writer reads them a chunk at a time; if it cannot, the connection
    /// ends with `LogDiffFailed` then `Disconnected`.
    pub fn send_log_diff(
        &mut self,
        to: Sid,
        data: warden_storage::DataDir,
        after: i64,
        upto: i64,
    ) -> Result<(), SendError> {
        self.send_item(to, Outgoing::LogDiff(Box::new(conn::LogDiffJob { data, after, upto })))
    }

    fn send_item(&mut self, to: Sid, item: Outgoing) -> Result<(), SendError> {
        let Some(conn) = self.conns.get(&to) else { return Err(SendError::NotConnected) };
        if let Outgoing::Packet(p) = &item {
            conn.stats.queued(p);
        }
        let result = conn.out.try_send(item);
        if let Err(
            mpsc::error::TrySendError::Full(Outgoing::Packet(p))
            | mpsc::error::TrySendError::Closed(Outgoing::Packet(p)),
        ) = &result
        {
            conn.stats.unqueued(p);
        }
        match result {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.close(to, "send queue full (learner reads too slowly)");
                Err(SendError::QueueFull)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.close(to, "connection ended");
                Err(SendError::NotConnected)
            }
        }
    }

    /// Closes the connection of `sid`; its `Disconnected` follows. False if none was open.
    pub fn disconnect(&mut self, sid: Sid) -> bool {
        self.close(sid, "closed by the leader")
    }

    fn close(&mut self, sid: Sid, why: &str) -> bool {
        match self.conns.remove(&sid) {
            Some(conn) => {
                tracing::info!(sid, peer = %conn.peer, why, "learner connection closed");
                self.pending.push_back(LeaderEvent::Disconnected { sid });
                true
            }
            None => false,
        }
    }

    /// The learners with a registered connection, in sid order.
    pub fn connected(&self) -> Vec<Sid> {
        self.conns.keys().copied().collect()
    }

    /// The remote address of learner `sid`'s connection.
    pub fn peer_addr(&self, sid: Sid) -> Option<SocketAddr> {
        self.conns.get(&sid).map(|c| c.peer)
    }

    /// The figures of learner `sid`'s connection (ZooKeeper's `LearnerHandler.getLearnerHandlerInfo`).
    pub fn learner_link(&self, sid: Sid) -> Option<LearnerLink> {
        self.conns.get(&sid).map(|c| c.stats.snapshot())
    }

    /// Zeroes the packet and request counts of learner `sid`'s connection and forgets its last
    /// zxid (ZooKeeper's `LearnerHandler.resetObserverConnectionStats`).
    pub fn reset_learner_link(&self, sid: Sid) {
        if let Some(c) = self.conns.get(&sid) {
            c.stats.reset();
        }
    }

    /// Stops as [`stop`](Self::stop), but first lets every connection write what is queued for
    /// it and close its side, for at most `within`. A leader that hands over to a designated one
    /// stops so: its last COMMITANDACTIVATE must reach the learners, which then leave for the new
    /// leader (ZooKeeper's leader lingers until they do).
    pub async fn stop_flushed(mut self, within: std::time::Duration) {
        let mut open = BTreeSet::new();
        let mut kills = Vec::new();
        for (_, c) in std::mem::take(&mut self.conns) {
            // Without its queue's sender the writer writes what is queued, then shuts down.
            let ConnHandle { id, out, _kill: kill, .. } = c;
            drop(out);
            open.insert(id);
            kills.push(kill);
        }
        let events = &mut self.events;
        let flushed = async {
            while !open.is_empty() {
                match events.recv().await {
                    Some(Raw::Closed { id, .. }) => {
                        open.remove(&id);
                    }
                    Some(_) => {}
                    None => break,
                }
            }
        };
        if tokio::time::timeout(within, flushed).await.is_err() {
            tracing::warn!(?within, "learners had not taken everything queued when the quorum port stopped");
        }
        drop(kills);
        self.stop().await;
    }

    /// Stops accepting, closes every connection and waits for every task to end.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        self.conns.clear();
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(e) = joined {
                if e.is_panic() {
                    tracing::error!(error = %e, "quorum port task panicked");
                }
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    cfg: Arc<QuorumNetConfig>,
    events: mpsc::Sender<Raw>,
    shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    let next_id = AtomicU64::new(1);
    let mut conns = JoinSet::new();
    let stop = conn::stopped(shutdown.clone());
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        let id = next_id.fetch_add(1, Ordering::Relaxed);
                        let task = serve(stream, peer, id, cfg.clone(), events.clone(), shutdown.clone());
                        conns.spawn(async move {
                            task.await;
                            drop(slot);
                        });
                    }
                    Err(_) => tracing::warn!(%peer, limit = cfg.max_connections, "too many quorum connections; closing"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "quorum port accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
        }
    }
    // Connection tasks watch the same shutdown signal.
    while conns.join_next().await.is_some() {}
}

/// One learner connection: handshake, registration, then packets until it ends.
async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    cfg: Arc<QuorumNetConfig>,
    events: mpsc::Sender<Raw>,
    shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        _ = conn::stopped(shutdown) => {}
        _ = serve_inner(stream, peer, id, cfg, events) => {}
    }
}

async fn serve_inner(
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    cfg: Arc<QuorumNetConfig>,
    events: mpsc::Sender<Raw>,
) {
    // ZooKeeper's LearnerHandler notes the time it is made, right after the accept.
    let established_ms = crate::wall_ms();
    let _ = stream.set_nodelay(true);
    let mut stream = match cfg.tls.accept(stream, peer).await {
        Ok(s) => s,
        Err(why) => return tracing::warn!(%peer, %why, "quorum connection refused"),
    };
    let mut leftover = Vec::new();
    match cfg.sasl.accept(&mut stream, &mut leftover, cfg.handshake_timeout).await {
        Ok(Some(user)) => tracing::info!(%peer, %user, "learner authenticated (quorum SASL)"),
        Ok(None) => {}
        Err(why) => return tracing::warn!(%peer, %why, "quorum connection refused"),
    }
    let (rd, wr) = stream.into_split();
    let mut reader = PacketReader::new(rd, cfg.max_buffer).with_buffered(leftover);
    let first = match tokio::time::timeout(cfg.handshake_timeout, reader.next()).await {
        Ok(Ok(p)) => p,
        Ok(Err(end)) => {
            tracing::warn!(%peer, error = %end, "learner connection ended before its first packet");
            return;
        }
        Err(_) => {
            tracing::warn!(%peer, timeout = ?cfg.handshake_timeout, "no first packet from learner in time; closing");
            return;
        }
    };
    let sid = match learner_sid(&first) {
        Ok(sid) => sid,
        Err(why) => {
            tracing::warn!(%peer, why, "bad first packet on the quorum port; closing");
            return;
        }
    };
    let (out_tx, out_rx) = mpsc::channel(cfg.send_queue.max(1));
    let (kill_tx, kill_rx) = oneshot::channel();
    let stats = Arc::new(LinkStats::new(peer, established_ms));
    let handle = ConnHandle { id, peer, out: out_tx, stats: stats.clone(), _kill: kill_tx };
    if events.send(Raw::Open { sid, first, conn: handle }).await.is_err() {
        return;
    }
    let wrap = |incoming| match incoming {
        Incoming::Packet(packet) => {
            stats.received(&packet);
            Some(Raw::Packet { sid, id, packet })
        }
        Incoming::Snapshot { .. } => None,
    };
    let end = conn::run(reader, wr, out_rx, kill_rx, events.clone(), wrap, cfg.write_timeout, Some(&stats)).await;
    match &end {
        ConnEnd::Killed | ConnEnd::ConsumerGone => tracing::debug!(sid, %peer, %end, "learner connection ended"),
        _ => tracing::warn!(sid, %peer, error = %end, "learner connection ended"),
    }
    let log_diff_failed = matches!(end, ConnEnd::LogDiff(_));
    let _ = events.send(Raw::Closed { sid, id, why: end.to_string(), log_diff_failed }).await;
}

/// The sid a first packet announces (`LearnerHandler.run`).
fn learner_sid(first: &QuorumPacket) -> Result<Sid, String> {
    if first.packet_type != pt::FOLLOWERINFO && first.packet_type != pt::OBSERVERINFO {
        let name = pt::name(first.packet_type).unwrap_or("unknown");
        return Err(format!("first packet is {name} ({}), not FOLLOWERINFO or OBSERVERINFO", first.packet_type));
    }
    let data = first.data.as_deref().ok_or("LearnerInfo missing (pre-3.4 learner)")?;
    let info = LearnerInfo::decode_lenient(data).map_err(|e| format!("LearnerInfo of {} bytes: {e}", data.len()))?;
    Ok(info.server_id)
}
