//! The chart as `helm` renders it, against what `kubectl kustomize` renders of `deploy/`.

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

use serde_json::Value;

use crate::common::test_dir;
use crate::kit::{
    self, CHART, Helm, assert_no_drift, documents, env_value, environment, find, key, kustomize, of_kind, root,
};

const EXAMPLE_VALUES: &str = "charts/cdtarget/ci/example-values.yaml";
const SHARDED_VALUES: &str = "charts/cdtarget/ci/sharded-values.yaml";

#[test]
fn helm_lint_strict_passes_with_the_default_example_and_sharded_values() {
    let Some(helm) = Helm::get("helm_lint_strict_passes_with_the_default_example_and_sharded_values") else { return };
    for values in [None, Some(EXAMPLE_VALUES), Some(SHARDED_VALUES)] {
        let mut args = vec!["lint", "--strict", CHART];
        args.extend(values.iter().flat_map(|file| ["-f", file]));
        let linted = helm.success(&args);
        assert!(linted.contains("1 chart(s) linted, 0 chart(s) failed"), "{linted}");
    }
}

#[test]
fn the_chart_with_default_values_renders_what_deploy_installs() {
    let Some(helm) = Helm::get("the_chart_with_default_values_renders_what_deploy_installs") else { return };
    let chart = helm.template(&[]);
    for kind in ["NetworkPolicy", "PodMonitor", "PrometheusRule", "ConfigMap", "Secret"] {
        assert!(of_kind(&chart, kind).is_empty(), "{kind} is opt-in, yet rendered by default");
    }
    assert_no_drift(chart, kustomize("deploy"), "default values against deploy/");
}

#[test]
fn the_chart_with_every_option_renders_what_the_example_overlay_installs() {
    let Some(helm) = Helm::get("the_chart_with_every_option_renders_what_the_example_overlay_installs") else {
        return;
    };
    let chart = helm.template(&["-f", EXAMPLE_VALUES]);
    // Every opt-in part is there, so the comparison covers it.
    for kind in ["NetworkPolicy", "PodMonitor", "PrometheusRule", "ConfigMap", "PodDisruptionBudget"] {
        assert_eq!(of_kind(&chart, kind).len(), 1, "one {kind} expected with {EXAMPLE_VALUES}");
    }
    let deployment = find(&chart, "Deployment", "cdtarget");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert!(env_value(deployment, "CDTARGET_GITLAB_URL").is_some(), "{deployment}");
    assert_no_drift(chart, kustomize("examples/platform/overlay"), "ci/example-values.yaml against the overlay");
}

#[test]
fn the_chart_reads_rules_alerts_and_dashboard_from_deploy_through_its_links() {
    let Some(helm) = Helm::get("the_chart_reads_rules_alerts_and_dashboard_from_deploy_through_its_links") else {
        return;
    };
    let chart = helm.template(&["-f", EXAMPLE_VALUES]);
    let rbac = documents(&fs::read_to_string(root().join("deploy/rbac.yaml")).expect("deploy/rbac.yaml"));
    for kind in ["ClusterRole", "Role"] {
        assert_eq!(find(&chart, kind, "cdtarget-controller")["rules"], of_kind(&rbac, kind)[0]["rules"], "{kind}");
    }
    let rule = &documents(&fs::read_to_string(root().join("deploy/monitoring/prometheusrule.yaml")).expect("rule"))[0];
    assert_eq!(find(&chart, "PrometheusRule", "cdtarget")["spec"], rule["spec"]);
    let dashboard = fs::read_to_string(root().join("deploy/monitoring/grafana-dashboard.json")).expect("dashboard");
    let config_map = find(&chart, "ConfigMap", "cdtarget-grafana-dashboard");
    assert_eq!(config_map["data"]["cdtarget.json"].as_str(), Some(dashboard.as_str()));
    for crd in ["cdtargets.cdtarget.io", "tenantrepositories.cdtarget.io", "syncstatuses.cdtarget.io"] {
        let file = format!("deploy/crds/cdtarget.io_{}.yaml", crd.split('.').next().expect("plural"));
        let committed = documents(&fs::read_to_string(root().join(&file)).expect("CRD file"));
        assert_eq!(find(&chart, "CustomResourceDefinition", crd), &committed[0], "{file}");
    }
}

#[test]
fn the_packaged_chart_holds_the_linked_files_themselves() {
    let Some(helm) = Helm::get("the_packaged_chart_holds_the_linked_files_themselves") else { return };
    let dir = test_dir();
    let destination = dir.path().to_str().expect("UTF-8 path");
    helm.success(&["package", CHART, "--destination", destination]);
    let archive = dir.path().join(format!("cdtarget-{}.tgz", env!("CARGO_PKG_VERSION")));
    let listing = Command::new("tar").arg("-tvzf").arg(&archive).output().expect("run tar");
    assert!(listing.status.success(), "{}", kit::text(&listing));
    let listing = String::from_utf8_lossy(&listing.stdout);
    // Regular files (`-`), no symbolic links (`l`) left to dangle outside the repository.
    assert!(listing.lines().all(|line| line.starts_with('-')), "{listing}");
    let unpacked = dir.path().join("unpacked");
    fs::create_dir_all(&unpacked).expect("create a directory");
    let extracted = Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(&unpacked).output().expect("tar");
    assert!(extracted.status.success(), "{}", kit::text(&extracted));
    for (packaged, source) in [
        ("crds/cdtarget.io_cdtargets.yaml", "deploy/crds/cdtarget.io_cdtargets.yaml"),
        ("crds/cdtarget.io_tenantrepositories.yaml", "deploy/crds/cdtarget.io_tenantrepositories.yaml"),
        ("crds/cdtarget.io_syncstatuses.yaml", "deploy/crds/cdtarget.io_syncstatuses.yaml"),
        ("files/rbac.yaml", "deploy/rbac.yaml"),
        ("files/prometheusrule.yaml", "deploy/monitoring/prometheusrule.yaml"),
        ("files/grafana-dashboard.json", "deploy/monitoring/grafana-dashboard.json"),
    ] {
        let packaged_bytes = fs::read(unpacked.join("cdtarget").join(packaged)).expect("a packaged file");
        assert_eq!(packaged_bytes, fs::read(root().join(source)).expect("the source file"), "{packaged}");
    }
    // The archive renders exactly what the directory renders.
    let archive = archive.to_str().expect("UTF-8 path");
    let from_archive = helm.success(&[
        "template",
        "cdtarget",
        archive,
        "-n",
        "cdtarget-system",
        "--include-crds",
        "-f",
        EXAMPLE_VALUES,
    ]);
    assert_eq!(documents(&from_archive), helm.template(&["-f", EXAMPLE_VALUES]));
}

/// One refused value: the `--set` and what helm's message must say (the value's path and what
/// would be accepted).
struct Refusal {
    set: &'static str,
    says: &'static [&'static str],
}

#[test]
fn bad_values_are_refused_by_the_schema_naming_the_value_and_what_is_accepted() {
    let Some(helm) = Helm::get("bad_values_are_refused_by_the_schema_naming_the_value_and_what_is_accepted") else {
        return;
    };
    let refusals = [
        Refusal { set: "replicaCount=two", says: &["/replicaCount", "want integer"] },
        Refusal { set: "controller.logFormat=yaml", says: &["/controller/logFormat", "'text', 'json'"] },
        Refusal { set: "controler.logLevel=debug", says: &["additional properties 'controler' not allowed"] },
        Refusal { set: "replicaCount=-1", says: &["/replicaCount", "minimum"] },
        Refusal { set: "image.digest=latest", says: &["/image/digest", "sha256:"] },
        Refusal {
            set: "controller.resyncInterval=soon",
            says: &["/controller/resyncInterval", "does not match pattern"],
        },
        Refusal { set: "git.maxCacheBytes=-1", says: &["/git/maxCacheBytes", "minimum"] },
        Refusal { set: "networkPolicy.git.ports[0]=70000", says: &["/networkPolicy/git/ports/0", "maximum"] },
        Refusal {
            set: "shards[0].name=Shard_A",
            says: &["/shards/0/name", "does not match pattern", "/shards/0", "selector"],
        },
        Refusal { set: "gitlab.enabled=true", says: &["/gitlab/url", "minLength"] },
    ];
    let mut unclear = Vec::new();
    for refusal in &refusals {
        let message = helm.failure(&["template", "cdtarget", CHART, "--set", refusal.set]);
        let first = message.lines().take(12).collect::<Vec<_>>().join("\n");
        assert!(
            message.contains("values don't meet the specifications of the schema"),
            "--set {} was not refused by the schema:\n{message}",
            refusal.set
        );
        if !refusal.says.iter().all(|said| message.contains(said)) {
            unclear.push(format!("--set {} should say {:?}:\n{first}", refusal.set, refusal.says));
        }
    }
    assert!(unclear.is_empty(), "{}", unclear.join("\n\n"));
}

#[test]
fn a_gitlab_setup_missing_a_setting_is_refused_naming_it() {
    let Some(helm) = Helm::get("a_gitlab_setup_missing_a_setting_is_refused_naming_it") else { return };
    let base = ["template", "cdtarget", CHART, "--set", "gitlab.enabled=true"];
    let url = ["--set", "gitlab.url=https://gitlab.example.com"];
    let secret = ["--set", "gitlab.existingSecret=cdtarget-gitlab"];
    let refused = helm.failure(&[&base[..], &secret[..]].concat());
    assert!(refused.contains("/gitlab/url"), "{refused}");
    let refused = helm.failure(&[&base[..], &url[..]].concat());
    assert!(refused.contains("existingSecret") && refused.contains("token"), "{refused}");
    let refused = helm.failure(&[&base[..], &url[..], &secret[..]].concat());
    assert!(refused.contains("gitlab.webhookExternalURL"), "{refused}");
    let set = ["--set", "gitlab.webhookExternalURL=https://cd.example.com"];
    let rendered = documents(&helm.success(&[&base[..], &url[..], &secret[..], &set[..]].concat()));
    assert!(of_kind(&rendered, "Secret").is_empty(), "an existing Secret is not rendered");
    // From values, the chart makes the Secret and the pods roll when it changes.
    let from_values = ["--set", "gitlab.token=glpat-1", "--set", "gitlab.knownHosts=gitlab.example.com ssh-ed25519 A"];
    let rendered = documents(&helm.success(&[&base[..], &url[..], &set[..], &from_values[..]].concat()));
    let secret = find(&rendered, "Secret", "cdtarget-gitlab");
    assert_eq!(secret["stringData"]["token"], "glpat-1");
    let checksum = &find(&rendered, "Deployment", "cdtarget")["spec"]["template"]["metadata"]["annotations"];
    assert!(checksum["checksum/gitlab"].as_str().is_some_and(|sum| sum.len() == 64), "{checksum}");
}

#[test]
fn the_commit_status_settings_reach_the_controller_as_its_flags() {
    let Some(helm) = Helm::get("the_commit_status_settings_reach_the_controller_as_its_flags") else { return };
    let gitlab = [
        "template",
        "cdtarget",
        CHART,
        "--set",
        "gitlab.enabled=true,gitlab.url=https://gitlab.example.com,gitlab.webhookExternalURL=https://cd.example.com",
        "--set",
        "gitlab.existingSecret=cdtarget-gitlab",
    ];
    let env = |rendered: &[Value]| -> Vec<(String, String)> {
        find(rendered, "Deployment", "cdtarget")["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("CDTARGET_GITLAB_") && n.contains("STATUS")))
            .map(|e| (e["name"].as_str().unwrap().to_owned(), e["value"].as_str().unwrap_or_default().to_owned()))
            .collect()
    };
    // Defaults: statuses on, the controller's own name and no link.
    let rendered = documents(&helm.success(&gitlab));
    assert_eq!(env(&rendered), [("CDTARGET_GITLAB_COMMIT_STATUS".to_owned(), "true".to_owned())]);
    let set = [
        "--set",
        "gitlab.commitStatus=false",
        // JSON values: `--set` would read `{...}` as a list.
        "--set-json",
        r#"gitlab.statusName="cd/{targetNamespace}""#,
        "--set-json",
        r#"gitlab.statusTargetURL="https://grafana.example.com/d?rev={revision}""#,
    ];
    let rendered = documents(&helm.success(&[&gitlab[..], &set[..]].concat()));
    assert_eq!(
        env(&rendered),
        [
            ("CDTARGET_GITLAB_COMMIT_STATUS".to_owned(), "false".to_owned()),
            ("CDTARGET_GITLAB_STATUS_NAME".to_owned(), "cd/{targetNamespace}".to_owned()),
            ("CDTARGET_GITLAB_STATUS_TARGET_URL".to_owned(), "https://grafana.example.com/d?rev={revision}".to_owned()),
        ]
    );
    let refused = helm.failure(&[&gitlab[..], &["--set", "gitlab.statusTargetURL=ftp://x"][..]].concat());
    assert!(refused.contains("/gitlab/statusTargetURL"), "{refused}");
}

#[test]
fn the_sharded_chart_runs_one_controller_per_shard_with_its_own_lease_selector_and_service() {
    let test = "the_sharded_chart_runs_one_controller_per_shard_with_its_own_lease_selector_and_service";
    let Some(helm) = Helm::get(test) else { return };
    let chart = helm.template(&["-f", SHARDED_VALUES]);
    let deployments = of_kind(&chart, "Deployment");
    let names: Vec<&str> = deployments.iter().filter_map(|d| d["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["cdtarget-a", "cdtarget-rest"]);
    let mut leases = BTreeSet::new();
    for (deployment, (shard, selector)) in
        deployments.iter().zip([("a", "example.com/shard=a"), ("rest", "example.com/shard!=a")])
    {
        assert_eq!(env_value(deployment, "CDTARGET_SHARD_SELECTOR").as_deref(), Some(selector));
        leases.insert(env_value(deployment, "CDTARGET_LEASE_NAME").expect("a Lease name"));
        let labels = &deployment["spec"]["selector"]["matchLabels"];
        assert_eq!(labels["cdtarget.io/controller-shard"], shard, "{labels}");
        assert_eq!(deployment["spec"]["template"]["metadata"]["labels"]["cdtarget.io/controller-shard"], shard);
        let name = format!("cdtarget-{shard}");
        let service = find(&chart, "Service", &name);
        assert_eq!(&service["spec"]["selector"], labels, "{name}: the Service selects the shard's pods");
        let budget = find(&chart, "PodDisruptionBudget", &name);
        assert_eq!(&budget["spec"]["selector"]["matchLabels"], labels);
    }
    assert_eq!(leases, BTreeSet::from(["cdtarget-controller-a".to_owned(), "cdtarget-controller-rest".to_owned()]));
    // One identity and one set of rights for all shards.
    for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
        assert_eq!(of_kind(&chart, kind).len(), 1, "{kind}");
    }
}

/// Environment variables of the Deployments that are not flags of `cdtarget controller`, and
/// why they are there.
const NOT_FLAGS: [(&str, &str); 2] = [("HOME", "libgit2/libssh2 look under it"), ("MALLOC_ARENA_MAX", "glibc")];

#[test]
fn every_environment_variable_of_the_deployments_is_a_controller_flag() {
    let Some(helm) = Helm::get("every_environment_variable_of_the_deployments_is_a_controller_flag") else { return };
    let help = Command::new(env!("CARGO_BIN_EXE_cdtarget")).args(["controller", "--help"]).output().expect("help");
    assert!(help.status.success(), "{}", kit::text(&help));
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: BTreeSet<&str> = help.split("[env: ").skip(1).filter_map(|rest| rest.split(['=', ']']).next()).collect();
    assert!(flags.contains("CDTARGET_LOG_FORMAT") && flags.len() > 20, "no [env: ...] in the help:\n{help}");
    let mut unknown = Vec::new();
    let rendered = [
        ("deploy/", kustomize("deploy")),
        ("examples/platform/overlay/", kustomize("examples/platform/overlay")),
        ("the sharded chart", helm.template(&["-f", SHARDED_VALUES])),
    ];
    for (source, objects) in &rendered {
        for deployment in of_kind(objects, "Deployment") {
            for (name, _) in environment(deployment) {
                if !flags.contains(name.as_str()) && !NOT_FLAGS.iter().any(|(known, _)| *known == name) {
                    unknown.push(format!("{source}: {} sets {name}", key(deployment)));
                }
            }
        }
    }
    assert!(unknown.is_empty(), "not a flag of `cdtarget controller`, so ignored:\n{}", unknown.join("\n"));
}

#[test]
fn the_chart_deploy_and_the_crate_name_one_version() {
    let chart: Value =
        serde_saphyr::from_str(&fs::read_to_string(root().join("charts/cdtarget/Chart.yaml")).expect("Chart.yaml"))
            .expect("Chart.yaml parses");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], version, "Chart.yaml version");
    assert_eq!(chart["appVersion"], version, "Chart.yaml appVersion");
    let kustomization: Value =
        serde_saphyr::from_str(&fs::read_to_string(root().join("deploy/kustomization.yaml")).expect("kustomization"))
            .expect("deploy/kustomization.yaml parses");
    let images = kustomization["images"].as_array().expect("an images: transformer");
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0]["name"], "cdtarget");
    assert_eq!(images[0]["newName"], "localhost/cdtarget");
    assert_eq!(images[0]["newTag"], version, "deploy/kustomization.yaml newTag");
}
