//! The snapshot stream of a SNAP sync (ZooKeeper 3.8's `LearnerHandler.run` writes
//! `ZKDatabase.serializeSnapshot` and then the string "BenWasHere"; `Learner.syncWithLeader` reads
//! it back with `deserializeSnapshot` and checks the signature). The stream is the same
//! `SerializeUtils.serializeSnapshot` output a snapshot file holds between its FileHeader and its
//! first checksum seal, so both are checked against each other and against a snapshot file
//! written by Apache ZooKeeper 3.8.0.

mod common;
use std::path::Path;

use common::snap::{dump, sample_tree, EPH_SESSION};
use warden_proto::{Reader, Writer};
use warden_storage::{
    encode_snap_sync, encode_snapshot, read_snapshot, RealFs, SnapshotBody, SnapshotBodyDecoder, SNAP_SYNC_SIGNATURE,
};
use warden_tree::DataTree;

const SESSIONS: &[(i64, i32)] = &[(EPH_SESSION, 30_000), (0x2000, 4000)];
/// FileHeader: magic, version, dbid.
const FILE_HEADER: usize = 16;
/// A seal: long checksum, ustring "/".
const SEAL: usize = 13;
/// The empty digest section and its seal.
const DIGEST: usize = 20 + SEAL;

/// Feeds `bytes` in chunks of `chunk` bytes the way a socket reader does (keeping what was not
/// used), and returns the body and where it ended.
fn decode_chunked(bytes: &[u8], chunk: usize) -> (SnapshotBody, usize) {
    let mut d = SnapshotBodyDecoder::new(1 << 20);
    let mut buf = Vec::new();
    let mut fed = 0;
    while !d.is_done() {
        assert!(fed < bytes.len(), "stream ended before the \"/\" terminator");
        let end = (fed + chunk).min(bytes.len());
        buf.extend_from_slice(&bytes[fed..end]);
        fed = end;
        let used = d.feed(&buf).expect("valid stream");
        buf.drain(..used);
    }
    let end = fed - buf.len();
    assert_eq!(d.consumed() as usize, end);
    (d.finish().unwrap(), end)
}

#[test]
fn sync_stream_is_the_file_body_then_the_signature() {
    let t = sample_tree();
    let file = encode_snapshot(&t, SESSIONS);
    let sync = encode_snap_sync(&t, SESSIONS);
    let body = &file[FILE_HEADER..file.len() - SEAL - DIGEST];
    // No FileHeader, no seal, no digest: the body, then ustring "BenWasHere".
    assert_eq!(&sync[..body.len()], body);
    let mut sig = Writer::new();
    sig.write_ustring("BenWasHere");
    assert_eq!(&sync[body.len()..], sig.as_slice());
    assert_eq!(SNAP_SYNC_SIGNATURE, "BenWasHere");
    // Starts with the session count (no "ZKSN" magic).
    assert_eq!(&sync[..4], &2i32.to_be_bytes());
}

#[test]
fn chunked_decoding_gives_back_sessions_and_tree() {
    let t = sample_tree();
    let sync = encode_snap_sync(&t, SESSIONS);
    for chunk in [1, 7, 64, 1 << 20] {
        let (body, end) = decode_chunked(&sync, chunk);
        assert_eq!(body.sessions, SESSIONS);
        let back = DataTree::from_snapshot(body.nodes, 0x42).unwrap();
        back.check_invariants().unwrap();
        assert_eq!(dump(&back), dump(&t), "chunk {chunk}");
        // What follows the terminator is the signature.
        assert_eq!(Reader::new(&sync[end..]).read_ustring().unwrap(), "BenWasHere");
    }
}

/// The body of a snapshot file written by Apache ZooKeeper 3.8.0, followed by the signature, is
/// what a ZooKeeper leader sends after SNAP (the same `serializeSnapshot` call); it decodes to the
/// same sessions and nodes as the file.
#[test]
fn decodes_the_body_zookeeper_writes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let path = dir.join("snapshot.29");
    let file = std::fs::read(&path).unwrap();
    let s = read_snapshot(&RealFs, &path).unwrap();
    let mut stream = file[FILE_HEADER..].to_vec();
    let (body, end) = decode_chunked(&stream, 5);
    stream.truncate(end);
    let mut sig = Writer::new();
    sig.write_ustring(SNAP_SYNC_SIGNATURE);
    stream.extend_from_slice(sig.as_slice());
    let (again, end2) = decode_chunked(&stream, 3);
    assert_eq!(end2, end);
    assert_eq!(again, body);
    assert_eq!(body.sessions, s.sessions);
    assert_eq!(body.nodes, s.nodes);
    // The ZooKeeper file's body ends right before its first seal: checksum then "/".
    assert_eq!(&file[FILE_HEADER + end + 8..FILE_HEADER + end + SEAL], &[0, 0, 0, 1, b'/']);
}

#[test]
fn garbage_is_an_error_without_a_large_allocation() {
    // No sessions, no ACLs, then a path of 2 GiB: refused at once, not awaited.
    let mut w = Writer::new();
    w.write_i32(0);
    w.write_i32(0);
    w.write_i32(i32::MAX);
    let mut d = SnapshotBodyDecoder::new(1 << 20);
    let err = d.feed(w.as_slice()).unwrap_err();
    assert!(err.contains("at offset 8"), "{err}");
    // A node whose ACL key is not in the cache.
    let mut w = Writer::new();
    w.write_i32(0);
    w.write_i32(0);
    w.write_ustring("");
    w.write_buffer(None);
    w.write_i64(9);
    warden_proto::Record::encode(&warden_proto::StatPersisted::default(), &mut w);
    let err = SnapshotBodyDecoder::new(1 << 20).feed(w.as_slice()).unwrap_err();
    assert!(err.contains("ACL"), "{err}");
}

#[test]
fn a_truncated_stream_is_incomplete_not_done() {
    let sync = encode_snap_sync(&sample_tree(), SESSIONS);
    let cut = sync.len() / 2;
    let mut d = SnapshotBodyDecoder::new(1 << 20);
    let used = d.feed(&sync[..cut]).unwrap();
    assert!(used <= cut && used > 0);
    assert!(!d.is_done());
    let err = d.finish().unwrap_err();
    assert!(err.contains("ends early"), "{err}");
}
