//! Kerberos principal names as ZooKeeper's `KerberosName` parses them, and the authorization id
//! its `SaslServerCallbackHandler` derives from an authenticated name.

/// `service[/host][@realm]`: a name without `@` is a bare service name (it may contain `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KerberosName<'a> {
    pub service: &'a str,
    pub host: Option<&'a str>,
    pub realm: Option<&'a str>,
}

impl<'a> KerberosName<'a> {
    /// Parses as `KerberosName`'s constructor: with an `@`, the name must be
    /// `service[/host]@realm` with no `/` or `@` inside a part; without one it is all service.
    pub fn parse(name: &'a str) -> Result<Self, String> {
        let Some((left, realm)) = name.split_once('@') else {
            return Ok(Self { service: name, host: None, realm: None });
        };
        let malformed = || format!("malformed Kerberos name {name:?}");
        if realm.contains(['/', '@']) {
            return Err(malformed());
        }
        let (service, host) = match left.split_once('/') {
            Some((_, h)) if h.contains('/') => return Err(malformed()),
            Some((s, h)) => (s, Some(h)),
            None => (left, None),
        };
        Ok(Self { service, host, realm: Some(realm) })
    }
}

/// `zookeeper.security.auth_to_local`: rules that turn a Kerberos name into a short name, as
/// ZooKeeper's (Hadoop's) `KerberosName` reads them, tried in order, the first that applies wins:
///
/// - `DEFAULT`: a name of the default realm shortens to its first component.
/// - `RULE:[n:format](match)s/from/to/g`: for a name of `n` components, `format` with `$0` the
///   realm and `$1`, `$2` the components; if it matches `match` (whole), `from` is replaced by
///   `to` (every match with `g`). The result must not contain `/` or `@`.
#[derive(Debug, Clone)]
pub struct AuthToLocal {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Rule {
        components: usize,
        format: String,
        matches: Option<regex::Regex>,
        replace: Option<(regex::Regex, String, bool)>,
    },
}

impl Default for AuthToLocal {
    fn default() -> Self {
        Self { rules: vec![Rule::Default] }
    }
}

impl AuthToLocal {
    /// Parses a rule list (whitespace between rules, as `KerberosName.parseRules`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut rules = Vec::new();
        let mut rest = text.trim_start();
        while !rest.is_empty() {
            let (rule, after) = if let Some(after) = rest.strip_prefix("DEFAULT") {
                (Rule::Default, after)
            } else {
                Self::parse_rule(rest).ok_or_else(|| format!("invalid auth_to_local rule: {rest}"))??
            };
            rules.push(rule);
            rest = after.trim_start();
        }
        Ok(Self { rules })
    }

    /// One `RULE:[n:format](match)s/from/to/g` at the start of `text`; `None` when it is not one.
    fn parse_rule(text: &str) -> Option<Result<(Rule, &str), String>> {
        let body = text.strip_prefix("RULE:[")?;
        let (n, body) = body.split_once(':')?;
        let components: usize = if n.is_empty() { 0 } else { n.parse().ok()? };
        let (format, mut rest) = body.split_once(']')?;
        let mut matches = None;
        if let Some(after) = rest.strip_prefix('(') {
            let (m, after) = after.split_once(')')?;
            matches = Some(m);
            rest = after;
        }
        let mut replace = None;
        if let Some(after) = rest.strip_prefix("s/") {
            let mut parts = after.splitn(3, '/');
            let (from, to, after) = (parts.next()?, parts.next()?, parts.next()?);
            let (global, after) = match after.strip_prefix('g') {
                Some(a) => (true, a),
                None => (false, after),
            };
            replace = Some((from, to, global));
            rest = after;
        }
        let whole = |re: &str| regex::Regex::new(&format!("^(?:{re})$"));
        let compiled = (|| -> Result<Rule, regex::Error> {
            Ok(Rule::Rule {
                components,
                format: format.to_string(),
                matches: matches.map(whole).transpose()?,
                replace: match replace {
                    Some((from, to, g)) => Some((regex::Regex::new(from)?, java_replacement(to), g)),
                    None => None,
                },
            })
        })();
        Some(compiled.map(|r| (r, rest)).map_err(|e| format!("auth_to_local rule {text:?}: {e}")))
    }

    /// `KerberosName.getShortName`: `Ok(None)` when no rule applies (ZooKeeper then keeps the full
    /// name), `Err` when a rule gives a name with `/` or `@`, or refers to a missing component.
    pub fn short_name(&self, name: &KerberosName<'_>, default_realm: &str) -> Result<Option<String>, String> {
        let Some(realm) = name.realm else {
            if name.host.is_none() {
                return Ok(Some(name.service.to_string()));
            }
            return Ok(None);
        };
        let mut params = vec![realm, name.service];
        params.extend(name.host);
        for rule in &self.rules {
            let result = match rule {
                Rule::Default => (realm == default_realm).then(|| name.service.to_string()),
                Rule::Rule { components, format, matches, replace } if params.len() - 1 == *components => {
                    let base = substitute_params(format, &params)?;
                    match matches {
                        Some(m) if !m.is_match(&base) => None,
                        _ => Some(match replace {
                            None => base,
                            Some((from, to, true)) => from.replace_all(&base, to.as_str()).into_owned(),
                            Some((from, to, false)) => from.replace(&base, to.as_str()).into_owned(),
                        }),
                    }
                }
                Rule::Rule { .. } => None,
            };
            if let Some(r) = result {
                if r.contains(['/', '@']) {
                    return Err(format!("non-simple name {r} after an auth_to_local rule"));
                }
                return Ok(Some(r));
            }
        }
        Ok(None)
    }
}

/// A Java `Matcher.replaceAll` replacement (`$1` a group, `\\$` a dollar) in the regex crate's
/// syntax (`${1}`, `$$`).
fn java_replacement(to: &str) -> String {
    let mut out = String::new();
    let mut chars = to.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    digits.push(d);
                }
                out.push_str(&format!("${{{digits}}}"));
            }
            c => out.push(c),
        }
    }
    out
}

/// `default_realm` of the `[libdefaults]` section of a krb5.conf text.
pub fn default_realm_of(krb5_conf: &str) -> Option<String> {
    let mut in_libdefaults = false;
    for line in krb5_conf.lines().map(str::trim) {
        if line.starts_with('[') {
            in_libdefaults = line == "[libdefaults]";
        } else if in_libdefaults && !line.starts_with(['#', ';']) {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == "default_realm" && !v.trim().is_empty() {
                    return Some(v.trim().to_string());
                }
            }
        }
    }
    None
}

/// `$n` in `format` replaced by `params[n]`.
fn substitute_params(format: &str, params: &[&str]) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut digits = String::new();
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            digits.push(d);
        }
        if digits.is_empty() {
            continue;
        }
        let n: usize = digits.parse().map_err(|_| format!("bad parameter ${digits} in {format:?}"))?;
        out.push_str(params.get(n).ok_or_else(|| format!("${n} in {format:?}: the name has no such part"))?);
    }
    Ok(out)
}

/// The authorization id for an authenticated name, as ZooKeeper's `SaslServerCallbackHandler`:
/// its short name by the `auth_to_local` rules, then `/host` unless `remove_host`
/// (`zookeeper.kerberos.removeHostFromPrincipal`), then `@realm` unless `remove_realm`
/// (`zookeeper.kerberos.removeRealmFromPrincipal`). When no rule applies (a name of another realm
/// under `DEFAULT`), or a rule fails, ZooKeeper logs it and keeps the whole name; so does this.
/// A plain DIGEST-MD5 user name is itself.
pub fn authorization_id(
    name: &str,
    rules: &AuthToLocal,
    default_realm: &str,
    remove_host: bool,
    remove_realm: bool,
) -> Result<String, String> {
    let k = KerberosName::parse(name)?;
    let mut id = match rules.short_name(&k, default_realm) {
        Ok(Some(short)) => short,
        Ok(None) => {
            tracing::info!(name, "no auth_to_local rule applies; the identity is the whole name");
            return Ok(name.to_string());
        }
        Err(why) => {
            tracing::warn!(name, %why, "auth_to_local; the identity is the whole name");
            return Ok(name.to_string());
        }
    };
    if let (Some(h), false) = (k.host, remove_host) {
        id.push('/');
        id.push_str(h);
    }
    if let (Some(r), false) = (k.realm, remove_realm) {
        id.push('@');
        id.push_str(r);
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_zookeepers_kerberos_name() {
        let k = KerberosName::parse("zookeeper/host.example@EXAMPLE.ORG").unwrap();
        assert_eq!((k.service, k.host, k.realm), ("zookeeper", Some("host.example"), Some("EXAMPLE.ORG")));
        let k = KerberosName::parse("client@KAZOOTEST.ORG").unwrap();
        assert_eq!((k.service, k.host, k.realm), ("client", None, Some("KAZOOTEST.ORG")));
        let k = KerberosName::parse("a/b").unwrap();
        assert_eq!((k.service, k.host, k.realm), ("a/b", None, None), "no @: all of it is the service");
        for bad in ["a@b@c", "a/b/c@R", "a@R/x"] {
            assert!(KerberosName::parse(bad).is_err(), "{bad}");
        }
        // The tree's validity check agrees with this parser.
        for name in ["a@b@c", "a/b/c@R", "a@R/x", "jaasuser", "a/b", "s/h@R", "u@R", "@", ""] {
            assert_eq!(KerberosName::parse(name).is_ok(), warden_tree::acl::is_valid_kerberos_name(name), "{name}");
        }
    }

    fn id(name: &str, remove_host: bool, remove_realm: bool) -> Result<String, String> {
        authorization_id(name, &AuthToLocal::default(), "EXAMPLE.ORG", remove_host, remove_realm)
    }

    #[test]
    fn host_and_realm_are_removed_on_request() {
        let p = "zookeeper/host.example@EXAMPLE.ORG";
        assert_eq!(id(p, false, false).unwrap(), p);
        assert_eq!(id(p, true, false).unwrap(), "zookeeper@EXAMPLE.ORG");
        assert_eq!(id(p, false, true).unwrap(), "zookeeper/host.example");
        assert_eq!(id(p, true, true).unwrap(), "zookeeper");
        assert_eq!(id("jaasuser", true, true).unwrap(), "jaasuser");
        assert_eq!(id("client@EXAMPLE.ORG", false, true).unwrap(), "client");
        assert!(id("a@b@c", false, false).is_err());
        // Another realm: DEFAULT does not apply, and ZooKeeper keeps the whole name.
        assert_eq!(id("client@OTHER.ORG", true, true).unwrap(), "client@OTHER.ORG");
        assert_eq!(id("zookeeper/h@OTHER.ORG", true, true).unwrap(), "zookeeper/h@OTHER.ORG");
    }

    #[test]
    fn the_default_realm_comes_from_libdefaults() {
        let conf = "[realms]\n default_realm = WRONG\n[libdefaults]\n  # default_realm = NO\n  dns_lookup_kdc = false\n  default_realm = KAZOOTEST.ORG\n";
        assert_eq!(default_realm_of(conf).as_deref(), Some("KAZOOTEST.ORG"));
        assert_eq!(default_realm_of("[libdefaults]\n rdns = false\n"), None);
    }

    /// Rules as Hadoop and ZooKeeper document them (`KerberosName`'s own tests).
    #[test]
    fn auth_to_local_rules_shorten_names() {
        let rules = AuthToLocal::parse(
            "RULE:[1:$1@$0](.*@FOO.COM)s/@.*//\n RULE:[2:$1](johndoe)s/^.*$/guest/ \
             RULE:[2:$1;$2](^.*;admin$)s/;admin$// RULE:[2:$2](root) RULE:[1:$1](f.*)s/o/0/g DEFAULT",
        )
        .unwrap();
        let short = |n: &str| rules.short_name(&KerberosName::parse(n).unwrap(), "APACHE.ORG");
        assert_eq!(short("john@FOO.COM").unwrap().as_deref(), Some("john"));
        assert_eq!(short("johndoe/zoo@FOO.COM").unwrap().as_deref(), Some("guest"));
        assert_eq!(short("joe/admin@FOO.COM").unwrap().as_deref(), Some("joe"));
        assert_eq!(short("joe/root@FOO.COM").unwrap().as_deref(), Some("root"));
        assert_eq!(short("foo@BAR.COM").unwrap().as_deref(), Some("f00"), "g: every match");
        assert_eq!(short("omalley@APACHE.ORG").unwrap().as_deref(), Some("omalley"), "DEFAULT");
        assert_eq!(short("hdfs/host@APACHE.ORG").unwrap().as_deref(), Some("hdfs"), "DEFAULT");
        assert_eq!(short("someone@OTHER.ORG").unwrap(), None, "no rule applies");
        assert_eq!(short("plain").unwrap().as_deref(), Some("plain"), "a simple name is itself");
        // A rule that leaves a realm in: an error, and the identity is the whole name.
        let keep = AuthToLocal::parse("RULE:[1:$1@$0]").unwrap();
        assert!(keep.short_name(&KerberosName::parse("a@R").unwrap(), "R").is_err());
        assert_eq!(authorization_id("a@R", &keep, "R", false, true).unwrap(), "a@R");
        // With rules: short name, then host and realm unless removed.
        let swap = AuthToLocal::parse("RULE:[2:$1-$2](.*)s/(.*)-(.*)/$2x$1/").unwrap();
        let name = KerberosName::parse("svc/h1@R").unwrap();
        assert_eq!(swap.short_name(&name, "R").unwrap().as_deref(), Some("h1xsvc"), "Java's $1 groups");
        let hbase = AuthToLocal::parse("RULE:[2:$1@$0](hbase@.*)s/.*/hbase-svc/ DEFAULT").unwrap();
        assert_eq!(authorization_id("hbase/rs1@R", &hbase, "R", true, true).unwrap(), "hbase-svc");
        assert_eq!(authorization_id("hbase/rs1@R", &hbase, "R", false, false).unwrap(), "hbase-svc/rs1@R");
        for bad in ["RULE:[1:$1", "NOPE", "RULE:[1:$1](unclosed", "RULE:[x:$1]", "RULE:[1:$1](a)s/(/x/"] {
            assert!(AuthToLocal::parse(bad).is_err(), "{bad}");
        }
    }
}
