//! The builder: a kustomization directory turned into the objects `kubectl kustomize` (kustomize
//! v5.5) prints, for the subset docs/kustomize.md documents.
//!
//! Per kustomization, in kustomize's order: its `resources` (files, and directories with their
//! own kustomization, built first), its generators (merged into what is there by `behavior`), its
//! `components` (each applied to everything accumulated so far), then its transformers:
//! `patchesStrategicMerge`, `patches`, `namespace`, `namePrefix`/`nameSuffix`, labels,
//! annotations, `patchesJson6902`, `replicas`, `images`. At the top only: hash suffixes, name
//! references, objects marked `config.kubernetes.io/local-config` dropped, and the print order.
//!
//! Everything is read through [`Files`]; paths are resolved lexically and may not leave the
//! repository, nothing remote is fetched, and the walk is bounded (depth, files, objects, bytes).

pub(crate) mod model;
pub(crate) mod order;
pub(crate) mod paths;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use serde_json::Value;

use self::model::{Kustomization, shape};
use self::paths::{is_within, parent, resolve};
use super::fields::annotations::Annotations;
use super::fields::images::Images;
use super::fields::labels::Labels;
use super::fields::replicas::Replicas;
use super::files::{Files, Kind};
use super::generator;
use super::names;
use super::patch::Patches;
use super::patch::schema::MergeKeys;
use super::resource::{Origin, Resource};
use crate::budget;
use crate::problem::Problem;

/// The file names kustomize recognises as a kustomization, in the order it looks for them.
pub const KUSTOMIZATION_FILE_NAMES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Most kustomizations nested in one another (an overlay of an overlay of ... a base).
pub const MAX_DEPTH: usize = 32;
/// Most kustomization and component files one build reads (a base reached twice counts twice).
pub(crate) const MAX_KUSTOMIZATIONS: usize = 2_000;
/// Most objects one kustomization may hold, with its bases.
pub(crate) const MAX_OBJECTS: usize = 100_000;
/// Largest kustomization file.
pub(crate) const MAX_KUSTOMIZATION_BYTES: usize = 1 << 20;
/// Most bytes of kustomizations, resources and patches one build reads.
pub(crate) const MAX_BYTES: usize = 256 << 20;

/// The annotation that keeps an object out of the output (kustomize's `IgnoreLocal`).
pub(crate) const LOCAL_CONFIG: &str = "config.kubernetes.io/local-config";

/// Annotations kustomize keeps for itself while building and strips from its output: a document
/// carrying one would steer the build (a hash, earlier names), so it is refused.
const BUILD_ANNOTATIONS: &[&str] = &[
    "config.kubernetes.io/path",
    "config.kubernetes.io/index",
    "config.kubernetes.io/id",
    "config.kubernetes.io/origin",
    "config.k8s.io/id",
    "alpha.config.kubernetes.io/transformations",
];
const BUILD_ANNOTATION_PREFIX: &str = "internal.config.kubernetes.io/";

/// One kustomization file the build read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KustomizationFile {
    /// Its path, relative to the root.
    pub path: String,
    /// The `namespace` it sets, if any (the loader refuses one other than the tenant's).
    pub namespace: Option<String>,
}

/// What a build made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Build {
    /// The objects, in the order `kubectl kustomize` prints them.
    pub resources: Vec<Resource>,
    /// Every kustomization (and component) file read, outermost first.
    pub kustomizations: Vec<KustomizationFile>,
}

/// The kustomization file of directory `dir`, if it has one.
pub(crate) fn find_kustomization(files: &dyn Files, dir: &str) -> Result<Option<String>, String> {
    for name in KUSTOMIZATION_FILE_NAMES {
        let path = if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") };
        if files.stat(&path)? == Some(super::files::Kind::File) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// The bounds of one build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Limits {
    depth: usize,
    kustomizations: usize,
    objects: usize,
    bytes: usize,
}

const LIMITS: Limits =
    Limits { depth: MAX_DEPTH, kustomizations: MAX_KUSTOMIZATIONS, objects: MAX_OBJECTS, bytes: MAX_BYTES };

/// Builds the kustomization in directory `dir` (relative to the root of `files`).
pub fn build(files: &dyn Files, dir: &str) -> Result<Build, Vec<Problem>> {
    build_within(files, dir, LIMITS)
}

fn build_within(files: &dyn Files, dir: &str, limits: Limits) -> Result<Build, Vec<Problem>> {
    let dir = match dir.trim() {
        "" | "." => String::new(),
        dir => resolve("", dir)
            .map_err(|refusal| vec![Problem::field("", refusal.message(dir)).located(dir, None, None)])?,
    };
    let walk = Walk { files, limits, kustomizations: RefCell::default(), bytes: Cell::new(0) };
    let top = walk.load(&dir, None, false)?;
    let mut resources = walk.target(&top, &mut vec![dir.clone()], Vec::new())?;
    let at_top = |problem: Problem| locate(problem, &top.file);
    let renamed = resources.iter().any(|r| !r.previous.is_empty() || r.needs_hash);
    if resources.iter().any(|r| r.needs_hash) {
        names::add_hash_suffixes(&mut resources).map_err(|p| vec![at_top(p)])?;
    }
    if renamed {
        names::fix_references(&mut resources).map_err(|found| found.into_iter().map(at_top).collect::<Vec<_>>())?;
        recharge_all(&mut resources).map_err(|p| vec![at_top(p)])?;
    }
    resources.retain(|r| {
        r.object.pointer("/metadata/annotations").and_then(|a| a.get(LOCAL_CONFIG)).is_none_or(|v| v == "false")
    });
    check_unique(&resources).map_err(|p| vec![at_top(p)])?;
    order::sort(&mut resources, top.sort.as_ref());
    Ok(Build { resources, kustomizations: walk.kustomizations.into_inner() })
}

/// Applies `change` to each resource and charges its growth right after, so that a transformer
/// adding much to every object is stopped at the first object past the budget.
fn each(
    resources: &mut [Resource],
    mut change: impl FnMut(&mut Resource) -> Result<(), Problem>,
) -> Result<(), Problem> {
    resources.iter_mut().try_for_each(|resource| {
        change(resource)?;
        resource.recharge()
    })
}

/// Charges the growth of every resource (after a transformer that changes them all a little).
fn recharge_all(resources: &mut [Resource]) -> Result<(), Problem> {
    resources.iter_mut().try_for_each(Resource::recharge)
}

/// The longest name an object may have (a DNS subdomain), checked before a prefix or suffix is
/// added so that no longer name is ever made.
const MAX_NAME: usize = 253;

/// Refuses `prefix` and `suffix` when they would make any name longer than [`MAX_NAME`].
fn check_renamed_lengths(resources: &[Resource], prefix: &str, suffix: &str) -> Result<(), Problem> {
    let field = if prefix.len() >= suffix.len() { "namePrefix" } else { "nameSuffix" };
    let added = prefix.len() + suffix.len();
    if let Some(long) = resources.iter().find(|r| r.name().len() + added > MAX_NAME) {
        return Err(Problem::field(
            field,
            format!(
                "would make the name of {} {} characters long; a name has at most {MAX_NAME}: shorten the prefix \
                 or suffix ({added} characters together)",
                long.describe(),
                long.name().len() + added
            ),
        ));
    }
    Ok(())
}

/// Places a problem in `file` unless it already names one (a patch file, a resource file).
fn locate(problem: Problem, file: &str) -> Problem {
    if problem.file.is_some() { problem } else { problem.located(file, None, None) }
}

fn locate_all(problems: Vec<Problem>, file: &str) -> Vec<Problem> {
    problems.into_iter().map(|p| locate(p, file)).collect()
}

/// One build's walk over the tree, with what it has read so far.
struct Walk<'a> {
    files: &'a dyn Files,
    limits: Limits,
    kustomizations: RefCell<Vec<KustomizationFile>>,
    bytes: Cell<usize>,
}

impl Walk<'_> {
    /// Reads a file within the build's byte budget.
    fn read(&self, path: &str, limit: usize) -> Result<String, String> {
        let bytes = self.files.read(path)?;
        if bytes.len() > limit {
            return Err(format!("is larger than {limit} bytes"));
        }
        let total = self.bytes.get() + bytes.len();
        if total > self.limits.bytes {
            return Err(format!("the build would read more than {} bytes; split the repository", self.limits.bytes));
        }
        self.bytes.set(total);
        String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned())
    }

    /// Loads the kustomization of directory `dir`, which `referrer` (file and field) names.
    fn load(&self, dir: &str, referrer: Option<(&str, &str)>, component: bool) -> Result<Kustomization, Vec<Problem>> {
        let problem = |message: String| match referrer {
            Some((file, field)) => Problem::field(field, message).located(file, None, None),
            None => Problem::field("", message).located(if dir.is_empty() { "." } else { dir }, None, None),
        };
        if self.kustomizations.borrow().len() >= self.limits.kustomizations {
            return Err(vec![problem(format!(
                "the build reads more than {} kustomization files; a base reached from many overlays counts each time",
                self.limits.kustomizations
            ))]);
        }
        let mut found = Vec::new();
        for name in KUSTOMIZATION_FILE_NAMES {
            let path = if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") };
            match self.files.stat(&path) {
                Ok(Some(Kind::File)) => found.push(path),
                Ok(_) => {}
                Err(e) => {
                    return Err(vec![Problem::field("", format!("cannot be read: {e}")).located(&path, None, None)]);
                }
            }
        }
        let shown = if dir.is_empty() { "the repository root" } else { dir };
        let file = match found.as_slice() {
            [] => {
                let what = if component { "a component" } else { "a directory in `resources`" };
                return Err(vec![problem(format!(
                    "`{shown}` has no kustomization.yaml (nor kustomization.yml, Kustomization): {what} must be a \
                     kustomization; list its files one by one instead"
                ))]);
            }
            [file] => file.clone(),
            several => {
                return Err(vec![problem(format!(
                    "`{shown}` has several kustomization files ({}); keep one",
                    several.join(", ")
                ))]);
            }
        };
        let text = self
            .read(&file, MAX_KUSTOMIZATION_BYTES)
            .map_err(|e| vec![Problem::field("", format!("cannot be read: {e}")).located(&file, None, None)])?;
        let kustomization = model::parse(&text, &file)?;
        self.kustomizations
            .borrow_mut()
            .push(KustomizationFile { path: file.clone(), namespace: kustomization.namespace.clone() });
        match (component, kustomization.component) {
            (true, false) => Err(vec![problem(format!(
                "`{file}` is not a Component: a component has `kind: Component` and apiVersion {}",
                model::COMPONENT_API_VERSION
            ))]),
            (false, true) => {
                Err(vec![problem(format!("`{file}` is a Component: list it under `components`, not `resources`"))])
            }
            _ => Ok(kustomization),
        }
    }

    /// The kustomization of directory `path`, named by `field` of `parent`, after the checks
    /// kustomize makes before descending: depth, and no cycle (a directory that contains one the
    /// walk came through).
    fn child(
        &self,
        path: &str,
        chain: &[String],
        parent: &Kustomization,
        field: &str,
        component: bool,
    ) -> Result<Kustomization, Vec<Problem>> {
        let problem = |message: String| vec![Problem::field(field, message).located(&parent.file, None, None)];
        if let Some(visited) = chain.iter().rev().find(|visited| is_within(visited, path)) {
            let shown = |d: &str| if d.is_empty() { "the repository root".to_owned() } else { format!("`{d}`") };
            let message = if visited == path {
                format!("a cycle: {} is already being built; a kustomization cannot include itself", shown(path))
            } else {
                format!(
                    "a cycle: {} contains {}, which the build came through; a base cannot include an overlay above it",
                    shown(path),
                    shown(visited)
                )
            };
            return Err(problem(message));
        }
        if chain.len() >= self.limits.depth {
            return Err(problem(format!("kustomizations are nested more than {} deep", self.limits.depth)));
        }
        self.load(path, Some((&parent.file, field)), component)
    }

    /// kustomize's `accumulateTarget`: the resources of `k` added to `accumulated` (empty but for
    /// a component, which works on its parent's), then its generators, components and
    /// transformers.
    fn target(
        &self,
        k: &Kustomization,
        chain: &mut Vec<String>,
        mut accumulated: Vec<Resource>,
    ) -> Result<Vec<Resource>, Vec<Problem>> {
        let dir = parent(&k.file).to_owned();
        let mut seen = ids(&accumulated);
        for (field, entry) in &k.resources {
            let problem = |message: String| vec![Problem::field(field, message).located(&k.file, None, None)];
            let path = resolve(&dir, entry).map_err(|refusal| problem(refusal.message(entry)))?;
            match self.files.stat(&path) {
                Err(e) => return Err(problem(format!("`{entry}` cannot be read: {e}"))),
                Ok(None) if paths::looks_like_host(entry) => {
                    return Err(problem(paths::Refusal::Remote.message(entry)));
                }
                Ok(None) => return Err(problem(format!("`{entry}` does not exist (looked for `{path}`)"))),
                Ok(Some(Kind::File)) => {
                    if !is_within(&path, &dir) {
                        return Err(problem(format!(
                            "`{entry}` is not in or below this kustomization's directory: kustomize reads files only \
                             there; move the file, or put it in a directory with its own kustomization and list that"
                        )));
                    }
                    let documents = self.documents(&path).map_err(|p| problem_list(p, field, &k.file))?;
                    append(&mut accumulated, &mut seen, documents, field, &k.file)?;
                }
                Ok(Some(Kind::Directory)) => {
                    let child = self.child(&path, chain, k, field, false)?;
                    chain.push(path);
                    let built = self.target(&child, chain, Vec::new());
                    chain.pop();
                    append(&mut accumulated, &mut seen, built?, field, &k.file)?;
                }
            }
            self.check_count(&accumulated, field, &k.file)?;
        }
        if ["configMapGenerator", "secretGenerator"].iter().any(|f| k.raw.get(f).is_some_and(|v| !v.is_null())) {
            let generated =
                generator::generate(&k.raw, &k.file, self.files).map_err(|found| locate_all(found, &k.file))?;
            for made in &generated {
                let refused = |overrun: budget::Overrun| {
                    vec![Problem::field(&made.field, overrun.to_string()).located(&k.file, None, None)]
                };
                budget::charge(|b| b.count_objects(1)).map_err(refused)?;
                budget::charge_value(&made.object).map_err(refused)?;
            }
            generator::absorb_all(&mut accumulated, generated, &k.file).map_err(|p| vec![p])?;
            self.check_count(&accumulated, "configMapGenerator", &k.file)?;
        }
        for (field, entry) in &k.components {
            let problem = |message: String| vec![Problem::field(field, message).located(&k.file, None, None)];
            let path = resolve(&dir, entry).map_err(|refusal| problem(refusal.message(entry)))?;
            match self.files.stat(&path) {
                Err(e) => return Err(problem(format!("`{entry}` cannot be read: {e}"))),
                Ok(Some(Kind::Directory)) => {}
                Ok(Some(Kind::File)) => {
                    return Err(problem(format!(
                        "`{entry}` is a file; a component is a directory with a kustomization.yaml of kind Component"
                    )));
                }
                Ok(None) if paths::looks_like_host(entry) => {
                    return Err(problem(paths::Refusal::Remote.message(entry)));
                }
                Ok(None) => return Err(problem(format!("`{entry}` does not exist (looked for `{path}`)"))),
            }
            let component = self.child(&path, chain, k, field, true)?;
            chain.push(path);
            let built = self.target(&component, chain, accumulated);
            chain.pop();
            accumulated = built?;
            self.check_count(&accumulated, field, &k.file)?;
        }
        self.transform(k, &dir, &mut accumulated)?;
        Ok(accumulated)
    }

    /// The transformers of `k`, in kustomize's order.
    fn transform(&self, k: &Kustomization, dir: &str, resources: &mut Vec<Resource>) -> Result<(), Vec<Problem>> {
        let mut problems = Vec::new();
        let mut load = |entry: &str| self.patch_file(dir, entry);
        let patches = Patches::read(&k.raw, &mut load).map_err(|found| problems.extend(found)).unwrap_or_default();
        let labels = Labels::read(&k.raw).map_err(|found| problems.extend(found)).unwrap_or_default();
        let annotations = Annotations::read(&k.raw).map_err(|found| problems.extend(found)).unwrap_or_default();
        let replicas = Replicas::read(&k.raw).map_err(|found| problems.extend(found)).unwrap_or_default();
        let images = Images::read(&k.raw).map_err(|found| problems.extend(found)).unwrap_or_default();
        if !problems.is_empty() {
            return Err(locate_all(problems, &k.file));
        }
        let at = |problem: Problem| vec![locate(problem, &k.file)];
        // Each transformer's growth is charged object by object (patches: operation by
        // operation), so the first object past the budget stops the build.
        let under = |field: &'static str| move |problem: Problem| vec![locate(problem.under(field), &k.file)];
        patches.apply_strategic_merge_to(resources).map_err(at)?;
        patches.apply_patches_to(resources).map_err(at)?;
        if let Some(namespace) = &k.namespace {
            names::set_namespace(resources, namespace).map_err(at)?;
            recharge_all(resources).map_err(under("namespace"))?;
        }
        if !k.name_prefix.is_empty() || !k.name_suffix.is_empty() {
            check_renamed_lengths(resources, &k.name_prefix, &k.name_suffix).map_err(at)?;
            names::add_prefix_suffix(resources, &k.name_prefix, &k.name_suffix).map_err(at)?;
            let field = if k.name_prefix.is_empty() { "nameSuffix" } else { "namePrefix" };
            recharge_all(resources).map_err(under(field))?;
        }
        if !labels.is_empty() {
            each(resources, |r| labels.apply(&mut r.object)).map_err(under("labels"))?;
        }
        if !annotations.is_empty() {
            each(resources, |r| annotations.apply(&mut r.object)).map_err(under("commonAnnotations"))?;
        }
        patches.apply_json6902_to(resources).map_err(at)?;
        if !replicas.is_empty() {
            // `apply_all`: an entry no workload answers to is kustomize's error too.
            replicas.apply_all(resources).map_err(|found| locate_all(found, &k.file))?;
            recharge_all(resources).map_err(under("replicas"))?;
        }
        if !images.is_empty() {
            each(resources, |r| images.apply(&mut r.object)).map_err(under("images"))?;
        }
        Ok(())
    }

    fn check_count(&self, accumulated: &[Resource], field: &str, file: &str) -> Result<(), Vec<Problem>> {
        if accumulated.len() > self.limits.objects {
            let message = format!("the build holds more than {} objects; split the repository", self.limits.objects);
            return Err(vec![Problem::field(field, message).located(file, None, None)]);
        }
        Ok(())
    }

    /// The text of a patch file `entry` names, read as kustomize's default load restrictor
    /// allows: in or below the kustomization's directory.
    fn patch_file(&self, dir: &str, entry: &str) -> Result<String, String> {
        let path = resolve(dir, entry).map_err(|refusal| refusal.message(entry))?;
        if !is_within(&path, dir) {
            return Err(format!(
                "`{entry}` is not in or below this kustomization's directory, where kustomize reads patch files; move \
                 it there"
            ));
        }
        match self.files.stat(&path)? {
            Some(Kind::File) => self.read(&path, self.limits.bytes),
            Some(Kind::Directory) => Err(format!("`{entry}` is a directory; a patch is a file")),
            None => Err(format!("`{entry}` does not exist (looked for `{path}`)")),
        }
    }

    /// The objects of a resource file, in order; problems are located in it.
    fn documents(&self, path: &str) -> Result<Vec<Resource>, Vec<Problem>> {
        let text = self
            .read(path, self.limits.bytes)
            .map_err(|e| vec![Problem::field("", format!("cannot be read: {e}")).located(path, None, None)])?;
        let documents = crate::yaml::parse_documents(&text)
            .map_err(|e| vec![Problem::field("", format!("not YAML: {}", e.message)).located(path, None, e.line)])?;
        let mut problems = Vec::new();
        let mut resources = Vec::new();
        for document in documents {
            if document.value.is_null() {
                continue;
            }
            let at = |p: Problem| p.located(path, Some(document.index), Some(document.line));
            match check_object(&document.value) {
                Ok(()) if problems.is_empty() => {
                    budget::charge(|b| b.count_objects(1))
                        .map_err(|overrun| vec![at(Problem::field("", overrun.to_string()))])?;
                    resources.push(Resource::from_document(
                        document.value,
                        Origin::Document { file: path.to_owned(), index: document.index, line: document.line },
                    ))
                }
                // Once a document is refused the file is: later ones are only checked (and at most a
                // budget's worth of their problems kept).
                Ok(()) => {}
                Err(found) => problems.extend(found.into_iter().map(at)),
            }
            if problems.len() > budget::problem_limit() {
                break;
            }
        }
        if problems.is_empty() { Ok(resources) } else { Err(problems) }
    }
}

/// Problems of a resource file, each located in it already; a problem without a file is placed
/// at the entry naming it.
fn problem_list(problems: Vec<Problem>, field: &str, file: &str) -> Vec<Problem> {
    problems
        .into_iter()
        .map(|p| if p.file.is_some() { p } else { Problem { field: field.to_owned(), ..p }.located(file, None, None) })
        .collect()
}

/// What makes a document a Kubernetes object the build can work with.
fn check_object(value: &Value) -> Result<(), Vec<Problem>> {
    let Some(map) = value.as_object() else {
        return Err(vec![Problem::field("", format!("expected a Kubernetes object (a map), found {}", shape(value)))]);
    };
    let mut problems = Vec::new();
    fn text(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str).filter(|s| !s.is_empty())
    }
    let kind = text(map.get("kind"));
    let api_version = text(map.get("apiVersion"));
    if kind.is_none() {
        problems.push(Problem::field("kind", "missing; every object has a kind (and apiVersion, metadata.name)"));
    }
    if api_version.is_none() {
        problems.push(Problem::field("apiVersion", "missing; every object has an apiVersion"));
    }
    match map.get("metadata") {
        Some(Value::Object(metadata)) => {
            if text(metadata.get("name")).is_none() {
                problems.push(Problem::field("metadata.name", "missing; every object has a name"));
            }
            if let Some(annotations) = metadata.get("annotations").and_then(Value::as_object) {
                for key in annotations.keys() {
                    if key.starts_with(BUILD_ANNOTATION_PREFIX) || BUILD_ANNOTATIONS.contains(&key.as_str()) {
                        problems.push(Problem::field(
                            format!("metadata.annotations.{key}"),
                            "kustomize keeps this annotation for its own bookkeeping (it would steer the build); \
                             remove it",
                        ));
                    }
                }
            }
        }
        _ => problems.push(Problem::field("metadata", "missing; every object has metadata with a name")),
    }
    if let (Some(kind), Some(api_version)) = (kind, api_version) {
        if api_version.starts_with("kustomize.config.k8s.io/") {
            problems.push(Problem::field(
                "kind",
                format!("a {kind} is not a resource: list the directory that holds it under `resources`"),
            ));
        } else if kind == "List" || kind.ends_with("List") && map.contains_key("items") {
            problems.push(Problem::field("kind", "lists are not expanded; write each object as its own document"));
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// kustomize's resource id: apiVersion, kind, name and effective namespace (`default` when none;
/// none at all for a cluster-scoped kind).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Id {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
}

impl Id {
    fn of(object: &Value, name: &str, namespace: Option<&str>) -> Id {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (api_version, kind) = (text("/apiVersion"), text("/kind"));
        let namespace = if MergeKeys::builtin().is_cluster_scoped(&api_version, &kind) {
            String::new()
        } else {
            namespace.filter(|n| !n.is_empty()).unwrap_or("default").to_owned()
        };
        Id { api_version, kind, namespace, name: name.to_owned() }
    }

    fn current(resource: &Resource) -> Id {
        let namespace = resource.object.pointer("/metadata/namespace").and_then(Value::as_str);
        Id::of(&resource.object, resource.name(), namespace)
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slash = if self.namespace.is_empty() { "" } else { "/" };
        write!(f, "{} {} {}{slash}{}", self.api_version, self.kind, self.namespace, self.name)
    }
}

fn origin_text(origin: &Origin) -> String {
    match origin {
        Origin::Document { file, index, .. } => format!("{file}:{index}"),
        Origin::Generator { file, field } => format!("{file} {field}"),
    }
}

/// The current ids of `resources`, to their positions.
fn ids(resources: &[Resource]) -> HashMap<Id, usize> {
    resources.iter().enumerate().map(|(i, r)| (Id::current(r), i)).collect()
}

/// kustomize's `AppendAll`: `added` after `accumulated`, refusing an id already there (`seen`
/// holds the ids of `accumulated`, kept up to date, so appending stays linear).
fn append(
    accumulated: &mut Vec<Resource>,
    seen: &mut HashMap<Id, usize>,
    added: Vec<Resource>,
    field: &str,
    file: &str,
) -> Result<(), Vec<Problem>> {
    for resource in added {
        let id = Id::current(&resource);
        if let Some(&first) = seen.get(&id) {
            return Err(vec![
                Problem::field(
                    field,
                    format!(
                        "{id} is already in the build (from {}); this entry adds it again (from {}): kustomize refuses \
                         two objects with the same kind, name and namespace",
                        origin_text(&accumulated[first].origin),
                        origin_text(&resource.origin)
                    ),
                )
                .located(file, None, None),
            ]);
        }
        seen.insert(id, accumulated.len());
        accumulated.push(resource);
    }
    Ok(())
}

/// Two objects that ended with the same id (kustomize refuses them when it sorts its output).
fn check_unique(resources: &[Resource]) -> Result<(), Problem> {
    let mut seen: HashMap<Id, &Resource> = HashMap::new();
    for resource in resources {
        let id = Id::current(resource);
        if let Some(first) = seen.insert(id.clone(), resource) {
            return Err(Problem::field(
                "",
                format!(
                    "two objects end up as {id} (from {} and {}); give them different names",
                    origin_text(&first.origin),
                    origin_text(&resource.origin)
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
