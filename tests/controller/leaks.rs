//! No secret leaves through what the controllers write: a run of both reconcilers and the
//! GitLab step, through success and failure paths, with a fixture secret in every place one can
//! be (URL userinfo, Git passwords, webhook tokens and paths, the GitLab bot token, the generated
//! deploy key, the agents' PAT and proxy password, a minted ServiceAccount token); then every
//! status, every Event and the captured logs are scanned for each of them.

use std::sync::Arc;

use cdtarget::api::CDTarget;
use cdtarget::api::conditions;
use cdtarget::api::tenant_repository::{GitLabSpec, TenantRepository, webhook_path};
use cdtarget::controller::cdtarget as cdtarget_reconciler;
use cdtarget::controller::cdtarget::borrowed::{SERVICE_ACCOUNT_NAME_ANNOTATION, SERVICE_ACCOUNT_TOKEN_TYPE};
use cdtarget::controller::events::EventSink;
use cdtarget::controller::frame::Framed;
use cdtarget::controller::tenant_repository;
use cdtarget::fixtures::{self, SecretFixture, env_from_secret};
use cdtarget::gitlab::Settings as GitLabSettings;
use cdtarget::gitlab::{self, ClientConfig, GitLabClient, RetryPolicy, keys};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::events::Reporter;

use crate::common::HttpGit;
use crate::common::fake_gitlab::{BOT_TOKEN, FakeGitLab};
use crate::support::{LogCapture, SecretScanner, written_by_controllers};
use crate::tenant_repository::{Fixture, PLATFORM, TENANT, config_map_yaml};

const GIT_TOKEN: &str = "git-token-in-the-url-4f1c9e";
const WRONG_URL_PASSWORD: &str = "wrong-url-password-8d2a71";
const BASIC_PASSWORD: &str = "basic-password-in-secret-5b3e0c";
const WEBHOOK_TOKEN: &str = "webhook-token-of-team-a-77e1";
const GITLAB_HOOK_TOKEN: &str = "gitlab-hook-token-of-team-a-19c4";
const WRONG_BOT_TOKEN: &str = "glpat-revoked-bot-token-000000";
const PAT: &str = "azure-devops-pat-6a0f3b2c91";
const PROXY_PASSWORD: &str = "proxy-password-2c7d55";
const MINTED_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.minted-sa-token-e3b0c4";

fn settings(gitlab: &FakeGitLab, token: &str) -> GitLabSettings {
    let mut config = ClientConfig::new(gitlab.url(), gitlab::Secret::new(token));
    config.retry = RetryPolicy { max_attempts: 1, ..config.retry };
    GitLabSettings {
        client: GitLabClient::new(config).expect("GitLab client"),
        webhook_external_url: "https://cd.example.com".into(),
        known_hosts: "gitlab.example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEXAMPLE\n".into(),
        // Commit statuses are shown with the fake GitLab's repository model in tests/gitlab and
        // tests/cluster_tour; these fakes know no commits.
        commit_status: None,
    }
}

/// The agents the tenant pushes: [`CDTarget::test`] with one destination and a proxy Secret.
fn agents_yaml() -> String {
    CDTarget::test().with_ips(["10.1.2.3"]).with_proxy_ref("proxy").to_manifest()
}

async fn create_secret(client: &kube::Client, namespace: &str, secret: Secret) {
    Api::<Secret>::namespaced(client.clone(), namespace).create(&PostParams::default(), &secret).await.expect("Secret");
}

/// Registration `name` of `deploy/` in the repository at `url` ([`TenantRepository::test`]).
fn registration(name: &str, url: &str) -> TenantRepository {
    TenantRepository::test().with_name(name).with_url(url).with_path("deploy")
}

async fn register(fixture: &Fixture, repo: TenantRepository) {
    fixture.registrations().create(&PostParams::default(), &repo).await.expect("create TenantRepository");
}

#[tokio::test]
async fn nothing_the_controllers_write_holds_a_secret_of_their_fixtures() {
    let logs = LogCapture::start();
    let fixture = Fixture::new().await;
    let client = fixture.client.clone();
    fixture.repo.commit_and_push(
        &[("deploy/settings.yaml", config_map_yaml("settings", "1")), ("deploy/agents.yaml", agents_yaml())],
        "first",
    );
    let root = fixture.repo.bare_path().parent().expect("served root").to_path_buf();
    let repo_name = fixture.repo.bare_path().file_name().unwrap().to_string_lossy().into_owned();
    let http = HttpGit::start_with_token(&root, GIT_TOKEN);
    let gitlab = FakeGitLab::start();
    gitlab.add_project("team-a/app");

    let recorder =
        EventSink::new(client.clone(), Reporter { controller: "cdtarget".into(), instance: Some("test".into()) });
    let mut repo_ctx = (*fixture.context()).clone();
    repo_ctx.frame.recorder = Some(recorder.clone());
    repo_ctx.gitlab = Some(settings(&gitlab, BOT_TOKEN));
    let repo_ctx = Arc::new(repo_ctx);
    let target_ctx = Arc::new(
        cdtarget_reconciler::Context::new(client.clone(), PLATFORM, "cdtarget-policy").with_recorder(recorder),
    );

    // Registrations: one fetching with a token in its URL and a webhook (success), one with the
    // wrong password in its URL and a Basic password in its Secret (failure), one managed on
    // GitLab (its generated key pair cannot fetch over http: a failure of the fetch, a success
    // of the GitLab step).
    fixture.put_platform_secret("team-a-hook", &[("token", WEBHOOK_TOKEN)]).await;
    fixture.put_platform_secret("basic", &[("username", "team-a"), ("password", BASIC_PASSWORD)]).await;
    fixture.put_platform_secret("gitlab-hook", &[("token", GITLAB_HOOK_TOKEN)]).await;
    let good_url = http.url_with_credentials(&repo_name, "oauth2", GIT_TOKEN);
    register(&fixture, registration("good", &good_url).with_webhook_secret("team-a-hook")).await;
    let bad_url = http.url_with_credentials(&repo_name, "oauth2", WRONG_URL_PASSWORD);
    register(&fixture, registration("bad", &bad_url).with_secret_ref("basic")).await;
    let gitlab_url = http.url_with_credentials(&repo_name, "oauth2", GIT_TOKEN);
    let on_gitlab = registration("on-gitlab", &gitlab_url)
        .with_secret_ref("on-gitlab-key")
        .with_webhook_secret("gitlab-hook")
        .with_gitlab(GitLabSpec::test().for_project("team-a/app"));
    register(&fixture, on_gitlab).await;

    // The agents' Secrets, and a ServiceAccount token a hostile tenant minted.
    create_secret(&client, TENANT, fixtures::secret("azp-token", &[("AZP_TOKEN", PAT)])).await;
    create_secret(&client, TENANT, fixtures::secret("proxy", &[("PROXY_PW", PROXY_PASSWORD)])).await;
    let minted = fixtures::secret("builder-token", &[("token", MINTED_TOKEN)])
        .of_type(SERVICE_ACCOUNT_TOKEN_TYPE)
        .with_annotation(SERVICE_ACCOUNT_NAME_ANNOTATION, "builder");
    create_secret(&client, TENANT, minted).await;

    let registrations = Api::<TenantRepository>::namespaced(client.clone(), PLATFORM);
    for name in ["good", "bad", "on-gitlab"] {
        let repo = registrations.get(name).await.unwrap();
        tenant_repository::reconcile(Arc::new(repo), repo_ctx.clone()).await.expect("reconcile registration");
    }
    // The GitLab step again with a revoked bot token: its failure path.
    let mut revoked = (*repo_ctx).clone();
    revoked.gitlab = Some(settings(&gitlab, WRONG_BOT_TOKEN));
    let repo = registrations.get("on-gitlab").await.unwrap();
    tenant_repository::reconcile(Arc::new(repo), Arc::new(revoked)).await.expect("reconcile registration");

    // CDTargets: the one from Git (success), one stealing the ServiceAccount token, one waiting
    // for a Secret that does not exist.
    let targets = Api::<CDTarget>::namespaced(client.clone(), TENANT);
    let agents = targets.get("agents").await.expect("applied from Git");
    let stolen = env_from_secret("KUBE_TOKEN", "builder-token", "token");
    let thief = CDTarget::new("thief", agents.spec.clone()).in_namespace(TENANT).with_env(stolen);
    targets.create(&PostParams::default(), &thief).await.unwrap();
    let waiting = CDTarget::new("waiting", agents.spec.clone()).with_token_ref("not-there");
    targets.create(&PostParams::default(), &waiting).await.unwrap();
    for name in ["agents", "thief", "waiting"] {
        let target = targets.get(name).await.unwrap();
        cdtarget_reconciler::reconcile(Arc::new(target), target_ctx.clone()).await.expect("reconcile CDTarget");
    }

    // The run went through the paths it means to.
    let ready = |conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]| {
        conditions.iter().find(|c| c.type_ == conditions::READY).map(|c| c.reason.clone()).unwrap_or_default()
    };
    let reasons: Vec<String> = futures::future::join_all(["good", "bad"].map(|n| registrations.get(n)))
        .await
        .into_iter()
        .map(|r| ready(&r.unwrap().status.unwrap().conditions))
        .collect();
    assert_eq!(reasons, ["Succeeded", "AuthenticationFailed"]);
    let on_gitlab = registrations.get("on-gitlab").await.unwrap().status.unwrap();
    let gitlab_reason = on_gitlab
        .conditions
        .iter()
        .find(|c| c.type_ == cdtarget::api::conditions::GITLAB_SYNCED)
        .unwrap()
        .reason
        .clone();
    assert_eq!(gitlab_reason, "GitLabUnauthorized");
    // The children's outcome: `Applied` (Ready also waits for agents, which never run here).
    let applied = |conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]| {
        conditions.iter().find(|c| c.type_ == "Applied").map(|c| c.reason.clone()).unwrap_or_default()
    };
    let target_reasons: Vec<String> = futures::future::join_all(["agents", "thief", "waiting"].map(|n| targets.get(n)))
        .await
        .into_iter()
        .map(|t| applied(&t.unwrap().status.unwrap().conditions))
        .collect();
    assert_eq!(target_reasons, ["KedaNotInstalled", "SecretNotAllowed", "SecretNotFound"]);
    assert!(logs.text().contains("generated the deploy key Secret"), "the logs are captured:\n{}", logs.text());

    let mut scanner = SecretScanner::new();
    scanner
        .secret("the token in a registration's URL", GIT_TOKEN)
        .secret("the wrong password in a registration's URL", WRONG_URL_PASSWORD)
        .secret("the Basic password of a registration", BASIC_PASSWORD)
        .secret("a webhook token", WEBHOOK_TOKEN)
        .secret("a GitLab webhook token", GITLAB_HOOK_TOKEN)
        .secret("the GitLab bot token", BOT_TOKEN)
        .secret("a revoked GitLab bot token", WRONG_BOT_TOKEN)
        .secret("the agents' PAT", PAT)
        .secret("the proxy password", PROXY_PASSWORD)
        .secret("a minted ServiceAccount token", MINTED_TOKEN);
    let key = Api::<Secret>::namespaced(client.clone(), PLATFORM).get("on-gitlab-key").await.expect("generated key");
    let private_key = String::from_utf8(key.data.unwrap()[keys::IDENTITY].0.clone()).unwrap();
    scanner.secret("the generated deploy key", &private_key);
    // The receiver paths are capabilities: nowhere but in their own registration's status.
    scanner.secret("the webhook path of good", &webhook_path(WEBHOOK_TOKEN, "good", PLATFORM));
    scanner.secret("the webhook path of on-gitlab", &webhook_path(GITLAB_HOOK_TOKEN, "on-gitlab", PLATFORM));

    let mut leaks = Vec::new();
    let written = written_by_controllers(&client).await;
    assert!(written.iter().any(|(place, _)| place.starts_with("Event ")), "Events were recorded: {written:#?}");
    for (place, text) in &written {
        leaks.extend(scanner.leaks(place, text));
    }
    leaks.extend(scanner.leaks("logs", &logs.text()));
    assert_eq!(leaks, [], "secrets in what the controllers wrote");
}
