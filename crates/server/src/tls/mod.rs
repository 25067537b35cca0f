//! TLS for client connections, configured as ZooKeeper configures it (`X509Util`,
//! `ClientX509Util`, `KeyStoreFileType`): `ssl.*` keys (or `zookeeper.ssl.*`) naming key and trust
//! stores in PEM, PKCS12 or JKS, `ssl.clientAuth`, protocols and cipher suites. Built on rustls
//! with the aws-lc-rs provider (the one `zookeeper-client`'s TLS also uses, so a build holds one).
//!
//! [`TlsAcceptor`] holds the current rustls `ServerConfig` and rebuilds it when a store file
//! changes (checked at most once a second, on accept); a file that no longer loads keeps the old
//! configuration and logs an error. [`peer_dn`] gives a verified client certificate's subject as
//! Java's `X500Principal.getName()` prints it: the `x509` ACL id.
//!
//! Architecture invariant: TLS lives in this shell crate. The pure node only ever sees the
//! client's DN, handed in with the connection's `Input::Connect`.

pub mod jks;
mod v1;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("{key}: {reason}")]
    Setting { key: String, reason: String },
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("{0}")]
    Store(String),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client certificate verifier: {0}")]
    Verifier(String),
}

/// `ssl.clientAuth`: whether a client must, may or must not present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    Need,
    Want,
    None,
}

/// The format of a key or trust store (`ssl.*Store.type`, else from the file name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Pem,
    Pkcs12,
    Jks,
}

/// A store file and how to open it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSpec {
    pub path: PathBuf,
    pub password: String,
    pub kind: StoreKind,
}

/// What the `ssl.` (or `ssl.quorum.`) keys of a zoo.cfg say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub key_store: StoreSpec,
    pub trust_store: Option<StoreSpec>,
    pub client_auth: ClientAuth,
    /// Protocol versions, from `enabledProtocols`, else `protocol`, else TLSv1.2 and TLSv1.3.
    pub protocols: Vec<&'static str>,
    /// Java cipher-suite names (`ciphersuites`); `None`: the provider's defaults.
    pub cipher_suites: Option<Vec<String>>,
    /// How long a connection may take to show it speaks TLS and to finish its handshake
    /// (`handshakeDetectionTimeoutMillis`, default 5 s).
    pub handshake_timeout: Duration,
    /// Rebuild the configuration when a store file changes (`client.certReload`, default on).
    pub reload: bool,
}

impl TlsSettings {
    /// Reads the settings under `prefix` (`ssl.` or `ssl.quorum.`) from `keys` (zoo.cfg keys with
    /// a leading `zookeeper.` already removed). `None` when no key store is configured.
    pub fn from_keys(keys: &BTreeMap<String, String>, prefix: &str) -> Result<Option<TlsSettings>, TlsError> {
        let get = |k: &str| keys.get(&format!("{prefix}{k}")).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let setting = |k: &str, reason: String| TlsError::Setting { key: format!("{prefix}{k}"), reason };
        let store = |what: &str| -> Result<Option<StoreSpec>, TlsError> {
            let Some(location) = get(&format!("{what}.location")) else { return Ok(None) };
            let path = PathBuf::from(location);
            let password = match get(&format!("{what}.passwordPath")) {
                Some(p) => std::fs::read_to_string(&p)
                    .map_err(|source| TlsError::Read { path: p.into(), source })?
                    .trim_end_matches(['\r', '\n'])
                    .to_string(),
                None => get(&format!("{what}.password")).unwrap_or_default(),
            };
            let kind = match get(&format!("{what}.type")) {
                Some(t) => StoreKind::from_name(&t)
                    .ok_or_else(|| setting(&format!("{what}.type"), format!("{t:?} is not PEM, PKCS12 or JKS")))?,
                None => StoreKind::from_path(&path).ok_or_else(|| {
                    setting(
                        &format!("{what}.location"),
                        "cannot tell the store type from the file name (.pem, .p12/.pfx, .jks); set the type".into(),
                    )
                })?,
            };
            Ok(Some(StoreSpec { path, password, kind }))
        };
        let Some(key_store) = store("keyStore")? else { return Ok(None) };
        let trust_store = store("trustStore")?;
        let client_auth = match get("clientAuth").map(|v| v.to_ascii_lowercase()).as_deref() {
            None | Some("need") | Some("required") => ClientAuth::Need,
            Some("want") | Some("optional") => ClientAuth::Want,
            Some("none") => ClientAuth::None,
            Some(other) => return Err(setting("clientAuth", format!("{other:?} is not need, want or none"))),
        };
        let protocols = match get("enabledProtocols").or_else(|| get("protocol")) {
            None => vec!["TLSv1.2", "TLSv1.3"],
            Some(list) => {
                let mut out = Vec::new();
                for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    match p {
                        "TLSv1.2" => out.push("TLSv1.2"),
                        "TLSv1.3" => out.push("TLSv1.3"),
                        // What Java calls "TLS" is its newest version.
                        "TLS" => out.extend(["TLSv1.2", "TLSv1.3"]),
                        other => tracing::warn!(protocol = other, "TLS protocol not supported by Warden; skipped"),
                    }
                }
                if out.is_empty() {
                    return Err(setting("enabledProtocols", format!("none of {list:?} is TLSv1.2 or TLSv1.3")));
                }
                out
            }
        };
        let cipher_suites =
            get("ciphersuites").map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect());
        let handshake_timeout = match get("handshakeDetectionTimeoutMillis") {
            Some(v) => Duration::from_millis(v.parse::<u64>().ok().filter(|&ms| ms > 0).ok_or_else(|| {
                setting("handshakeDetectionTimeoutMillis", format!("{v:?} is not a positive number"))
            })?),
            None => Duration::from_secs(5),
        };
        let reload = keys.get("client.certReload").is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"));
        Ok(Some(TlsSettings {
            key_store,
            trust_store,
            client_auth,
            protocols,
            cipher_suites,
            handshake_timeout,
            reload,
        }))
    }

    fn files(&self) -> Vec<&Path> {
        std::iter::once(&self.key_store).chain(&self.trust_store).map(|s| s.path.as_path()).collect()
    }

    /// Builds the rustls server configuration from the store files as they are now.
    pub fn server_config(&self) -> Result<ServerConfig, TlsError> {
        let (chain, key) = load_key_store(&self.key_store)?;
        let provider = Arc::new(self.provider()?);
        let versions: Vec<&'static SupportedProtocolVersion> = self
            .protocols
            .iter()
            .map(|p| if *p == "TLSv1.3" { &rustls::version::TLS13 } else { &rustls::version::TLS12 })
            .collect();
        let builder = ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
        let builder = match (self.client_auth, &self.trust_store) {
            (ClientAuth::None, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err(TlsError::Setting {
                    key: "ssl.trustStore.location".into(),
                    reason: "needed to verify client certificates (ssl.clientAuth is need or want)".into(),
                })
            }
            (auth, Some(trust)) => {
                let anchors = load_trust_store(trust)?;
                let mut roots = RootCertStore::empty();
                for cert in &anchors {
                    roots
                        .add(cert.clone())
                        .map_err(|e| TlsError::Load { path: trust.path.clone(), reason: e.to_string() })?;
                }
                let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
                let v = if auth == ClientAuth::Want { v.allow_unauthenticated() } else { v };
                let webpki = v.build().map_err(|e| TlsError::Verifier(e.to_string()))?;
                builder.with_client_cert_verifier(Arc::new(v1::Verifier {
                    webpki,
                    anchors,
                    provider: provider.clone(),
                }))
            }
        };
        // Not `with_single_cert`: it refuses an X.509 v1 certificate, which Java (and so
        // ZooKeeper) serves; kazoo's test harness makes v1 certificates.
        let signing = provider.key_provider.load_private_key(key)?;
        let certified = rustls::sign::CertifiedKey::new(chain, signing);
        if let Err(e) = certified.keys_match() {
            if !v1::is_v1(&certified.cert[0]) {
                return Err(e.into());
            }
        }
        Ok(builder.with_cert_resolver(Arc::new(v1::OneCert(Arc::new(certified)))))
    }

    /// aws-lc-rs with the configured cipher suites (Java names), in the configured order.
    fn provider(&self) -> Result<CryptoProvider, TlsError> {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        if let Some(names) = &self.cipher_suites {
            let mut suites = Vec::new();
            for name in names {
                match provider.cipher_suites.iter().find(|s| java_suite_name(s) == *name) {
                    Some(s) => suites.push(*s),
                    None => tracing::warn!(suite = %name, "TLS cipher suite not supported by Warden; skipped"),
                }
            }
            if suites.is_empty() {
                return Err(TlsError::Setting {
                    key: "ssl.ciphersuites".into(),
                    reason: format!("none of {names:?} is supported (Warden has the AES-GCM and ChaCha20 suites)"),
                });
            }
            provider.cipher_suites = suites;
        }
        Ok(provider)
    }
}

/// The Java (IANA) name of a rustls suite: rustls spells the TLS 1.3 ones `TLS13_...`.
fn java_suite_name(s: &rustls::SupportedCipherSuite) -> String {
    let name = format!("{:?}", s.suite());
    match name.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => name,
    }
}

impl StoreKind {
    fn from_name(t: &str) -> Option<StoreKind> {
        match t.to_ascii_uppercase().as_str() {
            "PEM" => Some(StoreKind::Pem),
            "PKCS12" => Some(StoreKind::Pkcs12),
            "JKS" => Some(StoreKind::Jks),
            _ => None,
        }
    }

    /// As ZooKeeper's `KeyStoreFileType.fromFilename`.
    fn from_path(p: &Path) -> Option<StoreKind> {
        let ext = p.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "pem" => Some(StoreKind::Pem),
            "p12" | "pfx" => Some(StoreKind::Pkcs12),
            "jks" => Some(StoreKind::Jks),
            _ => None,
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_owned(), source })
}

fn load_err(path: &Path, reason: impl std::fmt::Display) -> TlsError {
    TlsError::Load { path: path.to_owned(), reason: reason.to_string() }
}

/// The certificate chain (leaf first) and private key of a key store.
pub fn load_key_store(spec: &StoreSpec) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let data = read(&spec.path)?;
    let p = &spec.path;
    match spec.kind {
        StoreKind::Pem => {
            let chain =
                CertificateDer::pem_slice_iter(&data).collect::<Result<Vec<_>, _>>().map_err(|e| load_err(p, e))?;
            if chain.is_empty() {
                return Err(load_err(p, "no CERTIFICATE in the PEM key store"));
            }
            if has_encrypted_key(&data) {
                return Err(load_err(
                    p,
                    "encrypted PEM private keys are not supported; use PKCS12 or an unencrypted key",
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(&data).map_err(|e| load_err(p, format!("private key: {e}")))?;
            Ok((chain, key))
        }
        StoreKind::Pkcs12 => {
            let ks =
                p12_keystore::KeyStore::from_pkcs12(&data, &spec.password, p12_keystore::Pkcs12ImportPolicy::Relaxed)
                    .map_err(|e| load_err(p, e))?;
            for (_, entry) in ks.entries() {
                if let p12_keystore::KeyStoreEntry::PrivateKeyChain(kc) = entry {
                    let chain = kc.certs().iter().map(|c| CertificateDer::from(c.as_der().to_vec())).collect();
                    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(kc.key().as_der().to_vec()));
                    return Ok((chain, key));
                }
            }
            Err(load_err(p, "no private key entry in the PKCS12 key store"))
        }
        StoreKind::Jks => {
            let store = jks::parse(&data, &spec.password).map_err(|e| load_err(p, e))?;
            let (key, chain) = store.keys.into_iter().next().ok_or_else(|| load_err(p, "no private key entry"))?;
            let chain = chain.into_iter().map(CertificateDer::from).collect();
            Ok((chain, PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key))))
        }
    }
}

/// The certificates a trust store trusts.
pub fn load_trust_store(spec: &StoreSpec) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let data = read(&spec.path)?;
    let p = &spec.path;
    let certs: Vec<CertificateDer<'static>> = match spec.kind {
        StoreKind::Pem => {
            CertificateDer::pem_slice_iter(&data).collect::<Result<_, _>>().map_err(|e| load_err(p, e))?
        }
        StoreKind::Pkcs12 => {
            let ks =
                p12_keystore::KeyStore::from_pkcs12(&data, &spec.password, p12_keystore::Pkcs12ImportPolicy::Relaxed)
                    .map_err(|e| load_err(p, e))?;
            let mut out = Vec::new();
            for (_, entry) in ks.entries() {
                match entry {
                    p12_keystore::KeyStoreEntry::Certificate(c) => out.push(CertificateDer::from(c.as_der().to_vec())),
                    // Java trusts a key entry's chain in a trust store too.
                    p12_keystore::KeyStoreEntry::PrivateKeyChain(kc) => {
                        out.extend(kc.certs().iter().map(|c| CertificateDer::from(c.as_der().to_vec())))
                    }
                    _ => {}
                }
            }
            out
        }
        StoreKind::Jks => {
            let store = jks::parse(&data, &spec.password).map_err(|e| load_err(p, e))?;
            store
                .trusted
                .into_iter()
                .chain(store.keys.into_iter().flat_map(|(_, chain)| chain))
                .map(CertificateDer::from)
                .collect()
        }
    };
    if certs.is_empty() {
        return Err(load_err(p, "the trust store holds no certificate"));
    }
    Ok(certs)
}

fn has_encrypted_key(pem: &[u8]) -> bool {
    let text = String::from_utf8_lossy(pem);
    text.contains("BEGIN ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED")
}

/// Modification time and length of each file, to notice a replaced store.
type Stamps = Vec<Option<(SystemTime, u64)>>;

fn stamps(files: &[&Path]) -> Stamps {
    files.iter().map(|f| std::fs::metadata(f).ok().and_then(|m| Some((m.modified().ok()?, m.len())))).collect()
}

/// The client port's TLS: the current server configuration, rebuilt when a store file changes.
pub struct TlsAcceptor {
    settings: TlsSettings,
    state: Mutex<Loaded>,
}

struct Loaded {
    config: Arc<ServerConfig>,
    stamps: Stamps,
    checked: Instant,
}

/// How often the store files are looked at for changes.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

impl TlsAcceptor {
    pub fn new(settings: TlsSettings) -> Result<TlsAcceptor, TlsError> {
        let stamps = stamps(&settings.files());
        let config = Arc::new(settings.server_config()?);
        Ok(TlsAcceptor { settings, state: Mutex::new(Loaded { config, stamps, checked: Instant::now() }) })
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// The configuration for a new connection, reloaded first if a store file changed.
    pub fn config(&self) -> Arc<ServerConfig> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if self.settings.reload && s.checked.elapsed() >= RELOAD_CHECK {
            s.checked = Instant::now();
            let now = stamps(&self.settings.files());
            if now != s.stamps {
                s.stamps = now;
                match self.settings.server_config() {
                    Ok(c) => {
                        tracing::info!(key_store = %self.settings.key_store.path.display(), "TLS stores changed; reloaded");
                        s.config = Arc::new(c);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "TLS stores changed but do not load; keeping the previous ones")
                    }
                }
            }
        }
        s.config.clone()
    }
}

/// The subject of the client's verified certificate as Java's `X500Principal.getName()` (RFC
/// 2253) prints it: most specific RDN first, `,` between RDNs without spaces, `+` inside a
/// multi-valued RDN, known keywords (CN, C, L, ST, O, OU, STREET, DC, UID) by name and other
/// attributes as `OID=#<hex DER>`.
pub fn peer_dn(conn: &rustls::ServerConnection) -> Option<String> {
    let leaf = conn.peer_certificates()?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(rfc2253(cert.subject()))
}

fn rfc2253(name: &x509_parser::x509::X509Name) -> String {
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let oid = attr.attr_type().to_id_string();
                    let keyword = match oid.as_str() {
                        "2.5.4.3" => Some("CN"),
                        "2.5.4.6" => Some("C"),
                        "2.5.4.7" => Some("L"),
                        "2.5.4.8" => Some("ST"),
                        "2.5.4.10" => Some("O"),
                        "2.5.4.11" => Some("OU"),
                        "2.5.4.9" => Some("STREET"),
                        "0.9.2342.19200300.100.1.25" => Some("DC"),
                        "0.9.2342.19200300.100.1.1" => Some("UID"),
                        _ => None,
                    };
                    match (keyword, attr.as_str()) {
                        (Some(k), Ok(v)) => format!("{k}={}", escape(v)),
                        _ => {
                            let raw = attr.attr_value();
                            let h = &raw.header;
                            let tag = ((h.class() as u8) << 6) | ((h.is_constructed() as u8) << 5) | h.tag().0 as u8;
                            let mut der = vec![tag];
                            match raw.data.len() {
                                n @ 0..=127 => der.push(n as u8),
                                n => {
                                    let len = (n as u32).to_be_bytes();
                                    let skip = len.iter().take_while(|b| **b == 0).count();
                                    der.push(0x80 | (4 - skip) as u8);
                                    der.extend_from_slice(&len[skip..]);
                                }
                            }
                            der.extend_from_slice(raw.data);
                            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
                            format!("{oid}=#{hex}")
                        }
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// RFC 2253 escaping of an attribute value.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> BTreeMap<String, String> {
        text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn settings_follow_zookeepers_keys_and_defaults() {
        assert_eq!(TlsSettings::from_keys(&keys("ssl.trustStore.location=/t.jks"), "ssl.").unwrap(), None);
        let s = TlsSettings::from_keys(
            &keys("ssl.keyStore.location=/k.jks\nssl.keyStore.password=apassword\nssl.trustStore.location=/t.p12"),
            "ssl.",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            s.key_store,
            StoreSpec { path: "/k.jks".into(), password: "apassword".into(), kind: StoreKind::Jks }
        );
        assert_eq!(s.trust_store.as_ref().unwrap().kind, StoreKind::Pkcs12);
        assert_eq!(s.client_auth, ClientAuth::Need);
        assert_eq!(s.protocols, vec!["TLSv1.2", "TLSv1.3"]);
        assert_eq!(s.handshake_timeout, Duration::from_secs(5));
        assert!(s.reload);

        let s = TlsSettings::from_keys(
            &keys(
                "ssl.quorum.keyStore.location=/k\nssl.quorum.keyStore.type=pem\nssl.quorum.clientAuth=WANT\n\
                 ssl.quorum.protocol=TLSv1.3\nssl.quorum.ciphersuites=TLS_AES_128_GCM_SHA256, TLS_X\n\
                 ssl.quorum.handshakeDetectionTimeoutMillis=250\nclient.certReload=false",
            ),
            "ssl.quorum.",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.key_store.kind, StoreKind::Pem);
        assert_eq!(s.client_auth, ClientAuth::Want);
        assert_eq!(s.protocols, vec!["TLSv1.3"]);
        assert_eq!(s.cipher_suites, Some(vec!["TLS_AES_128_GCM_SHA256".to_string(), "TLS_X".to_string()]));
        assert_eq!(s.handshake_timeout, Duration::from_millis(250));
        assert!(!s.reload);
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (text, key) in [
            ("ssl.keyStore.location=/k.crt", "ssl.keyStore.location"),
            ("ssl.keyStore.location=/k.pem\nssl.keyStore.type=BCFKS", "ssl.keyStore.type"),
            ("ssl.keyStore.location=/k.pem\nssl.clientAuth=maybe", "ssl.clientAuth"),
            ("ssl.keyStore.location=/k.pem\nssl.enabledProtocols=SSLv3", "ssl.enabledProtocols"),
            (
                "ssl.keyStore.location=/k.pem\nssl.handshakeDetectionTimeoutMillis=0",
                "ssl.handshakeDetectionTimeoutMillis",
            ),
        ] {
            match TlsSettings::from_keys(&keys(text), "ssl.") {
                Err(TlsError::Setting { key: k, .. }) => assert_eq!(k, key, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn java_suite_names_map_to_rustls_suites() {
        let names: Vec<String> =
            rustls::crypto::aws_lc_rs::default_provider().cipher_suites.iter().map(java_suite_name).collect();
        for n in ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"] {
            assert!(names.contains(&n.to_string()), "{n} not in {names:?}");
        }
        let mut s = TlsSettings::from_keys(&keys("ssl.keyStore.location=/k.pem"), "ssl.").unwrap().unwrap();
        s.cipher_suites = Some(vec!["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA".into()]);
        assert!(matches!(s.provider(), Err(TlsError::Setting { .. })));
        s.cipher_suites = Some(vec!["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA".into(), "TLS_AES_256_GCM_SHA384".into()]);
        assert_eq!(s.provider().unwrap().cipher_suites.len(), 1);
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape("client"), "client");
        assert_eq!(escape("a,b+c\"d\\e<f>g;h"), "a\\,b\\+c\\\"d\\\\e\\<f\\>g\\;h");
        assert_eq!(escape("#lead and trail "), "\\#lead and trail\\ ");
        assert_eq!(escape(" x"), "\\ x");
    }
}
