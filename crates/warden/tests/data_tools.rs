//! `warden data`: reads Apache ZooKeeper's own files (fixtures written by ZooKeeper 3.8) and
//! detects damage.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../storage/tests/fixtures").join(name)
}

fn warden(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warden")).args(args).output().expect("run warden");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn prints_a_zookeeper_log_and_snapshot() {
    let (ok, out, err) = warden(&["data", "log", fixture("zk-3.8-log.1").to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("createSession"), "{out}");
    assert!(out.contains("9 txns"), "{out}");
    let (ok, out, err) = warden(&["data", "snapshot", "--data", fixture("snapshot.29").to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.starts_with("ZNode Details (count=25):"), "{out}");
    assert!(out.contains("Session Details"), "{out}");
}

#[test]
fn verify_passes_a_good_directory_and_names_a_damaged_file() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("version-2");
    std::fs::create_dir_all(&v2).unwrap();
    std::fs::copy(fixture("snapshot.29"), v2.join("snapshot.29")).unwrap();
    std::fs::copy(fixture("zk-3.8-log.1"), v2.join("log.1")).unwrap();
    let (ok, out, err) = warden(&["data", "verify", dir.path().to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("2 files verified"), "{out}");

    let mut snap = std::fs::read(v2.join("snapshot.29")).unwrap();
    let mid = snap.len() / 2;
    snap[mid] ^= 0x10;
    std::fs::write(v2.join("snapshot.29"), snap).unwrap();
    let (ok, out, err) = warden(&["data", "verify", dir.path().to_str().unwrap()]);
    assert!(!ok, "a flipped bit must fail verification: {out}");
    assert!(err.contains("snapshot.29") && err.contains("DAMAGED"), "{err}");
}
