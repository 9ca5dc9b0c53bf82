//! Structural checking of a document against an OpenAPI v3 schema, reporting every unknown
//! field and every wrong type at once — what an API server does with strict field validation,
//! done before anything is sent.
//!
//! Only the parts of the schema language that cdtarget's and Kubernetes' generated schemas use
//! are understood: `type`, `nullable`, `properties`, `additionalProperties`, `items`, `enum`,
//! `anyOf`/`oneOf`/`allOf`, `$ref` into `$defs`/`definitions`, and the `x-kubernetes-*`
//! extensions for int-or-string and preserved unknown fields. `required` is left to the typed
//! validation that follows, which can say what the missing field is for.

use serde_json::Value;

use crate::problem::{Problem, join_path};

/// Checks `value` against `schema`, whose `$ref`s resolve against `root`; problems carry field
/// paths starting at `path`.
pub fn check(root: &Value, schema: &Value, value: &Value, path: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    check_into(root, schema, value, path, &mut problems);
    problems
}

fn check_into(root: &Value, schema: &Value, value: &Value, path: &str, out: &mut Vec<Problem>) {
    let schema = resolve(root, schema);
    let Some(schema) = schema.as_object() else { return };

    if value.is_null() && (schema.get("nullable") == Some(&Value::Bool(true)) || allows_null(schema)) {
        return;
    }
    if let Some(alternatives) = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array) {
        let best =
            alternatives.iter().map(|alt| check(root, alt, value, path)).min_by_key(Vec::len).unwrap_or_default();
        out.extend(best);
        return;
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for part in all {
            check_into(root, part, value, path, out);
        }
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            out.push(Problem::field(path, format!("expected an integer or a string, got {}", describe(value))));
        }
        return;
    }
    if let Some(expected) = expected_type(schema)
        && !type_matches(expected, value)
    {
        out.push(Problem::field(path, format!("expected {}, got {}", article(expected), describe(value))));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
        out.push(Problem::field(path, format!("{} is not allowed; accepted: {}", describe(value), list.join(", "))));
    }
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => check_object(root, schema, map, path, out),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check_into(root, item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn check_object(
    root: &Value,
    schema: &serde_json::Map<String, Value>,
    map: &serde_json::Map<String, Value>,
    path: &str,
    out: &mut Vec<Problem>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    for (key, child) in map {
        let child_path = join_path(path, key);
        if let Some(property) = properties.and_then(|p| p.get(key)) {
            check_into(root, property, child, &child_path, out);
        } else {
            match additional {
                Some(Value::Bool(true)) => {}
                Some(extra @ Value::Object(_)) => check_into(root, extra, child, &child_path, out),
                // Without `properties` and `additionalProperties` the schema says nothing.
                None if properties.is_none() => {}
                _ => {
                    let known: Vec<&str> =
                        properties.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
                    out.push(Problem::field(child_path, unknown_field_message(key, &known)));
                }
            }
        }
    }
}

/// "unknown field `tokenRefs` (did you mean `tokenRef`?); accepted fields: ..."
pub fn unknown_field_message(key: &str, known: &[&str]) -> String {
    let suggestion = known
        .iter()
        .map(|k| (edit_distance(&key.to_lowercase(), &k.to_lowercase()), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min();
    let mut message = format!("unknown field `{key}`");
    if let Some((_, k)) = suggestion {
        message.push_str(&format!(" (did you mean `{k}`?)"));
    }
    if known.is_empty() {
        message.push_str("; no fields are accepted here");
    } else {
        message.push_str(&format!("; accepted fields: {}", known.join(", ")));
    }
    message
}

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut current = schema;
    // A bounded number of hops guards against reference cycles.
    for _ in 0..16 {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else { break };
        let Some(pointer) = reference.strip_prefix('#') else { break };
        match root.pointer(pointer) {
            Some(target) => current = target,
            None => break,
        }
    }
    current
}

fn allows_null(schema: &serde_json::Map<String, Value>) -> bool {
    match schema.get("type") {
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        Some(Value::String(t)) => t == "null",
        _ => false,
    }
}

fn expected_type(schema: &serde_json::Map<String, Value>) -> Option<&str> {
    match schema.get("type")? {
        Value::String(t) => Some(t.as_str()),
        Value::Array(types) => types.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    }
}

fn article(expected: &str) -> String {
    match expected {
        "object" => "a mapping".into(),
        "array" => "a list".into(),
        "integer" => "an integer".into(),
        other => format!("a {other}"),
    }
}

/// A short description of a value for error messages (never more than a few characters of it).
pub fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(s) if s.chars().count() > 40 => {
            format!("a string (\"{}…\")", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("a string (\"{s}\")"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "tokenRef": {"type": "string"},
                "ip": {"type": "array", "items": {"type": "string"}},
                "nested": {"$ref": "#/$defs/Nested"},
                "port": {"x-kubernetes-int-or-string": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "kind": {"type": "string", "enum": ["a", "b"]},
                "maybe": {"type": "string", "nullable": true}
            },
            "$defs": {"Nested": {"type": "object", "properties": {"x": {"type": "integer"}}}}
        })
    }

    fn fields(value: Value) -> Vec<String> {
        let s = schema();
        check(&s, &s, &value, "spec").into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn unknown_field_is_reported_with_a_suggestion() {
        let s = schema();
        let problems = check(&s, &s, &json!({"tokenRefs": "x"}), "spec");
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].field, "spec.tokenRefs");
        assert!(problems[0].message.contains("did you mean `tokenRef`?"), "{}", problems[0].message);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let found = fields(json!({
            "ip": ["10.0.0.1", 5],
            "nested": {"x": "one", "y": 1},
            "labels": {"a": 1},
            "kind": "c",
            "bogus": true
        }));
        assert_eq!(found, ["spec.bogus", "spec.ip[1]", "spec.kind", "spec.labels.a", "spec.nested.x", "spec.nested.y"]);
    }

    #[test]
    fn int_or_string_and_nullable_are_accepted() {
        assert!(fields(json!({"port": 5, "maybe": null})).is_empty());
        assert!(fields(json!({"port": "http"})).is_empty());
        assert_eq!(fields(json!({"port": true})), ["spec.port"]);
    }
}
