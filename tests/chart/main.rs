//! The Helm chart (`charts/cdtarget`) and the kustomize install (`deploy/`), checked with the real
//! tools: `helm` built from its Go module (`hack/tools/helm`, `common::go_build`), `kubectl
//! kustomize`, and a real control plane of this binary's own (`common::control_plane`; the chart
//! installs the names `deploy/` installs, so it cannot share the control plane of tests/cluster).
//!
//! * `render`: `helm lint`, the chart against `deploy/` object by object (no drift), the schema's
//!   refusals, `helm package` following the chart's links, the environment against the
//!   controller's flags;
//! * `install`: every rendered object through the API server's strict validation, and the chart
//!   installed with `helm install`, the controller run as its Deployment says, `helm upgrade` and
//!   `helm uninstall`.
//!
//! Without Go or kubectl every test prints a SKIP line and passes; under `CI=true` they fail.

#[path = "../common/mod.rs"]
mod common;

mod install;
mod kit;
mod render;
