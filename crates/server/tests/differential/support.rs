//! Support for the differential test: starting Debian's Apache ZooKeeper 3.8 as an oracle, and a
//! tiny raw-protocol client that can send paths the `zookeeper-client` crate refuses to send.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The jars Debian's `zookeeper` package installs; the same list as `scripts/zk-classpath`.
const JARS: &[&str] = &[
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-transport.jar",
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "commons-io.jar",
    "commons-cli.jar",
    "metrics-core.jar",
    "snappy-java.jar",
    "slf4j-api.jar",
    "slf4j-nop.jar",
];

const MISSING: &str = "Apache ZooKeeper 3.8 (Debian package `zookeeper`) or java not found: run scripts/install-deps";

/// Apache ZooKeeper's server classpath: `scripts/zk-classpath` if present, else built from the jar list.
/// Panics (never skips) when ZooKeeper is not installed.
pub fn zk_classpath() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/zk-classpath");
    if script.exists() {
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("{MISSING}: running {}: {e}", script.display()));
        if !out.status.success() {
            panic!("{MISSING}\nscripts/zk-classpath said: {}", String::from_utf8_lossy(&out.stderr));
        }
        return String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    let dir = std::env::var("ZK_JAVA_DIR").unwrap_or_else(|_| "/usr/share/java".into());
    let mut parts = Vec::new();
    for jar in JARS {
        let p = PathBuf::from(&dir).join(jar);
        if !p.exists() {
            panic!("{MISSING} (missing {})", p.display());
        }
        parts.push(p.display().to_string());
    }
    parts.join(":")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind ephemeral port").local_addr().unwrap().port()
}

/// Sends a four-letter word and returns the whole answer.
pub fn four_letter(addr: SocketAddr, cmd: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(cmd.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// A running Apache ZooKeeper standalone server; killed (by PID) when dropped, also on panic.
pub struct ZkProcess {
    child: Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl ZkProcess {
    pub fn start(classpath: &str) -> ZkProcess {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let port = free_port();
        let cfg = dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 4lw.commands.whitelist=*\nextendedTypesEnabled=true\nadmin.enableServer=false\nmaxClientCnxns=0\n",
                data.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("zk.out")).unwrap();
        let child = Command::new("java")
            .arg("-Xmx256m")
            .arg("-Dznode.container.checkIntervalMs=3600000")
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("-cp")
            .arg(classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{MISSING}: spawning java: {e}"));
        let mut zk = ZkProcess { child, addr: SocketAddr::from(([127, 0, 0, 1], port)), _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = zk.child.try_wait() {
                let out = std::fs::read_to_string(zk._dir.path().join("zk.out")).unwrap_or_default();
                panic!("Apache ZooKeeper exited early ({status}); output:\n{out}\n{MISSING}");
            }
            // `ruok` answers imok before the server serves; `srvr` then still says "not currently serving".
            if four_letter(zk.addr, "ruok").map(|s| s == "imok").unwrap_or(false)
                && four_letter(zk.addr, "srvr").map(|s| s.contains("Mode:")).unwrap_or(false)
            {
                return zk;
            }
            assert!(Instant::now() < deadline, "Apache ZooKeeper did not answer ruok within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ZkProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Request kinds the raw client can send with an arbitrary path.
#[derive(Clone, Copy, Debug)]
pub enum RawKind {
    Create { opcode: i32, flags: i32 },
    Delete,
    Exists,
    GetData,
    SetData,
    GetChildren,
}

/// A minimal blocking client speaking the wire protocol directly, so that paths the
/// `zookeeper-client` crate validates away can reach the server.
pub struct RawClient {
    s: TcpStream,
}

fn put_str(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as i32).to_be_bytes());
    b.extend_from_slice(s);
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> std::io::Result<RawClient> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_nodelay(true)?;
        let mut c = RawClient { s };
        let mut b = Vec::new();
        b.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
        b.extend_from_slice(&0i64.to_be_bytes()); // lastZxidSeen
        b.extend_from_slice(&30000i32.to_be_bytes()); // timeOut
        b.extend_from_slice(&0i64.to_be_bytes()); // sessionId
        put_str(&mut b, &[0u8; 16]); // passwd
        b.push(0); // readOnly
        c.send(&b)?;
        c.recv()?;
        Ok(c)
    }

    fn send(&mut self, body: &[u8]) -> std::io::Result<()> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        self.s.write_all(&f)
    }

    fn recv(&mut self) -> std::io::Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len)?;
        let n = i32::from_be_bytes(len);
        if !(0..=1 << 20).contains(&n) {
            return Err(std::io::Error::other(format!("bad frame length {n}")));
        }
        let mut body = vec![0u8; n as usize];
        self.s.read_exact(&mut body)?;
        Ok(body)
    }

    /// Sends one request; returns the reply's error code and, for a successful create, the path.
    /// Notifications (xid -1) are skipped.
    pub fn request(&mut self, kind: RawKind, path: &[u8]) -> std::io::Result<(i32, Option<String>)> {
        let opcode = match kind {
            RawKind::Create { opcode, .. } => opcode,
            RawKind::Delete => 2,
            RawKind::Exists => 3,
            RawKind::GetData => 4,
            RawKind::SetData => 5,
            RawKind::GetChildren => 8,
        };
        let mut b = Vec::new();
        b.extend_from_slice(&7i32.to_be_bytes());
        b.extend_from_slice(&opcode.to_be_bytes());
        put_str(&mut b, path);
        match kind {
            RawKind::Create { opcode, flags } => {
                put_str(&mut b, b"");
                b.extend_from_slice(&1i32.to_be_bytes());
                b.extend_from_slice(&31i32.to_be_bytes());
                put_str(&mut b, b"world");
                put_str(&mut b, b"anyone");
                b.extend_from_slice(&flags.to_be_bytes());
                if opcode == 21 {
                    b.extend_from_slice(&60_000i64.to_be_bytes());
                }
            }
            RawKind::Delete => b.extend_from_slice(&(-1i32).to_be_bytes()),
            RawKind::Exists | RawKind::GetData | RawKind::GetChildren => b.push(0),
            RawKind::SetData => {
                put_str(&mut b, b"x");
                b.extend_from_slice(&(-1i32).to_be_bytes());
            }
        }
        self.send(&b)?;
        loop {
            let r = self.recv()?;
            if r.len() < 16 {
                return Err(std::io::Error::other("short reply"));
            }
            let xid = i32::from_be_bytes(r[0..4].try_into().unwrap());
            if xid == -1 {
                continue;
            }
            let err = i32::from_be_bytes(r[12..16].try_into().unwrap());
            let created = if err == 0 && matches!(kind, RawKind::Create { .. }) && r.len() >= 20 {
                let n = i32::from_be_bytes(r[16..20].try_into().unwrap()).max(0) as usize;
                r.get(20..20 + n).map(|p| String::from_utf8_lossy(p).into_owned())
            } else {
                None
            };
            return Ok((err, created));
        }
    }

    /// Sends closeSession and waits for its reply (or the connection closing).
    pub fn close(mut self) {
        let mut b = Vec::new();
        b.extend_from_slice(&8i32.to_be_bytes());
        b.extend_from_slice(&(-11i32).to_be_bytes());
        if self.send(&b).is_ok() {
            let _ = self.recv();
        }
    }
}
