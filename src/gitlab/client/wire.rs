//! What GitLab returns and what the client sends: the wire types of the endpoints the syncer
//! uses (projects, deploy keys, hooks, commit statuses and comments) and their JSON bodies.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::Secret;
use crate::gitlab::commit_status::text::{MAX_STATUS_FIELD_CHARS, acceptable_target_url, cut_chars, single_line};

// === what GitLab returns ===

/// `GET /projects/:id`, the fields used.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Project {
    /// Numeric id: stable across renames and transfers.
    pub id: i64,
    /// `group/subgroup/project`.
    #[serde(default)]
    pub path_with_namespace: String,
}

/// A deploy key linked to a project.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct DeployKey {
    /// Id of the key (shared by every project it is linked to).
    pub id: i64,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// GitLab's stored form of the public key.
    #[serde(default)]
    pub key: String,
    /// `SHA256:...`, what keys are matched by.
    #[serde(default)]
    pub fingerprint_sha256: Option<String>,
    /// Write access on this project; absent in `enable` answers.
    #[serde(default)]
    pub can_push: Option<bool>,
}

/// A project hook. GitLab never returns its token.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Hook {
    /// Id of the hook.
    pub id: i64,
    /// Where deliveries go.
    pub url: String,
    /// Name (GitLab 17+); cdtarget writes its ownership marker here.
    #[serde(default)]
    pub name: Option<String>,
    /// Push events.
    #[serde(default)]
    pub push_events: bool,
    /// Tag push events.
    #[serde(default)]
    pub tag_push_events: bool,
    /// TLS verification of the receiver.
    #[serde(default = "default_true")]
    pub enable_ssl_verification: bool,
    /// Which branches trigger push events.
    #[serde(default)]
    pub push_events_branch_filter: Option<String>,
    /// `wildcard`, `regex` or `all_branches` (absent on older GitLab).
    #[serde(default)]
    pub branch_filter_strategy: Option<String>,
    /// GitLab 19+: whether a token is stored.
    #[serde(default)]
    pub token_present: Option<bool>,
    /// `executable`, `temporarily_disabled` or `disabled`.
    #[serde(default)]
    pub alert_status: Option<String>,
    /// Every other `*_events` flag that is on (e.g. `merge_requests_events`).
    #[serde(skip)]
    pub other_events: Vec<String>,
}

fn default_true() -> bool {
    true
}

impl Hook {
    /// The hook in `value`, with [`Hook::other_events`] collected.
    pub(super) fn from_value(value: Value) -> Result<Hook, serde_json::Error> {
        let other_events = match &value {
            Value::Object(fields) => fields
                .iter()
                .filter(|(name, on)| {
                    name.ends_with("_events")
                        && *on == &Value::Bool(true)
                        && !matches!(name.as_str(), "push_events" | "tag_push_events")
                })
                .map(|(name, _)| name.clone())
                .collect(),
            _ => Vec::new(),
        };
        let mut hook: Hook = serde_json::from_value(value)?;
        hook.other_events = other_events;
        Ok(hook)
    }
}

/// The event flags of project hooks the syncer always sends as `false` (GitLab turns
/// `push_events` on by default and keeps what is not sent).
pub const OTHER_EVENT_FLAGS: &[&str] = &[
    "merge_requests_events",
    "issues_events",
    "confidential_issues_events",
    "note_events",
    "confidential_note_events",
    "job_events",
    "pipeline_events",
    "wiki_page_events",
    "deployment_events",
    "releases_events",
    "feature_flag_events",
    "emoji_events",
    "resource_access_token_events",
    "member_events",
    "project_events",
    "milestone_events",
    "vulnerability_events",
];

/// What a created or edited hook is set to. Every flag is sent explicitly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookParams {
    /// Receiver URL.
    pub url: String,
    /// Secret token GitLab sends as `X-Gitlab-Token`; always sent (a URL change wipes it).
    pub token: Secret,
    /// Ownership marker.
    pub name: String,
    /// Tag push events (when the registration follows a tag).
    pub tag_push_events: bool,
    /// Branch filter for push events; empty for all branches.
    pub branch_filter: String,
    /// Other `*_events` flags the hook has on and that must be switched off.
    pub switch_off: Vec<String>,
}

impl HookParams {
    /// The JSON body, token included.
    pub(super) fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("url".into(), json!(self.url));
        body.insert("token".into(), json!(self.token.expose()));
        body.insert("name".into(), json!(self.name));
        body.insert("push_events".into(), json!(true));
        body.insert("tag_push_events".into(), json!(self.tag_push_events));
        for flag in OTHER_EVENT_FLAGS.iter().copied().chain(self.switch_off.iter().map(String::as_str)) {
            body.insert(flag.into(), json!(false));
        }
        body.insert("enable_ssl_verification".into(), json!(true));
        body.insert("push_events_branch_filter".into(), json!(self.branch_filter));
        let strategy = if self.branch_filter.is_empty() { "all_branches" } else { "wildcard" };
        body.insert("branch_filter_strategy".into(), json!(strategy));
        Value::Object(body)
    }
}

// === commit statuses and comments ===

/// The state of a commit status (`POST /projects/:id/statuses/:sha`, `state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommitState {
    /// Waiting: cdtarget fetched the revision and is applying it.
    Pending,
    /// Running.
    Running,
    /// The revision is applied.
    Success,
    /// The revision was refused, or its apply failed.
    Failed,
    /// Canceled.
    Canceled,
    /// Skipped.
    Skipped,
}

impl CommitState {
    /// GitLab's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Running => "running",
            CommitState::Success => "success",
            CommitState::Failed => "failed",
            CommitState::Canceled => "canceled",
            CommitState::Skipped => "skipped",
        }
    }

    /// The state named `word` (GitLab's words only: `error` or `failure` are GitHub's).
    pub fn parse(word: &str) -> Option<CommitState> {
        Some(match word {
            "pending" => CommitState::Pending,
            "running" => CommitState::Running,
            "success" => CommitState::Success,
            "failed" => CommitState::Failed,
            "canceled" => CommitState::Canceled,
            "skipped" => CommitState::Skipped,
            _ => return None,
        })
    }

    /// Whether GitLab never updates a record in this state again (a later POST makes a new one).
    pub fn is_final(self) -> bool {
        !matches!(self, CommitState::Pending | CommitState::Running)
    }
}

/// What one `POST /projects/:id/statuses/:sha` sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusParams {
    /// The full commit SHA (40 or 64 hex digits).
    pub sha: String,
    /// The branch or tag; `None` lets GitLab choose (only for a registration pinned to a commit).
    pub git_ref: Option<String>,
    /// The status name, never blank.
    pub name: String,
    /// The state.
    pub state: CommitState,
    /// Cut to [`MAX_STATUS_FIELD_CHARS`] characters before it is sent.
    pub description: String,
    /// Sent only when it is an http(s) URL of at most [`MAX_STATUS_FIELD_CHARS`] characters.
    pub target_url: Option<String>,
    /// The pipeline of the first answer for this SHA, so that later posts land in it.
    pub pipeline_id: Option<i64>,
}

impl StatusParams {
    /// The JSON body: `description` cut, `target_url` only when GitLab would take it, blank
    /// values left out (GitLab drops them anyway).
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("state".into(), json!(self.state.as_str()));
        body.insert("name".into(), json!(self.name));
        if let Some(git_ref) = self.git_ref.as_deref().filter(|r| !r.is_empty()) {
            body.insert("ref".into(), json!(git_ref));
        }
        let description = cut_chars(&single_line(&self.description), MAX_STATUS_FIELD_CHARS);
        if !description.trim().is_empty() {
            body.insert("description".into(), json!(description));
        }
        if let Some(url) = self.target_url.as_deref().and_then(acceptable_target_url) {
            body.insert("target_url".into(), json!(url));
        }
        if let Some(pipeline_id) = self.pipeline_id {
            body.insert("pipeline_id".into(), json!(pipeline_id));
        }
        Value::Object(body)
    }
}

/// The user of a status or a comment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Author {
    /// User id.
    #[serde(default)]
    pub id: i64,
    /// User name.
    #[serde(default)]
    pub username: String,
}

/// A commit status as GitLab returns it (`Entities::CommitStatus`), the fields used.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CommitStatus {
    /// Record id.
    pub id: i64,
    /// The full SHA.
    #[serde(default)]
    pub sha: String,
    /// The ref it was posted for.
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
    /// `created`, `pending`, `running`, `success`, `failed`, `canceled`, `skipped`.
    #[serde(default)]
    pub status: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Target URL.
    #[serde(default)]
    pub target_url: Option<String>,
    /// The pipeline the record lives in.
    #[serde(default)]
    pub pipeline_id: Option<i64>,
    /// Who posted it.
    #[serde(default)]
    pub author: Option<Author>,
}

/// What a status POST did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusPosted {
    /// 201: the record as stored.
    Stored(CommitStatus),
    /// 400 `Cannot transition status via :enqueue from :pending` (or `:run from :running`, or
    /// `:enqueue from :running`): the open record is already in that state or beyond it.
    AlreadyThere,
}

/// A commit comment as GitLab returns it (`CommitNote`: no id).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CommitComment {
    /// The text.
    #[serde(default)]
    pub note: String,
    /// The file, when the comment sits on a line of the commit's diff.
    #[serde(default)]
    pub path: Option<String>,
    /// The line.
    #[serde(default)]
    pub line: Option<i64>,
    /// Who wrote it.
    #[serde(default)]
    pub author: Option<Author>,
}

/// What a comment POST did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommentPosted {
    /// 201: the comment as stored.
    Stored(CommitComment),
    /// 202: GitLab read the note as quick actions only and stored no comment.
    CommandsOnly,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_listing_collects_other_events_that_are_on() {
        let hook = Hook::from_value(json!({
            "id": 1, "url": "u", "push_events": true, "tag_push_events": false,
            "merge_requests_events": true, "note_events": false, "enable_ssl_verification": true
        }))
        .unwrap();
        assert_eq!(hook.other_events, ["merge_requests_events"]);
    }
}
