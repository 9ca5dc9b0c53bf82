//! Fuzz target `address_parse`: see `cdtarget_fuzz::address` for the input and the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cdtarget_fuzz::address::check(data));
