//! The `cdtarget` binary itself: exit codes, stdout/stderr discipline, output formats.

use std::path::Path;
use std::process::{Command, Output};

use super::golden::example_output;
use super::support::{example_repo, project_dir};

fn cdtarget(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cdtarget")).args(args).current_dir(project_dir()).output().expect("binary runs")
}

const POLICY: &str = "examples/platform/policy.yaml";

/// A copy of the example repository with one broken file added.
fn broken_repo(dir: &Path) {
    for entry in walk(&example_repo()) {
        let relative = entry.strip_prefix(example_repo()).unwrap();
        let target = dir.join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&entry, target).unwrap();
    }
    let broken = "apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: broken\nspec:\n  agentImage: ghcr.io/acme/a:1\n  tokenRefs: azp-token\n  ip: [\"10.0.0.0/8\"]\n  config: {url: https://dev.azure.com/acme, poolName: p}\n";
    std::fs::write(dir.join("zz-broken.yaml"), broken).unwrap();
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { files.extend(walk(&path)) } else { files.push(path) }
    }
    files
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cdtarget-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn render_prints_the_apply_set_and_exits_zero() {
    let out = cdtarget(&["render", "examples/tenant-repo", "--policy", POLICY, "--namespace", "team-payments"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), example_output());
    assert!(out.stderr.is_empty());
}

#[test]
fn render_of_an_invalid_repo_prints_nothing_and_every_problem() {
    let dir = temp_dir("render-broken");
    broken_repo(&dir);
    let out = cdtarget(&["render", dir.to_str().unwrap(), "--policy", POLICY]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "render is all or nothing");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines
            .iter()
            .any(|l| l
                .starts_with("zz-broken.yaml:1: spec.tokenRefs: unknown field `tokenRefs` (did you mean `tokenRef`?)")),
        "{stderr}"
    );
    assert!(lines.iter().any(|l| l.starts_with("zz-broken.yaml:1: spec.ip[0]: `10.0.0.0/8` is broader")), "{stderr}");
    assert!(lines.iter().any(|l| l.starts_with("zz-broken.yaml:1: spec.tokenRef: is required")), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn validate_reports_one_line_per_problem_and_json_on_request() {
    let dir = temp_dir("validate");
    broken_repo(&dir);
    let text = cdtarget(&["validate", dir.to_str().unwrap(), "--policy", POLICY]);
    assert_eq!(text.status.code(), Some(1));
    assert_eq!(String::from_utf8(text.stdout).unwrap().lines().count(), 3);

    let json = cdtarget(&["validate", dir.to_str().unwrap(), "--policy", POLICY, "--output", "json"]);
    assert_eq!(json.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["valid"], false);
    let problem = &report["problems"][0];
    assert_eq!(problem["file"], "zz-broken.yaml");
    assert_eq!(problem["document"], 1);
    assert_eq!(problem["line"], 1);
    assert!(problem["field"].as_str().unwrap().starts_with("spec."));
    std::fs::remove_dir_all(dir).unwrap();

    let ok = cdtarget(&["validate", "examples/tenant-repo", "--policy", POLICY]);
    assert!(ok.status.success());
    assert_eq!(String::from_utf8(ok.stdout).unwrap(), "valid: 5 documents, 4 CDTargets\n");
}

#[test]
fn a_bad_policy_file_is_reported_with_its_field() {
    let dir = temp_dir("policy");
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, "egress:\n  ports: [{port: 0}]\n").unwrap();
    let out = cdtarget(&["render", "examples/tenant-repo", "--policy", policy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("policy.yaml:1: egress.ports[0].port: 0 is not a port; expected 1–65535"), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn on_keda_2_20_validate_and_render_warn_of_busy_agents_at_each_deployment_mode_cdtarget_and_still_succeed() {
    let validate = cdtarget(&["validate", "examples/tenant-repo", "--policy", POLICY, "--keda-version", "2.20"]);
    assert_eq!(validate.status.code(), Some(0), "a risk is not a problem");
    assert_eq!(String::from_utf8(validate.stdout).unwrap(), "valid: 5 documents, 4 CDTargets\n");
    let stderr = String::from_utf8(validate.stderr).unwrap();
    let warned: Vec<&str> = stderr.lines().map(|l| l.split(": spec.mode: ").next().unwrap()).collect();
    assert_eq!(
        warned,
        [
            "warning: agents/deploy-agents.yaml:1",
            "warning: agents/ipv6-agents.yaml:1",
            "warning: agents/ipv6-agents.yaml:2",
        ],
        "the Deployment-mode CDTargets, not build-jobs: {stderr}"
    );
    assert!(stderr.contains("kedacore/keda#8185") && stderr.contains("use spec.mode: Job, or KEDA 2.21.0 or later"));

    let render = cdtarget(&["render", "examples/tenant-repo", "--policy", POLICY, "--keda-version", "v2.20.0"]);
    assert_eq!(render.status.code(), Some(0));
    assert_eq!(String::from_utf8(render.stderr).unwrap(), stderr, "render warns as validate does");
    assert!(String::from_utf8(render.stdout).unwrap().contains("strategy: accurate"));

    let json =
        cdtarget(&["validate", "examples/tenant-repo", "--policy", POLICY, "--keda-version", "2.20.0", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!((report["valid"].as_bool(), report["warnings"].as_array().map(Vec::len)), (Some(true), Some(3)));
    assert_eq!(report["warnings"][0]["field"], "spec.mode");
}

#[test]
fn on_the_newest_keda_nothing_is_warned_of() {
    for keda in [&[][..], &["--keda-version", "2.21.0"][..]] {
        let args = [&["validate", "examples/tenant-repo", "--policy", POLICY][..], keda].concat();
        let out = cdtarget(&args);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(String::from_utf8(out.stderr).unwrap(), "", "{keda:?}");
    }
}

#[test]
fn a_keda_version_that_is_not_a_supported_release_is_a_usage_error_saying_what_is_accepted() {
    for (version, expected) in [
        ("latest", "expected e.g. `2.21.0`"),
        ("2.19.0", "older than the oldest release cdtarget renders for (2.20.0)"),
    ] {
        let out = cdtarget(&["validate", "examples/tenant-repo", "--policy", POLICY, "--keda-version", version]);
        assert_eq!(out.status.code(), Some(2), "{version}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("--keda-version") && stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn unknown_flags_are_usage_errors() {
    assert_eq!(cdtarget(&["render", "--bogus"]).status.code(), Some(2));
}

#[test]
fn crds_command_prints_the_committed_crds() {
    let out = cdtarget(&["crds"]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    for file in ["cdtarget.io_cdtargets.yaml", "cdtarget.io_tenantrepositories.yaml", "cdtarget.io_syncstatuses.yaml"] {
        let committed = std::fs::read_to_string(project_dir().join("deploy/crds").join(file)).unwrap();
        assert!(stdout.contains(&committed), "{file} is not part of `cdtarget crds`");
    }
}

#[test]
fn webhook_path_prints_the_status_path_from_a_token_file_or_stdin() {
    use std::io::Write as _;
    use std::process::Stdio;

    let expected = cdtarget::api::tenant_repository::webhook_path("s3cret", "team-a", "cdtarget-system");
    let dir = temp_dir("webhook-path");
    let token = dir.join("token");
    // As `echo s3cret > token` writes it: the trailing newline is not part of the token.
    std::fs::write(&token, "s3cret\n").unwrap();
    let args = ["webhook-path", "--name", "team-a", "--namespace", "cdtarget-system", "--token-file"];
    let out = cdtarget(&[&args[..], &[token.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{expected}\n"));
    assert!(out.stderr.is_empty());

    let with_url = [&args[..], &[token.to_str().unwrap(), "--base-url", "https://hooks.example.com/"]].concat();
    let out = cdtarget(&with_url);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("https://hooks.example.com{expected}\n"));

    let mut child = Command::new(env!("CARGO_BIN_EXE_cdtarget"))
        .args([&args[..], &["-"]].concat())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    child.stdin.take().unwrap().write_all(b"s3cret").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{expected}\n"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn webhook_path_reports_a_missing_or_empty_token_file_and_usage_errors() {
    let dir = temp_dir("webhook-path-bad");
    let empty = dir.join("empty");
    std::fs::write(&empty, "").unwrap();
    let base = ["webhook-path", "--name", "a", "--namespace", "b", "--token-file"];
    let out = cdtarget(&[&base[..], &[empty.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the token is empty"), "{:?}", out.stderr);
    let missing = dir.join("missing");
    let out = cdtarget(&[&base[..], &[missing.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"), "the file is named");
    assert_eq!(cdtarget(&["webhook-path", "--name", "a"]).status.code(), Some(2), "missing flags are usage errors");
    std::fs::remove_dir_all(dir).unwrap();
}
