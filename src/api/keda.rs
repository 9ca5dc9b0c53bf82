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
