//! The inventory: every object applied from a repository, recorded in the TenantRepository's
//! status, so that exactly those objects — and no others — are pruned when they leave Git.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::api::tenant_repository::InventoryEntry;
use crate::manifests::scope::apply_rank;

/// The inventory entry of an object (`apiVersion`, `kind`, namespace, name), if it has them all.
pub fn entry_of(object: &Value) -> Option<InventoryEntry> {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
    Some(InventoryEntry {
        api_version: text("/apiVersion")?,
        kind: text("/kind")?,
        namespace: text("/metadata/namespace")?,
        name: text("/metadata/name")?,
    })
}

/// The inventory of a set of objects, sorted and without duplicates.
pub fn inventory_of<'a>(objects: impl IntoIterator<Item = &'a Value>) -> Vec<InventoryEntry> {
    let unique: BTreeSet<InventoryEntry> = objects.into_iter().filter_map(entry_of).collect();
    unique.into_iter().collect()
}

/// What to delete: entries of `previous` that `current` no longer holds. An object counts as
/// still present when its group, kind, namespace and name match (a new API version of the same
/// object is not a deletion). Dependents go first: the reverse of the apply order.
pub fn prune_plan(previous: &[InventoryEntry], current: &[InventoryEntry]) -> Vec<InventoryEntry> {
    let kept: BTreeSet<(&str, &str, &str, &str)> = current.iter().map(identity).collect();
    let mut gone: Vec<InventoryEntry> = previous.iter().filter(|e| !kept.contains(&identity(e))).cloned().collect();
    gone.sort_by(|a, b| (apply_rank(&b.kind), &b.kind, &b.name).cmp(&(apply_rank(&a.kind), &a.kind, &a.name)));
    gone.dedup();
    gone
}

fn identity(entry: &InventoryEntry) -> (&str, &str, &str, &str) {
    let group = entry.api_version.rsplit_once('/').map_or("", |(group, _)| group);
    (group, entry.kind.as_str(), entry.namespace.as_str(), entry.name.as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// An entry in `team-a`.
    fn entry(api_version: &str, kind: &str, name: &str) -> InventoryEntry {
        InventoryEntry::test(api_version, kind, name)
    }

    #[test]
    fn inventory_is_sorted_and_unique() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "team-a"}});
        let target = json!({"apiVersion": "cdtarget.io/v1alpha1", "kind": "CDTarget", "metadata": {"name": "a", "namespace": "team-a"}});
        let inventory = inventory_of([&cm, &target, &cm]);
        assert_eq!(inventory, [entry("cdtarget.io/v1alpha1", "CDTarget", "a"), entry("v1", "ConfigMap", "b")]);
    }

    #[test]
    fn only_what_left_git_is_pruned_dependents_first() {
        let previous = [
            entry("v1", "ConfigMap", "settings"),
            entry("cdtarget.io/v1alpha1", "CDTarget", "agents"),
            entry("v1", "Secret", "kept"),
        ];
        let current = [entry("v1", "Secret", "kept")];
        assert_eq!(
            prune_plan(&previous, &current),
            [entry("cdtarget.io/v1alpha1", "CDTarget", "agents"), entry("v1", "ConfigMap", "settings")]
        );
    }

    #[test]
    fn a_new_api_version_of_the_same_object_is_not_pruned() {
        let previous = [entry("autoscaling/v1", "HorizontalPodAutoscaler", "web")];
        let current = [entry("autoscaling/v2", "HorizontalPodAutoscaler", "web")];
        assert!(prune_plan(&previous, &current).is_empty());
    }

    #[test]
    fn nothing_is_pruned_when_nothing_was_applied_before() {
        assert!(prune_plan(&[], &[entry("v1", "ConfigMap", "a")]).is_empty());
    }
}
