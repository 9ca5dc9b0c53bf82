//! The renderer: CDTarget + policy + referenced-secret digests → the four child objects.
//!
//! Pure functions only: no I/O and no client. `validate()` checks everything first
//! and every builder works from the resulting `ValidTarget`, so rendering itself cannot fail.

pub(crate) mod children;
pub(crate) mod deployment;
pub(crate) mod keda;
pub(crate) mod network_policy;
pub(crate) mod validate;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use sha2::{Digest, Sha256};

use crate::api::{CDTarget, labels};
use crate::policy::Policy;
use crate::problem::Problem;
pub use children::{Child, ChildKind, Children};
pub(crate) use validate::{ValidTarget, check_document, validate};

/// How the agents are scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaling {
    /// By a KEDA ScaledObject; the Deployment leaves `replicas` to KEDA's HPA.
    Keda,
    /// KEDA is not installed: a plain Deployment at `minReplicaCount`.
    Fixed,
}

/// Digests (hex SHA-256 of their data, see `secret_digest`) of the Secrets a CDTarget
/// references, by Secret name. A missing entry means the content is unknown (offline render).
pub type SecretDigests = BTreeMap<String, String>;

/// Checks `target` against `policy` and renders its children.
pub fn render(
    target: &CDTarget,
    policy: &Policy,
    digests: &SecretDigests,
    scaling: Scaling,
) -> Result<Children, Vec<Problem>> {
    let valid = validate(target, policy)?;
    Ok(children(&valid, policy, digests, scaling))
}

/// Renders the children of an already validated CDTarget: a NetworkPolicy and a Deployment,
/// and with KEDA a TriggerAuthentication and a ScaledObject.
pub(crate) fn children(
    valid: &ValidTarget<'_>,
    policy: &Policy,
    digests: &SecretDigests,
    scaling: Scaling,
) -> Children {
    let mut list = vec![
        Child::NetworkPolicy(network_policy::network_policy(valid, policy)),
        Child::Deployment(Box::new(deployment::deployment(valid, policy, digests, scaling))),
    ];
    if scaling == Scaling::Keda {
        list.push(Child::TriggerAuthentication(keda::trigger_authentication(valid)));
        list.push(Child::ScaledObject(keda::scaled_object(valid)));
    }
    Children::new(list)
}

/// Digest of a Secret's data: SHA-256 over its keys and values in key order.
pub(crate) fn secret_digest(data: &BTreeMap<String, ByteString>) -> String {
    let mut hasher = Sha256::new();
    for (key, value) in data {
        hasher.update((key.len() as u64).to_be_bytes());
        hasher.update(key.as_bytes());
        hasher.update((value.0.len() as u64).to_be_bytes());
        hasher.update(&value.0);
    }
    hex::encode(hasher.finalize())
}

/// Names of the Secrets the agent pods read, in a fixed order: token, proxy, CA.
pub(crate) fn referenced_secrets(target: &CDTarget) -> Vec<&str> {
    let spec = &target.spec;
    [Some(&spec.token_ref), spec.proxy_ref.as_ref(), spec.ca_cert_ref.as_ref()]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

/// Names of every Secret the agent pods read, in a fixed order, each once: the ones they cannot
/// start without ([`referenced_secrets`]), then `imagePullSecrets` and
/// `env[].valueFrom.secretKeyRef` in the order of the spec.
pub(crate) fn rolled_secrets(target: &CDTarget) -> Vec<&str> {
    let spec = &target.spec;
    let pulled = spec.image_pull_secrets.iter().map(|s| s.name.as_str());
    let env = spec.env.iter().filter_map(|e| Some(e.value_from.as_ref()?.secret_key_ref.as_ref()?.name.as_str()));
    let mut names = referenced_secrets(target);
    for name in pulled.chain(env) {
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// One digest over the digest of every Secret the agents read ([`rolled_secrets`]); a rotated
/// PAT, proxy, CA, pull Secret or environment Secret changes it and so rolls the agents. A
/// Secret the pods may go without (pull, environment) that does not exist counts as `absent`:
/// when it appears the agents roll too. For a CDTarget that reads only its PAT, proxy and CA the
/// digest is what it always was.
pub(crate) fn secrets_digest(target: &CDTarget, digests: &SecretDigests) -> String {
    let required = referenced_secrets(target);
    let mut hasher = Sha256::new();
    for name in rolled_secrets(target) {
        let missing = if required.contains(&name) { "unknown" } else { "absent" };
        let digest = digests.get(name).map_or(missing, String::as_str);
        hasher.update(format!("{name}={digest}\n").as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Labels on every rendered object: the tenant's `additionalSelector` plus cdtarget's own.
pub(crate) fn object_labels(valid: &ValidTarget<'_>) -> BTreeMap<String, String> {
    let mut labels = valid.spec().additional_selector.clone();
    labels.extend(selector_labels(valid));
    labels.insert(labels::APP_NAME.into(), labels::APP_NAME_VALUE.into());
    labels.insert(labels::APP_INSTANCE.into(), valid.name.into());
    labels.insert(labels::MANAGED_BY.into(), labels::MANAGED_BY_VALUE.into());
    labels
}

/// The label that selects exactly this CDTarget's agent pods. The selector never includes the
/// tenant's labels: a Deployment's selector is immutable, and a shared selector would let two
/// CDTargets select each other's pods (seed defect 21).
pub(crate) fn selector_labels(valid: &ValidTarget<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([(labels::CDTARGET.into(), valid.name.into())])
}

/// Metadata of a child named `name`: namespace, labels and, when the CDTarget came from the
/// cluster (it has a uid), a controller owner reference.
pub(crate) fn child_metadata(valid: &ValidTarget<'_>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(valid.namespace.to_owned()),
        labels: Some(object_labels(valid)),
        // Only a CDTarget read from the cluster has a uid to own its children by.
        owner_references: valid.target.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}
