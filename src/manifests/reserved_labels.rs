//! cdtarget's own label keys in tenant documents.
//!
//! The agents' egress NetworkPolicy selects their pods by `cdtarget.io/cdtarget`
//! ([`crate::render::selector_labels`]). A tenant pod carrying that label would get the agents'
//! egress, so no tenant document may set a label under the reserved prefix — on its own
//! metadata, on a pod template of a known workload, or anywhere a kind we do not know keeps
//! labels for the pods it creates — nor select by one. The walk is by field name, not by
//! kind: every mapping under a key named `labels` or ending in `Labels` (`matchLabels`,
//! `podLabels`, `commonLabels`, Helm values …) or named `selector`, and every
//! `matchExpressions[].key`, at any depth. (`additionalSelector` of a CDTarget labels the agents but never selects them, and
//! may not use the prefix either: see `render::validate`.)

use serde_json::Value;

use crate::api::names;
use crate::problem::{Problem, join_path};

/// The label key prefix cdtarget keeps for itself; the agents' selector label is under it.
pub(crate) const RESERVED_PREFIX: &str = "cdtarget.io/";

/// Every reserved label key that `document` sets or selects by, with its field path.
pub fn check(document: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    walk(document, "", &mut problems);
    problems
}

/// Whether `key` is under [`RESERVED_PREFIX`]. Label keys are case-sensitive and their prefix
/// must be lower case, but a lenient consumer should not get a way around the rule.
pub fn is_reserved(key: &str) -> bool {
    key.get(..RESERVED_PREFIX.len()).is_some_and(|prefix| prefix.eq_ignore_ascii_case(RESERVED_PREFIX))
}

// The YAML parser bounds the nesting depth (64), which bounds this recursion.
fn walk(value: &Value, path: &str, problems: &mut Vec<Problem>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let field = join_path(path, key);
                if holds_labels(key)
                    && let Value::Object(labels) = child
                {
                    for label in labels.keys().filter(|k| is_reserved(k)) {
                        problems.push(Problem::field(format!("{field}.{label}"), message(label)));
                    }
                } else if key == "matchExpressions"
                    && let Value::Array(expressions) = child
                {
                    for (i, expression) in expressions.iter().enumerate() {
                        if let Some(label) = expression.get("key").and_then(Value::as_str).filter(|k| is_reserved(k)) {
                            problems.push(Problem::field(format!("{field}[{i}].key"), message(label)));
                        }
                    }
                }
                walk(child, &field, problems);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{path}[{i}]"), problems);
            }
        }
        _ => {}
    }
}

/// `labels`, `matchLabels`, `podLabels`, …, and `selector` (a plain map in Services and
/// ReplicationControllers; a LabelSelector elsewhere, whose own keys are never reserved).
fn holds_labels(key: &str) -> bool {
    key == "labels" || key.ends_with("Labels") || key == "selector"
}

fn message(label: &str) -> String {
    format!(
        "`{}` is a label key of cdtarget (`{RESERVED_PREFIX}…` marks and selects the agent pods, whose egress it opens); tenant objects may neither carry nor select by it, choose another key",
        names::shown(label)
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::labels;

    fn fields(document: &Value) -> Vec<String> {
        let mut fields: Vec<String> = check(document).into_iter().map(|p| p.field).collect();
        fields.sort();
        fields
    }

    #[test]
    fn the_agents_selector_label_is_under_the_reserved_prefix() {
        assert!(is_reserved(labels::CDTARGET), "the rule would not cover the label the NetworkPolicy selects");
        assert!(labels::RESERVED_PREFIXES.contains(&RESERVED_PREFIX));
    }

    #[test]
    fn the_label_is_found_wherever_a_kind_keeps_pod_labels() {
        let document = json!({
            "metadata": {"labels": {"cdtarget.io/cdtarget": "agents", "team": "a"}},
            "spec": {
                "template": {"metadata": {"labels": {"cdtarget.io/cdtarget": "agents"}}},
                "jobTemplate": {"spec": {"template": {"metadata": {"labels": {"CDTarget.io/x": "y"}}}}},
                "templates": [{"metadata": {"labels": {"app": "ok"}}}, {"podMetadata": {"labels": {"cdtarget.io/a": ""}}}],
                "values": {"podLabels": {"cdtarget.io/cdtarget": "agents"}},
                "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}, {"key": "cdtarget.io/cdtarget", "operator": "Exists"}]},
                "service": {"selector": {"cdtarget.io/cdtarget": "agents"}}
            }
        });
        assert_eq!(
            fields(&document),
            [
                "metadata.labels.cdtarget.io/cdtarget",
                "spec.jobTemplate.spec.template.metadata.labels.CDTarget.io/x",
                "spec.selector.matchExpressions[1].key",
                "spec.service.selector.cdtarget.io/cdtarget",
                "spec.template.metadata.labels.cdtarget.io/cdtarget",
                "spec.templates[1].podMetadata.labels.cdtarget.io/a",
                "spec.values.podLabels.cdtarget.io/cdtarget",
            ]
        );
    }

    #[test]
    fn other_labels_and_values_naming_cdtarget_are_left_alone() {
        let document = json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "web", "x.cdtarget.io/y": "z"}},
            "data": {"labels": "cdtarget.io/cdtarget: agents"},
            "spec": {"template": {"metadata": {"annotations": {"cdtarget.io/note": "x"}, "labels": {"team": "cdtarget.io/cdtarget"}}}}
        });
        assert_eq!(fields(&document), Vec::<String>::new());
    }
}
