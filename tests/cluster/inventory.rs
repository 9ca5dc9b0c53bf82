//! A CDTarget that changes shape leaves no orphans, and deletes nothing it does not control
//! (docs/rendering.md, "Children and their inventory"): rendered with KEDA, then without (KEDA
//! reported uninstalled while its CRDs stay, so that objects of its kinds can still exist), its
//! ScaledObject and TriggerAuthentication are deleted, while a tenant's ScaledObject its
//! inventory was tampered to name, and a tenant's ScaledObject named like a CDTarget from before
//! the inventory, are left alone; the KEDA children of a CDTarget from before the inventory that
//! does control them are found by its name and deleted.
//!
//! The reconciles run in the test process, as the controller's ServiceAccount (the RBAC of
//! `deploy/rbac.yaml`; only the policy ConfigMap, which the controller watches, is read as the
//! admin), so that the test decides when KEDA goes: on a control plane of its own,
//! where no controller process reconciles the same CDTargets with KEDA installed.

use std::sync::Arc;

use cdtarget::api::keda::KedaVersion;
use cdtarget::api::keda::{ScaledObject, TriggerAuthentication};
use cdtarget::api::{CDTarget, CDTargetStatus, ChildReference};
use cdtarget::controller::cdtarget::{Context, Keda, reconcile};
use cdtarget::controller::frame::Framed;
use cdtarget::controller::inputs::PolicySource;
use cdtarget::policy::Policy;
use cdtarget::render::{self, Scaling, SecretDigests};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};

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
