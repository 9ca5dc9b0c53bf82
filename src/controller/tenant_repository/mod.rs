//! The TenantRepository reconciler: fetch the tenant's repository, load its manifests under the
//! tenancy rules, server-side apply them as the tenant's ServiceAccount, record the inventory,
//! prune what left Git, sync the GitLab deploy key and webhook, and write status once.
//!
//! [`reconcile`] runs the steps in order (`reconcile_in`, whose comments carry these numbers),
//! each in a file named for it, each returning its outcome into one [`Report`] or handing it to
//! the step that needs it:
//!
//! 1. [`cleanup`]: a registration being deleted takes its own path, and nothing below runs;
//! 2. [`gitlab::prepare()`]: our finalizer and the key pair Secret, before the fetch needs them
//!    (a failure is reported by step 13, never stops the Git apply);
//! 3. [`observe`]: read the registration's settings, its Secrets ([`secrets`]), the fetch, the
//!    policy and the load ([`load`]);
//! 4. [`observe::read_webhook_path`]: the receiver path of the registration's webhook;
//! 5. [`plan()`]: decide, a pure function over what was read ([`Plan`], the decision only), then
//!    [`Plan::skip_unchanged`] with what this process applied last (`Context::applied`);
//! 6. [`execute::dry_run`]: server-side dry-run what is to be sent, as the tenant;
//! 7. [`intent::record`]: write ahead into the inventory what the apply may create;
//! 8. [`gitlab::pending`]: the commit status `pending` on the revision;
//! 9. [`execute::apply_and_prune`]: apply and prune through the one writer;
//! 10. [`execute::remember`]: what was applied is remembered for the next revision, or forgotten
//!     after a failed attempt (the next one sends the whole set);
//! 11. [`execute::Executed::unsent`]: when the tenant's client could not even be built, nothing
//!     was sent and the reconcile fails here, reporting nothing;
//! 12. [`wait`]: with `spec.wait`, the health of what was applied;
//! 13. [`gitlab::sync`]: the deploy key and webhook on GitLab (or step 2's failure);
//! 14. [`concluded::conclude`]: what the reconcile concluded, a pure function of the plan, the
//!     apply and the health check, computed once for the steps below;
//! 15. [`gitlab::verdict`]: the commit status `success` or `failed`;
//! 16. [`sync_status::step`]: the tenant's SyncStatus and Warning Events. It shows the status
//!     [`summarize()`] makes of the report so far: the only condition its own outcome sets,
//!     `SyncStatusWritten`, is one the SyncStatus leaves out;
//! 17. [`summarize()`]: every condition and the status, a pure function of what was concluded and
//!     the report;
//! 18. [`Frame::finish`]: the one status write, then readiness and the Event of a change of
//!     `Ready` (the frame both reconcilers share);
//! 19. `Context::tell_observer`: the observer of what was applied ([`ApplyReport`]);
//! 20. the result: the apply's error ([`error_policy`] requeues it by its class), or the
//!     requeue every step asks for ([`summarize::requeue`]).
//!
//! Deletion is its own path ([`cleanup`]), and all GitLab work is in [`gitlab`], one entry per
//! phase. What the tenant reads of it all (their SyncStatus, Events, GitLab texts) passes
//! [`super::tenant_text`]'s allow-list. Nothing is lost on failure: a fetch, load or validation
//! failure applies and prunes nothing, and the status keeps the last applied revision and the
//! inventory. Objects new to the inventory are recorded in it before they are applied
//! ([`Plan::intent`], step 7), so an apply cut short by a crash or a lost Lease leaves nothing a
//! later prune cannot see.

pub mod cleanup;
pub(crate) mod concluded;
pub mod execute;
pub mod gitlab;
pub mod intent;
pub mod load;
pub(crate) mod observe;
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

use crate::api::tenant_repository::{TenantRepository, TenantRepositorySpec, TenantRepositoryStatus};
use crate::apply::WriteError;
use crate::apply::applied::AppliedObjects;
use crate::controller::frame::{Frame, Framed};
use crate::error::{Class, Classify};
use crate::manifests;
use crate::source::Fetcher;

pub use observe::Observed;
pub(crate) use plan::apply_schedule;
pub use plan::{Record, plan};
pub(crate) use report::Report;
pub(crate) use secrets::SecretReads;
pub use summarize::summarize;
pub use sync_status::SyncStatuses;

pub use super::TRANSIENT_RETRY;
pub(crate) use super::{STALLED_RESYNC, WAIT_RETRY};
pub(crate) use crate::source::registration::{DEFAULT_INTERVAL, interval_of, parse_go_duration};
pub use crate::source::registration::{credentials_from_secret, timeout_of};

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
pub(crate) type ApplyObserver = Arc<dyn Fn(&ApplyReport) + Send + Sync>;

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

    /// Tells the observer (if any) what the reconcile of registration `key` did and what its
    /// inventory holds afterwards (`status`), and returns it.
    fn tell_observer(&self, key: String, executed: &execute::Executed, status: &TenantRepositoryStatus) -> ApplyReport {
        let applied = ApplyReport {
            registration: key,
            applied: executed.applied,
            pruned: executed.pruned,
            managed: status.inventory.len(),
        };
        if let Some(observer) = &self.observer {
            observer(&applied);
        }
        applied
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
pub(crate) fn error_policy(repo: Arc<TenantRepository>, error: &Error, _ctx: Arc<Context>) -> Action {
    let interval = interval_of(&repo.spec).unwrap_or(DEFAULT_INTERVAL);
    Action::requeue(apply_schedule(interval).settle(error.class()).requeue)
}

/// Reconciles one TenantRepository: the steps the module documentation lists, in a span that
/// names the registration (and the revision, once fetched).
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

/// The steps of one reconcile, in order, numbered as the module documentation lists them.
async fn reconcile_in(repo: Arc<TenantRepository>, ctx: Arc<Context>, namespace: String) -> Result<Action, Error> {
    let key = format!("{namespace}/{}", repo.name_any());
    let secrets = SecretReads::new(ctx.frame.writer.client(), &namespace);
    let writer = &ctx.frame.writer;
    // 1. Deletion is its own path: nothing below runs.
    if let Some(deletion) = cleanup::deletion_of(&repo) {
        let inputs = ctx.gitlab_inputs(&secrets);
        return Ok(cleanup::cleanup(&repo, &namespace, inputs, ctx.frame.recorder.as_ref(), deletion).await?);
    }
    let mut report = Report::default();
    // 2. GitLab prepare: finalizer and key pair Secret, before the fetch needs them; a failure
    // is reported by step 13, never stops the Git apply.
    let prepared = gitlab::prepare(&repo, &namespace, ctx.gitlab_inputs(&secrets)).await;
    // 3. Observe (the revision fetched goes on the reconcile's span).
    let observed = observe::observe(&repo, &namespace, &ctx, &secrets).await?;
    tracing::Span::current().record("revision", observed.revision());
    // 4. The webhook's receiver path.
    report.webhook_path = observe::read_webhook_path(&secrets, &namespace, &repo).await?;
    // 5. Plan: the decision, sending only what changed since this process applied last.
    let mut plan = plan::plan(&repo, observed, jitter(&repo.spec)).skip_unchanged(ctx.applied.get(&key).as_deref());
    // 6. Dry run, all or nothing: a refusal leaves no intent, no apply and no prune.
    let dry_run = execute::dry_run(writer, &repo, &mut plan).await;
    // 7. Record intent, write-ahead: what the apply may create is in the inventory first.
    intent::record(writer, &namespace, &repo, &plan, &dry_run).await?;
    // 8. Commit status `pending` on the revision, before it is applied.
    let pending = gitlab::pending(&repo, &namespace, ctx.gitlab.as_ref(), &plan).await;
    // 9. Apply and prune.
    report.executed = execute::apply_and_prune(writer, &repo, &plan, dry_run).await;
    // 10. Remember what was applied, or forget it after a failed attempt.
    execute::remember(&ctx.applied, &key, &plan, &report.executed);
    // 11. The tenant's client could not even be built: nothing was sent, nothing is reported.
    if let Some(error) = report.executed.unsent() {
        return Err(Error::Apply(error));
    }
    // 12. Wait for health (spec.wait).
    report.waited = wait::wait(writer, &repo, &plan, &report.executed, Timestamp::now()).await;
    // 13. GitLab keys and hooks, whatever the apply did; never blocks or undoes it.
    report.gitlab = gitlab::sync(&repo, &namespace, ctx.gitlab_inputs(&secrets), prepared).await;
    // 14. Conclude, once: what the plan comes to after the apply and the health check.
    let concluded = concluded::conclude(&repo, &plan, &report.executed, &report.waited);
    // 15. Commit status verdict on what was concluded.
    report.commit_status = gitlab::verdict(pending, &repo, ctx.gitlab.as_ref(), &concluded).await;
    // 16. The tenant's SyncStatus and Events, whatever the apply did; never undoes it.
    let now = Time(Timestamp::now());
    report.sync_status = sync_status::step(&ctx, &repo, &namespace, &concluded, &report, &now).await;
    // 17. Summarize: every condition and the status.
    let status = summarize(&repo, &concluded, &report, &now);
    // 18. Write status, once; then readiness and the Event of a change of `Ready`.
    ctx.frame.finish(repo.as_ref(), &namespace, &status, repo.spec.suspend).await.map_err(Error::Status)?;
    // 19. Tell the observer what was applied.
    let applied = ctx.tell_observer(key, &report.executed, &status);
    // 20. The result: the apply's error (requeued by its class), or the requeue every step asks.
    if let Some(e) = report.executed.error {
        return Err(Error::Apply(e));
    }
    tracing::debug!(applied = applied.applied, pruned = applied.pruned, "reconciled");
    Ok(summarize::requeue(&concluded, &report).map_or_else(Action::await_change, Action::requeue))
}

/// Up to a tenth of the interval, varying between reconciles.
fn jitter(spec: &TenantRepositorySpec) -> Duration {
    let interval = interval_of(spec).unwrap_or(DEFAULT_INTERVAL);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    interval.mul_f64(f64::from(nanos % 1000) / 10_000.0)
}
