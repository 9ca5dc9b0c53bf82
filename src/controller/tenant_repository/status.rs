//! The TenantRepository's status after a reconcile, and its one write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ApiResource;

use super::plan::Plan;
use super::{APPLIED, REASON_SUSPENDED, SOURCE_READY};
use crate::api::reconcile_request;
use crate::api::tenant_repository::{InventoryEntry, TenantRepository, TenantRepositoryStatus};
use crate::apply::{Write, WriteError, Writer};
use crate::controller::conditions::{self, READY};
use crate::gitlab;

/// The status after a reconcile that executed `plan` in full.
pub fn next_status(
    repo: &TenantRepository,
    plan: &Plan,
    webhook_path: Option<String>,
    now: &Time,
) -> TenantRepositoryStatus {
    let generation = repo.metadata.generation;
    let mut status = repo.status.clone().unwrap_or_default();
    match &plan.health {
        Some(health) => conditions::summarize(&mut status.conditions, health, generation, now),
        None => {
            // Suspended: say so on Ready, keeping whether what was applied last is in place.
            let ready = conditions::is_true(&status.conditions, READY);
            let message = "reconciliation is suspended (spec.suspend); what is applied stays as it is";
            conditions::set(&mut status.conditions, READY, ready, REASON_SUSPENDED, message, generation, now);
            conditions::remove(&mut status.conditions, conditions::RECONCILING);
            conditions::remove(&mut status.conditions, conditions::STALLED);
        }
    }
    for (kind, verdict) in [(SOURCE_READY, &plan.source_ready), (APPLIED, &plan.applied)] {
        if let Some(v) = verdict {
            conditions::set(&mut status.conditions, kind, v.ok, &v.reason, &v.message, generation, now);
        }
    }
    if let Some(step) = &plan.gitlab {
        let v = &step.verdict;
        conditions::set(&mut status.conditions, gitlab::CONDITION_TYPE, v.ok, &v.reason, &v.message, generation, now);
        if let Some(recorded) = &step.status {
            status.gitlab = Some(recorded.clone());
        }
    }
    status.observed_generation = generation;
    if let Some(revision) = &plan.fetched_revision {
        status.last_fetched_revision = Some(revision.clone());
    }
    if let Some(record) = &plan.record {
        status.last_applied_revision = Some(record.revision.clone()).filter(|r| !r.is_empty());
        status.last_applied_digest = Some(record.digest.clone()).filter(|d| !d.is_empty());
        status.inventory = record.inventory.clone();
    }
    if plan.health.is_some() {
        status.webhook_path = webhook_path;
    }
    status.last_handled_reconcile_at =
        reconcile_request::last_handled(&repo.metadata, status.last_handled_reconcile_at.as_deref());
    status
}

/// Records `inventory` in the status of `repo` before an apply, the rest as it is
/// ([`super::Plan::intent`]): what the apply may create is in the inventory before it exists.
pub async fn record_intent(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
    inventory: &[InventoryEntry],
) -> Result<(), WriteError> {
    let mut status = repo.status.clone().unwrap_or_default();
    status.inventory = inventory.to_vec();
    write(writer, namespace, repo, &status).await
}

/// Writes `status` of `repo` once, and only when it differs from what the registration holds
/// (an unchanged cycle writes nothing).
pub async fn write(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
    status: &TenantRepositoryStatus,
) -> Result<(), WriteError> {
    if repo.status.as_ref() == Some(status) {
        return Ok(());
    }
    let write = Write::Status {
        resource: ApiResource::erase::<TenantRepository>(&()),
        namespace: namespace.to_owned(),
        name: kube::ResourceExt::name_any(repo),
        status: serde_json::to_value(status).unwrap_or_default(),
    };
    writer.execute(write).await.map(|_| ())
}
