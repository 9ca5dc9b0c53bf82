//! The native kustomize build (issue #15): a kustomization directory turned into the objects
//! `kubectl kustomize` (kustomize v5.5) prints, as a documented subset (docs/kustomize.md).
//!
//! [`build`] walks the kustomization tree (resources, bases, components) through [`files`] and
//! runs kustomize's generators ([`generator`]) and transformers in its order: [`patch`] (strategic
//! merge and JSON 6902, [`target`] selectors), [`names`] (namespace, prefix/suffix, hash suffix,
//! name references) and [`fields`] (labels, annotations, images, replicas). Everything here is a
//! pure function over `serde_json::Value`s; nothing reads a file but through [`files::Files`],
//! which the loader gives.

pub mod build;
mod comparisons;
pub mod fields;
pub mod files;
pub mod generator;
pub mod names;
pub mod patch;
pub mod resource;
pub mod target;
