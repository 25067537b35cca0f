//! Interop with Apache ZooKeeper 3.8's txn log. The fixture was written by ZooKeeper itself
//! (tests/zk-interop.sh; zero padding cut off). Its records carry a TxnDigest, which is ignored.

mod common;

use std::fs;
use std::path::Path;

use warden_proto::data::Acl;
use warden_proto::Txn;
use warden_storage::DataDir;

const FIXTURE: &str = "tests/fixtures/zk-3.8-log.1";
const SESSION: i64 = 0x1000010011a0000;

fn create(path: &str, data: &[u8], ephemeral: bool, parent_cversion: i32) -> Txn {
    Txn::Create { path: path.into(), data: Some(data.to_vec()), acl: Acl::open_unsafe(), ephemeral, parent_cversion }
}

fn expected() -> Vec<Txn> {
    vec![
        Txn::CreateSession { timeout_ms: 10_000 },
        create("/a", b"hello", false, 1),
        create("/a/eph", b"e", true, 1),
        create("/a/seq-0000000001", b"s", false, 2),
        Txn::SetData { path: "/a".into(), data: Some(b"world".to_vec().into()), version: 1 },
        create("/b", b"", false, 2),
        Txn::Delete { path: "/b".into() },
        Txn::Multi(vec![
            create("/m", b"m1", false, 3),
            Txn::SetData { path: "/a".into(), data: Some(b"in-multi".to_vec().into()), version: 2 },
            // ZooKeeper logs CheckVersionTxn with the version incremented (checkAndIncVersion).
            Txn::Check { path: "/a".into(), version: 3 },
        ]),
        Txn::CloseSession { paths_to_delete: vec!["/a/eph".into()] },
    ]
}

fn open_copy(log_file: &Path) -> (tempfile::TempDir, Vec<(warden_proto::TxnHeader, Txn)>) {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("version-2")).unwrap();
    fs::copy(log_file, dir.path().join("version-2/log.1")).unwrap();
    let (log, recs) = DataDir::real(dir.path(), dir.path()).open_log(0).unwrap();
    assert!(log.recovered_tail().is_none());
    (dir, recs)
}

#[test]
fn decodes_zookeeper_written_log() {
    let (_dir, recs) = open_copy(Path::new(FIXTURE));
    let txns: Vec<Txn> = recs.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(txns, expected());
    for (i, (h, t)) in recs.iter().enumerate() {
        assert_eq!(h.zxid, i as i64 + 1);
        assert_eq!(h.client_id, SESSION);
        assert_eq!(h.cxid, i as i32);
        assert_eq!(h.txn_type, t.op().code());
    }
}

/// Runs the script's first half against a live ZooKeeper when `WARDEN_ZK_LOG` names a fresh log.
#[test]
#[ignore = "needs a log from a live ZooKeeper: tests/zk-interop.sh, then WARDEN_ZK_LOG=... --ignored"]
fn decodes_fresh_zookeeper_log() {
    let path = std::env::var("WARDEN_ZK_LOG").expect("WARDEN_ZK_LOG names a log written by tests/zk-interop.sh");
    let (_dir, recs) = open_copy(Path::new(&path));
    let txns: Vec<Txn> = recs.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(txns, expected());
}

/// Writes the same txns with Warden's writer (padded) into `WARDEN_LOG_OUT` for ZooKeeper's
/// TxnLogToolkit to read (tests/zk-interop.sh OUT_DIR <that file>).
#[test]
fn writes_log_for_zookeeper_if_asked() {
    let dir = match std::env::var("WARDEN_LOG_OUT") {
        Ok(d) => std::path::PathBuf::from(d),
        Err(_) => tempfile::tempdir().unwrap().keep(),
    };
    let (_zk_dir, recs) = open_copy(Path::new(FIXTURE));
    let data = DataDir::real(&dir, &dir);
    let (mut log, _) = data.open_log(64 * 1024).unwrap();
    for (h, t) in &recs {
        log.append(h, t).unwrap();
    }
    log.sync().unwrap();
    println!("wrote {}", log.current_file().unwrap().display());
    drop(log);
    assert_eq!(data.open_log(0).unwrap().1, recs);
}
