//! The TenantRepository reconciler: fetch the tenant's repository, load its manifests under the
//! tenancy rules, server-side apply them as the tenant's ServiceAccount, record the inventory,
//! prune what left Git, sync the GitLab deploy key and webhook, and write status once.
//!
//! [`reconcile`] is the list of steps, in order, each in a file named for it, each returning
//! its outcome into one [`Report`]:
//!
//! 1. [`observe`]: read the registration's settings, its Secrets ([`secrets`]), the fetch, the
//!    policy and the load ([`load`]);
//! 2. [`plan`]: decide, a pure function over what was read ([`Plan`], the decision only);
//! 3. [`execute::dry_run`]: server-side dry-run what is to be sent, as the tenant;
//! 4. [`intent::record`]: write ahead into the inventory what the apply may create;
//! 5. [`gitlab::pending`]: the commit status `pending` on the revision;
//! 6. [`execute::apply_and_prune`]: apply and prune through the one writer;
//! 7. [`wait`]: with `spec.wait`, the health of what was applied;
//! 8. [`gitlab::sync`]: the deploy key and webhook on GitLab;
//! 9. [`gitlab::verdict`]: the commit status `success` or `failed`;
//! 10. [`sync_status`]: the tenant's SyncStatus and Warning Events;
//! 11. [`summarize`]: every condition and the status, a pure function of the plan and the
//!     report ([`concluded`] is what they concluded);
//! 12. [`Frame::finish`]: the one status write, then readiness and the Event of a change of
//!     `Ready` (the frame both reconcilers share);
//! 13. the observer of what was applied.
//!
//! Deletion is its own path ([`cleanup`]), and all GitLab work is in [`gitlab`], one entry per
//! phase. What the tenant reads of it all (their SyncStatus, Events, GitLab texts) passes
//! [`super::tenant_text`]'s allow-list. Nothing is lost on failure: a fetch, load or validation
//! failure applies and prunes nothing, and the status keeps the last applied revision and the
//! inventory. Objects new to the inventory are recorded in it before they are applied
//! ([`Plan::intent`]), so an apply cut short by a crash or a lost Lease leaves nothing a later
//! prune cannot see.

pub mod cleanup;
pub mod concluded;
pub mod execute;
pub mod gitlab;
pub mod intent;
pub mod load;
pub mod observe;
pub mod plan;
pub mod report;
pub mod secrets;
pub mod summarize;
pub mod sync_status;
pub mod wait;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use tracing::Instrument;

use crate::api::tenant_repository::{TenantRepository, TenantRepositorySpec};
use crate::apply::WriteError;
use crate::apply::applied::AppliedObjects;
use crate::controller::frame::{Frame, Framed};
use crate::error::{Class, Classify};
use crate::manifests;
use crate::source::Fetcher;

pub use crate::controller::conditions::Verdict;
pub use gitlab::GitLabStep;
pub use observe::Observed;
pub use plan::{Plan, Record, apply_schedule, fetch_schedule, plan};
pub use report::Report;
pub use secrets::SecretReads;
pub use summarize::summarize;
pub use sync_status::SyncStatuses;

pub use super::{STALLED_RESYNC, TRANSIENT_RETRY, WAIT_RETRY};
pub use crate::source::registration::{
    DEFAULT_INTERVAL, credentials_from_secret, interval_of, parse_go_duration, reference_of, timeout_of,
};

/// What the TenantRepository reconciler needs.
#[derive(Clone)]
pub struct Context {
    /// The writer (tenant applies and prunes as the tenant, status, finalizers, Secrets; its
    /// client, the controller's own, reads registrations, Secrets and the policy, and its
    /// discovery checks the kinds of a tenant's set), the policy, Events and readiness.
    pub frame: Frame,
    /// Fetches repositories into the cache, with bounded concurrency.
    pub fetcher: Fetcher,
    /// Bounds on the YAML read from a repository and on what loading a revision may produce.
    pub manifest_limits: manifests::Limits,
    /// Loads fetched revisions on threads of their own, a few at once.
    pub loader: load::Loader,
    /// Told what a reconcile did, for metrics.
    pub observer: Option<ApplyObserver>,
    /// The GitLab syncer's settings; `None` when the controller runs without `--gitlab-url`
    /// (registrations with `spec.gitlab` then report `GitLabSynced=False`, `GitLabNotConfigured`).
    pub gitlab: Option<crate::gitlab::Settings>,
    /// The watch of SyncStatuses: with it, every reconcile keeps the registration's SyncStatus
    /// in the tenant namespace and records the tenant's Warning Events ([`sync_status`]);
    /// without it (tests that do not look at them), neither.
    pub sync_statuses: Option<SyncStatuses>,
    /// What this process applied last for each registration: a new revision sends only the
    /// objects it changed.
    pub applied: AppliedObjects,
}

/// What one reconcile did to the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// `namespace/name` of the registration.
    pub registration: String,
    /// Objects server-side applied (0 on a no-op cycle).
    pub applied: usize,
    /// Objects deleted because they left Git.
    pub pruned: usize,
    /// Objects in the inventory afterwards.
    pub managed: usize,
}

/// Receives an [`ApplyReport`] after every reconcile that wrote status or changed nothing.
pub type ApplyObserver = Arc<dyn Fn(&ApplyReport) + Send + Sync>;

impl Context {
    /// A context whose writes go through the controller's own `client` (tenant writes
    /// impersonating over it), reading policy ConfigMap `policy_namespace/policy_name` on every
    /// reconcile. The controller process replaces the policy source with its shared watch
    /// ([`Framed::with_policy`]).
    pub fn new(client: Client, fetcher: Fetcher, policy_namespace: &str, policy_name: &str) -> Self {
        Context {
            frame: Frame::new(client, policy_namespace, policy_name),
            fetcher,
            manifest_limits: manifests::Limits::default(),
            loader: load::Loader::default(),
            observer: None,
            gitlab: None,
            sync_statuses: None,
            applied: AppliedObjects::default(),
        }
    }

    /// Keeps every registration's SyncStatus, read from `statuses`' watch.
    pub fn with_sync_statuses(mut self, statuses: SyncStatuses) -> Self {
        self.sync_statuses = Some(statuses);
        self
    }

    /// Manages deploy keys and webhooks of registrations with `spec.gitlab` through `settings`.
    pub fn with_gitlab(mut self, settings: crate::gitlab::Settings) -> Self {
        self.gitlab = Some(settings);
        self
    }

    /// Reports what every reconcile did to `observer`.
    pub fn with_observer(mut self, observer: ApplyObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Bounds the YAML read from a repository by `limits`.
    pub fn with_manifest_limits(mut self, limits: manifests::Limits) -> Self {
        self.manifest_limits = limits;
        self
    }

    fn gitlab_inputs<'a>(&'a self, secrets: &'a SecretReads) -> gitlab::Inputs<'a> {
        gitlab::Inputs { settings: self.gitlab.as_ref(), writer: &self.frame.writer, secrets }
    }
}

impl Framed for Context {
    fn frame_mut(&mut self) -> &mut Frame {
        &mut self.frame
    }
}

/// A failure of one TenantRepository reconcile. Problems with the registration, the repository
/// or its documents are not errors: they end in a status written by [`reconcile`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The TenantRepository has no namespace (it was not read from the cluster).
    #[error("TenantRepository {0} has no namespace")]
    NotNamespaced(String),
    /// Reading an object failed.
    #[error("reading {kind} {name}: {source}")]
    Read {
        /// Kind read.
        kind: &'static str,
        /// `namespace/name`.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading a Secret of the registration failed.
    #[error(transparent)]
    Secret(#[from] secrets::ReadError),
    /// Applying or pruning an object (as the tenant) failed.
    #[error(transparent)]
    Apply(WriteError),
    /// The GitLab phases' own writes (finalizers, the key pair Secret) or the deletion path's
    /// status write failed on deletion.
    #[error(transparent)]
    GitLab(#[from] gitlab::StepError),
    /// Writing status failed.
    #[error(transparent)]
    Status(WriteError),
}

impl Classify for Error {
    fn class(&self) -> Class {
        match self {
            Error::NotNamespaced(_) => Class::Stalled,
            Error::Read { source, .. } => source.class(),
            Error::Secret(e) => e.source.class(),
            Error::Apply(e) | Error::Status(e) => e.class(),
            Error::GitLab(e) => e.class(),
        }
    }
}

impl Error {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NotNamespaced(_) => "not_namespaced",
            Error::Read { .. } | Error::Secret(_) | Error::GitLab(gitlab::StepError::Read(_)) => "read",
            Error::Apply(WriteError::Impersonate { .. }) => "impersonate",
            Error::Apply(WriteError::Refused(e)) if e.verb == crate::apply::server_side::DELETING => "prune",
            Error::Apply(_) => "apply",
            Error::Status(_) | Error::GitLab(gitlab::StepError::Status(_)) => "status",
            Error::GitLab(gitlab::StepError::Write(_)) => "write",
        }
    }
}

/// The requeue after a failed reconcile, chosen by the error's class ([`apply_schedule`]).
pub fn error_policy(repo: Arc<TenantRepository>, error: &Error, _ctx: Arc<Context>) -> Action {
    let interval = interval_of(&repo.spec).unwrap_or(DEFAULT_INTERVAL);
    Action::requeue(apply_schedule(interval).settle(error.class()).requeue)
}

/// Reconciles one TenantRepository: observe, plan, execute, the GitLab step, status (see the
/// module documentation).
pub async fn reconcile(repo: Arc<TenantRepository>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = repo.name_any();
    let namespace = repo.namespace().ok_or_else(|| Error::NotNamespaced(name.clone()))?;
    let span = tracing::info_span!(
        "reconcile",
        kind = "TenantRepository",
        namespace = %namespace,
        object = %format!("{namespace}/{name}"),
        generation = repo.metadata.generation.unwrap_or_default(),
        revision = tracing::field::Empty,
    );
    reconcile_in(repo, ctx, namespace).instrument(span).await
}

/// The steps of one reconcile, in order (see the module documentation).
async fn reconcile_in(repo: Arc<TenantRepository>, ctx: Arc<Context>, namespace: String) -> Result<Action, Error> {
    let name = repo.name_any();
    let key = format!("{namespace}/{name}");
    let secrets = SecretReads::new(ctx.frame.writer.client(), &namespace);
    if let Some(deletion) = cleanup::deletion_of(&repo) {
        let inputs = ctx.gitlab_inputs(&secrets);
        return Ok(cleanup::cleanup(&repo, &namespace, inputs, ctx.frame.recorder.as_ref(), deletion).await?);
    }
    let mut report = Report::default();
    // Finalizer and key pair Secret: a failure here is reported by the sync phase below (the
    // finalizer is added again on every pass), never stops the Git apply.
    let prepared = gitlab::prepare(&repo, &namespace, ctx.gitlab_inputs(&secrets)).await;

    // 1. Observe.
    let observed = observe::observe(&repo, &namespace, &ctx, &secrets).await?;
    if let Some(revision) = observed.revision() {
        tracing::Span::current().record("revision", revision);
    }
    report.webhook_path = observe::read_webhook_path(&secrets, &namespace, &repo).await?;
    // 2. Plan.
    let plan = plan::plan(&repo, observed, jitter(&repo.spec)).skip_unchanged(ctx.applied.get(&key).as_deref());
    // 3. Dry run. All or nothing: what is to be sent is server-side dry-run as the tenant before
    // anything is written; a refusal leaves no intent, no apply and no prune.
    let checked = execute::dry_run(&ctx.frame.writer, &repo, &plan).await;
    // 4. Record intent. Write-ahead: what the apply may create is in the inventory before it is
    // created, or nothing is applied (the reconcile fails and is retried).
    if let (Some(intent), None) = (&plan.intent, &checked.executed.error) {
        intent::record(&ctx.frame.writer, &namespace, &repo, intent)
            .instrument(tracing::info_span!("intent"))
            .await
            .map_err(Error::Status)?;
    }
    // 5. Commit status pending: GitLab shows it on the revision before it is applied (a failure
    // only shows in `CommitStatusPosted`).
    let pending = gitlab::pending(&repo, &namespace, ctx.gitlab.as_ref(), &plan).await;
    // 6. Apply and prune.
    report.executed = execute::apply_and_prune(&ctx.frame.writer, &repo, &plan, checked).await;
    match (&report.executed.error, &plan.digests) {
        // Whatever a failed attempt left on the cluster, the next one sends the whole set.
        (Some(_), _) => ctx.applied.forget(&key),
        (None, Some(digests)) if plan.record.is_some() => ctx.applied.remember(&key, digests.clone()),
        (None, _) => {}
    }
    // The tenant's client could not even be built: nothing was sent, nothing is reported.
    if let Some(WriteError::Impersonate { .. }) = &report.executed.error {
        return Err(Error::Apply(report.executed.error.take().expect("matched above")));
    }
    // 7. Wait for health (spec.wait): Ready only once what was applied is healthy (kstatus).
    report.waited = wait::wait(&ctx.frame.writer, &repo, &plan, &report.executed, Timestamp::now()).await;
    // 8. GitLab keys and hooks, after the apply and whatever its outcome: a GitLab failure never
    // blocks or undoes it.
    let synced = match prepared {
        Ok(()) => gitlab::sync(&repo, &namespace, ctx.gitlab_inputs(&secrets)).await,
        Err(e) => Err(e),
    };
    report.gitlab = synced.unwrap_or_else(|e| Some(gitlab::cluster_failed(&e)));
    // 9. Commit status verdict on what the reconcile concluded.
    let concluded = concluded::conclude(&repo, &plan, &report.executed, &report.waited);
    report.commit_status = gitlab::verdict(pending, &repo, ctx.gitlab.as_ref(), &concluded).await;
    let now = Time(Timestamp::now());
    // 10. The tenant's SyncStatus and Events, after the apply whatever its outcome; a failed
    // write is reported in the registration's conditions and retried, never undoes anything.
    if let Some(sync_statuses) = &ctx.sync_statuses {
        let status = summarize(&repo, &plan, &report, &now);
        let inputs = sync_status::Inputs {
            repo: &repo,
            platform_namespace: &namespace,
            status: &status,
            concluded: &concluded,
            executed: &report.executed,
            previous: None,
            now: &now,
        };
        let written = sync_status::update(sync_statuses, &ctx.frame.writer, ctx.frame.recorder.as_ref(), inputs)
            .instrument(tracing::info_span!("sync_status"))
            .await;
        if let Err(error) = &written {
            tracing::warn!(%error, "writing the SyncStatus failed; retried");
        }
        report.sync_status = Some(written);
    }
    // 11. Summarize: every condition and the status, once.
    let status = summarize(&repo, &plan, &report, &now);
    // 12. Write status, once; then readiness and the Event of a change of `Ready`.
    ctx.frame.finish(repo.as_ref(), &namespace, &status, repo.spec.suspend).await.map_err(Error::Status)?;
    // 13. The observer of what was applied.
    let applied = ApplyReport {
        registration: key,
        applied: report.executed.applied,
        pruned: report.executed.pruned,
        managed: status.inventory.len(),
    };
    if let Some(observer) = &ctx.observer {
        observer(&applied);
    }
    let requeue = summarize::requeue(&repo, &plan, &report);
    if let Some(e) = report.executed.error {
        return Err(Error::Apply(e));
    }
    tracing::debug!(applied = applied.applied, pruned = applied.pruned, "reconciled");
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Up to a tenth of the interval, varying between reconciles.
fn jitter(spec: &TenantRepositorySpec) -> Duration {
    let interval = interval_of(spec).unwrap_or(DEFAULT_INTERVAL);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    interval.mul_f64(f64::from(nanos % 1000) / 10_000.0)
}
