//! `commonAnnotations` of a kustomization.

use serde_json::Value;

use crate::problem::Problem;

/// `commonAnnotations` of one kustomization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Annotations {}

impl Annotations {
    /// Reads `commonAnnotations` from a kustomization.
    pub fn read(kustomization: &Value) -> Result<Annotations, Vec<Problem>> {
        let _ = kustomization;
        Ok(Annotations {})
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
