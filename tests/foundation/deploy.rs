//! The installation (`deploy/`, without the generated CRDs, which `crds.rs` covers) and the
//! platform examples (`examples/platform/`): they parse, agree with the types and the policy,
//! and keep the controller's privileges and pod hardening where they were reviewed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cdtarget::api::TenantRepository;
use cdtarget::api::tenant_repository::WebhookType;
use cdtarget::controller::tenant_repository::credentials_from_secret;
use cdtarget::policy;
use k8s_openapi::ByteString;
use serde_json::Value;

use super::support::project_dir;

/// Every `.yaml`/`.yml` file under `dir`, recursively, skipping the directories named in `skip`.
fn yaml_files(dir: &Path, skip: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if path.is_dir() {
            if !skip.contains(&name.as_str()) {
                files.extend(yaml_files(&path, skip));
            }
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            files.push(path);
        }
    }
    files
}

/// The documents of one file under the project root.
fn documents(relative: &str) -> Vec<Value> {
    let path = project_dir().join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    cdtarget::yaml::parse_documents(&text)
        .unwrap_or_else(|e| panic!("{relative}: line {:?}: {}", e.line, e.message))
        .into_iter()
        .map(|d| d.value)
        .collect()
}

/// The one document of `kind` named `name` in `relative`.
fn find(relative: &str, kind: &str, name: &str) -> Value {
    let found: Vec<Value> = documents(relative)
        .into_iter()
        .filter(|d| d["kind"] == kind && d.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
        .collect();
    assert_eq!(found.len(), 1, "{relative}: expected exactly one {kind} {name}");
    found.into_iter().next().unwrap()
}

fn strings(value: &Value) -> Vec<&str> {
    value.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// Files checked by [`every_deploy_and_platform_example_file_parses`].
fn checked_files() -> Vec<PathBuf> {
    let root = project_dir();
    let mut files = yaml_files(&root.join("deploy"), &["crds"]);
    files.extend(yaml_files(&root.join("examples/platform"), &[]));
    files
}

#[test]
fn every_deploy_and_platform_example_file_parses() {
    let files = checked_files();
    assert!(files.len() >= 9, "expected the installation and the platform examples, found {files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let documents = cdtarget::yaml::parse_documents(&text)
            .unwrap_or_else(|e| panic!("{}: line {:?}: {}", path.display(), e.line, e.message));
        assert!(!documents.is_empty(), "{} holds no document", path.display());
        // policy.yaml is a bare policy document; everything else is a Kubernetes object.
        if path.file_name().is_some_and(|n| n == "policy.yaml") {
            continue;
        }
        for document in documents {
            let api_version = document.value.get("apiVersion").and_then(Value::as_str);
            let kind = document.value.get("kind").and_then(Value::as_str);
            assert!(
                api_version.is_some() && kind.is_some(),
                "{}: document {} (line {}) has no apiVersion/kind",
                path.display(),
                document.index,
                document.line
            );
        }
    }
}

#[test]
fn every_kustomization_lists_every_file_of_its_directory() {
    // deploy/ itself (with crds/), and each directory of deploy/ with a kustomization of its own
    // (the opt-in components, monitoring/): every YAML file is a resource or a patch of it.
    let root = project_dir().join("deploy");
    let mut directories = vec![root.clone()];
    let components = root.join("components");
    directories.push(root.join("monitoring"));
    directories.extend(std::fs::read_dir(&components).unwrap().map(|entry| entry.unwrap().path()));
    for dir in &directories {
        let relative_dir = dir.strip_prefix(project_dir()).unwrap().to_str().unwrap().to_owned();
        let kustomization = &documents(&format!("{relative_dir}/kustomization.yaml"))[0];
        let mut listed: Vec<&str> = strings(&kustomization["resources"]);
        listed.extend(kustomization["patches"].as_array().into_iter().flatten().filter_map(|p| p["path"].as_str()));
        let own = if *dir == root { vec!["components", "monitoring"] } else { vec![] };
        for path in yaml_files(dir, &own) {
            let relative = path.strip_prefix(dir).unwrap().to_str().unwrap().to_owned();
            if relative == "kustomization.yaml" {
                continue;
            }
            assert!(listed.contains(&relative.as_str()), "{relative_dir}/kustomization.yaml does not list {relative}");
        }
        for entry in &listed {
            assert!(dir.join(entry).exists(), "{relative_dir}/kustomization.yaml lists {entry}, which does not exist");
        }
    }
    // Each opt-in component is used by the example overlay, which a test compares with the chart.
    let overlay = &documents("examples/platform/overlay/kustomization.yaml")[0];
    let used = strings(&overlay["components"]);
    for component in std::fs::read_dir(&components).unwrap() {
        let name = component.unwrap().file_name().into_string().unwrap();
        let path = format!("../../../deploy/components/{name}");
        assert!(used.contains(&path.as_str()), "examples/platform/overlay does not use {path}");
    }
}

#[test]
fn policy_config_map_holds_the_example_policy() {
    let file = "examples/platform/policy.yaml";
    let text = std::fs::read_to_string(project_dir().join(file)).unwrap();
    let expected = policy::parse(&text, file).expect("the example policy is valid");

    let config_map = find("examples/platform/policy-configmap.yaml", "ConfigMap", "cdtarget-policy");
    assert_eq!(config_map.pointer("/metadata/namespace"), Some(&Value::from("cdtarget-system")));
    let from_config_map = policy::from_config_map(&config_map).expect("the policy ConfigMap is valid");
    assert_eq!(from_config_map, expected, "policy-configmap.yaml and policy.yaml describe different policies");

    // The same text, so that comments and order do not drift either.
    assert_eq!(
        config_map.pointer("/data/policy.yaml").and_then(Value::as_str),
        Some(text.as_str()),
        "data[policy.yaml] of policy-configmap.yaml is not policy.yaml verbatim"
    );

    // `policy::parse` accepts the ConfigMap file itself too (as `cdtarget render --policy` does).
    let config_map_text =
        std::fs::read_to_string(project_dir().join("examples/platform/policy-configmap.yaml")).unwrap();
    assert_eq!(policy::parse(&config_map_text, "policy-configmap.yaml").unwrap(), expected);
}

#[test]
fn tenant_repository_example_is_a_tenant_repository() {
    let value = find("examples/platform/tenantrepository.yaml", "TenantRepository", "team-payments");
    let repo: TenantRepository = serde_json::from_value(value).expect("deserializes into TenantRepository");
    assert_eq!(repo.metadata.namespace.as_deref(), Some("cdtarget-system"));
    let spec = &repo.spec;
    assert!(spec.url.starts_with("ssh://"), "{}", spec.url);
    assert_eq!(spec.git_ref.as_ref().and_then(|r| r.branch.as_deref()), Some("main"));
    assert_eq!(spec.path.as_deref(), Some("deploy"));
    assert_eq!(spec.interval.as_deref(), Some("5m"));
    assert_eq!(spec.target_namespace, "team-payments");
    assert_eq!(spec.service_account_name, "cdtarget-tenant");
    assert!(spec.prune);
    assert_eq!(
        cdtarget::controller::tenant_repository::wait::timeout_of(&repo),
        Ok(std::time::Duration::from_secs(300))
    );
    let webhook = spec.webhook.as_ref().expect("webhook");
    assert_eq!(webhook.kind, WebhookType::Gitlab);
    assert!(spec.gitlab.is_some());

    // The Secrets it names are templated, with the keys the controller reads.
    let secrets = "examples/platform/secrets.template.yaml";
    let git = find(secrets, "Secret", &spec.secret_ref.as_ref().expect("secretRef").name);
    let (credentials, ca) = credentials_from_secret(&string_data(&git)).expect("the SSH template is accepted");
    assert!(credentials != cdtarget::source::Credentials::None, "the SSH template has credentials");
    assert!(ca.is_none());
    let hook = find(secrets, "Secret", &webhook.secret_ref.name);
    assert!(hook.pointer("/stringData/token").and_then(Value::as_str).is_some_and(|t| !t.is_empty()));
    // The webhook receiver serves the example as it stands.
    let served = cdtarget::webhook::Registration::from_parts(&repo, Some(&string_data(&hook)));
    let served = served.expect("served").expect("has a webhook");
    assert!(served.warnings().is_empty(), "{:?}", served.warnings());

    let https = find(secrets, "Secret", "team-payments-git-https");
    let (_, ca) = credentials_from_secret(&string_data(&https)).expect("the HTTPS template is accepted");
    assert!(ca.is_some(), "the HTTPS template shows ca.crt");

    // The impersonated ServiceAccount is the one onboarded in tenant-rbac.yaml.
    let account = find("examples/platform/tenant-rbac.yaml", "ServiceAccount", &spec.service_account_name);
    assert_eq!(account.pointer("/metadata/namespace").and_then(Value::as_str), Some(spec.target_namespace.as_str()));
}

/// A Secret template's `stringData` as the `data` the controller reads.
fn string_data(secret: &Value) -> BTreeMap<String, ByteString> {
    secret["stringData"]
        .as_object()
        .expect("stringData")
        .iter()
        .map(|(k, v)| (k.clone(), ByteString(v.as_str().unwrap().as_bytes().to_vec())))
        .collect()
}

/// Every rule of every Role and ClusterRole in the given files.
fn rules(files: &[&str]) -> Vec<(String, Value)> {
    let mut rules = Vec::new();
    for file in files {
        for document in documents(file) {
            if document["kind"] == "Role" || document["kind"] == "ClusterRole" {
                let name = format!("{file}: {} {}", document["kind"], document["metadata"]["name"]);
                for rule in document["rules"].as_array().cloned().unwrap_or_default() {
                    rules.push((name.clone(), rule));
                }
            }
        }
    }
    rules
}

#[test]
fn controller_rbac_impersonates_only_service_accounts_and_has_no_wildcards() {
    let all = rules(&["deploy/rbac.yaml", "examples/platform/tenant-rbac.yaml"]);
    assert!(!all.is_empty());
    for (role, rule) in &all {
        for field in ["apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"] {
            assert!(!strings(&rule[field]).contains(&"*"), "{role} has `*` in {field}: {rule}");
        }
        let verbs = strings(&rule["verbs"]);
        for verb in ["escalate", "bind"] {
            assert!(!verbs.contains(&verb), "{role} grants {verb}: {rule}");
        }
        if verbs.contains(&"impersonate") {
            assert_eq!(verbs, ["impersonate"], "{role}: impersonate shares a rule with other verbs: {rule}");
            assert_eq!(strings(&rule["apiGroups"]), [""], "{role}: {rule}");
            assert_eq!(
                strings(&rule["resources"]),
                ["serviceaccounts"],
                "{role}: impersonation beyond ServiceAccounts: {rule}"
            );
        }
    }

    let cluster_role = find("deploy/rbac.yaml", "ClusterRole", "cdtarget-controller");
    let impersonating: Vec<&Value> = cluster_role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| strings(&r["verbs"]).contains(&"impersonate"))
        .collect();
    assert_eq!(impersonating.len(), 1, "the controller impersonates tenant ServiceAccounts");

    // Secrets and ConfigMaps are only read.
    for rule in cluster_role["rules"].as_array().unwrap() {
        let resources = strings(&rule["resources"]);
        if resources.contains(&"secrets") || resources.contains(&"configmaps") {
            assert_eq!(strings(&rule["verbs"]), ["get", "list", "watch"], "{rule}");
        }
    }

    // The GitLab syncer's finalizer: the registration object is patched (never cdtargets).
    let verbs_on = |rules: &[Value], resource: &str| -> Vec<String> {
        rules
            .iter()
            .filter(|r| strings(&r["resources"]).contains(&resource))
            .flat_map(|r| strings(&r["verbs"]).into_iter().map(str::to_owned).collect::<Vec<_>>())
            .collect()
    };
    let cluster_rules = cluster_role["rules"].as_array().unwrap();
    assert!(!verbs_on(cluster_rules, "cdtargets").iter().any(|v| v == "patch"));

    // The binding names the controller's ServiceAccount.
    let binding = find("deploy/rbac.yaml", "ClusterRoleBinding", "cdtarget-controller");
    assert_eq!(binding.pointer("/roleRef/name"), Some(&Value::from("cdtarget-controller")));
    let subject = &binding["subjects"][0];
    assert_eq!((subject["kind"].as_str(), subject["name"].as_str()), (Some("ServiceAccount"), Some("cdtarget")));
    assert_eq!(subject["namespace"].as_str(), Some("cdtarget-system"));
    find("deploy/serviceaccount.yaml", "ServiceAccount", "cdtarget");

    // Registrations, leases and the policy ConfigMap only in the controller's namespace.
    let role = find("deploy/rbac.yaml", "Role", "cdtarget-controller");
    assert_eq!(role.pointer("/metadata/namespace"), Some(&Value::from("cdtarget-system")));
    let role_rules = role["rules"].as_array().unwrap();
    // Key pair Secrets are created (and rotated) only in the controller's namespace.
    let secret_verbs = verbs_on(role_rules, "secrets");
    assert_eq!(secret_verbs, ["create", "patch"], "{secret_verbs:?}");
    // Registrations live only there: read, and their finalizer patched by the GitLab syncer.
    let registration_verbs = verbs_on(role_rules, "tenantrepositories");
    assert_eq!(registration_verbs, ["list", "watch", "patch"], "{registration_verbs:?}");
    for namespaced in ["leases", "configmaps", "tenantrepositories", "tenantrepositories/status"] {
        assert!(role_rules.iter().any(|r| strings(&r["resources"]).contains(&namespaced)), "{namespaced}");
        let cluster_wide =
            cluster_role["rules"].as_array().unwrap().iter().any(|r| strings(&r["resources"]).contains(&namespaced));
        assert!(!cluster_wide, "{namespaced} belong in the namespaced Role");
    }
    let role_binding = find("deploy/rbac.yaml", "RoleBinding", "cdtarget-controller");
    assert_eq!(role_binding.pointer("/roleRef/kind"), Some(&Value::from("Role")));
    assert_eq!(role_binding["subjects"], binding["subjects"]);
}

#[test]
fn tenant_role_grants_no_network_policies() {
    for (role, rule) in rules(&["examples/platform/tenant-rbac.yaml"]) {
        let resources = strings(&rule["resources"]);
        for forbidden in ["networkpolicies", "roles", "rolebindings", "clusterroles", "clusterrolebindings"] {
            assert!(!resources.contains(&forbidden), "{role} lets tenants write {forbidden}: {rule}");
        }
        assert!(!strings(&rule["apiGroups"]).contains(&"networking.k8s.io"), "{role}: {rule}");
        assert!(!strings(&rule["apiGroups"]).contains(&"rbac.authorization.k8s.io"), "{role}: {rule}");
    }
    let role = find("examples/platform/tenant-rbac.yaml", "Role", "cdtarget-tenant");
    let cdtargets = role["rules"].as_array().unwrap().iter().any(|r| strings(&r["resources"]).contains(&"cdtargets"));
    assert!(cdtargets, "tenants declare CDTargets");
}

#[test]
fn controller_runs_non_root_with_a_read_only_root_filesystem() {
    let deployment = find("deploy/deployment.yaml", "Deployment", "cdtarget");
    assert_eq!(deployment.pointer("/metadata/namespace"), Some(&Value::from("cdtarget-system")));
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "cdtarget");
    assert_eq!(pod.pointer("/securityContext/runAsNonRoot"), Some(&Value::Bool(true)));
    assert_eq!(pod.pointer("/securityContext/seccompProfile/type"), Some(&Value::from("RuntimeDefault")));

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"]);
    assert!(security["capabilities"].get("add").is_none());
    assert_eq!(strings(&container["args"]), ["controller"]);
    // The image is named by deploy/kustomization.yaml's `images:` transformer, in one place.
    assert_eq!(container["image"], "cdtarget");

    let env = container["env"].as_array().unwrap();
    let pod_namespace = env.iter().find(|e| e["name"] == "POD_NAMESPACE").expect("POD_NAMESPACE");
    assert_eq!(pod_namespace.pointer("/valueFrom/fieldRef/fieldPath"), Some(&Value::from("metadata.namespace")));

    // The writable paths are emptyDirs.
    let volumes = pod["volumes"].as_array().unwrap();
    for path in ["/var/cache/cdtarget", "/tmp"] {
        let mount = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == path)
            .unwrap_or_else(|| panic!("nothing mounted at {path}"));
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]).expect("the mounted volume");
        assert!(volume.get("emptyDir").is_some(), "{path} is not an emptyDir: {volume}");
    }

    // Probes and ports.
    let port_of = |name: &str| -> i64 {
        let ports = container["ports"].as_array().unwrap();
        ports.iter().find(|p| p["name"] == name).and_then(|p| p["containerPort"].as_i64()).unwrap()
    };
    assert_eq!(port_of("http"), 8080);
    assert_eq!(port_of("webhook"), 9292);
    assert_eq!(container.pointer("/livenessProbe/httpGet/path"), Some(&Value::from("/healthz")));
    assert_eq!(container.pointer("/readinessProbe/httpGet/path"), Some(&Value::from("/readyz")));

    let service = find("deploy/deployment.yaml", "Service", "cdtarget");
    let service_ports: Vec<i64> =
        service["spec"]["ports"].as_array().unwrap().iter().filter_map(|p| p["port"].as_i64()).collect();
    assert_eq!(service_ports, [9292, 8080]);
    assert_eq!(service["spec"]["selector"], deployment["spec"]["selector"]["matchLabels"]);
}

#[test]
fn the_example_tenant_namespace_refuses_service_account_token_secrets_and_pods_as_the_apply_identity() {
    let file = "examples/platform/tenant-rbac.yaml";
    let namespace = find(file, "Namespace", "team-payments");
    assert!(namespace.pointer("/metadata/labels/cdtarget.io~1tenant").is_some(), "the policies select by this label");
    let account = find(file, "ServiceAccount", "cdtarget-tenant");
    assert_eq!(account["automountServiceAccountToken"], false);

    let policy = |name: &str, resource: &str, operation: &str| -> String {
        let policy = find(file, "ValidatingAdmissionPolicy", name);
        let constraints = &policy["spec"]["matchConstraints"];
        let selector = &constraints["namespaceSelector"]["matchExpressions"][0];
        assert_eq!(
            (selector["key"].as_str(), selector["operator"].as_str()),
            (Some("cdtarget.io/tenant"), Some("Exists"))
        );
        let rule = &constraints["resourceRules"][0];
        assert_eq!(strings(&rule["resources"]), [resource], "{name}");
        assert!(strings(&rule["operations"]).contains(&operation), "{name}");
        assert_eq!(policy["spec"]["failurePolicy"], "Fail", "{name}");
        let binding = find(file, "ValidatingAdmissionPolicyBinding", name);
        assert_eq!(binding["spec"]["policyName"], name);
        assert_eq!(strings(&binding["spec"]["validationActions"]), ["Deny"], "{name}");
        policy["spec"]["validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["expression"].as_str().unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let secrets = policy("cdtarget-tenant-no-service-account-token-secrets", "secrets", "CREATE");
    assert!(secrets.contains("'kubernetes.io/service-account-token'"), "{secrets}");
    assert!(secrets.contains("'kubernetes.io/service-account.name'"), "{secrets}");
    let pods = policy("cdtarget-tenant-no-pods-as-the-apply-identity", "pods", "CREATE");
    assert!(pods.contains("'cdtarget-tenant'"), "the impersonated ServiceAccount: {pods}");

    // The Role grants no token minting through the TokenRequest API either.
    for (role, rule) in rules(&[file]) {
        assert!(!strings(&rule["resources"]).contains(&"serviceaccounts/token"), "{role}: {rule}");
    }
}

/// The controller deletes a child only of a kind a CDTarget may stop rendering
/// (`ChildKind::may_be_dropped`, src/controller/cdtarget/inventory.rs): its RBAC grants `delete`
/// on exactly those kinds' resources among the child kinds' (other resources, SyncStatuses, have
/// their own reasons). A kind it would delete without the right fails every reconcile of a
/// CDTarget that dropped it (403); a right without the kind is a privilege nothing uses. The
/// chart's RBAC is the same file (`charts/cdtarget/files/rbac.yaml` links to it; tests/chart
/// checks the packaged copy), read here through the link too.
#[test]
fn the_controller_may_delete_exactly_the_child_kinds_a_cdtarget_may_stop_rendering() {
    use std::collections::BTreeSet;

    use cdtarget::render::ChildKind;

    let resource = |kind: ChildKind| {
        let resource = kind.resource();
        (resource.group, resource.plural)
    };
    let children: BTreeSet<(String, String)> = ChildKind::ALL.into_iter().map(resource).collect();
    let droppable: BTreeSet<(String, String)> =
        ChildKind::ALL.into_iter().filter(|kind| kind.may_be_dropped()).map(resource).collect();
    assert!(!droppable.is_empty() && droppable.len() < children.len(), "{droppable:?}");
    for file in ["deploy/rbac.yaml", "charts/cdtarget/files/rbac.yaml"] {
        let mut deletable = BTreeSet::new();
        for (role, rule) in rules(&[file]) {
            let verbs = strings(&rule["verbs"]);
            for group in strings(&rule["apiGroups"]) {
                for name in strings(&rule["resources"]) {
                    let child = (group.to_owned(), name.to_owned());
                    if children.contains(&child) {
                        assert!(verbs.contains(&"get"), "{role}: a child kind is read before it is written: {rule}");
                        if verbs.contains(&"delete") {
                            deletable.insert(child);
                        }
                    }
                }
            }
        }
        assert_eq!(deletable, droppable, "{file}: `delete` on child kinds");
    }
}

#[test]
fn the_controller_may_ask_subject_access_reviews_and_nothing_else_of_that_group() {
    let cluster_role = find("deploy/rbac.yaml", "ClusterRole", "cdtarget-controller");
    let reviews: Vec<&Value> = cluster_role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| strings(&r["apiGroups"]).contains(&"authorization.k8s.io"))
        .collect();
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    assert_eq!(strings(&reviews[0]["resources"]), ["subjectaccessreviews"]);
    assert_eq!(strings(&reviews[0]["verbs"]), ["create"]);
}

#[test]
fn the_example_tenant_namespace_refuses_agent_labels_on_every_pod_template_but_the_controllers() {
    let file = "examples/platform/tenant-rbac.yaml";
    let name = "cdtarget-tenant-no-agent-labels";
    let policy = find(file, "ValidatingAdmissionPolicy", name);
    let constraints = &policy["spec"]["matchConstraints"];
    assert_eq!(constraints["namespaceSelector"]["matchExpressions"][0]["key"], "cdtarget.io/tenant");
    let covered: Vec<&str> =
        constraints["resourceRules"].as_array().unwrap().iter().flat_map(|rule| strings(&rule["resources"])).collect();
    for kind in [
        "pods",
        "replicationcontrollers",
        "deployments",
        "replicasets",
        "statefulsets",
        "daemonsets",
        "jobs",
        "cronjobs",
    ] {
        assert!(covered.contains(&kind), "{kind} can carry a pod template: {covered:?}");
    }
    let exempt = policy["spec"]["matchConditions"][0]["expression"].as_str().unwrap();
    let controller = find("deploy/serviceaccount.yaml", "ServiceAccount", "cdtarget");
    let user = format!(
        "'system:serviceaccount:{}:{}'",
        controller["metadata"]["namespace"].as_str().unwrap(),
        controller["metadata"]["name"].as_str().unwrap()
    );
    assert!(exempt.contains(&user), "the controller writes the agents' template: {exempt}");
    assert!(!exempt.contains("cdtarget-tenant"), "the tenant's identity is never exempt: {exempt}");
    let rule = policy["spec"]["validations"][0]["expression"].as_str().unwrap();
    assert!(rule.contains("'cdtarget.io/'"), "{rule}");
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    let binding = find(file, "ValidatingAdmissionPolicyBinding", name);
    assert_eq!(strings(&binding["spec"]["validationActions"]), ["Deny"]);
}

#[test]
fn tenant_people_only_read_sync_statuses_and_what_a_push_acts_as_has_no_right_on_them() {
    let file = "examples/platform/tenant-rbac.yaml";
    // The ServiceAccount a push acts as: nothing on SyncStatuses, so a push cannot forge one.
    let role = find(file, "Role", "cdtarget-tenant");
    let sync_statuses = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| strings(&r["resources"]).iter().any(|resource| resource.starts_with("syncstatuses")));
    assert!(!sync_statuses, "the impersonated ServiceAccount may touch SyncStatuses: {role}");
    // The people: get, list and watch of SyncStatuses and Events, nothing else, bound to a group.
    let feedback = find(file, "Role", "cdtarget-tenant-feedback");
    for rule in feedback["rules"].as_array().unwrap() {
        assert_eq!(strings(&rule["verbs"]), ["get", "list", "watch"], "{rule}");
        for resource in strings(&rule["resources"]) {
            assert!(["syncstatuses", "events"].contains(&resource), "{rule}");
        }
    }
    let binding = find(file, "RoleBinding", "cdtarget-tenant-feedback");
    assert_eq!(binding.pointer("/roleRef/name"), Some(&Value::from("cdtarget-tenant-feedback")));
    let subjects = binding["subjects"].as_array().unwrap();
    assert!(
        subjects.iter().all(|s| s["kind"] == "Group"),
        "bound to the tenant's people, not a ServiceAccount: {subjects:?}"
    );
}
