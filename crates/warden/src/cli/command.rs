//! From a line of text to a typed [`CliCommand`]: zkCli's word splitting (double or single
//! quotes group words), and each command's flags parsed the way zkCli's option parser (Apache
//! Commons CLI's `DefaultParser`) does, with its error messages. Pure: no I/O.

/// Splits a line into words as zkCli does: a word is a run of non-blank characters, or a
/// `"..."` / `'...'` group whose quotes are dropped; an unmatched quote is skipped.
pub fn split_words(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut words = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '\'' {
            match chars[i + 1..].iter().position(|&d| d == c) {
                Some(len) => {
                    words.push(chars[i + 1..i + 1 + len].iter().collect());
                    i += len + 2;
                }
                None => i += 1,
            }
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() {
                i += 1;
            }
            words.push(chars[start..i].iter().collect());
        }
    }
    words
}

/// How `addWatch` watches: the node only, or the node and everything below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddWatchMode {
    Persistent,
    PersistentRecursive,
}

/// Which watches `removewatches` removes (`-c`, `-d`, `-a`; `-a` is the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatcherType {
    Children,
    Data,
    Any,
}

/// The four quota fields (`-n`, `-b`, `-N`, `-B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaField {
    Count,
    Bytes,
    CountHard,
    BytesHard,
}

/// A reconfiguration: incremental (joining / leaving servers) or a whole new membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reconfig {
    Incremental {
        add: Vec<String>,
        remove: Vec<String>,
    },
    Members(Vec<String>),
    /// `-file`: a dynamic configuration file whose `server.N=...` lines are the new membership
    /// (read when the command runs).
    File(String),
}

/// One zkCli command, its flags parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CliCommand {
    Ls {
        path: String,
        stat: bool,
        watch: bool,
        recursive: bool,
    },
    Create {
        path: String,
        data: Option<String>,
        acl: Option<String>,
        mode: CreateKind,
        ttl: Option<i64>,
    },
    Get {
        path: String,
        stat: bool,
        watch: bool,
    },
    Set {
        path: String,
        data: String,
        version: Option<i32>,
        stat: bool,
    },
    Delete {
        path: String,
        version: Option<i32>,
    },
    DeleteAll {
        path: String,
        batch: usize,
    },
    Stat {
        path: String,
        watch: bool,
    },
    GetAcl {
        path: String,
        stat: bool,
    },
    SetAcl {
        path: String,
        acl: String,
        version: Option<i32>,
        stat: bool,
        recursive: bool,
    },
    AddAuth {
        scheme: String,
        auth: Option<String>,
    },
    Sync {
        path: String,
    },
    AddWatch {
        path: String,
        mode: AddWatchMode,
    },
    RemoveWatches {
        path: String,
        kind: WatcherType,
        local: bool,
    },
    GetEphemerals {
        path: Option<String>,
    },
    GetAllChildrenNumber {
        path: String,
    },
    WhoAmI,
    ListQuota {
        path: String,
    },
    /// `(field, value)` pairs; zkCli lets only one of the four be given at once.
    SetQuota {
        path: String,
        field: QuotaField,
        value: i64,
    },
    DelQuota {
        path: String,
        field: Option<QuotaField>,
    },
    Config {
        client: bool,
        watch: bool,
        stat: bool,
    },
    Reconfig {
        change: Reconfig,
        version: Option<i64>,
        stat: bool,
    },
    PrintWatches(Option<bool>),
    History,
    /// `redo N`; `redo` alone does nothing, as in zkCli.
    Redo(Option<i64>),
    Connect(Option<String>),
    Close,
    Version,
    Quit,
    Help,
}

/// The node kinds `create` makes (flags `-s`, `-e`, `-c`, `-t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateKind {
    Persistent,
    PersistentSequential,
    Ephemeral,
    EphemeralSequential,
    Container,
}

/// Why a line is not a command: zkCli's message (printed on standard error) and exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub message: String,
    /// zkCli prints its usage (every command) before the message.
    pub usage: bool,
    /// The exit code of a one-shot run that fails so: 1, or 127 for an unknown command.
    pub exit_code: i32,
}

impl ParseError {
    fn new(message: impl Into<String>) -> ParseError {
        ParseError { message: message.into(), usage: false, exit_code: 1 }
    }
}

/// The commands and their argument synopses, in zkCli's usage order (sorted by name).
pub const USAGE: &[(&str, &str)] = &[
    (
        "addWatch",
        "[-m mode] path # optional mode is one of [PERSISTENT, PERSISTENT_RECURSIVE] - default is PERSISTENT_RECURSIVE",
    ),
    ("addauth", "scheme auth"),
    ("close", ""),
    ("config", "[-c] [-w] [-s]"),
    ("connect", "host:port"),
    ("create", "[-s] [-e] [-c] [-t ttl] path [data] [acl]"),
    ("delete", "[-v version] path"),
    ("deleteall", "path [-b batch size]"),
    ("delquota", "[-n|-b|-N|-B] path"),
    ("get", "[-s] [-w] path"),
    ("getAcl", "[-s] path"),
    ("getAllChildrenNumber", "path"),
    ("getEphemerals", "path"),
    ("history", ""),
    ("listquota", "path"),
    ("ls", "[-s] [-w] [-R] path"),
    ("printwatches", "on|off"),
    ("quit", ""),
    (
        "reconfig",
        "[-s] [-v version] [[-file path] | [-members serverID=host:port1:port2;port3[,...]*]] | [-add serverId=host:port1:port2;port3[,...]]* [-remove serverId[,...]*]",
    ),
    ("redo", "cmdno"),
    ("removewatches", "path [-c|-d|-a] [-l]"),
    ("set", "[-s] [-v version] path data"),
    ("setAcl", "[-s] [-v version] [-R] path acl"),
    ("setquota", "-n|-b|-N|-B val path"),
    ("stat", "[-w] path"),
    ("sync", "path"),
    ("version", ""),
    ("whoami", ""),
];

/// The command names, for completion (`help` is Warden's own addition).
pub fn command_names() -> impl Iterator<Item = &'static str> {
    USAGE.iter().map(|(name, _)| *name).chain(std::iter::once("help"))
}

/// `name synopsis`, zkCli's one-line usage of a command.
pub fn usage_of(name: &str) -> String {
    let synopsis = USAGE.iter().find(|(n, _)| *n == name).map_or("", |(_, s)| s);
    format!("{name} {synopsis}")
}

/// An option a command accepts: its name (one letter, or a word such as `members`) and whether
/// it takes a value.
struct Opt {
    name: &'static str,
    value: bool,
}

const fn flag(name: &'static str) -> Opt {
    Opt { name, value: false }
}

const fn valued(name: &'static str) -> Opt {
    Opt { name, value: true }
}

/// The words, options taken out: what was given for each option (in order) and the remaining
/// arguments, the command name first.
struct Parsed {
    opts: Vec<(&'static str, Option<String>)>,
    args: Vec<String>,
}

impl Parsed {
    fn has(&self, name: &str) -> bool {
        self.opts.iter().any(|(n, _)| *n == name)
    }

    fn value(&self, name: &str) -> Option<&str> {
        self.opts.iter().find(|(n, _)| *n == name).and_then(|(_, v)| v.as_deref())
    }
}

/// Commons CLI's view of a word as an option's value: anything that does not look like an
/// option, or a negative number.
fn is_value(word: &str) -> bool {
    !word.starts_with('-') || word == "-" || word.parse::<f64>().is_ok()
}

fn unrecognized(word: &str) -> ParseError {
    ParseError::new(format!("org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: {word}"))
}

fn missing_value(name: &str) -> ParseError {
    ParseError::new(format!("org.apache.commons.cli.MissingArgumentException: Missing argument for option: {name}"))
}

/// Options anywhere among the arguments, as `DefaultParser` reads them: `-x`, `-x value`,
/// `-xvalue`, `-abc` (several flags), `--` ending the options.
fn parse_opts(words: &[String], spec: &[Opt]) -> Result<Parsed, ParseError> {
    let mut parsed = Parsed { opts: Vec::new(), args: Vec::new() };
    let mut it = words.iter().peekable();
    let mut only_args = false;
    while let Some(word) = it.next() {
        if only_args || !word.starts_with('-') || word == "-" {
            parsed.args.push(word.clone());
            continue;
        }
        if word == "--" {
            only_args = true;
            continue;
        }
        let body = word.trim_start_matches('-');
        if let Some(opt) = spec.iter().find(|o| o.name == body) {
            let value = if opt.value {
                match it.peek() {
                    Some(next) if is_value(next) => Some(it.next().expect("peeked").clone()),
                    _ => return Err(missing_value(opt.name)),
                }
            } else {
                None
            };
            parsed.opts.push((opt.name, value));
            continue;
        }
        if word.starts_with("--") {
            return Err(unrecognized(word));
        }
        let first = &body[..body.chars().next().map_or(0, char::len_utf8)];
        match spec.iter().find(|o| o.name == first) {
            Some(opt) if opt.value => parsed.opts.push((opt.name, Some(body[first.len()..].to_string()))),
            Some(_)
                if body
                    .chars()
                    .all(|c| spec.iter().any(|o| !o.value && o.name.len() == 1 && o.name.starts_with(c))) =>
            {
                for c in body.chars() {
                    let opt = spec.iter().find(|o| o.name.len() == 1 && o.name.starts_with(c)).expect("checked");
                    parsed.opts.push((opt.name, None));
                }
            }
            _ if word.parse::<f64>().is_ok() => parsed.args.push(word.clone()),
            _ => return Err(unrecognized(word)),
        }
    }
    Ok(parsed)
}

fn need_args(p: &Parsed, n: usize, name: &str) -> Result<(), ParseError> {
    if p.args.len() < n {
        Err(ParseError::new(usage_of(name)))
    } else {
        Ok(())
    }
}

/// Java's `Integer.parseInt` where zkCli does not catch its failure: the exception's text.
fn parse_i32(s: &str) -> Result<i32, ParseError> {
    s.parse().map_err(|_| ParseError::new(format!("java.lang.NumberFormatException: For input string: \"{s}\"")))
}

/// A line's words to a command. `Ok(None)` for a blank line.
#[cfg(test)]
pub fn parse_line(line: &str) -> Result<Option<CliCommand>, ParseError> {
    let words = split_words(line);
    if words.is_empty() {
        return Ok(None);
    }
    parse_words(&words).map(|(cmd, _)| Some(cmd))
}

/// The words of a command (the command name first) to a command, with the warnings zkCli prints
/// (on standard error) about deprecated forms before it runs the command.
pub fn parse_words(words: &[String]) -> Result<(CliCommand, Vec<String>), ParseError> {
    let mut warnings = Vec::new();
    let cmd = parse_command(words, &mut warnings)?;
    Ok((cmd, warnings))
}

fn parse_command(words: &[String], warnings: &mut Vec<String>) -> Result<CliCommand, ParseError> {
    let name = words[0].as_str();
    let mut deprecated_watch = |p: &mut Parsed, what: &str| {
        if p.args.len() > 2 {
            p.args.truncate(2);
            p.opts.push(("w", None));
            let now = if what == "get" { "get [-s] [-w]".to_string() } else { format!("{what} [-w]") };
            warnings.push(format!("'{what} path [watch]' has been deprecated. Please use '{now} path' instead."));
        }
    };
    let cmd = match name {
        "ls" => {
            let mut p = parse_opts(words, &[flag("?"), flag("s"), flag("w"), flag("R")])?;
            deprecated_watch(&mut p, "ls");
            need_args(&p, 2, name)?;
            CliCommand::Ls { path: p.args[1].clone(), stat: p.has("s"), watch: p.has("w"), recursive: p.has("R") }
        }
        "create" => {
            let p = parse_opts(words, &[flag("e"), flag("s"), flag("c"), valued("t")])?;
            need_args(&p, 2, name)?;
            let (e, s, c, t) = (p.has("e"), p.has("s"), p.has("c"), p.has("t"));
            if c && (e || s) {
                return Err(ParseError::new(
                    "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential.",
                ));
            }
            let ttl = match p.value("t") {
                None => None,
                Some(v) => Some(v.parse::<i64>().map_err(|_| ParseError::new("-t argument must be a long value"))?),
            };
            if t && e {
                return Err(ParseError::new("TTLs cannot be used with Ephemeral znodes"));
            }
            if t && c {
                return Err(ParseError::new("TTLs cannot be used with Container znodes"));
            }
            if let Some(ttl) = ttl {
                // ZooKeeper's EphemeralType.TTL bounds: 1 ..= 2^40 - 1 milliseconds.
                if ttl <= 0 || ttl > 0xFF_FFFF_FFFF {
                    return Err(ParseError::new("ttl must be positive and cannot be larger than: 1099511627775"));
                }
            }
            let mode = match (e, s, c) {
                (true, true, _) => CreateKind::EphemeralSequential,
                (true, false, _) => CreateKind::Ephemeral,
                (false, true, _) => CreateKind::PersistentSequential,
                (false, false, true) => CreateKind::Container,
                (false, false, false) => CreateKind::Persistent,
            };
            CliCommand::Create {
                path: p.args[1].clone(),
                data: p.args.get(2).cloned(),
                acl: p.args.get(3).cloned(),
                mode,
                ttl,
            }
        }
        "get" => {
            let mut p = parse_opts(words, &[flag("s"), flag("w")])?;
            need_args(&p, 2, name)?;
            deprecated_watch(&mut p, "get");
            CliCommand::Get { path: p.args[1].clone(), stat: p.has("s"), watch: p.has("w") }
        }
        "set" => {
            let p = parse_opts(words, &[flag("s"), valued("v")])?;
            need_args(&p, 3, name)?;
            let version = p.value("v").map(parse_i32).transpose()?;
            CliCommand::Set { path: p.args[1].clone(), data: p.args[2].clone(), version, stat: p.has("s") }
        }
        "delete" => {
            let p = parse_opts(words, &[valued("v")])?;
            need_args(&p, 2, name)?;
            if p.args.len() > 2 {
                // zkCli warns, then ignores the old positional version.
                warnings.push(
                    "'delete path [version]' has been deprecated. Please use 'delete [-v version] path' instead."
                        .into(),
                );
            }
            let version = p.value("v").map(parse_i32).transpose()?;
            CliCommand::Delete { path: p.args[1].clone(), version }
        }
        "deleteall" => {
            let p = parse_opts(words, &[valued("b")])?;
            need_args(&p, 2, name)?;
            let batch = match p.value("b") {
                None => 1000,
                Some(v) => {
                    v.parse::<i32>().map_err(|_| ParseError::new("-b argument must be an int value"))?.max(1) as usize
                }
            };
            CliCommand::DeleteAll { path: p.args[1].clone(), batch }
        }
        "stat" => {
            let mut p = parse_opts(words, &[flag("w")])?;
            need_args(&p, 2, name)?;
            deprecated_watch(&mut p, "stat");
            CliCommand::Stat { path: p.args[1].clone(), watch: p.has("w") }
        }
        "getAcl" => {
            let p = parse_opts(words, &[flag("s")])?;
            need_args(&p, 2, name)?;
            CliCommand::GetAcl { path: p.args[1].clone(), stat: p.has("s") }
        }
        "setAcl" => {
            let p = parse_opts(words, &[flag("s"), valued("v"), flag("R")])?;
            need_args(&p, 3, name)?;
            let version = p.value("v").map(parse_i32).transpose()?;
            CliCommand::SetAcl {
                path: p.args[1].clone(),
                acl: p.args[2].clone(),
                version,
                stat: p.has("s"),
                recursive: p.has("R"),
            }
        }
        "addauth" => {
            let p = parse_opts(words, &[])?;
            need_args(&p, 2, name)?;
            CliCommand::AddAuth { scheme: p.args[1].clone(), auth: p.args.get(2).cloned() }
        }
        "sync" => {
            let p = parse_opts(words, &[])?;
            need_args(&p, 2, name)?;
            CliCommand::Sync { path: p.args[1].clone() }
        }
        "addWatch" => {
            let p = parse_opts(words, &[valued("m")])?;
            if p.args.len() != 2 {
                return Err(ParseError::new(usage_of(name)));
            }
            let mode = match p.value("m").map(str::to_uppercase).as_deref() {
                None | Some("PERSISTENT_RECURSIVE") => AddWatchMode::PersistentRecursive,
                Some("PERSISTENT") => AddWatchMode::Persistent,
                Some(_) => return Err(ParseError::new(usage_of(name))),
            };
            CliCommand::AddWatch { path: p.args[1].clone(), mode }
        }
        "removewatches" => {
            let p = parse_opts(words, &[flag("c"), flag("d"), flag("a"), flag("l")])?;
            need_args(&p, 2, name)?;
            let kind = if p.has("c") {
                WatcherType::Children
            } else if p.has("d") {
                WatcherType::Data
            } else {
                WatcherType::Any
            };
            CliCommand::RemoveWatches { path: p.args[1].clone(), kind, local: p.has("l") }
        }
        "getEphemerals" => {
            let p = parse_opts(words, &[])?;
            CliCommand::GetEphemerals { path: p.args.get(1).cloned() }
        }
        "getAllChildrenNumber" => {
            let p = parse_opts(words, &[])?;
            need_args(&p, 2, name)?;
            CliCommand::GetAllChildrenNumber { path: p.args[1].clone() }
        }
        "whoami" => CliCommand::WhoAmI,
        "listquota" => {
            let p = parse_opts(words, &[])?;
            need_args(&p, 2, name)?;
            CliCommand::ListQuota { path: p.args[1].clone() }
        }
        "setquota" | "delquota" => {
            let set = name == "setquota";
            let spec = if set {
                [valued("n"), valued("b"), valued("N"), valued("B")]
            } else {
                [flag("n"), flag("b"), flag("N"), flag("B")]
            };
            let p = parse_opts(words, &spec)?;
            let chosen: Vec<&(&str, Option<String>)> = p.opts.iter().collect();
            if chosen.len() > 1 {
                return Err(ParseError::new(format!(
                    "org.apache.commons.cli.AlreadySelectedException: The option '{}' was specified but an option \
                     from this group has already been selected: '{}'",
                    chosen[1].0, chosen[0].0
                )));
            }
            if set && chosen.is_empty() {
                return Err(ParseError::new(
                    "org.apache.commons.cli.MissingOptionException: Missing required option: [-n num soft quota, -b \
                     bytes soft quota, -N num hard quota, -B bytes hard quota]",
                ));
            }
            need_args(&p, 2, name)?;
            let field = chosen.first().map(|(n, _)| match *n {
                "n" => QuotaField::Count,
                "b" => QuotaField::Bytes,
                "N" => QuotaField::CountHard,
                _ => QuotaField::BytesHard,
            });
            let path = p.args[1].clone();
            if set {
                let field = field.expect("one option");
                let raw = chosen[0].1.as_deref().unwrap_or_default();
                let value = raw
                    .parse::<i64>()
                    .ok()
                    .filter(|v| matches!(field, QuotaField::Bytes | QuotaField::BytesHard) || i32::try_from(*v).is_ok())
                    .ok_or_else(|| ParseError::new("NumberFormatException happens when parsing the option value"))?;
                match field {
                    QuotaField::Count | QuotaField::CountHard if value <= 0 => {
                        return Err(ParseError::new("the num quota must be greater than zero"))
                    }
                    QuotaField::Bytes | QuotaField::BytesHard if value < 0 => {
                        return Err(ParseError::new("the bytes quota must be greater than or equal to zero"))
                    }
                    _ => {}
                }
                CliCommand::SetQuota { path, field, value }
            } else {
                CliCommand::DelQuota { path, field }
            }
        }
        "config" => {
            let p = parse_opts(words, &[flag("s"), flag("w"), flag("c")])?;
            CliCommand::Config { client: p.has("c"), watch: p.has("w"), stat: p.has("s") }
        }
        "reconfig" => {
            let p = parse_opts(
                words,
                &[flag("s"), valued("v"), valued("file"), valued("members"), valued("add"), valued("remove")],
            )?;
            let (file, members, add, remove) = (p.has("file"), p.has("members"), p.has("add"), p.has("remove"));
            if !(file || members || add || remove) {
                return Err(ParseError::new(usage_of(name)));
            }
            let version = match p.value("v") {
                None => None,
                Some(v) => Some(
                    i64::from_str_radix(v, 16)
                        .map_err(|_| ParseError::new("-v must be followed by a long (configuration version)"))?,
                ),
            };
            if (file || members) && (add || remove) {
                return Err(ParseError::new(
                    "Can't use -file or -members together with -add or -remove (mixing incremental and \
                     non-incremental modes is not allowed)",
                ));
            }
            if file && members {
                return Err(ParseError::new(
                    "Can't use -file and -members together (conflicting non-incremental modes)",
                ));
            }
            let list = |v: Option<&str>| -> Vec<String> {
                v.map(|v| v.to_lowercase().split(',').filter(|s| !s.is_empty()).map(String::from).collect())
                    .unwrap_or_default()
            };
            let change = if let Some(f) = p.value("file") {
                Reconfig::File(f.to_string())
            } else if members {
                Reconfig::Members(list(p.value("members")))
            } else {
                Reconfig::Incremental { add: list(p.value("add")), remove: list(p.value("remove")) }
            };
            CliCommand::Reconfig { change, version, stat: p.has("s") }
        }
        "printwatches" => match words.get(1) {
            None => CliCommand::PrintWatches(None),
            Some(v) => CliCommand::PrintWatches(Some(v == "on")),
        },
        "history" => CliCommand::History,
        "redo" => match words.get(1) {
            // zkCli's `redo` without a number does nothing.
            None => CliCommand::Redo(None),
            Some(n) => CliCommand::Redo(Some(java_decode(n).ok_or_else(|| {
                ParseError::new(format!("java.lang.NumberFormatException: For input string: \"{n}\""))
            })?)),
        },
        "connect" => CliCommand::Connect(words.get(1).cloned()),
        "close" => CliCommand::Close,
        "version" => {
            if words.len() > 1 {
                return Err(ParseError::new(usage_of(name)));
            }
            CliCommand::Version
        }
        "quit" => CliCommand::Quit,
        "help" => CliCommand::Help,
        other => {
            return Err(ParseError {
                message: format!("Command not found: Command not found {other}"),
                usage: true,
                exit_code: 127,
            })
        }
    };
    Ok(cmd)
}

/// Java's `Integer.decode`: decimal, `0x`/`#` hex, leading-zero octal, optional sign.
fn java_decode(s: &str) -> Option<i64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) =
        body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")).or_else(|| body.strip_prefix('#'))
    {
        i64::from_str_radix(h, 16).ok()?
    } else if body.len() > 1 && body.starts_with('0') {
        i64::from_str_radix(&body[1..], 8).ok()?
    } else {
        body.parse().ok()?
    };
    Some(if neg { -v } else { v })
}

/// The `server.N=...` lines of a dynamic configuration file, as `reconfig -file` sends them.
pub fn dynamic_config_members(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("server."))
        .map(|l| l.replace(' ', "").to_lowercase())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> CliCommand {
        parse_line(line).expect("parses").expect("a command")
    }

    fn error(line: &str) -> String {
        parse_line(line).expect_err("an error").message
    }

    #[test]
    fn words_split_like_zkcli() {
        assert_eq!(split_words("  set /a  'hello world' \"x y\"  z "), ["set", "/a", "hello world", "x y", "z"]);
        assert_eq!(split_words("create /a \"unterminated"), ["create", "/a", "unterminated"]);
        assert_eq!(split_words("set /a \"\""), ["set", "/a", ""]);
        assert!(split_words("   ").is_empty());
        assert_eq!(parse_line("").unwrap(), None);
    }

    #[test]
    fn ls_flags_anywhere() {
        assert_eq!(
            parse("ls -s -R /a"),
            CliCommand::Ls { path: "/a".into(), stat: true, watch: false, recursive: true }
        );
        assert_eq!(parse("ls /a -w"), CliCommand::Ls { path: "/a".into(), stat: false, watch: true, recursive: false });
        assert_eq!(parse("ls -sw /a"), CliCommand::Ls { path: "/a".into(), stat: true, watch: true, recursive: false });
        assert_eq!(error("ls"), "ls [-s] [-w] [-R] path");
        assert_eq!(error("ls -x /"), "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -x");
        let words: Vec<String> = ["get", "/a", "watch"].map(String::from).into();
        let (cmd, warnings) = parse_words(&words).unwrap();
        assert_eq!(cmd, CliCommand::Get { path: "/a".into(), stat: false, watch: true });
        assert_eq!(warnings, ["'get path [watch]' has been deprecated. Please use 'get [-s] [-w] path' instead."]);
    }

    #[test]
    fn create_modes_and_checks() {
        assert_eq!(
            parse("create -e -s /a/b- data world:anyone:r"),
            CliCommand::Create {
                path: "/a/b-".into(),
                data: Some("data".into()),
                acl: Some("world:anyone:r".into()),
                mode: CreateKind::EphemeralSequential,
                ttl: None
            }
        );
        assert_eq!(
            parse("create -t 5000 /t"),
            CliCommand::Create {
                path: "/t".into(),
                data: None,
                acl: None,
                mode: CreateKind::Persistent,
                ttl: Some(5000)
            }
        );
        assert!(matches!(parse("create -c /c"), CliCommand::Create { mode: CreateKind::Container, .. }));
        assert_eq!(
            error("create -c -e /c"),
            "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential."
        );
        assert_eq!(error("create -t x /c"), "-t argument must be a long value");
        assert_eq!(error("create -t 10 -e /c"), "TTLs cannot be used with Ephemeral znodes");
        assert_eq!(
            error("create -t"),
            "org.apache.commons.cli.MissingArgumentException: Missing argument for option: t"
        );
        assert_eq!(error("create"), "create [-s] [-e] [-c] [-t ttl] path [data] [acl]");
    }

    #[test]
    fn versions_and_batches() {
        assert_eq!(
            parse("set -s -v 3 /a b"),
            CliCommand::Set { path: "/a".into(), data: "b".into(), version: Some(3), stat: true }
        );
        assert_eq!(parse("delete -v -1 /a"), CliCommand::Delete { path: "/a".into(), version: Some(-1) });
        assert_eq!(parse("deleteall /a -b 5"), CliCommand::DeleteAll { path: "/a".into(), batch: 5 });
        assert_eq!(error("deleteall /a -b x"), "-b argument must be an int value");
        assert_eq!(error("set /a"), "set [-s] [-v version] path data");
    }

    #[test]
    fn watches_quotas_and_reconfig() {
        assert_eq!(
            parse("addWatch -m persistent /a"),
            CliCommand::AddWatch { path: "/a".into(), mode: AddWatchMode::Persistent }
        );
        assert_eq!(
            parse("addWatch /a"),
            CliCommand::AddWatch { path: "/a".into(), mode: AddWatchMode::PersistentRecursive }
        );
        assert_eq!(error("addWatch -m FOO /a"), usage_of("addWatch"));
        assert_eq!(
            parse("removewatches /a -d -l"),
            CliCommand::RemoveWatches { path: "/a".into(), kind: WatcherType::Data, local: true }
        );
        assert_eq!(
            parse("setquota -N 5 /a"),
            CliCommand::SetQuota { path: "/a".into(), field: QuotaField::CountHard, value: 5 }
        );
        assert_eq!(error("setquota -n 0 /a"), "the num quota must be greater than zero");
        assert!(error("setquota /a").starts_with("org.apache.commons.cli.MissingOptionException"));
        assert!(error("setquota -n 1 -b 2 /a").contains("has already been selected: 'n'"));
        assert_eq!(parse("delquota /a"), CliCommand::DelQuota { path: "/a".into(), field: None });
        assert_eq!(parse("delquota -b /a"), CliCommand::DelQuota { path: "/a".into(), field: Some(QuotaField::Bytes) });
        assert_eq!(
            parse("reconfig -add server.4=h:1:2;3 -remove 2,3 -v 1a"),
            CliCommand::Reconfig {
                change: Reconfig::Incremental {
                    add: vec!["server.4=h:1:2;3".into()],
                    remove: vec!["2".into(), "3".into()]
                },
                version: Some(0x1a),
                stat: false
            }
        );
        assert!(error("reconfig -members a -add b").starts_with("Can't use -file or -members together"));
        assert_eq!(error("reconfig"), usage_of("reconfig"));
    }

    #[test]
    fn shell_commands() {
        assert_eq!(parse("printwatches off"), CliCommand::PrintWatches(Some(false)));
        assert_eq!(parse("printwatches"), CliCommand::PrintWatches(None));
        assert_eq!(parse("redo 0x10"), CliCommand::Redo(Some(16)));
        assert_eq!(parse("redo"), CliCommand::Redo(None));
        assert_eq!(parse("connect h:1"), CliCommand::Connect(Some("h:1".into())));
        assert_eq!(parse("getEphemerals"), CliCommand::GetEphemerals { path: None });
        let e = parse_line("foo bar").unwrap_err();
        assert_eq!((e.message.as_str(), e.usage, e.exit_code), ("Command not found: Command not found foo", true, 127));
        assert_eq!(usage_of("close"), "close ");
    }
}
