//! `warden cli`: a native equivalent of Apache ZooKeeper's `zkCli.sh`, with its invocation
//! (`-server host:port[,...] [-timeout ms] [-r] [cmd args...]`), its commands, output and error
//! messages, and its exit codes.
//!
//! - [`command`]: a line of words to a typed [`command::CliCommand`] (pure).
//! - [`format`]: what zkCli prints (Stat, ACLs, quotas, events, usage) as text (pure).
//! - [`exec`]: runs commands against a server with the `zookeeper-client` crate.
//! - [`interactive`]: the prompt, line editing, history and completion (rustyline), or
//!   commands read line by line from a non-terminal standard input.

pub mod command;
pub mod exec;
pub mod format;
pub mod interactive;

use std::io::IsTerminal;
use std::time::Duration;

/// `warden cli`'s arguments, kept raw: zkCli's single-dash long options are read here.
#[derive(clap::Args)]
pub struct CliArgs {
    /// zkCli's arguments: `-server host:port[,host:port...][/chroot]` (default localhost:2181),
    /// `-timeout ms` (session timeout, default 30000), `-r` (read-only), then optionally a
    /// command and its arguments to run once. `--server`, `--timeout`, `--readonly` work too.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "ARGS")]
    pub args: Vec<String>,
}

/// The options and the one-shot command, from zkCli-style arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct Invocation {
    pub server: String,
    pub timeout_ms: u64,
    pub readonly: bool,
    pub command: Vec<String>,
}

/// Reads arguments as zkCli's `parseOptions` does: options until the first word that does not
/// start with `-`, which begins the command; unknown options are ignored.
pub fn parse_invocation(args: &[String]) -> Result<Invocation, String> {
    let mut inv =
        Invocation { server: "localhost:2181".into(), timeout_ms: 30_000, readonly: false, command: Vec::new() };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-server" | "--server" => {
                inv.server = it.next().ok_or_else(|| format!("Error: no argument found for option {arg}"))?.clone()
            }
            "-timeout" | "--timeout" => {
                let v = it.next().ok_or_else(|| format!("Error: no argument found for option {arg}"))?;
                inv.timeout_ms = v.parse().map_err(|_| format!("Error: -timeout needs milliseconds, not {v:?}"))?;
            }
            "-r" | "--readonly" => inv.readonly = true,
            // warden cli always waits for the connection before the first command.
            "-waitforconnection" | "--waitforconnection" => {}
            "-client-configuration" | "--client-configuration" => {
                return Err(format!(
                    "warden cli: {arg} is not supported: ZooKeeper's client properties (TLS, SASL, ...) \
                     cannot be read by the zookeeper-client crate warden cli is built on"
                ))
            }
            a if a.starts_with('-') => {}
            _ => {
                inv.command.push(arg.clone());
                inv.command.extend(it.by_ref().cloned());
            }
        }
    }
    Ok(inv)
}

/// Runs `warden cli`; returns the process's exit code.
pub fn run(args: CliArgs) -> anyhow::Result<i32> {
    let inv = match parse_invocation(&args.args) {
        Ok(inv) => inv,
        Err(e) => {
            eprintln!("{e}");
            return Ok(2);
        }
    };
    println!("Connecting to {}", inv.server);
    let opts = exec::Options {
        server: inv.server.clone(),
        timeout: Duration::from_millis(inv.timeout_ms),
        readonly: inv.readonly,
    };
    let mut shell = exec::Shell::new(opts)?;
    if !inv.command.is_empty() {
        shell.execute_words(&inv.command);
        if !shell.connected() && !exec::is_shell_command(&inv.command[0]) && shell.exit_code == 0 {
            // zkCli would wait for the server forever; a script learns it is unreachable.
            shell.exit_code = 1;
        }
        return Ok(leave(shell));
    }
    println!("Welcome to ZooKeeper!");
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        println!("JLine support is enabled");
        interactive::run_terminal(&mut shell)?;
    } else {
        println!("JLine support is disabled");
        interactive::run_lines(&mut shell, std::io::stdin().lock())?;
    }
    Ok(leave(shell))
}

/// The exit code, the session left open: zkCli exits without closing its session (only `close`
/// and `quit` do), so its ephemeral nodes live until the session times out; so do ours.
fn leave(shell: exec::Shell) -> i32 {
    let code = shell.exit_code;
    std::mem::forget(shell);
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn invocation_like_zkcli() {
        let inv = parse_invocation(&words("-server h1:1,h2:2 -timeout 5000 -r ls -R /")).unwrap();
        assert_eq!(
            inv,
            Invocation { server: "h1:1,h2:2".into(), timeout_ms: 5000, readonly: true, command: words("ls -R /") }
        );
        let inv = parse_invocation(&words("--server h:3")).unwrap();
        assert_eq!((inv.server.as_str(), inv.command.len(), inv.timeout_ms), ("h:3", 0, 30_000));
        assert_eq!(parse_invocation(&words("-server")).unwrap_err(), "Error: no argument found for option -server");
        assert_eq!(parse_invocation(&words("-x get /a")).unwrap().command, words("get /a"));
        assert_eq!(parse_invocation(&words("-waitforconnection ls /")).unwrap().command, words("ls /"));
        assert!(parse_invocation(&words("-client-configuration c.properties ls /"))
            .unwrap_err()
            .contains("-client-configuration is not supported"));
    }
}
