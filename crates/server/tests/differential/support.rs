//! Support for the differential test: a tiny raw-protocol client that can send paths the `zookeeper-client` crate refuses to send.

use std::net::SocketAddr;
use std::time::Duration;

use warden_proto::request::{CreateRequest, CreateTtlRequest, PathVersion, PathWatch, Request, SetDataRequest};
use warden_proto::response::Response;
use warden_proto::Acl;

use crate::oracle::RawConn;

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
    conn: RawConn,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> std::io::Result<RawClient> {
        Ok(RawClient { conn: RawConn::connect(addr, Duration::from_secs(5))? })
    }

    /// Sends one request; returns the reply's error code and, for a successful create, the path.
    pub fn request(&mut self, kind: RawKind, path: &str) -> std::io::Result<(i32, Option<String>)> {
        let path = path.to_string();
        let req = match kind {
            RawKind::Create { opcode, flags } => {
                let c = CreateRequest { path, data: Some(Vec::new()), acl: Acl::open_unsafe(), flags };
                match opcode {
                    1 => Request::Create(c),
                    15 => Request::Create2(c),
                    19 => Request::CreateContainer(c),
                    21 => Request::CreateTtl(CreateTtlRequest {
                        path: c.path,
                        data: c.data,
                        acl: c.acl,
                        flags,
                        ttl: 60_000,
                    }),
                    other => return Err(std::io::Error::other(format!("not a create opcode: {other}"))),
                }
            }
            RawKind::Delete => Request::Delete(PathVersion { path, version: -1 }),
            RawKind::Exists => Request::Exists(PathWatch { path, watch: false }),
            RawKind::GetData => Request::GetData(PathWatch { path, watch: false }),
            RawKind::SetData => {
                Request::SetData(SetDataRequest { path, data: Some(b"x".to_vec().into()), version: -1 })
            }
            RawKind::GetChildren => Request::GetChildren(PathWatch { path, watch: false }),
        };
        let (hdr, body) = self.conn.call(7, &req)?;
        let created = match body {
            Some(Response::Create { path } | Response::Create2 { path, .. }) => Some(path),
            _ => None,
        };
        Ok((hdr.err, created))
    }

    /// Sends closeSession and waits for its reply (or the connection closing).
    pub fn close(self) {
        self.conn.close(8);
    }
}
