//! The TenantRepository reconciler against the fake API server and a real repository on disk
//! (`file://`, the cheapest real transport). The reconciler is called directly, as the interval
//! timer, a spec change or the webhook trigger would call it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cdtarget::api::CDTarget;
use cdtarget::api::conditions::is_true;
use cdtarget::api::conditions::{APPLIED, REASON_SUCCEEDED, REASON_SUSPENDED, REASON_VALIDATION_FAILED, SOURCE_READY};
use cdtarget::api::conditions::{READY, STALLED};
use cdtarget::api::reconcile_request::REQUESTED_AT;
use cdtarget::api::tenant_repository::{InventoryEntry, TenantRepository, TenantRepositoryStatus};
use cdtarget::controller::tenant_repository::{Context, reconcile};
use cdtarget::fixtures;
use cdtarget::source::{self, Fetcher, Limits};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube_fake_client::ClientBuilder;

use cdtarget::apply::applied::AppliedObjects;
use cdtarget::apply::discovery::Discovery;
use cdtarget::apply::{Writer, server_side};
use cdtarget::controller::frame::Framed;

use crate::common::api_bridge::{ApiBridge, Record, WireRequest};
use crate::common::{Stalling, TestDir, Upstream, UpstreamRepo, test_dir};
use crate::support::{Writes, recording_writes};

pub(crate) const PLATFORM: &str = fixtures::PLATFORM_NAMESPACE;
pub(crate) const REPO: &str = fixtures::REGISTRATION_NAME;
pub(crate) const TENANT: &str = fixtures::TENANT_NAMESPACE;

/// A fake cluster with cdtarget's kinds, recording every mutating request (creates, patches,
/// status patches and deletes) and every user a tenant client was asked for.
pub(crate) struct Fixture {
    /// A client of the fake over HTTP (through `bridge`), as the controller builds one.
    pub(crate) client: Client,
    /// The fake API server on 127.0.0.1, recording the headers of every request.
    pub(crate) bridge: ApiBridge,
    pub(crate) writes: Arc<Mutex<Vec<String>>>,
    /// Keeps the upstream repositories on disk.
    _upstream: Upstream,
    pub(crate) repo: UpstreamRepo,
    cache: TestDir,
    /// The controller's discovery cache, kept across reconciles as in production; a miss
    /// refreshes at once (the throttle is tested in tests/controller/discovery.rs).
    pub(crate) discovery: Arc<Discovery>,
    /// What the controller applied last, kept across reconciles as in one process.
    pub(crate) applied: AppliedObjects,
}

impl Fixture {
    pub(crate) async fn new() -> Fixture {
        Fixture::build(|builder| builder, false).await
    }

    /// A fixture whose fake also knows what `extend` registers (custom resources of a test).
    pub(crate) async fn with_fake(extend: impl FnOnce(ClientBuilder) -> ClientBuilder) -> Fixture {
        Fixture::build(extend, false).await
    }

    /// A fixture whose API server returns `metadata.managedFields`, as a real one does.
    pub(crate) async fn with_managed_fields() -> Fixture {
        Fixture::build(|builder| builder, true).await
    }

    async fn build(extend: impl FnOnce(ClientBuilder) -> ClientBuilder, managed_fields: bool) -> Fixture {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let writes: Writes = Arc::default();
        let funcs = recording_writes(&writes);
        let mut builder = extend(ClientBuilder::new())
            .with_resource::<CDTarget>()
            .with_status_subresource::<CDTarget>()
            .with_resource::<TenantRepository>()
            .with_status_subresource::<TenantRepository>()
            .with_interceptor_funcs(funcs);
        if managed_fields {
            builder = builder.with_return_managed_fields();
        }
        let fake = builder.build().await.expect("fake client");
        let upstream = Upstream::new();
        let repo = upstream.create("tenant.git");
        let bridge = ApiBridge::start(fake, Record::All).await;
        let client = bridge.client();
        let discovery = Arc::new(Discovery::new(client.clone()).with_min_refresh(Duration::ZERO));
        let applied = AppliedObjects::default();
        Fixture { client, bridge, writes, _upstream: upstream, repo, cache: test_dir(), discovery, applied }
    }

    /// The reconciler's context, as `cdtarget controller` builds it: every request goes over
    /// HTTP to the bridge, tenant clients impersonate through the controller's own client.
    pub(crate) fn context(&self) -> Arc<Context> {
        let fetcher = Fetcher::new(self.cache.path(), Limits::default(), 2);
        let writer = Writer::new(self.client.clone()).with_discovery(self.discovery.clone());
        let mut context = Context::new(self.client.clone(), fetcher, PLATFORM, "cdtarget-policy").with_writer(writer);
        context.applied = self.applied.clone();
        Arc::new(context)
    }

    /// Registers [`REPO`] ([`TenantRepository::test`]: into `team-a` as `deployer`, pruning):
    /// `deploy/` of the fixture's repository over `file://`, polled every two minutes, with what
    /// `change` adds.
    pub(crate) async fn register(&self, change: impl FnOnce(TenantRepository) -> TenantRepository) {
        let repo = TenantRepository::test().with_url(&self.repo.file_url()).with_path("deploy").with_interval("2m");
        let repo = change(repo);
        self.registrations().create(&PostParams::default(), &repo).await.expect("create TenantRepository");
    }

    pub(crate) fn registrations(&self) -> Api<TenantRepository> {
        Api::namespaced(self.client.clone(), PLATFORM)
    }

    fn tenant<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), TENANT)
    }

    pub(crate) async fn put_platform_secret(&self, name: &str, data: &[(&str, &str)]) {
        let secret = fixtures::secret(name, data);
        let api: Api<Secret> = Api::namespaced(self.client.clone(), PLATFORM);
        api.create(&PostParams::default(), &secret).await.expect("create Secret");
    }

    pub(crate) async fn registration(&self) -> TenantRepository {
        self.registrations().get(REPO).await.expect("get TenantRepository")
    }

    pub(crate) async fn reconcile(&self) -> Action {
        self.writes.lock().unwrap().clear();
        self.bridge.clear();
        let repo = self.registration().await;
        reconcile(Arc::new(repo), self.context()).await.expect("reconcile")
    }

    /// The controller's Git cache (`--cache-dir`) of this fixture.
    pub(crate) fn cache_path(&self) -> &std::path::Path {
        self.cache.path()
    }

    pub(crate) fn writes(&self) -> Vec<String> {
        self.writes.lock().unwrap().clone()
    }

    pub(crate) async fn status(&self) -> TenantRepositoryStatus {
        self.registration().await.status.expect("status written")
    }

    pub(crate) async fn config_map(&self, name: &str) -> Option<ConfigMap> {
        self.tenant::<ConfigMap>().get_opt(name).await.expect("get ConfigMap")
    }
}

pub(crate) fn condition<'a>(status: &'a TenantRepositoryStatus, kind: &str) -> &'a Condition {
    status.conditions.iter().find(|c| c.type_ == kind).unwrap_or_else(|| panic!("no {kind} in {status:#?}"))
}

pub(crate) fn config_map_yaml(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n")
}

/// The file a tenant pushes for CDTarget `name` ([`CDTarget::test`]) with the one destination `ip`.
fn cdtarget_yaml(name: &str, ip: &str) -> String {
    CDTarget::test().with_name(name).with_ips([ip]).to_manifest()
}

/// The inventory entry of an object in `team-a`.
fn entry(api_version: &str, kind: &str, name: &str) -> InventoryEntry {
    InventoryEntry::test(api_version, kind, name)
}

/// A registration whose repository holds two ConfigMaps and a CDTarget, reconciled once.
async fn applied_once() -> (Fixture, String) {
    let fixture = Fixture::new().await;
    let revision = fixture.repo.commit_and_push(
        &[
            ("deploy/settings.yaml", config_map_yaml("settings", "1")),
            ("deploy/extra.yaml", config_map_yaml("extra", "x")),
            ("deploy/agents.yaml", cdtarget_yaml("agents", "10.1.2.3")),
            ("README.md", "not a manifest".into()),
        ],
        "first",
    );
    fixture.register(|repo| repo).await;
    fixture.reconcile().await;
    (fixture, revision)
}

#[tokio::test]
async fn first_reconcile_applies_every_document_into_the_target_namespace_and_records_them() {
    let (fixture, revision) = applied_once().await;

    let settings = fixture.config_map("settings").await.expect("ConfigMap applied");
    assert_eq!(settings.data.unwrap()["value"], "1");
    assert!(fixture.config_map("extra").await.is_some());
    let target = fixture.tenant::<CDTarget>().get("agents").await.expect("CDTarget applied");
    assert_eq!(target.spec.ip, ["10.1.2.3"]);

    let status = fixture.status().await;
    assert_eq!(status.last_fetched_revision.as_deref(), Some(revision.as_str()));
    assert_eq!(status.last_applied_revision.as_deref(), Some(revision.as_str()));
    assert!(status.last_applied_digest.is_some());
    assert_eq!(
        status.inventory,
        [
            entry("cdtarget.io/v1alpha1", "CDTarget", "agents"),
            entry("v1", "ConfigMap", "extra"),
            entry("v1", "ConfigMap", "settings"),
        ]
    );
    assert!(is_true(&status.conditions, READY));
    for kind in [SOURCE_READY, APPLIED] {
        let condition = condition(&status, kind);
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("True", REASON_SUCCEEDED));
    }
    assert_eq!(status.observed_generation, fixture.registration().await.metadata.generation);
}

#[tokio::test]
async fn applies_impersonate_the_registrations_service_account_in_order() {
    let (fixture, _) = applied_once().await;
    let wire = fixture.bridge.requests();
    let tenant_path = format!("/namespaces/{TENANT}/");
    let (tenant, controller): (Vec<&WireRequest>, Vec<&WireRequest>) =
        wire.iter().partition(|r| r.path.contains(&tenant_path));
    assert!(tenant.iter().filter(|r| r.is_mutating()).count() >= 3, "the applies went over the wire: {wire:#?}");
    for request in &tenant {
        assert_eq!(
            request.impersonate_user.as_deref(),
            Some("system:serviceaccount:team-a:deployer"),
            "every request into the tenant namespace acts as its ServiceAccount: {request:?}"
        );
        assert_eq!(request.impersonate_groups, Vec::<String>::new(), "no groups are claimed: {request:?}");
    }
    // The controller's own requests (the registration, its status, the policy) act as itself.
    assert!(controller.iter().any(|r| r.verb() == "PATCH status"), "{wire:#?}");
    for request in &controller {
        assert_eq!(request.impersonate_user, None, "the controller's own request impersonates: {request:?}");
    }
    // The inventory first (what the apply may create is recorded before it exists), then what
    // others reference: the ConfigMaps, then the CDTarget; then the status.
    let expected = [
        format!("status {PLATFORM}/{REPO}"),
        "patch ConfigMap team-a/extra".to_owned(),
        "patch ConfigMap team-a/settings".to_owned(),
        "patch CDTarget team-a/agents".to_owned(),
        format!("status {PLATFORM}/{REPO}"),
    ];
    assert_eq!(fixture.writes(), expected);
    let status = fixture.status().await;
    assert!(condition(&status, APPLIED).message.contains("3 objects"));
}

#[tokio::test]
async fn reconcile_with_nothing_changed_sends_no_mutating_request() {
    let (fixture, _) = applied_once().await;
    let action = fixture.reconcile().await;
    assert_eq!(fixture.writes(), Vec::<String>::new());
    // Action hides its duration; the interval-plus-jitter arithmetic is unit-tested with `plan`.
    assert_ne!(action, Action::await_change());
}

/// Asks for a reconcile as `cdtarget reconcile` does: the annotation, with a merge patch.
async fn request_reconcile(fixture: &Fixture, requested: &str) {
    let patch = serde_json::json!({"metadata": {"annotations": {REQUESTED_AT: requested}}});
    fixture.registrations().patch(REPO, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotate");
}

#[tokio::test]
async fn a_reconcile_request_costs_one_status_write_recording_it_and_the_next_poll_none() {
    let (fixture, _) = applied_once().await;
    let requested = "2026-11-24T10:00:00.5Z";
    request_reconcile(&fixture, requested).await;
    fixture.reconcile().await;
    assert_eq!(fixture.writes(), [format!("status {PLATFORM}/{REPO}")], "nothing else changed");
    assert_eq!(fixture.status().await.last_handled_reconcile_at.as_deref(), Some(requested));

    fixture.reconcile().await;
    assert_eq!(fixture.writes(), Vec::<String>::new(), "a handled request is not written again");
    assert_eq!(fixture.status().await.last_handled_reconcile_at.as_deref(), Some(requested));
}

#[tokio::test]
async fn a_reconcile_request_is_handled_by_a_failed_reconcile_too() {
    let (fixture, _) = applied_once().await;
    fixture.repo.commit_and_push(&[("deploy/broken.yaml", "kind: [")], "broken");
    let requested = "2026-11-24T11:00:00Z";
    request_reconcile(&fixture, requested).await;
    fixture.reconcile().await;
    let status = fixture.status().await;
    assert_eq!(status.last_handled_reconcile_at.as_deref(), Some(requested));
    assert!(!is_true(&status.conditions, READY), "{status:#?}");
    assert_eq!(condition(&status, READY).reason, REASON_VALIDATION_FAILED);
}

#[tokio::test]
async fn an_unchanged_revision_repairs_drifted_and_deleted_objects_and_sends_nothing_else() {
    let (fixture, _) = applied_once().await;
    // Someone edits one applied object by hand and deletes another.
    let mut settings = fixture.config_map("settings").await.expect("applied");
    settings.data = Some(BTreeMap::from([("value".to_owned(), "edited by hand".to_owned())]));
    settings.metadata.managed_fields = None;
    fixture.tenant::<ConfigMap>().replace("settings", &PostParams::default(), &settings).await.expect("edit");
    fixture.tenant::<ConfigMap>().delete("extra", &Default::default()).await.expect("delete");

    fixture.reconcile().await;
    let wire = fixture.bridge.requests();
    let mut writes = fixture.writes();
    writes.sort();
    assert_eq!(writes, ["patch ConfigMap team-a/extra", "patch ConfigMap team-a/settings"]);
    assert_eq!(fixture.config_map("settings").await.unwrap().data.unwrap()["value"], "1");
    assert!(fixture.config_map("extra").await.is_some(), "the deleted object is back");
    let reads: Vec<&WireRequest> = wire.iter().filter(|r| r.method == "GET" && r.path.contains("/team-a/")).collect();
    assert_eq!(reads.len(), 3, "one read of each applied object: {wire:#?}");
    assert!(reads.iter().all(|r| r.impersonate_user.as_deref() == Some("system:serviceaccount:team-a:deployer")));
}

#[tokio::test]
async fn a_new_revision_sends_only_the_objects_it_changed_and_reads_the_others_back() {
    let (fixture, _) = applied_once().await;
    fixture.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "2"))], "change settings");
    fixture.reconcile().await;

    let wire = fixture.bridge.requests();
    let tenant_path = format!("/namespaces/{TENANT}/");
    let patches: Vec<&WireRequest> =
        wire.iter().filter(|r| r.method == "PATCH" && r.path.contains(&tenant_path)).collect();
    assert_eq!(patches.len(), 2, "one dry run and one apply: {patches:#?}");
    assert!(patches.iter().all(|r| r.path.contains("/configmaps/settings")), "{patches:#?}");
    assert!(patches[0].path.contains("dryRun=All") && !patches[1].path.contains("dryRun"), "{patches:#?}");
    let reads: Vec<&WireRequest> = wire.iter().filter(|r| r.method == "GET" && r.path.contains(&tenant_path)).collect();
    assert_eq!(reads.len(), 2, "the two unchanged objects are read back: {reads:#?}");
    assert!(reads.iter().all(|r| !r.path.contains("/settings")), "{reads:#?}");
    assert_eq!(fixture.config_map("settings").await.unwrap().data.unwrap()["value"], "2");
    assert_eq!(fixture.status().await.inventory.len(), 3, "the inventory is still the whole set");
}

#[tokio::test]
async fn a_new_revision_also_repairs_an_unchanged_object_that_drifted_and_dry_runs_both_first() {
    let (fixture, _) = applied_once().await;
    let mut extra = fixture.config_map("extra").await.expect("applied");
    extra.data = Some(BTreeMap::from([("value".to_owned(), "edited by hand".to_owned())]));
    extra.metadata.managed_fields = None;
    fixture.tenant::<ConfigMap>().replace("extra", &PostParams::default(), &extra).await.expect("edit");
    fixture.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "2"))], "change settings");
    fixture.reconcile().await;

    let mut writes = fixture.writes();
    writes.retain(|w| w.starts_with("patch"));
    writes.sort();
    assert_eq!(writes, ["patch ConfigMap team-a/extra", "patch ConfigMap team-a/settings"]);
    let wire = fixture.bridge.requests();
    let dry_runs = wire.iter().filter(|r| r.method == "PATCH" && r.path.contains("dryRun=All")).count();
    let first_write = wire.iter().position(|r| {
        r.method == "PATCH" && r.path.contains(&format!("/namespaces/{TENANT}/")) && !r.path.contains("dryRun")
    });
    let last_dry_run = wire.iter().rposition(|r| r.path.contains("dryRun=All"));
    assert!(dry_runs >= 2 && last_dry_run < first_write, "both dry-run before the first write: {wire:#?}");
    assert_eq!(fixture.config_map("extra").await.unwrap().data.unwrap()["value"], "x", "put back as Git says");
}

#[tokio::test]
async fn a_controller_that_did_not_apply_the_set_itself_sends_all_of_it() {
    let (fixture, _) = applied_once().await;
    fixture.applied.forget(&format!("{PLATFORM}/{REPO}")); // as after a restart or on a new leader
    fixture.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "2"))], "change settings");
    fixture.reconcile().await;
    let mut writes = fixture.writes();
    writes.retain(|w| w.starts_with("patch"));
    assert_eq!(writes.len(), 3, "every object applied: {writes:?}");
}

#[tokio::test]
async fn a_file_removed_from_git_prunes_exactly_its_object() {
    let (fixture, _) = applied_once().await;
    fixture.repo.remove_file("deploy/extra.yaml", "drop extra");
    fixture.repo.push("main");
    fixture.reconcile().await;

    assert!(fixture.config_map("extra").await.is_none());
    assert!(fixture.config_map("settings").await.is_some());
    assert!(fixture.tenant::<CDTarget>().get_opt("agents").await.unwrap().is_some());
    let deletes: Vec<String> = fixture.writes().into_iter().filter(|w| w.starts_with("delete")).collect();
    assert_eq!(deletes, ["delete team-a/extra"]);
    let status = fixture.status().await;
    assert!(!status.inventory.contains(&entry("v1", "ConfigMap", "extra")));
    assert_eq!(status.inventory.len(), 2);
}

#[tokio::test]
async fn with_prune_off_an_object_that_left_git_stays() {
    let fixture = Fixture::new().await;
    fixture.repo.commit_and_push(&[("deploy/extra.yaml", config_map_yaml("extra", "x"))], "first");
    fixture.register(|repo| repo.pruning(false)).await;
    fixture.reconcile().await;
    fixture.repo.commit_and_push(&[("deploy/other.yaml", config_map_yaml("other", "y"))], "add");
    fixture.repo.remove_file("deploy/extra.yaml", "drop extra");
    fixture.repo.push("main");
    fixture.reconcile().await;
    assert!(fixture.config_map("extra").await.is_some());
    assert!(fixture.writes().iter().all(|w| !w.starts_with("delete")));
}

#[tokio::test]
async fn a_broken_push_applies_and_prunes_nothing_and_names_the_file_and_field() {
    let (fixture, first) = applied_once().await;
    // One push that changes a ConfigMap, removes another and breaks the CDTarget.
    fixture.repo.commit(
        &[
            ("deploy/settings.yaml", config_map_yaml("settings", "2")),
            ("deploy/agents.yaml", cdtarget_yaml("agents", "10.0.0.0/8")),
        ],
        "broken",
    );
    let broken = fixture.repo.remove_file("deploy/extra.yaml", "and drop extra");
    fixture.repo.push("main");
    fixture.reconcile().await;

    let writes = fixture.writes();
    assert_eq!(writes, [format!("status {PLATFORM}/{REPO}")], "only status is written");
    assert_eq!(fixture.config_map("settings").await.unwrap().data.unwrap()["value"], "1");
    assert!(fixture.config_map("extra").await.is_some());
    let target = fixture.tenant::<CDTarget>().get("agents").await.unwrap();
    assert_eq!(target.spec.ip, ["10.1.2.3"]);

    let status = fixture.status().await;
    assert!(is_true(&status.conditions, STALLED));
    let applied = condition(&status, APPLIED);
    assert_eq!((applied.status.as_str(), applied.reason.as_str()), ("False", REASON_VALIDATION_FAILED));
    assert!(applied.message.contains("agents.yaml:1: spec.ip[0]"), "{}", applied.message);
    assert_eq!(condition(&status, STALLED).reason, REASON_VALIDATION_FAILED);
    assert_eq!(condition(&status, SOURCE_READY).status, "True");
    assert_eq!(status.last_fetched_revision.as_deref(), Some(broken.as_str()));
    assert_eq!(status.last_applied_revision.as_deref(), Some(first.as_str()));
    assert_eq!(status.inventory.len(), 3);
}

#[tokio::test]
async fn a_document_for_another_namespace_is_rejected_and_nothing_is_applied() {
    let fixture = Fixture::new().await;
    let foreign = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sneaky\n  namespace: team-b\n";
    fixture.repo.commit_and_push(
        &[("deploy/ok.yaml", config_map_yaml("ok", "1")), ("deploy/sneaky.yaml", foreign.into())],
        "x",
    );
    fixture.register(|repo| repo).await;
    fixture.reconcile().await;
    let wire = fixture.bridge.requests();
    assert!(wire.iter().all(|r| r.impersonate_user.is_none()), "nothing was sent as the tenant: {wire:#?}");

    assert!(fixture.config_map("ok").await.is_none());
    let other: Api<ConfigMap> = Api::namespaced(fixture.client.clone(), "team-b");
    assert!(other.get_opt("sneaky").await.unwrap().is_none());
    let status = fixture.status().await;
    let applied = condition(&status, APPLIED);
    assert_eq!(applied.reason, REASON_VALIDATION_FAILED);
    assert!(applied.message.contains("sneaky.yaml:1: metadata.namespace"), "{}", applied.message);
    assert_eq!(status.last_applied_revision, None);
}

#[tokio::test]
async fn a_suspended_registration_fetches_and_applies_nothing_and_says_so() {
    let fixture = Fixture::new().await;
    fixture.repo.commit_and_push(&[("deploy/ok.yaml", config_map_yaml("ok", "1"))], "x");
    fixture.register(|repo| repo.suspended()).await;
    let action = fixture.reconcile().await;

    assert_eq!(action, Action::await_change());
    assert!(fixture.config_map("ok").await.is_none());
    assert!(std::fs::read_dir(fixture.cache.path()).unwrap().next().is_none(), "nothing fetched");
    let status = fixture.status().await;
    assert_eq!(condition(&status, READY).reason, REASON_SUSPENDED);
    assert_eq!(status.last_fetched_revision, None);
}

#[tokio::test]
async fn a_missing_credentials_secret_waits_and_a_webhook_token_yields_the_path() {
    let fixture = Fixture::new().await;
    fixture.repo.commit_and_push(&[("deploy/ok.yaml", config_map_yaml("ok", "1"))], "x");
    fixture.put_platform_secret("hook", &[("token", "s3cret")]).await;
    fixture.register(|repo| repo.with_secret_ref("git-creds").with_webhook_secret("hook")).await;
    let action = fixture.reconcile().await;
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
    let status = fixture.status().await;
    assert_eq!(condition(&status, SOURCE_READY).reason, "SecretNotFound");
    assert!(fixture.config_map("ok").await.is_none());
    let expected = cdtarget::api::tenant_repository::webhook_path("s3cret", REPO, PLATFORM);
    assert_eq!(status.webhook_path, Some(expected));

    // An empty Secret means no credentials, which a file:// repository needs none of.
    fixture.put_platform_secret("git-creds", &[]).await;
    fixture.reconcile().await;
    assert!(fixture.config_map("ok").await.is_some());
}

#[tokio::test]
async fn the_observer_is_told_what_each_reconcile_applied_pruned_and_manages() {
    use cdtarget::controller::tenant_repository::ApplyReport;

    let (fixture, _) = applied_once().await;
    let reports: Arc<Mutex<Vec<ApplyReport>>> = Arc::default();
    let seen = reports.clone();
    let observed = |fixture: &Fixture| {
        let seen = seen.clone();
        let mut context = (*fixture.context()).clone();
        context.observer = Some(Arc::new(move |report: &ApplyReport| seen.lock().unwrap().push(report.clone())));
        Arc::new(context)
    };

    // Nothing changed: nothing applied, three objects managed.
    reconcile(Arc::new(fixture.registration().await), observed(&fixture)).await.unwrap();
    // A file left Git: one object is pruned; the others did not change, so none is sent.
    fixture.repo.remove_file("deploy/extra.yaml", "drop extra");
    fixture.repo.push("main");
    reconcile(Arc::new(fixture.registration().await), observed(&fixture)).await.unwrap();

    let reports = reports.lock().unwrap().clone();
    let counts: Vec<(usize, usize, usize)> = reports.iter().map(|r| (r.applied, r.pruned, r.managed)).collect();
    assert_eq!(counts, [(0, 0, 3), (0, 1, 2)]);
    assert_eq!(reports[0].registration, format!("{PLATFORM}/{REPO}"));
}

#[tokio::test]
async fn spec_timeout_bounds_the_fetch_of_that_registration() {
    // Stalls are cut by libgit2's process-wide socket timeout, which the controller sets from
    // --git-timeout; spec.timeout bounds the whole fetch on top of it.
    source::set_io_timeout(Duration::from_secs(3));
    let stalling = Stalling::start();
    let fixture = Fixture::new().await;
    let url = stalling.url("http");
    fixture.register(|repo| repo.with_url(&url).with_timeout("1s")).await;
    fixture.reconcile().await;
    let status = fixture.status().await;
    let source_ready = condition(&status, SOURCE_READY);
    assert_eq!((source_ready.status.as_str(), source_ready.reason.as_str()), ("False", "Timeout"));
    assert!(source_ready.message.contains("took longer than 1s"), "{}", source_ready.message);
    assert_eq!(fixture.writes(), [format!("status {PLATFORM}/{REPO}")], "only the status is written");
}

/// The `fieldManager` query parameter of a request, if any.
#[tokio::test]
async fn the_whole_set_is_dry_run_as_the_tenant_before_the_first_write_all_with_strict_field_validation() {
    let (fixture, _) = applied_once().await;
    let wire = fixture.bridge.requests();
    let tenant_path = format!("/namespaces/{TENANT}/");
    let patches: Vec<&WireRequest> =
        wire.iter().filter(|r| r.method == "PATCH" && r.path.contains(&tenant_path)).collect();
    let dry_run = |r: &WireRequest| r.path.contains("dryRun=All");
    let (dry_runs, writes): (Vec<&WireRequest>, Vec<&WireRequest>) = patches.iter().partition(|r| dry_run(r));
    assert_eq!((dry_runs.len(), writes.len()), (3, 3), "each of the 3 objects dry-run, then written: {patches:#?}");
    // Every dry run before the first write (the intent record is a write too: it comes between).
    let first_write = wire.iter().position(|r| r.method == "PATCH" && !dry_run(r)).expect("a write");
    let last_dry_run = wire.iter().rposition(dry_run).expect("a dry run");
    assert!(last_dry_run < first_write, "a write before the dry run ended: {wire:#?}");
    // The dry run is the apply it previews: tenant manager, forced, strict, impersonating.
    for request in dry_runs.iter().chain(&writes) {
        assert_eq!(field_manager(request), Some("cdtarget-tenant"), "{request:?}");
        assert!(request.path.contains("force=true") && request.path.contains("fieldValidation=Strict"), "{request:?}");
        assert_eq!(request.impersonate_user.as_deref(), Some("system:serviceaccount:team-a:deployer"), "{request:?}");
    }
}

fn field_manager(request: &WireRequest) -> Option<&str> {
    let query = request.path.split_once('?')?.1;
    query.split('&').find_map(|pair| pair.strip_prefix("fieldManager="))
}

#[tokio::test]
async fn tenant_applies_use_their_own_field_manager_and_the_controllers_status_its_own() {
    let (fixture, _) = applied_once().await;
    fixture.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "2"))], "change");
    fixture.reconcile().await;
    let wire = fixture.bridge.requests();
    let patches: Vec<(&str, Option<&str>)> =
        wire.iter().filter(|r| r.method == "PATCH").map(|r| (r.path.as_str(), field_manager(r))).collect();
    let tenant: Vec<_> = patches.iter().filter(|(path, _)| path.contains(&format!("/namespaces/{TENANT}/"))).collect();
    assert_eq!(tenant.len(), 2, "the changed object's dry run and apply: {patches:#?}");
    assert!(tenant.iter().all(|(_, manager)| *manager == Some(server_side::TENANT_FIELD_MANAGER)), "{patches:#?}");
    let status: Vec<_> =
        patches.iter().filter(|(path, _)| path.split('?').next().unwrap().ends_with("/status")).collect();
    assert_eq!(status.len(), 1, "{patches:#?}");
    assert_eq!(status[0].1, Some(cdtarget::api::FIELD_MANAGER));
}

#[tokio::test]
async fn fields_a_tenant_applied_under_the_old_field_manager_are_released_once_after_an_upgrade() {
    use kube::api::{Patch, PatchParams};

    let fixture = Fixture::with_managed_fields().await;
    // What the previous version left: the tenant's ConfigMap applied by field manager `cdtarget`,
    // with a key the tenant has removed from Git since.
    let old = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": TENANT},
        "data": {"value": "1", "removed-from-git": "x"},
    });
    fixture
        .tenant::<ConfigMap>()
        .patch("settings", &PatchParams::apply(server_side::LEGACY_TENANT_FIELD_MANAGER).force(), &Patch::Apply(&old))
        .await
        .expect("apply as the old version did");
    fixture.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "1"))], "first");
    fixture.register(|repo| repo).await;

    fixture.reconcile().await;
    let settings_patches = |fixture: &Fixture| -> Vec<String> {
        fixture
            .bridge
            .requests()
            .iter()
            // The writes; the all-or-nothing dry run before them (`dryRun=All`) persists nothing.
            .filter(|r| {
                r.method == "PATCH" && r.path.contains("/configmaps/settings") && !r.path.contains("dryRun=All")
            })
            .map(|r| format!("{} force={}", field_manager(r).unwrap_or("-"), r.path.contains("force=true")))
            .collect()
    };
    assert_eq!(
        settings_patches(&fixture),
        ["cdtarget-tenant force=true", "cdtarget force=false"],
        "applied as the tenant manager, then the old manager's ownership released with an empty apply"
    );
    assert_eq!(fixture.config_map("settings").await.unwrap().data.unwrap()["value"], "1");

    // Released once: the next apply of the object sends the tenant manager's apply only.
    fixture.repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "2"))], "second");
    fixture.reconcile().await;
    assert_eq!(settings_patches(&fixture), ["cdtarget-tenant force=true"]);
}
