//! Client connections: accept with per-IP limits, four-letter words, framing, and the reader/writer
//! pair that moves frames between the socket and the owner task.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use warden_node::{ConnId, Input};
use warden_proto::connect::ConnectRequest;
use warden_proto::frame::{four_letter_word, FrameDecoder};
use warden_proto::header::RequestHeader;
use warden_proto::request::{Request, RequestDecodeError};
use warden_proto::{ErrorCode, Reader, Record};

use crate::config::Config;
use crate::metrics::EdgeCounters;
use crate::owner::{ConnMsg, ConnTx, Event, Frames, CONN_QUEUE};
use crate::sasl::{ConnSasl, SaslServer};
use crate::tls::{self, TlsContext};

/// A connection that has not sent its ConnectRequest within this time is dropped
/// (`zookeeper.nio.sessionlessCnxnTimeout`).
const SESSIONLESS_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes a connection's reader asks the socket for at a time (at least a quarter of it).
const READ_CHUNK: usize = 64 * 1024;

type PerIp = Arc<Mutex<HashMap<IpAddr, u32>>>;

/// What a client listener speaks.
#[derive(Clone)]
pub(crate) enum Wire {
    Plain,
    /// TLS only (`secureClientPort`).
    Tls(Arc<TlsContext>),
    /// Plaintext and TLS on one port (`client.portUnification`): a first byte of 0x16 (a TLS
    /// handshake record) means TLS.
    Unified(Arc<TlsContext>),
}

/// Accepts clients on the client port and, when configured, the secure client port, until
/// shutdown, then ends every connection task. One loop for both, so connection ids are unique.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn accept_loop(
    listener: TcpListener,
    wire: Wire,
    secure: Option<(TcpListener, Arc<TlsContext>)>,
    cfg: Arc<Config>,
    sasl: Arc<SaslServer>,
    edge: Arc<EdgeCounters>,
    events: mpsc::Sender<Event>,
    mut shutdown: watch::Receiver<bool>,
) {
    let per_ip: PerIp = Arc::default();
    let mut tasks = JoinSet::new();
    let mut next_conn: ConnId = 1;
    let secure_accept = || async {
        match &secure {
            Some((l, tls)) => (l.accept().await, Wire::Tls(tls.clone())),
            None => std::future::pending().await,
        }
    };
    loop {
        let (accepted, wire) = tokio::select! {
            accepted = listener.accept() => (accepted, wire.clone()),
            accepted = secure_accept() => accepted,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(guard) = IpSlot::take(&per_ip, peer.ip(), cfg.max_client_cnxns) else {
            tracing::warn!(%peer, limit = cfg.max_client_cnxns, "too many connections from this address (maxClientCnxns); closing");
            EdgeCounters::add(&edge.connection_rejected, 1);
            continue;
        };
        let conn = next_conn;
        next_conn += 1;
        let ctx =
            ConnCtx { peer, conn, cfg: cfg.clone(), sasl: sasl.clone(), edge: edge.clone(), events: events.clone() };
        tasks.spawn(serve(stream, wire, ctx, guard));
    }
    tasks.shutdown().await;
}

/// One connection's place in the per-IP count, released when the connection ends.
struct IpSlot {
    map: PerIp,
    ip: IpAddr,
}

impl IpSlot {
    fn take(map: &PerIp, ip: IpAddr, limit: u32) -> Option<IpSlot> {
        let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_insert(0);
        if limit > 0 && *n >= limit {
            return None;
        }
        *n += 1;
        Some(IpSlot { map: map.clone(), ip })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// What a connection task needs besides its stream.
struct ConnCtx {
    peer: SocketAddr,
    conn: ConnId,
    cfg: Arc<Config>,
    sasl: Arc<SaslServer>,
    edge: Arc<EdgeCounters>,
    events: mpsc::Sender<Event>,
}

async fn serve(stream: TcpStream, wire: Wire, ctx: ConnCtx, _slot: IpSlot) {
    let _ = stream.set_nodelay(true);
    let tls = match wire {
        Wire::Plain => None,
        Wire::Tls(tls) => Some(tls),
        // No byte within the detection timeout: a plaintext client waiting for nothing; the
        // sessionless timeout applies to it as to any.
        Wire::Unified(tls) => match tls::peer::opens_with_tls(&stream, tls.settings().handshake_timeout).await {
            Ok(true) => Some(tls),
            Ok(false) => None,
            Err(_) => return,
        },
    };
    match tls {
        None => {
            let plain = if ctx.peer.ip().is_loopback() {
                &ctx.edge.non_mtls_local_conn
            } else {
                &ctx.edge.non_mtls_remote_conn
            };
            EdgeCounters::add(plain, 1);
            let (rd, wr) = stream.into_split();
            serve_stream(rd, wr, None, ctx).await
        }
        Some(tls) => {
            let Some(slot) = tls.handshake_slot() else {
                tracing::warn!(
                    peer = %ctx.peer,
                    limit = tls.settings().handshake_limit,
                    "too many TLS handshakes in flight (netty.server.outstandingHandshake.limit); closing"
                );
                EdgeCounters::add(&ctx.edge.tls_handshake_exceeded, 1);
                return;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
            let timeout = tls.settings().handshake_timeout;
            let handshake = tokio::time::timeout(timeout, acceptor.accept(stream)).await;
            drop(slot);
            let stream = match handshake {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::warn!(peer = %ctx.peer, error = %e, "TLS handshake failed; closing");
                    EdgeCounters::add(&ctx.edge.unsuccessful_handshake, 1);
                    return;
                }
                Err(_) => {
                    tracing::warn!(peer = %ctx.peer, ms = timeout.as_millis() as u64, "TLS handshake not finished in time; closing");
                    EdgeCounters::add(&ctx.edge.unsuccessful_handshake, 1);
                    return;
                }
            };
            let dn = tls::peer_dn(stream.get_ref().1);
            if let Some(dn) = &dn {
                tracing::debug!(peer = %ctx.peer, %dn, "TLS client certificate verified");
            }
            let (rd, wr) = tokio::io::split(stream);
            serve_stream(rd, wr, dn, ctx).await
        }
    }
}

/// Serves one connection over its (plain or decrypted) stream halves. `x509` is the subject of the
/// client's verified certificate.
async fn serve_stream<R, W>(mut rd: R, wr: W, x509: Option<String>, ctx: ConnCtx)
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let ConnCtx { peer, conn, cfg, sasl, edge, events } = ctx;
    let mut buf = BytesMut::with_capacity(4096);
    let first = tokio::time::timeout(SESSIONLESS_TIMEOUT, read_at_least(&mut rd, &mut buf, 4)).await;
    EdgeCounters::add(&edge.bytes_received, buf.len() as u64);
    if !matches!(first, Ok(Ok(true))) {
        return;
    }
    if let Some(cmd) = four_letter_word([buf[0], buf[1], buf[2], buf[3]]) {
        four_letter(cmd, wr, &cfg, &events).await;
        return;
    }
    let (tx, rx) = mpsc::channel(CONN_QUEUE);
    let queued = Arc::new(AtomicUsize::new(0));
    if events.send(Event::Register { conn, tx: ConnTx { tx, queued: queued.clone() } }).await.is_err() {
        return;
    }
    let permits = Arc::new(Semaphore::new(cfg.max_outstanding_per_connection));
    let (closed_tx, closed_rx) = oneshot::channel();
    let writer = tokio::spawn(write_loop(wr, rx, queued, permits.clone(), closed_tx));
    let who = Who { peer, conn, x509 };
    if let Err(why) = read_loop(rd, buf, who, &cfg, ConnSasl::new(sasl), &edge, &events, permits, closed_rx).await {
        tracing::info!(%peer, conn, %why, "closing client connection");
    }
    let _ = events.send(Event::Node(Input::Disconnected { conn })).await;
    let _ = writer.await;
}

/// Who is on a connection: its address, id and verified certificate subject.
struct Who {
    peer: SocketAddr,
    conn: ConnId,
    x509: Option<String>,
}

async fn read_at_least(rd: &mut (impl AsyncReadExt + Unpin), buf: &mut BytesMut, n: usize) -> std::io::Result<bool> {
    while buf.len() < n {
        if rd.read_buf(buf).await? == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn four_letter(
    cmd: warden_proto::frame::FourLetterWord,
    mut wr: impl AsyncWrite + Unpin,
    cfg: &Config,
    events: &mpsc::Sender<Event>,
) {
    let text = if cfg.four_letter_allowed(cmd.name()) {
        let (reply, rx) = oneshot::channel();
        if events.send(Event::FourLetter { cmd, reply }).await.is_err() {
            return;
        }
        rx.await.unwrap_or_default()
    } else {
        format!("{} is not executed because it is not in the whitelist.\n", cmd.name())
    };
    let _ = wr.write_all(text.as_bytes()).await;
    let _ = wr.shutdown().await;
}

#[allow(clippy::too_many_arguments)]
async fn read_loop(
    mut rd: impl AsyncRead + Unpin,
    mut buf: BytesMut,
    who: Who,
    cfg: &Config,
    mut sasl: ConnSasl,
    edge: &EdgeCounters,
    events: &mpsc::Sender<Event>,
    permits: Arc<Semaphore>,
    mut closed: oneshot::Receiver<()>,
) -> Result<(), String> {
    let Who { peer, conn, mut x509 } = who;
    let mut decoder = FrameDecoder::new(cfg.jute_max_buffer);
    let mut connected = false;
    let deadline = tokio::time::Instant::now() + SESSIONLESS_TIMEOUT;
    loop {
        // The requests one read brought go to the owner as one event, in order.
        let mut inputs = Vec::new();
        let decoded: Result<(), String> = async {
            while let Some(frame) = decoder.decode(&mut buf).map_err(|e| format!("bad frame: {e}"))? {
                let input = if connected {
                    // Bound the requests in flight: stop reading until replies return permits,
                    // which the requests decoded so far will return once the owner has them.
                    if let Ok(permit) = permits.try_acquire() {
                        permit.forget();
                    } else {
                        send_inputs(events, &mut inputs).await?;
                        permits.acquire().await.map_err(|_| "closed".to_string())?.forget();
                    }
                    match decode_request(conn, &frame)? {
                        // The SASL exchange steps here, in arrival order; the node gets the outcome.
                        Input::Request { conn, xid, req: Request::Sasl(r) } => {
                            Input::Sasl { conn, xid, outcome: sasl.step(conn, &r.token) }
                        }
                        input => input,
                    }
                } else {
                    connected = true;
                    let req = ConnectRequest::from_bytes(&frame).map_err(|e| format!("bad ConnectRequest: {e}"))?;
                    Input::Connect { conn, addr: peer, req, x509: x509.take() }
                };
                inputs.push(input);
            }
            Ok(())
        }
        .await;
        // What decoded before a bad frame is still served, as if read one by one.
        send_inputs(events, &mut inputs).await?;
        decoded?;
        let sessionless = async {
            if connected {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep_until(deadline).await
            }
        };
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            // Room for many pipelined requests per read call.
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) => return Ok(()),
                Ok(n) => EdgeCounters::add(&edge.bytes_received, n as u64),
                // A TLS client that closed its socket without a close_notify: a close all the same.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(format!("read error: {e}")),
            },
            _ = &mut closed => return Ok(()),
            _ = sessionless => {
                EdgeCounters::add(&edge.sessionless_connections_expired, 1);
                return Err("no ConnectRequest within the sessionless timeout".into());
            }
        }
    }
}

/// Hands `inputs` to the owner (one event), leaving it empty.
async fn send_inputs(events: &mpsc::Sender<Event>, inputs: &mut Vec<Input>) -> Result<(), String> {
    let event = match inputs.len() {
        0 => return Ok(()),
        1 => Event::Node(inputs.pop().expect("one input")),
        _ => Event::Inputs(std::mem::take(inputs)),
    };
    events.send(event).await.map_err(|_| "server stopping".to_string())
}

/// Turns a request frame into the node's input. Unknown opcodes and undecodable bodies become
/// `Invalid`, which the node answers with ZooKeeper's error before closing; a frame too short for
/// its header ends the connection here.
fn decode_request(conn: ConnId, frame: &Bytes) -> Result<Input, String> {
    // Over the frame's `Bytes`: a setData's data stays in the frame rather than being copied.
    let mut r = Reader::over_bytes(frame);
    let hdr = RequestHeader::decode(&mut r).map_err(|e| format!("bad request header: {e}"))?;
    Ok(match Request::decode_from(hdr.op_type, &mut r) {
        Ok(req) => Input::Request { conn, xid: hdr.xid, req },
        Err(RequestDecodeError::UnknownOpcode(op)) => {
            tracing::info!(conn, op, "unknown opcode");
            Input::Invalid { conn, xid: hdr.xid, err: ErrorCode::Unimplemented }
        }
        Err(RequestDecodeError::Malformed(e)) => {
            tracing::info!(conn, op = hdr.op_type, error = %e, "undecodable request body");
            Input::Invalid { conn, xid: hdr.xid, err: ErrorCode::MarshallingError }
        }
    })
}

async fn write_loop(
    wr: impl AsyncWrite + Unpin,
    mut rx: mpsc::Receiver<ConnMsg>,
    queued: Arc<AtomicUsize>,
    permits: Arc<Semaphore>,
    closed: oneshot::Sender<()>,
) {
    let mut w = BufWriter::with_capacity(64 * 1024, wr);
    'outer: while let Some(mut msg) = rx.recv().await {
        loop {
            match msg {
                ConnMsg::Frames(Frames { bytes, frames, completes }) => {
                    if w.write_all(&bytes).await.is_err() {
                        break 'outer;
                    }
                    queued.fetch_sub(frames as usize, Ordering::AcqRel);
                    if completes > 0 {
                        permits.add_permits(completes as usize);
                    }
                }
                ConnMsg::Close => break 'outer,
            }
            match rx.try_recv() {
                Ok(m) => msg = m,
                Err(_) => break,
            }
        }
        if w.flush().await.is_err() {
            break;
        }
    }
    let _ = w.flush().await;
    let _ = w.shutdown().await;
    // Wake a reader waiting for a permit: nothing will return permits any more.
    permits.close();
    let _ = closed.send(());
}
