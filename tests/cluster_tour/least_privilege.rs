//! Least privilege shown, not claimed (issue #12, point 3): a tour of everything the controller
//! does, then every request its own identity sent, from the whole audit log, against the rules
//! of `deploy/rbac.yaml` — every request granted, and every grant used.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use cdtarget::api::keda::{ScaledJob, ScaledObject, TriggerAuthentication};
use cdtarget::api::{CDTarget, TenantRepository};
use cdtarget::gitlab::{ROTATE_ANNOTATION, ROTATED_ANNOTATION};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::runtime::wait::await_condition;
use serde_json::Value;

use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, CONTROLLER_USER, CONVERGE, PLATFORM_NAMESPACE, Tenant, drift_network_policy, exists, gone,
    namespace, path_str, rotate_token,
};
use crate::common::control_plane::AuditMark;
use crate::common::fake_gitlab::{Push, fingerprint};
use crate::common::{AuditEvent, ControlPlane, test_dir};
use crate::support::{
    self, GITLAB_STEPS, GitLabTenant, TourController, WebhookSecret, delete_registration, fake_gitlab, onboard_gitlab,
    report, until_registration_gone, until_served,
};
use crate::webhook::retries;

/// Grants of `deploy/rbac.yaml` that no request of the tour shows, each with why it is needed
/// and where that is demonstrated. Everything else granted must be used by the tour.
const NOT_VISIBLE_AS_REQUESTS: [(&str, &str, &str, &str); 3] = [
    (
        "keda.sh",
        "triggerauthentications",
        "delete",
        "a CDTarget's TriggerAuthentication is rendered in both modes and dropped only once KEDA is \
         no longer rendered for: once discovery (every 5 minutes) no longer finds KEDA's CRDs, whose \
         removal deletes every TriggerAuthentication with them, so the controller finds none to \
         delete (removing one CRD of KEDA's would also take KEDA's kinds from this binary's other \
         tests); demonstrated as the controller's ServiceAccount by tests/cluster/inventory.rs",
    ),
    (
        "cdtarget.io",
        "cdtargets/finalizers",
        "update",
        "authorized inside the create of a child whose owner reference has blockOwnerDeletion, by \
         OwnerReferencesPermissionEnforcement (on in this binary's control plane; see \
         owner_references_that_block_deletion_need_update_on_the_owners_finalizers)",
    ),
    (
        "cdtarget.io",
        "tenantrepositories/finalizers",
        "update",
        "authorized inside the create of the generated key pair Secret (owned by its registration, \
         blockOwnerDeletion), by OwnerReferencesPermissionEnforcement, as above",
    ),
];

/// The OpenAPI v3 document of KEDA's API group, which the controller reads to tell KEDA's
/// release (src/controller/process/keda.rs): `system:discovery` grants `/openapi/*` to every
/// authenticated user, and no other document is read.
const KEDA_SCHEMAS: &str = "/openapi/v3/apis/keda.sh/v1alpha1";

/// Where a grant applies: everywhere (ClusterRole) or in one namespace (Role).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Cluster,
    Namespace(String),
}

/// One verb on one resource, as a rule of `deploy/rbac.yaml` grants it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    group: String,
    resource: String,
    verb: String,
    scope: Scope,
    names: Vec<String>,
}

/// One verb on one resource as the controller used it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Use {
    group: String,
    resource: String,
    verb: String,
    namespace: String,
    name: String,
}

impl Grant {
    fn covers(&self, used: &Use) -> bool {
        (self.group == used.group || self.group == "*")
            && (self.resource == used.resource || self.resource == "*")
            && (self.verb == used.verb || self.verb == "*")
            && match &self.scope {
                Scope::Cluster => true,
                Scope::Namespace(ns) => *ns == used.namespace,
            }
            && (self.names.is_empty() || self.names.contains(&used.name))
    }
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// The rules `deploy/rbac.yaml` binds to deploy/'s ServiceAccount: its ClusterRoles (bound by a
/// ClusterRoleBinding) everywhere, its Roles (bound by a RoleBinding) in their namespace.
fn granted() -> Vec<Grant> {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/rbac.yaml")).expect("rbac.yaml");
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).expect("deploy/rbac.yaml is YAML");
    let is_ours =
        |subjects: &Value| {
            subjects.as_array().into_iter().flatten().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == "cdtarget" && s["namespace"] == PLATFORM_NAMESPACE
            })
        };
    // (kind of role, role name, namespace of the binding) bound to the ServiceAccount.
    let bound: BTreeSet<(String, String, String)> = documents
        .iter()
        .filter(|d| matches!(d["kind"].as_str(), Some("ClusterRoleBinding" | "RoleBinding")) && is_ours(&d["subjects"]))
        .map(|d| {
            let role = &d["roleRef"];
            let namespace = d["metadata"]["namespace"].as_str().unwrap_or_default();
            (
                role["kind"].as_str().unwrap_or_default().to_owned(),
                role["name"].as_str().unwrap_or_default().to_owned(),
                namespace.to_owned(),
            )
        })
        .collect();
    let mut grants = Vec::new();
    for document in &documents {
        let (Some(kind @ ("ClusterRole" | "Role")), Some(name)) =
            (document["kind"].as_str(), document["metadata"]["name"].as_str())
        else {
            continue;
        };
        let namespace = document["metadata"]["namespace"].as_str().unwrap_or_default();
        let scope = match kind {
            "ClusterRole" if bound.contains(&("ClusterRole".to_owned(), name.to_owned(), String::new())) => {
                Scope::Cluster
            }
            "Role" if bound.contains(&("Role".to_owned(), name.to_owned(), namespace.to_owned())) => {
                Scope::Namespace(namespace.to_owned())
            }
            _ => continue,
        };
        for rule in document["rules"].as_array().into_iter().flatten() {
            assert!(rule.get("nonResourceURLs").is_none(), "a nonResourceURLs rule: {rule}");
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        grants.push(Grant {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            scope: scope.clone(),
                            names: strings(&rule["resourceNames"]),
                        });
                    }
                }
            }
        }
    }
    grants
}

/// What the controller's own identity did, from `events`: its requests (a server-side apply that
/// created its object, answered 201, is a `create` too: the API server authorizes one for it),
/// and, for requests it sent as someone else, `impersonate` on that ServiceAccount.
fn used(events: &[AuditEvent]) -> (Vec<Use>, BTreeSet<String>) {
    let mut uses = Vec::new();
    let mut non_resource = BTreeSet::new();
    for event in events.iter().filter(|e| e.user == CONTROLLER_USER) {
        if let Some(acting) = &event.impersonated_user {
            let account = acting.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':'));
            let (namespace, name) = account.unwrap_or_else(|| panic!("impersonated a non-ServiceAccount: {acting}"));
            let verb = "impersonate".to_owned();
            uses.push(Use {
                group: String::new(),
                resource: "serviceaccounts".into(),
                verb,
                namespace: namespace.into(),
                name: name.into(),
            });
            continue;
        }
        if event.resource.is_empty() {
            non_resource.insert(event.uri.split('?').next().unwrap_or_default().to_owned());
            continue;
        }
        let mut add = |verb: &str| {
            uses.push(Use {
                group: event.api_group.clone(),
                resource: event.full_resource(),
                verb: verb.to_owned(),
                namespace: event.namespace.clone(),
                name: event.name.clone(),
            });
        };
        add(&event.verb);
        if event.verb == "patch" && event.code == 201 {
            add("create");
        }
    }
    (uses, non_resource)
}

/// `group/resource` as RBAC rules and the table name it (`""` is the core group).
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_owned() } else { format!("{group}/{resource}") }
}

fn scope_of(namespace: &str) -> &'static str {
    match namespace {
        "" => "cluster-wide",
        PLATFORM_NAMESPACE => PLATFORM_NAMESPACE,
        _ => "tenant namespaces",
    }
}

/// The table of (resource, verb): where it is granted, how often and where it was used.
fn table(grants: &[Grant], uses: &[Use]) -> String {
    // (resource, verb) → (granted by, requests by scope).
    type Row = (BTreeSet<String>, BTreeMap<&'static str, usize>);
    let mut rows: BTreeMap<(String, String), Row> = BTreeMap::new();
    for grant in grants {
        let by = match &grant.scope {
            Scope::Cluster => "ClusterRole".to_owned(),
            Scope::Namespace(ns) => format!("Role in {ns}"),
        };
        rows.entry((qualified(&grant.group, &grant.resource), grant.verb.clone())).or_default().0.insert(by);
    }
    for used in uses {
        let row = rows.entry((qualified(&used.group, &used.resource), used.verb.clone())).or_default();
        *row.1.entry(scope_of(&used.namespace)).or_default() += 1;
    }
    let mut text = format!("{:<44} {:<12} {:<28} {}\n", "resource", "verb", "granted by", "used (requests by scope)");
    for ((resource, verb), (by, scopes)) in rows {
        let by = if by.is_empty() { "NOT GRANTED".to_owned() } else { by.into_iter().collect::<Vec<_>>().join(", ") };
        let exempt = NOT_VISIBLE_AS_REQUESTS
            .iter()
            .any(|(group, plural, v, _)| qualified(group, plural) == resource && *v == verb);
        let used = if scopes.is_empty() && exempt {
            "no request shows it (exempt: see NOT_VISIBLE_AS_REQUESTS)".to_owned()
        } else if scopes.is_empty() {
            "not used".to_owned()
        } else {
            scopes.iter().map(|(scope, n)| format!("{n} {scope}")).collect::<Vec<_>>().join(", ")
        };
        text.push_str(&format!("{resource:<44} {verb:<12} {by:<28} {used}\n"));
    }
    text
}

/// A condition: the CDTarget's `Ready` condition has `reason`.
fn ready_with(reason: String) -> impl Fn(Option<&CDTarget>) -> bool {
    move |target| {
        target
            .and_then(|t| t.status.as_ref())
            .is_some_and(|status| status.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == reason))
    }
}

fn ready_reason(target: &CDTarget) -> Option<String> {
    target.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone())
}

/// The pod template's `cdtarget.io/secrets-digest` of a Deployment.
fn secrets_digest(deployment: &Deployment) -> Option<String> {
    let template = deployment.spec.as_ref()?.template.metadata.as_ref()?;
    template.annotations.as_ref()?.get("cdtarget.io/secrets-digest").cloned()
}

/// Every step of the tour but the GitLab registration: onboarding, the first apply with all four
/// children, a webhook-triggered sync, a child's drift repaired, the token Secret rotated, then
/// deleted and created again, the CDTarget switched to Job mode and back, and the CDTarget
/// pruned through another delivery.
async fn tour_of_a_tenant(cluster: &'static ControlPlane, controller: &TourController) {
    let log = controller.log.as_path();
    let webhook = WebhookSecret::create(cluster);
    let tenant = Tenant::onboard_with(
        cluster,
        &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)],
        &webhook.spec(),
    );

    // The first apply: the tenant's objects and the four children (KEDA's CRDs are installed).
    tenant.until::<ConfigMap, _>("the tenant's ConfigMap", "pipeline-settings", exists, log).await;
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy child", "deploy-agents", exists, log).await;
    tenant.until::<Deployment, _>("the Deployment child", "deploy-agents", exists, log).await;
    tenant.until::<ScaledObject, _>("the ScaledObject child", "deploy-agents", exists, log).await;
    tenant.until::<TriggerAuthentication, _>("the TriggerAuthentication child", "deploy-agents", exists, log).await;
    let targets: Api<CDTarget> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let settled = |t: Option<&CDTarget>| t.and_then(ready_reason).is_some();
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", settled, log).await;
    let reason = ready_reason(&targets.get("deploy-agents").await.expect("the CDTarget")).expect("Ready");

    // A push announced by GitLab's webhook.
    let path = tenant
        .registration_until(
            "status.webhookPath",
            |r: Option<&TenantRepository>| r.and_then(|r| r.status.as_ref()).is_some_and(|s| s.webhook_path.is_some()),
            log,
        )
        .await
        .status
        .and_then(|s| s.webhook_path)
        .expect("status.webhookPath");
    until_served(log, &tenant.ns);
    let gitlab = fake_gitlab();
    let project = gitlab.add_project(&format!("tour/{}", tenant.ns));
    gitlab.seed_hook(project, &format!("{}{path}", controller.external_url), "cdtarget", Some(&webhook.token));
    let pushed = tenant.repo.commit_and_push(&[("deploy/settings.yaml", CONFIG_MAP.replace("\"3\"", "\"4\""))], "4");
    let deliveries = gitlab.emit_push(project, &Push::branch("main", &pushed)).await;
    assert_eq!(deliveries.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(202)], "{deliveries:#?}");
    tenant.until::<ConfigMap, _>("the pushed ConfigMap", "pipeline-settings", retries("4"), log).await;

    // A child changed with kubectl, repaired through the watch.
    let policies: Api<NetworkPolicy> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let rendered = policies.get("deploy-agents").await.expect("the NetworkPolicy").spec;
    drift_network_policy(cluster, &tenant.ns);
    let restored = move |object: Option<&NetworkPolicy>| object.is_some_and(|policy| policy.spec == rendered);
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy repaired", "deploy-agents", restored, log).await;

    // The token Secret rotated: the agents roll.
    let deployments: Api<Deployment> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let before = secrets_digest(&deployments.get("deploy-agents").await.expect("the Deployment"));
    rotate_token(cluster, &tenant.ns);
    let rolled = move |d: Option<&Deployment>| d.and_then(secrets_digest).is_some_and(|digest| Some(digest) != before);
    tenant.until::<Deployment, _>("the agents rolled", "deploy-agents", rolled, log).await;

    // The token Secret deleted, then created again: Ready goes to SecretNotFound and back (two
    // more Events, each created: a repeated Event is a new one, never a patch).
    cluster.kubectl(&["delete", "secret", "azp-token", "-n", &tenant.ns]).success();
    let missing = ready_with(cdtarget::api::conditions::REASON_SECRET_NOT_FOUND.to_owned());
    tenant.until::<CDTarget, _>("Ready=False/SecretNotFound", "deploy-agents", missing, log).await;
    let token = ["create", "secret", "generic", "azp-token", "-n", &tenant.ns, "--from-literal=AZP_TOKEN=again"];
    cluster.kubectl(&token).success();
    tenant.until::<CDTarget, _>("Ready as before", "deploy-agents", ready_with(reason), log).await;

    // `spec.mode: Job` pushed: a ScaledJob, and the Deployment and ScaledObject deleted by the
    // controller (their controller owner is the CDTarget); each reconcile lists the agent Jobs
    // KEDA made (none: no KEDA operator runs here). Then back to Deployment mode: the ScaledJob
    // deleted. The deletions are the controller's own requests (the garbage collector removes
    // only the ReplicaSets and pods of a deleted Deployment).
    let job_mode = CDTARGET.replacen("spec:\n", "spec:\n  mode: Job\n", 1);
    let pushed = tenant.repo.commit_and_push(&[("deploy/agents.yaml", job_mode)], "job mode");
    let deliveries = gitlab.emit_push(project, &Push::branch("main", &pushed)).await;
    assert_eq!(deliveries.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(202)], "{deliveries:#?}");
    tenant.until::<ScaledJob, _>("the ScaledJob child", "deploy-agents", exists, log).await;
    tenant.until::<Deployment, _>("the Deployment deleted in Job mode", "deploy-agents", gone, log).await;
    tenant.until::<ScaledObject, _>("the ScaledObject deleted in Job mode", "deploy-agents", gone, log).await;
    let pushed = tenant.repo.commit_and_push(&[("deploy/agents.yaml", CDTARGET)], "deployment mode");
    let deliveries = gitlab.emit_push(project, &Push::branch("main", &pushed)).await;
    assert_eq!(deliveries.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(202)], "{deliveries:#?}");
    tenant.until::<ScaledJob, _>("the ScaledJob deleted in Deployment mode", "deploy-agents", gone, log).await;
    tenant.until::<Deployment, _>("the Deployment child again", "deploy-agents", exists, log).await;
    tenant.until::<ScaledObject, _>("the ScaledObject child again", "deploy-agents", exists, log).await;
    let deleted_by_the_controller = |events: &[AuditEvent]| {
        ["deployments", "scaledobjects", "scaledjobs"].iter().all(|resource| {
            events.iter().any(|e| {
                e.user == CONTROLLER_USER
                    && e.verb == "delete"
                    && e.full_resource() == *resource
                    && e.namespace == tenant.ns
                    && e.name == "deploy-agents"
                    && e.code == 200
            })
        })
    };
    cluster.audit_requests_until(
        AuditMark::START,
        "the controller's deletions of a mode switch",
        deleted_by_the_controller,
    );

    // The CDTarget removed from Git and pruned (announced by another delivery); its children go
    // through the garbage collector.
    let pruned = tenant.repo.remove_file("deploy/agents.yaml", "agents go");
    tenant.repo.push("main");
    let deliveries = gitlab.emit_push(project, &Push::branch("main", &pruned)).await;
    assert_eq!(deliveries.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(202)], "{deliveries:#?}");
    tenant.until::<CDTarget, _>("the CDTarget pruned", "deploy-agents", gone, log).await;
    tenant.until::<Deployment, _>("the Deployment child removed", "deploy-agents", gone, log).await;
}

/// The GitLab part of the tour: a registration with `spec.gitlab` registered (finalizer, key pair
/// Secret generated), its deploy key rotated, then deleted (key and hook removed, finalizer
/// released). Returns the registration's name.
async fn tour_of_a_gitlab_registration(cluster: &'static ControlPlane, controller: &TourController) -> String {
    let _gitlab_up = GITLAB_STEPS.lock().await;
    let log = controller.log.as_path();
    let GitLabTenant { tenant, project, key_secret, .. } =
        onboard_gitlab(cluster, controller, &[("deploy/settings.yaml", CONFIG_MAP)]).await;

    let secrets: Api<Secret> = Api::namespaced(cluster.admin_client().await, PLATFORM_NAMESPACE);
    let annotation = format!("{ROTATE_ANNOTATION}=tour");
    cluster.kubectl(&["annotate", "-n", PLATFORM_NAMESPACE, "tenantrepository", &tenant.ns, &annotation]).success();
    let rotated = |secret: Option<&Secret>| {
        secret.is_some_and(|s| {
            s.metadata.annotations.iter().flatten().any(|(k, v)| k == ROTATED_ANNOTATION && v == "tour")
        })
    };
    let outcome = tokio::time::timeout(CONVERGE, await_condition(secrets.clone(), &key_secret, rotated)).await;
    assert!(matches!(outcome, Ok(Ok(_))), "the deploy key not rotated: {outcome:?}{}", tenant.diagnostics(log));
    let pair = secrets.get(&key_secret).await.expect("the key pair Secret");
    let public = pair.data.and_then(|d| d.get("identity.pub").map(|v| String::from_utf8_lossy(&v.0).into_owned()));
    let new_key = public.as_deref().and_then(fingerprint).expect("the new key's fingerprint");
    // The sync that follows the rotation in the same reconcile removes the old key; its status
    // write, at the end of that reconcile, records the new key's id.
    let new_id = fake_gitlab()
        .deploy_keys(project)
        .iter()
        .find(|k| k.fingerprint == new_key)
        .map(|k| k.id)
        .expect("the new key on the project");
    let recorded = move |r: Option<&TenantRepository>| {
        r.and_then(|r| r.status.as_ref()?.gitlab.as_ref()?.deploy_key_id) == Some(new_id)
    };
    tenant.registration_until("status.gitlab.deployKeyId = the new key", recorded, log).await;
    let keys = fake_gitlab().deploy_keys(project);
    assert!(keys.len() == 1 && keys[0].id == new_id, "after the rotation: {keys:?}");

    delete_registration(cluster, &tenant.ns);
    until_registration_gone(&tenant, log).await;
    assert!(fake_gitlab().deploy_keys(project).is_empty() && fake_gitlab().hooks(project).is_empty());
    tenant.ns.clone()
}

#[tokio::test]
async fn a_full_tour_uses_every_grant_of_deploy_rbac_and_needs_no_other() {
    let test = "a_full_tour_uses_every_grant_of_deploy_rbac_and_needs_no_other";
    let Some(cluster) = support::cluster(test) else { return };
    let controller = support::controller(cluster).await;

    tour_of_a_tenant(cluster, controller).await;
    let gitlab_registration = tour_of_a_gitlab_registration(cluster, controller).await;

    // The leader Lease is held by this controller.
    let leases: Api<Lease> = Api::namespaced(cluster.admin_client().await, PLATFORM_NAMESPACE);
    let lease = leases.get("cdtarget-controller").await.expect("the leader Lease");
    let holder = lease.spec.and_then(|spec| spec.holder_identity);
    assert_eq!(holder.as_deref(), Some(controller.identity.as_str()));

    // The whole audit log, once the last writes of the tour are in it: the finalizer's release,
    // the second patch of that registration (the first added the finalizer), and the deletion of
    // its SyncStatus once it is gone.
    let events = cluster.audit_requests_until(AuditMark::START, "the finalizer's release", |events| {
        let patches = events.iter().filter(|e| {
            e.user == CONTROLLER_USER
                && e.verb == "patch"
                && e.full_resource() == "tenantrepositories"
                && e.name == gitlab_registration
                && e.code == 200
        });
        let sync_status_deleted = events.iter().any(|e| {
            e.user == CONTROLLER_USER
                && e.verb == "delete"
                && e.full_resource() == "syncstatuses"
                && e.name == gitlab_registration
        });
        patches.count() >= 2 && sync_status_deleted
    });
    let grants = granted();
    let (uses, non_resource) = used(&events);
    report(&format!(
        "least privilege: {} requests of {CONTROLLER_USER} in the audit log; (verb, resource) used vs granted by deploy/rbac.yaml:\n{}non-resource URLs (system:discovery, no rule in deploy/rbac.yaml): {}",
        events.iter().filter(|e| e.user == CONTROLLER_USER).count(),
        table(&grants, &uses),
        non_resource.iter().cloned().collect::<Vec<_>>().join(" ")
    ));
    let impersonated: BTreeSet<String> = uses
        .iter()
        .filter(|u| u.verb == "impersonate")
        .map(|u| format!("system:serviceaccount:{}:{}", u.namespace, u.name))
        .collect();
    report(&format!(
        "impersonated (impersonate serviceaccounts): {}",
        impersonated.into_iter().collect::<Vec<_>>().join(" ")
    ));

    // (a) Every request of the controller's own identity was allowed, and deploy/rbac.yaml is
    // what allowed it.
    let refused: Vec<&AuditEvent> =
        events.iter().filter(|e| e.user == CONTROLLER_USER && e.impersonated_user.is_none() && e.code == 403).collect();
    assert!(refused.is_empty(), "requests refused to the controller: {refused:#?}");
    let ungranted: BTreeSet<String> = uses
        .iter()
        .filter(|u| !grants.iter().any(|g| g.covers(u)))
        .map(|u| format!("{} {} in {:?}", u.verb, qualified(&u.group, &u.resource), u.namespace))
        .collect();
    assert!(ungranted.is_empty(), "used but not granted by deploy/rbac.yaml: {ungranted:#?}");
    for path in &non_resource {
        let discovery = path.starts_with("/api") || path == "/version" || path == KEDA_SCHEMAS;
        assert!(discovery, "a non-resource request beyond discovery: {path}");
    }

    // (b) Every grant is used, within its scope; a ClusterRole grant also outside the platform
    // namespace (else it belongs in the Role). Only the grants no request can show are exempt.
    let exempt = |g: &Grant| {
        NOT_VISIBLE_AS_REQUESTS
            .iter()
            .any(|(group, resource, verb, _)| g.group == *group && g.resource == *resource && g.verb == *verb)
    };
    let unused: Vec<String> = grants
        .iter()
        .filter(|g| !exempt(g))
        .filter(|g| {
            let outside = |u: &&Use| g.scope != Scope::Cluster || u.namespace != PLATFORM_NAMESPACE;
            !uses.iter().filter(|u| g.covers(u)).any(|u| outside(&u))
        })
        .map(|g| format!("{} {} ({:?})", g.verb, qualified(&g.group, &g.resource), g.scope))
        .collect();
    assert!(unused.is_empty(), "granted by deploy/rbac.yaml but not used as granted: {unused:#?}");
    // The exemptions are grants that exist (a narrowed file drops them here too).
    for (group, resource, verb, why) in NOT_VISIBLE_AS_REQUESTS {
        assert!(
            grants.iter().any(|g| g.group == group && g.resource == resource && g.verb == verb),
            "exempted but not granted: {verb} {resource} ({why})"
        );
    }
}

/// An owner reference with `blockOwnerDeletion: true`, to `kind` `name` (`uid` made up: the
/// admission plugin checks rights, not the owner).
fn owned_object(kind_yaml: &str, owner_api_version: &str, owner_kind: &str, owner: &str, block: bool) -> String {
    format!(
        "{kind_yaml}  ownerReferences:\n    - apiVersion: {owner_api_version}\n      kind: {owner_kind}\n      name: {owner}\n      uid: 00000000-0000-0000-0000-000000000001\n      controller: true\n      blockOwnerDeletion: {block}\n"
    )
}

#[tokio::test]
async fn owner_references_that_block_deletion_need_update_on_the_owners_finalizers() {
    let test = "owner_references_that_block_deletion_need_update_on_the_owners_finalizers";
    let Some(cluster) = support::cluster(test) else { return };
    let ns = namespace(cluster, "owner-refs");
    let dir = test_dir();
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        fs::write(&path, text).expect("write a manifest");
        path
    };
    let policy = |block| {
        let head = format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: probe\n  namespace: {ns}\n"
        );
        let object = owned_object(&head, "cdtarget.io/v1alpha1", "CDTarget", "deploy-agents", block);
        format!("{object}spec:\n  podSelector: {{}}\n  policyTypes: [Egress]\n")
    };
    let blocking = write("blocking.yaml", policy(true));
    let plain = write("plain.yaml", policy(false));
    let secret_head =
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: probe-key\n  namespace: {PLATFORM_NAMESPACE}\n");
    let key_pair =
        write("key-pair.yaml", owned_object(&secret_head, "cdtarget.io/v1alpha1", "TenantRepository", "app", true));

    // Someone who may create NetworkPolicies there and has no right on CDTargets.
    cluster.kubectl(&["create", "serviceaccount", "writer", "-n", &ns]).success();
    let role = ["create", "role", "writer", "-n", &ns, "--verb=create", "--resource=networkpolicies.networking.k8s.io"];
    cluster.kubectl(&role).success();
    cluster
        .kubectl(&[
            "create",
            "rolebinding",
            "writer",
            "-n",
            &ns,
            "--role=writer",
            &format!("--serviceaccount={ns}:writer"),
        ])
        .success();
    let writer = format!("--as=system:serviceaccount:{ns}:writer");
    let controller = format!("--as={CONTROLLER_USER}");
    let create =
        |file: &Path, as_user: &str| cluster.kubectl(&["create", "--dry-run=server", "-f", path_str(file), as_user]);

    let refused = create(&blocking, &writer).failure();
    assert!(
        refused.contains(
            "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on"
        ),
        "{refused}"
    );
    create(&plain, &writer).success();
    // deploy/'s ServiceAccount may: its `update` on cdtargets/finalizers and
    // tenantrepositories/finalizers.
    create(&blocking, &controller).success();
    create(&key_pair, &controller).success();
}
