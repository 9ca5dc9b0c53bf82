//! Fuzz target `snapshot_writer`: see `cdtarget_fuzz::snapshot` for the input and the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cdtarget_fuzz::snapshot::check(data));
