//! A hostile tenant names a CDTarget like an object it did not create, hoping the controller
//! force-applies its "child" over it and the garbage collector later deletes it. Children are
//! created when absent and updated only when this CDTarget controls them (owner uid); anything
//! else is a `NameConflict` and nothing at all is written.

use std::collections::BTreeMap;

use cdtarget::api::CDTarget;
use cdtarget::api::conditions::REASON_NAME_CONFLICT;
use cdtarget::api::conditions::is_true;
use cdtarget::api::conditions::{READY, STALLED};
use cdtarget::api::keda::{ScaledObject, TriggerAuthentication};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::api::PostParams;

use crate::support::{Cluster, NAME, TOKEN, cluster_with_target, target_named};

const PLATFORM_POLICY: &str = "default-deny-all";

/// The platform's deny-all policy, as a cluster admin creates it (no owner).
async fn platform_policy(cluster: &Cluster) -> Vec<u8> {
    let policy = NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(PLATFORM_POLICY.into()),
            labels: Some(BTreeMap::from([("platform.example.com/guardrail".to_owned(), "true".to_owned())])),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ..NetworkPolicySpec::default()
        }),
    };
    cluster.api::<NetworkPolicy>().create(&PostParams::default(), &policy).await.expect("create the platform policy");
    stored_policy(cluster).await.expect("stored")
}

/// The platform policy as stored, byte for byte (resourceVersion included: any write shows).
async fn stored_policy(cluster: &Cluster) -> Option<Vec<u8>> {
    let policy = cluster.api::<NetworkPolicy>().get_opt(PLATFORM_POLICY).await.unwrap()?;
    Some(serde_json::to_vec(&policy).unwrap())
}

fn stalled_message(target: &CDTarget) -> (String, String) {
    let status = target.status.as_ref().expect("status written");
    assert!(is_true(&status.conditions, STALLED), "{status:#?}");
    let ready = status.conditions.iter().find(|c| c.type_ == READY).expect("Ready");
    (ready.reason.clone(), ready.message.clone())
}

async fn children_named(cluster: &Cluster, name: &str) -> Vec<&'static str> {
    let mut present = Vec::new();
    if cluster.api::<NetworkPolicy>().get_opt(name).await.unwrap().is_some() {
        present.push("NetworkPolicy");
    }
    if cluster.api::<Deployment>().get_opt(name).await.unwrap().is_some() {
        present.push("Deployment");
    }
    if cluster.api::<ScaledObject>().get_opt(name).await.unwrap().is_some() {
        present.push("ScaledObject");
    }
    if cluster.api::<TriggerAuthentication>().get_opt(name).await.unwrap().is_some() {
        present.push("TriggerAuthentication");
    }
    present
}

#[tokio::test]
async fn cdtarget_named_like_a_platform_network_policy_is_a_name_conflict_and_writes_nothing() {
    let cluster = Cluster::new(true).await;
    cluster.put_secret(TOKEN, &[("AZP_TOKEN", "pat-1")]).await;
    let before = platform_policy(&cluster).await;
    cluster.create_target(&target_named(PLATFORM_POLICY)).await;
    cluster.clear_writes();

    cluster.reconcile_named(PLATFORM_POLICY, cluster.context()).await;

    let target = cluster.api::<CDTarget>().get(PLATFORM_POLICY).await.unwrap();
    let (reason, message) = stalled_message(&target);
    assert_eq!(reason, REASON_NAME_CONFLICT);
    assert!(message.starts_with("NetworkPolicy team-a/default-deny-all already exists"), "{message}");
    assert!(message.contains("it has no owner") && message.contains("rename the CDTarget"), "{message}");
    assert_eq!(stored_policy(&cluster).await, Some(before), "the platform policy is untouched, byte for byte");
    let policy = cluster.api::<NetworkPolicy>().get(PLATFORM_POLICY).await.unwrap();
    assert_eq!(policy.metadata.owner_references, None, "no owner reference was added");
    // All or nothing: not even the children without a conflict (ordered before and after it).
    assert_eq!(children_named(&cluster, PLATFORM_POLICY).await, ["NetworkPolicy"]);
    assert_eq!(cluster.writes(), ["status CDTarget team-a/default-deny-all"], "only the status is written");
}

#[tokio::test]
async fn deleting_the_conflicting_cdtarget_leaves_the_platform_object_while_an_honest_ones_children_go() {
    let cluster = Cluster::new(true).await;
    cluster.put_secret(TOKEN, &[("AZP_TOKEN", "pat-1")]).await;
    let before = platform_policy(&cluster).await;
    cluster.create_target(&target_named(PLATFORM_POLICY)).await;
    cluster.create_target(&target_named(NAME)).await;
    cluster.reconcile_named(PLATFORM_POLICY, cluster.context()).await;
    cluster.reconcile_named(NAME, cluster.context()).await;
    assert_eq!(children_named(&cluster, NAME).await.len(), 4, "the honest CDTarget got its children");

    // kube-fake-client cascades deletions along owner references, as the garbage collector does.
    cluster.delete_target(PLATFORM_POLICY).await;
    cluster.delete_target(NAME).await;

    assert_eq!(stored_policy(&cluster).await, Some(before), "the platform policy survives its namesake's deletion");
    assert_eq!(children_named(&cluster, NAME).await, Vec::<&str>::new(), "the honest CDTarget's children went with it");
}

#[tokio::test]
async fn an_object_controlled_by_another_cdtarget_is_a_name_conflict_and_is_not_taken_over() {
    let cluster = cluster_with_target(true).await;
    // Another CDTarget's child (or a copy of one) already holds the name.
    let foreign = Deployment {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "cdtarget.io/v1alpha1".into(),
                kind: "CDTarget".into(),
                name: "other".into(),
                uid: "uid-of-another-cdtarget".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec::default()),
        status: None,
    };
    cluster.api::<Deployment>().create(&PostParams::default(), &foreign).await.unwrap();
    let before = serde_json::to_vec(&cluster.api::<Deployment>().get(NAME).await.unwrap()).unwrap();
    cluster.clear_writes();

    cluster.reconcile().await;

    let (reason, message) = stalled_message(&cluster.target().await);
    assert_eq!(reason, REASON_NAME_CONFLICT);
    assert!(
        message.contains("Deployment team-a/agents already exists and is not a child of this CDTarget: it is controlled by CDTarget other (uid uid-of-another-cdtarget)"),
        "{message}"
    );
    assert_eq!(serde_json::to_vec(&cluster.api::<Deployment>().get(NAME).await.unwrap()).unwrap(), before);
    assert_eq!(children_named(&cluster, NAME).await, ["Deployment"], "no other child was created");
    assert_eq!(cluster.writes(), ["status CDTarget team-a/agents"]);
}

#[tokio::test]
async fn a_child_we_own_is_still_updated_conditionally_and_as_the_controller() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    let managers: Vec<String> =
        cluster.field_managers.lock().unwrap().iter().filter(|m| !m.starts_with("Secret ")).cloned().collect();
    assert_eq!(managers.len(), 4, "{managers:?}");
    assert!(managers.iter().all(|m| m.ends_with(" cdtarget")), "children are the controller's: {managers:?}");
    // First writes create: no resourceVersion precondition can be given.
    let children =
        cluster.patches.lock().unwrap().iter().filter(|p| p["kind"] != "Secret").cloned().collect::<Vec<_>>();
    assert!(children.iter().all(|p| p.pointer("/metadata/resourceVersion").is_none()), "{children:#?}");

    // Someone edits the owned Deployment: it is repaired, on condition that it is still the
    // version whose owner was checked.
    let mut deployment = cluster.api::<Deployment>().get(NAME).await.unwrap();
    deployment.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image = Some("evil:1".into());
    deployment.metadata.managed_fields = None;
    let edited = cluster.api::<Deployment>().replace(NAME, &PostParams::default(), &deployment).await.unwrap();
    cluster.patches.lock().unwrap().clear();
    cluster.clear_writes();

    cluster.reconcile().await;

    assert_eq!(cluster.writes(), ["patch Deployment team-a/agents"]);
    let patches = cluster.patches.lock().unwrap().clone();
    assert_eq!(
        patches[0].pointer("/metadata/resourceVersion").and_then(|v| v.as_str()),
        edited.resource_version().as_deref(),
        "the update carries the version read"
    );
    let repaired = cluster.api::<Deployment>().get(NAME).await.unwrap();
    let image = repaired.spec.unwrap().template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("ghcr.io/acme/azp-agent:1"));
    // The children are in place; Ready waits for the repaired agents to roll out.
    assert!(is_true(&cluster.target().await.status.unwrap().conditions, "Applied"));
}
