//! JAAS login configuration files (`java.security.auth.login.config`), as ZooKeeper reads the
//! server's section from them:
//!
//! ```text
//! Server {
//!     org.apache.zookeeper.server.auth.DigestLoginModule required
//!     user_super="adminsecret"
//!     user_bob="bobsecret";
//! };
//! ```
//!
//! Sections `Name { entry; entry; };`, each entry `module flag key=value ...;` with the flag one of
//! `required`, `requisite`, `sufficient`, `optional`; values quoted (`"..."`, backslash escapes) or
//! bare; `//`, `/* */` and `#` comments. An empty file has no sections.

/// One login module line of a section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub module: String,
    pub flag: String,
    pub options: Vec<(String, String)>,
}

/// One named section (a login context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Quoted(String),
    Punct(char),
}

fn tokenize(text: &str) -> Result<Vec<(Tok, usize)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => while chars.next_if(|c| *c != '\n').is_some() {},
            '/' if chars.peek() == Some(&'/') => while chars.next_if(|c| *c != '\n').is_some() {},
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                loop {
                    match chars.next() {
                        None => return Err(format!("line {line}: unterminated /* comment")),
                        Some('/') if prev == '*' => break,
                        Some(c) => {
                            line += usize::from(c == '\n');
                            prev = c;
                        }
                    }
                }
            }
            '{' | '}' | ';' | '=' => out.push((Tok::Punct(c), line)),
            '"' | '\'' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err(format!("line {line}: unterminated quoted string")),
                        Some(q) if q == c => break,
                        Some('\\') => s.push(chars.next().ok_or_else(|| format!("line {line}: dangling escape"))?),
                        Some(ch) => {
                            line += usize::from(ch == '\n');
                            s.push(ch);
                        }
                    }
                }
                out.push((Tok::Quoted(s), line));
            }
            c => {
                let mut s = String::from(c);
                while let Some(ch) = chars.next_if(|ch| !ch.is_whitespace() && !"{};=\"'#".contains(*ch)) {
                    s.push(ch);
                }
                out.push((Tok::Word(s), line));
            }
        }
    }
    Ok(out)
}

/// Parses a whole file. Errors name the line.
pub fn parse(text: &str) -> Result<Vec<Section>, String> {
    let toks = tokenize(text)?;
    let mut it = toks.into_iter().peekable();
    let mut sections = Vec::new();
    let at = |l: usize, what: &str| format!("line {l}: {what}");
    while let Some((tok, line)) = it.next() {
        let Tok::Word(name) = tok else { return Err(at(line, "expected a section name")) };
        match it.next() {
            Some((Tok::Punct('{'), _)) => {}
            Some((_, l)) => return Err(at(l, &format!("expected '{{' after section {name}"))),
            None => return Err(at(line, &format!("expected '{{' after section {name}"))),
        }
        let mut entries = Vec::new();
        loop {
            let Some((tok, line)) = it.next() else { return Err(at(line, &format!("section {name} is not closed"))) };
            let module = match tok {
                Tok::Punct('}') => break,
                Tok::Word(m) => m,
                _ => return Err(at(line, "expected a login module class name or '}'")),
            };
            let flag = match it.next() {
                Some((Tok::Word(f), _))
                    if ["required", "requisite", "sufficient", "optional"]
                        .contains(&f.to_ascii_lowercase().as_str()) =>
                {
                    f.to_ascii_lowercase()
                }
                Some((_, l)) => {
                    return Err(at(l, &format!("{module}: expected required, requisite, sufficient or optional")))
                }
                None => return Err(at(line, &format!("{module}: missing control flag"))),
            };
            let mut options = Vec::new();
            loop {
                match it.next() {
                    Some((Tok::Punct(';'), _)) => break,
                    Some((Tok::Word(key), l)) => {
                        if !matches!(it.next(), Some((Tok::Punct('='), _))) {
                            return Err(at(l, &format!("option {key} has no '='")));
                        }
                        match it.next() {
                            Some((Tok::Word(v) | Tok::Quoted(v), _)) => options.push((key, v)),
                            _ => return Err(at(l, &format!("option {key} has no value"))),
                        }
                    }
                    Some((_, l)) => return Err(at(l, "expected an option or ';'")),
                    None => return Err(at(line, &format!("{module}: entry not ended by ';'"))),
                }
            }
            entries.push(Entry { module, flag, options });
        }
        if !matches!(it.next(), Some((Tok::Punct(';'), _))) {
            return Err(at(line, &format!("section {name}: expected ';' after '}}'")));
        }
        sections.push(Section { name, entries });
    }
    Ok(sections)
}

/// `-Djava.security.auth.login.config=PATH` in Java flags (the last one wins, as in Java). Quotes
/// around the value are dropped.
pub fn login_config_from_jvm_flags(flags: &str) -> Option<String> {
    jvm_property(flags, "java.security.auth.login.config")
}

/// The value of `-D<name>=` in a JVM command line; the last one wins, as in Java.
pub fn jvm_property(flags: &str, name: &str) -> Option<String> {
    let key = format!("-D{name}=");
    flags
        .split_whitespace()
        .rev()
        .filter_map(|f| f.strip_prefix(key.as_str()))
        .map(|v| v.trim_matches(['"', '\'']).trim_start_matches('=').to_string())
        .find(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_zookeepers_and_kazoos_server_sections() {
        let text = r#"
            // kazoo's harness
            Server {
                org.apache.zookeeper.server.auth.DigestLoginModule required
                user_super="super_secret"
                user_jaasuser="jaas_password";
            };
            /* a client section
               over two lines */
            Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="bob" password='p"w'; };
            # Kerberos
            Krb {
              com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k.keytab"
              principal="zookeeper/host@REALM";
              other.Module optional;
            };
        "#;
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "Server");
        assert_eq!(s[0].entries[0].module, "org.apache.zookeeper.server.auth.DigestLoginModule");
        assert_eq!(s[0].entries[0].flag, "required");
        assert_eq!(
            s[0].entries[0].options,
            vec![("user_super".into(), "super_secret".into()), ("user_jaasuser".into(), "jaas_password".into())]
        );
        assert_eq!(s[1].entries[0].options[1], ("password".to_string(), "p\"w".to_string()));
        assert_eq!(s[2].entries.len(), 2);
        assert_eq!(s[2].entries[0].options[0], ("useKeyTab".to_string(), "true".to_string()));
        assert_eq!(s[2].entries[1].options, vec![]);
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("  // only a comment\n").unwrap(), vec![]);
    }

    #[test]
    fn malformed_files_are_errors_naming_the_line() {
        for (text, line) in [
            ("Server {\n m.M required a=\"x\";\n", "Server is not closed"),
            ("Server {\n m.M always;\n};", "line 2"),
            ("Server {\n m.M required a;\n};", "line 2"),
            ("Server {\n m.M required a=\"unterminated;\n};", "line"),
            ("Server {\n m.M required a=b\n}", "line"),
            ("Server { m.M required; }", "line 1"),
            ("{ m.M required; };", "line 1"),
            ("/* never closed", "line 1"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(line), "{text:?}: {err}");
        }
    }

    #[test]
    fn finds_the_login_config_in_jvm_flags() {
        let f = "-Xmx1g -Djava.security.auth.login.config=/a/jaas.conf -Dzookeeper.x=1";
        assert_eq!(login_config_from_jvm_flags(f).as_deref(), Some("/a/jaas.conf"));
        let f = "-Djava.security.auth.login.config=/first -Djava.security.auth.login.config=\"/second\"";
        assert_eq!(login_config_from_jvm_flags(f).as_deref(), Some("/second"));
        assert_eq!(login_config_from_jvm_flags("-Dother=1"), None);
    }
}
