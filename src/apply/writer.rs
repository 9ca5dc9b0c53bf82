//! The one writer: every write the controller makes is a [`Write`] (plain data a reconcile plan
//! produces), and [`Writer::execute`] is the one place that sends it, counts it and logs it.
//!
//! - Tenant objects are server-side applied and pruned **as the tenant** (an impersonating
//!   client per ServiceAccount), to the resource API discovery names for their kind
//!   ([`super::discovery`], cached and refreshed on a miss): never a guessed plural or scope.
//! - A CDTarget's children are server-side applied with the controller's field manager, pinned
//!   to the `resourceVersion` whose owner was checked (a changed object is refused with 409).
//! - A child a CDTarget no longer renders is deleted, guarded by the `uid` and `resourceVersion`
//!   of the live object whose controller owner reference was checked.
//! - Status is server-side applied on the `status` subresource.
//! - Finalizers are changed with a JSON patch whose `test` op holds the list as read, so a
//!   finalizer someone else added in between is never dropped (the patch fails and is retried).
//! - Secrets (the deploy key pair) are created, or merge-patched on rotation.
//! - A registration's `SyncStatus` (in its tenant namespace) is server-side applied as the
//!   controller, and deleted (guarded by its `uid`) when its registration is gone.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::discovery::Discovery;
use super::server_side::{self, ApplyError, ClientFor};
use crate::api::FIELD_MANAGER;
use crate::api::SyncStatus;
use crate::api::tenant_repository::InventoryEntry;
use crate::error::{Class, Classify};

/// One write, as a plan describes it.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Server-side apply of tenant objects as `user`, in order, stopping at the first refusal.
    TenantApply {
        /// The impersonated user (`system:serviceaccount:<namespace>:<name>`).
        user: String,
        /// The objects, each with `apiVersion`, `kind`, `metadata.name` and `metadata.namespace`.
        objects: Vec<Value>,
    },
    /// Deletion, as `user`, of objects that left Git, in order; gone objects count as deleted.
    TenantPrune {
        /// The impersonated user.
        user: String,
        /// What to delete.
        entries: Vec<InventoryEntry>,
    },
    /// Server-side apply of a CDTarget's child with the controller's field manager.
    Child {
        /// Where it goes (the compiled-in kinds of the children).
        resource: ApiResource,
        /// Its namespace.
        namespace: String,
        /// The object as rendered.
        body: Value,
        /// `Some`: the live object's version whose owner was checked; the apply is refused when
        /// the object changed since. `None`: the object did not exist.
        resource_version: Option<String>,
    },
    /// Deletion of a CDTarget's child that it no longer renders, guarded by the live object
    /// whose controller owner reference was checked: its `uid` and `resourceVersion` (an object
    /// replaced or changed since is not deleted: 409). One already gone counts as deleted.
    DeleteChild {
        /// Its kind (one of the children's).
        resource: ApiResource,
        /// Its namespace (the CDTarget's).
        namespace: String,
        /// Its name.
        name: String,
        /// The live object's `metadata.uid`.
        uid: String,
        /// The live object's `metadata.resourceVersion`.
        resource_version: Option<String>,
    },
    /// Server-side apply of `status` (the controller's field manager).
    Status {
        /// The kind whose status is written.
        resource: ApiResource,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The whole status.
        status: Value,
    },
    /// The finalizers of an object changed from `read` (as the reconcile saw them) to `wanted`.
    Finalizers {
        /// The kind of the object.
        resource: ApiResource,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The list as read; `None` when the object had none.
        read: Option<Vec<String>>,
        /// The object's `resourceVersion` as read (guards the case of no list).
        resource_version: Option<String>,
        /// The list wanted.
        wanted: Vec<String>,
    },
    /// Creation of a Secret; one that exists already is left as it is.
    CreateSecret {
        /// What the Secret is, for errors (`the deploy key`).
        what: &'static str,
        /// The Secret, with namespace and name.
        secret: Box<Secret>,
    },
    /// Server-side apply, with the controller's field manager, of a registration's `SyncStatus`
    /// in its tenant namespace: `object` (labels and spec) when given, then `status` (the status
    /// subresource) when given. Either may be left out when it did not change.
    SyncStatus {
        /// The tenant namespace (the registration's `spec.targetNamespace`).
        namespace: String,
        /// The registration's name.
        name: String,
        /// `apiVersion`, `kind`, `metadata` (name, namespace, labels) and `spec`.
        object: Option<Value>,
        /// The whole status.
        status: Option<Value>,
    },
    /// Deletion of a `SyncStatus` whose registration is gone or now targets another namespace;
    /// one already gone counts as deleted.
    DeleteSyncStatus {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The `uid` of the object judged stale: a newer object of the same name is left alone.
        uid: Option<String>,
    },
    /// A merge patch of a Secret.
    PatchSecret {
        /// What the write does, for errors (`writing the rotated key into`).
        what: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The merge patch.
        patch: Value,
    },
}

/// What an executed [`Write`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Objects applied or deleted (the tenant writes, the deletion of a stale `SyncStatus`).
    Objects(usize),
    /// The one object was written.
    Written,
    /// A `SyncStatus` was written; its uid, for Events regarding it (a new one has no other
    /// source of it yet: the watch has not seen it).
    SyncStatusWritten {
        /// `metadata.uid` as the API server returned it.
        uid: Option<String>,
    },
    /// [`Write::CreateSecret`] found the Secret there already.
    AlreadyExists,
    /// A [`Write::Child`] was applied.
    ChildWritten {
        /// `metadata.resourceVersion` as the API server returned it.
        resource_version: Option<String>,
    },
}

/// A write that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The client acting as the tenant could not be built.
    #[error("building the client for {user}: {source}")]
    Impersonate {
        /// The impersonated user.
        user: String,
        /// Why.
        #[source]
        source: Box<kube::Error>,
    },
    /// The API server refused the write.
    #[error(transparent)]
    Refused(Box<ApplyError>),
}

impl From<ApplyError> for WriteError {
    fn from(refused: ApplyError) -> Self {
        WriteError::Refused(Box::new(refused))
    }
}

impl Classify for ApplyError {
    fn class(&self) -> Class {
        self.source.class()
    }
}

impl Classify for WriteError {
    fn class(&self) -> Class {
        match self {
            WriteError::Impersonate { source, .. } => source.as_ref().class(),
            WriteError::Refused(refused) => refused.class(),
        }
    }
}

/// Told of every write sent: its verb (`apply`, `delete`, `status`, `finalizers`, `create`,
/// `patch`) and the kind written; and of every server-side dry run sent, as the verb
/// [`DRY_RUN`] (not a write: nothing is persisted; the metrics count it apart).
pub(crate) type WriteObserver = Arc<dyn Fn(&'static str, &str) + Send + Sync>;

/// Executes [`Write`]s: the controller's only way to change the cluster.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    tenants: ClientFor,
    discovery: Arc<Discovery>,
    observer: Option<WriteObserver>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl Writer {
    /// Writes through the controller's own `client`; tenant writes impersonate over it, and
    /// kinds are looked up in a discovery cache of its own.
    pub fn new(client: Client) -> Self {
        Writer {
            tenants: server_side::impersonating(client.clone()),
            discovery: Arc::new(Discovery::new(client.clone())),
            client,
            observer: None,
        }
    }

    /// Tenant writes go through the clients `tenants` gives (tests record what each user sends).
    pub fn with_tenants(mut self, tenants: ClientFor) -> Self {
        self.tenants = tenants;
        self
    }

    /// Kinds are resolved through `discovery` (shared with the reconciler's checks).
    pub fn with_discovery(mut self, discovery: Arc<Discovery>) -> Self {
        self.discovery = discovery;
        self
    }

    /// Every write sent is reported to `observer` (the metrics).
    pub fn with_observer(mut self, observer: WriteObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The discovery cache writes are resolved through.
    pub fn discovery(&self) -> &Arc<Discovery> {
        &self.discovery
    }

    /// The controller's own client (reads of the reconcilers).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The client acting as `user` (kept per user): reads of what the tenant applied, such as
    /// the health check of `spec.wait`, see exactly what the tenant may see.
    pub fn tenant(&self, user: &str) -> Result<Client, WriteError> {
        (self.tenants)(user)
            .map_err(|source| WriteError::Impersonate { user: user.to_owned(), source: Box::new(source) })
    }

    fn record(&self, verb: &'static str, kind: &str, namespace: &str, name: &str) {
        tracing::debug!(verb, kind, namespace, name, "wrote");
        if let Some(observer) = &self.observer {
            observer(verb, kind);
        }
    }

    /// The objects of `objects` whose live copy, read as `user`, is missing or no longer holds
    /// what they set ([`server_side::drifted`]): the only ones an unchanged revision re-applies.
    pub async fn drifted(&self, user: &str, objects: Vec<Value>) -> Result<Vec<Value>, WriteError> {
        let tenant = self.tenant(user)?;
        Ok(server_side::drifted(&tenant, &self.discovery, objects).await)
    }

    /// Server-side dry run of `objects` as `user` (`dryRun=All`, the tenant field manager,
    /// strict field validation and impersonation of the real apply): every object is sent and
    /// every refusal returned, in the order of `objects`; empty when the API server would accept
    /// them all. Nothing is written; each request is reported to the observer as [`DRY_RUN`].
    pub async fn dry_run(&self, user: &str, objects: &[Value]) -> Result<Vec<ApplyError>, WriteError> {
        let tenant = self.tenant(user)?;
        let sent = |object: &Value| {
            if let Some(entry) = super::entry_of(object) {
                self.record(DRY_RUN, &entry.kind, &entry.namespace, &entry.name);
            }
        };
        let answers = server_side::dry_run_all(&tenant, &self.discovery, objects, sent).await;
        Ok(answers.into_iter().filter_map(Result::err).collect())
    }

    /// Sends `write`.
    pub async fn execute(&self, write: Write) -> Result<Done, WriteError> {
        match write {
            Write::TenantApply { user, objects } => {
                let tenant = self.tenant(&user)?;
                let recorded = |object: &Value| {
                    if let Some(entry) = super::entry_of(object) {
                        self.record("apply", &entry.kind, &entry.namespace, &entry.name);
                    }
                };
                let applied = server_side::apply_all(&tenant, &self.discovery, &objects, recorded).await?;
                Ok(Done::Objects(applied))
            }
            Write::TenantPrune { user, entries } => {
                let tenant = self.tenant(&user)?;
                let recorded =
                    |entry: &InventoryEntry| self.record("delete", &entry.kind, &entry.namespace, &entry.name);
                let deleted = server_side::delete_all(&tenant, &self.discovery, &entries, recorded).await?;
                Ok(Done::Objects(deleted))
            }
            Write::Child { resource, namespace, mut body, resource_version } => {
                let name = body.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
                if let (Some(version), Some(meta)) = (resource_version, body.get_mut("metadata")) {
                    meta["resourceVersion"] = Value::String(version);
                }
                let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &namespace, &resource);
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let written = api
                    .patch(&name, &params, &Patch::Apply(&body))
                    .await
                    .map_err(|source| refused(server_side::APPLYING, &resource.kind, &namespace, &name, source))?;
                self.record("apply", &resource.kind, &namespace, &name);
                Ok(Done::ChildWritten { resource_version: written.metadata.resource_version })
            }
            Write::DeleteChild { resource, namespace, name, uid, resource_version } => {
                let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &namespace, &resource);
                let params = DeleteParams {
                    preconditions: Some(Preconditions { uid: Some(uid), resource_version }),
                    ..DeleteParams::default()
                };
                match api.delete(&name, &params).await {
                    Ok(_) => {}
                    // Gone already: nothing to do.
                    Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Done::Objects(0)),
                    Err(source) => return Err(refused(DELETING, &resource.kind, &namespace, &name, source).into()),
                }
                self.record("delete", &resource.kind, &namespace, &name);
                Ok(Done::Objects(1))
            }
            Write::Status { resource, namespace, name, status } => {
                let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &namespace, &resource);
                let body = json!({ "apiVersion": resource.api_version, "kind": resource.kind, "status": status });
                let params = PatchParams::apply(FIELD_MANAGER).force();
                api.patch_status(&name, &params, &Patch::Apply(&body))
                    .await
                    .map_err(|source| refused(WRITING_STATUS, &resource.kind, &namespace, &name, source))?;
                self.record("status", &resource.kind, &namespace, &name);
                Ok(Done::Written)
            }
            Write::Finalizers { resource, namespace, name, read, resource_version, wanted } => {
                let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &namespace, &resource);
                let patch = finalizers_patch(read.as_deref(), resource_version.as_deref(), &wanted);
                let patch: json_patch::Patch = match serde_json::from_value(patch) {
                    Ok(patch) => patch,
                    Err(e) => {
                        let source = kube::Error::SerdeError(e);
                        return Err(refused(PATCHING_FINALIZERS, &resource.kind, &namespace, &name, source).into());
                    }
                };
                match api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch)).await {
                    Ok(_) => {}
                    // A failed `test`: the list changed since it was read. Read again and retry.
                    Err(kube::Error::Api(mut status)) if status.code == 422 => {
                        status.code = 409;
                        status.message = format!("the finalizers changed since they were read: {}", status.message);
                        let source = kube::Error::Api(status);
                        return Err(refused(PATCHING_FINALIZERS, &resource.kind, &namespace, &name, source).into());
                    }
                    Err(source) => {
                        return Err(refused(PATCHING_FINALIZERS, &resource.kind, &namespace, &name, source).into());
                    }
                }
                self.record("finalizers", &resource.kind, &namespace, &name);
                Ok(Done::Written)
            }
            Write::CreateSecret { what, secret } => {
                let namespace = secret.namespace().unwrap_or_default();
                let name = secret.name_any();
                let api: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
                match api.create(&PostParams::default(), secret.as_ref()).await {
                    Ok(_) => {
                        self.record("create", "Secret", &namespace, &name);
                        Ok(Done::Written)
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(Done::AlreadyExists),
                    Err(source) => {
                        let verb = if what.is_empty() { "creating" } else { what };
                        Err(refused(verb, "Secret", &namespace, &name, source).into())
                    }
                }
            }
            Write::SyncStatus { namespace, name, object, status } => {
                let resource = ApiResource::erase::<SyncStatus>(&());
                let api: Api<SyncStatus> = Api::namespaced(self.client.clone(), &namespace);
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let mut uid = None;
                if let Some(object) = object {
                    let written = api
                        .patch(&name, &params, &Patch::Apply(&object))
                        .await
                        .map_err(|source| refused(server_side::APPLYING, &resource.kind, &namespace, &name, source))?;
                    uid = written.metadata.uid;
                    self.record("apply", &resource.kind, &namespace, &name);
                }
                if let Some(status) = status {
                    let body = json!({ "apiVersion": resource.api_version, "kind": resource.kind, "status": status });
                    let written = api
                        .patch_status(&name, &params, &Patch::Apply(&body))
                        .await
                        .map_err(|source| refused(WRITING_STATUS, &resource.kind, &namespace, &name, source))?;
                    uid = uid.or(written.metadata.uid);
                    self.record("status", &resource.kind, &namespace, &name);
                }
                Ok(Done::SyncStatusWritten { uid })
            }
            Write::DeleteSyncStatus { namespace, name, uid } => {
                let api: Api<SyncStatus> = Api::namespaced(self.client.clone(), &namespace);
                let params = DeleteParams {
                    preconditions: uid.map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
                    ..DeleteParams::default()
                };
                match api.delete(&name, &params).await {
                    Ok(_) => {}
                    // Gone already, or replaced by a newer object (its uid differs): nothing to do.
                    Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                        return Ok(Done::Objects(0));
                    }
                    Err(source) => {
                        return Err(refused(DELETING_SYNC_STATUS, "SyncStatus", &namespace, &name, source).into());
                    }
                }
                self.record("delete", "SyncStatus", &namespace, &name);
                Ok(Done::Objects(1))
            }
            Write::PatchSecret { what, namespace, name, patch } => {
                let api: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|source| refused(what, "Secret", &namespace, &name, source))?;
                self.record("patch", "Secret", &namespace, &name);
                Ok(Done::Written)
            }
        }
    }
}

/// The observer's verb of a server-side dry-run request ([`Writer::dry_run`]): telemetry's
/// label, which counts it apart from writes.
pub use crate::telemetry::DRY_RUN;

/// [`ApplyError::verb`] of a refused status write.
pub(crate) const WRITING_STATUS: &str = "writing the status of";
/// [`ApplyError::verb`] of a refused deletion of a child no longer rendered.
pub(crate) const DELETING: &str = "deleting";
/// [`ApplyError::verb`] of a refused deletion of a stale `SyncStatus`.
pub(crate) const DELETING_SYNC_STATUS: &str = "deleting";
/// [`ApplyError::verb`] of a refused finalizer change.
pub(crate) const PATCHING_FINALIZERS: &str = "patching the finalizers of";

fn refused(verb: &'static str, kind: &str, namespace: &str, name: &str, source: kube::Error) -> ApplyError {
    ApplyError { verb, kind: kind.to_owned(), namespace: namespace.to_owned(), name: name.to_owned(), source }
}

/// The JSON patch taking the finalizers from `read` to `wanted`: a `test` of the list as read
/// (or, when there was none, of the `resourceVersion`), then the new list.
pub(crate) fn finalizers_patch(read: Option<&[String]>, resource_version: Option<&str>, wanted: &[String]) -> Value {
    let guard = match (read, resource_version) {
        (Some(list), _) => json!({ "op": "test", "path": "/metadata/finalizers", "value": list }),
        (None, Some(version)) => json!({ "op": "test", "path": "/metadata/resourceVersion", "value": version }),
        (None, None) => return json!([{ "op": "add", "path": "/metadata/finalizers", "value": wanted }]),
    };
    let write = if read.is_some() {
        json!({ "op": "replace", "path": "/metadata/finalizers", "value": wanted })
    } else {
        json!({ "op": "add", "path": "/metadata/finalizers", "value": wanted })
    };
    json!([guard, write])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finalizer_change_tests_the_list_it_read_so_one_added_meanwhile_is_kept() {
        let read = vec!["other.io/keep".to_owned()];
        let wanted = vec!["other.io/keep".to_owned(), "cdtarget.io/gitlab".to_owned()];
        let patch = finalizers_patch(Some(&read), Some("7"), &wanted);
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other.io/keep"]},
                {"op": "replace", "path": "/metadata/finalizers", "value": ["other.io/keep", "cdtarget.io/gitlab"]},
            ])
        );
        let mut document = json!({"metadata": {"resourceVersion": "8", "finalizers": ["other.io/keep", "late.io/x"]}});
        let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
        assert!(json_patch::patch(&mut document, &patch).is_err(), "a list changed meanwhile fails the test");
    }

    #[test]
    fn without_a_list_the_resource_version_is_the_guard() {
        let wanted = vec!["cdtarget.io/gitlab".to_owned()];
        let patch = finalizers_patch(None, Some("7"), &wanted);
        assert_eq!(patch[0], json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}));
        let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
        let mut unchanged = json!({"metadata": {"resourceVersion": "7"}});
        json_patch::patch(&mut unchanged, &patch).unwrap();
        assert_eq!(unchanged["metadata"]["finalizers"], json!(["cdtarget.io/gitlab"]));
        let mut changed = json!({"metadata": {"resourceVersion": "8", "finalizers": ["late.io/x"]}});
        assert!(json_patch::patch(&mut changed, &patch).is_err());
    }
}
