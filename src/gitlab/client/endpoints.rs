//! The endpoints the syncer calls, one method each: what is sent, what comes back, and the
//! answers each endpoint reads its own way (a refused transition, a 403 on statuses, a 202).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::wire::{
    CommentPosted, CommitComment, CommitStatus, DeployKey, Hook, HookParams, Project, StatusParams, StatusPosted,
};
use super::{GitLabClient, Options, invalid_json, parse};
use crate::gitlab::commit_status::text::{MAX_NOTE_CHARS, is_full_sha};
use crate::gitlab::error::{ErrorKind, GitLabError};
use crate::text::short_revision;

/// How long a note POST answered with the application rate limit (JSON 429, no `Retry-After`)
/// waits at least before it is tried again (`notes_create` counts per minute).
pub const NOTE_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

impl GitLabClient {
    /// `GET /projects/<url-encoded path>`: resolves a project path once; use the id afterwards.
    pub async fn project(&self, path: &str) -> Result<Project, GitLabError> {
        let url = self.endpoint(&["projects", path.trim_matches('/')]);
        let answer = self.send(Method::GET, url, None, &format!("project `{path}`")).await?;
        parse(&answer.body, "the project")
    }

    /// `GET /projects/:id/deploy_keys`, every page.
    pub async fn deploy_keys(&self, project_id: i64) -> Result<Vec<DeployKey>, GitLabError> {
        let values = self.list(&["projects", &project_id.to_string(), "deploy_keys"], project_id).await?;
        values.into_iter().map(|v| serde_json::from_value(v).map_err(|e| invalid_json("a deploy key", &e))).collect()
    }

    /// `POST /projects/:id/deploy_keys`. GitLab may answer with an existing link whose
    /// `can_push` is not the one asked for: check the result.
    pub async fn create_deploy_key(
        &self,
        project_id: i64,
        title: &str,
        key: &str,
        can_push: bool,
    ) -> Result<DeployKey, GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "deploy_keys"]);
        let body = json!({"title": title, "key": key.trim(), "can_push": can_push});
        let answer = self
            .send(Method::POST, url, Some(&body), &format!("adding the deploy key to project {project_id}"))
            .await?;
        parse(&answer.body, "the deploy key")
    }

    /// `PUT /projects/:id/deploy_keys/:key_id` with `can_push`.
    pub async fn set_deploy_key_can_push(
        &self,
        project_id: i64,
        key_id: i64,
        can_push: bool,
    ) -> Result<DeployKey, GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "deploy_keys", &key_id.to_string()]);
        let what = format!("changing deploy key {key_id} of project {project_id}");
        let answer = self.send(Method::PUT, url, Some(&json!({"can_push": can_push})), &what).await?;
        parse(&answer.body, "the deploy key")
    }

    /// `DELETE /projects/:id/deploy_keys/:key_id` (unlinks it). 404 is [`ErrorKind::NotFound`].
    pub async fn delete_deploy_key(&self, project_id: i64, key_id: i64) -> Result<(), GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "deploy_keys", &key_id.to_string()]);
        let what = format!("removing deploy key {key_id} from project {project_id}");
        self.send(Method::DELETE, url, None, &what).await.map(drop)
    }

    /// `GET /projects/:id/hooks`, every page.
    pub async fn hooks(&self, project_id: i64) -> Result<Vec<Hook>, GitLabError> {
        let values = self.list(&["projects", &project_id.to_string(), "hooks"], project_id).await?;
        values.into_iter().map(|v| Hook::from_value(v).map_err(|e| invalid_json("a hook", &e))).collect()
    }

    /// `POST /projects/:id/hooks`.
    pub async fn create_hook(&self, project_id: i64, params: &HookParams) -> Result<Hook, GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "hooks"]);
        let what = format!("adding the webhook to project {project_id}");
        let answer = self.send(Method::POST, url, Some(&params.body()), &what).await?;
        parse_hook(&answer.body)
    }

    /// `PUT /projects/:id/hooks/:hook_id` with every parameter, the token included.
    pub async fn edit_hook(&self, project_id: i64, hook_id: i64, params: &HookParams) -> Result<Hook, GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "hooks", &hook_id.to_string()]);
        let what = format!("editing webhook {hook_id} of project {project_id}");
        let answer = self.send(Method::PUT, url, Some(&params.body()), &what).await?;
        parse_hook(&answer.body)
    }

    /// `DELETE /projects/:id/hooks/:hook_id`. 404 is [`ErrorKind::NotFound`].
    pub async fn delete_hook(&self, project_id: i64, hook_id: i64) -> Result<(), GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "hooks", &hook_id.to_string()]);
        let what = format!("removing webhook {hook_id} from project {project_id}");
        self.send(Method::DELETE, url, None, &what).await.map(drop)
    }

    /// `POST /projects/:id/hooks/:hook_id/test/push_events`: a test delivery, which re-enables a
    /// hook GitLab disabled after failures when the receiver answers 2xx.
    pub async fn test_hook(&self, project_id: i64, hook_id: i64) -> Result<(), GitLabError> {
        let url =
            self.endpoint(&["projects", &project_id.to_string(), "hooks", &hook_id.to_string(), "test", "push_events"]);
        let what = format!("testing webhook {hook_id} of project {project_id}");
        self.send(Method::POST, url, None, &what).await.map(drop)
    }

    /// `POST /projects/:id/statuses/:sha`: sets a commit status (see [`StatusParams::body`] for
    /// what is sent). A refused transition to where the record already is comes back as
    /// [`StatusPosted::AlreadyThere`]; a 409 (another update holds the lock) is retried with
    /// backoff; a 403 says which role and rights the bot needs.
    pub async fn set_commit_status(&self, project_id: i64, params: &StatusParams) -> Result<StatusPosted, GitLabError> {
        let what = format!(
            "posting commit status `{}` for {} on project {project_id}",
            params.state.as_str(),
            short_revision(&params.sha)
        );
        if !is_full_sha(&params.sha) {
            return Err(GitLabError::new(ErrorKind::InvalidConfig, format!("{what}: not a full commit SHA")));
        }
        if params.name.trim().is_empty() {
            return Err(GitLabError::new(ErrorKind::InvalidConfig, format!("{what}: the status name is blank")));
        }
        let url = self.endpoint(&["projects", &project_id.to_string(), "statuses", &params.sha]);
        let options = Options { retry_conflict: true, ..Options::default() };
        match self.send_with(Method::POST, url, Some(&params.body()), &what, options).await {
            Ok(answer) => parse(&answer.body, "the commit status").map(StatusPosted::Stored),
            Err(e) if e.status == Some(400) && already_there(&e.message) => Ok(StatusPosted::AlreadyThere),
            Err(e) if e.status == Some(403) && e.kind == ErrorKind::NotMaintainer => {
                Err(status_forbidden(e, params.git_ref.as_deref(), "post commit statuses"))
            }
            Err(e) => Err(e),
        }
    }

    /// `GET /projects/:id/repository/commits/:sha/statuses?name=&ref=`, every page, retried
    /// records included (`all=true`). `sha` must be the full SHA: GitLab matches the raw string.
    pub async fn commit_statuses(
        &self,
        project_id: i64,
        sha: &str,
        name: &str,
        git_ref: Option<&str>,
    ) -> Result<Vec<CommitStatus>, GitLabError> {
        if !is_full_sha(sha) {
            return Err(GitLabError::new(
                ErrorKind::InvalidConfig,
                format!("listing commit statuses of `{}`: not a full commit SHA", short_revision(sha)),
            ));
        }
        let mut filters = vec![("name", name.to_owned()), ("all", "true".to_owned())];
        if let Some(git_ref) = git_ref.filter(|r| !r.is_empty()) {
            filters.push(("ref", git_ref.to_owned()));
        }
        let segments = ["projects", &project_id.to_string(), "repository", "commits", sha, "statuses"];
        let what = format!("listing commit statuses of {} on project {project_id}", short_revision(sha));
        let values = self.list_filtered(&segments, &filters, &what).await?;
        values.into_iter().map(|v| serde_json::from_value(v).map_err(|e| invalid_json("a commit status", &e))).collect()
    }

    /// `GET /projects/:id/repository/commits/:sha/comments`, every page (oldest first).
    pub async fn commit_comments(&self, project_id: i64, sha: &str) -> Result<Vec<CommitComment>, GitLabError> {
        let segments = ["projects", &project_id.to_string(), "repository", "commits", sha, "comments"];
        let what = format!("listing the comments of {} on project {project_id}", short_revision(sha));
        let values = self.list_filtered(&segments, &[], &what).await?;
        values
            .into_iter()
            .map(|v| serde_json::from_value(v).map_err(|e| invalid_json("a commit comment", &e)))
            .collect()
    }

    /// `POST /projects/:id/repository/commits/:sha/comments` with `note` (at most
    /// [`MAX_NOTE_CHARS`] characters, else refused here). The caller neutralises quick actions
    /// ([`crate::gitlab::commit_status::neutralise_quick_actions`]); a 202 (commands only) is reported, not
    /// an error. The application rate limit (JSON 429 without `Retry-After`) is not waited out
    /// here: the error asks for [`NOTE_RATE_LIMIT_WAIT`].
    pub async fn comment_on_commit(
        &self,
        project_id: i64,
        sha: &str,
        note: &str,
    ) -> Result<CommentPosted, GitLabError> {
        let what = format!("commenting on {} of project {project_id}", short_revision(sha));
        if note.trim().is_empty() || note.chars().count() > MAX_NOTE_CHARS {
            return Err(GitLabError::new(
                ErrorKind::InvalidConfig,
                format!("{what}: a note must hold 1 to {MAX_NOTE_CHARS} characters"),
            ));
        }
        let url = self.endpoint(&["projects", &project_id.to_string(), "repository", "commits", sha, "comments"]);
        let options = Options { app_limit_wait: Some(NOTE_RATE_LIMIT_WAIT), ..Options::default() };
        match self.send_with(Method::POST, url, Some(&json!({ "note": note })), &what, options).await {
            Ok(answer) if answer.status == StatusCode::ACCEPTED => Ok(CommentPosted::CommandsOnly),
            Ok(answer) => parse(&answer.body, "the commit comment").map(CommentPosted::Stored),
            Err(e) if e.status == Some(403) && e.kind == ErrorKind::NotMaintainer => {
                Err(status_forbidden(e, None, "comment on commits"))
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether a 400 is GitLab refusing a transition to where the open record already is (or
/// beyond): `:enqueue from :pending`, `:run from :running`, `:enqueue from :running`.
fn already_there(message: &str) -> bool {
    [":enqueue from :pending", ":run from :running", ":enqueue from :running"]
        .iter()
        .any(|transition| message.contains(&format!("Cannot transition status via {transition}")))
}

/// A 403 on a commit status or comment, explained: the role and rights GitLab wants.
fn status_forbidden(error: GitLabError, git_ref: Option<&str>, doing: &str) -> GitLabError {
    let on_ref = git_ref.map(|r| format!(" on `{r}`")).unwrap_or_default();
    let message = format!(
        "{}; to {doing}{on_ref} the bot user needs the Developer role or higher on the project and, when the branch is protected, the right to push or merge to it (a default-protected branch allows only Maintainers): make the bot Maintainer or allow it in the branch protection",
        error.message.split("; the bot user must be").next().unwrap_or(&error.message)
    );
    GitLabError { kind: ErrorKind::StatusForbidden, message, ..error }
}

fn parse_hook(body: &[u8]) -> Result<Hook, GitLabError> {
    let value: Value = parse(body, "the hook")?;
    Hook::from_value(value).map_err(|e| invalid_json("the hook", &e))
}
