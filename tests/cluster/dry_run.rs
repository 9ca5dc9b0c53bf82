//! All or nothing on the real control plane: before the first write of a revision the whole set
//! is server-side dry-run as the tenant (`dryRun=All`, the tenant field manager, strict field
//! validation); one refused object and nothing of the revision is written, the status names
//! every refused object with the API server's message, and what ran before keeps running.

use cdtarget::api::TenantRepository;
use cdtarget::apply::Writer;
use cdtarget::apply::refusal::Refusal;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::common::cluster::{CONFIG_MAP, CONTROLLER_USER, Tenant, applied, installed_cluster, shared_controller};
use crate::kit::registration_condition;

/// A condition: the registration fetched `revision` and its `Applied` condition has `status`.
fn evaluated(revision: String, status: &'static str) -> impl Fn(Option<&TenantRepository>) -> bool {
    move |registration| {
        registration.and_then(|r| r.status.as_ref()).is_some_and(|s| {
            s.last_fetched_revision.as_deref() == Some(revision.as_str())
                && s.conditions.iter().any(|c| c.type_ == "Applied" && c.status == status)
        })
    }
}

/// The `pipeline-settings` ConfigMap with `RETRIES: "7"`.
const SETTINGS_CHANGED: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pipeline-settings\ndata:\n  RETRIES: \"7\"\n";
/// A ConfigMap new in the refused revision.
const NEW_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: new-in-this-push\ndata:\n  A: \"1\"\n";
/// A kind the example tenant Role does not grant (403 as the tenant).
const INGRESS: &str = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  defaultBackend:\n    service:\n      name: web\n      port:\n        number: 80\n";
/// A Deployment the API server's validation refuses (422: replicas below 0), second document.
const INVALID_DEPLOYMENT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\ndata:\n  A: \"1\"\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: negative\nspec:\n  replicas: -1\n  selector:\n    matchLabels: {app: negative}\n  template:\n    metadata:\n      labels: {app: negative}\n    spec:\n      containers:\n        - name: app\n          image: registry.example/app:1\n";
/// A Deployment with a typo (`replicass`), second document of its file.
const TYPO_DEPLOYMENT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo-config\ndata:\n  A: \"1\"\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: typo\nspec:\n  replicass: 2\n  selector:\n    matchLabels: {app: typo}\n  template:\n    metadata:\n      labels: {app: typo}\n    spec:\n      containers:\n        - name: app\n          image: registry.example/app:1\n";

#[tokio::test]
async fn a_revision_with_refused_objects_writes_nothing_names_every_one_and_a_good_one_applies() {
    let test = "a_revision_with_refused_objects_writes_nothing_names_every_one_and_a_good_one_applies";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let log = shared_controller(cluster).await;
    let first = tenant.repo.head("main").expect("the first commit");
    tenant.registration_until("the first revision applied", evaluated(first, "True"), log).await;

    // One push: a changed ConfigMap, a new one, an Ingress the tenant may not write, and an
    // invalid Deployment (the 2nd document of its file).
    let mark = cluster.audit_mark();
    let refused = tenant.repo.commit_and_push(
        &[
            ("deploy/settings.yaml", SETTINGS_CHANGED),
            ("deploy/new.yaml", NEW_MAP),
            ("deploy/ingress.yaml", INGRESS),
            ("deploy/web.yaml", INVALID_DEPLOYMENT),
        ],
        "a push the API server refuses in part",
    );
    tenant.request_reconcile("refused");
    let registration =
        tenant.registration_until("the refused revision evaluated", evaluated(refused.clone(), "False"), log).await;
    let applied_condition = registration_condition(&registration, "Applied");
    let ready = registration_condition(&registration, "Ready");
    let message = &applied_condition.message;
    eprintln!("Applied: {message}");
    assert_eq!(applied_condition.reason, "ApplyFailed");
    assert_eq!(&ready.message, message, "Ready tells the same story");
    // Every refused object, located, with the API server's own words; and who it was tried as.
    assert!(message.contains("refused 2 of 5 objects in a server-side dry run"), "{message}");
    assert!(message.contains(&tenant.user()) && message.contains("nothing was written"), "{message}");
    assert!(
        message.contains(&format!("ingress.yaml:1: Ingress {}/web was refused by the API server:", tenant.ns)),
        "{message}"
    );
    assert!(message.contains("ingresses.networking.k8s.io \"web\" is forbidden"), "{message}");
    assert!(
        message.contains(&format!(
            "web.yaml:2: spec.replicas: Deployment {}/negative was refused by the API server: Invalid value: -1",
            tenant.ns
        )),
        "{message}"
    );

    // Nothing of the revision was written: the changed ConfigMap kept its value, the new one and
    // the valid ConfigMap of web.yaml do not exist, and no accepted write went into the
    // namespace as the tenant, only dry runs.
    let maps: Api<ConfigMap> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let settings = maps.get("pipeline-settings").await.expect("the ConfigMap that ran before");
    assert_eq!(settings.data.unwrap_or_default().get("RETRIES").map(String::as_str), Some("3"), "half-applied");
    for name in ["new-in-this-push", "web-config"] {
        assert!(maps.get_opt(name).await.expect("get").is_none(), "{name} was created by a refused revision");
    }
    let events = cluster.audit_requests_until(mark, "the dry runs of the refused revision", |events| {
        events.iter().any(|e| e.is_dry_run() && e.namespace == tenant.ns && e.resource == "ingresses")
    });
    // The controller's own feedback in the namespace (the SyncStatus, Events) is not the
    // revision's: it is written precisely to say the revision was refused.
    let tenant_events: Vec<_> = events
        .iter()
        .filter(|e| e.namespace == tenant.ns && e.user == CONTROLLER_USER)
        .filter(|e| !matches!(e.resource.as_str(), "syncstatuses" | "events"))
        .collect();
    let dry_runs = tenant_events.iter().filter(|e| e.is_dry_run()).count();
    let writes: Vec<_> = tenant_events.iter().filter(|e| e.is_mutating() && (200..300).contains(&e.code)).collect();
    assert!(dry_runs >= 5, "every object of the set was dry-run: {tenant_events:#?}");
    assert!(writes.is_empty(), "a refused revision wrote: {writes:#?}");
    assert!(tenant_events.iter().filter(|e| e.is_dry_run()).all(|e| e.acting_user() == tenant.user()));
    // No intent record either: the inventory is the first revision's.
    let inventory = registration.status.expect("status").inventory;
    assert_eq!(inventory.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["pipeline-settings"]);

    // The fixing push: the refused objects removed, the rest applies.
    tenant.repo.commit_and_push(&[("deploy/ingress.yaml", ""), ("deploy/web.yaml", "")], "fix");
    let fixed = tenant.repo.head("main").expect("the fixing commit");
    tenant.request_reconcile("fixed");
    tenant.registration_until("the fixed revision applied", evaluated(fixed, "True"), log).await;
    let settings = maps.get("pipeline-settings").await.expect("the ConfigMap");
    assert_eq!(settings.data.unwrap_or_default().get("RETRIES").map(String::as_str), Some("7"));
    assert!(maps.get_opt("new-in-this-push").await.expect("get").is_some(), "the good revision applied");
}

#[tokio::test]
async fn an_unknown_field_is_a_located_error_of_strict_field_validation_not_a_dropped_field() {
    let test = "an_unknown_field_is_a_located_error_of_strict_field_validation_not_a_dropped_field";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant =
        Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/web.yaml", TYPO_DEPLOYMENT)]);
    let log = shared_controller(cluster).await;
    let registration =
        tenant.registration_until("Applied=False/ApplyFailed", applied("False", "ApplyFailed"), log).await;
    let message = registration_condition(&registration, "Applied").message;
    eprintln!("Applied: {message}");
    assert!(
        message.contains(&format!(
            "web.yaml:2: spec.replicass: unknown field: the API server's strict field validation refused Deployment {}/typo",
            tenant.ns
        )),
        "{message}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    assert!(maps.get_opt("typo-config").await.expect("get").is_none(), "the set was half-applied");

    // A CDTarget with a typo is refused by the loader before any request (its schema is
    // compiled in); sent anyway, the CRD's structural schema refuses it under strict validation.
    let typo = serde_json::json!({
        "apiVersion": "cdtarget.io/v1alpha1",
        "kind": "CDTarget",
        "metadata": {"name": "typo", "namespace": tenant.ns},
        "spec": {"agentImage": "ghcr.io/acme/azp-agent:4.255.0", "tokenRef": "azp-token", "ip": ["10.20.0.10"],
                 "config": {"url": "https://dev.azure.com/acme", "poolName": "p"}, "agentImagee": "typo"},
    });
    let writer = Writer::new(cluster.admin_client().await);
    let refused = writer.dry_run(&tenant.user(), &[typo]).await.expect("the impersonating client");
    assert_eq!(refused.len(), 1, "{refused:?}");
    let entry = cdtarget::apply::entry_of(&serde_json::json!({"apiVersion": "cdtarget.io/v1alpha1", "kind": "CDTarget", "metadata": {"name": "typo", "namespace": tenant.ns}})).unwrap();
    let refusal = Refusal::of(entry, &refused[0].source);
    eprintln!("CDTarget: {refusal:?}");
    let fields: Vec<&str> = refusal.causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, ["spec.agentImagee"], "{refusal:?}");
    let targets: Api<cdtarget::api::CDTarget> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    assert!(targets.get_opt("typo").await.expect("get").is_none(), "a dry run persisted");
}
