//! Client request records (the `proto` records of `zookeeper.jute`; `MultiOperationRecord` for
//! multi) and the [`Request`] enum with one variant per opcode a client may send. Decoding
//! distrusts every byte: an opcode a client may not send is [`RequestDecodeError::UnknownOpcode`];
//! a body that does not parse is [`RequestDecodeError::Malformed`].

use bytes::Bytes;
use thiserror::Error;

use crate::data::Acl;
use crate::header::{MultiHeader, RequestHeader};
use crate::jute::{DecodeError, Reader, Record, Writer};
use crate::opcode::OpCode;

/// CreateRequest (opcodes 1, 15, 19): `ustring path, buffer data, vector<ACL> acl, int flags`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct CreateRequest {
    pub path: String,
    /// `None` is the null buffer, kept distinct from empty.
    pub data: Option<Vec<u8>>,
    pub acl: Vec<Acl>,
    /// `CreateMode` flags.
    pub flags: i32,
}

impl Record for CreateRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
        w.write_buffer(self.data.as_deref());
        w.write_vec(&self.acl);
        w.write_i32(self.flags);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { path: r.read_ustring()?, data: r.read_buffer()?, acl: r.read_vec()?, flags: r.read_i32()? })
    }
}

/// CreateTTLRequest (opcode 21): CreateRequest's fields plus `long ttl` (milliseconds).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct CreateTtlRequest {
    pub path: String,
    pub data: Option<Vec<u8>>,
    pub acl: Vec<Acl>,
    pub flags: i32,
    pub ttl: i64,
}

impl Record for CreateTtlRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
        w.write_buffer(self.data.as_deref());
        w.write_vec(&self.acl);
        w.write_i32(self.flags);
        w.write_i64(self.ttl);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            path: r.read_ustring()?,
            data: r.read_buffer()?,
            acl: r.read_vec()?,
            flags: r.read_i32()?,
            ttl: r.read_i64()?,
        })
    }
}

/// A record of `ustring path, int version`: DeleteRequest (2) and CheckVersionRequest (13).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct PathVersion {
    pub path: String,
    /// Expected version, -1 for any.
    pub version: i32,
}

/// DeleteRequest: `ustring path, int version`.
pub type DeleteRequest = PathVersion;
/// CheckVersionRequest (multi sub-op only): `ustring path, int version`.
pub type CheckVersionRequest = PathVersion;

impl Record for PathVersion {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
        w.write_i32(self.version);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { path: r.read_ustring()?, version: r.read_i32()? })
    }
}

/// ExistsRequest / GetDataRequest / GetChildrenRequest / GetChildren2Request: `ustring path, boolean watch`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct PathWatch {
    pub path: String,
    pub watch: bool,
}

impl Record for PathWatch {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
        w.write_bool(self.watch);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { path: r.read_ustring()?, watch: r.read_bool()? })
    }
}

/// A record of one `ustring path`: GetACLRequest, SyncRequest, GetAllChildrenNumberRequest,
/// DeleteContainerRequest, GetEphemeralsRequest (prefixPath).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct PathRequest {
    pub path: String,
}

/// GetACLRequest: `ustring path`.
pub type GetAclRequest = PathRequest;
/// SyncRequest: `ustring path`.
pub type SyncRequest = PathRequest;
/// GetAllChildrenNumberRequest: `ustring path`.
pub type GetAllChildrenNumberRequest = PathRequest;
/// DeleteContainerRequest: `ustring path`.
pub type DeleteContainerRequest = PathRequest;

impl Record for PathRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { path: r.read_ustring()? })
    }
}

/// GetEphemeralsRequest (103): `ustring prefixPath`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct GetEphemeralsRequest {
    pub prefix: String,
}

impl Record for GetEphemeralsRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.prefix);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { prefix: r.read_ustring()? })
    }
}

/// SetDataRequest (5): `ustring path, buffer data, int version`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct SetDataRequest {
    pub path: String,
    /// Decoded by a reader over the frame's `Bytes` ([`Request::decode_from`]), a slice of them.
    pub data: Option<Bytes>,
    pub version: i32,
}

impl Record for SetDataRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
        w.write_buffer(self.data.as_deref());
        w.write_i32(self.version);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { path: r.read_ustring()?, data: r.read_shared_buffer()?, version: r.read_i32()? })
    }
}

/// SetACLRequest (7): `ustring path, vector<ACL> acl, int version`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct SetAclRequest {
    pub path: String,
    pub acl: Vec<Acl>,
    pub version: i32,
}

impl Record for SetAclRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
        w.write_vec(&self.acl);
        w.write_i32(self.version);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { path: r.read_ustring()?, acl: r.read_vec()?, version: r.read_i32()? })
    }
}

/// AuthPacket (100): `int type, ustring scheme, buffer auth`. Clients send type 0.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct AuthPacket {
    pub auth_type: i32,
    pub scheme: String,
    /// Credentials; a null buffer reads as empty.
    pub auth: Vec<u8>,
}

impl Record for AuthPacket {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.auth_type);
        w.write_ustring(&self.scheme);
        w.write_buffer(Some(&self.auth));
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { auth_type: r.read_i32()?, scheme: r.read_ustring()?, auth: r.read_buffer()?.unwrap_or_default() })
    }
}

/// SetWatches (101): the watches a client re-arms after reconnecting (ZooKeeper's
/// `DataTree.setWatches`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct SetWatches {
    /// The client's last seen zxid.
    pub relative_zxid: i64,
    pub data: Vec<String>,
    pub exist: Vec<String>,
    pub child: Vec<String>,
}

impl Record for SetWatches {
    fn encode(&self, w: &mut Writer) {
        w.write_i64(self.relative_zxid);
        w.write_string_vec(&self.data);
        w.write_string_vec(&self.exist);
        w.write_string_vec(&self.child);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            relative_zxid: r.read_i64()?,
            data: r.read_string_vec()?,
            exist: r.read_string_vec()?,
            child: r.read_string_vec()?,
        })
    }
}

/// SetWatches2 (105): the SetWatches fields, then persistent and persistent-recursive watches.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct SetWatches2 {
    pub base: SetWatches,
    pub persistent: Vec<String>,
    pub persistent_recursive: Vec<String>,
}

impl Record for SetWatches2 {
    fn encode(&self, w: &mut Writer) {
        self.base.encode(w);
        w.write_string_vec(&self.persistent);
        w.write_string_vec(&self.persistent_recursive);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            base: SetWatches::decode(r)?,
            persistent: r.read_string_vec()?,
            persistent_recursive: r.read_string_vec()?,
        })
    }
}

/// AddWatchRequest (106): `ustring path, int mode` (see [`crate::header::add_watch_mode`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct AddWatchRequest {
    pub path: String,
    pub mode: i32,
}

impl Record for AddWatchRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
        w.write_i32(self.mode);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { path: r.read_ustring()?, mode: r.read_i32()? })
    }
}

/// CheckWatchesRequest (17) / RemoveWatchesRequest (18): `ustring path, int type`
/// (see [`crate::header::watcher_type`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct WatchesRequest {
    pub path: String,
    pub watcher_type: i32,
}

/// CheckWatchesRequest: `ustring path, int type`.
pub type CheckWatchesRequest = WatchesRequest;
/// RemoveWatchesRequest: `ustring path, int type`.
pub type RemoveWatchesRequest = WatchesRequest;

impl Record for WatchesRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.path);
        w.write_i32(self.watcher_type);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { path: r.read_ustring()?, watcher_type: r.read_i32()? })
    }
}

/// GetSASLRequest (102): `buffer token`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct SaslRequest {
    /// A null token reads as empty.
    pub token: Vec<u8>,
}

impl Record for SaslRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_buffer(Some(&self.token));
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { token: r.read_buffer()?.unwrap_or_default() })
    }
}

/// ReconfigRequest (16): `ustring joiningServers, ustring leavingServers, ustring newMembers,
/// long curConfigId`. The strings are null when not given, so they stay `Option`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct ReconfigRequest {
    pub joining: Option<String>,
    pub leaving: Option<String>,
    pub new_members: Option<String>,
    /// Expected current config version, -1 for any.
    pub cur_config_id: i64,
}

impl Record for ReconfigRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring_opt(self.joining.as_deref());
        w.write_ustring_opt(self.leaving.as_deref());
        w.write_ustring_opt(self.new_members.as_deref());
        w.write_i64(self.cur_config_id);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            joining: r.read_ustring_opt()?,
            leaving: r.read_ustring_opt()?,
            new_members: r.read_ustring_opt()?,
            cur_config_id: r.read_i64()?,
        })
    }
}

/// One sub-operation of a multi (14) or multiRead (22) request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MultiOp {
    Create(CreateRequest),
    Create2(CreateRequest),
    CreateContainer(CreateRequest),
    CreateTtl(CreateTtlRequest),
    Delete(DeleteRequest),
    SetData(SetDataRequest),
    Check(CheckVersionRequest),
    /// multiRead only. The watch flag is carried but clients send false.
    GetChildren(PathWatch),
    /// multiRead only.
    GetData(PathWatch),
}

/// Whether a multi body belongs to `multi` (writes) or `multiRead` (reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MultiKind {
    /// Opcode 14: sub-ops 1, 15, 19, 21, 2, 5, 13.
    Write,
    /// Opcode 22: sub-ops 8, 4.
    Read,
}

impl MultiKind {
    fn allows(self, op: i32) -> bool {
        match self {
            MultiKind::Write => [1, 15, 19, 21, 2, 5, 13].contains(&op),
            MultiKind::Read => [8, 4].contains(&op),
        }
    }
}

impl MultiOp {
    /// The sub-op's opcode, written in its MultiHeader.
    pub fn op_code(&self) -> OpCode {
        match self {
            MultiOp::Create(_) => OpCode::Create,
            MultiOp::Create2(_) => OpCode::Create2,
            MultiOp::CreateContainer(_) => OpCode::CreateContainer,
            MultiOp::CreateTtl(_) => OpCode::CreateTtl,
            MultiOp::Delete(_) => OpCode::Delete,
            MultiOp::SetData(_) => OpCode::SetData,
            MultiOp::Check(_) => OpCode::Check,
            MultiOp::GetChildren(_) => OpCode::GetChildren,
            MultiOp::GetData(_) => OpCode::GetData,
        }
    }

    /// The path the sub-op is about.
    pub fn path(&self) -> &str {
        match self {
            MultiOp::Create(c) | MultiOp::Create2(c) | MultiOp::CreateContainer(c) => &c.path,
            MultiOp::CreateTtl(c) => &c.path,
            MultiOp::Delete(p) | MultiOp::Check(p) => &p.path,
            MultiOp::SetData(s) => &s.path,
            MultiOp::GetChildren(p) | MultiOp::GetData(p) => &p.path,
        }
    }

    /// Writes `MultiHeader{type, false, -1}` and the sub-op's record.
    pub fn encode(&self, w: &mut Writer) {
        MultiHeader { op_type: self.op_code().code(), done: false, err: -1 }.encode(w);
        match self {
            MultiOp::Create(c) | MultiOp::Create2(c) | MultiOp::CreateContainer(c) => c.encode(w),
            MultiOp::CreateTtl(c) => c.encode(w),
            MultiOp::Delete(p) | MultiOp::Check(p) => p.encode(w),
            MultiOp::SetData(s) => s.encode(w),
            MultiOp::GetChildren(p) | MultiOp::GetData(p) => p.encode(w),
        }
    }

    /// Decodes the record following a sub-op header of type `op`, which the caller has checked.
    fn decode_body(op: i32, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(match op {
            1 => MultiOp::Create(CreateRequest::decode(r)?),
            15 => MultiOp::Create2(CreateRequest::decode(r)?),
            19 => MultiOp::CreateContainer(CreateRequest::decode(r)?),
            21 => MultiOp::CreateTtl(CreateTtlRequest::decode(r)?),
            2 => MultiOp::Delete(PathVersion::decode(r)?),
            5 => MultiOp::SetData(SetDataRequest::decode(r)?),
            13 => MultiOp::Check(PathVersion::decode(r)?),
            8 => MultiOp::GetChildren(PathWatch::decode(r)?),
            4 => MultiOp::GetData(PathWatch::decode(r)?),
            _ => return Err(DecodeError::Invalid("sub-op type not allowed in multi")),
        })
    }
}

/// Encodes a multi body: each sub-op, then the terminating `MultiHeader{-1, true, -1}`.
pub fn encode_multi_ops(ops: &[MultiOp], w: &mut Writer) {
    for op in ops {
        op.encode(w);
    }
    MultiHeader::END.encode(w);
}

/// Decodes a multi body up to its terminating header (the one with `done` set). A sub-op type the
/// kind does not allow is `Invalid`.
pub fn decode_multi_ops(kind: MultiKind, r: &mut Reader<'_>) -> Result<Vec<MultiOp>, DecodeError> {
    let mut ops = Vec::new();
    loop {
        let h = MultiHeader::decode(r)?;
        if h.done {
            return Ok(ops);
        }
        if !kind.allows(h.op_type) {
            return Err(DecodeError::Invalid("sub-op type not allowed in this multi"));
        }
        ops.push(MultiOp::decode_body(h.op_type, r)?);
    }
}

/// Why a request body could not become a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestDecodeError {
    /// An opcode a client may not send at top level (includes 0 and 13): reply UNIMPLEMENTED, close.
    #[error("unknown opcode {0}")]
    UnknownOpcode(i32),
    /// The body does not parse: reply MARSHALLINGERROR or close.
    #[error("malformed request body: {0}")]
    Malformed(#[from] DecodeError),
}

/// A decoded client request: one variant per opcode a client may send (`ZooDefs.OpCode`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Request {
    Create(CreateRequest),
    Delete(DeleteRequest),
    Exists(PathWatch),
    GetData(PathWatch),
    SetData(SetDataRequest),
    GetAcl(GetAclRequest),
    SetAcl(SetAclRequest),
    GetChildren(PathWatch),
    Sync(SyncRequest),
    Ping,
    GetChildren2(PathWatch),
    Multi(Vec<MultiOp>),
    Create2(CreateRequest),
    Reconfig(ReconfigRequest),
    CheckWatches(CheckWatchesRequest),
    RemoveWatches(RemoveWatchesRequest),
    CreateContainer(CreateRequest),
    DeleteContainer(DeleteContainerRequest),
    CreateTtl(CreateTtlRequest),
    MultiRead(Vec<MultiOp>),
    Auth(AuthPacket),
    SetWatches(SetWatches),
    Sasl(SaslRequest),
    GetEphemerals(GetEphemeralsRequest),
    GetAllChildrenNumber(GetAllChildrenNumberRequest),
    SetWatches2(SetWatches2),
    AddWatch(AddWatchRequest),
    WhoAmI,
    CloseSession,
}

impl Request {
    /// The opcode written in the RequestHeader.
    pub fn op_code(&self) -> OpCode {
        use Request as R;
        match self {
            R::Create(_) => OpCode::Create,
            R::Delete(_) => OpCode::Delete,
            R::Exists(_) => OpCode::Exists,
            R::GetData(_) => OpCode::GetData,
            R::SetData(_) => OpCode::SetData,
            R::GetAcl(_) => OpCode::GetAcl,
            R::SetAcl(_) => OpCode::SetAcl,
            R::GetChildren(_) => OpCode::GetChildren,
            R::Sync(_) => OpCode::Sync,
            R::Ping => OpCode::Ping,
            R::GetChildren2(_) => OpCode::GetChildren2,
            R::Multi(_) => OpCode::Multi,
            R::Create2(_) => OpCode::Create2,
            R::Reconfig(_) => OpCode::Reconfig,
            R::CheckWatches(_) => OpCode::CheckWatches,
            R::RemoveWatches(_) => OpCode::RemoveWatches,
            R::CreateContainer(_) => OpCode::CreateContainer,
            R::DeleteContainer(_) => OpCode::DeleteContainer,
            R::CreateTtl(_) => OpCode::CreateTtl,
            R::MultiRead(_) => OpCode::MultiRead,
            R::Auth(_) => OpCode::Auth,
            R::SetWatches(_) => OpCode::SetWatches,
            R::Sasl(_) => OpCode::Sasl,
            R::GetEphemerals(_) => OpCode::GetEphemerals,
            R::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
            R::SetWatches2(_) => OpCode::SetWatches2,
            R::AddWatch(_) => OpCode::AddWatch,
            R::WhoAmI => OpCode::WhoAmI,
            R::CloseSession => OpCode::CloseSession,
        }
    }

    /// Decodes the body of a request whose header carried `op_code`. Trailing bytes are ignored,
    /// as the Java server does.
    pub fn decode(op_code: i32, body: &[u8]) -> Result<Request, RequestDecodeError> {
        Self::decode_from(op_code, &mut Reader::new(body))
    }

    /// As [`Request::decode`], from the rest of `r`'s input; with a reader over `Bytes`
    /// ([`Reader::over_bytes`]), a setData's data is a slice of them, not a copy.
    pub fn decode_from(op_code: i32, r: &mut Reader<'_>) -> Result<Request, RequestDecodeError> {
        let op = OpCode::from_code(op_code).ok_or(RequestDecodeError::UnknownOpcode(op_code))?;
        Self::decode_op(op, r)?.ok_or(RequestDecodeError::UnknownOpcode(op_code))
    }

    /// Decodes a frame payload: RequestHeader, then the body.
    pub fn decode_payload(payload: &[u8]) -> Result<(RequestHeader, Request), RequestDecodeError> {
        let mut r = Reader::new(payload);
        let header = RequestHeader::decode(&mut r)?;
        let body = payload.get(r.position()..).unwrap_or_default();
        Ok((header, Self::decode(header.op_type, body)?))
    }

    /// `Ok(None)` for opcodes that exist but that a client may not send.
    fn decode_op(op: OpCode, r: &mut Reader<'_>) -> Result<Option<Request>, DecodeError> {
        use Request as R;
        Ok(Some(match op {
            OpCode::Create => R::Create(Record::decode(r)?),
            OpCode::Delete => R::Delete(Record::decode(r)?),
            OpCode::Exists => R::Exists(Record::decode(r)?),
            OpCode::GetData => R::GetData(Record::decode(r)?),
            OpCode::SetData => R::SetData(Record::decode(r)?),
            OpCode::GetAcl => R::GetAcl(Record::decode(r)?),
            OpCode::SetAcl => R::SetAcl(Record::decode(r)?),
            OpCode::GetChildren => R::GetChildren(Record::decode(r)?),
            OpCode::Sync => R::Sync(Record::decode(r)?),
            OpCode::Ping => R::Ping,
            OpCode::GetChildren2 => R::GetChildren2(Record::decode(r)?),
            OpCode::Multi => R::Multi(decode_multi_ops(MultiKind::Write, r)?),
            OpCode::Create2 => R::Create2(Record::decode(r)?),
            OpCode::Reconfig => R::Reconfig(Record::decode(r)?),
            OpCode::CheckWatches => R::CheckWatches(Record::decode(r)?),
            OpCode::RemoveWatches => R::RemoveWatches(Record::decode(r)?),
            OpCode::CreateContainer => R::CreateContainer(Record::decode(r)?),
            OpCode::DeleteContainer => R::DeleteContainer(Record::decode(r)?),
            OpCode::CreateTtl => R::CreateTtl(Record::decode(r)?),
            OpCode::MultiRead => R::MultiRead(decode_multi_ops(MultiKind::Read, r)?),
            OpCode::Auth => R::Auth(Record::decode(r)?),
            OpCode::SetWatches => R::SetWatches(Record::decode(r)?),
            OpCode::Sasl => R::Sasl(Record::decode(r)?),
            OpCode::GetEphemerals => R::GetEphemerals(Record::decode(r)?),
            OpCode::GetAllChildrenNumber => R::GetAllChildrenNumber(Record::decode(r)?),
            OpCode::SetWatches2 => R::SetWatches2(Record::decode(r)?),
            OpCode::AddWatch => R::AddWatch(Record::decode(r)?),
            OpCode::WhoAmI => R::WhoAmI,
            OpCode::CloseSession => R::CloseSession,
            OpCode::Notification | OpCode::Check | OpCode::CreateSession | OpCode::Error => return Ok(None),
        }))
    }

    /// Writes the body (no header).
    pub fn encode_body(&self, w: &mut Writer) {
        use Request as R;
        match self {
            R::Create(c) | R::Create2(c) | R::CreateContainer(c) => c.encode(w),
            R::CreateTtl(c) => c.encode(w),
            R::Delete(p) => p.encode(w),
            R::Exists(p) | R::GetData(p) | R::GetChildren(p) | R::GetChildren2(p) => p.encode(w),
            R::SetData(s) => s.encode(w),
            R::GetAcl(p) | R::Sync(p) | R::DeleteContainer(p) | R::GetAllChildrenNumber(p) => p.encode(w),
            R::SetAcl(s) => s.encode(w),
            R::Multi(ops) | R::MultiRead(ops) => encode_multi_ops(ops, w),
            R::Reconfig(c) => c.encode(w),
            R::CheckWatches(c) | R::RemoveWatches(c) => c.encode(w),
            R::Auth(a) => a.encode(w),
            R::SetWatches(s) => s.encode(w),
            R::SetWatches2(s) => s.encode(w),
            R::Sasl(s) => s.encode(w),
            R::GetEphemerals(g) => g.encode(w),
            R::AddWatch(a) => a.encode(w),
            R::Ping | R::WhoAmI | R::CloseSession => {}
        }
    }

    /// The frame payload: RequestHeader{xid, opcode} then the body (no length prefix).
    pub fn encode(&self, xid: i32) -> Vec<u8> {
        let mut w = Writer::new();
        RequestHeader { xid, op_type: self.op_code().code() }.encode(&mut w);
        self.encode_body(&mut w);
        w.into_inner()
    }

    /// The complete frame: length prefix, RequestHeader, body.
    pub fn encode_frame(&self, xid: i32) -> Vec<u8> {
        crate::frame::frame_with(|w| {
            RequestHeader { xid, op_type: self.op_code().code() }.encode(w);
            self.encode_body(w);
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::data::Id;
    use proptest::prelude::*;

    fn path() -> impl Strategy<Value = String> {
        "(/[a-z0-9]{1,6}){1,3}|/"
    }

    fn data() -> impl Strategy<Value = Option<Vec<u8>>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16))
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..16)
    }

    fn paths() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec(path(), 0..4)
    }

    pub(crate) fn acl() -> impl Strategy<Value = Vec<Acl>> {
        let one = (0..32i32, "[a-z]{0,6}", "[a-z:]{0,8}").prop_map(|(p, s, i)| Acl::new(p, Id::new(s, i)));
        proptest::collection::vec(one, 0..3)
    }

    fn create() -> impl Strategy<Value = CreateRequest> {
        (path(), data(), acl(), any::<i32>()).prop_map(|(path, data, acl, flags)| CreateRequest {
            path,
            data,
            acl,
            flags,
        })
    }

    fn create_ttl() -> impl Strategy<Value = CreateTtlRequest> {
        (create(), any::<i64>()).prop_map(|(c, ttl)| CreateTtlRequest {
            path: c.path,
            data: c.data,
            acl: c.acl,
            flags: c.flags,
            ttl,
        })
    }

    fn path_version() -> impl Strategy<Value = PathVersion> {
        (path(), any::<i32>()).prop_map(|(path, version)| PathVersion { path, version })
    }

    fn path_watch() -> impl Strategy<Value = PathWatch> {
        (path(), any::<bool>()).prop_map(|(path, watch)| PathWatch { path, watch })
    }

    fn path_req() -> impl Strategy<Value = PathRequest> {
        path().prop_map(|path| PathRequest { path })
    }

    fn set_data() -> impl Strategy<Value = SetDataRequest> {
        (path(), data(), any::<i32>()).prop_map(|(path, data, version)| SetDataRequest {
            path,
            data: data.map(Bytes::from),
            version,
        })
    }

    fn write_op() -> impl Strategy<Value = MultiOp> {
        prop_oneof![
            create().prop_map(MultiOp::Create),
            create().prop_map(MultiOp::Create2),
            create().prop_map(MultiOp::CreateContainer),
            create_ttl().prop_map(MultiOp::CreateTtl),
            path_version().prop_map(MultiOp::Delete),
            set_data().prop_map(MultiOp::SetData),
            path_version().prop_map(MultiOp::Check),
        ]
    }

    fn read_op() -> impl Strategy<Value = MultiOp> {
        prop_oneof![path_watch().prop_map(MultiOp::GetChildren), path_watch().prop_map(MultiOp::GetData)]
    }

    fn watches() -> impl Strategy<Value = SetWatches2> {
        (any::<i64>(), paths(), paths(), paths(), paths(), paths()).prop_map(|(z, d, e, c, p, pr)| SetWatches2 {
            base: SetWatches { relative_zxid: z, data: d, exist: e, child: c },
            persistent: p,
            persistent_recursive: pr,
        })
    }

    fn opt_str() -> impl Strategy<Value = Option<String>> {
        proptest::option::of("[a-z0-9=:;.]{0,20}")
    }

    fn misc_request() -> impl Strategy<Value = Request> {
        prop_oneof![
            (any::<i32>(), "[a-z]{0,8}", bytes()).prop_map(|(t, s, a)| Request::Auth(AuthPacket {
                auth_type: t,
                scheme: s,
                auth: a
            })),
            watches().prop_map(|w| Request::SetWatches(w.base)),
            watches().prop_map(Request::SetWatches2),
            bytes().prop_map(|token| Request::Sasl(SaslRequest { token })),
            path().prop_map(|prefix| Request::GetEphemerals(GetEphemeralsRequest { prefix })),
            path_req().prop_map(Request::GetAllChildrenNumber),
            (path(), any::<i32>()).prop_map(|(path, mode)| Request::AddWatch(AddWatchRequest { path, mode })),
            (path(), any::<i32>())
                .prop_map(|(path, t)| Request::CheckWatches(WatchesRequest { path, watcher_type: t })),
            (path(), any::<i32>())
                .prop_map(|(path, t)| Request::RemoveWatches(WatchesRequest { path, watcher_type: t })),
            (opt_str(), opt_str(), opt_str(), any::<i64>()).prop_map(|(j, l, n, c)| Request::Reconfig(
                ReconfigRequest { joining: j, leaving: l, new_members: n, cur_config_id: c }
            )),
            Just(Request::Ping),
            Just(Request::WhoAmI),
            Just(Request::CloseSession),
        ]
    }

    fn node_request() -> impl Strategy<Value = Request> {
        prop_oneof![
            create().prop_map(Request::Create),
            create().prop_map(Request::Create2),
            create().prop_map(Request::CreateContainer),
            create_ttl().prop_map(Request::CreateTtl),
            path_version().prop_map(Request::Delete),
            path_req().prop_map(Request::DeleteContainer),
            path_watch().prop_map(Request::Exists),
            path_watch().prop_map(Request::GetData),
            path_watch().prop_map(Request::GetChildren),
            path_watch().prop_map(Request::GetChildren2),
            set_data().prop_map(Request::SetData),
            path_req().prop_map(Request::GetAcl),
            (path(), acl(), any::<i32>()).prop_map(|(path, acl, version)| Request::SetAcl(SetAclRequest {
                path,
                acl,
                version
            })),
            path_req().prop_map(Request::Sync),
            proptest::collection::vec(write_op(), 0..4).prop_map(Request::Multi),
            proptest::collection::vec(read_op(), 0..4).prop_map(Request::MultiRead),
        ]
    }

    /// Any request a client may send.
    pub(crate) fn request() -> impl Strategy<Value = Request> {
        prop_oneof![node_request(), misc_request()]
    }

    proptest! {
        #[test]
        fn request_round_trips(req in request(), xid: i32) {
            let payload = req.encode(xid);
            let (h, back) = Request::decode_payload(&payload).unwrap();
            prop_assert_eq!(h, RequestHeader { xid, op_type: req.op_code().code() });
            prop_assert_eq!(&back, &req);
            let frame = req.encode_frame(xid);
            prop_assert_eq!(&frame[4..], &payload[..]);
            prop_assert_eq!(u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize, payload.len());
        }

        #[test]
        fn every_strict_prefix_is_incomplete(req in request(), xid: i32) {
            let payload = req.encode(xid);
            let body = &payload[8..];
            for n in 0..body.len() {
                let res = Request::decode(req.op_code().code(), &body[..n]);
                prop_assert!(matches!(res, Err(RequestDecodeError::Malformed(DecodeError::Incomplete { .. }))), "{:?}", res);
            }
            for n in 0..8 {
                let res = Request::decode_payload(&payload[..n]);
                prop_assert!(matches!(res, Err(RequestDecodeError::Malformed(DecodeError::Incomplete { .. }))), "{:?}", res);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(op in -12i32..110, body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Request::decode(op, &body);
        }
    }

    #[test]
    fn every_record_round_trips() {
        fn rt<T: Record + PartialEq + std::fmt::Debug>(v: T) {
            assert_eq!(T::from_bytes(&v.to_bytes()), Ok(v));
        }
        rt(CreateRequest { path: "/a".into(), data: None, acl: Acl::open_unsafe(), flags: 3 });
        rt(CreateTtlRequest { path: "/a".into(), data: Some(vec![]), acl: vec![], flags: 5, ttl: 1000 });
        rt(PathVersion { path: "/a".into(), version: -1 });
        rt(PathWatch { path: "/a".into(), watch: true });
        rt(PathRequest { path: "/".into() });
        rt(GetEphemeralsRequest { prefix: "/e".into() });
        rt(SetDataRequest { path: "/a".into(), data: Some(Bytes::from_static(b"x")), version: 2 });
        rt(SetAclRequest { path: "/a".into(), acl: Acl::creator_all(), version: 0 });
        rt(AuthPacket { auth_type: 0, scheme: "digest".into(), auth: b"u:p".to_vec() });
        rt(SetWatches { relative_zxid: 9, data: vec!["/d".into()], exist: vec![], child: vec!["/c".into()] });
        rt(SetWatches2 {
            base: SetWatches { relative_zxid: 9, ..Default::default() },
            persistent_recursive: vec!["/r".into()],
            ..Default::default()
        });
        rt(AddWatchRequest { path: "/a".into(), mode: 1 });
        rt(WatchesRequest { path: "/a".into(), watcher_type: 3 });
        rt(SaslRequest { token: vec![1, 2] });
        rt(ReconfigRequest { joining: None, leaving: Some("3".into()), new_members: None, cur_config_id: -1 });
    }

    /// A setData decoded by a reader over the frame's `Bytes` keeps its data in the frame; a plain
    /// reader copies it.
    #[test]
    fn set_data_from_bytes_shares_the_frame() {
        let req = SetDataRequest { path: "/a".into(), data: Some(Bytes::from(vec![7u8; 100])), version: 3 };
        let frame = Bytes::from(req.to_bytes());
        let within = |r: Request| match r {
            Request::SetData(got) => {
                assert_eq!(got, req);
                frame.as_ptr_range().contains(&got.data.unwrap().as_ptr())
            }
            other => panic!("decoded as {other:?}"),
        };
        let op = OpCode::SetData as i32;
        assert!(within(Request::decode_from(op, &mut Reader::over_bytes(&frame)).unwrap()), "data was copied");
        assert!(!within(Request::decode(op, &frame).unwrap()), "a plain reader shared the caller's slice");
    }

    /// A whole frame's fields may be as long as the frame: a server configured with a jute.maxbuffer
    /// above the default takes data that large (its frame decoder has applied the limit).
    #[test]
    fn a_frame_reader_takes_fields_up_to_the_frames_length() {
        let data = Bytes::from(vec![1u8; 5 << 20]);
        let req = SetDataRequest { path: "/a".into(), data: Some(data), version: -1 };
        let frame = Bytes::from(req.to_bytes());
        let op = OpCode::SetData as i32;
        assert_eq!(Request::decode_from(op, &mut Reader::over_bytes(&frame)), Ok(Request::SetData(req)));
        // A length beyond the frame is still refused, never allocated.
        let short = frame.slice(..frame.len() - 1);
        assert!(Request::decode_from(op, &mut Reader::over_bytes(&short)).is_err());
    }

    #[test]
    fn top_level_opcodes_clients_may_not_send() {
        for op in [0, 13, -10, -1, 10, 23, 99, 108, i32::MIN] {
            assert_eq!(Request::decode(op, &[]), Err(RequestDecodeError::UnknownOpcode(op)));
        }
    }

    #[test]
    fn multi_sub_op_kinds_are_enforced() {
        let read = Request::MultiRead(vec![MultiOp::GetData(PathWatch { path: "/a".into(), watch: false })]);
        let body = &read.encode(1)[8..];
        assert!(matches!(Request::decode(14, body), Err(RequestDecodeError::Malformed(DecodeError::Invalid(_)))));
        let write = Request::Multi(vec![MultiOp::Check(PathVersion { path: "/a".into(), version: 0 })]);
        let body = &write.encode(1)[8..];
        assert!(matches!(Request::decode(22, body), Err(RequestDecodeError::Malformed(DecodeError::Invalid(_)))));
        // Sub-op type 20 (deleteContainer) and 3 (exists) are not allowed anywhere.
        for t in [20, 3, 0, -1, 14] {
            let mut w = Writer::new();
            MultiHeader { op_type: t, done: false, err: -1 }.encode(&mut w);
            PathVersion { path: "/a".into(), version: 0 }.encode(&mut w);
            MultiHeader::END.encode(&mut w);
            assert!(matches!(
                Request::decode(14, w.as_slice()),
                Err(RequestDecodeError::Malformed(DecodeError::Invalid(_)))
            ));
        }
    }

    /// Section 6: multi [create /a "x" OPEN_ACL flags 0, check /a v0] as the Java client lays it out.
    #[test]
    fn multi_request_golden() {
        let req = Request::Multi(vec![
            MultiOp::Create(CreateRequest {
                path: "/a".into(),
                data: Some(b"x".to_vec()),
                acl: Acl::open_unsafe(),
                flags: 0,
            }),
            MultiOp::Check(PathVersion { path: "/a".into(), version: 0 }),
        ]);
        #[rustfmt::skip]
        let golden: Vec<u8> = [
            &[0, 0, 0, 5, 0, 0, 0, 14][..],            // RequestHeader xid 5, multi
            &[0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff],   // MultiHeader{1, false, -1}
            &[0, 0, 0, 2, b'/', b'a'],                  // path
            &[0, 0, 0, 1, b'x'],                        // data
            &[0, 0, 0, 1, 0, 0, 0, 31],                 // 1 ACL, perms ALL
            &[0, 0, 0, 5, b'w', b'o', b'r', b'l', b'd'],
            &[0, 0, 0, 6, b'a', b'n', b'y', b'o', b'n', b'e'],
            &[0, 0, 0, 0],                              // flags
            &[0, 0, 0, 13, 0, 0xff, 0xff, 0xff, 0xff],  // MultiHeader{13, false, -1}
            &[0, 0, 0, 2, b'/', b'a', 0, 0, 0, 0],      // path, version
            &[0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff], // end
        ].concat();
        assert_eq!(req.encode(5), golden);
        assert_eq!(Request::decode_payload(&golden), Ok((RequestHeader { xid: 5, op_type: 14 }, req)));
    }

    #[test]
    fn ping_golden() {
        assert_eq!(
            Request::Ping.encode_frame(crate::opcode::xid::PING),
            [0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0x0b]
        );
        assert_eq!(
            Request::decode_payload(&[0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0x0b]),
            Ok((RequestHeader { xid: -2, op_type: 11 }, Request::Ping))
        );
    }

    #[test]
    fn hostile_lengths_in_bodies() {
        let mut body = i32::MAX.to_be_bytes().to_vec();
        body.push(1);
        assert_eq!(Request::decode(4, &body), Err(RequestDecodeError::Malformed(DecodeError::BadLength(i32::MAX))));
        assert_eq!(
            Request::decode(4, &(-5i32).to_be_bytes()),
            Err(RequestDecodeError::Malformed(DecodeError::BadLength(-5)))
        );
        // A huge vector count with few bytes behind it is incomplete, without allocating for the count.
        let mut body = vec![0u8; 8];
        body.extend_from_slice(&1_000_000i32.to_be_bytes());
        assert!(matches!(
            Request::decode(101, &body),
            Err(RequestDecodeError::Malformed(DecodeError::Incomplete { .. }))
        ));
        // A count beyond any possible frame is rejected outright.
        body[8..12].copy_from_slice(&0x00ff_ffffi32.to_be_bytes());
        assert_eq!(
            Request::decode(101, &body),
            Err(RequestDecodeError::Malformed(DecodeError::BadLength(0x00ff_ffff)))
        );
        // A null path reads as empty (as the Java server does); a null ACL vector as empty.
        let mut body = (-1i32).to_be_bytes().to_vec();
        body.push(1);
        assert_eq!(Request::decode(3, &body), Ok(Request::Exists(PathWatch { path: String::new(), watch: true })));
    }

    #[test]
    fn go_zk_style_auth_with_normal_xid() {
        let auth = Request::Auth(AuthPacket { auth_type: 0, scheme: "digest".into(), auth: b"a:b".to_vec() });
        let (h, back) = Request::decode_payload(&auth.encode(7)).unwrap();
        assert_eq!((h.xid, back), (7, auth));
    }
}
