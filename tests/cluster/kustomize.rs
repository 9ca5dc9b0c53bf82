//! A tenant repository whose synced path is a kustomize overlay (issue #15): the controller
//! builds it (bases elsewhere in the repository, a generator, a namePrefix) and applies the
//! output as the tenant; a push whose kustomization sets another namespace is refused, located,
//! and loses nothing of what was applied.
//!
//! Needs the kustomize builder (`src/kustomize/build.rs`); with its skeleton the first wait fails.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::ListParams;

use crate::common::AuditEvent;
use crate::common::cluster::{
    CONTROLLER_USER, Tenant, accepted_writes_as, applied, exists, installed_cluster, shared_controller,
};
use crate::kit::registration_condition;

const BASE: &str =
    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - settings.yaml\n  - web.yaml\n";
const SETTINGS: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pipeline-settings\ndata:\n  RETRIES: \"3\"\n";
const WEB: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n        - name: web\n          image: registry.example/web:1\n          envFrom:\n            - configMapRef: {name: env}\n";

/// The overlay at `deploy/` (the registration's `spec.path`), with `extra` lines appended.
fn overlay(extra: &str) -> String {
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: prod-\nresources:\n  - ../base\nconfigMapGenerator:\n  - name: env\n    literals:\n      - LOG_LEVEL=warn\n{extra}"
    )
}

#[tokio::test]
async fn a_kustomize_overlay_is_applied_as_the_tenant_and_another_namespace_is_refused() {
    let test = "a_kustomize_overlay_is_applied_as_the_tenant_and_another_namespace_is_refused";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let start = cluster.audit_mark();
    let first = overlay("");
    let tenant = Tenant::onboard(
        cluster,
        &[
            ("deploy/kustomization.yaml", first.as_str()),
            // Not named by the overlay: never applied.
            ("deploy/unlisted.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: unlisted\n"),
            ("base/kustomization.yaml", BASE),
            ("base/settings.yaml", SETTINGS),
            ("base/web.yaml", WEB),
        ],
    );
    let log = shared_controller(cluster).await;
    tenant.registration_until("Applied=True", applied("True", "Succeeded"), log).await;

    let client = cluster.admin_client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &tenant.ns);
    let deployments: Api<Deployment> = Api::namespaced(client, &tenant.ns);
    assert!(
        exists(maps.get_opt("prod-pipeline-settings").await.expect("get").as_ref()),
        "the base's ConfigMap, prefixed"
    );
    assert!(maps.get_opt("unlisted").await.expect("get").is_none(), "a file the overlay does not name is not applied");
    let names: Vec<String> = maps
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    let generated: Vec<&String> = names.iter().filter(|n| n.starts_with("prod-env-")).collect();
    assert_eq!(generated.len(), 1, "one generated ConfigMap with its hash suffix: {names:?}");
    // The reference in the base's Deployment follows the prefix and the hash.
    let web = deployments.get("prod-web").await.expect("the base's Deployment, prefixed");
    let pod = web.spec.and_then(|s| s.template.spec).expect("a pod template");
    let reference =
        pod.containers[0].env_from.as_ref().and_then(|e| e[0].config_map_ref.as_ref()).map(|r| r.name.clone());
    assert_eq!(reference.as_deref(), Some(generated[0].as_str()));
    let events = cluster.audit_requests_until(start, "the Deployment's write", |events| {
        !accepted_writes_as(events, &tenant.ns, "deployments", "prod-web").is_empty()
    });
    let writers = accepted_writes_as(&events, &tenant.ns, "deployments", "prod-web");
    assert!(writers.iter().all(|user| *user == tenant.user()), "written as the tenant only: {writers:?}");

    // A push that moves everything into kube-system: refused at the overlay's `namespace`.
    let mark = cluster.audit_mark();
    tenant.repo.commit_and_push(&[("deploy/kustomization.yaml", overlay("namespace: kube-system\n").as_str())], "move");
    tenant.request_reconcile("moved");
    let registration =
        tenant.registration_until("Applied=False/ValidationFailed", applied("False", "ValidationFailed"), log).await;
    let message = registration_condition(&registration, "Applied").message;
    let expected = format!(
        "kustomization.yaml: namespace: `kube-system` is not this tenant's namespace; every object goes to `{}`",
        tenant.ns
    );
    assert!(message.contains(&expected), "{expected} not in {message}");

    // Nothing was sent for the refused revision, nothing was pruned, nothing reached kube-system.
    let events = cluster.audit_requests_until(mark, "the registration's status write", |events| {
        events.iter().any(|event| event.full_resource() == "tenantrepositories/status" && event.name == tenant.ns)
    });
    let sent: Vec<&AuditEvent> = events
        .iter()
        .filter(|event| event.user == CONTROLLER_USER && event.is_mutating())
        .filter(|event| event.acting_user() == tenant.user() || event.namespace == "kube-system")
        .collect();
    assert!(sent.is_empty(), "requests sent for a refused revision: {sent:#?}");
    assert!(exists(maps.get_opt("prod-pipeline-settings").await.expect("get").as_ref()), "nothing was lost");
    assert!(exists(maps.get_opt(generated[0]).await.expect("get").as_ref()), "nothing was lost");
    assert!(deployments.get_opt("prod-web").await.expect("get").is_some(), "nothing was lost");
}
