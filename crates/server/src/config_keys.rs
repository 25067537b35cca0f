//! The zoo.cfg keys Warden knows: the one table that says, for each, what it does, its default,
//! an example value, its spellings, and whether Warden reads it or accepts and ignores it (why).
//!
//! [`Config::parse`](crate::config::Config::parse) consults it for the keys it accepts but
//! ignores; `warden config-keys` prints [`reference`], which is committed as docs/zoo-cfg.md; the
//! tests below hold the table and the parser to each other.

/// Where else a key may be written than as itself in zoo.cfg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// Only as written.
    Plain,
    /// Also as `zookeeper.<key>` in zoo.cfg.
    Prefixed,
    /// A ZooKeeper system property: in zoo.cfg with or without `zookeeper.`, or as
    /// `-Dzookeeper.<key>=<value>` in SERVER_JVMFLAGS / JVMFLAGS (zoo.cfg wins).
    SystemProperty,
    /// A TLS key: a system property (as [`Spelling::SystemProperty`]) that also exists with
    /// `ssl.quorum.` in place of `ssl.`, for TLS between servers.
    Tls,
}

/// Whether Warden acts on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStatus {
    /// Read and acted on.
    Read,
    /// Accepted (the server starts) but not acted on, for the reason given. `warn`: a warning
    /// names the key at start-up; false only where ignoring it changes nothing.
    Ignored { why: &'static str, warn: bool },
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct ZooCfgKey {
    /// The key; a trailing `<...>` stands for any non-empty suffix (`server.<N>`).
    pub key: &'static str,
    pub spelling: Spelling,
    /// Other names Warden takes for it (Warden's own prefixed forms).
    pub aliases: &'static [&'static str],
    /// The value when the key is absent (empty for ignored keys).
    pub default: &'static str,
    /// A value Warden accepts (used by the tests and shown in the reference).
    pub example: &'static str,
    /// What it does in Warden (for read keys) or in ZooKeeper (for ignored ones).
    pub about: &'static str,
    pub status: KeyStatus,
}

const fn read(
    key: &'static str,
    spelling: Spelling,
    default: &'static str,
    example: &'static str,
    about: &'static str,
) -> ZooCfgKey {
    ZooCfgKey { key, spelling, aliases: &[], default, example, about, status: KeyStatus::Read }
}

const fn ignored(key: &'static str, spelling: Spelling, example: &'static str, why: &'static str) -> ZooCfgKey {
    ZooCfgKey {
        key,
        spelling,
        aliases: &[],
        default: "",
        example,
        about: "",
        status: KeyStatus::Ignored { why, warn: true },
    }
}

use Spelling::{Plain, Prefixed, SystemProperty, Tls};

/// Every zoo.cfg key Warden reads, and every ZooKeeper key it accepts but ignores. A key in none
/// of these rows is accepted too, with an "unknown key" warning.
pub const ZOO_CFG_KEYS: &[ZooCfgKey] = &[
    // The basics.
    read("tickTime", Plain, "3000", "2000", "The tick in milliseconds: the unit of initLimit and syncLimit and of the default session timeout bounds."),
    read("dataDir", Plain, "required (./warden-data without a zoo.cfg)", "/var/lib/warden", "Snapshots, and the transaction log unless dataLogDir is set; `myid` is read from here."),
    read("dataLogDir", Plain, "dataDir", "/var/lib/warden", "Where the transaction log is written (a separate disk keeps fsyncs off the snapshot writes)."),
    read("clientPort", Plain, "2181", "2182", "The client port (0: any free port, reported by `conf`)."),
    read("clientPortAddress", Plain, "0.0.0.0 (127.0.0.1 without a zoo.cfg)", "127.0.0.1", "The address the client port is bound on (`localhost` or an IP address)."),
    read("maxClientCnxns", Plain, "60", "200", "Connections one client IP address may hold (0: no limit)."),
    read("minSessionTimeout", Plain, "2 × tickTime", "4000", "The shortest session timeout granted, in milliseconds."),
    read("maxSessionTimeout", Plain, "20 × tickTime", "40000", "The longest session timeout granted, in milliseconds."),
    read("4lw.commands.whitelist", Plain, "srvr", "srvr,ruok,mntr", "The four-letter words answered, comma-separated (`*`: all)."),
    read("extendedTypesEnabled", Prefixed, "false", "true", "Allows TTL nodes (ZooKeeper's extended types)."),
    read("jute.maxbuffer", Plain, "1048575", "4194304", "The largest packet a client may send, in bytes (at least 1024); quorum connections accept packets at least this large."),
    read("znode.container.checkIntervalMs", Plain, "60000", "10000", "How often empty containers and expired TTL nodes are looked for, in milliseconds."),
    read("readonlymode.enabled", Plain, "false", "true", "Read-only mode (also `--read-only`): a partitioned ensemble member serves reads to read-only clients."),
    ZooCfgKey {
        aliases: &["warden.linearizableReads"],
        ..read("linearizableReads", Plain, "false", "true", "Warden's own: every read in an ensemble is answered as if a sync had preceded it (ZooKeeper has no such key).")
    },
    read("reconfigEnabled", Plain, "false", "true", "Dynamic reconfiguration: the `reconfig` request (superuser or WRITE on /zookeeper/config), the configuration's version, and `<zoo.cfg>.dynamic.<version>` files written as each configuration becomes active. Off: `reconfig` is answered RECONFIGDISABLED."),
    read("dynamicConfigFile", Plain, "unset", "/etc/zookeeper/zoo.cfg.dynamic.100000000", "The file with the `server.N` lines (no other `server.N` in zoo.cfg); its version is the hex suffix after `.dynamic.`. Written by Warden when a reconfig becomes active, as ZooKeeper does."),
    read("standaloneEnabled", Plain, "true", "false", "false lets a reconfig leave a single voter (true: at least two). A zoo.cfg with one server.N line still runs standalone in Warden."),
    read("forceSync", Prefixed, "yes", "no", "`no` skips the fdatasync before a write is acknowledged (data can be lost on a crash)."),
    read("preAllocSize", Prefixed, "65536", "16384", "The transaction log grows in blocks of this many KiB."),
    read("snapCount", Prefixed, "100000", "50000", "A snapshot (and a new log file) after a random count of txns between snapCount/2 + 1 and snapCount."),
    read("snapshotSizeFactor", SystemProperty, "0.33", "0.5", "A leader syncs a learner behind its 500 txns in memory by a DIFF read from the on-disk txn log when the log holds the learner's last zxid and the log files after the one holding it add up to at most this fraction of the newest snapshot's size (no limit when that product is 0, as in ZooKeeper); otherwise by SNAP. Below 0: always SNAP."),
    read("autopurge.snapRetainCount", Plain, "3", "5", "Snapshots kept by the purge, with the logs they need (at least 3)."),
    read("autopurge.purgeInterval", Plain, "unset (purge on)", "0", "0 turns the purge off; a positive value keeps it on (Warden purges after every snapshot, not on an hourly timer)."),
    read("autopurge.enabled", Plain, "true", "false", "Warden's own switch for the purge (ZooKeeper's is purgeInterval)."),
    // The ensemble.
    read("server.<N>", Plain, "none (standalone)", "127.0.0.1:2888:3888:participant;2181", "An ensemble member `host:quorumPort:electionPort[:participant|observer][;[clientHost:]clientPort]`; this server is the one named in dataDir/myid."),
    read("initLimit", Plain, "10", "20", "Ticks a follower may take to connect to the leader and sync."),
    read("syncLimit", Plain, "5", "10", "Ticks a follower may fall behind the leader before it is dropped."),
    read("peerType", Plain, "participant", "observer", "This server's role: `participant` or `observer`."),
    // Client TLS and x509.
    read("secureClientPort", Plain, "none", "2281", "A TLS-only client port (needs ssl.keyStore.location)."),
    read("secureClientPortAddress", Plain, "clientPortAddress", "127.0.0.1", "The address the secure client port is bound on (needs secureClientPort)."),
    read("client.portUnification", Prefixed, "false", "true", "The plain client port also accepts TLS clients."),
    ZooCfgKey {
        status: KeyStatus::Ignored { why: "Warden has one connection layer, which serves TLS and plaintext; the Netty factory ZooKeeper needs for TLS is implied", warn: false },
        ..ignored("serverCnxnFactory", Prefixed, "org.apache.zookeeper.server.NettyServerCnxnFactory", "")
    },
    read("ssl.keyStore.location", Tls, "none (no TLS)", "/etc/warden/server.pem", "The server's certificate chain and key: PEM, PKCS#12 or JKS."),
    read("ssl.keyStore.password", Tls, "empty", "secret", "The key store's password."),
    read("ssl.keyStore.passwordPath", Tls, "none", "/etc/warden/keystore.pass", "A file holding the key store's password (wins over the password key)."),
    read("ssl.keyStore.type", Tls, "from the file name", "PEM", "PEM, PKCS12 or JKS."),
    read("ssl.trustStore.location", Tls, "none", "/etc/warden/ca.pem", "The certificates peer certificates are verified against."),
    read("ssl.trustStore.password", Tls, "empty", "secret", "The trust store's password."),
    read("ssl.trustStore.passwordPath", Tls, "none", "/etc/warden/truststore.pass", "A file holding the trust store's password."),
    read("ssl.trustStore.type", Tls, "from the file name", "PEM", "PEM, PKCS12 or JKS."),
    read("ssl.clientAuth", Tls, "need", "want", "Client certificates: `need`, `want` or `none`."),
    read("ssl.enabledProtocols", Tls, "TLSv1.2,TLSv1.3", "TLSv1.3", "The TLS versions offered (TLSv1.2, TLSv1.3; `TLS` means both)."),
    read("ssl.protocol", Tls, "TLSv1.2,TLSv1.3", "TLSv1.2", "The TLS version, when ssl.enabledProtocols is not set."),
    read("ssl.ciphersuites", Tls, "rustls's defaults", "TLS_AES_128_GCM_SHA256", "The cipher suites offered, comma-separated."),
    read("ssl.handshakeDetectionTimeoutMillis", Tls, "5000", "2000", "How long a connection may take to show (and complete) its TLS handshake."),
    read("ssl.hostnameVerification", Tls, "true", "false", "Peer certificates must name the peer's host (quorum connections)."),
    read("ssl.crl", Tls, "false", "false", "`true` is refused: Warden does not check certificate revocation lists."),
    read("ssl.ocsp", Tls, "false", "false", "`true` is refused: Warden does not check OCSP."),
    read("ssl.authProvider", SystemProperty, "x509", "x509", "The scheme client certificates authenticate as; only `x509` is accepted."),
    ignored("ssl.sslProvider", Tls, "JDK", "Warden's TLS is rustls; there is no JSSE provider to choose"),
    ignored("ssl.context.supplier.class", Tls, "com.example.Supplier", "Warden's TLS is rustls; a Java SSLContext supplier cannot be loaded"),
    read("client.certReload", SystemProperty, "true", "false", "Changed key and trust store files are reloaded for new connections."),
    read("netty.server.outstandingHandshake.limit", SystemProperty, "none (no limit)", "100", "TLS handshakes in progress at once; more connections wait."),
    read("X509AuthenticationProvider.superUser", SystemProperty, "none", "CN=admin", "The certificate subject that is the super user."),
    // TLS between servers.
    read("sslQuorum", Plain, "false", "true", "Servers connect to each other with TLS (the ssl.quorum.* stores)."),
    read("portUnification", Plain, "false", "true", "The quorum and election ports accept TLS and plaintext (for a rolling switch to TLS)."),
    read("sslQuorumReloadCertFiles", Plain, "false", "true", "Changed ssl.quorum.* store files are reloaded."),
    // SASL and ACLs.
    ZooCfgKey {
        aliases: &["warden.jaasLoginConfig"],
        ..read("jaasLoginConfig", Plain, "none", "/etc/warden/jaas.conf", "Warden's own: the JAAS file for SASL (`--jaas` wins; else -Djava.security.auth.login.config in SERVER_JVMFLAGS/JVMFLAGS).")
    },
    read("sasl.serverconfig", SystemProperty, "Server", "WardenServer", "The JAAS section the server logs in with."),
    read("SASLAuthenticationProvider.superPassword", SystemProperty, "none", "secret", "A DIGEST-MD5 password for the `super` user."),
    read("kerberos.removeHostFromPrincipal", SystemProperty, "false", "true", "Drops the host part of a Kerberos principal from the client's id."),
    read("kerberos.removeRealmFromPrincipal", SystemProperty, "false", "true", "Drops the realm of a Kerberos principal from the client's id."),
    read("security.auth_to_local", SystemProperty, "DEFAULT", "RULE:[1:$1@$0](.*@EXAMPLE.COM)s/@.*//", "Hadoop-style rules that map Kerberos principals to short names."),
    read("authProvider.<name>", SystemProperty, "none", "org.apache.zookeeper.server.auth.SASLAuthenticationProvider", "An authentication provider; Warden knows SASLAuthenticationProvider and X509AuthenticationProvider (digest and ip are built in)."),
    read("superUser", SystemProperty, "none", "admin", "A SASL id that is also `super`."),
    read("superUser.<suffix>", SystemProperty, "none", "admin", "More SASL ids that are also `super`."),
    read("sessionRequireClientSASLAuth", SystemProperty, "false", "true", "Every session must authenticate with SASL before other requests."),
    read("enforce.auth.enabled", SystemProperty, "false", "true", "Every session must authenticate with one of enforce.auth.schemes."),
    read("enforce.auth.schemes", SystemProperty, "none", "sasl,digest", "The schemes enforce.auth.enabled accepts, comma-separated."),
    read("allowSaslFailedClients", SystemProperty, "false", "true", "A client whose SASL authentication failed may stay connected (unauthenticated)."),
    read("skipACL", SystemProperty, "no", "yes", "`yes` turns ACL checks off."),
    read("DigestAuthenticationProvider.superDigest", SystemProperty, "none", "super:D/InIHSb7yEEbrWz8b9l71RjZJU=", "`user:BASE64(SHA1(user:password))` of the super user (also `--super-digest`)."),
    // Quorum SASL.
    read("quorum.auth.enableSasl", Plain, "false", "true", "Servers authenticate each other with SASL."),
    read("quorum.auth.learnerRequireSasl", Plain, "false", "true", "A learner refuses a leader that does not authenticate."),
    read("quorum.auth.serverRequireSasl", Plain, "false", "true", "A server refuses peers that do not authenticate."),
    read("quorum.auth.learner.saslLoginContext", Plain, "QuorumLearner", "WardenLearner", "The JAAS section a learner logs in with."),
    read("quorum.auth.server.saslLoginContext", Plain, "QuorumServer", "WardenQuorum", "The JAAS section a server accepts peers with."),
    read("quorum.auth.kerberos.servicePrincipal", Plain, "zkquorum/localhost", "zkquorum/_HOST", "The Kerberos service principal of the servers (`_HOST` becomes the peer's host)."),
    // AdminServer and metrics.
    read("admin.enableServer", SystemProperty, "true", "false", "The AdminServer (HTTP commands)."),
    read("admin.serverAddress", SystemProperty, "0.0.0.0", "127.0.0.1", "The AdminServer's address."),
    read("admin.serverPort", SystemProperty, "8080", "9090", "The AdminServer's port (one that cannot be bound is logged; the server runs on)."),
    read("admin.commandURL", SystemProperty, "/commands", "/admin", "The AdminServer's URL prefix."),
    read("admin.idleTimeout", SystemProperty, "30000", "60000", "Milliseconds an idle AdminServer connection is kept."),
    read("admin.snapshot.enabled", SystemProperty, "true", "false", "false: the snapshot admin command answers 503."),
    read("admin.restore.enabled", SystemProperty, "true", "false", "false: the restore admin command answers 503."),
    read("admin.rateLimiterIntervalInMS", SystemProperty, "300000", "60000", "One restore per this many milliseconds, one snapshot per this many microseconds (as ZooKeeper 3.9 counts them); more answer 429."),
    read("metricsProvider.className", SystemProperty, "org.apache.zookeeper.metrics.impl.DefaultMetricsProvider", "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider", "The Prometheus provider also serves the metrics over HTTP; any other class means the default (mntr and monitor only)."),
    read("metricsProvider.httpHost", SystemProperty, "0.0.0.0", "127.0.0.1", "The Prometheus endpoint's address."),
    read("metricsProvider.httpPort", SystemProperty, "7000", "7001", "The Prometheus endpoint's port."),
    ZooCfgKey {
        status: KeyStatus::Ignored { why: "the JVM's metric families: Warden has no JVM", warn: false },
        ..ignored("metricsProvider.exportJvmInfo", SystemProperty, "true", "")
    },
    // ZooKeeper keys Warden accepts and ignores.
    ignored("localSessionsEnabled", Plain, "true", "local sessions are not implemented: every session is global"),
    ignored("localSessionsUpgradingEnabled", Plain, "true", "local sessions are not implemented: every session is global"),
    ignored("observerMasterPort", Plain, "2191", "observers follow the leader; there is no observer master"),
    ignored("connectToLearnerMasterLimit", Plain, "10", "observers follow the leader; there is no observer master"),
    ignored("clientPortListenBacklog", Plain, "50", "not implemented: the client port listens with a backlog of 4096, capped by net.core.somaxconn"),
    ignored("electionAlg", Plain, "3", "Warden has fast leader election only (3, the only value ZooKeeper accepts)"),
    ignored("quorumListenOnAllIPs", Plain, "true", "not implemented: the quorum and election ports are bound on this server's own server.N address"),
    ignored("syncEnabled", Plain, "true", "not implemented"),
    ignored("quorum.cnxn.threads.size", Plain, "20", "connections between servers are async tasks; there is no thread pool to size"),
    ignored("jvm.pause.monitor", Plain, "true", "Warden has no JVM, so no collector pauses to watch"),
    ignored("jvm.pause.sleep.time.ms", Plain, "500", "Warden has no JVM, so no collector pauses to watch"),
    ignored("jvm.pause.info-threshold.ms", Plain, "1000", "Warden has no JVM, so no collector pauses to watch"),
    ignored("jvm.pause.warn-threshold.ms", Plain, "10000", "Warden has no JVM, so no collector pauses to watch"),
    ignored("multiAddress.enabled", Plain, "true", "a server.N line has one address"),
    ignored("multiAddress.reachabilityCheckEnabled", Plain, "true", "a server.N line has one address"),
    ignored("multiAddress.reachabilityCheckTimeoutMs", Plain, "1000", "a server.N line has one address"),
    ignored("oraclePath", Plain, "/etc/zookeeper/oracle", "not implemented"),
    ignored("group.<N>", Plain, "1:2:3", "hierarchical quorums are not implemented: the participants form one majority"),
    ignored("weight.<N>", Plain, "1", "hierarchical quorums are not implemented: every participant's vote counts once"),
    ignored("globalOutstandingLimit", SystemProperty, "1000", "not implemented: each connection may have 1000 requests outstanding"),
    ignored("maxCnxns", SystemProperty, "1000", "not implemented: maxClientCnxns limits connections per client address"),
    ignored("fsync.warningthresholdms", SystemProperty, "1000", "not implemented"),
    ignored("audit.enable", SystemProperty, "true", "audit logging is not implemented"),
    ignored("digest.enabled", SystemProperty, "false", "Warden always keeps ZooKeeper's tree digest (the hash command, digest checks); it cannot be turned off"),
];

impl ZooCfgKey {
    /// Does `name` (a zoo.cfg key, or a system property without its `zookeeper.`) name this key?
    pub fn matches(&self, name: &str) -> bool {
        if self.aliases.contains(&name) {
            return true;
        }
        let bare = match (self.spelling, name.strip_prefix("zookeeper.")) {
            (Plain, _) | (_, None) => name,
            (_, Some(rest)) => rest,
        };
        if self.spelling == Tls {
            if let Some(rest) = bare.strip_prefix("ssl.quorum.") {
                return self.pattern_matches(&format!("ssl.{rest}"));
            }
        }
        self.pattern_matches(bare)
    }

    fn pattern_matches(&self, name: &str) -> bool {
        match self.key.find('<') {
            Some(at) => name.len() > at && name.starts_with(&self.key[..at]),
            None => name == self.key,
        }
    }

    /// Is it also a `-Dzookeeper.<key>` system property?
    pub fn is_system_property(&self) -> bool {
        matches!(self.spelling, SystemProperty | Tls)
    }

    fn spellings(&self) -> String {
        let mut out = match self.spelling {
            Plain => vec![],
            Prefixed => vec![format!("`zookeeper.{}`", self.key)],
            SystemProperty => vec![format!("`zookeeper.{}`", self.key), format!("`-Dzookeeper.{}`", self.key)],
            Tls => {
                let quorum = self.key.replacen("ssl.", "ssl.quorum.", 1);
                vec![format!("`{quorum}`"), "`zookeeper.` and `-Dzookeeper.` forms".into()]
            }
        };
        out.extend(self.aliases.iter().map(|a| format!("`{a}`")));
        out.join(", ")
    }
}

/// The row for `name`, if any.
pub fn lookup(name: &str) -> Option<&'static ZooCfgKey> {
    ZOO_CFG_KEYS.iter().find(|k| k.matches(name))
}

/// The table as Markdown: what `warden config-keys` prints and docs/zoo-cfg.md holds.
pub fn reference() -> String {
    use std::fmt::Write as _;
    let cell = |s: &str| s.replace('|', "\\|");
    let mut o = String::new();
    o.push_str("# zoo.cfg keys\n\n");
    o.push_str("<!-- Generated by `warden config-keys` from crates/server/src/config_keys.rs; do not edit. -->\n\n");
    o.push_str(
        "`warden serve [ZOO_CFG]` reads a Java-properties zoo.cfg (`key=value`, `#` comments). The keys \
         below are the ones Warden reads; the second table lists ZooKeeper keys it accepts but \
         ignores (most with a warning at start-up). Any other key is accepted too, with an \"unknown \
         key\" warning, so an existing file starts unchanged.\n\n\
         System properties (the `-Dzookeeper.` forms) are taken from `$SERVER_JVMFLAGS $JVMFLAGS`, \
         as zkServer.sh passes them to the JVM; a key set in zoo.cfg wins over its flag. \
         `ssl.*` keys also exist as `ssl.quorum.*`, for TLS between servers.\n\n",
    );
    o.push_str("## Read\n\n| Key | Also as | Default | Example | What it does |\n|---|---|---|---|---|\n");
    for k in ZOO_CFG_KEYS.iter().filter(|k| k.status == KeyStatus::Read) {
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | `{}` | {} |",
            k.key,
            cell(&k.spellings()),
            cell(k.default),
            cell(k.example),
            cell(k.about)
        );
    }
    o.push_str("\n## Accepted and ignored\n\n| Key | Also as | Why Warden ignores it |\n|---|---|---|\n");
    for k in ZOO_CFG_KEYS {
        if let KeyStatus::Ignored { why, warn } = k.status {
            let quiet = if warn { "" } else { " (no warning)" };
            let _ = writeln!(o, "| `{}` | {} | {}{quiet} |", k.key, cell(&k.spellings()), cell(why));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A key as it can be written: `<...>` replaced by a number.
    fn sample(key: &str) -> String {
        match key.find('<') {
            Some(at) => format!("{}1", &key[..at]),
            None => key.to_string(),
        }
    }

    #[test]
    fn no_two_rows_claim_one_key() {
        for k in ZOO_CFG_KEYS {
            let rows: Vec<&str> = ZOO_CFG_KEYS.iter().filter(|o| o.matches(&sample(k.key))).map(|o| o.key).collect();
            assert_eq!(rows, [k.key], "{} is matched by several rows", k.key);
            if k.status == KeyStatus::Read {
                assert!(!k.about.is_empty() && !k.default.is_empty(), "{}: what it does and its default", k.key);
            }
        }
    }

    /// A zoo.cfg holding every key of the table, with its example value (and its other spellings):
    /// it parses, nothing in it is unknown, a read key is never among the ignored ones, and an
    /// ignored key is (unless it is a quiet one).
    #[test]
    fn every_table_key_is_known_to_the_parser() {
        let mut text = String::from("dataDir=/d\nsecureClientPort=2281\n");
        for k in ZOO_CFG_KEYS.iter().filter(|k| k.key != "secureClientPort" && k.key != "dataDir") {
            let name = sample(k.key);
            text.push_str(&format!("{name}={}\n", k.example));
        }
        let c = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(c.unknown_keys(), Vec::<&str>::new());
        for k in ZOO_CFG_KEYS {
            let name = sample(k.key);
            match k.status {
                KeyStatus::Read => assert!(!c.ignored.contains_key(&name), "{name} is read, yet ignored"),
                KeyStatus::Ignored { warn, .. } => assert_eq!(c.ignored.contains_key(&name), warn, "{name}"),
            }
        }
        // The other spellings the table claims.
        for k in ZOO_CFG_KEYS.iter().filter(|k| k.status == KeyStatus::Read) {
            let mut names = k.aliases.iter().map(|a| a.to_string()).collect::<Vec<_>>();
            if k.spelling != Plain {
                names.push(format!("zookeeper.{}", sample(k.key)));
            }
            if k.spelling == Tls {
                names.push(sample(k.key).replacen("ssl.", "ssl.quorum.", 1));
            }
            for name in names {
                let c = Config::parse(&format!("dataDir=/d\n{name}={}\n", k.example))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(c.ignored.is_empty(), "{name} is ignored: {:?}", c.ignored);
            }
            if k.is_system_property() {
                let mut c = Config::parse("dataDir=/d\n").unwrap();
                let taken = c.apply_jvm_flags(&format!("-Dzookeeper.{}={}", sample(k.key), k.example));
                assert_eq!(taken, [format!("zookeeper.{}", sample(k.key))], "-Dzookeeper.{} is not taken", k.key);
            }
        }
        // Unknown keys, and ssl.* keys outside the table, are reported as unknown.
        let c = Config::parse("dataDir=/d\nnoSuchKey=1\nssl.noSuchKey=2\n").unwrap();
        assert_eq!(c.unknown_keys(), ["noSuchKey", "ssl.noSuchKey"]);
        assert!(c.ssl.is_empty());
    }

    /// A read key is acted on: its example (never its default) changes the parsed settings, or for
    /// a TLS key the settings `TlsSettings::from_keys` makes of them, for `ssl.` and `ssl.quorum.`.
    #[test]
    fn every_read_key_changes_what_warden_does() {
        let settings = |text: &str| {
            let mut c = Config::parse(&format!("dataDir=/d\n{text}")).unwrap();
            c.file_keys.clear();
            c
        };
        for k in ZOO_CFG_KEYS.iter().filter(|k| k.status == KeyStatus::Read) {
            // ssl.crl and ssl.ocsp: `false`, the default, is the one value accepted; `true` is refused.
            // ssl.authProvider: `x509`, the default, is the one value accepted.
            let refused = matches!(k.key, "ssl.crl" | "ssl.ocsp");
            let one_value = refused || k.key == "ssl.authProvider";
            assert!(one_value || k.example != k.default, "{}: the example must differ from the default", k.key);
            let line = format!("{}={}\n", sample(k.key), k.example);
            if k.spelling == Tls || k.key == "client.certReload" || k.key == "netty.server.outstandingHandshake.limit" {
                // Kept in `Config::ssl` for TlsSettings::from_keys, which must see the difference.
                for prefix in ["ssl.", "ssl.quorum."] {
                    let stores = format!("{prefix}keyStore.location=/k.p12\n{prefix}trustStore.location=/t.p12\n");
                    let line =
                        line.replacen("ssl.", prefix, 1).replace("=false", if refused { "=true" } else { "=false" });
                    let tls = |text: &str| crate::tls::TlsSettings::from_keys(&settings(text).ssl, prefix);
                    let (before, after) = (tls(&stores), tls(&format!("{stores}{line}")));
                    assert!(before.is_ok(), "{before:?}");
                    match after {
                        Err(_) => assert!(refused || k.key.ends_with("passwordPath"), "{line} refused"),
                        Ok(after) => assert_ne!(after, before.unwrap(), "{line} changes nothing"),
                    }
                }
            } else if k.key != "ssl.authProvider" {
                // ssl.authProvider: x509 is the only provider; any other value is refused (tested above).
                let needs = if k.key == "secureClientPortAddress" { "secureClientPort=2281\n" } else { "" };
                let (before, after) = (settings(needs), settings(&format!("{needs}{line}")));
                assert_ne!(format!("{after:?}"), format!("{before:?}"), "{line} changes nothing");
            }
        }
    }

    /// The other way round: every key the parser's match arms name is in the table. Read from
    /// config.rs's source: the arms of `match key` in `parse` and `apply_system_property`.
    #[test]
    fn every_key_the_parser_matches_is_in_the_table() {
        let source = include_str!("config.rs");
        let source = &source[..source.find("#[cfg(test)]").unwrap()];
        let mut literals = Vec::new();
        for (start, end) in
            [("pub fn parse(text", "impl Config {"), ("fn apply_system_property", "pub fn apply_jvm_flags")]
        {
            let body = &source[source.find(start).unwrap()..];
            let body = &body[..body.find(end).unwrap()];
            let at = body.find("match key {").unwrap();
            let arms = &body[at..];
            let first = arms.lines().nth(1).unwrap();
            let indent = first.len() - first.trim_start().len();
            let mut in_guard = false;
            for line in arms.lines().skip(1) {
                let depth = line.len() - line.trim_start().len();
                if depth < indent && !line.trim().is_empty() {
                    break;
                }
                let arm =
                    depth == indent && (line.trim_start().starts_with('"') || line.trim_start().starts_with("k if"));
                if arm || in_guard {
                    let head = line.split("=>").next().unwrap();
                    literals.extend(head.split('"').skip(1).step_by(2).map(str::to_string));
                    in_guard = !line.contains("=>");
                }
            }
        }
        assert!(literals.len() > 60, "the arms were found: {literals:?}");
        for lit in literals {
            let known = if lit.ends_with('.') {
                // A prefix (`server.`, `authProvider.`, `ssl.`, `zookeeper.ssl.`): some row lies under it.
                let bare = lit.strip_prefix("zookeeper.").unwrap_or(&lit);
                ZOO_CFG_KEYS.iter().any(|k| k.key.starts_with(bare))
            } else {
                lookup(&lit).is_some()
            };
            assert!(known, "the parser matches {lit:?}, which is not in ZOO_CFG_KEYS");
        }
    }
}
