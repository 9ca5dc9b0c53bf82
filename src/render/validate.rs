//! Every check of a CDTarget, reporting all problems at once. What passes becomes a
//! [`ValidTarget`]: the parsed, canonical values the renderers build from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use ipnet::IpNet;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::api::labels::RESERVED_PREFIXES;
use crate::api::{CDTarget, CDTargetSpec, names};
use crate::policy::{Policy, cidr};
use crate::problem::{Problem, Problems};
use crate::schema_check;

/// KEDA derives the HPA name `keda-hpa-<name>` and rejects it past 63 characters.
pub const MAX_SCALED_OBJECT_NAME: usize = 54;

/// Trigger metadata keys of KEDA's `azure-pipelines` scaler, and what each accepts.
const TRIGGER_META: &[(&str, MetaKind)] = &[
    ("organizationURLFromEnv", MetaKind::Text),
    ("organizationURL", MetaKind::Url),
    ("personalAccessTokenFromEnv", MetaKind::Text),
    ("poolName", MetaKind::Text),
    ("poolID", MetaKind::Integer),
    ("targetPipelinesQueueLength", MetaKind::Integer),
    ("activationTargetPipelinesQueueLength", MetaKind::Integer),
    ("parent", MetaKind::Text),
    ("demands", MetaKind::Text),
    ("requireAllDemands", MetaKind::Boolean),
    ("requireAllDemandsAndIgnoreOthers", MetaKind::Boolean),
    ("caseInsensitiveDemandsProcessing", MetaKind::Boolean),
    ("jobsToFetch", MetaKind::Integer),
    ("fetchUnfinishedJobsOnly", MetaKind::Boolean),
];

#[derive(Clone, Copy)]
enum MetaKind {
    Text,
    Url,
    Integer,
    Boolean,
}

/// A CDTarget that passed every check, with its values parsed.
#[derive(Clone, Debug)]
pub struct ValidTarget<'a> {
    /// The CDTarget itself.
    pub target: &'a CDTarget,
    /// Its name.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Tenant destinations, canonical and without duplicates, in the order given.
    pub destinations: Vec<IpNet>,
    /// Custom nameservers from `dnsConfig`, as host networks.
    pub nameservers: Vec<IpNet>,
    /// Fewest agents.
    pub min_replicas: i32,
    /// Most agents.
    pub max_replicas: i32,
}

impl ValidTarget<'_> {
    /// The spec.
    pub fn spec(&self) -> &CDTargetSpec {
        &self.target.spec
    }
}

/// Checks a CDTarget against the policy.
pub fn validate<'a>(target: &'a CDTarget, policy: &Policy) -> Result<ValidTarget<'a>, Vec<Problem>> {
    let mut problems = Problems::default();
    let name = target.metadata.name.as_deref().unwrap_or_default();
    let namespace = target.metadata.namespace.as_deref().unwrap_or_default();
    check_name(name, &mut problems);

    let spec = &target.spec;
    let destinations = check_destinations(&spec.ip, policy, &mut problems);
    check_selector(&spec.additional_selector, &mut problems);
    check_image(&spec.agent_image, policy, &mut problems);
    for (i, secret) in spec.image_pull_secrets.iter().enumerate() {
        if let Err(e) = names::dns1123_subdomain(&secret.name) {
            problems.push(format!("spec.imagePullSecrets[{i}].name"), e);
        }
    }
    let (min_replicas, max_replicas) = check_replicas(spec, policy, &mut problems);
    check_env(spec, &mut problems);
    check_secret_ref("spec.tokenRef", Some(&spec.token_ref), true, &mut problems);
    check_secret_ref("spec.proxyRef", spec.proxy_ref.as_ref(), false, &mut problems);
    check_secret_ref("spec.caCertRef", spec.ca_cert_ref.as_ref(), false, &mut problems);
    check_config(spec, max_replicas, &mut problems);
    check_trigger_meta(&spec.trigger_meta, &mut problems);
    if min_replicas == 0 && !spec.trigger_meta.contains_key("parent") {
        // Azure DevOps fails queued jobs at once when the pool has no agent at all (seed defect 24).
        problems.push(
            "spec.minReplicaCount",
            "0 scales the pool to no agent, and Azure DevOps then fails queued jobs at once; register a placeholder agent and name it in triggerMeta.parent, or set minReplicaCount: 1",
        );
    }
    let nameservers = check_dns(spec, policy, &mut problems);

    problems.finish(ValidTarget { target, name, namespace, destinations, nameservers, min_replicas, max_replicas })
}

/// Checks a CDTarget document (any accepted `apiVersion`): its structure against the CRD schema
/// (unknown fields, wrong types), then every value. Problems of both kinds come back together.
pub fn check_document(value: &Value, namespace: &str, policy: &Policy) -> Result<CDTarget, Vec<Problem>> {
    let mut problems = Vec::new();
    let spec_value = value.get("spec").cloned().unwrap_or(Value::Object(Default::default()));
    let schema = spec_schema();
    let structural = schema_check::check(schema, schema, &spec_value, "spec");
    for key in value.as_object().into_iter().flat_map(|m| m.keys()) {
        if !["apiVersion", "kind", "metadata", "spec", "status"].contains(&key.as_str()) {
            let known = ["apiVersion", "kind", "metadata", "spec", "status"];
            problems.push(Problem::field(key.as_str(), schema_check::unknown_field_message(key, &known)));
        }
    }

    // Keys with a structural problem are left out so the rest can still be checked.
    let broken: BTreeSet<String> = structural.iter().filter_map(|p| top_level_spec_key(&p.field)).collect();
    let mut lenient = spec_value;
    if let Value::Object(map) = &mut lenient {
        map.retain(|key, _| !broken.contains(key));
    }
    problems.extend(structural);
    let spec: CDTargetSpec = match serde_json::from_value(lenient) {
        Ok(spec) => spec,
        Err(e) => {
            problems.push(Problem::field("spec", format!("cannot be read: {e}")));
            return Err(problems);
        }
    };

    let metadata = value.get("metadata");
    let text = |key: &str| metadata.and_then(|m| m.get(key)).and_then(Value::as_str).map(str::to_owned);
    let string_map = |key: &str| -> Option<BTreeMap<String, String>> {
        metadata.and_then(|m| m.get(key)).and_then(|v| serde_json::from_value(v.clone()).ok())
    };
    let mut target = CDTarget::new(&text("name").unwrap_or_default(), spec);
    target.metadata.namespace = Some(namespace.to_owned());
    target.metadata.labels = string_map("labels");
    target.metadata.annotations = string_map("annotations");
    target.metadata.finalizers =
        metadata.and_then(|m| m.get("finalizers")).and_then(|v| serde_json::from_value(v.clone()).ok());

    if let Err(semantic) = validate(&target, policy) {
        problems
            .extend(semantic.into_iter().filter(|p| top_level_spec_key(&p.field).is_none_or(|k| !broken.contains(&k))));
    }
    if problems.is_empty() { Ok(target) } else { Err(problems) }
}

fn top_level_spec_key(field: &str) -> Option<String> {
    let rest = field.strip_prefix("spec.")?;
    let end = rest.find(['.', '[']).unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

/// The `spec` schema from the CRD the cluster is given, so offline checks match the server's.
fn spec_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd = serde_json::to_value(CDTarget::crd()).expect("CRD is JSON");
        crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec").cloned().expect("CRD has a spec schema")
    })
}

fn check_name(name: &str, problems: &mut Problems) {
    if let Err(e) = names::dns1123_label(name) {
        problems.push("metadata.name", format!("{e} (the name is used for the agent pods' label)"));
    } else if name.len() > MAX_SCALED_OBJECT_NAME {
        problems.push(
            "metadata.name",
            format!(
                "is {} characters long; at most {MAX_SCALED_OBJECT_NAME} fit, because KEDA names the autoscaler `keda-hpa-<name>` within 63 characters",
                name.len()
            ),
        );
    }
}

fn check_destinations(ips: &[String], policy: &Policy, problems: &mut Problems) -> Vec<IpNet> {
    let mut destinations: Vec<IpNet> = Vec::new();
    if !ips.is_empty() && policy.ports.is_empty() {
        // Rendering the list without ports would silently drop it.
        problems.push("spec.ip", "the platform policy opens no egress ports to tenant destinations, so none can be reached; ask the cluster admins for ports or remove ip");
    }
    for (i, text) in ips.iter().enumerate() {
        let field = format!("spec.ip[{i}]");
        let net = match cidr::parse(text) {
            Ok(net) => net,
            Err(e) => {
                problems.push(field, e);
                continue;
            }
        };
        if cidr::is_everything(&net) {
            problems.push(&field, format!("`{text}` is every address; name the destinations the agents need"));
            continue;
        }
        let (family, minimum) = match net {
            IpNet::V4(_) => ("IPv4", policy.min_prefix_v4),
            IpNet::V6(_) => ("IPv6", policy.min_prefix_v6),
        };
        if net.prefix_len() < minimum {
            problems.push(
                &field,
                format!("`{text}` is broader than the policy allows; {family} destinations need a prefix of /{minimum} or longer"),
            );
            continue;
        }
        if let Some(forbidden) = policy.forbidden.iter().find(|f| cidr::overlaps(&net, f)) {
            problems.push(
                &field,
                format!("`{text}` overlaps the forbidden range {forbidden}; choose a destination outside it"),
            );
            continue;
        }
        if !destinations.contains(&net) {
            destinations.push(net);
        }
    }
    destinations
}

fn check_selector(selector: &BTreeMap<String, String>, problems: &mut Problems) {
    for (key, value) in selector {
        let field = format!("spec.additionalSelector.{key}");
        if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| key.starts_with(*p)) {
            problems
                .push(field, format!("label keys starting with `{prefix}` are set by cdtarget; choose another key"));
        } else if let Err(e) = names::label_key(key).and_then(|()| names::label_value(value)) {
            problems.push(field, e);
        }
    }
}

fn check_image(image: &str, policy: &Policy, problems: &mut Problems) {
    const FIELD: &str = "spec.agentImage";
    if image.is_empty() {
        problems.push(FIELD, "is required; expected an image reference such as `ghcr.io/acme/azp-agent:4.255.0`");
    } else if image.chars().any(char::is_whitespace) {
        problems.push(FIELD, format!("`{image}` contains whitespace; expected an image reference"));
    } else if !policy.allowed_image_prefixes.is_empty()
        && !policy.allowed_image_prefixes.iter().any(|p| image.starts_with(p.as_str()))
    {
        problems.push(
            FIELD,
            format!(
                "`{image}` is not allowed; images must start with one of: {}",
                policy.allowed_image_prefixes.join(", ")
            ),
        );
    }
}

fn check_replicas(spec: &CDTargetSpec, policy: &Policy, problems: &mut Problems) -> (i32, i32) {
    let ceiling = policy.max_replicas;
    let min = spec.min_replica_count.unwrap_or(1.min(ceiling));
    let max = spec.max_replica_count.unwrap_or(ceiling.max(min));
    if min < 0 {
        problems.push("spec.minReplicaCount", format!("{min} is negative; expected 0 or more"));
    }
    if max < 1 {
        problems.push("spec.maxReplicaCount", format!("{max} is too small; expected at least 1"));
    }
    if min > max {
        problems.push(
            "spec.minReplicaCount",
            format!("{min} is greater than maxReplicaCount {max}; expected minReplicaCount ≤ maxReplicaCount"),
        );
    }
    if max > ceiling {
        let field = if spec.max_replica_count.is_some() { "spec.maxReplicaCount" } else { "spec.minReplicaCount" };
        problems
            .push(field, format!("{max} exceeds the platform ceiling of {ceiling} agents; expected at most {ceiling}"));
    }
    (min, max)
}

fn check_env(spec: &CDTargetSpec, problems: &mut Problems) {
    let mut seen = BTreeSet::new();
    for (i, var) in spec.env.iter().enumerate() {
        let field = format!("spec.env[{i}].name");
        if var.name.is_empty() || var.name.contains('=') || !var.name.bytes().all(|b| b.is_ascii_graphic()) {
            problems.push(
                field,
                format!(
                    "`{}` is not a valid variable name; expected printable characters without '=' or spaces",
                    var.name
                ),
            );
        } else if !seen.insert(var.name.as_str()) {
            problems.push(field, format!("`{}` is set twice; each variable may appear once", var.name));
        }
    }
}

fn check_secret_ref(field: &str, name: Option<&String>, required: bool, problems: &mut Problems) {
    match name {
        Some(name) if !name.is_empty() => {
            if let Err(e) = names::dns1123_subdomain(name) {
                problems.push(field, format!("{e} (expected the name of a Secret in this namespace)"));
            }
        }
        _ if required => problems.push(field, "is required; expected the name of the Secret holding key AZP_TOKEN"),
        Some(_) => {
            problems.push(field, "must not be empty; expected the name of a Secret in this namespace, or leave it out")
        }
        None => {}
    }
}

fn check_config(spec: &CDTargetSpec, max_replicas: i32, problems: &mut Problems) {
    let config = &spec.config;
    check_url("spec.config.url", &config.url, problems);
    if config.pool_name.trim().is_empty() {
        problems.push("spec.config.poolName", "is required; expected the agent pool's name as shown in Azure DevOps");
    }
    if let Some(agent_name) = &config.agent_name {
        if agent_name.trim().is_empty() {
            problems.push("spec.config.agentName", "must not be empty; leave it out to name agents after their pods");
        } else if max_replicas > 1 {
            problems.push(
                "spec.config.agentName",
                format!("a fixed agent name only works with one agent, but maxReplicaCount is {max_replicas}; leave agentName out (agents are named after their pods) or set maxReplicaCount: 1"),
            );
        }
    }
    if config.work_dir.as_deref().is_some_and(|w| w.trim().is_empty()) {
        problems.push("spec.config.workDir", "must not be empty; leave it out for the agent's default `_work`");
    }
    if let Some(mtu) = &config.mtu_value
        && !mtu.parse::<u32>().is_ok_and(|m| (68..=65535).contains(&m))
    {
        problems.push(
            "spec.config.mtuValue",
            format!("`{mtu}` is not an MTU; expected a number from 68 to 65535, e.g. \"1400\""),
        );
    }
}

fn check_url(field: &str, url: &str, problems: &mut Problems) {
    if url.is_empty() {
        problems.push(field, "is required; expected the organization URL, e.g. `https://dev.azure.com/acme`");
    } else if !(url.starts_with("https://") || url.starts_with("http://")) || url.chars().any(char::is_whitespace) {
        problems.push(field, format!("`{url}` is not an http(s) URL; expected e.g. `https://dev.azure.com/acme`"));
    } else if url.ends_with('/') {
        problems.push(
            field,
            format!(
                "`{url}` ends with '/'; KEDA takes the organization from the last path segment, write `{}`",
                url.trim_end_matches('/')
            ),
        );
    }
}

fn check_trigger_meta(meta: &BTreeMap<String, String>, problems: &mut Problems) {
    let known: Vec<&str> = TRIGGER_META.iter().map(|(k, _)| *k).collect();
    for (key, value) in meta {
        let field = format!("spec.triggerMeta.{key}");
        let Some((_, kind)) = TRIGGER_META.iter().find(|(k, _)| k == key) else {
            // Only the message's own wording changes: the key quoted in it may contain "field".
            let message = schema_check::unknown_field_message(key, &known);
            let (head, accepted) = message.rsplit_once("; accepted fields: ").unwrap_or((&message, ""));
            let head = head.replacen("unknown field", "unknown azure-pipelines trigger key", 1);
            problems.push(field, format!("{head}; accepted azure-pipelines trigger keys: {accepted}"));
            continue;
        };
        match kind {
            MetaKind::Text => {}
            MetaKind::Url => check_url(&field, value, problems),
            MetaKind::Integer => {
                if !value.parse::<i64>().is_ok_and(|n| n >= 0) {
                    problems.push(field, format!("`{value}` is not a whole number; expected e.g. \"1\""));
                }
            }
            MetaKind::Boolean => {
                if !matches!(
                    value.as_str(),
                    "1" | "t" | "T" | "TRUE" | "true" | "True" | "0" | "f" | "F" | "FALSE" | "false" | "False"
                ) {
                    problems.push(field, format!("`{value}` is not a boolean; expected \"true\" or \"false\""));
                }
            }
        }
    }
    if meta.contains_key("jobsToFetch") {
        for conflicting in ["parent", "fetchUnfinishedJobsOnly"] {
            if meta.contains_key(conflicting) {
                problems.push(
                    "spec.triggerMeta.jobsToFetch",
                    format!("cannot be combined with `{conflicting}` (KEDA rejects the pair); remove one of them"),
                );
            }
        }
    }
}

fn check_dns(spec: &CDTargetSpec, policy: &Policy, problems: &mut Problems) -> Vec<IpNet> {
    const POLICIES: [&str; 4] = ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];
    if let Some(dns_policy) = &spec.dns_policy
        && !POLICIES.contains(&dns_policy.as_str())
    {
        problems.push(
            "spec.dnsPolicy",
            format!("`{dns_policy}` is not a DNS policy; expected one of {}", POLICIES.join(", ")),
        );
    }
    let listed = spec.dns_config.as_ref().and_then(|c| c.nameservers.as_ref()).map(Vec::as_slice).unwrap_or_default();
    if spec.dns_policy.as_deref() == Some("None") && listed.is_empty() {
        problems.push(
            "spec.dnsConfig.nameservers",
            "dnsPolicy None needs at least one nameserver; list them or choose another dnsPolicy",
        );
    }
    let mut nameservers = Vec::new();
    for (i, text) in listed.iter().enumerate() {
        let field = format!("spec.dnsConfig.nameservers[{i}]");
        match text.parse::<std::net::IpAddr>() {
            Err(_) => problems.push(field, format!("`{text}` is not an IP address; expected e.g. `10.0.0.10`")),
            Ok(addr) => {
                let net = IpNet::from(addr);
                match policy.forbidden.iter().find(|f| cidr::overlaps(&net, f)) {
                    Some(forbidden) => problems.push(
                        field,
                        format!("`{text}` is in the forbidden range {forbidden}; choose another nameserver"),
                    ),
                    None if nameservers.contains(&net) => {}
                    None => nameservers.push(net),
                }
            }
        }
    }
    nameservers
}
