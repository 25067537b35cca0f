//! Stream framing (ZooKeeper's `NIOServerCnxn`: `readLength`, `checkFourLetterWord`): every message
//! is a 4-byte big-endian length and that many payload bytes. A length below zero or above
//! `jute.maxbuffer` costs the sender its connection. Before the handshake, the first four bytes may
//! instead be a four-letter word.

use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

use crate::jute::{Record, Writer, DEFAULT_MAX_BUFFER};

/// Why a stream cannot be framed; the connection must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The length prefix exceeds the decoder's `max_len`.
    #[error("frame length {0} exceeds the limit")]
    TooLarge(i32),
    /// The length prefix is negative.
    #[error("negative frame length {0}")]
    Negative(i32),
}

/// Splits length-prefixed frames off a byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameDecoder {
    /// Largest accepted payload length (`jute.maxbuffer`).
    pub max_len: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self { max_len: DEFAULT_MAX_BUFFER }
    }
}

impl FrameDecoder {
    /// A decoder accepting payloads of up to `max_len` bytes.
    pub fn new(max_len: usize) -> Self {
        Self { max_len }
    }

    /// Takes one complete frame's payload off the front of `buf`. `Ok(None)` means more bytes are
    /// needed (nothing is consumed); an error means the stream is unusable.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(prefix) = buf.get(..4) else { return Ok(None) };
        let len = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let payload_len = self.check_len(len)?;
        if buf.len() - 4 < payload_len {
            return Ok(None);
        }
        buf.advance(4);
        Ok(Some(buf.split_to(payload_len).freeze()))
    }

    fn check_len(&self, len: i32) -> Result<usize, FrameError> {
        let n = usize::try_from(len).map_err(|_| FrameError::Negative(len))?;
        if n > self.max_len {
            return Err(FrameError::TooLarge(len));
        }
        Ok(n)
    }
}

/// Encodes a record as a complete frame, length prefix included.
pub fn encode_frame<R: Record>(record: &R) -> Vec<u8> {
    frame_with(|w| record.encode(w))
}

/// Builds a complete frame: reserves the length prefix, lets `f` write the payload, then patches
/// the prefix with the payload length.
pub fn frame_with(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
    // Room for a reply header and a Stat, the most common reply, without growing.
    let mut w = Writer::with_capacity(128);
    w.write_i32(0);
    f(&mut w);
    let len = (w.len() - 4) as i32;
    w.as_mut_slice()[..4].copy_from_slice(&len.to_be_bytes());
    w.into_inner()
}

/// A four-letter admin command (ZooKeeper's `FourLetterCommands`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FourLetterWord {
    Conf,
    Cons,
    Crst,
    Dirs,
    Dump,
    Envi,
    Gtmk,
    Ruok,
    /// Followed on the wire by an 8-byte trace mask (see [`FourLetterWord::extra_len`]).
    Stmk,
    Srst,
    Srvr,
    Stat,
    Wchc,
    Wchp,
    Wchs,
    Mntr,
    Isro,
    Hash,
}

impl FourLetterWord {
    /// Every known word.
    pub const ALL: [FourLetterWord; 18] = {
        use FourLetterWord::*;
        [Conf, Cons, Crst, Dirs, Dump, Envi, Gtmk, Ruok, Stmk, Srst, Srvr, Stat, Wchc, Wchp, Wchs, Mntr, Isro, Hash]
    };

    /// The command's four ASCII letters, e.g. `"ruok"`.
    pub fn name(self) -> &'static str {
        use FourLetterWord::*;
        match self {
            Conf => "conf",
            Cons => "cons",
            Crst => "crst",
            Dirs => "dirs",
            Dump => "dump",
            Envi => "envi",
            Gtmk => "gtmk",
            Ruok => "ruok",
            Stmk => "stmk",
            Srst => "srst",
            Srvr => "srvr",
            Stat => "stat",
            Wchc => "wchc",
            Wchp => "wchp",
            Wchs => "wchs",
            Mntr => "mntr",
            Isro => "isro",
            Hash => "hash",
        }
    }

    /// Bytes the client sends after the four letters (8 for `stmk`'s trace mask, else 0).
    pub fn extra_len(self) -> usize {
        if self == FourLetterWord::Stmk {
            8
        } else {
            0
        }
    }
}

/// Recognises a four-letter word in the first four bytes of a fresh connection.
pub fn four_letter_word(first4: [u8; 4]) -> Option<FourLetterWord> {
    FourLetterWord::ALL.into_iter().find(|w| w.name().as_bytes() == first4)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PING_FRAME: [u8; 12] = [0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0x0b];

    #[test]
    fn ping_frame_golden() {
        let mut buf = BytesMut::from(&PING_FRAME[..]);
        buf.extend_from_slice(&[0, 0]); // start of the next frame
        let payload = FrameDecoder::default().decode(&mut buf).unwrap().unwrap();
        assert_eq!(&payload[..], &PING_FRAME[4..]);
        assert_eq!(&buf[..], [0, 0]);
    }

    #[test]
    fn every_strict_prefix_is_incomplete_and_consumes_nothing() {
        for n in 0..PING_FRAME.len() {
            let mut buf = BytesMut::from(&PING_FRAME[..n]);
            assert_eq!(FrameDecoder::default().decode(&mut buf), Ok(None));
            assert_eq!(buf.len(), n);
        }
    }

    #[test]
    fn several_frames_in_one_buffer() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0, 0, 0, 0]);
        buf.extend_from_slice(&PING_FRAME);
        let mut d = FrameDecoder::default();
        assert_eq!(d.decode(&mut buf).unwrap().unwrap().len(), 0);
        assert_eq!(d.decode(&mut buf).unwrap().unwrap().len(), 8);
        assert_eq!(d.decode(&mut buf), Ok(None));
    }

    #[test]
    fn hostile_lengths() {
        let mut d = FrameDecoder::new(100);
        let mut buf = BytesMut::from(&(-1i32).to_be_bytes()[..]);
        assert_eq!(d.decode(&mut buf), Err(FrameError::Negative(-1)));
        let mut buf = BytesMut::from(&i32::MIN.to_be_bytes()[..]);
        assert_eq!(d.decode(&mut buf), Err(FrameError::Negative(i32::MIN)));
        let mut buf = BytesMut::from(&101i32.to_be_bytes()[..]);
        assert_eq!(d.decode(&mut buf), Err(FrameError::TooLarge(101)));
        let mut buf = BytesMut::from(&100i32.to_be_bytes()[..]);
        assert_eq!(d.decode(&mut buf), Ok(None));
        // "ruok" read as a length is far above the default jute.maxbuffer.
        let mut buf = BytesMut::from(&b"ruok"[..]);
        assert_eq!(FrameDecoder::default().decode(&mut buf), Err(FrameError::TooLarge(0x7275_6f6b)));
    }

    #[test]
    fn frame_with_patches_the_length() {
        let f = frame_with(|w| w.write_raw(&[1, 2, 3]));
        assert_eq!(f, [0, 0, 0, 3, 1, 2, 3]);
        assert_eq!(frame_with(|_| {}), [0, 0, 0, 0]);
    }

    #[test]
    fn four_letter_words() {
        assert_eq!(four_letter_word(*b"ruok"), Some(FourLetterWord::Ruok));
        assert_eq!(four_letter_word(*b"RUOK"), None);
        assert_eq!(four_letter_word([0, 0, 0, 45]), None);
        for w in FourLetterWord::ALL {
            let mut b = [0u8; 4];
            b.copy_from_slice(w.name().as_bytes());
            assert_eq!(four_letter_word(b), Some(w));
        }
        assert_eq!(FourLetterWord::Stmk.extra_len(), 8);
        assert_eq!(FourLetterWord::Srvr.extra_len(), 0);
    }
}
