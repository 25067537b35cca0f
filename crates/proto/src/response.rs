//! Success bodies of server replies (the `proto` records of `zookeeper.jute`; ZooKeeper's
//! `MultiResponse` and `OpResult` for multi) and whole reply frames.
//!
//! A reply is `ReplyHeader` + body, and the body is omitted whenever `err != 0`. A multi reply keeps
//! `err == 0` and reports per-op failures inside its results. Encoders here build complete frames
//! (length prefix included); callers must keep them within the client's `jute.maxbuffer`.

use crate::data::{Acl, Stat};
use crate::frame::frame_with;
use crate::header::{MultiHeader, ReplyHeader, WatcherEvent};
use crate::jute::{DecodeError, Reader, Record, Writer};
use crate::opcode::{xid, OpCode};

/// ClientInfo (3.7+, whoAmI): `ustring authScheme, ustring user`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct ClientInfo {
    pub auth_scheme: String,
    pub user: String,
}

impl Record for ClientInfo {
    fn encode(&self, w: &mut Writer) {
        w.write_ustring(&self.auth_scheme);
        w.write_ustring(&self.user);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { auth_scheme: r.read_ustring()?, user: r.read_ustring()? })
    }
}

/// The body of a successful reply.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Response {
    /// No body: delete, ping, auth, setWatches(2), checkWatches, removeWatches, closeSession, deleteContainer.
    Empty,
    /// CreateResponse (create, 1).
    Create { path: String },
    /// Create2Response (create2 15, createContainer 19, createTTL 21).
    Create2 { path: String, stat: Stat },
    /// ExistsResponse / SetDataResponse / SetACLResponse.
    Stat(Stat),
    /// GetDataResponse (getData 4, reconfig 16). `None` data is the null buffer.
    GetData { data: Option<Vec<u8>>, stat: Stat },
    /// GetACLResponse.
    GetAcl { acl: Vec<Acl>, stat: Stat },
    /// GetChildrenResponse: child names, not full paths.
    Children { children: Vec<String> },
    /// GetChildren2Response.
    Children2 { children: Vec<String>, stat: Stat },
    /// SyncResponse.
    Sync { path: String },
    /// GetAllChildrenNumberResponse.
    AllChildrenNumber(i32),
    /// GetEphemeralsResponse: full paths.
    Ephemerals(Vec<String>),
    /// addWatch's body: ErrorResponse{0}, four zero bytes that the Java client insists on.
    AddWatch,
    /// WhoAmIResponse.
    WhoAmI(Vec<ClientInfo>),
    /// SetSASLResponse; `None` is the null token a finished SASL exchange may send.
    Sasl { token: Option<Vec<u8>> },
    /// MultiResponse (multi 14, multiRead 22).
    Multi(Vec<MultiResult>),
}

/// One result of a multi or multiRead reply (ZooKeeper's `OpResult`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MultiResult {
    /// Type 1: for create sub-ops.
    Create { path: String },
    /// Type 15: for create2, createContainer and createTTL sub-ops.
    Create2 { path: String, stat: Stat },
    /// Type 2.
    Delete,
    /// Type 5.
    SetData { stat: Stat },
    /// Type 13.
    Check,
    /// Type 8 (multiRead).
    GetChildren { children: Vec<String> },
    /// Type 4 (multiRead).
    GetData { data: Option<Vec<u8>>, stat: Stat },
    /// Type -1 with `err` = the code (0 for sub-ops before the failing one in a failed multi).
    Error(i32),
}

impl MultiResult {
    /// The type written in the result's MultiHeader.
    pub fn op_type(&self) -> i32 {
        match self {
            MultiResult::Create { .. } => OpCode::Create.code(),
            MultiResult::Create2 { .. } => OpCode::Create2.code(),
            MultiResult::Delete => OpCode::Delete.code(),
            MultiResult::SetData { .. } => OpCode::SetData.code(),
            MultiResult::Check => OpCode::Check.code(),
            MultiResult::GetChildren { .. } => OpCode::GetChildren.code(),
            MultiResult::GetData { .. } => OpCode::GetData.code(),
            MultiResult::Error(_) => OpCode::Error.code(),
        }
    }

    /// Writes `MultiHeader{type, false, err}` and the result body.
    pub fn encode(&self, w: &mut Writer) {
        let err = if let MultiResult::Error(code) = self { *code } else { 0 };
        MultiHeader { op_type: self.op_type(), done: false, err }.encode(w);
        match self {
            MultiResult::Create { path } => w.write_ustring(path),
            MultiResult::Create2 { path, stat } => write_path_stat(w, path, stat),
            MultiResult::Delete | MultiResult::Check => {}
            MultiResult::SetData { stat } => stat.encode(w),
            MultiResult::GetChildren { children } => w.write_string_vec(children),
            MultiResult::GetData { data, stat } => write_data_stat(w, data.as_deref(), stat),
            MultiResult::Error(code) => w.write_i32(*code),
        }
    }

    /// Decodes the body that follows a result header of type `op_type`.
    fn decode_body(op_type: i32, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(match op_type {
            1 => MultiResult::Create { path: r.read_ustring()? },
            15 => MultiResult::Create2 { path: r.read_ustring()?, stat: Stat::decode(r)? },
            2 => MultiResult::Delete,
            5 => MultiResult::SetData { stat: Stat::decode(r)? },
            13 => MultiResult::Check,
            8 => MultiResult::GetChildren { children: r.read_string_vec()? },
            4 => MultiResult::GetData { data: r.read_buffer()?, stat: Stat::decode(r)? },
            -1 => MultiResult::Error(r.read_i32()?),
            _ => return Err(DecodeError::Invalid("unknown multi result type")),
        })
    }
}

fn write_path_stat(w: &mut Writer, path: &str, stat: &Stat) {
    w.write_ustring(path);
    stat.encode(w);
}

fn write_data_stat(w: &mut Writer, data: Option<&[u8]>, stat: &Stat) {
    w.write_buffer(data);
    stat.encode(w);
}

fn encode_multi_results(results: &[MultiResult], w: &mut Writer) {
    for res in results {
        res.encode(w);
    }
    MultiHeader::END.encode(w);
}

fn decode_multi_results(r: &mut Reader<'_>) -> Result<Vec<MultiResult>, DecodeError> {
    let mut results = Vec::new();
    loop {
        let h = MultiHeader::decode(r)?;
        if h.done {
            return Ok(results);
        }
        results.push(MultiResult::decode_body(h.op_type, r)?);
    }
}

/// Which body shape an opcode's success reply has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Empty,
    Create,
    Create2,
    Stat,
    GetData,
    GetAcl,
    Children,
    Children2,
    Sync,
    AllChildrenNumber,
    Ephemerals,
    AddWatch,
    WhoAmI,
    Sasl,
    Multi,
}

fn shape_of(op: OpCode) -> Option<Shape> {
    use OpCode as O;
    Some(match op {
        O::Delete | O::DeleteContainer | O::Ping | O::CheckWatches | O::RemoveWatches => Shape::Empty,
        O::Auth | O::SetWatches | O::SetWatches2 | O::CloseSession => Shape::Empty,
        O::Create => Shape::Create,
        O::Create2 | O::CreateContainer | O::CreateTtl => Shape::Create2,
        O::Exists | O::SetData | O::SetAcl => Shape::Stat,
        O::GetData | O::Reconfig => Shape::GetData,
        O::GetAcl => Shape::GetAcl,
        O::GetChildren => Shape::Children,
        O::GetChildren2 => Shape::Children2,
        O::Sync => Shape::Sync,
        O::GetAllChildrenNumber => Shape::AllChildrenNumber,
        O::GetEphemerals => Shape::Ephemerals,
        O::AddWatch => Shape::AddWatch,
        O::WhoAmI => Shape::WhoAmI,
        O::Sasl => Shape::Sasl,
        O::Multi | O::MultiRead => Shape::Multi,
        O::Notification | O::Check | O::CreateSession | O::Error => return None,
    })
}

impl Response {
    /// Writes the body (nothing for [`Response::Empty`]).
    pub fn encode_body(&self, w: &mut Writer) {
        match self {
            Response::Empty => {}
            Response::Create { path } | Response::Sync { path } => w.write_ustring(path),
            Response::Create2 { path, stat } => write_path_stat(w, path, stat),
            Response::Stat(stat) => stat.encode(w),
            Response::GetData { data, stat } => write_data_stat(w, data.as_deref(), stat),
            Response::GetAcl { acl, stat } => {
                w.write_vec(acl);
                stat.encode(w);
            }
            Response::Children { children } | Response::Ephemerals(children) => w.write_string_vec(children),
            Response::Children2 { children, stat } => {
                w.write_string_vec(children);
                stat.encode(w);
            }
            Response::AllChildrenNumber(n) => w.write_i32(*n),
            Response::AddWatch => w.write_i32(0),
            Response::WhoAmI(infos) => w.write_vec(infos),
            Response::Sasl { token } => w.write_buffer(token.as_deref()),
            Response::Multi(results) => encode_multi_results(results, w),
        }
    }

    /// Decodes the success body of a reply to a request with `op_code`. Opcodes with no reply
    /// body decode as [`Response::Empty`] whatever follows.
    pub fn decode_for(op_code: i32, body: &[u8]) -> Result<Response, DecodeError> {
        let shape = OpCode::from_code(op_code).and_then(shape_of).ok_or(DecodeError::Invalid("no reply for opcode"))?;
        decode_shape(shape, &mut Reader::new(body))
    }
}

fn decode_shape(shape: Shape, r: &mut Reader<'_>) -> Result<Response, DecodeError> {
    Ok(match shape {
        Shape::Empty => Response::Empty,
        Shape::Create => Response::Create { path: r.read_ustring()? },
        Shape::Create2 => Response::Create2 { path: r.read_ustring()?, stat: Stat::decode(r)? },
        Shape::Stat => Response::Stat(Stat::decode(r)?),
        Shape::GetData => Response::GetData { data: r.read_buffer()?, stat: Stat::decode(r)? },
        Shape::GetAcl => Response::GetAcl { acl: r.read_vec()?, stat: Stat::decode(r)? },
        Shape::Children => Response::Children { children: r.read_string_vec()? },
        Shape::Children2 => Response::Children2 { children: r.read_string_vec()?, stat: Stat::decode(r)? },
        Shape::Sync => Response::Sync { path: r.read_ustring()? },
        Shape::AllChildrenNumber => Response::AllChildrenNumber(r.read_i32()?),
        Shape::Ephemerals => Response::Ephemerals(r.read_string_vec()?),
        Shape::AddWatch => {
            r.read_i32()?;
            Response::AddWatch
        }
        Shape::WhoAmI => Response::WhoAmI(r.read_vec()?),
        Shape::Sasl => Response::Sasl { token: r.read_buffer()? },
        Shape::Multi => Response::Multi(decode_multi_results(r)?),
    })
}

/// A complete reply frame: length prefix, `header`, then `body` only when `header.err == 0`.
pub fn encode_reply(header: &ReplyHeader, body: Option<&Response>) -> Vec<u8> {
    frame_with(|w| {
        header.encode(w);
        if let (0, Some(body)) = (header.err, body) {
            body.encode_body(w);
        }
    })
}

/// Bytes of a ReplyHeader (`int xid, long zxid, int err`).
const REPLY_HEADER_LEN: usize = 16;
/// Bytes of a Stat (six longs, five ints).
const STAT_LEN: usize = 68;
/// Bytes of a MultiHeader (`int type, boolean done, int err`).
const MULTI_HEADER_LEN: usize = 9;

/// The success body of a read answered from the local tree, borrowing its bulk (child names,
/// ephemeral paths, data) from the tree. [`encode_read_reply`] writes it into a frame sized
/// exactly beforehand, so the frame is the only copy of the bulk the server makes. Such a reply
/// may be far above jute.maxbuffer (a node with thousands of long-named children, data written
/// under a higher limit): ZooKeeper bounds what a server reads, not what it sends, and a client
/// that wants a bound enforces its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadReply<'a> {
    /// GetDataResponse; `None` is the null buffer.
    Data { data: Option<&'a [u8]>, stat: Stat },
    /// GetChildrenResponse (`stat` None) or GetChildren2Response (the parent's Stat).
    Children { names: Vec<&'a str>, stat: Option<Stat> },
    /// GetEphemeralsResponse: full paths.
    Paths(Vec<&'a str>),
    /// MultiResponse of a multiRead.
    MultiRead(Vec<ReadResult<'a>>),
    /// Any other body: small, owned.
    Owned(Response),
}

/// One result of a multiRead reply, borrowing from the tree as [`ReadReply`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadResult<'a> {
    /// Type 4.
    Data { data: Option<&'a [u8]>, stat: Stat },
    /// Type 8.
    Children { names: Vec<&'a str> },
    /// Type -1 with the error code.
    Error(i32),
}

fn buffer_len(data: Option<&[u8]>) -> usize {
    4 + data.map_or(0, <[u8]>::len)
}

fn names_len(names: &[&str]) -> usize {
    4 + names.iter().map(|n| 4 + n.len()).sum::<usize>()
}

impl ReadResult<'_> {
    fn encoded_len(&self) -> usize {
        MULTI_HEADER_LEN
            + match self {
                ReadResult::Data { data, .. } => buffer_len(*data) + STAT_LEN,
                ReadResult::Children { names } => names_len(names),
                ReadResult::Error(_) => 4,
            }
    }

    fn encode(&self, w: &mut Writer) {
        let (op, err) = match self {
            ReadResult::Data { .. } => (OpCode::GetData.code(), 0),
            ReadResult::Children { .. } => (OpCode::GetChildren.code(), 0),
            ReadResult::Error(code) => (OpCode::Error.code(), *code),
        };
        MultiHeader { op_type: op, done: false, err }.encode(w);
        match self {
            ReadResult::Data { data, stat } => write_data_stat(w, *data, stat),
            ReadResult::Children { names } => w.write_string_vec(names),
            ReadResult::Error(code) => w.write_i32(*code),
        }
    }
}

impl ReadReply<'_> {
    /// The body's length in bytes, where it is computed without encoding (`None` for `Owned`).
    fn encoded_len(&self) -> Option<usize> {
        Some(match self {
            ReadReply::Data { data, .. } => buffer_len(*data) + STAT_LEN,
            ReadReply::Children { names, stat } => names_len(names) + stat.map_or(0, |_| STAT_LEN),
            ReadReply::Paths(paths) => names_len(paths),
            ReadReply::MultiRead(results) => {
                results.iter().map(ReadResult::encoded_len).sum::<usize>() + MULTI_HEADER_LEN
            }
            ReadReply::Owned(_) => return None,
        })
    }

    fn encode(&self, w: &mut Writer) {
        match self {
            ReadReply::Data { data, stat } => write_data_stat(w, *data, stat),
            ReadReply::Children { names, stat } => {
                w.write_string_vec(names);
                if let Some(stat) = stat {
                    stat.encode(w);
                }
            }
            ReadReply::Paths(paths) => w.write_string_vec(paths),
            ReadReply::MultiRead(results) => {
                for r in results {
                    r.encode(w);
                }
                MultiHeader::END.encode(w);
            }
            ReadReply::Owned(r) => r.encode_body(w),
        }
    }
}

/// Why a reply cannot be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a reply of {len} bytes does not fit a frame's 31-bit length")]
pub struct ReplyTooLarge {
    pub len: usize,
}

/// A complete reply frame to a read: length prefix, `header`, and `body` when `header.err == 0`.
/// A body that borrows from the tree is written into a buffer of exactly the frame's size, never
/// copied or grown on the way; one whose length does not fit the frame's i32 prefix is refused.
pub fn encode_read_reply(header: &ReplyHeader, body: Option<&ReadReply<'_>>) -> Result<Vec<u8>, ReplyTooLarge> {
    let body = body.filter(|_| header.err == 0);
    if let Some(ReadReply::Owned(r)) = body {
        return Ok(encode_reply(header, Some(r)));
    }
    let len = body.and_then(ReadReply::encoded_len).unwrap_or(0);
    let payload = REPLY_HEADER_LEN + len;
    let prefix = i32::try_from(payload).map_err(|_| ReplyTooLarge { len: payload })?;
    let mut w = Writer::with_capacity(4 + payload);
    w.write_i32(prefix);
    header.encode(&mut w);
    if let Some(b) = body {
        b.encode(&mut w);
    }
    debug_assert_eq!(w.len(), 4 + payload, "read reply length computed wrongly");
    Ok(w.into_inner())
}

/// A complete notification frame: `ReplyHeader{-1, zxid, 0}` + WatcherEvent. `zxid` is the firing
/// txn's zxid (3.9+), or -1 for events sent by setWatches catch-up.
pub fn encode_notification(zxid: i64, event: &WatcherEvent) -> Vec<u8> {
    frame_with(|w| {
        ReplyHeader { xid: xid::NOTIFICATION, zxid, err: 0 }.encode(w);
        event.encode(w);
    })
}

/// Decodes a reply payload (no length prefix) to a request with `op_code`: the header, and the
/// body when `err == 0`.
pub fn decode_reply(op_code: i32, payload: &[u8]) -> Result<(ReplyHeader, Option<Response>), DecodeError> {
    let mut r = Reader::new(payload);
    let header = ReplyHeader::decode(&mut r)?;
    if header.err != 0 {
        return Ok((header, None));
    }
    let body = payload.get(r.position()..).unwrap_or_default();
    Ok((header, Some(Response::decode_for(op_code, body)?)))
}

/// Decodes a notification payload (xid -1): the header and the event.
pub fn decode_notification(payload: &[u8]) -> Result<(ReplyHeader, WatcherEvent), DecodeError> {
    let mut r = Reader::new(payload);
    let header = ReplyHeader::decode(&mut r)?;
    if header.xid != xid::NOTIFICATION {
        return Err(DecodeError::Invalid("not a notification"));
    }
    Ok((header, WatcherEvent::decode(&mut r)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameDecoder;
    use crate::header::EventType;
    use crate::request::tests::acl;
    use bytes::BytesMut;
    use proptest::prelude::*;

    fn stat() -> impl Strategy<Value = Stat> {
        (any::<[i64; 6]>(), any::<[i32; 5]>()).prop_map(|(l, i)| Stat {
            czxid: l[0],
            mzxid: l[1],
            ctime: l[2],
            mtime: l[3],
            version: i[0],
            cversion: i[1],
            aversion: i[2],
            ephemeral_owner: l[4],
            data_length: i[3],
            num_children: i[4],
            pzxid: l[5],
        })
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-z0-9/_-]{0,10}"
    }

    fn names() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::vec(name(), 0..4)
    }

    fn data() -> impl Strategy<Value = Option<Vec<u8>>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16))
    }

    fn multi_result() -> impl Strategy<Value = MultiResult> {
        prop_oneof![
            name().prop_map(|path| MultiResult::Create { path }),
            (name(), stat()).prop_map(|(path, stat)| MultiResult::Create2 { path, stat }),
            Just(MultiResult::Delete),
            stat().prop_map(|stat| MultiResult::SetData { stat }),
            Just(MultiResult::Check),
            names().prop_map(|children| MultiResult::GetChildren { children }),
            (data(), stat()).prop_map(|(data, stat)| MultiResult::GetData { data, stat }),
            any::<i32>().prop_map(MultiResult::Error),
        ]
    }

    /// A response together with an opcode whose reply has that shape.
    fn response() -> impl Strategy<Value = (i32, Response)> {
        let node = prop_oneof![
            Just((2, Response::Empty)),
            name().prop_map(|path| (1, Response::Create { path })),
            (name(), stat(), prop_oneof![Just(15), Just(19), Just(21)])
                .prop_map(|(path, stat, op)| (op, Response::Create2 { path, stat })),
            (stat(), prop_oneof![Just(3), Just(5), Just(7)]).prop_map(|(s, op)| (op, Response::Stat(s))),
            (data(), stat(), prop_oneof![Just(4), Just(16)])
                .prop_map(|(data, stat, op)| (op, Response::GetData { data, stat })),
            (acl(), stat()).prop_map(|(acl, stat)| (6, Response::GetAcl { acl, stat })),
            names().prop_map(|children| (8, Response::Children { children })),
            (names(), stat()).prop_map(|(children, stat)| (12, Response::Children2 { children, stat })),
        ];
        let misc = prop_oneof![
            name().prop_map(|path| (9, Response::Sync { path })),
            any::<i32>().prop_map(|n| (104, Response::AllChildrenNumber(n))),
            names().prop_map(|e| (103, Response::Ephemerals(e))),
            Just((106, Response::AddWatch)),
            proptest::collection::vec((name(), name()), 0..3).prop_map(|v| (
                107,
                Response::WhoAmI(v.into_iter().map(|(auth_scheme, user)| ClientInfo { auth_scheme, user }).collect())
            )),
            data().prop_map(|token| (102, Response::Sasl { token })),
            (proptest::collection::vec(multi_result(), 0..5), prop_oneof![Just(14), Just(22)])
                .prop_map(|(r, op)| (op, Response::Multi(r))),
        ];
        prop_oneof![node, misc]
    }

    /// The replies a read answers with, owned.
    fn read_response() -> impl Strategy<Value = (i32, Response)> {
        let read_result = prop_oneof![
            names().prop_map(|children| MultiResult::GetChildren { children }),
            (data(), stat()).prop_map(|(data, stat)| MultiResult::GetData { data, stat }),
            any::<i32>().prop_map(MultiResult::Error),
        ];
        prop_oneof![
            (data(), stat()).prop_map(|(data, stat)| (4, Response::GetData { data, stat })),
            names().prop_map(|children| (8, Response::Children { children })),
            (names(), stat()).prop_map(|(children, stat)| (12, Response::Children2 { children, stat })),
            names().prop_map(|e| (103, Response::Ephemerals(e))),
            proptest::collection::vec(read_result, 0..5).prop_map(|r| (22, Response::Multi(r))),
            stat().prop_map(|s| (3, Response::Stat(s))),
            any::<i32>().prop_map(|n| (104, Response::AllChildrenNumber(n))),
        ]
    }

    /// The borrowed form of an owned read reply.
    fn read_reply_of(resp: &Response) -> ReadReply<'_> {
        fn strs(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        match resp {
            Response::GetData { data, stat } => ReadReply::Data { data: data.as_deref(), stat: *stat },
            Response::Children { children } => ReadReply::Children { names: strs(children), stat: None },
            Response::Children2 { children, stat } => ReadReply::Children { names: strs(children), stat: Some(*stat) },
            Response::Ephemerals(paths) => ReadReply::Paths(strs(paths)),
            Response::Multi(results) => ReadReply::MultiRead(
                results
                    .iter()
                    .map(|r| match r {
                        MultiResult::GetData { data, stat } => ReadResult::Data { data: data.as_deref(), stat: *stat },
                        MultiResult::GetChildren { children } => ReadResult::Children { names: strs(children) },
                        MultiResult::Error(code) => ReadResult::Error(*code),
                        other => panic!("not a multiRead result: {other:?}"),
                    })
                    .collect(),
            ),
            other => ReadReply::Owned(other.clone()),
        }
    }

    proptest! {
        #[test]
        fn response_round_trips((op, resp) in response(), xid: i32, zxid: i64) {
            let frame = encode_reply(&ReplyHeader { xid, zxid, err: 0 }, Some(&resp));
            let mut buf = BytesMut::from(&frame[..]);
            let payload = FrameDecoder::default().decode(&mut buf).unwrap().unwrap();
            prop_assert!(buf.is_empty());
            let (h, back) = decode_reply(op, &payload).unwrap();
            prop_assert_eq!(h, ReplyHeader { xid, zxid, err: 0 });
            prop_assert_eq!(back, Some(resp));
        }

        #[test]
        fn every_strict_prefix_is_incomplete((op, resp) in response()) {
            let frame = encode_reply(&ReplyHeader { xid: 1, zxid: 2, err: 0 }, Some(&resp));
            for n in 0..frame.len() {
                let mut buf = BytesMut::from(&frame[..n]);
                prop_assert_eq!(FrameDecoder::default().decode(&mut buf), Ok(None));
                if n >= 4 {
                    let res = decode_reply(op, &frame[4..n]);
                    prop_assert!(matches!(res, Err(DecodeError::Incomplete { .. })), "{:?}", res);
                }
            }
        }

        #[test]
        fn error_replies_have_no_body((_op, resp) in response(), err in -130i32..0) {
            let frame = encode_reply(&ReplyHeader { xid: 4, zxid: 9, err }, Some(&resp));
            prop_assert_eq!(frame.len(), 20);
        }

        /// A read reply that borrows from the tree is the same frame as its owned form, written
        /// into a buffer of exactly its size.
        #[test]
        fn read_replies_encode_as_their_owned_form_without_growing(
            (op, resp) in read_response(),
            xid: i32,
            zxid: i64,
            err in prop_oneof![Just(0), -130i32..0],
        ) {
            let header = ReplyHeader { xid, zxid, err };
            let borrowed = read_reply_of(&resp);
            let frame = encode_read_reply(&header, Some(&borrowed)).unwrap();
            prop_assert_eq!(&frame, &encode_reply(&header, Some(&resp)));
            if !matches!(borrowed, ReadReply::Owned(_)) {
                prop_assert_eq!(frame.capacity(), frame.len());
            }
            let (h, back) = decode_reply(op, &frame[4..]).unwrap();
            prop_assert_eq!(h, header);
            prop_assert_eq!(back, (err == 0).then_some(resp));
        }

        #[test]
        fn arbitrary_bytes_never_panic(op in -12i32..110, body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Response::decode_for(op, &body);
            let _ = decode_reply(op, &body);
        }
    }

    /// A body beyond the frame's i32 length is refused before anything is allocated for it (the
    /// names here are one megabyte string, borrowed 2,048 times).
    #[test]
    fn a_read_reply_above_two_gib_is_refused() {
        let name = "n".repeat(1 << 20);
        let names = vec![name.as_str(); 2048];
        let header = ReplyHeader { xid: 1, zxid: 1, err: 0 };
        let err = encode_read_reply(&header, Some(&ReadReply::Children { names, stat: None })).unwrap_err();
        assert_eq!(err.len, 16 + 4 + 2048 * (4 + (1 << 20)));
        let names = vec![name.as_str(); 3];
        let frame = encode_read_reply(&header, Some(&ReadReply::Children { names, stat: None })).unwrap();
        assert_eq!(frame.len(), 4 + 16 + 4 + 3 * (4 + (1 << 20)));
    }

    #[test]
    fn client_info_round_trips() {
        let c = ClientInfo { auth_scheme: "ip".into(), user: "127.0.0.1".into() };
        assert_eq!(ClientInfo::from_bytes(&c.to_bytes()), Ok(c));
    }

    #[test]
    fn ping_reply_golden() {
        let frame = encode_reply(&ReplyHeader { xid: -2, zxid: 0x1_0000_0005, err: 0 }, None);
        assert_eq!(frame, [0, 0, 0, 16, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 0]);
    }

    #[test]
    fn add_watch_reply_has_four_zero_bytes() {
        let frame = encode_reply(&ReplyHeader { xid: 3, zxid: 1, err: 0 }, Some(&Response::AddWatch));
        assert_eq!(frame.len(), 24);
        assert_eq!(frame[20..], [0, 0, 0, 0]);
    }

    #[test]
    fn notification_golden() {
        let frame = encode_notification(-1, &WatcherEvent::new(EventType::NodeDeleted, "/a"));
        #[rustfmt::skip]
        let golden = [
            0, 0, 0, 0x1e,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0,
            0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 2, b'/', b'a',
        ];
        assert_eq!(frame, golden);
        let (h, e) = decode_notification(&frame[4..]).unwrap();
        assert_eq!((h.xid, h.zxid, e.path.as_str()), (-1, -1, "/a"));
    }

    /// Section 6: a successful multi [create /a, check] and a failed one [ok-before, NODEEXISTS].
    #[test]
    fn multi_reply_golden() {
        let ok = Response::Multi(vec![MultiResult::Create { path: "/a".into() }, MultiResult::Check]);
        #[rustfmt::skip]
        let golden: Vec<u8> = [
            &[0, 0, 0, 0x31][..],                                // length 49
            &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0],   // ReplyHeader{7, 9, 0}
            &[0, 0, 0, 1, 0, 0, 0, 0, 0], &[0, 0, 0, 2, b'/', b'a'], // {1, false, 0} "/a"
            &[0, 0, 0, 13, 0, 0, 0, 0, 0],                       // {13, false, 0}
            &[0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff], // end
        ].concat();
        assert_eq!(encode_reply(&ReplyHeader { xid: 7, zxid: 9, err: 0 }, Some(&ok)), golden);
        assert_eq!(decode_reply(14, &golden[4..]), Ok((ReplyHeader { xid: 7, zxid: 9, err: 0 }, Some(ok))));

        let failed = Response::Multi(vec![MultiResult::Error(0), MultiResult::Error(-110)]);
        #[rustfmt::skip]
        let body: Vec<u8> = [
            &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0][..], &[0, 0, 0, 0],  // {-1, false, 0} ErrorResponse{0}
            &[0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0x92], &[0xff, 0xff, 0xff, 0x92], // {-1, false, -110} {-110}
            &[0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff],
        ].concat();
        let mut w = Writer::new();
        failed.encode_body(&mut w);
        assert_eq!(w.as_slice(), &body[..]);
        assert_eq!(Response::decode_for(14, &body), Ok(failed));
    }

    #[test]
    fn unknown_result_type_and_opcode_are_invalid() {
        let mut w = Writer::new();
        MultiHeader { op_type: 3, done: false, err: 0 }.encode(&mut w);
        assert!(matches!(Response::decode_for(14, w.as_slice()), Err(DecodeError::Invalid(_))));
        assert!(matches!(Response::decode_for(13, &[]), Err(DecodeError::Invalid(_))));
        assert!(matches!(Response::decode_for(55, &[]), Err(DecodeError::Invalid(_))));
    }
}
