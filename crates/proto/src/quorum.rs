//! Leader <-> learner records on the quorum port (`zookeeper.jute` `QuorumPacket`, `LearnerInfo`;
//! packet types from `Leader.java`).
//!
//! On the quorum port ZooKeeper writes each `QuorumPacket` with `BinaryOutputArchive.writeRecord`:
//! the record's fields back to back, with no outer length prefix. A stream is therefore split by
//! decoding records one after another ([`QuorumPacket::decode_stream`]); a truncated record is
//! `Incomplete`, and the `data` buffer is bounded by `jute.maxbuffer` plus ZooKeeper's 1024-byte
//! `zookeeper.jute.maxbuffer.extrasize`.

use crate::data::Id;
use crate::jute::{DecodeError, Reader, Record, Writer, DEFAULT_MAX_BUFFER};

/// `QuorumPacket.type` values (`Leader.java`).
pub mod packet_type {
    /// Learner -> leader: a forwarded client request (zxid -1).
    pub const REQUEST: i32 = 1;
    /// Leader -> follower: a txn to log and ACK.
    pub const PROPOSAL: i32 = 2;
    /// Follower -> leader: the zxid is durable.
    pub const ACK: i32 = 3;
    /// Leader -> follower: the zxid is committed.
    pub const COMMIT: i32 = 4;
    /// Both directions: liveness and the learner's session touch table.
    pub const PING: i32 = 5;
    /// Session revalidation on a learner reconnect.
    pub const REVALIDATE: i32 = 6;
    /// Leader -> learner: reply to a forwarded sync.
    pub const SYNC: i32 = 7;
    /// Leader -> observer: a committed txn.
    pub const INFORM: i32 = 8;
    /// Leader: commit of a reconfig.
    pub const COMMITANDACTIVATE: i32 = 9;
    /// Leader: the new epoch's first zxid and the configuration.
    pub const NEWLEADER: i32 = 10;
    /// Follower -> leader: first packet of the handshake, data = LearnerInfo.
    pub const FOLLOWERINFO: i32 = 11;
    /// Leader: the learner may serve clients.
    pub const UPTODATE: i32 = 12;
    /// Leader: sync by PROPOSAL/COMMIT pairs follows.
    pub const DIFF: i32 = 13;
    /// Leader: truncate the log to zxid.
    pub const TRUNC: i32 = 14;
    /// Leader: a full snapshot follows.
    pub const SNAP: i32 = 15;
    /// Observer -> leader: like FOLLOWERINFO.
    pub const OBSERVERINFO: i32 = 16;
    /// Leader: the proposed new epoch, data = int protocol version.
    pub const LEADERINFO: i32 = 17;
    /// Learner: acknowledges the new epoch, data = int current epoch or -1.
    pub const ACKEPOCH: i32 = 18;
    /// Leader -> observer: reconfig inform.
    pub const INFORMANDACTIVATE: i32 = 19;

    /// The name ZooKeeper logs for a packet type, or `None` for an unknown value.
    pub fn name(t: i32) -> Option<&'static str> {
        const NAMES: [&str; 19] = [
            "REQUEST",
            "PROPOSAL",
            "ACK",
            "COMMIT",
            "PING",
            "REVALIDATE",
            "SYNC",
            "INFORM",
            "COMMITANDACTIVATE",
            "NEWLEADER",
            "FOLLOWERINFO",
            "UPTODATE",
            "DIFF",
            "TRUNC",
            "SNAP",
            "OBSERVERINFO",
            "LEADERINFO",
            "ACKEPOCH",
            "INFORMANDACTIVATE",
        ];
        usize::try_from(t).ok().and_then(|i| i.checked_sub(1)).and_then(|i| NAMES.get(i).copied())
    }
}

/// The learner protocol version sent in LearnerInfo and LEADERINFO (`0x10000`).
pub const LEARNER_PROTOCOL_VERSION: i32 = 0x10000;

/// `QuorumPeer.OBSERVER_ID`: the sid an observer without an id announces.
pub const OBSERVER_ID: i64 = i64::MAX;

/// ZooKeeper's `zookeeper.jute.maxbuffer.extrasize` default, added to `jute.maxbuffer` when
/// checking lengths read from a peer.
pub const JUTE_EXTRA_MAX_BUFFER: usize = 1024;

/// One message on the quorum port.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuorumPacket {
    /// One of [`packet_type`].
    pub packet_type: i32,
    /// Meaning depends on the type (see [`packet_type`]; ZooKeeper's `Leader`, `Learner`).
    pub zxid: i64,
    /// Payload; `None` is jute's null buffer (length -1), distinct from empty.
    pub data: Option<Vec<u8>>,
    /// The caller's ids on REQUEST; empty otherwise.
    pub authinfo: Vec<Id>,
}

impl QuorumPacket {
    /// A packet with no data and no authinfo.
    pub fn new(packet_type: i32, zxid: i64) -> Self {
        Self { packet_type, zxid, data: None, authinfo: Vec::new() }
    }

    /// A packet carrying `data`.
    pub fn with_data(packet_type: i32, zxid: i64, data: Vec<u8>) -> Self {
        Self { packet_type, zxid, data: Some(data), authinfo: Vec::new() }
    }

    /// Decodes the first packet of a quorum-port stream. `Ok(None)` means more bytes are needed;
    /// `Ok(Some((packet, used)))` consumed `used` bytes. Buffers longer than `max_len` are invalid.
    pub fn decode_stream(buf: &[u8], max_len: usize) -> Result<Option<(Self, usize)>, DecodeError> {
        let mut r = Reader::with_max_len(buf, max_len);
        match Self::decode(&mut r) {
            Ok(p) => Ok(Some((p, r.position()))),
            Err(DecodeError::Incomplete { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The default length limit for [`QuorumPacket::decode_stream`]: jute.maxbuffer + extrasize.
    pub const DEFAULT_MAX_LEN: usize = DEFAULT_MAX_BUFFER + JUTE_EXTRA_MAX_BUFFER;
}

impl Record for QuorumPacket {
    fn encode(&self, w: &mut Writer) {
        w.write_i32(self.packet_type);
        w.write_i64(self.zxid);
        w.write_buffer(self.data.as_deref());
        w.write_vec(&self.authinfo);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { packet_type: r.read_i32()?, zxid: r.read_i64()?, data: r.read_buffer()?, authinfo: r.read_vec()? })
    }
}

/// FOLLOWERINFO / OBSERVERINFO payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LearnerInfo {
    /// The learner's sid.
    pub server_id: i64,
    /// [`LEARNER_PROTOCOL_VERSION`] for 3.4+ learners.
    pub protocol_version: i32,
    /// Version of the learner's last seen configuration (3.5+).
    pub config_version: i64,
}

impl LearnerInfo {
    /// Decodes a LearnerInfo as `LearnerHandler` does: the pre-3.5 form without `config_version`
    /// reads it as 0, and the older bare-sid form reads the protocol version as 0x1 (LearnerHandler's
    /// default). Fewer than 8 bytes is incomplete here (ZooKeeper would invent a negative sid).
    pub fn decode_lenient(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let server_id = r.read_i64()?;
        let protocol_version = if r.remaining() >= 4 { r.read_i32()? } else { 0x1 };
        let config_version = if r.remaining() >= 8 { r.read_i64()? } else { 0 };
        Ok(Self { server_id, protocol_version, config_version })
    }
}

impl Record for LearnerInfo {
    fn encode(&self, w: &mut Writer) {
        w.write_i64(self.server_id);
        w.write_i32(self.protocol_version);
        w.write_i64(self.config_version);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { server_id: r.read_i64()?, protocol_version: r.read_i32()?, config_version: r.read_i64()? })
    }
}

/// `QuorumAuth.QUORUM_AUTH_MAGIC_NUMBER`: the first field of every quorum SASL packet. Java
/// writes it as `-0xa0dbcafecafe1234L`, the negation of a negative long, so it is positive on the
/// wire (`5f 24 35 01 35 01 ed cc`); no QuorumPacket type or election length starts that way.
pub const QUORUM_AUTH_MAGIC: i64 = (0xa0db_cafe_cafe_1234_u64 as i64).wrapping_neg();

/// `QuorumAuth.Status`: where a quorum SASL exchange stands.
pub mod auth_status {
    pub const IN_PROGRESS: i32 = 0;
    pub const SUCCESS: i32 = 1;
    pub const ERROR: i32 = -1;
}

/// `QuorumAuthPacket` (zookeeper.jute): one step of the SASL exchange that opens a quorum or
/// election connection when `quorum.auth.enableSasl` is on, before any other byte of that
/// connection's protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumAuthPacket {
    pub magic: i64,
    pub status: i32,
    pub token: Option<Vec<u8>>,
}

impl QuorumAuthPacket {
    pub fn new(status: i32, token: Option<Vec<u8>>) -> Self {
        Self { magic: QUORUM_AUTH_MAGIC, status, token }
    }

    /// Whether `buf` starts with the auth magic (`QuorumAuth.nextPacketIsAuth`); `None` until 8
    /// bytes are there.
    pub fn starts(buf: &[u8]) -> Option<bool> {
        let first: [u8; 8] = buf.get(..8)?.try_into().ok()?;
        Some(i64::from_be_bytes(first) == QUORUM_AUTH_MAGIC)
    }
}

impl Record for QuorumAuthPacket {
    fn encode(&self, w: &mut Writer) {
        w.write_i64(self.magic);
        w.write_i32(self.status);
        w.write_buffer(self.token.as_deref());
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { magic: r.read_i64()?, status: r.read_i32()?, token: r.read_buffer()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_auth_packets_carry_zookeepers_magic() {
        // Java: -0xa0dbcafecafe1234L.
        assert_eq!(QUORUM_AUTH_MAGIC.to_be_bytes(), [0x5f, 0x24, 0x35, 0x01, 0x35, 0x01, 0xed, 0xcc]);
        let p = QuorumAuthPacket::new(auth_status::IN_PROGRESS, Some(b"tok".to_vec()));
        let bytes = p.to_bytes();
        assert_eq!(&bytes[8..], &[0, 0, 0, 0, 0, 0, 0, 3, b't', b'o', b'k']);
        assert_eq!(QuorumAuthPacket::starts(&bytes), Some(true));
        assert_eq!(QuorumAuthPacket::starts(&bytes[..7]), None);
        assert_eq!(QuorumAuthPacket::starts(&QuorumPacket::new(packet_type::FOLLOWERINFO, 0).to_bytes()), Some(false));
        assert_eq!(QuorumAuthPacket::decode(&mut Reader::new(&bytes)).unwrap(), p);
        let null = QuorumAuthPacket::new(auth_status::SUCCESS, None).to_bytes();
        assert_eq!(&null[12..], &[0xff, 0xff, 0xff, 0xff]);
    }

    fn ping() -> QuorumPacket {
        QuorumPacket::new(packet_type::PING, 0x1_0000_0002)
    }

    fn request() -> QuorumPacket {
        QuorumPacket {
            packet_type: packet_type::REQUEST,
            zxid: -1,
            data: Some(vec![1, 2, 3]),
            authinfo: vec![Id::new("ip", "127.0.0.1")],
        }
    }

    #[test]
    fn packet_golden_bytes() {
        let bytes = ping().to_bytes();
        let want: Vec<u8> =
            [&5i32.to_be_bytes()[..], &0x1_0000_0002i64.to_be_bytes(), &(-1i32).to_be_bytes(), &0i32.to_be_bytes()]
                .concat();
        assert_eq!(bytes, want);
        let req = request().to_bytes();
        let want: Vec<u8> = [
            &1i32.to_be_bytes()[..],
            &(-1i64).to_be_bytes(),
            &[0, 0, 0, 3, 1, 2, 3],
            &[0, 0, 0, 1],
            &[0, 0, 0, 2],
            b"ip",
            &[0, 0, 0, 9],
            b"127.0.0.1",
        ]
        .concat();
        assert_eq!(req, want);
    }

    #[test]
    fn packets_round_trip_and_null_data_is_kept() {
        for p in [ping(), request(), QuorumPacket::with_data(packet_type::ACKEPOCH, 7, vec![])] {
            assert_eq!(QuorumPacket::from_bytes(&p.to_bytes()).unwrap(), p);
        }
    }

    #[test]
    fn every_prefix_of_a_packet_stream_is_incomplete() {
        let mut stream = request().to_bytes();
        let first = stream.len();
        stream.extend(ping().to_bytes());
        for n in 0..first {
            assert_eq!(QuorumPacket::decode_stream(&stream[..n], QuorumPacket::DEFAULT_MAX_LEN), Ok(None), "{n}");
        }
        let (p, used) = QuorumPacket::decode_stream(&stream, QuorumPacket::DEFAULT_MAX_LEN).unwrap().unwrap();
        assert_eq!((p, used), (request(), first));
        let (p, _) = QuorumPacket::decode_stream(&stream[used..], QuorumPacket::DEFAULT_MAX_LEN).unwrap().unwrap();
        assert_eq!(p, ping());
    }

    #[test]
    fn hostile_packet_lengths_are_rejected() {
        let mut p = Writer::new();
        p.write_i32(packet_type::PROPOSAL);
        p.write_i64(1);
        p.write_i32(i32::MAX);
        let bytes = p.into_inner();
        let err = QuorumPacket::decode_stream(&bytes, QuorumPacket::DEFAULT_MAX_LEN).unwrap_err();
        assert_eq!(err, DecodeError::BadLength(i32::MAX));
        let mut p = Writer::new();
        p.write_i32(packet_type::PROPOSAL);
        p.write_i64(1);
        p.write_i32(-7);
        assert_eq!(QuorumPacket::from_bytes(p.as_slice()), Err(DecodeError::BadLength(-7)));
        // An authinfo count far beyond the bytes present is incomplete, not an allocation.
        let mut p = Writer::new();
        p.write_i32(packet_type::REQUEST);
        p.write_i64(-1);
        p.write_buffer(None);
        p.write_i32(1_000_000);
        assert_eq!(QuorumPacket::decode_stream(p.as_slice(), QuorumPacket::DEFAULT_MAX_LEN), Ok(None));
    }

    #[test]
    fn learner_info_golden_and_lenient_forms() {
        let li =
            LearnerInfo { server_id: 3, protocol_version: LEARNER_PROTOCOL_VERSION, config_version: 0x1_0000_0000 };
        let bytes = li.to_bytes();
        assert_eq!(bytes, [0, 0, 0, 0, 0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(LearnerInfo::from_bytes(&bytes).unwrap(), li);
        assert_eq!(LearnerInfo::decode_lenient(&bytes).unwrap(), li);
        let old = LearnerInfo::decode_lenient(&bytes[..12]).unwrap();
        assert_eq!(old, LearnerInfo { config_version: 0, ..li });
        let bare = LearnerInfo::decode_lenient(&bytes[..8]).unwrap();
        assert_eq!(bare, LearnerInfo { server_id: 3, protocol_version: 1, config_version: 0 });
        for n in 0..bytes.len() {
            assert!(matches!(LearnerInfo::from_bytes(&bytes[..n]), Err(DecodeError::Incomplete { .. })));
        }
    }

    #[test]
    fn packet_type_names() {
        assert_eq!(packet_type::name(packet_type::REQUEST), Some("REQUEST"));
        assert_eq!(packet_type::name(packet_type::INFORMANDACTIVATE), Some("INFORMANDACTIVATE"));
        assert_eq!(packet_type::name(0), None);
        assert_eq!(packet_type::name(20), None);
        assert_eq!(packet_type::name(i32::MIN), None);
    }
}
