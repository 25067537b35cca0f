//! `warden data ...`: read ZooKeeper-format data directories without a server, in the spirit of
//! ZooKeeper's TxnLogToolkit and SnapshotFormatter, and verify every checksum.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use warden_proto::{Acl, Txn, TxnHeader};
use warden_storage::{read_log_file, read_snapshot, RealFs};

/// Prints every txn of one log file, one per line, and how the file ends.
pub fn print_log(path: &Path) -> anyhow::Result<String> {
    let contents = read_log_file(&RealFs, path).with_context(|| format!("reading {}", path.display()))?;
    let mut o = format!("ZooKeeper transaction log {}\n", path.display());
    for (_, hdr, txn) in &contents.records {
        let _ = writeln!(o, "{}", txn_line(hdr, txn));
    }
    let _ = writeln!(o, "{} txns", contents.records.len());
    if let Some((offset, reason)) = &contents.torn_tail {
        let _ = writeln!(o, "torn tail at offset {offset}: {reason}");
    }
    Ok(o)
}

fn txn_line(hdr: &TxnHeader, txn: &Txn) -> String {
    format!(
        "time:{} session:{:#x} cxid:{:#x} zxid:{:#x} {}",
        hdr.time_ms,
        hdr.client_id,
        hdr.cxid,
        hdr.zxid,
        describe(txn)
    )
}

fn data_text(data: Option<&[u8]>) -> String {
    match data {
        None => "null".into(),
        Some(d) => format!("#{}", d.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    }
}

fn acl_text(acl: &[Acl]) -> String {
    let entries: Vec<String> = acl.iter().map(|a| format!("{}:{}:{}", a.perms, a.id.scheme, a.id.id)).collect();
    format!("[{}]", entries.join(","))
}

fn describe(txn: &Txn) -> String {
    match txn {
        Txn::Create { path, data, acl, ephemeral, parent_cversion } => {
            format!(
                "create '{path},{},{},ephemeral={ephemeral},parentCVersion={parent_cversion}",
                data_text(data.as_deref()),
                acl_text(acl)
            )
        }
        Txn::CreateContainer { path, data, parent_cversion, .. } => {
            format!("createContainer '{path},{},parentCVersion={parent_cversion}", data_text(data.as_deref()))
        }
        Txn::CreateTtl { path, data, ttl_ms, .. } => {
            format!("createTTL '{path},{},ttl={ttl_ms}", data_text(data.as_deref()))
        }
        Txn::Delete { path } => format!("delete '{path}"),
        Txn::DeleteContainer { path } => format!("deleteContainer '{path}"),
        Txn::SetData { path, data, version } => {
            format!("setData '{path},{},version={version}", data_text(data.as_deref()))
        }
        Txn::Reconfig { path, data, version } => {
            format!("reconfig '{path},{},version={version}", data_text(data.as_deref()))
        }
        Txn::SetAcl { path, acl, version } => format!("setACL '{path},{},version={version}", acl_text(acl)),
        Txn::Check { path, version } => format!("check '{path},version={version}"),
        Txn::CreateSession { timeout_ms } => format!("createSession timeout={timeout_ms}"),
        Txn::CloseSession { paths_to_delete } => format!("closeSession {paths_to_delete:?}"),
        Txn::Error { err } => format!("error {err}"),
        Txn::Multi(txns) => format!("multi [{}]", txns.iter().map(describe).collect::<Vec<_>>().join("; ")),
    }
}

/// Prints a snapshot's nodes and sessions in the layout of ZooKeeper's SnapshotFormatter.
pub fn print_snapshot(path: &Path, with_data: bool) -> anyhow::Result<String> {
    let snap = read_snapshot(&RealFs, path).with_context(|| format!("reading {}", path.display()))?;
    let mut o = format!("ZNode Details (count={}):\n", snap.nodes.len());
    for (p, node) in &snap.nodes {
        let s = &node.stat;
        let _ = writeln!(o, "----\n{}", if p.is_empty() { "/" } else { p });
        let _ = writeln!(
            o,
            "  cZxid = {:#018x}\n  ctime = {}\n  mZxid = {:#018x}\n  mtime = {}",
            s.czxid, s.ctime, s.mzxid, s.mtime
        );
        let _ = writeln!(
            o,
            "  pZxid = {:#018x}\n  cversion = {}\n  dataVersion = {}\n  aclVersion = {}",
            s.pzxid, s.cversion, s.version, s.aversion
        );
        let _ = writeln!(o, "  ephemeralOwner = {:#018x}\n  dataLength = {}", s.ephemeral_owner, node.data_len());
        if with_data {
            let _ = writeln!(o, "  data = {}", data_text(node.data.as_deref()));
        }
    }
    let _ = writeln!(o, "----\nSession Details (sid, timeout):");
    for (id, timeout) in &snap.sessions {
        let _ = writeln!(o, "{id:#x}, {timeout}");
    }
    let _ = writeln!(o, "----\nLast zxid: {:#x}", snap.zxid);
    Ok(o)
}

/// Checks every snapshot and log file of a data directory; fails if any is damaged (a torn tail
/// in the newest log is reported but is what recovery repairs).
pub fn verify(data_dir: &Path, data_log_dir: Option<&Path>) -> anyhow::Result<String> {
    let mut files = list(&data_dir.join("version-2"))?;
    if let Some(log_dir) = data_log_dir.filter(|d| *d != data_dir) {
        files.extend(list(&log_dir.join("version-2"))?);
    }
    let newest_log = files.iter().filter(|f| name(f).starts_with("log.")).max_by_key(|f| zxid_of(f)).cloned();
    let (mut o, mut bad) = (String::new(), 0);
    for f in &files {
        let n = name(f);
        let line = if n.starts_with("snapshot.") {
            read_snapshot(&RealFs, f).map(|s| format!("ok: {} nodes, {} sessions", s.nodes.len(), s.sessions.len()))
        } else if n.starts_with("log.") {
            read_log_file(&RealFs, f).map(|c| match c.torn_tail {
                None => format!("ok: {} txns", c.records.len()),
                Some((off, why)) if Some(f) == newest_log.as_ref() => {
                    format!("ok: {} txns, torn tail at offset {off} ({why}) that recovery truncates", c.records.len())
                }
                Some((off, why)) => format!("DAMAGED at offset {off}: {why} (not the newest log)"),
            })
        } else {
            continue;
        };
        let line = line.unwrap_or_else(|e| format!("DAMAGED: {e}"));
        bad += usize::from(line.starts_with("DAMAGED"));
        let _ = writeln!(o, "{}: {line}", f.display());
    }
    if bad > 0 {
        bail!("{o}{bad} damaged file(s)");
    }
    let _ = writeln!(o, "{} files verified", files.len());
    Ok(o)
}

fn list(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| name(p).starts_with("log.") || name(p).starts_with("snapshot."))
        .collect();
    v.sort_by_key(|p| (name(p).starts_with("log."), zxid_of(p)));
    Ok(v)
}

fn name(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or_default()
}

fn zxid_of(p: &Path) -> i64 {
    let n = name(p);
    let hex = n.split('.').nth(1).unwrap_or_default();
    i64::from_str_radix(hex, 16).unwrap_or(-1)
}
