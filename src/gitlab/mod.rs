//! The GitLab syncer: every registration with `spec.gitlab` gets a read-only deploy key and a
//! push webhook on its project, and loses them when it is deleted.
//!
//! - [`client`]: the REST client (paging, 429s, retries, bounded bodies, typed errors);
//! - [`plan`]: the pure decision, listings in, calls out;
//! - [`executor`]: runs a plan;
//! - [`keys`]: ed25519 key pairs and fingerprints;
//! - [`commit_status`]: commit statuses and the refusal comment on the revisions evaluated,
//!   and GitLab's rules for their text.
//!
//! The controller (and `cdtarget gitlab-sync`) builds a [`SyncInput`] with
//! [`SyncInput::for_registration`], then calls [`sync`] (or [`remove`] under the finalizer),
//! writes [`SyncOutcome::status`] and sets the [`crate::api::conditions::GITLAB_SYNCED`] condition with
//! [`crate::api::conditions::REASON_SYNCED`] or the error's [`crate::error::Reason`]. See `docs/gitlab.md`.

pub mod client;
pub mod commit_status;
pub(crate) mod error;
pub mod executor;
pub mod keys;
pub(crate) mod plan;
pub(crate) mod settings;

use futures::StreamExt;

pub use client::{ClientConfig, ClientStats, Clock, GitLabClient, RetryPolicy, Secret, SystemClock};
pub use commit_status::StatusSettings;
pub use error::{ErrorKind, GitLabError};
pub use plan::{Call, Desired, DesiredHook, DesiredKey, Ownership, Plan};
pub use settings::Settings;

use crate::api::TenantRepository;
use crate::api::tenant_repository::{GitLabStatus, webhook_path};

/// Finalizer that holds a registration until its key and hook are removed from GitLab.
pub const FINALIZER: &str = "cdtarget.io/gitlab-cleanup";
/// Annotation on a registration: a new value (e.g. a timestamp) rotates the deploy key.
pub const ROTATE_ANNOTATION: &str = "cdtarget.io/rotate-deploy-key";
/// Annotation on the registration's Secret: the rotation value last carried out.
pub const ROTATED_ANNOTATION: &str = "cdtarget.io/deploy-key-rotation";
/// Annotation on a registration, value `"true"`: its deletion leaves GitLab alone (the escape
/// hatch when GitLab is gone for good or the bot lost access).
pub const SKIP_CLEANUP_ANNOTATION: &str = "cdtarget.io/skip-gitlab-cleanup";

/// A GitLab project: its path, and its numeric id once resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectRef {
    /// `group/subgroup/project`.
    pub path: String,
    /// The numeric id, when known for this very path (from status): saves the lookup.
    pub id: Option<i64>,
}

/// What one registration wants on GitLab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncInput {
    /// The project.
    pub project: ProjectRef,
    /// Key, hook and ownership.
    pub desired: Desired,
}

/// What a sync (or a removal) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncOutcome {
    /// The project's numeric id.
    pub project_id: i64,
    /// The project path it was resolved from.
    pub project_path: String,
    /// The deploy key in place (`None` when not managed, or after a removal).
    pub deploy_key_id: Option<i64>,
    /// The hook in place (`None` when not managed, or after a removal).
    pub hook_id: Option<i64>,
    /// The calls that were planned and made.
    pub plan: Plan,
    /// Writing requests sent.
    pub writes: usize,
}

impl SyncOutcome {
    /// `status.gitlab` of the registration.
    pub fn status(&self) -> GitLabStatus {
        GitLabStatus {
            project_id: Some(self.project_id),
            project_path: Some(self.project_path.clone()),
            deploy_key_id: self.deploy_key_id,
            hook_id: self.hook_id,
            ..GitLabStatus::default()
        }
    }

    /// The `GitLabSynced` message, e.g. `deploy key 7 (read-only) and webhook 9 on project
    /// group/app (id 42); 2 changes`.
    pub fn message(&self) -> String {
        let parts: Vec<String> = [
            self.deploy_key_id.map(|id| format!("deploy key {id} (read-only)")),
            self.hook_id.map(|id| format!("webhook {id}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let what = if parts.is_empty() { "nothing managed".to_owned() } else { parts.join(" and ") };
        let changes = match self.writes {
            0 => "no change".to_owned(),
            1 => "1 change".to_owned(),
            n => format!("{n} changes"),
        };
        format!("{what} on project {} (id {}); {changes}", self.project_path, self.project_id)
    }
}

impl SyncInput {
    /// The input for `registration`: project from `spec.gitlab.project` or the URL, the id from
    /// `status.gitlab` when it was resolved from the same path, the key from `public_key` (an
    /// OpenSSH line) when `manageDeployKey`, the hook at `webhook_external_url` + the
    /// registration's path with `webhook_token` when `manageWebhook`, push events filtered to the
    /// followed branch, tag pushes when it follows a tag.
    pub fn for_registration(
        registration: &TenantRepository,
        public_key: &str,
        webhook_token: &Secret,
        webhook_external_url: &str,
    ) -> Result<SyncInput, GitLabError> {
        let invalid = |message: String| GitLabError::new(ErrorKind::InvalidConfig, message);
        let spec = &registration.spec;
        let gitlab = spec.gitlab.as_ref().ok_or_else(|| {
            invalid(
                "the registration has no `spec.gitlab`; add `gitlab: {}` to let cdtarget manage its GitLab project"
                    .into(),
            )
        })?;
        let name = registration.metadata.name.as_deref().unwrap_or_default();
        let namespace = registration.metadata.namespace.as_deref().unwrap_or("default");
        if name.is_empty() {
            return Err(invalid("the registration has no metadata.name".into()));
        }
        let ProjectRef { path, id } = project_of(registration)?;
        let status = registration.status.as_ref().and_then(|status| status.gitlab.as_ref());
        let marker = marker(namespace, name);
        let ownership = Ownership {
            marker: marker.clone(),
            deploy_key_id: status.and_then(|s| s.deploy_key_id),
            hook_id: status.and_then(|s| s.hook_id),
        };
        let key = match gitlab.manage_deploy_key {
            false => None,
            true => {
                let fingerprint = keys::fingerprint(public_key)
                    .map_err(|e| invalid(format!("the deploy key (`{}`): {e}", keys::IDENTITY_PUB)))?;
                Some(DesiredKey { title: marker.clone(), public_key: public_key.trim().to_owned(), fingerprint })
            }
        };
        let hook = match gitlab.manage_webhook {
            false => None,
            true => {
                let token = webhook_token.expose();
                if token.is_empty() || token.contains(['\n', '\r']) {
                    return Err(invalid("the webhook token must be one non-empty line".into()));
                }
                let git_ref = spec.git_ref.clone().unwrap_or_default();
                let (tag_push_events, branch_filter) = match (&git_ref.branch, &git_ref.tag, &git_ref.commit) {
                    (_, Some(_), _) => (true, String::new()),
                    (_, None, Some(_)) => (false, String::new()),
                    (branch, None, None) => (false, branch.clone().unwrap_or_else(|| "main".into())),
                };
                Some(DesiredHook {
                    url: receiver_url(webhook_external_url, &webhook_path(token, name, namespace))?,
                    token: webhook_token.clone(),
                    tag_push_events,
                    branch_filter,
                })
            }
        };
        Ok(SyncInput {
            project: ProjectRef { path, id },
            desired: Desired { ownership, key, retain_key_fingerprints: Vec::new(), hook },
        })
    }

    /// The first step of a key rotation: `new_public_key` is wanted, and the key wanted so far
    /// (still the one in the Secret, still used for fetching) is kept. Once the Secret holds the
    /// new pair, a plain sync removes the old key.
    pub fn rotating_to(mut self, new_public_key: &str) -> Result<SyncInput, GitLabError> {
        let fingerprint = keys::fingerprint(new_public_key)
            .map_err(|e| GitLabError::new(ErrorKind::InvalidConfig, format!("the new deploy key: {e}")))?;
        let Some(current) = self.desired.key.take() else {
            return Err(GitLabError::new(ErrorKind::InvalidConfig, "the registration does not manage a deploy key"));
        };
        self.desired.retain_key_fingerprints.push(current.fingerprint.clone());
        self.desired.key = Some(DesiredKey { fingerprint, public_key: new_public_key.trim().to_owned(), ..current });
        Ok(self)
    }
}

/// The GitLab project of `registration`: `spec.gitlab.project`, else the path of its URL; the id
/// from `status.gitlab` when it was resolved from the same path.
pub(crate) fn project_of(registration: &TenantRepository) -> Result<ProjectRef, GitLabError> {
    let invalid = |message: String| GitLabError::new(ErrorKind::InvalidConfig, message);
    let spec = &registration.spec;
    let gitlab = spec.gitlab.as_ref().ok_or_else(|| {
        invalid(
            "the registration has no `spec.gitlab`; add `gitlab: {}` to let cdtarget manage its GitLab project".into(),
        )
    })?;
    let path = match &gitlab.project {
        Some(project) => project.trim_matches('/').to_owned(),
        None => project_path_from_url(&spec.url).ok_or_else(|| {
            invalid(format!(
                "cannot derive the GitLab project from `{}`; set spec.gitlab.project (`group/project`)",
                crate::text::redact_userinfo(&spec.url)
            ))
        })?,
    };
    if path.is_empty() || !path.contains('/') {
        return Err(invalid(format!("spec.gitlab.project `{path}` is not a project path; expected `group/project`")));
    }
    let status = registration.status.as_ref().and_then(|status| status.gitlab.as_ref());
    let id = status.filter(|status| status.project_path.as_deref() == Some(path.as_str())).and_then(|s| s.project_id);
    Ok(ProjectRef { path, id })
}

/// `cdtarget:<namespace>/<name>`: deploy key title and hook name of a registration.
pub fn marker(namespace: &str, name: &str) -> String {
    format!("cdtarget:{namespace}/{name}")
}

/// `<external URL without trailing />` + `path`; the external URL must be `http(s)://`.
pub fn receiver_url(external_url: &str, path: &str) -> Result<String, GitLabError> {
    let external = external_url.trim().trim_end_matches('/');
    let parsed = reqwest::Url::parse(external).map_err(|_| {
        GitLabError::new(ErrorKind::InvalidConfig, format!("--webhook-external-url `{external}` is not a URL"))
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() || parsed.query().is_some() {
        return Err(GitLabError::new(
            ErrorKind::InvalidConfig,
            format!(
                "--webhook-external-url `{external}` must be an http(s) URL without a query, e.g. https://cd.example.com"
            ),
        ));
    }
    Ok(format!("{external}{path}"))
}

/// The project path of a repository URL: `ssh://git@host[:port]/group/app.git`,
/// `https://host/group/app.git` and `git@host:group/app.git` all give `group/app`. `None` when
/// there is no path of at least two segments (a GitLab under a relative URL needs
/// `spec.gitlab.project`).
pub(crate) fn project_path_from_url(url: &str) -> Option<String> {
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.split_once('/')?.1,
        None => url.split_once(':')?.1,
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path).trim_end_matches('/');
    (path.split('/').filter(|s| !s.is_empty()).count() >= 2).then(|| path.to_owned())
}

/// The project's numeric id: the known one, else `GET /projects/<encoded path>` once.
pub(crate) async fn resolve_project(client: &GitLabClient, project: &ProjectRef) -> Result<i64, GitLabError> {
    match project.id {
        Some(id) => Ok(id),
        None => Ok(client.project(&project.path).await?.id),
    }
}

/// Reads what is on the project and plans the sync, writing nothing (`--dry-run`): the keys
/// (hooks) are listed only when the registration manages them.
pub async fn plan_sync(client: &GitLabClient, input: &SyncInput) -> Result<Plan, GitLabError> {
    match plan_sync_at(client, input, resolve_project(client, &input.project).await?).await {
        // The recorded id is gone (project deleted, maybe made again at the same path): the
        // path decides, once.
        Err(e) if e.kind == ErrorKind::ProjectNotFound && input.project.id.is_some() => {
            let project_id = client.project(&input.project.path).await?.id;
            plan_sync_at(client, input, project_id).await
        }
        other => other,
    }
}

async fn plan_sync_at(client: &GitLabClient, input: &SyncInput, project_id: i64) -> Result<Plan, GitLabError> {
    let keys = match input.desired.key {
        Some(_) => client.deploy_keys(project_id).await?,
        None => Vec::new(),
    };
    let hooks = match input.desired.hook {
        Some(_) => client.hooks(project_id).await?,
        None => Vec::new(),
    };
    Ok(plan::sync(project_id, &input.desired, &keys, &hooks))
}

/// Brings the project in line with `input`. In sync, this costs two listings (one per managed
/// part) and no write.
pub async fn sync(client: &GitLabClient, input: &SyncInput) -> Result<SyncOutcome, GitLabError> {
    let plan = plan_sync(client, input).await?;
    let done = executor::execute(client, &plan).await?;
    Ok(SyncOutcome {
        project_id: plan.project_id,
        project_path: input.project.path.clone(),
        deploy_key_id: done.deploy_key_id,
        hook_id: done.hook_id,
        plan,
        writes: done.writes,
    })
}

/// Reads what is on the project and plans the removal, writing nothing.
pub async fn plan_removal(client: &GitLabClient, input: &SyncInput) -> Result<Plan, GitLabError> {
    let project_id = resolve_project(client, &input.project).await?;
    let keys = client.deploy_keys(project_id).await?;
    let hooks = client.hooks(project_id).await?;
    Ok(plan::removal(project_id, &input.desired, &keys, &hooks))
}

/// Removes everything of ours from the project (the registration is being deleted); removals
/// that find nothing (404) count as done. A project that is gone (404) has nothing left to
/// remove: `Ok` with no call. Any other error keeps the finalizer.
pub async fn remove(client: &GitLabClient, input: &SyncInput) -> Result<SyncOutcome, GitLabError> {
    let plan = match plan_removal(client, input).await {
        Ok(plan) => plan,
        Err(e) if e.kind == ErrorKind::ProjectNotFound => {
            let plan = Plan {
                project_id: input.project.id.unwrap_or(0),
                calls: Vec::new(),
                deploy_key_id: None,
                hook_id: None,
            };
            return Ok(SyncOutcome {
                project_id: plan.project_id,
                project_path: input.project.path.clone(),
                deploy_key_id: None,
                hook_id: None,
                plan,
                writes: 0,
            });
        }
        Err(e) => return Err(e),
    };
    let done = executor::execute(client, &plan).await?;
    Ok(SyncOutcome {
        project_id: plan.project_id,
        project_path: input.project.path.clone(),
        deploy_key_id: None,
        hook_id: None,
        plan,
        writes: done.writes,
    })
}

/// Syncs many registrations, at most `concurrency` at a time, results in input order. One
/// client means one rate-limit gate: when GitLab answers 429 (or says no request is left in
/// the window) every sync waits, instead of each collecting its own 429s.
pub async fn sync_many(
    client: &GitLabClient,
    inputs: &[SyncInput],
    concurrency: usize,
) -> Vec<Result<SyncOutcome, GitLabError>> {
    futures::stream::iter(inputs.iter().map(|input| sync(client, input))).buffered(concurrency.max(1)).collect().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tenant_repository::GitLabSpec;

    /// Registration `platform/app` of a project on GitLab, managed as `gitlab` says.
    fn registration(gitlab: GitLabSpec) -> TenantRepository {
        TenantRepository::test()
            .with_name("app")
            .in_namespace("platform")
            .with_url("ssh://git@gitlab.example.com:2222/team-a/infra/app.git")
            .with_gitlab(gitlab)
    }

    fn managed() -> GitLabSpec {
        GitLabSpec::test()
    }

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILbBb74Tqeww9J+3OUdxirDinttxh0BweXo4lEE08c1T test";

    #[test]
    fn project_paths_come_from_every_url_form() {
        for url in [
            "ssh://git@gitlab.example.com:2222/group/sub/app.git",
            "https://gitlab.example.com/group/sub/app.git",
            "https://gitlab.example.com/group/sub/app",
            "git@gitlab.example.com:group/sub/app.git",
        ] {
            assert_eq!(project_path_from_url(url).as_deref(), Some("group/sub/app"), "{url}");
        }
        assert_eq!(project_path_from_url("https://gitlab.example.com/app.git"), None);
        assert_eq!(project_path_from_url("file:///srv/app.git").as_deref(), Some("srv/app"));
    }

    #[test]
    fn input_for_a_branch_registration() {
        let token = Secret::new("hook-token");
        let input =
            SyncInput::for_registration(&registration(managed()), KEY, &token, "https://cd.example.com/").unwrap();
        assert_eq!(input.project, ProjectRef { path: "team-a/infra/app".into(), id: None });
        assert_eq!(input.desired.ownership.marker, "cdtarget:platform/app");
        let key = input.desired.key.unwrap();
        assert_eq!(
            (key.title.as_str(), key.fingerprint.as_str()),
            ("cdtarget:platform/app", "SHA256:Ie02OOeEPWKgGa1PKQc+bp93olE+2vf6bXKS0rTqz0Y")
        );
        let hook = input.desired.hook.unwrap();
        assert_eq!(hook.url, format!("https://cd.example.com{}", webhook_path("hook-token", "app", "platform")));
        assert_eq!((hook.tag_push_events, hook.branch_filter.as_str()), (false, "main"));
    }

    #[test]
    fn input_for_a_tag_registration_with_known_ids_and_unmanaged_key() {
        let repo = registration(GitLabSpec::test().for_project("/other/app/").without_deploy_key())
            .with_tag("v1")
            .with_gitlab_status(GitLabStatus {
                project_id: Some(42),
                project_path: Some("other/app".into()),
                deploy_key_id: Some(1),
                hook_id: Some(2),
                ..GitLabStatus::default()
            });
        let input = SyncInput::for_registration(&repo, "ignored", &Secret::new("t"), "https://cd.example.com").unwrap();
        assert_eq!(input.project, ProjectRef { path: "other/app".into(), id: Some(42) });
        assert_eq!((input.desired.ownership.deploy_key_id, input.desired.ownership.hook_id), (Some(1), Some(2)));
        assert!(input.desired.key.is_none());
        let hook = input.desired.hook.unwrap();
        assert_eq!((hook.tag_push_events, hook.branch_filter.as_str()), (true, ""));
    }

    #[test]
    fn a_recorded_id_of_another_path_is_not_reused() {
        let repo = registration(managed()).with_gitlab_status(GitLabStatus {
            project_id: Some(42),
            project_path: Some("old/path".into()),
            ..GitLabStatus::default()
        });
        let input = SyncInput::for_registration(&repo, KEY, &Secret::new("t"), "https://cd.example.com").unwrap();
        assert_eq!(input.project.id, None);
    }

    #[test]
    fn wrong_inputs_are_named() {
        let token = Secret::new("t");
        let error = SyncInput::for_registration(&registration(managed()), "garbage", &token, "https://cd.example.com")
            .unwrap_err();
        assert!(error.message.contains("the deploy key (`identity.pub`)"), "{error}");
        let error = SyncInput::for_registration(&registration(managed()), KEY, &token, "cd.example.com").unwrap_err();
        assert!(error.message.contains("--webhook-external-url"), "{error}");
        let mut repo = registration(managed());
        repo.spec.gitlab = None;
        assert!(
            SyncInput::for_registration(&repo, KEY, &token, "https://x").unwrap_err().message.contains("spec.gitlab")
        );
    }

    #[test]
    fn rotation_wants_the_new_key_and_keeps_the_old() {
        let input = SyncInput::for_registration(&registration(managed()), KEY, &Secret::new("t"), "https://x").unwrap();
        let new = keys::generate("c").unwrap();
        let rotating = input.rotating_to(&new.public_openssh).unwrap();
        assert_eq!(rotating.desired.key.as_ref().unwrap().fingerprint, new.fingerprint);
        assert_eq!(rotating.desired.retain_key_fingerprints, ["SHA256:Ie02OOeEPWKgGa1PKQc+bp93olE+2vf6bXKS0rTqz0Y"]);
    }

    #[test]
    fn outcome_message_and_status() {
        let outcome = SyncOutcome {
            project_id: 42,
            project_path: "g/app".into(),
            deploy_key_id: Some(7),
            hook_id: Some(9),
            plan: Plan { project_id: 42, calls: vec![], deploy_key_id: Some(7), hook_id: Some(9) },
            writes: 0,
        };
        assert_eq!(outcome.message(), "deploy key 7 (read-only) and webhook 9 on project g/app (id 42); no change");
        assert_eq!(outcome.status().project_path.as_deref(), Some("g/app"));
    }
}
