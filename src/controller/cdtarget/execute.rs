//! Puts a plan's children in place: reads each child's live object, lets
//! [`super::children::plan`] decide whether they may be written at all (a child never takes over
//! an object it does not control), and hands the writes to the one writer; then deletes the
//! children no longer rendered that [`super::inventory`] finds this CDTarget controls.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::Error;
use super::agents;
use super::children::{self, Conflict, Write as ChildWrite};
use super::echoes::Echoes;
use super::inventory;
use crate::api::{CDTarget, ChildReference};
use crate::apply::server_side::{APPLYING, ApplyError, LISTING_JOBS_OF};
use crate::apply::{Done, Write, WriteError, Writer};
use crate::render::{ChildKind, Children};

/// What [`write_children`] did.
#[derive(Debug)]
pub enum Written {
    /// Nothing was planned.
    Nothing,
    /// Every child is in place (written where it was missing or had drifted), and every child
    /// no longer rendered that this CDTarget controlled is deleted.
    Children(Applied),
    /// An object with a child's name is not ours: nothing was written.
    Conflicts(Vec<Conflict>),
}

/// What a write of every child left.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Applied {
    /// The agents' Deployment and ScaledObject as read before, for [`agents::health`].
    pub agents: agents::Observed,
    /// The inventory to record: the children rendered ([`inventory::recorded`]).
    pub inventory: Vec<ChildReference>,
}

/// Reads every child's live object, decides with [`children::plan`] whether the children may be
/// written at all, writes those missing or drifted in order (the TriggerAuthentication before
/// the ScaledObject using it), then deletes the children no longer rendered that this CDTarget
/// controls ([`inventory`]).
#[tracing::instrument(name = "execute", skip_all)]
pub(crate) async fn write_children(
    writer: &Writer,
    echoes: &Echoes,
    namespace: &str,
    target: &CDTarget,
    children: &Children,
) -> Result<Written, Error> {
    let objects: Vec<(ChildKind, Value)> = children.iter().map(|child| (child.kind(), child.to_value())).collect();

    let mut observed = Vec::with_capacity(objects.len());
    for (kind, desired) in &objects {
        let name = desired.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let live = read(writer, namespace, *kind, &name).await?;
        observed.push(children::Observed {
            kind: kind.kind().to_owned(),
            namespace: namespace.to_owned(),
            name,
            desired: desired.clone(),
            live,
        });
    }
    let uid = target.meta().uid.as_deref();
    let writes = match children::plan(&observed, uid) {
        Ok(writes) => writes,
        Err(conflicts) => return Ok(Written::Conflicts(conflicts)),
    };
    let live = |kind: ChildKind| observed.iter().find(|o| o.kind == kind.kind()).and_then(|o| o.live.clone());
    let mut agents = agents::Observed {
        deployment_name: children
            .deployment()
            .map(|d| format!("{namespace}/{}", d.metadata.name.as_deref().unwrap_or_default())),
        deployment: live(ChildKind::Deployment),
        scaled_object: live(ChildKind::ScaledObject),
        written: false,
        scaled_job_name: children
            .scaled_job()
            .map(|j| format!("{namespace}/{}", j.metadata.name.as_deref().unwrap_or_default())),
        scaled_job: live(ChildKind::ScaledJob),
        agent_jobs: Vec::new(),
    };
    if let Some(scaled_job) = children.scaled_job() {
        agents.agent_jobs = agent_jobs(writer, namespace, &scaled_job.name_any()).await?;
    }

    for ((kind, desired), write) in objects.into_iter().zip(writes) {
        let resource_version = match write {
            ChildWrite::Nothing => continue,
            ChildWrite::Create => None,
            // The apply is refused (409) if the object changed since its owner was checked.
            ChildWrite::Update { resource_version } => resource_version,
        };
        // The agents' status as read no longer describes what the controllers now roll out.
        agents.written |= matches!(kind, ChildKind::Deployment | ChildKind::ScaledObject | ChildKind::ScaledJob);
        let name = desired.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let write = Write::Child {
            resource: kind.resource(),
            namespace: namespace.to_owned(),
            body: desired,
            resource_version,
        };
        if let Done::ChildWritten { resource_version: Some(written) } =
            writer.execute(write).await.map_err(Error::Apply)?
        {
            echoes.wrote(kind.kind(), namespace, &name, written);
        }
    }

    let previous = target.status.as_ref().and_then(|s| s.inventory.as_deref());
    let mut found = Vec::new();
    for dropped in inventory::dropped(previous, &target.name_any(), children) {
        let live = read(writer, namespace, dropped.kind, &dropped.name).await?;
        found.push((dropped, live));
    }
    for deletion in inventory::deletions(&found, uid) {
        let inventory::Deletion { kind, name, uid, resource_version } = deletion;
        let write = Write::DeleteChild {
            resource: kind.resource(),
            namespace: namespace.to_owned(),
            name: name.clone(),
            uid,
            resource_version,
        };
        if writer.execute(write).await.map_err(Error::Apply)? != Done::Objects(0) {
            tracing::info!(kind = kind.kind(), name, "deleted a child no longer rendered");
        }
    }
    Ok(Written::Children(Applied { agents, inventory: inventory::recorded(children) }))
}

/// The Jobs KEDA made for the ScaledJob `name` (KEDA's label on them; [`agents::job_health`]
/// counts only those the live ScaledJob controls), as JSON.
async fn agent_jobs(writer: &Writer, namespace: &str, name: &str) -> Result<Vec<Value>, Error> {
    let api: Api<Job> = Api::namespaced(writer.client().clone(), namespace);
    let params = ListParams::default().labels(&format!("{SCALED_JOB_LABEL}={name}"));
    let jobs = api.list(&params).await.map_err(|source| {
        let refused = ApplyError {
            verb: LISTING_JOBS_OF,
            kind: "ScaledJob".to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        };
        Error::Apply(WriteError::from(refused))
    })?;
    Ok(jobs.items.into_iter().filter_map(|job| serde_json::to_value(job).ok()).collect())
}

/// The label KEDA puts on every Job (and pod) of a ScaledJob: the ScaledJob's name.
pub(crate) const SCALED_JOB_LABEL: &str = "scaledjob.keda.sh/name";

/// The live object of the child of `kind` named `name`, as JSON (`None`: it does not exist, or
/// its kind is not served, as KEDA's once uninstalled).
async fn read(writer: &Writer, namespace: &str, kind: ChildKind, name: &str) -> Result<Option<Value>, Error> {
    let resource = kind.resource();
    let api: Api<DynamicObject> = Api::namespaced_with(writer.client().clone(), namespace, &resource);
    let live = api.get_opt(name).await.map_err(|source| {
        let refused = ApplyError {
            verb: APPLYING,
            kind: resource.kind.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        };
        Error::Apply(WriteError::from(refused))
    })?;
    Ok(live.and_then(|live| serde_json::to_value(live).ok()))
}
