//! Whether a live object already holds everything cdtarget would apply, so that an unchanged
//! cycle sends no write at all.

use serde_json::Value;

/// Whether every field of `desired` is present in `live` with the same value. Fields only the
/// live object has (defaults, status, other managers' fields) are ignored; lists must have the
/// same length and match element by element. A top-level `status` in `desired` is ignored too:
/// the API server keeps an apply's `status` out of every kind with a status subresource, so
/// comparing it would count as drift on every poll.
pub(crate) fn live_matches(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => want
            .iter()
            .filter(|(key, _)| key.as_str() != "status")
            .all(|(key, value)| have.get(key).is_some_and(|live| fields_match(value, live))),
        _ => fields_match(desired, live),
    }
}

fn fields_match(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(key, value)| have.get(key).is_some_and(|live| fields_match(value, live)))
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| fields_match(w, h))
        }
        (Value::Number(want), Value::Number(have)) => want.as_f64() == have.as_f64(),
        (want, have) => want == have,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fields_added_by_the_server_do_not_count_as_drift() {
        let desired = json!({"spec": {"replicas": 1, "template": {"containers": [{"name": "agent"}]}}});
        let live = json!({"spec": {"replicas": 1, "revisionHistoryLimit": 10,
            "template": {"containers": [{"name": "agent", "imagePullPolicy": "IfNotPresent"}]}}, "status": {}});
        assert!(live_matches(&desired, &live));
    }

    #[test]
    fn a_status_written_in_git_is_not_drift_but_a_nested_status_field_is_compared() {
        let desired = json!({"spec": {"replicas": 1, "status": "on"}, "status": {"availableReplicas": 2}});
        assert!(live_matches(&desired, &json!({"spec": {"replicas": 1, "status": "on"}, "status": {}})));
        assert!(!live_matches(&desired, &json!({"spec": {"replicas": 1, "status": "off"}})));
    }

    #[test]
    fn a_changed_missing_or_extra_list_element_is_drift() {
        let desired = json!({"ports": [443, 22], "labels": {"a": "b"}});
        assert!(!live_matches(&desired, &json!({"ports": [443, 22], "labels": {"a": "c"}})));
        assert!(!live_matches(&desired, &json!({"ports": [443], "labels": {"a": "b"}})));
        assert!(!live_matches(&desired, &json!({"ports": [443, 22, 80], "labels": {"a": "b"}})));
        assert!(!live_matches(&desired, &json!({"ports": [443, 22]})));
    }
}
