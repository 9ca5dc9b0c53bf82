//! Fuzz target `webhook_verify_gitlab_signed`: see `cdtarget_fuzz::webhook` for the input and the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cdtarget_fuzz::webhook::check(
    cdtarget_fuzz::webhook::Scheme::GitlabSigned,
    data
));
