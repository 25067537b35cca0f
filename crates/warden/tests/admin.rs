//! `warden serve`'s AdminServer as an operator configures it: its port from
//! `-Dzookeeper.admin.serverPort` in SERVER_JVMFLAGS (as zkServer.sh passes it), the zoo.cfg text
//! served by `initial_configuration`, and a second server whose AdminServer port is taken still
//! serving its clients.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    raw.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

#[test]
fn the_admin_port_comes_from_jvm_flags_and_a_taken_port_does_not_stop_the_server() {
    let admin_port = common::free_port();
    let flags = format!("-Xmx1g -Dzookeeper.admin.serverPort={admin_port} -Dzookeeper.admin.serverAddress=127.0.0.1");
    let dir = tempfile::tempdir().unwrap();
    let (_first, client_port) = common::start_standalone(dir.path(), |cmd| {
        cmd.env("SERVER_JVMFLAGS", &flags);
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let icfg = loop {
        if let Some(body) = get(admin_port, "/commands/icfg") {
            break body;
        }
        assert!(Instant::now() < deadline, "no AdminServer on {admin_port}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let v: serde_json::Value = serde_json::from_str(&icfg).unwrap();
    assert_eq!(v["command"], "initial_configuration");
    let text = v["initial_configuration"].as_str().unwrap();
    assert!(text.contains(&format!("clientPort={client_port}\n")), "the zoo.cfg text: {text:?}");
    let conf: serde_json::Value = serde_json::from_str(&get(admin_port, "/commands/conf").unwrap()).unwrap();
    assert_eq!(conf["client_port"].as_u64(), Some(u64::from(client_port)));

    // A second server told to use the same AdminServer port starts and serves all the same
    // (start_standalone waits for its ruok); the first keeps its AdminServer.
    let dir2 = tempfile::tempdir().unwrap();
    let (_second, _) = common::start_standalone(dir2.path(), |cmd| {
        cmd.env("SERVER_JVMFLAGS", &flags);
    });
    let conf: serde_json::Value = serde_json::from_str(&get(admin_port, "/commands/conf").unwrap()).unwrap();
    assert_eq!(conf["client_port"].as_u64(), Some(u64::from(client_port)), "still the first server's");
}
