//! TLS for client connections and between servers, configured as ZooKeeper configures it
//! (`X509Util`, `ClientX509Util`, `QuorumX509Util`, `KeyStoreFileType`): `ssl.*` keys (or
//! `zookeeper.ssl.*`; `ssl.quorum.*` between servers, see [`peer`]) naming key and trust stores in
//! PEM, PKCS12 or JKS, `ssl.clientAuth`, protocols and cipher suites. Built on rustls
//! with the aws-lc-rs provider (the one `zookeeper-client`'s TLS also uses, so a build holds one).
//!
//! [`TlsContext`] holds the current rustls `ServerConfig` (and, between servers, the `ClientConfig`
//! peers are dialled with) and rebuilds them when a store file changes (checked at most once a second, on accept); a file that no longer loads keeps the old
//! configuration and logs an error. [`peer_dn`] gives a verified client certificate's subject as
//! Java's `X500Principal.getName()` prints it: the `x509` ACL id.
//!
//! Architecture invariant: TLS lives in this shell crate. The pure node only ever sees the
//! client's DN, handed in with the connection's `Input::Connect`.

pub mod jks;
pub mod peer;
mod v1;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
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
    /// `ssl.` or `ssl.quorum.`: named in errors.
    pub prefix: String,
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
    /// At most this many handshakes in flight; a connection over it is closed before its handshake
    /// (`netty.server.outstandingHandshake.limit`; absent or <= 0: no limit, as in ZooKeeper).
    pub handshake_limit: Option<usize>,
    /// `hostnameVerification` (default true). Between servers: a peer's certificate must name the
    /// address it connects from or to (see `peer.rs`). Not applied on the client port.
    pub hostname_verification: bool,
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
        // Revocation checking was asked for: refuse rather than run without it.
        for key in ["crl", "ocsp"] {
            if get(key).is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                return Err(setting(
                    key,
                    "Warden does not check certificate revocation (CRL distribution points, OCSP); \
                     remove the key, or set it to false, to run without revocation checks"
                        .into(),
                ));
            }
        }
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
        let handshake_limit = match keys.get("netty.server.outstandingHandshake.limit").map(|v| v.trim()) {
            None | Some("") => None,
            Some(v) => {
                let n = v.parse::<i64>().map_err(|_| TlsError::Setting {
                    key: "netty.server.outstandingHandshake.limit".into(),
                    reason: format!("{v:?} is not a number"),
                })?;
                (n > 0).then_some(n as usize)
            }
        };
        let hostname_verification = get("hostnameVerification").is_none_or(|v| !v.eq_ignore_ascii_case("false"));
        Ok(Some(TlsSettings {
            prefix: prefix.to_string(),
            key_store,
            trust_store,
            client_auth,
            protocols,
            cipher_suites,
            handshake_timeout,
            reload,
            handshake_limit,
            hostname_verification,
        }))
    }

    fn files(&self) -> Vec<&Path> {
        std::iter::once(&self.key_store).chain(&self.trust_store).map(|s| s.path.as_path()).collect()
    }

    /// Builds the rustls server configuration from the store files as they are now.
    pub fn server_config(&self) -> Result<ServerConfig, TlsError> {
        let (chain, key) = load_key_store(&self.key_store)?;
        let provider = Arc::new(self.provider()?);
        let builder = ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&self.versions())?;
        let builder = match (self.client_auth, &self.trust_store) {
            (ClientAuth::None, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err(TlsError::Setting {
                    key: format!("{}trustStore.location", self.prefix),
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
            // rustls cannot parse a v1 certificate to compare keys; compare them here.
            let leaf = x509_parser::parse_x509_certificate(certified.cert[0].as_ref())
                .map_err(|e| load_err(&self.key_store.path, e))?
                .1;
            if certified.key.public_key().is_some_and(|spki| spki.as_ref() != leaf.public_key().raw) {
                return Err(load_err(&self.key_store.path, "the private key does not belong to the certificate"));
            }
        }
        Ok(builder.with_cert_resolver(Arc::new(v1::OneCert(Arc::new(certified)))))
    }

    fn versions(&self) -> Vec<&'static SupportedProtocolVersion> {
        self.protocols
            .iter()
            .map(|p| if *p == "TLSv1.3" { &rustls::version::TLS13 } else { &rustls::version::TLS12 })
            .collect()
    }

    /// Builds the rustls client configuration a server dials its peers with (`sslQuorum`): it
    /// presents the key store's certificate and verifies the peer's against the trust store, and
    /// (with `hostnameVerification`) that it names the address dialled.
    pub fn client_config(&self) -> Result<ClientConfig, TlsError> {
        let (chain, key) = load_key_store(&self.key_store)?;
        let provider = Arc::new(self.provider()?);
        let trust = self.trust_store.as_ref().ok_or_else(|| TlsError::Setting {
            key: format!("{}trustStore.location", self.prefix),
            reason: "needed to verify the other servers' certificates".into(),
        })?;
        let mut roots = RootCertStore::empty();
        for cert in load_trust_store(trust)? {
            roots.add(cert).map_err(|e| TlsError::Load { path: trust.path.clone(), reason: e.to_string() })?;
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let verifier = peer::ServerVerifier { webpki, check_name: self.hostname_verification };
        Ok(ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&self.versions())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_auth_cert(chain, key)?)
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
                    key: format!("{}ciphersuites", self.prefix),
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
            if String::from_utf8_lossy(&data).contains("Proc-Type: 4,ENCRYPTED") {
                // ZooKeeper's PemReader reads PKCS#8 only; OpenSSL's legacy encryption is not that.
                return Err(load_err(
                    p,
                    "legacy OpenSSL-encrypted PEM key (Proc-Type: 4,ENCRYPTED); convert it with \
                     `openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES`",
                ));
            }
            let chain =
                CertificateDer::pem_slice_iter(&data).collect::<Result<Vec<_>, _>>().map_err(|e| load_err(p, e))?;
            if chain.is_empty() {
                return Err(load_err(p, "no CERTIFICATE in the PEM key store"));
            }
            let key = match pem_block(&data, "ENCRYPTED PRIVATE KEY").map_err(|e| load_err(p, e))? {
                Some(encrypted) => PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                    decrypt_pkcs8(&encrypted, &spec.password).map_err(|e| load_err(p, e))?,
                )),
                None => PrivateKeyDer::from_pem_slice(&data).map_err(|e| load_err(p, format!("private key: {e}")))?,
            };
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

/// The decoded contents of the first `-----BEGIN <label>-----` block, if there is one.
fn pem_block(pem: &[u8], label: &str) -> Result<Option<Vec<u8>>, String> {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(pem);
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let Some(start) = text.find(&begin) else { return Ok(None) };
    let body = &text[start + begin.len()..];
    let stop = body.find(&end).ok_or_else(|| format!("{begin} without {end}"))?;
    let b64: String = body[..stop].chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).map(Some).map_err(|e| format!("{label}: bad base64: {e}"))
}

/// `pbeWithSHAAnd3-KeyTripleDES-CBC` (1.2.840.113549.1.12.1.3), DER contents of the OID.
const PBE_SHA1_3DES: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x0c, 0x01, 0x03];

/// Decrypts a PKCS#8 `EncryptedPrivateKeyInfo` with the key store password, as ZooKeeper's
/// `PemReader` does with `ssl.keyStore.password`. Schemes: `pbeWithSHAAnd3-KeyTripleDES-CBC`
/// (`openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES`; Java, hence ZooKeeper, reads this one) and PBES2
/// with PBKDF2 or scrypt and AES (OpenSSL's default; Java's `PemReader` cannot read it).
fn decrypt_pkcs8(info: &[u8], password: &str) -> Result<Vec<u8>, String> {
    let bad = || "ENCRYPTED PRIVATE KEY is not a PKCS#8 EncryptedPrivateKeyInfo".to_string();
    let (tag, seq, _) = der_element(info).ok_or_else(bad)?;
    if tag != 0x30 {
        return Err(bad());
    }
    let (tag, alg_contents, rest) = der_element(seq).ok_or_else(bad)?;
    let algorithm = &seq[..seq.len() - rest.len()];
    let (octets, data, _) = der_element(rest).ok_or_else(bad)?;
    if tag != 0x30 || octets != 0x04 {
        return Err(bad());
    }
    if password.is_empty() {
        return Err("the PEM private key is encrypted but the key store has no password".into());
    }
    let wrong = || "cannot decrypt the private key (wrong key store password?)".to_string();
    let (oid_tag, oid, params) = der_element(alg_contents).ok_or_else(bad)?;
    let key = if oid_tag == 0x06 && oid == PBE_SHA1_3DES {
        use cbc::cipher::{block_padding::Pkcs7, BlockModeDecrypt, KeyIvInit};
        let (salt, iterations) = pbe_params(params).ok_or_else(bad)?;
        let k = pkcs12_kdf(password, salt, 1, iterations, 24);
        let iv = pkcs12_kdf(password, salt, 2, iterations, 8);
        let cipher = cbc::Decryptor::<des::TdesEde3>::new_from_slices(&k, &iv).map_err(|_| bad())?;
        cipher.decrypt_padded_vec::<Pkcs7>(data).map_err(|_| wrong())?
    } else {
        let scheme = pkcs5::EncryptionScheme::try_from(algorithm).map_err(|e| {
            format!("unsupported private key encryption (PBE-SHA1-3DES and PBES2 with AES are supported): {e}")
        })?;
        scheme.decrypt(password, data).map_err(|_| wrong())?
    };
    // A wrong password can still unpad correctly by chance; the result must then be a SEQUENCE.
    match der_element(&key) {
        Some((0x30, _, [])) => Ok(key),
        _ => Err("cannot decrypt the private key (wrong key store password?)".into()),
    }
}

/// `pkcs-12PbeParams`: SEQUENCE { salt OCTET STRING, iterations INTEGER }.
fn pbe_params(params: &[u8]) -> Option<(&[u8], u32)> {
    let (0x30, seq, _) = der_element(params)? else { return None };
    let (0x04, salt, rest) = der_element(seq)? else { return None };
    let (0x02, n, _) = der_element(rest)? else { return None };
    if n.is_empty() || n.len() > 4 || n[0] & 0x80 != 0 {
        return None;
    }
    let iterations = n.iter().fold(0u32, |a, &b| (a << 8) | b as u32);
    // More than this is not a key file anyone made; refuse rather than spin.
    (1..=10_000_000).contains(&iterations).then_some((salt, iterations))
}

/// The PKCS#12 key derivation with SHA-1 (RFC 7292 appendix B.2): `id` 1 for the key, 2 for the
/// IV; the password as a NUL-terminated big-endian UTF-16 string.
fn pkcs12_kdf(password: &str, salt: &[u8], id: u8, iterations: u32, n: usize) -> Vec<u8> {
    use sha1::{Digest, Sha1};
    const U: usize = 20;
    const V: usize = 64;
    let mut pw: Vec<u8> = password.encode_utf16().flat_map(u16::to_be_bytes).collect();
    if !pw.is_empty() {
        pw.extend([0, 0]);
    }
    let fill = |x: &[u8]| -> Vec<u8> { (0..V * x.len().div_ceil(V)).map(|k| x[k % x.len()]).collect() };
    let mut i = fill(salt);
    i.extend(fill(&pw));
    let mut out = Vec::with_capacity(n);
    loop {
        let mut a = Sha1::new().chain_update([id; V]).chain_update(&i).finalize();
        for _ in 1..iterations {
            a = Sha1::digest(a);
        }
        out.extend_from_slice(&a[..U.min(n - out.len())]);
        if out.len() == n {
            return out;
        }
        // I_j = (I_j + B + 1) mod 2^(8v) for each v-byte block, B being A repeated to v bytes.
        for block in i.chunks_mut(V) {
            let mut carry = 1u16;
            for k in (0..V).rev() {
                let sum = block[k] as u16 + a[k % U] as u16 + carry;
                block[k] = sum as u8;
                carry = sum >> 8;
            }
        }
    }
}

/// One DER element: (tag, contents, what follows).
fn der_element(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = data.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// Modification time and length of each file, to notice a replaced store.
type Stamps = Vec<Option<(SystemTime, u64)>>;

fn stamps(files: &[&Path]) -> Stamps {
    files.iter().map(|f| std::fs::metadata(f).ok().and_then(|m| Some((m.modified().ok()?, m.len())))).collect()
}

/// The TLS of one port family: the current server configuration and (between servers) the client
/// configuration peers are dialled with, rebuilt when a store file changes.
pub struct TlsContext {
    settings: TlsSettings,
    /// Also builds a client configuration (quorum and election ports).
    dials: bool,
    state: Mutex<Loaded>,
    handshakes: AtomicUsize,
}

/// A handshake in flight, counted against `netty.server.outstandingHandshake.limit` until dropped.
pub struct HandshakeSlot<'a>(&'a AtomicUsize);

impl Drop for HandshakeSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Loaded {
    server: Arc<ServerConfig>,
    client: Option<Arc<ClientConfig>>,
    stamps: Stamps,
    checked: Instant,
}

/// How often the store files are looked at for changes.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

impl TlsContext {
    /// The client port's TLS: accepts only.
    pub fn new(settings: TlsSettings) -> Result<TlsContext, TlsError> {
        Self::build(settings, false)
    }

    /// TLS between servers: accepts, and dials with the same key and trust stores.
    pub fn for_peers(settings: TlsSettings) -> Result<TlsContext, TlsError> {
        Self::build(settings, true)
    }

    fn build(settings: TlsSettings, dials: bool) -> Result<TlsContext, TlsError> {
        let stamps = stamps(&settings.files());
        let (server, client) = Self::load(&settings, dials)?;
        Ok(TlsContext {
            settings,
            dials,
            state: Mutex::new(Loaded { server, client, stamps, checked: Instant::now() }),
            handshakes: AtomicUsize::new(0),
        })
    }

    #[allow(clippy::type_complexity)]
    fn load(settings: &TlsSettings, dials: bool) -> Result<(Arc<ServerConfig>, Option<Arc<ClientConfig>>), TlsError> {
        let server = Arc::new(settings.server_config()?);
        let client = match dials {
            true => Some(Arc::new(settings.client_config()?)),
            false => None,
        };
        Ok((server, client))
    }

    /// A slot for one more handshake, or `None` when `handshake_limit` are already in flight.
    pub fn handshake_slot(&self) -> Option<HandshakeSlot<'_>> {
        let n = self.handshakes.fetch_add(1, Ordering::AcqRel);
        let slot = HandshakeSlot(&self.handshakes);
        match self.settings.handshake_limit {
            Some(limit) if n >= limit => None, // `slot` drops: the count is restored
            _ => Some(slot),
        }
    }

    /// Handshakes in flight now (`outstanding_tls_handshake`).
    pub fn handshakes_in_flight(&self) -> usize {
        self.handshakes.load(Ordering::Acquire)
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// The server configuration for a new connection, reloaded first if a store file changed.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current().server.clone()
    }

    /// The client configuration for dialling a peer (`None` for the client port's context),
    /// reloaded first if a store file changed.
    pub fn client_config(&self) -> Option<Arc<ClientConfig>> {
        self.current().client.clone()
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Loaded> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if self.settings.reload && s.checked.elapsed() >= RELOAD_CHECK {
            s.checked = Instant::now();
            let now = stamps(&self.settings.files());
            if now != s.stamps {
                s.stamps = now;
                match Self::load(&self.settings, self.dials) {
                    Ok((server, client)) => {
                        tracing::info!(key_store = %self.settings.key_store.path.display(), "TLS stores changed; reloaded");
                        s.server = server;
                        s.client = client;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "TLS stores changed but do not load; keeping the previous ones")
                    }
                }
            }
        }
        s
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

        // Revocation checks asked for are refused by name, not silently skipped; off is fine.
        for key in ["ssl.crl", "ssl.ocsp", "ssl.quorum.crl"] {
            let prefix = if key.starts_with("ssl.quorum.") { "ssl.quorum." } else { "ssl." };
            let cfg = format!("{prefix}keyStore.location=/k.p12\n{key}=true");
            let err = TlsSettings::from_keys(&keys(&cfg), prefix).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains("revocation"), "{err}");
            let cfg = format!("{prefix}keyStore.location=/k.p12\n{key}=false");
            assert!(TlsSettings::from_keys(&keys(&cfg), prefix).unwrap().is_some());
        }
    }

    #[test]
    fn the_outstanding_handshake_limit_counts_slots_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        run(
            d,
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                "k.pem",
                "-out",
                "c.pem",
            ],
        );
        run(d, "sh", &["-c", "cat k.pem c.pem > b.pem"]);
        let mut text = format!("ssl.keyStore.location={}\nssl.clientAuth=none\n", d.join("b.pem").display());
        assert_eq!(TlsSettings::from_keys(&keys(&text), "ssl.").unwrap().unwrap().handshake_limit, None);
        for none in ["-1", "0"] {
            let k = keys(&format!("{text}netty.server.outstandingHandshake.limit={none}"));
            assert_eq!(TlsSettings::from_keys(&k, "ssl.").unwrap().unwrap().handshake_limit, None);
        }
        assert!(
            TlsSettings::from_keys(&keys(&format!("{text}netty.server.outstandingHandshake.limit=x")), "ssl.").is_err()
        );
        text.push_str("netty.server.outstandingHandshake.limit=2");
        let acceptor = TlsContext::new(TlsSettings::from_keys(&keys(&text), "ssl.").unwrap().unwrap()).unwrap();
        let a = acceptor.handshake_slot().expect("first");
        let b = acceptor.handshake_slot().expect("second");
        assert!(acceptor.handshake_slot().is_none(), "a third over the limit of 2");
        assert!(acceptor.handshake_slot().is_none(), "refusals do not leak slots either way");
        drop(a);
        let c = acceptor.handshake_slot().expect("a slot again once one finished");
        assert!(acceptor.handshake_slot().is_none());
        drop((b, c));
        assert_eq!(acceptor.handshakes.load(Ordering::Acquire), 0);
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

    fn run(dir: &Path, cmd: &str, args: &[&str]) {
        let out = std::process::Command::new(cmd).args(args).current_dir(dir).output().expect(cmd);
        assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn spec(dir: &Path, file: &str, password: &str, kind: StoreKind) -> StoreSpec {
        StoreSpec { path: dir.join(file), password: password.into(), kind }
    }

    fn settings_with(key_store: StoreSpec, trust_store: Option<StoreSpec>) -> TlsSettings {
        let mut s = TlsSettings::from_keys(&keys("ssl.keyStore.location=/k.pem"), "ssl.").unwrap().unwrap();
        s.key_store = key_store;
        s.client_auth = if trust_store.is_some() { ClientAuth::Need } else { ClientAuth::None };
        s.trust_store = trust_store;
        s
    }

    /// A PEM key store whose key is PKCS#8-encrypted with the store password, as `openssl pkcs8
    /// -topk8` writes it: PBES2 with AES (OpenSSL's default) and PBE-SHA1-3DES (what Java reads).
    #[test]
    fn encrypted_pem_keys_open_with_the_store_password() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        run(d, "openssl", &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "k.pem"]);
        run(d, "openssl", &["req", "-x509", "-key", "k.pem", "-subj", "/CN=localhost", "-days", "2", "-out", "c.pem"]);
        for (v, v2, out) in [
            ("-v2", "aes-256-cbc", "enc256.pem"),
            ("-v2", "aes-128-cbc", "enc128.pem"),
            ("-v1", "PBE-SHA1-3DES", "3des.pem"),
        ] {
            run(d, "openssl", &["pkcs8", "-topk8", v, v2, "-in", "k.pem", "-passout", "pass:testpass", "-out", out]);
            let store =
                std::fs::read_to_string(d.join("c.pem")).unwrap() + &std::fs::read_to_string(d.join(out)).unwrap();
            std::fs::write(d.join(format!("store-{out}")), store).unwrap();
            let good = spec(d, &format!("store-{out}"), "testpass", StoreKind::Pem);
            let (chain, key) = load_key_store(&good).unwrap();
            assert_eq!(chain.len(), 1);
            let plain = PrivateKeyDer::from_pem_file(d.join("k.pem")).unwrap();
            assert_eq!(key.secret_der(), plain.secret_der(), "{v2}: decrypted key differs from the original");
            settings_with(good, None).server_config().unwrap();

            for (password, wanted) in [("wrongpass", "wrong key store password"), ("", "has no password")] {
                let e = load_key_store(&spec(d, &format!("store-{out}"), password, StoreKind::Pem)).unwrap_err();
                assert!(e.to_string().contains(wanted), "{v2} with {password:?}: {e}");
            }
        }
        // OpenSSL's legacy encrypted PEM, which ZooKeeper does not read either: refused by name.
        run(d, "openssl", &["ec", "-in", "k.pem", "-aes256", "-passout", "pass:testpass", "-out", "legacy.pem"]);
        let store =
            std::fs::read_to_string(d.join("c.pem")).unwrap() + &std::fs::read_to_string(d.join("legacy.pem")).unwrap();
        std::fs::write(d.join("store-legacy.pem"), store).unwrap();
        let e = load_key_store(&spec(d, "store-legacy.pem", "testpass", StoreKind::Pem)).unwrap_err();
        assert!(e.to_string().contains("Proc-Type"), "{e}");
    }

    /// JKS files as the JDK's keytool writes them: a key entry with its chain, a trusted-cert
    /// entry, the integrity check over the file.
    #[test]
    fn jks_stores_made_by_keytool_load_and_check_their_password() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let pw = ["-storepass", "testpass", "-keypass", "testpass", "-noprompt"];
        let gen = |alias: &str, file: &str, alg: &str| {
            let mut a = vec!["-genkeypair", "-alias", alias, "-keyalg", alg, "-dname", "CN=localhost,O=Warden"];
            a.extend(["-validity", "2", "-storetype", "JKS", "-keystore", file]);
            a.extend(pw);
            run(d, "keytool", &a);
        };
        gen("server", "server.jks", "RSA");
        gen("ec", "ec.jks", "EC");
        let mut a = vec!["-exportcert", "-alias", "server", "-keystore", "server.jks", "-file", "server.der"];
        a.extend(["-storepass", "testpass"]);
        run(d, "keytool", &a);
        let mut a =
            vec!["-importcert", "-alias", "ca", "-file", "server.der", "-storetype", "JKS", "-keystore", "trust.jks"];
        a.extend(pw);
        run(d, "keytool", &a);

        for file in ["server.jks", "ec.jks"] {
            let store = jks::parse(&std::fs::read(d.join(file)).unwrap(), "testpass").unwrap();
            assert_eq!((store.keys.len(), store.trusted.len()), (1, 0), "{file}");
            assert_eq!(store.keys[0].1.len(), 1, "{file}: chain");
        }
        let trust = jks::parse(&std::fs::read(d.join("trust.jks")).unwrap(), "testpass").unwrap();
        assert_eq!((trust.keys.len(), trust.trusted.len()), (0, 1));
        assert_eq!(trust.trusted[0], std::fs::read(d.join("server.der")).unwrap());
        // The key is the certificate's (rustls checks), and the trust store verifies clients.
        for file in ["server.jks", "ec.jks"] {
            let s = settings_with(
                spec(d, file, "testpass", StoreKind::Jks),
                Some(spec(d, "trust.jks", "testpass", StoreKind::Jks)),
            );
            s.server_config().unwrap();
        }

        let data = std::fs::read(d.join("server.jks")).unwrap();
        let e = jks::parse(&data, "wrongpass").unwrap_err();
        assert!(e.to_string().contains("integrity"), "{e}");
        let mut flipped = data.clone();
        flipped[data.len() / 2] ^= 1;
        assert!(jks::parse(&flipped, "testpass").unwrap_err().to_string().contains("integrity"));
        for n in [0, 4, 31, data.len() - 1] {
            assert!(jks::parse(&data[..n], "testpass").is_err(), "truncated to {n}");
        }
        // A PKCS12 file named as JKS.
        let mut a = vec!["-importkeystore", "-srckeystore", "server.jks", "-destkeystore", "server.p12"];
        a.extend(["-deststoretype", "PKCS12", "-srcstorepass", "testpass", "-deststorepass", "testpass", "-noprompt"]);
        run(d, "keytool", &a);
        let p12 = std::fs::read(d.join("server.p12")).unwrap();
        assert!(jks::parse(&p12, "testpass").unwrap_err().to_string().contains("magic"));
        load_key_store(&spec(d, "server.p12", "testpass", StoreKind::Pkcs12)).unwrap();
    }
}
