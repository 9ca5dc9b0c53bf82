//! Fuzz target `kustomize_build`: see `cdtarget_fuzz::kustomize` for the input and the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cdtarget_fuzz::kustomize::check(data));
