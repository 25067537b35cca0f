//! Mixed ensembles of `warden serve` processes and Apache ZooKeeper 3.8.0 servers (Debian package,
//! `scripts/zk-classpath`): the quorum port protocol between them, including SNAP sync in
//! ZooKeeper's own stream format (serialized sessions and tree, then "BenWasHere").
//!
//! * ZooKeeper leads, a Warden follower is synced by DIFF (PROPOSAL/COMMIT), serves the data, and
//!   forwards writes; it is killed, misses more txns than ZooKeeper keeps for DIFF
//!   (`zookeeper.commitLogCount` 500, on-disk DIFF off with `zookeeper.snapshotSizeFactor=-1`),
//!   restarts, is synced by SNAP and serves every node.
//! * Warden leads, a ZooKeeper follower misses more than Warden's 500 in-memory txns, restarts, is
//!   synced by SNAP from Warden (`snapshotSizeFactor=-1`) and serves every node on its own client
//!   port; with Warden's default factor it is synced by a DIFF read from Warden's on-disk log.
//!
//! Every process started is killed by its PID when its guard drops (also on failure).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use zk::{Acls, CreateMode};
use zookeeper_client as zk;

mod common;
use common::mixed::{check, client, op, persistent, sync_count, write_many, Kind, Mixed, OP};

/// More txns than either side keeps in memory for DIFF (500), so a server that missed them gets SNAP.
const MISSED: usize = 700;

/// Client operations through `via` (a server of one kind) seen through `other` (of the other
/// kind): an ephemeral, a multi with a create and a setData, setData and delete with versions, a data watch set on `other` fired by a write through `via`, and the
/// ephemeral gone everywhere once its session is closed.
async fn exercise(via: SocketAddr, other: SocketAddr, what: &str) {
    let c = client(via).await;
    let o = client(other).await;
    op(c.create("/ops", b"0", &persistent())).await.unwrap_or_else(|e| panic!("{what}: create /ops: {e}"));
    let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    op(c.create("/ops/eph", b"e", &eph)).await.unwrap_or_else(|e| panic!("{what}: create ephemeral: {e}"));
    let mut multi = c.new_multi_writer();
    multi.add_create("/ops/m", b"m", &persistent()).unwrap();
    multi.add_set_data("/ops", b"multi", Some(0)).unwrap();
    let results = op(multi.commit()).await.unwrap_or_else(|e| panic!("{what}: multi: {e:?}"));
    // (Through a ZooKeeper server the create's Stat is not filled: ZooKeeper 3.8 turns a create2
    // inside a multi into a plain create, ZOOKEEPER-4026.)
    match &results[..] {
        [zk::MultiWriteResult::Create { path, .. }, zk::MultiWriteResult::SetData { stat }] => {
            assert_eq!(path, "/ops/m", "{what}");
            assert_eq!(stat.version, 1, "{what}");
        }
        other => panic!("{what}: multi results {other:?}"),
    }
    op(o.sync("/")).await.unwrap();
    let (data, stat, watcher) = op(o.get_and_watch_data("/ops")).await.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!((data.as_slice(), stat.version), (&b"multi"[..], 1), "{what}: /ops after the multi");
    assert_eq!(op(o.get_data("/ops/eph")).await.expect("ephemeral").1.ephemeral_owner, c.session_id().0, "{what}");
    op(c.set_data("/ops/m", b"m2", Some(0))).await.unwrap_or_else(|e| panic!("{what}: setData: {e}"));
    op(c.set_data("/ops", b"fired", Some(1))).await.unwrap_or_else(|e| panic!("{what}: setData: {e}"));
    let event = op(watcher.changed()).await;
    assert_eq!(event.event_type, zk::EventType::NodeDataChanged, "{what}: watch on the other server");
    op(c.delete("/ops/m", Some(1))).await.unwrap_or_else(|e| panic!("{what}: delete: {e}"));
    drop(c);
    // The ephemeral goes when its session closes (closeSession through `via`).
    let deadline = Instant::now() + OP;
    loop {
        op(o.sync("/")).await.unwrap();
        if op(o.check_stat("/ops/eph")).await.unwrap().is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "{what}: the ephemeral outlived its closed session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(op(o.check_stat("/ops/m")).await.unwrap().is_none(), "{what}: /ops/m deleted");
    let children = op(o.list_children("/ops")).await.unwrap();
    assert!(children.is_empty(), "{what}: /ops children {children:?}");
}

/// ZooKeeper 3.8 leads (server.3, the highest sid) with a ZooKeeper follower (server.2); Warden
/// (server.1) follows: it is synced by DIFF, serves reads and forwards writes; killed, it misses
/// more txns than ZooKeeper keeps for DIFF, restarts and is synced by SNAP in ZooKeeper's stream
/// format.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_leader_syncs_a_warden_follower_by_diff_and_by_snap() {
    let mut e = Mixed::new(&[Kind::Warden, Kind::ZooKeeper, Kind::ZooKeeper]);
    e.start_with_3_leading().await;
    let (warden, zk_leader) = (e.member(1).client, e.member(3).client);

    // Broadcast: PROPOSAL/COMMIT from ZooKeeper's leader applied on Warden.
    let mut acked = write_many(zk_leader, "a", 20).await;
    check(warden, "Warden follower, broadcast", &acked).await;
    // Writes through Warden are forwarded (REQUEST) to ZooKeeper's leader and reach everyone.
    acked.extend(write_many(warden, "w", 20).await);
    check(zk_leader, "ZooKeeper leader, writes forwarded by Warden", &acked).await;
    check(warden, "Warden follower, its own writes", &acked).await;
    exercise(warden, zk_leader, "through a Warden follower of ZooKeeper").await;

    // Restart with a few txns missed: DIFF.
    let (diffs, snaps) = (sync_count(zk_leader, "diff_count"), sync_count(zk_leader, "snap_count"));
    e.kill(1);
    acked.extend(write_many(zk_leader, "d", 10).await);
    e.start(1);
    e.wait_roles(3).await;
    check(warden, "Warden follower after DIFF", &acked).await;
    // (At least one: a connection attempt that fails after the handshake counts too.)
    assert!(sync_count(zk_leader, "diff_count") > diffs, "ZooKeeper's leader synced Warden by DIFF");
    assert_eq!(sync_count(zk_leader, "snap_count"), snaps, "no SNAP for a Warden follower ten txns behind");

    // Restart with more missed than ZooKeeper's committed log holds: SNAP.
    e.kill(1);
    acked.extend(write_many(zk_leader, "s", MISSED).await);
    e.start(1);
    e.wait_roles(3).await;
    check(warden, "Warden follower after SNAP", &acked).await;
    assert!(sync_count(zk_leader, "snap_count") > snaps, "ZooKeeper's leader synced Warden by SNAP");
    assert!(e.log(1).contains("installing the leader's snapshot"), "Warden installed ZooKeeper's snapshot");
    // And it still takes part: a write through Warden after the SNAP.
    acked.extend(write_many(warden, "after", 5).await);
    check(e.member(2).client, "ZooKeeper follower at the end", &acked).await;
    check(warden, "Warden follower at the end", &acked).await;
}

/// Warden (server.3) leads ZooKeeper 3.8 followers (server.1 and 2); a ZooKeeper follower misses
/// more than Warden's in-memory history, restarts, is synced by SNAP from Warden (on-disk DIFF off:
/// `snapshotSizeFactor=-1`) and serves every node on its own client port.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_leader_syncs_a_zookeeper_follower_by_snap() {
    let mut e = Mixed::new(&[Kind::ZooKeeper, Kind::ZooKeeper, Kind::Warden]);
    e.set_extra(3, "snapshotSizeFactor=-1\n");
    e.start_with_3_leading().await;
    let (warden, zk1) = (e.member(3).client, e.member(1).client);

    let mut acked = write_many(warden, "a", 20).await;
    check(zk1, "ZooKeeper follower, broadcast from Warden", &acked).await;
    acked.extend(write_many(zk1, "z", 20).await);
    check(warden, "Warden leader, writes forwarded by ZooKeeper", &acked).await;
    exercise(zk1, warden, "through a ZooKeeper follower of Warden").await;

    e.kill(1);
    acked.extend(write_many(warden, "s", MISSED).await);
    e.start(1);
    e.wait_roles(3).await;
    check(zk1, "ZooKeeper follower after SNAP from Warden", &acked).await;
    assert!(e.log(1).contains("Getting a snapshot from leader"), "ZooKeeper was synced by SNAP");
    assert!(e.log(3).contains("sending snapshot"), "Warden's leader sent a snapshot");
    acked.extend(write_many(zk1, "after", 5).await);
    check(e.member(2).client, "the other ZooKeeper follower at the end", &acked).await;
    check(warden, "Warden leader at the end", &acked).await;
}

/// Warden (server.3, default snapshotSizeFactor) leads ZooKeeper 3.8 followers; a ZooKeeper
/// follower misses more than Warden's 500 in-memory txns, restarts, and is synced by a DIFF whose
/// older txns Warden reads from its on-disk log: ZooKeeper takes the DIFF, not a snapshot, and
/// serves every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_leader_syncs_a_zookeeper_follower_by_diff_from_its_on_disk_log() {
    let mut e = Mixed::new(&[Kind::ZooKeeper, Kind::ZooKeeper, Kind::Warden]);
    e.start_with_3_leading().await;
    let (warden, zk1) = (e.member(3).client, e.member(1).client);
    let mut acked = write_many(warden, "a", 20).await;
    check(zk1, "ZooKeeper follower, broadcast from Warden", &acked).await;
    let (diffs, snaps) = (sync_count(warden, "diff_count"), sync_count(warden, "snap_count"));

    e.kill(1);
    acked.extend(write_many(warden, "s", MISSED).await);
    e.start(1);
    e.wait_roles(3).await;
    check(zk1, "ZooKeeper follower after a DIFF from Warden's disk", &acked).await;
    assert!(e.log(3).contains("syncing a learner by DIFF from the on-disk txn log"), "Warden read the DIFF from disk");
    assert!(e.log(3).contains("wrote the DIFF's txns from the on-disk log"), "Warden wrote the disk part");
    assert!(!e.log(3).contains("sending snapshot"), "Warden's leader sent no snapshot");
    assert!(!e.log(1).contains("Getting a snapshot from leader"), "ZooKeeper was not synced by SNAP");
    assert!(e.log(1).contains("Getting a diff from the leader"), "ZooKeeper was synced by DIFF");
    assert!(sync_count(warden, "diff_count") > diffs, "Warden's leader counted a DIFF");
    assert_eq!(sync_count(warden, "snap_count"), snaps, "Warden's leader counted no SNAP");
    acked.extend(write_many(zk1, "after", 5).await);
    check(e.member(2).client, "the other ZooKeeper follower at the end", &acked).await;
    check(warden, "Warden leader at the end", &acked).await;
}
