//! Cluster tests: cdtarget installed and run on a real Kubernetes control plane (etcd,
//! kube-apiserver, kube-controller-manager built from `hack/control-plane/`, see
//! `tests/common/control_plane.rs`). One control plane per test binary; each test works in
//! namespaces of its own.
//!
//! Without Go on the machine every test prints a SKIP line and passes; under `CI=true` a missing
//! control plane fails.

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod agents;
mod budget;
mod conflicts;
mod controller;
mod diff;
mod dry_run;
mod external;
mod feedback;
mod health;
mod install;
mod inventory;
mod keda_operator;
mod kit;
mod kustomize;
mod policy;
mod readiness;
mod reconcile;
mod resync;
mod tenancy;
