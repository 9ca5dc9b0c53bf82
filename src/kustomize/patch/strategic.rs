//! Strategic merge patches, with the semantics kustomize v5.5 gives them (kyaml's merge walk).
//!
//! - Maps merge field by field; a `null` in the patch deletes the field.
//! - A list whose schema has the patch strategy `merge` and merge keys is merged element by
//!   element, matched by its keys; elements only in the patch come first, in the patch's order,
//!   then the target's others in their order (kustomize prepends). A list of scalars with
//!   strategy `merge` becomes the union, the patch's values first.
//! - Any other list (no strategy, `replace`, a kind the table does not know such as a custom
//!   resource) is replaced by the patch's.
//! - `$patch: delete|replace|merge` on a map (the whole object at the top), on a list element,
//!   and as the single key of a list's element (for the whole list).
//! - `$setElementOrder/…`, `$deleteFromPrimitiveList/…` and `$retainKeys` are refused: kustomize
//!   v5.5 does not apply them but copies them into the object as fields.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::schema::{At, MergeKeys};
use crate::kustomize::comparisons::Counted;
use crate::problem::{Problem, join_path};

/// The key of the patch directive.
const DIRECTIVE: &str = "$patch";

/// Applies one strategic merge `patch` to `target` (a whole object); `Ok(None)` when the patch
/// deletes it. The target keeps its kind, name and namespace unless `allow` says otherwise.
pub fn apply(target: &Value, patch: &Value, allow: Allow, table: &MergeKeys) -> Result<Option<Value>, Problem> {
    refuse_unapplied_directives(patch, "")?;
    let mut patch = patch.clone();
    // kustomize gives the patch the target's apiVersion (its schema is the target's).
    if let (Some(patch), Some(version)) = (patch.as_object_mut(), target.get("apiVersion")) {
        patch.insert("apiVersion".to_owned(), version.clone());
    }
    let merger = Merger { table };
    let Some(mut merged) = merger.walk(Some(target.clone()), Some(patch), None, "")? else { return Ok(None) };
    if merged.as_object().is_none_or(Map::is_empty) {
        return Ok(None);
    }
    let object = merged.as_object_mut().expect("checked above");
    if !allow.kind_change {
        restore(object, &["kind"], target.get("kind"));
    }
    if !allow.name_change {
        restore(object, &["metadata", "name"], target.pointer("/metadata/name"));
    }
    restore(object, &["metadata", "namespace"], target.pointer("/metadata/namespace"));
    Ok(Some(merged))
}

/// What a patch may change of its target's identity (`options` of a `patches` entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allow {
    /// `allowNameChange`: the patch's `metadata.name` renames the target.
    pub name_change: bool,
    /// `allowKindChange`: the patch's `kind` changes the target's.
    pub kind_change: bool,
}

/// Sets `path` in `object` back to `value` (or removes it when the target had none).
fn restore(object: &mut Map<String, Value>, path: &[&str], value: Option<&Value>) {
    let (last, parents) = path.split_last().expect("a non-empty path");
    let mut current = object;
    for parent in parents {
        if !current.get(*parent).is_some_and(Value::is_object) {
            if value.is_none() {
                return;
            }
            current.insert((*parent).to_owned(), Value::Object(Map::new()));
        }
        current = current.get_mut(*parent).and_then(Value::as_object_mut).expect("an object, made above if missing");
    }
    match value {
        Some(value) => current.insert((*last).to_owned(), value.clone()),
        None => current.remove(*last),
    };
}

/// Fails on the Kubernetes directives kustomize v5.5 does not apply.
fn refuse_unapplied_directives(patch: &Value, path: &str) -> Result<(), Problem> {
    match patch {
        Value::Object(map) => {
            for (key, value) in map {
                let here = join_path(path, key);
                if key.starts_with("$setElementOrder/")
                    || key.starts_with("$deleteFromPrimitiveList/")
                    || key == "$retainKeys"
                {
                    return Err(Problem::field(
                        here,
                        format!(
                            "the directive `{key}` is not supported: kustomize v5.5 does not apply it (it copies it into the \
                             object as a field); delete elements with `$patch: delete` in the element, or replace the \
                             list or map with `$patch: replace`"
                        ),
                    ));
                }
                refuse_unapplied_directives(value, &here)?;
            }
            Ok(())
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| refuse_unapplied_directives(item, &format!("{path}[{i}]"))),
        _ => Ok(()),
    }
}

/// What a `$patch` directive says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Directive {
    Merge,
    Replace,
    Delete,
}

fn directive(value: &Value, path: &str) -> Result<Directive, Problem> {
    match value.as_str() {
        Some("merge") => Ok(Directive::Merge),
        Some("replace") => Ok(Directive::Replace),
        Some("delete") => Ok(Directive::Delete),
        _ => Err(Problem::field(
            join_path(path, DIRECTIVE),
            format!("unknown patch directive {value}; expected `merge`, `replace` or `delete`"),
        )),
    }
}

/// Takes the `$patch` directive out of a map patch.
fn take_map_directive(patch: &mut Value, path: &str) -> Result<Directive, Problem> {
    match patch.as_object_mut().and_then(|m| m.remove(DIRECTIVE)) {
        Some(value) => directive(&value, path),
        None => Ok(Directive::Merge),
    }
}

/// Takes a list-wide `$patch` directive out of a list patch: the first element holding `$patch`
/// says it when that is its only key (otherwise it is an element's own directive).
fn take_list_directive(patch: &mut Value, path: &str) -> Result<Directive, Problem> {
    let Some(items) = patch.as_array_mut() else { return Ok(Directive::Merge) };
    let Some(index) = items.iter().position(|item| item.get(DIRECTIVE).is_some()) else { return Ok(Directive::Merge) };
    if items[index].as_object().is_some_and(|m| m.len() > 1) {
        return Ok(Directive::Merge);
    }
    let found = directive(&items[index][DIRECTIVE], &format!("{path}[{index}]"))?;
    // Every element equal to the directive is removed (kyaml's element setter).
    let marker = items[index].clone();
    items.retain(|item| *item != marker);
    Ok(found)
}

/// What kind of YAML node a value is, as the walk distinguishes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Map,
    List,
    Scalar,
}

fn kind(value: &Value) -> Option<Kind> {
    match value {
        Value::Null => None,
        Value::Object(_) => Some(Kind::Map),
        Value::Array(_) => Some(Kind::List),
        _ => Some(Kind::Scalar),
    }
}

/// Null, or an empty map or list.
fn is_empty(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Map => "a map",
        Kind::List => "a list",
        Kind::Scalar => "a scalar",
    }
}

/// A merge key's value as kyaml compares it: the scalar's text, empty when absent.
fn key_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => String::new(),
    }
}

struct Merger<'t> {
    table: &'t MergeKeys,
}

impl<'t> Merger<'t> {
    /// The schema of a node without one: from its own `apiVersion` and `kind`, target first.
    fn schema_of(&self, nodes: [Option<&Value>; 2]) -> Option<At<'t>> {
        nodes.into_iter().flatten().find_map(|node| {
            let version = node.get("apiVersion").and_then(Value::as_str).filter(|s| !s.is_empty())?;
            let kind = node.get("kind").and_then(Value::as_str).filter(|s| !s.is_empty())?;
            Some(self.table.root(version, kind))
        })?
    }

    /// Merges `patch` into `dest`; `Ok(None)` when the result is no value (the field goes).
    fn walk(
        &self,
        dest: Option<Value>,
        patch: Option<Value>,
        at: Option<At<'t>>,
        path: &str,
    ) -> Result<Option<Value>, Problem> {
        let at = at.or_else(|| self.schema_of([dest.as_ref(), patch.as_ref()]));
        let shape = [dest.as_ref(), patch.as_ref()].into_iter().find(|v| !is_empty(*v)).and_then(|v| v.and_then(kind));
        if let Some(shape) = shape {
            for (side, value) in [("the target", &dest), ("the patch", &patch)] {
                if let Some(other) = value.as_ref().and_then(kind).filter(|k| *k != shape) {
                    return Err(Problem::field(
                        path,
                        format!(
                            "{side} has {} where the other side has {}; patch it with a value of the same shape",
                            kind_name(other),
                            kind_name(shape)
                        ),
                    ));
                }
            }
        }
        match shape {
            None | Some(Kind::Map) => self.walk_map(dest, patch, at, path),
            Some(Kind::List) => self.walk_list(dest, patch, at, path),
            Some(Kind::Scalar) => Ok(match patch {
                Some(Value::Null) => None,
                Some(patch) => Some(patch),
                None => dest,
            }),
        }
    }

    fn walk_map(
        &self,
        dest: Option<Value>,
        patch: Option<Value>,
        at: Option<At<'t>>,
        path: &str,
    ) -> Result<Option<Value>, Problem> {
        let dest = match dest {
            Some(Value::Null) | None => {
                let Some(patch) = patch else { return Ok(dest) };
                return self.own(patch, at, path);
            }
            Some(dest) => dest,
        };
        let mut patch = match patch {
            Some(Value::Null) => return Ok(None),
            None => return self.fields(dest, Map::new(), at, path).map(Some),
            Some(patch) => patch,
        };
        match take_map_directive(&mut patch, path)? {
            Directive::Delete => Ok(None),
            Directive::Replace => self.own(patch, at, path),
            Directive::Merge => {
                let Value::Object(patch) = patch else { return Ok(Some(dest)) };
                self.fields(dest, patch, at, path).map(Some)
            }
        }
    }

    /// Merges the fields of two maps.
    fn fields(
        &self,
        dest: Value,
        mut patch: Map<String, Value>,
        at: Option<At<'t>>,
        path: &str,
    ) -> Result<Value, Problem> {
        let Value::Object(mut dest) = dest else { return Ok(dest) };
        let mut names: Vec<String> = dest.keys().chain(patch.keys()).cloned().collect();
        names.sort();
        names.dedup();
        for name in names {
            let below = at.map(|at| at.field(self.table, &name));
            let here = join_path(path, &name);
            let merged = self.walk(dest.remove(&name), patch.remove(&name), below, &here)?;
            if let Some(value) = merged {
                dest.insert(name, value);
            }
        }
        Ok(Value::Object(dest))
    }

    /// A patch value with nothing under it in the target: its directives applied, its nulls
    /// dropped (kyaml merges it with itself).
    fn own(&self, mut patch: Value, at: Option<At<'t>>, path: &str) -> Result<Option<Value>, Problem> {
        let at = at.or_else(|| self.schema_of([Some(&patch), None]));
        match patch {
            Value::Object(_) => {
                if take_map_directive(&mut patch, path)? == Directive::Delete {
                    return Ok(None);
                }
                let Value::Object(map) = patch else { unreachable!("matched an object") };
                let mut kept = Map::new();
                for (name, value) in map {
                    let below = at.map(|at| at.field(self.table, &name));
                    if let Some(value) = self.own(value, below, &join_path(path, &name))? {
                        kept.insert(name, value);
                    }
                }
                Ok(Some(Value::Object(kept)))
            }
            Value::Array(_) => match at.and_then(|at| at.merge_keys()) {
                Some(_) => self.walk_list(None, Some(patch), at, path),
                None => Ok(Some(patch)),
            },
            Value::Null => Ok(None),
            scalar => Ok(Some(scalar)),
        }
    }

    fn walk_list(
        &self,
        dest: Option<Value>,
        patch: Option<Value>,
        at: Option<At<'t>>,
        path: &str,
    ) -> Result<Option<Value>, Problem> {
        let Some(keys) = at.and_then(|at| at.merge_keys()) else {
            return Ok(match patch {
                Some(Value::Null) => None,
                Some(patch) => Some(patch),
                None => dest,
            });
        };
        let elements = at.map(At::elements);
        // `alone`: the list is the patch's own (kyaml merges it with itself).
        let (dest, patch, alone) = match (dest, patch) {
            (Some(Value::Null) | None, None) => return Ok(None),
            (Some(Value::Null) | None, Some(mut patch)) => {
                // A list-wide directive in a list only the patch has is dropped.
                if let Some(items) = patch.as_array_mut() {
                    items.retain(|item| !item.as_object().is_some_and(|m| m.len() == 1 && m.contains_key(DIRECTIVE)));
                }
                (Value::Null, Some(patch), true)
            }
            (Some(_), Some(Value::Null)) => return Ok(None),
            (Some(dest), None) => (dest, None, false),
            (Some(dest), Some(mut patch)) => match take_list_directive(&mut patch, path)? {
                Directive::Delete => return Ok(None),
                Directive::Replace => (Value::Null, Some(patch), true),
                Directive::Merge => (dest, Some(patch), false),
            },
        };
        let empty = Vec::new();
        let dest_items = dest.as_array().unwrap_or(&empty);
        let patch_items = patch.as_ref().and_then(Value::as_array).unwrap_or(&empty);
        if keys.is_empty() {
            return self.merge_scalars(dest_items, patch_items, path).map(Some);
        }
        self.merge_by_keys(dest_items, patch_items, keys, elements, alone, path).map(|items| Some(Value::Array(items)))
    }

    /// Merges two lists element by element, matched by `keys`, as kustomize v5.5 does; refuses
    /// the inputs on which kustomize silently loses part of the patch. Elements are found by a
    /// hash of their key values, so the work is linear in the two lists.
    fn merge_by_keys(
        &self,
        dest: &[Value],
        patch: &[Value],
        keys: &[String],
        elements: Option<At<'t>>,
        alone: bool,
        path: &str,
    ) -> Result<Vec<Value>, Problem> {
        let (dest, patch) = (live(dest), live(patch));
        for (side, items) in [("patch", &patch), ("target", &dest)] {
            if let Some((i, _)) = items.iter().find(|(_, item)| !item.is_object()) {
                return Err(Problem::field(
                    format!("{path}[{i}]"),
                    format!(
                        "the {side}'s element is not a map; elements of this list are matched by `{}`",
                        keys.join("`, `")
                    ),
                ));
            }
        }
        // Only the keys some element has take part (kyaml's validateKeys).
        let valid: Vec<&String> = keys
            .iter()
            .filter(|k| patch.iter().chain(&dest).any(|(_, e)| !key_text(e.get(k.as_str())).is_empty()))
            .collect();
        let tuple = |item: &Value| -> Vec<String> { valid.iter().map(|k| key_text(item.get(k.as_str()))).collect() };
        let tuples = |side: &str, items: &[(usize, &Value)]| -> Result<Vec<Counted<Vec<String>>>, Problem> {
            let mut tuples = Vec::with_capacity(items.len());
            for (i, item) in items {
                let values = tuple(item);
                if values.is_empty() || values.iter().any(String::is_empty) {
                    let names = if valid.is_empty() { keys.iter().collect() } else { valid.clone() };
                    let names: Vec<&str> = names.iter().map(|k| k.as_str()).collect();
                    return Err(Problem::field(
                        format!("{path}[{i}]"),
                        format!(
                            "the {side}'s element lacks `{}`: elements of this list are matched by `{}` and kustomize v5.5 \
                             drops or misplaces an element that lacks one; give every element all of them",
                            names
                                .iter()
                                .filter(|k| key_text(item.get(**k)).is_empty())
                                .copied()
                                .collect::<Vec<_>>()
                                .join("`, `"),
                            names.join("`, `")
                        ),
                    ));
                }
                tuples.push(Counted(values));
            }
            Ok(tuples)
        };
        let (patch_tuples, dest_tuples) = (tuples("patch", &patch)?, tuples("target", &dest)?);
        let label = |values: &[String]| -> String {
            let pairs: Vec<String> = valid.iter().zip(values).map(|(k, v)| format!("{k}={v}")).collect();
            format!("{path}[{}]", pairs.join(","))
        };
        // Every distinct key tuple, in the order it first appears in the patch then the target.
        let mut ids: HashMap<&Counted<Vec<String>>, usize> = HashMap::with_capacity(patch.len() + dest.len());
        let mut found: Vec<Found<'_>> = Vec::new();
        let sides = [(false, &patch_tuples), (true, &dest_tuples)];
        for (in_dest, side) in sides {
            for (position, values) in side.iter().enumerate() {
                let id = *ids.entry(values).or_insert_with(|| {
                    found.push(Found { values: &values.0, ..Found::default() });
                    found.len() - 1
                });
                let slot = &mut found[id];
                if in_dest {
                    slot.dest_count += 1;
                    slot.first_dest.get_or_insert(position);
                    slot.last_dest = position;
                } else {
                    slot.patch_count += 1;
                    slot.first_patch.get_or_insert(position);
                }
            }
        }
        // The merge of each tuple, in that order; `None` when it is deleted.
        let mut merged: Vec<Option<Value>> = Vec::with_capacity(found.len());
        for f in &found {
            let values = f.values;
            let p = f.first_patch.map(|k| patch[k].1.clone());
            let d = if alone { None } else { f.first_dest.map(|k| dest[k].1.clone()) };
            if p.is_some() {
                if f.patch_count > 1 {
                    return Err(Problem::field(label(values), "the patch has more than one element with these keys"));
                }
                if f.dest_count > 1 {
                    return Err(Problem::field(
                        label(values),
                        "the target has more than one element with these keys; kustomize v5.5 keeps only the last, unpatched",
                    ));
                }
                if d.is_some() && p.as_ref().and_then(|p| p.get(DIRECTIVE)).and_then(Value::as_str) == Some("replace") {
                    return Err(Problem::field(
                        join_path(&label(values), DIRECTIVE),
                        "kustomize v5.5 ignores `$patch: replace` on an element the target has (it keeps the target's); \
                         set each field, null the ones to drop, or replace the element with a JSON patch",
                    ));
                }
            }
            merged.push(match self.walk(d, p, elements, &label(values))? {
                Some(value) if !value.is_null() && !value.as_object().is_some_and(Map::is_empty) => Some(value),
                _ => None,
            });
        }
        // kyaml then sets the target's elements back in: in place for one key, moved to the end
        // for several (so they end in the order of their last copy in the target); a duplicate in
        // the target ends as its last copy, unpatched.
        let mut order: Vec<usize> = (0..found.len()).filter(|&id| merged[id].is_some()).collect();
        if valid.len() > 1 {
            order.sort_by_key(|&id| match found[id].dest_count {
                0 => (false, id),
                _ => (true, found[id].last_dest),
            });
        }
        Ok(order
            .into_iter()
            .map(|id| {
                let f = &found[id];
                match f.dest_count {
                    0 | 1 => merged[id].take().expect("kept above"),
                    _ => dest[f.last_dest].1.clone(),
                }
            })
            .collect())
    }

    /// A list of scalars merged as a set: the patch's values first, then the target's others.
    fn merge_scalars(&self, dest: &[Value], patch: &[Value], path: &str) -> Result<Value, Problem> {
        let mut seen: HashSet<Counted<String>> = HashSet::with_capacity(dest.len() + patch.len());
        let mut merged = Vec::new();
        for (i, item) in patch.iter().chain(dest).enumerate() {
            if item.is_object() || item.is_array() {
                return Err(Problem::field(
                    format!("{path}[{i}]"),
                    "this list holds scalars; a map or list cannot be merged into it",
                ));
            }
            if item.is_null() {
                continue;
            }
            if seen.insert(Counted(key_text(Some(item)))) {
                merged.push(item.clone());
            }
        }
        Ok(Value::Array(merged))
    }
}

/// The elements of a list that take part in a keyed merge (kyaml skips nulls and empty maps),
/// with their positions.
fn live(items: &[Value]) -> Vec<(usize, &Value)> {
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| !item.is_null() && !item.as_object().is_some_and(Map::is_empty))
        .collect()
}

/// What a keyed merge knows of one distinct key tuple: how often and where (among the live
/// elements) the patch and the target have it.
#[derive(Clone, Copy, Debug, Default)]
struct Found<'a> {
    values: &'a [String],
    patch_count: usize,
    first_patch: Option<usize>,
    dest_count: usize,
    first_dest: Option<usize>,
    last_dest: usize,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{Just, Strategy, prop_oneof};
    use serde_json::json;

    use super::*;
    use crate::kustomize::comparisons::counted;

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:1"}]}}}})
    }

    fn merge(patch: Value) -> Result<Option<Value>, Problem> {
        apply(&deployment(), &patch, Allow::default(), MergeKeys::builtin())
    }

    #[test]
    fn a_patch_cannot_rename_move_or_rekind_its_target() {
        let merged = merge(json!({"kind": "DaemonSet", "metadata": {"name": "other", "namespace": "kube-system"}}))
            .unwrap()
            .unwrap();
        assert_eq!(merged["kind"], "Deployment");
        assert_eq!(merged["metadata"]["name"], "web");
        assert!(merged["metadata"].get("namespace").is_none(), "a patch gives its target no namespace: {merged}");
    }

    #[test]
    fn an_unknown_directive_is_located() {
        let problem = merge(json!({"spec": {"template": {"$patch": "explode"}}})).unwrap_err();
        assert_eq!(problem.field, "spec.template.$patch");
        assert!(problem.message.contains("expected `merge`, `replace` or `delete`"), "{problem}");
        let problem = merge(json!({"spec": {"template": {"$patch": 1}}})).unwrap_err();
        assert_eq!(problem.field, "spec.template.$patch");
    }

    #[test]
    fn unapplied_directives_are_refused_wherever_they_hide() {
        let problem =
            merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "$retainKeys": ["image"]}]}}}}))
                .unwrap_err();
        assert_eq!(problem.field, "spec.template.spec.containers[0].$retainKeys");
    }

    #[test]
    fn a_merge_key_that_is_a_map_is_refused_not_matched() {
        // kyaml compares keys as scalar text: a map would match every other map.
        let problem =
            merge(json!({"spec": {"template": {"spec": {"containers": [{"name": {"x": 1}, "image": "b"}]}}}}))
                .unwrap_err();
        assert!(problem.message.contains("lacks `name`"), "{problem}");
    }

    // === keyed lists: the indexed merge against the nested loops it replaced ===

    /// The list merge as it was before it was indexed (quadratic), kept as the reference the
    /// indexed one must agree with.
    fn merge_by_keys_before(
        merger: &Merger<'_>,
        dest: &[Value],
        patch: &[Value],
        keys: &[String],
        elements: Option<At<'_>>,
        alone: bool,
        path: &str,
    ) -> Result<Vec<Value>, Problem> {
        let live = |items: &'_ [Value]| -> Vec<(usize, Value)> {
            items
                .iter()
                .enumerate()
                .filter(|(_, item)| !item.is_null() && !item.as_object().is_some_and(Map::is_empty))
                .map(|(i, item)| (i, item.clone()))
                .collect()
        };
        let (dest, patch) = (live(dest), live(patch));
        for (side, items) in [("patch", &patch), ("target", &dest)] {
            if let Some((i, _)) = items.iter().find(|(_, item)| !item.is_object()) {
                return Err(Problem::field(
                    format!("{path}[{i}]"),
                    format!(
                        "the {side}'s element is not a map; elements of this list are matched by `{}`",
                        keys.join("`, `")
                    ),
                ));
            }
        }
        let valid: Vec<&String> = keys
            .iter()
            .filter(|k| patch.iter().chain(&dest).any(|(_, e)| !key_text(e.get(k.as_str())).is_empty()))
            .collect();
        let tuple = |item: &Value| -> Vec<String> { valid.iter().map(|k| key_text(item.get(k.as_str()))).collect() };
        for (side, items) in [("patch", &patch), ("target", &dest)] {
            for (i, item) in items {
                let values = tuple(item);
                if values.is_empty() || values.iter().any(String::is_empty) {
                    let names = if valid.is_empty() { keys.iter().collect() } else { valid.clone() };
                    let names: Vec<&str> = names.iter().map(|k| k.as_str()).collect();
                    return Err(Problem::field(
                        format!("{path}[{i}]"),
                        format!(
                            "the {side}'s element lacks `{}`: elements of this list are matched by `{}` and kustomize v5.5 \
                             drops or misplaces an element that lacks one; give every element all of them",
                            names
                                .iter()
                                .filter(|k| key_text(item.get(**k)).is_empty())
                                .copied()
                                .collect::<Vec<_>>()
                                .join("`, `"),
                            names.join("`, `")
                        ),
                    ));
                }
            }
        }
        let label = |values: &[String]| -> String {
            let pairs: Vec<String> = valid.iter().zip(values).map(|(k, v)| format!("{k}={v}")).collect();
            format!("{path}[{}]", pairs.join(","))
        };
        let mut tuples: Vec<Vec<String>> = Vec::new();
        for (_, item) in patch.iter().chain(&dest) {
            let values = tuple(item);
            if !tuples.contains(&values) {
                tuples.push(values);
            }
        }
        let count =
            |items: &[(usize, Value)], values: &[String]| items.iter().filter(|(_, e)| tuple(e) == values).count();
        let mut merged: Vec<(Vec<String>, Value)> = Vec::with_capacity(tuples.len());
        let mut deleted: Vec<Vec<String>> = Vec::new();
        for values in &tuples {
            let p = patch.iter().find(|(_, e)| tuple(e) == *values).map(|(_, e)| e.clone());
            let d = if alone { None } else { dest.iter().find(|(_, e)| tuple(e) == *values).map(|(_, e)| e.clone()) };
            if p.is_some() {
                if count(&patch, values) > 1 {
                    return Err(Problem::field(label(values), "the patch has more than one element with these keys"));
                }
                if count(&dest, values) > 1 {
                    return Err(Problem::field(
                        label(values),
                        "the target has more than one element with these keys; kustomize v5.5 keeps only the last, unpatched",
                    ));
                }
                if d.is_some() && p.as_ref().and_then(|p| p.get(DIRECTIVE)).and_then(Value::as_str) == Some("replace") {
                    return Err(Problem::field(
                        join_path(&label(values), DIRECTIVE),
                        "kustomize v5.5 ignores `$patch: replace` on an element the target has (it keeps the target's); \
                         set each field, null the ones to drop, or replace the element with a JSON patch",
                    ));
                }
            }
            match merger.walk(d, p, elements, &label(values))? {
                Some(value) if !value.is_null() && !value.as_object().is_some_and(Map::is_empty) => {
                    merged.push((values.clone(), value));
                }
                _ => deleted.push(values.clone()),
            }
        }
        let mut seen: Vec<Vec<String>> = Vec::new();
        for (_, item) in &dest {
            let values = tuple(item);
            if deleted.contains(&values) {
                continue;
            }
            let value = if seen.contains(&values) {
                item.clone()
            } else {
                seen.push(values.clone());
                match merged.iter().find(|(v, _)| *v == values) {
                    Some((_, value)) => value.clone(),
                    None => item.clone(),
                }
            };
            if valid.len() > 1 {
                merged.retain(|(v, _)| *v != values);
                merged.push((values, value));
            } else {
                match merged.iter_mut().find(|(v, _)| *v == values) {
                    Some(slot) => slot.1 = value,
                    None => merged.push((values, value)),
                }
            }
        }
        Ok(merged.into_iter().map(|(_, value)| value).collect())
    }

    /// The scalar set merge as it was before it was indexed.
    fn merge_scalars_before(dest: &[Value], patch: &[Value], path: &str) -> Result<Value, Problem> {
        let mut seen: Vec<String> = Vec::new();
        let mut merged = Vec::new();
        for (i, item) in patch.iter().chain(dest).enumerate() {
            if item.is_object() || item.is_array() {
                return Err(Problem::field(
                    format!("{path}[{i}]"),
                    "this list holds scalars; a map or list cannot be merged into it",
                ));
            }
            if item.is_null() {
                continue;
            }
            let text = key_text(Some(item));
            if !seen.contains(&text) {
                seen.push(text);
                merged.push(item.clone());
            }
        }
        Ok(Value::Array(merged))
    }

    /// The schema of a container's `env` (merged by `name`) or `ports` (by `containerPort` and
    /// `protocol`), as the table has it.
    fn container_list(field: &str) -> At<'static> {
        let table = MergeKeys::builtin();
        let pod = table.root("v1", "Pod").expect("a known kind");
        pod.field(table, "spec").field(table, "containers").elements().field(table, field)
    }

    /// Merges with both implementations and says what each gave.
    fn both(field: &str, dest: &[Value], patch: &[Value], alone: bool) -> [Result<Vec<Value>, Problem>; 2] {
        let at = container_list(field);
        let keys = at.merge_keys().expect("a keyed list");
        let merger = Merger { table: MergeKeys::builtin() };
        [
            merger.merge_by_keys(dest, patch, keys, Some(at.elements()), alone, field),
            merge_by_keys_before(&merger, dest, patch, keys, Some(at.elements()), alone, field),
        ]
    }

    fn env(name: &str, value: &str) -> Value {
        json!({"name": name, "value": value})
    }

    #[test]
    fn a_duplicate_in_the_target_ends_as_its_last_copy_in_place_for_one_key() {
        let dest = [env("a", "1"), env("b", "1"), env("a", "2"), env("c", "1")];
        let patch = [env("c", "patched"), env("d", "new")];
        let [indexed, before] = both("env", &dest, &patch, false);
        assert_eq!(indexed, before);
        assert_eq!(
            indexed.unwrap(),
            [env("c", "patched"), env("d", "new"), env("a", "2"), env("b", "1")],
            "the patch's elements first, then the target's others in place; `a` is its last copy"
        );
    }

    #[test]
    fn with_several_keys_the_targets_elements_move_to_the_end_in_the_order_of_their_last_copy() {
        let port = |n: u16, name: &str| json!({"containerPort": n, "protocol": "TCP", "name": name});
        let dest = [port(80, "a"), port(81, "b"), port(80, "c"), port(82, "d")];
        let patch = [port(82, "patched"), port(90, "new")];
        let [indexed, before] = both("ports", &dest, &patch, false);
        assert_eq!(indexed, before);
        assert_eq!(indexed.unwrap(), [port(90, "new"), port(81, "b"), port(80, "c"), port(82, "patched")]);
    }

    #[test]
    fn duplicate_keys_and_replacements_are_refused_alike() {
        for (dest, patch) in [
            (vec![env("a", "1")], vec![env("a", "2"), env("a", "3")]),
            (vec![env("a", "1"), env("a", "2")], vec![env("a", "3")]),
            (vec![env("a", "1")], vec![json!({"name": "a", "$patch": "replace"})]),
            (vec![env("a", "1")], vec![json!({"value": "no name"})]),
            (vec![json!("a scalar")], vec![env("a", "1")]),
        ] {
            let [indexed, before] = both("env", &dest, &patch, false);
            assert!(indexed.is_err(), "{dest:?} {patch:?}");
            assert_eq!(indexed, before);
        }
    }

    /// A list element of the generated cases: mostly keyed maps (few keys, so that they collide),
    /// sometimes a directive, a null, an empty map or an element without its keys.
    fn element(ports: bool) -> impl Strategy<Value = Value> {
        let keyed = (0..4u8, 0..3u8, 0..6u8).prop_map(move |(key, value, shape)| {
            let mut element = if ports {
                let mut port = json!({"containerPort": 80 + u16::from(key)});
                if key % 2 == 0 {
                    port["protocol"] = json!(if value == 0 { "UDP" } else { "TCP" });
                }
                port
            } else {
                json!({"name": format!("k{key}")})
            };
            match shape {
                0 => element["$patch"] = json!("delete"),
                1 => element["$patch"] = json!("replace"),
                2 => element["value"] = Value::Null,
                _ => element["value"] = json!(format!("v{value}")),
            }
            element
        });
        prop_oneof![
            12 => keyed,
            1 => Just(Value::Null),
            1 => Just(json!({})),
            1 => Just(json!({"value": "keyless"})),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn the_indexed_keyed_merge_gives_what_the_nested_loops_gave(
            ports in proptest::bool::ANY,
            dest in proptest::collection::vec(element(false), 0..8),
            patch in proptest::collection::vec(element(false), 0..8),
            dest_ports in proptest::collection::vec(element(true), 0..8),
            patch_ports in proptest::collection::vec(element(true), 0..8),
            alone in proptest::bool::ANY,
        ) {
            let (field, dest, patch) = if ports { ("ports", dest_ports, patch_ports) } else { ("env", dest, patch) };
            let [indexed, before] = both(field, &dest, &patch, alone);
            proptest::prop_assert_eq!(indexed, before);
        }

        #[test]
        fn the_hashed_scalar_set_merge_gives_what_the_nested_loops_gave(
            dest in proptest::collection::vec(scalar(), 0..10),
            patch in proptest::collection::vec(scalar(), 0..10),
        ) {
            let merger = Merger { table: MergeKeys::builtin() };
            proptest::prop_assert_eq!(
                merger.merge_scalars(&dest, &patch, "finalizers"),
                merge_scalars_before(&dest, &patch, "finalizers")
            );
        }
    }

    /// A scalar (or, rarely, a map) of a list merged as a set; `1` and `"1"` are the same text.
    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            8 => (0..5u8).prop_map(|n| json!(format!("{n}"))),
            2 => (0..5u8).prop_map(|n| json!(n)),
            1 => Just(Value::Null),
            1 => Just(json!(true)),
            1 => Just(json!({"a": 1})),
        ]
    }

    #[test]
    fn attacker_five_thousand_env_entries_patched_into_five_thousand_take_linear_work() {
        // The review's case (79 s before): every lookup was a scan of the other list.
        let n = 5_000;
        let dest: Vec<Value> = (0..n).map(|i| env(&format!("E{i}"), "old")).collect();
        let patch: Vec<Value> = (n / 2..n + n / 2).map(|i| env(&format!("E{i}"), "new")).collect();
        let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a:1", "env": dest}]}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "env": patch}]}}}});
        let (merged, work) =
            counted(|| apply(&target, &patch, Allow::default(), MergeKeys::builtin()).unwrap().unwrap());
        let env = merged.pointer("/spec/template/spec/containers/0/env").and_then(Value::as_array).unwrap();
        assert_eq!(env.len(), n + n / 2);
        assert_eq!(env[0], json!({"name": format!("E{}", n / 2), "value": "new"}), "the patch's order first");
        assert_eq!(env[n], json!({"name": "E0", "value": "old"}), "then the target's others");
        // A hash and a comparison or so per element of either list; the nested loops made n * n.
        assert!(work <= 2 * (n + n), "{work} comparisons for {n} into {n}");
    }

    #[test]
    fn attacker_a_large_scalar_set_merge_takes_linear_work() {
        let n = 20_000;
        let dest: Vec<Value> = (0..n).map(|i| json!(format!("f{i}"))).collect();
        let patch: Vec<Value> = (n / 2..n + n / 2).map(|i| json!(format!("f{i}"))).collect();
        let merger = Merger { table: MergeKeys::builtin() };
        let (merged, work) = counted(|| merger.merge_scalars(&dest, &patch, "finalizers").unwrap());
        assert_eq!(merged.as_array().map(Vec::len), Some(n + n / 2));
        assert!(work <= 2 * (n + n), "{work} comparisons for {n} and {n}");
    }

    #[test]
    fn a_deeply_nested_patch_is_merged_without_exhausting_the_stack() {
        // The YAML and JSON parsers bound nesting; the walk itself recurses once per level.
        let mut patch = json!("leaf");
        for _ in 0..120 {
            patch = json!({ "x": patch });
        }
        let merged = merge(json!({"spec": {"deep": patch}})).unwrap().unwrap();
        assert!(merged.pointer(&format!("/spec/deep{}", "/x".repeat(120))).is_some());
    }
}
