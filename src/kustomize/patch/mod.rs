//! The patches of a kustomization: `patches`, and the deprecated `patchesStrategicMerge` and
//! `patchesJson6902`, read from a kustomization and applied to its objects as kustomize v5.5
//! applies them.
//!
//! kustomize applies `patchesStrategicMerge` first, then `patches` (each entry in order), and
//! `patchesJson6902` last, after its namespace, prefix, suffix, label and annotation
//! transformers; [`Patches::apply`] applies the three in that order with nothing between, and
//! the builder calls [`Patches::apply_strategic_merge`], [`Patches::apply_patches`] and
//! [`Patches::apply_json6902`] around its transformers.

pub(crate) mod json6902;
pub mod schema;
pub(crate) mod strategic;

use serde_json::Value;

use self::json6902::JsonPatch;
use self::schema::MergeKeys;
use self::strategic::Allow;
use crate::budget;
use crate::kustomize::resource::{PreviousId, Resource};
use crate::kustomize::target::Selector;
use crate::problem::{Problem, Problems};

/// What a patch does.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// Strategic merge patches (a file may hold several documents).
    Strategic(Vec<Value>),
    /// A JSON patch.
    Json(JsonPatch),
}

/// One patch entry of a kustomization.
#[derive(Clone, Debug)]
pub struct Patch {
    /// Where the entry is in the kustomization (`patches[2]`), for problems.
    pub field: String,
    /// What the patch does.
    pub body: Body,
    /// The objects it applies to; `None` for a strategic merge patch that names its target.
    pub target: Option<Selector>,
    /// What a strategic merge may change of a target's identity.
    pub allow: Allow,
}

/// Reads the text of a file named by the kustomization (relative to it); the builder decides
/// what may be read and how much.
pub(crate) type Load<'a> = dyn FnMut(&str) -> Result<String, String> + 'a;

/// The three patch fields of one kustomization.
#[derive(Clone, Debug, Default)]
pub struct Patches {
    /// `patchesStrategicMerge`.
    pub strategic_merge: Vec<Patch>,
    /// `patches`.
    pub patches: Vec<Patch>,
    /// `patchesJson6902`.
    pub json6902: Vec<Patch>,
}

impl Patches {
    /// Reads `patches`, `patchesStrategicMerge` and `patchesJson6902` of a kustomization (other
    /// fields are ignored here). Problems name the field (`patches[1].target.name`); a problem
    /// inside a patch file also names that file.
    pub fn read(kustomization: &Value, load: &mut Load<'_>) -> Result<Patches, Vec<Problem>> {
        let mut problems = Problems::default();
        let mut patches = Patches::default();
        let entries = |field: &str, problems: &mut Problems| -> Vec<Value> {
            match kustomization.get(field) {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items.clone(),
                Some(_) => {
                    problems.push(field, "expected a list");
                    Vec::new()
                }
            }
        };
        for (i, entry) in entries("patchesStrategicMerge", &mut problems).iter().enumerate() {
            let field = format!("patchesStrategicMerge[{i}]");
            let Some(text) = entry.as_str() else {
                problems.push(field, "expected a file name or an inline patch (a string)");
                continue;
            };
            // A multi-line entry is an inline patch; a one-line entry names a file.
            let loaded = if text.contains('\n') { Ok((text.to_owned(), None)) } else { load_file(load, text, &field) };
            match loaded.and_then(|(text, file)| strategic_documents(&text, file.as_deref(), &field)) {
                Ok(documents) => patches.strategic_merge.push(Patch {
                    field,
                    body: Body::Strategic(documents),
                    target: None,
                    allow: Allow::default(),
                }),
                Err(problem) => problems.extend_under("", [problem]),
            }
        }
        for (i, entry) in entries("patches", &mut problems).iter().enumerate() {
            match read_entry(entry, &format!("patches[{i}]"), load, false) {
                Ok(patch) => patches.patches.push(patch),
                Err(found) => problems.extend_under("", found),
            }
        }
        for (i, entry) in entries("patchesJson6902", &mut problems).iter().enumerate() {
            match read_entry(entry, &format!("patchesJson6902[{i}]"), load, true) {
                Ok(patch) => patches.json6902.push(patch),
                Err(found) => problems.extend_under("", found),
            }
        }
        problems.finish(patches)
    }

    /// Applies all three fields in kustomize's order to `objects`.
    pub fn apply(&self, objects: &mut Vec<Value>) -> Result<(), Problem> {
        self.apply_strategic_merge(objects)?;
        self.apply_patches(objects)?;
        self.apply_json6902(objects)
    }

    /// Applies `patchesStrategicMerge`.
    pub fn apply_strategic_merge(&self, objects: &mut Vec<Value>) -> Result<(), Problem> {
        self.strategic_merge.iter().try_for_each(|patch| patch.apply(objects))
    }

    /// Applies `patches`.
    pub fn apply_patches(&self, objects: &mut Vec<Value>) -> Result<(), Problem> {
        self.patches.iter().try_for_each(|patch| patch.apply(objects))
    }

    /// Applies `patchesJson6902`.
    pub fn apply_json6902(&self, objects: &mut Vec<Value>) -> Result<(), Problem> {
        self.json6902.iter().try_for_each(|patch| patch.apply(objects))
    }

    /// Applies `patchesStrategicMerge` to the resources of a build (targets match earlier names).
    pub fn apply_strategic_merge_to(&self, resources: &mut Vec<Resource>) -> Result<(), Problem> {
        apply_indexed(&self.strategic_merge, resources)
    }

    /// Applies `patches` to the resources of a build.
    pub fn apply_patches_to(&self, resources: &mut Vec<Resource>) -> Result<(), Problem> {
        apply_indexed(&self.patches, resources)
    }

    /// Applies `patchesJson6902` to the resources of a build.
    pub fn apply_json6902_to(&self, resources: &mut Vec<Resource>) -> Result<(), Problem> {
        self.json6902.iter().try_for_each(|patch| patch.apply_to(resources))
    }

    /// Whether there is no patch at all.
    pub fn is_empty(&self) -> bool {
        self.strategic_merge.is_empty() && self.patches.is_empty() && self.json6902.is_empty()
    }
}

/// The work charged for trying one patch target against one object: anchored regular
/// expressions over its kind, name and namespace and its earlier names, and label selectors,
/// about as long as walking 64 nodes of an object.
const TRY_COST: u64 = 64;

/// An object's id as a strategic merge patch names it: apiVersion, kind, name and effective
/// namespace (`default` when none, empty for a cluster-scoped kind).
type NamedId = (String, String, String, String);

fn named_id(object: &Value, name: &str, namespace: Option<&str>, table: &MergeKeys) -> NamedId {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    let namespace = if table.is_cluster_scoped(api_version, kind) {
        String::new()
    } else {
        namespace.filter(|n| !n.is_empty()).unwrap_or("default").to_owned()
    };
    (api_version.to_owned(), kind.to_owned(), name.to_owned(), namespace)
}

/// Every id each resource has or had, to the resources' positions (ascending).
fn index_ids(resources: &[Resource], table: &MergeKeys) -> std::collections::HashMap<NamedId, Vec<usize>> {
    let mut index: std::collections::HashMap<NamedId, Vec<usize>> = std::collections::HashMap::new();
    for (i, resource) in resources.iter().enumerate() {
        let current = named_id(
            &resource.object,
            resource.name(),
            resource.object.pointer("/metadata/namespace").and_then(Value::as_str),
            table,
        );
        let earlier =
            resource.previous.iter().map(|p| named_id(&resource.object, &p.name, p.namespace.as_deref(), table));
        for id in std::iter::once(current).chain(earlier) {
            let positions = index.entry(id).or_default();
            if positions.last() != Some(&i) {
                positions.push(i);
            }
        }
    }
    index
}

/// Applies `patches` in order; strategic merge patches without target find their object through
/// an index of ids (built once, again only after a patch deleted or renamed an object), so an
/// overlay with a patch per object stays linear.
fn apply_indexed(patches: &[Patch], resources: &mut Vec<Resource>) -> Result<(), Problem> {
    let table = MergeKeys::builtin();
    let mut index = None;
    for patch in patches {
        let Body::Strategic(documents) = &patch.body else {
            patch.apply_to(resources)?;
            index = None;
            continue;
        };
        if patch.target.is_some() {
            patch.apply_to(resources)?;
            index = None;
            continue;
        }
        for document in documents {
            if index.is_none() {
                // Rebuilt after each patch that deleted or renamed: paid for, as a tenant can make
                // every document do that.
                budget::charge(|b| b.charge_work(resources.len() as u64))
                    .map_err(|overrun| Problem::field(&patch.field, overrun.to_string()))?;
            }
            let ids = index.get_or_insert_with(|| index_ids(resources, table));
            let text = |p: &str| document.pointer(p).and_then(Value::as_str);
            let id = named_id(document, text("/metadata/name").unwrap_or_default(), text("/metadata/namespace"), table);
            let matching = ids.get(&id).cloned().unwrap_or_default();
            let (count, renames) =
                (resources.len(), matching.iter().map(|i| resources[*i].previous.len()).sum::<usize>());
            patch.merge_named(resources, matching.clone(), document, table)?;
            let renamed = resources.len() != count
                || matching.iter().map(|i| resources[*i].previous.len()).sum::<usize>() != renames;
            if renamed {
                index = None;
            }
        }
    }
    Ok(())
}

/// What a patch is applied to: a bare object, or a resource of a build that remembers its
/// earlier names (kustomize matches those too).
trait Patched {
    fn object(&self) -> &Value;
    /// Replaces the object, charging what it grew by to the revision's budget.
    fn set_object(&mut self, object: Value) -> Result<(), Problem>;
    /// Whether a `target` selects it.
    fn selected_by(&self, target: &Selector) -> bool;
    /// Whether a strategic merge patch without target names it.
    fn named_by(&self, patch: &Value, table: &MergeKeys) -> bool;
}

impl Patched for Value {
    fn object(&self) -> &Value {
        self
    }

    fn set_object(&mut self, object: Value) -> Result<(), Problem> {
        *self = object;
        Ok(())
    }

    fn selected_by(&self, target: &Selector) -> bool {
        target.matches(self)
    }

    fn named_by(&self, patch: &Value, table: &MergeKeys) -> bool {
        same_object(self, patch, table)
    }
}

impl Patched for Resource {
    fn object(&self) -> &Value {
        &self.object
    }

    /// A patch that renames (`allowNameChange`) or moves the object leaves its earlier id behind.
    fn set_object(&mut self, object: Value) -> Result<(), Problem> {
        let id = |o: &Value| {
            let text = |p: &str| o.pointer(p).and_then(Value::as_str).map(str::to_owned);
            (text("/metadata/name").unwrap_or_default(), text("/metadata/namespace"))
        };
        let (name, namespace) = id(&self.object);
        if id(&object) != (name.clone(), namespace.clone()) {
            self.previous.push(PreviousId { name, namespace });
        }
        self.object = object;
        self.recharge()
    }

    /// kustomize's `Select`: the name and the namespace each match the original or the current
    /// one; kind and selectors the object as it is.
    fn selected_by(&self, target: &Selector) -> bool {
        let original = self.previous.first();
        target.matches_with(
            &self.object,
            original.map(|p| p.name.as_str()),
            original.map(|p| p.namespace.as_deref().unwrap_or_default()),
        )
    }

    /// kustomize's `GetById`: the patch's id equals the current one or any earlier one.
    fn named_by(&self, patch: &Value, table: &MergeKeys) -> bool {
        same_object(&self.object, patch, table)
            || self.previous.iter().any(|p| names_id(&self.object, &p.name, p.namespace.as_deref(), patch, table))
    }
}

impl Patch {
    /// Applies this patch to `objects`: to every object its target selects (none is no error, as
    /// in kustomize), or, without a target, to the one object each strategic merge document
    /// names by apiVersion, kind, name and namespace (exactly one must match). An object a
    /// strategic merge deletes (`$patch: delete`) leaves the list.
    pub fn apply(&self, objects: &mut Vec<Value>) -> Result<(), Problem> {
        self.apply_any(objects)
    }

    /// [`Patch::apply`] over the resources of a build: a target's name and namespace also match
    /// the object's original ones, and a strategic merge patch without target names it by any of
    /// its earlier ids, as kustomize matches a patch written against a base's names.
    pub fn apply_to(&self, resources: &mut Vec<Resource>) -> Result<(), Problem> {
        self.apply_any(resources)
    }

    fn apply_any<T: Patched>(&self, objects: &mut Vec<T>) -> Result<(), Problem> {
        let table = MergeKeys::builtin();
        match (&self.body, &self.target) {
            (Body::Json(ops), Some(target)) => {
                for object in objects.iter_mut() {
                    if !self.tries(object, |o| o.selected_by(target))? {
                        continue;
                    }
                    let id = identity(object.object());
                    let mut patched = object.object().clone();
                    json6902::apply(&mut patched, ops).map_err(|p| self.failed(&id, p))?;
                    object.set_object(patched).map_err(|p| self.failed(&id, p))?;
                }
                Ok(())
            }
            (Body::Json(_), None) => Err(Problem::field(&self.field, "a JSON patch needs a `target`")),
            (Body::Strategic(documents), Some(target)) => {
                let [patch] = documents.as_slice() else {
                    return Err(Problem::field(
                        &self.field,
                        "a patch with a `target` holds exactly one strategic merge document",
                    ));
                };
                let mut selected = Vec::new();
                for (i, object) in objects.iter().enumerate() {
                    if self.tries(object, |o| o.selected_by(target))? {
                        selected.push(i);
                    }
                }
                self.merge_into(objects, selected, patch, table)
            }
            (Body::Strategic(documents), None) => {
                for patch in documents {
                    let mut matching = Vec::new();
                    for (i, object) in objects.iter().enumerate() {
                        if self.tries(object, |o| o.named_by(patch, table))? {
                            matching.push(i);
                        }
                    }
                    self.merge_named(objects, matching, patch, table)?;
                }
                Ok(())
            }
        }
    }

    /// Merges `patch` into the one object in `matching` (the objects it names).
    fn merge_named<T: Patched>(
        &self,
        objects: &mut Vec<T>,
        matching: Vec<usize>,
        patch: &Value,
        table: &MergeKeys,
    ) -> Result<(), Problem> {
        if matching.len() != 1 {
            let how = if matching.is_empty() { "no object" } else { "more than one object" };
            return Err(Problem::field(
                &self.field,
                format!(
                    "{how} matches the strategic merge patch for {}: a patch without `target` names its object by \
                     apiVersion, kind, metadata.name and metadata.namespace",
                    identity(patch)
                ),
            ));
        }
        self.merge_into(objects, matching, patch, table)
    }

    fn merge_into<T: Patched>(
        &self,
        objects: &mut Vec<T>,
        selected: Vec<usize>,
        patch: &Value,
        table: &MergeKeys,
    ) -> Result<(), Problem> {
        let mut deleted = Vec::new();
        for index in selected {
            let id = identity(objects[index].object());
            match strategic::apply(objects[index].object(), patch, self.allow, table)
                .map_err(|p| self.failed(&id, p))?
            {
                Some(merged) => objects[index].set_object(merged).map_err(|p| self.failed(&id, p))?,
                None => deleted.push(index),
            }
        }
        if !deleted.is_empty() {
            // One pass, however many objects the patch deletes.
            let deleted: std::collections::HashSet<usize> = deleted.into_iter().collect();
            let mut index = 0;
            objects.retain(|_| {
                index += 1;
                !deleted.contains(&(index - 1))
            });
        }
        Ok(())
    }

    /// Whether `object` answers to this patch by `test`, charged to the revision's work budget:
    /// patches × objects is the one product a tenant controls, so it is paid for.
    fn tries<T: Patched>(&self, object: &T, test: impl Fn(&T) -> bool) -> Result<bool, Problem> {
        budget::charge(|b| b.charge_work(TRY_COST))
            .map_err(|overrun| Problem::field(&self.field, overrun.to_string()))?;
        Ok(test(object))
    }

    /// A problem found applying this patch to the object `id`.
    fn failed(&self, id: &str, problem: Problem) -> Problem {
        let inside = if problem.field.is_empty() { String::new() } else { format!("{}: ", problem.field) };
        Problem::field(&self.field, format!("applied to {id}: {inside}{}", problem.message))
    }
}

/// `apps/v1 Deployment team-a/web`, for messages.
fn identity(object: &Value) -> String {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let namespace = text("/metadata/namespace");
    let slash = if namespace.is_empty() { "" } else { "/" };
    format!("{} {} {namespace}{slash}{}", text("/apiVersion"), text("/kind"), text("/metadata/name"))
}

/// Whether `patch` names `object` (kustomize's resource id: group, version, kind, name and the
/// effective namespace, where none is `default`).
fn same_object(object: &Value, patch: &Value, table: &MergeKeys) -> bool {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    names_id(object, text("/metadata/name"), Some(text("/metadata/namespace")), patch, table)
}

/// Whether `patch` names an object of `object`'s apiVersion and kind, called `name` in
/// `namespace` (none, or empty, is `default`; cluster-scoped kinds have none).
fn names_id(object: &Value, name: &str, namespace: Option<&str>, patch: &Value, table: &MergeKeys) -> bool {
    fn text<'v>(v: &'v Value, p: &str) -> &'v str {
        v.pointer(p).and_then(Value::as_str).unwrap_or_default()
    }
    if ["/apiVersion", "/kind"].iter().any(|p| text(object, p) != text(patch, p))
        || text(patch, "/metadata/name") != name
    {
        return false;
    }
    if table.is_cluster_scoped(text(object, "/apiVersion"), text(object, "/kind")) {
        return true;
    }
    let effective = |n: Option<&str>| n.filter(|n| !n.is_empty()).unwrap_or("default").to_owned();
    effective(namespace) == effective(patch.pointer("/metadata/namespace").and_then(Value::as_str))
}

fn load_file(load: &mut Load<'_>, path: &str, field: &str) -> Result<(String, Option<String>), Problem> {
    load(path)
        .map(|text| (text, Some(path.to_owned())))
        .map_err(|e| Problem::field(field, format!("cannot read `{path}`: {e}")))
}

/// The documents of a strategic merge patch; each must be a map.
fn strategic_documents(text: &str, file: Option<&str>, field: &str) -> Result<Vec<Value>, Problem> {
    let in_file = |problem: Problem| match file {
        Some(file) => problem.located(file, None, None),
        None => problem.under(field),
    };
    let documents = crate::yaml::parse_documents(text)
        .map_err(|e| in_file(Problem::field("", format!("not YAML ({field}): {}", e.message))))?;
    if documents.is_empty() {
        return Err(Problem::field(field, "the patch is empty"));
    }
    let mut patches = Vec::new();
    for document in documents {
        if !document.value.is_object() {
            let problem =
                Problem::field("", format!("a strategic merge patch is a map, like the object it patches ({field})"));
            return Err(match file {
                Some(file) => problem.located(file, Some(document.index), Some(document.line)),
                None => problem.under(field),
            });
        }
        patches.push(document.value);
    }
    Ok(patches)
}

/// The fields a `patches` entry may have.
const ENTRY_FIELDS: &[&str] = &["path", "patch", "target", "options"];

/// Reads one entry of `patches` (or of `patchesJson6902`, which must be a JSON patch with a
/// target that names its object).
fn read_entry(entry: &Value, field: &str, load: &mut Load<'_>, json_only: bool) -> Result<Patch, Vec<Problem>> {
    let mut problems = Problems::default();
    let Some(map) = entry.as_object() else {
        problems.push(field, "expected a map with `path` or `patch`, and `target`");
        return Err(problems.into_vec());
    };
    for key in map.keys().filter(|k| !ENTRY_FIELDS.contains(&k.as_str()) || (json_only && k.as_str() == "options")) {
        problems
            .push(format!("{field}.{key}"), "unknown field; expected path, patch, target (and options in `patches`)");
    }
    let target = match map.get("target") {
        None | Some(Value::Null) => None,
        Some(target) => match Selector::parse(target) {
            Ok(selector) => Some(selector),
            Err(found) => {
                problems.extend_under(&format!("{field}.target"), found);
                None
            }
        },
    };
    if json_only && map.get("target").and_then(|t| t.get("name")).and_then(Value::as_str).is_none_or(str::is_empty) {
        problems.push(format!("{field}.target.name"), "a `patchesJson6902` target names its object");
    }
    let mut allow = Allow::default();
    if let Some(options) = map.get("options").filter(|o| !o.is_null()) {
        for (key, value) in options.as_object().into_iter().flatten() {
            let slot = match key.as_str() {
                "allowNameChange" => &mut allow.name_change,
                "allowKindChange" => &mut allow.kind_change,
                _ => {
                    problems.push(
                        format!("{field}.options.{key}"),
                        "unknown option; expected allowNameChange or allowKindChange",
                    );
                    continue;
                }
            };
            match value.as_bool() {
                Some(set) => *slot = set,
                None => problems.push(format!("{field}.options.{key}"), "expected true or false"),
            }
        }
    }
    let text = |key: &str| map.get(key).and_then(Value::as_str).filter(|s| !s.trim().is_empty());
    let loaded = match (text("path"), text("patch")) {
        (Some(_), Some(_)) => Err(Problem::field(field, "give `path` or `patch`, not both")),
        (None, None) => Err(Problem::field(field, "give `path` (a file) or `patch` (inline)")),
        (Some(path), None) => load_file(load, path, &format!("{field}.path")),
        (None, Some(inline)) => Ok((if json_only { inline.to_owned() } else { inline.trim().to_owned() }, None)),
    };
    let body = match loaded.and_then(|(text, file)| body(&text, file.as_deref(), field, json_only)) {
        Ok(body) => Some(body),
        Err(problem) => {
            problems.extend_under("", [problem]);
            None
        }
    };
    let body = problems.finish(body)?.expect("no problem means a body");
    if matches!(body, Body::Json(_)) && target.is_none() {
        return Err(vec![Problem::field(format!("{field}.target"), "a JSON patch needs a `target`")]);
    }
    Ok(Patch { field: field.to_owned(), body, target, allow })
}

/// A patch's text as a JSON patch (a list of operations) or strategic merge documents (maps).
fn body(text: &str, file: Option<&str>, field: &str, json_only: bool) -> Result<Body, Problem> {
    let locate = |problem: Problem| match file {
        Some(file) => {
            Problem { message: format!("{} ({field})", problem.message), ..problem.located(file, None, None) }
        }
        None => problem.under(field),
    };
    let is_list = text.starts_with('[')
        || crate::yaml::parse_documents(text).is_ok_and(|d| d.len() == 1 && d[0].value.is_array());
    if json_only || is_list {
        return json6902::parse(text).map(Body::Json).map_err(locate);
    }
    strategic_documents(text, file, field).map(Body::Strategic)
}
