//! Client connections: accept with per-IP limits, four-letter words, framing, and the reader/writer
//! pair that moves frames between the socket and the owner task.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use warden_node::{ConnId, Input};
use warden_proto::connect::ConnectRequest;
use warden_proto::frame::{four_letter_word, FrameDecoder};
use warden_proto::header::RequestHeader;
use warden_proto::request::{Request, RequestDecodeError};
use warden_proto::{ErrorCode, Reader, Record};

use crate::config::Config;
use crate::conn_queue::{conn_queue, ConnRx, ConnTx};
use crate::metrics::EdgeCounters;
use crate::owner::{ConnMsg, Event, Frames};
use crate::sasl::{ConnSasl, SaslServer};
use crate::tls::{self, TlsContext};

/// A connection that has not sent its ConnectRequest within this time is dropped
/// (`zookeeper.nio.sessionlessCnxnTimeout`).
const SESSIONLESS_TIMEOUT: Duration = Duration::from_secs(10);

/// `accept` errors for a process (EMFILE) or system (ENFILE) out of file descriptors.
const EMFILE: i32 = rustix::io::Errno::MFILE.raw_os_error();
const ENFILE: i32 = rustix::io::Errno::NFILE.raw_os_error();

/// Bytes a busy connection's reader asks the socket for at a time (at least a quarter of it).
const READ_CHUNK: usize = 64 * 1024;
/// The read buffer of a connection that was idle: requests come one at a time (pings, a
/// watch), so it starts small and grows to [`READ_CHUNK`] once a read fills it.
const IDLE_READ: usize = 1024;
/// Batches queued behind one are appended to it up to this size, for one write.
const COALESCE: usize = 64 * 1024;

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
    let shared = Arc::new(Shared { cfg, sasl, edge, events, per_ip: PerIp::default() });
    let (cfg, edge) = (&shared.cfg, &shared.edge);
    let mut tasks = JoinSet::new();
    let mut next_conn: ConnId = 1;
    let mut last_fd_warning: Option<tokio::time::Instant> = None;
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
            Err(e) if matches!(e.raw_os_error(), Some(code) if code == EMFILE || code == ENFILE) => {
                // The connection waits in the kernel's backlog (or is refused once that is full)
                // until a descriptor is free; say why, at most once a second.
                let now = tokio::time::Instant::now();
                if last_fd_warning.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
                    last_fd_warning = Some(now);
                    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
                    tracing::error!(
                        error = %e,
                        limit = ?limit,
                        "cannot accept client connections: out of file descriptors (raise `ulimit -n`, RLIMIT_NOFILE)"
                    );
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if !take_ip_slot(&shared.per_ip, peer.ip(), cfg.max_client_cnxns) {
            tracing::warn!(%peer, limit = cfg.max_client_cnxns, "too many connections from this address (maxClientCnxns); closing");
            EdgeCounters::add(&edge.connection_rejected, 1);
            continue;
        }
        let conn = next_conn;
        next_conn += 1;
        let ctx = ConnCtx { peer, conn, shared: shared.clone() };
        match wire {
            // The task is the plain connection's own future, not one sized for TLS as well.
            Wire::Plain => tasks.spawn(serve_plain(stream, ctx)),
            wire => tasks.spawn(Box::pin(serve(stream, wire, ctx))),
        };
    }
    tasks.shutdown().await;
}

/// Takes one of `ip`'s places in the per-IP count (`maxClientCnxns`; 0 is no limit); false when
/// none is left. [`ConnCtx`] gives it back.
fn take_ip_slot(map: &PerIp, ip: IpAddr, limit: u32) -> bool {
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    let n = m.entry(ip).or_insert(0);
    if limit > 0 && *n >= limit {
        return false;
    }
    *n += 1;
    true
}

/// What every connection task shares, behind one `Arc`: a connection's task holds one pointer
/// for all of it.
struct Shared {
    cfg: Arc<Config>,
    sasl: Arc<SaslServer>,
    edge: Arc<EdgeCounters>,
    events: mpsc::Sender<Event>,
    per_ip: PerIp,
}

/// What a connection task needs besides its stream. It holds the connection's place in the
/// per-IP count and gives it back when dropped, with the task. (Implementing `Drop` also makes
/// an async block that uses any of its fields own all of it.)
struct ConnCtx {
    peer: SocketAddr,
    conn: ConnId,
    shared: Arc<Shared>,
}

impl std::ops::Deref for ConnCtx {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for ConnCtx {
    fn drop(&mut self) {
        let mut m = self.shared.per_ip.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.peer.ip()) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.peer.ip());
            }
        }
    }
}

/// A plaintext connection: counted, then served.
fn serve_plain(stream: TcpStream, ctx: ConnCtx) -> impl std::future::Future<Output = ()> + Send {
    let _ = stream.set_nodelay(true);
    let plain =
        if ctx.peer.ip().is_loopback() { &ctx.edge.non_mtls_local_conn } else { &ctx.edge.non_mtls_remote_conn };
    EdgeCounters::add(plain, 1);
    let sock = Arc::new(stream);
    serve_stream(PlainRead(sock.clone()), PlainWrite(sock), None, ctx)
}

/// A connection on a TLS or unified port.
async fn serve(stream: TcpStream, wire: Wire, ctx: ConnCtx) {
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
        None => serve_plain(stream, ctx).await,
        Some(tls) => serve_tls(stream, tls, ctx).await,
    }
}

/// The TLS part of [`serve`]: the handshake, then the decrypted stream.
async fn serve_tls(stream: TcpStream, tls: Arc<TlsContext>, ctx: ConnCtx) {
    let _ = stream.set_nodelay(true);
    {
        {
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
            serve_stream(Buffered(rd), wr, dn, ctx).await
        }
    }
}

/// A client stream's read half. A plain socket reports readiness without a buffer, so an idle
/// connection holds none while it waits ([`read_loop`] allocates one only once bytes are
/// there, and drops it once they are all decoded); a TLS stream has no readiness of its own
/// (rustls buffers inside it), so it is always "ready" and the read waits with the buffer.
trait ClientRead: AsyncRead + Unpin + Send {
    fn ready(&self) -> impl std::future::Future<Output = std::io::Result<()>> + Send;
    /// The plain socket under it, which the owner may write notifications to directly
    /// (`ConnTx::push_frames`); `None` for TLS.
    fn socket(&self) -> Option<Arc<TcpStream>>;
}

/// A plain connection's read half: the socket is shared by both halves and the connection's
/// queue (for the owner's direct writes), where `into_split` would keep it to the halves.
struct PlainRead(Arc<TcpStream>);

/// A plain connection's write half (see [`PlainRead`]).
struct PlainWrite(Arc<TcpStream>);

impl AsyncRead for PlainRead {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let want = buf.remaining();
        loop {
            std::task::ready!(self.0.poll_read_ready(cx))?;
            // As tokio's own read: a read shorter than asked drained the socket, so its readiness
            // is cleared (`try_io` clears what it saw before the read on a WouldBlock, so bytes
            // that came after are not missed). Otherwise the next wait would end at once and the
            // connection would set up its read buffer only to find nothing there.
            let mut read = 0;
            let r = self.0.try_io(tokio::io::Interest::READABLE, || {
                read = self.0.try_read_buf(buf)?;
                if read > 0 && read < want {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                Ok(())
            });
            match r {
                Ok(()) => return std::task::Poll::Ready(Ok(())),
                // Our own WouldBlock after a short read: the bytes are in `buf`.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && read > 0 => {
                    return std::task::Poll::Ready(Ok(()))
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return std::task::Poll::Ready(Err(e)),
            }
        }
    }
}

impl ClientRead for PlainRead {
    /// Polls the socket's readiness directly: `readable()`'s future is 184 bytes, and every idle
    /// connection's task would hold it while it waits.
    fn ready(&self) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        std::future::poll_fn(|cx| self.0.poll_read_ready(cx))
    }

    fn socket(&self) -> Option<Arc<TcpStream>> {
        Some(self.0.clone())
    }
}

impl AsyncWrite for PlainWrite {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        loop {
            std::task::ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return std::task::Poll::Ready(r),
            }
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    /// Shuts the sending side down (a FIN after what was written), as `OwnedWriteHalf` does.
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(rustix::net::shutdown(&*self.0, rustix::net::Shutdown::Write).map_err(Into::into))
    }
}

/// A read half with no readiness of its own.
struct Buffered<R>(R);

impl<R: AsyncRead + Unpin> AsyncRead for Buffered<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<R: AsyncRead + Unpin + Send> ClientRead for Buffered<R> {
    fn ready(&self) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        std::future::ready(Ok(()))
    }

    fn socket(&self) -> Option<Arc<TcpStream>> {
        None
    }
}

/// Serves one connection over its (plain or decrypted) stream halves. `x509` is the subject of the
/// client's verified certificate.
///
/// Not an `async fn`: an async block holds what it captures once, where an `async fn` keeps its
/// arguments and their moved copies both, and this future is most of an idle connection's cost.
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn serve_stream<R, W>(
    mut rd: R,
    mut wr: W,
    mut x509: Option<String>,
    ctx: ConnCtx,
) -> impl std::future::Future<Output = ()> + Send
where
    R: ClientRead + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    async move {
        let Some(buf) = Box::pin(opening(&mut rd, &mut wr, &ctx)).await else { return };
        let (tx, rx) = conn_queue(rd.socket());
        // Only a flag outlives the awaits below: the task's state is sized for what is kept across
        // each await, and a kept `Result` would be.
        let client_closed = {
            let who = Who { peer: &ctx.peer, conn: ctx.conn, x509: &mut x509 };
            let sasl = ConnSasl::new(ctx.sasl.clone());
            match serve_session(rd, &mut wr, tx, &rx, buf, who, &ctx.cfg, sasl, &ctx.edge, &ctx.events).await {
                Err(Ended::Unregistered) => return,
                Err(Ended::Error(why)) => {
                    tracing::info!(peer = %ctx.peer, conn = ctx.conn, %why, "closing client connection");
                    false
                }
                Ok(()) => true,
            }
        };
        let _ = send_event(&ctx.events, Event::Node(Input::Disconnected { conn: ctx.conn })).await;
        if client_closed {
            // The client closed its side: what was queued for it before the owner hears of it is
            // still written, as a separate writer would.
            Box::pin(drain(&mut wr, &rx)).await;
        }
        let _ = wr.flush().await;
        let _ = wr.shutdown().await;
    }
}

/// Reads a connection's first bytes: a four-letter word is answered here (`None`); a session's
/// first frame starts with them (`Some`, the bytes read so far). `None` too when the connection
/// closed or sent nothing within the sessionless timeout. Its own future, answering by value:
/// whatever [`serve_stream`]'s block borrows or keeps across an await stays in the task's state
/// for the connection's life.
async fn opening(
    rd: &mut (impl AsyncReadExt + Unpin),
    wr: &mut (impl AsyncWrite + Unpin),
    ctx: &ConnCtx,
) -> Option<BytesMut> {
    let mut buf = BytesMut::with_capacity(IDLE_READ);
    let first = tokio::time::timeout(SESSIONLESS_TIMEOUT, read_at_least(rd, &mut buf, 4)).await;
    EdgeCounters::add(&ctx.edge.bytes_received, buf.len() as u64);
    if !matches!(first, Ok(Ok(true))) {
        return None;
    }
    match four_letter_word([buf[0], buf[1], buf[2], buf[3]]) {
        Some(cmd) => {
            four_letter(cmd, wr, &ctx.cfg, &ctx.events).await;
            None
        }
        None => Some(buf),
    }
}

/// Writes what the owner queued until it closes the connection (or the write fails).
async fn drain(wr: &mut (impl AsyncWrite + Unpin), rx: &ConnRx) {
    while let Some(ConnMsg::Frames(f)) = rx.recv().await {
        match write_batch(wr, rx, f).await {
            Ok((frames, _, close)) => {
                rx.written(frames);
                if close {
                    break;
                }
            }
            Err(_) => break,
        }
    }
}

/// Who is on a connection: its address, id and verified certificate subject (borrowed from
/// [`serve_stream`], which holds them anyway: a copy would add to every connection's task).
struct Who<'a> {
    peer: &'a SocketAddr,
    conn: ConnId,
    x509: &'a mut Option<String>,
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

/// Why [`serve_session`] ended, other than the client or the owner closing the connection.
enum Ended {
    /// The owner is gone before the connection could be registered with it.
    Unregistered,
    Error(String),
}

impl From<String> for Ended {
    fn from(why: String) -> Self {
        Ended::Error(why)
    }
}

impl From<&str> for Ended {
    fn from(why: &str) -> Self {
        Ended::Error(why.to_string())
    }
}

/// One task serves a session's connection both ways: it registers the connection's queue (`tx`)
/// with the owner, decodes requests and hands them to the owner, and writes what the owner queues
/// (`rx`). Requests in flight are bounded (`maxOutstandingPerConnection`, counted down per
/// request and up per reply written): at the bound it stops reading until replies go out. `Ok`
/// when the client closed its side or the owner closed the connection; `Err` with why otherwise.
/// Not an `async fn`, as [`serve_stream`]; it registers the connection itself so that the
/// caller's state holds nothing of that step while the session runs.
#[allow(clippy::too_many_arguments, clippy::manual_async_fn)]
fn serve_session<'a>(
    mut rd: impl ClientRead + 'a,
    wr: &'a mut (impl AsyncWrite + Unpin),
    tx: ConnTx,
    rx: &'a ConnRx,
    mut buf: BytesMut,
    who: Who<'a>,
    cfg: &'a Config,
    mut sasl: ConnSasl,
    edge: &'a EdgeCounters,
    events: &'a mpsc::Sender<Event>,
) -> impl std::future::Future<Output = Result<(), Ended>> + 'a {
    async move {
        let conn = who.conn;
        if send_event(events, Event::Register { conn, tx }).await.is_err() {
            return Err(Ended::Unregistered);
        }
        let mut permits = cfg.max_outstanding_per_connection;
        let mut decoder = FrameDecoder::new(cfg.jute_max_buffer);
        let mut connected = false;
        // Boxed: only a connection without a session yet holds the timer.
        let mut sessionless = Some(Box::pin(tokio::time::sleep(SESSIONLESS_TIMEOUT)));
        // The last read filled the buffer or brought many requests: read in large chunks, and keep
        // the buffer between reads.
        let mut busy = false;
        loop {
            // At the bound of requests in flight: decoding waits for replies to go out.
            let mut blocked = false;
            {
                // The requests one read brought go to the owner as one event, in order; in a block
                // of their own, so the task is not sized for them across the wait below.
                let mut inputs = Vec::new();
                let decoded: Result<(), String> = (|| {
                    loop {
                        if connected && permits == 0 {
                            blocked = true;
                            return Ok(());
                        }
                        let Some(frame) = decoder.decode(&mut buf).map_err(|e| format!("bad frame: {e}"))? else {
                            return Ok(());
                        };
                        let input = if connected {
                            permits -= 1;
                            match decode_request(conn, &frame)? {
                                // The SASL exchange steps here, in arrival order; the node gets the outcome.
                                Input::Request { conn, xid, req: Request::Sasl(r) } => {
                                    Input::Sasl { conn, xid, outcome: sasl.step(conn, &r.token) }
                                }
                                input => input,
                            }
                        } else {
                            connected = true;
                            let req =
                                ConnectRequest::from_bytes(&frame).map_err(|e| format!("bad ConnectRequest: {e}"))?;
                            Input::Connect { conn, addr: *who.peer, req, x509: who.x509.take() }
                        };
                        inputs.push(input);
                    }
                })();
                // What decoded before a bad frame is still served, as if read one by one.
                send_inputs(events, &mut inputs).await?;
                decoded?;
            }
            if connected {
                // Freed once the session's ConnectRequest is in.
                sessionless = None;
            }
            let sessionless_due = async {
                match sessionless.as_mut() {
                    Some(sleep) => sleep.await,
                    None => std::future::pending::<()>().await,
                }
            };
            if buf.is_empty() && !busy && !blocked {
                // Everything read is decoded (the frames own their bytes): an idle connection keeps
                // no buffer while it waits.
                buf = BytesMut::new();
            }
            let read = async {
                if blocked {
                    // Nothing more is read until replies free a place.
                    std::future::pending::<()>().await;
                }
                rd.ready().await?;
                let want = if busy { READ_CHUNK } else { IDLE_READ };
                if buf.capacity() - buf.len() < want / 4 {
                    // Room for many pipelined requests per read call once busy.
                    buf.reserve(want);
                }
                let spare = buf.capacity() - buf.len();
                rd.read_buf(&mut buf).await.map(|n| (n, spare))
            };
            tokio::select! {
                // Replies first: they free places for the requests waiting to be read.
                biased;
                msg = rx.recv() => match msg {
                    Some(ConnMsg::Frames(f)) => {
                        let (frames, completes, close) = write_batch(wr, rx, f).await?;
                        rx.written(frames);
                        permits += completes;
                        if close {
                            return Ok(());
                        }
                    }
                    // The owner closed the connection, or dropped it.
                    Some(ConnMsg::Close) | None => return Ok(()),
                },
                n = read => match n {
                    Ok((0, _)) => return Ok(()),
                    Ok((n, spare)) => {
                        // A read that filled the buffer, or brought more than an idle client sends
                        // (a ping, a watch), marks a busy connection: it keeps a large buffer.
                        busy = n == spare || n > IDLE_READ / 4;
                        EdgeCounters::add(&edge.bytes_received, n as u64)
                    }
                    // A TLS client that closed its socket without a close_notify: a close all the same.
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                    Err(e) => return Err(Ended::Error(format!("read error: {e}"))),
                },
                _ = sessionless_due => {
                    EdgeCounters::add(&edge.sessionless_connections_expired, 1);
                    return Err("no ConnectRequest within the sessionless timeout".into());
                }
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
    send_event(events, event).await
}

/// A boxed wait for room in the owner's queue.
type RoomWait<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;

/// Sends `event` to the owner. The returned future holds no event: the send is tried at once
/// and only the rare wait for room is boxed, so a connection's task is not sized for an event
/// (a ConnectRequest's) at every await point that sends one.
fn send_event(
    events: &mpsc::Sender<Event>,
    event: Event,
) -> impl std::future::Future<Output = Result<(), String>> + '_ {
    let wait: Result<Option<RoomWait<'_>>, String> = match events.try_send(event) {
        Ok(()) => Ok(None),
        Err(mpsc::error::TrySendError::Closed(_)) => Err("server stopping".to_string()),
        Err(mpsc::error::TrySendError::Full(event)) => {
            Ok(Some(Box::pin(async move { events.send(event).await.map_err(|_| "server stopping".to_string()) })))
        }
    };
    async move {
        match wait? {
            Some(wait) => wait.await,
            None => Ok(()),
        }
    }
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

/// Writes `first` and the batches queued behind it (appended to it, up to [`COALESCE`] bytes, so
/// one write carries them all; nothing is buffered between calls, so an idle connection holds no
/// write buffer). Returns the frames written, the replies among them, and whether the owner
/// asked to close after them.
async fn write_batch(
    wr: &mut (impl AsyncWrite + Unpin),
    rx: &ConnRx,
    first: Frames,
) -> Result<(usize, usize, bool), String> {
    let Frames { mut bytes, mut frames, mut completes } = first;
    let mut close = false;
    while bytes.len() < COALESCE {
        match rx.try_recv() {
            Some(ConnMsg::Frames(more)) => {
                bytes.append(&more.bytes);
                frames += more.frames;
                completes += more.completes;
            }
            Some(ConnMsg::Close) => {
                close = true;
                break;
            }
            None => break,
        }
    }
    wr.write_all(&bytes).await.map_err(|e| format!("write error: {e}"))?;
    wr.flush().await.map_err(|e| format!("write error: {e}"))?;
    Ok((frames as usize, completes as usize, close))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback connection: the client's end and the server's, shared as a plain connection's is.
    async fn pair() -> (TcpStream, Arc<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, Arc::new(server))
    }

    #[tokio::test]
    async fn a_short_read_leaves_a_plain_socket_not_ready_until_more_bytes_come() {
        let (mut client, server) = pair().await;
        let mut rd = PlainRead(server);
        client.write_all(b"ping").await.unwrap();
        let mut buf = BytesMut::with_capacity(IDLE_READ);
        assert_eq!(rd.read_buf(&mut buf).await.unwrap(), 4);
        // Nothing more is there: the wait must not end at once (an idle connection would set up
        // its read buffer for nothing).
        let waited = tokio::time::timeout(Duration::from_millis(100), rd.ready()).await;
        assert!(waited.is_err(), "ready after the socket was drained");
        client.write_all(b"more").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), rd.ready()).await.expect("ready once bytes come").unwrap();
        assert_eq!(rd.read_buf(&mut buf).await.unwrap(), 4);
        assert_eq!(&buf[..], b"pingmore");
        // The client's close reads as end of stream.
        drop(client);
        assert_eq!(rd.read_buf(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn the_plain_write_half_writes_and_shuts_down_its_side() {
        let (mut client, server) = pair().await;
        let mut wr = PlainWrite(server);
        wr.write_all(b"reply").await.unwrap();
        wr.shutdown().await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"reply");
    }
}
