//! `replicas` of a kustomization.

use serde_json::Value;

use crate::problem::Problem;

/// `replicas` of one kustomization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replicas {}

impl Replicas {
    /// Reads `replicas` from a kustomization.
    pub fn read(kustomization: &Value) -> Result<Replicas, Vec<Problem>> {
        let _ = kustomization;
        Ok(Replicas {})
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        true
    }

    /// Sets the replicas of one object, which answers to `answers_to(name)` for its current and
    /// earlier names.
    pub fn apply(&self, object: &mut Value, answers_to: &dyn Fn(&str) -> bool) -> Result<(), Problem> {
        let _ = (object, answers_to);
        Ok(())
    }
}
