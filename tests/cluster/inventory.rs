//! A CDTarget that changes shape leaves no orphans, and deletes nothing it does not control
//! (docs/rendering.md, "Children and their inventory"): rendered with KEDA, then without (KEDA
//! reported uninstalled while its CRDs stay, so that objects of its kinds can still exist), its
//! ScaledObject and TriggerAuthentication are deleted, while a tenant's ScaledObject its
//! inventory was tampered to name, and a tenant's ScaledObject named like a CDTarget from before
//! the inventory, are left alone; the KEDA children of a CDTarget from before the inventory that
//! does control them are found by its name and deleted.
//!
//! A CDTarget that switches `spec.mode` (docs/agents.md, "Switching modes") has the other
//! mode's children deleted through its inventory, keeps the children both modes render, and
//! never deletes or takes over a Deployment with its name that someone else made.
//!
//! The reconciles run in the test process, as the controller's ServiceAccount (the RBAC of
//! `deploy/rbac.yaml`; only the policy ConfigMap, which the controller watches, is read as the
//! admin), so that the test decides when KEDA goes: on a control plane of its own,
//! where no controller process reconciles the same CDTargets with KEDA installed.

use std::sync::Arc;

use cdtarget::api::conditions::{REASON_APPLIED, REASON_NAME_CONFLICT};
use cdtarget::api::keda::KedaVersion;
use cdtarget::api::keda::{ScaledJob, ScaledObject, TriggerAuthentication};
use cdtarget::api::{CDTarget, CDTargetStatus, ChildReference};
use cdtarget::controller::cdtarget::{Context, Keda, reconcile};
use cdtarget::controller::frame::Framed;
use cdtarget::controller::inputs::{KedaSeen, PolicySource};
use cdtarget::policy::Policy;
use cdtarget::render::{self, Scaling, SecretDigests};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};

use crate::common::cluster::{PLATFORM_NAMESPACE, namespace, own_installed_cluster};
use crate::common::control_plane::client_from_kubeconfig;

/// A CDTarget of `ns` named `name`, with the address the installed policy allows.
fn target(ns: &str, name: &str) -> CDTarget {
    let mut target = CDTarget::test().with_name(name).with_ips(["10.20.0.10"]);
    target.metadata.namespace = Some(ns.to_owned());
    target
}

/// A tenant's own ScaledObject named `name` (what cdtarget would render for a CDTarget of that
/// name, without any owner reference).
fn tenants_scaled_object(ns: &str, name: &str) -> ScaledObject {
    let children = render::render(
        &target(ns, name),
        &Policy::default(),
        &SecretDigests::new(),
        Scaling::Keda(KedaVersion::NEWEST_SUPPORTED),
    )
    .expect("renders");
    let mut object = children.scaled_object().expect("a ScaledObject").clone();
    object.metadata.owner_references = None;
    object
}

/// `status.inventory` of the CDTarget as the API server has it.
async fn inventory(targets: &Api<CDTarget>, name: &str) -> Option<Vec<ChildReference>> {
    targets.get(name).await.expect("the CDTarget").status.and_then(|s| s.inventory)
}

#[tokio::test]
async fn keda_children_no_longer_rendered_are_deleted_and_a_tenants_objects_never_are() {
    let test = "keda_children_no_longer_rendered_are_deleted_and_a_tenants_objects_never_are";
    // A control plane of its own: see docs/testing.md ("cases on a control plane of their own").
    let Some(own) = own_installed_cluster(test) else { return };
    let cluster = own.cluster();
    let ns = namespace(cluster, "inventory");
    let token = ["create", "secret", "generic", "azp-token", "-n", &ns, "--from-literal=AZP_TOKEN=not-a-real-pat"];
    cluster.kubectl(&token).success();
    let admin = cluster.admin_client().await;
    let targets: Api<CDTarget> = Api::namespaced(admin.clone(), &ns);
    let scaled_objects: Api<ScaledObject> = Api::namespaced(admin.clone(), &ns);
    let trigger_authentications: Api<TriggerAuthentication> = Api::namespaced(admin.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let post = PostParams::default();

    let controller =
        client_from_kubeconfig(&cluster.service_account_kubeconfig(PLATFORM_NAMESPACE, "cdtarget").await).await;
    let keda = Keda::new(true);
    // The controller reads the policy through its watch; here the admin reads it for each reconcile.
    let policy = PolicySource::Read {
        client: admin.clone(),
        namespace: PLATFORM_NAMESPACE.into(),
        name: "cdtarget-policy".into(),
    };
    let ctx =
        Context::new(controller, PLATFORM_NAMESPACE, "cdtarget-policy").with_keda(keda.clone()).with_policy(policy);
    let ctx = Arc::new(ctx);
    let reconciled = |name: &'static str| {
        let (targets, ctx) = (targets.clone(), ctx.clone());
        async move {
            let target = targets.get(name).await.expect("the CDTarget");
            reconcile(Arc::new(target), ctx).await.unwrap_or_else(|e| panic!("reconciling {name}: {e}"));
        }
    };

    // Rendered with KEDA: four children, all recorded.
    targets.create(&post, &target(&ns, "agents")).await.expect("create the CDTarget");
    reconciled("agents").await;
    assert!(scaled_objects.get_opt("agents").await.expect("get").is_some(), "the ScaledObject child");
    assert!(trigger_authentications.get_opt("agents").await.expect("get").is_some(), "the TriggerAuthentication child");
    let recorded = inventory(&targets, "agents").await.expect("status.inventory");
    let kinds: Vec<&str> = recorded.iter().map(|entry| entry.kind.as_str()).collect();
    assert_eq!(kinds, ["TriggerAuthentication", "NetworkPolicy", "Deployment", "ScaledObject"]);

    // A tenant's own ScaledObject, and the status tampered to record it as a child.
    scaled_objects.create(&post, &tenants_scaled_object(&ns, "intruder")).await.expect("the tenant's ScaledObject");
    let mut tampered = recorded.clone();
    tampered.push(ChildReference {
        api_version: "keda.sh/v1alpha1".into(),
        kind: "ScaledObject".into(),
        name: "intruder".into(),
    });
    let status = serde_json::json!({"status": {"inventory": tampered}});
    targets.patch_status("agents", &PatchParams::default(), &Patch::Merge(&status)).await.expect("tamper");

    // A CDTarget from before the inventory that does own its KEDA children: applied with KEDA,
    // then its inventory removed, as a CDTarget written by a version without one.
    targets.create(&post, &target(&ns, "owned")).await.expect("create the CDTarget");
    reconciled("owned").await;
    assert!(scaled_objects.get_opt("owned").await.expect("get").is_some(), "the ScaledObject child");
    let forget = serde_json::json!({"status": {"inventory": null}});
    targets.patch_status("owned", &PatchParams::default(), &Patch::Merge(&forget)).await.expect("forget");
    assert_eq!(inventory(&targets, "owned").await, None);

    // A CDTarget from before the inventory (none in its status) and a tenant's ScaledObject with
    // its name, made while KEDA is not rendered for.
    keda.set(cdtarget::controller::inputs::KedaSeen::default());
    scaled_objects.create(&post, &tenants_scaled_object(&ns, "legacy")).await.expect("the tenant's ScaledObject");
    targets.create(&post, &target(&ns, "legacy")).await.expect("create the CDTarget");
    let legacy = targets.get("legacy").await.expect("the CDTarget");
    assert_eq!(legacy.status.as_ref().and_then(|s: &CDTargetStatus| s.inventory.clone()), None);

    // KEDA gone: the children of its kinds are deleted, the tenant's objects are not.
    reconciled("agents").await;
    reconciled("legacy").await;
    assert!(scaled_objects.get_opt("agents").await.expect("get").is_none(), "the ScaledObject child is deleted");
    assert!(trigger_authentications.get_opt("agents").await.expect("get").is_none(), "the TriggerAuthentication too");
    assert!(deployments.get_opt("agents").await.expect("get").is_some(), "the Deployment is still rendered");
    assert!(scaled_objects.get_opt("intruder").await.expect("get").is_some(), "a tampered entry deletes nothing");
    assert!(scaled_objects.get_opt("legacy").await.expect("get").is_some(), "a same-named foreign object stays");
    reconciled("owned").await;
    assert!(scaled_objects.get_opt("owned").await.expect("get").is_none(), "found by name, owned: deleted");
    assert!(trigger_authentications.get_opt("owned").await.expect("get").is_none(), "the TriggerAuthentication too");
    let kinds = |entries: Option<Vec<ChildReference>>| -> Vec<String> {
        entries.expect("status.inventory").into_iter().map(|entry| format!("{} {}", entry.kind, entry.name)).collect()
    };
    assert_eq!(kinds(inventory(&targets, "agents").await), ["NetworkPolicy agents", "Deployment agents"]);
    assert_eq!(kinds(inventory(&targets, "legacy").await), ["NetworkPolicy legacy", "Deployment legacy"]);
    assert_eq!(kinds(inventory(&targets, "owned").await), ["NetworkPolicy owned", "Deployment owned"]);

    // Nothing else was deleted: once more, nothing to delete.
    reconciled("agents").await;
    assert!(scaled_objects.get_opt("intruder").await.expect("get").is_some());
}

/// The CDTarget's condition `type_` as the API server has it.
async fn condition(targets: &Api<CDTarget>, name: &str, type_: &str) -> Condition {
    let target = targets.get(name).await.expect("the CDTarget");
    let conditions = target.status.map(|s| s.conditions).unwrap_or_default();
    conditions.into_iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition"))
}

/// `Kind name` of each entry of the CDTarget's `status.inventory`.
async fn recorded_children(targets: &Api<CDTarget>, name: &str) -> Vec<String> {
    let entries = inventory(targets, name).await.expect("status.inventory");
    entries.into_iter().map(|entry| format!("{} {}", entry.kind, entry.name)).collect()
}

/// The uid of the object `name` of `api`, which must exist.
async fn uid<K>(api: &Api<K>, name: &str) -> String
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.get(name).await.unwrap_or_else(|e| panic!("{name}: {e}")).uid().expect("a uid")
}

/// Whether `object`'s controller owner reference is the CDTarget with `owner_uid`.
fn controlled_by(object: &impl Resource, owner_uid: &str) -> bool {
    object.meta().owner_references.iter().flatten().any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

#[tokio::test]
async fn switching_modes_deletes_the_other_modes_children_and_never_a_deployment_someone_else_made() {
    let test = "switching_modes_deletes_the_other_modes_children_and_never_a_deployment_someone_else_made";
    // A control plane of its own, as the test above: the shared controller would reconcile the
    // same CDTargets between the steps.
    let Some(own) = own_installed_cluster(test) else { return };
    let cluster = own.cluster();
    let ns = namespace(cluster, "switch");
    let token = ["create", "secret", "generic", "azp-token", "-n", &ns, "--from-literal=AZP_TOKEN=not-a-real-pat"];
    cluster.kubectl(&token).success();
    let admin = cluster.admin_client().await;
    let targets: Api<CDTarget> = Api::namespaced(admin.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let scaled_objects: Api<ScaledObject> = Api::namespaced(admin.clone(), &ns);
    let scaled_jobs: Api<ScaledJob> = Api::namespaced(admin.clone(), &ns);
    let trigger_authentications: Api<TriggerAuthentication> = Api::namespaced(admin.clone(), &ns);
    let network_policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), &ns);
    let post = PostParams::default();

    let controller =
        client_from_kubeconfig(&cluster.service_account_kubeconfig(PLATFORM_NAMESPACE, "cdtarget").await).await;
    let keda = Keda::discovered(KedaSeen { installed: true, version: Some(KedaVersion::NEWEST_SUPPORTED) });
    let policy = PolicySource::Read {
        client: admin.clone(),
        namespace: PLATFORM_NAMESPACE.into(),
        name: "cdtarget-policy".into(),
    };
    let ctx = Context::new(controller, PLATFORM_NAMESPACE, "cdtarget-policy").with_keda(keda).with_policy(policy);
    let ctx = Arc::new(ctx);
    let reconciled = || {
        let (targets, ctx) = (targets.clone(), ctx.clone());
        async move {
            let target = targets.get("agents").await.expect("the CDTarget");
            reconcile(Arc::new(target), ctx).await.unwrap_or_else(|e| panic!("reconciling agents: {e}"));
        }
    };
    let mode = |mode: &'static str| {
        let targets = targets.clone();
        async move {
            let patch = serde_json::json!({"spec": {"mode": mode}});
            targets.patch("agents", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("spec.mode");
        }
    };

    // Deployment mode: four children.
    let created = targets.create(&post, &target(&ns, "agents")).await.expect("create the CDTarget");
    let owner = created.uid().expect("the CDTarget's uid");
    reconciled().await;
    let deployment = uid(&deployments, "agents").await;
    let scaled_object = uid(&scaled_objects, "agents").await;
    let trigger_authentication = uid(&trigger_authentications, "agents").await;
    let network_policy = uid(&network_policies, "agents").await;
    let deployment_mode =
        ["TriggerAuthentication agents", "NetworkPolicy agents", "Deployment agents", "ScaledObject agents"];
    assert_eq!(recorded_children(&targets, "agents").await, deployment_mode);

    // Job mode: the ScaledJob, the Deployment and ScaledObject deleted, the two children both
    // modes render kept as they were.
    mode("Job").await;
    reconciled().await;
    let scaled_job = scaled_jobs.get("agents").await.expect("the ScaledJob child");
    assert!(controlled_by(&scaled_job, &owner), "{:?}", scaled_job.metadata.owner_references);
    assert!(deployments.get_opt("agents").await.expect("get").is_none(), "the Deployment is deleted");
    assert!(scaled_objects.get_opt("agents").await.expect("get").is_none(), "the ScaledObject is deleted");
    assert_eq!(uid(&trigger_authentications, "agents").await, trigger_authentication, "not recreated");
    assert_eq!(uid(&network_policies, "agents").await, network_policy, "not recreated");
    let job_mode = ["TriggerAuthentication agents", "NetworkPolicy agents", "ScaledJob agents"];
    assert_eq!(recorded_children(&targets, "agents").await, job_mode);
    let applied = condition(&targets, "agents", "Applied").await;
    assert_eq!((applied.status.as_str(), applied.reason.as_str()), ("True", REASON_APPLIED), "{applied:?}");

    // Back to Deployment mode: the ScaledJob deleted, a new Deployment and ScaledObject.
    mode("Deployment").await;
    reconciled().await;
    assert!(scaled_jobs.get_opt("agents").await.expect("get").is_none(), "the ScaledJob is deleted");
    let again = deployments.get("agents").await.expect("the Deployment child again");
    assert!(controlled_by(&again, &owner) && again.uid() != Some(deployment), "a new Deployment child");
    let again = scaled_objects.get("agents").await.expect("the ScaledObject child again");
    assert!(controlled_by(&again, &owner) && again.uid() != Some(scaled_object), "a new ScaledObject child");
    assert_eq!(uid(&trigger_authentications, "agents").await, trigger_authentication, "not recreated");
    assert_eq!(uid(&network_policies, "agents").await, network_policy, "not recreated");
    assert_eq!(recorded_children(&targets, "agents").await, deployment_mode);

    // Job mode again, then the admin makes a Deployment of the CDTarget's name, without owner.
    mode("Job").await;
    reconciled().await;
    assert!(deployments.get_opt("agents").await.expect("get").is_none(), "the Deployment is deleted");
    deployments.create(&post, &admins_deployment(&ns)).await.expect("the admin's Deployment");
    // Even with the status tampered to name it as a child, Job mode deletes nothing it does not
    // control.
    let mut tampered = inventory(&targets, "agents").await.expect("status.inventory");
    tampered.push(ChildReference { api_version: "apps/v1".into(), kind: "Deployment".into(), name: "agents".into() });
    let status = serde_json::json!({"status": {"inventory": tampered}});
    targets.patch_status("agents", &PatchParams::default(), &Patch::Merge(&status)).await.expect("tamper");
    let before = deployments.get("agents").await.expect("the admin's Deployment");
    reconciled().await;
    let after = deployments.get("agents").await.expect("the admin's Deployment is left alone");
    assert_eq!((after.uid(), after.resource_version()), (before.uid(), before.resource_version()));
    assert_eq!(recorded_children(&targets, "agents").await, job_mode);

    // The switch to Deployment mode would take it over: NameConflict, nothing written, nothing
    // deleted (the ScaledJob stays), the inventory as it was.
    let scaled_job = uid(&scaled_jobs, "agents").await;
    mode("Deployment").await;
    reconciled().await;
    let after = deployments.get("agents").await.expect("the admin's Deployment is left alone");
    assert_eq!((after.uid(), after.resource_version()), (before.uid(), before.resource_version()));
    assert_eq!(uid(&scaled_jobs, "agents").await, scaled_job, "nothing deleted");
    assert!(scaled_objects.get_opt("agents").await.expect("get").is_none(), "nothing written");
    assert_eq!(recorded_children(&targets, "agents").await, job_mode);
    let stalled = condition(&targets, "agents", "Ready").await;
    assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("False", REASON_NAME_CONFLICT), "{stalled:?}");
    let no_owner =
        format!("Deployment {ns}/agents already exists and is not a child of this CDTarget: it has no owner");
    assert!(stalled.message.starts_with(&no_owner), "{}", stalled.message);
    let applied = condition(&targets, "agents", "Applied").await;
    assert_eq!((applied.status.as_str(), applied.reason.as_str()), ("False", REASON_NAME_CONFLICT), "{applied:?}");

    // Another owner (another CDTarget controls it): the same.
    let other = targets.create(&post, &target(&ns, "other")).await.expect("another CDTarget");
    let other_uid = other.uid().expect("its uid");
    let owned = serde_json::json!({"metadata": {"ownerReferences": [{
        "apiVersion": "cdtarget.io/v1alpha1", "kind": "CDTarget", "name": "other", "uid": other_uid, "controller": true
    }]}});
    let before = deployments.patch("agents", &PatchParams::default(), &Patch::Merge(&owned)).await.expect("owned");
    reconciled().await;
    let after = deployments.get("agents").await.expect("the other CDTarget's Deployment is left alone");
    assert_eq!((after.uid(), after.resource_version()), (before.uid(), before.resource_version()));
    assert_eq!(uid(&scaled_jobs, "agents").await, scaled_job, "nothing deleted");
    let stalled = condition(&targets, "agents", "Ready").await;
    assert_eq!(stalled.reason, REASON_NAME_CONFLICT, "{stalled:?}");
    let controlled = format!("it is controlled by CDTarget other (uid {other_uid})");
    assert!(stalled.message.contains(&controlled), "{}", stalled.message);

    // Once the admin removes it, the switch completes.
    deployments.delete("agents", &DeleteParams::background()).await.expect("delete the admin's Deployment");
    reconciled().await;
    let deployment = deployments.get("agents").await.expect("the Deployment child");
    assert!(controlled_by(&deployment, &owner), "{:?}", deployment.metadata.owner_references);
    assert!(scaled_jobs.get_opt("agents").await.expect("get").is_none(), "the ScaledJob is deleted");
    assert_eq!(recorded_children(&targets, "agents").await, deployment_mode);
    let applied = condition(&targets, "agents", "Applied").await;
    assert_eq!((applied.status.as_str(), applied.reason.as_str()), ("True", REASON_APPLIED), "{applied:?}");
}

/// A Deployment named `agents` made by the admin, without owner: what cdtarget renders for the
/// CDTarget `agents`, its owner reference removed.
fn admins_deployment(ns: &str) -> Deployment {
    let children = render::render(
        &target(ns, "agents"),
        &Policy::default(),
        &SecretDigests::new(),
        Scaling::Keda(KedaVersion::NEWEST_SUPPORTED),
    )
    .expect("renders");
    let mut deployment = children.deployment().expect("a Deployment").clone();
    deployment.metadata.owner_references = None;
    deployment
}
