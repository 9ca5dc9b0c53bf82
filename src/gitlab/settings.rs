//! What the controller needs to manage deploy keys and webhooks on GitLab, read once at start-up.

use super::GitLabClient;

/// The GitLab syncer's settings (`--gitlab-url` and its companions).
#[derive(Clone)]
pub struct Settings {
    /// The REST client with the bot token (shared by every registration: one rate-limit gate).
    pub client: GitLabClient,
    /// Where GitLab reaches the receiver (`--webhook-external-url`), e.g. `https://cd.example.com`.
    pub webhook_external_url: String,
    /// The pinned host keys of the GitLab SSH server, written as `known_hosts` into generated
    /// Secrets (never learnt from the server).
    pub known_hosts: String,
    /// Commit statuses and refusal comments on the revisions evaluated (`None`: off, with
    /// `--gitlab-commit-status=false`).
    pub commit_status: Option<super::StatusSettings>,
}

impl std::fmt::Debug for Settings {
    /// The client (and its token) is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("webhook_external_url", &self.webhook_external_url)
            .field("known_hosts", &self.known_hosts)
            .field("commit_status", &self.commit_status)
            .finish_non_exhaustive()
    }
}
