//! Golden files: everything rendered from the bundled example, recorded with insta.

use cdtarget::api::CDTarget;
use cdtarget::api::keda::KedaVersion;
use cdtarget::cli::write_apply_set;
use cdtarget::manifests::{self, Limits};
use cdtarget::render::{self, Scaling, SecretDigests};
use serde_json::Value;

use super::support::{example_policy, example_repo};

/// The apply set of `examples/tenant-repo` under `examples/platform/policy.yaml`, rendered for
/// the newest supported KEDA (what `cdtarget render` does by default).
pub fn example_output() -> String {
    example_output_for(KedaVersion::NEWEST_SUPPORTED)
}

/// The apply set of the example rendered for KEDA `version`.
pub fn example_output_for(version: KedaVersion) -> String {
    let policy = example_policy();
    let files = manifests::read_tree(&example_repo(), &Limits::default()).expect("example repo reads");
    let set = manifests::load(files, "team-payments", &policy).expect("example repo is valid");
    let mut out = Vec::new();
    write_apply_set(&set, &policy, &SecretDigests::new(), Scaling::Keda(version), &mut out).unwrap();
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
    assert_eq!(
        documents.len(),
        1 + 3 * 5 + 4,
        "one ConfigMap, three Deployment-mode CDTargets with four children each, and a Job-mode one with three"
    );
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
        ("CDTarget", "build-jobs"),
        ("CDTarget", "deploy-agents"),
        ("CDTarget", "ipv6-agents"),
        ("CDTarget", "legacy-agent"),
        ("TriggerAuthentication", "build-jobs"),
        ("NetworkPolicy", "build-jobs"),
        ("ScaledJob", "build-jobs"),
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

/// What differs between the KEDA releases: the ScaledObject (Deployment mode) and the ScaledJob
/// (Job mode), each rendered for 2.20 and for 2.21, from the test CDTarget under the example
/// policy.
#[test]
fn keda_objects_of_both_modes_on_both_keda_releases_match_their_golden_files() {
    let policy = example_policy();
    for version in [KedaVersion::V2_20_0, KedaVersion::V2_21_0] {
        for mode in ["Deployment", "Job"] {
            let target = CDTarget::test().with_image("ghcr.io/acme/azp-agent:4.255.0").with_mode(mode);
            let children =
                render::render(&target, &policy, &SecretDigests::new(), Scaling::Keda(version)).expect("renders");
            let (kind, object) = match mode {
                "Job" => ("ScaledJob", cdtarget::yaml::to_yaml(children.scaled_job().expect("a ScaledJob"))),
                _ => ("ScaledObject", cdtarget::yaml::to_yaml(children.scaled_object().expect("a ScaledObject"))),
            };
            insta::assert_snapshot!(format!("keda_{version}__{mode}__{kind}"), object);
        }
    }
}

#[test]
fn the_example_rendered_for_keda_2_20_differs_only_in_what_keda_counts() {
    let newest = documents(&example_output());
    let oldest = documents(&example_output_for(KedaVersion::V2_20_0));
    assert_eq!(newest.len(), oldest.len());
    for ((kind, name, new), (_, _, old)) in newest.iter().zip(&oldest) {
        if kind == "ScaledObject" || kind == "ScaledJob" {
            assert_ne!(new, old, "{kind} {name}");
        } else {
            assert_eq!(new, old, "{kind} {name} does not depend on the KEDA release");
        }
    }
}
