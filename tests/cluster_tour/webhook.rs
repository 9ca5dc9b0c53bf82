//! Push → webhook → applied: GitLab's webhook emitter (the fake's, with GitLab's headers) posts a
//! push event over real HTTP to the registration's `status.webhookPath` on the controller's
//! receiver, and the pushed revision is applied on the real API server.

use std::time::Instant;

use cdtarget::api::TenantRepository;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::common::cluster::{CONFIG_MAP, PLATFORM_NAMESPACE, Tenant, accepted_writes_as, applied};
use crate::common::fake_gitlab::Push;
use crate::support::{self, WebhookSecret, fake_gitlab, report, until_served};

/// A condition: `pipeline-settings` holds `RETRIES: <retries>`.
pub fn retries(value: &'static str) -> impl Fn(Option<&ConfigMap>) -> bool {
    move |object| {
        object
            .and_then(|map| map.data.as_ref())
            .is_some_and(|data| data.get("RETRIES").map(String::as_str) == Some(value))
    }
}

#[tokio::test]
async fn a_gitlab_push_delivered_to_the_webhook_path_applies_the_new_revision() {
    let test = "a_gitlab_push_delivered_to_the_webhook_path_applies_the_new_revision";
    let Some(cluster) = support::cluster(test) else { return };
    let controller = support::controller(cluster).await;
    let log = controller.log.as_path();
    // Registration interval 5m (Tenant::onboard_with): no poll comes during the test.
    let webhook = WebhookSecret::create(cluster);
    let tenant = Tenant::onboard_with(cluster, &[("deploy/settings.yaml", CONFIG_MAP)], &webhook.spec());
    let first = tenant.repo.head("main").expect("the first commit");
    let settled = tenant.registration_until("Applied=True", applied("True", "Succeeded"), log).await;
    let status = settled.status.expect("status");
    assert_eq!(status.last_applied_revision.as_deref(), Some(first.as_str()));
    let path = status.webhook_path.expect("status.webhookPath");
    until_served(log, &tenant.ns);

    // The hook as docs/webhooks.md (step 5) has a person add it on the GitLab project.
    let gitlab = fake_gitlab();
    let project = gitlab.add_project(&format!("tour/{}", tenant.ns));
    gitlab.seed_hook(project, &format!("{}{path}", controller.external_url), "cdtarget", Some(&webhook.token));

    let second = tenant.repo.commit_and_push(&[("deploy/settings.yaml", CONFIG_MAP.replace("\"3\"", "\"4\""))], "4");
    let registrations: Api<TenantRepository> = Api::namespaced(cluster.admin_client().await, PLATFORM_NAMESPACE);
    let before = registrations.get(&tenant.ns).await.expect("the registration").status.expect("status");
    assert_eq!(before.last_fetched_revision.as_deref(), Some(first.as_str()), "fetched before the delivery");

    let mark = cluster.audit_mark();
    let sent = Instant::now();
    let deliveries = gitlab.emit_push(project, &Push::branch("main", &second)).await;
    assert_eq!(deliveries.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(202)], "{deliveries:#?}");
    tenant.until::<ConfigMap, _>("the pushed ConfigMap", "pipeline-settings", retries("4"), log).await;
    let latency = sent.elapsed();
    report(&format!(
        "push -> webhook -> applied: {} ms from sending the GitLab push event to the changed ConfigMap seen by a watch",
        latency.as_millis()
    ));

    // The revision applied is the pushed one, fetched after the delivery: the apply of the
    // ConfigMap, as the tenant, is in the audit log after the mark taken before sending.
    let revision = |r: Option<&TenantRepository>| {
        r.and_then(|r| r.status.as_ref()).is_some_and(|s| s.last_applied_revision.as_deref() == Some(second.as_str()))
    };
    tenant.registration_until("status.lastAppliedRevision = the pushed commit", revision, log).await;
    let events = cluster.audit_requests_until(mark, "the ConfigMap write", |events| {
        !accepted_writes_as(events, &tenant.ns, "configmaps", "pipeline-settings").is_empty()
    });
    let writers = accepted_writes_as(&events, &tenant.ns, "configmaps", "pipeline-settings");
    assert!(writers.iter().all(|user| *user == tenant.user()), "{writers:?}");

    // The receiver logged the accepted delivery by registration, never with the token or path.
    let text = std::fs::read_to_string(log).expect("the controller log");
    let accepted = format!("registration={PLATFORM_NAMESPACE}/{}", tenant.ns);
    assert!(text.lines().any(|l| l.contains("webhook: sync requested") && l.contains(&accepted)), "{text}");
    assert!(!text.contains(&webhook.token) && !text.contains(&path), "a webhook secret in the controller log");
}
