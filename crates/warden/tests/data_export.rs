//! `warden data export | import | diff` with real processes: a live Warden server's directory is
//! exported while it runs and compared with the server itself; the export is imported into a new
//! directory that Apache ZooKeeper 3.8 then serves, identical apart from the ephemeral node left
//! out; ZooKeeper's own directory, after more writes, comes back into Warden the same way.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use zk::{Acl, Acls, AuthId, CreateMode, Permission};
use zookeeper_client as zk;

fn warden_data(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warden")).arg("data").args(args).output().expect("run warden data")
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn connect(addr: &str) -> zk::Client {
    tokio::time::timeout(Duration::from_secs(20), zk::Client::connector().connect(addr))
        .await
        .expect("connect in time")
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_moves_from_warden_to_zookeeper_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_warden, port) = common::start_standalone(dir.path(), |_| {});
    let addr = format!("127.0.0.1:{port}");
    let c = connect(&addr).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    c.create("/app", b"hello", &open).await.unwrap();
    c.create("/app/empty", b"", &open).await.unwrap();
    c.create("/app/bin", &[0u8, 255, 10, 13], &open).await.unwrap();
    c.set_data("/app", b"hello again", None).await.unwrap();
    // bob:secret, digested as ZooKeeper does.
    let secret = [Acl::new(Permission::READ, AuthId::new("digest", "bob:fyVmFCwVbTJYrznoSu1koqYEYF0="))];
    c.create("/app/secret", b"s", &CreateMode::Persistent.with_acls(Acls::new(&secret))).await.unwrap();
    c.create("/eph", b"e", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().unwrap();

    // Export while the server runs, and the directory equals the live tree, Stats included.
    let export = ok(warden_data(&["export", data]), "export");
    let lines: Vec<serde_json::Value> = export.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let find = |p: &str| lines.iter().find(|v| v["path"] == p).unwrap_or_else(|| panic!("no {p} in {export}"));
    assert_eq!(find("/app")["data"], "aGVsbG8gYWdhaW4=", "base64 of the current data");
    assert_eq!(find("/app")["stat"]["version"], 1);
    assert_eq!(find("/app/secret")["acl"][0]["scheme"], "digest");
    assert_ne!(find("/eph")["stat"]["ephemeralOwner"], 0);
    // Without bob's credentials the live side cannot read /app/secret: said, and not "equal".
    let blind = warden_data(&["diff", "--stat", data, &addr]);
    assert_eq!(blind.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&blind.stdout),
        "? /app/secret (not readable by this client; give --auth)\n",
        "{}",
        String::from_utf8_lossy(&blind.stderr)
    );
    let same = warden_data(&["diff", "--stat", "--auth", "digest:bob:secret", data, &addr]);
    assert!(
        same.status.success(),
        "the directory and the live server differ: {}{}",
        String::from_utf8_lossy(&same.stdout),
        String::from_utf8_lossy(&same.stderr)
    );

    // Import into a new directory and serve it with Apache ZooKeeper.
    let export_file = dir.path().join("tree.jsonl");
    std::fs::write(&export_file, &export).unwrap();
    let zk_dir = tempfile::tempdir().unwrap();
    let imported =
        ok(warden_data(&["import", export_file.to_str().unwrap(), zk_dir.path().to_str().unwrap()]), "import");
    assert!(imported.contains("1 ephemeral znodes left out"), "{imported}");
    let again = warden_data(&["import", export_file.to_str().unwrap(), zk_dir.path().to_str().unwrap()]);
    assert!(!again.status.success(), "import refuses a directory that holds data");
    let classpath = common::oracle::zk_classpath();
    let zk_server = common::oracle::ZkProcess::start(&classpath, zk_dir.path(), &[], 3_600_000);
    let zk_addr = zk_server.addr.to_string();
    let diff = warden_data(&["diff", "--stat", "--auth", "digest:bob:secret", data, &zk_addr]);
    let text = String::from_utf8_lossy(&diff.stdout).into_owned();
    assert_eq!(diff.status.code(), Some(1), "{text}");
    // The root differs in its Stat only by the ephemeral child left out (one child fewer, one
    // more change to its children).
    assert_eq!(text, "! / (stat)\n< /eph\n", "ZooKeeper serves the imported tree, Stats and all");
    let z = connect(&zk_addr).await;
    let root = z.check_stat("/").await.unwrap().unwrap();
    let exported_root = &find("/")["stat"];
    assert_eq!(i64::from(root.num_children) + 1, exported_root["numChildren"].as_i64().unwrap());
    assert_eq!(i64::from(root.cversion) - 1, exported_root["cversion"].as_i64().unwrap());
    drop(z);
    let z = connect(&zk_addr).await;
    assert_eq!(z.get_data("/app/bin").await.unwrap().0, [0u8, 255, 10, 13]);

    // Back: ZooKeeper writes more; its directory, exported by Warden, starts a new Warden server.
    z.create("/from-zk", b"z", &open).await.unwrap();
    z.delete("/app/empty", None).await.unwrap();
    drop(z);
    drop(zk_server);
    let back = ok(warden_data(&["export", zk_dir.path().to_str().unwrap()]), "export ZooKeeper's directory");
    assert!(back.contains("\"path\":\"/from-zk\"") && !back.contains("\"path\":\"/app/empty\""), "{back}");
    let back_file = dir.path().join("back.jsonl");
    std::fs::write(&back_file, &back).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    ok(
        warden_data(&["import", back_file.to_str().unwrap(), dir2.path().join("data").to_str().unwrap()]),
        "import back",
    );
    let (_warden2, port2) = common::start_standalone(dir2.path(), |_| {});
    let port2 = format!("127.0.0.1:{port2}");
    let diff = warden_data(&["diff", "--stat", "--auth", "digest:bob:secret", zk_dir.path().to_str().unwrap(), &port2]);
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stdout));
    // And against the first server: exactly what ZooKeeper changed, and the ephemeral.
    let diff = warden_data(&["diff", "--auth", "digest:bob:secret", &addr, &port2]);
    assert_eq!(String::from_utf8_lossy(&diff.stdout), "< /app/empty\n< /eph\n> /from-zk\n");
    assert!(Path::new(&data_dir).exists());
}
