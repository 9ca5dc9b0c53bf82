//! The KEDA (`keda.sh/v1alpha1`) kinds cdtarget renders, with just the fields it sets, and the
//! KEDA release they are rendered for ([`KedaVersion`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::batch::v1::JobSpec;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// A KEDA release, `major.minor.patch`. What cdtarget renders for KEDA depends on it: the
/// `azure-pipelines` scaler counts the jobs of busy agents only from 2.21 on
/// ([`KedaVersion::counts_busy_agents`]).
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
    /// KEDA 2.20.0: its scaler leaves out job requests an agent has received (kedacore/keda#8185).
    pub const V2_20_0: KedaVersion = KedaVersion::new(2, 20, 0);
    /// KEDA 2.21.0: the scaler's `scaleOnInFlight` switch (default true) counts them again.
    pub const V2_21_0: KedaVersion = KedaVersion::new(2, 21, 0);
    /// The newest release cdtarget's rendering is checked against.
    pub const NEWEST_SUPPORTED: KedaVersion = KedaVersion::V2_21_0;
    /// The oldest release cdtarget's rendering is checked against.
    pub const OLDEST_SUPPORTED: KedaVersion = KedaVersion::V2_20_0;

    /// The release `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        KedaVersion { major, minor, patch }
    }

    /// Whether the `azure-pipelines` scaler of this release counts job requests an agent has
    /// received but not finished (the trigger key `scaleOnInFlight`, 2.21 and later).
    pub fn counts_busy_agents(self) -> bool {
        self >= KedaVersion::V2_21_0
    }
}

impl fmt::Display for KedaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for KedaVersion {
    type Err = String;

    /// Reads `2.21`, `2.21.0` or `v2.21.0` (a missing patch is 0). Pre-release and build
    /// suffixes are refused: cdtarget renders for releases.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refuse = || format!("`{text}` is not a KEDA version; expected e.g. `2.21.0`, `2.21` or `v2.21.0`");
        let digits = text.strip_prefix('v').unwrap_or(text);
        let parts: Vec<&str> = digits.split('.').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(refuse());
        }
        let mut numbers = [0u32; 3];
        for (number, part) in numbers.iter_mut().zip(&parts) {
            if part.is_empty() || part.len() > 9 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(refuse());
            }
            *number = part.parse().map_err(|_| refuse())?;
        }
        Ok(KedaVersion::new(numbers[0], numbers[1], numbers[2]))
    }
}

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
    /// Seconds between two looks at the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polling_interval: Option<i32>,
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

/// KEDA ScaledJob spec (subset): a Job started per queued pipeline job.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "keda.sh",
    version = "v1alpha1",
    kind = "ScaledJob",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ScaledJobSpec {
    /// The Job each scale-out starts.
    pub job_target_ref: JobSpec,
    /// Seconds between two looks at the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polling_interval: Option<i32>,
    /// Finished Jobs kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful_jobs_history_limit: Option<i32>,
    /// Failed Jobs kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_jobs_history_limit: Option<i32>,
    /// Fewest Jobs kept running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replica_count: Option<i32>,
    /// Most Jobs running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replica_count: Option<i32>,
    /// What happens to running Jobs when the ScaledJob changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// How the number of new Jobs is computed from the queue and the running Jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_strategy: Option<ScalingStrategy>,
    /// Scalers.
    pub triggers: Vec<ScaleTrigger>,
}

/// `rollout` of a ScaledJob.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// `gradual` leaves the Jobs of an earlier generation running; `immediate` (and no value)
    /// deletes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
}

/// `scalingStrategy` of a ScaledJob.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScalingStrategy {
    /// `default`, `accurate`, `eager` or `custom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keda_version_reads_with_or_without_v_and_patch_and_prints_in_full() {
        for text in ["2.21", "2.21.0", "v2.21.0"] {
            assert_eq!(text.parse::<KedaVersion>(), Ok(KedaVersion::V2_21_0), "{text}");
        }
        assert_eq!("2.20.2".parse::<KedaVersion>().map(|v| v.to_string()), Ok("2.20.2".to_owned()));
        assert_eq!(KedaVersion::V2_21_0.to_string(), "2.21.0");
    }

    #[test]
    fn anything_but_a_release_number_is_refused_with_what_would_be_accepted() {
        for text in ["", "2", "2.21.0.1", "2.x", "v", "2..1", "+2.21", "2.21.0-rc1", " 2.21", "99999999999.1"] {
            let error = text.parse::<KedaVersion>().expect_err(text);
            assert!(error.contains("expected e.g. `2.21.0`"), "{error}");
        }
    }

    #[test]
    fn busy_agents_are_counted_from_2_21_on() {
        assert!(!KedaVersion::V2_20_0.counts_busy_agents());
        assert!(!KedaVersion::new(2, 20, 2).counts_busy_agents());
        assert!(KedaVersion::V2_21_0.counts_busy_agents());
        assert!(KedaVersion::new(3, 0, 0).counts_busy_agents());
        assert!(KedaVersion::OLDEST_SUPPORTED < KedaVersion::NEWEST_SUPPORTED);
    }
}

/// What the controller knows of the installed KEDA: whether it is there and, when discovery
/// could tell, which release it is ([`crate::apply::keda`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KedaSeen {
    /// `keda.sh/v1alpha1` serves the kinds cdtarget renders.
    pub installed: bool,
    /// The release, as far as discovery could tell (`None`: it could not).
    pub version: Option<KedaVersion>,
}
