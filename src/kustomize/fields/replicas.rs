//! `replicas` of a kustomization: `spec.replicas` of the Deployments, ReplicationControllers,
//! ReplicaSets and StatefulSets ([`REPLICAS`]) that answer to an entry's name, now or before a
//! rename. An entry no such object answers to is an error, as in kustomize.

use std::collections::HashMap;

use serde_json::Value;

use super::fieldspec::{Create, REPLICAS, shape, walk};
use super::{known_keys, list, optional_string};
use crate::kustomize::comparisons::Counted;
use crate::kustomize::resource::Resource;
use crate::problem::{Problem, Problems};

/// `replicas` of one kustomization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replicas {
    entries: Vec<Replica>,
}

/// One `replicas` entry.
#[derive(Clone, Debug, PartialEq)]
struct Replica {
    name: String,
    count: i64,
}

impl Replicas {
    /// Reads `replicas` from a kustomization: `name` and `count`, both required (kustomize takes
    /// a missing count for 0 and scales the workload down; refused here), the count an integer
    /// from 0 to 2147483647 (`spec.replicas` is an int32).
    pub fn read(kustomization: &Value) -> Result<Replicas, Vec<Problem>> {
        let mut problems = Problems::default();
        let mut entries = Vec::new();
        for (i, entry) in list(kustomization, "replicas", &mut problems).iter().enumerate() {
            let field = format!("replicas[{i}]");
            let Some(entry) = entry.as_object() else {
                problems.push(&field, format!("expected a map with `name` and `count`, found {}", shape(entry)));
                continue;
            };
            known_keys(entry, &["name", "count"], &field, &mut problems);
            let name = optional_string(entry, "name", &field, &mut problems);
            if name.is_none() && !matches!(entry.get("name"), Some(v) if !v.is_string()) {
                problems.push(
                    format!("{field}.name"),
                    "required: the name of a Deployment, ReplicationController, ReplicaSet or StatefulSet",
                );
            }
            let count = match entry.get("count") {
                None | Some(Value::Null) => {
                    problems.push(format!("{field}.count"), "required: an integer from 0 to 2147483647");
                    None
                }
                Some(Value::Number(n)) if n.as_i64().is_some_and(|c| (0..=i64::from(i32::MAX)).contains(&c)) => {
                    n.as_i64()
                }
                Some(other) => {
                    let found = if other.is_number() { format!("{other}") } else { shape(other).to_owned() };
                    problems.push(
                        format!("{field}.count"),
                        format!("expected an integer from 0 to 2147483647, found {found}"),
                    );
                    None
                }
            };
            if let (Some(name), Some(count)) = (name, count) {
                entries.push(Replica { name: name.to_owned(), count });
            }
        }
        problems.finish(Replicas { entries })
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets the replicas of one object, which answers to `answers_to(name)` for its current and
    /// earlier names.
    pub fn apply(&self, object: &mut Value, answers_to: &dyn Fn(&str) -> bool) -> Result<(), Problem> {
        let entries = (0..self.entries.len()).filter(|&i| answers_to(&self.entries[i].name));
        self.apply_entries(object, entries).map(drop)
    }

    /// [`apply`](Self::apply) over a whole build, then an error for each entry no object
    /// answered to (`replicas[1].name`), as kustomize fails then. This is what the builder calls.
    /// The entries are indexed by name, so each object costs a lookup per name it had, not a
    /// comparison per entry.
    pub fn apply_all(&self, resources: &mut [Resource]) -> Result<(), Vec<Problem>> {
        let mut by_name: HashMap<Counted<&str>, Vec<usize>> = HashMap::with_capacity(self.entries.len());
        for (i, entry) in self.entries.iter().enumerate() {
            by_name.entry(Counted(entry.name.as_str())).or_default().push(i);
        }
        let mut found = vec![false; self.entries.len()];
        let mut problems = Vec::new();
        for resource in resources.iter_mut() {
            // `names::answers_to`'s rule: the entries named as the object is now or was before.
            let names = std::iter::once(resource.name()).chain(resource.previous.iter().map(|p| p.name.as_str()));
            let mut entries: Vec<usize> =
                names.filter_map(|name| by_name.get(&Counted(name))).flatten().copied().collect();
            if entries.is_empty() {
                continue;
            }
            // In the entries' order, each once, as a scan of them would apply them.
            entries.sort_unstable();
            entries.dedup();
            match self.apply_entries(&mut resource.object, entries.into_iter()) {
                Ok(matched) => matched.into_iter().for_each(|i| found[i] = true),
                Err(problem) => problems.push(problem),
            }
        }
        for (i, entry) in self.entries.iter().enumerate() {
            if !found[i] {
                problems.push(Problem::field(
                    format!("replicas[{i}].name"),
                    format!(
                        "no Deployment, ReplicationController, ReplicaSet or StatefulSet is named `{}` (now or before \
                         a rename)",
                        entry.name
                    ),
                ));
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    /// Sets the replicas of `object` by `entries` (positions, in order) and says which of them
    /// it is a workload for.
    fn apply_entries(&self, object: &mut Value, entries: impl Iterator<Item = usize>) -> Result<Vec<usize>, Problem> {
        let mut matched = Vec::new();
        for i in entries {
            let entry = &self.entries[i];
            for spec in REPLICAS {
                if !spec.selects(object) {
                    continue;
                }
                matched.push(i);
                walk(object, spec, Create::Scalar, &mut |node, _| {
                    *node = Value::from(entry.count);
                    Ok(())
                })?;
            }
        }
        Ok(matched)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{ProptestConfig, Strategy, any};
    use serde_json::json;

    use super::*;
    use crate::kustomize::comparisons::counted;
    use crate::kustomize::resource::{Origin, PreviousId};

    fn replicas(entries: Value) -> Replicas {
        Replicas::read(&json!({ "replicas": entries })).expect("valid replicas")
    }

    fn refused(entries: Value) -> Vec<String> {
        Replicas::read(&json!({ "replicas": entries })).expect_err("refused").iter().map(ToString::to_string).collect()
    }

    fn resource(object: Value) -> Resource {
        Resource::from_document(object, Origin::Document { file: "r.yaml".into(), index: 1, line: 1 })
    }

    #[test]
    fn the_count_is_set_and_spec_replicas_created() {
        let mut objects = vec![
            resource(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 1}}),
            ),
            resource(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}})),
        ];
        replicas(json!([{"name": "web", "count": 3}, {"name": "db", "count": 0}])).apply_all(&mut objects).unwrap();
        assert_eq!(objects[0].object["spec"]["replicas"], 3);
        assert_eq!(objects[1].object["spec"], json!({"replicas": 0}));
    }

    #[test]
    fn an_earlier_name_is_enough() {
        let mut renamed =
            resource(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "prod-web"}}));
        renamed.previous.push(PreviousId { name: "web".into(), namespace: None });
        let mut objects = vec![renamed];
        replicas(json!([{"name": "web", "count": 2}])).apply_all(&mut objects).unwrap();
        assert_eq!(objects[0].object["spec"]["replicas"], 2);
    }

    #[test]
    fn other_kinds_of_the_same_name_are_left_alone_and_an_unmatched_entry_is_an_error() {
        let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"}, "spec": {}});
        let mut objects = vec![resource(hpa.clone())];
        let problems = replicas(json!([{"name": "web", "count": 2}])).apply_all(&mut objects).unwrap_err();
        assert_eq!(objects[0].object, hpa);
        assert_eq!(
            problems[0].to_string(),
            "replicas[0].name: no Deployment, ReplicationController, ReplicaSet or StatefulSet is named `web` (now or \
             before a rename)"
        );
    }

    #[test]
    fn apply_goes_by_the_callers_names() {
        let mut object = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "x"}});
        replicas(json!([{"name": "old", "count": 4}])).apply(&mut object, &|n| n == "old").unwrap();
        assert_eq!(object["spec"]["replicas"], 4);
    }

    #[test]
    fn a_spec_that_is_not_a_map_is_a_problem_at_that_field() {
        let mut object = json!({"kind": "Deployment", "metadata": {"name": "web"}, "spec": "x"});
        let problem = replicas(json!([{"name": "web", "count": 1}])).apply(&mut object, &|n| n == "web").unwrap_err();
        assert_eq!(problem.field, "spec");
    }

    /// `apply_all` as it was before the index: every entry compared with every object's names.
    fn apply_all_before(replicas: &Replicas, resources: &mut [Resource]) -> Result<(), Vec<Problem>> {
        let mut found = vec![false; replicas.entries.len()];
        let mut problems = Vec::new();
        for resource in resources.iter_mut() {
            let previous: Vec<String> = resource.previous.iter().map(|p| p.name.clone()).collect();
            let current = resource.name().to_owned();
            let answers = |name: &str| name == current || previous.iter().any(|p| p == name);
            let entries = (0..replicas.entries.len()).filter(|&i| answers(&replicas.entries[i].name));
            match replicas.apply_entries(&mut resource.object, entries) {
                Ok(matched) => matched.into_iter().for_each(|i| found[i] = true),
                Err(problem) => problems.push(problem),
            }
        }
        for (i, entry) in replicas.entries.iter().enumerate() {
            if !found[i] {
                problems.push(Problem::field(
                    format!("replicas[{i}].name"),
                    format!(
                        "no Deployment, ReplicationController, ReplicaSet or StatefulSet is named `{}` (now or before \
                         a rename)",
                        entry.name
                    ),
                ));
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    const NAMES: [&str; 3] = ["a", "b", "c"];

    /// A workload (or not) named from [`NAMES`], maybe renamed, maybe with a spec that is no map.
    fn object() -> impl Strategy<Value = Resource> {
        (0..3usize, 0..3usize, proptest::collection::vec(0..3usize, 0..3), any::<bool>()).prop_map(
            |(kind, name, earlier, broken)| {
                let kind = ["Deployment", "StatefulSet", "HorizontalPodAutoscaler"][kind];
                let mut object = json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": NAMES[name]}});
                if broken {
                    object["spec"] = json!("x");
                }
                let mut resource = resource(object);
                resource.previous =
                    earlier.into_iter().map(|n| PreviousId { name: NAMES[n].into(), namespace: None }).collect();
                resource
            },
        )
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_indexed_entries_give_what_the_scan_gave(
            resources in proptest::collection::vec(object(), 0..6),
            entries in proptest::collection::vec((0..3usize, 0..5i64), 0..5),
        ) {
            let entries: Vec<Value> = entries.into_iter().map(|(n, c)| json!({"name": NAMES[n], "count": c})).collect();
            let replicas = replicas(Value::Array(entries));
            let mut indexed = resources.clone();
            let mut before = resources;
            proptest::prop_assert_eq!(replicas.apply_all(&mut indexed), apply_all_before(&replicas, &mut before));
            proptest::prop_assert_eq!(indexed, before);
        }
    }

    #[test]
    fn attacker_a_thousand_entries_over_twenty_thousand_objects_take_linear_work() {
        let (count, entries) = (20_000, crate::kustomize::fields::MAX_ENTRIES);
        let mut objects: Vec<Resource> = (0..count)
            .map(|i| {
                let mut renamed = resource(
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": format!("p-web-{i}")}}),
                );
                renamed.previous.push(PreviousId { name: format!("web-{i}"), namespace: None });
                renamed
            })
            .collect();
        let replicas =
            replicas(Value::Array((0..entries).map(|i| json!({"name": format!("web-{i}"), "count": 2})).collect()));
        let (applied, work) = counted(|| replicas.apply_all(&mut objects));
        applied.expect("every entry names a Deployment");
        assert_eq!(objects[entries - 1].object["spec"]["replicas"], 2);
        assert!(objects[entries].object.get("spec").is_none());
        // A lookup per name of each object; the scan compared each of them with every entry.
        assert!(work <= 3 * (2 * count + entries), "{work} comparisons");
    }

    #[test]
    fn entries_are_refused_by_field_with_what_is_accepted() {
        let found = refused(json!([
            {"name": "web"},
            {"name": "web", "count": -1},
            {"name": "web", "count": "3"},
            {"name": "web", "count": 2.5},
            {"name": "web", "count": 2147483648_i64},
            {"count": 1},
            {"name": "web", "count": 1, "kind": "Deployment"},
        ]));
        let expected = [
            "replicas[0].count: required",
            "replicas[1].count: expected an integer from 0 to 2147483647, found -1",
            "replicas[2].count: expected an integer from 0 to 2147483647, found a string",
            "replicas[3].count: expected an integer from 0 to 2147483647, found 2.5",
            "replicas[4].count: expected an integer from 0 to 2147483647, found 2147483648",
            "replicas[5].name: required",
            "replicas[6].kind: unknown field; accepted: name, count",
        ];
        assert_eq!(found.len(), expected.len(), "{found:#?}");
        for (found, expected) in found.iter().zip(expected) {
            assert!(found.starts_with(expected), "{found} should start with {expected}");
        }
    }
}
