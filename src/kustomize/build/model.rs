//! The kustomization file: every top-level field of kustomize v5's `Kustomization` recognised by
//! name, the subset cdtarget builds accepted, the rest refused with what to do instead.

use serde_json::{Map, Value};

use super::order::{self, SortOrder};
use crate::problem::{Problem, Problems};

/// `apiVersion` of a `Kustomization`.
pub(crate) const KUSTOMIZATION_API_VERSION: &str = "kustomize.config.k8s.io/v1beta1";
/// `apiVersion` of a `Component`.
pub(crate) const COMPONENT_API_VERSION: &str = "kustomize.config.k8s.io/v1alpha1";

/// The fields cdtarget builds (docs/kustomize.md, "The build").
pub(crate) const ACCEPTED: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "resources",
    "bases",
    "components",
    "namespace",
    "namePrefix",
    "nameSuffix",
    "commonLabels",
    "labels",
    "commonAnnotations",
    "images",
    "replicas",
    "patches",
    "patchesStrategicMerge",
    "patchesJson6902",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "sortOptions",
];

/// kustomize's other fields, refused by name with what to do instead.
pub(crate) const REFUSED: &[(&str, &str)] = &[
    (
        "helmCharts",
        "Helm charts are not inflated (that would run Helm on the tenant's input); render the chart and commit its output",
    ),
    ("helmGlobals", "Helm charts are not inflated; render the chart and commit its output"),
    ("helmChartInflationGenerator", "Helm charts are not inflated; render the chart and commit its output"),
    ("generators", "generator plugins (exec or KRM functions) are not run; commit the objects they would generate"),
    ("transformers", "transformer plugins (exec or KRM functions) are not run; use the built-in fields or patches"),
    ("validators", "validator plugins are not run; cdtarget validates the built objects itself"),
    (
        "openapi",
        "a custom OpenAPI schema is not read; patches merge with the API server's schema for built-in kinds and as JSON merge otherwise",
    ),
    ("configurations", "custom transformer configurations are not read; only kustomize's default field specs apply"),
    ("crds", "CRD-based name references are not read; use patches or write the names out"),
    ("replacements", "replacements are not built; write the values out or use patches"),
    ("vars", "vars are not built (deprecated in kustomize); write the values out or use patches"),
    ("buildMetadata", "build metadata annotations are not added"),
    ("imageTags", "the deprecated alias is not read; write the entries under `images`"),
];

/// One kustomization (or component), as far as the tree walk reads it; the other slices read
/// their fields from [`Kustomization::raw`].
#[derive(Clone, Debug, PartialEq)]
pub struct Kustomization {
    /// Its file, relative to the root.
    pub file: String,
    /// `kind: Component`.
    pub component: bool,
    /// `resources` then `bases` (kustomize appends the deprecated alias), each with its field.
    pub resources: Vec<(String, String)>,
    /// `components`, each with its field.
    pub components: Vec<(String, String)>,
    /// `namespace`.
    pub namespace: Option<String>,
    /// `namePrefix` (empty when none).
    pub name_prefix: String,
    /// `nameSuffix` (empty when none).
    pub name_suffix: String,
    /// `sortOptions`, read where it counts (the top kustomization).
    pub sort: Option<SortOrder>,
    /// The whole document.
    pub raw: Value,
}

/// The longest `namePrefix` or `nameSuffix`: a name keeps at least one character of its own within
/// the 253 a name may have.
pub(crate) const MAX_AFFIX: usize = 252;

/// Parses the text of kustomization file `file`; problems are located in it.
pub fn parse(text: &str, file: &str) -> Result<Kustomization, Vec<Problem>> {
    let locate = |problems: Vec<Problem>| problems.into_iter().map(|p| p.located(file, None, None)).collect();
    let raw = match crate::yaml::parse_documents(text) {
        Err(e) => {
            let at = e.line.map(|l| format!(" (line {l})")).unwrap_or_default();
            return Err(vec![Problem::field("", format!("not YAML{at}: {}", e.message)).located(file, None, None)]);
        }
        Ok(documents) if documents.len() > 1 => {
            return Err(locate(vec![Problem::field("", "a kustomization file holds one YAML document")]));
        }
        Ok(mut documents) => documents.pop().map(|d| d.value).unwrap_or(Value::Null),
    };
    read(raw, file).map_err(locate)
}

fn read(raw: Value, file: &str) -> Result<Kustomization, Vec<Problem>> {
    let mut problems = Problems::default();
    let Some(map) = raw.as_object() else {
        problems.push("", "a kustomization is a map of fields (resources, patches, ...)");
        return Err(problems.into_vec());
    };
    for key in map.keys() {
        if ACCEPTED.contains(&key.as_str()) {
            continue;
        }
        if let Some((_, why)) = REFUSED.iter().find(|(name, _)| name == key) {
            problems.push(key.as_str(), format!("not supported: {why}"));
        } else if let Some(known) =
            ACCEPTED.iter().chain(REFUSED.iter().map(|(n, _)| n)).find(|n| n.eq_ignore_ascii_case(key))
        {
            // kustomize's JSON decoding matches field names case-insensitively; cdtarget does not
            problems.push(key.as_str(), format!("unknown field; did you mean `{known}`?"));
        } else {
            problems.push(key.as_str(), format!("unknown field; a kustomization has {}", ACCEPTED[3..].join(", ")));
        }
    }
    let text = |field: &str, problems: &mut Problems| -> Option<String> {
        match map.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                problems.push(field, format!("expected a string, found {}", shape(other)));
                None
            }
        }
    };
    let kind = text("kind", &mut problems).unwrap_or_default();
    let api_version = text("apiVersion", &mut problems).unwrap_or_default();
    let component = match kind.as_str() {
        "" | "Kustomization" => false,
        "Component" => true,
        other => {
            problems.push("kind", format!("`{other}`: expected Kustomization or Component"));
            false
        }
    };
    let required = if component { COMPONENT_API_VERSION } else { KUSTOMIZATION_API_VERSION };
    if !api_version.is_empty() && api_version != required {
        let kind = if component { "Component" } else { "Kustomization" };
        problems.push("apiVersion", format!("`{api_version}`: a {kind} has apiVersion {required}"));
    }
    if map.get("metadata").is_some_and(|m| !m.is_object() && !m.is_null()) {
        problems.push("metadata", "expected a map (its name and annotations are not used)");
    }
    let namespace = text("namespace", &mut problems).filter(|n| !n.is_empty());
    let name_prefix = text("namePrefix", &mut problems).unwrap_or_default();
    let name_suffix = text("nameSuffix", &mut problems).unwrap_or_default();
    // Checked when read: a long prefix over many objects would otherwise be copied into each name
    // (and each earlier name kept) before any name is checked.
    for (field, added) in [("namePrefix", &name_prefix), ("nameSuffix", &name_suffix)] {
        if added.len() > MAX_AFFIX {
            problems.push(
                field,
                format!(
                    "is {} characters long; a name has at most 253, so at most {MAX_AFFIX} may be added",
                    added.len()
                ),
            );
        }
    }
    let mut resources = paths(map, "resources", &mut problems);
    resources.extend(paths(map, "bases", &mut problems));
    let components = paths(map, "components", &mut problems);
    let sort = match map.get("sortOptions") {
        None | Some(Value::Null) => None,
        Some(options) => sort_options(options, &mut problems),
    };
    if map.keys().all(|k| k == "apiVersion" || k == "kind") {
        problems.push("", "the kustomization is empty; list `resources` or other fields");
    }
    let kustomization = Kustomization {
        file: file.to_owned(),
        component,
        resources,
        components,
        namespace,
        name_prefix,
        name_suffix,
        sort,
        raw: Value::Null,
    };
    problems.finish(Kustomization { raw, ..kustomization })
}

/// A list of path strings, each with its field (`resources[2]`).
fn paths(map: &Map<String, Value>, field: &str, problems: &mut Problems) -> Vec<(String, String)> {
    match map.get(field) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match item {
                Value::String(s) => Some((format!("{field}[{i}]"), s.clone())),
                other => {
                    problems
                        .push(format!("{field}[{i}]"), format!("expected a path (a string), found {}", shape(other)));
                    None
                }
            })
            .collect(),
        Some(other) => {
            problems.push(field, format!("expected a list of paths, found {}", shape(other)));
            Vec::new()
        }
    }
}

fn sort_options(options: &Value, problems: &mut Problems) -> Option<SortOrder> {
    let Some(map) = options.as_object() else {
        problems.push("sortOptions", "expected a map with `order` (legacy or fifo)");
        return None;
    };
    for key in map.keys().filter(|k| *k != "order" && *k != "legacySortOptions") {
        problems.push(format!("sortOptions.{key}"), "unknown field; expected order, legacySortOptions");
    }
    let legacy = map.get("legacySortOptions").filter(|v| !v.is_null());
    match map.get("order").and_then(Value::as_str) {
        Some("fifo") if legacy.is_some() => {
            problems.push("sortOptions.legacySortOptions", "only with `order: legacy`");
            None
        }
        Some("fifo") => Some(SortOrder::Fifo),
        Some("legacy") => match legacy {
            None => Some(SortOrder::Legacy { first: kinds(order::FIRST), last: kinds(order::LAST) }),
            Some(Value::Object(lists)) => {
                for key in lists.keys().filter(|k| *k != "orderFirst" && *k != "orderLast") {
                    problems.push(
                        format!("sortOptions.legacySortOptions.{key}"),
                        "unknown field; expected orderFirst, orderLast",
                    );
                }
                let list = |field: &str, problems: &mut Problems| -> Vec<String> {
                    let at = format!("sortOptions.legacySortOptions.{field}");
                    match lists.get(field) {
                        None | Some(Value::Null) => Vec::new(),
                        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
                            items.iter().filter_map(Value::as_str).map(str::to_owned).collect()
                        }
                        Some(_) => {
                            problems.push(at, "expected a list of kinds");
                            Vec::new()
                        }
                    }
                };
                Some(SortOrder::Legacy { first: list("orderFirst", problems), last: list("orderLast", problems) })
            }
            Some(_) => {
                problems.push("sortOptions.legacySortOptions", "expected a map with orderFirst and orderLast");
                None
            }
        },
        _ => {
            problems.push("sortOptions.order", "expected legacy or fifo");
            None
        }
    }
}

fn kinds(list: &[&str]) -> Vec<String> {
    list.iter().map(|k| (*k).to_owned()).collect()
}

/// `a map`, `a list`, ... for messages (never the value: it may be a Secret's).
pub fn shape(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}
