//! `configMapGenerator`, `secretGenerator` and `generatorOptions`, and kustomize's content hash.
//!
//! Each generator entry becomes one ConfigMap or Secret exactly as kustomize v5.5 makes it
//! (`api/internal/generators`, `api/kv`), from `envs` then `literals` then `files`, read only
//! through [`Files`] from the kustomization's own directory or below it. Where kustomize is
//! silently lossy (an env line without `=`, a merge that drops fields of the existing object, an
//! unknown `behavior`) the entry is refused with a problem naming it (docs/kustomize.md,
//! "Generators"). No message ever holds a value: a Secret's data stays out of errors.

mod hash;
mod sources;

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

pub use self::hash::content_hash;
use self::sources::{encode_base64, invalid_key, parse_env, parse_file_source, parse_literal, read_file, resolve};
use super::comparisons::Counted;
use super::files::Files;
use super::resource::{Origin, Resource};
use crate::problem::{Problem, Problems};

/// The most a generated object may hold: keys and values of `data` and `binaryData` (before
/// base64), Kubernetes' limit for a ConfigMap or a Secret. Every file read is bounded by it too.
pub(crate) const MAX_GENERATED_BYTES: usize = 1024 * 1024;

/// What a generator entry does with an object of the same name from the resources or a base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// A new object (the default); one of the same name already there is an error.
    Create,
    /// Merged into the existing one.
    Merge,
    /// Replaces the existing one.
    Replace,
}

/// One object made by a generator entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// The ConfigMap or Secret, named as written (no hash yet).
    pub object: Value,
    /// What it does with an existing object of the same name.
    pub behavior: Behavior,
    /// Whether the content hash suffix is to be appended.
    pub needs_hash: bool,
    /// The entry, such as `configMapGenerator[1]`.
    pub field: String,
}

impl Generated {
    /// The generated object as a resource of the build, made by the entry of `kustomization_file`.
    pub fn into_resource(self, kustomization_file: &str) -> Resource {
        let mut resource = Resource::from_document(
            self.object,
            Origin::Generator { file: kustomization_file.to_owned(), field: self.field },
        );
        resource.needs_hash = self.needs_hash;
        resource.generated = true;
        resource
    }

    fn kind(&self) -> &str {
        self.object.get("kind").and_then(Value::as_str).unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
    }

    fn namespace(&self) -> Option<&str> {
        self.object.pointer("/metadata/namespace").and_then(Value::as_str)
    }
}

/// Runs the generators of the kustomization at `kustomization_file` (relative to the root of
/// `files`; its directory is where generator files are read from): every `configMapGenerator`
/// entry, then every `secretGenerator` entry, in order, as kustomize runs them. The problems are
/// located in `kustomization_file` and name the entry and source (`secretGenerator[0].files[1]`).
pub fn generate(
    kustomization: &Value,
    kustomization_file: &str,
    files: &dyn Files,
) -> Result<Vec<Generated>, Vec<Problem>> {
    let dir = kustomization_file.rsplit_once('/').map(|(dir, _)| dir).unwrap_or_default();
    let mut problems = Problems::default();
    let global = match kustomization.get("generatorOptions") {
        None | Some(Value::Null) => Options::default(),
        Some(value) => Options::read(value, "generatorOptions", &mut problems),
    };
    let mut generated = Vec::new();
    for kind in [GeneratedKind::ConfigMap, GeneratedKind::Secret] {
        let list = kind.list_field();
        match kustomization.get(list) {
            None | Some(Value::Null) => {}
            Some(Value::Array(entries)) => {
                for (i, entry) in entries.iter().enumerate() {
                    let field = format!("{list}[{i}]");
                    let context = Context { dir, files, kind, field: &field };
                    if let Some(made) = context.entry(entry, &global, &mut problems) {
                        generated.push(made);
                    }
                }
            }
            Some(_) => problems.push(list, "must be a list of generator entries (`- name: ...`)"),
        }
    }
    let problems: Vec<Problem> =
        problems.into_vec().into_iter().map(|p| p.located(kustomization_file, None, None)).collect();
    if problems.is_empty() { Ok(generated) } else { Err(problems) }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GeneratedKind {
    ConfigMap,
    Secret,
}

impl GeneratedKind {
    fn list_field(self) -> &'static str {
        match self {
            GeneratedKind::ConfigMap => "configMapGenerator",
            GeneratedKind::Secret => "secretGenerator",
        }
    }

    fn name(self) -> &'static str {
        match self {
            GeneratedKind::ConfigMap => "ConfigMap",
            GeneratedKind::Secret => "Secret",
        }
    }

    fn fields(self) -> &'static [&'static str] {
        match self {
            GeneratedKind::ConfigMap => {
                &["name", "namespace", "behavior", "literals", "files", "envs", "env", "options"]
            }
            GeneratedKind::Secret => {
                &["name", "namespace", "behavior", "literals", "files", "envs", "env", "options", "type"]
            }
        }
    }
}

/// `generatorOptions`, or an entry's `options`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Options {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    disable_name_suffix_hash: bool,
    immutable: bool,
}

impl Options {
    fn read(value: &Value, field: &str, problems: &mut Problems) -> Options {
        let mut options = Options::default();
        let Some(map) = value.as_object() else {
            problems.push(field, "must be a map of `labels`, `annotations`, `disableNameSuffixHash`, `immutable`");
            return options;
        };
        for (key, value) in map {
            let here = format!("{field}.{key}");
            match key.as_str() {
                "labels" => options.labels = string_map(value, &here, problems),
                "annotations" => options.annotations = string_map(value, &here, problems),
                "disableNameSuffixHash" => options.disable_name_suffix_hash = boolean(value, &here, problems),
                "immutable" => options.immutable = boolean(value, &here, problems),
                _ => problems.push(
                    here,
                    "unknown field; generator options are `labels`, `annotations`, `disableNameSuffixHash`, `immutable`",
                ),
            }
        }
        options
    }

    /// kustomize's `MergeGlobalOptionsIntoLocal`: the entry's labels and annotations win over
    /// the global ones; either `true` turns `disableNameSuffixHash` or `immutable` on.
    fn with_global(mut self, global: &Options) -> Options {
        for (k, v) in &global.labels {
            self.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in &global.annotations {
            self.annotations.entry(k.clone()).or_insert_with(|| v.clone());
        }
        self.disable_name_suffix_hash |= global.disable_name_suffix_hash;
        self.immutable |= global.immutable;
        self
    }
}

fn string_map(value: &Value, field: &str, problems: &mut Problems) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    match value {
        Value::Null => {}
        Value::Object(map) => {
            for (k, v) in map {
                match v.as_str() {
                    Some(s) => {
                        out.insert(k.clone(), s.to_owned());
                    }
                    None => problems.push(format!("{field}.{k}"), "must be a string; quote it"),
                }
            }
        }
        _ => problems.push(field, "must be a map of strings"),
    }
    out
}

fn boolean(value: &Value, field: &str, problems: &mut Problems) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::Null => false,
        _ => {
            problems.push(field, "must be `true` or `false`");
            false
        }
    }
}

fn optional_string<'v>(entry: &'v Map<String, Value>, key: &str, field: &str, problems: &mut Problems) -> &'v str {
    match entry.get(key) {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s,
        Some(_) => {
            problems.push(format!("{field}.{key}"), "must be a string");
            ""
        }
    }
}

fn string_list<'v>(value: Option<&'v Value>, field: &str, problems: &mut Problems) -> Vec<(String, &'v str)> {
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match item.as_str() {
                Some(s) => Some((format!("{field}[{i}]"), s)),
                None => {
                    problems.push(format!("{field}[{i}]"), "must be a string; quote it");
                    None
                }
            })
            .collect(),
        Some(_) => {
            problems.push(field, "must be a list of strings");
            Vec::new()
        }
    }
}

/// One key and value of a generated object, and the source it came from.
struct Pair {
    key: String,
    value: Vec<u8>,
    source: String,
}

struct Context<'a> {
    dir: &'a str,
    files: &'a dyn Files,
    kind: GeneratedKind,
    field: &'a str,
}

impl Context<'_> {
    fn entry(&self, entry: &Value, global: &Options, all: &mut Problems) -> Option<Generated> {
        let field = self.field;
        let Some(map) = entry.as_object() else {
            all.push(field, "must be a map (`name`, `literals`, `files`, `envs`, ...)");
            return None;
        };
        let problems = &mut Problems::default();
        for key in map.keys() {
            if !self.kind.fields().contains(&key.as_str()) {
                problems.push(
                    format!("{field}.{key}"),
                    format!(
                        "unknown field; a {} entry takes {}",
                        self.kind.list_field(),
                        self.kind.fields().join(", ")
                    ),
                );
            }
        }
        let name = optional_string(map, "name", field, problems);
        if matches!(map.get("name"), None | Some(Value::Null)) || name.is_empty() && map["name"].is_string() {
            problems.push(format!("{field}.name"), format!("a generated {} needs a name", self.kind.name()));
        }
        let namespace = optional_string(map, "namespace", field, problems);
        let behavior = match optional_string(map, "behavior", field, problems) {
            "" | "create" => Behavior::Create,
            "merge" => Behavior::Merge,
            "replace" => Behavior::Replace,
            _ => {
                // kustomize reads an unknown behavior as `create`
                problems.push(format!("{field}.behavior"), "must be `create`, `merge` or `replace`");
                Behavior::Create
            }
        };
        let secret_type = optional_string(map, "type", field, problems);
        let local = match map.get("options") {
            None | Some(Value::Null) => Options::default(),
            Some(value) => Options::read(value, &format!("{field}.options"), problems),
        };
        let options = local.with_global(global);

        let pairs = self.pairs(map, problems);
        if !problems.is_empty() {
            all.extend_under("", std::mem::take(problems).into_vec());
            return None;
        }
        let object = self.object(name, namespace, secret_type, &pairs, &options);
        Some(Generated { object, behavior, needs_hash: !options.disable_name_suffix_hash, field: field.to_owned() })
    }

    /// The entry's keys and values: `envs` (then the older `env`), `literals`, `files`, in
    /// kustomize's order, checked for valid, unique keys and for the size limit.
    fn pairs(&self, map: &Map<String, Value>, problems: &mut Problems) -> Vec<Pair> {
        let field = self.field;
        let secret = self.kind == GeneratedKind::Secret;
        let mut pairs = Vec::new();
        let mut envs = string_list(map.get("envs"), &format!("{field}.envs"), problems);
        match map.get("env") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => envs.push((format!("{field}.env"), s)),
            Some(_) => problems.push(format!("{field}.env"), "must be a string (a file name)"),
        }
        for (source, path) in envs {
            let content = resolve(self.dir, path).and_then(|p| read_file(self.files, &p, MAX_GENERATED_BYTES));
            match content.and_then(|c| parse_env(&c)) {
                Ok(lines) => pairs.extend(lines.into_iter().map(|l| Pair {
                    key: l.key,
                    value: l.value.into_bytes(),
                    source: format!("{source} line {}", l.line),
                })),
                Err(message) => problems.push(source, message),
            }
        }
        for (source, literal) in string_list(map.get("literals"), &format!("{field}.literals"), problems) {
            match parse_literal(literal) {
                Ok((key, value)) => pairs.push(Pair { key, value: value.into_bytes(), source }),
                Err(message) => problems.push(source, message),
            }
        }
        for (source, text) in string_list(map.get("files"), &format!("{field}.files"), problems) {
            let read = parse_file_source(text).and_then(|(key, path)| {
                let content = resolve(self.dir, path).and_then(|p| read_file(self.files, &p, MAX_GENERATED_BYTES))?;
                Ok((key, content))
            });
            match read {
                Ok((key, value)) => pairs.push(Pair { key, value, source }),
                Err(message) => problems.push(source, message),
            }
        }

        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        let mut size = 0usize;
        for pair in &pairs {
            size = size.saturating_add(pair.key.len() + pair.value.len());
            if let Some(why) = invalid_key(&pair.key) {
                // a Secret's key stays out of the message: it may be a pasted value
                let shown = if secret { "the key".to_owned() } else { format!("the key `{}`", pair.key) };
                problems.push(
                    pair.source.clone(),
                    format!("{shown} {why} (a ConfigMap or Secret key: letters, digits, `-`, `_`, `.`)"),
                );
            } else if let Some(first) = seen.insert(&pair.key, &pair.source) {
                problems.push(
                    pair.source.clone(),
                    format!("the key `{}` is already given by {first}; each key may appear once per entry", pair.key),
                );
            }
        }
        if size > MAX_GENERATED_BYTES {
            problems.push(
                field,
                format!(
                    "the generated {} would hold {size} bytes, more than Kubernetes' limit of {MAX_GENERATED_BYTES}",
                    self.kind.name()
                ),
            );
        }
        pairs
    }

    /// The object kustomize makes: `apiVersion`, `kind`, `metadata` (name, namespace, the
    /// options' labels and annotations), `data` (and a ConfigMap's `binaryData` for values that
    /// are not UTF-8; a Secret's values all in base64), a Secret's `type`, and `immutable`.
    fn object(&self, name: &str, namespace: &str, secret_type: &str, pairs: &[Pair], options: &Options) -> Value {
        let mut metadata = Map::new();
        metadata.insert("name".into(), name.into());
        if !namespace.is_empty() {
            metadata.insert("namespace".into(), namespace.into());
        }
        if !options.labels.is_empty() {
            metadata.insert("labels".into(), string_object(&options.labels));
        }
        if !options.annotations.is_empty() {
            metadata.insert("annotations".into(), string_object(&options.annotations));
        }
        let mut object = Map::new();
        object.insert("apiVersion".into(), "v1".into());
        object.insert("kind".into(), self.kind.name().into());
        object.insert("metadata".into(), Value::Object(metadata));
        let mut data = Map::new();
        let mut binary = Map::new();
        for pair in pairs {
            match self.kind {
                GeneratedKind::Secret => {
                    data.insert(pair.key.clone(), encode_base64(&pair.value).into());
                }
                GeneratedKind::ConfigMap => match std::str::from_utf8(&pair.value) {
                    Ok(text) => {
                        data.insert(pair.key.clone(), text.into());
                    }
                    Err(_) => {
                        binary.insert(pair.key.clone(), encode_base64(&pair.value).into());
                    }
                },
            }
        }
        // a Secret always has `data` (kustomize creates the map first); a ConfigMap only when
        // some value is text
        if self.kind == GeneratedKind::Secret || !data.is_empty() {
            object.insert("data".into(), Value::Object(data));
        }
        if !binary.is_empty() {
            object.insert("binaryData".into(), Value::Object(binary));
        }
        if self.kind == GeneratedKind::Secret {
            let secret_type = if secret_type.is_empty() { "Opaque" } else { secret_type };
            object.insert("type".into(), secret_type.into());
        }
        if options.immutable {
            object.insert("immutable".into(), true.into());
        }
        Value::Object(object)
    }
}

fn string_object(map: &BTreeMap<String, String>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect())
}

/// Adds `generated` to `resources` as kustomize's resource map absorbs a generator's output:
/// appended when it creates, merged into or replacing the one object of the same kind whose
/// current or earlier name and namespace are the entry's (no namespace means `default`).
/// Problems name the entry and are located in `kustomization_file`.
pub fn absorb(resources: &mut Vec<Resource>, generated: Generated, kustomization_file: &str) -> Result<(), Problem> {
    absorb_all(resources, vec![generated], kustomization_file)
}

/// [`absorb`] for every object of a kustomization's generators, in order (each sees what the
/// ones before it added), stopping at the first problem. The objects they may merge into are
/// found through an index by kind, name and namespace built once, so many entries over many
/// objects stay linear.
pub(crate) fn absorb_all(
    resources: &mut Vec<Resource>,
    generated: Vec<Generated>,
    kustomization_file: &str,
) -> Result<(), Problem> {
    let mut index = Answering::new(resources);
    for made in generated {
        absorb_one(resources, &mut index, made, kustomization_file)?;
    }
    Ok(())
}

/// The effective namespace of a generator's match: none, or empty, is `default`.
fn effective(namespace: Option<&str>) -> &str {
    match namespace {
        None | Some("") => "default",
        Some(namespace) => namespace,
    }
}

/// The `v1` objects of a build by kind, name and effective namespace, now or before a rename: the
/// objects a generator entry of that kind, name and namespace merges into or replaces.
struct Answering(HashMap<Counted<(String, String, String)>, Vec<usize>>);

impl Answering {
    fn new(resources: &[Resource]) -> Self {
        let mut index = Answering(HashMap::with_capacity(resources.len()));
        for (position, resource) in resources.iter().enumerate() {
            if resource.object.get("apiVersion").and_then(Value::as_str) != Some("v1") {
                continue;
            }
            let namespace = resource.object.pointer("/metadata/namespace").and_then(Value::as_str);
            index.add(resource.kind(), resource.name(), namespace, position);
            for previous in &resource.previous {
                index.add(resource.kind(), &previous.name, previous.namespace.as_deref(), position);
            }
        }
        index
    }

    fn add(&mut self, kind: &str, name: &str, namespace: Option<&str>, position: usize) {
        let key = Counted((kind.to_owned(), name.to_owned(), effective(namespace).to_owned()));
        let positions = self.0.entry(key).or_default();
        // An object answers once, whichever of its ids matched.
        if positions.last() != Some(&position) {
            positions.push(position);
        }
    }

    fn get(&self, kind: &str, name: &str, namespace: &str) -> &[usize] {
        self.0.get(&Counted((kind.to_owned(), name.to_owned(), namespace.to_owned()))).map_or(&[], Vec::as_slice)
    }
}

fn absorb_one(
    resources: &mut Vec<Resource>,
    index: &mut Answering,
    generated: Generated,
    kustomization_file: &str,
) -> Result<(), Problem> {
    let (kind, name, namespace) =
        (generated.kind().to_owned(), generated.name().to_owned(), effective(generated.namespace()).to_owned());
    let matches = index.get(&kind, &name, &namespace);
    let located = |p: Problem| p.located(kustomization_file, None, None);
    match (matches, generated.behavior) {
        ([], Behavior::Create) => {
            // A merge or replacement keeps the object's kind, name and namespace: only a new
            // object changes the index.
            index.add(&kind, &name, Some(&namespace), resources.len());
            resources.push(generated.into_resource(kustomization_file));
            Ok(())
        }
        ([], behavior) => Err(located(Problem::field(
            format!("{}.behavior", generated.field),
            format!(
                "there is no {kind} `{name}` in namespace `{namespace}` to {}: declare or generate it in a base, or \
                 drop `behavior`",
                if behavior == Behavior::Merge { "merge into" } else { "replace" }
            ),
        ))),
        (&[one], _) => {
            let field = generated.field.clone();
            combine(&mut resources[one], generated).map_err(|p| located(p.under(&field)))
        }
        (several, _) => Err(located(Problem::field(
            generated.field.clone(),
            format!("{} objects answer to {kind} `{name}` in namespace `{namespace}`; rename one", several.len()),
        ))),
    }
}

/// Merges `generated` into, or replaces, `existing` as its behavior says (kustomize's
/// `appendReplaceOrMerge`). Both keep the existing object's name, namespace, earlier names and
/// place, merge its labels and annotations under the generated ones, and append the hash only when
/// both the existing object and the entry want it. `merge` also keeps the existing `data` and
/// `binaryData` keys the entry does not set, and is refused when it would silently drop another
/// field of the existing object (kustomize keeps nothing else). `create` is an error: the name is
/// taken. The problem's field is relative to the entry (`behavior`, or `""` for the entry itself):
/// the caller puts it under the entry ([`Problem::under`] with [`Generated::field`]) and locates
/// it in the kustomization file.
pub(crate) fn combine(existing: &mut Resource, generated: Generated) -> Result<(), Problem> {
    let field = "behavior";
    let (kind, name) = (generated.kind().to_owned(), existing.name().to_owned());
    if existing.kind() != kind {
        return Err(Problem::field("", format!("`{name}` is a {}, not a {kind}", existing.kind())));
    }
    if generated.behavior == Behavior::Create {
        return Err(Problem::field(
            field,
            format!(
                "a {kind} named `{name}` already exists; set `behavior: merge` or `behavior: replace` to change it, or \
                 choose another name"
            ),
        ));
    }
    let mut object = generated.object;
    if generated.behavior == Behavior::Merge {
        check_merge_keeps_everything(&existing.object, &object).map_err(|m| Problem::field(field, m))?;
        for map in ["data", "binaryData"] {
            let mut merged = string_entries(existing.object.get(map));
            merged.extend(string_entries(object.get(map)));
            set_or_clear(&mut object, map, merged);
        }
        let data = string_entries(object.get("data"));
        if let Some(key) = string_entries(object.get("binaryData")).keys().find(|k| data.contains_key(*k)) {
            return Err(Problem::field(
                "",
                format!("the key `{key}` would be both in `data` and in `binaryData`; a key may be in one only"),
            ));
        }
    }
    for map in ["labels", "annotations"] {
        let mut merged = string_entries(existing.object.pointer(&format!("/metadata/{map}")));
        merged.extend(string_entries(object.pointer(&format!("/metadata/{map}"))));
        if let Some(metadata) = object.get_mut("metadata") {
            set_or_clear(metadata, map, merged);
        }
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("name".into(), name.into());
        match existing.object.pointer("/metadata/namespace") {
            Some(ns) => metadata.insert("namespace".into(), ns.clone()),
            None => metadata.remove("namespace"),
        };
    }
    existing.object = object;
    existing.needs_hash = existing.needs_hash && generated.needs_hash;
    existing.generated = true;
    Ok(())
}

/// The string entries of a map field (non-strings were refused before a merge).
fn string_entries(value: Option<&Value>) -> BTreeMap<String, Value> {
    value
        .and_then(Value::as_object)
        .map(|m| m.iter().filter(|(_, v)| v.is_string()).map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// Sets `field` of `object` to `entries`, or removes it when there are none (kyaml's `SetDataMap`).
fn set_or_clear(object: &mut Value, field: &str, entries: BTreeMap<String, Value>) {
    if let Some(map) = object.as_object_mut() {
        if entries.is_empty() {
            map.remove(field);
        } else {
            map.insert(field.into(), Value::Object(entries.into_iter().collect()));
        }
    }
}

/// Refuses a merge that kustomize would make lossy: it keeps of the existing object only its
/// name, namespace, labels, annotations, `data` and `binaryData`.
fn check_merge_keeps_everything(existing: &Value, generated: &Value) -> Result<(), String> {
    let drops = |what: &str, instead: &str| {
        Err(format!(
            "merging would drop the existing object's `{what}` (kustomize keeps only its name, namespace, labels, \
             annotations, data and binaryData); {instead}"
        ))
    };
    for (key, value) in existing.as_object().into_iter().flatten() {
        match key.as_str() {
            "apiVersion" | "kind" | "metadata" => {}
            "data" | "binaryData" => {
                for (k, v) in value.as_object().into_iter().flatten() {
                    if !v.is_string() {
                        return Err(format!("the existing object's `{key}.{k}` is not a string; quote it"));
                    }
                }
            }
            "type" if generated.get("type") == Some(value) => {}
            "type" => return drops("type", "give the generator the same `type`, or use `behavior: replace`"),
            "immutable" if generated.get("immutable").unwrap_or(&Value::Bool(false)) == value => {}
            "immutable" => return drops("immutable", "set `options.immutable` alike, or use `behavior: replace`"),
            other => return drops(other, "move it into the generator, or use `behavior: replace`"),
        }
    }
    for key in existing.get("metadata").and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k) {
        if !matches!(key.as_str(), "name" | "namespace" | "labels" | "annotations") {
            return drops(&format!("metadata.{key}"), "use `behavior: replace`, or drop it from the existing object");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
