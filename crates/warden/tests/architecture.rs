//! Architecture invariants that no crate's own tests can see (ARCHITECTURE.md, "Architecture
//! invariants"): the pure crates' dependencies and what their sources may call.

use std::path::{Path, PathBuf};

/// The crates that decide and do no I/O: time comes in as arguments, randomness from seeds.
const PURE: &[&str] = &["proto", "tree", "quorum", "node", "driver"];

/// What a pure crate may depend on besides other warden crates. `hdrhistogram` (without its
/// default features: no serialisation, no I/O) holds the node's latency summaries; `crc32fast`
/// computes the tree digest's CRCs.
const ALLOWED_DEPENDENCIES: &[&str] =
    &["bytes", "thiserror", "tracing", "sha1", "base64", "imbl", "ahash", "hdrhistogram", "crc32fast"];

/// Calls a pure crate's sources must not make: sockets, files, threads, the clock, a global random
/// source, an async runtime.
const FORBIDDEN: &[&str] = &[
    "std::fs",
    "TcpStream",
    "TcpListener",
    "UdpSocket",
    "std::thread",
    "Instant::now",
    "SystemTime::now",
    "thread_rng",
    "rand::random",
    "tokio",
];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The names under `[dependencies]` of a manifest.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap_or_default();
            deps.push(name.to_string());
        }
    }
    deps
}

#[test]
fn pure_crates_depend_on_no_io_crate() {
    for krate in PURE {
        let manifest = std::fs::read_to_string(crates_dir().join(krate).join("Cargo.toml")).expect("manifest");
        let deps = dependencies(&manifest);
        assert!(!deps.is_empty() || *krate == "proto", "{krate}: no dependencies found; is the parser wrong?");
        for dep in deps {
            let ok = dep.starts_with("warden-") || ALLOWED_DEPENDENCIES.contains(&dep.as_str());
            assert!(ok, "pure crate {krate} depends on {dep}");
        }
    }
}

#[test]
fn pure_crates_touch_no_socket_file_thread_clock_or_random_source() {
    for krate in PURE {
        let mut files = Vec::new();
        rust_files(&crates_dir().join(krate).join("src"), &mut files);
        assert!(!files.is_empty(), "{krate} has no sources");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            // Unit tests may use what they like.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for word in FORBIDDEN {
                assert!(!code.contains(word), "{} (pure crate {krate}) uses {word}", file.display());
            }
        }
    }
}

/// The driver links warden-storage for its vocabulary (`StoreOp`, `Report`) only: it carries out
/// no storage op itself; the server's storage thread and the simulator do.
#[test]
fn the_driver_carries_out_no_storage_op() {
    const STORAGE_OPS: [&str; 8] =
        ["Store::new", "&mut Store", "store: Store", ".execute(", "DataDir", "RealFs", "FaultFs", "recover("];
    let mut files = Vec::new();
    rust_files(&crates_dir().join("driver").join("src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        for word in STORAGE_OPS {
            assert!(!text.contains(word), "{} uses {word}", file.display());
        }
    }
}
