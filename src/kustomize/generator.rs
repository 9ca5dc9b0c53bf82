//! `configMapGenerator`, `secretGenerator` and `generatorOptions`, and kustomize's content hash.
//!
//! SKELETON (issue #15, being written): the generators slice replaces the bodies.

use serde_json::Value;

use super::files::Files;
use super::resource::Resource;
use crate::problem::Problem;

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

/// Runs the generators of the kustomization at `kustomization_file` (relative to the root of
/// `files`; its directory is where generator files are read from).
pub fn generate(
    kustomization: &Value,
    kustomization_file: &str,
    files: &dyn Files,
) -> Result<Vec<Generated>, Vec<Problem>> {
    let _ = (kustomization, files);
    Err(vec![Problem::field("configMapGenerator", "generators are not written yet").located(
        kustomization_file,
        None,
        None,
    )])
}

/// Merges `generated` into, or replaces, `existing` as its behavior says.
pub fn combine(existing: &mut Resource, generated: Generated) -> Result<(), Problem> {
    let _ = (existing, generated);
    Err(Problem::field("behavior", "generators are not written yet"))
}

/// The suffix kustomize appends to a generated ConfigMap's or Secret's name.
pub fn content_hash(object: &Value) -> Result<String, String> {
    let _ = object;
    Err("generators are not written yet".into())
}
