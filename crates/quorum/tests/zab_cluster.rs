//! Seeded runs of 1 leader + 2 followers + 1 observer (the leader changes when it loses its
//! quorum) with dropped connections, duplicated packets and reordering between connections (each
//! connection stays FIFO, as TCP; see zab_harness), crashes that keep a random prefix of unsynced
//! writes, and restarts. Checked after every step: machine invariants, zxids strictly
//! increase in every log and tree, a node applies only txns a leader committed (and the same txn
//! per zxid everywhere), every new leader holds every committed txn; at the end, with faults
//! healed, every node's tree equals the committed sequence.

mod zab_harness;

use zab_harness::{Cluster, Faults};

fn run(seed: u64, steps: usize, faults: Faults) -> Cluster {
    let mut c = Cluster::new(seed, &[1, 2, 3], &[4]);
    c.faults = faults;
    for _ in 0..steps {
        c.step();
    }
    c.settle();
    // Drive a few more proposals through the healed cluster and settle again.
    for _ in 0..5 {
        c.propose();
    }
    c.settle();
    let committed: Vec<_> = c.committed.values().cloned().collect();
    for (sid, node) in &c.nodes {
        let a: Vec<_> = node.tree.iter().map(|e| format!("{:#x}", e.zxid())).collect();
        let b: Vec<_> = committed.iter().map(|e| format!("{:#x}", e.zxid())).collect();
        if a != b {
            if let zab_harness::Role::Learner(l, _) = &node.role {
                eprintln!("learner {sid}: {l:?}");
            }
            let tail: Vec<_> = c.trace.iter().rev().take(60).rev().cloned().collect();
            eprintln!("{}", tail.join("\n"));
        }
        assert_eq!(a, b, "seed {seed}: node {sid}");
        assert_eq!(
            node.tree,
            committed,
            "seed {seed}: node {sid} tree differs from the committed sequence\n{}",
            c.trace.join("\n")
        );
    }
    c
}

#[test]
fn no_faults_commits_everything() {
    let c = run(1, 3000, Faults::default());
    assert!(c.committed.len() > 50, "only {} committed", c.committed.len());
}

/// Seeds 5, 10, 11 lost committed txns on one node: a reordered DIFF stream left a hole in a
/// learner's log (fixed: `zab::follows`; scripted in zab_sync.rs).
#[test]
fn lossy_network_keeps_committed_prefixes_in_agreement() {
    for seed in 0..40 {
        run(seed, 3000, Faults { drop: 5, dup: 5, reorder: 10, ..Faults::default() });
    }
}

/// Seeds such as 157 never settled: a silently dropped UPTODATE, which TCP cannot produce, left a
/// learner syncing forever. Healing now closes every connection that had a silent fault (the
/// transport contract, zab_harness docs and `zab` module docs).
#[test]
fn crashes_and_resyncs_never_lose_a_committed_txn() {
    let mut total = 0;
    for seed in 100..160 {
        let c = run(seed, 4000, Faults { drop: 3, dup: 3, reorder: 5, crash: 300, restart: 500, ..Faults::default() });
        total += c.committed.len();
    }
    assert!(total > 1000, "too little progress: {total}");
}

/// More seeds: `ZAB_SEEDS=500 cargo test --release -p warden-quorum --test zab_cluster many_seeds
/// -- --ignored` runs seeds 1000.. of both fault mixes.
#[test]
#[ignore = "soak: set ZAB_SEEDS and pass --ignored"]
fn many_seeds() {
    let n: u64 = std::env::var("ZAB_SEEDS").ok().and_then(|s| s.parse().ok()).expect("ZAB_SEEDS=<number of seeds>");
    for seed in 1000..1000 + n {
        run(seed, 3000, Faults { drop: 5, dup: 5, reorder: 10, ..Faults::default() });
        run(seed, 4000, Faults { drop: 3, dup: 3, reorder: 5, crash: 300, restart: 500, ..Faults::default() });
    }
}

/// Seeds that once failed, run with both fault mixes on every test run.
/// - 1782 (lossy): the harness let PROPOSAL (b,1) overtake the rest of a DIFF stream on the same
///   connection, which TCP never does; the learner persisted a log missing committed txns of
///   epoch a (undetectable from zxids, scripted in zab_sync.rs). The harness now keeps each
///   connection FIFO and turns a loss into a closed connection.
const REGRESSION_SEEDS: &[u64] = &[1782];

#[test]
fn regression_seeds() {
    for &seed in REGRESSION_SEEDS {
        run(seed, 3000, Faults { drop: 5, dup: 5, reorder: 10, ..Faults::default() });
        run(seed, 4000, Faults { drop: 3, dup: 3, reorder: 5, crash: 300, restart: 500, ..Faults::default() });
    }
}
