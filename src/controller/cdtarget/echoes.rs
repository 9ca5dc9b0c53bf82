//! The controller's own writes of children, as its watches see them come back.
//!
//! Every child a reconcile writes comes back through the children's watch, and kube-runtime then
//! reconciles its CDTarget again: on a first pass each CDTarget was reconciled once more for
//! nothing (a Secret read, a SubjectAccessReview, four child reads, a status write), a third of
//! the first pass's requests. A reconcile records the `resourceVersion` the API server gave each
//! child it wrote; the watch event carrying exactly that version is its echo and is dropped.
//! Anything else about the child (a status the Deployment controller writes, someone's edit, a
//! deletion) has another version, or arrives before the write returned, and triggers as before.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

/// The writes whose echo has not come back yet, by child.
#[derive(Clone, Default)]
pub struct Echoes {
    /// A hash of (kind, namespace, name) → the `resourceVersion` written. Only writes awaiting
    /// their echo are kept: the echo, or any later event of the child, takes the entry out.
    pending: Arc<Mutex<HashMap<u64, String>>>,
}

impl Echoes {
    /// A reconcile wrote child `kind` `namespace/name`; the API server answered with
    /// `resource_version`.
    pub fn wrote(&self, kind: &str, namespace: &str, name: &str, resource_version: String) {
        self.lock().insert(key(kind, namespace, name), resource_version);
    }

    /// Whether the watch event of child `kind` `namespace/name` at `resource_version` is the echo
    /// of the controller's last write of it (then it triggers nothing). Either way the child's
    /// entry is done with.
    pub fn is_echo(&self, kind: &str, namespace: &str, name: &str, resource_version: Option<&str>) -> bool {
        let written = self.lock().remove(&key(kind, namespace, name));
        written.is_some() && written.as_deref() == resource_version
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, String>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn key(kind: &str, namespace: &str, name: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    (kind, namespace, name).hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_event_of_the_version_written_is_an_echo_and_only_once() {
        let echoes = Echoes::default();
        echoes.wrote("Deployment", "team-a", "agents", "41".into());
        assert!(echoes.is_echo("Deployment", "team-a", "agents", Some("41")));
        // The Deployment controller's status write comes next: a change, not an echo.
        assert!(!echoes.is_echo("Deployment", "team-a", "agents", Some("42")));
    }

    #[test]
    fn a_change_by_someone_else_is_never_an_echo() {
        let echoes = Echoes::default();
        assert!(!echoes.is_echo("NetworkPolicy", "team-a", "agents", Some("7")));
        echoes.wrote("NetworkPolicy", "team-a", "agents", "8".into());
        // Someone edited it after the write: the watch shows that version, which triggers.
        assert!(!echoes.is_echo("NetworkPolicy", "team-a", "agents", Some("9")));
        // Another child with the same name is another entry.
        echoes.wrote("NetworkPolicy", "team-a", "agents", "10".into());
        assert!(!echoes.is_echo("Deployment", "team-a", "agents", Some("10")));
        assert!(echoes.is_echo("NetworkPolicy", "team-a", "agents", Some("10")));
    }
}
