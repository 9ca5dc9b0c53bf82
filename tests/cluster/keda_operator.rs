//! KEDA's own operator (`tests/common/keda.rs`, built from `hack/tools/keda-v2.21` and
//! `hack/tools/keda-v2.20`) against the real control plane: what a rendered ScaledJob turns into
//! once the real operator reads it. Each case has a control plane of its own (KEDA's CRDs are
//! cluster-scoped, and the operator writes in every namespace it watches), whose
//! kube-controller-manager runs the Job controller (`Options::job_controller`): KEDA creates
//! the Jobs, the Job controller their pods, which stay Pending (no scheduler, no kubelet).

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;

use crate::common::cluster::{self, namespace};
use crate::common::control_plane::Options;
use crate::common::keda::{KedaOperator, KedaOptions, KedaRelease, Scaled, scaler_metrics_value};
use crate::common::{ControlPlane, skip_or_fail};
use crate::kit::kubectl_file;

/// How long KEDA and the Job controller may take for what a case waits for.
const DEADLINE: Duration = Duration::from_secs(60);

/// A queue that holds `length` items, as an HTTP endpoint on 127.0.0.1 answering
/// `{"queue":{"length":N}}` (what KEDA's `metrics-api` scaler reads).
async fn serve_queue(length: u64) -> SocketAddr {
    let app = axum::Router::new().route(
        "/queue",
        axum::routing::get(move || async move { axum::Json(serde_json::json!({"queue": {"length": length}})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let address = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve the queue") });
    address
}

/// The same queue over HTTPS, its certificate signed by a CA of the test (`ca.crt` in the
/// directory returned): one answer per connection, then the connection is closed.
async fn serve_queue_tls(length: u64) -> (SocketAddr, crate::common::TestDir) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (dir, acceptor) = crate::common::http_git::signed_by_test_ca();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let address = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that does not trust the CA ends its handshake here.
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match tls.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let body = serde_json::json!({"queue": {"length": length}}).to_string();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (address, dir)
}

/// Calls `check` with the objects of `api` labelled `labels` once listed and after every change
/// a watch reports, at most [`DEADLINE`]; then panics with `what` and the operator's log.
async fn until_listed<K, T>(
    keda: &KedaOperator,
    api: &Api<K>,
    labels: &str,
    what: &str,
    check: impl FnMut(&[K]) -> Option<T>,
) -> T
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let config = watcher::Config::default().labels(labels);
    let log = || format!("; KEDA's log ends with:\n{}", keda.log_tail(40));
    cluster::until_listed(api.clone(), config, DEADLINE, what, check, log).await
}

/// A ScaledJob `name` whose one trigger reads the queue at `queue` every second, one Job per item,
/// labelled as cdtarget labels what it renders.
///
/// Its spec is written in the form KEDA writes it back: `rollout: {}`, `scalingStrategy: {}`, the
/// template's `metadata: {}` and the container's `resources: {}`. KEDA's first reconcile adds
/// its finalizer with an update of the whole object, which serializes those empty objects; when
/// the spec lacked them, that update is a spec change (generation 2), the second reconcile
/// restarts the scale loop while the first is creating Jobs, the cancelled create has already
/// reached the API server, and the new loop creates Jobs for what it did not see yet: 4 Jobs for 3
/// items, in 3 runs of 6 here. Written in full, KEDA's update changes no field of the spec.
fn scaled_job(ns: &str, name: &str, url: &str) -> String {
    format!(
        r#"apiVersion: keda.sh/v1alpha1
kind: ScaledJob
metadata:
  name: {name}
  namespace: {ns}
  labels:
    app.kubernetes.io/managed-by: cdtarget
    cdtarget.io/cdtarget: agents
spec:
  pollingInterval: 1
  maxReplicaCount: 10
  rollout: {{}}
  scalingStrategy: {{}}
  jobTargetRef:
    template:
      metadata: {{}}
      spec:
        restartPolicy: Never
        containers:
          - name: work
            image: registry.example/work:1
            resources: {{}}
  triggers:
    - type: metrics-api
      metadata:
        url: "{url}"
        valueLocation: "queue.length"
        targetValue: "1"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keda_v2_21_creates_one_job_per_queued_item_and_the_job_controller_gives_each_a_pod() {
    let test = "keda_v2_21_creates_one_job_per_queued_item_and_the_job_controller_gives_each_a_pod";
    let options = Options { job_controller: true, ..Options::default() };
    let Some(cluster) = skip_or_fail(test, ControlPlane::start_with(&options)) else { return };
    // A second queue over HTTPS, whose CA the operator is told to trust beside the machine's.
    let (secure_queue, ca_dir) = serve_queue_tls(2).await;
    let keda_options = KedaOptions { extra_ca: Some(ca_dir.path().join("ca.crt")), ..KedaOptions::default() };
    let started = KedaOperator::start(&cluster, KedaRelease::V2_21_0, &keda_options);
    let Some(keda) = skip_or_fail(test, started) else { return };
    let ns = namespace(&cluster, "keda-jobs");
    let queue = serve_queue(3).await;
    // Server-side, as cdtarget applies (a client-side apply's annotation would be copied too).
    let manifest = scaled_job(&ns, "work", &format!("http://{queue}/queue"));
    kubectl_file(&cluster, &cluster.admin_kubeconfig(), "apply", &manifest, &["--server-side"]).success();

    // Three items: three Jobs, labelled with the ScaledJob's name and owned by it.
    let client = cluster.admin_client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let labelled = "scaledjob.keda.sh/name=work";
    let created = until_listed(&keda, &jobs, labelled, "three Jobs of ScaledJob work", |list| {
        (list.len() >= 3).then(|| list.to_vec())
    })
    .await;
    for job in &created {
        let owner = job.metadata.owner_references.as_deref().unwrap_or_default();
        assert!(
            owner.iter().any(|o| o.kind == "ScaledJob" && o.name == "work" && o.controller == Some(true)),
            "{job:?}"
        );
        // KEDA's labels, then the ScaledJob's on top: its `managed-by` wins over KEDA's own.
        let labels = job.metadata.labels.clone().unwrap_or_default();
        let label = |key: &str| labels.get(key).map(String::as_str);
        assert_eq!(label("scaledjob.keda.sh/name"), Some("work"), "{labels:?}");
        assert_eq!(label("app.kubernetes.io/version"), Some("2.21.0"), "{labels:?}");
        assert_eq!(label("app.kubernetes.io/managed-by"), Some("cdtarget"), "the ScaledJob's label: {labels:?}");
        assert_eq!(label("cdtarget.io/cdtarget"), Some("agents"), "{labels:?}");
        let annotations = job.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.get("scaledjob.keda.sh/generation").map(String::as_str), Some("1"), "{annotations:?}");
        let restart = job.spec.as_ref().and_then(|s| s.template.spec.as_ref()).and_then(|s| s.restart_policy.clone());
        assert_eq!(restart.as_deref(), Some("Never"), "the template's restartPolicy is kept");
    }

    // The Job controller gave each Job its pod (Pending: nothing schedules or runs it).
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let job_names: Vec<String> = created.iter().filter_map(|job| job.metadata.name.clone()).collect();
    let owned = until_listed(&keda, &pods, labelled, "a pod for each of the three Jobs", |list| {
        let owners: Vec<String> = list
            .iter()
            .flat_map(|pod| pod.metadata.owner_references.clone().unwrap_or_default())
            .filter(|o| o.kind == "Job")
            .map(|o| o.name)
            .collect();
        job_names.iter().all(|job| owners.contains(job)).then(|| list.to_vec())
    })
    .await;
    assert!(
        owned.iter().all(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")),
        "{owned:?}"
    );
    // A pod's labels are the template's and KEDA's name label, none of the ScaledJob's own: a
    // label that must select the pods (a NetworkPolicy's) belongs in the template.
    for pod in &owned {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert!(!labels.contains_key("cdtarget.io/cdtarget"), "{labels:?}");
        assert_eq!(labels.get("scaledjob.keda.sh/name").map(String::as_str), Some("work"), "{labels:?}");
    }

    // The operator's scaler read 3 ...
    let value = keda.until_logged(DEADLINE, "keda_scaler_metrics_value 3", || {
        let value = keda.scaler_metrics_value(Scaled::Job, &ns, "work", 0);
        (value == Some(3.0)).then_some(value)
    });
    assert_eq!(value, Some(3.0));

    // ... and a later scale loop counted the three Jobs running and created none: exactly three.
    keda.until_logged(DEADLINE, "a scale loop that counts three running Jobs", || {
        keda.log_entries()
            .iter()
            .any(|entry| {
                entry["msg"] == "Scaling Jobs"
                    && entry["scaledJob.Namespace"] == ns.as_str()
                    && entry["scaledJob.Name"] == "work"
                    && entry["Number of running Jobs"] == 3
            })
            .then_some(())
    });
    let after = jobs.list(&ListParams::default().labels(labelled)).await.expect("list Jobs").items;
    assert_eq!(
        after.len(),
        3,
        "exactly one Job per item: {:?}",
        after.iter().map(|j| &j.metadata.name).collect::<Vec<_>>()
    );

    // KEDA's own writes (its finalizer, its status) left the spec as it was applied.
    let generation =
        cluster.kubectl(&["get", "scaledjob", "work", "-n", &ns, "-o", "jsonpath={.metadata.generation}"]).success();
    assert_eq!(generation, "1", "KEDA's update of the ScaledJob changed its spec");

    // The ScaledJob is Ready and Active, as KEDA reports it.
    let conditions = cluster
        .kubectl(&[
            "get",
            "scaledjob",
            "work",
            "-n",
            &ns,
            "-o",
            "jsonpath={range .status.conditions[*]}{.type}={.status};{end}",
        ])
        .success();
    assert!(conditions.contains("Ready=True;") && conditions.contains("Active=True;"), "{conditions}");

    // Over HTTPS, the certificate signed by the extra CA (SSL_CERT_FILE): two items, two Jobs.
    let manifest = scaled_job(&ns, "secure", &format!("https://{secure_queue}/queue"));
    kubectl_file(&cluster, &cluster.admin_kubeconfig(), "apply", &manifest, &["--server-side"]).success();
    let value = keda.until_logged(DEADLINE, "keda_scaler_metrics_value 2 over HTTPS", || {
        let value = keda.scaler_metrics_value(Scaled::Job, &ns, "secure", 0);
        (value == Some(2.0)).then_some(value)
    });
    assert_eq!(value, Some(2.0));
    let secure = "scaledjob.keda.sh/name=secure";
    until_listed(&keda, &jobs, secure, "two Jobs of ScaledJob secure", |list| (list.len() == 2).then_some(())).await;
}

#[tokio::test]
async fn keda_v2_20_starts_on_a_control_plane_of_its_own() {
    let test = "keda_v2_20_starts_on_a_control_plane_of_its_own";
    let Some(cluster) = skip_or_fail(test, ControlPlane::start()) else { return };
    let Some(keda) = skip_or_fail(test, KedaOperator::start(&cluster, KedaRelease::V2_20_2, &KedaOptions::default()))
    else {
        return;
    };
    let metrics = keda.metrics();
    assert!(
        metrics.lines().any(|line| line.starts_with("keda_build_info{") && line.contains(r#"version="2.20.2""#)),
        "{metrics}"
    );
    let crds = cluster.kubectl(&["get", "crd", "-o", "name"]).success();
    for kind in ["scaledjobs.keda.sh", "scaledobjects.keda.sh", "triggerauthentications.keda.sh"] {
        assert!(crds.contains(kind), "{crds}");
    }
}

#[test]
fn the_scaler_metric_is_found_by_kind_namespace_name_and_trigger() {
    let text = concat!(
        "# HELP keda_scaler_metrics_value The current value for each scaler's metric that would be used by the HPA in computing the target average.\n",
        "# TYPE keda_scaler_metrics_value gauge\n",
        "keda_scaler_metrics_value{metric=\"s0-metric-api-queue-length\",namespace=\"a\",scaledObject=\"work\",scaler=\"metricsAPIScaler\",triggerIndex=\"0\",type=\"scaledjob\"} 3\n",
        "keda_scaler_metrics_value{metric=\"s1-x\",namespace=\"a\",scaledObject=\"work\",scaler=\"metricsAPIScaler\",triggerIndex=\"1\",type=\"scaledjob\"} 7.5\n",
        "keda_scaler_metrics_value{metric=\"s0-x\",namespace=\"a\",scaledObject=\"work\",scaler=\"metricsAPIScaler\",triggerIndex=\"0\",type=\"scaledobject\"} 9\n",
        "keda_scaler_metrics_value{metric=\"s0-x\",namespace=\"b\",scaledObject=\"w\\\"ork\",scaler=\"s\",triggerIndex=\"0\",type=\"scaledjob\"} 4\n",
    );
    assert_eq!(scaler_metrics_value(text, Scaled::Job, "a", "work", 0), Some(3.0));
    assert_eq!(scaler_metrics_value(text, Scaled::Job, "a", "work", 1), Some(7.5));
    assert_eq!(scaler_metrics_value(text, Scaled::Object, "a", "work", 0), Some(9.0));
    assert_eq!(scaler_metrics_value(text, Scaled::Job, "b", "w\"ork", 0), Some(4.0));
    assert_eq!(scaler_metrics_value(text, Scaled::Job, "b", "work", 0), None);
}
