//! The file-system operations storage needs, behind a small trait: `RealFs` (std::fs) and
//! `FaultFs` (in memory, for tests and the simulator), which models what a crash keeps and can
//! inject faults: failing fsync, ENOSPC, flipped bits, truncation.
//!
//! FaultFs's durability model. Each file (inode) has a durable content, as of its last
//! `sync_data`/`sync_all`, and a volatile content, what processes read. Each directory entry
//! change (create, rename, remove) is pending until `sync_dir` of its directory. `crash(seed)`
//! returns the state a reboot would find: a random prefix (in order) of the pending entry
//! changes has reached the disk, and each file holds its durable content overwritten by a random
//! prefix of its un-synced changes (a torn write). Directories are created durably at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// What storage does to files and directories.
pub trait Fs: Send + Sync + Debug {
    /// Creates `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the entries of `dir`, unsorted; names that are not UTF-8 are left out.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The length of a file.
    fn file_len(&self, path: &Path) -> io::Result<u64>;
    /// Exactly `len` bytes at `offset` (`UnexpectedEof` if the file is shorter).
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Creates `path`, or truncates it if it exists; writes start at offset 0.
    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// As `create`, for one long sequential write that is synced once at the end (a snapshot).
    /// The real file system writes such a file around the page cache (`O_DIRECT`), which the
    /// bytes would only pass through on their way to the disk; where the file system refuses
    /// that, through the page cache with the disk writes started every megabyte. By default it
    /// is `create`.
    fn create_streamed(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.create(path)
    }
    /// Opens an existing file for writing (at offset 0) without truncating it.
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Renames a file, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the creations, renames and removals of entries of `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// A file open for writing: sequential writes from its cursor (`Write`), plus length changes and
/// syncs.
pub trait FsFile: Write + Send + Debug {
    /// Truncates or extends (with zeros) the file; the cursor does not move.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// fdatasync: the content is durable.
    fn sync_data(&mut self) -> io::Result<()>;
    /// fsync: the content and metadata are durable.
    fn sync_all(&mut self) -> io::Result<()>;
    /// Writes zeros over `offset..offset + len`, a range of the file past everything written
    /// so far, without moving the cursor. The content does not change: the range already reads as
    /// zeros. On a real disk it makes the blocks real, so that an fdatasync after later writes
    /// there only flushes data: it does not have to allocate blocks, which means committing the
    /// file system's journal and waiting for whatever else that commit orders before it. The
    /// default does nothing.
    fn fill_zeros(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
}

/// The real file system (`std::fs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile(File);

impl Write for RealFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl FsFile for RealFile {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn fill_zeros(&mut self, offset: u64, len: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        // Allocated per call (a megabyte of log apart), not a static: zeros in the binary would
        // count towards the idle server's resident memory wherever their pages get mapped.
        let zeros = vec![0u8; len.min(64 * 1024) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len() as u64);
            self.0.write_all_at(&zeros[..n as usize], offset + done)?;
            done += n;
        }
        Ok(())
    }
}

/// A streamed file written through the page cache (the file system refused `O_DIRECT`): every
/// `chunk` bytes it starts the disk writes of what was written since, and waits for those started
/// before. Without that a large snapshot sits in the page cache until its fsync, which then writes
/// hundreds of megabytes at once while every txn-log fdatasync waits behind it (ext4 commits its
/// journal in order). An error from the hint is a write error a later sync may not report again,
/// so it is returned as the write's.
#[derive(Debug)]
struct WriteBehindFile {
    file: RealFile,
    chunk: u64,
    /// Bytes written so far.
    written: u64,
    /// Where the bytes not yet handed to the disk begin.
    started: u64,
}

/// Bytes of a streamed file between write-behind hints.
const WRITE_BEHIND_CHUNK: u64 = 1 << 20;

impl WriteBehindFile {
    fn new(file: File, chunk: u64) -> Self {
        WriteBehindFile { file: RealFile(file), chunk, written: 0, started: 0 }
    }
}

impl Write for WriteBehindFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= self.chunk {
            let f = &self.file.0;
            sync_file_range(f, self.started, self.written - self.started, libc::SYNC_FILE_RANGE_WRITE)?;
            if self.started > 0 {
                sync_file_range(f, 0, self.started, libc::SYNC_FILE_RANGE_WAIT_BEFORE)?;
            }
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl FsFile for WriteBehindFile {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.file.sync_all()
    }
}

/// A file opened with `O_DIRECT`: writes go from this buffer to the disk, so each must start at
/// an aligned offset, from an aligned address, and cover whole blocks. The buffer collects the
/// stream and writes it a megabyte at a time; a sync writes the partial block at the end padded
/// with zeros, then cuts the file back to the bytes written. Writes may follow a sync: that block
/// is written again with them.
#[derive(Debug)]
struct DirectFile {
    file: File,
    path: PathBuf,
    /// False once a direct write was refused (`EINVAL`: a block size above `DIRECT_BLOCK`) and
    /// the file was opened again without `O_DIRECT`.
    direct: bool,
    /// `DIRECT_BUFFER` bytes from `start`, with slack in front to align them.
    buf: Vec<u8>,
    start: usize,
    /// Bytes held in the buffer.
    len: usize,
    /// The file offset of the buffer's first byte (a multiple of `DIRECT_BLOCK`).
    offset: u64,
}

/// The alignment of direct writes: the largest logical block size in use.
const DIRECT_BLOCK: usize = 4096;
const DIRECT_BUFFER: usize = 1 << 20;

impl DirectFile {
    fn new(file: File, path: &Path) -> Self {
        let buf = vec![0u8; DIRECT_BUFFER + DIRECT_BLOCK];
        let start = buf.as_ptr().align_offset(DIRECT_BLOCK);
        DirectFile { file, path: path.to_path_buf(), direct: true, buf, start, len: 0, offset: 0 }
    }

    /// Writes `len` bytes from the start of the buffer at `offset`.
    fn write_at(&mut self, len: usize, offset: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let data = &self.buf[self.start..self.start + len];
        match self.file.write_all_at(data, offset) {
            Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %self.path.display(), "direct write refused ({e}); writing through the page cache");
                self.file = OpenOptions::new().write(true).open(&self.path)?;
                self.direct = false;
                self.file.write_all_at(data, offset)
            }
            done => done,
        }
    }

    /// Writes the whole blocks held and keeps the partial one at the front of the buffer.
    fn write_blocks(&mut self) -> io::Result<()> {
        let whole = self.len - self.len % DIRECT_BLOCK;
        if whole == 0 {
            return Ok(());
        }
        self.write_at(whole, self.offset)?;
        self.buf.copy_within(self.start + whole..self.start + self.len, self.start);
        self.len -= whole;
        self.offset += whole as u64;
        Ok(())
    }

    /// Writes everything held, the last block padded with zeros, and sets the file's length to
    /// the end of the stream. What is held stays held.
    fn write_all_held(&mut self) -> io::Result<()> {
        self.write_blocks()?;
        if self.len > 0 {
            self.buf[self.start + self.len..self.start + DIRECT_BLOCK].fill(0);
            self.write_at(DIRECT_BLOCK, self.offset)?;
        }
        self.file.set_len(self.offset + self.len as u64)
    }
}

impl Write for DirectFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.len == DIRECT_BUFFER {
            self.write_blocks()?;
        }
        let n = data.len().min(DIRECT_BUFFER - self.len);
        let at = self.start + self.len;
        self.buf[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        Ok(n)
    }

    /// Bytes of a partial block stay in the buffer until a sync.
    fn flush(&mut self) -> io::Result<()> {
        self.write_blocks()
    }
}

impl FsFile for DirectFile {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.write_all_held()?;
        if len != self.offset + self.len as u64 {
            // Not a stream any more: the next writes would land at the wrong place.
            return Err(io::Error::new(io::ErrorKind::Unsupported, "resizing a streamed file"));
        }
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.write_all_held()?;
        self.file.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.write_all_held()?;
        self.file.sync_all()
    }
}

/// sync_file_range(2). A file system without it (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`) takes it as
/// done: the hint only spreads out the writes the final sync would do anyway.
#[allow(unsafe_code)]
fn sync_file_range(file: &File, offset: u64, len: u64, flags: libc::c_uint) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off64_t::try_from(offset), libc::off64_t::try_from(len)) else {
        return Ok(());
    };
    // SAFETY: the descriptor belongs to `file`, which outlives the call; the call reads no memory.
    let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => Ok(()),
        _ => Err(e),
    }
}

impl Fs for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        fs::metadata(path).map(|m| m.len())
    }

    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut f = File::open(path)?;
        f.seek(SeekFrom::Start(offset))?;
        let mut buf = vec![0; len];
        f.read_exact(&mut buf)?;
        Ok(buf)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let f = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(RealFile(f)))
    }

    fn create_streamed(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(path);
        match direct {
            Ok(f) => Ok(Box::new(DirectFile::new(f, path))),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let f = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
                Ok(Box::new(WriteBehindFile::new(f, WRITE_BEHIND_CHUNK)))
            }
            Err(e) => Err(e),
        }
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let f = OpenOptions::new().write(true).open(path)?;
        Ok(Box::new(RealFile(f)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// An in-memory file system that models crashes and injects faults (see the module docs).
/// Clones share the same state; `crash` returns an independent one.
#[derive(Debug, Clone, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default, Clone)]
struct State {
    dirs: BTreeSet<PathBuf>,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    /// The directory entries processes see.
    names: BTreeMap<PathBuf, u64>,
    /// The directory entries a crash keeps, before pending changes.
    durable_names: BTreeMap<PathBuf, u64>,
    /// Entry changes not yet made durable by `sync_dir`, oldest first.
    pending: Vec<NameOp>,
    /// Paths (files or directories) whose next sync fails.
    fail_sync: BTreeSet<PathBuf>,
    /// Bytes that may still be written before writes fail with ENOSPC; `None`: unlimited.
    space_left: Option<u64>,
}

#[derive(Debug, Default, Clone)]
struct Inode {
    durable: Vec<u8>,
    volatile: Vec<u8>,
}

#[derive(Debug, Clone)]
enum NameOp {
    Link(PathBuf, u64),
    Unlink(PathBuf),
    Rename(PathBuf, PathBuf, u64),
}

impl NameOp {
    fn dir(&self) -> Option<&Path> {
        match self {
            NameOp::Link(p, _) | NameOp::Unlink(p) | NameOp::Rename(_, p, _) => p.parent(),
        }
    }

    fn apply(&self, names: &mut BTreeMap<PathBuf, u64>) {
        match self {
            NameOp::Link(p, ino) => {
                names.insert(p.clone(), *ino);
            }
            NameOp::Unlink(p) => {
                names.remove(p);
            }
            NameOp::Rename(from, to, ino) => {
                names.remove(from);
                names.insert(to.clone(), *ino);
            }
        }
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{}: no such file or directory", path.display()))
}

fn injected(what: &str, path: &Path) -> io::Error {
    io::Error::other(format!("{what} (injected fault) on {}", path.display()))
}

impl State {
    fn inode(&self, path: &Path) -> io::Result<&Inode> {
        self.names.get(path).and_then(|i| self.inodes.get(i)).ok_or_else(|| not_found(path))
    }

    fn inode_mut(&mut self, path: &Path) -> io::Result<&mut Inode> {
        let ino = *self.names.get(path).ok_or_else(|| not_found(path))?;
        self.inodes.get_mut(&ino).ok_or_else(|| not_found(path))
    }

    fn check_parent(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(dir) if self.dirs.contains(dir) => Ok(()),
            _ => Err(not_found(path)),
        }
    }

    fn take_sync_fault(&mut self, path: &Path) -> io::Result<()> {
        if self.fail_sync.remove(path) {
            return Err(injected("fsync failed: EIO", path));
        }
        Ok(())
    }

    /// How many of `want` bytes may be written now.
    fn reserve(&mut self, want: usize) -> usize {
        match self.space_left.as_mut() {
            None => want,
            Some(left) => {
                let n = want.min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                n
            }
        }
    }

    fn crashed(&self, rng: &mut SplitMix) -> State {
        let mut names = self.durable_names.clone();
        let applied = rng.below(self.pending.len() + 1);
        for op in &self.pending[..applied] {
            op.apply(&mut names);
        }
        let mut inodes = HashMap::new();
        for ino in names.values() {
            if let Some(inode) = self.inodes.get(ino) {
                let content = torn(&inode.durable, &inode.volatile, rng);
                inodes.insert(*ino, Inode { durable: content.clone(), volatile: content });
            }
        }
        State {
            dirs: self.dirs.clone(),
            inodes,
            next_inode: self.next_inode,
            durable_names: names.clone(),
            names,
            ..State::default()
        }
    }
}

/// The durable content overwritten by a random prefix of the changes made since.
fn torn(durable: &[u8], volatile: &[u8], rng: &mut SplitMix) -> Vec<u8> {
    let common = common_prefix(durable, volatile);
    let keep = common + rng.below(volatile.len() - common + 1);
    let mut out = volatile[..keep].to_vec();
    // An un-synced truncation may be lost; otherwise the file keeps its durable length.
    let shrunk = volatile.len() < durable.len();
    if keep < durable.len() && (!shrunk || rng.below(2) == 0) {
        out.extend_from_slice(&durable[keep..]);
    }
    out
}

/// The length of the common prefix (chunk-wise: fast even in debug builds).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const CHUNK: usize = 4096;
    let n = a.len().min(b.len());
    let mut at = 0;
    while at + CHUNK <= n && a[at..at + CHUNK] == b[at..at + CHUNK] {
        at += CHUNK;
    }
    at + a[at..n].iter().zip(&b[at..n]).take_while(|(x, y)| x == y).count()
}

/// A tiny deterministic generator (SplitMix64), so crashes replay from their seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

impl FaultFs {
    /// An empty file system with only the root directory.
    pub fn new() -> FaultFs {
        let fs = FaultFs::default();
        fs.lock().dirs.insert(PathBuf::from("/"));
        fs
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state after a power loss now, as a new file system (this one is left as it is, for
    /// any process still writing to it). `seed` picks how much un-synced data survives.
    pub fn crash(&self, seed: u64) -> FaultFs {
        let state = self.lock().crashed(&mut SplitMix(seed));
        FaultFs { state: Arc::new(Mutex::new(state)) }
    }

    /// The next `sync_data`/`sync_all` of `path` (or `sync_dir` if it is a directory) fails
    /// with EIO; nothing becomes durable.
    pub fn fail_next_sync(&self, path: &Path) {
        self.lock().fail_sync.insert(path.to_path_buf());
    }

    /// After `bytes` more bytes have been written (over all files), writes fail with ENOSPC.
    /// `None` lifts the limit.
    pub fn set_space_left(&self, bytes: Option<u64>) {
        self.lock().space_left = bytes;
    }

    /// Flips bit `bit` (0-7) of the byte at `offset` of `path`, durably (disk corruption).
    pub fn flip_bit(&self, path: &Path, offset: u64, bit: u8) -> io::Result<()> {
        let mut st = self.lock();
        let inode = st.inode_mut(path)?;
        let mut flipped = false;
        for content in [&mut inode.durable, &mut inode.volatile] {
            if let Some(b) = usize::try_from(offset).ok().and_then(|o| content.get_mut(o)) {
                *b ^= 1 << (bit % 8);
                flipped = true;
            }
        }
        if !flipped {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "offset past the end of the file"));
        }
        Ok(())
    }

    /// Cuts `path` to `len` bytes, durably.
    pub fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut st = self.lock();
        let inode = st.inode_mut(path)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        inode.durable.truncate(len);
        inode.volatile.truncate(len);
        Ok(())
    }

    /// Every file path, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock().names.keys().cloned().collect()
    }
}

impl Fs for FaultFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        for d in dir.ancestors() {
            if st.names.contains_key(d) {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "a file is in the way"));
            }
            st.dirs.insert(d.to_path_buf());
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.lock();
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let children = st.names.keys().chain(st.dirs.iter()).filter(|p| p.parent() == Some(dir));
        Ok(children.filter_map(|p| p.file_name()?.to_str().map(String::from)).collect())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        Ok(self.lock().inode(path)?.volatile.clone())
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        Ok(self.lock().inode(path)?.volatile.len() as u64)
    }

    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let st = self.lock();
        let content = &st.inode(path)?.volatile;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let range = start.checked_add(len).and_then(|end| content.get(start..end));
        range.map(<[u8]>::to_vec).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let mut st = self.lock();
        st.check_parent(path)?;
        if let Ok(inode) = st.inode_mut(path) {
            inode.volatile.clear();
        } else {
            let ino = st.next_inode;
            st.next_inode += 1;
            st.inodes.insert(ino, Inode::default());
            st.names.insert(path.to_path_buf(), ino);
            st.pending.push(NameOp::Link(path.to_path_buf(), ino));
        }
        self.file(&st, path)
    }

    fn open_write(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let st = self.lock();
        self.file(&st, path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.check_parent(to)?;
        let ino = st.names.remove(from).ok_or_else(|| not_found(from))?;
        st.names.insert(to.to_path_buf(), ino);
        st.pending.push(NameOp::Rename(from.to_path_buf(), to.to_path_buf(), ino));
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        st.names.remove(path).ok_or_else(|| not_found(path))?;
        st.pending.push(NameOp::Unlink(path.to_path_buf()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        st.take_sync_fault(dir)?;
        let (now, later): (Vec<NameOp>, Vec<NameOp>) =
            std::mem::take(&mut st.pending).into_iter().partition(|op| op.dir() == Some(dir));
        for op in &now {
            op.apply(&mut st.durable_names);
        }
        st.pending = later;
        Ok(())
    }
}

impl FaultFs {
    fn file(&self, st: &State, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let ino = *st.names.get(path).ok_or_else(|| not_found(path))?;
        Ok(Box::new(FaultFile { state: Arc::clone(&self.state), ino, path: path.to_path_buf(), pos: 0 }))
    }
}

/// A FaultFs file handle: it follows its inode through renames.
#[derive(Debug)]
struct FaultFile {
    state: Arc<Mutex<State>>,
    ino: u64,
    path: PathBuf,
    pos: usize,
}

impl FaultFile {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut st = self.lock();
        st.take_sync_fault(&self.path)?;
        if let Some(inode) = st.inodes.get_mut(&self.ino) {
            inode.durable = inode.volatile.clone();
        }
        Ok(())
    }
}

impl Write for FaultFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut st = self.lock();
        let n = st.reserve(buf.len());
        if n == 0 && !buf.is_empty() {
            return Err(injected("no space left on device: ENOSPC", &self.path));
        }
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| not_found(&self.path))?;
        let end = self.pos + n;
        if inode.volatile.len() < end {
            inode.volatile.resize(end, 0);
        }
        inode.volatile[self.pos..end].copy_from_slice(&buf[..n]);
        drop(st);
        self.pos = end;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl FsFile for FaultFile {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        let mut st = self.lock();
        let inode = st.inodes.get_mut(&self.ino).ok_or_else(|| not_found(&self.path))?;
        inode.volatile.resize(len, 0);
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.sync()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streamed file holds exactly the bytes written, however the writes fall across blocks and
    /// buffers, after a sync and after more writes and another sync.
    #[test]
    fn streamed_file_holds_exactly_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stream");
        let mut file = RealFs.create_streamed(&path).unwrap();
        let mut expect = Vec::new();
        let sizes = [1, 4095, 4097, DIRECT_BUFFER, 3, 2 * DIRECT_BUFFER + 7, 0, 100_000];
        for (i, &n) in sizes.iter().enumerate() {
            let chunk: Vec<u8> = (0..n).map(|j| (i * 31 + j * 7) as u8 | 1).collect();
            file.write_all(&chunk).unwrap();
            expect.extend_from_slice(&chunk);
        }
        file.sync_all().unwrap();
        assert_eq!(fs::read(&path).unwrap(), expect);
        file.write_all(b"more after the sync").unwrap();
        expect.extend_from_slice(b"more after the sync");
        file.sync_data().unwrap();
        assert_eq!(fs::read(&path).unwrap(), expect);
    }

    /// Zero filling and write-behind hints change nothing a reader sees.
    #[test]
    fn hints_keep_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hinted");
        // A small chunk, so that the writes below pass hints (the first at 4 KiB).
        let mut file = WriteBehindFile::new(File::create(&path).unwrap(), 4096);
        file.write_all(&[7; 10_000]).unwrap();
        file.set_len(1 << 20).unwrap();
        file.file.fill_zeros(10_000, 500_000).unwrap();
        file.write_all(&[9; 5]).unwrap();
        file.sync_data().unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 1 << 20);
        assert!(bytes[..10_000].iter().all(|&b| b == 7));
        assert_eq!(&bytes[10_000..10_005], &[9; 5]);
        assert!(bytes[10_005..].iter().all(|&b| b == 0));
    }
}
