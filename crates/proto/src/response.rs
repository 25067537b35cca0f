//! Success bodies of server replies (reference sections 4, 5.2, 6) and whole reply frames.
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

/// One result of a multi or multiRead reply (reference section 6).
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

        #[test]
        fn arbitrary_bytes_never_panic(op in -12i32..110, body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Response::decode_for(op, &body);
            let _ = decode_reply(op, &body);
        }
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
