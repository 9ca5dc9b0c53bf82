//! The commit status step of the TenantRepository reconciler against the fake API server and the
//! fake GitLab, whose project reads the fixture's real repository: `pending` then the verdict
//! around the apply, nothing on a second reconcile, the refusal comment once, and GitLab trouble
//! that never touches the apply (`CommitStatusPosted`).

use std::sync::Arc;

use cdtarget::api::conditions::APPLIED;
use cdtarget::api::conditions::{COMMIT_STATUS_POSTED as CONDITION_TYPE, REASON_POSTED};
use cdtarget::api::tenant_repository::GitLabSpec;
use cdtarget::controller::tenant_repository::{TRANSIENT_RETRY, reconcile};
use cdtarget::gitlab::{ClientConfig, GitLabClient, RetryPolicy, Secret, Settings, StatusSettings};
use kube::runtime::controller::Action;

use crate::common::fake_gitlab::{BOT_TOKEN, DEVELOPER, FakeGitLab, Fault};
use crate::tenant_repository::{Fixture, PLATFORM, REPO, condition, config_map_yaml};

const PROJECT: &str = "team-a/app";

struct StatusFixture {
    cluster: Fixture,
    gitlab: FakeGitLab,
    project: i64,
}

impl StatusFixture {
    /// A registration with `spec.gitlab` (key and hook left to people) whose first commit holds
    /// one ConfigMap; the fake GitLab project reads the same repository.
    async fn new() -> StatusFixture {
        let cluster = Fixture::new().await;
        cluster.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "1"))], "first");
        let gitlab = FakeGitLab::start();
        let project = gitlab.add_project(PROJECT);
        gitlab.back_with_git(project, cluster.repo.bare_path());
        let spec = GitLabSpec::test().for_project(PROJECT);
        let spec = GitLabSpec { manage_webhook: false, ..spec.without_deploy_key() };
        cluster.register(|repo| repo.with_branch("main").with_gitlab(spec)).await;
        StatusFixture { cluster, gitlab, project }
    }

    fn settings(&self) -> Settings {
        let mut config = ClientConfig::new(self.gitlab.url(), Secret::new(BOT_TOKEN));
        config.retry = RetryPolicy { max_attempts: 1, ..config.retry };
        Settings {
            client: GitLabClient::new(config).expect("client"),
            webhook_external_url: "https://cd.example.com".into(),
            known_hosts: "gitlab.example.com ssh-ed25519 AAAA\n".into(),
            commit_status: Some(StatusSettings::default()),
        }
    }

    async fn reconcile(&self) -> Action {
        let mut ctx = (*self.cluster.context()).clone();
        ctx.gitlab = Some(self.settings());
        let repo = self.cluster.registration().await;
        reconcile(Arc::new(repo), Arc::new(ctx)).await.expect("reconcile")
    }

    async fn posted(&self) -> (String, String, String) {
        let status = self.cluster.status().await;
        let c = condition(&status, CONDITION_TYPE);
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }
}

#[tokio::test]
async fn a_revision_gets_pending_then_success_and_an_unchanged_poll_posts_nothing() {
    let fixture = StatusFixture::new().await;
    fixture.reconcile().await;
    let head = fixture.cluster.repo.head("main").expect("head");
    let records = fixture.gitlab.statuses(fixture.project);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!((records[0].sha.as_str(), records[0].git_ref.as_str()), (head.as_str(), "main"));
    assert_eq!(records[0].name, format!("cdtarget:{PLATFORM}/{REPO}"));
    assert_eq!(records[0].history, ["pending", "success"]);
    let status = fixture.cluster.status().await;
    assert_eq!(condition(&status, APPLIED).status, "True");
    let remembered = status.gitlab.and_then(|g| g.commit_status).expect("status.gitlab.commitStatus");
    assert_eq!(
        (remembered.sha, remembered.state, remembered.pipeline_id),
        (head, "success".into(), Some(records[0].pipeline_id))
    );
    let (ok, reason, message) = fixture.posted().await;
    assert_eq!((ok.as_str(), reason.as_str()), ("True", REASON_POSTED), "{message}");

    fixture.gitlab.reset_counts();
    fixture.reconcile().await;
    let counts = fixture.gitlab.counts();
    assert_eq!(
        counts.endpoint("statuses.create").requests + counts.endpoint("comments.create").requests,
        0,
        "{:?}",
        fixture.gitlab.log()
    );
    assert_eq!(fixture.gitlab.statuses(fixture.project).len(), 1);
}

#[tokio::test]
async fn gitlab_down_for_statuses_never_blocks_the_apply_and_the_next_reconcile_posts() {
    let fixture = StatusFixture::new().await;
    fixture.gitlab.inject(Some("POST"), Some("/projects/:id/statuses/:sha"), Fault::BadGateway, usize::MAX);
    let action = fixture.reconcile().await;
    let status = fixture.cluster.status().await;
    assert_eq!(condition(&status, APPLIED).status, "True", "the apply went on");
    assert!(fixture.cluster.config_map("settings").await.is_some());
    let (ok, reason, message) = fixture.posted().await;
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "GitLabUnavailable"), "{message}");
    assert!(message.contains("the apply is not affected") && !message.contains(BOT_TOKEN), "{message}");
    assert_eq!(action, Action::requeue(TRANSIENT_RETRY), "back soon");
    assert!(status.gitlab.and_then(|g| g.commit_status).is_none(), "nothing remembered that did not go through");

    fixture.gitlab.clear_faults();
    fixture.reconcile().await;
    let records = fixture.gitlab.statuses(fixture.project);
    assert_eq!(records.iter().map(|r| r.history.clone()).collect::<Vec<_>>(), [["pending", "success"]]);
    assert_eq!(fixture.posted().await.0, "True");
}

#[tokio::test]
async fn a_developer_bot_on_protected_main_is_told_which_role_it_needs() {
    let fixture = StatusFixture::new().await;
    fixture.gitlab.protect_branch(fixture.project, "main");
    fixture.gitlab.set_bot_role(fixture.project, DEVELOPER);
    fixture.reconcile().await;
    let (ok, reason, message) = fixture.posted().await;
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "GitLabStatusForbidden"), "{message}");
    assert!(
        message.contains("Developer") && message.contains("push or merge") && message.contains("`main`"),
        "{message}"
    );
    assert_eq!(condition(&fixture.cluster.status().await, APPLIED).status, "True");
}

#[tokio::test]
async fn a_refused_revision_fails_and_is_commented_once() {
    let fixture = StatusFixture::new().await;
    fixture.reconcile().await;
    let broken = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n  namespace: kube-system\n";
    let sha = fixture.cluster.repo.commit_and_push(&[("deploy/other.yaml", broken)], "broken");
    fixture.reconcile().await;
    let status = fixture.cluster.status().await;
    assert_eq!(condition(&status, APPLIED).reason, "ValidationFailed", "{status:#?}");
    let records: Vec<_> = fixture.gitlab.statuses(fixture.project).into_iter().filter(|r| r.sha == sha).collect();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].history, ["pending", "failed"]);
    let description = records[0].description.clone().unwrap_or_default();
    assert!(description.starts_with("deploy/other.yaml:1 (document 1): "), "{description}");
    let comments = fixture.gitlab.comments(fixture.project);
    assert_eq!(comments.len(), 1);
    assert!(comments[0].note.contains("deploy/other.yaml:1 (document 1): "), "{}", comments[0].note);
    assert_eq!(status.gitlab.and_then(|g| g.commented_sha).as_deref(), Some(sha.as_str()));

    fixture.reconcile().await;
    assert_eq!(fixture.gitlab.comments(fixture.project).len(), 1, "one comment per revision");
    assert_eq!(fixture.gitlab.statuses(fixture.project).iter().filter(|r| r.sha == sha).count(), 1);
}
