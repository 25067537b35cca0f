//! `warden`: a ZooKeeper-compatible coordination service.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use warden_server::{Config, Server};

mod bench;
mod cli;
mod data_export;
mod data_tools;
mod floor;

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
    /// Read a ZooKeeper-format data directory (Warden's or Apache ZooKeeper's) without a server.
    #[command(subcommand)]
    Data(DataCommand),
    /// Load-test a ZooKeeper-compatible ensemble (Warden or Apache ZooKeeper) over the client protocol.
    Bench(bench::BenchArgs),
    /// Measure the floor of a synchronous standalone write on this machine (loopback round trip
    /// plus append and fdatasync), to compare servers' synchronous write latency with.
    Floor(floor::FloorArgs),
    /// Print every zoo.cfg key Warden reads (what it does, its default, its other spellings) and
    /// the ZooKeeper keys it accepts but ignores, with the reason; as Markdown (docs/zoo-cfg.md).
    ConfigKeys,
    /// A command-line client like Apache ZooKeeper's zkCli.sh: `warden cli -server host:port
    /// [-timeout ms] [-r] [cmd args...]`; interactive (history, Tab completion) without a command.
    Cli(cli::CliArgs),
}

#[derive(Subcommand)]
enum DataCommand {
    /// Print every txn of a transaction log file (`version-2/log.<zxid>`).
    Log { file: PathBuf },
    /// Print the nodes and sessions of a snapshot file (`version-2/snapshot.<zxid>`).
    Snapshot {
        file: PathBuf,
        /// Also print each node's data, hex-encoded.
        #[arg(long)]
        data: bool,
    },
    /// Verify the checksums of every snapshot and log file; exits non-zero if any is damaged.
    Verify {
        /// The dataDir (holding `version-2/`).
        data_dir: PathBuf,
        /// The dataLogDir, when logs live apart from snapshots.
        #[arg(long)]
        log_dir: Option<PathBuf>,
    },
    /// Print every znode of a data directory as JSON lines (path, data in base64, ACL, Stat),
    /// reading it without changing it (a running server may own it).
    Export {
        /// The dataDir (holding `version-2/`).
        data_dir: PathBuf,
        /// The dataLogDir, when it differs.
        #[arg(long)]
        log_dir: Option<PathBuf>,
    },
    /// Write the JSON lines of `export` (from FILE, or `-` for standard input) as one snapshot
    /// into an empty data directory, which Warden or Apache ZooKeeper can then start from.
    Import {
        file: PathBuf,
        /// The dataDir to write into (its `version-2/` must hold no snapshot or log).
        data_dir: PathBuf,
        /// Keep ephemeral nodes (their sessions are not carried over: nothing would remove them).
        #[arg(long)]
        keep_ephemerals: bool,
    },
    /// Compare two trees, each a data directory or a live server (`host:port[,...]`); prints
    /// `< path` (left only), `> path` (right only), `! path (data, acl, stat)`; exits 1 when they
    /// differ.
    Diff {
        left: String,
        right: String,
        /// Compare Stats too (czxid, versions, times, ...), not only data and ACLs.
        #[arg(long)]
        stat: bool,
        /// Authenticate to a live server first (`scheme:credentials`, e.g. `digest:user:password`,
        /// as zkCli's addauth); repeatable.
        #[arg(long)]
        auth: Vec<String>,
    },
}

/// How `warden serve` writes its log lines to standard error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines: time, level, target, message and fields (colours only on a terminal).
    Plain,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (`message` among them)
    /// and, inside spans, `span` and `spans`; for journald, Loki, Elasticsearch and the like.
    Json,
}

#[derive(clap::Args)]
#[command(after_help = "Environment: ZOO_CFG (the zoo.cfg path, when not given as an argument), \
WARDEN_LOG_FORMAT (--log-format), RUST_LOG (wins over --log), SERVER_JVMFLAGS and JVMFLAGS \
(-Dzookeeper.* system properties, as zkServer.sh passes them), TOKIO_WORKER_THREADS.

Every zoo.cfg key Warden reads, and those it accepts but ignores: `warden config-keys` \
(also docs/zoo-cfg.md).")]
struct ServeArgs {
    /// A Java-style zoo.cfg (tickTime, dataDir, clientPort, ...); `warden config-keys` lists the
    /// keys. Unknown keys are accepted with a warning.
    #[arg(env = "ZOO_CFG")]
    zoo_cfg: Option<PathBuf>,
    /// Super user digest `user:BASE64(SHA1(user:password))`, as
    /// -Dzookeeper.DigestAuthenticationProvider.superDigest; a client authenticated as it bypasses ACLs.
    #[arg(long, value_name = "USER:DIGEST")]
    super_digest: Option<String>,
    /// Read-only mode (readonlymode.enabled): an ensemble member that has been looking for a
    /// leader for max(2 s, tickTime) serves read-only clients (reads only). A standalone server is
    /// always read-write.
    #[arg(long)]
    read_only: bool,
    /// Override the client port from the config.
    #[arg(long)]
    port: Option<u16>,
    /// JAAS login configuration file for SASL (its `Server` section, or the one named by
    /// zoo.cfg's `sasl.serverconfig`). Wins over zoo.cfg's `jaasLoginConfig`, which wins over a
    /// `-Djava.security.auth.login.config=FILE` in $SERVER_JVMFLAGS / $JVMFLAGS (zkServer.sh's).
    #[arg(long, value_name = "FILE")]
    jaas: Option<PathBuf>,
    /// Log filter, e.g. `info` or `warden_server=debug` (also RUST_LOG).
    #[arg(long, default_value = "info")]
    log: String,
    /// Log line format on standard error: `plain` text or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Plain, env = "WARDEN_LOG_FORMAT")]
    log_format: LogFormat,
    /// Threads that run the connections and the request pipeline. Default: the
    /// TOKIO_WORKER_THREADS environment variable if set, else one fewer than the CPUs available,
    /// at least one: the transaction log and snapshots have threads of their own. With one, the
    /// process's main thread runs them (a single-threaded runtime); with more, tokio worker threads.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: Option<u16>,
}

/// Worker threads when neither `--worker-threads` nor TOKIO_WORKER_THREADS says: one core is left
/// to the storage thread (append, fdatasync) and the snapshot thread. On two cores one worker also
/// spares every request its hand-offs between workers (docs/benchmarks.md, "Stop 15").
fn default_worker_threads(cpus: usize) -> usize {
    cpus.saturating_sub(1).max(1)
}

/// The worker count: the flag, else TOKIO_WORKER_THREADS (a positive integer, as tokio requires),
/// else the default for this machine's CPUs.
fn worker_threads(flag: Option<u16>) -> anyhow::Result<usize> {
    if let Some(n) = flag {
        return Ok(n.into());
    }
    match std::env::var("TOKIO_WORKER_THREADS") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => anyhow::bail!("TOKIO_WORKER_THREADS must be a positive integer, not {v:?}"),
        },
        Err(std::env::VarError::NotPresent) => {
            Ok(default_worker_threads(std::thread::available_parallelism().map_or(1, usize::from)))
        }
        Err(e) => anyhow::bail!("TOKIO_WORKER_THREADS: {e}"),
    }
}

/// The runtime for `workers` threads. One worker is a single-threaded runtime on the calling (main)
/// thread: the multi-threaded scheduler's hand-offs buy nothing with one worker, and the main
/// thread allocates from glibc's main heap, which grows by `brk` with padding, where a worker
/// thread's own arena grows by an `mprotect` call per page or so (a create benchmark: 972 `brk`
/// calls against 15,987 `mprotect` calls in 2 s; docs/benchmarks.md, "Stop 16").
fn runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if workers == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build()
    }
}

// Each subcommand's entry is `#[inline(never)]`: inlined, their locals (the bench's future among
// them) made `main`'s frame about 95 KB, which a server kept resident for its whole life.
fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Command::Serve(args) => serve(args),
        Command::Bench(args) => bench::run(args),
        Command::Floor(args) => floor::run(args),
        Command::Cli(args) => std::process::exit(cli::run(args)?),
        Command::Data(cmd) => data(cmd),
        Command::ConfigKeys => {
            print!("{}", warden_server::config_keys::reference());
            Ok(())
        }
    }
}

/// The records of a data directory (an existing path) or a live server (anything else).
fn tree_records(what: &str, auth: &[String]) -> anyhow::Result<Vec<data_export::NodeRecord>> {
    if std::path::Path::new(what).is_dir() {
        return Ok(data_export::records(&data_export::load(std::path::Path::new(what), None)?));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(data_export::live_records(what, auth))
}

fn data_diff(left: &str, right: &str, stat: bool, auth: &[String]) -> anyhow::Result<Vec<data_export::Difference>> {
    Ok(data_export::diff(&tree_records(left, auth)?, &tree_records(right, auth)?, stat))
}

#[inline(never)]
fn data(cmd: DataCommand) -> anyhow::Result<()> {
    let text = match cmd {
        DataCommand::Log { file } => data_tools::print_log(&file)?,
        DataCommand::Snapshot { file, data } => data_tools::print_snapshot(&file, data)?,
        DataCommand::Verify { data_dir, log_dir } => data_tools::verify(&data_dir, log_dir.as_deref())?,
        DataCommand::Export { data_dir, log_dir } => {
            let stdout = std::io::stdout();
            let n = data_export::export(&data_dir, log_dir.as_deref(), &mut stdout.lock())?;
            eprintln!("{n} znodes exported");
            return Ok(());
        }
        DataCommand::Import { file, data_dir, keep_ephemerals } => {
            let done = if file.as_os_str() == "-" {
                data_export::import(&mut std::io::stdin().lock(), &data_dir, keep_ephemerals)?
            } else {
                let f = std::fs::File::open(&file).with_context(|| format!("opening {}", file.display()))?;
                data_export::import(&mut std::io::BufReader::new(f), &data_dir, keep_ephemerals)?
            };
            format!(
                "{} znodes written to {} (zxid {:#x}); {} ephemeral znodes left out\n",
                done.nodes,
                done.file.display(),
                done.zxid,
                done.skipped_ephemerals
            )
        }
        DataCommand::Diff { left, right, stat, auth } => {
            let differences = data_diff(&left, &right, stat, &auth)?;
            for d in &differences {
                println!("{d}");
            }
            if !differences.is_empty() {
                eprintln!("{} differences", differences.len());
                std::process::exit(1);
            }
            "the trees are equal\n".to_string()
        }
    };
    print!("{text}");
    Ok(())
}

/// The log subscriber: RUST_LOG (when set and valid) else `--log` as the filter, lines in `format`
/// on standard error. Plain lines are coloured only when standard error is a terminal and
/// NO_COLOR is unset, so a journal or a file gets no escape codes.
fn init_logging(filter: &str, format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => {
            let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(ansi).init()
        }
        LogFormat::Json => builder.json().init(),
    }
}

#[inline(never)]
fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(&args.log, args.log_format);
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
    // What a ZooKeeper start script would pass its JVM (zkServer.sh: the later flag wins).
    let jvm_flags = warden_server::config::jvm_flags_from_env();
    {
        let taken = cfg.apply_jvm_flags(&jvm_flags);
        if !taken.is_empty() {
            tracing::info!(properties = ?taken, "settings from -D flags in SERVER_JVMFLAGS/JVMFLAGS");
        }
    }
    if let Some(j) = args.jaas {
        cfg.sasl.jaas_file = Some(j);
    } else if cfg.sasl.jaas_file.is_none() {
        if let Some(path) = warden_server::sasl::jaas::login_config_from_jvm_flags(&jvm_flags) {
            tracing::info!(%path, "JAAS file from -Djava.security.auth.login.config in SERVER_JVMFLAGS/JVMFLAGS");
            cfg.sasl.jaas_file = Some(PathBuf::from(path));
        }
    }
    // Process-wide settings (krb5's configuration and keytab variables) before any thread exists.
    if std::env::var_os("KRB5_CONFIG").is_none() {
        if let Some(conf) = warden_server::sasl::jaas::jvm_property(&jvm_flags, "java.security.krb5.conf") {
            tracing::info!(%conf, "krb5 configuration from -Djava.security.krb5.conf in SERVER_JVMFLAGS/JVMFLAGS");
            std::env::set_var("KRB5_CONFIG", conf);
        }
    }
    warden_server::raise_fd_limit();
    warden_server::sasl::SaslServer::prepare_process(&cfg.sasl)?;
    warden_server::sasl::quorum::prepare_process(&cfg.quorum_sasl, cfg.sasl.jaas_file.as_deref())
        .map_err(|e| anyhow::anyhow!("SASL between servers (quorum.auth.*): {e}"))?;
    let rt = runtime(worker_threads(args.worker_threads)?)?;
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
