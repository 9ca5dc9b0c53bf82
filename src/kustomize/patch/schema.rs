//! The patch merge keys and strategies of the built-in kinds, as a strategic merge needs them.
//!
//! The table `merge_keys.json` beside this file is generated from a Kubernetes OpenAPI v2
//! document by [`merge_key_table`] and checked in; `tests/kustomize/merge_keys.rs` regenerates it
//! from the test control plane's kube-apiserver and fails when it differs. It keeps, for every
//! definition from which a list with an `x-kubernetes-patch-strategy` can be reached, the fields
//! leading there; every other field of a known kind is "known, nothing to merge by key" (opaque).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The table as checked in.
const TABLE: &str = include_str!("merge_keys.json");

/// The merge keys and strategies of the built-in kinds (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MergeKeys {
    /// Where the table came from (the API server's version).
    pub source: String,
    /// `apiVersion kind` (`apps/v1 Deployment`, `v1 Pod`) to the name of its definition.
    pub kinds: BTreeMap<String, String>,
    /// The `apiVersion kind` of every cluster-scoped kind.
    pub cluster_scoped: BTreeSet<String>,
    /// Definition name to the fields of it that lead to a merge by key.
    pub definitions: BTreeMap<String, Definition>,
}

/// The fields of one definition that matter to a strategic merge.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    /// Named properties.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, Field>,
    /// The value schema of a map (`additionalProperties`), when it matters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Field>,
}

/// The schema of one field's value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// The definition of the value (of its items, for a list), when that definition matters.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    /// Whether the value is a list.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub list: bool,
    /// `x-kubernetes-patch-strategy` (`merge`, `retainKeys`, `merge,retainKeys`, `replace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// The keys elements are matched by: `x-kubernetes-list-map-keys` when given, else
    /// `x-kubernetes-patch-merge-key`; empty for a list of scalars.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

impl MergeKeys {
    /// The checked-in table.
    pub fn builtin() -> &'static MergeKeys {
        static BUILTIN: OnceLock<MergeKeys> = OnceLock::new();
        BUILTIN.get_or_init(|| serde_json::from_str(TABLE).expect("the checked-in merge key table parses"))
    }

    /// The schema of the root of an object of `api_version` and `kind`; `None` for a kind the
    /// table does not know (a custom resource), which is merged without schema.
    pub fn root(&self, api_version: &str, kind: &str) -> Option<At<'_>> {
        let definition = self.kinds.get(&format!("{api_version} {kind}"))?;
        Some(At::Object(self.definitions.get(definition)))
    }

    /// Whether objects of `api_version` and `kind` are cluster-scoped (unknown kinds are not).
    pub fn is_cluster_scoped(&self, api_version: &str, kind: &str) -> bool {
        self.cluster_scoped.contains(&format!("{api_version} {kind}"))
    }

    fn at_field<'a>(&'a self, field: &'a Field) -> At<'a> {
        let definition = field.definition.as_ref().and_then(|d| self.definitions.get(d));
        if field.list {
            At::List { strategy: field.strategy.as_deref(), keys: &field.keys, items: definition }
        } else {
            At::Object(definition)
        }
    }
}

/// Where a merge is in the schema of a known kind.
#[derive(Clone, Copy, Debug)]
pub enum At<'a> {
    /// An object (or scalar) whose definition is known; `None` when nothing below it is merged
    /// by key.
    Object(Option<&'a Definition>),
    /// A list, with its strategy and keys.
    List {
        /// `x-kubernetes-patch-strategy`, if any.
        strategy: Option<&'a str>,
        /// The merge keys.
        keys: &'a [String],
        /// The definition of the elements, when it matters.
        items: Option<&'a Definition>,
    },
}

impl<'a> At<'a> {
    /// The schema of field `name` of this object.
    pub fn field(self, table: &'a MergeKeys, name: &str) -> At<'a> {
        match self {
            At::Object(Some(definition)) => match definition.fields.get(name).or(definition.values.as_ref()) {
                Some(field) => table.at_field(field),
                None => At::Object(None),
            },
            _ => At::Object(None),
        }
    }

    /// The schema of the elements of this list.
    pub fn elements(self) -> At<'a> {
        match self {
            At::List { items, .. } => At::Object(items),
            At::Object(_) => At::Object(None),
        }
    }

    /// The merge keys when this is a list merged by key (or, when empty, a list of scalars merged
    /// as a set); `None` when a patch replaces it.
    pub fn merge_keys(self) -> Option<&'a [String]> {
        match self {
            At::List { strategy: Some(strategy), keys, .. } if strategy.split(',').any(|s| s == "merge") => Some(keys),
            _ => None,
        }
    }
}

/// Generates the table from an OpenAPI v2 document (`GET /openapi/v2`), as [`MergeKeys`].
pub fn merge_key_table(openapi: &Value, source: &str) -> MergeKeys {
    let empty = Map::new();
    let definitions = openapi.get("definitions").and_then(Value::as_object).unwrap_or(&empty);
    let mut all: HashMap<&str, Definition> = HashMap::new();
    let mut kinds = BTreeMap::new();
    for (name, schema) in definitions {
        let mut definition = Definition::default();
        for (field, property) in schema.get("properties").and_then(Value::as_object).unwrap_or(&empty) {
            definition.fields.insert(field.clone(), field_schema(property));
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            definition.values = Some(field_schema(values));
        }
        all.insert(name, definition);
        for gvk in schema.get("x-kubernetes-group-version-kind").and_then(Value::as_array).into_iter().flatten() {
            kinds.insert(gvk_key(gvk), name.clone());
        }
    }
    // A definition matters when one of its fields has a strategy or leads to one that matters.
    let mut relevant: BTreeSet<&str> = BTreeSet::new();
    loop {
        let before = relevant.len();
        for (name, definition) in &all {
            let matters = definition
                .fields
                .values()
                .chain(&definition.values)
                .any(|f| f.strategy.is_some() || f.definition.as_deref().is_some_and(|d| relevant.contains(d)));
            if matters {
                relevant.insert(name);
            }
        }
        if relevant.len() == before {
            break;
        }
    }
    let prune = |field: &Field| -> Option<Field> {
        let definition = field.definition.clone().filter(|d| relevant.contains(d.as_str()));
        (field.strategy.is_some() || definition.is_some()).then(|| Field { definition, ..field.clone() })
    };
    let definitions = relevant
        .iter()
        .map(|name| {
            let full = &all[name];
            let fields = full.fields.iter().filter_map(|(k, f)| prune(f).map(|f| (k.clone(), f))).collect();
            (name.to_string(), Definition { fields, values: full.values.as_ref().and_then(prune) })
        })
        .collect();
    MergeKeys { source: source.to_owned(), kinds, cluster_scoped: cluster_scoped(openapi), definitions }
}

/// `apiVersion kind` of an `x-kubernetes-group-version-kind` entry.
fn gvk_key(gvk: &Value) -> String {
    let text = |k: &str| gvk.get(k).and_then(Value::as_str).unwrap_or_default();
    let (group, version, kind) = (text("group"), text("version"), text("kind"));
    if group.is_empty() { format!("{version} {kind}") } else { format!("{group}/{version} {kind}") }
}

/// The definition a schema refers to (`$ref`, or the single `allOf` entry newer documents use).
fn reference(schema: &Value) -> Option<String> {
    let reference = schema.get("$ref").or_else(|| {
        schema.get("allOf").and_then(Value::as_array).and_then(|a| a.first()).and_then(|s| s.get("$ref"))
    })?;
    reference.as_str()?.strip_prefix("#/definitions/").map(str::to_owned)
}

fn field_schema(property: &Value) -> Field {
    let list = property.get("type").and_then(Value::as_str) == Some("array");
    let definition = if list { property.get("items").and_then(reference) } else { reference(property) };
    let strategy = property.get("x-kubernetes-patch-strategy").and_then(Value::as_str).map(str::to_owned);
    let map_keys: Vec<String> = property
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let keys = if !map_keys.is_empty() {
        map_keys
    } else {
        property
            .get("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
            .map(|k| vec![k.to_owned()])
            .unwrap_or_default()
    };
    // Keys only matter where a strategy merges; a list-type map without a patch strategy is
    // replaced by a strategic merge (as kustomize does).
    let keys = if strategy.is_some() { keys } else { Vec::new() };
    Field { definition, list, strategy, keys }
}

/// Kinds that have a path but none under `/namespaces/{namespace}/`.
fn cluster_scoped(openapi: &Value) -> BTreeSet<String> {
    let mut namespaced = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (path, item) in openapi.get("paths").and_then(Value::as_object).into_iter().flatten() {
        for operation in item.as_object().into_iter().flat_map(|o| o.values()) {
            if let Some(gvk) = operation.get("x-kubernetes-group-version-kind") {
                let key = gvk_key(gvk);
                if path.contains("{namespace}") {
                    namespaced.insert(key.clone());
                }
                seen.insert(key);
            }
        }
    }
    seen.difference(&namespaced).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_table_knows_containers_by_name() {
        let table = MergeKeys::builtin();
        let pod_spec = table.root("apps/v1", "Deployment").unwrap().field(table, "spec").field(table, "template");
        let containers = pod_spec.field(table, "spec").field(table, "containers");
        assert_eq!(containers.merge_keys(), Some(&["name".to_owned()][..]));
        let args = containers.elements().field(table, "args");
        assert_eq!(args.merge_keys(), None);
        assert!(table.root("example.com/v1", "Widget").is_none());
        assert!(table.is_cluster_scoped("v1", "Namespace"));
        assert!(!table.is_cluster_scoped("v1", "ConfigMap"));
    }
}
