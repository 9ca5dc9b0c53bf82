//! `cdtarget controller` as shipped: one process for the whole test binary, authenticated with a
//! token of the ServiceAccount from `deploy/`, so it has exactly the RBAC users install, never an
//! admin kubeconfig (`common::cluster`). Each test onboards a tenant namespace of its own with its
//! own repository.

use cdtarget::api::{CDTarget, TenantRepository};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;

use crate::common::AuditEvent;
use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, CONTROLLER_USER, Tenant, accepted_writes_as, drift_network_policy, drift_pipeline_settings,
    exists, gone, installed_cluster, ready, rotate_token, settings_as_in_git, shared_controller,
};

#[tokio::test]
async fn first_apply_writes_tenant_objects_as_the_tenant_and_children_as_the_controller() {
    let test = "first_apply_writes_tenant_objects_as_the_tenant_and_children_as_the_controller";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let mark = cluster.audit_mark();
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;

    tenant.until::<ConfigMap, _>("the tenant's ConfigMap", "pipeline-settings", exists, log).await;
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy child", "deploy-agents", exists, log).await;
    tenant.until::<Deployment, _>("the Deployment child", "deploy-agents", exists, log).await;
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;

    let ns = tenant.ns.clone();
    let events = cluster.audit_requests_until(mark, "the CDTarget status write", |events| {
        !accepted_writes_as(events, &ns, "cdtargets/status", "deploy-agents").is_empty()
    });
    let tenant_user = tenant.user();
    // The tenant's own documents: written by the controller impersonating the tenant's ServiceAccount.
    for (resource, name) in [("configmaps", "pipeline-settings"), ("cdtargets", "deploy-agents")] {
        let writers = accepted_writes_as(&events, &tenant.ns, resource, name);
        assert!(!writers.is_empty(), "no accepted write of {resource}/{name} in the audit log");
        assert!(writers.iter().all(|user| *user == tenant_user), "{resource}/{name} written as {writers:?}");
    }
    // The CDTarget's status and its children: written by the controller as itself.
    for resource in ["cdtargets/status", "networkpolicies", "deployments"] {
        let writers = accepted_writes_as(&events, &tenant.ns, resource, "deploy-agents");
        assert!(!writers.is_empty(), "no accepted write of {resource}/deploy-agents in the audit log");
        assert!(writers.iter().all(|user| user == CONTROLLER_USER), "{resource} written as {writers:?}");
    }
}

#[tokio::test]
async fn a_cdtarget_pruned_from_git_has_its_children_removed_by_the_real_garbage_collector() {
    let test = "a_cdtarget_pruned_from_git_has_its_children_removed_by_the_real_garbage_collector";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy child", "deploy-agents", exists, log).await;
    tenant.until::<Deployment, _>("the Deployment child", "deploy-agents", exists, log).await;

    let mark = cluster.audit_mark();
    tenant.repo.remove_file("deploy/agents.yaml", "agents go");
    tenant.repo.push("main");
    tenant.request_reconcile("prune");
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy child removed", "deploy-agents", gone, log).await;
    tenant.until::<Deployment, _>("the Deployment child removed", "deploy-agents", gone, log).await;

    let events = cluster.audit_requests_since(mark);
    let deletes = |resource: &str| -> Vec<&AuditEvent> {
        events
            .iter()
            .filter(|event| event.verb == "delete" && event.namespace == tenant.ns && event.resource == resource)
            .filter(|event| event.name == "deploy-agents" && (200..300).contains(&event.code))
            .collect()
    };
    // The prune deletes the CDTarget as the tenant; the children go through their owner
    // references, deleted by kube-controller-manager's garbage collector, never by the controller.
    let pruned = deletes("cdtargets");
    assert!(
        !pruned.is_empty()
            && pruned.iter().all(|event| event.user == CONTROLLER_USER && event.acting_user() == tenant.user()),
        "{pruned:#?}"
    );
    for child in ["networkpolicies", "deployments"] {
        let deleted = deletes(child);
        assert!(!deleted.is_empty(), "no delete of the {child} child in the audit log");
        assert!(deleted.iter().all(|event| event.user != CONTROLLER_USER), "{deleted:#?}");
    }
    // The tenant's ConfigMap stays: it is still in Git.
    tenant.until::<ConfigMap, _>("the tenant's ConfigMap", "pipeline-settings", exists, log).await;
}

#[tokio::test]
async fn a_tenant_document_outside_the_tenant_role_is_refused_by_the_real_rbac() {
    let test = "a_tenant_document_outside_the_tenant_role_is_refused_by_the_real_rbac";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // Ingress is no kind the loader refuses, and no kind the example tenant Role grants.
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  defaultBackend:\n    service:\n      name: web\n      port:\n        number: 80\n";
    let mark = cluster.audit_mark();
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/ingress.yaml", ingress)]);
    let log = shared_controller(cluster).await;

    let failed = |registration: Option<&TenantRepository>| {
        registration.and_then(|r| r.status.as_ref()).is_some_and(|status| {
            status.conditions.iter().any(|c| c.type_ == "Applied" && c.status == "False" && c.reason == "ApplyFailed")
        })
    };
    let registration = tenant.registration_until("Applied=False/ApplyFailed", failed, log).await;
    let applied =
        registration.status.expect("status").conditions.into_iter().find(|c| c.type_ == "Applied").expect("Applied");
    // docs/operations.md: the message names the object and the user.
    assert!(applied.message.contains("web") && applied.message.contains("Ingress"), "{}", applied.message);
    assert!(applied.message.contains(&tenant.user()), "{}", applied.message);

    // The real apiserver refused it, as the tenant: 403 on an impersonated request.
    let refused: Vec<AuditEvent> = cluster
        .audit_requests_since(mark)
        .into_iter()
        .filter(|event| event.namespace == tenant.ns && event.resource == "ingresses" && event.code == 403)
        .collect();
    assert!(!refused.is_empty(), "no refused Ingress request in the audit log");
    assert!(refused.iter().all(|event| event.acting_user() == tenant.user()), "{refused:#?}");
    let api: Api<k8s_openapi::api::networking::v1::Ingress> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    assert!(api.get_opt("web").await.expect("get the Ingress").is_none(), "the Ingress was created");
}

#[tokio::test]
async fn drift_of_a_child_and_of_a_tenant_object_changed_with_kubectl_is_repaired() {
    let test = "drift_of_a_child_and_of_a_tenant_object_changed_with_kubectl_is_repaired";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    tenant.until::<ConfigMap, _>("the tenant's ConfigMap", "pipeline-settings", exists, log).await;
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy child", "deploy-agents", exists, log).await;
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let rendered = policies.get("deploy-agents").await.expect("get the NetworkPolicy").spec;

    // A child: the controller owns it and watches it, so the repair follows the change.
    let mark = cluster.audit_mark();
    drift_network_policy(cluster, &tenant.ns);
    let restored = move |object: Option<&NetworkPolicy>| object.is_some_and(|policy| policy.spec == rendered);
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy repaired", "deploy-agents", restored, log).await;
    let events = cluster.audit_requests_until(mark, "the NetworkPolicy repair", |events| {
        !accepted_writes_as(events, &tenant.ns, "networkpolicies", "deploy-agents").is_empty()
    });
    let repairs = accepted_writes_as(&events, &tenant.ns, "networkpolicies", "deploy-agents");
    assert!(!repairs.is_empty() && repairs.iter().all(|user| user == CONTROLLER_USER), "{repairs:?}");

    // A tenant object: repaired by the next reconcile of the registration ("reconcile now").
    let mark = cluster.audit_mark();
    drift_pipeline_settings(cluster, &tenant.ns);
    tenant.request_reconcile("drift");
    tenant.until::<ConfigMap, _>("the ConfigMap repaired", "pipeline-settings", settings_as_in_git, log).await;
    let events = cluster.audit_requests_until(mark, "the ConfigMap repair", |events| {
        !accepted_writes_as(events, &tenant.ns, "configmaps", "pipeline-settings").is_empty()
    });
    let repairs = accepted_writes_as(&events, &tenant.ns, "configmaps", "pipeline-settings");
    assert!(!repairs.is_empty() && repairs.iter().all(|user| *user == tenant.user()), "{repairs:?}");
}

/// The pod template's `cdtarget.io/secrets-digest` of a Deployment.
fn secrets_digest(deployment: &Deployment) -> Option<String> {
    let template = deployment.spec.as_ref()?.template.metadata.as_ref()?;
    template.annotations.as_ref()?.get("cdtarget.io/secrets-digest").cloned()
}

#[tokio::test]
async fn rotating_the_token_secret_rolls_the_agents() {
    let test = "rotating_the_token_secret_rolls_the_agents";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    tenant.until::<Deployment, _>("the Deployment child", "deploy-agents", exists, log).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let before = secrets_digest(&deployments.get("deploy-agents").await.expect("get the Deployment"));
    assert!(before.is_some(), "no secrets digest on the agents' pod template");

    let mark = cluster.audit_mark();
    rotate_token(cluster, &tenant.ns);
    let rolled =
        move |object: Option<&Deployment>| object.and_then(secrets_digest).is_some_and(|digest| Some(digest) != before);
    tenant
        .until::<Deployment, _>("a new secrets digest on the agents' pod template", "deploy-agents", rolled, log)
        .await;
    let events = cluster.audit_requests_until(mark, "the Deployment write", |events| {
        !accepted_writes_as(events, &tenant.ns, "deployments", "deploy-agents").is_empty()
    });
    let writes = accepted_writes_as(&events, &tenant.ns, "deployments", "deploy-agents");
    assert!(!writes.is_empty() && writes.iter().all(|user| user == CONTROLLER_USER), "{writes:?}");
}

#[tokio::test]
async fn an_unchanged_poll_writes_nothing_but_a_drifted_object() {
    let test = "an_unchanged_poll_writes_nothing_but_a_drifted_object";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;
    let settled = |registration: Option<&TenantRepository>| {
        registration
            .and_then(|r| r.status.as_ref())
            .is_some_and(|status| status.conditions.iter().any(|c| c.type_ == "Applied" && c.status == "True"))
    };
    let before = tenant.registration_until("Applied=True", settled, log).await;

    // An unchanged poll, then (as a barrier: reconciles of one registration run one at a time) a
    // drifted ConfigMap and another poll, whose repair is awaited. Between the mark and the
    // repair the controller may write the drifted ConfigMap back and record each request it
    // handled in status.lastHandledReconcileAt (one status write per request), nothing else.
    let mark = cluster.audit_mark();
    tenant.request_reconcile("unchanged");
    drift_pipeline_settings(cluster, &tenant.ns);
    tenant.request_reconcile("barrier");
    tenant.until::<ConfigMap, _>("the ConfigMap repaired", "pipeline-settings", settings_as_in_git, log).await;
    let barrier_handled = |registration: Option<&TenantRepository>| {
        registration
            .and_then(|r| r.status.as_ref())
            .is_some_and(|status| status.last_handled_reconcile_at.as_deref() == Some("barrier"))
    };
    let after = tenant.registration_until("the barrier request handled", barrier_handled, log).await;

    let events = cluster.audit_requests_until(mark, "the ConfigMap repair", |events| {
        !accepted_writes_as(events, &tenant.ns, "configmaps", "pipeline-settings").is_empty()
    });
    // The registration's reconciler: what it applies as the tenant, and the registration itself
    // (the CDTarget reconciler's own writes of children are not the poll's).
    let writes: Vec<String> = events
        .into_iter()
        .filter(|event| event.user == CONTROLLER_USER && event.is_mutating())
        .filter(|event| {
            (event.namespace == tenant.ns && event.acting_user() == tenant.user())
                || (event.resource == "tenantrepositories" && event.name == tenant.ns)
        })
        .map(|event| format!("{} {}/{} as {}", event.verb, event.full_resource(), event.name, event.acting_user()))
        .collect();
    let repair = format!("patch configmaps/pipeline-settings as {}", tenant.user());
    let recorded = format!("patch tenantrepositories/status/{} as {CONTROLLER_USER}", tenant.ns);
    assert!(writes.contains(&repair), "the drifted ConfigMap was not written back: {writes:#?}");
    assert!(
        writes.iter().all(|write| *write == repair || *write == recorded),
        "writes beyond the drifted object and the requests recorded: {writes:#?}"
    );
    assert!(writes.iter().filter(|write| **write == recorded).count() <= 2, "{writes:#?}");
    // The status writes recorded the requests and changed nothing else.
    let mut expected = before.status.expect("status");
    expected.last_handled_reconcile_at = Some("barrier".into());
    assert_eq!(after.status.as_ref(), Some(&expected));
}

#[tokio::test]
async fn a_broken_push_changes_nothing_and_names_the_file() {
    let test = "a_broken_push_changes_nothing_and_names_the_file";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;

    // The ConfigMap changes and the CDTarget breaks (host bits set) in one push: all or nothing.
    let mark = cluster.audit_mark();
    let changed_map = CONFIG_MAP.replace("\"3\"", "\"4\"");
    let broken = CDTARGET.replace("10.20.0.10", "10.30.8.5/24");
    tenant.repo.commit_and_push(
        &[("deploy/settings.yaml", changed_map.as_str()), ("deploy/agents.yaml", broken.as_str())],
        "broken",
    );
    tenant.request_reconcile("broken");
    let refused = |registration: Option<&TenantRepository>| {
        registration.and_then(|r| r.status.as_ref()).is_some_and(|status| {
            status
                .conditions
                .iter()
                .any(|c| c.type_ == "Applied" && c.status == "False" && c.reason == "ValidationFailed")
        })
    };
    let registration = tenant.registration_until("Applied=False/ValidationFailed", refused, log).await;
    let applied =
        registration.status.expect("status").conditions.into_iter().find(|c| c.type_ == "Applied").expect("Applied");
    assert!(applied.message.contains("agents.yaml") && applied.message.contains("10.30.8.0/24"), "{}", applied.message);

    let events = cluster.audit_requests_until(mark, "the registration's status write", |events| {
        events.iter().any(|event| event.full_resource() == "tenantrepositories/status" && event.name == tenant.ns)
    });
    // Nothing of the broken revision is applied: no write as the tenant.
    let tenant_writes: Vec<AuditEvent> = events
        .into_iter()
        .filter(|event| event.user == CONTROLLER_USER && event.is_mutating() && event.namespace == tenant.ns)
        .filter(|event| event.acting_user() == tenant.user())
        .collect();
    assert!(tenant_writes.is_empty(), "a broken push was applied in part: {tenant_writes:#?}");
    let maps: Api<ConfigMap> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let map = maps.get("pipeline-settings").await.expect("get the ConfigMap");
    assert_eq!(map.data.and_then(|data| data.get("RETRIES").cloned()).as_deref(), Some("3"));
}
