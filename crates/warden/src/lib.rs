//! The `warden` package's library: test tooling shared by its integration tests and unit-tested
//! here (the server itself is `warden-server`; the command line is `main.rs`).

pub mod lincheck;
