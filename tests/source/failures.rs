//! Every failure class produced for real, each followed by a check that the previous snapshot is
//! still intact.

use std::time::{Duration, Instant};

use cdtarget::manifests::{self, Limits as TreeLimits};
use cdtarget::source::{Credentials, FailureKind, Limits, Reference, Snapshot};

use super::common::{self, HttpGit, KeyKind, Mode, Sshd, Stalling, Upstream};
use super::{CONFIG_MAP, Served, fetch, fetch_updated, limits, read, request, snapshot_dirs, ssh_credentials};

fn assert_intact(snapshot: &Snapshot) {
    assert_eq!(read(snapshot, "settings.yaml"), CONFIG_MAP, "the previous snapshot must survive the failure");
}

fn expect_failure(
    result: Result<cdtarget::source::Fetched, cdtarget::source::SourceError>,
    kind: FailureKind,
) -> String {
    match result {
        Err(e) if e.kind == kind => e.message,
        other => panic!("expected {kind:?}, got {other:?}"),
    }
}

#[test]
fn ssh_wrong_key_is_authentication_failed_and_keeps_the_snapshot() {
    let Some(sshd) = common::skip_or_fail("ssh_wrong_key", Sshd::start()) else { return };
    let (_upstream, repo) = super::tenant_repo();
    let cache = common::test_dir();
    let good = request(&sshd.url(repo.bare_path()), ssh_credentials(&sshd, &sshd.client_key(KeyKind::Ed25519)));
    let snapshot = fetch_updated(cache.path(), &good);
    repo.commit_and_push(&[("more.yaml", CONFIG_MAP)], "second");

    let wrong = request(&sshd.url(repo.bare_path()), ssh_credentials(&sshd, &sshd.an_unauthorized_key()));
    let message = expect_failure(fetch(cache.path(), &wrong, &limits()), FailureKind::AuthenticationFailed);
    assert!(!message.contains("PRIVATE KEY"), "{message}");
    assert_intact(&snapshot);
}

#[test]
fn ssh_wrong_passphrase_is_reported_as_such() {
    let Some(sshd) = common::skip_or_fail("ssh_wrong_passphrase", Sshd::start()) else { return };
    let (_upstream, repo) = super::tenant_repo();
    let mut key = sshd.client_key(KeyKind::Ed25519Passphrase);
    key.passphrase = Some("not-the-passphrase".into());
    let cache = common::test_dir();
    let request = request(&sshd.url(repo.bare_path()), ssh_credentials(&sshd, &key));
    let message = expect_failure(fetch(cache.path(), &request, &limits()), FailureKind::AuthenticationFailed);
    assert!(message.contains("wrong passphrase"), "{message}");
    assert!(!message.contains("not-the-passphrase"), "{message}");
}

#[test]
fn ssh_changed_host_key_is_refused_and_keeps_the_snapshot() {
    let Some(mut sshd) = common::skip_or_fail("ssh_changed_host_key", Sshd::start()) else { return };
    let (_upstream, repo) = super::tenant_repo();
    let key = sshd.client_key(KeyKind::Ed25519);
    let old_known_hosts = sshd.known_hosts();
    let cache = common::test_dir();
    let snapshot = fetch_updated(cache.path(), &request(&sshd.url(repo.bare_path()), ssh_credentials(&sshd, &key)));
    repo.commit_and_push(&[("more.yaml", CONFIG_MAP)], "second");

    let port = sshd.restart_with_new_host_key().unwrap();
    let credentials = Credentials::Ssh {
        private_key: key.private_key_pem.clone(),
        passphrase: None,
        // The old key, under the port now in use: a changed key, not an unknown host.
        known_hosts: old_known_hosts.replace(&format!("]:{}", old_port(&old_known_hosts)), &format!("]:{port}")),
    };
    let message = expect_failure(
        fetch(cache.path(), &request(&sshd.url(repo.bare_path()), credentials), &limits()),
        FailureKind::HostKeyMismatch,
    );
    assert!(message.contains(&sshd.host_key_fingerprint()), "names the key presented: {message}");
    assert_intact(&snapshot);
}

fn old_port(known_hosts: &str) -> String {
    known_hosts.split("]:").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap().to_owned()
}

#[test]
fn ssh_host_missing_from_known_hosts_is_refused() {
    let Some(sshd) = common::skip_or_fail("ssh_unknown_host", Sshd::start()) else { return };
    let (_upstream, repo) = super::tenant_repo();
    let key = sshd.client_key(KeyKind::Ed25519);
    let credentials = Credentials::Ssh {
        private_key: key.private_key_pem.clone(),
        passphrase: None,
        known_hosts: sshd.known_hosts().replace("127.0.0.1", "gitlab.example.com"),
    };
    let cache = common::test_dir();
    let result = fetch(cache.path(), &request(&sshd.url(repo.bare_path()), credentials), &limits());
    expect_failure(result, FailureKind::HostKeyUnknown);
}

#[test]
fn ssh_without_known_hosts_is_refused_before_connecting() {
    let cache = common::test_dir();
    let credentials = Credentials::Ssh { private_key: "key".into(), passphrase: None, known_hosts: String::new() };
    let result = fetch(cache.path(), &request("ssh://git@127.0.0.1:1/x.git", credentials), &limits());
    expect_failure(result, FailureKind::InvalidRequest);
}

#[test]
fn missing_branch_names_the_ref() {
    let mut served = Served::start();
    served.request.reference = Reference::Branch("release-2026".into());
    let message = expect_failure(served.fetch(&limits()), FailureKind::RefNotFound);
    assert!(message.contains("release-2026"), "{message}");
}

#[test]
fn deleted_branch_is_ref_not_found_and_keeps_the_snapshot() {
    let mut served = Served::start();
    served.repo.checkout("feature");
    served.repo.push("feature");
    served.request.reference = Reference::Branch("feature".into());
    let snapshot = served.fetch_updated();
    served.repo.delete_branch("feature");
    expect_failure(served.fetch(&limits()), FailureKind::RefNotFound);
    assert_intact(&snapshot);
}

#[test]
fn force_push_simply_yields_the_new_revision() {
    let served = Served::start();
    served.repo.commit_and_push(&[("more.yaml", CONFIG_MAP)], "second");
    served.fetch_updated();
    let rewritten = served.repo.force_push_rewritten_history("main");
    assert_eq!(served.fetch_updated().revision, rewritten);
}

#[test]
fn server_killed_mid_fetch_is_unreachable_and_keeps_the_snapshot() {
    let (upstream, repo) = super::tenant_repo();
    let http = HttpGit::start(&upstream.root());
    let cache = common::test_dir();
    let request = request(&http.url("tenant.git"), Credentials::None);
    let snapshot = fetch_updated(cache.path(), &request);
    repo.commit_large_random(256 * 1024);
    repo.push("main");

    http.set_mode(Mode::CloseMidBody);
    expect_failure(fetch(cache.path(), &request, &limits()), FailureKind::Unreachable);
    assert_intact(&snapshot);
    assert_eq!(snapshot_dirs(cache.path()).len(), 1, "no half-written snapshot is left behind");
    http.set_mode(Mode::Normal);
    fetch_updated(cache.path(), &request);
}

#[test]
fn stalled_servers_time_out_on_every_transport() {
    let stalling = Stalling::start();
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nunused\n-----END OPENSSH PRIVATE KEY-----\n".to_owned();
    let cases = [
        ("http", Credentials::None),
        ("git", Credentials::None),
        (
            "ssh",
            Credentials::Ssh {
                private_key: key,
                passphrase: None,
                known_hosts: format!(
                    "[127.0.0.1]:{} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
                    stalling.port()
                ),
            },
        ),
    ];
    for (scheme, credentials) in cases {
        let cache = common::test_dir();
        let started = Instant::now();
        let limits = Limits { timeout: Duration::from_secs(2), ..Limits::default() };
        let result = fetch(cache.path(), &request(&stalling.url(scheme), credentials), &limits);
        expect_failure(result, FailureKind::Timeout);
        assert!(started.elapsed() < Duration::from_secs(30), "{scheme}: the stall was cut");
    }
}

#[test]
fn server_stalling_mid_request_times_out_and_keeps_the_snapshot() {
    let (upstream, repo) = super::tenant_repo();
    let http = HttpGit::start(&upstream.root());
    let cache = common::test_dir();
    let request = request(&http.url("tenant.git"), Credentials::None);
    let snapshot = fetch_updated(cache.path(), &request);
    repo.commit_and_push(&[("more.yaml", CONFIG_MAP)], "second");
    http.set_mode(Mode::Stall);
    expect_failure(fetch(cache.path(), &request, &limits()), FailureKind::Timeout);
    assert_intact(&snapshot);
}

#[test]
fn oversized_repository_is_refused_and_keeps_the_snapshot() {
    let served = Served::start();
    let snapshot = served.fetch_updated();
    served.repo.commit_large_random(3 << 20);
    served.repo.push("main");
    let small = Limits { max_fetch_bytes: 1 << 20, ..limits() };
    let message = expect_failure(served.fetch(&small), FailureKind::TooLarge);
    assert!(message.contains("1048576"), "{message}");
    assert_intact(&snapshot);
}

#[test]
fn wrong_token_is_authentication_failed_without_looping_or_leaking() {
    let (upstream, _repo) = super::tenant_repo();
    let http = HttpGit::start_with_token(&upstream.root(), "right-token");
    let cache = common::test_dir();
    let message = expect_failure(
        fetch(cache.path(), &request(&http.url("tenant.git"), Credentials::token("wrong-token")), &limits()),
        FailureKind::AuthenticationFailed,
    );
    assert!(!message.contains("wrong-token"), "{message}");
    assert!(http.counts().total <= 6, "credential attempts are capped: {:?}", http.counts());
    let anonymous = fetch(cache.path(), &request(&http.url("tenant.git"), Credentials::None), &limits());
    expect_failure(anonymous, FailureKind::AuthenticationFailed);
}

#[test]
fn https_certificate_outside_the_ca_bundle_is_refused() {
    let (upstream, _repo) = super::tenant_repo();
    let https = HttpGit::start_tls(&upstream.root());
    let other = HttpGit::start_tls(&upstream.root());
    let cache = common::test_dir();
    let mut request = request(&https.url("tenant.git"), Credentials::None);
    request.ca_bundle = other.ca_pem().map(str::to_owned);
    expect_failure(fetch(cache.path(), &request, &limits()), FailureKind::CertificateInvalid);
    request.ca_bundle = None;
    expect_failure(fetch(cache.path(), &request, &limits()), FailureKind::CertificateInvalid);
}

#[test]
fn corrupt_cache_heals_itself_by_cloning_again() {
    let served = Served::start();
    served.fetch_updated();
    // Damage the object store and the repository's configuration.
    std::fs::remove_dir_all(served.cache.path().join("repo.git/objects")).unwrap();
    std::fs::write(served.cache.path().join("repo.git/HEAD"), "garbage").unwrap();
    let second = served.repo.commit_and_push(&[("more.yaml", CONFIG_MAP)], "second");
    assert_eq!(served.fetch_updated().revision, second);
}

#[test]
fn symlinks_are_kept_as_links_and_the_loader_refuses_those_leaving_the_tree() {
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    repo.commit(&[("settings.yaml", CONFIG_MAP)], "first");
    std::os::unix::fs::symlink("/etc/passwd", repo.work_path().join("escape.yaml")).unwrap();
    common::git(repo.work_path(), &["add", "escape.yaml"]);
    common::git(repo.work_path(), &["commit", "-q", "-m", "link"]);
    repo.push("main");
    let cache = common::test_dir();
    let snapshot = fetch_updated(cache.path(), &request(&repo.file_url(), Credentials::None));
    let link = snapshot.root.join("escape.yaml");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    let problems = manifests::read_tree(&snapshot.root, &TreeLimits::default()).unwrap_err();
    assert!(problems[0].message.contains("leaves the repository"), "{:?}", problems);
}

#[test]
fn submodules_are_not_fetched() {
    let upstream = Upstream::new();
    let inner = upstream.create("inner.git");
    inner.commit_and_push(&[("secret.yaml", CONFIG_MAP)], "inner");
    let repo = upstream.create("tenant.git");
    repo.commit(&[("settings.yaml", CONFIG_MAP)], "first");
    common::git(repo.work_path(), &["submodule", "add", "-q", &inner.file_url(), "vendored"]);
    common::git(repo.work_path(), &["commit", "-q", "-m", "submodule"]);
    repo.push("main");
    let cache = common::test_dir();
    let snapshot = fetch_updated(cache.path(), &request(&repo.file_url(), Credentials::None));
    assert_intact(&snapshot);
    assert!(snapshot.root.join(".gitmodules").exists());
    assert!(!snapshot.root.join("vendored/secret.yaml").exists(), "the submodule's content is not fetched");
}
