//! `warden data export | import | diff`: a data tree in a portable form, one JSON object per
//! znode (path, data in base64, ACL, Stat), so a tree moves between Warden, Apache ZooKeeper (whose
//! data directories Warden reads and writes) and back, and two trees can be compared.
//!
//! ```text
//! {"path":"/app","data":"aGVsbG8=","acl":[{"perms":31,"scheme":"world","id":"anyone"}],
//!  "stat":{"czxid":2,"mzxid":2,"ctime":1733380000000,"mtime":1733380000000,"version":0,
//!          "cversion":0,"aversion":0,"ephemeralOwner":0,"dataLength":5,"numChildren":0,"pzxid":2}}
//! ```
//!
//! Export reads a data directory without changing it (`DataDir::load_read_only`), so it may run
//! beside the server that owns the directory; import writes one snapshot into an empty data
//! directory, which Warden or ZooKeeper then starts from.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use warden_proto::data::{Acl, Id, Stat, StatPersisted};
use warden_storage::{encode_snapshot, snapshot_file_name, Compression, DataDir};
use warden_tree::{DataTree, Znode};

/// One znode in the portable form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub path: String,
    /// The data in standard base64; `null` for the null buffer a client may set.
    pub data: Option<String>,
    pub acl: Vec<AclRecord>,
    pub stat: StatRecord,
    /// A live server would not let this client read the node's data (its ACL): only the node's
    /// existence and ACL are known. Never exported.
    #[serde(skip)]
    pub unreadable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclRecord {
    pub perms: i32,
    pub scheme: String,
    pub id: String,
}

/// The Stat under the names ZooKeeper's Java API gives its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatRecord {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
    pub pzxid: i64,
}

impl From<Stat> for StatRecord {
    fn from(s: Stat) -> Self {
        Self {
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
}

/// Every znode of `tree`, parents before children (paths in byte order).
pub fn records(tree: &DataTree) -> Vec<NodeRecord> {
    let b64 = base64::engine::general_purpose::STANDARD;
    tree.paths()
        .into_iter()
        .filter_map(|path| {
            let node = tree.node(&path)?;
            let stat = tree.stat(&path)?;
            Some(NodeRecord {
                data: node.data.as_deref().map(|d| b64.encode(d)),
                acl: node
                    .acl
                    .iter()
                    .map(|a| AclRecord { perms: a.perms, scheme: a.id.scheme.to_string(), id: a.id.id.to_string() })
                    .collect(),
                stat: stat.into(),
                unreadable: false,
                path,
            })
        })
        .collect()
}

/// The tree of a data directory (`log_dir`: the dataLogDir when it differs), read without
/// changing anything.
pub fn load(data_dir: &Path, log_dir: Option<&Path>) -> anyhow::Result<DataTree> {
    let dir = DataDir::real(data_dir, log_dir.unwrap_or(data_dir));
    let (tree, _) = dir.load_read_only().with_context(|| format!("reading {}", data_dir.display()))?;
    Ok(tree)
}

/// `warden data export`: one JSON line per znode.
pub fn export(data_dir: &Path, log_dir: Option<&Path>, out: &mut dyn Write) -> anyhow::Result<usize> {
    let tree = load(data_dir, log_dir)?;
    let recs = records(&tree);
    for r in &recs {
        serde_json::to_writer(&mut *out, r)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(recs.len())
}

/// What an import did.
#[derive(Debug, PartialEq, Eq)]
pub struct Imported {
    pub nodes: usize,
    /// Ephemeral nodes left out: their sessions do not exist in the new directory.
    pub skipped_ephemerals: usize,
    pub zxid: i64,
    pub file: std::path::PathBuf,
}

/// `warden data import`: builds a tree from JSON lines and writes it as one snapshot
/// (`version-2/snapshot.<zxid>`, zxid = the highest zxid in any Stat) into `data_dir`, which must
/// hold no snapshot or log yet. Ephemeral nodes are left out unless `keep_ephemerals` (their
/// owners' sessions are not carried over, so nothing would ever remove them).
pub fn import(input: &mut dyn BufRead, data_dir: &Path, keep_ephemerals: bool) -> anyhow::Result<Imported> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let version_2 = data_dir.join("version-2");
    if let Ok(entries) = std::fs::read_dir(&version_2) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("snapshot.") || name.starts_with("log.") {
                bail!(
                    "{} already holds data ({name}); import writes into an empty data directory",
                    version_2.display()
                );
            }
        }
    }
    let mut nodes: Vec<(String, Znode)> = Vec::new();
    let (mut zxid, mut skipped) = (0i64, 0usize);
    for (n, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let r: NodeRecord = serde_json::from_str(&line).with_context(|| format!("line {}", n + 1))?;
        if r.stat.ephemeral_owner != 0 && !keep_ephemerals {
            skipped += 1;
            continue;
        }
        let data = match &r.data {
            Some(d) => Some(b64.decode(d).with_context(|| format!("line {}: data is not base64", n + 1))?.into()),
            None => None,
        };
        // DataTree::from_snapshot shares equal ACL lists between nodes.
        let acl: Arc<[Acl]> =
            r.acl.iter().map(|a| Acl { perms: a.perms, id: Id::new(a.scheme.clone(), a.id.clone()) }).collect();
        let s = r.stat;
        zxid = zxid.max(s.czxid).max(s.mzxid).max(s.pzxid);
        let stat = StatPersisted {
            czxid: s.czxid,
            mzxid: s.mzxid,
            ctime: s.ctime,
            mtime: s.mtime,
            version: s.version,
            // A client's cversion counts creations and deletions of children; the persisted one
            // (in snapshots, as ZooKeeper keeps it) counts creations: the client sees
            // 2 * creations - children.
            cversion: (s.cversion + s.num_children) / 2,
            aversion: s.aversion,
            ephemeral_owner: s.ephemeral_owner,
            pzxid: s.pzxid,
        };
        nodes.push((r.path, Znode::new(data, acl, stat)));
    }
    // Skipped ephemerals cannot have children (ephemerals have none), so every parent is kept.
    let count = nodes.len();
    let tree =
        DataTree::from_snapshot(nodes, zxid).map_err(|e| anyhow::anyhow!("the tree does not hold together: {e}"))?;
    std::fs::create_dir_all(&version_2).with_context(|| format!("creating {}", version_2.display()))?;
    let file = version_2.join(snapshot_file_name(zxid, Compression::None));
    let tmp = version_2.join(format!(".import.{}", std::process::id()));
    let bytes = encode_snapshot(&tree, &[]);
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &file).with_context(|| format!("renaming to {}", file.display()))?;
    Ok(Imported { nodes: count, skipped_ephemerals: skipped, zxid, file })
}

/// One difference between two trees.
#[derive(Debug, PartialEq, Eq)]
pub enum Difference {
    OnlyLeft(String),
    OnlyRight(String),
    /// On both sides, but one side's data could not be read (its ACL): not compared.
    Unreadable(String),
    /// The path, and which of data, ACL and Stat differ.
    Changed {
        path: String,
        what: Vec<&'static str>,
    },
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Difference::OnlyLeft(p) => write!(f, "< {p}"),
            Difference::OnlyRight(p) => write!(f, "> {p}"),
            Difference::Unreadable(p) => write!(f, "? {p} (not readable by this client; give --auth)"),
            Difference::Changed { path, what } => write!(f, "! {path} ({})", what.join(", ")),
        }
    }
}

/// The differences between two sets of records, by path. `with_stat`: compare Stats too (a live
/// server's tree against its own data directory has equal Stats, and so does a tree imported
/// elsewhere, but for the parents of ephemeral nodes left out).
pub fn diff(left: &[NodeRecord], right: &[NodeRecord], with_stat: bool) -> Vec<Difference> {
    let l: BTreeMap<&str, &NodeRecord> = left.iter().map(|r| (r.path.as_str(), r)).collect();
    let r: BTreeMap<&str, &NodeRecord> = right.iter().map(|r| (r.path.as_str(), r)).collect();
    let mut out = Vec::new();
    for (path, a) in &l {
        match r.get(path) {
            None => out.push(Difference::OnlyLeft(path.to_string())),
            Some(b) if a.unreadable || b.unreadable => out.push(Difference::Unreadable(path.to_string())),
            Some(b) => {
                let mut what = Vec::new();
                // A client cannot tell a null buffer from an empty one: they compare equal.
                if a.data.as_deref().unwrap_or("") != b.data.as_deref().unwrap_or("") {
                    what.push("data");
                }
                if !same_acl(&a.acl, &b.acl) {
                    what.push("acl");
                }
                if with_stat && a.stat != b.stat {
                    what.push("stat");
                }
                if !what.is_empty() {
                    out.push(Difference::Changed { path: path.to_string(), what });
                }
            }
        }
    }
    out.extend(r.keys().filter(|p| !l.contains_key(*p)).map(|p| Difference::OnlyRight(p.to_string())));
    out.sort_by(|a, b| key(a).cmp(key(b)));
    out
}

/// ACLs as equal as a client can tell: a server shows a digest id as `user:x` to a client
/// without ADMIN on the node (ZooKeeper's getACL), which matches that user's real digest.
fn same_acl(a: &[AclRecord], b: &[AclRecord]) -> bool {
    let masked_match =
        |x: &str, y: &str| x.strip_suffix(":x").is_some_and(|user| y.split_once(':').is_some_and(|(u, _)| u == user));
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.perms == y.perms
                && x.scheme == y.scheme
                && (x.id == y.id
                    || (x.scheme == "digest" && (masked_match(&x.id, &y.id) || masked_match(&y.id, &x.id))))
        })
}

fn key(d: &Difference) -> &str {
    match d {
        Difference::OnlyLeft(p)
        | Difference::OnlyRight(p)
        | Difference::Unreadable(p)
        | Difference::Changed { path: p, .. } => p,
    }
}

/// The permission bits (the client crate keeps its raw value private).
fn perms_of(p: zookeeper_client::Permission) -> i32 {
    use zookeeper_client::Permission as P;
    [(P::READ, 1), (P::WRITE, 2), (P::CREATE, 4), (P::DELETE, 8), (P::ADMIN, 16)]
        .into_iter()
        .filter(|(bit, _)| p.has(*bit))
        .map(|(_, v)| v)
        .sum()
}

/// Every znode of a live server (`host:port[,...]`), read with getChildren, getData and getACL,
/// after adding `auth` (`scheme:credentials`, as zkCli's `addauth`). A node this client may not
/// read is listed with `unreadable`.
pub async fn live_records(servers: &str, auth: &[String]) -> anyhow::Result<Vec<NodeRecord>> {
    use zookeeper_client as zk;
    let b64 = base64::engine::general_purpose::STANDARD;
    let client = zk::Client::connector().connect(servers).await.with_context(|| format!("connecting to {servers}"))?;
    for a in auth {
        let (scheme, creds) = a.split_once(':').with_context(|| format!("--auth {a:?}: not scheme:credentials"))?;
        client.auth(scheme, creds.as_bytes()).await.with_context(|| format!("auth {scheme}"))?;
    }
    client.sync("/").await.context("sync")?;
    let mut out = Vec::new();
    let mut stack = vec!["/".to_string()];
    while let Some(path) = stack.pop() {
        let (data, stat, unreadable) = match client.get_data(&path).await {
            Ok((data, stat)) => (data, Some(stat), false),
            // Known to exist (listed by its parent), not readable: ZooKeeper 3.9.2+ (and
            // Warden) check READ for exists too, so not even its Stat is known.
            Err(zk::Error::NoAuth) => (Vec::new(), None, true),
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(e).with_context(|| format!("getData {path}")),
        };
        let acl = match client.get_acl(&path).await {
            Ok((acl, _)) => acl,
            Err(zk::Error::NoAuth) => Vec::new(),
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(e).with_context(|| format!("getACL {path}")),
        };
        let children = match client.list_children(&path).await {
            Ok(c) => c,
            Err(zk::Error::NoNode | zk::Error::NoAuth) => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("getChildren {path}")),
        };
        for c in children {
            stack.push(if path == "/" { format!("/{c}") } else { format!("{path}/{c}") });
        }
        out.push(NodeRecord {
            // The client cannot tell a null buffer from an empty one; empty data is "" here and
            // compared as such.
            data: Some(b64.encode(&data)),
            acl: acl
                .iter()
                .map(|a| AclRecord { perms: perms_of(a.permission()), scheme: a.scheme().into(), id: a.id().into() })
                .collect(),
            stat: stat.map_or(StatRecord::default(), |stat| StatRecord {
                czxid: stat.czxid,
                mzxid: stat.mzxid,
                ctime: stat.ctime,
                mtime: stat.mtime,
                version: stat.version,
                cversion: stat.cversion,
                aversion: stat.aversion,
                ephemeral_owner: stat.ephemeral_owner,
                data_length: stat.data_length,
                num_children: stat.num_children,
                pzxid: stat.pzxid,
            }),
            unreadable,
            path,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(perms: i32, scheme: &str, id: &str) -> AclRecord {
        AclRecord { perms, scheme: scheme.into(), id: id.into() }
    }

    #[test]
    fn a_masked_digest_matches_its_user_only() {
        let real = [acl(1, "digest", "bob:fyVmFCwVbTJYrznoSu1koqYEYF0=")];
        assert!(same_acl(&real, &[acl(1, "digest", "bob:x")]));
        assert!(same_acl(&[acl(1, "digest", "bob:x")], &real));
        assert!(!same_acl(&real, &[acl(1, "digest", "eve:x")]));
        assert!(!same_acl(&real, &[acl(31, "digest", "bob:x")]), "permissions still count");
        assert!(!same_acl(&[acl(1, "ip", "10.0.0.1:x")], &[acl(1, "ip", "10.0.0.1:y")]));
        assert!(!same_acl(&real, &[]));
    }
}
