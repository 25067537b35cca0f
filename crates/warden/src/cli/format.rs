//! What zkCli prints, as text: a Stat (`cZxid = 0x...`, Java's `Date.toString` times), ACLs
//! (`'world,'anyone` then `: cdrwa`), quota records (ZooKeeper's `StatsTrack`), watch events,
//! the usage list. Pure: no I/O.

use std::collections::BTreeMap;

use zookeeper_client as zk;

use super::command::USAGE;

/// The Stat as zkCli's StatPrinter prints it, one `name = value` line each.
pub fn stat(s: &zk::Stat) -> String {
    format!(
        "cZxid = 0x{:x}\nctime = {}\nmZxid = 0x{:x}\nmtime = {}\npZxid = 0x{:x}\ncversion = {}\ndataVersion = {}\n\
         aclVersion = {}\nephemeralOwner = 0x{:x}\ndataLength = {}\nnumChildren = {}\n",
        s.czxid,
        java_date(s.ctime),
        s.mzxid,
        java_date(s.mtime),
        s.pzxid,
        s.cversion,
        s.version,
        s.aversion,
        s.ephemeral_owner,
        s.data_length,
        s.num_children
    )
}

/// Java's `new Date(millis).toString()` in UTC: `Sat Dec 05 10:00:00 UTC 2026`.
pub fn java_date(millis: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = millis.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{} {} {:02} {:02}:{:02}:{:02} UTC {}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(m - 1) as usize],
        d,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        y
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// ZooKeeper's permission letters, in its order: `cdrwa`.
pub fn perms(p: zk::Permission) -> String {
    [
        (zk::Permission::CREATE, 'c'),
        (zk::Permission::DELETE, 'd'),
        (zk::Permission::READ, 'r'),
        (zk::Permission::WRITE, 'w'),
        (zk::Permission::ADMIN, 'a'),
    ]
    .iter()
    .filter(|(bit, _)| p.has(*bit))
    .map(|(_, c)| *c)
    .collect()
}

/// A string as Jute's CSV writer renders it (the form of an `Id`'s `toString`): a leading `'`
/// and `%XX` for the characters it escapes.
fn jute_csv(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\0' => out.push_str("%00"),
            '\n' => out.push_str("%0A"),
            '\r' => out.push_str("%0D"),
            ',' => out.push_str("%2C"),
            '}' => out.push_str("%7D"),
            '%' => out.push_str("%25"),
            c => out.push(c),
        }
    }
    out
}

/// One ACL entry as `getAcl` prints it: `'scheme,'id` on a line, then `: perms`.
pub fn acl(a: &zk::Acl) -> String {
    format!("{},{}\n: {}\n", jute_csv(a.scheme()), jute_csv(a.id()), perms(a.permission()))
}

/// zkCli's ACL syntax, `scheme:id:perms[,...]`, to ACLs; entries not of that form are skipped
/// with zkCli's message, returned as warnings to print.
pub fn parse_acl(text: &str) -> (Vec<zk::Acl>, Vec<String>) {
    let mut acls = Vec::new();
    let mut warnings = Vec::new();
    for a in text.split(',') {
        let (Some(first), Some(last)) = (a.find(':'), a.rfind(':')) else {
            warnings.push(format!("{a} does not have the form scheme:id:perm"));
            continue;
        };
        if first == last {
            warnings.push(format!("{a} does not have the form scheme:id:perm"));
            continue;
        }
        let mut p = zk::Permission::NONE;
        for c in a[last + 1..].chars() {
            p = p | match c {
                'r' => zk::Permission::READ,
                'w' => zk::Permission::WRITE,
                'c' => zk::Permission::CREATE,
                'd' => zk::Permission::DELETE,
                'a' => zk::Permission::ADMIN,
                other => {
                    warnings.push(format!("Unknown perm type: {other}"));
                    zk::Permission::NONE
                }
            };
        }
        acls.push(zk::Acl::new(p, zk::AuthId::new(&a[..first], &a[first + 1..last])));
    }
    (acls, warnings)
}

/// ZooKeeper's quota record (`StatsTrack`): `count=N,bytes=N` and, when present, the hard
/// limits after a `=` as `;byteHardLimit=N;countHardLimit=N` (sic, ZooKeeper 3.8's format).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsTrack(BTreeMap<String, i64>);

impl StatsTrack {
    pub const COUNT: &'static str = "count";
    pub const BYTES: &'static str = "bytes";
    pub const COUNT_HARD: &'static str = "countHardLimit";
    pub const BYTES_HARD: &'static str = "byteHardLimit";

    /// Reads the record from a quota node's data; pairs split at `,` and `;`, an empty value is -1.
    pub fn parse(text: &str) -> StatsTrack {
        let mut map = BTreeMap::new();
        for pair in text.split([',', ';']).filter(|p| !p.is_empty()) {
            let mut kv = pair.split('=');
            let key = kv.next().unwrap_or_default();
            let value = kv.next().unwrap_or_default();
            let value = if value.is_empty() { Some(-1) } else { value.parse().ok() };
            if let Some(v) = value {
                map.insert(key.to_string(), v);
            }
        }
        StatsTrack(map)
    }

    pub fn get(&self, key: &str) -> i64 {
        self.0.get(key).copied().unwrap_or(-1)
    }

    pub fn set(&mut self, key: &str, value: i64) {
        self.0.insert(key.to_string(), value);
    }
}

impl std::fmt::Display for StatsTrack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "count={},bytes={}", self.get(Self::COUNT), self.get(Self::BYTES))?;
        let rest: Vec<_> = self.0.iter().filter(|(k, _)| *k != Self::COUNT && *k != Self::BYTES).collect();
        if !rest.is_empty() {
            f.write_str("=")?;
            for (k, v) in rest {
                write!(f, ";{k}={v}")?;
            }
        }
        Ok(())
    }
}

/// ZooKeeper's names for session states, as a WatchedEvent prints them.
pub fn state_name(s: zk::SessionState) -> &'static str {
    match s {
        zk::SessionState::Disconnected => "Disconnected",
        zk::SessionState::SyncConnected => "SyncConnected",
        zk::SessionState::AuthFailed => "AuthFailed",
        zk::SessionState::ConnectedReadOnly => "ConnectedReadOnly",
        zk::SessionState::Expired => "Expired",
        zk::SessionState::Closed => "Closed",
    }
}

/// A watch event as zkCli prints it (`WATCHER::`, then the event, each after a blank line).
pub fn watch_event(state: &str, kind: &str, path: Option<&str>) -> String {
    format!("\nWATCHER::\n\nWatchedEvent state:{state} type:{kind} path:{}\n", path.unwrap_or("null"))
}

/// zkCli's usage: the synopsis line, then each command indented by a tab.
pub fn usage() -> String {
    let mut s = String::from("ZooKeeper -server host:port -client-configuration properties-file cmd args\n");
    for (name, synopsis) in USAGE {
        s.push_str(&format!("\t{name} {synopsis}\n"));
    }
    s
}

/// A Java `List.toString`: `[a, b]`.
pub fn java_list(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_like_java() {
        assert_eq!(java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        // 2026-12-05T10:00:00Z
        assert_eq!(java_date(1_796_464_800_000), "Sat Dec 05 10:00:00 UTC 2026");
        assert_eq!(java_date(951_782_400_123), "Tue Feb 29 00:00:00 UTC 2000");
    }

    #[test]
    fn stat_lines() {
        let s = zk::Stat {
            czxid: 0x1a,
            mzxid: 0x20,
            pzxid: 0x1a,
            ctime: 0,
            mtime: 1_796_464_800_000,
            version: 2,
            cversion: 3,
            aversion: 1,
            ephemeral_owner: 0x100_0000_0000_0001,
            data_length: 5,
            num_children: 0,
        };
        assert_eq!(
            stat(&s),
            "cZxid = 0x1a\nctime = Thu Jan 01 00:00:00 UTC 1970\nmZxid = 0x20\nmtime = Sat Dec 05 10:00:00 UTC 2026\n\
             pZxid = 0x1a\ncversion = 3\ndataVersion = 2\naclVersion = 1\nephemeralOwner = 0x100000000000001\n\
             dataLength = 5\nnumChildren = 0\n"
        );
    }

    #[test]
    fn acls_print_and_parse() {
        let open = zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone());
        assert_eq!(acl(&open), "'world,'anyone\n: cdrwa\n");
        let (parsed, warnings) = parse_acl("digest:bob:xy=:ra,ip:10.0.0.1:rx,bad");
        assert_eq!(warnings, ["Unknown perm type: x", "bad does not have the form scheme:id:perm"]);
        assert_eq!(acl(&parsed[0]), "'digest,'bob:xy=\n: ra\n");
        assert_eq!(acl(&parsed[1]), "'ip,'10.0.0.1\n: r\n");
        assert_eq!(parsed.len(), 2);
        assert_eq!(jute_csv("a,b%"), "'a%2Cb%25");
    }

    #[test]
    fn quota_records() {
        let mut q = StatsTrack::default();
        q.set(StatsTrack::COUNT, 10);
        q.set(StatsTrack::BYTES, -1);
        q.set(StatsTrack::COUNT_HARD, -1);
        q.set(StatsTrack::BYTES_HARD, -1);
        let text = q.to_string();
        assert_eq!(text, "count=10,bytes=-1=;byteHardLimit=-1;countHardLimit=-1");
        assert_eq!(StatsTrack::parse(&text), q);
        assert_eq!(StatsTrack::parse("count=7,bytes=10").to_string(), "count=7,bytes=10");
        assert_eq!(StatsTrack::parse("").to_string(), "count=-1,bytes=-1");
    }

    #[test]
    fn events_and_usage() {
        assert_eq!(
            watch_event("SyncConnected", "NodeDataChanged", Some("/a")),
            "\nWATCHER::\n\nWatchedEvent state:SyncConnected type:NodeDataChanged path:/a\n"
        );
        assert_eq!(
            watch_event("Closed", "None", None),
            "\nWATCHER::\n\nWatchedEvent state:Closed type:None path:null\n"
        );
        let u = usage();
        assert!(u.starts_with("ZooKeeper -server host:port -client-configuration properties-file cmd args\n\taddWatch"));
        assert!(u.contains("\tclose \n\tconfig [-c] [-w] [-s]\n"));
        assert!(u.ends_with("\twhoami \n"));
        assert_eq!(java_list(&["/a".into(), "/b".into()]), "[/a, /b]");
    }
}
