//! Clone and no-op refetch over every transport.

use cdtarget::source::{Credentials, Fetched, Reference};

use super::common::{self, GitDaemon, HttpGit, HttpOptions, KeyKind, Sshd, Tls, Upstream};
use super::{CONFIG_MAP, fetch, fetch_unchanged, fetch_updated, is_shallow, limits, read, request, ssh_credentials};

fn ssh_clone_and_noop_refetch(kind: KeyKind) {
    let Some(sshd) = common::skip_or_fail("ssh", Sshd::start()) else { return };
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    let sha = repo.commit_and_push(&[("app/settings.yaml", CONFIG_MAP)], "first");
    let cache = common::test_dir();
    let request = request(&sshd.url(repo.bare_path()), ssh_credentials(&sshd, &sshd.client_key(kind)));

    let snapshot = fetch_updated(cache.path(), &request);
    assert_eq!(snapshot.revision, sha);
    assert_eq!(read(&snapshot, "app/settings.yaml"), CONFIG_MAP);
    assert!(is_shallow(cache.path()), "ssh fetches are shallow");

    let modified = std::fs::metadata(snapshot.root.join("app/settings.yaml")).unwrap().modified().unwrap();
    let again = fetch_unchanged(cache.path(), &request);
    assert_eq!(again, snapshot);
    let after = std::fs::metadata(snapshot.root.join("app/settings.yaml")).unwrap().modified().unwrap();
    assert_eq!(modified, after, "a no-op poll does not touch the tree");
}

#[test]
fn ssh_clone_and_noop_refetch_with_ed25519_deploy_key() {
    ssh_clone_and_noop_refetch(KeyKind::Ed25519);
}

#[test]
fn ssh_clone_and_noop_refetch_with_rsa_pem_deploy_key() {
    ssh_clone_and_noop_refetch(KeyKind::RsaPem);
}

#[test]
fn ssh_clone_and_noop_refetch_with_passphrase_protected_key() {
    ssh_clone_and_noop_refetch(KeyKind::Ed25519Passphrase);
}

#[test]
fn ssh_clone_and_noop_refetch_with_ecdsa_key() {
    ssh_clone_and_noop_refetch(KeyKind::EcdsaP256);
}

#[test]
fn http_clone_with_token_and_noop_refetch_asks_only_for_refs() {
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    let sha = repo.commit_and_push(&[("settings.yaml", CONFIG_MAP)], "first");
    let http = HttpGit::start_with_token(&upstream.root(), "glpat-test-token");
    let cache = common::test_dir();
    let request = request(&http.url("tenant.git"), Credentials::token("glpat-test-token"));

    assert_eq!(fetch_updated(cache.path(), &request).revision, sha);
    assert!(is_shallow(cache.path()));
    http.reset_counts();
    fetch_unchanged(cache.path(), &request);
    let counts = http.counts();
    assert_eq!(counts.upload_pack, 0, "no fetch when nothing changed: {counts:?}");
    assert!(counts.info_refs >= 1, "{counts:?}");
}

#[test]
fn http_fetch_of_a_new_commit_asks_for_the_refs_once() {
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    repo.commit_and_push(&[("settings.yaml", CONFIG_MAP)], "first");
    let http = HttpGit::start(&upstream.root());
    let cache = common::test_dir();
    let request = request(&http.url("tenant.git"), Credentials::None);
    fetch_updated(cache.path(), &request);

    let sha = repo.commit_and_push(&[("settings.yaml", "# changed\n")], "second");
    http.reset_counts();
    assert_eq!(fetch_updated(cache.path(), &request).revision, sha);
    // The connection that listed the refs carries the fetch: one advertisement, then the two
    // POSTs of a shallow fetch over stateless HTTP (the deepen answer, then the pack).
    let counts = http.counts();
    assert_eq!((counts.info_refs, counts.upload_pack, counts.total), (1, 2, 3), "{counts:?}");
}

#[test]
fn git_daemon_clone_noop_refetch_and_new_commit() {
    let (upstream, repo) = super::tenant_repo();
    let daemon = GitDaemon::start(&upstream.root());
    let cache = common::test_dir();
    let request = request(&daemon.url("tenant.git"), Credentials::None);

    let first = fetch_updated(cache.path(), &request);
    assert!(is_shallow(cache.path()));
    fetch_unchanged(cache.path(), &request);
    let second = repo.commit_and_push(&[("more.yaml", CONFIG_MAP)], "second");
    let updated = fetch_updated(cache.path(), &request);
    assert_eq!(updated.revision, second);
    assert_ne!(updated.root, first.root);
    assert!(!first.root.exists(), "only the running snapshot is kept (a reconcile reads the one it fetched)");
}

#[test]
fn file_clone_and_noop_refetch() {
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    let sha = repo.commit_and_push(&[("settings.yaml", CONFIG_MAP)], "first");
    let cache = common::test_dir();
    let request = request(&repo.file_url(), Credentials::None);
    assert_eq!(fetch_updated(cache.path(), &request).revision, sha);
    fetch_unchanged(cache.path(), &request);
}

#[test]
fn tags_annotated_tags_and_commits_are_checked_out() {
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    let first = repo.commit_and_push(&[("settings.yaml", CONFIG_MAP)], "first");
    repo.tag("v1");
    repo.tag_annotated("v1-annotated", "release");
    repo.commit_and_push(&[("more.yaml", CONFIG_MAP)], "second");
    let daemon = GitDaemon::start(&upstream.root());
    for reference in
        [Reference::Tag("v1".into()), Reference::Tag("v1-annotated".into()), Reference::Commit(first.clone())]
    {
        let cache = common::test_dir();
        let mut request = request(&daemon.url("tenant.git"), Credentials::None);
        request.reference = reference.clone();
        let snapshot = fetch_updated(cache.path(), &request);
        assert_eq!(snapshot.revision, first, "{reference}");
        assert!(!snapshot.root.join("more.yaml").exists(), "{reference}");
        // A commit already in the cache needs no network at all; a tag needs one round trip.
        assert!(matches!(fetch(cache.path(), &request, &limits()), Ok(Fetched::Unchanged(_))), "{reference}");
    }
}

#[test]
fn https_with_a_pinned_self_signed_certificate_and_with_a_private_ca() {
    for tls in [Tls::SelfSigned, Tls::SignedByCa] {
        let upstream = Upstream::new();
        let repo = upstream.create("tenant.git");
        let sha = repo.commit_and_push(&[("settings.yaml", CONFIG_MAP)], "first");
        let https = HttpGit::start_with(&upstream.root(), HttpOptions { token: Some("t0ken-value".into()), tls });
        let cache = common::test_dir();
        let mut request = request(&https.url("tenant.git"), Credentials::token("t0ken-value"));
        request.ca_bundle = https.ca_pem().map(str::to_owned);
        assert_eq!(fetch_updated(cache.path(), &request).revision, sha, "{tls:?}");
    }
}

#[test]
fn fetcher_runs_many_registrations_concurrently_off_the_runtime() {
    let upstream = Upstream::new();
    let daemon = GitDaemon::start(&upstream.root());
    let names: Vec<String> = (0..6).map(|i| format!("tenant-{i}.git")).collect();
    let shas: Vec<String> =
        names.iter().map(|n| upstream.create(n).commit_and_push(&[("settings.yaml", CONFIG_MAP)], "first")).collect();
    let cache = common::test_dir();
    super::setup();
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = outcomes.clone();
    let fetcher = cdtarget::source::Fetcher::new(cache.path(), limits(), 2)
        .with_observer(std::sync::Arc::new(move |result, _| seen.lock().unwrap().push(result.to_owned())));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let results = runtime.block_on(async {
        let fetches = names.iter().map(|name| {
            let fetcher = fetcher.clone();
            let request = request(&daemon.url(name), Credentials::None);
            async move { fetcher.fetch(&format!("platform/{name}"), request).await }
        });
        futures_join_all(fetches).await
    });
    for (result, sha) in results.into_iter().zip(shas) {
        assert_eq!(result.unwrap().snapshot().revision, sha);
    }
    // A second pass is all no-op polls, and the observer (metrics) is told so.
    let request = request(&daemon.url(&names[0]), Credentials::None);
    runtime.block_on(fetcher.fetch(&format!("platform/{}", names[0]), request)).unwrap();
    let outcomes = outcomes.lock().unwrap().clone();
    assert_eq!(outcomes.iter().filter(|o| *o == "updated").count(), names.len());
    assert_eq!(outcomes.last().map(String::as_str), Some("unchanged"));
}

/// Awaits every future (a current-thread runtime polls them concurrently).
async fn futures_join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs = Vec::new();
    for handle in handles {
        outputs.push(handle.await);
    }
    outputs
}
