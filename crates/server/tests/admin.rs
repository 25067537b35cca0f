//! The AdminServer (`admin.*`): HTTP on its own port, ZooKeeper's command names and aliases,
//! JSON in ZooKeeper's shape, bad requests refused without harm, and Apache ZooKeeper 3.8's
//! AdminServer as the oracle for names, keys and value types.

mod common;
mod oracle;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;
use serde_json::Value;
use warden_server::admin::AdminSettings;
use zk::CreateMode;
use zookeeper_client as zk;

/// Sends `request` (raw bytes) and returns the status code and body of the answer.
fn http(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the AdminServer");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    http(addr, format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
}

/// `GET /commands/<name>` parsed as JSON.
fn command(addr: SocketAddr, name: &str) -> Value {
    let (status, body) = get(addr, &format!("/commands/{name}"));
    assert_eq!(status, 200, "{name}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {body}"))
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

async fn admin_server() -> (TestServer, SocketAddr) {
    let port = oracle::free_port();
    let srv = TestServer::start_with(|c| {
        c.admin = AdminSettings { port, address: "127.0.0.1".parse().unwrap(), ..Default::default() };
    })
    .await;
    (srv, SocketAddr::from(([127, 0, 0, 1], port)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_answer_in_zookeepers_shape() {
    let (srv, admin) = admin_server().await;
    let client = srv.client().await;
    client.create("/e", b"v", &CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())).await.unwrap();
    let (_, _, _watch) = client.get_and_watch_data("/e").await.unwrap();

    let run = move |name: &'static str| tokio::task::spawn_blocking(move || command(admin, name));
    let ruok = run("ruok").await.unwrap();
    assert_eq!(keys(&ruok), ["command", "error"]);
    assert_eq!(ruok["command"], "ruok");
    assert!(ruok["error"].is_null());

    // Aliases answer under the primary name; figures agree with the four-letter words.
    let mntr = run("mntr").await.unwrap();
    assert_eq!(mntr["command"], "monitor");
    assert_eq!(mntr["server_state"], "standalone");
    let text = four_letter(srv.addr, "mntr").await;
    let zk_count: i64 = text.lines().find_map(|l| l.strip_prefix("zk_znode_count\t")).unwrap().parse().unwrap();
    assert_eq!(mntr["znode_count"].as_i64(), Some(zk_count));
    assert_eq!(mntr["ephemerals_count"], 1);
    let conf = run("conf").await.unwrap();
    assert_eq!(conf["command"], "configuration");
    assert_eq!(conf["client_port"].as_u64(), Some(u64::from(srv.addr.port())));
    let srvr = run("srvr").await.unwrap();
    assert_eq!(srvr["command"], "server_stats");
    assert_eq!(srvr["server_stats"]["server_state"], "standalone");
    assert!(srvr["node_count"].as_u64().unwrap() >= 5);

    // Sessions, ephemerals and watches, keyed by decimal session id as ZooKeeper's JSON has them.
    let sid = client.session_id().0.to_string();
    let dump = run("dump").await.unwrap();
    assert_eq!(dump["session_id_to_ephemeral_paths"][&sid], serde_json::json!(["/e"]));
    let wchc = run("wchc").await.unwrap();
    assert_eq!(wchc["session_id_to_watched_paths"][&sid], serde_json::json!(["/e"]));
    let wchp = run("wchp").await.unwrap();
    assert_eq!(wchp["path_to_session_ids"]["/e"][0].to_string(), sid);
    let wchs = run("wchs").await.unwrap();
    assert_eq!((wchs["num_connections"].as_u64(), wchs["num_total_watches"].as_u64()), (Some(1), Some(1)));
    let cons = run("cons").await.unwrap();
    assert_eq!(cons["connections"].as_array().unwrap().len(), 1);
    assert_eq!(cons["connections"][0]["session_id"].to_string(), sid);

    // Standalone `leader`: ZooKeeper's own error field comes first.
    let lead = run("lead").await.unwrap();
    assert_eq!(keys(&lead), ["error", "command"]);
    assert_eq!(lead["error"], "server is not initialized");
    // Arguments come from the query; a bad one is an error in the answer.
    let stmk = tokio::task::spawn_blocking(move || command(admin, "stmk?traceMask=abc")).await.unwrap();
    assert_eq!(stmk["error"], "setTraceMask requires long traceMask argument");
    // The digest history: empty until the 128th zxid, as ZooKeeper's.
    let hash = run("hash").await.unwrap();
    assert_eq!(keys(&hash), ["digests", "command", "error"]);
    assert_eq!(hash["digests"], serde_json::json!([]));

    // The listing, unknown names, other paths and methods, garbage.
    let bad = tokio::task::spawn_blocking(move || {
        let (status, listing) = get(admin, "/commands");
        assert_eq!(status, 200);
        assert_eq!(listing.matches("<a href=\"/commands/").count(), 28, "{listing}");
        let unknown = command(admin, "nope");
        assert_eq!(unknown["error"], "Unknown command: nope");
        assert_eq!(get(admin, "/elsewhere").0, 404);
        let post =
            http(admin, b"POST /commands/ruok HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        assert_eq!(post.0, 405);
        let garbage = http(admin, b"\x16\x03\x01\x00\xff garbage \r\n\r\n");
        assert!(garbage.0 == 400 || garbage.0 == 0, "garbage answered {garbage:?}");
        let huge = http(admin, format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(1 << 20)).as_bytes());
        assert_ne!(huge.0, 200, "a 1 MiB request line");
        command(admin, "ruok")
    })
    .await
    .unwrap();
    assert!(bad["error"].is_null(), "still serving after bad requests");
    assert_eq!(client.get_data("/e").await.unwrap().0, b"v", "clients unaffected");
}

/// The same commands against Apache ZooKeeper 3.8's AdminServer (Jetty) and Warden's, each with
/// one client holding an ephemeral node and a data watch: every name and alias resolves to the
/// same primary name, the same commands fail, Warden's keys are ZooKeeper's (at most fewer, where
/// Warden lacks the figure), in ZooKeeper's order, with the same JSON types; the bodies print
/// alike (Jackson's layout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_keys_and_types_match_zookeepers_admin_server() {
    let zk_admin_port = oracle::free_port();
    let data = tempfile::tempdir().unwrap();
    let extra = [
        ("admin.enableServer", "true".to_string()),
        ("admin.serverAddress", "127.0.0.1".to_string()),
        ("admin.serverPort", zk_admin_port.to_string()),
    ];
    let zk_server = oracle::ZkProcess::start(&oracle::zk_admin_classpath(), data.path(), &extra, 3_600_000);
    let zk_admin = SocketAddr::from(([127, 0, 0, 1], zk_admin_port));
    let (warden, warden_admin) = admin_server().await;
    let mut clients = Vec::new();
    for addr in [zk_server.addr, warden.addr] {
        let c = zk::Client::connector().connect(&addr.to_string()).await.unwrap();
        c.create("/e", b"v", &CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())).await.unwrap();
        let (_, _, w) = c.get_and_watch_data("/e").await.unwrap();
        clients.push((c, w));
    }
    tokio::task::spawn_blocking(move || {
        // Wait for Jetty.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while get(zk_admin, "/commands/ruok").0 != 200 {
            assert!(std::time::Instant::now() < deadline, "ZooKeeper's AdminServer did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let (_, zk_listing) = get(zk_admin, "/commands");
        let (_, warden_listing) = get(warden_admin, "/commands");
        // ZooKeeper 3.8 has 26 commands; Warden lists 3.9's 28 (with snapshot and restore).
        for line in zk_listing.lines() {
            assert!(warden_listing.contains(line), "ZooKeeper lists {line:?}; Warden does not");
        }
        // The names compared cover every command ZooKeeper lists (an empty list once let this
        // test compare nothing).
        for listed in zk_listing.split("<a href=\"/commands/").skip(1) {
            let name = listed.split('"').next().unwrap_or_default();
            assert!(oracle::ADMIN_NAMES.contains(&name), "ZooKeeper's {name} is not compared");
        }
        for &name in oracle::ADMIN_NAMES {
            let z = command(zk_admin, name);
            let w = command(warden_admin, name);
            oracle::compare_admin_answers(name, &z, &w, &["monitor"]);
        }
        // Whole bodies print alike where the values agree.
        for name in ["ruok", "nope", "watch_summary", "leader"] {
            assert_eq!(
                get(warden_admin, &format!("/commands/{name}")).1,
                get(zk_admin, &format!("/commands/{name}")).1
            );
        }
    })
    .await
    .unwrap();
    drop(clients);
}

/// `metricsProvider.className=...PrometheusMetricsProvider`: `/metrics` in the text format, with
/// ZooKeeper's names and types, the same figures as `mntr`, and nothing on other paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_metrics_carry_zookeepers_names_and_mntrs_figures() {
    let port = oracle::free_port();
    let srv = TestServer::start_with(|c| {
        c.metrics_provider = warden_server::config::MetricsProvider::Prometheus;
        c.metrics = warden_server::admin::MetricsSettings { address: "127.0.0.1".parse().unwrap(), port };
        // A snapshot every few txns, for snapshottime.
        c.snap_count = 2;
    })
    .await;
    let client = srv.client().await;
    client.create("/p", b"v", &CreateMode::Persistent.with_acls(zk::Acls::anyone_all())).await.unwrap();
    for _ in 0..5 {
        client.get_data("/p").await.unwrap();
    }
    // One data watch fired by one change; one auth packet refused (an unknown scheme).
    let (_, _, watch) = client.get_and_watch_data("/p").await.unwrap();
    client.set_data("/p", b"w", None).await.unwrap();
    watch.changed().await;
    let refused = srv.client().await;
    assert!(refused.auth("no-such-scheme", b"x").await.is_err());
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (status, text) = tokio::task::spawn_blocking(move || get(addr, "/metrics")).await.unwrap();
    assert_eq!(status, 200);
    let mntr = four_letter(srv.addr, "mntr").await;
    let mntr_value = |key: &str| -> f64 {
        let line = mntr.lines().find_map(|l| l.strip_prefix(&format!("zk_{key}\t")));
        line.unwrap_or_else(|| panic!("mntr has no zk_{key}:\n{mntr}")).parse().unwrap()
    };
    let sample = |name: &str| -> f64 {
        let line = text.lines().find_map(|l| l.strip_prefix(&format!("{name} ")));
        line.unwrap_or_else(|| panic!("/metrics has no {name}:\n{text}")).parse().unwrap()
    };
    // Every line is a comment or a well-formed sample.
    let sample_line =
        regex::Regex::new(r#"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-z]+="[^"]*",)*\})? -?[0-9.eE+-]+$"#).unwrap();
    for line in text.lines() {
        assert!(line.starts_with("# HELP ") || line.starts_with("# TYPE ") || sample_line.is_match(line), "{line:?}");
    }
    for (name, kind) in [("znode_count", "gauge"), ("watch_count", "gauge"), ("outstanding_requests", "gauge")] {
        assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name} {kind}");
    }
    assert_eq!(sample("znode_count"), mntr_value("znode_count"));
    // This test's client and the refused one (its connection is closed, its session lives on
    // until it expires, as in ZooKeeper).
    assert_eq!(sample("global_sessions"), 2.0);
    assert!(text.contains("# TYPE readlatency summary\n") && text.contains("readlatency{quantile=\"0.99\",} "));
    assert_eq!(sample("readlatency_count"), mntr_value("cnt_readlatency"));
    assert!(sample("readlatency_count") >= 5.0, "five reads counted");
    assert!(sample("updatelatency_count") >= 1.0, "the create counted");
    // Counters: the type, and this test's own ConnectRequest; a standalone server never looks.
    assert!(text.contains("# TYPE connection_request_count counter\n"), "{text}");
    assert!(sample("connection_request_count") >= 1.0);
    assert_eq!(sample("looking_count"), 0.0);
    assert_eq!((sample("node_changed_watch_count_count"), sample("node_changed_watch_count_sum")), (1.0, 1.0));
    assert_eq!(sample("node_created_watch_count_count"), 0.0);
    assert_eq!(sample("auth_failed_count"), 1.0);
    // Reply and notification bytes; the last, smallest and largest packet sent.
    assert!(sample("response_bytes") > 100.0 && sample("watch_bytes") > 10.0, "{text}");
    let (last, min, max) =
        (sample("last_client_response_size"), sample("min_client_response_size"), sample("max_client_response_size"));
    assert!(min > 0.0 && min <= last && last <= max, "{last} {min} {max}");
    assert!(sample("non_mtls_local_conn_count") >= 2.0 && sample("non_mtls_remote_conn_count") == 0.0, "{text}");
    assert_eq!(sample("outstanding_tls_handshake"), 0.0);
    assert!(sample("bytes_received_count") > 100.0, "{text}");
    // Every txn applied counts a propagation latency; start-up loaded one empty directory once.
    assert!(sample("propagation_latency_count") >= 3.0, "sessions, create, setData: {text}");
    assert_eq!((sample("startup_txns_loaded_count"), sample("startup_txns_loaded_sum")), (1.0, 0.0));
    // Group commit: each sync's txns, and their total.
    assert!(sample("sync_processor_batch_size_count") >= 1.0);
    assert_eq!(sample("sync_processor_batch_size_sum"), sample("sync_processor_request_queued"));
    assert!(sample("sync_processor_request_queued") >= sample("propagation_latency_count"));
    // A standalone server never elects, commits through a quorum or syncs learners.
    for name in ["election_time_count", "commit_count", "proposal_count", "diff_count", "quorum_ack_latency_count"] {
        assert_eq!(sample(name), 0.0, "{name}");
    }
    // The transaction log's fsyncs (forceSync is on): a BASIC summary, one quantile.
    assert!(text.contains("# TYPE fsynctime summary\nfsynctime{quantile=\"0.5\",} "), "{text}");
    assert!(sample("fsynctime_count") >= 1.0, "the create's fsync counted");
    assert_eq!(sample("fsynctime_count"), mntr_value("cnt_fsynctime"));
    assert!(!mntr.contains("zk_p99_fsynctime"), "fsynctime is a BASIC summary in ZooKeeper");
    // Loading the data at start-up, once; snapshot writes as the snapshot thread finishes them.
    assert_eq!(sample("dbinittime_count"), 1.0);
    assert_eq!(mntr_value("cnt_dbinittime"), 1.0);
    for i in 0..10 {
        client
            .create(&format!("/p/{i}"), b"v", &CreateMode::Persistent.with_acls(zk::Acls::anyone_all()))
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, text) = tokio::task::spawn_blocking(move || get(addr, "/metrics")).await.unwrap();
        let count = text.lines().find_map(|l| l.strip_prefix("snapshottime_count ")).map(|v| v.parse::<f64>().unwrap());
        if count.is_some_and(|c| c >= 1.0) {
            // Warden's own: the same snapshot's pause for the log, counted with it.
            let paused = text.lines().find_map(|l| l.strip_prefix("warden_snapshot_paused_ms_count "));
            assert_eq!(paused.map(|v| v.parse::<f64>().unwrap()), count, "{text}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no snapshot counted in snapshottime:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Not serving version or state (not metrics in ZooKeeper either), and only /metrics.
    assert!(!text.contains("version"));
    let (status, _) = tokio::task::spawn_blocking(move || get(addr, "/")).await.unwrap();
    assert_eq!(status, 404);
}

/// An HTTP exchange with the status, the raw header block and the body bytes of the answer.
fn http_bytes(addr: SocketAddr, request: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect to the AdminServer");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head, raw[split + 4..].to_vec())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim()))
}

fn snapshot_request(auth: Option<&str>, query: &str) -> Vec<u8> {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    format!("GET /commands/snapshot{query} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").into_bytes()
}

fn restore_request(auth: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST /commands/restore HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// ZooKeeper 3.9's `snapshot` and `restore`: authentication against the root ACL, the rate
/// limiter, a consistent stream whose `last_zxid` is the server's, and a restore that replaces a
/// standalone server's data (older or newer than its own) durably, across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_restore_move_a_tree_with_authentication() {
    let admin_settings = |port| AdminSettings {
        port,
        address: "127.0.0.1".parse().unwrap(),
        // One snapshot per 10 s (3.9 counts this interval in microseconds for snapshots).
        rate_limiter_interval_ms: 10_000_000,
        ..Default::default()
    };
    let port_a = oracle::free_port();
    let a = TestServer::start_with(|c| c.admin = admin_settings(port_a)).await;
    let admin_a = SocketAddr::from(([127, 0, 0, 1], port_a));
    let client = a.client().await;
    let open = CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.create("/app", b"root of app", &open).await.unwrap();
    for i in 0..20 {
        client.create(&format!("/app/n{i}"), format!("v{i}").as_bytes(), &open).await.unwrap();
    }
    client.set_data("/app/n3", b"changed", None).await.unwrap();
    // Only alice may do everything on /: others authenticate, and are not authorized.
    client.auth("digest", b"alice:secret").await.unwrap();
    let alice_only = [zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("digest", &digest_id("alice", "secret")))];
    client.set_acl("/", &alice_only, None).await.unwrap();

    let ask = move |req: Vec<u8>| tokio::task::spawn_blocking(move || http_bytes(admin_a, &req));
    let (status, _, body) = ask(snapshot_request(None, "")).await.unwrap();
    assert_eq!(status, 401);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (v["command"].as_str(), v["error"].as_str()),
        (Some("snapshot"), Some("Auth info is missing for the command"))
    );
    let (status, _, body) = ask(snapshot_request(Some("Basic YWxpY2U6c2VjcmV0"), "")).await.unwrap();
    assert_eq!(
        (status, serde_json::from_slice::<Value>(&body).unwrap()["error"].clone()),
        (401, "Not authenticated".into())
    );
    let (status, _, body) = ask(snapshot_request(Some("digest bob:secret"), "")).await.unwrap();
    assert_eq!(
        (status, serde_json::from_slice::<Value>(&body).unwrap()["error"].clone()),
        (403, "Not authorized".into())
    );

    let srvr = four_letter(a.addr, "srvr").await;
    let zxid = srvr.lines().find_map(|l| l.strip_prefix("Zxid: ")).unwrap().to_string();
    let (status, head, stream) = ask(snapshot_request(Some("digest alice:secret"), "")).await.unwrap();
    assert_eq!(status, 200, "{head}");
    assert_eq!(header(&head, "content-type"), Some("application/octet-stream"));
    assert_eq!(header(&head, "last_zxid"), Some(zxid.as_str()), "the stream stands at the server's zxid");
    assert_eq!(header(&head, "snapshot_size"), Some(stream.len().to_string().as_str()));
    let decoded = warden_storage::decode_snapshot_stream(&stream).expect("a snapshot stream with valid seals");
    assert_eq!(format!("{:#x}", decoded.zxid), zxid);
    assert_eq!(decoded.tree.node("/app/n3").unwrap().data.as_deref(), Some(&b"changed"[..]));
    // The limiter: a second snapshot within the interval is refused.
    let (status, _, _) = ask(snapshot_request(Some("digest alice:secret"), "?streaming=false")).await.unwrap();
    assert_eq!(status, 429);
    // restore is POST only.
    let (status, _, _) =
        ask(snapshot_request(Some("digest alice:secret"), "").replace_get_with("restore")).await.unwrap();
    assert_eq!(status, 405);

    // Server b has more history than the snapshot (its zxid is higher), then takes the snapshot.
    let port_b = oracle::free_port();
    let b = TestServer::start_with(|c| c.admin = admin_settings(port_b)).await;
    let admin_b = SocketAddr::from(([127, 0, 0, 1], port_b));
    let cb = b.client().await;
    for i in 0..40 {
        cb.create(&format!("/b{i}"), b"b", &open).await.unwrap();
    }
    let ask_b = move |req: Vec<u8>| tokio::task::spawn_blocking(move || http_bytes(admin_b, &req));
    let (status, _, body) = ask_b(restore_request("digest anyone:x", b"not a snapshot")).await.unwrap();
    assert_eq!(status, 500);
    let err = serde_json::from_slice::<Value>(&body).unwrap()["error"].as_str().unwrap().to_string();
    assert!(err.starts_with("not a snapshot stream"), "{err}");
    // That attempt counted against the limiter (it counts once the checks pass, before the body
    // is read: ZooKeeper's order), so a second restore now is refused; a fresh b takes the real one.
    let (status, _, _) = ask_b(restore_request("digest anyone:x", &stream)).await.unwrap();
    assert_eq!(status, 429);
    let mntr = four_letter(b.addr, "mntr").await;
    for line in ["zk_restore_error_count\t1\n", "zk_restore_rate_limited_count\t1\n", "zk_cnt_restore_time\t0\n"] {
        assert!(mntr.contains(line), "{line:?} in {mntr}");
    }
    let mntr_a = four_letter(a.addr, "mntr").await;
    assert!(mntr_a.contains("zk_snapshot_rate_limited_count\t1\n"), "{mntr_a}");
    drop(cb);
    b.stop().await;
    let b = TestServer::start_with(|c| c.admin = admin_settings(port_b)).await;
    let cb = b.client().await;
    for i in 0..40 {
        cb.create(&format!("/b{i}"), b"b", &open).await.unwrap();
    }
    let (status, _, body) = ask_b(restore_request("digest anyone:x", &stream)).await.unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(format!("{:#x}", v["last_zxid"].as_i64().unwrap()), zxid);
    assert!(v["error"].is_null());
    assert!(four_letter(b.addr, "mntr").await.contains("zk_cnt_restore_time\t1\n"));
    // b's clients were disconnected; a new one sees a's tree and none of b's own.
    let fresh = b.client().await;
    assert_eq!(fresh.get_data("/app/n3").await.unwrap().0, b"changed");
    assert_eq!(fresh.get_children("/app").await.unwrap().0.len(), 20);
    assert!(fresh.check_stat("/b0").await.unwrap().is_none());
    // The next write follows the restored zxid; all of it survives a restart.
    fresh.auth("digest", b"alice:secret").await.unwrap();
    let (stat, _) = fresh.create("/after", b"x", &open).await.unwrap();
    // zxid + 1 was the new client's createSession.
    assert_eq!(stat.czxid, decoded.zxid + 2);
    drop(fresh);
    let dir = b.stop_keeping_dir().await;
    let b = TestServer::start_in(dir, |c| c.admin = admin_settings(oracle::free_port())).await;
    let again = b.client().await;
    assert_eq!(again.get_data("/app/n3").await.unwrap().0, b"changed");
    assert!(again.check_stat("/after").await.unwrap().is_some());
    assert!(again.check_stat("/b39").await.unwrap().is_none(), "b's own history is gone for good");
}

trait ReplaceGet {
    fn replace_get_with(self, command: &str) -> Vec<u8>;
}

impl ReplaceGet for Vec<u8> {
    /// The same request for another command name.
    fn replace_get_with(self, command: &str) -> Vec<u8> {
        String::from_utf8(self).unwrap().replace("/commands/snapshot", &format!("/commands/{command}")).into_bytes()
    }
}

/// Bad input on both HTTP ports costs nothing else: a client that sends half a request and
/// stalls is cut after `admin.idleTimeout` while others are answered meanwhile, huge headers are
/// refused, a hundred idle connections do not stop anyone else, and garbage on the Prometheus
/// port gets 400 or a closed connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_huge_headers_and_garbage_cost_nothing_else() {
    let (port, metrics_port) = (oracle::free_port(), oracle::free_port());
    let srv = TestServer::start_with(|c| {
        c.admin = AdminSettings {
            port,
            address: "127.0.0.1".parse().unwrap(),
            idle_timeout: Duration::from_millis(1000),
            ..Default::default()
        };
        c.metrics_provider = warden_server::config::MetricsProvider::Prometheus;
        c.metrics = warden_server::admin::MetricsSettings { address: "127.0.0.1".parse().unwrap(), port: metrics_port };
    })
    .await;
    let admin = SocketAddr::from(([127, 0, 0, 1], port));
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_port));
    let client = srv.client().await;
    tokio::task::spawn_blocking(move || {
        // Half a request, then silence.
        let mut slow = TcpStream::connect(admin).unwrap();
        slow.write_all(b"GET /commands/ruok HTTP/1.1\r\nHost: x\r\n").unwrap();
        let started = std::time::Instant::now();
        let idle: Vec<TcpStream> = (0..100).map(|_| TcpStream::connect(admin).unwrap()).collect();
        assert_eq!(command(admin, "ruok")["command"], "ruok", "answered while others stall");
        assert_eq!(get(metrics, "/metrics").0, 200);
        slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest);
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(8), "the stalled request was cut after {waited:?}");
        let text = String::from_utf8_lossy(&rest);
        assert!(rest.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
        drop(idle);
        // Huge headers: one 200 KiB header, and 2000 small ones.
        let big = format!("GET /commands/ruok HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(200 << 10));
        let (status, _) = http(admin, big.as_bytes());
        assert!(status == 431 || status == 0, "a 200 KiB header answered {status}");
        let many: String = (0..2000).map(|i| format!("X-H{i}: v\r\n")).collect();
        let (status, _) = http(admin, format!("GET /commands/ruok HTTP/1.1\r\nHost: x\r\n{many}\r\n").as_bytes());
        assert!(status == 431 || status == 0, "2000 headers answered {status}");
        let (status, _) = http(metrics, b"\x00\x01\x02 not http at all\r\n\r\n");
        assert!(status == 400 || status == 0, "garbage on /metrics answered {status}");
        assert_eq!(command(admin, "ruok")["error"], Value::Null);
        assert_eq!(get(metrics, "/metrics").0, 200);
    })
    .await
    .unwrap();
    client.create("/still", b"ok", &CreateMode::Persistent.with_acls(zk::Acls::anyone_all())).await.unwrap();
    assert_eq!(client.get_data("/still").await.unwrap().0, b"ok", "clients unaffected");
}
