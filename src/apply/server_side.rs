//! Server-side apply of a tenant's objects as the tenant's ServiceAccount, and deletion of what
//! left Git. Every object is sent as a `DynamicObject` with the field manager `cdtarget`, forcing
//! ownership of the fields it sets (Git is the source of truth for them).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, Config};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::FIELD_MANAGER;
use crate::api::tenant_repository::InventoryEntry;

/// The user name of ServiceAccount `name` in `namespace`, as the API server authenticates it.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The controller's `config`, impersonating `user` on every request (`Impersonate-User`). The
/// API server adds the ServiceAccount's groups itself, so none are set here.
pub fn impersonated_config(config: &Config, user: &str) -> Config {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = None;
    config
}

/// Gives the client acting as a user (a tenant's ServiceAccount).
pub type ClientFor = Arc<dyn Fn(&str) -> Result<Client, kube::Error> + Send + Sync>;

/// Clients built from the controller's `config` with impersonation set, one per user, kept for
/// reuse (each holds its own connection pool).
pub fn impersonating(config: Config) -> ClientFor {
    let clients: Mutex<BTreeMap<String, Client>> = Mutex::default();
    Arc::new(move |user: &str| {
        let mut clients = clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(user) {
            return Ok(client.clone());
        }
        let client = Client::try_from(impersonated_config(&config, user))?;
        clients.insert(user.to_owned(), client.clone());
        Ok(client)
    })
}

/// [`ApplyError::verb`] of a refused apply.
pub const APPLYING: &str = "applying";
/// [`ApplyError::verb`] of a refused deletion.
pub const DELETING: &str = "deleting";

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

/// The API resource of `apiVersion`/`kind`; the plural is derived from the kind, as kube does.
pub fn api_resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
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

/// Server-side applies every object in order, stopping at the first refusal. Returns how many
/// were applied. Each object must carry `apiVersion`, `kind`, `metadata.name` and
/// `metadata.namespace`.
pub async fn apply_all(client: &Client, objects: &[Value]) -> Result<usize, ApplyError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in objects {
        let Some(entry) = super::entry_of(object) else {
            let unnamed = InventoryEntry { kind: "object".into(), ..InventoryEntry::default() };
            let source = kube::Error::Service("it lacks apiVersion, kind, metadata.name or metadata.namespace".into());
            return Err(error(APPLYING, &unnamed, source));
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &entry.namespace, &api_resource(&entry.api_version, &entry.kind));
        if let Err(source) = api.patch(&entry.name, &params, &Patch::Apply(object)).await {
            return Err(error(APPLYING, &entry, source));
        }
    }
    Ok(objects.len())
}

/// Deletes every entry, in order; objects already gone count as deleted. Returns how many
/// deletions were sent.
pub async fn delete_all(client: &Client, entries: &[InventoryEntry]) -> Result<usize, ApplyError> {
    for entry in entries {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &entry.namespace, &api_resource(&entry.api_version, &entry.kind));
        match api.delete(&entry.name, &DeleteParams::background()).await {
            Ok(_) => {}
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
    use kube::client::ConfigExt;

    use super::*;

    #[test]
    fn impersonation_of_a_service_account_sets_only_the_user() {
        let mut base = Config::new("https://127.0.0.1:6443".parse().unwrap());
        base.auth_info.impersonate_groups = Some(vec!["system:masters".into()]);
        let user = service_account_user("team-a", "deployer");
        let config = impersonated_config(&base, &user);
        assert_eq!(config.auth_info.impersonate.as_deref(), Some("system:serviceaccount:team-a:deployer"));
        assert_eq!(config.auth_info.impersonate_groups, None);
        assert_eq!(base.auth_info.impersonate, None, "the controller's own config is left alone");
        // The header layer kube builds from it accepts the value.
        assert!(config.extra_headers_layer().is_ok());
    }

    #[test]
    fn api_resources_of_core_and_grouped_kinds() {
        let config_map = api_resource("v1", "ConfigMap");
        assert_eq!((config_map.group.as_str(), config_map.plural.as_str()), ("", "configmaps"));
        let target = api_resource("cdtarget.io/v1alpha1", "CDTarget");
        assert_eq!(
            (target.group.as_str(), target.version.as_str(), target.plural.as_str()),
            ("cdtarget.io", "v1alpha1", "cdtargets")
        );
    }

    #[test]
    fn digest_depends_on_content_and_order() {
        let a = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "a"}});
        let b = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "b"}});
        assert_eq!(digest(&[a.clone(), b.clone()]), digest(&[a.clone(), b.clone()]));
        assert_ne!(digest(&[a.clone(), b.clone()]), digest(&[b, a]));
    }
}
