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
use super::plan::{BusyAgents, Plan};
use super::{AgentWatches, Error, SCHEDULE};
use super::{STALLED_RESYNC, agents, children, inventory};
use crate::api::conditions::{
    REASON_AGENT_JOBS_FAILING, REASON_API_ERROR, REASON_NAME_CONFLICT, REASON_ROLLOUT_FAILED,
};
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
    /// `BusyAgentsCounted`, as planned (written whatever the write of the children did: it
    /// describes what is rendered, not whether it is in place).
    pub busy_agents: BusyAgents,
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
            let agents = if done.agents.scaled_job_name.is_some() {
                agents::job_health(&done.agents, now)
            } else {
                agents::health(&done.agents, min_replicas(children), children.scaled_object().is_some())
            };
            match agents {
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
                agents::Agents::JobsFailing(message) => {
                    (Health::Stalled { reason: REASON_AGENT_JOBS_FAILING.into(), message }, requeue)
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
    Decision { health, applied, requeue, rendered, inventory, busy_agents: plan.busy_agents }
}

/// `minReplicaCount` as rendered: the ScaledObject's with KEDA, else the Deployment's replicas,
/// else (neither says) 1.
fn min_replicas(children: &Children) -> i32 {
    let scaled = children.scaled_object().and_then(|s| s.spec.min_replica_count);
    let replicas = || children.deployment().and_then(|d| d.spec.as_ref()).and_then(|s| s.replicas);
    scaled.or_else(replicas).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use serde_json::{Value, json};

    use super::*;
    use crate::api::CDTargetStatus;
    use crate::api::conditions::{REASON_AGENTS_NOT_AVAILABLE, REASON_APPLIED};
    use crate::apply::WriteError;
    use crate::apply::server_side::{APPLYING, ApplyError};
    use crate::controller::cdtarget::RESYNC;
    use crate::controller::cdtarget::execute::Applied;
    use crate::controller::cdtarget::plan::{SecretsRead, plan};
    use crate::controller::{TRANSIENT_RETRY, WAIT_RETRY};
    use crate::policy::Policy;

    const NOW: Timestamp = Timestamp::UNIX_EPOCH;
    const ALL_WATCHED: AgentWatches = AgentWatches { deployments: true, scaled_objects: true };

    fn target() -> CDTarget {
        CDTarget::test().with_ips(["10.1.2.3"])
    }

    fn planned(target: &CDTarget, keda: bool) -> Plan {
        let keda = crate::controller::inputs::KedaSeen {
            installed: keda,
            version: Some(crate::api::keda::KedaVersion::NEWEST_SUPPORTED),
        };
        let data = BTreeMap::from([("AZP_TOKEN".to_owned(), ByteString(b"pat".to_vec()))]);
        let secrets = SecretsRead::from([("azp-token".to_owned(), Some(data))]);
        let plan = plan(target, &Ok(Policy::default()), &secrets, keda, &[], RESYNC);
        assert!(plan.children.is_some(), "{:?}", plan.health);
        plan
    }

    fn deployment(available: i64) -> Value {
        json!({
            "metadata": {"generation": 1},
            "status": {"observedGeneration": 1, "availableReplicas": available,
                       "conditions": [{"type": "Available", "status": "True"}]},
        })
    }

    fn ready_scaled_object() -> Value {
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn written(deployment: Option<Value>, scaled_object: Option<Value>) -> Written {
        let agents = agents::Observed {
            deployment_name: Some("team-a/agents".into()),
            deployment,
            scaled_object,
            written: false,
            ..agents::Observed::default()
        };
        Written::Children(Applied { agents, inventory: Vec::new() })
    }

    fn api_error(code: u16) -> Error {
        let source = kube::Error::Api(kube::core::Status::failure("refused", "Refused").with_code(code).boxed());
        let refused = ApplyError {
            verb: APPLYING,
            kind: "Deployment".into(),
            namespace: "team-a".into(),
            name: "agents".into(),
            source,
        };
        Error::Apply(WriteError::from(refused))
    }

    fn reason(health: &Health) -> &str {
        health.reason()
    }

    #[test]
    fn ready_once_the_agents_are_available_with_the_plans_requeue_and_new_summary() {
        let target = target();
        let plan = planned(&target, true);
        let rendered = plan.rendered.clone();
        let done = written(Some(deployment(1)), Some(ready_scaled_object()));
        let decision = decide(&target, plan, Ok(&done), ALL_WATCHED, NOW);
        let Health::Ready { reason, message } = &decision.health else { panic!("{:?}", decision.health) };
        assert_eq!(reason, REASON_APPLIED);
        assert!(message.starts_with("1 agents available"), "{message}");
        assert_eq!(decision.applied.reason(), REASON_APPLIED);
        assert_eq!((decision.requeue, decision.rendered), (RESYNC, rendered));
        assert_eq!(decision.inventory, Some(Vec::new()), "the inventory the write recorded");
    }

    #[test]
    fn waiting_agents_watched_come_back_at_the_resync_and_unwatched_ones_are_polled() {
        let target = target();
        let done = written(Some(deployment(0)), Some(ready_scaled_object()));
        let watched = decide(&target, planned(&target, true), Ok(&done), ALL_WATCHED, NOW);
        assert_eq!((reason(&watched.health), watched.requeue), (REASON_AGENTS_NOT_AVAILABLE, RESYNC));
        assert!(matches!(watched.health, Health::Progressing { .. }));
        assert_eq!(watched.applied.reason(), REASON_APPLIED, "the children are in place all the same");
        // KEDA installed after start-up: its ScaledObjects are not watched.
        let deployments_only = AgentWatches { deployments: true, scaled_objects: false };
        let polled = decide(&target, planned(&target, true), Ok(&done), deployments_only, NOW);
        assert_eq!((reason(&polled.health), polled.requeue), (REASON_AGENTS_NOT_AVAILABLE, WAIT_RETRY));
        // Without KEDA there is no ScaledObject to watch.
        let fixed = decide(&target, planned(&target, false), Ok(&done), deployments_only, NOW);
        assert_eq!(fixed.requeue, RESYNC);
    }

    #[test]
    fn a_rollout_past_its_deadline_stalls() {
        let target = target();
        let mut stuck = deployment(0);
        stuck["status"]["conditions"] = json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "slow"}]);
        let done = written(Some(stuck), Some(ready_scaled_object()));
        let decision = decide(&target, planned(&target, true), Ok(&done), ALL_WATCHED, NOW);
        assert!(matches!(&decision.health, Health::Stalled { reason, .. } if reason == REASON_ROLLOUT_FAILED));
        assert_eq!(decision.requeue, RESYNC);
    }

    #[test]
    fn a_name_conflict_stalls_until_the_stalled_resync_and_keeps_summary_and_inventory() {
        let previous = RenderedSummary { deployment: Some("before".into()), ..RenderedSummary::default() };
        let inventory = vec![inventory::reference(crate::render::ChildKind::Deployment, "before")];
        let status = CDTargetStatus {
            rendered: Some(previous.clone()),
            inventory: Some(inventory.clone()),
            ..CDTargetStatus::default()
        };
        let target = target().with_status(status);
        let conflict = children::Conflict {
            kind: "NetworkPolicy".into(),
            namespace: "team-a".into(),
            name: "agents".into(),
            owner: children::Owner::Nobody,
        };
        let done = Written::Conflicts(vec![conflict]);
        let decision = decide(&target, planned(&target, true), Ok(&done), ALL_WATCHED, NOW);
        assert!(matches!(&decision.health, Health::Stalled { reason, .. } if reason == REASON_NAME_CONFLICT));
        assert_eq!(decision.applied, decision.health);
        assert_eq!(decision.requeue, STALLED_RESYNC);
        assert_eq!((decision.rendered, decision.inventory), (Some(previous), Some(inventory)));
    }

    #[test]
    fn an_api_error_is_settled_by_its_class_and_keeps_the_previous_summary() {
        let previous = RenderedSummary { deployment: Some("before".into()), ..RenderedSummary::default() };
        let status = CDTargetStatus { rendered: Some(previous.clone()), ..CDTargetStatus::default() };
        let target = target().with_status(status);
        let transient = decide(&target, planned(&target, true), Err(&api_error(500)), ALL_WATCHED, NOW);
        assert!(matches!(&transient.health, Health::Progressing { reason, .. } if reason == REASON_API_ERROR));
        assert_eq!((transient.requeue, transient.rendered), (TRANSIENT_RETRY, Some(previous)));
        assert_eq!(transient.inventory, None, "a CDTarget from before the inventory keeps none");
        let invalid = decide(&target, planned(&target, true), Err(&api_error(422)), ALL_WATCHED, NOW);
        assert!(matches!(&invalid.health, Health::Stalled { reason, .. } if reason == REASON_API_ERROR));
        assert_eq!(invalid.requeue, STALLED_RESYNC);
    }

    #[test]
    fn a_plan_without_children_reports_its_own_health_and_keeps_the_inventory() {
        let inventory = vec![inventory::reference(crate::render::ChildKind::ScaledObject, "agents")];
        let status = CDTargetStatus { inventory: Some(inventory.clone()), ..CDTargetStatus::default() };
        let target = target().with_status(status);
        let plan = plan(&target, &Ok(Policy::default()), &SecretsRead::new(), Default::default(), &[], RESYNC);
        let expected = plan.health.clone();
        let decision = decide(&target, plan, Ok(&Written::Nothing), ALL_WATCHED, NOW);
        assert_eq!((decision.health, decision.requeue), (expected, WAIT_RETRY));
        assert_eq!(decision.inventory, Some(inventory));
    }

    #[test]
    fn a_render_without_a_deployment_is_ready_from_its_applied_children_and_never_panics() {
        // A shape the renderer does not produce yet: the agents are not a Deployment.
        let target = target();
        let mut plan = planned(&target, false);
        let rendered = plan.children.take().expect("children");
        let others = rendered.iter().filter(|c| c.kind() != crate::render::ChildKind::Deployment).cloned();
        let children = Children::of(others.collect());
        assert!(children.deployment().is_none() && children.network_policy().is_some());
        assert_eq!(min_replicas(&children), 1, "nothing says otherwise");
        let no_deployment_watch = AgentWatches { deployments: false, scaled_objects: false };
        assert!(no_deployment_watch.cover(&children), "no Deployment to watch");
        plan.children = Some(children);
        let done = Written::Children(Applied { agents: agents::Observed::default(), inventory: Vec::new() });
        let decision = decide(&target, plan, Ok(&done), no_deployment_watch, NOW);
        let Health::Ready { message, .. } = &decision.health else { panic!("{:?}", decision.health) };
        assert!(message.starts_with("no agent Deployment is rendered"), "{message}");
        assert_eq!(decision.requeue, RESYNC);
    }
}
