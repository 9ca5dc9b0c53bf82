//! One tenant's hostile push against the controller every tenant shares (issue #26): the revision
//! is refused with a located problem naming the limit, what the tenant had running stays, the
//! process lives on, and another tenant's push lands meanwhile.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::common::attacks::deepening_json_patch;
use crate::common::cluster::{CONFIG_MAP, Tenant, applied, installed_cluster, shared_controller};
use crate::kit::registration_condition;

/// A kustomization whose JSON patch deepens its ConfigMap by 40 levels a round: without a depth
/// bound the controller aborted with a stack overflow, again after every restart.
fn deepening_attack() -> Vec<(&'static str, String)> {
    vec![
        (
            "deploy/kustomization.yaml",
            "resources: [settings.yaml]\npatches:\n- path: deepen.json\n  target: {kind: ConfigMap}\n".to_owned(),
        ),
        ("deploy/settings.yaml", CONFIG_MAP.to_owned()),
        ("deploy/deepen.json", deepening_json_patch()),
    ]
}

#[tokio::test]
async fn a_tenants_hostile_push_is_refused_while_another_tenants_push_lands() {
    let test = "a_tenants_hostile_push_is_refused_while_another_tenants_push_lands";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let attacker = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let neighbour = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let log = shared_controller(cluster).await;
    for tenant in [&attacker, &neighbour] {
        tenant.registration_until("Applied=True", applied("True", "Succeeded"), log).await;
    }

    let attack = deepening_attack();
    let attack: Vec<(&str, &str)> = attack.iter().map(|(path, text)| (*path, text.as_str())).collect();
    attacker.repo.commit_and_push(&attack, "deepen");
    attacker.request_reconcile("attack");
    let changed = CONFIG_MAP.replace("\"3\"", "\"4\"");
    neighbour.repo.commit_and_push(&[("deploy/settings.yaml", changed.as_str())], "four retries");
    neighbour.request_reconcile("push");

    let refused =
        attacker.registration_until("Applied=False/ValidationFailed", applied("False", "ValidationFailed"), log).await;
    let message = registration_condition(&refused, "Applied").message;
    assert!(message.contains("nested more than 64 levels"), "names the limit: {message}");
    assert!(message.contains("kustomization.yaml") && message.contains("patches[0]"), "located: {message}");

    let retries = |object: Option<&ConfigMap>| {
        object.and_then(|c| c.data.as_ref()).and_then(|d| d.get("RETRIES")).is_some_and(|r| r == "4")
    };
    neighbour.until::<ConfigMap, _>("the neighbour's pushed ConfigMap", "pipeline-settings", retries, log).await;
    // Nothing the attacker had running was removed by the refused revision.
    let kept: Api<ConfigMap> = Api::namespaced(cluster.admin_client().await, &attacker.ns);
    let settings = kept.get("pipeline-settings").await.expect("the attacker's ConfigMap is still there");
    assert_eq!(settings.data.unwrap().get("RETRIES").map(String::as_str), Some("3"));
}
