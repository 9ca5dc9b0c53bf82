//! The tenancy rules by meaning, played as a hostile tenant with only a Git repository: every
//! network policy kind the policy lists, pods that would wear the agents' selector label, and
//! `apiVersion`/`kind`/names that are not Kubernetes names. Each refusal is located at file,
//! document and field, and nothing of the repository is applied.

use cdtarget::manifests::reserved_labels;
use cdtarget::policy::{self, Policy};
use cdtarget::problem::Problem;

use crate::support::{self, VALID_CDTARGET};

/// Loads `files` under `policy`, expecting a refusal; returns every problem.
fn refused(files: &[(&str, &str)], policy: &Policy) -> Vec<Problem> {
    match support::load(files, policy) {
        Ok(set) => panic!("accepted {} documents that must be refused", set.documents.len()),
        Err(problems) => problems,
    }
}

/// The one problem of a refused single-document file, checked for where it is.
fn only_problem(file: &str, text: &str, policy: &Policy) -> Problem {
    let problems = refused(&[(file, text)], policy);
    assert_eq!(problems.len(), 1, "{file}: exactly one problem: {problems:#?}");
    let problem = problems.into_iter().next().unwrap();
    assert_eq!((problem.file.as_deref(), problem.document), (Some(file), Some(1)), "{problem:?}");
    problem
}

// === network policy kinds ===

#[test]
fn cilium_calico_and_admin_network_policies_in_a_tenant_repo_are_refused_on_the_kind() {
    let policies = [
        ("cilium.io/v2", "CiliumNetworkPolicy"),
        ("cilium.io/v2", "CiliumClusterwideNetworkPolicy"),
        ("cilium.io/v2alpha1", "CiliumCIDRGroup"),
        ("crd.projectcalico.org/v1", "GlobalNetworkPolicy"),
        ("crd.projectcalico.org/v1", "NetworkPolicy"),
        ("crd.projectcalico.org/v1", "GlobalNetworkSet"),
        ("projectcalico.org/v3", "StagedNetworkPolicy"),
        ("policy.networking.k8s.io/v1alpha1", "AdminNetworkPolicy"),
        ("policy.networking.k8s.io/v1alpha1", "BaselineAdminNetworkPolicy"),
        ("crd.antrea.io/v1beta1", "NetworkPolicy"),
        ("k8s.ovn.org/v1", "EgressFirewall"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
    ];
    for (api_version, kind) in policies {
        let text = format!(
            "apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: allow-all\nspec:\n  egress: [{{toCIDR: [0.0.0.0/0]}}]\n"
        );
        let problem = only_problem("allow.yaml", &text, &Policy::default());
        assert_eq!(problem.field, "kind", "{api_version} {kind}");
        assert!(
            problem.message.contains("refused to tenants by the platform policy")
                && problem.message.contains("tenants declare egress through CDTargets instead"),
            "{api_version} {kind}: {}",
            problem.message
        );
    }
}

#[test]
fn a_kind_the_admin_lists_is_refused_in_any_version_and_only_in_its_group() {
    let policy = policy::parse(
        "tenancy:\n  forbiddenKinds:\n    - {group: gateway.example.com, kind: EgressRoute}\n",
        "policy.yaml",
    )
    .expect("valid policy");
    for version in ["v1", "v2beta1"] {
        let text = format!("apiVersion: gateway.example.com/{version}\nkind: EgressRoute\nmetadata:\n  name: out\n");
        let problem = only_problem("route.yaml", &text, &policy);
        assert_eq!(problem.field, "kind");
        assert!(problem.message.contains("`gateway.example.com/EgressRoute`"), "{}", problem.message);
    }
    let elsewhere = "apiVersion: other.example.com/v1\nkind: EgressRoute\nmetadata:\n  name: out\n";
    assert!(support::load(&[("route.yaml", elsewhere)], &policy).is_ok(), "another group's kind is another kind");
    // Listing kinds never un-forbids the two cdtarget relies on.
    let network_policy = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: p\n";
    assert_eq!(only_problem("np.yaml", network_policy, &policy).field, "kind");
    let registration = "apiVersion: cdtarget.io/v1alpha1\nkind: TenantRepository\nmetadata:\n  name: r\n";
    let problem = only_problem("repo.yaml", registration, &policy);
    assert!(problem.message.contains("platform namespace"), "{}", problem.message);
}

// === the agents' selector label ===

/// `template` placed where `kind` keeps the pod template, in a document of `kind`.
fn workload(api_version: &str, kind: &str, pod_template_path: &[&str], labels: &str) -> String {
    let mut template =
        format!("{{metadata: {{labels: {labels}}}, spec: {{containers: [{{name: c, image: busybox}}]}}}}");
    for key in pod_template_path.iter().rev() {
        template = format!("{{{key}: {template}}}");
    }
    format!("apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: sneaky\nspec: {template}\n")
}

#[test]
fn a_pod_template_with_the_agents_selector_label_is_refused_in_every_workload_kind() {
    let label = "{cdtarget.io/cdtarget: agents, app: web}";
    let cases: [(&str, &str, &[&str], &str); 9] = [
        ("apps/v1", "Deployment", &["template"], "spec.template.metadata.labels"),
        ("apps/v1", "StatefulSet", &["template"], "spec.template.metadata.labels"),
        ("apps/v1", "DaemonSet", &["template"], "spec.template.metadata.labels"),
        ("apps/v1", "ReplicaSet", &["template"], "spec.template.metadata.labels"),
        ("v1", "ReplicationController", &["template"], "spec.template.metadata.labels"),
        ("batch/v1", "Job", &["template"], "spec.template.metadata.labels"),
        ("batch/v1", "CronJob", &["jobTemplate", "spec", "template"], "spec.jobTemplate.spec.template.metadata.labels"),
        // Kinds cdtarget does not know: wherever they keep labels.
        ("argoproj.io/v1alpha1", "Rollout", &["template"], "spec.template.metadata.labels"),
        ("keda.sh/v1alpha1", "ScaledJob", &["jobTargetRef", "template"], "spec.jobTargetRef.template.metadata.labels"),
    ];
    for (api_version, kind, path, field) in cases {
        let text = workload(api_version, kind, path, label);
        let problem = only_problem("workload.yaml", &text, &Policy::default());
        assert_eq!(problem.field, format!("{field}.cdtarget.io/cdtarget"), "{kind}");
        assert!(
            problem.message.contains("tenant objects may neither carry nor select by it"),
            "{kind}: {}",
            problem.message
        );
    }
}

#[test]
fn a_pod_labelled_as_an_agent_is_refused_and_so_are_pods_of_a_helm_release_with_agent_labels() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {cdtarget.io/cdtarget: agents}\nspec:\n  containers: [{name: c, image: busybox}]\n";
    assert_eq!(only_problem("pod.yaml", pod, &Policy::default()).field, "metadata.labels.cdtarget.io/cdtarget");
    let release = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: web\nspec:\n  values:\n    podLabels: {cdtarget.io/cdtarget: agents}\n";
    assert_eq!(
        only_problem("release.yaml", release, &Policy::default()).field,
        "spec.values.podLabels.cdtarget.io/cdtarget"
    );
}

#[test]
fn selecting_the_agent_pods_by_their_label_is_refused() {
    let service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: agents\nspec:\n  selector: {cdtarget.io/cdtarget: agents}\n  ports: [{port: 80}]\n";
    assert_eq!(only_problem("svc.yaml", service, &Policy::default()).field, "spec.selector.cdtarget.io/cdtarget");
    let budget = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: pin\nspec:\n  maxUnavailable: 0\n  selector:\n    matchExpressions: [{key: cdtarget.io/cdtarget, operator: Exists}]\n";
    assert_eq!(only_problem("pdb.yaml", budget, &Policy::default()).field, "spec.selector.matchExpressions[0].key");
}

#[test]
fn ordinary_workloads_with_standard_labels_are_accepted() {
    let text = workload("apps/v1", "Deployment", &["template"], "{app.kubernetes.io/name: web, app: web}");
    assert!(support::load(&[("web.yaml", &text), ("target.yaml", VALID_CDTARGET)], &Policy::default()).is_ok());
}

#[test]
fn every_label_the_agents_are_selected_by_is_one_tenants_may_not_set() {
    // With additionalSelector set, to show tenant-chosen labels never join the selector.
    let text = VALID_CDTARGET.replace("spec:\n", "spec:\n  additionalSelector: {team: a}\n");
    let children = support::children(&text, &support::example_policy());
    let selected_by_policy =
        children.network_policy().expect("a NetworkPolicy").spec.as_ref().and_then(|s| s.pod_selector.as_ref());
    let selected_by_deployment = children.deployment().expect("a Deployment").spec.as_ref().map(|s| &s.selector);
    for selector in [selected_by_policy, selected_by_deployment] {
        let selector = selector.expect("a selector");
        assert!(selector.match_expressions.is_none(), "{selector:?}");
        let keys: Vec<&String> = selector.match_labels.iter().flatten().map(|(k, _)| k).collect();
        assert!(!keys.is_empty());
        for key in keys {
            assert!(
                reserved_labels::is_reserved(key),
                "the agents are selected by `{key}`, which a tenant pod could wear"
            );
        }
    }
}

// === apiVersion, kind and names as URL segments ===

#[test]
fn kind_and_api_version_that_are_not_kubernetes_names_are_refused_before_any_other_check() {
    let cases = [
        ("v1", "../../secrets", "kind"),
        ("v1", "secrets", "kind"),
        ("v1", "Secret/x", "kind"),
        ("v1/../..", "Secret", "apiVersion"),
        ("../v1", "Secret", "apiVersion"),
        ("apps/v1?dryRun=All", "Deployment", "apiVersion"),
        ("Apps/v1", "Deployment", "apiVersion"),
        ("apps/V1", "Deployment", "apiVersion"),
        ("/v1", "ConfigMap", "apiVersion"),
    ];
    for (api_version, kind, field) in cases {
        let text = format!("apiVersion: \"{api_version}\"\nkind: \"{kind}\"\nmetadata:\n  name: x\n");
        let problem = only_problem("bad.yaml", &text, &Policy::default());
        assert_eq!(problem.field, field, "{api_version} {kind}");
        assert!(problem.message.contains("expected"), "says what is accepted: {}", problem.message);
    }
    // Both wrong: both reported, and no rule looks at the kind or the version meanwhile.
    let both = "apiVersion: \"v1/..\"\nkind: \"../Namespace\"\nmetadata:\n  name: x\n";
    let mut fields: Vec<String> =
        refused(&[("bad.yaml", both)], &Policy::default()).into_iter().map(|p| p.field).collect();
    fields.sort();
    assert_eq!(fields, ["apiVersion", "kind"]);
}

#[test]
fn a_role_name_that_would_change_the_request_url_is_refused() {
    for name in ["x?fieldManager=evil", "x#y", "a b", ".."] {
        let text =
            format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: \"{name}\"\nrules: []\n");
        let problem = only_problem("role.yaml", &text, &Policy::default());
        assert_eq!(problem.field, "metadata.name", "{name}");
    }
    let fine =
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: \"system:deployer\"\nrules: []\n";
    assert!(support::load(&[("role.yaml", fine)], &Policy::default()).is_ok(), "RBAC names may hold ':'");
}

#[test]
fn a_cron_job_name_too_long_for_its_jobs_is_refused() {
    let name = "n".repeat(53);
    let text = format!("apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: {name}\nspec: {{}}\n");
    let problem = only_problem("cron.yaml", &text, &Policy::default());
    assert_eq!(problem.field, "metadata.name");
    assert!(problem.message.contains("at most 52"), "{}", problem.message);
}

// === the documentation ===

#[test]
fn the_forbidden_kinds_documented_as_defaults_are_the_defaults() {
    let text = std::fs::read_to_string(support::project_dir().join("docs/policy.md")).expect("docs/policy.md");
    let section = text.split("## The document, with every default").nth(1).expect("the defaults section");
    let block = section.split("```yaml\n").nth(1).and_then(|b| b.split("```").next()).expect("its YAML block");
    let documented = policy::parse(block, "docs/policy.md").expect("the documented defaults parse");
    assert_eq!(documented.tenancy, Policy::default().tenancy);
}

// === encrypted documents ===

/// A Secret as `sops --encrypt` writes it (age and KMS recipients, `ENC[AES256_GCM,...]` values),
/// written by hand with the shape sops 3.9 produces.
const SOPS_SECRET: &str = r#"apiVersion: v1
kind: Secret
metadata:
    name: database
type: Opaque
stringData:
    password: ENC[AES256_GCM,data:Tr7o1A==,iv:1bXq1OZ9bS3c0Jm4cE5kzV1fH0sI2w8yJ6uQ3nXc8aQ=,tag:b5vC2yQkq3Xn0k1Jf4mA8w==,type:str]
    user: ENC[AES256_GCM,data:cGF5bWVudHM=,iv:9wJ0mH3mRk0n1dPqZ7c9b2Yx4uQ6s8tV0aB2cD4eF6g=,tag:Qm1hZ2ljIHRhZyBoZXJlIQ==,type:str]
sops:
    kms:
        - arn: arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab
          created_at: "2026-11-20T09:12:44Z"
          enc: AQICAHh0c29wcy1leGFtcGxlLWNpcGhlcnRleHQtbm90LXJlYWw=
          aws_profile: ""
    age:
        - recipient: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p
          enc: |
            -----BEGIN AGE ENCRYPTED FILE-----
            YWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IFgyNTUxOSBub3QtYS1yZWFsLWtleQo=
            -----END AGE ENCRYPTED FILE-----
    lastmodified: "2026-11-20T09:12:45Z"
    mac: ENC[AES256_GCM,data:bm90LWEtcmVhbC1tYWM=,iv:Zm9vYmFyYmF6cXV4cXV1eA==,tag:dGFnLXRhZy10YWctdGFn,type:str]
    encrypted_regex: ^(data|stringData)$
    version: 3.9.1
"#;

#[test]
fn a_sops_encrypted_document_refuses_the_whole_revision_with_a_located_error_naming_sops() {
    let settings = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n";
    let files = [("deploy/settings.yaml", settings), ("deploy/secret.enc.yaml", SOPS_SECRET)];
    let problems = refused(&files, &support::example_policy());
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let problem = &problems[0];
    assert_eq!(
        (problem.file.as_deref(), problem.document, problem.field.as_str()),
        (Some("deploy/secret.enc.yaml"), Some(1), "sops")
    );
    for said in ["SOPS-encrypted", "does not decrypt", "nothing of this revision is applied", "Sealed Secrets"] {
        assert!(problem.message.contains(said), "{said:?} missing from {problem}");
    }
    // No ciphertext is quoted back (the refusal names the document, not its values).
    assert!(!problem.to_string().contains("ENC["), "{problem}");
}

#[test]
fn a_document_with_a_sops_field_that_is_not_sops_metadata_is_judged_as_any_other() {
    // A ConfigMap whose data has a key named `sops` is ordinary data, not an encrypted document.
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tools\ndata:\n  sops: \"3.9\"\n";
    assert!(support::load(&[("deploy/tools.yaml", text)], &support::example_policy()).is_ok());
}
