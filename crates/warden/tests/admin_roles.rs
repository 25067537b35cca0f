//! Every AdminServer command answered by a leader, a follower and an observer, compared field by
//! field with Apache ZooKeeper 3.8's AdminServer (Debian's jetty9 and jackson jars on its
//! classpath) in the same role of an ensemble in the same state: two ensembles of three voters and
//! an observer, one of ZooKeeper, one of Warden, each member with one client holding an ephemeral
//! node and a data watch. Same primary names, the same commands failing, Warden's keys
//! ZooKeeper's (at most fewer) in ZooKeeper's order with the same JSON types, and the values that
//! follow from the state alike (the role-bearing fields, the counts of learners, ephemerals and
//! watches; on the leader the observer's connection figures under ZooKeeper's keys). The
//! standalone comparison is `crates/server/tests/admin.rs`.
//!
//! Every process started is killed by its PID when its guard drops (also on failure).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use zk::{Acls, CreateMode};
use zookeeper_client as zk;

mod common;
use common::mixed::{client, Kind, Mixed, ELECT};
use common::{http_get, oracle};

fn command(addr: SocketAddr, name: &str) -> Value {
    let (status, body) = http_get(addr, &format!("/commands/{name}")).expect("ask an AdminServer");
    assert_eq!(status, 200, "{addr} {name}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {body}"))
}

/// An ensemble of `kind` with server.4 an observer and an AdminServer on each member; started,
/// with its admin addresses by id.
fn ensemble(kind: Kind) -> (Mixed, BTreeMap<u64, SocketAddr>) {
    let mut ens = Mixed::new(&[kind; 4]);
    if kind == Kind::ZooKeeper {
        ens.set_classpath(oracle::zk_admin_classpath());
    }
    ens.make_observer(4);
    let mut admins = BTreeMap::new();
    for id in 1..=4u64 {
        admins.insert(id, ens.admin_server(id));
        ens.start(id);
    }
    (ens, admins)
}

/// Waits for one leader, two followers and the observer; returns the id of each role.
async fn roles(ens: &mut Mixed) -> BTreeMap<&'static str, u64> {
    let deadline = Instant::now() + ELECT;
    loop {
        ens.check_alive();
        let modes = ens.modes().await;
        let of = |want: &str| {
            modes.iter().filter(|(_, m)| m.as_deref() == Some(want)).map(|(id, _)| *id).collect::<Vec<_>>()
        };
        let (leaders, followers, observers) = (of("leader"), of("follower"), of("observer"));
        if leaders.len() == 1 && followers.len() == 2 && observers == [4] {
            return BTreeMap::from([("leader", leaders[0]), ("follower", followers[0]), ("observer", 4)]);
        }
        assert!(Instant::now() < deadline, "roles not settled within {ELECT:?}: {modes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One client per member with an ephemeral node and a data watch on it (held by the caller).
async fn load(ens: &Mixed) -> Vec<(zk::Client, zk::OneshotWatcher)> {
    let mut held = Vec::new();
    for id in 1..=4u64 {
        let c = client(ens.member(id).client).await;
        let path = format!("/e{id}");
        c.create(&path, b"v", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.expect("create");
        let (_, _, w) = c.get_and_watch_data(&path).await.expect("watch");
        held.push((c, w));
    }
    for (c, _) in &held {
        c.sync("/").await.expect("sync");
    }
    held
}

/// `observers` (ZooKeeper's `SyncedObserverConsCommand`): on the leader, one entry for the
/// observer (sid 4) with `LearnerHandler.getLearnerHandlerInfo`'s keys, in its order and with its
/// JSON types; elsewhere `synced_observers` 0 and an empty list, the whole answer alike. `fresh`:
/// no `orst` has run, so the requests the observer forwarded compare; after one they are 0.
fn observers_alike(role: &str, z_addr: SocketAddr, w_addr: SocketAddr, fresh: bool) {
    let (z, w) = (command(z_addr, "obsr"), command(w_addr, "obsr"));
    oracle::compare_admin_answers(&format!("{role} obsr"), &z, &w, &[]);
    if role != "leader" {
        assert_eq!(w, z, "{role} observers");
        return;
    }
    assert_eq!((&w["synced_observers"], &z["synced_observers"]), (&Value::from(1), &Value::from(1)), "{z}\n{w}");
    let (zo, wo) = (&z["observers"][0], &w["observers"][0]);
    let keys = |v: &Value| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(keys(wo), keys(zo), "observer info keys\nZK: {zo}\nWarden: {wo}");
    assert_eq!(keys(zo).len(), 9, "{zo}");
    for o in [zo, wo] {
        assert_eq!(o["sid"], 4, "{o}");
        let addr = o["remote_socket_address"].as_str().unwrap_or_default();
        assert!(addr.starts_with("/127.0.0.1:"), "{o}");
        // A java.util.Date, which Jackson writes as ms since the epoch.
        let established = o["established"].as_i64().unwrap_or_default();
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
        assert!(established > now_ms - 600_000 && established <= now_ms + 1000, "{o}");
        for k in ["queued_packets", "packets_received", "packets_sent", "requests"] {
            assert!(o[k].as_u64().is_some(), "{k}: {o}");
        }
        // ZooKeeper's NEWLEADER and UPTODATE leave it below 0 by their size after the sync.
        assert!(o["queued_packets_size"].as_i64().is_some_and(|n| n < 0), "{o}");
        assert!(o["last_zxid"].as_i64().is_some(), "{o}");
        if fresh {
            assert!(o["packets_sent"].as_u64() > Some(0) && o["packets_received"].as_u64() > Some(0), "{o}");
        }
    }
    if fresh {
        assert_eq!(wo["requests"], zo["requests"], "requests forwarded\nZK: {zo}\nWarden: {wo}");
    } else {
        assert_eq!((&wo["requests"], &zo["requests"]), (&Value::from(0), &Value::from(0)), "after orst");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_command_per_role_matches_zookeepers_admin_server() {
    let (mut zk_ens, zk_admins) = ensemble(Kind::ZooKeeper);
    let (mut w_ens, w_admins) = ensemble(Kind::Warden);
    let zk_roles = roles(&mut zk_ens).await;
    let w_roles = roles(&mut w_ens).await;
    let _zk_held = load(&zk_ens).await;
    let _w_held = load(&w_ens).await;
    // Let the learners' session touches and the last commits settle everywhere.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let pairs: Vec<(&str, SocketAddr, SocketAddr)> = ["leader", "follower", "observer"]
        .iter()
        .map(|r| (*r, zk_admins[&zk_roles[r]], w_admins[&w_roles[r]]))
        .collect();
    tokio::task::spawn_blocking(move || {
        for (role, z_addr, w_addr) in pairs {
            // Before the name loop runs `orst`: the observer's forwarded requests (its client's
            // createSession, create and sync) are counted alike.
            observers_alike(role, z_addr, w_addr, true);
            for &name in oracle::ADMIN_NAMES {
                let (z, w) = (command(z_addr, name), command(w_addr, name));
                // `server_stats` is a Java bean Jackson prints in reflection order, which is not
                // stable: a standalone ZooKeeper 3.8 printed it in one order, its leader in
                // another. Compare those keys as a set.
                oracle::compare_admin_answers(&format!("{role} {name}"), &z, &w, &["monitor", "server_stats", "stats"]);
            }
            // Values that follow from the role and the state.
            let (z, w) = (command(z_addr, "srvr"), command(w_addr, "srvr"));
            assert_eq!(w["server_stats"]["server_state"], z["server_stats"]["server_state"], "{role}");
            let (z, w) = (command(z_addr, "mntr"), command(w_addr, "mntr"));
            for key in [
                "server_state",
                "ephemerals_count",
                "global_sessions",
                "quorum_size",
                "learners",
                "synced_followers",
                "synced_observers",
                "pending_syncs",
            ] {
                assert_eq!(w.get(key), z.get(key), "{role} monitor {key}\nZK: {z}\nWarden: {w}");
            }
            let (z, w) = (command(z_addr, "wchs"), command(w_addr, "wchs"));
            assert_eq!(w, z, "{role} watch_summary");
            let (z, w) = (command(z_addr, "isro"), command(w_addr, "isro"));
            assert_eq!(w, z, "{role} is_read_only");
            // After the loop's `orst`: the counts start again from 0.
            observers_alike(role, z_addr, w_addr, false);
            let (z, w) = (command(z_addr, "zabstate"), command(w_addr, "zabstate"));
            assert_eq!(
                (w["zabstate"].clone(), w["voting"].clone()),
                (z["zabstate"].clone(), z["voting"].clone()),
                "{role} zabstate"
            );
        }
    })
    .await
    .unwrap();
}
