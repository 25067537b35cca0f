//! Directed differential cases: fixed request sequences run against Apache ZooKeeper 3.8 (Debian's
//! package, a child process) and against Warden (in-process) over the raw protocol, each server's
//! answers written down as one transcript, and the two transcripts compared line by line. Where the
//! randomized `differential` test explores, these pin the cases real clients were seen to hit
//! (issue 25):
//! - `addauth digest` with credentials that are not `user:password` (`blah`, empty, `a:b:c`,
//!   non-ASCII, bytes that are not UTF-8), the ids each server derives (read back through the
//!   `auth` ACL scheme and whoAmI), and reads of nodes whose digest ACL matches or does not;
//!   `addauth ip`, and schemes without a provider (AUTHFAILED, then the connection closes);
//! - a getChildren of 10,000 children named by 2,000 hex characters (a 20 MB reply, twenty times
//!   jute.maxbuffer), getChildren2, getAllChildrenNumber and a multiRead over it;
//! - the version lines of srvr, stat, envi and mntr, parsed by one regex for both servers.
//!
//! Needs Apache ZooKeeper (`scripts/install-deps`); without it the test FAILS, it never skips.
//! Run: cargo test -p warden-server --test differential_cases -- --nocapture

mod common;
mod oracle;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Instant;

use base64::Engine as _;
use common::{version_line_regex, RawClient};
use sha1::Digest as _;
use tokio::task::JoinSet;
use warden_proto::request::{AuthPacket, CreateRequest, MultiOp, PathWatch, Request};
use warden_proto::{perms, xid, Acl, Id, MultiResult, Response};
use zookeeper_client as zk;

/// Credentials for `addauth digest`, as bytes on the wire.
const CREDENTIALS: &[&[u8]] =
    &[b"blah", b"", b"a:b:c", b"user:password", b":leading", "\u{fc}ser:pw\u{e9}".as_bytes(), b"\xff\xfe:x"];
const CHILDREN: usize = 10_000;
const NAME_LEN: usize = 2_000;

/// Both servers, started fresh: Apache ZooKeeper first, then Warden.
struct Servers {
    zk: oracle::ZkProcess,
    warden: warden_server::Server,
    _dir: tempfile::TempDir,
}

impl Servers {
    async fn start() -> Servers {
        let zk = oracle::ZkProcess::start_fresh(&oracle::zk_classpath());
        let dir = tempfile::tempdir().unwrap();
        let cfg = warden_server::Config { four_letter_whitelist: vec!["*".into()], ..common::test_config(dir.path()) };
        let warden = warden_server::Server::start(cfg).await.expect("warden starts");
        Servers { zk, warden, _dir: dir }
    }

    fn both(&self) -> [(&'static str, SocketAddr); 2] {
        [("zookeeper", self.zk.addr), ("warden", self.warden.local_addr)]
    }

    async fn stop(self) {
        drop(self.zk);
        self.warden.stop().await.expect("warden stops");
    }
}

/// Fails with both transcripts side by side, marking the lines that differ.
fn assert_same(case: &str, zk: &[String], warden: &[String]) {
    if zk == warden {
        println!("{case}: {} lines agree", zk.len());
        return;
    }
    let mut report = format!("{case}: Apache ZooKeeper and Warden differ\n");
    for i in 0..zk.len().max(warden.len()) {
        let (z, w) = (zk.get(i).map_or("<none>", String::as_str), warden.get(i).map_or("<none>", String::as_str));
        let mark = if z == w { ' ' } else { '!' };
        let _ = writeln!(report, "{mark} zookeeper: {z}\n{mark} warden:    {w}");
    }
    panic!("{report}");
}

fn auth(scheme: &str, cred: &[u8]) -> Request {
    Request::Auth(AuthPacket { auth_type: 0, scheme: scheme.into(), auth: cred.to_vec() })
}

fn get_data(path: &str) -> Request {
    Request::GetData(PathWatch { path: path.into(), watch: false })
}

fn create(path: &str, acl: Vec<Acl>) -> Request {
    Request::Create(CreateRequest { path: path.into(), data: Some(b"secret".to_vec()), acl, flags: 0 })
}

/// The digest id ZooKeeper's generateDigest derives, computed here independently of Warden: the
/// text before the first colon, then BASE64(SHA1) of the whole credential as Java decodes it.
fn expected_digest_id(cred: &[u8]) -> String {
    let text = String::from_utf8_lossy(cred);
    let user = text.split(':').next().unwrap_or_default();
    format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(sha1::Sha1::digest(text.as_bytes())))
}

/// A reply as one line: the error code, and what the body says that both servers must agree on.
fn line(what: &str, (h, body): (warden_proto::ReplyHeader, Option<Response>)) -> String {
    let body = match body {
        None | Some(Response::Empty) => String::new(),
        Some(Response::GetData { data, .. }) => format!(" data {:?}", data.map(String::from_utf8)),
        Some(Response::GetAcl { acl, .. }) => {
            let ids: Vec<String> = acl.iter().map(|a| format!("{}:{}:{}", a.perms, a.id.scheme, a.id.id)).collect();
            format!(" acl {ids:?}")
        }
        Some(Response::WhoAmI(infos)) => {
            // ZooKeeper lists a connection's ids from a hash set (ServerCnxn.authInfo), in no
            // order it specifies; they are compared sorted.
            let mut who: Vec<String> = infos.iter().map(|i| format!("{}={}", i.auth_scheme, i.user)).collect();
            who.sort();
            format!(" whoami {who:?}")
        }
        Some(Response::Create { path }) => format!(" created {path}"),
        Some(other) => format!(" {other:?}"),
    };
    format!("{what}: err {}{body}", h.err)
}

async fn auth_transcript(addr: SocketAddr) -> Vec<String> {
    let mut t = Vec::new();
    let auth_acl = vec![Acl::new(perms::ALL, Id::new("auth", ""))];
    for (i, cred) in CREDENTIALS.iter().enumerate() {
        let shown = String::from_utf8_lossy(cred);
        // A session authenticates, creates a node for "whoever I authenticated as", and reads back
        // the id the server derived.
        let mut owner = RawClient::new_session(addr, 10_000).await;
        t.push(line(&format!("addauth digest {shown:?}"), owner.call_with_xid(xid::AUTH, &auth("digest", cred)).await));
        let path = format!("/auth{i}");
        t.push(line(&format!("create {path} auth ACL"), owner.call(&create(&path, auth_acl.clone())).await));
        let acl = owner.call(&Request::GetAcl(warden_proto::request::PathRequest { path: path.clone() })).await;
        t.push(line(&format!("getACL {path}"), acl));
        t.push(line("whoAmI", owner.call(&Request::WhoAmI).await));
        // A node whose ACL is the digest id computed here.
        let dig = format!("/digest{i}");
        let acl = vec![Acl::new(perms::ALL, Id::new("digest", expected_digest_id(cred)))];
        t.push(line(&format!("create {dig} digest ACL"), owner.call(&create(&dig, acl)).await));

        let mut anonymous = RawClient::new_session(addr, 10_000).await;
        let mut same = RawClient::new_session(addr, 10_000).await;
        same.call_with_xid(xid::AUTH, &auth("digest", cred)).await;
        let mut other = RawClient::new_session(addr, 10_000).await;
        other.call_with_xid(xid::AUTH, &auth("digest", &[*cred, b"x"].concat())).await;
        for p in [&path, &dig] {
            t.push(line(&format!("getData {p} unauthenticated"), anonymous.call(&get_data(p)).await));
            t.push(line(&format!("getData {p} same credential"), same.call(&get_data(p)).await));
            t.push(line(&format!("getData {p} other credential"), other.call(&get_data(p)).await));
        }
        for c in [owner, anonymous, same, other] {
            c.disconnect().await;
        }
    }
    // ip: accepted, adding the address the connection already has.
    let mut c = RawClient::new_session(addr, 10_000).await;
    t.push(line("addauth ip whatever", c.call_with_xid(xid::AUTH, &auth("ip", b"whatever")).await));
    t.push(line("whoAmI", c.call(&Request::WhoAmI).await));
    c.disconnect().await;
    // No provider: AUTHFAILED, then the server closes the connection.
    for scheme in ["world", "sasl", "super", "nosuchscheme"] {
        let mut c = RawClient::new_session(addr, 10_000).await;
        t.push(line(&format!("addauth {scheme} x"), c.call_with_xid(xid::AUTH, &auth(scheme, b"x")).await));
        c.expect_closed().await;
        t.push(format!("addauth {scheme}: connection closed"));
    }
    t
}

fn names() -> Vec<String> {
    (0..CHILDREN).map(|i| format!("{i:08x}").repeat(NAME_LEN / 8)).collect()
}

/// Creates /big and its children through `zookeeper-client`, 500 in flight.
async fn populate(addr: SocketAddr, names: &[String]) {
    let c = common::connect(&addr.to_string()).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    c.create("/big", b"", &opts).await.unwrap();
    for chunk in names.chunks(500) {
        let mut set = JoinSet::new();
        for name in chunk {
            let (c, path) = (c.clone(), format!("/big/{name}"));
            set.spawn(async move {
                let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                c.create(&path, b"", &opts).await.map(|_| ())
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
    }
}

async fn big_transcript(server: &str, addr: SocketAddr, names: &[String]) -> Vec<String> {
    let started = Instant::now();
    populate(addr, names).await;
    println!("{server}: created {} children in {:.1?}", names.len(), started.elapsed());
    let mut t = Vec::new();
    let mut c = RawClient::new_session(addr, 30_000).await;
    let describe = |children: &mut Vec<String>| {
        children.sort_unstable();
        let bytes: usize = children.iter().map(|n| 4 + n.len()).sum();
        format!("{} names, {bytes} bytes of names, the ones created: {}", children.len(), children == names)
    };
    let started = Instant::now();
    let (h, body) = c.call(&Request::GetChildren(PathWatch { path: "/big".into(), watch: false })).await;
    println!("{server}: getChildren answered in {:.1?}", started.elapsed());
    match body {
        Some(Response::Children { mut children }) => {
            t.push(format!("getChildren: err {}, {}", h.err, describe(&mut children)))
        }
        other => t.push(line("getChildren", (h, other))),
    }
    let (h, body) = c.call(&Request::GetChildren2(PathWatch { path: "/big".into(), watch: true })).await;
    match body {
        Some(Response::Children2 { mut children, stat }) => t.push(format!(
            "getChildren2 (watch): err {}, {}, numChildren {}",
            h.err,
            describe(&mut children),
            stat.num_children
        )),
        other => t.push(line("getChildren2", (h, other))),
    }
    let path = warden_proto::request::PathRequest { path: "/big".into() };
    t.push(line("getAllChildrenNumber", c.call(&Request::GetAllChildrenNumber(path)).await));
    let ops = vec![
        MultiOp::GetChildren(PathWatch { path: "/big".into(), watch: false }),
        MultiOp::GetData(PathWatch { path: "/big".into(), watch: false }),
    ];
    let (h, body) = c.call(&Request::MultiRead(ops)).await;
    match body {
        Some(Response::Multi(results)) => {
            for r in results {
                t.push(match r {
                    MultiResult::GetChildren { mut children } => {
                        format!("multiRead getChildren: {}", describe(&mut children))
                    }
                    MultiResult::GetData { data, stat } => {
                        format!("multiRead getData: {:?}, numChildren {}", data, stat.num_children)
                    }
                    other => format!("multiRead: {other:?}"),
                });
            }
        }
        other => t.push(line("multiRead", (h, other))),
    }
    // The connection goes on serving, and the child watch set by the large read fires.
    let small = Request::Create(CreateRequest { path: "/big/z".into(), data: None, acl: Acl::open_unsafe(), flags: 0 });
    t.push(line("create /big/z", c.call(&small).await));
    let (_, event) = c.next_notification().await;
    t.push(format!("notification {:?} {}", event.event_type, event.path));
    c.disconnect().await;
    t
}

async fn version_transcript(addr: SocketAddr) -> (Vec<String>, String) {
    let mut t = Vec::new();
    let mut versions = Vec::new();
    for (word, prefix) in [
        ("srvr", "Zookeeper version: "),
        ("stat", "Zookeeper version: "),
        ("envi", "zookeeper.version="),
        ("mntr", "zk_version\t"),
    ] {
        let text = common::four_letter(addr, word).await;
        let re = version_line_regex(prefix);
        let caps = text.lines().find_map(|l| re.captures(l));
        t.push(format!("{word}: version line matches: {}", caps.is_some()));
        if let Some(c) = caps {
            versions.push(c[1].to_string());
        } else {
            t.push(format!("{word} said: {:?}", text.lines().take(3).collect::<Vec<_>>()));
        }
    }
    versions.dedup();
    t.push(format!("one version in all four: {}", versions.len() == 1));
    (t, versions.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn digest_credentials_are_accepted_as_zookeeper_accepts_them() {
    let servers = Servers::start().await;
    let mut transcripts = Vec::new();
    for (_, addr) in servers.both() {
        transcripts.push(auth_transcript(addr).await);
    }
    servers.stop().await;
    assert_same("addauth", &transcripts[0], &transcripts[1]);
    // What the transcripts must say, beyond agreeing.
    let t = &transcripts[1];
    assert!(t.iter().any(|l| l == "addauth digest \"blah\": err 0"), "{t:#?}");
    let blah = format!("getACL /auth0: err 0 acl [\"31:digest:{}\"]", expected_digest_id(b"blah"));
    assert!(t.contains(&blah), "{t:#?}");
    assert!(t.iter().any(|l| l == "getData /digest2 same credential: err 0 data Some(Ok(\"secret\"))"), "{t:#?}");
    assert!(t.iter().any(|l| l == "getData /digest2 other credential: err -102"), "{t:#?}");
    assert!(t.iter().any(|l| l == "addauth ip whatever: err 0"), "{t:#?}");
    assert!(t.iter().any(|l| l == "addauth world x: err -115"), "{t:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_twenty_megabyte_child_list_is_answered_as_zookeeper_answers_it() {
    let servers = Servers::start().await;
    let names = names();
    let mut transcripts = Vec::new();
    for (server, addr) in servers.both() {
        transcripts.push(big_transcript(server, addr, &names).await);
    }
    servers.stop().await;
    assert_same("20 MB getChildren", &transcripts[0], &transcripts[1]);
    let t = &transcripts[1];
    let expected =
        format!("getChildren: err 0, 10000 names, {} bytes of names, the ones created: true", 10_000 * 2_004);
    assert_eq!(t[0], expected);
    assert_eq!(t[2], "getAllChildrenNumber: err 0 AllChildrenNumber(10000)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn version_lines_parse_alike() {
    let servers = Servers::start().await;
    let mut transcripts = Vec::new();
    let mut versions = Vec::new();
    for (_, addr) in servers.both() {
        let (t, v) = version_transcript(addr).await;
        transcripts.push(t);
        versions.push(v);
    }
    servers.stop().await;
    println!("versions: zookeeper {:?}, warden {:?}", versions[0], versions[1]);
    assert_same("version lines", &transcripts[0], &transcripts[1]);
    assert!(transcripts[1].iter().all(|l| l.ends_with("true")), "{:#?}", transcripts[1]);
    assert!(versions[1].starts_with("3.9.3-warden-"), "{versions:?}");
}
