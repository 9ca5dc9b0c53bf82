//! What KEDA the cluster serves: whether it is installed, and which release, as the controller
//! (at start-up and every few minutes) and `cdtarget diff` ask it.
//!
//! Whether KEDA is there comes from API discovery (`keda.sh/v1alpha1` serves ScaledObject,
//! ScaledJob and TriggerAuthentication). Which release it is comes from the schema of its CRDs
//! as the API server publishes them (`/openapi/v3/apis/keda.sh/v1alpha1`, readable by every
//! authenticated client, so no RBAC beyond discovery): KEDA 2.21.0 added
//! `TriggerAuthentication.spec.azureServicePrincipal` in the same release as the
//! `scaleOnInFlight` trigger key, so a schema with it is "2.21 or newer" and one without it
//! "2.20 or older". The CRDs, not the operator's binary, are what this reads: a cluster that
//! upgraded one without the other is told apart only by the policy's `keda.version` pin, which
//! wins over discovery (docs/agents.md). When the schema cannot be read, the release is unknown
//! and the reconciler assumes the oldest supported one.

use kube::Client;
use serde_json::Value;
use tracing::warn;

use crate::api::keda::{KedaSeen, KedaVersion};

/// The OpenAPI v3 document of KEDA's API group.
const KEDA_OPENAPI_PATH: &str = "/openapi/v3/apis/keda.sh/v1alpha1";

/// The schema KEDA's TriggerAuthentication is published under in that document.
const TRIGGER_AUTHENTICATION_SCHEMA: &str = "sh.keda.v1alpha1.TriggerAuthentication";

/// A field of `TriggerAuthentication.spec` that KEDA 2.21.0 introduced.
const FIELD_SINCE_2_21: &str = "azureServicePrincipal";

/// The most bytes of the OpenAPI document read (KEDA's group is about 300 kB).
const MAX_OPENAPI_BYTES: usize = 8 << 20;

/// Whether KEDA is installed and, if the API server's schema of its CRDs tells, which release.
/// Only a failed discovery is an error; a schema that cannot be read leaves the release unknown.
pub(crate) async fn discover_keda(client: &Client) -> Result<KedaSeen, kube::Error> {
    if !keda_installed(client).await? {
        return Ok(KedaSeen { installed: false, version: None });
    }
    let version = match published_schemas(client).await {
        Ok(document) => release_of(&document),
        Err(error) => {
            warn!(%error, "reading the schema of KEDA's CRDs: KEDA's release is unknown");
            None
        }
    };
    if version.is_none() {
        warn!(
            "could not tell KEDA's release from the schema of its CRDs: CDTargets are rendered for the oldest supported one ({}); pin keda.version in the policy",
            KedaVersion::OLDEST_SUPPORTED
        );
    }
    Ok(KedaSeen { installed: true, version })
}

/// Whether `keda.sh/v1alpha1` serves ScaledObject, ScaledJob and TriggerAuthentication.
pub(crate) async fn keda_installed(client: &Client) -> Result<bool, kube::Error> {
    match client.list_api_group_resources("keda.sh/v1alpha1").await {
        Ok(list) => {
            let has = |kind: &str| list.resources.iter().any(|r| r.kind == kind);
            Ok(has("ScaledObject") && has("ScaledJob") && has("TriggerAuthentication"))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn published_schemas(client: &Client) -> Result<Value, String> {
    let request = http::Request::get(KEDA_OPENAPI_PATH).body(Vec::new()).map_err(|e| e.to_string())?;
    let text = client.request_text(request).await.map_err(|e| e.to_string())?;
    if text.len() > MAX_OPENAPI_BYTES {
        return Err(format!("{KEDA_OPENAPI_PATH} is larger than {MAX_OPENAPI_BYTES} bytes"));
    }
    serde_json::from_str(&text).map_err(|e| format!("{KEDA_OPENAPI_PATH} is not JSON: {e}"))
}

/// The release an OpenAPI v3 document of `keda.sh/v1alpha1` describes: [`KedaVersion::V2_21_0`]
/// ("2.21 or newer") when TriggerAuthentication's spec has the field 2.21.0 added,
/// [`KedaVersion::V2_20_0`] ("2.20 or older") when it has a spec without it, `None` when the
/// document has no such schema.
pub(crate) fn release_of(document: &Value) -> Option<KedaVersion> {
    let schema = document.pointer("/components/schemas")?.get(TRIGGER_AUTHENTICATION_SCHEMA)?;
    let spec = schema.pointer("/properties/spec/properties")?.as_object()?;
    Some(if spec.contains_key(FIELD_SINCE_2_21) { KedaVersion::V2_21_0 } else { KedaVersion::V2_20_0 })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn document(spec_fields: &[&str]) -> Value {
        let properties: serde_json::Map<String, Value> =
            spec_fields.iter().map(|field| ((*field).to_owned(), json!({"type": "object"}))).collect();
        json!({"components": {"schemas": {
            "sh.keda.v1alpha1.ScaledObject": {"type": "object"},
            TRIGGER_AUTHENTICATION_SCHEMA: {"properties": {"spec": {"properties": properties}}},
        }}})
    }

    #[test]
    fn a_trigger_authentication_with_azure_service_principal_is_2_21_or_newer() {
        let newer = document(&["podIdentity", "secretTargetRef", "azureServicePrincipal"]);
        assert_eq!(release_of(&newer), Some(KedaVersion::V2_21_0));
        assert!(release_of(&newer).is_some_and(KedaVersion::counts_busy_agents));
    }

    #[test]
    fn a_trigger_authentication_without_it_is_2_20_or_older() {
        let older = document(&["podIdentity", "secretTargetRef"]);
        assert_eq!(release_of(&older), Some(KedaVersion::V2_20_0));
        assert!(!KedaVersion::V2_20_0.counts_busy_agents());
    }

    #[test]
    fn a_document_without_the_schema_tells_nothing() {
        assert_eq!(release_of(&json!({})), None);
        assert_eq!(release_of(&json!({"components": {"schemas": {}}})), None);
        let no_spec = json!({"components": {"schemas": {TRIGGER_AUTHENTICATION_SCHEMA: {"type": "object"}}}});
        assert_eq!(release_of(&no_spec), None, "a schema without spec properties is not read as 2.20");
    }
}
