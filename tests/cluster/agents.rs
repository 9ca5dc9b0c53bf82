//! Agents scaled by KEDA itself (#28), on the real control plane: the real `cdtarget controller`
//! tells KEDA's release from the schema of the CRDs installed and renders for it; KEDA's own
//! operator (`tests/common/keda.rs`) polls a fake Azure DevOps (`tests/common/fake_azure_devops.rs`,
//! over HTTPS with a CA of its own that the operator is told to trust) through the rendered
//! trigger and TriggerAuthentication, and creates the Jobs; kube-controller-manager's Job
//! controller gives each Job its pod.
//!
//! Each case has a control plane of its own (KEDA's CRDs are cluster-scoped and differ by
//! release), a policy allowing the fake's `127.0.0.1` and polling every second, and a controller
//! of its own. Nothing runs the pods: where a kubelet would report a pod running or succeeded,
//! and where the agent in it would take its job from Azure DevOps, the test does it, and says so.
//!
//! How a test knows KEDA has acted on a change without sleeping: KEDA's scale loop for one
//! ScaledJob is one goroutine that polls the queue (one `jobrequests` list) and then creates the
//! Jobs it decided, before it waits for the next interval. A list the fake received after a change
//! was answered from the changed state; when the fake has received three lists since the change,
//! the loops of the first two have finished their creations ([`scale_loops_since`]).

use std::time::{Duration, Instant};

use cdtarget::api::CDTarget;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;

use crate::common::cluster::{
    Controller, PLATFORM_NAMESPACE, namespace, own_installed_cluster_with_keda, until_listed,
};
use crate::common::control_plane::{Options, OwnControlPlane};
use crate::common::fake_azure_devops::{DEFAULT_ORG, FakeAzureDevOps, JobResult, Scope};
use crate::common::keda::{KedaOperator, KedaOptions, KedaRelease, Scaled};
use crate::common::{ControlPlane, skip_or_fail};
use crate::kit::kubectl_file;

/// How long KEDA, the Job controller and cdtarget's controller may take for one step.
const DEADLINE: Duration = Duration::from_secs(90);

/// The tenant's personal access token, as the fake knows it.
const PAT: &str = "agents-test-pat";
/// The pool in the fake, and the CDTarget's `poolName`.
const POOL: &str = "jobs";
/// The placeholder agent of the pool (`triggerMeta.parent`), registered but never online.
const PLACEHOLDER: &str = "placeholder";
/// The CDTarget's name, and so its children's.
const TARGET: &str = "agents";

/// The policy: the fake's address allowed as a URL host, KEDA polling every second.
const POLICY: &str =
    "    agents:\n      allowedUrlHosts: [\"127.0.0.1\"]\n    keda:\n      pollingIntervalSeconds: 1\n";

/// One case's world: a control plane, KEDA's operator, the fake Azure DevOps with a pool and the
/// tenant's PAT, cdtarget's controller, and a tenant namespace holding the token Secret.
struct Stage {
    // Dropped in this order: the controller and KEDA stop before the fake and the control plane.
    controller: Controller,
    keda: KedaOperator,
    fake: FakeAzureDevOps,
    pool: i32,
    ns: String,
    client: kube::Client,
    own: OwnControlPlane,
}

impl Stage {
    /// Sets the world up for KEDA `release`, or `None` after a SKIP line (no Go, no kubectl).
    async fn start(test: &str, release: KedaRelease) -> Option<Stage> {
        let options = Options { job_controller: true, ..Options::default() };
        let own = own_installed_cluster_with_keda(test, &options, release)?;
        let cluster = own.cluster();
        let fake = FakeAzureDevOps::start();
        let pool = fake.create_pool(DEFAULT_ORG, POOL);
        fake.add_pat(DEFAULT_ORG, "tenant", PAT, &[Scope::AgentPoolsRead]);
        // What a pool scaled to zero needs (docs/agents.md): an agent every queued job matches.
        fake.register_agent(pool, PLACEHOLDER, &[], true);
        let keda_options = KedaOptions { extra_ca: Some(fake.ca_pem_path()), ..KedaOptions::default() };
        let keda = skip_or_fail(test, KedaOperator::start(cluster, release, &keda_options))?;
        let policy = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cdtarget-policy\n  namespace: {PLATFORM_NAMESPACE}\ndata:\n  policy.yaml: |\n{POLICY}"
        );
        kubectl_file(cluster, &cluster.admin_kubeconfig(), "apply", &policy, &[]).success();
        // The controller reads the schema once at start-up: wait until the API server publishes
        // TriggerAuthentication's (it does so a moment after the CRD is Established).
        await_trigger_authentication_schema(cluster, &keda).await;
        let controller = Controller::start(cluster, "agents", &[]).await;
        let ns = namespace(cluster, "agents");
        let secret =
            ["create", "secret", "generic", "azp-token", "-n", &ns, &format!("--from-literal=AZP_TOKEN={PAT}")];
        cluster.kubectl(&secret).success();
        let client = cluster.admin_client().await;
        Some(Stage { controller, keda, fake, pool, ns, client, own })
    }

    fn cluster(&self) -> &'static ControlPlane {
        self.own.cluster()
    }

    /// Applies the CDTarget `agents` with the fake's organization and pool and `extra` spec
    /// lines (indented by two spaces), as the admin.
    fn apply_target(&self, extra: &str) {
        let manifest = format!(
            "apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: {TARGET}\n  namespace: {ns}\nspec:\n  agentImage: ghcr.io/acme/azp-agent:4.255.0\n  tokenRef: azp-token\n  config:\n    url: {url}\n    poolName: {POOL}\n{extra}",
            ns = self.ns,
            url = self.fake.org_url(),
        );
        let cluster = self.cluster();
        kubectl_file(cluster, &cluster.admin_kubeconfig(), "apply", &manifest, &[]).success();
    }

    /// Calls `check` with the Jobs of the ScaledJob once listed and after every change a watch
    /// of them reports, until it gives a value, at most [`DEADLINE`]; then panics with `what` and
    /// what the failure needs.
    async fn until_jobs<T>(&self, what: &str, check: impl FnMut(&[Job]) -> Option<T>) -> T {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.ns);
        let labelled = watcher::Config::default().labels(&format!("scaledjob.keda.sh/name={TARGET}"));
        until_listed(jobs, labelled, DEADLINE, what, check, || self.diagnostics()).await
    }

    fn diagnostics(&self) -> String {
        let objects = self.cluster().kubectl(&["get", "cdtargets,scaledjobs,scaledobjects,jobs,pods", "-n", &self.ns]);
        let target = self.cluster().kubectl(&["get", "cdtarget", TARGET, "-n", &self.ns, "-o", "yaml"]);
        let controller = std::fs::read_to_string(self.controller.log()).unwrap_or_default();
        let controller: Vec<&str> = controller.lines().collect();
        format!(
            "\n--- objects:\n{}\n--- CDTarget:\n{}\n--- fake's counts: {:?}\n--- KEDA's log ends with:\n{}\n--- controller's log ends with:\n{}",
            String::from_utf8_lossy(&objects.output.stdout),
            String::from_utf8_lossy(&target.output.stdout),
            self.fake.counts(),
            self.keda.log_tail(30),
            controller[controller.len().saturating_sub(30)..].join("\n"),
        )
    }

    /// The Jobs KEDA created for the ScaledJob, by name.
    async fn jobs(&self) -> Vec<Job> {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.ns);
        let labelled = ListParams::default().labels(&format!("scaledjob.keda.sh/name={TARGET}"));
        let mut list = jobs.list(&labelled).await.expect("list Jobs").items;
        list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        list
    }

    /// Waits until KEDA has created at least `count` Jobs and returns them.
    async fn jobs_at_least(&self, count: usize) -> Vec<Job> {
        let mut jobs = self
            .until_jobs(&format!("{count} Jobs of ScaledJob {TARGET}"), |jobs| {
                (jobs.len() >= count).then(|| jobs.to_vec())
            })
            .await;
        jobs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        jobs
    }

    /// Queues one more pipeline job and asserts that KEDA starts exactly one Job for it (and no
    /// second one in the two scale loops after).
    async fn one_more_queued_job_gets_one_job(&self) {
        let before = names(&self.jobs().await);
        self.fake.queue_request(self.pool, &[]);
        self.jobs_at_least(before.len() + 1).await;
        self.scale_loops_since().await;
        let after = names(&self.jobs().await);
        let new: Vec<&String> = after.iter().filter(|job| !before.contains(job)).collect();
        assert_eq!(new.len(), 1, "one Job for one more queued job: {new:?}");
    }

    /// Returns once two of KEDA's scale loops have polled the queue after this call and made
    /// their decisions (see the module documentation): the fake has received three job-request
    /// lists since.
    async fn scale_loops_since(&self) {
        let from = self.fake.counts().endpoint("jobrequests.list");
        let what = "two more scale loops of KEDA";
        self.fake.until_counted("jobrequests.list", from + 3, DEADLINE, what, || self.diagnostics()).await;
    }

    /// The pod of each of `jobs` (the Job controller's), once each has one.
    async fn pods_of(&self, jobs: &[Job]) -> Vec<Pod> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let labelled = watcher::Config::default().labels(&format!("scaledjob.keda.sh/name={TARGET}"));
        let names: Vec<String> = jobs.iter().filter_map(|job| job.metadata.name.clone()).collect();
        let each = |list: &[Pod]| {
            let of = |job: &String| {
                list.iter()
                    .find(|pod| {
                        pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "Job" && &o.name == job)
                    })
                    .cloned()
            };
            names.iter().map(of).collect::<Option<Vec<Pod>>>()
        };
        until_listed(pods, labelled, DEADLINE, "a pod for each Job", each, || self.diagnostics()).await
    }

    /// What a kubelet reports of `pods` (none runs here): the phase `phase` (`Running` with
    /// every condition true, or a terminal phase), through the pods' `status` subresource.
    async fn kubelet_reports(&self, pods: &[Pod], phase: &str) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let now = k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
            .expect("now")
            .to_string();
        let ready = if phase == "Running" { "True" } else { "False" };
        let status = serde_json::json!({"status": {
            "phase": phase,
            "startTime": now,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                {"type": "Ready", "status": ready, "lastTransitionTime": now}
            ]
        }});
        for pod in pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .expect("patch the pod status");
        }
    }

    /// Waits until the CDTarget meets `condition` and returns it.
    async fn target_until(&self, what: &str, condition: impl Fn(Option<&CDTarget>) -> bool) -> CDTarget {
        let targets: Api<CDTarget> = Api::namespaced(self.client.clone(), &self.ns);
        let condition = move |target: Option<&CDTarget>| condition(target);
        match tokio::time::timeout(DEADLINE, await_condition(targets, TARGET, condition)).await {
            Ok(Ok(Some(target))) => target,
            other => panic!("{what}: not within {DEADLINE:?} ({other:?}){}", self.diagnostics()),
        }
    }
}

/// Waits until the API server publishes the schema of TriggerAuthentication's spec in the OpenAPI
/// v3 document of `keda.sh/v1alpha1`, which cdtarget's discovery reads.
async fn await_trigger_authentication_schema(cluster: &ControlPlane, keda: &KedaOperator) {
    let started = Instant::now();
    loop {
        let run = cluster.kubectl(&["get", "--raw", "/openapi/v3/apis/keda.sh/v1alpha1"]);
        let document: serde_json::Value = serde_json::from_slice(&run.output.stdout).unwrap_or_default();
        let spec =
            document.pointer("/components/schemas/sh.keda.v1alpha1.TriggerAuthentication/properties/spec/properties");
        if spec.is_some_and(serde_json::Value::is_object) {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "TriggerAuthentication's schema not published within {DEADLINE:?} (KEDA {})",
            keda.release().version()
        );
        // Nothing to await: the API server announces no change of its OpenAPI document (as with
        // /readyz); read it again, bounded above.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A condition: the CDTarget's condition `type_` has `status` and `reason`.
fn condition_is(type_: &'static str, status: &'static str, reason: &'static str) -> impl Fn(Option<&CDTarget>) -> bool {
    move |target| {
        target
            .and_then(|t| t.status.as_ref())
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_ && c.status == status && c.reason == reason))
    }
}

fn names(jobs: &[Job]) -> Vec<String> {
    jobs.iter().filter_map(|job| job.metadata.name.clone()).collect()
}

/// What one release is expected to do in [`job_mode_sequence`].
struct Expected {
    /// `spec.scalingStrategy.strategy` of the rendered ScaledJob.
    strategy: &'static str,
    /// The trigger's `scaleOnInFlight`.
    scale_on_in_flight: &'static str,
    /// Jobs once the first agents' pods run, before their agents have received a job.
    while_agents_start: usize,
}

/// Job mode end to end: `QUEUED` queued pipeline jobs, their agent Jobs started, running their
/// jobs, finishing; one more queued job.
async fn job_mode_sequence(stage: &Stage, expected: &Expected) {
    const QUEUED: usize = 3;
    // minReplicaCount 0 (with the placeholder as `parent`): no agent Job waits for work, so every
    // Job there is is one KEDA started for a queued pipeline job.
    stage.apply_target(&format!("  mode: Job\n  minReplicaCount: 0\n  triggerMeta:\n    parent: {PLACEHOLDER}\n"));

    // The controller rendered Job mode for the release it read from the CRDs' schema.
    let target = stage
        .target_until("BusyAgentsCounted=True/JobMode", condition_is("BusyAgentsCounted", "True", "JobMode"))
        .await;
    let rendered = target.status.as_ref().and_then(|s| s.rendered.clone()).expect("status.rendered");
    assert_eq!(rendered.mode.as_deref(), Some("Job"), "{rendered:?}");
    assert_eq!(rendered.scaled_job.as_deref(), Some(TARGET), "{rendered:?}");
    let scaled_job = stage.cluster().kubectl(&["get", "scaledjob", TARGET, "-n", &stage.ns, "-o", "json"]).success();
    let scaled_job: serde_json::Value = serde_json::from_str(&scaled_job).expect("the ScaledJob as JSON");
    assert_eq!(scaled_job.pointer("/spec/scalingStrategy/strategy"), Some(&expected.strategy.into()), "{scaled_job}");
    assert_eq!(
        scaled_job.pointer("/spec/triggers/0/metadata/scaleOnInFlight"),
        Some(&expected.scale_on_in_flight.into()),
        "{scaled_job}"
    );

    // Three queued pipeline jobs: three Jobs, and no more once KEDA has looked again.
    let requests: Vec<i64> = (0..QUEUED).map(|_| stage.fake.queue_request(stage.pool, &[])).collect();
    stage.jobs_at_least(QUEUED).await;
    stage.scale_loops_since().await;
    let first = stage.jobs().await;
    assert_eq!(names(&first).len(), QUEUED, "one Job per queued pipeline job: {:?}", names(&first));
    let value = stage.keda.scaler_metrics_value(Scaled::Job, &stage.ns, TARGET, 0);
    assert_eq!(value, Some(QUEUED as f64), "the queue KEDA read");

    // Every label the egress NetworkPolicy selects by is on the agent pods.
    let pods = stage.pods_of(&first).await;
    let policies: Api<NetworkPolicy> = Api::namespaced(stage.client.clone(), &stage.ns);
    let policy = policies.get(&rendered.network_policy).await.expect("the NetworkPolicy");
    let selector = policy.spec.and_then(|s| s.pod_selector).and_then(|s| s.match_labels).unwrap_or_default();
    assert!(!selector.is_empty(), "the NetworkPolicy selects by labels");
    for pod in &pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        for (key, value) in &selector {
            assert_eq!(labels.get(key), Some(value), "pod {:?} lacks {key}={value}: {labels:?}", pod.metadata.name);
        }
    }

    // The agents start: the kubelet reports their pods running (written by the test), and each
    // agent registers in the pool (written in the fake, as the agent's config.sh does), not yet
    // holding a job.
    stage.kubelet_reports(&pods, "Running").await;
    let agents: Vec<i32> = names(&first)
        .iter()
        .map(|job| {
            let agent = stage.fake.register_agent(stage.pool, job, &[], true);
            stage.fake.agent_online(agent);
            agent
        })
        .collect();
    stage.scale_loops_since().await;
    let starting = stage.jobs().await;
    assert_eq!(
        starting.len(),
        expected.while_agents_start,
        "Jobs while the agents start (strategy {}): {:?}",
        expected.strategy,
        names(&starting)
    );

    // Each agent receives one queued job (written in the fake, as Azure DevOps hands it over).
    for (request, agent) in requests.iter().zip(&agents) {
        stage.fake.receive(*request, *agent);
    }
    stage.scale_loops_since().await;
    let busy = stage.jobs().await;
    assert_eq!(busy.len(), expected.while_agents_start, "Jobs while the agents run their jobs: {:?}", names(&busy));

    // The jobs finish in Azure DevOps, then the agents exit 0: the kubelet reports the pods
    // Succeeded (written by the test); the real Job controller completes the Jobs.
    for request in &requests {
        stage.fake.finish(*request, JobResult::Succeeded);
    }
    stage.kubelet_reports(&pods, "Succeeded").await;
    let first = names(&first);
    let complete = |job: &Job| {
        let conditions = job.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        conditions.iter().any(|c| c.type_ == "Complete" && c.status == "True")
    };
    stage
        .until_jobs("the first Jobs Complete", |jobs| {
            let done = |name: &String| jobs.iter().any(|job| job.metadata.name.as_ref() == Some(name) && complete(job));
            first.iter().all(done).then_some(())
        })
        .await;
    stage.scale_loops_since().await;
    let done = stage.jobs().await;
    assert_eq!(done.len(), expected.while_agents_start, "no Job once the jobs finished: {:?}", names(&done));
}

/// `spec.mode: Job` on KEDA 2.21.0: the controller reads 2.21 from the CRDs and renders strategy
/// `default` with `scaleOnInFlight: "true"` (docs/agents.md); KEDA starts exactly one agent Job
/// per queued pipeline job, none while those agents start and run their jobs, none once they
/// finished, and one for the next queued job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_mode_on_keda_2_21_starts_one_agent_job_per_queued_pipeline_job_and_none_for_received_or_finished_ones() {
    let test =
        "job_mode_on_keda_2_21_starts_one_agent_job_per_queued_pipeline_job_and_none_for_received_or_finished_ones";
    let Some(stage) = Stage::start(test, KedaRelease::V2_21_0).await else { return };
    let expected = Expected { strategy: "default", scale_on_in_flight: "true", while_agents_start: 3 };
    job_mode_sequence(&stage, &expected).await;

    // One more queued pipeline job: exactly one more Job.
    stage.one_more_queued_job_gets_one_job().await;
}

/// `spec.mode: Job` on KEDA 2.20.2: the controller reads 2.20 from the CRDs and renders strategy
/// `accurate` (`scaleOnInFlight: "false"`, which 2.20 ignores). 2.20's scaler counts only the
/// pipeline jobs no agent has received, and `accurate` subtracts only the Jobs whose pod is not
/// running yet: while the agents of the first Jobs start (pods running, no job received yet),
/// KEDA starts one more Job per queued pipeline job. Those agents then wait for work; a later
/// queued job still gets a Job of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_mode_on_keda_2_20_starts_one_agent_job_per_queued_pipeline_job_and_more_while_their_agents_start() {
    let test = "job_mode_on_keda_2_20_starts_one_agent_job_per_queued_pipeline_job_and_more_while_their_agents_start";
    let Some(stage) = Stage::start(test, KedaRelease::V2_20_2).await else { return };
    let expected = Expected { strategy: "accurate", scale_on_in_flight: "false", while_agents_start: 6 };
    job_mode_sequence(&stage, &expected).await;

    // The surplus Jobs' agents start too (the kubelet reports their pods running, written by the
    // test) and wait for work: no Job follows, the queue being empty.
    let all = stage.jobs().await;
    let pending: Vec<Job> = all
        .iter()
        .filter(|job| job.status.as_ref().and_then(|s| s.conditions.as_ref()).is_none_or(|c| c.is_empty()))
        .cloned()
        .collect();
    assert_eq!(pending.len(), 3, "the surplus Jobs are still running: {:?}", names(&pending));
    let pods = stage.pods_of(&pending).await;
    stage.kubelet_reports(&pods, "Running").await;
    stage.scale_loops_since().await;
    assert_eq!(stage.jobs().await.len(), all.len(), "no Job for an empty queue");

    // One more queued pipeline job: a Job of its own, though three agents wait for work.
    stage.one_more_queued_job_gets_one_job().await;
}

/// What Deployment mode's ScaledObject counts with two agents busy and one job queued, on
/// `release`: the controller's `BusyAgentsCounted` condition (`status`, `reason`), the trigger's
/// rendered `scaleOnInFlight` (`None`: not rendered), and the queue length KEDA reads.
///
/// The number read is `keda_scaler_metrics_value` of the operator, not the HPA's: the HPA asks
/// KEDA's metrics API server (not run here), which asks the operator over gRPC
/// (`pkg/metricsservice/server.go` → `scaleHandler.GetScaledObjectMetrics`), which reads the same
/// scaler of the operator's scalers cache (`GetMetricsAndActivityForScaler`) that the operator's
/// scale loop polls (`checkScalers` → `getScaledObjectState` → `getScalerState` →
/// `observeMetric`), or with `useCachedMetrics` the record that loop stored; the loop's value is
/// what `processMetricsWithFallback` records as `keda_scaler_metrics_value`
/// (`pkg/scaling/scale_handler.go`, v2.20.2 and v2.21.0 alike). One scaler, one queue: the same
/// number.
async fn deployment_mode_counts(
    test: &str,
    release: KedaRelease,
    busy_agents_counted: (&'static str, &'static str),
    scale_on_in_flight: Option<&str>,
    queue_length: f64,
) {
    let Some(stage) = Stage::start(test, release).await else { return };
    stage.apply_target("");
    let (status, reason) = busy_agents_counted;
    let condition = condition_is("BusyAgentsCounted", status, reason);
    let target = stage.target_until(&format!("BusyAgentsCounted={status}/{reason}"), condition).await;
    let rendered = target.status.as_ref().and_then(|s| s.rendered.clone()).expect("status.rendered");
    assert_eq!(rendered.mode.as_deref(), Some("Deployment"), "{rendered:?}");
    let scaled_object =
        stage.cluster().kubectl(&["get", "scaledobject", TARGET, "-n", &stage.ns, "-o", "json"]).success();
    let scaled_object: serde_json::Value = serde_json::from_str(&scaled_object).expect("the ScaledObject as JSON");
    let rendered_key = scaled_object.pointer("/spec/triggers/0/metadata/scaleOnInFlight").and_then(|v| v.as_str());
    assert_eq!(rendered_key, scale_on_in_flight, "{scaled_object}");

    // Three pipeline jobs; two agents of the pool have received one each (written in the fake,
    // as Azure DevOps hands them over), the third is queued.
    let requests: Vec<i64> = (0..3).map(|_| stage.fake.queue_request(stage.pool, &[])).collect();
    for (i, request) in requests.iter().take(2).enumerate() {
        let agent = stage.fake.register_agent(stage.pool, &format!("agent-{i}"), &[], true);
        stage.fake.agent_online(agent);
        stage.fake.receive(*request, agent);
    }
    stage.scale_loops_since().await;
    let value = stage.keda.scaler_metrics_value(Scaled::Object, &stage.ns, TARGET, 0);
    assert_eq!(value, Some(queue_length), "the queue KEDA {} reads", release.version());
}

/// Deployment mode on KEDA 2.20.2: busy agents are not counted (1 of 3 unfinished jobs), and the
/// CDTarget says so (`BusyAgentsCounted=False`, `KedaDropsBusyAgents`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_mode_queue_length_with_busy_agents_on_keda_2_20() {
    let test = "deployment_mode_queue_length_with_busy_agents_on_keda_2_20";
    deployment_mode_counts(test, KedaRelease::V2_20_2, ("False", "KedaDropsBusyAgents"), None, 1.0).await;
}

/// Deployment mode on KEDA 2.21.0: the rendered `scaleOnInFlight: "true"` counts busy agents (3
/// of 3), and the CDTarget says so (`BusyAgentsCounted=True`, `ScaleOnInFlight`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_mode_queue_length_with_busy_agents_on_keda_2_21() {
    let test = "deployment_mode_queue_length_with_busy_agents_on_keda_2_21";
    deployment_mode_counts(test, KedaRelease::V2_21_0, ("True", "ScaleOnInFlight"), Some("true"), 3.0).await;
}

/// Sets the token Secret's `AZP_TOKEN` to `token`, as the tenant would with kubectl.
fn set_token(stage: &Stage, token: &str) {
    let patch = serde_json::json!({"stringData": {"AZP_TOKEN": token}}).to_string();
    stage.cluster().kubectl(&["patch", "secret", "azp-token", "-n", &stage.ns, "--type=merge", "-p", &patch]).success();
}

/// KEDA's `Ready` condition of the ScaledJob as `status reason: message` (empty before KEDA
/// wrote one).
/// Waits (a watch of the ScaledJob, at most [`DEADLINE`]) until KEDA reports it `Ready` with
/// `status`, and returns that condition as `status reason: message`.
async fn scaled_job_ready(stage: &Stage, status: &str) -> String {
    let resource =
        kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledJob"));
    let api: Api<DynamicObject> = Api::namespaced_with(stage.client.clone(), &stage.ns, &resource);
    let ready = |object: &DynamicObject| {
        let conditions = object.data.pointer("/status/conditions").and_then(serde_json::Value::as_array)?;
        let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
        let text = |key: &str| ready[key].as_str().unwrap_or_default().to_owned();
        Some(format!("{} {}: {}", text("status"), text("reason"), text("message")))
    };
    let prefix = format!("{status} ");
    let reported = |object: Option<&DynamicObject>| object.and_then(ready).is_some_and(|r| r.starts_with(&prefix));
    match tokio::time::timeout(DEADLINE, await_condition(api, TARGET, reported)).await {
        Ok(Ok(Some(object))) => ready(&object).unwrap_or_default(),
        other => panic!("KEDA's ScaledJob Ready={status}: not within {DEADLINE:?} ({other:?}){}", stage.diagnostics()),
    }
}

/// Job mode's readiness from what KEDA and the Job controller really report (docs/agents.md,
/// "Ready in Job mode"), on KEDA 2.21.0: a token Azure DevOps refuses leaves KEDA's ScaledJob not
/// Ready, and the CDTarget `Ready=False`, `ScaledJobNotReady`; with a token it takes, the CDTarget
/// is Ready; an agent Job that fails (its pod failed, as the kubelet reports when the agent exits
/// 1, then the Job controller fails the Job) makes it `AgentJobsFailing`.
///
/// The tenant reads both messages as written (both reasons are on the CDTarget allow-list of
/// `src/controller/tenant_text.rs`): KEDA's reason for the ScaledJob, and the failed Job's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_mode_readiness_follows_kedas_scaled_job_and_the_job_controllers_failed_job() {
    let test = "job_mode_readiness_follows_kedas_scaled_job_and_the_job_controllers_failed_job";
    let Some(stage) = Stage::start(test, KedaRelease::V2_21_0).await else { return };
    const REFUSED: &str = "a-token-azure-devops-refuses";
    set_token(&stage, REFUSED);
    stage.apply_target(&format!("  mode: Job\n  minReplicaCount: 0\n  triggerMeta:\n    parent: {PLACEHOLDER}\n"));

    // KEDA's scaler is refused: KEDA reports its ScaledJob not Ready, and so does the CDTarget.
    let keda_says = scaled_job_ready(&stage, "False").await;
    assert!(!keda_says.contains(REFUSED), "KEDA's condition quotes no token");
    let waiting =
        stage.target_until("Ready=False/ScaledJobNotReady", condition_is("Ready", "False", "ScaledJobNotReady")).await;
    let message = ready_message(&waiting);
    assert!(message.contains(&format!("ScaledJob {}/{TARGET} is not Ready", stage.ns)), "{message}");

    // The tenant's token is set right: KEDA reports the ScaledJob Ready, and so is the CDTarget.
    set_token(&stage, PAT);
    scaled_job_ready(&stage, "True").await;
    let ready = |target: Option<&CDTarget>| {
        target
            .and_then(|t| t.status.as_ref())
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    stage.target_until("Ready=True with a token Azure DevOps takes", ready).await;

    // A queued job gets its agent Job; the agent fails (the kubelet reports its pod Failed,
    // written by the test), and the Job controller fails the Job (backoffLimit 0).
    stage.fake.queue_request(stage.pool, &[]);
    let jobs = stage.jobs_at_least(1).await;
    let pods = stage.pods_of(&jobs[..1]).await;
    stage.kubelet_reports(&pods, "Failed").await;
    let failing =
        stage.target_until("Ready=False/AgentJobsFailing", condition_is("Ready", "False", "AgentJobsFailing")).await;
    let job = names(&jobs)[0].clone();
    let message = ready_message(&failing);
    assert!(message.contains(&format!("{job}, failed to start: the Job failed")), "{message}");
    let failed: Api<Job> = Api::namespaced(stage.client.clone(), &stage.ns);
    let conditions = failed.get(&job).await.expect("the Job").status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(conditions.iter().any(|c| c.type_ == "Failed" && c.status == "True"), "{conditions:?}");
}

/// The message of the `Ready` condition of `target`.
fn ready_message(target: &CDTarget) -> String {
    let conditions = target.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.message.clone()).unwrap_or_default()
}
