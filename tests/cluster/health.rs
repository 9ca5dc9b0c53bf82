//! Ready means healthy (#14, point 6), on the real control plane: a CDTarget is Ready only once
//! its agents run (and its ScaledObject is Ready, KEDA's CRDs being installed), and a
//! registration with `spec.wait` is Ready only once what it applied is healthy by kstatus rules.
//!
//! Each case runs on a control plane of its own whose kube-controller-manager also runs the
//! Deployment and ReplicaSet controllers (`Options::workload_controllers`; the shared control
//! plane runs neither, so that nothing but cdtarget writes in a tenant namespace there), with a
//! controller of its own. No kubelet, scheduler or KEDA operator runs: the tests play the
//! kubelet (pods' status patched running and ready by the admin, [`pods_ready`]) and the KEDA
//! operator (the ScaledObject's `Ready` condition, [`scaled_object_reports`]); the real
//! controllers turn the pods into ReplicaSet and Deployment availability, which is what
//! cdtarget reads.

use std::time::Instant;

use cdtarget::api::{CDTarget, TenantRepository};

use crate::common::cluster::{CDTARGET, CONFIG_MAP, Controller, Tenant, own_installed_cluster_with};
use crate::common::control_plane::{Options, OwnControlPlane};
use crate::kit::{pods_ready, registration_condition, scaled_object_reports, target_applied};

/// A plain Deployment of the tenant's, one replica.
const WEB: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n        - name: web\n          image: registry.example/web:1\n";

/// A control plane of the test's own running the workload controllers, or `None` (SKIP).
fn workload_cluster(test: &str) -> Option<OwnControlPlane> {
    own_installed_cluster_with(test, &Options { workload_controllers: true, ..Options::default() })
}

/// [`WEB`] with a `status` the tenant wrote in Git, claiming the Deployment available: the API
/// server keeps status out of an apply to the object itself, so the claim never reaches the
/// health check.
fn forged_web() -> String {
    format!(
        "{WEB}status:\n  observedGeneration: 1\n  replicas: 1\n  updatedReplicas: 1\n  readyReplicas: 1\n  availableReplicas: 1\n  conditions:\n    - type: Available\n      status: \"True\"\n    - type: Progressing\n      status: \"True\"\n      reason: NewReplicaSetAvailable\n"
    )
}

/// A condition: the CDTarget's `Ready` condition has `status` and `reason`, and its message
/// contains `text`.
fn target_ready_saying(status: &'static str, reason: &'static str, text: String) -> impl Fn(Option<&CDTarget>) -> bool {
    move |target| {
        target.and_then(|t| t.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == status && c.reason == reason && c.message.contains(&text))
        })
    }
}

/// A condition: the registration's `Ready` condition has `status` and `reason`.
fn registration_ready(status: &'static str, reason: &'static str) -> impl Fn(Option<&TenantRepository>) -> bool {
    move |registration| {
        registration.and_then(|r| r.status.as_ref()).is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == status && c.reason == reason)
        })
    }
}

#[tokio::test]
async fn a_cdtarget_is_ready_only_once_its_agents_are_available_and_its_scaled_object_is_ready() {
    let test = "a_cdtarget_is_ready_only_once_its_agents_are_available_and_its_scaled_object_is_ready";
    let Some(own) = workload_cluster(test) else { return };
    let cluster = own.cluster();
    let controller = Controller::start(cluster, "health", &[]).await;
    let log = controller.log();
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let ns = tenant.ns.clone();

    // Applied, but no agent runs: not Ready, saying how many run.
    tenant.until::<CDTarget, _>("Applied=True", "deploy-agents", target_applied("True", "Applied"), log).await;
    let none = format!("0 of 1 agents available (Deployment {ns}/deploy-agents)");
    let waiting = target_ready_saying("False", "AgentsNotAvailable", none);
    tenant.until::<CDTarget, _>("Ready=False/AgentsNotAvailable", "deploy-agents", waiting, log).await;

    // The agent's pod runs: the Deployment is available, but KEDA has said nothing of the
    // ScaledObject (its CRDs are installed, so the controller renders one).
    let started = Instant::now();
    pods_ready(&tenant, "deploy-agents", log).await;
    let silent = target_ready_saying("False", "ScaledObjectNotReady", "is the KEDA operator running?".into());
    tenant.until::<CDTarget, _>("Ready=False/ScaledObjectNotReady", "deploy-agents", silent, log).await;
    eprintln!("health: agent pod ready -> CDTarget re-evaluated in {} ms", started.elapsed().as_millis());

    // KEDA reports the ScaledObject not Ready: still not Ready, with KEDA's reason.
    scaled_object_reports(&tenant, "deploy-agents", "False", "ScaledObjectCheckFailed", "no scaler could be built");
    let refused = target_ready_saying("False", "ScaledObjectNotReady", "no scaler could be built".into());
    tenant.until::<CDTarget, _>("Ready=False with KEDA's reason", "deploy-agents", refused, log).await;

    // And Ready: the CDTarget is Ready.
    let started = Instant::now();
    scaled_object_reports(&tenant, "deploy-agents", "True", "ScaledObjectReady", "ScaledObject is defined correctly");
    let running = format!("1 agents available, minReplicaCount 1 (Deployment {ns}/deploy-agents)");
    tenant
        .until::<CDTarget, _>(
            "Ready=True/Applied",
            "deploy-agents",
            target_ready_saying("True", "Applied", running),
            log,
        )
        .await;
    eprintln!("health: ScaledObject Ready -> CDTarget Ready in {} ms", started.elapsed().as_millis());
    let target: kube::Api<CDTarget> = kube::Api::namespaced(cluster.admin_client().await, &ns);
    let status = target.get("deploy-agents").await.expect("the CDTarget").status.expect("status");
    assert!(!status.conditions.iter().any(|c| c.type_ == "Reconciling" || c.type_ == "Stalled"), "{status:#?}");
}

#[tokio::test]
async fn a_registration_with_spec_wait_is_ready_once_the_deployment_it_applied_is_available() {
    let test = "a_registration_with_spec_wait_is_ready_once_the_deployment_it_applied_is_available";
    let Some(own) = workload_cluster(test) else { return };
    let cluster = own.cluster();
    let controller = Controller::start(cluster, "health", &[]).await;
    let log = controller.log();
    let files = [("deploy/settings.yaml", CONFIG_MAP), ("deploy/web.yaml", WEB)];
    let tenant = Tenant::onboard_with(cluster, &files, "  wait:\n    timeout: 5m\n");
    let ns = tenant.ns.clone();

    // Applied, the Deployment unavailable: not Ready, naming it and its file.
    let pending = tenant
        .registration_until("Ready=False/HealthCheckPending", registration_ready("False", "HealthCheckPending"), log)
        .await;
    assert_eq!(registration_condition(&pending, "Applied").status, "True");
    assert_eq!(registration_condition(&pending, "Reconciling").status, "True");
    let message = registration_condition(&pending, "Ready").message;
    assert!(message.contains(&format!("Deployment {ns}/web (web.yaml:1): ")), "{message}");
    assert!(!message.contains("ConfigMap"), "the ConfigMap is healthy: {message}");
    let check = pending.status.as_ref().and_then(|s| s.health_check.clone()).expect("status.healthCheck");
    assert!(!check.healthy);

    // Its pod runs: the registration is Ready.
    let started = Instant::now();
    pods_ready(&tenant, "web", log).await;
    let ready = tenant.registration_until("Ready=True", registration_ready("True", "Succeeded"), log).await;
    eprintln!(
        "health: Deployment available -> registration Ready in {} ms (rechecked on a schedule)",
        started.elapsed().as_millis()
    );
    let message = registration_condition(&ready, "Ready").message;
    assert!(message.ends_with("all 2 objects are healthy"), "{message}");
    assert!(ready.status.as_ref().and_then(|s| s.health_check.as_ref()).is_some_and(|c| c.healthy));
}

#[tokio::test]
async fn past_the_wait_timeout_an_unavailable_deployment_fails_the_check_naming_its_file_whatever_status_git_claims() {
    let test =
        "past_the_wait_timeout_an_unavailable_deployment_fails_the_check_naming_its_file_whatever_status_git_claims";
    let Some(own) = workload_cluster(test) else { return };
    let cluster = own.cluster();
    let controller = Controller::start(cluster, "health", &[]).await;
    let log = controller.log();
    // The tenant claims, in Git, that its Deployment is available: it is not believed.
    let forged = forged_web();
    let tenant = Tenant::onboard_with(cluster, &[("deploy/web.yaml", forged.as_str())], "  wait:\n    timeout: 3s\n");
    let ns = tenant.ns.clone();

    let failed = tenant
        .registration_until("Ready=False/HealthCheckFailed", registration_ready("False", "HealthCheckFailed"), log)
        .await;
    let ready = registration_condition(&failed, "Ready");
    assert!(
        ready.message.contains(&format!(
            "but 1 of 1 objects is not healthy after the wait of 3s: Deployment {ns}/web (web.yaml:1): "
        )),
        "{}",
        ready.message
    );
    assert_eq!(registration_condition(&failed, "Stalled").status, "True");
    // What was applied stays applied: the failed health check deletes or undoes nothing.
    assert_eq!(registration_condition(&failed, "Applied").status, "True");
    let status = failed.status.expect("status");
    assert!(status.inventory.iter().any(|e| e.kind == "Deployment" && e.name == "web"), "{status:#?}");
}

#[tokio::test]
async fn without_spec_wait_a_registration_is_ready_once_applied_whatever_the_health() {
    let test = "without_spec_wait_a_registration_is_ready_once_applied_whatever_the_health";
    let Some(own) = workload_cluster(test) else { return };
    let cluster = own.cluster();
    let controller = Controller::start(cluster, "health", &[]).await;
    let log = controller.log();
    let tenant = Tenant::onboard(cluster, &[("deploy/web.yaml", WEB)]);

    let ready = tenant.registration_until("Ready=True", registration_ready("True", "Succeeded"), log).await;
    let status = ready.status.expect("status");
    assert_eq!(status.health_check, None, "no health check without spec.wait");
    // The Deployment it applied has no available replica (no pod runs): Ready all the same.
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let web = deployments.get("web").await.expect("the Deployment");
    assert_eq!(web.status.and_then(|s| s.available_replicas).unwrap_or(0), 0);
}
