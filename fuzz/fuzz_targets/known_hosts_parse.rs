//! Fuzz target `known_hosts_parse`: see `cdtarget_fuzz::known_hosts` for the input and the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cdtarget_fuzz::known_hosts::check(data));
