//! The transformers that change fields but not names: labels, annotations, images, replicas.
//!
//! Each reads its fields of a kustomization (`read`, every problem at once, located by field
//! such as `images[2].digest`) and applies them to one object (`apply`), walking kustomize's
//! default field specs ([`fieldspec`]). kustomize runs them at each level after the patches and
//! the name transformers, each over every object before the next: labels, annotations, then
//! `patchesJson6902`, then replicas ([`replicas::Replicas::apply_all`], which also fails on an
//! entry nothing answers to), then images.

pub mod annotations;
pub(crate) mod fieldspec;
pub mod images;
pub mod labels;
pub mod replicas;

use serde_json::Value;

use crate::problem::Problems;

/// The most entries a list field (`images`, `replicas`, `labels`) or a map field
/// (`commonLabels`, `pairs`, `commonAnnotations`) may hold.
pub const MAX_ENTRIES: usize = 1_000;

/// The most bytes the keys and values of `commonAnnotations` may hold together (the API server's
/// limit on an object's annotations).
pub(crate) const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// A kustomization field that must be a list: its elements, or none when absent or `null`.
fn list<'a>(kustomization: &'a Value, field: &str, problems: &mut Problems) -> &'a [Value] {
    match kustomization.get(field) {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) if items.len() <= MAX_ENTRIES => items,
        Some(Value::Array(items)) => {
            problems.push(field, format!("{} entries; at most {MAX_ENTRIES} are accepted", items.len()));
            &[]
        }
        Some(other) => {
            problems.push(field, format!("expected a list, found {}", fieldspec::shape(other)));
            &[]
        }
    }
}

/// A map of strings (`commonLabels`, `labels[0].pairs`), sorted by key, each key and value
/// checked by `check` (which says what is wrong). Numbers and booleans are refused, as
/// kustomize refuses them: a label is a string, quoted in YAML when it looks like something
/// else.
fn string_map(
    value: Option<&Value>,
    field: &str,
    problems: &mut Problems,
    check: &dyn Fn(&str, &str) -> Result<(), String>,
) -> Vec<(String, String)> {
    let map = match value {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Object(map)) if map.len() <= MAX_ENTRIES => map,
        Some(Value::Object(map)) => {
            problems.push(field, format!("{} entries; at most {MAX_ENTRIES} are accepted", map.len()));
            return Vec::new();
        }
        Some(other) => {
            problems.push(field, format!("expected a map of strings, found {}", fieldspec::shape(other)));
            return Vec::new();
        }
    };
    let mut pairs = Vec::new();
    for (key, value) in map {
        let at = format!("{field}.{key}");
        let Some(value) = value.as_str() else {
            problems.push(at, format!("expected a string, found {}; quote it", fieldspec::shape(value)));
            continue;
        };
        match check(key, value) {
            Ok(()) => pairs.push((key.clone(), value.to_owned())),
            Err(message) => problems.push(at, message),
        }
    }
    pairs.sort();
    pairs
}

/// Refuses the keys of an entry outside `known`, by name.
fn known_keys(entry: &serde_json::Map<String, Value>, known: &[&str], field: &str, problems: &mut Problems) {
    for key in entry.keys().filter(|k| !known.contains(&k.as_str())) {
        problems.push(format!("{field}.{key}"), format!("unknown field; accepted: {}", known.join(", ")));
    }
}

/// A string field of an entry: `Ok(None)` when absent, `null` or empty (kustomize's unset).
fn optional_string<'a>(
    entry: &'a serde_json::Map<String, Value>,
    key: &str,
    field: &str,
    problems: &mut Problems,
) -> Option<&'a str> {
    match entry.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            problems.push(
                format!("{field}.{key}"),
                format!("expected a string, found {}; quote it", fieldspec::shape(other)),
            );
            None
        }
    }
}

/// Kubernetes' qualified name (label and annotation keys): an optional DNS subdomain prefix and
/// `/`, then a name of 1 to 63 characters.
fn qualified_name(key: &str) -> Result<(), String> {
    let accepted = "accepted: an optional DNS subdomain prefix and `/`, then 1 to 63 letters, digits, `-`, `_` or `.`, \
                    starting and ending with a letter or digit";
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !dns_subdomain(prefix)
    {
        return Err(format!("the prefix `{prefix}` is not a lowercase DNS subdomain; {accepted}"));
    }
    if name.is_empty() || name.len() > 63 || !label_name(name) {
        return Err(format!("not a valid key; {accepted}"));
    }
    Ok(())
}

/// Kubernetes' label value: empty, or 1 to 63 characters like a qualified name's name part.
fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && label_name(value)) {
        Ok(())
    } else {
        Err("not a valid label value; accepted: empty, or 1 to 63 letters, digits, `-`, `_` or `.`, starting and \
             ending with a letter or digit"
            .into())
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, for a non-empty `s`.
fn label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_alphanumeric();
    bytes.first().is_some_and(alphanumeric)
        && bytes.last().is_some_and(alphanumeric)
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A lowercase RFC 1123 DNS subdomain of at most 253 characters.
fn dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let bytes = part.as_bytes();
            let lower_alphanumeric = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            bytes.first().is_some_and(lower_alphanumeric)
                && bytes.last().is_some_and(lower_alphanumeric)
                && bytes.iter().all(|b| lower_alphanumeric(b) || *b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_follow_kubernetes_qualified_names() {
        for good in ["app", "app.kubernetes.io/name", "a", "A_b-c.9", "example.com/X"] {
            assert_eq!(qualified_name(good), Ok(()), "{good}");
        }
        for bad in ["", "-a", "a-", "a/b/c", "Example.com/a", "/a", "a/", &"x".repeat(64), "a b", "ä"] {
            assert!(qualified_name(bad).is_err(), "{bad:?}");
        }
        assert!(qualified_name(&format!("{}/a", "x".repeat(254))).is_err());
    }

    #[test]
    fn label_values_are_empty_or_short_names() {
        for good in ["", "web", "1.0", "a_b-c"] {
            assert_eq!(label_value(good), Ok(()), "{good}");
        }
        for bad in ["-a", "a/b", &"x".repeat(64), "a b"] {
            assert!(label_value(bad).is_err(), "{bad:?}");
        }
    }
}
