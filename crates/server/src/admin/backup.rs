//! ZooKeeper 3.9's `snapshot` and `restore` admin commands, with the authentication 3.9 requires
//! of commands that expose or change the data (`Commands.runCommand`, `AuthRequest(ALL, "/")`).
//!
//! - `GET <commandURL>/snapshot[?streaming=false]` (alias `snap`): the server's data as a snapshot
//!   stream (`application/octet-stream`; headers `last_zxid: 0x<hex>` and `snapshot_size`), with
//!   3.9's lastProcessedZxid section. Warden's is consistent, not fuzzy: the tree as it stands
//!   between two of the owner's steps, every txn up to `last_zxid` in it and none after.
//!   `streaming=false` answers the headers and an empty JSON answer. Warden does not also keep the
//!   snapshot in its data directory, as ZooKeeper's does.
//! - `POST <commandURL>/restore` (alias `rest`), the body a snapshot stream (the `snapshot`
//!   command's, or a plain ZooKeeper snapshot file): replaces the data of a standalone server and
//!   answers `{"last_zxid": <zxid>}` once the snapshot is durable in the data directory (every log
//!   record and snapshot above its zxid removed). Every client connection is closed. Refused in
//!   an ensemble: ZooKeeper 3.9 replaces one member's database alone, which diverges from the
//!   others; Warden says so instead.
//!
//! Both need an `Authorization: <scheme> <auth>` header (`digest user:password`, or `ip`) whose
//! identities hold every permission on `/` by its ACL (the default, `world:anyone`, lets any
//! authenticated caller through; the superDigest user always passes): 401 `Auth info is missing
//! for the command` / `Not authenticated`, 403 `Not authorized`. As in ZooKeeper,
//! `zookeeper.admin.snapshot.enabled` / `restore.enabled` (default true) answer 503 when off, and a
//! rate limiter answers 429: one restore per `zookeeper.admin.rateLimiterIntervalInMS` (300 000)
//! ms, one snapshot per that many *microseconds* (3.9 builds the snapshot limiter with
//! `TimeUnit.MICROSECONDS`).
//!
//! The owner task authenticates, limits, takes the tree and replaces the data; the HTTP side
//! encodes and decodes the stream on a blocking thread.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use warden_node::Node;
use warden_proto::{perms, Id};
use warden_tree::check_acl;

/// Largest restore body taken (413 above): the stream is held in memory while it is decoded.
pub(crate) const MAX_RESTORE_BYTES: usize = 1 << 30;

/// Why an admin `snapshot` or `restore` was not carried out, with ZooKeeper's status and error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    AuthMissing,
    NotAuthenticated,
    NotAuthorized,
    /// `zookeeper.admin.{snapshot,restore}.enabled=false`.
    Disabled,
    RateLimited,
    /// The server cannot do it now (an ensemble member; writes in flight; a bad stream).
    Failed(String),
}

impl Refusal {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Refusal::AuthMissing | Refusal::NotAuthenticated => StatusCode::UNAUTHORIZED,
            Refusal::NotAuthorized => StatusCode::FORBIDDEN,
            Refusal::Disabled => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Refusal::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The answer's `error`: ZooKeeper's text for the auth refusals; none for the others, whose
    /// status says it all in ZooKeeper, except that Warden says why a restore failed.
    pub(crate) fn error(&self) -> Option<String> {
        match self {
            Refusal::AuthMissing => Some("Auth info is missing for the command".into()),
            Refusal::NotAuthenticated => Some("Not authenticated".into()),
            Refusal::NotAuthorized => Some("Not authorized".into()),
            Refusal::Disabled | Refusal::RateLimited => None,
            Refusal::Failed(why) => Some(why.clone()),
        }
    }
}

/// The identities an `Authorization` header proves (ZooKeeper's `handleAuthentication` with its
/// providers' HTTP side): `digest user:password` -> `digest:user:<hash>` (and `super` for the
/// superDigest user); `ip` -> the caller's address. `x509` needs a client certificate, which the
/// plain-HTTP AdminServer never has.
pub(crate) fn authenticate(header: &str, peer: IpAddr, super_digest: Option<&str>) -> Result<Vec<Id>, Refusal> {
    let parts: Vec<&str> = header.split(' ').collect();
    let (scheme, auth) = match parts.as_slice() {
        [scheme] => (*scheme, None),
        [scheme, auth] => (*scheme, Some(*auth)),
        _ => return Err(Refusal::NotAuthenticated),
    };
    match (scheme, auth) {
        ("digest", Some(auth)) => Ok(warden_node::digest_identities(auth.as_bytes(), super_digest)),
        ("ip", _) => Ok(vec![Id::new("ip", peer.to_string())]),
        _ => Err(Refusal::NotAuthenticated),
    }
}

/// 3.9's `AuthRequest(Perms.ALL, "/")`: the caller, by its `Authorization` header, must hold each
/// permission bit on `/`.
pub(crate) fn authorize(
    header: Option<&str>,
    peer: IpAddr,
    node: &Node,
    super_digest: Option<&str>,
) -> Result<(), Refusal> {
    let header = header.ok_or(Refusal::AuthMissing)?;
    let ids = authenticate(header, peer, super_digest)?;
    let root = node.tree().node("/").ok_or_else(|| Refusal::Failed("no root node".into()))?;
    let all = [perms::READ, perms::WRITE, perms::CREATE, perms::DELETE, perms::ADMIN];
    if all.iter().all(|&bit| check_acl(&root.acl, bit, &ids)) {
        Ok(())
    } else {
        Err(Refusal::NotAuthorized)
    }
}

/// The owner's answer to a decoded restore.
#[derive(Debug)]
pub(crate) enum RestoreAnswer {
    /// The data is replaced and durable at this zxid.
    Done(i64),
    /// Not now (writes or a snapshot in flight, another restore): the snapshot comes back, to
    /// be offered again shortly.
    Busy(warden_node::SnapshotData),
    Refused(Refusal),
}

/// How long the HTTP side keeps offering a restore the owner answers `Busy`.
pub(crate) const RESTORE_PATIENCE: Duration = Duration::from_secs(30);

/// ZooKeeper's `RateLimiter(1, interval)`: one call per interval.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    interval: Duration,
    last: Option<Instant>,
}

impl RateLimiter {
    pub(crate) fn new(interval: Duration) -> Self {
        Self { interval, last: None }
    }

    /// Whether a call at `now` is allowed (and counts it).
    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        match self.last {
            Some(at) if now.saturating_duration_since(at) < self.interval => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

/// The owner's state for the two commands.
#[derive(Debug)]
pub(crate) struct Backup {
    pub snapshot_limiter: RateLimiter,
    pub restore_limiter: RateLimiter,
}

impl Backup {
    pub(crate) fn new(settings: &super::AdminSettings) -> Self {
        Self {
            snapshot_limiter: RateLimiter::new(Duration::from_micros(settings.rate_limiter_interval_ms)),
            restore_limiter: RateLimiter::new(Duration::from_millis(settings.rate_limiter_interval_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_tree::digest_id;

    #[test]
    fn authorization_headers_as_zookeepers_providers_read_them() {
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let alice = authenticate("digest alice:secret", ip, None).unwrap();
        assert_eq!(alice, vec![Id::new("digest", digest_id(b"alice:secret"))]);
        let sup = digest_id(b"root:pw");
        let root = authenticate("digest root:pw", ip, Some(&sup)).unwrap();
        assert_eq!(root[0], Id::new("super", ""));
        assert_eq!(authenticate("ip", ip, None).unwrap(), vec![Id::new("ip", "10.1.2.3")]);
        for bad in ["digest", "x509", "sasl bob", "digest a b", "Basic YWxhZGRpbjpvcGVu", ""] {
            assert_eq!(authenticate(bad, ip, None), Err(Refusal::NotAuthenticated), "{bad:?}");
        }
        assert_eq!(Refusal::NotAuthorized.status(), StatusCode::FORBIDDEN);
        assert_eq!(Refusal::AuthMissing.error().as_deref(), Some("Auth info is missing for the command"));
    }

    #[test]
    fn one_call_per_interval() {
        let mut l = RateLimiter::new(Duration::from_millis(100));
        let t0 = Instant::now();
        assert!(l.allow(t0));
        assert!(!l.allow(t0 + Duration::from_millis(99)));
        assert!(l.allow(t0 + Duration::from_millis(100)));
        assert!(!l.allow(t0 + Duration::from_millis(150)));
    }
}
