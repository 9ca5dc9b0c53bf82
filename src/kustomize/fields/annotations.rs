//! `commonAnnotations` of a kustomization: every object's `metadata.annotations` and its pod
//! templates' ([`COMMON_ANNOTATIONS`]).

use serde_json::Value;

use super::fieldspec::{COMMON_ANNOTATIONS, Create, shape, walk};
use super::{MAX_ANNOTATION_BYTES, qualified_name, string_map};
use crate::problem::{Problem, Problems};

/// `commonAnnotations` of one kustomization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Annotations {
    pairs: Vec<(String, String)>,
}

impl Annotations {
    /// Reads `commonAnnotations` from a kustomization. Keys must be Kubernetes qualified names
    /// (checked lowercased, as the API server does); values are any strings, at most
    /// [`MAX_ANNOTATION_BYTES`] with the keys.
    pub fn read(kustomization: &Value) -> Result<Annotations, Vec<Problem>> {
        let mut problems = Problems::default();
        let check = |key: &str, _: &str| qualified_name(&key.to_ascii_lowercase());
        let pairs = string_map(kustomization.get("commonAnnotations"), "commonAnnotations", &mut problems, &check);
        let bytes: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
        if bytes > MAX_ANNOTATION_BYTES {
            problems.push(
                "commonAnnotations",
                format!("{bytes} bytes of keys and values; at most {MAX_ANNOTATION_BYTES} are accepted"),
            );
        }
        problems.finish(Annotations { pairs })
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Applies them to one object. An annotation field that is not a map is a problem at that
    /// field of the object.
    pub fn apply(&self, object: &mut Value) -> Result<(), Problem> {
        if self.pairs.is_empty() {
            return Ok(());
        }
        for spec in COMMON_ANNOTATIONS {
            walk(object, spec, Create::Map, &mut |node, at| match node {
                Value::Object(annotations) => {
                    for (key, value) in &self.pairs {
                        annotations.insert(key.clone(), Value::String(value.clone()));
                    }
                    Ok(())
                }
                other => Err(Problem::field(
                    at,
                    format!("commonAnnotations cannot be added here: expected a map, found {}", shape(other)),
                )),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn annotations(kustomization: Value) -> Annotations {
        Annotations::read(&kustomization).expect("valid annotations")
    }

    #[test]
    fn every_object_and_its_pod_templates_are_annotated() {
        let note = annotations(json!({"commonAnnotations": {"note": "hi"}}));
        let mut cron =
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {}}}}});
        note.apply(&mut cron).unwrap();
        assert_eq!(cron["metadata"]["annotations"], json!({"note": "hi"}));
        assert_eq!(cron["spec"]["jobTemplate"]["metadata"]["annotations"], json!({"note": "hi"}));
        assert_eq!(cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"], json!({"note": "hi"}));
        let mut config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"annotations": {"a": "b"}}});
        note.apply(&mut config).unwrap();
        assert_eq!(
            config,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"annotations": {"a": "b", "note": "hi"}}})
        );
    }

    #[test]
    fn an_existing_annotation_is_overwritten() {
        let mut object = json!({"kind": "Deployment", "metadata": {"annotations": {"note": "old"}}, "spec": {"template": {"metadata": {"annotations": {"note": "old"}}}}});
        annotations(json!({"commonAnnotations": {"note": "new"}})).apply(&mut object).unwrap();
        assert_eq!(object["metadata"]["annotations"]["note"], "new");
        assert_eq!(object["spec"]["template"]["metadata"]["annotations"]["note"], "new");
    }

    #[test]
    fn values_may_be_any_string_but_keys_must_be_qualified_names() {
        let free = annotations(json!({"commonAnnotations": {"Example.com/Note": "any text: {with} / spaces"}}));
        assert!(!free.is_empty(), "annotation keys are checked lowercased, values are free");
        let found = Annotations::read(&json!({"commonAnnotations": {"a b": "x", "n": 1}})).unwrap_err();
        let found: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(found[0].starts_with("commonAnnotations.a b: not a valid key"), "{found:?}");
        assert_eq!(found[1], "commonAnnotations.n: expected a string, found a number; quote it");
    }

    #[test]
    fn an_attacker_cannot_send_unbounded_annotations() {
        let big = "x".repeat(MAX_ANNOTATION_BYTES);
        let found = Annotations::read(&json!({"commonAnnotations": {"a": big}})).unwrap_err();
        assert!(found[0].to_string().starts_with("commonAnnotations: 262145 bytes"), "{found:?}");
    }

    #[test]
    fn annotations_that_are_not_a_map_are_a_problem_at_that_field() {
        let mut object = json!({"kind": "Deployment", "spec": {"template": {"metadata": {"annotations": "x"}}}});
        let problem = annotations(json!({"commonAnnotations": {"a": "b"}})).apply(&mut object).unwrap_err();
        assert_eq!(problem.field, "spec.template.metadata.annotations");
    }
}
