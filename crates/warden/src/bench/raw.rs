//! The raw-protocol client the scale workloads (sessions, watches, expiry, reconnect) share: one
//! socket, a small buffer and no client library in the way, so that a session costs the bench
//! little and tens of thousands fit in one process.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use async_io::{Async, Timer};
use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::frame::FrameDecoder;
use warden_proto::header::ReplyHeader;
use warden_proto::request::{CreateRequest, Request};
use warden_proto::{Acl, ErrorCode, Reader, Record};

/// The xid of `ensure_nodes`' creates.
const XID_ENSURE: i32 = 2;

/// Source addresses a loopback dial is spread over (see [`dial`]).
const LOOPBACK_SOURCES: u32 = 64;

/// Dials `addr`. To a loopback address, each connection binds one of [`LOOPBACK_SOURCES`]
/// addresses in 127.0.0.0/8 first, in turn: from the one source address 127.0.0.1, the kernel's
/// search for a free source port rescans the ports in use at every connect (perf: about 70% of
/// the bench's CPU in `__inet_check_established` / `__inet_hash_connect` while it opened 16,000
/// sessions, about 200 us of bench CPU per session against the server's 40), so the bench, not
/// the server, set the accept rate. Clients on many hosts do not meet that; 64 sources keep it away
/// while the server's per-address bookkeeping stays as small as for a few client hosts.
async fn dial(addr: SocketAddr) -> std::io::Result<Async<TcpStream>> {
    if !matches!(addr.ip(), IpAddr::V4(ip) if ip.is_loopback()) {
        return Async::<TcpStream>::connect(addr).await;
    }
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % LOOPBACK_SOURCES;
    let source = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1 + n as u8)), 0);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    sock.bind(&source.into())?;
    sock.set_nonblocking(true)?;
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(EINPROGRESS) || e.kind() == ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    let stream = Async::new(TcpStream::from(sock))?;
    // Writable once the connection is established or has failed; the socket's error says which.
    stream.writable().await?;
    match stream.get_ref().take_error()? {
        Some(e) => Err(e),
        None => Ok(stream),
    }
}

/// `connect`'s "in progress" on a non-blocking socket (Linux's EINPROGRESS).
const EINPROGRESS: i32 = 115;

/// The summed VmRSS of `pids`, in KiB; `None` without pids or if one cannot be read.
pub(super) fn rss_kib(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    let mut total = 0;
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        total += line.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// One raw client connection with its session.
pub(super) struct Session {
    pub(super) stream: Async<TcpStream>,
    pub(super) buf: BytesMut,
}

impl Session {
    /// A new session with `timeout_ms`; refused sessions are an error.
    pub(super) async fn connect(addr: SocketAddr, timeout_ms: i32) -> anyhow::Result<Session> {
        let (s, resp) = Session::handshake(addr, &ConnectRequest::new_session(timeout_ms)).await?;
        if resp.session_id == 0 {
            bail!("session refused");
        }
        Ok(s)
    }

    /// Dials `addr`, sends `req` and reads the ConnectResponse (a session id of 0 means the
    /// server refused or expired the session; the caller decides).
    pub(super) async fn handshake(
        addr: SocketAddr,
        req: &ConnectRequest,
    ) -> anyhow::Result<(Session, ConnectResponse)> {
        let mut stream = dial(addr).await.context("connect")?;
        stream.write_all(&warden_proto::frame::encode_frame(req)).await.context("send ConnectRequest")?;
        let mut s = Session { stream, buf: BytesMut::with_capacity(256) };
        let frame = s.next_frame().await?;
        let resp = ConnectResponse::decode(&mut Reader::new(&frame)).context("ConnectResponse")?;
        Ok((s, resp))
    }

    /// Creates each of `paths` (persistent, empty, open ACL), in order, unless it exists.
    pub(super) async fn ensure_nodes(&mut self, paths: &[&str]) -> anyhow::Result<()> {
        for path in paths {
            let req = Request::Create(CreateRequest {
                path: path.to_string(),
                data: Some(Vec::new()),
                acl: Acl::open_unsafe(),
                flags: 0,
            });
            let err = self.call(XID_ENSURE, &req).await?;
            if err != 0 && err != ErrorCode::NodeExists.code() {
                bail!("create {path}: error {err}");
            }
        }
        Ok(())
    }

    /// Sends `req` with `xid` and waits for its reply (skipping notifications); its error code.
    pub(super) async fn call(&mut self, xid: i32, req: &Request) -> anyhow::Result<i32> {
        Ok(self.call_body(xid, req).await?.0.err)
    }

    /// Sends `req` with `xid` and waits for its reply (skipping notifications): the reply
    /// header and the body after it.
    pub(super) async fn call_body(&mut self, xid: i32, req: &Request) -> anyhow::Result<(ReplyHeader, Bytes)> {
        self.stream.write_all(&req.encode_frame(xid)).await?;
        loop {
            let mut frame = self.next_frame().await?;
            let mut r = Reader::new(&frame);
            let hdr = ReplyHeader::decode(&mut r)?;
            if hdr.xid == xid {
                let used = frame.len() - r.remaining();
                return Ok((hdr, frame.split_off(used)));
            }
        }
    }

    /// Keeps the session alive until `stop` closes (PINGs every third of `timeout_ms`, reads and
    /// drops whatever arrives), then drops the connection without closing the session.
    pub(super) async fn keep_alive(mut self, timeout_ms: i32, stop: async_channel::Receiver<()>) -> anyhow::Result<()> {
        let ping_every = Duration::from_millis(u64::try_from(timeout_ms / 3).unwrap_or(1000).max(100));
        loop {
            enum Step {
                Read(anyhow::Result<()>),
                Ping,
                Stop,
            }
            let step = futures_lite::future::or(
                futures_lite::future::or(async { Step::Read(self.fill().await) }, async {
                    Timer::after(ping_every).await;
                    Step::Ping
                }),
                async {
                    let _ = stop.recv().await;
                    Step::Stop
                },
            )
            .await;
            match step {
                Step::Stop => return Ok(()),
                Step::Ping => self.stream.write_all(&Request::Ping.encode_frame(-2)).await?,
                Step::Read(r) => {
                    r?;
                    while self.take_frame()?.is_some() {}
                }
            }
        }
    }

    /// The next whole frame's body; reads more as needed.
    pub(super) async fn next_frame(&mut self) -> anyhow::Result<Bytes> {
        loop {
            if let Some(frame) = self.take_frame()? {
                return Ok(frame);
            }
            self.fill().await?;
        }
    }

    pub(super) fn take_frame(&mut self) -> anyhow::Result<Option<Bytes>> {
        Ok(FrameDecoder::default().decode(&mut self.buf)?)
    }

    /// One read into the buffer (cancel-safe: a read either happened or did not).
    pub(super) async fn fill(&mut self) -> anyhow::Result<()> {
        let mut chunk = [0u8; 1024];
        match self.stream.read(&mut chunk).await {
            Ok(0) => bail!("connection closed by the server"),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
