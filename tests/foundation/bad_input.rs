//! Bad input: every invalid tenant document and every invalid policy is rejected with the file,
//! the 1-based document and the field path at fault, and a message saying what would be
//! accepted — and nothing is rendered (loading is all or nothing).
//!
//! The cases are tables of named entries; a failing case is reported by its name, and every
//! failing case is reported at once.

use cdtarget::policy;

use crate::cases::{
    Case, Expected, PolicyCase, at, check_problems, describe, one_file, policy_at, policy_case, run_all,
    run_policy_cases, target_at,
};
use crate::support::{self, VALID_CDTARGET, valid_plus, valid_with, with_ips};

/// A namespaced ConfigMap named `name`.
fn config_map(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  key: value\n")
}

fn document_cases() -> Vec<Case> {
    vec![
        // Destinations.
        one_file(
            "invalid_ipv4_address_is_rejected",
            with_ips(r#"["10.0.0.1", "10.0.0.256"]"#),
            vec![target_at("spec.ip[1]", "expected for example `10.0.0.1`, `2001:db8::1` or `10.1.0.0/24`")],
        ),
        one_file(
            "invalid_ipv6_address_is_rejected",
            with_ips(r#"["2001:db8::g"]"#),
            vec![target_at("spec.ip[0]", "`2001:db8::g` is not an IP address or CIDR; expected")],
        ),
        one_file(
            "ipv4_prefix_longer_than_32_is_rejected",
            with_ips(r#"["10.0.0.0/33"]"#),
            vec![target_at("spec.ip[0]", "is not a CIDR; expected an address with a prefix length")],
        ),
        one_file(
            "cidr_with_host_bits_set_is_rejected",
            with_ips(r#"["10.0.0.1", "10.1.0.5/24"]"#),
            vec![target_at("spec.ip[1]", "has host bits set; write the network `10.1.0.0/24`")],
        ),
        one_file(
            "ipv6_cidr_with_host_bits_set_is_rejected",
            with_ips(r#"["2001:db8::1/64"]"#),
            vec![target_at("spec.ip[0]", "write the network `2001:db8::/64`")],
        ),
        one_file(
            "ipv4_cidr_broader_than_policy_is_rejected",
            with_ips(r#"["10.0.0.0/16"]"#),
            vec![target_at("spec.ip[0]", "IPv4 destinations need a prefix of /24 or longer")],
        ),
        one_file(
            "ipv6_cidr_broader_than_policy_is_rejected",
            with_ips(r#"["2001:db8::/48"]"#),
            vec![target_at("spec.ip[0]", "IPv6 destinations need a prefix of /64 or longer")],
        ),
        one_file(
            "ipv4_destination_in_forbidden_range_is_rejected",
            with_ips(r#"["169.254.169.254"]"#),
            vec![target_at("spec.ip[0]", "overlaps the forbidden range 169.254.0.0/16; choose a destination outside it")],
        ),
        one_file(
            "ipv4_network_inside_forbidden_service_range_is_rejected",
            with_ips(r#"["10.0.0.1", "10.1.0.0/24", "10.100.0.0/24"]"#),
            vec![target_at("spec.ip[2]", "overlaps the forbidden range 10.96.0.0/12")],
        ),
        one_file(
            "ipv6_destination_in_forbidden_range_is_rejected",
            with_ips(r#"["fe80::1"]"#),
            vec![target_at("spec.ip[0]", "overlaps the forbidden range fe80::/10")],
        ),
        one_file(
            "ipv4_mapped_ipv6_address_is_rejected",
            with_ips(r#"["::ffff:10.0.0.1"]"#),
            vec![target_at("spec.ip[0]", "IPv4-mapped IPv6 address; write the IPv4 form `10.0.0.1` instead")],
        ),
        one_file(
            "ip_as_a_string_instead_of_a_list_is_rejected",
            with_ips(r#""10.0.0.1""#),
            vec![target_at("spec.ip", "expected a list, got a string")],
        ),
        one_file(
            "ip_entry_that_is_a_number_is_rejected",
            with_ips("[10]"),
            vec![target_at("spec.ip[0]", "expected a string, got a number (10)")],
        ),
        // Structure: unknown fields and wrong types.
        one_file(
            "unknown_field_typo_suggests_the_known_field",
            valid_with(&[("tokenRef:", "tokenRefs:")]),
            vec![
                target_at("spec.tokenRefs", "unknown field `tokenRefs` (did you mean `tokenRef`?)"),
                target_at("spec.tokenRef", "is required; expected the name of the Secret holding key AZP_TOKEN"),
            ],
        ),
        one_file(
            "unknown_nested_field_is_rejected_with_a_suggestion",
            valid_with(&[("poolName:", "poolname:")]),
            vec![target_at("spec.config.poolname", "unknown field `poolname` (did you mean `poolName`?)")],
        ),
        one_file(
            "unknown_field_in_dns_config_is_rejected",
            valid_plus("  dnsConfig:\n    nameserver: [\"10.0.0.10\"]\n"),
            vec![target_at("spec.dnsConfig.nameserver", "did you mean `nameservers`?")],
        ),
        one_file(
            "unknown_top_level_field_is_rejected",
            format!("{VALID_CDTARGET}specs: {{}}\n"),
            vec![target_at("specs", "unknown field `specs` (did you mean `spec`?)")],
        ),
        one_file(
            "replica_count_of_the_wrong_type_is_rejected",
            valid_plus("  minReplicaCount: \"two\"\n"),
            vec![target_at("spec.minReplicaCount", "expected an integer, got a string (\"two\")")],
        ),
        one_file(
            "resource_quantity_of_the_wrong_type_is_rejected",
            valid_plus("  agentResources:\n    limits:\n      cpu: [1]\n"),
            vec![target_at("spec.agentResources.limits.cpu", "expected an integer or a string, got a list")],
        ),
        // Required fields.
        one_file(
            "missing_token_ref_is_rejected",
            valid_with(&[("  tokenRef: azp-token\n", "")]),
            vec![target_at("spec.tokenRef", "is required; expected the name of the Secret holding key AZP_TOKEN")],
        ),
        one_file(
            "missing_config_url_is_rejected",
            valid_with(&[("    url: https://dev.azure.com/acme\n", "")]),
            vec![target_at("spec.config.url", "is required; expected the organization URL")],
        ),
        one_file(
            "missing_config_pool_name_is_rejected",
            valid_with(&[("    poolName: pool\n", "")]),
            vec![target_at("spec.config.poolName", "is required; expected the agent pool's name")],
        ),
        one_file(
            "missing_agent_image_is_rejected",
            valid_with(&[("  agentImage: ghcr.io/acme/azp-agent:1\n", "")]),
            vec![target_at("spec.agentImage", "is required; expected an image reference")],
        ),
        one_file(
            "empty_proxy_ref_is_rejected",
            valid_plus("  proxyRef: \"\"\n"),
            vec![target_at("spec.proxyRef", "must not be empty; expected the name of a Secret in this namespace")],
        ),
        // Values.
        one_file(
            "url_with_trailing_slash_is_rejected",
            valid_with(&[("url: https://dev.azure.com/acme", "url: https://dev.azure.com/acme/")]),
            vec![target_at("spec.config.url", "write `https://dev.azure.com/acme`")],
        ),
        one_file(
            "url_without_scheme_is_rejected",
            valid_with(&[("url: https://dev.azure.com/acme", "url: dev.azure.com/acme")]),
            vec![target_at("spec.config.url", "is not an https URL; expected e.g. `https://dev.azure.com/acme`")],
        ),
        one_file(
            "min_replicas_greater_than_max_is_rejected",
            valid_plus("  minReplicaCount: 3\n  maxReplicaCount: 2\n"),
            vec![target_at("spec.minReplicaCount", "expected minReplicaCount ≤ maxReplicaCount")],
        ),
        one_file(
            "negative_min_replicas_is_rejected",
            valid_plus("  minReplicaCount: -1\n"),
            vec![target_at("spec.minReplicaCount", "-1 is negative; expected 0 or more")],
        ),
        one_file(
            "max_replicas_above_policy_ceiling_is_rejected",
            valid_plus("  maxReplicaCount: 11\n"),
            vec![target_at("spec.maxReplicaCount", "11 exceeds the platform ceiling of 10 agents; expected at most 10")],
        ),
        one_file(
            "image_outside_allowed_prefixes_is_rejected",
            valid_with(&[("ghcr.io/acme/azp-agent:1", "docker.io/evil/azp-agent:1")]),
            vec![target_at("spec.agentImage", "images must start with one of: ghcr.io/acme/")],
        ),
        one_file(
            "image_with_whitespace_is_rejected",
            valid_with(&[("ghcr.io/acme/azp-agent:1", "\"ghcr.io/acme/azp agent:1\"")]),
            vec![target_at("spec.agentImage", "contains whitespace; expected an image reference")],
        ),
        one_file(
            "name_too_long_for_keda_is_rejected",
            valid_with(&[("name: agents", &format!("name: {}", "a".repeat(55)))]),
            vec![target_at("metadata.name", "is 55 characters long; at most 54 fit")],
        ),
        one_file(
            "name_with_uppercase_is_rejected",
            valid_with(&[("name: agents", "name: Agents")]),
            vec![target_at("metadata.name", "use lowercase letters, digits and '-'")],
        ),
        one_file(
            "reserved_label_key_in_additional_selector_is_rejected",
            valid_plus("  additionalSelector:\n    cdtarget.io/x: x\n"),
            vec![target_at(
                "spec.additionalSelector.cdtarget.io/x",
                "label keys starting with `cdtarget.io/` are set by cdtarget; choose another key",
            )],
        ),
        one_file(
            "invalid_label_value_in_additional_selector_is_rejected",
            valid_plus("  additionalSelector:\n    team: \"a b\"\n"),
            vec![target_at("spec.additionalSelector.team", "is not a valid label value; expected at most 63 letters")],
        ),
        one_file(
            "invalid_image_pull_secret_name_is_rejected",
            valid_plus("  imagePullSecrets:\n    - name: Pull_Secret\n"),
            vec![target_at("spec.imagePullSecrets[0].name", "use lowercase letters, digits, '-' and '.'")],
        ),
        one_file(
            "agent_name_with_several_agents_is_rejected",
            valid_with(&[("    poolName: pool\n", "    poolName: pool\n    agentName: agent-1\n")]) + "  maxReplicaCount: 3\n",
            vec![target_at("spec.config.agentName", "leave agentName out (agents are named after their pods) or set maxReplicaCount: 1")],
        ),
        one_file(
            "mtu_out_of_range_is_rejected",
            valid_with(&[("    poolName: pool\n", "    poolName: pool\n    mtuValue: \"9\"\n")]),
            vec![target_at("spec.config.mtuValue", "expected a number from 68 to 65535")],
        ),
        one_file(
            "unknown_trigger_meta_key_is_rejected_with_a_suggestion",
            valid_plus("  triggerMeta:\n    poolNmae: pool\n"),
            vec![target_at(
                "spec.triggerMeta.poolNmae",
                "unknown azure-pipelines trigger key `poolNmae` (did you mean `poolName`?)",
            )],
        ),
        one_file(
            "unknown_trigger_meta_key_is_quoted_as_written",
            valid_plus("  triggerMeta:\n    fieldName: x\n"),
            vec![target_at("spec.triggerMeta.fieldName", "unknown azure-pipelines trigger key `fieldName`; accepted")],
        ),
        one_file(
            "jobs_to_fetch_with_parent_is_rejected",
            valid_plus("  triggerMeta:\n    jobsToFetch: \"10\"\n    parent: placeholder\n"),
            vec![target_at("spec.triggerMeta.jobsToFetch", "cannot be combined with `parent`")],
        ),
        one_file(
            "jobs_to_fetch_with_fetch_unfinished_jobs_only_is_rejected",
            valid_plus("  triggerMeta:\n    jobsToFetch: \"10\"\n    fetchUnfinishedJobsOnly: \"true\"\n"),
            vec![target_at("spec.triggerMeta.jobsToFetch", "cannot be combined with `fetchUnfinishedJobsOnly`")],
        ),
        one_file(
            "non_boolean_require_all_demands_is_rejected",
            valid_plus("  triggerMeta:\n    requireAllDemands: \"yes\"\n"),
            vec![target_at("spec.triggerMeta.requireAllDemands", "is not a boolean; expected \"true\" or \"false\"")],
        ),
        one_file(
            "non_integer_pool_id_is_rejected",
            valid_plus("  triggerMeta:\n    poolID: abc\n"),
            vec![target_at("spec.triggerMeta.poolID", "is not a whole number")],
        ),
        one_file(
            "trigger_organization_url_with_trailing_slash_is_rejected",
            valid_plus("  triggerMeta:\n    organizationURL: https://dev.azure.com/acme/\n"),
            vec![target_at("spec.triggerMeta.organizationURL", "write `https://dev.azure.com/acme`")],
        ),
        one_file(
            "unknown_dns_policy_is_rejected",
            valid_plus("  dnsPolicy: Cluster\n"),
            vec![target_at("spec.dnsPolicy", "expected one of ClusterFirst, ClusterFirstWithHostNet, Default, None")],
        ),
        one_file(
            "dns_policy_none_without_nameservers_is_rejected",
            valid_plus("  dnsPolicy: None\n"),
            vec![target_at("spec.dnsConfig.nameservers", "dnsPolicy None needs at least one nameserver")],
        ),
        one_file(
            "duplicate_env_names_are_rejected",
            valid_plus("  env:\n    - {name: A, value: \"1\"}\n    - {name: B, value: \"2\"}\n    - {name: A, value: \"3\"}\n"),
            vec![target_at("spec.env[2].name", "`A` is set twice; each variable may appear once")],
        ),
        // Tenancy.
        one_file(
            "document_in_another_namespace_is_rejected",
            valid_with(&[("  name: agents\n", "  name: agents\n  namespace: team-b\n")]),
            vec![target_at("metadata.namespace", "every object goes to `team-a`")],
        ),
        Case {
            name: "configmap_in_another_namespace_is_rejected",
            files: vec![("config.yaml", config_map("settings").replace("  name: settings\n", "  name: settings\n  namespace: kube-system\n"))],
            expected: vec![at("config.yaml", 1, "metadata.namespace", "remove metadata.namespace or set it to `team-a`")],
        },
        Case {
            name: "cluster_scoped_kind_is_rejected",
            files: vec![(
                "rbac.yaml",
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: admin\nrules: []\n".into(),
            )],
            expected: vec![at("rbac.yaml", 1, "kind", "ClusterRole is cluster-scoped; tenants may only apply namespaced objects")],
        },
        Case {
            name: "kind_that_is_a_path_is_rejected_on_the_kind",
            files: vec![("path.yaml", "apiVersion: v1\nkind: ../../secrets\nmetadata:\n  name: x\n".into())],
            expected: vec![at("path.yaml", 1, "kind", "is not a kind; expected an upper-case letter")],
        },
        Case {
            name: "api_version_with_a_path_is_rejected_on_the_api_version",
            files: vec![("path.yaml", "apiVersion: v1/../..\nkind: Secret\nmetadata:\n  name: x\n".into())],
            expected: vec![at("path.yaml", 1, "apiVersion", "holds more than one '/'; expected `VERSION`")],
        },
        Case {
            name: "non_string_kind_is_rejected_as_not_a_string",
            files: vec![("kind.yaml", "apiVersion: v1\nkind: [ConfigMap]\nmetadata:\n  name: x\n".into())],
            expected: vec![at("kind.yaml", 1, "kind", "expected a string such as `ConfigMap`")],
        },
        Case {
            name: "cilium_network_policy_is_rejected_as_forbidden_by_the_policy",
            files: vec![(
                "cilium.yaml",
                "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata:\n  name: out\nspec: {}\n".into(),
            )],
            expected: vec![at("cilium.yaml", 1, "kind", "tenancy.forbiddenKinds: `cilium.io/*`")],
        },
        Case {
            name: "deployment_template_with_the_agents_label_is_rejected_at_the_label",
            files: vec![(
                "web.yaml",
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    metadata:\n      labels: {cdtarget.io/cdtarget: agents}\n"
                    .into(),
            )],
            expected: vec![at(
                "web.yaml",
                1,
                "spec.template.metadata.labels.cdtarget.io/cdtarget",
                "tenant objects may neither carry nor select by it",
            )],
        },
        Case {
            name: "list_kind_is_rejected",
            files: vec![("list.yaml", "apiVersion: v1\nkind: List\nmetadata:\n  name: all\nitems: []\n".into())],
            expected: vec![at("list.yaml", 1, "kind", "write each object as its own document")],
        },
        Case {
            name: "kustomization_kind_is_rejected_whatever_the_file_name",
            files: vec![(
                "build.yaml",
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nmetadata:\n  name: k\nresources: []\n"
                    .into(),
            )],
            expected: vec![at("build.yaml", 1, "kind", "is built only from a file named kustomization.yaml")],
        },
        Case {
            name: "same_kind_and_name_in_two_files_reports_the_second",
            files: vec![("a.yaml", config_map("settings")), ("b.yaml", config_map("settings"))],
            expected: vec![at("b.yaml", 1, "metadata.name", "ConfigMap `settings` is already defined at a.yaml:1")],
        },
        Case {
            name: "same_cdtarget_under_legacy_api_version_counts_as_a_duplicate",
            files: vec![
                ("a.yaml", VALID_CDTARGET.into()),
                ("b.yaml", VALID_CDTARGET.replace("cdtarget.io/v1alpha1", "cnad.gofound.nl/v1alpha1")),
            ],
            expected: vec![at("b.yaml", 1, "metadata.name", "CDTarget `agents` is already defined at a.yaml:1")],
        },
        Case {
            name: "tenant_deployment_colliding_with_rendered_deployment_is_rejected",
            files: vec![
                ("deploy.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: agents\nspec: {}\n".into()),
                ("target.yaml", VALID_CDTARGET.into()),
            ],
            expected: vec![target_at(
                "metadata.name",
                "CDTarget `agents` renders a Deployment of the same name, which deploy.yaml:1 also defines",
            )],
        },
        Case {
            name: "tenant_scaled_object_colliding_with_rendered_one_is_rejected",
            files: vec![
                ("target.yaml", VALID_CDTARGET.into()),
                ("scaler.yaml", "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: agents\n".into()),
            ],
            expected: vec![target_at("metadata.name", "renders a ScaledObject of the same name, which scaler.yaml:1")],
        },
        Case {
            name: "generate_name_without_name_is_rejected",
            files: vec![("pod.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: settings-\n".into())],
            expected: vec![at("pod.yaml", 1, "metadata.generateName", "set metadata.name instead")],
        },
        Case {
            name: "object_without_name_is_rejected",
            files: vec![("config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels: {a: b}\n".into())],
            expected: vec![at("config.yaml", 1, "metadata.name", "is required; expected the object's name")],
        },
        Case {
            name: "object_without_kind_is_rejected",
            files: vec![("config.yaml", "apiVersion: v1\nmetadata:\n  name: settings\n".into())],
            expected: vec![at("config.yaml", 1, "kind", "is required; expected e.g. `ConfigMap` or `CDTarget`")],
        },
        Case {
            name: "metadata_that_is_not_a_mapping_is_rejected",
            files: vec![("config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [settings]\n".into())],
            expected: vec![at("config.yaml", 1, "metadata", "expected a mapping with at least `name`")],
        },
        one_file(
            "unsupported_cdtarget_api_version_is_rejected",
            valid_with(&[("cdtarget.io/v1alpha1", "cdtarget.io/v1beta1")]),
            vec![target_at("apiVersion", "`cdtarget.io/v1beta1` is not served; expected `cdtarget.io/v1alpha1`")],
        ),
        one_file(
            "legacy_api_version_is_checked_like_the_current_one",
            valid_with(&[("cdtarget.io/v1alpha1", "cnad.gofound.nl/v1alpha1"), (r#"["10.0.0.1"]"#, r#"["10.0.0.0/8"]"#)]),
            vec![target_at("spec.ip[0]", "/24 or longer")],
        ),
        // YAML and document shape.
        one_file(
            "yaml_syntax_error_reports_the_file_without_a_document",
            "apiVersion: v1\nkind: [ConfigMap\n".into(),
            vec![Expected { file: "target.yaml", document: None, field: "", message: "not valid YAML" }],
        ),
        one_file(
            "document_that_is_a_list_is_rejected",
            "- apiVersion: v1\n  kind: ConfigMap\n".into(),
            vec![target_at("", "expected a Kubernetes object (a mapping with apiVersion, kind and metadata)")],
        ),
        one_file(
            "document_that_is_a_scalar_is_rejected",
            "just some text\n".into(),
            vec![target_at("", "expected a Kubernetes object")],
        ),
        one_file(
            "empty_documents_are_not_counted",
            format!("---\n---\n{VALID_CDTARGET}---\n42\n"),
            vec![target_at("", "expected a Kubernetes object")],
        )
        .with_expected_document(2),
        one_file(
            "server_set_metadata_copied_from_a_live_object_is_rejected",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  resourceVersion: \"42\"\n".into(),
            vec![target_at("metadata.resourceVersion", "is set by the API server; remove it")],
        ),
        one_file(
            "misspelt_metadata_field_is_rejected",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  lables: {a: b}\n".into(),
            vec![target_at("metadata.lables", "did you mean `labels`?")],
        ),
        one_file(
            "invalid_metadata_label_value_is_rejected",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels: {team: \"a b\"}\n".into(),
            vec![target_at("metadata.labels.team", "not a valid label value")],
        ),
        one_file(
            "name_that_is_not_a_string_is_rejected_as_the_wrong_type",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: 5\n".into(),
            vec![target_at("metadata.name", "expected a string, got a number (5)")],
        ),
        one_file(
            "configmap_name_that_the_api_server_would_refuse_is_rejected",
            config_map("Bad_Name"),
            vec![target_at("metadata.name", "is not a valid name")],
        ),
        one_file(
            "service_name_starting_with_a_digit_is_rejected",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: 1api\nspec:\n  ports: [{port: 80}]\n".into(),
            vec![target_at("metadata.name", "must start with a letter")],
        ),
        one_file(
            "tenant_network_policy_is_rejected",
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: allow-all\nspec:\n  podSelector: {}\n  egress: [{}]\n".into(),
            vec![target_at("kind", "tenants declare egress through CDTargets instead")],
        ),
        one_file(
            "destination_of_every_address_is_rejected_whatever_the_policy",
            with_ips(r#"["::/0"]"#),
            vec![target_at("spec.ip[0]", "is every address")],
        ),
    ]
}

impl Case {
    /// Moves every expected problem of the case to document `document`.
    fn with_expected_document(mut self, document: usize) -> Self {
        for e in &mut self.expected {
            e.document = Some(document);
        }
        self
    }
}

#[test]
fn every_bad_document_is_rejected_where_it_is_wrong_and_nothing_is_rendered() {
    let cases = document_cases();
    assert!(cases.len() >= 30, "the suite covers at least 30 bad documents, not {}", cases.len());
    run_all(&cases, &support::example_policy());
}

#[test]
fn all_problems_of_one_document_are_reported_at_once() {
    let text = valid_with(&[(r#"["10.0.0.1"]"#, r#"["10.0.0.300"]"#), ("tokenRef:", "tokenRefs:")]);
    let problems = support::load(&[("target.yaml", &text)], &support::example_policy()).unwrap_err();
    assert_eq!(problems.len(), 3, "{}", describe(&problems));
    check_problems(
        &problems,
        &[
            target_at("spec.ip[0]", "`10.0.0.300` is not an IP address or CIDR"),
            target_at("spec.tokenRefs", "did you mean `tokenRef`?"),
            target_at("spec.tokenRef", "is required"),
        ],
    )
    .unwrap_or_else(|why| panic!("{why}"));
}

#[test]
fn problems_in_two_documents_of_one_file_carry_their_document_index() {
    let second = valid_with(&[("name: agents", "name: builders"), ("    poolName: pool\n", "")]);
    let text = format!("{}---\n{second}", with_ips(r#"["10.0.0.0/8"]"#));
    let problems = support::load(&[("targets.yaml", &text)], &support::example_policy()).unwrap_err();
    check_problems(
        &problems,
        &[
            at("targets.yaml", 1, "spec.ip[0]", "/24 or longer"),
            at("targets.yaml", 2, "spec.config.poolName", "is required"),
        ],
    )
    .unwrap_or_else(|why| panic!("{why}"));
    // Each document also knows where it starts, and the second starts after the first.
    let lines: Vec<Option<usize>> = problems.iter().map(|p| p.line).collect();
    assert!(lines.iter().all(Option::is_some), "{lines:?}");
    assert!(lines[0] < lines[1], "{lines:?}");
}

#[test]
fn one_bad_file_keeps_every_valid_file_from_being_rendered() {
    let policy = support::example_policy();
    let good =
        [("target.yaml", VALID_CDTARGET), ("config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")];
    assert!(support::load(&good, &policy).is_ok(), "the valid files load on their own");
    let bad =
        [good[0], good[1], ("broken.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\n---\n[]\n")];
    let problems = support::load(&bad, &policy).unwrap_err();
    assert!(problems.iter().all(|p| p.file.as_deref() == Some("broken.yaml")), "{}", describe(&problems));
    assert_eq!(problems.len(), 1, "{}", describe(&problems));
    assert_eq!((problems[0].document, problems[0].field.as_str()), (Some(2), ""));
}

#[test]
fn problems_display_file_document_field_and_message() {
    let problems =
        support::load(&[("target.yaml", &with_ips(r#"["10.0.0.5/24"]"#))], &support::example_policy()).unwrap_err();
    assert_eq!(problems.len(), 1);
    let shown = problems[0].to_string();
    assert!(shown.starts_with("target.yaml:1: spec.ip[0]: `10.0.0.5/24` has host bits set"), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// Policies.

fn policy_cases() -> Vec<PolicyCase> {
    vec![
        policy_case(
            "forbidden_kind_without_group_is_rejected_as_missing_the_group",
            "tenancy:\n  forbiddenKinds: [{kind: CiliumNetworkPolicy}]\n",
            vec![policy_at("tenancy.forbiddenKinds[0].group", "is required (The API group")],
        ),
        policy_case(
            "forbidden_kind_that_is_not_a_kind_is_rejected",
            "tenancy:\n  forbiddenKinds: [{group: cilium.io, kind: ciliumnetworkpolicies}]\n",
            vec![policy_at("tenancy.forbiddenKinds[0].kind", "or `*` for every kind of the group")],
        ),
        policy_case(
            "port_zero_is_rejected",
            "egress:\n  ports: [{port: 443}, {port: 0}]\n",
            vec![policy_at("egress.ports[1].port", "0 is not a port; expected 1–65535")],
        ),
        policy_case(
            "port_above_65535_is_rejected",
            "egress:\n  ports: [{port: 70000}]\n",
            vec![policy_at("egress.ports[0].port", "70000 is not a port; expected 1–65535")],
        ),
        policy_case(
            "port_as_a_string_is_rejected",
            "egress:\n  ports: [{port: \"443\"}]\n",
            vec![policy_at("egress.ports[0].port", "expected an integer, got a string")],
        ),
        policy_case(
            "port_entry_without_port_is_rejected",
            "egress:\n  ports: [{protocol: UDP}]\n",
            vec![policy_at("egress.ports[0].port", "is required (Port number, 1–65535)")],
        ),
        policy_case(
            "lowercase_protocol_is_rejected",
            "egress:\n  ports: [{port: 443, protocol: tcp}]\n",
            vec![policy_at("egress.ports[0].protocol", "expected TCP, UDP or SCTP (upper case)")],
        ),
        policy_case(
            "end_port_below_port_is_rejected",
            "egress:\n  ports: [{port: 8443, endPort: 8000}]\n",
            vec![policy_at("egress.ports[0].endPort", "expected a port from `port` up to 65535")],
        ),
        policy_case(
            "ipv4_min_prefix_length_above_32_is_rejected",
            "egress:\n  minPrefixLength: {ipv4: 33}\n",
            vec![policy_at("egress.minPrefixLength.ipv4", "33 is out of range; expected 0–32")],
        ),
        policy_case(
            "ipv6_min_prefix_length_above_128_is_rejected",
            "egress:\n  minPrefixLength: {ipv6: 129}\n",
            vec![policy_at("egress.minPrefixLength.ipv6", "129 is out of range; expected 0–128")],
        ),
        policy_case(
            "invalid_forbidden_cidr_is_rejected",
            "egress:\n  forbidden: [\"169.254.0.0/16\", \"10.0.0.0/33\"]\n",
            vec![policy_at("egress.forbidden[1]", "is not a CIDR; expected an address with a prefix length")],
        ),
        policy_case(
            "forbidden_cidr_with_host_bits_is_rejected",
            "egress:\n  forbidden: [\"10.96.0.1/12\"]\n",
            vec![policy_at("egress.forbidden[0]", "has host bits set; write the network `10.96.0.0/12`")],
        ),
        policy_case(
            "platform_target_of_every_address_is_rejected",
            "egress:\n  platformTargets: [{cidr: 0.0.0.0/0, ports: [{port: 443}]}]\n",
            vec![policy_at("egress.platformTargets[0].cidr", "is every address")],
        ),
        policy_case(
            "platform_target_without_ports_is_rejected",
            "egress:\n  platformTargets: [{cidr: 150.171.22.0/24}]\n",
            vec![policy_at("egress.platformTargets[0].ports", "is required")],
        ),
        policy_case(
            "platform_target_with_empty_ports_is_rejected",
            "egress:\n  platformTargets: [{cidr: 150.171.22.0/24, ports: []}]\n",
            vec![policy_at("egress.platformTargets[0].ports", "must list at least one port")],
        ),
        policy_case(
            "platform_target_without_cidr_is_rejected",
            "egress:\n  platformTargets:\n    - {cidr: 150.171.22.0/24, ports: [{port: 443}]}\n    - {ports: [{port: 443}]}\n",
            vec![policy_at("egress.platformTargets[1].cidr", "is required (Address or CIDR)")],
        ),
        policy_case(
            "platform_target_with_bad_cidr_and_port_reports_both",
            "egress:\n  platformTargets: [{cidr: 150.171.22.1/24, ports: [{port: 0}]}]\n",
            vec![
                policy_at("egress.platformTargets[0].cidr", "write the network `150.171.22.0/24`"),
                policy_at("egress.platformTargets[0].ports[0].port", "expected 1–65535"),
            ],
        ),
        policy_case(
            "unknown_policy_field_typo_suggests_the_known_field",
            "egress:\n  forbiden: [\"10.96.0.0/12\"]\n",
            vec![policy_at("egress.forbiden", "unknown field `forbiden` (did you mean `forbidden`?)")],
        ),
        policy_case(
            "unknown_top_level_policy_field_is_rejected",
            "egres:\n  ports: [{port: 443}]\n",
            vec![policy_at("egres", "did you mean `egress`?")],
        ),
        policy_case(
            "cluster_dns_without_pod_labels_is_rejected",
            "egress:\n  clusterDns: {namespace: kube-system, podLabels: {}}\n",
            vec![policy_at("egress.clusterDns.podLabels", "must select the DNS pods, e.g. `k8s-app: kube-dns`")],
        ),
        policy_case(
            "cluster_dns_without_ports_is_rejected",
            "egress:\n  clusterDns: {ports: []}\n",
            vec![policy_at(
                "egress.clusterDns.ports",
                "must list the ports the DNS pods listen on, e.g. `{port: 53, protocol: UDP}`",
            )],
        ),
        policy_case(
            "cluster_dns_port_out_of_range_or_of_an_unknown_protocol_is_rejected",
            "egress:\n  clusterDns: {ports: [{port: 0, protocol: UDP}, {port: 5353, protocol: udp}]}\n",
            vec![
                policy_at("egress.clusterDns.ports[0].port", "0 is not a port; expected 1–65535"),
                policy_at("egress.clusterDns.ports[1].protocol", "`udp` is not a protocol; expected TCP, UDP or SCTP"),
            ],
        ),
        policy_case(
            "image_prefix_with_whitespace_is_rejected",
            "agents:\n  allowedImagePrefixes: [\"ghcr.io/acme/\", \"ghcr.io/ bad/\"]\n",
            vec![policy_at("agents.allowedImagePrefixes[1]", "must be a non-empty image prefix without spaces")],
        ),
        policy_case(
            "max_replicas_zero_is_rejected",
            "agents:\n  maxReplicas: 0\n",
            vec![policy_at("agents.maxReplicas", "0 is out of range; expected a positive integer")],
        ),
        policy_case(
            "run_as_root_is_rejected",
            "agents:\n  runAsUser: 0\n",
            vec![policy_at("agents.runAsUser", "expected a user id of 1 or more")],
        ),
        policy_case(
            "negative_grace_period_is_rejected",
            "agents:\n  terminationGracePeriodSeconds: -1\n",
            vec![policy_at("agents.terminationGracePeriodSeconds", "must not be negative")],
        ),
        policy_case(
            "legacy_ports_with_a_garbage_line_name_the_line",
            "ports: |\n  443\n\n  22x\n",
            vec![policy_at("ports", "line 3: `22x` is not a port; expected one port number 1–65535 per line")],
        ),
        policy_case(
            "legacy_ports_config_map_with_a_garbage_line_name_the_line",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cdtarget-ports}\ndata:\n  ports: |\n    443\n    http\n",
            vec![policy_at("data.ports", "line 2: `http` is not a port")],
        ),
        policy_case(
            "policy_config_map_reports_paths_inside_its_document",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cdtarget-policy}\ndata:\n  policy.yaml: |\n    egress:\n      ports: [{port: 0}]\n",
            vec![policy_at("data[policy.yaml].egress.ports[0].port", "expected 1–65535")],
        ),
        policy_case(
            "config_map_without_policy_keys_is_rejected",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cdtarget-policy}\ndata:\n  other: x\n",
            vec![policy_at("data", "needs key `policy.yaml` (a policy document) or the legacy key `ports`")],
        ),
        policy_case(
            "policy_that_is_a_list_is_rejected",
            "- egress: {}\n",
            vec![policy_at("", "expected a mapping, got a list")],
        ),
        policy_case(
            "policy_file_with_two_documents_is_rejected",
            "egress: {dns: true}\n---\nagents: {maxReplicas: 3}\n",
            vec![at("policy.yaml", 2, "", "a policy file holds exactly one YAML document")],
        ),
        policy_case(
            "policy_yaml_syntax_error_reports_the_file_without_a_document",
            "egress: [\n",
            vec![Expected { file: "policy.yaml", document: None, field: "", message: "not valid YAML" }],
        ),
    ]
}

#[test]
fn every_bad_policy_is_rejected_where_it_is_wrong() {
    run_policy_cases(&policy_cases());
}

#[test]
fn all_problems_of_a_policy_are_reported_at_once() {
    let text = "egress:\n  ports: [{port: 0}, {port: 443, protocol: tcp}]\n  minPrefixLength: {ipv4: 40, ipv6: 200}\nagents:\n  maxReplicas: 0\n  runAsUser: 0\n";
    let problems = policy::parse(text, "policy.yaml").unwrap_err();
    check_problems(
        &problems,
        &[
            policy_at("egress.ports[0].port", "expected 1–65535"),
            policy_at("egress.ports[1].protocol", "expected TCP, UDP or SCTP"),
            policy_at("egress.minPrefixLength.ipv4", "expected 0–32"),
            policy_at("egress.minPrefixLength.ipv6", "expected 0–128"),
            policy_at("agents.maxReplicas", "expected a positive integer"),
            policy_at("agents.runAsUser", "expected a user id of 1 or more"),
        ],
    )
    .unwrap_or_else(|why| panic!("{why}"));
}

#[test]
fn structural_and_missing_field_problems_of_a_policy_come_together() {
    let text = "egress:\n  forbiden: []\n  platformTargets: [{cidr: 150.171.22.0/24}]\n";
    let problems = policy::parse(text, "policy.yaml").unwrap_err();
    check_problems(
        &problems,
        &[
            policy_at("egress.forbiden", "did you mean `forbidden`?"),
            policy_at("egress.platformTargets[0].ports", "is required"),
        ],
    )
    .unwrap_or_else(|why| panic!("{why}"));
}
