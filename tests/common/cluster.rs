//! The cluster scenarios' kit, shared by every binary that runs cdtarget on a real control plane
//! (`tests/cluster/`, the fault and least-privilege suites, the real-API benchmark):
//!
//! * [`installed_cluster`]: the control plane with `deploy/` (`kubectl apply -k deploy/`, as
//!   documented) and KEDA's CRDs (v2.21.0's, from its Go module) installed once per binary;
//! * [`Controller`]: `cdtarget controller` as a process, authenticated with a TokenRequest token
//!   of `cdtarget-system/cdtarget` (exactly the RBAC users install, never an admin kubeconfig),
//!   logging to a file, killed on drop; [`shared_controller`] is the one a binary shares;
//! * [`Tenant`]: a tenant onboarded as `examples/platform/tenant-rbac.yaml` says, with a repository
//!   served by `git daemon` and a TenantRepository registering it;
//! * what the assertions share: predicates, the example documents, audit filters.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cdtarget::api::{CDTarget, TenantRepository};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::wait::{Condition, await_condition};

use super::control_plane::{AuditMark, EXTERNAL_KUBECONFIG, Options, OwnControlPlane, kill_at_exit, until_appended};
use super::keda::KedaRelease;
use super::process::find_on_path;
use super::{
    AuditEvent, ControlPlane, GitDaemon, HarnessError, TestDir, Upstream, UpstreamRepo, skip_or_fail, test_dir,
};

/// How long the controller may take to act on a change it was just given.
pub const CONVERGE: Duration = Duration::from_secs(120);

/// The controller's identity on the API server: deploy/'s ServiceAccount.
pub const CONTROLLER_USER: &str = "system:serviceaccount:cdtarget-system:cdtarget";

/// The namespace deploy/ installs the controller into, where registrations live.
pub const PLATFORM_NAMESPACE: &str = "cdtarget-system";

/// A CDTarget named `deploy-agents` with one address and the `azp-token` Secret.
pub const CDTARGET: &str = "apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: deploy-agents\nspec:\n  agentImage: ghcr.io/acme/azp-agent:4.255.0\n  tokenRef: azp-token\n  ip:\n    - 10.20.0.10\n  config:\n    url: https://dev.azure.com/acme\n    poolName: payments-deploy\n";

/// A tenant ConfigMap named `pipeline-settings` holding `RETRIES: "3"`.
pub const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pipeline-settings\ndata:\n  RETRIES: \"3\"\n";

/// KEDA's CRDs of the release the cluster tests run (`config/crd/bases` of KEDA v2.21.0's Go
/// module, `go mod download`ed into the module cache when it is not there); never copied in.
/// When the module cannot be had, a path that is no directory, naming why.
pub fn keda_crds_dir() -> PathBuf {
    keda_crds_dir_of(KedaRelease::V2_21_0)
}

/// The CRDs of KEDA `release` (`config/crd/bases` of its Go module), as [`keda_crds_dir`].
pub fn keda_crds_dir_of(release: KedaRelease) -> PathBuf {
    match release.source_dir() {
        Ok(module) => module.join("config/crd/bases"),
        Err(why) => PathBuf::from(format!("<KEDA's Go module: {why}>")),
    }
}

/// What installing printed: `kubectl apply -k deploy/` and `kubectl apply -f <keda CRDs>`.
pub struct Installed {
    pub deploy: String,
    pub keda: String,
}

/// The shared control plane with cdtarget and KEDA's CRDs installed and established, or `None`
/// after a SKIP line (no Go, no kubectl, no KEDA contracts) when not under `CI`.
pub fn installed_cluster(test: &str) -> Option<(&'static ControlPlane, &'static Installed)> {
    installed_cluster_with(test, &Options::default())
}

/// [`installed_cluster`] on a control plane started with `options` (the same in every test of
/// the binary).
pub fn installed_cluster_with(test: &str, options: &Options) -> Option<(&'static ControlPlane, &'static Installed)> {
    if find_on_path("kubectl").is_none() {
        skip_or_fail::<()>(test, Err(HarnessError::Unavailable("kubectl is not installed".into())))?;
    }
    let cluster = skip_or_fail(test, ControlPlane::shared_with(options))?;
    let keda = keda_crds_dir();
    if !keda.is_dir() {
        skip_or_fail::<()>(test, Err(HarnessError::Unavailable(format!("KEDA's CRDs are not at {}", keda.display()))))?;
    }
    static INSTALLED: OnceLock<Installed> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| install(cluster, &keda));
    Some((cluster, installed))
}

/// A control plane of the test's own ([`ControlPlane::start_own`]: its processes may be killed
/// and started again) with cdtarget and KEDA's CRDs installed as [`installed_cluster`] installs
/// them, or `None` after a SKIP line (no Go, no kubectl, no KEDA contracts, the tests pointed at
/// an existing cluster) when not under `CI`.
pub fn own_installed_cluster(test: &str) -> Option<OwnControlPlane> {
    own_installed_cluster_with(test, &Options::default())
}

/// [`own_installed_cluster`] on a control plane started with `options`.
pub fn own_installed_cluster_with(test: &str, options: &Options) -> Option<OwnControlPlane> {
    own_installed_cluster_with_keda(test, options, KedaRelease::V2_21_0)
}

/// [`own_installed_cluster_with`], with the CRDs of KEDA `release` instead of v2.21.0's: the
/// schema cdtarget's controller tells KEDA's release from is the one installed first (an apply of
/// an older release's CRDs over newer ones, by another field manager, would leave the newer
/// fields in place).
pub fn own_installed_cluster_with_keda(test: &str, options: &Options, release: KedaRelease) -> Option<OwnControlPlane> {
    if find_on_path("kubectl").is_none() {
        skip_or_fail::<()>(test, Err(HarnessError::Unavailable("kubectl is not installed".into())))?;
    }
    let keda = keda_crds_dir_of(release);
    if !keda.is_dir() {
        skip_or_fail::<()>(test, Err(HarnessError::Unavailable(format!("KEDA's CRDs are not at {}", keda.display()))))?;
    }
    if std::env::var_os(EXTERNAL_KUBECONFIG).is_some() {
        // Its processes are killed and started again, and cluster-wide state changes: never on
        // someone's existing cluster.
        let why = format!("needs a control plane of its own, which {EXTERNAL_KUBECONFIG} (an existing cluster) is not");
        skip_or_fail::<()>(test, Err(HarnessError::Unavailable(why)))?;
    }
    let cluster = skip_or_fail(test, ControlPlane::start_own_with(options))?;
    install(&cluster, &keda);
    Some(cluster)
}

/// `/metrics` of a controller at `address`.
pub async fn scrape_metrics(address: std::net::SocketAddr) -> String {
    reqwest::get(format!("http://{address}/metrics"))
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("GET /metrics")
        .text()
        .await
        .expect("the /metrics body")
}

/// Waits until the CRDs named (`crd/<plural>.<group>`) are Established.
pub fn await_established(cluster: &ControlPlane, crds: &[&str]) {
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend_from_slice(crds);
    cluster.kubectl(&args).success();
}

/// `deploy/` and KEDA's CRDs applied exactly as README and docs/operations.md say, from the
/// repository root, and the CRDs established.
pub fn install(cluster: &ControlPlane, keda: &Path) -> Installed {
    let deploy = cluster.kubectl(&["apply", "-k", "deploy/"]).success();
    // Server-side: the ScaledJob CRD is too large for the annotation of a client-side apply.
    let keda = cluster.kubectl(&["apply", "--server-side", "-f", path_str(keda)]).success();
    await_established(
        cluster,
        &[
            "crd/cdtargets.cdtarget.io",
            "crd/tenantrepositories.cdtarget.io",
            "crd/scaledobjects.keda.sh",
            "crd/scaledjobs.keda.sh",
            "crd/triggerauthentications.keda.sh",
        ],
    );
    Installed { deploy, keda }
}

/// A new namespace named `<prefix>-<n>` (`<prefix>-<run>-<n>` on an existing cluster, where
/// earlier runs left theirs), created with kubectl as the admin and labelled
/// `cdtarget.io/test-run=<run>` so that a run's namespaces can be found and removed.
pub fn namespace(cluster: &ControlPlane, prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let name = if cluster.is_external() { format!("{prefix}-{}-{n}", run_tag()) } else { format!("{prefix}-{n}") };
    cluster.kubectl(&["create", "namespace", &name]).success();
    cluster.kubectl(&["label", "namespace", &name, &format!("cdtarget.io/test-run={}", run_tag())]).success();
    name
}

/// This test process's run: six hex digits from its pid and start time.
pub fn run_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        format!("{:06x}", (nanos ^ u128::from(std::process::id()).rotate_left(20)) & 0xff_ffff)
    })
}

/// `cdtarget controller` as a process (see the module documentation). Killed with SIGKILL when
/// dropped; [`Controller::leak`] keeps it for the life of the test process instead.
pub struct Controller {
    child: Option<Child>,
    log: PathBuf,
}

impl Controller {
    /// Starts `cdtarget controller --namespace cdtarget-system` with OS-picked metrics and webhook
    /// ports, a cache directory and a log file under the control plane's directory named after
    /// `name` (also its `POD_NAME`, the Lease holder identity), plus `extra` flags.
    pub async fn start(cluster: &ControlPlane, name: &str, extra: &[&str]) -> Controller {
        let kubeconfig = cluster.service_account_kubeconfig(PLATFORM_NAMESPACE, "cdtarget").await;
        let dir = cluster.dir().join("controllers").join(name);
        fs::create_dir_all(&dir).expect("controller directory");
        let log = dir.join("controller.log");
        let out = fs::OpenOptions::new().create(true).append(true).open(&log).expect("controller log");
        let child = Command::new(env!("CARGO_BIN_EXE_cdtarget"))
            .args(["controller", "--namespace", PLATFORM_NAMESPACE])
            .args(["--metrics-address", "127.0.0.1:0", "--webhook-addr", "127.0.0.1:0"])
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .args(extra)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", name)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("spawn cdtarget controller");
        Controller { child: Some(child), log }
    }

    /// Starts `cdtarget <args>` with a TokenRequest token of the ServiceAccount
    /// `service_account` (`namespace`, `name`) and exactly the environment `env` besides
    /// `KUBECONFIG` (and what the test process has), logging to a file named after `name`: a
    /// controller started as a pod spec of someone else's says (e.g. a Deployment the chart
    /// installed), where [`Controller::start`] starts it as `deploy/` does.
    pub async fn start_as(
        cluster: &ControlPlane,
        name: &str,
        service_account: (&str, &str),
        args: &[String],
        env: &[(String, String)],
    ) -> Controller {
        let kubeconfig = cluster.service_account_kubeconfig(service_account.0, service_account.1).await;
        let dir = cluster.dir().join("controllers").join(name);
        fs::create_dir_all(&dir).expect("controller directory");
        let log = dir.join("controller.log");
        let out = fs::OpenOptions::new().create(true).append(true).open(&log).expect("controller log");
        let child = Command::new(env!("CARGO_BIN_EXE_cdtarget"))
            .args(args)
            .envs(env.iter().map(|(key, value)| (key, value)))
            .env("KUBECONFIG", &kubeconfig)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("spawn cdtarget controller");
        Controller { child: Some(child), log }
    }

    /// The process's log file (stdout and stderr); appended to across restarts of the same name.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("a running controller")
    }

    /// SIGKILL, no shutdown: what a node failure or the OOM killer does.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The address the webhook receiver is bound to, read off the log once it says so.
    pub fn webhook_address(&self) -> SocketAddr {
        self.logged_address("serving the webhook receiver")
    }

    /// The address of `/metrics`, `/healthz` and `/readyz`, read off the log once it says so.
    pub fn metrics_address(&self) -> SocketAddr {
        self.logged_address("serving /metrics")
    }

    fn logged_address(&self, message: &str) -> SocketAddr {
        logged_address(&self.log, message)
    }

    /// Keeps the process for the life of the test process (for statics, which are never
    /// dropped): it is killed by PID when the test process exits.
    pub fn leak(mut self) -> PathBuf {
        let child = self.child.take().expect("a running controller");
        kill_at_exit(vec![child.id()], None);
        std::mem::forget(child);
        self.log.clone()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The address a controller logging to `log` serves `/metrics`, `/healthz` and `/readyz` on, read
/// off the log once it says so (for the [`shared_controller`], whose log is all a test has).
pub fn logged_metrics_address(log: &Path) -> SocketAddr {
    logged_address(log, "serving /metrics")
}

/// The address of the webhook receiver of a controller logging to `log`.
pub fn logged_webhook_address(log: &Path) -> SocketAddr {
    logged_address(log, "serving the webhook receiver")
}

fn logged_address(log: &Path, message: &str) -> SocketAddr {
    until_appended(log, Duration::from_secs(60), message, || {
        let text = fs::read_to_string(log).unwrap_or_default();
        let line = text.lines().find(|line| line.contains(message))?;
        let value = line.split("address=").nth(1)?.split_whitespace().next()?;
        value.trim_matches('"').parse().ok()
    })
}

/// The controller process a test binary shares (one Lease holder): its log file. Started once,
/// with a fresh token; killed by PID when the test process exits.
pub async fn shared_controller(cluster: &'static ControlPlane) -> &'static Path {
    static LOG: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    LOG.get_or_init(|| async move {
        Controller::start(cluster, &format!("cdtarget-test-{}", std::process::id()), &[]).await.leak()
    })
    .await
}

/// A tenant onboarded as `examples/platform/tenant-rbac.yaml` says (namespace, ServiceAccount,
/// Role, RoleBinding, admission policies), with its token Secret `azp-token`, a repository
/// served by `git daemon` and a TenantRepository (named after the namespace, in
/// `cdtarget-system`) registering its `deploy/` directory, prune on, interval 5m.
pub struct Tenant {
    pub cluster: &'static ControlPlane,
    pub ns: String,
    pub repo: UpstreamRepo,
    pub daemon: GitDaemon,
    pub upstream: Upstream,
    pub dir: TestDir,
}

impl Tenant {
    /// Onboards a tenant whose first commit holds `files`.
    pub fn onboard(cluster: &'static ControlPlane, files: &[(&str, &str)]) -> Tenant {
        Tenant::onboard_with(cluster, files, "")
    }

    /// Onboards a tenant whose first commit holds `files`, with `extra_spec` (YAML lines indented
    /// by two spaces, e.g. `"  suspend: false\n"`) appended to the registration's spec.
    pub fn onboard_with(cluster: &'static ControlPlane, files: &[(&str, &str)], extra_spec: &str) -> Tenant {
        let dir = test_dir();
        let ns = namespace(cluster, "tenant");
        let example =
            fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/platform/tenant-rbac.yaml"))
                .expect("read the tenant RBAC example");
        let rbac = dir.path().join("tenant-rbac.yaml");
        fs::write(&rbac, example.replace("team-payments", &ns)).expect("write the tenant RBAC");
        {
            // The example's admission policies are cluster-wide and shared by every tenant: one
            // apply at a time, or concurrent applies of the same objects conflict.
            static CLUSTER_WIDE: std::sync::Mutex<()> = std::sync::Mutex::new(());
            let _one = CLUSTER_WIDE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            cluster.kubectl(&["apply", "-f", path_str(&rbac)]).success();
        }
        cluster
            .kubectl(&[
                "create",
                "secret",
                "generic",
                "azp-token",
                "-n",
                &ns,
                "--from-literal=AZP_TOKEN=not-a-real-pat",
            ])
            .success();

        let upstream = Upstream::new();
        let repo = upstream.create("tenant.git");
        repo.commit_and_push(files, "first");
        let daemon = GitDaemon::start(&upstream.root());
        let registration = format!(
            "apiVersion: cdtarget.io/v1alpha1\nkind: TenantRepository\nmetadata:\n  name: {ns}\n  namespace: {PLATFORM_NAMESPACE}\nspec:\n  url: {url}\n  ref:\n    branch: main\n  path: deploy\n  interval: 5m\n  targetNamespace: {ns}\n  serviceAccountName: cdtarget-tenant\n  prune: true\n{extra_spec}",
            url = daemon.url("tenant.git")
        );
        let file = dir.path().join("registration.yaml");
        fs::write(&file, registration).expect("write the registration");
        cluster.kubectl(&["apply", "-f", path_str(&file)]).success();
        Tenant { cluster, ns, repo, daemon, upstream, dir }
    }

    /// The tenant's ServiceAccount as the API server names it.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:cdtarget-tenant", self.ns)
    }

    /// "Reconcile now", as docs/operations.md says.
    pub fn request_reconcile(&self, value: &str) {
        self.cluster
            .kubectl(&[
                "annotate",
                "-n",
                PLATFORM_NAMESPACE,
                "tenantrepository",
                &self.ns,
                &format!("cdtarget.io/requestedAt={value}"),
                "--overwrite",
            ])
            .success();
    }

    /// Changes the registration with a merge `patch` (e.g. `{"spec":{"suspend":false}}`), as the
    /// platform team would with kubectl.
    pub fn patch_registration(&self, patch: &str) {
        self.cluster
            .kubectl(&["patch", "tenantrepository", &self.ns, "-n", PLATFORM_NAMESPACE, "--type=merge", "-p", patch])
            .success();
    }

    /// Waits (at most [`CONVERGE`]) until the object `name` of kind `K` in the tenant namespace
    /// meets `condition`, or panics with `what` and [`Tenant::diagnostics`].
    pub async fn until<K, C>(&self, what: &str, name: &str, condition: C, log: &Path)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + 'static,
        K::DynamicType: Default,
        C: Condition<K>,
    {
        let api: Api<K> = Api::namespaced(self.cluster.admin_client().await, &self.ns);
        let outcome = tokio::time::timeout(CONVERGE, await_condition(api, name, condition)).await;
        assert!(matches!(outcome, Ok(Ok(_))), "{what} not within {CONVERGE:?} ({outcome:?}){}", self.diagnostics(log));
    }

    /// Waits (at most [`CONVERGE`]) until the registration meets `condition` and returns it.
    pub async fn registration_until(
        &self,
        what: &str,
        condition: impl Condition<TenantRepository>,
        log: &Path,
    ) -> TenantRepository {
        let api: Api<TenantRepository> = Api::namespaced(self.cluster.admin_client().await, PLATFORM_NAMESPACE);
        let outcome = tokio::time::timeout(CONVERGE, await_condition(api, &self.ns, condition)).await;
        match outcome {
            Ok(Ok(Some(registration))) => registration,
            other => panic!("{what} not within {CONVERGE:?} ({other:?}){}", self.diagnostics(log)),
        }
    }

    /// What a failure message needs: the tenant's objects, the registration's status, the
    /// requests in the tenant namespace and the controller's log.
    pub fn diagnostics(&self, log: &Path) -> String {
        let objects = self.cluster.kubectl(&["get", "all,cdtargets,networkpolicies,configmaps", "-n", &self.ns]);
        let registration =
            self.cluster.kubectl(&["get", "tenantrepository", "-n", PLATFORM_NAMESPACE, &self.ns, "-o", "yaml"]);
        let requests: Vec<String> = self
            .cluster
            .audit_requests_since(AuditMark::START)
            .into_iter()
            .filter(|event| {
                event.namespace == self.ns && event.verb != "get" && event.verb != "list" && event.verb != "watch"
            })
            .map(|event| {
                format!(
                    "{} {} {}/{} as {} -> {}",
                    event.user,
                    event.verb,
                    event.full_resource(),
                    event.name,
                    event.acting_user(),
                    event.code
                )
            })
            .collect();
        format!(
            "\n--- objects:\n{}{}\n--- registration:\n{}\n--- writes in {}:\n{}\n--- controller log:\n{}",
            String::from_utf8_lossy(&objects.output.stdout),
            String::from_utf8_lossy(&objects.output.stderr),
            String::from_utf8_lossy(&registration.output.stdout),
            self.ns,
            requests.join("\n"),
            fs::read_to_string(log).unwrap_or_default()
        )
    }
}

/// A path as the `&str` a command line takes.
pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// A condition: the object exists.
pub fn exists<K>(object: Option<&K>) -> bool {
    object.is_some()
}

/// A condition: the object is gone.
pub fn gone<K>(object: Option<&K>) -> bool {
    object.is_none()
}

/// The CDTarget's status has a `Ready` condition (whatever its value: the agents never run here).
pub fn ready(object: Option<&CDTarget>) -> bool {
    object
        .and_then(|target| target.status.as_ref())
        .is_some_and(|status| status.conditions.iter().any(|c| c.type_ == "Ready"))
}

/// A condition: the registration's `Applied` condition has `status` and `reason`.
pub fn applied(status: &'static str, reason: &'static str) -> impl Fn(Option<&TenantRepository>) -> bool {
    move |registration| {
        registration.and_then(|r| r.status.as_ref()).is_some_and(|s| {
            s.conditions.iter().any(|c| c.type_ == "Applied" && c.status == status && c.reason == reason)
        })
    }
}

/// Changes the tenant's ConfigMap `pipeline-settings` in `ns` with kubectl, away from Git.
pub fn drift_pipeline_settings(cluster: &ControlPlane, ns: &str) {
    let patch = r#"{"data":{"RETRIES":"9"}}"#;
    cluster.kubectl(&["patch", "configmap", "pipeline-settings", "-n", ns, "--type=merge", "-p", patch]).success();
}

/// Changes the NetworkPolicy child `deploy-agents` in `ns` with kubectl (no egress at all), away
/// from what the controller rendered.
pub fn drift_network_policy(cluster: &ControlPlane, ns: &str) {
    let patch = r#"{"spec":{"egress":[]}}"#;
    cluster.kubectl(&["patch", "networkpolicy", "deploy-agents", "-n", ns, "--type=merge", "-p", patch]).success();
}

/// Rotates the tenant's token Secret `azp-token` in `ns` with kubectl (a new `AZP_TOKEN`).
pub fn rotate_token(cluster: &ControlPlane, ns: &str) {
    let patch = r#"{"stringData":{"AZP_TOKEN":"rotated"}}"#;
    cluster.kubectl(&["patch", "secret", "azp-token", "-n", ns, "--type=merge", "-p", patch]).success();
}

/// Whether `pipeline-settings` holds what Git says (`RETRIES: "3"`).
pub fn settings_as_in_git(object: Option<&ConfigMap>) -> bool {
    object.and_then(|map| map.data.as_ref()).is_some_and(|data| data.get("RETRIES").map(String::as_str) == Some("3"))
}

/// The writes of `resource` (`plural` or `plural/subresource`) `name` in `ns` the controller sent
/// and the API server accepted, each as the identity it acted as.
pub fn accepted_writes_as(events: &[AuditEvent], ns: &str, resource: &str, name: &str) -> Vec<String> {
    events
        .iter()
        .filter(|event| event.is_mutating() && event.namespace == ns && event.user == CONTROLLER_USER)
        .filter(|event| event.full_resource() == resource && event.name == name && (200..300).contains(&event.code))
        .map(|event| event.acting_user().to_string())
        .collect()
}

/// Calls `check` with the objects of `api` that `config` selects, once they are listed and again
/// after every change a watch of them reports (no timer), until it gives a value, at most
/// `within`; then panics with `what` and `diagnostics()`. For objects another process writes: the
/// Jobs KEDA creates, the pods the Job controller creates.
pub async fn until_listed<K, T>(
    api: Api<K>,
    config: kube::runtime::watcher::Config,
    within: Duration,
    what: &str,
    mut check: impl FnMut(&[K]) -> Option<T>,
    diagnostics: impl FnOnce() -> String,
) -> T
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::Event;
    let (reader, writer) = kube::runtime::reflector::store();
    let events = kube::runtime::reflector(writer, kube::runtime::watcher(api, config).default_backoff());
    let watched = async {
        let mut events = std::pin::pin!(events);
        let mut listed = false;
        while let Some(event) = events.next().await {
            // A failed watch is retried with back-off; what it missed comes with the next list.
            match event {
                Ok(Event::InitDone) => listed = true,
                Ok(Event::Apply(_) | Event::Delete(_)) => {}
                Ok(Event::Init | Event::InitApply(_)) | Err(_) => continue,
            }
            if !listed {
                continue;
            }
            let objects: Vec<K> = reader.state().iter().map(|object| K::clone(object)).collect();
            if let Some(value) = check(&objects) {
                return value;
            }
        }
        panic!("the watch for {what} ended")
    };
    match tokio::time::timeout(within, watched).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: not within {within:?}{}", diagnostics()),
    }
}
