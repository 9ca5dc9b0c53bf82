//! Which kinds are cluster-scoped, and the order kinds are applied in.

/// Built-in (and well-known add-on) kinds that are cluster-scoped. Tenants may only apply
/// namespaced objects; a kind not listed here is taken as namespaced offline (`render`,
/// `validate`), and the controller decides through API discovery before applying
/// ([`crate::apply::discovery`]).
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
    ("policy", "PodSecurityPolicy"),
    ("keda.sh", "ClusterTriggerAuthentication"),
    ("cert-manager.io", "ClusterIssuer"),
];

/// Whether `group`/`kind` is known to be cluster-scoped.
pub(crate) fn is_cluster_scoped(group: &str, kind: &str) -> bool {
    CLUSTER_SCOPED.iter().any(|(g, k)| *g == group && *k == kind)
}

/// Apply order: what others reference comes first (identities and configuration, then
/// permissions, then services and workloads, then CDTargets); unknown kinds come last.
const APPLY_ORDER: &[&str] = &[
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "LimitRange",
    "ResourceQuota",
    "PersistentVolumeClaim",
    "Role",
    "RoleBinding",
    "Service",
    "Endpoints",
    "EndpointSlice",
    "Pod",
    "ReplicaSet",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "Ingress",
    "CDTarget",
];

/// Rank of a kind in the apply order.
pub(crate) fn apply_rank(kind: &str) -> usize {
    APPLY_ORDER.iter().position(|k| *k == kind).unwrap_or(APPLY_ORDER.len())
}
