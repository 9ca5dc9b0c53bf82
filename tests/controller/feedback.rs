//! The tenant's SyncStatus against the fake API server: written through the writer after the
//! apply, and a refused write never blocks or undoes the apply (docs/feedback.md).

use std::sync::Arc;

use cdtarget::api::SyncStatus;
use cdtarget::api::conditions::APPLIED;
use cdtarget::api::conditions::{REASON_WRITE_FAILED, SYNC_STATUS_WRITTEN};
use cdtarget::controller::tenant_repository::SyncStatuses;
use cdtarget::controller::tenant_repository::{TRANSIENT_RETRY, reconcile};
use kube::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, store};
use kube::runtime::watcher;

use crate::tenant_repository::{Fixture, REPO, TENANT, config_map_yaml};

/// A store of SyncStatuses that has listed (empty), and the writer that keeps it so.
pub(crate) fn listed_store() -> (SyncStatuses, store::Writer<SyncStatus>) {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (SyncStatuses::new(store), writer)
}

async fn reconcile_with_sync_statuses(fixture: &Fixture, feedback: SyncStatuses) -> Action {
    let context = Arc::new((*fixture.context()).clone().with_sync_statuses(feedback));
    reconcile(Arc::new(fixture.registration().await), context).await.expect("the reconcile succeeds")
}

#[tokio::test]
async fn a_refused_sync_status_write_leaves_the_apply_in_place_and_is_reported_on_the_registration() {
    // This fake serves no SyncStatus kind: every SyncStatus write is refused.
    let fixture = Fixture::new().await;
    fixture.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "1"))], "first");
    fixture.register(|repo| repo).await;
    let (feedback, _keep) = listed_store();
    let action = reconcile_with_sync_statuses(&fixture, feedback).await;

    assert!(fixture.config_map("settings").await.is_some(), "the apply happened");
    let status = fixture.status().await;
    let applied = status.conditions.iter().find(|c| c.type_ == APPLIED).expect("Applied");
    assert_eq!(applied.status, "True", "{applied:?}");
    let written = status.conditions.iter().find(|c| c.type_ == SYNC_STATUS_WRITTEN).expect("SyncStatusWritten");
    assert_eq!((written.status.as_str(), written.reason.as_str()), ("False", REASON_WRITE_FAILED), "{written:?}");
    assert!(written.message.contains("SyncStatus"), "{written:?}");
    // Tried again soon, not at the next poll.
    assert_eq!(action, Action::requeue(TRANSIENT_RETRY));
}

#[tokio::test]
async fn the_sync_status_is_written_in_the_target_namespace_and_the_registration_says_nothing_of_it() {
    let fixture =
        Fixture::with_fake(|builder| builder.with_resource::<SyncStatus>().with_status_subresource::<SyncStatus>())
            .await;
    let revision = fixture.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "1"))], "first");
    fixture.register(|repo| repo).await;
    let (feedback, _keep) = listed_store();
    reconcile_with_sync_statuses(&fixture, feedback).await;

    let statuses: Api<SyncStatus> = Api::namespaced(fixture.client.clone(), TENANT);
    let written = statuses.get(REPO).await.expect("the SyncStatus in the target namespace");
    let status = written.status.expect("its status");
    assert_eq!(status.last_applied_revision.as_deref(), Some(revision.as_str()));
    assert_eq!(status.last_sync.expect("the apply recorded").applied.len(), 1);
    assert_eq!(
        written.metadata.labels.unwrap_or_default().get("app.kubernetes.io/managed-by").map(String::as_str),
        Some("cdtarget")
    );
    let registration = fixture.status().await;
    assert!(!registration.conditions.iter().any(|c| c.type_ == SYNC_STATUS_WRITTEN), "{registration:?}");
}
