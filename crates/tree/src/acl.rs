//! ACL checks and fix-up (ZooKeeper's `ZooKeeperServer.checkACL`, `PrepRequestProcessor.fixupACL`
//! and the `AuthenticationProvider`s).
//!
//! Known schemes: `world`, `auth` (expanded at create/setACL), `digest`, `ip`, `sasl`, `x509` and
//! `super` (a caller id that bypasses every check).

use base64::Engine as _;
use sha1::{Digest as _, Sha1};
use std::net::IpAddr;
use warden_proto::{perms, Acl, ErrorCode, Id};

/// `checkACL`: may a caller holding `ids` exercise `perm` on a node whose ACL is `acl`?
pub fn check_acl(acl: &[Acl], perm: i32, ids: &[Id]) -> bool {
    if acl.is_empty() || ids.iter().any(|id| id.scheme == "super") {
        return true;
    }
    acl.iter().filter(|a| a.perms & perm != 0).any(|a| entry_matches(&a.id, ids))
}

/// May every caller read a node with this ACL (no ACL, or `world:anyone` with READ)? Then
/// [`check_acl`] for READ holds whatever the caller's ids.
pub fn world_readable(acl: &[Acl]) -> bool {
    acl.is_empty() || acl.iter().any(|a| a.perms & perms::READ != 0 && a.id.scheme == "world" && a.id.id == "anyone")
}

fn entry_matches(entry: &Id, ids: &[Id]) -> bool {
    if entry.scheme == "world" && entry.id == "anyone" {
        return true;
    }
    ids.iter().filter(|c| c.scheme == entry.scheme).any(|c| scheme_matches(&entry.scheme, &c.id, &entry.id))
}

/// The `matches` of each authentication provider: CIDR for `ip`, equality for the others.
fn scheme_matches(scheme: &str, caller: &str, acl_expr: &str) -> bool {
    match scheme {
        "ip" => ip_matches(caller, acl_expr),
        "digest" | "x509" => caller == acl_expr,
        // SASLAuthenticationProvider: a SASL user named `super` matches every sasl entry.
        "sasl" => caller == acl_expr || caller == "super",
        _ => false,
    }
}

/// The id a `digest` AuthPacket authenticates as, by ZooKeeper's `generateDigest`: the credential
/// up to its first colon (all of it when it has none), a colon, then BASE64(SHA1(credential)). Any
/// credential is accepted: `user:password`, one without a colon, an empty one, one with several
/// colons. The bytes are read as ZooKeeper's `new String(bytes)` reads them under a UTF-8 default
/// charset, each malformed sequence becoming U+FFFD, and the hash is over that text's UTF-8 bytes.
pub fn digest_id(credential: &[u8]) -> String {
    let text = String::from_utf8_lossy(credential);
    let user = text.split(':').next().unwrap_or_default();
    let hash = Sha1::digest(text.as_bytes());
    format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(hash))
}

/// Parses an address into its bytes (4 for IPv4, 16 for IPv6).
fn addr_bytes(s: &str) -> Option<Vec<u8>> {
    match s.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) => Some(a.octets().to_vec()),
        IpAddr::V6(a) => Some(a.octets().to_vec()),
    }
}

/// Parses an `ip` ACL expression `addr` or `addr/bits` into (address bytes, prefix bits).
fn parse_cidr(expr: &str) -> Option<(Vec<u8>, usize)> {
    let (addr, bits) = match expr.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (expr, None),
    };
    let bytes = addr_bytes(addr)?;
    let max = bytes.len() * 8;
    let bits = match bits {
        Some(b) => b.parse::<usize>().ok().filter(|&b| b <= max)?,
        None => max,
    };
    Some((bytes, bits))
}

fn ip_matches(caller: &str, acl_expr: &str) -> bool {
    let Some((acl_addr, bits)) = parse_cidr(acl_expr) else { return false };
    let Some(remote) = addr_bytes(caller) else { return false };
    if remote.len() != acl_addr.len() {
        return false;
    }
    (0..bits).all(|i| bit(&acl_addr, i) == bit(&remote, i))
}

fn bit(bytes: &[u8], i: usize) -> bool {
    bytes.get(i / 8).is_some_and(|b| b & (0x80 >> (i % 8)) != 0)
}

/// `isValid` of the provider for an ACL id; unknown schemes are invalid. `sasl_provider`: whether
/// `SASLAuthenticationProvider` is registered (`authProvider.N=...`); without it `sasl` ids are
/// invalid, as ZooKeeper has no provider for the scheme then.
fn id_is_valid(id: &Id, sasl_provider: bool) -> bool {
    match &*id.scheme {
        // Java's split(":") drops trailing empty strings; exactly two parts are required.
        "digest" => java_split_count(&id.id, ':') == 2,
        "ip" => parse_cidr(&id.id).is_some(),
        "sasl" => sasl_provider && is_valid_kerberos_name(&id.id),
        "x509" => true,
        _ => false,
    }
}

/// ZooKeeper's `KerberosName` parse: a name without `@` is a bare service name; one with `@` must
/// be `service[/host]@realm` where no part holds `/` or `@`.
pub fn is_valid_kerberos_name(name: &str) -> bool {
    let Some((left, realm)) = name.split_once('@') else { return true };
    if realm.contains(['@', '/']) {
        return false;
    }
    match left.split_once('/') {
        Some((service, host)) => !service.contains('@') && !host.contains(['/', '@']),
        None => true,
    }
}

fn java_split_count(s: &str, sep: char) -> usize {
    let parts: Vec<&str> = s.split(sep).collect();
    let trailing_empty = parts.iter().rev().take_while(|p| p.is_empty()).count();
    if trailing_empty == parts.len() {
        // Java returns [""] for the empty string, and [] for a string of only separators.
        return usize::from(s.is_empty());
    }
    parts.len() - trailing_empty
}

/// Does the provider of this caller id report "authenticated" (so `auth` expands to it)?
fn is_authenticated_scheme(scheme: &str) -> bool {
    matches!(scheme, "digest" | "sasl" | "x509")
}

/// `fixupACL`: removes duplicates, expands `auth` to the caller's authenticated ids and rejects
/// invalid entries; any problem is `InvalidAcl`.
/// `sasl_provider` as for [`id_is_valid`].
pub fn fixup_acl(acl: &[Acl], auth_ids: &[Id], sasl_provider: bool) -> Result<Vec<Acl>, ErrorCode> {
    let mut unique: Vec<&Acl> = Vec::with_capacity(acl.len());
    for a in acl {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    if unique.is_empty() {
        return Err(ErrorCode::InvalidAcl);
    }
    let mut out = Vec::with_capacity(unique.len());
    for a in unique {
        fixup_entry(a, auth_ids, sasl_provider, &mut out)?;
    }
    Ok(out)
}

/// `fixup_acl` taking the list by value: a list it would return unchanged (no duplicates, no
/// `auth` entry, every entry valid, as clients usually send) is handed back without a copy.
pub fn fixup_acl_owned(acl: Vec<Acl>, auth_ids: &[Id], sasl_provider: bool) -> Result<Vec<Acl>, ErrorCode> {
    let unchanged =
        !acl.is_empty() && acl.iter().enumerate().all(|(i, a)| !acl[..i].contains(a) && kept_as_is(a, sasl_provider));
    if unchanged {
        Ok(acl)
    } else {
        fixup_acl(&acl, auth_ids, sasl_provider)
    }
}

/// Whether fixup keeps an entry unchanged: `world:anyone` or a valid id (`id_is_valid` rejects
/// `auth`, which fixup expands instead).
fn kept_as_is(a: &Acl, sasl_provider: bool) -> bool {
    (a.id.scheme == "world" && a.id.id == "anyone") || id_is_valid(&a.id, sasl_provider)
}

fn fixup_entry(a: &Acl, auth_ids: &[Id], sasl_provider: bool, out: &mut Vec<Acl>) -> Result<(), ErrorCode> {
    if a.id.scheme == "auth" {
        let before = out.len();
        out.extend(
            auth_ids.iter().filter(|c| is_authenticated_scheme(&c.scheme)).map(|c| Acl::new(a.perms, c.clone())),
        );
        if out.len() == before {
            return Err(ErrorCode::InvalidAcl);
        }
    } else if kept_as_is(a, sasl_provider) {
        out.push(a.clone());
    } else {
        return Err(ErrorCode::InvalidAcl);
    }
    Ok(())
}

/// What getACL shows a caller without ADMIN permission: every `digest` id is cut to `user:x`.
pub fn mask_digests_for_get_acl(acl: &[Acl]) -> Vec<Acl> {
    acl.iter()
        .map(|a| {
            if a.id.scheme != "digest" {
                return a.clone();
            }
            let masked = match a.id.id.split_once(':') {
                Some((user, _)) => format!("{user}:x"),
                None => a.id.id.to_string(),
            };
            Acl::new(a.perms, Id::new("digest", masked))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_proto::perms;

    fn ip(a: &str) -> Id {
        Id::new("ip", a)
    }

    #[test]
    fn digest_matches_known_value() {
        // Value from ZooKeeper's documentation and tests: super:test.
        assert_eq!(digest_id(b"super:test"), "super:D/InIHSb7yEEbrWz8b9l71RjZJU=");
        assert_eq!(digest_id(b"user:pw").split(':').next(), Some("user"));
    }

    #[test]
    fn digest_of_any_credential_follows_generate_digest() {
        // The user part is the text before the first colon, or all of it; the hash is over the
        // whole credential (values from `sha1sum | base64` of the same bytes).
        assert_eq!(digest_id(b"blah"), "blah:W/H9kn37hnlJai5s8Ay+UMHIcUU=");
        assert_eq!(digest_id(b""), ":2jmj7l5rSw0yVb/vlWAYkK/YBwk=");
        assert_eq!(digest_id(b"a:b:c"), "a:cLzgnoJ6mP5qz3w+mwvPE2vDgu0=");
        // Malformed UTF-8 is hashed as Java decodes it: each bad byte becomes U+FFFD (EF BF BD).
        assert_eq!(digest_id(b"\xff\xfe:x"), "\u{fffd}\u{fffd}:sgm2wdkksskeePf9Lr02TkUKDiU=");
    }

    #[test]
    fn world_readable_means_every_caller_may_read() {
        let anyone = |p| Acl::new(p, Id::new("world", "anyone"));
        let digest = Acl::new(perms::ALL, Id::new("digest", "u:h"));
        for (acl, readable) in [
            (vec![], true),
            (vec![anyone(perms::READ)], true),
            (vec![digest.clone(), anyone(perms::READ | perms::WRITE)], true),
            (vec![anyone(perms::WRITE)], false),
            (vec![digest], false),
        ] {
            assert_eq!(world_readable(&acl), readable, "{acl:?}");
            if readable {
                assert!(check_acl(&acl, perms::READ, &[ip("10.0.0.1")]), "{acl:?}");
            } else {
                assert!(!check_acl(&acl, perms::READ, &[ip("10.0.0.1")]), "{acl:?}");
            }
        }
    }

    #[test]
    fn empty_acl_and_super_allow() {
        assert!(check_acl(&[], perms::ADMIN, &[]));
        let acl = vec![Acl::new(perms::READ, Id::new("digest", "u:h"))];
        assert!(!check_acl(&acl, perms::READ, &[ip("1.2.3.4")]));
        assert!(check_acl(&acl, perms::WRITE, &[Id::new("super", "")]));
    }

    #[test]
    fn world_and_digest() {
        let acl = vec![Acl::new(perms::READ, Id::anyone()), Acl::new(perms::ALL, Id::new("digest", "u:h"))];
        assert!(check_acl(&acl, perms::READ, &[]));
        assert!(!check_acl(&acl, perms::WRITE, &[ip("1.2.3.4")]));
        assert!(check_acl(&acl, perms::WRITE, &[Id::new("digest", "u:h")]));
        assert!(!check_acl(&acl, perms::WRITE, &[Id::new("digest", "u:H")]));
        assert!(!check_acl(&acl, perms::WRITE, &[Id::new("sasl", "u:h")]));
    }

    #[test]
    fn ip_cidr() {
        let acl = |e: &str| vec![Acl::new(perms::ALL, ip(e))];
        assert!(check_acl(&acl("10.0.0.0/8"), perms::READ, &[ip("10.1.2.3")]));
        assert!(!check_acl(&acl("10.0.0.0/8"), perms::READ, &[ip("11.1.2.3")]));
        assert!(check_acl(&acl("10.1.2.3"), perms::READ, &[ip("10.1.2.3")]));
        assert!(!check_acl(&acl("10.1.2.3"), perms::READ, &[ip("10.1.2.4")]));
        assert!(check_acl(&acl("0.0.0.0/0"), perms::READ, &[ip("8.8.8.8")]));
        assert!(check_acl(&acl("192.168.1.128/25"), perms::READ, &[ip("192.168.1.200")]));
        assert!(!check_acl(&acl("192.168.1.128/25"), perms::READ, &[ip("192.168.1.100")]));
        assert!(check_acl(&acl("fe80::/64"), perms::READ, &[ip("fe80::1")]));
        assert!(!check_acl(&acl("fe80::/64"), perms::READ, &[ip("fe81::1")]));
        assert!(!check_acl(&acl("fe80::/64"), perms::READ, &[ip("10.0.0.1")]));
        assert!(!check_acl(&acl("10.0.0.0/33"), perms::READ, &[ip("10.0.0.1")]));
        assert!(!check_acl(&acl("bogus"), perms::READ, &[ip("10.0.0.1")]));
    }

    #[test]
    fn fixup_rules() {
        let digest = Id::new("digest", "u:h");
        let ids = vec![ip("1.2.3.4"), digest.clone()];
        assert_eq!(fixup_acl(&[], &ids, true), Err(ErrorCode::InvalidAcl));
        let open = Acl::open_unsafe();
        assert_eq!(fixup_acl(&[open[0].clone(), open[0].clone()], &ids, true), Ok(open.clone()));
        assert_eq!(fixup_acl(&Acl::creator_all(), &ids, true), Ok(vec![Acl::new(perms::ALL, digest)]));
        assert_eq!(fixup_acl(&Acl::creator_all(), &[ip("1.2.3.4")], true), Err(ErrorCode::InvalidAcl));
        assert_eq!(fixup_acl(&Acl::creator_all(), &[Id::new("super", "")], true), Err(ErrorCode::InvalidAcl));
        for bad in [
            ("digest", "nocolon"),
            ("digest", "a:b:c"),
            ("digest", "u:"),
            ("ip", "1.2.3"),
            ("ip", "1.2.3.4/40"),
            ("world", "someone"),
            ("super", ""),
            ("foo", "bar"),
        ] {
            let acl = vec![Acl::new(perms::ALL, Id::new(bad.0, bad.1))];
            assert_eq!(fixup_acl(&acl, &ids, true), Err(ErrorCode::InvalidAcl), "{bad:?}");
        }
        for good in [("digest", ":h"), ("ip", "1.2.3.4/24"), ("ip", "::1"), ("sasl", "bob")] {
            let acl = vec![Acl::new(perms::ALL, Id::new(good.0, good.1))];
            assert_eq!(fixup_acl(&acl, &ids, true), Ok(acl.clone()), "{good:?}");
        }
    }

    proptest::proptest! {
        /// The by-value fixup returns exactly what the copying one does, for lists mixing valid,
        /// invalid, duplicate and `auth` entries.
        #[test]
        fn owned_fixup_agrees(picks in proptest::collection::vec((0usize..9, 0i32..3), 0..5)) {
            let ids = [
                ("world", "anyone"), ("world", "someone"), ("auth", ""), ("digest", "u:h"),
                ("digest", "nocolon"), ("ip", "10.0.0.0/8"), ("ip", "1.2.3"), ("sasl", "bob"), ("foo", "bar"),
            ];
            let acl: Vec<Acl> = picks.iter().map(|&(i, p)| Acl::new([perms::ALL, perms::READ, 0][p as usize], Id::new(ids[i].0, ids[i].1))).collect();
            for (auth, sasl) in [(vec![], true), (vec![ip("1.2.3.4"), Id::new("digest", "u:h")], false)] {
                proptest::prop_assert_eq!(fixup_acl_owned(acl.clone(), &auth, sasl), fixup_acl(&acl, &auth, sasl));
            }
        }
    }

    #[test]
    fn sasl_ids_need_the_provider_and_a_kerberos_name() {
        let acl = |id: &str| vec![Acl::new(perms::ALL, Id::new("sasl", id))];
        for good in ["jaasuser", "a/b", "svc/host@REALM", "user@REALM", "@", "/@"] {
            assert_eq!(fixup_acl(&acl(good), &[], true), Ok(acl(good)), "{good}");
            assert_eq!(fixup_acl(&acl(good), &[], false), Err(ErrorCode::InvalidAcl), "{good} without the provider");
        }
        for bad in ["a@b@c", "a/b/c@R", "a@R/x"] {
            assert_eq!(fixup_acl(&acl(bad), &[], true), Err(ErrorCode::InvalidAcl), "{bad}");
        }
        // `auth` expands to the connection's sasl id.
        let sasl = Id::new("sasl", "jaasuser");
        let expanded = fixup_acl(&Acl::creator_all(), &[ip("1.2.3.4"), sasl.clone()], true);
        assert_eq!(expanded, Ok(vec![Acl::new(perms::ALL, sasl)]));
    }

    #[test]
    fn sasl_matches_by_equality_or_the_super_sasl_user() {
        let acl = vec![Acl::new(perms::READ, Id::new("sasl", "jaasuser"))];
        assert!(check_acl(&acl, perms::READ, &[Id::new("sasl", "jaasuser")]));
        assert!(check_acl(&acl, perms::READ, &[Id::new("sasl", "super")]));
        assert!(!check_acl(&acl, perms::READ, &[Id::new("sasl", "other")]));
        assert!(!check_acl(&acl, perms::READ, &[Id::new("digest", "jaasuser")]));
        assert!(!check_acl(&acl, perms::WRITE, &[Id::new("sasl", "jaasuser")]));
    }

    #[test]
    fn masking() {
        let acl = vec![Acl::new(perms::ALL, Id::new("digest", "u:secret")), Acl::new(1, ip("1.2.3.4"))];
        let m = mask_digests_for_get_acl(&acl);
        assert_eq!(m[0].id.id, "u:x");
        assert_eq!(m[1], acl[1]);
    }
}
