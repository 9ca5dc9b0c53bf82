//! Carries out a plan's apply and prune through the one writer, as the registration's tenant
//! ServiceAccount, in two steps around the intent record ([`super::Plan::intent`]):
//!
//! 1. [`dry_run`]: what is to be sent (after a new revision or a changed set, the objects it
//!    changed, or the whole set when this process has not applied it before; only what drifted
//!    when the revision and set are unchanged) is server-side dry-run as the tenant.
//!    Any refusal turns the plan into [`Plan::dry_run_refused`]: nothing is written at all.
//! 2. [`apply_and_prune`]: the objects in order, then the deletion of what left Git. A refusal
//!    here (the dry run passed, but a quota, a conflict or a permission changed in between) turns
//!    the plan into its failed form ([`Plan::apply_failed`], [`Plan::prune_failed`]), which keeps
//!    every record a later reconcile needs.

use std::collections::BTreeSet;

use serde_json::Value;

use super::plan::Plan;
use crate::api::tenant_repository::{InventoryEntry, TenantRepository};
use crate::apply::refusal::{Refusal, class_of};
use crate::apply::server_side::service_account_user;
use crate::apply::{Done, Write, WriteError, Writer, entry_of};
use crate::error::Classify;

/// What [`dry_run`] and [`apply_and_prune`] did.
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
    /// Objects sent in the server-side dry run before the apply.
    pub dry_run: usize,
    /// The objects the dry run refused (nothing was written then).
    pub refused: Vec<InventoryEntry>,
    /// The refusal that stopped it, if one did (the first one, when the dry run refused several).
    pub failure: Option<WriteError>,
}

/// Chooses what to send and dry-runs it as the tenant of `repo`, before anything is written
/// (the intent record included). On an unchanged revision and set only the objects that
/// drifted are sent, so only they are dry-run (a cycle with no drift sends nothing at all).
/// Returns the plan (its [`Plan::dry_run_refused`] form when the API server refused anything)
/// and what was done so far, for [`apply_and_prune`].
#[tracing::instrument(name = "dry_run", skip_all)]
pub async fn dry_run(writer: &Writer, repo: &TenantRepository, mut plan: Plan) -> (Plan, Executed) {
    let mut executed = Executed::default();
    if plan.apply.is_none() {
        return (plan, executed);
    }
    let user = service_account_user(&repo.spec.target_namespace, &repo.spec.service_account_name);
    // What was sent before exactly as it is now (the whole set of an unchanged revision, or what a
    // new one did not change) is read back while the rest is dry-run: a push waits for one round
    // trip, and only what changed or drifted is sent.
    let mut checked_already = None;
    if (plan.only_drifted || !plan.unchanged.is_empty())
        && let Some(objects) = plan.apply.take()
    {
        let (all, unchanged) = (plan.only_drifted, std::mem::take(&mut plan.unchanged));
        let is_unchanged = |object: &Value| all || entry_of(object).is_some_and(|entry| unchanged.contains(&entry));
        let (same, changed): (Vec<Value>, Vec<Value>) = objects.iter().cloned().partition(is_unchanged);
        let (drifted, dry_run) = futures::join!(writer.drifted(&user, same), writer.dry_run(&user, &changed));
        let drifted = match drifted {
            Ok(drifted) => drifted,
            Err(e) => {
                plan.intent = None;
                executed.failure = Some(e);
                return (plan, executed);
            }
        };
        executed.repaired = drifted.iter().filter_map(entry_of).collect();
        let repaired: BTreeSet<&InventoryEntry> = executed.repaired.iter().collect();
        // In the set's order: what changed, and what drifted (an object without an identity is
        // always sent: the apply refuses it, located).
        let send: Vec<Value> = objects
            .into_iter()
            .filter(|object| !is_unchanged(object) || entry_of(object).is_none_or(|e| repaired.contains(&e)))
            .collect();
        // A drifted object was not in that dry run: then everything sent is dry-run together.
        if drifted.is_empty() {
            checked_already = Some(dry_run);
        }
        plan.apply = (!send.is_empty()).then_some(send);
    }
    let Some(objects) = plan.apply.as_deref() else { return (plan, executed) };
    executed.dry_run = objects.len();
    let checked = match checked_already {
        Some(checked) => checked,
        None => writer.dry_run(&user, objects).await,
    };
    match checked {
        Ok(refused) if refused.is_empty() => {}
        Ok(mut refused) => {
            let refusals: Vec<Refusal> = refused.iter().map(|e| Refusal::of(entry(objects, e), &e.source)).collect();
            executed.refused = refusals.iter().map(|r| r.entry.clone()).collect();
            executed.repaired.clear();
            plan = plan.dry_run_refused(&refusals, &user, class_of(&refusals));
            executed.failure = Some(WriteError::Refused(Box::new(refused.remove(0))));
        }
        Err(e) => {
            plan.intent = None;
            executed.failure = Some(e);
        }
    }
    (plan, executed)
}

/// Applies and prunes what `plan` says, as the tenant of `repo`, after [`dry_run`] (whose
/// `checked` it continues); does nothing when the dry run failed. Returns the plan as executed
/// (its failed form when a write was refused) and what was done.
#[tracing::instrument(name = "execute", skip_all)]
pub async fn apply_and_prune(
    writer: &Writer,
    repo: &TenantRepository,
    mut plan: Plan,
    checked: Executed,
) -> (Plan, Executed) {
    let mut executed = checked;
    if executed.failure.is_some() || (plan.apply.is_none() && plan.prune.is_empty()) {
        return (plan, executed);
    }
    let user = service_account_user(&repo.spec.target_namespace, &repo.spec.service_account_name);
    if let Some(objects) = plan.apply.clone() {
        match writer.execute(Write::TenantApply { user: user.clone(), objects }).await {
            Ok(Done::Objects(applied)) => {
                executed.applied = applied;
                executed.applied_objects = plan.apply.iter().flatten().filter_map(entry_of).collect();
            }
            Ok(_) => {}
            Err(e) => {
                let class = e.class();
                let refusal = match &e {
                    WriteError::Refused(refused) => {
                        Some(Refusal::of(entry(plan.apply.as_deref().unwrap_or_default(), refused), &refused.source))
                    }
                    WriteError::Impersonate { .. } => None,
                };
                plan = plan.apply_failed(repo, format!("{e} (as {user})"), class);
                if let Some(refusal) = &refusal {
                    plan = plan.with_refusal(refusal);
                }
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

/// The identity of a refused object: the error names its kind, namespace and name, the object
/// sent its `apiVersion` (the loader allows one object per group, kind and name).
fn entry(sent: &[serde_json::Value], refused: &crate::apply::server_side::ApplyError) -> InventoryEntry {
    let named = |entry: &InventoryEntry| {
        entry.kind == refused.kind && entry.namespace == refused.namespace && entry.name == refused.name
    };
    sent.iter().filter_map(entry_of).find(named).unwrap_or_else(|| InventoryEntry {
        api_version: String::new(),
        kind: refused.kind.clone(),
        namespace: refused.namespace.clone(),
        name: refused.name.clone(),
    })
}
