//! The ValidatingAdmissionPolicies of `examples/platform/tenant-rbac.yaml`, attacked on the real
//! apiserver (its CEL, its admission chain) as the tenant's ServiceAccount: with the tenant's own
//! token (what a pod running as it could do) and through the controller (from Git, or as the
//! controller's token impersonating the tenant), each rule's refusal with the policy's message and
//! the case it allows. Each test onboards its own tenant namespace.

use std::path::Path;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::common::ControlPlane;
use crate::common::cluster::{CONFIG_MAP, PLATFORM_NAMESPACE, Tenant, applied, installed_cluster, shared_controller};
use crate::common::control_plane::client_from_kubeconfig;
use crate::kit::{kubectl_file, registration_condition};

const NO_TOKEN_SECRETS: &str = "cdtarget-tenant-no-service-account-token-secrets";
const TOKEN_TYPE_REFUSED: &str = "Secrets of type kubernetes.io/service-account-token are not allowed in tenant namespaces; use the TokenRequest API from the platform side if a token is really needed";
const TOKEN_ANNOTATION_REFUSED: &str =
    "the annotation kubernetes.io/service-account.name is not allowed on Secrets in tenant namespaces";
const NO_PODS_AS_APPLY_IDENTITY: &str = "cdtarget-tenant-no-pods-as-the-apply-identity";
const APPLY_IDENTITY_REFUSED: &str =
    "pods may not run as cdtarget-tenant, the ServiceAccount cdtarget applies this namespace with";
const NO_AGENT_LABELS: &str = "cdtarget-tenant-no-agent-labels";
const AGENT_LABELS_REFUSED: &str = "labels with the prefix cdtarget.io/ are the controller's: a pod wearing them would get the egress of a CDTarget's agents";

/// `kubectl create` of `manifest` into `ns` with `kubeconfig` (and `extra` flags).
fn create(
    cluster: &ControlPlane,
    kubeconfig: &Path,
    ns: &str,
    manifest: &str,
    extra: &[&str],
) -> Result<String, String> {
    let run = kubectl_file(cluster, kubeconfig, "create", manifest, &[&["-n", ns][..], extra].concat());
    let stdout = String::from_utf8_lossy(&run.output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.output.stderr).into_owned();
    if run.output.status.success() { Ok(stdout) } else { Err(stderr) }
}

/// Panics unless `outcome` is the refusal of `policy` with `message`.
fn assert_denied(outcome: Result<String, String>, policy: &str, message: &str, what: &str) {
    let refused = outcome.err().unwrap_or_else(|| panic!("{what} was admitted"));
    let expected = format!("ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}");
    assert!(refused.contains(&expected), "{what}: `{expected}` not in {refused}");
}

/// A Secret named `name` with the given extra metadata lines and type.
fn secret(name: &str, annotations: &str, type_: &str) -> String {
    format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n{annotations}type: {type_}\n")
}

const TOKEN_ANNOTATION: &str = "  annotations:\n    kubernetes.io/service-account.name: cdtarget-tenant\n";

/// Waits (at most a minute) until the three policies are enforced in the tenant namespace `ns`.
/// kube-apiserver loads a new ValidatingAdmissionPolicy and its binding asynchronously (from its
/// informers), so requests right after the binary's first onboarding created them can pass
/// unjudged. Nothing signals the load: one server-side dry run per policy (nothing is stored),
/// as the admin (whom the policies judge too), is repeated until all three are denied.
async fn until_policies_enforced(cluster: &ControlPlane, ns: &str) {
    let admin = cluster.admin_kubeconfig();
    let probes = [
        (secret("probe", TOKEN_ANNOTATION, "Opaque"), NO_TOKEN_SECRETS),
        (workload("Pod", "probe", Some(""), "  serviceAccountName: cdtarget-tenant\n"), NO_PODS_AS_APPLY_IDENTITY),
        (workload("Deployment", "probe", Some("    cdtarget.io/cdtarget: probe\n"), ""), NO_AGENT_LABELS),
    ];
    let started = std::time::Instant::now();
    for round in 1.. {
        let enforced = probes.iter().all(|(manifest, policy)| {
            create(cluster, &admin, ns, manifest, &["--dry-run=server"]).is_err_and(|refused| refused.contains(policy))
        });
        if enforced {
            eprintln!(
                "[admission] policies enforced in {ns} after {:.1} s ({round} probe rounds)",
                started.elapsed().as_secs_f64()
            );
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the admission policies are not enforced in {ns}"
        );
        // No signal to await (see above): probe again shortly.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn service_account_token_secrets_are_refused_in_a_tenant_namespace_and_opaque_ones_allowed() {
    let test = "service_account_token_secrets_are_refused_in_a_tenant_namespace_and_opaque_ones_allowed";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    // From Git: the loader has no rule against token Secrets (the Role grants Secrets), so the
    // controller sends it as the tenant and the admission policy answers.
    let token_secret = secret("mint", TOKEN_ANNOTATION, "kubernetes.io/service-account-token");
    let files = [("deploy/settings.yaml", CONFIG_MAP), ("deploy/token.yaml", token_secret.as_str())];
    let tenant = Tenant::onboard_with(cluster, &files, "  suspend: true\n");
    until_policies_enforced(cluster, &tenant.ns).await;
    let log = shared_controller(cluster).await;
    tenant.patch_registration(r#"{"spec":{"suspend":false}}"#);
    let registration =
        tenant.registration_until("Applied=False/ApplyFailed", applied("False", "ApplyFailed"), log).await;
    let message = registration_condition(&registration, "Applied").message;
    assert!(message.contains(&format!("Secret {}/mint", tenant.ns)), "{message}");
    assert!(message.contains(NO_TOKEN_SECRETS) && message.contains(TOKEN_TYPE_REFUSED), "{message}");

    // With the tenant's own token.
    let as_tenant = cluster.service_account_kubeconfig(&tenant.ns, "cdtarget-tenant").await;
    let minted = create(cluster, &as_tenant, &tenant.ns, &token_secret, &[]);
    assert_denied(minted, NO_TOKEN_SECRETS, TOKEN_TYPE_REFUSED, "a token Secret");
    let annotated = create(cluster, &as_tenant, &tenant.ns, &secret("annotated", TOKEN_ANNOTATION, "Opaque"), &[]);
    assert_denied(annotated, NO_TOKEN_SECRETS, TOKEN_ANNOTATION_REFUSED, "an Opaque Secret naming a ServiceAccount");
    // Allowed: an ordinary Secret. Its type cannot be turned into a token afterwards (the API
    // server's own immutability rule; the policy checks CREATE only).
    create(cluster, &as_tenant, &tenant.ns, &secret("plain", "", "Opaque"), &[]).expect("an Opaque Secret");
    let retyped = cluster
        .kubectl_as(&as_tenant, &[
            "patch",
            "secret",
            "plain",
            "-n",
            &tenant.ns,
            "--type=merge",
            "-p",
            r#"{"type":"kubernetes.io/service-account-token","metadata":{"annotations":{"kubernetes.io/service-account.name":"cdtarget-tenant"}}}"#,
        ])
        .failure();
    assert!(retyped.contains("field is immutable"), "{retyped}");

    let secrets: Api<Secret> = Api::namespaced(cluster.admin_client().await, &tenant.ns);
    let stored = secrets.list(&Default::default()).await.expect("list the Secrets");
    let names: Vec<String> = stored.items.iter().filter_map(|s| s.metadata.name.clone()).collect();
    assert!(names.contains(&"plain".to_owned()), "{names:?}");
    assert!(
        stored.items.iter().all(|s| s.type_.as_deref() != Some("kubernetes.io/service-account-token")),
        "a token Secret exists: {names:?}"
    );
}

/// A workload of `kind` named `name`: its pod template labelled `app: <name>` plus the `labels`
/// lines (indented by four spaces), or with no metadata at all when `labels` is `None`, and the
/// `pod_spec` lines (indented by two) added to its pod spec.
fn workload(kind: &str, name: &str, labels: Option<&str>, pod_spec: &str) -> String {
    let restart = if matches!(kind, "Job" | "CronJob") { "Never" } else { "Always" };
    let metadata = labels.map(|extra| format!("metadata:\n  labels:\n    app: {name}\n{extra}")).unwrap_or_default();
    let template = format!(
        "{metadata}spec:\n  restartPolicy: {restart}\n{pod_spec}  containers:\n    - name: main\n      image: registry.example/app:1\n"
    );
    let indented =
        |by: usize| -> String { template.lines().map(|line| format!("{}{line}\n", " ".repeat(by))).collect() };
    let head = |api_version: &str| format!("apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n");
    let selector = format!("  selector:\n    matchLabels:\n      app: {name}\n");
    match kind {
        "Pod" => format!(
            "apiVersion: v1\nkind: Pod\n{}",
            template.replacen("metadata:\n", &format!("metadata:\n  name: {name}\n"), 1)
        ),
        "Deployment" => format!("{}spec:\n{selector}  template:\n{}", head("apps/v1"), indented(4)),
        "StatefulSet" => {
            format!("{}spec:\n  serviceName: {name}\n{selector}  template:\n{}", head("apps/v1"), indented(4))
        }
        "Job" => format!("{}spec:\n  template:\n{}", head("batch/v1"), indented(4)),
        "CronJob" => format!(
            "{}spec:\n  schedule: \"0 0 * * *\"\n  jobTemplate:\n    spec:\n      template:\n{}",
            head("batch/v1"),
            indented(8)
        ),
        other => panic!("no workload of kind {other}"),
    }
}

#[tokio::test]
async fn pods_running_as_the_apply_identity_are_refused_in_a_tenant_namespace() {
    let test = "pods_running_as_the_apply_identity_are_refused_in_a_tenant_namespace";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    until_policies_enforced(cluster, &tenant.ns).await;
    let as_tenant = cluster.service_account_kubeconfig(&tenant.ns, "cdtarget-tenant").await;
    let thief = "  serviceAccountName: cdtarget-tenant\n  automountServiceAccountToken: true\n";

    // The attack: a Deployment whose pods run as the ServiceAccount cdtarget impersonates, with
    // its token mounted. The Role allows Deployments, and the policy does not look at them...
    let deployment = workload("Deployment", "sa-thief", Some(""), thief);
    create(cluster, &as_tenant, &tenant.ns, &deployment, &[]).expect("the Deployment is admitted");
    // ... nor may the tenant make the pods itself (no `pods` in the Role: RBAC refuses)...
    let pod = workload("Pod", "sa-thief", Some(""), thief);
    let direct = create(cluster, &as_tenant, &tenant.ns, &pod, &[]).expect_err("a pod as the tenant");
    assert!(direct.contains("cannot create resource \"pods\""), "{direct}");
    // ... so the pods come from the ReplicaSet controller, and the policy refuses them whoever
    // sends them. This control plane runs no ReplicaSet controller (no kubelet either): its
    // request is played by impersonating its ServiceAccount, which holds its bootstrap RBAC.
    let replicaset_controller = ["--as", "system:serviceaccount:kube-system:replicaset-controller"];
    let admin = cluster.admin_kubeconfig();
    let refused = create(cluster, &admin, &tenant.ns, &pod, &replicaset_controller);
    assert_denied(refused, NO_PODS_AS_APPLY_IDENTITY, APPLY_IDENTITY_REFUSED, "a pod as cdtarget-tenant");
    // The deprecated alias `serviceAccount` is the same field once the API server has read it.
    let alias = workload("Pod", "sa-thief-alias", Some(""), "  serviceAccount: cdtarget-tenant\n");
    let refused = create(cluster, &admin, &tenant.ns, &alias, &replicaset_controller);
    assert_denied(
        refused,
        NO_PODS_AS_APPLY_IDENTITY,
        APPLY_IDENTITY_REFUSED,
        "a pod with serviceAccount: cdtarget-tenant",
    );
    // Allowed: a pod with any other ServiceAccount (here the namespace's default).
    let honest = workload("Pod", "honest", Some(""), "");
    create(cluster, &admin, &tenant.ns, &honest, &replicaset_controller).expect("a pod as the default ServiceAccount");
    let pods = cluster.kubectl(&["get", "pods", "-n", &tenant.ns, "-o", "name"]).success();
    assert_eq!(pods.trim(), "pod/honest");
}

#[tokio::test]
async fn agent_labels_on_a_pod_template_are_refused_to_the_tenant_on_every_workload_it_may_write() {
    let test = "agent_labels_on_a_pod_template_are_refused_to_the_tenant_on_every_workload_it_may_write";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    until_policies_enforced(cluster, &tenant.ns).await;
    let as_tenant = cluster.service_account_kubeconfig(&tenant.ns, "cdtarget-tenant").await;
    let agent_label = "    cdtarget.io/cdtarget: deploy-agents\n";

    // Every workload kind the example Role grants, created with the agents' selector label on
    // its pod template.
    for kind in ["Deployment", "StatefulSet", "Job", "CronJob"] {
        let labelled = workload(kind, "disguised", Some(agent_label), "");
        let refused = create(cluster, &as_tenant, &tenant.ns, &labelled, &[]);
        assert_denied(refused, NO_AGENT_LABELS, AGENT_LABELS_REFUSED, &format!("a {kind} with agent labels"));
    }
    // Allowed: the same kinds without them (a CronJob's template may have no labels at all).
    create(cluster, &as_tenant, &tenant.ns, &workload("Deployment", "plain", Some(""), ""), &[]).expect("a Deployment");
    let bare_cron = workload("CronJob", "bare", None, "");
    create(cluster, &as_tenant, &tenant.ns, &bare_cron, &[]).expect("a CronJob without template labels");
    // An update that adds the label is refused too.
    let relabel = cluster
        .kubectl_as(
            &as_tenant,
            &[
                "patch",
                "deployment",
                "plain",
                "-n",
                &tenant.ns,
                "--type=merge",
                "-p",
                r#"{"spec":{"template":{"metadata":{"labels":{"cdtarget.io/cdtarget":"deploy-agents"}}}}}"#,
            ],
        )
        .failure();
    assert!(relabel.contains(AGENT_LABELS_REFUSED), "{relabel}");

    // Through the controller: its token impersonating the tenant is judged as the tenant (the
    // policy exempts the controller's own identity only)...
    let as_controller = cluster.service_account_kubeconfig(PLATFORM_NAMESPACE, "cdtarget").await;
    let labelled = workload("Deployment", "through-the-controller", Some(agent_label), "");
    let refused = create(cluster, &as_controller, &tenant.ns, &labelled, &["--as", &tenant.user()]);
    assert_denied(refused, NO_AGENT_LABELS, AGENT_LABELS_REFUSED, "a Deployment as the controller impersonating");
    // ... while the controller as itself may write them: that is how agents get their label.
    create(cluster, &as_controller, &tenant.ns, &labelled, &[]).expect("the controller's own Deployment");
}

#[tokio::test]
async fn the_example_role_grants_the_tenant_no_network_policy_rbac_token_namespace_or_other_namespace() {
    let test = "the_example_role_grants_the_tenant_no_network_policy_rbac_token_namespace_or_other_namespace";
    let Some((cluster, _)) = installed_cluster(test) else { return };
    let tenant = Tenant::onboard(cluster, &[("deploy/settings.yaml", CONFIG_MAP)]);
    let as_tenant = cluster.service_account_kubeconfig(&tenant.ns, "cdtarget-tenant").await;
    let ns = tenant.ns.as_str();
    let user = tenant.user();
    // What the header of the example claims the Role leaves out, each refused by RBAC.
    // Egress is the cluster admin's: no NetworkPolicy of its own.
    let open = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: open\nspec:\n  podSelector: {}\n  egress:\n    - {}\n";
    let refused = create(cluster, &as_tenant, ns, open, &[]).expect_err("a NetworkPolicy");
    assert!(refused.contains(&format!("User \"{user}\" cannot create resource \"networkpolicies\"")), "{refused}");
    let refusals: [(&[&str], String); 3] = [
        // No escalation through RBAC kinds.
        (
            &["create", "role", "mine", "--verb=*", "--resource=*", "-n", ns][..],
            format!("User \"{user}\" cannot create resource \"roles\""),
        ),
        // No token of its own ServiceAccount (TokenRequest).
        (
            &["create", "token", "cdtarget-tenant", "-n", ns][..],
            format!("User \"{user}\" cannot create resource \"serviceaccounts/token\""),
        ),
        // Nothing outside its namespace.
        (
            &["get", "secrets", "-n", "kube-system"][..],
            format!(
                "User \"{user}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
            ),
        ),
    ];
    for (args, expected) in refusals {
        let refused = cluster.kubectl_as(&as_tenant, args).failure();
        assert!(refused.contains(&expected), "kubectl {}: `{expected}` not in {refused}", args.join(" "));
    }
    // The namespace label that scopes every admission policy above stays: the patch itself, sent
    // as the tenant (kubectl would stop at the `get` it sends first).
    let namespaces: Api<Namespace> = Api::all(client_from_kubeconfig(&as_tenant).await);
    let unlabel = serde_json::json!({"metadata": {"labels": {"cdtarget.io/tenant": null}}});
    let refused = namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&unlabel)).await.expect_err("unlabelled");
    let kube::Error::Api(status) = refused else { panic!("{refused}") };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(status.message.contains(&format!("User \"{user}\" cannot patch resource \"namespaces\"")), "{status:?}");

    // Allowed: what it applies, in its namespace.
    cluster.kubectl_as(&as_tenant, &["create", "configmap", "allowed", "-n", ns]).success();

    // The token Secret policy is scoped to tenant namespaces: elsewhere (a platform namespace,
    // for the admin) the API server still accepts one, while it is enforced here.
    until_policies_enforced(cluster, ns).await;
    let platform = crate::common::cluster::namespace(cluster, "platform");
    let token_secret = secret("platform-token", TOKEN_ANNOTATION, "kubernetes.io/service-account-token");
    create(cluster, &cluster.admin_kubeconfig(), &platform, &token_secret, &[])
        .expect("a token Secret outside tenant namespaces");
}
