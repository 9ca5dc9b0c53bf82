//! The cluster admin's policy document, as written (before validation, see [`crate::policy`]).
//!
//! Every field has a safe default, so an empty document — or no document — is a valid policy.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The guardrails every CDTarget is rendered within.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyDocument {
    /// What agent pods may reach.
    pub egress: EgressDocument,
    /// Limits on the agents.
    pub agents: AgentsDocument,
    /// What tenants may not apply from their repositories.
    pub tenancy: TenancyDocument,
    /// The KEDA the children are rendered for.
    pub keda: KedaDocument,
}

/// Egress guardrails.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct EgressDocument {
    /// Ports tenants' destinations are opened on.
    pub ports: Vec<PortDocument>,
    /// The broadest CIDR a tenant may ask for, per IP family.
    pub min_prefix_length: MinPrefixLengthDocument,
    /// Ranges no tenant destination may overlap.
    pub forbidden: Vec<String>,
    /// Allow DNS egress: to the cluster DNS pods on `clusterDns.ports`, and to a CDTarget's
    /// custom nameservers on UDP and TCP 53.
    pub dns: bool,
    /// Where the cluster DNS pods run.
    pub cluster_dns: ClusterDnsDocument,
    /// Destinations every agent may reach, whatever its CDTarget says.
    pub platform_targets: Vec<PlatformTargetDocument>,
    /// IPv6 prefixes of NAT64 translators; no tenant address may overlap one, since through
    /// the translator it reaches any IPv4 address.
    pub nat64_prefixes: Vec<String>,
    /// Whether CDTargets may list their own nameservers (`dnsConfig.nameservers`).
    pub allow_custom_nameservers: bool,
    /// The most address space one CDTarget's destinations may open, all of them together.
    pub max_addresses_per_target: MaxAddressesDocument,
}

impl Default for EgressDocument {
    fn default() -> Self {
        EgressDocument {
            ports: [443, 22, 5986].into_iter().map(PortDocument::tcp).collect(),
            min_prefix_length: MinPrefixLengthDocument::default(),
            forbidden: vec!["169.254.0.0/16".into(), "fe80::/10".into()],
            dns: true,
            cluster_dns: ClusterDnsDocument::default(),
            platform_targets: default_platform_targets(),
            nat64_prefixes: vec!["64:ff9b::/96".into(), "64:ff9b:1::/48".into()],
            allow_custom_nameservers: false,
            max_addresses_per_target: MaxAddressesDocument::default(),
        }
    }
}

/// The Azure DevOps service ranges from Microsoft's current allow list, on 443.
fn default_platform_targets() -> Vec<PlatformTargetDocument> {
    [
        "150.171.22.0/24",
        "150.171.23.0/24",
        "150.171.73.0/24",
        "150.171.74.0/24",
        "150.171.75.0/24",
        "150.171.76.0/24",
        "13.107.6.183/32",
        "13.107.9.183/32",
        "2620:1ec:50::/48",
        "2620:1ec:51::/48",
        "2603:1061:10::/48",
    ]
    .into_iter()
    .map(|cidr| PlatformTargetDocument { cidr: cidr.into(), ports: vec![PortDocument::tcp(443)] })
    .collect()
}

/// One allowed port (or port range).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortDocument {
    /// Port number, 1–65535.
    pub port: i64,
    /// Last port of a range, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_port: Option<i64>,
    /// `TCP` (default), `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

impl PortDocument {
    /// A single TCP port.
    pub fn tcp(port: i64) -> Self {
        PortDocument { port, end_port: None, protocol: None }
    }

    /// A single port of `protocol` (`TCP`, `UDP` or `SCTP`), the protocol written out.
    pub fn with_protocol(port: i64, protocol: &str) -> Self {
        PortDocument { port, end_port: None, protocol: Some(protocol.into()) }
    }
}

/// Minimum prefix lengths.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(default)]
pub struct MinPrefixLengthDocument {
    /// For IPv4 destinations (0–32); default 24.
    pub ipv4: i64,
    /// For IPv6 destinations (0–128); default 64.
    pub ipv6: i64,
}

impl Default for MinPrefixLengthDocument {
    fn default() -> Self {
        MinPrefixLengthDocument { ipv4: 24, ipv6: 64 }
    }
}

/// Caps on the address space of one CDTarget's destinations (their union, per family).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct MaxAddressesDocument {
    /// IPv4 addresses, counted; default 4096 (sixteen /24s).
    pub ipv4: i64,
    /// IPv6: at most as many addresses as one network of this prefix length holds (0–128);
    /// default 56 (256 /64s).
    pub ipv6_prefix_length: i64,
}

impl Default for MaxAddressesDocument {
    fn default() -> Self {
        MaxAddressesDocument { ipv4: 4096, ipv6_prefix_length: 56 }
    }
}

/// Selects the cluster DNS pods and the ports they listen on.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterDnsDocument {
    /// Namespace of the DNS pods; default `kube-system`.
    pub namespace: String,
    /// Labels of the DNS pods; default `k8s-app: kube-dns`.
    pub pod_labels: BTreeMap<String, String>,
    /// Ports the DNS pods themselves listen on (a NetworkPolicy sees the pod's port, not the
    /// Service's: OpenShift's DNS pods listen on 5353 behind a Service on 53); default UDP and
    /// TCP 53.
    pub ports: Vec<PortDocument>,
}

impl Default for ClusterDnsDocument {
    fn default() -> Self {
        ClusterDnsDocument {
            namespace: "kube-system".into(),
            pod_labels: BTreeMap::from([("k8s-app".into(), "kube-dns".into())]),
            ports: vec![PortDocument::with_protocol(53, "UDP"), PortDocument::with_protocol(53, "TCP")],
        }
    }
}

/// A destination every agent may reach.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlatformTargetDocument {
    /// Address or CIDR.
    pub cidr: String,
    /// Ports opened to it.
    pub ports: Vec<PortDocument>,
}

/// Limits on agents.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentsDocument {
    /// Image prefixes agents may use, e.g. `ghcr.io/acme/`; empty allows any image.
    pub allowed_image_prefixes: Vec<String>,
    /// Ceiling for `maxReplicaCount`; default 10.
    pub max_replicas: i64,
    /// Grace period of agent pods, long enough for the longest job; default 3600.
    pub termination_grace_period_seconds: i64,
    /// User the agent runs as (never root); default 1000.
    pub run_as_user: i64,
    /// Hosts the URLs a tenant sets (`config.url`, `triggerMeta.organizationURL`) may point at:
    /// `dev.azure.com`, `*.visualstudio.com` (one label), or an IP address or CIDR for literal
    /// addresses; default the Azure DevOps hosts.
    pub allowed_url_hosts: Vec<String>,
    /// How agents may run (`spec.mode`): the modes tenants may choose and the default.
    pub modes: ModesDocument,
    /// Settings of agents run as Jobs (`spec.mode: Job`).
    pub jobs: JobsDocument,
}

impl Default for AgentsDocument {
    fn default() -> Self {
        AgentsDocument {
            allowed_image_prefixes: Vec::new(),
            max_replicas: 10,
            termination_grace_period_seconds: 3600,
            run_as_user: 1000,
            allowed_url_hosts: vec!["dev.azure.com".into(), "*.visualstudio.com".into()],
            modes: ModesDocument::default(),
            jobs: JobsDocument::default(),
        }
    }
}

/// The agent modes (`Deployment`, `Job`) tenants may choose.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ModesDocument {
    /// The mode of a CDTarget without `spec.mode`; must be allowed; default `Deployment`.
    pub default: String,
    /// The modes a CDTarget may ask for; default both.
    pub allowed: Vec<String>,
}

impl Default for ModesDocument {
    fn default() -> Self {
        ModesDocument { default: "Deployment".into(), allowed: vec!["Deployment".into(), "Job".into()] }
    }
}

/// Settings of the Jobs a ScaledJob starts.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct JobsDocument {
    /// The longest a Job (one agent, one pipeline job) may run, in seconds; default 21600 (6 h).
    pub active_deadline_seconds: i64,
    /// Finished Jobs kept per CDTarget; default 3.
    pub successful_jobs_history_limit: i64,
    /// Failed Jobs kept per CDTarget; default 5.
    pub failed_jobs_history_limit: i64,
    /// How an agent image is told to take one job and exit, by image prefix (the longest
    /// matching prefix wins); default Microsoft's documented image: the argument `--once`.
    pub run_once: Vec<RunOnceDocument>,
}

impl Default for JobsDocument {
    fn default() -> Self {
        JobsDocument {
            active_deadline_seconds: 21600,
            successful_jobs_history_limit: 3,
            failed_jobs_history_limit: 5,
            run_once: vec![RunOnceDocument {
                image_prefix: String::new(),
                convention: "argument".into(),
                argument: None,
                environment: None,
            }],
        }
    }
}

/// How the agent images starting with `imagePrefix` run once.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunOnceDocument {
    /// The images this entry is for (`""` matches every image).
    pub image_prefix: String,
    /// `argument` (a container argument, `argument`, default `--once`), `environment` (a
    /// variable, `environment`), or `builtIn` (the image already exits after one job).
    pub convention: String,
    /// With `argument`: the argument; default `--once`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<String>,
    /// With `environment`: the variable and its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<RunOnceEnvironmentDocument>,
}

/// An environment variable that makes an agent run once.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunOnceEnvironmentDocument {
    /// The variable's name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// The KEDA the children are rendered for.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct KedaDocument {
    /// The KEDA release to render for, e.g. `2.21.0`; empty (the default) lets the controller
    /// find out the installed one.
    pub version: String,
    /// Seconds between KEDA's looks at a pool's queue (`pollingInterval`); default 30.
    pub polling_interval_seconds: i64,
}

impl Default for KedaDocument {
    fn default() -> Self {
        KedaDocument { version: String::new(), polling_interval_seconds: 30 }
    }
}

/// Tenancy rules beyond RBAC.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct TenancyDocument {
    /// Kinds no tenant document may be, whatever the tenant's RBAC allows: every kind that
    /// grants or redirects network access (NetworkPolicy and the CNIs' own policy kinds).
    /// `networking.k8s.io/NetworkPolicy` and `cdtarget.io/TenantRepository` are refused even
    /// when left out.
    pub forbidden_kinds: Vec<GroupKindDocument>,
}

impl Default for TenancyDocument {
    fn default() -> Self {
        TenancyDocument { forbidden_kinds: default_forbidden_kinds() }
    }
}

/// NetworkPolicy and the network policy APIs of the common CNIs and of SIG Network, whole
/// groups where nothing in the group is a tenant's business.
fn default_forbidden_kinds() -> Vec<GroupKindDocument> {
    [
        ("networking.k8s.io", "NetworkPolicy"),
        // AdminNetworkPolicy, BaselineAdminNetworkPolicy, ClusterNetworkPolicy.
        ("policy.networking.k8s.io", "*"),
        // Cilium: CiliumNetworkPolicy, CiliumClusterwideNetworkPolicy, CiliumCIDRGroup, ...
        ("cilium.io", "*"),
        // Calico: NetworkPolicy, GlobalNetworkPolicy, NetworkSet, GlobalNetworkSet,
        // StagedNetworkPolicy, ... as CRDs and through the Calico API server.
        ("crd.projectcalico.org", "*"),
        ("projectcalico.org", "*"),
        // Antrea: NetworkPolicy, ClusterNetworkPolicy, Group, ClusterGroup, ...
        ("crd.antrea.io", "*"),
        ("security.antrea.io", "*"),
        // OVN-Kubernetes: EgressFirewall, EgressQoS, ...
        ("k8s.ovn.org", "*"),
        ("cdtarget.io", "TenantRepository"),
    ]
    .into_iter()
    .map(|(group, kind)| GroupKindDocument { group: group.into(), kind: kind.into() })
    .collect()
}

/// An API group and a kind in it, as Kubernetes spells them (case-exact).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct GroupKindDocument {
    /// The API group, e.g. `cilium.io`; `""` for the core group.
    pub group: String,
    /// The kind, e.g. `CiliumNetworkPolicy`, or `*` for every kind of the group.
    pub kind: String,
}
