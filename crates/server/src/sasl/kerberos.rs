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

/// The authorization id for an authenticated name: its short name (the first component; Warden
/// applies no `auth_to_local` rules), then `/host` unless `remove_host`
/// (`zookeeper.kerberos.removeHostFromPrincipal`), then `@realm` unless `remove_realm`
/// (`zookeeper.kerberos.removeRealmFromPrincipal`). A plain DIGEST-MD5 user name is itself.
pub fn authorization_id(name: &str, remove_host: bool, remove_realm: bool) -> Result<String, String> {
    let k = KerberosName::parse(name)?;
    let mut id = k.service.to_string();
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

    #[test]
    fn host_and_realm_are_removed_on_request() {
        let p = "zookeeper/host.example@EXAMPLE.ORG";
        assert_eq!(authorization_id(p, false, false).unwrap(), p);
        assert_eq!(authorization_id(p, true, false).unwrap(), "zookeeper@EXAMPLE.ORG");
        assert_eq!(authorization_id(p, false, true).unwrap(), "zookeeper/host.example");
        assert_eq!(authorization_id(p, true, true).unwrap(), "zookeeper");
        assert_eq!(authorization_id("jaasuser", true, true).unwrap(), "jaasuser");
        assert_eq!(authorization_id("client@R", false, true).unwrap(), "client");
        assert!(authorization_id("a@b@c", false, false).is_err());
    }
}
