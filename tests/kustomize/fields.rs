//! The `fields-*` cases under `tests/kustomize/builds/`, built by `kubectl kustomize` and by the
//! fields transformers (`cdtarget::kustomize::fields`) applied in kustomize's order (labels,
//! annotations, replicas, images) over the documents of the kustomization's `resources` files.
//! The cases use nothing else, so they run without the builder; they are whole-build corpus
//! cases too.
//!
//! `expect`, when present, says as in `cases/`:
//! - `error: TEXT`: both refuse, ours with a problem saying TEXT;
//! - `refused: TEXT`: kustomize builds something surprising or lossy (docs/kustomize.md says
//!   what); ours refuses with TEXT;
//! - `differs: POINTER`: on purpose, the objects differ at POINTER and nowhere else.

use std::path::{Path, PathBuf};

use cdtarget::kustomize::fields::annotations::Annotations;
use cdtarget::kustomize::fields::images::Images;
use cdtarget::kustomize::fields::labels::Labels;
use cdtarget::kustomize::fields::replicas::Replicas;
use cdtarget::kustomize::resource::{Origin, Resource};
use cdtarget::problem::Problem;
use serde_json::Value;

use crate::support::check_case;

fn builds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kustomize/builds")
}

/// The objects the fields transformers make of the case's resources.
fn ours(dir: &Path) -> Result<Vec<Value>, Vec<Problem>> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).expect("a file of the case");
    let kustomization = cdtarget::yaml::parse_one(&read("kustomization.yaml")).expect("the kustomization is YAML");
    let mut resources = Vec::new();
    for file in kustomization["resources"].as_array().expect("resources") {
        let file = file.as_str().expect("resources are file names");
        for document in cdtarget::yaml::parse_documents(&read(file)).expect("resources are YAML") {
            let origin = Origin::Document { file: file.to_owned(), index: document.index, line: document.line };
            resources.push(Resource::from_document(document.value, origin));
        }
    }
    let (labels, annotations, replicas, images) = match (
        Labels::read(&kustomization),
        Annotations::read(&kustomization),
        Replicas::read(&kustomization),
        Images::read(&kustomization),
    ) {
        (Ok(l), Ok(a), Ok(r), Ok(i)) => (l, a, r, i),
        (l, a, r, i) => {
            let mut problems = Vec::new();
            problems.extend(l.err().into_iter().flatten());
            problems.extend(a.err().into_iter().flatten());
            problems.extend(r.err().into_iter().flatten());
            problems.extend(i.err().into_iter().flatten());
            return Err(problems);
        }
    };
    // kustomize runs each transformer over every object before the next one.
    for resource in &mut resources {
        labels.apply(&mut resource.object).map_err(|p| vec![p])?;
    }
    for resource in &mut resources {
        annotations.apply(&mut resource.object).map_err(|p| vec![p])?;
    }
    replicas.apply_all(&mut resources)?;
    for resource in &mut resources {
        images.apply(&mut resource.object).map_err(|p| vec![p])?;
    }
    Ok(resources.into_iter().map(|r| r.object).collect())
}

/// Builds the case both ways and checks what its `expect` file says.
fn check(name: &str) {
    check_case(name, &builds_dir(), ours);
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { check(stringify!($name)); })*
        /// Every test above, by name.
        const CASES: &[&str] = &[$(stringify!($name)),*];
    };
}

cases!(
    fields_common_labels_on_workload_selectors,
    fields_common_labels_on_jobs_and_cronjobs,
    fields_common_labels_on_service_pdb_networkpolicy,
    fields_labels_without_selectors,
    fields_labels_include_templates,
    fields_labels_entries_then_common_labels,
    fields_labels_narrower_change_refused,
    fields_labels_number_value_is_an_error,
    fields_labels_custom_field_specs_refused,
    fields_common_annotations_on_templates,
    fields_nulls_as_kustomize_treats_them,
    fields_images_tags_digests_and_registries,
    fields_images_init_containers_anywhere,
    fields_images_entries_apply_in_order,
    fields_images_tag_suffix_refused,
    fields_images_name_dot_is_literal,
    fields_replicas_by_name,
    fields_replicas_unmatched_name_is_an_error,
    fields_replicas_without_count_refused,
);

#[test]
fn every_fields_case_directory_has_a_test() {
    let mut dirs: Vec<String> = std::fs::read_dir(builds_dir())
        .expect("the builds directory")
        .map(|e| e.expect("an entry").file_name().to_string_lossy().replace('-', "_"))
        .filter(|name| name.starts_with("fields_"))
        .collect();
    dirs.sort();
    let mut listed: Vec<String> = CASES.iter().map(|s| (*s).to_owned()).collect();
    listed.sort();
    assert_eq!(dirs, listed, "tests/kustomize/builds/fields-* and the cases! list differ");
}
