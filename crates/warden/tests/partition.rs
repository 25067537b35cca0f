//! Network partitions between real `warden serve` processes.
//!
//! Each test re-runs itself inside a fresh network namespace (`unshare -n`, root needed), where
//! server N listens on 127.0.0.N (client 2181, quorum 2888, election 3888) and dials its peers from
//! that address, so iptables can cut exactly the traffic between two servers: a dedicated chain
//! `WARDEN_PART` hooked into INPUT drops TCP packets between two addresses with a peer port (2888
//! or 3888) at either end; client traffic (2181) is never cut. Healing flushes that chain only.
//! The namespace, the cuts and the ensemble are in `common/netns.rs` (shared with nemesis.rs).
//!
//! Every case: three servers elect a leader; writes go through all three; the leader is cut off
//! from both followers (both directions, or one direction only); the cut-off leader must stop
//! leading within a bound of its syncLimit and acknowledge no write made through it after the cut
//! (a stale leader can never commit); the two followers elect a new leader and take writes; after
//! healing the old leader rejoins and all three servers hold identical data containing every
//! acknowledged write. A follower cut off from both others stops serving the same way while the
//! rest go on. tickTime is 200 ms so a case takes a few seconds.
//!
//! Missing tools (`unshare`, `ip`, `iptables`: scripts/install-deps) or no root make the tests
//! fail, never skip.

use std::time::{Duration, Instant};

use zk::{Acls, CreateMode};
use zookeeper_client as zk;

mod common;
use common::netns::{client_addr, cut, heal, in_netns, mode, net_setup, wait_leader, Ensemble, SYNC_LIMIT, TICK_MS};

const OP: Duration = Duration::from_secs(5);

async fn client(n: u8) -> zk::Client {
    let addr = client_addr(n).to_string();
    let connect = zk::Client::connector().with_session_timeout(Duration::from_secs(6)).connect(&addr);
    tokio::time::timeout(OP, connect).await.expect("connect in time").expect("connect")
}

fn persistent() -> zk::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

async fn create(c: &zk::Client, path: &str) -> bool {
    matches!(tokio::time::timeout(OP, c.create(path, path.as_bytes(), &persistent())).await, Ok(Ok(_)))
}

/// Every child of /p with its data, as server `n` sees it after a sync.
async fn contents(n: u8) -> Vec<(String, Vec<u8>)> {
    let c = client(n).await;
    tokio::time::timeout(OP, c.sync("/p")).await.expect("sync in time").expect("sync");
    let mut names = tokio::time::timeout(OP, c.list_children("/p")).await.expect("list in time").expect("list");
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = format!("/p/{name}");
        let (data, _) = tokio::time::timeout(OP, c.get_data(&path)).await.expect("read in time").expect("read");
        out.push((path, data));
    }
    out
}

/// Which peer packets the cut drops: from the leader, to the leader, or both.
#[derive(Debug, Clone, Copy)]
enum Cut {
    Both,
    /// The leader can send but not receive (followers' packets are dropped).
    LeaderDeaf,
    /// The leader can receive but not send (its packets are dropped).
    LeaderMute,
}

fn partition_case(how: Cut) {
    net_setup();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let e = Ensemble::start("warden-partition-");
    rt.block_on(async {
        let old = wait_leader(&[1, 2, 3]);
        let followers: Vec<u8> = (1..=3u8).filter(|n| *n != old).collect();
        let mut acked = Vec::new();
        let at_leader = client(old).await;
        assert!(create(&at_leader, "/p").await, "create /p");
        for n in 1..=3u8 {
            let c = client(n).await;
            for i in 0..5 {
                let path = format!("/p/before-{n}-{i}");
                assert!(create(&c, &path).await, "write through server {n} before the cut");
                acked.push(path);
            }
        }

        for &f in &followers {
            match how {
                Cut::Both => {
                    cut(old, f);
                    cut(f, old);
                }
                Cut::LeaderDeaf => cut(f, old),
                Cut::LeaderMute => cut(old, f),
            }
        }
        let cut_at = Instant::now();
        eprintln!("{how:?}: cut leader {old} off from {followers:?}");

        // Writes through the cut-off leader: none may be acknowledged (it can reach no quorum),
        // and it must stop leading within a bound of syncLimit.
        let bound = Duration::from_millis(TICK_MS * SYNC_LIMIT * 2) + Duration::from_secs(2);
        let mut stale_acks = Vec::new();
        let mut i = 0;
        let stepped_down = loop {
            let path = format!("/p/stale-{i}");
            i += 1;
            let attempt = tokio::time::timeout(Duration::from_millis(300), at_leader.create(&path, b"", &persistent()));
            if let Ok(Ok(_)) = attempt.await {
                stale_acks.push(path);
            }
            let m = tokio::task::spawn_blocking(move || mode(old)).await.unwrap();
            if m.as_deref() != Some("leader") {
                break cut_at.elapsed();
            }
            assert!(cut_at.elapsed() < bound, "the cut-off leader {old} still leads after {bound:?}");
        };
        eprintln!("{how:?}: old leader {old} stopped leading {} ms after the cut", stepped_down.as_millis());
        assert!(stale_acks.is_empty(), "the cut-off leader acknowledged writes: {stale_acks:?}");
        drop(at_leader);

        // The majority elects a new leader and takes writes.
        let fs = followers.clone();
        let new = tokio::task::spawn_blocking(move || wait_leader(&fs)).await.unwrap();
        assert_ne!(new, old);
        for &f in &followers {
            let c = client(f).await;
            for i in 0..5 {
                let path = format!("/p/during-{f}-{i}");
                assert!(create(&c, &path).await, "write through server {f} during the partition");
                acked.push(path);
            }
        }
        // The old leader serves no write while cut off.
        let m = tokio::task::spawn_blocking(move || mode(old)).await.unwrap();
        assert_ne!(m.as_deref(), Some("leader"), "two leaders");

        heal();
        let again = tokio::task::spawn_blocking(|| wait_leader(&[1, 2, 3])).await.unwrap();
        assert_eq!(again, new, "the healed old leader rejoins as a follower");
        let c = client(old).await;
        assert!(create(&c, "/p/after-heal").await, "write through the old leader after healing");
        acked.push("/p/after-heal".into());

        let reference = contents(new).await;
        let paths: Vec<&String> = reference.iter().map(|(p, _)| p).collect();
        for path in &acked {
            assert!(paths.contains(&path), "acknowledged {path} missing on the new leader");
        }
        for n in 1..=3u8 {
            assert_eq!(contents(n).await, reference, "server {n} differs from the leader {new}");
        }
        if !matches!(how, Cut::LeaderDeaf) {
            // No packet of the old leader reached a follower after the cut, so nothing it proposed
            // then can be in the new history. (A deaf leader's proposals do reach the followers'
            // logs, and the next leader may legitimately commit them, unacknowledged.)
            let stale: Vec<&&String> = paths.iter().filter(|p| p.starts_with("/p/stale-")).collect();
            assert!(stale.is_empty(), "proposals of the cut-off leader were committed: {stale:?}");
        }
        eprintln!("{how:?}: {} acknowledged writes identical on all three servers", acked.len());
    });
    drop(e);
}

/// A follower cut off from both other servers: it stops serving within a bound of syncLimit (its
/// writes fail, none acknowledged), the leader and the other follower go on, and after healing the
/// follower catches up.
fn follower_case() {
    net_setup();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let e = Ensemble::start("warden-partition-");
    rt.block_on(async {
        let leader = wait_leader(&[1, 2, 3]);
        let lonely = (1..=3u8).find(|n| *n != leader).unwrap();
        let other = (1..=3u8).find(|n| *n != leader && *n != lonely).unwrap();
        let mut acked = Vec::new();
        let at_lonely = client(lonely).await;
        assert!(create(&at_lonely, "/p").await, "create /p");
        for peer in [leader, other] {
            cut(lonely, peer);
            cut(peer, lonely);
        }
        let cut_at = Instant::now();
        let bound = Duration::from_millis(TICK_MS * SYNC_LIMIT * 2) + Duration::from_secs(2);
        let mut lost_acks = Vec::new();
        let mut i = 0;
        loop {
            let path = format!("/p/minority-{i}");
            i += 1;
            let attempt = tokio::time::timeout(Duration::from_millis(300), at_lonely.create(&path, b"", &persistent()));
            if let Ok(Ok(_)) = attempt.await {
                lost_acks.push(path);
            }
            let m = tokio::task::spawn_blocking(move || mode(lonely)).await.unwrap();
            if m.as_deref() != Some("follower") {
                break;
            }
            assert!(cut_at.elapsed() < bound, "the cut-off follower {lonely} still serves after {bound:?}");
        }
        eprintln!("follower {lonely} stopped serving {} ms after the cut", cut_at.elapsed().as_millis());
        assert!(lost_acks.is_empty(), "a follower without its leader acknowledged writes: {lost_acks:?}");
        drop(at_lonely);
        let m = tokio::task::spawn_blocking(move || mode(leader)).await.unwrap();
        assert_eq!(m.as_deref(), Some("leader"), "the leader keeps its quorum with the other follower");
        for n in [leader, other] {
            let c = client(n).await;
            for i in 0..5 {
                let path = format!("/p/majority-{n}-{i}");
                assert!(create(&c, &path).await, "write through server {n} while {lonely} is cut off");
                acked.push(path);
            }
        }
        heal();
        let again = tokio::task::spawn_blocking(|| wait_leader(&[1, 2, 3])).await.unwrap();
        assert_eq!(again, leader);
        let reference = contents(leader).await;
        let paths: Vec<&String> = reference.iter().map(|(p, _)| p).collect();
        for path in &acked {
            assert!(paths.contains(&path), "acknowledged {path} missing");
        }
        assert!(!paths.iter().any(|p| p.starts_with("/p/minority-")), "a write made through the minority committed");
        for n in 1..=3u8 {
            assert_eq!(contents(n).await, reference, "server {n} differs from the leader {leader}");
        }
    });
    drop(e);
}

#[test]
fn a_follower_cut_off_stops_serving_and_catches_up_after_healing() {
    in_netns("a_follower_cut_off_stops_serving_and_catches_up_after_healing", follower_case);
}

#[test]
fn a_leader_cut_off_both_ways_stops_and_the_majority_goes_on() {
    in_netns("a_leader_cut_off_both_ways_stops_and_the_majority_goes_on", || partition_case(Cut::Both));
}

#[test]
fn a_leader_that_cannot_hear_its_followers_stops_and_the_majority_goes_on() {
    in_netns("a_leader_that_cannot_hear_its_followers_stops_and_the_majority_goes_on", || {
        partition_case(Cut::LeaderDeaf)
    });
}

#[test]
fn a_leader_that_cannot_reach_its_followers_stops_and_the_majority_goes_on() {
    in_netns("a_leader_that_cannot_reach_its_followers_stops_and_the_majority_goes_on", || {
        partition_case(Cut::LeaderMute)
    });
}
