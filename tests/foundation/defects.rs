//! One test per defect of the seed operator (`seed-operator.md` §11) that the renderer fixes.
//! Defects 9, 16 and 18 (watches, configured namespace, status and events) belong to the
//! controller and are tested with it.

use std::collections::BTreeSet;

use cdtarget::api::keda::KedaVersion;
use cdtarget::api::policy::PolicyDocument;
use cdtarget::policy::{self, Policy};
use cdtarget::render::{self, Children, Scaling, SecretDigests};
use k8s_openapi::api::core::v1::{Container, EnvVar};
use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::support::{NAMESPACE, cdtarget, children, load, valid_with};

/// [`super::support::VALID_CDTARGET`] named `name`, without destinations, plus `extra` (indented
/// spec lines).
fn doc(name: &str, extra: &str) -> String {
    let base = valid_with(&[("name: agents", &format!("name: {name}")), ("  ip: [\"10.0.0.1\"]\n", "")]);
    format!("{base}{extra}")
}

fn render_default(extra: &str) -> Children {
    children(&doc("agents", extra), &Policy::default())
}

fn egress(children: &Children) -> Vec<NetworkPolicyEgressRule> {
    children.network_policy().expect("a NetworkPolicy").spec.as_ref().unwrap().egress.clone().unwrap()
}

fn cidrs(rule: &NetworkPolicyEgressRule) -> Vec<String> {
    rule.to.iter().flatten().filter_map(|p| p.ip_block.as_ref()).map(|b| b.cidr.clone()).collect()
}

fn ports(rule: &NetworkPolicyEgressRule) -> Vec<(i32, String)> {
    rule.ports
        .iter()
        .flatten()
        .map(|p| match (&p.port, &p.protocol) {
            (Some(IntOrString::Int(n)), Some(proto)) => (*n, proto.clone()),
            other => panic!("port without number or protocol: {other:?}"),
        })
        .collect()
}

fn tenant_rule(children: &Children) -> Option<NetworkPolicyEgressRule> {
    egress(children).into_iter().find(|r| cidrs(r).iter().any(|c| c.starts_with("10.") || c.starts_with("2001:db8")))
}

fn agent(children: &Children) -> Container {
    children.deployment().expect("a Deployment").spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
        .clone()
}

fn env(children: &Children) -> Vec<EnvVar> {
    agent(children).env.unwrap()
}

#[test]
fn defect_01_no_egress_rule_is_ever_empty() {
    for extra in ["", "  ip: [\"10.0.0.1\"]\n", "  ip: []\n"] {
        for rule in egress(&render_default(extra)) {
            assert!(rule.to.as_ref().is_some_and(|to| !to.is_empty()), "rule without destinations: {rule:?}");
            assert!(rule.ports.as_ref().is_some_and(|p| !p.is_empty()), "rule without ports: {rule:?}");
        }
    }
}

#[test]
fn defect_02_addresses_and_cidrs_of_both_families_are_parsed_not_suffixed() {
    let children = render_default("  ip: [\"10.0.0.1\", \"10.1.0.0/24\", \"2001:db8::1\", \"2001:db8:1::/64\"]\n");
    let rule = tenant_rule(&children).unwrap();
    assert_eq!(cidrs(&rule), ["10.0.0.1/32", "10.1.0.0/24", "2001:db8::1/128", "2001:db8:1::/64"]);
    let problems = load(&[("t.yaml", &doc("agents", "  ip: [\"10.0.0.1/32/1\"]\n"))], &Policy::default()).unwrap_err();
    assert_eq!(problems[0].field, "spec.ip[0]");
}

#[test]
fn defect_03_ports_carry_one_protocol_tcp_by_default() {
    let rule = tenant_rule(&render_default("  ip: [\"10.0.0.1\"]\n")).unwrap();
    assert_eq!(ports(&rule), [(443, "TCP".into()), (22, "TCP".into()), (5986, "TCP".into())]);
}

#[test]
fn defect_04_policy_types_is_egress_only() {
    let spec = render_default("").network_policy().expect("a NetworkPolicy").spec.clone().unwrap();
    assert_eq!(spec.policy_types.unwrap(), ["Egress"]);
    assert!(spec.ingress.is_none());
}

#[test]
fn defect_05_dns_egress_is_explicit_udp_and_tcp_53() {
    let rules = egress(&render_default(""));
    let dns =
        rules.iter().find(|r| r.to.iter().flatten().any(|p| p.namespace_selector.is_some())).expect("cluster DNS rule");
    assert_eq!(ports(dns), [(53, "UDP".into()), (53, "TCP".into())]);
    let peer = &dns.to.as_ref().unwrap()[0];
    let pods = peer.pod_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
    assert_eq!(pods.get("k8s-app").map(String::as_str), Some("kube-dns"));

    // A custom DNS setup gets its nameservers instead of the cluster DNS (custom nameservers
    // need the policy's consent since issue #10).
    let mut document = PolicyDocument::default();
    document.egress.allow_custom_nameservers = true;
    let allowing = policy::from_document(&document).unwrap();
    let custom =
        children(&doc("agents", "  dnsPolicy: None\n  dnsConfig:\n    nameservers: [\"10.53.0.10\"]\n"), &allowing);
    let rules = egress(&custom);
    assert!(!rules.iter().any(|r| r.to.iter().flatten().any(|p| p.namespace_selector.is_some())));
    let ns = rules.iter().find(|r| cidrs(r) == ["10.53.0.10/32"]).expect("nameserver rule");
    assert_eq!(ports(ns), [(53, "UDP".into()), (53, "TCP".into())]);
}

#[test]
fn defect_06_empty_ip_list_means_no_tenant_destinations() {
    let rendered = render_default("  ip: []\n");
    assert!(tenant_rule(&rendered).is_none());
    for rule in egress(&rendered) {
        for cidr in cidrs(&rule) {
            assert!(cidr != "0.0.0.0/0" && cidr != "::/0");
        }
    }
    // With no allowed ports there is no tenant rule (never every port), and destinations that
    // cannot be opened are refused rather than silently dropped.
    let mut document = PolicyDocument::default();
    document.egress.ports.clear();
    let policy = policy::from_document(&document).unwrap();
    let rendered = children(&doc("agents", ""), &policy);
    assert!(tenant_rule(&rendered).is_none());
    assert!(egress(&rendered).iter().all(|r| r.ports.as_ref().is_some_and(|p| !p.is_empty())));
    let problems = load(&[("t.yaml", &doc("agents", "  ip: [\"10.0.0.1\"]\n"))], &policy).unwrap_err();
    assert_eq!(problems[0].field, "spec.ip");
}

#[test]
fn defect_07_platform_ranges_are_configuration_with_current_defaults() {
    let rules = egress(&render_default(""));
    let platform: BTreeSet<String> =
        rules.iter().filter(|r| ports(r) == [(443, "TCP".into())]).flat_map(cidrs).collect();
    for current in ["150.171.22.0/24", "150.171.76.0/24", "13.107.6.183/32", "2620:1ec:50::/48", "2603:1061:10::/48"] {
        assert!(platform.contains(current), "{current} missing from {platform:?}");
    }
    assert!(!platform.contains("13.107.42.0/24"), "outdated range rendered");

    let mut document = PolicyDocument::default();
    document.egress.platform_targets = vec![cdtarget::api::policy::PlatformTargetDocument {
        cidr: "192.0.2.0/24".into(),
        ports: vec![cdtarget::api::policy::PortDocument::tcp(443)],
    }];
    let policy = policy::from_document(&document).unwrap();
    let rules = egress(&children(&doc("agents", ""), &policy));
    let platform: Vec<String> = rules.iter().filter(|r| ports(r) == [(443, "TCP".into())]).flat_map(cidrs).collect();
    assert_eq!(platform, ["192.0.2.0/24"]);
}

#[test]
fn defect_08_ports_list_is_trimmed_and_rejected_whole_on_a_bad_line() {
    let policy = policy::from_legacy_ports("443 \r\n 22\n").unwrap();
    assert_eq!(policy.ports.iter().map(|p| p.port).collect::<Vec<_>>(), [443, 22]);
    let problems = policy::from_legacy_ports("443\nabc\n22\n").unwrap_err();
    assert_eq!(problems.len(), 1);
    assert!(problems[0].message.contains("line 2"), "{}", problems[0].message);
}

#[test]
fn defect_10_replicas_are_left_to_keda_and_set_without_it() {
    let target = cdtarget(&doc("agents", "  minReplicaCount: 2\n  maxReplicaCount: 4\n"), &Policy::default());
    let with_keda = render::render(
        &target,
        &Policy::default(),
        &SecretDigests::new(),
        Scaling::Keda(KedaVersion::NEWEST_SUPPORTED),
    )
    .unwrap();
    assert_eq!(with_keda.deployment().expect("a Deployment").spec.clone().unwrap().replicas, None);
    let without = render::render(&target, &Policy::default(), &SecretDigests::new(), Scaling::Fixed).unwrap();
    assert_eq!(without.deployment().expect("a Deployment").spec.clone().unwrap().replicas, Some(2));
    assert!(without.scaled_object().is_none() && without.trigger_authentication().is_none());
}

#[test]
fn defect_11_no_secret_is_ever_rendered() {
    let children = render_default("  proxyRef: proxy\n  caCertRef: ca\n");
    // The four children are the only objects rendered; none of them is a Secret.
    let kinds = [
        "NetworkPolicy",
        "Deployment",
        if children.scaled_object().is_some() { "ScaledObject" } else { "" },
        if children.trigger_authentication().is_some() { "TriggerAuthentication" } else { "" },
    ];
    assert!(!kinds.contains(&"Secret"));
    let problems =
        load(&[("t.yaml", &doc("agents", "").replace("  tokenRef: azp-token\n", ""))], &Policy::default()).unwrap_err();
    assert_eq!(problems[0].field, "spec.tokenRef");
}

#[test]
fn defect_12_each_env_name_appears_once_and_tenant_values_win() {
    let children = render_default(
        "  proxyRef: proxy\n  env:\n  - name: AZP_POOL\n    value: override\n  - name: EXTRA\n    value: x\n",
    );
    let env = env(&children);
    let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(names.len(), unique.len(), "duplicate names in {names:?}");
    let pool = env.iter().find(|e| e.name == "AZP_POOL").unwrap();
    assert_eq!(pool.value.as_deref(), Some("override"));
    assert_eq!(names.last(), Some(&"EXTRA"));
}

#[test]
fn defect_13_ca_bundle_is_built_without_root_or_post_start() {
    let children = render_default("  caCertRef: corp.ca\n");
    let pod = children.deployment().expect("a Deployment").spec.clone().unwrap().template.spec.unwrap();
    assert!(pod.containers[0].lifecycle.is_none(), "no postStart hook");
    let init = &pod.init_containers.unwrap()[0];
    assert_eq!(init.security_context.as_ref().unwrap().run_as_non_root, Some(true));
    let volumes = pod.volumes.unwrap();
    let secret_volume = volumes.iter().find(|v| v.secret.is_some()).unwrap();
    assert_eq!(secret_volume.name, "tenant-ca", "a Secret name with '.' never becomes a volume name");
    assert_eq!(secret_volume.secret.as_ref().unwrap().secret_name.as_deref(), Some("corp.ca"));
    let env = pod.containers[0].env.clone().unwrap();
    let ssl = env.iter().find(|e| e.name == "SSL_CERT_FILE").unwrap();
    assert_eq!(ssl.value.as_deref(), Some("/var/run/cdtarget/ca-bundle/ca-certificates.crt"));
}

#[test]
fn defect_14_mtu_is_passed_as_agent_docker_mtu_value() {
    let children = children(
        &doc("agents", "").replace("    poolName: pool\n", "    poolName: pool\n    mtuValue: \"1400\"\n"),
        &Policy::default(),
    );
    let env = env(&children);
    assert!(env.iter().any(|e| e.name == "AGENT_DOCKER_MTU_VALUE" && e.value.as_deref() == Some("1400")));
    assert!(!env.iter().any(|e| e.name == "AGENT_MTU_VALUE"));
}

#[test]
fn defect_15_one_trigger_authentication_per_cdtarget_named_after_it() {
    let text = doc("agents", "").replace("poolName: pool", "poolName: Shared Pool");
    let children = children(&text, &Policy::default());
    let auth = children.trigger_authentication().unwrap();
    assert_eq!(auth.metadata.name.as_deref(), Some("agents"));
    let scaled = children.scaled_object().unwrap();
    assert_eq!(scaled.spec.triggers[0].authentication_ref.as_ref().unwrap().name, "agents");
    assert_eq!(scaled.spec.triggers[0].metadata["poolName"], "Shared Pool");
}

#[test]
fn defect_19_agents_run_restricted_without_a_service_account_token() {
    let pod = render_default("").deployment().expect("a Deployment").spec.clone().unwrap().template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
    let pod_context = pod.security_context.unwrap();
    assert_eq!(pod_context.run_as_non_root, Some(true));
    assert!(pod_context.run_as_user.unwrap() > 0);
    assert_eq!(pod_context.seccomp_profile.unwrap().type_, "RuntimeDefault");
    let context = pod.containers[0].security_context.clone().unwrap();
    assert_eq!(context.allow_privilege_escalation, Some(false));
    assert_eq!(context.capabilities.unwrap().drop.unwrap(), ["ALL"]);
}

#[test]
fn defect_20_grace_period_comes_from_the_policy() {
    let pod = render_default("").deployment().expect("a Deployment").spec.clone().unwrap().template.spec.unwrap();
    assert_eq!(pod.termination_grace_period_seconds, Some(3600));
    let mut document = PolicyDocument::default();
    document.agents.termination_grace_period_seconds = 7200;
    let policy = policy::from_document(&document).unwrap();
    let pod = children(&doc("agents", ""), &policy)
        .deployment()
        .expect("a Deployment")
        .spec
        .clone()
        .unwrap()
        .template
        .spec
        .unwrap();
    assert_eq!(pod.termination_grace_period_seconds, Some(7200));
}

#[test]
fn defect_21_two_cdtargets_with_the_same_selector_never_select_each_others_pods() {
    let shared = "  additionalSelector:\n    app: agents\n";
    let a = children(&doc("team-a", shared), &Policy::default());
    let b = children(&doc("team-b", shared), &Policy::default());
    let selector = |c: &Children| {
        c.network_policy()
            .expect("a NetworkPolicy")
            .spec
            .as_ref()
            .unwrap()
            .pod_selector
            .clone()
            .unwrap()
            .match_labels
            .unwrap()
    };
    let pod_labels = |c: &Children| {
        c.deployment().expect("a Deployment").spec.as_ref().unwrap().template.metadata.clone().unwrap().labels.unwrap()
    };
    let selects = |sel: &std::collections::BTreeMap<String, String>,
                   labels: &std::collections::BTreeMap<String, String>| {
        sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    };
    assert!(selects(&selector(&a), &pod_labels(&a)));
    assert!(!selects(&selector(&a), &pod_labels(&b)));
    assert!(!selects(&selector(&b), &pod_labels(&a)));
    assert_eq!(pod_labels(&a).get("app").map(String::as_str), Some("agents"), "tenant labels still reach the pods");
    assert_eq!(pod_labels(&a).get("app.kubernetes.io/managed-by").map(String::as_str), Some("cdtarget"));
}

#[test]
fn defect_22_every_child_is_owned_by_its_cdtarget() {
    let mut target = cdtarget(&doc("agents", ""), &Policy::default());
    target.metadata.uid = Some("3f2c1d7e-0000-4000-8000-000000000001".into());
    let children = render::render(
        &target,
        &Policy::default(),
        &SecretDigests::new(),
        Scaling::Keda(KedaVersion::NEWEST_SUPPORTED),
    )
    .unwrap();
    let owners = [
        children.network_policy().expect("a NetworkPolicy").metadata.owner_references.clone(),
        children.deployment().expect("a Deployment").metadata.owner_references.clone(),
        children.scaled_object().unwrap().metadata.owner_references.clone(),
        children.trigger_authentication().unwrap().metadata.owner_references.clone(),
    ];
    for owner in owners {
        let owner = owner.expect("owner reference")[0].clone();
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("CDTarget", "agents", Some(true)));
        assert_eq!(owner.api_version, "cdtarget.io/v1alpha1");
    }
    assert_eq!(children.network_policy().expect("a NetworkPolicy").metadata.namespace.as_deref(), Some(NAMESPACE));
}

#[test]
fn defect_23_fixed_agent_name_is_rejected_with_more_than_one_replica() {
    let text = doc("agents", "  maxReplicaCount: 3\n")
        .replace("    poolName: pool\n", "    poolName: pool\n    agentName: build-1\n");
    let problems = load(&[("t.yaml", &text)], &Policy::default()).unwrap_err();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].field, "spec.config.agentName");
    let single = text.replace("maxReplicaCount: 3", "maxReplicaCount: 1");
    assert!(load(&[("t.yaml", &single)], &Policy::default()).is_ok());
}

#[test]
fn defect_24_scale_to_zero_needs_an_explicit_placeholder_agent() {
    let problems = load(&[("t.yaml", &doc("agents", "  minReplicaCount: 0\n"))], &Policy::default()).unwrap_err();
    assert_eq!(problems[0].field, "spec.minReplicaCount");
    assert!(problems[0].message.contains("triggerMeta.parent"));
    let with_parent = doc("agents", "  minReplicaCount: 0\n  triggerMeta:\n    parent: template-agent\n");
    let children = children(&with_parent, &Policy::default());
    assert_eq!(children.scaled_object().unwrap().spec.min_replica_count, Some(0));
}

#[test]
fn rotated_secret_changes_the_pod_template_digest() {
    let target = cdtarget(&doc("agents", "  proxyRef: proxy\n"), &Policy::default());
    let digest_with = |token: &str| {
        let digests =
            SecretDigests::from([("azp-token".to_owned(), token.to_owned()), ("proxy".to_owned(), "p".to_owned())]);
        let children =
            render::render(&target, &Policy::default(), &digests, Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))
                .unwrap();
        children
            .deployment()
            .expect("a Deployment")
            .spec
            .clone()
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()["cdtarget.io/secrets-digest"]
            .clone()
    };
    assert_ne!(digest_with("old"), digest_with("new"));
    assert_eq!(digest_with("same"), digest_with("same"));
}
