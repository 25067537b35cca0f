//! Records the build time as Apache ZooKeeper 3.5 and later print it (`yyyy-MM-dd HH:mm UTC`, the
//! form of its generated `Info.BUILD_DATE`), for `srvr`, `stat`, `envi` and `mntr`.

use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    // SOURCE_DATE_EPOCH keeps builds reproducible when set.
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64));
    println!("cargo:rustc-env=WARDEN_BUILT_ON={}", built_on(secs));
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
}

include!("src/civil.rs");
