//! "Reconcile now": the annotation `cdtarget.io/requestedAt` asks for a reconcile, and
//! `status.lastHandledReconcileAt` says which request the last finished reconcile handled (as
//! Flux's `reconcile.fluxcd.io/requestedAt` and `ReconcileRequestStatus`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

/// Annotation whose change starts a reconcile; its value (any string: `cdtarget reconcile`
/// writes the current time in RFC 3339) is copied to `status.lastHandledReconcileAt` when that
/// reconcile finishes.
pub const REQUESTED_AT: &str = "cdtarget.io/requestedAt";

/// The request the object carries, if any.
pub(crate) fn requested_at(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations.as_ref()?.get(REQUESTED_AT).map(String::as_str)
}

/// `status.lastHandledReconcileAt` after a reconcile of an object with `meta` finished, success
/// or failure: the request it carried, or what the status held (a removed annotation leaves the
/// last handled request in place). Unchanged when the request was already handled, so a poll
/// writes no status for it.
pub(crate) fn last_handled(meta: &ObjectMeta, previous: Option<&str>) -> Option<String> {
    requested_at(meta).or(previous).map(str::to_owned)
}

/// Whether the request `requested` was handled, given `status.lastHandledReconcileAt`: it is
/// that value, or a later request (two RFC 3339 times, the later one handled) took its place
/// before the controller got to it.
pub(crate) fn is_handled(requested: &str, last_handled: Option<&str>) -> bool {
    let Some(handled) = last_handled else { return false };
    if handled == requested {
        return true;
    }
    match (requested.parse::<Timestamp>(), handled.parse::<Timestamp>()) {
        (Ok(requested), Ok(handled)) => handled > requested,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn meta(requested: Option<&str>) -> ObjectMeta {
        let annotations = requested.map(|value| BTreeMap::from([(REQUESTED_AT.to_owned(), value.to_owned())]));
        ObjectMeta { annotations, ..ObjectMeta::default() }
    }

    #[test]
    fn a_finished_reconcile_records_the_request_it_carried() {
        let now = "2026-11-24T10:00:00.123456789Z";
        assert_eq!(last_handled(&meta(Some(now)), None).as_deref(), Some(now));
        assert_eq!(last_handled(&meta(Some(now)), Some("2026-11-23T09:00:00Z")).as_deref(), Some(now));
        // Any value is a request (kubectl annotate ... =prune), copied as it is.
        assert_eq!(last_handled(&meta(Some("prune")), None).as_deref(), Some("prune"));
    }

    #[test]
    fn without_a_request_the_last_handled_one_stays_and_nothing_new_is_written() {
        assert_eq!(last_handled(&meta(None), None), None);
        assert_eq!(last_handled(&meta(None), Some("2026-11-23T09:00:00Z")).as_deref(), Some("2026-11-23T09:00:00Z"));
        // A poll after the request was handled: the same value, so the status is unchanged.
        let handled = "2026-11-24T10:00:00Z";
        assert_eq!(last_handled(&meta(Some(handled)), Some(handled)).as_deref(), Some(handled));
    }

    #[test]
    fn a_request_is_handled_by_its_own_value_or_a_later_request() {
        let ours = "2026-11-24T10:00:00.5Z";
        assert!(is_handled(ours, Some(ours)));
        assert!(is_handled(ours, Some("2026-11-24T10:00:01Z")), "a later request handled covers ours");
        assert!(!is_handled(ours, Some("2026-11-24T10:00:00Z")), "an earlier request handled does not");
        assert!(!is_handled(ours, None));
        assert!(!is_handled(ours, Some("prune")), "an unordered value handled is not ours");
        assert!(is_handled("prune", Some("prune")));
    }
}
