//! A fake cluster for the reconcilers: kube-fake-client with cdtarget's and KEDA's kinds, an
//! interceptor that records every mutating request and answers SubjectAccessReviews, fixtures,
//! and a scanner for leaked secrets.

use std::sync::{Arc, Mutex};

use cdtarget::api::keda::{ScaledObject, TriggerAuthentication};
use cdtarget::api::tenant_repository::TenantRepository;
use cdtarget::api::{CDTarget, CDTargetSpec};
use cdtarget::controller::cdtarget::{Context, reconcile};
use cdtarget::fixtures::{self, SecretFixture};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use kube_fake_client::{ClientBuilder, interceptor};
use serde_json::Value;

use crate::common::access_review::AccessReviews;

/// The tenant namespace of every test.
pub const NAMESPACE: &str = fixtures::TENANT_NAMESPACE;
/// Name of the CDTarget under test.
pub const NAME: &str = fixtures::TARGET_NAME;
/// The controller's namespace, holding the policy ConfigMap.
pub const PLATFORM: &str = fixtures::PLATFORM_NAMESPACE;
/// Name of the policy ConfigMap.
pub const POLICY: &str = fixtures::POLICY_CONFIG_MAP.1;
/// Name of the token Secret.
pub const TOKEN: &str = fixtures::TOKEN_SECRET;

/// One mutating request seen by the fake: `verb kind namespace/name`.
pub type Writes = Arc<Mutex<Vec<String>>>;

/// A fake cluster and the controller context pointing at it.
pub struct Cluster {
    /// Client of the fake.
    pub client: Client,
    /// Every create and patch (spec or status) sent, in order.
    pub writes: Writes,
    /// The field manager of every patch: `Kind namespace/name manager`.
    pub field_managers: Writes,
    /// The body of every (non-status) patch, in order.
    pub patches: Arc<Mutex<Vec<Value>>>,
    /// Answers the SubjectAccessReviews the reconciler asks.
    pub reviews: AccessReviews,
    keda: bool,
}

fn kind_of(object: &Value) -> &str {
    object.get("kind").and_then(Value::as_str).unwrap_or("?")
}

/// Interceptors recording every create, patch, status patch and delete into `writes` as
/// `create Kind namespace/name`, `patch Kind namespace/name`, `status namespace/name` and
/// `delete namespace/name` (the TenantRepository and end-to-end tests).
/// SubjectAccessReviews are answered by an [`AccessReviews`] allowing everything; they are
/// questions, not writes, and are not recorded.
pub fn recording_writes(writes: &Writes) -> interceptor::Funcs {
    recording_writes_with(writes, AccessReviews::default())
}

/// [`recording_writes`], with SubjectAccessReviews answered by `reviews`.
pub fn recording_writes_with(writes: &Writes, reviews: AccessReviews) -> interceptor::Funcs {
    let (on_create, on_patch, on_status, on_delete) = (writes.clone(), writes.clone(), writes.clone(), writes.clone());
    interceptor::Funcs::new()
        .create(move |ctx| {
            if let Some(answer) = reviews.answer(ctx.object) {
                return Ok(Some(answer));
            }
            let name = ctx.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?");
            on_create.lock().unwrap().push(format!("create {} {}/{name}", kind_of(ctx.object), ctx.namespace));
            Ok(None)
        })
        .patch(move |ctx| {
            on_patch.lock().unwrap().push(format!("patch {} {}/{}", kind_of(ctx.patch), ctx.namespace, ctx.name));
            Ok(None)
        })
        .patch_status(move |ctx| {
            on_status.lock().unwrap().push(format!("status {}/{}", ctx.namespace, ctx.name));
            Ok(None)
        })
        .delete(move |ctx| {
            on_delete.lock().unwrap().push(format!("delete {}/{}", ctx.namespace, ctx.name));
            Ok(None)
        })
}

fn describe(verb: &str, object: &Value, namespace: &str, name: &str) -> String {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("?");
    format!("{verb} {kind} {namespace}/{name}")
}

impl Cluster {
    /// An empty cluster; `keda` says whether the KEDA CRDs are installed.
    pub async fn new(keda: bool) -> Cluster {
        Cluster::build(keda, None).await
    }

    /// An empty cluster whose API server refuses every apply of `kind` as invalid (422).
    pub async fn rejecting(keda: bool, kind: &'static str) -> Cluster {
        Cluster::build(keda, Some(kind)).await
    }

    async fn build(keda: bool, rejected_kind: Option<&'static str>) -> Cluster {
        // kube-fake-client enables kube's default (ring) TLS features: pick one provider.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let writes = Writes::default();
        let field_managers = Writes::default();
        let reviews = AccessReviews::default();
        let (on_create, on_patch, on_status) = (writes.clone(), writes.clone(), writes.clone());
        let (managers, answers) = (field_managers.clone(), reviews.clone());
        let patches: Arc<Mutex<Vec<Value>>> = Arc::default();
        let bodies = patches.clone();
        let funcs = interceptor::Funcs::new()
            .create(move |ctx| {
                if let Some(answer) = answers.answer(ctx.object) {
                    return Ok(Some(answer));
                }
                let name = ctx.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?");
                let ns = ctx.object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
                on_create.lock().unwrap().push(describe("create", ctx.object, ns, name));
                Ok(None)
            })
            .patch(move |ctx| {
                on_patch.lock().unwrap().push(describe("patch", ctx.patch, ctx.namespace, ctx.name));
                let manager = ctx.params.field_manager.as_deref().unwrap_or("-");
                managers
                    .lock()
                    .unwrap()
                    .push(format!("{} {manager}", describe("", ctx.patch, ctx.namespace, ctx.name).trim()));
                bodies.lock().unwrap().push(ctx.patch.clone());
                let kind = ctx.patch.get("kind").and_then(Value::as_str);
                if rejected_kind.is_some() && kind == rejected_kind {
                    return Err(kube_fake_client::Error::InvalidRequest("spec.template: Invalid value".into()));
                }
                Ok(None)
            })
            .patch_status(move |ctx| {
                on_status.lock().unwrap().push(describe("status", ctx.patch, ctx.namespace, ctx.name));
                Ok(None)
            });
        let mut builder = ClientBuilder::new()
            .with_resource::<CDTarget>()
            .with_status_subresource::<CDTarget>()
            .with_resource::<TenantRepository>()
            .with_interceptor_funcs(funcs);
        if keda {
            builder = builder.with_resource::<ScaledObject>().with_resource::<TriggerAuthentication>();
        }
        let client = builder.build().await.expect("fake client");
        Cluster { client, writes, field_managers, patches, reviews, keda }
    }

    /// The reconciler's context for this cluster.
    pub fn context(&self) -> Arc<Context> {
        Arc::new(
            Context::new(self.client.clone(), PLATFORM, POLICY)
                .with_keda(cdtarget::controller::cdtarget::Keda::new(self.keda)),
        )
    }

    /// Registers a TenantRepository applying into the tenant namespace as `service_account`:
    /// the namespace's tenant identity.
    pub async fn register_tenant(&self, name: &str, service_account: &str) {
        let repo = TenantRepository::test().with_name(name).service_account(service_account);
        let api: Api<TenantRepository> = Api::namespaced(self.client.clone(), PLATFORM);
        api.create(&PostParams::default(), &repo).await.expect("create TenantRepository");
    }

    /// Creates a Secret of `type_` with `annotations` in the tenant namespace (what a tenant
    /// with `create` on Secrets can do).
    pub async fn put_typed_secret(&self, name: &str, type_: &str, annotations: &[(&str, &str)], data: &[(&str, &str)]) {
        let mut secret = fixtures::secret(name, data).of_type(type_);
        for (key, value) in annotations {
            secret = secret.with_annotation(key, value);
        }
        self.api::<Secret>().create(&PostParams::default(), &secret).await.expect("create Secret");
    }

    /// Deletes the CDTarget `name`. kube-fake-client cascades a (background) deletion to every
    /// object listing its uid in `ownerReferences`, as the garbage collector does.
    pub async fn delete_target(&self, name: &str) {
        self.api::<CDTarget>().delete(name, &Default::default()).await.expect("delete CDTarget");
    }

    /// Typed access to a namespaced kind in the tenant namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    /// Creates the CDTarget through the API, so that it has a uid and a generation.
    pub async fn create_target(&self, target: &CDTarget) {
        self.api::<CDTarget>().create(&PostParams::default(), target).await.expect("create CDTarget");
    }

    /// Replaces the CDTarget's spec (a tenant push).
    pub async fn set_spec(&self, spec: &CDTargetSpec) {
        let patch = serde_json::json!({ "spec": spec });
        self.api::<CDTarget>()
            .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch CDTarget spec");
    }

    /// Creates or replaces a Secret in the tenant namespace.
    pub async fn put_secret(&self, name: &str, data: &[(&str, &str)]) {
        let secret = fixtures::secret(name, data);
        let api = self.api::<Secret>();
        let params = PatchParams::apply("test").force();
        api.patch(name, &params, &Patch::Apply(&secret)).await.expect("put Secret");
    }

    /// Creates or replaces the policy ConfigMap with `data`.
    pub async fn put_policy(&self, key: &str, value: &str) {
        let config_map = fixtures::policy_config_map(key, value);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), PLATFORM);
        // Replace the data wholesale: the fake's apply merges maps.
        let _ = api.delete(POLICY, &Default::default()).await;
        api.create(&PostParams::default(), &config_map).await.expect("create policy ConfigMap");
    }

    /// The CDTarget as stored now.
    pub async fn target(&self) -> CDTarget {
        self.api::<CDTarget>().get(NAME).await.expect("get CDTarget")
    }

    /// Reads the CDTarget and reconciles it once, as a watch event would.
    pub async fn reconcile(&self) -> Action {
        let target = self.target().await;
        reconcile(Arc::new(target), self.context()).await.expect("reconcile")
    }

    /// Reads CDTarget `name` and reconciles it once with `ctx`.
    pub async fn reconcile_named(&self, name: &str, ctx: Arc<Context>) -> Action {
        let target = self.api::<CDTarget>().get(name).await.expect("get CDTarget");
        reconcile(Arc::new(target), ctx).await.expect("reconcile")
    }

    /// The agents run, as the Deployment controller and KEDA would report it: the Deployment has
    /// observed its generation with [`target`]'s `minReplicaCount` (2) agents available, and the
    /// ScaledObject (with KEDA) is Ready. Recorded as writes, like any patch.
    pub async fn agents_run(&self) {
        let deployments = self.api::<k8s_openapi::api::apps::v1::Deployment>();
        let generation = deployments.get(NAME).await.expect("the Deployment").metadata.generation.unwrap_or(1);
        let status = serde_json::json!({"status": {
            "observedGeneration": generation, "replicas": 2, "readyReplicas": 2, "availableReplicas": 2,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
        }});
        deployments
            .patch_status(NAME, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("Deployment status");
        if self.keda {
            let ready = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
            self.api::<ScaledObject>()
                .patch_status(NAME, &PatchParams::default(), &Patch::Merge(&ready))
                .await
                .expect("ScaledObject status");
        }
    }

    /// Forgets the writes recorded so far.
    pub fn clear_writes(&self) {
        self.writes.lock().unwrap().clear();
    }

    /// The writes recorded since the last [`Cluster::clear_writes`].
    pub fn writes(&self) -> Vec<String> {
        self.writes.lock().unwrap().clone()
    }
}

/// [`target`] named `name`.
pub fn target_named(name: &str) -> CDTarget {
    target().with_name(name)
}

/// The CDTarget under test: [`CDTarget::test`] (`team-a/agents`, token in `azp-token`) with two
/// destinations and two to five agents.
pub fn target() -> CDTarget {
    CDTarget::test().with_ips(["10.1.2.3", "192.168.10.0/24"]).with_replicas(2, 5)
}

/// A cluster holding `target()` and its token Secret.
pub async fn cluster_with_target(keda: bool) -> Cluster {
    let cluster = Cluster::new(keda).await;
    cluster.put_secret(TOKEN, &[("AZP_TOKEN", "pat-1")]).await;
    cluster.create_target(&target()).await;
    cluster.clear_writes();
    cluster
}

/// The uid of the stored CDTarget.
pub async fn uid(cluster: &Cluster) -> String {
    cluster.target().await.uid().expect("the fake sets a uid")
}

// === leaked secrets ===

/// The secret values of a test's fixtures (tokens, passwords, private keys, webhook tokens and
/// paths, URL userinfo), and the check that none of them appears in what the controllers wrote.
/// Each value is also looked for in base64, and a PEM key line by line.
#[derive(Clone, Debug, Default)]
pub struct SecretScanner {
    /// `(what it is, the text to look for)`.
    needles: Vec<(String, String)>,
}

/// One secret found where it must not be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leak {
    /// Where: `status of CDTarget team-a/agents`, `Event ...`, `logs`.
    pub place: String,
    /// Which secret (its label, never its value).
    pub secret: String,
}

impl SecretScanner {
    /// No secrets yet.
    pub fn new() -> Self {
        SecretScanner::default()
    }

    /// Looks for `value` (labelled `label`) and its base64 form; a multi-line value (a PEM key)
    /// is looked for line by line (lines of 16 characters or more: the key material).
    pub fn secret(&mut self, label: &str, value: &str) -> &mut Self {
        use base64::Engine;
        let lines: Vec<&str> = value.lines().map(str::trim).filter(|l| l.len() >= 16).collect();
        let parts = if lines.len() > 1 { lines } else { vec![value.trim()] };
        for part in parts {
            self.needles.push((label.to_owned(), part.to_owned()));
            self.needles.push((format!("{label} (base64)"), base64::engine::general_purpose::STANDARD.encode(part)));
        }
        self
    }

    /// Every secret found in `text`, and any URL carrying userinfo other than the redacted
    /// `***@`, as found at `place`.
    pub fn leaks(&self, place: &str, text: &str) -> Vec<Leak> {
        let mut found: Vec<Leak> = self
            .needles
            .iter()
            .filter(|(_, needle)| text.contains(needle.as_str()))
            .map(|(label, _)| Leak { place: place.to_owned(), secret: label.clone() })
            .collect();
        if has_userinfo(text) {
            found.push(Leak { place: place.to_owned(), secret: "URL userinfo".into() });
        }
        found.dedup();
        found
    }
}

/// Whether some `scheme://user[:password]@host` in `text` has userinfo other than `***`.
fn has_userinfo(text: &str) -> bool {
    text.match_indices("://").any(|(at, _)| {
        let rest = &text[at + 3..];
        let end = rest.find(|c: char| c == '/' || c.is_whitespace() || "\"'\\,;)]}".contains(c)).unwrap_or(rest.len());
        rest[..end].rsplit_once('@').is_some_and(|(userinfo, _)| userinfo != "***")
    })
}

/// Everything the controllers wrote into the cluster, as `(place, JSON text)`: the status of
/// every CDTarget and TenantRepository, and every Event (events.k8s.io/v1 and core/v1), in
/// every namespace. `status.webhookPath` of a registration is left out: it is the one place the
/// receiver path is meant to be (the platform namespace), and it is checked against its own
/// registration instead.
pub async fn written_by_controllers(client: &Client) -> Vec<(String, String)> {
    let mut written = Vec::new();
    for target in Api::<CDTarget>::all(client.clone()).list(&Default::default()).await.expect("list CDTargets").items {
        let place = format!("status of CDTarget {}/{}", target.namespace().unwrap_or_default(), target.name_any());
        written.push((place, serde_json::to_string(&target.status).unwrap()));
    }
    let registrations = Api::<TenantRepository>::all(client.clone()).list(&Default::default()).await.expect("list");
    for repo in registrations.items {
        let place = format!("status of TenantRepository {}/{}", repo.namespace().unwrap_or_default(), repo.name_any());
        let mut status = serde_json::to_value(&repo.status).unwrap();
        if let Some(status) = status.as_object_mut() {
            status.remove("webhookPath");
        }
        written.push((place, status.to_string()));
    }
    let events = Api::<k8s_openapi::api::events::v1::Event>::all(client.clone()).list(&Default::default()).await;
    for event in events.expect("list Events").items {
        written.push((format!("Event {}", event.name_any()), serde_json::to_string(&event).unwrap()));
    }
    let core_events = Api::<k8s_openapi::api::core::v1::Event>::all(client.clone()).list(&Default::default()).await;
    for event in core_events.expect("list core Events").items {
        written.push((format!("core Event {}", event.name_any()), serde_json::to_string(&event).unwrap()));
    }
    written
}

/// Log output of the current thread while it is alive: every level of every target, as the
/// controller's text logs would show it.
pub struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    /// Starts capturing (on this thread: use a current-thread runtime).
    pub fn start() -> LogCapture {
        let buffer: Arc<Mutex<Vec<u8>>> = Arc::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || CaptureWriter(sink.clone()))
            .finish();
        LogCapture { buffer, _guard: tracing::subscriber::set_default(subscriber) }
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap()).into_owned()
    }
}

struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_scanner_finds_values_their_base64_key_lines_and_userinfo() {
    let mut scanner = SecretScanner::new();
    scanner.secret("token", "glpat-0123456789abcdef").secret(
        "key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n",
    );
    assert_eq!(scanner.leaks("x", "fine: https://***@host/repo and ssh://127.0.0.1/x"), []);
    let labels = |text: &str| scanner.leaks("x", text).into_iter().map(|l| l.secret).collect::<Vec<_>>();
    assert_eq!(labels("token glpat-0123456789abcdef"), ["token"]);
    assert_eq!(labels("Z2xwYXQtMDEyMzQ1Njc4OWFiY2RlZg=="), ["token (base64)"]);
    assert_eq!(labels("…b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ…"), ["key"]);
    assert_eq!(labels("fetching https://oauth2:other@host/repo"), ["URL userinfo"]);
}
