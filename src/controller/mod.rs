//! The controller: the TenantRepository and CDTarget reconcilers (`tenant_repository`,
//! `cdtarget`), the process that runs them (`run`), and what they share. What a CDTarget may lend
//! its agents (`borrowed`) and which children it may write (`children`) are pure decisions of
//! the CDTarget reconciler.

pub mod borrowed;
pub mod cdtarget;
pub mod children;
pub mod conditions;
pub mod events;
pub mod gitlab_step;
pub mod run;
pub mod tenant_repository;

use std::time::Duration;

/// Retry of an object waiting for something to appear (a Secret); its watch usually comes first.
pub const WAIT_RETRY: Duration = Duration::from_secs(30);
/// Resync of a stalled object: only a change of its spec (or of what it references) helps; this
/// is a safety net.
pub const STALLED_RESYNC: Duration = Duration::from_secs(60 * 60);
/// Back-off after a transient error.
pub const TRANSIENT_RETRY: Duration = Duration::from_secs(15);

/// Reads the cluster admin's policy ConfigMap: absent means the documented defaults; present
/// but unreadable gives its problems (the caller reports them and changes nothing).
pub async fn read_policy(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Result<crate::policy::Policy, Vec<crate::problem::Problem>>, kube::Error> {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client.clone(), namespace);
    Ok(match api.get_opt(name).await? {
        None => Ok(crate::policy::Policy::default()),
        Some(config_map) => crate::policy::from_config_map(&serde_json::to_value(&config_map).unwrap_or_default()),
    })
}

/// Writes `status` of `object` with server-side apply (field manager `cdtarget`); nothing is sent
/// when it equals `current`, so an unchanged cycle writes nothing.
pub async fn write_status<K, S>(
    client: &kube::Client,
    namespace: &str,
    object: &K,
    current: Option<&S>,
    status: &S,
) -> Result<(), kube::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(());
    }
    let api: kube::Api<K> = kube::Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    let params = kube::api::PatchParams::apply(crate::api::FIELD_MANAGER).force();
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch_status(&name, &params, &kube::api::Patch::Apply(&patch)).await.map(|_| ())
}
