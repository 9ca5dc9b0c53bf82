//! All GitLab work of the TenantRepository reconciler (`docs/gitlab.md`), one entry per phase of
//! a reconcile, for a registration with `spec.gitlab`:
//!
//! 1. [`prepare()`], before the fetch: our finalizer is on the registration and the key pair
//!    Secret exists ([`mod@prepare`]).
//! 2. [`pending`], before the apply: the commit status `pending` on the fetched revision
//!    ([`commit_status`]).
//! 3. [`sync`], after the apply: the deploy key and the webhook, the key rotated on request
//!    ([`keys_and_hooks`]).
//! 4. [`verdict`], after the apply: the commit status `success` or `failed`, and one comment
//!    listing the problems of a refused revision ([`commit_status`]).
//! 5. [`cleanup()`], on deletion: key and hook removed from GitLab ([`mod@cleanup`]); the
//!    deletion path itself is [`super::cleanup`].
//!
//! Each phase returns what it did as data ([`GitLabStep`], [`CommitStatusReport`]) for the
//! reconcile's report; none sets a condition or writes status. The decisions are plain
//! functions ([`step_of`], [`finalizers_adding`], [`finalizers_removing`],
//! [`keys_and_hooks::rotation_due`], [`cleanup::deletion_of`]); the rest reads and hands its
//! writes to the one writer. The phases take what they need ([`Inputs`]: the GitLab settings,
//! the writer, the Secrets read in this reconcile), not the reconciler's context. A GitLab
//! failure never blocks or undoes the Git apply: it ends in the `GitLabSynced` and
//! `CommitStatusPosted` conditions.

pub mod cleanup;
pub mod commit_status;
pub(crate) mod keys_and_hooks;
pub(crate) mod prepare;

pub use cleanup::cleanup;
pub(crate) use commit_status::CommitStatusReport;
pub use commit_status::{pending, verdict};
pub use keys_and_hooks::sync;
pub(crate) use prepare::prepare;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ApiResource;

use super::TRANSIENT_RETRY;
use super::secrets::{ReadError, SecretReads};
use crate::api::conditions::{REASON_CLUSTER_ERROR, REASON_GITLAB_NOT_CONFIGURED, REASON_SYNCED};
use crate::api::tenant_repository::{GitLabStatus, TenantRepository, webhook_token};
use crate::apply::{Write, WriteError, Writer};
use crate::controller::conditions::Verdict;
use crate::error::{Class, Classify, Reason};
use crate::gitlab::{self, GitLabError, SyncInput, SyncOutcome, keys};

/// What the GitLab step needs from the reconcile it runs in.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    /// The GitLab settings; `None` when the controller runs without `--gitlab-url`.
    pub settings: Option<&'a gitlab::Settings>,
    /// Sends the step's writes (finalizers, the key pair Secret).
    pub writer: &'a Writer,
    /// The Secrets of the registration's namespace, read once per reconcile.
    pub secrets: &'a SecretReads,
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

impl Reason for StepError {
    fn reason(&self) -> &'static str {
        REASON_CLUSTER_ERROR
    }
}

/// What the keys and hooks phase reports into the reconcile's report.
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

fn condition(ok: bool, reason: &str, message: impl Into<String>) -> Verdict {
    Verdict::new(ok, reason, message)
}

/// The step after a sync: `True`/`Synced` with the outcome's ids, or `False` with the error's
/// reason; transient failures come back after [`TRANSIENT_RETRY`].
pub(crate) fn step_of(result: &Result<SyncOutcome, GitLabError>) -> GitLabStep {
    match result {
        Ok(outcome) => GitLabStep {
            verdict: condition(true, REASON_SYNCED, outcome.message()),
            status: Some(outcome.status()),
            requeue: None,
            changed: outcome.writes > 0,
        },
        Err(error) => failed(error.reason(), error.to_string(), error.class()),
    }
}

fn failed(reason: &str, message: String, class: Class) -> GitLabStep {
    // Only passing trouble brings the next reconcile forward; the rest waits for the interval.
    let requeue = (class == Class::Transient).then_some(TRANSIENT_RETRY);
    GitLabStep { verdict: condition(false, reason, message), status: None, requeue, changed: false }
}

/// The step of a registration with `spec.gitlab` when the controller has no GitLab settings.
pub(crate) fn not_configured() -> GitLabStep {
    let message = "spec.gitlab is set but the controller runs without GitLab settings: start it with \
                   --gitlab-url, --gitlab-token-file, --gitlab-known-hosts-file and --webhook-external-url";
    GitLabStep {
        verdict: condition(false, REASON_GITLAB_NOT_CONFIGURED, message),
        status: None,
        requeue: None,
        changed: false,
    }
}

fn invalid(message: impl Into<String>) -> GitLabStep {
    GitLabStep {
        verdict: condition(false, gitlab::ErrorKind::InvalidConfig.reason(), message),
        status: None,
        requeue: None,
        changed: false,
    }
}

/// The step when reading or writing in the cluster failed (Secret, finalizer): retried soon.
pub(crate) fn cluster_failed(error: &StepError) -> GitLabStep {
    failed(error.reason(), error.to_string(), Class::Transient)
}

/// Whether the sync step runs: `spec.gitlab` is set and the registration is not being deleted
/// (a deleted registration without our finalizer gets no key, hook or finalizer again).
pub fn syncs(repo: &TenantRepository) -> bool {
    repo.spec.gitlab.is_some() && repo.metadata.deletion_timestamp.is_none()
}

/// The finalizers with ours added; `None` when it is already there.
pub(crate) fn finalizers_adding(repo: &TenantRepository) -> Option<Vec<String>> {
    let present = repo.finalizers();
    if present.iter().any(|f| f == gitlab::FINALIZER) {
        return None;
    }
    Some(present.iter().cloned().chain([gitlab::FINALIZER.to_owned()]).collect())
}

/// The finalizers without ours.
pub(crate) fn finalizers_removing(repo: &TenantRepository) -> Vec<String> {
    repo.finalizers().iter().filter(|f| *f != gitlab::FINALIZER).cloned().collect()
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

/// Releases the registration: our finalizer removed, the others kept.
pub(crate) async fn release_finalizer(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
) -> Result<(), StepError> {
    patch_finalizers(writer, namespace, repo, finalizers_removing(repo)).await
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

#[cfg(test)]
mod tests {
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
        assert!(ok.verdict.ok && ok.verdict.reason == REASON_SYNCED);
        assert_eq!(ok.status.unwrap().hook_id, Some(9));
        let unauthorized = step_of(&Err(GitLabError::new(ErrorKind::Unauthorized, "401 Unauthorized")));
        assert_eq!((unauthorized.verdict.reason.as_str(), unauthorized.requeue), ("GitLabUnauthorized", None));
        let down = step_of(&Err(GitLabError::new(ErrorKind::Unavailable, "503")));
        assert_eq!(down.requeue, Some(TRANSIENT_RETRY));
        assert_eq!(not_configured().verdict.reason, REASON_GITLAB_NOT_CONFIGURED);
    }
}
