//! etcd stopped for 30 s under a running controller, with a push delivered by webhook meanwhile.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::common::AuditEvent;
use crate::common::cluster::{CONTROLLER_USER, Controller, PLATFORM_NAMESPACE, Tenant, own_installed_cluster};
use crate::common::process::process_running;
use crate::kit::{
    ONE_AT_A_TIME, Set, children, converged, failed_reconciles, figure, lease_holder, metrics, onboard, registration,
};

/// How long etcd stays away: the fault itself, a wall-clock outage, not a wait for a signal.
const OUTAGE: Duration = Duration::from_secs(30);

/// uid of every tenant object and child in the tenant namespace, by `Kind/name`.
async fn uids(tenant: &Tenant) -> BTreeMap<String, String> {
    let client = tenant.cluster.admin_client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &tenant.ns);
    let targets: Api<cdtarget::api::CDTarget> = Api::namespaced(client, &tenant.ns);
    let mut uids: BTreeMap<String, String> = BTreeMap::new();
    for map in maps.list(&ListParams::default()).await.expect("list ConfigMaps").items {
        uids.insert(format!("ConfigMap/{}", map.name_any()), map.uid().unwrap_or_default());
    }
    for target in targets.list(&ListParams::default()).await.expect("list CDTargets").items {
        uids.insert(format!("CDTarget/{}", target.name_any()), target.uid().unwrap_or_default());
    }
    for child in children(tenant).await {
        uids.insert(format!("{}/{}", child.kind, child.name), child.uid);
    }
    uids
}

#[tokio::test]
async fn etcd_stopped_for_30_s_holds_requests_keeps_every_object_and_converges_on_the_push_made_meanwhile() {
    let test = "etcd_stopped_for_30_s_holds_requests_keeps_every_object_and_converges_on_the_push_made_meanwhile";
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cluster) = own_installed_cluster(test) else { return };
    let controller = Controller::start(&cluster, "cdtarget-etcd-outage", &[]).await;
    let log = controller.log().to_path_buf();
    // A generic webhook (the path is the only proof): a push announced while etcd is away
    // reaches the controller without an API write.
    cluster
        .kubectl(&[
            "create",
            "secret",
            "generic",
            "fault-webhook",
            "-n",
            PLATFORM_NAMESPACE,
            "--from-literal=token=etcd-outage-test-token",
        ])
        .success();
    let set = Set::small();
    let webhook = "  webhook:\n    type: generic\n    secretRef:\n      name: fault-webhook\n";
    let (tenant, head) = onboard(cluster.cluster(), &set, webhook);
    converged(&tenant, &set, &head, &log).await;
    let path = registration(&tenant).await.status.and_then(|status| status.webhook_path).expect("status.webhookPath");
    let before = uids(&tenant).await;
    let address = controller.metrics_address();
    let failed_before = failed_reconciles(&metrics(address).await, "TenantRepository");
    let mark = cluster.audit_mark();

    cluster.stop_etcd().unwrap_or_else(|e| panic!("{e}"));
    let (stopped, stopped_at) = (Instant::now(), Timestamp::now());
    // Meanwhile the tenant pushes a changed ConfigMap and a new one, and the Git host announces it.
    let during = set.clone().with_config_maps(["added-during-outage"]);
    let mut files = during.files();
    files.insert(
        "deploy/configmap-pipeline-settings.yaml".into(),
        crate::kit::config_map("pipeline-settings").replace("\"3\"", "\"7\""),
    );
    let files: Vec<(&str, &str)> = files.iter().map(|(path, content)| (path.as_str(), content.as_str())).collect();
    let pushed = tenant.repo.commit_and_push(&files, "during the outage");
    let delivery = reqwest::Client::new()
        .post(format!("http://{}{path}", controller.webhook_address()))
        .send()
        .await
        .expect("POST the webhook");
    let answer = (delivery.status().as_u16(), delivery.text().await.unwrap_or_default());
    figure(&format!("webhook delivery while etcd is away answered {} {}", answer.0, answer.1));
    assert_eq!(answer.0, 202, "the receiver refused a delivery while etcd was away: {}", answer.1);

    // The fault: etcd stays away for OUTAGE in wall-clock time.
    tokio::time::sleep(OUTAGE.saturating_sub(stopped.elapsed())).await;
    let failed_during = failed_reconciles(&metrics(address).await, "TenantRepository");
    let restarted_at = Timestamp::now();
    let ready = cluster.start_etcd().unwrap_or_else(|e| panic!("{e}"));
    let back = Instant::now();
    figure(&format!(
        "etcd away {:.1} s; kube-apiserver ready {:.1} s after etcd was started again",
        stopped.elapsed().as_secs_f64() - ready.as_secs_f64(),
        ready.as_secs_f64()
    ));

    converged(&tenant, &during, &pushed, &log).await;
    figure(&format!(
        "converged on the push made during the outage {:.1} s after kube-apiserver was back",
        back.elapsed().as_secs_f64()
    ));
    let maps: Api<ConfigMap> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let settings = maps.get("pipeline-settings").await.expect("get pipeline-settings");
    assert_eq!(settings.data.and_then(|data| data.get("RETRIES").cloned()).as_deref(), Some("7"));

    // Nothing that ran before the outage was deleted or replaced.
    let after = uids(&tenant).await;
    for (object, uid) in &before {
        assert_eq!(after.get(object), Some(uid), "{object} was deleted or replaced{}", tenant.diagnostics(&log));
    }
    let deletes: Vec<AuditEvent> = cluster
        .audit_requests_since(mark)
        .into_iter()
        .filter(|event| event.user == CONTROLLER_USER && event.verb == "delete")
        .collect();
    assert!(deletes.is_empty(), "the controller deleted during or after the outage: {deletes:#?}");
    // What the controller met: kube-apiserver held the requests it sent while etcd was away and
    // answered them once etcd was back (within its 60 s request timeout), so the reconcile the
    // delivery started waited and then went on; nothing failed, nothing was retried.
    let held = held_requests(&cluster.audit_log(), stopped_at, restarted_at);
    for (request, code, seconds) in &held {
        figure(&format!("held while etcd was away: {request} -> {code} after {seconds:.1} s"));
    }
    assert!(!held.is_empty(), "no request of the controller was held while etcd was away");
    assert!(held.iter().all(|(_, code, _)| (200..300).contains(code)), "{held:?}");
    let failed_after = failed_reconciles(&metrics(address).await, "TenantRepository");
    figure(&format!(
        "failed TenantRepository reconciles: {} while etcd was away, {} in all",
        failed_during - failed_before,
        failed_after - failed_before
    ));
    // Still the same process, still the leader: no exit, no lost Lease.
    assert!(
        process_running(controller.pid()),
        "the controller exited:\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    let text = fs::read_to_string(&log).unwrap_or_default();
    assert!(!text.contains("lost the lease"), "{text}");
    lease_holder(&cluster, Duration::from_secs(10), |holder| holder == "cdtarget-etcd-outage").await;
}

/// The controller's requests (not watches) that kube-apiserver received between `from` and `to`
/// and answered after `to`: what, the response code, seconds held.
fn held_requests(audit: &Path, from: Timestamp, to: Timestamp) -> Vec<(String, u16, f64)> {
    let text = fs::read_to_string(audit).expect("read the audit log");
    let time = |event: &serde_json::Value, field: &str| event[field].as_str().and_then(|t| t.parse::<Timestamp>().ok());
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["stage"] == "ResponseComplete" && event["verb"] != "watch")
        .filter(|event| event["user"]["username"] == CONTROLLER_USER)
        .filter_map(|event| {
            let (received, answered) = (time(&event, "requestReceivedTimestamp")?, time(&event, "stageTimestamp")?);
            (received >= from && received <= to && answered > to).then(|| {
                let object = &event["objectRef"];
                let what = format!(
                    "{} {}/{}",
                    event["verb"].as_str().unwrap_or_default(),
                    object["resource"].as_str().unwrap_or_default(),
                    object["name"].as_str().unwrap_or_default()
                );
                let code = event["responseStatus"]["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(0);
                (what, code, answered.duration_since(received).as_secs_f64())
            })
        })
        .collect()
}
