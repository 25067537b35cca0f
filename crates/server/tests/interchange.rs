//! Interchange test (issue 3): data directories move both ways between Apache ZooKeeper 3.8
//! (Debian's package, started here as a child process) and Warden (in-process `Server`).
//!
//! (A) ZooKeeper writes a data directory (snapCount=10, so several snapshots and logs): nodes of
//!     every type (persistent, ephemeral, persistent/ephemeral sequential, container, TTL and
//!     TTL-sequential with extendedTypesEnabled), data null vs empty vs binary vs large, ACLs
//!     (world, digest, ip, "auth" expanded to two digest identities, setACL twice), a multi, deletes,
//!     and two sessions still open with ephemerals: s1 (40 s, created early, so it is in
//!     snapshots) and s2 (10 s, created last, so most likely only in the log). The whole tree is
//!     dumped from ZooKeeper (path, data incl. null-ness, ACL, children, full Stat) as a super
//!     user, ZooKeeper is SIGKILLed, and Warden is started on the SAME directory: its dump must be
//!     identical, field for field (same zxids, same times; no normalisation).
//!     Node types are checked by behaviour (clients see ephemeralOwner 0 for containers and TTL
//!     nodes): Warden is restarted on the directory with a 200 ms container check and must delete
//!     exactly the emptied container and the expired short-TTL node.
//!     Then: s1 is resumed on Warden with its id and password and still owns its ephemerals;
//!     closing it removes them (well before its 40 s timeout); s2 is not resumed, and its
//!     ephemerals disappear when it expires, not before ~its timeout.
//! (B) The same workload on Warden (snapCount=10), Warden is stopped (`Server::stop`, which does
//!     not close sessions), ZooKeeper is started on Warden's directory (without
//!     `zookeeper.snapshot.trust.empty`): identical dump, and the same session and node-type checks on ZooKeeper.
//!
//! Run:   cargo test -p warden-server --test interchange -- --nocapture
//! Needs Apache ZooKeeper (`scripts/install-deps`); without it the test FAILS, it never skips.

#![allow(clippy::field_reassign_with_default, clippy::type_complexity)]

mod oracle;
#[path = "interchange/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use sha1::Digest as _;
use zk::{Acl, Acls, AuthId, Client, CreateMode, Permission, SessionInfo};
use zookeeper_client as zk;

use support::{RawClient, ZkProcess};
use warden_proto::Stat;

const SUPER: &str = "super:superpw";
const OP_TIMEOUT: Duration = Duration::from_secs(15);
const S1_TIMEOUT: Duration = Duration::from_secs(40);
const S2_TIMEOUT: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(3600);

fn digest_id(user_pw: &str) -> String {
    let user = user_pw.split(':').next().unwrap();
    let hash = sha1::Sha1::digest(user_pw.as_bytes());
    format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(hash))
}

/// zoo.cfg keys both servers get (ZooKeeper: as zoo.cfg lines and -Dzookeeper.<key>).
fn zk_extra() -> Vec<(&'static str, String)> {
    vec![
        ("snapCount", "10".into()),
        ("preAllocSize", "64".into()),
        ("DigestAuthenticationProvider.superDigest", digest_id(SUPER)),
    ]
}

fn warden_config(data: &Path) -> warden_server::Config {
    let mut cfg = warden_server::Config::default();
    cfg.client_port = 0;
    cfg.client_port_address = "127.0.0.1".parse().unwrap();
    cfg.data_dir = data.to_path_buf();
    cfg.data_log_dir = data.to_path_buf();
    cfg.tick_time_ms = 2000;
    cfg.min_session_timeout_ms = 4000;
    cfg.max_session_timeout_ms = 40000;
    cfg.extended_types_enabled = true;
    cfg.four_letter_whitelist = vec!["*".into()];
    cfg.container_check_interval_ms = 3_600_000;
    cfg.super_digest = Some(digest_id(SUPER));
    cfg.snap_count = 10;
    cfg.pre_alloc_bytes = 64 * 1024;
    cfg
}

/// Awaits `f` with a deadline; panics with `what` on timeout.
async fn t<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(OP_TIMEOUT, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {OP_TIMEOUT:?}"),
    }
}

async fn connect(addr: SocketAddr, timeout: Duration, auths: &[&str], detached: bool) -> Client {
    let mut conn = Client::connector().with_session_timeout(timeout).with_connection_timeout(Duration::from_secs(10));
    if detached {
        conn = conn.with_detached();
    }
    let c = t(&format!("connect to {addr}"), conn.connect(&addr.to_string()))
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    for a in auths {
        t("addAuth", c.auth("digest", a.as_bytes())).await.unwrap_or_else(|e| panic!("addAuth {a}: {e}"));
    }
    c
}

fn perm_bits(p: Permission) -> i32 {
    let all = [
        (1, Permission::READ),
        (2, Permission::WRITE),
        (4, Permission::CREATE),
        (8, Permission::DELETE),
        (16, Permission::ADMIN),
    ];
    all.iter().filter(|(_, q)| p.has(*q)).map(|(b, _)| b).sum()
}

// ---------------------------------------------------------------------------------------------
// Workload

/// What the workload leaves behind: two open sessions (detached clients) with ephemerals.
struct Populated {
    s1: SessionInfo,
    s1_id: i64,
    s1_eph: Vec<String>,
    s2_id: i64,
    s2_eph: Vec<String>,
    /// Detached clients; dropped only after the server is gone, so their sessions stay open.
    clients: Vec<Client>,
}

async fn populate(addr: SocketAddr) -> Populated {
    let admin = connect(addr, Duration::from_secs(30), &["user1:pw1", "user2:pw2"], false).await;
    let open = Acls::anyone_all();
    let persistent = CreateMode::Persistent.with_acls(open);
    let create = |path: &'static str, data: &'static [u8]| {
        let admin = admin.clone();
        let opts = persistent.clone();
        async move {
            t(path, admin.create(path, data, &opts)).await.unwrap_or_else(|e| panic!("create {path}: {e}"));
        }
    };
    create("/app", b"app-v0").await;
    create("/eph", b"").await;

    // s1: created early so several snapshots hold it.
    let s1 = connect(addr, S1_TIMEOUT, &["user1:pw1"], true).await;
    let mut s1_eph = Vec::new();
    let eph = CreateMode::Ephemeral.with_acls(Acls::creator_all());
    t("s1 eph", s1.create("/eph/s1", b"owned by s1", &eph)).await.unwrap();
    s1_eph.push("/eph/s1".to_string());
    let (_, seq) =
        t("s1 eseq", s1.create("/eph/s1-seq-", &[0, 1, 2], &CreateMode::EphemeralSequential.with_acls(open)))
            .await
            .unwrap();
    s1_eph.push(format!("/eph/s1-seq-{seq}"));
    t("s1 tmp", s1.create("/eph/s1-tmp", b"", &CreateMode::Ephemeral.with_acls(open))).await.unwrap();
    t("s1 tmp delete", s1.delete("/eph/s1-tmp", None)).await.unwrap();

    // Node types.
    create("/types", b"types").await;
    create("/types/p", b"persistent").await;
    let pseq = CreateMode::PersistentSequential.with_acls(open);
    let mut ps = Vec::new();
    for i in 0..3u8 {
        let (_, seq) = t("pseq", admin.create("/types/ps-", &[b'0' + i], &pseq)).await.unwrap();
        ps.push(format!("/types/ps-{seq}"));
    }
    t("delete pseq", admin.delete(&ps[1], Some(0))).await.unwrap();
    let container = CreateMode::Container.with_acls(open);
    t("container", admin.create("/types/c", b"container", &container)).await.unwrap();
    t("container child", admin.create("/types/c/child", b"x", &persistent)).await.unwrap();
    t("container child 2", admin.create("/types/c/gone", b"x", &persistent)).await.unwrap();
    t("container child 2 delete", admin.delete("/types/c/gone", None)).await.unwrap();
    t("empty container", admin.create("/types/c-empty", b"", &container)).await.unwrap();
    let ttl = CreateMode::Persistent.with_acls(open).with_ttl(TTL);
    t("ttl", admin.create("/types/ttl", b"ttl", &ttl)).await.unwrap();
    // Made empty after having had a child: a container is then deleted by the container check, a
    // persistent node is not; a TTL node with a short TTL expires. The servers that write the data
    // run that check only hourly, so these are still present when the directory changes hands.
    t("used container", admin.create("/types/c-used", b"", &container)).await.unwrap();
    t("used persistent", admin.create("/types/p-used", b"", &persistent)).await.unwrap();
    for parent in ["/types/c-used", "/types/p-used"] {
        let child = format!("{parent}/child");
        t("child", admin.create(&child, b"", &persistent)).await.unwrap();
        t("child delete", admin.delete(&child, None)).await.unwrap();
    }
    let ttl_short = CreateMode::Persistent.with_acls(open).with_ttl(Duration::from_millis(1000));
    t("short ttl", admin.create("/types/ttl-short", b"", &ttl_short)).await.unwrap();
    let ttl_seq = CreateMode::PersistentSequential.with_acls(open).with_ttl(Duration::from_millis(123_456_789));
    for _ in 0..2 {
        t("ttl seq", admin.create("/types/ttls-", b"ttl-seq", &ttl_seq)).await.unwrap();
    }

    // Data: null (raw client), empty, binary, large, set to null, set to empty.
    create("/data", b"").await;
    create("/data/empty", b"").await;
    let binary: Vec<u8> = (0..=255u8).collect();
    t("binary", admin.create("/data/binary", &binary, &persistent)).await.unwrap();
    let big: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    t("big", admin.create("/data/big", &big, &persistent)).await.unwrap();
    create("/data/utf8", "h\u{e9}llo \u{2713}".as_bytes()).await;
    create("/data/set-empty", b"was set").await;
    t("set empty", admin.set_data("/data/set-empty", b"", None)).await.unwrap();
    let raw = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<i32>> {
        let mut r = RawClient::connect(addr)?;
        let codes = vec![
            r.create("/data/null", None, 0)?,
            r.create("/data/set-null", Some(b"was set"), 0)?,
            r.set_data("/data/set-null", None)?,
            r.create("/data/null-seq-", None, 2)?,
        ];
        r.close();
        Ok(codes)
    });
    let codes = t("raw null-data writes", raw).await.unwrap().expect("raw client");
    assert_eq!(codes, vec![0, 0, 0, 0], "raw creates/setData with null data");

    // ACLs.
    create("/acl", b"").await;
    let u1 = digest_id("user1:pw1");
    let u2 = digest_id("user2:pw2");
    let acl_nodes: Vec<(&str, Vec<Acl>)> = vec![
        ("/acl/world-read", vec![Acl::new(Permission::READ, AuthId::anyone())]),
        ("/acl/digest", vec![Acl::new(Permission::ALL, AuthId::new("digest", &u1))]),
        (
            "/acl/digest-mixed",
            vec![
                Acl::new(Permission::READ | Permission::ADMIN, AuthId::new("digest", &u2)),
                Acl::new(Permission::CREATE | Permission::DELETE, AuthId::anyone()),
            ],
        ),
        ("/acl/ip", vec![Acl::new(Permission::ALL, AuthId::new("ip", "127.0.0.1"))]),
        (
            "/acl/ip-net",
            vec![
                Acl::new(Permission::READ, AuthId::new("ip", "10.0.0.0/8")),
                Acl::new(Permission::CREATE, AuthId::anyone()),
            ],
        ),
        (
            "/acl/nobody",
            vec![Acl::new(Permission::CREATE, AuthId::new("digest", "nobody:AAAAAAAAAAAAAAAAAAAAAAAAAAA="))],
        ),
    ];
    for (path, acls) in &acl_nodes {
        let opts = CreateMode::Persistent.with_acls(Acls::new(acls));
        t(path, admin.create(path, path.as_bytes(), &opts)).await.unwrap_or_else(|e| panic!("create {path}: {e}"));
    }
    // "auth" expands to every digest identity of the session (user1 and user2).
    t("auth acl", admin.create("/acl/auth", b"auth", &CreateMode::Persistent.with_acls(Acls::creator_all())))
        .await
        .unwrap();
    create("/acl/changed", b"").await;
    let changed1 =
        [Acl::new(Permission::ALL, AuthId::new("digest", &u1)), Acl::new(Permission::READ, AuthId::anyone())];
    t("setACL 1", admin.set_acl("/acl/changed", &Acls::new(&changed1), Some(0))).await.unwrap();
    let changed2 = [Acl::new(Permission::ALL, AuthId::anyone())];
    t("setACL 2", admin.set_acl("/acl/changed", &Acls::new(&changed2), Some(1))).await.unwrap();

    // Churn: enough txns for several snapshots (snapCount=10), with children counts/versions.
    create("/churn", b"").await;
    for i in 0..40u32 {
        let p = format!("/churn/n{i:02}");
        t("churn create", admin.create(&p, format!("v{i}").as_bytes(), &persistent)).await.unwrap();
        if i % 3 == 0 {
            t("churn set", admin.set_data(&p, format!("v{i}-b").as_bytes(), Some(0))).await.unwrap();
        }
        if i % 4 == 1 {
            t("churn delete", admin.delete(&format!("/churn/n{:02}", i - 1), None)).await.unwrap();
        }
        if i % 7 == 0 {
            t("app set", admin.set_data("/app", format!("app-v{i}").as_bytes(), None)).await.unwrap();
        }
    }
    // A multi: one txn of several ops.
    let mut m = admin.new_multi_writer();
    m.add_create("/churn/multi", b"m", &persistent).unwrap();
    m.add_set_data("/app", b"set in multi", None).unwrap();
    m.add_delete("/churn/n39", None).unwrap();
    m.add_check_version("/churn", 0).unwrap();
    let r = t("multi", m.commit()).await;
    r.unwrap_or_else(|e| panic!("multi: {e:?}"));

    // s2: created last, so (most likely) only in the log, not in a snapshot.
    let s2 = connect(addr, S2_TIMEOUT, &[], true).await;
    let mut s2_eph = Vec::new();
    t("s2 eph", s2.create("/eph/s2", b"owned by s2", &CreateMode::Ephemeral.with_acls(open))).await.unwrap();
    s2_eph.push("/eph/s2".to_string());
    let (_, seq) =
        t("s2 eseq", s2.create("/eph/s2-seq-", b"", &CreateMode::EphemeralSequential.with_acls(open))).await.unwrap();
    s2_eph.push(format!("/eph/s2-seq-{seq}"));
    t("s2 eseq under /types", s2.create("/types/p/eph", b"s2", &CreateMode::Ephemeral.with_acls(open))).await.unwrap();
    s2_eph.push("/types/p/eph".to_string());

    let pop = Populated {
        s1: s1.session().clone(),
        s1_id: s1.session_id().0,
        s1_eph,
        s2_id: s2.session_id().0,
        s2_eph,
        clients: vec![s1, s2],
    };
    drop(admin);
    pop
}

// ---------------------------------------------------------------------------------------------
// Dump

#[derive(Clone, Debug, PartialEq)]
struct Node {
    /// None = null (jute buffer length -1), as answered on the wire.
    data: Option<Vec<u8>>,
    acl: Vec<(i32, String, String)>,
    children: Vec<String>,
    stat: Stat,
}

type Dump = BTreeMap<String, Node>;

fn wire_stat(s: &zk::Stat) -> Stat {
    Stat {
        czxid: s.czxid,
        mzxid: s.mzxid,
        ctime: s.ctime,
        mtime: s.mtime,
        version: s.version,
        cversion: s.cversion,
        aversion: s.aversion,
        ephemeral_owner: s.ephemeral_owner,
        data_length: s.data_length,
        num_children: s.num_children,
        pzxid: s.pzxid,
    }
}

/// Dumps every node reachable from "/" as the super user. The tree must not change meanwhile.
async fn dump(name: &str, addr: SocketAddr) -> Dump {
    let c = connect(addr, Duration::from_secs(30), &[SUPER], false).await;
    let mut out = Dump::new();
    let mut stack = vec!["/".to_string()];
    while let Some(p) = stack.pop() {
        let (data, stat) = t(&p, c.get_data(&p)).await.unwrap_or_else(|e| panic!("{name}: getData {p}: {e}"));
        let (acl, astat) = t(&p, c.get_acl(&p)).await.unwrap_or_else(|e| panic!("{name}: getACL {p}: {e}"));
        let (mut children, cstat) =
            t(&p, c.get_children(&p)).await.unwrap_or_else(|e| panic!("{name}: getChildren2 {p}: {e}"));
        assert_eq!(
            wire_stat(&stat),
            wire_stat(&astat),
            "{name}: {p}: getData and getACL Stats differ (tree changed during dump?)"
        );
        assert_eq!(
            wire_stat(&stat),
            wire_stat(&cstat),
            "{name}: {p}: getData and getChildren2 Stats differ (tree changed during dump?)"
        );
        children.sort();
        for ch in &children {
            stack.push(if p == "/" { format!("/{ch}") } else { format!("{p}/{ch}") });
        }
        let acl = acl.iter().map(|a| (perm_bits(a.permission()), a.scheme().to_string(), a.id().to_string())).collect();
        out.insert(p, Node { data: Some(data), acl, children, stat: wire_stat(&stat) });
    }
    drop(c);
    // Null vs empty: the crate maps both to an empty Vec; ask on the wire.
    let paths: Vec<String> = out.keys().cloned().collect();
    let raw = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<Result<(Option<Vec<u8>>, Stat), i32>>> {
        let mut r = RawClient::connect(addr)?;
        let code = r.auth("digest", SUPER.as_bytes())?;
        if code != 0 {
            return Err(std::io::Error::other(format!("super auth failed: {code}")));
        }
        let mut v = Vec::new();
        for p in &paths {
            v.push(r.get_data(p)?);
        }
        r.close();
        Ok(v)
    });
    let raw = t("raw getData pass", raw).await.unwrap().unwrap_or_else(|e| panic!("{name}: raw client: {e}"));
    for ((p, node), r) in out.iter_mut().zip(raw) {
        let (data, stat) = r.unwrap_or_else(|e| panic!("{name}: raw getData {p}: error {e}"));
        assert_eq!(stat, node.stat, "{name}: {p}: Stat changed between the two dump passes");
        assert_eq!(
            data.clone().unwrap_or_default(),
            node.data.clone().unwrap(),
            "{name}: {p}: data changed between passes"
        );
        node.data = data;
    }
    out
}

fn show_data(d: &Option<Vec<u8>>) -> String {
    match d {
        None => "null".into(),
        Some(d) if d.len() <= 40 => format!("{} bytes {:?}", d.len(), String::from_utf8_lossy(d)),
        Some(d) => {
            let sum: u64 = d.iter().enumerate().map(|(i, b)| (i as u64 + 1) * *b as u64).sum();
            format!("{} bytes (weighted sum {sum}) starting {:?}", d.len(), String::from_utf8_lossy(&d[..40]))
        }
    }
}

/// Field-by-field differences between two dumps, as "path field: a=… b=…" lines.
fn compare(a_name: &str, a: &Dump, b_name: &str, b: &Dump) -> Vec<String> {
    let mut diffs = Vec::new();
    let paths: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for p in paths {
        match (a.get(p), b.get(p)) {
            (Some(_), None) => diffs.push(format!("{p}: present in {a_name}, missing in {b_name}")),
            (None, Some(_)) => diffs.push(format!("{p}: missing in {a_name}, present in {b_name}")),
            (Some(x), Some(y)) => {
                let mut f = |field: &str, xv: String, yv: String| {
                    if xv != yv {
                        diffs.push(format!("{p} {field}: {a_name}={xv} {b_name}={yv}"));
                    }
                };
                if x.data != y.data {
                    f("data", show_data(&x.data), show_data(&y.data));
                }
                f("acl", format!("{:?}", x.acl), format!("{:?}", y.acl));
                f("children", format!("{:?}", x.children), format!("{:?}", y.children));
                let (s, u) = (&x.stat, &y.stat);
                f("czxid", format!("{:#x}", s.czxid), format!("{:#x}", u.czxid));
                f("mzxid", format!("{:#x}", s.mzxid), format!("{:#x}", u.mzxid));
                f("pzxid", format!("{:#x}", s.pzxid), format!("{:#x}", u.pzxid));
                f("ctime", s.ctime.to_string(), u.ctime.to_string());
                f("mtime", s.mtime.to_string(), u.mtime.to_string());
                f("version", s.version.to_string(), u.version.to_string());
                f("cversion", s.cversion.to_string(), u.cversion.to_string());
                f("aversion", s.aversion.to_string(), u.aversion.to_string());
                f("ephemeralOwner", format!("{:#x}", s.ephemeral_owner), format!("{:#x}", u.ephemeral_owner));
                f("dataLength", s.data_length.to_string(), u.data_length.to_string());
                f("numChildren", s.num_children.to_string(), u.num_children.to_string());
            }
            (None, None) => unreachable!(),
        }
    }
    diffs
}

/// Sanity checks that the workload produced what the test claims to cover.
fn check_coverage(name: &str, d: &Dump, pop: &Populated) {
    let get = |p: &str| d.get(p).unwrap_or_else(|| panic!("{name}: {p} missing from dump"));
    assert_eq!(get("/data/null").data, None, "{name}: /data/null must read back as null");
    assert_eq!(get("/data/set-null").data, None, "{name}: /data/set-null must read back as null");
    assert_eq!(get("/data/empty").data, Some(vec![]), "{name}: /data/empty must read back as empty, not null");
    // ZooKeeper answers ephemeralOwner 0 for containers and TTL nodes (DataNode.getClientEphemeralOwner);
    // their types are checked by behaviour instead (`check_types`).
    assert_eq!(get("/types/ttl").stat.ephemeral_owner, 0, "{name}: client-visible ephemeralOwner of a TTL node");
    assert_eq!(get("/types/c").stat.ephemeral_owner, 0, "{name}: client-visible ephemeralOwner of a container");
    for p in &pop.s1_eph {
        assert_eq!(get(p).stat.ephemeral_owner, pop.s1_id, "{name}: {p} owned by s1");
    }
    for p in &pop.s2_eph {
        assert_eq!(get(p).stat.ephemeral_owner, pop.s2_id, "{name}: {p} owned by s2");
    }
    assert_eq!(get("/acl/auth").acl.len(), 2, "{name}: auth ACL expands to both digest identities");
}

/// `ls -l`-like listing of `<dir>/version-2`, and the number of snapshot and log files.
fn listing(dir: &Path) -> (String, usize, usize) {
    let v2 = dir.join("version-2");
    let mut names: Vec<(String, u64)> = std::fs::read_dir(&v2)
        .unwrap_or_else(|e| panic!("reading {}: {e}", v2.display()))
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), e.metadata().map(|m| m.len()).unwrap_or(0))
        })
        .collect();
    names.sort();
    let snaps = names.iter().filter(|(n, _)| n.starts_with("snapshot.")).count();
    let logs = names.iter().filter(|(n, _)| n.starts_with("log.")).count();
    let text = names.iter().map(|(n, l)| format!("    {n:<28} {l:>10}")).collect::<Vec<_>>().join("\n");
    (format!("{}:\n{text}", v2.display()), snaps, logs)
}

/// On the server that took over the directory: s1 resumes with its id and password and still
/// owns its ephemerals; closing it removes them promptly. s2 is left alone and must expire, not
/// much before its timeout (counted from `started`, just after the server began serving).
async fn check_sessions(name: &str, addr: SocketAddr, started: Instant, pop: &Populated) -> Vec<String> {
    let mut diffs = Vec::new();
    let observer = connect(addr, Duration::from_secs(30), &[SUPER], false).await;
    let conn = Client::connector()
        .with_session(pop.s1.clone())
        .with_session_timeout(S1_TIMEOUT)
        .with_connection_timeout(Duration::from_secs(10));
    match t("resume s1", conn.connect(&addr.to_string())).await {
        Err(e) => diffs.push(format!("{name}: resuming s1 ({:#x}) failed: {e}", pop.s1_id)),
        Ok(c) => {
            // Auth is per connection, not per session: /eph/s1 is user1's (creator ACL).
            if let Err(e) = t("s1 re-auth", c.auth("digest", b"user1:pw1")).await {
                diffs.push(format!("{name}: addAuth on resumed s1 failed: {e}"));
            }
            if c.session_id().0 != pop.s1_id {
                diffs.push(format!(
                    "{name}: resumed s1 got session {:#x}, expected {:#x}",
                    c.session_id().0,
                    pop.s1_id
                ));
            }
            for p in &pop.s1_eph {
                match t("s1 exists", c.check_stat(p)).await {
                    Ok(Some(s)) if s.ephemeral_owner == pop.s1_id => {}
                    other => diffs.push(format!(
                        "{name}: after resuming s1, {p}: {other:?} (expected owned by {:#x})",
                        pop.s1_id
                    )),
                }
            }
            drop(c); // not detached: closeSession
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let mut left = Vec::new();
                for p in &pop.s1_eph {
                    if t("observer exists", observer.check_stat(p)).await.unwrap().is_some() {
                        left.push(p.clone());
                    }
                }
                if left.is_empty() {
                    break;
                }
                if Instant::now() > deadline {
                    diffs.push(format!("{name}: s1 closed but its ephemerals {left:?} still exist after 15 s"));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // s2 expiry.
    let deadline = started + S2_TIMEOUT + Duration::from_secs(20);
    loop {
        let mut left = 0;
        for p in &pop.s2_eph {
            if t("observer exists", observer.check_stat(p)).await.unwrap().is_some() {
                left += 1;
            }
        }
        let elapsed = started.elapsed();
        if left == 0 {
            println!(
                "{name}: s2 ({:#x}, timeout {S2_TIMEOUT:?}) expired {elapsed:?} after the server started",
                pop.s2_id
            );
            if elapsed + Duration::from_secs(3) < S2_TIMEOUT {
                diffs.push(format!(
                    "{name}: s2's ephemerals vanished {elapsed:?} after start, before its {S2_TIMEOUT:?} timeout"
                ));
            }
            break;
        }
        if Instant::now() > deadline {
            diffs.push(format!(
                "{name}: s2 ({:#x}) did not expire within {:?} of start",
                pop.s2_id,
                deadline - started
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    diffs
}

/// Node types survive the move: on a server restarted on the directory with a short container
/// check interval, the emptied container and the expired short-TTL node go; the emptied persistent
/// node, the never-used container, the container with a child and the long-TTL nodes stay.
async fn check_types(name: &str, addr: SocketAddr) -> Vec<String> {
    let mut diffs = Vec::new();
    let c = connect(addr, Duration::from_secs(30), &[SUPER], false).await;
    let gone = ["/types/c-used", "/types/ttl-short"];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut left = Vec::new();
        for p in gone {
            if t("exists", c.check_stat(p)).await.unwrap().is_some() {
                left.push(p);
            }
        }
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            diffs.push(format!("{name}: {left:?} not deleted by the container/TTL check within 20 s (type lost?)"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Several more check intervals: the others must survive them.
    let until = Instant::now() + Duration::from_millis(1500);
    let (mut ttls, _) = t("children", c.get_children("/types")).await.unwrap();
    ttls.retain(|n| n.starts_with("ttls-"));
    let mut stay: Vec<String> =
        ["/types/c", "/types/c-empty", "/types/p-used", "/types/ttl", "/types/p"].map(String::from).to_vec();
    stay.extend(ttls.iter().map(|n| format!("/types/{n}")));
    loop {
        for p in &stay {
            if t("exists", c.check_stat(p)).await.unwrap().is_none() {
                diffs.push(format!("{name}: {p} was deleted by the container/TTL check but must stay"));
            }
        }
        if !diffs.is_empty() || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    diffs
}

/// A difference when the server's `mntr` reports digest mismatches (or none at all).
fn digest_mismatches(name: &str, addr: SocketAddr) -> Option<String> {
    let mntr = oracle::four_letter(addr, "mntr").unwrap_or_default();
    let count = mntr.lines().find_map(|l| l.strip_prefix("zk_digest_mismatches_count\t"));
    match count.map(str::trim) {
        Some("0") => None,
        other => Some(format!("{name}: zk_digest_mismatches_count {other:?}")),
    }
}

fn report(title: &str, diffs: &[String]) {
    if diffs.is_empty() {
        println!("{title}: no differences");
        return;
    }
    println!("{title}: {} difference(s):", diffs.len());
    for d in diffs {
        println!("  {d}");
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

/// (A) ZooKeeper writes, Warden serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_data_dir_is_served_by_warden() {
    let classpath = support::zk_classpath();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();

    let mut zk_proc = ZkProcess::start(&classpath, &data, &zk_extra(), 3_600_000);
    let mut pop = populate(zk_proc.addr).await;
    let zk_dump = dump("zookeeper", zk_proc.addr).await;
    check_coverage("zookeeper", &zk_dump, &pop);
    zk_proc.kill(); // SIGKILL with s1 and s2 open
    drop(std::mem::take(&mut pop.clients)); // detached: no closeSession
    let (list, snaps, logs) = listing(&data);
    println!("(A) written by Apache ZooKeeper ({} nodes):\n{list}", zk_dump.len());
    assert!(
        snaps >= 3 && logs >= 3,
        "(A) expected several snapshots and logs from ZooKeeper with snapCount=10:\n{list}"
    );

    let server = warden_server::Server::start(warden_config(&data))
        .await
        .unwrap_or_else(|e| panic!("(A) Warden refused ZooKeeper's data directory: {e:#}\n{list}"));
    let started = Instant::now();
    let warden_dump = dump("warden", server.local_addr).await;
    let mut diffs = compare("zookeeper", &zk_dump, "warden", &warden_dump);
    // ZooKeeper's snapshots carry its tree digest: the tree Warden rebuilt (snapshot, then log)
    // has it.
    diffs.extend(digest_mismatches("warden", server.local_addr));
    diffs.extend(check_sessions("warden", server.local_addr, started, &pop).await);
    let (list2, _, _) = listing(&data);
    println!("(A) after Warden started on it:\n{list2}");
    let stopped = tokio::time::timeout(Duration::from_secs(10), server.stop()).await;
    drop(pop);
    match stopped {
        Err(_) => diffs.push("warden: stop() did not finish within 10 s".into()),
        Ok(Err(e)) => diffs.push(format!("warden: stop() failed: {e:#}")),
        Ok(Ok(())) => {}
    }
    let mut cfg = warden_config(&data);
    cfg.container_check_interval_ms = 200;
    let server = warden_server::Server::start(cfg).await.unwrap_or_else(|e| panic!("(A) Warden restart: {e:#}"));
    diffs.extend(check_types("warden (restarted)", server.local_addr).await);
    let _ = tokio::time::timeout(Duration::from_secs(10), server.stop()).await;
    report("(A) ZooKeeper -> Warden", &diffs);
    assert!(diffs.is_empty(), "(A) ZooKeeper -> Warden: {} difference(s):\n{}\n{list}", diffs.len(), diffs.join("\n"));
}

/// (B) Warden writes, ZooKeeper serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_data_dir_is_served_by_zookeeper() {
    let classpath = support::zk_classpath();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();

    let server = warden_server::Server::start(warden_config(&data)).await.expect("start Warden");
    let mut pop = populate(server.local_addr).await;
    let warden_dump = dump("warden", server.local_addr).await;
    check_coverage("warden", &warden_dump, &pop);
    let stopped = tokio::time::timeout(Duration::from_secs(10), server.stop()).await;
    let mut diffs = Vec::new();
    match stopped {
        Err(_) => diffs.push("warden: stop() did not finish within 10 s".into()),
        Ok(Err(e)) => diffs.push(format!("warden: stop() failed: {e:#}")),
        Ok(Ok(())) => {}
    }
    drop(std::mem::take(&mut pop.clients)); // detached: no closeSession
    let (list, snaps, logs) = listing(&data);
    println!("(B) written by Warden ({} nodes):\n{list}", warden_dump.len());
    assert!(snaps >= 2 && logs >= 2, "(B) expected several snapshots and logs from Warden with snapCount=10:\n{list}");

    // No -Dzookeeper.snapshot.trust.empty: Warden snapshots at start-up, so there is always one.
    let zk_proc = ZkProcess::start(&classpath, &data, &zk_extra(), 3_600_000);
    let started = Instant::now();
    let zk_dump = dump("zookeeper", zk_proc.addr).await;
    diffs.extend(compare("warden", &warden_dump, "zookeeper", &zk_dump));
    // Warden's snapshots carry the tree digest, which ZooKeeper checks as it loads one.
    diffs.extend(digest_mismatches("zookeeper", zk_proc.addr));
    diffs.extend(check_sessions("zookeeper", zk_proc.addr, started, &pop).await);
    let (list2, _, _) = listing(&data);
    println!("(B) after ZooKeeper started on it:\n{list2}");
    drop(zk_proc);
    drop(pop);
    let zk_proc = ZkProcess::start(&classpath, &data, &zk_extra(), 200);
    diffs.extend(check_types("zookeeper (restarted)", zk_proc.addr).await);
    drop(zk_proc);
    report("(B) Warden -> ZooKeeper", &diffs);
    assert!(diffs.is_empty(), "(B) Warden -> ZooKeeper: {} difference(s):\n{}\n{list}", diffs.len(), diffs.join("\n"));
}
