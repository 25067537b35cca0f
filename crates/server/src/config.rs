//! zoo.cfg: ZooKeeper's Java-properties configuration (keys and defaults as
//! `QuorumPeerConfig.parseProperties` reads them).
//!
//! Unknown keys are kept and warned about, never fatal, so an operator's existing file works unchanged.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use thiserror::Error;

use crate::config_keys::{self, KeyStatus};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("line {line}: {key}: {reason}")]
    Value { line: usize, key: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

pub use warden_proto::membership::{ServerRole, ServerSpec};

/// The settings Warden uses, with ZooKeeper's defaults.
#[derive(Debug, Clone)]
pub struct Config {
    pub tick_time_ms: u32,
    pub data_dir: PathBuf,
    pub data_log_dir: PathBuf,
    pub client_port: u16,
    pub client_port_address: IpAddr,
    pub max_client_cnxns: u32,
    pub min_session_timeout_ms: u32,
    pub max_session_timeout_ms: u32,
    /// `4lw.commands.whitelist`: `None` means the default (`srvr` only); `Some(["*"])` means all.
    pub four_letter_whitelist: Vec<String>,
    pub extended_types_enabled: bool,
    pub jute_max_buffer: usize,
    /// Outstanding requests one connection may have before the server stops reading from it.
    pub max_outstanding_per_connection: usize,
    pub super_digest: Option<String>,
    pub skip_acl: bool,
    pub container_check_interval_ms: u64,
    pub read_only: bool,
    /// `linearizableReads` (Warden's; ZooKeeper has none): every read in an ensemble is served
    /// as if a quorum-confirmed sync preceded it.
    pub linearizable_reads: bool,
    pub reconfig_enabled: bool,
    /// `standaloneEnabled`: a reconfig must leave two voters (one when false).
    pub standalone_enabled: bool,
    /// `dynamicConfigFile`: where the `server.N` lines were read from.
    pub dynamic_config_file: Option<PathBuf>,
    /// The configuration's version: the dynamic file name's hex suffix (0 without one).
    pub config_version: i64,
    /// The zoo.cfg this configuration was loaded from (rewritten when a reconfig activates).
    pub config_path: Option<PathBuf>,
    /// `forceSync`: fdatasync the log before acknowledging (default yes).
    pub force_sync: bool,
    /// `preAllocSize` (KiB in zoo.cfg): the transaction log grows in blocks of this many bytes.
    pub pre_alloc_bytes: u64,
    /// `snapCount`: a snapshot (and a new log file) after a random count of txns in
    /// [snapCount/2 + 1, snapCount].
    pub snap_count: u64,
    /// `snapshotSizeFactor` (`zookeeper.snapshotSizeFactor`): a leader syncs a learner behind its
    /// in-memory history by DIFF from the on-disk log when the log files to read are at most this
    /// fraction of the newest snapshot's size; below 0, by SNAP.
    pub snapshot_size_factor: f64,
    /// `autopurge.snapRetainCount` (at least 3): snapshots kept, with the logs they need.
    pub snap_retain_count: usize,
    /// Purge old snapshots and logs after each snapshot. On by default, unlike ZooKeeper. Off with
    /// `autopurge.purgeInterval=0` written explicitly (ZooKeeper's "disabled") or
    /// `autopurge.enabled=false`; a positive purgeInterval keeps it on (Warden purges after every
    /// snapshot rather than on an hourly timer).
    pub purge_enabled: bool,
    /// `server.N` lines: the ensemble. Empty or a single entry means standalone.
    pub servers: std::collections::BTreeMap<u64, ServerSpec>,
    /// `myid` from the dataDir (absent when standalone).
    pub my_id: Option<u64>,
    /// `initLimit` and `syncLimit`, in ticks.
    pub init_limit: u32,
    pub sync_limit: u32,
    /// `peerType`: this server's role.
    pub peer_type: ServerRole,
    /// SASL: the JAAS file (`jaasLoginConfig`; `--jaas` and the JVM flags in the environment are
    /// applied by the `warden` binary), the server section, principal rewriting.
    pub sasl: crate::sasl::SaslSettings,
    /// `authProvider.<any>=<class>` values: the extra authentication providers.
    pub auth_providers: Vec<String>,
    /// `zookeeper.superUser` and `zookeeper.superUser.<suffix>`: SASL ids that are also `super`.
    pub sasl_super_users: Vec<String>,
    /// `zookeeper.sessionRequireClientSASLAuth`.
    pub session_require_client_sasl_auth: bool,
    /// `zookeeper.enforce.auth.enabled` and `zookeeper.enforce.auth.schemes`.
    pub enforce_auth_enabled: bool,
    pub enforce_auth_schemes: Vec<String>,
    /// `zookeeper.allowSaslFailedClients`.
    pub allow_sasl_failed_clients: bool,
    /// `admin.*`: the AdminServer.
    pub admin: crate::admin::AdminSettings,
    /// `metricsProvider.className`.
    pub metrics_provider: MetricsProvider,
    /// `metricsProvider.httpHost` / `httpPort`: the Prometheus endpoint.
    pub metrics: crate::admin::MetricsSettings,
    /// The zoo.cfg text as read (the `initial_configuration` admin command).
    pub initial_text: Option<String>,
    /// The keys the zoo.cfg file set (without a `zookeeper.` prefix): JVM flags do not override them.
    pub file_keys: std::collections::BTreeSet<String>,
    /// `secureClientPort` / `secureClientPortAddress` (default: `clientPortAddress`): a TLS-only
    /// client listener.
    pub secure_client_port: Option<u16>,
    pub secure_client_port_address: Option<IpAddr>,
    /// `client.portUnification`: the plain client port also accepts TLS.
    pub client_port_unification: bool,
    /// Every `ssl.*` key, `ssl.quorum.*` included (a leading `zookeeper.` removed), and
    /// `client.certReload`: read by [`crate::tls::TlsSettings::from_keys`].
    pub ssl: BTreeMap<String, String>,
    /// `sslQuorum`: servers dial each other with TLS (`ssl.quorum.*`).
    pub ssl_quorum: bool,
    /// `portUnification`: the quorum and election ports accept TLS and plaintext.
    pub port_unification: bool,
    /// `sslQuorumReloadCertFiles`: reload changed `ssl.quorum.*` stores.
    pub ssl_quorum_reload_cert_files: bool,
    /// `quorum.auth.*`: SASL between servers.
    pub quorum_sasl: crate::sasl::quorum::QuorumSaslSettings,
    /// `zookeeper.X509AuthenticationProvider.superUser`.
    pub x509_super_user: Option<String>,
    /// `key=value` pairs Warden does not act on: the keys [`config_keys`] lists as accepted and
    /// ignored, and unknown ones ([`Config::unknown_keys`]); kept for `conf` and warnings.
    pub ignored: BTreeMap<String, String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            tick_time_ms: 3000,
            data_dir: PathBuf::from("warden-data"),
            data_log_dir: PathBuf::from("warden-data"),
            client_port: 2181,
            client_port_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            max_client_cnxns: 60,
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 60000,
            four_letter_whitelist: vec!["srvr".into()],
            extended_types_enabled: false,
            jute_max_buffer: 0xfffff,
            max_outstanding_per_connection: 1000,
            super_digest: None,
            skip_acl: false,
            container_check_interval_ms: 60_000,
            read_only: false,
            linearizable_reads: false,
            reconfig_enabled: false,
            standalone_enabled: true,
            dynamic_config_file: None,
            config_version: 0,
            config_path: None,
            force_sync: true,
            pre_alloc_bytes: 64 * 1024 * 1024,
            snap_count: 100_000,
            snapshot_size_factor: 0.33,
            snap_retain_count: 3,
            purge_enabled: true,
            servers: std::collections::BTreeMap::new(),
            my_id: None,
            init_limit: 10,
            sync_limit: 5,
            peer_type: ServerRole::Participant,
            sasl: crate::sasl::SaslSettings { section: "Server".into(), ..Default::default() },
            auth_providers: Vec::new(),
            sasl_super_users: Vec::new(),
            session_require_client_sasl_auth: false,
            enforce_auth_enabled: false,
            enforce_auth_schemes: Vec::new(),
            allow_sasl_failed_clients: false,
            admin: Default::default(),
            metrics_provider: MetricsProvider::Default,
            metrics: Default::default(),
            initial_text: None,
            file_keys: Default::default(),
            secure_client_port: None,
            secure_client_port_address: None,
            client_port_unification: false,
            ssl: BTreeMap::new(),
            ssl_quorum: false,
            port_unification: false,
            ssl_quorum_reload_cert_files: false,
            quorum_sasl: Default::default(),
            x509_super_user: None,
            ignored: BTreeMap::new(),
        }
    }
}

impl Config {
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::new(self.client_port_address, self.client_port)
    }

    /// The TLS-only client address, when `secureClientPort` is set.
    pub fn secure_client_addr(&self) -> Option<SocketAddr> {
        let port = self.secure_client_port?;
        Some(SocketAddr::new(self.secure_client_port_address.unwrap_or(self.client_port_address), port))
    }

    /// The client-port TLS settings (`ssl.*`), when a key store is configured.
    pub fn client_tls(&self) -> Result<Option<crate::tls::TlsSettings>, crate::tls::TlsError> {
        crate::tls::TlsSettings::from_keys(&self.ssl, "ssl.")
    }

    /// TLS between servers, from `sslQuorum`, `portUnification`, `sslQuorumReloadCertFiles` and
    /// the `ssl.quorum.*` keys.
    pub fn quorum_tls(&self) -> Result<crate::tls::peer::PeerTls, crate::tls::TlsError> {
        let mut settings = crate::tls::TlsSettings::from_keys(&self.ssl, "ssl.quorum.")?;
        if let Some(s) = &mut settings {
            s.reload = self.ssl_quorum_reload_cert_files;
            s.handshake_limit = None;
        }
        crate::tls::peer::PeerTls::new(settings, self.ssl_quorum, self.port_unification)
    }

    /// SASL between servers, from the `quorum.auth.*` keys and the JAAS file.
    pub fn quorum_sasl(&self) -> anyhow::Result<crate::sasl::quorum::QuorumSasl> {
        use anyhow::Context as _;
        if !self.quorum_sasl.enable {
            return crate::sasl::quorum::QuorumSasl::new(&self.quorum_sasl, None, &[]).map_err(anyhow::Error::msg);
        }
        let text = match &self.sasl.jaas_file {
            Some(path) => {
                Some(std::fs::read_to_string(path).with_context(|| format!("reading JAAS file {}", path.display()))?)
            }
            None => None,
        };
        let hosts: Vec<String> = self.servers.values().map(|s| s.host.clone()).collect();
        crate::sasl::quorum::QuorumSasl::new(&self.quorum_sasl, text.as_deref(), &hosts).map_err(anyhow::Error::msg)
    }

    /// The keys of `ignored` that are not in [`config_keys::ZOO_CFG_KEYS`]: ones Warden has never
    /// heard of (a typo, or a ZooKeeper key the table lacks).
    pub fn unknown_keys(&self) -> Vec<&str> {
        self.ignored.keys().map(String::as_str).filter(|k| config_keys::lookup(k).is_none()).collect()
    }

    /// Is the four-letter word `cmd` allowed by the whitelist?
    pub fn four_letter_allowed(&self, cmd: &str) -> bool {
        self.four_letter_whitelist.iter().any(|w| w == "*" || w == cmd)
    }

    /// Is `SASLAuthenticationProvider` among the `authProvider.*` classes?
    pub fn sasl_provider(&self) -> bool {
        self.auth_providers.iter().any(|c| c.rsplit('.').next() == Some("SASLAuthenticationProvider"))
    }

    /// The schemes `enforce.auth` requires (empty: not enforced), as ZooKeeper's
    /// `AuthenticationHelper`: `sessionRequireClientSASLAuth` means `sasl`; otherwise
    /// `enforce.auth.schemes` when `enforce.auth.enabled`. Each must have a provider (`ip`,
    /// `digest`, or one from `authProvider.*`), else the server does not start.
    pub fn enforced_auth_schemes(&self) -> Result<Vec<String>, ConfigError> {
        let schemes = if self.session_require_client_sasl_auth {
            vec!["sasl".to_string()]
        } else if self.enforce_auth_enabled {
            if self.enforce_auth_schemes.is_empty() {
                return Err(ConfigError::Invalid(
                    "enforce.auth.enabled is true but enforce.auth.schemes is empty".into(),
                ));
            }
            self.enforce_auth_schemes.clone()
        } else {
            return Ok(Vec::new());
        };
        for scheme in &schemes {
            let known = match scheme.as_str() {
                "ip" | "digest" => true,
                "sasl" => self.sasl_provider(),
                "x509" => self.auth_providers.iter().any(|c| c.ends_with("X509AuthenticationProvider")),
                _ => false,
            };
            if !known {
                return Err(ConfigError::Invalid(format!(
                    "enforce.auth.schemes: no authentication provider for scheme {scheme:?} (add authProvider.N=...)"
                )));
            }
        }
        Ok(schemes)
    }

    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let mut cfg = Self::parse(&text)?;
        cfg.initial_text = Some(text);
        cfg.config_path = Some(path.to_owned());
        if let Some(dynamic) = cfg.dynamic_config_file.clone() {
            cfg.load_dynamic(&dynamic)?;
        }
        // Relative dataDir values are relative to the working directory, as in ZooKeeper.
        if cfg.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::Invalid("dataDir is not set".into()));
        }
        if cfg.data_log_dir.as_os_str().is_empty() {
            cfg.data_log_dir = cfg.data_dir.clone();
        }
        let myid_path = cfg.data_dir.join("myid");
        if let Ok(text) = std::fs::read_to_string(&myid_path) {
            let first = text.lines().next().unwrap_or_default().trim();
            let id = first
                .parse::<u64>()
                .map_err(|_| ConfigError::Invalid(format!("{}: {first:?} is not a server id", myid_path.display())))?;
            cfg.my_id = Some(id);
        }
        Ok(cfg)
    }

    /// Reads the `server.N` lines of `dynamicConfigFile` (`QuorumPeerConfig.parseDynamicConfig`
    /// as ZooKeeper reads it at boot: no `version=` line inside, the version is the file name's
    /// hex suffix).
    fn load_dynamic(&mut self, path: &std::path::Path) -> Result<(), ConfigError> {
        if !self.servers.is_empty() {
            return Err(ConfigError::Invalid(
                "server.N lines must be in the separate dynamic config file when dynamicConfigFile is set".into(),
            ));
        }
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let m = Self::parse_dynamic(&text).map_err(|why| ConfigError::Invalid(format!("{}: {why}", path.display())))?;
        self.servers = m.servers;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        self.config_version = match name.rsplit_once(".dynamic.") {
            Some((_, hex)) => i64::from_str_radix(hex, 16).unwrap_or(0),
            None => 0,
        };
        Ok(())
    }

    /// The text of a `dynamicConfigFile` as [`Config::load`] reads it: `server.N` lines and no
    /// version line (the version is the file name's). The byte-level entry the fuzz targets use.
    pub fn parse_dynamic(text: &str) -> Result<warden_proto::Membership, String> {
        if text.lines().any(|l| l.trim_start().starts_with("version")) {
            return Err("the dynamic file must not hold a version line".into());
        }
        warden_proto::Membership::parse_text(text).map_err(|e| e.to_string())
    }

    /// The configuration as zoo.cfg (and its dynamic file) gave it.
    pub fn membership(&self) -> warden_proto::Membership {
        warden_proto::Membership { servers: self.servers.clone(), version: self.config_version }
    }

    /// Parses properties text. Returns the config; unknown keys land in `ignored`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut cfg = Config {
            data_dir: PathBuf::new(),
            data_log_dir: PathBuf::new(),
            client_port_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            ..Config::default()
        };
        let mut min_timeout: Option<i64> = None;
        let mut max_timeout: Option<i64> = None;
        for (idx, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let Some((k, v)) = line.split_once(['=', ':']) else {
                cfg.ignored.insert(line.to_string(), String::new());
                continue;
            };
            let (key, val) = (k.trim(), v.trim());
            cfg.file_keys.insert(key.strip_prefix("zookeeper.").unwrap_or(key).to_string());
            let err =
                |reason: &str| ConfigError::Value { line: idx + 1, key: key.to_string(), reason: reason.to_string() };
            let num = |v: &str| v.parse::<i64>().map_err(|_| err("not a number"));
            // ZooKeeper keys Warden accepts and ignores (crate::config_keys says which and why).
            if let Some(KeyStatus::Ignored { warn, .. }) = config_keys::lookup(key).map(|k| k.status) {
                if warn {
                    cfg.ignored.insert(key.to_string(), val.to_string());
                }
                continue;
            }
            match key {
                "tickTime" => {
                    let t = num(val)?;
                    if t <= 0 || t > u32::MAX as i64 {
                        return Err(err("must be positive"));
                    }
                    cfg.tick_time_ms = t as u32;
                }
                "dataDir" => cfg.data_dir = PathBuf::from(val),
                "dataLogDir" => cfg.data_log_dir = PathBuf::from(val),
                "clientPort" => cfg.client_port = val.parse().map_err(|_| err("not a port"))?,
                "clientPortAddress" => {
                    cfg.client_port_address = parse_host(val).ok_or_else(|| err("not an address"))?
                }
                "maxClientCnxns" => cfg.max_client_cnxns = num(val)?.max(0) as u32,
                "minSessionTimeout" => min_timeout = Some(num(val)?),
                "maxSessionTimeout" => max_timeout = Some(num(val)?),
                "4lw.commands.whitelist" => {
                    cfg.four_letter_whitelist =
                        val.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                }
                "extendedTypesEnabled" | "zookeeper.extendedTypesEnabled" => {
                    cfg.extended_types_enabled = parse_bool(val)
                }
                "jute.maxbuffer" => cfg.jute_max_buffer = num(val)?.max(1024) as usize,
                "znode.container.checkIntervalMs" => cfg.container_check_interval_ms = num(val)?.max(1) as u64,
                "readonlymode.enabled" => cfg.read_only = parse_bool(val),
                "linearizableReads" | "warden.linearizableReads" => cfg.linearizable_reads = parse_bool(val),
                "reconfigEnabled" => cfg.reconfig_enabled = parse_bool(val),
                "standaloneEnabled" => cfg.standalone_enabled = parse_bool(val),
                "dynamicConfigFile" => cfg.dynamic_config_file = Some(PathBuf::from(val)),
                "snapCount" | "zookeeper.snapCount" => cfg.snap_count = num(val)?.max(2) as u64,
                "autopurge.snapRetainCount" => cfg.snap_retain_count = num(val)?.max(3) as usize,
                "autopurge.enabled" => cfg.purge_enabled = parse_bool(val),
                "autopurge.purgeInterval" => cfg.purge_enabled = num(val)? > 0,
                "initLimit" => cfg.init_limit = num(val)?.max(1) as u32,
                "syncLimit" => cfg.sync_limit = num(val)?.max(1) as u32,
                "peerType" => {
                    cfg.peer_type = match val {
                        "observer" => ServerRole::Observer,
                        "participant" => ServerRole::Participant,
                        _ => return Err(err("must be participant or observer")),
                    }
                }
                k if k.starts_with("server.") => {
                    let id = k["server.".len()..].parse::<u64>().map_err(|_| err("server id must be a number"))?;
                    let spec = ServerSpec::parse(id, val).map_err(|e| err(&e.to_string()))?;
                    cfg.servers.insert(id, spec);
                }
                "jaasLoginConfig" | "warden.jaasLoginConfig" => cfg.sasl.jaas_file = Some(PathBuf::from(val)),
                k if cfg.apply_system_property(k.strip_prefix("zookeeper.").unwrap_or(k), val) => {}
                "secureClientPort" => cfg.secure_client_port = Some(val.parse().map_err(|_| err("not a port"))?),
                "secureClientPortAddress" => {
                    cfg.secure_client_port_address = Some(parse_host(val).ok_or_else(|| err("not an address"))?)
                }
                "client.portUnification" | "zookeeper.client.portUnification" => {
                    cfg.client_port_unification = parse_bool(val)
                }
                "X509AuthenticationProvider.superUser" | "zookeeper.X509AuthenticationProvider.superUser" => {
                    cfg.x509_super_user = Some(val.to_string())
                }
                "sslQuorum" => cfg.ssl_quorum = parse_bool(val),
                "portUnification" => cfg.port_unification = parse_bool(val),
                "sslQuorumReloadCertFiles" => cfg.ssl_quorum_reload_cert_files = parse_bool(val),
                "quorum.auth.enableSasl" => cfg.quorum_sasl.enable = parse_bool(val),
                "quorum.auth.learnerRequireSasl" => cfg.quorum_sasl.learner_require = parse_bool(val),
                "quorum.auth.serverRequireSasl" => cfg.quorum_sasl.server_require = parse_bool(val),
                "quorum.auth.learner.saslLoginContext" => cfg.quorum_sasl.learner_context = val.to_string(),
                "quorum.auth.server.saslLoginContext" => cfg.quorum_sasl.server_context = val.to_string(),
                "quorum.auth.kerberos.servicePrincipal" => cfg.quorum_sasl.kerberos_service_principal = val.to_string(),
                k if k.starts_with("ssl.")
                    || k.starts_with("zookeeper.ssl.")
                    || k.ends_with("client.certReload")
                    || k.ends_with("netty.server.outstandingHandshake.limit") =>
                {
                    if k.ends_with("ssl.authProvider") && val != "x509" {
                        return Err(err("Warden authenticates client certificates with the x509 provider only"));
                    }
                    if config_keys::lookup(k).is_some() {
                        cfg.ssl.insert(k.trim_start_matches("zookeeper.").to_string(), val.to_string());
                    } else {
                        cfg.ignored.insert(key.to_string(), val.to_string());
                    }
                }
                "forceSync" | "zookeeper.forceSync" => cfg.force_sync = !val.eq_ignore_ascii_case("no"),
                "preAllocSize" | "zookeeper.preAllocSize" => cfg.pre_alloc_bytes = (num(val)?.max(1) as u64) * 1024,
                _ => {
                    cfg.ignored.insert(key.to_string(), val.to_string());
                }
            }
        }
        let tick = cfg.tick_time_ms as i64;
        let min = min_timeout.filter(|v| *v >= 0).unwrap_or(2 * tick);
        let max = max_timeout.filter(|v| *v >= 0).unwrap_or(20 * tick);
        if min > max {
            return Err(ConfigError::Invalid(format!(
                "minSessionTimeout {min} must not be larger than maxSessionTimeout {max}"
            )));
        }
        cfg.min_session_timeout_ms = min as u32;
        cfg.max_session_timeout_ms = max as u32;
        if cfg.secure_client_port_address.is_some() && cfg.secure_client_port.is_none() {
            return Err(ConfigError::Invalid("secureClientPortAddress is set but secureClientPort is not".into()));
        }
        Ok(cfg)
    }
}

impl Config {
    /// A key ZooKeeper reads as a Java system property (`zookeeper.<key>`; zoo.cfg keys it does
    /// not know become such properties too): the SASL, Kerberos-name and ACL settings. Returns
    /// whether `key` (without its `zookeeper.` prefix) is one.
    fn apply_system_property(&mut self, key: &str, val: &str) -> bool {
        match key {
            "sasl.serverconfig" => self.sasl.section = val.to_string(),
            "SASLAuthenticationProvider.superPassword" => self.sasl.super_password = Some(val.to_string()),
            "kerberos.removeHostFromPrincipal" => self.sasl.remove_host = val == "true",
            "kerberos.removeRealmFromPrincipal" => self.sasl.remove_realm = val == "true",
            "security.auth_to_local" => self.sasl.auth_to_local = Some(val.to_string()),
            k if k.starts_with("authProvider.") => self.auth_providers.push(val.to_string()),
            k if k == "superUser" || k.starts_with("superUser.") => self.sasl_super_users.push(val.to_string()),
            "sessionRequireClientSASLAuth" => self.session_require_client_sasl_auth = val.eq_ignore_ascii_case("true"),
            "enforce.auth.enabled" => self.enforce_auth_enabled = val.eq_ignore_ascii_case("true"),
            "enforce.auth.schemes" => {
                self.enforce_auth_schemes =
                    val.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
            }
            "allowSaslFailedClients" => self.allow_sasl_failed_clients = val.eq_ignore_ascii_case("true"),
            "skipACL" => self.skip_acl = val.eq_ignore_ascii_case("yes"),
            "snapshotSizeFactor" => match val.trim().parse::<f64>() {
                Ok(f) if f.is_finite() => self.snapshot_size_factor = f,
                _ => tracing::warn!(value = val, "snapshotSizeFactor is not a number; keeping 0.33"),
            },
            "DigestAuthenticationProvider.superDigest" => self.super_digest = Some(val.to_string()),
            "admin.enableServer" => self.admin.enable = val != "false",
            "metricsProvider.className" => match val {
                "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider" => {
                    self.metrics_provider = MetricsProvider::Prometheus
                }
                "org.apache.zookeeper.metrics.impl.DefaultMetricsProvider" | "" => {
                    self.metrics_provider = MetricsProvider::Default
                }
                other => tracing::warn!(
                    class = other,
                    "metricsProvider.className: Warden has the default and the Prometheus providers only; using the default"
                ),
            },
            "metricsProvider.httpHost" => match parse_host(val) {
                Some(a) => self.metrics.address = a,
                None => tracing::warn!(value = val, "metricsProvider.httpHost is not an address"),
            },
            "metricsProvider.httpPort" => match val.parse() {
                Ok(p) => self.metrics.port = p,
                Err(_) => tracing::warn!(value = val, "metricsProvider.httpPort is not a port"),
            },
            "admin.serverAddress" => match parse_host(val) {
                Some(a) => self.admin.address = a,
                None => {
                    tracing::warn!(value = val, "admin.serverAddress is not an address; keeping {}", self.admin.address)
                }
            },
            "admin.serverPort" => match val.parse() {
                Ok(p) => self.admin.port = p,
                Err(_) => tracing::warn!(value = val, "admin.serverPort is not a port; keeping {}", self.admin.port),
            },
            "admin.commandURL" => self.admin.command_url = val.trim_end_matches('/').to_string(),
            "admin.snapshot.enabled" => self.admin.snapshot_enabled = !val.eq_ignore_ascii_case("false"),
            "admin.restore.enabled" => self.admin.restore_enabled = !val.eq_ignore_ascii_case("false"),
            "admin.rateLimiterIntervalInMS" => match val.parse() {
                Ok(ms) => self.admin.rate_limiter_interval_ms = ms,
                Err(_) => tracing::warn!(value = val, "admin.rateLimiterIntervalInMS is not a number of milliseconds"),
            },
            "admin.idleTimeout" => match val.parse() {
                Ok(ms) => self.admin.idle_timeout = std::time::Duration::from_millis(ms),
                Err(_) => tracing::warn!(value = val, "admin.idleTimeout is not a number of milliseconds"),
            },
            _ => return false,
        }
        true
    }

    /// The system properties of a JVM command line (`$SERVER_JVMFLAGS $JVMFLAGS`, as zkServer.sh
    /// passes them; the later of two wins): `-Dzookeeper.ssl.*` (`ssl.quorum.*` included),
    /// `-Dzookeeper.client.certReload`, `-Dzookeeper.netty.server.outstandingHandshake.limit`,
    /// `-Dzookeeper.X509AuthenticationProvider.superUser`, and the SASL, Kerberos-name and ACL
    /// properties of [`apply_system_property`](Self::apply_system_property).
    /// ZooKeeper turns zoo.cfg keys into the same system properties when it reads the file, so a
    /// key set in zoo.cfg wins. Values cannot contain spaces (the flags are split at whitespace).
    /// Returns the properties taken.
    pub fn apply_jvm_flags(&mut self, flags: &str) -> Vec<String> {
        let mut taken = Vec::new();
        let mut seen = std::collections::BTreeMap::new();
        for flag in flags.split_whitespace() {
            let Some((key, val)) = flag.strip_prefix("-Dzookeeper.").and_then(|f| f.split_once('=')) else {
                continue;
            };
            let val = val.trim_matches(['"', '\'']);
            if self.file_keys.contains(key) {
                continue;
            }
            if key == "ssl.authProvider" && val != "x509" {
                tracing::warn!(
                    provider = val,
                    "-Dzookeeper.ssl.authProvider: Warden has the x509 provider only; ignored"
                );
            } else if (key.starts_with("ssl.") && config_keys::lookup(key).is_some_and(|k| k.status == KeyStatus::Read))
                || key == "client.certReload"
                || key == "netty.server.outstandingHandshake.limit"
                || key == "X509AuthenticationProvider.superUser"
            {
                seen.insert(key.to_string(), val.to_string());
            } else if self.apply_system_property(key, val) {
                taken.push(format!("zookeeper.{key}"));
            }
        }
        for (key, val) in seen {
            if key == "X509AuthenticationProvider.superUser" {
                if self.x509_super_user.is_none() {
                    self.x509_super_user = Some(val);
                    taken.push(format!("zookeeper.{key}"));
                }
            } else if !self.ssl.contains_key(&key) {
                self.ssl.insert(key.clone(), val);
                taken.push(format!("zookeeper.{key}"));
            }
        }
        taken
    }
}

/// `metricsProvider.className`: which of ZooKeeper's metrics providers the operator named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricsProvider {
    /// `DefaultMetricsProvider`: the metrics appear in `mntr` and `monitor` only.
    #[default]
    Default,
    /// `PrometheusMetricsProvider`: also served at `metricsProvider.httpHost:httpPort/metrics`.
    Prometheus,
}

/// The JVM command line a ZooKeeper start script would pass: `$SERVER_JVMFLAGS $JVMFLAGS`
/// (zkServer.sh's order, so a later flag wins).
pub fn jvm_flags_from_env() -> String {
    ["SERVER_JVMFLAGS", "JVMFLAGS"].map(|v| std::env::var(v).unwrap_or_default()).join(" ")
}

fn parse_bool(v: &str) -> bool {
    v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("yes")
}

fn parse_host(v: &str) -> Option<IpAddr> {
    match v {
        "localhost" => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        _ => v.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_keys_are_read_client_and_quorum() {
        let text = "dataDir=/d\nclientPort=2181\nsecureClientPort=2281\nclient.portUnification=true\n\
                    serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                    ssl.keyStore.location=/k.jks\nzookeeper.ssl.trustStore.location=/t.jks\n\
                    zookeeper.X509AuthenticationProvider.superUser=CN=admin\nssl.quorum.keyStore.location=/q.jks\n";
        let c = Config::parse(text).unwrap();
        assert_eq!(c.secure_client_addr(), Some("0.0.0.0:2281".parse().unwrap()));
        assert!(c.client_port_unification);
        assert_eq!(c.ssl.get("ssl.trustStore.location").map(String::as_str), Some("/t.jks"));
        assert_eq!(c.x509_super_user.as_deref(), Some("CN=admin"));
        assert!(!c.ignored.contains_key("serverCnxnFactory"));
        assert!(!c.ssl_quorum && !c.port_unification);
        assert!(!c.quorum_tls().unwrap().dials_tls(), "sslQuorum is off by default");
        let tls = c.client_tls().unwrap().unwrap();
        assert_eq!(tls.key_store.path, PathBuf::from("/k.jks"));
        // sslQuorum without quorum stores cannot start.
        let c =
            Config::parse("dataDir=/d\nsslQuorum=true\nportUnification=true\nsslQuorumReloadCertFiles=true\n").unwrap();
        assert!(c.ssl_quorum && c.port_unification && c.ssl_quorum_reload_cert_files);
        assert!(c.quorum_tls().unwrap_err().to_string().contains("ssl.quorum.keyStore.location"));
        let q = crate::tls::TlsSettings::from_keys(&Config::parse(text).unwrap().ssl, "ssl.quorum.").unwrap().unwrap();
        assert_eq!(q.key_store.path, PathBuf::from("/q.jks"));
        assert!(q.hostname_verification && q.client_auth == crate::tls::ClientAuth::Need);
        assert!(Config::parse("dataDir=/d\nsecureClientPortAddress=127.0.0.1\n").is_err());
        assert!(Config::parse("dataDir=/d\nssl.authProvider=custom\n").is_err());
    }

    #[test]
    fn tls_system_properties_fill_in_what_zoo_cfg_leaves_unset() {
        let mut c = Config::parse("dataDir=/d\nsecureClientPort=2281\nssl.keyStore.location=/cfg.jks\n").unwrap();
        let taken = c.apply_jvm_flags(
            "-Xmx1g -Dzookeeper.ssl.keyStore.location=/flag.jks -Dzookeeper.ssl.trustStore.location=/t1.p12 \
             -Dzookeeper.ssl.trustStore.location='/t2.p12' -Dzookeeper.ssl.quorum.keyStore.location=/q.jks \
             -Dzookeeper.X509AuthenticationProvider.superUser=CN=admin,O=Warden -Dzookeeper.ssl.authProvider=custom \
             -Dzookeeper.client.certReload=false -Djava.security.auth.login.config=/j",
        );
        assert_eq!(
            taken,
            [
                "zookeeper.X509AuthenticationProvider.superUser",
                "zookeeper.client.certReload",
                "zookeeper.ssl.quorum.keyStore.location",
                "zookeeper.ssl.trustStore.location",
            ]
        );
        // zoo.cfg wins; the later of two flags wins; other properties are not taken.
        assert_eq!(c.ssl.get("ssl.keyStore.location").map(String::as_str), Some("/cfg.jks"));
        assert_eq!(c.ssl.get("ssl.trustStore.location").map(String::as_str), Some("/t2.p12"));
        assert_eq!(c.ssl.get("ssl.quorum.keyStore.location").map(String::as_str), Some("/q.jks"));
        assert!(!c.ssl.contains_key("ssl.authProvider"));
        assert_eq!(c.x509_super_user.as_deref(), Some("CN=admin,O=Warden"));
        let tls = c.client_tls().unwrap().unwrap();
        assert_eq!(tls.trust_store.unwrap().kind, crate::tls::StoreKind::Pkcs12);
        assert!(!tls.reload);
        let mut c = Config::parse("dataDir=/d\nX509AuthenticationProvider.superUser=CN=cfg\n").unwrap();
        c.apply_jvm_flags("-Dzookeeper.X509AuthenticationProvider.superUser=CN=flag");
        assert_eq!(c.x509_super_user.as_deref(), Some("CN=cfg"));
    }

    /// What Kafka's and HBase's guides put in SERVER_JVMFLAGS: the SASL and Kerberos-name
    /// properties, taken unless zoo.cfg sets the same key (with or without `zookeeper.`).
    #[test]
    fn sasl_system_properties_come_from_jvm_flags_too() {
        let mut c = Config::parse(
            "dataDir=/d
zookeeper.kerberos.removeRealmFromPrincipal=false
",
        )
        .unwrap();
        let taken = c.apply_jvm_flags(
            "-Dzookeeper.kerberos.removeHostFromPrincipal=true -Dzookeeper.kerberos.removeRealmFromPrincipal=true \
             -Dzookeeper.authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider \
             -Dzookeeper.security.auth_to_local=RULE:[2:$1@$0](hbase@.*)s/.*/hbase/ \
             -Dzookeeper.superUser=admin -Dzookeeper.sessionRequireClientSASLAuth=true -Dzookeeper.tickTime=1",
        );
        assert!(c.sasl.remove_host, "taken from the flags");
        assert!(!c.sasl.remove_realm, "zoo.cfg wins over the flag");
        assert!(c.sasl_provider() && c.session_require_client_sasl_auth);
        assert_eq!(c.sasl_super_users, ["admin"]);
        assert_eq!(c.sasl.auth_to_local.as_deref(), Some("RULE:[2:$1@$0](hbase@.*)s/.*/hbase/"));
        assert!(!taken.iter().any(|t| t.contains("tickTime")), "zoo.cfg-only keys are not system properties");
        let c = Config::parse(
            "dataDir=/d
security.auth_to_local=DEFAULT
skipACL=yes
",
        )
        .unwrap();
        assert_eq!(c.sasl.auth_to_local.as_deref(), Some("DEFAULT"));
        assert!(c.skip_acl);
    }

    #[test]
    fn kazoo_harness_config_parses_and_keeps_unknown_keys() {
        let text = "tickTime=2000\ndataDir=/tmp/zk\nclientPort=20000\nmaxClientCnxns=0\n\
                    admin.serverPort=20003\nauthProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n\
                    4lw.commands.whitelist=*\nreconfigEnabled=true\npeerType=participant\n\
                    server.1=localhost:20002:20001:participant\nobserver.reconnectDelayMs=100\n";
        let c = Config::parse(text).unwrap();
        assert_eq!(c.tick_time_ms, 2000);
        assert_eq!(c.ignored.get("observer.reconnectDelayMs").map(String::as_str), Some("100"));
        assert_eq!(c.client_port, 20000);
        assert_eq!(c.max_client_cnxns, 0);
        assert_eq!(c.min_session_timeout_ms, 4000);
        assert_eq!(c.max_session_timeout_ms, 40000);
        assert!(c.four_letter_allowed("stat"));
        assert_eq!(c.admin.port, 20003, "the AdminServer's port is used, not ignored");
        assert!(c.admin.enable && !c.ignored.contains_key("admin.serverPort"));
        assert_eq!(
            c.servers[&1],
            ServerSpec {
                id: 1,
                host: "localhost".into(),
                quorum_port: 20002,
                election_port: 20001,
                role: ServerRole::Participant,
                client: None
            }
        );
    }

    #[test]
    fn ensemble_lines_parse_with_roles_and_client_addresses() {
        let c = Config::parse("server.1=127.0.0.1:2888:3888\nserver.2=127.0.0.2:2888:3888:participant;2182\nserver.3=h3:2888:3888:observer;127.0.0.3:2183\ninitLimit=7\nsyncLimit=3\npeerType=observer\n").unwrap();
        assert_eq!(c.servers.len(), 3);
        assert_eq!(c.servers[&2].client, Some(("0.0.0.0".into(), 2182)));
        assert_eq!(c.servers[&3].role, ServerRole::Observer);
        assert_eq!(c.servers[&3].client, Some(("127.0.0.3".into(), 2183)));
        assert_eq!((c.init_limit, c.sync_limit, c.peer_type), (7, 3, ServerRole::Observer));
        let e = Config::parse("server.x=h:1:2\n").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        assert!(Config::parse("server.1=h:1\n").is_err());
        assert!(Config::parse("server.1=h:1:2:voter\n").is_err());
    }

    #[test]
    fn purge_is_on_by_default_and_off_with_an_explicit_zero_interval() {
        assert!(Config::parse("").unwrap().purge_enabled);
        assert!(!Config::parse("autopurge.purgeInterval=0\n").unwrap().purge_enabled);
        assert!(Config::parse("autopurge.purgeInterval=24\nautopurge.snapRetainCount=5\n").unwrap().purge_enabled);
        assert_eq!(Config::parse("autopurge.snapRetainCount=1\n").unwrap().snap_retain_count, 3);
    }

    #[test]
    fn myid_is_read_from_the_data_dir() {
        let dir = std::env::temp_dir().join(format!("warden-myid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("myid"), "3\n").unwrap();
        let cfg_path = dir.join("zoo.cfg");
        std::fs::write(&cfg_path, format!("dataDir={}\n", dir.display())).unwrap();
        let c = Config::load(&cfg_path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c.my_id, Some(3));
    }

    #[test]
    fn default_whitelist_is_srvr_only_and_bad_values_name_the_line() {
        let c = Config::parse("dataDir=/x\n").unwrap();
        assert!(c.four_letter_allowed("srvr"));
        assert!(!c.four_letter_allowed("ruok"));
        let e = Config::parse("dataDir=/x\ntickTime=abc\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("tickTime"), "{e}");
        assert!(Config::parse("minSessionTimeout=9000\nmaxSessionTimeout=100\n").is_err());
    }
}
