//! `manifests_load`: arbitrary bytes as a tenant's YAML files → the loader with the tenancy
//! checks → the children of every CDTarget, exactly as `cdtarget render` does it.
//!
//! Invariants: no panic, and no stack overflow on a thread with the deployment's 2 MiB stack; on
//! success every object goes to the tenant's namespace, is of no kind a tenant may not apply,
//! has `apiVersion`/`kind`/`name` that are safe as URL path segments, no pod template wears the
//! agents' selector label, no object is defined twice, and every CDTarget renders (the loader
//! promised it would) into children that stay in the namespace, select only their own agents
//! and open no forbidden address; on failure every problem names one of the files (but the
//! trailing "and N more problems" of a refusal with more than the budget keeps).

use std::collections::BTreeSet;

use cdtarget::api::keda::KedaVersion;
use cdtarget::api::labels;
use cdtarget::manifests::{self, Content, SourceFile};
use cdtarget::policy::Policy;
use cdtarget::render::{self, Children, Scaling, SecretDigests};
use serde_json::Value;

/// The tenant namespace every object must land in.
pub const NAMESPACE: &str = "tenant-a";
/// Files are separated by NUL bytes (which YAML text cannot hold); at most this many.
const FILE_NAMES: [&str; 4] = ["app.yaml", "agents/targets.yaml", "more/c.yml", "kustomization.yaml"];

/// Kinds no tenant may apply, by meaning: what is cluster-scoped, and what changes the network
/// policy of the namespace or registers repositories (issue #10, point 5, with its defaults).
/// An oracle of its own, kept apart from `manifests::scope`, so one mistake does not hide in both.
const FORBIDDEN_KINDS: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("storage.k8s.io", "StorageClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("keda.sh", "ClusterTriggerAuthentication"),
    ("cdtarget.io", "TenantRepository"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("cilium.io", "CiliumNetworkPolicy"),
    ("cilium.io", "CiliumClusterwideNetworkPolicy"),
    ("crd.projectcalico.org", "NetworkPolicy"),
    ("crd.projectcalico.org", "GlobalNetworkPolicy"),
    ("projectcalico.org", "NetworkPolicy"),
    ("projectcalico.org", "GlobalNetworkPolicy"),
    ("policy.networking.k8s.io", "AdminNetworkPolicy"),
    ("policy.networking.k8s.io", "BaselineAdminNetworkPolicy"),
];

/// What every CDTarget renders, under its own name.
const CHILD_KINDS: [(&str, &str); 4] = [
    ("networking.k8s.io", "NetworkPolicy"),
    ("apps", "Deployment"),
    ("keda.sh", "ScaledObject"),
    ("keda.sh", "TriggerAuthentication"),
];

/// The fuzz target: the load and the checks run on a thread with the deployment's 2 MiB stack
/// (tokio's), where a stack overflow aborts the fuzzer as it would abort the controller.
pub fn check(data: &[u8]) {
    let files: Vec<SourceFile> = data
        .split(|b| *b == 0)
        .zip(FILE_NAMES)
        .map(|(text, path)| SourceFile { path: path.to_owned(), text: super::text(text) })
        .collect();
    super::kustomize::on_small_stack(move || check_files(files));
}

fn check_files(files: Vec<SourceFile>) {
    let names: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    let policy = Policy::default();

    let set = match manifests::load(files, NAMESPACE, &policy) {
        Ok(set) => set,
        Err(problems) => {
            assert!(!problems.is_empty(), "a refusal without a problem");
            let limit = cdtarget::budget::Limits::default().problems;
            assert!(problems.len() <= limit + 1, "{} problems: more than {limit} kept and one more", problems.len());
            let last = problems.len() - 1;
            for (i, problem) in problems.into_iter().enumerate() {
                // The budget keeps the first problems and counts the rest in one last line.
                if i == last && problem.file.is_none() && problem.message.starts_with("and ") {
                    assert!(problem.message.contains("more problems"), "an unlocated problem: {problem:?}");
                    continue;
                }
                let file = problem.file.as_deref().unwrap_or_else(|| panic!("problem names no file: {problem:?}"));
                assert!(names.iter().any(|n| n == file), "problem names a file that was not loaded: {problem:?}");
                assert!(problem.document.is_none_or(|d| d >= 1), "documents count from 1: {problem:?}");
                assert!(!problem.message.is_empty(), "problem says nothing: {problem:?}");
            }
            return;
        }
    };

    let mut defined = BTreeSet::new();
    for document in &set.documents {
        assert!(names.contains(&document.file), "document from an unknown file: {}", document.location());
        let key = match &document.content {
            Content::Object(value) => check_object(value),
            Content::CDTarget(target) => {
                assert_eq!(target.metadata.namespace.as_deref(), Some(NAMESPACE), "CDTarget outside the namespace");
                ("cdtarget.io".to_owned(), "CDTarget".to_owned(), document.name().to_owned())
            }
        };
        assert!(defined.insert(key.clone()), "{key:?} accepted twice");
    }

    for target in set.cdtargets() {
        let name = target.metadata.name.as_deref().unwrap_or_default();
        for scaling in [Scaling::Keda(KedaVersion::V2_20_0), Scaling::Keda(KedaVersion::V2_21_0), Scaling::Fixed] {
            let children = render::render(target, &policy, &SecretDigests::new(), scaling)
                .unwrap_or_else(|p| panic!("CDTarget `{name}` was accepted but does not render: {p:?}"));
            check_children(name, &children);
            super::address::assert_egress_within_policy(&children, &policy, "rendered NetworkPolicy");
            // Every child is a name the tenant could not take over by defining it too.
            for (group, kind) in CHILD_KINDS {
                let clash = defined.iter().any(|(g, k, n)| g == group && k == kind && n == name);
                assert!(!clash, "CDTarget `{name}` renders a {group}/{kind} the tenant also defines");
            }
        }
    }
}

/// One accepted plain object; returns its (group, kind, name).
fn check_object(value: &Value) -> (String, String, String) {
    let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    assert_eq!(text("/metadata/namespace"), NAMESPACE, "object outside the tenant namespace: {value}");
    let (api_version, kind, name) = (text("/apiVersion"), text("/kind"), text("/metadata/name"));
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));

    assert!(is_group(group), "apiVersion `{api_version}`: group is not a DNS subdomain");
    assert!(is_version(version), "apiVersion `{api_version}`: version is not a Kubernetes version");
    assert!(is_kind(&kind), "kind `{kind}` is not a Kubernetes kind name");
    assert!(!name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']), "name `{name}`");
    assert!(
        !FORBIDDEN_KINDS.contains(&(group, kind.as_str())),
        "{group}/{kind} is not a tenant's to apply, yet it was accepted"
    );
    assert!(kind != "List" && !(kind.ends_with("List") && value.get("items").is_some()), "a List was accepted");

    let templates = ["/spec/template/metadata/labels", "/spec/jobTemplate/spec/template/metadata/labels"];
    let own = if kind == "Pod" { &["/metadata/labels"][..] } else { &[][..] };
    for pointer in templates.iter().chain(own) {
        let wears = value.pointer(pointer).and_then(Value::as_object).is_some_and(|l| l.contains_key(labels::CDTARGET));
        assert!(!wears, "{kind} `{name}`: a tenant pod wearing `{}` inherits the agents' egress", labels::CDTARGET);
    }
    (group.to_owned(), kind, name)
}

/// The four children of CDTarget `name`: in the namespace, named after it, selecting only its
/// own agent pods.
fn check_children(name: &str, children: &Children) {
    let own = std::collections::BTreeMap::from([(labels::CDTARGET.to_owned(), name.to_owned())]);
    let mut metadata = vec![
        ("NetworkPolicy", &children.network_policy().expect("a NetworkPolicy").metadata),
        ("Deployment", &children.deployment().expect("a Deployment").metadata),
    ];
    if let Some(auth) = children.trigger_authentication() {
        metadata.push(("TriggerAuthentication", &auth.metadata));
    }
    if let Some(scaled) = children.scaled_object() {
        metadata.push(("ScaledObject", &scaled.metadata));
    }
    for (kind, meta) in metadata {
        assert_eq!(meta.namespace.as_deref(), Some(NAMESPACE), "{kind} of `{name}` outside the namespace");
        assert_eq!(meta.name.as_deref(), Some(name), "{kind} of `{name}` named otherwise");
    }
    let policy_selector =
        children.network_policy().expect("a NetworkPolicy").spec.as_ref().and_then(|s| s.pod_selector.as_ref());
    assert_eq!(policy_selector.and_then(|s| s.match_labels.as_ref()), Some(&own), "egress of `{name}` selects others");
    assert!(policy_selector.is_some_and(|s| s.match_expressions.is_none()), "egress of `{name}` selects by expression");
    let spec = children.deployment().expect("a Deployment").spec.as_ref().expect("a Deployment has a spec");
    assert_eq!(spec.selector.match_labels.as_ref(), Some(&own), "Deployment of `{name}` selects others");
    let pod_labels = spec.template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    assert_eq!(
        pod_labels.and_then(|l| l.get(labels::CDTARGET)),
        Some(&name.to_owned()),
        "agents of `{name}` unlabelled"
    );
}

/// DNS-1123 subdomain, or empty (the core group).
fn is_group(group: &str) -> bool {
    group.is_empty()
        || group.len() <= 253
            && group.split('.').all(|label| {
                !label.is_empty()
                    && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
}

/// `v1`, `v1beta2`, `v2alpha1`: a DNS-1035 label (lower-case letters, digits and inner `-`).
fn is_version(version: &str) -> bool {
    // The API server takes any DNS-1035 label as a CRD version (`v1alphax-foo1` included).
    !version.is_empty()
        && version.len() <= 63
        && version.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && version.as_bytes()[0].is_ascii_lowercase()
        && !version.ends_with('-')
}

/// A kind is an identifier of ASCII letters and digits starting with a letter.
fn is_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= 253
        && kind.bytes().all(|b| b.is_ascii_alphanumeric())
        && kind.as_bytes()[0].is_ascii_alphabetic()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(api_version: &str, kind: &str, spec: Value) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": NAMESPACE}, "spec": spec})
    }

    #[test]
    fn the_oracle_accepts_an_ordinary_object() {
        check_object(&object("apps/v1", "Deployment", json!({"template": {"metadata": {"labels": {"app": "x"}}}})));
    }

    #[test]
    #[should_panic(expected = "is not a tenant's to apply")]
    fn the_oracle_refuses_a_cilium_network_policy() {
        check_object(&object("cilium.io/v2", "CiliumNetworkPolicy", json!({})));
    }

    #[test]
    #[should_panic(expected = "inherits the agents' egress")]
    fn the_oracle_refuses_a_job_template_wearing_the_agents_label() {
        let template = json!({"metadata": {"labels": {labels::CDTARGET: "agents"}}});
        check_object(&object("batch/v1", "CronJob", json!({"jobTemplate": {"spec": {"template": template}}})));
    }

    #[test]
    #[should_panic(expected = "is not a Kubernetes kind name")]
    fn the_oracle_refuses_a_kind_that_is_a_path() {
        check_object(&object("v1", "../../secrets", json!({})));
    }
}
