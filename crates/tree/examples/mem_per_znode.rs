//! Memory per znode, measured in-process: builds a tree of N znodes (100-byte values, open ACL,
//! paths `/bench/<i/1000>/<i>` as `scripts/bench-startup` creates them) through `DataTree::apply`
//! and reports the growth of this process's VmRSS divided by N. Linux only (reads /proc).
//!
//! usage: cargo run --release -p warden-tree --example mem_per_znode -- [N] [--snapshot]
//!   N           znodes to create under /bench (default 1000000)
//!   --snapshot  build the tree with `DataTree::from_snapshot` from an owned node list instead
//!               (as a snapshot load does: decoded nodes, one shared ACL list), list freed after

use std::time::Instant;

use warden_proto::{Acl, Txn, TxnHeader};
use warden_tree::{DataTree, Znode};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
    let kb: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value");
    kb * 1024
}

fn create(t: &mut DataTree, zxid: &mut i64, path: String, data: Option<Vec<u8>>) {
    *zxid += 1;
    let hdr = TxnHeader { client_id: 0x1234, cxid: 0, zxid: *zxid, time_ms: 1_700_000_000_000 + *zxid, txn_type: 1 };
    let txn = Txn::Create { path, data, acl: Acl::open_unsafe(), ephemeral: false, parent_cversion: -1 };
    let out = t.apply(&hdr, &txn);
    assert!(matches!(out.result, warden_tree::TxnResult::Created { .. }), "{:?}", out.result);
}

fn build(n: u64) -> DataTree {
    let mut t = DataTree::new();
    let mut zxid = 0;
    create(&mut t, &mut zxid, "/bench".into(), Some(Vec::new()));
    for i in 0..n {
        if i % 1000 == 0 {
            create(&mut t, &mut zxid, format!("/bench/{}", i / 1000), Some(Vec::new()));
        }
        // A fresh 100-byte buffer per node, as a decoded txn would carry.
        let data = format!("{:0100}", i).into_bytes();
        create(&mut t, &mut zxid, format!("/bench/{}/{}", i / 1000, i), Some(data));
    }
    t
}

fn main() {
    let mut n: u64 = 1_000_000;
    let mut snapshot = false;
    for a in std::env::args().skip(1) {
        if a == "--snapshot" {
            snapshot = true;
        } else {
            n = a.parse().expect("N must be a number");
        }
    }
    println!("size_of::<Znode>() = {} B", std::mem::size_of::<Znode>());
    let before = rss_bytes();
    let start = Instant::now();
    let (tree, how) = if snapshot { (load(n), "from_snapshot") } else { (build(n), "apply") };
    let built = start.elapsed();
    let after = rss_bytes();
    println!(
        "{how}: {} znodes in {:.2?}; RSS {:.1} MiB -> {:.1} MiB; {:.0} B/znode",
        tree.znode_count(),
        built,
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after - before) as f64 / n as f64
    );
    // A clone must be O(1) and must not copy nodes.
    let c0 = rss_bytes();
    let start = Instant::now();
    let snap = tree.clone();
    println!("clone: {:.2?}, RSS +{} KiB", start.elapsed(), (rss_bytes() - c0) / 1024);
    drop(snap);
}

/// The same tree through `from_snapshot`: an owned node list as the snapshot decoder produces
/// (fresh exact-size buffers, one shared ACL list), rebuilt, then freed.
fn load(n: u64) -> DataTree {
    let acl = warden_tree::open_acl();
    let mut owned: Vec<(String, Znode)> = Vec::new();
    let mut zxid = 0;
    let mut push = |path: String, data: Vec<u8>| {
        zxid += 1;
        let stat = warden_proto::StatPersisted { czxid: zxid, mzxid: zxid, pzxid: zxid, ..Default::default() };
        owned.push((path, Znode::new(Some(data.into_boxed_slice()), acl.clone(), stat)));
    };
    push(String::new(), Vec::new());
    push("/bench".into(), Vec::new());
    for i in 0..n {
        if i % 1000 == 0 {
            push(format!("/bench/{}", i / 1000), Vec::new());
        }
        let path = format!("/bench/{}/{}", i / 1000, i);
        push(path.as_str().into(), format!("{:0100}", i).as_bytes().to_vec());
    }
    DataTree::from_snapshot(owned, 0).expect("from_snapshot")
}
