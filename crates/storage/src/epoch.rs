//! `acceptedEpoch` and `currentEpoch` (as ZooKeeper's `QuorumPeer` writes them): decimal text, no
//! newline, in `<dataDir>/version-2/`. Quorum members write them during ZAB discovery and
//! synchronisation; a standalone server, like Apache ZooKeeper's, has none.

use std::io::Write;

use crate::snapshot::sync_dir;
use crate::{DataDir, StorageError};

/// Which epoch file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochFile {
    /// The epoch this server has accepted in discovery (LEADERINFO).
    Accepted,
    /// The epoch whose history this server has fully synchronised (before acking NEWLEADER).
    Current,
}

impl EpochFile {
    pub fn file_name(self) -> &'static str {
        match self {
            EpochFile::Accepted => "acceptedEpoch",
            EpochFile::Current => "currentEpoch",
        }
    }
}

impl DataDir {
    /// Reads an epoch file; `None` if it does not exist. Anything but a decimal number is corruption.
    pub fn read_epoch(&self, which: EpochFile) -> Result<Option<i64>, StorageError> {
        let path = self.snap_dir().join(which.file_name());
        let bytes = match self.fs().read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StorageError::io("read", &path)(e)),
        };
        let text = String::from_utf8_lossy(&bytes);
        text.trim().parse::<i64>().map(Some).map_err(|_| StorageError::Corrupt {
            file: path.clone(),
            offset: 0,
            reason: format!("{:?} is not an epoch number", text.trim()),
        })
    }

    /// Writes an epoch file durably: temp file, fsync, rename, fsync the directory.
    pub fn write_epoch(&self, which: EpochFile, epoch: i64) -> Result<(), StorageError> {
        let fs = self.fs();
        let dir = self.snap_dir();
        fs.create_dir_all(&dir).map_err(StorageError::io("create directory", &dir))?;
        let path = dir.join(which.file_name());
        let tmp = dir.join(format!("{}.tmp", which.file_name()));
        let mut file = fs.create(&tmp).map_err(StorageError::io("create", &tmp))?;
        file.write_all(epoch.to_string().as_bytes()).map_err(StorageError::io("write", &tmp))?;
        file.sync_all().map_err(StorageError::io("fsync", &tmp))?;
        drop(file);
        fs.rename(&tmp, &path).map_err(StorageError::io("rename", &tmp))?;
        sync_dir(fs, &dir)
    }

    /// The (accepted, current) epochs of a quorum member at start-up, with ZooKeeper's defaults:
    /// a missing `currentEpoch` is the epoch of the last zxid; a missing `acceptedEpoch` is the
    /// current one; accepted is never below current.
    pub fn read_epochs(&self, last_zxid: i64) -> Result<(i64, i64), StorageError> {
        let current = self.read_epoch(EpochFile::Current)?.unwrap_or(last_zxid >> 32);
        let accepted = self.read_epoch(EpochFile::Accepted)?.unwrap_or(current).max(current);
        Ok((accepted, current))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_round_trip_as_plain_decimal_text() {
        let dir = std::env::temp_dir().join(format!("warden-epoch-{}", std::process::id()));
        let data = DataDir::real(&dir, &dir);
        assert_eq!(data.read_epoch(EpochFile::Current).unwrap(), None);
        data.write_epoch(EpochFile::Current, 7).unwrap();
        data.write_epoch(EpochFile::Accepted, 8).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("version-2/currentEpoch")).unwrap(), "7");
        assert_eq!(data.read_epoch(EpochFile::Current).unwrap(), Some(7));
        assert_eq!(data.read_epoch(EpochFile::Accepted).unwrap(), Some(8));
        std::fs::write(dir.join("version-2/acceptedEpoch"), "x").unwrap();
        assert!(matches!(data.read_epoch(EpochFile::Accepted), Err(StorageError::Corrupt { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
