//! TLS between servers (`sslQuorum`, `portUnification`, `ssl.quorum.*`) with `warden serve`
//! processes and Apache ZooKeeper 3.8.0 servers, keys and certificates made by
//! scripts/make-test-certs (openssl and keytool):
//!
//! * three Warden servers, each with its stores in another format (PKCS12, PEM, JKS), elect,
//!   replicate and fail over over TLS; plaintext, a garbage and a truncated handshake, and a
//!   stalled handshake on the TLS-only election and quorum ports are refused with a log line; a
//!   server whose certificate comes from another CA cannot join, and joins once it has the right
//!   one;
//! * Warden and ZooKeeper servers form one TLS ensemble, each leading the other;
//! * an ensemble moves from plaintext to TLS by three rounds of rolling restarts (portUnification
//!   on, sslQuorum on, portUnification off) while a client writes, and loses no acknowledged write.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

mod common;
use common::mixed::{check, make_certs, mode, write_many, Kind, Mixed};

/// A key store and the trust store of the same format.
#[derive(Clone, Copy)]
enum Stores {
    Pkcs12(&'static str),
    Pem(&'static str),
    Jks(&'static str),
}

/// zoo.cfg lines for TLS between servers with the key store of `stores` (named without extension).
fn tls_lines(certs: &Path, stores: Stores, ssl_quorum: bool, port_unification: bool) -> String {
    let (key, trust, kind) = match stores {
        Stores::Pkcs12(name) => (format!("{name}.p12"), "truststore.p12", "PKCS12"),
        Stores::Pem(name) => (format!("{name}-bundle.pem"), "truststore.pem", "PEM"),
        Stores::Jks(name) => (format!("{name}.jks"), "truststore.jks", "JKS"),
    };
    let c = certs.display();
    format!(
        "sslQuorum={ssl_quorum}\nportUnification={port_unification}\n\
         ssl.quorum.keyStore.location={c}/{key}\nssl.quorum.keyStore.password=testpass\nssl.quorum.keyStore.type={kind}\n\
         ssl.quorum.trustStore.location={c}/{trust}\nssl.quorum.trustStore.password=testpass\n\
         ssl.quorum.trustStore.type={kind}\nssl.quorum.handshakeDetectionTimeoutMillis=2000\n"
    )
}

/// The lines of `log` that say a learner connected to its leader (Warden's log).
fn learner_connections(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("connected to leader")).collect()
}

/// Sends `bytes` to `port` (then stops writing) and waits for the server to close the connection;
/// returns what it answered. Panics if it keeps the connection open for 10 s.
fn refused(port: u16, bytes: &[u8], what: &str) -> Vec<u8> {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{what}: connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    match s.read_to_end(&mut answer) {
        Ok(_) => answer,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => answer,
        Err(e) => panic!("{what}: the server kept the connection open ({e}); it answered {answer:?}"),
    }
}

/// The bad input a TLS-only peer port must refuse: plaintext, garbage in a TLS record, a
/// truncated ClientHello, and a connection that says nothing (closed after the 2 s handshake
/// timeout). None of them gets anything but (at most) a TLS alert.
fn probe_tls_only_port(port: u16, name: &str) {
    let hello_intro = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
    let answer = refused(port, &hello_intro, &format!("{name}: plaintext introduction"));
    assert!(answer.is_empty() || answer[0] == 0x15, "{name}: plaintext got {answer:?}");
    let answer = refused(port, &[0x16, 0x03, 0x01, 0x00, 0x05, 0xde, 0xad, 0xbe, 0xef, 0x00], name);
    assert!(answer.is_empty() || answer[0] == 0x15, "{name}: a garbage handshake got {answer:?}");
    // A ClientHello record announcing 0x200 bytes, of which 4 arrive, then nothing.
    let started = Instant::now();
    let answer = refused(port, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc], name);
    assert!(answer.is_empty() || answer[0] == 0x15, "{name}: a truncated handshake got {answer:?}");
    assert!(started.elapsed() >= Duration::from_millis(1500), "{name}: closed before the handshake timeout");
    let started = Instant::now();
    assert!(refused(port, &[], name).is_empty(), "{name}: a silent connection got an answer");
    assert!(started.elapsed() >= Duration::from_millis(1500), "{name}: a silent connection closed too early");
}

/// Three Warden servers with `sslQuorum=true` (PKCS12, PEM and JKS stores) elect, replicate and
/// fail over; bad input on the TLS-only ports is refused; a server with a certificate from another
/// CA cannot join until it gets one from the ensemble's CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_ensemble_over_tls_elects_replicates_fails_over_and_refuses_bad_peers() {
    let mut e = Mixed::new(&[Kind::Warden, Kind::Warden, Kind::Warden]);
    let certs = make_certs(e.dir.path());
    let stores = [Stores::Pkcs12("server"), Stores::Pem("server"), Stores::Jks("server")];
    for (id, s) in (1..=3).zip(stores) {
        e.set_extra(id, &tls_lines(&certs, s, true, false));
    }
    e.start(3);
    e.start(1);
    e.wait_roles(3).await;
    e.start(2);
    e.wait_roles(3).await;
    for id in [1, 2] {
        let log = e.log(id);
        let conns = learner_connections(&log);
        assert!(!conns.is_empty() && conns.iter().all(|l| l.contains("tls=true")), "server.{id}: {conns:?}");
    }
    let mut acked = write_many(e.member(1).client, "a", 50).await;
    check(e.member(3).client, "TLS leader", &acked).await;
    check(e.member(2).client, "TLS follower (PEM stores)", &acked).await;

    // Bad input on the leader's TLS-only ports costs nothing else.
    probe_tls_only_port(e.election_port(3), "election port");
    probe_tls_only_port(e.quorum_port(3), "quorum port");
    let log = e.log(3);
    assert!(log.contains("election connection refused"), "the leader logged the refused election connections");
    assert!(log.contains("quorum connection refused"), "the leader logged the refused quorum connections");
    acked.extend(write_many(e.member(2).client, "b", 20).await);
    check(e.member(1).client, "after the bad input", &acked).await;

    // server.2 restarts with a certificate from another CA: the others refuse it.
    e.kill(2);
    e.set_extra(2, &tls_lines(&certs, Stores::Pkcs12("other-server"), true, false));
    e.start(2);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let m2 = e.member(2).client;
    let m2_mode = tokio::task::spawn_blocking(move || mode(m2)).await.unwrap();
    assert_ne!(m2_mode.as_deref(), Some("follower"), "a server with a foreign CA's certificate joined");
    assert!(e.log(3).contains("TLS handshake failed"), "the leader logged the foreign certificate");
    acked.extend(write_many(e.member(1).client, "c", 20).await);
    check(e.member(3).client, "while a foreign server knocks", &acked).await;
    e.kill(2);
    e.set_extra(2, &tls_lines(&certs, Stores::Pem("server"), true, false));
    e.start(2);
    e.wait_roles(3).await;
    check(e.member(2).client, "server.2 with the right certificate", &acked).await;

    // Fail over: the leader dies; one of the others (the larger sid unless the other logged more)
    // leads the remaining one over TLS.
    e.kill(3);
    let leader = e.wait_quorum().await;
    let other = 3 - leader;
    acked.extend(write_many(e.member(other).client, "d", 20).await);
    check(e.member(leader).client, "new TLS leader", &acked).await;
    e.start(3);
    e.wait_roles(leader).await;
    check(e.member(3).client, "old leader back as a TLS follower", &acked).await;
    let log = e.log(3);
    let conns = learner_connections(&log);
    assert!(conns.last().is_some_and(|l| l.contains("tls=true")), "server.3 follows over TLS: {conns:?}");
}

/// Apache ZooKeeper 3.8 and Warden in one `sslQuorum=true` ensemble: Warden (server.3) leads two
/// ZooKeeper followers over TLS; when it dies a ZooKeeper server leads, and Warden, restarted,
/// follows it over TLS and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warden_and_zookeeper_form_one_tls_ensemble() {
    let mut e = Mixed::new(&[Kind::ZooKeeper, Kind::ZooKeeper, Kind::Warden]);
    let certs = make_certs(e.dir.path());
    for id in 1..=3 {
        e.set_extra(id, &tls_lines(&certs, Stores::Pkcs12("server"), true, false));
    }
    e.start(3);
    e.start(1);
    e.wait_roles(3).await;
    e.start(2);
    e.wait_roles(3).await;
    let mut acked = write_many(e.member(3).client, "w", 30).await;
    acked.extend(write_many(e.member(1).client, "z", 30).await);
    check(e.member(2).client, "ZooKeeper follower of a Warden TLS leader", &acked).await;
    check(e.member(3).client, "Warden TLS leader", &acked).await;

    e.kill(3);
    // server.2 leads unless server.1 logged more of the last txns.
    let leader = e.wait_quorum().await;
    acked.extend(write_many(e.member(3 - leader).client, "after", 30).await);
    e.start(3);
    e.wait_roles(leader).await;
    check(e.member(3).client, "Warden follower of a ZooKeeper TLS leader", &acked).await;
    let log = e.log(3);
    let conns = learner_connections(&log);
    assert!(conns.last().is_some_and(|l| l.contains("tls=true")), "Warden follows ZooKeeper over TLS: {conns:?}");
    acked.extend(write_many(e.member(3).client, "fwd", 10).await);
    check(e.member(1).client, "writes forwarded by Warden over TLS", &acked).await;
}

/// The documented rolling move to TLS between servers: portUnification on everywhere, then
/// sslQuorum on everywhere, then portUnification off, one server restarted at a time while a
/// client writes. No acknowledged write is lost, and at the end the ports take TLS only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_moves_the_quorum_to_tls_without_losing_acked_writes() {
    let mut e = Mixed::new(&[Kind::Warden, Kind::Warden, Kind::Warden]);
    let certs = make_certs(e.dir.path());
    let stores = [Stores::Pkcs12("server"), Stores::Pem("server"), Stores::Jks("server")];
    for (id, s) in (1..=3).zip(stores) {
        e.set_extra(id, &tls_lines(&certs, s, false, false));
    }
    for id in [3, 1, 2] {
        e.start(id);
    }
    e.wait_quorum().await;
    let steps = [(false, true), (true, true), (true, false)];
    e.roll_under_writes(steps.len(), |round, id| {
        let (ssl_quorum, unify) = steps[round];
        tls_lines(&certs, stores[id as usize - 1], ssl_quorum, unify)
    })
    .await;
    // Every server now dials over TLS, and the ports take nothing else.
    let leader = e.wait_quorum().await;
    for id in (1..=3).filter(|&id| id != leader) {
        let log = e.log(id);
        let conns = learner_connections(&log);
        assert!(conns.last().is_some_and(|l| l.contains("tls=true")), "server.{id} follows over TLS: {conns:?}");
    }
    let answer = refused(e.election_port(leader), &[0xff; 24], "plaintext after the move");
    assert!(answer.is_empty() || answer[0] == 0x15, "plaintext got {answer:?}");
}
