//! The commit status phases of the TenantRepository reconciler (`docs/gitlab.md`, "Commit
//! statuses and comments"): for a registration with `spec.gitlab`, [`pending`] on the fetched
//! revision before the apply, then [`verdict`]: `success` or `failed` (and one comment listing
//! every problem of a refused revision) after it, remembered in `status.gitlab` so that
//! evaluating the same revision again sends nothing. Both return a [`CommitStatusReport`].
//!
//! The decisions are plain functions ([`target_of`], [`outcome_of`], [`condition_of`]) and
//! [`crate::gitlab::commit_status`]'s; GitLab being down or refusing never blocks or undoes the
//! apply: it ends in the `CommitStatusPosted` condition and is tried again next reconcile.

use std::time::Duration;

use kube::ResourceExt;

use super::super::TRANSIENT_RETRY;
use super::super::concluded::Concluded;
use super::super::plan::Plan;
use crate::api::conditions::{APPLIED, REASON_POSTED};
use crate::api::tenant_repository::TenantRepository;
use crate::controller::conditions::{Health, Verdict};
use crate::controller::tenant_text::{self, Object};
use crate::error::{Class, Classify, Reason};
use crate::gitlab::commit_status::{self as decisions, Outcome, Remembered, Step, Target, Vars};
use crate::gitlab::{self, GitLabError};

/// What the commit status phases did in one reconcile, for the reconcile's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitStatusReport {
    /// `false`: the registration has no `spec.gitlab` or statuses are off (the condition goes).
    pub active: bool,
    /// The project's id, once known.
    pub project: Option<gitlab::ProjectRef>,
    /// Where statuses go for the revision evaluated; `None` when no revision was fetched.
    pub target: Option<Target>,
    /// What is remembered after this reconcile.
    pub remembered: Remembered,
    /// `CommitStatusPosted`; `None` leaves it as it is (nothing was evaluated).
    pub verdict: Option<Verdict>,
    /// Come back sooner (a transient failure).
    pub requeue: Option<Duration>,
    /// Writing requests sent to GitLab.
    pub writes: usize,
}

/// The branch or tag statuses are posted for: the registration's own (`main` by default);
/// `None` for a registration pinned to a commit (GitLab then picks a branch holding it).
pub(crate) fn ref_of(repo: &TenantRepository) -> Option<String> {
    let git_ref = repo.spec.git_ref.clone().unwrap_or_default();
    match (git_ref.branch, git_ref.tag, git_ref.commit) {
        (_, Some(tag), _) => Some(tag),
        (Some(branch), None, _) => Some(branch),
        (None, None, Some(_)) => None,
        (None, None, None) => Some("main".to_owned()),
    }
}

/// Where the status of `revision` of `repo` goes, named and linked as `settings` say.
pub(crate) fn target_of(
    repo: &TenantRepository,
    namespace: &str,
    settings: &gitlab::StatusSettings,
    revision: &str,
) -> Target {
    let name = repo.name_any();
    let vars = Vars { namespace, name: &name, target_namespace: &repo.spec.target_namespace, revision };
    Target::new(settings, vars, ref_of(repo))
}

/// What the reconcile concluded about its revision: `None` while it is not judged (nothing
/// fetched, suspended, or a failure that is retried, so the status stays `pending`). Problems
/// are located from the repository root (`spec.path` + the file), as the tenant sees them on
/// GitLab; problems and messages are those [`tenant_text`] lets a tenant read.
pub(crate) fn outcome_of(repo: &TenantRepository, concluded: &Concluded) -> Option<Outcome> {
    concluded.fetched_revision.as_ref()?;
    let health = concluded.health.as_ref()?;
    let problems = tenant_text::problems_for_tenant(&concluded.problems);
    if !problems.is_empty() {
        let base = repo.spec.path.as_deref().unwrap_or_default().trim_start_matches("./").trim_matches('/');
        let problems = problems
            .iter()
            .cloned()
            .map(|mut problem| {
                if let Some(file) = problem.file.as_mut()
                    && !base.is_empty()
                    && base != "."
                {
                    *file = format!("{base}/{}", file.trim_start_matches("./"));
                }
                problem
            })
            .collect();
        return Some(Outcome::Refused(problems));
    }
    let applied = concluded.applied.as_ref()?;
    let told = || {
        tenant_text::for_tenant(Object::Registration, APPLIED, &applied.reason, &applied.message).message().to_owned()
    };
    match (applied.ok, health) {
        (true, _) => Some(Outcome::Applied(told())),
        (false, Health::Stalled { .. }) => Some(Outcome::Failed(told())),
        (false, _) => None,
    }
}

/// `CommitStatusPosted` and the requeue after posting (`posted`) or failing to.
pub(crate) fn condition_of(posted: &decisions::Posted) -> (Verdict, Option<Duration>) {
    match &posted.error {
        None => {
            let mut message = posted.to_string();
            for note in &posted.notes {
                message.push_str("; ");
                message.push_str(note);
            }
            (Verdict::new(true, REASON_POSTED, message), None)
        }
        Some(error) => (failed_verdict(error), requeue_of(error)),
    }
}

fn failed_verdict(error: &GitLabError) -> Verdict {
    Verdict::new(
        false,
        error.reason(),
        format!("{error}; the apply is not affected, the status is posted again next reconcile"),
    )
}

fn requeue_of(error: &GitLabError) -> Option<Duration> {
    (error.class() == Class::Transient).then(|| error.retry_after.unwrap_or(TRANSIENT_RETRY).max(TRANSIENT_RETRY))
}

fn remembered_of(repo: &TenantRepository) -> Remembered {
    let status = repo.status.as_ref().and_then(|s| s.gitlab.as_ref());
    Remembered {
        commit_status: status.and_then(|s| s.commit_status.clone()),
        commented_sha: status.and_then(|s| s.commented_sha.clone()),
    }
}

/// Before the apply: resolves the project and posts `pending` on a revision not reported yet.
#[tracing::instrument(name = "commit_status", skip_all)]
pub async fn pending(
    repo: &TenantRepository,
    namespace: &str,
    settings: Option<&gitlab::Settings>,
    plan: &Plan,
) -> CommitStatusReport {
    let remembered = remembered_of(repo);
    let (Some(settings), Some(statuses)) = (settings, settings.and_then(|s| s.commit_status.as_ref())) else {
        return CommitStatusReport { remembered, ..CommitStatusReport::default() };
    };
    if !super::syncs(repo) {
        return CommitStatusReport { remembered, ..CommitStatusReport::default() };
    }
    let mut step = CommitStatusReport { active: true, remembered, ..CommitStatusReport::default() };
    let Some(revision) = plan.fetched_revision.as_deref().filter(|_| outcome_relevant(plan)) else { return step };
    let target = target_of(repo, namespace, statuses, revision);
    step.target = Some(target.clone());
    let Some(pending) = decisions::pending(&step.remembered, &target) else { return step };
    let project = match gitlab::project_of(repo) {
        Ok(project) => project,
        Err(error) => return step.failed(&error),
    };
    let id = match gitlab::resolve_project(&settings.client, &project).await {
        Ok(id) => id,
        Err(error) => return step.failed(&error),
    };
    step.project = Some(gitlab::ProjectRef { id: Some(id), ..project });
    step.run(&settings.client, id, &[pending]).await;
    step
}

/// Whether the plan evaluated its revision at all (suspended registrations report nothing).
fn outcome_relevant(plan: &Plan) -> bool {
    plan.health.is_some()
}

/// After the apply: posts the verdict on what the reconcile `concluded` (and the refusal
/// comment) unless already posted.
#[tracing::instrument(name = "commit_status", skip_all)]
pub async fn verdict(
    mut step: CommitStatusReport,
    repo: &TenantRepository,
    settings: Option<&gitlab::Settings>,
    concluded: &Concluded,
) -> CommitStatusReport {
    let (Some(settings), Some(target)) = (settings, step.target.clone()) else { return step };
    if step.verdict.as_ref().is_some_and(|v| !v.ok) {
        // `pending` failed: the verdict waits for the next reconcile, which tries both again.
        return step;
    }
    let Some(outcome) = outcome_of(repo, concluded) else { return step };
    let steps = decisions::verdict(&step.remembered, &target, &outcome);
    if steps.is_empty() {
        return step;
    }
    let id = match &step.project {
        Some(gitlab::ProjectRef { id: Some(id), .. }) => *id,
        _ => {
            let project = match gitlab::project_of(repo) {
                Ok(project) => project,
                Err(error) => return step.failed(&error),
            };
            match gitlab::resolve_project(&settings.client, &project).await {
                Ok(id) => {
                    step.project = Some(gitlab::ProjectRef { id: Some(id), ..project });
                    id
                }
                Err(error) => return step.failed(&error),
            }
        }
    };
    step.run(&settings.client, id, &steps).await;
    step
}

impl CommitStatusReport {
    fn failed(mut self, error: &GitLabError) -> CommitStatusReport {
        self.verdict = Some(failed_verdict(error));
        self.requeue = requeue_of(error);
        self
    }

    async fn run(&mut self, client: &gitlab::GitLabClient, project_id: i64, steps: &[Step]) {
        let posted = decisions::post(client, project_id, &self.remembered, steps).await;
        if let Some(error) = &posted.error {
            tracing::info!(error = %error, steps = ?decisions::summary(steps), "commit status not posted");
        }
        let (verdict, requeue) = condition_of(&posted);
        self.writes += posted.writes;
        self.remembered = posted.remembered;
        self.verdict = Some(verdict);
        self.requeue = requeue;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tenant_repository::GitLabSpec;
    use crate::problem::Problem;

    fn concluded(
        revision: Option<&str>,
        health: Option<Health>,
        applied: Option<Verdict>,
        problems: Vec<Problem>,
    ) -> Concluded {
        Concluded { health, applied, fetched_revision: revision.map(str::to_owned), problems, ..Concluded::default() }
    }

    fn ready() -> Option<Health> {
        Some(Health::Ready { reason: "Succeeded".into(), message: "ok".into() })
    }

    #[test]
    fn outcomes_follow_the_plan_and_retried_failures_stay_pending() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let repo = TenantRepository::test();
        let applied = Some(Verdict::new(true, "Succeeded", "applied 2 objects"));
        assert_eq!(
            outcome_of(&repo, &concluded(Some(sha), ready(), applied.clone(), vec![])),
            Some(Outcome::Applied("applied 2 objects".into()))
        );
        assert_eq!(outcome_of(&repo, &concluded(None, ready(), applied, vec![])), None, "nothing fetched");
        let problem = Problem::field("kind", "Secret is not allowed").located("a.yaml", Some(1), Some(1));
        let stalled = Some(Health::Stalled { reason: "ValidationFailed".into(), message: "m".into() });
        let refused = Some(Verdict::new(false, "ValidationFailed", "m"));
        assert_eq!(
            outcome_of(&repo, &concluded(Some(sha), stalled.clone(), refused.clone(), vec![problem.clone()])),
            Some(Outcome::Refused(vec![problem.clone()]))
        );
        let mut under = repo.clone();
        under.spec.path = Some("./deploy/".into());
        let Some(Outcome::Refused(located)) =
            outcome_of(&under, &concluded(Some(sha), stalled.clone(), refused.clone(), vec![problem]))
        else {
            panic!("refused")
        };
        assert_eq!(located[0].file.as_deref(), Some("deploy/a.yaml"), "from the repository root");
        assert_eq!(
            outcome_of(&repo, &concluded(Some(sha), stalled, refused.clone(), vec![])),
            Some(Outcome::Failed("m".into()))
        );
        let retried = Some(Health::Progressing { reason: "ApplyFailed".into(), message: "m".into() });
        assert_eq!(
            outcome_of(&repo, &concluded(Some(sha), retried, refused, vec![])),
            None,
            "a retried failure is no verdict"
        );
    }

    #[test]
    fn a_platform_failure_is_described_on_gitlab_by_its_fixed_sentence() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let message =
            "the platform policy is invalid (ask a cluster admin): egress.nat64Prefixes[0]: `10.99.0.0/16` is IPv4";
        let stalled = Some(Health::Stalled { reason: "InvalidPolicy".into(), message: message.into() });
        let refused = Some(Verdict::new(false, "InvalidPolicy", message));
        assert_eq!(
            outcome_of(&TenantRepository::test(), &concluded(Some(sha), stalled, refused, vec![])),
            Some(Outcome::Failed(tenant_text::PLATFORM_CONFIGURATION.into()))
        );
    }

    #[test]
    fn statuses_follow_the_branch_or_tag_of_the_registration() {
        let repo = TenantRepository::test().with_gitlab(GitLabSpec::test());
        assert_eq!(ref_of(&repo.clone().with_branch("release")).as_deref(), Some("release"));
        assert_eq!(ref_of(&repo.clone().with_tag("v1")).as_deref(), Some("v1"));
        assert_eq!(ref_of(&repo), Some("main".to_owned()), "the default branch of a registration");
    }

    #[test]
    fn a_transient_failure_comes_back_sooner_and_a_refusal_waits() {
        let down = GitLabError::new(gitlab::ErrorKind::Unavailable, "502");
        let posted = decisions::Posted { error: Some(down), ..decisions::Posted::default() };
        let (verdict, requeue) = condition_of(&posted);
        assert_eq!((verdict.ok, verdict.reason.as_str(), requeue), (false, "GitLabUnavailable", Some(TRANSIENT_RETRY)));
        assert!(verdict.message.contains("the apply is not affected"), "{}", verdict.message);
        let forbidden = GitLabError::new(gitlab::ErrorKind::StatusForbidden, "403");
        let (verdict, requeue) = condition_of(&decisions::Posted { error: Some(forbidden), ..Default::default() });
        assert_eq!((verdict.reason.as_str(), requeue), ("GitLabStatusForbidden", None));
    }
}
