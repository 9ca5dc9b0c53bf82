//! kstatus conditions: `Ready`, `Reconciling` and `Stalled`, plus each reconciler's own
//! (`SourceReady`, `Applied`, `GitLabSynced`), computed as plain data.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::text::redact_userinfo;

/// `Ready`: the object is reconciled and what it describes is in place.
pub const READY: &str = "Ready";
/// `Reconciling`: work is under way or will be retried.
pub const RECONCILING: &str = "Reconciling";
/// `Stalled`: nothing will change until someone fixes the spec or a referenced object.
pub const STALLED: &str = "Stalled";

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
    let message = truncate(&redact_userinfo(message));
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

/// Whether condition `kind` is `True`.
pub fn is_true(conditions: &[Condition], kind: &str) -> bool {
    conditions.iter().any(|c| c.type_ == kind && c.status == "True")
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

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
    fn long_messages_are_cut_on_a_character_boundary() {
        let mut conditions = Vec::new();
        set(&mut conditions, READY, false, "X", &"é".repeat(5000), None, &at(1));
        assert!(conditions[0].message.len() <= MAX_MESSAGE + "…".len());
    }
}
