//! `commonLabels` and `labels` of a kustomization.
//!
//! kustomize makes one label transformer per `labels` entry, in order, then one for
//! `commonLabels`: a later one overwrites a key an earlier one set. An entry writes
//! `metadata.labels`; with `includeTemplates` also the pod and claim templates'; with
//! `includeSelectors` (always, for `commonLabels`) also the selectors of
//! [`COMMON_LABELS`](super::fieldspec::COMMON_LABELS).

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use super::fieldspec::{COMMON_LABELS, Create, FieldSpec, METADATA_LABELS, TEMPLATE_LABELS, find, shape, walk};
use super::{MAX_ENTRIES, known_keys, label_value, list, qualified_name, string_map};
use crate::kustomize::comparisons::Counted;
use crate::problem::{Problem, Problems, join_path};

/// `commonLabels` and `labels` of one kustomization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Labels {
    sets: Vec<LabelSet>,
}

/// One label transformer: pairs, sorted by key, and where they go.
#[derive(Clone, Debug, PartialEq)]
struct LabelSet {
    pairs: Vec<(String, String)>,
    specs: &'static [FieldSpec],
    /// `commonLabels` or `labels[2]`, for problems.
    field: String,
}

impl Labels {
    /// Reads `commonLabels` and `labels` from a kustomization. Keys and values must be valid
    /// Kubernetes label keys and values (the API server would refuse them later, further from
    /// the kustomization that wrote them).
    pub fn read(kustomization: &Value) -> Result<Labels, Vec<Problem>> {
        let mut problems = Problems::default();
        let check = |key: &str, value: &str| qualified_name(key).and_then(|()| label_value(value));
        let mut sets = Vec::new();
        for (i, entry) in list(kustomization, "labels", &mut problems).iter().enumerate() {
            let field = format!("labels[{i}]");
            let Some(entry) = entry.as_object() else {
                problems.push(&field, format!("expected a map with `pairs`, found {}", shape(entry)));
                continue;
            };
            known_keys(entry, &["pairs", "includeSelectors", "includeTemplates", "fields"], &field, &mut problems);
            if entry.contains_key("fields") {
                problems.push(
                    format!("{field}.fields"),
                    "custom field specs are not supported; use `includeSelectors` or `includeTemplates`, or a patch",
                );
            }
            let flag = |key: &str, problems: &mut Problems| match entry.get(key) {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    problems.push(format!("{field}.{key}"), format!("expected true or false, found {}", shape(other)));
                    false
                }
            };
            let specs = if flag("includeSelectors", &mut problems) {
                COMMON_LABELS
            } else if flag("includeTemplates", &mut problems) {
                TEMPLATE_LABELS
            } else {
                METADATA_LABELS
            };
            let pairs = string_map(entry.get("pairs"), &format!("{field}.pairs"), &mut problems, &check);
            sets.push(LabelSet { pairs, specs, field });
        }
        let pairs = string_map(kustomization.get("commonLabels"), "commonLabels", &mut problems, &check);
        sets.push(LabelSet { pairs, specs: COMMON_LABELS, field: "commonLabels".into() });
        sets.retain(|set| !set.pairs.is_empty());
        if sets.iter().map(|set| set.pairs.len()).sum::<usize>() > MAX_ENTRIES {
            problems.push("labels", format!("more than {MAX_ENTRIES} labels in all are not accepted"));
        }
        problems.finish(Labels { sets })
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// Applies them to one object. A label field that is not a map (`metadata.labels: x`) is a
    /// problem at that field of the object.
    ///
    /// Refused: a set that changes a label's value where it writes, while the same label with
    /// the old value stays in a selector or template it does not write. kustomize v5.5 writes
    /// one shared YAML node to every field a transformer sets in an object, and a later write to
    /// one of them changes them all: an overlay's `labels` entry (or a later entry of the same
    /// kustomization) without `includeSelectors` then silently rewrites the selectors that a
    /// base's `commonLabels` wrote, but not selectors the resource file wrote itself. Which one
    /// happened cannot be told from the object, so neither is guessed.
    pub fn apply(&self, object: &mut Value) -> Result<(), Problem> {
        for set in &self.sets {
            // Each label value changed, once, with where it was first changed: the problem
            // names the first one a field left alone still holds.
            let mut changed: Vec<(&str, String, &str)> = Vec::new();
            let mut first: HashMap<Counted<(&str, String)>, usize> = HashMap::new();
            for spec in set.specs {
                walk(object, spec, Create::Map, &mut |node, at| match node {
                    // Only reached without `create`: kustomize leaves a null selector alone.
                    Value::Null => Ok(()),
                    Value::Object(labels) => {
                        for (key, value) in &set.pairs {
                            let old = labels.insert(key.clone(), Value::String(value.clone()));
                            if let Some(Value::String(old)) = old
                                && old != *value
                            {
                                first.entry(Counted((key.as_str(), old.clone()))).or_insert_with(|| {
                                    changed.push((key, old, value));
                                    changed.len() - 1
                                });
                            }
                        }
                        Ok(())
                    }
                    other => Err(Problem::field(
                        at,
                        format!("{} cannot add labels here: expected a map, found {}", set.field, shape(other)),
                    )),
                })?;
            }
            if changed.is_empty() {
                continue;
            }
            let keys: BTreeSet<&str> = changed.iter().map(|(key, _, _)| *key).collect();
            // The first change `labels` still holds, looked up by its keys or by the changed
            // keys, whichever are fewer.
            let held = |labels: &Map<String, Value>| -> Option<usize> {
                let change = |key: &str, value: &Value| {
                    value.as_str().and_then(|old| first.get(&Counted((key, old.to_owned())))).copied()
                };
                if labels.len() <= keys.len() {
                    labels.iter().filter_map(|(key, value)| change(key, value)).min()
                } else {
                    keys.iter().filter_map(|key| change(key, labels.get(*key)?)).min()
                }
            };
            let mut stale = None;
            for spec in COMMON_LABELS.iter().filter(|spec| !set.specs.contains(spec)) {
                find(object, spec, &mut |node, at| {
                    if stale.is_some() {
                        return;
                    }
                    let Some(i) = node.as_object().and_then(held) else { return };
                    let (key, old, new) = &changed[i];
                    stale = Some(Problem::field(
                        join_path(at, key),
                        format!(
                            "{} changes label `{key}` from `{old}` to `{new}` but not here, where it is `{old}` \
                             too: kustomize v5.5 changes it here as well when one transformer (`commonLabels` \
                             or `includeSelectors`, here or in a base) wrote both, and not otherwise; set it \
                             with `includeSelectors: true` to change it everywhere, or keep its value",
                            set.field
                        ),
                    ));
                });
            }
            if let Some(problem) = stale {
                return Err(problem);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{ProptestConfig, Strategy};
    use serde_json::json;

    use super::*;
    use crate::kustomize::comparisons::counted;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}},
            },
        })
    }

    fn labels(kustomization: Value) -> Labels {
        Labels::read(&kustomization).expect("valid labels")
    }

    fn messages(kustomization: Value) -> Vec<String> {
        Labels::read(&kustomization).expect_err("refused").iter().map(ToString::to_string).collect()
    }

    #[test]
    fn common_labels_reach_metadata_selector_and_template() {
        let mut object = deployment();
        labels(json!({"commonLabels": {"team": "a"}})).apply(&mut object).unwrap();
        assert_eq!(object["metadata"]["labels"], json!({"team": "a"}));
        assert_eq!(object["spec"]["selector"]["matchLabels"], json!({"app": "web", "team": "a"}));
        assert_eq!(object["spec"]["template"]["metadata"]["labels"], json!({"app": "web", "team": "a"}));
    }

    #[test]
    fn a_labels_entry_without_flags_writes_metadata_only() {
        let mut object = deployment();
        labels(json!({"labels": [{"pairs": {"team": "a"}}]})).apply(&mut object).unwrap();
        assert_eq!(object["metadata"]["labels"], json!({"team": "a"}));
        assert_eq!(object["spec"]["selector"]["matchLabels"], json!({"app": "web"}));
        assert_eq!(object["spec"]["template"]["metadata"]["labels"], json!({"app": "web"}));
    }

    #[test]
    fn include_templates_writes_templates_but_not_selectors() {
        let mut object = deployment();
        labels(json!({"labels": [{"pairs": {"team": "a"}, "includeTemplates": true}]})).apply(&mut object).unwrap();
        assert_eq!(object["spec"]["selector"]["matchLabels"], json!({"app": "web"}));
        assert_eq!(object["spec"]["template"]["metadata"]["labels"], json!({"app": "web", "team": "a"}));
    }

    #[test]
    fn include_selectors_writes_selectors_and_templates() {
        let mut object = deployment();
        labels(json!({"labels": [{"pairs": {"team": "a"}, "includeSelectors": true}]})).apply(&mut object).unwrap();
        assert_eq!(object["spec"]["selector"]["matchLabels"], json!({"app": "web", "team": "a"}));
        assert_eq!(object["spec"]["template"]["metadata"]["labels"], json!({"app": "web", "team": "a"}));
    }

    #[test]
    fn common_labels_come_after_every_labels_entry() {
        let mut object = json!({"kind": "ConfigMap", "metadata": {"name": "c"}});
        labels(
            json!({"commonLabels": {"k": "common"}, "labels": [{"pairs": {"k": "first"}}, {"pairs": {"k": "second"}}]}),
        )
        .apply(&mut object)
        .unwrap();
        assert_eq!(object["metadata"]["labels"], json!({"k": "common"}));
    }

    #[test]
    fn a_narrower_set_changing_a_label_a_selector_also_holds_is_refused() {
        // A base's commonLabels, then an overlay's labels entry without includeSelectors: in
        // kustomize the overlay's value would leak into the base's selector.
        let mut object = deployment();
        labels(json!({"commonLabels": {"owner": "alice"}})).apply(&mut object).unwrap();
        let problem = labels(json!({"labels": [{"pairs": {"owner": "bob"}}]})).apply(&mut object).unwrap_err();
        assert_eq!(problem.field, "spec.selector.matchLabels.owner");
        assert!(
            problem.message.starts_with("labels[0] changes label `owner` from `alice` to `bob`"),
            "{}",
            problem.message
        );
        // The same within one kustomization: a later entry narrower than an earlier one.
        let mut object = deployment();
        let both = labels(json!({"labels": [
            {"pairs": {"owner": "alice"}, "includeSelectors": true},
            {"pairs": {"owner": "bob"}, "includeTemplates": true},
        ]}));
        assert_eq!(both.apply(&mut object).unwrap_err().field, "spec.selector.matchLabels.owner");
    }

    #[test]
    fn changing_a_label_everywhere_or_where_no_selector_holds_it_is_fine() {
        let mut object = deployment();
        labels(json!({"commonLabels": {"owner": "alice"}})).apply(&mut object).unwrap();
        labels(json!({"labels": [{"pairs": {"owner": "bob"}, "includeSelectors": true}]})).apply(&mut object).unwrap();
        assert_eq!(object["spec"]["selector"]["matchLabels"]["owner"], "bob");
        let mut object = deployment();
        labels(json!({"labels": [{"pairs": {"owner": "alice"}}]})).apply(&mut object).unwrap();
        labels(json!({"labels": [{"pairs": {"owner": "bob"}}]})).apply(&mut object).unwrap();
        assert_eq!(object["metadata"]["labels"]["owner"], "bob");
        labels(json!({"labels": [{"pairs": {"app": "web"}}]})).apply(&mut object).unwrap();
    }

    #[test]
    fn selectors_kustomize_does_not_create_stay_absent() {
        let mut pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "spec": {"maxUnavailable": 1}});
        let mut policy =
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "spec": {"podSelector": {}}});
        let common = labels(json!({"commonLabels": {"team": "a"}}));
        common.apply(&mut pdb).unwrap();
        common.apply(&mut policy).unwrap();
        assert_eq!(pdb["spec"], json!({"maxUnavailable": 1}));
        assert_eq!(policy["spec"], json!({"podSelector": {}}), "an empty pod selector (all pods) is not narrowed");
    }

    #[test]
    fn a_service_gets_a_selector_even_without_one() {
        let mut service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}});
        labels(json!({"commonLabels": {"team": "a"}})).apply(&mut service).unwrap();
        assert_eq!(service["spec"]["selector"], json!({"team": "a"}));
    }

    #[test]
    fn labels_that_are_not_a_map_are_a_problem_at_that_field() {
        let mut object = json!({"kind": "ConfigMap", "metadata": {"labels": ["a"]}});
        let problem = labels(json!({"commonLabels": {"team": "a"}})).apply(&mut object).unwrap_err();
        assert_eq!(problem.field, "metadata.labels");
        assert!(problem.message.contains("commonLabels"), "{}", problem.message);
    }

    #[test]
    fn numbers_and_booleans_are_refused_with_a_hint_to_quote() {
        let found = messages(json!({"commonLabels": {"n": 1}, "labels": [{"pairs": {"b": true}}]}));
        assert_eq!(
            found,
            [
                "labels[0].pairs.b: expected a string, found a boolean; quote it",
                "commonLabels.n: expected a string, found a number; quote it",
            ]
        );
    }

    #[test]
    fn invalid_keys_and_values_are_refused_by_field() {
        let found = messages(json!({"commonLabels": {"bad key": "x", "ok": "has space"}}));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("commonLabels.bad key: not a valid key"), "{found:?}");
        assert!(found[1].starts_with("commonLabels.ok: not a valid label value"), "{found:?}");
    }

    #[test]
    fn custom_field_specs_and_unknown_fields_are_refused_by_name() {
        let found = messages(json!({"labels": [{"pairs": {"a": "b"}, "fields": [{"path": "spec/x"}], "colour": 1}]}));
        assert!(found.iter().any(|m| m.starts_with("labels[0].colour: unknown field")), "{found:?}");
        assert!(
            found.iter().any(|m| m.starts_with("labels[0].fields: custom field specs are not supported")),
            "{found:?}"
        );
    }

    #[test]
    fn an_attacker_cannot_send_unbounded_labels() {
        let many: serde_json::Map<String, Value> = (0..=MAX_ENTRIES).map(|i| (format!("k{i}"), json!("v"))).collect();
        let found = messages(json!({"commonLabels": many}));
        assert_eq!(found, [format!("commonLabels: {} entries; at most {MAX_ENTRIES} are accepted", MAX_ENTRIES + 1)]);
        let entries: Vec<Value> = (0..=MAX_ENTRIES).map(|_| json!({"pairs": {"a": "b"}})).collect();
        assert!(messages(json!({"labels": entries}))[0].starts_with("labels: 1001 entries"));
    }

    #[test]
    fn nothing_to_do_without_pairs() {
        assert!(labels(json!({"labels": [{"pairs": {}}], "commonLabels": null})).is_empty());
        assert!(!labels(json!({"commonLabels": {"a": "b"}})).is_empty());
    }

    // === stale labels found by lookups against every change compared with every field ===

    /// `apply` as it was: every change compared with every field left alone.
    fn apply_before(labels: &Labels, object: &mut Value) -> Result<(), Problem> {
        for set in &labels.sets {
            let mut changed: Vec<(&str, String, &str)> = Vec::new();
            for spec in set.specs {
                walk(object, spec, Create::Map, &mut |node, at| match node {
                    // Only reached without `create`: kustomize leaves a null selector alone.
                    Value::Null => Ok(()),
                    Value::Object(labels) => {
                        for (key, value) in &set.pairs {
                            let old = labels.insert(key.clone(), Value::String(value.clone()));
                            if let Some(Value::String(old)) = old
                                && old != *value
                            {
                                changed.push((key, old, value));
                            }
                        }
                        Ok(())
                    }
                    other => Err(Problem::field(
                        at,
                        format!("{} cannot add labels here: expected a map, found {}", set.field, shape(other)),
                    )),
                })?;
            }
            if changed.is_empty() {
                continue;
            }
            let mut stale = None;
            for spec in COMMON_LABELS.iter().filter(|spec| !set.specs.contains(spec)) {
                find(object, spec, &mut |node, at| {
                    for (key, old, new) in &changed {
                        if stale.is_none() && node.get(*key).and_then(Value::as_str) == Some(old) {
                            stale = Some(Problem::field(
                                join_path(at, key),
                                format!(
                                    "{} changes label `{key}` from `{old}` to `{new}` but not here, where it is `{old}` \
                                     too: kustomize v5.5 changes it here as well when one transformer (`commonLabels` \
                                     or `includeSelectors`, here or in a base) wrote both, and not otherwise; set it \
                                     with `includeSelectors: true` to change it everywhere, or keep its value",
                                    set.field
                                ),
                            ));
                        }
                    }
                });
            }
            if let Some(problem) = stale {
                return Err(problem);
            }
        }
        Ok(())
    }

    const KEYS: [&str; 3] = ["app", "team", "tier"];
    const VALUES: [&str; 3] = ["a", "b", "c"];

    fn label_map() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map(0..3usize, 0..3usize, 0..3)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (KEYS[k].to_owned(), json!(VALUES[v]))).collect()))
    }

    /// A StatefulSet whose selector, template and claim templates hold some of the labels.
    fn stateful_set() -> impl Strategy<Value = Value> {
        (label_map(), label_map(), label_map(), proptest::collection::vec(label_map(), 0..3)).prop_map(
            |(metadata, selector, template, claims)| {
                let claims: Vec<Value> = claims.into_iter().map(|l| json!({"metadata": {"labels": l}})).collect();
                json!({
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "labels": metadata},
                    "spec": {"selector": {"matchLabels": selector}, "template": {"metadata": {"labels": template}},
                             "volumeClaimTemplates": claims},
                })
            },
        )
    }

    fn kustomization() -> impl Strategy<Value = Value> {
        let entry = (label_map(), 0..3usize).prop_map(|(pairs, flag)| match flag {
            0 => json!({"pairs": pairs}),
            1 => json!({"pairs": pairs, "includeTemplates": true}),
            _ => json!({"pairs": pairs, "includeSelectors": true}),
        });
        (proptest::collection::vec(entry, 0..3), label_map())
            .prop_map(|(labels, common)| json!({"labels": labels, "commonLabels": common}))
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn stale_labels_are_found_as_comparing_every_change_with_every_field_found_them(
            object in stateful_set(),
            layers in proptest::collection::vec(kustomization(), 1..3),
        ) {
            let mut indexed = object.clone();
            let mut before = object;
            for layer in layers {
                let layer = labels(layer);
                let (a, b) = (layer.apply(&mut indexed), apply_before(&layer, &mut before));
                proptest::prop_assert_eq!(&a, &b);
                proptest::prop_assert_eq!(&indexed, &before);
                if a.is_err() {
                    break;
                }
            }
        }
    }

    #[test]
    fn attacker_a_thousand_changed_labels_over_twenty_thousand_claim_templates_take_linear_work() {
        let (count, pairs) = (20_000, crate::kustomize::fields::MAX_ENTRIES);
        let old: Map<String, Value> = (0..pairs).map(|i| (format!("k{i}"), json!("old"))).collect();
        let new: Map<String, Value> = (0..pairs).map(|i| (format!("k{i}"), json!("new"))).collect();
        let claims: Vec<Value> = (0..count).map(|_| json!({"metadata": {"labels": {"k0": "other"}}})).collect();
        let mut object = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "labels": old},
            "spec": {"volumeClaimTemplates": claims}});
        let layer = labels(json!({"labels": [{"pairs": new}]}));
        let (applied, work) = counted(|| layer.apply(&mut object));
        applied.unwrap();
        assert_eq!(object["metadata"]["labels"]["k999"], "new");
        // A lookup per change and per claim template; comparing each change with each template
        // made 20 million.
        assert!(work <= 3 * (pairs + count), "{work} comparisons");
    }
}
