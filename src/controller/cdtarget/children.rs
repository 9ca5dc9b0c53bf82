//! Children never take over: which of a CDTarget's rendered children may be written, and which
//! need writing at all.
//!
//! A child is created when no object of its kind and name exists, and updated only when the live
//! object's controller owner reference is this CDTarget (same uid). Any other live object (a
//! platform NetworkPolicy named like the CDTarget, another CDTarget's child, an object without
//! owner) is a [`Conflict`], and then nothing is written at all, not even the children without a
//! conflict: a CDTarget either has all its children or keeps what it had.
//!
//! Pure functions over what was read; the reconciler does the reads and the writes.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

/// A rendered child and its live copy, as read just before the decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// Kind of the child, e.g. `NetworkPolicy`.
    pub kind: String,
    /// Namespace of the child (the CDTarget's).
    pub namespace: String,
    /// Name of the child.
    pub name: String,
    /// The rendered object, as it would be applied.
    pub desired: Value,
    /// The live object (`None`: it does not exist).
    pub live: Option<Value>,
}

/// What to send for one child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// The live object already holds every rendered field: nothing.
    Nothing,
    /// The child does not exist: apply it (the API server creates it).
    Create,
    /// The child is ours but drifted: apply it, on condition that it is still the version read
    /// (`metadata.resourceVersion`), so that an object replaced meanwhile is never taken over.
    Update {
        /// The resourceVersion of the live object the ownership was checked on.
        resource_version: Option<String>,
    },
}

/// A live object with a child's kind and name that is not controlled by this CDTarget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// Kind of the object.
    pub kind: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
    /// Who controls the object instead.
    pub owner: Owner,
}

/// Who owns an object that a child would take over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// No owner reference at all (e.g. created by the platform team or by hand).
    Nobody,
    /// A controller owner reference to another object (another CDTarget, or anything else).
    Controller {
        /// Its kind.
        kind: String,
        /// Its name (owners live in the same namespace).
        name: String,
        /// Its uid.
        uid: String,
    },
    /// Owner references, none of which is a controller.
    NoController {
        /// `Kind name` of each owner.
        owners: Vec<String>,
    },
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Nobody => f.write_str("it has no owner"),
            Owner::Controller { kind, name, uid } => write!(f, "it is controlled by {kind} {name} (uid {uid})"),
            Owner::NoController { owners } => write!(f, "it has no controller (owners: {})", owners.join(", ")),
        }
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{} already exists and is not a child of this CDTarget: {}",
            self.kind, self.namespace, self.name, self.owner
        )
    }
}

/// What to send for each of `children` (in their order), or every conflict when one of them
/// exists without being controlled by the CDTarget with `uid`. A CDTarget without a uid (not
/// read from the cluster) controls nothing.
pub fn plan(children: &[Observed], uid: Option<&str>) -> Result<Vec<Write>, Vec<Conflict>> {
    let mut writes = Vec::with_capacity(children.len());
    let mut conflicts = Vec::new();
    for child in children {
        let Some(live) = &child.live else {
            writes.push(Write::Create);
            continue;
        };
        let meta = metadata_of(live);
        match controller_of(&meta) {
            Some(owner) if uid.is_some_and(|uid| owner.uid == uid) => {
                if crate::apply::drift::live_matches(&child.desired, live) {
                    writes.push(Write::Nothing);
                } else {
                    writes.push(Write::Update { resource_version: meta.resource_version.clone() });
                }
            }
            _ => conflicts.push(Conflict {
                kind: child.kind.clone(),
                namespace: child.namespace.clone(),
                name: child.name.clone(),
                owner: owner_of(&meta),
            }),
        }
    }
    if conflicts.is_empty() { Ok(writes) } else { Err(conflicts) }
}

/// The condition message for `conflicts`: each object and its owner, and what to do.
pub(crate) fn conflict_message(conflicts: &[Conflict]) -> String {
    let each = conflicts.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    format!(
        "{each}. Nothing was applied (no child is written while one would take over another object); \
         rename the CDTarget (its children are named after it), or have the owner of that object remove it"
    )
}

/// The controller owner reference of an object, if it has one.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|o| o.controller == Some(true))
}

fn owner_of(meta: &ObjectMeta) -> Owner {
    if let Some(owner) = controller_of(meta) {
        return Owner::Controller { kind: owner.kind.clone(), name: owner.name.clone(), uid: owner.uid.clone() };
    }
    match meta.owner_references.as_deref() {
        None | Some([]) => Owner::Nobody,
        Some(owners) => {
            Owner::NoController { owners: owners.iter().map(|o| format!("{} {}", o.kind, o.name)).collect() }
        }
    }
}

/// `metadata` of a live object; an unreadable one has no owner (and so is never taken over).
pub(super) fn metadata_of(live: &Value) -> ObjectMeta {
    live.get("metadata").cloned().and_then(|m| serde_json::from_value(m).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const UID: &str = "uid-of-this-cdtarget";

    fn child(live: Option<Value>) -> Observed {
        Observed {
            kind: "NetworkPolicy".into(),
            namespace: "team-a".into(),
            name: "default-deny-all".into(),
            desired: json!({"spec": {"policyTypes": ["Egress"]}}),
            live,
        }
    }

    fn live(owners: Value, policy_types: &str) -> Option<Value> {
        Some(json!({
            "metadata": {"name": "default-deny-all", "resourceVersion": "7", "ownerReferences": owners},
            "spec": {"policyTypes": [policy_types]},
        }))
    }

    fn reference(uid: &str, controller: bool) -> Value {
        json!({"apiVersion": "cdtarget.io/v1alpha1", "kind": "CDTarget", "name": "other", "uid": uid, "controller": controller})
    }

    #[test]
    fn an_absent_child_is_created_and_an_owned_one_is_updated_only_when_it_drifted() {
        let owned = json!([reference(UID, true)]);
        let plan = plan(&[child(None), child(live(owned.clone(), "Egress")), child(live(owned, "Ingress"))], Some(UID));
        assert_eq!(plan, Ok(vec![Write::Create, Write::Nothing, Write::Update { resource_version: Some("7".into()) }]));
    }

    #[test]
    fn an_object_without_owner_is_a_conflict_naming_it_and_nothing_is_written() {
        let platform = child(Some(json!({"metadata": {"name": "default-deny-all"}, "spec": {}})));
        let conflicts = plan(&[child(None), platform], Some(UID)).unwrap_err();
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].owner, Owner::Nobody);
        let message = conflict_message(&conflicts);
        assert!(message.starts_with("NetworkPolicy team-a/default-deny-all already exists"), "{message}");
        assert!(message.contains("no owner") && message.contains("rename the CDTarget"), "{message}");
    }

    #[test]
    fn an_object_controlled_by_another_cdtarget_is_a_conflict_even_with_the_same_name() {
        let conflicts = plan(&[child(live(json!([reference("another-uid", true)]), "Egress"))], Some(UID)).unwrap_err();
        let expected = Owner::Controller { kind: "CDTarget".into(), name: "other".into(), uid: "another-uid".into() };
        assert_eq!(conflicts[0].owner, expected);
        assert!(conflict_message(&conflicts).contains("controlled by CDTarget other (uid another-uid)"));
    }

    #[test]
    fn our_uid_as_a_mere_owner_is_not_control() {
        let conflicts = plan(&[child(live(json!([reference(UID, false)]), "Egress"))], Some(UID)).unwrap_err();
        assert_eq!(conflicts[0].owner, Owner::NoController { owners: vec!["CDTarget other".into()] });
    }

    #[test]
    fn a_cdtarget_without_uid_controls_nothing() {
        assert!(plan(&[child(live(json!([reference(UID, true)]), "Egress"))], None).is_err());
        assert_eq!(plan(&[child(None)], None), Ok(vec![Write::Create]));
    }
}
