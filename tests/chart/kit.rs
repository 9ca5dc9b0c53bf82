//! What the chart tests share: `helm` and `kubectl kustomize` as commands, rendered objects as
//! JSON values, and the comparison of two renderings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::go_build::GoBuild;
use crate::common::process::find_on_path;
use crate::common::{HarnessError, skip_or_fail, test_dir};

/// The chart, relative to the repository root (where every command runs).
pub const CHART: &str = "charts/cdtarget";

/// The release name and namespace the drift tests render with: the names `deploy/` uses.
pub const RELEASE: &str = "cdtarget";
/// See [`RELEASE`].
pub const NAMESPACE: &str = "cdtarget-system";

/// The labels Helm's conventions add and `deploy/` does not carry: the only difference the drift
/// tests allow (removed from the chart's objects before comparing).
pub const HELM_LABELS: [&str; 4] =
    ["helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"];

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `helm`, built from `hack/tools/helm` on first use, run with a scratch directory of its own for
/// its cache, configuration and data (nothing under `$HOME`), without `KUBECONFIG`.
pub struct Helm {
    binary: PathBuf,
}

impl Helm {
    /// The binary, or `None` after a SKIP line (no Go) when not under `CI`.
    pub fn get(test: &str) -> Option<Helm> {
        if find_on_path("kubectl").is_none() {
            skip_or_fail::<()>(test, Err(HarnessError::Unavailable("kubectl is not installed".into())))?;
        }
        let build = GoBuild::tool("helm", "hack/tools/helm", "helm.sh/helm/v3/cmd/helm");
        let binary = skip_or_fail(test, build.binary())?;
        Some(Helm { binary })
    }

    /// `helm args...` from the repository root.
    pub fn run(&self, args: &[&str]) -> Output {
        let home = test_dir();
        Command::new(&self.binary)
            .args(args)
            .current_dir(root())
            .env_remove("KUBECONFIG")
            .env("HELM_CACHE_HOME", home.path().join("cache"))
            .env("HELM_CONFIG_HOME", home.path().join("config"))
            .env("HELM_DATA_HOME", home.path().join("data"))
            .output()
            .expect("run helm")
    }

    /// `helm args...`, which must succeed: its stdout.
    pub fn success(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(output.status.success(), "helm {} failed ({}):\n{}", args.join(" "), output.status, text(&output));
        String::from_utf8(output.stdout).expect("UTF-8 output")
    }

    /// `helm args...`, which must fail: its stderr.
    pub fn failure(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(!output.status.success(), "helm {} succeeded:\n{}", args.join(" "), text(&output));
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    /// `helm template` of the chart as release [`RELEASE`] in [`NAMESPACE`], CRDs included, with
    /// `extra` arguments (`-f`, `--set`): the objects.
    pub fn template(&self, extra: &[&str]) -> Vec<Value> {
        let args = [&["template", RELEASE, CHART, "--namespace", NAMESPACE, "--include-crds"][..], extra].concat();
        documents(&self.success(&args))
    }
}

/// stdout and stderr of a command, for failure messages.
pub fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// `kubectl kustomize <dir>` (relative to the repository root): the objects.
pub fn kustomize(dir: &str) -> Vec<Value> {
    let output = Command::new("kubectl")
        .args(["kustomize", dir])
        .current_dir(root())
        .env_remove("KUBECONFIG")
        .output()
        .expect("run kubectl kustomize");
    assert!(output.status.success(), "kubectl kustomize {dir} failed:\n{}", text(&output));
    documents(&String::from_utf8(output.stdout).expect("UTF-8 output"))
}

/// The objects of a multi-document YAML stream (empty documents left out).
pub fn documents(yaml: &str) -> Vec<Value> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("rendered YAML parses");
    documents.into_iter().filter(|document| !document.is_null()).collect()
}

/// `Kind group/namespace/name` of an object: what identifies it in a cluster.
pub fn key(object: &Value) -> String {
    let group = object["apiVersion"].as_str().unwrap_or_default().rsplit_once('/').map(|(group, _)| group);
    format!(
        "{} {}/{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        group.unwrap_or("core"),
        object["metadata"]["namespace"].as_str().unwrap_or("-"),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The objects of `kind` (and their names).
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|object| object["kind"] == kind).collect()
}

/// The one object of `kind` named `name`.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> =
        objects.iter().filter(|object| object["kind"] == kind && object["metadata"]["name"] == name).collect();
    assert_eq!(found.len(), 1, "one {kind} {name} expected among {:?}", objects.iter().map(key).collect::<Vec<_>>());
    found[0]
}

/// The environment of the `controller` container of a Deployment, as `name -> value` (a
/// `valueFrom` as its JSON).
pub fn environment(deployment: &Value) -> Vec<(String, String)> {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "controller", "{deployment}");
    container["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|var| {
                    let value =
                        var["value"].as_str().map(str::to_owned).unwrap_or_else(|| var["valueFrom"].to_string());
                    (var["name"].as_str().unwrap_or_default().to_owned(), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The value of the environment variable `name` of a Deployment's controller.
pub fn env_value(deployment: &Value, name: &str) -> Option<String> {
    environment(deployment).into_iter().find(|(var, _)| var == name).map(|(_, value)| value)
}

/// The chart's objects without [`HELM_LABELS`], keyed by [`key`].
pub fn without_helm_labels(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|mut object| {
            if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
                for label in HELM_LABELS {
                    labels.remove(label);
                }
            }
            (key(&object), object)
        })
        .collect()
}

/// Where two values differ, as `path: left | right` lines (at most one line per differing leaf).
pub fn differences(left: &Value, right: &Value) -> Vec<String> {
    let mut found = Vec::new();
    diff_into("", left, right, &mut found);
    found
}

fn diff_into(path: &str, left: &Value, right: &Value, found: &mut Vec<String>) {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            let keys: std::collections::BTreeSet<&String> = l.keys().chain(r.keys()).collect();
            for k in keys {
                let null = Value::Null;
                diff_into(&format!("{path}/{k}"), l.get(k).unwrap_or(&null), r.get(k).unwrap_or(&null), found);
            }
        }
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
            for (i, (l, r)) in l.iter().zip(r).enumerate() {
                diff_into(&format!("{path}/{i}"), l, r, found);
            }
        }
        _ if left != right => found.push(format!("{path}: {left} | {right}")),
        _ => {}
    }
}

/// Asserts that `chart` (Helm's labels removed) holds exactly the objects of `kustomize` but its
/// Namespace object (the chart installs into the release namespace, which it does not create),
/// each equal field for field; the message lists every difference.
pub fn assert_no_drift(chart: Vec<Value>, kustomize: Vec<Value>, what: &str) {
    let chart = without_helm_labels(chart);
    let mut kustomize: BTreeMap<String, Value> = kustomize.into_iter().map(|object| (key(&object), object)).collect();
    let namespace = kustomize.remove(&format!("Namespace core/-/{NAMESPACE}"));
    assert!(namespace.is_some(), "{what}: kustomize rendered no Namespace {NAMESPACE}");
    let mut problems = Vec::new();
    for name in chart.keys().filter(|name| !kustomize.contains_key(*name)) {
        problems.push(format!("only the chart renders {name}"));
    }
    for name in kustomize.keys().filter(|name| !chart.contains_key(*name)) {
        problems.push(format!("only kustomize renders {name}"));
    }
    for (name, object) in &chart {
        if let Some(other) = kustomize.get(name) {
            problems.extend(
                differences(object, other).into_iter().map(|line| format!("{name}: {line} (chart | kustomize)")),
            );
        }
    }
    assert!(problems.is_empty(), "{what}: the chart and deploy/ differ:\n{}", problems.join("\n"));
    assert!(chart.len() >= 8, "{what}: too few objects to be an install: {:?}", chart.keys().collect::<Vec<_>>());
}
