//! Halves of `tests/zk-snapshot-interop.sh`; without its environment variables they do nothing.
//! - WARDEN_ZK_DATADIR + WARDEN_ZK_DUMP: recover ZooKeeper's dataDir (its snapshot, then its
//!   log) with Warden and compare with the kazoo dump ZooKeeper served before it was stopped.
//! - WARDEN_SNAP_OUT: write Warden's sample tree as `<out>/data/version-2/snapshot.<zxid>` and
//!   the dump ZooKeeper must serve from it to `<out>/expected.dump`.

mod common;
use std::path::PathBuf;

use common::snap::{dump, sample_tree, EPH_SESSION};
use warden_storage::{read_snapshot, DataDir, RealFs, SnapshotOptions};

#[test]
#[ignore = "driven by tests/zk-snapshot-interop.sh (WARDEN_ZK_DATADIR, WARDEN_ZK_DUMP)"]
fn zookeeper_datadir_recovers_to_the_tree_zookeeper_served() {
    let (Some(dir), Some(dump_file)) = (std::env::var_os("WARDEN_ZK_DATADIR"), std::env::var_os("WARDEN_ZK_DUMP"))
    else {
        panic!("WARDEN_ZK_DATADIR and WARDEN_ZK_DUMP must be set: run tests/zk-snapshot-interop.sh");
    };
    let dir = PathBuf::from(dir);
    let data = DataDir::real(&dir, &dir);
    let snaps = data.find_valid_snapshots();
    assert!(!snaps.is_empty(), "ZooKeeper wrote no snapshot");
    for s in &snaps {
        let snap = read_snapshot(&RealFs, s).unwrap();
        eprintln!(
            "{}: zxid {:#x}, {} sessions, {} nodes, digest {:?}",
            s.display(),
            snap.zxid,
            snap.sessions.len(),
            snap.nodes.len(),
            snap.digest
        );
    }
    let r = data.recover(64 * 1024).unwrap();
    eprintln!("recovered from {:?} + {} log txns", r.snapshot, r.txns_after_snapshot.len());
    r.tree.check_invariants().unwrap();
    let expected = std::fs::read_to_string(dump_file).unwrap();
    assert_eq!(dump(&r.tree), expected);
    eprintln!("MATCH: {} nodes identical (data, ACL, Stat)", expected.lines().count());
}

#[test]
#[ignore = "driven by tests/zk-snapshot-interop.sh (WARDEN_SNAP_OUT)"]
fn write_snapshot_for_zookeeper() {
    let out =
        std::env::var_os("WARDEN_SNAP_OUT").expect("WARDEN_SNAP_OUT must be set: run tests/zk-snapshot-interop.sh");
    let out = PathBuf::from(out);
    let t = sample_tree();
    let data = DataDir::real(out.join("data"), out.join("data"));
    let p =
        data.write_snapshot(&t, &[(EPH_SESSION, 30_000)], t.last_processed_zxid(), SnapshotOptions::default()).unwrap();
    std::fs::write(out.join("expected.dump"), dump(&t)).unwrap();
    eprintln!("wrote {}", p.display());
}
