//! What a reconcile concluded ([`Concluded`], by [`conclude`]): the plan's verdicts, record and
//! problems after what the later steps found. A refusal of the dry run, the apply or the prune
//! ([`Refused`]) fails `Applied` and `Ready` and keeps every record a later reconcile needs; the
//! health check ([`Waited`]) decides `Ready` of what was applied. A pure function, run once per
//! reconcile; [`super::summarize()`] makes the status and the requeue of it, and the commit status
//! verdict and the tenant's SyncStatus read it.

use std::time::Duration;

use super::execute::{Executed, Refused};
use super::plan::{Plan, Record, apply_schedule, capped_list, union};
use super::wait::Waited;
use crate::api::conditions::{REASON_APPLY_FAILED, REASON_PRUNE_FAILED};
use crate::api::tenant_repository::TenantRepository;
use crate::controller::conditions::{Health, Verdict};
use crate::controller::sooner;
use crate::error::Class;
use crate::problem::Problem;
use crate::source::registration::DEFAULT_INTERVAL;
use crate::text::short_revision;

/// The plan's verdicts after the apply, the prune and the health check.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Concluded {
    /// The overall health; `None` while suspended (`Ready` then keeps its status).
    pub health: Option<Health>,
    /// `SourceReady`; `None` leaves it as it is.
    pub source_ready: Option<Verdict>,
    /// `Applied`; `None` leaves it as it is.
    pub applied: Option<Verdict>,
    /// The commit fetched, when one was.
    pub fetched_revision: Option<String>,
    /// The record to keep; `None` keeps the previous one.
    pub record: Option<Record>,
    /// Every located problem of the evaluated revision (validation, objects the API server
    /// refused, objects not healthy), as data for the tenant.
    pub problems: Vec<Problem>,
    /// When to reconcile again as far as the plan, the apply and the health check go; `None`
    /// waits for a change of the registration.
    pub requeue: Option<Duration>,
}

/// What the reconcile of `repo` concluded from `plan`, what was `executed` and what the health
/// check found (`waited`).
pub(crate) fn conclude(repo: &TenantRepository, plan: &Plan, executed: &Executed, waited: &Waited) -> Concluded {
    let mut concluded = Concluded {
        health: plan.health.clone(),
        source_ready: plan.source_ready.clone(),
        applied: plan.applied.clone(),
        fetched_revision: plan.fetched_revision.clone(),
        record: plan.record.clone(),
        problems: plan.problems.clone(),
        requeue: plan.requeue,
    };
    match &executed.refused {
        None => {}
        // Nothing was written, so nothing is recorded (the previous revision and inventory stay
        // as they are), and every refused object is a located problem.
        Some(Refused::DryRun { refusals, user, class }) => {
            let problems: Vec<Problem> =
                refusals.iter().flat_map(|refusal| refusal.problems(plan.origins.get(&refusal.entry))).collect();
            let revision = plan.fetched_revision.as_deref().map(short_revision).unwrap_or_default().to_owned();
            let message = format!(
                "revision {revision} was not applied: the API server refused {} of {} objects in a server-side dry run as {user}, so nothing was written: {}",
                refusals.len(),
                executed.dry_run,
                capped_list(&problems),
            );
            concluded.record = None;
            concluded.problems = problems;
            concluded.fail(REASON_APPLY_FAILED, message, *class);
        }
        // The previous revision stays recorded, and the inventory also holds what this attempt
        // may have created, so that nothing escapes a later prune.
        Some(Refused::Apply { message, class, refusal }) => {
            let previous = repo.status.clone().unwrap_or_default();
            let attempted = plan.record.as_ref().map(|r| r.inventory.clone()).unwrap_or_default();
            let inventory = union(&previous.inventory, &attempted);
            concluded.record = previous
                .last_applied_revision
                .clone()
                .map(|revision| Record {
                    revision,
                    digest: previous.last_applied_digest.clone().unwrap_or_default(),
                    inventory: inventory.clone(),
                })
                .or(Some(Record { revision: String::new(), digest: String::new(), inventory }));
            concluded.fail(REASON_APPLY_FAILED, message.clone(), *class);
            if let Some(refusal) = refusal {
                concluded.problems = refusal.problems(plan.origins.get(&refusal.entry));
            }
        }
        // The applied revision is recorded, and the objects not deleted stay in the inventory so
        // the next cycle deletes them.
        Some(Refused::Prune { message, class }) => {
            if let Some(record) = &mut concluded.record {
                record.inventory = union(&record.inventory, &plan.prune);
            }
            concluded.fail(REASON_PRUNE_FAILED, message.clone(), *class);
        }
    }
    if let Some(health) = &waited.health {
        concluded.health = Some(health.clone());
    }
    concluded.problems.extend(waited.problems.iter().cloned());
    concluded.requeue = sooner(concluded.requeue, waited.recheck);
    concluded
}

impl Concluded {
    fn fail(&mut self, reason: &str, message: String, class: Class) {
        self.applied = Some(Verdict::new(false, reason, &message));
        // The plan's own requeue is the interval (with its jitter): a stalled or waiting apply
        // is tried again with the next poll, which also picks up a fixing push.
        let interval = self.requeue.unwrap_or(DEFAULT_INTERVAL);
        let settled = apply_schedule(interval).settle(class);
        self.health = Some(Health::failed(settled, reason, message));
        self.requeue = Some(settled.requeue);
    }
}
