//! kstatus conditions: `Ready`, `Reconciling` and `Stalled`, plus each reconciler's own
//! (`SourceReady`, `Applied`, `GitLabSynced`), computed as plain data. Their types and reasons
//! are [`crate::api::conditions`]'s; the reasons of the fetch and GitLab errors are given here
//! ([`Reason`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::conditions::{READY, RECONCILING, STALLED};
use crate::text::redact_userinfo;

/// Kubernetes accepts up to 32 KiB; a condition is read by people, so keep it short.
const MAX_MESSAGE: usize = 4096;

/// The overall state after a reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Done: `Ready=True`.
    Ready {
        /// Condition reason, e.g. `Applied`.
        reason: String,
        /// What was done.
        message: String,
    },
    /// Needs a human: `Ready=False`, `Stalled=True`.
    Stalled {
        /// Condition reason, e.g. `InvalidSpec`.
        reason: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Will be retried: `Ready=False`, `Reconciling=True`.
    Progressing {
        /// Condition reason, e.g. `SecretNotFound`.
        reason: String,
        /// What is awaited.
        message: String,
    },
}

impl Health {
    /// The health after a failure settled by the failure model ([`crate::error::Schedule::settle`]):
    /// `Stalled` when a person must act, `Progressing` when it will be retried.
    pub fn failed(settled: crate::error::Settled, reason: &str, message: String) -> Health {
        if settled.stalled {
            Health::Stalled { reason: reason.to_owned(), message }
        } else {
            Health::Progressing { reason: reason.to_owned(), message }
        }
    }

    /// The condition reason.
    pub fn reason(&self) -> &str {
        match self {
            Health::Ready { reason, .. } | Health::Stalled { reason, .. } | Health::Progressing { reason, .. } => {
                reason
            }
        }
    }
}

/// One of a reconciler's own conditions (`SourceReady`, `Applied`, `GitLabSynced`).
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
    /// A verdict of `ok` with `reason` and `message`.
    pub fn new(ok: bool, reason: &str, message: impl Into<String>) -> Self {
        Verdict { ok, reason: reason.to_owned(), message: message.into() }
    }
}

/// Sets condition `kind`, keeping its `lastTransitionTime` when the status did not change. The
/// message is cleared of URL userinfo (`https://user:token@host` → `https://***@host`).
pub fn set(
    conditions: &mut Vec<Condition>,
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) {
    let status = if status { "True" } else { "False" }.to_owned();
    // Every condition (and so every Event, which quotes one) passes here: no URL userinfo leaves.
    let mut message = redact_userinfo(message);
    crate::text::cut(&mut message, MAX_MESSAGE);
    match conditions.iter_mut().find(|c| c.type_ == kind) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now.clone();
            }
            existing.status = status;
            existing.reason = reason.to_owned();
            existing.message = message;
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: kind.to_owned(),
            status,
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time: now.clone(),
        }),
    }
}

/// Removes condition `kind` (kstatus: an abnormal-true condition is absent when not true).
pub fn remove(conditions: &mut Vec<Condition>, kind: &str) {
    conditions.retain(|c| c.type_ != kind);
}

/// Sets `Ready`, `Reconciling` and `Stalled` from `health`.
pub fn summarize(conditions: &mut Vec<Condition>, health: &Health, generation: Option<i64>, now: &Time) {
    match health {
        Health::Ready { reason, message } => {
            set(conditions, READY, true, reason, message, generation, now);
            remove(conditions, RECONCILING);
            remove(conditions, STALLED);
        }
        Health::Stalled { reason, message } => {
            set(conditions, READY, false, reason, message, generation, now);
            set(conditions, STALLED, true, reason, message, generation, now);
            remove(conditions, RECONCILING);
        }
        Health::Progressing { reason, message } => {
            set(conditions, READY, false, reason, message, generation, now);
            set(conditions, RECONCILING, true, reason, message, generation, now);
            remove(conditions, STALLED);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::api::conditions::is_true;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn transition_time_changes_only_with_the_status() {
        let mut conditions = Vec::new();
        set(&mut conditions, READY, false, "A", "a", Some(1), &at(10));
        set(&mut conditions, READY, false, "B", "b", Some(2), &at(20));
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!((conditions[0].reason.as_str(), conditions[0].observed_generation), ("B", Some(2)));
        set(&mut conditions, READY, true, "C", "c", Some(2), &at(30));
        assert_eq!(conditions[0].last_transition_time, at(30));
    }

    #[test]
    fn kstatus_summary_sets_exactly_one_abnormal_condition() {
        let mut conditions = Vec::new();
        let stalled = Health::Stalled { reason: "InvalidSpec".into(), message: "spec.ip[0]: bad".into() };
        summarize(&mut conditions, &stalled, Some(3), &at(1));
        assert!(is_true(&conditions, STALLED) && !is_true(&conditions, READY));
        assert!(!conditions.iter().any(|c| c.type_ == RECONCILING));

        let progressing = Health::Progressing { reason: "SecretNotFound".into(), message: "waiting".into() };
        summarize(&mut conditions, &progressing, Some(3), &at(2));
        assert!(is_true(&conditions, RECONCILING));
        assert!(!conditions.iter().any(|c| c.type_ == STALLED));

        let ready = Health::Ready { reason: "Applied".into(), message: "4 objects".into() };
        summarize(&mut conditions, &ready, Some(3), &at(3));
        assert_eq!(conditions.len(), 1);
        assert!(is_true(&conditions, READY));
    }

    #[test]
    fn url_userinfo_never_reaches_a_condition() {
        let mut conditions = Vec::new();
        let message = "fetching https://oauth2:glpat-s3cr3t@gitlab.example.com/team/repo.git: Unreachable";
        set(&mut conditions, READY, false, "Unreachable", message, None, &at(1));
        assert_eq!(conditions[0].message, "fetching https://***@gitlab.example.com/team/repo.git: Unreachable");
    }

    #[test]
    fn every_fetch_and_gitlab_error_reason_is_in_the_vocabulary() {
        use crate::api::conditions::{FETCH_REASONS, GITLAB_ERROR_REASONS};
        use crate::error::Reason;
        use crate::gitlab::{ErrorKind, GitLabError};
        use crate::source::{FailureKind, SourceError};
        // Exhaustive: a new kind does not compile until it is listed here (and so remembered in `ALL`).
        let fetch = |kind: FailureKind| match kind {
            FailureKind::AuthenticationFailed
            | FailureKind::HostKeyMismatch
            | FailureKind::HostKeyUnknown
            | FailureKind::CertificateInvalid
            | FailureKind::RefNotFound
            | FailureKind::Unreachable
            | FailureKind::Timeout
            | FailureKind::TooLarge
            | FailureKind::SnapshotTooLarge
            | FailureKind::CacheTooLarge
            | FailureKind::UnsafeTree
            | FailureKind::RedirectRefused
            | FailureKind::CorruptCache
            | FailureKind::InvalidRequest
            | FailureKind::Other => SourceError::new(kind, "m").reason(),
        };
        let mut fetched: Vec<&str> = FailureKind::ALL.into_iter().map(fetch).collect();
        fetched.sort_unstable();
        let mut listed = FETCH_REASONS.to_vec();
        listed.sort_unstable();
        assert_eq!(fetched, listed);
        let gitlab = |kind: ErrorKind| match kind {
            ErrorKind::Unauthorized
            | ErrorKind::InsufficientScope
            | ErrorKind::NotMaintainer
            | ErrorKind::StatusForbidden
            | ErrorKind::ProjectNotFound
            | ErrorKind::KeyTakenElsewhere
            | ErrorKind::NotFound
            | ErrorKind::Rejected
            | ErrorKind::RateLimited
            | ErrorKind::Unavailable
            | ErrorKind::InvalidResponse
            | ErrorKind::InvalidConfig => GitLabError::new(kind, "m").reason(),
        };
        let mut reasons: Vec<&str> = ErrorKind::ALL.into_iter().map(gitlab).collect();
        reasons.sort_unstable();
        let mut listed = GITLAB_ERROR_REASONS.to_vec();
        listed.sort_unstable();
        assert_eq!(reasons, listed);
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let mut conditions = Vec::new();
        set(&mut conditions, READY, false, "X", &"é".repeat(5000), None, &at(1));
        assert!(conditions[0].message.len() <= MAX_MESSAGE + "…".len());
    }
}
