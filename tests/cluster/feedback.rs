//! What a tenant sees of its pushes in its own namespace (issue #14, point 1): the registration's
//! `SyncStatus` and the Warning Events regarding it, read as the tenant's people (a group bound
//! by `examples/platform/tenant-rbac.yaml`), on the real control plane with the shared
//! controller.

use cdtarget::api::{CDTarget, SyncStatus};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, CONVERGE, PLATFORM_NAMESPACE, Tenant, drift_pipeline_settings, exists, gone,
    installed_cluster, namespace, settings_as_in_git, shared_controller,
};

/// A second tenant ConfigMap, removed from Git later (pruned).
const OLD_SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: old-settings\ndata:\n  A: \"1\"\n";

/// `kubectl` as one of the tenant's people: user `alice`, member of the group named after the
/// namespace (the example binds group `team-payments`; the kit onboards it under the namespace's
/// name).
fn as_person(tenant: &Tenant) -> [String; 2] {
    [format!("--as=alice@{}", tenant.ns), format!("--as-group={}", tenant.ns)]
}

fn kubectl_as_person(tenant: &Tenant, args: &[&str]) -> crate::common::control_plane::Kubectl {
    let person = as_person(tenant);
    let args: Vec<&str> = args.iter().copied().chain(person.iter().map(String::as_str)).collect();
    tenant.cluster.kubectl(&args)
}

/// A condition on the SyncStatus's status.
fn sync_status(check: impl Fn(&cdtarget::api::SyncStatusStatus) -> bool) -> impl Fn(Option<&SyncStatus>) -> bool {
    move |object| object.and_then(|o| o.status.as_ref()).is_some_and(&check)
}

fn ready_is(status: &cdtarget::api::SyncStatusStatus, value: &str) -> bool {
    status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == value)
}

/// Waits (watching, at most [`CONVERGE`]) for an Event in the tenant namespace with `reason`
/// whose note mentions `mentions`, and returns it.
async fn event_until(tenant: &Tenant, reason: &str, mentions: &str, log: &std::path::Path) -> Event {
    let api: Api<Event> = Api::namespaced(tenant.cluster.admin_client().await, &tenant.ns);
    let mut events = watcher(api, watcher::Config::default())
        .applied_objects()
        .try_filter(|e| {
            futures::future::ready(
                e.reason.as_deref() == Some(reason) && e.note.as_deref().is_some_and(|n| n.contains(mentions)),
            )
        })
        .boxed();
    let found = events.try_next();
    match tokio::time::timeout(CONVERGE, found).await {
        Ok(Ok(Some(event))) => event,
        other => panic!("no {reason} Event naming {mentions:?} ({other:?}){}", tenant.diagnostics(log)),
    }
}

fn assert_regards_the_sync_status(event: &Event, tenant: &Tenant) {
    let regarding = event.regarding.as_ref().expect("regarding");
    assert_eq!(
        (regarding.kind.as_deref(), regarding.name.as_deref(), regarding.namespace.as_deref()),
        (Some("SyncStatus"), Some(tenant.ns.as_str()), Some(tenant.ns.as_str())),
        "{event:#?}"
    );
    assert_eq!(event.type_.as_deref(), Some("Warning"), "{event:#?}");
}

#[tokio::test]
async fn a_tenant_reads_in_its_own_namespace_what_happened_to_every_push() {
    let test = "a_tenant_reads_in_its_own_namespace_what_happened_to_every_push";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let files =
        [("deploy/settings.yaml", CONFIG_MAP), ("deploy/old.yaml", OLD_SETTINGS), ("deploy/agents.yaml", CDTARGET)];
    let tenant = Tenant::onboard(cluster, &files);
    let log = shared_controller(cluster).await;
    let first = tenant.repo.head("main").expect("the first commit");

    // A good push: Ready, the revision, and what was applied.
    let applied = {
        let first = first.clone();
        sync_status(move |s| ready_is(s, "True") && s.last_applied_revision.as_deref() == Some(first.as_str()))
    };
    tenant.until::<SyncStatus, _>("SyncStatus Ready=True at the first revision", &tenant.ns, applied, log).await;
    let statuses: Api<SyncStatus> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let status = statuses.get(&tenant.ns).await.expect("the SyncStatus").status.expect("its status");
    let sync = status.last_sync.expect("what the last change did");
    let applied: Vec<String> = sync.applied.iter().map(|e| format!("{} {}", e.kind, e.name)).collect();
    for expected in ["ConfigMap pipeline-settings", "ConfigMap old-settings", "CDTarget deploy-agents"] {
        assert!(applied.iter().any(|a| a == expected), "{expected} not in {applied:?}");
    }
    assert_eq!(status.inventory.len(), 3, "{:?}", status.inventory);

    // The columns a tenant's person sees.
    let table = kubectl_as_person(&tenant, &["get", "syncstatus", "-n", &tenant.ns]).success();
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "REVISION", "MESSAGE", "AGE"], "{table}");
    assert!(table.contains(&first) && table.contains("True") && table.contains("applied 3 objects"), "{table}");

    // A refused push: two problems in the CDTarget; nothing of it is applied, what ran before
    // still runs, and the SyncStatus lists every located problem.
    let broken = CDTARGET.replace("10.20.0.10", "not-an-ip").replace("https://dev.azure.com/acme", "ftp://acme");
    let refused = tenant.repo.commit_and_push(&[("deploy/agents.yaml", broken)], "broken");
    tenant.request_reconcile("refused");
    let listed = {
        let refused = refused.clone();
        sync_status(move |s| {
            ready_is(s, "False")
                && s.last_fetched_revision.as_deref() == Some(refused.as_str())
                && s.problems.len() >= 2
        })
    };
    tenant.until::<SyncStatus, _>("SyncStatus Ready=False listing the problems", &tenant.ns, listed, log).await;
    let status = statuses.get(&tenant.ns).await.expect("the SyncStatus").status.expect("its status");
    assert_eq!(status.last_applied_revision.as_deref(), Some(first.as_str()), "the last applied revision stays");
    let fields: Vec<&str> = status.problems.iter().map(|p| p.field.as_str()).collect();
    assert!(fields.contains(&"spec.ip[0]") && fields.iter().any(|f| f.starts_with("spec.config.url")), "{fields:?}");
    for problem in &status.problems {
        assert!(problem.file.as_deref().is_some_and(|f| f.ends_with("agents.yaml")), "{problem:?}");
        assert_eq!((problem.document, problem.line), (Some(1), Some(1)), "{problem:?}");
    }
    let event = event_until(&tenant, "ValidationFailed", &refused[..12], log).await;
    assert_regards_the_sync_status(&event, &tenant);
    assert!(event.note.as_deref().is_some_and(|n| n.contains("spec.ip[0]") && n.contains("problems")), "{event:#?}");
    let targets: Api<CDTarget> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let running = targets.get("deploy-agents").await.expect("the CDTarget still there");
    assert_eq!(running.spec.ip, ["10.20.0.10"], "what ran before still runs");
    tenant.until::<ConfigMap, _>("pipeline-settings as before", "pipeline-settings", settings_as_in_git, log).await;
    // The tenant's person reads the Event.
    let events = kubectl_as_person(&tenant, &["get", "events.events.k8s.io", "-n", &tenant.ns]).success();
    assert!(events.contains("ValidationFailed"), "{events}");

    // The fix removes old.yaml: pruned, and said so.
    tenant.repo.commit_and_push(&[("deploy/agents.yaml", CDTARGET.to_owned())], "fixed");
    let fixed = tenant.repo.remove_file("deploy/old.yaml", "old settings go");
    tenant.repo.push("main");
    tenant.request_reconcile("fixed");
    let event = event_until(&tenant, "Pruned", "ConfigMap old-settings", log).await;
    assert_regards_the_sync_status(&event, &tenant);
    tenant.until::<ConfigMap, _>("old-settings pruned", "old-settings", gone, log).await;
    let pruned = sync_status(move |s| {
        ready_is(s, "True")
            && s.problems.is_empty()
            && s.last_sync.as_ref().is_some_and(|l| l.pruned.iter().any(|e| e.name == "old-settings"))
            && s.last_applied_revision.as_deref() == Some(fixed.as_str())
    });
    tenant.until::<SyncStatus, _>("SyncStatus: Ready, the prune recorded", &tenant.ns, pruned, log).await;

    // A change by hand is repaired at the next pass, and said so.
    drift_pipeline_settings(cluster, &tenant.ns);
    tenant.request_reconcile("drift");
    let event = event_until(&tenant, "DriftRepaired", "ConfigMap pipeline-settings", log).await;
    assert_regards_the_sync_status(&event, &tenant);
    tenant.until::<ConfigMap, _>("pipeline-settings repaired", "pipeline-settings", settings_as_in_git, log).await;
    let repaired =
        sync_status(|s| s.last_sync.as_ref().is_some_and(|l| l.repaired.iter().any(|e| e.name == "pipeline-settings")));
    tenant.until::<SyncStatus, _>("SyncStatus: the repair recorded", &tenant.ns, repaired, log).await;
}

#[tokio::test]
async fn a_refusal_in_the_reconcile_that_creates_the_sync_status_regards_it_by_uid() {
    let test = "a_refusal_in_the_reconcile_that_creates_the_sync_status_regards_it_by_uid";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // The very first revision is refused: the SyncStatus and the Event come from one reconcile.
    let broken = CDTARGET.replace("10.20.0.10", "not-an-ip");
    let tenant = Tenant::onboard(cluster, &[("deploy/agents.yaml", broken.as_str())]);
    let log = shared_controller(cluster).await;
    let first = tenant.repo.head("main").expect("the first commit");
    let event = event_until(&tenant, "ValidationFailed", &first[..12], log).await;
    assert_regards_the_sync_status(&event, &tenant);
    let statuses: Api<SyncStatus> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let uid = statuses.get(&tenant.ns).await.expect("the SyncStatus").metadata.uid;
    // `kubectl describe syncstatus` finds Events by this uid.
    assert_eq!(event.regarding.as_ref().and_then(|r| r.uid.clone()), uid, "{event:#?}");
}

#[tokio::test]
async fn tenant_people_read_their_own_sync_status_and_events_only_and_a_push_cannot_write_one() {
    let test = "tenant_people_read_their_own_sync_status_and_events_only_and_a_push_cannot_write_one";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let other = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let log = shared_controller(cluster).await;
    for t in [&tenant, &other] {
        t.until::<SyncStatus, _>("the SyncStatus", &t.ns, sync_status(|s| ready_is(s, "True")), log).await;
    }

    // Its own: yes.
    kubectl_as_person(&tenant, &["get", "syncstatus", &tenant.ns, "-n", &tenant.ns, "-o", "yaml"]).success();
    kubectl_as_person(&tenant, &["get", "events.events.k8s.io", "-n", &tenant.ns]).success();
    kubectl_as_person(&tenant, &["get", "events", "-n", &tenant.ns]).success();
    // Another tenant's, and the registration in the platform namespace: no.
    for args in [
        vec!["get", "syncstatus", other.ns.as_str(), "-n", other.ns.as_str()],
        vec!["get", "events.events.k8s.io", "-n", other.ns.as_str()],
        vec!["get", "tenantrepository", tenant.ns.as_str(), "-n", PLATFORM_NAMESPACE],
        vec!["get", "syncstatuses", "--all-namespaces"],
    ] {
        let refused = kubectl_as_person(&tenant, &args).failure();
        assert!(refused.contains("forbidden"), "{args:?}: {refused}");
    }
    // Its people read, they do not write.
    let patch = r#"{"status":{"lastAppliedRevision":"forged"}}"#;
    let args =
        ["patch", "syncstatus", &tenant.ns, "-n", &tenant.ns, "--subresource=status", "--type=merge", "-p", patch];
    assert!(kubectl_as_person(&tenant, &args).failure().contains("forbidden"));

    // What a push acts as (the impersonated ServiceAccount) may not write a SyncStatus either:
    // neither create one nor change the controller's.
    let account = format!("--as={}", tenant.user());
    let forged = format!(
        "apiVersion: cdtarget.io/v1alpha1\nkind: SyncStatus\nmetadata:\n  name: forged\n  namespace: {ns}\nspec:\n  registration: {{namespace: {PLATFORM_NAMESPACE}, name: forged}}\n  url: https://example.com/forged.git\n",
        ns = tenant.ns
    );
    let file = tenant.dir.path().join("forged.yaml");
    std::fs::write(&file, forged).expect("write the forged SyncStatus");
    let path = file.to_str().expect("UTF-8 path");
    let created = cluster.kubectl(&["apply", "--server-side", "-f", path, &account]).failure();
    assert!(created.contains("forbidden"), "{created}");
    let spec_patch = r#"{"spec":{"url":"https://example.com/forged.git"}}"#;
    for extra in [&["--type=merge", "-p", spec_patch][..], &["--subresource=status", "--type=merge", "-p", patch][..]] {
        let args: Vec<&str> = ["patch", "syncstatus", tenant.ns.as_str(), "-n", tenant.ns.as_str(), account.as_str()]
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect();
        let refused = cluster.kubectl(&args).failure();
        assert!(refused.contains("forbidden"), "{args:?}: {refused}");
    }
}

#[tokio::test]
async fn a_sync_status_leaves_a_namespace_its_registration_no_longer_targets_and_goes_with_the_registration() {
    let test = "a_sync_status_leaves_a_namespace_its_registration_no_longer_targets_and_goes_with_the_registration";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let log = shared_controller(cluster).await;
    tenant.until::<SyncStatus, _>("the SyncStatus", &tenant.ns, exists, log).await;

    // The platform points the registration at another namespace (a hostile or mistaken edit):
    // nothing of it stays behind in the old one.
    let elsewhere = namespace(cluster, "moved");
    tenant.patch_registration(&format!(r#"{{"spec":{{"targetNamespace":"{elsewhere}"}}}}"#));
    tenant.until::<SyncStatus, _>("the SyncStatus gone from the old namespace", &tenant.ns, gone, log).await;
    let moved: Api<SyncStatus> = Api::namespaced(cluster.admin_client().await, &elsewhere);
    let outcome = tokio::time::timeout(
        CONVERGE,
        kube::runtime::wait::await_condition(moved.clone(), &tenant.ns, |s: Option<&SyncStatus>| s.is_some()),
    )
    .await;
    assert!(matches!(outcome, Ok(Ok(_))), "no SyncStatus in {elsewhere}: {outcome:?}{}", tenant.diagnostics(log));

    // The registration deleted: its SyncStatus goes too.
    cluster.kubectl(&["delete", "tenantrepository", &tenant.ns, "-n", PLATFORM_NAMESPACE]).success();
    let outcome = tokio::time::timeout(
        CONVERGE,
        kube::runtime::wait::await_condition(moved, &tenant.ns, |s: Option<&SyncStatus>| s.is_none()),
    )
    .await;
    assert!(
        matches!(outcome, Ok(Ok(_))),
        "the SyncStatus outlived its registration: {outcome:?}{}",
        tenant.diagnostics(log)
    );
}
