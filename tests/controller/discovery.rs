//! Scope and plural by the cluster's API discovery: the TenantRepository reconciler against the
//! fake API server, whose discovery documents the bridge serves (tests/common/api_bridge.rs),
//! and the discovery cache on its own. A hostile tenant pushes kinds the offline table does not
//! know; the cluster's answer decides.

use std::time::Duration;

use cdtarget::api::conditions::STALLED;
use cdtarget::api::conditions::is_true;
use cdtarget::api::conditions::{APPLIED, REASON_SUCCEEDED, REASON_VALIDATION_FAILED};
use cdtarget::apply::discovery::{Discovery, Lookup};
use kube::CustomResource;
use kube::api::Api;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::api_bridge::{ServedKind, WireRequest};
use crate::tenant_repository::{Fixture, PLATFORM, REPO, TENANT, condition, config_map_yaml};

/// A custom resource whose plural is not what a guess from the kind gives (`octopuses`).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(group = "zoo.example.com", version = "v1", kind = "Octopus", plural = "octopodes", namespaced)]
pub struct OctopusSpec {
    arms: u32,
}

const OCTOPUS: &str = "apiVersion: zoo.example.com/v1\nkind: Octopus\nmetadata:\n  name: inky\nspec:\n  arms: 8\n";

fn octopus_served() -> ServedKind {
    ServedKind::new("zoo.example.com", "v1", "Octopus", "octopodes", true)
}

/// Requests for discovery documents among `wire`.
fn discovery_reads(wire: &[WireRequest]) -> Vec<String> {
    let is_discovery = |path: &str| {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        matches!(segments.as_slice(), ["api"] | ["apis"] | ["api", _] | ["apis", _, _])
    };
    wire.iter().filter(|r| r.method == "GET" && is_discovery(&r.path)).map(|r| r.path.clone()).collect()
}

/// The tenant writes of the last reconcile (everything but the registration's status).
fn tenant_writes(fixture: &Fixture) -> Vec<String> {
    let status = format!("status {PLATFORM}/{REPO}");
    fixture.writes().into_iter().filter(|w| *w != status).collect()
}

#[tokio::test]
async fn an_unknown_cluster_scoped_crd_kind_is_refused_by_discovery_and_nothing_is_applied() {
    let fixture = Fixture::new().await;
    fixture.bridge.serve_kind(ServedKind::new("zoo.example.com", "v1", "Habitat", "habitats", false));
    let habitat = "apiVersion: zoo.example.com/v1\nkind: Habitat\nmetadata:\n  name: reef\n";
    fixture.repo.commit_and_push(
        &[("deploy/ok.yaml", config_map_yaml("ok", "1")), ("deploy/habitat.yaml", habitat.into())],
        "a cluster-wide object",
    );
    fixture.register(|repo| repo).await;
    fixture.reconcile().await;

    assert_eq!(tenant_writes(&fixture), Vec::<String>::new(), "nothing is applied, not even the valid ConfigMap");
    let wire = fixture.bridge.requests();
    assert!(wire.iter().all(|r| r.impersonate_user.is_none()), "nothing was sent as the tenant: {wire:#?}");
    let status = fixture.status().await;
    let applied = condition(&status, APPLIED);
    assert_eq!((applied.status.as_str(), applied.reason.as_str()), ("False", REASON_VALIDATION_FAILED));
    assert!(
        applied
            .message
            .contains("habitat.yaml:1: kind: Habitat is cluster-scoped (the cluster's API discovery says so)"),
        "{}",
        applied.message
    );
    assert!(is_true(&status.conditions, STALLED));
}

#[tokio::test]
async fn kinds_and_versions_the_cluster_does_not_serve_are_refused_naming_file_and_field() {
    let fixture = Fixture::new().await;
    fixture.bridge.serve_kind(octopus_served());
    let unicorn = "apiVersion: zoo.example.com/v1\nkind: Unicorn\nmetadata:\n  name: sparkle\n";
    let future = "apiVersion: zoo.example.com/v9\nkind: Octopus\nmetadata:\n  name: later\n";
    fixture.repo.commit_and_push(
        &[("deploy/unicorn.yaml", unicorn), ("deploy/future.yaml", future)],
        "kinds that do not exist",
    );
    fixture.register(|repo| repo).await;
    fixture.reconcile().await;

    assert_eq!(tenant_writes(&fixture), Vec::<String>::new());
    let message = condition(&fixture.status().await, APPLIED).message.clone();
    assert!(
        message.contains("unicorn.yaml:1: kind: kind Unicorn is not served by the cluster in `zoo.example.com/v1`"),
        "{message}"
    );
    assert!(
        message.contains("future.yaml:1: apiVersion: `zoo.example.com/v9` is not served by the cluster"),
        "{message}"
    );
}

#[tokio::test]
async fn an_irregular_plural_is_applied_to_the_url_discovery_names() {
    let fixture = Fixture::with_fake(|builder| builder.with_resource::<Octopus>()).await;
    fixture.bridge.serve_kind(octopus_served());
    fixture.repo.commit_and_push(&[("deploy/octopus.yaml", OCTOPUS)], "an octopus");
    fixture.register(|repo| repo).await;
    fixture.reconcile().await;

    let status = fixture.status().await;
    assert_eq!(condition(&status, APPLIED).reason, REASON_SUCCEEDED, "{:?}", condition(&status, APPLIED).message);
    let patches: Vec<String> =
        fixture.bridge.requests().into_iter().filter(|r| r.method == "PATCH").map(|r| r.path).collect();
    let path = format!("/apis/zoo.example.com/v1/namespaces/{TENANT}/octopodes/inky?");
    assert!(patches.iter().any(|p| p.starts_with(&path)), "applied to {path}: {patches:#?}");
    let octopus = Api::<Octopus>::namespaced(fixture.client.clone(), TENANT).get("inky").await.expect("applied");
    assert_eq!(octopus.spec.arms, 8);
}

#[tokio::test]
async fn a_crd_installed_after_a_refusal_is_found_on_the_next_reconcile_without_a_restart() {
    let fixture = Fixture::with_fake(|builder| builder.with_resource::<Octopus>()).await;
    fixture.repo.commit_and_push(&[("deploy/octopus.yaml", OCTOPUS)], "an octopus before its CRD");
    fixture.register(|repo| repo).await;
    fixture.reconcile().await;
    let refused = condition(&fixture.status().await, APPLIED).clone();
    assert_eq!(refused.reason, REASON_VALIDATION_FAILED);
    assert!(refused.message.contains("`zoo.example.com/v1` is not served"), "{}", refused.message);

    // The platform team installs the CRD; the same controller (same cache) reconciles again.
    fixture.bridge.serve_kind(octopus_served());
    fixture.reconcile().await;
    assert_eq!(condition(&fixture.status().await, APPLIED).reason, REASON_SUCCEEDED);
    assert_eq!(tenant_writes(&fixture), [format!("patch Octopus {TENANT}/inky")]);
}

// === the cache ===

#[tokio::test]
async fn discovery_is_read_once_and_then_answered_from_the_cache() {
    let fixture = Fixture::new().await;
    let discovery = Discovery::new(fixture.client.clone());
    fixture.bridge.clear();
    let first = discovery.lookup("v1", "ConfigMap").await.unwrap();
    let Lookup::Served { resource, namespaced: true } = first else { panic!("ConfigMap is served: {first:?}") };
    assert_eq!(resource.plural, "configmaps");
    assert_eq!(discovery_reads(&fixture.bridge.requests()), ["/api", "/apis", "/api/v1"]);

    fixture.bridge.clear();
    for _ in 0..3 {
        assert!(matches!(discovery.lookup("v1", "Secret").await.unwrap(), Lookup::Served { namespaced: true, .. }));
        assert!(matches!(discovery.lookup("v1", "Namespace").await.unwrap(), Lookup::Served { namespaced: false, .. }));
    }
    assert_eq!(fixture.bridge.requests(), Vec::<WireRequest>::new(), "hits send nothing");
}

#[tokio::test]
async fn a_miss_reads_discovery_again_at_most_once_per_min_refresh() {
    let fixture = Fixture::new().await;
    fixture.bridge.serve_kind(ServedKind::new("zoo.example.com", "v1", "Habitat", "habitats", false));
    let throttled = Discovery::new(fixture.client.clone()).with_min_refresh(Duration::from_secs(3600));
    assert_eq!(throttled.lookup("zoo.example.com/v1", "Octopus").await.unwrap(), Lookup::KindNotServed);
    assert_eq!(throttled.lookup("zoo.example.com/v2", "Octopus").await.unwrap(), Lookup::VersionNotServed);

    // A tenant repeating kinds that do not exist costs the API server nothing more...
    fixture.bridge.clear();
    for _ in 0..5 {
        assert_eq!(throttled.lookup("zoo.example.com/v1", "Octopus").await.unwrap(), Lookup::KindNotServed);
        assert_eq!(throttled.lookup("zoo.example.com/v2", "Octopus").await.unwrap(), Lookup::VersionNotServed);
    }
    assert_eq!(discovery_reads(&fixture.bridge.requests()), Vec::<String>::new());

    // ...while past min_refresh a miss reads the documents it missed in, once.
    let eager = Discovery::new(fixture.client.clone()).with_min_refresh(Duration::ZERO);
    assert_eq!(eager.lookup("zoo.example.com/v1", "Octopus").await.unwrap(), Lookup::KindNotServed);
    fixture.bridge.serve_kind(octopus_served());
    fixture.bridge.clear();
    assert!(matches!(eager.lookup("zoo.example.com/v1", "Octopus").await.unwrap(), Lookup::Served { .. }));
    assert_eq!(discovery_reads(&fixture.bridge.requests()), ["/apis/zoo.example.com/v1"]);
}

#[tokio::test]
async fn deletion_of_an_object_recorded_under_a_removed_version_goes_through_a_served_one() {
    let fixture = Fixture::new().await;
    let discovery = Discovery::new(fixture.client.clone());
    // autoscaling/v2beta2 is gone from the cluster; v1 and v2 serve the same objects.
    let resource = discovery.resource_for_deletion("autoscaling/v2beta2", "HorizontalPodAutoscaler").await.unwrap();
    let resource = resource.expect("another version serves the kind");
    assert_eq!((resource.group.as_str(), resource.plural.as_str()), ("autoscaling", "horizontalpodautoscalers"));
    assert_ne!(resource.version, "v2beta2");
    // A kind no version serves any more has no object left to delete, nor has a kind that is
    // cluster-scoped any object in a tenant namespace.
    assert_eq!(discovery.resource_for_deletion("zoo.example.com/v1", "Octopus").await.unwrap(), None);
    assert_eq!(discovery.resource_for_deletion("v1", "Namespace").await.unwrap(), None);
}
