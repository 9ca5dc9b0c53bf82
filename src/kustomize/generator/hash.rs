//! kustomize's content hash of a ConfigMap or Secret (`api/hasher` in kustomize v5.5): Go's
//! `json.Marshal` of a few fields, its SHA-256, and the first ten hex digits with some replaced by
//! letters so the suffix never reads as a number.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The suffix kustomize appends to a generated ConfigMap's or Secret's name: a function of its
/// kind and `data` and `binaryData` (ConfigMap) or `type`, `data` and `stringData` (Secret).
/// Labels, annotations, `immutable`, the namespace and **the name** do not count: kustomize
/// v5.5 looks the name up as one field called `metadata/name` (kyaml's `Lookup` takes path
/// elements, not a slash-separated path), finds nothing and hashes `""`.
pub fn content_hash(object: &Value) -> Result<String, String> {
    let encoded = encode(object)?;
    let digest = hex::encode(Sha256::digest(encoded.as_bytes()));
    Ok(digest[..10]
        .chars()
        .map(|c| match c {
            // kubectl's rule: no suffix that a YAML reader could take for a number
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            other => other,
        })
        .collect())
}

/// The text kustomize hashes: a JSON object with sorted keys, written as Go writes it.
pub(crate) fn encode(object: &Value) -> Result<String, String> {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    // exactly kustomize's lookup: a top-level field named `metadata/name` (normally absent)
    let name = field_value(object.get("metadata/name"));
    // (key, value) pairs in Go's sorted key order
    let mut fields: Vec<(&str, Value)> = match kind {
        "ConfigMap" => {
            let mut fields = vec![("data", field_value(object.get("data"))), ("kind", Value::from("ConfigMap"))];
            fields.push(("name", name));
            // binaryData counts only when it is a map or a list (a list as `null`: Go's typed nil
            // map); kustomize leaves an absent or scalar one out
            if is_collection(object.get("binaryData")) {
                fields.push(("binaryData", field_value(object.get("binaryData"))));
            }
            fields
        }
        "Secret" => {
            let mut fields = vec![
                ("data", field_value(object.get("data"))),
                ("kind", Value::from("Secret")),
                ("name", name),
                ("type", field_value(object.get("type"))),
            ];
            if is_collection(object.get("stringData")) {
                fields.push(("stringData", field_value(object.get("stringData"))));
            }
            fields
        }
        other => return Err(format!("kustomize hashes only ConfigMaps and Secrets, not `{other}`")),
    };
    fields.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("{");
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(&mut out, key);
        out.push(':');
        write_value(&mut out, value);
    }
    out.push('}');
    Ok(out)
}

fn is_collection(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::Object(_) | Value::Array(_)))
}

/// What kustomize's `getNodeValues` makes of one field: `""` when absent, a scalar's text, a map
/// as a map, and `null` for a list (Go's `json.Unmarshal` into a map fails and leaves nil).
fn field_value(value: Option<&Value>) -> Value {
    match value {
        None | Some(Value::Null) => Value::from(""),
        Some(Value::String(s)) => Value::from(s.as_str()),
        Some(Value::Bool(b)) => Value::from(b.to_string()),
        Some(Value::Number(n)) => Value::from(n.to_string()),
        Some(Value::Object(map)) => Value::Object(map.clone()),
        Some(Value::Array(_)) => Value::Null,
    }
}

/// Go's `json.Marshal` of a value that went through `json.Unmarshal` into `interface{}`.
fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_float(n.as_f64().unwrap_or_default())),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Go sorts map keys bytewise, as Rust orders strings
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, &map[key]);
            }
            out.push('}');
        }
    }
}

/// Go's formatting of a float64 in JSON: the shortest decimal, exponent form outside
/// [1e-6, 1e21) with a two-digit-trimmed exponent (`1e-7`, `1e+21`).
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        format!("{f}")
    } else {
        let text = format!("{f:e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => format!("{mantissa}e+{exponent}"),
            _ => text,
        }
    }
}

/// Go's `json.Marshal` of a string: HTML-safe (`<`, `>`, `&` escaped), U+2028 and U+2029
/// escaped, `\b` and `\f` in short form (Go 1.22 and later), other control characters as `\u00XX`.
pub(crate) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_config_map_encodes_kind_name_and_data_with_sorted_keys() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"a": "b"}},
            "data": {"b": "2", "a": "1"}});
        assert_eq!(encode(&cm).unwrap(), r#"{"data":{"a":"1","b":"2"},"kind":"ConfigMap","name":""}"#);
    }

    #[test]
    fn an_absent_data_field_is_an_empty_string_and_binary_data_counts_only_when_present() {
        let cm = json!({"kind": "ConfigMap", "metadata": {"name": "cm"}});
        assert_eq!(encode(&cm).unwrap(), r#"{"data":"","kind":"ConfigMap","name":""}"#);
        let cm = json!({"kind": "ConfigMap", "metadata": {"name": "cm"}, "binaryData": {"k": "//4="}});
        assert_eq!(encode(&cm).unwrap(), r#"{"binaryData":{"k":"//4="},"data":"","kind":"ConfigMap","name":""}"#);
    }

    #[test]
    fn a_secret_encodes_its_type_and_string_data_when_present() {
        let s = json!({"kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque", "data": {}});
        assert_eq!(encode(&s).unwrap(), r#"{"data":{},"kind":"Secret","name":"","type":"Opaque"}"#);
        let s = json!({"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "b"}});
        assert_eq!(encode(&s).unwrap(), r#"{"data":"","kind":"Secret","name":"","stringData":{"a":"b"},"type":""}"#);
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut out = String::new();
        write_string(&mut out, "<a&b>\u{2028}\u{2029}\u{8}\u{c}\u{1}\n\t\r\"\\é\u{7f}");
        assert_eq!(out, r#""\u003ca\u0026b\u003e\u2028\u2029\b\f\u0001\n\t\r\"\\é"#.to_owned() + "\u{7f}\"");
    }

    #[test]
    fn numbers_are_formatted_as_go_formats_float64() {
        assert_eq!(go_float(5.0), "5");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1e-7), "1e-7");
        assert_eq!(go_float(-0.0), "-0");
    }

    #[test]
    fn the_hash_is_ten_characters_without_the_digits_0_1_3_and_the_letters_a_e() {
        // kubectl kustomize names `configMapGenerator: [{name: empty}]` `empty-6ct58987ht`
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "empty"}});
        assert_eq!(content_hash(&cm).unwrap(), "6ct58987ht");
        let hash = content_hash(&json!({"kind": "Secret", "metadata": {"name": "x"}})).unwrap();
        assert_eq!(hash.len(), 10);
        assert!(!hash.contains(['0', '1', '3', 'a', 'e']), "{hash}");
    }

    #[test]
    fn the_name_does_not_count_as_kustomize_looks_it_up_under_the_wrong_path() {
        // kubectl kustomize names `secretGenerator: [{name: s, literals: [a=b]}]` `s-k695gkmbtk`
        // and the same data under any other name with the same suffix
        for name in ["s", "other", "p-s-x"] {
            let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "data": {"a": "Yg=="}});
            assert_eq!(content_hash(&s).unwrap(), "k695gkmbtk");
        }
    }

    #[test]
    fn other_kinds_have_no_content_hash() {
        assert!(content_hash(&json!({"kind": "Deployment", "metadata": {"name": "x"}})).is_err());
    }
}
