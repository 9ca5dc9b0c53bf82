//! The manifests loader: a directory tree of YAML turned into the checked apply set of one
//! tenant, every document keeping its file and position.
//!
//! [`read_tree`] is the only I/O; [`load`] is a pure function over the files it read.

mod metadata;
mod read;
pub mod reserved_labels;
pub mod scope;
pub mod type_meta;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::{API_VERSION, CDTarget, LEGACY_API_VERSION, names};
use crate::policy::Policy;
use crate::policy::tenancy::KindPattern;
use crate::problem::Problem;
use crate::render::check_document;
use crate::yaml;

pub use read::read_tree;

/// Bounds on what a tenant repository may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest YAML file, in bytes.
    pub max_file_bytes: u64,
    /// Largest sum of all YAML files, in bytes.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_file_bytes: 4 << 20, max_total_bytes: 64 << 20 }
    }
}

/// A YAML file read from the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Path relative to the root, `/`-separated.
    pub path: String,
    /// Its text.
    pub text: String,
}

/// One object of the apply set.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// File it came from, relative to the root.
    pub file: String,
    /// 1-based position among the file's non-empty documents.
    pub index: usize,
    /// 1-based line where it starts.
    pub line: usize,
    /// The object, namespace set; for CDTargets, the typed object instead.
    pub content: Content,
}

/// What a document holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Content {
    /// A checked CDTarget (any accepted apiVersion, now `cdtarget.io/v1alpha1`).
    CDTarget(Box<CDTarget>),
    /// Any other namespaced object, as written apart from its namespace.
    Object(Value),
}

impl Document {
    /// `kind` of the object.
    pub fn kind(&self) -> &str {
        match &self.content {
            Content::CDTarget(_) => "CDTarget",
            Content::Object(v) => v.get("kind").and_then(Value::as_str).unwrap_or_default(),
        }
    }

    /// `metadata.name` of the object.
    pub fn name(&self) -> &str {
        match &self.content {
            Content::CDTarget(t) => t.metadata.name.as_deref().unwrap_or_default(),
            Content::Object(v) => v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default(),
        }
    }

    /// `apiVersion` of the object as it is sent (a CDTarget is always sent as the current one).
    pub fn api_version(&self) -> &str {
        match &self.content {
            Content::CDTarget(_) => API_VERSION,
            Content::Object(v) => v.get("apiVersion").and_then(Value::as_str).unwrap_or_default(),
        }
    }

    fn group(&self) -> &str {
        match &self.content {
            Content::CDTarget(_) => crate::api::GROUP,
            Content::Object(v) => group_of(v.get("apiVersion").and_then(Value::as_str).unwrap_or_default()),
        }
    }

    /// Where the document is, for messages: `file:index`.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.index)
    }
}

/// A tenant's checked documents, in apply order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApplySet {
    /// The documents, in the order they are applied.
    pub documents: Vec<Document>,
}

impl ApplySet {
    /// The CDTargets of the set.
    pub fn cdtargets(&self) -> impl Iterator<Item = &CDTarget> {
        self.documents.iter().filter_map(|d| match &d.content {
            Content::CDTarget(t) => Some(t.as_ref()),
            Content::Object(_) => None,
        })
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Why a SOPS-encrypted document is refused, and what to do instead (docs/feedback.md).
pub const SOPS_NOT_DECRYPTED: &str = "this document is SOPS-encrypted (it has a top-level `sops` key) and cdtarget does not decrypt: \
     nothing of this revision is applied, so no ciphertext reaches the cluster; keep Secrets out of the repository \
     (ask the platform team to provide them in the namespace, or use Sealed Secrets or the External Secrets Operator) \
     and reference them by name";

/// Parses and checks every document of `files` for `namespace` under `policy`, reporting every
/// problem of every document at once. The result is all or nothing: one problem anywhere and no
/// apply set is returned.
pub fn load(files: Vec<SourceFile>, namespace: &str, policy: &Policy) -> Result<ApplySet, Vec<Problem>> {
    let mut problems = Vec::new();
    if let Err(e) = names::dns1123_label(namespace) {
        problems.push(Problem::field("", format!("target namespace {e}")));
    }
    let mut documents = Vec::new();
    for file in files {
        let base_name = file.path.rsplit('/').next().unwrap_or_default();
        if matches!(base_name, "kustomization.yaml" | "kustomization.yml") {
            problems.push(Problem::field("", KUSTOMIZE_NOT_BUILT).located(&file.path, None, None));
            continue;
        }
        let parsed = match yaml::parse_documents(&file.text) {
            Ok(parsed) => parsed,
            Err(e) => {
                problems.push(
                    Problem::field("", format!("not valid YAML: {}", e.message)).located(&file.path, None, e.line),
                );
                continue;
            }
        };
        for doc in parsed {
            let located = |p: Problem| p.located(&file.path, Some(doc.index), Some(doc.line));
            match check_object(doc.value, namespace, policy) {
                Ok(content) => {
                    documents.push(Document { file: file.path.clone(), index: doc.index, line: doc.line, content })
                }
                Err(found) => problems.extend(found.into_iter().map(located)),
            }
        }
    }
    problems.extend(duplicates(&documents));
    if !problems.is_empty() {
        return Err(problems);
    }
    documents.sort_by(|a, b| {
        (scope::apply_rank(a.kind()), a.kind(), a.name()).cmp(&(scope::apply_rank(b.kind()), b.kind(), b.name()))
    });
    Ok(ApplySet { documents })
}

/// Checks one document against the tenancy rules (and, for CDTargets, every CDTarget rule).
fn check_object(mut value: Value, namespace: &str, policy: &Policy) -> Result<Content, Vec<Problem>> {
    let Some(object) = value.as_object_mut() else {
        return Err(vec![Problem::field(
            "",
            "expected a Kubernetes object (a mapping with apiVersion, kind and metadata)",
        )]);
    };
    // A SOPS-encrypted document: its values are ciphertext, which must never reach the cluster.
    if object.get("sops").is_some_and(Value::is_object) {
        return Err(vec![Problem::field("sops", SOPS_NOT_DECRYPTED)]);
    }
    let mut problems = Vec::new();
    // apiVersion and kind become segments of the URL every request is sent to: nothing else
    // looks at them before they are Kubernetes names.
    let api_version = type_meta::api_version(object.get("apiVersion")).map_err(|p| problems.push(p)).ok();
    let kind = type_meta::kind(object.get("kind")).map_err(|p| problems.push(p)).ok();
    let metadata = object.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
    let Some(metadata) = metadata.as_object_mut() else {
        problems.push(Problem::field("metadata", "expected a mapping with at least `name`"));
        return Err(problems);
    };
    let group = api_version.as_ref().map(|v| v.group.as_str());
    problems.extend(metadata::check(metadata, group, kind.as_deref(), namespace));
    metadata.insert("namespace".into(), Value::String(namespace.to_owned()));
    problems.extend(reserved_labels::check(&value));

    let (Some(type_meta::ApiVersion { group, version }), Some(kind)) = (api_version, kind) else {
        return Err(problems);
    };
    if kind == "List" || kind.ends_with("List") && value.get("items").is_some() {
        problems.push(Problem::field("kind", "lists are not applied; write each object as its own document"));
    } else if scope::is_cluster_scoped(&group, &kind) {
        problems.push(Problem::field(
            "kind",
            format!("{kind} is cluster-scoped; tenants may only apply namespaced objects into their namespace"),
        ));
    } else if group == "kustomize.config.k8s.io" {
        problems.push(Problem::field("kind", KUSTOMIZE_NOT_BUILT));
    } else if let Some(pattern) = policy.tenancy.forbidden(&group, &kind) {
        problems.push(Problem::field("kind", forbidden_message(&group, &kind, pattern)));
    } else if kind == "CDTarget" && (group == crate::api::GROUP || group == "cnad.gofound.nl") {
        let api_version = type_meta::join(&group, &version);
        if api_version != API_VERSION && api_version != LEGACY_API_VERSION {
            problems.push(Problem::field(
                "apiVersion",
                format!(
                    "`{api_version}` is not served; expected `{API_VERSION}` (or the seed's `{LEGACY_API_VERSION}`)"
                ),
            ));
            return Err(problems);
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        return check_document(&value, namespace, policy).map(|t| Content::CDTarget(Box::new(t)));
    }
    if problems.is_empty() { Ok(Content::Object(value)) } else { Err(problems) }
}

fn forbidden_message(group: &str, kind: &str, pattern: &KindPattern) -> String {
    let network_kinds = crate::api::policy::TenancyDocument::default().forbidden_kinds;
    let why = if group == crate::api::GROUP && kind == "TenantRepository" {
        "registrations of Git repositories are the platform team's, in the platform namespace"
    } else if network_kinds.iter().any(|d| d.group == group && (d.kind == "*" || d.kind == kind)) {
        "network access is the cluster admins' decision (network policies of every kind add up, so one tenant policy could undo the guardrails); tenants declare egress through CDTargets instead"
    } else {
        "ask the platform team to apply it"
    };
    format!("{kind} objects are refused to tenants by the platform policy (tenancy.forbiddenKinds: `{pattern}`): {why}")
}

/// The same group/kind/name twice, among the tenant's documents or with a rendered child.
fn duplicates(documents: &[Document]) -> Vec<Problem> {
    let mut seen: BTreeMap<(String, String, String), String> = BTreeMap::new();
    let mut problems = Vec::new();
    for doc in documents {
        let key = (doc.group().to_owned(), doc.kind().to_owned(), doc.name().to_owned());
        if let Some(first) = seen.get(&key) {
            problems.push(
                Problem::field(
                    "metadata.name",
                    format!("{} `{}` is already defined at {first}; each object may be defined once", key.1, key.2),
                )
                .located(&doc.file, Some(doc.index), Some(doc.line)),
            );
        } else {
            seen.insert(key, doc.location());
        }
    }
    for doc in documents {
        let Content::CDTarget(target) = &doc.content else { continue };
        for (group, kind) in RENDERED_KINDS {
            let key = (group.to_owned(), kind.to_owned(), doc.name().to_owned());
            if let Some(other) = seen.get(&key) {
                let target_name = target.metadata.name.as_deref().unwrap_or_default();
                problems.push(
                    Problem::field(
                        "metadata.name",
                        format!("CDTarget `{target_name}` renders a {kind} of the same name, which {other} also defines; rename one of them"),
                    )
                    .located(&doc.file, Some(doc.index), Some(doc.line)),
                );
            }
        }
    }
    problems
}

const KUSTOMIZE_NOT_BUILT: &str = "kustomize files are not built; cdtarget applies plain manifests (remove the file or move it out of the synced path)";

/// Kinds rendered for every CDTarget, under the CDTarget's name.
const RENDERED_KINDS: [(&str, &str); 4] = [
    ("networking.k8s.io", "NetworkPolicy"),
    ("apps", "Deployment"),
    ("keda.sh", "ScaledObject"),
    ("keda.sh", "TriggerAuthentication"),
];
