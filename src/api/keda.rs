//! The two KEDA (`keda.sh/v1alpha1`) kinds cdtarget renders, with just the fields it sets.

use std::collections::BTreeMap;

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// KEDA ScaledObject spec (subset).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "keda.sh",
    version = "v1alpha1",
    kind = "ScaledObject",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ScaledObjectSpec {
    /// The workload KEDA scales.
    pub scale_target_ref: ScaleTargetRef,
    /// Fewest replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replica_count: Option<i32>,
    /// Most replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replica_count: Option<i32>,
    /// Scalers.
    pub triggers: Vec<ScaleTrigger>,
}

/// Target of a ScaledObject.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// `apiVersion` of the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind` of the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the target.
    pub name: String,
}

/// One KEDA trigger.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTrigger {
    /// Scaler type, e.g. `azure-pipelines`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Trigger name (unique within the ScaledObject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Scaler metadata; every value is a string.
    pub metadata: BTreeMap<String, String>,
    /// Credentials of the scaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication_ref: Option<AuthenticationRef>,
}

/// Reference to a TriggerAuthentication.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationRef {
    /// Name of the TriggerAuthentication.
    pub name: String,
    /// `TriggerAuthentication` or `ClusterTriggerAuthentication`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// KEDA TriggerAuthentication spec (subset).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "keda.sh",
    version = "v1alpha1",
    kind = "TriggerAuthentication",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct TriggerAuthenticationSpec {
    /// Parameters read from Secrets.
    pub secret_target_ref: Vec<SecretTargetRef>,
}

/// One trigger parameter read from a Secret key.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretTargetRef {
    /// Trigger parameter, e.g. `personalAccessToken`.
    pub parameter: String,
    /// Secret name.
    pub name: String,
    /// Key in the Secret.
    pub key: String,
}

/// A KEDA release, as far as rendering for it matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KedaVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl KedaVersion {
    /// KEDA 2.20.0: its scaler no longer counts jobs an agent has received.
    pub const V2_20_0: KedaVersion = KedaVersion { major: 2, minor: 20, patch: 0 };
    /// KEDA 2.21.0: `scaleOnInFlight` counts them again.
    pub const V2_21_0: KedaVersion = KedaVersion { major: 2, minor: 21, patch: 0 };
    /// The newest release cdtarget renders for.
    pub const NEWEST_SUPPORTED: KedaVersion = KedaVersion::V2_21_0;
    /// The oldest release cdtarget renders for.
    pub const OLDEST_SUPPORTED: KedaVersion = KedaVersion::V2_20_0;

    /// Whether the release's scaler counts jobs agents are running (`scaleOnInFlight`).
    pub fn counts_busy_agents(self) -> bool {
        self >= KedaVersion::V2_21_0
    }
}

impl std::fmt::Display for KedaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}
