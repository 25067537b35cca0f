//! Runs [`CliCommand`]s against a ZooKeeper-compatible server with the `zookeeper-client` crate,
//! printing what zkCli prints: results on standard output, `Created ...` and errors on standard
//! error; watch events as `WATCHER::` blocks. Keeps zkCli's shell state: the connection, the
//! history, `printwatches`, the last exit code.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_lite::future;
use zookeeper_client as zk;

use super::command::{self, AddWatchMode, CliCommand, CreateKind, QuotaField, Reconfig, WatcherType};
use super::format::{self, StatsTrack};

/// A failed command: zkCli's message (printed on standard error) and exit code.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub exit_code: i32,
}

impl CliError {
    fn new(message: impl Into<String>) -> CliError {
        CliError { message: message.into(), exit_code: 1 }
    }
}

type Res<T> = Result<T, CliError>;

/// What the caller does after a line: read the next one, or stop (`quit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Quit,
}

/// The kinds of watch zkCli's client keeps per path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WatchKind {
    /// Set by `get -w`, `stat -w`, `config -w` (data and exists watches).
    Data,
    /// Set by `ls -w`.
    Child,
    /// Set by `addWatch` (either mode).
    Persistent,
}

enum Watcher {
    Oneshot(Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>),
    Persistent(zk::PersistentWatcher),
}

struct WatchReg {
    path: String,
    kind: WatchKind,
    watcher: Watcher,
}

/// The connection state, named as zkCli's prompt names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    Connected,
    ConnectedReadOnly,
    Closed,
}

impl ConnState {
    pub fn prompt_name(self) -> &'static str {
        match self {
            ConnState::Connected => "CONNECTED",
            ConnState::ConnectedReadOnly => "CONNECTEDREADONLY",
            ConnState::Closed => "CLOSED",
        }
    }
}

/// Connection options from the command line.
#[derive(Clone, Debug)]
pub struct Options {
    pub server: String,
    pub timeout: Duration,
    pub readonly: bool,
}

/// zkCli's shell: a client, its watches and the shell's state.
pub struct Shell {
    rt: tokio::runtime::Runtime,
    opts: Options,
    host: String,
    client: Option<zk::Client>,
    /// The same client for the completer, which must not keep a closed session alive.
    shared: std::sync::Arc<std::sync::Mutex<Option<zk::Client>>>,
    state_watcher: Option<zk::StateWatcher>,
    watches: Vec<WatchReg>,
    /// Events to print (state, type, path), in order.
    pending: Vec<(String, String, Option<String>)>,
    pub print_watches: bool,
    pub history: BTreeMap<i64, String>,
    pub count: i64,
    pub exit_code: i32,
}

const QUOTA_ROOT: &str = "/zookeeper/quota";
const LIMIT_NODE: &str = "zookeeper_limits";
const STAT_NODE: &str = "zookeeper_stats";

/// The commands of the shell itself, which need no connection.
pub fn is_shell_command(name: &str) -> bool {
    matches!(name, "quit" | "redo" | "history" | "printwatches" | "connect" | "help")
}

/// zkCli's message for a server error on `path` (`CliWrapperException`'s wording, else
/// `KeeperException`'s `KeeperErrorCode = ... for path`).
pub fn keeper_error(e: &zk::Error, path: &str) -> String {
    use zk::Error as E;
    let code = match e {
        E::NoNode => return format!("Node does not exist: {path}"),
        E::NoChildrenForEphemerals => return format!("Ephemerals cannot have children: {path}"),
        E::NodeExists => return format!("Node already exists: {path}"),
        E::NotEmpty => return format!("Node not empty: {path}"),
        E::NotReadOnly => return format!("Not a read-only call: {path}"),
        E::InvalidAcl => return format!("Acl is not valid : {path}"),
        E::NoAuth => return format!("Insufficient permission : {path}"),
        E::BadArguments(_) => return format!("Arguments are not valid : {path}"),
        E::BadVersion => return format!("version No is not valid : {path}"),
        E::QuotaExceeded => return format!("Quota has exceeded : {path}"),
        E::ConnectionLoss => "ConnectionLoss",
        E::SessionExpired => "Session expired",
        E::Unimplemented => "Unimplemented",
        E::ReconfigDisabled => "Reconfig is disabled",
        E::NoWatcher => "No such watcher",
        E::SessionMoved => "Session moved",
        E::Throttled => "Op throttled due to high load",
        E::AuthFailed => "AuthFailed",
        E::MarshallingError => "MarshallingError",
        E::Timeout => "OperationTimeout",
        other => return format!("warden cli: {other}"),
    };
    format!("KeeperErrorCode = {code} for {path}")
}

/// `KeeperErrorCode = ...` without a path, as zkCli prints errors of calls that carry none.
fn keeper_error_no_path(e: &zk::Error) -> String {
    let with = keeper_error(e, "");
    with.strip_suffix(" for ").map(str::to_string).unwrap_or(with)
}

/// ZooKeeper's client-side path check (`PathUtils.validatePath`), with its messages.
pub fn validate_path(path: &str) -> Res<()> {
    let fail = |reason: String| Err(CliError::new(format!("Invalid path string \"{path}\" caused by {reason}")));
    if path.is_empty() {
        return Err(CliError::new("Path length must be > 0"));
    }
    if !path.starts_with('/') {
        return Err(CliError::new("Path must start with / character"));
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err(CliError::new("Path must not end with / character"));
    }
    let chars: Vec<char> = path.chars().collect();
    for i in 1..chars.len() {
        let (c, last) = (chars[i], chars[i - 1]);
        let ends = i + 1 == chars.len() || chars[i + 1] == '/';
        if c == '\0' {
            return fail(format!("null character not allowed @{i}"));
        } else if c == '/' && last == '/' {
            return fail(format!("empty node name specified @{i}"));
        } else if c == '.' && last == '.' {
            if i >= 2 && chars[i - 2] == '/' && ends {
                return fail(format!("relative paths not allowed @{i}"));
            }
        } else if c == '.' {
            if last == '/' && ends {
                return fail(format!("relative paths not allowed @{i}"));
            }
        } else if ('\u{1}'..='\u{1f}').contains(&c)
            || ('\u{7f}'..='\u{9f}').contains(&c)
            || ('\u{e000}'..='\u{f8ff}').contains(&c)
            || ('\u{fff0}'..='\u{ffff}').contains(&c)
        {
            return fail(format!("invalid character @{i}"));
        }
    }
    Ok(())
}

fn child_path(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

fn quota_path(path: &str) -> String {
    format!("{QUOTA_ROOT}{path}")
}

impl Shell {
    /// A shell on its own runtime (one worker thread drives the client's connection, so it
    /// stays live while the caller blocks on input). Connects to `opts.server`.
    pub fn new(opts: Options) -> anyhow::Result<Shell> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let host = opts.server.clone();
        let mut shell = Shell {
            rt,
            opts,
            host,
            client: None,
            shared: Default::default(),
            state_watcher: None,
            watches: Vec::new(),
            pending: Vec::new(),
            print_watches: true,
            history: BTreeMap::new(),
            count: 0,
            exit_code: 0,
        };
        let host = shell.host.clone();
        shell.connect(&host);
        Ok(shell)
    }

    pub fn connected(&self) -> bool {
        self.client.is_some()
    }

    pub fn state(&self) -> ConnState {
        match &self.client {
            None => ConnState::Closed,
            Some(c) if c.session().is_readonly() => ConnState::ConnectedReadOnly,
            Some(_) => ConnState::Connected,
        }
    }

    /// zkCli's prompt: `[zk: host:port(CONNECTED) 3] `.
    pub fn prompt(&self) -> String {
        format!("[zk: {}({}) {}] ", self.host, self.state().prompt_name(), self.count)
    }

    /// The slot holding the live client, for completion.
    pub fn shared_client(&self) -> std::sync::Arc<std::sync::Mutex<Option<zk::Client>>> {
        self.shared.clone()
    }

    fn set_client(&mut self, client: Option<zk::Client>) {
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = client.clone();
        self.client = client;
    }

    /// Closes the session (its last client dropped, the crate sends closeSession) and waits,
    /// briefly, until the server has answered, as zkCli's `close` does; queues the `Closed` event.
    fn close_session(&mut self) {
        if self.client.is_none() {
            return;
        }
        self.set_client(None);
        self.watches.clear();
        if let Some(mut w) = self.state_watcher.take() {
            let wait = async { while !w.changed().await.is_terminated() {} };
            let _ = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), wait).await });
        }
        self.pending.push(("Closed".into(), "None".into(), None));
    }

    pub fn runtime(&self) -> tokio::runtime::Handle {
        self.rt.handle().clone()
    }

    fn connect(&mut self, host: &str) {
        self.close_session();
        self.host = host.to_string();
        let connector =
            zk::Client::connector().with_session_timeout(self.opts.timeout).with_readonly(self.opts.readonly);
        let limit = self.opts.timeout.max(Duration::from_secs(1));
        let result = self.rt.block_on(async { tokio::time::timeout(limit, connector.connect(host)).await });
        match result {
            Ok(Ok(client)) => {
                let state = if client.session().is_readonly() { "ConnectedReadOnly" } else { "SyncConnected" };
                self.pending.push((state.into(), "None".into(), None));
                self.state_watcher = Some(client.state_watcher());
                self.set_client(Some(client));
            }
            Ok(Err(e)) => eprintln!("warden cli: cannot connect to {host}: {e}"),
            Err(_) => eprintln!("warden cli: cannot connect to {host}: no session within {limit:?}"),
        }
    }

    /// Collects the watch and session events that have arrived and prints them (unless
    /// `printwatches off`).
    pub fn flush_events(&mut self) {
        print!("{}", self.take_events());
    }

    /// The watch and session events that have arrived, as zkCli prints them (nothing with
    /// `printwatches off`). A server notification that several of this client's watches share
    /// is printed once, as zkCli's single watcher sees it once.
    pub fn take_events(&mut self) -> String {
        let mut fired = Vec::new();
        let mut i = 0;
        while i < self.watches.len() {
            let reg = &mut self.watches[i];
            let mut remove = false;
            match &mut reg.watcher {
                Watcher::Oneshot(fut) => {
                    if let Some(ev) = self.rt.block_on(future::poll_once(fut.as_mut())) {
                        remove = true;
                        if ev.event_type != zk::EventType::Session {
                            fired.push(ev);
                        }
                    }
                }
                Watcher::Persistent(w) => loop {
                    match self.rt.block_on(future::poll_once(w.changed())) {
                        Some(ev) if ev.event_type == zk::EventType::Session => {
                            if ev.session_state.is_terminated() {
                                remove = true;
                                break;
                            }
                        }
                        Some(ev) => fired.push(ev),
                        None => break,
                    }
                },
            }
            if remove {
                self.watches.remove(i);
            } else {
                i += 1;
            }
        }
        let mut last: Option<(String, String)> = None;
        for ev in fired {
            let key = (format!("{:?}", ev.event_type), ev.path.clone());
            if last.as_ref() == Some(&key) {
                continue;
            }
            last = Some(key.clone());
            self.pending.push((format::state_name(ev.session_state).into(), key.0, Some(ev.path)));
        }
        if let Some(w) = &mut self.state_watcher {
            while let Some(state) = self.rt.block_on(future::poll_once(w.changed())) {
                self.pending.push((format::state_name(state).into(), "None".into(), None));
                if state.is_terminated() {
                    self.state_watcher = None;
                    if state != zk::SessionState::Closed {
                        self.set_client(None);
                    }
                    break;
                }
            }
        }
        let mut text = String::new();
        for (state, kind, path) in std::mem::take(&mut self.pending) {
            if self.print_watches {
                text.push_str(&format::watch_event(&state, &kind, path.as_deref()));
            }
        }
        text
    }

    /// Runs one line as zkCli's `executeLine` does: a blank line is ignored; otherwise the line
    /// joins the history, runs, and the command count goes up.
    pub fn execute_line(&mut self, line: &str) -> Flow {
        let words = command::split_words(line);
        if words.is_empty() {
            return Flow::Continue;
        }
        self.history.insert(self.count, line.to_string());
        let flow = self.process(&words);
        self.count += 1;
        self.flush_events();
        flow
    }

    /// Runs a command given on the command line (one-shot mode). Like zkCli, which exits as
    /// soon as the command is done, it prints the connection's event only before a command that
    /// goes to the server, and no event after the command.
    pub fn execute_words(&mut self, words: &[String]) -> Flow {
        self.process(words)
    }

    fn process(&mut self, words: &[String]) -> Flow {
        match self.process_inner(words) {
            Ok(flow) => {
                self.exit_code = 0;
                flow
            }
            Err(e) => {
                self.exit_code = e.exit_code;
                eprintln!("{}", e.message);
                Flow::Continue
            }
        }
    }

    fn process_inner(&mut self, words: &[String]) -> Res<Flow> {
        let name = words[0].as_str();
        let parsed = command::parse_words(words);
        if let Err(e) = &parsed {
            if e.usage {
                eprint!("{}", format::usage());
                return Err(CliError { message: e.message.clone(), exit_code: e.exit_code });
            }
        }
        // Commands of the shell itself run without a connection; for the others zkCli checks the
        // connection before it parses their flags.
        let shell_cmd = is_shell_command(name);
        if !shell_cmd && self.client.is_none() {
            println!("Not connected");
            return Ok(Flow::Continue);
        }
        let (cmd, warnings) = parsed.map_err(|e| CliError { message: e.message, exit_code: e.exit_code })?;
        for w in warnings {
            eprintln!("{w}");
        }
        if !shell_cmd {
            // Events so far (the connection's, in one-shot mode) come before the command's output.
            self.flush_events();
        }
        self.run(cmd)
    }

    fn c(&self) -> &zk::Client {
        self.client.as_ref().expect("connected: checked before running a command")
    }

    fn block<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    fn register(&mut self, path: &str, kind: WatchKind, watcher: Watcher) {
        self.watches.push(WatchReg { path: path.to_string(), kind, watcher });
    }

    fn oneshot(&mut self, path: &str, kind: WatchKind, w: zk::OneshotWatcher) {
        self.register(path, kind, Watcher::Oneshot(Box::pin(w.changed())));
    }

    fn run(&mut self, cmd: CliCommand) -> Res<Flow> {
        match cmd {
            CliCommand::Quit => {
                self.close_session();
                self.pending.clear();
                return Ok(Flow::Quit);
            }
            CliCommand::Help => eprint!("{}", format::usage()),
            CliCommand::Redo(None) => {}
            CliCommand::Redo(Some(n)) => {
                if self.count <= n || n < 0 {
                    return Err(CliError::new("Command index out of range"));
                }
                let line = self.history.get(&n).cloned().unwrap_or_default();
                let words = command::split_words(&line);
                if words.first().is_some_and(|w| w == "redo") {
                    return Err(CliError::new("No redoing redos"));
                }
                self.history.insert(self.count, line);
                return Ok(self.process(&words));
            }
            CliCommand::History => {
                for i in (self.count - 10).max(0)..=self.count {
                    println!("{i} - {}", self.history.get(&i).map_or("null", String::as_str));
                }
            }
            CliCommand::PrintWatches(None) => {
                println!("printwatches is {}", if self.print_watches { "on" } else { "off" })
            }
            CliCommand::PrintWatches(Some(on)) => self.print_watches = on,
            CliCommand::Connect(host) => {
                let host = host.unwrap_or_else(|| self.host.clone());
                self.connect(&host);
            }
            CliCommand::Close => self.close_session(),
            CliCommand::Version => {
                println!("ZooKeeper CLI version: Warden {} (zkCli 3.8 compatible)", env!("CARGO_PKG_VERSION"))
            }
            CliCommand::Ls { path, stat, watch, recursive } => self.ls(&path, stat, watch, recursive)?,
            CliCommand::Create { path, data, acl, mode, ttl } => self.create(&path, data, acl, mode, ttl)?,
            CliCommand::Get { path, stat, watch } => {
                validate_path(&path)?;
                let (data, st) = if watch {
                    let (d, s, w) = self.block(self.c().get_and_watch_data(&path)).map_err(|e| self.err(&e, &path))?;
                    self.oneshot(&path, WatchKind::Data, w);
                    (d, s)
                } else {
                    self.block(self.c().get_data(&path)).map_err(|e| self.err(&e, &path))?
                };
                println!("{}", String::from_utf8_lossy(&data));
                if stat {
                    print!("{}", format::stat(&st));
                }
            }
            CliCommand::Set { path, data, version, stat } => {
                validate_path(&path)?;
                let st =
                    self.block(self.c().set_data(&path, data.as_bytes(), version)).map_err(|e| self.err(&e, &path))?;
                if stat {
                    print!("{}", format::stat(&st));
                }
            }
            CliCommand::Delete { path, version } => {
                validate_path(&path)?;
                if path == "/" {
                    return Err(CliError::new(keeper_error(&zk::Error::BadArguments(&"root"), "/")));
                }
                self.block(self.c().delete(&path, version)).map_err(|e| self.err(&e, &path))?;
            }
            CliCommand::DeleteAll { path, batch } => self.delete_all(&path, batch)?,
            CliCommand::Stat { path, watch } => {
                validate_path(&path)?;
                let st = if watch {
                    let (s, w) = self.block(self.c().check_and_watch_stat(&path)).map_err(|e| self.err(&e, &path))?;
                    self.oneshot(&path, WatchKind::Data, w);
                    s
                } else {
                    self.block(self.c().check_stat(&path)).map_err(|e| self.err(&e, &path))?
                };
                let st = st.ok_or_else(|| CliError::new(keeper_error(&zk::Error::NoNode, &path)))?;
                print!("{}", format::stat(&st));
            }
            CliCommand::GetAcl { path, stat } => {
                validate_path(&path)?;
                let (acls, st) = self.block(self.c().get_acl(&path)).map_err(|e| self.err(&e, &path))?;
                for a in &acls {
                    print!("{}", format::acl(a));
                }
                if stat {
                    print!("{}", format::stat(&st));
                }
            }
            CliCommand::SetAcl { path, acl, version, stat, recursive } => {
                let (acls, warnings) = format::parse_acl(&acl);
                for w in warnings {
                    eprintln!("{w}");
                }
                validate_path(&path)?;
                if recursive {
                    let mut nodes = Vec::new();
                    self.visit(&path, false, &mut |p| nodes.push(p.to_string()))?;
                    for p in nodes {
                        if let Err(e) = self.block(self.c().set_acl(&p, &acls, version)) {
                            print!("{}", keeper_error_plain(&e, &p));
                        }
                    }
                } else {
                    if acls.is_empty() {
                        // ZooKeeper's client refuses an empty list itself, naming no path.
                        return Err(CliError::new("Acl is not valid : null"));
                    }
                    let st = self.block(self.c().set_acl(&path, &acls, version)).map_err(|e| self.err(&e, &path))?;
                    if stat {
                        print!("{}", format::stat(&st));
                    }
                }
            }
            CliCommand::AddAuth { scheme, auth } => {
                let auth = auth.unwrap_or_default();
                match self.block(self.c().auth(&scheme, auth.as_bytes())) {
                    // Refused credentials end the session, as for zkCli; the session's state
                    // change (an `AuthFailed` event) is the report.
                    Ok(()) | Err(zk::Error::AuthFailed) => {}
                    Err(e) => return Err(CliError::new(keeper_error_no_path(&e))),
                }
            }
            CliCommand::Sync { path } => {
                validate_path(&path)?;
                match self.block(self.c().sync(&path)) {
                    Ok(()) => println!("Sync is OK"),
                    Err(e) => return Err(self.err(&e, &path)),
                }
            }
            CliCommand::AddWatch { path, mode } => {
                validate_path(&path)?;
                let mode = match mode {
                    AddWatchMode::Persistent => zk::AddWatchMode::Persistent,
                    AddWatchMode::PersistentRecursive => zk::AddWatchMode::PersistentRecursive,
                };
                let w = self.block(self.c().watch(&path, mode)).map_err(|e| self.err(&e, &path))?;
                self.register(&path, WatchKind::Persistent, Watcher::Persistent(w));
            }
            CliCommand::RemoveWatches { path, kind, local: _ } => {
                validate_path(&path)?;
                self.flush_events();
                let matches = |r: &WatchReg| {
                    r.path == path
                        && match kind {
                            WatcherType::Children => r.kind == WatchKind::Child,
                            WatcherType::Data => r.kind == WatchKind::Data,
                            WatcherType::Any => true,
                        }
                };
                let removed: Vec<WatchKind> = self.watches.iter().filter(|r| matches(r)).map(|r| r.kind).collect();
                if removed.is_empty() {
                    return Err(CliError::new(format!("KeeperErrorCode = No such watcher for {path}")));
                }
                // Dropping a watcher makes the client remove it from the server.
                self.watches.retain(|r| !matches(r));
                for (k, name) in [
                    (WatchKind::Child, "ChildWatchRemoved"),
                    (WatchKind::Data, "DataWatchRemoved"),
                    (WatchKind::Persistent, "PersistentWatchRemoved"),
                ] {
                    if removed.contains(&k) {
                        self.pending.push(("SyncConnected".into(), name.into(), Some(path.clone())));
                    }
                }
            }
            CliCommand::GetEphemerals { path } => {
                let path = path.unwrap_or_else(|| "/".into());
                validate_path(&path)?;
                let list = self.block(self.c().list_ephemerals(&path)).map_err(|e| self.err(&e, &path))?;
                println!("{}", format::java_list(&list));
            }
            CliCommand::GetAllChildrenNumber { path } => {
                validate_path(&path)?;
                let n = self.block(self.c().count_descendants_number(&path)).map_err(|e| self.err(&e, &path))?;
                println!("{n}");
            }
            CliCommand::WhoAmI => {
                let users =
                    self.block(self.c().list_auth_users()).map_err(|e| CliError::new(keeper_error_no_path(&e)))?;
                println!("Auth scheme: User");
                for u in users {
                    println!("{}: {}", u.scheme(), u.user());
                }
            }
            CliCommand::ListQuota { path } => self.list_quota(&path)?,
            CliCommand::SetQuota { path, field, value } => self.set_quota(&path, field, value)?,
            CliCommand::DelQuota { path, field } => self.del_quota(&path, field)?,
            CliCommand::Config { client, watch, stat } => {
                let (data, st) = if watch {
                    let (d, s, w) =
                        self.block(self.c().get_and_watch_config()).map_err(|e| self.err(&e, "/zookeeper/config"))?;
                    self.oneshot("/zookeeper/config", WatchKind::Data, w);
                    (d, s)
                } else {
                    self.block(self.c().get_config()).map_err(|e| self.err(&e, "/zookeeper/config"))?
                };
                let text = String::from_utf8_lossy(&data).into_owned();
                if client {
                    println!("{}", client_config(&text));
                } else {
                    println!("{text}");
                }
                if stat {
                    print!("{}", format::stat(&st));
                }
            }
            CliCommand::Reconfig { change, version, stat } => {
                let change = match change {
                    Reconfig::File(f) => {
                        let text = std::fs::read_to_string(&f)
                            .map_err(|e| CliError::new(format!("Error processing {f}{e}")))?;
                        Reconfig::Members(command::dynamic_config_members(&text))
                    }
                    other => other,
                };
                let result = match &change {
                    Reconfig::Incremental { add, remove } => {
                        let update = zk::EnsembleUpdate::Incremental {
                            joinings: add.iter().map(String::as_str),
                            leavings: remove.iter().map(String::as_str),
                        };
                        self.block(self.c().update_ensemble(update, version))
                    }
                    Reconfig::Members(members) => {
                        let update = zk::EnsembleUpdate::New { ensemble: members.iter().map(String::as_str) };
                        self.block(self.c().update_ensemble(update, version))
                    }
                    Reconfig::File(_) => unreachable!("read above"),
                };
                let (data, st) = result.map_err(|e| CliError::new(keeper_error_no_path(&e)))?;
                println!("Committed new configuration:\n{}", String::from_utf8_lossy(&data));
                if stat {
                    print!("{}", format::stat(&st));
                }
            }
        }
        Ok(Flow::Continue)
    }

    /// A server error on `path` as zkCli words it; a lost session also ends this shell's client.
    fn err(&self, e: &zk::Error, path: &str) -> CliError {
        CliError::new(keeper_error(e, path))
    }

    fn ls(&mut self, path: &str, stat: bool, watch: bool, recursive: bool) -> Res<()> {
        validate_path(path)?;
        if recursive {
            return self.visit(path, watch, &mut |p| println!("{p}"));
        }
        let (mut children, st) = match (watch, stat) {
            (true, _) => {
                let (c, s, w) = self.block(self.c().get_and_watch_children(path)).map_err(|e| self.err(&e, path))?;
                self.oneshot(path, WatchKind::Child, w);
                (c, Some(s))
            }
            (false, true) => {
                let (c, s) = self.block(self.c().get_children(path)).map_err(|e| self.err(&e, path))?;
                (c, Some(s))
            }
            (false, false) => (self.block(self.c().list_children(path)).map_err(|e| self.err(&e, path))?, None),
        };
        children.sort();
        println!("{}", format::java_list(&children));
        if let (true, Some(st)) = (stat, st) {
            print!("{}", format::stat(&st));
        }
        Ok(())
    }

    /// zkCli's subtree walk (`ZKUtil.visitSubTreeDFS`): the node (its data read, so it must
    /// exist), then its children sorted, then each child's subtree; nodes that vanish meanwhile
    /// are skipped.
    fn visit(&mut self, path: &str, watch: bool, f: &mut dyn FnMut(&str)) -> Res<()> {
        if watch {
            let (_, _, w) = self.block(self.c().get_and_watch_data(path)).map_err(|e| self.err(&e, path))?;
            self.oneshot(path, WatchKind::Data, w);
        } else {
            self.block(self.c().check_stat(path))
                .map_err(|e| self.err(&e, path))?
                .ok_or_else(|| self.err(&zk::Error::NoNode, path))?;
        }
        f(path);
        self.visit_children(path, watch, f)
    }

    fn visit_children(&mut self, path: &str, watch: bool, f: &mut dyn FnMut(&str)) -> Res<()> {
        let children = if watch {
            match self.block(self.c().list_and_watch_children(path)) {
                Ok((c, w)) => {
                    self.oneshot(path, WatchKind::Child, w);
                    c
                }
                Err(zk::Error::NoNode) => return Ok(()),
                Err(e) => return Err(self.err(&e, path)),
            }
        } else {
            match self.block(self.c().list_children(path)) {
                Ok(c) => c,
                Err(zk::Error::NoNode) => return Ok(()),
                Err(e) => return Err(self.err(&e, path)),
            }
        };
        let mut children = children;
        children.sort();
        for c in &children {
            f(&child_path(path, c));
        }
        for c in &children {
            self.visit_children(&child_path(path, c), watch, f)?;
        }
        Ok(())
    }

    fn create(
        &mut self,
        path: &str,
        data: Option<String>,
        acl: Option<String>,
        kind: CreateKind,
        ttl: Option<i64>,
    ) -> Res<()> {
        let sequential = matches!(kind, CreateKind::PersistentSequential | CreateKind::EphemeralSequential);
        validate_path(&if sequential { format!("{path}1") } else { path.to_string() })?;
        if path == "/" && !sequential {
            // The crate refuses to send this; the server's answer to zkCli is that it exists.
            return Err(self.err(&zk::Error::NodeExists, path));
        }
        let acls = match acl {
            None => vec![zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())],
            Some(text) => {
                let (acls, warnings) = format::parse_acl(&text);
                for w in warnings {
                    eprintln!("{w}");
                }
                acls
            }
        };
        if acls.is_empty() {
            eprintln!("KeeperErrorCode = InvalidACL");
            return Err(CliError::new("Acl is not valid : null"));
        }
        let mode = match kind {
            CreateKind::Persistent => zk::CreateMode::Persistent,
            CreateKind::PersistentSequential => zk::CreateMode::PersistentSequential,
            CreateKind::Ephemeral => zk::CreateMode::Ephemeral,
            CreateKind::EphemeralSequential => zk::CreateMode::EphemeralSequential,
            CreateKind::Container => zk::CreateMode::Container,
        };
        let mut options = mode.with_acls(zk::Acls::new(&acls));
        if let Some(ttl) = ttl {
            options = options.with_ttl(Duration::from_millis(ttl.unsigned_abs()));
        }
        let data = data.unwrap_or_default();
        match self.block(self.c().create(path, data.as_bytes(), &options)) {
            Ok((_, seq)) => {
                if sequential {
                    eprintln!("Created {path}{:010}", seq.into_i64());
                } else {
                    eprintln!("Created {path}");
                }
                Ok(())
            }
            Err(zk::Error::InvalidAcl) => {
                eprintln!("KeeperErrorCode = InvalidACL for {path}");
                Err(self.err(&zk::Error::InvalidAcl, path))
            }
            Err(e) => Err(self.err(&e, path)),
        }
    }

    /// `deleteall`: the subtree listed breadth first, deleted deepest first in multi-operation
    /// batches of `batch` deletes, as ZooKeeper's `ZKUtil.deleteRecursive` does.
    fn delete_all(&mut self, path: &str, batch: usize) -> Res<()> {
        validate_path(path)?;
        let mut tree = vec![path.to_string()];
        let mut next = 0;
        while next < tree.len() {
            let node = tree[next].clone();
            next += 1;
            let children = self.block(self.c().list_children(&node)).map_err(|e| self.err(&e, &node))?;
            tree.extend(children.iter().map(|c| child_path(&node, c)));
        }
        let mut ok = true;
        for chunk in tree.iter().rev().collect::<Vec<_>>().chunks(batch) {
            let mut writer = self.c().new_multi_writer();
            for p in chunk {
                if writer.add_delete(p, None).is_err() {
                    ok = false;
                }
            }
            if self.block(writer.commit()).is_err() {
                ok = false;
                break;
            }
        }
        if !ok {
            eprintln!("Failed to delete some node(s) in the subtree!");
        }
        Ok(())
    }

    fn get_string(&self, path: &str) -> Result<String, zk::Error> {
        self.block(self.c().get_data(path)).map(|(d, _)| String::from_utf8_lossy(&d).into_owned())
    }

    fn list_quota(&mut self, path: &str) -> Res<()> {
        let limits = format!("{}/{LIMIT_NODE}", quota_path(path));
        eprintln!("absolute path is {limits}");
        // As zkCli, the quota nodes' paths are checked, not the path given.
        validate_path(&limits)?;
        let stats = format!("{}/{STAT_NODE}", quota_path(path));
        let read = |p: &str| self.get_string(p).map(|s| StatsTrack::parse(&s));
        match read(&limits).and_then(|q| Ok((q, read(&stats)?))) {
            Ok((q, s)) => {
                println!("Output quota for {path} {q}");
                println!("Output stat for {path} {s}");
                Ok(())
            }
            Err(zk::Error::NoNode) => {
                eprintln!("quota for {path} does not exist.");
                Ok(())
            }
            Err(e) => Err(CliError::new(keeper_error(&e, path))),
        }
    }

    fn exists(&self, path: &str) -> Res<bool> {
        self.block(self.c().check_stat(path)).map(|s| s.is_some()).map_err(|e| self.err(&e, path))
    }

    fn create_if_missing(&self, path: &str, data: &[u8]) -> Res<()> {
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.block(self.c().create(path, data, &open)) {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(self.err(&e, path)),
        }
    }

    fn set_quota(&mut self, path: &str, field: QuotaField, value: i64) -> Res<()> {
        if path.starts_with(QUOTA_ROOT) {
            eprintln!("cannot set a quota under the path: {QUOTA_ROOT}");
            return Ok(());
        }
        validate_path(path)?;
        if !self.exists(path)? {
            return Err(CliError::new(format!("{path} does not exist.")));
        }
        // No quota below this node (in its quota subtree, other than its own)...
        let own = quota_path(path);
        validate_path(&own)?;
        let mut below = Vec::new();
        if self.exists(&own)? {
            let mut nodes = Vec::new();
            self.visit(&own, false, &mut |p| nodes.push(p.to_string()))?;
            for n in nodes {
                if n == own {
                    continue;
                }
                if let Ok(children) = self.block(self.c().list_children(&n)) {
                    if children.iter().any(|c| c == LIMIT_NODE) {
                        below.push(n);
                    }
                }
            }
        }
        if let Some(n) = below.first() {
            let trimmed = n.strip_prefix(QUOTA_ROOT).unwrap_or(n);
            return Err(CliError::new(format!("{path} has a child {trimmed} which has a quota")));
        }
        // ... and none above it.
        let parts: Vec<&str> = path.split('/').collect();
        let mut prefix = QUOTA_ROOT.to_string();
        for part in parts.iter().take(parts.len().saturating_sub(1)).skip(1) {
            prefix = format!("{prefix}/{part}");
            match self.block(self.c().list_children(&prefix)) {
                Err(zk::Error::NoNode) => break,
                Err(e) => return Err(self.err(&e, &prefix)),
                Ok(children) if children.is_empty() => break,
                Ok(children) => {
                    if prefix != own && children.iter().any(|c| c == LIMIT_NODE) {
                        let trimmed = prefix.strip_prefix(QUOTA_ROOT).unwrap_or(&prefix);
                        return Err(CliError::new(format!("{path} has a parent {trimmed} which has a quota")));
                    }
                }
            }
        }
        if !self.exists(QUOTA_ROOT)? {
            self.create_if_missing("/zookeeper", &[])?;
            self.create_if_missing(QUOTA_ROOT, &[])?;
        }
        let mut q = QUOTA_ROOT.to_string();
        for part in parts.iter().skip(1).filter(|p| !p.is_empty()) {
            q = format!("{q}/{part}");
            if !self.exists(&q)? {
                self.create_if_missing(&q, &[])?;
            }
        }
        let limits = format!("{q}/{LIMIT_NODE}");
        let stats = format!("{q}/{STAT_NODE}");
        let key = match field {
            QuotaField::Count => StatsTrack::COUNT,
            QuotaField::Bytes => StatsTrack::BYTES,
            QuotaField::CountHard => StatsTrack::COUNT_HARD,
            QuotaField::BytesHard => StatsTrack::BYTES_HARD,
        };
        let read = |s: &Shell, p: &str| s.get_string(p).map(|t| StatsTrack::parse(&t)).map_err(|e| s.err(&e, p));
        if !self.exists(&limits)? {
            let mut quota = StatsTrack::default();
            for k in [StatsTrack::COUNT, StatsTrack::BYTES, StatsTrack::COUNT_HARD, StatsTrack::BYTES_HARD] {
                quota.set(k, -1);
            }
            quota.set(key, value);
            let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            self.block(self.c().create(&limits, quota.to_string().as_bytes(), &open))
                .map_err(|e| self.err(&e, &limits))?;
            let mut zero = StatsTrack::default();
            zero.set(StatsTrack::COUNT, 0);
            zero.set(StatsTrack::BYTES, 0);
            self.block(self.c().create(&stats, zero.to_string().as_bytes(), &open))
                .map_err(|e| self.err(&e, &stats))?;
            let (q, s) = (read(self, &limits)?, read(self, &stats)?);
            check_quota(&q, &s);
        } else {
            let mut q = read(self, &limits)?;
            q.set(key, value);
            let s = read(self, &stats)?;
            check_quota(&q, &s);
            self.block(self.c().set_data(&limits, q.to_string().as_bytes(), None))
                .map_err(|e| self.err(&e, &limits))?;
        }
        Ok(())
    }

    fn del_quota(&mut self, path: &str, field: Option<QuotaField>) -> Res<()> {
        let parent = quota_path(path);
        let limits = format!("{parent}/{LIMIT_NODE}");
        validate_path(&limits)?;
        if !self.exists(&limits)? {
            println!("Quota does not exist for {path}");
            return Ok(());
        }
        let result = (|| -> Result<(), (zk::Error, String)> {
            let mut q = StatsTrack::parse(&self.get_string(&limits).map_err(|e| (e, limits.clone()))?);
            match field {
                None => {
                    let children = self.block(self.c().list_children(&parent)).map_err(|e| (e, parent.clone()))?;
                    for c in children {
                        let p = child_path(&parent, &c);
                        self.block(self.c().delete(&p, None)).map_err(|e| (e, p.clone()))?;
                    }
                    let mut p = parent.clone();
                    while p != QUOTA_ROOT {
                        let children = self.block(self.c().list_children(&p)).map_err(|e| (e, p.clone()))?;
                        if !children.is_empty() {
                            break;
                        }
                        self.block(self.c().delete(&p, None)).map_err(|e| (e, p.clone()))?;
                        p = p[..p.rfind('/').unwrap_or(0)].to_string();
                    }
                }
                Some(f) => {
                    let key = match f {
                        QuotaField::Count => StatsTrack::COUNT,
                        QuotaField::Bytes => StatsTrack::BYTES,
                        QuotaField::CountHard => StatsTrack::COUNT_HARD,
                        QuotaField::BytesHard => StatsTrack::BYTES_HARD,
                    };
                    q.set(key, -1);
                    self.block(self.c().set_data(&limits, q.to_string().as_bytes(), None))
                        .map_err(|e| (e, limits.clone()))?;
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(()),
            Err((zk::Error::NoNode, _)) => {
                eprintln!("quota for {path} does not exist.");
                Ok(())
            }
            Err((e, p)) => Err(CliError::new(keeper_error(&e, &p))),
        }
    }
}

/// zkCli's warnings when a new quota is already below the subtree's usage.
fn check_quota(q: &StatsTrack, s: &StatsTrack) {
    let count = s.get(StatsTrack::COUNT);
    let bytes = s.get(StatsTrack::BYTES);
    let (n, nh) = (q.get(StatsTrack::COUNT), q.get(StatsTrack::COUNT_HARD));
    if (n > -1 && n < count) || (nh > -1 && nh < count) {
        println!("[Warning]: the count quota you create is less than the existing count:{count}");
    }
    let (b, bh) = (q.get(StatsTrack::BYTES), q.get(StatsTrack::BYTES_HARD));
    if (b > -1 && b < bytes) || (bh > -1 && bh < bytes) {
        println!("[Warning]: the bytes quota you create is less than the existing bytes:{bytes}");
    }
}

/// The message of a KeeperException itself (`KeeperErrorCode = NoAuth for /a`), as `setAcl -R`
/// prints failures.
fn keeper_error_plain(e: &zk::Error, path: &str) -> String {
    let code = match e {
        zk::Error::NoNode => "NoNode",
        zk::Error::NoAuth => "NoAuth",
        zk::Error::BadVersion => "BadVersion",
        zk::Error::InvalidAcl => "InvalidACL",
        _ => return keeper_error(e, path),
    };
    format!("KeeperErrorCode = {code} for {path}")
}

/// `config -c`: the configuration's version and the client addresses of its servers.
pub fn client_config(config: &str) -> String {
    let mut version = "";
    let mut addrs = Vec::new();
    for line in config.lines() {
        let Some((key, value)) = line.split_once('=') else { continue };
        let (key, value) = (key.trim(), value.trim());
        if key == "version" {
            version = value;
        }
        if !key.starts_with("server.") {
            continue;
        }
        match value.split_once(';') {
            Some((_, client)) => {
                let client = client.trim();
                addrs.push(if client.contains(':') { client.to_string() } else { format!("0.0.0.0:{client}") });
            }
            None => addrs.push(String::new()),
        }
    }
    format!("{version} {}", addrs.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_checked_like_zookeeper() {
        assert!(validate_path("/").is_ok());
        assert!(validate_path("/a/b-c").is_ok());
        assert_eq!(validate_path("a").unwrap_err().message, "Path must start with / character");
        assert_eq!(validate_path("/a/").unwrap_err().message, "Path must not end with / character");
        assert_eq!(
            validate_path("/a//b").unwrap_err().message,
            "Invalid path string \"/a//b\" caused by empty node name specified @3"
        );
        assert_eq!(
            validate_path("/a/../b").unwrap_err().message,
            "Invalid path string \"/a/../b\" caused by relative paths not allowed @4"
        );
        assert_eq!(validate_path("").unwrap_err().message, "Path length must be > 0");
    }

    #[test]
    fn errors_worded_like_zkcli() {
        assert_eq!(keeper_error(&zk::Error::NoNode, "/x"), "Node does not exist: /x");
        assert_eq!(keeper_error(&zk::Error::NoAuth, "/x"), "Insufficient permission : /x");
        assert_eq!(keeper_error(&zk::Error::BadVersion, "/x"), "version No is not valid : /x");
        assert_eq!(keeper_error_no_path(&zk::Error::ReconfigDisabled), "KeeperErrorCode = Reconfig is disabled");
        assert_eq!(keeper_error_plain(&zk::Error::NoAuth, "/x"), "KeeperErrorCode = NoAuth for /x");
    }

    #[test]
    fn client_config_lists_client_addresses() {
        let cfg = "server.1=a:2888:3888:participant;127.0.0.1:2181\nserver.2=b:2888:3888;2182\nversion=100000000";
        assert_eq!(client_config(cfg), "100000000 127.0.0.1:2181,0.0.0.0:2182");
        assert_eq!(client_config(""), " ");
    }
}
