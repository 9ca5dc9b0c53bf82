//! The CDTarget's status after a reconcile (written once by [`crate::controller::frame::Frame::finish`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::decide::Decision;
use super::plan::BusyAgents;
use crate::api::conditions::{APPLIED, BUSY_AGENTS_COUNTED};
use crate::api::reconcile_request;
use crate::api::{CDTarget, CDTargetStatus};
use crate::controller::conditions::{self, Health};
use crate::controller::tenant_text::{self, Object};

/// The status after a reconcile: conditions summarised from the decision's `health` (the
/// agents counted), and `Applied` from its `applied` (the children alone), for the current
/// generation; its rendered summary and inventory. The CDTarget is the tenant's to read, so
/// every message is one [`tenant_text`] lets a tenant read (the Events quote these conditions
/// too).
pub(crate) fn next_status(target: &CDTarget, decision: &Decision, now: &Time) -> CDTargetStatus {
    let generation = target.metadata.generation;
    let mut status = target.status.clone().unwrap_or_default();
    conditions::summarize(&mut status.conditions, &decision.health, generation, now);
    let (ok, reason, message) = match &decision.applied {
        Health::Ready { reason, message } => (true, reason, message),
        Health::Stalled { reason, message } | Health::Progressing { reason, message } => (false, reason, message),
    };
    conditions::set(&mut status.conditions, APPLIED, ok, reason, message, generation, now);
    match &decision.busy_agents {
        BusyAgents::Unchanged => {}
        BusyAgents::Absent => conditions::remove(&mut status.conditions, BUSY_AGENTS_COUNTED),
        BusyAgents::Set { counted, reason, message } => {
            conditions::set(&mut status.conditions, BUSY_AGENTS_COUNTED, *counted, reason, message, generation, now);
        }
    }
    status.conditions =
        status.conditions.iter().map(|c| tenant_text::condition_for_tenant(Object::CDTarget, c)).collect();
    status.observed_generation = generation;
    status.rendered = decision.rendered.clone();
    status.inventory = decision.inventory.clone();
    status.last_handled_reconcile_at =
        reconcile_request::last_handled(&target.metadata, status.last_handled_reconcile_at.as_deref());
    status
}
