//! SASL GSSAPI against a real MIT KDC (`scripts/krb5-test-realm`, realm KAZOOTEST.ORG on a
//! loopback port this test picks): the mechanism driven by an RFC 4752 client made of
//! libgssapi calls, then Warden serving `zookeeper-client`'s GSSAPI (rsasl) over the wire.
//! One test function: krb5 is configured through process environment variables (KRB5_CONFIG,
//! KRB5_KTNAME), set before the test's runtime starts and never changed under other tests.
//!
//! Needs krb5-kdc, krb5-admin-server and krb5-user (scripts/install-deps).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext};
use libgssapi::name::Name;
use libgssapi::oid::{GSS_MECH_KRB5, GSS_NT_KRB5_PRINCIPAL};
use warden_proto::{ErrorCode, Request, SaslRequest};
use warden_server::sasl::gssapi::{configure_process, GssapiServer, LAYER_NONE};
use warden_server::sasl::{Mechanism as _, SaslServer, SaslSettings, Step};
use zk::{Acl, Acls, AuthId, CreateMode, Error, Permission};
use zookeeper_client as zk;

const SERVER_PRINCIPAL: &str = "zookeeper/127.0.0.1@KAZOOTEST.ORG";

/// The realm's KDC, stopped by its PID when dropped.
struct Realm {
    dir: tempfile::TempDir,
    kdc_pid: u32,
}

impl Realm {
    fn start() -> Realm {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/krb5-test-realm");
        let out = Command::new(&script).arg(dir.path()).arg(port.to_string()).output().unwrap();
        assert!(
            out.status.success(),
            "{} failed: {}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = std::fs::read_to_string(dir.path().join("kdc.pid")).unwrap();
        Realm { dir, kdc_pid: pid.trim().parse().unwrap() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `kinit -kt client.keytab client` plus `extra` arguments, into the realm's ccache.
    fn kinit(&self, extra: &[&str]) {
        let out = Command::new("kinit")
            .env("KRB5_CONFIG", self.path("krb5.conf"))
            .arg("-kt")
            .arg(self.path("client.keytab"))
            .args(extra)
            .arg("client")
            .output()
            .unwrap();
        assert!(out.status.success(), "kinit failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `kadmin.local -q QUERY` on the realm's database.
    fn kadmin(&self, query: &str) {
        // kadmin.local lives in /usr/sbin, which a non-login PATH may lack.
        let tool = ["/usr/sbin/kadmin.local", "kadmin.local"].into_iter().find(|t| Path::new(t).exists());
        let out = Command::new(tool.unwrap_or("kadmin.local"))
            .env("KRB5_CONFIG", self.path("krb5.conf"))
            .env("KRB5_KDC_PROFILE", self.path("kdc.conf"))
            .args(["-r", "KAZOOTEST.ORG", "-q", query])
            .output()
            .unwrap();
        assert!(out.status.success(), "kadmin.local {query}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn kdestroy(&self) {
        let _ = std::fs::remove_file(self.path("ccache"));
    }
}

impl Drop for Realm {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.kdc_pid.to_string()).status();
    }
}

fn client_ctx() -> ClientCtx {
    let target = Name::new(SERVER_PRINCIPAL.as_bytes(), Some(GSS_NT_KRB5_PRINCIPAL)).unwrap();
    ClientCtx::new(None, target, CtxFlags::GSS_C_MUTUAL_FLAG | CtxFlags::GSS_C_INTEG_FLAG, Some(GSS_MECH_KRB5))
}

/// Runs an RFC 4752 client against `server` until it finishes; the client answers the
/// security-layer offer with `layer` and `authzid`.
fn authenticate(server: &GssapiServer, layer: u8, authzid: &[u8]) -> Step {
    let mut client = client_ctx();
    let mut exchange = server.start();
    let mut token = client.step(None, None).expect("client's first token").expect("a token").to_vec();
    loop {
        match exchange.step(&token) {
            Step::Continue(challenge) if !client.is_complete() => {
                token = client.step(Some(&challenge), None).unwrap().map(|b| b.to_vec()).unwrap_or_default();
            }
            Step::Continue(offer) => {
                let plain = client.unwrap(&offer).expect("the offer unwraps");
                assert_eq!(plain.len(), 4, "offer: layer byte and 3-byte max buffer");
                assert_eq!(plain[0], LAYER_NONE, "only 'no security layer' is offered");
                let mut answer = vec![layer, plain[1], plain[2], plain[3]];
                answer.extend_from_slice(authzid);
                token = client.wrap(false, &answer).unwrap().to_vec();
            }
            done => return done,
        }
    }
}

fn done(id: &str) -> Step {
    Step::Done { authentication_id: id.into(), final_token: None }
}

#[test]
fn gssapi_with_a_real_kdc() {
    let _ = tracing_subscriber::fmt().with_env_filter("info,warden_server=debug").with_test_writer().try_init();
    let realm = Realm::start();
    let jaas = realm.path("jaas.conf");
    std::fs::write(
        &jaas,
        format!(
            "Server {{\n  com.sun.security.auth.module.Krb5LoginModule required\n  debug=true\n  isInitiator=false\n  \
             useKeyTab=true\n  keyTab=\"{}\"\n  storeKey=true\n  useTicketCache=false\n  principal=\"{SERVER_PRINCIPAL}\";\n}};\n",
            realm.path("server.keytab").display()
        ),
    )
    .unwrap();
    let settings = SaslSettings { jaas_file: Some(jaas.clone()), section: "Server".into(), ..Default::default() };
    // What `warden serve` does before its runtime starts; the krb5 configuration as the kazoo
    // suite passes it (KRB5_CONFIG).
    configure_process(None, Some(&realm.path("krb5.conf")));
    // The realm's own credential cache, whatever the caller's environment says.
    std::env::set_var("KRB5CCNAME", format!("FILE:{}", realm.path("ccache").display()));
    SaslServer::prepare_process(&settings).unwrap();
    assert_eq!(std::env::var("KRB5_KTNAME").unwrap(), format!("FILE:{}", realm.path("server.keytab").display()));
    mechanism(&realm);

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(over_the_wire(&realm, jaas));
}

/// The mechanism alone, against an RFC 4752 client of libgssapi calls.
fn mechanism(realm: &Realm) {
    // A principal the keytab does not hold is refused at start-up, with krb5's reason.
    let err = GssapiServer::new(Some("zookeeper/otherhost@KAZOOTEST.ORG")).unwrap_err();
    assert!(err.contains("zookeeper/otherhost"), "{err}");

    let server = GssapiServer::new(Some(SERVER_PRINCIPAL)).unwrap();
    realm.kinit(&[]);

    // The full exchange yields the client's principal.
    assert_eq!(authenticate(&server, LAYER_NONE, b""), done("client@KAZOOTEST.ORG"));
    // The identity is the principal whatever authorization id the client asks for, as in
    // ZooKeeper's SaslServerCallbackHandler.
    assert_eq!(authenticate(&server, LAYER_NONE, b"client@KAZOOTEST.ORG"), done("client@KAZOOTEST.ORG"));
    assert_eq!(authenticate(&server, LAYER_NONE, SERVER_PRINCIPAL.as_bytes()), done("client@KAZOOTEST.ORG"));
    // A security layer that was not offered (integrity, 0x02) fails.
    match authenticate(&server, 0x02, b"") {
        Step::Fail(reason) => assert!(reason.contains("security layer"), "{reason}"),
        other => panic!("unoffered layer accepted: {other:?}"),
    }
    // Any principal of the keytab (no JAAS principal) accepts the client too.
    let any = GssapiServer::new(None).unwrap();
    assert_eq!(authenticate(&any, LAYER_NONE, b""), done("client@KAZOOTEST.ORG"));

    // Garbage instead of a context token fails cleanly, and the acceptor keeps working.
    for garbage in [&b"\x60\x05garbage"[..], b"not a token at all", b"\x00"] {
        match server.start().step(garbage) {
            Step::Fail(reason) => assert!(reason.contains("GSSAPI context not accepted"), "{reason}"),
            other => panic!("garbage accepted: {other:?}"),
        }
    }
    // A token replayed from an earlier exchange is refused (krb5's replay cache).
    let mut client = client_ctx();
    let first = client.step(None, None).unwrap().unwrap().to_vec();
    assert!(matches!(server.start().step(&first), Step::Continue(_)));
    match server.start().step(&first) {
        Step::Fail(reason) => assert!(reason.contains("GSSAPI context not accepted"), "{reason}"),
        other => panic!("replayed token accepted: {other:?}"),
    }
    // After a failure the exchange accepts nothing more.
    let mut failed = server.start();
    assert!(matches!(failed.step(b"junk"), Step::Fail(_)));
    assert!(matches!(failed.step(b"junk"), Step::Fail(_)));

    // A postdated ticket (kazoo's test_invalid_gssapi_auth) is not valid yet: the client cannot
    // even make a context token for the service.
    realm.kdestroy();
    realm.kinit(&["-s", "30min"]);
    assert!(client_ctx().step(None, None).is_err(), "a postdated ticket must not yield a context token");
    // Without any ticket, neither.
    realm.kdestroy();
    assert!(client_ctx().step(None, None).is_err(), "no ticket must not yield a context token");
    // And the server still authenticates a client that has one.
    realm.kinit(&[]);
    assert_eq!(authenticate(&server, LAYER_NONE, b""), done("client@KAZOOTEST.ORG"));
}

async fn gssapi_client(srv: &TestServer) -> Result<zk::Client, Error> {
    let addr = srv.connect_string();
    let connector = zk::Client::connector();
    let connect =
        connector.with_session_timeout(Duration::from_secs(6)).with_sasl(zk::SaslOptions::gssapi()).connect(&addr);
    within("GSSAPI connect", connect).await
}

async fn ids(client: &zk::Client) -> Vec<String> {
    client.list_auth_users().await.unwrap().iter().map(|u| format!("{}:{}", u.scheme(), u.user())).collect()
}

/// Warden with kazoo's GSSAPI JAAS section, and `zookeeper-client`'s GSSAPI (rsasl + libgssapi).
async fn over_the_wire(realm: &Realm, jaas: PathBuf) {
    let start_with_rules = |remove: bool, rules: Option<&str>| {
        let jaas = jaas.clone();
        let rules = rules.map(str::to_string);
        TestServer::start_with(move |c| {
            c.sasl.jaas_file = Some(jaas);
            c.auth_providers = vec!["org.apache.zookeeper.server.auth.SASLAuthenticationProvider".into()];
            c.sasl.remove_host = remove;
            c.sasl.remove_realm = remove;
            c.sasl.auth_to_local = rules;
        })
    };
    let start = |remove: bool| start_with_rules(remove, None);
    let srv = start(false).await;
    realm.kinit(&[]);
    let client = gssapi_client(&srv).await.expect("a client with a ticket connects");
    assert!(ids(&client).await.contains(&"sasl:client@KAZOOTEST.ORG".to_string()), "{:?}", ids(&client).await);
    let acl = vec![Acl::new(Permission::ALL, AuthId::new("sasl", "client@KAZOOTEST.ORG"))];
    client.create("/1", b"v", &CreateMode::Persistent.with_acls(Acls::new(&acl))).await.unwrap();
    assert_eq!(client.get_data("/1").await.unwrap().0, b"v");
    let anon = srv.client().await;
    assert_eq!(anon.get_data("/1").await.unwrap_err(), Error::NoAuth, "an unauthenticated client");

    // Garbage as the first token: AUTHFAILED and the connection closes; others are served.
    for garbage in [&b"\x60\x03abc"[..], b"GET / HTTP/1.1", b""] {
        let mut raw = RawClient::new_session(srv.addr, 10_000).await;
        let (hdr, _) = raw.call(&Request::Sasl(SaslRequest { token: garbage.to_vec() })).await;
        assert_eq!(hdr.err, ErrorCode::AuthFailed.code(), "{garbage:?}");
        raw.expect_closed().await;
    }
    // No ticket, then a postdated one (kazoo's test_invalid_gssapi_auth): no connection.
    realm.kdestroy();
    let none = gssapi_client(&srv).await;
    assert!(none.is_err(), "no ticket must not connect: {:?}", none.map(|_| ()));
    realm.kinit(&["-s", "30min"]);
    let postdated = gssapi_client(&srv).await;
    assert!(postdated.is_err(), "a postdated ticket must not connect: {:?}", postdated.map(|_| ()));
    // The server keeps serving: the first client, a new anonymous one, a new GSSAPI one.
    assert_eq!(client.get_data("/1").await.unwrap().0, b"v");
    assert_eq!(srv.client().await.get_data("/1").await.unwrap_err(), Error::NoAuth);
    realm.kdestroy();
    realm.kinit(&[]);
    let again = gssapi_client(&srv).await.expect("a client with a valid ticket connects again");
    assert!(ids(&again).await.contains(&"sasl:client@KAZOOTEST.ORG".to_string()));
    again.delete("/1", None).await.unwrap();
    srv.stop().await;

    // A JAAS principal the keytab holds no key for stops start-up, naming it.
    let other = realm.path("other-jaas.conf");
    let text = std::fs::read_to_string(&jaas).unwrap().replace(SERVER_PRINCIPAL, "zookeeper/otherhost@KAZOOTEST.ORG");
    std::fs::write(&other, text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(dir.path());
    cfg.sasl.jaas_file = Some(other);
    let err = warden_server::Server::start(cfg).await.err().expect("start-up must fail without acceptor credentials");
    assert!(format!("{err:#}").contains("zookeeper/otherhost"), "{err:#}");

    // zookeeper.security.auth_to_local: the short name by the first rule that applies, then the
    // realm (not removed here), with the default realm from the realm's krb5.conf (KRB5_CONFIG).
    let srv = start_with_rules(false, Some("RULE:[1:$1@$0](client@KAZOOTEST.ORG)s/client@.*/mapped/ DEFAULT")).await;
    let client = gssapi_client(&srv).await.expect("connects");
    assert!(ids(&client).await.contains(&"sasl:mapped@KAZOOTEST.ORG".to_string()), "{:?}", ids(&client).await);
    srv.stop().await;
    // A rule that applies to no one: the identity is the whole principal, as in ZooKeeper, even
    // with the realm to be removed.
    let srv = start_with_rules(true, Some("RULE:[2:$1](nobody)")).await;
    let client = gssapi_client(&srv).await.expect("connects");
    assert!(ids(&client).await.contains(&"sasl:client@KAZOOTEST.ORG".to_string()), "{:?}", ids(&client).await);
    srv.stop().await;

    // kerberos.removeHostFromPrincipal / removeRealmFromPrincipal: the id is the short name.
    let srv = start(true).await;
    let client = gssapi_client(&srv).await.expect("connects");
    assert!(ids(&client).await.contains(&"sasl:client".to_string()), "{:?}", ids(&client).await);

    // A ticket the server cannot decrypt (its key changed in the KDC, the keytab still has the
    // old one): the server fails the exchange, logs why, and keeps serving.
    realm.kadmin(&format!("cpw -randkey {SERVER_PRINCIPAL}"));
    realm.kdestroy();
    realm.kinit(&[]);
    let stale = gssapi_client(&srv).await.map(|_| ());
    assert_eq!(stale, Err(Error::AuthFailed), "a ticket for a key the server lacks: AUTHFAILED");
    assert!(ids(&client).await.contains(&"sasl:client".to_string()), "the first client is still served");
    srv.stop().await;
}
