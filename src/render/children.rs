//! The children of a CDTarget as a list of kind-tagged objects, and the one table of the kinds a
//! child may have ([`ChildKind`]).
//!
//! Everything that handles children by kind works from this table: the renderer returns a
//! [`Children`] list, the reconciler reads, writes and (when a kind is no longer rendered)
//! deletes children by their [`ChildKind`], and the controller's watches are one per kind of the
//! table. A CDTarget that changes its shape (KEDA going away, or another mode rendering other
//! kinds) renders another list; what is no longer in it is found in the CDTarget's inventory.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::ApiResource;
use serde::Serialize;
use serde_json::Value;

use crate::api::keda::{ScaledJob, ScaledObject, TriggerAuthentication};

/// A kind of child a CDTarget may render. The order of the variants is the order children are
/// applied in: the TriggerAuthentication before the ScaledObject that uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChildKind {
    /// KEDA's credentials for the scaler (`keda.sh/v1alpha1`).
    TriggerAuthentication,
    /// The agents' egress (`networking.k8s.io/v1`).
    NetworkPolicy,
    /// The agents (`apps/v1`).
    Deployment,
    /// KEDA's autoscaler of the agent Deployment (`keda.sh/v1alpha1`, Deployment mode).
    ScaledObject,
    /// KEDA's starter of one agent Job per queued pipeline job (`keda.sh/v1alpha1`, Job mode).
    ScaledJob,
}

impl ChildKind {
    /// Every kind of child, in the order children are applied.
    pub const ALL: [ChildKind; 5] = [
        ChildKind::TriggerAuthentication,
        ChildKind::NetworkPolicy,
        ChildKind::Deployment,
        ChildKind::ScaledObject,
        ChildKind::ScaledJob,
    ];

    /// The API resource of the kind (compiled in: the types name it exactly).
    pub fn resource(self) -> ApiResource {
        match self {
            ChildKind::TriggerAuthentication => ApiResource::erase::<TriggerAuthentication>(&()),
            ChildKind::NetworkPolicy => ApiResource::erase::<NetworkPolicy>(&()),
            ChildKind::Deployment => ApiResource::erase::<Deployment>(&()),
            ChildKind::ScaledObject => ApiResource::erase::<ScaledObject>(&()),
            ChildKind::ScaledJob => ApiResource::erase::<ScaledJob>(&()),
        }
    }

    /// `kind`, e.g. `NetworkPolicy`.
    pub fn kind(self) -> &'static str {
        match self {
            ChildKind::TriggerAuthentication => "TriggerAuthentication",
            ChildKind::NetworkPolicy => "NetworkPolicy",
            ChildKind::Deployment => "Deployment",
            ChildKind::ScaledObject => "ScaledObject",
            ChildKind::ScaledJob => "ScaledJob",
        }
    }

    /// `apiVersion`, e.g. `networking.k8s.io/v1`.
    pub fn api_version(self) -> &'static str {
        match self {
            ChildKind::TriggerAuthentication | ChildKind::ScaledObject | ChildKind::ScaledJob => "keda.sh/v1alpha1",
            ChildKind::NetworkPolicy => "networking.k8s.io/v1",
            ChildKind::Deployment => "apps/v1",
        }
    }

    /// Whether the kind exists only where KEDA's CRDs are installed (its watch is started only
    /// then).
    pub fn needs_keda(self) -> bool {
        matches!(self, ChildKind::TriggerAuthentication | ChildKind::ScaledObject | ChildKind::ScaledJob)
    }

    /// Whether a CDTarget may stop rendering a child of this kind, so that the reconciler
    /// deletes one it controls: KEDA's kinds when KEDA goes away, the Deployment and the
    /// ScaledObject when `spec.mode` becomes `Job`, the ScaledJob when it becomes `Deployment`.
    /// These are the only kinds it ever deletes, and exactly the kinds the controller's RBAC
    /// (`deploy/rbac.yaml`) grants `delete` on (`tests/foundation/deploy.rs` checks both ways).
    /// Only the egress NetworkPolicy is rendered in every shape.
    pub fn may_be_dropped(self) -> bool {
        !matches!(self, ChildKind::NetworkPolicy)
    }

    /// The kind of the table with this `apiVersion` and `kind`, if any.
    pub fn of(api_version: &str, kind: &str) -> Option<ChildKind> {
        ChildKind::ALL.into_iter().find(|k| k.api_version() == api_version && k.kind() == kind)
    }
}

/// One rendered child, tagged with its kind. Serializes as the object itself.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Child {
    /// See [`ChildKind::TriggerAuthentication`].
    TriggerAuthentication(TriggerAuthentication),
    /// See [`ChildKind::NetworkPolicy`].
    NetworkPolicy(NetworkPolicy),
    /// See [`ChildKind::Deployment`] (boxed: by far the largest).
    Deployment(Box<Deployment>),
    /// See [`ChildKind::ScaledObject`].
    ScaledObject(ScaledObject),
    /// See [`ChildKind::ScaledJob`] (boxed: it holds the whole pod template).
    ScaledJob(Box<ScaledJob>),
}

impl Child {
    /// Its kind.
    pub fn kind(&self) -> ChildKind {
        match self {
            Child::TriggerAuthentication(_) => ChildKind::TriggerAuthentication,
            Child::NetworkPolicy(_) => ChildKind::NetworkPolicy,
            Child::Deployment(_) => ChildKind::Deployment,
            Child::ScaledObject(_) => ChildKind::ScaledObject,
            Child::ScaledJob(_) => ChildKind::ScaledJob,
        }
    }

    /// Its `metadata.name`.
    pub fn name(&self) -> String {
        match self {
            Child::TriggerAuthentication(o) => o.name_any(),
            Child::NetworkPolicy(o) => o.name_any(),
            Child::Deployment(o) => o.name_any(),
            Child::ScaledObject(o) => o.name_any(),
            Child::ScaledJob(o) => o.name_any(),
        }
    }

    /// The JSON it is applied as (the object, `apiVersion` and `kind` included).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// The objects rendered for one CDTarget: a list of [`Child`]ren in the order they are applied
/// ([`ChildKind::ALL`]), at most one of each kind. Built only by the renderer (and unit tests);
/// nothing that reads them assumes a kind is there but the NetworkPolicy: Job mode renders no
/// Deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    list: Vec<Child>,
}

impl Children {
    /// The children of `list`, put in the order of application. Only the renderer builds them.
    pub(super) fn new(mut list: Vec<Child>) -> Self {
        list.sort_by_key(Child::kind);
        Children { list }
    }

    /// Children of any shape, for the unit tests of what reads them (a shape the renderer does
    /// not produce yet, such as one without a Deployment).
    #[cfg(test)]
    pub(crate) fn of(list: Vec<Child>) -> Self {
        Children::new(list)
    }

    /// Every child, in the order of application.
    pub fn iter(&self) -> std::slice::Iter<'_, Child> {
        self.list.iter()
    }

    /// The number of children.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there is no child (never, for a render).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether a child of `kind` named `name` is in the list.
    pub fn contains(&self, kind: ChildKind, name: &str) -> bool {
        self.list.iter().any(|child| child.kind() == kind && child.name() == name)
    }

    /// The child of `kind`, if rendered.
    pub fn get(&self, kind: ChildKind) -> Option<&Child> {
        self.list.iter().find(|child| child.kind() == kind)
    }

    /// The egress NetworkPolicy, if rendered (today always).
    pub fn network_policy(&self) -> Option<&NetworkPolicy> {
        self.list.iter().find_map(|c| if let Child::NetworkPolicy(o) = c { Some(o) } else { None })
    }

    /// The agent Deployment, if rendered (Deployment mode).
    pub fn deployment(&self) -> Option<&Deployment> {
        self.list.iter().find_map(|c| if let Child::Deployment(o) = c { Some(o.as_ref()) } else { None })
    }

    /// The KEDA ScaledObject (absent when KEDA is not used).
    pub fn scaled_object(&self) -> Option<&ScaledObject> {
        self.list.iter().find_map(|c| if let Child::ScaledObject(o) = c { Some(o) } else { None })
    }

    /// The KEDA ScaledJob (Job mode with KEDA).
    pub fn scaled_job(&self) -> Option<&ScaledJob> {
        self.list.iter().find_map(|c| if let Child::ScaledJob(o) = c { Some(o.as_ref()) } else { None })
    }

    /// The KEDA TriggerAuthentication (absent when KEDA is not used).
    pub fn trigger_authentication(&self) -> Option<&TriggerAuthentication> {
        self.list.iter().find_map(|c| if let Child::TriggerAuthentication(o) = c { Some(o) } else { None })
    }
}

impl<'a> IntoIterator for &'a Children {
    type Item = &'a Child;
    type IntoIter = std::slice::Iter<'a, Child>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_kind_as_its_type_does_and_finds_it_back() {
        for kind in ChildKind::ALL {
            let resource = kind.resource();
            assert_eq!((resource.kind.as_str(), resource.api_version.as_str()), (kind.kind(), kind.api_version()));
            assert_eq!(ChildKind::of(kind.api_version(), kind.kind()), Some(kind));
        }
        assert_eq!(ChildKind::of("v1", "Secret"), None);
        assert_eq!(ChildKind::of("apps/v1", "ScaledObject"), None, "kind and apiVersion go together");
        let keda: Vec<_> = ChildKind::ALL.into_iter().filter(|k| k.needs_keda()).collect();
        assert_eq!(keda, [ChildKind::TriggerAuthentication, ChildKind::ScaledObject, ChildKind::ScaledJob]);
        let droppable: Vec<_> = ChildKind::ALL.into_iter().filter(|k| k.may_be_dropped()).collect();
        assert_eq!(
            droppable,
            [ChildKind::TriggerAuthentication, ChildKind::Deployment, ChildKind::ScaledObject, ChildKind::ScaledJob]
        );
    }
}
