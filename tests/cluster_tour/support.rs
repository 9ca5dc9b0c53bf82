//! What the tests of this binary share: the control plane (with
//! `OwnerReferencesPermissionEnforcement`), the fake GitLab, the controller process started with
//! the GitLab flags and reachable from the fake GitLab through a forwarder (the stand-in for the
//! Ingress of docs/webhooks.md), webhook Secrets, and registrations with `spec.gitlab`.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use cdtarget::api::TenantRepository;
use cdtarget::api::conditions::GITLAB_SYNCED as CONDITION_TYPE;
use cdtarget::gitlab::FINALIZER;
use kube::Api;
use kube::runtime::wait::await_condition;

use crate::common::ControlPlane;
use crate::common::cluster::{CONVERGE, Controller, PLATFORM_NAMESPACE, Tenant, gone, installed_cluster_with};
use crate::common::control_plane::{Options, until_appended};
use crate::common::fake_gitlab::{BOT_TOKEN, FakeGitLab, synthetic_key};
use crate::common::process::loopback;

/// The admission plugin that makes the `*/finalizers` grants of `deploy/rbac.yaml` necessary:
/// an owner reference with `blockOwnerDeletion` is only accepted from someone who may update the
/// owner's finalizers (hardened clusters and OpenShift enable it).
pub const OWNER_REFERENCES_ENFORCEMENT: &str = "OwnerReferencesPermissionEnforcement";

/// The control plane of this binary: the defaults plus [`OWNER_REFERENCES_ENFORCEMENT`].
pub fn options() -> Options {
    Options { admission_plugins: vec![OWNER_REFERENCES_ENFORCEMENT.to_owned()], ..Options::default() }
}

/// The installed control plane of this binary, or `None` after a SKIP line.
pub fn cluster(test: &str) -> Option<&'static ControlPlane> {
    installed_cluster_with(test, &options()).map(|(cluster, _)| cluster)
}

/// The fake GitLab every test of the binary shares (the controller has one `--gitlab-url`).
pub fn fake_gitlab() -> &'static FakeGitLab {
    static GITLAB: OnceLock<FakeGitLab> = OnceLock::new();
    GITLAB.get_or_init(FakeGitLab::start)
}

/// The GitLab steps of the tests that need GitLab answering are serialised with the one that
/// takes it down (the fake's faults are global, like an outage).
pub static GITLAB_STEPS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A number no other caller in this process gets.
pub fn unique() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

/// The controller process of this binary.
pub struct TourController {
    /// Its log file.
    pub log: PathBuf,
    /// Its identity in the leader Lease (`POD_NAME`).
    pub identity: String,
    /// The receiver as the fake GitLab reaches it (`--webhook-external-url`).
    pub external_url: String,
}

/// `cdtarget controller` with a TokenRequest token of deploy/'s ServiceAccount, as
/// [`Controller::start`] runs it, plus the four GitLab flags of docs/operations.md pointing at
/// [`fake_gitlab`]. Started once; killed by PID when the test process exits.
pub async fn controller(cluster: &'static ControlPlane) -> &'static TourController {
    static CONTROLLER: tokio::sync::OnceCell<TourController> = tokio::sync::OnceCell::const_new();
    CONTROLLER
        .get_or_init(|| async move {
            let dir = cluster.dir().join("gitlab-settings");
            std::fs::create_dir_all(&dir).expect("the GitLab settings directory");
            let token_file = dir.join("token");
            std::fs::write(&token_file, format!("{BOT_TOKEN}\n")).expect("write the bot token file");
            // GitLab's SSH host key as `ssh-keyscan` prints it; only written into key pair Secrets.
            let known_hosts = dir.join("known_hosts");
            std::fs::write(&known_hosts, format!("gitlab.tour.test {}\n", synthetic_key("tour-gitlab-host")))
                .expect("write known_hosts");
            // The hooks need the receiver's URL before the controller has bound its OS-picked
            // port: a forwarder on a port of its own is that URL, as an Ingress would be.
            let ingress = TcpListener::bind(loopback(0)).expect("bind the forwarder");
            let external_url = format!("http://{}", ingress.local_addr().expect("forwarder address"));
            let identity = format!("cdtarget-tour-{}", std::process::id());
            let gitlab_url = fake_gitlab().url();
            let flags = [
                "--gitlab-url",
                gitlab_url.as_str(),
                "--gitlab-token-file",
                token_file.to_str().expect("UTF-8 path"),
                "--gitlab-known-hosts-file",
                known_hosts.to_str().expect("UTF-8 path"),
                "--webhook-external-url",
                external_url.as_str(),
            ];
            let controller = Controller::start(cluster, &identity, &flags).await;
            forward(ingress, controller.webhook_address());
            let log = controller.leak();
            TourController { log, identity, external_url }
        })
        .await
}

/// Forwards every connection accepted on `listener` to `to`, both ways, on threads of their own
/// (for the life of the test process).
fn forward(listener: TcpListener, to: SocketAddr) {
    std::thread::Builder::new()
        .name("tour-ingress".into())
        .spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                // A receiver that is not there: the client sees the connection closed.
                let Ok(upstream) = TcpStream::connect(to) else { continue };
                pipe(&client, &upstream);
                pipe(&upstream, &client);
            }
        })
        .expect("spawn the forwarder");
}

fn pipe(from: &TcpStream, to: &TcpStream) {
    let (mut from, mut to) = (from.try_clone().expect("clone a socket"), to.try_clone().expect("clone a socket"));
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// A webhook Secret in the platform namespace (key `token`, random), as docs/webhooks.md step 1
/// has the platform team create it.
pub struct WebhookSecret {
    /// The Secret's name.
    pub name: String,
    /// Its `token`.
    pub token: String,
}

impl WebhookSecret {
    /// Creates one with kubectl.
    pub fn create(cluster: &ControlPlane) -> WebhookSecret {
        let mut random = [0u8; 32];
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut random)).expect("read /dev/urandom");
        let token = hex::encode(random);
        let name = format!("tour-webhook-{}", unique());
        cluster
            .kubectl(&[
                "create",
                "secret",
                "generic",
                &name,
                "-n",
                PLATFORM_NAMESPACE,
                &format!("--from-literal=token={token}"),
            ])
            .success();
        WebhookSecret { name, token }
    }

    /// `spec.webhook` of type `gitlab` with this Secret (lines for `Tenant::onboard_with`).
    pub fn spec(&self) -> String {
        format!("  webhook:\n    type: gitlab\n    secretRef:\n      name: {}\n", self.name)
    }
}

/// Waits until the controller's receiver serves the registration `name` (its index logs it).
pub fn until_served(log: &Path, name: &str) {
    let line = format!("registration={PLATFORM_NAMESPACE}/{name}");
    until_appended(log, CONVERGE, "the receiver serving the registration", || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        text.lines().any(|l| l.contains("webhook: registration served") && l.contains(&line)).then_some(())
    });
}

/// A tenant whose registration has `spec.gitlab` (project on the fake GitLab), a `gitlab`
/// webhook, and `spec.secretRef` naming a key pair Secret that does not exist (the controller
/// generates it).
pub struct GitLabTenant {
    /// The tenant and its registration.
    pub tenant: Tenant,
    /// The project's id on the fake GitLab.
    pub project: i64,
    /// The webhook Secret.
    pub webhook: WebhookSecret,
    /// The key pair Secret's name (in the platform namespace).
    pub key_secret: String,
}

/// Whether the registration holds our finalizer and reports `GitLabSynced=True`.
pub fn gitlab_synced(registration: Option<&TenantRepository>) -> bool {
    registration.is_some_and(|r| {
        r.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER)
            && r.status
                .as_ref()
                .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == CONDITION_TYPE && c.status == "True"))
    })
}

/// Onboards a [`GitLabTenant`] whose first commit holds `files` and waits until its key and hook
/// are registered (`GitLabSynced=True`, finalizer present). The project on the fake GitLab is
/// backed by the tenant's real repository (commits, branches, diffs read with `git`); the
/// registration starts suspended until that is so, or the first commit status would find no
/// commit.
pub async fn onboard_gitlab(
    cluster: &'static ControlPlane,
    controller: &TourController,
    files: &[(&str, &str)],
) -> GitLabTenant {
    let n = unique();
    let project_path = format!("tour/app-{n}");
    let project = fake_gitlab().add_project(&project_path);
    let webhook = WebhookSecret::create(cluster);
    let key_secret = format!("tour-deploy-key-{n}");
    let extra = format!(
        "  suspend: true\n  secretRef:\n    name: {key_secret}\n{}  gitlab:\n    project: {project_path}\n",
        webhook.spec()
    );
    let tenant = Tenant::onboard_with(cluster, files, &extra);
    fake_gitlab().back_with_git(project, tenant.repo.bare_path());
    tenant.patch_registration(r#"{"spec":{"suspend":false}}"#);
    // `status.webhookPath` is written by the first reconcile that is not suspended.
    let resumed = |r: Option<&TenantRepository>| {
        gitlab_synced(r) && r.and_then(|r| r.status.as_ref()).is_some_and(|s| s.webhook_path.is_some())
    };
    tenant.registration_until("GitLabSynced=True with the finalizer, resumed", resumed, &controller.log).await;
    GitLabTenant { tenant, project, webhook, key_secret }
}

/// `kubectl delete tenantrepository`, without waiting for the finalizers.
pub fn delete_registration(cluster: &ControlPlane, name: &str) {
    cluster.kubectl(&["delete", "tenantrepository", name, "-n", PLATFORM_NAMESPACE, "--wait=false"]).success();
}

/// Waits (at most [`CONVERGE`]) until the registration `tenant.ns` is gone.
pub async fn until_registration_gone(tenant: &Tenant, log: &Path) {
    let api: Api<TenantRepository> = Api::namespaced(tenant.cluster.admin_client().await, PLATFORM_NAMESPACE);
    let outcome = tokio::time::timeout(CONVERGE, await_condition(api, &tenant.ns, gone)).await;
    assert!(matches!(outcome, Ok(Ok(_))), "the registration not gone within {CONVERGE:?}{}", tenant.diagnostics(log));
}

/// A line on the test process's stderr, outside the test harness's capture: figures a run shows.
pub fn report(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "[cluster tour] {line}");
}
