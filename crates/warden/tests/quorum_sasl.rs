//! SASL between servers (`quorum.auth.*`, DIGEST-MD5 from the JAAS `QuorumServer` and
//! `QuorumLearner` sections) with `warden serve` processes and Apache ZooKeeper 3.8.0 servers:
//!
//! * three Warden servers requiring SASL elect and replicate; a server with a wrong password is
//!   refused on both peer ports and cannot join, the others keep serving, and with the right
//!   password it joins;
//! * Warden and ZooKeeper servers requiring SASL, over TLS (`sslQuorum`), form one ensemble: Warden
//!   leads ZooKeeper followers, and follows a ZooKeeper leader after a failover;
//! * a Warden and ZooKeeper ensemble moves from no SASL to SASL required by the three rounds of
//!   rolling restarts ZooKeeper documents, while a client writes, and loses no acknowledged write.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod common;
use common::mixed::{check, make_certs, mode, write_many, Kind, Mixed};

const JAAS: &str = r#"QuorumServer {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_peer="peer-secret";
};
QuorumLearner {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="peer"
    password="peer-secret";
};
"#;

/// Writes the JAAS file (the learner's password replaced by `password`) under `dir`.
fn jaas(dir: &Path, name: &str, password: &str) -> PathBuf {
    let path = dir.join(name);
    let text = JAAS.replace("password=\"peer-secret\"", &format!("password=\"{password}\""));
    std::fs::write(&path, text).unwrap();
    path
}

/// zoo.cfg lines requiring quorum SASL; Warden reads the JAAS file from `jaasLoginConfig`.
fn sasl_lines(jaas: &Path) -> String {
    rolling_lines(jaas, true, true)
}

/// zoo.cfg lines with quorum SASL on, and required by the learner and the server as given.
fn rolling_lines(jaas: &Path, learner_require: bool, server_require: bool) -> String {
    format!(
        "quorum.auth.enableSasl=true\nquorum.auth.learnerRequireSasl={learner_require}\n\
         quorum.auth.serverRequireSasl={server_require}\n\
         quorum.auth.learner.saslLoginContext=QuorumLearner\nquorum.auth.server.saslLoginContext=QuorumServer\n\
         jaasLoginConfig={}\n",
        jaas.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_servers_authenticate_each_other_with_digest_md5() {
    let mut e = Mixed::new(&[Kind::Warden, Kind::Warden, Kind::Warden]);
    let good = jaas(e.dir.path(), "jaas.conf", "peer-secret");
    let bad = jaas(e.dir.path(), "wrong.conf", "guess");
    for id in 1..=3 {
        e.set_extra(id, &sasl_lines(&good));
    }
    e.start(3);
    e.start(1);
    e.wait_roles(3).await;
    e.start(2);
    e.wait_roles(3).await;
    assert!(e.log(3).contains("learner authenticated (quorum SASL)"), "the leader authenticated its learners");
    let mut acked = write_many(e.member(1).client, "a", 30).await;
    check(e.member(2).client, "SASL follower", &acked).await;

    // server.2 with a wrong password: refused on both ports, never follows.
    e.kill(2);
    e.set_extra(2, &sasl_lines(&bad));
    e.start(2);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let m2 = e.member(2).client;
    let m2_mode = tokio::task::spawn_blocking(move || mode(m2)).await.unwrap();
    assert_ne!(m2_mode.as_deref(), Some("follower"), "a server with the wrong password joined");
    let leader_log = e.log(3);
    assert!(
        leader_log.lines().any(|l| l.contains("connection refused") && l.contains("bad password")),
        "the leader logged the wrong password"
    );
    acked.extend(write_many(e.member(1).client, "b", 20).await);
    check(e.member(3).client, "while a server with a wrong password knocks", &acked).await;

    e.kill(2);
    e.set_extra(2, &sasl_lines(&good));
    e.start(2);
    e.wait_roles(3).await;
    check(e.member(2).client, "server.2 with the right password", &acked).await;
}

/// ZooKeeper 3.8 and Warden, with quorum SASL required and TLS between servers, in one
/// ensemble: Warden (server.3) leads; after it dies a ZooKeeper server leads and Warden,
/// restarted, follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_and_zookeeper_authenticate_each_other_over_tls() {
    let mut e = Mixed::new(&[Kind::ZooKeeper, Kind::ZooKeeper, Kind::Warden]);
    let good = jaas(e.dir.path(), "jaas.conf", "peer-secret");
    let certs = make_certs(e.dir.path());
    let c = certs.display();
    let tls = format!(
        "sslQuorum=true\nssl.quorum.keyStore.location={c}/server.p12\nssl.quorum.keyStore.password=testpass\n\
         ssl.quorum.trustStore.location={c}/truststore.p12\nssl.quorum.trustStore.password=testpass\n"
    );
    for id in 1..=3 {
        e.set_extra(id, &format!("{}{tls}", sasl_lines(&good)));
        e.set_jvm_flags(id, &[format!("-Djava.security.auth.login.config={}", good.display())]);
    }
    e.start(3);
    e.start(1);
    e.wait_roles(3).await;
    e.start(2);
    e.wait_roles(3).await;
    let zk_log = e.log(1);
    assert!(
        zk_log.contains("Successfully completed the authentication using SASL"),
        "ZooKeeper authenticated with Warden"
    );
    let mut acked = write_many(e.member(3).client, "w", 20).await;
    acked.extend(write_many(e.member(1).client, "z", 20).await);
    check(e.member(2).client, "ZooKeeper follower of Warden", &acked).await;

    e.kill(3);
    let leader = e.wait_quorum().await;
    acked.extend(write_many(e.member(3 - leader).client, "after", 20).await);
    e.start(3);
    e.wait_roles(leader).await;
    check(e.member(3).client, "Warden follower of ZooKeeper", &acked).await;
    let leader_log = e.log(leader);
    assert!(
        leader_log.matches("Successfully completed the authentication using SASL. learner addr").count() >= 2,
        "ZooKeeper's leader authenticated Warden"
    );
}

/// ZooKeeper's documented rolling upgrade to quorum SASL, with one ZooKeeper and two Warden
/// servers and a client writing throughout: every server restarted with `enableSasl` (nothing
/// required), then with `learnerRequireSasl`, then with `serverRequireSasl`. Servers of the old
/// and new setting keep talking at each step; no acknowledged write is lost; at the end every
/// connection is authenticated, and a server without credentials is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_turns_on_quorum_sasl_without_losing_acked_writes() {
    let mut e = Mixed::new(&[Kind::ZooKeeper, Kind::Warden, Kind::Warden]);
    let good = jaas(e.dir.path(), "jaas.conf", "peer-secret");
    e.set_jvm_flags(1, &[format!("-Djava.security.auth.login.config={}", good.display())]);
    for id in [3, 1, 2] {
        e.start(id);
    }
    e.wait_quorum().await;
    let steps = [(false, false), (true, false), (true, true)];
    e.roll_under_writes(steps.len(), |round, _| rolling_lines(&good, steps[round].0, steps[round].1)).await;

    // Everything is authenticated now: server.1 (ZooKeeper) authenticated its Warden peers on
    // the election port, and the leader its learners.
    let leader = e.wait_quorum().await;
    let zk_log = e.log(1);
    assert!(
        zk_log.contains("Successfully authenticated learner: authenticationID=peer"),
        "ZooKeeper authenticated a peer"
    );
    if e.member(leader).kind == Kind::Warden {
        assert!(e.log(leader).contains("learner authenticated (quorum SASL)"), "Warden's leader authenticated");
    }
    // A Warden server without quorum SASL can no longer join, and is refused as a peer that
    // does not authenticate (Warden's or ZooKeeper's words).
    let refusals = |e: &Mixed| -> usize {
        (1..=3)
            .map(|id| {
                e.log(id)
                    .lines()
                    .filter(|l| {
                        (l.contains("refused") && l.contains("does not authenticate"))
                            || l.contains("Learner not trying to authenticate and authentication is required")
                    })
                    .count()
            })
            .sum()
    };
    let outsider = if leader == 2 { 3 } else { 2 };
    e.kill(outsider);
    let before = refusals(&e);
    e.set_extra(outsider, "");
    e.start(outsider);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let addr = e.member(outsider).client;
    let m = tokio::task::spawn_blocking(move || mode(addr)).await.unwrap();
    assert_ne!(m.as_deref(), Some("follower"), "a server without SASL joined");
    assert!(refusals(&e) > before, "no server logged refusing the unauthenticated peer");
}

/// A throw-away MIT Kerberos realm (`scripts/krb5-test-realm`, realm KAZOOTEST.ORG, its KDC on a
/// loopback port), stopped by its PID when dropped.
struct Realm {
    dir: PathBuf,
    kdc_pid: u32,
}

impl Realm {
    fn start(dir: PathBuf) -> Realm {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/krb5-test-realm");
        let out = std::process::Command::new(&script).arg(&dir).arg(port.to_string()).output().unwrap();
        assert!(out.status.success(), "krb5-test-realm: {}", String::from_utf8_lossy(&out.stderr));
        let pid = std::fs::read_to_string(dir.join("kdc.pid")).unwrap();
        Realm { dir, kdc_pid: pid.trim().parse().unwrap() }
    }

    /// A principal with a random key, exported to the keytab `file` in the realm's directory.
    fn principal_in_keytab(&self, principal: &str, file: &str) -> PathBuf {
        let keytab = self.dir.join(file);
        for query in [format!("addprinc -randkey {principal}"), format!("ktadd -k {} {principal}", keytab.display())] {
            let tool = ["/usr/sbin/kadmin.local", "kadmin.local"].into_iter().find(|t| Path::new(t).exists());
            let out = std::process::Command::new(tool.unwrap_or("kadmin.local"))
                .env("KRB5_CONFIG", self.dir.join("krb5.conf"))
                .env("KRB5_KDC_PROFILE", self.dir.join("kdc.conf"))
                .args(["-r", "KAZOOTEST.ORG", "-q", &query])
                .output()
                .unwrap();
            assert!(out.status.success(), "kadmin.local {query}: {}", String::from_utf8_lossy(&out.stderr));
        }
        keytab
    }
}

impl Drop for Realm {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").arg(self.kdc_pid.to_string()).status();
    }
}

/// A JAAS file whose `QuorumServer` and `QuorumLearner` sections log in from `keytab` as
/// `principal` (ZooKeeper's documented Kerberos sections).
fn kerberos_jaas(dir: &Path, name: &str, keytab: &Path, principal: &str) -> PathBuf {
    let section = |name: &str| {
        format!(
            "{name} {{\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n  keyTab=\"{}\"\n  \
             storeKey=true\n  useTicketCache=false\n  debug=false\n  principal=\"{principal}\";\n}};\n",
            keytab.display()
        )
    };
    let path = dir.join(name);
    std::fs::write(&path, format!("{}{}", section("QuorumServer"), section("QuorumLearner"))).unwrap();
    path
}

/// Kerberos (GSSAPI) between Warden and ZooKeeper 3.8 servers with a real KDC, as ZooKeeper
/// documents it: every server logs in as `zkquorum/127.0.0.1` from a keytab and asks for tickets
/// to `zkquorum/_HOST`; the JAAS file and the krb5 configuration come in `SERVER_JVMFLAGS` for
/// Warden as in the JVM flags for ZooKeeper. Warden (server.3) leads a ZooKeeper follower and
/// refuses a ZooKeeper server whose principal names a host outside the ensemble; after the
/// intruder is given the right principal it joins; then Warden, restarted after a failover,
/// follows a ZooKeeper leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_and_zookeeper_authenticate_each_other_with_kerberos() {
    let mut e = Mixed::new(&[Kind::ZooKeeper, Kind::ZooKeeper, Kind::Warden]);
    let realm = Realm::start(e.dir.path().join("krb5"));
    let keytab = realm.principal_in_keytab("zkquorum/127.0.0.1", "quorum.keytab");
    let intruder_keytab = realm.principal_in_keytab("zkquorum/10.9.9.9", "intruder.keytab");
    let good = kerberos_jaas(e.dir.path(), "jaas.conf", &keytab, "zkquorum/127.0.0.1@KAZOOTEST.ORG");
    let intruder = kerberos_jaas(e.dir.path(), "intruder.conf", &intruder_keytab, "zkquorum/10.9.9.9@KAZOOTEST.ORG");
    let krb5_conf = realm.dir.join("krb5.conf");
    let flags = |jaas: &Path| {
        vec![
            format!("-Djava.security.auth.login.config={}", jaas.display()),
            format!("-Djava.security.krb5.conf={}", krb5_conf.display()),
        ]
    };
    let lines =
        "quorum.auth.enableSasl=true\nquorum.auth.learnerRequireSasl=true\nquorum.auth.serverRequireSasl=true\n\
                 quorum.auth.kerberos.servicePrincipal=zkquorum/_HOST\n";
    for id in 1..=3 {
        e.set_extra(id, lines);
        e.set_jvm_flags(id, &flags(&good));
    }
    e.start(3);
    e.start(1);
    e.wait_roles(3).await;
    let warden_log = e.log(3);
    assert!(
        warden_log.contains("learner authenticated (quorum SASL)")
            && warden_log.contains("zkquorum/127.0.0.1@KAZOOTEST.ORG"),
        "Warden authenticated ZooKeeper's Kerberos principal"
    );
    let mut acked = write_many(e.member(3).client, "k", 20).await;
    check(e.member(1).client, "ZooKeeper follower of Warden", &acked).await;

    // server.2 logs in as a principal of a host that no server.N line names: refused.
    e.set_jvm_flags(2, &flags(&intruder));
    e.start(2);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let addr = e.member(2).client;
    let m2 = tokio::task::spawn_blocking(move || mode(addr)).await.unwrap();
    assert_ne!(m2.as_deref(), Some("follower"), "a server with a foreign principal joined");
    assert!(
        e.log(3)
            .lines()
            .any(|l| l.contains("refused") && l.contains("zkquorum/10.9.9.9") && l.contains("not authorized")),
        "Warden logged refusing the foreign principal"
    );
    e.kill(2);
    e.set_jvm_flags(2, &flags(&good));
    e.start(2);
    e.wait_roles(3).await;
    acked.extend(write_many(e.member(1).client, "z", 20).await);
    check(e.member(2).client, "ZooKeeper follower after the intruder", &acked).await;

    // Warden follows a ZooKeeper leader: its learner logs in to ZooKeeper's quorum service.
    e.kill(3);
    let leader = e.wait_quorum().await;
    acked.extend(write_many(e.member(leader).client, "after", 20).await);
    e.start(3);
    e.wait_roles(leader).await;
    check(e.member(3).client, "Warden follower of ZooKeeper", &acked).await;
    assert!(
        e.log(leader).contains("Successfully authenticated learner: authenticationID=zkquorum/127.0.0.1@KAZOOTEST.ORG"),
        "ZooKeeper's leader authenticated Warden's Kerberos principal"
    );
}
