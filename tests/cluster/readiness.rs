//! `cdtarget_object_ready` on the shared controller's `/metrics`, following the Ready conditions
//! the controller writes on the real control plane. (The alert rules, the dashboard and the test
//! that their metric names exist are in `tests/cluster_tour/monitoring.rs`, whose controller runs
//! with the GitLab settings, so that every family has samples.)

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cdtarget::api::{CDTarget, TenantRepository};

use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, PLATFORM_NAMESPACE, Tenant, gone, installed_cluster, logged_metrics_address, ready,
    scrape_metrics, shared_controller,
};
use crate::kit::{deployment_reports_available, scaled_object_reports};

/// The value of the series `series` (name and labels as `/metrics` writes them), if present.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Scrapes until `series` has `value` (`None`: is absent). The gauge is set right after the
/// status write the caller has already seen, with nothing to await in between: a short poll.
async fn series_until(address: SocketAddr, series: &str, value: Option<f64>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = scrape_metrics(address).await;
        let now = sample(&page, series);
        if now == value {
            return;
        }
        assert!(Instant::now() < deadline, "{series} is {now:?}, not {value:?}, after 30 s:\n{page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A condition: the registration's Ready condition has `status` and `reason` (any when empty).
fn registration_ready(status: &'static str, reason: &'static str) -> impl Fn(Option<&TenantRepository>) -> bool {
    move |registration| {
        registration.and_then(|r| r.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == status && (reason.is_empty() || c.reason == reason))
        })
    }
}

#[tokio::test]
async fn object_readiness_on_metrics_follows_the_ready_conditions_the_controller_writes() {
    let test = "object_readiness_on_metrics_follows_the_ready_conditions_the_controller_writes";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    let metrics = logged_metrics_address(log);
    let ns = tenant.ns.clone();
    let registration = |suspended: &str| {
        format!(
            "cdtarget_object_ready{{kind=\"TenantRepository\",namespace=\"{PLATFORM_NAMESPACE}\",name=\"{ns}\",suspended=\"{suspended}\"}}"
        )
    };
    let target = format!(
        "cdtarget_object_ready{{kind=\"CDTarget\",namespace=\"{ns}\",name=\"deploy-agents\",suspended=\"false\"}}"
    );

    // Applied but no agent runs: the CDTarget is not Ready, and says 0.
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;
    series_until(metrics, &target, Some(0.0)).await;

    // Ready (its agent runs, KEDA reports its ScaledObject Ready): 1 for both kinds.
    deployment_reports_available(&tenant, "deploy-agents").await;
    scaled_object_reports(&tenant, "deploy-agents", "True", "ScaledObjectReady", "ScaledObject is defined correctly");
    let running = |t: Option<&CDTarget>| {
        t.and_then(|t| t.status.as_ref())
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    tenant.until::<CDTarget, _>("the CDTarget Ready", "deploy-agents", running, log).await;
    tenant.registration_until("the registration Ready", registration_ready("True", ""), log).await;
    series_until(metrics, &registration("false"), Some(1.0)).await;
    series_until(metrics, &target, Some(1.0)).await;

    // A push that breaks a rule: the registration is not Ready, and says 0.
    tenant
        .repo
        .commit_and_push(&[("deploy/broken.yaml", "kind: ConfigMap\nmetadata:\n  name: no-api-version\n")], "broken");
    tenant.request_reconcile("broken");
    tenant.registration_until("the registration not Ready", registration_ready("False", ""), log).await;
    series_until(metrics, &registration("false"), Some(0.0)).await;
    series_until(metrics, &target, Some(1.0)).await;

    // Suspended: the series moves to suspended="true", keeping the Ready status it had.
    tenant.patch_registration(r#"{"spec":{"suspend":true}}"#);
    tenant.registration_until("the registration suspended", registration_ready("False", "Suspended"), log).await;
    series_until(metrics, &registration("true"), Some(0.0)).await;
    series_until(metrics, &registration("false"), None).await;

    // Deleted: no series left behind.
    cluster.kubectl(&["delete", "tenantrepository", &ns, "-n", PLATFORM_NAMESPACE, "--wait"]).success();
    cluster.kubectl(&["delete", "cdtarget", "deploy-agents", "-n", &ns, "--wait"]).success();
    tenant.until::<CDTarget, _>("the CDTarget deleted", "deploy-agents", gone, log).await;
    series_until(metrics, &registration("true"), None).await;
    series_until(metrics, &target, None).await;
}
