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

/// Builds the case `name` (its directory under `cases`, `_` read as `-`) with `kubectl kustomize`
/// and with `ours`, and checks what its `expect` file says:
/// - no `expect`: both builds succeed and give the same objects;
/// - `error: TEXT`: both refuse, ours with a problem saying TEXT;
/// - `refused: TEXT`: kustomize builds, ours refuses on purpose with TEXT;
/// - `differs: POINTER`: both build, the objects differ at POINTER and nowhere else.
pub fn check_case(name: &str, cases: &Path, ours: impl FnOnce(&Path) -> Result<Vec<Value>, Vec<Problem>>) {
    if !kubectl_available(name) {
        return;
    }
    let dir = cases.join(name.replace('_', "-"));
    assert!(dir.join("kustomization.yaml").is_file(), "no case at {}", dir.display());
    let expect = std::fs::read_to_string(dir.join("expect")).unwrap_or_default();
    let (kustomized, ours) = (kustomize(&dir), ours(&dir));
    let problems = |found: &[Problem]| found.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
    if let Some(text) = expect.trim().strip_prefix("error: ") {
        let said = kustomized.expect_err("kubectl kustomize refuses this case");
        let found = ours.expect_err(&format!("ours refuses this case (kustomize: {said})"));
        assert!(
            problems(&found).contains(text),
            "{name}: expected a problem saying {text:?}, got:\n{}",
            problems(&found)
        );
        println!("{name}: kustomize: {}\nours: {}", said.trim(), problems(&found));
    } else if let Some(text) = expect.trim().strip_prefix("refused: ") {
        let built = kustomized.expect("kubectl kustomize builds this case");
        let found = ours.expect_err("ours refuses this case");
        assert!(
            problems(&found).contains(text),
            "{name}: expected a problem saying {text:?}, got:\n{}",
            problems(&found)
        );
        println!("{name}: kustomize built:\n{}\nours: {}", pretty(&built), problems(&found));
    } else if let Some(pointer) = expect.trim().strip_prefix("differs: ") {
        let mut built = sorted(kustomized.unwrap_or_else(|said| panic!("{name}: kubectl kustomize failed: {said}")));
        let mut found = sorted(ours.unwrap_or_else(|found| panic!("{name}: ours failed:\n{}", problems(&found))));
        let theirs: Vec<_> = built.iter().map(|o| o.pointer(pointer).cloned()).collect();
        let mine: Vec<_> = found.iter().map(|o| o.pointer(pointer).cloned()).collect();
        assert_ne!(theirs, mine, "{name}: expected the builds to differ at {pointer}");
        println!("{name}: at {pointer} kustomize gives {theirs:?}, ours {mine:?}");
        for object in built.iter_mut().chain(found.iter_mut()) {
            remove(object, pointer);
        }
        assert_same(name, built, found);
    } else {
        assert!(expect.trim().is_empty(), "{name}: unknown expect {expect:?}");
        let built = kustomized.unwrap_or_else(|said| panic!("{name}: kubectl kustomize failed: {said}"));
        let found = ours.unwrap_or_else(|found| panic!("{name}: ours failed:\n{}", problems(&found)));
        assert_same(name, built, found);
    }
}

/// Removes the field at a JSON pointer (without escapes).
pub fn remove(object: &mut Value, pointer: &str) {
    let (parent, last) = pointer.rsplit_once('/').expect("a pointer below the root");
    if let Some(parent) = object.pointer_mut(parent).and_then(Value::as_object_mut) {
        parent.remove(last);
    }
}
