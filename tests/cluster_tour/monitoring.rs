//! The monitoring kit: the alert rules (`deploy/monitoring/prometheusrule.yaml`) checked and unit
//! tested by the real `promtool` (built from `hack/tools/promtool`), and the Grafana dashboard and
//! the alerts using only metrics the tour's controller exposes. That controller runs with the
//! GitLab settings, so the GitLab family has samples too: prometheus-client 0.25 leaves a family
//! with no sample out of `/metrics` altogether (no HELP/TYPE lines either), so a family is only
//! there once something was counted in it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use cdtarget::api::CDTarget;
use serde_json::Value;

use crate::common::cluster::{CDTARGET, CONFIG_MAP, logged_metrics_address, ready, scrape_metrics};
use crate::common::go_build::GoBuild;
use crate::common::skip_or_fail;
use crate::promql;
use crate::support::{self, GITLAB_STEPS, onboard_gitlab};

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
        cold_estimate: "about 6 minutes idle (593 s of user CPU), far longer under load".into(),
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

#[tokio::test]
async fn every_metric_in_the_dashboard_and_the_alerts_is_on_a_running_controllers_metrics() {
    let test = "every_metric_in_the_dashboard_and_the_alerts_is_on_a_running_controllers_metrics";
    let Some(cluster) = support::cluster(test) else { return };
    let controller = support::controller(cluster).await;
    // A registration with spec.gitlab whose repository holds a CDTarget: reconciles of both kinds,
    // a fetch, applies and writes, readiness and GitLab calls; the families fill in.
    let registered = {
        let _gitlab_up = GITLAB_STEPS.lock().await;
        onboard_gitlab(cluster, controller, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)])
            .await
    };
    let tenant = &registered.tenant;
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, &controller.log).await;
    // A webhook delivery for no registration's path: the receiver's families fill in too.
    let hook = format!("{}/hook/{}", controller.external_url, "0".repeat(64));
    let answer = reqwest::Client::new().post(&hook).body("{}").send().await.expect("POST to the receiver");
    assert_eq!(answer.status(), reqwest::StatusCode::NOT_FOUND);

    let page = scrape_metrics(logged_metrics_address(&controller.log)).await;
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
        "{} metric names in {} queries, all on /metrics; announced (HELP/TYPE) with no sample: {without_samples:?}",
        used.len(),
        queries.len()
    );
}
