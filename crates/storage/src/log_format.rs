//! Byte layout of a txn log file (ZooKeeper's `FileTxnLog`): FileHeader, then records of
//! `long Adler32(buffer)`, `buffer` (int length + TxnHeader + txn body [+ TxnDigest]), byte 0x42.

use std::path::Path;

use warden_proto::{Reader, Record, Txn, TxnHeader, Writer};

use crate::fs::Fs;
use crate::StorageError;

/// FileHeader magic of a txn log: ASCII "ZKLG".
pub const LOG_FILE_MAGIC: i32 = 0x5A4B_4C47;
/// FileHeader version written and accepted.
pub const LOG_FILE_VERSION: i32 = 2;
/// The byte that ends every record ('B').
pub const RECORD_END: u8 = 0x42;
/// FileHeader: int magic, int version, long dbid.
pub(crate) const FILE_HEADER_LEN: usize = 16;
/// Checksum (8) + length (4) + end byte (1).
const RECORD_OVERHEAD: usize = 13;

/// One decoded record and where it starts in its file.
pub(crate) struct LogRecord {
    pub offset: u64,
    pub hdr: TxnHeader,
    pub txn: Txn,
}

/// How the valid data of a file ends.
pub(crate) enum FileEnd {
    /// End of file or zero padding.
    Clean,
    /// A damaged record (or header) at `offset` with nothing valid after it: a torn write.
    Torn { offset: u64, reason: String },
}

pub(crate) struct ParsedFile {
    pub records: Vec<LogRecord>,
    pub end: FileEnd,
}

pub(crate) fn file_header() -> Vec<u8> {
    let mut w = Writer::new();
    w.write_i32(LOG_FILE_MAGIC);
    w.write_i32(LOG_FILE_VERSION);
    w.write_i64(0);
    w.into_inner()
}

pub(crate) fn adler32(bytes: &[u8]) -> u32 {
    let mut a = simd_adler32::Adler32::new();
    a.write(bytes);
    a.finish()
}

/// Appends one complete record to `out`: the body is written once, after room for the checksum
/// and length, which are patched in afterwards.
pub(crate) fn append_record(hdr: &TxnHeader, txn: &Txn, out: &mut Vec<u8>) {
    const PREFIX: usize = 12;
    let start = out.len();
    out.resize(start + PREFIX, 0);
    let mut w = Writer::from_vec(std::mem::take(out));
    hdr.encode(&mut w);
    txn.encode_body(&mut w);
    let mut buf = w.into_inner();
    let body = start + PREFIX;
    let sum = i64::from(adler32(&buf[body..]));
    let body_len = buf.len() - body;
    buf[start..start + 8].copy_from_slice(&sum.to_be_bytes());
    buf[start + 8..body].copy_from_slice(&(body_len as i32).to_be_bytes());
    buf.push(RECORD_END);
    *out = buf;
}

/// What one log file holds, for tools: its records with their offsets, and the torn tail if any.
pub struct LogFileContents {
    /// (offset in the file, header, txn) in file order.
    pub records: Vec<(u64, TxnHeader, Txn)>,
    /// A damaged record with nothing valid after it: (offset, reason). Recovery would truncate it
    /// if this is the newest file.
    pub torn_tail: Option<(u64, String)>,
}

/// Reads and checks one log file on `fs` without changing it (`&RealFs` for a file on disk).
/// Corruption followed by valid data is an error.
pub fn read_log_file(fs: &dyn Fs, path: &Path) -> Result<LogFileContents, StorageError> {
    let buf = fs.read(path).map_err(StorageError::io("read", path))?;
    parse_log_file(path, &buf)
}

/// [`read_log_file`] on a file's bytes already in memory (`path` only names it in errors): the
/// byte-level entry point the fuzz targets use.
pub fn parse_log_file(path: &Path, buf: &[u8]) -> Result<LogFileContents, StorageError> {
    let parsed = parse_file(path, buf)?;
    let torn_tail = match parsed.end {
        FileEnd::Clean => None,
        FileEnd::Torn { offset, reason } => Some((offset, reason)),
    };
    Ok(LogFileContents { records: parsed.records.into_iter().map(|r| (r.offset, r.hdr, r.txn)).collect(), torn_tail })
}

/// Parses a whole file. A damaged record followed by a valid one is `Corrupt`; a damaged record
/// with nothing valid after it is reported as `FileEnd::Torn` for the caller to judge.
pub(crate) fn parse_file(file: &Path, buf: &[u8]) -> Result<ParsedFile, StorageError> {
    let data_end = buf.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    if let Some(reason) = check_header(file, buf, data_end)? {
        return Ok(ParsedFile { records: Vec::new(), end: FileEnd::Torn { offset: 0, reason } });
    }
    let mut records = Vec::new();
    let mut off = FILE_HEADER_LEN;
    while off < data_end {
        match frame_at(buf, off) {
            Ok((body, next)) => {
                records.push(decode_record(file, off, body)?);
                off = next;
            }
            Err(reason) => {
                let end = torn_or_corrupt(file, buf, off, data_end, reason)?;
                return Ok(ParsedFile { records, end });
            }
        }
    }
    Ok(ParsedFile { records, end: FileEnd::Clean })
}

/// `Ok(None)`: a good header. `Ok(Some(reason))`: an incomplete header with nothing after it.
fn check_header(file: &Path, buf: &[u8], data_end: usize) -> Result<Option<String>, StorageError> {
    let mut r = Reader::new(buf);
    let (magic, version) = match (r.read_i32(), r.read_i32(), r.read_i64()) {
        (Ok(m), Ok(v), Ok(_dbid)) => (m, v),
        _ => (0, 0),
    };
    if magic == LOG_FILE_MAGIC && version == LOG_FILE_VERSION {
        return Ok(None);
    }
    // Torn while written: what reached the disk (up to the last non-zero byte) is a prefix of the
    // header, and zeros (unwritten, or preallocated) follow. No record can have been synced after
    // a header that never was.
    let n = buf.len().min(FILE_HEADER_LEN);
    let written = data_end.min(n);
    let prefix_ok = buf[..written] == file_header()[..written];
    if prefix_ok && data_end <= n {
        return Ok(Some(format!("incomplete file header ({} bytes)", buf.len())));
    }
    Err(corrupt(file, 0, format!("bad file header: magic {magic:#x}, version {version}")))
}

/// Checks the framing (length, checksum, end byte) of the record at `off`; returns its buffer and
/// the offset after it.
pub(crate) fn frame_at(buf: &[u8], off: usize) -> Result<(&[u8], usize), String> {
    let rest = &buf[off..];
    let mut r = Reader::new(rest);
    let (crc, len) = match (r.read_i64(), r.read_i32()) {
        (Ok(c), Ok(l)) => (c, l),
        _ => return Err(format!("{} trailing bytes are too short for a record", rest.len())),
    };
    let len = usize::try_from(len).ok().filter(|&l| l > 0).ok_or(format!("record length {len}"))?;
    if rest.len() < len + RECORD_OVERHEAD {
        return Err(format!("record of {len} bytes runs past the end of the file"));
    }
    let body = &rest[12..12 + len];
    let actual = adler32(body);
    if i64::from(actual) != crc {
        return Err(format!("checksum {crc:#x} does not match computed {actual:#x}"));
    }
    match rest[12 + len] {
        RECORD_END => Ok((body, off + len + RECORD_OVERHEAD)),
        b => Err(format!("record end byte is {b:#x}, not 0x42")),
    }
}

/// Decodes TxnHeader + body; a trailing TxnDigest (or anything else) is ignored. A field may be as
/// long as the record holds: its checksum has vouched for the bytes, and a server that wrote it
/// under a higher jute.maxbuffer than today's must still recover it.
fn decode_record(file: &Path, off: usize, body: &[u8]) -> Result<LogRecord, StorageError> {
    let mut r = Reader::with_max_len(body, body.len());
    let hdr = TxnHeader::decode(&mut r).map_err(|e| corrupt(file, off, format!("bad TxnHeader: {e}")))?;
    let txn = Txn::decode_body(hdr.txn_type, &mut r)
        .map_err(|e| corrupt(file, off, format!("bad body of txn type {}: {e}", hdr.txn_type)))?;
    Ok(LogRecord { offset: off as u64, hdr, txn })
}

/// `decode_record` for a reader that holds part of the file: `offset` is the record's offset in
/// the file (for the error).
pub(crate) fn decode_record_at(file: &Path, offset: u64, body: &[u8]) -> Result<(TxnHeader, Txn), StorageError> {
    let rec = decode_record(file, 0, body).map_err(|e| match e {
        StorageError::Corrupt { file, reason, .. } => StorageError::Corrupt { file, offset, reason },
        other => other,
    })?;
    Ok((rec.hdr, rec.txn))
}

fn torn_or_corrupt(
    file: &Path,
    buf: &[u8],
    off: usize,
    data_end: usize,
    reason: String,
) -> Result<FileEnd, StorageError> {
    if let Some(at) = next_valid_frame(buf, off + 1, data_end) {
        return Err(corrupt(file, off, format!("{reason}; a valid record follows at offset {at}")));
    }
    if written_completely(buf, off) {
        // A torn write leaves unwritten sectors (zeros, the preallocation) or a short record; a
        // record that is all there, end byte included, was damaged after it was written. It may
        // have been acknowledged, so it is reported, never cut away.
        return Err(corrupt(
            file,
            off,
            format!("{reason}; the record was written completely, so this is damage, not a torn write"),
        ));
    }
    Ok(FileEnd::Torn { offset: off as u64, reason })
}

/// Sector size assumed for torn writes: the unit a crash can leave unwritten.
const SECTOR: usize = 512;

/// True when the record at `off` is present in full (its length fits, its end byte is written and
/// non-zero) and none of its sectors is entirely zero, i.e. nothing about it looks unwritten.
fn written_completely(buf: &[u8], off: usize) -> bool {
    let mut r = Reader::new(&buf[off..]);
    let (Ok(_crc), Ok(len)) = (r.read_i64(), r.read_i32()) else { return false };
    let Some(end) = usize::try_from(len).ok().filter(|&l| l > 0).map(|l| off + l + RECORD_OVERHEAD) else {
        return false;
    };
    if end > buf.len() || buf[end - 1] == 0 {
        return false;
    }
    let first_sector = off.div_ceil(SECTOR) * SECTOR;
    !(first_sector..end.saturating_sub(SECTOR - 1)).step_by(SECTOR).any(|s| buf[s..s + SECTOR].iter().all(|&b| b == 0))
}

/// The first offset at or after `from` where a record with good framing starts. A record ends
/// with the non-zero byte 0x42, so it must end by `data_end`.
fn next_valid_frame(buf: &[u8], from: usize, data_end: usize) -> Option<usize> {
    (from..data_end.saturating_sub(RECORD_OVERHEAD)).find(|&o| frame_at(buf, o).is_ok())
}

fn corrupt(file: &Path, offset: usize, reason: String) -> StorageError {
    StorageError::Corrupt { file: file.to_path_buf(), offset: offset as u64, reason }
}
