//! kstatus: whether a live Kubernetes object is what its spec asks for, as a pure function over
//! the object as read ([`compute`]). The rules follow the kstatus library of
//! `sigs.k8s.io/cli-utils` (what `kubectl`-based tools and Flux's `spec.wait` use), written
//! here over JSON:
//!
//! - an object being deleted is `Terminating`;
//! - `status.observedGeneration` behind `metadata.generation` is `InProgress`;
//! - a `Reconciling=True` condition is `InProgress`, a `Stalled=True` condition `Failed`;
//! - then the rules of the kinds that predate conditions: Deployment, StatefulSet, DaemonSet,
//!   ReplicaSet, Job, Pod, PersistentVolumeClaim, Service, PodDisruptionBudget (ConfigMaps,
//!   Secrets and CronJobs are always current);
//! - then, for any other kind, a `Ready` condition (`True`: current; `False` or `Unknown`: in
//!   progress) — Flux's reading of objects such as CDTargets that report `Ready`;
//! - an object none of this applies to (no status) is `Current`.
//!
//! Two choices differ from kstatus, both stricter: a Service of type `LoadBalancer` is current
//! only once `status.loadBalancer.ingress` has an address (kstatus asks for a cluster IP only;
//! Helm's `--wait` asks for the ingress), and a PodDisruptionBudget whose `currentHealthy` is
//! below `desiredHealthy` is in progress (kstatus trusts `observedGeneration` alone).
//!
//! Nothing here reads the cluster or imports the controller: every byte of a tenant's object is
//! untrusted, so missing or mistyped fields read as absent, never as a panic.

use serde_json::Value;

/// The kstatus status of one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// What the spec asks for is in place.
    Current,
    /// Not yet: the controllers are working on it.
    InProgress,
    /// It will not get there without a change (a failed Job, an exceeded progress deadline).
    Failed,
    /// It is being deleted.
    Terminating,
    /// It does not exist.
    NotFound,
}

impl Status {
    /// The kstatus name: `Current`, `InProgress`, `Failed`, `Terminating`, `NotFound`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Current => "Current",
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Terminating => "Terminating",
            Status::NotFound => "NotFound",
        }
    }
}

/// A status and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assessment {
    /// The status.
    pub status: Status,
    /// What was seen, for people (`1 of 2 replicas available`).
    pub message: String,
}

impl Assessment {
    fn new(status: Status, message: impl Into<String>) -> Self {
        Assessment { status, message: message.into() }
    }

    fn current(message: impl Into<String>) -> Self {
        Assessment::new(Status::Current, message)
    }

    fn in_progress(message: impl Into<String>) -> Self {
        Assessment::new(Status::InProgress, message)
    }

    fn failed(message: impl Into<String>) -> Self {
        Assessment::new(Status::Failed, message)
    }

    /// Whether the object is [`Status::Current`].
    pub fn is_current(&self) -> bool {
        self.status == Status::Current
    }
}

/// The status of `object` as read from the API server (`None`: it does not exist).
pub(crate) fn compute(object: Option<&Value>) -> Assessment {
    let Some(object) = object else { return Assessment::new(Status::NotFound, "not found") };
    if let Some(generic) = generic(object) {
        return generic;
    }
    let api_version = text(object, "/apiVersion").unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let kind = text(object, "/kind").unwrap_or_default();
    match (group, kind) {
        ("apps" | "extensions", "Deployment") => deployment(object),
        ("apps", "StatefulSet") => stateful_set(object),
        ("apps" | "extensions", "DaemonSet") => daemon_set(object),
        ("apps" | "extensions", "ReplicaSet") => replica_set(object),
        ("batch", "Job") => job(object),
        ("batch", "CronJob") | ("", "ConfigMap" | "Secret") => Assessment::current("always current"),
        ("", "Pod") => pod(object),
        ("", "PersistentVolumeClaim") => persistent_volume_claim(object),
        ("", "Service") => service(object),
        ("policy", "PodDisruptionBudget") => pod_disruption_budget(object),
        _ => ready_condition(object).unwrap_or_else(|| Assessment::current("current (no status to wait for)")),
    }
}

/// Deletion, generation and the standard `Reconciling`/`Stalled` conditions.
fn generic(object: &Value) -> Option<Assessment> {
    if object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        return Some(Assessment::new(Status::Terminating, "being deleted"));
    }
    if let (Some(generation), Some(observed)) =
        (int(object, "/metadata/generation"), int(object, "/status/observedGeneration"))
        && observed != generation
    {
        return Some(Assessment::in_progress(format!(
            "generation {generation} is not observed yet (status.observedGeneration {observed})"
        )));
    }
    if let Some(c) = condition(object, "Reconciling").filter(|c| c.status == "True") {
        return Some(Assessment::in_progress(c.describe("reconciling")));
    }
    if let Some(c) = condition(object, "Stalled").filter(|c| c.status == "True") {
        return Some(Assessment::failed(c.describe("stalled")));
    }
    None
}

fn deployment(object: &Value) -> Assessment {
    // Without a progress deadline the controller never reports progress: count it as made.
    let mut progressing = int(object, "/spec/progressDeadlineSeconds").is_none_or(|s| s == i64::from(i32::MAX));
    let mut available = false;
    for c in conditions(object) {
        match c.type_.as_str() {
            "Progressing" if c.reason == "ProgressDeadlineExceeded" => {
                return Assessment::failed(c.describe("progress deadline exceeded"));
            }
            "Progressing" if c.status == "True" && c.reason == "NewReplicaSetAvailable" => progressing = true,
            "Available" if c.status == "True" => available = true,
            _ => {}
        }
    }
    let spec = int(object, "/spec/replicas").unwrap_or(1);
    let replicas = int(object, "/status/replicas").unwrap_or(0);
    let updated = int(object, "/status/updatedReplicas").unwrap_or(0);
    let ready = int(object, "/status/readyReplicas").unwrap_or(0);
    let available_replicas = int(object, "/status/availableReplicas").unwrap_or(0);
    if spec > replicas {
        return Assessment::in_progress(format!("{replicas} of {spec} replicas created"));
    }
    if spec > updated {
        return Assessment::in_progress(format!("{updated} of {spec} replicas updated"));
    }
    if replicas > spec {
        return Assessment::in_progress(format!("{} old replicas pending termination", replicas - spec));
    }
    if updated > available_replicas {
        return Assessment::in_progress(format!("{available_replicas} of {updated} replicas available"));
    }
    if spec > ready {
        return Assessment::in_progress(format!("{ready} of {spec} replicas ready"));
    }
    if !progressing {
        return Assessment::in_progress("the new ReplicaSet is not available yet");
    }
    if !available {
        return Assessment::in_progress("the Deployment is not Available");
    }
    Assessment::current(format!("{available_replicas} of {spec} replicas available"))
}

fn stateful_set(object: &Value) -> Assessment {
    if text(object, "/spec/updateStrategy/type") == Some("OnDelete") {
        return Assessment::current("updated on delete: nothing to wait for");
    }
    let spec = int(object, "/spec/replicas").unwrap_or(1);
    let replicas = int(object, "/status/replicas").unwrap_or(0);
    let ready = int(object, "/status/readyReplicas").unwrap_or(0);
    let current = int(object, "/status/currentReplicas").unwrap_or(0);
    let updated = int(object, "/status/updatedReplicas").unwrap_or(0);
    if spec > replicas {
        return Assessment::in_progress(format!("{replicas} of {spec} replicas created"));
    }
    if spec > ready {
        return Assessment::in_progress(format!("{ready} of {spec} replicas ready"));
    }
    if replicas > spec {
        return Assessment::in_progress(format!("{} replicas pending termination", replicas - spec));
    }
    if let Some(partition) = int(object, "/spec/updateStrategy/rollingUpdate/partition") {
        return if updated < spec - partition {
            Assessment::in_progress(format!(
                "{updated} of {} replicas updated (partition {partition})",
                spec - partition
            ))
        } else {
            Assessment::current(format!("partitioned rollout complete: {updated} updated"))
        };
    }
    if spec > current {
        return Assessment::in_progress(format!("{current} of {spec} replicas at the current revision"));
    }
    if text(object, "/status/currentRevision") != text(object, "/status/updateRevision") {
        return Assessment::in_progress("waiting for the update revision to become the current one");
    }
    Assessment::current(format!("{ready} of {spec} replicas ready"))
}

fn daemon_set(object: &Value) -> Assessment {
    // The controller always reports these once it has acted on the object.
    if int(object, "/metadata/generation").is_none() || int(object, "/status/observedGeneration").is_none() {
        return Assessment::in_progress("not observed by the DaemonSet controller yet");
    }
    let Some(desired) = int(object, "/status/desiredNumberScheduled") else {
        return Assessment::in_progress("status.desiredNumberScheduled is not reported yet");
    };
    for (field, what) in [
        ("/status/currentNumberScheduled", "scheduled"),
        ("/status/updatedNumberScheduled", "updated"),
        ("/status/numberAvailable", "available"),
        ("/status/numberReady", "ready"),
    ] {
        let count = int(object, field).unwrap_or(0);
        if desired > count {
            return Assessment::in_progress(format!("{count} of {desired} pods {what}"));
        }
    }
    Assessment::current(format!("{desired} of {desired} pods ready"))
}

fn replica_set(object: &Value) -> Assessment {
    if conditions(object).iter().any(|c| c.type_ == "ReplicaFailure" && c.status == "True") {
        return Assessment::in_progress("ReplicaFailure: pods could not be created");
    }
    let spec = int(object, "/spec/replicas").unwrap_or(1);
    let replicas = int(object, "/status/replicas").unwrap_or(0);
    let labelled = int(object, "/status/fullyLabeledReplicas").unwrap_or(0);
    let available = int(object, "/status/availableReplicas").unwrap_or(0);
    let ready = int(object, "/status/readyReplicas").unwrap_or(0);
    if spec > labelled {
        return Assessment::in_progress(format!("{labelled} of {spec} replicas labelled"));
    }
    if spec > available {
        return Assessment::in_progress(format!("{available} of {spec} replicas available"));
    }
    if spec > ready {
        return Assessment::in_progress(format!("{ready} of {spec} replicas ready"));
    }
    if replicas > spec {
        return Assessment::in_progress(format!("{} replicas pending termination", replicas - spec));
    }
    Assessment::current(format!("{available} of {spec} replicas available"))
}

fn job(object: &Value) -> Assessment {
    let parallelism = int(object, "/spec/parallelism").unwrap_or(1);
    let completions = int(object, "/spec/completions").unwrap_or(parallelism);
    let succeeded = int(object, "/status/succeeded").unwrap_or(0);
    let failed = int(object, "/status/failed").unwrap_or(0);
    for c in conditions(object).iter().filter(|c| c.status == "True") {
        match c.type_.as_str() {
            "Complete" => return Assessment::current(format!("complete: {succeeded} of {completions} succeeded")),
            "Failed" => return Assessment::failed(c.describe(&format!("failed: {failed} pods failed"))),
            "Suspended" => return Assessment::current("suspended"),
            _ => {}
        }
    }
    // kstatus: a Job that started is current while it runs.
    if text(object, "/status/startTime").is_none_or(str::is_empty) {
        return Assessment::in_progress("not started yet");
    }
    Assessment::current(format!("running: {succeeded} of {completions} succeeded"))
}

fn pod(object: &Value) -> Assessment {
    match text(object, "/status/phase").unwrap_or_default() {
        "Succeeded" => Assessment::current("completed"),
        // kstatus: a finished pod is current, whatever its outcome.
        "Failed" => Assessment::current("completed unsuccessfully"),
        "Running" => {
            if conditions(object).iter().any(|c| c.type_ == "Ready" && c.status == "True") {
                return Assessment::current("running and ready");
            }
            let crashing = crash_looping(object);
            if !crashing.is_empty() {
                return Assessment::failed(format!("containers in CrashLoopBackOff: {}", crashing.join(", ")));
            }
            Assessment::in_progress("running but not ready")
        }
        "Pending" => {
            let unschedulable = conditions(object)
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason == "Unschedulable");
            match unschedulable {
                Some(c) => Assessment::in_progress(c.describe("cannot be scheduled yet")),
                None => Assessment::in_progress("pending"),
            }
        }
        "" => Assessment::in_progress("no phase reported yet"),
        other => Assessment::in_progress(format!("phase {other}")),
    }
}

fn crash_looping(object: &Value) -> Vec<String> {
    let statuses = object.pointer("/status/containerStatuses").and_then(Value::as_array);
    statuses
        .into_iter()
        .flatten()
        .filter(|s| text(s, "/state/waiting/reason") == Some("CrashLoopBackOff"))
        .filter_map(|s| text(s, "/name").map(str::to_owned))
        .collect()
}

fn persistent_volume_claim(object: &Value) -> Assessment {
    match text(object, "/status/phase") {
        Some("Bound") => Assessment::current("bound"),
        Some(phase) => Assessment::in_progress(format!("not bound (phase {phase})")),
        None => Assessment::in_progress("not bound"),
    }
}

fn service(object: &Value) -> Assessment {
    if text(object, "/spec/type") != Some("LoadBalancer") {
        return Assessment::current("current");
    }
    let ingress = object.pointer("/status/loadBalancer/ingress").and_then(Value::as_array);
    if ingress.is_some_and(|i| !i.is_empty()) {
        Assessment::current("load balancer address assigned")
    } else {
        Assessment::in_progress("waiting for a load balancer address (status.loadBalancer.ingress)")
    }
}

fn pod_disruption_budget(object: &Value) -> Assessment {
    if int(object, "/status/observedGeneration").is_none() {
        return Assessment::in_progress("not observed by the disruption controller yet");
    }
    let desired = int(object, "/status/desiredHealthy").unwrap_or(0);
    let current = int(object, "/status/currentHealthy").unwrap_or(0);
    if desired > current {
        return Assessment::in_progress(format!("{current} of {desired} pods healthy"));
    }
    Assessment::current(format!("{current} of {desired} pods healthy"))
}

/// Any other kind: its `Ready` condition, when it has one.
fn ready_condition(object: &Value) -> Option<Assessment> {
    let ready = condition(object, "Ready")?;
    Some(if ready.status == "True" {
        Assessment::current(ready.describe("Ready"))
    } else {
        Assessment::in_progress(ready.describe("not Ready"))
    })
}

/// A condition as read, every field a string (absent: empty).
#[derive(Debug)]
struct Condition {
    type_: String,
    status: String,
    reason: String,
    message: String,
}

impl Condition {
    /// `what (Reason: message)`, leaving out what is empty.
    fn describe(&self, what: &str) -> String {
        match (self.reason.is_empty(), self.message.is_empty()) {
            (true, true) => what.to_owned(),
            (false, true) => format!("{what} ({})", self.reason),
            (true, false) => format!("{what}: {}", self.message),
            (false, false) => format!("{what} ({}: {})", self.reason, self.message),
        }
    }
}

fn conditions(object: &Value) -> Vec<Condition> {
    let list = object.pointer("/status/conditions").and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .map(|c| {
            let field = |name: &str| c.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
            Condition {
                type_: field("type"),
                status: field("status"),
                reason: field("reason"),
                message: field("message"),
            }
        })
        .collect()
}

fn condition(object: &Value, type_: &str) -> Option<Condition> {
    conditions(object).into_iter().find(|c| c.type_ == type_)
}

fn int(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(object: Value) -> Status {
        compute(Some(&object)).status
    }

    fn available_deployment(replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "generation": 2},
            "spec": {"replicas": replicas},
            "status": {
                "observedGeneration": 2, "replicas": replicas, "updatedReplicas": replicas,
                "readyReplicas": replicas, "availableReplicas": replicas,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}
                ]
            }
        })
    }

    #[test]
    fn a_deployment_is_current_only_once_every_replica_is_available_at_the_observed_generation() {
        assert_eq!(status(available_deployment(2)), Status::Current);

        let mut short = available_deployment(2);
        short["status"]["availableReplicas"] = json!(1);
        let assessed = compute(Some(&short));
        assert_eq!((assessed.status, assessed.message.as_str()), (Status::InProgress, "1 of 2 replicas available"));

        let mut behind = available_deployment(2);
        behind["metadata"]["generation"] = json!(3);
        assert_eq!(status(behind), Status::InProgress, "a new template not observed yet");

        let fresh = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generation": 1}, "spec": {"replicas": 2}});
        assert_eq!(compute(Some(&fresh)).message, "0 of 2 replicas created");
    }

    #[test]
    fn a_deployment_past_its_progress_deadline_has_failed() {
        let mut stuck = available_deployment(2);
        stuck["status"]["availableReplicas"] = json!(0);
        stuck["status"]["conditions"] = json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"web-1\" has timed out progressing."}]);
        let assessed = compute(Some(&stuck));
        assert_eq!(assessed.status, Status::Failed);
        assert!(
            assessed.message.starts_with("progress deadline exceeded (ProgressDeadlineExceeded"),
            "{}",
            assessed.message
        );
    }

    #[test]
    fn a_deployment_without_the_available_condition_is_not_current() {
        let mut unavailable = available_deployment(1);
        unavailable["status"]["conditions"] =
            json!([{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]);
        assert_eq!(status(unavailable), Status::InProgress);
    }

    #[test]
    fn workloads_follow_their_counts() {
        let sts = |ready: i64, current: &str, update: &str| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"replicas": 2},
                   "status": {"replicas": 2, "readyReplicas": ready, "currentReplicas": 2, "updatedReplicas": 2,
                              "currentRevision": current, "updateRevision": update}})
        };
        assert_eq!(status(sts(2, "a", "a")), Status::Current);
        assert_eq!(status(sts(1, "a", "a")), Status::InProgress);
        assert_eq!(status(sts(2, "a", "b")), Status::InProgress, "a rollout under way");

        let ds = |ready: i64| {
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1},
                   "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                              "updatedNumberScheduled": 3, "numberAvailable": 3, "numberReady": ready}})
        };
        assert_eq!(status(ds(3)), Status::Current);
        assert_eq!(compute(Some(&ds(2))).message, "2 of 3 pods ready");
        let unobserved = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1}});
        assert_eq!(status(unobserved), Status::InProgress);

        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "spec": {"replicas": 1},
                        "status": {"replicas": 1, "fullyLabeledReplicas": 1, "availableReplicas": 1, "readyReplicas": 1}});
        assert_eq!(status(rs), Status::Current);
    }

    #[test]
    fn jobs_pods_claims_services_and_budgets() {
        let job = |conditions: Value, start: Option<&str>| json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"conditions": conditions, "startTime": start}});
        assert_eq!(status(job(json!([]), None)), Status::InProgress);
        assert_eq!(
            status(job(json!([]), Some("2026-11-24T08:00:00Z"))),
            Status::Current,
            "kstatus: running is current"
        );
        assert_eq!(status(job(json!([{"type": "Complete", "status": "True"}]), Some("t"))), Status::Current);
        assert_eq!(
            status(job(json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]), Some("t"))),
            Status::Failed
        );

        let pod = |phase: &str, ready: &str| json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}});
        assert_eq!(status(pod("Running", "True")), Status::Current);
        assert_eq!(status(pod("Running", "False")), Status::InProgress);
        assert_eq!(status(pod("Pending", "False")), Status::InProgress);
        let crashing = json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running",
            "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(compute(Some(&crashing)).message, "containers in CrashLoopBackOff: app");

        let pvc =
            |phase: &str| json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": phase}});
        assert_eq!(status(pvc("Bound")), Status::Current);
        assert_eq!(status(pvc("Pending")), Status::InProgress);

        let lb = |ingress: Value| {
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"},
                   "status": {"loadBalancer": {"ingress": ingress}}})
        };
        assert_eq!(status(lb(json!([]))), Status::InProgress);
        assert_eq!(status(lb(json!([{"ip": "192.0.2.1"}]))), Status::Current);
        assert_eq!(
            status(json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "ClusterIP"}})),
            Status::Current
        );

        let pdb = |current: i64| {
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"generation": 1},
                   "status": {"observedGeneration": 1, "desiredHealthy": 2, "currentHealthy": current}})
        };
        assert_eq!(status(pdb(2)), Status::Current);
        assert_eq!(status(pdb(1)), Status::InProgress);
    }

    #[test]
    fn other_kinds_answer_with_their_ready_condition_or_are_current_without_status() {
        let cdtarget = |ready: &str| {
            json!({"apiVersion": "cdtarget.io/v1alpha1", "kind": "CDTarget", "metadata": {"generation": 1},
                   "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": ready, "reason": "AgentsNotAvailable", "message": "0 of 1 agents available"}]}})
        };
        assert_eq!(status(cdtarget("True")), Status::Current);
        let waiting = compute(Some(&cdtarget("False")));
        assert_eq!(waiting.status, Status::InProgress);
        assert_eq!(waiting.message, "not Ready (AgentsNotAvailable: 0 of 1 agents available)");
        assert_eq!(status(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {}})), Status::Current);
        assert_eq!(status(json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {}})), Status::Current);
    }

    #[test]
    fn generic_rules_come_first() {
        let stalled = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "status": {"conditions": [{"type": "Stalled", "status": "True", "reason": "Broken"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(status(stalled), Status::Failed);
        let reconciling = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "status": {"conditions": [{"type": "Reconciling", "status": "True"}]}});
        assert_eq!(status(reconciling), Status::InProgress);
        let mut deleting = available_deployment(1);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-24T08:00:00Z");
        assert_eq!(status(deleting), Status::Terminating);
        assert_eq!(compute(None).status, Status::NotFound);
    }

    #[test]
    fn hostile_shapes_read_as_absent_fields_never_as_a_panic() {
        for object in [
            json!(null),
            json!("text"),
            json!({"apiVersion": 7, "kind": ["Deployment"]}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": "two"}, "status": {"conditions": "none"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": 3, "containerStatuses": [1, {"state": []}]}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"conditions": [null, 1, {"type": 2}]}}),
        ] {
            let _ = compute(Some(&object));
        }
        let strange = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": "two"}});
        assert_eq!(status(strange), Status::InProgress, "a replica count that is not a number reads as the default 1");
    }
}
