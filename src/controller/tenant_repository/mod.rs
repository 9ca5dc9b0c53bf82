//! The TenantRepository reconciler: fetch the tenant's repository, load its manifests under the
//! tenancy rules, server-side apply them as the tenant's ServiceAccount, record the inventory,
//! prune what left Git, sync the GitLab deploy key and webhook, and write status once.
//!
//! One file per step: [`observe`] reads (the registration's settings, its Secrets through
//! [`secrets`], the fetch, the policy, the load), [`plan`] decides (a pure function over what
//! was read), [`execute`] applies and prunes through the one writer, [`gitlab`] is the GitLab
//! step, and [`status`] computes and writes the status. [`reconcile`] runs them in order.
//! What the tenant reads of it all (their SyncStatus, Events, GitLab texts) passes
//! [`super::tenant_text`]'s allow-list.
//! Nothing is lost on failure: a fetch, load or validation failure applies and prunes nothing,
//! and the status keeps the last applied revision and the inventory. Objects new to the
//! inventory are recorded in it before they are applied ([`Plan::intent`]), so an apply cut
//! short by a crash or a lost Lease leaves nothing a later prune cannot see.

pub mod commit_status;
pub mod execute;
pub mod feedback;
pub mod gitlab;
pub mod load;
pub mod observe;
pub mod plan;
pub mod secrets;
pub mod status;
pub mod wait;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use tracing::Instrument;

use self::gitlab as gitlab_step;
use crate::api::tenant_repository::{TenantRepository, TenantRepositorySpec};
use crate::apply::applied::AppliedObjects;
use crate::apply::{WriteError, Writer};
use crate::controller::inputs::PolicySource;
use crate::error::{Class, Classify};
use crate::manifests;
use crate::source::Fetcher;

pub use crate::controller::conditions::Verdict;
pub use gitlab::GitLabStep;
pub use observe::Observed;
pub use plan::{Plan, Record, apply_schedule, fetch_schedule, objects_of, plan};
pub use secrets::SecretReads;
pub use status::next_status;

/// Condition: the repository was fetched at the requested ref.
pub const SOURCE_READY: &str = "SourceReady";
/// Condition: the whole set of the fetched revision is applied.
pub const APPLIED: &str = "Applied";

/// Condition reason: the step succeeded.
pub const REASON_SUCCEEDED: &str = "Succeeded";
/// Condition reason: the registration itself is wrong (ref, interval, Secret content).
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// Condition reason: the registration's credentials Secret does not exist (yet).
pub const REASON_SECRET_NOT_FOUND: &str = "SecretNotFound";
/// Condition reason: the platform policy ConfigMap cannot be read as a policy.
pub const REASON_INVALID_POLICY: &str = "InvalidPolicy";
/// Condition reason: a document of the fetched revision breaks a rule; every problem is listed.
pub const REASON_VALIDATION_FAILED: &str = "ValidationFailed";
/// Condition reason: the API server refused an object of the set.
pub const REASON_APPLY_FAILED: &str = "ApplyFailed";
/// Condition reason: the set was applied but an object that left Git could not be deleted.
pub const REASON_PRUNE_FAILED: &str = "PruneFailed";
/// Condition reason: `spec.suspend` is set; nothing is fetched or applied.
pub const REASON_SUSPENDED: &str = "Suspended";

pub use super::{STALLED_RESYNC, TRANSIENT_RETRY, WAIT_RETRY};
pub use crate::source::registration::{
    DEFAULT_INTERVAL, credentials_from_secret, interval_of, parse_go_duration, reference_of, timeout_of,
};

/// What the TenantRepository reconciler needs.
#[derive(Clone)]
pub struct Context {
    /// Sends every write (tenant applies and prunes as the tenant, status, finalizers, Secrets);
    /// its client (the controller's own) reads registrations, Secrets and the policy, and its
    /// discovery checks the kinds of a tenant's set.
    pub writer: Writer,
    /// Fetches repositories into the cache, with bounded concurrency.
    pub fetcher: Fetcher,
    /// The platform policy.
    pub policy: PolicySource,
    /// Bounds on the YAML read from a repository and on what loading a revision may produce.
    pub manifest_limits: manifests::Limits,
    /// Loads fetched revisions on threads of their own, a few at once.
    pub loader: load::Loader,
    /// Records Events on state changes (none in tests that do not look at them).
    pub recorder: Option<super::events::EventSink>,
    /// Told what a reconcile did, for metrics.
    pub observer: Option<ApplyObserver>,
    /// The GitLab syncer's settings; `None` when the controller runs without `--gitlab-url`
    /// (registrations with `spec.gitlab` then report `GitLabSynced=False`, `GitLabNotConfigured`).
    pub gitlab: Option<crate::gitlab::Settings>,
    /// Told the readiness of every status written, for `cdtarget_object_ready`.
    pub readiness: Option<crate::telemetry::ReadinessObserver>,
    /// The watch of SyncStatuses: with it, every reconcile keeps the registration's SyncStatus
    /// in the tenant namespace and records the tenant's Warning Events ([`feedback`]); without
    /// it (tests that do not look at them), neither.
    pub feedback: Option<feedback::Feedback>,
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
    /// ([`Context::with_policy`]).
    pub fn new(client: Client, fetcher: Fetcher, policy_namespace: &str, policy_name: &str) -> Self {
        Context {
            writer: Writer::new(client.clone()),
            fetcher,
            policy: PolicySource::Read { client, namespace: policy_namespace.to_owned(), name: policy_name.to_owned() },
            manifest_limits: manifests::Limits::default(),
            loader: load::Loader::default(),
            recorder: None,
            observer: None,
            gitlab: None,
            readiness: None,
            feedback: None,
            applied: AppliedObjects::default(),
        }
    }

    /// Keeps every registration's SyncStatus, read from `feedback`'s watch.
    pub fn with_feedback(mut self, feedback: feedback::Feedback) -> Self {
        self.feedback = Some(feedback);
        self
    }

    /// Tells `observer` the readiness of every status written.
    pub fn with_readiness(mut self, observer: crate::telemetry::ReadinessObserver) -> Self {
        self.readiness = Some(observer);
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

    /// Records Events through `recorder`.
    pub fn with_recorder(mut self, recorder: super::events::EventSink) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Reads the policy from `policy`.
    pub fn with_policy(mut self, policy: PolicySource) -> Self {
        self.policy = policy;
        self
    }

    /// Sends writes through `writer`.
    pub fn with_writer(mut self, writer: Writer) -> Self {
        self.writer = writer;
        self
    }

    /// Bounds the YAML read from a repository by `limits`.
    pub fn with_manifest_limits(mut self, limits: manifests::Limits) -> Self {
        self.manifest_limits = limits;
        self
    }

    fn gitlab_inputs<'a>(&'a self, secrets: &'a SecretReads) -> gitlab_step::Inputs<'a> {
        gitlab_step::Inputs {
            settings: self.gitlab.as_ref(),
            writer: &self.writer,
            secrets,
            recorder: self.recorder.as_ref(),
        }
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
    /// The GitLab step's own writes (finalizers, the key pair Secret) failed on deletion.
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

async fn reconcile_in(repo: Arc<TenantRepository>, ctx: Arc<Context>, namespace: String) -> Result<Action, Error> {
    let name = repo.name_any();
    let secrets = SecretReads::new(ctx.writer.client(), &namespace);
    if let Some(deletion) = gitlab_step::deletion_of(&repo) {
        return Ok(gitlab_step::finalize(&repo, &namespace, ctx.gitlab_inputs(&secrets), deletion).await?);
    }
    // Finalizer and key pair Secret: a failure here is reported by the sync step below (the
    // finalizer is added again on every pass), never stops the Git apply.
    let prepared = gitlab_step::prepare(&repo, &namespace, ctx.gitlab_inputs(&secrets)).await;

    let observed = observe::observe(&repo, &namespace, &ctx, &secrets).await?;
    if let Some(revision) = observed.revision() {
        tracing::Span::current().record("revision", revision);
    }
    let webhook = observe::read_webhook_path(&secrets, &namespace, &repo).await?;
    let key = format!("{namespace}/{name}");
    let plan = plan::plan(&repo, observed, jitter(&repo.spec)).skip_unchanged(ctx.applied.get(&key).as_deref());
    // All or nothing: what is to be sent is server-side dry-run as the tenant before anything
    // is written; a refusal leaves no intent, no apply and no prune (the plan says so).
    let (plan, checked) = execute::dry_run(&ctx.writer, &repo, plan).await;
    // Write-ahead: what the apply may create is in the inventory before it is created, or
    // nothing is applied (the reconcile fails and is retried).
    if let Some(intent) = &plan.intent {
        status::record_intent(&ctx.writer, &namespace, &repo, intent)
            .instrument(tracing::info_span!("intent"))
            .await
            .map_err(Error::Status)?;
    }

    // GitLab shows `pending` on the revision before it is applied (a failure only shows in
    // `CommitStatusPosted`).
    let commit_feedback = commit_status::before_apply(&repo, &namespace, ctx.gitlab.as_ref(), &plan).await;

    let (plan, executed) = execute::apply_and_prune(&ctx.writer, &repo, plan, checked).await;
    match (&executed.failure, &plan.digests) {
        // Whatever a failed attempt left on the cluster, the next one sends the whole set.
        (Some(_), _) => ctx.applied.forget(&key),
        (None, Some(digests)) if plan.record.is_some() => ctx.applied.remember(&key, digests.clone()),
        (None, _) => {}
    }
    // The tenant's client could not even be built: nothing was sent, nothing is reported.
    if let Some(WriteError::Impersonate { .. }) = &executed.failure {
        return Err(Error::Apply(executed.failure.expect("matched above")));
    }

    // spec.wait: Ready only once what was applied is healthy (kstatus).
    let (plan, health_check) =
        wait::wait(&ctx.writer, &repo, plan, &executed, Timestamp::now()).instrument(tracing::info_span!("wait")).await;

    // After the apply and whatever its outcome: a GitLab failure never blocks or undoes it.
    let step = match prepared {
        Ok(()) => gitlab_step::sync(&repo, &namespace, ctx.gitlab_inputs(&secrets)).await,
        Err(e) => Err(e),
    };
    let mut plan = plan.with_gitlab(step.unwrap_or_else(|e| Some(gitlab_step::cluster_failed(&e))));
    let commit_feedback = commit_status::after_apply(commit_feedback, &repo, ctx.gitlab.as_ref(), &plan).await;
    plan.requeue = commit_feedback.requeue(plan.requeue);
    let now = Time(Timestamp::now());
    let mut status = next_status(&repo, &plan, webhook, &now);
    status.health_check = health_check;
    commit_feedback.record(&mut status, repo.metadata.generation, &now);
    // The tenant's SyncStatus and Events: after the apply, whatever its outcome; a failed write
    // is reported in the registration's conditions and retried, never undoes anything.
    let mut sync_status_failed = false;
    if let Some(sync_statuses) = &ctx.feedback {
        let inputs = feedback::Inputs {
            repo: &repo,
            platform_namespace: &namespace,
            status: &status,
            plan: &plan,
            executed: &executed,
            previous: None,
            now: &now,
        };
        let outcome = feedback::report(sync_statuses, &ctx.writer, ctx.recorder.as_ref(), inputs)
            .instrument(tracing::info_span!("feedback"))
            .await;
        if let Err(error) = &outcome {
            tracing::warn!(%error, "writing the SyncStatus failed; retried");
            sync_status_failed = true;
        }
        feedback::record_outcome(&mut status, &outcome, &now);
    }
    let report = ApplyReport {
        registration: format!("{namespace}/{name}"),
        applied: executed.applied,
        pruned: executed.pruned,
        managed: status.inventory.len(),
    };
    let previous = repo.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let transition = super::events::transition(previous, &status.conditions);
    status::write(&ctx.writer, &namespace, &repo, &status)
        .instrument(tracing::info_span!("status"))
        .await
        .map_err(Error::Status)?;
    if let Some(observer) = &ctx.readiness {
        observer(crate::telemetry::Readiness::of(
            "TenantRepository",
            &namespace,
            &name,
            &status.conditions,
            repo.spec.suspend,
        ));
    }
    super::events::publish(ctx.recorder.as_ref(), repo.as_ref(), transition).await;
    if let Some(observer) = &ctx.observer {
        observer(&report);
    }
    if let Some(e) = executed.failure {
        return Err(Error::Apply(e));
    }
    tracing::debug!(applied = report.applied, pruned = report.pruned, "reconciled");
    let requeue = if sync_status_failed {
        Some(plan.requeue.map_or(TRANSIENT_RETRY, |r| r.min(TRANSIENT_RETRY)))
    } else {
        plan.requeue
    };
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Up to a tenth of the interval, varying between reconciles.
fn jitter(spec: &TenantRepositorySpec) -> Duration {
    let interval = interval_of(spec).unwrap_or(DEFAULT_INTERVAL);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    interval.mul_f64(f64::from(nanos % 1000) / 10_000.0)
}
