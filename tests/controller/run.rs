//! `cdtarget controller` as a process: it refuses to start without a cluster, and documents its
//! flags.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A kubeconfig naming a server where nothing listens (port 1 on loopback).
const UNREACHABLE_KUBECONFIG: &str = "\
apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: nobody
  user:
    token: not-a-real-token
contexts:
- name: nowhere
  context:
    cluster: nowhere
    user: nobody
current-context: nowhere
";

fn controller(args: &[&str], kubeconfig: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cdtarget"))
        .arg("controller")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        // No in-cluster configuration either, whatever machine runs the test.
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .expect("the binary runs")
}

#[test]
fn controller_without_a_reachable_cluster_exits_at_once_naming_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, UNREACHABLE_KUBECONFIG).unwrap();
    let cache = dir.path().join("cache");
    let started = Instant::now();
    let output = controller(&["--metrics-address", "127.0.0.1:0", "--cache-dir", cache.to_str().unwrap()], &kubeconfig);
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "exit status {:?}\n{stderr}", output.status);
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    assert!(stderr.contains("Kubernetes API server"), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    assert!(stderr.contains("not reachable"), "{stderr}");
}

#[test]
fn controller_without_any_kubeconfig_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let output = controller(&["--metrics-address", "127.0.0.1:0"], &dir.path().join("missing"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("cdtarget controller:"), "{stderr}");
}

#[test]
fn controller_help_explains_every_flag_with_its_environment_variable() {
    let output = Command::new(env!("CARGO_BIN_EXE_cdtarget")).args(["controller", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for (flag, env) in [
        ("--namespace", "POD_NAMESPACE"),
        ("--policy-configmap", "CDTARGET_POLICY_CONFIGMAP"),
        ("--cache-dir", "CDTARGET_CACHE_DIR"),
        ("--fetch-concurrency", "CDTARGET_FETCH_CONCURRENCY"),
        ("--reconcile-concurrency", "CDTARGET_RECONCILE_CONCURRENCY"),
        ("--git-timeout", "CDTARGET_GIT_TIMEOUT"),
        ("--git-max-fetch-bytes", "CDTARGET_GIT_MAX_FETCH_BYTES"),
        ("--git-max-snapshot-bytes", "CDTARGET_GIT_MAX_SNAPSHOT_BYTES"),
        ("--git-max-cache-bytes", "CDTARGET_GIT_MAX_CACHE_BYTES"),
        ("--shard-selector", "CDTARGET_SHARD_SELECTOR"),
        ("--leader-elect", "CDTARGET_LEADER_ELECT"),
        ("--lease-name", "CDTARGET_LEASE_NAME"),
        ("--identity", "POD_NAME"),
        ("--metrics-address", "CDTARGET_METRICS_ADDRESS"),
        ("--log-format", "CDTARGET_LOG_FORMAT"),
        ("--log-level", "CDTARGET_LOG_LEVEL"),
    ] {
        assert!(help.contains(flag), "{flag} missing:\n{help}");
        assert!(help.contains(&format!("env: {env}")), "{env} missing:\n{help}");
    }
    assert!(help.contains("[default: :8080]"), "{help}");
    assert!(help.contains("[default: cdtarget-policy]"), "{help}");
}
