//! The structured fuzz entry points (`warden_sim::fuzz`, issue 32) as ordinary tests: the empty
//! input, a few hundred pseudo-random inputs from a fixed seed, and every committed corpus input
//! (`fuzz/corpus/standalone_ops/` and `fuzz/corpus/cluster_ops/` at the repository root, and
//! the crash inputs under `fuzz/regressions/`).
//!
//! `cargo test -p warden-sim --release --test structured soak -- --ignored --nocapture` runs
//! random inputs for `WARDEN_FUZZ_SECS` seconds (default 60) per target (`WARDEN_FUZZ_TARGET`:
//! `standalone_ops`, `cluster_ops` or both) from `WARDEN_FUZZ_BASE` (default: the clock); a
//! failing input is written to `fuzz/corpus/<target>/soak-<hash>` and the test fails naming it.

use std::path::{Path, PathBuf};

use warden_sim::fuzz::{run_cluster_ops, run_standalone_ops, FuzzSummary};

type Target = fn(&[u8]) -> Result<FuzzSummary, String>;

const TARGETS: [(&str, Target); 2] = [("standalone_ops", run_standalone_ops), ("cluster_ops", run_cluster_ops)];

/// splitmix64: the inputs of one seed are the same on every machine.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A pseudo-random input of 0 to 4 KiB (a script of up to 200 steps takes about that).
fn input(state: &mut u64) -> Vec<u8> {
    let len = (next(state) % 4_096) as usize;
    (0..len).map(|_| next(state) as u8).collect()
}

fn run_one(name: &str, target: Target, data: &[u8], what: &str) -> FuzzSummary {
    match std::panic::catch_unwind(|| target(data)) {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => panic!("{name} on {what} ({} bytes): {e}", data.len()),
        Err(_) => panic!("{name} on {what} ({} bytes) panicked", data.len()),
    }
}

fn random_inputs(name: &str, target: Target, seed: u64, count: usize) {
    let mut state = seed;
    let start = std::time::Instant::now();
    let mut total = FuzzSummary::default();
    for i in 0..count {
        let data = input(&mut state);
        let s = run_one(name, target, &data, &format!("random input {i} of seed {seed:#x}"));
        total.steps += s.steps;
        total.events += s.events;
        total.requests += s.requests;
        total.replies += s.replies;
        total.notifications += s.notifications;
        total.acked_writes += s.acked_writes;
        total.sessions += s.sessions;
    }
    eprintln!(
        "{name}: {count} inputs, {} script steps, {} events, {} sessions, {} requests, {} replies, {} notifications, {} writes acknowledged, {:.1} s",
        total.steps,
        total.events,
        total.sessions,
        total.requests,
        total.replies,
        total.notifications,
        total.acked_writes,
        start.elapsed().as_secs_f64()
    );
    assert!(total.replies > 0 && total.acked_writes > 0, "{name}: the random inputs exercised nothing");
}

#[test]
fn the_empty_input_runs() {
    for (name, target) in TARGETS {
        run_one(name, target, &[], "the empty input");
    }
}

#[test]
fn standalone_ops_random_inputs() {
    random_inputs("standalone_ops", run_standalone_ops, 0x5741_0001, 300);
}

#[test]
fn cluster_ops_random_inputs() {
    random_inputs("cluster_ops", run_cluster_ops, 0x5741_0002, 100);
}

fn corpus_dir(name: &str) -> PathBuf {
    fuzz_dir("corpus", name)
}

/// `fuzz/<kind>/<target>` at the repository root (`corpus`, or `regressions` for crash inputs).
fn fuzz_dir(kind: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz").join(kind).join(name)
}

/// Every committed input, the corpus's and the crash inputs under `fuzz/regressions/`, replays
/// without a violation. A missing corpus directory is reported, and random inputs run in its place.
#[test]
fn the_corpus_replays() {
    for (name, target) in TARGETS {
        let dir = corpus_dir(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            eprintln!("{name}: no corpus at {}; 20 random inputs instead", dir.display());
            random_inputs(name, target, 0x5741_0003, 20);
            continue;
        };
        let regressions = std::fs::read_dir(fuzz_dir("regressions", name)).into_iter().flatten();
        let mut files: Vec<PathBuf> =
            entries.chain(regressions).filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
        for f in &files {
            let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            run_one(name, target, &data, &f.display().to_string());
        }
        eprintln!("{name}: replayed {} inputs from {} and its regressions", files.len(), dir.display());
    }
}

/// Random inputs for a while (release mode): the quick fuzzing loop.
#[test]
#[ignore]
fn soak() {
    let secs: u64 = std::env::var("WARDEN_FUZZ_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let only = std::env::var("WARDEN_FUZZ_TARGET").ok();
    let base: u64 = std::env::var("WARDEN_FUZZ_BASE").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    for (name, target) in TARGETS {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let start = std::time::Instant::now();
        let (mut n, mut steps, mut events, mut slowest) = (0u64, 0usize, 0u64, 0f64);
        let mut state = base ^ name.len() as u64;
        while start.elapsed().as_secs() < secs {
            let data = input(&mut state);
            let t = std::time::Instant::now();
            let result = std::panic::catch_unwind(|| target(&data));
            if t.elapsed().as_secs_f64() > slowest {
                slowest = t.elapsed().as_secs_f64();
                // The slowest input so far, to look into (not a failure).
                let _ = std::fs::write(std::env::temp_dir().join(format!("warden-fuzz-slowest-{name}")), &data);
            }
            match result {
                Ok(Ok(s)) => {
                    steps += s.steps;
                    events += s.events;
                }
                failed => {
                    let why = match failed {
                        Ok(Err(e)) => e,
                        _ => "panic".into(),
                    };
                    let hash = data
                        .iter()
                        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3));
                    let dir = corpus_dir(name);
                    let _ = std::fs::create_dir_all(&dir);
                    let file = dir.join(format!("soak-{hash:016x}"));
                    let _ = std::fs::write(&file, &data);
                    panic!("{name}: input {n} of base {base}: {why}; saved as {}", file.display());
                }
            }
            n += 1;
        }
        eprintln!(
            "{name}: {n} inputs in {:.0} s from base {base}: {steps} script steps, {events} events, slowest input {:.3} s",
            start.elapsed().as_secs_f64(),
            slowest
        );
    }
}

/// Replays one input: `WARDEN_FUZZ_INPUT=<file> WARDEN_FUZZ_TARGET=<target>` (`WARDEN_FUZZ_TRACE=1`
/// prints the script and every event).
#[test]
#[ignore]
fn replay() {
    let file = std::env::var("WARDEN_FUZZ_INPUT").expect("WARDEN_FUZZ_INPUT names the input file");
    let only = std::env::var("WARDEN_FUZZ_TARGET").unwrap_or_else(|_| "standalone_ops".into());
    let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let (_, target) = TARGETS.into_iter().find(|(n, _)| *n == only).expect("a known target");
    let (steps, rest) = warden_sim::fuzz::decode(&data);
    eprintln!("{} steps, {} bytes of choices", steps.len(), rest.len());
    let s = run_one(&only, target, &data, &file);
    eprintln!("{s:?}");
}

/// Writes random input `WARDEN_FUZZ_NTH` of seed `WARDEN_FUZZ_SEED` to `WARDEN_FUZZ_INPUT` (to
/// replay a failure of the random tests).
#[test]
#[ignore]
fn write_random_input() {
    let seed: u64 =
        std::env::var("WARDEN_FUZZ_SEED").ok().and_then(|v| warden_sim::parse_seed(&v)).expect("WARDEN_FUZZ_SEED");
    let nth: usize = std::env::var("WARDEN_FUZZ_NTH").ok().and_then(|v| v.parse().ok()).expect("WARDEN_FUZZ_NTH");
    let file = std::env::var("WARDEN_FUZZ_INPUT").expect("WARDEN_FUZZ_INPUT");
    let mut state = seed;
    let data = (0..=nth).map(|_| input(&mut state)).last().expect("one input");
    std::fs::write(&file, data).expect("write the input");
}
