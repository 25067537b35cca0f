//! Support for the interchange test: a tiny raw-protocol client for what the `zookeeper-client` crate
//! cannot express: null data (jute buffer length -1) on create/setData, and telling a null
//! getData answer from an empty one. Frames are built and read with `warden_proto`'s codec, which
//! its own golden-byte tests pin to ZooKeeper's format; both servers of the test answer it.

use std::net::SocketAddr;
use std::time::Duration;

use warden_proto::request::{AuthPacket, CreateRequest, PathWatch, Request, SetDataRequest};
use warden_proto::response::Response;
use warden_proto::{xid, Acl, Stat};

use crate::oracle::RawConn;
pub use crate::oracle::{zk_classpath, ZkProcess};

/// A minimal blocking client speaking the wire protocol directly.
pub struct RawClient {
    conn: RawConn,
    xid: i32,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> std::io::Result<RawClient> {
        Ok(RawClient { conn: RawConn::connect(addr, Duration::from_secs(10))?, xid: 0 })
    }

    fn call(
        &mut self,
        xid: i32,
        req: &Request,
    ) -> std::io::Result<(warden_proto::header::ReplyHeader, Option<Response>)> {
        self.conn.call(xid, req)
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
        let req = Request::SetData(SetDataRequest {
            path: path.into(),
            data: data.map(bytes::Bytes::copy_from_slice),
            version: -1,
        });
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
        self.conn.close(xid);
    }
}
