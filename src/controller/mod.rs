//! The controller: the TenantRepository and CDTarget reconcilers (being built; see the issue
//! notes). What is here is the pure part they share.

pub mod cdtarget;
pub mod conditions;
pub mod run;
pub mod tenant_repository;

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
