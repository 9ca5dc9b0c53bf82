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

use crate::support::{check_case, ours};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kustomize/cases")
}

/// Builds the case both ways and checks what its `expect` file says.
fn check(name: &str) {
    check_case(name, &cases_dir(), ours);
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
