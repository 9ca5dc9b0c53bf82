//! What this process last applied for each registration, object by object, so that a new
//! revision sends only the objects it changed ([`unchanged`], pure) and a push lands after one
//! dry run and one apply instead of the whole set's.
//!
//! Memory only, on purpose: after a restart (or on a new leader) nothing is remembered and the
//! first reconcile of each registration sends its whole set, as before. An object remembered as
//! applied is still read back and compared before it is skipped (the drift check of an
//! unchanged revision), so a change made on the cluster since is put back as Git says.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::entry_of;
use crate::api::tenant_repository::InventoryEntry;

/// The SHA-256 of each object as it is sent, by identity.
pub(crate) type Digests = BTreeMap<InventoryEntry, [u8; 32]>;

/// The digests of `objects` as they are sent (objects without an identity are left out: the
/// apply refuses them anyway).
pub(crate) fn digests_of(objects: &[Value]) -> Digests {
    objects.iter().filter_map(|object| Some((entry_of(object)?, digest(object)))).collect()
}

fn digest(object: &Value) -> [u8; 32] {
    Sha256::digest(object.to_string().as_bytes()).into()
}

/// The objects of `objects` that were applied before exactly as they are now, according to
/// `before` (what this process applied last for the registration).
pub fn unchanged(objects: &[Value], before: &Digests) -> BTreeSet<InventoryEntry> {
    objects
        .iter()
        .filter_map(|object| {
            let entry = entry_of(object)?;
            (before.get(&entry) == Some(&digest(object))).then_some(entry)
        })
        .collect()
}

/// The digests applied last for each registration (`namespace/name`), shared by the
/// reconciles of one process.
#[derive(Clone, Default)]
pub struct AppliedObjects {
    by_registration: Arc<Mutex<HashMap<String, Arc<Digests>>>>,
}

impl AppliedObjects {
    /// What was applied last for `registration`, if this process remembers it.
    pub fn get(&self, registration: &str) -> Option<Arc<Digests>> {
        self.lock().get(registration).cloned()
    }

    /// `registration`'s whole set is applied as `digests` say.
    pub fn remember(&self, registration: &str, digests: Arc<Digests>) {
        self.lock().insert(registration.to_owned(), digests);
    }

    /// Nothing is known of `registration` any more (a failed or partial apply, a deletion): its
    /// next reconcile sends everything.
    pub fn forget(&self, registration: &str) {
        self.lock().remove(registration);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Digests>>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.by_registration.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config_map(name: &str, value: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "tenant-a"}, "data": {"rev": value}})
    }

    #[test]
    fn only_objects_sent_before_with_the_same_content_are_unchanged() {
        let before = digests_of(&[config_map("settings", "1"), config_map("other", "1")]);
        let now = [config_map("settings", "2"), config_map("other", "1"), config_map("new", "1")];
        let names: Vec<String> = unchanged(&now, &before).into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["other"]);
    }

    #[test]
    fn nothing_is_unchanged_for_a_registration_not_remembered_or_forgotten() {
        let applied = AppliedObjects::default();
        assert!(applied.get("platform/tenant-a").is_none());
        applied.remember("platform/tenant-a", Arc::new(digests_of(&[config_map("settings", "1")])));
        assert_eq!(applied.get("platform/tenant-a").map(|d| d.len()), Some(1));
        applied.forget("platform/tenant-a");
        assert!(applied.get("platform/tenant-a").is_none());
    }
}
