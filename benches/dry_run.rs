//! What the all-or-nothing dry run costs per revision, on a real API server: a tenant set of
//! 10, 100 and 1,000 objects applied as the tenant through the controller's one writer
//! (`Writer::execute(Write::TenantApply)`, impersonating the tenant's ServiceAccount), with and
//! without the server-side dry run before it (`Writer::dry_run`), side by side in one run.
//!
//! ```text
//! cargo bench --bench dry_run                       # 10, 100, 1000 objects, 3 revisions each
//! cargo bench --bench dry_run -- --sizes 10,100 --revisions 5
//! ```
//!
//! The control plane is the cluster tests' (etcd, kube-apiserver, kube-controller-manager built
//! from `hack/control-plane/`), started for the run; the tenant is onboarded with
//! `examples/platform/tenant-rbac.yaml`. Every revision changes every object (a new value in
//! each ConfigMap, a new image tag in each Deployment: half of each), as a push that touches
//! the whole set does; the two modes alternate revision by revision so that both see the same
//! etcd. For each size and mode it prints the median and the range of the wall time per
//! revision, the requests sent (applies, dry runs) and the ratio with/without. Nothing asserts
//! on time.

#[path = "../tests/common/mod.rs"]
mod common;

use std::env;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cdtarget::apply::{Write, Writer};
use serde_json::{Value, json};

use common::cluster::path_str;
use common::{ControlPlane, skip_or_fail, test_dir};

struct Options {
    sizes: Vec<usize>,
    revisions: usize,
}

fn options() -> Options {
    let mut options = Options { sizes: vec![10, 100, 1_000], revisions: 3 };
    let args: Vec<String> = env::args().skip(1).collect();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => {}
            "--sizes" => {
                let value = args.next().expect("--sizes needs a value");
                options.sizes = value.split(',').map(|n| n.trim().parse().expect("a number")).collect();
            }
            "--revisions" => {
                options.revisions = args.next().expect("--revisions needs a value").parse().expect("a number");
            }
            other => panic!("unknown argument {other}; use --sizes N,N,... --revisions N"),
        }
    }
    options
}

/// The set of revision `revision`: `size` objects, half ConfigMaps, half Deployments.
fn set(namespace: &str, size: usize, revision: usize) -> Vec<Value> {
    (0..size)
        .map(|i| {
            if i % 2 == 0 {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("settings-{i}"), "namespace": namespace},
                       "data": {"REVISION": revision.to_string()}})
            } else {
                json!({"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"name": format!("app-{i}"), "namespace": namespace},
                       "spec": {"replicas": 0, "selector": {"matchLabels": {"app": format!("app-{i}")}},
                                "template": {"metadata": {"labels": {"app": format!("app-{i}")}},
                                             "spec": {"containers": [{"name": "app", "image": format!("registry.example/app:{revision}")}]}}}})
            }
        })
        .collect()
}

fn median(mut times: Vec<Duration>) -> (Duration, Duration, Duration) {
    times.sort();
    (times[0], times[times.len() / 2], times[times.len() - 1])
}

fn load() -> String {
    fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

#[tokio::main]
async fn main() {
    let options = options();
    let Some(cluster) = skip_or_fail("dry_run bench", ControlPlane::start()) else { return };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let namespace = "bench-tenant";
    let dir = test_dir();
    let example = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/platform/tenant-rbac.yaml"))
        .expect("the tenant RBAC example");
    let rbac = dir.path().join("tenant-rbac.yaml");
    fs::write(&rbac, example.replace("team-payments", namespace)).expect("write the tenant RBAC");
    cluster.kubectl(&["apply", "-f", path_str(&rbac)]).success();
    let user = format!("system:serviceaccount:{namespace}:cdtarget-tenant");

    let applies = Arc::new(AtomicUsize::new(0));
    let dry_runs = Arc::new(AtomicUsize::new(0));
    let counted = (applies.clone(), dry_runs.clone());
    let writer = Writer::new(cluster.admin_client().await).with_observer(Arc::new(move |verb, _kind| {
        let counter = if verb == cdtarget::apply::writer::DRY_RUN { &counted.1 } else { &counted.0 };
        counter.fetch_add(1, Ordering::Relaxed);
    }));

    println!("dry_run bench: Kubernetes {} on 127.0.0.1, load {} at the start", cluster.version(), load());
    println!(
        "{:>6} {:>10} {:>24} {:>24} {:>9} {:>18}",
        "objects", "revisions", "apply only (min/med/max)", "dry run + apply", "ratio", "requests per rev."
    );
    let mut revision = 0;
    for &size in &options.sizes {
        // The first revision creates the objects; it is not measured.
        revision += 1;
        let objects = set(namespace, size, revision);
        writer.execute(Write::TenantApply { user: user.clone(), objects }).await.expect("the first apply");
        let (mut plain, mut checked) = (Vec::new(), Vec::new());
        let (mut plain_requests, mut checked_requests) = ((0, 0), (0, 0));
        for _ in 0..options.revisions {
            for with_dry_run in [false, true] {
                revision += 1;
                let objects = set(namespace, size, revision);
                let before = (applies.load(Ordering::Relaxed), dry_runs.load(Ordering::Relaxed));
                let started = Instant::now();
                if with_dry_run {
                    let refused = writer.dry_run(&user, &objects).await.expect("the dry run");
                    assert!(refused.is_empty(), "refused: {refused:?}");
                }
                writer.execute(Write::TenantApply { user: user.clone(), objects }).await.expect("the apply");
                let took = started.elapsed();
                let sent = (applies.load(Ordering::Relaxed) - before.0, dry_runs.load(Ordering::Relaxed) - before.1);
                if with_dry_run {
                    checked.push(took);
                    checked_requests = sent;
                } else {
                    plain.push(took);
                    plain_requests = sent;
                }
            }
        }
        let (plain_min, plain_median, plain_max) = median(plain);
        let (checked_min, checked_median, checked_max) = median(checked);
        println!(
            "{size:>6} {:>10} {:>24} {:>24} {:>8.2}x {:>18}",
            options.revisions,
            format!("{plain_min:.2?}/{plain_median:.2?}/{plain_max:.2?}"),
            format!("{checked_min:.2?}/{checked_median:.2?}/{checked_max:.2?}"),
            checked_median.as_secs_f64() / plain_median.as_secs_f64(),
            format!("{}+0 vs {}+{}", plain_requests.0 + plain_requests.1, checked_requests.0, checked_requests.1),
        );
    }
    println!("load at the end: {}", load());
}
