//! The CRDs committed under `deploy/crds/` are exactly what the types generate.

use cdtarget::cli::{crd_documents, crds_yaml};
use serde_json::Value;

use super::support::project_dir;

#[test]
fn committed_crds_match_the_types() {
    for (file, generated) in crd_documents() {
        let path = project_dir().join("deploy/crds").join(file);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} differs from what the types generate; run `cargo run -- crds --output-dir deploy/crds` and commit deploy/crds/ (see README)",
            path.display()
        );
    }
}

#[test]
fn crds_command_prints_every_crd() {
    let text = crds_yaml();
    let documents = cdtarget::yaml::parse_documents(&text).unwrap();
    let kinds: Vec<&str> =
        documents.iter().map(|d| d.value.pointer("/spec/names/kind").and_then(Value::as_str).unwrap()).collect();
    assert_eq!(kinds, ["CDTarget", "TenantRepository", "SyncStatus"]);
}

fn crd(kind: &str) -> Value {
    let text = crds_yaml();
    let documents = cdtarget::yaml::parse_documents(&text).unwrap();
    documents.into_iter().map(|d| d.value).find(|v| v.pointer("/spec/names/kind") == Some(&kind.into())).unwrap()
}

#[test]
fn crds_have_short_names_and_ready_message_age_columns() {
    for (kind, short) in [("CDTarget", "cdt"), ("TenantRepository", "trepo"), ("SyncStatus", "sync")] {
        let crd = crd(kind);
        assert_eq!(crd.pointer("/spec/group").unwrap(), "cdtarget.io");
        assert_eq!(crd.pointer("/spec/versions/0/name").unwrap(), "v1alpha1");
        let shorts = crd.pointer("/spec/names/shortNames").unwrap().as_array().unwrap();
        assert!(shorts.contains(&short.into()), "{kind}: {shorts:?}");
        let columns: Vec<&str> = crd
            .pointer("/spec/versions/0/additionalPrinterColumns")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        for wanted in ["Ready", "Message", "Age"] {
            assert!(columns.contains(&wanted), "{kind} lacks printer column {wanted}: {columns:?}");
        }
        assert!(crd.pointer("/spec/versions/0/subresources/status").is_some(), "{kind} has a status subresource");
    }
}

#[test]
fn sync_status_columns_are_ready_revision_message_age_in_that_order() {
    let crd = crd("SyncStatus");
    assert_eq!(crd.pointer("/spec/scope").unwrap(), "Namespaced");
    let columns: Vec<(&str, &str)> = crd
        .pointer("/spec/versions/0/additionalPrinterColumns")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["jsonPath"].as_str().unwrap()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
            ("Revision", ".status.lastAppliedRevision"),
            ("Message", ".status.conditions[?(@.type==\"Ready\")].message"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
}

#[test]
fn cdtarget_crd_keeps_every_seed_field_and_requires_the_seed_references() {
    let crd = crd("CDTarget");
    let spec = crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec").unwrap();
    let seed_fields = [
        "ip",
        "additionalSelector",
        "agentImage",
        "agentResources",
        "imagePullSecrets",
        "minReplicaCount",
        "maxReplicaCount",
        "env",
        "proxyRef",
        "tokenRef",
        "caCertRef",
        "config",
        "triggerMeta",
        "dnsPolicy",
        "dnsConfig",
    ];
    for field in seed_fields {
        assert!(spec["properties"].get(field).is_some(), "spec.{field} is missing from the CRD");
    }
    for field in ["url", "poolName", "agentName", "workDir", "mtuValue"] {
        assert!(spec["properties"]["config"]["properties"].get(field).is_some(), "spec.config.{field} is missing");
    }
    let required: Vec<&str> = spec["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for field in ["tokenRef", "config"] {
        assert!(required.contains(&field), "spec.{field} should be required: {required:?}");
    }
}
