//! `commonLabels` and `labels` of a kustomization.

use serde_json::Value;

use crate::problem::Problem;

/// `commonLabels` and `labels` of one kustomization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Labels {}

impl Labels {
    /// Reads `commonLabels` and `labels` from a kustomization.
    pub fn read(kustomization: &Value) -> Result<Labels, Vec<Problem>> {
        let _ = kustomization;
        Ok(Labels {})
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        true
    }

    /// Applies them to one object.
    pub fn apply(&self, object: &mut Value) -> Result<(), Problem> {
        let _ = object;
        Ok(())
    }
}
