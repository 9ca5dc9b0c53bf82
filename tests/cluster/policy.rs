//! A change of the platform policy ConfigMap re-renders without a push (docs/operations.md: a
//! change of the policy ConfigMap re-renders every CDTarget; docs/policy.md). The policy is
//! cluster-wide, so this runs on a control plane of its own with a controller of its own
//! ([`crate::own`]): on the shared one it would re-render the children other tests compare.

use cdtarget::api::CDTarget;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;

use crate::common::cluster::own_installed_cluster;
use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, CONTROLLER_USER, Controller, PLATFORM_NAMESPACE, Tenant, accepted_writes_as, applied,
};
use crate::kit::{kubectl_file, registration_condition, target_applied, target_ready};

/// Every `ipBlock.cidr` the NetworkPolicy opens.
fn egress_cidrs(policy: &NetworkPolicy) -> Vec<String> {
    let rules = policy.spec.as_ref().and_then(|spec| spec.egress.clone()).unwrap_or_default();
    rules
        .iter()
        .flat_map(|rule| rule.to.clone().unwrap_or_default())
        .filter_map(|peer| peer.ip_block.map(|block| block.cidr))
        .collect()
}

/// A condition: the NetworkPolicy opens `present` and not `absent`.
fn opens(present: &'static str, absent: &'static str) -> impl Fn(Option<&NetworkPolicy>) -> bool {
    move |policy| {
        policy
            .map(egress_cidrs)
            .is_some_and(|cidrs| cidrs.iter().any(|c| c == present) && !cidrs.iter().any(|c| c == absent))
    }
}

/// The policy ConfigMap holding `policy_yaml` (indented by four spaces).
fn policy_config_map(policy_yaml: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cdtarget-policy\n  namespace: {PLATFORM_NAMESPACE}\ndata:\n  policy.yaml: |\n{policy_yaml}"
    )
}

/// One of the default platform targets (Azure DevOps), and a documentation range added instead.
const DEFAULT_TARGET: &str = "150.171.22.0/24";
const ADDED_TARGET: &str = "198.51.100.0/24";
const PLATFORM_TARGET: &str =
    "    egress:\n      platformTargets:\n        - {cidr: 198.51.100.0/24, ports: [{port: 443}]}\n";
/// The same, and a guardrail that now forbids the CDTarget's address (10.20.0.10).
const GUARDRAIL: &str = "    egress:\n      platformTargets:\n        - {cidr: 198.51.100.0/24, ports: [{port: 443}]}\n      forbidden: [169.254.0.0/16, \"fe80::/10\", 10.20.0.0/16]\n";

#[tokio::test]
async fn a_policy_change_re_renders_without_a_push_and_a_new_guardrail_keeps_the_last_good_children() {
    let test = "a_policy_change_re_renders_without_a_push_and_a_new_guardrail_keeps_the_last_good_children";
    // A control plane of its own: see docs/testing.md ("Two cases run on a control plane of their own").
    let Some(own) = own_installed_cluster(test) else { return };
    let cluster = own.cluster();
    let controller = Controller::start(cluster, "policy", &[]).await;
    let log = controller.log();
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    tenant
        .until::<NetworkPolicy, _>(
            "the defaults' platform targets",
            "deploy-agents",
            opens(DEFAULT_TARGET, ADDED_TARGET),
            log,
        )
        .await;
    tenant.until::<CDTarget, _>("Applied=True", "deploy-agents", target_applied("True", "Applied"), log).await;
    let revision = tenant.repo.head("main").expect("the pushed commit");
    let registration = tenant.registration_until("Applied=True", applied("True", "Succeeded"), log).await;
    assert_eq!(registration.status.and_then(|s| s.last_applied_revision).as_deref(), Some(revision.as_str()));
    let admin = cluster.admin_kubeconfig();

    // A platform target replaces the defaults: the NetworkPolicy follows, and nothing was pushed.
    let mark = cluster.audit_mark();
    kubectl_file(cluster, &admin, "apply", &policy_config_map(PLATFORM_TARGET), &[]).success();
    tenant
        .until::<NetworkPolicy, _>("the new platform target", "deploy-agents", opens(ADDED_TARGET, DEFAULT_TARGET), log)
        .await;
    let events = cluster.audit_requests_until(mark, "the re-rendered NetworkPolicy", |events| {
        !accepted_writes_as(events, &tenant.ns, "networkpolicies", "deploy-agents").is_empty()
    });
    let writers = accepted_writes_as(&events, &tenant.ns, "networkpolicies", "deploy-agents");
    assert!(writers.iter().all(|user| user == CONTROLLER_USER), "{writers:?}");
    assert_eq!(tenant.repo.head("main").as_deref(), Some(revision.as_str()), "no push");

    // A guardrail that now forbids the CDTarget's address: the CDTarget stalls saying so, the
    // registration refuses the revision it runs (nothing is applied or pruned), and the last good
    // children stay as they are.
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let deployments: Api<Deployment> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let good_policy = policies.get("deploy-agents").await.expect("get the NetworkPolicy");
    let good_deployment = deployments.get("deploy-agents").await.expect("get the Deployment");
    let mark = cluster.audit_mark();
    kubectl_file(cluster, &admin, "apply", &policy_config_map(GUARDRAIL), &[]).success();
    tenant
        .until::<CDTarget, _>("Ready=False/InvalidSpec", "deploy-agents", target_ready("False", "InvalidSpec"), log)
        .await;
    let registration =
        tenant.registration_until("Applied=False/ValidationFailed", applied("False", "ValidationFailed"), log).await;
    let message = registration_condition(&registration, "Applied").message;
    assert!(message.contains("agents.yaml") && message.contains("forbidden range 10.20.0.0/16"), "{message}");
    let targets: Api<CDTarget> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let stalled = targets.get("deploy-agents").await.expect("get the CDTarget");
    let ready = stalled.status.expect("status").conditions.into_iter().find(|c| c.type_ == "Ready").expect("Ready");
    assert!(
        ready.message.contains("spec.ip[0]") && ready.message.contains("forbidden range 10.20.0.0/16"),
        "{}",
        ready.message
    );

    let events = cluster.audit_requests_until(mark, "the CDTarget's and the registration's status writes", |events| {
        !accepted_writes_as(events, &tenant.ns, "cdtargets/status", "deploy-agents").is_empty()
            && events.iter().any(|e| e.full_resource() == "tenantrepositories/status" && e.name == tenant.ns)
    });
    for child in ["networkpolicies", "deployments", "scaledobjects", "triggerauthentications"] {
        let writes = accepted_writes_as(&events, &tenant.ns, child, "deploy-agents");
        assert!(writes.is_empty(), "{child} written under a policy that refuses the CDTarget: {writes:?}");
    }
    let tenant_writes: Vec<String> = events
        .iter()
        .filter(|event| event.is_mutating() && event.acting_user() == tenant.user())
        .map(|event| format!("{} {}/{}", event.verb, event.full_resource(), event.name))
        .collect();
    assert!(tenant_writes.is_empty(), "applied as the tenant under a refusing policy: {tenant_writes:?}");
    let kept = policies.get("deploy-agents").await.expect("get the NetworkPolicy");
    assert_eq!(kept.spec, good_policy.spec, "the last good NetworkPolicy changed");
    let kept = deployments.get("deploy-agents").await.expect("get the Deployment");
    assert_eq!(kept.metadata.resource_version, good_deployment.metadata.resource_version, "the Deployment changed");

    // The ConfigMap removed: the documented defaults again, everything Ready.
    cluster.kubectl(&["delete", "configmap", "cdtarget-policy", "-n", PLATFORM_NAMESPACE]).success();
    tenant.until::<CDTarget, _>("Applied=True again", "deploy-agents", target_applied("True", "Applied"), log).await;
    tenant
        .until::<NetworkPolicy, _>("the defaults again", "deploy-agents", opens(DEFAULT_TARGET, ADDED_TARGET), log)
        .await;
    tenant.registration_until("Applied=True again", applied("True", "Succeeded"), log).await;
}
