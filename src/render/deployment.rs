//! The agent Deployment of a CDTarget (Deployment mode), running the agent pod of
//! [`super::pod`].

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{Scaling, SecretDigests, ValidTarget, child_metadata, pod, selector_labels};
use crate::policy::Policy;

/// Renders the Deployment named after the CDTarget (Deployment mode).
pub(crate) fn deployment(
    valid: &ValidTarget<'_>,
    policy: &Policy,
    digests: &SecretDigests,
    scaling: Scaling,
) -> Deployment {
    Deployment {
        metadata: child_metadata(valid, valid.name),
        spec: Some(DeploymentSpec {
            // With KEDA the HPA owns replicas; applying a count would fight it (seed defect 10).
            replicas: (scaling == Scaling::Fixed).then_some(valid.min_replicas),
            selector: LabelSelector { match_labels: Some(selector_labels(valid)), ..Default::default() },
            template: pod::pod_template(valid, policy, digests),
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}
