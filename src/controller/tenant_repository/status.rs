//! The TenantRepository's status writes: the one write of a reconcile ([`write`]), and the
//! write-ahead record of the inventory before an apply ([`record_intent`]).

use kube::api::ApiResource;

use crate::api::tenant_repository::{InventoryEntry, TenantRepository, TenantRepositoryStatus};
use crate::apply::{Write, WriteError, Writer};

/// Records `inventory` in the status of `repo` before an apply, the rest as it is
/// ([`super::Plan::intent`]): what the apply may create is in the inventory before it exists.
pub async fn record_intent(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
    inventory: &[InventoryEntry],
) -> Result<(), WriteError> {
    let mut status = repo.status.clone().unwrap_or_default();
    status.inventory = inventory.to_vec();
    write(writer, namespace, repo, &status).await
}

/// Writes `status` of `repo` once, and only when it differs from what the registration holds
/// (an unchanged cycle writes nothing).
pub async fn write(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
    status: &TenantRepositoryStatus,
) -> Result<(), WriteError> {
    if repo.status.as_ref() == Some(status) {
        return Ok(());
    }
    let write = Write::Status {
        resource: ApiResource::erase::<TenantRepository>(&()),
        namespace: namespace.to_owned(),
        name: kube::ResourceExt::name_any(repo),
        status: serde_json::to_value(status).unwrap_or_default(),
    };
    writer.execute(write).await.map(|_| ())
}
