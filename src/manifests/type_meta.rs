//! `apiVersion` and `kind` of a tenant document, held to Kubernetes' syntax before anything
//! else uses them: they become segments of the URL every apply, read and deletion is sent to
//! (`/apis/GROUP/VERSION/namespaces/NS/PLURAL/NAME`), so `kind: ../../secrets` or
//! `apiVersion: v1/../..` must never get that far.

use serde_json::Value;

use crate::api::names;
use crate::problem::Problem;

/// A checked `apiVersion`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiVersion {
    /// The API group; empty for the core group (`apiVersion: v1`).
    pub group: String,
    /// The version.
    pub version: String,
}

const API_VERSION_FORMS: &str = "expected `VERSION` for the core group (`v1`) or `GROUP/VERSION` (`apps/v1`)";

/// Checks `apiVersion`: a version (core group), or a group and a version separated by one `/`.
pub fn api_version(value: Option<&Value>) -> Result<ApiVersion, Problem> {
    let problem = |message: String| Problem::field("apiVersion", message);
    let text = match value {
        None | Some(Value::Null) => {
            return Err(problem("is required; expected e.g. `v1` or `cdtarget.io/v1alpha1`".into()));
        }
        Some(Value::String(text)) if text.is_empty() => {
            return Err(problem("is required; expected e.g. `v1` or `cdtarget.io/v1alpha1`".into()));
        }
        Some(Value::String(text)) => text,
        Some(_) => return Err(problem(format!("expected a string; {API_VERSION_FORMS}"))),
    };
    let (group, version) = match text.split('/').collect::<Vec<_>>().as_slice() {
        [version] => ("", *version),
        [group, version] => (*group, *version),
        _ => {
            return Err(problem(format!(
                "`{}` is not an API version: it holds more than one '/'; {API_VERSION_FORMS}",
                names::shown(text)
            )));
        }
    };
    if text.contains('/') {
        names::api_group(group).map_err(|e| problem(format!("group {e}")))?;
    }
    names::api_version(version).map_err(|e| problem(format!("version {e}")))?;
    Ok(ApiVersion { group: group.to_owned(), version: version.to_owned() })
}

/// Checks `kind`: a CamelCase identifier.
pub fn kind(value: Option<&Value>) -> Result<String, Problem> {
    let problem = |message: String| Problem::field("kind", message);
    match value {
        None | Some(Value::Null) => Err(problem("is required; expected e.g. `ConfigMap` or `CDTarget`".into())),
        Some(Value::String(text)) if text.is_empty() => {
            Err(problem("is required; expected e.g. `ConfigMap` or `CDTarget`".into()))
        }
        Some(Value::String(text)) => names::kind(text).map(|()| text.clone()).map_err(problem),
        Some(_) => Err(problem("expected a string such as `ConfigMap`".into())),
    }
}

/// `group/version`, or `version` for the core group.
pub fn join(group: &str, version: &str) -> String {
    if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parsed(text: &str) -> Result<(String, String), String> {
        api_version(Some(&json!(text))).map(|v| (v.group, v.version)).map_err(|p| p.message)
    }

    #[test]
    fn core_and_grouped_api_versions_are_split() {
        assert_eq!(parsed("v1"), Ok((String::new(), "v1".into())));
        assert_eq!(parsed("apps/v1"), Ok(("apps".into(), "v1".into())));
        assert_eq!(parsed("cilium.io/v2alpha1"), Ok(("cilium.io".into(), "v2alpha1".into())));
    }

    #[test]
    fn path_like_api_versions_are_refused_saying_what_is_accepted() {
        for text in ["v1/../..", "../v1", "apps/../v1", "/v1", "apps/", "a/b/c", "..", "v1?x=1", "apps/v1#", "Apps/v1"]
        {
            let message = parsed(text).expect_err(text);
            assert!(message.contains("expected"), "{text}: {message}");
        }
        assert!(parsed("v1/../..").unwrap_err().contains("more than one '/'"));
    }

    #[test]
    fn kinds_that_are_not_identifiers_are_refused() {
        for text in ["../../secrets", "secrets", "Config Map", "ConfigMap/x", "ConfigMap%2F"] {
            let message = kind(Some(&json!(text))).expect_err(text).message;
            assert!(message.contains("such as `ConfigMap`"), "{text}: {message}");
        }
        assert_eq!(kind(Some(&json!("ConfigMap"))).unwrap(), "ConfigMap");
        assert!(kind(Some(&json!(7))).unwrap_err().message.contains("expected a string"));
    }
}
