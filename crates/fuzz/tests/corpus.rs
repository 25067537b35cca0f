//! Replays every committed input of every fuzz target (`fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/`) through its target, with the counting allocator installed, and
//! checks that decoding stays allocation-bounded: prints each target's largest ratio of peak
//! allocation to (input + declared + fixed allowance) and fails past `MAX_RATIO`.
//!
//! One test function, so no other test thread allocates while it measures (the counters are per
//! thread anyway). With `WARDEN_FUZZ_SCRATCH=1` it also replays `fuzz/scratch/<target>/`, the
//! inputs `scripts/fuzz` runs kept, for the largest ratio over everything the fuzzers found.

use std::path::{Path, PathBuf};

use warden_fuzz::{last_measure, CountingAlloc, Measure, MAX_RATIO, TARGETS};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

#[test]
fn every_corpus_and_regression_input_replays_within_the_allocation_bound() {
    assert!(warden_fuzz::counting_alloc_installed(), "the counting allocator is this test's global allocator");
    let mut worst_overall: Option<(f64, &str, PathBuf, Measure)> = None;
    let mut total = 0;
    for (name, target) in TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{name}/ holds no seed");
        let mut regressions = inputs(&fuzz_dir().join("regressions").join(name));
        if std::env::var_os("WARDEN_FUZZ_SCRATCH").is_some() {
            regressions.extend(inputs(&fuzz_dir().join("scratch").join(name)));
        }
        let mut worst: Option<(f64, PathBuf, Measure)> = None;
        for path in corpus.iter().chain(&regressions) {
            let data = std::fs::read(path).unwrap();
            target(&data);
            let m = last_measure().expect("every target measures its input");
            if worst.as_ref().is_none_or(|(r, _, _)| m.ratio() > *r) {
                worst = Some((m.ratio(), path.clone(), m));
            }
            total += 1;
        }
        let (ratio, path, m) = worst.unwrap();
        println!(
            "{name:16} {:5} inputs ({} regressions or scratch); largest allocation ratio {ratio:.3} (peak {} B, input {} B, declared {} B: {})",
            corpus.len() + regressions.len(),
            regressions.len(),
            m.peak,
            m.input,
            m.declared,
            path.file_name().unwrap().to_string_lossy()
        );
        if worst_overall.as_ref().is_none_or(|(r, ..)| ratio > *r) {
            worst_overall = Some((ratio, name, path, m));
        }
    }
    let (ratio, name, path, _) = worst_overall.unwrap();
    println!("{total} inputs; largest ratio {ratio:.3} ({name}: {}); bound {MAX_RATIO}", path.display());
    assert!(ratio <= MAX_RATIO);
}
