//! Fuzz target `policy_parse`: see `cdtarget_fuzz::policy` for the input and the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cdtarget_fuzz::policy::check(data));
