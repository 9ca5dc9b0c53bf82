//! The manifests loader: a directory tree of YAML turned into the checked apply set of one
//! tenant, every document keeping its file and position.
//!
//! [`read_and_load`] reads a synced directory and loads it: [`read_tree_for_build`] reads the
//! plain YAML files and finds the directories holding a kustomization, [`SnapshotFiles`] is what
//! the kustomize build reads through (beneath the repository root, bounded), and [`load_with`]
//! is a pure function over what they give. [`load`] does the same over files already in memory.

mod files;
mod metadata;
mod read;
pub mod reserved_labels;
pub(crate) mod scope;
pub(crate) mod type_meta;

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::Value;

use crate::api::{API_VERSION, CDTarget, LEGACY_API_VERSION, names};
use crate::budget::{self, Budget};
use crate::kustomize::build::{Build, KUSTOMIZATION_FILE_NAMES, KustomizationFile};
use crate::kustomize::files::{Files, GIT_PATH_REFUSED, MemoryFiles, passes_through_git};
use crate::kustomize::resource::Origin;
use crate::policy::Policy;
use crate::policy::tenancy::KindPattern;
use crate::problem::{Bounded, Problem};
use crate::render::check_document;
use crate::yaml;

pub use files::SnapshotFiles;
pub use read::{Tree, read_tree, read_tree_for_build};

/// Bounds on what a tenant repository may hold, and on what loading one revision of it may
/// produce and cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest YAML file, in bytes.
    pub max_file_bytes: u64,
    /// Largest sum of all YAML files, in bytes.
    pub max_total_bytes: u64,
    /// The budget of one revision's load (objects' bytes, count and depth, work, problems, time).
    pub budget: budget::Limits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_file_bytes: 4 << 20, max_total_bytes: 64 << 20, budget: budget::Limits::default() }
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
    /// For an object a kustomize generator made, the generator entry (`configMapGenerator[0]`)
    /// of the kustomization `file`; `index` and `line` are then 0.
    pub generator: Option<String>,
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

    /// Where the document is, for messages: `file:index` (`file` and the generator entry for a
    /// generated object).
    pub fn location(&self) -> String {
        match &self.generator {
            Some(field) => format!("{} {field}", self.file),
            None => format!("{}:{}", self.file, self.index),
        }
    }

    /// Places `problem` at this document (a generated object's problem at its generator entry:
    /// `kustomization.yaml: configMapGenerator[0].metadata.name: ...`).
    pub fn locate(&self, problem: Problem) -> Problem {
        match &self.generator {
            Some(field) => problem.under(field).located(&self.file, None, None),
            None => problem.located(&self.file, Some(self.index), Some(self.line)),
        }
    }
}

/// A tenant's checked documents, in apply order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApplySet {
    /// The documents, in the order they are applied.
    pub documents: Vec<Document>,
}

impl ApplySet {
    /// The objects of the set as they are sent: every document with its namespace set to
    /// `namespace` (a CDTarget without its status), in apply order.
    pub fn objects(&self, namespace: &str) -> Vec<Value> {
        self.documents
            .iter()
            .map(|document| {
                let mut value = match &document.content {
                    Content::CDTarget(target) => {
                        let mut value = serde_json::to_value(target.as_ref()).unwrap_or_default();
                        if let Some(object) = value.as_object_mut() {
                            object.remove("status");
                        }
                        value
                    }
                    Content::Object(value) => value.clone(),
                };
                if let Some(metadata) = value.pointer_mut("/metadata").and_then(Value::as_object_mut) {
                    metadata.insert("namespace".into(), Value::String(namespace.to_owned()));
                }
                value
            })
            .collect()
    }

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
pub(crate) const SOPS_NOT_DECRYPTED: &str = "this document is SOPS-encrypted (it has a top-level `sops` key) and cdtarget does not decrypt: \
     nothing of this revision is applied, so no ciphertext reaches the cluster; keep Secrets out of the repository \
     (ask the platform team to provide them in the namespace, or use Sealed Secrets or the External Secrets Operator) \
     and reference them by name";

/// Reads the directory `dir` of the repository checked out at `root` (`dir` relative to it,
/// `/`-separated and normalised, `""` for the root) and loads it for `namespace` under `policy`.
///
/// When `dir` holds a kustomization, its build is the apply set; otherwise every YAML file is a
/// document, except beneath a subdirectory holding a kustomization, which is built and its output
/// included (Flux's behaviour). Builds read through [`SnapshotFiles`] with `root` as the
/// boundary, so `dir` may use bases elsewhere in the repository, never outside it (nor in
/// `.git`). One byte budget (`limits.max_total_bytes`) covers the plain files and everything the
/// builds read.
pub fn read_and_load(
    root: &Path,
    dir: &str,
    limits: &Limits,
    namespace: &str,
    policy: &Policy,
) -> Result<ApplySet, Vec<Problem>> {
    read_and_load_abandonable(root, dir, limits, namespace, policy, Arc::default()).0
}

/// [`read_and_load`], stopped soon after another thread sets `abandon`; also says which limit of
/// the revision's budget stopped it, if one did (the same revision would be stopped again).
pub(crate) fn read_and_load_abandonable(
    root: &Path,
    dir: &str,
    limits: &Limits,
    namespace: &str,
    policy: &Policy,
    abandon: Arc<AtomicBool>,
) -> (Result<ApplySet, Vec<Problem>>, Option<budget::Overrun>) {
    let budget = Rc::new(Budget::new(limits.budget).abandoned_by(abandon));
    let loaded = {
        let _entered = budget.enter();
        read_and_load_entered(root, dir, limits, namespace, policy)
    };
    (loaded, budget.overrun())
}

fn read_and_load_entered(
    root: &Path,
    dir: &str,
    limits: &Limits,
    namespace: &str,
    policy: &Policy,
) -> Result<ApplySet, Vec<Problem>> {
    if passes_through_git(dir) {
        return Err(vec![Problem::field("", GIT_PATH_REFUSED).located(dir, None, None)]);
    }
    let synced = if dir.is_empty() { root.to_path_buf() } else { root.join(dir) };
    let tree = read_tree_for_build(&synced, limits)?;
    if tree.kustomizations.is_empty() {
        return load_with(tree, "", &MemoryFiles::new(), namespace, policy);
    }
    let used = tree.files.iter().map(|f| f.text.len() as u64).sum();
    let files = SnapshotFiles::open(root, *limits)
        .map_err(|e| vec![Problem::field("", e).located(&root.display().to_string(), None, None)])?
        .with_used(used);
    load_with(tree, dir, &files, namespace, policy)
}

/// Parses and checks every document of `files` for `namespace` under `policy`, reporting every
/// problem of every document at once. The result is all or nothing: one problem anywhere and no
/// apply set is returned. A directory among `files` holding a kustomization file is built from
/// `files` alone (so only YAML a build names is there to read), as [`read_and_load`] builds it.
pub fn load(files: Vec<SourceFile>, namespace: &str, policy: &Policy) -> Result<ApplySet, Vec<Problem>> {
    let mut kustomizations: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let (dir, name) = f.path.rsplit_once('/').unwrap_or(("", f.path.as_str()));
            KUSTOMIZATION_FILE_NAMES.contains(&name).then(|| dir.to_owned())
        })
        .collect();
    kustomizations.sort();
    kustomizations.dedup();
    // Outermost only, as the tree walk finds them.
    let outermost: Vec<String> =
        kustomizations.iter().filter(|d| !kustomizations.iter().any(|o| is_beneath(d, o))).cloned().collect();
    if outermost.is_empty() {
        return load_with(Tree { files, kustomizations: outermost }, "", &MemoryFiles::new(), namespace, policy);
    }
    let mut memory = MemoryFiles::new();
    let mut plain = Vec::new();
    for file in files {
        memory.insert(file.path.clone(), file.text.clone().into_bytes());
        if !outermost.iter().any(|d| d.is_empty() || file.path.starts_with(&format!("{d}/"))) {
            plain.push(file);
        }
    }
    load_with(Tree { files: plain, kustomizations: outermost }, "", &memory, namespace, policy)
}

/// Whether directory `dir` is strictly beneath directory `other` (`""` is the root).
fn is_beneath(dir: &str, other: &str) -> bool {
    dir != other && (other.is_empty() || dir.starts_with(&format!("{other}/")))
}

/// Loads `tree` (read at directory `dir` of the root of `files`): its plain files as documents,
/// each of its kustomization directories built through `files`, every object checked by the
/// same tenancy rules. Pure over `files`.
///
/// Everything is charged to the budget installed on this thread (a default one when none is):
/// the first limit crossed refuses the revision with that one problem, at the file or
/// kustomization entry where it was crossed, and at most the budget's number of problems is kept.
pub(crate) fn load_with(
    tree: Tree,
    dir: &str,
    files: &dyn Files,
    namespace: &str,
    policy: &Policy,
) -> Result<ApplySet, Vec<Problem>> {
    let budget = budget::current().unwrap_or_else(|| Rc::new(Budget::new(budget::Limits::default())));
    let _entered = budget.enter();
    let mut problems = Bounded::new(budget.limits().problems);
    if let Err(e) = names::dns1123_label(namespace) {
        problems.push(Problem::field("", format!("target namespace {e}")));
    }
    let mut documents = Vec::new();
    for file in tree.files {
        let parsed = match yaml::parse_documents(&file.text) {
            Ok(parsed) => parsed,
            Err(e) => {
                if let Some(overrun) = budget.overrun() {
                    return Err(vec![Problem::field("", overrun.to_string()).located(&file.path, None, None)]);
                }
                problems.push(
                    Problem::field("", format!("not valid YAML: {}", e.message)).located(&file.path, None, e.line),
                );
                continue;
            }
        };
        for doc in parsed {
            let located = |p: Problem| p.located(&file.path, Some(doc.index), Some(doc.line));
            if let Err(overrun) = budget.count_objects(1) {
                return Err(vec![located(Problem::field("", overrun.to_string()))]);
            }
            match check_object(doc.value, namespace, policy) {
                Ok(content) => documents.push(Document {
                    file: file.path.clone(),
                    index: doc.index,
                    line: doc.line,
                    content,
                    generator: None,
                }),
                Err(found) => problems.extend(found.into_iter().map(located)),
            }
        }
    }
    for kustomization in tree.kustomizations {
        let at = join_dir(dir, &kustomization);
        match crate::kustomize::build::build(files, &at) {
            Ok(build) => built_documents(build, dir, namespace, policy, &mut documents, &mut problems),
            Err(found) if budget.overrun().is_some() => return Err(overrun_problem(&budget, found, files, &at, dir)),
            Err(found) => {
                // A problem of the directory as a whole is shown at its kustomization file.
                let file = crate::kustomize::build::find_kustomization(files, &at)
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| join_dir(&at, KUSTOMIZATION_FILE_NAMES[0]));
                let whole = |f: &str| f.is_empty() || f == "." || f == at;
                problems.extend(found.into_iter().map(|p| match p.file.as_deref() {
                    None => relocate(p.located(&file, None, None), dir),
                    Some(f) if whole(f) => relocate(p.located(&file, None, None), dir),
                    Some(_) => relocate(p, dir),
                }));
            }
        }
    }
    problems.extend(duplicates(&documents));
    if !problems.is_empty() {
        return Err(problems.into_vec());
    }
    documents.sort_by(|a, b| {
        (scope::apply_rank(a.kind()), a.kind(), a.name()).cmp(&(scope::apply_rank(b.kind()), b.kind(), b.name()))
    });
    Ok(ApplySet { documents })
}

/// The objects of one build as documents, located where they came from (relative to `dir`, as
/// plain files are), checked by the tenancy rules. A kustomization `namespace` other than the
/// tenant's refuses the whole build (its objects are not checked one by one: each would only
/// repeat that its namespace is wrong).
fn built_documents(
    build: Build,
    dir: &str,
    namespace: &str,
    policy: &Policy,
    documents: &mut Vec<Document>,
    problems: &mut Bounded,
) {
    let refused: Vec<Problem> =
        build.kustomizations.iter().filter_map(|k| namespace_problem(k, namespace)).map(|p| relocate(p, dir)).collect();
    if !refused.is_empty() {
        problems.extend(refused);
        return;
    }
    for resource in build.resources {
        let (file, index, line, generator) = match resource.origin {
            Origin::Document { file, index, line } => (relative_to(dir, &file), index, line, None),
            Origin::Generator { file, field } => (relative_to(dir, &file), 0, 0, Some(field)),
        };
        let mut document = Document { file, index, line, content: Content::Object(Value::Null), generator };
        match check_object(resource.object, namespace, policy) {
            Ok(content) => {
                document.content = content;
                documents.push(document);
            }
            Err(found) => problems.extend(found.into_iter().map(|p| document.locate(p))),
        }
    }
}

/// The one problem of a build the budget stopped: the first of its problems that names the limit
/// crossed (located where it was crossed), else the limit at the kustomization file.
fn overrun_problem(budget: &Budget, found: Vec<Problem>, files: &dyn Files, at: &str, dir: &str) -> Vec<Problem> {
    let overrun = budget.overrun().map(|o| o.to_string()).unwrap_or_default();
    let first = found.into_iter().find(|p| p.message.contains(&overrun) && p.file.is_some());
    let problem = first.unwrap_or_else(|| {
        let file = crate::kustomize::build::find_kustomization(files, at)
            .ok()
            .flatten()
            .unwrap_or_else(|| join_dir(at, KUSTOMIZATION_FILE_NAMES[0]));
        Problem::field("", overrun).located(&file, None, None)
    });
    vec![relocate(problem, dir).cut()]
}

/// Why a kustomization's `namespace` is refused, if it is: anything but the tenant's.
fn namespace_problem(kustomization: &KustomizationFile, namespace: &str) -> Option<Problem> {
    let set = kustomization.namespace.as_deref().filter(|n| !n.is_empty())?;
    (set != namespace).then(|| {
        Problem::field(
            "namespace",
            format!(
                "`{set}` is not this tenant's namespace; every object goes to `{namespace}`: remove `namespace` (the objects land in `{namespace}` anyway) or set it to `{namespace}`"
            ),
        )
        .located(&kustomization.path, None, None)
    })
}

/// `kustomization` (relative to `dir`) relative to the root.
fn join_dir(dir: &str, kustomization: &str) -> String {
    match (dir.is_empty(), kustomization.is_empty()) {
        (true, _) => kustomization.to_owned(),
        (_, true) => dir.to_owned(),
        _ => format!("{dir}/{kustomization}"),
    }
}

/// A root-relative `path` relative to directory `dir` (also root-relative), with `..` for the
/// parts outside it: `../../base/deploy.yaml` for a base two levels up.
pub(crate) fn relative_to(dir: &str, path: &str) -> String {
    if dir.is_empty() {
        return path.to_owned();
    }
    let from: Vec<&str> = dir.split('/').collect();
    let to: Vec<&str> = path.split('/').collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = vec![".."; from.len() - common];
    parts.extend(&to[common..]);
    if parts.is_empty() { ".".to_owned() } else { parts.join("/") }
}

/// A build's problem, located relative to `dir` instead of the root.
fn relocate(mut problem: Problem, dir: &str) -> Problem {
    problem.file = problem.file.map(|f| relative_to(dir, &f));
    problem
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
        problems.push(Problem::field("kind", KUSTOMIZATION_NOT_A_RESOURCE));
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
            problems.push(doc.locate(Problem::field(
                "metadata.name",
                format!("{} `{}` is already defined at {first}; each object may be defined once", key.1, key.2),
            )));
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
                problems.push(doc.locate(Problem::field(
                    "metadata.name",
                    format!("CDTarget `{target_name}` renders a {kind} of the same name, which {other} also defines; rename one of them"),
                )));
            }
        }
    }
    problems
}

const KUSTOMIZATION_NOT_A_RESOURCE: &str = "a Kustomization (or Component) is built only from a file named kustomization.yaml, kustomization.yml or Kustomization in its directory, never applied as an object: rename the file, or list its directory under `resources` (`components`) of another kustomization";

/// Kinds rendered for every CDTarget, under the CDTarget's name.
const RENDERED_KINDS: [(&str, &str); 4] = [
    ("networking.k8s.io", "NetworkPolicy"),
    ("apps", "Deployment"),
    ("keda.sh", "ScaledObject"),
    ("keda.sh", "TriggerAuthentication"),
];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kustomize::resource::Resource;

    const TENANT: &str = "team-a";

    fn config_map(name: &str, namespace: Option<&str>) -> Value {
        let mut object =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
        if let Some(namespace) = namespace {
            object["metadata"]["namespace"] = json!(namespace);
        }
        object
    }

    fn from_file(object: Value, file: &str, index: usize, line: usize) -> Resource {
        Resource::from_document(object, Origin::Document { file: file.into(), index, line })
    }

    fn generated(object: Value, file: &str, field: &str) -> Resource {
        Resource::from_document(object, Origin::Generator { file: file.into(), field: field.into() })
    }

    fn kustomization(path: &str, namespace: Option<&str>) -> KustomizationFile {
        KustomizationFile { path: path.into(), namespace: namespace.map(str::to_owned) }
    }

    /// The documents of `build` (of the kustomization in `dir`, as the loader takes it), or every problem.
    fn built(build: Build, dir: &str) -> Result<Vec<Document>, Vec<Problem>> {
        let (mut documents, mut problems) = (Vec::new(), Bounded::new(100));
        built_documents(build, dir, TENANT, &Policy::default(), &mut documents, &mut problems);
        if problems.is_empty() { Ok(documents) } else { Err(problems.into_vec()) }
    }

    fn shown(problems: &[Problem]) -> Vec<String> {
        problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn built_objects_are_located_relative_to_the_synced_directory() {
        let build = Build {
            resources: vec![
                from_file(config_map("base-settings", None), "base/settings.yaml", 2, 7),
                generated(
                    config_map("env-6ct58987ht", None),
                    "clusters/prod/kustomization.yaml",
                    "configMapGenerator[0]",
                ),
            ],
            kustomizations: vec![
                kustomization("clusters/prod/kustomization.yaml", None),
                kustomization("base/kustomization.yaml", None),
            ],
        };
        let documents = built(build, "clusters/prod").unwrap();
        assert_eq!(documents[0].location(), "../../base/settings.yaml:2");
        assert_eq!((documents[0].line, documents[0].generator.as_deref()), (7, None));
        assert_eq!(documents[1].location(), "kustomization.yaml configMapGenerator[0]");
        for document in &documents {
            assert_eq!(document.content_namespace(), Some(TENANT), "{}", document.location());
        }
    }

    #[test]
    fn a_kustomization_namespace_other_than_the_tenants_refuses_the_build_at_that_field() {
        let build = Build {
            // What kustomize's namespace transformer would have made of every object.
            resources: vec![from_file(config_map("a", Some("kube-system")), "clusters/prod/a.yaml", 1, 1)],
            kustomizations: vec![
                kustomization("clusters/prod/kustomization.yaml", Some(TENANT)),
                kustomization("base/kustomization.yaml", Some("kube-system")),
            ],
        };
        let problems = built(build, "clusters/prod").unwrap_err();
        assert_eq!(problems.len(), 1, "one problem, not one per object: {problems:?}");
        let problem = &problems[0];
        assert_eq!(
            (problem.file.as_deref(), problem.field.as_str()),
            (Some("../../base/kustomization.yaml"), "namespace")
        );
        assert!(problem.message.contains("`kube-system` is not this tenant's namespace"), "{}", problem.message);
        assert!(problem.message.contains("set it to `team-a`"), "says what would be accepted: {}", problem.message);
    }

    #[test]
    fn a_kustomization_namespace_equal_to_the_tenants_or_empty_is_accepted() {
        let build = Build {
            resources: vec![from_file(config_map("a", Some(TENANT)), "a.yaml", 1, 1)],
            kustomizations: vec![
                kustomization("kustomization.yaml", Some(TENANT)),
                kustomization("base/kustomization.yaml", Some("")),
            ],
        };
        assert_eq!(built(build, "").unwrap().len(), 1);
    }

    #[test]
    fn no_built_object_escapes_the_tenant_namespace_whatever_set_it() {
        // A base's object with its own namespace, a generator's `namespace:`, a component's.
        let build = Build {
            resources: vec![
                from_file(config_map("own", Some("other-team")), "base/own.yaml", 1, 1),
                generated(config_map("gen", Some("other-team")), "app/kustomization.yaml", "configMapGenerator[1]"),
                from_file(config_map("component", Some("kube-system")), "components/x/cm.yaml", 3, 10),
            ],
            kustomizations: vec![kustomization("app/kustomization.yaml", None)],
        };
        let problems = shown(&built(build, "app").unwrap_err());
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(
            problems[0].starts_with("../base/own.yaml:1: metadata.namespace: a string (\"other-team\") is not"),
            "{}",
            problems[0]
        );
        assert!(
            problems[1]
                .starts_with("kustomization.yaml: configMapGenerator[1].metadata.namespace: a string (\"other-team\")"),
            "{}",
            problems[1]
        );
        assert!(
            problems[2].starts_with("../components/x/cm.yaml:3: metadata.namespace: a string (\"kube-system\")"),
            "{}",
            problems[2]
        );
    }

    #[test]
    fn a_role_binding_with_subjects_elsewhere_still_lands_in_the_tenant_namespace() {
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "ci"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
            "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": "other-team"}],
        });
        let build = Build {
            resources: vec![from_file(binding, "rb.yaml", 1, 1)],
            kustomizations: vec![kustomization("kustomization.yaml", None)],
        };
        let documents = built(build, "").unwrap();
        assert_eq!(documents[0].content_namespace(), Some(TENANT));
    }

    #[test]
    fn the_tenancy_rules_run_on_the_built_output() {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mine"}});
        let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "open"}, "spec": {}});
        let sops = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "sops": {"mac": "x"}});
        let build = Build {
            resources: vec![
                from_file(namespace, "ns.yaml", 1, 1),
                from_file(policy, "np.yaml", 1, 1),
                from_file(sops, "s.yaml", 1, 1),
            ],
            kustomizations: vec![kustomization("kustomization.yaml", None)],
        };
        let problems = built(build, "").unwrap_err();
        let fields: Vec<(&str, &str)> =
            problems.iter().map(|p| (p.file.as_deref().unwrap(), p.field.as_str())).collect();
        assert_eq!(fields, [("ns.yaml", "kind"), ("np.yaml", "kind"), ("s.yaml", "sops")]);
    }

    #[test]
    fn built_and_plain_objects_of_one_name_are_duplicates() {
        let mut memory = MemoryFiles::new();
        memory.insert("plain.yaml", "");
        let tree = Tree {
            files: vec![SourceFile {
                path: "plain.yaml".into(),
                text: serde_json::to_string(&config_map("a", None)).unwrap(),
            }],
            kustomizations: vec![],
        };
        let mut set = load_with(tree, "", &memory, TENANT, &Policy::default()).unwrap();
        let build = Build {
            resources: vec![generated(config_map("a", None), "app/kustomization.yaml", "configMapGenerator[0]")],
            kustomizations: vec![],
        };
        let (mut problems, documents) = (Bounded::new(100), &mut set.documents);
        built_documents(build, "", TENANT, &Policy::default(), documents, &mut problems);
        let problems = shown(&duplicates(documents));
        assert_eq!(
            problems,
            [
                "app/kustomization.yaml: configMapGenerator[0].metadata.name: ConfigMap `a` is already defined at plain.yaml:1; each object may be defined once"
            ]
        );
    }

    #[test]
    fn files_beneath_a_kustomization_directory_are_not_read_as_documents() {
        let files = vec![
            SourceFile { path: "app/kustomization.yaml".into(), text: "resources: [ok.yaml]\n".into() },
            SourceFile {
                path: "app/ok.yaml".into(),
                text: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n".into(),
            },
            SourceFile { path: "app/not-listed.yaml".into(), text: "{ not yaml".into() },
            SourceFile { path: "app/nested/kustomization.yaml".into(), text: "{ not yaml".into() },
            SourceFile { path: "plain.yaml".into(), text: "{ not yaml".into() },
        ];
        let problems = load(files, TENANT, &Policy::default()).unwrap_err();
        let files: Vec<&str> = problems.iter().filter_map(|p| p.file.as_deref()).collect();
        assert!(files.contains(&"plain.yaml"), "{problems:?}");
        assert!(!files.iter().any(|f| f.starts_with("app/not-listed") || f.starts_with("app/nested")), "{problems:?}");
    }

    #[test]
    fn a_problem_of_the_kustomization_directory_is_shown_at_its_kustomization_file() {
        // The builder's skeleton refuses the directory as a whole (the real builder does so for a
        // directory it cannot build at all): the problem names the file, never `""` or `.`.
        let files = vec![
            SourceFile { path: "app/Kustomization".into(), text: "resources: [missing.yaml]\n".into() },
            SourceFile { path: "kustomization.yml".into(), text: "resources: [app]\n".into() },
        ];
        let mut memory = MemoryFiles::new();
        for file in &files {
            memory.insert(file.path.clone(), file.text.clone().into_bytes());
        }
        let tree = Tree { files: Vec::new(), kustomizations: vec!["app".into()] };
        for problem in load_with(tree, "", &memory, TENANT, &Policy::default()).unwrap_err() {
            let file = problem.file.as_deref().unwrap();
            assert!(file == "app/Kustomization" || file == "kustomization.yml", "{problem}");
        }
    }

    #[test]
    fn a_kustomization_document_outside_a_kustomization_file_is_refused() {
        let files = vec![SourceFile {
            path: "overlay.yaml".into(),
            text: "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nmetadata: {name: x}\n".into(),
        }];
        let problems = load(files, TENANT, &Policy::default()).unwrap_err();
        assert_eq!(problems[0].field, "kind");
        assert!(problems[0].message.contains("named kustomization.yaml"), "{}", problems[0].message);
    }

    #[test]
    fn paths_are_shown_relative_to_the_synced_directory() {
        assert_eq!(relative_to("", "base/a.yaml"), "base/a.yaml");
        assert_eq!(relative_to("clusters/prod", "clusters/prod/a.yaml"), "a.yaml");
        assert_eq!(relative_to("clusters/prod", "base/a.yaml"), "../../base/a.yaml");
        assert_eq!(relative_to("clusters/prod", "clusters/base/a.yaml"), "../base/a.yaml");
        assert_eq!(relative_to("clusters/prod", "clusters/production/a.yaml"), "../production/a.yaml");
        assert_eq!(join_dir("clusters/prod", ""), "clusters/prod");
        assert_eq!(join_dir("", "app"), "app");
        assert!(is_beneath("app/nested", "app") && is_beneath("app", "") && !is_beneath("application", "app"));
    }

    impl Document {
        fn content_namespace(&self) -> Option<&str> {
            match &self.content {
                Content::CDTarget(t) => t.metadata.namespace.as_deref(),
                Content::Object(v) => v.pointer("/metadata/namespace").and_then(Value::as_str),
            }
        }
    }
}
