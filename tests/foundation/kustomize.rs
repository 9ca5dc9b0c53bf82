//! `render` and `validate` of kustomizations (issue #15) through the binary: the bundled
//! `examples/tenant-repo-kustomize` (an overlay on a base elsewhere in the repository, a
//! generator, `images`, `replicas`, a CDTarget under a `namePrefix`), the boundary (`--root`),
//! and the namespace rule.
//!
//! The tests marked "needs the builder" fail while `src/kustomize/build.rs` is the skeleton.

use std::process::{Command, Output};

use serde_json::Value;

use super::golden::documents;
use super::support::project_dir;

const EXAMPLE: &str = "examples/tenant-repo-kustomize";
const OVERLAY: &str = "examples/tenant-repo-kustomize/clusters/prod";
const POLICY: &str = "examples/platform/policy.yaml";

fn cdtarget(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cdtarget")).args(args).current_dir(project_dir()).output().expect("binary runs")
}

fn render_example() -> Output {
    cdtarget(&["render", OVERLAY, "--root", EXAMPLE, "--policy", POLICY, "--namespace", "team-payments"])
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("UTF-8")
}

fn scratch(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cdtarget-kustomize-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// Needs the builder.
#[test]
fn render_of_the_kustomize_example_matches_its_golden_files() {
    let out = render_example();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty());
    let documents = documents(text(&out.stdout));
    let found: Vec<(&str, &str)> = documents.iter().map(|(kind, name, _)| (kind.as_str(), name.as_str())).collect();
    // The prefix reached the CDTarget's children: they are named after the built CDTarget.
    for kind in ["CDTarget", "TriggerAuthentication", "NetworkPolicy", "Deployment", "ScaledObject"] {
        assert!(found.contains(&(kind, "prod-deploy-agents")), "{kind} prod-deploy-agents in {found:?}");
    }
    assert!(found.contains(&("Deployment", "prod-web")) && found.contains(&("Service", "prod-web")), "{found:?}");
    assert_eq!(found.len(), 4 + 4, "the overlay's four objects and the CDTarget's four children: {found:?}");
    for (kind, name, text) in documents {
        insta::assert_snapshot!(format!("kustomize_example__{name}__{kind}"), text);
    }
}

/// Needs the builder. The objects cdtarget applies are the ones `kubectl kustomize` prints, in
/// the tenant namespace (kubectl is on the machine and on CI, as for tests/kustomize).
#[test]
fn the_kustomize_example_renders_the_objects_kubectl_kustomize_prints() {
    let kubectl = Command::new("kubectl").arg("kustomize").arg(OVERLAY).current_dir(project_dir()).output();
    let Ok(kubectl) = kubectl else {
        assert!(std::env::var_os("CI").is_none(), "kubectl must be installed under CI");
        return eprintln!("SKIP the_kustomize_example_renders_the_objects_kubectl_kustomize_prints: no kubectl");
    };
    assert!(kubectl.status.success(), "kubectl kustomize: {}", text(&kubectl.stderr));
    let out = render_example();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ours: Vec<Value> =
        cdtarget::yaml::parse_documents(text(&out.stdout)).unwrap().into_iter().map(|d| d.value).collect();
    for mut expected in cdtarget::yaml::parse_documents(text(&kubectl.stdout)).unwrap().into_iter().map(|d| d.value) {
        expected["metadata"]["namespace"] = "team-payments".into();
        let key = |o: &Value| (o["kind"].clone(), o["metadata"]["name"].clone());
        let found = ours
            .iter()
            .find(|o| key(o) == key(&expected))
            .unwrap_or_else(|| panic!("{:?} not rendered", key(&expected)));
        if expected["kind"] == "CDTarget" {
            // Rendered from the typed CDTarget (defaults filled in): the build's fields are kept.
            assert_eq!(found["metadata"]["labels"], expected["metadata"]["labels"]);
            assert_eq!(found["spec"]["agentImage"], expected["spec"]["agentImage"]);
        } else {
            assert_eq!(found, &expected);
        }
    }
}

/// Needs the builder: without `--root`, DIR is the boundary and the base above it is refused.
#[test]
fn without_root_a_base_above_dir_is_refused_at_its_resources_entry() {
    let out = cdtarget(&["validate", OVERLAY, "--policy", POLICY, "--namespace", "team-payments"]);
    assert_eq!(out.status.code(), Some(1));
    let lines = text(&out.stdout);
    assert!(lines.lines().any(|l| l.starts_with("kustomization.yaml: resources[0]: ")), "{lines}");
    assert!(!lines.contains("valid:"), "{lines}");
}

/// Needs the builder (it reports the kustomization files it read).
#[test]
fn validate_refuses_a_kustomization_namespace_other_than_the_tenants_at_that_field() {
    let dir = scratch(
        "namespace",
        &[
            ("overlay/kustomization.yaml", "namespace: team-b\nresources: [../base]\n"),
            ("base/kustomization.yaml", "resources: [cm.yaml]\n"),
            ("base/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n"),
        ],
    );
    let overlay = dir.join("overlay");
    let args = ["validate", overlay.to_str().unwrap(), "--root", dir.to_str().unwrap(), "--namespace", "team-a"];
    let out = cdtarget(&args);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout),
        "kustomization.yaml: namespace: `team-b` is not this tenant's namespace; every object goes to `team-a`: remove `namespace` (the objects land in `team-a` anyway) or set it to `team-a`\n"
    );
    // The same directory with the tenant's namespace is valid.
    std::fs::write(overlay.join("kustomization.yaml"), "namespace: team-a\nresources: [../base]\n").unwrap();
    let out = cdtarget(&args);
    assert_eq!(text(&out.stdout), "valid: 1 documents, 0 CDTargets\n", "{}", text(&out.stderr));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn root_must_hold_dir() {
    let out = cdtarget(&["validate", "examples/tenant-repo", "--root", "examples/platform"]);
    assert_eq!(out.status.code(), Some(1));
    let lines = text(&out.stdout);
    assert!(lines.starts_with("examples/tenant-repo: is not beneath --root examples/platform"), "{lines}");
}

#[test]
fn with_root_a_plain_directory_loads_as_before_and_problems_stay_relative_to_dir() {
    let plain = cdtarget(&["validate", "examples/tenant-repo", "--policy", POLICY, "--namespace", "team-payments"]);
    let rooted = cdtarget(&[
        "validate",
        "examples/tenant-repo",
        "--root",
        ".",
        "--policy",
        POLICY,
        "--namespace",
        "team-payments",
    ]);
    assert!(plain.status.success(), "{}", text(&plain.stdout));
    assert_eq!(text(&rooted.stdout), text(&plain.stdout));

    let dir =
        scratch("relative", &[("apps/web/bad.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: mine\n")]);
    let web = dir.join("apps/web");
    let out = cdtarget(&["validate", web.to_str().unwrap(), "--root", dir.to_str().unwrap()]);
    assert!(text(&out.stdout).starts_with("bad.yaml:1: kind: Namespace is cluster-scoped"), "{}", text(&out.stdout));
    std::fs::remove_dir_all(dir).unwrap();
}
