//! Tenant manifests the tenant may not create: which layer refuses them, what the registration
//! reports, and that nothing is created. Each test onboards its own tenant with the shared
//! controller.

use cdtarget::api::TenantRepository;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;

use crate::common::AuditEvent;
use crate::common::cluster::{
    CONFIG_MAP, CONTROLLER_USER, PLATFORM_NAMESPACE, Tenant, applied, installed_cluster, namespace, shared_controller,
};
use crate::kit::{kubectl_file, registration_condition};

/// A RoleBinding granting `cluster-admin` in the tenant's namespace to every authenticated user.
const ADMIN_BINDING: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: make-me-admin\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n  - apiGroup: rbac.authorization.k8s.io\n    kind: Group\n    name: system:authenticated\n";

/// The refused requests for `resource` in `ns` since the start of `events`, as the tenant.
fn refused_as(events: &[AuditEvent], ns: &str, resource: &str, user: &str) -> Vec<AuditEvent> {
    events
        .iter()
        .filter(|event| event.namespace == ns && event.resource == resource && event.code == 403)
        .filter(|event| event.user == CONTROLLER_USER && event.acting_user() == user)
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_rolebinding_to_cluster_admin_from_git_is_refused_by_the_real_rbac_and_reported() {
    let test = "a_rolebinding_to_cluster_admin_from_git_is_refused_by_the_real_rbac_and_reported";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let mark = cluster.audit_mark();
    // RoleBinding is no kind the loader refuses (the platform may let tenants bind Roles); the
    // example tenant Role grants no RBAC kind at all.
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/rbac.yaml", ADMIN_BINDING)]);
    let log = shared_controller(cluster).await;

    let registration =
        tenant.registration_until("Applied=False/ApplyFailed", applied("False", "ApplyFailed"), log).await;
    let message = registration_condition(&registration, "Applied").message;
    // docs/operations.md: the message names the object and the user it was applied as.
    assert!(message.contains(&format!("RoleBinding {}/make-me-admin", tenant.ns)), "{message}");
    assert!(message.contains(&tenant.user()) && message.contains("forbidden"), "{message}");

    // The real apiserver's authorizer refused it, as the tenant (the impersonated request).
    let events = cluster.audit_requests_until(mark, "the refused RoleBinding", |events| {
        !refused_as(events, &tenant.ns, "rolebindings", &tenant.user()).is_empty()
    });
    let refused = refused_as(&events, &tenant.ns, "rolebindings", &tenant.user());
    assert!(refused.iter().all(|event| event.name == "make-me-admin"), "{refused:#?}");
    let accepted: Vec<&AuditEvent> = events
        .iter()
        .filter(|event| event.resource == "rolebindings" && event.is_mutating() && (200..300).contains(&event.code))
        .filter(|event| event.namespace == tenant.ns && event.user == CONTROLLER_USER)
        .collect();
    assert!(accepted.is_empty(), "a RoleBinding write was accepted: {accepted:#?}");
    let bindings: Api<RoleBinding> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    assert!(bindings.get_opt("make-me-admin").await.expect("get the RoleBinding").is_none(), "it was created");
}

#[tokio::test]
async fn a_rolebinding_to_cluster_admin_is_refused_by_the_escalation_check_where_tenants_may_bind() {
    let test = "a_rolebinding_to_cluster_admin_is_refused_by_the_escalation_check_where_tenants_may_bind";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // Suspended until the platform has granted the tenant RoleBindings in its namespace (a
    // platform that lets tenants bind their own Roles, unlike the example).
    let tenant = Tenant::onboard_with(
        cluster,
        &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/rbac.yaml", ADMIN_BINDING)],
        "  suspend: true\n",
    );
    let grant = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: tenant-binds\n  namespace: {ns}\nrules:\n  - apiGroups: [rbac.authorization.k8s.io]\n    resources: [rolebindings]\n    verbs: [get, list, watch, create, update, patch, delete]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: tenant-binds\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: tenant-binds\nsubjects:\n  - kind: ServiceAccount\n    name: cdtarget-tenant\n    namespace: {ns}\n",
        ns = tenant.ns
    );
    kubectl_file(cluster, &cluster.admin_kubeconfig(), "apply", &grant, &[]).success();
    let log = shared_controller(cluster).await;
    let mark = cluster.audit_mark();
    tenant.patch_registration(r#"{"spec":{"suspend":false}}"#);

    let registration =
        tenant.registration_until("Applied=False/ApplyFailed", applied("False", "ApplyFailed"), log).await;
    let message = registration_condition(&registration, "Applied").message;
    // The tenant may write RoleBindings, but not grant what it does not hold itself: RBAC's
    // escalation check (no `bind` or `escalate` on cluster-admin) refuses it.
    assert!(message.contains(&format!("RoleBinding {}/make-me-admin", tenant.ns)), "{message}");
    assert!(message.contains("attempting to grant RBAC permissions not currently held"), "{message}");
    assert!(message.contains(&tenant.user()), "{message}");

    let events = cluster.audit_requests_until(mark, "the refused RoleBinding", |events| {
        !refused_as(events, &tenant.ns, "rolebindings", &tenant.user()).is_empty()
    });
    assert!(!refused_as(&events, &tenant.ns, "rolebindings", &tenant.user()).is_empty());
    let bindings: Api<RoleBinding> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    assert!(bindings.get_opt("make-me-admin").await.expect("get the RoleBinding").is_none(), "it was created");
}

#[tokio::test]
async fn a_secret_for_another_namespace_is_refused_by_the_loader_and_by_rbac_if_it_were_sent() {
    let test = "a_secret_for_another_namespace_is_refused_by_the_loader_and_by_rbac_if_it_were_sent";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let victim = namespace(cluster, "victim");
    let secrets = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: stolen\n  namespace: kube-system\nstringData:\n  token: x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: planted\n  namespace: {victim}\nstringData:\n  token: x\n"
    );
    let mark = cluster.audit_mark();
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/secrets.yaml", &secrets)]);
    let log = shared_controller(cluster).await;

    // The loader refuses it before any request: the whole revision, naming file, document and
    // field, and where the object would have to go instead.
    let registration =
        tenant.registration_until("Applied=False/ValidationFailed", applied("False", "ValidationFailed"), log).await;
    let message = registration_condition(&registration, "Applied").message;
    for (document, namespace) in [(1, "kube-system"), (2, victim.as_str())] {
        let expected = format!(
            "secrets.yaml:{document}: metadata.namespace: a string (\"{namespace}\") is not this tenant's namespace; every object goes to `{}`",
            tenant.ns
        );
        assert!(message.contains(&expected), "{expected} not in {message}");
    }
    let events = cluster.audit_requests_until(mark, "the registration's status write", |events| {
        events.iter().any(|event| event.full_resource() == "tenantrepositories/status" && event.name == tenant.ns)
    });
    // No request as the tenant at all (the ConfigMap of the same revision waits too), and no
    // request of the controller in the other namespaces.
    let sent: Vec<&AuditEvent> = events
        .iter()
        .filter(|event| event.user == CONTROLLER_USER)
        .filter(|event| {
            event.acting_user() == tenant.user() || event.namespace == victim || event.namespace == "kube-system"
        })
        .collect();
    assert!(sent.is_empty(), "requests sent for a refused revision: {sent:#?}");
    let maps: Api<ConfigMap> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    assert!(maps.get_opt("pipeline-settings").await.expect("get the ConfigMap").is_none());

    // Were it sent, the tenant's identity could not write there: refused by RBAC with the
    // tenant's own token, and as the controller sends it (its token, impersonating the tenant).
    let mark = cluster.audit_mark();
    let as_tenant = cluster.service_account_kubeconfig(&tenant.ns, "cdtarget-tenant").await;
    let as_controller = cluster.service_account_kubeconfig(PLATFORM_NAMESPACE, "cdtarget").await;
    let impersonating = ["--as", &tenant.user()];
    for (kubeconfig, extra) in [(&as_tenant, &[][..]), (&as_controller, &impersonating[..])] {
        let refused =
            kubectl_file(cluster, kubeconfig, "apply", &secrets, &[&["--server-side"][..], extra].concat()).failure();
        for namespace in ["kube-system", victim.as_str()] {
            let expected = format!(
                "User \"{}\" cannot patch resource \"secrets\" in API group \"\" in the namespace \"{namespace}\"",
                tenant.user()
            );
            assert!(refused.contains(&expected), "{expected} not in {refused}");
        }
    }
    let refused_secrets = |events: &[AuditEvent]| {
        events
            .iter()
            .filter(|event| event.resource == "secrets" && event.acting_user() == tenant.user() && event.code == 403)
            .count()
    };
    let events =
        cluster.audit_requests_until(mark, "the four refused Secret requests", |events| refused_secrets(events) >= 4);
    let refused: Vec<&AuditEvent> = events
        .iter()
        .filter(|event| event.resource == "secrets" && event.acting_user() == tenant.user() && event.is_mutating())
        .collect();
    assert!(refused.iter().all(|event| event.code == 403), "{refused:#?}");
    let other: Api<Secret> = Api::namespaced(cluster.admin_client().await, &victim);
    assert!(other.get_opt("planted").await.expect("get the Secret").is_none(), "the Secret was planted");
    let system: Api<Secret> = Api::namespaced(cluster.admin_client().await, "kube-system");
    assert!(system.get_opt("stolen").await.expect("get the Secret").is_none(), "the Secret was created");

    let registration: Api<TenantRepository> = Api::namespaced(cluster.admin_client().await, PLATFORM_NAMESPACE);
    let status = registration.get(&tenant.ns).await.expect("get the registration").status.expect("status");
    assert_eq!(status.last_applied_revision, None, "a refused revision was recorded as applied");
}
