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

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
