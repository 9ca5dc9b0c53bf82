//! The deletion path of a TenantRepository, apart from the reconcile from its first line (as
//! kube-runtime's `finalizer` splits apply and cleanup): a registration being deleted that holds
//! our finalizer has its deploy key and webhook removed from GitLab ([`super::gitlab::cleanup()`]),
//! or left there by the escape hatch (an Event names what is left behind), and is then released.
//! While GitLab refuses, the finalizer stays and `GitLabSynced=False`, `CleanupPending` says why
//! (the status written here, the only write of this path). Nothing of the tenant's set is
//! touched: what was applied stays, as without the finalizer.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::TRANSIENT_RETRY;
use super::gitlab::cleanup::{Deletion, skipped_note};
use super::gitlab::{self, Inputs, StepError};
use super::summarize;
use crate::api::conditions::REASON_GITLAB_CLEANUP_SKIPPED;
use crate::api::tenant_repository::TenantRepository;
use crate::controller::events::{self, EventSink, Transition};
use crate::controller::frame::write_status;

pub(crate) use super::gitlab::cleanup::deletion_of;

/// Cleans up after `repo` as `deletion` says, then releases it; `recorder` records the Event
/// of a skipped clean-up.
#[tracing::instrument(name = "gitlab_cleanup", skip_all)]
pub async fn cleanup(
    repo: &TenantRepository,
    namespace: &str,
    inputs: Inputs<'_>,
    recorder: Option<&EventSink>,
    deletion: Deletion,
) -> Result<Action, StepError> {
    let name = repo.name_any();
    if deletion == Deletion::Skip {
        let note = skipped_note(repo);
        tracing::warn!(registration = %format!("{namespace}/{name}"), "{note}");
        let transition = Transition { warning: true, reason: REASON_GITLAB_CLEANUP_SKIPPED.into(), note };
        events::publish(recorder, repo, Some(transition)).await;
        gitlab::release_finalizer(inputs.writer, namespace, repo).await?;
        return Ok(Action::await_change());
    }
    match gitlab::cleanup(repo, namespace, inputs).await? {
        Ok(outcome) => {
            tracing::info!(registration = %format!("{namespace}/{name}"), writes = outcome.writes, "removed the deploy key and webhook from GitLab");
            gitlab::release_finalizer(inputs.writer, namespace, repo).await?;
            Ok(Action::await_change())
        }
        Err(step) => {
            let message = format!(
                "removing the deploy key and webhook ({}): {}; the finalizer {} stays (escape hatch: annotate {}=true)",
                step.verdict.reason,
                step.verdict.message,
                crate::gitlab::FINALIZER,
                crate::gitlab::SKIP_CLEANUP_ANNOTATION
            );
            let status = summarize::cleanup_pending(repo, &message, &Time(Timestamp::now()));
            write_status(inputs.writer, namespace, repo, &status).await.map_err(StepError::Status)?;
            Ok(Action::requeue(step.requeue.unwrap_or(TRANSIENT_RETRY.max(Duration::from_secs(30)))))
        }
    }
}
