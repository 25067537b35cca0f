//! Transaction records (`TxnHeader`, `CreateTxn`, ... in `zookeeper.jute`): what the leader orders,
//! the log stores and every server applies. Encoded exactly as ZooKeeper's `txn` module so logs and
//! proposals interoperate.

use bytes::Bytes;

use crate::data::Acl;
use crate::jute::{DecodeError, Reader, Record, Writer};
use crate::opcode::OpCode;

/// TxnDigest: the digest version and the tree's digest after the txn (ZooKeeper's tree digest),
/// which ZooKeeper 3.6+ appends to a txn in its log and in PROPOSAL and INFORM packets. Optional
/// on the wire: a record that ends after the txn has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnDigest {
    pub version: i32,
    pub tree_digest: i64,
}

impl TxnDigest {
    /// The digest after a txn body, if the record goes on (`SerializeUtils.deserializeTxn`: a
    /// record too short for one has none).
    pub fn decode_trailing(r: &mut Reader<'_>) -> Option<Self> {
        if r.remaining() < 12 {
            return None;
        }
        Some(TxnDigest { version: r.read_i32().ok()?, tree_digest: r.read_i64().ok()? })
    }

    pub fn encode(&self, w: &mut Writer) {
        w.write_i32(self.version);
        w.write_i64(self.tree_digest);
    }
}

/// TxnHeader: who issued the txn, its zxid and the leader's wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxnHeader {
    pub client_id: i64,
    pub cxid: i32,
    pub zxid: i64,
    pub time_ms: i64,
    pub txn_type: i32,
}

impl Record for TxnHeader {
    fn encode(&self, w: &mut Writer) {
        w.write_i64(self.client_id);
        w.write_i32(self.cxid);
        w.write_i64(self.zxid);
        w.write_i64(self.time_ms);
        w.write_i32(self.txn_type);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            client_id: r.read_i64()?,
            cxid: r.read_i32()?,
            zxid: r.read_i64()?,
            time_ms: r.read_i64()?,
            txn_type: r.read_i32()?,
        })
    }
}

/// The body of a transaction. Data buffers keep the null/empty distinction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Txn {
    /// CreateTxn: `ephemeral` is true for ephemeral nodes (owner = the header's client id).
    Create {
        path: String,
        data: Option<Vec<u8>>,
        acl: Vec<Acl>,
        ephemeral: bool,
        parent_cversion: i32,
    },
    CreateContainer {
        path: String,
        data: Option<Vec<u8>>,
        acl: Vec<Acl>,
        parent_cversion: i32,
    },
    CreateTtl {
        path: String,
        data: Option<Vec<u8>>,
        acl: Vec<Acl>,
        parent_cversion: i32,
        ttl_ms: i64,
    },
    /// Also used for deleteContainer (type 20) with the same body.
    Delete {
        path: String,
    },
    DeleteContainer {
        path: String,
    },
    SetData {
        path: String,
        /// A client's setData keeps the request's data here: a slice of the frame it came in.
        data: Option<Bytes>,
        version: i32,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    /// A committed reconfig: a SetDataTxn on `/zookeeper/config` under txn type reconfig (16),
    /// `data` the new configuration's text (`Membership::to_text`), `version` -1.
    Reconfig {
        path: String,
        data: Option<Bytes>,
        version: i32,
    },
    Check {
        path: String,
        version: i32,
    },
    CreateSession {
        timeout_ms: i32,
    },
    /// CloseSessionTxn: the ephemeral paths to delete.
    CloseSession {
        paths_to_delete: Vec<String>,
    },
    Error {
        err: i32,
    },
    Multi(Vec<Txn>),
}

impl Txn {
    /// Gives every setData in the txn data of its own. A client's setData keeps its data in the
    /// frame it arrived in, and that frame shares its allocation with the rest of the read that
    /// brought it (tens of KiB): a txn kept for long (a leader's committed log holds 500) must not
    /// keep all that alive.
    pub fn detach_data(&mut self) {
        match self {
            Txn::SetData { data: Some(d), .. } | Txn::Reconfig { data: Some(d), .. } => *d = Bytes::copy_from_slice(d),
            Txn::Multi(txns) => txns.iter_mut().for_each(Txn::detach_data),
            _ => {}
        }
    }

    /// The txn type written into the TxnHeader.
    pub fn op(&self) -> OpCode {
        match self {
            Txn::Create { .. } => OpCode::Create,
            Txn::CreateContainer { .. } => OpCode::CreateContainer,
            Txn::CreateTtl { .. } => OpCode::CreateTtl,
            Txn::Delete { .. } => OpCode::Delete,
            Txn::DeleteContainer { .. } => OpCode::DeleteContainer,
            Txn::SetData { .. } => OpCode::SetData,
            Txn::SetAcl { .. } => OpCode::SetAcl,
            Txn::Reconfig { .. } => OpCode::Reconfig,
            Txn::Check { .. } => OpCode::Check,
            Txn::CreateSession { .. } => OpCode::CreateSession,
            Txn::CloseSession { .. } => OpCode::CloseSession,
            Txn::Error { .. } => OpCode::Error,
            Txn::Multi(_) => OpCode::Multi,
        }
    }

    /// The TxnHeader type ZooKeeper logs for this txn when a request with opcode `request_op` made
    /// it. `PrepRequestProcessor.pRequest2Txn` gives the header the request's own type, so a
    /// create2 request's CreateTxn travels and is logged as type create2 (15), not create (1); a
    /// ZooKeeper follower applying it answers its create2 client from the result's Stat, which its
    /// `DataTree.processTxn` fills only for type 15. Every other txn keeps its own type, and so do
    /// a multi's sub-txns: ZooKeeper 3.8's `MultiOperationRecord` reads a create2 sub-op as
    /// `Op.create`, so it is logged as create (1), and its `DataTree.processTxn` refuses a type-15
    /// sub-txn (the whole multi then has no results on that server).
    pub fn header_type(&self, request_op: i32) -> i32 {
        match self {
            Txn::Create { .. } if request_op == OpCode::Create2.code() => request_op,
            _ => self.op().code(),
        }
    }

    /// Encodes the body (without header) as ZooKeeper does.
    pub fn encode_body(&self, w: &mut Writer) {
        match self {
            Txn::Create { path, data, acl, ephemeral, parent_cversion } => {
                w.write_ustring(path);
                w.write_buffer(data.as_deref());
                w.write_vec(acl);
                w.write_bool(*ephemeral);
                w.write_i32(*parent_cversion);
            }
            Txn::CreateContainer { path, data, acl, parent_cversion } => {
                w.write_ustring(path);
                w.write_buffer(data.as_deref());
                w.write_vec(acl);
                w.write_i32(*parent_cversion);
            }
            Txn::CreateTtl { path, data, acl, parent_cversion, ttl_ms } => {
                w.write_ustring(path);
                w.write_buffer(data.as_deref());
                w.write_vec(acl);
                w.write_i32(*parent_cversion);
                w.write_i64(*ttl_ms);
            }
            Txn::Delete { path } | Txn::DeleteContainer { path } => w.write_ustring(path),
            Txn::SetData { path, data, version } | Txn::Reconfig { path, data, version } => {
                w.write_ustring(path);
                w.write_buffer(data.as_deref());
                w.write_i32(*version);
            }
            Txn::SetAcl { path, acl, version } => {
                w.write_ustring(path);
                w.write_vec(acl);
                w.write_i32(*version);
            }
            Txn::Check { path, version } => {
                w.write_ustring(path);
                w.write_i32(*version);
            }
            Txn::CreateSession { timeout_ms } => w.write_i32(*timeout_ms),
            Txn::CloseSession { paths_to_delete } => w.write_string_vec(paths_to_delete),
            Txn::Error { err } => w.write_i32(*err),
            Txn::Multi(txns) => {
                w.write_i32(txns.len() as i32);
                for t in txns {
                    w.write_i32(t.op().code());
                    let mut inner = Writer::new();
                    t.encode_body(&mut inner);
                    w.write_buffer(Some(inner.as_slice()));
                }
            }
        }
    }

    /// Decodes a body of the given txn type. A closeSession with an empty body (logs written with
    /// `closeSessionTxn.enabled=false`) decodes as an empty path list.
    pub fn decode_body(txn_type: i32, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let op = OpCode::from_code(txn_type).ok_or(DecodeError::Invalid("unknown txn type"))?;
        Ok(match op {
            OpCode::Create | OpCode::Create2 => {
                let path = r.read_ustring()?;
                let data = r.read_buffer()?;
                let acl = r.read_vec()?;
                let ephemeral = r.read_bool()?;
                // CreateTxnV0 (legacy) has no parentCVersion.
                let parent_cversion = if r.remaining() >= 4 { r.read_i32()? } else { -1 };
                Txn::Create { path, data, acl, ephemeral, parent_cversion }
            }
            OpCode::CreateContainer => Txn::CreateContainer {
                path: r.read_ustring()?,
                data: r.read_buffer()?,
                acl: r.read_vec()?,
                parent_cversion: r.read_i32()?,
            },
            OpCode::CreateTtl => Txn::CreateTtl {
                path: r.read_ustring()?,
                data: r.read_buffer()?,
                acl: r.read_vec()?,
                parent_cversion: r.read_i32()?,
                ttl_ms: r.read_i64()?,
            },
            OpCode::Delete => Txn::Delete { path: r.read_ustring()? },
            OpCode::DeleteContainer => Txn::DeleteContainer { path: r.read_ustring()? },
            OpCode::SetData => {
                Txn::SetData { path: r.read_ustring()?, data: r.read_shared_buffer()?, version: r.read_i32()? }
            }
            OpCode::Reconfig => {
                Txn::Reconfig { path: r.read_ustring()?, data: r.read_shared_buffer()?, version: r.read_i32()? }
            }
            OpCode::SetAcl => Txn::SetAcl { path: r.read_ustring()?, acl: r.read_vec()?, version: r.read_i32()? },
            OpCode::Check => Txn::Check { path: r.read_ustring()?, version: r.read_i32()? },
            OpCode::CreateSession => Txn::CreateSession { timeout_ms: r.read_i32()? },
            OpCode::CloseSession => {
                let paths_to_delete = if r.is_empty() { Vec::new() } else { r.read_string_vec()? };
                Txn::CloseSession { paths_to_delete }
            }
            OpCode::Error => Txn::Error { err: r.read_i32()? },
            OpCode::Multi => {
                let txns = r.read_vec_with(|r| {
                    let t = r.read_i32()?;
                    let body = r.read_buffer()?.unwrap_or_default();
                    Txn::decode_body(t, &mut Reader::new(&body))
                })?;
                Txn::Multi(txns)
            }
            _ => return Err(DecodeError::Invalid("opcode is not a txn type")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Acl;

    #[test]
    fn detach_data_copies_set_data_out_of_its_buffer() {
        let read = Bytes::from(vec![9u8; 4096]);
        let set = |at: usize| Txn::SetData { path: "/a".into(), data: Some(read.slice(at..at + 8)), version: 1 };
        let mut txn = Txn::Multi(vec![set(0), Txn::Check { path: "/a".into(), version: 1 }, set(100)]);
        let before = txn.clone();
        txn.detach_data();
        assert_eq!(txn, before, "the same values");
        let Txn::Multi(txns) = &txn else { unreachable!() };
        for t in [&txns[0], &txns[2]] {
            let Txn::SetData { data: Some(d), .. } = t else { unreachable!() };
            assert!(!read.as_ptr_range().contains(&d.as_ptr()), "still a slice of the read buffer");
        }
    }

    /// ZooKeeper 3.8 follower applying a type-1 header for a create2 request threw a
    /// NullPointerException building Create2Response (no Stat in its ProcessTxnResult).
    #[test]
    fn a_create2_request_makes_a_create2_header() {
        let create = Txn::Create {
            path: "/a".into(),
            data: None,
            acl: Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: 0,
        };
        assert_eq!(create.header_type(OpCode::Create2.code()), 15);
        assert_eq!(create.header_type(OpCode::Create.code()), 1);
        // A failed create2 is an error txn; other creates keep their own types.
        assert_eq!(Txn::Error { err: -110 }.header_type(OpCode::Create2.code()), -1);
        let ttl = Txn::CreateTtl { path: "/t".into(), data: None, acl: vec![], parent_cversion: 0, ttl_ms: 5 };
        assert_eq!(ttl.header_type(OpCode::CreateTtl.code()), OpCode::CreateTtl.code());
        // And type 15 decodes back to the same CreateTxn.
        let mut w = Writer::new();
        create.encode_body(&mut w);
        assert_eq!(Txn::decode_body(15, &mut Reader::new(w.as_slice())).unwrap(), create);
    }

    #[test]
    fn multi_txn_round_trips() {
        let t = Txn::Multi(vec![
            Txn::Create { path: "/a".into(), data: None, acl: Acl::open_unsafe(), ephemeral: true, parent_cversion: 3 },
            Txn::SetData { path: "/a".into(), data: Some(Bytes::from_static(b"x")), version: 1 },
            Txn::Error { err: -101 },
        ]);
        let mut w = Writer::new();
        t.encode_body(&mut w);
        let back = Txn::decode_body(OpCode::Multi.code(), &mut Reader::new(w.as_slice())).unwrap();
        assert_eq!(back, t);
    }

    /// A reconfig txn is a SetDataTxn body under type 16, and decodes back to a reconfig.
    #[test]
    fn reconfig_txn_is_a_set_data_body_under_type_16() {
        let t = Txn::Reconfig {
            path: "/zookeeper/config".into(),
            data: Some(Bytes::from_static(b"server.1=a:1:2:participant\nversion=100000003")),
            version: -1,
        };
        assert_eq!(t.op(), OpCode::Reconfig);
        let mut w = Writer::new();
        t.encode_body(&mut w);
        let mut set = Writer::new();
        Txn::SetData {
            path: "/zookeeper/config".into(),
            data: Some(Bytes::from_static(b"server.1=a:1:2:participant\nversion=100000003")),
            version: -1,
        }
        .encode_body(&mut set);
        assert_eq!(w.as_slice(), set.as_slice());
        assert_eq!(Txn::decode_body(16, &mut Reader::new(w.as_slice())).unwrap(), t);
    }
}
