mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{log_files, set_data_txn, txn, txns};
use warden_proto::{Txn, TxnHeader};
use warden_storage::{DataDir, StorageError, TxnLog};

/// Opens the log of `dir` (dataDir and dataLogDir both) on the real file system.
fn open(dir: &Path, pre_alloc_bytes: u64) -> Result<(TxnLog, Vec<(TxnHeader, Txn)>), StorageError> {
    DataDir::real(dir, dir).open_log(pre_alloc_bytes)
}

fn append_all(log: &mut TxnLog, recs: &[(TxnHeader, Txn)]) {
    for (h, t) in recs {
        log.append(h, t).unwrap();
    }
    log.sync().unwrap();
}

/// A dir holding log.1 with txns 1..=n, no padding; returns (dir, file, start offset of the last record).
fn one_file_log(n: i64) -> (tempfile::TempDir, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 0).unwrap();
    append_all(&mut log, &txns(1..=n - 1));
    let file = log.current_file().unwrap().to_path_buf();
    let last_start = fs::metadata(&file).unwrap().len();
    append_all(&mut log, &txns(n..=n));
    (dir, file, last_start)
}

fn copy_dir(src: &Path) -> tempfile::TempDir {
    let dst = tempfile::tempdir().unwrap();
    fs::create_dir(dst.path().join("version-2")).unwrap();
    for f in log_files(src) {
        fs::copy(&f, dst.path().join("version-2").join(f.file_name().unwrap())).unwrap();
    }
    dst
}

fn corrupt_at(dir: &Path) -> (PathBuf, u64, String) {
    match open(dir, 0) {
        Err(StorageError::Corrupt { file, offset, reason }) => (file, offset, reason),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn round_trip_across_two_files_with_padding() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, recovered) = open(dir.path(), 1024).unwrap();
    assert!(recovered.is_empty());
    assert_eq!(log.last_zxid(), 0);
    append_all(&mut log, &txns(1..=50));
    log.roll().unwrap();
    append_all(&mut log, &txns(51..=100));
    drop(log);
    let files = log_files(dir.path());
    let names: Vec<_> = files.iter().map(|f| f.file_name().unwrap().to_str().unwrap().to_owned()).collect();
    assert_eq!(names, ["log.1", "log.33"]);
    for f in &files {
        assert_eq!(fs::metadata(f).unwrap().len() % 1024, 0, "{f:?} is padded in 1 KiB blocks");
    }
    let (log, back) = open(dir.path(), 1024).unwrap();
    assert_eq!(back, txns(1..=100));
    assert_eq!(log.last_zxid(), 100);
    assert!(log.recovered_tail().is_none());
}

#[test]
fn records_larger_than_the_write_buffer_round_trip_among_small_ones() {
    // The log buffers 64 KiB of records; a larger record grows the buffer, which gives the room
    // back once written. Small records before, between and after, synced and not.
    let big = set_data_txn;
    let mut recs = txns(1..=3);
    recs.push(big(4, 200 * 1024));
    recs.extend(txns(5..=7));
    recs.push(big(8, 70 * 1024));
    recs.push(big(9, 1024 * 1024));
    recs.extend(txns(10..=12));
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 4096).unwrap();
    for (i, (h, t)) in recs.iter().enumerate() {
        log.append(h, t).unwrap();
        if i % 4 == 3 {
            log.sync().unwrap();
        }
    }
    log.sync().unwrap();
    drop(log);
    let (log, back) = open(dir.path(), 4096).unwrap();
    assert_eq!(back, recs);
    assert_eq!(log.last_zxid(), 12);
}

/// A record is read whatever jute.maxbuffer is now: data written while the limit was higher
/// (here 5 MiB, above the 2 MiB a default ZooKeeper reader allows) is recovered, since its
/// checksum already vouches for the bytes the decoder reads.
#[test]
fn records_written_under_a_higher_jute_maxbuffer_are_recovered() {
    let mut recs = txns(1..=2);
    recs.push(set_data_txn(3, 5 << 20));
    recs.extend(txns(4..=4));
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 4096).unwrap();
    append_all(&mut log, &recs);
    drop(log);
    let (log, back) = open(dir.path(), 4096).unwrap();
    assert_eq!(back, recs);
    assert_eq!(log.last_zxid(), 4);
}

#[test]
fn reopen_and_append_continues() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 4096).unwrap();
    append_all(&mut log, &txns(1..=10));
    drop(log);
    let (mut log, back) = open(dir.path(), 4096).unwrap();
    assert_eq!(back, txns(1..=10));
    let (h, t) = txn(10);
    assert!(matches!(log.append(&h, &t), Err(StorageError::OutOfOrder { zxid: 10, last: 10 })));
    append_all(&mut log, &txns(11..=20));
    drop(log);
    let (log, back) = open(dir.path(), 4096).unwrap();
    assert_eq!(back, txns(1..=20));
    assert_eq!(log.last_zxid(), 20);
    assert_eq!(log_files(dir.path()).len(), 2, "a reopened log starts a new file, as ZooKeeper does");
}

#[test]
fn zero_padding_reads_as_end() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 1 << 20).unwrap();
    append_all(&mut log, &txns(1..=30));
    drop(log);
    let file = &log_files(dir.path())[0];
    assert_eq!(fs::metadata(file).unwrap().len(), 1 << 20);
    let (log, back) = open(dir.path(), 1 << 20).unwrap();
    assert_eq!(back, txns(1..=30));
    assert!(log.recovered_tail().is_none());
    assert_eq!(fs::metadata(file).unwrap().len(), 1 << 20, "clean padding is left alone");
}

/// Cutting the last record at every byte (optionally zero-filling back to the old length, as in a
/// preallocated file) recovers all earlier records, truncates the file, and later appends survive.
#[test]
fn torn_tail_at_every_offset_is_truncated() {
    let n = 8;
    let (src, file, last_start) = one_file_log(n);
    let len = fs::metadata(&file).unwrap().len();
    for zero_fill in [false, true] {
        for cut in last_start + 1..len {
            let dir = copy_dir(src.path());
            let f = dir.path().join("version-2/log.1");
            let mut bytes = fs::read(&f).unwrap();
            bytes.truncate(cut as usize);
            if zero_fill {
                bytes.resize(len as usize + 100, 0);
            }
            fs::write(&f, &bytes).unwrap();
            let (mut log, back) = open(dir.path(), 0).unwrap();
            assert_eq!(back, txns(1..=n - 1), "cut at {cut}");
            if bytes[last_start as usize..].iter().all(|&b| b == 0) {
                // Only the checksum's zero high bytes survived: indistinguishable from padding.
                assert!(log.recovered_tail().is_none(), "cut at {cut}");
            } else {
                assert!(log.recovered_tail().unwrap().contains(&format!("offset {last_start}")));
                assert_eq!(fs::metadata(&f).unwrap().len(), last_start);
            }
            append_all(&mut log, &txns(n..=n + 1));
            drop(log);
            let (log, back) = open(dir.path(), 0).unwrap();
            assert_eq!(back, txns(1..=n + 1));
            assert!(log.recovered_tail().is_none());
        }
    }
}

#[test]
fn flipped_bit_in_a_complete_last_record_is_corrupt_not_cut() {
    // A flipped bit in the checksum, the body or the end byte of a record that was written in full
    // is damage to a possibly acknowledged txn: refused, as ZooKeeper refuses a CRC mismatch. Only a
    // flip in the length field may not be told from a torn write; then that record is cut and reported.
    let (src, _, last_start) = one_file_log(6);
    let len = fs::metadata(src.path().join("version-2/log.1")).unwrap().len();
    let length_field = last_start + 8..last_start + 12;
    for pos in last_start..len {
        let dir = copy_dir(src.path());
        let f = dir.path().join("version-2/log.1");
        let mut bytes = fs::read(&f).unwrap();
        bytes[pos as usize] ^= 0x10;
        fs::write(&f, &bytes).unwrap();
        match open(dir.path(), 0) {
            Err(StorageError::Corrupt { offset, .. }) => {
                assert_eq!(offset, last_start, "flip at {pos}");
                assert_eq!(fs::read(&f).unwrap(), bytes, "a refused file is left as it was");
            }
            Ok((log, back)) => {
                assert!(length_field.contains(&pos), "flip at {pos} was cut as a torn write");
                assert_eq!(back, txns(1..=5));
                assert!(log.recovered_tail().is_some());
            }
            Err(e) => panic!("flip at {pos}: {e}"),
        }
    }
}

/// Offsets of each record in log.1 of a fresh n-record log.
fn record_offsets(n: i64) -> (tempfile::TempDir, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 0).unwrap();
    let mut offsets = Vec::new();
    for (h, t) in txns(1..=n) {
        log.sync().unwrap();
        offsets.push(log.current_file().map_or(16, |f| fs::metadata(f).unwrap().len()));
        log.append(&h, &t).unwrap();
    }
    log.sync().unwrap();
    offsets.push(fs::metadata(log.current_file().unwrap()).unwrap().len());
    (dir, offsets)
}

#[test]
fn flipped_bit_in_middle_record_is_corrupt() {
    let (src, offsets) = record_offsets(6);
    let (start, end) = (offsets[2], offsets[3]);
    for pos in start..end {
        let dir = copy_dir(src.path());
        let f = dir.path().join("version-2/log.1");
        let mut bytes = fs::read(&f).unwrap();
        bytes[pos as usize] ^= 0x01;
        fs::write(&f, &bytes).unwrap();
        let (file, offset, reason) = corrupt_at(dir.path());
        assert_eq!((file, offset), (f.clone(), start), "flip at {pos}: {reason}");
        assert_eq!(fs::read(&f).unwrap(), bytes, "a corrupt file is never modified");
    }
}

#[test]
fn missing_end_byte_in_middle_record_is_corrupt() {
    let (src, offsets) = record_offsets(6);
    let end_byte = offsets[3] as usize - 1;
    for remove in [false, true] {
        let dir = copy_dir(src.path());
        let f = dir.path().join("version-2/log.1");
        let mut bytes = fs::read(&f).unwrap();
        assert_eq!(bytes[end_byte], 0x42);
        if remove {
            bytes.remove(end_byte);
        } else {
            bytes[end_byte] = 0;
        }
        fs::write(&f, &bytes).unwrap();
        let (file, offset, reason) = corrupt_at(dir.path());
        assert_eq!((file, offset), (f, offsets[2]));
        assert!(reason.contains("end byte") || reason.contains("checksum"), "{reason}");
    }
}

#[test]
fn torn_tail_of_an_older_file_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 0).unwrap();
    append_all(&mut log, &txns(1..=5));
    log.roll().unwrap();
    append_all(&mut log, &txns(6..=9));
    drop(log);
    let old = dir.path().join("version-2/log.1");
    let len = fs::metadata(&old).unwrap().len();
    fs::OpenOptions::new().write(true).open(&old).unwrap().set_len(len - 3).unwrap();
    let (file, _, reason) = corrupt_at(dir.path());
    assert_eq!(file, old, "{reason}");
}

#[test]
fn zxids_must_increase_across_files() {
    let a = tempfile::tempdir().unwrap();
    let (mut log, _) = open(a.path(), 0).unwrap();
    append_all(&mut log, &txns(1..=5));
    let b = tempfile::tempdir().unwrap();
    let (mut log, _) = open(b.path(), 0).unwrap();
    append_all(&mut log, &txns(3..=4));
    fs::copy(b.path().join("version-2/log.3"), a.path().join("version-2/log.3")).unwrap();
    let (file, offset, reason) = corrupt_at(a.path());
    assert_eq!((file.file_name().unwrap().to_str().unwrap(), offset), ("log.3", 16), "{reason}");
}

#[test]
fn incomplete_header_of_newest_file_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 0).unwrap();
    append_all(&mut log, &txns(1..=3));
    drop(log);
    let torn = dir.path().join("version-2/log.4");
    fs::write(&torn, [0x5a, 0x4b, 0x4c]).unwrap();
    let (mut log, back) = open(dir.path(), 0).unwrap();
    assert_eq!(back, txns(1..=3));
    assert!(log.recovered_tail().is_some());
    assert!(!torn.exists());
    append_all(&mut log, &txns(4..=4));
    drop(log);
    assert_eq!(open(dir.path(), 0).unwrap().1, txns(1..=4));
}

/// A disk that filled while the header of a new, preallocated file was written: a prefix of the
/// header, then zeros. Every length of that prefix is a torn header, not corruption (simulator seed
/// 0x6b1349c8: the server refused to start, and the wiped disk made an amnesiac voter).
#[test]
fn a_torn_header_followed_by_preallocated_zeros_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 0).unwrap();
    append_all(&mut log, &txns(1..=3));
    drop(log);
    let header: Vec<u8> = fs::read(dir.path().join("version-2/log.1")).unwrap()[..16].to_vec();
    // From 8 bytes on the header is whole: its last 8 (dbid) are zero.
    for written in 0..8 {
        let copy = copy_dir(dir.path());
        let mut bytes = header[..written].to_vec();
        bytes.resize(4096, 0);
        let torn = copy.path().join("version-2/log.4");
        fs::write(&torn, &bytes).unwrap();
        let (log, back) = open(copy.path(), 0).unwrap_or_else(|e| panic!("{written} header bytes: {e}"));
        assert_eq!(back, txns(1..=3), "{written} header bytes");
        // (All zeros is an empty file, removed without a report.)
        assert!(written == 0 || log.recovered_tail().is_some(), "{written} header bytes");
        assert!(!torn.exists(), "{written} header bytes");
    }
    // A header byte that differs from the header is corruption, zeros after it or not.
    let mut bad = header.clone();
    bad[6] = 9;
    bad.resize(4096, 0);
    fs::write(dir.path().join("version-2/log.4"), &bad).unwrap();
    assert!(open(dir.path(), 0).is_err());
}

#[test]
fn bad_magic_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("version-2")).unwrap();
    fs::write(dir.path().join("version-2/log.1"), b"ZKSN\0\0\0\x02\0\0\0\0\0\0\0\0").unwrap();
    let (_, offset, reason) = corrupt_at(dir.path());
    assert_eq!(offset, 0, "{reason}");
}

#[test]
fn truncate_after_cuts_inside_a_file_removes_later_files_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 1024).unwrap();
    append_all(&mut log, &txns(1..=50));
    log.roll().unwrap();
    append_all(&mut log, &txns(51..=100));
    log.truncate_after(30).unwrap();
    assert_eq!(log.last_zxid(), 30);
    append_all(&mut log, &txns(31..=40));
    drop(log);
    let (log, back) = open(dir.path(), 1024).unwrap();
    assert_eq!(back, txns(1..=40));
    assert_eq!(log.last_zxid(), 40);
}

/// Recovery reads only the log files that can hold records above the snapshot: older files are
/// not opened (a damaged one does not matter, as in ZooKeeper), records at or below the snapshot
/// in the first file read are dropped, and `last_zxid` is still the newest record's.
#[test]
fn open_after_skips_files_wholly_covered_by_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 0).unwrap();
    append_all(&mut log, &txns(1..=10));
    log.roll().unwrap();
    append_all(&mut log, &txns(11..=20));
    log.roll().unwrap();
    append_all(&mut log, &txns(21..=30));
    drop(log);
    let files = log_files(dir.path());
    assert_eq!(files.len(), 3);
    fs::write(&files[0], b"garbage that is not a log file").unwrap();

    let data = DataDir::real(dir.path(), dir.path());
    let (log, back) = data.open_log_after(0, 15).unwrap();
    assert_eq!(back, txns(16..=30));
    assert_eq!(log.last_zxid(), 30);
    drop(log);
    // A snapshot at the start of a file (zxid 10, next file log.b) still skips the first file.
    let (_, back) = data.open_log_after(0, 10).unwrap();
    assert_eq!(back, txns(11..=30));
    // Everything covered: nothing returned, last_zxid from the newest file.
    let (log, back) = data.open_log_after(0, 30).unwrap();
    assert!(back.is_empty());
    assert_eq!(log.last_zxid(), 30);
    drop(log);
    // Reading from the start reaches the damaged file.
    assert!(matches!(data.open_log_after(0, 9), Err(StorageError::Corrupt { .. })));
}

/// The padding ahead of the records is written as real zeros, a megabyte ahead, so that an
/// fdatasync after the next appends does not have to allocate blocks; the content is the same
/// zero padding ZooKeeper's sparse preallocation reads as, and the file reads back the same.
#[test]
fn padding_ahead_of_the_records_is_allocated() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 64 << 20).unwrap();
    append_all(&mut log, &txns(1..=3));
    let file = log.current_file().unwrap().to_path_buf();
    let meta = fs::metadata(&file).unwrap();
    assert_eq!(meta.len(), 64 << 20, "the file has ZooKeeper's preallocated length");
    assert!(meta.blocks() * 512 >= 1 << 20, "only {} bytes allocated", meta.blocks() * 512);
    assert!(meta.blocks() * 512 < 4 << 20, "{} bytes allocated: more than the window ahead", meta.blocks() * 512);
    let bytes = fs::read(&file).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap();
    assert!(end < 4096, "records end near the start, zeros after");
    drop(log);
    let (_, back) = open(dir.path(), 64 << 20).unwrap();
    assert_eq!(back, txns(1..=3));
}

/// Under load (fdatasyncs of many records) the padding stays sparse, as ZooKeeper's does: writing
/// zeros ahead would double what the disk writes. Once syncs are small again (a record or a few),
/// the zeros ahead resume.
#[test]
fn padding_ahead_stays_sparse_while_syncs_are_large() {
    use std::os::unix::fs::MetadataExt;
    let record = |z: i64| set_data_txn(z, 4096);
    let allocated = |file: &Path| fs::metadata(file).unwrap().blocks() * 512;
    let records_end = |file: &Path| fs::read(file).unwrap().iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = open(dir.path(), 64 << 20).unwrap();
    // The first sync is small: the megabyte ahead is zeroed.
    append_all(&mut log, &[record(1)]);
    let file = log.current_file().unwrap().to_path_buf();
    assert!(allocated(&file) >= 1 << 20, "after a small sync, {} bytes allocated", allocated(&file));
    // Syncs of 64 records (256 KiB): past the zeroed megabyte, nothing is allocated ahead.
    let mut z = 2;
    for _ in 0..12 {
        let batch: Vec<_> = (z..z + 64).map(record).collect();
        append_all(&mut log, &batch);
        z += 64;
    }
    assert_eq!(fs::metadata(&file).unwrap().len(), 64 << 20, "the file keeps its preallocated length");
    let end = records_end(&file);
    assert!(end > 3 << 20, "records end at {end}");
    assert!(allocated(&file) < end + (64 << 10), "{} bytes allocated for {end} bytes of records", allocated(&file));
    // Small syncs again: zeros ahead resume a megabyte past the records.
    for _ in 0..3 {
        append_all(&mut log, &[record(z)]);
        z += 1;
    }
    let end = records_end(&file);
    assert!(
        allocated(&file) >= end + (1 << 20) - (8 << 10),
        "{} bytes allocated for {end} bytes of records",
        allocated(&file)
    );
    drop(log);
    let (_, back) = open(dir.path(), 64 << 20).unwrap();
    assert_eq!(back, (1..z).map(record).collect::<Vec<_>>());
}

/// `load_read_only` (`warden data export` / `diff` beside a running server) gives the tree that
/// recovery would, and leaves the files as they were: a torn last record stays on disk (the
/// records before it are used), and nothing is created in a directory without a log.
#[test]
fn a_read_only_load_sees_what_recovery_sees_and_changes_nothing() {
    let n = 6;
    let (dir, file, last_start) = one_file_log(n);
    let mut bytes = fs::read(&file).unwrap();
    bytes.truncate(last_start as usize + 3);
    fs::write(&file, &bytes).unwrap();
    let data = DataDir::real(dir.path(), dir.path());
    let (tree, _) = data.load_read_only().unwrap();
    assert_eq!(tree.last_processed_zxid(), n - 1, "the records before the torn one");
    assert_eq!(fs::read(&file).unwrap(), bytes, "the torn tail is left for the server's own recovery");
    let recovered = data.recover(0).unwrap();
    assert_eq!(recovered.tree.last_processed_zxid(), tree.last_processed_zxid());
    assert_eq!(recovered.tree.paths(), tree.paths());

    let empty = tempfile::tempdir().unwrap();
    let (tree, sessions) = DataDir::real(empty.path(), empty.path()).load_read_only().unwrap();
    assert_eq!((tree.last_processed_zxid(), sessions.len()), (0, 0));
    assert!(!empty.path().join("version-2").exists(), "nothing created");
}
