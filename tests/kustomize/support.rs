//! Building a case directory with `kubectl kustomize` and with our engine.

use std::path::Path;
use std::process::Command;

use cdtarget::kustomize::patch::Patches;
use cdtarget::problem::Problem;
use serde_json::Value;

use crate::common::process::find_on_path;
use crate::common::{HarnessError, skip_or_fail};

/// Whether kubectl can be run; prints SKIP (or fails under CI) when not.
pub fn kubectl_available(test: &str) -> bool {
    let found = find_on_path("kubectl").ok_or_else(|| HarnessError::Unavailable("kubectl is not installed".into()));
    skip_or_fail(test, found).is_some()
}

/// The objects `kubectl kustomize dir` prints, or what it said on failure.
pub fn kustomize(dir: &Path) -> Result<Vec<Value>, String> {
    let output =
        Command::new("kubectl").arg("kustomize").arg(dir).env_remove("KUBECONFIG").output().expect("run kubectl");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8(output.stdout).expect("kubectl prints UTF-8");
    Ok(cdtarget::yaml::parse_documents(&text).expect("kubectl prints YAML").into_iter().map(|d| d.value).collect())
}

/// The objects our engine builds from `dir`: the `resources` files, in order, patched by the
/// kustomization's patch fields (the cases use nothing else).
pub fn ours(dir: &Path) -> Result<Vec<Value>, Vec<Problem>> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).map_err(|e| e.to_string());
    let kustomization = cdtarget::yaml::parse_one(&read("kustomization.yaml").expect("a kustomization.yaml"))
        .expect("the kustomization is YAML");
    let mut objects = Vec::new();
    for resource in kustomization.get("resources").and_then(Value::as_array).into_iter().flatten() {
        let name = resource.as_str().expect("resources are file names");
        let documents =
            cdtarget::yaml::parse_documents(&read(name).expect("a resource file")).expect("resources are YAML");
        objects.extend(documents.into_iter().map(|d| d.value));
    }
    let patches = Patches::read(&kustomization, &mut |name: &str| read(name))?;
    patches.apply(&mut objects).map_err(|p| vec![p])?;
    Ok(objects)
}

/// The objects sorted by apiVersion, kind, namespace and name, so outputs compare regardless of
/// kustomize's output order.
pub fn sorted(mut objects: Vec<Value>) -> Vec<Value> {
    let key = |o: &Value| {
        ["/apiVersion", "/kind", "/metadata/namespace", "/metadata/name"]
            .map(|p| o.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned())
    };
    objects.sort_by_key(key);
    objects
}

/// Pretty JSON of a list of objects, for assertion messages.
pub fn pretty(objects: &[Value]) -> String {
    serde_json::to_string_pretty(objects).expect("JSON")
}

/// Asserts both builds agree object by object.
pub fn assert_same(case: &str, expected: Vec<Value>, actual: Vec<Value>) {
    let (expected, actual) = (sorted(expected), sorted(actual));
    assert_eq!(
        expected.len(),
        actual.len(),
        "{case}: kubectl kustomize printed {} objects, ours {}\nkustomize: {}\nours: {}",
        expected.len(),
        actual.len(),
        pretty(&expected),
        pretty(&actual)
    );
    for (e, a) in expected.iter().zip(&actual) {
        assert_eq!(
            e,
            a,
            "{case}: objects differ\nkustomize: {}\nours: {}",
            pretty(std::slice::from_ref(e)),
            pretty(std::slice::from_ref(a))
        );
    }
}
