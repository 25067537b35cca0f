//! The CPU a snapshot write takes, per node: builds a tree of N nodes of 1 KiB under one parent
//! (as `warden bench --workload create` leaves it), then writes it as a snapshot five times and
//! prints the wall time and the thread's user and system CPU of each write.
//!
//! `cargo run --release -p warden-storage --example snapshot_write [N (300000)] [DIR (./snapshot-write)]`
//! DIR is removed before each write and at the end.

use warden_proto::{Acl, Txn, TxnHeader};
use warden_tree::DataTree;

/// (user, system) CPU seconds of this thread; /proc counts in USER_HZ, 100 on Linux.
fn thread_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields[i].parse::<f64>().expect("a tick count") / 100.0;
    (ticks(11), ticks(12))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(300_000, |s| s.parse().expect("N: a node count"));
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "snapshot-write".into()));
    let mut tree = DataTree::new();
    let mut hdr = TxnHeader { client_id: 1, cxid: 1, zxid: 1, time_ms: 1, txn_type: 1 };
    let create =
        |path: String, data| Txn::Create { path, data, acl: Acl::open_unsafe(), ephemeral: false, parent_cversion: -1 };
    tree.apply(&hdr, &create("/bench".into(), None));
    for i in 0..n {
        hdr.zxid += 1;
        tree.apply(&hdr, &create(format!("/bench/c-{i:010}"), Some(vec![7u8; 1024])));
    }
    for round in 0..5 {
        let _ = std::fs::remove_dir_all(&dir);
        let (u0, s0) = thread_cpu();
        let started = std::time::Instant::now();
        warden_storage::DataDir::real(&dir, &dir)
            .write_snapshot(&tree, &[], hdr.zxid, warden_storage::SnapshotOptions::default())
            .expect("snapshot written");
        let (u1, s1) = thread_cpu();
        println!(
            "write {round}: {n} nodes, wall {:.3} s, user {:.2} s, system {:.2} s, {:.2} us of CPU per node",
            started.elapsed().as_secs_f64(),
            u1 - u0,
            s1 - s0,
            (u1 - u0 + s1 - s0) * 1e6 / n as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
