//! The session handshake (ZooKeeper's `ZooKeeperServer.processConnectRequest`): the first frame in
//! each direction carries a ConnectRequest / ConnectResponse (`zookeeper.jute`) with no header.
//! Both end in an optional readOnly byte.

use crate::jute::{DecodeError, Reader, Record, Writer};

/// Length of the session password every server sends.
pub const PASSWD_LEN: usize = 16;

/// The client's handshake. `read_only` is `None` when the client sent no trailing byte (3.3-era
/// clients and go-zookeeper); the reply then omits the readOnly byte too.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct ConnectRequest {
    /// Clients send 0.
    pub protocol_version: i32,
    /// Highest zxid the client has seen (0 for a fresh handle).
    pub last_zxid_seen: i64,
    /// Requested session timeout.
    pub timeout_ms: i32,
    /// 0 for a new session, else the session to resume.
    pub session_id: i64,
    /// Session password (null reads as empty).
    pub passwd: Vec<u8>,
    /// The optional trailing readOnly flag.
    pub read_only: Option<bool>,
}

impl ConnectRequest {
    /// A fresh handle's request for a new session with `timeout_ms` (no zxid seen, a zero
    /// password, and the readOnly byte, false, as modern clients send it).
    pub fn new_session(timeout_ms: i32) -> Self {
        Self {
            protocol_version: 0,
            last_zxid_seen: 0,
            timeout_ms,
            session_id: 0,
            passwd: vec![0; 16],
            read_only: Some(false),
        }
    }
}

impl Record for ConnectRequest {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.protocol_version);
        w.write_i64(self.last_zxid_seen);
        w.write_i32(self.timeout_ms);
        w.write_i64(self.session_id);
        w.write_buffer(Some(&self.passwd));
        write_opt_bool(w, self.read_only);
    }

    /// Reads the five mandatory fields, then tries one more boolean (absent => `None`).
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            protocol_version: r.read_i32()?,
            last_zxid_seen: r.read_i64()?,
            timeout_ms: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?.unwrap_or_default(),
            read_only: read_opt_bool(r)?,
        })
    }
}

/// The server's handshake reply. A `timeout_ms <= 0` (with session id 0) tells every client its
/// session is expired. `read_only` must be `Some` exactly when the request had the readOnly byte.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct ConnectResponse {
    /// Servers send 0.
    pub protocol_version: i32,
    /// Negotiated session timeout.
    pub timeout_ms: i32,
    /// The session id, 0 when the session is invalid.
    pub session_id: i64,
    /// Always [`PASSWD_LEN`] bytes from a server (zeros when invalid).
    pub passwd: Vec<u8>,
    /// Written only when `Some`.
    pub read_only: Option<bool>,
}

impl ConnectResponse {
    /// The reply to a reconnect with an unknown session or a wrong password.
    pub fn expired(read_only: Option<bool>) -> Self {
        Self { protocol_version: 0, timeout_ms: 0, session_id: 0, passwd: vec![0; PASSWD_LEN], read_only }
    }

    /// The complete frame, length prefix included.
    pub fn encode_frame(&self) -> Vec<u8> {
        crate::frame::encode_frame(self)
    }
}

impl Record for ConnectResponse {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.protocol_version);
        w.write_i32(self.timeout_ms);
        w.write_i64(self.session_id);
        w.write_buffer(Some(&self.passwd));
        write_opt_bool(w, self.read_only);
    }

    /// Tolerates a missing readOnly byte, as kazoo and the Java client do.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            protocol_version: r.read_i32()?,
            timeout_ms: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?.unwrap_or_default(),
            read_only: read_opt_bool(r)?,
        })
    }
}

fn write_opt_bool(w: &mut Writer, v: Option<bool>) {
    if let Some(b) = v {
        w.write_bool(b);
    }
}

fn read_opt_bool(r: &mut Reader<'_>) -> Result<Option<bool>, DecodeError> {
    if r.is_empty() {
        return Ok(None);
    }
    r.read_bool().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The C client's 45-byte handshake: new session, 30 s timeout, 16 zero password bytes, readOnly false.
    const C_CLIENT_REQUEST: [u8; 45] = [
        0, 0, 0, 0, // protocolVersion
        0, 0, 0, 0, 0, 0, 0, 0, // lastZxidSeen
        0, 0, 0x75, 0x30, // timeOut 30000
        0, 0, 0, 0, 0, 0, 0, 0, // sessionId
        0, 0, 0, 16, // passwd length
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // passwd
        0, // readOnly
    ];

    #[test]
    fn c_client_handshake_golden() {
        let req = ConnectRequest::from_bytes(&C_CLIENT_REQUEST).unwrap();
        assert_eq!(req.timeout_ms, 30_000);
        assert_eq!(req.passwd, vec![0; 16]);
        assert_eq!(req.read_only, Some(false));
        assert_eq!(req.to_bytes(), C_CLIENT_REQUEST);
    }

    #[test]
    fn legacy_request_without_read_only_byte() {
        let req = ConnectRequest::from_bytes(&C_CLIENT_REQUEST[..44]).unwrap();
        assert_eq!(req.read_only, None);
        assert_eq!(req.to_bytes(), C_CLIENT_REQUEST[..44]);
        for n in 0..44 {
            assert!(matches!(ConnectRequest::from_bytes(&C_CLIENT_REQUEST[..n]), Err(DecodeError::Incomplete { .. })));
        }
    }

    #[test]
    fn response_is_41_bytes_with_prefix() {
        let resp = ConnectResponse {
            protocol_version: 0,
            timeout_ms: 30_000,
            session_id: 0x0123_4567_89ab_cdef,
            passwd: (1..=16).collect(),
            read_only: Some(false),
        };
        let mut golden =
            vec![0, 0, 0, 37, 0, 0, 0, 0, 0, 0, 0x75, 0x30, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef];
        golden.extend_from_slice(&[0, 0, 0, 16]);
        golden.extend(1..=16u8);
        golden.push(0);
        let frame = resp.encode_frame();
        assert_eq!(frame.len(), 41);
        assert_eq!(frame, golden);
        assert_eq!(ConnectResponse::from_bytes(&frame[4..]), Ok(resp));
    }

    #[test]
    fn expired_response_without_read_only_is_40_bytes() {
        let frame = ConnectResponse::expired(None).encode_frame();
        assert_eq!(frame.len(), 40);
        assert_eq!(ConnectResponse::from_bytes(&frame[4..]), Ok(ConnectResponse::expired(None)));
    }

    #[test]
    fn hostile_password_length() {
        let mut b = C_CLIENT_REQUEST;
        b[24..28].copy_from_slice(&(-7i32).to_be_bytes());
        assert_eq!(ConnectRequest::from_bytes(&b), Err(DecodeError::BadLength(-7)));
        b[24..28].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(ConnectRequest::from_bytes(&b), Err(DecodeError::BadLength(i32::MAX)));
    }

    proptest! {
        #[test]
        fn request_round_trips(pv: i32, zxid: i64, t: i32, sid: i64,
                               passwd in proptest::collection::vec(any::<u8>(), 0..40), ro: Option<bool>) {
            let req = ConnectRequest { protocol_version: pv, last_zxid_seen: zxid, timeout_ms: t, session_id: sid, passwd, read_only: ro };
            prop_assert_eq!(ConnectRequest::from_bytes(&req.to_bytes()), Ok(req));
        }

        #[test]
        fn response_round_trips(pv: i32, t: i32, sid: i64,
                                passwd in proptest::collection::vec(any::<u8>(), 0..40), ro: Option<bool>) {
            let resp = ConnectResponse { protocol_version: pv, timeout_ms: t, session_id: sid, passwd, read_only: ro };
            prop_assert_eq!(ConnectResponse::from_bytes(&resp.to_bytes()), Ok(resp));
        }
    }
}
