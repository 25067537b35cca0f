//! `DataDir::probe_log` and `DataDir::read_log_range`: the leader's DIFF from the on-disk log.

mod common;

use std::sync::Arc;

use common::{set_data_txn, txns};
use warden_proto::{Txn, TxnHeader};
use warden_storage::{DataDir, FaultFs, TxnLog};

fn append_all(log: &mut TxnLog, recs: &[(TxnHeader, Txn)]) {
    for (h, t) in recs {
        log.append(h, t).unwrap();
    }
    log.sync().unwrap();
}

/// Reads the whole range in chunks of about `chunk` bytes; the zxids and the chunk sizes.
fn read_all(dir: &DataDir, after: i64, upto: i64, chunk: usize) -> Result<(Vec<i64>, Vec<usize>), String> {
    let mut range = dir.read_log_range(after, upto).map_err(|e| e.to_string())?;
    let (mut zxids, mut sizes) = (Vec::new(), Vec::new());
    loop {
        let c = range.next_chunk(chunk).map_err(|e| e.to_string())?;
        if c.is_empty() {
            return Ok((zxids, sizes));
        }
        sizes.push(c.len());
        zxids.extend(c.iter().map(|(h, _)| h.zxid));
    }
}

/// Three log files on the real file system: 1..=100, 101..=250 and 251..=300 (padded).
fn three_files(dir: &std::path::Path) -> DataDir {
    let data = DataDir::real(dir, dir);
    let (mut log, _) = data.open_log(4096).unwrap();
    append_all(&mut log, &txns(1..=100));
    log.roll().unwrap();
    append_all(&mut log, &txns(101..=250));
    log.roll().unwrap();
    append_all(&mut log, &txns(251..=300));
    data
}

#[test]
fn a_range_spanning_several_files_is_read_in_order_in_bounded_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let data = three_files(tmp.path());
    let (zxids, sizes) = read_all(&data, 42, 280, 2048).unwrap();
    assert_eq!(zxids, (43..=280).collect::<Vec<_>>());
    assert!(sizes.len() > 3, "read in several chunks: {sizes:?}");
    // From the very start, and a range that ends exactly at a file's last record.
    assert_eq!(read_all(&data, 0, 100, 1 << 20).unwrap().0, (1..=100).collect::<Vec<_>>());
    assert_eq!(read_all(&data, 100, 250, 1 << 20).unwrap().0, (101..=250).collect::<Vec<_>>());
    // An empty range.
    assert!(read_all(&data, 250, 250, 1 << 20).unwrap().0.is_empty());
}

#[test]
fn a_range_beyond_the_log_or_over_a_purged_file_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let data = three_files(tmp.path());
    let err = read_all(&data, 200, 400, 1 << 20).unwrap_err();
    assert!(err.contains("ends at 0x12c"), "{err}");
    // The middle file purged: the records after 100 jump to 251, a hole.
    std::fs::remove_file(tmp.path().join("version-2").join("log.65")).unwrap();
    let err = read_all(&data, 50, 280, 1 << 20).unwrap_err();
    assert!(err.contains("does not follow"), "{err}");
}

#[test]
fn the_probe_finds_a_present_zxid_and_measures_the_later_files() {
    let tmp = tempfile::tempdir().unwrap();
    let data = three_files(tmp.path());
    let v2 = tmp.path().join("version-2");
    let len = |name: &str| std::fs::metadata(v2.join(name)).unwrap().len();
    std::fs::write(v2.join("snapshot.64"), vec![7u8; 12345]).unwrap();
    std::fs::write(v2.join("snapshot.fa"), vec![7u8; 54321]).unwrap();

    let p = data.probe_log(42).unwrap();
    assert!(p.found);
    // The file holding 42 (log.1) is not counted, as ZooKeeper's getStorageSize.
    assert_eq!(p.log_bytes, len("log.65") + len("log.fb"));
    assert_eq!(p.snapshot_bytes, 54321, "the newest snapshot");

    let p = data.probe_log(260).unwrap();
    assert!(p.found);
    assert_eq!(p.log_bytes, 0);
    // The first record of a file is found in it.
    assert!(data.probe_log(101).unwrap().found);
}

#[test]
fn the_probe_does_not_find_a_zxid_the_log_does_not_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let data = DataDir::real(tmp.path(), tmp.path());
    let (mut log, _) = data.open_log(0).unwrap();
    // Epoch 1 up to counter 10, then epoch 3 from counter 1 (a learner's (1, 20) never was here).
    let e1: Vec<_> = (1..=10).map(|c| set_data_txn((1 << 32) | c, 8)).collect();
    let e3: Vec<_> = (1..=10).map(|c| set_data_txn((3 << 32) | c, 8)).collect();
    append_all(&mut log, &e1);
    append_all(&mut log, &e3);
    assert!(!data.probe_log((1 << 32) | 20).unwrap().found);
    assert!(!data.probe_log((2 << 32) | 5).unwrap().found);
    // Older than the log, and the new-epoch zxid (3, 0), which no record has.
    assert!(!data.probe_log(5).unwrap().found);
    assert!(!data.probe_log(3 << 32).unwrap().found);
    assert!(data.probe_log((1 << 32) | 10).unwrap().found);
    // Across the epoch boundary the range is gap-free: (1,10) is followed by (3,1).
    let (zxids, _) = read_all(&data, (1 << 32) | 8, (3 << 32) | 2, 1 << 20).unwrap();
    assert_eq!(zxids, vec![(1 << 32) | 9, (1 << 32) | 10, (3 << 32) | 1, (3 << 32) | 2]);
}

#[test]
fn works_on_the_fault_injecting_file_system_and_with_no_log() {
    let fs = Arc::new(FaultFs::new());
    let data = DataDir::with_fs(fs, "/d", "/d");
    assert!(data.probe_log(5).map_or(true, |p| !p.found), "no log at all: not found (or an error, also SNAP)");
    let (mut log, _) = data.open_log(1024).unwrap();
    append_all(&mut log, &txns(1..=30));
    log.roll().unwrap();
    append_all(&mut log, &txns(31..=60));
    assert!(data.probe_log(10).unwrap().found);
    assert_eq!(read_all(&data, 10, 45, 100).unwrap().0, (11..=45).collect::<Vec<_>>());
}
