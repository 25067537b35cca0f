#![allow(dead_code)]
use std::path::{Path, PathBuf};

use warden_proto::data::Acl;
use warden_proto::{Txn, TxnHeader};

/// A varied txn for zxid `z`.
pub fn txn(z: i64) -> (TxnHeader, Txn) {
    let path = format!("/n{z}");
    let t = match z % 6 {
        0 => Txn::Create {
            path,
            data: Some(vec![z as u8; 20]),
            acl: Acl::open_unsafe(),
            ephemeral: z % 4 == 0,
            parent_cversion: z as i32,
        },
        1 => Txn::SetData { path, data: Some(b"value".to_vec().into()), version: 3 },
        2 => Txn::Delete { path },
        3 => Txn::CreateSession { timeout_ms: 30_000 },
        4 => Txn::CloseSession { paths_to_delete: vec![path, "/x".into()] },
        _ => Txn::Multi(vec![
            Txn::Create {
                path: path.clone(),
                data: None,
                acl: Acl::open_unsafe(),
                ephemeral: false,
                parent_cversion: 1,
            },
            Txn::Check { path, version: 0 },
        ]),
    };
    let hdr = TxnHeader {
        client_id: 0x1000 + z,
        cxid: z as i32,
        zxid: z,
        time_ms: 1_700_000_000_000 + z,
        txn_type: t.op().code(),
    };
    (hdr, t)
}

/// A setData of `len` bytes (each `z as u8`) for zxid `z`, with `txn(z)`'s header.
pub fn set_data_txn(z: i64, len: usize) -> (TxnHeader, Txn) {
    let (mut hdr, _) = txn(z);
    let t = Txn::SetData { path: format!("/n{z}"), data: Some(vec![z as u8; len].into()), version: 1 };
    hdr.txn_type = t.op().code();
    (hdr, t)
}

pub fn txns(range: std::ops::RangeInclusive<i64>) -> Vec<(TxnHeader, Txn)> {
    range.map(txn).collect()
}

pub fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("version-2"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("log."))
        .collect();
    v.sort();
    v
}

pub mod snap;
