//! TLS on the client port, configured as in ZooKeeper (`secureClientPort`, `client.portUnification`,
//! `ssl.*`): key and trust stores in PEM, PKCS12 and JKS made by scripts/make-test-certs (openssl
//! and keytool), `ssl.clientAuth` need/want/none, x509 authentication and its superuser, reload of
//! replaced store files, bad input on the TLS ports, and Debian's ZooKeeper 3.8 Java client over
//! TLS (reference: zookeeper-operations.md section 3).

mod common;
mod oracle;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use warden_server::Config;
use zk::{Acl, AuthId, CreateMode, Error, Permission};
use zookeeper_client as zk;

const CLIENT_DN: &str = "CN=client,OU=tests,O=Warden";

fn cert(name: &str) -> String {
    test_certs().join(name).display().to_string()
}

fn read(name: &str) -> String {
    std::fs::read_to_string(test_certs().join(name)).unwrap()
}

/// The `ssl.*` keys for a key store and trust store (file names in the certificate directory).
fn ssl(c: &mut Config, key_store: &str, trust_store: &str, extra: &[(&str, &str)]) {
    c.secure_client_port = Some(0);
    c.ssl.insert("ssl.keyStore.location".into(), cert(key_store));
    c.ssl.insert("ssl.keyStore.password".into(), "testpass".into());
    c.ssl.insert("ssl.trustStore.location".into(), cert(trust_store));
    c.ssl.insert("ssl.trustStore.password".into(), "testpass".into());
    for (k, v) in extra {
        c.ssl.insert(k.to_string(), v.to_string());
    }
}

fn tls_options(ca: &str, identity: Option<&str>) -> zk::TlsOptions {
    let o = zk::TlsOptions::new().with_pem_ca(&read(ca)).unwrap();
    match identity {
        Some(name) => o.with_pem_identity(&read(&format!("{name}.pem")), &read(&format!("{name}-key.pem"))).unwrap(),
        None => o,
    }
}

async fn tls_client(addr: SocketAddr, ca: &str, identity: Option<&str>) -> Result<zk::Client, Error> {
    let server = addr.to_string();
    let connect = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(6))
        .with_tls(tls_options(ca, identity))
        .with_fail_eagerly()
        .secure_connect(&server);
    within("TLS connect", connect).await
}

async fn ids(c: &zk::Client) -> Vec<String> {
    c.list_auth_users().await.unwrap().iter().map(|u| format!("{}:{}", u.scheme(), u.user())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pem_pkcs12_and_jks_stores_serve_tls_clients_with_their_x509_id() {
    for (key, trust) in [
        ("server-bundle.pem", "truststore.pem"),
        ("server-bundle-enc.pem", "truststore.pem"),
        ("server.p12", "truststore.p12"),
        ("server.jks", "truststore.jks"),
    ] {
        let srv = TestServer::start_with(|c| ssl(c, key, trust, &[])).await;
        let secure = srv.secure_addr.expect("a secure port");
        let c = tls_client(secure, "ca.pem", Some("client")).await.unwrap_or_else(|e| panic!("{key}: {e}"));
        c.create("/t", b"over tls", &CreateMode::Persistent.with_acls(zk::Acls::anyone_all())).await.unwrap();
        assert_eq!(c.get_data("/t").await.unwrap().0, b"over tls", "{key}");
        let who = ids(&c).await;
        assert!(who.contains(&format!("x509:{CLIENT_DN}")), "{key}: {who:?}");
        // The plain port still serves plaintext clients.
        assert_eq!(srv.client().await.get_data("/t").await.unwrap().0, b"over tls");
        srv.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_auth_need_want_and_none() {
    let need = TestServer::start_with(|c| ssl(c, "server.p12", "truststore.p12", &[])).await;
    let addr = need.secure_addr.unwrap();
    assert!(tls_client(addr, "ca.pem", None).await.is_err(), "need: a client without a certificate is refused");
    assert!(tls_client(addr, "ca.pem", Some("client")).await.is_ok());
    need.stop().await;

    let want = TestServer::start_with(|c| ssl(c, "server.p12", "truststore.p12", &[("ssl.clientAuth", "want")])).await;
    let addr = want.secure_addr.unwrap();
    let anon = tls_client(addr, "ca.pem", None).await.expect("want: no certificate is fine");
    assert!(!ids(&anon).await.iter().any(|i| i.starts_with("x509:")));
    let named = tls_client(addr, "ca.pem", Some("client")).await.unwrap();
    assert!(ids(&named).await.contains(&format!("x509:{CLIENT_DN}")));
    assert!(tls_client(addr, "ca.pem", Some("other")).await.is_err(), "want: a certificate from another CA is refused");
    want.stop().await;

    let none = TestServer::start_with(|c| ssl(c, "server.p12", "truststore.p12", &[("ssl.clientAuth", "none")])).await;
    let c = tls_client(none.secure_addr.unwrap(), "ca.pem", Some("client")).await.unwrap();
    assert!(!ids(&c).await.iter().any(|i| i.starts_with("x509:")), "none: no certificate is asked for");
    none.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509_acls_and_the_x509_superuser() {
    let srv = TestServer::start_with(|c| {
        ssl(c, "server.jks", "truststore.jks", &[]);
        c.x509_super_user = Some("CN=admin,O=Warden".into());
    })
    .await;
    let addr = srv.secure_addr.unwrap();
    let owner = tls_client(addr, "ca.pem", Some("client")).await.unwrap();
    let acl = vec![Acl::new(Permission::ALL, AuthId::new("x509", CLIENT_DN))];
    owner.create("/mine", b"secret", &CreateMode::Persistent.with_acls(zk::Acls::new(&acl))).await.unwrap();
    assert_eq!(owner.get_data("/mine").await.unwrap().0, b"secret");
    assert_eq!(srv.client().await.get_data("/mine").await.unwrap_err(), Error::NoAuth, "a plaintext client");
    let admin = tls_client(addr, "ca.pem", Some("super")).await.unwrap();
    let who = ids(&admin).await;
    // whoAmI names no user for `super` (it has no provider), as ZooKeeper.
    assert!(who.contains(&"x509:CN=admin,O=Warden".to_string()) && who.contains(&"super:".to_string()), "{who:?}");
    assert_eq!(admin.get_data("/mine").await.unwrap().0, b"secret", "the superuser reads every node");
    // `auth` ACLs expand to the x509 id.
    let auth = vec![Acl::new(Permission::ALL, AuthId::new("auth", ""))];
    owner.create("/auth", b"", &CreateMode::Persistent.with_acls(zk::Acls::new(&auth))).await.unwrap();
    let (acl, _) = owner.get_acl("/auth").await.unwrap();
    assert_eq!(acl[0].scheme(), "x509");
    assert_eq!(acl[0].id(), CLIENT_DN);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_unification_takes_plaintext_and_tls_on_one_port() {
    let srv = TestServer::start_with(|c| {
        ssl(c, "server.p12", "truststore.p12", &[]);
        c.secure_client_port = None;
        c.client_port_unification = true;
    })
    .await;
    assert!(srv.secure_addr.is_none());
    let tls = tls_client(srv.addr, "ca.pem", Some("client")).await.expect("TLS on the plain port");
    tls.create("/u", b"1", &CreateMode::Persistent.with_acls(zk::Acls::anyone_all())).await.unwrap();
    let plain = srv.client().await;
    assert_eq!(plain.get_data("/u").await.unwrap().0, b"1");
    assert!(ids(&tls).await.contains(&format!("x509:{CLIENT_DN}")));
    assert_eq!(four_letter(srv.addr, "ruok").await, "imok");
    srv.stop().await;
}

/// Sends `bytes` to `addr` and reads until the server closes; returns what it sent back, or
/// panics if the connection is still open after `limit`.
fn refused(addr: SocketAddr, bytes: &[u8], limit: Duration) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(limit)).unwrap();
    let _ = s.write_all(bytes);
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => got,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => got,
        Err(e) => panic!("{bytes:02x?}: the server did not close the connection within {limit:?}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_on_the_tls_port_is_refused_and_costs_nothing_else() {
    let srv = TestServer::start_with(|c| {
        ssl(c, "server.p12", "truststore.p12", &[("ssl.handshakeDetectionTimeoutMillis", "500")])
    })
    .await;
    let addr = srv.secure_addr.unwrap();
    let good = tls_client(addr, "ca.pem", Some("client")).await.unwrap();
    good.create("/alive", b"yes", &CreateMode::Persistent.with_acls(zk::Acls::anyone_all())).await.unwrap();

    let limit = Duration::from_secs(5);
    tokio::task::spawn_blocking(move || {
        // A plaintext ConnectRequest (and a four-letter word) to the TLS-only port: no answer in
        // the clear, and the connection is closed.
        let connect = warden_proto::ConnectRequest::new_session(10_000);
        let got = refused(addr, &warden_proto::encode_frame(&connect), limit);
        assert!(!got.windows(4).any(|w| w == [0, 0, 0, 0x24]), "a plaintext ConnectResponse came back: {got:02x?}");
        assert!(!String::from_utf8_lossy(&refused(addr, b"ruok", limit)).contains("imok"));
        // Garbage that looks like a handshake record, and a truncated ClientHello.
        let _ = refused(addr, &[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5], limit);
        let _ = refused(addr, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03], limit);
        let mut noise = vec![0x16u8];
        noise.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        let _ = refused(addr, &noise, limit);
    })
    .await
    .unwrap();

    // A client that stalls mid-handshake is dropped after the handshake timeout (500 ms).
    let stalled = std::time::Instant::now();
    tokio::task::spawn_blocking(move || refused(addr, &[0x16, 0x03, 0x01], Duration::from_secs(5))).await.unwrap();
    assert!(stalled.elapsed() < Duration::from_secs(4), "stalled handshake held for {:?}", stalled.elapsed());

    // Certificates the trust store does not vouch for, or no longer valid.
    assert!(tls_client(addr, "ca.pem", Some("expired")).await.is_err(), "an expired certificate");
    assert!(tls_client(addr, "ca.pem", Some("other")).await.is_err(), "a certificate from another CA");
    assert!(tls_client(addr, "ca.pem", None).await.is_err(), "no certificate while clientAuth is need");
    // A client that does not trust the server's CA gives up on its own side.
    assert!(tls_client(addr, "other-ca.pem", Some("client")).await.is_err());

    // Everyone else was served throughout.
    assert_eq!(good.get_data("/alive").await.unwrap().0, b"yes");
    assert!(tls_client(addr, "ca.pem", Some("client")).await.is_ok());
    srv.stop().await;
}

/// Debian's ZooKeeper Java CLI over TLS with a PEM key store (or none) and `-D` extras; one command.
fn java_pem(addr: SocketAddr, key_store: Option<&str>, extra: &[&str], cmd: &[&str]) -> String {
    let mut java = std::process::Command::new("timeout");
    java.args(["60", "java", "-cp", &oracle::zk_classpath()])
        .arg("-Dzookeeper.client.secure=true")
        .arg("-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty")
        .arg(format!("-Dzookeeper.ssl.trustStore.location={}", cert("truststore.pem")))
        .args(extra);
    if let Some(k) = key_store {
        java.arg(format!("-Dzookeeper.ssl.keyStore.location={}", cert(k)));
    }
    java.arg("org.apache.zookeeper.ZooKeeperMain").args(["-server", &addr.to_string()]).args(cmd);
    let out = java.output().unwrap_or_else(|e| panic!("{}: spawning java: {e}", oracle::MISSING));
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Java accepts X.509 v1 certificates (kazoo's harness makes its certificates so); webpki alone
/// would not. Java clients, since rustls clients refuse v1 certificates of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_1_certificates_with_the_java_client() {
    // A v1 client certificate from the trusted CA: verified, and its subject is the x509 id.
    let srv = TestServer::start_with(|c| ssl(c, "server.p12", "truststore.pem", &[])).await;
    let addr = srv.secure_addr.unwrap();
    let java = |key: &'static str, cmd: &'static [&'static str]| {
        tokio::task::spawn_blocking(move || java_pem(addr, Some(key), &[], cmd))
    };
    let out = java("v1-client-bundle.pem", &["create", "/v1", "ok", "auth::cdrwa"]).await.unwrap();
    assert!(out.contains("Created /v1"), "a v1 client certificate: {out}");
    let out = java("v1-client-bundle.pem", &["get", "/v1"]).await.unwrap();
    assert!(out.lines().any(|l| l.trim() == "ok"), "the v1 certificate's x509 id reads its node: {out}");
    assert_eq!(srv.client().await.get_data("/v1").await.unwrap_err(), Error::NoAuth);
    // The same name from a CA the server does not trust: refused.
    let out = java("v1-other-bundle.pem", &["create", "/other", "x"]).await.unwrap();
    assert!(!out.contains("Created /other"), "a v1 certificate from another CA: {out}");
    assert!(srv.client().await.check_stat("/other").await.unwrap().is_none());
    srv.stop().await;

    // A v1 server certificate: the Java client connects (no subjectAltName for 127.0.0.1 in v1).
    let srv = TestServer::start_with(|c| {
        ssl(c, "v1-server-bundle.pem", "truststore.pem", &[("ssl.clientAuth", "want")]);
        c.ssl.insert("ssl.keyStore.password".into(), String::new());
    })
    .await;
    let addr = srv.secure_addr.unwrap();
    let out = tokio::task::spawn_blocking(move || {
        java_pem(addr, None, &["-Dzookeeper.ssl.hostnameVerification=false"], &["create", "/v1", "ok"])
    })
    .await
    .unwrap();
    assert!(out.contains("Created /v1"), "java against a v1 server certificate: {out}");
    srv.stop().await;
    // A key that is not the certificate's is refused when the configuration is built.
    let dir = tempfile::tempdir().unwrap();
    let mismatched = dir.path().join("mismatched.pem");
    std::fs::write(&mismatched, read("v1-client-key.pem") + &read("v1-server.pem")).unwrap();
    let mut cfg = Config::default();
    ssl(&mut cfg, "v1-server-bundle.pem", "truststore.pem", &[]);
    cfg.ssl.insert("ssl.keyStore.location".into(), mismatched.display().to_string());
    let err = cfg.client_tls().unwrap().unwrap().server_config().unwrap_err();
    assert!(err.to_string().contains("does not belong"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_over_the_outstanding_limit_are_refused() {
    let srv = TestServer::start_with(|c| {
        ssl(c, "server.pem", "truststore.pem", &[("ssl.keyStore.location", &cert("server-bundle.pem"))]);
        c.ssl.insert("netty.server.outstandingHandshake.limit".into(), "1".into());
        c.ssl.insert("ssl.handshakeDetectionTimeoutMillis".into(), "30000".into());
    })
    .await;
    let addr = srv.secure_addr.unwrap();
    let good = tls_client(addr, "ca.pem", Some("client")).await.unwrap();
    // One connection sits in its handshake (a record header, then nothing): the one slot is taken.
    let mut staller = std::net::TcpStream::connect(addr).unwrap();
    staller.write_all(&[0x16, 0x03, 0x01]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused_at = std::time::Instant::now();
    assert!(tls_client(addr, "ca.pem", Some("client")).await.is_err(), "a second handshake while one is in flight");
    assert!(refused_at.elapsed() < Duration::from_secs(5), "refused at once, not after a timeout");
    // Connections past their handshake, and the plain port, are not affected.
    assert!(good.get_data("/").await.is_ok());
    assert!(srv.client().await.get_data("/").await.is_ok());
    // The stalled client goes away: its slot is free again.
    drop(staller);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = tls_client(addr, "ca.pem", Some("client")).await.expect("a handshake once the slot is free");
    assert!(ids(&again).await.contains(&format!("x509:{CLIENT_DN}")));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_store_files_are_used_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key_store = dir.path().join("server.pem");
    std::fs::copy(test_certs().join("server-bundle.pem"), &key_store).unwrap();
    let trust = dir.path().join("trust.pem");
    std::fs::write(&trust, read("ca.pem") + &read("other-ca.pem")).unwrap();
    let srv = TestServer::start_with(|c| {
        c.secure_client_port = Some(0);
        c.ssl.insert("ssl.keyStore.location".into(), key_store.display().to_string());
        c.ssl.insert("ssl.trustStore.location".into(), trust.display().to_string());
    })
    .await;
    let addr = srv.secure_addr.unwrap();
    assert!(tls_client(addr, "ca.pem", Some("client")).await.is_ok());
    assert!(tls_client(addr, "other-ca.pem", Some("client")).await.is_err(), "the old certificate is from ca");

    // Swap in a certificate from the other CA (written aside, then renamed, as tools do).
    let next = dir.path().join("next.pem");
    std::fs::copy(test_certs().join("other-server-bundle.pem"), &next).unwrap();
    std::fs::rename(&next, &key_store).unwrap();
    eventually("the new server certificate is served", || async {
        tls_client(addr, "other-ca.pem", Some("client")).await.ok().map(|_| ())
    })
    .await;
    assert!(tls_client(addr, "ca.pem", Some("client")).await.is_err());

    // A broken replacement keeps the last good configuration.
    std::fs::write(&key_store, "not a key store").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(tls_client(addr, "other-ca.pem", Some("client")).await.is_ok());
    srv.stop().await;
}

/// Debian's ZooKeeper 3.8 Java CLI over TLS (Netty) with the given client stores; one command.
fn java_cli(addr: SocketAddr, key_store: &str, trust_store: &str, kind: &str, cmd: &[&str]) -> String {
    let mut java = std::process::Command::new("timeout");
    java.args(["60", "java", "-cp", &oracle::zk_classpath()])
        .arg("-Dzookeeper.client.secure=true")
        .arg("-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty")
        .arg(format!("-Dzookeeper.ssl.keyStore.location={}", cert(key_store)))
        // ZooKeeper reads a PEM key as encrypted when a password is given: none for the plain one.
        .arg(format!(
            "-Dzookeeper.ssl.keyStore.password={}",
            if key_store.ends_with("-bundle.pem") { "" } else { "testpass" }
        ))
        .arg(format!("-Dzookeeper.ssl.keyStore.type={kind}"))
        .arg(format!("-Dzookeeper.ssl.trustStore.location={}", cert(trust_store)))
        .arg("-Dzookeeper.ssl.trustStore.password=testpass")
        .arg(format!("-Dzookeeper.ssl.trustStore.type={kind}"))
        .arg("org.apache.zookeeper.ZooKeeperMain")
        .args(["-server", &addr.to_string()])
        .args(cmd);
    let out = java.output().unwrap_or_else(|e| panic!("{}: spawning java: {e}", oracle::MISSING));
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_java_client_connects_over_tls_with_pem_pkcs12_and_jks_stores() {
    let srv = TestServer::start_with(|c| ssl(c, "server.jks", "truststore.jks", &[("ssl.clientAuth", "want")])).await;
    let addr = srv.secure_addr.unwrap();
    let stores = [
        ("client-bundle.pem", "truststore.pem", "PEM"),
        ("client-bundle-enc.pem", "truststore.pem", "PEM"),
        ("client.p12", "truststore.p12", "PKCS12"),
        ("client.jks", "truststore.jks", "JKS"),
    ];
    for (key, trust, kind) in stores {
        let path = format!("/java-{}{}", kind.to_lowercase(), if key.contains("-enc") { "-enc" } else { "" });
        let create = tokio::task::spawn_blocking({
            let path = path.clone();
            move || java_cli(addr, key, trust, kind, &["create", &path, "from-java", "auth::cdrwa"])
        })
        .await
        .unwrap();
        assert!(create.contains(&format!("Created {path}")), "{kind} create: {create}");
        let get = tokio::task::spawn_blocking({
            let path = path.clone();
            move || java_cli(addr, key, trust, kind, &["get", &path])
        })
        .await
        .unwrap();
        assert!(get.contains("from-java"), "{kind} get: {get}");
    }
    // The `auth` ACL the Java client set became its certificate's id: a plaintext client may not read.
    let plain = srv.client().await;
    assert_eq!(plain.get_data("/java-jks").await.unwrap_err(), Error::NoAuth);
    let owner = tls_client(addr, "ca.pem", Some("client")).await.unwrap();
    let (acl, _) = owner.get_acl("/java-pem").await.unwrap();
    assert_eq!((acl[0].scheme(), acl[0].id()), ("x509", CLIENT_DN));
    // Without a client certificate (clientAuth want), the Java client connects with a trust store alone.
    let anon = tokio::task::spawn_blocking(move || {
        let mut java = std::process::Command::new("timeout");
        java.args(["60", "java", "-cp", &oracle::zk_classpath()])
            .arg("-Dzookeeper.client.secure=true")
            .arg("-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty")
            .arg(format!("-Dzookeeper.ssl.trustStore.location={}", cert("truststore.p12")))
            .arg("-Dzookeeper.ssl.trustStore.password=testpass")
            .arg("org.apache.zookeeper.ZooKeeperMain")
            .args(["-server", &addr.to_string(), "ls", "/"]);
        let out = java.output().unwrap();
        format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
    .await
    .unwrap();
    assert!(anon.contains("java-pem"), "java without a client certificate: {anon}");
    srv.stop().await;
}

/// `openssl s_client` to `addr` trusting the CA, presenting certificate `name`, sending `ruok`;
/// its output. (rustls clients cannot present or accept a v1 certificate.)
fn s_client(addr: SocketAddr, name: &str) -> String {
    let mut child = std::process::Command::new("openssl")
        .args(["s_client", "-ign_eof", "-connect", &addr.to_string(), "-CAfile", &cert("ca.pem")])
        .args(["-cert", &cert(&format!("{name}.pem")), "-key", &cert(&format!("{name}-key.pem"))])
        .arg("-verify_return_error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    child.stdin.take().unwrap().write_all(b"ruok").unwrap();
    let out = child.wait_with_output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// X.509 version 1 certificates (kazoo's harness makes them; Java accepts them, webpki does not):
/// the server serves its own, and a v1 client certificate from a trusted CA is accepted over TLS
/// 1.3, while one from another CA is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_1_certificates_work_as_in_java() {
    let srv = TestServer::start_with(|c| ssl(c, "v1-server-bundle.pem", "truststore.pem", &[])).await;
    let addr = srv.secure_addr.unwrap();
    let out = tokio::task::spawn_blocking(move || s_client(addr, "v1-client")).await.unwrap();
    assert!(out.contains("Verify return code: 0 (ok)") && out.contains("imok"), "openssl s_client:\n{out}");
    let out = tokio::task::spawn_blocking(move || s_client(addr, "v1-other")).await.unwrap();
    assert!(!out.contains("imok"), "a v1 certificate from another CA was accepted:\n{out}");
    let out = tokio::task::spawn_blocking(move || s_client(addr, "client")).await.unwrap();
    assert!(out.contains("imok"), "a v3 client certificate next to them:\n{out}");
    srv.stop().await;
}
