//! The children a CDTarget no longer renders, and which of them may be deleted.
//!
//! A CDTarget's status records the children it applied (`status.inventory`). When its render
//! changes shape (KEDA went away: no ScaledObject and no TriggerAuthentication any more), a
//! child recorded there that the render no longer holds is deleted, but only when the live
//! object's controller owner reference is this CDTarget's uid: the inventory is in the status,
//! which a tenant may be able to write, so an entry is only ever a place to look, never a reason
//! to delete. A foreign object of that kind and name (one a tenant created, another CDTarget's
//! child, an object without owner) is left alone and not reported.
//!
//! Only kinds a CDTarget may stop rendering are ever looked up ([`ChildKind::may_be_dropped`]:
//! the kinds the controller's RBAC may delete), and at most [`MOST_DROPPED`] children per
//! reconcile, whatever the inventory holds.
//!
//! A CDTarget whose children were written before the inventory existed has none: then every
//! such kind of the table named after the CDTarget that the render does not hold is looked up
//! instead (children have always been named after their CDTarget), with the same
//! owner rule. Once the children are written, the inventory is recorded and used from then on.
//!
//! Pure functions over what was read; [`super::execute`] does the reads and the deletions.

use serde_json::Value;

use super::children::controller_of;
use crate::api::ChildReference;
use crate::api::names;
use crate::render::{ChildKind, Children};

/// A child the CDTarget may have applied and no longer renders: to be looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// Its kind (one of the table's: nothing else is ever looked up).
    pub kind: ChildKind,
    /// Its name, in the CDTarget's namespace.
    pub name: String,
}

/// A deletion of a child no longer rendered, guarded by the live object it was decided on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deletion {
    /// Its kind.
    pub kind: ChildKind,
    /// Its name, in the CDTarget's namespace.
    pub name: String,
    /// The live object's `metadata.uid`: a newer object of the same name is never deleted.
    pub uid: String,
    /// The live object's `metadata.resourceVersion`: an object changed since its owner was
    /// checked (its owner reference removed, say) is not deleted.
    pub resource_version: Option<String>,
}

/// The reference recorded in the inventory for a child of `kind` named `name`.
pub fn reference(kind: ChildKind, name: &str) -> ChildReference {
    ChildReference { api_version: kind.api_version().to_owned(), kind: kind.kind().to_owned(), name: name.to_owned() }
}

/// The most children [`dropped`] returns, and so the most reads a reconcile makes for children
/// no longer rendered: one per kind of the table. A CDTarget renders at most one child of each
/// kind, so an inventory it recorded never needs more; one tampered with (thousands of entries,
/// or one entry repeated) costs no more than this many reads per reconcile.
pub(crate) const MOST_DROPPED: usize = ChildKind::ALL.len();

/// The children to look up: each entry of `inventory` whose `apiVersion` and `kind` are a kind
/// of the table a CDTarget may stop rendering ([`ChildKind::may_be_dropped`]: the only kinds the
/// controller may delete) and whose name is an object name (so it can only mean an object of the
/// CDTarget's namespace), that `rendered` no longer holds. `None` (a CDTarget from before the
/// inventory): every such kind named `target_name` that `rendered` does not hold. Each child
/// once, in the order of the inventory (then the table), at most [`MOST_DROPPED`] of them.
pub fn dropped(inventory: Option<&[ChildReference]>, target_name: &str, rendered: &Children) -> Vec<Dropped> {
    let candidates: Box<dyn Iterator<Item = Dropped> + '_> = match inventory {
        Some(entries) => Box::new(entries.iter().filter_map(|entry| {
            let kind = ChildKind::of(&entry.api_version, &entry.kind)?;
            names::dns1123_subdomain(&entry.name).ok()?;
            Some(Dropped { kind, name: entry.name.clone() })
        })),
        None => Box::new(ChildKind::ALL.into_iter().map(|kind| Dropped { kind, name: target_name.to_owned() })),
    };
    let mut dropped: Vec<Dropped> = Vec::new();
    for candidate in candidates.filter(|candidate| candidate.kind.may_be_dropped()) {
        if dropped.len() == MOST_DROPPED {
            break;
        }
        if !rendered.contains(candidate.kind, &candidate.name) && !dropped.contains(&candidate) {
            dropped.push(candidate);
        }
    }
    dropped
}

/// The deletions among the `found` children (each with its live object as read, `None` when it
/// does not exist): those whose live object's controller owner reference has `uid`, the
/// CDTarget's. A CDTarget without a uid (not read from the cluster) controls nothing, and so
/// deletes nothing.
pub fn deletions(found: &[(Dropped, Option<Value>)], uid: Option<&str>) -> Vec<Deletion> {
    let Some(uid) = uid.filter(|uid| !uid.is_empty()) else { return Vec::new() };
    found
        .iter()
        .filter_map(|(child, live)| {
            let meta = super::children::metadata_of(live.as_ref()?);
            let ours = controller_of(&meta).is_some_and(|owner| owner.uid == uid);
            let live_uid = meta.uid.clone().filter(|_| ours)?;
            Some(Deletion {
                kind: child.kind,
                name: child.name.clone(),
                uid: live_uid,
                resource_version: meta.resource_version.clone(),
            })
        })
        .collect()
}

/// The inventory after every child of `rendered` was written and every deletion done.
pub fn recorded(rendered: &Children) -> Vec<ChildReference> {
    rendered.iter().map(|child| reference(child.kind(), &child.name())).collect()
}

/// The inventory after a write that failed part-way: what may exist now, so that nothing is
/// lost (an entry too many costs a lookup, an entry too few an orphan). Every rendered child
/// (it may have been written), then every entry of `previous` (a deletion that failed is tried
/// again). A CDTarget from before the inventory keeps none: its next reconcile looks up every
/// kind named after it again.
pub(crate) fn after_failure(
    previous: Option<&[ChildReference]>,
    rendered: Option<&Children>,
) -> Option<Vec<ChildReference>> {
    let previous = previous?;
    let mut inventory = rendered.map(recorded).unwrap_or_default();
    for entry in previous {
        if !inventory.contains(entry) {
            inventory.push(entry.clone());
        }
    }
    Some(inventory)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::CDTarget;
    use crate::api::keda::KedaVersion;
    use crate::policy::Policy;
    use crate::render::{Scaling, SecretDigests};

    const UID: &str = "uid-of-this-cdtarget";

    fn rendered(scaling: Scaling) -> Children {
        crate::render::render(
            &CDTarget::test().with_ips(["10.1.2.3"]),
            &Policy::default(),
            &SecretDigests::new(),
            scaling,
        )
        .expect("renders")
    }

    fn name() -> String {
        CDTarget::test().metadata.name.clone().expect("a name")
    }

    fn keda_inventory() -> Vec<ChildReference> {
        recorded(&rendered(Scaling::Keda(KedaVersion::NEWEST_SUPPORTED)))
    }

    fn live(owner_uid: Option<&str>, controller: bool) -> Option<Value> {
        let owners = owner_uid.map(|uid| {
            json!([{"apiVersion": "cdtarget.io/v1alpha1", "kind": "CDTarget", "name": "agents", "uid": uid, "controller": controller}])
        });
        Some(
            json!({"metadata": {"name": "agents", "uid": "live-uid", "resourceVersion": "9", "ownerReferences": owners}}),
        )
    }

    #[test]
    fn the_keda_children_recorded_and_no_longer_rendered_are_looked_up() {
        let dropped = dropped(Some(&keda_inventory()), &name(), &rendered(Scaling::Fixed));
        let kinds: Vec<ChildKind> = dropped.iter().map(|d| d.kind).collect();
        assert_eq!(kinds, [ChildKind::TriggerAuthentication, ChildKind::ScaledObject]);
        assert!(dropped.iter().all(|d| d.name == name()));
        assert!(
            super::dropped(Some(&keda_inventory()), &name(), &rendered(Scaling::Keda(KedaVersion::NEWEST_SUPPORTED)))
                .is_empty()
        );
    }

    #[test]
    fn a_cdtarget_from_before_the_inventory_looks_up_every_kind_named_after_it() {
        let dropped = dropped(None, &name(), &rendered(Scaling::Fixed));
        assert_eq!(
            dropped,
            [
                Dropped { kind: ChildKind::TriggerAuthentication, name: name() },
                Dropped { kind: ChildKind::ScaledObject, name: name() },
                Dropped { kind: ChildKind::ScaledJob, name: name() }
            ]
        );
        assert!(super::dropped(Some(&[]), &name(), &rendered(Scaling::Fixed)).is_empty(), "an empty inventory is one");
    }

    #[test]
    fn entries_of_other_kinds_or_naming_another_namespace_are_never_looked_up() {
        let entries = [
            ChildReference { api_version: "v1".into(), kind: "Secret".into(), name: "azp-token".into() },
            ChildReference { api_version: "apps/v1".into(), kind: "ScaledObject".into(), name: "agents".into() },
            ChildReference {
                api_version: "keda.sh/v1alpha1".into(),
                kind: "ScaledObject".into(),
                name: "team-b/agents".into(),
            },
            ChildReference {
                api_version: "keda.sh/v1alpha1".into(),
                kind: "ScaledObject".into(),
                name: "../../x".into(),
            },
            ChildReference { api_version: "keda.sh/v1alpha1".into(), kind: "ScaledObject".into(), name: String::new() },
        ];
        assert!(dropped(Some(&entries), &name(), &rendered(Scaling::Fixed)).is_empty());
    }

    #[test]
    fn only_a_child_whose_controller_is_this_cdtarget_is_deleted_guarded_by_its_uid_and_version() {
        let child = || Dropped { kind: ChildKind::ScaledObject, name: "agents".into() };
        let found = [(child(), live(Some(UID), true))];
        let expected = Deletion {
            kind: ChildKind::ScaledObject,
            name: "agents".into(),
            uid: "live-uid".into(),
            resource_version: Some("9".into()),
        };
        assert_eq!(deletions(&found, Some(UID)), [expected]);
        assert!(deletions(&[(child(), None)], Some(UID)).is_empty(), "gone already: nothing to delete");
        assert!(deletions(&found, None).is_empty(), "a CDTarget without uid controls nothing");
    }

    #[test]
    fn a_tenants_object_with_a_dropped_childs_name_is_never_deleted() {
        // A tenant pre-created a ScaledObject with the child's name: no owner, another
        // controller, or this CDTarget as a mere (non-controller) owner.
        let child = || Dropped { kind: ChildKind::ScaledObject, name: "agents".into() };
        for live in [live(None, false), live(Some("another-uid"), true), live(Some(UID), false)] {
            assert!(deletions(&[(child(), live.clone())], Some(UID)).is_empty(), "{live:?}");
        }
    }

    #[test]
    fn an_inventory_entry_tampered_to_point_at_another_object_deletes_nothing() {
        // The status names another CDTarget's child (same kind, another name): it is looked up,
        // and its owner stops it.
        let tampered = [ChildReference {
            api_version: "keda.sh/v1alpha1".into(),
            kind: "ScaledObject".into(),
            name: "team-b-agents".into(),
        }];
        let dropped = dropped(Some(&tampered), &name(), &rendered(Scaling::Keda(KedaVersion::NEWEST_SUPPORTED)));
        assert_eq!(dropped, [Dropped { kind: ChildKind::ScaledObject, name: "team-b-agents".into() }]);
        let found: Vec<_> = dropped.into_iter().map(|d| (d, live(Some("uid-of-team-b"), true))).collect();
        assert!(deletions(&found, Some(UID)).is_empty());
    }

    #[test]
    fn the_network_policy_a_cdtarget_never_stops_rendering_is_never_looked_up() {
        // Not even one this CDTarget controls: the controller may not delete it
        // (deploy/rbac.yaml), and a refused deletion would fail every reconcile. A Deployment is
        // looked up once no longer rendered (a switch to Job mode).
        let keda = rendered(Scaling::Keda(KedaVersion::NEWEST_SUPPORTED));
        let entries = [
            ChildReference { api_version: "apps/v1".into(), kind: "Deployment".into(), name: "old-agents".into() },
            ChildReference {
                api_version: "networking.k8s.io/v1".into(),
                kind: "NetworkPolicy".into(),
                name: "old-agents".into(),
            },
        ];
        let looked_up: Vec<ChildKind> = dropped(Some(&entries), &name(), &keda).iter().map(|d| d.kind).collect();
        assert_eq!(looked_up, [ChildKind::Deployment]);
        let fallback: Vec<ChildKind> = dropped(None, "renamed", &keda).iter().map(|d| d.kind).collect();
        assert_eq!(
            fallback,
            [ChildKind::TriggerAuthentication, ChildKind::Deployment, ChildKind::ScaledObject, ChildKind::ScaledJob],
            "only the droppable kinds"
        );
    }

    #[test]
    fn a_tampered_inventory_costs_at_most_one_read_per_kind_whatever_it_holds() {
        // Ten thousand distinct entries, and one entry repeated ten thousand times.
        let entry =
            |name: String| ChildReference { api_version: "keda.sh/v1alpha1".into(), kind: "ScaledObject".into(), name };
        let many: Vec<ChildReference> = (0..10_000).map(|i| entry(format!("agents-{i}"))).collect();
        let looked_up = dropped(Some(&many), &name(), &rendered(Scaling::Fixed));
        assert_eq!(looked_up.len(), MOST_DROPPED);
        assert_eq!(looked_up[0], Dropped { kind: ChildKind::ScaledObject, name: "agents-0".into() }, "in order");
        let repeated = vec![entry("agents".into()); 10_000];
        let looked_up = dropped(Some(&repeated), &name(), &rendered(Scaling::Fixed));
        assert_eq!(looked_up, [Dropped { kind: ChildKind::ScaledObject, name: "agents".into() }], "each child once");
        // The children a legitimate inventory holds still fit.
        assert!(recorded(&rendered(Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))).len() <= MOST_DROPPED);
    }

    #[test]
    fn a_failed_write_keeps_every_entry_so_a_failed_deletion_is_tried_again() {
        let previous = keda_inventory();
        let after = after_failure(Some(&previous), Some(&rendered(Scaling::Fixed))).expect("an inventory");
        assert_eq!(after.len(), 4, "{after:?}");
        assert_eq!(after[..2], recorded(&rendered(Scaling::Fixed))[..], "the rendered children first");
        assert_eq!(after_failure(None, Some(&rendered(Scaling::Fixed))), None, "no inventory yet: none recorded");
    }
}
