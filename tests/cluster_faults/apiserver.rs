//! kube-apiserver killed and started again under a running controller: every watch resumes.

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;

use crate::common::cluster::{Controller, drift_network_policy, own_installed_cluster, rotate_token};
use crate::common::process::process_running;
use crate::kit::{ONE_AT_A_TIME, Set, applied_revision, converged, figure, onboard};

/// The pod template's `cdtarget.io/secrets-digest` of a Deployment.
fn secrets_digest(deployment: &Deployment) -> Option<String> {
    let template = deployment.spec.as_ref()?.template.metadata.as_ref()?;
    template.annotations.as_ref()?.get("cdtarget.io/secrets-digest").cloned()
}

#[tokio::test]
async fn after_a_kube_apiserver_restart_a_push_a_child_drift_and_a_secret_rotation_are_all_acted_on() {
    let test = "after_a_kube_apiserver_restart_a_push_a_child_drift_and_a_secret_rotation_are_all_acted_on";
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cluster) = own_installed_cluster(test) else { return };
    let controller = Controller::start(&cluster, "cdtarget-apiserver-restart", &[]).await;
    let log = controller.log().to_path_buf();
    let set = Set::small();
    let (tenant, head) = onboard(cluster.cluster(), &set, "");
    converged(&tenant, &set, &head, &log).await;
    let client = cluster.admin_client().await;
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &tenant.ns);
    let rendered = policies.get("deploy-agents").await.expect("get the NetworkPolicy").spec;
    let deployments: Api<Deployment> = Api::namespaced(client, &tenant.ns);
    let digest = secrets_digest(&deployments.get("deploy-agents").await.expect("get the Deployment"));
    assert!(digest.is_some(), "no secrets digest on the agents' pod template");

    let away = cluster.restart_apiserver().unwrap_or_else(|e| panic!("{e}"));
    let back = Instant::now();
    figure(&format!("kube-apiserver killed and ready again in {:.1} s", away.as_secs_f64()));

    // At once, before the controller's watches are back: a push with "reconcile now" (the
    // registrations' watch), a child changed with kubectl (the children's watch) and the token
    // Secret rotated (the Secrets' watch).
    let pushed = tenant.repo.commit_and_push(
        &[(
            "deploy/configmap-pipeline-settings.yaml",
            crate::kit::config_map("pipeline-settings").replace("\"3\"", "\"5\""),
        )],
        "retries 5",
    );
    tenant.request_reconcile("after the restart");
    drift_network_policy(&cluster, &tenant.ns);
    rotate_token(&cluster, &tenant.ns);

    let retries = |object: Option<&ConfigMap>| {
        object
            .and_then(|map| map.data.as_ref())
            .is_some_and(|data| data.get("RETRIES").map(String::as_str) == Some("5"))
    };
    tenant.until::<ConfigMap, _>("the pushed ConfigMap applied", "pipeline-settings", retries, &log).await;
    tenant.registration_until("the pushed revision recorded", applied_revision(&pushed), &log).await;
    figure(&format!("push acted on {:.1} s after the apiserver was back", back.elapsed().as_secs_f64()));
    let restored = move |object: Option<&NetworkPolicy>| object.is_some_and(|policy| policy.spec == rendered);
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy repaired", "deploy-agents", restored, &log).await;
    figure(&format!("child drift repaired {:.1} s after the apiserver was back", back.elapsed().as_secs_f64()));
    let rolled = move |object: Option<&Deployment>| object.and_then(secrets_digest).is_some_and(|d| Some(d) != digest);
    tenant.until::<Deployment, _>("the agents rolled for the rotated Secret", "deploy-agents", rolled, &log).await;
    figure(&format!("Secret rotation acted on {:.1} s after the apiserver was back", back.elapsed().as_secs_f64()));

    // The same process did it all: no exit, no restart, no lost Lease.
    assert!(
        process_running(controller.pid()),
        "the controller exited:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
