//! `cdtarget render` and `validate` of a Git URL: the same output as for the directory.

use std::path::Path;
use std::process::Command;

use super::common::{self, GitDaemon, HttpGit, KeyKind, Sshd, Upstream};

const POLICY: &str = "examples/platform/policy.yaml";

fn cdtarget(args: &[&str]) -> std::process::Output {
    super::cdtarget_cli(args, &[])
}

/// The example tenant repository pushed under `tenants/payments/` of a new upstream repo.
fn pushed_example(upstream: &Upstream) -> common::UpstreamRepo {
    let repo = upstream.create("tenant.git");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tenant-repo");
    let mut files = Vec::new();
    collect(&example, &example, &mut files);
    let borrowed: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (p.as_str(), c.as_slice())).collect();
    repo.commit_and_push(&borrowed, "example");
    repo
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(root, &path, files);
        } else {
            let relative = path.strip_prefix(root).unwrap().to_string_lossy();
            files.push((format!("tenants/payments/{relative}"), std::fs::read(&path).unwrap()));
        }
    }
}

fn render_dir() -> Vec<u8> {
    let out = cdtarget(&["render", "examples/tenant-repo", "--policy", POLICY, "-n", "team-payments"]);
    assert!(out.status.success());
    out.stdout
}

#[test]
fn render_of_a_git_url_is_byte_identical_to_the_directory() {
    let upstream = Upstream::new();
    pushed_example(&upstream);
    let daemon = GitDaemon::start(&upstream.root());
    let url = daemon.url("tenant.git");
    let out = cdtarget(&["render", &url, "--path", "tenants/payments", "--policy", POLICY, "-n", "team-payments"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, render_dir());
}

#[test]
fn render_over_ssh_and_https_with_credentials_from_files() {
    let upstream = Upstream::new();
    let repo = pushed_example(&upstream);
    let scratch = common::test_dir();

    let token_file = scratch.path().join("token");
    std::fs::write(&token_file, "glpat-cli-token\n").unwrap();
    let http = HttpGit::start_with_token(&upstream.root(), "glpat-cli-token");
    let url = http.url("tenant.git");
    let args = ["render", &url, "--path", "tenants/payments", "--token-file", token_file.to_str().unwrap()];
    let out = cdtarget(&[&args[..], &["--policy", POLICY, "-n", "team-payments"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, render_dir());

    let Some(sshd) = common::skip_or_fail("render_over_ssh", Sshd::start()) else { return };
    let key = sshd.client_key(KeyKind::Ed25519);
    let url = sshd.url(repo.bare_path());
    let known_hosts = sshd.known_hosts_file();
    let out = cdtarget(&[
        "render",
        &url,
        "--path",
        "tenants/payments",
        "--ssh-key",
        key.path.to_str().unwrap(),
        "--known-hosts",
        known_hosts.to_str().unwrap(),
        "--policy",
        POLICY,
        "-n",
        "team-payments",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, render_dir());
}

#[test]
fn a_missing_ref_fails_naming_the_ref_and_prints_nothing() {
    let upstream = Upstream::new();
    pushed_example(&upstream);
    let daemon = GitDaemon::start(&upstream.root());
    let out = cdtarget(&["render", &daemon.url("tenant.git"), "--ref", "release-9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("RefNotFound: branch `release-9` does not exist"), "{stderr}");
}

#[test]
fn validate_accepts_a_git_url_and_a_tag() {
    let upstream = Upstream::new();
    let repo = pushed_example(&upstream);
    repo.tag("v1.0.0");
    let daemon = GitDaemon::start(&upstream.root());
    let url = daemon.url("tenant.git");
    let out = cdtarget(&["validate", &url, "--ref", "tags/v1.0.0", "--path", "tenants/payments", "--policy", POLICY]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "valid: 5 documents, 4 CDTargets\n");
}

#[test]
fn progress_goes_to_stderr_only_when_it_is_a_terminal() {
    let upstream = Upstream::new();
    let repo = pushed_example(&upstream);
    repo.commit_large_random(512 * 1024);
    repo.push("main");
    let daemon = GitDaemon::start(&upstream.root());
    let url = daemon.url("tenant.git");

    // Not a terminal: nothing but the problems (none here) on stderr.
    let piped = cdtarget(&["validate", &url, "--path", "tenants/payments", "--policy", POLICY]);
    assert!(piped.status.success());
    assert!(piped.stderr.is_empty(), "{}", String::from_utf8_lossy(&piped.stderr));

    // Under a pseudo-terminal (util-linux `script`), a progress line appears.
    if common::process::find_on_path("script").is_none() {
        eprintln!("SKIP progress_goes_to_stderr_only_when_it_is_a_terminal: `script` (util-linux) is not installed");
        return;
    }
    let command =
        format!("{} validate {url} --path tenants/payments --policy {POLICY}", env!("CARGO_BIN_EXE_cdtarget"));
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("script runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Receiving objects:"), "{text}");
}

/// A CI checkout made by `git init`, with a runner's job token in the remote URL, and `files`.
fn ci_checkout(files: &[(&str, &str)]) -> common::TestDir {
    let dir = common::test_dir();
    let git = |args: &[&str]| {
        let status = Command::new("git").arg("-C").arg(dir.path()).args(args).status().expect("git runs");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["remote", "add", "origin", &format!("https://gitlab-ci-token:{JOB_TOKEN}@gitlab.example/team/app.git")]);
    for (path, text) in files {
        std::fs::write(dir.path().join(path), text).unwrap();
    }
    dir
}

const JOB_TOKEN: &str = "glcbt-64_FAKE-CI-JOB-TOKEN";

#[test]
fn render_of_a_checkout_skips_its_git_directory() {
    let checkout = ci_checkout(&[("settings.yaml", super::CONFIG_MAP)]);
    let out = cdtarget(&["render", checkout.path().to_str().unwrap(), "-n", "team-a"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("name: settings") && !stdout.contains(JOB_TOKEN), "{stdout}");
}

#[test]
fn render_of_a_checkout_whose_build_reads_git_config_fails_located_and_never_shows_the_token() {
    let generator = "configMapGenerator:\n- name: leak\n  files:\n  - config=.git/config\n  - linked\n";
    let checkout = ci_checkout(&[("kustomization.yaml", generator)]);
    std::os::unix::fs::symlink(".GIT/../.git/config", checkout.path().join("linked")).unwrap();
    let out = cdtarget(&["render", checkout.path().to_str().unwrap(), "-n", "team-a"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing is rendered");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains(JOB_TOKEN), "{stderr}");
    for field in ["configMapGenerator[0].files[0]", "configMapGenerator[0].files[1]"] {
        let line = stderr.lines().find(|l| l.contains(field)).unwrap_or_else(|| panic!("no {field}: {stderr}"));
        assert!(line.starts_with("kustomization.yaml") && line.contains("outside `.git`"), "{line}");
    }
}
