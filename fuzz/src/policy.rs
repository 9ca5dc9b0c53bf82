//! `policy_parse`: arbitrary bytes → the platform policy parser, both as a policy file (policy
//! document, ConfigMap with `policy.yaml`, or the legacy `cdtarget-ports` form) and as the
//! legacy one-port-per-line text.
//!
//! Invariants: no panic; a refusal names the file; an accepted policy holds only values the
//! renderer can trust (ports 1–65535 with ordered ranges and no duplicates, prefix bounds within
//! the family, platform targets that are never every address and always name ports, a positive
//! replica ceiling, a non-root user, a DNS namespace that is a label, DNS pods selected by at
//! least one label on at least one valid port, image prefixes without spaces); and a CDTarget
//! rendered under it opens no address it forbids.

use cdtarget::api::CDTarget;
use cdtarget::api::keda::KedaVersion;
use cdtarget::policy::{self, Policy};
use cdtarget::render::{self, Scaling, SecretDigests};
use serde_json::json;

/// The name the policy is read under.
pub const FILE: &str = "policy.yaml";

/// The fuzz target.
pub fn check(data: &[u8]) {
    let text = super::text(data);
    match policy::parse(&text, FILE) {
        Ok(policy) => check_policy(&policy),
        Err(problems) => {
            assert!(!problems.is_empty(), "a refusal without a problem");
            for problem in problems {
                assert_eq!(problem.file.as_deref(), Some(FILE), "problem names no file: {problem:?}");
                assert!(!problem.message.is_empty(), "problem says nothing: {problem:?}");
            }
        }
    }
    if let Ok(policy) = policy::from_legacy_ports(&text) {
        check_policy(&policy);
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        assert!(!lines.is_empty() || policy.ports.is_empty(), "ports from no line");
        for port in &policy.ports {
            assert!(lines.iter().any(|l| l.parse::<u16>() == Ok(port.port)), "legacy port {} is on no line", port.port);
        }
    }
}

fn check_policy(policy: &Policy) {
    let mut seen = Vec::new();
    let dns_ports = policy.cluster_dns.iter().flat_map(|d| &d.ports);
    for port in policy.ports.iter().chain(policy.platform_targets.iter().flat_map(|t| &t.ports)).chain(dns_ports) {
        assert!(port.port >= 1, "port 0 accepted");
        assert!(port.end_port.is_none_or(|end| end >= port.port), "range {port:?} ends before it starts");
    }
    for port in &policy.ports {
        assert!(!seen.contains(port), "port {port:?} listed twice");
        seen.push(*port);
    }
    assert!(policy.min_prefix_v4 <= 32 && policy.min_prefix_v6 <= 128, "prefix bounds out of range");
    for net in &policy.forbidden {
        assert_eq!(*net, net.trunc(), "forbidden range {net} has host bits");
    }
    for target in &policy.platform_targets {
        assert!(target.cidr.prefix_len() > 0, "platform target {} is every address", target.cidr);
        assert!(!target.ports.is_empty(), "platform target {} opens every port", target.cidr);
    }
    assert!(policy.max_replicas >= 1, "replica ceiling {}", policy.max_replicas);
    assert!(policy.run_as_user >= 1, "agents would run as root");
    assert!(policy.termination_grace_period_seconds >= 0, "negative grace period");
    if let Some(dns) = &policy.cluster_dns {
        let label = &dns.namespace;
        let is_label = !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        assert!(is_label, "cluster DNS namespace `{label}` is no namespace name");
        assert!(!dns.pod_labels.is_empty(), "cluster DNS peer selects every pod");
        assert!(!dns.ports.is_empty(), "cluster DNS rule opens every port");
    }
    for prefix in &policy.allowed_image_prefixes {
        assert!(!prefix.trim().is_empty() && !prefix.contains(char::is_whitespace), "image prefix `{prefix}`");
    }
    check_rendered_under(policy);
}

/// A CDTarget asking for a few ordinary destinations, rendered under `policy`, opens nothing the
/// policy forbids (platform targets are the admins' own and excepted).
fn check_rendered_under(policy: &Policy) {
    let spec = json!({
        "ip": ["10.1.0.0/24", "203.0.113.7", "2001:db8::/64"],
        "agentImage": policy.allowed_image_prefixes.first().map_or("ghcr.io/acme/agent:1".to_owned(), |p| format!("{p}agent:1")),
        "tokenRef": "azp-token",
        "config": { "url": "https://dev.azure.com/acme", "poolName": "linux" },
    });
    let spec = serde_json::from_value(spec).expect("the fixture spec deserialises");
    let mut target = CDTarget::new("agents", spec);
    target.metadata.namespace = Some("tenant-a".into());
    if let Ok(children) =
        render::render(&target, policy, &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))
    {
        super::address::assert_egress_within_policy(&children, policy, "CDTarget under the fuzzed policy");
    }
}
