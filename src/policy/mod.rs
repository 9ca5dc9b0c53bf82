//! The cluster admin's policy: parsed from its document (or the seed's legacy `cdtarget-ports`
//! format), checked, and turned into the [`Policy`] every CDTarget is rendered within.

pub mod address;
pub mod cidr;
pub mod jobs;
pub mod outbound;
pub(crate) mod tenancy;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use ipnet::IpNet;
use serde_json::Value;

use crate::api::names;
use crate::api::policy::{PolicyDocument, PortDocument};
use crate::problem::{Problem, Problems, join_path};
use crate::{schema_check, yaml};
pub use jobs::{Jobs, KedaSettings, Modes, RunOnce, RunOnceConvention};
use outbound::HostPattern;

/// A checked policy. Build it with [`parse`], [`from_document`] or [`Policy::default`].
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Ports tenant destinations are opened on; empty means tenants get no destinations.
    pub ports: Vec<Port>,
    /// Broadest IPv4 prefix a tenant may ask for.
    pub min_prefix_v4: u8,
    /// Broadest IPv6 prefix a tenant may ask for.
    pub min_prefix_v6: u8,
    /// Ranges no tenant destination may overlap.
    pub forbidden: Vec<IpNet>,
    /// The cluster DNS pods agents may query, when DNS egress is on.
    pub cluster_dns: Option<ClusterDns>,
    /// Destinations every agent may reach.
    pub platform_targets: Vec<PlatformTarget>,
    /// Allowed agent image prefixes; empty allows any image.
    pub allowed_image_prefixes: Vec<String>,
    /// Ceiling for `maxReplicaCount`.
    pub max_replicas: i32,
    /// Grace period of agent pods.
    pub termination_grace_period_seconds: i64,
    /// The non-root user agents run as.
    pub run_as_user: i64,
    /// NAT64 prefixes no tenant address may overlap.
    pub nat64_prefixes: Vec<IpNet>,
    /// Whether CDTargets may list their own nameservers.
    pub allow_custom_nameservers: bool,
    /// The most address space one CDTarget's destinations may open together.
    pub max_addresses: MaxAddresses,
    /// Hosts the URLs tenants set may point at.
    pub allowed_url_hosts: Vec<HostPattern>,
    /// Kinds tenants may not apply.
    pub tenancy: tenancy::Tenancy,
    /// The agent modes tenants may choose, and the default.
    pub modes: Modes,
    /// Settings of agents run as Jobs.
    pub jobs: Jobs,
    /// The KEDA the children are rendered for.
    pub keda: KedaSettings,
}

/// Caps on the union of one CDTarget's destinations, per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxAddresses {
    /// IPv4 addresses, at most 2^32.
    pub ipv4: u64,
    /// IPv6 addresses: as many as one network of this prefix length holds.
    pub ipv6_prefix_length: u8,
}

impl MaxAddresses {
    /// The IPv6 cap as a number of addresses (`u128::MAX` standing in for 2^128).
    pub fn ipv6(&self) -> u128 {
        1u128.checked_shl(128 - u32::from(self.ipv6_prefix_length)).unwrap_or(u128::MAX)
    }
}

impl Policy {
    /// The rules every tenant address is checked by ([`address::check`]).
    pub fn address_rules(&self) -> address::Rules<'_> {
        address::Rules {
            min_prefix_v4: self.min_prefix_v4,
            min_prefix_v6: self.min_prefix_v6,
            forbidden: &self.forbidden,
            nat64_prefixes: &self.nat64_prefixes,
        }
    }
}

/// A port (or range) and its protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Port {
    /// Protocol.
    pub protocol: Protocol,
    /// First port.
    pub port: u16,
    /// Last port of a range.
    pub end_port: Option<u16>,
}

/// A transport protocol of a NetworkPolicy port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        })
    }
}

/// Where the cluster DNS pods run, and the ports they listen on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDns {
    /// Their namespace.
    pub namespace: String,
    /// Their labels.
    pub pod_labels: BTreeMap<String, String>,
    /// The ports of the pods (never empty): what the cluster DNS rule opens.
    pub ports: Vec<Port>,
}

/// A destination every agent may reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformTarget {
    /// The network.
    pub cidr: IpNet,
    /// Its ports.
    pub ports: Vec<Port>,
}

impl Default for Policy {
    /// The documented safe defaults (see `docs/policy.md`).
    fn default() -> Self {
        from_document(&PolicyDocument::default()).expect("the default policy is valid")
    }
}

/// Reads a policy file: a policy document, a ConfigMap holding one under `policy.yaml`, or the
/// seed's `cdtarget-ports` format (a ConfigMap, or a mapping, with key `ports`: one port per
/// line). Problems carry `file`.
pub fn parse(text: &str, file: &str) -> Result<Policy, Vec<Problem>> {
    let located = |problems: Vec<Problem>, line: Option<usize>| -> Vec<Problem> {
        problems.into_iter().map(|p| p.located(file, Some(1), line)).collect()
    };
    let documents = yaml::parse_documents(text)
        .map_err(|e| vec![Problem::field("", format!("not valid YAML: {}", e.message)).located(file, None, e.line)])?;
    let (value, line) = match documents.as_slice() {
        [] => return Ok(Policy::default()),
        [one] => (&one.value, Some(one.line)),
        [_, second, ..] => {
            return Err(vec![Problem::field("", "a policy file holds exactly one YAML document").located(
                file,
                Some(second.index),
                Some(second.line),
            )]);
        }
    };
    from_value(value).map_err(|p| located(p, line))
}

/// Reads a policy from an already parsed YAML value (see [`parse`] for the accepted forms).
pub fn from_value(value: &Value) -> Result<Policy, Vec<Problem>> {
    if value.get("kind").and_then(Value::as_str) == Some("ConfigMap") {
        return from_config_map(value);
    }
    if let Some(Value::String(ports)) = value.get("ports")
        && value.as_object().is_some_and(|m| m.len() == 1)
    {
        return from_legacy_ports(ports).map_err(|p| p.into_iter().map(|p| p.under("ports")).collect());
    }
    from_document_value(value)
}

/// Reads the policy ConfigMap: key `policy.yaml` (a policy document) or the legacy key `ports`.
pub fn from_config_map(value: &Value) -> Result<Policy, Vec<Problem>> {
    let data = value.get("data").and_then(Value::as_object);
    let entry = |key: &str| data.and_then(|d| d.get(key)).and_then(Value::as_str);
    if let Some(text) = entry("policy.yaml") {
        let field = "data[policy.yaml]";
        let inner =
            yaml::parse_one(text).map_err(|e| vec![Problem::field(field, format!("not valid YAML: {}", e.message))])?;
        return from_document_value(&inner).map_err(|p| p.into_iter().map(|p| p.under(field)).collect());
    }
    if let Some(text) = entry("ports") {
        return from_legacy_ports(text).map_err(|p| p.into_iter().map(|p| p.under("data.ports")).collect());
    }
    Err(vec![Problem::field(
        "data",
        "the policy ConfigMap needs key `policy.yaml` (a policy document) or the legacy key `ports` (one port per line)",
    )])
}

/// The seed's format: one port per line, blank lines and surrounding whitespace ignored; every
/// other default stays. Any bad line rejects the whole list, naming the line.
pub fn from_legacy_ports(text: &str) -> Result<Policy, Vec<Problem>> {
    let mut problems = Problems::default();
    let mut ports = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        match trimmed.parse::<u16>() {
            Ok(port) if port > 0 => ports.push(PortDocument::tcp(i64::from(port))),
            _ => problems.push(
                "",
                format!("line {}: `{trimmed}` is not a port; expected one port number 1–65535 per line", i + 1),
            ),
        }
    }
    let problems = problems.into_vec();
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut document = PolicyDocument::default();
    document.egress.ports = ports;
    from_document(&document)
}

fn document_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let generator =
            schemars::generate::SchemaSettings::openapi3().with(|s| s.inline_subschemas = true).into_generator();
        serde_json::to_value(generator.into_root_schema_for::<PolicyDocument>()).expect("schema is JSON")
    })
}

/// Checks the structure of a policy document, then its values.
pub(crate) fn from_document_value(value: &Value) -> Result<Policy, Vec<Problem>> {
    if value.is_null() {
        return Ok(Policy::default());
    }
    let schema = document_schema();
    let mut structural = schema_check::check(schema, schema, value, "");
    missing_required(schema, value, "", &mut structural);
    if !structural.is_empty() {
        return Err(structural);
    }
    let document: PolicyDocument =
        serde_json::from_value(value.clone()).map_err(|e| vec![Problem::field("", e.to_string())])?;
    from_document(&document)
}

/// Reports every field the (inlined) document schema requires but `value` leaves out, with the
/// field's path and description, instead of a path-less deserialisation error.
fn missing_required(schema: &Value, value: &Value, path: &str, out: &mut Vec<Problem>) {
    let properties = schema.get("properties").and_then(Value::as_object);
    match value {
        Value::Object(map) => {
            let required = schema.get("required").and_then(Value::as_array).into_iter().flatten();
            for key in required.filter_map(Value::as_str) {
                if !map.contains_key(key) {
                    let description = properties
                        .and_then(|p| p.get(key))
                        .and_then(|p| p.get("description"))
                        .and_then(Value::as_str)
                        .map_or(String::new(), |d| format!(" ({})", d.trim_end_matches('.')));
                    out.push(Problem::field(join_path(path, key), format!("is required{description}")));
                }
            }
            for (key, child) in map {
                if let Some(property) = properties.and_then(|p| p.get(key)) {
                    missing_required(property, child, &join_path(path, key), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    missing_required(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Checks every value of a policy document and reports all problems at once.
pub fn from_document(document: &PolicyDocument) -> Result<Policy, Vec<Problem>> {
    let mut problems = Problems::default();
    let egress = &document.egress;
    let agents = &document.agents;

    let ports = check_ports(&egress.ports, "egress.ports", &mut problems);

    let min_prefix_v4 = u8::try_from(egress.min_prefix_length.ipv4).ok().filter(|p| *p <= 32);
    if min_prefix_v4.is_none() {
        problems.push(
            "egress.minPrefixLength.ipv4",
            format!("{} is out of range; expected 0–32", egress.min_prefix_length.ipv4),
        );
    }
    let min_prefix_v6 = u8::try_from(egress.min_prefix_length.ipv6).ok().filter(|p| *p <= 128);
    if min_prefix_v6.is_none() {
        problems.push(
            "egress.minPrefixLength.ipv6",
            format!("{} is out of range; expected 0–128", egress.min_prefix_length.ipv6),
        );
    }

    let mut forbidden = Vec::new();
    for (i, text) in egress.forbidden.iter().enumerate() {
        match cidr::parse(text) {
            Ok(net) => forbidden.push(net),
            Err(e) => problems.push(format!("egress.forbidden[{i}]"), e),
        }
    }

    let cluster_dns = egress.dns.then(|| {
        let dns = &egress.cluster_dns;
        if let Err(e) = names::dns1123_label(&dns.namespace) {
            problems.push("egress.clusterDns.namespace", e);
        }
        if dns.pod_labels.is_empty() {
            problems.push("egress.clusterDns.podLabels", "must select the DNS pods, e.g. `k8s-app: kube-dns`");
        }
        for (key, value) in &dns.pod_labels {
            if let Err(e) = names::label_key(key).and_then(|()| names::label_value(value)) {
                problems.push(format!("egress.clusterDns.podLabels.{key}"), e);
            }
        }
        if dns.ports.is_empty() {
            problems.push(
                "egress.clusterDns.ports",
                "must list the ports the DNS pods listen on, e.g. `{port: 53, protocol: UDP}` and `{port: 53, protocol: TCP}`; a rule without ports would open every port",
            );
        }
        let ports = check_ports(&dns.ports, "egress.clusterDns.ports", &mut problems);
        ClusterDns { namespace: dns.namespace.clone(), pod_labels: dns.pod_labels.clone(), ports }
    });

    let mut platform_targets = Vec::new();
    for (i, target) in egress.platform_targets.iter().enumerate() {
        let field = format!("egress.platformTargets[{i}]");
        let cidr = address::check(&target.cidr, address::Use::PlatformTarget, &address::Rules::SPELLING_ONLY);
        let cidr = cidr.map_err(|e| problems.push(format!("{field}.cidr"), e));
        if target.ports.is_empty() {
            problems.push(
                format!("{field}.ports"),
                "must list at least one port; a target without ports would open every port",
            );
        }
        let ports = check_ports(&target.ports, &format!("{field}.ports"), &mut problems);
        if let Ok(cidr) = cidr {
            platform_targets.push(PlatformTarget { cidr, ports });
        }
    }

    for (i, prefix) in agents.allowed_image_prefixes.iter().enumerate() {
        if prefix.trim().is_empty() || prefix.chars().any(char::is_whitespace) {
            problems.push(
                format!("agents.allowedImagePrefixes[{i}]"),
                "must be a non-empty image prefix without spaces, such as `ghcr.io/acme/`",
            );
        }
    }
    let max_replicas = i32::try_from(agents.max_replicas).ok().filter(|m| *m >= 1);
    if max_replicas.is_none() {
        problems.push(
            "agents.maxReplicas",
            format!("{} is out of range; expected a positive integer", agents.max_replicas),
        );
    }
    if agents.termination_grace_period_seconds < 0 {
        problems.push("agents.terminationGracePeriodSeconds", "must not be negative; expected seconds, e.g. 3600");
    }
    if agents.run_as_user < 1 {
        problems.push("agents.runAsUser", "agents never run as root; expected a user id of 1 or more, e.g. 1000");
    }

    let addresses = check_address_limits(document, &mut problems);
    let tenancy = tenancy::check(&document.tenancy, &mut problems);
    let modes = jobs::check_modes(&agents.modes, &mut problems);
    let jobs = jobs::check_jobs(&agents.jobs, &mut problems);
    let keda = jobs::check_keda(&document.keda, &mut problems);

    let policy = Policy {
        ports,
        min_prefix_v4: min_prefix_v4.unwrap_or(32),
        min_prefix_v6: min_prefix_v6.unwrap_or(128),
        forbidden,
        cluster_dns,
        platform_targets,
        allowed_image_prefixes: agents.allowed_image_prefixes.clone(),
        max_replicas: max_replicas.unwrap_or(1),
        termination_grace_period_seconds: agents.termination_grace_period_seconds,
        run_as_user: agents.run_as_user,
        nat64_prefixes: addresses.nat64_prefixes,
        allow_custom_nameservers: egress.allow_custom_nameservers,
        max_addresses: addresses.max_addresses,
        allowed_url_hosts: addresses.allowed_url_hosts,
        tenancy,
        modes,
        jobs,
        keda,
    };
    problems.finish(policy)
}

/// The checked address and URL limits of a policy document.
struct AddressLimits {
    nat64_prefixes: Vec<IpNet>,
    max_addresses: MaxAddresses,
    allowed_url_hosts: Vec<HostPattern>,
}

fn check_address_limits(document: &PolicyDocument, problems: &mut Problems) -> AddressLimits {
    let egress = &document.egress;
    let mut nat64_prefixes = Vec::new();
    for (i, text) in egress.nat64_prefixes.iter().enumerate() {
        match cidr::parse(text) {
            Ok(net @ IpNet::V6(_)) => nat64_prefixes.push(net),
            Ok(IpNet::V4(_)) => problems.push(
                format!("egress.nat64Prefixes[{i}]"),
                format!("`{text}` is IPv4; a NAT64 prefix is an IPv6 network such as `64:ff9b::/96`"),
            ),
            Err(e) => problems.push(format!("egress.nat64Prefixes[{i}]"), e),
        }
    }
    let caps = &egress.max_addresses_per_target;
    let ipv4 = u64::try_from(caps.ipv4).ok().filter(|n| *n <= 1 << 32);
    if ipv4.is_none() {
        problems.push(
            "egress.maxAddressesPerTarget.ipv4",
            format!("{} is out of range; expected a number of addresses from 0 to 4294967296", caps.ipv4),
        );
    }
    let ipv6_prefix_length = u8::try_from(caps.ipv6_prefix_length).ok().filter(|p| *p <= 128);
    if ipv6_prefix_length.is_none() {
        problems.push(
            "egress.maxAddressesPerTarget.ipv6PrefixLength",
            format!("{} is out of range; expected a prefix length 0–128", caps.ipv6_prefix_length),
        );
    }
    let mut allowed_url_hosts = Vec::new();
    for (i, text) in document.agents.allowed_url_hosts.iter().enumerate() {
        match HostPattern::parse(text) {
            Ok(pattern) => allowed_url_hosts.push(pattern),
            Err(e) => problems.push(format!("agents.allowedUrlHosts[{i}]"), e),
        }
    }
    AddressLimits {
        nat64_prefixes,
        max_addresses: MaxAddresses { ipv4: ipv4.unwrap_or(0), ipv6_prefix_length: ipv6_prefix_length.unwrap_or(128) },
        allowed_url_hosts,
    }
}

fn check_ports(ports: &[PortDocument], field: &str, problems: &mut Problems) -> Vec<Port> {
    let mut checked = Vec::new();
    for (i, document) in ports.iter().enumerate() {
        let field = format!("{field}[{i}]");
        let port = u16::try_from(document.port).ok().filter(|p| *p > 0);
        if port.is_none() {
            problems.push(format!("{field}.port"), format!("{} is not a port; expected 1–65535", document.port));
        }
        let end_port = match document.end_port {
            None => Some(None),
            Some(end) => match (u16::try_from(end).ok(), port) {
                (Some(end), Some(start)) if end >= start => Some(Some(end)),
                _ => {
                    let message = format!("{end} is not a valid end of range; expected a port from `port` up to 65535");
                    problems.push(format!("{field}.endPort"), message);
                    None
                }
            },
        };
        let protocol = match document.protocol.as_deref() {
            None | Some("TCP") => Some(Protocol::Tcp),
            Some("UDP") => Some(Protocol::Udp),
            Some("SCTP") => Some(Protocol::Sctp),
            Some(other) => {
                let message = format!("`{other}` is not a protocol; expected TCP, UDP or SCTP (upper case)");
                problems.push(format!("{field}.protocol"), message);
                None
            }
        };
        if let (Some(port), Some(end_port), Some(protocol)) = (port, end_port, protocol) {
            let port = Port { protocol, port, end_port };
            if !checked.contains(&port) {
                checked.push(port);
            }
        }
    }
    checked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_safe_ones() {
        let policy = Policy::default();
        let ports: Vec<u16> = policy.ports.iter().map(|p| p.port).collect();
        assert_eq!(ports, [443, 22, 5986]);
        assert!(policy.ports.iter().all(|p| p.protocol == Protocol::Tcp));
        assert_eq!((policy.min_prefix_v4, policy.min_prefix_v6), (24, 64));
        let forbidden: Vec<String> = policy.forbidden.iter().map(cidr::canonical).collect();
        assert_eq!(forbidden, ["169.254.0.0/16", "fe80::/10"]);
        let dns = policy.cluster_dns.expect("DNS egress is on");
        let dns_ports: Vec<(Protocol, u16)> = dns.ports.iter().map(|p| (p.protocol, p.port)).collect();
        assert_eq!(dns_ports, [(Protocol::Udp, 53), (Protocol::Tcp, 53)]);
    }

    #[test]
    fn issue_example_policy_parses() {
        let text = r#"
egress:
  ports: [{port: 443}, {port: 22}, {port: 5986, protocol: TCP}]
  minPrefixLength: {ipv4: 24, ipv6: 64}
  forbidden: ["169.254.0.0/16", "fe80::/10", "10.96.0.0/12"]
  dns: true
  platformTargets: [{cidr: "150.171.22.0/24", ports: [{port: 443}]}]
agents:
  allowedImagePrefixes: ["ghcr.io/acme/"]
  maxReplicas: 10
  terminationGracePeriodSeconds: 3600
"#;
        let policy = parse(text, "policy.yaml").unwrap();
        assert_eq!(policy.forbidden.len(), 3);
        assert_eq!(policy.platform_targets.len(), 1);
        assert_eq!(policy.allowed_image_prefixes, ["ghcr.io/acme/"]);
    }

    #[test]
    fn legacy_ports_tolerate_whitespace() {
        let policy = from_legacy_ports(" 443 \r\n\n22\t\n").unwrap();
        let ports: Vec<u16> = policy.ports.iter().map(|p| p.port).collect();
        assert_eq!(ports, [443, 22]);
    }

    #[test]
    fn legacy_ports_reject_garbage_with_its_line_number() {
        let problems = from_legacy_ports("443\n22x\n70000\n").unwrap_err();
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(messages.len(), 2);
        assert!(messages[0].starts_with("line 2: `22x`"), "{messages:?}");
        assert!(messages[1].starts_with("line 3: `70000`"), "{messages:?}");
    }

    #[test]
    fn legacy_config_map_is_read() {
        let text =
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cdtarget-ports}\ndata:\n  ports: |\n    443\n    8443\n";
        let policy = parse(text, "ports.yaml").unwrap();
        let ports: Vec<u16> = policy.ports.iter().map(|p| p.port).collect();
        assert_eq!(ports, [443, 8443]);
    }
}
