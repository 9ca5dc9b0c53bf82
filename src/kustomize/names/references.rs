//! kustomize v5.5's default name-reference configuration: which fields of which kinds hold the
//! name of an object of another kind, so that renaming the object (prefix, suffix, hash) updates
//! them.
//!
//! Written from kustomize's `builtinpluginconsts/namereference.go` as a table of facts (checked
//! entry by entry against it, and by the oracle cases under `tests/kustomize/builds/`), in the
//! order kustomize sorts it (its `Gvk.IsLessThan`: the kinds it orders first, then by group,
//! version and kind). The order matters only when one field refers to several kinds (`rules[].
//! resourceNames` to ConfigMaps, Secrets and PersistentVolumes): the first kind that resolves
//! the name renames it.

use std::sync::OnceLock;

/// A group, version and kind pattern; an empty part matches anything (kustomize's
/// `Gvk.IsSelected`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gvk {
    /// The API group (`""` matches every group).
    pub group: &'static str,
    /// The version (`""` matches every version).
    pub version: &'static str,
    /// The kind (`""` matches every kind).
    pub kind: &'static str,
}

impl Gvk {
    /// Whether an object of `group`, `version` and `kind` matches.
    pub fn selects(&self, group: &str, version: &str, kind: &str) -> bool {
        (self.group.is_empty() || self.group == group)
            && (self.version.is_empty() || self.version == version)
            && (self.kind.is_empty() || self.kind == kind)
    }
}

/// One field of a referring kind that holds names: a scalar (`configMapRef.name`), a list of
/// scalars (`rules[].resourceNames`), or a map or list of maps with `name` and `namespace`
/// (`subjects`, `clientConfig.service`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Referrer {
    /// Which objects have the field.
    pub gvk: Gvk,
    /// The field's path; lists on the way are walked element by element.
    pub path: Vec<&'static str>,
}

/// A kind that is referred to by name, and the fields that refer to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NameReference {
    /// The kind referred to.
    pub target: Gvk,
    /// The fields referring to it.
    pub referrers: Vec<Referrer>,
}

const fn gvk(group: &'static str, version: &'static str, kind: &'static str) -> Gvk {
    Gvk { group, version, kind }
}

const fn kind(kind: &'static str) -> Gvk {
    gvk("", "", kind)
}

const RBAC: &str = "rbac.authorization.k8s.io";

/// Where ConfigMaps are named in a pod spec.
const CONFIG_MAP_IN_POD_SPEC: &[&[&str]] = &[
    &["volumes", "configMap", "name"],
    &["containers", "env", "valueFrom", "configMapKeyRef", "name"],
    &["initContainers", "env", "valueFrom", "configMapKeyRef", "name"],
    &["containers", "envFrom", "configMapRef", "name"],
    &["initContainers", "envFrom", "configMapRef", "name"],
    &["volumes", "projected", "sources", "configMap", "name"],
];

/// Where Secrets are named in a pod spec.
const SECRET_IN_POD_SPEC: &[&[&str]] = &[
    &["volumes", "secret", "secretName"],
    &["containers", "env", "valueFrom", "secretKeyRef", "name"],
    &["initContainers", "env", "valueFrom", "secretKeyRef", "name"],
    &["containers", "envFrom", "secretRef", "name"],
    &["initContainers", "envFrom", "secretRef", "name"],
    &["imagePullSecrets", "name"],
    &["volumes", "projected", "sources", "secret", "name"],
];

const TEMPLATE_SPEC: &[&str] = &["spec", "template", "spec"];
const JOB_TEMPLATE_SPEC: &[&str] = &["spec", "jobTemplate", "spec", "template", "spec"];

/// The pod specs kustomize looks into for ConfigMaps and Secrets (a Pod only in `v1`; no
/// ReplicationController).
const CONFIG_AND_SECRET_HOLDERS: &[(Gvk, &[&str])] = &[
    (gvk("", "v1", "Pod"), &["spec"]),
    (kind("PodTemplate"), &["template", "spec"]),
    (kind("Deployment"), TEMPLATE_SPEC),
    (kind("ReplicaSet"), TEMPLATE_SPEC),
    (kind("DaemonSet"), TEMPLATE_SPEC),
    (kind("StatefulSet"), TEMPLATE_SPEC),
    (kind("Job"), TEMPLATE_SPEC),
    (kind("CronJob"), JOB_TEMPLATE_SPEC),
];

/// The pod specs kustomize looks into for ServiceAccounts, PersistentVolumeClaims and
/// PriorityClasses (no PodTemplate, no ReplicaSet).
const OTHER_HOLDERS: &[(Gvk, &[&str])] = &[
    (kind("Pod"), &["spec"]),
    (kind("StatefulSet"), TEMPLATE_SPEC),
    (kind("Deployment"), TEMPLATE_SPEC),
    (kind("ReplicationController"), TEMPLATE_SPEC),
    (kind("CronJob"), JOB_TEMPLATE_SPEC),
    (kind("Job"), TEMPLATE_SPEC),
    (kind("DaemonSet"), TEMPLATE_SPEC),
];

fn referrer(gvk: Gvk, path: &[&'static str]) -> Referrer {
    Referrer { gvk, path: path.to_vec() }
}

/// `fields` under the pod spec of every holder.
fn in_pod_specs(holders: &[(Gvk, &[&'static str])], fields: &[&[&'static str]]) -> Vec<Referrer> {
    let mut out = Vec::new();
    for (gvk, spec) in holders {
        for field in fields {
            out.push(Referrer { gvk: *gvk, path: spec.iter().chain(field.iter()).copied().collect() });
        }
    }
    out
}

fn scale_target() -> Vec<Referrer> {
    vec![referrer(kind("HorizontalPodAutoscaler"), &["spec", "scaleTargetRef", "name"])]
}

fn build() -> Vec<NameReference> {
    let resource_names = &["rules", "resourceNames"][..];
    let annotation = |name: &'static str| referrer(kind("Ingress"), &["metadata", "annotations", name]);
    let mut config_map = in_pod_specs(CONFIG_AND_SECRET_HOLDERS, CONFIG_MAP_IN_POD_SPEC);
    config_map.extend([
        referrer(kind("Node"), &["spec", "configSource", "configMap"]),
        referrer(kind("Role"), resource_names),
        referrer(kind("ClusterRole"), resource_names),
        annotation("nginx.ingress.kubernetes.io/fastcgi-params-configmap"),
    ]);
    let mut secret = in_pod_specs(CONFIG_AND_SECRET_HOLDERS, SECRET_IN_POD_SPEC);
    secret.extend([
        // kustomize lists this one twice; the second pass finds nothing more to rename.
        referrer(kind("Ingress"), &["spec", "tls", "secretName"]),
        annotation("ingress.kubernetes.io/auth-secret"),
        annotation("nginx.ingress.kubernetes.io/auth-secret"),
        annotation("nginx.ingress.kubernetes.io/auth-tls-secret"),
        referrer(kind("ServiceAccount"), &["imagePullSecrets", "name"]),
        referrer(kind("StorageClass"), &["parameters", "secretName"]),
        referrer(kind("StorageClass"), &["parameters", "adminSecretName"]),
        referrer(kind("StorageClass"), &["parameters", "userSecretName"]),
        referrer(kind("StorageClass"), &["parameters", "secretRef"]),
        referrer(kind("Role"), resource_names),
        referrer(kind("ClusterRole"), resource_names),
        referrer(
            gvk("serving.knative.dev", "v1", "Service"),
            &["spec", "template", "spec", "containers", "env", "valueFrom", "secretKeyRef", "name"],
        ),
        referrer(kind("PersistentVolume"), &["spec", "azureFile", "secretName"]),
    ]);
    let mut service_account = vec![
        referrer(gvk(RBAC, "", "RoleBinding"), &["subjects"]),
        referrer(gvk(RBAC, "", "ClusterRoleBinding"), &["subjects"]),
    ];
    service_account.extend(in_pod_specs(OTHER_HOLDERS, &[&["serviceAccountName"]]));
    let ingress_backend = |path: &[&'static str]| referrer(kind("Ingress"), path);
    let webhook = |k: &'static str| {
        referrer(gvk("admissionregistration.k8s.io", "", k), &["webhooks", "clientConfig", "service"])
    };
    vec![
        NameReference {
            target: gvk("storage.k8s.io", "v1", "StorageClass"),
            referrers: vec![
                referrer(kind("PersistentVolume"), &["spec", "storageClassName"]),
                referrer(kind("PersistentVolumeClaim"), &["spec", "storageClassName"]),
                referrer(kind("StatefulSet"), &["spec", "volumeClaimTemplates", "spec", "storageClassName"]),
            ],
        },
        NameReference { target: gvk("", "v1", "ServiceAccount"), referrers: service_account },
        NameReference {
            target: gvk(RBAC, "", "Role"),
            referrers: vec![referrer(gvk(RBAC, "", "RoleBinding"), &["roleRef", "name"])],
        },
        NameReference {
            target: gvk(RBAC, "", "ClusterRole"),
            referrers: vec![
                referrer(gvk(RBAC, "", "RoleBinding"), &["roleRef", "name"]),
                referrer(gvk(RBAC, "", "ClusterRoleBinding"), &["roleRef", "name"]),
            ],
        },
        NameReference { target: gvk("", "v1", "ConfigMap"), referrers: config_map },
        NameReference { target: gvk("", "v1", "Secret"), referrers: secret },
        NameReference {
            target: gvk("", "v1", "Service"),
            referrers: vec![
                referrer(gvk("apps", "", "StatefulSet"), &["spec", "serviceName"]),
                ingress_backend(&["spec", "rules", "http", "paths", "backend", "serviceName"]),
                ingress_backend(&["spec", "backend", "serviceName"]),
                ingress_backend(&["spec", "rules", "http", "paths", "backend", "service", "name"]),
                ingress_backend(&["spec", "defaultBackend", "service", "name"]),
                referrer(gvk("apiregistration.k8s.io", "", "APIService"), &["spec", "service", "name"]),
                webhook("ValidatingWebhookConfiguration"),
                webhook("MutatingWebhookConfiguration"),
            ],
        },
        NameReference {
            target: gvk("scheduling.k8s.io", "v1", "PriorityClass"),
            referrers: in_pod_specs(OTHER_HOLDERS, &[&["priorityClassName"]]),
        },
        NameReference {
            target: gvk("", "v1", "PersistentVolume"),
            referrers: vec![
                referrer(kind("PersistentVolumeClaim"), &["spec", "volumeName"]),
                referrer(kind("ClusterRole"), resource_names),
            ],
        },
        NameReference {
            target: gvk("", "v1", "PersistentVolumeClaim"),
            referrers: in_pod_specs(OTHER_HOLDERS, &[&["volumes", "persistentVolumeClaim", "claimName"]]),
        },
        NameReference { target: kind("Deployment"), referrers: scale_target() },
        NameReference { target: kind("StatefulSet"), referrers: scale_target() },
        NameReference {
            target: gvk("admissionregistration.k8s.io", "", "ValidatingAdmissionPolicy"),
            referrers: vec![referrer(
                gvk("admissionregistration.k8s.io", "", "ValidatingAdmissionPolicyBinding"),
                &["spec", "policyName"],
            )],
        },
        NameReference {
            // kustomize writes the group as `networking.k8s.io/v1`, which no object's group
            // equals: an Ingress's `ingressClassName` is never updated. Kept as kustomize has it.
            target: gvk("networking.k8s.io/v1", "v1", "IngressClass"),
            referrers: vec![referrer(kind("Ingress"), &["spec", "ingressClassName"])],
        },
        NameReference { target: kind("ReplicaSet"), referrers: scale_target() },
        NameReference { target: kind("ReplicationController"), referrers: scale_target() },
    ]
}

/// kustomize v5.5's default name-reference configuration, in its order.
pub(crate) fn default_name_references() -> &'static [NameReference] {
    static TABLE: OnceLock<Vec<NameReference>> = OnceLock::new();
    TABLE.get_or_init(build)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn referrers_of(target: &str) -> Vec<String> {
        let reference = default_name_references().iter().find(|r| r.target.kind == target).expect("a target");
        reference.referrers.iter().map(|r| format!("{} {}", r.gvk.kind, r.path.join("/"))).collect()
    }

    #[test]
    fn config_maps_are_found_in_every_pod_template_kustomize_knows() {
        let found = referrers_of("ConfigMap");
        for expected in [
            "Pod spec/volumes/configMap/name",
            "Deployment spec/template/spec/containers/envFrom/configMapRef/name",
            "CronJob spec/jobTemplate/spec/template/spec/initContainers/env/valueFrom/configMapKeyRef/name",
            "PodTemplate template/spec/volumes/projected/sources/configMap/name",
            "Role rules/resourceNames",
        ] {
            assert!(found.iter().any(|f| f == expected), "{expected} missing from {found:#?}");
        }
        // kustomize does not look into ReplicationControllers for ConfigMaps.
        assert!(!found.iter().any(|f| f.starts_with("ReplicationController")));
        assert_eq!(found.len(), 8 * 6 + 4);
    }

    #[test]
    fn secrets_include_image_pull_secrets_and_ingress_tls() {
        let found = referrers_of("Secret");
        assert!(found.iter().any(|f| f == "StatefulSet spec/template/spec/imagePullSecrets/name"));
        assert!(found.iter().any(|f| f == "Ingress spec/tls/secretName"));
        assert!(found.iter().any(|f| f == "ServiceAccount imagePullSecrets/name"));
        assert_eq!(found.len(), 8 * 7 + 13);
    }

    #[test]
    fn the_table_is_in_kustomizes_sorted_order() {
        let kinds: Vec<&str> = default_name_references().iter().map(|r| r.target.kind).collect();
        assert_eq!(
            kinds,
            [
                "StorageClass",
                "ServiceAccount",
                "Role",
                "ClusterRole",
                "ConfigMap",
                "Secret",
                "Service",
                "PriorityClass",
                "PersistentVolume",
                "PersistentVolumeClaim",
                "Deployment",
                "StatefulSet",
                "ValidatingAdmissionPolicy",
                "IngressClass",
                "ReplicaSet",
                "ReplicationController",
            ]
        );
    }

    #[test]
    fn an_empty_part_of_a_pattern_matches_anything() {
        assert!(gvk("apps", "", "").selects("apps", "v1", "StatefulSet"));
        assert!(!gvk("apps", "", "StatefulSet").selects("apps", "v1", "Deployment"));
        assert!(!gvk("apps", "", "").selects("", "v1", "Service"));
        assert!(gvk("", "v1", "Pod").selects("", "v1", "Pod"));
        assert!(!gvk("", "v1", "Pod").selects("", "v2", "Pod"));
    }
}
