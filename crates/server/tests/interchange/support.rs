//! Support for the interchange test: a tiny raw-protocol client for what the `zookeeper-client` crate
//! cannot express: null data (jute buffer length -1) on create/setData, and telling a null
//! getData answer from an empty one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub use crate::oracle::{zk_classpath, ZkProcess};

fn put_buf(b: &mut Vec<u8>, s: Option<&[u8]>) {
    match s {
        None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(s) => {
            b.extend_from_slice(&(s.len() as i32).to_be_bytes());
            b.extend_from_slice(s);
        }
    }
}

/// The wire Stat, field by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawStat {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
    pub pzxid: i64,
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> std::io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(std::io::Error::other("short reply"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn i32(&mut self) -> std::io::Result<i32> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i64(&mut self) -> std::io::Result<i64> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn buf(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(n as usize)?.to_vec()))
    }
    fn stat(&mut self) -> std::io::Result<RawStat> {
        Ok(RawStat {
            czxid: self.i64()?,
            mzxid: self.i64()?,
            ctime: self.i64()?,
            mtime: self.i64()?,
            version: self.i32()?,
            cversion: self.i32()?,
            aversion: self.i32()?,
            ephemeral_owner: self.i64()?,
            data_length: self.i32()?,
            num_children: self.i32()?,
            pzxid: self.i64()?,
        })
    }
}

/// A minimal blocking client speaking the wire protocol directly.
pub struct RawClient {
    s: TcpStream,
    xid: i32,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> std::io::Result<RawClient> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_nodelay(true)?;
        let mut c = RawClient { s, xid: 0 };
        let mut b = Vec::new();
        b.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
        b.extend_from_slice(&0i64.to_be_bytes()); // lastZxidSeen
        b.extend_from_slice(&30000i32.to_be_bytes()); // timeOut
        b.extend_from_slice(&0i64.to_be_bytes()); // sessionId
        put_buf(&mut b, Some(&[0u8; 16])); // passwd
        b.push(0); // readOnly
        c.send(&b)?;
        let r = c.recv()?;
        let mut cur = Cursor(&r);
        let _proto = cur.i32()?;
        let timeout = cur.i32()?;
        if timeout <= 0 {
            return Err(std::io::Error::other("session refused"));
        }
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
        if !(0..=4 << 20).contains(&n) {
            return Err(std::io::Error::other(format!("bad frame length {n}")));
        }
        let mut body = vec![0u8; n as usize];
        self.s.read_exact(&mut body)?;
        Ok(body)
    }

    /// Sends header(xid, opcode) + body; returns (err, reply body after the ReplyHeader) of the
    /// reply with that xid (notifications skipped).
    fn call(&mut self, xid: i32, opcode: i32, body: &[u8]) -> std::io::Result<(i32, Vec<u8>)> {
        let mut b = Vec::new();
        b.extend_from_slice(&xid.to_be_bytes());
        b.extend_from_slice(&opcode.to_be_bytes());
        b.extend_from_slice(body);
        self.send(&b)?;
        loop {
            let r = self.recv()?;
            let mut cur = Cursor(&r);
            let rxid = cur.i32()?;
            let _zxid = cur.i64()?;
            let err = cur.i32()?;
            if rxid == xid {
                return Ok((err, cur.0.to_vec()));
            }
        }
    }

    fn next_xid(&mut self) -> i32 {
        self.xid += 1;
        self.xid
    }

    /// addAuth; returns the error code (0 = ok).
    pub fn auth(&mut self, scheme: &str, auth: &[u8]) -> std::io::Result<i32> {
        let mut b = Vec::new();
        b.extend_from_slice(&0i32.to_be_bytes());
        put_buf(&mut b, Some(scheme.as_bytes()));
        put_buf(&mut b, Some(auth));
        Ok(self.call(-4, 100, &b)?.0)
    }

    /// create (opcode 1) with world:anyone ALL and possibly null data; returns the error code.
    pub fn create(&mut self, path: &str, data: Option<&[u8]>, flags: i32) -> std::io::Result<i32> {
        let mut b = Vec::new();
        put_buf(&mut b, Some(path.as_bytes()));
        put_buf(&mut b, data);
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&31i32.to_be_bytes());
        put_buf(&mut b, Some(b"world"));
        put_buf(&mut b, Some(b"anyone"));
        b.extend_from_slice(&flags.to_be_bytes());
        let xid = self.next_xid();
        Ok(self.call(xid, 1, &b)?.0)
    }

    /// setData (opcode 5), any version, possibly null data; returns the error code.
    pub fn set_data(&mut self, path: &str, data: Option<&[u8]>) -> std::io::Result<i32> {
        let mut b = Vec::new();
        put_buf(&mut b, Some(path.as_bytes()));
        put_buf(&mut b, data);
        b.extend_from_slice(&(-1i32).to_be_bytes());
        let xid = self.next_xid();
        Ok(self.call(xid, 5, &b)?.0)
    }

    /// getData (opcode 4) without watch: data as sent (None = null buffer) and Stat.
    pub fn get_data(&mut self, path: &str) -> std::io::Result<Result<(Option<Vec<u8>>, RawStat), i32>> {
        let mut b = Vec::new();
        put_buf(&mut b, Some(path.as_bytes()));
        b.push(0);
        let xid = self.next_xid();
        let (err, body) = self.call(xid, 4, &b)?;
        if err != 0 {
            return Ok(Err(err));
        }
        let mut cur = Cursor(&body);
        let data = cur.buf()?;
        let stat = cur.stat()?;
        Ok(Ok((data, stat)))
    }

    /// Sends closeSession and waits for its reply (or the connection closing).
    pub fn close(mut self) {
        let mut b = Vec::new();
        b.extend_from_slice(&(self.next_xid()).to_be_bytes());
        b.extend_from_slice(&(-11i32).to_be_bytes());
        if self.send(&b).is_ok() {
            let _ = self.recv();
        }
    }
}
