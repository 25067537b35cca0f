//! A 3-server ensemble of real `warden serve` processes inside a private network namespace, with
//! iptables cuts between servers (the partition and nemesis tests).
//!
//! A test re-runs itself inside a fresh network namespace (`unshare -n`, root needed; [`in_netns`]),
//! where server N listens on 127.0.0.N (client 2181, quorum 2888, election 3888) and dials its peers
//! from that address, so iptables can cut exactly the traffic between two servers: a dedicated
//! chain `WARDEN_PART` hooked into INPUT drops TCP packets between two addresses with a peer port
//! (2888 or 3888) at either end; client traffic (2181) is never cut. Healing flushes that chain
//! only. Missing tools (`unshare`, `ip`, `iptables`: scripts/install-deps) or no root make the tests
//! fail, never skip.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{spawn_warden, stop, WorkDir};

/// Set in the copy of the test binary that runs inside the namespace.
const IN_NETNS: &str = "WARDEN_TEST_NETNS";
const CHAIN: &str = "WARDEN_PART";
pub const TICK_MS: u64 = 200;
pub const SYNC_LIMIT: u64 = 5;
/// Bound on each wait for an election.
pub const ELECT: Duration = Duration::from_secs(30);

/// Runs `body` inside a new network namespace: re-executes this test binary for test `name` under
/// `unshare -n` and asserts that it passed.
pub fn in_netns(name: &str, body: fn()) {
    if std::env::var_os(IN_NETNS).is_some() {
        return body();
    }
    for (tool, arg) in [("unshare", "--version"), ("ip", "-V"), ("iptables", "--version")] {
        let ok = Command::new(tool).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status();
        assert!(
            ok.is_ok_and(|s| s.success()),
            "`{tool}` is missing: run scripts/install-deps (needs iptables, iproute2)"
        );
    }
    let exe = std::env::current_exe().expect("test binary path");
    let status = Command::new("unshare")
        .arg("-n")
        .arg("--")
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(IN_NETNS, "1")
        .status()
        .expect("run unshare");
    assert!(status.success(), "{name} inside its network namespace: {status} (root is needed for unshare -n)");
}

pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn ip(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

/// Sets up the namespace's loopback and an empty partition chain.
pub fn net_setup() {
    run("ip", &["link", "set", "lo", "up"]);
    run("iptables", &["-N", CHAIN]);
    run("iptables", &["-A", "INPUT", "-j", CHAIN]);
}

/// Drops peer traffic from server `from` to server `to` (packets with source `from`, destination
/// `to`, a peer port at either end). TCP needs both directions, so this breaks every connection
/// between them, but only `from`'s packets are lost: `to` still reaches `from`.
pub fn cut(from: u8, to: u8) {
    let (s, d) = (ip(from).to_string(), ip(to).to_string());
    run(
        "iptables",
        &["-A", CHAIN, "-s", &s, "-d", &d, "-p", "tcp", "-m", "multiport", "--ports", "2888,3888", "-j", "DROP"],
    );
}

pub fn heal() {
    run("iptables", &["-F", CHAIN]);
}

/// Servers 1, 2 and 3 on 127.0.0.1/.2/.3 (tickTime [`TICK_MS`], syncLimit [`SYNC_LIMIT`]), each
/// with its config, data directory and stderr log (`server<N>.stderr`, appended to across
/// restarts) in one work directory. Every process is killed by its PID when this is dropped.
pub struct Ensemble {
    /// Holds the servers' data and logs for as long as they run.
    dir: WorkDir,
    children: Vec<Option<Child>>,
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        for c in &mut self.children {
            stop(c.take());
        }
    }
}

impl Ensemble {
    pub fn start(prefix: &str) -> Ensemble {
        let dir = WorkDir::new(prefix);
        let servers: String = (1..=3u8).map(|n| format!("server.{n}={}:2888:3888\n", ip(n))).collect();
        for n in 1..=3u8 {
            let data = dir.member_data_dir(u64::from(n));
            std::fs::write(
                dir.path().join(format!("zoo{n}.cfg")),
                format!(
                    "tickTime={TICK_MS}\ninitLimit=10\nsyncLimit={SYNC_LIMIT}\nclientPort=2181\n\
                     clientPortAddress={}\ndataDir={}\n4lw.commands.whitelist=*\npreAllocSize=1024\n\
                     maxSessionTimeout=20000\n{servers}",
                    ip(n),
                    data.display()
                ),
            )
            .unwrap();
        }
        let mut e = Ensemble { dir, children: vec![None, None, None] };
        for n in 1..=3u8 {
            e.spawn(n);
        }
        e
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// Starts server `n` (again, on the same data directory) unless it runs.
    pub fn spawn(&mut self, n: u8) {
        let slot = &mut self.children[usize::from(n - 1)];
        if slot.is_none() {
            let log = self.dir.path().join(format!("server{n}.stderr"));
            let err = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
            *slot = Some(spawn_warden(&self.dir.path().join(format!("zoo{n}.cfg")), err));
        }
    }

    /// Kills server `n` with SIGKILL (by its PID) and reaps it.
    pub fn kill(&mut self, n: u8) {
        stop(self.children[usize::from(n - 1)].take());
    }

    /// How server `n`'s process ended, if it was started and has exited (it is reaped then, and
    /// [`Ensemble::spawn`] starts it again).
    pub fn exited(&mut self, n: u8) -> Option<std::process::ExitStatus> {
        let slot = &mut self.children[usize::from(n - 1)];
        let status = slot.as_mut()?.try_wait().expect("wait for a server")?;
        *slot = None;
        Some(status)
    }

    /// The last `lines` error lines of server `n`'s stderr log (`ERROR` log lines and the `Error:`
    /// line a failed `main` prints), or its last lines if it has none.
    pub fn log_errors(&self, n: u8, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(format!("server{n}.stderr"))).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        let mut errors: Vec<&str> =
            all.iter().copied().filter(|l| l.contains(" ERROR ") || l.starts_with("Error:")).collect();
        if errors.is_empty() {
            errors = all;
        }
        errors[errors.len().saturating_sub(lines)..].join("\n")
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to server `n`'s process, if it runs.
    pub fn signal(&self, n: u8, signal: &str) {
        if let Some(c) = &self.children[usize::from(n - 1)] {
            run("kill", &[&format!("-{signal}"), &c.id().to_string()]);
        }
    }
}

pub fn client_addr(n: u8) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(ip(n)), 2181)
}

/// Server `n`'s `Mode:` from `srvr`, `None` if it does not answer.
pub fn mode(n: u8) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&client_addr(n), Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"srvr").ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().find_map(|l| l.strip_prefix("Mode: ").map(str::to_owned))
}

pub fn modes(servers: &[u8]) -> Vec<(u8, Option<String>)> {
    servers.iter().map(|&n| (n, mode(n))).collect()
}

/// Polls until exactly one of `servers` leads and the others follow, for at most `within`;
/// returns the leader, or the modes last seen.
pub fn find_leader(servers: &[u8], within: Duration) -> Result<u8, Vec<(u8, Option<String>)>> {
    let deadline = Instant::now() + within;
    loop {
        let m = modes(servers);
        let leaders: Vec<u8> = m.iter().filter(|(_, m)| m.as_deref() == Some("leader")).map(|(n, _)| *n).collect();
        let followers = m.iter().filter(|(_, m)| m.as_deref() == Some("follower")).count();
        if leaders.len() == 1 && followers + 1 == servers.len() {
            return Ok(leaders[0]);
        }
        if Instant::now() >= deadline {
            return Err(m);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls until exactly one of `servers` leads and the others follow; returns the leader.
pub fn wait_leader(servers: &[u8]) -> u8 {
    find_leader(servers, ELECT).unwrap_or_else(|m| panic!("no leader among {servers:?} within {ELECT:?}: {m:?}"))
}
