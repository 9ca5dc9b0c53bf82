//! The KEDA ScaledObject and TriggerAuthentication of a CDTarget: one of each per CDTarget,
//! named after it and owned by it (never after the pool name, seed defect 15).

use std::collections::BTreeMap;

use super::{ValidTarget, child_metadata};
use crate::api::keda::{
    AuthenticationRef, ScaleTargetRef, ScaleTrigger, ScaledObject, ScaledObjectSpec, SecretTargetRef,
    TriggerAuthentication, TriggerAuthenticationSpec,
};

/// Key of the personal access token in the token Secret.
pub(crate) const TOKEN_KEY: &str = "AZP_TOKEN";

/// Renders the ScaledObject scaling the agent Deployment on the pool's queue.
pub(crate) fn scaled_object(valid: &ValidTarget<'_>) -> ScaledObject {
    let spec = valid.spec();
    // Rendered defaults first, then the tenant's triggerMeta on top (the seed's convention).
    let mut metadata = BTreeMap::from([
        ("poolName".to_owned(), spec.config.pool_name.clone()),
        ("organizationURLFromEnv".to_owned(), "AZP_URL".to_owned()),
    ]);
    metadata.extend(spec.trigger_meta.clone());
    let mut object = ScaledObject::new(
        valid.name,
        ScaledObjectSpec {
            scale_target_ref: ScaleTargetRef {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
                name: valid.name.to_owned(),
            },
            min_replica_count: Some(valid.min_replicas),
            max_replica_count: Some(valid.max_replicas),
            triggers: vec![ScaleTrigger {
                kind: "azure-pipelines".into(),
                name: Some("azure-pipelines".into()),
                metadata,
                authentication_ref: Some(AuthenticationRef { name: valid.name.to_owned(), kind: None }),
            }],
        },
    );
    object.metadata = child_metadata(valid, valid.name);
    object
}

/// Renders the TriggerAuthentication giving the scaler the tenant's token.
pub(crate) fn trigger_authentication(valid: &ValidTarget<'_>) -> TriggerAuthentication {
    let mut object = TriggerAuthentication::new(
        valid.name,
        TriggerAuthenticationSpec {
            secret_target_ref: vec![SecretTargetRef {
                parameter: "personalAccessToken".into(),
                name: valid.spec().token_ref.clone(),
                key: TOKEN_KEY.into(),
            }],
        },
    );
    object.metadata = child_metadata(valid, valid.name);
    object
}
