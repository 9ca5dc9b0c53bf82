//! `deploy/` installed as users install it, and the real apiserver's view of our CRDs.

use std::io::Write;
use std::process::Command;

use crate::common::cluster::{installed_cluster, namespace};

#[test]
fn deploy_and_keda_crds_are_accepted_by_the_real_apiserver() {
    let Some((cluster, installed)) = installed_cluster("deploy_and_keda_crds_are_accepted_by_the_real_apiserver")
    else {
        return;
    };
    for created in [
        "customresourcedefinition.apiextensions.k8s.io/cdtargets.cdtarget.io",
        "customresourcedefinition.apiextensions.k8s.io/tenantrepositories.cdtarget.io",
        "namespace/cdtarget-system",
        "serviceaccount/cdtarget",
        "clusterrole.rbac.authorization.k8s.io/cdtarget-controller",
        "deployment.apps/cdtarget",
    ] {
        assert!(
            installed.deploy.contains(created),
            "`kubectl apply -k deploy/` did not apply {created}:\n{}",
            installed.deploy
        );
    }
    for created in [
        "customresourcedefinition.apiextensions.k8s.io/scaledobjects.keda.sh",
        "customresourcedefinition.apiextensions.k8s.io/triggerauthentications.keda.sh",
    ] {
        assert!(installed.keda.contains(created), "KEDA's CRDs: {created} missing:\n{}", installed.keda);
    }
    // Structural schemas: the apiserver reports a CRD whose schema is not structural in the
    // NonStructuralSchema condition (and keeps serving it); ours must have none.
    let conditions = cluster
        .kubectl(&[
            "get",
            "crd",
            "cdtargets.cdtarget.io",
            "tenantrepositories.cdtarget.io",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}:{range .status.conditions[*]}{.type}={.status},{end};{end}",
        ])
        .success();
    assert!(!conditions.contains("NonStructuralSchema"), "{conditions}");
    assert_eq!(conditions.matches("Established=True").count(), 2, "{conditions}");
    // Served: the kinds can be listed, with their short names.
    cluster.kubectl(&["get", "cdt,trepo", "--all-namespaces"]).success();
    cluster.kubectl(&["get", "scaledobjects.keda.sh,triggerauthentications.keda.sh", "--all-namespaces"]).success();
}

#[test]
fn the_rendered_example_repository_is_accepted_by_the_real_apiserver() {
    let Some((cluster, _)) = installed_cluster("the_rendered_example_repository_is_accepted_by_the_real_apiserver")
    else {
        return;
    };
    let ns = namespace(cluster, "examples");
    // Everything `render` turns the example repository into: the tenant's documents (the seed's
    // legacy CDTarget written out as cdtarget.io/v1alpha1) and the children of each CDTarget: three
    // in Deployment mode, one (build-jobs) in Job mode.
    let rendered = Command::new(env!("CARGO_BIN_EXE_cdtarget"))
        .args(["render", "examples/tenant-repo", "--policy", "examples/platform/policy.yaml", "--namespace", &ns])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cdtarget render");
    assert!(rendered.status.success(), "{}", String::from_utf8_lossy(&rendered.stderr));
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    file.write_all(&rendered.stdout).expect("write the rendered set");
    let applied =
        cluster.kubectl(&["apply", "--validate=strict", "-f", file.path().to_str().expect("UTF-8 path")]).success();
    for (kind, count) in [
        ("cdtarget.cdtarget.io", 4),
        ("networkpolicy.networking.k8s.io", 4),
        ("triggerauthentication.keda.sh", 4),
        ("deployment.apps", 3),
        ("scaledobject.keda.sh", 3),
        ("scaledjob.keda.sh", 1),
    ] {
        assert_eq!(applied.matches(&format!("{kind}/")).count(), count, "{count} of {kind} expected:\n{applied}");
    }
    assert!(applied.contains("configmap/pipeline-settings created"), "{applied}");
}

/// A CDTarget with `spec` lines replaced by `spec_lines`, applied with kubectl into `ns`.
fn apply_cdtarget(cluster: &crate::common::ControlPlane, ns: &str, name: &str, spec_lines: &str) -> String {
    let manifest =
        format!("apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: {name}\nspec:\n{spec_lines}");
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    file.write_all(manifest.as_bytes()).expect("write the manifest");
    cluster
        .kubectl(&["apply", "--validate=strict", "-n", ns, "-f", file.path().to_str().expect("UTF-8 path")])
        .failure()
}

const VALID_SPEC: &str = "  agentImage: ghcr.io/acme/azp-agent:4.255.0\n  tokenRef: azp-token\n  config:\n    url: https://dev.azure.com/acme\n    poolName: payments\n";

#[test]
fn bad_cdtargets_are_refused_by_the_real_apiserver_naming_field_and_limit() {
    let Some((cluster, _)) =
        installed_cluster("bad_cdtargets_are_refused_by_the_real_apiserver_naming_field_and_limit")
    else {
        return;
    };
    let ns = namespace(cluster, "bad-cdtargets");

    // docs/api.md: `agentImage`, `tokenRef` and `config` are required.
    let refused = apply_cdtarget(
        cluster,
        &ns,
        "no-image",
        "  tokenRef: azp-token\n  config:\n    url: https://dev.azure.com/acme\n",
    );
    assert!(refused.contains("spec.agentImage: Required value"), "{refused}");

    // docs/api.md: `ip` holds at most 256 entries, each of at most 64 characters.
    let many: String = (0..257).map(|i| format!("    - 10.0.{}.{}\n", i / 256, i % 256)).collect();
    let refused = apply_cdtarget(cluster, &ns, "many-ips", &format!("{VALID_SPEC}  ip:\n{many}"));
    assert!(refused.contains("spec.ip: Too many: 257: must have at most 256 items"), "{refused}");
    let long = format!("{VALID_SPEC}  ip:\n    - \"{}\"\n", "1".repeat(65));
    let refused = apply_cdtarget(cluster, &ns, "long-ip", &long);
    assert!(refused.contains("spec.ip[0]: Too long"), "{refused}");

    // docs/api.md: at most 32 `additionalSelector` labels.
    let labels: String = (0..33).map(|i| format!("    l{i}: v\n")).collect();
    let refused = apply_cdtarget(cluster, &ns, "many-labels", &format!("{VALID_SPEC}  additionalSelector:\n{labels}"));
    assert!(refused.contains("spec.additionalSelector: Too many: 33: must have at most 32 items"), "{refused}");

    // docs/api.md: `minReplicaCount` is an int32.
    let refused = apply_cdtarget(cluster, &ns, "string-min", &format!("{VALID_SPEC}  minReplicaCount: two\n"));
    assert!(refused.contains("spec.minReplicaCount") && refused.contains("integer"), "{refused}");

    // Unknown fields: refused under strict field validation (kubectl's default), naming the field.
    let refused = apply_cdtarget(cluster, &ns, "typo", &format!("{VALID_SPEC}  agentImag: x\n"));
    assert!(refused.contains("unknown field \"spec.agentImag\""), "{refused}");

    let left = cluster.kubectl(&["get", "cdtargets", "-n", &ns, "-o", "name"]).success();
    assert!(left.trim().is_empty(), "a refused CDTarget was stored: {left}");
}
