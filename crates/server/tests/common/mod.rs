//! Shared helpers for the integration tests: an in-process Warden server on a temporary data
//! directory, `zookeeper-client` connections, a deadline-based poller, a raw-protocol client built
//! on `warden_proto`'s encoders, a four-letter-word helper, and a TCP proxy that can cut or
//! black-hole a client's connection (to force reconnects and session expiry).
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::BytesMut;
use sha1::Digest as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use warden_proto::{
    decode_notification, decode_reply, xid, ConnectRequest, ConnectResponse, FrameDecoder, Reader, Record, ReplyHeader,
    Request, Response, WatcherEvent,
};
use warden_server::{Config, Server};
use zookeeper_client as zk;

/// The version line of `srvr`/`stat` (`Zookeeper version: `), `envi` (`zookeeper.version=`) or
/// `mntr` (`zk_version\t`) as ZooKeeper 3.5 and later print it: the version, then the build date
/// as `yyyy-MM-dd HH:mm UTC`. Captures the version and the date. One pattern for Warden and Apache
/// ZooKeeper alike (the differential cases run it on both).
pub fn version_line_regex(prefix: &str) -> regex::Regex {
    let pattern = format!(r"^{}(\S+), built on (\d{{4}}-\d{{2}}-\d{{2}} \d{{2}}:\d{{2}}) UTC$", regex::escape(prefix));
    regex::Regex::new(&pattern).expect("version line pattern")
}

/// How long any single wait in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// A Warden server on a fresh temporary data directory.
pub struct TestServer {
    server: Option<Server>,
    pub addr: SocketAddr,
    /// The `secureClientPort` listener, when configured.
    pub secure_addr: Option<SocketAddr>,
    _dir: tempfile::TempDir,
}

/// The configuration the tests use unless they say otherwise: fast ticks, all four-letter words,
/// TTL nodes on, fast container checks.
pub fn test_config(dir: &std::path::Path) -> Config {
    Config {
        client_port: 0,
        client_port_address: "127.0.0.1".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        data_log_dir: dir.to_path_buf(),
        tick_time_ms: 200,
        min_session_timeout_ms: 400,
        max_session_timeout_ms: 20_000,
        four_letter_whitelist: vec!["*".into()],
        extended_types_enabled: true,
        container_check_interval_ms: 200,
        // Tests that want the AdminServer give it a free port.
        admin: warden_server::admin::AdminSettings { enable: false, ..Default::default() },
        ..Config::default()
    }
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        Self::start_in(tempfile::tempdir().expect("temp dir"), tweak).await
    }

    /// A server on `dir`, which may hold the data of an earlier one ([`TestServer::stop_keeping_dir`]).
    pub async fn start_in(dir: tempfile::TempDir, tweak: impl FnOnce(&mut Config)) -> TestServer {
        let mut cfg = test_config(dir.path());
        tweak(&mut cfg);
        let server = Server::start(cfg).await.expect("server starts");
        let addr = server.local_addr;
        let secure_addr = server.secure_addr;
        TestServer { server: Some(server), addr, secure_addr, _dir: dir }
    }

    /// Connect string for `zookeeper-client`.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    pub async fn client(&self) -> zk::Client {
        connect(&self.connect_string()).await
    }

    pub async fn stop(self) {
        self.stop_keeping_dir().await;
    }

    /// Stops the server and hands back its data directory, for a restart on it.
    pub async fn stop_keeping_dir(mut self) -> tempfile::TempDir {
        if let Some(server) = self.server.take() {
            tokio::time::timeout(WAIT, server.stop())
                .await
                .expect("server stops in time")
                .expect("server stops cleanly");
        }
        self._dir
    }
}

/// Connects with a 6 s session (the crate's default) and fails the test on error.
pub async fn connect(connect_string: &str) -> zk::Client {
    tokio::time::timeout(
        WAIT,
        zk::Client::connector().with_session_timeout(Duration::from_secs(6)).connect(connect_string),
    )
    .await
    .expect("connect in time")
    .expect("connect")
}

/// Awaits `fut`, failing the test if it takes longer than [`WAIT`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// Polls `probe` until it yields `Some`, failing the test at the deadline.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("condition not reached within {WAIT:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `BASE64(SHA1("user:password"))`, the digest scheme's id suffix.
pub fn digest_of(user: &str, password: &str) -> String {
    let hash = sha1::Sha1::digest(format!("{user}:{password}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(hash)
}

/// The digest ACL id for `user:password`: `user:BASE64(SHA1(...))`.
pub fn digest_id(user: &str, password: &str) -> String {
    format!("{user}:{}", digest_of(user, password))
}

pub fn open_acl() -> Vec<warden_proto::Acl> {
    warden_proto::Acl::open_unsafe()
}

// ---------------------------------------------------------------------------------------------
// Four-letter words
// ---------------------------------------------------------------------------------------------

/// Sends a four-letter word on a fresh connection and returns everything the server writes
/// before closing.
pub async fn four_letter(addr: SocketAddr, word: &str) -> String {
    within(&format!("4lw {word}"), async {
        let mut s = TcpStream::connect(addr).await.expect("connect for 4lw");
        s.write_all(word.as_bytes()).await.expect("write 4lw");
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.expect("read 4lw reply");
        String::from_utf8(out).expect("4lw reply is UTF-8")
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Raw protocol client
// ---------------------------------------------------------------------------------------------

/// A minimal client speaking the wire protocol directly, for behaviour the crate hides.
pub struct RawClient {
    stream: TcpStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    /// Notifications that arrived while waiting for a reply.
    pub notifications: std::collections::VecDeque<(ReplyHeader, WatcherEvent)>,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    pub timeout_ms: i32,
    /// Highest zxid seen in a reply header.
    pub last_zxid: i64,
    next_xid: i32,
}

/// What the raw client read next.
pub enum Frame {
    Reply(Vec<u8>),
    Closed,
}

impl RawClient {
    /// Opens a connection, sends `req` and reads the ConnectResponse.
    pub async fn handshake(addr: SocketAddr, req: &ConnectRequest) -> (RawClient, ConnectResponse) {
        let stream = within("raw connect", TcpStream::connect(addr)).await.expect("raw connect");
        stream.set_nodelay(true).ok();
        let mut c = RawClient {
            stream,
            // Replies are not bounded by jute.maxbuffer (tests read 20 MB child lists); this is
            // only a guard against a garbled length.
            decoder: FrameDecoder::new(256 << 20),
            buf: BytesMut::new(),
            notifications: Default::default(),
            session_id: 0,
            passwd: Vec::new(),
            timeout_ms: 0,
            last_zxid: req.last_zxid_seen,
            next_xid: 1,
        };
        c.write(&warden_proto::encode_frame(req)).await;
        let payload = match c.read_frame().await {
            Frame::Reply(p) => p,
            Frame::Closed => panic!("server closed the connection instead of answering the handshake"),
        };
        let resp = ConnectResponse::decode(&mut Reader::new(&payload)).expect("ConnectResponse decodes");
        c.session_id = resp.session_id;
        c.passwd = resp.passwd.clone();
        c.timeout_ms = resp.timeout_ms;
        (c, resp)
    }

    /// A new session with the given requested timeout (readOnly byte present, as modern clients send).
    pub async fn new_session(addr: SocketAddr, timeout_ms: i32) -> RawClient {
        let req = ConnectRequest::new_session(timeout_ms);
        let (c, resp) = Self::handshake(addr, &req).await;
        assert!(resp.timeout_ms > 0, "new session refused: {resp:?}");
        assert_ne!(resp.session_id, 0, "new session got id 0");
        c
    }

    /// Reconnects to an existing session.
    pub async fn resume(
        addr: SocketAddr,
        session_id: i64,
        passwd: &[u8],
        last_zxid: i64,
        timeout_ms: i32,
    ) -> (RawClient, ConnectResponse) {
        let req = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: last_zxid,
            timeout_ms,
            session_id,
            passwd: passwd.to_vec(),
            read_only: Some(false),
        };
        Self::handshake(addr, &req).await
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        within("raw write", self.stream.write_all(bytes)).await.expect("raw write");
    }

    /// Next frame payload (no length prefix), or `Closed` on EOF / reset.
    pub async fn read_frame(&mut self) -> Frame {
        within("a frame from the server", self.read_frame_no_deadline()).await
    }

    async fn read_frame_no_deadline(&mut self) -> Frame {
        loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => return Frame::Reply(frame.to_vec()),
                Ok(None) => {}
                Err(e) => panic!("bad frame from server: {e:?}"),
            }
            self.buf.reserve(64 * 1024);
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return Frame::Closed,
                Ok(_) => {}
            }
        }
    }

    pub fn next_xid(&mut self) -> i32 {
        let x = self.next_xid;
        self.next_xid += 1;
        x
    }

    /// Sends `req` with a fresh xid and returns its reply; notifications read meanwhile are queued.
    pub async fn call(&mut self, req: &Request) -> (ReplyHeader, Option<Response>) {
        let x = self.next_xid();
        self.call_with_xid(x, req).await
    }

    pub async fn call_with_xid(&mut self, x: i32, req: &Request) -> (ReplyHeader, Option<Response>) {
        self.send(x, req).await;
        self.reply_to(x, req.op_code().code()).await
    }

    pub async fn send(&mut self, x: i32, req: &Request) {
        let frame = req.encode_frame(x);
        self.write(&frame).await;
    }

    /// Reads until the reply with xid `x` arrives.
    pub async fn reply_to(&mut self, x: i32, op_code: i32) -> (ReplyHeader, Option<Response>) {
        loop {
            let payload = match self.read_frame().await {
                Frame::Reply(p) => p,
                Frame::Closed => panic!("connection closed while waiting for reply to xid {x} (op {op_code})"),
            };
            let header = ReplyHeader::decode(&mut Reader::new(&payload)).expect("reply header");
            if header.xid == xid::NOTIFICATION {
                let n = decode_notification(&payload).expect("notification decodes");
                self.notifications.push_back(n);
                continue;
            }
            assert_eq!(header.xid, x, "reply out of order: expected xid {x}, got {header:?}");
            if header.zxid > self.last_zxid {
                self.last_zxid = header.zxid;
            }
            return decode_reply(op_code, &payload)
                .unwrap_or_else(|e| panic!("reply to op {op_code} does not decode: {e:?}"));
        }
    }

    /// The next notification (queued or read from the socket), failing after [`WAIT`].
    pub async fn next_notification(&mut self) -> (ReplyHeader, WatcherEvent) {
        if let Some(n) = self.notifications.pop_front() {
            return n;
        }
        loop {
            let payload = match self.read_frame().await {
                Frame::Reply(p) => p,
                Frame::Closed => panic!("connection closed while waiting for a notification"),
            };
            let header = ReplyHeader::decode(&mut Reader::new(&payload)).expect("reply header");
            if header.xid == xid::NOTIFICATION {
                return decode_notification(&payload).expect("notification decodes");
            }
            if header.xid == xid::PING {
                continue;
            }
            panic!("unexpected reply {header:?} while waiting for a notification");
        }
    }

    /// Waits until the server closes the connection (ignoring frames it sends first).
    pub async fn expect_closed(&mut self) {
        within("server to close the connection", async {
            loop {
                if let Frame::Closed = self.read_frame_no_deadline().await {
                    return;
                }
            }
        })
        .await
    }

    pub async fn ping(&mut self) -> ReplyHeader {
        self.call_with_xid(xid::PING, &Request::Ping).await.0
    }

    /// Drops the TCP connection without a closeSession.
    pub async fn disconnect(mut self) {
        let _ = self.stream.shutdown().await;
    }
}

pub fn create_req(path: &str, data: Option<&[u8]>, flags: i32) -> warden_proto::CreateRequest {
    warden_proto::CreateRequest { path: path.into(), data: data.map(|d| d.to_vec()), acl: open_acl(), flags }
}

pub fn path_watch(path: &str, watch: bool) -> warden_proto::PathWatch {
    warden_proto::PathWatch { path: path.into(), watch }
}

// ---------------------------------------------------------------------------------------------
// TCP proxy
// ---------------------------------------------------------------------------------------------

/// A loopback TCP proxy in front of the server. `cut()` kills current connections; while
/// `block(true)` is in force new connections are accepted and immediately closed, and existing
/// ones stop forwarding (a black hole), so a client cannot reach the server at all.
pub struct Proxy {
    pub addr: SocketAddr,
    blocked: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        let addr = listener.local_addr().unwrap();
        let blocked = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (b, c) = (blocked.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                if b.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(target).await else { continue };
                let task = tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = async { tokio::io::copy(&mut cr, &mut sw).await };
                    let down = async { tokio::io::copy(&mut sr, &mut cw).await };
                    tokio::select! { _ = up => {}, _ = down => {} }
                });
                c.lock().unwrap().push(task);
            }
        });
        Proxy { addr, blocked, conns, accept }
    }

    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// Closes every proxied connection (both sides).
    pub fn cut(&self) {
        for t in self.conns.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// Cuts current connections and refuses new ones until `unblock`.
    pub fn block(&self) {
        self.blocked.store(true, Ordering::SeqCst);
        self.cut();
    }

    pub fn unblock(&self) {
        self.blocked.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// The certificates and stores of scripts/make-test-certs, made once per test binary under the
/// target's temporary directory (aws-lc-rs installed as rustls's process-wide provider first).
pub fn test_certs() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tls-certs-{}", std::process::id()));
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/make-test-certs");
        let out = std::process::Command::new(script).arg(&dir).output().expect("run scripts/make-test-certs");
        assert!(out.status.success(), "make-test-certs: {}", String::from_utf8_lossy(&out.stderr));
        dir
    })
}
