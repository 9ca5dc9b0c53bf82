//! What the fault scenarios share: tenant sets of many objects committed as a whole, the Lease,
//! the wait for the first write as the tenant (the moment to kill a controller mid-apply), and
//! the check that what exists, what the registration's inventory says and what Git holds agree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use cdtarget::api::keda::{ScaledObject, TriggerAuthentication};
use cdtarget::api::{CDTarget, TenantRepository, labels};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ListParams;
use kube::runtime::wait::await_condition;
use kube::{Api, Resource, ResourceExt};

use crate::common::cluster::{CONTROLLER_USER, CONVERGE, PLATFORM_NAMESPACE, Tenant, exists, gone, ready};
use crate::common::control_plane::{AuditMark, until_appended};
use crate::common::{AuditEvent, ControlPlane, git};

/// Fault tests run one at a time (each on a control plane of its own): a fault's window (a
/// controller killed, kube-apiserver restarting, etcd away for 30 s) is what is measured, and a
/// second control plane starting or applying dozens of objects on the same two cores would blur
/// the takeover and recovery figures; a port freed by a kill also stays free for its restart.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The Lease `deploy/` and the controller's defaults use.
pub const LEASE: &str = "cdtarget-controller";

/// A tenant's set as Git holds it: ConfigMaps and CDTargets, by name. Each object is a file of
/// its own under `deploy/`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    /// ConfigMap names.
    pub config_maps: BTreeSet<String>,
    /// CDTarget names.
    pub targets: BTreeSet<String>,
}

impl Set {
    /// One ConfigMap (`pipeline-settings`) and one CDTarget (`deploy-agents`), as the kit's
    /// examples.
    pub fn small() -> Set {
        Set::default().with_config_maps(["pipeline-settings"]).with_targets(["deploy-agents"])
    }

    /// The set with the ConfigMaps `names` added.
    pub fn with_config_maps<S: ToString>(mut self, names: impl IntoIterator<Item = S>) -> Set {
        self.config_maps.extend(names.into_iter().map(|name| name.to_string()));
        self
    }

    /// The set with the CDTargets `names` added.
    pub fn with_targets<S: ToString>(mut self, names: impl IntoIterator<Item = S>) -> Set {
        self.targets.extend(names.into_iter().map(|name| name.to_string()));
        self
    }

    /// The set without the objects `gone` names (`(kind, name)`).
    pub fn without(mut self, gone: &BTreeSet<(String, String)>) -> Set {
        self.config_maps.retain(|name| !gone.contains(&("ConfigMap".to_string(), name.clone())));
        self.targets.retain(|name| !gone.contains(&("CDTarget".to_string(), name.clone())));
        self
    }

    /// `(kind, name)` of every object.
    pub fn objects(&self) -> BTreeSet<(String, String)> {
        let maps = self.config_maps.iter().map(|name| ("ConfigMap".to_string(), name.clone()));
        maps.chain(self.targets.iter().map(|name| ("CDTarget".to_string(), name.clone()))).collect()
    }

    /// Every file of the set: path under the repository root, content.
    pub fn files(&self) -> BTreeMap<String, String> {
        let maps = self.config_maps.iter().map(|name| (format!("deploy/configmap-{name}.yaml"), config_map(name)));
        let targets = self.targets.iter().map(|name| (format!("deploy/cdtarget-{name}.yaml"), cdtarget(name)));
        maps.chain(targets).collect()
    }

    /// Commits exactly this set over `previous` (files written, files of objects that left
    /// removed) and pushes it. Returns the commit.
    pub fn commit_over(&self, previous: &Set, tenant: &Tenant, message: &str) -> String {
        let files = self.files();
        let removed: Vec<String> = previous.files().into_keys().filter(|path| !files.contains_key(path)).collect();
        if !removed.is_empty() {
            let mut args = vec!["rm", "--quiet", "--"];
            args.extend(removed.iter().map(String::as_str));
            git(tenant.repo.work_path(), &args);
        }
        let files: Vec<(&str, &str)> = files.iter().map(|(path, content)| (path.as_str(), content.as_str())).collect();
        tenant.repo.commit_and_push(&files, message)
    }
}

/// A tenant onboarded with `set` as its first commit, and that commit.
pub fn onboard(cluster: &'static ControlPlane, set: &Set, extra_spec: &str) -> (Tenant, String) {
    let files = set.files();
    let files: Vec<(&str, &str)> = files.iter().map(|(path, content)| (path.as_str(), content.as_str())).collect();
    let tenant = Tenant::onboard_with(cluster, &files, extra_spec);
    let head = tenant.repo.head("main").expect("the first commit");
    (tenant, head)
}

/// A ConfigMap `name` holding its own name.
pub fn config_map(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  NAME: {name}\n  RETRIES: \"3\"\n")
}

/// A CDTarget `name` with the `azp-token` Secret and one address of its own, derived from the
/// number its name ends with (so it stays the same whatever else the set holds).
pub fn cdtarget(name: &str) -> String {
    let index = name.rsplit('-').next().and_then(|n| n.parse::<usize>().ok()).map_or(0, |n| n + 1);
    format!(
        "apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: {name}\nspec:\n  agentImage: ghcr.io/acme/azp-agent:4.255.0\n  tokenRef: azp-token\n  ip:\n    - 10.20.{}.{}\n  config:\n    url: https://dev.azure.com/acme\n    poolName: {name}\n",
        index / 200,
        10 + index % 200
    )
}

/// `prefix-00`, `prefix-01`, ... (`count` names, in apply order).
pub fn names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i:02}")).collect()
}

/// The holder of the controller's Lease, once `holds` accepts it (at most `within`).
pub async fn lease_holder(
    cluster: &ControlPlane,
    within: Duration,
    holds: impl Fn(&str) -> bool + Send + 'static,
) -> String {
    let api: Api<Lease> = Api::namespaced(cluster.admin_client().await, PLATFORM_NAMESPACE);
    let held = move |lease: Option<&Lease>| {
        lease.and_then(|lease| lease.spec.as_ref()?.holder_identity.as_deref()).is_some_and(&holds)
    };
    let outcome = tokio::time::timeout(within, await_condition(api, LEASE, held)).await;
    match outcome {
        Ok(Ok(Some(lease))) => lease.spec.and_then(|spec| spec.holder_identity).expect("a holder"),
        other => panic!("the Lease {PLATFORM_NAMESPACE}/{LEASE} not held as expected within {within:?}: {other:?}"),
    }
}

/// Whether `event` is a write the controller sent as `tenant`'s ServiceAccount into its namespace
/// and the API server accepted.
pub fn is_tenant_write(event: &AuditEvent, tenant: &Tenant) -> bool {
    event.user == CONTROLLER_USER
        && event.is_mutating()
        && event.namespace == tenant.ns
        && event.acting_user() == tenant.user()
        && (200..300).contains(&event.code)
}

/// Waits (at most [`CONVERGE`]) for the first write as the tenant after `mark`: the apply of a
/// revision has begun.
pub fn until_first_tenant_write(cluster: &ControlPlane, mark: AuditMark, tenant: &Tenant) {
    until_appended(&cluster.audit_log(), CONVERGE, "the first write as the tenant", || {
        cluster.audit_requests_since(mark).iter().any(|event| is_tenant_write(event, tenant)).then_some(())
    });
}

/// `(kind, name)` of the objects written as the tenant after `mark` (applied or deleted).
pub fn tenant_writes(
    cluster: &ControlPlane,
    mark: AuditMark,
    tenant: &Tenant,
    verb: &str,
) -> BTreeSet<(String, String)> {
    cluster
        .audit_requests_since(mark)
        .into_iter()
        .filter(|event| is_tenant_write(event, tenant) && event.verb == verb)
        .map(|event| (kind_of(&event.resource).to_string(), event.name))
        .collect()
}

fn kind_of(resource: &str) -> &str {
    match resource {
        "configmaps" => "ConfigMap",
        "cdtargets" => "CDTarget",
        other => other,
    }
}

/// A condition: the registration applied `revision` (`Applied=True`, `lastAppliedRevision`).
pub fn applied_revision(revision: &str) -> impl Fn(Option<&TenantRepository>) -> bool + use<> {
    let revision = revision.to_string();
    move |registration| {
        registration.and_then(|r| r.status.as_ref()).is_some_and(|status| {
            status.last_applied_revision.as_deref() == Some(revision.as_str())
                && status.conditions.iter().any(|c| c.type_ == "Applied" && c.status == "True")
        })
    }
}

/// The registration as it is now.
pub async fn registration(tenant: &Tenant) -> TenantRepository {
    let api: Api<TenantRepository> = Api::namespaced(tenant.cluster.admin_client().await, PLATFORM_NAMESPACE);
    api.get(&tenant.ns).await.expect("get the registration")
}

/// Waits until the registration applied `head` and every CDTarget of `set` is Ready with its
/// four children, and until the children of CDTargets that are gone are removed by the garbage
/// collector; then checks that Git, the inventory and the cluster agree ([`assert_consistent`]).
pub async fn converged(tenant: &Tenant, set: &Set, head: &str, log: &Path) {
    tenant.registration_until(&format!("revision {head} applied"), applied_revision(head), log).await;
    for name in &set.targets {
        tenant.until::<CDTarget, _>(&format!("CDTarget {name} Ready"), name, ready, log).await;
        tenant.until::<NetworkPolicy, _>(&format!("the NetworkPolicy of {name}"), name, exists, log).await;
        tenant.until::<Deployment, _>(&format!("the Deployment of {name}"), name, exists, log).await;
        tenant.until::<ScaledObject, _>(&format!("the ScaledObject of {name}"), name, exists, log).await;
        tenant
            .until::<TriggerAuthentication, _>(&format!("the TriggerAuthentication of {name}"), name, exists, log)
            .await;
    }
    // Children of CDTargets that left: the garbage collector removes them after the prune.
    let client = tenant.cluster.admin_client().await;
    let targets: Api<CDTarget> = Api::namespaced(client.clone(), &tenant.ns);
    let uids: BTreeSet<String> = targets
        .list(&ListParams::default())
        .await
        .expect("list CDTargets")
        .items
        .iter()
        .filter_map(|t| t.uid())
        .collect();
    for child in children(tenant).await.into_iter().filter(|child| !owned_by_one_of(&child.owners, &uids)) {
        let (kind, name) = (child.kind.as_str(), child.name.as_str());
        let what = format!("the {kind} {name} of a CDTarget that is gone");
        match kind {
            "NetworkPolicy" => tenant.until::<NetworkPolicy, _>(&what, name, gone, log).await,
            "Deployment" => tenant.until::<Deployment, _>(&what, name, gone, log).await,
            "ScaledObject" => tenant.until::<ScaledObject, _>(&what, name, gone, log).await,
            _ => tenant.until::<TriggerAuthentication, _>(&what, name, gone, log).await,
        }
    }
    assert_consistent(tenant, set, head, log).await;
}

/// Git (`set` at `head`), the registration's inventory and the cluster agree: the inventory
/// names exactly the objects of `set`, in the tenant namespace; exactly those tenant objects
/// exist (nothing Git no longer has is left, nothing is missing); every child has exactly one
/// owner reference, a controller reference to an existing CDTarget, and every CDTarget has its
/// four children.
pub async fn assert_consistent(tenant: &Tenant, set: &Set, head: &str, log: &Path) {
    let registration = registration(tenant).await;
    let status = registration.status.clone().unwrap_or_default();
    assert_eq!(status.last_applied_revision.as_deref(), Some(head), "{}", tenant.diagnostics(log));
    let inventory: BTreeSet<(String, String)> =
        status.inventory.iter().map(|entry| (entry.kind.clone(), entry.name.clone())).collect();
    assert_eq!(inventory, set.objects(), "the inventory is not what Git holds{}", tenant.diagnostics(log));
    assert!(status.inventory.iter().all(|entry| entry.namespace == tenant.ns), "{:?}", status.inventory);

    let client = tenant.cluster.admin_client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &tenant.ns);
    let targets: Api<CDTarget> = Api::namespaced(client.clone(), &tenant.ns);
    let live_targets = targets.list(&ListParams::default()).await.expect("list CDTargets").items;
    let live: BTreeSet<(String, String)> = maps
        .list(&ListParams::default())
        .await
        .expect("list ConfigMaps")
        .items
        .iter()
        .map(ResourceExt::name_any)
        // Every namespace gets this one from kube-controller-manager.
        .filter(|name| name != "kube-root-ca.crt")
        .map(|name| ("ConfigMap".to_string(), name))
        .chain(live_targets.iter().map(|target| ("CDTarget".to_string(), target.name_any())))
        .collect();
    let expected = set.objects();
    let orphans: Vec<_> = live.difference(&expected).collect();
    let missing: Vec<_> = expected.difference(&live).collect();
    assert!(
        orphans.is_empty() && missing.is_empty(),
        "left behind: {orphans:?}, missing: {missing:?}{}",
        tenant.diagnostics(log)
    );

    let uids: BTreeSet<String> = live_targets.iter().filter_map(|target| target.uid()).collect();
    let children = children(tenant).await;
    for child in &children {
        let (kind, name, owners) = (&child.kind, &child.name, &child.owners);
        assert!(owned_by_one_of(owners, &uids) && owners.len() == 1, "{kind} {name} has owners {owners:#?}");
    }
    for target in &live_targets {
        let uid = target.uid().expect("a uid");
        for kind in ["NetworkPolicy", "Deployment", "ScaledObject", "TriggerAuthentication"] {
            let of_target: Vec<&Child> = children
                .iter()
                .filter(|child| child.kind == kind && child.owners.iter().any(|owner| owner.uid == uid))
                .collect();
            assert_eq!(of_target.len(), 1, "{kind} children of {}: {of_target:#?}", target.name_any());
            assert_eq!(of_target[0].name, target.name_any());
        }
    }
}

fn owned_by_one_of(owners: &[OwnerReference], uids: &BTreeSet<String>) -> bool {
    let controllers: Vec<&OwnerReference> = owners.iter().filter(|owner| owner.controller == Some(true)).collect();
    controllers.len() == 1 && controllers[0].kind == "CDTarget" && uids.contains(&controllers[0].uid)
}

/// A child cdtarget manages, as listed.
#[derive(Clone, Debug)]
pub struct Child {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its owner references.
    pub owners: Vec<OwnerReference>,
}

/// Every child cdtarget manages in the tenant namespace (labelled `managed-by: cdtarget`).
pub async fn children(tenant: &Tenant) -> Vec<Child> {
    async fn of<K>(client: &kube::Client, ns: &str) -> Vec<Child>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(client.clone(), ns);
        let selector = format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE);
        let listed = api.list_metadata(&ListParams::default().labels(&selector)).await.expect("list children");
        listed
            .items
            .into_iter()
            .map(|child| Child {
                kind: K::kind(&()).to_string(),
                name: child.name_any(),
                uid: child.uid().unwrap_or_default(),
                owners: child.metadata.owner_references.unwrap_or_default(),
            })
            .collect()
    }
    let client = tenant.cluster.admin_client().await;
    let mut all = of::<NetworkPolicy>(&client, &tenant.ns).await;
    all.extend(of::<Deployment>(&client, &tenant.ns).await);
    all.extend(of::<ScaledObject>(&client, &tenant.ns).await);
    all.extend(of::<TriggerAuthentication>(&client, &tenant.ns).await);
    all
}

/// Failed reconciles of `kind` in a `/metrics` text: every `cdtarget_reconciles_total` sample
/// of that kind whose result is not `success`.
pub fn failed_reconciles(metrics: &str, kind: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with("cdtarget_reconciles_total{"))
        .filter(|line| line.contains(&format!("kind=\"{kind}\"")) && !line.contains("result=\"success\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `/metrics` of a controller at `address`.
pub use crate::common::cluster::scrape_metrics as metrics;

/// A line on stderr, past the test harness's capture (figures are printed, never asserted).
pub fn figure(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "[faults] {line}");
}
