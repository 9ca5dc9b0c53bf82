//! The egress NetworkPolicy of a CDTarget's agents.
//!
//! Rules, each with explicit destinations and explicit ports (never an empty rule, never "all
//! ports", never "all destinations"): the tenant's destinations on the policy's ports; DNS to
//! the cluster DNS pods (on the policy's `clusterDns.ports`) and to custom nameservers (on 53);
//! the platform's always-allowed targets.

use std::collections::BTreeMap;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{ValidTarget, child_metadata, selector_labels};
use crate::policy::{Policy, Port, Protocol, cidr};

/// Renders the NetworkPolicy named after the CDTarget.
pub(crate) fn network_policy(valid: &ValidTarget<'_>, policy: &Policy) -> NetworkPolicy {
    let mut egress = Vec::new();
    if !valid.destinations.is_empty() && !policy.ports.is_empty() {
        egress.push(rule(ip_peers(&valid.destinations), &policy.ports));
    }
    egress.extend(dns_rules(valid, policy));
    egress.extend(platform_rules(policy));
    NetworkPolicy {
        metadata: child_metadata(valid, valid.name),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector { match_labels: Some(selector_labels(valid)), ..Default::default() }),
            // Explicit, so ingress is not denied as a side effect (seed defect 4).
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(egress),
            ingress: None,
        }),
    }
}

/// The ports of the custom nameserver rule: resolv.conf has no port, so a resolver is on 53.
pub(crate) const NAMESERVER_PORTS: [Port; 2] = [
    Port { protocol: Protocol::Udp, port: 53, end_port: None },
    Port { protocol: Protocol::Tcp, port: 53, end_port: None },
];

fn dns_rules(valid: &ValidTarget<'_>, policy: &Policy) -> Vec<NetworkPolicyEgressRule> {
    let Some(dns) = &policy.cluster_dns else { return Vec::new() };
    let mut rules = Vec::new();
    // With dnsPolicy None or Default the pods never ask the cluster DNS.
    if !matches!(valid.spec().dns_policy.as_deref(), Some("None" | "Default")) {
        let peer = NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("kubernetes.io/metadata.name".into(), dns.namespace.clone())])),
                ..Default::default()
            }),
            pod_selector: Some(LabelSelector { match_labels: Some(dns.pod_labels.clone()), ..Default::default() }),
            ip_block: None,
        };
        // The pods' own ports: the policy is matched after the DNS Service has forwarded.
        rules.push(rule(vec![peer], &dns.ports));
    }
    if !valid.nameservers.is_empty() {
        rules.push(rule(ip_peers(&valid.nameservers), &NAMESERVER_PORTS));
    }
    rules
}

/// One rule per distinct port set (order ignored), holding every platform target with that set,
/// in the order the policy lists them.
fn platform_rules(policy: &Policy) -> Vec<NetworkPolicyEgressRule> {
    let mut by_ports: Vec<(Vec<Port>, Vec<IpNet>)> = Vec::new();
    for target in &policy.platform_targets {
        let mut ports = target.ports.clone();
        ports.sort();
        match by_ports.iter_mut().find(|(set, _)| *set == ports) {
            Some((_, cidrs)) => cidrs.push(target.cidr),
            None => by_ports.push((ports, vec![target.cidr])),
        }
    }
    by_ports
        .into_iter()
        .filter(|(ports, _)| !ports.is_empty())
        .map(|(ports, cidrs)| rule(ip_peers(&cidrs), &ports))
        .collect()
}

fn ip_peers(networks: &[IpNet]) -> Vec<NetworkPolicyPeer> {
    networks
        .iter()
        .map(|net| NetworkPolicyPeer {
            ip_block: Some(IPBlock { cidr: cidr::canonical(net), except: None }),
            ..Default::default()
        })
        .collect()
}

fn rule(to: Vec<NetworkPolicyPeer>, ports: &[Port]) -> NetworkPolicyEgressRule {
    debug_assert!(!to.is_empty() && !ports.is_empty(), "an egress rule always names destinations and ports");
    NetworkPolicyEgressRule {
        to: Some(to),
        ports: Some(
            ports
                .iter()
                .map(|p| NetworkPolicyPort {
                    port: Some(IntOrString::Int(i32::from(p.port))),
                    end_port: p.end_port.map(i32::from),
                    protocol: Some(p.protocol.to_string()),
                })
                .collect(),
        ),
    }
}
