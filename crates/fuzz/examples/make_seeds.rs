//! Writes the seeds Warden's own encoders make into `fuzz/corpus/<target>/` (files named
//! `warden-*`; seeds captured from other clients and servers sit beside them under other names).
//! Deterministic: running it again rewrites the same files.
//!
//! `cargo run -p warden-fuzz --example make_seeds [FUZZ_DIR]`

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use warden_proto::election::{frame_message, InitialMessage, Notification, ServerState, PROTOCOL_VERSION_V2};
use warden_proto::quorum::{auth_status, packet_type as pt, LearnerInfo, QuorumAuthPacket, QuorumPacket};
use warden_proto::request::GetEphemeralsRequest;
use warden_proto::request::{
    AddWatchRequest, AuthPacket, CreateRequest, CreateTtlRequest, MultiOp, PathRequest, PathVersion, PathWatch,
    ReconfigRequest, SaslRequest, SetAclRequest, SetDataRequest, SetWatches, SetWatches2, WatchesRequest,
};
use warden_proto::{encode_frame, Acl, ConnectRequest, Id, Record, Request, Txn, TxnDigest, TxnHeader, Writer};
use warden_quorum::zab::codec;
use warden_quorum::zab::TxnEntry;
use warden_storage::{Compression, DataDir, FaultFs, Fs, SnapshotOptions};
use warden_tree::DataTree;

struct Out(PathBuf);

impl Out {
    fn put(&self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.0.join("corpus").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("warden-{name}")), bytes).unwrap();
    }
}

fn acl() -> Vec<Acl> {
    vec![Acl::new(31, Id::new("world", "anyone")), Acl::new(1, Id::new("digest", "bob:abc="))]
}

fn requests() -> Vec<Request> {
    let create = CreateRequest { path: "/a/b".into(), data: Some(b"data".to_vec()), acl: acl(), flags: 2 };
    let ttl = CreateTtlRequest { path: "/t".into(), data: None, acl: acl(), flags: 5, ttl: 60_000 };
    let pv = PathVersion { path: "/a".into(), version: 3 };
    let pw = PathWatch { path: "/a".into(), watch: true };
    let pr = PathRequest { path: "/a".into() };
    let set = SetDataRequest { path: "/a".into(), data: Some(Bytes::from_static(b"new")), version: -1 };
    let wr = WatchesRequest { path: "/a".into(), watcher_type: 1 };
    let sw = SetWatches {
        relative_zxid: 0x1_0000_0005,
        data: vec!["/a".into(), "/b".into()],
        exist: vec!["/c".into()],
        child: vec!["/".into()],
    };
    vec![
        Request::Create(create.clone()),
        Request::Delete(pv.clone()),
        Request::Exists(pw.clone()),
        Request::GetData(pw.clone()),
        Request::SetData(set.clone()),
        Request::GetAcl(pr.clone()),
        Request::SetAcl(SetAclRequest { path: "/a".into(), acl: acl(), version: 0 }),
        Request::GetChildren(pw.clone()),
        Request::Sync(pr.clone()),
        Request::Ping,
        Request::GetChildren2(pw.clone()),
        Request::Multi(vec![
            MultiOp::Create(create.clone()),
            MultiOp::Create2(create.clone()),
            MultiOp::CreateContainer(create.clone()),
            MultiOp::CreateTtl(ttl.clone()),
            MultiOp::Delete(pv.clone()),
            MultiOp::SetData(set.clone()),
            MultiOp::Check(pv.clone()),
        ]),
        Request::Create2(create.clone()),
        Request::Reconfig(ReconfigRequest {
            joining: Some("server.4=127.0.0.1:2891:3891:participant;2184".into()),
            leaving: Some("2".into()),
            new_members: None,
            cur_config_id: -1,
        }),
        Request::CheckWatches(wr.clone()),
        Request::RemoveWatches(wr),
        Request::CreateContainer(create),
        Request::DeleteContainer(pr.clone()),
        Request::CreateTtl(ttl),
        Request::MultiRead(vec![MultiOp::GetChildren(pw.clone()), MultiOp::GetData(pw)]),
        Request::Auth(AuthPacket { auth_type: 0, scheme: "digest".into(), auth: b"bob:secret".to_vec() }),
        Request::SetWatches(sw.clone()),
        Request::Sasl(SaslRequest { token: b"charset=utf-8,username=\"bob\"".to_vec() }),
        Request::GetEphemerals(GetEphemeralsRequest { prefix: "/e".into() }),
        Request::GetAllChildrenNumber(pr),
        Request::SetWatches2(SetWatches2 {
            base: sw,
            persistent: vec!["/p".into()],
            persistent_recursive: vec!["/r".into()],
        }),
        Request::AddWatch(AddWatchRequest { path: "/w".into(), mode: 1 }),
        Request::WhoAmI,
        Request::CloseSession,
    ]
}

fn name_of(req: &Request) -> String {
    format!("{:?}", req.op_code()).to_lowercase()
}

fn client(out: &Out) {
    let connect = [
        ("connect-readonly", ConnectRequest::new_session(30_000)),
        ("connect-legacy", ConnectRequest { read_only: None, ..ConnectRequest::new_session(10_000) }),
        (
            "connect-resume",
            ConnectRequest {
                protocol_version: 0,
                last_zxid_seen: 0x2_0000_0011,
                timeout_ms: 4000,
                session_id: 0x1000_0a3b_2c4d_0001,
                passwd: (1..=16).collect(),
                read_only: Some(true),
            },
        ),
    ];
    for (name, c) in &connect {
        out.put("connect_request", name, &c.to_bytes());
    }
    // client_stream: limit 0xffff, reads of 256 bytes, the handshake, then the frames.
    let prefix = [0xff, 0xff, 0xff];
    let hello = encode_frame(&connect[0].1);
    let mut all = prefix.to_vec();
    all.extend_from_slice(&hello);
    for (i, req) in requests().iter().enumerate() {
        let name = name_of(req);
        let mut body = req.op_code().code().to_be_bytes().to_vec();
        let mut w = Writer::new();
        req.encode_body(&mut w);
        body.extend_from_slice(w.as_slice());
        out.put("request", &name, &body);
        let frame = req.encode_frame(i as i32 + 1);
        let mut one = prefix.to_vec();
        one.extend_from_slice(&hello);
        one.extend_from_slice(&frame);
        out.put("client_stream", &name, &one);
        all.extend_from_slice(&frame);
    }
    out.put("client_stream", "all-opcodes", &all);
    // The same stream arriving 7 bytes a read, under a limit some frames exceed.
    let mut slow = all.clone();
    slow[..3].copy_from_slice(&[0x00, 0x40, 6]);
    out.put("client_stream", "all-opcodes-slow-small-limit", &slow);
    let mut ruok = prefix.to_vec();
    ruok.extend_from_slice(b"ruok");
    out.put("client_stream", "ruok", &ruok);
}

fn txns() -> Vec<Txn> {
    vec![
        Txn::CreateSession { timeout_ms: 30_000 },
        Txn::Create { path: "/a".into(), data: Some(b"x".to_vec()), acl: acl(), ephemeral: false, parent_cversion: 1 },
        Txn::Create { path: "/a/e".into(), data: None, acl: acl(), ephemeral: true, parent_cversion: 1 },
        Txn::CreateContainer { path: "/c".into(), data: Some(vec![]), acl: acl(), parent_cversion: 2 },
        Txn::CreateTtl { path: "/t".into(), data: None, acl: acl(), parent_cversion: 3, ttl_ms: 1000 },
        Txn::SetData { path: "/a".into(), data: Some(Bytes::from_static(b"yy")), version: 1 },
        Txn::SetAcl { path: "/a".into(), acl: acl(), version: 1 },
        Txn::Check { path: "/a".into(), version: 1 },
        Txn::Multi(vec![
            Txn::Create { path: "/m".into(), data: None, acl: acl(), ephemeral: false, parent_cversion: 4 },
            Txn::Delete { path: "/m".into() },
            Txn::Error { err: -101 },
        ]),
        Txn::DeleteContainer { path: "/c".into() },
        Txn::Delete { path: "/t".into() },
        Txn::Reconfig {
            path: "/zookeeper/config".into(),
            data: Some(Bytes::from_static(b"server.1=h:1:2;3\nversion=100000011")),
            version: -1,
        },
        Txn::CloseSession { paths_to_delete: vec!["/a/e".into()] },
        Txn::Error { err: -110 },
    ]
}

fn header(i: usize, txn: &Txn) -> TxnHeader {
    TxnHeader {
        client_id: 0x1000_0000_0000_0001,
        cxid: i as i32,
        zxid: 0x1_0000_0001 + i as i64,
        time_ms: 1_700_000_000_000 + i as i64,
        txn_type: txn.header_type(txn.op().code()),
    }
}

fn storage(out: &Out) {
    let fs = Arc::new(FaultFs::new());
    let dir = DataDir::with_fs(fs.clone(), "/d", "/d");
    let (mut log, _) = dir.open_log(4096).unwrap();
    let mut tree = DataTree::new();
    let mut entries = Vec::new();
    for (i, txn) in txns().iter().enumerate() {
        let hdr = header(i, txn);
        let mut w = Writer::new();
        hdr.encode(&mut w);
        txn.encode_body(&mut w);
        let plain = w.as_slice().to_vec();
        TxnDigest { version: 2, tree_digest: 0x1234_5678 }.encode(&mut w);
        out.put("txn", &format!("{i:02}-{:?}", txn.op()).to_lowercase(), &plain);
        out.put("txn", &format!("{i:02}-{:?}-digest", txn.op()).to_lowercase(), w.as_slice());
        log.append(&hdr, txn).unwrap();
        let _ = tree.apply(&hdr, txn);
        entries.push(TxnEntry { hdr, txn: Arc::new(txn.clone()), digest: None });
    }
    log.sync().unwrap();
    let path = log.current_file().unwrap().to_path_buf();
    out.put("txn_log", "log", &fs.read(&path).unwrap());
    let sessions = [(0x1000_0000_0000_0001, 30_000), (0x1000_0000_0000_0002, 4000)];
    for c in [Compression::None, Compression::Gzip, Compression::Snappy] {
        let p = dir
            .write_snapshot(&tree, &sessions, 0x1_0000_000e, SnapshotOptions { compression: c, pace: None })
            .unwrap();
        let bytes = fs.read(&p).unwrap();
        let target = match c {
            Compression::None => "snapshot",
            Compression::Gzip => "snapshot_gz",
            Compression::Snappy => "snapshot_snappy",
        };
        out.put(target, "snapshot", &bytes);
        let empty =
            dir.write_snapshot(&DataTree::new(), &[], 0, SnapshotOptions { compression: c, pace: None }).unwrap();
        out.put(target, "empty", &fs.read(&empty).unwrap());
    }
    out.put("snapshot", "stream-with-last-zxid", &warden_storage::encode_snapshot_with_last_zxid(&tree, &sessions));
    // snap_sync: reads of 64 bytes, field limit 16 << 12.
    let mut sync = vec![63, 12];
    sync.extend_from_slice(&warden_storage::encode_snap_sync(&tree, &sessions));
    out.put("snap_sync", "tree", &sync);
    let mut empty = vec![255, 15];
    empty.extend_from_slice(&warden_storage::encode_snap_sync(&DataTree::new(), &[]));
    out.put("snap_sync", "empty", &empty);
    quorum(out, &entries);
}

fn quorum(out: &Out, entries: &[TxnEntry]) {
    let pkt = |p: QuorumPacket| p.to_bytes();
    let mut stream = vec![0xff, 0xff];
    let mut push = |name: &str, bytes: Vec<u8>| {
        let mut one = vec![0xff, 0xff];
        one.extend_from_slice(&bytes);
        out.put("quorum_stream", name, &one);
        stream.extend_from_slice(&bytes);
    };
    let info = LearnerInfo { server_id: 2, protocol_version: 0x10000, config_version: 0x1_0000_0000 };
    push("followerinfo", pkt(QuorumPacket::with_data(pt::FOLLOWERINFO, 0x1_0000_0000, info.to_bytes())));
    push("leaderinfo", pkt(codec::leader_info(2)));
    push("ackepoch", pkt(QuorumPacket::with_data(pt::ACKEPOCH, 0x1_0000_000e, codec::int_data(1))));
    push("diff", pkt(QuorumPacket::new(pt::DIFF, 0x1_0000_000e)));
    push(
        "newleader",
        pkt(QuorumPacket::with_data(
            pt::NEWLEADER,
            0x2_0000_0000,
            b"server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\nserver.2=127.0.0.1:2889:3889:participant;0.0.0.0:2182\nversion=100000000".to_vec(),
        )),
    );
    for (i, e) in entries.iter().enumerate() {
        push(&format!("proposal-{i:02}"), pkt(codec::proposal(e)));
    }
    push("inform", pkt(codec::inform(&entries[1])));
    push("informandactivate", pkt(codec::inform_activate(&entries[11], Some(3))));
    push("commit", pkt(QuorumPacket::new(pt::COMMIT, 0x1_0000_0002)));
    push(
        "ping",
        pkt(codec::ping_reply(
            0x1_0000_000e,
            &[codec::SessionTouch { session_id: 0x1000_0000_0000_0001, timeout_ms: 30_000 }],
        )),
    );
    let fwd = codec::ForwardedRequest {
        session_id: 0x1000_0000_0000_0001,
        cxid: 7,
        op_type: 1,
        request: requests()[0].encode(7)[8..].to_vec(),
        authinfo: vec![Id::new("digest", "bob:abc=")],
    };
    push("request", pkt(fwd.to_packet()));
    push("revalidate", pkt(codec::revalidate_request(0x1000_0000_0000_0001, 30_000)));
    push("revalidate-reply", pkt(codec::revalidate_reply(0x1000_0000_0000_0001, true)));
    push("uptodate", pkt(QuorumPacket::new(pt::UPTODATE, -1)));
    out.put("quorum_stream", "session", &stream);
    let mut auth = vec![0xff, 0xff];
    auth.extend_from_slice(
        &QuorumAuthPacket::new(auth_status::IN_PROGRESS, Some(b"realm=\"zk-sasl-md5\"".to_vec())).to_bytes(),
    );
    auth.extend_from_slice(&pkt(QuorumPacket::with_data(pt::OBSERVERINFO, 0, info.to_bytes())));
    out.put("quorum_stream", "sasl-then-observerinfo", &auth);
}

fn election(out: &Out) {
    let n = Notification {
        state: ServerState::Looking,
        leader: 3,
        zxid: 0x1_0000_000e,
        election_epoch: 4,
        peer_epoch: 1,
        version: 2,
        config: b"server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\nversion=0".to_vec(),
    };
    let hello = InitialMessage::Versioned {
        protocol_version: PROTOCOL_VERSION_V2,
        sid: 2,
        addr: "127.0.0.1:3888|[::1]:3889".into(),
    };
    for (name, payload) in [("v2", n.encode()), ("40", n.encode_40()), ("28", n.encode_28())] {
        let mut s = hello.encode();
        s.extend_from_slice(&frame_message(&payload));
        out.put("election_stream", &format!("notification-{name}"), &s);
    }
    let mut s = InitialMessage::BareSid(1).encode();
    for state in [ServerState::Following, ServerState::Leading, ServerState::Observing] {
        s.extend_from_slice(&frame_message(&Notification { state, ..n.clone() }.encode()));
    }
    out.put("election_stream", "bare-sid", &s);
}

fn texts(out: &Out, repo: &Path) {
    let zoo = "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=/var/lib/zookeeper\nclientPort=2181\n\
               server.1=127.0.0.1:2888:3888\nserver.2=127.0.0.1:2889:3889;2182\nserver.3=127.0.0.1:2890:3890:observer;0.0.0.0:2183\n\
               4lw.commands.whitelist=ruok,mntr\nauthProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n\
               enforce.auth.enabled=true\nenforce.auth.schemes=sasl\nadmin.serverPort=8081\n\
               metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider\n\
               ssl.clientAuth=need\nreconfigEnabled=true\n";
    let mut z = zoo.as_bytes().to_vec();
    z.push(0);
    z.extend_from_slice(b"-Dzookeeper.ssl.keyStore.location=/k.p12 -Djava.security.auth.login.config=/j.conf");
    out.put("zoo_cfg", "ensemble", &z);
    // The example zoo.cfg Debian ships with ZooKeeper, and the docs' reference of every key.
    for (name, path) in [("docs-zoo-cfg", "docs/zoo-cfg.md")] {
        if let Ok(text) = std::fs::read_to_string(repo.join(path)) {
            // Each key's example line, from the reference table: `| key | ... | example |`.
            let lines: String = text
                .lines()
                .filter_map(|l| {
                    let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                    let key = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                    let example = cells.get(4)?.trim_matches('`');
                    Some(format!("{key}={example}\n"))
                })
                .collect();
            out.put("zoo_cfg", name, lines.as_bytes());
        }
    }
    let dynamic = "server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\nserver.2=127.0.0.1:2889:3889:participant;0.0.0.0:2182\nserver.3=[::1]:2890:3890:observer;2183";
    let mut d = dynamic.as_bytes().to_vec();
    d.push(0);
    d.extend_from_slice(b"server.4=127.0.0.1:2891:3891:participant;2184,5=127.0.0.1:2892:3892;2185");
    d.push(0);
    d.extend_from_slice(b"2,3");
    out.put("dynamic_config", "three-and-reconfig", &d);
    let jaas = "Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_super=\"adminsecret\"\n  user_bob=\"bobsecret\";\n};\n\
                QuorumServer {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_test=\"test\";\n};\n\
                QuorumLearner {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  username=\"test\"\n  password=\"test\";\n};\n\
                Krb {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n  keyTab=\"/etc/zk.keytab\"\n  storeKey=true\n  principal=\"zookeeper/host@EXAMPLE.COM\";\n};\n";
    let mut j = jaas.as_bytes().to_vec();
    j.push(0);
    j.extend_from_slice(
        b"RULE:[2:$1@$0](zookeeper@EXAMPLE.COM)s/.*/zookeeper/\nRULE:[1:$1@$0](.*@EXAMPLE.COM)s/@.*//\nDEFAULT",
    );
    j.push(0);
    j.extend_from_slice(b"zookeeper/host.example.com@EXAMPLE.COM");
    out.put("jaas", "sections-and-rules", &j);
    // DIGEST-MD5: a valid response for bob / pw to the fuzz nonce, and one with a wrong password.
    let challenge =
        format!("realm=\"zk-sasl-md5\",nonce=\"{}\",charset=utf-8,algorithm=md5-sess", warden_fuzz::SASL_NONCE);
    let uri = warden_server::sasl::digest_md5::ZK_DIGEST_URI;
    let (ok, _) =
        warden_server::sasl::digest_md5::client_response(challenge.as_bytes(), "bob", "pw", "0a1b2c3d", uri).unwrap();
    out.put("sasl_digest", "bob-response", &ok);
    let (bad, _) =
        warden_server::sasl::digest_md5::client_response(challenge.as_bytes(), "super", "nope", "x", uri).unwrap();
    out.put("sasl_digest", "super-wrong-password", &bad);
    out.put("sasl_digest", "challenge", challenge.as_bytes());
    for (name, req) in [
        ("commands", "GET /commands HTTP/1.1\r\nHost: localhost:8080\r\n\r\n"),
        ("mntr", "GET /commands/mntr HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n"),
        ("set-trace-mask", "GET /commands/set_trace_mask?traceMask=%2D1&x=a+b HTTP/1.1\r\nHost: h\r\n\r\n"),
        ("snapshot", "GET /commands/snapshot?streaming=false HTTP/1.1\r\nAuthorization: digest super:secret\r\n\r\n"),
        ("restore", "POST /commands/restore HTTP/1.1\r\nAuthorization: ip\r\nContent-Length: 0\r\n\r\n"),
        ("metrics", "GET /metrics HTTP/1.1\r\nHost: localhost:7000\r\nUser-Agent: Prometheus/2.42.0\r\n\r\n"),
        ("percent", "GET /commands/%77%63%68%73 HTTP/1.0\r\n\r\n"),
    ] {
        out.put("admin_http", name, req.as_bytes());
    }
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(|| repo.join("fuzz"));
    let out = Out(dir);
    client(&out);
    storage(&out);
    election(&out);
    texts(&out, &repo);
}
