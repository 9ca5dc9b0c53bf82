//! Names and namespaces: `namespace`, `namePrefix`/`nameSuffix`, the content hash suffix, and
//! the name references kustomize updates after them.
//!
//! SKELETON (issue #15, being written): the names slice replaces the bodies.

use super::resource::Resource;
use crate::problem::Problem;

/// kustomize's namespace transformer: every namespaced object into `namespace`.
pub fn set_namespace(resources: &mut [Resource], namespace: &str) -> Result<(), Problem> {
    let _ = (resources, namespace);
    Err(Problem::field("namespace", "not written yet"))
}

/// kustomize's prefix and suffix transformers.
pub fn add_prefix_suffix(resources: &mut [Resource], prefix: &str, suffix: &str) -> Result<(), Problem> {
    let _ = (resources, prefix, suffix);
    Err(Problem::field("namePrefix", "not written yet"))
}

/// Appends the content hash to the names of the resources that need it.
pub fn add_hash_suffixes(resources: &mut [Resource]) -> Result<(), Problem> {
    let _ = resources;
    Err(Problem::field("", "not written yet"))
}

/// Updates every reference to a renamed object (kustomize's default name-reference
/// configuration), once, after the whole build.
pub fn fix_references(resources: &mut [Resource]) -> Result<(), Vec<Problem>> {
    let _ = resources;
    Err(vec![Problem::field("", "not written yet")])
}

/// Whether `resource` is named `name` now or was before a rename (kustomize matches patch
/// targets, `replicas` and generator merges by any of its names).
pub fn answers_to(resource: &Resource, name: &str) -> bool {
    resource.name() == name || resource.previous.iter().any(|p| p.name == name)
}
