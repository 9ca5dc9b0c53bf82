//! The periodic passes over an unchanged tenant write nothing: the CDTarget reconciler's resync
//! (`--cdtarget-resync-interval`) and the registration's poll (`spec.interval`), each run
//! several times on their own timers, send no mutating request (docs/operations.md). The one
//! `create` they may send is a SubjectAccessReview, which the API server answers and stores
//! nowhere; it is named as the exception and counted. Runs on a control plane of its own
//! ([`crate::own`]): the controller needs a short resync, and a second controller on the shared
//! control plane would reconcile the same objects as the shared one.

use std::time::{Duration, Instant};

use cdtarget::api::CDTarget;

use crate::common::AuditEvent;
use crate::common::cluster::own_installed_cluster;
use crate::common::cluster::{CDTARGET, CONFIG_MAP, CONTROLLER_USER, Controller, PLATFORM_NAMESPACE, Tenant, applied};
use crate::common::control_plane::until_appended;
use crate::kit::target_applied;

/// How many passes of each reconciler the test waits for.
const PASSES: usize = 3;

/// A SubjectAccessReview: a question to the authorizer, answered in the response and stored
/// nowhere. The CDTarget reconciler asks one per referenced Secret or ConfigMap and tenant
/// identity, reused by the passes of the next `REVIEW_TTL` (docs/operations.md, "What a CDTarget
/// may reference").
fn is_access_review(event: &AuditEvent) -> bool {
    event.verb == "create" && event.api_group == "authorization.k8s.io" && event.resource == "subjectaccessreviews"
}

/// The leader-election Lease's renewals: the process's, not a reconciler's.
fn is_lease_renewal(event: &AuditEvent) -> bool {
    event.api_group == "coordination.k8s.io" && event.resource == "leases" && event.namespace == PLATFORM_NAMESPACE
}

#[tokio::test]
async fn the_periodic_resync_and_poll_of_an_unchanged_tenant_send_no_mutating_request() {
    let test = "the_periodic_resync_and_poll_of_an_unchanged_tenant_send_no_mutating_request";
    // A control plane of its own: see docs/testing.md ("Two cases run on a control plane of their own").
    let Some(own) = own_installed_cluster(test) else { return };
    let cluster = own.cluster();
    let controller = Controller::start(cluster, "resync", &["--cdtarget-resync-interval", "2s"]).await;
    let log = controller.log();
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    // Polls every 2 s (plus jitter) instead of the kit's 5 minutes.
    tenant.patch_registration(r#"{"spec":{"interval":"2s"}}"#);
    tenant.until::<CDTarget, _>("Applied=True", "deploy-agents", target_applied("True", "Applied"), log).await;
    // Settled: the CDTarget has read back the agents it wrote (no Deployment controller or
    // kubelet runs here, so they never become available); an unchanged tenant from here on.
    let settled_target = |target: Option<&CDTarget>| {
        target.and_then(|t| t.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.reason == "AgentsNotAvailable" && !c.message.contains("just written"))
        })
    };
    tenant.until::<CDTarget, _>("Ready=False/AgentsNotAvailable, settled", "deploy-agents", settled_target, log).await;
    let settled = |registration: Option<&cdtarget::api::TenantRepository>| {
        applied("True", "Succeeded")(registration)
            && registration
                .is_some_and(|r| r.status.as_ref().and_then(|s| s.observed_generation) == r.metadata.generation)
    };
    tenant.registration_until("Applied=True at the 2 s interval", settled, log).await;

    // Await the passes themselves in the audit log: each CDTarget pass reads its children as the
    // controller, each poll reads the applied objects as the tenant (the drift check).
    let resyncs = |events: &[AuditEvent]| {
        events
            .iter()
            .filter(|e| e.verb == "get" && e.resource == "deployments" && e.namespace == tenant.ns)
            .filter(|e| e.name == "deploy-agents" && e.user == CONTROLLER_USER && e.impersonated_user.is_none())
            .count()
    };
    let polls = |events: &[AuditEvent]| {
        events
            .iter()
            .filter(|e| e.verb == "get" && e.resource == "cdtargets" && e.namespace == tenant.ns)
            .filter(|e| e.name == "deploy-agents" && e.user == CONTROLLER_USER && e.acting_user() == tenant.user())
            .count()
    };
    let started = Instant::now();
    let mark = cluster.audit_mark();
    let events = until_appended(&cluster.audit_log(), Duration::from_secs(90), "three resyncs and three polls", || {
        let events = cluster.audit_requests_since(mark);
        (resyncs(&events) >= PASSES && polls(&events) >= PASSES).then_some(events)
    });
    let window = started.elapsed();

    // Nobody else changed anything the reconcilers watch meanwhile: every pass was a periodic one.
    let changes: Vec<String> = events
        .iter()
        .filter(|e| e.user != CONTROLLER_USER && e.is_mutating() && (200..300).contains(&e.code))
        .filter(|e| e.namespace == tenant.ns || (e.resource == "tenantrepositories" && e.name == tenant.ns))
        .map(|e| format!("{} {} {}/{} as {}", e.user, e.verb, e.full_resource(), e.name, e.acting_user()))
        .collect();
    assert!(changes.is_empty(), "changes during the window: {changes:#?}");

    // What the controller sent that is not a read: SubjectAccessReviews and Lease renewals only.
    let mut reviews = 0;
    let mut renewals = 0;
    let mut writes = Vec::new();
    for event in events.iter().filter(|e| e.user == CONTROLLER_USER && e.is_mutating()) {
        if is_access_review(event) {
            reviews += 1;
        } else if is_lease_renewal(event) {
            renewals += 1;
        } else {
            writes.push(format!(
                "{} {}/{} in {:?} as {}",
                event.verb,
                event.full_resource(),
                event.name,
                event.namespace,
                event.acting_user()
            ));
        }
    }
    let (resynced, polled) = (resyncs(&events), polls(&events));
    eprintln!(
        "[{test}] {resynced} CDTarget resyncs and {polled} polls in {:.1} s: {reviews} SubjectAccessReviews, {renewals} Lease renewals, {} other mutating requests",
        window.as_secs_f64(),
        writes.len()
    );
    assert!(writes.is_empty(), "mutating requests of unchanged passes: {writes:#?}");
    // One Secret, one tenant identity: a review per `REVIEW_TTL` at most, shared by the passes
    // within it (a pass whose review came before the mark counts as read but not as asked).
    let most = window.as_secs() / cdtarget::controller::cdtarget::REVIEW_TTL.as_secs() + 1;
    assert!(
        reviews as u64 <= most,
        "{reviews} SubjectAccessReviews in {:.1} s for {resynced} passes",
        window.as_secs_f64()
    );
}
