//! Reading a range of the txn log for a leader's DIFF from disk (ZooKeeper's
//! `ZKDatabase.getProposalsFromTxnLog` over `FileTxnLog.read`): `DataDir::probe_log` finds whether
//! the log holds a learner's last zxid and how large the log after it is, and
//! `DataDir::read_log_range` streams the records after it in bounded chunks, never the whole
//! range in memory. Both only read, through the `Fs`, and may run while the storage thread
//! appends: they read only records that are durable (at or below a committed zxid).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use warden_proto::{Reader, Txn, TxnHeader};

use crate::fs::Fs;
use crate::log_format::{decode_record_at, frame_at, FILE_HEADER_LEN};
use crate::snapshot::snapshot_files;
use crate::txn_log::list_log_files;
use crate::{DataDir, StorageError};

/// Bytes read from a log file at a time.
const READ_CHUNK: usize = 1 << 20;

/// What the log holds for a DIFF after a zxid (the facts of `Leader::on_log_probe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogProbeFacts {
    /// A record with exactly the zxid asked for is in the log.
    pub found: bool,
    /// Bytes of the log files after the one that would hold the zxid (ZooKeeper's
    /// `FileTxnIterator.getStorageSize`, which leaves the first file it reads out of the sum).
    pub log_bytes: u64,
    /// Size of the newest snapshot file (ZooKeeper's `calculateTxnLogSizeLimit` reads the most
    /// recent snapshot's length); 0 if there is none.
    pub snapshot_bytes: u64,
}

impl DataDir {
    /// Looks for the record `zxid` in the log and measures the log after the file holding it.
    /// Reads only the file that would hold it, up to the record.
    pub fn probe_log(&self, zxid: i64) -> Result<LogProbeFacts, StorageError> {
        let fs = self.fs();
        let files = list_log_files(fs, &self.log_dir())?;
        let snapshot_bytes = snapshot_files(fs, &self.snap_dir())
            .into_iter()
            .max_by_key(|(z, _)| *z)
            .and_then(|(_, p)| fs.file_len(&p).ok())
            .unwrap_or(0);
        let Some(holding) = files.iter().rposition(|(start, _)| *start <= zxid) else {
            return Ok(LogProbeFacts { found: false, log_bytes: 0, snapshot_bytes });
        };
        let mut log_bytes = 0;
        for (_, path) in &files[holding + 1..] {
            log_bytes += fs.file_len(path).map_err(StorageError::io("stat", path))?;
        }
        let mut cursor = FileCursor::new(files[holding].1.clone());
        let mut found = false;
        while let Some((hdr, _)) = cursor.next_record(fs)? {
            if hdr.zxid >= zxid {
                found = hdr.zxid == zxid;
                break;
            }
        }
        Ok(LogProbeFacts { found, log_bytes, snapshot_bytes })
    }

    /// The records `(after, upto]` of the log, read file by file in chunks of about a megabyte.
    /// The log must hold the record `after` (or `after` is the zxid before its first record) and
    /// every record up to `upto` as a gap-free run (each zxid the next counter of its epoch, or
    /// counter 1 of a later epoch); anything else is an error when the reader reaches it.
    pub fn read_log_range(&self, after: i64, upto: i64) -> Result<LogRange, StorageError> {
        let files = list_log_files(self.fs(), &self.log_dir())?;
        let holding = files.iter().rposition(|(start, _)| *start <= after).unwrap_or(0);
        let files: VecDeque<PathBuf> = files.into_iter().skip(holding).map(|(_, p)| p).collect();
        Ok(LogRange { fs: self.shared_fs(), files, cursor: None, after, upto, prev: None, done: after >= upto })
    }
}

/// The records of a zxid range of the log, in order (`DataDir::read_log_range`).
#[derive(Debug)]
pub struct LogRange {
    fs: Arc<dyn Fs>,
    files: VecDeque<PathBuf>,
    cursor: Option<FileCursor>,
    after: i64,
    upto: i64,
    /// The last zxid returned.
    prev: Option<i64>,
    done: bool,
}

impl LogRange {
    /// The next records of the range, about `max_bytes` of them (at least one); empty once the
    /// range is read.
    pub fn next_chunk(&mut self, max_bytes: usize) -> Result<Vec<(TxnHeader, Txn)>, StorageError> {
        let mut chunk = Vec::new();
        let mut bytes = 0;
        while !self.done && (chunk.is_empty() || bytes < max_bytes) {
            let Some((hdr, txn, size)) = self.next_in_files()? else {
                return Err(self.ended_early());
            };
            if hdr.zxid <= self.after {
                continue;
            }
            let prev = self.prev.unwrap_or(self.after);
            if !follows(prev, hdr.zxid) || hdr.zxid > self.upto {
                return Err(StorageError::Corrupt {
                    file: self.cursor.as_ref().map(|c| c.path.clone()).unwrap_or_default(),
                    offset: 0,
                    reason: format!("log range after {:#x}: {:#x} does not follow {prev:#x}", self.after, hdr.zxid),
                });
            }
            self.prev = Some(hdr.zxid);
            self.done = hdr.zxid == self.upto;
            bytes += size;
            chunk.push((hdr, txn));
        }
        Ok(chunk)
    }

    fn next_in_files(&mut self) -> Result<Option<(TxnHeader, Txn, usize)>, StorageError> {
        loop {
            if self.cursor.is_none() {
                match self.files.pop_front() {
                    Some(path) => self.cursor = Some(FileCursor::new(path)),
                    None => return Ok(None),
                }
            }
            let cursor = self.cursor.as_mut().expect("a cursor was just opened");
            match cursor.next_record_sized(&*self.fs)? {
                Some(rec) => return Ok(Some(rec)),
                None => self.cursor = None,
            }
        }
    }

    fn ended_early(&self) -> StorageError {
        StorageError::Corrupt {
            file: PathBuf::new(),
            offset: 0,
            reason: format!(
                "the log ends at {:#x}, before {:#x} (range after {:#x})",
                self.prev.unwrap_or(self.after),
                self.upto,
                self.after
            ),
        }
    }
}

/// Whether `next` directly follows `last` in a gap-free log: the next counter of its epoch, or
/// counter 1 of a later epoch (as `warden_quorum::zab::follows`).
fn follows(last: i64, next: i64) -> bool {
    if next >> 32 == last >> 32 {
        next == last + 1
    } else {
        next >> 32 > last >> 32 && next & 0xffff_ffff == 1
    }
}

/// Sequential reading of one log file's records, a chunk at a time.
#[derive(Debug)]
struct FileCursor {
    path: PathBuf,
    /// File offset of `buf[0]`.
    pos: u64,
    buf: Vec<u8>,
    /// Offset in `buf` of the next record.
    off: usize,
    started: bool,
}

impl FileCursor {
    fn new(path: PathBuf) -> Self {
        FileCursor { path, pos: 0, buf: Vec::new(), off: 0, started: false }
    }

    fn next_record(&mut self, fs: &dyn Fs) -> Result<Option<(TxnHeader, Txn)>, StorageError> {
        Ok(self.next_record_sized(fs)?.map(|(h, t, _)| (h, t)))
    }

    /// Makes `want` bytes from `off` available; false at the end of the file.
    fn fill(&mut self, fs: &dyn Fs, want: usize) -> Result<bool, StorageError> {
        if self.buf.len() - self.off >= want {
            return Ok(true);
        }
        self.buf.drain(..self.off);
        self.pos += self.off as u64;
        self.off = 0;
        let len = fs.file_len(&self.path).map_err(StorageError::io("stat", &self.path))?;
        let end = self.pos + self.buf.len() as u64;
        let missing = want - self.buf.len();
        let n = (len.saturating_sub(end)).min(missing.max(READ_CHUNK) as u64) as usize;
        if n > 0 {
            let more = fs.read_at(&self.path, end, n).map_err(StorageError::io("read", &self.path))?;
            self.buf.extend_from_slice(&more);
        }
        Ok(self.buf.len() >= want)
    }

    /// The next record and its size in the file; `None` at the end of the file's records (end of
    /// file, or the zeros of preallocation).
    fn next_record_sized(&mut self, fs: &dyn Fs) -> Result<Option<(TxnHeader, Txn, usize)>, StorageError> {
        if !self.started {
            if !self.fill(fs, FILE_HEADER_LEN)? {
                return Ok(None);
            }
            // The header itself was checked when the log was opened or written.
            self.off = FILE_HEADER_LEN;
            self.started = true;
        }
        if !self.fill(fs, 12)? {
            return Ok(None);
        }
        let mut r = Reader::new(&self.buf[self.off..]);
        let (crc, len) = (r.read_i64().unwrap_or(0), r.read_i32().unwrap_or(0));
        if crc == 0 && len == 0 {
            return Ok(None);
        }
        let corrupt = |c: &FileCursor, reason: String| StorageError::Corrupt {
            file: c.path.clone(),
            offset: c.pos + c.off as u64,
            reason,
        };
        let Ok(body_len) = usize::try_from(len) else { return Err(corrupt(self, format!("record length {len}"))) };
        let size = body_len + 13;
        if !self.fill(fs, size)? {
            return Err(corrupt(self, format!("record of {body_len} bytes runs past the end of the file")));
        }
        let (body, next) = frame_at(&self.buf, self.off).map_err(|reason| corrupt(self, reason))?;
        let rec = decode_record_at(&self.path, self.pos + self.off as u64, body)?;
        self.off = next;
        Ok(Some((rec.0, rec.1, size)))
    }
}
