//! Kubernetes Events, through one publisher ([`publish`]): one Event when an object's `Ready`
//! condition changes its status or reason ([`Transition`]), none while it stays the same (a
//! resync never floods the namespace); and the tenant's Warning Events about a registration
//! ([`Notice`]), recorded in the tenant namespace regarding its `SyncStatus`
//! (src/controller/tenant_repository/sync_status.rs decides them).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

use crate::api::conditions::READY;

/// Events carry at most 1 kB of note.
const MAX_NOTE: usize = 1000;

/// The Event a change of `Ready` calls for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// `Warning` unless the object became (or stays, with a new reason) ready.
    pub warning: bool,
    /// The new `Ready` reason, e.g. `Applied` or `ValidationFailed`.
    pub reason: String,
    /// The new `Ready` message, shortened to fit an Event.
    pub note: String,
}

/// The Event for the change from `previous` to `next` conditions, if `Ready` changed.
pub fn transition(previous: &[Condition], next: &[Condition]) -> Option<Transition> {
    let ready = |conditions: &[Condition]| conditions.iter().find(|c| c.type_ == READY).cloned();
    let now = ready(next)?;
    if ready(previous).is_some_and(|before| before.status == now.status && before.reason == now.reason) {
        return None;
    }
    Some(Transition { warning: now.status != "True", reason: now.reason, note: bounded(now.message) })
}

/// `note` cut to [`MAX_NOTE`] bytes on a character boundary.
fn bounded(mut note: String) -> String {
    crate::text::cut(&mut note, MAX_NOTE);
    note
}

/// One Event a reconcile decided on, other than a change of `Ready`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// `Warning` or `Normal`.
    pub warning: bool,
    /// The reason, e.g. `ValidationFailed`, `Pruned`.
    pub reason: String,
    /// What happened, naming the objects; cleared of URL userinfo and cut to 1 kB when recorded.
    pub note: String,
}

impl Notice {
    /// A Warning Event with `reason` and `note`.
    pub fn warning(reason: &str, note: String) -> Notice {
        Notice { warning: true, reason: reason.to_owned(), note }
    }

    /// The note as recorded: no URL userinfo, at most [`MAX_NOTE`] bytes (and an ellipsis).
    pub fn recorded_note(&self) -> String {
        bounded(crate::text::redact_userinfo(&self.note))
    }
}

impl From<Notice> for Event {
    fn from(notice: Notice) -> Event {
        Event {
            type_: if notice.warning { EventType::Warning } else { EventType::Normal },
            note: Some(notice.recorded_note()),
            reason: notice.reason,
            action: "Sync".into(),
            secondary: None,
        }
    }
}

impl From<Transition> for Event {
    fn from(transition: Transition) -> Event {
        Event {
            type_: if transition.warning { EventType::Warning } else { EventType::Normal },
            reason: transition.reason,
            // Already clean when it comes from a condition; an Event is kept for an hour: be sure.
            note: Some(crate::text::redact_userinfo(&transition.note)),
            action: "Reconcile".into(),
            secondary: None,
        }
    }
}

/// Where Events are recorded: the controller's client and who reports them.
///
/// A kube-runtime [`Recorder`] is made for each Event, as kube-runtime means it to be used (one
/// per reconcile): a long-lived one keeps every Event it published for six minutes, to patch a
/// repeat into a series, so after a first pass over 10,000 CDTargets it held 10,000 Events (26 MB
/// of heap; docs/performance.md). Events are only recorded on changes of `Ready` here, so a repeat
/// within minutes is rare, and it is recorded as an Event of its own.
#[derive(Clone)]
pub struct EventSink {
    client: Client,
    reporter: Reporter,
}

impl EventSink {
    /// Events written through `client`, reported by `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        EventSink { client, reporter }
    }
}

/// The one publisher: records `event` (a [`Transition`] or a [`Notice`]; `None` records
/// nothing) regarding `object`, in its namespace. A failure to record is logged, never fails the
/// reconcile.
pub(crate) async fn publish<K, E>(sink: Option<&EventSink>, object: &K, event: Option<E>)
where
    K: Resource<DynamicType = ()>,
    E: Into<Event>,
{
    let (Some(sink), Some(event)) = (sink, event) else { return };
    let recorder = Recorder::new(sink.client.clone(), sink.reporter.clone());
    let regarding = object.object_ref(&());
    if let Err(error) = recorder.publish(&event.into(), &regarding).await {
        let kind = regarding.kind.unwrap_or_default();
        tracing::warn!(%error, %kind, namespace = ?regarding.namespace, "could not record an Event");
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn ready(status: &str, reason: &str) -> Vec<Condition> {
        vec![Condition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: "m".repeat(2000),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }]
    }

    #[test]
    fn a_change_of_status_or_reason_is_an_event_and_a_resync_is_not() {
        assert!(transition(&ready("True", "Applied"), &ready("True", "Applied")).is_none());
        let stalled = transition(&ready("True", "Applied"), &ready("False", "ValidationFailed")).unwrap();
        assert!(stalled.warning);
        assert_eq!(stalled.reason, "ValidationFailed");
        assert!(stalled.note.len() <= MAX_NOTE + '…'.len_utf8());
        let first = transition(&[], &ready("True", "Applied")).unwrap();
        assert!(!first.warning);
    }

    #[test]
    fn a_notice_is_bounded_and_carries_no_url_userinfo() {
        let notice =
            Notice::warning("ValidationFailed", format!("https://oauth2:glpat-s3cr3t@h/x {}", "é".repeat(900)));
        let note = notice.recorded_note();
        assert!(note.starts_with("https://***@h/x ") && !note.contains("glpat"), "{note}");
        assert!(note.len() <= MAX_NOTE + '…'.len_utf8());
    }
}
