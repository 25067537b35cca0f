//! The ensemble's membership as ZooKeeper writes it: `server.N=` lines in zoo.cfg and in the
//! dynamic config file, the text of `/zookeeper/config` and of a reconfig txn (ZooKeeper's
//! `QuorumMaj.toString`), and the reconfig request's member lists.
//!
//! * A server line is `host:quorumPort:electionPort[:participant|:observer][;[clientHost:]clientPort]`
//!   ([`ServerSpec::parse`]); an IPv6 host is written in brackets.
//! * [`Membership::to_text`] is `QuorumMaj.toString`: one `server.N=spec` line per member, then
//!   `version=<hex>` with no newline after it. The role is always written; the client address only
//!   when it came from the server line, `0.0.0.0` when that gave only a port. Members are listed by
//!   id (ZooKeeper lists them in its hash map's order, which is the same for ids below 16).
//! * A reconfig is incremental ([`Membership::incremental`]: leaving ids removed, joining servers
//!   added or replaced; each joiner needs all three ports) or a whole new member list
//!   ([`Membership::from_new_members`]: comma- or newline-separated lines).
//!
//! Absent: hierarchical quorums (`group.N`, `weight.N`) and several addresses per server
//! (`multiAddress.enabled`); both are refused as bad arguments.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A participant votes and can lead; an observer replicates without voting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRole {
    Participant,
    Observer,
}

/// One member: the value of a `server.N` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub id: u64,
    pub host: String,
    pub quorum_port: u16,
    pub election_port: u16,
    pub role: ServerRole,
    /// The client address from the `;` part, if given (`0.0.0.0` when only a port was).
    pub client: Option<(String, u16)>,
}

/// Why a member line, a config text or a reconfig request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("expected host:quorumPort:electionPort[:participant|observer], got {0:?}")]
    ServerFormat(String),
    #[error("bad port {0:?}")]
    Port(String),
    #[error("unknown role {0:?}")]
    Role(String),
    #[error("wrong format of server string {0:?}")]
    Joiner(String),
    #[error("each joining server should have 3 ports specified: {0:?}")]
    JoinerPorts(String),
    #[error("bad server id {0:?}")]
    Id(String),
    #[error("server {0} and server {1} share the address {2}")]
    DuplicateAddress(u64, u64, String),
    #[error("unsupported dynamic config line {0:?} (hierarchical quorums are not supported)")]
    Line(String),
    #[error("bad version {0:?}")]
    Version(String),
}

impl ServerSpec {
    /// Parses the value of a `server.N` line.
    pub fn parse(id: u64, value: &str) -> Result<ServerSpec, MembershipError> {
        let (server, client) = match value.split_once(';') {
            Some((s, c)) => (s.trim(), Some(c)),
            None => (value.trim(), None),
        };
        if server.contains('|') {
            return Err(MembershipError::ServerFormat(server.to_string()));
        }
        let (host, rest) = split_host(server).ok_or_else(|| MembershipError::ServerFormat(server.to_string()))?;
        let parts: Vec<&str> = rest.split(':').collect();
        if parts.len() < 2 || parts.len() > 3 || host.is_empty() {
            return Err(MembershipError::ServerFormat(server.to_string()));
        }
        let role = match parts.get(2).map(|r| r.trim().to_ascii_lowercase()) {
            None => ServerRole::Participant,
            Some(r) if r == "participant" => ServerRole::Participant,
            Some(r) if r == "observer" => ServerRole::Observer,
            Some(other) => return Err(MembershipError::Role(other)),
        };
        let client = client.map(|c| parse_client_addr(c.split(';').next().unwrap_or(c))).transpose()?;
        Ok(ServerSpec {
            id,
            host: host.to_string(),
            quorum_port: port(parts[0])?,
            election_port: port(parts[1])?,
            role,
            client,
        })
    }

    /// `QuorumServer.toString`: the value of this member's line.
    pub fn render(&self, out: &mut String) {
        let _ = write!(out, "{}:{}:{}", bracketed(&self.host), self.quorum_port, self.election_port);
        out.push_str(match self.role {
            ServerRole::Participant => ":participant",
            ServerRole::Observer => ":observer",
        });
        if let Some((host, port)) = &self.client {
            let _ = write!(out, ";{}:{port}", bracketed(host));
        }
    }

    pub fn is_voter(&self) -> bool {
        self.role == ServerRole::Participant
    }
}

/// `host` and the text after the `:` that follows it; an IPv6 host is `[...]`. A bracket within
/// the host is refused: no host name or address holds one, and it would not be written back in
/// a form that parses.
fn split_host(server: &str) -> Option<(&str, &str)> {
    let (host, rest) = match server.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']')?;
            (host.trim(), after.strip_prefix(':')?)
        }
        None => server.split_once(':').map(|(h, r)| (h.trim(), r))?,
    };
    (!host.contains(['[', ']'])).then_some((host, rest))
}

fn bracketed(host: &str) -> String {
    match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_string(),
    }
}

fn port(p: &str) -> Result<u16, MembershipError> {
    p.trim().parse::<u16>().map_err(|_| MembershipError::Port(p.to_string()))
}

fn parse_client_addr(text: &str) -> Result<(String, u16), MembershipError> {
    let text = text.trim();
    let (host, p) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once("]:").ok_or_else(|| MembershipError::Port(text.to_string()))?;
        (host.trim(), after)
    } else {
        // An IPv6 host must be bracketed: more than one ':' is ZooKeeper's "Too many ':' in client
        // part" (`ConfigUtils.splitWithLeadingHostname`).
        match text.split_once(':') {
            Some((_, p)) if p.contains(':') => return Err(MembershipError::Port(text.to_string())),
            Some((h, p)) => (h.trim(), p),
            None => ("0.0.0.0", text),
        }
    };
    // As in `split_host`: a host holds no bracket.
    if host.contains(['[', ']']) {
        return Err(MembershipError::Port(text.to_string()));
    }
    Ok((host.to_string(), port(p)?))
}

/// A configuration: its members and its version (the zxid of the reconfig that made it; 0 for
/// one from a config file that never went through a leader with reconfig enabled).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Membership {
    pub servers: BTreeMap<u64, ServerSpec>,
    pub version: i64,
}

impl Membership {
    pub fn new(servers: impl IntoIterator<Item = ServerSpec>, version: i64) -> Self {
        Self { servers: servers.into_iter().map(|s| (s.id, s)).collect(), version }
    }

    /// `QuorumMaj.toString`: the text of `/zookeeper/config` and of a reconfig txn.
    pub fn to_text(&self) -> String {
        let mut text = self.member_lines();
        let _ = write!(text, "version={:x}", self.version);
        text
    }

    /// The dynamic config file's content: the member lines without a version, no newline after
    /// the last (`QuorumPeerConfig.writeDynamicConfig`).
    pub fn dynamic_file_text(&self) -> String {
        let mut text = self.member_lines();
        text.pop();
        text
    }

    fn member_lines(&self) -> String {
        let mut text = String::new();
        for s in self.servers.values() {
            let _ = write!(text, "server.{}=", s.id);
            s.render(&mut text);
            text.push('\n');
        }
        text
    }

    /// Parses `server.N=` lines and an optional `version=<hex>` line (a config text, a dynamic
    /// file, a reconfig's new member list with its commas turned into newlines). Blank lines and
    /// `#` comments are skipped. Without a version line the version is 0.
    pub fn parse_text(text: &str) -> Result<Membership, MembershipError> {
        let mut m = Membership::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (key, value) = line.split_once('=').ok_or_else(|| MembershipError::Line(line.to_string()))?;
            let key = key.trim();
            if key == "version" {
                // A version is a zxid, never negative (and printed as unsigned hex, which a
                // negative one would not parse back from).
                m.version = i64::from_str_radix(value.trim(), 16)
                    .ok()
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| MembershipError::Version(value.to_string()))?;
            } else if let Some(id) = key.strip_prefix("server.") {
                let id = id.parse::<u64>().map_err(|_| MembershipError::Id(id.to_string()))?;
                m.servers.insert(id, ServerSpec::parse(id, value)?);
            } else {
                return Err(MembershipError::Line(line.to_string()));
            }
        }
        Ok(m)
    }

    /// A reconfig's whole new member list (`newMembers`: lines separated by commas or newlines).
    /// The version is left 0 for the caller to set.
    pub fn from_new_members(text: &str) -> Result<Membership, MembershipError> {
        let mut m = Membership::parse_text(&text.replace(',', "\n"))?;
        m.version = 0;
        m.check_addresses()?;
        Ok(m)
    }

    /// An incremental reconfig from this configuration: `leaving` ids (comma-separated) removed,
    /// then each `joining` server (`server.N=spec` or `N=spec`, comma-separated, all three ports
    /// given) added or, for an existing id, replaced. The version is left for the caller to set.
    pub fn incremental(&self, joining: Option<&str>, leaving: Option<&str>) -> Result<Membership, MembershipError> {
        let mut next = self.servers.clone();
        for id in leaving.into_iter().flat_map(|l| l.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
            let id = id.parse::<u64>().map_err(|_| MembershipError::Id(id.to_string()))?;
            next.remove(&id);
        }
        for joiner in joining.into_iter().flat_map(|j| j.split(',')).filter(|s| !s.trim().is_empty()) {
            let parts: Vec<&str> = joiner.split('=').filter(|p| !p.is_empty()).collect();
            let [key, spec] = parts[..] else { return Err(MembershipError::Joiner(joiner.to_string())) };
            let id_text = key.rsplit('.').next().unwrap_or(key).trim();
            let id = id_text.parse::<u64>().map_err(|_| MembershipError::Id(id_text.to_string()))?;
            let server = ServerSpec::parse(id, spec)?;
            if server.client.is_none() {
                return Err(MembershipError::JoinerPorts(joiner.to_string()));
            }
            for other in next.values().filter(|o| o.id != id) {
                check_duplicate(&server, other)?;
            }
            next.insert(id, server);
        }
        Ok(Membership { servers: next, version: 0 })
    }

    /// No two members share a quorum or election address (`QuorumServer.checkAddressDuplicate`).
    fn check_addresses(&self) -> Result<(), MembershipError> {
        let all: Vec<&ServerSpec> = self.servers.values().collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                check_duplicate(a, b)?;
            }
        }
        Ok(())
    }

    /// The voting members' ids.
    pub fn voters(&self) -> impl Iterator<Item = u64> + '_ {
        self.servers.values().filter(|s| s.is_voter()).map(|s| s.id)
    }

    /// The observers' ids.
    pub fn observers(&self) -> impl Iterator<Item = u64> + '_ {
        self.servers.values().filter(|s| !s.is_voter()).map(|s| s.id)
    }
}

fn check_duplicate(a: &ServerSpec, b: &ServerSpec) -> Result<(), MembershipError> {
    let a_addrs = [a.quorum_port, a.election_port];
    for port in [b.quorum_port, b.election_port] {
        if a.host == b.host && a_addrs.contains(&port) {
            return Err(MembershipError::DuplicateAddress(a.id, b.id, format!("{}:{port}", bracketed(&a.host))));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Membership {
        Membership::parse_text(
            "server.1=127.0.0.1:2888:3888\nserver.2=127.0.0.2:2888:3888:participant\nserver.3=127.0.0.3:2888:3888:observer",
        )
        .unwrap()
    }

    #[test]
    fn a_host_holding_a_bracket_is_refused_where_it_would_not_parse_back() {
        // Found by the dynamic_config fuzz target: `[[]` read as the host `[`, written back as
        // `[:2890:...`, which does not parse.
        for bad in [
            "[[]:2890:3890:observer",
            "1]:2890:3890",
            "[a[b]:2890:3890",
            "127.0.0.1:2890:3890;[[]:2181",
            "127.0.0.1:2890:3890;a]:2181",
        ] {
            assert!(ServerSpec::parse(23, bad).is_err(), "{bad}");
        }
        for good in ["[::1]:2890:3890:observer;[::1]:2181", "host-a:2890:3890;host-a:2181"] {
            let s = ServerSpec::parse(23, good).unwrap();
            let mut text = String::new();
            s.render(&mut text);
            assert_eq!(ServerSpec::parse(23, &text).unwrap(), s, "{good} round trips");
        }
    }

    #[test]
    fn text_is_quorum_maj_to_string() {
        let mut m = three();
        m.version = 0x1_0000_0000;
        assert_eq!(
            m.to_text(),
            "server.1=127.0.0.1:2888:3888:participant\nserver.2=127.0.0.2:2888:3888:participant\n\
             server.3=127.0.0.3:2888:3888:observer\nversion=100000000"
        );
        assert_eq!(Membership::parse_text(&m.to_text()).unwrap(), m, "the text parses back");
        assert!(!m.dynamic_file_text().contains("version") && !m.dynamic_file_text().ends_with('\n'));
        // A client port alone is rendered with the wildcard host, as ZooKeeper observed does.
        let s = ServerSpec::parse(1, "127.0.0.1:13401:13402;13501").unwrap();
        let mut out = String::new();
        s.render(&mut out);
        assert_eq!(out, "127.0.0.1:13401:13402:participant;0.0.0.0:13501");
        let v6 = ServerSpec::parse(4, "[::1]:1:2:observer;[::1]:3").unwrap();
        let mut out = String::new();
        v6.render(&mut out);
        assert_eq!(out, "[::1]:1:2:observer;[::1]:3");
    }

    #[test]
    fn incremental_changes_as_kazoo_expects() {
        let m = three();
        let joined = m.incremental(Some("server.100=0.0.0.0:1234:2345:observer;0.0.0.0:3456"), None).unwrap();
        assert!(joined.to_text().contains("server.100=0.0.0.0:1234:2345:observer;0.0.0.0:3456"));
        assert_eq!(joined.voters().collect::<Vec<_>>(), [1, 2]);
        let left = joined.incremental(None, Some("100")).unwrap();
        assert_eq!(left.servers, m.servers);
        // `N=spec` works too, and replaces an existing member's role in place.
        let promoted = m.incremental(Some("3=127.0.0.3:2888:3888:participant;2181"), None).unwrap();
        assert_eq!(promoted.voters().count(), 3);
        assert!(matches!(m.incremental(Some("some thing"), None), Err(MembershipError::Joiner(_))));
        assert!(matches!(m.incremental(Some("server.5=h:1:2"), None), Err(MembershipError::JoinerPorts(_))));
        assert!(matches!(m.incremental(None, Some("x")), Err(MembershipError::Id(_))));
        assert!(matches!(
            m.incremental(Some("server.5=127.0.0.1:3888:9:participant;1"), None),
            Err(MembershipError::DuplicateAddress(5, 1, _))
        ));
    }

    #[test]
    fn new_members_replace_everything() {
        let m = Membership::from_new_members("server.1=a:1:2;3,server.2=b:1:2;3\nserver.3=c:1:2:observer;3").unwrap();
        assert_eq!((m.voters().count(), m.observers().count(), m.version), (2, 1, 0));
        assert!(matches!(Membership::from_new_members("group.1=1:2"), Err(MembershipError::Line(_))));
        assert!(Membership::from_new_members("server.1=a:1:1;3").is_ok(), "one server may reuse its own port");
        assert!(matches!(
            Membership::from_new_members("server.1=a:1:2;3,server.2=a:2:5;3"),
            Err(MembershipError::DuplicateAddress(1, 2, _))
        ));
    }

    #[test]
    fn what_parses_prints_back_to_text_that_parses_the_same() {
        // Found by the election_stream and quorum_stream fuzz targets: an unbracketed client host
        // with colons printed bracketed and did not parse back; a negative version printed as
        // unsigned hex and did not parse back.
        let bad = "server.1=127.0.0.1:2888:3888:participant;088r:p1]:388.0.0.0:2181:2181";
        assert_eq!(Membership::parse_text(bad), Err(MembershipError::Port("088r:p1]:388.0.0.0:2181:2181".into())));
        let bad = "server.1=127.0.0.1:2888:3888\nversion=-50000000";
        assert_eq!(Membership::parse_text(bad), Err(MembershipError::Version("-50000000".into())));
        for text in [
            "server.1=[ ::1 ]:2888:3888:participant;[ ::1 ]:2181\nversion=7fffffffffffffff",
            "server.1=[ a ]:2888:3888;[ b ]:2181\nversion=0",
            "server.2=h:1:2:observer;[::]:3\nversion=100000000",
        ] {
            let m = Membership::parse_text(text).unwrap();
            assert_eq!(Membership::parse_text(&m.to_text()).as_ref(), Ok(&m), "{text}");
        }
    }
}
