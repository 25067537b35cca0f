//! SASL on the client port (opcode 102) with DIGEST-MD5 from a JAAS file: a real client
//! (`zookeeper-client`'s DIGEST-MD5) authenticating, wrong passwords and unknown users refused
//! without harm to others, the `sasl` ACL scheme, `sessionRequireClientSASLAuth`, and raw-socket
//! exchanges with garbage and replayed tokens (reference: zookeeper-operations.md section 4).

mod common;
mod oracle;

use std::time::Duration;

use common::*;
use md5::{Digest as _, Md5};
use warden_proto::{ErrorCode, Request, Response, SaslRequest};
use warden_server::Config;
use zk::{Acl, Acls, AuthId, CreateMode, Error, Permission};
use zookeeper_client as zk;

const JAAS: &str = r#"
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_super="super_secret"
    user_jaasuser="jaas_password";
};
"#;

/// A server with kazoo's harness settings: the JAAS file above and the SASL provider.
async fn sasl_server(tweak: impl FnOnce(&mut Config)) -> (TestServer, tempfile::TempDir) {
    let jaas_dir = tempfile::tempdir().unwrap();
    let jaas = jaas_dir.path().join("jaas.conf");
    std::fs::write(&jaas, JAAS).unwrap();
    let srv = TestServer::start_with(|c| {
        c.sasl.jaas_file = Some(jaas);
        c.auth_providers = vec!["org.apache.zookeeper.server.auth.SASLAuthenticationProvider".into()];
        tweak(c);
    })
    .await;
    (srv, jaas_dir)
}

async fn sasl_client(srv: &TestServer, user: &'static str, password: &'static str) -> Result<zk::Client, Error> {
    let addr = srv.connect_string();
    let connect = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(6))
        .with_sasl(zk::SaslOptions::digest_md5(user, password))
        .connect(&addr);
    within("SASL connect", connect).await
}

fn sasl_acl(user: &str) -> Vec<Acl> {
    vec![Acl::new(Permission::ALL, AuthId::new("sasl", user))]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_md5_authenticates_as_the_jaas_user_and_sasl_acls_work() {
    let (srv, _jaas) = sasl_server(|_| {}).await;
    let client = sasl_client(&srv, "jaasuser", "jaas_password").await.expect("SASL client connects");
    let who = client.list_auth_users().await.unwrap();
    let ids: Vec<String> = who.iter().map(|u| format!("{}:{}", u.scheme(), u.user())).collect();
    assert!(ids.contains(&"sasl:jaasuser".to_string()), "{ids:?}");
    let acl = sasl_acl("jaasuser");
    client.create("/1", b"v", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();
    assert_eq!(client.get_data("/1").await.unwrap().0, b"v");
    let anon = srv.client().await;
    assert_eq!(anon.get_data("/1").await.unwrap_err(), Error::NoAuth, "unauthenticated client");
    // A client authenticated as another SASL user is refused too.
    let other = sasl_client(&srv, "super", "super_secret").await.expect("super connects");
    assert_eq!(
        other.create("/2", b"", &CreateMode::Persistent.with_acls(Acls::new(&sasl_acl("nobody")))).await.map(|_| ()),
        Ok(())
    );
    assert_eq!(client.get_data("/2").await.unwrap_err(), Error::NoAuth, "jaasuser may not read nobody's node");
    assert!(other.get_data("/2").await.is_ok(), "a SASL user named super matches every sasl entry");
    client.delete("/1", None).await.unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_and_unknown_user_fail_and_others_are_still_served() {
    let (srv, _jaas) = sasl_server(|_| {}).await;
    let bad = sasl_client(&srv, "jaasuser", "wrong").await;
    assert!(bad.is_err(), "wrong password must not connect: {:?}", bad.map(|_| ()));
    let unknown = sasl_client(&srv, "baduser", "badpassword").await;
    assert!(unknown.is_err(), "unknown user must not connect: {:?}", unknown.map(|_| ()));
    let ok = sasl_client(&srv, "jaasuser", "jaas_password").await.expect("the right password still works");
    ok.create("/still", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.unwrap();
    srv.client().await.get_data("/still").await.unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_require_client_sasl_auth_closes_unauthenticated_connections() {
    let (srv, _jaas) = sasl_server(|c| c.session_require_client_sasl_auth = true).await;
    let mut raw = RawClient::new_session(srv.addr, 10_000).await;
    assert_ne!(raw.session_id, 0, "the session is still created");
    let (hdr, _) = raw.call(&Request::Exists(path_watch("/", false))).await;
    assert_eq!((hdr.err, hdr.zxid), (ErrorCode::SessionClosedRequireSaslAuth.code(), 0));
    raw.expect_closed().await;
    // A SASL client is served.
    let ok = sasl_client(&srv, "jaasuser", "jaas_password").await.expect("SASL client connects");
    ok.create("/enforced", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.unwrap();
    // A failed exchange is -124 when SASL is enforced.
    let mut raw = RawClient::new_session(srv.addr, 10_000).await;
    let (hdr, _) = raw.call(&sasl(b"not empty")).await;
    assert_eq!(hdr.err, ErrorCode::SessionClosedRequireSaslAuth.code());
    raw.expect_closed().await;
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforcing_a_scheme_without_its_provider_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(dir.path());
    cfg.session_require_client_sasl_auth = true;
    let err = warden_server::Server::start(cfg).await.err().expect("start-up must fail");
    assert!(err.to_string().contains("no authentication provider for scheme \"sasl\""), "{err:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_acls_are_invalid_without_the_provider() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let acl = sasl_acl("jaasuser");
    assert_eq!(
        c.create("/s", b"", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap_err(),
        Error::InvalidAcl
    );
    srv.stop().await;
}

fn sasl(token: &[u8]) -> Request {
    Request::Sasl(SaslRequest { token: token.to_vec() })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A client's DIGEST-MD5 response to `challenge` (RFC 2831, md5-sess, qop auth), written here
/// independently of the server's code.
fn digest_response(challenge: &[u8], user: &str, password: &str, cnonce: &str) -> Vec<u8> {
    let text = String::from_utf8(challenge.to_vec()).unwrap();
    let nonce = text.split("nonce=\"").nth(1).unwrap().split('"').next().unwrap();
    let uri = "zookeeper/zk-sasl-md5";
    let inner = Md5::digest(format!("{user}:zk-sasl-md5:{password}"));
    let mut a1 = inner.to_vec();
    a1.extend_from_slice(format!(":{nonce}:{cnonce}").as_bytes());
    let ha1 = hex(&Md5::digest(&a1));
    let ha2 = hex(&Md5::digest(format!("AUTHENTICATE:{uri}")));
    let resp = hex(&Md5::digest(format!("{ha1}:{nonce}:00000001:{cnonce}:auth:{ha2}")));
    format!(
        "username=\"{user}\",realm=\"zk-sasl-md5\",nonce=\"{nonce}\",cnonce=\"{cnonce}\",nc=00000001,qop=auth,digest-uri=\"{uri}\",response={resp}"
    )
    .into_bytes()
}

fn token(body: Option<Response>) -> Option<Vec<u8>> {
    match body {
        Some(Response::Sasl { token }) => token,
        other => panic!("not a SASL reply: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_exchanges_garbage_and_replayed_tokens() {
    let (srv, _jaas) = sasl_server(|_| {}).await;
    // A whole exchange by hand: challenge, response, rspauth; the reply header's zxid is 0.
    let mut raw = RawClient::new_session(srv.addr, 10_000).await;
    let (hdr, body) = raw.call(&sasl(b"")).await;
    assert_eq!((hdr.err, hdr.zxid), (0, 0));
    let challenge = token(body).expect("a challenge");
    let text = String::from_utf8(challenge.clone()).unwrap();
    assert!(
        text.starts_with("realm=\"zk-sasl-md5\",nonce=\"") && text.ends_with("\",charset=utf-8,algorithm=md5-sess")
    );
    let response = digest_response(&challenge, "jaasuser", "jaas_password", "abcdef");
    let (hdr, body) = raw.call(&sasl(&response)).await;
    assert_eq!(hdr.err, 0);
    let fin = String::from_utf8(token(body).expect("rspauth")).unwrap();
    assert!(fin.starts_with("rspauth=") && fin.len() == 8 + 32, "{fin}");
    let (_, body) = raw.call(&Request::WhoAmI).await;
    let Some(Response::WhoAmI(who)) = body else { panic!() };
    assert!(who.iter().any(|c| c.auth_scheme == "sasl" && c.user == "jaasuser"), "{who:?}");
    // The same response again, after completion: AUTHFAILED and the connection closes.
    let (hdr, _) = raw.call(&sasl(&response)).await;
    assert_eq!(hdr.err, ErrorCode::AuthFailed.code());
    raw.expect_closed().await;

    // The old response replayed into a new exchange (another nonce) fails.
    let mut raw = RawClient::new_session(srv.addr, 10_000).await;
    raw.call(&sasl(b"")).await;
    let (hdr, _) = raw.call(&sasl(&response)).await;
    assert_eq!(hdr.err, ErrorCode::AuthFailed.code());
    raw.expect_closed().await;

    // Garbage: a non-empty first token, binary junk, a half-quoted directive.
    for (first, second) in [(&b"hello"[..], None), (b"", Some(&b"\xff\x00\xfe"[..])), (b"", Some(b"username=\"x"))] {
        let mut raw = RawClient::new_session(srv.addr, 10_000).await;
        let (hdr, _) = raw.call(&sasl(first)).await;
        if let Some(second) = second {
            assert_eq!(hdr.err, 0);
            let (hdr, _) = raw.call(&sasl(second)).await;
            assert_eq!(hdr.err, ErrorCode::AuthFailed.code());
        } else {
            assert_eq!(hdr.err, ErrorCode::AuthFailed.code());
        }
        raw.expect_closed().await;
    }
    // The server still serves everyone else.
    let c = srv.client().await;
    c.create("/after", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_jaas_server_section_sasl_gets_a_null_token_and_the_connection_stays() {
    let srv = TestServer::start().await;
    let mut raw = RawClient::new_session(srv.addr, 10_000).await;
    let (hdr, body) = raw.call(&sasl(b"")).await;
    assert_eq!((hdr.err, token(body)), (0, None));
    assert_eq!(raw.ping().await.err, 0, "the connection is kept");
    srv.stop().await;
}

/// Runs Debian's ZooKeeper 3.8 Java CLI (`ZooKeeperMain`) with a JAAS `Client` section for
/// `user`/`password` against `addr`, one command; returns its stdout and stderr.
fn java_cli(
    addr: std::net::SocketAddr,
    jaas_dir: &std::path::Path,
    user: &str,
    password: &str,
    cmd: &[&str],
) -> String {
    let client_jaas = jaas_dir.join(format!("client-{user}.conf"));
    std::fs::write(
        &client_jaas,
        format!("Client {{\n org.apache.zookeeper.server.auth.DigestLoginModule required username=\"{user}\" password=\"{password}\";\n}};\n"),
    )
    .unwrap();
    let out = std::process::Command::new("timeout")
        .args(["60", "java", "-cp", &oracle::zk_classpath()])
        .arg(format!("-Djava.security.auth.login.config={}", client_jaas.display()))
        .arg("org.apache.zookeeper.ZooKeeperMain")
        .args(["-server", &addr.to_string()])
        .args(cmd)
        .output()
        .unwrap_or_else(|e| panic!("{}: spawning java: {e}", oracle::MISSING));
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_java_client_authenticates_with_digest_md5() {
    let (srv, jaas) = sasl_server(|_| {}).await;
    let addr = srv.addr;
    let dir = jaas.path().to_path_buf();
    let created = tokio::task::spawn_blocking(move || {
        java_cli(addr, &dir, "jaasuser", "jaas_password", &["create", "/java", "from-java", "sasl:jaasuser:cdrwa"])
    })
    .await
    .unwrap();
    assert!(created.contains("Created /java"), "java create: {created}");
    // The ACL names the SASL identity the Java client authenticated as.
    let anon = srv.client().await;
    assert_eq!(anon.get_acl("/java").await.unwrap_err(), Error::NoAuth);
    assert_eq!(anon.get_data("/java").await.unwrap_err(), Error::NoAuth);
    let rust = sasl_client(&srv, "jaasuser", "jaas_password").await.unwrap();
    let (acl, _) = rust.get_acl("/java").await.unwrap();
    assert_eq!(acl, sasl_acl("jaasuser"));
    assert_eq!(rust.get_data("/java").await.unwrap().0, b"from-java");
    // The Java client reads it back as that identity.
    let dir = jaas.path().to_path_buf();
    let read =
        tokio::task::spawn_blocking(move || java_cli(addr, &dir, "jaasuser", "jaas_password", &["get", "/java"]))
            .await
            .unwrap();
    assert!(read.contains("from-java"), "java get: {read}");
    // A Java client with a wrong password does not get in.
    let dir = jaas.path().to_path_buf();
    let denied =
        tokio::task::spawn_blocking(move || java_cli(addr, &dir, "jaasuser", "nope", &["get", "/java"])).await.unwrap();
    assert!(!denied.contains("from-java"), "wrong password must not read: {denied}");
    srv.stop().await;
}
