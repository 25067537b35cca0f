//! `acceptedEpoch` and `currentEpoch` (as ZooKeeper's `QuorumPeer` writes them): decimal text, no
//! newline, in `<dataDir>/version-2/`. Quorum members write them during ZAB discovery and
//! synchronisation; a standalone server, like Apache ZooKeeper's, has none.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::fs::{Fs, RealFs};
use crate::snapshot::sync_dir;
use crate::StorageError;

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

    fn path(self, data_dir: &Path) -> PathBuf {
        data_dir.join("version-2").join(self.file_name())
    }
}

/// Reads an epoch file; `None` if it does not exist. Anything but a decimal number is corruption.
pub fn read_epoch(data_dir: &Path, which: EpochFile) -> Result<Option<i64>, StorageError> {
    read_epoch_with_fs(&RealFs, data_dir, which)
}

pub fn read_epoch_with_fs(fs: &dyn Fs, data_dir: &Path, which: EpochFile) -> Result<Option<i64>, StorageError> {
    let path = which.path(data_dir);
    let bytes = match fs.read(&path) {
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
pub fn write_epoch(data_dir: &Path, which: EpochFile, epoch: i64) -> Result<(), StorageError> {
    write_epoch_with_fs(&RealFs, data_dir, which, epoch)
}

pub fn write_epoch_with_fs(fs: &dyn Fs, data_dir: &Path, which: EpochFile, epoch: i64) -> Result<(), StorageError> {
    let dir = data_dir.join("version-2");
    fs.create_dir_all(&dir).map_err(StorageError::io("create directory", &dir))?;
    let path = which.path(data_dir);
    let tmp = dir.join(format!("{}.tmp", which.file_name()));
    let mut file = fs.create(&tmp).map_err(StorageError::io("create", &tmp))?;
    file.write_all(epoch.to_string().as_bytes()).map_err(StorageError::io("write", &tmp))?;
    file.sync_all().map_err(StorageError::io("fsync", &tmp))?;
    drop(file);
    fs.rename(&tmp, &path).map_err(StorageError::io("rename", &tmp))?;
    sync_dir(fs, &dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_round_trip_as_plain_decimal_text() {
        let dir = std::env::temp_dir().join(format!("warden-epoch-{}", std::process::id()));
        assert_eq!(read_epoch(&dir, EpochFile::Current).unwrap(), None);
        write_epoch(&dir, EpochFile::Current, 7).unwrap();
        write_epoch(&dir, EpochFile::Accepted, 8).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("version-2/currentEpoch")).unwrap(), "7");
        assert_eq!(read_epoch(&dir, EpochFile::Current).unwrap(), Some(7));
        assert_eq!(read_epoch(&dir, EpochFile::Accepted).unwrap(), Some(8));
        std::fs::write(dir.join("version-2/acceptedEpoch"), "x").unwrap();
        assert!(matches!(read_epoch(&dir, EpochFile::Accepted), Err(StorageError::Corrupt { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
