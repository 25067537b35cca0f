//! ZooKeeper's tree digest, computed by Warden and by Apache ZooKeeper 3.8 side by side in one
//! mixed ensemble (two ZooKeeper servers with their AdminServer, one Warden server):
//!
//! * ZooKeeper leads: every txn reaches the Warden follower with the leader's digest, which
//!   Warden checks after applying it (`digest_mismatches_count` stays 0), and the `hash` admin
//!   command lists the same digests on Warden as on both ZooKeeper servers.
//! * The ZooKeeper leader is killed and Warden leads: it proposes without digests, and the
//!   ZooKeeper follower, computing its own, still lists the same digests as Warden.
//!
//! The workload covers every txn kind: creates of each node kind, setData, setACL, deletes, a
//! multi, a failed multi, session creation and closing with ephemerals to delete.
//! Every process started is killed by its PID when its guard drops (also on failure).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use zk::{Acls, CreateMode};
use zookeeper_client as zk;

mod common;
use common::mixed::{client, four_letters, op, persistent, Kind, Mixed};
use common::{http_get, oracle};

/// The `hash` command's digests, zxid -> (digest, version).
fn hash(admin: SocketAddr) -> BTreeMap<i64, (i64, i64)> {
    let (status, body) = http_get(admin, "/commands/hash").expect("ask an AdminServer");
    assert_eq!(status, 200, "{admin}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    assert!(v["error"].is_null(), "{body}");
    let mut out = BTreeMap::new();
    for d in v["digests"].as_array().unwrap_or_else(|| panic!("no digests list: {body}")) {
        let keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["zxid", "digest", "digest_version"], "{body}");
        out.insert(d["zxid"].as_i64().unwrap(), (d["digest"].as_i64().unwrap(), d["digest_version"].as_i64().unwrap()));
    }
    out
}

fn mismatches(client: SocketAddr) -> u64 {
    let mntr = four_letters(client, "mntr").expect("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_digest_mismatches_count\t"))
        .unwrap_or_else(|| panic!("no zk_digest_mismatches_count in mntr:\n{mntr}"))
        .trim()
        .parse()
        .unwrap()
}

/// Every zxid both list has the same digest, and they share at least `min_common` of them.
fn same_digests(what: &str, a: &BTreeMap<i64, (i64, i64)>, b: &BTreeMap<i64, (i64, i64)>, min_common: usize) {
    let common: Vec<i64> = a.keys().filter(|z| b.contains_key(z)).copied().collect();
    assert!(common.len() >= min_common, "{what}: {} common zxids, want {min_common}\n{a:?}\n{b:?}", common.len());
    for z in common {
        assert_eq!(a[&z], b[&z], "{what}: digest at zxid {z:#x}");
    }
}

/// Some 350 txns through `via` of every kind, under `/w{tag}`.
async fn workload(via: SocketAddr, tag: &str) {
    let c = client(via).await;
    let root = format!("/w{tag}");
    op(c.create(&root, b"root", &persistent())).await.expect("create root");
    for i in 0..80 {
        let p = format!("{root}/n{i}");
        op(c.create(&p, format!("v{i}").as_bytes(), &persistent())).await.expect("create");
        op(c.set_data(&p, &vec![i as u8; i * 7], Some(0))).await.expect("setData");
        op(c.set_data(&p, b"", None)).await.expect("setData empty");
        if i % 3 == 0 {
            op(c.set_acl(&p, &[zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())], Some(0)))
                .await
                .expect("setACL");
        }
        if i % 2 == 0 {
            op(c.delete(&p, None)).await.expect("delete");
        }
    }
    let seq = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    for _ in 0..10 {
        op(c.create(&format!("{root}/s-"), b"s", &seq)).await.expect("sequential");
    }
    let container = CreateMode::Container.with_acls(Acls::anyone_all());
    op(c.create(&format!("{root}/c"), b"", &container)).await.expect("container");
    op(c.create(&format!("{root}/c/x"), b"x", &persistent())).await.expect("under container");
    // A multi that applies, and one that fails (an error txn).
    let mut multi = c.new_multi_writer();
    multi.add_create(&format!("{root}/m"), b"m", &persistent()).unwrap();
    multi.add_set_data(&root, b"multi", None).unwrap();
    op(multi.commit()).await.expect("multi");
    let mut failing = c.new_multi_writer();
    failing.add_create(&format!("{root}/m2"), b"m", &persistent()).unwrap();
    failing.add_set_data(&format!("{root}/absent"), b"x", None).unwrap();
    assert!(op(failing.commit()).await.is_err(), "the multi with a missing node fails");
    // Ephemerals deleted by the close of their session.
    for s in 0..5 {
        let e = client(via).await;
        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        op(e.create(&format!("{root}/e{s}"), b"e", &eph)).await.expect("ephemeral");
        op(e.create(&format!("{root}/e{s}b"), b"e", &eph)).await.expect("ephemeral");
        drop(e);
    }
    op(c.sync("/")).await.expect("sync");
}

/// Waits (up to 10 s) until the servers' `hash` lists end at the same zxid.
async fn settle(admins: &[SocketAddr]) {
    for _ in 0..100 {
        let admins = admins.to_vec();
        let newest: Vec<Option<i64>> =
            tokio::task::spawn_blocking(move || admins.iter().map(|a| hash(*a).keys().last().copied()).collect())
                .await
                .unwrap();
        if newest.windows(2).all(|w| w[0] == w[1]) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_and_zookeeper_compute_the_same_tree_digest() {
    let mut ens = Mixed::new(&[Kind::ZooKeeper, Kind::ZooKeeper, Kind::Warden]);
    ens.set_classpath(oracle::zk_admin_classpath());
    let admins: BTreeMap<u64, SocketAddr> = (1..=3u64).map(|id| (id, ens.admin_server(id))).collect();
    // ZooKeeper leads (server.2, the higher id of the first two), Warden follows.
    ens.start(1);
    ens.start(2);
    assert_eq!(ens.wait_quorum().await, 2);
    ens.start(3);
    ens.wait_roles(2).await;
    workload(ens.member(3).client, "a").await;
    workload(ens.member(1).client, "b").await;
    let all: Vec<SocketAddr> = admins.values().copied().collect();
    settle(&all).await;
    let (z1, z2, w) = tokio::task::spawn_blocking(move || (hash(all[0]), hash(all[1]), hash(all[2]))).await.unwrap();
    assert!(w.values().all(|(_, v)| *v == 2), "{w:?}");
    same_digests("ZooKeeper leader / Warden follower", &z2, &w, 4);
    same_digests("ZooKeeper follower / Warden follower", &z1, &w, 4);
    // Every txn came with the ZooKeeper leader's digest, and Warden's matched each.
    let warden_client = ens.member(3).client;
    assert_eq!(tokio::task::spawn_blocking(move || mismatches(warden_client)).await.unwrap(), 0);

    // Warden leads (server.3 beats server.1 at the same zxid); the ZooKeeper follower checks
    // nothing it is sent, and computes the same digests on its own.
    ens.kill(2);
    ens.wait_roles(3).await;
    workload(ens.member(1).client, "c").await;
    workload(ens.member(3).client, "d").await;
    let pair = vec![admins[&1], admins[&3]];
    settle(&pair).await;
    let (z1, w) = tokio::task::spawn_blocking(move || (hash(pair[0]), hash(pair[1]))).await.unwrap();
    same_digests("ZooKeeper follower / Warden leader", &z1, &w, 8);
    let clients = [ens.member(1).client, ens.member(3).client];
    let counts = tokio::task::spawn_blocking(move || clients.map(mismatches)).await.unwrap();
    assert_eq!(counts, [0, 0], "digest_mismatches_count of ZooKeeper and Warden");
}
