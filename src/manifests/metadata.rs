//! Checks of a tenant document's `metadata`: what Git may set, and what only the API server
//! sets; names, labels and annotations as the API server will judge them.

use serde_json::{Map, Value};

use crate::api::names;
use crate::problem::{Problem, join_path};
use crate::schema_check::{describe, unknown_field_message};

/// Fields a document in Git may set.
const ALLOWED: &[&str] = &["name", "namespace", "labels", "annotations", "finalizers"];
/// Fields only the API server sets; copied from a live object by mistake.
const SERVER_SET: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "ownerReferences",
];
/// The API server's limit on the sum of a object's annotations.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Every problem of `metadata` for an object of `kind` (when known) going to `namespace`.
pub fn check(metadata: &Map<String, Value>, group: Option<&str>, kind: Option<&str>, namespace: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut push = |field: &str, message: String| problems.push(Problem::field(join_path("metadata", field), message));

    for key in metadata.keys() {
        if SERVER_SET.contains(&key.as_str()) {
            push(key, "is set by the API server; remove it from the file".into());
        } else if !ALLOWED.contains(&key.as_str()) && key != "generateName" {
            push(key, unknown_field_message(key, ALLOWED));
        }
    }

    match metadata.get("name") {
        Some(Value::String(name)) if !name.is_empty() => {
            if let Err(e) = name_rule(group, kind)(name) {
                push("name", e);
            }
        }
        Some(Value::String(_)) | None | Some(Value::Null) if metadata.contains_key("generateName") => {
            push("generateName", "generated names cannot be tracked from Git; set metadata.name instead".into())
        }
        Some(Value::String(_)) | None | Some(Value::Null) => {
            push("name", "is required; expected the object's name".into())
        }
        Some(other) => push("name", format!("expected a string, got {}", describe(other))),
    }

    match metadata.get("namespace") {
        None | Some(Value::Null) => {}
        Some(Value::String(ns)) if ns == namespace => {}
        Some(other) => push(
            "namespace",
            format!(
                "{} is not this tenant's namespace; every object goes to `{namespace}`: remove metadata.namespace or set it to `{namespace}`",
                describe(other)
            ),
        ),
    }

    for (field, is_label) in [("labels", true), ("annotations", false)] {
        let Some(value) = metadata.get(field) else { continue };
        let Some(map) = value.as_object() else {
            push(field, format!("expected a mapping of strings, got {}", describe(value)));
            continue;
        };
        let mut bytes = 0;
        for (key, value) in map {
            let entry = format!("{field}.{key}");
            let Some(text) = value.as_str() else {
                push(&entry, format!("expected a string, got {} (quote it)", describe(value)));
                continue;
            };
            bytes += key.len() + text.len();
            let verdict = names::label_key(key).and_then(|()| if is_label { names::label_value(text) } else { Ok(()) });
            if let Err(e) = verdict {
                push(&entry, e);
            }
        }
        if bytes > MAX_ANNOTATIONS_BYTES && !is_label {
            push(field, format!("hold {bytes} bytes; the API server accepts at most {MAX_ANNOTATIONS_BYTES}"));
        }
    }

    if let Some(finalizers) = metadata.get("finalizers")
        && !finalizers.as_array().is_some_and(|list| list.iter().all(Value::is_string))
    {
        push("finalizers", format!("expected a list of strings, got {}", describe(finalizers)));
    }
    problems
}

/// The API server's naming rule for `kind` of `group`.
fn name_rule(group: Option<&str>, kind: Option<&str>) -> fn(&str) -> Result<(), String> {
    match (group, kind) {
        (Some(""), Some("Service")) => dns1035_label,
        (Some("rbac.authorization.k8s.io"), Some("Role" | "RoleBinding")) => path_segment,
        (Some("batch"), Some("CronJob")) => cron_job_name,
        // The renderer holds CDTarget names to a stricter rule of its own; a kind of that name in
        // any other group is an ordinary object and is never rendered.
        (Some(crate::api::GROUP | "cnad.gofound.nl"), Some("CDTarget")) => |_| Ok(()),
        _ => names::dns1123_subdomain,
    }
}

/// Services: a DNS-1035 label (starts with a letter).
fn dns1035_label(name: &str) -> Result<(), String> {
    names::dns1123_label(name)?;
    if name.as_bytes()[0].is_ascii_lowercase() {
        Ok(())
    } else {
        Err(format!("`{name}` must start with a letter (Service names are DNS-1035 labels)"))
    }
}

/// CronJobs: a DNS-1123 subdomain short enough for the Jobs it names (the API server's rule).
fn cron_job_name(name: &str) -> Result<(), String> {
    const MAX_CRON_JOB: usize = 52;
    names::dns1123_subdomain(name)?;
    if name.len() > MAX_CRON_JOB {
        Err(format!("is {} characters long; CronJob names have at most {MAX_CRON_JOB}", name.len()))
    } else {
        Ok(())
    }
}

/// RBAC names: the API server accepts any path segment (not `.` or `..`, no '/' or '%'). The
/// name is sent unescaped as the last segment of the request's URL, so cdtarget also refuses
/// what is not a URL path character (`?`, `#`, spaces, controls, non-ASCII): such a name would
/// change the request instead of naming the object.
fn path_segment(name: &str) -> Result<(), String> {
    let url_safe = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b);
    if name == "." || name == ".." || !name.bytes().all(url_safe) {
        Err(format!(
            "`{}` cannot be used as a name; it may not be `.` or `..`, and may hold letters, digits and `-._~!$&'()*+,;=:@` only",
            names::shown(name)
        ))
    } else if name.len() > names::MAX_SUBDOMAIN {
        Err(format!("is {} characters long; at most {} are allowed", name.len(), names::MAX_SUBDOMAIN))
    } else {
        Ok(())
    }
}
