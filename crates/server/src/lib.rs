//! The tokio shell around the pure node: client listener, connection tasks, the task that owns the
//! `Node`, timers and four-letter words. Protocol decisions live in `warden-node`; this crate moves
//! bytes and time in and carries actions out.

pub mod admin;
mod civil;
pub mod config;
pub mod config_keys;
mod conn_queue;
mod connection;
pub mod dynamic_config;
pub mod election;
mod ensemble;
mod fourlw;
mod metrics;
mod owner;
mod peer_conn;
pub mod quorum_net;
pub mod sasl;
mod snapshot;
mod storage;
pub mod tls;

use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use warden_storage::{DataDir, Store};

pub use config::Config;

/// The version string Warden reports where ZooKeeper reports its own: a 3.9 server, so clients
/// enable 3.9 features, followed by Warden's own version.
/// The wall clock in ms since the Unix epoch (0 before it).
pub(crate) fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

pub const ZK_VERSION: &str = concat!("3.9.3-warden-", env!("CARGO_PKG_VERSION"));
/// Build time as ZooKeeper 3.5+ prints it after "built on" (`yyyy-MM-dd HH:mm UTC`).
pub const BUILT_ON: &str = env!("WARDEN_BUILT_ON");

/// A running server; dropping the shutdown sender stops it.
pub struct Server {
    pub local_addr: std::net::SocketAddr,
    /// The `secureClientPort` listener's address, when there is one.
    pub secure_addr: Option<std::net::SocketAddr>,
    /// The AdminServer's address, when it runs.
    pub admin_addr: Option<std::net::SocketAddr>,
    /// The Prometheus endpoint's address, when `metricsProvider.className` asks for it.
    pub metrics_addr: Option<std::net::SocketAddr>,
    shutdown: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Binds the client port and starts serving.
    pub async fn start(cfg: Config) -> anyhow::Result<Server> {
        let ensemble = cfg.servers.len() > 1;
        if ensemble && cfg.my_id.is_none() {
            anyhow::bail!(
                "zoo.cfg lists {} servers but {} has no myid file",
                cfg.servers.len(),
                cfg.data_dir.display()
            );
        }
        cfg.enforced_auth_schemes()?;
        let sasl = Arc::new(sasl::SaslServer::load(&cfg.sasl)?);
        std::fs::create_dir_all(&cfg.data_dir)
            .with_context(|| format!("creating dataDir {}", cfg.data_dir.display()))?;
        let listener = bind_client_port(cfg.client_addr()).with_context(|| format!("binding {}", cfg.client_addr()))?;
        let local_addr = listener.local_addr()?;
        let tls = match cfg.client_tls().context("client TLS (ssl.*)")? {
            Some(settings) => Some(Arc::new(tls::TlsContext::new(settings).context("client TLS (ssl.*)")?)),
            None => None,
        };
        let wire = match (&tls, cfg.client_port_unification) {
            (Some(t), true) => connection::Wire::Unified(t.clone()),
            (None, true) => anyhow::bail!("client.portUnification needs ssl.keyStore.location"),
            _ => connection::Wire::Plain,
        };
        let secure = match (cfg.secure_client_addr(), &tls) {
            (None, _) => None,
            (Some(addr), None) => anyhow::bail!("secureClientPort {} needs ssl.keyStore.location", addr.port()),
            (Some(addr), Some(t)) => {
                let l = bind_client_port(addr).with_context(|| format!("binding secureClientPort {addr}"))?;
                tracing::info!(addr = %l.local_addr()?, "serving TLS clients");
                Some((l, t.clone()))
            }
        };
        let secure_addr = secure.as_ref().map(|(l, _)| l.local_addr()).transpose()?;
        let metrics_listener = match cfg.metrics_provider {
            config::MetricsProvider::Prometheus => Some(admin::bind_metrics(&cfg.metrics).await?),
            config::MetricsProvider::Default => None,
        };
        let mut cfg = cfg;
        // `conf` reports the ports actually bound (zoo.cfg may say 0).
        cfg.client_port = local_addr.port();
        if let Some(a) = secure_addr {
            cfg.secure_client_port = Some(a.port());
        }
        for (k, v) in &cfg.ignored {
            match config_keys::lookup(k).map(|row| row.status) {
                Some(config_keys::KeyStatus::Ignored { why, .. }) => {
                    tracing::warn!(key = %k, value = %v, why, "zoo.cfg key accepted and ignored")
                }
                _ => tracing::warn!(key = %k, value = %v, "unknown zoo.cfg key; ignored (see `warden config-keys`)"),
            }
        }
        let started = std::time::Instant::now();
        let data = DataDir::real(&cfg.data_dir, &cfg.data_log_dir);
        let recovered = data.recover(cfg.pre_alloc_bytes).with_context(|| {
            format!("recovering {} (logs in {})", cfg.data_dir.display(), cfg.data_log_dir.display())
        })?;
        let dbinit = started.elapsed();
        tracing::info!(
            snapshot = ?recovered.snapshot,
            txns_replayed = recovered.txns_after_snapshot.len(),
            zxid = format_args!("{:#x}", recovered.tree.last_processed_zxid()),
            nodes = recovered.tree.znode_count(),
            ms = dbinit.as_millis() as u64,
            "recovered data"
        );
        let cfg = Arc::new(cfg);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (events_tx, events_rx) = mpsc::channel(owner::EVENT_QUEUE);
        let quorum = match ensemble {
            true => {
                let last_zxid = recovered.tree.last_processed_zxid();
                // ZooKeeper's defaults for missing epoch files.
                let (accepted, current) = data
                    .read_epochs(last_zxid)
                    .with_context(|| format!("reading the epoch files in {}", cfg.data_dir.display()))?;
                let ens = ensemble::Ensemble::start(&cfg, last_zxid, current).await?;
                let setup = owner::quorum_setup(&cfg, ens.my_sid, accepted, current);
                Some((ens, setup))
            }
            false => None,
        };
        let store = Store::new(data.clone(), cfg.pre_alloc_bytes, recovered.log);
        let log_activity = snapshot::LogActivity::new();
        let (storage, storage_thread) = storage::spawn(store, cfg.force_sync, log_activity.clone(), events_tx.clone())?;
        let retain = cfg.purge_enabled.then_some(cfg.snap_retain_count);
        let log_reader = owner::LogReader { data: data.clone(), events: events_tx.downgrade() };
        let (snapshots, snapshot_thread) = snapshot::spawn(data, retain, log_activity)?;
        let edge = Arc::new(metrics::EdgeCounters { client_tls: tls.clone(), ..Default::default() });
        let mut owner = owner::Owner::new(
            cfg.clone(),
            events_rx,
            log_reader,
            shutdown_rx.clone(),
            storage,
            snapshots,
            quorum,
            edge.clone(),
        );
        owner.record_startup(
            dbinit,
            recovered.txns_after_snapshot.len(),
            recovered.snapshot_load_time,
            recovered.txns_load_time,
        );
        let snapshot_zxid = recovered.snapshot.is_some().then_some(recovered.snapshot_zxid);
        owner.restore(recovered.tree, &recovered.sessions, recovered.txns_after_snapshot, snapshot_zxid);
        let owner_task = tokio::spawn(owner.run());
        let admin_addr = match admin::bind(&cfg.admin).await {
            Some(l) => {
                let addr = l.local_addr().ok();
                let site = admin::Site::Admin { command_url: cfg.admin.command_url.clone() };
                tokio::spawn(admin::serve(l, site, cfg.admin.idle_timeout, events_tx.clone(), shutdown_rx.clone()));
                addr
            }
            None => None,
        };
        let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
        if let Some(l) = metrics_listener {
            let idle = cfg.admin.idle_timeout;
            tokio::spawn(admin::serve(l, admin::Site::Metrics, idle, events_tx.clone(), shutdown_rx.clone()));
        }
        let accept = connection::accept_loop(listener, wire, secure, cfg, sasl, edge, events_tx, shutdown_rx.clone());
        let shutdown = Arc::new(shutdown);
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            let accept_task = tokio::spawn(accept);
            let result = owner_task.await.context("owner task panicked").and_then(|r| r);
            // The owner ended (shutdown, or a fatal storage error): stop accepting as well.
            let _ = stop.send(true);
            let _ = accept_task.await;
            // The storage thread ends once the owner dropped its sender; wait for its last fsync.
            let _ = tokio::task::spawn_blocking(move || {
                let _ = storage_thread.join();
                let _ = snapshot_thread.join();
            })
            .await;
            result
        });
        tracing::info!(addr = %local_addr, "serving clients");
        Ok(Server { local_addr, secure_addr, admin_addr, metrics_addr, shutdown, task })
    }

    /// Waits until the server ends by itself (a fatal storage error) or after `stop`.
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        (&mut self.task).await.context("server task panicked")?
    }

    /// Stops accepting, closes connections, and waits for every task to end.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        self.wait().await
    }
}

/// Raises this process's soft limit on open files to its hard limit, as a server with tens of
/// thousands of client connections needs (each is a descriptor), and logs both. Call once at
/// start, before any connection is accepted.
pub fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let before = getrlimit(Resource::Nofile);
    let mut raised = before;
    raised.current = before.maximum;
    let result = if raised.current == before.current { Ok(()) } else { setrlimit(Resource::Nofile, raised) };
    let now = getrlimit(Resource::Nofile);
    let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
    match result {
        Ok(()) => tracing::info!(
            soft = %show(now.current),
            hard = %show(now.maximum),
            was = %show(before.current),
            "open files limit (RLIMIT_NOFILE): each client connection takes one"
        ),
        Err(e) => tracing::warn!(
            soft = %show(now.current),
            hard = %show(now.maximum),
            error = %e,
            "could not raise the open files limit to its hard limit"
        ),
    }
}

/// The listen backlog of the client ports; the kernel caps it at `net.core.somaxconn` (4096 by
/// default since Linux 5.4). `TcpListener::bind` listens with 128 (the standard library's), and
/// when thousands of sessions reconnect at once after a leader dies, an accept queue of 128
/// overflows: the kernel drops the SYNs, and each of those clients waits out a one-second SYN
/// retransmit (`ListenOverflows` in /proc/net/netstat; `scripts/bench-reconnect`).
const CLIENT_LISTEN_BACKLOG: u32 = 4096;

/// Binds a client port with [`CLIENT_LISTEN_BACKLOG`] and SO_REUSEADDR (as `TcpListener::bind`).
fn bind_client_port(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(CLIENT_LISTEN_BACKLOG)
}

#[cfg(test)]
mod fd_limit_tests {
    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        super::raise_fd_limit();
        let l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(l.current, l.maximum);
    }
}
