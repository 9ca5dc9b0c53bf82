//! The GitLab step of the TenantRepository reconciler (`docs/gitlab.md`): for a registration
//! with `spec.gitlab`, keep the finalizer, make sure the key pair Secret exists, sync the deploy
//! key and the webhook, rotate the key on request, and remove both on deletion.
//!
//! The decisions are plain functions ([`step_of`], [`deletion_of`], [`rotation_due`],
//! [`finalizers_adding`], [`finalizers_removing`]); the rest reads and hands its writes to the
//! one writer. The step takes what it needs ([`Inputs`]: the GitLab settings, the writer, the
//! Secrets read in this reconcile, the Event recorder), not the reconciler's context. A GitLab
//! failure never blocks or undoes the Git apply: it ends in the `GitLabSynced` condition.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::ApiResource;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::TRANSIENT_RETRY;
use super::secrets::{ReadError, SecretReads};
use crate::api::tenant_repository::{GitLabStatus, TenantRepository, webhook_token};
use crate::apply::{Done, Write, WriteError, Writer};
use crate::controller::conditions::{self, Verdict};
use crate::controller::events::{self, Transition};
use crate::error::{Class, Classify};
use crate::gitlab::{self, GitLabError, SyncInput, SyncOutcome, keys};

/// What the GitLab step needs from the reconcile it runs in.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    /// The GitLab settings; `None` when the controller runs without `--gitlab-url`.
    pub settings: Option<&'a gitlab::Settings>,
    /// Sends the step's writes (finalizers, the key pair Secret, status on deletion).
    pub writer: &'a Writer,
    /// The Secrets of the registration's namespace, read once per reconcile.
    pub secrets: &'a SecretReads,
    /// Records the Event of a skipped clean-up.
    pub recorder: Option<&'a events::EventSink>,
}

/// A read or write in the cluster that the step needed and that failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// Reading a Secret failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Writing the finalizers or the key pair Secret failed.
    #[error(transparent)]
    Write(WriteError),
    /// Writing the status of a registration being deleted failed.
    #[error(transparent)]
    Status(WriteError),
}

impl Classify for StepError {
    fn class(&self) -> Class {
        match self {
            StepError::Read(e) => e.source.class(),
            StepError::Write(e) | StepError::Status(e) => e.class(),
        }
    }
}

/// `GitLabSynced=False`: the registration has `spec.gitlab` but the controller runs without
/// `--gitlab-url` (and its companions).
pub const REASON_NOT_CONFIGURED: &str = "GitLabNotConfigured";
/// `GitLabSynced=False`: reading the Secrets or writing the finalizer or the key pair Secret in
/// the cluster failed (e.g. missing RBAC); retried.
pub const REASON_CLUSTER_ERROR: &str = "ClusterError";
/// Event reason when a deletion released the finalizer without contacting GitLab.
pub const REASON_CLEANUP_SKIPPED: &str = "GitLabCleanupSkipped";

/// What the GitLab step reports into the one status write of a reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitLabStep {
    /// The `GitLabSynced` condition.
    pub verdict: Verdict,
    /// `status.gitlab`; `None` keeps what is recorded.
    pub status: Option<GitLabStatus>,
    /// Come back sooner than the interval (transient failures).
    pub requeue: Option<Duration>,
    /// Something was written to GitLab (e.g. the deploy key was just added).
    pub changed: bool,
}

fn verdict(ok: bool, reason: &str, message: impl Into<String>) -> Verdict {
    Verdict::new(ok, reason, message)
}

/// The step after a sync: `True`/`Synced` with the outcome's ids, or `False` with the error's
/// reason; transient failures come back after [`TRANSIENT_RETRY`].
pub fn step_of(result: &Result<SyncOutcome, GitLabError>) -> GitLabStep {
    match result {
        Ok(outcome) => GitLabStep {
            verdict: verdict(true, gitlab::REASON_SYNCED, outcome.message()),
            status: Some(outcome.status()),
            requeue: None,
            changed: outcome.writes > 0,
        },
        Err(error) => failed(gitlab::condition_reason(error), error.to_string(), error.class()),
    }
}

fn failed(reason: &str, message: String, class: Class) -> GitLabStep {
    // Only passing trouble brings the next reconcile forward; the rest waits for the interval.
    let requeue = (class == Class::Transient).then_some(TRANSIENT_RETRY);
    GitLabStep { verdict: verdict(false, reason, message), status: None, requeue, changed: false }
}

/// The step of a registration with `spec.gitlab` when the controller has no GitLab settings.
pub fn not_configured() -> GitLabStep {
    let message = "spec.gitlab is set but the controller runs without GitLab settings: start it with \
                   --gitlab-url, --gitlab-token-file, --gitlab-known-hosts-file and --webhook-external-url";
    GitLabStep { verdict: verdict(false, REASON_NOT_CONFIGURED, message), status: None, requeue: None, changed: false }
}

fn invalid(message: impl Into<String>) -> GitLabStep {
    GitLabStep {
        verdict: verdict(false, gitlab::ErrorKind::InvalidConfig.reason(), message),
        status: None,
        requeue: None,
        changed: false,
    }
}

/// The step when reading or writing in the cluster failed (Secret, finalizer): retried soon.
pub fn cluster_failed(error: &StepError) -> GitLabStep {
    failed(REASON_CLUSTER_ERROR, error.to_string(), Class::Transient)
}

/// What a deletion of the registration calls for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// Remove key and hook from GitLab, then release the finalizer.
    Remove,
    /// The escape hatch (`SKIP_CLEANUP_ANNOTATION: "true"`): release the finalizer, GitLab
    /// untouched.
    Skip,
}

/// `Some` when the registration is being deleted and still holds our finalizer.
pub fn deletion_of(repo: &TenantRepository) -> Option<Deletion> {
    repo.metadata.deletion_timestamp.as_ref()?;
    if !repo.finalizers().iter().any(|f| f == gitlab::FINALIZER) {
        return None;
    }
    let skip = repo.annotations().get(gitlab::SKIP_CLEANUP_ANNOTATION).is_some_and(|v| v.trim() == "true");
    Some(if skip { Deletion::Skip } else { Deletion::Remove })
}

/// Whether the sync step runs: `spec.gitlab` is set and the registration is not being deleted
/// (a deleted registration without our finalizer gets no key, hook or finalizer again).
pub fn syncs(repo: &TenantRepository) -> bool {
    repo.spec.gitlab.is_some() && repo.metadata.deletion_timestamp.is_none()
}

/// The finalizers with ours added; `None` when it is already there.
pub fn finalizers_adding(repo: &TenantRepository) -> Option<Vec<String>> {
    let present = repo.finalizers();
    if present.iter().any(|f| f == gitlab::FINALIZER) {
        return None;
    }
    Some(present.iter().cloned().chain([gitlab::FINALIZER.to_owned()]).collect())
}

/// The finalizers without ours.
pub fn finalizers_removing(repo: &TenantRepository) -> Vec<String> {
    repo.finalizers().iter().filter(|f| *f != gitlab::FINALIZER).cloned().collect()
}

/// The rotation to carry out: the registration's `ROTATE_ANNOTATION` value when it differs from
/// the `ROTATED_ANNOTATION` recorded on the Secret.
pub fn rotation_due(repo: &TenantRepository, secret: &Secret) -> Option<String> {
    let wanted = repo.annotations().get(gitlab::ROTATE_ANNOTATION).map(|v| v.trim()).filter(|v| !v.is_empty())?;
    let done = secret.annotations().get(gitlab::ROTATED_ANNOTATION).map(|v| v.trim());
    (done != Some(wanted)).then(|| wanted.to_owned())
}

/// The note of the Event recorded when the escape hatch released the finalizer.
pub fn skipped_note(repo: &TenantRepository) -> String {
    let recorded = repo.status.as_ref().and_then(|s| s.gitlab.clone()).unwrap_or_default();
    let id = |v: Option<i64>| v.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
    format!(
        "{} is set: GitLab was not cleaned up; remove by hand on project {} (id {}): deploy key {}, webhook {}",
        gitlab::SKIP_CLEANUP_ANNOTATION,
        recorded.project_path.as_deref().unwrap_or("unknown"),
        id(recorded.project_id),
        id(recorded.deploy_key_id),
        id(recorded.hook_id),
    )
}

// === the I/O ===

fn text(data: &BTreeMap<String, ByteString>, key: &str) -> Option<String> {
    data.get(key).and_then(|v| String::from_utf8(v.0.clone()).ok()).filter(|v| !v.trim().is_empty())
}

fn bytes(data: BTreeMap<String, String>) -> BTreeMap<String, ByteString> {
    data.into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect()
}

/// The finalizers of `repo` changed to `wanted`, guarded by the list as read.
fn finalizers_write(namespace: &str, repo: &TenantRepository, wanted: Vec<String>) -> Write {
    Write::Finalizers {
        resource: ApiResource::erase::<TenantRepository>(&()),
        namespace: namespace.to_owned(),
        name: repo.name_any(),
        read: repo.metadata.finalizers.clone(),
        resource_version: repo.metadata.resource_version.clone(),
        wanted,
    }
}

async fn patch_finalizers(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
    wanted: Vec<String>,
) -> Result<(), StepError> {
    writer.execute(finalizers_write(namespace, repo, wanted)).await.map(|_| ()).map_err(StepError::Write)
}

/// Before the fetch: our finalizer is on the registration, and the key pair Secret exists
/// (generated and created when missing, so the first fetch already has credentials).
pub async fn prepare(repo: &TenantRepository, namespace: &str, inputs: Inputs<'_>) -> Result<(), StepError> {
    let (Some(spec), Some(settings)) = (&repo.spec.gitlab, inputs.settings) else { return Ok(()) };
    let secrets = inputs.secrets;
    if !syncs(repo) {
        return Ok(());
    }
    if let Some(list) = finalizers_adding(repo) {
        patch_finalizers(inputs.writer, namespace, repo, list).await?;
    }
    let Some(secret_ref) = &repo.spec.secret_ref else { return Ok(()) };
    if !spec.manage_deploy_key || secrets.get(&secret_ref.name).await?.is_some() {
        return Ok(());
    }
    let marker = gitlab::marker(namespace, &repo.name_any());
    let pair = match keys::generate(&marker) {
        Ok(pair) => pair,
        // Reported by the sync step, which finds no Secret.
        Err(error) => {
            tracing::warn!(%error, registration = %marker, "cannot generate a deploy key");
            return Ok(());
        }
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_ref.name.clone()),
            namespace: Some(namespace.to_owned()),
            owner_references: repo.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(bytes(pair.secret_data(&settings.known_hosts))),
        ..Secret::default()
    };
    match inputs.writer.execute(Write::CreateSecret { what: "creating the deploy key", secret: Box::new(secret) }).await
    {
        Ok(Done::AlreadyExists) => {
            // Made meanwhile (by a person, or a previous attempt): use it.
            secrets.forget(&secret_ref.name);
            Ok(())
        }
        Ok(_) => {
            tracing::info!(registration = %marker, fingerprint = %pair.fingerprint, "generated the deploy key Secret");
            secrets.forget(&secret_ref.name);
            Ok(())
        }
        Err(e) => Err(StepError::Write(e)),
    }
}

/// The public key and the webhook token of the registration, or the step that says what is
/// missing. `placeholders` stands in for what is gone (a removal recognises ours by marker and
/// ids too).
async fn input_for(
    repo: &TenantRepository,
    namespace: &str,
    secrets: &SecretReads,
    settings: &gitlab::Settings,
    placeholders: bool,
) -> Result<Result<(SyncInput, Option<Secret>), GitLabStep>, StepError> {
    let Some(spec) = &repo.spec.gitlab else { return Ok(Err(invalid("the registration has no spec.gitlab"))) };
    let mut secret = None;
    let mut public_key = String::new();
    if spec.manage_deploy_key {
        let Some(secret_ref) = &repo.spec.secret_ref else {
            return Ok(Err(invalid(
                "spec.gitlab.manageDeployKey needs spec.secretRef: the Secret the key pair is kept in",
            )));
        };
        let name = format!("{namespace}/{}", secret_ref.name);
        secret = secrets.get(&secret_ref.name).await?;
        let data = secret.as_ref().and_then(|s| s.data.clone()).unwrap_or_default();
        let found = match (text(&data, keys::IDENTITY_PUB), text(&data, keys::IDENTITY)) {
            (Some(public), _) => Ok(public),
            (None, Some(private)) => keys::public_key_of(&private).map_err(|e| format!("Secret {name}: {e}")),
            (None, None) => Err(format!("Secret {name} holds no `{}` and no `{}`", keys::IDENTITY, keys::IDENTITY_PUB)),
        };
        public_key = match (found, placeholders) {
            (Ok(public), _) => public,
            // A key of nobody: its fingerprint matches nothing, ours are found by marker and id.
            (Err(_), true) => match keys::generate("placeholder") {
                Ok(pair) => pair.public_openssh,
                Err(e) => return Ok(Err(invalid(e.to_string()))),
            },
            (Err(message), false) => return Ok(Err(invalid(message))),
        };
    }
    let mut token = String::new();
    if spec.manage_webhook {
        let read = match &repo.spec.webhook {
            Some(webhook) => {
                let secret = secrets.get(&webhook.secret_ref.name).await?;
                secret
                    .and_then(|s| s.data)
                    .and_then(|d| d.get("token").and_then(|t| webhook_token(&t.0)).map(str::to_owned))
            }
            None => None,
        };
        token = match (read, placeholders) {
            (Some(token), _) => token,
            (None, true) => "placeholder".into(),
            (None, false) => {
                return Ok(Err(invalid(
                    "spec.gitlab.manageWebhook needs spec.webhook.secretRef naming a Secret with a `token`",
                )));
            }
        };
    }
    let input =
        SyncInput::for_registration(repo, &public_key, &gitlab::Secret::new(token), &settings.webhook_external_url);
    Ok(match input {
        Ok(input) => Ok((input, secret)),
        Err(error) => Err(step_of(&Err(error))),
    })
}

/// After the apply: syncs key and hook (rotating the key first when asked) and says what to
/// report. `None` for a registration without `spec.gitlab`.
#[tracing::instrument(name = "gitlab", skip_all)]
pub async fn sync(
    repo: &TenantRepository,
    namespace: &str,
    inputs: Inputs<'_>,
) -> Result<Option<GitLabStep>, StepError> {
    if !syncs(repo) {
        return Ok(None);
    }
    let Some(settings) = inputs.settings else { return Ok(Some(not_configured())) };
    let secrets = inputs.secrets;
    let (input, secret) = match input_for(repo, namespace, secrets, settings, false).await? {
        Ok(found) => found,
        Err(step) => return Ok(Some(step)),
    };
    let mut input = input;
    if let Some(secret) = secret
        && let Some(value) = rotation_due(repo, &secret)
    {
        let name = secret.name_any();
        if let Some(step) = rotate(repo, namespace, inputs.writer, settings, &input, secret, &value).await? {
            return Ok(Some(step));
        }
        secrets.forget(&name);
        // The Secret holds the new pair: this plain sync removes the old key.
        input = match input_for(repo, namespace, secrets, settings, false).await? {
            Ok((input, _)) => input,
            Err(step) => return Ok(Some(step)),
        };
    }
    Ok(Some(step_of(&gitlab::sync(&settings.client, &input).await)))
}

/// Rotation: new pair, synced with the old key kept, then written into the Secret. `Some` when
/// it stopped (the old key is still in the Secret and on the project).
async fn rotate(
    repo: &TenantRepository,
    namespace: &str,
    writer: &Writer,
    settings: &gitlab::Settings,
    input: &SyncInput,
    secret: Secret,
    value: &str,
) -> Result<Option<GitLabStep>, StepError> {
    let marker = gitlab::marker(namespace, &repo.name_any());
    let pair = match keys::generate(&marker) {
        Ok(pair) => pair,
        Err(e) => return Ok(Some(invalid(e.to_string()))),
    };
    let rotating = match input.clone().rotating_to(&pair.public_openssh) {
        Ok(rotating) => rotating,
        Err(error) => return Ok(Some(step_of(&Err(error)))),
    };
    if let Err(error) = gitlab::sync(&settings.client, &rotating).await {
        let mut step = step_of(&Err(error));
        step.verdict.message = format!("rotating the deploy key: {}", step.verdict.message);
        return Ok(Some(step));
    }
    let data = secret.data.clone().unwrap_or_default();
    let known_hosts = text(&data, keys::KNOWN_HOSTS).unwrap_or_else(|| settings.known_hosts.clone());
    let patch = serde_json::json!({
        "metadata": { "annotations": { gitlab::ROTATED_ANNOTATION: value } },
        "data": bytes(pair.secret_data(&known_hosts)),
    });
    let write = Write::PatchSecret {
        what: "writing the rotated key into",
        namespace: namespace.to_owned(),
        name: secret.name_any(),
        patch,
    };
    writer.execute(write).await.map_err(StepError::Write)?;
    tracing::info!(registration = %marker, fingerprint = %pair.fingerprint, "rotated the deploy key");
    Ok(None)
}

/// A registration being deleted that holds our finalizer: remove key and hook from GitLab (or
/// skip, by annotation), then release the finalizer. While GitLab refuses, the finalizer stays
/// and `GitLabSynced=False`, `CleanupPending` says why.
#[tracing::instrument(name = "gitlab_cleanup", skip_all)]
pub async fn finalize(
    repo: &TenantRepository,
    namespace: &str,
    inputs: Inputs<'_>,
    deletion: Deletion,
) -> Result<Action, StepError> {
    let name = repo.name_any();
    if deletion == Deletion::Skip {
        let note = skipped_note(repo);
        tracing::warn!(registration = %format!("{namespace}/{name}"), "{note}");
        let transition = Transition { warning: true, reason: REASON_CLEANUP_SKIPPED.into(), note };
        events::publish(inputs.recorder, repo, Some(transition)).await;
        patch_finalizers(inputs.writer, namespace, repo, finalizers_removing(repo)).await?;
        return Ok(Action::await_change());
    }
    let result = match inputs.settings {
        None => Err(not_configured()),
        Some(settings) => match input_for(repo, namespace, inputs.secrets, settings, true).await? {
            Err(step) => Err(step),
            Ok((input, _)) => gitlab::remove(&settings.client, &input).await.map_err(|e| step_of(&Err(e))),
        },
    };
    match result {
        Ok(outcome) => {
            tracing::info!(registration = %format!("{namespace}/{name}"), writes = outcome.writes, "removed the deploy key and webhook from GitLab");
            patch_finalizers(inputs.writer, namespace, repo, finalizers_removing(repo)).await?;
            Ok(Action::await_change())
        }
        Err(step) => {
            let message = format!(
                "removing the deploy key and webhook ({}): {}; the finalizer {} stays (escape hatch: annotate {}=true)",
                step.verdict.reason,
                step.verdict.message,
                gitlab::FINALIZER,
                gitlab::SKIP_CLEANUP_ANNOTATION
            );
            let mut status = repo.status.clone().unwrap_or_default();
            let now = Time(Timestamp::now());
            let generation = repo.meta().generation;
            conditions::set(
                &mut status.conditions,
                gitlab::CONDITION_TYPE,
                false,
                gitlab::REASON_CLEANUP_PENDING,
                &message,
                generation,
                &now,
            );
            super::status::write(inputs.writer, namespace, repo, &status).await.map_err(StepError::Status)?;
            Ok(Action::requeue(step.requeue.unwrap_or(TRANSIENT_RETRY.max(Duration::from_secs(30)))))
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::tenant_repository::GitLabSpec;
    use crate::gitlab::{ErrorKind, Plan};

    fn repo() -> TenantRepository {
        TenantRepository::test().with_name("app").with_gitlab(GitLabSpec::test())
    }

    #[test]
    fn finalizer_is_added_once_and_removed_alone() {
        let mut repo = repo();
        repo.metadata.finalizers = Some(vec!["other".into()]);
        let list = finalizers_adding(&repo).unwrap();
        assert_eq!(list, ["other", gitlab::FINALIZER]);
        repo.metadata.finalizers = Some(list);
        assert_eq!(finalizers_adding(&repo), None);
        assert_eq!(finalizers_removing(&repo), ["other"]);
    }

    #[test]
    fn deletion_needs_the_timestamp_and_our_finalizer_and_honours_the_escape_hatch() {
        let mut repo = repo();
        repo.metadata.finalizers = Some(vec![gitlab::FINALIZER.into()]);
        assert_eq!(deletion_of(&repo), None, "not being deleted");
        repo.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(deletion_of(&repo), Some(Deletion::Remove));
        repo.annotations_mut().insert(gitlab::SKIP_CLEANUP_ANNOTATION.into(), "true".into());
        assert_eq!(deletion_of(&repo), Some(Deletion::Skip));
        assert!(!syncs(&repo), "no sync while being deleted");
        repo.metadata.finalizers = None;
        assert_eq!(deletion_of(&repo), None, "released already");
        assert!(!syncs(&repo), "released: nothing is added again");
    }

    #[test]
    fn rotation_is_due_once_per_value() {
        let mut repo = repo();
        let mut secret = Secret::default();
        assert_eq!(rotation_due(&repo, &secret), None);
        repo.annotations_mut().insert(gitlab::ROTATE_ANNOTATION.into(), "2026-11-22".into());
        assert_eq!(rotation_due(&repo, &secret).as_deref(), Some("2026-11-22"));
        secret.annotations_mut().insert(gitlab::ROTATED_ANNOTATION.into(), "2026-11-22".into());
        assert_eq!(rotation_due(&repo, &secret), None);
    }

    #[test]
    fn steps_carry_ids_or_the_reason_and_transient_failures_come_back_soon() {
        let outcome = SyncOutcome {
            project_id: 42,
            project_path: "team-a/app".into(),
            deploy_key_id: Some(7),
            hook_id: Some(9),
            plan: Plan { project_id: 42, calls: Vec::new(), deploy_key_id: Some(7), hook_id: Some(9) },
            writes: 0,
        };
        let ok = step_of(&Ok(outcome));
        assert!(ok.verdict.ok && ok.verdict.reason == gitlab::REASON_SYNCED);
        assert_eq!(ok.status.unwrap().hook_id, Some(9));
        let unauthorized = step_of(&Err(GitLabError::new(ErrorKind::Unauthorized, "401 Unauthorized")));
        assert_eq!((unauthorized.verdict.reason.as_str(), unauthorized.requeue), ("GitLabUnauthorized", None));
        let down = step_of(&Err(GitLabError::new(ErrorKind::Unavailable, "503")));
        assert_eq!(down.requeue, Some(TRANSIENT_RETRY));
        assert_eq!(not_configured().verdict.reason, REASON_NOT_CONFIGURED);
    }

    #[test]
    fn the_skip_event_names_what_is_left_behind() {
        let mut repo = repo();
        repo.status = Some(crate::api::TenantRepositoryStatus {
            gitlab: Some(GitLabStatus {
                project_id: Some(42),
                project_path: Some("team-a/app".into()),
                deploy_key_id: Some(7),
                hook_id: Some(9),
                ..GitLabStatus::default()
            }),
            ..Default::default()
        });
        let note = skipped_note(&repo);
        assert!(note.contains("team-a/app (id 42): deploy key 7, webhook 9"), "{note}");
    }
}
