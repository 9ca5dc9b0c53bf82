//! Which kinds kustomize v5.5 treats as cluster-scoped.
//!
//! kustomize decides from the OpenAPI schema it embeds (Kubernetes 1.21.2), by exact `apiVersion`
//! and `kind`: a kind it does not know (a custom resource, a kind added after 1.21) is treated as
//! namespaced. The namespace transformer and the name-reference resolution both follow this list,
//! so that the output is the one `kubectl kustomize` prints; kinds the API server knows to be
//! cluster-scoped but kustomize does not are refused by [`super::set_namespace`] instead of being
//! given a namespace.

use crate::kustomize::patch::schema::MergeKeys;

/// `(apiVersion, kind)` of every cluster-scoped kind in the schema kustomize v5.5 embeds.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1beta1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1beta1", "ValidatingWebhookConfiguration"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition"),
    ("apiregistration.k8s.io/v1", "APIService"),
    ("apiregistration.k8s.io/v1beta1", "APIService"),
    ("certificates.k8s.io/v1", "CertificateSigningRequest"),
    ("certificates.k8s.io/v1beta1", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io/v1beta1", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io/v1beta1", "PriorityLevelConfiguration"),
    ("networking.k8s.io/v1", "IngressClass"),
    ("networking.k8s.io/v1beta1", "IngressClass"),
    ("node.k8s.io/v1", "RuntimeClass"),
    ("node.k8s.io/v1beta1", "RuntimeClass"),
    ("policy/v1beta1", "PodSecurityPolicy"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1beta1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1beta1", "ClusterRoleBinding"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("scheduling.k8s.io/v1beta1", "PriorityClass"),
    ("storage.k8s.io/v1", "CSIDriver"),
    ("storage.k8s.io/v1", "CSINode"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("storage.k8s.io/v1", "VolumeAttachment"),
    ("storage.k8s.io/v1beta1", "CSIDriver"),
    ("storage.k8s.io/v1beta1", "CSINode"),
    ("storage.k8s.io/v1beta1", "StorageClass"),
    ("storage.k8s.io/v1beta1", "VolumeAttachment"),
    ("v1", "ComponentStatus"),
    ("v1", "Namespace"),
    ("v1", "Node"),
    ("v1", "NodeProxyOptions"),
    ("v1", "PersistentVolume"),
];

/// Whether kustomize v5.5 treats objects of `api_version` and `kind` as cluster-scoped.
pub(crate) fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    CLUSTER_SCOPED.iter().any(|&(v, k)| v == api_version && k == kind)
}

/// Whether the API server the tests run knows the kind as cluster-scoped where kustomize v5.5
/// would give it a namespace.
pub(crate) fn unknown_to_kustomize(api_version: &str, kind: &str) -> bool {
    !is_cluster_scoped(api_version, kind) && MergeKeys::builtin().is_cluster_scoped(api_version, kind)
}

/// kustomize's "effective namespace" of an object: `None` for a cluster-scoped one, `default`
/// for a namespaced one without a namespace.
pub(crate) fn effective_namespace<'a>(api_version: &str, kind: &str, namespace: Option<&'a str>) -> Option<&'a str> {
    if is_cluster_scoped(api_version, kind) {
        None
    } else {
        Some(namespace.filter(|n| !n.is_empty()).unwrap_or("default"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kustomizes_list_decides_by_exact_api_version() {
        assert!(is_cluster_scoped("rbac.authorization.k8s.io/v1", "ClusterRole"));
        assert!(!is_cluster_scoped("v1", "ConfigMap"));
        // kustomize's schema has no v1 FlowSchema: it is namespaced as far as kustomize knows.
        assert!(!is_cluster_scoped("flowcontrol.apiserver.k8s.io/v1", "FlowSchema"));
        assert!(unknown_to_kustomize("flowcontrol.apiserver.k8s.io/v1", "FlowSchema"));
        assert!(unknown_to_kustomize("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"));
        assert!(!unknown_to_kustomize("v1", "Namespace"));
        assert!(!unknown_to_kustomize("example.com/v1", "Widget"));
    }

    #[test]
    fn the_effective_namespace_of_a_namespaced_object_without_one_is_default() {
        assert_eq!(effective_namespace("v1", "ConfigMap", None), Some("default"));
        assert_eq!(effective_namespace("v1", "ConfigMap", Some("")), Some("default"));
        assert_eq!(effective_namespace("v1", "ConfigMap", Some("a")), Some("a"));
        assert_eq!(effective_namespace("v1", "Namespace", Some("a")), None);
    }

    #[test]
    fn every_kind_kustomize_calls_cluster_scoped_that_the_api_server_still_serves_agrees() {
        // Where both know a kind they must agree, or the namespace would go where the API server
        // does not expect one (or be missing where it does).
        let server = MergeKeys::builtin();
        for &(api_version, kind) in CLUSTER_SCOPED {
            let served = server.kinds.contains_key(&format!("{api_version} {kind}"));
            if served {
                assert!(server.is_cluster_scoped(api_version, kind), "{api_version} {kind}");
            }
        }
    }
}
