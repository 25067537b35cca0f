//! SASL between servers (`quorum.auth.*`), as ZooKeeper's `SaslQuorumAuthServer` and
//! `SaslQuorumAuthLearner` do it, with DIGEST-MD5: a connecting server (an election initiator
//! after its introduction, a learner before its FOLLOWERINFO) sends `QuorumAuthPacket`s with the
//! `username` and `password` of its JAAS `QuorumLearner` section; the accepting server checks them
//! against the `user_<name>` options of its `QuorumServer` section (protocol `zookeeper-quorum`,
//! realm and server name `zk-quorum-sasl-md5`) and answers SUCCESS or ERROR.
//!
//! - `quorum.auth.enableSasl=true` turns it on; without it nothing is sent or expected.
//! - `quorum.auth.learnerRequireSasl=true`: this server authenticates when it connects (without it
//!   it connects without a word, as ZooKeeper's learner does).
//! - `quorum.auth.serverRequireSasl=true`: a peer that does not authenticate, or fails, is refused;
//!   without it such a peer is let through (the rolling-upgrade setting ZooKeeper documents).
//!
//! The accepting side recognises an auth packet by its magic (`QuorumAuth.nextPacketIsAuth`);
//! bytes read past the exchange stay in the caller's buffer for the protocol that follows.
//!
//! Absent: GSSAPI between servers (a `Krb5LoginModule` in those sections stops start-up).

use std::collections::HashMap;
use std::sync::Arc;

use rand::Rng as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use warden_proto::jute::{DecodeError, Reader, Record};
use warden_proto::quorum::{auth_status, QuorumAuthPacket, QUORUM_AUTH_MAGIC};

use super::digest_md5::{self, DigestMd5};
use super::{jaas, Mechanism, Step};

/// `QuorumAuth.QUORUM_SERVER_SASL_DIGEST`: realm and server name.
pub const QUORUM_REALM: &str = "zk-quorum-sasl-md5";
/// `protocol/serverName` of the quorum DIGEST-MD5 exchange.
pub const QUORUM_DIGEST_URI: &str = "zookeeper-quorum/zk-quorum-sasl-md5";
/// `SaslQuorumAuthServer.MAX_RETRIES`: challenges before the server gives up.
const MAX_ROUNDS: usize = 5;
/// The largest auth packet accepted (a DIGEST-MD5 token is a few hundred bytes).
const MAX_TOKEN: usize = 64 * 1024;

/// The `quorum.auth.*` settings of zoo.cfg.
#[derive(Debug, Clone)]
pub struct QuorumSaslSettings {
    pub enable: bool,
    pub learner_require: bool,
    pub server_require: bool,
    pub learner_context: String,
    pub server_context: String,
}

impl Default for QuorumSaslSettings {
    fn default() -> Self {
        Self {
            enable: false,
            learner_require: false,
            server_require: false,
            learner_context: "QuorumLearner".into(),
            server_context: "QuorumServer".into(),
        }
    }
}

/// This server's quorum SASL: what it checks when accepting and what it presents when
/// connecting. Cheap to clone; the default does nothing.
#[derive(Debug, Clone, Default)]
pub struct QuorumSasl {
    /// Accepting side (`enableSasl`): the QuorumServer users and whether auth is required.
    server: Option<(Arc<HashMap<String, String>>, bool)>,
    /// Connecting side (`enableSasl` and `learnerRequireSasl`): username and password.
    learner: Option<Arc<(String, String)>>,
}

impl QuorumSasl {
    /// From the settings and the JAAS file's text (`None`: no file).
    pub fn new(s: &QuorumSaslSettings, jaas_text: Option<&str>) -> Result<QuorumSasl, String> {
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
            let sec = sections.iter().find(|sec| sec.name == name).ok_or(format!("no JAAS section {name:?}"))?;
            if sec.entries.iter().any(|e| e.module.ends_with("Krb5LoginModule")) {
                return Err(format!("JAAS section {name:?}: Kerberos between servers is not supported by Warden"));
            }
            Ok(sec)
        };
        let options = |sec: &jaas::Section| sec.entries.iter().flat_map(|e| e.options.clone()).collect::<Vec<_>>();
        let users: HashMap<String, String> = options(section(&s.server_context)?)
            .into_iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("user_")?.to_string(), v)))
            .collect();
        let learner = match s.learner_require {
            false => None,
            true => {
                let opts = options(section(&s.learner_context)?);
                let get = |k: &str| opts.iter().find(|(o, _)| o == k).map(|(_, v)| v.clone());
                let user = get("username").ok_or(format!("JAAS section {:?} has no username", s.learner_context))?;
                let password =
                    get("password").ok_or(format!("JAAS section {:?} has no password", s.learner_context))?;
                Some(Arc::new((user, password)))
            }
        };
        Ok(QuorumSasl { server: Some((Arc::new(users), s.server_require)), learner })
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
    /// lower-id election peer that hangs up is still connected back to.
    pub async fn accept<S>(&self, stream: &mut S, buf: &mut Vec<u8>) -> Result<Option<String>, String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let Some((users, required)) = &self.server else { return Ok(None) };
        match Self::exchange_as_server(users, stream, buf).await {
            Ok(user) => Ok(Some(user)),
            Err(why) if *required => Err(why),
            Err(why) => {
                tracing::warn!(%why, "quorum SASL did not authenticate the peer; it is let through (quorum.auth.serverRequireSasl is off)");
                Ok(None)
            }
        }
    }

    async fn exchange_as_server<S>(
        users: &Arc<HashMap<String, String>>,
        stream: &mut S,
        buf: &mut Vec<u8>,
    ) -> Result<String, String>
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
        let nonce: String = {
            let bytes: [u8; 24] = rand::thread_rng().gen();
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        };
        let mut mech = DigestMd5::with_names(users.clone(), nonce, QUORUM_REALM, QUORUM_DIGEST_URI);
        for _ in 0..=MAX_ROUNDS {
            let packet = receive(stream, buf).await?;
            match mech.step(packet.token.as_deref().unwrap_or_default()) {
                Step::Continue(challenge) => send(stream, auth_status::IN_PROGRESS, Some(challenge)).await?,
                Step::Done { authentication_id, final_token } => {
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

    /// The connecting side, before the connection's protocol (`learnerRequireSasl`): DIGEST-MD5
    /// with the QuorumLearner credentials. Bytes read past the server's SUCCESS stay in `buf`.
    pub async fn dial<S>(&self, stream: &mut S, buf: &mut Vec<u8>) -> Result<(), String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let Some(creds) = &self.learner else { return Ok(()) };
        let (user, password) = (&creds.0, &creds.1);
        send(stream, auth_status::IN_PROGRESS, Some(Vec::new())).await?;
        let mut expected_rspauth: Option<String> = None;
        loop {
            let packet = receive(stream, buf).await?;
            let token = packet.token.unwrap_or_default();
            match (packet.status, &expected_rspauth) {
                (auth_status::IN_PROGRESS, None) => {
                    let cnonce: String = {
                        let bytes: [u8; 16] = rand::thread_rng().gen();
                        bytes.iter().map(|b| format!("{b:02x}")).collect()
                    };
                    let (response, rspauth) =
                        digest_md5::client_response(&token, user, password, &cnonce, QUORUM_DIGEST_URI)?;
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
            let r = dialler.dial(&mut a, &mut buf).await;
            if r.is_ok() {
                a.write_all(AFTER).await.unwrap();
            }
            r
        };
        let accept = async move {
            let mut buf = Vec::new();
            let r = acceptor.accept(&mut b, &mut buf).await;
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
        let server = QuorumSasl::new(&settings("QuorumLearner", true), Some(JAAS)).unwrap();
        let (d, a) = exchange(server.clone(), server.clone()).await;
        assert_eq!((d, a), (Ok(()), Ok(Some("test".into()))));

        // A wrong password: refused when required, let through (unauthenticated) when not.
        let wrong = QuorumSasl::new(&settings("WrongLearner", true), Some(JAAS)).unwrap();
        let (d, a) = exchange(wrong.clone(), server.clone()).await;
        assert!(d.is_err() && a.unwrap_err().contains("bad password"));
        let lenient = QuorumSasl::new(&settings("QuorumLearner", false), Some(JAAS)).unwrap();
        let (d, a) = exchange(wrong, lenient.clone()).await;
        assert!(d.is_err());
        assert_eq!(a, Ok(None));

        // A peer that does not authenticate: refused when required, let through when not.
        let silent = QuorumSasl::default();
        let (_, a) = exchange(silent.clone(), lenient.clone()).await;
        assert_eq!(a, Ok(None));
        let (mut x, mut y) = tokio::io::duplex(64);
        x.write_all(&[0, 0, 0, 11, 0, 0, 0, 0, 0, 0]).await.unwrap();
        assert!(server.accept(&mut y, &mut Vec::new()).await.unwrap_err().contains("does not authenticate"));
        // A peer that hangs up first (a lower-id election peer): let through when not required.
        let (x, mut y) = tokio::io::duplex(64);
        drop(x);
        let lenient = QuorumSasl::new(&settings("QuorumLearner", false), Some(JAAS)).unwrap();
        assert_eq!(lenient.accept(&mut y, &mut Vec::new()).await, Ok(None));
        let (x, mut y) = tokio::io::duplex(64);
        drop(x);
        assert!(server.accept(&mut y, &mut Vec::new()).await.is_err());
    }

    /// Bad input from a peer that claims to authenticate: a declared token larger than any
    /// DIGEST-MD5 token, a negative length, garbage for a response. Each is refused (without
    /// allocating what the length claims), and let through unauthenticated when not required.
    #[tokio::test]
    async fn malformed_auth_packets_are_refused() {
        let server = QuorumSasl::new(&settings("QuorumLearner", true), Some(JAAS)).unwrap();
        let lenient = QuorumSasl::new(&settings("QuorumLearner", false), Some(JAAS)).unwrap();
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
                let got = tokio::time::timeout(std::time::Duration::from_secs(5), sasl.accept(&mut y, &mut Vec::new()))
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
    fn settings_are_checked_as_zookeeper_does() {
        let off = QuorumSaslSettings { learner_require: true, ..Default::default() };
        assert!(QuorumSasl::new(&off, Some(JAAS)).is_err());
        let server_only = QuorumSaslSettings { enable: true, server_require: true, ..Default::default() };
        assert!(QuorumSasl::new(&server_only, Some(JAAS)).is_err());
        assert!(QuorumSasl::new(&settings("QuorumLearner", true), None).is_err());
        assert!(QuorumSasl::new(&settings("Missing", true), Some(JAAS)).is_err());
        assert!(!QuorumSasl::new(&QuorumSaslSettings::default(), None).unwrap().is_enabled());
    }
}
