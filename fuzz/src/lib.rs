//! The invariants of cdtarget's fuzz targets, shared by the libFuzzer binaries
//! (`fuzz_targets/*.rs`) and the stable replay of the committed corpora
//! (`tests/fuzz_corpora`, which includes this file through `#[path]`): both run exactly these
//! checks over exactly the same bytes.
//!
//! Every `check` takes the raw fuzz input, feeds it to the public functions a tenant, a Git
//! host or a webhook sender reaches, and panics when an invariant breaks. An input that the
//! code under test rightly refuses is not a failure; a panic inside cdtarget is.

pub mod address;
pub mod known_hosts;
pub mod kustomize;
pub mod manifests;
pub mod policy;
pub mod snapshot;
pub mod webhook;

/// Fuzz input as text: invalid UTF-8 is replaced, so every input reaches the parsers (whose
/// callers hold `&str` already).
pub fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}
