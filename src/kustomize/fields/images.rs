//! `images` of a kustomization.

use serde_json::Value;

use crate::problem::Problem;

/// `images` of one kustomization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Images {}

impl Images {
    /// Reads `images` from a kustomization.
    pub fn read(kustomization: &Value) -> Result<Images, Vec<Problem>> {
        let _ = kustomization;
        Ok(Images {})
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
