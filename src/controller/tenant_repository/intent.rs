//! The write-ahead step: what the apply may create is recorded in the inventory before it is
//! created ([`super::Plan::intent`]), so an apply cut short (the process killed, the Lease lost,
//! a failed status write) leaves nothing that a later prune cannot see.

use tracing::Instrument;

use super::Error;
use super::execute::DryRun;
use super::plan::Plan;
use crate::api::tenant_repository::{InventoryEntry, TenantRepository};
use crate::apply::{WriteError, Writer};
use crate::controller::frame::write_status;

/// The step: when `plan` has an intent and the dry run passed, records it in the status of
/// `repo`; else writes nothing (a refused dry run leaves no intent, no apply and no prune). A
/// failed write fails the reconcile (retried), and nothing is applied.
pub async fn record(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
    plan: &Plan,
    dry_run: &DryRun,
) -> Result<(), Error> {
    let (Some(intent), true) = (&plan.intent, dry_run.passed()) else { return Ok(()) };
    write_ahead(writer, namespace, repo, intent).instrument(tracing::info_span!("intent")).await.map_err(Error::Status)
}

/// Records `inventory` in the status of `repo` before an apply, the rest as it is.
async fn write_ahead(
    writer: &Writer,
    namespace: &str,
    repo: &TenantRepository,
    inventory: &[InventoryEntry],
) -> Result<(), WriteError> {
    let mut status = repo.status.clone().unwrap_or_default();
    status.inventory = inventory.to_vec();
    write_status(writer, namespace, repo, &status).await
}
