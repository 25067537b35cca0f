//! Helpers shared by the tests that run the `warden` binary as a child process.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// `ruok` -> `imok`, with short timeouts; any failure is "not yet".
pub fn ruok(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"ruok").is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out == "imok"
}

/// Starts `warden serve <cfg>` with its stderr in `stderr` and no stdin or stdout.
pub fn spawn_warden(cfg: &std::path::Path, stderr: std::fs::File) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("serve")
        .arg(cfg)
        .arg("--log")
        .arg("info")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn warden")
}
