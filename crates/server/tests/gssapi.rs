//! SASL GSSAPI against a real MIT KDC (`scripts/krb5-test-realm`, realm KAZOOTEST.ORG on a
//! loopback port this test picks). One test function: krb5 is configured through process
//! environment variables (KRB5_CONFIG, KRB5_KTNAME), which must not change under other tests.
//!
//! Needs krb5-kdc, krb5-admin-server and krb5-user (scripts/install-deps).

use std::path::{Path, PathBuf};
use std::process::Command;

use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext};
use libgssapi::name::Name;
use libgssapi::oid::{GSS_MECH_KRB5, GSS_NT_KRB5_PRINCIPAL};
use warden_server::gssapi::{GssapiServer, Step, LAYER_NONE};

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

#[test]
fn gssapi_with_a_real_kdc() {
    let realm = Realm::start();
    GssapiServer::configure_process(Some(&realm.path("server.keytab")), Some(&realm.path("krb5.conf")));

    // A principal the keytab does not hold is refused at start-up, with krb5's reason.
    let err = GssapiServer::new("zookeeper/otherhost@KAZOOTEST.ORG", false, false).unwrap_err();
    assert!(err.contains("zookeeper/otherhost"), "{err}");

    let server = GssapiServer::new(SERVER_PRINCIPAL, false, false).unwrap();
    realm.kinit(&[]);

    // The full exchange yields the client's principal.
    let done = authenticate(&server, LAYER_NONE, b"");
    assert_eq!(done, Step::Done { authorization_id: "client@KAZOOTEST.ORG".into(), final_token: None });
    // An authorization id equal to the principal is accepted; another is not.
    let done = authenticate(&server, LAYER_NONE, b"client@KAZOOTEST.ORG");
    assert_eq!(done, Step::Done { authorization_id: "client@KAZOOTEST.ORG".into(), final_token: None });
    match authenticate(&server, LAYER_NONE, b"zookeeper/127.0.0.1@KAZOOTEST.ORG") {
        Step::Fail(reason) => assert!(reason.contains("may not act as"), "{reason}"),
        other => panic!("impersonation accepted: {other:?}"),
    }
    // A security layer that was not offered (integrity, 0x02) fails.
    match authenticate(&server, 0x02, b"") {
        Step::Fail(reason) => assert!(reason.contains("security layer"), "{reason}"),
        other => panic!("unoffered layer accepted: {other:?}"),
    }
    // Principal rules: host and realm removed on request.
    let short = GssapiServer::new(SERVER_PRINCIPAL, true, true).unwrap();
    let done = authenticate(&short, LAYER_NONE, b"");
    assert_eq!(done, Step::Done { authorization_id: "client".into(), final_token: None });

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
    let done = authenticate(&server, LAYER_NONE, b"");
    assert_eq!(done, Step::Done { authorization_id: "client@KAZOOTEST.ORG".into(), final_token: None });
}
