//! Builders and helpers shared by the foundation tests.

use std::path::PathBuf;

use cdtarget::api::CDTarget;
use cdtarget::api::keda::KedaVersion;
use cdtarget::manifests::{self, ApplySet, SourceFile};
use cdtarget::policy::{self, Policy};
use cdtarget::problem::Problem;
use cdtarget::render::{self, Children, Scaling, SecretDigests};

/// The namespace fixtures are loaded into.
pub const NAMESPACE: &str = "team-a";

/// The project's root directory.
pub fn project_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `examples/tenant-repo`.
pub fn example_repo() -> PathBuf {
    project_dir().join("examples/tenant-repo")
}

/// The policy of `examples/platform/policy.yaml`.
pub fn example_policy() -> Policy {
    policy::parse(&example_policy_text(), "examples/platform/policy.yaml").expect("example policy is valid")
}

/// The example policy with `from` replaced by `to` (`from` must occur).
pub fn example_policy_with(from: &str, to: &str) -> Policy {
    let text = example_policy_text();
    assert!(text.contains(from), "the example policy does not contain {from:?}");
    policy::parse(&text.replacen(from, to, 1), "policy.yaml").expect("valid policy")
}

fn example_policy_text() -> String {
    std::fs::read_to_string(project_dir().join("examples/platform/policy.yaml")).expect("example policy")
}

/// Loads in-memory files as a tenant repository into [`NAMESPACE`].
pub fn load(files: &[(&str, &str)], policy: &Policy) -> Result<ApplySet, Vec<Problem>> {
    let files = files.iter().map(|(path, text)| SourceFile { path: (*path).into(), text: (*text).into() }).collect();
    manifests::load(files, NAMESPACE, policy)
}

/// A valid CDTarget document; tests change what they are about.
pub const VALID_CDTARGET: &str = r#"
apiVersion: cdtarget.io/v1alpha1
kind: CDTarget
metadata:
  name: agents
spec:
  agentImage: ghcr.io/acme/azp-agent:1
  tokenRef: azp-token
  ip: ["10.0.0.1"]
  config:
    url: https://dev.azure.com/acme
    poolName: pool
"#;

/// [`VALID_CDTARGET`] with each `(from, to)` replaced; `from` must occur, so a fixture cannot
/// silently stay valid.
pub fn valid_with(replacements: &[(&str, &str)]) -> String {
    let mut text = VALID_CDTARGET.to_owned();
    for (from, to) in replacements {
        assert!(text.contains(from), "fixture does not contain {from:?}");
        text = text.replacen(from, to, 1);
    }
    text
}

/// [`VALID_CDTARGET`] with extra `spec` lines (indented by two spaces).
pub fn valid_plus(spec_lines: &str) -> String {
    format!("{VALID_CDTARGET}{spec_lines}")
}

/// [`VALID_CDTARGET`] with `ip` replaced.
pub fn with_ips(ips: &str) -> String {
    valid_with(&[(r#"ip: ["10.0.0.1"]"#, &format!("ip: {ips}"))])
}

/// [`VALID_CDTARGET`] with `config.url` replaced.
pub fn with_url(url: &str) -> String {
    valid_with(&[("url: https://dev.azure.com/acme", &format!("url: {url:?}"))])
}

/// [`VALID_CDTARGET`] with one `triggerMeta` entry.
pub fn with_trigger(key: &str, value: &str) -> String {
    valid_plus(&format!("  triggerMeta:\n    {key}: {value:?}\n"))
}

/// Parses one CDTarget document under `policy`, panicking with every problem if it is invalid.
pub fn cdtarget(yaml: &str, policy: &Policy) -> CDTarget {
    let set = load(&[("target.yaml", yaml)], policy).unwrap_or_else(|p| panic!("invalid fixture: {p:#?}"));
    set.cdtargets().next().expect("one CDTarget").clone()
}

/// Renders one CDTarget document with KEDA under `policy` and no known Secret contents.
pub fn children(yaml: &str, policy: &Policy) -> Children {
    let target = cdtarget(yaml, policy);
    render::render(&target, policy, &SecretDigests::new(), Scaling::Keda(KedaVersion::NEWEST_SUPPORTED))
        .expect("renders")
}
