//! Builders and helpers shared by the foundation tests.

use std::path::PathBuf;

use cdtarget::api::CDTarget;
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
    let path = project_dir().join("examples/platform/policy.yaml");
    let text = std::fs::read_to_string(&path).expect("example policy");
    policy::parse(&text, "examples/platform/policy.yaml").expect("example policy is valid")
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

/// Parses one CDTarget document under `policy`, panicking with every problem if it is invalid.
pub fn cdtarget(yaml: &str, policy: &Policy) -> CDTarget {
    let set = load(&[("target.yaml", yaml)], policy).unwrap_or_else(|p| panic!("invalid fixture: {p:#?}"));
    set.cdtargets().next().expect("one CDTarget").clone()
}

/// Renders one CDTarget document with KEDA under `policy` and no known Secret contents.
pub fn children(yaml: &str, policy: &Policy) -> Children {
    let target = cdtarget(yaml, policy);
    render::render(&target, policy, &SecretDigests::new(), Scaling::Keda).expect("renders")
}
