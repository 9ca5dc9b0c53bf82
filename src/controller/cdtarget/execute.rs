//! Puts a plan's children in place: reads each child's live object, lets
//! [`super::children::plan`] decide whether they may be written at all (a child never takes over
//! an object it does not control), and hands the writes to the one writer.

use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;

use super::Error;
use super::agents;
use super::children::{self, Conflict, Write as ChildWrite};
use super::echoes::Echoes;
use crate::api::CDTarget;
use crate::apply::server_side::{APPLYING, ApplyError};
use crate::apply::{Done, Write, WriteError, Writer};
use crate::render::Children;

/// What [`write_children`] did.
#[derive(Debug)]
pub enum Written {
    /// Nothing was planned.
    Nothing,
    /// Every child is in place (written where it was missing or had drifted); the agents'
    /// Deployment and ScaledObject as read before, for [`agents::health`].
    Children(agents::Observed),
    /// An object with a child's name is not ours: nothing was written.
    Conflicts(Vec<Conflict>),
}

/// Reads every child's live object, decides with [`children::plan`] whether the children may be
/// written at all, and writes those missing or drifted, in order (the TriggerAuthentication
/// before the ScaledObject using it).
#[tracing::instrument(name = "execute", skip_all)]
pub async fn write_children(
    writer: &Writer,
    echoes: &Echoes,
    namespace: &str,
    target: &CDTarget,
    children: &Children,
) -> Result<Written, Error> {
    let mut objects: Vec<(ApiResource, Value)> = Vec::new();
    if let Some(auth) = &children.trigger_authentication {
        objects.push(as_value(auth));
    }
    objects.push(as_value(&children.network_policy));
    objects.push(as_value(&children.deployment));
    if let Some(scaled) = &children.scaled_object {
        objects.push(as_value(scaled));
    }

    let mut observed = Vec::with_capacity(objects.len());
    for (resource, desired) in &objects {
        let name = desired.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let api: Api<DynamicObject> = Api::namespaced_with(writer.client().clone(), namespace, resource);
        let live = api.get_opt(&name).await.map_err(|source| {
            let refused = ApplyError {
                verb: APPLYING,
                kind: resource.kind.clone(),
                namespace: namespace.to_owned(),
                name: name.clone(),
                source,
            };
            Error::Apply(WriteError::from(refused))
        })?;
        observed.push(children::Observed {
            kind: resource.kind.clone(),
            namespace: namespace.to_owned(),
            name,
            desired: desired.clone(),
            live: live.and_then(|live| serde_json::to_value(live).ok()),
        });
    }
    let writes = match children::plan(&observed, target.meta().uid.as_deref()) {
        Ok(writes) => writes,
        Err(conflicts) => return Ok(Written::Conflicts(conflicts)),
    };
    let live = |kind: &str| observed.iter().find(|o| o.kind == kind).and_then(|o| o.live.clone());
    let mut agents = agents::Observed {
        deployment_name: format!("{namespace}/{}", children.deployment.metadata.name.as_deref().unwrap_or_default()),
        deployment: live("Deployment"),
        scaled_object: live("ScaledObject"),
        written: false,
    };

    for ((resource, desired), write) in objects.into_iter().zip(writes) {
        let resource_version = match write {
            ChildWrite::Nothing => continue,
            ChildWrite::Create => None,
            // The apply is refused (409) if the object changed since its owner was checked.
            ChildWrite::Update { resource_version } => resource_version,
        };
        // The agents' status as read no longer describes what the controllers now roll out.
        agents.written |= matches!(resource.kind.as_str(), "Deployment" | "ScaledObject");
        let name = desired.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let kind = resource.kind.clone();
        let write = Write::Child { resource, namespace: namespace.to_owned(), body: desired, resource_version };
        if let Done::ChildWritten { resource_version: Some(written) } =
            writer.execute(write).await.map_err(Error::Apply)?
        {
            echoes.wrote(&kind, namespace, &name, written);
        }
    }
    Ok(Written::Children(agents))
}

/// A child as its API resource (compiled-in kinds: their types name the resource exactly) and
/// the JSON it is applied as.
fn as_value<K>(object: &K) -> (ApiResource, Value)
where
    K: Resource<DynamicType = ()> + serde::Serialize,
{
    (ApiResource::erase::<K>(&()), serde_json::to_value(object).unwrap_or_default())
}
