//! The interactive loop: a zkCli prompt with line editing, history and tab completion of
//! command names and of znode paths (the children of the typed path's parent, read from the
//! server), or, when standard input is not a terminal, commands read line by line.

use std::io::BufRead;
use std::time::Duration;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};
use zookeeper_client as zk;

use super::command;
use super::exec::{Flow, Shell};

/// Where the word being completed starts, and its text.
fn current_word(line: &str, pos: usize) -> (usize, &str) {
    let start = line[..pos].rfind(char::is_whitespace).map_or(0, |i| i + 1);
    (start, &line[start..pos])
}

/// A path being typed split into the parent to list and the prefix of the child's name.
pub fn split_path(word: &str) -> (&str, &str) {
    let slash = word.rfind('/').unwrap_or(0);
    let parent = if slash == 0 { "/" } else { &word[..slash] };
    (parent, &word[slash + 1..])
}

/// Candidates for the word under the cursor: command names for the first word, znode paths
/// for a word starting with `/` (children listed by `list`).
pub fn candidates(line: &str, pos: usize, list: &mut dyn FnMut(&str) -> Vec<String>) -> (usize, Vec<String>) {
    let (start, word) = current_word(line, pos);
    if line[..start].trim().is_empty() {
        let mut names: Vec<String> =
            command::command_names().filter(|n| n.starts_with(word)).map(String::from).collect();
        names.sort();
        return (start, names);
    }
    if !word.starts_with('/') {
        return (start, Vec::new());
    }
    let (parent, prefix) = split_path(word);
    let mut children: Vec<String> = list(parent)
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .map(|c| if parent == "/" { format!("/{c}") } else { format!("{parent}/{c}") })
        .collect();
    children.sort();
    (start, children)
}

/// rustyline's helper: completion from the live tree.
pub struct CliHelper {
    pub client: std::sync::Arc<std::sync::Mutex<Option<zk::Client>>>,
    pub rt: tokio::runtime::Handle,
    /// The line being edited and the cursor in it, as of the last edit (rustyline asks the
    /// hinter after each), so that it can be shown again below an event printed meanwhile.
    pub typed: std::sync::Arc<std::sync::Mutex<(String, usize)>>,
}

impl CliHelper {
    fn children(&self, parent: &str) -> Vec<String> {
        let client = self.client.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(client) = client else { return Vec::new() };
        let listing = self
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(2), client.list_children(parent)).await });
        match listing {
            Ok(Ok(children)) => children,
            _ => Vec::new(),
        }
    }
}

impl Completer for CliHelper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let (start, found) = candidates(line, pos, &mut |parent| self.children(parent));
        let pairs = found.into_iter().map(|c| Pair { display: c.clone(), replacement: c }).collect();
        Ok((start, pairs))
    }
}

impl Hinter for CliHelper {
    type Hint = String;

    fn hint(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> Option<String> {
        *self.typed.lock().unwrap_or_else(|e| e.into_inner()) = (line.to_string(), pos);
        None
    }
}
impl Highlighter for CliHelper {}
impl Validator for CliHelper {}
impl Helper for CliHelper {}

/// The terminal loop: zkCli's prompt, rustyline's editing and history (up arrow), Tab to
/// complete. Ctrl-D (end of input) leaves; Ctrl-C abandons the line. The editor runs on a
/// thread of its own so that watch events arriving while the prompt waits are printed at once,
/// as zkCli prints them, followed by the prompt and the line being typed again. rustyline's
/// external printer is not used: with it, input that arrives in one burst (a paste) stalls after
/// its first character.
pub fn run_terminal(shell: &mut Shell) -> anyhow::Result<()> {
    use std::io::Write;
    use std::sync::mpsc;

    let config = rustyline::Config::builder().completion_type(rustyline::CompletionType::List).build();
    let mut editor: Editor<CliHelper, rustyline::history::DefaultHistory> = Editor::with_config(config)?;
    let typed = std::sync::Arc::new(std::sync::Mutex::new((String::new(), 0)));
    editor.set_helper(Some(CliHelper { client: shell.shared_client(), rt: shell.runtime(), typed: typed.clone() }));
    let (prompt_tx, prompt_rx) = mpsc::channel::<String>();
    let (line_tx, line_rx) = mpsc::channel::<Result<String, ReadlineError>>();
    let reader = std::thread::spawn(move || {
        for prompt in prompt_rx {
            let line = editor.readline(&prompt);
            if let Ok(l) = &line {
                if !l.trim().is_empty() {
                    let _ = editor.add_history_entry(l.as_str());
                }
            }
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let result = loop {
        shell.flush_events();
        *typed.lock().unwrap_or_else(|e| e.into_inner()) = (String::new(), 0);
        if prompt_tx.send(shell.prompt()).is_err() {
            break Ok(());
        }
        let line = loop {
            match line_rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => break Some(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let events = shell.take_events();
                    if !events.is_empty() {
                        let (line, pos) = typed.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        let back = line.get(pos..).map_or(0, |rest| rest.chars().count());
                        let mut out = std::io::stdout().lock();
                        let _ = write!(out, "{events}{}{line}", shell.prompt());
                        if back > 0 {
                            let _ = write!(out, "\x1b[{back}D");
                        }
                        let _ = out.flush();
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            }
        };
        match line {
            Some(Ok(line)) => {
                if shell.execute_line(&line) == Flow::Quit {
                    break Ok(());
                }
            }
            Some(Err(ReadlineError::Interrupted)) => continue,
            Some(Err(ReadlineError::Eof)) | None => break Ok(()),
            Some(Err(e)) => break Err(e.into()),
        }
    };
    drop(prompt_tx);
    let _ = reader.join();
    result
}

/// Commands read line by line (standard input not a terminal), without a prompt, as zkCli
/// does without JLine.
pub fn run_lines(shell: &mut Shell, input: impl BufRead) -> anyhow::Result<()> {
    shell.flush_events();
    for line in input.lines() {
        if shell.execute_line(&line?) == Flow::Quit {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_commands_and_paths() {
        let mut tree = |parent: &str| -> Vec<String> {
            match parent {
                "/" => vec!["apps".into(), "zookeeper".into(), "alpha".into()],
                "/apps" => vec!["one".into(), "two".into()],
                _ => Vec::new(),
            }
        };
        assert_eq!(
            candidates("get", 3, &mut tree),
            (0, vec!["get".into(), "getAcl".into(), "getAllChildrenNumber".into(), "getEphemerals".into()])
        );
        assert_eq!(candidates("ls /a", 5, &mut tree), (3, vec!["/alpha".into(), "/apps".into()]));
        assert_eq!(candidates("ls -s /apps/t", 13, &mut tree), (6, vec!["/apps/two".into()]));
        assert_eq!(candidates("ls /apps/", 9, &mut tree), (3, vec!["/apps/one".into(), "/apps/two".into()]));
        assert_eq!(candidates("set /a x", 8, &mut tree), (7, Vec::<String>::new()));
        assert_eq!(split_path("/"), ("/", ""));
    }
}
