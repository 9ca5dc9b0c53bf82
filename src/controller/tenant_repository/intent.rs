//! The write-ahead step: what the apply may create is recorded in the inventory before it is
//! created ([`super::Plan::intent`]), so an apply cut short (the process killed, the Lease lost,
//! a failed status write) leaves nothing that a later prune cannot see.

use crate::api::tenant_repository::{InventoryEntry, TenantRepository};
use crate::apply::{WriteError, Writer};
use crate::controller::frame::write_status;

/// Records `inventory` in the status of `repo` before an apply, the rest as it is.
pub async fn record(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
    inventory: &[InventoryEntry],
) -> Result<(), WriteError> {
    let mut status = repo.status.clone().unwrap_or_default();
    status.inventory = inventory.to_vec();
    write_status(writer, namespace, repo, &status).await
}
