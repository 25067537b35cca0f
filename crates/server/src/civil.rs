// Calendar arithmetic for printing dates as Java does, shared by build.rs (through `include!`) and
// the four-letter words. No clock is read here.

/// Days since 1970-01-01 to (year, month 1-12, day 1-31), Howard Hinnant's algorithm.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
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

/// A build time as ZooKeeper 3.5 and later print it after "built on": `yyyy-MM-dd HH:mm UTC`
/// (3.4 printed `MM/dd/yyyy HH:mm GMT`). build.rs prints `BUILT_ON` with it; in the library only
/// the tests call it.
#[cfg_attr(not(test), allow(dead_code))]
pub fn built_on(unix_secs: i64) -> String {
    let (y, m, d) = civil_from_days(unix_secs.div_euclid(86_400));
    let rem = unix_secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}
