//! Snapshot test helpers: a tree with every node kind and a text dump that the interop script's
//! kazoo side prints identically.
use warden_proto::{perms, Acl, Id, Txn, TxnHeader};
use warden_tree::DataTree;

pub const EPH_SESSION: i64 = 0x1000_0000_0000_0abc;

fn hdr(zxid: i64, client_id: i64) -> TxnHeader {
    TxnHeader { client_id, cxid: 0, zxid, time_ms: 1_700_000_000_000 + zxid * 1000, txn_type: 0 }
}

/// Persistent (null, empty and binary data), nested, sequential-style names, ephemeral,
/// container, TTL, digest/ip/world ACLs, a quota, and bumped versions.
pub fn sample_tree() -> DataTree {
    let mut t = DataTree::new();
    let digest = vec![
        Acl::new(perms::ALL, Id::new("digest", "user:2Om+GBbT2q/tS6pdvACZbbm7/1A=")),
        Acl::new(perms::READ, Id::anyone()),
    ];
    let ip = vec![Acl::new(perms::READ | perms::WRITE, Id::new("ip", "127.0.0.1"))];
    let open = Acl::open_unsafe;
    let create = |path: &str, data: Option<&[u8]>, acl: Vec<Acl>, ephemeral: bool| Txn::Create {
        path: path.into(),
        data: data.map(<[u8]>::to_vec),
        acl,
        ephemeral,
        parent_cversion: -1,
    };
    let txns = vec![
        (1, create("/app", Some(b"root of app"), open(), false)),
        (1, create("/app/null", None, open(), false)),
        (1, create("/app/empty", Some(b""), open(), false)),
        (1, create("/app/bin", Some(&[0, 1, 2, 255, 254]), open(), false)),
        (1, create("/app/seq-0000000003", Some(b"s"), open(), false)),
        (1, create("/secret", Some(b"digest protected"), digest.clone(), false)),
        (1, create("/iponly", Some(b"ip"), ip, false)),
        (EPH_SESSION, create("/app/eph", Some(b"ephemeral"), open(), true)),
        (1, Txn::CreateContainer { path: "/cont".into(), data: Some(b"c".to_vec()), acl: open(), parent_cversion: -1 }),
        (1, create("/cont/child", Some(b"in container"), open(), false)),
        (
            1,
            Txn::CreateTtl {
                path: "/ttl".into(),
                data: Some(b"t".to_vec()),
                acl: open(),
                parent_cversion: -1,
                ttl_ms: 3_600_000,
            },
        ),
        (1, Txn::SetData { path: "/app".into(), data: Some(b"updated".to_vec().into()), version: 1 }),
        (1, Txn::SetData { path: "/app".into(), data: Some(b"updated twice".to_vec().into()), version: 2 }),
        (1, Txn::SetAcl { path: "/app/bin".into(), acl: digest, version: 1 }),
        (1, create("/app/gone", None, open(), false)),
        (1, Txn::Delete { path: "/app/gone".into() }),
        (1, create("/zookeeper/quota/app", None, open(), false)),
        (1, create("/zookeeper/quota/app/zookeeper_limits", Some(b"count=100,bytes=-1"), open(), false)),
        (1, create("/zookeeper/quota/app/zookeeper_stats", Some(b"count=0,bytes=0"), open(), false)),
    ];
    for (i, (session, txn)) in txns.into_iter().enumerate() {
        let out = t.apply(&hdr(i as i64 + 1, session), &txn);
        assert!(!matches!(out.result, warden_tree::TxnResult::Error(_)), "{txn:?}: {:?}", out.result);
    }
    t.check_invariants().unwrap();
    t
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One line per node, sorted by path:
/// `path \t data hex|null \t perms:scheme:id,... \t client Stat fields`.
pub fn dump(t: &DataTree) -> String {
    let mut out = String::new();
    for p in t.paths() {
        let n = t.node(&p).unwrap();
        let s = n.client_stat();
        let data = n.data.as_deref().map_or("null".to_string(), hex);
        let acl: Vec<String> = n.acl.iter().map(|a| format!("{}:{}:{}", a.perms, a.id.scheme, a.id.id)).collect();
        out += &format!(
            "{p}\t{data}\t{}\t{} {} {} {} {} {} {} {} {} {} {}\n",
            acl.join(","),
            s.czxid,
            s.mzxid,
            s.ctime,
            s.mtime,
            s.version,
            s.cversion,
            s.aversion,
            s.ephemeral_owner,
            s.data_length,
            s.num_children,
            s.pzxid
        );
    }
    out
}
