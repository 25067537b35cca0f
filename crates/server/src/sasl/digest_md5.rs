//! The DIGEST-MD5 server mechanism (RFC 2831) as ZooKeeper's `Server` JAAS section uses it:
//! md5-sess, qop `auth` only (no integrity or privacy layer), realm and server name `zk-sasl-md5`,
//! digest-uri `zookeeper/zk-sasl-md5`. The nonce is passed in, so an exchange is deterministic.
//!
//! Challenge (reply to the client's empty first token), as Java's `DigestMD5Server` sends it:
//! `realm="zk-sasl-md5",nonce="<nonce>",charset=utf-8,algorithm=md5-sess`; success data:
//! `rspauth=<32 lowercase hex>`. Anything else (a non-empty first token, a malformed or duplicate
//! directive, another nonce, nc other than 1, an unknown user, a wrong response, any packet after
//! completion) fails the exchange.

use std::collections::HashMap;

use md5::{Digest as _, Md5};

use super::{Mechanism, Step};

/// Realm and server name ZooKeeper's server passes to `Sasl.createSaslServer` for DIGEST-MD5.
pub const ZK_REALM: &str = "zk-sasl-md5";
/// The digest-uri a client must send: `protocol/serverName`.
pub const ZK_DIGEST_URI: &str = "zookeeper/zk-sasl-md5";

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Waiting for the client's (empty) initial token.
    Start,
    /// The challenge went out; waiting for the digest-response.
    Challenged,
    /// Finished, successfully or not: any further packet fails.
    Finished,
}

/// One connection's DIGEST-MD5 exchange.
pub struct DigestMd5 {
    realm: String,
    digest_uri: String,
    nonce: String,
    /// user -> password, from the JAAS section's `user_<name>` options.
    users: std::sync::Arc<HashMap<String, String>>,
    state: State,
}

impl DigestMd5 {
    /// An exchange with ZooKeeper's realm and digest-uri.
    pub fn new(users: std::sync::Arc<HashMap<String, String>>, nonce: String) -> Self {
        Self::with_names(users, nonce, ZK_REALM, ZK_DIGEST_URI)
    }

    /// An exchange with another realm and digest-uri (RFC 2831's example uses its own).
    pub fn with_names(
        users: std::sync::Arc<HashMap<String, String>>,
        nonce: String,
        realm: &str,
        digest_uri: &str,
    ) -> Self {
        Self { realm: realm.into(), digest_uri: digest_uri.into(), nonce, users, state: State::Start }
    }

    fn challenge(&self) -> Vec<u8> {
        format!("realm=\"{}\",nonce=\"{}\",charset=utf-8,algorithm=md5-sess", self.realm, self.nonce).into_bytes()
    }

    /// Checks a digest-response; on success the authentication id and the `rspauth` data.
    fn verify(&self, token: &[u8]) -> Result<(String, Vec<u8>), String> {
        let text = std::str::from_utf8(token).map_err(|_| "digest-response is not UTF-8".to_string())?;
        let d = parse_directives(text)?;
        let get = |k: &str| d.get(k).map(String::as_str);
        let utf8 = match get("charset") {
            None => false,
            Some(c) if c.eq_ignore_ascii_case("utf-8") => true,
            Some(c) => return Err(format!("unsupported charset {c:?}")),
        };
        let username = get("username").ok_or("no username")?;
        let realm = get("realm").unwrap_or("");
        if !realm.is_empty() && realm != self.realm {
            return Err(format!("realm {realm:?} was not offered"));
        }
        if get("nonce") != Some(self.nonce.as_str()) {
            return Err("nonce does not match the challenge".into());
        }
        let cnonce = get("cnonce").filter(|c| !c.is_empty()).ok_or("no cnonce")?;
        let nc = get("nc").ok_or("no nc")?;
        if nc != "00000001" {
            return Err(format!("nonce count {nc:?} is not 00000001 (replayed or reused response)"));
        }
        let qop = get("qop").unwrap_or("auth");
        if qop != "auth" {
            return Err(format!("qop {qop:?} was not offered (only auth)"));
        }
        let uri = get("digest-uri").ok_or("no digest-uri")?;
        if uri != self.digest_uri {
            return Err(format!("digest-uri {uri:?} is not {:?}", self.digest_uri));
        }
        let response = get("response").ok_or("no response")?;
        let authzid = get("authzid");
        let Some(password) = self.users.get(username) else {
            return Err(format!("no user {username:?} in the JAAS server section"));
        };
        let ha1 =
            ha1(&encode(username, utf8), &encode(realm, utf8), &encode(password, utf8), &self.nonce, cnonce, authzid);
        let expected = response_value(&ha1, &self.nonce, nc, cnonce, qop, &format!("AUTHENTICATE:{uri}"));
        if response != expected {
            return Err(format!("wrong response for user {username:?} (bad password)"));
        }
        let rspauth = response_value(&ha1, &self.nonce, nc, cnonce, qop, &format!(":{uri}"));
        Ok((username.to_string(), format!("rspauth={rspauth}").into_bytes()))
    }
}

impl Mechanism for DigestMd5 {
    fn name(&self) -> &'static str {
        "DIGEST-MD5"
    }

    fn step(&mut self, token: &[u8]) -> Step {
        match self.state {
            State::Start if token.is_empty() => {
                self.state = State::Challenged;
                Step::Continue(self.challenge())
            }
            State::Start => {
                self.state = State::Finished;
                Step::Fail("DIGEST-MD5 has no initial response, but the first token is not empty".into())
            }
            State::Challenged => {
                self.state = State::Finished;
                match self.verify(token) {
                    Ok((user, final_token)) => Step::Done { authentication_id: user, final_token: Some(final_token) },
                    Err(why) => Step::Fail(why),
                }
            }
            State::Finished => Step::Fail("SASL packet after the exchange finished".into()),
        }
    }
}

/// The client's side of the exchange (`com.sun.security.sasl.digest.DigestMD5Client`, as a
/// quorum learner runs it): the digest-response to `challenge` for `user` and `password`, with
/// this `cnonce`, and the `rspauth` value the server must answer with.
pub fn client_response(
    challenge: &[u8],
    user: &str,
    password: &str,
    cnonce: &str,
    digest_uri: &str,
) -> Result<(Vec<u8>, String), String> {
    let text = std::str::from_utf8(challenge).map_err(|_| "challenge is not UTF-8".to_string())?;
    let d = parse_directives(text)?;
    let get = |k: &str| d.get(k).map(String::as_str);
    let nonce = get("nonce").filter(|n| !n.is_empty()).ok_or("no nonce in the challenge")?;
    if get("algorithm") != Some("md5-sess") {
        return Err(format!("algorithm {:?} is not md5-sess", get("algorithm")));
    }
    if let Some(qop) = get("qop") {
        if !qop.split(',').any(|q| q.trim() == "auth") {
            return Err(format!("qop {qop:?} does not offer auth"));
        }
    }
    let utf8 = get("charset").is_some_and(|c| c.eq_ignore_ascii_case("utf-8"));
    let realm = get("realm").unwrap_or("");
    let nc = "00000001";
    let ha1 = ha1(&encode(user, utf8), &encode(realm, utf8), &encode(password, utf8), nonce, cnonce, None);
    let response = response_value(&ha1, nonce, nc, cnonce, "auth", &format!("AUTHENTICATE:{digest_uri}"));
    let rspauth = response_value(&ha1, nonce, nc, cnonce, "auth", &format!(":{digest_uri}"));
    let quote = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
    let charset = if utf8 { "charset=utf-8," } else { "" };
    let token = format!(
        "{charset}username=\"{}\",realm=\"{}\",nonce=\"{}\",nc={nc},cnonce=\"{}\",digest-uri=\"{digest_uri}\",\
         maxbuf=65536,response={response},qop=auth",
        quote(user),
        quote(realm),
        quote(nonce),
        quote(cnonce)
    );
    Ok((token.into_bytes(), rspauth))
}

/// The bytes a name or password is hashed as: UTF-8 when the client said `charset=utf-8`, else
/// ISO 8859-1 when every character fits (Java's rule), else UTF-8.
fn encode(s: &str, utf8: bool) -> Vec<u8> {
    if !utf8 && s.chars().all(|c| (c as u32) < 256) {
        return s.chars().map(|c| c as u8).collect();
    }
    s.as_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// HEX(MD5(A1)) for md5-sess: A1 = MD5(user:realm:password) ":" nonce ":" cnonce [":" authzid].
fn ha1(user: &[u8], realm: &[u8], password: &[u8], nonce: &str, cnonce: &str, authzid: Option<&str>) -> String {
    let inner = Md5::new().chain_update(user).chain_update(b":").chain_update(realm).chain_update(b":");
    let inner = inner.chain_update(password).finalize();
    let mut a1 = Md5::new().chain_update(inner).chain_update(format!(":{nonce}:{cnonce}"));
    if let Some(z) = authzid {
        a1.update(format!(":{z}"));
    }
    hex(&a1.finalize())
}

/// HEX(MD5(HA1 ":" nonce ":" nc ":" cnonce ":" qop ":" HEX(MD5(A2)))).
fn response_value(ha1: &str, nonce: &str, nc: &str, cnonce: &str, qop: &str, a2: &str) -> String {
    let ha2 = hex(&Md5::digest(a2.as_bytes()));
    hex(&Md5::digest(format!("{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}").as_bytes()))
}

/// Parses `key=value` or `key="quoted \"value\""` directives separated by commas (RFC 2831's
/// `#rule`, empty elements allowed). Keys are case-insensitive; a repeated key is an error.
pub(crate) fn parse_directives(text: &str) -> Result<HashMap<String, String>, String> {
    let mut out = HashMap::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_ascii_whitespace() || *c == ',').is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && *c != ',') {
            key.push(c);
        }
        let key = key.trim().to_ascii_lowercase();
        if key.is_empty() || chars.next() != Some('=') {
            return Err(format!("malformed directive near {key:?}"));
        }
        while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quoted value for {key:?}")),
                    Some('"') => break,
                    Some('\\') => value.push(chars.next().ok_or("dangling escape")?),
                    Some(c) => value.push(c),
                }
            }
            while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
            if chars.peek().is_some_and(|c| *c != ',') {
                return Err(format!("junk after the quoted value of {key:?}"));
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                value.push(c);
            }
            value = value.trim().to_string();
        }
        if out.insert(key.clone(), value).is_some() {
            return Err(format!("duplicate directive {key:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn users() -> Arc<HashMap<String, String>> {
        Arc::new(HashMap::from([
            ("jaasuser".to_string(), "jaas_password".to_string()),
            ("super".to_string(), "super_secret".to_string()),
        ]))
    }

    const NONCE: &str = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/ab";

    /// What pure-sasl 0.6 (kazoo's client) sent for jaasuser/jaas_password to this challenge with
    /// cnonce 13436424411240122 (captured from `SASLClient.process`).
    const PURE_SASL_RESPONSE: &str = "qop=auth,realm=\"zk-sasl-md5\",username=\"jaasuser\",nonce=\"AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/ab\",cnonce=\"13436424411240122\",nc=00000001,digest-uri=\"zookeeper/zk-sasl-md5\",response=330455e077073586c2464d6282ba64c1";

    /// The client side answers the server side's challenge, and the server's rspauth is the
    /// one the client expects; a wrong password fails at the server.
    #[test]
    fn client_response_satisfies_the_server() {
        for (password, ok) in [("jaas_password", true), ("wrong", false)] {
            let mut server = DigestMd5::with_names(
                users(),
                NONCE.into(),
                "zk-quorum-sasl-md5",
                "zookeeper-quorum/zk-quorum-sasl-md5",
            );
            let Step::Continue(challenge) = server.step(b"") else { panic!("a challenge") };
            let (token, rspauth) =
                client_response(&challenge, "jaasuser", password, "c n\"once", "zookeeper-quorum/zk-quorum-sasl-md5")
                    .unwrap();
            match server.step(&token) {
                Step::Done { authentication_id, final_token } if ok => {
                    assert_eq!(authentication_id, "jaasuser");
                    assert_eq!(final_token.unwrap(), format!("rspauth={rspauth}").into_bytes());
                }
                Step::Fail(why) if !ok => assert!(why.contains("bad password"), "{why}"),
                other => panic!("{password}: {other:?}"),
            }
        }
        assert!(client_response(b"realm=\"r\",algorithm=md5-sess", "u", "p", "c", "x/y").is_err(), "no nonce");
    }

    fn challenged() -> DigestMd5 {
        let mut m = DigestMd5::new(users(), NONCE.into());
        let Step::Continue(c) = m.step(b"") else { panic!("no challenge") };
        assert_eq!(
            String::from_utf8(c).unwrap(),
            format!("realm=\"zk-sasl-md5\",nonce=\"{NONCE}\",charset=utf-8,algorithm=md5-sess")
        );
        m
    }

    fn fails(m: &mut DigestMd5, token: &[u8]) -> String {
        match m.step(token) {
            Step::Fail(why) => why,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn pure_sasl_exchange_succeeds_with_the_expected_rspauth() {
        let mut m = challenged();
        let step = m.step(PURE_SASL_RESPONSE.as_bytes());
        // rspauth computed independently (Python hashlib, A2 = ":" digest-uri).
        let expected = Step::Done {
            authentication_id: "jaasuser".into(),
            final_token: Some(b"rspauth=63bf3053dba2a7d58f9ed0d9f5034cd0".to_vec()),
        };
        assert_eq!(step, expected);
        // A packet after completion fails; replaying the response fails too.
        assert!(fails(&mut m, b"").contains("after the exchange"));
        assert!(fails(&mut m, PURE_SASL_RESPONSE.as_bytes()).contains("after the exchange"));
    }

    #[test]
    fn rfc_2831_example_verifies() {
        // RFC 2831 section 4 (its example uses md5-sess, qop auth, realm and uri of its own).
        let users = Arc::new(HashMap::from([("chris".to_string(), "secret".to_string())]));
        let mut m =
            DigestMd5::with_names(users, "OA6MG9tEQGm2hh".into(), "elwood.innosoft.com", "imap/elwood.innosoft.com");
        assert!(matches!(m.step(b""), Step::Continue(_)));
        let resp = "charset=utf-8,username=\"chris\",realm=\"elwood.innosoft.com\",nonce=\"OA6MG9tEQGm2hh\",nc=00000001,cnonce=\"OA6MHXh6VqTrRk\",digest-uri=\"imap/elwood.innosoft.com\",response=d388dad90d4bbd760a152321f2143af7,qop=auth";
        assert_eq!(
            m.step(resp.as_bytes()),
            Step::Done {
                authentication_id: "chris".into(),
                final_token: Some(b"rspauth=ea40f60335c427b5527b84dbabcdfffd".to_vec())
            }
        );
    }

    #[test]
    fn wrong_password_and_unknown_user_fail() {
        let mut m = challenged();
        let bad = PURE_SASL_RESPONSE.replace("330455e077073586c2464d6282ba64c1", "330455e077073586c2464d6282ba64c2");
        assert!(fails(&mut m, bad.as_bytes()).contains("bad password"));
        let mut m = challenged();
        let unknown = PURE_SASL_RESPONSE.replace("jaasuser", "baduser");
        assert!(fails(&mut m, unknown.as_bytes()).contains("no user"));
    }

    #[test]
    fn replayed_or_mismatched_responses_fail() {
        // The same response against another nonce (a replay into a new exchange) fails.
        let mut m = DigestMd5::new(users(), "another-nonce".into());
        m.step(b"");
        assert!(fails(&mut m, PURE_SASL_RESPONSE.as_bytes()).contains("nonce"));
        for (from, to, why) in [
            ("nc=00000001", "nc=00000002", "nonce count"),
            ("qop=auth,", "qop=auth-conf,", "qop"),
            ("zookeeper/zk-sasl-md5", "zookeeper/elsewhere", "digest-uri"),
            ("realm=\"zk-sasl-md5\"", "realm=\"other\"", "realm"),
            ("nc=00000001", "nc=00000001,nc=00000001", "duplicate"),
            (",cnonce=\"13436424411240122\"", "", "cnonce"),
        ] {
            let mut m = challenged();
            let token = PURE_SASL_RESPONSE.replacen(from, to, 1);
            let got = fails(&mut m, token.as_bytes());
            assert!(got.contains(why), "{from} -> {to}: {got}");
        }
    }

    #[test]
    fn malformed_tokens_fail_cleanly() {
        let mut m = DigestMd5::new(users(), NONCE.into());
        assert!(fails(&mut m, b"initial").contains("first token"));
        for token in [
            &b"\xff\xfe"[..],
            b"username",
            b"username=\"unterminated",
            b"username=\"a\"junk",
            b"=value",
            b"username=\"a\\",
            b"",
            b",,,",
        ] {
            let mut m = challenged();
            assert!(matches!(m.step(token), Step::Fail(_)), "{token:?}");
        }
        // Arbitrary bytes never panic.
        let mut seed = 0x1234_5678_u32;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    b"=,\"\\ aeznoc1"[(seed >> 16) as usize % 12]
                })
                .collect();
            let mut m = challenged();
            assert!(matches!(m.step(&bytes), Step::Fail(_)));
        }
    }

    #[test]
    fn directives_parse_quoted_escaped_and_spaced_values() {
        let d = parse_directives(" a = 1 , B=\"x\\\"y,z\" ,, c=\"\"").unwrap();
        assert_eq!(d.get("a").map(String::as_str), Some("1"));
        assert_eq!(d.get("b").map(String::as_str), Some("x\"y,z"));
        assert_eq!(d.get("c").map(String::as_str), Some(""));
    }
}
