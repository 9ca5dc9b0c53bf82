//! Every check of a CDTarget, reporting all problems at once. What passes becomes a
//! [`ValidTarget`]: the parsed, canonical values the renderers build from.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::OnceLock;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use kube::CustomResourceExt;
use serde_json::Value;

use crate::api::cdtarget::limits;
use crate::api::labels::RESERVED_PREFIXES;
use crate::api::{AgentMode, CDTarget, CDTargetSpec, names};
use crate::policy::address::{self, Use};
use crate::policy::{Policy, Port, Protocol, RunOnceConvention, outbound};
use crate::problem::{Problem, Problems};
use crate::schema_check;

/// Kubernetes' bound on the search list, all domains with a space between them.
const MAX_SEARCH_LIST_CHARS: usize = 2048;

/// KEDA derives the HPA name `keda-hpa-<name>` and rejects it past 63 characters.
pub(crate) const MAX_SCALED_OBJECT_NAME: usize = 54;

/// Trigger metadata keys of KEDA's `azure-pipelines` scaler, and what each accepts.
const TRIGGER_META: &[(&str, MetaKind)] = &[
    ("organizationURLFromEnv", MetaKind::UrlVariable),
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
    // KEDA 2.21 and later; cdtarget sets it in Job mode (docs/rendering.md, "Job mode").
    ("scaleOnInFlight", MetaKind::Boolean),
];

/// The trigger key that makes KEDA count the job requests busy agents have received.
pub(crate) const SCALE_ON_IN_FLIGHT: &str = "scaleOnInFlight";

#[derive(Clone, Copy)]
enum MetaKind {
    Text,
    Url,
    /// The name of the variable KEDA reads the organization URL from: only the rendered one.
    UrlVariable,
    Integer,
    Boolean,
}

/// A CDTarget that passed every check, with its values parsed.
#[derive(Clone, Debug)]
pub(crate) struct ValidTarget<'a> {
    /// The CDTarget itself.
    pub target: &'a CDTarget,
    /// Its name.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Tenant destinations, canonical and without duplicates, in the order given.
    pub destinations: Vec<IpNet>,
    /// Custom nameservers from `dnsConfig`, as host networks, canonical and without duplicates,
    /// in the order given.
    pub nameservers: Vec<IpNet>,
    /// Fewest agents.
    pub min_replicas: i32,
    /// Most agents.
    pub max_replicas: i32,
    /// How the agents run: `spec.mode`, or the policy's default.
    pub mode: AgentMode,
    /// In Job mode, what makes the agent image run once (the policy's `agents.jobs.runOnce`
    /// entry for it); `None` in Deployment mode.
    pub run_once: Option<RunOnceConvention>,
}

impl ValidTarget<'_> {
    /// The spec.
    pub fn spec(&self) -> &CDTargetSpec {
        &self.target.spec
    }
}

/// Checks a CDTarget against the policy.
pub(crate) fn validate<'a>(target: &'a CDTarget, policy: &Policy) -> Result<ValidTarget<'a>, Vec<Problem>> {
    let mut problems = Problems::default();
    let name = target.metadata.name.as_deref().unwrap_or_default();
    let namespace = target.metadata.namespace.as_deref().unwrap_or_default();
    check_name(name, &mut problems);

    let spec = &target.spec;
    let mode = check_mode(spec, policy, &mut problems);
    let destinations = check_destinations(&spec.ip, policy, &mut problems);
    check_selector(&spec.additional_selector, &mut problems);
    check_image(&spec.agent_image, policy, &mut problems);
    let run_once = (mode == AgentMode::Job).then(|| check_run_once(spec, policy, &mut problems)).flatten();
    let pull_secrets = spec.image_pull_secrets.len();
    if within("spec.imagePullSecrets", pull_secrets, limits::IMAGE_PULL_SECRETS, "", &mut problems) {
        for (i, secret) in spec.image_pull_secrets.iter().enumerate() {
            if let Err(e) = names::dns1123_subdomain(&secret.name) {
                problems.push(format!("spec.imagePullSecrets[{i}].name"), e);
            }
        }
    }
    check_resources(spec, &mut problems);
    let (min_replicas, max_replicas) = check_replicas(spec, policy, &mut problems);
    check_env(spec, &mut problems);
    check_secret_ref("spec.tokenRef", Some(&spec.token_ref), true, &mut problems);
    check_secret_ref("spec.proxyRef", spec.proxy_ref.as_ref(), false, &mut problems);
    check_secret_ref("spec.caCertRef", spec.ca_cert_ref.as_ref(), false, &mut problems);
    check_config(spec, policy, max_replicas, mode, &mut problems);
    check_trigger_meta(&spec.trigger_meta, policy, mode, &mut problems);
    if min_replicas == 0 && !spec.trigger_meta.contains_key("parent") {
        // Azure DevOps fails queued jobs at once when the pool has no agent at all (seed defect 24).
        problems.push(
            "spec.minReplicaCount",
            "0 scales the pool to no agent, and Azure DevOps then fails queued jobs at once; register a placeholder agent and name it in triggerMeta.parent, or set minReplicaCount: 1",
        );
    }
    let nameservers = check_dns(spec, policy, &destinations, &mut problems);
    check_resolvable(spec, policy, &destinations, &mut problems);

    problems.finish(ValidTarget {
        target,
        name,
        namespace,
        destinations,
        nameservers,
        min_replicas,
        max_replicas,
        mode,
        run_once,
    })
}

/// `spec.mode`: one of the modes, and one the policy allows; without it, the policy's default.
/// A refused mode is reported and the default is checked in its place.
fn check_mode(spec: &CDTargetSpec, policy: &Policy, problems: &mut Problems) -> AgentMode {
    let Some(text) = spec.mode.as_deref() else { return policy.modes.default };
    let allowed = policy.modes.allowed_list();
    match AgentMode::parse(text) {
        None => {
            let accepted = AgentMode::ALL.map(AgentMode::as_str).join(", ");
            problems.push(
                "spec.mode",
                format!(
                    "`{text}` is not an agent mode; expected one of {accepted} (the platform policy allows {allowed})"
                ),
            );
            policy.modes.default
        }
        Some(mode) if !policy.modes.allowed.contains(&mode) => {
            problems.push(
                "spec.mode",
                format!("`{mode}` is not allowed by the platform policy (agents.modes.allowed); it allows {allowed}"),
            );
            policy.modes.default
        }
        Some(mode) => mode,
    }
}

/// In Job mode: how the image runs once (the policy must say), and no variable of the tenant's
/// `env` may undo it (an agent that does not exit would take job after job in one Job).
fn check_run_once(spec: &CDTargetSpec, policy: &Policy, problems: &mut Problems) -> Option<RunOnceConvention> {
    let Some(convention) = policy.jobs.run_once_for(&spec.agent_image) else {
        problems.push(
            "spec.agentImage",
            format!(
                "`{}` has no run-once convention in the platform policy (agents.jobs.runOnce lists the prefixes {}), so as a Job its agent might not exit after one job; use an image with one of those prefixes, or spec.mode: Deployment",
                spec.agent_image,
                policy.jobs.prefixes()
            ),
        );
        return None;
    };
    if let RunOnceConvention::Environment { name, .. } = convention
        && let Some(i) = spec.env.iter().position(|var| &var.name == name)
    {
        problems.push(
            format!("spec.env[{i}].name"),
            format!("`{name}` makes the agent run once in Job mode (the platform policy's agents.jobs.runOnce) and is set by cdtarget; remove it from env"),
        );
    }
    Some(convention.clone())
}

/// Checks a CDTarget document (any accepted `apiVersion`): its structure against the CRD schema
/// (unknown fields, wrong types), then every value. Problems of both kinds come back together.
pub(crate) fn check_document(value: &Value, namespace: &str, policy: &Policy) -> Result<CDTarget, Vec<Problem>> {
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

/// Reports a list (or map) longer than its bound; the entries of such a list are not checked one
/// by one, so an oversized list costs one problem, not one per entry.
fn within(field: &str, len: usize, bound: usize, hint: &str, problems: &mut Problems) -> bool {
    if len <= bound {
        return true;
    }
    let entries = if bound == 1 { "entry" } else { "entries" };
    problems.push(field, format!("has {len} entries; at most {bound} {entries} are accepted{hint}"));
    false
}

fn check_destinations(ips: &[String], policy: &Policy, problems: &mut Problems) -> Vec<IpNet> {
    if !ips.is_empty() && policy.ports.is_empty() {
        // Rendering the list without ports would silently drop it.
        problems.push("spec.ip", "the platform policy opens no egress ports to tenant destinations, so none can be reached; ask the cluster admins for ports or remove ip");
    }
    let hint = "; cover neighbouring addresses with one CIDR (as broad as the policy's minPrefixLength allows)";
    if !within("spec.ip", ips.len(), limits::IP, hint, problems) {
        return Vec::new();
    }
    let rules = policy.address_rules();
    let mut seen = HashSet::with_capacity(ips.len());
    let mut destinations = Vec::new();
    for (i, text) in ips.iter().enumerate() {
        match address::check(text, Use::Destination, &rules) {
            // Equal after canonical form: kept once, where it first appears.
            Ok(net) => {
                if seen.insert(net) {
                    destinations.push(net);
                }
            }
            Err(e) => problems.push(format!("spec.ip[{i}]"), e),
        }
    }
    check_address_space(&destinations, policy, problems);
    destinations
}

/// The union of the destinations, per family, against the policy's caps.
fn check_address_space(destinations: &[IpNet], policy: &Policy, problems: &mut Problems) {
    let v4: Vec<Ipv4Net> =
        destinations.iter().filter_map(|n| if let IpNet::V4(n) = n { Some(*n) } else { None }).collect();
    let v6: Vec<Ipv6Net> =
        destinations.iter().filter_map(|n| if let IpNet::V6(n) = n { Some(*n) } else { None }).collect();
    let cap = policy.max_addresses;
    let v4_total: u64 = Ipv4Net::aggregate(&v4).iter().map(|n| 1u64 << (32 - n.prefix_len())).sum();
    if v4_total > cap.ipv4 {
        problems.push(
            "spec.ip",
            format!(
                "the IPv4 destinations open {v4_total} addresses together; the platform policy allows at most {} per CDTarget (egress.maxAddressesPerTarget.ipv4); list narrower destinations",
                cap.ipv4
            ),
        );
    }
    let v6_total = Ipv6Net::aggregate(&v6)
        .iter()
        .map(|n| 1u128.checked_shl(128 - u32::from(n.prefix_len())).unwrap_or(u128::MAX))
        .fold(0u128, u128::saturating_add);
    if v6_total > cap.ipv6() {
        let log2 = 127 - v6_total.leading_zeros();
        let most = cap.ipv6_prefix_length;
        problems.push(
            "spec.ip",
            format!(
                "the IPv6 destinations open about 2^{log2} addresses together, more than one /{most} holds (2^{}), the most the platform policy allows per CDTarget (egress.maxAddressesPerTarget.ipv6PrefixLength); list narrower destinations",
                128 - u32::from(most)
            ),
        );
    }
}

fn check_selector(selector: &BTreeMap<String, String>, problems: &mut Problems) {
    if !within("spec.additionalSelector", selector.len(), limits::ADDITIONAL_SELECTOR, "", problems) {
        return;
    }
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

/// Resource names are checked by the API server; only the lists are bounded here.
fn check_resources(spec: &CDTargetSpec, problems: &mut Problems) {
    let Some(resources) = &spec.agent_resources else { return };
    for (field, map) in
        [("spec.agentResources.requests", &resources.requests), ("spec.agentResources.limits", &resources.limits)]
    {
        within(field, map.as_ref().map_or(0, BTreeMap::len), limits::RESOURCES, "", problems);
    }
    if resources.claims.as_ref().is_some_and(|claims| !claims.is_empty()) {
        problems.push(
            "spec.agentResources.claims",
            "is not supported: the agent pod declares no resource claims for it to use; remove claims",
        );
    }
}

fn check_env(spec: &CDTargetSpec, problems: &mut Problems) {
    if !within("spec.env", spec.env.len(), limits::ENV, "", problems) {
        return;
    }
    let mut seen = HashSet::with_capacity(spec.env.len());
    for (i, var) in spec.env.iter().enumerate() {
        let field = format!("spec.env[{i}].name");
        if var.name == "AZP_URL" {
            // The tenant's env replaces rendered variables; this one would bypass config.url's checks.
            problems.push(
                field,
                "`AZP_URL` is rendered from config.url, which is checked against the platform's allowed hosts; set config.url instead",
            );
            continue;
        }
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

fn check_config(spec: &CDTargetSpec, policy: &Policy, max_replicas: i32, mode: AgentMode, problems: &mut Problems) {
    let config = &spec.config;
    check_url("spec.config.url", &config.url, policy, problems);
    if config.pool_name.trim().is_empty() {
        problems.push("spec.config.poolName", "is required; expected the agent pool's name as shown in Azure DevOps");
    }
    if let Some(agent_name) = &config.agent_name {
        if agent_name.trim().is_empty() {
            problems.push("spec.config.agentName", "must not be empty; leave it out to name agents after their pods");
        } else if mode == AgentMode::Job {
            problems.push(
                "spec.config.agentName",
                "is for Deployment mode only: in Job mode every Job registers an agent, and agents of one name replace each other's registration; leave agentName out (agents are named after their pods)",
            );
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

/// A URL the agent or KEDA calls with the tenant's token ([`outbound::check_url`]).
fn check_url(field: &str, url: &str, policy: &Policy, problems: &mut Problems) {
    if url.is_empty() {
        problems.push(field, "is required; expected the organization URL, e.g. `https://dev.azure.com/acme`");
    } else if let Err(e) = outbound::check_url(url, &policy.allowed_url_hosts, &policy.address_rules()) {
        problems.push(field, e);
    }
}

fn check_trigger_meta(meta: &BTreeMap<String, String>, policy: &Policy, mode: AgentMode, problems: &mut Problems) {
    if !within("spec.triggerMeta", meta.len(), limits::TRIGGER_META, "", problems) {
        return;
    }
    if mode == AgentMode::Job && meta.contains_key(SCALE_ON_IN_FLIGHT) {
        problems.push(
            format!("spec.triggerMeta.{SCALE_ON_IN_FLIGHT}"),
            "is set by cdtarget in Job mode, so that KEDA starts exactly one Job per queued pipeline job; remove it",
        );
    }
    let known: Vec<&str> = TRIGGER_META.iter().map(|(k, _)| *k).collect();
    for (key, value) in meta {
        if mode == AgentMode::Job && key == SCALE_ON_IN_FLIGHT {
            continue; // Refused above, whatever its value.
        }
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
            MetaKind::Url => check_url(&field, value, policy, problems),
            MetaKind::UrlVariable => {
                if value != "AZP_URL" {
                    problems.push(
                        field,
                        format!("`{value}` is not accepted: KEDA would call the URL in that variable with the token; only `AZP_URL` (rendered from the checked config.url) is, or leave the key out"),
                    );
                }
            }
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

fn check_dns(spec: &CDTargetSpec, policy: &Policy, destinations: &[IpNet], problems: &mut Problems) -> Vec<IpNet> {
    const POLICIES: [&str; 4] = ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];
    if let Some(dns_policy) = &spec.dns_policy
        && !POLICIES.contains(&dns_policy.as_str())
    {
        problems.push(
            "spec.dnsPolicy",
            format!("`{dns_policy}` is not a DNS policy; expected one of {}", POLICIES.join(", ")),
        );
    }
    let config = spec.dns_config.as_ref();
    let listed = config.and_then(|c| c.nameservers.as_ref()).map(Vec::as_slice).unwrap_or_default();
    if spec.dns_policy.as_deref() == Some("None") && listed.is_empty() {
        let message = if policy.allow_custom_nameservers {
            "dnsPolicy None needs at least one nameserver; list them or choose another dnsPolicy"
        } else {
            "dnsPolicy None needs at least one nameserver, and the platform policy allows no custom nameservers (egress.allowCustomNameservers); choose another dnsPolicy"
        };
        problems.push("spec.dnsConfig.nameservers", message);
    }
    if let Some(config) = config {
        check_dns_lists(config, problems);
    }
    if listed.is_empty() {
        return Vec::new();
    }
    if !policy.allow_custom_nameservers {
        problems.push(
            "spec.dnsConfig.nameservers",
            "custom nameservers are not allowed by the platform policy (egress.allowCustomNameservers is false); leave dnsConfig.nameservers out so that the agents use the cluster DNS",
        );
        return Vec::new();
    }
    if !within("spec.dnsConfig.nameservers", listed.len(), limits::NAMESERVERS, " (Kubernetes' limit)", problems) {
        return Vec::new();
    }
    let rules = policy.address_rules();
    let mut nameservers: Vec<IpNet> = Vec::new();
    for (i, text) in listed.iter().enumerate() {
        match address::check(text, Use::Nameserver, &rules) {
            Ok(net) if nameservers.contains(&net) => {}
            // With egress.dns the nameserver rule opens it; without, only another rule can.
            Ok(net) if policy.cluster_dns.is_none() && !dns_opened_to(&net, destinations, policy) => {
                let instead = if spec.dns_policy.as_deref() == Some("None") {
                    "leave it out, and with it dnsPolicy None (the agents then ask the cluster DNS as the platform provides it)"
                } else {
                    "leave it out"
                };
                problems.push(
                    format!("spec.dnsConfig.nameservers[{i}]"),
                    format!(
                        "`{text}` would be unreachable: the platform policy adds no DNS egress (egress.dns is false) and no platform target or destination is opened on port 53 to it, so the agents' queries to it would be dropped; {instead}"
                    ),
                );
            }
            Ok(net) => nameservers.push(net),
            Err(e) => problems.push(format!("spec.dnsConfig.nameservers[{i}]"), e),
        }
    }
    nameservers
}

/// Refuses `dnsPolicy: Default` without nameservers when no rule of the agents' NetworkPolicy
/// opens port 53 to any address: the agents would ask only the node's resolvers, which cdtarget
/// does not know, and could resolve no name (docs/rendering.md, "Agents that could resolve no
/// name"). The cluster DNS is never refused: under `egress.dns: false` it is the platform's to
/// provide.
fn check_resolvable(spec: &CDTargetSpec, policy: &Policy, destinations: &[IpNet], problems: &mut Problems) {
    let listed = spec.dns_config.as_ref().and_then(|c| c.nameservers.as_ref()).is_some_and(|n| !n.is_empty());
    if spec.dns_policy.as_deref() != Some("Default") || listed || dns_opened_anywhere(destinations, policy) {
        return;
    }
    let instead = if policy.cluster_dns.is_some() && policy.allow_custom_nameservers {
        "leave dnsPolicy out so that the agents ask the cluster DNS, or list the resolvers they should ask in dnsConfig.nameservers"
    } else if policy.cluster_dns.is_some() {
        "leave dnsPolicy out so that the agents ask the cluster DNS"
    } else {
        "leave dnsPolicy out so that the agents ask the cluster DNS as the platform provides it"
    };
    problems.push(
        "spec.dnsPolicy",
        format!(
            "`Default` makes the agents ask only the node's resolvers, which cdtarget does not know and no rule of the agents' NetworkPolicy opens (none opens port 53 to an address), so the agents could resolve no name; {instead}"
        ),
    );
}

/// Whether a rule of the rendered NetworkPolicy other than the DNS rules opens port 53 to `addr`:
/// a platform target, or a tenant destination on the policy's ports.
fn dns_opened_to(addr: &IpNet, destinations: &[IpNet], policy: &Policy) -> bool {
    policy.platform_targets.iter().any(|t| t.cidr.contains(addr) && opens_dns(&t.ports))
        || (opens_dns(&policy.ports) && destinations.iter().any(|d| d.contains(addr)))
}

/// Whether a rule of the rendered NetworkPolicy other than the DNS rules opens port 53 at all.
fn dns_opened_anywhere(destinations: &[IpNet], policy: &Policy) -> bool {
    policy.platform_targets.iter().any(|t| opens_dns(&t.ports))
        || (!destinations.is_empty() && opens_dns(&policy.ports))
}

/// Whether the ports include 53 over UDP or TCP, the transports of a resolver.
fn opens_dns(ports: &[Port]) -> bool {
    ports.iter().any(|p| p.protocol != Protocol::Sctp && p.port <= 53 && 53 <= p.end_port.unwrap_or(p.port))
}

/// Search domains and resolver options, as the API server would check them.
fn check_dns_lists(config: &k8s_openapi::api::core::v1::PodDNSConfig, problems: &mut Problems) {
    let searches = config.searches.as_deref().unwrap_or_default();
    if within("spec.dnsConfig.searches", searches.len(), limits::SEARCHES, " (Kubernetes' limit)", problems) {
        // A lone "." is the root domain, which Kubernetes lets through.
        for (i, search) in searches.iter().enumerate().filter(|(_, s)| s.as_str() != ".") {
            if let Err(e) = names::dns1123_subdomain(search.strip_suffix('.').unwrap_or(search)) {
                problems.push(
                    format!("spec.dnsConfig.searches[{i}]"),
                    format!("{e} (expected a DNS domain such as `corp.example.com`)"),
                );
            }
        }
        let total: usize = searches.iter().map(String::len).sum::<usize>() + searches.len().saturating_sub(1);
        if total > MAX_SEARCH_LIST_CHARS {
            problems.push(
                "spec.dnsConfig.searches",
                format!("is {total} characters long with spaces between the domains; Kubernetes accepts at most {MAX_SEARCH_LIST_CHARS}"),
            );
        }
    }
    let options = config.options.as_deref().unwrap_or_default();
    if within("spec.dnsConfig.options", options.len(), limits::DNS_OPTIONS, "", problems) {
        for (i, option) in options.iter().enumerate() {
            if option.name.as_deref().is_none_or(str::is_empty) {
                problems.push(
                    format!("spec.dnsConfig.options[{i}].name"),
                    "is required; expected a resolver option such as `ndots`",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::EnvVar;

    use super::*;
    use crate::api::policy::{ModesDocument, PolicyDocument, RunOnceDocument, RunOnceEnvironmentDocument};
    use crate::policy::from_document;

    /// Every problem as `(field, message)`.
    fn problems(target: &CDTarget, policy: &Policy) -> Vec<(String, String)> {
        let problems = validate(target, policy).expect_err("refused");
        problems.into_iter().map(|p| (p.field, p.message)).collect()
    }

    fn policy(change: impl FnOnce(&mut PolicyDocument)) -> Policy {
        let mut document = PolicyDocument::default();
        change(&mut document);
        from_document(&document).expect("a valid policy")
    }

    fn job() -> CDTarget {
        CDTarget::test().with_mode("Job")
    }

    #[test]
    fn without_spec_mode_a_cdtarget_gets_the_policys_default_mode() {
        let jobs_first = policy(|d| d.agents.modes.default = "Job".into());
        assert_eq!(validate(&CDTarget::test(), &jobs_first).unwrap().mode, AgentMode::Job);
        assert_eq!(validate(&CDTarget::test(), &Policy::default()).unwrap().mode, AgentMode::Deployment);
        let target = job();
        let valid = validate(&target, &Policy::default()).unwrap();
        assert_eq!((valid.mode, valid.run_once), (AgentMode::Job, Some(RunOnceConvention::Argument("--once".into()))));
    }

    #[test]
    fn an_unknown_mode_is_refused_naming_the_accepted_ones() {
        for mode in ["job", "Jobs", "", "Pod", "Deployment "] {
            let found = problems(&CDTarget::test().with_mode(mode), &Policy::default());
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].0, "spec.mode");
            assert!(found[0].1.contains("expected one of Deployment, Job"), "{found:?}");
        }
    }

    #[test]
    fn a_mode_the_policy_forbids_is_refused_saying_which_it_allows() {
        let deployments_only = policy(|d| {
            d.agents.modes = ModesDocument { default: "Deployment".into(), allowed: vec!["Deployment".into()] }
        });
        let found = problems(&job(), &deployments_only);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "spec.mode");
        assert!(found[0].1.contains("`Job` is not allowed by the platform policy"), "{found:?}");
        assert!(found[0].1.ends_with("it allows Deployment"), "{found:?}");
        let jobs_only =
            policy(|d| d.agents.modes = ModesDocument { default: "Job".into(), allowed: vec!["Job".into()] });
        let found = problems(&CDTarget::test().with_mode("Deployment"), &jobs_only);
        assert!(found[0].1.ends_with("it allows Job"), "{found:?}");
    }

    #[test]
    fn scale_on_in_flight_must_be_a_boolean_in_deployment_mode() {
        let set = CDTarget::test().with_trigger_meta("scaleOnInFlight", "false");
        assert!(validate(&set, &Policy::default()).is_ok());
        for value in ["yes", "", "2", "\"true\""] {
            let found = problems(&CDTarget::test().with_trigger_meta("scaleOnInFlight", value), &Policy::default());
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(found[0].0, "spec.triggerMeta.scaleOnInFlight");
            assert!(found[0].1.contains("is not a boolean; expected \"true\" or \"false\""), "{found:?}");
        }
    }

    #[test]
    fn scale_on_in_flight_is_refused_in_job_mode_whatever_its_value() {
        for value in ["true", "false", "garbage"] {
            let found = problems(&job().with_trigger_meta("scaleOnInFlight", value), &Policy::default());
            assert_eq!(found.len(), 1, "{value}: {found:?}");
            assert_eq!(found[0].0, "spec.triggerMeta.scaleOnInFlight");
            assert!(found[0].1.contains("set by cdtarget in Job mode"), "{found:?}");
        }
    }

    #[test]
    fn a_fixed_agent_name_is_refused_in_job_mode_even_for_one_agent() {
        let found = problems(&job().with_replicas(1, 1).with_agent_name("builder"), &Policy::default());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "spec.config.agentName");
        assert!(found[0].1.contains("for Deployment mode only"), "{found:?}");
        let deployment = CDTarget::test().with_replicas(1, 1).with_agent_name("builder");
        assert!(validate(&deployment, &Policy::default()).is_ok());
    }

    #[test]
    fn an_image_without_a_run_once_convention_is_refused_in_job_mode_only() {
        let acme_only = policy(|d| {
            d.agents.jobs.run_once = vec![RunOnceDocument {
                image_prefix: "ghcr.io/acme/".into(),
                convention: "builtIn".into(),
                argument: None,
                environment: None,
            }]
        });
        let found = problems(&job().with_image("docker.io/evil/agent:1"), &acme_only);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "spec.agentImage");
        assert!(found[0].1.contains("lists the prefixes `ghcr.io/acme/`"), "{found:?}");
        assert!(validate(&CDTarget::test().with_image("docker.io/evil/agent:1"), &acme_only).is_ok());
        let target = job().with_image("ghcr.io/acme/agent:1");
        let valid = validate(&target, &acme_only).unwrap();
        assert_eq!(valid.run_once, Some(RunOnceConvention::BuiltIn));
    }

    #[test]
    fn a_tenant_variable_that_would_undo_the_run_once_variable_is_refused() {
        let by_variable = policy(|d| {
            d.agents.jobs.run_once = vec![RunOnceDocument {
                image_prefix: String::new(),
                convention: "environment".into(),
                argument: None,
                environment: Some(RunOnceEnvironmentDocument { name: "RUN_ONCE".into(), value: "true".into() }),
            }]
        });
        let undo = EnvVar { name: "RUN_ONCE".into(), value: Some("false".into()), value_from: None };
        let found = problems(&job().with_env(undo.clone()), &by_variable);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "spec.env[0].name");
        assert!(found[0].1.contains("makes the agent run once in Job mode"), "{found:?}");
        assert!(validate(&CDTarget::test().with_env(undo), &by_variable).is_ok(), "Deployment mode ignores it");
    }
}
