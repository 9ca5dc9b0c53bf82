//! The native kustomize build (`src/kustomize/`) against `kubectl kustomize` (kustomize v5.5) as
//! the oracle: hand-written patch cases under `cases/` (`oracle`), generated Deployments and
//! patches (`properties`), the fields transformers over the `fields-*` cases of `builds/`
//! (`fields`), the generators and their content hash (`generators`), and the merge key table
//! against the test control plane's OpenAPI document (`merge_keys`).
//!
//! Without kubectl every oracle test prints a SKIP line and passes; under `CI=true` it fails.

#[path = "../common/mod.rs"]
mod common;

mod fields;
mod generators;
mod merge_keys;
mod oracle;
mod properties;
mod support;
