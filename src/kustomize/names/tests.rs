//! The names transformers and the name-reference resolution on literal objects.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::kustomize::comparisons::counted;
use crate::kustomize::resource::{Origin, PreviousId};

fn resource(file: &str, object: Value) -> Resource {
    Resource::from_document(object, Origin::Document { file: file.into(), index: 1, line: 1 })
}

fn config_map(name: &str) -> Resource {
    resource(
        "cm.yaml",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}),
    )
}

fn deployment(name: &str, pod_spec: Value) -> Resource {
    resource(
        "deployment.yaml",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"template": {"spec": pod_spec}}
        }),
    )
}

fn at<'a>(resource: &'a Resource, pointer: &str) -> &'a Value {
    resource.object.pointer(pointer).unwrap_or_else(|| panic!("no {pointer} in {}", resource.object))
}

fn prefixed(mut resources: Vec<Resource>, prefix: &str) -> Vec<Resource> {
    add_prefix_suffix(&mut resources, prefix, "").expect("prefix");
    resources
}

fn previous(name: &str, namespace: Option<&str>) -> PreviousId {
    PreviousId { name: name.into(), namespace: namespace.map(Into::into) }
}

// === namespace ===

#[test]
fn namespaced_objects_move_into_the_namespace_and_remember_where_they_were() {
    let mut cm = config_map("settings");
    cm.object["metadata"]["namespace"] = json!("elsewhere");
    let mut resources = vec![cm, config_map("plain")];
    set_namespace(&mut resources, "tenant").expect("namespace");
    assert_eq!(at(&resources[0], "/metadata/namespace"), "tenant");
    assert_eq!(resources[0].previous, [previous("settings", Some("elsewhere"))]);
    assert_eq!(at(&resources[1], "/metadata/namespace"), "tenant");
    assert_eq!(resources[1].previous, [previous("plain", None)]);
}

#[test]
fn an_empty_namespace_changes_nothing() {
    let mut resources = vec![config_map("settings")];
    set_namespace(&mut resources, "").expect("namespace");
    assert_eq!(resources[0].object.pointer("/metadata/namespace"), None);
    assert!(resources[0].previous.is_empty());
}

#[test]
fn cluster_scoped_kinds_kustomize_knows_get_no_namespace() {
    let role = resource(
        "role.yaml",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"}}),
    );
    let mut resources = vec![role];
    set_namespace(&mut resources, "tenant").expect("namespace");
    assert_eq!(resources[0].object.pointer("/metadata/namespace"), None);
    assert_eq!(resources[0].previous, [previous("reader", None)]);
}

#[test]
fn a_v1_namespace_object_is_renamed_to_the_namespace() {
    let namespace = resource("ns.yaml", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old"}}));
    let mut resources = vec![namespace];
    set_namespace(&mut resources, "tenant").expect("namespace");
    assert_eq!(at(&resources[0], "/metadata/name"), "tenant");
    assert_eq!(resources[0].object.pointer("/metadata/namespace"), None);
}

#[test]
fn an_api_service_gets_its_service_namespace_even_without_a_service() {
    let service = resource(
        "api.yaml",
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.example.com"}}),
    );
    let mut resources = vec![service];
    set_namespace(&mut resources, "tenant").expect("namespace");
    assert_eq!(at(&resources[0], "/spec/service/namespace"), "tenant");
}

#[test]
fn only_role_binding_subjects_named_default_get_the_namespace() {
    let binding = resource(
        "binding.yaml",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "default"},
                {"kind": "ServiceAccount", "name": "app"},
                {"kind": "ServiceAccount", "name": "default", "namespace": "other"},
                {"kind": "User", "name": "default"},
                {"kind": "Group", "name": "devs"}
            ]
        }),
    );
    let mut resources = vec![binding];
    set_namespace(&mut resources, "tenant").expect("namespace");
    let subjects = at(&resources[0], "/subjects");
    assert_eq!(subjects[0]["namespace"], "tenant");
    assert_eq!(subjects[1].get("namespace"), None, "not named default: left for the name references");
    assert_eq!(subjects[2]["namespace"], "tenant", "a subject named default is moved from any namespace");
    assert_eq!(subjects[3]["namespace"], "tenant", "kustomize looks at the name, not the kind");
    assert_eq!(subjects[4].get("namespace"), None);
}

#[test]
fn a_cluster_scoped_kind_kustomize_does_not_know_is_refused_rather_than_namespaced() {
    let policy = resource(
        "policy.yaml",
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"}}),
    );
    let mut resources = vec![policy];
    let problem = set_namespace(&mut resources, "tenant").expect_err("refused");
    assert_eq!(problem.field, "namespace");
    assert!(
        problem.message.contains("ValidatingAdmissionPolicy p (policy.yaml, document 1) is cluster-scoped"),
        "{problem}"
    );
}

#[test]
fn two_objects_that_become_the_same_one_in_the_namespace_are_refused() {
    let mut first = config_map("settings");
    first.object["metadata"]["namespace"] = json!("a");
    let mut second = config_map("settings");
    second.object["metadata"]["namespace"] = json!("b");
    second.origin = Origin::Document { file: "other.yaml".into(), index: 2, line: 5 };
    let mut resources = vec![first, second];
    let problem = set_namespace(&mut resources, "tenant").expect_err("refused");
    assert!(problem.message.contains("ConfigMap tenant/settings (cm.yaml, document 1)"), "{problem}");
    assert!(problem.message.contains("ConfigMap tenant/settings (other.yaml, document 2)"), "{problem}");
}

// === prefix and suffix ===

#[test]
fn prefix_then_suffix_rename_and_each_step_is_remembered() {
    let mut resources = vec![config_map("settings")];
    add_prefix_suffix(&mut resources, "p-", "-s").expect("prefix");
    assert_eq!(resources[0].name(), "p-settings-s");
    assert_eq!(resources[0].previous, [previous("settings", None), previous("p-settings", None)]);
    assert_eq!(resources[0].prefixes, ["p-"]);
    assert_eq!(resources[0].suffixes, ["-s"]);
    add_prefix_suffix(&mut resources, "top-", "").expect("prefix");
    assert_eq!(resources[0].name(), "top-p-settings-s");
    assert_eq!(resources[0].prefixes, ["p-", "top-"]);
    assert_eq!(resources[0].previous.len(), 3);
}

#[test]
fn empty_prefix_and_suffix_change_nothing() {
    let mut resources = vec![config_map("settings")];
    add_prefix_suffix(&mut resources, "", "").expect("prefix");
    assert_eq!(resources[0].name(), "settings");
    assert!(resources[0].previous.is_empty() && resources[0].prefixes.is_empty());
}

#[test]
fn crds_namespaces_and_api_services_keep_their_names_but_cluster_roles_do_not() {
    let objects = [
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com", "widgets.example.com"),
        ("v1", "Namespace", "team", "team"),
        ("apiregistration.k8s.io/v1", "APIService", "v1.example.com", "v1.example.com"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "reader", "p-reader"),
        ("example.com/v1", "APIService", "custom", "p-custom"),
    ];
    let mut resources: Vec<Resource> = objects
        .iter()
        .map(|(v, k, n, _)| resource("x.yaml", json!({"apiVersion": v, "kind": k, "metadata": {"name": n}})))
        .collect();
    add_prefix_suffix(&mut resources, "p-", "").expect("prefix");
    for (resource, (_, kind, _, expected)) in resources.iter().zip(objects) {
        assert_eq!(resource.name(), expected, "{kind}");
    }
    assert!(resources[0].prefixes.is_empty(), "a kept name records no prefix");
}

// === hash suffix ===

fn fake_hash(object: &Value) -> Result<String, String> {
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    Ok(format!("h{}", name.len()))
}

#[test]
fn the_hash_is_computed_over_the_object_as_it_stands_and_appended() {
    let mut generated = config_map("settings");
    generated.needs_hash = true;
    let mut resources = prefixed(vec![generated, config_map("plain")], "p-");
    add_hash_suffixes_with(&mut resources, &fake_hash).expect("hash");
    // "p-settings" is 10 characters: the hash saw the prefixed name.
    assert_eq!(resources[0].name(), "p-settings-h10");
    assert_eq!(resources[0].previous.last(), Some(&previous("p-settings", None)));
    assert!(!resources[0].needs_hash);
    assert_eq!(resources[1].name(), "p-plain");
}

#[test]
fn a_hash_that_cannot_be_computed_is_a_problem_located_at_the_generator() {
    let mut generated = config_map("settings");
    generated.needs_hash = true;
    generated.origin = Origin::Generator { file: "kustomization.yaml".into(), field: "configMapGenerator[0]".into() };
    let mut resources = vec![generated];
    let problem =
        add_hash_suffixes_with(&mut resources, &|_| Err("binaryData is not base64".into())).expect_err("no hash");
    assert_eq!(
        problem.to_string(),
        "kustomization.yaml: configMapGenerator[0]: the content hash of ConfigMap cannot be computed: binaryData is not base64"
    );
}

// === name references ===

#[test]
fn config_map_references_in_a_pod_template_follow_a_prefix() {
    let web = deployment(
        "web",
        json!({
            "containers": [{
                "name": "app",
                "envFrom": [{"configMapRef": {"name": "settings"}}],
                "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}]
            }],
            "initContainers": [{"name": "init", "envFrom": [{"configMapRef": {"name": "settings"}}]}],
            "volumes": [
                {"name": "v", "configMap": {"name": "settings"}},
                {"name": "p", "projected": {"sources": [{"configMap": {"name": "settings"}}, {"configMap": {"name": "absent"}}]}}
            ]
        }),
    );
    let mut resources = prefixed(vec![config_map("settings"), web], "p-");
    fix_references(&mut resources).expect("references");
    let spec = at(&resources[1], "/spec/template/spec");
    assert_eq!(spec["containers"][0]["envFrom"][0]["configMapRef"]["name"], "p-settings");
    assert_eq!(spec["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"]["name"], "p-settings");
    assert_eq!(spec["initContainers"][0]["envFrom"][0]["configMapRef"]["name"], "p-settings");
    assert_eq!(spec["volumes"][0]["configMap"]["name"], "p-settings");
    assert_eq!(spec["volumes"][1]["projected"]["sources"][0]["configMap"]["name"], "p-settings");
    assert_eq!(
        spec["volumes"][1]["projected"]["sources"][1]["configMap"]["name"], "absent",
        "no such object: unchanged"
    );
}

#[test]
fn secret_references_in_a_cron_job_and_a_service_account_follow_a_hash() {
    let mut secret = resource("s.yaml", json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"}}));
    secret.needs_hash = true;
    let job = resource(
        "job.yaml",
        json!({
            "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [{"name": "v", "secret": {"secretName": "pull"}}]
            }}}}}
        }),
    );
    let account = resource(
        "sa.yaml",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}, "imagePullSecrets": [{"name": "pull"}]}),
    );
    let mut resources = vec![secret, job, account];
    add_hash_suffixes_with(&mut resources, &fake_hash).expect("hash");
    fix_references(&mut resources).expect("references");
    let spec = at(&resources[1], "/spec/jobTemplate/spec/template/spec");
    assert_eq!(spec["imagePullSecrets"][0]["name"], "pull-h4");
    assert_eq!(spec["volumes"][0]["secret"]["secretName"], "pull-h4");
    assert_eq!(at(&resources[2], "/imagePullSecrets/0/name"), "pull-h4");
}

#[test]
fn a_reference_finds_an_object_renamed_in_another_base() {
    // base a: the ConfigMap, prefixed a-; base b: the Deployment, prefixed b-; joined above.
    let mut resources = prefixed(vec![config_map("settings")], "a-");
    let web = deployment("web", json!({"volumes": [{"name": "v", "configMap": {"name": "settings"}}]}));
    resources.extend(prefixed(vec![web], "b-"));
    fix_references(&mut resources).expect("references");
    assert_eq!(at(&resources[1], "/spec/template/spec/volumes/0/configMap/name"), "a-settings");
}

#[test]
fn a_reference_to_the_current_name_of_an_object_is_no_reference_to_it() {
    // kustomize matches only names an object had before a rename.
    let mut resources = prefixed(vec![config_map("settings")], "p-");
    let web = deployment("web", json!({"volumes": [{"name": "v", "configMap": {"name": "p-settings"}}]}));
    resources.push(web);
    fix_references(&mut resources).expect("references");
    assert_eq!(at(&resources[1], "/spec/template/spec/volumes/0/configMap/name"), "p-settings");
}

#[test]
fn prefixes_decide_between_objects_once_called_the_same() {
    let mut resources = prefixed(vec![config_map("settings")], "a-");
    resources.extend(prefixed(
        vec![
            config_map("settings"),
            deployment("web", json!({"volumes": [{"name": "v", "configMap": {"name": "settings"}}]})),
        ],
        "b-",
    ));
    fix_references(&mut resources).expect("references");
    assert_eq!(at(&resources[2], "/spec/template/spec/volumes/0/configMap/name"), "b-settings");
}

#[test]
fn a_reference_several_objects_answer_to_alike_is_a_problem_naming_them() {
    let mut resources = prefixed(vec![config_map("settings")], "a-");
    resources.extend(prefixed(vec![config_map("settings")], "b-"));
    resources.push(deployment("web", json!({"volumes": [{"name": "v", "configMap": {"name": "settings"}}]})));
    resources[1].origin = Origin::Document { file: "b/cm.yaml".into(), index: 1, line: 1 };
    let mut resources = prefixed(resources, "top-");
    let problems = fix_references(&mut resources).expect_err("ambiguous");
    assert_eq!(problems.len(), 1, "{problems:?}");
    let text = problems[0].to_string();
    assert!(
        text.starts_with("deployment.yaml:1: spec.template.spec.volumes[0].configMap.name: `settings` could mean ConfigMap top-a-settings"),
        "{text}"
    );
    assert!(text.contains("ConfigMap top-a-settings (cm.yaml, document 1)"), "{text}");
    assert!(text.contains(" or ConfigMap top-b-settings (b/cm.yaml, document 1);"), "{text}");
}

#[test]
fn references_do_not_cross_namespaces() {
    let mut cm = config_map("settings");
    cm.object["metadata"]["namespace"] = json!("a");
    let mut web = deployment("web", json!({"volumes": [{"name": "v", "configMap": {"name": "settings"}}]}));
    web.object["metadata"]["namespace"] = json!("b");
    let mut resources = prefixed(vec![cm, web], "p-");
    fix_references(&mut resources).expect("references");
    assert_eq!(at(&resources[1], "/spec/template/spec/volumes/0/configMap/name"), "settings");
}

#[test]
fn a_service_account_subject_takes_the_accounts_new_name_and_namespace() {
    let account =
        resource("sa.yaml", json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}}));
    let binding = resource(
        "binding.yaml",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "app"},
                {"kind": "ServiceAccount", "name": "app", "namespace": "elsewhere"},
                {"kind": "ServiceAccount", "name": "stranger"}
            ]
        }),
    );
    let mut resources = vec![account, binding];
    set_namespace(&mut resources, "tenant").expect("namespace");
    add_prefix_suffix(&mut resources, "p-", "").expect("prefix");
    fix_references(&mut resources).expect("references");
    let subjects = at(&resources[1], "/subjects");
    assert_eq!(subjects[0], json!({"kind": "ServiceAccount", "name": "p-app", "namespace": "tenant"}));
    assert_eq!(subjects[1], json!({"kind": "ServiceAccount", "name": "app", "namespace": "elsewhere"}));
    assert_eq!(subjects[2], json!({"kind": "ServiceAccount", "name": "stranger"}));
}

fn account_and_binding(account_namespace: Option<&str>, subject_namespace: &str) -> Vec<Resource> {
    let mut account =
        resource("sa.yaml", json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}}));
    if let Some(namespace) = account_namespace {
        account.object["metadata"]["namespace"] = json!(namespace);
    }
    let binding = resource(
        "binding.yaml",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": subject_namespace}]
        }),
    );
    vec![account, binding]
}

#[test]
fn a_subject_naming_the_accounts_original_namespace_follows_it_into_the_overlays() {
    let mut resources = account_and_binding(Some("team-a"), "team-a");
    set_namespace(&mut resources, "tenant").expect("namespace");
    add_prefix_suffix(&mut resources, "p-", "").expect("prefix");
    fix_references(&mut resources).expect("references");
    assert_eq!(
        at(&resources[1], "/subjects/0"),
        &json!({"kind": "ServiceAccount", "name": "p-app", "namespace": "tenant"})
    );
}

#[test]
fn a_subject_naming_the_namespace_a_base_gave_the_account_is_left_as_written() {
    // The account had no namespace in its file; the base put it in team-a, the overlay in tenant:
    // its original namespace is `default`, so kustomize does not take the subject for it.
    let mut resources = account_and_binding(None, "team-a");
    set_namespace(&mut resources, "team-a").expect("namespace");
    set_namespace(&mut resources, "tenant").expect("namespace");
    add_prefix_suffix(&mut resources, "p-", "").expect("prefix");
    fix_references(&mut resources).expect("references");
    assert_eq!(
        at(&resources[1], "/subjects/0"),
        &json!({"kind": "ServiceAccount", "name": "app", "namespace": "team-a"})
    );
}

#[test]
fn role_ref_follows_the_kind_it_names() {
    let role = |kind: &str| {
        resource(
            "r.yaml",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": "reader"}}),
        )
    };
    let binding = |name: &str, kind: &str| {
        resource(
            "b.yaml",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": "reader"}
            }),
        )
    };
    let mut resources = prefixed(vec![role("Role")], "ns-");
    resources.extend(prefixed(vec![role("ClusterRole")], "cluster-"));
    resources.extend([binding("to-role", "Role"), binding("to-cluster-role", "ClusterRole")]);
    fix_references(&mut resources).expect("references");
    assert_eq!(at(&resources[2], "/roleRef/name"), "ns-reader");
    assert_eq!(at(&resources[3], "/roleRef/name"), "cluster-reader");
}

#[test]
fn resource_names_of_role_rules_are_renamed_element_by_element() {
    let role = resource(
        "role.yaml",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings", "other"], "verbs": ["get"]}]
        }),
    );
    let mut resources = prefixed(vec![config_map("settings"), role], "p-");
    fix_references(&mut resources).expect("references");
    assert_eq!(at(&resources[1], "/rules/0/resourceNames"), &json!(["p-settings", "other"]));
}

#[test]
fn services_persistent_volume_claims_and_scale_targets_follow_their_objects() {
    let service = resource("svc.yaml", json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"}}));
    let claim = resource(
        "pvc.yaml",
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"}}),
    );
    let set = resource(
        "sts.yaml",
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"serviceName": "db", "template": {"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}}
        }),
    );
    let scaler = resource(
        "hpa.yaml",
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "db"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db"}}
        }),
    );
    let ingress = resource(
        "ing.yaml",
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
            "spec": {"rules": [{"http": {"paths": [{"path": "/", "backend": {"service": {"name": "db", "port": {"number": 80}}}}]}}]}
        }),
    );
    let mut resources = prefixed(vec![service, claim, set, scaler, ingress], "p-");
    fix_references(&mut resources).expect("references");
    assert_eq!(at(&resources[2], "/spec/serviceName"), "p-db");
    assert_eq!(at(&resources[2], "/spec/template/spec/volumes/0/persistentVolumeClaim/claimName"), "p-data");
    assert_eq!(at(&resources[3], "/spec/scaleTargetRef/name"), "p-db");
    assert_eq!(at(&resources[4], "/spec/rules/0/http/paths/0/backend/service/name"), "p-db");
}

#[test]
fn a_reference_map_without_a_name_is_a_located_problem() {
    let binding = resource(
        "binding.yaml",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "namespace": "x"}]
        }),
    );
    let mut resources = vec![binding];
    let problems = fix_references(&mut resources).expect_err("no name");
    assert_eq!(problems[0].to_string(), "binding.yaml:1: subjects[0]: a reference needs a `name`");
}

#[test]
fn a_scalar_where_a_reference_path_needs_a_map_is_a_located_problem() {
    let mut resources = vec![deployment("web", json!({"volumes": ["not-a-volume"]}))];
    let problems = fix_references(&mut resources).expect_err("scalar");
    assert!(
        problems
            .iter()
            .any(|p| p.to_string() == "deployment.yaml:1: spec.template.spec.volumes[0]: expected a map or a list"),
        "{problems:?}"
    );
}

#[test]
fn answers_to_any_name_the_object_ever_had() {
    let resources = prefixed(vec![config_map("settings")], "p-");
    assert!(answers_to(&resources[0], "p-settings"));
    assert!(answers_to(&resources[0], "settings"));
    assert!(!answers_to(&resources[0], "other"));
}

#[test]
fn ten_thousand_objects_resolve_through_the_index() {
    // Prints the times for 1,000 and 10,000 pairs (to see the growth); the property checked is
    // the result (timing assertions are not tests).
    ten_times_more(1_000);
    ten_times_more(10_000);
}

fn ten_times_more(count: usize) {
    let mut resources = Vec::with_capacity(2 * count);
    for i in 0..count {
        resources.push(config_map(&format!("settings-{i}")));
        resources.push(deployment(
            &format!("web-{i}"),
            json!({"volumes": [{"name": "v", "configMap": {"name": format!("settings-{i}")}}]}),
        ));
    }
    let mut resources = prefixed(resources, "p-");
    let started = std::time::Instant::now();
    fix_references(&mut resources).expect("references");
    println!("fix_references over {} objects: {:?}", resources.len(), started.elapsed());
    for i in [0, count / 2, count - 1] {
        assert_eq!(
            at(&resources[2 * i + 1], "/spec/template/spec/volumes/0/configMap/name"),
            &json!(format!("p-settings-{i}"))
        );
    }
}

// === the indexed resolution against the scan it replaced ===

/// `resolve` as it was before the namespace index (with today's message): every object of the
/// kind once so called, filtered one by one.
fn resolve_before(
    index: &Index,
    referrer: &Referrer<'_>,
    target: Gvk,
    role_ref: bool,
    old: &str,
    shape: &Shape,
) -> Result<Option<Referral>, String> {
    let Some(named) = index.by_earlier_name.get(&key(target.kind, old, None)) else {
        return Ok(None);
    };
    let by_original = match shape {
        Shape::Map { namespace: Some(namespace) } => {
            Some((namespace.as_str(), seen_in_original_namespace_before(index, referrer, namespace)))
        }
        _ => None,
    };
    let mut candidates: Vec<&Candidate> = named
        .iter()
        .map(|&i| &index.candidates[i])
        .filter(|c| referrer.may_refer_to(c))
        .filter(|c| match by_original {
            None => true,
            Some((namespace, true)) => c.original_effective.as_deref() == Some(namespace),
            Some((namespace, false)) => c.effective.as_deref() == Some(namespace),
        })
        .filter(|c| target.selects(&c.group, &c.version, &c.kind))
        .filter(|c| {
            let of_role_ref = |(group, kind): &(String, String)| {
                (group.is_empty() || *group == c.group) && (kind.is_empty() || *kind == c.kind)
            };
            !role_ref || referrer.role_ref.as_ref().is_none_or(of_role_ref)
        })
        .filter(|c| {
            referrer.me.cluster_scoped()
                || c.cluster_scoped()
                || c.kind == "ServiceAccount"
                || c.effective == referrer.me.effective
        })
        .collect();
    if candidates.len() > 1 {
        candidates.retain(|c| affixes_match(referrer.me, c, true));
        if candidates.len() > 1 {
            candidates.retain(|c| affixes_match(referrer.me, c, false));
        }
    }
    let Some(first) = candidates.first() else { return Ok(None) };
    let identical = candidates
        .iter()
        .all(|c| c.name == first.name && (matches!(shape, Shape::Scalar) || c.namespace == first.namespace));
    if identical {
        return Ok(Some((first.name.clone(), first.namespace.clone())));
    }
    let mut named: Vec<String> = candidates.iter().take(MAX_NAMED).map(|c| c.described.clone()).collect();
    if candidates.len() > MAX_NAMED {
        named.push(format!("{} others", candidates.len() - MAX_NAMED));
    }
    let (last, others) = named.split_last().expect("two candidates");
    Err(format!(
        "`{old}` could mean {} or {last}; kustomize refuses this too: give them different names, or write \
         the reference where the object it means is (under the same namePrefix and nameSuffix)",
        others.join(", ")
    ))
}

/// `seen_in_original_namespace` as it was: a scan of the namespaces the objects are in now.
fn seen_in_original_namespace_before(index: &Index, referrer: &Referrer<'_>, namespace: &str) -> bool {
    index.namespaces_by_original.get(namespace).is_some_and(|now| {
        now.iter().any(|written| {
            referrer.me.cluster_scoped()
                || written.as_deref().unwrap_or("default") == referrer.me.effective.as_deref().unwrap_or_default()
                || written.as_ref().is_some_and(|n| referrer.subject_namespaces.contains(n))
        })
    })
}

const NAMES: [&str; 2] = ["a", "b"];
const NAMESPACES: [Option<&str>; 4] = [None, Some("x"), Some("y"), Some("default")];

/// One object of a generated build: its kind, name and namespace, and (for the kinds that refer)
/// what it names.
fn object(kind: u8, name: usize, namespace: usize, refers: Vec<(usize, usize)>) -> Resource {
    let rbac = "rbac.authorization.k8s.io/v1";
    let (api_version, kind) = match kind % 7 {
        0 => ("v1", "ConfigMap"),
        1 => ("v1", "ServiceAccount"),
        2 => (rbac, "Role"),
        3 => (rbac, "ClusterRole"),
        4 => (rbac, "RoleBinding"),
        5 => (rbac, "ClusterRoleBinding"),
        _ => ("apps/v1", "Deployment"),
    };
    let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": NAMES[name % 2]}});
    if let Some(namespace) = NAMESPACES[namespace % 4] {
        object["metadata"]["namespace"] = json!(namespace);
    }
    let subjects: Vec<Value> = refers
        .iter()
        .map(|&(name, namespace)| {
            let mut subject = json!({"kind": "ServiceAccount", "name": NAMES[name % 2]});
            if let Some(namespace) = NAMESPACES[namespace % 4] {
                subject["namespace"] = json!(namespace);
            }
            subject
        })
        .collect();
    let role = if refers.len().is_multiple_of(2) { "Role" } else { "ClusterRole" };
    match kind {
        "RoleBinding" | "ClusterRoleBinding" => {
            object["subjects"] = Value::Array(subjects);
            object["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": "a"});
        }
        "Deployment" => {
            let volumes: Vec<Value> =
                refers.iter().map(|&(name, _)| json!({"name": "v", "configMap": {"name": NAMES[name % 2]}})).collect();
            object["spec"] = json!({"template": {"spec": {"serviceAccountName": "a", "volumes": volumes}}});
        }
        "ClusterRole" | "Role" => {
            let names: Vec<&str> = refers.iter().map(|&(name, _)| NAMES[name % 2]).collect();
            object["rules"] = json!([{"resourceNames": names}]);
        }
        _ => {}
    }
    resource("gen.yaml", object)
}

/// Bases of a few objects, each maybe moved into a namespace and prefixed or suffixed, then put
/// together, maybe under a top prefix: objects once called alike, across namespaces.
fn build() -> impl Strategy<Value = Vec<Resource>> {
    let object = (0..7u8, 0..2usize, 0..4usize, prop::collection::vec((0..2usize, 0..4usize), 0..3))
        .prop_map(|(kind, name, namespace, refers)| object(kind, name, namespace, refers));
    let base = (prop::collection::vec(object, 1..5), 0..4usize, 0..3usize, any::<bool>());
    (prop::collection::vec(base, 1..4), any::<bool>()).prop_map(|(bases, top)| {
        let mut all = Vec::new();
        for (i, (mut objects, namespace, affix, suffix)) in bases.into_iter().enumerate() {
            if let Some(namespace) = NAMESPACES[namespace] {
                // Objects that collide are refused by the build; the index does not care.
                let _ = set_namespace(&mut objects, namespace);
            }
            let affix = ["", "p-", &format!("b{i}-")][affix].to_owned();
            let (prefix, suffix) = if suffix { ("", affix.as_str()) } else { (affix.as_str(), "") };
            add_prefix_suffix(&mut objects, prefix, suffix).expect("prefix");
            all.extend(objects);
        }
        if top {
            add_prefix_suffix(&mut all, "top-", "").expect("prefix");
        }
        all
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_indexed_resolution_gives_what_the_scan_gave(resources in build()) {
        let index = Index::new(&resources);
        let mut from_cluster = FromCluster::default();
        let shapes = || {
            let maps = NAMESPACES.iter().map(|n| Shape::Map { namespace: n.map(str::to_owned) });
            std::iter::once(Shape::Scalar).chain(maps).chain([Shape::Map { namespace: Some("z".into()) }])
        };
        for (at, resource) in resources.iter().enumerate() {
            let Ok(referrer) = referrer(resource, &index.candidates[at]) else { continue };
            for reference in default_name_references() {
                for role_ref in [false, true] {
                    for old in NAMES {
                        for shape in shapes() {
                            let indexed = from_cluster.resolve(&index, &referrer, reference.target, role_ref, old, &shape);
                            let before = resolve_before(&index, &referrer, reference.target, role_ref, old, &shape);
                            prop_assert_eq!(indexed, before);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_reference_meaning_many_objects_names_a_few_and_counts_the_others() {
    let mut resources = Vec::new();
    for i in 0..20 {
        resources.extend(prefixed(vec![config_map("settings")], &format!("b{i}-")));
    }
    resources.push(deployment("web", json!({"volumes": [{"name": "v", "configMap": {"name": "settings"}}]})));
    let mut resources = prefixed(resources, "top-");
    let problems = fix_references(&mut resources).expect_err("ambiguous");
    let text = problems[0].to_string();
    assert!(text.contains("ConfigMap top-b0-settings (cm.yaml, document 1), "), "{text}");
    assert!(text.contains("ConfigMap top-b7-settings (cm.yaml, document 1) or 12 others;"), "{text}");
    assert!(!text.contains("top-b8-settings"), "{text}");
}

// === the attacker: one name in thousands of namespaces ===

/// `count` namespaces, each with a ConfigMap `settings` and a Deployment naming it, all prefixed
/// `p-`: every reference has `count` objects once called so, one in its namespace.
fn settings_in_every_namespace(count: usize) -> Vec<Resource> {
    let mut resources = Vec::with_capacity(2 * count);
    for i in 0..count {
        let namespace = json!(format!("ns-{i}"));
        let mut cm = config_map("settings");
        cm.object["metadata"]["namespace"] = namespace.clone();
        let mut web = deployment("web", json!({"volumes": [{"name": "v", "configMap": {"name": "settings"}}]}));
        web.object["metadata"]["namespace"] = namespace;
        resources.extend([cm, web]);
    }
    prefixed(resources, "p-")
}

#[test]
fn attacker_one_name_in_five_thousand_namespaces_costs_a_lookup_per_reference() {
    let count = 5_000;
    let mut resources = settings_in_every_namespace(count);
    let (fixed, work) = counted(|| fix_references(&mut resources));
    fixed.expect("references");
    for i in [0, count / 2, count - 1] {
        assert_eq!(at(&resources[2 * i + 1], "/spec/template/spec/volumes/0/configMap/name"), "p-settings");
    }
    // A few hashes per object and per reference; the scan looked at all 5,000 for each of them.
    assert!(work <= 25 * resources.len(), "{work} comparisons for {count} references");
}

#[test]
fn attacker_cluster_roles_naming_one_name_of_five_thousand_namespaces_cost_those_objects_once() {
    let count = 5_000;
    let mut resources = settings_in_every_namespace(count);
    for i in 0..count {
        resources.push(resource(
            "role.yaml",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": format!("reader-{i}")},
                   "rules": [{"resourceNames": ["settings", "settings"]}]}),
        ));
    }
    let mut resources = prefixed(resources, "q-");
    let (fixed, work) = counted(|| fix_references(&mut resources));
    fixed.expect("references");
    // Every ClusterRole sees every namespace: all the candidates are `q-p-settings` alike.
    assert_eq!(at(&resources[3 * count - 1], "/rules/0/resourceNames"), &json!(["q-p-settings", "q-p-settings"]));
    assert!(work <= 25 * resources.len(), "{work} comparisons for {} references", 2 * count);
}

#[test]
fn attacker_a_binding_naming_five_thousand_accounts_across_namespaces_costs_a_lookup_per_subject() {
    let count = 5_000;
    let mut resources: Vec<Resource> = (0..count)
        .map(|i| {
            resource(
                "sa.yaml",
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "app", "namespace": format!("ns-{i}")}}),
            )
        })
        .collect();
    let subjects: Vec<Value> =
        (0..count).map(|i| json!({"kind": "ServiceAccount", "name": "app", "namespace": format!("ns-{i}")})).collect();
    resources.push(resource(
        "binding.yaml",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "b", "namespace": "ns-0"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": subjects}),
    ));
    let mut resources = prefixed(resources, "p-");
    let (fixed, work) = counted(|| fix_references(&mut resources));
    fixed.expect("references");
    let subjects = at(&resources[count], "/subjects");
    assert_eq!(
        subjects[count - 1],
        json!({"kind": "ServiceAccount", "name": "p-app", "namespace": format!("ns-{}", count - 1)})
    );
    assert!(work <= 25 * resources.len(), "{work} comparisons for {count} subjects");
}
