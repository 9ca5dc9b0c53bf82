//! Carries out a plan's apply and prune through the one writer, as the registration's tenant
//! ServiceAccount: only what drifted when the revision and set are unchanged, then the objects
//! of the set in order, then the deletion of what left Git. A refusal turns the plan into its
//! failed form ([`Plan::apply_failed`], [`Plan::prune_failed`]), which keeps every record a
//! later reconcile needs.

use super::plan::Plan;
use crate::api::tenant_repository::{InventoryEntry, TenantRepository};
use crate::apply::server_side::service_account_user;
use crate::apply::{Done, Write, WriteError, Writer, entry_of};
use crate::error::Classify;

/// What [`apply_and_prune`] did.
#[derive(Debug, Default)]
pub struct Executed {
    /// Objects server-side applied.
    pub applied: usize,
    /// Objects deleted because they left Git.
    pub pruned: usize,
    /// The objects sent (the whole set after a new revision, else only what drifted).
    pub applied_objects: Vec<InventoryEntry>,
    /// The objects sent because their live copy no longer held what Git says (drift repairs).
    pub repaired: Vec<InventoryEntry>,
    /// The objects deleted because they left Git.
    pub pruned_objects: Vec<InventoryEntry>,
    /// The refusal that stopped it, if one did.
    pub failure: Option<WriteError>,
}

/// Applies and prunes what `plan` says, as the tenant of `repo`; returns the plan as executed
/// (its failed form when a write was refused) and what was done.
#[tracing::instrument(name = "execute", skip_all)]
pub async fn apply_and_prune(writer: &Writer, repo: &TenantRepository, mut plan: Plan) -> (Plan, Executed) {
    let mut executed = Executed::default();
    if plan.apply.is_none() && plan.prune.is_empty() {
        return (plan, executed);
    }
    let user = service_account_user(&repo.spec.target_namespace, &repo.spec.service_account_name);
    if plan.only_drifted
        && let Some(objects) = plan.apply.take()
    {
        match writer.drifted(&user, objects).await {
            Ok(drifted) => {
                executed.repaired = drifted.iter().filter_map(entry_of).collect();
                plan.apply = (!drifted.is_empty()).then_some(drifted);
            }
            Err(e) => {
                executed.failure = Some(e);
                return (plan, executed);
            }
        }
    }
    if let Some(objects) = plan.apply.clone() {
        match writer.execute(Write::TenantApply { user: user.clone(), objects }).await {
            Ok(Done::Objects(applied)) => {
                executed.applied = applied;
                executed.applied_objects = plan.apply.iter().flatten().filter_map(entry_of).collect();
            }
            Ok(_) => {}
            Err(e) => {
                let class = e.class();
                plan = plan.apply_failed(repo, format!("{e} (as {user})"), class);
                executed.failure = Some(e);
                return (plan, executed);
            }
        }
    }
    if !plan.prune.is_empty() {
        match writer.execute(Write::TenantPrune { user: user.clone(), entries: plan.prune.clone() }).await {
            Ok(_) => {
                executed.pruned = plan.prune.len();
                executed.pruned_objects = plan.prune.clone();
            }
            Err(e) => {
                let class = e.class();
                plan = plan.prune_failed(format!("{e} (as {user})"), class);
                executed.failure = Some(e);
            }
        }
    }
    (plan, executed)
}
