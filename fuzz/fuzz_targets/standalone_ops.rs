#![no_main]

// The structured target (crates/sim/src/fuzz.rs): the bytes script clients, time and faults
// around the real server code, and every invariant of the simulator is checked after each event.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_sim::fuzz::standalone_ops(data));
