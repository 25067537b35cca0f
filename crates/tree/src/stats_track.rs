//! `StatsTrack`: the text format of quota limit and stats nodes, as ZooKeeper's `StatsTrack`
//! parses and prints it.

use std::collections::BTreeMap;
use std::fmt;

/// Parsed `count=<n>,bytes=<n>[=;key=value...]` text. Missing keys read as -1 (unset).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatsTrack {
    stats: BTreeMap<String, i64>,
}

impl StatsTrack {
    /// Parses the text; pieces split on `,` or `;`, each `key=value`; an empty value is -1 and
    /// malformed pieces are skipped.
    pub fn parse(text: &str) -> Self {
        let mut stats = BTreeMap::new();
        for piece in text.split([',', ';']).filter(|p| !p.is_empty()) {
            let mut kv = piece.split('=');
            let key = kv.next().unwrap_or("");
            if key.is_empty() {
                continue;
            }
            let value = match kv.next() {
                None | Some("") => -1,
                Some(v) => match v.trim().parse::<i64>() {
                    Ok(n) => n,
                    Err(_) => continue,
                },
            };
            stats.insert(key.to_string(), value);
        }
        Self { stats }
    }

    /// Reads a key; -1 when unset.
    pub fn get(&self, key: &str) -> i64 {
        self.stats.get(key).copied().unwrap_or(-1)
    }

    /// The `count` value.
    pub fn count(&self) -> i64 {
        self.get("count")
    }

    /// The `bytes` value.
    pub fn bytes(&self) -> i64 {
        self.get("bytes")
    }

    /// Sets the `count` value.
    pub fn set_count(&mut self, n: i64) {
        self.stats.insert("count".into(), n);
    }

    /// Sets the `bytes` value.
    pub fn set_bytes(&mut self, n: i64) {
        self.stats.insert("bytes".into(), n);
    }
}

impl fmt::Display for StatsTrack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "count={},bytes={}", self.count(), self.bytes())?;
        let extra: Vec<_> = self.stats.iter().filter(|(k, _)| *k != "count" && *k != "bytes").collect();
        if !extra.is_empty() {
            f.write_str("=")?;
            for (k, v) in extra {
                write!(f, ";{k}={v}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_both_formats() {
        let s = StatsTrack::parse("count=4,bytes=5");
        assert_eq!((s.count(), s.bytes()), (4, 5));
        assert_eq!(s.to_string(), "count=4,bytes=5");
        let t = StatsTrack::parse("count=4,bytes=5=;byteHardLimit=10;countHardLimit=10");
        assert_eq!(t.get("countHardLimit"), 10);
        assert_eq!(t.to_string(), "count=4,bytes=5=;byteHardLimit=10;countHardLimit=10");
        let u = StatsTrack::parse("count=,bytes=7");
        assert_eq!((u.count(), u.bytes()), (-1, 7));
        assert_eq!(StatsTrack::parse("").count(), -1);
        assert_eq!(StatsTrack::parse("garbage,count=x").count(), -1);
    }
}
