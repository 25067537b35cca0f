//! `warden bench --workload reconnect` against three `warden serve` processes (issue 31's reconnect
//! storm, small): 60 raw-protocol sessions spread over the ensemble, the leader killed with
//! SIGKILL by the bench itself (`--kill-pid`), and every session must come back on the survivors
//! with its own session id, none expired. The followers drop their clients while they elect, so
//! all 60 sessions reconnect, not only the dead leader's third. Every process started is killed
//! by its PID at the end (also on failure).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::mixed::mode;
use common::{free_port, spawn_warden, stop, WorkDir};

const SESSIONS: usize = 60;

struct Servers {
    dir: WorkDir,
    clients: Vec<SocketAddr>,
    children: Vec<Option<Child>>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.children {
            stop(c.take());
        }
    }
}

impl Servers {
    fn start() -> Servers {
        let dir = WorkDir::new("warden-reconnect-");
        let ports: Vec<(u16, u16, u16)> = (0..3).map(|_| (free_port(), free_port(), free_port())).collect();
        let servers: String =
            ports.iter().enumerate().map(|(i, (_, q, e))| format!("server.{}=127.0.0.1:{q}:{e}\n", i + 1)).collect();
        let mut s = Servers { dir, clients: Vec::new(), children: Vec::new() };
        for (i, (c, _, _)) in ports.iter().enumerate() {
            let id = i as u64 + 1;
            let data = s.dir.member_data_dir(id);
            let cfg = s.dir.path().join(format!("zoo{id}.cfg"));
            std::fs::write(
                &cfg,
                format!(
                    "tickTime=500\ninitLimit=20\nsyncLimit=10\nclientPort={c}\nclientPortAddress=127.0.0.1\n\
                     dataDir={}\nmaxClientCnxns=0\n4lw.commands.whitelist=*\npreAllocSize=1024\n{servers}",
                    data.display()
                ),
            )
            .unwrap();
            let err = std::fs::File::create(s.dir.path().join(format!("server{id}.stderr"))).unwrap();
            s.clients.push(format!("127.0.0.1:{c}").parse().unwrap());
            s.children.push(Some(spawn_warden(&cfg, err)));
        }
        s
    }

    /// The index of the one leader, once the other two follow.
    fn wait_leader(&mut self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for (i, c) in self.children.iter_mut().enumerate() {
                if let Some(status) = c.as_mut().and_then(|c| c.try_wait().unwrap()) {
                    panic!("server.{} exited: {status}", i + 1);
                }
            }
            let modes: Vec<Option<String>> = self.clients.iter().map(|a| mode(*a)).collect();
            let leaders: Vec<usize> = (0..3).filter(|&i| modes[i].as_deref() == Some("leader")).collect();
            let followers = modes.iter().filter(|m| m.as_deref() == Some("follower")).count();
            if leaders.len() == 1 && followers == 2 {
                return leaders[0];
            }
            assert!(Instant::now() < deadline, "no leader with two followers within 30 s: {modes:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn every_session_is_reestablished_on_the_survivors_after_kill_9_of_the_leader() {
    let mut servers = Servers::start();
    let leader = servers.wait_leader();
    let pid = servers.children[leader].as_ref().unwrap().id();
    let json = servers.dir.path().join("reconnect.json");
    let connect: Vec<String> = servers.clients.iter().map(|a| a.to_string()).collect();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["bench", "--workload", "reconnect", "--servers", &connect.join(",")])
        .args(["--sessions", &SESSIONS.to_string(), "--depth", "16", "--session-timeout", "10s", "--warmup", "1s"])
        .args(["--kill-pid", &pid.to_string(), "--json"])
        .arg(&json)
        .stdin(Stdio::null())
        .output()
        .expect("run warden bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}bench took {:.1} s", started.elapsed().as_secs_f64());
    // The bench killed the leader: reap it.
    let mut dead = servers.children[leader].take().unwrap();
    let status = dead.wait().unwrap();
    assert!(!status.success(), "the leader was not killed: {status}");
    assert!(out.status.success(), "warden bench failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);

    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let n = |key: &str| r[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {r}"));
    assert_eq!(n("established"), SESSIONS as u64, "{r}");
    assert_eq!(n("drops_before_kill"), 0, "{r}");
    // The followers close their clients' connections when their leader goes, as ZooKeeper's do.
    assert_eq!(n("disconnected"), SESSIONS as u64, "every session reconnects: {r}");
    assert_eq!(n("reestablished"), SESSIONS as u64, "{r}");
    assert_eq!(n("expired"), 0, "{r}");
    assert_eq!(n("not_reestablished"), 0, "{r}");
    assert_eq!(n("errors"), 0, "{r}");
    let last = r["kill_to_last_reconnect_ms"].as_f64().expect("kill_to_last_reconnect_ms");
    let (p50, p99) = (r["reconnect_p50_ms"].as_f64().unwrap(), r["reconnect_p99_ms"].as_f64().unwrap());
    assert!(0.0 < p50 && p50 <= p99 && p99 <= last + 1.0, "{r}");
    assert!(last < 15_000.0, "the sessions took {last} ms to come back: {r}");
}
