//! `cdtarget reconcile KIND NAME --wait` as a process against the real API server and the shared
//! controller: the request (`cdtarget.io/requestedAt`) reaches the controller through its watch,
//! the reconcile records it in `status.lastHandledReconcileAt`, and the command's exit code and
//! output follow the `Ready` condition that reconcile left.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Instant;

use cdtarget::api::reconcile_request::REQUESTED_AT;
use cdtarget::api::{CDTarget, TenantRepository};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};

use crate::common::cluster::{
    CDTARGET, CONFIG_MAP, PLATFORM_NAMESPACE, Tenant, applied, exists, installed_cluster, namespace, path_str, ready,
    shared_controller,
};
use crate::kit::{deployment_reports_available, kubectl_file, scaled_object_reports};

/// Runs `cdtarget reconcile ARGS...` (stdin closed, stdout and stderr captured; killed if the
/// test is dropped first) and prints how long it took.
async fn reconcile(args: &[&str]) -> Output {
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_cdtarget"))
        .arg("reconcile")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("cdtarget reconcile runs");
    eprintln!("cdtarget reconcile {}: exit {:?} after {:?}", args.join(" "), out.status.code(), started.elapsed());
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The request the object carries and the one its status says was handled.
fn request_and_handled(
    annotations: &std::collections::BTreeMap<String, String>,
    handled: Option<&str>,
) -> (String, String) {
    let requested = annotations.get(REQUESTED_AT).cloned().expect("the request annotation is set");
    (requested, handled.unwrap_or("none").to_owned())
}

#[tokio::test]
async fn reconcile_wait_exits_zero_once_the_registration_handled_the_request() {
    let test = "reconcile_wait_exits_zero_once_the_registration_handled_the_request";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let log = shared_controller(cluster).await;
    let kubeconfig = cluster.admin_kubeconfig();

    // The namespace is cdtarget-system unless -n says otherwise.
    let out = reconcile(&["tenantrepository", &tenant.ns, "--wait", "--kubeconfig", path_str(&kubeconfig)]).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {stderr}{}", tenant.diagnostics(log));
    let expected = format!("TenantRepository {PLATFORM_NAMESPACE}/{}: Ready=True ", tenant.ns);
    assert!(stdout.starts_with(&expected) && stdout.lines().count() == 1, "{stdout}");
    // Not a terminal: one plain line on stderr, no spinner.
    assert!(stderr.starts_with("waiting for the controller to reconcile TenantRepository"), "{stderr}");
    assert!(!stderr.contains('\r'), "{stderr:?}");

    let registrations: Api<TenantRepository> = Api::namespaced(cluster.admin_client().await, PLATFORM_NAMESPACE);
    let registration = registrations.get(&tenant.ns).await.expect("the registration");
    let handled = registration.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref());
    let (requested, handled) = request_and_handled(registration.annotations(), handled);
    assert_eq!(handled, requested);
    assert!(requested.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "RFC 3339: {requested}");
    // Ready meant applied: the tenant's ConfigMap is there.
    tenant.until::<ConfigMap, _>("the tenant's ConfigMap", "pipeline-settings", exists, log).await;
}

#[tokio::test]
async fn reconcile_wait_after_a_broken_push_exits_one_naming_the_problem() {
    let test = "reconcile_wait_after_a_broken_push_exits_one_naming_the_problem";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let log = shared_controller(cluster).await;
    tenant.registration_until("Applied=True", applied("True", "Succeeded"), log).await;

    tenant.repo.commit_and_push(&[("deploy/broken.yaml", "kind: [")], "a broken document");
    let kubeconfig = cluster.admin_kubeconfig();
    let out = reconcile(&[
        "tenantrepository",
        &tenant.ns,
        "-n",
        PLATFORM_NAMESPACE,
        "--wait",
        "--timeout",
        "2m",
        "--kubeconfig",
        path_str(&kubeconfig),
    ])
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "stdout: {stdout}\nstderr: {stderr}{}", tenant.diagnostics(log));
    assert!(stdout.contains("Ready=False ValidationFailed: "), "{stdout}");
    assert!(stdout.contains("broken.yaml"), "the problem is named: {stdout}");
}

#[tokio::test]
async fn reconcile_of_a_missing_registration_exits_two_naming_it() {
    let test = "reconcile_of_a_missing_registration_exits_two_naming_it";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let kubeconfig = cluster.admin_kubeconfig();
    let out =
        reconcile(&["tenantrepository", "no-such-registration", "--wait", "--kubeconfig", path_str(&kubeconfig)]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(
        stderr.contains(&format!("TenantRepository {PLATFORM_NAMESPACE}/no-such-registration not found")),
        "{stderr}"
    );
}

#[tokio::test]
async fn reconcile_wait_times_out_with_exit_three_when_no_controller_handles_the_request() {
    let test = "reconcile_wait_times_out_with_exit_three_when_no_controller_handles_the_request";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // The shared controller runs, but reads registrations in cdtarget-system only.
    shared_controller(cluster).await;
    let ns = namespace(cluster, "unwatched");
    let registration = format!(
        "apiVersion: cdtarget.io/v1alpha1\nkind: TenantRepository\nmetadata:\n  name: elsewhere\n  namespace: {ns}\nspec:\n  url: git://127.0.0.1:9/tenant.git\n  targetNamespace: {ns}\n  serviceAccountName: cdtarget-tenant\n"
    );
    let kubeconfig = cluster.admin_kubeconfig();
    kubectl_file(cluster, &kubeconfig, "apply", &registration, &[]).success();

    let out = reconcile(&[
        "tenantrepository",
        "elsewhere",
        "--namespace",
        &ns,
        "--wait",
        "--timeout",
        "1s",
        "--kubeconfig",
        path_str(&kubeconfig),
    ])
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(stderr.contains("timed out after 1s"), "{stderr}");
    assert!(stderr.contains("status.lastHandledReconcileAt: none"), "{stderr}");
    // The request was made; nothing handled it.
    let registrations: Api<TenantRepository> = Api::namespaced(cluster.admin_client().await, &ns);
    let stored = registrations.get("elsewhere").await.expect("the registration");
    assert!(stored.annotations().contains_key(REQUESTED_AT), "{:?}", stored.metadata);
    assert!(stored.status.is_none(), "no controller wrote status: {:?}", stored.status);
}

#[tokio::test]
async fn reconcile_cdtarget_as_the_tenant_waits_for_the_cdtarget_reconciler() {
    let test = "reconcile_cdtarget_as_the_tenant_waits_for_the_cdtarget_reconciler";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/agents.yaml", CDTARGET)]);
    let log = shared_controller(cluster).await;
    tenant.until::<CDTarget, _>("the CDTarget's Ready condition", "deploy-agents", ready, log).await;

    // The tenant's own ServiceAccount: its Role lets it get, list, watch and patch its CDTargets.
    // `--wait` waits past the handled request while the CDTarget is Reconciling (its agents not
    // available yet), until it is Ready: the Deployment's availability and the ScaledObject's
    // Ready are reported meanwhile (no Deployment controller, kubelet or KEDA operator runs here).
    let kubeconfig = cluster.service_account_kubeconfig(&tenant.ns, "cdtarget-tenant").await;
    let args = ["cdtarget", "deploy-agents", "-n", &tenant.ns, "--wait", "--kubeconfig", path_str(&kubeconfig)];
    let waiting = reconcile(&args);
    let agents = async {
        // The request handled, the CDTarget not Ready: the command is still waiting.
        let handled_not_ready = |target: Option<&CDTarget>| {
            target.is_some_and(|t| {
                let requested = t.annotations().get(REQUESTED_AT);
                let status = t.status.as_ref();
                requested.is_some()
                    && status.and_then(|s| s.last_handled_reconcile_at.as_ref()) == requested
                    && status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "False"))
            })
        };
        tenant.until::<CDTarget, _>("the request handled, not Ready", "deploy-agents", handled_not_ready, log).await;
        deployment_reports_available(&tenant, "deploy-agents").await;
        scaled_object_reports(
            &tenant,
            "deploy-agents",
            "True",
            "ScaledObjectReady",
            "ScaledObject is defined correctly",
        );
    };
    let (out, ()) = tokio::join!(waiting, agents);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let prefix = format!("CDTarget {}/deploy-agents: Ready=True Applied: ", tenant.ns);
    assert!(stdout.starts_with(&prefix), "stdout: {stdout}\nstderr: {stderr}{}", tenant.diagnostics(log));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");

    let targets: Api<CDTarget> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let target = targets.get("deploy-agents").await.expect("the CDTarget");
    let handled = target.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref());
    let (requested, handled) = request_and_handled(target.annotations(), handled);
    assert_eq!(handled, requested);
}

#[tokio::test]
async fn reconcile_wait_draws_a_spinner_on_a_terminal_and_erases_it() {
    let test = "reconcile_wait_draws_a_spinner_on_a_terminal_and_erases_it";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    if crate::common::process::find_on_path("script").is_none() {
        eprintln!("SKIP {test}: `script` (util-linux) is not installed");
        return;
    }
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let log = shared_controller(cluster).await;
    let kubeconfig = cluster.admin_kubeconfig();
    let command = format!(
        "{} reconcile tenantrepository {} --wait --kubeconfig {}",
        env!("CARGO_BIN_EXE_cdtarget"),
        tenant.ns,
        path_str(Path::new(&kubeconfig))
    );
    // util-linux `script` runs it under a pseudo-terminal: stderr is a terminal.
    let out = tokio::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("script runs");
    let screen = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{screen:?}{}", tenant.diagnostics(log));
    // The first frame is drawn at once, before the watch has had an answer.
    let first =
        format!("\r- waiting for the controller to reconcile TenantRepository {PLATFORM_NAMESPACE}/{} (", tenant.ns);
    assert!(screen.contains(&first), "{screen:?}");
    assert!(screen.contains("\r\x1b[2K"), "the progress line is erased: {screen:?}");
    assert!(screen.contains("Ready=True"), "{screen:?}");
}
