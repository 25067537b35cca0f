//! Support for the interchange test: a tiny raw-protocol client for what the `zookeeper-client` crate
//! cannot express: null data (jute buffer length -1) on create/setData, and telling a null
//! getData answer from an empty one. Frames are built and read with `warden_proto`'s codec, which
//! its own golden-byte tests pin to ZooKeeper's format; both servers of the test answer it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use warden_proto::connect::{ConnectRequest, ConnectResponse};
use warden_proto::header::ReplyHeader;
use warden_proto::request::{AuthPacket, CreateRequest, PathWatch, Request, SetDataRequest};
use warden_proto::response::{decode_reply, Response};
use warden_proto::{xid, Acl, Reader, Record, Stat};

pub use crate::oracle::{zk_classpath, ZkProcess};

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
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
        let req =
            ConnectRequest { timeout_ms: 30_000, passwd: vec![0; 16], read_only: Some(false), ..Default::default() };
        c.s.write_all(&warden_proto::frame::encode_frame(&req))?;
        let resp = ConnectResponse::from_bytes(&c.recv()?).map_err(invalid)?;
        if resp.timeout_ms <= 0 {
            return Err(std::io::Error::other("session refused"));
        }
        Ok(c)
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

    /// Sends the request; returns the header and body of the reply with that xid (notifications skipped).
    fn call(&mut self, xid: i32, req: &Request) -> std::io::Result<(ReplyHeader, Option<Response>)> {
        self.s.write_all(&req.encode_frame(xid))?;
        loop {
            let r = self.recv()?;
            let hdr = ReplyHeader::decode(&mut Reader::new(&r)).map_err(invalid)?;
            if hdr.xid == xid {
                return decode_reply(req.op_code().code(), &r).map_err(invalid);
            }
        }
    }

    fn next_xid(&mut self) -> i32 {
        self.xid += 1;
        self.xid
    }

    /// addAuth; returns the error code (0 = ok).
    pub fn auth(&mut self, scheme: &str, auth: &[u8]) -> std::io::Result<i32> {
        let req = Request::Auth(AuthPacket { auth_type: 0, scheme: scheme.into(), auth: auth.to_vec() });
        Ok(self.call(xid::AUTH, &req)?.0.err)
    }

    /// create (opcode 1) with world:anyone ALL and possibly null data; returns the error code.
    pub fn create(&mut self, path: &str, data: Option<&[u8]>, flags: i32) -> std::io::Result<i32> {
        let req = Request::Create(CreateRequest {
            path: path.into(),
            data: data.map(<[u8]>::to_vec),
            acl: Acl::open_unsafe(),
            flags,
        });
        let xid = self.next_xid();
        Ok(self.call(xid, &req)?.0.err)
    }

    /// setData (opcode 5), any version, possibly null data; returns the error code.
    pub fn set_data(&mut self, path: &str, data: Option<&[u8]>) -> std::io::Result<i32> {
        let req = Request::SetData(SetDataRequest { path: path.into(), data: data.map(<[u8]>::to_vec), version: -1 });
        let xid = self.next_xid();
        Ok(self.call(xid, &req)?.0.err)
    }

    /// getData (opcode 4) without watch: data as sent (None = null buffer) and Stat.
    pub fn get_data(&mut self, path: &str) -> std::io::Result<Result<(Option<Vec<u8>>, Stat), i32>> {
        let xid = self.next_xid();
        match self.call(xid, &Request::GetData(PathWatch { path: path.into(), watch: false }))? {
            (hdr, _) if hdr.err != 0 => Ok(Err(hdr.err)),
            (_, Some(Response::GetData { data, stat })) => Ok(Ok((data, stat))),
            (_, other) => Err(std::io::Error::other(format!("unexpected getData reply {other:?}"))),
        }
    }

    /// Sends closeSession and waits for its reply (or the connection closing).
    pub fn close(mut self) {
        let xid = self.next_xid();
        if self.s.write_all(&Request::CloseSession.encode_frame(xid)).is_ok() {
            let _ = self.recv();
        }
    }
}
