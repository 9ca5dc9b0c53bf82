//! Whole builds: every case under `tests/kustomize/builds/` built by `kubectl kustomize` and by
//! `cdtarget::kustomize::build::build`, compared object by object and in order.
//!
//! A case directory is a small repository: it is loaded into `MemoryFiles` as the `Files` root,
//! so a path that goes `../` out of the case leaves the repository. The build root is the case
//! directory when it holds a kustomization file, else its `overlay/` directory, unless the case's
//! `expect` file names another with a `root: DIR` line. `expect` (optional) holds at most one of:
//! - nothing: both build, and give the same objects in the same order;
//! - `error: TEXT`: both refuse, ours with a problem saying TEXT;
//! - `refused: TEXT`: kustomize builds, cdtarget refuses on purpose (a refusal docs/kustomize.md
//!   lists: remote URLs, paths leaving the repository, helm, plugins, ...) with a problem saying
//!   TEXT;
//! - `differs: POINTER`: both build, and the objects differ at POINTER and nowhere else (merge
//!   keys that changed between kustomize's embedded OpenAPI schema and the API server's).
//!
//! Adding a case: a directory here and its name (`-` as `_`) in the `builds!` list at the end;
//! `every_build_case_directory_has_a_test` fails while a directory has no test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cdtarget::kustomize::build::{KUSTOMIZATION_FILE_NAMES, build};
use cdtarget::kustomize::files::MemoryFiles;
use cdtarget::problem::Problem;
use serde_json::Value;

use crate::support::{kubectl_available, kustomize, remove};

fn builds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kustomize/builds")
}

/// What a case's `expect` file says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Expect {
    /// The build root, relative to the case directory (`""` is the case directory itself).
    pub root: String,
    /// What both builds should do.
    pub outcome: Outcome,
}

/// The outcome a case expects.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum Outcome {
    /// The same objects in the same order.
    #[default]
    Same,
    /// Both refuse; ours says the text.
    Error(String),
    /// kustomize builds; ours refuses saying the text.
    Refused(String),
    /// Both build; the objects differ at the pointer only.
    Differs(String),
}

/// Reads the `expect` file of the case directory `dir` (and finds its root).
pub fn expect(dir: &Path) -> Expect {
    let text = std::fs::read_to_string(dir.join("expect")).unwrap_or_default();
    let mut expect = Expect::default();
    let mut root = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (key, value) = line.split_once(": ").unwrap_or_else(|| panic!("{}: expect line {line:?}", dir.display()));
        let value = value.trim().to_owned();
        let outcome = match key {
            "root" => {
                root = Some(value);
                continue;
            }
            "error" => Outcome::Error(value),
            "refused" => Outcome::Refused(value),
            "differs" => Outcome::Differs(value),
            _ => panic!("{}: unknown expect key {key:?}", dir.display()),
        };
        assert_eq!(expect.outcome, Outcome::Same, "{}: one outcome per expect file", dir.display());
        expect.outcome = outcome;
    }
    expect.root = root.unwrap_or_else(|| {
        let has_kustomization = KUSTOMIZATION_FILE_NAMES.iter().any(|name| dir.join(name).is_file());
        if has_kustomization { String::new() } else { "overlay".to_owned() }
    });
    expect
}

/// Every regular file beneath `dir` (but the case's `expect`), keyed by its `/`-separated path
/// relative to `dir`.
pub fn memory_files(dir: &Path) -> MemoryFiles {
    fn walk(dir: &Path, prefix: &str, files: &mut MemoryFiles) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read a case directory").map(|e| e.unwrap()).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}/{name}") };
            let kind = entry.file_type().expect("a file type");
            if kind.is_dir() {
                walk(&entry.path(), &path, files);
            } else if kind.is_file() && path != "expect" {
                files.insert(path, std::fs::read(entry.path()).expect("read a case file"));
            }
        }
    }
    let mut files = MemoryFiles::new();
    walk(dir, "", &mut files);
    files
}

/// The objects cdtarget builds from `root` (relative to `dir`, the repository).
pub fn ours(dir: &Path, root: &str) -> Result<Vec<Value>, Vec<Problem>> {
    let files = memory_files(dir);
    build(&files, root).map(|built| built.resources.into_iter().map(|r| r.object).collect())
}

/// The id a build's objects are matched by: apiVersion, kind, namespace, name.
pub fn id(object: &Value) -> String {
    let field = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
    let namespace = field("/metadata/namespace");
    let namespace = if namespace.is_empty() { "~".to_owned() } else { namespace };
    format!("{} {} {}/{}", field("/apiVersion"), field("/kind"), namespace, field("/metadata/name"))
}

fn yaml(object: &Value) -> String {
    cdtarget::yaml::to_yaml(object)
}

/// A unified diff of two objects' YAML (`-` kustomize, `+` cdtarget).
fn diff(expected: &Value, actual: &Value) -> String {
    similar::TextDiff::from_lines(&yaml(expected), &yaml(actual))
        .unified_diff()
        .header("kubectl kustomize", "cdtarget")
        .to_string()
}

/// Compares two builds: the same ids, each object the same, and the same order. Returns every
/// difference found, readable; empty when they agree.
pub fn differences(expected: &[Value], actual: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    fn index(objects: &[Value]) -> BTreeMap<String, Vec<&Value>> {
        let mut by_id: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
        for object in objects {
            by_id.entry(id(object)).or_default().push(object);
        }
        by_id
    }
    let (theirs, mine) = (index(expected), index(actual));
    for (key, objects) in &theirs {
        match mine.get(key) {
            None => found.push(format!("missing from cdtarget's build: {key}\n{}", yaml(objects[0]))),
            Some(ours) if ours.len() != objects.len() => {
                found.push(format!("{key}: kustomize prints it {} times, cdtarget {}", objects.len(), ours.len()))
            }
            Some(ours) => {
                for (e, a) in objects.iter().zip(ours) {
                    if e != a {
                        found.push(format!("{key} differs:\n{}", diff(e, a)));
                    }
                }
            }
        }
    }
    for (key, objects) in &mine {
        if !theirs.contains_key(key) {
            found.push(format!("not in kustomize's build: {key}\n{}", yaml(objects[0])));
        }
    }
    if found.is_empty() {
        let order = |objects: &[Value]| objects.iter().map(id).collect::<Vec<_>>();
        if order(expected) != order(actual) {
            found.push(format!(
                "the same objects in another order:\nkubectl kustomize: {:#?}\ncdtarget: {:#?}",
                order(expected),
                order(actual)
            ));
        }
    }
    found
}

/// Asserts the two builds agree, printing every difference.
pub fn assert_same_build(case: &str, expected: &[Value], actual: &[Value]) {
    let found = differences(expected, actual);
    assert!(found.is_empty(), "{case}: cdtarget's build differs from kubectl kustomize's:\n\n{}", found.join("\n\n"));
}

/// Problems as the CLI prints them, one a line.
pub fn said(problems: &[Problem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

/// kubectl's side of a case: what it built, after checking that it did what `expect` says.
fn kubectl_side(name: &str, dir: &Path, expect: &Expect) -> Result<Vec<Value>, String> {
    let built = kustomize(&dir.join(&expect.root));
    match (&expect.outcome, &built) {
        (Outcome::Error(_), Err(_)) | (Outcome::Same | Outcome::Refused(_) | Outcome::Differs(_), Ok(_)) => {}
        (Outcome::Error(_), Ok(objects)) => {
            panic!("{name}: the case expects kubectl kustomize to refuse, it built:\n{}", yamls(objects))
        }
        (_, Err(said)) => panic!("{name}: kubectl kustomize failed: {said}"),
    }
    built
}

fn yamls(objects: &[Value]) -> String {
    objects.iter().map(yaml).collect::<Vec<_>>().join("---\n")
}

/// Builds the case both ways and checks what its `expect` file says.
fn check(name: &str) {
    if !kubectl_available(name) {
        return;
    }
    let dir = builds_dir().join(name.replace('_', "-"));
    assert!(dir.is_dir(), "no case at {}", dir.display());
    let expect = expect(&dir);
    let kustomized = kubectl_side(name, &dir, &expect);
    let built = ours(&dir, &expect.root);
    match (&expect.outcome, kustomized) {
        (Outcome::Same, Ok(theirs)) => {
            let mine =
                built.unwrap_or_else(|p| panic!("{name}: cdtarget refused what kustomize builds:\n{}", said(&p)));
            assert_same_build(name, &theirs, &mine);
        }
        (Outcome::Error(text), Err(kubectl_said)) => {
            let problems = match built {
                Err(problems) => problems,
                Ok(mine) => {
                    panic!("{name}: cdtarget builds what kustomize refuses ({kubectl_said}):\n{}", yamls(&mine))
                }
            };
            assert!(
                said(&problems).contains(text),
                "{name}: expected a problem saying {text:?}, got:\n{}",
                said(&problems)
            );
            println!("{name}: kustomize: {}\ncdtarget: {}", kubectl_said.trim(), said(&problems));
        }
        (Outcome::Refused(text), Ok(theirs)) => {
            let problems = match built {
                Err(problems) => problems,
                Ok(mine) => panic!(
                    "{name}: cdtarget builds what it should refuse:\n{}\nkustomize:\n{}",
                    yamls(&mine),
                    yamls(&theirs)
                ),
            };
            assert!(
                said(&problems).contains(text),
                "{name}: expected a problem saying {text:?}, got:\n{}",
                said(&problems)
            );
            println!("{name}: kustomize built {} objects; cdtarget: {}", theirs.len(), said(&problems));
        }
        (Outcome::Differs(pointer), Ok(mut theirs)) => {
            let mut mine =
                built.unwrap_or_else(|p| panic!("{name}: cdtarget refused what kustomize builds:\n{}", said(&p)));
            let at = |objects: &[Value]| objects.iter().map(|o| o.pointer(pointer).cloned()).collect::<Vec<_>>();
            assert_ne!(at(&theirs), at(&mine), "{name}: expected the builds to differ at {pointer}");
            for object in theirs.iter_mut().chain(mine.iter_mut()) {
                remove(object, pointer);
            }
            assert_same_build(name, &theirs, &mine);
        }
        (_, kustomized) => unreachable!("kubectl_side checked {kustomized:?}"),
    }
}

macro_rules! builds {
    ($($name:ident),* $(,)?) => {
        mod case {
            $(#[test] fn $name() { super::check(stringify!($name)); })*
        }
        /// Every case test above, by name.
        const BUILDS: &[&str] = &[$(stringify!($name)),*];
    };
}

#[test]
fn every_build_case_directory_has_a_test() {
    let mut dirs: Vec<String> = std::fs::read_dir(builds_dir())
        .expect("the builds directory")
        .map(|e| e.expect("an entry"))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().replace('-', "_"))
        .collect();
    dirs.sort();
    let listed: Vec<String> = BUILDS.iter().map(|s| (*s).to_owned()).collect();
    let unlisted: Vec<&String> = dirs.iter().filter(|d| !listed.contains(d)).collect();
    let missing: Vec<&String> = listed.iter().filter(|l| !dirs.contains(l)).collect();
    assert!(unlisted.is_empty(), "case directories without a test (add them to builds! in builds.rs): {unlisted:?}");
    assert!(missing.is_empty(), "tests without a case directory: {missing:?}");
    assert!(listed.len() >= 40, "at least 40 whole-build cases (issue #15), found {}", listed.len());
}

/// The oracle side of the corpus alone: kubectl builds every case, or refuses the `error:`
/// ones, so a failing case test points at cdtarget's build, not at a broken case.
#[test]
fn kubectl_kustomize_does_what_every_build_case_expects() {
    if !kubectl_available("kubectl_kustomize_does_what_every_build_case_expects") {
        return;
    }
    for name in BUILDS {
        let dir = builds_dir().join(name.replace('_', "-"));
        let expect = expect(&dir);
        let _ = kubectl_side(name, &dir, &expect);
    }
}

#[test]
fn builds_compare_by_id_then_object_then_order() {
    let object = |kind: &str, name: &str, replicas: i64| serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, "spec": {"replicas": replicas}});
    let (a, b) = (object("Service", "a", 1), object("ConfigMap", "b", 1));
    assert!(differences(&[a.clone(), b.clone()], &[a.clone(), b.clone()]).is_empty());
    let reordered = differences(&[a.clone(), b.clone()], &[b.clone(), a.clone()]);
    assert!(reordered[0].contains("another order"), "{reordered:?}");
    let changed = differences(std::slice::from_ref(&a), &[object("Service", "a", 2)]);
    assert!(changed[0].contains("v1 Service ~/a differs") && changed[0].contains("+  replicas: 2"), "{changed:?}");
    let missing = differences(&[a.clone(), b.clone()], std::slice::from_ref(&a));
    assert!(missing[0].starts_with("missing from cdtarget's build: v1 ConfigMap ~/b"), "{missing:?}");
    let extra = differences(std::slice::from_ref(&a), &[a.clone(), b]);
    assert!(extra[0].starts_with("not in kustomize's build: v1 ConfigMap ~/b"), "{extra:?}");
}

builds!(
    ambiguous_reference_is_an_error,
    app_with_namespace_and_prefix,
    cdtarget_in_a_base_reaches_prefix_namespace_and_labels,
    cluster_scoped_kind_kustomize_does_not_know_refused,
    common_annotations_reach_pod_templates,
    common_labels_reach_selectors_and_templates,
    components_add_a_sidecar_and_settings,
    config_references_in_volumes_env_and_pull_secrets,
    configmap_generator_files_with_and_without_keys,
    cycle_between_bases_is_an_error,
    deprecated_patch_fields,
    directory_without_kustomization_is_an_error,
    fields_common_annotations_on_templates,
    fields_common_labels_on_jobs_and_cronjobs,
    fields_common_labels_on_service_pdb_networkpolicy,
    fields_common_labels_on_workload_selectors,
    fields_images_entries_apply_in_order,
    fields_images_init_containers_anywhere,
    fields_images_name_dot_is_literal,
    fields_images_tag_suffix_refused,
    fields_images_tags_digests_and_registries,
    fields_labels_custom_field_specs_refused,
    fields_labels_entries_then_common_labels,
    fields_labels_include_templates,
    fields_labels_narrower_change_refused,
    fields_labels_number_value_is_an_error,
    fields_labels_without_selectors,
    fields_nulls_as_kustomize_treats_them,
    fields_replicas_by_name,
    fields_replicas_unmatched_name_is_an_error,
    fields_replicas_without_count_refused,
    generated_configmap_referenced_across_bases,
    generated_names_referenced_from_another_base,
    generator_behavior_replace,
    generator_colliding_with_a_base_object_is_an_error,
    generator_merge_into_a_base_secret,
    generator_options_labels_annotations_and_no_hash,
    generator_options_per_entry,
    generators_plugin_refused,
    helm_charts_refused,
    images_by_tag_digest_and_new_name,
    kustomization_file_names,
    labels_with_selectors_or_templates,
    labels_without_selectors,
    missing_resource_file_is_an_error,
    namespace_and_role_binding_subjects,
    namespace_and_rolebinding_subjects,
    namespace_merging_two_objects_is_an_error,
    namespace_overridden_by_the_overlay,
    namespace_overrides_base_namespaces,
    openapi_refused,
    output_order_of_many_kinds,
    overlay_of_an_overlay,
    patch_directives_delete_and_replace,
    patch_names_an_object_by_its_base_name,
    patch_targets_by_selectors,
    patches_add_to_and_delete_from_lists,
    path_leaving_the_repository_refused,
    prefix_and_suffix_through_three_levels,
    prefix_suffix_through_three_levels,
    references_across_bases_with_prefixes,
    remote_resource_refused,
    replacements_refused,
    replicas_by_current_and_earlier_name,
    same_names_in_two_namespaced_bases,
    secret_generator_with_envs_and_type,
    service_ingress_hpa_and_cronjob_references,
    services_claims_and_scale_targets_follow_a_suffix,
    the_same_object_twice_is_an_error,
    transformers_plugin_refused,
    tree_base_cycle,
    tree_components_after_generators,
    tree_file_outside_kustomization_refused,
    tree_list_refused,
    tree_overlays_print_order,
    tree_patch_targets_by_original_name,
    tree_sort_options_and_local_config,
    tree_transformer_order,
    unknown_field_refused,
    vars_refused,
);
