//! The cases under `tests/kustomize/cases/`, each built by `kubectl kustomize` and by our engine.
//!
//! A case directory holds a `kustomization.yaml` (only `resources`, `patches`,
//! `patchesStrategicMerge`, `patchesJson6902`), its files, and optionally `expect`:
//! - no `expect`: both builds succeed and give the same objects;
//! - `error: TEXT`: both refuse, ours with a problem saying TEXT;
//! - `refused: TEXT`: kustomize builds something that is not what the patch says (it copies a
//!   directive into the object, or silently loses part of the patch); ours refuses with TEXT;
//! - `differs: POINTER`: a field whose merge keys changed between the OpenAPI schema kustomize
//!   embeds (Kubernetes 1.21.2) and the API server's our table follows (docs/kustomize.md): both
//!   build, the objects differ at POINTER and nowhere else.

use std::path::{Path, PathBuf};

use crate::support::{assert_same, kubectl_available, kustomize, ours, pretty, sorted};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kustomize/cases")
}

/// Builds the case both ways and checks what its `expect` file says.
fn check(name: &str) {
    if !kubectl_available(name) {
        return;
    }
    let dir = cases_dir().join(name.replace('_', "-"));
    assert!(dir.join("kustomization.yaml").is_file(), "no case at {}", dir.display());
    let expect = std::fs::read_to_string(dir.join("expect")).unwrap_or_default();
    let (kustomized, ours) = (kustomize(&dir), ours(&dir));
    let problems =
        |found: &[cdtarget::problem::Problem]| found.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
    if let Some(text) = expect.trim().strip_prefix("error: ") {
        let said = kustomized.expect_err("kubectl kustomize refuses this case");
        let found = ours.expect_err(&format!("our engine refuses this case (kustomize: {said})"));
        assert!(
            problems(&found).contains(text),
            "{name}: expected a problem saying {text:?}, got:\n{}",
            problems(&found)
        );
        println!("{name}: kustomize: {}\nours: {}", said.trim(), problems(&found));
    } else if let Some(text) = expect.trim().strip_prefix("refused: ") {
        let built = kustomized.expect("kubectl kustomize builds this case");
        let found = ours.expect_err("our engine refuses this case");
        assert!(
            problems(&found).contains(text),
            "{name}: expected a problem saying {text:?}, got:\n{}",
            problems(&found)
        );
        println!("{name}: kustomize built:\n{}\nours: {}", pretty(&built), problems(&found));
    } else if let Some(pointer) = expect.trim().strip_prefix("differs: ") {
        let mut built = sorted(kustomized.unwrap_or_else(|said| panic!("{name}: kubectl kustomize failed: {said}")));
        let mut found = sorted(ours.unwrap_or_else(|found| panic!("{name}: our engine failed:\n{}", problems(&found))));
        let theirs: Vec<_> = built.iter().map(|o| o.pointer(pointer).cloned()).collect();
        let mine: Vec<_> = found.iter().map(|o| o.pointer(pointer).cloned()).collect();
        assert_ne!(theirs, mine, "{name}: expected the builds to differ at {pointer}");
        println!("{name}: at {pointer} kustomize gives {theirs:?}, ours {mine:?}");
        for object in built.iter_mut().chain(found.iter_mut()) {
            remove(object, pointer);
        }
        assert_same(name, built, found);
    } else {
        assert!(expect.trim().is_empty(), "{name}: unknown expect {expect:?}");
        let built = kustomized.unwrap_or_else(|said| panic!("{name}: kubectl kustomize failed: {said}"));
        let found = ours.unwrap_or_else(|found| panic!("{name}: our engine failed:\n{}", problems(&found)));
        assert_same(name, built, found);
    }
}

/// Removes the field at a JSON pointer (without escapes).
fn remove(object: &mut serde_json::Value, pointer: &str) {
    let (parent, last) = pointer.rsplit_once('/').expect("a pointer below the root");
    if let Some(parent) = object.pointer_mut(parent).and_then(serde_json::Value::as_object_mut) {
        parent.remove(last);
    }
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { check(stringify!($name)); })*
        /// Every test above, by name.
        const CASES: &[&str] = &[$(stringify!($name)),*];
    };
}

cases!(
    containers_merged_by_name,
    container_deleted_by_directive,
    env_added_changed_and_deleted,
    ports_merged_by_container_port,
    ports_matched_by_port_and_protocol,
    volumes_merged_by_name,
    list_replaced_by_directive,
    list_deleted_by_directive,
    map_replaced_by_directive,
    map_deleted_by_directive,
    object_deleted_by_directive,
    null_deletes_fields,
    primitive_list_merged,
    lists_without_strategy_replaced,
    custom_resource_merged_without_schema,
    set_element_order_refused,
    retain_keys_refused,
    delete_from_primitive_list_refused,
    json6902_append_with_dash,
    json6902_move_copy_and_escapes,
    json6902_failing_test_is_an_error,
    json6902_json_and_yaml_forms,
    target_by_label_selector,
    target_by_annotation_selector,
    target_name_is_an_anchored_regex,
    target_by_group_version_kind,
    several_patches_on_one_object_in_order,
    patch_naming_no_object_is_an_error,
    target_matching_nothing_is_no_error,
    patch_namespace_must_match,
    patch_naming_its_namespace,
    strategic_patch_with_target_and_no_name,
    new_fields_cleaned_of_directives_and_nulls,
    inline_strategic_merge_patches,
    name_change_allowed_by_option,
    shape_mismatch_is_an_error,
    element_replace_refused,
    duplicate_keys_in_target_refused,
    ports_without_protocol_refused,
    scheduling_gates_follow_the_api_server,
    patch_cannot_move_rename_or_rekind,
);

#[test]
fn every_case_directory_has_a_test() {
    let mut dirs: Vec<String> = std::fs::read_dir(cases_dir())
        .expect("the cases directory")
        .map(|e| e.expect("an entry").file_name().to_string_lossy().replace('-', "_"))
        .collect();
    dirs.sort();
    let mut listed: Vec<String> = CASES.iter().map(|s| (*s).to_owned()).collect();
    listed.sort();
    assert_eq!(dirs, listed, "tests/kustomize/cases/ and the cases! list differ");
    assert!(listed.len() >= 25, "at least 25 oracle cases");
}
