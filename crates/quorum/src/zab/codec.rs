//! Payload codecs for the `data` field of quorum packets (as ZooKeeper's `Leader`, `LearnerHandler`
//! and `Learner` write them). Every decoder distrusts its input: a short or malformed payload is an
//! error, never a panic.

use warden_proto::data::Id;
use warden_proto::jute::{DecodeError, Reader, Record, Writer};
use warden_proto::quorum::{packet_type, QuorumPacket, LEARNER_PROTOCOL_VERSION};
use warden_proto::txn::{Txn, TxnDigest, TxnHeader};

use super::{TxnEntry, Zxid};

/// PROPOSAL / INFORM data: TxnHeader, the txn body, then the TxnDigest when the entry has one
/// (ZooKeeper 3.6+ leaders send it; Warden passes on one it received and proposes without).
pub fn encode_entry(entry: &TxnEntry) -> Vec<u8> {
    let mut w = Writer::new();
    entry.hdr.encode(&mut w);
    entry.txn.encode_body(&mut w);
    if let Some(d) = &entry.digest {
        d.encode(&mut w);
    }
    w.into_inner()
}

/// Decodes PROPOSAL / INFORM data and checks the header's zxid against the packet's. An
/// INFORMANDACTIVATE's data is the designated leader's sid (8 bytes), then an INFORM's.
pub fn decode_entry(packet: &QuorumPacket) -> Result<TxnEntry, DecodeError> {
    let data = packet.data.as_deref().ok_or(DecodeError::Invalid("proposal without data"))?;
    let data = match packet.packet_type {
        packet_type::INFORMANDACTIVATE => data.get(8..).ok_or(DecodeError::Invalid("short INFORMANDACTIVATE"))?,
        _ => data,
    };
    let mut r = Reader::new(data);
    let hdr = TxnHeader::decode(&mut r)?;
    if hdr.zxid != packet.zxid {
        return Err(DecodeError::Invalid("proposal header zxid differs from packet zxid"));
    }
    let txn = Txn::decode_body(hdr.txn_type, &mut r)?;
    let digest = TxnDigest::decode_trailing(&mut r);
    Ok(TxnEntry { hdr, txn: txn.into(), digest })
}

/// A PROPOSAL packet for `entry`.
pub fn proposal(entry: &TxnEntry) -> QuorumPacket {
    QuorumPacket::with_data(packet_type::PROPOSAL, entry.zxid(), encode_entry(entry))
}

/// An INFORM packet (leader -> observer, committed txn).
pub fn inform(entry: &TxnEntry) -> QuorumPacket {
    QuorumPacket::with_data(packet_type::INFORM, entry.zxid(), encode_entry(entry))
}

/// What a leader sends an observer for a committed txn: INFORM, or for a reconfig
/// INFORMANDACTIVATE with the designated leader's sid before the txn (`Leader.informAndActivate`).
pub fn inform_activate(entry: &TxnEntry, designated: Option<super::Sid>) -> QuorumPacket {
    match designated {
        None => inform(entry),
        Some(sid) => {
            let mut data = sid.to_be_bytes().to_vec();
            data.extend_from_slice(&encode_entry(entry));
            QuorumPacket::with_data(packet_type::INFORMANDACTIVATE, entry.zxid(), data)
        }
    }
}

/// The designated leader's sid at the head of a COMMITANDACTIVATE or INFORMANDACTIVATE.
pub fn decode_designated(packet: &QuorumPacket) -> Result<super::Sid, DecodeError> {
    let data = packet.data.as_deref().ok_or(DecodeError::Invalid("activation without data"))?;
    Reader::new(data).read_i64()
}

/// A 4-byte big-endian int payload (LEADERINFO's protocol version, ACKEPOCH's current epoch).
pub fn int_data(v: i32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// Reads a 4-byte int payload.
pub fn decode_int(packet: &QuorumPacket) -> Result<i32, DecodeError> {
    let data = packet.data.as_deref().ok_or(DecodeError::Invalid("missing int payload"))?;
    Reader::new(data).read_i32()
}

/// LEADERINFO for `new_epoch`.
pub fn leader_info(new_epoch: i64) -> QuorumPacket {
    QuorumPacket::with_data(packet_type::LEADERINFO, super::make_zxid(new_epoch, 0), int_data(LEARNER_PROTOCOL_VERSION))
}

/// One entry of a learner's PING touch table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionTouch {
    pub session_id: i64,
    pub timeout_ms: i32,
}

/// PING data from a learner: (long sessionId, int timeout) repeated.
pub fn encode_touches(touches: &[SessionTouch]) -> Vec<u8> {
    let mut w = Writer::with_capacity(touches.len() * 12);
    for t in touches {
        w.write_i64(t.session_id);
        w.write_i32(t.timeout_ms);
    }
    w.into_inner()
}

/// Decodes a PING touch table; a trailing partial entry is an error.
pub fn decode_touches(data: &[u8]) -> Result<Vec<SessionTouch>, DecodeError> {
    if !data.len().is_multiple_of(12) {
        return Err(DecodeError::Invalid("PING touch table is not a whole number of entries"));
    }
    let mut r = Reader::new(data);
    let mut out = Vec::with_capacity(data.len() / 12);
    while !r.is_empty() {
        out.push(SessionTouch { session_id: r.read_i64()?, timeout_ms: r.read_i32()? });
    }
    Ok(out)
}

/// A learner's PING reply.
pub fn ping_reply(zxid: Zxid, touches: &[SessionTouch]) -> QuorumPacket {
    QuorumPacket::with_data(packet_type::PING, zxid, encode_touches(touches))
}

/// REQUEST data: long sessionId, int cxid, int type, then the raw request bytes (everything left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedRequest {
    pub session_id: i64,
    pub cxid: i32,
    pub op_type: i32,
    pub request: Vec<u8>,
    pub authinfo: Vec<Id>,
}

impl ForwardedRequest {
    /// The REQUEST packet (zxid -1).
    pub fn to_packet(&self) -> QuorumPacket {
        let mut w = Writer::with_capacity(16 + self.request.len());
        w.write_i64(self.session_id);
        w.write_i32(self.cxid);
        w.write_i32(self.op_type);
        w.write_raw(&self.request);
        QuorumPacket {
            packet_type: packet_type::REQUEST,
            zxid: -1,
            data: Some(w.into_inner()),
            authinfo: self.authinfo.clone(),
        }
    }

    pub fn from_packet(packet: &QuorumPacket) -> Result<Self, DecodeError> {
        let data = packet.data.as_deref().ok_or(DecodeError::Invalid("REQUEST without data"))?;
        let mut r = Reader::new(data);
        let session_id = r.read_i64()?;
        let cxid = r.read_i32()?;
        let op_type = r.read_i32()?;
        let request = data[r.position()..].to_vec();
        Ok(Self { session_id, cxid, op_type, request, authinfo: packet.authinfo.clone() })
    }
}

/// The learner's REVALIDATE request (`Learner.validateSession`): zxid -1, data long sessionId,
/// int timeout.
pub fn revalidate_request(session_id: i64, timeout_ms: i32) -> QuorumPacket {
    let mut w = Writer::with_capacity(12);
    w.write_i64(session_id);
    w.write_i32(timeout_ms);
    QuorumPacket::with_data(packet_type::REVALIDATE, -1, w.into_inner())
}

/// The leader's REVALIDATE reply data (`Learner.revalidate`): long sessionId, boolean valid.
pub fn decode_revalidate_reply(data: &[u8]) -> Result<(i64, bool), DecodeError> {
    let mut r = Reader::new(data);
    Ok((r.read_i64()?, r.read_bool()?))
}

/// REVALIDATE request data: long sessionId, int timeout.
pub fn decode_revalidate(data: &[u8]) -> Result<(i64, i32), DecodeError> {
    let mut r = Reader::new(data);
    Ok((r.read_i64()?, r.read_i32()?))
}

/// The leader's REVALIDATE reply: long sessionId, boolean valid.
pub fn revalidate_reply(session_id: i64, valid: bool) -> QuorumPacket {
    let mut w = Writer::with_capacity(9);
    w.write_i64(session_id);
    w.write_bool(valid);
    QuorumPacket::with_data(packet_type::REVALIDATE, -1, w.into_inner())
}
