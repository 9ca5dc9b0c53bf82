//! The environment `deploy/deployment.yaml` gives the controller container, so that a bench runs
//! the controller process as a cluster install does (`MALLOC_ARENA_MAX=2`, the Git budgets, ...).

use std::env;
use std::fs;
use std::path::Path;

/// The literal environment variables of the controller container in `deploy/deployment.yaml`
/// (`HOME` aside: it points at the pod's /tmp volume).
pub fn deployment_env() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/deployment.yaml");
    let text = fs::read_to_string(&path).expect("read deploy/deployment.yaml");
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("parse deploy/deployment.yaml");
    let deployment =
        documents.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment in deploy/deployment.yaml");
    let env = deployment.pointer("/spec/template/spec/containers/0/env").and_then(|e| e.as_array());
    env.into_iter()
        .flatten()
        .filter_map(|entry| Some((entry["name"].as_str()?.to_owned(), entry["value"].as_str()?.to_owned())))
        .filter(|(name, _)| name != "HOME")
        .collect()
}

/// `variables` as `NAME=value` words, for the bench's output.
pub fn describe(variables: &[(String, String)]) -> String {
    variables.iter().map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join(" ")
}

/// Sets `variables` in this process's environment, which the controller processes it starts
/// inherit. Call it first thing in `main`.
#[allow(unsafe_code)] // `set_var` is unsafe in edition 2024; `[lints]` denies unsafe code, src/ forbids it
pub fn set_env(variables: &[(String, String)]) {
    for (name, value) in variables {
        // SAFETY: called first thing in `main`, before this process starts any thread, so
        // nothing reads the environment concurrently.
        unsafe { env::set_var(name, value) };
    }
}
