//! `cdtarget controller` as shipped: a process authenticated with a token of the ServiceAccount
//! from `deploy/`, so it has exactly the RBAC users install, never an admin kubeconfig.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::runtime::wait::await_condition;

use crate::common::{AuditEvent, ControlPlane, GitDaemon, Upstream, test_dir};
use crate::support::{installed_cluster, namespace};

/// How long the controller may take to apply a registration it was just given.
const CONVERGE: Duration = Duration::from_secs(120);

/// `cdtarget controller`, killed (by PID) and reaped on drop; its output goes to a log file.
struct ControllerProcess {
    child: Child,
    log: std::path::PathBuf,
}

impl ControllerProcess {
    fn start(kubeconfig: &Path, dir: &Path) -> ControllerProcess {
        let log = dir.join("controller.log");
        let out = fs::File::create(&log).expect("controller log");
        let cache = dir.join("cache");
        let child = Command::new(env!("CARGO_BIN_EXE_cdtarget"))
            .args(["controller", "--namespace", "cdtarget-system"])
            .args(["--metrics-address", "127.0.0.1:0", "--webhook-addr", "127.0.0.1:0"])
            .arg("--cache-dir")
            .arg(&cache)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", format!("cdtarget-test-{}", std::process::id()))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("spawn cdtarget controller");
        ControllerProcess { child, log }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `examples/platform/tenant-rbac.yaml` for the tenant namespace `ns` (the example's is
/// `team-payments`), applied by the platform team (the admin).
fn onboard_tenant(cluster: &ControlPlane, ns: &str, dir: &Path) {
    let example = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/platform/tenant-rbac.yaml"))
        .expect("read the tenant RBAC example");
    let path = dir.join("tenant-rbac.yaml");
    fs::write(&path, example.replace("team-payments", ns)).expect("write the tenant RBAC");
    // The example creates the namespace itself; it exists already, labelled by the apply.
    cluster.kubectl(&["apply", "-f", path.to_str().expect("UTF-8 path")]).success();
}

const CDTARGET: &str = "apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: deploy-agents\nspec:\n  agentImage: ghcr.io/acme/azp-agent:4.255.0\n  tokenRef: azp-token\n  ip:\n    - 10.20.0.10\n  config:\n    url: https://dev.azure.com/acme\n    poolName: payments-deploy\n";
const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pipeline-settings\ndata:\n  RETRIES: \"3\"\n";

#[tokio::test]
async fn first_apply_writes_tenant_objects_as_the_tenant_and_children_as_the_controller() {
    let test = "first_apply_writes_tenant_objects_as_the_tenant_and_children_as_the_controller";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let dir = test_dir();
    let ns = namespace(cluster, "tenant");
    onboard_tenant(cluster, &ns, dir.path());
    cluster
        .kubectl(&["create", "secret", "generic", "azp-token", "-n", &ns, "--from-literal=AZP_TOKEN=not-a-real-pat"])
        .success();

    let upstream = Upstream::new();
    let repo = upstream.create("tenant.git");
    repo.commit_and_push(&[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)], "first");
    let daemon = GitDaemon::start(&upstream.root());
    let registration = format!(
        "apiVersion: cdtarget.io/v1alpha1\nkind: TenantRepository\nmetadata:\n  name: {ns}\n  namespace: cdtarget-system\nspec:\n  url: {url}\n  ref:\n    branch: main\n  path: deploy\n  interval: 5m\n  targetNamespace: {ns}\n  serviceAccountName: cdtarget-tenant\n  prune: true\n",
        url = daemon.url("tenant.git")
    );
    let registration_file = dir.path().join("registration.yaml");
    fs::write(&registration_file, registration).expect("write the registration");
    cluster.kubectl(&["apply", "-f", registration_file.to_str().expect("UTF-8 path")]).success();

    // The controller runs with a token of deploy/'s ServiceAccount: deploy/rbac.yaml, nothing more.
    let kubeconfig = cluster.service_account_kubeconfig("cdtarget-system", "cdtarget").await;
    let mark = cluster.audit_mark();
    let controller = ControllerProcess::start(&kubeconfig, dir.path());

    let client = cluster.admin_client().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client, &ns);
    let converged = tokio::time::timeout(CONVERGE, async {
        await_condition(config_maps, "pipeline-settings", |object: Option<&ConfigMap>| object.is_some())
            .await
            .expect("watch ConfigMaps");
        await_condition(policies, "deploy-agents", |object: Option<&NetworkPolicy>| object.is_some())
            .await
            .expect("watch NetworkPolicies");
        await_condition(deployments, "deploy-agents", |object: Option<&Deployment>| object.is_some())
            .await
            .expect("watch Deployments");
    })
    .await;
    assert!(converged.is_ok(), "not applied within {CONVERGE:?}; controller log:\n{}", controller.log());

    let controller_user = "system:serviceaccount:cdtarget-system:cdtarget";
    let tenant_user = format!("system:serviceaccount:{ns}:cdtarget-tenant");
    let writes: Vec<AuditEvent> = cluster
        .audit_requests_since(mark)
        .into_iter()
        .filter(|event| event.is_mutating() && event.namespace == ns && event.user == controller_user)
        .collect();
    let written_as = |resource: &str, name: &str| -> Vec<String> {
        writes
            .iter()
            .filter(|event| event.full_resource() == resource && event.name == name && (200..300).contains(&event.code))
            .map(|event| event.acting_user().to_string())
            .collect()
    };
    // The tenant's own document: written by the controller impersonating the tenant's ServiceAccount.
    let config_map_writers = written_as("configmaps", "pipeline-settings");
    assert!(!config_map_writers.is_empty(), "no successful write of the ConfigMap in the audit log: {writes:#?}");
    assert!(config_map_writers.iter().all(|user| *user == tenant_user), "ConfigMap written as {config_map_writers:?}");
    let cdtarget_writers = written_as("cdtargets", "deploy-agents");
    assert!(
        !cdtarget_writers.is_empty() && cdtarget_writers.iter().all(|user| *user == tenant_user),
        "CDTarget written as {cdtarget_writers:?}"
    );
    // Their status, and the rendered children: written by the controller as itself.
    let status_writers = written_as("cdtargets/status", "deploy-agents");
    assert!(
        !status_writers.is_empty() && status_writers.iter().all(|user| user == controller_user),
        "CDTarget status written as {status_writers:?}"
    );
    for resource in ["networkpolicies", "deployments"] {
        let writers = written_as(resource, "deploy-agents");
        assert!(!writers.is_empty(), "no successful write of the {resource} child: {writes:#?}");
        assert!(writers.iter().all(|user| user == controller_user), "{resource} written as {writers:?}");
    }
    drop(controller);
}
