//! The agents' DNS: the cluster DNS rule as the policy describes the DNS pods (issue #26,
//! point 1), checked against the documentation.

use cdtarget::policy::{self, Policy, Protocol};
use cdtarget::render::{self, Scaling, SecretDigests};

use super::support::{self, example_policy, valid_plus};

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
    let children = render::render(&target, &policy, &SecretDigests::new(), Scaling::Keda).expect("renders");
    insta::assert_snapshot!("openshift__NetworkPolicy", cdtarget::yaml::to_yaml(&children.network_policy));
}
