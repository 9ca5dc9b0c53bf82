//! The TenantRepository reconciler: fetch the tenant's repository, load its manifests under the
//! tenancy rules, server-side apply them as the tenant's ServiceAccount, record the inventory,
//! prune what left Git, and write status once.
//!
//! The decision (what to apply and prune, which conditions to report, when to come back) is
//! [`plan`], a pure function over what was read; [`reconcile`] only reads, calls it, and executes
//! the result. Nothing is lost on failure: a fetch, load or validation failure applies and prunes
//! nothing, and the status keeps the last applied revision and the inventory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::api::tenant_repository::{
    InventoryEntry, TenantRepository, TenantRepositorySpec, TenantRepositoryStatus, webhook_path, webhook_token,
};
use crate::apply::discovery::{self, Discovery};
use crate::apply::server_side::{self, ClientFor};
use crate::apply::{inventory_of, prune_plan};
use crate::controller::conditions::{self, Health, READY};
use crate::controller::gitlab_step::{self, GitLabStep};
use crate::gitlab;
use crate::manifests::{self, ApplySet, Content};
use crate::policy::Policy;
use crate::problem::Problem;
use crate::source::error::redact_userinfo;
use crate::source::{Credentials, FailureClass, Fetcher, Reference, Request, SourceError};

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

/// The poll interval when `spec.interval` is not set.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5 * 60);
pub use super::{STALLED_RESYNC, TRANSIENT_RETRY, WAIT_RETRY};

/// What the TenantRepository reconciler needs.
#[derive(Clone)]
pub struct Context {
    /// The controller's own client: reads registrations, Secrets and the policy; writes status.
    pub client: Client,
    /// The client acting as a tenant's ServiceAccount, for every apply and prune.
    pub client_for: ClientFor,
    /// The cluster's API discovery: which kinds are served, namespaced, and at which plural.
    pub discovery: Arc<Discovery>,
    /// Fetches repositories into the cache, with bounded concurrency.
    pub fetcher: Fetcher,
    /// Namespace of the policy ConfigMap (the controller's namespace).
    pub policy_namespace: String,
    /// Name of the policy ConfigMap.
    pub policy_name: String,
    /// Bounds on the YAML read from a repository.
    pub manifest_limits: manifests::Limits,
    /// Records Events on state changes (none in tests that do not look at them).
    pub recorder: Option<kube::runtime::events::Recorder>,
    /// Told what a reconcile did, for metrics.
    pub observer: Option<ApplyObserver>,
    /// The GitLab syncer's settings; `None` when the controller runs without `--gitlab-url`
    /// (registrations with `spec.gitlab` then report `GitLabSynced=False`, `GitLabNotConfigured`).
    pub gitlab: Option<GitLabSettings>,
}

/// What the controller needs to manage deploy keys and webhooks on GitLab.
#[derive(Clone)]
pub struct GitLabSettings {
    /// The REST client with the bot token (shared by every registration: one rate-limit gate).
    pub client: gitlab::GitLabClient,
    /// Where GitLab reaches the receiver (`--webhook-external-url`), e.g. `https://cd.example.com`.
    pub webhook_external_url: String,
    /// The pinned host keys of the GitLab SSH server, written as `known_hosts` into generated
    /// Secrets (never learnt from the server).
    pub known_hosts: String,
}

impl std::fmt::Debug for GitLabSettings {
    /// The client (and its token) is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitLabSettings")
            .field("webhook_external_url", &self.webhook_external_url)
            .field("known_hosts", &self.known_hosts)
            .finish_non_exhaustive()
    }
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
    /// A context whose tenant clients impersonate over the controller's own `client`.
    pub fn new(client: Client, fetcher: Fetcher, policy_namespace: &str, policy_name: &str) -> Self {
        Context {
            client_for: server_side::impersonating(client.clone()),
            discovery: Arc::new(Discovery::new(client.clone())),
            client,
            fetcher,
            policy_namespace: policy_namespace.to_owned(),
            policy_name: policy_name.to_owned(),
            manifest_limits: manifests::Limits::default(),
            recorder: None,
            observer: None,
            gitlab: None,
        }
    }

    /// Manages deploy keys and webhooks of registrations with `spec.gitlab` through `settings`.
    pub fn with_gitlab(mut self, settings: GitLabSettings) -> Self {
        self.gitlab = Some(settings);
        self
    }

    /// Reports what every reconcile did to `observer`.
    pub fn with_observer(mut self, observer: ApplyObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Records Events through `recorder`.
    pub fn with_recorder(mut self, recorder: kube::runtime::events::Recorder) -> Self {
        self.recorder = Some(recorder);
        self
    }
}

// === impl Error ===

/// How an error is handled (Flux's classes): it decides the condition and the requeue.
pub use crate::controller::cdtarget::ErrorClass;

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
    /// The impersonating client could not be built.
    #[error("building the client for {user}: {source}")]
    Impersonate {
        /// The impersonated user.
        user: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Applying or pruning an object failed.
    #[error(transparent)]
    Apply(#[from] server_side::ApplyError),
    /// Writing an object (finalizers, the key pair Secret) failed.
    #[error("{what} {name}: {source}")]
    Write {
        /// What was being written.
        what: &'static str,
        /// `namespace/name`.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing status failed.
    #[error("writing the status of TenantRepository {name}: {source}")]
    Status {
        /// `namespace/name`.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        let source = match self {
            Error::NotNamespaced(_) => return ErrorClass::Stalled,
            Error::Read { source, .. }
            | Error::Impersonate { source, .. }
            | Error::Status { source, .. }
            | Error::Write { source, .. }
            | Error::Apply(server_side::ApplyError { source, .. }) => source,
        };
        api_error_class(source)
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NotNamespaced(_) => "not_namespaced",
            Error::Read { .. } => "read",
            Error::Impersonate { .. } => "impersonate",
            Error::Apply(e) if e.verb == server_side::DELETING => "prune",
            Error::Apply(_) => "apply",
            Error::Status { .. } => "status",
            Error::Write { .. } => "write",
        }
    }
}

fn api_error_class(error: &kube::Error) -> ErrorClass {
    match error {
        // The tenant's object was refused as invalid: only a new commit helps.
        kube::Error::Api(status) if status.code == 400 || status.code == 422 => ErrorClass::Stalled,
        // Missing permissions of the ServiceAccount, or a kind that is not installed.
        kube::Error::Api(status) if status.code == 403 || status.code == 404 => ErrorClass::Waiting,
        _ => ErrorClass::Transient,
    }
}

/// The requeue after a failed reconcile, chosen by the error's class.
pub fn error_policy(repo: Arc<TenantRepository>, error: &Error, _ctx: Arc<Context>) -> Action {
    match error.class() {
        ErrorClass::Stalled | ErrorClass::Waiting => {
            Action::requeue(interval_of(&repo.spec).unwrap_or(DEFAULT_INTERVAL))
        }
        ErrorClass::Transient => Action::requeue(TRANSIENT_RETRY),
    }
}

// === the pure parts: registration, credentials ===

/// What to check out: exactly one of `branch`, `tag` or `commit`; the branch `main` by default.
pub fn reference_of(spec: &TenantRepositorySpec) -> Result<Reference, String> {
    let Some(git_ref) = &spec.git_ref else { return Ok(Reference::Branch("main".into())) };
    let given = |value: &Option<String>| value.as_deref().filter(|v| !v.is_empty()).map(str::to_owned);
    match (given(&git_ref.branch), given(&git_ref.tag), given(&git_ref.commit)) {
        (None, None, None) => Ok(Reference::Branch("main".into())),
        (Some(branch), None, None) => Ok(Reference::Branch(branch)),
        (None, Some(tag), None) => Ok(Reference::Tag(tag)),
        (None, None, Some(commit)) if commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Reference::Commit(commit.to_ascii_lowercase()))
        }
        (None, None, Some(_)) => Err("spec.ref.commit: expected a full 40-character commit SHA".into()),
        _ => Err("spec.ref: set exactly one of branch, tag or commit".into()),
    }
}

/// `spec.interval` as a duration (`DEFAULT_INTERVAL` when absent).
pub fn interval_of(spec: &TenantRepositorySpec) -> Result<Duration, String> {
    match spec.interval.as_deref() {
        None | Some("") => Ok(DEFAULT_INTERVAL),
        Some(text) => match parse_go_duration(text) {
            Some(d) if !d.is_zero() => Ok(d),
            _ => Err(format!("spec.interval: `{text}` is not a positive duration such as `30s`, `5m` or `1h30m`")),
        },
    }
}

/// `spec.timeout`: the bound on one fetch of this registration; `None` leaves the controller's
/// `--git-timeout`.
pub fn timeout_of(spec: &TenantRepositorySpec) -> Result<Option<Duration>, String> {
    match spec.timeout.as_deref() {
        None | Some("") => Ok(None),
        Some(text) => match parse_go_duration(text) {
            Some(d) if !d.is_zero() => Ok(Some(d)),
            _ => Err(format!("spec.timeout: `{text}` is not a positive duration such as `30s`, `2m` or `1m30s`")),
        },
    }
}

/// Parses a Go duration made of `<number><unit>` parts, units `ms`, `s`, `m`, `h`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let (seconds, unit_len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else {
            return None;
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Git credentials from a Secret with Flux's key names: `identity` (SSH private key, with
/// optional `identity.passphrase`) and `known_hosts`; or `username` and `password`; or
/// `bearerToken`; and an optional `ca.crt` for HTTPS. A Secret with none of them means no
/// credentials. Messages name the missing or unreadable keys, never a value.
pub fn credentials_from_secret(data: &BTreeMap<String, ByteString>) -> Result<(Credentials, Option<String>), String> {
    let text = |key: &str| -> Result<Option<String>, String> {
        match data.get(key) {
            None => Ok(None),
            Some(value) if value.0.is_empty() => Ok(None),
            Some(value) => String::from_utf8(value.0.clone())
                .map(Some)
                .map_err(|_| format!("key `{key}` of the Secret is not UTF-8 text")),
        }
    };
    let ca_bundle = text("ca.crt")?;
    let credentials = if let Some(private_key) = text("identity")? {
        let known_hosts = text("known_hosts")?.ok_or_else(|| {
            "the Secret has `identity` but no `known_hosts`: add the server's host keys (ssh-keyscan), there is no trust on first use"
                .to_owned()
        })?;
        Credentials::Ssh { private_key, passphrase: text("identity.passphrase")?, known_hosts }
    } else if let Some(username) = text("username")? {
        let password = text("password")?
            .ok_or_else(|| "the Secret has `username` but no `password` (or token) beside it".to_owned())?;
        Credentials::Basic { username, password }
    } else if text("password")?.is_some() {
        return Err("the Secret has `password` but no `username` beside it".into());
    } else if let Some(token) = text("bearerToken")? {
        Credentials::token(&token)
    } else if text("known_hosts")?.is_some() || text("identity.passphrase")?.is_some() {
        return Err("the Secret has SSH settings but no `identity` (the private key)".into());
    } else {
        Credentials::None
    };
    Ok((credentials, ca_bundle))
}

// === the pure decision ===

/// What one reconcile read, step by step, up to the first failure.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    /// `spec.suspend` is set: nothing was read.
    Suspended,
    /// The registration is wrong (ref, interval, path rules, Secret content); nothing was fetched.
    InvalidSpec(String),
    /// The credentials Secret (named here) does not exist; nothing was fetched.
    SecretNotFound(String),
    /// The fetch (or reading `spec.path` of the snapshot) failed.
    FetchFailed(SourceError),
    /// The revision was fetched but the platform policy is invalid, so nothing can be loaded.
    InvalidPolicy {
        /// The fetched commit.
        revision: String,
        /// What is wrong with the policy.
        problems: Vec<Problem>,
    },
    /// The revision was fetched and loaded: the apply set, or every problem of every document.
    Fetched {
        /// The fetched commit.
        revision: String,
        /// The load's outcome (all or nothing).
        load: Result<ApplySet, Vec<Problem>>,
    },
}

/// One of the reconciler's own conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `True` or `False`.
    pub ok: bool,
    /// Condition reason.
    pub reason: String,
    /// What happened.
    pub message: String,
}

impl Verdict {
    fn new(ok: bool, reason: &str, message: impl Into<String>) -> Self {
        Verdict { ok, reason: reason.to_owned(), message: message.into() }
    }
}

/// What one reconcile decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The overall health; `None` while suspended (`Ready` then keeps its status).
    pub health: Option<Health>,
    /// `SourceReady`; `None` leaves it as it is.
    pub source_ready: Option<Verdict>,
    /// `Applied`; `None` leaves it as it is.
    pub applied: Option<Verdict>,
    /// The objects to server-side apply, in order; `None` applies nothing.
    pub apply: Option<Vec<Value>>,
    /// The set was applied before (same revision, same rendered set): `apply` holds it, but only
    /// objects whose live copy no longer holds what Git says are sent (drift is repaired, an
    /// unchanged cycle writes nothing).
    pub only_drifted: bool,
    /// The objects to delete (they left Git), dependents first.
    pub prune: Vec<InventoryEntry>,
    /// The commit fetched, when one was.
    pub fetched_revision: Option<String>,
    /// The record to keep once `apply` and `prune` succeeded; `None` keeps the previous one.
    pub record: Option<Record>,
    /// When to reconcile again; `None` waits for a change of the registration.
    pub requeue: Option<Duration>,
    /// The GitLab step's report (`GitLabSynced`, `status.gitlab`); `None` for a registration
    /// without `spec.gitlab`. Set by [`Plan::with_gitlab`] after the apply.
    pub gitlab: Option<GitLabStep>,
}

/// What status records of an applied set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The applied commit.
    pub revision: String,
    /// Digest of the applied objects.
    pub digest: String,
    /// Every applied object.
    pub inventory: Vec<InventoryEntry>,
}

/// Decides what to do with `repo` given what was read. `jitter` is added to the interval so that
/// registrations created together do not poll together.
pub fn plan(repo: &TenantRepository, observed: Observed, jitter: Duration) -> Plan {
    let status = repo.status.clone().unwrap_or_default();
    let interval = interval_of(&repo.spec).unwrap_or(DEFAULT_INTERVAL) + jitter;
    let nothing = |health: Health, source_ready: Option<Verdict>, applied: Option<Verdict>, requeue| Plan {
        health: Some(health),
        source_ready,
        applied,
        apply: None,
        only_drifted: false,
        prune: Vec::new(),
        fetched_revision: None,
        record: None,
        requeue: Some(requeue),
        gitlab: None,
    };

    match observed {
        Observed::Suspended => Plan {
            health: None,
            source_ready: None,
            applied: None,
            apply: None,
            only_drifted: false,
            prune: Vec::new(),
            fetched_revision: None,
            record: None,
            requeue: None,
            gitlab: None,
        },
        Observed::InvalidSpec(message) => {
            let verdict = Verdict::new(false, REASON_INVALID_SPEC, &message);
            nothing(stalled(REASON_INVALID_SPEC, message), Some(verdict), None, STALLED_RESYNC)
        }
        Observed::SecretNotFound(name) => {
            let message = format!("waiting for the credentials Secret {name}");
            let verdict = Verdict::new(false, REASON_SECRET_NOT_FOUND, &message);
            let health = Health::Progressing { reason: REASON_SECRET_NOT_FOUND.into(), message };
            nothing(health, Some(verdict), None, WAIT_RETRY)
        }
        Observed::FetchFailed(error) => {
            let reason = error.kind.reason();
            let message = format!("fetching {}: {}", redact_userinfo(&repo.spec.url), error.message);
            let verdict = Some(Verdict::new(false, reason, &message));
            match error.kind.class() {
                FailureClass::Stalled => nothing(stalled(reason, message), verdict, None, STALLED_RESYNC),
                FailureClass::Waiting => nothing(progressing(reason, message), verdict, None, interval),
                FailureClass::Transient => nothing(progressing(reason, message), verdict, None, TRANSIENT_RETRY),
            }
        }
        Observed::InvalidPolicy { revision, problems } => {
            let message = format!("the platform policy is invalid (ask a cluster admin): {}", list(&problems));
            let source = Verdict::new(true, REASON_SUCCEEDED, fetched_message(&revision));
            let applied = Verdict::new(false, REASON_INVALID_POLICY, &message);
            let mut plan = nothing(stalled(REASON_INVALID_POLICY, message), Some(source), Some(applied), interval);
            plan.fetched_revision = Some(revision);
            plan
        }
        Observed::Fetched { revision, load: Err(problems) } => {
            let message = format!("revision {} was not applied: {}", short(&revision), list(&problems));
            let source = Verdict::new(true, REASON_SUCCEEDED, fetched_message(&revision));
            let applied = Verdict::new(false, REASON_VALIDATION_FAILED, &message);
            // A tenant fixes this with a push, which the next poll (or the webhook) picks up.
            let mut plan = nothing(stalled(REASON_VALIDATION_FAILED, message), Some(source), Some(applied), interval);
            plan.fetched_revision = Some(revision);
            plan
        }
        Observed::Fetched { revision, load: Ok(set) } => {
            let namespace = repo.spec.target_namespace.as_str();
            let objects = objects_of(&set, namespace);
            let inventory = inventory_of(&objects);
            let digest = server_side::digest(&objects);
            let unchanged = status.last_applied_revision.as_deref() == Some(revision.as_str())
                && status.last_applied_digest.as_deref() == Some(digest.as_str());
            let prune = if repo.spec.prune {
                // Only what this registration applied, and only in its own target namespace.
                let previous: Vec<InventoryEntry> =
                    status.inventory.iter().filter(|e| e.namespace == namespace).cloned().collect();
                prune_plan(&previous, &inventory)
            } else {
                Vec::new()
            };
            let message =
                format!("applied {} objects of revision {} into {namespace}", objects.len(), short(&revision));
            Plan {
                health: Some(Health::Ready { reason: REASON_SUCCEEDED.into(), message: message.clone() }),
                source_ready: Some(Verdict::new(true, REASON_SUCCEEDED, fetched_message(&revision))),
                applied: Some(Verdict::new(true, REASON_SUCCEEDED, message)),
                apply: Some(objects),
                only_drifted: unchanged,
                prune,
                fetched_revision: Some(revision.clone()),
                record: Some(Record { revision, digest, inventory }),
                requeue: Some(interval),
                gitlab: None,
            }
        }
    }
}

impl Plan {
    /// The plan with the GitLab step's report; a transient GitLab failure brings the next
    /// reconcile forward, and so does a failed fetch in the pass that just put the deploy key on
    /// GitLab (the first fetch of a new registration runs before its key is registered).
    /// Nothing else of the plan changes.
    pub fn with_gitlab(mut self, step: Option<GitLabStep>) -> Plan {
        let fetch_failed = self.source_ready.as_ref().is_some_and(|v| !v.ok);
        let key_just_registered = step.as_ref().is_some_and(|s| s.changed && s.verdict.ok);
        if fetch_failed && key_just_registered {
            self.requeue = Some(self.requeue.map_or(TRANSIENT_RETRY, |r| r.min(TRANSIENT_RETRY)));
        }
        if let Some(sooner) = step.as_ref().and_then(|s| s.requeue) {
            self.requeue = Some(self.requeue.map_or(sooner, |r| r.min(sooner)));
        }
        self.gitlab = step;
        self
    }

    /// The plan after the API server refused an object of the set: nothing is pruned, the
    /// previous revision stays recorded, and the inventory also holds what this attempt may
    /// have created, so that nothing escapes a later prune.
    pub fn apply_failed(mut self, repo: &TenantRepository, message: String, class: ErrorClass) -> Plan {
        let previous = repo.status.clone().unwrap_or_default();
        let attempted = self.record.take().map(|r| r.inventory).unwrap_or_default();
        let inventory = union(&previous.inventory, &attempted);
        self.record = previous
            .last_applied_revision
            .clone()
            .map(|revision| Record {
                revision,
                digest: previous.last_applied_digest.clone().unwrap_or_default(),
                inventory: inventory.clone(),
            })
            .or(Some(Record { revision: String::new(), digest: String::new(), inventory }));
        self.failed(REASON_APPLY_FAILED, message, class)
    }

    /// The plan after the set was applied but deleting an object that left Git failed: the
    /// applied revision is recorded, and the objects not deleted stay in the inventory so the
    /// next cycle deletes them.
    pub fn prune_failed(mut self, message: String, class: ErrorClass) -> Plan {
        if let Some(record) = &mut self.record {
            record.inventory = union(&record.inventory, &self.prune);
        }
        self.failed(REASON_PRUNE_FAILED, message, class)
    }

    fn failed(mut self, reason: &str, message: String, class: ErrorClass) -> Plan {
        self.applied = Some(Verdict::new(false, reason, &message));
        self.apply = None;
        self.only_drifted = false;
        self.prune = Vec::new();
        let (health, requeue) = match class {
            ErrorClass::Stalled => (stalled(reason, message), self.requeue),
            ErrorClass::Waiting => (progressing(reason, message), self.requeue),
            ErrorClass::Transient => (progressing(reason, message), Some(TRANSIENT_RETRY)),
        };
        self.health = Some(health);
        self.requeue = requeue;
        self
    }
}

/// The objects of `set` as they are sent: every document with its namespace, in apply order.
pub fn objects_of(set: &ApplySet, namespace: &str) -> Vec<Value> {
    set.documents
        .iter()
        .map(|document| {
            let mut value = match &document.content {
                Content::CDTarget(target) => {
                    let mut value = serde_json::to_value(target.as_ref()).unwrap_or_default();
                    if let Some(object) = value.as_object_mut() {
                        object.remove("status");
                    }
                    value
                }
                Content::Object(value) => value.clone(),
            };
            if let Some(metadata) = value.pointer_mut("/metadata").and_then(Value::as_object_mut) {
                metadata.insert("namespace".into(), Value::String(namespace.to_owned()));
            }
            value
        })
        .collect()
}

fn union(a: &[InventoryEntry], b: &[InventoryEntry]) -> Vec<InventoryEntry> {
    a.iter().chain(b).cloned().collect::<BTreeSet<_>>().into_iter().collect()
}

fn stalled(reason: &str, message: String) -> Health {
    Health::Stalled { reason: reason.into(), message }
}

fn progressing(reason: &str, message: String) -> Health {
    Health::Progressing { reason: reason.into(), message }
}

fn fetched_message(revision: &str) -> String {
    format!("fetched revision {revision}")
}

fn short(revision: &str) -> &str {
    revision.get(..12).unwrap_or(revision)
}

/// `file:doc: field: message; …`.
fn list(problems: &[Problem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

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
    status
}

// === the I/O ===

/// Reconciles one TenantRepository (see the module documentation).
pub async fn reconcile(repo: Arc<TenantRepository>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = repo.name_any();
    let namespace = repo.namespace().ok_or_else(|| Error::NotNamespaced(name.clone()))?;
    if let Some(deletion) = gitlab_step::deletion_of(&repo) {
        return gitlab_step::finalize(&repo, &namespace, &ctx, deletion).await;
    }
    // Finalizer and key pair Secret: a failure here is reported by the sync step below (the
    // finalizer is added again on every pass), never stops the Git apply.
    let secrets = SecretReads::new(&ctx.client, &namespace);
    let prepared = gitlab_step::prepare(&repo, &namespace, &ctx, &secrets).await;

    let observed = observe(&repo, &namespace, &ctx, &secrets).await?;
    let webhook = read_webhook_path(&secrets, &namespace, &repo).await?;
    let mut plan = plan(&repo, observed, jitter(&repo.spec));

    let mut failure = None;
    let mut report = ApplyReport { registration: format!("{namespace}/{name}"), ..ApplyReport::default() };
    if plan.apply.is_some() || !plan.prune.is_empty() {
        let user = server_side::service_account_user(&repo.spec.target_namespace, &repo.spec.service_account_name);
        let tenant = (ctx.client_for)(&user).map_err(|source| Error::Impersonate { user: user.clone(), source })?;
        if plan.only_drifted
            && let Some(objects) = plan.apply.take()
        {
            let drifted = server_side::drifted(&tenant, &ctx.discovery, objects).await;
            plan.apply = (!drifted.is_empty()).then_some(drifted);
        }
        if let Some(objects) = &plan.apply
            && let Err(e) = server_side::apply_all(&tenant, &ctx.discovery, objects).await
        {
            let class = api_error_class(&e.source);
            plan = plan.apply_failed(&repo, format!("{e} (as {user})"), class);
            failure = Some(e);
        }
        if failure.is_none() {
            report.applied = plan.apply.as_ref().map_or(0, Vec::len);
        }
        if failure.is_none()
            && let Err(e) = server_side::delete_all(&tenant, &ctx.discovery, &plan.prune).await
        {
            let class = api_error_class(&e.source);
            plan = plan.prune_failed(format!("{e} (as {user})"), class);
            failure = Some(e);
        }
        if failure.is_none() {
            report.pruned = plan.prune.len();
        }
    }

    // After the apply and whatever its outcome: a GitLab failure never blocks or undoes it.
    let step = match prepared {
        Ok(()) => gitlab_step::sync(&repo, &namespace, &ctx, &secrets).await,
        Err(e) => Err(e),
    };
    plan = plan.with_gitlab(step.unwrap_or_else(|e| Some(gitlab_step::cluster_failed(&e))));
    let status = next_status(&repo, &plan, webhook, &Time(Timestamp::now()));
    report.managed = status.inventory.len();
    let previous = repo.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let transition = super::events::transition(previous, &status.conditions);
    write_status(&ctx.client, &namespace, &repo, status).await?;
    super::events::publish(ctx.recorder.as_ref(), repo.as_ref(), transition).await;
    if let Some(observer) = &ctx.observer {
        observer(&report);
    }
    if let Some(e) = failure {
        return Err(e.into());
    }
    Ok(plan.requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Reads what the plan needs, stopping at the first step that fails.
async fn observe(
    repo: &TenantRepository,
    namespace: &str,
    ctx: &Context,
    secrets: &SecretReads,
) -> Result<Observed, Error> {
    if repo.spec.suspend {
        return Ok(Observed::Suspended);
    }
    let checked = reference_of(&repo.spec)
        .and_then(|r| interval_of(&repo.spec).map(|_| r))
        .and_then(|r| timeout_of(&repo.spec).map(|timeout| (r, timeout)));
    let (reference, timeout) = match checked {
        Ok(checked) => checked,
        Err(message) => return Ok(Observed::InvalidSpec(message)),
    };
    let (credentials, ca_bundle) = match &repo.spec.secret_ref {
        None => (Credentials::None, None),
        Some(secret_ref) => match secrets.data(&secret_ref.name).await? {
            None => return Ok(Observed::SecretNotFound(format!("{namespace}/{}", secret_ref.name))),
            Some(data) => match credentials_from_secret(&data) {
                Ok(found) => found,
                Err(message) => {
                    return Ok(Observed::InvalidSpec(format!("Secret {namespace}/{}: {message}", secret_ref.name)));
                }
            },
        },
    };
    let request = Request { url: repo.spec.url.clone(), reference, credentials, ca_bundle };
    let key = format!("{namespace}/{}", repo.name_any());
    let fetched = match ctx.fetcher.fetch_within(&key, request, timeout).await {
        Ok(fetched) => fetched,
        Err(error) => return Ok(Observed::FetchFailed(error)),
    };
    let snapshot = fetched.snapshot();
    let revision = snapshot.revision.clone();
    let dir = match snapshot.dir(repo.spec.path.as_deref()) {
        Ok(dir) => dir,
        Err(error) => return Ok(Observed::FetchFailed(error)),
    };
    let policy = match read_policy(ctx).await? {
        Ok(policy) => policy,
        Err(problems) => return Ok(Observed::InvalidPolicy { revision, problems }),
    };
    let limits = ctx.manifest_limits;
    let target_namespace = repo.spec.target_namespace.clone();
    // Reading and checking a tree is blocking file work and CPU: keep it off the runtime.
    let load = tokio::task::spawn_blocking(move || {
        manifests::read_tree(&dir, &limits).and_then(|files| manifests::load(files, &target_namespace, &policy))
    })
    .await
    .unwrap_or_else(|e| Err(vec![Problem::field("", format!("loading the tree failed: {e}"))]));
    // Scope and kind by the cluster's own discovery, before anything is applied.
    let load = match load {
        Ok(set) => {
            let problems = discovery::check_set(&ctx.discovery, &set).await.map_err(|source| Error::Read {
                kind: "API discovery",
                name: "/api, /apis".into(),
                source,
            })?;
            if problems.is_empty() { Ok(set) } else { Err(problems) }
        }
        Err(problems) => Err(problems),
    };
    Ok(Observed::Fetched { revision, load })
}

/// The Secrets of the registration's namespace as read during one reconcile: each is fetched
/// from the API server once, however many steps need it (credentials, webhook token, GitLab).
pub struct SecretReads {
    client: Client,
    namespace: String,
    read: std::sync::Mutex<BTreeMap<String, Option<Secret>>>,
}

impl SecretReads {
    /// Nothing read yet from `namespace`.
    pub fn new(client: &Client, namespace: &str) -> Self {
        SecretReads { client: client.clone(), namespace: namespace.to_owned(), read: Default::default() }
    }

    /// Secret `name`, read once.
    pub async fn get(&self, name: &str) -> Result<Option<Secret>, Error> {
        if let Some(read) = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(name) {
            return Ok(read.clone());
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret = api.get_opt(name).await.map_err(|source| Error::Read {
            kind: "Secret",
            name: format!("{}/{name}", self.namespace),
            source,
        })?;
        self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.to_owned(), secret.clone());
        Ok(secret)
    }

    /// The data of Secret `name`, read once.
    pub async fn data(&self, name: &str) -> Result<Option<BTreeMap<String, ByteString>>, Error> {
        Ok(self.get(name).await?.map(|s| s.data.unwrap_or_default()))
    }

    /// Forgets Secret `name` after this reconcile wrote it, so the next step reads what was written.
    pub fn forget(&self, name: &str) {
        self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(name);
    }
}

/// The receiver path, when the registration has a webhook whose Secret holds a `token`.
async fn read_webhook_path(
    secrets: &SecretReads,
    namespace: &str,
    repo: &TenantRepository,
) -> Result<Option<String>, Error> {
    let Some(webhook) = &repo.spec.webhook else { return Ok(None) };
    let data = secrets.data(&webhook.secret_ref.name).await?;
    let token = data.as_ref().and_then(|d| d.get("token")).and_then(|t| webhook_token(&t.0));
    Ok(token.map(|t| webhook_path(t, &repo.name_any(), namespace)))
}

/// The policy ConfigMap: absent means the documented defaults.
async fn read_policy(ctx: &Context) -> Result<Result<Policy, Vec<Problem>>, Error> {
    super::read_policy(&ctx.client, &ctx.policy_namespace, &ctx.policy_name).await.map_err(|source| Error::Read {
        kind: "ConfigMap",
        name: format!("{}/{}", ctx.policy_namespace, ctx.policy_name),
        source,
    })
}

/// Up to a tenth of the interval, varying between reconciles.
fn jitter(spec: &TenantRepositorySpec) -> Duration {
    let interval = interval_of(spec).unwrap_or(DEFAULT_INTERVAL);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    interval.mul_f64(f64::from(nanos % 1000) / 10_000.0)
}

/// Writes status once, only when it changed.
async fn write_status(
    client: &Client,
    namespace: &str,
    repo: &TenantRepository,
    status: TenantRepositoryStatus,
) -> Result<(), Error> {
    super::write_status(client, namespace, repo, repo.status.as_ref(), &status)
        .await
        .map_err(|source| Error::Status { name: format!("{namespace}/{}", repo.name_any()), source })
}

#[cfg(test)]
mod tests {
    use crate::api::tenant_repository::GitRef;
    use crate::source::FailureKind;

    use super::*;

    fn bytes(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec()))).collect()
    }

    fn repo(prune: bool, status: Option<TenantRepositoryStatus>) -> TenantRepository {
        let spec = TenantRepositorySpec {
            url: "file:///repo.git".into(),
            target_namespace: "team-a".into(),
            service_account_name: "deployer".into(),
            interval: Some("1m".into()),
            prune,
            ..TenantRepositorySpec::default()
        };
        let mut repo = TenantRepository::new("team-a-repo", spec);
        repo.status = status;
        repo
    }

    fn config_map(name: &str) -> ApplySet {
        let value = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "team-a"}});
        let document =
            manifests::Document { file: "a.yaml".into(), index: 1, line: 1, content: Content::Object(value) };
        ApplySet { documents: vec![document] }
    }

    fn entry(name: &str) -> InventoryEntry {
        InventoryEntry {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "team-a".into(),
            name: name.into(),
        }
    }

    #[test]
    fn ssh_secret_needs_known_hosts_and_the_message_holds_no_value() {
        let error = credentials_from_secret(&bytes(&[("identity", "PRIVATE-KEY-MATERIAL")])).unwrap_err();
        assert!(error.contains("known_hosts") && !error.contains("PRIVATE"), "{error}");
        let (credentials, ca) =
            credentials_from_secret(&bytes(&[("identity", "k"), ("known_hosts", "h"), ("ca.crt", "pem")])).unwrap();
        assert!(matches!(credentials, Credentials::Ssh { passphrase: None, .. }));
        assert_eq!(ca.as_deref(), Some("pem"));
    }

    #[test]
    fn https_secrets_take_basic_or_bearer_credentials() {
        let (basic, _) = credentials_from_secret(&bytes(&[("username", "u"), ("password", "p")])).unwrap();
        assert_eq!(basic, Credentials::Basic { username: "u".into(), password: "p".into() });
        let (token, _) = credentials_from_secret(&bytes(&[("bearerToken", "glpat-x")])).unwrap();
        assert_eq!(token, Credentials::token("glpat-x"));
        assert!(credentials_from_secret(&bytes(&[("username", "u")])).unwrap_err().contains("password"));
        assert_eq!(credentials_from_secret(&bytes(&[])).unwrap().0, Credentials::None);
    }

    #[test]
    fn reference_is_exactly_one_of_branch_tag_or_commit() {
        let mut spec = repo(true, None).spec;
        assert_eq!(reference_of(&spec), Ok(Reference::Branch("main".into())));
        spec.git_ref = Some(GitRef { tag: Some("v1".into()), ..GitRef::default() });
        assert_eq!(reference_of(&spec), Ok(Reference::Tag("v1".into())));
        spec.git_ref = Some(GitRef { branch: Some("a".into()), tag: Some("v1".into()), commit: None });
        assert!(reference_of(&spec).unwrap_err().contains("exactly one"));
        spec.git_ref = Some(GitRef { commit: Some("abc".into()), ..GitRef::default() });
        assert!(reference_of(&spec).is_err());
    }

    #[test]
    fn go_durations_are_parsed() {
        assert_eq!(parse_go_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration("5d"), None);
    }

    #[test]
    fn first_apply_applies_records_and_requeues_at_the_interval_with_jitter() {
        let plan = plan(
            &repo(true, None),
            Observed::Fetched { revision: "abc".into(), load: Ok(config_map("a")) },
            Duration::from_secs(3),
        );
        assert_eq!(plan.apply.as_ref().map(Vec::len), Some(1));
        assert_eq!(plan.record.as_ref().unwrap().inventory, [entry("a")]);
        assert_eq!(plan.requeue, Some(Duration::from_secs(63)));
        assert!(matches!(plan.health, Some(Health::Ready { .. })));
    }

    #[test]
    fn a_fetch_refused_in_the_pass_that_registered_the_deploy_key_comes_back_soon() {
        let refused = || {
            plan(
                &repo(true, None),
                Observed::FetchFailed(SourceError::new(FailureKind::AuthenticationFailed, "denied")),
                Duration::ZERO,
            )
        };
        let synced = |changed| GitLabStep {
            verdict: Verdict::new(true, gitlab::REASON_SYNCED, "ok"),
            status: None,
            requeue: None,
            changed,
        };
        assert_eq!(refused().requeue, Some(STALLED_RESYNC), "a refused fetch alone stalls");
        assert_eq!(refused().with_gitlab(Some(synced(true))).requeue, Some(TRANSIENT_RETRY));
        assert_eq!(refused().with_gitlab(Some(synced(false))).requeue, Some(STALLED_RESYNC));
    }

    #[test]
    fn a_failed_fetch_names_the_url_without_its_userinfo() {
        let mut repo = repo(true, None);
        repo.spec.url = "https://oauth2:glpat-in-the-url@gitlab.example.com/team/app.git".into();
        let error = SourceError::new(FailureKind::Unreachable, "connection refused");
        let plan = plan(&repo, Observed::FetchFailed(error), Duration::ZERO);
        let message = plan.source_ready.expect("SourceReady").message;
        assert_eq!(message, "fetching https://***@gitlab.example.com/team/app.git: connection refused");
    }

    #[test]
    fn timeout_is_optional_and_must_be_a_positive_duration() {
        let mut spec = TenantRepositorySpec::default();
        assert_eq!(timeout_of(&spec), Ok(None));
        spec.timeout = Some("1m30s".into());
        assert_eq!(timeout_of(&spec), Ok(Some(Duration::from_secs(90))));
        for bad in ["0s", "soon", "-5s"] {
            spec.timeout = Some(bad.into());
            let error = timeout_of(&spec).unwrap_err();
            assert!(error.starts_with("spec.timeout: `") && error.contains("30s"), "{error}");
        }
    }

    #[test]
    fn unchanged_revision_and_set_apply_only_what_drifted() {
        let first = plan(
            &repo(true, None),
            Observed::Fetched { revision: "abc".into(), load: Ok(config_map("a")) },
            Duration::ZERO,
        );
        let record = first.record.unwrap();
        let status = TenantRepositoryStatus {
            last_applied_revision: Some("abc".into()),
            last_applied_digest: Some(record.digest),
            inventory: record.inventory,
            ..TenantRepositoryStatus::default()
        };
        let again = plan(
            &repo(true, Some(status)),
            Observed::Fetched { revision: "abc".into(), load: Ok(config_map("a")) },
            Duration::ZERO,
        );
        assert!(again.only_drifted, "the live objects are compared, not applied blindly");
        assert_eq!((again.apply.map(|a| a.len()), again.prune), (Some(1), vec![]));
    }

    #[test]
    fn prune_only_from_the_previous_inventory_and_only_when_enabled() {
        let status =
            TenantRepositoryStatus { inventory: vec![entry("a"), entry("old")], ..TenantRepositoryStatus::default() };
        let observed = || Observed::Fetched { revision: "def".into(), load: Ok(config_map("a")) };
        assert_eq!(plan(&repo(true, Some(status.clone())), observed(), Duration::ZERO).prune, [entry("old")]);
        assert!(plan(&repo(false, Some(status)), observed(), Duration::ZERO).prune.is_empty());
    }

    #[test]
    fn validation_failure_applies_and_prunes_nothing_and_keeps_the_record() {
        let status = TenantRepositoryStatus {
            last_applied_revision: Some("abc".into()),
            inventory: vec![entry("a")],
            ..TenantRepositoryStatus::default()
        };
        let repo = repo(true, Some(status));
        let problems = vec![Problem::field("spec.ip[0]", "bad").located("targets.yaml", Some(1), Some(1))];
        let plan = plan(&repo, Observed::Fetched { revision: "def".into(), load: Err(problems) }, Duration::ZERO);
        assert_eq!((plan.apply.clone(), plan.prune.clone(), plan.record.clone()), (None, vec![], None));
        assert!(
            matches!(&plan.health, Some(Health::Stalled { reason, message }) if reason == REASON_VALIDATION_FAILED && message.contains("targets.yaml:1: spec.ip[0]: bad"))
        );
        let status = next_status(&repo, &plan, None, &Time(Timestamp::UNIX_EPOCH));
        assert_eq!(status.last_applied_revision.as_deref(), Some("abc"));
        assert_eq!(status.last_fetched_revision.as_deref(), Some("def"));
        assert_eq!(status.inventory, [entry("a")]);
    }

    #[test]
    fn source_failures_requeue_by_class() {
        let failed = |kind| plan(&repo(true, None), Observed::FetchFailed(SourceError::new(kind, "x")), Duration::ZERO);
        let auth = failed(FailureKind::AuthenticationFailed);
        assert!(matches!(&auth.health, Some(Health::Stalled { reason, .. }) if reason == "AuthenticationFailed"));
        assert_eq!(auth.requeue, Some(STALLED_RESYNC));
        assert_eq!(failed(FailureKind::RefNotFound).requeue, Some(Duration::from_secs(60)));
        assert_eq!(failed(FailureKind::Timeout).requeue, Some(TRANSIENT_RETRY));
        assert_eq!(auth.source_ready.unwrap().reason, "AuthenticationFailed");
    }

    #[test]
    fn failed_apply_keeps_the_previous_revision_and_tracks_what_it_may_have_created() {
        let status = TenantRepositoryStatus {
            last_applied_revision: Some("abc".into()),
            inventory: vec![entry("old")],
            ..TenantRepositoryStatus::default()
        };
        let repo = repo(true, Some(status));
        let planned =
            plan(&repo, Observed::Fetched { revision: "def".into(), load: Ok(config_map("a")) }, Duration::ZERO);
        let failed = planned.apply_failed(&repo, "applying ConfigMap team-a/a: forbidden".into(), ErrorClass::Waiting);
        assert!(failed.prune.is_empty());
        let status = next_status(&repo, &failed, None, &Time(Timestamp::UNIX_EPOCH));
        assert_eq!(status.last_applied_revision.as_deref(), Some("abc"));
        assert_eq!(status.inventory, [entry("a"), entry("old")]);
        assert!(status.conditions.iter().any(|c| c.type_ == APPLIED && c.reason == REASON_APPLY_FAILED));
    }
}
