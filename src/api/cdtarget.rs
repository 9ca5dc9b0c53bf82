//! `CDTarget`: a tenant's declaration of an Azure Pipelines agent pool and the destinations its
//! agents may reach. A compatible superset of the seed operator's `cnad.gofound.nl/v1alpha1`
//! CDTarget: every seed field keeps its name and meaning.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, LocalObjectReference, PodDNSConfig, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a tenant asks for: agents, their scaling, and the egress destinations they need.
// Fields are lenient when read (a missing required field becomes empty) so that validation can
// report every problem of a document at once; the CRD schema still marks them required.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cdtarget.io",
    version = "v1alpha1",
    kind = "CDTarget",
    plural = "cdtargets",
    singular = "cdtarget",
    namespaced,
    status = "CDTargetStatus",
    shortname = "cdt",
    doc = "A tenant's Azure Pipelines agents and the egress destinations they need.",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = require_spec_fields, transform = bound_spec_lists)]
pub struct CDTargetSpec {
    /// Egress destinations of the agents: IPv4 or IPv6 addresses (`10.0.0.1`, `2001:db8::1`) or
    /// CIDRs (`10.1.0.0/24`). An empty list means no tenant destinations, never "everywhere".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip: Vec<String>,

    /// Extra labels put on every rendered object and on the agent pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_selector: BTreeMap<String, String>,

    /// The agent container image; must start with one of the policy's allowed prefixes.
    #[serde(default)]
    pub agent_image: String,

    /// Compute resources of the agent container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_resources: Option<ResourceRequirements>,

    /// Secrets used to pull the agent image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// The fewest agents KEDA keeps (default 1: Azure DevOps fails queued jobs when a pool has
    /// no agent at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replica_count: Option<i32>,

    /// The most agents KEDA starts (default: the policy's ceiling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replica_count: Option<i32>,

    /// Extra environment variables for the agent; a name cdtarget also sets replaces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Name of a Secret with proxy settings (keys `PROXY_URL`, `PROXY_USER`, `PROXY_PW`,
    /// `HTTP_PROXY`, `HTTPS_PROXY`, `FTP_PROXY`, `NO_PROXY`, all optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_ref: Option<String>,

    /// Name of the Secret holding the Azure DevOps personal access token under key `AZP_TOKEN`.
    #[serde(default)]
    pub token_ref: String,

    /// Name of a Secret whose every key is a PEM CA certificate the agents must trust.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert_ref: Option<String>,

    /// Where and as what the agents register.
    #[serde(default)]
    pub config: AgentConfig,

    /// KEDA `azure-pipelines` trigger metadata, merged over the rendered defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trigger_meta: BTreeMap<String, String>,

    /// DNS policy of the agent pods (`ClusterFirst`, `ClusterFirstWithHostNet`, `Default`, `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,

    /// DNS settings of the agent pods; custom nameservers also get an egress rule on port 53.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<PodDNSConfig>,

    /// How the agents run: `Deployment` (long-lived agents scaled by a KEDA ScaledObject) or
    /// `Job` (a KEDA ScaledJob starts one Job per queued pipeline job; its agent takes that job
    /// and exits). Default: the policy's `agents.modes.default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Deployment", "Job"]))]
    pub mode: Option<String>,
}

/// How a CDTarget's agents run (`spec.mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AgentMode {
    /// Long-lived agents in a Deployment, scaled by a KEDA ScaledObject.
    Deployment,
    /// One Job per queued pipeline job, started by a KEDA ScaledJob; each agent runs once.
    Job,
}

impl AgentMode {
    /// Every mode, in the order they are listed in messages.
    pub const ALL: [AgentMode; 2] = [AgentMode::Deployment, AgentMode::Job];

    /// The spelling in `spec.mode` and in the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentMode::Deployment => "Deployment",
            AgentMode::Job => "Job",
        }
    }

    /// The mode spelled `text` (case-exact, as the CRD's enum), if any.
    pub fn parse(text: &str) -> Option<AgentMode> {
        AgentMode::ALL.into_iter().find(|mode| mode.as_str() == text)
    }
}

impl std::fmt::Display for AgentMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Bounds on every list and map a tenant writes in a CDTarget: `maxItems` / `maxProperties` in
/// the CRD schema, and the same numbers in validation (`src/render/validate.rs`), which names
/// the field and the bound. Where Kubernetes has a bound of its own (nameservers, searches), it
/// is the same.
pub(crate) mod limits {
    /// `ip` entries.
    pub const IP: usize = 256;
    /// Bytes of one `ip` entry (an expanded IPv6 CIDR with a dotted IPv4 tail takes 49).
    pub const IP_ENTRY_BYTES: usize = 64;
    /// `additionalSelector` labels.
    pub const ADDITIONAL_SELECTOR: usize = 32;
    /// `imagePullSecrets` entries.
    pub const IMAGE_PULL_SECRETS: usize = 16;
    /// `env` entries.
    pub const ENV: usize = 128;
    /// `triggerMeta` keys (KEDA's scaler reads 14).
    pub const TRIGGER_META: usize = 32;
    /// `dnsConfig.nameservers` entries (Kubernetes' own limit).
    pub const NAMESERVERS: usize = 3;
    /// `dnsConfig.searches` entries (Kubernetes' own limit).
    pub const SEARCHES: usize = 32;
    /// `dnsConfig.options` entries.
    pub const DNS_OPTIONS: usize = 16;
    /// `agentResources.requests` / `limits` entries.
    pub const RESOURCES: usize = 16;
    /// `agentResources.claims` entries: none, the agent pod declares no resource claims.
    pub const RESOURCE_CLAIMS: usize = 0;
    /// Bytes of `config.url` and `triggerMeta.organizationURL`.
    pub const URL_BYTES: usize = 2048;
}

/// Registration settings of the agents (the seed's `config`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = require_config_fields)]
pub struct AgentConfig {
    /// Organization or collection URL, e.g. `https://dev.azure.com/acme` (no trailing `/`).
    #[serde(default)]
    pub url: String,

    /// Agent pool name as shown in Azure DevOps.
    #[serde(default)]
    pub pool_name: String,

    /// Fixed agent name; only allowed when at most one agent runs (agents with one name evict
    /// each other). Default: the pod name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,

    /// Work directory of the agent (`AZP_WORK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_dir: Option<String>,

    /// MTU of container-job networks, passed as `AGENT_DOCKER_MTU_VALUE` (the variable the agent
    /// reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu_value: Option<String>,
}

/// What the controller last did with a CDTarget.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CDTargetStatus {
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// kstatus conditions: `Ready` (the agents run), `Reconciling`, `Stalled`; and `Applied`
    /// (the children are in place).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// What was rendered last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered: Option<RenderedSummary>,

    /// The children the controller applied, in the CDTarget's namespace: a child recorded here
    /// that the CDTarget no longer renders is deleted, if its controller owner reference is still
    /// this CDTarget (docs/rendering.md, "Children and their inventory"). Absent on a CDTarget
    /// whose children were last written before the inventory existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Vec<ChildReference>>,

    /// The value of the `cdtarget.io/requestedAt` annotation the last finished reconcile (success
    /// or failure) was started with: `cdtarget reconcile cdtarget NAME --wait` waits for it to
    /// match its request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

/// A child of a CDTarget, as its status records it; always in the CDTarget's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildReference {
    /// `apiVersion` of the child, e.g. `keda.sh/v1alpha1`.
    pub api_version: String,
    /// `kind` of the child, e.g. `ScaledObject`.
    pub kind: String,
    /// `metadata.name` of the child.
    pub name: String,
}

/// A summary of the children rendered for a CDTarget.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenderedSummary {
    /// Name of the egress NetworkPolicy.
    pub network_policy: String,
    /// How the agents run: `Deployment` or `Job` (absent in a summary written before modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Name of the agent Deployment (absent in Job mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// Name of the KEDA ScaledJob (Job mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaled_job: Option<String>,
    /// Name of the KEDA ScaledObject (absent when KEDA is not installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaled_object: Option<String>,
    /// Name of the KEDA TriggerAuthentication (absent when KEDA is not installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_authentication: Option<String>,
    /// Tenant destinations in canonical CIDR form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<String>,
    /// Digest of the referenced Secrets the agents were rendered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_digest: Option<String>,
}

fn require_spec_fields(schema: &mut schemars::Schema) {
    require(schema, &["agentImage", "tokenRef", "config"]);
}

/// Puts [`limits`] into the (inlined) spec schema.
fn bound_spec_lists(schema: &mut schemars::Schema) {
    use serde_json::json;
    let bounds: [(&[&str], &str, usize); 12] = [
        (&["ip"], "maxItems", limits::IP),
        (&["additionalSelector"], "maxProperties", limits::ADDITIONAL_SELECTOR),
        (&["imagePullSecrets"], "maxItems", limits::IMAGE_PULL_SECRETS),
        (&["env"], "maxItems", limits::ENV),
        (&["triggerMeta"], "maxProperties", limits::TRIGGER_META),
        (&["dnsConfig", "nameservers"], "maxItems", limits::NAMESERVERS),
        (&["dnsConfig", "searches"], "maxItems", limits::SEARCHES),
        (&["dnsConfig", "options"], "maxItems", limits::DNS_OPTIONS),
        (&["agentResources", "requests"], "maxProperties", limits::RESOURCES),
        (&["agentResources", "limits"], "maxProperties", limits::RESOURCES),
        (&["agentResources", "claims"], "maxItems", limits::RESOURCE_CLAIMS),
        (&["config", "url"], "maxLength", limits::URL_BYTES),
    ];
    for (path, keyword, bound) in bounds {
        let pointer: String = path.iter().map(|key| format!("/properties/{key}")).collect();
        let property = schema.pointer_mut(&pointer).and_then(serde_json::Value::as_object_mut);
        let property = property.unwrap_or_else(|| panic!("spec.{} is not in the CDTarget schema", path.join(".")));
        property.insert(keyword.to_owned(), json!(bound));
    }
    let ip_items = schema.pointer_mut("/properties/ip/items").and_then(serde_json::Value::as_object_mut);
    ip_items.expect("spec.ip has items").insert("maxLength".to_owned(), json!(limits::IP_ENTRY_BYTES));
}

fn require_config_fields(schema: &mut schemars::Schema) {
    require(schema, &["url", "poolName"]);
}

/// Marks fields required in the CRD while serde still reads them leniently. Their `default`
/// goes: the API server fills defaults in before it checks `required`, so a default would make
/// a missing field pass as empty.
fn require(schema: &mut schemars::Schema, fields: &[&str]) {
    let object = schema.ensure_object();
    if let Some(serde_json::Value::Object(properties)) = object.get_mut("properties") {
        for field in fields {
            if let Some(serde_json::Value::Object(property)) = properties.get_mut(*field) {
                property.remove("default");
            }
        }
    }
    let required = object.entry("required").or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let serde_json::Value::Array(list) = required {
        list.extend(fields.iter().map(|f| serde_json::Value::String((*f).to_owned())));
    }
}
