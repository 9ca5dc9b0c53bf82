//! The native kustomize build (`src/kustomize/`) against `kubectl kustomize` (kustomize v5.5) as
//! the oracle: the patch engine's hand-written cases under `cases/` (`oracle`) and generated
//! Deployments and patches (`properties`); the fields transformers over the `fields-*` cases of
//! `builds/` (`fields`); the generators and their content hash (`generators`); whole builds of
//! the kustomization trees under `builds/` (`builds`) and of generated ones (`build_properties`);
//! and the merge key table against the test control plane's OpenAPI document (`merge_keys`).
//!
//! Without kubectl every oracle test prints a SKIP line and passes; under `CI=true` it fails.

#[path = "../common/mod.rs"]
mod common;

mod attacks;
mod build_properties;
mod builds;
mod fields;
mod generators;
mod merge_keys;
mod oracle;
mod properties;
mod support;
