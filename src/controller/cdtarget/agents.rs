//! Whether a CDTarget's agents run: a pure function over its Deployment and ScaledObject as the
//! reconcile read them ([`health`]). A CDTarget is `Ready` only when its agents are: the
//! Deployment has observed its current template and at least `minReplicaCount` agents are
//! available (its `Available` condition too, when agents are wanted at all); when KEDA runs, the
//! ScaledObject must be `Ready` as well, since without it the agents never scale.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::api::conditions::{
    REASON_AGENTS_NOT_AVAILABLE, REASON_SCALED_JOB_NOT_READY, REASON_SCALED_OBJECT_NOT_READY,
};
use crate::controller::WAIT_RETRY;

/// The agents' children as read by this reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// `namespace/name` of the rendered Deployment (for messages); `None` when the render holds
    /// no Deployment.
    pub deployment_name: Option<String>,
    /// The live Deployment (`None`: it did not exist when read).
    pub deployment: Option<Value>,
    /// The live ScaledObject (`None`: not read, or it did not exist).
    pub scaled_object: Option<Value>,
    /// The Deployment or the ScaledObject was written by this reconcile: what was read is
    /// older than what the controllers now work on, so nothing read counts yet.
    pub written: bool,
    /// Job mode: `namespace/name` of the rendered ScaledJob (`None`: the render holds none).
    pub scaled_job_name: Option<String>,
    /// Job mode: the live ScaledJob (`None`: it did not exist when read).
    pub scaled_job: Option<Value>,
    /// Job mode: the agent Jobs the ScaledJob created, as listed (only those whose controller
    /// owner is the live ScaledJob count).
    pub agent_jobs: Vec<Value>,
}

/// When to look at agents still awaited again, given the CDTarget's conditions as they were
/// before this reconcile: as long as they have been awaited so far, at least [`WAIT_RETRY`], never
/// longer than `longest` (the resync), so the polls back off 30 s, 30 s, 1 min, 2 min, 4 min...
/// Used only where the Deployment or the ScaledObject is not watched (KEDA installed after
/// start-up); polling every 30 s instead kept a first pass of 10,000 CDTargets, whose agents take
/// minutes to come, at eleven reconciles each (the Flux bench, docs/performance.md).
pub(crate) fn waiting_requeue(conditions: &[Condition], now: Timestamp, longest: Duration) -> Duration {
    let waiting_since = conditions
        .iter()
        .find(|c| c.type_ == crate::api::conditions::READY && c.status != "True")
        .map(|c| c.last_transition_time.0);
    let waited = waiting_since.and_then(|since| Duration::try_from(now.duration_since(since)).ok()).unwrap_or_default();
    // Never rarer than the resync, which may be shorter than the first back-off step.
    waited.max(WAIT_RETRY).min(longest)
}

/// How the agents are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agents {
    /// At least `minReplicaCount` agents are available (and the ScaledObject is Ready).
    Available(String),
    /// Not yet: the reason and what is awaited.
    Waiting {
        /// [`REASON_AGENTS_NOT_AVAILABLE`] or [`REASON_SCALED_OBJECT_NOT_READY`].
        reason: &'static str,
        /// What is awaited, naming the object.
        message: String,
    },
    /// The rollout failed ([`REASON_ROLLOUT_FAILED`]).
    Failed(String),
    /// Job mode: the newest agent Job whose start is decided failed to start
    /// ([`crate::api::conditions::REASON_AGENT_JOBS_FAILING`]).
    JobsFailing(String),
}

/// Whether the agents of a CDTarget run, given the children as read, `min_replicas`
/// (`minReplicaCount`) and whether KEDA renders a ScaledObject for them.
///
/// `minReplicaCount: 0` (a pool scaled to zero behind a placeholder agent) wants no agent: the
/// Deployment counts once it has observed its template, the ScaledObject (with KEDA) still has
/// to be Ready.
///
/// A render without a Deployment (no long-running agents to count) is judged by its children
/// being applied alone: `Available`, saying so. The ScaledObject is judged with the Deployment it
/// scales; a shape that runs its agents otherwise brings the check of its own workload.
pub fn health(observed: &Observed, min_replicas: i32, keda: bool) -> Agents {
    let Some(name) = observed.deployment_name.as_deref() else {
        return Agents::Available("no agent Deployment is rendered, so no agent is counted".into());
    };
    let waiting = |reason, message: String| Agents::Waiting { reason, message };
    if observed.written {
        return waiting(
            REASON_AGENTS_NOT_AVAILABLE,
            format!("the agents' children were just written; waiting for Deployment {name} to report"),
        );
    }
    let Some(deployment) = &observed.deployment else {
        return waiting(REASON_AGENTS_NOT_AVAILABLE, format!("Deployment {name} does not exist yet"));
    };
    let int = |pointer: &str| deployment.pointer(pointer).and_then(Value::as_i64);
    let field = text;
    if let Some(progressing) = condition(deployment, "Progressing")
        && field(&progressing, "status") == "False"
        && field(&progressing, "reason") == "ProgressDeadlineExceeded"
    {
        let why = field(&progressing, "message");
        return Agents::Failed(format!("the rollout of Deployment {name} exceeded its progress deadline: {why}"));
    }
    let generation = int("/metadata/generation").unwrap_or(0);
    if int("/status/observedGeneration").is_none_or(|observed| observed < generation) {
        return waiting(
            REASON_AGENTS_NOT_AVAILABLE,
            format!("Deployment {name} has not observed its current template yet (generation {generation})"),
        );
    }
    let available = int("/status/availableReplicas").unwrap_or(0);
    let wanted = i64::from(min_replicas.max(0));
    let available_condition = condition(deployment, "Available").is_some_and(|c| field(&c, "status") == "True");
    if available < wanted || (wanted > 0 && !available_condition) {
        return waiting(
            REASON_AGENTS_NOT_AVAILABLE,
            format!("{available} of {wanted} agents available (Deployment {name})"),
        );
    }
    let agents = format!("{available} agents available, minReplicaCount {wanted} (Deployment {name})");
    if keda {
        let scaled = observed.scaled_object.as_ref();
        let ready = scaled.and_then(|s| condition(s, "Ready"));
        match ready {
            Some(c) if field(&c, "status") == "True" => {}
            Some(c) => {
                let why = reason_and_message(&c);
                return waiting(
                    REASON_SCALED_OBJECT_NOT_READY,
                    format!("{agents}, but ScaledObject {name} is not Ready ({why})"),
                );
            }
            None if scaled.is_none() => {
                return waiting(
                    REASON_SCALED_OBJECT_NOT_READY,
                    format!("{agents}; ScaledObject {name} does not exist yet"),
                );
            }
            None => {
                return waiting(
                    REASON_SCALED_OBJECT_NOT_READY,
                    format!(
                        "{agents}, but KEDA has not reported ScaledObject {name} Ready yet (is the KEDA operator running?)"
                    ),
                );
            }
        }
        return Agents::Available(format!("{agents}; ScaledObject {name} Ready"));
    }
    // Not kstatus's `Current`: agents above minReplicaCount serve while a rollout goes on.
    Agents::Available(agents)
}

/// How long an agent Job may go without a ready pod before it counts as failed to start (an
/// image that cannot be pulled, a pod that cannot be scheduled): the agent container has no
/// readiness probe, so its pod is ready as soon as it runs.
pub(crate) const JOB_START_GRACE: Duration = Duration::from_secs(5 * 60);

/// How a Job-mode CDTarget's agents are: its ScaledJob must be `Ready`, and the newest agent Job
/// whose start is decided must not have failed to start. A Job's start is decided once it
/// finished, or once it has gone [`JOB_START_GRACE`] without a ready pod; it failed to start when
/// it `Failed` (with `backoffLimit: 0` and `--once`, the agent itself exited with an error: a
/// pipeline job that fails still ends the agent with 0) or never had a ready pod. Jobs not
/// controlled by the live ScaledJob are not looked at (a tenant can make Jobs with KEDA's label).
pub fn job_health(observed: &Observed, now: Timestamp) -> Agents {
    let name = observed.scaled_job_name.as_deref().unwrap_or_default();
    let waiting = |reason, message: String| Agents::Waiting { reason, message };
    if observed.written {
        return waiting(
            REASON_SCALED_JOB_NOT_READY,
            format!("the agents' children were just written; waiting for KEDA to report ScaledJob {name}"),
        );
    }
    let Some(scaled_job) = &observed.scaled_job else {
        return waiting(REASON_SCALED_JOB_NOT_READY, format!("ScaledJob {name} does not exist yet"));
    };
    match condition(scaled_job, "Ready") {
        Some(c) if text(&c, "status") == "True" => {}
        Some(c) => {
            let why = reason_and_message(&c);
            return waiting(REASON_SCALED_JOB_NOT_READY, format!("ScaledJob {name} is not Ready ({why})"));
        }
        None => {
            return waiting(
                REASON_SCALED_JOB_NOT_READY,
                format!("KEDA has not reported ScaledJob {name} Ready yet (is the KEDA operator running?)"),
            );
        }
    }
    let owner = scaled_job.pointer("/metadata/uid").and_then(Value::as_str);
    let mut jobs: Vec<&Value> =
        observed.agent_jobs.iter().filter(|job| owner.is_some() && controller_uid(job) == owner).collect();
    // Newest first; RFC 3339 timestamps of one API server sort as text.
    jobs.sort_by(|a, b| created(b).cmp(created(a)));
    let running = jobs.iter().filter(|job| !finished(job)).count();
    let decided = jobs.iter().find_map(|job| start_of(job, now).map(|start| (*job, start)));
    if let Some((job, Start::Failed(why))) = decided {
        let job_name = job.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        return Agents::JobsFailing(format!(
            "the newest agent Job of ScaledJob {name}, {job_name}, failed to start: {why}"
        ));
    }
    Agents::Available(format!("ScaledJob {name} Ready; {running} agent Jobs running"))
}

/// Whether an agent Job started, once that is decided.
enum Start {
    /// It ran (it completed, or it has a ready pod).
    Started,
    /// It failed, or went [`JOB_START_GRACE`] without a ready pod: why.
    Failed(String),
}

fn start_of(job: &Value, now: Timestamp) -> Option<Start> {
    if let Some(c) = condition(job, "Failed").filter(|c| text(c, "status") == "True") {
        return Some(Start::Failed(format!("the Job failed ({})", reason_and_message(&c))));
    }
    if condition(job, "Complete").is_some_and(|c| text(&c, "status") == "True") {
        return Some(Start::Started);
    }
    if job.pointer("/status/ready").and_then(Value::as_i64).unwrap_or(0) > 0 {
        return Some(Start::Started);
    }
    let since = created(job).parse::<Timestamp>().ok()?;
    let waited = Duration::try_from(now.duration_since(since)).ok()?;
    (waited >= JOB_START_GRACE).then(|| {
        Start::Failed(format!(
            "no pod of it has been ready for {} s since it was created (an image that cannot be pulled, or a pod that cannot be scheduled?)",
            waited.as_secs()
        ))
    })
}

fn finished(job: &Value) -> bool {
    ["Complete", "Failed"].iter().any(|type_| condition(job, type_).is_some_and(|c| text(&c, "status") == "True"))
}

fn created(job: &Value) -> &str {
    job.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or_default()
}

fn controller_uid(job: &Value) -> Option<&str> {
    job.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

fn condition(object: &Value, type_: &str) -> Option<Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|list| list.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(type_)).cloned())
}

/// A condition's `reason: message`, either left out when empty.
fn reason_and_message(c: &Value) -> String {
    [text(c, "reason"), text(c, "message")].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join(": ")
}

fn text(c: &Value, name: &str) -> String {
    c.get(name).and_then(Value::as_str).unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ready(status: &str, since: &str) -> Vec<Condition> {
        vec![Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: "AgentsNotAvailable".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(since.parse().unwrap()),
        }]
    }

    #[test]
    fn the_fallback_poll_for_awaited_agents_backs_off_with_the_wait_up_to_the_resync() {
        let now: Timestamp = "2026-11-24T12:00:00Z".parse().unwrap();
        let resync = Duration::from_secs(600);
        // Just started waiting (or Ready before this reconcile): the shortest poll.
        assert_eq!(waiting_requeue(&[], now, resync), WAIT_RETRY);
        assert_eq!(waiting_requeue(&ready("True", "2026-11-24T11:00:00Z"), now, resync), WAIT_RETRY);
        assert_eq!(waiting_requeue(&ready("False", "2026-11-24T11:59:50Z"), now, resync), WAIT_RETRY);
        // Waiting for two minutes: the next look in two minutes.
        assert_eq!(waiting_requeue(&ready("False", "2026-11-24T11:58:00Z"), now, resync), Duration::from_secs(120));
        // Waiting for an hour: never rarer than the resync.
        assert_eq!(waiting_requeue(&ready("Unknown", "2026-11-24T11:00:00Z"), now, resync), resync);
        // A resync shorter than the first step (`--cdtarget-resync-interval 2s`) is kept.
        let short = Duration::from_secs(2);
        assert_eq!(waiting_requeue(&ready("False", "2026-11-24T11:58:00Z"), now, short), short);
    }

    fn deployment(generation: i64, observed: Option<i64>, available: i64, available_condition: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "agents", "namespace": "team-a", "generation": generation},
            "status": {
                "observedGeneration": observed, "availableReplicas": available,
                "conditions": [{"type": "Available", "status": available_condition}]
            }
        })
    }

    fn scaled_object(ready: Option<(&str, &str)>) -> Value {
        let conditions = ready
            .map(|(status, message)| json!([{"type": "Ready", "status": status, "reason": "ScaledObjectCheckFailed", "message": message}]))
            .unwrap_or(json!([]));
        json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "status": {"conditions": conditions}})
    }

    fn observed(deployment: Option<Value>, scaled: Option<Value>) -> Observed {
        Observed {
            deployment_name: Some("team-a/agents".into()),
            deployment,
            scaled_object: scaled,
            written: false,
            ..Observed::default()
        }
    }

    #[test]
    fn without_a_deployment_rendered_the_applied_children_alone_decide() {
        let none = Observed { deployment_name: None, ..Observed::default() };
        let expected = Agents::Available("no agent Deployment is rendered, so no agent is counted".into());
        assert_eq!(health(&none, 1, false), expected);
        let written = Observed { written: true, ..none };
        assert_eq!(health(&written, 0, false), expected);
    }

    #[test]
    fn ready_only_once_min_replica_count_agents_are_available_at_the_observed_generation() {
        let one_of_two = observed(Some(deployment(1, Some(1), 1, "False")), None);
        assert_eq!(
            health(&one_of_two, 2, false),
            Agents::Waiting {
                reason: REASON_AGENTS_NOT_AVAILABLE,
                message: "1 of 2 agents available (Deployment team-a/agents)".into()
            }
        );
        let two = observed(Some(deployment(1, Some(1), 2, "True")), None);
        assert_eq!(
            health(&two, 2, false),
            Agents::Available("2 agents available, minReplicaCount 2 (Deployment team-a/agents)".into())
        );
        // Scaled above minReplicaCount by KEDA: available as soon as minReplicaCount agents are.
        let three_of_five = observed(Some(deployment(1, Some(1), 3, "True")), Some(scaled_object(Some(("True", "")))));
        assert!(matches!(health(&three_of_five, 2, true), Agents::Available(_)));
    }

    #[test]
    fn a_template_not_observed_yet_or_a_missing_available_condition_is_not_ready() {
        let behind = observed(Some(deployment(3, Some(2), 2, "True")), None);
        let Agents::Waiting { message, .. } = health(&behind, 2, false) else { panic!() };
        assert_eq!(message, "Deployment team-a/agents has not observed its current template yet (generation 3)");
        let unobserved = observed(Some(deployment(1, None, 0, "False")), None);
        assert!(matches!(health(&unobserved, 1, false), Agents::Waiting { .. }));
        let no_condition = observed(Some(deployment(1, Some(1), 2, "False")), None);
        assert!(matches!(health(&no_condition, 2, false), Agents::Waiting { .. }));
        assert!(matches!(health(&observed(None, None), 1, false), Agents::Waiting { .. }));
    }

    #[test]
    fn what_was_just_written_is_not_judged_by_what_was_read_before() {
        let mut written = observed(Some(deployment(1, Some(1), 2, "True")), None);
        written.written = true;
        assert!(matches!(health(&written, 2, false), Agents::Waiting { reason: REASON_AGENTS_NOT_AVAILABLE, .. }));
    }

    #[test]
    fn a_rollout_past_its_progress_deadline_fails() {
        let mut stuck = deployment(2, Some(2), 1, "True");
        stuck["status"]["conditions"] = json!([
            {"type": "Available", "status": "True"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"agents-1\" has timed out progressing."}
        ]);
        assert_eq!(
            health(&observed(Some(stuck), None), 1, false),
            Agents::Failed("the rollout of Deployment team-a/agents exceeded its progress deadline: ReplicaSet \"agents-1\" has timed out progressing.".into())
        );
    }

    #[test]
    fn with_keda_the_scaled_object_must_be_ready_too() {
        let agents = || Some(deployment(1, Some(1), 1, "True"));
        let not_ready = observed(agents(), Some(scaled_object(Some(("False", "Target resource doesn't exist")))));
        assert_eq!(
            health(&not_ready, 1, true),
            Agents::Waiting {
                reason: REASON_SCALED_OBJECT_NOT_READY,
                message: "1 agents available, minReplicaCount 1 (Deployment team-a/agents), but ScaledObject team-a/agents is not Ready (ScaledObjectCheckFailed: Target resource doesn't exist)".into()
            }
        );
        let unreported = observed(agents(), Some(scaled_object(None)));
        let Agents::Waiting { message, .. } = health(&unreported, 1, true) else { panic!() };
        assert!(message.ends_with("(is the KEDA operator running?)"), "{message}");
        let ready = observed(agents(), Some(scaled_object(Some(("True", "")))));
        assert!(matches!(health(&ready, 1, true), Agents::Available(_)));
        assert!(matches!(health(&observed(agents(), None), 1, true), Agents::Waiting { .. }));
    }

    #[test]
    fn min_replica_count_zero_wants_no_agent_but_an_observed_template_and_a_ready_scaled_object() {
        let scaled_to_zero = observed(Some(deployment(1, Some(1), 0, "True")), Some(scaled_object(Some(("True", "")))));
        assert_eq!(
            health(&scaled_to_zero, 0, true),
            Agents::Available(
                "0 agents available, minReplicaCount 0 (Deployment team-a/agents); ScaledObject team-a/agents Ready"
                    .into()
            )
        );
        let not_observed = observed(Some(deployment(2, Some(1), 0, "True")), Some(scaled_object(Some(("True", "")))));
        assert!(matches!(health(&not_observed, 0, true), Agents::Waiting { .. }));
    }

    #[test]
    fn hostile_status_shapes_read_as_not_available() {
        let strange = json!({"metadata": {"generation": "one"}, "status": {"conditions": {"Available": true}, "availableReplicas": "2"}});
        assert!(matches!(health(&observed(Some(strange), None), 1, false), Agents::Waiting { .. }));
    }

    fn scaled_job(ready: Option<&str>) -> Value {
        let conditions = ready.map(|status| json!([{"type": "Ready", "status": status, "reason": "TriggerError", "message": "Triggers defined in ScaledJob are not working correctly"}])).unwrap_or(json!([]));
        json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "metadata": {"name": "agents", "uid": "sj-uid"}, "status": {"conditions": conditions}})
    }

    fn agent_job(name: &str, created: &str, owner: &str, status: Value) -> Value {
        json!({
            "metadata": {"name": name, "creationTimestamp": created,
                "ownerReferences": [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "name": "agents", "uid": owner, "controller": true}]},
            "status": status
        })
    }

    fn job_mode(scaled: Option<Value>, jobs: Vec<Value>) -> Observed {
        Observed {
            scaled_job_name: Some("team-a/agents".into()),
            scaled_job: scaled,
            agent_jobs: jobs,
            ..Observed::default()
        }
    }

    const NOW: &str = "2026-11-28T12:00:00Z";

    #[test]
    fn job_mode_is_ready_when_the_scaled_job_is_and_no_recent_agent_job_failed_to_start() {
        let now: Timestamp = NOW.parse().unwrap();
        let complete = json!({"conditions": [{"type": "Complete", "status": "True"}]});
        let running = json!({"ready": 1, "active": 1});
        let jobs = vec![
            agent_job("agents-a", "2026-11-28T11:00:00Z", "sj-uid", complete),
            agent_job("agents-b", "2026-11-28T11:50:00Z", "sj-uid", running),
            // Just created and not running yet: its start is not decided.
            agent_job("agents-c", "2026-11-28T11:59:00Z", "sj-uid", json!({"active": 1})),
        ];
        assert_eq!(
            job_health(&job_mode(Some(scaled_job(Some("True"))), jobs), now),
            Agents::Available("ScaledJob team-a/agents Ready; 2 agent Jobs running".into())
        );
    }

    #[test]
    fn job_mode_waits_for_keda_to_report_the_scaled_job_ready() {
        let now: Timestamp = NOW.parse().unwrap();
        let Agents::Waiting { reason, message } = job_health(&job_mode(Some(scaled_job(Some("False"))), vec![]), now)
        else {
            panic!()
        };
        assert_eq!(reason, REASON_SCALED_JOB_NOT_READY);
        assert_eq!(
            message,
            "ScaledJob team-a/agents is not Ready (TriggerError: Triggers defined in ScaledJob are not working correctly)"
        );
        let Agents::Waiting { message, .. } = job_health(&job_mode(Some(scaled_job(None)), vec![]), now) else {
            panic!()
        };
        assert!(message.ends_with("(is the KEDA operator running?)"), "{message}");
        assert!(matches!(job_health(&job_mode(None, vec![]), now), Agents::Waiting { .. }));
        let written = Observed { written: true, ..job_mode(Some(scaled_job(Some("True"))), vec![]) };
        assert!(matches!(job_health(&written, now), Agents::Waiting { reason: REASON_SCALED_JOB_NOT_READY, .. }));
    }

    #[test]
    fn job_mode_fails_when_the_newest_decided_agent_job_failed_or_never_got_a_ready_pod() {
        let now: Timestamp = NOW.parse().unwrap();
        let failed = json!({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]});
        let complete = json!({"conditions": [{"type": "Complete", "status": "True"}]});
        let older_complete = agent_job("agents-a", "2026-11-28T10:00:00Z", "sj-uid", complete.clone());
        let newer_failed = agent_job("agents-b", "2026-11-28T11:00:00Z", "sj-uid", failed.clone());
        assert_eq!(
            job_health(&job_mode(Some(scaled_job(Some("True"))), vec![older_complete.clone(), newer_failed.clone()]), now),
            Agents::JobsFailing("the newest agent Job of ScaledJob team-a/agents, agents-b, failed to start: the Job failed (BackoffLimitExceeded: Job has reached the specified backoff limit)".into())
        );
        // A Job that completed after the failure makes the agents healthy again.
        let newest_complete = agent_job("agents-c", "2026-11-28T11:30:00Z", "sj-uid", complete);
        let recovered = vec![older_complete, newer_failed, newest_complete];
        assert!(matches!(job_health(&job_mode(Some(scaled_job(Some("True"))), recovered), now), Agents::Available(_)));
        // Stuck without a ready pod past the grace: an image that cannot be pulled.
        let stuck = agent_job("agents-d", "2026-11-28T11:50:00Z", "sj-uid", json!({"active": 1, "ready": 0}));
        let Agents::JobsFailing(message) = job_health(&job_mode(Some(scaled_job(Some("True"))), vec![stuck]), now)
        else {
            panic!()
        };
        assert!(message.contains("agents-d, failed to start: no pod of it has been ready for 600 s"), "{message}");
    }

    #[test]
    fn jobs_the_scaled_job_does_not_control_are_not_counted() {
        let now: Timestamp = NOW.parse().unwrap();
        let failed = json!({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]});
        // A tenant's own Job with KEDA's label, or one of a deleted ScaledJob of the same name.
        let foreign = agent_job("agents-x", "2026-11-28T11:59:00Z", "someone-else", failed);
        assert_eq!(
            job_health(&job_mode(Some(scaled_job(Some("True"))), vec![foreign]), now),
            Agents::Available("ScaledJob team-a/agents Ready; 0 agent Jobs running".into())
        );
    }
}
