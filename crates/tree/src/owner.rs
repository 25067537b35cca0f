//! `ephemeralOwner` encoding (ZooKeeper's `EphemeralType`): persistent, ephemeral, container, TTL.

/// Stored owner of container nodes (`Long.MIN_VALUE`).
pub const CONTAINER_OWNER: i64 = i64::MIN;
/// Top byte marking an extended (TTL) owner.
const EXTENDED_MASK: i64 = 0xFF00_0000_0000_0000_u64 as i64;
/// Largest TTL in milliseconds (`0x000000FFFFFFFFFF`).
pub const MAX_TTL_MS: i64 = 0x0000_00FF_FFFF_FFFF;

/// What kind of node an `ephemeralOwner` value denotes (ZooKeeper's `EphemeralType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerKind {
    /// Persistent (owner 0).
    Persistent,
    /// Ephemeral, owned by a session.
    Ephemeral(i64),
    /// Container node.
    Container,
    /// TTL node with its TTL in milliseconds.
    Ttl(i64),
}

impl OwnerKind {
    /// Decodes a stored owner value.
    pub fn of(owner: i64) -> Self {
        if owner == 0 {
            OwnerKind::Persistent
        } else if owner == CONTAINER_OWNER {
            OwnerKind::Container
        } else if owner & EXTENDED_MASK == EXTENDED_MASK {
            OwnerKind::Ttl(owner & MAX_TTL_MS)
        } else {
            OwnerKind::Ephemeral(owner)
        }
    }
}

/// The stored owner value of a TTL node.
pub fn ttl_owner(ttl_ms: i64) -> i64 {
    EXTENDED_MASK | (ttl_ms & MAX_TTL_MS)
}

/// The owner shown to clients in a Stat: containers and TTL nodes show 0.
pub fn client_visible_owner(owner: i64) -> i64 {
    match OwnerKind::of(owner) {
        OwnerKind::Ephemeral(s) => s,
        _ => 0,
    }
}

/// True if the owner denotes a normal (session-owned) ephemeral node.
pub fn is_session_ephemeral(owner: i64) -> bool {
    matches!(OwnerKind::of(owner), OwnerKind::Ephemeral(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding() {
        assert_eq!(OwnerKind::of(0), OwnerKind::Persistent);
        assert_eq!(OwnerKind::of(i64::MIN), OwnerKind::Container);
        assert_eq!(OwnerKind::of(ttl_owner(500)), OwnerKind::Ttl(500));
        assert_eq!(ttl_owner(500) as u64, 0xFF00_0000_0000_01F4);
        assert_eq!(OwnerKind::of(0x0100_0000_0000_0001), OwnerKind::Ephemeral(0x0100_0000_0000_0001));
        assert_eq!(client_visible_owner(ttl_owner(5)), 0);
        assert_eq!(client_visible_owner(i64::MIN), 0);
        assert_eq!(client_visible_owner(42), 42);
    }
}
