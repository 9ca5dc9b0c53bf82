//! What a CDTarget reconcile reports once its writes are done: a pure function over the plan,
//! what the write of the children did, which agents' objects are watched, and the time.
//!
//! - `Applied` says whether the children are in place: the plan's health when they were
//!   written, `Stalled`/`NameConflict` when an object with a child's name is not this
//!   CDTarget's, and when the API server refused, the class of the failure decides (the same
//!   class `error_policy` settles the requeue by).
//! - `Ready` counts the agents too ([`agents::health`]) once the children are in place.
//! - The rendered summary and the inventory are the new ones only when every child was written;
//!   otherwise the previous ones stay (the inventory grows by what may have been written, so
//!   that nothing is lost: [`inventory::after_failure`]).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::execute::Written;
use super::plan::Plan;
use super::{AgentWatches, Error, REASON_API_ERROR, REASON_NAME_CONFLICT, REASON_ROLLOUT_FAILED, SCHEDULE};
use super::{STALLED_RESYNC, agents, children, inventory};
use crate::api::{CDTarget, ChildReference, RenderedSummary};
use crate::controller::conditions::Health;
use crate::error::Classify;
use crate::render::Children;

/// What a reconcile reports and when it comes back.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// `Ready`, `Reconciling`, `Stalled`: the children and the agents.
    pub health: Health,
    /// `Applied`: the children alone.
    pub applied: Health,
    /// When to reconcile again.
    pub requeue: Duration,
    /// The rendered summary for status.
    pub rendered: Option<RenderedSummary>,
    /// The inventory for status.
    pub inventory: Option<Vec<ChildReference>>,
}

/// The decision after `target`'s reconcile planned `plan` and the write of its children gave
/// `written`, with `watches` reporting the changes of the agents' objects they cover, at `now`.
pub fn decide(
    target: &CDTarget,
    plan: Plan,
    written: Result<&Written, &Error>,
    watches: AgentWatches,
    now: Timestamp,
) -> Decision {
    let status = target.status.as_ref();
    let previous_rendered = status.and_then(|s| s.rendered.clone());
    let previous_inventory = status.and_then(|s| s.inventory.clone());
    let previous_conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();

    let (applied, requeue) = match written {
        Ok(Written::Conflicts(conflicts)) => (
            Health::Stalled { reason: REASON_NAME_CONFLICT.into(), message: children::conflict_message(conflicts) },
            STALLED_RESYNC,
        ),
        Ok(_) => (plan.health.clone(), plan.requeue),
        // The condition tells the same story as the requeue `error_policy` will pick.
        Err(e) => {
            let settled = SCHEDULE.settle(e.class());
            (Health::failed(settled, REASON_API_ERROR, e.to_string()), settled.requeue)
        }
    };
    let (health, requeue) = match (&applied, written, &plan.children) {
        (Health::Ready { reason, message }, Ok(Written::Children(done)), Some(children)) => {
            match agents::health(&done.agents, min_replicas(children), children.scaled_object().is_some()) {
                agents::Agents::Available(agents) => {
                    (Health::Ready { reason: reason.clone(), message: format!("{agents}; {message}") }, requeue)
                }
                // A change of the Deployment or ScaledObject (their status too) is watched and
                // reconciles at once: then only the resync comes back. Where one is not (KEDA
                // installed after start-up has no ScaledObject watch) a poll backs off while the
                // wait lasts.
                agents::Agents::Waiting { reason, message } => {
                    let poll = if watches.cover(children) {
                        requeue
                    } else {
                        agents::waiting_requeue(previous_conditions, now, requeue)
                    };
                    (Health::Progressing { reason: reason.to_owned(), message }, poll)
                }
                agents::Agents::Failed(message) => {
                    (Health::Stalled { reason: REASON_ROLLOUT_FAILED.into(), message }, requeue)
                }
            }
        }
        _ => (applied.clone(), requeue),
    };
    // A plan without children already carries the previous summary; a failed write keeps it too.
    let (rendered, inventory) = match (&plan.children, written) {
        (Some(_), Ok(Written::Children(done))) => (plan.rendered, Some(done.inventory.clone())),
        (None, _) => (plan.rendered, previous_inventory),
        (Some(_), Ok(_)) => (previous_rendered, previous_inventory),
        (Some(children), Err(_)) => {
            (previous_rendered, inventory::after_failure(previous_inventory.as_deref(), Some(children)))
        }
    };
    Decision { health, applied, requeue, rendered, inventory }
}

/// `minReplicaCount` as rendered: the ScaledObject's with KEDA, else the Deployment's replicas.
fn min_replicas(children: &Children) -> i32 {
    let scaled = children.scaled_object().and_then(|s| s.spec.min_replica_count);
    scaled.or_else(|| children.deployment().spec.as_ref().and_then(|s| s.replicas)).unwrap_or(1)
}
