//! The dynamic config files a reconfig-enabled server writes as each configuration becomes
//! active, with ZooKeeper's names and rewrite rules (`QuorumPeerConfig.writeDynamicConfig`,
//! `editStaticConfig`, `backupOldConfig`):
//! * `<zoo.cfg>.dynamic.<hex version>`: the sorted `server.N=` lines, no version line, no newline
//!   after the last; files of older versions are kept;
//! * zoo.cfg itself, the first time: copied to `zoo.cfg.bak`, then rewritten without its
//!   `server.N`, `group.N`, `weight.N`, `peerType` and `dynamicConfigFile` lines and with
//!   `dynamicConfigFile=<absolute path of the new file>` appended; later only that line changes.
//!
//! Each file is written to a temporary name, synced and renamed, so a crash leaves the old or
//! the new file, never a torn one.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use warden_proto::Membership;

/// Writes the dynamic file for `m` next to `static_cfg` and points `static_cfg` at it. Returns
/// the dynamic file's path.
pub fn write(static_cfg: &Path, m: &Membership) -> std::io::Result<PathBuf> {
    let mut name = static_cfg.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".dynamic.{:x}", m.version));
    let dynamic = static_cfg.with_file_name(name);
    write_atomically(&dynamic, m.dynamic_file_text().as_bytes())?;
    let dynamic = std::path::absolute(&dynamic)?;

    let text = std::fs::read_to_string(static_cfg)?;
    let first_time = !text.lines().any(|l| key_of(l) == Some("dynamicConfigFile"));
    if first_time {
        let mut bak = static_cfg.as_os_str().to_os_string();
        bak.push(".bak");
        std::fs::copy(static_cfg, PathBuf::from(bak))?;
    }
    let mut out = String::new();
    for line in text.lines() {
        let dropped = match key_of(line) {
            Some(k) => {
                k.starts_with("server.")
                    || k.starts_with("group.")
                    || k.starts_with("weight.")
                    || k == "peerType"
                    || k == "dynamicConfigFile"
            }
            None => false,
        };
        if !dropped {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(&format!("dynamicConfigFile={}\n", dynamic.display()));
    write_atomically(static_cfg, out.as_bytes())?;
    Ok(dynamic)
}

fn key_of(line: &str) -> Option<&str> {
    let line = line.trim_start();
    if line.starts_with('#') {
        return None;
    }
    line.split_once('=').map(|(k, _)| k.trim())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_follow_zookeepers_rules() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("zoo.cfg");
        let original = "tickTime=2000\ndataDir=/nonexistent/warden\n# servers\nserver.1=127.0.0.1:2888:3888\nserver.2=127.0.0.2:2888:3888\n\
                        reconfigEnabled=true\npeerType=participant\n";
        std::fs::write(&cfg, original).unwrap();
        let mut m = Membership::parse_text("server.1=127.0.0.1:2888:3888;2181\nserver.2=127.0.0.2:2888:3888").unwrap();
        m.version = 0x1_0000_0000;
        let dynamic = write(&cfg, &m).unwrap();
        assert_eq!(dynamic.file_name().unwrap(), "zoo.cfg.dynamic.100000000");
        assert_eq!(
            std::fs::read_to_string(&dynamic).unwrap(),
            "server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\nserver.2=127.0.0.2:2888:3888:participant"
        );
        assert_eq!(std::fs::read_to_string(dir.path().join("zoo.cfg.bak")).unwrap(), original);
        let rewritten = std::fs::read_to_string(&cfg).unwrap();
        assert!(!rewritten.contains("server.") && !rewritten.contains("peerType"), "{rewritten}");
        assert!(rewritten.contains("reconfigEnabled=true") && rewritten.contains("# servers"));
        assert!(rewritten.ends_with(&format!("dynamicConfigFile={}\n", dynamic.display())));

        // The next version: a new file, the old kept, the .bak untouched, one dynamicConfigFile line.
        m.version = 0x1_0000_0005;
        m.servers.remove(&2);
        let next = write(&cfg, &m).unwrap();
        assert!(dynamic.exists() && next.ends_with("zoo.cfg.dynamic.100000005"));
        assert_eq!(std::fs::read_to_string(dir.path().join("zoo.cfg.bak")).unwrap(), original);
        let rewritten = std::fs::read_to_string(&cfg).unwrap();
        assert_eq!(rewritten.matches("dynamicConfigFile=").count(), 1);
        // And zoo.cfg loads back with the new membership and version.
        let loaded = crate::config::Config::load(&cfg).unwrap();
        assert_eq!(loaded.membership(), m);
    }
}
