//! SASL on the client port (opcode 102), the shell's part: the server's login from its JAAS
//! section, and per connection the mechanism's state. Each SASL packet's token is stepped here,
//! in the connection's reader (mechanisms need randomness and, for GSSAPI, keytabs), and only the
//! outcome goes to the node as `Input::Sasl`, which replies and records the identity.
//!
//! A mechanism is anything implementing [`Mechanism`]: DIGEST-MD5 (`digest_md5.rs`) for a
//! section of `user_` options, GSSAPI (`gssapi.rs`, Kerberos through MIT krb5) for a
//! `Krb5LoginModule` section, whose acceptor credentials are acquired at start-up.

pub mod digest_md5;
pub mod gssapi;
pub mod jaas;
pub mod kerberos;
pub mod quorum;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use rand::Rng as _;
use warden_node::{ConnId, SaslOutcome};

/// What one step of a server mechanism came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this challenge; the exchange goes on.
    Continue(Vec<u8>),
    /// Authenticated as `authentication_id` (the shell derives the authorization id from it by
    /// ZooKeeper's Kerberos-name rules); `final_token` is the server's last data for the client.
    Done { authentication_id: String, final_token: Option<Vec<u8>> },
    /// The exchange failed, for this reason (logged, never sent).
    Fail(String),
}

/// A server-side SASL mechanism for one connection. Deterministic given its inputs: randomness
/// (nonces) is handed in when it is made.
pub trait Mechanism: Send {
    fn name(&self) -> &'static str;
    fn step(&mut self, token: &[u8]) -> Step;
}

/// The server's SASL login, from the JAAS section named by `zookeeper.sasl.serverconfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslLogin {
    /// No JAAS file, an empty one, or no such section: SASL packets get a null token.
    None,
    /// DIGEST-MD5 with these users (`user_<name>="password"` options of the section).
    DigestMd5 { users: Arc<HashMap<String, String>> },
    /// A `Krb5LoginModule` section: GSSAPI as `principal` (any in the keytab if absent), with the
    /// keys in `keytab` (the default keytab, `KRB5_KTNAME`, if absent).
    Gssapi { principal: Option<String>, keytab: Option<std::path::PathBuf> },
}

/// Settings the SASL side needs (from zoo.cfg, the command line or the environment).
#[derive(Debug, Clone, Default)]
pub struct SaslSettings {
    /// The JAAS login configuration file.
    pub jaas_file: Option<std::path::PathBuf>,
    /// `zookeeper.sasl.serverconfig` (default `Server`).
    pub section: String,
    /// `zookeeper.SASLAuthenticationProvider.superPassword`: the password of user `super`.
    pub super_password: Option<String>,
    /// `zookeeper.kerberos.removeHostFromPrincipal` / `removeRealmFromPrincipal`.
    pub remove_host: bool,
    pub remove_realm: bool,
    /// `zookeeper.security.auth_to_local`: the rules that shorten a Kerberos name (default
    /// `DEFAULT`).
    pub auth_to_local: Option<String>,
}

/// The server-wide SASL state every connection shares.
#[derive(Debug)]
pub struct SaslServer {
    pub login: SaslLogin,
    /// The acceptor credentials of a GSSAPI login.
    gssapi: Option<gssapi::GssapiServer>,
    remove_host: bool,
    remove_realm: bool,
    /// `zookeeper.security.auth_to_local`, and the default realm its `DEFAULT` rule compares with.
    rules: kerberos::AuthToLocal,
    default_realm: String,
}

impl SaslServer {
    /// Reads the JAAS file (if any) and picks the mechanism, as `ServerCnxnFactory.configureSaslLogin`:
    /// an unreadable or malformed file stops start-up; a missing section means no SASL.
    pub fn load(s: &SaslSettings) -> anyhow::Result<Self> {
        let login = match &s.jaas_file {
            None => SaslLogin::None,
            Some(path) => Self::login_from_file(path, &s.section, s.super_password.as_deref())?,
        };
        match &login {
            SaslLogin::None => tracing::info!("no SASL login configured: SASL packets get a null token"),
            SaslLogin::DigestMd5 { users } => {
                tracing::info!(section = %s.section, users = users.len(), "SASL: DIGEST-MD5 server")
            }
            SaslLogin::Gssapi { principal, keytab } => {
                tracing::info!(section = %s.section, ?principal, ?keytab, "SASL: GSSAPI (Kerberos) server")
            }
        }
        let gssapi = match &login {
            SaslLogin::Gssapi { principal, keytab } => {
                if let Some(k) = keytab {
                    let want = gssapi::keytab_name(k);
                    let have = std::env::var("KRB5_KTNAME").unwrap_or_default();
                    anyhow::ensure!(
                        have == want,
                        "SASL GSSAPI: KRB5_KTNAME is {have:?}, not the JAAS keyTab {want:?} \
                         (call warden_server::sasl::prepare_process before starting threads)"
                    );
                }
                Some(gssapi::GssapiServer::new(principal.as_deref()).map_err(anyhow::Error::msg)?)
            }
            _ => None,
        };
        let rules = match &s.auth_to_local {
            Some(text) => kerberos::AuthToLocal::parse(text)
                .map_err(|e| anyhow::anyhow!("zookeeper.security.auth_to_local: {e}"))?,
            None => kerberos::AuthToLocal::default(),
        };
        let default_realm = krb5_default_realm();
        if !matches!(login, SaslLogin::None) {
            tracing::info!(%default_realm, auth_to_local = ?s.auth_to_local, "SASL: Kerberos names shortened by these rules");
        }
        Ok(Self { login, gssapi, remove_host: s.remove_host, remove_realm: s.remove_realm, rules, default_realm })
    }

    /// What must be set up process-wide before threads start: for a GSSAPI login with a JAAS
    /// `keyTab`, MIT krb5's `KRB5_KTNAME`. Reads the JAAS file as [`SaslServer::load`] will.
    pub fn prepare_process(s: &SaslSettings) -> anyhow::Result<()> {
        let Some(path) = &s.jaas_file else { return Ok(()) };
        if let SaslLogin::Gssapi { keytab: Some(k), .. } = Self::login_from_file(path, &s.section, None)? {
            gssapi::configure_process(Some(&k), None);
        }
        Ok(())
    }

    fn login_from_file(path: &Path, section: &str, super_password: Option<&str>) -> anyhow::Result<SaslLogin> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading JAAS file {}", path.display()))?;
        let sections = jaas::parse(&text).map_err(|e| anyhow::anyhow!("JAAS file {}: {e}", path.display()))?;
        let Some(sec) = sections.iter().find(|s| s.name == section) else {
            tracing::info!(file = %path.display(), section, "no such section in the JAAS file: no SASL");
            return Ok(SaslLogin::None);
        };
        Ok(Self::login_from_section(sec, super_password))
    }

    /// The mechanism a section means: GSSAPI when a module is Kerberos's, else DIGEST-MD5 with the
    /// `user_` options of every entry (the super password, if set, replaces user `super`'s).
    pub fn login_from_section(sec: &jaas::Section, super_password: Option<&str>) -> SaslLogin {
        if let Some(krb) = sec.entries.iter().find(|e| e.module.ends_with("Krb5LoginModule")) {
            let option = |name: &str| krb.options.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            let principal = option("principal");
            let keytab = option("keyTab").map(std::path::PathBuf::from);
            return SaslLogin::Gssapi { principal, keytab };
        }
        let mut users: HashMap<String, String> = sec
            .entries
            .iter()
            .flat_map(|e| e.options.iter())
            .filter_map(|(k, v)| Some((k.strip_prefix("user_")?.to_string(), v.clone())))
            .collect();
        if let Some(p) = super_password {
            users.insert("super".into(), p.into());
        }
        SaslLogin::DigestMd5 { users: Arc::new(users) }
    }

    /// A server with this login and no principal rewriting (tests).
    pub fn with_login(login: SaslLogin) -> Self {
        Self {
            login,
            gssapi: None,
            remove_host: false,
            remove_realm: false,
            rules: kerberos::AuthToLocal::default(),
            default_realm: String::new(),
        }
    }
}

/// The default realm of the krb5 configuration (`KRB5_CONFIG`, else `/etc/krb5.conf`), as Java's
/// `KerberosUtil.getDefaultRealm`; empty when there is none (ZooKeeper's fallback too), so the
/// `DEFAULT` rule matches no realm.
fn krb5_default_realm() -> String {
    let paths = std::env::var("KRB5_CONFIG").unwrap_or_else(|_| "/etc/krb5.conf".into());
    paths
        .split(':')
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find_map(|text| kerberos::default_realm_of(&text))
        .unwrap_or_default()
}

/// One connection's SASL state, made on its first SASL packet.
pub struct ConnSasl {
    server: Arc<SaslServer>,
    mech: Option<Box<dyn Mechanism>>,
}

/// A DIGEST-MD5 nonce (or cnonce): 40 random characters, as long as Java's (30 random bytes in
/// base64).
pub(crate) fn random_nonce() -> String {
    rand::thread_rng().sample_iter(&rand::distributions::Alphanumeric).take(40).map(char::from).collect()
}

impl ConnSasl {
    pub fn new(server: Arc<SaslServer>) -> Self {
        Self { server, mech: None }
    }

    /// Steps this connection's exchange with the client's token; a failure is logged here.
    pub fn step(&mut self, conn: ConnId, token: &[u8]) -> SaslOutcome {
        let mech = match (&mut self.mech, &self.server.login) {
            (_, SaslLogin::None) => return SaslOutcome::NoServer,
            (Some(m), _) => m,
            (mech @ None, SaslLogin::Gssapi { .. }) => match &self.server.gssapi {
                Some(g) => mech.insert(Box::new(g.start())),
                None => {
                    tracing::warn!(conn, "SASL exchange refused: no GSSAPI acceptor credentials");
                    return SaslOutcome::Failed;
                }
            },
            (mech @ None, SaslLogin::DigestMd5 { users }) => {
                mech.insert(Box::new(digest_md5::DigestMd5::new(users.clone(), random_nonce())))
            }
        };
        match mech.step(token) {
            Step::Continue(challenge) => SaslOutcome::Continue { challenge },
            Step::Done { authentication_id, final_token } => {
                let s = &self.server;
                match kerberos::authorization_id(
                    &authentication_id,
                    &s.rules,
                    &s.default_realm,
                    s.remove_host,
                    s.remove_realm,
                ) {
                    Ok(authorization_id) => SaslOutcome::Done { authorization_id, token: final_token },
                    Err(why) => {
                        tracing::warn!(conn, mechanism = mech.name(), %why, "SASL authentication failed");
                        SaslOutcome::Failed
                    }
                }
            }
            Step::Fail(why) => {
                tracing::warn!(conn, mechanism = mech.name(), %why, "SASL authentication failed");
                SaslOutcome::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> jaas::Section {
        jaas::parse(text).unwrap().remove(0)
    }

    #[test]
    fn a_section_chooses_the_mechanism() {
        let digest = section("Server { a.DigestLoginModule required user_a=\"1\" other=x; b.M optional user_b=2; };");
        let SaslLogin::DigestMd5 { users } = SaslServer::login_from_section(&digest, Some("root")) else { panic!() };
        let expected =
            HashMap::from([("a".into(), "1".into()), ("b".into(), "2".into()), ("super".into(), "root".into())]);
        assert_eq!(*users, expected);
        let krb =
            section("Server { com.sun.security.auth.module.Krb5LoginModule required keyTab=\"/k\" principal=\"zookeeper/h@R\"; };");
        assert_eq!(
            SaslServer::login_from_section(&krb, None),
            SaslLogin::Gssapi { principal: Some("zookeeper/h@R".into()), keytab: Some("/k".into()) }
        );
    }

    #[test]
    fn files_without_the_section_mean_no_sasl_and_bad_files_stop_start_up() {
        let dir = std::env::temp_dir().join(format!("warden-jaas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let settings = |file: &str, text: &str| {
            let path = dir.join(file);
            std::fs::write(&path, text).unwrap();
            SaslSettings { jaas_file: Some(path), section: "Server".into(), ..Default::default() }
        };
        assert_eq!(SaslServer::load(&settings("empty", "")).unwrap().login, SaslLogin::None);
        assert_eq!(SaslServer::load(&settings("client", "Client { m.M required; };")).unwrap().login, SaslLogin::None);
        assert!(SaslServer::load(&settings("bad", "Server { m.M required")).is_err());
        let missing = SaslSettings { jaas_file: Some(dir.join("nope")), ..Default::default() };
        assert!(SaslServer::load(&missing).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn connections_step_through_their_own_exchange() {
        let users = Arc::new(HashMap::from([("u".to_string(), "p".to_string())]));
        let server = Arc::new(SaslServer::with_login(SaslLogin::DigestMd5 { users }));
        let mut a = ConnSasl::new(server.clone());
        let mut b = ConnSasl::new(server);
        let (SaslOutcome::Continue { challenge: ca }, SaslOutcome::Continue { challenge: cb }) =
            (a.step(1, b""), b.step(2, b""))
        else {
            panic!("no challenges")
        };
        assert_ne!(ca, cb, "each connection gets its own nonce");
        assert_eq!(a.step(1, b"garbage"), SaslOutcome::Failed);
        assert_eq!(a.step(1, b""), SaslOutcome::Failed, "nothing after a failure");
        let mut none = ConnSasl::new(Arc::new(SaslServer::with_login(SaslLogin::None)));
        assert_eq!(none.step(3, b""), SaslOutcome::NoServer);
        let mut krb =
            ConnSasl::new(Arc::new(SaslServer::with_login(SaslLogin::Gssapi { principal: None, keytab: None })));
        assert_eq!(krb.step(4, b""), SaslOutcome::Failed);
    }
}
