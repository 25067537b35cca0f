//! The wire between simulated processes. Quorum packets, election notifications and client
//! requests travel as the bytes the server's ports carry (`QuorumPacket` records, framed
//! notifications, length-prefixed request frames) and are decoded at delivery by the decoders the
//! server uses, so a codec that does not round-trip fails the run.

use bytes::Bytes;
use warden_node::{ConnId, Input};
use warden_proto::election::{frame_message, split_message, Notification};
use warden_proto::header::RequestHeader;
use warden_proto::quorum::QuorumPacket;
use warden_proto::request::RequestDecodeError;
use warden_proto::{ConnectRequest, ErrorCode, Reader, Record, Request};

pub(crate) fn encode_packet(p: &QuorumPacket) -> Vec<u8> {
    p.to_bytes()
}

/// One whole packet, as the quorum port's stream decoder reads it.
pub(crate) fn decode_packet(bytes: &[u8]) -> Result<QuorumPacket, String> {
    match QuorumPacket::decode_stream(bytes, QuorumPacket::DEFAULT_MAX_LEN) {
        Ok(Some((p, used))) if used == bytes.len() => Ok(p),
        Ok(Some((_, used))) => Err(format!("quorum packet of {} bytes decodes from {used}", bytes.len())),
        Ok(None) => Err(format!("quorum packet of {} bytes is incomplete", bytes.len())),
        Err(e) => Err(format!("quorum packet does not decode: {e}")),
    }
}

/// A notification framed as the election port sends it.
pub(crate) fn encode_vote(n: &Notification) -> Vec<u8> {
    frame_message(&n.encode())
}

pub(crate) fn decode_vote(bytes: &[u8]) -> Result<Notification, String> {
    match split_message(bytes) {
        Ok(Some((payload, used))) if used == bytes.len() => {
            Notification::decode(payload).map_err(|e| format!("notification does not decode: {e}"))
        }
        other => Err(format!("notification frame of {} bytes: {other:?}", bytes.len())),
    }
}

/// A client's ConnectRequest or request, framed as a client sends it.
pub(crate) fn encode_connect(req: &ConnectRequest) -> Vec<u8> {
    warden_proto::frame::encode_frame(req)
}

pub(crate) fn encode_request(xid: i32, req: &Request) -> Vec<u8> {
    req.encode_frame(xid)
}

/// The first frame of a connection, as the server's connection task decodes it.
pub(crate) fn decode_connect(frame: &[u8]) -> Result<ConnectRequest, String> {
    ConnectRequest::from_bytes(payload(frame)?).map_err(|e| format!("ConnectRequest does not decode: {e}"))
}

/// A later frame, as the server's connection task decodes it: over the frame's bytes, an unknown
/// opcode or malformed body becoming `Input::Invalid`. A client of the simulator sends only valid
/// requests, so anything but `Input::Request` is a codec failure.
pub(crate) fn decode_request(conn: ConnId, frame: &[u8]) -> Result<Input, String> {
    let body = Bytes::copy_from_slice(payload(frame)?);
    let mut r = Reader::over_bytes(&body);
    let hdr = RequestHeader::decode(&mut r).map_err(|e| format!("request header does not decode: {e}"))?;
    match Request::decode_from(hdr.op_type, &mut r) {
        Ok(req) => Ok(Input::Request { conn, xid: hdr.xid, req }),
        Err(RequestDecodeError::UnknownOpcode(op)) => Err(format!("opcode {op} unknown to the decoder")),
        Err(RequestDecodeError::Malformed(e)) => Err(format!(
            "request of op {} does not decode ({e}): would be {:?}",
            hdr.op_type,
            ErrorCode::MarshallingError
        )),
    }
}

/// The payload of one whole length-prefixed frame.
fn payload(frame: &[u8]) -> Result<&[u8], String> {
    let (len, rest) = frame.split_first_chunk::<4>().ok_or("frame shorter than its length")?;
    if i32::from_be_bytes(*len) as usize != rest.len() {
        return Err(format!("frame length {} but {} bytes follow", i32::from_be_bytes(*len), rest.len()));
    }
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_proto::election::ServerState;
    use warden_proto::request::PathWatch;

    #[test]
    fn every_kind_round_trips_and_a_cut_frame_is_an_error() {
        let p = QuorumPacket::with_data(2, 0x1_0000_0003, vec![1, 2, 3]);
        assert_eq!(decode_packet(&encode_packet(&p)), Ok(p.clone()));
        assert!(decode_packet(&encode_packet(&p)[..10]).is_err());
        let n = Notification {
            state: ServerState::Looking,
            leader: 3,
            zxid: 7,
            election_epoch: 2,
            peer_epoch: 1,
            version: 2,
            config: b"server.1=a:1:2".to_vec(),
        };
        assert_eq!(decode_vote(&encode_vote(&n)), Ok(n));
        let req = Request::GetData(PathWatch { path: "/a".into(), watch: true });
        match decode_request(9, &encode_request(5, &req)) {
            Ok(Input::Request { conn: 9, xid: 5, req: got }) => assert_eq!(got, req),
            other => panic!("{other:?}"),
        }
        let c = ConnectRequest { timeout_ms: 4000, passwd: vec![0; 16], ..Default::default() };
        assert_eq!(decode_connect(&encode_connect(&c)), Ok(c));
        assert!(decode_request(1, &[0, 0, 0, 9, 1]).is_err());
    }
}
