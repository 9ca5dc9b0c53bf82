//! Carries out a plan's apply and prune through the one writer, as the registration's tenant
//! ServiceAccount, in two steps around the intent record ([`super::Plan::intent`]):
//!
//! 1. [`dry_run`]: what is to be sent (after a new revision or a changed set, the objects it
//!    changed, or the whole set when this process has not applied it before; only what drifted
//!    when the revision and set are unchanged) is server-side dry-run as the tenant.
//!    Any refusal is [`Refused::DryRun`]: nothing is written at all.
//! 2. [`apply_and_prune`]: the objects in order, then the deletion of what left Git. A refusal
//!    here (the dry run passed, but a quota, a conflict or a permission changed in between) is
//!    [`Refused::Apply`] or [`Refused::Prune`], which [`super::concluded`] turns into records that
//!    keep everything a later reconcile needs.
//!
//! Both report into [`Executed`]; the plan is not changed, but for its objects to send, which
//! [`dry_run`] moves out of it. After them, [`remember`] keeps what was sent for the next
//! revision, and [`Executed::unsent`] says when the tenant's client could not even be built.

use std::collections::BTreeSet;

use serde_json::Value;

use super::plan::Plan;
use crate::api::tenant_repository::{InventoryEntry, TenantRepository};
use crate::apply::applied::AppliedObjects;
use crate::apply::refusal::{Refusal, class_of};
use crate::apply::server_side::service_account_user;
use crate::apply::{Done, Write, WriteError, Writer, entry_of};
use crate::error::{Class, Classify};

/// What the API server refused, which turns the plan's verdict (see [`super::concluded`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The server-side dry run refused `refusals` (as `user`): nothing was written.
    DryRun {
        /// Every refused object.
        refusals: Vec<Refusal>,
        /// The tenant's identity.
        user: String,
        /// The class of the refusals together.
        class: Class,
    },
    /// The apply itself was refused (after the dry run passed).
    Apply {
        /// The error, naming the object and the user.
        message: String,
        /// Its class.
        class: Class,
        /// The refused object, located; `None` when no object was refused (no tenant client).
        refusal: Option<Refusal>,
    },
    /// The set was applied but deleting an object that left Git was refused.
    Prune {
        /// The error, naming the object and the user.
        message: String,
        /// Its class.
        class: Class,
    },
}

/// What [`dry_run`] decided to send, and what it did, for [`apply_and_prune`].
#[derive(Debug, Default)]
pub struct DryRun {
    /// The objects to send, in order (the whole set, or only what changed or drifted); `None`
    /// sends nothing.
    pub send: Option<Vec<Value>>,
    /// What was done so far.
    pub executed: Executed,
}

impl DryRun {
    /// Nothing was refused and nothing failed: the apply may go on.
    pub fn passed(&self) -> bool {
        self.executed.error.is_none()
    }
}

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
    pub refused_objects: Vec<InventoryEntry>,
    /// The error that stopped it, if one did (the first refusal, when the dry run refused
    /// several); it fails the reconcile.
    pub error: Option<WriteError>,
    /// What was refused, as [`super::concluded`] turns it into the verdicts; `None` when nothing
    /// was refused, or when the dry run could not be sent at all (the error alone then fails the
    /// reconcile).
    pub refused: Option<Refused>,
}

/// Chooses what to send and dry-runs it as the tenant of `repo`, before anything is written
/// (the intent record included). On an unchanged revision and set only the objects that
/// drifted are sent, so only they are dry-run (a cycle with no drift sends nothing at all).
/// The objects are moved out of `plan.apply` (a set is not copied), into [`DryRun::send`].
#[tracing::instrument(name = "dry_run", skip_all)]
pub async fn dry_run(writer: &Writer, repo: &TenantRepository, plan: &mut Plan) -> DryRun {
    let mut executed = Executed::default();
    let mut send = plan.apply.take();
    if send.is_none() {
        return DryRun { send, executed };
    }
    let user = service_account_user(&repo.spec.target_namespace, &repo.spec.service_account_name);
    // What was sent before exactly as it is now (the whole set of an unchanged revision, or what a
    // new one did not change) is read back while the rest is dry-run: a push waits for one round
    // trip, and only what changed or drifted is sent.
    let mut checked_already = None;
    if (plan.only_drifted || !plan.unchanged.is_empty())
        && let Some(objects) = send.take()
    {
        let (all, unchanged) = (plan.only_drifted, &plan.unchanged);
        let is_unchanged = |object: &Value| all || entry_of(object).is_some_and(|entry| unchanged.contains(&entry));
        let (same, changed): (Vec<Value>, Vec<Value>) = objects.iter().cloned().partition(is_unchanged);
        let (drifted, dry_run) = futures::join!(writer.drifted(&user, same), writer.dry_run(&user, &changed));
        let drifted = match drifted {
            Ok(drifted) => drifted,
            Err(e) => {
                executed.error = Some(e);
                return DryRun { send: None, executed };
            }
        };
        executed.repaired = drifted.iter().filter_map(entry_of).collect();
        let repaired: BTreeSet<&InventoryEntry> = executed.repaired.iter().collect();
        // In the set's order: what changed, and what drifted (an object without an identity is
        // always sent: the apply refuses it, located).
        let to_send: Vec<Value> = objects
            .into_iter()
            .filter(|object| !is_unchanged(object) || entry_of(object).is_none_or(|e| repaired.contains(&e)))
            .collect();
        // A drifted object was not in that dry run: then everything sent is dry-run together.
        if drifted.is_empty() {
            checked_already = Some(dry_run);
        }
        send = (!to_send.is_empty()).then_some(to_send);
    }
    let Some(objects) = send.as_deref() else { return DryRun { send, executed } };
    executed.dry_run = objects.len();
    let checked = match checked_already {
        Some(checked) => checked,
        None => writer.dry_run(&user, objects).await,
    };
    match checked {
        Ok(refused) if refused.is_empty() => {}
        Ok(mut refused) => {
            let sent = || objects.iter().filter_map(entry_of);
            let refusals: Vec<Refusal> = refused.iter().map(|e| Refusal::of(entry(sent(), e), &e.source)).collect();
            executed.refused_objects = refusals.iter().map(|r| r.entry.clone()).collect();
            executed.repaired.clear();
            let class = class_of(&refusals);
            executed.refused = Some(Refused::DryRun { refusals, user, class });
            executed.error = Some(WriteError::Refused(Box::new(refused.remove(0))));
        }
        Err(e) => executed.error = Some(e),
    }
    DryRun { send, executed }
}

/// Applies what [`dry_run`] chose to send and prunes what `plan` says, as the tenant of `repo`;
/// does nothing when the dry run failed. Returns what was done.
#[tracing::instrument(name = "execute", skip_all)]
pub(crate) async fn apply_and_prune(
    writer: &Writer,
    repo: &TenantRepository,
    plan: &Plan,
    checked: DryRun,
) -> Executed {
    let DryRun { send, mut executed } = checked;
    if executed.error.is_some() || (send.is_none() && plan.prune.is_empty()) {
        return executed;
    }
    let user = service_account_user(&repo.spec.target_namespace, &repo.spec.service_account_name);
    if let Some(objects) = send {
        let sent: Vec<InventoryEntry> = objects.iter().filter_map(entry_of).collect();
        match writer.execute(Write::TenantApply { user: user.clone(), objects }).await {
            Ok(Done::Objects(applied)) => {
                executed.applied = applied;
                executed.applied_objects = sent;
            }
            Ok(_) => {}
            Err(e) => {
                let refusal = match &e {
                    WriteError::Refused(refused) => Some(Refusal::of(entry(sent, refused), &refused.source)),
                    WriteError::Impersonate { .. } => None,
                };
                executed.refused =
                    Some(Refused::Apply { message: format!("{e} (as {user})"), class: e.class(), refusal });
                executed.error = Some(e);
                return executed;
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
                executed.refused = Some(Refused::Prune { message: format!("{e} (as {user})"), class: e.class() });
                executed.error = Some(e);
            }
        }
    }
    executed
}

/// Remembers in `applied` (under `key`, the registration) the digests of what was applied, so
/// that the next revision sends only what it changed; after a failed attempt forgets them, so
/// that the next one sends the whole set, whatever this one left on the cluster.
pub(crate) fn remember(applied: &AppliedObjects, key: &str, plan: &Plan, executed: &Executed) {
    match (&executed.error, &plan.digests) {
        (Some(_), _) => applied.forget(key),
        (None, Some(digests)) if plan.record.is_some() => applied.remember(key, digests.clone()),
        (None, _) => {}
    }
}

impl Executed {
    /// The error when the tenant's client could not even be built (the impersonation failed):
    /// nothing was sent, and the reconcile fails with it before anything is reported. Taken out
    /// of `self`; `None` for any other outcome.
    pub fn unsent(&mut self) -> Option<WriteError> {
        match self.error {
            Some(WriteError::Impersonate { .. }) => self.error.take(),
            _ => None,
        }
    }
}

/// The identity of a refused object: the error names its kind, namespace and name, the object
/// sent its `apiVersion` (the loader allows one object per group, kind and name).
fn entry(
    sent: impl IntoIterator<Item = InventoryEntry>,
    refused: &crate::apply::server_side::ApplyError,
) -> InventoryEntry {
    let named = |entry: &InventoryEntry| {
        entry.kind == refused.kind && entry.namespace == refused.namespace && entry.name == refused.name
    };
    sent.into_iter().find(named).unwrap_or_else(|| InventoryEntry {
        api_version: String::new(),
        kind: refused.kind.clone(),
        namespace: refused.namespace.clone(),
        name: refused.name.clone(),
    })
}
