//! Why a GitLab call failed, classified for the controller's conditions and requeues. Messages
//! name what is wrong and what would be accepted; they never hold the bot token.

use std::fmt;
use std::time::Duration;

use crate::api::conditions;
use crate::error::{Class, Classify, Reason};

/// What went wrong, as the `GitLabSynced` condition names it (see [`ErrorKind::reason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// 401: the bot token is missing, invalid, expired or revoked.
    Unauthorized,
    /// 403 `insufficient_scope`: the token lacks the `api` scope (e.g. only `read_api`).
    InsufficientScope,
    /// 403 Forbidden: the token's user is not Maintainer (or Owner) of the project.
    NotMaintainer,
    /// 403 on a commit status or comment: the bot user is below Developer, or the branch is
    /// protected and the bot may not push or merge to it.
    StatusForbidden,
    /// 404 on the project: it does not exist or the token's user cannot see it.
    ProjectNotFound,
    /// 400 "fingerprint has already been taken": the public key is registered elsewhere (another
    /// project the bot cannot see, or a user's SSH key); a new key pair is needed.
    KeyTakenElsewhere,
    /// 404 on a key or hook: it is not (or no longer) on the project.
    NotFound,
    /// GitLab refused the request as invalid (400, 405, 412, 422), e.g. a webhook URL it blocks.
    Rejected,
    /// 429 for longer than the client waits; retry after [`GitLabError::retry_after`].
    RateLimited,
    /// 5xx, timeouts and connection failures, after the client's retries.
    Unavailable,
    /// GitLab answered something the client cannot read (not JSON, too large, odd redirect).
    InvalidResponse,
    /// The client's own settings are wrong (base URL, token file, webhook URL, key).
    InvalidConfig,
}

impl ErrorKind {
    /// Every kind, for what lists them all (the condition vocabulary).
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::Unauthorized,
        ErrorKind::InsufficientScope,
        ErrorKind::NotMaintainer,
        ErrorKind::StatusForbidden,
        ErrorKind::ProjectNotFound,
        ErrorKind::KeyTakenElsewhere,
        ErrorKind::NotFound,
        ErrorKind::Rejected,
        ErrorKind::RateLimited,
        ErrorKind::Unavailable,
        ErrorKind::InvalidResponse,
        ErrorKind::InvalidConfig,
    ];

    /// The condition reason, e.g. `GitLabNotMaintainer`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::Unauthorized => conditions::REASON_GITLAB_UNAUTHORIZED,
            ErrorKind::InsufficientScope => conditions::REASON_GITLAB_INSUFFICIENT_SCOPE,
            ErrorKind::NotMaintainer => conditions::REASON_GITLAB_NOT_MAINTAINER,
            ErrorKind::StatusForbidden => conditions::REASON_GITLAB_STATUS_FORBIDDEN,
            ErrorKind::ProjectNotFound => conditions::REASON_GITLAB_PROJECT_NOT_FOUND,
            ErrorKind::KeyTakenElsewhere => conditions::REASON_DEPLOY_KEY_IN_USE,
            ErrorKind::NotFound => conditions::REASON_GITLAB_OBJECT_GONE,
            ErrorKind::Rejected => conditions::REASON_GITLAB_REJECTED,
            ErrorKind::RateLimited => conditions::REASON_GITLAB_RATE_LIMITED,
            ErrorKind::Unavailable => conditions::REASON_GITLAB_UNAVAILABLE,
            ErrorKind::InvalidResponse => conditions::REASON_GITLAB_INVALID_RESPONSE,
            ErrorKind::InvalidConfig => conditions::REASON_GITLAB_CONFIG_INVALID,
        }
    }

    /// The class that decides the condition and the requeue: configuration problems stall (a
    /// person must act), everything else is retried with backoff.
    pub fn class(self) -> Class {
        match self {
            ErrorKind::Unauthorized
            | ErrorKind::InsufficientScope
            | ErrorKind::NotMaintainer
            | ErrorKind::StatusForbidden
            | ErrorKind::ProjectNotFound
            | ErrorKind::KeyTakenElsewhere
            | ErrorKind::Rejected
            | ErrorKind::InvalidConfig => Class::Stalled,
            ErrorKind::NotFound | ErrorKind::RateLimited | ErrorKind::Unavailable | ErrorKind::InvalidResponse => {
                Class::Transient
            }
        }
    }
}

/// A failed GitLab call, or a sync that could not be planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitLabError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// What happened and what to do, free of the token.
    pub message: String,
    /// For [`ErrorKind::RateLimited`]: how long GitLab asked to wait, when it said.
    pub retry_after: Option<Duration>,
    /// The HTTP status, when GitLab answered.
    pub status: Option<u16>,
}

impl GitLabError {
    /// A failure of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        GitLabError { kind, message: message.into(), retry_after: None, status: None }
    }

    /// The same error with the HTTP status it came with.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }
}

impl Classify for GitLabError {
    fn class(&self) -> Class {
        self.kind.class()
    }
}

impl fmt::Display for GitLabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GitLabError {}

impl Reason for GitLabError {
    fn reason(&self) -> &'static str {
        self.kind.reason()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_problems_stall_and_outages_retry() {
        for kind in [ErrorKind::Unauthorized, ErrorKind::InsufficientScope, ErrorKind::KeyTakenElsewhere] {
            assert_eq!(kind.class(), Class::Stalled, "{kind:?}");
        }
        for kind in [ErrorKind::RateLimited, ErrorKind::Unavailable] {
            assert_eq!(kind.class(), Class::Transient, "{kind:?}");
        }
        assert_eq!(GitLabError::new(ErrorKind::NotMaintainer, "x").reason(), "GitLabNotMaintainer");
    }
}
