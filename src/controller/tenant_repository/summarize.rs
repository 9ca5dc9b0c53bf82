//! The last pure step of a reconcile: what it concluded ([`Concluded`], the plan after what the
//! apply and the health check found) and what every step reported ([`Report`]) become every
//! condition and the status ([`summarize`]), and when to come back ([`requeue`]). The one place
//! that sets the TenantRepository's conditions; [`crate::controller::frame::Frame::finish`]
//! writes the result once.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::TRANSIENT_RETRY;
use super::concluded::Concluded;
use super::report::Report;
use crate::api::conditions::{
    APPLIED, COMMIT_STATUS_POSTED, GITLAB_SYNCED, READY, REASON_CLEANUP_PENDING, REASON_SUSPENDED, REASON_WRITE_FAILED,
    RECONCILING, SOURCE_READY, STALLED, SYNC_STATUS_WRITTEN,
};
use crate::api::reconcile_request;
use crate::api::tenant_repository::{GitLabStatus, TenantRepository, TenantRepositoryStatus};
use crate::controller::conditions;
use crate::controller::sooner;
use crate::gitlab;

/// The status of `repo` after a reconcile that `concluded` what it did and whose steps reported
/// `report`.
pub fn summarize(
    repo: &TenantRepository,
    concluded: &Concluded,
    report: &Report,
    now: &Time,
) -> TenantRepositoryStatus {
    let generation = repo.metadata.generation;
    let mut status = repo.status.clone().unwrap_or_default();
    match &concluded.health {
        Some(health) => conditions::summarize(&mut status.conditions, health, generation, now),
        None => {
            // Suspended: say so on Ready, keeping whether what was applied last is in place.
            let ready = crate::api::conditions::is_true(&status.conditions, READY);
            let message = "reconciliation is suspended (spec.suspend); what is applied stays as it is";
            conditions::set(&mut status.conditions, READY, ready, REASON_SUSPENDED, message, generation, now);
            conditions::remove(&mut status.conditions, RECONCILING);
            conditions::remove(&mut status.conditions, STALLED);
        }
    }
    for (kind, verdict) in [(SOURCE_READY, &concluded.source_ready), (APPLIED, &concluded.applied)] {
        if let Some(v) = verdict {
            conditions::set(&mut status.conditions, kind, v.ok, &v.reason, &v.message, generation, now);
        }
    }
    if let Some(step) = &report.gitlab {
        let v = &step.verdict;
        conditions::set(&mut status.conditions, GITLAB_SYNCED, v.ok, &v.reason, &v.message, generation, now);
        if let Some(recorded) = &step.status {
            status.gitlab = Some(recorded.clone());
        }
    }
    status.observed_generation = generation;
    if let Some(revision) = &concluded.fetched_revision {
        status.last_fetched_revision = Some(revision.clone());
    }
    if let Some(record) = &concluded.record {
        status.last_applied_revision = Some(record.revision.clone()).filter(|r| !r.is_empty());
        status.last_applied_digest = Some(record.digest.clone()).filter(|d| !d.is_empty());
        status.inventory = record.inventory.clone();
    }
    if concluded.health.is_some() {
        status.webhook_path = report.webhook_path.clone();
    }
    status.last_handled_reconcile_at =
        reconcile_request::last_handled(&repo.metadata, status.last_handled_reconcile_at.as_deref());
    status.health_check = report.waited.health_check.clone();

    // Commit statuses: what is remembered in `status.gitlab` and `CommitStatusPosted`; without
    // the phases (no `spec.gitlab`, statuses off) the condition goes.
    let posted = &report.commit_status;
    if posted.active {
        let gitlab = status.gitlab.get_or_insert_with(GitLabStatus::default);
        gitlab.commit_status = posted.remembered.commit_status.clone();
        gitlab.commented_sha = posted.remembered.commented_sha.clone();
        if gitlab.project_id.is_none()
            && let Some(gitlab::ProjectRef { path, id: Some(id) }) = &posted.project
        {
            gitlab.project_id = Some(*id);
            gitlab.project_path = Some(path.clone());
        }
        if let Some(v) = &posted.verdict {
            conditions::set(&mut status.conditions, COMMIT_STATUS_POSTED, v.ok, &v.reason, &v.message, generation, now);
        }
    } else {
        conditions::remove(&mut status.conditions, COMMIT_STATUS_POSTED);
    }

    // The tenant's SyncStatus: the condition is there only while its write fails.
    match &report.sync_status {
        None => {}
        Some(Ok(())) => conditions::remove(&mut status.conditions, SYNC_STATUS_WRITTEN),
        Some(Err(message)) => {
            let message = format!("writing the SyncStatus in the tenant namespace (retried): {message}");
            let generation = status.observed_generation;
            let conditions = &mut status.conditions;
            conditions::set(conditions, SYNC_STATUS_WRITTEN, false, REASON_WRITE_FAILED, &message, generation, now);
        }
    }
    status
}

/// When to reconcile again: the plan's requeue (or the failed apply's, or the health check's, as
/// `concluded` holds it), brought forward by every step that needs to come back sooner: a
/// transient GitLab or commit status failure, a failed SyncStatus write, and a failed fetch in
/// the pass that just put the deploy key on GitLab (the first fetch of a new registration runs
/// before its key is registered). `None` waits for a change of the registration.
pub fn requeue(concluded: &Concluded, report: &Report) -> Option<Duration> {
    let fetch_failed = concluded.source_ready.as_ref().is_some_and(|v| !v.ok);
    let key_just_registered = report.gitlab.as_ref().is_some_and(|s| s.changed && s.verdict.ok);
    let sync_status_failed = matches!(report.sync_status, Some(Err(_)));
    [
        (fetch_failed && key_just_registered).then_some(TRANSIENT_RETRY),
        report.gitlab.as_ref().and_then(|s| s.requeue),
        report.commit_status.requeue,
        sync_status_failed.then_some(TRANSIENT_RETRY),
    ]
    .into_iter()
    .fold(concluded.requeue, sooner)
}

/// The status of a registration being deleted whose deploy key and webhook cannot be removed
/// from GitLab yet: `GitLabSynced=False`, `CleanupPending`, saying why (`message`).
pub(crate) fn cleanup_pending(repo: &TenantRepository, message: &str, now: &Time) -> TenantRepositoryStatus {
    let mut status = repo.status.clone().unwrap_or_default();
    let generation = repo.metadata.generation;
    conditions::set(&mut status.conditions, GITLAB_SYNCED, false, REASON_CLEANUP_PENDING, message, generation, now);
    status
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::api::conditions::{REASON_APPLY_FAILED, REASON_SYNCED};
    use crate::apply::refusal::Refusal;
    use crate::controller::conditions::{Health, Verdict};
    use crate::controller::tenant_repository::concluded::conclude;
    use crate::controller::tenant_repository::execute::{Executed, Refused};
    use crate::controller::tenant_repository::gitlab::GitLabStep;
    use crate::controller::tenant_repository::observe::Observed;
    use crate::controller::tenant_repository::plan::Plan;
    use crate::controller::tenant_repository::plan::plan;
    use crate::controller::tenant_repository::plan::tests::{applied_abc, config_map, entry, repo};
    use crate::controller::tenant_repository::wait::Waited;
    use crate::controller::{STALLED_RESYNC, TRANSIENT_RETRY};
    use crate::error::Class;
    use crate::source::{FailureKind, SourceError};

    fn epoch() -> Time {
        Time(Timestamp::UNIX_EPOCH)
    }

    /// The status a reconcile of `repo` that decided `plan` and reported `report` writes.
    fn summarized(repo: &TenantRepository, plan: &Plan, report: &Report) -> TenantRepositoryStatus {
        summarize(repo, &conclude(repo, plan, &report.executed, &report.waited), report, &epoch())
    }

    /// When that reconcile comes back.
    fn requeue_of(repo: &TenantRepository, plan: &Plan, report: &Report) -> Option<Duration> {
        requeue(&conclude(repo, plan, &report.executed, &report.waited), report)
    }

    fn refused_by(refused: Refused) -> Report {
        Report { executed: Executed { refused: Some(refused), ..Executed::default() }, ..Report::default() }
    }

    #[test]
    fn a_fetch_refused_in_the_pass_that_registered_the_deploy_key_comes_back_soon() {
        let repo = repo(true, None);
        let refused = plan(
            &repo,
            Observed::FetchFailed(SourceError::new(FailureKind::AuthenticationFailed, "denied")),
            Duration::ZERO,
        );
        let synced = |changed| Report {
            gitlab: Some(GitLabStep {
                verdict: Verdict::new(true, REASON_SYNCED, "ok"),
                status: None,
                requeue: None,
                changed,
            }),
            ..Report::default()
        };
        assert_eq!(
            requeue_of(&repo, &refused, &Report::default()),
            Some(STALLED_RESYNC),
            "a refused fetch alone stalls"
        );
        assert_eq!(requeue_of(&repo, &refused, &synced(true)), Some(TRANSIENT_RETRY));
        assert_eq!(requeue_of(&repo, &refused, &synced(false)), Some(STALLED_RESYNC));
    }

    #[test]
    fn every_step_that_needs_to_come_back_sooner_brings_the_requeue_forward() {
        let repo = repo(true, None);
        let planned =
            plan(&repo, Observed::Fetched { revision: "abc".into(), load: Ok(config_map("a")) }, Duration::ZERO);
        assert_eq!(requeue_of(&repo, &planned, &Report::default()), Some(Duration::from_secs(60)));
        let sync_failed = Report { sync_status: Some(Err("forbidden".into())), ..Report::default() };
        assert_eq!(requeue_of(&repo, &planned, &sync_failed), Some(TRANSIENT_RETRY));
        let waiting = Report {
            waited: Waited { recheck: Some(Duration::from_secs(2)), ..Waited::default() },
            ..Report::default()
        };
        assert_eq!(requeue_of(&repo, &planned, &waiting), Some(Duration::from_secs(2)));
        let suspended = crate::controller::tenant_repository::plan::Plan::default();
        assert_eq!(requeue_of(&repo, &suspended, &Report::default()), None, "a suspended registration waits");
        assert_eq!(requeue_of(&repo, &suspended, &sync_failed), Some(TRANSIENT_RETRY));
    }

    #[test]
    fn failed_apply_keeps_the_previous_revision_and_tracks_what_it_may_have_created() {
        let status = applied_abc(vec![entry("old")]);
        let repo = repo(true, Some(status));
        let planned =
            plan(&repo, Observed::Fetched { revision: "def".into(), load: Ok(config_map("a")) }, Duration::ZERO);
        let message = "applying ConfigMap team-a/a: forbidden".to_owned();
        let report = refused_by(Refused::Apply { message, class: Class::Waiting, refusal: None });
        let status = summarized(&repo, &planned, &report);
        assert_eq!(status.last_applied_revision.as_deref(), Some("abc"));
        assert_eq!(status.inventory, [entry("a"), entry("old")]);
        assert!(status.conditions.iter().any(|c| c.type_ == APPLIED && c.reason == REASON_APPLY_FAILED));
    }

    #[test]
    fn a_failed_apply_records_the_recorded_inventory_and_the_new_set() {
        let repo = repo(true, Some(applied_abc(vec![entry("old")])));
        let mut set = config_map("a");
        set.documents.extend(config_map("b").documents);
        let planned = plan(&repo, Observed::Fetched { revision: "def".into(), load: Ok(set) }, Duration::ZERO);
        let report = refused_by(Refused::Apply { message: "refused".into(), class: Class::Waiting, refusal: None });
        let concluded = conclude(&repo, &planned, &report.executed, &report.waited);
        assert_eq!(concluded.record.unwrap().inventory, [entry("a"), entry("b"), entry("old")]);
    }

    #[test]
    fn a_refused_dry_run_writes_and_records_nothing_and_locates_every_refused_object() {
        let status = applied_abc(vec![entry("old")]);
        let repo = repo(true, Some(status));
        let mut set = config_map("a");
        set.documents.extend(config_map("b").documents);
        set.documents[1].file = "b.yaml".into();
        set.documents[1].index = 2;
        let planned = plan(&repo, Observed::Fetched { revision: "def".into(), load: Ok(set) }, Duration::ZERO);
        assert!(planned.intent.is_some(), "new objects: an intent record was planned");
        let refused = |name: &str, message: &str| Refusal {
            entry: planned.origins.keys().find(|e| e.name == name).expect("an origin").clone(),
            code: 403,
            message: message.into(),
            causes: Vec::new(),
            class: Class::Waiting,
        };
        let refusals = vec![refused("a", "forbidden a"), refused("b", "forbidden b")];
        let user = "system:serviceaccount:team-a:deployer".to_owned();
        let mut report = refused_by(Refused::DryRun { refusals, user, class: Class::Waiting });
        report.executed.dry_run = 2;
        // Nothing is written: the record stays the previous one.
        let concluded = conclude(&repo, &planned, &report.executed, &report.waited);
        assert_eq!(concluded.record, None);
        let status = summarized(&repo, &planned, &report);
        assert_eq!(
            (status.last_applied_revision.as_deref(), status.inventory.clone()),
            (Some("abc"), vec![entry("old")])
        );
        // Every refused object, located, in what was concluded and in Applied and Ready.
        let shown: Vec<String> = concluded.problems.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 2);
        assert!(
            shown[0].starts_with("a.yaml:1: ConfigMap ")
                && shown[0].ends_with("/a was refused by the API server: forbidden a"),
            "{shown:?}"
        );
        assert!(shown[1].starts_with("b.yaml:2: ConfigMap "), "{shown:?}");
        let applied = concluded.applied.clone().expect("Applied");
        assert_eq!(applied.reason, REASON_APPLY_FAILED);
        assert!(applied.message.contains("refused 2 of 2 objects in a server-side dry run as system:serviceaccount:team-a:deployer, so nothing was written"), "{}", applied.message);
        assert!(applied.message.contains(&shown[0]) && applied.message.contains(&shown[1]), "{}", applied.message);
        assert!(matches!(&concluded.health, Some(Health::Progressing { message, .. }) if *message == applied.message));
    }

    #[test]
    fn the_registrations_sync_status_condition_is_only_there_while_the_write_fails() {
        let repo = repo(true, None);
        let planned = Plan::default();
        // Without a SyncStatus (a controller that keeps none): the conditions the rest makes.
        let others = summarized(&repo, &planned, &Report::default()).conditions;
        let report = Report { sync_status: Some(Err("syncstatuses is forbidden".into())), ..Report::default() };
        let status = summarized(&repo, &planned, &report);
        let condition = status.conditions.iter().find(|c| c.type_ == SYNC_STATUS_WRITTEN).unwrap();
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", REASON_WRITE_FAILED));
        let untouched: Vec<_> = status.conditions.iter().filter(|c| c.type_ != SYNC_STATUS_WRITTEN).cloned().collect();
        assert_eq!(untouched, others, "a failed write adds its condition and touches no other");
        let repo = repo.with_status(status);
        let report = Report { sync_status: Some(Ok(())), ..Report::default() };
        let status = summarized(&repo, &planned, &report);
        assert_eq!(status.conditions, others, "a write that succeeds again removes its condition alone");
    }

    #[test]
    fn a_registration_being_deleted_says_why_its_cleanup_is_pending() {
        let status = cleanup_pending(&repo(true, None), "GitLab refused", &epoch());
        let condition = status.conditions.iter().find(|c| c.type_ == GITLAB_SYNCED).unwrap();
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", REASON_CLEANUP_PENDING));
    }
}
