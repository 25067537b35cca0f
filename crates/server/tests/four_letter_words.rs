//! Four-letter words (ZooKeeper's `FourLetterCommands`): ruok, srvr's exact first line and fields,
//! stat, envi, conf, mntr, isro, cons, wchs, dump, the whitelist refusal, and a garbage first word.

mod common;

use common::*;
use zk::{Acls, CreateMode};
use zookeeper_client as zk;

/// The first line of `srvr`/`stat` in ZooKeeper 3.5+'s form (`built on yyyy-MM-dd HH:mm UTC`).
fn check_version_line(line: &str) {
    let caps = version_line_regex("Zookeeper version: ")
        .captures(line)
        .unwrap_or_else(|| panic!("srvr first line {line:?} is not ZooKeeper 3.9's version line"));
    assert!(caps[1].starts_with("3.9.3-warden-"), "version {:?}", &caps[1]);
}

fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no line starting with {key:?} in:\n{text}"))
        .trim()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ruok_is_imok() {
    let srv = TestServer::start().await;
    assert_eq!(four_letter(srv.addr, "ruok").await, "imok");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srvr_format_and_fields() {
    let srv = TestServer::start().await;
    let before = four_letter(srv.addr, "srvr").await;
    check_version_line(before.lines().next().expect("srvr output is not empty"));
    assert_eq!(field(&before, "Mode:"), "standalone");
    let nodes_before: i64 = field(&before, "Node count:").parse().expect("Node count is a number");
    for key in ["Received:", "Sent:", "Connections:", "Outstanding:"] {
        field(&before, key).parse::<i64>().unwrap_or_else(|_| panic!("{key} is not a number in:\n{before}"));
    }
    let lat = field(&before, "Latency min/avg/max:");
    assert_eq!(lat.split('/').count(), 3, "latency is min/avg/max: {lat:?}");

    let c = srv.client().await;
    let (stat, _) = c.create("/counted", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.unwrap();
    let after = four_letter(srv.addr, "srvr").await;
    let nodes_after: i64 = field(&after, "Node count:").parse().unwrap();
    assert_eq!(nodes_after, nodes_before + 1, "Node count follows the tree");
    assert_eq!(
        field(&after, "Zxid:"),
        format!("0x{:x}", stat.czxid),
        "Zxid is the last processed zxid in lowercase hex"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stat_has_clients_section() {
    let srv = TestServer::start().await;
    let _c = srv.client().await;
    let out = four_letter(srv.addr, "stat").await;
    check_version_line(out.lines().next().unwrap());
    assert!(out.lines().any(|l| l.trim_end() == "Clients:"), "no Clients: section in:\n{out}");
    assert!(out.contains("/127.0.0.1:"), "the connected client is listed:\n{out}");
    assert_eq!(field(&out, "Mode:"), "standalone");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envi_and_mntr_report_srvrs_version_line() {
    let srv = TestServer::start().await;
    let envi = four_letter(srv.addr, "envi").await;
    assert_eq!(envi.lines().next().map(str::trim_end), Some("Environment:"));
    let version = field(&envi, "zookeeper.version=");
    let srvr = four_letter(srv.addr, "srvr").await;
    let srvr_version = srvr.lines().next().unwrap().strip_prefix("Zookeeper version: ").unwrap();
    assert_eq!(version, srvr_version, "envi's zookeeper.version is srvr's version text");
    let line = envi.lines().find(|l| l.starts_with("zookeeper.version=")).unwrap();
    assert!(version_line_regex("zookeeper.version=").is_match(line), "envi line {line:?}");
    let mntr = four_letter(srv.addr, "mntr").await;
    let line = mntr.lines().find(|l| l.starts_with("zk_version")).expect("mntr has zk_version");
    assert!(version_line_regex("zk_version\t").is_match(line), "mntr line {line:?}");
    assert_eq!(line.strip_prefix("zk_version\t"), Some(version), "mntr's zk_version is srvr's version text");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_reports_effective_settings() {
    let srv = TestServer::start().await;
    let conf = four_letter(srv.addr, "conf").await;
    assert_eq!(field(&conf, "clientPort="), srv.addr.port().to_string());
    assert_eq!(field(&conf, "tickTime="), "200");
    assert_eq!(field(&conf, "minSessionTimeout="), "400");
    assert_eq!(field(&conf, "maxSessionTimeout="), "20000");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mntr_and_isro() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/m", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
    let mntr = four_letter(srv.addr, "mntr").await;
    let kv = |k: &str| -> String {
        mntr.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}\t")))
            .unwrap_or_else(|| panic!("no {k} in mntr:\n{mntr}"))
            .to_string()
    };
    assert_eq!(kv("zk_server_state"), "standalone");
    assert!(!kv("zk_version").is_empty());
    assert_eq!(kv("zk_ephemerals_count"), "1");
    let srvr = four_letter(srv.addr, "srvr").await;
    assert_eq!(kv("zk_znode_count"), field(&srvr, "Node count:"), "mntr and srvr agree on the node count");
    assert_eq!(four_letter(srv.addr, "isro").await, "rw");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wchs_counts_watches_and_dump_lists_ephemerals() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    c.create("/w1", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.unwrap();
    c.create("/eph", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.unwrap();
    let (_, _, _w1) = c.get_and_watch_data("/w1").await.unwrap();
    let (_, _w2) = c.check_and_watch_stat("/nothing").await.unwrap();
    let wchs = four_letter(srv.addr, "wchs").await;
    assert!(wchs.contains("1 connections watching 2 paths"), "wchs:\n{wchs}");
    assert!(wchs.contains("Total watches:2"), "wchs:\n{wchs}");
    let dump = four_letter(srv.addr, "dump").await;
    assert!(dump.contains("/eph"), "dump lists ephemerals:\n{dump}");
    assert!(dump.contains(&format!("0x{:x}", c.session_id().0)), "dump lists the owning session:\n{dump}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_whitelisted_word_is_refused() {
    let srv = TestServer::start_with(|cfg| cfg.four_letter_whitelist = vec!["srvr".into()]).await;
    assert_eq!(four_letter(srv.addr, "ruok").await, "ruok is not executed because it is not in the whitelist.\n");
    assert_eq!(four_letter(srv.addr, "envi").await, "envi is not executed because it is not in the whitelist.\n");
    let srvr = four_letter(srv.addr, "srvr").await;
    check_version_line(srvr.lines().next().unwrap());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_whitelist_is_srvr_only() {
    let srv = TestServer::start_with(|cfg| {
        cfg.four_letter_whitelist = warden_server::Config::default().four_letter_whitelist
    })
    .await;
    check_version_line(four_letter(srv.addr, "srvr").await.lines().next().unwrap());
    assert_eq!(four_letter(srv.addr, "mntr").await, "mntr is not executed because it is not in the whitelist.\n");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_first_word_closes_only_that_connection() {
    let srv = TestServer::start().await;
    // "abcd" is not a 4lw; as a length it is far beyond jute.maxbuffer.
    let out = four_letter(srv.addr, "abcd").await;
    assert_eq!(out, "", "nothing is written before the close");
    assert_eq!(four_letter(srv.addr, "ruok").await, "imok", "the server keeps serving");
    srv.stop().await;
}
