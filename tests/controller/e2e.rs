//! In-process end to end: a TenantRepository whose repository is served by a real `sshd` (ed25519
//! deploy key, pinned host key), both reconcilers running as controllers against kube-fake-client,
//! a push announced through the trigger the webhook receiver uses.
//!
//! The controllers are started by the same [`Builder`] `cdtarget controller` uses: the same
//! contexts, shared inputs, predicates, triggers and reconcile wrappers. kube-fake-client serves
//! no watches, so the builder is given event streams this test feeds ([`Sources::given`], and
//! the one [`Registrations`] watch fed from a stream) instead of the production watches. Every
//! event the test sends names the watch event it stands in for ([`Cluster::relay_registration`],
//! [`Cluster::relay_target`]). As in production, a status-only change reconciles nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cdtarget::api::CDTarget;
use cdtarget::api::conditions::REASON_SECRET_NOT_ALLOWED;
use cdtarget::api::conditions::is_true;
use cdtarget::api::conditions::{APPLIED, REASON_VALIDATION_FAILED};
use cdtarget::api::conditions::{READY, STALLED};
use cdtarget::api::keda::{ScaledObject, TriggerAuthentication};
use cdtarget::api::reconcile_request::REQUESTED_AT;
use cdtarget::api::tenant_repository::{TenantRepository, webhook_path};
use cdtarget::controller::cdtarget::REGISTRATIONS_TTL;
use cdtarget::controller::process::{self, Builder, Reconciled, Registrations, Settings, Sources};
use cdtarget::controller::{cdtarget as cdtarget_reconciler, tenant_repository};
use cdtarget::fixtures;
use cdtarget::source::{Fetcher, Limits};
use cdtarget::telemetry::WebhookMetrics;
use cdtarget::webhook;
use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use kube_fake_client::ClientBuilder;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;

use crate::common::access_review::AccessReviews;
use crate::common::api_bridge::{ApiBridge, Record};
use crate::common::{self, KeyKind, Sshd, TestDir, Upstream, UpstreamRepo, test_dir};
use crate::support::{Writes, recording_writes_with};
use crate::tenant_repository::config_map_yaml;

const PLATFORM: &str = "cdtarget-system";
const POLICY: &str = "cdtarget-policy";
const REPO: &str = "team-a-repo";
const TENANT: &str = "team-a";
const CREDENTIALS: &str = "team-a-git";
const TARGET: &str = "agents";
const TOKEN: &str = "azp-token";

/// Bound on every wait: a fetch over ssh on loopback and a reconcile take well under a second.
const DEADLINE: Duration = Duration::from_secs(60);

/// The file a tenant pushes for CDTarget `name` ([`CDTarget::test`], token in [`TOKEN`]): one
/// destination `ip`, one to three agents.
fn cdtarget_yaml(name: &str, ip: &str) -> String {
    CDTarget::test().with_name(name).with_token_ref(TOKEN).with_ips([ip]).with_replicas(1, 3).to_manifest()
}

/// Receives what one controller yields, one item per finished reconcile.
struct Reconciles<K: Resource, E: 'static> {
    receiver: mpsc::UnboundedReceiver<Reconciled<K, E>>,
}

impl<K, E> Reconciles<K, E>
where
    K: Resource + 'static,
    E: std::error::Error + Send + 'static,
{
    /// Polls `controller` on its own task, forwarding every reconcile's outcome.
    fn spawn(controller: impl Stream<Item = Reconciled<K, E>> + Send + 'static) -> Self
    where
        K: Send,
        K::DynamicType: Send,
    {
        let (sender, receiver) = mpsc::unbounded();
        tokio::spawn(controller.for_each(move |item| {
            let _ = sender.unbounded_send(item);
            futures::future::ready(())
        }));
        Reconciles { receiver }
    }

    /// Waits (bounded) for the next finished reconcile and expects it to have succeeded.
    async fn next_ok(&mut self, what: &str) {
        match tokio::time::timeout(DEADLINE, self.receiver.next()).await {
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(error))) => panic!("{what}: reconcile failed: {error:?}"),
            Ok(None) => panic!("{what}: the controller stopped"),
            Err(_) => panic!("{what}: no reconcile within {DEADLINE:?}"),
        }
    }
}

/// The fake cluster, the stand-ins for the two watches, the webhook receiver, and the running
/// controllers.
struct Cluster {
    client: Client,
    /// Every mutating request: `verb Kind namespace/name`.
    writes: Arc<Mutex<Vec<String>>>,
    /// Answers the CDTarget reconciler's SubjectAccessReviews (everything allowed but what is
    /// denied).
    reviews: AccessReviews,
    /// Stands in for the TenantRepository watch of the production controller.
    registrations: mpsc::UnboundedSender<watcher::Event<TenantRepository>>,
    /// The one watch of the registrations (the controller's store and the receiver's index).
    registrations_watch: Registrations,
    /// Stands in for the CDTarget watch of the production controller.
    targets: mpsc::UnboundedSender<watcher::Event<CDTarget>>,
    /// The webhook receiver's path into the TenantRepository controller.
    trigger: webhook::Trigger,
    /// The receiver, on 127.0.0.1, fed by the same registrations watch.
    receiver: WebhookReceiver,
    repo_reconciles: Reconciles<TenantRepository, tenant_repository::Error>,
    target_reconciles: Reconciles<CDTarget, cdtarget_reconciler::Error>,
    stop: watch::Sender<bool>,
    _running: process::Running,
    _cache: TestDir,
    /// The fake API server behind HTTP: the controller talks to it as to a real one.
    _bridge: ApiBridge,
}

impl Cluster {
    /// A fake cluster with cdtarget's and KEDA's kinds, and both controllers running on it.
    async fn start() -> Cluster {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Cluster::start_with(None, listener).await
    }

    /// [`Cluster::start`], the TenantRepository reconciler managing GitLab through `gitlab`,
    /// the receiver serving on `listener` (bound before the controllers start, so that the
    /// GitLab step knows the receiver's external URL).
    async fn start_with(gitlab: Option<cdtarget::gitlab::Settings>, listener: tokio::net::TcpListener) -> Cluster {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let writes: Writes = Arc::default();
        let reviews = AccessReviews::default();
        let funcs = recording_writes_with(&writes, reviews.clone());
        let fake = ClientBuilder::new()
            .with_resource::<CDTarget>()
            .with_status_subresource::<CDTarget>()
            .with_resource::<TenantRepository>()
            .with_status_subresource::<TenantRepository>()
            .with_resource::<ScaledObject>()
            .with_resource::<TriggerAuthentication>()
            .with_interceptor_funcs(funcs)
            .build()
            .await
            .expect("fake client");

        // Requests travel over HTTP to the fake, so tenant applies carry `Impersonate-User` as
        // in production (the headers are checked in tests/controller/tenant_repository.rs).
        let bridge = ApiBridge::start(fake, Record::Counts).await;
        let client = bridge.client();
        let cache = test_dir();
        let (stop, stopped) = watch::channel(false);
        let (registrations, registration_events) = mpsc::unbounded();
        let (registrations_watch, watching) = Registrations::new(registration_events.map(Ok).boxed(), |_| {});
        tokio::spawn(watching);
        let (receiver, webhook_receiver) = WebhookReceiver::start_on(&client, &registrations_watch, listener, &stop);
        let (targets, target_events) = mpsc::unbounded();
        // KEDA's kinds are registered in the fake, as the discovery of `cdtarget controller` would
        // find them; events are covered in tests/controller/cdtarget.rs.
        let settings = Settings::new(PLATFORM, POLICY);
        let fetcher = Fetcher::new(cache.path(), Limits::default(), 2);
        let mut running =
            Builder::new(client.clone(), settings, fetcher, registrations_watch.clone(), Sources::given(target_events))
                .with_gitlab(gitlab)
                .with_receiver(webhook_receiver)
                .start(stopped);
        let (repo_controller, target_controller) = running.take_streams();
        Cluster {
            client,
            writes,
            reviews,
            registrations,
            registrations_watch,
            targets,
            trigger: running.trigger(),
            receiver,
            repo_reconciles: Reconciles::spawn(repo_controller),
            target_reconciles: Reconciles::spawn(target_controller),
            stop,
            _running: running,
            _cache: cache,
            _bridge: bridge,
        }
    }

    fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn put_secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let secret = fixtures::secret(name, data);
        self.api::<Secret>(namespace).create(&PostParams::default(), &secret).await.expect("create Secret");
    }

    async fn registration(&self) -> TenantRepository {
        self.api::<TenantRepository>(PLATFORM).get(REPO).await.expect("get TenantRepository")
    }

    /// Stand-in for the TenantRepository watch: the registration as stored now, delivered as the
    /// watch would deliver its Added/Modified event (`watcher::Event::Apply`), which also keeps
    /// the controller's store current (the trigger reconciles the stored object). Returns once
    /// the watch has stored it (its subscribers see an event only after that).
    async fn relay_registration(&self) {
        let repo = self.registration().await;
        self.relay(watcher::Event::Apply(repo)).await;
    }

    /// Delivers `event` as the registrations watch would, and waits until it is stored.
    async fn relay(&self, event: watcher::Event<TenantRepository>) {
        let watched = match &event {
            watcher::Event::Apply(repo) => repo.metadata.resource_version.clone(),
            _ => None,
        };
        let mut seen = Box::pin(self.registrations_watch.subscribe());
        self.registrations.unbounded_send(event).expect("controller running");
        let stored = async {
            while let Some(event) = seen.next().await {
                if let watcher::Event::Apply(repo) = event
                    && repo.metadata.resource_version == watched
                {
                    return;
                }
            }
        };
        tokio::time::timeout(DEADLINE, stored).await.expect("the watch stores the event");
    }

    /// Stand-in for the CDTarget watch: the CDTarget as stored now, delivered as its
    /// Added/Modified event.
    async fn relay_target(&self) {
        let target = self.api::<CDTarget>(TENANT).get(TARGET).await.expect("get CDTarget");
        self.targets.unbounded_send(watcher::Event::Apply(target)).expect("controller running");
    }

    /// Stand-in for the initial lists of the watches at start-up: the controller's and the
    /// receiver keeper's TenantRepository watches (Init, InitApply, InitDone), and the CDTarget
    /// watch (empty). Returns once the receiver serves the registration and its first reconcile
    /// succeeded.
    async fn start_watches(&mut self) {
        let mut index_changes = self.receiver.index.subscribe();
        let registration = self.registration().await;
        self.registrations.unbounded_send(watcher::Event::Init).unwrap();
        self.registrations.unbounded_send(watcher::Event::InitApply(registration)).unwrap();
        self.registrations.unbounded_send(watcher::Event::InitDone).unwrap();
        self.targets.unbounded_send(watcher::Event::Init).unwrap();
        self.targets.unbounded_send(watcher::Event::InitDone).unwrap();
        tokio::time::timeout(DEADLINE, index_changes.changed()).await.expect("the registration is served").unwrap();
        self.repo_reconciles.next_ok("initial list").await;
    }

    /// Asserts the CDTarget is applied with this single destination.
    async fn expect_cdtarget_ip(&self, ip: &str) {
        let target = self.api::<CDTarget>(TENANT).get_opt(TARGET).await.unwrap().expect("the CDTarget applied");
        assert_eq!(target.spec.ip, [ip]);
    }

    fn writes(&self) -> Vec<String> {
        self.writes.lock().unwrap().clone()
    }

    fn clear_writes(&self) {
        self.writes.lock().unwrap().clear();
    }

    /// Everything the tenant has running: the applied ConfigMap, the CDTarget and its four
    /// children, as stored (with resourceVersion, so any write shows).
    async fn applied(&self) -> BTreeMap<&'static str, Value> {
        async fn stored<K>(cluster: &Cluster, name: &str) -> Value
        where
            K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
                + Clone
                + DeserializeOwned
                + Serialize
                + std::fmt::Debug,
        {
            let object = cluster.api::<K>(TENANT).get(name).await.expect("applied object");
            serde_json::to_value(object).unwrap()
        }
        BTreeMap::from([
            ("ConfigMap", stored::<ConfigMap>(self, "settings").await),
            ("CDTarget", stored::<CDTarget>(self, TARGET).await),
            ("NetworkPolicy", stored::<NetworkPolicy>(self, TARGET).await),
            ("Deployment", stored::<Deployment>(self, TARGET).await),
            ("ScaledObject", stored::<ScaledObject>(self, TARGET).await),
            ("TriggerAuthentication", stored::<TriggerAuthentication>(self, TARGET).await),
        ])
    }

    /// Whether the CDTarget's four children all exist.
    async fn children_present(&self) -> bool {
        let np = self.api::<NetworkPolicy>(TENANT).get_opt(TARGET).await.unwrap().is_some();
        let deploy = self.api::<Deployment>(TENANT).get_opt(TARGET).await.unwrap().is_some();
        let scaled = self.api::<ScaledObject>(TENANT).get_opt(TARGET).await.unwrap().is_some();
        let auth = self.api::<TriggerAuthentication>(TENANT).get_opt(TARGET).await.unwrap().is_some();
        np && deploy && scaled && auth
    }

    async fn shut_down(self) {
        let _ = self.stop.send(true);
    }
}

/// The registration ([`TenantRepository::test`]): `deploy/` of `repo` over ssh, with the deploy
/// key and the pinned host key in its Secret, and a GitLab webhook whose token (and signing
/// token) are in `webhook_secret` when given.
async fn register(cluster: &Cluster, sshd: &Sshd, repo: &UpstreamRepo, webhook_secret: Option<&str>) {
    let key = sshd.client_key(KeyKind::Ed25519);
    cluster
        .put_secret(PLATFORM, CREDENTIALS, &[("identity", &key.private_key_pem), ("known_hosts", &sshd.known_hosts())])
        .await;
    let mut registration = TenantRepository::test()
        .with_name(REPO)
        .in_namespace(PLATFORM)
        .with_url(&sshd.url(repo.bare_path()))
        .with_path("deploy")
        .with_interval("10m")
        .with_secret_ref(CREDENTIALS);
    if let Some(secret) = webhook_secret {
        registration = registration.with_webhook_secret(secret);
    }
    cluster
        .api::<TenantRepository>(PLATFORM)
        .create(&PostParams::default(), &registration)
        .await
        .expect("create TenantRepository");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_push_and_trigger_applies_new_cdtarget_and_broken_push_stalls() {
    let test = "e2e_push_and_trigger_applies_new_cdtarget_and_broken_push_stalls";
    let Some(sshd) = common::skip_or_fail(test, Sshd::start()) else { return };
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    let first = repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "1"))], "first");

    let mut cluster = Cluster::start().await;
    // The tenant's PAT exists before the CDTarget referencing it arrives.
    cluster.put_secret(TENANT, TOKEN, &[("AZP_TOKEN", "pat-1")]).await;
    register(&cluster, &sshd, &repo, None).await;

    // Stand-in for the watches' initial lists at start-up (Init, InitApply per object,
    // InitDone): the registration exists, no CDTarget does yet. The initial list reconciles
    // the registration once, over ssh.
    cluster.registrations.unbounded_send(watcher::Event::Init).unwrap();
    cluster.registrations.unbounded_send(watcher::Event::InitApply(cluster.registration().await)).unwrap();
    cluster.registrations.unbounded_send(watcher::Event::InitDone).unwrap();
    cluster.targets.unbounded_send(watcher::Event::Init).unwrap();
    cluster.targets.unbounded_send(watcher::Event::InitDone).unwrap();
    cluster.repo_reconciles.next_ok("initial list").await;
    let status = cluster.registration().await.status.expect("status written");
    assert_eq!(status.last_applied_revision.as_deref(), Some(first.as_str()), "{status:#?}");
    assert!(is_true(&status.conditions, READY), "{status:#?}");
    // Stand-in for the Modified event of that status write: stored, and (status only) nothing
    // is reconciled or written.
    cluster.clear_writes();
    cluster.relay_registration().await;
    assert_eq!(cluster.writes(), Vec::<String>::new(), "a status write reconciles nothing");

    // A push adding a CDTarget, announced through the trigger (the webhook receiver's path).
    let second = repo.commit_and_push(&[("deploy/agents.yaml", cdtarget_yaml(TARGET, "10.1.2.3"))], "add agents");
    // The push has landed: from here on is what the webhook receiver's caller would wait for.
    let pushed = Instant::now();
    assert!(
        cluster.api::<CDTarget>(TENANT).get_opt(TARGET).await.unwrap().is_none(),
        "the controller is idle until triggered"
    );
    cluster.trigger.fire(PLATFORM, REPO).expect("controller running");
    cluster.repo_reconciles.next_ok("trigger").await;
    cluster.expect_cdtarget_ip("10.1.2.3").await;
    let cdtarget_applied = pushed.elapsed();
    // Stand-in for the CDTarget watch's Added event of the object the TenantRepository reconcile
    // just applied.
    cluster.relay_target().await;
    cluster.target_reconciles.next_ok("CDTarget Added event").await;
    assert!(cluster.children_present().await, "the four children");
    let children_applied = pushed.elapsed();
    eprintln!(
        "e2e latency: push -> CDTarget applied (reconcile done) {} ms, push -> four children applied {} ms",
        cdtarget_applied.as_millis(),
        children_applied.as_millis()
    );

    let status = cluster.registration().await.status.expect("status");
    assert_eq!(status.last_applied_revision.as_deref(), Some(second.as_str()), "{status:#?}");
    assert_eq!(status.inventory.len(), 2, "{status:#?}");
    let target = cluster.api::<CDTarget>(TENANT).get(TARGET).await.unwrap();
    let target_status = target.status.as_ref().expect("CDTarget status");
    // The children are in place (Ready also waits for agents, which never run on the fake).
    assert!(is_true(&target_status.conditions, "Applied"), "{target_status:#?}");
    let uid = target.metadata.uid.clone().expect("uid");
    let deployment = cluster.api::<Deployment>(TENANT).get(TARGET).await.unwrap();
    let owner = &deployment.metadata.owner_references.as_ref().expect("owner references")[0];
    assert_eq!((owner.uid.as_str(), owner.controller), (uid.as_str(), Some(true)));

    // Stand-in for the Modified events of both status writes: stored, nothing reconciled.
    cluster.relay_registration().await;
    cluster.relay_target().await;
    let before = cluster.applied().await;
    cluster.clear_writes();

    // A broken push: the CDTarget's ip is not an address.
    let broken = repo.commit_and_push(&[("deploy/agents.yaml", cdtarget_yaml(TARGET, "999.1.2.3"))], "break agents");
    cluster.trigger.fire(PLATFORM, REPO).expect("controller running");
    cluster.repo_reconciles.next_ok("trigger after the broken push").await;
    let status = cluster.registration().await.status.expect("status");
    assert_eq!(status.last_fetched_revision.as_deref(), Some(broken.as_str()), "{status:#?}");
    assert!(is_true(&status.conditions, STALLED), "{status:#?}");

    let stalled = status.conditions.iter().find(|c| c.type_ == STALLED).unwrap();
    assert_eq!(stalled.reason, REASON_VALIDATION_FAILED);
    let applied = status.conditions.iter().find(|c| c.type_ == APPLIED).unwrap();
    assert_eq!((applied.status.as_str(), applied.reason.as_str()), ("False", REASON_VALIDATION_FAILED));
    assert!(applied.message.contains("agents.yaml"), "the file is named: {}", applied.message);
    assert!(applied.message.contains("spec.ip[0]"), "the field is named: {}", applied.message);
    assert_eq!(status.last_applied_revision.as_deref(), Some(second.as_str()), "{status:#?}");
    assert_eq!(status.inventory.len(), 2, "the inventory is kept: {status:#?}");

    assert_eq!(cluster.writes(), [format!("status {PLATFORM}/{REPO}")], "only the status is written");
    let after = cluster.applied().await;
    for (kind, object) in &before {
        assert_eq!(&after[kind], object, "{kind} untouched by the broken push");
    }
    cluster.shut_down().await;
}

// === tenant identities follow the registrations ===

/// The reason and message of the CDTarget's condition `type_`.
async fn target_condition(cluster: &Cluster, type_: &str) -> (String, String) {
    let target = cluster.api::<CDTarget>(TENANT).get(TARGET).await.expect("get CDTarget");
    let conditions = target.status.expect("CDTarget status").conditions;
    let condition = conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_}"));
    (condition.reason.clone(), condition.message.clone())
}

/// The registration is moved to a ServiceAccount with fewer rights (the platform team takes
/// the tenant's read access to its token away): the very next CDTarget reconcile asks as the new
/// identity, though the list of registrations it would otherwise reuse is seconds old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_moved_to_a_weaker_service_account_binds_the_very_next_cdtarget_reconcile() {
    let mut cluster = Cluster::start().await;
    cluster.put_secret(TENANT, TOKEN, &[("AZP_TOKEN", "pat-1")]).await;
    // Applies into the tenant namespace as `deployer`; its repository is never reached (nothing
    // listens on port 1), which does not matter to the CDTarget reconciler.
    let registration =
        TenantRepository::test().with_name(REPO).in_namespace(PLATFORM).with_url("https://127.0.0.1:1/t.git");
    cluster.api::<TenantRepository>(PLATFORM).create(&PostParams::default(), &registration).await.unwrap();
    cluster.registrations.unbounded_send(watcher::Event::Init).unwrap();
    cluster.registrations.unbounded_send(watcher::Event::InitApply(cluster.registration().await)).unwrap();
    cluster.registrations.unbounded_send(watcher::Event::InitDone).unwrap();
    cluster.targets.unbounded_send(watcher::Event::Init).unwrap();
    cluster.targets.unbounded_send(watcher::Event::InitDone).unwrap();
    let target = CDTarget::test().with_name(TARGET).with_token_ref(TOKEN).with_ips(["10.1.2.3"]).with_replicas(1, 3);
    cluster.api::<CDTarget>(TENANT).create(&PostParams::default(), &target).await.unwrap();

    cluster
        .targets
        .unbounded_send(watcher::Event::Apply(cluster.api::<CDTarget>(TENANT).get(TARGET).await.unwrap()))
        .unwrap();
    cluster.target_reconciles.next_ok("CDTarget Added event").await;
    let listed = Instant::now();
    assert_eq!(target_condition(&cluster, "Applied").await.0, "Applied");
    assert_eq!(cluster.reviews.asked(), ["system:serviceaccount:team-a:deployer get secrets team-a/azp-token"]);

    // `ci` may not read the token; the registration now names it.
    cluster.reviews.deny("system:serviceaccount:team-a:ci", "secrets", TENANT, TOKEN);
    let move_to_ci = serde_json::json!({"spec": {"serviceAccountName": "ci"}});
    let registrations = cluster.api::<TenantRepository>(PLATFORM);
    registrations.patch(REPO, &PatchParams::default(), &Patch::Merge(&move_to_ci)).await.unwrap();
    cluster.relay_registration().await;

    // The next reconcile (a reconcile request; any change of the CDTarget or its Secrets does).
    let request = serde_json::json!({"metadata": {"annotations": {REQUESTED_AT: "after-the-move"}}});
    let patched =
        cluster.api::<CDTarget>(TENANT).patch(TARGET, &PatchParams::default(), &Patch::Merge(&request)).await.unwrap();
    cluster.targets.unbounded_send(watcher::Event::Apply(patched)).unwrap();
    cluster.target_reconciles.next_ok("the reconcile request").await;
    assert!(listed.elapsed() < REGISTRATIONS_TTL, "the first list would still serve: the test proves nothing");

    let (reason, message) = target_condition(&cluster, READY).await;
    assert_eq!(reason, REASON_SECRET_NOT_ALLOWED, "{message}");
    assert!(
        message
            .contains("Secret team-a/azp-token cannot be read by the tenant identity system:serviceaccount:team-a:ci"),
        "{message}"
    );
    assert!(
        cluster.reviews.asked().contains(&"system:serviceaccount:team-a:ci get secrets team-a/azp-token".to_owned()),
        "{:?}",
        cluster.reviews.asked()
    );
    cluster.shut_down().await;
}

// === the webhook receiver, end to end ===

const WEBHOOK_SECRET: &str = "team-a-webhook";
const HOOK_TOKEN: &str = "hook-token-of-team-a";
const SIGNING_KEY: [u8; 32] = *b"32 bytes of signing key material";
/// How long the burst test watches for reconciles that should not come.
const QUIET: Duration = Duration::from_secs(2);

/// The receiver of `cdtarget controller` on 127.0.0.1:0, triggering `cluster`'s controller, its
/// index kept by the production keeper on event streams this test feeds.
struct WebhookReceiver {
    base: String,
    client: reqwest::Client,
    index: Arc<webhook::Index>,
}

impl WebhookReceiver {
    /// The receiver on `listener`, its index kept by `cdtarget controller`'s own keeper from
    /// `registrations` (no Secret of the platform namespace changes in these tests); it stops
    /// with `stop`.
    fn start_on(
        client: &Client,
        registrations: &Registrations,
        listener: tokio::net::TcpListener,
        stop: &watch::Sender<bool>,
    ) -> (WebhookReceiver, Arc<webhook::Receiver>) {
        let index = Arc::new(webhook::Index::default());
        // No per-registration limit: the burst below is 21 deliveries of one registration.
        let limits = webhook::Limits { registration_rate: None, ..webhook::Limits::default() };
        let receiver = webhook::Receiver::new(index.clone(), limits, WebhookMetrics::default());
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(webhook::serve(listener, receiver.clone(), process::stopped(stop.subscribe())));
        tokio::spawn(process::keep_receiver_index(
            client.clone(),
            index.clone(),
            registrations,
            futures::stream::pending(),
            process::stopped(stop.subscribe()),
        ));
        (WebhookReceiver { base, client: reqwest::Client::new(), index }, receiver)
    }

    /// Posts a signed GitLab push of `after` to `main`, as GitLab 19 sends it with a signing
    /// token; returns the status.
    async fn post_push(&self, after: &str, delivery: &str) -> u16 {
        let fixture = format!("{}/tests/webhook/fixtures/gitlab-push.json", env!("CARGO_MANIFEST_DIR"));
        let mut push: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        push["after"] = after.into();
        push["checkout_sha"] = after.into();
        let body = serde_json::to_vec(&push).unwrap();
        let timestamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let signature = webhook::verify::standard_webhooks_signature(&SIGNING_KEY, delivery, timestamp, &body);
        let response = self
            .client
            .post(format!("{}{}", self.base, webhook_path(HOOK_TOKEN, REPO, PLATFORM)))
            .header("content-type", "application/json")
            .header("x-gitlab-event", "Push Hook")
            .header("x-gitlab-token", HOOK_TOKEN)
            .header("idempotency-key", delivery)
            .header("webhook-id", delivery)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await
            .expect("the receiver answers");
        response.status().as_u16()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_webhook_post_applies_the_push_and_a_burst_of_deliveries_coalesces() {
    use base64::Engine as _;
    let test = "e2e_webhook_post_applies_the_push_and_a_burst_of_deliveries_coalesces";
    let Some(sshd) = common::skip_or_fail(test, Sshd::start()) else { return };
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    let first = repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "1"))], "first");

    let mut cluster = Cluster::start().await;
    cluster.put_secret(TENANT, TOKEN, &[("AZP_TOKEN", "pat-1")]).await;
    let signing = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(SIGNING_KEY));
    cluster.put_secret(PLATFORM, WEBHOOK_SECRET, &[("token", HOOK_TOKEN), ("signingToken", &signing)]).await;
    register(&cluster, &sshd, &repo, Some(WEBHOOK_SECRET)).await;
    cluster.start_watches().await;
    let receiver = &cluster.receiver;
    let status = cluster.registration().await.status.expect("status written");
    assert_eq!(status.last_applied_revision.as_deref(), Some(first.as_str()), "{status:#?}");
    assert_eq!(status.webhook_path, Some(webhook_path(HOOK_TOKEN, REPO, PLATFORM)), "the path the receiver serves");
    // Stand-in for the Modified event of that status write (stored, nothing reconciled).
    cluster.relay_registration().await;

    // A push, announced by the webhook over HTTP.
    let second = repo.commit_and_push(&[("deploy/agents.yaml", cdtarget_yaml(TARGET, "10.1.2.3"))], "add agents");
    let pushed = Instant::now();
    assert_eq!(receiver.post_push(&second, "delivery-2").await, 202);
    let answered = pushed.elapsed();
    cluster.repo_reconciles.next_ok("the webhook's trigger").await;
    cluster.expect_cdtarget_ip("10.1.2.3").await;
    let cdtarget_applied = pushed.elapsed();
    // Stand-in for the CDTarget watch's Added event of the object just applied.
    cluster.relay_target().await;
    cluster.target_reconciles.next_ok("CDTarget Added event").await;
    assert!(cluster.children_present().await, "the four children");
    let children_applied = pushed.elapsed();
    eprintln!(
        "e2e webhook latency: push -> 202 answered {} ms, push -> CDTarget applied {} ms, push -> four children \
         applied {} ms",
        answered.as_millis(),
        cdtarget_applied.as_millis(),
        children_applied.as_millis()
    );
    let status = cluster.registration().await.status.expect("status");
    assert_eq!(status.last_applied_revision.as_deref(), Some(second.as_str()), "{status:#?}");
    // GitLab's resend of the same delivery triggers nothing.
    assert_eq!(receiver.post_push(&second, "delivery-2").await, 200);

    // A burst: 20 deliveries at once for the next push, then one more for a push after them.
    let third = repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "2"))], "settings 2");
    let burst = (0..20).map(|i| {
        let third = &third;
        async move { receiver.post_push(third, &format!("burst-{i}")).await }
    });
    let answers = futures::future::join_all(burst).await;
    assert!(answers.iter().all(|status| *status == 202), "{answers:?}");
    let fourth = repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "3"))], "settings 3");
    assert_eq!(receiver.post_push(&fourth, "after-the-burst").await, 202);
    // Every delivery reached the controller's trigger stream before the last one; the
    // controller merges the triggers of an object that is queued or running. Count the
    // reconciles until the last push is applied, then those that still follow: uncoalesced,
    // 21 deliveries would be 21 reconciles.
    let mut reconciles = 0;
    loop {
        cluster.repo_reconciles.next_ok("after the burst").await;
        reconciles += 1;
        let status = cluster.registration().await.status.expect("status");
        if status.last_applied_revision.as_deref() == Some(fourth.as_str()) {
            break;
        }
        assert!(reconciles < 21, "the burst was not coalesced");
    }
    // That nothing more is queued cannot be signalled, only observed: a quiet period, which can
    // make this test slower but never fail it wrongly (a queued no-op reconcile takes ~50 ms).
    while let Ok(Some(item)) = tokio::time::timeout(QUIET, cluster.repo_reconciles.receiver.next()).await {
        assert!(item.is_ok(), "{item:?}");
        reconciles += 1;
        assert!(reconciles <= 3, "21 deliveries took more than 3 reconciles");
    }
    eprintln!("e2e webhook burst: 21 deliveries accepted, {reconciles} reconciles in all");
    cluster.shut_down().await;
}

// === GitLab: key and hook registered by the controller, a push delivered by GitLab ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_gitlab_registers_key_and_hook_its_push_applies_and_deletion_removes_them() {
    use cdtarget::api::tenant_repository::GitLabSpec;
    use cdtarget::gitlab::{self, ClientConfig, GitLabClient};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::{Patch, PatchParams};

    use crate::common::fake_gitlab::{BOT_TOKEN, FakeGitLab, Push};

    let test = "e2e_gitlab_registers_key_and_hook_its_push_applies_and_deletion_removes_them";
    let Some(sshd) = common::skip_or_fail(test, Sshd::start()) else { return };
    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    let first = repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "1"))], "first");
    let fake_gitlab = FakeGitLab::start();
    let project = fake_gitlab.add_project("team-a/tenant");

    // The receiver's address is known before the controllers start: it is the hooks' URL.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let external = format!("http://{}", listener.local_addr().unwrap());
    let settings = gitlab::Settings {
        client: GitLabClient::new(ClientConfig::new(fake_gitlab.url(), gitlab::Secret::new(BOT_TOKEN))).unwrap(),
        webhook_external_url: external.clone(),
        known_hosts: sshd.known_hosts(),
        // Commit statuses are shown with the fake GitLab's repository model in tests/gitlab and
        // tests/cluster_tour; these fakes know no commits.
        commit_status: None,
    };
    let mut cluster = Cluster::start_with(Some(settings), listener).await;
    cluster.put_secret(PLATFORM, WEBHOOK_SECRET, &[("token", HOOK_TOKEN)]).await;
    // The Secret holds the key sshd accepts (a generated one would not be authorized there);
    // the controller derives `identity.pub` from it.
    register(&cluster, &sshd, &repo, Some(WEBHOOK_SECRET)).await;
    let gitlab_spec = GitLabSpec::test().for_project("team-a/tenant");
    let patch = serde_json::json!({"spec": {"gitlab": gitlab_spec}});
    cluster
        .api::<TenantRepository>(PLATFORM)
        .patch(REPO, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    cluster.start_watches().await;

    // Registered on GitLab: the Secret's key, read-only, and the hook at the receiver.
    let status = cluster.registration().await.status.expect("status written");
    assert_eq!(status.last_applied_revision.as_deref(), Some(first.as_str()), "{status:#?}");
    let synced =
        status.conditions.iter().find(|c| c.type_ == cdtarget::api::conditions::GITLAB_SYNCED).expect("GitLabSynced");
    assert_eq!(synced.status, "True", "{synced:?}");
    let keys = fake_gitlab.deploy_keys(project);
    let client_key = sshd.client_key(KeyKind::Ed25519);
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(Some(keys[0].fingerprint.clone()), gitlab::keys::fingerprint(&client_key.public_key).ok());
    assert!(!keys[0].can_push);
    let hooks = fake_gitlab.hooks(project);
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0].url, format!("{external}{}", webhook_path(HOOK_TOKEN, REPO, PLATFORM)));
    // Stand-in for the Modified event of the finalizer and status writes. kube-fake-client
    // bumps `metadata.generation` on the finalizer patch (an API server does not for metadata),
    // so the predicate lets this one through: one more (no-op) reconcile.
    cluster.relay_registration().await;
    cluster.repo_reconciles.next_ok("Modified event").await;

    // A push, delivered by GitLab's emitter to the hook it was given.
    let second = repo.commit_and_push(&[("deploy/settings.yaml", config_map_yaml("settings", "2"))], "settings 2");
    let deliveries = fake_gitlab.emit_push(project, &Push::branch("main", &second)).await;
    assert_eq!(deliveries.iter().map(|d| d.status).collect::<Vec<_>>(), [Some(202)], "{deliveries:?}");
    cluster.repo_reconciles.next_ok("the webhook's trigger").await;
    let settings = cluster.api::<ConfigMap>(TENANT).get_opt("settings").await.unwrap().expect("settings applied");
    assert_eq!(settings.data.unwrap_or_default().get("value").map(String::as_str), Some("2"));

    // Deletion: the registration as the watch shows it once `kubectl delete` started (held by
    // the finalizer; kube-fake-client itself does not hold objects for finalizers).
    let mut deleting = cluster.registration().await;
    assert!(deleting.metadata.finalizers.clone().unwrap_or_default().contains(&gitlab::FINALIZER.to_owned()));
    deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    cluster.relay(watcher::Event::Apply(deleting)).await;
    cluster.repo_reconciles.next_ok("the deletion").await;
    assert!(fake_gitlab.deploy_keys(project).is_empty(), "the deploy key is removed");
    assert!(fake_gitlab.hooks(project).is_empty(), "the hook is removed");
    let finalizers = cluster.registration().await.metadata.finalizers.unwrap_or_default();
    assert!(!finalizers.contains(&gitlab::FINALIZER.to_owned()), "the finalizer is released: {finalizers:?}");
    cluster.shut_down().await;
}
