//! The CDTarget reconciler against the fake API server.

use std::sync::Arc;
use std::time::Duration;

use cdtarget::api::conditions::APPLIED;
use cdtarget::api::conditions::is_true;
use cdtarget::api::conditions::{READY, RECONCILING, STALLED};
use cdtarget::api::keda::{KedaVersion, ScaledObject, TriggerAuthentication};
use cdtarget::api::labels::SECRETS_DIGEST;
use cdtarget::api::reconcile_request::REQUESTED_AT;
use cdtarget::api::{CDTarget, CDTargetStatus};
use cdtarget::controller::cdtarget::AgentWatches;
use cdtarget::controller::cdtarget::reconcile;
use cdtarget::controller::inputs::KedaSeen;
use cdtarget::error::Classify;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;

use crate::support::{Cluster, NAME, NAMESPACE, TOKEN, cluster_with_target, target, uid};

fn status(target: &CDTarget) -> CDTargetStatus {
    target.status.clone().expect("status written")
}

fn condition<'a>(status: &'a CDTargetStatus, kind: &str) -> &'a Condition {
    status.conditions.iter().find(|c| c.type_ == kind).unwrap_or_else(|| panic!("no {kind} in {status:#?}"))
}

async fn deployment(cluster: &Cluster) -> Deployment {
    cluster.api::<Deployment>().get(NAME).await.expect("Deployment")
}

async fn network_policy(cluster: &Cluster) -> NetworkPolicy {
    cluster.api::<NetworkPolicy>().get(NAME).await.expect("NetworkPolicy")
}

fn digest_annotation(deployment: &Deployment) -> String {
    let template = &deployment.spec.as_ref().unwrap().template;
    template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()[SECRETS_DIGEST].clone()
}

fn egress_ports(policy: &NetworkPolicy) -> Vec<i32> {
    let mut ports: Vec<i32> = policy
        .spec
        .as_ref()
        .unwrap()
        .egress
        .iter()
        .flatten()
        .flat_map(|rule| rule.ports.iter().flatten())
        .filter_map(|p| match p.port.as_ref()? {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => Some(*n),
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_) => None,
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

fn assert_controlled_by(
    object_refs: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    uid: &str,
) {
    let refs = object_refs.expect("owner references");
    assert_eq!(refs.len(), 1, "{refs:#?}");
    let owner = &refs[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("CDTarget", NAME, uid));
    assert_eq!(owner.controller, Some(true));
}

#[tokio::test]
async fn first_reconcile_applies_four_children_owned_by_the_cdtarget_and_reports_ready() {
    let cluster = cluster_with_target(true).await;
    let uid = uid(&cluster).await;

    // The agents were just written: back within the wait retry (their status changes are
    // watched too), at the resync once they run.
    let action = cluster.reconcile().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));

    let np = network_policy(&cluster).await;
    let deploy = deployment(&cluster).await;
    let scaled = cluster.api::<ScaledObject>().get(NAME).await.expect("ScaledObject");
    let auth = cluster.api::<TriggerAuthentication>().get(NAME).await.expect("TriggerAuthentication");
    assert_controlled_by(np.metadata.owner_references.as_ref(), &uid);
    assert_controlled_by(deploy.metadata.owner_references.as_ref(), &uid);
    assert_controlled_by(scaled.metadata.owner_references.as_ref(), &uid);
    assert_controlled_by(auth.metadata.owner_references.as_ref(), &uid);
    // With KEDA the HPA owns replicas.
    assert_eq!(deploy.spec.as_ref().unwrap().replicas, None);

    let writes = cluster.writes();
    let children: Vec<_> = writes.iter().filter(|w| w.starts_with("patch ")).collect();
    assert_eq!(
        children,
        [
            "patch TriggerAuthentication team-a/agents",
            "patch NetworkPolicy team-a/agents",
            "patch Deployment team-a/agents",
            "patch ScaledObject team-a/agents",
        ],
        "children applied in order, once each"
    );
    assert_eq!(writes.iter().filter(|w| w.starts_with("status ")).count(), 1, "status written once: {writes:#?}");

    cluster.agents_run().await;
    assert_eq!(cluster.reconcile().await, Action::requeue(Duration::from_secs(600)));
    assert!(is_true(&status(&cluster.target().await).conditions, READY));
}

#[tokio::test]
async fn status_records_the_observed_generation_the_conditions_and_what_was_rendered() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;

    let stored = cluster.target().await;
    let first = status(&stored);
    let applied = condition(&first, APPLIED);
    assert_eq!((applied.status.as_str(), applied.reason.as_str()), ("True", "Applied"));
    let waiting = condition(&first, READY);
    assert_eq!((waiting.status.as_str(), waiting.reason.as_str()), ("False", "AgentsNotAvailable"));
    assert!(is_true(&first.conditions, RECONCILING), "{first:#?}");

    cluster.agents_run().await;
    cluster.reconcile().await;
    let stored = cluster.target().await;
    let status = status(&stored);
    assert_eq!(status.observed_generation, stored.metadata.generation);
    assert!(status.observed_generation.is_some());
    let ready = condition(&status, READY);
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Applied"));
    assert!(
        ready.message.starts_with("2 agents available, minReplicaCount 2 (Deployment team-a/agents); ScaledObject team-a/agents Ready; applied NetworkPolicy agents and Deployment agents"),
        "{}",
        ready.message
    );
    assert_eq!(ready.observed_generation, stored.metadata.generation);
    assert!(!status.conditions.iter().any(|c| c.type_ == STALLED || c.type_ == RECONCILING));

    let rendered = status.rendered.expect("rendered summary");
    assert_eq!(rendered.deployment.as_deref(), Some(NAME));
    assert_eq!(rendered.network_policy, NAME);
    assert_eq!(rendered.scaled_object.as_deref(), Some(NAME));
    assert_eq!(rendered.trigger_authentication.as_deref(), Some(NAME));
    assert_eq!(rendered.destinations, ["10.1.2.3/32", "192.168.10.0/24"]);
    assert_eq!(rendered.secrets_digest, Some(digest_annotation(&deployment(&cluster).await)));
}

#[tokio::test]
async fn an_unchanged_second_reconcile_sends_no_mutating_request() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    // The second reads the agents the first wrote (the status says so); nothing changes after.
    cluster.reconcile().await;
    cluster.clear_writes();
    cluster.reconcile().await;
    assert_eq!(cluster.writes(), Vec::<String>::new(), "neither children nor status are written again");

    // Nor once the agents run and that is recorded.
    cluster.agents_run().await;
    cluster.reconcile().await;
    assert!(is_true(&status(&cluster.target().await).conditions, READY));
    cluster.clear_writes();
    cluster.reconcile().await;
    assert_eq!(cluster.writes(), Vec::<String>::new(), "neither children nor status are written again");
}

#[tokio::test]
async fn ready_waits_for_the_agents_and_a_failed_rollout_stalls() {
    let cluster = cluster_with_target(false).await;
    cluster.reconcile().await;
    let deployments = cluster.api::<Deployment>();
    let generation = deployment(&cluster).await.metadata.generation.unwrap_or(1);
    let report = |available: i64, conditions: serde_json::Value| serde_json::json!({"status": {"observedGeneration": generation, "availableReplicas": available, "conditions": conditions}});
    let ready = || async { condition(&status(&cluster.target().await), READY).clone() };

    // One of two agents available: not Ready, and the message says how many.
    let one = report(1, serde_json::json!([{"type": "Available", "status": "False"}]));
    deployments.patch_status(NAME, &PatchParams::default(), &Patch::Merge(&one)).await.unwrap();
    cluster.reconcile().await;
    let waiting = ready().await;
    assert_eq!((waiting.status.as_str(), waiting.reason.as_str()), ("False", "AgentsNotAvailable"));
    assert_eq!(waiting.message, "1 of 2 agents available (Deployment team-a/agents)");
    assert!(is_true(&status(&cluster.target().await).conditions, RECONCILING));

    // The rollout ran out of its progress deadline: Stalled.
    let stuck = report(
        1,
        serde_json::json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"agents-1\" has timed out progressing."}]),
    );
    deployments.patch_status(NAME, &PatchParams::default(), &Patch::Merge(&stuck)).await.unwrap();
    cluster.reconcile().await;
    let stalled = ready().await;
    assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("False", "RolloutFailed"));
    assert!(is_true(&status(&cluster.target().await).conditions, STALLED));
    assert!(is_true(&status(&cluster.target().await).conditions, APPLIED), "the children are in place all along");

    // Both agents available: Ready.
    let two = report(2, serde_json::json!([{"type": "Available", "status": "True"}]));
    deployments.patch_status(NAME, &PatchParams::default(), &Patch::Merge(&two)).await.unwrap();
    cluster.reconcile().await;
    let ready = ready().await;
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "KedaNotInstalled"));
}

#[tokio::test]
async fn a_reconcile_request_costs_one_status_write_recording_it_and_the_next_pass_none() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    let requested = "2026-11-24T10:00:00.5Z";
    let patch = serde_json::json!({"metadata": {"annotations": {REQUESTED_AT: requested}}});
    cluster.api::<CDTarget>().patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotate");
    cluster.clear_writes();

    cluster.reconcile().await;
    assert_eq!(cluster.writes(), [format!("status CDTarget {NAMESPACE}/{NAME}")], "the children are unchanged");
    assert_eq!(status(&cluster.target().await).last_handled_reconcile_at.as_deref(), Some(requested));
    cluster.clear_writes();
    cluster.reconcile().await;
    assert_eq!(cluster.writes(), Vec::<String>::new(), "a handled request is not written again");
}

#[tokio::test]
async fn a_child_changed_by_someone_else_is_applied_again() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    // Settled: the second pass reads the agents the first wrote (and records that).
    cluster.reconcile().await;
    // Someone opens every port: drop the port list of the first egress rule.
    let mut policy = network_policy(&cluster).await;
    policy.spec.as_mut().unwrap().egress.as_mut().unwrap()[0].ports = None;
    policy.metadata.managed_fields = None;
    let api = cluster.api::<NetworkPolicy>();
    api.replace(NAME, &Default::default(), &policy).await.expect("replace NetworkPolicy");
    cluster.clear_writes();

    cluster.reconcile().await;
    let writes = cluster.writes();
    assert_eq!(writes, ["patch NetworkPolicy team-a/agents"], "only the drifted child is applied");
    assert!(egress_ports(&network_policy(&cluster).await).contains(&443));
}

#[tokio::test]
async fn waiting_agents_whose_objects_are_watched_are_not_polled() {
    let cluster = cluster_with_target(true).await;
    let watched = |scaled_objects| {
        let watches = AgentWatches { deployments: true, scaled_objects };
        Arc::new(Arc::unwrap_or_clone(cluster.context()).with_agent_watches(watches))
    };
    // Deployment and ScaledObject watched: their next change reconciles, else the resync.
    assert_eq!(cluster.reconcile_named(NAME, watched(true)).await, Action::requeue(Duration::from_secs(600)));
    let ready = condition(&status(&cluster.target().await), READY).clone();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "AgentsNotAvailable"));
    // No ScaledObject watch (KEDA installed after start-up): the fallback poll.
    assert_eq!(cluster.reconcile_named(NAME, watched(false)).await, Action::requeue(Duration::from_secs(30)));
}

#[tokio::test]
async fn missing_token_secret_waits_with_secret_not_found_and_creates_nothing() {
    let cluster = Cluster::new(true).await;
    cluster.create_target(&target()).await;
    cluster.clear_writes();

    let action = cluster.reconcile().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));

    let status = status(&cluster.target().await);
    let ready = condition(&status, READY);
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "SecretNotFound"));
    assert!(ready.message.contains(TOKEN), "{}", ready.message);
    assert!(is_true(&status.conditions, RECONCILING));
    assert!(!status.conditions.iter().any(|c| c.type_ == STALLED));

    assert_eq!(cluster.writes(), ["status CDTarget team-a/agents"], "only status is written");
    assert!(cluster.api::<Secret>().list(&Default::default()).await.unwrap().items.is_empty());
    assert!(cluster.api::<Deployment>().get_opt(NAME).await.unwrap().is_none());
}

#[tokio::test]
async fn token_secret_without_azp_token_key_waits_and_leaves_the_running_children_alone() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    let before = deployment(&cluster).await;
    cluster.put_secret(TOKEN, &[("AZP_TOKEN", "")]).await;
    cluster.clear_writes();

    cluster.reconcile().await;

    let status = status(&cluster.target().await);
    let ready = condition(&status, READY);
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "SecretNotFound"));
    assert!(ready.message.contains("AZP_TOKEN") && !ready.message.contains("pat-1"), "{}", ready.message);
    assert_eq!(cluster.writes(), ["status CDTarget team-a/agents"]);
    assert_eq!(deployment(&cluster).await, before);
    // What is running is still described in status.
    assert!(status.rendered.is_some());
}

#[tokio::test]
async fn invalid_spec_stalls_naming_every_problem_and_keeps_the_children() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    let (deploy_before, np_before) = (deployment(&cluster).await, network_policy(&cluster).await);

    cluster.set_spec(&target().with_ips(["10.0.0.0/8", "not-an-ip"]).spec).await;
    cluster.clear_writes();

    let action = cluster.reconcile().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(3600)));

    let stored = cluster.target().await;
    let status = status(&stored);
    let stalled = condition(&status, STALLED);
    assert_eq!((stalled.status.as_str(), stalled.reason.as_str()), ("True", "InvalidSpec"));
    assert!(stalled.message.contains("spec.ip[0]: "), "{}", stalled.message);
    assert!(stalled.message.contains("spec.ip[1]: "), "{}", stalled.message);
    let ready = condition(&status, READY);
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InvalidSpec"));
    assert_eq!(status.observed_generation, stored.metadata.generation);

    assert_eq!(cluster.writes(), ["status CDTarget team-a/agents"], "no child is touched");
    assert_eq!(deployment(&cluster).await, deploy_before);
    assert_eq!(network_policy(&cluster).await, np_before);
}

#[tokio::test]
async fn invalid_policy_stalls_keeps_the_children_and_tells_the_tenant_no_policy_value() {
    use cdtarget::controller::events::EventSink;
    use cdtarget::controller::tenant_text::PLATFORM_CONFIGURATION;
    use k8s_openapi::api::events::v1::Event;
    use kube::runtime::events::Reporter;

    let cluster = cluster_with_target(true).await;
    let reporter = Reporter { controller: "cdtarget".into(), instance: Some("test".into()) };
    let mut context = (*cluster.context()).clone();
    context.frame.recorder = Some(EventSink::new(cluster.client.clone(), reporter));
    let context = std::sync::Arc::new(context);
    cluster.reconcile_named(NAME, context.clone()).await;
    let before = network_policy(&cluster).await;
    cluster.put_policy("ports", "443\nsecret-port-9999x\n").await;
    cluster.clear_writes();

    cluster.reconcile_named(NAME, context).await;

    // The CDTarget and its Events are the tenant's to read: the fixed sentence, no policy value.
    let status = status(&cluster.target().await);
    for kind in [STALLED, READY, APPLIED] {
        let condition = condition(&status, kind);
        assert_eq!((condition.reason.as_str(), condition.message.as_str()), ("InvalidPolicy", PLATFORM_CONFIGURATION));
    }
    let events = cluster.api::<Event>().list(&Default::default()).await.expect("list Events").items;
    let stalled = events.iter().find(|e| e.reason.as_deref() == Some("InvalidPolicy")).expect("the Event");
    assert_eq!(stalled.note.as_deref(), Some(PLATFORM_CONFIGURATION));
    assert!(!serde_json::to_string(&events).unwrap().contains("secret-port-9999x"), "{events:#?}");
    assert_eq!(
        cluster.writes().iter().filter(|w| !w.contains("Event")).collect::<Vec<_>>(),
        ["status CDTarget team-a/agents"]
    );
    assert_eq!(network_policy(&cluster).await, before);
}

#[tokio::test]
async fn policy_change_re_renders_the_network_policy() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    let defaults = egress_ports(&network_policy(&cluster).await);
    assert!(defaults.contains(&5986) && !defaults.contains(&1433), "{defaults:?}");

    // The seed's cdtarget-ports format.
    cluster.put_policy("ports", "1433\n5986\n").await;
    cluster.reconcile().await;
    let legacy = egress_ports(&network_policy(&cluster).await);
    assert!(legacy.contains(&1433), "{legacy:?}");

    cluster.put_policy("policy.yaml", "egress:\n  ports:\n    - {port: 8443}\n").await;
    cluster.reconcile().await;
    let current = egress_ports(&network_policy(&cluster).await);
    assert!(current.contains(&8443) && !current.contains(&1433), "{current:?}");
}

#[tokio::test]
async fn rotated_token_secret_changes_the_pod_template_digest() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    let before = digest_annotation(&deployment(&cluster).await);

    cluster.put_secret(TOKEN, &[("AZP_TOKEN", "pat-2")]).await;
    cluster.reconcile().await;

    let after = digest_annotation(&deployment(&cluster).await);
    assert_ne!(before, after);
    assert_eq!(status(&cluster.target().await).rendered.unwrap().secrets_digest, Some(after));
}

#[tokio::test]
async fn proxy_secret_rotation_also_rolls_the_agents() {
    let cluster = cluster_with_target(true).await;
    cluster.set_spec(&target().with_proxy_ref("proxy").spec).await;
    cluster.put_secret("proxy", &[("HTTPS_PROXY", "http://proxy-1:3128")]).await;
    cluster.reconcile().await;
    let before = digest_annotation(&deployment(&cluster).await);

    cluster.put_secret("proxy", &[("HTTPS_PROXY", "http://proxy-2:3128")]).await;
    cluster.reconcile().await;
    assert_ne!(digest_annotation(&deployment(&cluster).await), before);
}

#[tokio::test]
async fn without_keda_a_plain_deployment_runs_at_min_replica_count() {
    let cluster = cluster_with_target(false).await;
    let uid = uid(&cluster).await;

    cluster.reconcile().await;

    let deploy = deployment(&cluster).await;
    assert_eq!(deploy.spec.as_ref().unwrap().replicas, Some(2));
    assert_controlled_by(deploy.metadata.owner_references.as_ref(), &uid);
    let writes = cluster.writes();
    assert!(!writes.iter().any(|w| w.contains("ScaledObject") || w.contains("TriggerAuthentication")), "{writes:#?}");

    let status = status(&cluster.target().await);
    let applied = condition(&status, APPLIED);
    assert_eq!((applied.status.as_str(), applied.reason.as_str()), ("True", "KedaNotInstalled"));
    assert!(applied.message.contains("plain Deployment at minReplicaCount"), "{}", applied.message);
    let rendered = status.rendered.unwrap();
    assert_eq!((rendered.scaled_object, rendered.trigger_authentication), (None, None));
}

#[tokio::test]
async fn keda_installed_while_running_adds_the_autoscaler_on_the_next_reconcile() {
    // The cluster serves KEDA's kinds, but the controller last saw KEDA missing.
    let cluster = cluster_with_target(true).await;
    let ctx = cluster.context();
    ctx.keda.set(KedaSeen::default());
    reconcile(Arc::new(cluster.target().await), ctx.clone()).await.expect("reconcile");
    assert_eq!(condition(&status(&cluster.target().await), APPLIED).reason, "KedaNotInstalled");
    assert!(cluster.api::<ScaledObject>().get_opt(NAME).await.unwrap().is_none());

    // What the periodic re-check does when it finds KEDA (it then reconciles every CDTarget).
    let found = KedaSeen { installed: true, version: Some(KedaVersion::NEWEST_SUPPORTED) };
    assert!(ctx.keda.set(found), "the change is reported");
    reconcile(Arc::new(cluster.target().await), ctx.clone()).await.expect("reconcile");
    assert!(cluster.api::<ScaledObject>().get_opt(NAME).await.unwrap().is_some());
    assert!(cluster.api::<TriggerAuthentication>().get_opt(NAME).await.unwrap().is_some());
    assert_eq!(condition(&status(&cluster.target().await), APPLIED).reason, "Applied");
}

#[tokio::test]
async fn fixing_the_spec_after_a_stall_brings_ready_back() {
    let cluster = cluster_with_target(true).await;
    cluster.set_spec(&target().with_ips(["10.0.0.0/8"]).spec).await;
    cluster.reconcile().await;
    assert!(is_true(&status(&cluster.target().await).conditions, STALLED));
    assert!(cluster.api::<Deployment>().get_opt(NAME).await.unwrap().is_none());

    cluster.set_spec(&target().spec).await;
    cluster.reconcile().await;
    let stored = cluster.target().await;
    let status = status(&stored);
    assert!(is_true(&status.conditions, APPLIED));
    assert!(!status.conditions.iter().any(|c| c.type_ == STALLED));
    assert_eq!(status.observed_generation, stored.metadata.generation);
    assert_eq!(deployment(&cluster).await.namespace().as_deref(), Some(NAMESPACE));
}

#[tokio::test]
async fn an_event_is_recorded_when_ready_changes_and_not_on_a_resync() {
    use cdtarget::controller::events::EventSink;
    use k8s_openapi::api::events::v1::Event;
    use kube::runtime::events::Reporter;

    let cluster = cluster_with_target(true).await;
    let reporter = Reporter { controller: "cdtarget".into(), instance: Some("test".into()) };
    let mut context = (*cluster.context()).clone();
    context.frame.recorder = Some(EventSink::new(cluster.client.clone(), reporter));
    let context = std::sync::Arc::new(context);
    let reconcile = || async {
        let target = cluster.target().await;
        cdtarget::controller::cdtarget::reconcile(std::sync::Arc::new(target), context.clone()).await.unwrap()
    };
    let events = || async {
        let list = cluster.api::<Event>().list(&Default::default()).await.expect("list Events");
        list.items.into_iter().map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default())).collect::<Vec<_>>()
    };

    let event = |type_: &str, reason: &str| (type_.to_owned(), reason.to_owned());
    reconcile().await;
    assert_eq!(events().await, [event("Warning", "AgentsNotAvailable")]);
    reconcile().await;
    assert_eq!(events().await.len(), 1, "a resync with the same outcome records nothing");
    cluster.agents_run().await;
    reconcile().await;
    let mut recorded = events().await;
    recorded.sort();
    assert_eq!(recorded, [event("Normal", "Applied"), event("Warning", "AgentsNotAvailable")]);
}

#[tokio::test]
async fn a_child_refused_as_invalid_stalls_instead_of_retrying_quickly() {
    let cluster = Cluster::rejecting(true, "Deployment").await;
    cluster.put_secret(TOKEN, &[("AZP_TOKEN", "pat-1")]).await;
    cluster.create_target(&target()).await;
    let error =
        cdtarget::controller::cdtarget::reconcile(std::sync::Arc::new(cluster.target().await), cluster.context())
            .await
            .expect_err("the refused apply is an error");
    assert_eq!(error.class(), cdtarget::error::Class::Stalled);
    let status = status(&cluster.target().await);
    assert_eq!(condition(&status, STALLED).reason, "ApiError");
    assert!(condition(&status, READY).message.contains("Deployment"), "{status:#?}");
    assert!(!is_true(&status.conditions, RECONCILING));
}

/// A writer into a shared buffer, for a subscriber the test reads back.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Set in the child process [`json_logs_follow_a_reconcile_through_its_steps_with_the_object`]
/// runs itself in.
const LOG_CHILD: &str = "CDTARGET_TEST_JSON_LOG_CHILD";

#[tokio::test]
async fn json_logs_follow_a_reconcile_through_its_steps_with_the_object() {
    use cdtarget::telemetry::{LogFormat, subscriber};
    // tracing caches per call site whether anyone listens, process-wide: another test running on
    // another thread could settle that for this test's subscriber. So the test runs alone, in a
    // child process of this test binary.
    if std::env::var_os(LOG_CHILD).is_none() {
        let name = "cdtarget::json_logs_follow_a_reconcile_through_its_steps_with_the_object";
        let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", name, "--test-threads=1"])
            .env(LOG_CHILD, "1")
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
        assert!(stdout.contains("1 passed"), "the child ran the test: {stdout}");
        return;
    }
    let cluster = cluster_with_target(true).await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = subscriber(LogFormat::Json, "cdtarget=debug", move || writer.clone()).expect("subscriber");
    {
        let _logging = tracing::subscriber::set_default(subscriber);
        cluster.reconcile().await;
    }
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<serde_json::Value> =
        text.lines().map(|line| serde_json::from_str(line).expect("JSON line")).collect();
    let spans_of = |line: &serde_json::Value| -> Vec<String> {
        line["spans"].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str().map(str::to_owned)).collect()
    };
    // A write of a child, logged by the one writer, inside the reconcile's `execute` step.
    let write = lines
        .iter()
        .find(|line| line["message"] == "wrote" && line["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("no write of the Deployment logged:\n{text}"));
    assert_eq!(spans_of(write), ["reconcile", "execute"], "{write}");
    let reconcile = &write["spans"][0];
    assert_eq!(
        (&reconcile["kind"], &reconcile["namespace"], &reconcile["object"]),
        (&"CDTarget".into(), &NAMESPACE.into(), &format!("{NAMESPACE}/{NAME}").into()),
        "{write}"
    );
    // The status write runs in its own step of the same reconcile.
    assert!(lines.iter().any(|line| line["kind"] == "CDTarget" && spans_of(line) == ["reconcile", "status"]), "{text}");
}
