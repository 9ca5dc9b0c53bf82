//! The GitLab step of the TenantRepository reconciler against the fake GitLab and the fake API
//! server: key pair Secret generation, deploy key and hook, `GitLabSynced`, the finalizer, the
//! deletion (and its escape hatch) and key rotation.

use std::sync::Arc;

use cdtarget::api::conditions::APPLIED;
use cdtarget::api::conditions::REASON_GITLAB_NOT_CONFIGURED as REASON_NOT_CONFIGURED;
use cdtarget::api::tenant_repository::GitLabSpec;
use cdtarget::controller::tenant_repository::reconcile;
use cdtarget::gitlab::Settings as GitLabSettings;
use cdtarget::gitlab::{self, ClientConfig, GitLabClient, RetryPolicy, keys};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;

use crate::common::fake_gitlab::{BOT_TOKEN, FakeGitLab, Fault};
use crate::tenant_repository::{Fixture, PLATFORM, REPO, condition, config_map_yaml};

const PROJECT: &str = "team-a/app";
const KEY_SECRET: &str = "team-a-repo-key";
const HOOK_SECRET: &str = "team-a-repo-hook";
const HOOK_TOKEN: &str = "hook-token-0123456789";
const KNOWN_HOSTS: &str = "gitlab.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEXAMPLE\n";

struct GitLabFixture {
    cluster: Fixture,
    gitlab: FakeGitLab,
    project: i64,
}

fn settings(gitlab: &FakeGitLab, token: &str) -> GitLabSettings {
    let mut config = ClientConfig::new(gitlab.url(), gitlab::Secret::new(token));
    // Failures are the point of some tests: no waiting between attempts.
    config.retry = RetryPolicy { max_attempts: 1, ..config.retry };
    GitLabSettings {
        client: GitLabClient::new(config).expect("client"),
        webhook_external_url: "https://cd.example.com".into(),
        known_hosts: KNOWN_HOSTS.into(),
        // Commit statuses are shown with the fake GitLab's repository model in tests/gitlab and
        // tests/cluster_tour; these fakes know no commits.
        commit_status: None,
    }
}

impl GitLabFixture {
    /// A registration with `spec.gitlab` (no key pair Secret yet) and its webhook Secret.
    async fn new() -> GitLabFixture {
        let cluster = Fixture::new().await;
        cluster.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "1"))], "first");
        cluster.put_platform_secret(HOOK_SECRET, &[("token", HOOK_TOKEN)]).await;
        let gitlab = FakeGitLab::start();
        let project = gitlab.add_project(PROJECT);
        cluster
            .register(|repo| {
                repo.with_secret_ref(KEY_SECRET)
                    .with_webhook_secret(HOOK_SECRET)
                    .with_gitlab(GitLabSpec::test().for_project(PROJECT))
            })
            .await;
        GitLabFixture { cluster, gitlab, project }
    }

    async fn reconcile_with(&self, settings: Option<GitLabSettings>) -> Action {
        let mut ctx = (*self.cluster.context()).clone();
        ctx.gitlab = settings;
        self.cluster.writes.lock().unwrap().clear();
        let repo = self.cluster.registration().await;
        reconcile(Arc::new(repo), Arc::new(ctx)).await.expect("reconcile")
    }

    async fn reconcile(&self) -> Action {
        self.reconcile_with(Some(settings(&self.gitlab, BOT_TOKEN))).await
    }

    async fn key_secret(&self) -> Option<Secret> {
        Api::<Secret>::namespaced(self.cluster.client.clone(), PLATFORM).get_opt(KEY_SECRET).await.expect("get")
    }

    async fn secret_fingerprint(&self) -> String {
        let secret = self.key_secret().await.expect("key pair Secret");
        let public = String::from_utf8(secret.data.unwrap()[keys::IDENTITY_PUB].0.clone()).unwrap();
        keys::fingerprint(&public).unwrap()
    }

    async fn gitlab_condition(&self) -> (String, String, String) {
        let status = self.cluster.status().await;
        let c = condition(&status, cdtarget::api::conditions::GITLAB_SYNCED);
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    /// Reconciles the registration as the watch presents it once `kubectl delete` started: with
    /// `metadata.deletionTimestamp` set, held by its finalizers. (kube-fake-client deletes at
    /// once, finalizers or not, so the deletion is shown to the reconciler as the API server would.)
    async fn reconcile_deletion(&self) -> Action {
        let mut repo = self.cluster.registration().await;
        assert!(repo.metadata.finalizers.clone().unwrap_or_default().contains(&gitlab::FINALIZER.to_owned()));
        repo.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        let mut ctx = (*self.cluster.context()).clone();
        ctx.gitlab = Some(settings(&self.gitlab, BOT_TOKEN));
        reconcile(Arc::new(repo), Arc::new(ctx)).await.expect("reconcile")
    }

    /// Whether our finalizer was released (the API server would then remove the object).
    async fn released(&self) -> bool {
        let finalizers = self.cluster.registration().await.metadata.finalizers.unwrap_or_default();
        !finalizers.contains(&gitlab::FINALIZER.to_owned())
    }
}

#[tokio::test]
async fn a_registration_gets_a_generated_key_pair_a_read_only_key_and_a_hook() {
    let fixture = GitLabFixture::new().await;
    fixture.reconcile().await;

    let secret = fixture.key_secret().await.expect("the key pair Secret is generated");
    let data = secret.data.clone().unwrap();
    for key in [keys::IDENTITY, keys::IDENTITY_PUB, keys::KNOWN_HOSTS] {
        assert!(data.contains_key(key), "{key} in the Secret");
    }
    assert_eq!(data[keys::KNOWN_HOSTS].0, KNOWN_HOSTS.as_bytes(), "known_hosts from the platform config");
    let owner = &secret.metadata.owner_references.unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("TenantRepository", REPO));

    let linked = fixture.gitlab.deploy_keys(fixture.project);
    assert_eq!(linked.len(), 1, "{linked:?}");
    assert_eq!(Some(linked[0].fingerprint.clone()), Some(fixture.secret_fingerprint().await));
    assert!(!linked[0].can_push, "read-only");
    assert_eq!(linked[0].title, format!("cdtarget:{PLATFORM}/{REPO}"));
    let hooks = fixture.gitlab.hooks(fixture.project);
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert!(hooks[0].url.starts_with("https://cd.example.com/hook/"), "{}", hooks[0].url);
    assert_eq!(hooks[0].token.as_deref(), Some(HOOK_TOKEN));

    let (ok, reason, message) = fixture.gitlab_condition().await;
    assert_eq!((ok.as_str(), reason.as_str()), ("True", cdtarget::api::conditions::REASON_SYNCED), "{message}");
    assert!(!message.contains(BOT_TOKEN) && !message.contains(HOOK_TOKEN), "{message}");
    let status = fixture.cluster.status().await;
    let recorded = status.gitlab.clone().expect("status.gitlab");
    assert_eq!(recorded.project_id, Some(fixture.project));
    assert_eq!(recorded.deploy_key_id, Some(linked[0].id));
    assert_eq!(recorded.hook_id, Some(hooks[0].id));
    let repo = fixture.cluster.registration().await;
    assert!(repo.metadata.finalizers.unwrap_or_default().contains(&gitlab::FINALIZER.to_owned()));
    assert_eq!(condition(&status, APPLIED).status, "True", "the Git apply is done too");
    assert!(fixture.cluster.config_map("settings").await.is_some());

    // In sync: two listings, no write on GitLab.
    fixture.gitlab.reset_counts();
    fixture.cluster.bridge.clear();
    fixture.reconcile().await;
    let counts = fixture.gitlab.counts();
    assert_eq!((counts.writes(), counts.method("GET")), (0, 2), "{counts:?}");
    // Credentials, webhook path and GitLab step share one read of each Secret.
    let mut secret_reads: Vec<String> = fixture
        .cluster
        .bridge
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.contains("/secrets/"))
        .map(|r| r.path)
        .collect();
    secret_reads.sort();
    assert_eq!(
        secret_reads,
        [
            format!("/api/v1/namespaces/{PLATFORM}/secrets/{HOOK_SECRET}"),
            format!("/api/v1/namespaces/{PLATFORM}/secrets/{KEY_SECRET}")
        ]
    );
    assert_eq!(fixture.gitlab.deploy_keys(fixture.project).len(), 1);
}

#[tokio::test]
async fn a_bad_bot_token_is_reported_and_the_git_apply_still_happens() {
    let fixture = GitLabFixture::new().await;
    fixture.reconcile_with(Some(settings(&fixture.gitlab, "glpat-wrong-token"))).await;
    let (ok, reason, message) = fixture.gitlab_condition().await;
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "GitLabUnauthorized"), "{message}");
    assert!(!message.contains("glpat-wrong-token"), "{message}");
    let status = fixture.cluster.status().await;
    assert_eq!(condition(&status, APPLIED).status, "True");
    assert!(fixture.cluster.config_map("settings").await.is_some());
    assert!(fixture.gitlab.deploy_keys(fixture.project).is_empty());
}

#[tokio::test]
async fn without_gitlab_settings_the_condition_says_so() {
    let fixture = GitLabFixture::new().await;
    fixture.reconcile_with(None).await;
    let (ok, reason, message) = fixture.gitlab_condition().await;
    assert_eq!((ok.as_str(), reason.as_str()), ("False", REASON_NOT_CONFIGURED));
    assert!(message.contains("--gitlab-url"), "{message}");
    assert!(fixture.key_secret().await.is_none(), "no key pair is made without GitLab settings");
}

#[tokio::test]
async fn deletion_removes_key_and_hook_then_releases_the_finalizer() {
    let fixture = GitLabFixture::new().await;
    fixture.reconcile().await;
    assert_eq!(fixture.gitlab.deploy_keys(fixture.project).len(), 1);
    let action = fixture.reconcile_deletion().await;
    assert_eq!(action, Action::await_change());
    assert!(fixture.gitlab.deploy_keys(fixture.project).is_empty());
    assert!(fixture.gitlab.hooks(fixture.project).is_empty());
    assert!(fixture.released().await, "the finalizer was released");
}

#[tokio::test]
async fn gitlab_down_at_deletion_keeps_the_finalizer_with_cleanup_pending() {
    let fixture = GitLabFixture::new().await;
    fixture.reconcile().await;
    fixture.gitlab.inject(None, None, Fault::ServerError, 100);
    let action = fixture.reconcile_deletion().await;
    assert_ne!(action, Action::await_change(), "retried");
    assert!(!fixture.released().await, "the finalizer stays");
    let (ok, reason, message) = fixture.gitlab_condition().await;
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("False", cdtarget::api::conditions::REASON_CLEANUP_PENDING),
        "{message}"
    );
    assert!(message.contains("GitLabUnavailable") && !message.contains(BOT_TOKEN), "{message}");
    assert_eq!(fixture.gitlab.deploy_keys(fixture.project).len(), 1);
}

#[tokio::test]
async fn the_escape_hatch_releases_the_finalizer_without_calling_gitlab() {
    let fixture = GitLabFixture::new().await;
    fixture.reconcile().await;
    let patch = serde_json::json!({"metadata": {"annotations": {gitlab::SKIP_CLEANUP_ANNOTATION: "true"}}});
    fixture.cluster.registrations().patch(REPO, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    fixture.gitlab.reset_counts();
    fixture.reconcile_deletion().await;
    assert_eq!(fixture.gitlab.counts().total(), 0, "GitLab left alone");
    assert!(fixture.released().await);
    assert_eq!(fixture.gitlab.deploy_keys(fixture.project).len(), 1, "left behind, named in the Event");
}

#[tokio::test]
async fn rotation_adds_the_new_key_before_the_secret_changes_and_then_drops_the_old_one() {
    let fixture = GitLabFixture::new().await;
    fixture.reconcile().await;
    let old = fixture.secret_fingerprint().await;
    let patch = serde_json::json!({"metadata": {"annotations": {gitlab::ROTATE_ANNOTATION: "2026-11-22"}}});
    fixture.cluster.registrations().patch(REPO, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    fixture.reconcile().await;

    let new = fixture.secret_fingerprint().await;
    assert_ne!(new, old, "the Secret holds a new pair");
    let linked: Vec<String> = fixture.gitlab.deploy_keys(fixture.project).into_iter().map(|k| k.fingerprint).collect();
    assert_eq!(linked, std::slice::from_ref(&new), "only the new key is left");
    // At every moment some key was linked, and the new one before the old one left.
    let timeline = fixture.gitlab.key_timeline(fixture.project);
    let both = timeline.iter().position(|keys| keys.contains(&old) && keys.contains(&new));
    assert!(both.is_some(), "{timeline:?}");
    assert!(timeline.iter().skip(1).all(|keys| !keys.is_empty()), "{timeline:?}");
    let secret = fixture.key_secret().await.unwrap();
    assert_eq!(
        secret.metadata.annotations.unwrap_or_default().get(gitlab::ROTATED_ANNOTATION).map(String::as_str),
        Some("2026-11-22")
    );
    let (ok, _, message) = fixture.gitlab_condition().await;
    assert_eq!(ok, "True", "{message}");

    // The same value does not rotate again.
    fixture.reconcile().await;
    assert_eq!(fixture.secret_fingerprint().await, new);
}
