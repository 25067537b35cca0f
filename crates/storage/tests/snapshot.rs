//! Snapshot files: round trips (plain, gz, snappy), corruption, recovery, purge, and a snapshot
//! written by Apache ZooKeeper 3.8.0 (fixture).

mod common;
use std::fs;
use std::path::Path;
use std::time::Duration;

use common::snap::{dump, sample_tree, EPH_SESSION};
use warden_proto::{perms, Acl, Id, Txn, TxnHeader};
use warden_storage::{
    decode_snapshot_stream, encode_snapshot, encode_snapshot_with_last_zxid, read_snapshot, snapshot_file_name,
    Compression, DataDir, RealFs, SnapshotOptions, StorageError,
};
use warden_tree::{DataTree, ZxidDigest};

const SESSIONS: &[(i64, i32)] = &[(EPH_SESSION, 30_000), (0x2000, 4000)];

#[test]
fn round_trip_every_node_kind() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample_tree();
    let path = in_dir(dir.path()).write_snapshot(&t, SESSIONS, 0x13, SnapshotOptions::default()).unwrap();
    assert_eq!(path, dir.path().join("version-2/snapshot.13"));
    let s = read_snapshot(&RealFs, &path).unwrap();
    assert_eq!(s.zxid, 0x13);
    assert_eq!(s.sessions, SESSIONS);
    // The digest at the zxid the tree stands at, which the loaded tree matches.
    let at = t.last_processed_zxid();
    assert!(at > 0);
    assert_eq!(s.digest, Some(ZxidDigest { zxid: at, version: 2, digest: t.zk_digest() }));
    assert_eq!(s.last_processed_zxid, None);
    let (back, _) = s.into_tree(&path).unwrap();
    back.check_invariants().unwrap();
    assert_eq!((back.zk_digest(), back.digest_mismatches()), (t.zk_digest(), 0));
    assert_eq!(dump(&back), dump(&t));
    assert_eq!(back.ephemerals(EPH_SESSION), vec!["/app/eph"]);
    assert_eq!(back.node("/app/null").unwrap().data, None);
    assert_eq!(back.node("/app/empty").unwrap().data.as_deref(), Some(&[][..]));
    assert_eq!(back.quota_index().paths().cloned().collect::<Vec<_>>(), vec!["/app"]);
    assert_eq!(back.last_processed_zxid(), 0x13);
    // No temp file is left behind.
    let names: Vec<_> = fs::read_dir(dir.path().join("version-2")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec!["snapshot.13"]);
}

/// The admin `snapshot` stream carries 3.9's lastProcessedZxid section; `restore` reads the zxid
/// from it, and from a 3.8 stream (no section) takes the highest zxid a node records.
#[test]
fn admin_stream_round_trips_with_its_zxid() {
    let t = sample_tree();
    let with = encode_snapshot_with_last_zxid(&t, SESSIONS);
    let plain = encode_snapshot(&t, SESSIONS);
    assert_eq!(with.len(), plain.len() + 8 + 13, "one 8-byte section and its seal more");
    assert_eq!(&with[..plain.len()], &plain[..]);
    let back = decode_snapshot_stream(&with).unwrap();
    assert_eq!(back.zxid, t.last_processed_zxid());
    assert_eq!((back.tree.last_processed_zxid(), back.sessions.as_slice()), (back.zxid, SESSIONS));
    assert_eq!(dump(&back.tree), dump(&t));
    let from_nodes = decode_snapshot_stream(&plain).unwrap().zxid;
    assert!(from_nodes > 0 && from_nodes <= t.last_processed_zxid(), "{from_nodes:#x}");
    // A damaged stream is refused: its seal no longer matches.
    let mut bad = with.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    assert!(decode_snapshot_stream(&bad).is_err());
    assert!(decode_snapshot_stream(&with[..with.len() - 3]).is_err());
}

#[test]
fn layout_matches_zookeeper() {
    let t = sample_tree();
    let b = encode_snapshot(&t, &[(7, 5000)]);
    // FileHeader "ZKSN", version 2, dbid -1; one session.
    assert_eq!(&b[..16], &[0x5A, 0x4B, 0x53, 0x4E, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(&b[16..32], &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0x13, 0x88]);
    // ACL cache: OPEN_ACL_UNSAFE is key 1 (first used by the root), as ZooKeeper assigns it.
    assert_eq!(&b[36..44], &1i64.to_be_bytes());
    // Ends with the digest section's seal: ..., int 1, '/'.
    assert_eq!(&b[b.len() - 5..], &[0, 0, 0, 1, b'/']);
    // The first seal is the Adler32 of everything before it; the digest follows (20 bytes).
    let first_seal = b.len() - 13 - 20 - 13;
    let sum = adler(&b[..first_seal]);
    assert_eq!(&b[first_seal..first_seal + 8], &(sum as i64).to_be_bytes());
    let second = b.len() - 13;
    assert_eq!(&b[second..second + 8], &(adler(&b[..second]) as i64).to_be_bytes());
}

fn adler(b: &[u8]) -> u32 {
    // Adler-32 by definition, independent of the crate under test.
    let (mut a, mut s) = (1u32, 0u32);
    for &x in b {
        a = (a + x as u32) % 65521;
        s = (s + a) % 65521;
    }
    (s << 16) | a
}

#[test]
fn gzip_and_snappy_round_trip() {
    let t = sample_tree();
    for c in [Compression::Gzip, Compression::Snappy] {
        let dir = tempfile::tempdir().unwrap();
        let disk = in_dir(dir.path());
        let path = disk.write_snapshot(&t, SESSIONS, 0x20, SnapshotOptions { compression: c, pace: None }).unwrap();
        assert!(path.to_str().unwrap().ends_with(&snapshot_file_name(0x20, c)));
        assert_eq!(disk.find_valid_snapshots(), vec![path.clone()]);
        let back = read_snapshot(&RealFs, &path).unwrap().into_tree(&path).unwrap().0;
        assert_eq!(dump(&back), dump(&t), "{c:?}");
    }
}

#[test]
fn large_tree_round_trip_across_buffers() {
    let mut t = DataTree::new();
    for i in 0..3000i64 {
        let txn = Txn::Create {
            path: format!("/n{i:05}"),
            data: Some(vec![(i % 251) as u8; (i % 700) as usize]),
            acl: if i % 3 == 0 {
                Acl::open_unsafe()
            } else {
                vec![Acl::new(perms::READ, Id::new("ip", format!("10.0.0.{}", i % 5)))]
            },
            ephemeral: false,
            parent_cversion: -1,
        };
        t.apply(&TxnHeader { client_id: 1, cxid: 0, zxid: i + 1, time_ms: i, txn_type: 1 }, &txn);
    }
    let dir = tempfile::tempdir().unwrap();
    for c in [Compression::None, Compression::Snappy] {
        let path =
            in_dir(dir.path()).write_snapshot(&t, &[], 3000, SnapshotOptions { compression: c, pace: None }).unwrap();
        let back = read_snapshot(&RealFs, &path).unwrap().into_tree(&path).unwrap().0;
        assert_eq!(dump(&back), dump(&t));
    }
}

/// The paced writer reports the time of its writes and writes the same file as the plain one,
/// whatever the pace does (here: sleeps after every write).
#[test]
fn a_paced_snapshot_reports_its_writes_and_writes_the_same_file() {
    let t = sample_tree();
    let plain = tempfile::tempdir().unwrap();
    let paced = tempfile::tempdir().unwrap();
    let a = in_dir(plain.path()).write_snapshot(&t, SESSIONS, 0x500, SnapshotOptions::default()).unwrap();
    let (mut writes, mut took) = (0, Duration::ZERO);
    let mut pace = |d: Duration| {
        writes += 1;
        took += d;
        std::thread::sleep(Duration::from_micros(200));
    };
    let b = in_dir(paced.path())
        .write_snapshot(&t, SESSIONS, 0x500, SnapshotOptions { pace: Some(&mut pace), ..Default::default() })
        .unwrap();
    assert!(writes >= 2, "the header and the body at least: {writes} writes reported");
    assert!(took > Duration::ZERO);
    assert_eq!(a.file_name(), b.file_name());
    assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
}

#[test]
fn flipped_bit_is_a_checksum_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let disk = in_dir(dir.path());
    let path = disk.write_snapshot(&sample_tree(), SESSIONS, 0x13, SnapshotOptions::default()).unwrap();
    let mut b = fs::read(&path).unwrap();
    // Inside the data of some node (well past the header and ACL cache).
    let off = b.windows(7).position(|w| w == b"updated").unwrap();
    b[off] ^= 0x04;
    fs::write(&path, &b).unwrap();
    let err = read_snapshot(&RealFs, &path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StorageError::CorruptSnapshot { .. }), "{msg}");
    assert!(msg.contains("snapshot.13") && msg.contains("checksum mismatch"), "{msg}");
    // The quick check still passes (the tail is intact): only the full read catches it.
    assert_eq!(disk.find_valid_snapshots().len(), 1);
}

#[test]
fn truncated_snapshot_is_skipped_by_the_quick_check() {
    let dir = tempfile::tempdir().unwrap();
    let disk = in_dir(dir.path());
    let path = disk.write_snapshot(&sample_tree(), SESSIONS, 0x13, SnapshotOptions::default()).unwrap();
    let b = fs::read(&path).unwrap();
    fs::write(&path, &b[..b.len() - 40]).unwrap();
    assert!(disk.find_valid_snapshots().is_empty());
    assert!(read_snapshot(&RealFs, &path).is_err());
}

/// `dir` as both dataDir and dataLogDir, on the real file system.
fn in_dir(dir: &Path) -> DataDir {
    DataDir::real(dir, dir)
}

fn log_txns(disk: &DataDir, from: i64, to: i64) {
    let (mut log, _) = disk.open_log(64 * 1024).unwrap();
    for z in from..=to {
        // An explicit parent cversion, as ZooKeeper logs it, so a replay over a fuzzy snapshot is idempotent.
        let txn = Txn::Create {
            path: format!("/log{z}"),
            data: Some(vec![z as u8]),
            acl: Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: z as i32,
        };
        log.append(&TxnHeader { client_id: 1, cxid: 0, zxid: z, time_ms: z, txn_type: 1 }, &txn).unwrap();
    }
    log.sync().unwrap();
}

#[test]
fn recovery_uses_newest_valid_snapshot_then_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (data, logs) = (dir.path().join("data"), dir.path().join("logs"));
    let disk = DataDir::real(&data, &logs);
    // Log 1..=30; snapshots at 10 and 20 (tree state at those zxids), a corrupt one at 25.
    log_txns(&disk, 1, 30);
    let (_, all) = disk.open_log(64 * 1024).unwrap();
    let mut t = DataTree::new();
    for (h, txn) in &all {
        t.apply(h, txn);
        if h.zxid == 10 || h.zxid == 20 || h.zxid == 25 {
            disk.write_snapshot(&t, &[(5, 6000)], h.zxid, SnapshotOptions::default()).unwrap();
        }
    }
    let snap25 = data.join(format!("version-2/{}", snapshot_file_name(25, Compression::None)));
    let mut b = fs::read(&snap25).unwrap();
    let off = b.windows(5).position(|w| w == b"/log7").unwrap();
    b[off + 1] ^= 1;
    fs::write(&snap25, b).unwrap();

    let r = disk.recover(64 * 1024).unwrap();
    assert_eq!(r.snapshot_zxid, 20);
    assert_eq!(r.snapshot.as_deref(), Some(data.join("version-2/snapshot.14").as_path()));
    assert_eq!(r.txns_after_snapshot.iter().map(|(h, _)| h.zxid).collect::<Vec<_>>(), (21..=30).collect::<Vec<_>>());
    assert_eq!(r.tree.last_processed_zxid(), 30);
    assert_eq!(dump(&r.tree), dump(&t));
    assert_eq!(r.sessions, vec![(5, 6000)]);
    assert_eq!(r.log.last_zxid(), 30);
}

#[test]
fn recovery_replays_over_a_fuzzy_snapshot_and_tracks_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let disk = DataDir::real(dir.path().join("data"), dir.path().join("logs"));
    log_txns(&disk, 1, 8);
    let (_, all) = disk.open_log(64 * 1024).unwrap();
    let mut t = DataTree::new();
    for (h, txn) in &all {
        t.apply(h, txn);
    }
    // A "fuzzy" snapshot named 5 that already holds txns up to 8: replaying 6..8 must be harmless.
    disk.write_snapshot(&t, &[], 5, SnapshotOptions::default()).unwrap();
    {
        let (mut log, _) = disk.open_log(64 * 1024).unwrap();
        log.append(
            &TxnHeader { client_id: 77, cxid: 0, zxid: 9, time_ms: 9, txn_type: -10 },
            &Txn::CreateSession { timeout_ms: 9000 },
        )
        .unwrap();
        log.sync().unwrap();
    }
    let r = disk.recover(64 * 1024).unwrap();
    assert_eq!(r.snapshot_zxid, 5);
    assert_eq!(r.txns_after_snapshot.len(), 4);
    r.tree.check_invariants().unwrap();
    assert_eq!(dump(&r.tree), dump(&t));
    assert_eq!(r.sessions, vec![(77, 9000)]);
}

#[test]
fn recovery_without_snapshot_replays_whole_log_and_fails_when_all_bad() {
    let dir = tempfile::tempdir().unwrap();
    let disk = DataDir::real(dir.path().join("data"), dir.path().join("logs"));
    log_txns(&disk, 1, 5);
    let r = disk.recover(64 * 1024).unwrap();
    assert!(r.snapshot.is_none());
    assert_eq!(r.tree.children("/").unwrap(), vec!["log1", "log2", "log3", "log4", "log5", "zookeeper"]);
    drop(r);
    let p = disk.write_snapshot(&sample_tree(), &[], 3, SnapshotOptions::default()).unwrap();
    let mut b = fs::read(&p).unwrap();
    b[20] ^= 0xff;
    fs::write(&p, b).unwrap();
    let err = disk.recover(64 * 1024).unwrap_err();
    assert!(matches!(err, StorageError::NoValidSnapshot { .. }), "{err}");
    assert!(err.to_string().contains("snapshot.3"), "{err}");
}

#[test]
fn purge_keeps_newest_snapshots_and_needed_logs() {
    let dir = tempfile::tempdir().unwrap();
    let disk = in_dir(dir.path());
    let v2 = dir.path().join("version-2");
    let t = DataTree::new();
    for z in [0x10, 0x20, 0x30, 0x40, 0x50] {
        disk.write_snapshot(&t, &[], z, SnapshotOptions::default()).unwrap();
    }
    // Log files starting at these zxids (content is irrelevant to purge).
    for z in [0x1, 0x18, 0x25, 0x2f, 0x31, 0x45] {
        fs::write(v2.join(format!("log.{z:x}")), b"x").unwrap();
    }
    fs::write(v2.join("unrelated.txt"), b"x").unwrap();
    let removed = disk.purge(2).unwrap(); // at least 3 are kept
    let mut removed: Vec<String> =
        removed.iter().map(|p| p.file_name().unwrap().to_str().unwrap().to_string()).collect();
    removed.sort();
    // Oldest kept snapshot: 0x30. Newest log starting at or before it: log.2f.
    assert_eq!(removed, vec!["log.1", "log.18", "log.25", "snapshot.10", "snapshot.20"]);
    let mut left: Vec<String> =
        fs::read_dir(&v2).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, vec!["log.2f", "log.31", "log.45", "snapshot.30", "snapshot.40", "snapshot.50", "unrelated.txt"]);
    // Nothing more to do.
    assert!(disk.purge(3).unwrap().is_empty());
}

/// A snapshot written by Apache ZooKeeper 3.8.0 (Debian) during the interop script's run:
/// kazoo wrote /app (with updates), null and empty data, binary data, a sequential node, digest
/// and ip ACLs, an ephemeral, a container (zkCli create -c) and a TTL node (create -t).
#[test]
fn reads_snapshot_written_by_zookeeper() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let path = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("snapshot."))
        .expect("fixture snapshot");
    let s = read_snapshot(&RealFs, &path).unwrap();
    let t = s.clone().into_tree(&path).unwrap().0;
    t.check_invariants().unwrap();
    let node = |p: &str| t.node(p).unwrap_or_else(|| panic!("{p} missing"));
    assert_eq!(node("/app").data.as_deref(), Some(&b"updated twice"[..]));
    assert_eq!(node("/app").stat.version, 2);
    assert_eq!(node("/app/null").data, None);
    assert_eq!(node("/app/empty").data.as_deref(), Some(&[][..]));
    assert_eq!(node("/app/bin").data.as_deref(), Some(&[0, 1, 2, 255, 254][..]));
    assert!(t.children("/app").unwrap().iter().any(|c| c.starts_with("seq-")));
    assert_eq!(
        node("/secret").acl.to_vec(),
        vec![
            Acl::new(perms::ALL, Id::new("digest", "user:2Om+GBbT2q/tS6pdvACZbbm7/1A=")),
            Acl::new(perms::READ, Id::anyone()),
        ]
    );
    assert_eq!(node("/iponly").acl.to_vec(), vec![Acl::new(perms::READ | perms::WRITE, Id::new("ip", "127.0.0.1"))]);
    let eph_owner = node("/app/eph").stat.ephemeral_owner;
    assert!(eph_owner > 0);
    assert_eq!(t.ephemerals(eph_owner), vec!["/app/eph"]);
    assert!(s.sessions.iter().any(|(id, _)| *id == eph_owner));
    assert_eq!(node("/cont").stat.ephemeral_owner, i64::MIN);
    assert_eq!(node("/ttl").stat.ephemeral_owner as u64 >> 56, 0xff);
    assert_eq!(node("/zookeeper/config").acl.to_vec(), Acl::read_unsafe());
    // ZooKeeper 3.8 with digests enabled writes a real digest section. This snapshot is fuzzy:
    // the digest is the one after txn 0x2a, which the log would replay, so the tree awaits it
    // (nothing compared yet, and a snapshot of it would carry no digest).
    let d = s.digest.expect("digest section");
    assert_eq!((d.version, d.zxid, s.zxid), (2, 0x2a, 0x29));
    assert_eq!(t.digest_mismatches(), 0);
    assert_eq!(t.snapshot_digest().zxid, 0);
    assert_eq!(s.last_processed_zxid, None);
}

/// Found by the conformance suite: with one snapshot, purge removes the logs before it; if that
/// snapshot then fails the quick validity check (damaged last bytes), recovery used to replay the
/// remaining log onto an empty tree, silently losing everything the snapshot held.
#[test]
fn recovery_fails_when_the_only_snapshot_is_damaged_instead_of_starting_empty() {
    let dir = tempfile::tempdir().unwrap();
    let disk = DataDir::real(dir.path().join("data"), dir.path().join("logs"));
    log_txns(&disk, 1, 5); // log.1
    log_txns(&disk, 6, 10); // log.6
    let (_, all) = disk.open_log(64 * 1024).unwrap();
    let mut t = DataTree::new();
    for (h, txn) in &all {
        t.apply(h, txn);
    }
    let p = disk.write_snapshot(&t, &[], 10, SnapshotOptions::default()).unwrap();
    {
        let (mut log, _) = disk.open_log(64 * 1024).unwrap();
        let txn = Txn::Create {
            path: "/log11".into(),
            data: None,
            acl: Acl::open_unsafe(),
            ephemeral: false,
            parent_cversion: 11,
        };
        log.append(&TxnHeader { client_id: 1, cxid: 0, zxid: 11, time_ms: 11, txn_type: 1 }, &txn).unwrap();
        log.sync().unwrap();
    }
    assert_eq!(disk.purge(3).unwrap().len(), 1, "log.1 is purged");
    let mut b = fs::read(&p).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1;
    fs::write(&p, b).unwrap();
    let err = disk.recover(64 * 1024).unwrap_err();
    assert!(matches!(err, StorageError::NoValidSnapshot { .. }), "{err}");
    assert!(err.to_string().contains("snapshot.a"), "{err}");
}

/// A log that jumps within an epoch (a lost log file) is an error, not a silently shorter tree.
#[test]
fn recovery_fails_on_a_gap_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let disk = DataDir::real(dir.path().join("data"), &logs);
    log_txns(&disk, 1, 5);
    {
        let (mut log, _) = disk.open_log(64 * 1024).unwrap();
        log.roll().unwrap();
    }
    log_txns(&disk, 6, 9);
    let first = fs::read_dir(logs.join("version-2")).unwrap().map(|e| e.unwrap().path()).min().unwrap();
    assert!(first.ends_with("log.1"));
    disk.write_snapshot(&DataTree::new(), &[], 0, SnapshotOptions::default()).unwrap();
    disk.recover(64 * 1024).unwrap();
    fs::remove_file(&first).unwrap();
    let err = disk.recover(64 * 1024).unwrap_err();
    assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn recovery_removes_snapshots_a_crash_left_unfinished() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("version-2");
    std::fs::create_dir_all(&v2).unwrap();
    std::fs::write(v2.join(".snapshot.2a.tmp"), b"half a snapshot").unwrap();
    std::fs::write(v2.join("keep.me"), b"not ours").unwrap();
    in_dir(dir.path()).recover(64 * 1024).unwrap();
    assert!(!v2.join(".snapshot.2a.tmp").exists());
    assert!(v2.join("keep.me").exists());
}
