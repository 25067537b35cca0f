//! `warden`: a ZooKeeper-compatible coordination service.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use warden_server::{Config, Server};

#[derive(Parser)]
#[command(name = "warden", version, about = "A ZooKeeper-compatible coordination service")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve clients. With no ZOO_CFG: 127.0.0.1:2181, data directory ./warden-data.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// A Java-style zoo.cfg (tickTime, dataDir, clientPort, ...). Unknown keys are accepted with a warning.
    zoo_cfg: Option<PathBuf>,
    /// Super user digest `user:BASE64(SHA1(user:password))`, as
    /// -Dzookeeper.DigestAuthenticationProvider.superDigest; a client authenticated as it bypasses ACLs.
    #[arg(long, value_name = "USER:DIGEST")]
    super_digest: Option<String>,
    /// Accept read-only clients (readonlymode.enabled). Accepted for compatibility; a standalone
    /// server is always read-write.
    #[arg(long)]
    read_only: bool,
    /// Override the client port from the config.
    #[arg(long)]
    port: Option<u16>,
    /// Log filter, e.g. `info` or `warden_server=debug` (also RUST_LOG).
    #[arg(long, default_value = "info")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Command::Serve(args) => serve(args),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&args.log));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let mut cfg = match &args.zoo_cfg {
        Some(path) => Config::load(path).with_context(|| format!("loading {}", path.display()))?,
        None => Config::default(),
    };
    if let Some(d) = args.super_digest {
        cfg.super_digest = Some(d);
    }
    if args.read_only {
        cfg.read_only = true;
    }
    if let Some(p) = args.port {
        cfg.client_port = p;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let mut server = Server::start(cfg).await?;
        tokio::select! {
            r = wait_for_signal() => {
                r?;
                tracing::info!("shutting down");
                server.stop().await
            }
            r = server.wait() => r,
        }
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
