//! The chart and `deploy/` on the real control plane of this binary: the API server's strict
//! validation of everything both render, and the chart's life with `helm install`, `upgrade` and
//! `uninstall`, with the controller run as the installed Deployment says.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use cdtarget::api::{CDTarget, TenantRepository};
use cdtarget::gitlab::FINALIZER;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::runtime::wait::await_condition;
use serde_json::Value;

use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, CONVERGE, Controller, PLATFORM_NAMESPACE, Tenant, await_established, exists, gone, path_str,
    ready,
};
use crate::common::control_plane::EXTERNAL_KUBECONFIG;
use crate::common::fake_gitlab::{BOT_TOKEN, FakeGitLab, synthetic_key};
use crate::common::{ControlPlane, HarnessError, skip_or_fail, test_dir};
use crate::kit::{self, CHART, Helm, NAMESPACE, RELEASE, kustomize, root};

/// The control plane of this binary with the platform namespace created as
/// docs/install.md#install-with-helm says (Pod Security `restricted` enforced), or `None` after a
/// SKIP line.
fn cluster(test: &str) -> Option<&'static ControlPlane> {
    if std::env::var_os(EXTERNAL_KUBECONFIG).is_some() {
        // It creates, installs into and uninstalls cdtarget-system: never on someone's cluster.
        let why = format!(
            "installs and uninstalls the chart in {NAMESPACE}, which {EXTERNAL_KUBECONFIG} (an existing cluster) must not see"
        );
        skip_or_fail::<()>(test, Err(HarnessError::Unavailable(why)))?;
    }
    let cluster = skip_or_fail(test, ControlPlane::shared())?;
    static NAMESPACE_CREATED: OnceLock<()> = OnceLock::new();
    NAMESPACE_CREATED.get_or_init(|| {
        cluster.kubectl(&["create", "namespace", NAMESPACE]).success();
        for level in ["enforce", "warn", "audit"] {
            let label = format!("pod-security.kubernetes.io/{level}=restricted");
            cluster.kubectl(&["label", "namespace", NAMESPACE, &label]).success();
        }
    });
    Some(cluster)
}

/// The PodMonitor and PrometheusRule CRDs of the prometheus-operator release pinned by
/// `hack/tools/prometheus-operator/go.mod`, read from the Go module download (never copied into
/// the repository), or an error when Go is missing or the download fails.
fn prometheus_operator_crds() -> Result<Vec<PathBuf>, HarnessError> {
    let module = root().join("hack/tools/prometheus-operator");
    let go = crate::common::process::find_on_path("go")
        .ok_or_else(|| HarnessError::Unavailable("Go is not installed (prometheus-operator's CRDs)".into()))?;
    let output = Command::new(go)
        .args(["mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator"])
        .current_dir(&module)
        .output()
        .map_err(|e| HarnessError::Failed(format!("go mod download: {e}")))?;
    if !output.status.success() {
        return Err(HarnessError::Failed(format!("go mod download in {}:\n{}", module.display(), kit::text(&output))));
    }
    let download: Value = serde_json::from_slice(&output.stdout).map_err(|e| HarnessError::Failed(e.to_string()))?;
    let dir = PathBuf::from(download["Dir"].as_str().unwrap_or_default()).join("example/prometheus-operator-crd");
    Ok(["podmonitors", "prometheusrules"]
        .iter()
        .map(|plural| dir.join(format!("monitoring.coreos.com_{plural}.yaml")))
        .collect())
}

/// Installs the prometheus-operator CRDs once (server-side: they are larger than a client-side
/// apply's annotation may be) and waits until they are served.
fn install_prometheus_operator_crds(test: &str, cluster: &ControlPlane) -> Option<()> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        let files = match prometheus_operator_crds() {
            Ok(files) => files,
            Err(HarnessError::Unavailable(what)) => return Err(what),
            Err(HarnessError::Failed(why)) => panic!("{why}"),
        };
        for file in &files {
            cluster.kubectl(&["apply", "--server-side", "-f", path_str(file)]).success();
        }
        cluster
            .kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/podmonitors.monitoring.coreos.com",
                "crd/prometheusrules.monitoring.coreos.com",
            ])
            .success();
        Ok(())
    });
    match installed {
        Ok(()) => Some(()),
        Err(what) => skip_or_fail(test, Err(HarnessError::Unavailable(what.clone()))),
    }
}

/// `objects` written to a file, one YAML document each.
fn manifest(objects: &[Value]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    for object in objects {
        writeln!(file, "---\n{}", serde_json::to_string(object).expect("JSON")).expect("write the manifest");
    }
    file
}

#[test]
fn every_object_the_chart_and_deploy_render_passes_the_api_servers_strict_validation() {
    let test = "every_object_the_chart_and_deploy_render_passes_the_api_servers_strict_validation";
    let Some(helm) = Helm::get(test) else { return };
    let Some(cluster) = cluster(test) else { return };
    let Some(()) = install_prometheus_operator_crds(test, cluster) else { return };
    let gitlab_from_values = [
        "--set",
        "gitlab.enabled=true,gitlab.url=https://gitlab.example.com,gitlab.webhookExternalURL=https://cd.example.com",
        "--set",
        "gitlab.token=glpat-x,gitlab.knownHosts=gitlab.example.com ssh-ed25519 AAAA",
    ];
    let renderings = [
        ("the chart with default values", helm.template(&[])),
        ("the chart with ci/example-values.yaml", helm.template(&["-f", "charts/cdtarget/ci/example-values.yaml"])),
        ("the chart with ci/sharded-values.yaml", helm.template(&["-f", "charts/cdtarget/ci/sharded-values.yaml"])),
        ("the chart with GitLab settings from values", helm.template(&gitlab_from_values)),
        ("deploy/", kustomize("deploy")),
        ("examples/platform/overlay/", kustomize("examples/platform/overlay")),
    ];
    let mut kinds = std::collections::BTreeSet::new();
    for (what, objects) in &renderings {
        kinds.extend(objects.iter().filter_map(|object| object["kind"].as_str().map(str::to_owned)));
        let file = manifest(objects);
        // Server-side dry run: the API server's own schema (and the CRDs' for prometheus-operator's
        // kinds), unknown or duplicate fields refused, admission (Pod Security included) run, nothing
        // stored. Forced, since the chart's install may own these names meanwhile.
        let checked = cluster.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "--validate=strict",
            "--field-manager=cdtarget-chart-test",
            "-f",
            path_str(file.path()),
        ]);
        let stdout = checked.success();
        let stderr = String::from_utf8_lossy(&checked.output.stderr);
        assert!(!stderr.contains("Warning"), "{what}: the API server warned:\n{stderr}");
        assert_eq!(stdout.lines().count(), objects.len(), "{what}: one line per object expected:\n{stdout}");
    }
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "PodMonitor",
        "PrometheusRule",
        "ConfigMap",
        "Secret",
        "Namespace",
    ] {
        assert!(kinds.contains(kind), "no {kind} was checked: {kinds:?}");
    }
}

/// The EndpointSlice kube-apiserver keeps for the `kubernetes` Service (its endpoint reconciler
/// names it after the Service), with an address and port of a real cluster's API server.
const KUBERNETES_SLICE: &str = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: kubernetes\n  namespace: default\n  labels:\n    kubernetes.io/service-name: kubernetes\naddressType: IPv4\nendpoints:\n  - addresses: [10.0.0.10]\n    conditions: {ready: true}\nports:\n  - name: https\n    port: 6443\n    protocol: TCP\n";

#[test]
fn the_documented_command_reads_the_api_servers_own_address_and_port_off_the_kubernetes_endpoint_slice() {
    let test = "the_documented_command_reads_the_api_servers_own_address_and_port_off_the_kubernetes_endpoint_slice";
    let Some(cluster) = cluster(test) else { return };
    // This control plane runs without the endpoint reconciler (its API server's address is a
    // loopback one, which an EndpointSlice may not hold): the slice is written here as a real
    // cluster's kube-apiserver keeps it, and the command of docs/install.md#install-with-kustomize
    // must read the address and port the NetworkPolicy's API server rule needs off it.
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    file.write_all(KUBERNETES_SLICE.as_bytes()).expect("write the slice");
    cluster.kubectl(&["apply", "-f", path_str(file.path())]).success();
    let shown = cluster
        .kubectl(&[
            "get",
            "endpointslices",
            "-n",
            "default",
            "-l",
            "kubernetes.io/service-name=kubernetes",
            "-o",
            "jsonpath={.items[*].endpoints[*].addresses} {.items[*].ports[*].port}",
        ])
        .success();
    assert_eq!(shown, "[\"10.0.0.10\"] 6443");
}

/// The process a pod of `deployment` would run, on this machine: the container's arguments and
/// environment (`fieldRef`s resolved for a pod named `pod`), every volume a directory under
/// `dir` (a Secret volume holding the Secret's keys as files), every path into a volume moved
/// there, and the listen addresses on 127.0.0.1 with OS-picked ports.
fn pod_process(
    deployment: &Deployment,
    secrets: &BTreeMap<String, Secret>,
    dir: &Path,
    pod: &str,
) -> (Vec<String>, Vec<(String, String)>) {
    let spec = deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref()).expect("a pod spec");
    let namespace = deployment.metadata.namespace.clone().expect("a namespace");
    let container = spec.containers.iter().find(|c| c.name == "controller").expect("the controller container");
    assert!(container.command.is_none(), "the image's entrypoint (the cdtarget binary) runs: {container:?}");
    let volumes = spec.volumes.clone().unwrap_or_default();
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let local = dir.join(mount.mount_path.trim_start_matches('/'));
        fs::create_dir_all(&local).expect("a volume directory");
        let volume = volumes.iter().find(|v| v.name == mount.name).expect("the mount's volume");
        if let Some(secret) = &volume.secret {
            let name = secret.secret_name.as_deref().expect("a Secret name");
            let secret = secrets.get(name).unwrap_or_else(|| panic!("the Secret {name} of volume {}", volume.name));
            for (key, value) in secret.data.iter().flatten() {
                fs::write(local.join(key), &value.0).expect("a Secret file");
            }
        } else {
            assert!(volume.empty_dir.is_some(), "only emptyDir and Secret volumes expected: {volume:?}");
        }
        mounts.push((mount.mount_path.clone(), local));
    }
    let local_path = |value: &str| -> Option<String> {
        mounts.iter().find_map(|(path, local)| {
            let rest = value.strip_prefix(path.as_str())?;
            (rest.is_empty() || rest.starts_with('/')).then(|| format!("{}{rest}", local.display()))
        })
    };
    let mut env = Vec::new();
    for var in container.env.iter().flatten() {
        let value = match (&var.value, var.value_from.as_ref().and_then(|from| from.field_ref.as_ref())) {
            (Some(value), _) => local_path(value).unwrap_or_else(|| value.clone()),
            (None, Some(field)) if field.field_path == "metadata.namespace" => namespace.clone(),
            (None, Some(field)) if field.field_path == "metadata.name" => pod.to_owned(),
            _ => panic!("an environment variable this test cannot resolve: {var:?}"),
        };
        env.push((var.name.clone(), value));
    }
    let ports: BTreeMap<String, i32> = container
        .ports
        .iter()
        .flatten()
        .map(|port| (port.name.clone().unwrap_or_default(), port.container_port))
        .collect();
    // The flag defaults (:8080, :9292 and the cache directory) are what the pod relies on.
    assert_eq!(ports, BTreeMap::from([("http".to_owned(), 8080), ("webhook".to_owned(), 9292)]));
    let cache = local_path("/var/cache/cdtarget").expect("a volume at the default cache directory");
    let mut args = container.args.clone().unwrap_or_default();
    args.extend(["--metrics-address", "127.0.0.1:0", "--webhook-addr", "127.0.0.1:0", "--cache-dir"].map(String::from));
    args.push(cache);
    (args, env)
}

/// The values the smoke test installs with: GitLab settings (from values: the chart creates the
/// Secret) pointing at the fake GitLab, and a Lease name of its own, visible in the cluster.
fn smoke_values(gitlab: &FakeGitLab, dir: &Path) -> PathBuf {
    let values = serde_json::json!({
        "controller": {"leaderElection": {"leaseName": "chart-smoke"}},
        "gitlab": {
            "enabled": true,
            "url": gitlab.url(),
            "webhookExternalURL": "http://127.0.0.1:9",
            "token": BOT_TOKEN,
            "knownHosts": format!("gitlab.chart.test {}\n", synthetic_key("chart-gitlab-host")),
        },
    });
    let file = dir.join("values.yaml");
    fs::write(&file, serde_json::to_string(&values).expect("JSON")).expect("write the values");
    file
}

/// A tenant whose registration has `spec.gitlab` (a new project on `gitlab`), a `gitlab` webhook
/// Secret and a key pair Secret the controller generates.
fn onboard_gitlab_tenant(cluster: &'static ControlPlane, gitlab: &FakeGitLab, n: usize) -> (Tenant, i64) {
    let project_path = format!("chart/app-{n}");
    let project = gitlab.add_project(&project_path);
    let webhook = format!("chart-webhook-{n}");
    let token = format!("chart-webhook-token-{n}-{}", std::process::id());
    cluster
        .kubectl(&[
            "create",
            "secret",
            "generic",
            &webhook,
            "-n",
            PLATFORM_NAMESPACE,
            &format!("--from-literal=token={token}"),
        ])
        .success();
    let extra = format!(
        "  secretRef:\n    name: chart-deploy-key-{n}\n  webhook:\n    type: gitlab\n    secretRef:\n      name: {webhook}\n  gitlab:\n    project: {project_path}\n"
    );
    let tenant = Tenant::onboard_with(
        cluster,
        &[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)],
        &extra,
    );
    (tenant, project)
}

/// Whether the registration holds the GitLab finalizer and reports `GitLabSynced=True`.
fn gitlab_synced(registration: Option<&TenantRepository>) -> bool {
    registration.is_some_and(|r| {
        r.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER)
            && r.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| c.type_ == cdtarget::api::conditions::GITLAB_SYNCED && c.status == "True")
            })
    })
}

/// What `helm` is asked in this namespace, as the cluster administrator.
fn helm_in_cluster(cluster: &ControlPlane, args: &[&str]) -> Vec<String> {
    let kubeconfig = cluster.admin_kubeconfig().to_str().expect("UTF-8 path").to_owned();
    let mut all: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    all.extend(["--namespace".to_owned(), NAMESPACE.to_owned(), "--kubeconfig".to_owned(), kubeconfig]);
    all
}

/// The names the chart installs (release `cdtarget`), as `kubectl get` arguments.
const INSTALLED: [(&str, &str); 9] = [
    ("serviceaccount", "cdtarget"),
    ("clusterrole", "cdtarget-controller"),
    ("clusterrolebinding", "cdtarget-controller"),
    ("role", "cdtarget-controller"),
    ("rolebinding", "cdtarget-controller"),
    ("deployment", "cdtarget"),
    ("service", "cdtarget"),
    ("poddisruptionbudget", "cdtarget"),
    ("secret", "cdtarget-gitlab"),
];

#[tokio::test]
async fn the_chart_installed_with_helm_runs_the_controller_upgrades_and_uninstalls_keeping_the_crds() {
    let test = "the_chart_installed_with_helm_runs_the_controller_upgrades_and_uninstalls_keeping_the_crds";
    let Some(helm) = Helm::get(test) else { return };
    let Some(cluster) = cluster(test) else { return };
    let dir = test_dir();
    let gitlab = FakeGitLab::start();
    let values = smoke_values(&gitlab, dir.path());
    let values = path_str(&values);
    let run = |args: &[&str]| {
        let args = helm_in_cluster(cluster, args);
        helm.success(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // Install, as docs/install.md says (the namespace was created and labelled first).
    let installed = run(&["install", RELEASE, CHART, "-f", values]);
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    // NOTES.txt: how to check the controller, and the CRDs left to the platform team on upgrades.
    assert!(installed.contains("kubectl -n cdtarget-system get tenantrepositories"), "{installed}");
    assert!(installed.contains("never upgrades or deletes them"), "{installed}");
    for (kind, name) in INSTALLED {
        cluster.kubectl(&["get", kind, name, "-n", NAMESPACE]).success();
    }
    await_established(
        cluster,
        &["crd/cdtargets.cdtarget.io", "crd/tenantrepositories.cdtarget.io", "crd/syncstatuses.cdtarget.io"],
    );

    // The controller, run as the installed Deployment says: its ServiceAccount, its arguments,
    // its environment, its volumes (no kubelet runs here: the pods stay Pending).
    let client = cluster.admin_client().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let deployment = deployments.get("cdtarget").await.expect("the installed Deployment");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let gitlab_secret = secrets.get("cdtarget-gitlab").await.expect("the chart's GitLab Secret");
    let pod = format!("cdtarget-chart-smoke-{}", std::process::id());
    let pod_dir = dir.path().join("pod");
    let (args, env) =
        pod_process(&deployment, &BTreeMap::from([("cdtarget-gitlab".to_owned(), gitlab_secret)]), &pod_dir, &pod);
    let service_account =
        deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref()).and_then(|s| s.service_account_name.clone());
    let service_account = service_account.expect("the Deployment's ServiceAccount");
    let mut controller = Controller::start_as(cluster, &pod, (NAMESPACE, &service_account), &args, &env).await;
    let log = controller.log().to_path_buf();

    // Smoke: a GitLab tenant is applied (as the tenant), its CDTarget rendered, its deploy key and
    // hook registered on the fake GitLab, and the Lease of the values held by this pod.
    let (kept, kept_project) = onboard_gitlab_tenant(cluster, &gitlab, 1);
    let (removed, removed_project) = onboard_gitlab_tenant(cluster, &gitlab, 2);
    for tenant in [&kept, &removed] {
        tenant.until::<ConfigMap, _>("the tenant's ConfigMap", "pipeline-settings", exists, &log).await;
        tenant.until::<NetworkPolicy, _>("the NetworkPolicy child", "deploy-agents", exists, &log).await;
        tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, &log).await;
        tenant.registration_until("GitLabSynced=True with the finalizer", gitlab_synced, &log).await;
    }
    for project in [kept_project, removed_project] {
        assert_eq!(gitlab.deploy_keys(project).len(), 1, "{:?}", gitlab.deploy_keys(project));
        assert_eq!(gitlab.hooks(project).len(), 1, "{:?}", gitlab.hooks(project));
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = leases.get("chart-smoke").await.expect("the Lease named in the values");
    assert_eq!(lease.spec.and_then(|s| s.holder_identity).as_deref(), Some(pod.as_str()));
    let text = fs::read_to_string(&log).expect("the controller's log");
    assert!(!text.contains(BOT_TOKEN), "the GitLab token is in the log");

    // Upgrade as docs/install.md#upgrade says: the CRDs first (Helm never upgrades crds/), then
    // the chart with changed values, which change the Deployment.
    let crds =
        cluster.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", "charts/cdtarget/crds/"]).success();
    assert_eq!(crds.matches("serverside-applied").count(), 3, "{crds}");
    let generation = deployment.metadata.generation.expect("a generation");
    let upgraded = run(&["upgrade", RELEASE, CHART, "-f", values, "--set", "controller.logLevel=debug,replicaCount=2"]);
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");
    let after = deployments.get("cdtarget").await.expect("the upgraded Deployment");
    assert!(after.metadata.generation.expect("a generation") > generation, "the Deployment did not change");
    let after_json = serde_json::to_value(&after).expect("JSON");
    assert_eq!(kit::env_value(&after_json, "CDTARGET_LOG_LEVEL").as_deref(), Some("debug"));
    assert_eq!(after.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let affinity = &after_json["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert!(affinity.is_object(), "two replicas are spread over nodes: {after_json}");

    // Uninstall in the documented order. First the registrations, while the controller runs: its
    // finalizer removes deploy key and hook from GitLab; what was applied stays.
    cluster.kubectl(&["delete", "tenantrepository", &removed.ns, "-n", PLATFORM_NAMESPACE, "--wait=false"]).success();
    let registrations: Api<TenantRepository> = Api::namespaced(client.clone(), PLATFORM_NAMESPACE);
    let outcome = tokio::time::timeout(CONVERGE, await_condition(registrations.clone(), &removed.ns, gone)).await;
    assert!(matches!(outcome, Ok(Ok(_))), "the registration stayed{}", removed.diagnostics(&log));
    assert!(gitlab.deploy_keys(removed_project).is_empty(), "{:?}", gitlab.deploy_keys(removed_project));
    assert!(gitlab.hooks(removed_project).is_empty(), "{:?}", gitlab.hooks(removed_project));
    let objects = ["configmap/pipeline-settings", "cdtarget/deploy-agents", "networkpolicy/deploy-agents"];
    let left = cluster.kubectl(&[&["get", "-n", &removed.ns, "-o", "name"][..], &objects[..]].concat()).success();
    assert_eq!(left.lines().count(), 3, "the tenant's objects stay when its registration goes:\n{left}");

    // Then the chart: what it installed goes, the CRDs (Helm never deletes crds/) and so every
    // CDTarget and registration stay.
    let uninstalled = run(&["uninstall", RELEASE]);
    assert!(uninstalled.contains("uninstalled"), "{uninstalled}");
    controller.kill(); // as the kubelet stops the deleted pods
    for (kind, name) in INSTALLED {
        let missing = cluster.kubectl(&["get", kind, name, "-n", NAMESPACE]).failure();
        assert!(missing.contains("NotFound"), "{kind} {name} stayed: {missing}");
    }
    cluster
        .kubectl(&["get", "crd", "cdtargets.cdtarget.io", "tenantrepositories.cdtarget.io", "syncstatuses.cdtarget.io"])
        .success();
    cluster.kubectl(&["get", "cdtarget", "deploy-agents", "-n", &removed.ns]).success();

    // A registration deleted once the controller is gone: its finalizer holds it, and key and
    // hook stay on GitLab, until someone removes the finalizer (docs/gitlab.md#deletion); then
    // key and hook are left behind, to be removed by hand.
    cluster.kubectl(&["delete", "tenantrepository", &kept.ns, "-n", PLATFORM_NAMESPACE, "--wait=false"]).success();
    let held = registrations.get(&kept.ns).await.expect("the registration is held");
    assert!(held.metadata.deletion_timestamp.is_some(), "{held:?}");
    assert_eq!(held.metadata.finalizers.as_deref(), Some(&[FINALIZER.to_owned()][..]));
    let patch = r#"[{"op":"remove","path":"/metadata/finalizers/0"}]"#;
    cluster
        .kubectl(&["patch", "tenantrepository", &kept.ns, "-n", PLATFORM_NAMESPACE, "--type=json", "-p", patch])
        .success();
    let outcome = tokio::time::timeout(CONVERGE, await_condition(registrations, &kept.ns, gone)).await;
    assert!(matches!(outcome, Ok(Ok(_))), "the registration stayed without its finalizer");
    assert_eq!(gitlab.deploy_keys(kept_project).len(), 1, "the key is left on GitLab");
    assert_eq!(gitlab.hooks(kept_project).len(), 1, "the hook is left on GitLab");
}
