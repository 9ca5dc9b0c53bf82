//! Small helpers of the cases in this binary (the scenario kit shared with other binaries is
//! `common::cluster`).

use std::io::Write;
use std::path::Path;

use cdtarget::api::{CDTarget, TenantRepository};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::common::ControlPlane;
use crate::common::control_plane::Kubectl;

/// `kubectl --kubeconfig <kubeconfig> <verb> -f <manifest> extra...`, the manifest written to a
/// temporary file first (kubectl reads it from there, not from a pipe).
pub fn kubectl_file(cluster: &ControlPlane, kubeconfig: &Path, verb: &str, manifest: &str, extra: &[&str]) -> Kubectl {
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    file.write_all(manifest.as_bytes()).expect("write the manifest");
    let path = file.path().to_str().expect("UTF-8 path");
    let args: Vec<&str> = [&[verb, "-f", path][..], extra].concat();
    cluster.kubectl_as(kubeconfig, &args)
}

/// The registration's condition `type_`.
pub fn registration_condition(registration: &TenantRepository, type_: &str) -> Condition {
    let conditions = registration.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    conditions.into_iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} in {registration:?}"))
}

/// A condition: the CDTarget's `Ready` condition has `status` and `reason`.
pub fn target_ready(status: &'static str, reason: &'static str) -> impl Fn(Option<&CDTarget>) -> bool {
    move |target| {
        target.and_then(|t| t.status.as_ref()).is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == status && c.reason == reason)
        })
    }
}
