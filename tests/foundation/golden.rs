//! Golden files: everything rendered from the bundled example, recorded with insta.

use cdtarget::cli::write_apply_set;
use cdtarget::manifests::{self, Limits};
use cdtarget::render::SecretDigests;
use serde_json::Value;

use super::support::{example_policy, example_repo};

/// The apply set of `examples/tenant-repo` under `examples/platform/policy.yaml`.
pub fn example_output() -> String {
    let policy = example_policy();
    let files = manifests::read_tree(&example_repo(), &Limits::default()).expect("example repo reads");
    let set = manifests::load(files, "team-payments", &policy).expect("example repo is valid");
    let mut out = Vec::new();
    write_apply_set(&set, &policy, &SecretDigests::new(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Splits multi-document output into (kind, name, text).
pub fn documents(output: &str) -> Vec<(String, String, String)> {
    output
        .split("---\n")
        .filter(|d| !d.is_empty())
        .map(|text| {
            let value = cdtarget::yaml::parse_one(text).unwrap();
            let field = |p: &str| value.pointer(p).and_then(Value::as_str).unwrap().to_owned();
            (field("/kind"), field("/metadata/name"), text.to_owned())
        })
        .collect()
}

#[test]
fn every_object_rendered_from_the_example_matches_its_golden_file() {
    let output = example_output();
    let documents = documents(&output);
    assert_eq!(documents.len(), 1 + 3 * 5, "one ConfigMap plus three CDTargets with four children each");
    for (kind, name, text) in documents {
        insta::assert_snapshot!(format!("example__{name}__{kind}"), text);
    }
}

#[test]
fn example_output_is_in_apply_order_and_deterministic() {
    let output = example_output();
    assert_eq!(output, example_output());
    let order: Vec<(String, String)> = documents(&output).into_iter().map(|(kind, name, _)| (kind, name)).collect();
    let expected = [
        ("ConfigMap", "pipeline-settings"),
        ("CDTarget", "deploy-agents"),
        ("CDTarget", "ipv6-agents"),
        ("CDTarget", "legacy-agent"),
        ("TriggerAuthentication", "deploy-agents"),
        ("NetworkPolicy", "deploy-agents"),
        ("Deployment", "deploy-agents"),
        ("ScaledObject", "deploy-agents"),
    ];
    let head: Vec<(&str, &str)> = order.iter().take(expected.len()).map(|(k, n)| (k.as_str(), n.as_str())).collect();
    assert_eq!(head, expected);
}

#[test]
fn legacy_api_version_is_rendered_as_the_new_kind() {
    let output = example_output();
    let legacy = documents(&output).into_iter().find(|(kind, name, _)| kind == "CDTarget" && name == "legacy-agent");
    let (_, _, text) = legacy.expect("the seed document is read");
    assert!(text.starts_with("apiVersion: cdtarget.io/v1alpha1\n"), "{text}");
}
