//! Tenant-visible text is written for tenants (docs/feedback.md, "What a tenant is told"): a run
//! through a tenant's refused push, an invalid platform policy and a source the platform cannot
//! fetch, then everything the tenant can read (their SyncStatus, every Event in their namespace,
//! every commit status and comment on GitLab) is scanned for the platform's values: the policy's
//! ranges, hosts and field values, the Git cache path, the known_hosts the platform wrote, the
//! unreachable Git server, the receiver's host and the GitLab ids. The registration (platform
//! namespace) keeps every detail.

use std::net::TcpListener;
use std::sync::Arc;

use cdtarget::api::SyncStatus;
use cdtarget::api::tenant_repository::GitLabSpec;
use cdtarget::controller::events::EventSink;
use cdtarget::controller::tenant_repository::{Context, reconcile};
use cdtarget::controller::tenant_text;
use cdtarget::fixtures;
use cdtarget::gitlab::{ClientConfig, GitLabClient, RetryPolicy, Secret, Settings, StatusSettings};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::store;
use kube::runtime::watcher;
use serde_json::Value;

use crate::common::fake_gitlab::{BOT_TOKEN, FakeGitLab, synthetic_key};
use crate::feedback::listed_store;
use crate::tenant_repository::{Fixture, PLATFORM, REPO, TENANT, config_map_yaml};

const PROJECT: &str = "team-a/app";
/// The policy's recognisable values: a range, a host and a field value.
const POLICY_RANGE: &str = "10.99.0.0/16";
const POLICY_HOST: &str = "secret-host.platform.internal";
const POLICY_FIELD_VALUE: &str = "987654321987";
/// The platform's Git server as the platform's known_hosts names it.
const KNOWN_HOST: &str = "git-mirror.platform.internal";
/// Where GitLab delivers pushes: the receiver's host.
const RECEIVER_HOST: &str = "cd-receiver.platform.internal";
/// GitLab ids from here on: numbers that appear nowhere else in what is scanned.
const FIRST_GITLAB_ID: i64 = 7_340_001;

/// An invalid policy whose problems quote each of the values above.
fn invalid_policy() -> String {
    format!(
        "egress:\n  nat64Prefixes: [\"{POLICY_RANGE}\"]\n  maxAddressesPerTarget:\n    ipv4: {POLICY_FIELD_VALUE}\n\
         agents:\n  allowedUrlHosts: [\"{POLICY_HOST}:8443\"]\n"
    )
}

fn gitlab_settings(gitlab: &FakeGitLab, known_hosts: &str) -> Settings {
    let mut config = ClientConfig::new(gitlab.url(), Secret::new(BOT_TOKEN));
    config.retry = RetryPolicy { max_attempts: 1, ..config.retry };
    Settings {
        client: GitLabClient::new(config).expect("GitLab client"),
        webhook_external_url: format!("https://{RECEIVER_HOST}"),
        known_hosts: known_hosts.to_owned(),
        commit_status: Some(StatusSettings::default()),
    }
}

/// A port on 127.0.0.1 nothing listens on.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

/// `needle` in `text` as a whole number (no digit or letter on either side).
fn holds_number(text: &str, needle: &str) -> bool {
    text.match_indices(needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// Reconciles the registration once and returns its SyncStatus as written, which the watch of
/// SyncStatuses then holds (as the controller's watch would for the next reconcile).
async fn reconciled(fixture: &Fixture, context: &Arc<Context>, watched: &mut store::Writer<SyncStatus>) -> Value {
    let repo = fixture.registration().await;
    reconcile(Arc::new(repo), context.clone()).await.expect("reconcile");
    let written = Api::<SyncStatus>::namespaced(fixture.client.clone(), TENANT).get(REPO).await.expect("SyncStatus");
    watched.apply_watcher_event(&watcher::Event::Apply(written.clone()));
    serde_json::to_value(&written).unwrap()
}

#[tokio::test]
async fn nothing_a_tenant_can_read_holds_the_platforms_policy_values_paths_hosts_or_ids() {
    let fixture =
        Fixture::with_fake(|builder| builder.with_resource::<SyncStatus>().with_status_subresource::<SyncStatus>())
            .await;
    let client = fixture.client.clone();
    let gitlab = FakeGitLab::start();
    gitlab.start_ids_at(FIRST_GITLAB_ID);
    let project = gitlab.add_project(PROJECT);
    gitlab.back_with_git(project, fixture.repo.bare_path());
    let host_key = synthetic_key("the platform's Git server");
    let known_hosts = format!("{KNOWN_HOST} {host_key}\n");
    let known_host_key = host_key.split_whitespace().nth(1).expect("the key material").to_owned();

    let (feedback, mut watched) = listed_store();
    let mut context = (*fixture.context()).clone().with_sync_statuses(feedback);
    context.gitlab = Some(gitlab_settings(&gitlab, &known_hosts));
    let reporter = Reporter { controller: "cdtarget".into(), instance: Some("test".into()) };
    context.frame.recorder = Some(EventSink::new(client.clone(), reporter));
    let context = Arc::new(context);

    // The registration: managed on GitLab (deploy key, webhook, commit statuses), its key pair
    // Secret generated with the platform's known_hosts.
    fixture.put_platform_secret("team-a-hook", &[("token", "hook-token-of-team-a")]).await;
    fixture
        .register(|repo| {
            repo.with_branch("main")
                .with_secret_ref("team-a-key")
                .with_webhook_secret("team-a-hook")
                .with_gitlab(GitLabSpec::test().for_project(PROJECT))
        })
        .await;

    let mut seen = Vec::new();
    // 1. The tenant pushes a document for another namespace: refused, theirs to fix.
    let broken = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n  namespace: kube-system\n";
    fixture.repo.commit_and_push(&[("deploy/other.yaml", broken)], "broken");
    seen.push(("a refused push", reconciled(&fixture, &context, &mut watched).await));
    // 2. The tenant fixes it; the platform's policy is invalid.
    fixture.repo.commit_and_push(&[("deploy/other.yaml", config_map_yaml("other", "1"))], "fixed");
    let policy = fixtures::policy_config_map("policy.yaml", &invalid_policy());
    Api::<ConfigMap>::namespaced(client.clone(), PLATFORM).create(&PostParams::default(), &policy).await.unwrap();
    seen.push(("an invalid policy", reconciled(&fixture, &context, &mut watched).await));
    // 3. The platform points the registration at a Git server that does not answer.
    let unreachable = format!("127.0.0.1:{}", closed_port());
    let url = format!("ssh://git@{unreachable}/{PROJECT}.git");
    let patch = serde_json::json!({"spec": {"url": url}});
    fixture.registrations().patch(REPO, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    seen.push(("an unreachable source", reconciled(&fixture, &context, &mut watched).await));

    // The run went where it means to, and the platform's registration tells every detail.
    let registration = serde_json::to_string(&fixture.status().await).unwrap();
    let gitlab_status = fixture.status().await.gitlab.expect("status.gitlab");
    let ids: Vec<String> = [gitlab_status.project_id, gitlab_status.deploy_key_id, gitlab_status.hook_id]
        .into_iter()
        .map(|id| id.expect("an id recorded").to_string())
        .collect();
    assert!(ids.iter().all(|id| id.parse::<i64>().unwrap() >= FIRST_GITLAB_ID), "{ids:?}");
    for value in [POLICY_RANGE, POLICY_HOST, POLICY_FIELD_VALUE, unreachable.as_str()] {
        assert!(registration.contains(value), "the registration lost {value}: {registration}");
    }
    assert!(ids.iter().all(|id| holds_number(&registration, id)), "the registration lost an id: {registration}");

    // Everything the tenant can read.
    let mut readable: Vec<(String, String)> = Vec::new();
    for (what, sync_status) in &seen {
        readable.push((format!("SyncStatus after {what}"), sync_status.to_string()));
    }
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), TENANT);
    for event in events.list(&Default::default()).await.expect("Events").items {
        readable.push((
            format!("Event {}", event.reason.clone().unwrap_or_default()),
            serde_json::to_string(&event).unwrap(),
        ));
    }
    let core_events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), TENANT);
    for event in core_events.list(&Default::default()).await.expect("core Events").items {
        readable.push(("core Event".into(), serde_json::to_string(&event).unwrap()));
    }
    for status in gitlab.statuses(project) {
        let text = format!("{} {} {:?} {:?}", status.name, status.git_ref, status.description, status.target_url);
        readable.push((format!("GitLab status {}", status.status), text));
    }
    for comment in gitlab.comments(project) {
        readable.push(("GitLab comment".into(), comment.note));
    }

    // The tenant's own problem is told in full, where they look.
    let located = "other.yaml:1";
    assert!(seen[0].1.to_string().contains(located), "{}", seen[0].1);
    let told = |place: &str| readable.iter().any(|(p, text)| p.starts_with(place) && text.contains(located));
    assert!(told("Event ValidationFailed") && told("GitLab status failed") && told("GitLab comment"), "{readable:#?}");

    let cache = fixture.cache_path().display().to_string();
    let values = [
        ("the policy's range", POLICY_RANGE),
        ("the policy's host", POLICY_HOST),
        ("the policy's field value", POLICY_FIELD_VALUE),
        ("the Git cache path", cache.as_str()),
        ("the platform's known_hosts host", KNOWN_HOST),
        ("the platform's known_hosts key", known_host_key.as_str()),
        ("the receiver's host", RECEIVER_HOST),
    ];
    let mut leaks = Vec::new();
    for (place, text) in &readable {
        leaks.extend(values.iter().filter(|(_, value)| text.contains(value)).map(|(label, _)| (place.clone(), *label)));
        leaks.extend(ids.iter().filter(|id| holds_number(text, id)).map(|_| (place.clone(), "a GitLab id")));
    }
    // `spec.url` is the one place the registration's URL is shown (docs/feedback.md); the
    // unreachable server is nowhere else.
    for (what, sync_status) in &seen {
        let mut without_url = sync_status.clone();
        without_url["spec"].as_object_mut().unwrap().remove("url");
        if without_url.to_string().contains(&unreachable) {
            leaks.push((format!("SyncStatus after {what}"), "the unreachable Git server"));
        }
    }
    for (place, text) in readable.iter().filter(|(place, _)| !place.starts_with("SyncStatus")) {
        if text.contains(&unreachable) {
            leaks.push((place.clone(), "the unreachable Git server"));
        }
    }
    assert_eq!(leaks, [], "platform values in what the tenant reads: {readable:#?}");

    // What the tenant reads instead: the fixed sentence of each class.
    let last = &seen.last().unwrap().1;
    let condition = |kind: &str| {
        let conditions = last["status"]["conditions"].as_array().unwrap();
        let found = conditions.iter().find(|c| c["type"] == kind).unwrap_or_else(|| panic!("{kind} in {last}"));
        (found["reason"].as_str().unwrap().to_owned(), found["message"].as_str().unwrap().to_owned())
    };
    assert_eq!(condition("Ready"), ("Unreachable".into(), tenant_text::UNFETCHABLE.into()));
    assert_eq!(condition("Applied"), ("InvalidPolicy".into(), tenant_text::PLATFORM_CONFIGURATION.into()));
    assert_eq!(condition("GitLabSynced"), ("Synced".into(), tenant_text::GITLAB_SYNCED.into()));
    let failed = gitlab.statuses(project).into_iter().filter(|s| s.status == "failed").collect::<Vec<_>>();
    assert_eq!(failed.last().and_then(|s| s.description.as_deref()), Some(tenant_text::PLATFORM_CONFIGURATION));
}
