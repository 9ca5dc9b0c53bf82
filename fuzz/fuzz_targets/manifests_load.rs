//! Fuzz target `manifests_load`: see `cdtarget_fuzz::manifests` for the input and the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cdtarget_fuzz::manifests::check(data));
