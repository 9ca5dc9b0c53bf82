//! cdtarget: a GitOps controller for multi-tenant Kubernetes clusters.
//!
//! Tenants push `CDTarget` declarations (and ordinary namespaced manifests) to their own Git
//! repository; cdtarget renders every CDTarget into an egress NetworkPolicy, an Azure Pipelines
//! agent Deployment, a KEDA ScaledObject and its TriggerAuthentication, inside the guardrails the
//! cluster admins set.
//!
//! The crate is laid out as the architecture describes: pure decisions in [`policy`], [`render`]
//! and [`manifests`]; the API types in [`api`]; the command line in [`cli`].
#![deny(unsafe_code)]

pub mod api;
pub mod apply;
pub mod cli;
pub mod controller;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod gitlab;
pub mod manifests;
pub mod policy;
pub mod problem;
pub mod render;
pub mod schema_check;
pub mod source;
pub mod telemetry;
pub mod webhook;
pub mod yaml;
