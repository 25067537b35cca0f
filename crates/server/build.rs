//! Records the build time as Apache ZooKeeper prints it (`MM/dd/yyyy HH:mm UTC`), for `srvr` and `envi`.

use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    // SOURCE_DATE_EPOCH keeps builds reproducible when set.
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64));
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    println!("cargo:rustc-env=WARDEN_BUILT_ON={m:02}/{d:02}/{y:04} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60);
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
}

include!("src/civil.rs");
