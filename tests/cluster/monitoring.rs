//! The operations kit: the alert rules (`deploy/monitoring/prometheusrule.yaml`) checked and unit
//! tested by the real `promtool` (built from `hack/tools/promtool`), the Grafana dashboard and the
//! alerts using only metrics a running controller exposes, and `cdtarget_object_ready` following
//! the Ready conditions the controller writes on the real control plane.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cdtarget::api::{CDTarget, TenantRepository};
use serde_json::Value;

use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, PLATFORM_NAMESPACE, Tenant, gone, installed_cluster, logged_metrics_address,
    logged_webhook_address, ready, shared_controller,
};
use crate::common::go_build::GoBuild;
use crate::common::skip_or_fail;
use crate::promql;

const RULES: &str = "deploy/monitoring/prometheusrule.yaml";
const DASHBOARD: &str = "deploy/monitoring/grafana-dashboard.json";
const RULE_TESTS: &str = "tests/monitoring/alerts.test.yaml";

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The PrometheusRule object.
fn prometheus_rule() -> Value {
    serde_saphyr::from_str(&read(RULES)).unwrap_or_else(|e| panic!("{RULES}: {e}"))
}

/// Every rule of every group.
fn rules(rule: &Value) -> Vec<&Value> {
    rule["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .collect()
}

/// `promtool` from the Prometheus release `hack/tools/promtool/go.mod` pins.
fn promtool(test: &str) -> Option<PathBuf> {
    let build = GoBuild {
        cold_estimate: "about 8 minutes (measured 7-10 min with an empty module cache)".into(),
        ..GoBuild::tool("promtool", "hack/tools/promtool", "github.com/prometheus/prometheus/cmd/promtool")
    };
    skip_or_fail(test, build.binary())
}

/// The rule groups of the PrometheusRule as a Prometheus rule file (JSON is YAML) in `dir`.
fn rule_file(dir: &Path, rule: &Value) -> PathBuf {
    let path = dir.join("cdtarget-rules.yaml");
    let groups = serde_json::json!({ "groups": rule["spec"]["groups"] });
    std::fs::write(&path, serde_json::to_string_pretty(&groups).unwrap()).expect("write the rule file");
    path
}

fn run(command: &mut Command) -> (bool, String) {
    let output = command.output().expect("run promtool");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
fn the_prometheus_rule_is_one_labelled_object_whose_groups_pass_promtool_check_rules() {
    let test = "the_prometheus_rule_is_one_labelled_object_whose_groups_pass_promtool_check_rules";
    let rule = prometheus_rule();
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["metadata"]["name"], "cdtarget");
    assert_eq!(rule["metadata"]["namespace"], "cdtarget-system");
    assert_eq!(rule["metadata"]["labels"]["app.kubernetes.io/name"], "cdtarget");
    for alert in rules(&rule) {
        let name = alert["alert"].as_str().expect("only alerting rules");
        let severity = alert["labels"]["severity"].as_str().unwrap_or_default();
        assert!(["critical", "warning", "info"].contains(&severity), "{name}: severity `{severity}`");
        for annotation in ["summary", "description"] {
            let text = alert["annotations"][annotation].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name}: annotation {annotation} `{text}`");
        }
    }

    let Some(promtool) = promtool(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (ok, output) = run(Command::new(&promtool).arg("check").arg("rules").arg(rule_file(dir.path(), &rule)));
    println!("promtool check rules: {output}");
    assert!(ok, "promtool check rules refused the groups of {RULES}:\n{output}");

    // The check can fail: the same groups with one expression broken are refused.
    let mut broken = rule.clone();
    broken["spec"]["groups"][0]["rules"][0]["expr"] = Value::from("sum(rate(cdtarget_reconciles_total[5m])");
    let (ok, output) = run(Command::new(&promtool).arg("check").arg("rules").arg(rule_file(dir.path(), &broken)));
    assert!(!ok && output.contains("parse error"), "a broken expression passed promtool check rules:\n{output}");
}

#[test]
fn every_alert_fires_on_its_series_and_stays_quiet_otherwise_in_promtool_unit_tests() {
    let test = "every_alert_fires_on_its_series_and_stays_quiet_otherwise_in_promtool_unit_tests";
    let rule = prometheus_rule();
    let cases: Value = serde_saphyr::from_str(&read(RULE_TESTS)).unwrap_or_else(|e| panic!("{RULE_TESTS}: {e}"));
    // Per alert: (cases where it fires, cases where it must not).
    let mut coverage: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for case in cases["tests"].as_array().expect("tests") {
        for check in case["alert_rule_test"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let entry = coverage.entry(check["alertname"].as_str().expect("alertname").to_owned()).or_default();
            if check["exp_alerts"].as_array().is_some_and(|alerts| !alerts.is_empty()) {
                entry.0 += 1;
            } else {
                entry.1 += 1;
            }
        }
    }
    for alert in rules(&rule) {
        let name = alert["alert"].as_str().unwrap();
        let (fires, quiet) = coverage.get(name).copied().unwrap_or_default();
        assert!(fires > 0 && quiet > 0, "{name}: {fires} firing and {quiet} quiet cases in {RULE_TESTS}");
    }

    let Some(promtool) = promtool(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    rule_file(dir.path(), &rule);
    // The cases name the rule file by its file name: side by side in the scratch directory.
    std::fs::copy(repo_file(RULE_TESTS), dir.path().join("alerts.test.yaml")).unwrap();
    let (ok, output) = run(Command::new(&promtool).args(["test", "rules", "alerts.test.yaml"]).current_dir(dir.path()));
    println!("promtool test rules: {output}");
    assert!(ok, "promtool test rules failed:\n{output}");
}

#[test]
fn the_dashboard_takes_its_data_source_from_a_variable() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let variables = dashboard["templating"]["list"].as_array().expect("templating.list");
    assert!(
        variables.iter().any(|v| v["type"] == "datasource" && v["query"] == "prometheus" && v["name"] == "datasource")
    );
    let mut queries = 0;
    walk(&dashboard["panels"], &mut |object| {
        if let Some(datasource) = object.get("datasource") {
            assert_eq!(datasource["uid"], "${datasource}", "a fixed data source in {object:?}");
        }
        queries += usize::from(object.contains_key("expr"));
    });
    assert!(queries >= 20, "{queries} queries");
}

/// Calls `visit` on every JSON object under `value`.
fn walk(value: &Value, visit: &mut impl FnMut(&serde_json::Map<String, Value>)) {
    match value {
        Value::Object(object) => {
            visit(object);
            object.values().for_each(|v| walk(v, visit));
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, visit)),
        _ => {}
    }
}

/// Every PromQL query of the dashboard and the alerts, with where it is.
fn queries() -> Vec<(String, String)> {
    let mut queries = Vec::new();
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    walk(&dashboard, &mut |object| {
        let title = object.get("title").and_then(Value::as_str).unwrap_or_default().to_owned();
        if let Some(targets) = object.get("targets").and_then(Value::as_array) {
            for target in targets {
                let expr = target["expr"].as_str().expect("a target with expr");
                queries.push((format!("{DASHBOARD} panel `{title}`"), expr.to_owned()));
            }
        }
        // A variable's `label_values(<selector>, <label>)`: the selector is PromQL.
        if let Some(definition) = object.get("definition").and_then(Value::as_str)
            && let Some(inner) = definition.strip_prefix("label_values(").and_then(|rest| rest.rsplit_once(','))
        {
            queries.push((format!("{DASHBOARD} variable `{}`", object["name"]), inner.0.to_owned()));
        }
    });
    for alert in rules(&prometheus_rule()) {
        queries.push((format!("{RULES} alert {}", alert["alert"]), alert["expr"].as_str().expect("expr").to_owned()));
    }
    queries
}

async fn scrape(address: SocketAddr) -> String {
    reqwest::get(format!("http://{address}/metrics"))
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("GET /metrics")
        .text()
        .await
        .expect("the /metrics body")
}

#[tokio::test]
async fn every_metric_in_the_dashboard_and_the_alerts_is_on_a_running_controllers_metrics() {
    let test = "every_metric_in_the_dashboard_and_the_alerts_is_on_a_running_controllers_metrics";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // Reconciles, a fetch, applies and writes, readiness: the families fill in.
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;
    // A webhook delivery for no registration's path: the receiver's families fill in too.
    let hook = format!("http://{}/hook/{}", logged_webhook_address(log), "0".repeat(64));
    let answer = reqwest::Client::new().post(&hook).body("{}").send().await.expect("POST to the receiver");
    assert_eq!(answer.status(), reqwest::StatusCode::NOT_FOUND);

    let page = scrape(logged_metrics_address(log)).await;
    let exposed = promql::exposed_names(&page);
    let queries = queries();
    let mut used = BTreeSet::new();
    let mut missing = Vec::new();
    for (place, query) in &queries {
        for name in promql::metric_names(query) {
            if !exposed.contains_key(&name) {
                missing.push(format!("{name} ({place}: {query})"));
            }
            used.insert(name);
        }
    }
    assert!(missing.is_empty(), "metrics nobody exposes:\n{}\n--- /metrics:\n{page}", missing.join("\n"));
    assert!(used.len() >= 15, "only {} metric names found in {} queries: {used:?}", used.len(), queries.len());
    let without_samples: Vec<&String> = used.iter().filter(|name| exposed.get(*name) == Some(&false)).collect();
    println!(
        "{} metric names in {} queries, all on /metrics; announced (HELP/TYPE) with no sample yet: {without_samples:?}",
        used.len(),
        queries.len()
    );
}

/// The value of the series `series` (name and labels as `/metrics` writes them), if present.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Scrapes until `series` has `value` (`None`: is absent). The gauge is set right after the
/// status write the caller has already seen, with nothing to await in between: a short poll.
async fn series_until(address: SocketAddr, series: &str, value: Option<f64>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = scrape(address).await;
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

    // Ready: 1 for both kinds.
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;
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
