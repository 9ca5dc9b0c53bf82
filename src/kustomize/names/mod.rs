//! Names and namespaces: `namespace`, `namePrefix`/`nameSuffix`, the content hash suffix, and
//! the name references kustomize updates after them, as kustomize v5.5 does them.
//!
//! Every rename remembers the name and namespace before it in [`Resource::previous`] (kustomize's
//! `previousNames`/`previousNamespaces` annotations), and prefixes and suffixes in
//! [`Resource::prefixes`]/[`Resource::suffixes`]: once the whole build is done,
//! [`fix_references`] finds, for every name written in a referring field (the table of
//! [`references`]), the object that was once called so.

pub(crate) mod references;
pub(crate) mod scope;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::comparisons::{self, Counted};
use super::generator;
use super::resource::Resource;
use crate::problem::{Problem, join_path};
use references::{Gvk, default_name_references};

// === namespace ===

/// kustomize's namespace transformer: every namespaced object into `namespace` (an empty
/// `namespace` changes nothing).
///
/// As kustomize v5.5 (with its default field specs and `setRoleBindingSubjects: defaultOnly`):
/// `metadata.namespace` of every object but the kinds it knows to be cluster-scoped
/// ([`scope::is_cluster_scoped`]); `metadata.name` of a `v1` Namespace; `spec.service.namespace`
/// of an APIService (created); `spec.conversion.webhook.clientConfig.service.namespace` of a
/// CustomResourceDefinition (when present); and `namespace` of the RoleBinding and
/// ClusterRoleBinding subjects **named `default`** (whatever their kind; the others are reached
/// by [`fix_references`] when they name a ServiceAccount of the build).
///
/// Refused: an object of a kind the API server knows to be cluster-scoped but kustomize does not
/// (kustomize would give it a namespace), and two objects that end up with the same kind, name and
/// namespace (kustomize refuses this too).
pub(crate) fn set_namespace(resources: &mut [Resource], namespace: &str) -> Result<(), Problem> {
    if namespace.is_empty() {
        return Ok(());
    }
    for resource in resources.iter_mut() {
        let (api_version, kind) = (resource.api_version().to_owned(), resource.kind().to_owned());
        if scope::unknown_to_kustomize(&api_version, &kind) {
            return Err(Problem::field(
                "namespace",
                format!(
                    "{} is cluster-scoped, but kustomize v5.5 does not know it and would give it namespace \
                     `{namespace}`; a cluster-scoped object cannot be part of a tenant's kustomization",
                    resource.describe()
                ),
            ));
        }
        resource.remember_id();
        let group = resource.group().to_owned();
        let object = &mut resource.object;
        if !scope::is_cluster_scoped(&api_version, &kind) {
            set_creating(object, &["metadata", "namespace"], namespace);
        }
        if kind == "Namespace" && api_version == "v1" {
            set_creating(object, &["metadata", "name"], namespace);
        }
        if kind == "APIService" && group == "apiregistration.k8s.io" {
            set_creating(object, &["spec", "service", "namespace"], namespace);
        }
        if kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io" {
            set_existing(object, &["spec", "conversion", "webhook", "clientConfig", "service", "namespace"], namespace);
        }
        if kind == "RoleBinding" || kind == "ClusterRoleBinding" {
            set_default_subjects(resource, namespace)?;
        }
    }
    refuse_id_conflicts(resources)
}

/// Sets `namespace` on the subjects named `default` (kustomize's `defaultOnly`).
fn set_default_subjects(resource: &mut Resource, namespace: &str) -> Result<(), Problem> {
    match resource.object.get_mut("subjects") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(subjects)) => {
            for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
                if subject.get("name").and_then(Value::as_str) == Some("default") {
                    subject.insert("namespace".into(), Value::String(namespace.to_owned()));
                }
            }
            Ok(())
        }
        Some(_) => Err(resource.locate(Problem::field("subjects", "expected a list of subjects"))),
    }
}

/// Two objects with the same group, version, kind, name and effective namespace.
fn refuse_id_conflicts(resources: &[Resource]) -> Result<(), Problem> {
    let mut seen: HashMap<(&str, &str, &str, Option<&str>), usize> = HashMap::with_capacity(resources.len());
    for (index, resource) in resources.iter().enumerate() {
        let namespace = scope::effective_namespace(resource.api_version(), resource.kind(), resource.namespace());
        let id = (resource.api_version(), resource.kind(), resource.name(), namespace);
        if let Some(&first) = seen.get(&id) {
            return Err(Problem::field(
                "namespace",
                format!(
                    "{} and {} become the same object in this namespace; kustomize refuses this too \
                     (give them different names)",
                    resources[first].describe(),
                    resource.describe()
                ),
            ));
        }
        seen.insert(id, index);
    }
    Ok(())
}

// === prefix and suffix ===

/// Whether kustomize leaves the name of this kind alone when adding a prefix or suffix.
fn keeps_its_name(resource: &Resource) -> bool {
    match resource.kind() {
        "CustomResourceDefinition" | "Namespace" => true,
        "APIService" => resource.group() == "apiregistration.k8s.io",
        _ => false,
    }
}

/// kustomize's prefix and suffix transformers: `metadata.name` of every object but
/// CustomResourceDefinitions, Namespaces and APIServices gets `prefix` in front and `suffix`
/// behind (cluster-scoped objects too); each is remembered for [`fix_references`]. Empty ones
/// change nothing.
pub(crate) fn add_prefix_suffix(resources: &mut [Resource], prefix: &str, suffix: &str) -> Result<(), Problem> {
    for resource in resources.iter_mut().filter(|r| !keeps_its_name(r)) {
        // kustomize runs the prefix transformer, then the suffix one, each remembering the id.
        if !prefix.is_empty() {
            resource.prefixes.push(prefix.to_owned());
            resource.remember_id();
            let renamed = format!("{prefix}{}", resource.name());
            set_existing(&mut resource.object, &["metadata", "name"], &renamed);
        }
        if !suffix.is_empty() {
            resource.suffixes.push(suffix.to_owned());
            resource.remember_id();
            let renamed = format!("{}{suffix}", resource.name());
            set_existing(&mut resource.object, &["metadata", "name"], &renamed);
        }
    }
    Ok(())
}

// === hash suffix ===

/// Appends the content hash ([`generator::content_hash`]) to the names of the resources that need
/// it, computed over the object as it stands (after every transformer of every level, as
/// kustomize hashes at the top).
pub(crate) fn add_hash_suffixes(resources: &mut [Resource]) -> Result<(), Problem> {
    add_hash_suffixes_with(resources, &generator::content_hash)
}

/// [`add_hash_suffixes`] with the hash function given.
pub(crate) fn add_hash_suffixes_with(
    resources: &mut [Resource],
    hash: &dyn Fn(&Value) -> Result<String, String>,
) -> Result<(), Problem> {
    for resource in resources.iter_mut().filter(|r| r.needs_hash) {
        let suffix = hash(&resource.object).map_err(|e| {
            resource
                .locate(Problem::field("", format!("the content hash of {} cannot be computed: {e}", resource.kind())))
        })?;
        resource.remember_id();
        let renamed = format!("{}-{suffix}", resource.name());
        resource.set_name(&renamed);
        resource.needs_hash = false;
    }
    Ok(())
}

// === name references ===

/// What resolution needs to know of a possible referral, taken once before any reference is
/// changed (references change only fields of referrers, never names or namespaces).
struct Candidate {
    group: String,
    version: String,
    kind: String,
    name: String,
    /// `metadata.namespace` as written (`None` when absent or empty).
    namespace: Option<String>,
    /// kustomize's effective namespace now (`None`: cluster-scoped).
    effective: Option<String>,
    /// The effective namespace before any rename.
    original_effective: Option<String>,
    prefixes: Vec<String>,
    suffixes: Vec<String>,
    /// The object and where it came from, for a problem.
    described: String,
}

impl Candidate {
    fn of(resource: &Resource) -> Self {
        let api_version = resource.api_version();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = resource.kind();
        let effective = |namespace| scope::effective_namespace(api_version, kind, namespace).map(str::to_owned);
        Candidate {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            name: resource.name().to_owned(),
            namespace: resource.namespace().map(str::to_owned),
            effective: effective(resource.namespace()),
            original_effective: effective(resource.original_namespace()),
            prefixes: resource.prefixes.clone(),
            suffixes: resource.suffixes.clone(),
            described: resource.describe(),
        }
    }

    fn cluster_scoped(&self) -> bool {
        self.effective.is_none()
    }
}

/// A kind and a name an object had before a rename, with a namespace: the key of the indexes.
type Key = Counted<(String, String, Option<String>)>;

fn key(kind: &str, name: &str, namespace: Option<&str>) -> Key {
    Counted((kind.to_owned(), name.to_owned(), namespace.map(str::to_owned)))
}

/// The candidates, indexed by kind and every earlier name (kustomize only considers objects
/// that were renamed, by a name they had before), and by namespace under those, so that
/// resolving a reference looks at the objects it may mean, not every object once so called.
/// Every list of positions is ascending (the order of the build).
struct Index {
    candidates: Vec<Candidate>,
    /// Kind and earlier name (no namespace) to the objects once so called.
    by_earlier_name: HashMap<Key, Vec<usize>>,
    /// Kind, earlier name and effective namespace now (`None`: cluster-scoped).
    by_namespace: HashMap<Key, Vec<usize>>,
    /// Kind, earlier name and original effective namespace.
    by_original_namespace: HashMap<Key, Vec<usize>>,
    /// Original effective namespace to the namespaces (as written) its objects are in now.
    namespaces_by_original: HashMap<String, HashSet<Option<String>>>,
}

impl Index {
    fn new(resources: &[Resource]) -> Self {
        let candidates: Vec<Candidate> = resources.iter().map(Candidate::of).collect();
        let mut by_earlier_name: HashMap<Key, Vec<usize>> = HashMap::new();
        let mut by_namespace: HashMap<Key, Vec<usize>> = HashMap::new();
        let mut by_original_namespace: HashMap<Key, Vec<usize>> = HashMap::new();
        let mut namespaces_by_original: HashMap<String, HashSet<Option<String>>> = HashMap::new();
        for (position, resource) in resources.iter().enumerate() {
            let candidate = &candidates[position];
            let kind = candidate.kind.as_str();
            let mut names: Vec<&str> = resource.previous.iter().map(|p| p.name.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            for name in names {
                by_earlier_name.entry(key(kind, name, None)).or_default().push(position);
                let now = key(kind, name, candidate.effective.as_deref());
                by_namespace.entry(now).or_default().push(position);
                let original = key(kind, name, candidate.original_effective.as_deref());
                by_original_namespace.entry(original).or_default().push(position);
            }
            if let Some(original) = &candidate.original_effective {
                namespaces_by_original.entry(original.clone()).or_default().insert(candidate.namespace.clone());
            }
        }
        Index { candidates, by_earlier_name, by_namespace, by_original_namespace, namespaces_by_original }
    }

    /// The positions among `named` (the objects of `kind` once called `old`) that may pass
    /// [`resolve`]'s namespace filters for `referrer`: the buckets of the namespaces those
    /// filters admit, never a scan of every namespace (but for a cluster-scoped referrer, which
    /// sees them all).
    fn reachable<'a>(
        &'a self,
        referrer: &Referrer<'_>,
        kind: &str,
        old: &str,
        named: &'a [usize],
        by_original: Option<(&str, bool)>,
    ) -> Cow<'a, [usize]> {
        match by_original {
            Some((namespace, true)) => {
                return Cow::Borrowed(bucket(&self.by_original_namespace, kind, old, Some(namespace)));
            }
            Some((namespace, false)) => {
                return Cow::Borrowed(bucket(&self.by_namespace, kind, old, Some(namespace)));
            }
            None => {}
        }
        let Some(own) = referrer.me.effective.as_deref() else { return Cow::Borrowed(named) };
        let subjects = &referrer.subject_namespaces;
        // Only a ServiceAccount is seen across namespaces, from a RoleBinding naming it in a subject.
        let across = kind == "ServiceAccount" && !subjects.is_empty();
        // Fewer objects so called than subject namespaces: looking at them is the cheaper way.
        if across && named.len() <= subjects.len() {
            return Cow::Borrowed(named);
        }
        let mut positions: Vec<usize> = bucket(&self.by_namespace, kind, old, None).to_vec();
        positions.extend_from_slice(bucket(&self.by_namespace, kind, old, Some(own)));
        if across {
            for namespace in subjects.iter().filter(|n| n.as_str() != own) {
                positions.extend_from_slice(bucket(&self.by_namespace, kind, old, Some(namespace)));
            }
        }
        positions.sort_unstable();
        positions.dedup();
        Cow::Owned(positions)
    }
}

/// The objects of `kind` once called `name` whose namespace (now, or originally, as `by` is
/// keyed) is `namespace`.
fn bucket<'a>(by: &'a HashMap<Key, Vec<usize>>, kind: &str, name: &str, namespace: Option<&str>) -> &'a [usize] {
    by.get(&key(kind, name, namespace)).map_or(&[], Vec::as_slice)
}

/// The referring object, as resolution sees it.
struct Referrer<'a> {
    me: &'a Candidate,
    /// Namespaces of the ServiceAccount subjects of a RoleBinding: objects there may be referred
    /// to from it.
    subject_namespaces: HashSet<String>,
    /// `roleRef.apiGroup` and `roleRef.kind`, for `roleRef.name`.
    role_ref: Option<(String, String)>,
}

impl Referrer<'_> {
    /// kustomize's `SubsetThatCouldBeReferencedByResource`.
    fn may_refer_to(&self, candidate: &Candidate) -> bool {
        self.me.cluster_scoped()
            || candidate.cluster_scoped()
            || candidate.effective == self.me.effective
            || candidate.namespace.as_ref().is_some_and(|n| self.subject_namespaces.contains(n))
    }
}

/// A field of the table that applies to a referrer, with the kind it refers to.
type Applicable<'a> = (Gvk, &'a references::Referrer);

/// The name (and namespace, as written) a reference resolves to.
type Referral = (String, Option<String>);

/// All a reference from a cluster-scoped object resolves by: the kind referred to, `roleRef`'s
/// group and kind (for `roleRef.name`), the name, the shape (`None` for a bare name, else the
/// map's namespace) and the referrer's prefixes and suffixes.
type ClusterKey = Counted<(
    (&'static str, &'static str, &'static str),
    Option<Option<(String, String)>>,
    String,
    Option<Option<String>>,
    Vec<String>,
    Vec<String>,
)>;

/// Resolves a name found at a field (`old`, its shape, the field's path).
type Lookup<'a> = dyn FnMut(&str, &Shape, &str) -> Result<Option<Referral>, Problem> + 'a;

/// What a reference field holds: a bare name, or a map with `name` (and maybe `namespace`).
enum Shape {
    Scalar,
    Map { namespace: Option<String> },
}

/// Updates every reference to a renamed object (kustomize's default name-reference
/// configuration, [`references`]), once, after the whole build.
///
/// For a name `N` in a referring field, the candidates are the objects of the referred kind that
/// were once called `N` (not merely now), then as kustomize v5.5 narrows them: those the referrer
/// may see (same namespace, cluster-scoped, or a namespace of a RoleBinding's ServiceAccount
/// subjects), for `roleRef.name` those of `roleRef`'s group and kind, those in the referrer's
/// namespace (ServiceAccounts and cluster-scoped objects anywhere); if still several, those whose
/// prefixes and suffixes end like the referrer's (an empty list matching any), then exactly. One
/// left: the field takes its name (and, in a map, its namespace); none: unchanged; several with
/// the same name: that name; several names: a problem naming them (the first few). Linear in
/// the number of objects: a reference looks up the objects of its kind once called so in the
/// namespaces the referrer may see (an index by kind, earlier name and namespace), never every
/// namespace's; a cluster-scoped referrer sees them all, and what its references resolve to is
/// kept for the next with the same name, shape and prefixes and suffixes.
pub(crate) fn fix_references(resources: &mut [Resource]) -> Result<(), Vec<Problem>> {
    let index = Index::new(resources);
    let table = default_name_references();
    let mut problems = Vec::new();
    // The table's fields that apply to each group, version and kind, worked out once per type.
    let mut by_type: HashMap<(&str, &str, &str), Vec<Applicable<'_>>> = HashMap::new();
    let mut from_cluster = FromCluster::default();
    for (at, resource) in resources.iter_mut().enumerate() {
        let me = &index.candidates[at];
        let applicable = by_type.entry((&me.group, &me.version, &me.kind)).or_insert_with(|| {
            table
                .iter()
                .flat_map(|reference| reference.referrers.iter().map(move |r| (reference.target, r)))
                .filter(|(_, r)| r.gvk.selects(&me.group, &me.version, &me.kind))
                .collect()
        });
        if applicable.is_empty() {
            continue;
        }
        let referrer = match referrer(resource, me) {
            Ok(referrer) => referrer,
            Err(problem) => {
                problems.push(resource.locate(problem));
                continue;
            }
        };
        for &(target, spec) in applicable.iter() {
            let role_ref = spec.path.ends_with(&["roleRef", "name"]);
            let mut lookup = |old: &str, shape: &Shape, field: &str| {
                from_cluster
                    .resolve(&index, &referrer, target, role_ref, old, shape)
                    .map_err(|message| Problem::field(field, message))
            };
            let mut found = Vec::new();
            let mut blocked = Vec::new();
            walk(&mut resource.object, &spec.path, String::new(), &mut blocked, &mut |node, field| {
                set_reference(node, field, &mut lookup, &mut found);
            });
            // kustomize fails the build when a scalar stands where the path needs a map or list.
            found.extend(blocked.into_iter().map(|field| Problem::field(field, "expected a map or a list")));
            problems.extend(found.into_iter().map(|p| resource.locate(p)));
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

fn referrer<'a>(resource: &Resource, me: &'a Candidate) -> Result<Referrer<'a>, Problem> {
    let mut subject_namespaces = HashSet::new();
    if resource.kind() == "RoleBinding" {
        let subjects = resource.object.get("subjects").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (i, subject) in subjects.iter().enumerate() {
            if subject.get("kind").and_then(Value::as_str) != Some("ServiceAccount") {
                continue;
            }
            match subject.get("namespace") {
                None => {}
                Some(Value::String(namespace)) => {
                    subject_namespaces.insert(namespace.clone());
                }
                Some(_) => return Err(Problem::field(format!("subjects[{i}].namespace"), "expected a string")),
            }
        }
    }
    let role_ref = resource.object.get("roleRef").and_then(|r| {
        let text = |field: &str| r.get(field).and_then(Value::as_str).map(str::to_owned);
        Some((text("apiGroup")?, text("kind")?))
    });
    Ok(Referrer { me, subject_namespaces, role_ref })
}

/// Rewrites one reference node (a scalar, a map with `name`, or a list of either).
fn set_reference(node: &mut Value, field: &str, resolve: &mut Lookup<'_>, problems: &mut Vec<Problem>) {
    match node {
        Value::Null => {}
        Value::Array(elements) => {
            for (i, element) in elements.iter_mut().enumerate() {
                let field = format!("{field}[{i}]");
                match element {
                    Value::Array(_) => problems.push(Problem::field(field, "expected a name or a map with `name`")),
                    element => set_reference(element, &field, resolve, problems),
                }
            }
        }
        Value::Object(map) => {
            let Some(old) = map.get("name").map(scalar_text) else {
                problems.push(Problem::field(field, "a reference needs a `name`"));
                return;
            };
            let Some(old) = old else {
                problems.push(Problem::field(join_path(field, "name"), "expected a string"));
                return;
            };
            let namespace = map.get("namespace").and_then(scalar_text);
            match resolve(&old, &Shape::Map { namespace }, field) {
                Ok(Some((name, namespace))) => set_map_reference(map, &old, name, namespace),
                Ok(None) => {}
                Err(problem) => problems.push(problem),
            }
        }
        scalar => {
            let Some(old) = scalar_text(scalar) else { return };
            match resolve(&old, &Shape::Scalar, field) {
                Ok(Some((name, _))) if name != old => *scalar = Value::String(name),
                Ok(_) => {}
                Err(problem) => problems.push(problem),
            }
        }
    }
}

fn set_map_reference(map: &mut Map<String, Value>, old: &str, name: String, namespace: Option<String>) {
    if name == old && namespace.is_none() {
        return;
    }
    map.insert("name".into(), Value::String(name));
    if let Some(namespace) = namespace {
        map.insert("namespace".into(), Value::String(namespace));
    }
}

/// A scalar's text as YAML would give it (names are strings; a number is matched by its digits).
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// What the references of cluster-scoped objects resolved to. Such a referrer sees every
/// namespace, so each of its references may have many candidates: the result is kept for the
/// next reference that resolves alike, and many references to objects spread over many
/// namespaces cost those objects once.
#[derive(Default)]
struct FromCluster(HashMap<ClusterKey, Result<Option<Referral>, String>>);

impl FromCluster {
    /// [`resolve`], through what was kept when the referrer is cluster-scoped.
    fn resolve(
        &mut self,
        index: &Index,
        referrer: &Referrer<'_>,
        target: Gvk,
        role_ref: bool,
        old: &str,
        shape: &Shape,
    ) -> Result<Option<Referral>, String> {
        if !referrer.me.cluster_scoped() {
            return resolve(index, referrer, target, role_ref, old, shape);
        }
        let key = Counted((
            (target.group, target.version, target.kind),
            role_ref.then(|| referrer.role_ref.clone()),
            old.to_owned(),
            match shape {
                Shape::Scalar => None,
                Shape::Map { namespace } => Some(namespace.clone()),
            },
            referrer.me.prefixes.clone(),
            referrer.me.suffixes.clone(),
        ));
        self.0.entry(key).or_insert_with(|| resolve(index, referrer, target, role_ref, old, shape)).clone()
    }
}

/// The most objects a problem about an ambiguous reference names (it counts the others).
const MAX_NAMED: usize = 8;

/// kustomize's `selectReferral`: the object `old` means, with its name and namespace as written.
fn resolve(
    index: &Index,
    referrer: &Referrer<'_>,
    target: Gvk,
    role_ref: bool,
    old: &str,
    shape: &Shape,
) -> Result<Option<Referral>, String> {
    let Some(named) = index.by_earlier_name.get(&key(target.kind, old, None)) else {
        return Ok(None);
    };
    let by_original = match shape {
        Shape::Map { namespace: Some(namespace) } => {
            Some((namespace.as_str(), seen_in_original_namespace(index, referrer, namespace)))
        }
        _ => None,
    };
    let reachable = index.reachable(referrer, target.kind, old, named, by_original);
    let mut candidates: Vec<&Candidate> = reachable
        .iter()
        .map(|&i| &index.candidates[i])
        .filter(|c| {
            comparisons::note(1);
            referrer.may_refer_to(c)
        })
        .filter(|c| match by_original {
            None => true,
            Some((namespace, true)) => c.original_effective.as_deref() == Some(namespace),
            Some((namespace, false)) => c.effective.as_deref() == Some(namespace),
        })
        .filter(|c| target.selects(&c.group, &c.version, &c.kind))
        .filter(|c| {
            // `roleRef.name` means an object of `roleRef`'s group and kind (an empty one matches any).
            let of_role_ref = |(group, kind): &(String, String)| {
                (group.is_empty() || *group == c.group) && (kind.is_empty() || *kind == c.kind)
            };
            !role_ref || referrer.role_ref.as_ref().is_none_or(of_role_ref)
        })
        .filter(|c| {
            referrer.me.cluster_scoped()
                || c.cluster_scoped()
                || c.kind == "ServiceAccount"
                || c.effective == referrer.me.effective
        })
        .collect();
    if candidates.len() > 1 {
        candidates.retain(|c| affixes_match(referrer.me, c, true));
        if candidates.len() > 1 {
            candidates.retain(|c| affixes_match(referrer.me, c, false));
        }
    }
    let Some(first) = candidates.first() else { return Ok(None) };
    let identical = candidates
        .iter()
        .all(|c| c.name == first.name && (matches!(shape, Shape::Scalar) || c.namespace == first.namespace));
    if identical {
        return Ok(Some((first.name.clone(), first.namespace.clone())));
    }
    // A message names a few of them: thousands of candidates would make every such reference's
    // problem as long as the build.
    let mut named: Vec<String> = candidates.iter().take(MAX_NAMED).map(|c| c.described.clone()).collect();
    if candidates.len() > MAX_NAMED {
        named.push(format!("{} others", candidates.len() - MAX_NAMED));
    }
    let (last, others) = named.split_last().expect("at least two candidates");
    Err(format!(
        "`{old}` could mean {} or {last}; kustomize refuses this too: give them different names, or write \
         the reference where the object it means is (under the same namePrefix and nameSuffix)",
        others.join(", ")
    ))
}

/// Whether some object the referrer may see has `namespace` as its original effective namespace
/// (then a map reference's `namespace` is matched against original namespaces, else current ones).
fn seen_in_original_namespace(index: &Index, referrer: &Referrer<'_>, namespace: &str) -> bool {
    let Some(now) = index.namespaces_by_original.get(namespace) else { return false };
    let Some(own) = referrer.me.effective.as_deref() else { return !now.is_empty() };
    // An object written without a namespace is in `default`.
    if now.contains(&Some(own.to_owned())) || (own == "default" && now.contains(&None)) {
        return true;
    }
    let subjects = &referrer.subject_namespaces;
    comparisons::note(now.len().min(subjects.len()));
    if now.len() <= subjects.len() {
        now.iter().flatten().any(|written| subjects.contains(written))
    } else {
        subjects.iter().any(|subject| now.contains(&Some(subject.clone())))
    }
}

/// kustomize's `PrefixesSuffixesEquals`: the shorter list of prefixes (and of suffixes) is the end
/// of the longer; with `allow_empty`, an empty list matches anything.
fn affixes_match(referrer: &Candidate, candidate: &Candidate, allow_empty: bool) -> bool {
    let ends_alike = |a: &[String], b: &[String]| {
        if allow_empty && (a.is_empty() || b.is_empty()) {
            return true;
        }
        let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
        if short.is_empty() {
            return long.is_empty();
        }
        long.ends_with(short)
    };
    ends_alike(&referrer.prefixes, &candidate.prefixes) && ends_alike(&referrer.suffixes, &candidate.suffixes)
}

// === walking field paths ===

/// Calls `visit` on every value at `path` below `value`, walking lists element by element;
/// missing fields and nulls on the way end the walk there, and a scalar on the way is noted in
/// `blocked`.
fn walk(
    value: &mut Value,
    path: &[&str],
    field: String,
    blocked: &mut Vec<String>,
    visit: &mut dyn FnMut(&mut Value, &str),
) {
    let Some((first, rest)) = path.split_first() else {
        visit(value, &field);
        return;
    };
    match value {
        Value::Null => {}
        Value::Array(elements) => {
            for (i, element) in elements.iter_mut().enumerate() {
                walk(element, path, format!("{field}[{i}]"), blocked, visit);
            }
        }
        Value::Object(map) => {
            if let Some(next) = map.get_mut(*first) {
                walk(next, rest, join_path(&field, first), blocked, visit);
            }
        }
        _ => blocked.push(field),
    }
}

/// Sets the field at `path` to `text` where it exists (walking lists).
fn set_existing(value: &mut Value, path: &[&str], text: &str) {
    walk(value, path, String::new(), &mut Vec::new(), &mut |node, _| *node = Value::String(text.to_owned()));
}

/// Sets the field at `path` to `text`, creating the maps on the way (a null becomes a map; lists
/// are walked element by element; a scalar on the way is left alone).
fn set_creating(value: &mut Value, path: &[&str], text: &str) {
    let Some((first, rest)) = path.split_first() else {
        *value = Value::String(text.to_owned());
        return;
    };
    if value.is_null() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Array(elements) => elements.iter_mut().for_each(|e| set_creating(e, path, text)),
        Value::Object(map) => {
            let next = map.entry(*first).or_insert(Value::Null);
            set_creating(next, rest, text);
        }
        _ => {}
    }
}

// === answering to a name ===

/// Whether `resource` is named `name` now or was before a rename (kustomize matches patch
/// targets, `replicas` and generator merges by any of its names). Name references are narrower:
/// [`fix_references`] considers only the names an object had *before* a rename, as kustomize does.
pub fn answers_to(resource: &Resource, name: &str) -> bool {
    resource.name() == name || resource.previous.iter().any(|p| p.name == name)
}

#[cfg(test)]
mod tests;
