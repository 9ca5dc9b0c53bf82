//! Generated Deployments and strategic merge patches over containers, env, ports and volumes,
//! built by `kubectl kustomize` and by our engine.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{assert_same, kubectl_available, kustomize, ours};

/// Each case spawns kubectl once: a bounded number (`KUSTOMIZE_PROPTEST_CASES` raises it for a
/// deeper local run).
fn cases() -> u32 {
    std::env::var("KUSTOMIZE_PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(32)
}

fn names() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["a", "b", "c", "d"])
}

fn env() -> impl Strategy<Value = Vec<Value>> {
    prop::collection::btree_map(
        prop::sample::select(vec!["X", "Y", "Z"]),
        (prop::option::of("[a-z0-9]{0,3}"), any::<bool>()),
        0..3,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(name, (value, null))| match value {
                Some(value) => json!({"name": name, "value": value}),
                None if null => json!({"name": name, "value": null}),
                None => json!({"name": name, "$patch": "delete"}),
            })
            .collect()
    })
}

fn ports() -> impl Strategy<Value = Vec<Value>> {
    prop::collection::btree_map(prop::sample::select(vec![80, 81, 443]), any::<bool>(), 0..3).prop_map(|m| {
        m.into_iter()
            .map(|(port, named)| {
                if named {
                    json!({"containerPort": port, "name": format!("p{port}")})
                } else {
                    json!({"containerPort": port})
                }
            })
            .collect()
    })
}

/// A container of the target (no directives).
fn container() -> impl Strategy<Value = (&'static str, Value)> {
    (names(), "[a-z]{1,3}", env(), ports(), prop::option::of(prop::collection::vec("[a-z]{1,2}", 0..3))).prop_map(
        |(name, image, env, ports, args)| {
            let env: Vec<Value> = env.into_iter().filter(|e| e.get("$patch").is_none()).collect();
            let mut c = json!({"name": name, "image": format!("{image}:1")});
            if !env.is_empty() {
                c["env"] = Value::Array(env);
            }
            if !ports.is_empty() {
                c["ports"] = Value::Array(ports);
            }
            if let Some(args) = args {
                c["args"] = json!(args);
            }
            (name, c)
        },
    )
}

/// A container of the patch: some fields changed, added or deleted, or the whole element deleted.
fn container_patch() -> impl Strategy<Value = (&'static str, Value)> {
    (
        names(),
        prop::option::of("[a-z]{1,3}"),
        env(),
        ports(),
        prop::option::of(prop::collection::vec("[a-z]{1,2}", 0..2)),
        0..7u8,
    )
        .prop_map(|(name, image, env, ports, args, how)| {
            let mut c = json!({"name": name});
            match how {
                0 => c["$patch"] = json!("delete"),
                1 => c["image"] = Value::Null,
                _ => {}
            }
            if let Some(image) = image {
                c["image"] = json!(format!("{image}:2"));
            }
            if !env.is_empty() {
                c["env"] = Value::Array(env);
            }
            if !ports.is_empty() {
                c["ports"] = Value::Array(ports);
            }
            if let Some(args) = args {
                c["args"] = json!(args);
            }
            (name, c)
        })
}

fn volume() -> impl Strategy<Value = Value> {
    (prop::sample::select(vec!["v1", "v2", "v3"]), any::<bool>(), 0..4u8).prop_map(|(name, config, how)| match how {
        0 => json!({"name": name, "$patch": "delete"}),
        _ if config => json!({"name": name, "configMap": {"name": format!("cm-{name}")}}),
        _ => json!({"name": name, "emptyDir": {}}),
    })
}

fn unique(items: Vec<(&'static str, Value)>) -> Vec<Value> {
    items.into_iter().collect::<BTreeMap<_, _>>().into_values().collect()
}

fn unique_volumes(items: Vec<Value>) -> Vec<Value> {
    let by_name: BTreeMap<String, Value> =
        items.into_iter().map(|v| (v["name"].as_str().unwrap().to_owned(), v)).collect();
    by_name.into_values().collect()
}

fn deployment_and_patch() -> impl Strategy<Value = (Value, Value)> {
    (
        prop::collection::vec(container(), 1..4),
        prop::collection::vec(volume(), 0..3),
        prop::collection::vec(container_patch(), 0..4),
        prop::collection::vec(volume(), 0..3),
        prop::option::of(0..5i64),
        any::<bool>(),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(containers, volumes, patch_containers, patch_volumes, replicas, reverse, replace_list)| {
            let volumes: Vec<Value> = unique_volumes(volumes).into_iter().filter(|v| v.get("$patch").is_none()).collect();
            let mut containers = unique(containers);
            if reverse { containers.reverse(); }
            let mut spec = json!({"containers": containers});
            if !volumes.is_empty() { spec["volumes"] = Value::Array(volumes); }
            let target = json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
            });
            let mut patch_spec = json!({});
            let mut patch_containers = unique(patch_containers);
            if replace_list { patch_containers.insert(0, json!({"$patch": "replace"})); }
            if !patch_containers.is_empty() { patch_spec["containers"] = Value::Array(patch_containers); }
            let patch_volumes = unique_volumes(patch_volumes);
            if !patch_volumes.is_empty() { patch_spec["volumes"] = Value::Array(patch_volumes); }
            let mut patch = json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"template": {"spec": patch_spec}},
            });
            if let Some(replicas) = replicas { patch["spec"]["replicas"] = json!(replicas); }
            (target, patch)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn generated_strategic_merge_patches_give_what_kubectl_kustomize_gives((target, patch) in deployment_and_patch()) {
        if !kubectl_available("generated_strategic_merge_patches_give_what_kubectl_kustomize_gives") {
            return Ok(());
        }
        let dir = crate::common::test_dir();
        std::fs::write(dir.path().join("deployment.yaml"), serde_json::to_string(&target).unwrap()).unwrap();
        std::fs::write(dir.path().join("patch.yaml"), serde_json::to_string(&patch).unwrap()).unwrap();
        std::fs::write(dir.path().join("kustomization.yaml"), "resources: [deployment.yaml]\npatches: [{path: patch.yaml}]\n").unwrap();
        match (kustomize(dir.path()), ours(dir.path())) {
            (Ok(expected), Ok(actual)) => assert_same("generated", expected, actual),
            (Err(said), Err(problems)) => eprintln!("both refuse: kustomize: {said}; ours: {problems:?}"),
            (expected, actual) => panic!("kustomize: {expected:?}\nours: {actual:?}\npatch: {patch}"),
        }
    }
}
