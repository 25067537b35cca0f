//! Fast leader election on the election port (`QuorumCnxManager.java` `InitialMessage` and
//! `RecvWorker`, `FastLeaderElection.java` `buildMsg` and `Messenger.WorkerReceiver`).
//!
//! A connection starts with the initiator's [`InitialMessage`]; after that both directions carry
//! messages framed as an int length (1 ..= [`ELECTION_PACKET_MAX`]) and that many payload bytes
//! ([`split_message`]). The only payload is a [`Notification`].

use thiserror::Error;

use crate::jute::{DecodeError, Reader, Writer};

/// `QuorumCnxManager.PROTOCOL_VERSION_V1` (3.5+): one election address.
pub const PROTOCOL_VERSION_V1: i64 = -65536;
/// `QuorumCnxManager.PROTOCOL_VERSION_V2` (3.6+, multiAddress enabled): `|`-joined addresses.
pub const PROTOCOL_VERSION_V2: i64 = -65535;
/// `QuorumCnxManager.maxBuffer`: the largest address string in an [`InitialMessage`].
pub const INITIAL_ADDR_MAX: usize = 2048;
/// `QuorumCnxManager.PACKETMAXSIZE`: the largest election message payload (512 KiB).
pub const ELECTION_PACKET_MAX: usize = 512 * 1024;
/// `Notification.CURRENTVERSION`.
pub const NOTIFICATION_VERSION: i32 = 2;

/// A peer's role, as the `state` int of a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerState {
    /// Electing (0).
    Looking,
    /// Following an elected leader (1).
    Following,
    /// Leading (2).
    Leading,
    /// Observing an elected leader (3).
    Observing,
}

impl ServerState {
    /// The wire value (`ServerState.ordinal()`).
    pub fn to_wire(self) -> i32 {
        match self {
            ServerState::Looking => 0,
            ServerState::Following => 1,
            ServerState::Leading => 2,
            ServerState::Observing => 3,
        }
    }

    /// The state for a wire value; `None` for values ZooKeeper drops.
    pub fn from_wire(v: i32) -> Option<Self> {
        match v {
            0 => Some(ServerState::Looking),
            1 => Some(ServerState::Following),
            2 => Some(ServerState::Leading),
            3 => Some(ServerState::Observing),
            _ => None,
        }
    }
}

/// The first bytes an initiator sends on an election connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitialMessage {
    /// Pre-3.5 peers send only their sid (a non-negative long).
    BareSid(i64),
    /// 3.5+ peers: protocol version, sid and election address(es).
    Versioned {
        /// [`PROTOCOL_VERSION_V1`] or [`PROTOCOL_VERSION_V2`].
        protocol_version: i64,
        /// The initiator's sid ([`crate::quorum::OBSERVER_ID`] for an id-less observer).
        sid: i64,
        /// `host:port`, or for V2 a `|`-joined list of them.
        addr: String,
    },
}

impl InitialMessage {
    /// The initiator's sid.
    pub fn sid(&self) -> i64 {
        match self {
            InitialMessage::BareSid(sid) => *sid,
            InitialMessage::Versioned { sid, .. } => *sid,
        }
    }

    /// Encodes the message (the bare form is 8 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            InitialMessage::BareSid(sid) => w.write_i64(*sid),
            InitialMessage::Versioned { protocol_version, sid, addr } => {
                w.write_i64(*protocol_version);
                w.write_i64(*sid);
                w.write_buffer(Some(addr.as_bytes()));
            }
        }
        w.into_inner()
    }

    /// Decodes the message at the front of a stream. `Ok(None)` means more bytes are needed;
    /// `Ok(Some((msg, used)))` consumed `used` bytes. Unknown negative versions, an address length
    /// outside 1 ..= [`INITIAL_ADDR_MAX`] and non-UTF-8 addresses are invalid, as in ZooKeeper.
    pub fn decode(buf: &[u8]) -> Result<Option<(Self, usize)>, DecodeError> {
        match Self::decode_inner(&mut Reader::new(buf)) {
            Ok(ok) => Ok(Some(ok)),
            Err(DecodeError::Incomplete { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn decode_inner(r: &mut Reader<'_>) -> Result<(Self, usize), DecodeError> {
        let first = r.read_i64()?;
        if first >= 0 {
            return Ok((InitialMessage::BareSid(first), r.position()));
        }
        if first != PROTOCOL_VERSION_V1 && first != PROTOCOL_VERSION_V2 {
            return Err(DecodeError::Invalid("unknown election protocol version"));
        }
        let sid = r.read_i64()?;
        let len = r.read_i32()?;
        if len <= 0 || len as usize > INITIAL_ADDR_MAX {
            return Err(DecodeError::BadLength(len));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        for _ in 0..len {
            bytes.push(r.read_u8()?);
        }
        let addr = String::from_utf8(bytes).map_err(|_| DecodeError::BadUtf8)?;
        Ok((InitialMessage::Versioned { protocol_version: first, sid, addr }, r.position()))
    }

    /// The addresses as `(host, port)` pairs, split on `|`; a bracketed IPv6 host loses its
    /// brackets. `None` if any entry is badly formed (ZooKeeper then drops the connection).
    pub fn addresses(&self) -> Option<Vec<(String, u16)>> {
        match self {
            InitialMessage::BareSid(_) => Some(Vec::new()),
            InitialMessage::Versioned { addr, .. } => addr.split('|').map(split_host_port).collect(),
        }
    }
}

/// Splits `host:port` or `[v6]:port`.
fn split_host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let host = match host.strip_prefix('[') {
        Some(rest) => rest.strip_suffix(']')?,
        None if host.contains(':') => return None,
        None => host,
    };
    Some((host.to_string(), port.parse().ok()?))
}

/// Why an election stream cannot be framed; the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ElectionFrameError {
    /// `length <= 0 || length > PACKETMAXSIZE` (`RecvWorker`).
    #[error("invalid election message length {0}")]
    BadLength(i32),
}

/// Splits one election message off the front of `buf`: `Ok(Some((payload, used)))`, or `Ok(None)`
/// when more bytes are needed.
pub fn split_message(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ElectionFrameError> {
    let Some(prefix) = buf.get(..4) else { return Ok(None) };
    let len = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if len <= 0 || len as usize > ELECTION_PACKET_MAX {
        return Err(ElectionFrameError::BadLength(len));
    }
    let end = 4 + len as usize;
    Ok(buf.get(4..end).map(|payload| (payload, end)))
}

/// Frames an election message payload (length prefix included).
pub fn frame_message(payload: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(4 + payload.len());
    w.write_buffer(Some(payload));
    w.into_inner()
}

/// One election vote as sent between peers (the `Notification` / `ToSend` of ZooKeeper).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Notification {
    /// The sender's state.
    pub state: ServerState,
    /// The proposed leader's sid.
    pub leader: i64,
    /// The proposed leader's last zxid.
    pub zxid: i64,
    /// The sender's logical clock (election round).
    pub election_epoch: i64,
    /// The proposed leader's current epoch.
    pub peer_epoch: i64,
    /// Format version: 2 for the current form; 0 for the legacy 28- and 40-byte forms (ZooKeeper
    /// does not read the 40-byte form's trailing int).
    pub version: i32,
    /// The sender's QuorumVerifier text (version 2 only; else empty).
    pub config: Vec<u8>,
}

/// Size of the oldest notification form (no peer epoch).
pub const NOTIFICATION_LEN_28: usize = 28;
/// Size of the pre-3.4.6 notification form (no version/config read).
pub const NOTIFICATION_LEN_40: usize = 40;

impl Notification {
    /// Encodes the current (version 2) form as `buildMsg` does: the fields, then `version`, then
    /// the config length and bytes. Use version 2; a version below 2 makes receivers skip the
    /// config.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(44 + self.config.len());
        self.encode_fields(&mut w);
        w.write_i32(self.version);
        w.write_buffer(Some(&self.config));
        w.into_inner()
    }

    /// The 40-byte form of 3.4.0 .. 3.4.5 (and `buildMsg`'s test overload): the five fields and
    /// the int 0x1, which receivers do not read.
    pub fn encode_40(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(NOTIFICATION_LEN_40);
        self.encode_fields(&mut w);
        w.write_i32(0x1);
        w.into_inner()
    }

    /// The 28-byte form before peer epochs: state, leader, zxid, election epoch.
    pub fn encode_28(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(NOTIFICATION_LEN_28);
        w.write_i32(self.state.to_wire());
        w.write_i64(self.leader);
        w.write_i64(self.zxid);
        w.write_i64(self.election_epoch);
        w.into_inner()
    }

    fn encode_fields(&self, w: &mut Writer) {
        w.write_i32(self.state.to_wire());
        w.write_i64(self.leader);
        w.write_i64(self.zxid);
        w.write_i64(self.election_epoch);
        w.write_i64(self.peer_epoch);
    }

    /// Decodes one whole message payload as `WorkerReceiver` does: fewer than 28 bytes is
    /// invalid; exactly 28 bytes derives the peer epoch from the zxid; exactly 40 bytes reads no
    /// version; otherwise the version is read and, when above 1, a config of at most the payload's
    /// size. Bytes after the fields are ignored. A truncated field is `Incomplete` (ZooKeeper
    /// skips such a message); an unknown state is `Invalid` (ZooKeeper drops it).
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let capacity = payload.len();
        if capacity < NOTIFICATION_LEN_28 {
            return Err(DecodeError::Invalid("notification shorter than 28 bytes"));
        }
        let mut r = Reader::new(payload);
        let raw_state = r.read_i32()?;
        let (leader, zxid, election_epoch) = (r.read_i64()?, r.read_i64()?, r.read_i64()?);
        let state = ServerState::from_wire(raw_state).ok_or(DecodeError::Invalid("unknown server state"))?;
        let mut n = Notification { state, leader, zxid, election_epoch, peer_epoch: 0, version: 0, config: Vec::new() };
        if capacity == NOTIFICATION_LEN_28 {
            n.peer_epoch = zxid >> 32;
            return Ok(n);
        }
        n.peer_epoch = r.read_i64()?;
        if capacity == NOTIFICATION_LEN_40 {
            return Ok(n);
        }
        n.version = r.read_i32()?;
        if n.version > 1 {
            n.config = read_config(&mut r, capacity)?;
        }
        Ok(n)
    }
}

/// Reads the config length and bytes; `configLength < 0 || configLength > capacity` is invalid.
fn read_config(r: &mut Reader<'_>, capacity: usize) -> Result<Vec<u8>, DecodeError> {
    let len = r.read_i32()?;
    if len < 0 || len as usize > capacity {
        return Err(DecodeError::BadLength(len));
    }
    let mut config = Vec::with_capacity(len as usize);
    for _ in 0..len {
        config.push(r.read_u8()?);
    }
    Ok(config)
}

#[cfg(test)]
#[path = "election_tests.rs"]
mod tests;
