//! Jute binary encoding (ZooKeeper's `BinaryOutputArchive` / `BinaryInputArchive`): big-endian
//! integers, length-prefixed strings and buffers where -1 means null, vectors with a count prefix,
//! records as their fields back to back.

use std::borrow::Cow;

use bytes::Bytes;
use thiserror::Error;

/// Why bytes could not be decoded. `Incomplete` is not an error in a stream: wait for more bytes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("record ends early: need {needed} more bytes")]
    Incomplete { needed: usize },
    #[error("unreasonable length {0}")]
    BadLength(i32),
    #[error("string is not valid UTF-8")]
    BadUtf8,
    #[error("invalid value: {0}")]
    Invalid(&'static str),
}

/// Encodes and decodes one jute record.
pub trait Record: Sized {
    fn encode(&self, w: &mut Writer);
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// Encodes into a fresh buffer.
    fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_inner()
    }

    /// Decodes a whole buffer; trailing bytes are ignored, as the Java server does.
    fn from_bytes(buf: &[u8]) -> Result<Self, DecodeError> {
        Self::decode(&mut Reader::new(buf))
    }
}

/// Reads jute values from a byte slice. Lengths above `max_len` are rejected before any allocation.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    max_len: usize,
    /// The `Bytes` that `buf` is, when the reader was made from one: [`Reader::read_shared_buffer`]
    /// then returns slices of it instead of copies.
    source: Option<&'a Bytes>,
}

/// Default `jute.maxbuffer`: 0xfffff bytes.
pub const DEFAULT_MAX_BUFFER: usize = 0xfffff;

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0, max_len: DEFAULT_MAX_BUFFER * 2, source: None }
    }

    pub fn with_max_len(buf: &'a [u8], max_len: usize) -> Self {
        Self { buf, pos: 0, max_len, source: None }
    }

    /// A reader over `src`, a whole frame, whose shared buffers are slices of `src` (see
    /// [`Reader::read_shared_buffer`]). A field may be as long as `src`: the frame was already
    /// held to jute.maxbuffer, whatever it is configured to, where it was cut.
    pub fn over_bytes(src: &'a Bytes) -> Self {
        Self { buf: src, pos: 0, max_len: src.len(), source: Some(src) }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Incomplete { needed: n - self.remaining() });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn read_u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn read_bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.read_u8()? != 0)
    }

    pub fn read_i32(&mut self) -> Result<i32, DecodeError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn read_i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    fn read_len(&mut self) -> Result<Option<usize>, DecodeError> {
        let n = self.read_i32()?;
        if n == -1 {
            return Ok(None);
        }
        if n < 0 || n as usize > self.max_len {
            return Err(DecodeError::BadLength(n));
        }
        Ok(Some(n as usize))
    }

    /// A buffer; `None` is the null buffer (length -1), distinct from empty.
    pub fn read_buffer(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        match self.read_len()? {
            None => Ok(None),
            Some(n) => Ok(Some(self.take(n)?.to_vec())),
        }
    }

    /// A buffer as `Bytes`: with a reader made by [`Reader::over_bytes`], a slice of its source that
    /// shares its memory (no allocation, no copy); otherwise a copy.
    pub fn read_shared_buffer(&mut self) -> Result<Option<Bytes>, DecodeError> {
        match self.read_len()? {
            None => Ok(None),
            Some(n) => {
                let b = self.take(n)?;
                Ok(Some(match self.source {
                    Some(src) => src.slice_ref(b),
                    None => Bytes::copy_from_slice(b),
                }))
            }
        }
    }

    /// A string; `None` is the null string (length -1).
    pub fn read_ustring_opt(&mut self) -> Result<Option<String>, DecodeError> {
        match self.read_len()? {
            None => Ok(None),
            Some(n) => {
                let b = self.take(n)?;
                String::from_utf8(b.to_vec()).map(Some).map_err(|_| DecodeError::BadUtf8)
            }
        }
    }

    /// A string where null reads as empty (what the Java server effectively does for paths).
    pub fn read_ustring(&mut self) -> Result<String, DecodeError> {
        Ok(self.read_ustring_opt()?.unwrap_or_default())
    }

    /// As `read_ustring`, borrowing the string from `known` instead of allocating when it is one
    /// of them.
    pub fn read_ustring_known(&mut self, known: &[&'static str]) -> Result<Cow<'static, str>, DecodeError> {
        let Some(n) = self.read_len()? else { return Ok(Cow::Borrowed("")) };
        let b = self.take(n)?;
        if let Some(k) = known.iter().find(|k| k.as_bytes() == b) {
            return Ok(Cow::Borrowed(k));
        }
        String::from_utf8(b.to_vec()).map(Cow::Owned).map_err(|_| DecodeError::BadUtf8)
    }

    /// A vector of records; null reads as empty.
    pub fn read_vec<T: Record>(&mut self) -> Result<Vec<T>, DecodeError> {
        self.read_vec_with(T::decode)
    }

    pub fn read_vec_with<T>(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let Some(n) = self.read_len()? else { return Ok(Vec::new()) };
        // Each element takes at least one byte, so `n` beyond the remaining bytes is incomplete data,
        // and capping the reservation keeps a hostile count from allocating.
        let mut v = Vec::with_capacity(n.min(self.remaining()));
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(v)
    }

    pub fn read_string_vec(&mut self) -> Result<Vec<String>, DecodeError> {
        self.read_vec_with(|r| r.read_ustring())
    }
}

/// Writes jute values into a growable buffer.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(n: usize) -> Self {
        Self { buf: Vec::with_capacity(n) }
    }

    /// A writer appending to `buf` (its contents and allocation are kept).
    pub fn from_vec(buf: Vec<u8>) -> Self {
        Self { buf }
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    /// Empties the buffer, keeping its allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Mutable access for patching a length prefix after the fact.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    pub fn write_u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn write_bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }

    pub fn write_i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn write_i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn write_raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    pub fn write_buffer(&mut self, b: Option<&[u8]>) {
        match b {
            None => self.write_i32(-1),
            Some(b) => {
                self.write_i32(b.len() as i32);
                self.buf.extend_from_slice(b);
            }
        }
    }

    pub fn write_ustring(&mut self, s: &str) {
        self.write_buffer(Some(s.as_bytes()));
    }

    pub fn write_ustring_opt(&mut self, s: Option<&str>) {
        self.write_buffer(s.map(str::as_bytes));
    }

    pub fn write_vec<T: Record>(&mut self, v: &[T]) {
        self.write_i32(v.len() as i32);
        for e in v {
            e.encode(self);
        }
    }

    pub fn write_string_vec<S: AsRef<str>>(&mut self, v: &[S]) {
        self.write_i32(v.len() as i32);
        for s in v {
            self.write_ustring(s.as_ref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_empty_buffers_are_distinct() {
        let mut w = Writer::new();
        w.write_buffer(None);
        w.write_buffer(Some(b""));
        let bytes = w.into_inner();
        assert_eq!(bytes, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let mut r = Reader::new(&bytes);
        assert_eq!(r.read_buffer().unwrap(), None);
        assert_eq!(r.read_buffer().unwrap(), Some(vec![]));
    }

    #[test]
    fn hostile_lengths_are_rejected() {
        let bytes = (-2i32).to_be_bytes();
        assert_eq!(Reader::new(&bytes).read_buffer(), Err(DecodeError::BadLength(-2)));
        let bytes = (i32::MAX).to_be_bytes();
        assert_eq!(Reader::new(&bytes).read_buffer(), Err(DecodeError::BadLength(i32::MAX)));
        let mut big = 1_000_000i32.to_be_bytes().to_vec();
        big.push(0);
        assert!(matches!(Reader::new(&big).read_string_vec(), Err(DecodeError::Incomplete { .. })));
    }
}
