//! The order `kubectl kustomize` prints objects in: kustomize v5.5's "legacy" sort by default
//! (kinds listed first, then every other kind by group, version and kind, then the kinds listed
//! last; within a kind by namespace and name), or the build's own order with `sortOptions.order:
//! fifo`.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::Value;

use crate::kustomize::resource::Resource;

/// The kinds kustomize puts first, in this order.
pub(crate) const FIRST: &[&str] = &[
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];

/// The kinds kustomize puts last, in this order.
pub(crate) const LAST: &[&str] = &["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"];

/// `sortOptions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SortOrder {
    /// `order: legacy`, with kustomize's kind lists or the ones given.
    Legacy {
        /// `legacySortOptions.orderFirst`.
        first: Vec<String>,
        /// `legacySortOptions.orderLast`.
        last: Vec<String>,
    },
    /// `order: fifo`: the order the build accumulated.
    Fifo,
}

/// What an object is sorted by.
struct Key {
    rank: i64,
    kind: String,
    /// `group_version_kind`, with kustomize's `~G`/`~V`/`~K` for empty parts.
    gvk: String,
    /// `kind_version_group|namespace|name`, with `~X`/`~N` for an empty namespace or name.
    id: String,
    namespace_without_group: bool,
}

fn or<'a>(text: &'a str, empty: &'a str) -> &'a str {
    if text.is_empty() { empty } else { text }
}

fn key(object: &Value, ranks: &HashMap<&str, i64>) -> Key {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let api_version = text("/apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = text("/kind");
    let gvk = format!("{}_{}_{}", or(group, "~G"), or(version, "~V"), or(kind, "~K"));
    let id = format!(
        "{}_{}_{}|{}|{}",
        or(kind, "~K"),
        or(version, "~V"),
        or(group, "~G"),
        or(text("/metadata/namespace"), "~X"),
        or(text("/metadata/name"), "~N")
    );
    Key {
        rank: ranks.get(kind).copied().unwrap_or(0),
        kind: kind.to_owned(),
        gvk,
        id,
        namespace_without_group: kind == "Namespace" && group.is_empty(),
    }
}

fn compare(a: &Key, b: &Key) -> Ordering {
    if a.gvk != b.gvk {
        if a.rank != b.rank {
            return a.rank.cmp(&b.rank);
        }
        // kustomize reverses the order of two Namespace kinds when one has no group
        if a.kind == "Namespace" && b.kind == "Namespace" && (a.namespace_without_group || b.namespace_without_group) {
            return b.gvk.cmp(&a.gvk);
        }
        return a.gvk.cmp(&b.gvk);
    }
    a.id.cmp(&b.id)
}

/// Puts `resources` in the order `order` says (kustomize's legacy order when `None`).
pub fn sort(resources: &mut Vec<Resource>, order: Option<&SortOrder>) {
    let (first, last): (Vec<&str>, Vec<&str>) = match order {
        Some(SortOrder::Fifo) => return,
        Some(SortOrder::Legacy { first, last }) => {
            (first.iter().map(String::as_str).collect(), last.iter().map(String::as_str).collect())
        }
        None => (FIRST.to_vec(), LAST.to_vec()),
    };
    let mut ranks = HashMap::new();
    for (i, kind) in first.iter().enumerate() {
        ranks.insert(*kind, i as i64 - first.len() as i64);
    }
    for (i, kind) in last.iter().enumerate() {
        ranks.insert(*kind, i as i64 + 1);
    }
    let mut keyed: Vec<(Key, Resource)> = resources.drain(..).map(|r| (key(&r.object, &ranks), r)).collect();
    keyed.sort_by(|a, b| compare(&a.0, &b.0));
    resources.extend(keyed.into_iter().map(|(_, r)| r));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kustomize::resource::Origin;
    use serde_json::json;

    fn resource(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Resource {
        let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        if let Some(namespace) = namespace {
            object["metadata"]["namespace"] = json!(namespace);
        }
        Resource::from_document(object, Origin::Document { file: "x.yaml".into(), index: 1, line: 1 })
    }

    fn names(resources: &[Resource]) -> Vec<String> {
        resources.iter().map(|r| format!("{}/{}", r.kind(), r.name())).collect()
    }

    #[test]
    fn legacy_order_puts_listed_kinds_first_and_webhooks_last() {
        let mut resources = vec![
            resource("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", None, "v"),
            resource("apps/v1", "Deployment", Some("a"), "web"),
            resource("cdtarget.io/v1alpha1", "CDTarget", Some("a"), "t"),
            resource("v1", "ConfigMap", Some("b"), "a"),
            resource("v1", "ConfigMap", Some("a"), "z"),
            resource("networking.k8s.io/v1", "Ingress", Some("a"), "i"),
            resource("v1", "Namespace", None, "n"),
            resource("v1", "Service", None, "s"),
        ];
        sort(&mut resources, None);
        assert_eq!(
            names(&resources),
            [
                "Namespace/n",
                "ConfigMap/z",
                "ConfigMap/a",
                "Service/s",
                "Deployment/web",
                "CDTarget/t",
                "Ingress/i",
                "ValidatingWebhookConfiguration/v"
            ],
            "unlisted kinds sort by group (cdtarget.io before networking.k8s.io); within a kind by namespace then name"
        );
    }

    #[test]
    fn fifo_keeps_the_build_order_and_custom_lists_replace_the_default() {
        let build = || vec![resource("apps/v1", "Deployment", None, "d"), resource("v1", "Service", None, "s")];
        let mut fifo = build();
        sort(&mut fifo, Some(&SortOrder::Fifo));
        assert_eq!(names(&fifo), ["Deployment/d", "Service/s"]);
        let mut custom = build();
        sort(&mut custom, Some(&SortOrder::Legacy { first: vec!["Deployment".into()], last: vec![] }));
        assert_eq!(names(&custom), ["Deployment/d", "Service/s"]);
        let mut default = build();
        sort(&mut default, None);
        assert_eq!(names(&default), ["Service/s", "Deployment/d"]);
    }
}
