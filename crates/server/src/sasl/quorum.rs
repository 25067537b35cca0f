//! SASL between servers (`quorum.auth.*`), as ZooKeeper's `SaslQuorumAuthServer` and
//! `SaslQuorumAuthLearner` do it: a connecting server (an election initiator after its
//! introduction, a learner before its FOLLOWERINFO) authenticates in `QuorumAuthPacket`s with its
//! JAAS `QuorumLearner` section; the accepting server checks it with its `QuorumServer` section
//! and answers SUCCESS or ERROR. The mechanism follows the sections, as in ZooKeeper:
//!
//! - DIGEST-MD5: the learner's `username` and `password` against the server's `user_<name>`
//!   options (protocol `zookeeper-quorum`, realm and server name `zk-quorum-sasl-md5`).
//! - GSSAPI (Kerberos), for a `Krb5LoginModule` section: the learner, as its JAAS `principal`
//!   with keys from its `keyTab`, asks for a ticket to `quorum.auth.kerberos.servicePrincipal`
//!   (default `zkquorum/localhost`; `_HOST` becomes the dialled server's host from its `server.N`
//!   line); the server accepts with its own section's principal and keytab, and admits only a
//!   principal whose host part (`service/host@REALM`) is the host of a `server.N` line.
//!
//! - `quorum.auth.enableSasl=true` turns it on; without it nothing is sent or expected.
//! - `quorum.auth.learnerRequireSasl=true`: this server authenticates when it connects (without it
//!   it connects without a word, as ZooKeeper's learner does).
//! - `quorum.auth.serverRequireSasl=true`: a peer that does not authenticate, or fails, is refused;
//!   without it such a peer is let through (the rolling-upgrade setting ZooKeeper documents).
//!
//! The accepting side recognises an auth packet by its magic (`QuorumAuth.nextPacketIsAuth`);
//! bytes read past the exchange stay in the caller's buffer for the protocol that follows.
//! Kerberos needs process-wide krb5 settings (keytab variables), made by [`prepare_process`]
//! before threads start.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use warden_proto::jute::{DecodeError, Reader, Record};
use warden_proto::quorum::{auth_status, QuorumAuthPacket, QUORUM_AUTH_MAGIC};

use super::digest_md5::{self, DigestMd5};
use super::gssapi::{self, GssapiClient, GssapiServer};
use super::{jaas, Mechanism, Step};

/// `QuorumAuth.QUORUM_SERVER_SASL_DIGEST`: realm and server name.
pub const QUORUM_REALM: &str = "zk-quorum-sasl-md5";
/// `protocol/serverName` of the quorum DIGEST-MD5 exchange.
pub const QUORUM_DIGEST_URI: &str = "zookeeper-quorum/zk-quorum-sasl-md5";
/// `QuorumAuth.QUORUM_KERBEROS_SERVICE_PRINCIPAL_DEFAULT_VALUE`.
pub const DEFAULT_SERVICE_PRINCIPAL: &str = "zkquorum/localhost";
/// `SaslQuorumAuthServer.MAX_RETRIES`: challenges before the server gives up.
const MAX_ROUNDS: usize = 5;
/// The largest auth packet accepted (DIGEST-MD5 tokens are a few hundred bytes, Kerberos ones a
/// few KiB).
const MAX_TOKEN: usize = 64 * 1024;

/// The `quorum.auth.*` settings of zoo.cfg.
#[derive(Debug, Clone)]
pub struct QuorumSaslSettings {
    pub enable: bool,
    pub learner_require: bool,
    pub server_require: bool,
    pub learner_context: String,
    pub server_context: String,
    /// `quorum.auth.kerberos.servicePrincipal`.
    pub kerberos_service_principal: String,
}

impl Default for QuorumSaslSettings {
    fn default() -> Self {
        Self {
            enable: false,
            learner_require: false,
            server_require: false,
            learner_context: "QuorumLearner".into(),
            server_context: "QuorumServer".into(),
            kerberos_service_principal: DEFAULT_SERVICE_PRINCIPAL.into(),
        }
    }
}

/// How this server checks peers that connect to it.
#[derive(Clone)]
enum ServerMech {
    /// The `user_<name>` passwords.
    Digest(Arc<HashMap<String, String>>),
    /// Kerberos acceptor credentials, and the hosts of the `server.N` lines.
    Gssapi { server: GssapiServer, hosts: Arc<BTreeSet<String>> },
}

/// How this server authenticates when it connects.
#[derive(Clone)]
enum LearnerMech {
    Digest {
        user: String,
        password: String,
    },
    /// Initiator credentials, and `quorum.auth.kerberos.servicePrincipal`.
    Gssapi {
        cred: libgssapi::credential::Cred,
        service_principal: String,
    },
}

/// This server's quorum SASL: what it checks when accepting and what it presents when
/// connecting. Cheap to clone; the default does nothing.
#[derive(Clone, Default)]
pub struct QuorumSasl {
    /// Accepting side (`enableSasl`): the mechanism and whether auth is required.
    server: Option<(ServerMech, bool)>,
    /// Connecting side (`enableSasl` and `learnerRequireSasl`).
    learner: Option<Arc<LearnerMech>>,
}

impl std::fmt::Debug for QuorumSasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let server = self.server.as_ref().map(|(m, required)| match m {
            ServerMech::Digest(users) => format!("DIGEST-MD5 ({} users), required={required}", users.len()),
            ServerMech::Gssapi { server, .. } => format!("GSSAPI as {}, required={required}", server.principal()),
        });
        let learner = self.learner.as_deref().map(|m| match m {
            LearnerMech::Digest { user, .. } => format!("DIGEST-MD5 as {user}"),
            LearnerMech::Gssapi { service_principal, .. } => format!("GSSAPI to {service_principal}"),
        });
        f.debug_struct("QuorumSasl").field("server", &server).field("learner", &learner).finish()
    }
}

/// A section's Kerberos login (`keyTab`, `principal`), if its module is `Krb5LoginModule`.
fn kerberos_login(sec: &jaas::Section) -> Option<(Option<String>, Option<String>)> {
    let krb = sec.entries.iter().find(|e| e.module.ends_with("Krb5LoginModule"))?;
    let option = |name: &str| krb.options.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    Some((option("keyTab"), option("principal")))
}

/// What must be set process-wide before threads start for Kerberos between servers: the
/// acceptor keytab of the `QuorumServer` section (`KRB5_KTNAME`, which the client port's `Server`
/// section may also set: both must then name one keytab) and the initiator keytab of the
/// `QuorumLearner` section (`KRB5_CLIENT_KTNAME`, with a credential cache of the process's own).
pub fn prepare_process(s: &QuorumSaslSettings, jaas_file: Option<&Path>) -> Result<(), String> {
    let (true, Some(path)) = (s.enable, jaas_file) else { return Ok(()) };
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading JAAS file {}: {e}", path.display()))?;
    let sections = jaas::parse(&text)?;
    let find = |name: &str| sections.iter().find(|sec| sec.name == name);
    if let Some((Some(keytab), _)) = find(&s.server_context).and_then(kerberos_login) {
        let want = gssapi::keytab_name(Path::new(&keytab));
        match std::env::var("KRB5_KTNAME") {
            Ok(have) if have != want => {
                return Err(format!(
                    "the {:?} section's keyTab {want} is not the acceptor keytab already in use ({have}); \
                     Warden reads one acceptor keytab: put both principals in it",
                    s.server_context
                ))
            }
            _ => gssapi::configure_process(Some(Path::new(&keytab)), None),
        }
    }
    if s.learner_require {
        if let Some((Some(keytab), _)) = find(&s.learner_context).and_then(kerberos_login) {
            gssapi::configure_client_process(Path::new(&keytab));
        }
    }
    Ok(())
}

impl QuorumSasl {
    /// From the settings, the JAAS file's text (`None`: no file) and the hosts of the `server.N`
    /// lines (the hosts a Kerberos peer may authenticate from).
    pub fn new(s: &QuorumSaslSettings, jaas_text: Option<&str>, hosts: &[String]) -> Result<QuorumSasl, String> {
        if !s.enable {
            if s.learner_require || s.server_require {
                return Err("quorum.auth.enableSasl is off, so quorum.auth.learnerRequireSasl and \
                            quorum.auth.serverRequireSasl cannot be on"
                    .into());
            }
            return Ok(QuorumSasl::default());
        }
        if s.server_require && !s.learner_require {
            return Err("quorum.auth.learnerRequireSasl is off, so quorum.auth.serverRequireSasl cannot be on".into());
        }
        let text = jaas_text.ok_or("quorum.auth.enableSasl=true needs a JAAS file (jaasLoginConfig, --jaas or -Djava.security.auth.login.config)")?;
        let sections = jaas::parse(text)?;
        let section = |name: &str| -> Result<&jaas::Section, String> {
            sections.iter().find(|sec| sec.name == name).ok_or(format!("no JAAS section {name:?}"))
        };
        let options = |sec: &jaas::Section| sec.entries.iter().flat_map(|e| e.options.clone()).collect::<Vec<_>>();
        let server_sec = section(&s.server_context)?;
        let server = match kerberos_login(server_sec) {
            Some((_, principal)) => ServerMech::Gssapi {
                server: GssapiServer::new(principal.as_deref())?,
                hosts: Arc::new(hosts.iter().map(|h| h.to_lowercase()).collect()),
            },
            None => ServerMech::Digest(Arc::new(
                options(server_sec)
                    .into_iter()
                    .filter_map(|(k, v)| Some((k.strip_prefix("user_")?.to_string(), v)))
                    .collect(),
            )),
        };
        let learner = match s.learner_require {
            false => None,
            true => {
                let sec = section(&s.learner_context)?;
                Some(Arc::new(match kerberos_login(sec) {
                    Some((_, principal)) => {
                        let principal =
                            principal.ok_or(format!("JAAS section {:?} has no principal", s.learner_context))?;
                        LearnerMech::Gssapi {
                            cred: gssapi::initiator_credentials(&principal)?,
                            service_principal: s.kerberos_service_principal.clone(),
                        }
                    }
                    None => {
                        let opts = options(sec);
                        let get = |k: &str| opts.iter().find(|(o, _)| o == k).map(|(_, v)| v.clone());
                        LearnerMech::Digest {
                            user: get("username")
                                .ok_or(format!("JAAS section {:?} has no username", s.learner_context))?,
                            password: get("password")
                                .ok_or(format!("JAAS section {:?} has no password", s.learner_context))?,
                        }
                    }
                }))
            }
        };
        Ok(QuorumSasl { server: Some((server, s.server_require)), learner })
    }

    pub fn is_enabled(&self) -> bool {
        self.server.is_some()
    }

    /// The accepting side, before the connection's protocol: authenticates a peer that opens
    /// with an auth packet. `Ok(Some(user))` when it authenticated, `Ok(None)` when it was let
    /// through without (not required), `Err` when it must be closed. `buf` holds bytes already
    /// read; what follows the exchange is left in it.
    ///
    /// As `SaslQuorumAuthServer`: when SASL is not required, any failure (no auth packet, a wrong
    /// password, a peer that closes first) lets the connection through unauthenticated, so a
    /// lower-id election peer that hangs up is still connected back to. An exchange not over
    /// `within` is an error either way (the peer port's handshake deadline).
    pub async fn accept<S>(&self, stream: &mut S, buf: &mut Vec<u8>, within: Duration) -> Result<Option<String>, String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let Some((mech, required)) = &self.server else { return Ok(None) };
        let exchanged = tokio::time::timeout(within, Self::exchange_as_server(mech, stream, buf))
            .await
            .map_err(|_| "quorum SASL not finished in time".to_string())?;
        match exchanged {
            Ok(user) => Ok(Some(user)),
            Err(why) if *required => Err(why),
            Err(why) => {
                tracing::warn!(%why, "quorum SASL did not authenticate the peer; it is let through (quorum.auth.serverRequireSasl is off)");
                Ok(None)
            }
        }
    }

    async fn exchange_as_server<S>(mech: &ServerMech, stream: &mut S, buf: &mut Vec<u8>) -> Result<String, String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        while buf.len() < 8 {
            if read_more(stream, buf).await? == 0 {
                return Err("the peer closed before its first message".into());
            }
        }
        if QuorumAuthPacket::starts(buf) != Some(true) {
            return Err("the peer does not authenticate".into());
        }
        let mut exchange: Box<dyn Mechanism> = match mech {
            ServerMech::Digest(users) => {
                Box::new(DigestMd5::with_names(users.clone(), super::random_nonce(), QUORUM_REALM, QUORUM_DIGEST_URI))
            }
            ServerMech::Gssapi { server, .. } => Box::new(server.start()),
        };
        for _ in 0..=MAX_ROUNDS {
            let packet = receive(stream, buf).await?;
            match exchange.step(packet.token.as_deref().unwrap_or_default()) {
                Step::Continue(challenge) => send(stream, auth_status::IN_PROGRESS, Some(challenge)).await?,
                Step::Done { authentication_id, final_token } => {
                    if let ServerMech::Gssapi { hosts, .. } = mech {
                        if let Err(why) = authorized_host(&authentication_id, hosts) {
                            send(stream, auth_status::ERROR, Some(Vec::new())).await?;
                            return Err(why);
                        }
                    }
                    send(stream, auth_status::SUCCESS, final_token).await?;
                    return Ok(authentication_id);
                }
                Step::Fail(why) => {
                    send(stream, auth_status::ERROR, Some(Vec::new())).await?;
                    return Err(format!("SASL failed: {why}"));
                }
            }
        }
        send(stream, auth_status::ERROR, Some(Vec::new())).await?;
        Err(format!("SASL did not finish in {MAX_ROUNDS} rounds"))
    }

    /// The connecting side, before the connection's protocol (`learnerRequireSasl`), with the
    /// server at `host` (its `server.N` host, for `_HOST`). Bytes read past the server's SUCCESS
    /// stay in `buf`.
    pub async fn dial<S>(&self, stream: &mut S, buf: &mut Vec<u8>, host: &str) -> Result<(), String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        match self.learner.as_deref() {
            None => Ok(()),
            Some(LearnerMech::Digest { user, password }) => dial_digest(stream, buf, user, password).await,
            Some(LearnerMech::Gssapi { cred, service_principal }) => {
                dial_gssapi(stream, buf, cred.clone(), service_principal, host).await
            }
        }
    }
}

/// `SaslQuorumServerCallbackHandler`'s rule: a Kerberos peer `service/host@REALM` must come from
/// the host of a `server.N` line (a principal without a host part is admitted).
fn authorized_host(principal: &str, hosts: &BTreeSet<String>) -> Result<(), String> {
    let parts: Vec<&str> = principal.split(['/', '@']).collect();
    match parts.as_slice() {
        [_, host, _] if !hosts.contains(&host.to_lowercase()) => {
            Err(format!("{principal} is not authorized to join: {host} is not the host of a server.N line"))
        }
        _ => Ok(()),
    }
}

async fn dial_digest<S>(stream: &mut S, buf: &mut Vec<u8>, user: &str, password: &str) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    send(stream, auth_status::IN_PROGRESS, Some(Vec::new())).await?;
    let mut expected_rspauth: Option<String> = None;
    loop {
        let packet = receive(stream, buf).await?;
        let token = packet.token.unwrap_or_default();
        match (packet.status, &expected_rspauth) {
            (auth_status::IN_PROGRESS, None) => {
                let (response, rspauth) =
                    digest_md5::client_response(&token, user, password, &super::random_nonce(), QUORUM_DIGEST_URI)?;
                expected_rspauth = Some(rspauth);
                send(stream, auth_status::IN_PROGRESS, Some(response)).await?;
            }
            (auth_status::SUCCESS, Some(rspauth)) => {
                let want = format!("rspauth={rspauth}");
                return match token == want.as_bytes() {
                    true => Ok(()),
                    false => Err("the server's rspauth is wrong (it does not know our password)".into()),
                };
            }
            (auth_status::ERROR, _) => return Err(format!("the server refused user {user:?}")),
            (status, _) => return Err(format!("unexpected status {status} in the exchange")),
        }
    }
}

/// The learner's side of GSSAPI. Context steps may ask the KDC for a ticket, so they run on
/// the blocking pool.
async fn dial_gssapi<S>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    cred: libgssapi::credential::Cred,
    service_principal: &str,
    host: &str,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // SecurityUtils.getServerPrincipal, then KerberosName: service/host[@REALM].
    let principal = service_principal.replace("_HOST", &host.to_lowercase());
    let (service, rest) = principal
        .split_once('/')
        .ok_or(format!("quorum.auth.kerberos.servicePrincipal {principal:?} is not service/host"))?;
    let target_host = rest.split('@').next().unwrap_or(rest);
    let client = GssapiClient::new(Some(cred), service, target_host)?;
    let (mut client, first) = blocking(client, |c| c.initial()).await?;
    send(stream, auth_status::IN_PROGRESS, Some(first)).await?;
    loop {
        let packet = receive(stream, buf).await?;
        let token = packet.token.unwrap_or_default();
        match packet.status {
            auth_status::IN_PROGRESS => {
                let (c, response) = blocking(client, move |c| c.step(&token)).await?;
                client = c;
                send(stream, auth_status::IN_PROGRESS, Some(response)).await?;
            }
            auth_status::SUCCESS if client.is_done() => return Ok(()),
            auth_status::SUCCESS => return Err("the server said SUCCESS before the exchange ended".into()),
            auth_status::ERROR => return Err(format!("the server refused our Kerberos login (to {principal})")),
            status => return Err(format!("unexpected status {status} in the exchange")),
        }
    }
}

/// Runs `f` on `client` on the blocking pool; gives the client back with the result.
async fn blocking<T: Send + 'static>(
    mut client: GssapiClient,
    f: impl FnOnce(&mut GssapiClient) -> Result<T, String> + Send + 'static,
) -> Result<(GssapiClient, T), String> {
    tokio::task::spawn_blocking(move || {
        let r = f(&mut client);
        r.map(|t| (client, t))
    })
    .await
    .map_err(|e| format!("GSSAPI step panicked: {e}"))?
}

async fn read_more<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> Result<usize, String> {
    let mut chunk = [0u8; 4096];
    let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// The next auth packet from `buf` (reading more as needed); consumed from `buf`.
async fn receive<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>) -> Result<QuorumAuthPacket, String> {
    loop {
        let mut r = Reader::with_max_len(buf, MAX_TOKEN);
        match QuorumAuthPacket::decode(&mut r) {
            Ok(p) if p.magic == QUORUM_AUTH_MAGIC => {
                let used = r.position();
                buf.drain(..used);
                return Ok(p);
            }
            Ok(p) => return Err(format!("not a quorum auth packet (magic {:#x})", p.magic)),
            Err(DecodeError::Incomplete { .. }) => {}
            Err(e) => return Err(format!("malformed quorum auth packet: {e}")),
        }
        if read_more(stream, buf).await? == 0 {
            return Err("closed inside the SASL exchange".into());
        }
    }
}

async fn send<S: AsyncWrite + Unpin>(stream: &mut S, status: i32, token: Option<Vec<u8>>) -> Result<(), String> {
    let bytes = QuorumAuthPacket::new(status, token).to_bytes();
    stream.write_all(&bytes).await.map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deadline no test exchange comes near.
    const LONG: Duration = Duration::from_secs(30);

    const JAAS: &str = r#"
QuorumServer {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_test="secret";
};
QuorumLearner {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="test"
    password="secret";
};
WrongLearner {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="test"
    password="guess";
};
"#;

    fn settings(learner_context: &str, server_require: bool) -> QuorumSaslSettings {
        QuorumSaslSettings {
            enable: true,
            learner_require: true,
            server_require,
            learner_context: learner_context.into(),
            ..Default::default()
        }
    }

    /// What a dialler sends after the exchange (a learner's FOLLOWERINFO, say).
    const AFTER: &[u8] = b"\0\0\0\x0bthe protocol that follows";

    /// Runs both sides over an in-memory pipe; a dialler that succeeds then writes [`AFTER`],
    /// which the acceptor must find in its buffer. Each side drops its end when done, as a
    /// server closes a connection whose exchange failed.
    async fn exchange(
        dialler: QuorumSasl,
        acceptor: QuorumSasl,
    ) -> (Result<(), String>, Result<Option<String>, String>) {
        let (mut a, mut b) = tokio::io::duplex(4096);
        let dial = async move {
            let mut buf = Vec::new();
            let r = dialler.dial(&mut a, &mut buf, "127.0.0.1").await;
            if r.is_ok() {
                a.write_all(AFTER).await.unwrap();
            }
            r
        };
        let accept = async move {
            let mut buf = Vec::new();
            let r = acceptor.accept(&mut b, &mut buf, LONG).await;
            if r.is_ok() {
                while read_more(&mut b, &mut buf).await.unwrap_or(0) > 0 {}
            }
            (r, buf)
        };
        let (d, (a, rest)) = tokio::join!(dial, accept);
        if d.is_ok() && a.is_ok() {
            assert_eq!(rest, AFTER, "what follows the exchange is kept");
        }
        (d, a)
    }

    #[tokio::test]
    async fn digest_md5_between_servers() {
        let server = QuorumSasl::new(&settings("QuorumLearner", true), Some(JAAS), &[]).unwrap();
        let (d, a) = exchange(server.clone(), server.clone()).await;
        assert_eq!((d, a), (Ok(()), Ok(Some("test".into()))));

        // A wrong password: refused when required, let through (unauthenticated) when not.
        let wrong = QuorumSasl::new(&settings("WrongLearner", true), Some(JAAS), &[]).unwrap();
        let (d, a) = exchange(wrong.clone(), server.clone()).await;
        assert!(d.is_err() && a.unwrap_err().contains("bad password"));
        let lenient = QuorumSasl::new(&settings("QuorumLearner", false), Some(JAAS), &[]).unwrap();
        let (d, a) = exchange(wrong, lenient.clone()).await;
        assert!(d.is_err());
        assert_eq!(a, Ok(None));

        // A peer that does not authenticate: refused when required, let through when not.
        let silent = QuorumSasl::default();
        let (_, a) = exchange(silent.clone(), lenient.clone()).await;
        assert_eq!(a, Ok(None));
        let (mut x, mut y) = tokio::io::duplex(64);
        x.write_all(&[0, 0, 0, 11, 0, 0, 0, 0, 0, 0]).await.unwrap();
        assert!(server.accept(&mut y, &mut Vec::new(), LONG).await.unwrap_err().contains("does not authenticate"));
        // A peer that hangs up first (a lower-id election peer): let through when not required.
        let (x, mut y) = tokio::io::duplex(64);
        drop(x);
        let lenient = QuorumSasl::new(&settings("QuorumLearner", false), Some(JAAS), &[]).unwrap();
        assert_eq!(lenient.accept(&mut y, &mut Vec::new(), LONG).await, Ok(None));
        let (x, mut y) = tokio::io::duplex(64);
        drop(x);
        assert!(server.accept(&mut y, &mut Vec::new(), LONG).await.is_err());
    }

    /// Bad input from a peer that claims to authenticate: a declared token larger than any
    /// DIGEST-MD5 token, a negative length, garbage for a response. Each is refused (without
    /// allocating what the length claims), and let through unauthenticated when not required.
    #[tokio::test]
    async fn malformed_auth_packets_are_refused() {
        let server = QuorumSasl::new(&settings("QuorumLearner", true), Some(JAAS), &[]).unwrap();
        let lenient = QuorumSasl::new(&settings("QuorumLearner", false), Some(JAAS), &[]).unwrap();
        let head = |status: i32, len: i32| {
            let mut b = QUORUM_AUTH_MAGIC.to_be_bytes().to_vec();
            b.extend_from_slice(&status.to_be_bytes());
            b.extend_from_slice(&len.to_be_bytes());
            b
        };
        let garbage = {
            let mut b = head(auth_status::IN_PROGRESS, 0);
            b.extend(head(auth_status::IN_PROGRESS, 5));
            b.extend_from_slice(b"\xff\xfe,=\"");
            b
        };
        for (what, bytes) in [("huge", head(0, i32::MAX)), ("negative", head(0, -7)), ("garbage response", garbage)] {
            for (sasl, required) in [(&server, true), (&lenient, false)] {
                let (mut x, mut y) = tokio::io::duplex(1 << 16);
                x.write_all(&bytes).await.unwrap();
                drop(x.shutdown().await);
                let got =
                    tokio::time::timeout(std::time::Duration::from_secs(5), sasl.accept(&mut y, &mut Vec::new(), LONG))
                        .await
                        .unwrap_or_else(|_| panic!("{what}: no answer"));
                match required {
                    true => assert!(got.is_err(), "{what}: {got:?}"),
                    false => assert_eq!(got, Ok(None), "{what}"),
                }
            }
        }
    }

    #[test]
    fn kerberos_peers_must_come_from_an_ensemble_host() {
        let hosts: BTreeSet<String> = ["127.0.0.1".to_string(), "zk2.example.com".to_string()].into();
        assert!(authorized_host("zkquorum/127.0.0.1@R", &hosts).is_ok());
        assert!(authorized_host("zkquorum/ZK2.example.com@R", &hosts).is_ok());
        assert!(authorized_host("zkquorum/intruder@R", &hosts).unwrap_err().contains("not authorized"));
        assert!(authorized_host("learner@R", &hosts).is_ok(), "no host part: admitted, as ZooKeeper");
    }

    #[test]
    fn settings_are_checked_as_zookeeper_does() {
        let off = QuorumSaslSettings { learner_require: true, ..Default::default() };
        assert!(QuorumSasl::new(&off, Some(JAAS), &[]).is_err());
        let server_only = QuorumSaslSettings { enable: true, server_require: true, ..Default::default() };
        assert!(QuorumSasl::new(&server_only, Some(JAAS), &[]).is_err());
        assert!(QuorumSasl::new(&settings("QuorumLearner", true), None, &[]).is_err());
        assert!(QuorumSasl::new(&settings("Missing", true), Some(JAAS), &[]).is_err());
        assert!(!QuorumSasl::new(&QuorumSaslSettings::default(), None, &[]).unwrap().is_enabled());
    }
}
