//! The tokio shell around the pure node: client listener, connection tasks, the task that owns the
//! `Node`, timers and four-letter words. Protocol decisions live in `warden-node`; this crate moves
//! bytes and time in and carries actions out.

pub mod config;
mod connection;
mod fourlw;
mod owner;

use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

pub use config::Config;

/// The version string Warden reports where ZooKeeper reports its own: a 3.9 server, so clients
/// enable 3.9 features, followed by Warden's own version.
pub const ZK_VERSION: &str = concat!("3.9.3-warden-", env!("CARGO_PKG_VERSION"));
/// Build time in ZooKeeper's `srvr` format.
pub const BUILT_ON: &str = env!("WARDEN_BUILT_ON");

/// A running server; dropping the shutdown sender stops it.
pub struct Server {
    pub local_addr: std::net::SocketAddr,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Binds the client port and starts serving.
    pub async fn start(cfg: Config) -> anyhow::Result<Server> {
        std::fs::create_dir_all(&cfg.data_dir).with_context(|| format!("creating dataDir {}", cfg.data_dir.display()))?;
        let listener = TcpListener::bind(cfg.client_addr()).await.with_context(|| format!("binding {}", cfg.client_addr()))?;
        let local_addr = listener.local_addr()?;
        for (k, v) in &cfg.ignored {
            tracing::warn!(key = %k, value = %v, "zoo.cfg key not used by Warden; accepted and ignored");
        }
        let cfg = Arc::new(cfg);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (events_tx, events_rx) = mpsc::channel(owner::EVENT_QUEUE);
        let owner = owner::Owner::new(cfg.clone(), events_rx, shutdown_rx.clone());
        let owner_task = tokio::spawn(owner.run());
        let accept = connection::accept_loop(listener, cfg, events_tx, shutdown_rx);
        let task = tokio::spawn(async move {
            accept.await;
            owner_task.await.context("owner task panicked")?
        });
        tracing::info!(addr = %local_addr, "serving clients");
        Ok(Server { local_addr, shutdown, task })
    }

    /// Stops accepting, closes connections, and waits for every task to end.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        self.task.await.context("server task panicked")?
    }
}
