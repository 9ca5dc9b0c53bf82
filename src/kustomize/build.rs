//! The builder: a kustomization directory turned into the objects `kubectl kustomize` prints.
//!
//! SKELETON (issue #15, being written): the tree slice replaces this file.

use serde_json::Value;

use super::files::Files;
use super::resource::Resource;
use crate::problem::Problem;

/// The file names kustomize recognises as a kustomization, in the order it looks for them.
pub const KUSTOMIZATION_FILE_NAMES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// One kustomization file the build read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KustomizationFile {
    /// Its path, relative to the root.
    pub path: String,
    /// The `namespace` it sets, if any (the loader refuses one other than the tenant's).
    pub namespace: Option<String>,
}

/// What a build made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Build {
    /// The objects, in the order `kubectl kustomize` prints them.
    pub resources: Vec<Resource>,
    /// Every kustomization (and component) file read, outermost first.
    pub kustomizations: Vec<KustomizationFile>,
}

/// The kustomization file of directory `dir`, if it has one.
pub fn find_kustomization(files: &dyn Files, dir: &str) -> Result<Option<String>, String> {
    for name in KUSTOMIZATION_FILE_NAMES {
        let path = if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") };
        if files.stat(&path)? == Some(super::files::Kind::File) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// Builds the kustomization in directory `dir` (relative to the root of `files`).
pub fn build(files: &dyn Files, dir: &str) -> Result<Build, Vec<Problem>> {
    let _ = (files, Value::Null);
    Err(vec![Problem::field("", "the kustomize builder is not written yet").located(dir, None, None)])
}
