//! Server-side apply field conflicts with fields set by kubectl, on a child of a CDTarget and on
//! a tenant object from Git: Git and the controller apply with `force`, as Flux does
//! (docs/operations.md, "Field managers and conflicts"). A field they set goes back to them, with
//! its ownership; kubectl's server-side apply without `--force-conflicts` is refused naming
//! their manager; a field only another manager sets stays, and stays that manager's.

use cdtarget::api::CDTarget;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::{Api, Resource};

use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, CONTROLLER_USER, Tenant, accepted_writes_as, exists, installed_cluster, ready,
    settings_as_in_git, shared_controller,
};
use crate::kit::kubectl_file;

/// The managed-fields entry of `manager`, if it has one.
fn entry<'a>(object: &'a impl Resource, manager: &str) -> Option<&'a ManagedFieldsEntry> {
    object.meta().managed_fields.as_ref()?.iter().find(|entry| entry.manager.as_deref() == Some(manager))
}

/// Whether `manager` owns the field at `path` (`f:` segments, e.g. `["f:spec", "f:egress"]`).
fn owns(object: &impl Resource, manager: &str, path: &[&str]) -> bool {
    let Some(fields) = entry(object, manager).and_then(|e| e.fields_v1.as_ref()) else { return false };
    let mut at = &fields.0;
    for segment in path {
        match at.get(*segment) {
            Some(next) => at = next,
            None => return false,
        }
    }
    true
}

/// Every manager and what it owns, for a failure message.
fn managers(object: &impl Resource) -> String {
    let entries = object.meta().managed_fields.clone().unwrap_or_default();
    entries
        .iter()
        .map(|e| {
            let fields = e.fields_v1.as_ref().map(|f| f.0.to_string()).unwrap_or_default();
            format!("{} ({}): {fields}", e.manager.as_deref().unwrap_or("?"), e.operation.as_deref().unwrap_or("?"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn a_child_field_taken_by_kubectl_goes_back_to_the_controller_and_kubectl_fields_it_does_not_set_stay() {
    let test = "a_child_field_taken_by_kubectl_goes_back_to_the_controller_and_kubectl_fields_it_does_not_set_stay";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    // Ready: the first pass has written every child, and the status after them.
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let rendered = policies.get("deploy-agents").await.expect("get the NetworkPolicy");
    assert!(owns(&rendered, "cdtarget", &["f:spec", "f:egress"]), "{}", managers(&rendered));

    // A platform engineer's server-side apply of the egress rules (the controller's field) and an
    // annotation of their own (a field the controller does not set), with their own manager.
    let edit = format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deploy-agents\n  namespace: {}\n  annotations:\n    ops.example.com/reviewed: \"yes\"\nspec:\n  egress:\n    - ports:\n        - port: 8443\n",
        tenant.ns
    );
    let admin = cluster.admin_kubeconfig();
    let apply = ["--server-side", "--field-manager=platform-ops"];
    // Without --force-conflicts the API server refuses the whole apply, naming the owner.
    let refused = kubectl_file(cluster, &admin, "apply", &edit, &apply).failure();
    assert!(refused.contains("conflict with \"cdtarget\"") && refused.contains(".spec.egress"), "{refused}");
    let unchanged = policies.get("deploy-agents").await.expect("get the NetworkPolicy");
    assert_eq!(unchanged.metadata.resource_version, rendered.metadata.resource_version, "a refused apply wrote");

    // With it, kubectl takes the field; the controller, watching its child, takes it back (a
    // forced apply of what it renders), as itself.
    let mark = cluster.audit_mark();
    kubectl_file(cluster, &admin, "apply", &edit, &[&apply[..], &["--force-conflicts"]].concat()).success();
    let spec = rendered.spec.clone();
    let repaired = move |object: Option<&NetworkPolicy>| {
        object.is_some_and(|p| p.spec == spec && owns(p, "cdtarget", &["f:spec", "f:egress"]))
    };
    tenant.until::<NetworkPolicy, _>("the egress rules back with the controller", "deploy-agents", repaired, log).await;
    let events = cluster.audit_requests_until(mark, "the controller's repair", |events| {
        !accepted_writes_as(events, &tenant.ns, "networkpolicies", "deploy-agents").is_empty()
    });
    let writers = accepted_writes_as(&events, &tenant.ns, "networkpolicies", "deploy-agents");
    assert!(writers.iter().all(|user| user == CONTROLLER_USER), "{writers:?}");

    let now = policies.get("deploy-agents").await.expect("get the NetworkPolicy");
    let annotations = now.metadata.annotations.clone().unwrap_or_default();
    // The annotation is not the controller's: it stays, owned by the one who set it...
    assert_eq!(annotations.get("ops.example.com/reviewed").map(String::as_str), Some("yes"), "{}", managers(&now));
    assert!(
        owns(&now, "platform-ops", &["f:metadata", "f:annotations", "f:ops.example.com/reviewed"]),
        "{}",
        managers(&now)
    );
    // ... who no longer owns the egress rules.
    assert!(!owns(&now, "platform-ops", &["f:spec", "f:egress"]), "{}", managers(&now));
}

#[tokio::test]
async fn a_tenant_field_changed_with_kubectl_goes_back_to_git_and_a_key_git_does_not_set_stays() {
    let test = "a_tenant_field_changed_with_kubectl_goes_back_to_git_and_a_key_git_does_not_set_stays";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let log = shared_controller(cluster).await;
    tenant.until::<ConfigMap, _>("the tenant's ConfigMap", "pipeline-settings", exists, log).await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let applied = maps.get("pipeline-settings").await.expect("get the ConfigMap");
    assert!(owns(&applied, "cdtarget-tenant", &["f:data", "f:RETRIES"]), "{}", managers(&applied));

    let edit = |retries: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pipeline-settings\n  namespace: {}\ndata:\n  RETRIES: \"{retries}\"\n  EXTRA: kept\n",
            tenant.ns
        )
    };
    let admin = cluster.admin_kubeconfig();
    // kubectl's server-side apply of a key Git sets: refused, naming the tenant applies' manager.
    let refused =
        kubectl_file(cluster, &admin, "apply", &edit("8"), &["--server-side", "--field-manager=ops"]).failure();
    assert!(refused.contains("conflict with \"cdtarget-tenant\"") && refused.contains(".data.RETRIES"), "{refused}");

    // kubectl's client-side apply is an update (manager `kubectl-client-side-apply`): updates are
    // never conflicts, so it changes the value and takes the field.
    kubectl_file(cluster, &admin, "apply", &edit("7"), &[]).success();
    let edited = maps.get("pipeline-settings").await.expect("get the ConfigMap");
    assert!(owns(&edited, "kubectl-client-side-apply", &["f:data", "f:RETRIES"]), "{}", managers(&edited));

    // The next reconcile finds the drift and applies Git's value again, as the tenant, with force:
    // the key is Git's again, and the key Git does not set stays kubectl's.
    let mark = cluster.audit_mark();
    tenant.request_reconcile("conflict");
    tenant.until::<ConfigMap, _>("RETRIES as in Git", "pipeline-settings", settings_as_in_git, log).await;
    let events = cluster.audit_requests_until(mark, "the repair", |events| {
        !accepted_writes_as(events, &tenant.ns, "configmaps", "pipeline-settings").is_empty()
    });
    let writers = accepted_writes_as(&events, &tenant.ns, "configmaps", "pipeline-settings");
    assert!(writers.iter().all(|user| *user == tenant.user()), "{writers:?}");
    let now = maps.get("pipeline-settings").await.expect("get the ConfigMap");
    let data = now.data.clone().unwrap_or_default();
    assert_eq!(data.get("EXTRA").map(String::as_str), Some("kept"), "{}", managers(&now));
    assert!(owns(&now, "cdtarget-tenant", &["f:data", "f:RETRIES"]), "{}", managers(&now));
    assert!(!owns(&now, "kubectl-client-side-apply", &["f:data", "f:RETRIES"]), "{}", managers(&now));
    assert!(owns(&now, "kubectl-client-side-apply", &["f:data", "f:EXTRA"]), "{}", managers(&now));
}
