//! The kustomize patch engine (`src/kustomize/patch`) on 1,000 and 10,000 Deployments: one
//! strategic merge patch with a target selecting every Deployment by label (containers, env,
//! ports and volumes merged by key), one JSON patch with a name-regex target, and one strategic
//! merge patch naming a single object. Prints the time per object; asserts nothing on time. For
//! the later comparison with `kubectl kustomize` (issue #15 asks for a 50x ratio at 10,000).
//!
//! ```text
//! cargo bench --bench kustomize_patch                  # 1,000 and 10,000 Deployments, 3 runs
//! cargo bench --bench kustomize_patch -- 1000 5        # sizes, then runs
//! ```

use std::time::Instant;

use cdtarget::kustomize::patch::Patches;
use serde_json::{Value, json};

fn deployment(i: usize) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": format!("web-{i}"), "namespace": "team-bench", "labels": {"app": "web", "shard": (i % 10).to_string()}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "app:1", "args": ["serve"],
                         "env": [{"name": "MODE", "value": "prod"}, {"name": "LEVEL", "value": "info"}],
                         "ports": [{"containerPort": 8080, "name": "http"}]},
                        {"name": "sidecar", "image": "sidecar:1"}
                    ],
                    "volumes": [{"name": "cache", "emptyDir": {}}]
                }
            }
        }
    })
}

const KUSTOMIZATION: &str = r#"
patches:
- target: {kind: Deployment, labelSelector: "app=web"}
  patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: any
    spec:
      template:
        spec:
          containers:
          - name: app
            image: app:2
            env:
            - name: REGION
              value: eu
            - name: MODE
              $patch: delete
            ports:
            - containerPort: 9090
              name: metrics
          volumes:
          - name: config
            configMap:
              name: web-config
- target: {name: "web-[0-9]*5"}
  patch: |-
    - op: add
      path: /metadata/labels/five
      value: "true"
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web-1
      namespace: team-bench
    spec:
      replicas: 3
"#;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let sizes: Vec<usize> = match args.first() {
        Some(sizes) => sizes.split(',').map(|s| s.parse().expect("a size")).collect(),
        None => vec![1_000, 10_000],
    };
    let runs: usize = args.get(1).map_or(3, |r| r.parse().expect("a number of runs"));
    let kustomization = cdtarget::yaml::parse_one(KUSTOMIZATION).expect("the kustomization parses");
    let patches = Patches::read(&kustomization, &mut |_| Err("no files".into())).expect("the patches parse");
    println!("{:>8} {:>5} {:>12} {:>12}", "objects", "run", "total ms", "ns/object");
    for &size in &sizes {
        let objects: Vec<Value> = (0..size).map(deployment).collect();
        for run in 1..=runs {
            let mut patched = objects.clone();
            let started = Instant::now();
            patches.apply(&mut patched).expect("the patches apply");
            let elapsed = started.elapsed();
            assert_eq!(patched.len(), size);
            println!(
                "{size:>8} {run:>5} {:>12.1} {:>12.0}",
                elapsed.as_secs_f64() * 1e3,
                elapsed.as_nanos() as f64 / size as f64
            );
        }
    }
}
