//! The native kustomize build (issue #15), in progress: this part is its patch engine.
//!
//! [`patch`] reads the patch fields of a kustomization (`patches`, `patchesStrategicMerge`,
//! `patchesJson6902`) and applies them to already-loaded objects as kustomize v5.5 does:
//! strategic merge with Kubernetes' patch merge keys ([`patch::schema`], generated from the
//! OpenAPI document), JSON 6902 ([`patch::json6902`]), and [`target`] selectors. Everything here
//! is a pure function over `serde_json::Value`s; nothing reads files but through the loader the
//! builder passes in. docs/kustomize.md says field by field what is supported and what is
//! refused.

pub mod patch;
pub mod target;
