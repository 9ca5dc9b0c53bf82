//! Server-side apply of a tenant's objects as the tenant's ServiceAccount, and deletion of what
//! left Git. Every object is sent as a `DynamicObject` with the field manager
//! [`TENANT_FIELD_MANAGER`] (`cdtarget-tenant`), forcing ownership of the fields it sets (Git is
//! the source of truth for them). The controller's own writes (children, status) use
//! [`FIELD_MANAGER`] (`cdtarget`), so `managedFields` tell the tenant's fields from the
//! controller's. Each object goes to the resource API discovery names for its kind
//! ([`super::discovery`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use http::HeaderValue;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, ValidationDirective};
use kube::error::DiscoveryError;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::FIELD_MANAGER;
use crate::api::tenant_repository::InventoryEntry;
use crate::apply::discovery::Discovery;

/// The field manager of every apply made as a tenant (impersonating its ServiceAccount).
pub const TENANT_FIELD_MANAGER: &str = "cdtarget-tenant";
/// The field manager tenant applies used before they had their own: the controller's.
pub const LEGACY_TENANT_FIELD_MANAGER: &str = FIELD_MANAGER;

/// The user name of ServiceAccount `name` in `namespace`, as the API server authenticates it.
pub(crate) fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The header carrying the impersonated user on every request of a tenant client.
pub(crate) const IMPERSONATE_USER: &str = "impersonate-user";
/// The header carrying impersonated groups; never sent, so the API server derives the
/// ServiceAccount's groups itself (and a caller cannot add `system:masters`).
pub(crate) const IMPERSONATE_GROUP: &str = "impersonate-group";

/// Gives the client acting as a user (a tenant's ServiceAccount).
pub(crate) type ClientFor = Arc<dyn Fn(&str) -> Result<Client, kube::Error> + Send + Sync>;

/// Clients acting as a user through the controller's own `base` client: each sets
/// `Impersonate-User` on its requests and sends them over `base`'s connections and credentials,
/// so a thousand tenants share one connection pool instead of opening one each. Kept per user
/// for reuse.
pub fn impersonating(base: Client) -> ClientFor {
    let clients: Mutex<BTreeMap<String, Client>> = Mutex::default();
    Arc::new(move |user: &str| {
        let mut clients = clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(user) {
            return Ok(client.clone());
        }
        let client = impersonating_client(&base, user)?;
        clients.insert(user.to_owned(), client.clone());
        Ok(client)
    })
}

/// One client sending every request of `base` as `user`. Must be called inside a Tokio runtime.
pub(crate) fn impersonating_client(base: &Client, user: &str) -> Result<Client, kube::Error> {
    let value = HeaderValue::from_str(user)
        .map_err(|_| kube::Error::Service(format!("`{user}` cannot be sent as an HTTP header").into()))?;
    let sender = base.clone();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let (sender, value) = (sender.clone(), value.clone());
        async move {
            let headers = request.headers_mut();
            headers.remove(IMPERSONATE_GROUP);
            headers.insert(IMPERSONATE_USER, value);
            sender.send(request).await
        }
    });
    Ok(Client::new(service, base.default_namespace()))
}

/// [`ApplyError::verb`] of a refused apply.
pub(crate) const APPLYING: &str = "applying";
/// [`ApplyError::verb`] of a refused list of the Jobs a KEDA ScaledJob made (its kind is the
/// ScaledJob's).
pub(crate) const LISTING_JOBS_OF: &str = "listing the Jobs of";
/// [`ApplyError::verb`] of a refused deletion.
pub(crate) const DELETING: &str = "deleting";
/// [`ApplyError::verb`] of an object refused in a server-side dry run.
pub(crate) const DRY_RUNNING: &str = "dry-running";

/// The parameters of every apply made as a tenant: its field manager, forcing ownership of what
/// it sets, and strict field validation (an unknown or duplicate field is refused, never silently
/// dropped); `dry_run` asks for `dryRun=All` (admission, validation and defaulting run, nothing
/// is persisted).
pub(crate) fn tenant_apply_params(dry_run: bool) -> PatchParams {
    PatchParams {
        dry_run,
        force: true,
        field_manager: Some(TENANT_FIELD_MANAGER.to_owned()),
        field_validation: Some(ValidationDirective::Strict),
    }
}

/// A request of the apply or the prune that the API server refused.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {kind} {namespace}/{name}: {source}")]
pub struct ApplyError {
    /// `applying` or `deleting`.
    pub verb: &'static str,
    /// Kind of the object.
    pub kind: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// The resource a tenant object is sent to, as discovery gives it (never a guessed plural); a
/// kind the cluster does not serve, or serves cluster-wide, is refused here too, at the one
/// place tenant objects are written.
async fn resource_of(discovery: &Discovery, entry: &InventoryEntry) -> Result<ApiResource, kube::Error> {
    match discovery.tenant_resource(&entry.api_version, &entry.kind).await? {
        Ok(resource) => Ok(resource),
        Err(refusal) => Err(kube::Error::Discovery(DiscoveryError::MissingKind(refusal.message))),
    }
}

/// The digest of `objects` as they would be sent, in order.
pub fn digest(objects: &[Value]) -> String {
    let mut hasher = Sha256::new();
    for object in objects {
        hasher.update(object.to_string().as_bytes());
        hasher.update(b"\n");
    }
    hex::encode(hasher.finalize())
}

/// Server-side applies every object in order, stopping at the first refusal; `applied` is told
/// of each object sent. Returns how many were applied. Each object must carry `apiVersion`,
/// `kind`, `metadata.name` and `metadata.namespace`. Only [`super::writer`] calls it.
pub(super) async fn apply_all(
    client: &Client,
    discovery: &Discovery,
    objects: &[Value],
    applied: impl Fn(&Value),
) -> Result<usize, ApplyError> {
    let params = tenant_apply_params(false);
    for object in objects {
        let Some(entry) = super::entry_of(object) else {
            return Err(unnamed(APPLYING));
        };
        let resource = resource_of(discovery, &entry).await.map_err(|source| error(APPLYING, &entry, source))?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &entry.namespace, &resource);
        let live = match api.patch(&entry.name, &params, &Patch::Apply(object)).await {
            Ok(live) => live,
            Err(source) => return Err(error(APPLYING, &entry, source)),
        };
        applied(object);
        if holds_legacy_tenant_fields(&live.metadata) {
            release_legacy_tenant_fields(&api, &entry).await.map_err(|source| error(APPLYING, &entry, source))?;
        }
    }
    Ok(objects.len())
}

fn unnamed(verb: &'static str) -> ApplyError {
    let unnamed = InventoryEntry { kind: "object".into(), ..InventoryEntry::default() };
    let source = kube::Error::Service("it lacks apiVersion, kind, metadata.name or metadata.namespace".into());
    error(verb, &unnamed, source)
}

/// Most dry-run requests in flight at once.
const DRY_RUNS: usize = 8;

/// Server-side dry run of every object as `client`'s user, with the parameters of the real apply
/// ([`tenant_apply_params`]): every object is sent (a few at a time; nothing depends on an
/// earlier one, since nothing is persisted) and answered, in the order of `objects`, with the
/// object as the API server would have stored it, or with its refusal. `sent` is told of each
/// object sent. Nothing is written.
pub(crate) async fn dry_run_all(
    client: &Client,
    discovery: &Discovery,
    objects: &[Value],
    sent: impl Fn(&Value),
) -> Vec<Result<Value, ApplyError>> {
    let params = tenant_apply_params(true);
    let runs: Vec<_> = objects
        .iter()
        .map(|object| {
            sent(object);
            dry_run_one(client, discovery, object, &params)
        })
        .collect();
    futures::stream::iter(runs).buffered(DRY_RUNS).collect().await
}

async fn dry_run_one(
    client: &Client,
    discovery: &Discovery,
    object: &Value,
    params: &PatchParams,
) -> Result<Value, ApplyError> {
    let entry = super::entry_of(object).ok_or_else(|| unnamed(DRY_RUNNING))?;
    let resource = resource_of(discovery, &entry).await.map_err(|source| error(DRY_RUNNING, &entry, source))?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &entry.namespace, &resource);
    let result = api.patch(&entry.name, params, &Patch::Apply(object)).await;
    let result = result.map_err(|source| error(DRY_RUNNING, &entry, source))?;
    serde_json::to_value(result).map_err(|e| error(DRY_RUNNING, &entry, kube::Error::SerdeError(e)))
}

/// Whether a tenant object, as just applied, still lists fields under the field manager the
/// tenant applies used before an upgrade ([`LEGACY_TENANT_FIELD_MANAGER`]). Those fields would
/// never be removed when they leave Git, since the new manager does not own them alone. A child
/// of a CDTarget (controller owner reference to a CDTarget) is left alone: there that manager is
/// the controller's own. So is an entry that owns no field (already released).
pub(crate) fn holds_legacy_tenant_fields(meta: &ObjectMeta) -> bool {
    let cdtarget_child = meta.owner_references.iter().flatten().any(|owner| {
        owner.controller == Some(true)
            && owner.kind == "CDTarget"
            && owner.api_version.starts_with(&format!("{}/", crate::api::GROUP))
    });
    !cdtarget_child
        && meta.managed_fields.iter().flatten().any(|entry| {
            let owns_fields =
                entry.fields_v1.as_ref().is_some_and(|fields| fields.0.as_object().is_some_and(|f| !f.is_empty()));
            entry.manager.as_deref() == Some(LEGACY_TENANT_FIELD_MANAGER)
                && entry.operation.as_deref() == Some("Apply")
                && entry.subresource.as_deref().unwrap_or_default().is_empty()
                && owns_fields
        })
}

/// Applies an empty configuration as the legacy manager: it then owns nothing, so fields it
/// alone held (removed from Git since) go, and those the tenant manager now co-owns stay.
async fn release_legacy_tenant_fields(api: &Api<DynamicObject>, entry: &InventoryEntry) -> Result<(), kube::Error> {
    let empty = serde_json::json!({
        "apiVersion": entry.api_version,
        "kind": entry.kind,
        "metadata": {"name": entry.name, "namespace": entry.namespace},
    });
    api.patch(&entry.name, &PatchParams::apply(LEGACY_TENANT_FIELD_MANAGER), &Patch::Apply(&empty)).await.map(|_| ())
}

/// Most live objects read at once when looking for drift.
const DRIFT_READS: usize = 8;

/// The objects of `objects` (in their order) whose live copy is missing or no longer holds every
/// field they set ([`super::drift::live_matches`]), read as `client`'s user. An object that
/// cannot be read (no `get` permission, an API error) counts as drifted: applying it again is
/// always safe, and a real refusal then surfaces from the apply.
pub(super) async fn drifted(client: &Client, discovery: &Discovery, objects: Vec<Value>) -> Vec<Value> {
    let checks = objects.into_iter().map(|object| async move {
        let Some(entry) = super::entry_of(&object) else { return Some(object) };
        let Ok(resource) = resource_of(discovery, &entry).await else { return Some(object) };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &entry.namespace, &resource);
        let live = api.get_opt(&entry.name).await.ok().flatten().and_then(|live| serde_json::to_value(live).ok());
        match live {
            Some(live) if super::drift::live_matches(&object, &live) => None,
            _ => Some(object),
        }
    });
    futures::stream::iter(checks).buffered(DRIFT_READS).filter_map(futures::future::ready).collect().await
}

/// Deletes every entry, in order; objects already gone count as deleted, and so do objects of a
/// kind the cluster no longer serves in any version; `deleted` is told of each delete sent.
/// Returns how many entries were handled. Only [`super::writer`] calls it.
pub(super) async fn delete_all(
    client: &Client,
    discovery: &Discovery,
    entries: &[InventoryEntry],
    deleted: impl Fn(&InventoryEntry),
) -> Result<usize, ApplyError> {
    for entry in entries {
        let resource = match discovery.resource_for_deletion(&entry.api_version, &entry.kind).await {
            Ok(Some(resource)) => resource,
            Ok(None) => continue,
            Err(source) => return Err(error(DELETING, entry, source)),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &entry.namespace, &resource);
        match api.delete(&entry.name, &DeleteParams::background()).await {
            Ok(_) => deleted(entry),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => return Err(error(DELETING, entry, source)),
        }
    }
    Ok(entries.len())
}

fn error(verb: &'static str, entry: &InventoryEntry, source: kube::Error) -> ApplyError {
    ApplyError { verb, kind: entry.kind.clone(), namespace: entry.namespace.clone(), name: entry.name.clone(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(managers: &[(&str, &str, Option<&str>)], owner: Option<&str>) -> ObjectMeta {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, OwnerReference};
        ObjectMeta {
            managed_fields: Some(
                managers
                    .iter()
                    .map(|(manager, operation, subresource)| ManagedFieldsEntry {
                        manager: Some((*manager).into()),
                        operation: Some((*operation).into()),
                        subresource: subresource.map(Into::into),
                        fields_v1: Some(FieldsV1(serde_json::json!({"f:data": {}}))),
                        ..ManagedFieldsEntry::default()
                    })
                    .collect(),
            ),
            owner_references: owner.map(|kind| {
                vec![OwnerReference {
                    api_version: "cdtarget.io/v1alpha1".into(),
                    kind: kind.into(),
                    name: "agents".into(),
                    uid: "u".into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]
            }),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_an_apply_of_the_old_manager_on_a_tenant_object_is_released() {
        assert!(holds_legacy_tenant_fields(&meta(
            &[("cdtarget", "Apply", None), ("cdtarget-tenant", "Apply", None)],
            None
        )));
        assert!(!holds_legacy_tenant_fields(&meta(&[("cdtarget-tenant", "Apply", None)], None)), "migrated");
        assert!(
            !holds_legacy_tenant_fields(&meta(&[("cdtarget", "Apply", Some("status"))], None)),
            "status is the controller's"
        );
        assert!(!holds_legacy_tenant_fields(&meta(&[("cdtarget", "Update", None)], None)), "not an apply");
        assert!(
            !holds_legacy_tenant_fields(&meta(&[("cdtarget", "Apply", None)], Some("CDTarget"))),
            "a CDTarget's child"
        );
        assert!(holds_legacy_tenant_fields(&meta(&[("cdtarget", "Apply", None)], Some("ReplicaSet"))));
        let mut released = meta(&[("cdtarget", "Apply", None)], None);
        released.managed_fields.as_mut().unwrap()[0].fields_v1 = None;
        assert!(!holds_legacy_tenant_fields(&released), "an entry owning nothing is left alone");
    }

    #[test]
    fn digest_depends_on_content_and_order() {
        let a = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "a"}});
        let b = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "b"}});
        assert_eq!(digest(&[a.clone(), b.clone()]), digest(&[a.clone(), b.clone()]));
        assert_ne!(digest(&[a.clone(), b.clone()]), digest(&[b, a]));
    }
}
