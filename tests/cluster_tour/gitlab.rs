//! Registrations with `spec.gitlab` on the real API server: the finalizer
//! `cdtarget.io/gitlab-cleanup` really holds the object until the deploy key and the hook are
//! gone from the (fake) GitLab, which kube-fake-client cannot show (it deletes at once); and the
//! commit statuses and refusal comment a tenant sees on GitLab for the revisions the controller
//! evaluates, on commits of a real repository the fake GitLab reads with `git`.

use cdtarget::api::TenantRepository;
use cdtarget::api::conditions::{GITLAB_SYNCED as CONDITION_TYPE, REASON_CLEANUP_PENDING};
use cdtarget::gitlab::FINALIZER;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::wait::await_condition;

use crate::common::cluster::{CDTARGET, CONFIG_MAP, CONTROLLER_USER, CONVERGE, PLATFORM_NAMESPACE, Tenant, gone};
use crate::common::fake_gitlab::{BOT_TOKEN, Fault, fingerprint};
use crate::support::{
    self, GITLAB_STEPS, GitLabTenant, delete_registration, fake_gitlab, onboard_gitlab, until_registration_gone,
};

/// Asserts that the project holds exactly the registration's key (read-only, the one in its
/// Secret) and one hook at the receiver path with the webhook token.
async fn assert_registered(registered: &GitLabTenant, external_url: &str) {
    let GitLabTenant { tenant, project, webhook, key_secret } = registered;
    let gitlab = fake_gitlab();
    let secrets: Api<Secret> = Api::namespaced(tenant.cluster.admin_client().await, PLATFORM_NAMESPACE);
    let pair = secrets.get(key_secret).await.expect("the generated key pair Secret");
    let public =
        pair.data.as_ref().and_then(|d| d.get("identity.pub")).map(|v| String::from_utf8_lossy(&v.0).into_owned());
    let keys = gitlab.deploy_keys(*project);
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(Some(keys[0].fingerprint.clone()), public.as_deref().and_then(fingerprint), "{keys:?}");
    assert!(!keys[0].can_push, "{keys:?}");
    // The generated Secret belongs to the registration: the garbage collector removes it after.
    let owner = pair.metadata.owner_references.unwrap_or_default();
    assert!(owner.iter().any(|o| o.kind == "TenantRepository" && o.name == tenant.ns), "{owner:?}");

    let registrations: Api<TenantRepository> = Api::namespaced(tenant.cluster.admin_client().await, PLATFORM_NAMESPACE);
    let path = registrations.get(&tenant.ns).await.expect("the registration").status.and_then(|s| s.webhook_path);
    let hooks = gitlab.hooks(*project);
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(Some(hooks[0].url.clone()), path.map(|path| format!("{external_url}{path}")), "{hooks:?}");
    assert_eq!(hooks[0].token.as_deref(), Some(webhook.token.as_str()));
}

#[tokio::test]
async fn deleting_a_gitlab_registration_removes_key_and_hook_then_releases_the_finalizer() {
    let test = "deleting_a_gitlab_registration_removes_key_and_hook_then_releases_the_finalizer";
    let Some(cluster) = support::cluster(test) else { return };
    let controller = support::controller(cluster).await;
    let _gitlab_up = GITLAB_STEPS.lock().await;
    let registered = onboard_gitlab(cluster, controller, &[("deploy/settings.yaml", CONFIG_MAP)]).await;
    assert_registered(&registered, &controller.external_url).await;
    let GitLabTenant { tenant, project, key_secret, .. } = &registered;

    let mark = cluster.audit_mark();
    delete_registration(cluster, &tenant.ns);
    until_registration_gone(tenant, &controller.log).await;
    let gitlab = fake_gitlab();
    assert!(gitlab.deploy_keys(*project).is_empty(), "the deploy key stayed: {:?}", gitlab.deploy_keys(*project));
    assert!(gitlab.hooks(*project).is_empty(), "the hook stayed: {:?}", gitlab.hooks(*project));

    // The key pair Secret goes with its owner, through the garbage collector.
    let secrets: Api<Secret> = Api::namespaced(cluster.admin_client().await, PLATFORM_NAMESPACE);
    let removed = tokio::time::timeout(CONVERGE, await_condition(secrets, key_secret, gone)).await;
    assert!(matches!(removed, Ok(Ok(_))), "the key pair Secret stayed: {removed:?}");

    // The finalizer was released by the controller, as itself, after the key and hook were
    // removed; the object was deleted by the admin and only went once the finalizer was gone.
    let events = cluster.audit_requests_until(mark, "the garbage collector's delete of the key pair", |events| {
        events.iter().any(|e| e.verb == "delete" && e.resource == "secrets" && e.name == *key_secret)
    });
    let releases: Vec<_> = events
        .iter()
        .filter(|e| e.user == CONTROLLER_USER && e.verb == "patch" && e.resource == "tenantrepositories")
        .filter(|e| e.name == tenant.ns && e.subresource.is_empty() && (200..300).contains(&e.code))
        .collect();
    assert_eq!(releases.len(), 1, "one finalizer release expected: {releases:#?}");
    let deletes: Vec<_> = events.iter().filter(|e| e.verb == "delete" && e.name == *key_secret).collect();
    assert!(deletes.iter().all(|e| e.user != CONTROLLER_USER && e.namespace == PLATFORM_NAMESPACE), "{deletes:#?}");
}

#[tokio::test]
async fn a_gitlab_registration_deleted_while_gitlab_is_down_keeps_its_finalizer_until_gitlab_is_back() {
    let test = "a_gitlab_registration_deleted_while_gitlab_is_down_keeps_its_finalizer_until_gitlab_is_back";
    let Some(cluster) = support::cluster(test) else { return };
    let controller = support::controller(cluster).await;
    let _outage = GITLAB_STEPS.lock().await;
    let registered = onboard_gitlab(cluster, controller, &[("deploy/settings.yaml", CONFIG_MAP)]).await;
    let GitLabTenant { tenant, project, webhook, .. } = &registered;
    let gitlab = fake_gitlab();

    // GitLab down behind its load balancer: every API request answers 502 until cleared.
    gitlab.inject(None, None, Fault::BadGateway, usize::MAX);
    delete_registration(cluster, &tenant.ns);
    let pending = |registration: Option<&TenantRepository>| {
        registration.is_some_and(|r| {
            r.metadata.deletion_timestamp.is_some()
                && r.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER)
                && r.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == CONDITION_TYPE && c.status == "False" && c.reason == REASON_CLEANUP_PENDING)
                })
        })
    };
    let held =
        tenant.registration_until("GitLabSynced=False/CleanupPending, finalizer kept", pending, &controller.log).await;
    let condition =
        held.status.expect("status").conditions.into_iter().find(|c| c.type_ == CONDITION_TYPE).expect("GitLabSynced");
    // The message says why (GitLab unavailable, the finalizer stays, the escape hatch) and
    // carries neither the bot token nor the webhook token.
    for expected in ["GitLabUnavailable", FINALIZER, "stays", "cdtarget.io/skip-gitlab-cleanup"] {
        assert!(condition.message.contains(expected), "{expected:?} missing: {}", condition.message);
    }
    for secret in [BOT_TOKEN, webhook.token.as_str()] {
        assert!(!condition.message.contains(secret), "a token in the condition: {}", condition.message);
    }
    assert_eq!(gitlab.deploy_keys(*project).len(), 1, "the deploy key went while GitLab was down");
    assert_eq!(gitlab.hooks(*project).len(), 1, "the hook went while GitLab was down");

    // GitLab is back; "reconcile now" instead of the 15 s retry.
    gitlab.clear_faults();
    tenant.request_reconcile("gitlab-back");
    until_registration_gone(tenant, &controller.log).await;
    assert!(gitlab.deploy_keys(*project).is_empty(), "the deploy key stayed: {:?}", gitlab.deploy_keys(*project));
    assert!(gitlab.hooks(*project).is_empty(), "the hook stayed: {:?}", gitlab.hooks(*project));
}

/// A registration condition: `status.gitlab.commitStatus` is `state` on `sha` (and, for
/// `failed`, the refusal of `sha` is commented).
fn posted(sha: &str, state: &'static str) -> impl Fn(Option<&TenantRepository>) -> bool {
    let sha = sha.to_owned();
    move |registration| {
        let gitlab = registration.and_then(|r| r.status.as_ref()).and_then(|s| s.gitlab.as_ref());
        gitlab.is_some_and(|g| {
            g.commit_status.as_ref().is_some_and(|c| c.sha == sha && c.state == state)
                && (state != "failed" || g.commented_sha.as_deref() == Some(sha.as_str()))
        })
    }
}

/// Requests the controller sent for commit statuses and comments of `project`, from the fake's
/// request log.
fn feedback_requests(project: i64) -> usize {
    let statuses = format!("/api/v4/projects/{project}/statuses/");
    let commits = format!("/api/v4/projects/{project}/repository/commits/");
    fake_gitlab().log().iter().filter(|line| line.contains(&statuses) || line.contains(&commits)).count()
}

/// Asks for a reconcile and waits until the controller finished it.
async fn reconcile_now(tenant: &Tenant, value: &str, log: &std::path::Path) {
    tenant.request_reconcile(value);
    let value = value.to_owned();
    let handled = move |r: Option<&TenantRepository>| {
        r.and_then(|r| r.status.as_ref()).and_then(|s| s.last_handled_reconcile_at.as_deref()) == Some(value.as_str())
    };
    tenant.registration_until("the requested reconcile handled", handled, log).await;
}

#[tokio::test]
async fn gitlab_shows_pending_then_success_and_a_refused_push_fails_with_one_comment_listing_every_problem() {
    let test = "gitlab_shows_pending_then_success_and_a_refused_push_fails_with_one_comment_listing_every_problem";
    let Some(cluster) = support::cluster(test) else { return };
    let controller = support::controller(cluster).await;
    let log = controller.log.as_path();
    let _gitlab_up = GITLAB_STEPS.lock().await;
    let registered = onboard_gitlab(cluster, controller, &[("deploy/settings.yaml", CONFIG_MAP)]).await;
    let GitLabTenant { tenant, project, webhook, .. } = &registered;
    let gitlab = fake_gitlab();
    let name = format!("cdtarget:{PLATFORM_NAMESPACE}/{}", tenant.ns);

    // A good push: pending when fetched, then success, one record, our name, the branch.
    let first = tenant.repo.head("main").expect("the first commit");
    tenant.registration_until("commit status success on the first commit", posted(&first, "success"), log).await;
    let records: Vec<_> = gitlab.statuses(*project).into_iter().filter(|r| r.sha == first).collect();
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = &records[0];
    assert_eq!((record.name.as_str(), record.git_ref.as_str()), (name.as_str(), "main"));
    assert_eq!(record.history, ["pending", "success"], "pending before the apply, then success");
    let description = record.description.clone().unwrap_or_default();
    assert!(description.contains("applied 1 objects"), "{description}");

    // A refused push: failed with the first problem, one comment with every problem and line.
    let broken = CDTARGET.replace("    - 10.20.0.10\n", "    - 10.30.8.5/24\n    - 300.1.1.1\n");
    let second = tenant.repo.commit_and_push(&[("deploy/agents.yaml", broken.as_str())], "broken agents");
    tenant.request_reconcile("broken");
    tenant.registration_until("commit status failed and commented", posted(&second, "failed"), log).await;
    let records: Vec<_> = gitlab.statuses(*project).into_iter().filter(|r| r.sha == second).collect();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0].history, ["pending", "failed"]);
    let description = records[0].description.clone().unwrap_or_default();
    assert!(description.starts_with("deploy/agents.yaml:1 (document 1): spec.ip[0]"), "{description}");
    assert!(description.chars().count() <= 255);
    let comments: Vec<_> = gitlab.comments(*project).into_iter().filter(|c| c.sha == second).collect();
    assert_eq!(comments.len(), 1, "{comments:#?}");
    let note = &comments[0].note;
    for expected in ["deploy/agents.yaml:1 (document 1): spec.ip[0]", "deploy/agents.yaml:1 (document 1): spec.ip[1]"] {
        assert!(note.contains(expected), "{expected:?} missing: {note}");
    }
    assert!(!note.contains(BOT_TOKEN) && !note.contains(&webhook.token), "a secret in the comment");
    assert!(gitlab.quick_actions().is_empty(), "{:?}", gitlab.quick_actions());

    // The same revision evaluated again (two reconciles): not one feedback request.
    let (requests, statuses, comments) =
        (feedback_requests(*project), gitlab.statuses(*project), gitlab.comments(*project));
    let writes = gitlab.state_document()["counts"]["statuses.create"]["writes"].clone();
    for n in 0..2 {
        reconcile_now(tenant, &format!("again-{n}"), log).await;
    }
    assert_eq!(feedback_requests(*project), requests, "{:#?}", gitlab.log());
    assert_eq!(gitlab.statuses(*project), statuses, "no new status record");
    assert_eq!(gitlab.comments(*project), comments, "no new comment");
    let state: serde_json::Value =
        reqwest::get(format!("{}/__state", gitlab.url())).await.expect("GET /__state").json().await.expect("JSON");
    assert_eq!(state["counts"]["statuses.create"]["writes"], writes, "{}", state["counts"]);
    support::report(&format!(
        "commit statuses: {} feedback requests for 2 revisions (pending+verdict each, 1 comment listing + 1 comment), 0 for 2 reconciles of an unchanged revision",
        requests
    ));
}
