//! Helpers shared by the tests that run the `warden` binary as a child process.
#![allow(dead_code)]

use std::net::SocketAddr;

pub mod mixed;
pub mod netns;

#[path = "../../../server/tests/oracle/mod.rs"]
pub mod oracle;
#[allow(unused_imports)]
pub use oracle::free_port;

/// `ruok` -> `imok` (the oracle's four-letter-word helper, short timeouts); any failure is "not yet".
pub fn ruok(addr: SocketAddr) -> bool {
    oracle::four_letter(addr, "ruok").is_ok_and(|out| out == "imok")
}

/// A child process killed (by its PID) and reaped when the test ends, pass or fail.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a standalone `warden serve` (`--log warn`) on a free loopback port with its data in
/// `dir/data`, after `configure` has added its own arguments and environment, and waits until it
/// answers `ruok`. Returns the server, killed when dropped, and its port.
pub fn start_standalone(dir: &std::path::Path, configure: impl FnOnce(&mut std::process::Command)) -> (Killed, u16) {
    start_standalone_with(dir, "", configure)
}

/// As [`start_standalone`], with `extra` appended to zoo.cfg (a later line wins, as in
/// ZooKeeper's properties file).
pub fn start_standalone_with(
    dir: &std::path::Path,
    extra: &str,
    configure: impl FnOnce(&mut std::process::Command),
) -> (Killed, u16) {
    let port = free_port();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("the data directory is created");
    let cfg = dir.join("zoo.cfg");
    let cfg_text = format!(
        "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n4lw.commands.whitelist=ruok\n{extra}",
        data.display()
    );
    std::fs::write(&cfg, cfg_text).expect("the config is written");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.arg("serve").arg(&cfg).args(["--log", "warn"]).stdin(std::process::Stdio::null());
    configure(&mut cmd);
    let server = Killed(cmd.spawn().expect("spawn warden serve"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("an address");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ruok(addr) {
        assert!(std::time::Instant::now() < deadline, "warden serve did not answer ruok on {addr}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (server, port)
}

/// Starts `warden serve <cfg>` with its stderr in `stderr` and no stdin or stdout.
pub fn spawn_warden(cfg: &std::path::Path, stderr: std::fs::File) -> std::process::Child {
    warden_command(cfg, stderr).spawn().expect("spawn warden")
}

/// The command [`spawn_warden`] runs, for a caller that adds to its environment.
pub fn warden_command(cfg: &std::path::Path, stderr: std::fs::File) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.arg("serve")
        .arg(cfg)
        .arg("--log")
        .arg("info")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    cmd
}

/// A test's working directory (data directories, configs, server logs): removed when the test
/// passes, kept and its path printed when it panics (or always, with `WARDEN_TEST_KEEP=1`), so
/// the server logs can be read.
pub struct WorkDir(Option<tempfile::TempDir>);

impl WorkDir {
    pub fn new(prefix: &str) -> WorkDir {
        WorkDir(Some(tempfile::Builder::new().prefix(prefix).tempdir().expect("temp dir")))
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.as_ref().expect("work dir").path()
    }

    /// `data<id>/` with its `myid` file, as an ensemble member needs.
    pub fn member_data_dir(&self, id: u64) -> std::path::PathBuf {
        let data = self.path().join(format!("data{id}"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("myid"), format!("{id}\n")).unwrap();
        data
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let keep = std::thread::panicking() || std::env::var_os("WARDEN_TEST_KEEP").is_some_and(|v| v == "1");
        if let (true, Some(dir)) = (keep, self.0.take()) {
            eprintln!("server logs kept in {}", dir.keep().display());
        }
    }
}

/// Kills a child process (SIGKILL by its PID) and reaps it.
pub fn stop(child: Option<std::process::Child>) {
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// `GET path` over HTTP/1.0; the status and body.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    use std::time::Duration;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}
