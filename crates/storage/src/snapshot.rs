//! Snapshots: `<dataDir>/version-2/snapshot.<hex zxid>[.gz|.snappy]` in ZooKeeper 3.8's format
//! (`FileSnap`, `SnapStream`, `SerializeUtils.serializeSnapshot`, `DataTree.serialize`,
//! `ReferenceCountedACLCache.serialize`). Layout of the uncompressed stream:
//!
//! ```text
//! FileHeader      int magic "ZKSN", int version 2, long dbid -1
//! sessions        int count, then (long id, int timeout) per session
//! ACL cache       int count, then (long key, vector<ACL>) per entry
//! nodes           (ustring path, buffer data, long acl key, StatPersisted), parents before children, the root
//!                 with path "", ended by the path "/"
//! seal            long Adler32 of every byte before it, ustring "/"
//! digest          (optional, 3.6+) long zxid, int digestVersion, long digest; then a seal
//! lastZxid        (optional, 3.9+) long lastProcessedZxid; then a seal
//! ```
//!
//! The checksum runs over the uncompressed bytes; compression wraps the whole stream (gzip, or
//! snappy-java's `SnappyOutputStream` framing for `.snappy`). ACL key -1 means OPEN_ACL_UNSAFE;
//! ZooKeeper itself gives every distinct ACL list (OPEN_ACL_UNSAFE included) a key 1, 2, ... and
//! so does this writer.
//!
//! Digest: ZooKeeper 3.8 (with `zookeeper.digest.enabled`, the default) always writes the digest
//! section, all zeros until it has logged a digest; a zero-zxid digest is read as "no digest"
//! and never compared. Warden writes the tree's ZooKeeper digest at the zxid the snapshot stands
//! at (`DataTree::snapshot_digest`), which ZooKeeper checks when it loads the file, and checks the
//! digest of a snapshot it loads (`DataTree::expect_snapshot_digest`). ZooKeeper 3.8 also
//! accepts a snapshot with no digest section (`deserializeZxidDigest` treats EOF as absent).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden_proto::{Acl, Reader, Record, StatPersisted, Writer};
use warden_tree::{DataTree, Znode, ZxidDigest};

use crate::fs::{Fs, FsFile};
use crate::{DataDir, StorageError};

/// FileHeader magic of a snapshot: ASCII "ZKSN".
pub const SNAP_FILE_MAGIC: i32 = 0x5A4B_534E;
/// FileHeader version written and accepted.
pub const SNAP_FILE_VERSION: i32 = 2;
/// The dbid ZooKeeper writes in snapshot headers.
pub const SNAP_DB_ID: i64 = -1;
/// ACL cache key meaning OPEN_ACL_UNSAFE (never stored in the cache).
pub const OPEN_ACL_KEY: i64 = -1;
/// snappy-java's stream header magic (`SnappyCodec.MAGIC_HEADER`).
const SNAPPY_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// snappy-java's default block size.
const SNAPPY_BLOCK: usize = 32 * 1024;
/// How many snapshots `recover` tries before giving up.
pub const SNAPSHOTS_TRIED: usize = 3;
/// Largest data buffer or string accepted while reading (ZooKeeper bounds them by jute.maxbuffer).
const MAX_FIELD: usize = 64 * 1024 * 1024;

/// How a snapshot file is compressed (`zookeeper.snapshot.compression.method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Plain (ZooKeeper's default, "CHECKED"): no extension.
    #[default]
    None,
    /// gzip, extension `.gz`.
    Gzip,
    /// snappy-java stream framing, extension `.snappy`.
    Snappy,
}

impl Compression {
    /// The file name extension including the dot, or "".
    pub fn extension(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Snappy => ".snappy",
        }
    }

    /// As ZooKeeper's `SnapStream.getStreamMode(fileName)`: from the last extension.
    fn of_file_name(name: &str) -> Compression {
        match name.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase()) {
            Some(e) if e == "gz" => Compression::Gzip,
            Some(e) if e == "snappy" => Compression::Snappy,
            _ => Compression::None,
        }
    }
}

/// A snapshot as read from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The zxid in the file name: the tree reflects at least every txn up to it (ZooKeeper's
    /// snapshots are fuzzy: some later txns may be partly in it too).
    pub zxid: i64,
    /// (session id, timeout ms), in file order.
    pub sessions: Vec<(i64, i32)>,
    /// Nodes in file order; the root has path "". `children` is empty (rebuilt on load).
    pub nodes: Vec<(Arc<str>, Znode)>,
    /// The digest section, if present (zxid 0: an empty one).
    pub digest: Option<ZxidDigest>,
    /// The lastProcessedZxid section (ZooKeeper 3.9+), if present.
    pub last_processed_zxid: Option<i64>,
}

impl Snapshot {
    /// Builds the tree (`DataTree::from_snapshot`, `last_processed_zxid` = `zxid`), consuming the
    /// snapshot: its nodes move into the tree without a copy (a copy of every node at start-up
    /// doubles the peak and leaves the heap fragmented). Returns the tree and the sessions.
    pub fn into_tree(self, file: &Path) -> Result<(DataTree, Vec<(i64, i32)>), StorageError> {
        let mut tree = DataTree::from_snapshot(self.nodes, self.zxid)
            .map_err(|reason| StorageError::CorruptSnapshot { file: file.to_path_buf(), reason })?;
        expect_digest(&mut tree, self.digest, file);
        Ok((tree, self.sessions))
    }
}

/// `snapshot.<hex zxid>` plus the compression extension.
pub fn snapshot_file_name(zxid: i64, compression: Compression) -> String {
    format!("snapshot.{zxid:x}{}", compression.extension())
}

/// How a snapshot is written: its compression (none, ZooKeeper's default), and `pace`, told how
/// long each write into the file took (the serialising between writes not counted) and free to
/// sleep: the server's snapshot thread uses it to give way to the transaction log's fsyncs.
#[derive(Default)]
pub struct SnapshotOptions<'a> {
    pub compression: Compression,
    pub pace: Option<&'a mut dyn FnMut(Duration)>,
}

impl DataDir {
    /// Writes `<dataDir>/version-2/snapshot.<hex zxid>[.gz|.snappy]` and makes it durable: temp
    /// file, fsync, rename, fsync the directory. Returns the final path.
    pub fn write_snapshot(
        &self,
        tree: &DataTree,
        sessions: &[(i64, i32)],
        zxid: i64,
        opts: SnapshotOptions<'_>,
    ) -> Result<PathBuf, StorageError> {
        let SnapshotOptions { compression, pace } = opts;
        let mut no_pace = |_| {};
        let pace: &mut dyn FnMut(Duration) = match pace {
            Some(p) => p,
            None => &mut no_pace,
        };
        let fs = self.fs();
        let dir = self.snap_dir();
        fs.create_dir_all(&dir).map_err(StorageError::io("create directory", &dir))?;
        let name = snapshot_file_name(zxid, compression);
        let path = dir.join(&name);
        // A leading dot keeps ZooKeeper (and `find_valid_snapshots`) from taking it for a snapshot.
        let tmp = dir.join(format!(".{name}.tmp"));
        let file = fs.create_streamed(&tmp).map_err(StorageError::io("create", &tmp))?;
        if let Err(e) = write_synced(file, &tmp, tree, sessions, compression, pace) {
            let _ = fs.remove_file(&tmp);
            return Err(e);
        }
        fs.rename(&tmp, &path).map_err(StorageError::io("rename", &tmp))?;
        sync_dir(fs, &dir)?;
        Ok(path)
    }
}

/// Writes the snapshot stream to `file` and fsyncs it.
fn write_synced(
    file: Box<dyn FsFile>,
    tmp: &Path,
    tree: &DataTree,
    sessions: &[(i64, i32)],
    compression: Compression,
    pace: &mut dyn FnMut(Duration),
) -> Result<(), StorageError> {
    // No buffer of its own: the node writer hands over chunks, and the few small writes around
    // them cost a syscall each at most.
    let sink = match compression {
        Compression::None => Sink::Plain(file),
        Compression::Gzip => Sink::Gzip(flate2::write::GzEncoder::new(file, flate2::Compression::default())),
        Compression::Snappy => Sink::Snappy(SnappyJavaWriter::new(file)),
    };
    let mut w = Checked { inner: Timed { inner: sink, pace }, adler: simd_adler32::Adler32::new() };
    write_body(&mut w, tree, sessions).map_err(StorageError::io("write", tmp))?;
    let mut file = w.inner.inner.finish().map_err(StorageError::io("write", tmp))?;
    file.sync_all().map_err(StorageError::io("fsync", tmp))
}

/// The uncompressed snapshot stream for `tree` (what a plain `snapshot.<zxid>` file holds).
pub fn encode_snapshot(tree: &DataTree, sessions: &[(i64, i32)]) -> Vec<u8> {
    let mut w = Checked { inner: Vec::new(), adler: simd_adler32::Adler32::new() };
    write_body(&mut w, tree, sessions)
        .expect("a Vec takes every write; only a tree whose child counts are broken fails");
    w.inner
}

/// The snapshot stream ZooKeeper 3.9's `snapshot` admin command sends and its `restore` command
/// reads: a plain snapshot file (header, sessions and tree, digest) plus the lastProcessedZxid
/// section (`zookeeper.serializeLastProcessedZxid.enabled`, on by default in 3.9) and its seal,
/// which tells the restoring server where the data stands.
pub fn encode_snapshot_with_last_zxid(tree: &DataTree, sessions: &[(i64, i32)]) -> Vec<u8> {
    let mut w = Checked { inner: Vec::new(), adler: simd_adler32::Adler32::new() };
    let mut last = Writer::new();
    last.write_i64(tree.last_processed_zxid());
    write_body(&mut w, tree, sessions)
        .and_then(|()| w.put(last.as_slice()))
        .and_then(|()| w.seal())
        .expect("a Vec takes every write; only a tree whose child counts are broken fails");
    w.inner
}

fn write_body<W: Write>(out: &mut Checked<W>, tree: &DataTree, sessions: &[(i64, i32)]) -> io::Result<()> {
    let mut w = Writer::new();
    w.write_i32(SNAP_FILE_MAGIC);
    w.write_i32(SNAP_FILE_VERSION);
    w.write_i64(SNAP_DB_ID);
    out.put(w.as_slice())?;
    write_sessions_and_tree(&mut |b| out.put(b), tree, sessions)?;
    out.seal()?;
    // The digest at the zxid the tree stands at (empty before the first txn), then its seal.
    let d = tree.snapshot_digest();
    let mut w = Writer::new();
    w.write_i64(d.zxid);
    w.write_i32(d.version);
    w.write_i64(d.digest);
    out.put(w.as_slice())?;
    out.seal()
}

/// ZooKeeper's `SerializeUtils.serializeSnapshot`: the session count and (id, timeout) pairs, then
/// `DataTree.serialize` (the ACL cache, the nodes with each parent before its children, the "/" terminator). The part of a
/// snapshot file between its header and its first seal, and what a leader writes after SNAP.
fn write_sessions_and_tree(
    out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    tree: &DataTree,
    sessions: &[(i64, i32)],
) -> io::Result<()> {
    let mut w = Writer::with_capacity(64 * 1024);
    w.write_i32(len_i32(sessions.len()));
    for &(id, timeout) in sessions {
        w.write_i64(id);
        w.write_i32(timeout);
    }
    // ACL cache: keys 1, 2, ... in order of first use in a scan of the node map, which starts at
    // the root (ReferenceCountedACLCache hands out keys from 1 as it meets new lists).
    let mut keys: HashMap<&[Acl], i64> = HashMap::new();
    let mut entries: Vec<&[Acl]> = Vec::new();
    // A node whose list is the previous node's allocation adds nothing: skip hashing the list.
    let mut last: Option<&Arc<[Acl]>> = None;
    for node in tree.nodes_in_map_order() {
        if last.is_some_and(|l| Arc::ptr_eq(l, &node.acl)) {
            continue;
        }
        last = Some(&node.acl);
        keys.entry(&*node.acl).or_insert_with(|| {
            entries.push(&*node.acl);
            entries.len() as i64
        });
    }
    w.write_i32(len_i32(entries.len()));
    for (i, acl) in entries.iter().enumerate() {
        w.write_i64(i as i64 + 1);
        w.write_vec(acl);
    }
    out(w.as_slice())?;
    // Nodes go out in chunks of about CHUNK bytes, one buffer reused. Small enough to stay in the
    // CPU's cache while the checksum and the copy to the file read it again.
    const CHUNK: usize = 32 * 1024;
    w = Writer::with_capacity(CHUNK + 4096);
    // Equal lists are usually one shared allocation, and neighbours usually share theirs: the
    // previous node's key is reused without hashing the list when the pointer is the same.
    let mut last: Option<(&Arc<[Acl]>, i64)> = None;
    let mut written = 0usize;
    for (path, node) in tree.snapshot_nodes() {
        written += 1;
        w.write_ustring(path);
        w.write_buffer(node.data.as_deref());
        let key = match last {
            Some((acl, key)) if Arc::ptr_eq(acl, &node.acl) => key,
            _ => keys[&*node.acl],
        };
        last = Some((&node.acl, key));
        w.write_i64(key);
        node.stat.encode(&mut w);
        if w.len() >= CHUNK {
            out(w.as_slice())?;
            w.clear();
        }
    }
    // The walk descends only into nodes whose child count says they have children: a count that
    // disagreed with the tree would leave nodes out, so such a snapshot is refused, not written.
    if written != tree.znode_count() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the tree walk met {written} of {} nodes", tree.znode_count()),
        ));
    }
    w.write_ustring("/");
    out(w.as_slice())
}

/// The signature a ZooKeeper leader writes after the snapshot of a SNAP sync
/// (`LearnerHandler.run`), and a learner checks (`Learner.syncWithLeader`).
pub const SNAP_SYNC_SIGNATURE: &str = "BenWasHere";

/// What a leader writes right after a SNAP packet, as ZooKeeper 3.8's `LearnerHandler` does:
/// `ZKDatabase.serializeSnapshot` (sessions, ACL cache, nodes, "/"; no file header, no checksum
/// seal, no digest section) and then the ustring "BenWasHere". Decoded by [`SnapshotBodyDecoder`]
/// followed by a check of the signature.
pub fn encode_snap_sync(tree: &DataTree, sessions: &[(i64, i32)]) -> Vec<u8> {
    let mut out = Vec::new();
    write_sessions_and_tree(
        &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        },
        tree,
        sessions,
    )
    .expect("a Vec takes every write; only a tree whose child counts are broken fails");
    let mut w = Writer::new();
    w.write_ustring(SNAP_SYNC_SIGNATURE);
    out.extend_from_slice(w.as_slice());
    out
}

/// Sessions and nodes as `SerializeUtils.deserializeSnapshot` reads them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotBody {
    /// (session id, timeout ms), in stream order.
    pub sessions: Vec<(i64, i32)>,
    /// Nodes in stream order; the root has path "". `children` is empty (rebuilt on load).
    /// Each path is shared as soon as it is read, so the decoder's string is freed (and reused by
    /// the next node's) before the next node is read.
    pub nodes: Vec<(Arc<str>, Znode)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyStage {
    SessionCount,
    Sessions(u32),
    AclCount,
    Acls(u32),
    Nodes,
    Done,
}

/// Incremental decoder of the sessions-and-tree part of a snapshot ([`write_sessions_and_tree`]'s
/// output), for a snapshot file held in memory and for a SNAP sync read off a socket. Each item
/// (a session, an ACL cache entry, a node) is decoded whole or not at all, so a caller can feed the
/// bytes it has, drop what was used, and feed more later. Every string and buffer is bounded by the
/// decoder's field limit; an item that does not fit is an error, never a large allocation.
#[derive(Debug)]
pub struct SnapshotBodyDecoder {
    stage: BodyStage,
    max_field: usize,
    acls: HashMap<i64, Arc<[Acl]>>,
    body: SnapshotBody,
    /// Bytes consumed so far (for error offsets).
    consumed: u64,
}

impl SnapshotBodyDecoder {
    /// A decoder whose strings and buffers may be at most `max_field` bytes.
    pub fn new(max_field: usize) -> Self {
        SnapshotBodyDecoder {
            stage: BodyStage::SessionCount,
            max_field,
            acls: HashMap::new(),
            body: SnapshotBody::default(),
            consumed: 0,
        }
    }

    /// Whether the "/" terminator was read.
    pub fn is_done(&self) -> bool {
        self.stage == BodyStage::Done
    }

    /// Bytes consumed so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Decodes whole items from the front of `buf` and returns how many bytes they used. Stops at
    /// the "/" terminator (then `is_done`) or before an incomplete item (call again with those
    /// bytes and more). An error is final: the stream is not a snapshot.
    pub fn feed(&mut self, buf: &[u8]) -> Result<usize, String> {
        let mut r = Reader::with_max_len(buf, self.max_field);
        loop {
            let start = r.position();
            match self.item(&mut r) {
                Ok(true) => {}
                Ok(false) => break,
                Err(warden_proto::DecodeError::Incomplete { .. }) => {
                    self.consumed += start as u64;
                    return Ok(start);
                }
                Err(e) => return Err(format!("at offset {}: {e}", self.consumed + start as u64)),
            }
        }
        self.consumed += r.position() as u64;
        Ok(r.position())
    }

    /// Decodes one item; `Ok(false)` once done. Nothing is kept from an item that fails.
    fn item(&mut self, r: &mut Reader<'_>) -> Result<bool, warden_proto::DecodeError> {
        match self.stage {
            BodyStage::SessionCount => {
                // Java reads `while (count > 0)`: a negative count means none.
                self.stage = BodyStage::Sessions(u32::try_from(r.read_i32()?).unwrap_or(0));
            }
            BodyStage::Sessions(0) => self.stage = BodyStage::AclCount,
            BodyStage::Sessions(n) => {
                let id = r.read_i64()?;
                let timeout = r.read_i32()?;
                self.body.sessions.push((id, timeout));
                self.stage = BodyStage::Sessions(n - 1);
            }
            BodyStage::AclCount => self.stage = BodyStage::Acls(u32::try_from(r.read_i32()?).unwrap_or(0)),
            BodyStage::Acls(0) => self.stage = BodyStage::Nodes,
            BodyStage::Acls(n) => {
                let key = r.read_i64()?;
                let list: Vec<Acl> = r.read_vec()?;
                // One shared list per key, so nodes with the same ACL share its allocation.
                self.acls.insert(key, list.into());
                self.stage = BodyStage::Acls(n - 1);
            }
            BodyStage::Nodes => {
                let path = r.read_ustring()?;
                if path == "/" {
                    self.stage = BodyStage::Done;
                    return Ok(true);
                }
                let data = r.read_buffer()?;
                let key = r.read_i64()?;
                let stat = StatPersisted::decode(r)?;
                let acl = if key == OPEN_ACL_KEY {
                    warden_tree::open_acl()
                } else {
                    self.acls
                        .get(&key)
                        .cloned()
                        .ok_or(warden_proto::DecodeError::Invalid("ACL key not in the ACL cache"))?
                };
                self.body.nodes.push((path.into(), Znode::new(data.map(Vec::into_boxed_slice), acl, stat)));
            }
            BodyStage::Done => return Ok(false),
        }
        Ok(true)
    }

    /// The decoded sessions and nodes; an error unless the "/" terminator was read.
    pub fn finish(self) -> Result<SnapshotBody, String> {
        match self.stage {
            BodyStage::Done => Ok(self.body),
            stage => Err(format!("snapshot ends early (at offset {}, reading {stage:?})", self.consumed)),
        }
    }
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).expect("count exceeds i32")
}

/// A stream that keeps the running Adler32 of what passed through (`CheckedOutputStream`).
struct Checked<W: Write> {
    inner: W,
    adler: simd_adler32::Adler32,
}

impl<W: Write> Checked<W> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.adler.write(b);
        self.inner.write_all(b)
    }

    /// `SnapStream.sealStream`: long checksum of everything so far, then ustring "/".
    fn seal(&mut self) -> io::Result<()> {
        let mut w = Writer::new();
        w.write_i64(i64::from(self.adler.finish()));
        w.write_ustring("/");
        self.put(w.as_slice())
    }
}

/// A writer that reports how long each write into `inner` took.
struct Timed<'a, W: Write> {
    inner: W,
    pace: &'a mut dyn FnMut(Duration),
}

impl<W: Write> Write for Timed<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let started = Instant::now();
        let written = self.inner.write(buf);
        (self.pace)(started.elapsed());
        written
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

type FileOut = Box<dyn FsFile>;

enum Sink {
    Plain(FileOut),
    Gzip(flate2::write::GzEncoder<FileOut>),
    Snappy(SnappyJavaWriter<FileOut>),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
            Sink::Snappy(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
            Sink::Snappy(w) => w.flush(),
        }
    }
}

impl Sink {
    fn finish(self) -> io::Result<FileOut> {
        match self {
            Sink::Plain(w) => Ok(w),
            Sink::Gzip(w) => w.finish(),
            Sink::Snappy(w) => w.finish(),
        }
    }
}

/// snappy-java's `SnappyOutputStream` framing: 16-byte header (magic, int version 1, int
/// compatible version 1), then blocks of (int compressed length, raw snappy block).
struct SnappyJavaWriter<W: Write> {
    inner: W,
    pending: Vec<u8>,
    header_done: bool,
}

impl<W: Write> SnappyJavaWriter<W> {
    fn new(inner: W) -> Self {
        Self { inner, pending: Vec::with_capacity(SNAPPY_BLOCK), header_done: false }
    }

    fn write_block(&mut self) -> io::Result<()> {
        if !self.header_done {
            self.inner.write_all(&SNAPPY_MAGIC)?;
            self.inner.write_all(&1i32.to_be_bytes())?;
            self.inner.write_all(&1i32.to_be_bytes())?;
            self.header_done = true;
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let block = snap::raw::Encoder::new().compress_vec(&self.pending).map_err(io::Error::other)?;
        self.inner.write_all(&len_i32(block.len()).to_be_bytes())?;
        self.inner.write_all(&block)?;
        self.pending.clear();
        Ok(())
    }

    fn finish(mut self) -> io::Result<W> {
        self.write_block()?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for SnappyJavaWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(SNAPPY_BLOCK - self.pending.len());
        self.pending.extend_from_slice(&buf[..n]);
        if self.pending.len() == SNAPPY_BLOCK {
            self.write_block()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The most a snappy block expands: its densest element, a copy with a 2-byte offset, is 3
/// bytes for up to 64 (RFC-less but fixed by the format: `snappy/format_description.txt`).
const SNAPPY_MAX_EXPANSION: usize = 22;

/// Decodes snappy-java stream framing (possibly several concatenated streams).
fn snappy_java_decode(mut buf: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut dec = snap::raw::Decoder::new();
    while !buf.is_empty() {
        if buf.len() >= 16 && buf[..8] == SNAPPY_MAGIC {
            buf = &buf[16..];
            continue;
        }
        if buf.len() < 4 {
            return Err("truncated snappy block length".into());
        }
        let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let len = usize::try_from(len).map_err(|_| format!("bad snappy block length {len}"))?;
        let block = buf.get(4..4 + len).ok_or("truncated snappy block")?;
        // `decompress_vec` allocates the length the block's header claims before it reads a byte
        // more; a claim no block of this size can expand to is refused first.
        let claimed = snap::raw::decompress_len(block).map_err(|e| format!("snappy: {e}"))?;
        if claimed > block.len().saturating_mul(SNAPPY_MAX_EXPANSION) {
            return Err(format!("snappy block of {} bytes claims {claimed} bytes uncompressed", block.len()));
        }
        out.extend(dec.decompress_vec(block).map_err(|e| format!("snappy: {e}"))?);
        buf = &buf[4 + len..];
    }
    Ok(out)
}

/// Reads and verifies a snapshot file on `fs` (`&RealFs` for a file on disk; plain, `.gz` or
/// `.snappy` by extension): header, every node, and each checksum seal. The zxid comes from the
/// file name, as in ZooKeeper.
pub fn read_snapshot(fs: &dyn Fs, path: &Path) -> Result<Snapshot, StorageError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let zxid = zxid_from_name(name, "snapshot").ok_or_else(|| corrupt(path, "file name is not snapshot.<hex zxid>"))?;
    let raw = fs.read(path).map_err(StorageError::io("read", path))?;
    let bytes = decompress(Compression::of_file_name(name), raw).map_err(|r| corrupt(path, r))?;
    decode_snapshot(&bytes, zxid).map_err(|reason| corrupt(path, reason))
}

/// A snapshot file's bytes as [`read_snapshot`] reads them, uncompressed (plain files are
/// returned as they are).
pub fn decompress(compression: Compression, raw: Vec<u8>) -> Result<Vec<u8>, String> {
    Ok(match compression {
        Compression::None => raw,
        Compression::Gzip => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out).map_err(|e| format!("gzip: {e}"))?;
            out
        }
        Compression::Snappy => snappy_java_decode(&raw)?,
    })
}

/// A snapshot stream as the `restore` admin command receives it (no file name): the tree, its
/// sessions and the zxid it stands at, which is the lastProcessedZxid section when the stream has
/// one (ZooKeeper 3.9, Warden's `snapshot` command), else the highest zxid any node records
/// (a 3.8 snapshot file: every txn up to it is in the tree, as far as the tree can tell).
pub fn decode_snapshot_stream(bytes: &[u8]) -> Result<StreamSnapshot, String> {
    let mut snapshot = decode_snapshot(bytes, 0)?;
    let zxid = snapshot.last_processed_zxid.unwrap_or_else(|| {
        snapshot.nodes.iter().map(|(_, n)| n.stat.czxid.max(n.stat.mzxid).max(n.stat.pzxid)).max().unwrap_or(0)
    });
    snapshot.zxid = zxid;
    let mut tree = DataTree::from_snapshot(snapshot.nodes, zxid)?;
    expect_digest(&mut tree, snapshot.digest, Path::new("restore stream"));
    Ok(StreamSnapshot { tree, sessions: snapshot.sessions, zxid })
}

/// Hands a loaded snapshot's digest section to its tree, which compares it now or once the txns
/// up to it are replayed; a mismatch now is logged (and counted by the tree, for
/// `digest_mismatches_count`), as ZooKeeper does, and costs nothing else.
fn expect_digest(tree: &mut DataTree, digest: Option<ZxidDigest>, file: &Path) {
    if let Some(d) = digest {
        if !tree.expect_snapshot_digest(d) {
            tracing::error!(file = %file.display(), zxid = format_args!("{:#x}", d.zxid), expected = d.digest,
                actual = tree.zk_digest(), "snapshot digest mismatch: the tree loaded differs from the one written");
        }
    }
}

/// What [`decode_snapshot_stream`] rebuilds: the tree (standing at `zxid`) and its sessions.
#[derive(Debug)]
pub struct StreamSnapshot {
    pub tree: DataTree,
    pub sessions: Vec<(i64, i32)>,
    pub zxid: i64,
}

/// Parses an uncompressed snapshot stream; `zxid` is the one from its file name.
pub fn decode_snapshot(bytes: &[u8], zxid: i64) -> Result<Snapshot, String> {
    let mut r = Reader::with_max_len(bytes, MAX_FIELD);
    let at = |r: &Reader<'_>, e: warden_proto::DecodeError| format!("at offset {}: {e}", r.position());
    let magic = r.read_i32().map_err(|e| at(&r, e))?;
    if magic != SNAP_FILE_MAGIC {
        return Err(format!("bad magic {magic:#x}, expected {SNAP_FILE_MAGIC:#x} (\"ZKSN\")"));
    }
    let version = r.read_i32().map_err(|e| at(&r, e))?;
    if version != SNAP_FILE_VERSION {
        return Err(format!("unsupported version {version}"));
    }
    let _dbid = r.read_i64().map_err(|e| at(&r, e))?;
    let header = r.position();
    let mut body = SnapshotBodyDecoder::new(MAX_FIELD);
    body.consumed = header as u64;
    let base = header + body.feed(&bytes[header..])?;
    let SnapshotBody { sessions, nodes } = body.finish()?;
    // The sections after the nodes; offsets in messages count from the file's start.
    let mut r = Reader::with_max_len(&bytes[base..], MAX_FIELD);
    let at = |r: &Reader<'_>, e: warden_proto::DecodeError| format!("at offset {}: {e}", base + r.position());
    check_seal(bytes, base, &mut r)?;
    // Optional trailing sections, each followed by its own seal: the digest (20 bytes with
    // digestVersion >= 2) and ZooKeeper 3.9's lastProcessedZxid (8 bytes). A seal is 13 bytes.
    let mut digest = None;
    let mut last_processed_zxid = None;
    if r.remaining() > 0 && r.remaining() != 8 + 13 {
        let dzxid = r.read_i64().map_err(|e| at(&r, e))?;
        let dversion = r.read_i32().map_err(|e| at(&r, e))?;
        let dvalue = if dversion < 2 {
            let s = r.read_ustring_opt().map_err(|e| at(&r, e))?;
            match s {
                Some(s) => u64::from_str_radix(&s, 16).map_err(|_| format!("bad digest {s:?}"))? as i64,
                None => 0,
            }
        } else {
            r.read_i64().map_err(|e| at(&r, e))?
        };
        check_seal(bytes, base, &mut r)?;
        digest = Some(ZxidDigest { zxid: dzxid, version: dversion, digest: dvalue });
    }
    if r.remaining() > 0 {
        last_processed_zxid = Some(r.read_i64().map_err(|e| at(&r, e))?);
        check_seal(bytes, base, &mut r)?;
    }
    if r.remaining() > 0 {
        return Err(format!("{} unexpected bytes after the last section", r.remaining()));
    }
    Ok(Snapshot { zxid, sessions, nodes, digest, last_processed_zxid })
}

/// `SnapStream.checkSealIntegrity`: long Adler32 of all bytes before it, then the string "/".
/// `r` reads `bytes` from offset `base`.
fn check_seal(bytes: &[u8], base: usize, r: &mut Reader<'_>) -> Result<(), String> {
    let pos = base + r.position();
    let expected = i64::from(crate::log_format::adler32(&bytes[..pos]));
    let val = r.read_i64().map_err(|e| format!("at offset {pos}: checksum missing: {e}"))?;
    let slash = r.read_ustring().map_err(|e| format!("at offset {}: seal path missing: {e}", pos + 8))?;
    if val != expected {
        return Err(format!("checksum mismatch at offset {pos}: stored {val:#x}, computed {expected:#x}"));
    }
    if slash != "/" {
        return Err(format!("bad seal at offset {pos}: path {slash:?} instead of \"/\""));
    }
    Ok(())
}

fn corrupt(path: &Path, reason: impl Into<String>) -> StorageError {
    StorageError::CorruptSnapshot { file: path.to_path_buf(), reason: reason.into() }
}

/// ZooKeeper's `Util.getZxidFromName`: `<prefix>.<hex>[.anything]`.
pub(crate) fn zxid_from_name(name: &str, prefix: &str) -> Option<i64> {
    let mut parts = name.split('.');
    if parts.next()? != prefix {
        return None;
    }
    u64::from_str_radix(parts.next()?, 16).ok().map(|z| z as i64)
}

impl DataDir {
    /// `snapshot.*` files of `<dataDir>/version-2`, newest (highest zxid) first, that pass
    /// ZooKeeper's quick validity check (`SnapStream.isValidSnapshot`: a plain file ends with the
    /// seal's `int 1, '/'`; gzip and snappy files start with their magic). Checksums are verified
    /// only by `read_snapshot`.
    pub fn find_valid_snapshots(&self) -> Vec<PathBuf> {
        let fs = self.fs();
        let mut files: Vec<(i64, PathBuf)> =
            snapshot_files(fs, &self.snap_dir()).into_iter().filter(|(_, p)| quick_valid(fs, p)).collect();
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        files.into_iter().map(|(_, p)| p).collect()
    }
}

/// Every `snapshot.<hex>[.ext]` in `dir` with its zxid, unsorted.
pub(crate) fn snapshot_files(fs: &dyn Fs, dir: &Path) -> Vec<(i64, PathBuf)> {
    let Ok(names) = fs.list_dir(dir) else { return Vec::new() };
    names.into_iter().filter_map(|name| Some((zxid_from_name(&name, "snapshot")?, dir.join(name)))).collect()
}

fn quick_valid(fs: &dyn Fs, path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let starts_with = |magic: &[u8]| fs.read_at(path, 0, magic.len()).is_ok_and(|m| m == magic);
    match Compression::of_file_name(name) {
        Compression::Gzip => starts_with(&[0x1f, 0x8b]),
        Compression::Snappy => starts_with(&SNAPPY_MAGIC),
        Compression::None => {
            let Ok(len) = fs.file_len(path) else { return false };
            len >= 10 && fs.read_at(path, len - 5, 5).is_ok_and(|t| t == [0, 0, 0, 1, b'/'])
        }
    }
}

pub(crate) fn sync_dir(fs: &dyn Fs, dir: &Path) -> Result<(), StorageError> {
    fs.sync_dir(dir).map_err(StorageError::io("fsync directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(block: &[u8]) -> Vec<u8> {
        let mut v = SNAPPY_MAGIC.to_vec();
        v.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        v.extend_from_slice(&(block.len() as i32).to_be_bytes());
        v.extend_from_slice(block);
        v
    }

    #[test]
    fn a_snappy_block_claiming_more_than_it_can_expand_to_is_refused_before_allocating() {
        // Five bytes of header claiming 4 GiB - 1 (fuzz/regressions/snapshot_snappy/).
        let err = snappy_java_decode(&framed(&[0xff, 0xff, 0xff, 0xff, 0x0f])).unwrap_err();
        assert!(err.contains("claims 4294967295 bytes"), "{err}");
        // The densest block there is: 64 zero bytes from one literal and copies of 64.
        let dense = snap::raw::Encoder::new().compress_vec(&[0u8; 100_000]).unwrap();
        assert!(100_000 / dense.len() >= 20, "ratio {}", 100_000 / dense.len());
        assert_eq!(snappy_java_decode(&framed(&dense)).unwrap(), vec![0u8; 100_000]);
    }
}
