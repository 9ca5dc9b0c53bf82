//! `cdtarget diff` on the real control plane: a tenant's objects applied by the shared
//! controller, then local trees previewed against them as the tenant's ServiceAccount (the admin
//! kubeconfig may impersonate it), children and prunes included, with `kubectl diff`'s exit codes.

use std::fs;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Instant;

use cdtarget::api::CDTarget;
use cdtarget::render::ChildKind;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{Value, json};

use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, PLATFORM_NAMESPACE, Tenant, await_established, exists, installed_cluster, path_str, ready,
    shared_controller,
};
use crate::common::{ControlPlane, TestDir, test_dir};
use crate::kit::kubectl_file;

/// A tenant Secret from Git, with a value that must never be printed.
const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app-credentials\ntype: Opaque\nstringData:\n  password: hunter2-in-git\n";
/// The same Secret with a new value.
const SECRET_ROTATED: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app-credentials\ntype: Opaque\nstringData:\n  password: rotated-in-git\n";

/// A directory holding `files` (path, content) under `deploy/`.
fn tree(files: &[(&str, &str)]) -> TestDir {
    let dir = test_dir();
    for (path, content) in files {
        let file = dir.path().join(path);
        fs::create_dir_all(file.parent().expect("a parent")).expect("create the directory");
        fs::write(&file, content).expect("write the file");
    }
    dir
}

/// Runs `cdtarget diff DIR/deploy --namespace NS --kubeconfig FILE EXTRA...`, printing what it
/// said and how long it took.
async fn diff(dir: &Path, ns: &str, kubeconfig: &Path, extra: &[&str]) -> Output {
    let started = Instant::now();
    let source = dir.join("deploy");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_cdtarget"))
        .args(["diff", path_str(&source), "--namespace", ns, "--kubeconfig", path_str(kubeconfig)])
        .args(extra)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("cdtarget diff runs");
    eprintln!(
        "cdtarget diff {}: exit {:?} after {:?}\n--- stdout:\n{}--- stderr:\n{}",
        extra.join(" "),
        out.status.code(),
        started.elapsed(),
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines a diff adds or removes, without its headers.
fn changed_lines(diff: &str) -> Vec<&str> {
    diff.lines().filter(|l| l.starts_with(['+', '-']) && !l.starts_with("+++") && !l.starts_with("---")).collect()
}

/// The CDTarget's `apiVersion`.
const CDTARGET_API: &str = "cdtarget.io/v1alpha1";

/// Records `entries` (apiVersion, kind, name) of namespace `ns` as the inventory of the
/// namespace's one SyncStatus, as the controller would after applying them.
fn record_inventory(cluster: &ControlPlane, ns: &str, entries: &[(&str, &str, &str)]) {
    await_established(cluster, &["crd/syncstatuses.cdtarget.io"]);
    let status = format!(
        "apiVersion: {CDTARGET_API}\nkind: SyncStatus\nmetadata:\n  name: {ns}\n  namespace: {ns}\nspec:\n  registration: {{namespace: {PLATFORM_NAMESPACE}, name: {ns}}}\n  url: git://example/tenant.git\n"
    );
    kubectl_file(cluster, &cluster.admin_kubeconfig(), "apply", &status, &[]).success();
    let inventory: Vec<Value> = entries
        .iter()
        .map(
            |(api_version, kind, name)| json!({"apiVersion": api_version, "kind": kind, "namespace": ns, "name": name}),
        )
        .collect();
    let patch = json!({"status": {"inventory": inventory}}).to_string();
    cluster
        .kubectl(&["patch", "syncstatus", ns, "-n", ns, "--subresource=status", "--type=merge", "-p", &patch])
        .success();
}

#[tokio::test]
async fn diff_previews_creates_changes_and_prunes_as_the_tenant_with_kubectl_diffs_exit_codes() {
    let test = "diff_previews_creates_changes_and_prunes_as_the_tenant_with_kubectl_diffs_exit_codes";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let applied =
        [("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET), ("deploy/secret.yaml", SECRET)];
    let tenant = Tenant::onboard(cluster, &applied);
    let log = shared_controller(cluster).await;
    tenant.until::<ConfigMap, _>("the tenant's ConfigMap", "pipeline-settings", exists, log).await;
    tenant.until::<NetworkPolicy, _>("the NetworkPolicy child", "deploy-agents", exists, log).await;
    tenant.until::<Deployment, _>("the Deployment child", "deploy-agents", exists, log).await;
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;
    let admin = cluster.admin_kubeconfig();
    let ns = tenant.ns.as_str();

    // The repository as applied: no difference, no output, exit 0.
    let same = tree(&applied);
    let out = diff(same.path(), ns, &admin, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "an unchanged repository printed: {}", text(&out.stdout));
    assert!(text(&out.stderr).contains(&format!("dry run as {}", tenant.user())), "{}", text(&out.stderr));

    // A changed field, a new object, a rotated Secret: exit 1, a diff of exactly that.
    let changed = tree(&[
        ("deploy/settings.yaml", &CONFIG_MAP.replace("\"3\"", "\"5\"")),
        ("deploy/agents.yaml", CDTARGET),
        ("deploy/secret.yaml", SECRET_ROTATED),
        ("deploy/new.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: brand-new\ndata:\n  A: \"1\"\n"),
    ]);
    let out = diff(changed.path(), ns, &admin, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("diff -u -N live/v1.ConfigMap.{ns}.pipeline-settings")), "{stdout}");
    assert!(stdout.contains(&format!("diff -u -N live/v1.ConfigMap.{ns}.brand-new")), "{stdout}");
    for secret in ["hunter2-in-git", "rotated-in-git", "aHVudGVyMi1pbi1naXQ=", "cm90YXRlZC1pbi1naXQ="] {
        assert!(!stdout.contains(secret), "a Secret value was printed ({secret}):\n{stdout}");
    }
    assert!(stdout.contains("*** (before)") && stdout.contains("*** (after)"), "{stdout}");

    // JSON, parsed back: one entry per object, the field's change in its diff.
    let out = diff(changed.path(), ns, &admin, &["--output", "json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let entries: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let entry = |name: &str| {
        entries.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no entry for {name}: {entries:#?}"))
    };
    let settings = entry("pipeline-settings");
    assert_eq!((settings["action"].as_str(), settings["kind"].as_str()), (Some("change"), Some("ConfigMap")));
    assert_eq!((settings["apiVersion"].as_str(), settings["namespace"].as_str()), (Some("v1"), Some(ns)));
    let lines = changed_lines(settings["diff"].as_str().expect("a diff"));
    assert_eq!(lines.len(), 2, "only the changed field: {lines:?}");
    assert!(lines[0].contains("RETRIES") && lines[0].contains('3') && lines[1].contains('5'), "{lines:?}");
    assert_eq!(entry("brand-new")["action"], "create");
    assert_eq!(entry("app-credentials")["action"], "change");
    assert_eq!(entries.len(), 3, "the CDTarget and its children are unchanged: {entries:#?}");

    // A CDTarget change reaches its children: the NetworkPolicy and Deployment previews.
    let moved = tree(&[
        ("deploy/settings.yaml", CONFIG_MAP),
        ("deploy/agents.yaml", &CDTARGET.replace("10.20.0.10", "10.20.0.11")),
        ("deploy/secret.yaml", SECRET),
    ]);
    let out = diff(moved.path(), ns, &admin, &["-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let entries: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let policy = entries.iter().find(|e| e["kind"] == "NetworkPolicy").expect("the NetworkPolicy child");
    assert_eq!((policy["action"].as_str(), policy["preview"].as_str()), (Some("change"), Some("server-dry-run")));
    assert!(
        policy["diff"].as_str().unwrap_or_default().contains("+      - ipBlock:\n+          cidr: 10.20.0.11/32")
            || policy["diff"].as_str().unwrap_or_default().contains("10.20.0.11"),
        "{policy:#?}"
    );

    // Prunes, from the SyncStatus inventory (written here as the controller would).
    record_inventory(
        cluster,
        ns,
        &[
            ("v1", "ConfigMap", "pipeline-settings"),
            ("v1", "Secret", "app-credentials"),
            (CDTARGET_API, "CDTarget", "deploy-agents"),
        ],
    );
    let without_secret = tree(&[("deploy/settings.yaml", CONFIG_MAP), ("deploy/agents.yaml", CDTARGET)]);
    let out = diff(without_secret.path(), ns, &admin, &["-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let entries: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    assert_eq!(entries.len(), 1, "{entries:#?}");
    assert_eq!((entries[0]["action"].as_str(), entries[0]["name"].as_str()), (Some("prune"), Some("app-credentials")));
    let pruned = entries[0]["diff"].as_str().unwrap_or_default();
    assert!(!pruned.contains("aHVudGVyMi1pbi1naXQ=") && pruned.contains("***"), "{pruned}");

    // Without a SyncStatus naming the registration, prunes are unknown, and said so.
    let out = diff(same.path(), ns, &admin, &["--registration-name", "someone-else"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("prunes are unknown"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn diff_exits_2_naming_a_refused_object_and_a_located_problem() {
    let test = "diff_exits_2_naming_a_refused_object_and_a_located_problem";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // Suspended: nothing applied; the diff alone talks to the cluster.
    let tenant = Tenant::onboard_with(cluster, &[("deploy/settings.yaml", CONFIG_MAP)], "  suspend: true\n");
    let admin = cluster.admin_kubeconfig();
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  defaultBackend:\n    service:\n      name: web\n      port:\n        number: 80\n";
    let refused = tree(&[("deploy/settings.yaml", CONFIG_MAP), ("deploy/ingress.yaml", ingress)]);
    let out = diff(refused.path(), &tenant.ns, &admin, &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("ingress.yaml:1: Ingress {}/web was refused by the API server:", tenant.ns)),
        "{stderr}"
    );
    assert!(stderr.contains("forbidden") && stderr.contains(&tenant.user()), "{stderr}");

    // Bad input: the loader's located problem, exit 2, no request needed.
    let broken = tree(&[("deploy/broken.yaml", "kind: ConfigMap\nmetadata:\n  name: no-api-version\n")]);
    let out = diff(broken.path(), &tenant.ns, &admin, &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("broken.yaml:1: apiVersion"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn the_documented_ci_service_account_previews_with_dry_runs_and_cannot_write() {
    let test = "the_documented_ci_service_account_previews_with_dry_runs_and_cannot_write";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // Suspended: the controller applies nothing; the namespace is empty but for the onboarding.
    let tenant = Tenant::onboard_with(cluster, &[("deploy/settings.yaml", CONFIG_MAP)], "  suspend: true\n");
    let ns = tenant.ns.as_str();
    let example = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/platform/ci-diff-rbac.yaml"))
        .expect("read the CI RBAC example");
    let admin = cluster.admin_kubeconfig();
    kubectl_file(cluster, &admin, "apply", &example.replace("team-payments", ns), &[]).success();
    let ci = cluster.service_account_kubeconfig(ns, "cdtarget-diff").await;

    // The attacker holding the CI token: any write is refused once the policy is enforced (no
    // signal tells when a new ValidatingAdmissionPolicy is in force: probe shortly).
    // A probe written before then is removed again by the admin.
    let started = Instant::now();
    let refused = loop {
        let out = cluster.kubectl_as(&ci, &["create", "configmap", "stolen", "-n", ns, "--from-literal=a=b"]);
        let stderr = String::from_utf8_lossy(&out.output.stderr).into_owned();
        if stderr.contains("may only send server-side dry runs") {
            break stderr;
        }
        if out.output.status.success() {
            cluster.kubectl(&["delete", "configmap", "stolen", "-n", ns]).success();
        }
        assert!(started.elapsed().as_secs() < 60, "the dry-run-only policy is not enforced: {stderr}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    eprintln!("[ci] write as cdtarget-diff refused after {:?}: {refused}", started.elapsed());
    for args in [
        &["delete", "rolebinding", "cdtarget-tenant", "-n", ns][..],
        &["patch", "serviceaccount", "cdtarget-tenant", "-n", ns, "-p", r#"{"metadata":{"labels":{"x":"y"}}}"#][..],
    ] {
        let out = cluster.kubectl_as(&ci, args);
        assert!(!out.output.status.success(), "the CI token could {args:?}");
    }

    // What the preview reads to compare children with: every kind of child a CDTarget renders,
    // in either mode (the table), through the tenant Role or the example's read Role. A refused
    // read would show a child in place as one to create.
    for kind in ChildKind::ALL {
        let resource = kind.resource();
        let qualified = if resource.group.is_empty() {
            resource.plural.clone()
        } else {
            format!("{}.{}", resource.plural, resource.group)
        };
        let answer = cluster.kubectl_as(&ci, &["auth", "can-i", "get", &qualified, "-n", ns]);
        let answer = String::from_utf8_lossy(&answer.output.stdout).trim().to_owned();
        assert_eq!(answer, "yes", "may cdtarget-diff get {qualified}?");
    }

    // What it is for: the preview, as the caller, with the tenant's rights; a Job-mode CDTarget
    // too.
    let job_mode =
        CDTARGET.replace("name: deploy-agents", "name: job-agents").replacen("spec:\n", "spec:\n  mode: Job\n", 1);
    let tree = tree(&[
        ("deploy/settings.yaml", CONFIG_MAP),
        ("deploy/agents.yaml", CDTARGET),
        ("deploy/jobs.yaml", &job_mode),
    ]);
    let out = diff(tree.path(), ns, &ci, &["-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let entries: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let created: Vec<(&str, &str, &str)> = entries
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["kind"].as_str().unwrap(), e["preview"].as_str().unwrap()))
        .collect();
    assert!(created.contains(&("create", "ConfigMap", "server-dry-run")), "{created:?}");
    assert!(created.contains(&("create", "CDTarget", "server-dry-run")), "{created:?}");
    // Children: the CI account may not write NetworkPolicies, so they are compared client-side.
    assert!(created.contains(&("create", "NetworkPolicy", "client-side")), "{created:?}");
    assert!(created.contains(&("create", "ScaledJob", "client-side")), "{created:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("dry run as the caller") && stderr.contains("previewed client-side"), "{stderr}");
    // Nothing was written by the preview.
    let maps: kube::Api<ConfigMap> = kube::Api::namespaced(cluster.admin_client().await, ns);
    for name in ["pipeline-settings", "stolen"] {
        assert!(maps.get_opt(name).await.expect("get").is_none(), "{name} exists");
    }
}

/// The annotation in which client-side `kubectl apply` keeps the manifest it applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn base64(value: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(value)
}

/// A Secret as written by hand, `password` in `stringData`, `token` in `data` (base64), and an
/// annotation holding a value too, as some tools keep one.
fn by_hand(name: &str, password: &str, token: &str, note: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  annotations:\n    example.com/note: {note}\ntype: Opaque\nstringData:\n  password: {password}\ndata:\n  token: {}\n",
        base64(token)
    )
}

#[tokio::test]
async fn a_secret_applied_with_kubectl_shows_no_value_in_a_change_a_create_or_a_prune_text_or_json() {
    let test = "a_secret_applied_with_kubectl_shows_no_value_in_a_change_a_create_or_a_prune_text_or_json";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // Suspended: the controller applies nothing; the Secrets are kubectl's alone.
    let tenant = Tenant::onboard_with(cluster, &[("deploy/settings.yaml", CONFIG_MAP)], "  suspend: true\n");
    let ns = tenant.ns.as_str();
    let admin = cluster.admin_kubeconfig();
    // Real client-side `kubectl apply` (not --server-side), as the examples invite.
    let live_values = ["pw-by-hand-1", "tk-by-hand-1", "nt-by-hand-1"];
    let [password, token, note] = live_values;
    kubectl_file(cluster, &admin, "apply", &by_hand("by-hand", password, token, note), &["-n", ns]).success();
    let pruned_values = ["pw-left-behind-2", "tk-left-behind-2", "nt-left-behind-2"];
    let [password, token, note] = pruned_values;
    kubectl_file(cluster, &admin, "apply", &by_hand("left-behind", password, token, note), &["-n", ns]).success();
    // The premise: kubectl's annotation holds the values, the password plain.
    let secrets: kube::Api<Secret> = kube::Api::namespaced(cluster.admin_client().await, ns);
    let live = secrets.get("by-hand").await.expect("the Secret applied by hand");
    let last_applied =
        live.metadata.annotations.as_ref().and_then(|a| a.get(LAST_APPLIED)).cloned().unwrap_or_default();
    assert!(last_applied.contains("pw-by-hand-1") && last_applied.contains(&base64("tk-by-hand-1")), "{last_applied}");

    // A change (password and note rotated, token kept); a create of the Secret as `kubectl get
    // -o yaml` shows it, under a new name, annotation and all; the other Secret left out: a prune.
    let rotated_values = ["pw-rotated-3", "nt-rotated-3"];
    let mut exported = serde_json::to_value(&live).expect("the Secret as JSON");
    let metadata = exported["metadata"].as_object_mut().expect("metadata");
    for server in ["uid", "resourceVersion", "creationTimestamp", "managedFields", "namespace"] {
        metadata.remove(server);
    }
    metadata.insert("name".into(), json!("exported"));
    let changed = tree(&[
        ("deploy/by-hand.yaml", &by_hand("by-hand", rotated_values[0], "tk-by-hand-1", rotated_values[1])),
        ("deploy/exported.yaml", &cdtarget::yaml::to_yaml(&exported)),
    ]);
    record_inventory(cluster, ns, &[("v1", "Secret", "by-hand"), ("v1", "Secret", "left-behind")]);

    let values: Vec<&str> = live_values.iter().chain(&pruned_values).chain(&rotated_values).copied().collect();
    let shown = |out: &Output| -> Vec<String> {
        let whole = format!("{}{}", text(&out.stdout), text(&out.stderr));
        values.iter().filter(|v| whole.contains(**v) || whole.contains(&base64(v))).map(|v| v.to_string()).collect()
    };
    let out = diff(changed.path(), ns, &admin, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(shown(&out), Vec::<String>::new(), "Secret values in the text output");
    let stdout = text(&out.stdout);
    for name in ["by-hand", "exported", "left-behind"] {
        assert!(stdout.contains(&format!("diff -u -N live/v1.Secret.{ns}.{name} ")), "no {name}:\n{stdout}");
    }

    let out = diff(changed.path(), ns, &admin, &["-o", "json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(shown(&out), Vec::<String>::new(), "Secret values in the JSON output");
    let entries: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let mut previews: Vec<(&str, &str)> =
        entries.iter().map(|e| (e["action"].as_str().unwrap_or(""), e["name"].as_str().unwrap_or(""))).collect();
    previews.sort();
    assert_eq!(previews, [("change", "by-hand"), ("create", "exported"), ("prune", "left-behind")], "{entries:#?}");
    for entry in &entries {
        let diff = entry["diff"].as_str().unwrap_or_default();
        assert!(diff.contains(&format!("{LAST_APPLIED}: ")), "the annotation's key is shown: {diff}");
    }
    // What a reviewer still learns: which values change, not what they hold.
    let change = entries.iter().find(|e| e["action"] == "change").and_then(|e| e["diff"].as_str()).unwrap_or_default();
    let mut changed_keys: Vec<String> =
        changed_lines(change).into_iter().map(|line| line.replace(['\'', '"'], "")).collect();
    changed_keys.sort();
    assert_eq!(
        changed_keys,
        [
            "+    example.com/note: *** (after)",
            "+  password: *** (after)",
            "-    example.com/note: *** (before)",
            "-  password: *** (before)",
        ],
        "{change}"
    );
}
