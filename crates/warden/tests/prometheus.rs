//! A real Prometheus server (Debian's `prometheus` package, installed by scripts/install-deps)
//! scrapes a 3-server Warden ensemble under load, each server serving
//! `metricsProvider.className=...PrometheusMetricsProvider` on its own port; the test asks
//! Prometheus's HTTP API what it scraped and checks it against what the ensemble did: every
//! server's znode_count, the watches and connections placed on each server, the request
//! latency summaries' counts, and the leader-only metrics present on the leader alone.
//!
//! Every process started is killed by its PID when its guard drops (also on failure).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod common;
use common::mixed::{client, four_letters, write_many, Kind, Mixed};
use common::{free_port, http_get, Killed};

/// Nodes written under load through each server.
const WRITES_PER_SERVER: usize = 300;
/// Data watches and extra client connections placed on each server (server.N gets N of each
/// per round, so the figures differ between servers).
const WATCH_PATHS: usize = 5;

/// What Prometheus holds now for the metric `name` (an instant query), by the scraped server's
/// id (the `server` label of its target).
fn query(prom: SocketAddr, name: &str) -> BTreeMap<u64, f64> {
    let (status, body) = http_get(prom, &format!("/api/v1/query?query={name}")).expect("query Prometheus");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("Prometheus answers JSON");
    assert_eq!(v["status"], "success", "{body}");
    let mut out = BTreeMap::new();
    for r in v["data"]["result"].as_array().expect("a result vector") {
        let id = r["metric"]["server"].as_str().expect("the server label").parse().unwrap();
        let value = r["value"][1].as_str().expect("a sample value").parse().unwrap();
        out.insert(id, value);
    }
    out
}

/// `zk_<key>` of `mntr` on `addr`.
fn mntr(addr: SocketAddr, key: &str) -> f64 {
    let text = four_letters(addr, "mntr").expect("mntr answers");
    let line = text.lines().find_map(|l| l.strip_prefix(&format!("zk_{key}\t")));
    line.unwrap_or_else(|| panic!("no zk_{key} in {text}")).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_scrapes_an_ensemble_under_load() {
    let mut ens = Mixed::new(&[Kind::Warden, Kind::Warden, Kind::Warden]);
    let metric_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    for id in 1..=3u64 {
        let port = metric_ports[id as usize - 1];
        ens.set_extra(
            id,
            &format!(
                "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider\n\
                 metricsProvider.httpHost=127.0.0.1\nmetricsProvider.httpPort={port}\n"
            ),
        );
        ens.start(id);
    }
    let leader = ens.wait_quorum().await;

    // Prometheus, scraping each server every 500 ms, its targets labelled with the server id.
    let prom_port = free_port();
    let prom_dir = ens.dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let mut targets = String::new();
    for (i, port) in metric_ports.iter().enumerate() {
        targets
            .push_str(&format!("      - targets: ['127.0.0.1:{port}']\n        labels: {{ server: '{}' }}\n", i + 1));
    }
    let yml = format!(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n  - job_name: warden\n    \
         static_configs:\n{targets}"
    );
    let cfg = prom_dir.join("prometheus.yml");
    std::fs::write(&cfg, yml).unwrap();
    let log = std::fs::File::create(prom_dir.join("prometheus.log")).unwrap();
    let _prometheus = Killed(
        std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", prom_dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("Debian's prometheus (scripts/install-deps installs it)"),
    );
    let prom: SocketAddr = format!("127.0.0.1:{prom_port}").parse().unwrap();

    // Load: writers on every server at once, and readers.
    let addrs: BTreeMap<u64, SocketAddr> = (1..=3).map(|id| (id, ens.member(id).client)).collect();
    let mut writers = tokio::task::JoinSet::new();
    for (&id, &addr) in &addrs {
        writers.spawn(async move { write_many(addr, &format!("s{id}-"), WRITES_PER_SERVER).await });
    }
    let mut reads = BTreeMap::new();
    for (&id, &addr) in &addrs {
        let c = client(addr).await;
        let n = 50 * id as usize;
        for _ in 0..n {
            c.get_children("/").await.expect("read under load");
        }
        reads.insert(id, n);
    }
    while let Some(r) = writers.join_next().await {
        r.expect("writer");
    }
    // Watches and connections: server.N gets N extra clients, each watching WATCH_PATHS nodes.
    let mut held = Vec::new();
    for (&id, &addr) in &addrs {
        for _ in 0..id {
            let c = client(addr).await;
            let mut watchers = Vec::new();
            for i in 0..WATCH_PATHS {
                let (_, _, w) = c.get_and_watch_data(&format!("/s1-{i}")).await.expect("watch");
                watchers.push(w);
            }
            held.push((c, watchers));
        }
    }
    let expected_nodes = (mntr(addrs[&leader], "znode_count")) as usize;
    assert!(expected_nodes >= 3 * WRITES_PER_SERVER, "{expected_nodes}");

    // Wait for a scrape taken after all that, then compare.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let nodes = query(prom, "znode_count");
        let watches = query(prom, "watch_count");
        let done = nodes.len() == 3
            && nodes.values().all(|&n| n as usize == expected_nodes)
            && (1..=3u64).all(|id| watches.get(&id) == Some(&((id as usize * WATCH_PATHS) as f64)));
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never saw the ensemble's state: znode_count {nodes:?} (want {expected_nodes}), \
             watch_count {watches:?}; its log:\n{}",
            std::fs::read_to_string(prom_dir.join("prometheus.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Every server is up for Prometheus.
    let up = query(prom, "up");
    assert_eq!(up.values().copied().collect::<Vec<_>>(), [1.0, 1.0, 1.0], "{up:?}");
    // Connections: the held clients (the load's clients are closed by now, but a close may still
    // be on its way, so at least the held ones and at most a few more).
    let conns = query(prom, "num_alive_connections");
    for id in 1..=3u64 {
        let n = conns[&id] as u64;
        assert!(n >= id, "server.{id}: num_alive_connections {n}, {id} clients held");
        assert!(n <= id + 3, "server.{id}: num_alive_connections {n}");
    }
    // Request latencies: each server's reads and writes were counted where they were served.
    let read_counts = query(prom, "readlatency_count");
    let update_counts = query(prom, "updatelatency_count");
    for id in 1..=3u64 {
        assert!(read_counts[&id] as usize >= reads[&id] + WATCH_PATHS, "server.{id} reads {read_counts:?}");
        assert!(update_counts[&id] as usize >= WRITES_PER_SERVER, "server.{id} writes {update_counts:?}");
    }
    let quantiles = query(prom, "readlatency%7Bquantile=%220.99%22%7D");
    assert_eq!(quantiles.len(), 3, "{quantiles:?}");
    // Leader-only metrics: on the leader alone, with its followers counted.
    let learners = query(prom, "learners");
    assert_eq!(learners, BTreeMap::from([(leader, 2.0)]), "leader is server.{leader}");
    let synced = query(prom, "synced_followers");
    assert_eq!(synced, BTreeMap::from([(leader, 2.0)]));
    // Every write was proposed and committed by the leader and nobody else.
    let commits = query(prom, "commit_count");
    assert!(commits[&leader] as usize >= 3 * WRITES_PER_SERVER, "{commits:?}");
    for id in (1..=3).filter(|&id| id != leader) {
        assert_eq!(commits[&id], 0.0, "server.{id} is a follower");
        let received = query(prom, "learner_commit_received_count");
        assert!(received[&id] as usize >= 3 * WRITES_PER_SERVER, "{received:?}");
    }
    let proposals = query(prom, "proposal_count");
    assert!(proposals[&leader] >= commits[&leader], "{proposals:?} {commits:?}");
    // The followers timed each proposal as it came and each commit as they applied it; every
    // server (the leader for its own ACK) timed each txn as its log made it durable.
    let proposal_latency = query(prom, "proposal_latency_count");
    let commit_propagation = query(prom, "commit_propagation_latency_count");
    let ack_creation = query(prom, "proposal_ack_creation_latency_count");
    for id in 1..=3u64 {
        assert!(ack_creation[&id] as usize >= 3 * WRITES_PER_SERVER, "server.{id}: {ack_creation:?}");
        let (proposed, committed) = (proposal_latency[&id] as usize, commit_propagation[&id] as usize);
        if id == leader {
            assert_eq!((proposed, committed), (0, 0), "the leader times neither");
        } else {
            assert!(proposed >= 3 * WRITES_PER_SERVER && committed >= 3 * WRITES_PER_SERVER, "server.{id}");
        }
    }
    // Every server's log writes were timed per message, queued to durable.
    let flushed = query(prom, "sync_processor_queue_and_flush_time_ms_count");
    let processed = query(prom, "sync_process_time_count");
    for id in 1..=3u64 {
        assert!(flushed[&id] >= 1.0 && flushed[&id] == processed[&id], "server.{id}: {flushed:?} {processed:?}");
    }
    // The leader prepared every write: a change record each at least, all dropped once applied.
    let queued = query(prom, "outstanding_changes_queued");
    let removed = query(prom, "outstanding_changes_removed");
    assert!(queued[&leader] as usize >= 3 * WRITES_PER_SERVER, "{queued:?}");
    assert_eq!(queued[&leader], removed[&leader], "nothing is pending once the load has stopped");
    // And Prometheus holds the same figures mntr reports now (nothing changes any more).
    for (&id, &addr) in &addrs {
        assert_eq!(mntr(addr, "znode_count") as usize, expected_nodes, "server.{id}");
        assert_eq!(mntr(addr, "watch_count") as usize, id as usize * WATCH_PATHS, "server.{id}");
    }
    drop(held);
}
