//! The transaction log: `<dataLogDir>/version-2/log.<hex zxid of first txn>`, ZooKeeper's format.
//! Appends are buffered; `sync` makes everything appended so far durable.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use warden_proto::{Txn, TxnHeader};

use crate::fs::{Fs, FsFile};
use crate::log_format::{append_record, file_header, parse_file, FileEnd, FILE_HEADER_LEN};
use crate::{DataDir, StorageError};

/// ZooKeeper's default `preAllocSize`: 64 MiB.
pub const DEFAULT_PRE_ALLOC_BYTES: u64 = 64 * 1024 * 1024;
/// Extend the file when the write position comes this close to its end (ZooKeeper's FilePadding).
const PAD_MARGIN: u64 = 4096;
/// Bytes of records collected before they are written (a sync writes them whatever their size).
const WRITE_BUFFER: usize = 64 * 1024;

/// `log.<zxid>` with the zxid in lowercase hex, no padding (Java's `Long.toHexString`).
pub fn log_file_name(zxid: i64) -> String {
    format!("log.{zxid:x}")
}

/// An open txn log directory (`DataDir::open_log`). After opening, the first `append` starts a new
/// file, as ZooKeeper does.
#[derive(Debug)]
pub struct TxnLog {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    pre_alloc_bytes: u64,
    current: Option<CurrentFile>,
    last_zxid: i64,
    dir_needs_sync: bool,
    failed: bool,
    recovered_tail: Option<String>,
    /// Bytes of records the last fdatasync made durable (0 before the first). Small syncs mean a
    /// lightly loaded log, whose padding ahead is written as zeros (`CurrentFile::grow`).
    last_sync_len: u64,
}

#[derive(Debug)]
struct CurrentFile {
    path: PathBuf,
    file: Box<dyn FsFile>,
    /// Records not yet written to `file`; they are encoded straight into it.
    buf: Vec<u8>,
    /// Logical end of the written data, including bytes still in the buffer.
    position: u64,
    /// File length including zero padding.
    size: u64,
    /// The end of the padding written as real zeros (`FsFile::fill_zeros`), so that appends
    /// overwrite allocated blocks and their fdatasync does not commit the file system's journal.
    zeroed: u64,
    /// `position` at the last fdatasync.
    synced: u64,
}

/// How far ahead of the records the padding is written as real zeros.
const ZERO_AHEAD: u64 = 1 << 20;

/// The largest fdatasync (bytes of records) after which the padding ahead is still written as
/// zeros. A log synced a record or a few at a time (one synchronous client, light load) pays a
/// journal commit per fdatasync unless its blocks are allocated ahead, and the zeros cost it
/// little. Under load each fdatasync covers hundreds of records and commits the journal once for
/// all of them, while zeros written ahead double the bytes the storage thread copies and the disk
/// writes; there the padding stays sparse, as ZooKeeper's is.
const SMALL_SYNC: u64 = 8 << 10;

impl DataDir {
    /// Opens `<dataLogDir>/version-2` (creating it) and reads every log file in zxid order. A torn
    /// record at the tail of the newest file is truncated away (see `TxnLog::recovered_tail`); any
    /// other damage is an error. The log keeps using this directory's file system.
    pub fn open_log(&self, pre_alloc_bytes: u64) -> Result<(TxnLog, Vec<(TxnHeader, Txn)>), StorageError> {
        self.open_log_after(pre_alloc_bytes, 0)
    }

    /// As `open_log`, returning only the records above `after_zxid` (the snapshot's zxid at
    /// recovery). Files that hold nothing above it (the next file starts at or below
    /// `after_zxid + 1`) are not read, as ZooKeeper does: decoding the whole history only to drop
    /// it costs start-up time and leaves the heap fragmented around the tree being built.
    pub fn open_log_after(
        &self,
        pre_alloc_bytes: u64,
        after_zxid: i64,
    ) -> Result<(TxnLog, Vec<(TxnHeader, Txn)>), StorageError> {
        let fs = self.shared_fs();
        let dir = self.log_dir();
        fs.create_dir_all(&dir).map_err(StorageError::io("create directory", &dir))?;
        let read = read_logs_after(&*fs, &dir, after_zxid)?;
        let recovered_tail = match &read.torn_newest {
            Some((path, offset, reason)) => Some(repair_tail(&*fs, &dir, path, *offset, reason)?),
            None => None,
        };
        let (txns, last_zxid) = (read.txns, read.last.unwrap_or(0));
        let log = TxnLog {
            fs,
            dir,
            pre_alloc_bytes,
            current: None,
            last_zxid,
            dir_needs_sync: false,
            failed: false,
            recovered_tail,
            last_sync_len: 0,
        };
        Ok((log, txns))
    }
}

/// What the log files above a zxid hold.
#[derive(Default)]
pub(crate) struct LogsRead {
    pub txns: Vec<(TxnHeader, Txn)>,
    /// The last zxid of any record read (also at or below `after_zxid`).
    pub last: Option<i64>,
    /// A torn record at the end of the newest file: (file, offset, why). Recovery truncates it.
    pub torn_newest: Option<(PathBuf, u64, String)>,
}

/// Reads the log files of `dir` that may hold records above `after_zxid`, in zxid order, and
/// returns those records; changes nothing on disk. Damage anywhere but at the end of the newest
/// file is an error.
pub(crate) fn read_logs_after(fs: &dyn Fs, dir: &Path, after_zxid: i64) -> Result<LogsRead, StorageError> {
    let files = list_log_files(fs, dir)?;
    let first = files.windows(2).take_while(|w| w[1].0 <= after_zxid.saturating_add(1)).count();
    let mut read = LogsRead { txns: Vec::new(), last: None, torn_newest: None };
    for (i, (_, path)) in files.iter().enumerate().skip(first) {
        let buf = fs.read(path).map_err(StorageError::io("read", path))?;
        let parsed = parse_file(path, &buf)?;
        drop(buf);
        for rec in parsed.records {
            check_order(path, rec.offset, read.last, rec.hdr.zxid)?;
            read.last = Some(rec.hdr.zxid);
            if rec.hdr.zxid > after_zxid {
                read.txns.push((rec.hdr, rec.txn));
            }
        }
        if let FileEnd::Torn { offset, reason } = parsed.end {
            if i + 1 != files.len() {
                let reason = format!("{reason} (damage at the end of a log file that is not the newest)");
                return Err(StorageError::Corrupt { file: path.clone(), offset, reason });
            }
            read.torn_newest = Some((path.clone(), offset, reason));
        }
    }
    Ok(read)
}

impl TxnLog {
    /// Buffers one record; starts `log.<hex zxid>` if no file is open. Not durable until `sync`.
    pub fn append(&mut self, hdr: &TxnHeader, txn: &Txn) -> Result<(), StorageError> {
        self.check_usable()?;
        if hdr.zxid <= self.last_zxid {
            return Err(StorageError::OutOfOrder { zxid: hdr.zxid, last: self.last_zxid });
        }
        let result = self.write_record(hdr, txn);
        self.failed = result.is_err();
        result?;
        self.last_zxid = hdr.zxid;
        Ok(())
    }

    /// Flushes the buffer and fdatasyncs the current file; fsyncs the directory once after a new
    /// file was created.
    pub fn sync(&mut self) -> Result<(), StorageError> {
        self.check_usable()?;
        let result = self.sync_inner();
        self.failed = result.is_err();
        result
    }

    /// Hands buffered records to the operating system without waiting for the disk
    /// (`forceSync=no`): they survive a process crash but not a power loss.
    pub fn flush(&mut self) -> Result<(), StorageError> {
        self.check_usable()?;
        let result = match self.current.as_mut() {
            Some(cur) => cur.write_buffer(),
            None => Ok(()),
        };
        self.failed = result.is_err();
        result
    }

    /// Syncs and closes the current file so the next `append` starts a new one.
    pub fn roll(&mut self) -> Result<(), StorageError> {
        self.sync()?;
        self.current = None;
        Ok(())
    }

    /// Drops every record with zxid above `zxid` (ZAB's TRUNC), durably: the current file is synced
    /// and closed, files that start above `zxid` are removed, the file holding the cut is cut at the
    /// first record above `zxid` and fdatasynced, and the directory is fsynced. The next `append`
    /// starts a new file.
    pub fn truncate_after(&mut self, zxid: i64) -> Result<(), StorageError> {
        self.check_usable()?;
        if self.current.is_some() {
            self.sync()?;
            self.current = None;
        }
        let files = list_log_files(&*self.fs, &self.dir)?;
        let mut last = 0;
        let mut changed = false;
        for (_, path) in files {
            let buf = match self.fs.read(&path) {
                // Purged by the snapshot thread since the listing (only files wholly older than
                // the retained snapshots go): nothing of it is left to cut.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                r => r.map_err(StorageError::io("read", &path))?,
            };
            let parsed = parse_file(&path, &buf)?;
            match parsed.records.iter().position(|r| r.hdr.zxid > zxid) {
                None => {
                    if let Some(r) = parsed.records.last() {
                        last = r.hdr.zxid;
                    }
                }
                Some(0) => {
                    self.fs.remove_file(&path).map_err(StorageError::io("remove", &path))?;
                    changed = true;
                }
                Some(i) => {
                    last = parsed.records[i - 1].hdr.zxid;
                    let mut f = self.fs.open_write(&path).map_err(StorageError::io("open", &path))?;
                    f.set_len(parsed.records[i].offset).map_err(StorageError::io("truncate", &path))?;
                    f.sync_data().map_err(StorageError::io("fdatasync", &path))?;
                    changed = true;
                }
            }
        }
        if changed {
            sync_dir(&*self.fs, &self.dir)?;
        }
        self.last_zxid = last;
        Ok(())
    }

    /// The zxid of the last appended (or recovered) txn; 0 when the log is empty.
    pub fn last_zxid(&self) -> i64 {
        self.last_zxid
    }

    /// What opening the log truncated away at the tail of the newest file, if anything.
    pub fn recovered_tail(&self) -> Option<&str> {
        self.recovered_tail.as_deref()
    }

    /// The `version-2` directory holding the log files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file appends currently go to.
    pub fn current_file(&self) -> Option<&Path> {
        self.current.as_ref().map(|c| c.path.as_path())
    }

    fn check_usable(&self) -> Result<(), StorageError> {
        if self.failed {
            let source = std::io::Error::other("an earlier write or sync failed; reopen the log");
            return Err(StorageError::Io { op: "use txn log", path: self.dir.clone(), source });
        }
        Ok(())
    }

    fn write_record(&mut self, hdr: &TxnHeader, txn: &Txn) -> Result<(), StorageError> {
        if self.current.is_none() {
            let path = self.dir.join(log_file_name(hdr.zxid));
            self.current = Some(CurrentFile::create(&*self.fs, path)?);
            self.dir_needs_sync = true;
        }
        match self.current.as_mut() {
            Some(cur) => cur.append(hdr, txn, self.pre_alloc_bytes, self.last_sync_len <= SMALL_SYNC),
            None => Ok(()),
        }
    }

    fn sync_inner(&mut self) -> Result<(), StorageError> {
        if let Some(cur) = self.current.as_mut() {
            cur.write_buffer()?;
            cur.file.sync_data().map_err(StorageError::io("fdatasync", &cur.path))?;
            self.last_sync_len = cur.position - cur.synced;
            cur.synced = cur.position;
        }
        if self.dir_needs_sync {
            sync_dir(&*self.fs, &self.dir)?;
            self.dir_needs_sync = false;
        }
        Ok(())
    }
}

impl CurrentFile {
    /// Creates (or replaces: opening the log proved it holds no txn at or after `zxid`) a log file.
    fn create(fs: &dyn Fs, path: PathBuf) -> Result<Self, StorageError> {
        let file = fs.create(&path).map_err(StorageError::io("create", &path))?;
        let mut buf = Vec::with_capacity(WRITE_BUFFER);
        buf.extend_from_slice(&file_header());
        Ok(CurrentFile {
            path,
            file,
            buf,
            position: FILE_HEADER_LEN as u64,
            size: 0,
            zeroed: 0,
            synced: FILE_HEADER_LEN as u64,
        })
    }

    /// Encodes a record at the end of the buffer, grows the file ahead of it (writing the padding
    /// ahead as zeros if `zero_ahead`), and writes the buffer once it holds `WRITE_BUFFER` bytes.
    fn append(&mut self, hdr: &TxnHeader, txn: &Txn, pre_alloc: u64, zero_ahead: bool) -> Result<(), StorageError> {
        let held = self.buf.len();
        append_record(hdr, txn, &mut self.buf);
        let end = self.position + (self.buf.len() - held) as u64;
        if let Err(e) = self.grow(end, pre_alloc, zero_ahead) {
            self.buf.truncate(held);
            return Err(e);
        }
        self.position = end;
        if self.buf.len() >= WRITE_BUFFER {
            self.write_buffer()?;
        }
        Ok(())
    }

    /// Extends the file, and writes its zeros ahead of a record that will end at `end` if
    /// `zero_ahead`. Nothing at or past the record's start has been written to the file yet.
    fn grow(&mut self, end: u64, pre_alloc: u64, zero_ahead: bool) -> Result<(), StorageError> {
        if let Some(size) = padded_size(end, self.size, pre_alloc) {
            self.file.set_len(size).map_err(StorageError::io("preallocate", &self.path))?;
            self.size = size;
        }
        if zero_ahead && end > self.zeroed && self.size > self.zeroed {
            let from = self.zeroed.max(self.position);
            let to = (end + ZERO_AHEAD).min(self.size).max(from);
            self.file.fill_zeros(from, to - from).map_err(StorageError::io("preallocate", &self.path))?;
            self.zeroed = to;
        }
        Ok(())
    }

    /// Hands the buffered records to the file. A record larger than `WRITE_BUFFER` grew the buffer;
    /// its room is given back here rather than kept until the log rolls.
    fn write_buffer(&mut self) -> Result<(), StorageError> {
        self.file.write_all(&self.buf).map_err(StorageError::io("write", &self.path))?;
        self.buf.clear();
        self.buf.shrink_to(WRITE_BUFFER);
        Ok(())
    }
}

/// ZooKeeper's `FilePadding.calculateFileSizeWithPadding`, applied to the end of the next record.
fn padded_size(end: u64, size: u64, pre_alloc: u64) -> Option<u64> {
    if pre_alloc == 0 || end + PAD_MARGIN < size {
        return None;
    }
    if end > size {
        let s = end + pre_alloc;
        Some(s - s % pre_alloc)
    } else {
        Some(size + pre_alloc)
    }
}

/// `log.<hex zxid>` files in `dir` with their first zxid, oldest first.
pub(crate) fn list_log_files(fs: &dyn Fs, dir: &Path) -> Result<Vec<(i64, PathBuf)>, StorageError> {
    let mut files = Vec::new();
    for name in fs.list_dir(dir).map_err(StorageError::io("list", dir))? {
        let Some(hex) = name.strip_prefix("log.") else {
            continue;
        };
        let path = dir.join(&name);
        match u64::from_str_radix(hex, 16) {
            Ok(zxid) => files.push((zxid as i64, path)),
            Err(_) => {
                tracing::warn!(file = %path.display(), "ignoring file with a log. name that is not a hex zxid")
            }
        }
    }
    files.sort();
    Ok(files)
}

fn check_order(file: &Path, offset: u64, prev: Option<i64>, zxid: i64) -> Result<(), StorageError> {
    match prev {
        Some(p) if zxid <= p => Err(StorageError::Corrupt {
            file: file.to_path_buf(),
            offset,
            reason: format!("zxid {zxid:#x} is not after the previous zxid {p:#x}"),
        }),
        _ => Ok(()),
    }
}

/// Cuts a torn tail off the newest file (or removes a file whose header is incomplete).
fn repair_tail(fs: &dyn Fs, dir: &Path, path: &Path, offset: u64, reason: &str) -> Result<String, StorageError> {
    let msg = format!("truncated torn tail of {} at offset {offset}: {reason}", path.display());
    tracing::warn!("{msg}");
    if offset == 0 {
        fs.remove_file(path).map_err(StorageError::io("remove", path))?;
    } else {
        let mut file = fs.open_write(path).map_err(StorageError::io("open", path))?;
        file.set_len(offset).map_err(StorageError::io("truncate", path))?;
        file.sync_all().map_err(StorageError::io("fsync", path))?;
    }
    sync_dir(fs, dir)?;
    Ok(msg)
}

fn sync_dir(fs: &dyn Fs, dir: &Path) -> Result<(), StorageError> {
    fs.sync_dir(dir).map_err(StorageError::io("fsync directory", dir))
}
