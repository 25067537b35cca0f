//! Support for the differential test: a tiny raw-protocol client that can send paths the `zookeeper-client` crate refuses to send.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub use crate::oracle::{four_letter, zk_classpath, ZkProcess};

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
