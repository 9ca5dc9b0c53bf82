//! cdtarget: a GitOps controller for multi-tenant Kubernetes clusters.
//!
//! Tenants push `CDTarget` declarations (and ordinary namespaced manifests) to their own Git
//! repository; cdtarget renders every CDTarget into an egress NetworkPolicy, an Azure Pipelines
//! agent Deployment, a KEDA ScaledObject and its TriggerAuthentication, inside the guardrails the
//! cluster admins set.
//!
//! The crate is laid out as the architecture describes: pure decisions in [`policy`], [`render`]
//! and [`manifests`]; the API types in [`api`]; the command line in [`cli`].
//!
//! No module holds unsafe code but `libgit2_globals`, which sets libgit2's process-wide options
//! through git2's `unsafe fn` setters: every other module is declared `#[forbid(unsafe_code)]`
//! below (`forbid` cannot be relaxed inside), the `[lints]` table of Cargo.toml denies unsafe
//! code everywhere else, and `tests/foundation/lints.rs` fails when a module is declared without
//! `forbid` or `unsafe` appears in another file.

#[forbid(unsafe_code)]
pub mod api;
#[forbid(unsafe_code)]
pub mod apply;
#[forbid(unsafe_code)]
pub mod budget;
#[forbid(unsafe_code)]
pub mod cli;
#[forbid(unsafe_code)]
pub mod controller;
#[forbid(unsafe_code)]
pub mod error;
#[cfg(any(test, feature = "fixtures"))]
#[forbid(unsafe_code)]
pub mod fixtures;
#[forbid(unsafe_code)]
pub mod gitlab;
#[forbid(unsafe_code)]
pub mod health;
#[forbid(unsafe_code)]
pub mod kustomize;
mod libgit2_globals;
#[forbid(unsafe_code)]
pub mod manifests;
#[forbid(unsafe_code)]
pub mod policy;
#[forbid(unsafe_code)]
pub mod problem;
#[forbid(unsafe_code)]
pub mod render;
#[forbid(unsafe_code)]
pub mod schema_check;
#[forbid(unsafe_code)]
pub mod source;
#[forbid(unsafe_code)]
pub mod telemetry;
#[forbid(unsafe_code)]
pub mod text;
#[forbid(unsafe_code)]
pub mod webhook;
#[forbid(unsafe_code)]
pub mod yaml;
