//! Foundation tests: the API types and CRDs, the platform policy, the renderer, the manifests
//! loader and the `render` / `validate` / `crds` commands. One test binary for the whole area
//! (each extra binary links the whole dependency tree again).

mod bad_input;
mod cases;
mod cli;
mod command_line;
mod crds;
mod defects;
mod deploy;
mod dns;
mod egress;
mod golden;
mod keda_schema;
mod kustomize;
mod layout;
mod lints;
mod properties;
mod reasons;
mod support;
mod tenancy;
mod tree;
