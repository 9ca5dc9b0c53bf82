//! The agents' DNS (issue #26): the cluster DNS rule as the policy describes the DNS pods,
//! checked against the documentation (point 1); and every combination of the policy's DNS
//! egress with a CDTarget's `dnsPolicy` and nameservers, where those that would leave the agents
//! querying resolvers nothing opens are refused (point 2, docs/rendering.md).

use cdtarget::api::keda::KedaVersion;
use cdtarget::policy::{self, Policy, Protocol};
use cdtarget::render::{self, Scaling, SecretDigests};
use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::cases::{check_problems, target_at};
use super::support::{self, example_policy, valid_plus, with_ips};

/// The first YAML block after `heading` in docs/policy.md.
fn documented_policy(heading: &str) -> String {
    let text = std::fs::read_to_string(support::project_dir().join("docs/policy.md")).expect("docs/policy.md");
    let section = text.split(heading).nth(1).unwrap_or_else(|| panic!("docs/policy.md has no `{heading}`"));
    let block = section.split("```yaml\n").nth(1).and_then(|b| b.split("```").next());
    block.unwrap_or_else(|| panic!("no YAML block after `{heading}`")).to_owned()
}

#[test]
fn the_cluster_dns_documented_and_in_the_example_is_the_default() {
    let block = documented_policy("## The document, with every default");
    let documented = policy::parse(&block, "docs/policy.md").expect("the documented defaults parse");
    let default = Policy::default().cluster_dns.expect("DNS egress is on by default");
    assert_eq!(documented.cluster_dns.as_ref(), Some(&default));
    assert_eq!(example_policy().cluster_dns.as_ref(), Some(&default));
    let ports: Vec<(Protocol, u16)> = default.ports.iter().map(|p| (p.protocol, p.port)).collect();
    assert_eq!(ports, [(Protocol::Udp, 53), (Protocol::Tcp, 53)]);
}

#[test]
fn the_openshift_example_opens_the_dns_pods_on_5353() {
    let block = documented_policy("## Cluster DNS");
    let policy = policy::parse(&block, "docs/policy.md").expect("the OpenShift example parses");
    let target = support::cdtarget(&valid_plus(""), &policy);
    let children =
        render::render(&target, &policy, &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))
            .expect("renders");
    insta::assert_snapshot!(
        "openshift__NetworkPolicy",
        cdtarget::yaml::to_yaml(children.network_policy().expect("a NetworkPolicy"))
    );
}

// === which CDTargets could resolve a name ===

/// The example policy with each `(from, to)` replaced (`from` must occur).
fn policy_with(replacements: &[(&str, &str)]) -> Policy {
    let path = support::project_dir().join("examples/platform/policy.yaml");
    let mut text = std::fs::read_to_string(path).expect("example policy");
    for (from, to) in replacements {
        assert!(text.contains(from), "the example policy does not contain {from:?}");
        text = text.replacen(from, to, 1);
    }
    policy::parse(&text, "policy.yaml").unwrap_or_else(|p| panic!("policy: {p:#?}"))
}

/// `egress.dns: false`.
const DNS_OFF: (&str, &str) = ("  dns: true\n", "  dns: false\n");
/// `egress.allowCustomNameservers: true`.
const CUSTOM: (&str, &str) = ("allowCustomNameservers: false", "allowCustomNameservers: true");
/// Port 53/UDP among the policy's ports for tenant destinations.
const TENANT_53: (&str, &str) = ("    - {port: 443}\n", "    - {port: 443}\n    - {port: 53, protocol: UDP}\n");
/// Where [`platform_target`] goes.
const PLATFORM_TARGETS: &str = "  platformTargets:\n";

/// The replacement putting a platform target that opens `ports` to `cidr` first in the list.
fn platform_target(cidr: &str, ports: &str) -> String {
    format!("{PLATFORM_TARGETS}    - {{cidr: {cidr}, ports: {ports}}}\n")
}

/// The test CDTarget with `dnsPolicy` (unless empty) and, when `nameserver`, `10.53.0.10`.
fn with_dns(dns_policy: &str, nameserver: bool) -> String {
    let mut lines = String::new();
    if !dns_policy.is_empty() {
        lines.push_str(&format!("  dnsPolicy: {dns_policy}\n"));
    }
    if nameserver {
        lines.push_str("  dnsConfig:\n    nameservers: [\"10.53.0.10\"]\n");
    }
    valid_plus(&lines)
}

/// What a combination must come to.
#[derive(Clone, Copy)]
enum Outcome {
    /// Rendered with (or without) the cluster DNS rule, and a nameserver rule to exactly these.
    Rendered { cluster_dns: bool, nameservers: &'static [&'static str] },
    /// Refused with exactly this problem (field, part of the message).
    Refused(&'static str, &'static str),
}

use Outcome::{Refused, Rendered};

fn is_cluster_dns(rule: &NetworkPolicyEgressRule) -> bool {
    rule.to.iter().flatten().any(|p| p.namespace_selector.is_some())
}

/// The `ipBlock`s of the rules on exactly UDP 53 and TCP 53 (the nameserver rule's).
fn nameserver_blocks(rules: &[NetworkPolicyEgressRule]) -> Vec<String> {
    let dns_ports =
        [(Some("UDP".to_owned()), Some(IntOrString::Int(53))), (Some("TCP".into()), Some(IntOrString::Int(53)))];
    rules
        .iter()
        .filter(|r| !is_cluster_dns(r))
        .filter(|r| r.ports.iter().flatten().map(|p| (p.protocol.clone(), p.port.clone())).eq(dns_ports.clone()))
        .flat_map(|r| r.to.iter().flatten().filter_map(|p| p.ip_block.as_ref()).map(|b| b.cidr.clone()))
        .collect()
}

/// Runs every `(name, policy, CDTarget, outcome)` case; panics naming each that failed.
fn run(cases: &[(&str, Policy, String, Outcome)]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(name, policy, yaml, outcome)| check(policy, yaml, outcome).err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

fn check(policy: &Policy, yaml: &str, outcome: &Outcome) -> Result<(), String> {
    match (support::load(&[("target.yaml", yaml)], policy), outcome) {
        (Ok(set), Rendered { cluster_dns, nameservers }) => {
            let target = set.cdtargets().next().expect("one CDTarget");
            let children =
                render::render(target, policy, &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))
                    .map_err(|p| format!("does not render: {p:#?}"))?;
            let rules = children
                .network_policy()
                .expect("a NetworkPolicy")
                .spec
                .clone()
                .and_then(|s| s.egress)
                .unwrap_or_default();
            let found = (rules.iter().any(is_cluster_dns), nameserver_blocks(&rules));
            let expected = (*cluster_dns, nameservers.iter().map(|n| (*n).to_owned()).collect());
            if found == expected { Ok(()) } else { Err(format!("rendered {found:?}, expected {expected:?}")) }
        }
        (Ok(_), Refused(field, message)) => Err(format!("accepted, expected `{field}: …{message}…`")),
        (Err(problems), Refused(field, message)) => check_problems(&problems, &[target_at(field, message)]),
        (Err(problems), Rendered { .. }) => Err(format!("refused: {problems:#?}")),
    }
}

#[test]
fn every_combination_of_dns_egress_dns_policy_and_nameservers_renders_a_resolver_or_is_refused() {
    let on = example_policy;
    let on_custom = || policy_with(&[CUSTOM]);
    let off = || policy_with(&[DNS_OFF]);
    let off_custom = || policy_with(&[DNS_OFF, CUSTOM]);
    let cluster = Rendered { cluster_dns: true, nameservers: &[] };
    let nothing = Rendered { cluster_dns: false, nameservers: &[] };
    let unreachable = "`10.53.0.10` would be unreachable: the platform policy adds no DNS egress (egress.dns is false) and no platform target or destination is opened on port 53 to it, so the agents' queries to it would be dropped; leave it out";
    let node_only = "`Default` makes the agents ask only the node's resolvers, which cdtarget does not know and no rule of the agents' NetworkPolicy opens (none opens port 53 to an address), so the agents could resolve no name; leave dnsPolicy out so that the agents ask the cluster DNS";
    let none_alone = "dnsPolicy None needs at least one nameserver";
    run(&[
        // egress.dns: the cluster DNS for ClusterFirst*, listed nameservers always opened.
        ("dns, no dnsPolicy", on(), with_dns("", false), cluster),
        ("dns, ClusterFirst", on(), with_dns("ClusterFirst", false), cluster),
        ("dns, ClusterFirstWithHostNet", on(), with_dns("ClusterFirstWithHostNet", false), cluster),
        (
            "dns, ClusterFirst and a nameserver",
            on_custom(),
            with_dns("ClusterFirst", true),
            Rendered { cluster_dns: true, nameservers: &["10.53.0.10/32"] },
        ),
        ("dns, Default alone", on(), with_dns("Default", false), Refused("spec.dnsPolicy", node_only)),
        (
            "dns allowing nameservers, Default alone",
            on_custom(),
            with_dns("Default", false),
            Refused("spec.dnsPolicy", "or list the resolvers they should ask in dnsConfig.nameservers"),
        ),
        (
            "dns, Default and a nameserver",
            on_custom(),
            with_dns("Default", true),
            Rendered { cluster_dns: false, nameservers: &["10.53.0.10/32"] },
        ),
        ("dns, None alone", on(), with_dns("None", false), Refused("spec.dnsConfig.nameservers", none_alone)),
        (
            "dns, None and a nameserver",
            on_custom(),
            with_dns("None", true),
            Rendered { cluster_dns: false, nameservers: &["10.53.0.10/32"] },
        ),
        // No egress.dns: the cluster DNS is the platform's to provide; nothing else is opened.
        ("no dns, no dnsPolicy", off(), with_dns("", false), nothing),
        ("no dns, ClusterFirst", off(), with_dns("ClusterFirst", false), nothing),
        (
            "no dns, ClusterFirst and a nameserver",
            off_custom(),
            with_dns("ClusterFirst", true),
            Refused("spec.dnsConfig.nameservers[0]", unreachable),
        ),
        (
            "no dns, Default alone",
            off(),
            with_dns("Default", false),
            Refused("spec.dnsPolicy", "so that the agents ask the cluster DNS as the platform provides it"),
        ),
        (
            "no dns, Default and a nameserver",
            off_custom(),
            with_dns("Default", true),
            Refused("spec.dnsConfig.nameservers[0]", unreachable),
        ),
        ("no dns, None alone", off(), with_dns("None", false), Refused("spec.dnsConfig.nameservers", none_alone)),
        (
            "no dns, None and a nameserver",
            off_custom(),
            with_dns("None", true),
            Refused(
                "spec.dnsConfig.nameservers[0]",
                "leave it out, and with it dnsPolicy None (the agents then ask the cluster DNS as the platform provides it)",
            ),
        ),
        (
            "no dns, None and a nameserver the policy does not allow",
            off(),
            with_dns("None", true),
            Refused("spec.dnsConfig.nameservers", "custom nameservers are not allowed by the platform policy"),
        ),
    ]);
}

#[test]
fn a_resolver_another_rule_opens_on_port_53_is_reachable_without_a_dns_rule() {
    let resolver = platform_target("10.53.0.10/32", "[{port: 53, protocol: UDP}]");
    let range = platform_target("10.53.0.0/24", "[{port: 50, endPort: 60, protocol: TCP}]");
    let none_and_nameserver = with_dns("None", true);
    let nothing = Rendered { cluster_dns: false, nameservers: &[] };
    run(&[
        // The admins' resolver as a platform target: the agents reach it, no DNS rule is added.
        (
            "no dns, a platform target on UDP 53",
            policy_with(&[DNS_OFF, CUSTOM, (PLATFORM_TARGETS, &resolver)]),
            none_and_nameserver.clone(),
            nothing,
        ),
        (
            "no dns, a platform target on a TCP range over 53",
            policy_with(&[DNS_OFF, CUSTOM, (PLATFORM_TARGETS, &range)]),
            none_and_nameserver,
            nothing,
        ),
        // The tenant's own destination, opened on the policy's port 53.
        (
            "no dns, a destination on the policy's port 53",
            policy_with(&[DNS_OFF, CUSTOM, TENANT_53]),
            with_ips(r#"["10.53.0.0/24"]"#) + "  dnsPolicy: None\n  dnsConfig:\n    nameservers: [\"10.53.0.10\"]\n",
            nothing,
        ),
        // The node's resolvers may be behind a platform target on 53: cdtarget cannot tell.
        (
            "dns, Default alone and a platform target on UDP 53",
            policy_with(&[(PLATFORM_TARGETS, &resolver)]),
            with_dns("Default", false),
            nothing,
        ),
    ]);
}

#[test]
fn a_rule_that_does_not_carry_dns_to_the_nameserver_does_not_make_it_reachable() {
    // The tenant counts on a rule that looks close: SCTP 53, 53 to another address, 5353, or
    // the policy's port 53 to destinations that do not hold the nameserver.
    let sctp = platform_target("10.53.0.10/32", "[{port: 53, protocol: SCTP}]");
    let elsewhere = platform_target("10.54.0.10/32", "[{port: 53, protocol: UDP}]");
    let other_port = platform_target("10.53.0.10/32", "[{port: 5353, protocol: UDP}]");
    let unreachable = || Refused("spec.dnsConfig.nameservers[0]", "`10.53.0.10` would be unreachable");
    let none_and_nameserver = with_dns("None", true);
    run(&[
        (
            "SCTP 53",
            policy_with(&[DNS_OFF, CUSTOM, (PLATFORM_TARGETS, &sctp)]),
            none_and_nameserver.clone(),
            unreachable(),
        ),
        (
            "UDP 53 to another address",
            policy_with(&[DNS_OFF, CUSTOM, (PLATFORM_TARGETS, &elsewhere)]),
            none_and_nameserver.clone(),
            unreachable(),
        ),
        (
            "UDP 5353",
            policy_with(&[DNS_OFF, CUSTOM, (PLATFORM_TARGETS, &other_port)]),
            none_and_nameserver.clone(),
            unreachable(),
        ),
        (
            "port 53 to another destination",
            policy_with(&[DNS_OFF, CUSTOM, TENANT_53]),
            none_and_nameserver,
            unreachable(),
        ),
        (
            "Default with SCTP 53 only",
            policy_with(&[(PLATFORM_TARGETS, &sctp)]),
            with_dns("Default", false),
            Refused("spec.dnsPolicy", "so the agents could resolve no name"),
        ),
    ]);
}
