//! The tour: cdtarget on a real control plane with its GitLab settings and its webhook receiver
//! reachable from the fake GitLab, and what the audit log says about its rights.
//!
//! * `webhook`: a push announced by GitLab's webhook emitter over real HTTP is applied (latency
//!   printed);
//! * `gitlab`: a registration with `spec.gitlab` gets its deploy key and hook on the fake GitLab
//!   and the finalizer `cdtarget.io/gitlab-cleanup`; deleting it removes both and releases the
//!   finalizer, also after GitLab was down at the time of the deletion;
//! * `least_privilege`: a full tour of everything the controller does, then every request of its
//!   own identity in the audit log compared with `deploy/rbac.yaml`, both ways;
//! * `monitoring`: the alert rules checked and unit tested by the real `promtool`, and every
//!   metric name of the dashboard and the alerts found on this controller's `/metrics`.
//!
//! One control plane for the binary, started with `OwnerReferencesPermissionEnforcement` on top
//! of the default admission plugins (the grants on `*/finalizers` exist for it), and one
//! controller process started with the GitLab flags (`support`).
//!
//! Without Go on the machine every test prints a SKIP line and passes; under `CI=true` a missing
//! control plane fails.

#[path = "../common/mod.rs"]
mod common;

mod gitlab;
mod least_privilege;
mod monitoring;
mod promql;
mod support;
mod webhook;
