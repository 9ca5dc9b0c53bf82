//! kustomize's field specs: which field of which kinds a transformer writes, and how it walks
//! there (kustomize v5.5 `api/filters/fieldspec`, with the default specs of
//! `api/internal/konfig/builtinpluginconsts`).
//!
//! A path is a list of field names separated by `/`. Lists met on the way are walked element by
//! element without being named (`spec/ingress/from/podSelector/matchLabels` reaches every
//! `from` of every `ingress` rule); a name ending in `[]` says the field is a list, which is
//! never created. With `create`, missing maps on the way and the last field are added; a `null`
//! on the way counts as missing. Without it, a missing or `null` field ends the walk quietly.

use serde_json::{Map, Value};

use crate::problem::{Problem, join_path};

/// One field spec: the field at `path` in objects of the given group, version and kind (empty
/// means any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FieldSpec {
    /// API group (`apps`); empty for any, and the core group has none to select it by.
    pub group: &'static str,
    /// API version (`v1`); empty for any.
    pub version: &'static str,
    /// Kind; empty for any.
    pub kind: &'static str,
    /// The path, `/`-separated.
    pub path: &'static str,
    /// Whether missing fields on the way, and the last one, are created.
    pub create: bool,
}

/// What a walk creates for the last field of the path when it is missing (kustomize's
/// `CreateKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Create {
    /// Nothing: the field must be there (images).
    Nothing,
    /// An empty map (labels, annotations).
    Map,
    /// A scalar the setter then writes (replicas).
    Scalar,
}

impl FieldSpec {
    /// Whether the spec applies to `object` by its `apiVersion` and `kind`.
    pub fn selects(&self, object: &Value) -> bool {
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
        let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        (self.kind.is_empty() || self.kind == kind)
            && (self.group.is_empty() || self.group == group)
            && (self.version.is_empty() || self.version == version)
    }
}

/// Calls `set` on every field `spec` reaches in `object` (creating what `spec.create` and
/// `create` say), with the field's path in the object (`spec.template.metadata.labels`). An
/// object the spec does not select is left alone. A scalar where the path needs a map or a list
/// is an error at that field, as in kustomize.
pub fn walk(
    object: &mut Value,
    spec: &FieldSpec,
    create: Create,
    set: &mut dyn FnMut(&mut Value, &str) -> Result<(), Problem>,
) -> Result<(), Problem> {
    if !spec.selects(object) {
        return Ok(());
    }
    let segments: Vec<&str> = spec.path.split('/').collect();
    let mut at = String::new();
    step(object, &segments, spec.create, create, &mut at, set)
}

fn step(
    node: &mut Value,
    segments: &[&str],
    create_fields: bool,
    create: Create,
    at: &mut String,
    set: &mut dyn FnMut(&mut Value, &str) -> Result<(), Problem>,
) -> Result<(), Problem> {
    let Some((first, rest)) = segments.split_first() else {
        return set(node, at);
    };
    match node {
        Value::Null => Ok(()),
        Value::Array(items) => {
            let len = at.len();
            for (i, item) in items.iter_mut().enumerate() {
                at.push_str(&format!("[{i}]"));
                step(item, segments, create_fields, create, at, set)?;
                at.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            let (name, is_list) = match first.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (*first, false),
            };
            let field = if !create_fields || create == Create::Nothing || is_list {
                match map.get_mut(name) {
                    None => return Ok(()),
                    // kustomize turns a `null` it expects to be a list into an empty one.
                    Some(field @ Value::Null) if is_list => {
                        *field = Value::Array(Vec::new());
                        field
                    }
                    Some(field) => field,
                }
            } else {
                let empty =
                    if rest.is_empty() && create == Create::Scalar { Value::Null } else { Value::Object(Map::new()) };
                let field = map.entry(name).or_insert(Value::Null);
                if field.is_null() {
                    *field = empty;
                }
                field
            };
            let len = at.len();
            *at = join_path(at, name);
            let result = step(field, rest, create_fields, create, at, set);
            at.truncate(len);
            result
        }
        other => Err(Problem::field(
            at.as_str(),
            format!("expected a map or a list on the way to `{}`, found {}", segments.join("/"), shape(other)),
        )),
    }
}

/// Calls `visit` on every field `spec` reaches in `object` as it stands, creating and changing
/// nothing (a check, not a transformer).
pub fn find(object: &Value, spec: &FieldSpec, visit: &mut dyn FnMut(&Value, &str)) {
    if spec.selects(object) {
        let segments: Vec<&str> = spec.path.split('/').collect();
        find_step(object, &segments, &mut String::new(), visit);
    }
}

fn find_step(node: &Value, segments: &[&str], at: &mut String, visit: &mut dyn FnMut(&Value, &str)) {
    let Some((first, rest)) = segments.split_first() else {
        return visit(node, at);
    };
    let len = at.len();
    match node {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push_str(&format!("[{i}]"));
                find_step(item, segments, at, visit);
                at.truncate(len);
            }
        }
        Value::Object(map) => {
            let name = first.strip_suffix("[]").unwrap_or(first);
            if let Some(field) = map.get(name) {
                *at = join_path(at, name);
                find_step(field, rest, at, visit);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// The JSON type of a value, for messages (`a string`).
pub fn shape(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

const fn spec(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    path: &'static str,
    create: bool,
) -> FieldSpec {
    FieldSpec { group, version, kind, path, create }
}

/// `metadata/labels` of every object: where a `labels` entry without `includeSelectors` or
/// `includeTemplates` writes.
pub(crate) const METADATA_LABELS: &[FieldSpec] = &[spec("", "", "", "metadata/labels", true)];

/// kustomize's `templateLabels`: `metadata/labels` and the labels of pod and claim templates
/// (`includeTemplates`).
pub(crate) const TEMPLATE_LABELS: &[FieldSpec] = &[
    spec("", "", "", "metadata/labels", true),
    spec("", "v1", "ReplicationController", "spec/template/metadata/labels", true),
    spec("", "", "Deployment", "spec/template/metadata/labels", true),
    spec("", "", "ReplicaSet", "spec/template/metadata/labels", true),
    spec("", "", "DaemonSet", "spec/template/metadata/labels", true),
    spec("apps", "", "StatefulSet", "spec/template/metadata/labels", true),
    spec("apps", "", "StatefulSet", "spec/volumeClaimTemplates[]/metadata/labels", true),
    spec("batch", "", "Job", "spec/template/metadata/labels", true),
    spec("batch", "", "CronJob", "spec/jobTemplate/metadata/labels", true),
    spec("batch", "", "CronJob", "spec/jobTemplate/spec/template/metadata/labels", true),
];

const AFFINITY_SELECTORS: [&str; 5] = [
    "spec/template/spec/affinity/podAffinity/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm/labelSelector/matchLabels",
    "spec/template/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/labelSelector/matchLabels",
    "spec/template/spec/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm/labelSelector/matchLabels",
    "spec/template/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/labelSelector/matchLabels",
    "spec/template/spec/topologySpreadConstraints/labelSelector/matchLabels",
];

/// kustomize's `commonLabels` specs: the selectors, then [`TEMPLATE_LABELS`] (`commonLabels`,
/// and `labels` entries with `includeSelectors`).
pub(crate) const COMMON_LABELS: &[FieldSpec] = &[
    spec("", "v1", "Service", "spec/selector", true),
    spec("", "v1", "ReplicationController", "spec/selector", true),
    spec("", "", "Deployment", "spec/selector/matchLabels", true),
    spec("apps", "", "Deployment", AFFINITY_SELECTORS[0], false),
    spec("apps", "", "Deployment", AFFINITY_SELECTORS[1], false),
    spec("apps", "", "Deployment", AFFINITY_SELECTORS[2], false),
    spec("apps", "", "Deployment", AFFINITY_SELECTORS[3], false),
    spec("apps", "", "Deployment", AFFINITY_SELECTORS[4], false),
    spec("", "", "ReplicaSet", "spec/selector/matchLabels", true),
    spec("", "", "DaemonSet", "spec/selector/matchLabels", true),
    spec("apps", "", "StatefulSet", "spec/selector/matchLabels", true),
    spec("apps", "", "StatefulSet", AFFINITY_SELECTORS[0], false),
    spec("apps", "", "StatefulSet", AFFINITY_SELECTORS[1], false),
    spec("apps", "", "StatefulSet", AFFINITY_SELECTORS[2], false),
    spec("apps", "", "StatefulSet", AFFINITY_SELECTORS[3], false),
    spec("apps", "", "StatefulSet", AFFINITY_SELECTORS[4], false),
    spec("batch", "", "Job", "spec/selector/matchLabels", false),
    spec("batch", "", "CronJob", "spec/jobTemplate/spec/selector/matchLabels", false),
    spec("policy", "", "PodDisruptionBudget", "spec/selector/matchLabels", false),
    spec("networking.k8s.io", "", "NetworkPolicy", "spec/podSelector/matchLabels", false),
    spec("networking.k8s.io", "", "NetworkPolicy", "spec/ingress/from/podSelector/matchLabels", false),
    spec("networking.k8s.io", "", "NetworkPolicy", "spec/egress/to/podSelector/matchLabels", false),
    // TEMPLATE_LABELS, repeated because a const slice cannot be concatenated.
    spec("", "", "", "metadata/labels", true),
    spec("", "v1", "ReplicationController", "spec/template/metadata/labels", true),
    spec("", "", "Deployment", "spec/template/metadata/labels", true),
    spec("", "", "ReplicaSet", "spec/template/metadata/labels", true),
    spec("", "", "DaemonSet", "spec/template/metadata/labels", true),
    spec("apps", "", "StatefulSet", "spec/template/metadata/labels", true),
    spec("apps", "", "StatefulSet", "spec/volumeClaimTemplates[]/metadata/labels", true),
    spec("batch", "", "Job", "spec/template/metadata/labels", true),
    spec("batch", "", "CronJob", "spec/jobTemplate/metadata/labels", true),
    spec("batch", "", "CronJob", "spec/jobTemplate/spec/template/metadata/labels", true),
];

/// kustomize's `commonAnnotations` specs: every object's and its pod templates'.
pub(crate) const COMMON_ANNOTATIONS: &[FieldSpec] = &[
    spec("", "", "", "metadata/annotations", true),
    spec("", "v1", "ReplicationController", "spec/template/metadata/annotations", true),
    spec("", "", "Deployment", "spec/template/metadata/annotations", true),
    spec("", "", "ReplicaSet", "spec/template/metadata/annotations", true),
    spec("", "", "DaemonSet", "spec/template/metadata/annotations", true),
    spec("", "", "StatefulSet", "spec/template/metadata/annotations", true),
    spec("batch", "", "Job", "spec/template/metadata/annotations", true),
    spec("batch", "", "CronJob", "spec/jobTemplate/metadata/annotations", true),
    spec("batch", "", "CronJob", "spec/jobTemplate/spec/template/metadata/annotations", true),
];

/// kustomize's `images` specs (walked after its any-depth walk of `containers` and
/// `initContainers`; `create` is moot, since an image is never created).
pub const IMAGES: &[FieldSpec] = &[
    spec("", "", "", "spec/containers[]/image", true),
    spec("", "", "", "spec/initContainers[]/image", true),
    spec("", "", "", "spec/template/spec/containers[]/image", true),
    spec("", "", "", "spec/template/spec/initContainers[]/image", true),
];

/// kustomize's `replicas` specs.
pub(crate) const REPLICAS: &[FieldSpec] = &[
    spec("", "", "Deployment", "spec/replicas", true),
    spec("", "", "ReplicationController", "spec/replicas", true),
    spec("", "", "ReplicaSet", "spec/replicas", true),
    spec("", "", "StatefulSet", "spec/replicas", true),
];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn set_x(object: &mut Value, spec: &FieldSpec) -> Result<Vec<String>, Problem> {
        let mut reached = Vec::new();
        walk(object, spec, Create::Map, &mut |node, at| {
            reached.push(at.to_owned());
            // A null leaf is only reached without `create`; the label setter leaves it alone.
            if let Some(map) = node.as_object_mut() {
                map.insert("x".into(), json!("1"));
            }
            Ok(())
        })?;
        Ok(reached)
    }

    #[test]
    fn kind_group_and_version_select_objects() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        let service = json!({"apiVersion": "v1", "kind": "Service"});
        assert!(spec("apps", "v1", "Deployment", "a", true).selects(&deployment));
        assert!(spec("", "", "Deployment", "a", true).selects(&deployment));
        assert!(!spec("batch", "", "Deployment", "a", true).selects(&deployment));
        assert!(!spec("", "v2", "", "a", true).selects(&deployment));
        assert!(spec("", "v1", "Service", "a", true).selects(&service));
        assert!(!spec("apps", "", "", "a", true).selects(&service), "the core group is empty");
    }

    #[test]
    fn create_adds_missing_maps_and_replaces_nulls() {
        let mut object = json!({"kind": "Deployment", "spec": {"template": null}});
        let reached = set_x(&mut object, &spec("", "", "", "spec/template/metadata/labels", true)).unwrap();
        assert_eq!(reached, ["spec.template.metadata.labels"]);
        assert_eq!(object["spec"]["template"], json!({"metadata": {"labels": {"x": "1"}}}));
    }

    #[test]
    fn without_create_missing_and_null_fields_end_the_walk() {
        let mut object = json!({"spec": {"selector": {"matchLabels": null}}, "other": null});
        let before = object.clone();
        let reached = set_x(&mut object, &spec("", "", "", "spec/selector/matchLabels", false)).unwrap();
        assert_eq!(reached, ["spec.selector.matchLabels"], "a null leaf is handed to the setter as it is");
        assert!(set_x(&mut object, &spec("", "", "", "spec/podSelector/matchLabels", false)).unwrap().is_empty());
        assert!(set_x(&mut object, &spec("", "", "", "other/x/y", false)).unwrap().is_empty());
        assert_eq!(object, before);
    }

    #[test]
    fn lists_on_the_way_are_walked_element_by_element() {
        let mut object = json!({"spec": {"ingress": [
            {"from": [{"podSelector": {"matchLabels": {}}}, {"ipBlock": {}}]},
            {},
        ]}});
        let reached =
            set_x(&mut object, &spec("", "", "", "spec/ingress/from/podSelector/matchLabels", false)).unwrap();
        assert_eq!(reached, ["spec.ingress[0].from[0].podSelector.matchLabels"]);
        assert_eq!(object["spec"]["ingress"][0]["from"][1], json!({"ipBlock": {}}));
    }

    #[test]
    fn a_named_list_is_never_created_and_its_null_becomes_empty() {
        let path = "spec/volumeClaimTemplates[]/metadata/labels";
        let mut missing = json!({"spec": {}});
        assert!(set_x(&mut missing, &spec("", "", "", path, true)).unwrap().is_empty());
        assert_eq!(missing, json!({"spec": {}}));
        let mut null = json!({"spec": {"volumeClaimTemplates": null}});
        set_x(&mut null, &spec("", "", "", path, true)).unwrap();
        assert_eq!(null, json!({"spec": {"volumeClaimTemplates": []}}));
        let mut two = json!({"spec": {"volumeClaimTemplates": [{}, {"metadata": {"name": "a"}}]}});
        set_x(&mut two, &spec("", "", "", path, true)).unwrap();
        assert_eq!(two["spec"]["volumeClaimTemplates"][1], json!({"metadata": {"name": "a", "labels": {"x": "1"}}}));
    }

    #[test]
    fn a_scalar_on_the_way_is_an_error_naming_the_field() {
        let mut object = json!({"spec": {"template": "oops"}});
        let problem = set_x(&mut object, &spec("", "", "", "spec/template/metadata/labels", true)).unwrap_err();
        assert_eq!(problem.field, "spec.template");
        assert!(problem.message.contains("found a string"), "{}", problem.message);
    }

    #[test]
    fn a_scalar_leaf_is_created_as_null_for_the_setter() {
        let mut object = json!({"kind": "Deployment"});
        walk(&mut object, &REPLICAS[0], Create::Scalar, &mut |node, _| {
            assert!(node.is_null());
            *node = json!(3);
            Ok(())
        })
        .unwrap();
        assert_eq!(object, json!({"kind": "Deployment", "spec": {"replicas": 3}}));
    }
}
