//! Patch targets: which objects a `patches` entry applies to, as kustomize v5.5 selects them.
//!
//! `group`, `version`, `kind`, `name` and `namespace` are regular expressions anchored at both
//! ends (`web` matches only `web`; `web-.*` every name starting with `web-`); an object without
//! a namespace is in `default` for matching (kustomize's "effective namespace"), and a
//! cluster-scoped one matches no `namespace` selector. `labelSelector` and `annotationSelector`
//! are Kubernetes label selector strings: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
//! `k`, `!k`, `k>1`, `k<1`, comma-separated (all must hold).

use std::collections::HashSet;

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use crate::kustomize::comparisons::Counted;
use crate::kustomize::patch::schema::MergeKeys;
use crate::problem::{Problem, Problems};

/// Most a pattern compiles to: a hostile pattern is refused, never slow (the regex crate runs
/// in linear time).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A `target` of a `patches` or `patchesJson6902` entry.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: Option<LabelSelector>,
    annotations: Option<LabelSelector>,
}

/// The fields a target may have.
const FIELDS: &[&str] = &["group", "version", "kind", "name", "namespace", "labelSelector", "annotationSelector"];

impl Selector {
    /// Reads a `target` map; problems name the field (relative to the target).
    pub fn parse(target: &Value) -> Result<Selector, Vec<Problem>> {
        let mut problems = Problems::default();
        let Some(map) = target.as_object() else {
            problems.push(
                "",
                "a target is a map with group, version, kind, name, namespace, labelSelector, annotationSelector",
            );
            return problems.finish(Selector::default());
        };
        for key in map.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
            problems.push(key.as_str(), format!("unknown target field; expected one of {}", FIELDS.join(", ")));
        }
        let mut text = |field: &str| -> Option<String> {
            match map.get(field) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if s.is_empty() => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => {
                    problems.push(field, format!("expected a string, found {other}"));
                    None
                }
            }
        };
        let fields: Vec<Option<String>> = FIELDS.iter().map(|f| text(f)).collect();
        let mut pattern = |field: &str, value: &Option<String>| -> Option<Regex> {
            let value = value.as_ref()?;
            match RegexBuilder::new(&format!("^(?:{value})$")).size_limit(REGEX_SIZE_LIMIT).build() {
                Ok(regex) => Some(regex),
                Err(e) => {
                    problems.push(field, format!("not a regular expression: {}", first_line(&e.to_string())));
                    None
                }
            }
        };
        let selector = Selector {
            group: pattern("group", &fields[0]),
            version: pattern("version", &fields[1]),
            kind: pattern("kind", &fields[2]),
            name: pattern("name", &fields[3]),
            namespace: pattern("namespace", &fields[4]),
            labels: None,
            annotations: None,
        };
        let mut selector = selector;
        for (index, field) in [(5, "labelSelector"), (6, "annotationSelector")] {
            if let Some(text) = &fields[index] {
                match LabelSelector::parse(text) {
                    Ok(parsed) if index == 5 => selector.labels = Some(parsed),
                    Ok(parsed) => selector.annotations = Some(parsed),
                    Err(message) => problems.push(field, message),
                }
            }
        }
        problems.finish(selector)
    }

    /// Whether `object` is selected.
    pub fn matches(&self, object: &Value) -> bool {
        self.matches_with(object, None, None)
    }

    /// Whether `object` is selected when its name and namespace may also match the ones it had
    /// first (kustomize's original id, before prefixes, suffixes and namespaces of the bases):
    /// `original_namespace` is `""` when it had none.
    pub fn matches_with(&self, object: &Value, original_name: Option<&str>, original_namespace: Option<&str>) -> bool {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
        let api_version = text("/apiVersion");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = text("/kind");
        let anchored = |regex: &Option<Regex>, value: &str| regex.as_ref().is_none_or(|r| r.is_match(value));
        if !anchored(&self.group, group) || !anchored(&self.version, version) || !anchored(&self.kind, kind) {
            return false;
        }
        let name_matches = |name: &Regex| {
            name.is_match(text("/metadata/name")) || original_name.is_some_and(|original| name.is_match(original))
        };
        if self.name.as_ref().is_some_and(|name| !name_matches(name)) {
            return false;
        }
        if let Some(namespace) = &self.namespace {
            if MergeKeys::builtin().is_cluster_scoped(api_version, kind) {
                return false;
            }
            let effective =
                |namespace: &'_ str| if namespace.is_empty() { "default".to_owned() } else { namespace.to_owned() };
            let current = effective(text("/metadata/namespace"));
            if !namespace.is_match(&current) && !original_namespace.is_some_and(|o| namespace.is_match(&effective(o))) {
                return false;
            }
        }
        let empty = Map::new();
        let map = |pointer: &str| object.pointer(pointer).and_then(Value::as_object).unwrap_or(&empty);
        self.labels.as_ref().is_none_or(|s| s.matches(map("/metadata/labels")))
            && self.annotations.as_ref().is_none_or(|s| s.matches(map("/metadata/annotations")))
    }
}

fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or(text).trim()
}

/// A parsed label selector string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    /// The values are a set: a check costs a lookup however many a tenant lists.
    In(String, HashSet<Counted<String>>),
    NotIn(String, HashSet<Counted<String>>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl LabelSelector {
    /// Parses `app=web,tier in (a,b),!legacy`; the message says what was expected where.
    pub fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            let (requirement, after) = requirement(rest)?;
            requirements.push(requirement);
            rest = after.trim_start();
            if let Some(after) = rest.strip_prefix(',') {
                rest = after.trim_start();
                if rest.is_empty() {
                    return Err(format!("`{text}`: a requirement is expected after the last comma"));
                }
            } else if !rest.is_empty() {
                return Err(format!("`{text}`: expected `,` before `{rest}`"));
            }
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether every requirement holds for `labels`.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        let get = |key: &str| labels.get(key).map(|v| Counted(key_text(v)));
        self.0.iter().all(|requirement| match requirement {
            Requirement::In(key, values) => get(key).is_some_and(|v| values.contains(&v)),
            Requirement::NotIn(key, values) => get(key).is_none_or(|v| !values.contains(&v)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
            Requirement::GreaterThan(key, n) => get(key).and_then(|v| v.0.parse::<i64>().ok()).is_some_and(|v| v > *n),
            Requirement::LessThan(key, n) => get(key).and_then(|v| v.0.parse::<i64>().ok()).is_some_and(|v| v < *n),
        })
    }
}

fn key_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Characters of a label key (with its optional `prefix/`) or value.
fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

/// A key or value at the start of `text`, and the rest.
fn word(text: &str) -> (&str, &str) {
    let end = text.find(|c: char| !is_label_char(c)).unwrap_or(text.len());
    text.split_at(end)
}

fn requirement(text: &str) -> Result<(Requirement, &str), String> {
    if let Some(rest) = text.strip_prefix('!') {
        let (key, rest) = word(rest.trim_start());
        let key = label_key(key)?;
        return Ok((Requirement::DoesNotExist(key), rest));
    }
    let (key, rest) = word(text);
    let key = label_key(key)?;
    let rest = rest.trim_start();
    for (operator, negated) in [("==", false), ("!=", true), ("=", false)] {
        if let Some(rest) = rest.strip_prefix(operator) {
            let (value, rest) = word(rest.trim_start());
            let value = label_value(value)?;
            let values = HashSet::from([Counted(value)]);
            let requirement = if negated { Requirement::NotIn(key, values) } else { Requirement::In(key, values) };
            return Ok((requirement, rest));
        }
    }
    for (operator, greater) in [(">", true), ("<", false)] {
        if let Some(rest) = rest.strip_prefix(operator) {
            let (value, rest) = word(rest.trim_start());
            let n =
                value.parse::<i64>().map_err(|_| format!("`{key}{operator}{value}`: `{operator}` needs an integer"))?;
            let requirement = if greater { Requirement::GreaterThan(key, n) } else { Requirement::LessThan(key, n) };
            return Ok((requirement, rest));
        }
    }
    let (operator, after) = word(rest);
    if operator == "in" || operator == "notin" {
        let inner = after.trim_start().strip_prefix('(').ok_or_else(|| format!("`{key} {operator}`: expected `(`"))?;
        let close = inner.find(')').ok_or_else(|| format!("`{key} {operator} (`: expected `)`"))?;
        let values =
            inner[..close].split(',').map(|v| label_value(v.trim()).map(Counted)).collect::<Result<HashSet<_>, _>>()?;
        let requirement = if operator == "in" { Requirement::In(key, values) } else { Requirement::NotIn(key, values) };
        return Ok((requirement, &inner[close + 1..]));
    }
    Ok((Requirement::Exists(key), rest))
}

fn label_key(key: &str) -> Result<String, String> {
    let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
    let valid = !name.is_empty()
        && name.len() <= 63
        && !key.starts_with('/')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(key.to_owned())
    } else {
        Err(format!("`{key}` is not a label key (name or prefix/name, alphanumerics, `-`, `_`, `.`)"))
    }
}

fn label_value(value: &str) -> Result<String, String> {
    let valid = value.is_empty()
        || (value.len() <= 63
            && !value.contains('/')
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if valid {
        Ok(value.to_owned())
    } else {
        Err(format!("`{value}` is not a label value (at most 63 alphanumerics, `-`, `_`, `.`)"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kustomize::comparisons::counted;

    fn labels(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn label_selectors_as_kubernetes_reads_them() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "3"}));
        let yes = [
            "app=web",
            "app==web",
            "app",
            "!legacy",
            "tier in (front, back)",
            "tier notin (back)",
            "x!=y",
            "n>2",
            "n<4",
            "app=web,tier=front",
        ];
        for text in yes {
            assert!(LabelSelector::parse(text).unwrap().matches(&l), "{text} should match");
        }
        let no = [
            "app=db",
            "app!=web",
            "legacy",
            "!app",
            "tier in (back)",
            "tier notin (front)",
            "n>3",
            "app=web,tier=back",
        ];
        for text in no {
            assert!(!LabelSelector::parse(text).unwrap().matches(&l), "{text} should not match");
        }
        assert!(
            LabelSelector::parse("app=").unwrap().matches(&labels(json!({"app": ""}))),
            "an empty value is a value"
        );
        for bad in ["=web", "app in (a", "app=web,", "app web", "-x=y"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn names_are_anchored_regular_expressions() {
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web-1"}});
        let selects = |target: Value| Selector::parse(&target).unwrap().matches(&object);
        assert!(selects(json!({"name": "web-.*"})));
        assert!(!selects(json!({"name": "web"})));
        assert!(selects(json!({"group": "apps", "version": "v1", "kind": "Deploy.*"})));
        assert!(selects(json!({"group": ""})), "an empty field selects everything");
        assert!(!selects(json!({"group": "app"})), "group is anchored too");
        assert!(selects(json!({"namespace": "default"})));
        assert!(!selects(json!({"namespace": "team-a"})));
        assert!(Selector::parse(&json!({"name": "(", "colour": "red"})).unwrap_err().len() == 2);
    }

    #[test]
    fn original_names_and_namespaces_match_too() {
        let object =
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "prod-web", "namespace": "team-a"}});
        let target = |t: Value| Selector::parse(&t).unwrap();
        assert!(target(json!({"name": "web"})).matches_with(&object, Some("web"), Some("")));
        assert!(!target(json!({"name": "web"})).matches(&object), "without the original, only the current name");
        assert!(target(json!({"name": "prod-web"})).matches_with(&object, Some("web"), Some("")));
        assert!(target(json!({"namespace": "default"})).matches_with(&object, Some("web"), Some("")));
        assert!(target(json!({"namespace": "team-a"})).matches_with(&object, Some("web"), Some("")));
        assert!(!target(json!({"namespace": "team-b"})).matches_with(&object, Some("web"), Some("")));
        assert!(!target(json!({"kind": "Deployment", "name": "web"})).matches_with(&object, Some("web"), None));
    }

    #[test]
    fn attacker_a_selector_listing_ten_thousand_values_costs_a_lookup_per_object() {
        let values: Vec<String> = (0..10_000).map(|i| format!("v{i}")).collect();
        let selector =
            LabelSelector::parse(&format!("app in ({}),tier notin ({})", values.join(","), values.join(",")))
                .expect("a selector");
        let objects: Vec<Map<String, Value>> =
            (0..10_000).map(|i| labels(json!({"app": format!("v{}", 2 * i), "tier": "web"}))).collect();
        let (selected, work) = counted(|| objects.iter().filter(|l| selector.matches(l)).count());
        assert_eq!(selected, 5_000);
        // A hash and a comparison or two per requirement and object, not one per listed value.
        assert!(work <= 3 * 2 * objects.len(), "{work} comparisons");
    }

    #[test]
    fn a_pattern_that_would_compile_huge_is_refused() {
        let problems = Selector::parse(&json!({"name": "((((a{100}){100}){100}){100})"})).unwrap_err();
        assert_eq!(problems[0].field, "name");
        assert!(problems[0].message.contains("not a regular expression"), "{}", problems[0]);
    }
}
