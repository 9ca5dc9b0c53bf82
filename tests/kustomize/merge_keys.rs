//! The checked-in merge key table is what the generator makes of the API server's OpenAPI
//! document.

use std::path::Path;

use cdtarget::kustomize::patch::schema::{MergeKeys, merge_key_table};
use serde_json::Value;

use crate::common::{ControlPlane, skip_or_fail};

/// The table, relative to the repository.
const TABLE: &str = "src/kustomize/patch/merge_keys.json";

/// Rewrites the table instead of failing when set.
const UPDATE: &str = "UPDATE_MERGE_KEYS";

/// The table as checked in: pretty JSON with a final newline.
pub fn render(table: &MergeKeys) -> String {
    serde_json::to_string_pretty(table).expect("JSON") + "\n"
}

#[test]
fn the_merge_key_table_is_generated_from_the_api_servers_openapi_document() {
    let test = "the_merge_key_table_is_generated_from_the_api_servers_openapi_document";
    let Some(cluster) = skip_or_fail(test, ControlPlane::shared()) else { return };
    let text = cluster.kubectl(&["get", "--raw", "/openapi/v2"]).success();
    let document: Value = serde_json::from_str(&text).expect("the OpenAPI document is JSON");
    let generated = render(&merge_key_table(&document, &format!("kube-apiserver {} /openapi/v2", cluster.version())));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(TABLE);
    if std::env::var_os(UPDATE).is_some() {
        std::fs::write(&path, &generated).expect("write the table");
        return;
    }
    let current = std::fs::read_to_string(&path).expect("read the table");
    assert!(
        current == generated,
        "{TABLE} is not what the API server's OpenAPI document gives: run this test with {UPDATE}=1"
    );
}

#[test]
fn the_checked_in_table_is_what_the_library_embeds() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(TABLE);
    let current = std::fs::read_to_string(&path).expect("read the table");
    assert_eq!(current, render(MergeKeys::builtin()), "the table is rendered canonically (sorted, pretty)");
    let keys = |definition: &str, field: &str| MergeKeys::builtin().definitions[definition].fields[field].keys.clone();
    // The merge keys of the examples, as kustomize merges them.
    assert_eq!(keys("io.k8s.api.core.v1.PodSpec", "containers"), ["name"]);
    assert_eq!(keys("io.k8s.api.core.v1.PodSpec", "volumes"), ["name"]);
    assert_eq!(keys("io.k8s.api.core.v1.Container", "env"), ["name"]);
    assert_eq!(keys("io.k8s.api.core.v1.Container", "ports"), ["containerPort", "protocol"]);
}
