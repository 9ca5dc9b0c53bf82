//! Small helpers of the cases in this binary (the scenario kit shared with other binaries is
//! `common::cluster`).

use std::io::Write;
use std::path::Path;

use cdtarget::api::{CDTarget, TenantRepository};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::common::ControlPlane;
use crate::common::cluster::Tenant;
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

/// A condition: the CDTarget's `Applied` condition (its children in place) has `status` and
/// `reason`. `Ready` also waits for the agents, which run only where [`agents_run`] says so.
pub fn target_applied(status: &'static str, reason: &'static str) -> impl Fn(Option<&CDTarget>) -> bool {
    move |target| {
        target.and_then(|t| t.status.as_ref()).is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == "Applied" && c.status == status && c.reason == reason)
        })
    }
}

/// What a kubelet would report, written by the admin because no kubelet runs on the test
/// control plane: once Deployment `name` of the tenant namespace has its pods, every pod of the
/// namespace is running and ready (through the pods' `status` subresource). The real
/// ReplicaSet and Deployment controllers of kube-controller-manager (a control plane started
/// with `workload_controllers`) then count them available; this waits until the Deployment
/// says so.
pub async fn pods_ready(tenant: &Tenant, name: &str, log: &Path) {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams, Patch, PatchParams};

    let replicas = |d: Option<&Deployment>| {
        let status = d.and_then(|d| d.status.as_ref());
        status.and_then(|s| s.replicas).unwrap_or(0) >= 1
    };
    tenant.until::<Deployment, _>(&format!("the pods of Deployment {name}"), name, replicas, log).await;
    let pods: Api<Pod> = Api::namespaced(tenant.cluster.admin_client().await, &tenant.ns);
    let seconds = k8s_openapi::jiff::Timestamp::now().as_second();
    let now = k8s_openapi::jiff::Timestamp::from_second(seconds).expect("now").to_string();
    for pod in pods.list(&ListParams::default()).await.expect("list pods").items {
        let running = serde_json::json!({"status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now}
            ]
        }});
        let name = pod.metadata.name.clone().unwrap_or_default();
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&running)).await.expect("patch the pod status");
    }
    let available = |d: Option<&Deployment>| {
        let status = d.and_then(|d| d.status.as_ref());
        status.and_then(|s| s.available_replicas).unwrap_or(0) >= 1
    };
    tenant.until::<Deployment, _>(&format!("Deployment {name} available"), name, available, log).await;
}

/// What the KEDA operator would report of ScaledObject `name` (none runs on the test control
/// plane): its `Ready` condition, written by the admin through the `status` subresource.
pub fn scaled_object_reports(tenant: &Tenant, name: &str, ready: &str, reason: &str, message: &str) {
    let patch = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": ready, "reason": reason, "message": message}
    ]}});
    tenant
        .cluster
        .kubectl(&[
            "patch",
            "scaledobject",
            name,
            "-n",
            &tenant.ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ])
        .success();
}

/// What the Deployment controller would report of Deployment `name` once its one pod is ready,
/// written by the admin through the `status` subresource: on the shared control plane, which runs
/// no Deployment controller (`tests/cluster/health.rs` shows the real one, on a control plane of
/// its own). For tests about what follows from an available Deployment (metrics, the CLI).
pub async fn deployment_reports_available(tenant: &Tenant, name: &str) {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Api, Patch, PatchParams};

    let deployments: Api<Deployment> = Api::namespaced(tenant.cluster.admin_client().await, &tenant.ns);
    let generation = deployments.get(name).await.expect("the Deployment").metadata.generation.unwrap_or(1);
    let status = serde_json::json!({"status": {
        "observedGeneration": generation, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
        "availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
    }});
    deployments.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("Deployment status");
}
