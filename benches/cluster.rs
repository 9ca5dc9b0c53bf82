//! The controller on a real API server: `cdtarget controller` as shipped against the control plane
//! of the cluster tests (etcd, kube-apiserver, kube-controller-manager from `hack/control-plane/`),
//! with many registrations served by one `git daemon`.
//!
//! ```text
//! cargo bench --bench cluster                                     # 1,000 registrations × 10 CDTargets
//! cargo bench --bench cluster -- --registrations 20 --targets 10
//! CDTARGET_BENCH_REGISTRATIONS=100 cargo bench --bench cluster
//! cargo bench --profile dev --bench cluster -- --registrations 20 --targets 10 --mode both
//! ```
//!
//! `--mode` (or `CDTARGET_BENCH_MODE`) is the agent mode written into every CDTarget's
//! `spec.mode`: `deployment` (the default: NetworkPolicy, Deployment, ScaledObject,
//! TriggerAuthentication), `job` (NetworkPolicy, ScaledJob, TriggerAuthentication; each reconcile
//! also lists the ScaledJob's agent Jobs), or `both`: the same fleet once per mode, Deployment
//! first, each on a control plane of its own (one after the other, never at once), then one table
//! per CDTarget and per window with the ratio Job / Deployment (docs/performance.md, "Job mode
//! beside Deployment mode").
//!
//! What it does, in order, per mode:
//!
//! 1. generates one repository per registration (`--targets` CDTargets in files of five under
//!    `deploy/`, as `benches/controller.rs` does, with `spec.mode`) and serves them all with one
//!    `git daemon`;
//! 2. starts a control plane of its own and installs `deploy/` and KEDA's CRDs with the kit of the
//!    cluster tests (`tests/common/cluster.rs`: `install`, i.e. `kubectl apply -k deploy/`);
//! 3. onboards every tenant with one multi-document `kubectl apply --server-side -f`: per tenant
//!    the Namespace, ServiceAccount, Role and RoleBinding of `examples/platform/tenant-rbac.yaml`,
//!    the `azp-token` Secret and the TenantRepository (interval 1h, so that no scheduled poll falls
//!    into a measured window); the example's cluster-wide admission policies once, before;
//! 4. starts `cdtarget controller` as a process with a token of deploy/'s ServiceAccount
//!    (`Controller::start`), with the environment `deploy/deployment.yaml` gives it
//!    (`MALLOC_ARENA_MAX=2`, the Git budgets);
//! 5. **first pass**: waits (watches of the CDTargets and of the five child kinds, as the admin)
//!    until every CDTarget has exactly the children of its mode (above) and a `Ready` condition
//!    for its generation, then until the audit log holds the status write of every CDTarget; then
//!    until the controller goes quiet (no request but watches and Lease renewals for 5 s, at most
//!    60 s). `Ready` is `False` in both modes: no KEDA operator runs, so neither a ScaledObject nor
//!    a ScaledJob ever becomes Ready (reasons `AgentsNotAvailable`, `ScaledJobNotReady`), and
//!    kube-controller-manager runs without the Deployment controller; the bench waits for a
//!    condition that describes the generation, whatever it says;
//! 6. **no-op poll**: `cdtarget.io/requestedAt` on every registration (`kubectl annotate --all`),
//!    until the audit log shows each registration's drift reads (a GET of each of its CDTargets,
//!    as its tenant: the last reads of an unchanged poll) and each registration's status write
//!    recording the request it handled (`status.lastHandledReconcileAt`);
//! 7. **no-op re-render**: the policy ConfigMap created with the documented defaults written out
//!    (`policy.yaml: {}`), which makes both controllers reconcile everything again, until the
//!    audit log shows every registration's drift reads and every CDTarget's last request of a
//!    reconcile that changes nothing (Deployment mode: the read of its ScaledObject; Job mode: the
//!    LIST of its agent Jobs).
//!
//! For each window it prints the controller's requests from the audit log by verb and resource
//! (SubjectAccessReview creates and Lease renewals apart from the writes), the reconciles and Git
//! fetches from the controller's `/metrics`, and the CPU time of kube-apiserver, etcd and the
//! controller (`utime + stime` from `/proc/<pid>/stat`, before and after). The controller's
//! resident set is sampled every second and its peak (`VmHWM`) read at the end. At the end of
//! each run it counts the objects the fleet left: the controller's children by kind (from the
//! watches), and the ReplicaSets, Pods and Jobs in the tenants' namespaces (none: no workload
//! controller and no KEDA operator runs, so KEDA's agent Jobs are neither made nor counted).
//! Then, for every mode run, per CDTarget and per window: children, reconciles, the controller's
//! requests by verb and resource and in total, other clients' requests and CPU, side by side with
//! the ratio Job / Deployment under `--mode both`. Nothing here asserts on time; it prints the
//! figures, the goals, and the ratios to the fake-server figures of `benches/controller.rs` where
//! they are the same quantity (Deployment mode at 1,000 × 10 only).

#[path = "support/args.rs"]
mod args;
#[path = "support/deployment.rs"]
mod deployment;

#[path = "../tests/common/mod.rs"]
mod common;

#[path = "support/fleet.rs"]
mod fleet;

#[path = "support/measure.rs"]
mod measure;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cdtarget::api::keda::{ScaledJob, ScaledObject, TriggerAuthentication};
use cdtarget::api::{AgentMode, CDTarget};
use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};

use common::cluster::{CONTROLLER_USER, Controller, PLATFORM_NAMESPACE, install, keda_crds_dir, path_str};
use common::control_plane::AuditEvent;
use common::process::{find_on_path, process_running};
use common::{ControlPlane, GitDaemon, HarnessError, Upstream, skip_or_fail};
use fleet::TOKEN;
use measure::{AuditTail, counted, cpu_seconds, load_average, status_kib};

/// Peak memory goal of the issue, MiB.
const MEMORY_GOAL_MIB: f64 = 150.0;
/// The tenant ServiceAccount of `examples/platform/tenant-rbac.yaml`.
const TENANT_SERVICE_ACCOUNT: &str = "cdtarget-tenant";
/// The registrations' poll interval: long, so that only the triggered polls are measured.
const INTERVAL: &str = "1h";
/// How long the first pass may take before the benchmark gives up.
const CONVERGE_WITHIN: Duration = Duration::from_secs(3 * 60 * 60);
/// How long a no-op window may take before the benchmark gives up.
const NO_OP_WITHIN: Duration = Duration::from_secs(60 * 60);
/// Silence (no request but watches and Lease renewals) that counts as the controller being done.
const QUIET: Duration = Duration::from_secs(5);
/// The longest wait for that silence; the periodic resyncs of a large fleet may never leave one.
const SETTLE_AT_MOST: Duration = Duration::from_secs(60);
/// The label the controller puts on every child it writes.
const CHILDREN: &str = "app.kubernetes.io/managed-by=cdtarget";

/// The same quantities as measured by `benches/controller.rs` on kube-fake-client at 1,000 × 10
/// (docs/performance.md, "Controller"), for the ratios.
mod fake {
    /// Wall time of the first pass (both phases), s.
    pub const FIRST_PASS_S: f64 = 26.6;
    /// Wall time of the no-op pass (both phases), s.
    pub const NO_OP_PASS_S: f64 = 15.1;
    /// Requests per registration in the first pass, and the writes among them.
    pub const REGISTRATION_FIRST: (f64, f64) = (12.0, 11.0);
    /// Requests per registration in the no-op pass, and the writes among them.
    pub const REGISTRATION_NO_OP: (f64, f64) = (11.0, 0.0);
    /// Requests per CDTarget in the first pass, and the writes among them.
    pub const TARGET_FIRST: (f64, f64) = (11.0, 5.0);
    /// Requests per CDTarget in the no-op pass, and the writes among them.
    pub const TARGET_NO_OP: (f64, f64) = (6.0, 0.0);
    /// Peak resident set of the controller process, MiB.
    pub const PEAK_MIB: f64 = 116.5;
}

fn main() {
    let options = Options::parse(&env::args().skip(1).collect::<Vec<_>>());
    // Before any thread exists: the controller process inherits what deploy/ gives it.
    let deployment_env = deployment::deployment_env();
    deployment::set_env(&deployment_env);
    if let Err(e) = run(options, &deployment_env) {
        eprintln!("cluster bench: {e}");
        std::process::exit(1);
    }
}

/// The size of the fleet and the agent modes to run it in.
#[derive(Clone, Copy)]
struct Options {
    registrations: usize,
    targets: usize,
    modes: Modes,
}

/// Which agent mode the fleet's CDTargets are in (`--mode`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Modes {
    /// Every CDTarget in this mode (`deployment`, the default, or `job`).
    One(AgentMode),
    /// The same fleet once per mode, each on a control plane of its own, printed side by side.
    Both,
}

impl Modes {
    fn parse(text: &str) -> Modes {
        match text {
            "deployment" | "Deployment" => Modes::One(AgentMode::Deployment),
            "job" | "Job" => Modes::One(AgentMode::Job),
            "both" => Modes::Both,
            other => usage(&format!("--mode `{other}`: expected deployment, job or both")),
        }
    }

    /// The modes to run, in order: Deployment first, so that a ratio reads Job / Deployment.
    fn list(self) -> Vec<AgentMode> {
        match self {
            Modes::One(mode) => vec![mode],
            Modes::Both => vec![AgentMode::Deployment, AgentMode::Job],
        }
    }
}

impl Options {
    fn parse(args: &[String]) -> Options {
        let env_num = |name: &str, default: usize| env::var(name).ok().map_or(default, |v| number(&v));
        let mut options = Options {
            registrations: env_num("CDTARGET_BENCH_REGISTRATIONS", 1_000),
            targets: env_num("CDTARGET_BENCH_TARGETS", 10),
            modes: env::var("CDTARGET_BENCH_MODE").map_or(Modes::One(AgentMode::Deployment), |v| Modes::parse(&v)),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value"))).clone();
            match arg.as_str() {
                "--bench" => {} // passed by `cargo bench`
                "--registrations" => options.registrations = number(&value()),
                "--targets" => options.targets = number(&value()),
                "--mode" => options.modes = Modes::parse(&value()),
                other if other.starts_with('-') => usage(&format!("unknown option {other}")),
                _ => {} // a name filter given to `cargo bench`: there is only one benchmark
            }
        }
        options
    }

    fn cdtargets(&self) -> usize {
        self.registrations * self.targets
    }

    /// The shape `benches/controller.rs` was measured at (in Deployment mode, the only one it
    /// knows).
    fn is_fake_shape(&self, mode: AgentMode) -> bool {
        self.registrations == 1_000 && self.targets == 10 && mode == AgentMode::Deployment
    }
}

fn number(text: &str) -> usize {
    args::positive(text).unwrap_or_else(|why| usage(&why))
}

fn usage(message: &str) -> ! {
    eprintln!(
        "cluster bench: {message}\nusage: cargo bench --bench cluster -- [--registrations 1000] [--targets 10] [--mode deployment|job|both]"
    );
    std::process::exit(2)
}

// === the run ===

fn run(options: Options, deployment_env: &[(String, String)]) -> Result<(), String> {
    let Options { registrations, targets, modes } = options;
    let modes = modes.list();
    let named: Vec<&str> = modes.iter().map(|mode| mode.as_str()).collect();
    println!(
        "cluster bench: {registrations} registrations × {targets} CDTargets on a real API server, mode {}",
        named.join(", then ")
    );
    print_machine();
    let bench = "cluster bench";
    if find_on_path("kubectl").is_none() {
        let _ = skip_or_fail::<()>(bench, Err(HarnessError::Unavailable("kubectl is not installed".into())));
        return Ok(());
    }
    let keda = keda_crds_dir();
    if !keda.is_dir() {
        let why = format!("KEDA's CRDs are not at {}", keda.display());
        let _ = skip_or_fail::<()>(bench, Err(HarnessError::Unavailable(why)));
        return Ok(());
    }
    println!("  controller environment from deploy/deployment.yaml: {}", deployment::describe(deployment_env));

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    for mode in modes {
        println!();
        println!("=== spec.mode: {mode} ===");
        let Some(report) = run_mode(&runtime, options, mode)? else { return Ok(()) };
        reports.push(report);
    }
    println!();
    print_per_target(&reports, options);
    Ok(())
}

/// One run of the fleet in `mode`, on a control plane of its own; `None` when the control plane
/// cannot start here (skipped, said so).
fn run_mode(runtime: &tokio::runtime::Runtime, options: Options, mode: AgentMode) -> Result<Option<Report>, String> {
    let Options { registrations, .. } = options;
    let (bench, keda) = ("cluster bench", keda_crds_dir());
    let started = Instant::now();
    let upstream = Upstream::new();
    fleet::generate(&upstream, options.registrations, options.targets, Some(mode));
    println!(
        "  generated {registrations} repositories (spec.mode: {mode}) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let daemon = GitDaemon::start(&upstream.root());

    let Some(cluster) = skip_or_fail(bench, ControlPlane::start()) else { return Ok(None) };
    let started = Instant::now();
    install(&cluster, &keda);
    println!("  installed deploy/ and KEDA's CRDs in {:.1} s", started.elapsed().as_secs_f64());
    let started = Instant::now();
    let objects = onboard(&cluster, &daemon, registrations);
    println!(
        "  onboarded {registrations} tenants ({objects} objects, one kubectl apply) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let result = runtime.block_on(measure(&cluster, options, mode));
    println!("  git daemon connections: {}", daemon.connections());
    // The controller is gone (dropped in `measure`); the daemon, then the control plane, before
    // the next mode starts its own.
    drop(daemon);
    drop(cluster);
    result.map(Some)
}

/// Machine, control-plane pin and controller build.
fn print_machine() {
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or_else(|| "?".into(), |kib| format!("{:.1} GiB", kib / 1024.0 / 1024.0));
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map_or("?", |m| m.trim_start_matches([' ', '\t', ':']));
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!(
        "  machine: {cpus} CPUs ({model}), {memory} RAM, Linux {}, load average {}",
        kernel.trim(),
        load_average()
    );
    let version = Command::new(env!("CARGO_BIN_EXE_cdtarget")).arg("--version").output();
    let version = version.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
    let commit = common::git(Path::new(env!("CARGO_MANIFEST_DIR")), &["rev-parse", "--short", "HEAD"]);
    let dirty = !common::git(Path::new(env!("CARGO_MANIFEST_DIR")), &["status", "--porcelain", "--untracked-files=no"])
        .is_empty();
    let profile =
        if cfg!(debug_assertions) { "a debug build: not what users run" } else { "optimised (the bench profile)" };
    println!(
        "  controller: {version} at commit {commit}{}, {profile}",
        if dirty { " with uncommitted changes" } else { "" }
    );
}

/// Onboards `tenant-0` .. `tenant-{n-1}`: the example's cluster-wide admission policies once, then
/// one multi-document apply of every tenant's objects. Returns how many objects that apply held.
fn onboard(cluster: &ControlPlane, daemon: &GitDaemon, registrations: usize) -> usize {
    let (tenant_documents, cluster_wide) = measure::tenant_rbac_documents();

    let dir = cluster.dir().join("onboarding");
    fs::create_dir_all(&dir).expect("onboarding directory");
    let policies = dir.join("admission-policies.yaml");
    fs::write(&policies, cluster_wide.join("\n---\n")).expect("write the admission policies");
    cluster.kubectl(&["apply", "-f", path_str(&policies)]).success();

    let mut all = String::new();
    let mut objects = 0;
    for i in 0..registrations {
        let ns = format!("tenant-{i}");
        for document in &tenant_documents {
            let _ = write!(all, "{}\n---\n", document.replace("team-payments", &ns));
        }
        let _ = write!(
            all,
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {TOKEN}\n  namespace: {ns}\nstringData:\n  AZP_TOKEN: not-a-real-pat-{i}\n---\n\
             apiVersion: cdtarget.io/v1alpha1\nkind: TenantRepository\nmetadata:\n  name: {ns}\n  namespace: {PLATFORM_NAMESPACE}\nspec:\n  \
             url: {url}\n  ref:\n    branch: main\n  path: deploy\n  interval: {INTERVAL}\n  targetNamespace: {ns}\n  \
             serviceAccountName: {TENANT_SERVICE_ACCOUNT}\n  prune: true\n---\n",
            url = daemon.url(&format!("tenant-{i}.git"))
        );
        objects += tenant_documents.len() + 2;
    }
    let file = dir.join("tenants.yaml");
    fs::write(&file, all).expect("write the tenants");
    // Server-side: one request per object (client-side apply reads each first).
    cluster.kubectl(&["apply", "--server-side", "-f", path_str(&file)]).success();
    objects
}

// === the measurement ===

async fn measure(cluster: &ControlPlane, options: Options, mode: AgentMode) -> Result<Report, String> {
    let client = cluster.admin_client().await;
    let version = client.apiserver_version().await.map_err(|e| format!("GET /version: {e}"))?;
    println!(
        "  Kubernetes {} (kube-apiserver, kube-controller-manager, etcd of hack/control-plane)",
        version.git_version
    );
    let pids = cluster.pids();
    let (etcd, apiserver) = (pids[0], pids[1]);
    let mut audit = AuditTail::at_end(cluster.audit_log());

    let before = Usage::now(apiserver, etcd, None);
    let mut controller = Controller::start(cluster, "cdtarget-bench", &[]).await;
    let started = Instant::now();
    let pid = controller.pid();
    let memory = Arc::new(Mutex::new(Memory::default()));
    let (exited_tx, exited) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(sample_memory(pid, memory.clone(), exited_tx));
    let metrics_address = controller.metrics_address();
    println!("  controller started (pid {pid}); waiting for the first pass");

    // 1. The first pass.
    let mut first = FirstPass::default();
    let expected = ChildKinds::of(mode);
    let converging = converge(client.clone(), options, expected, started, exited, &memory, &mut audit, &mut first);
    let outcome = tokio::time::timeout(CONVERGE_WITHIN, converging).await;
    let converged_at = started.elapsed();
    let children = match outcome {
        Ok(Ok(children)) => children,
        Ok(Err(why)) => return Err(format!("{why}\n{}", log_tail(controller.log()))),
        Err(_) => return Err(format!("not converged within {CONVERGE_WITHIN:?}\n{}", log_tail(controller.log()))),
    };
    let logged = tokio::task::block_in_place(|| {
        audit.until(Duration::from_secs(120), |audit| {
            audit.read_new(|event| first.add(event));
            first.statuses.len() >= options.cdtargets()
        })
    });
    if !logged {
        return Err(format!(
            "the audit log holds the status write of {} of {} CDTargets after 120 s ({} rotations followed)",
            first.statuses.len(),
            options.cdtargets(),
            audit.rotations
        ));
    }
    let first = first.window;
    let after_first = Usage::now(apiserver, etcd, Some(pid));
    let first_metrics = scrape(metrics_address).await;
    let memory_after_first = format!("{}; {}", memory.lock().unwrap().describe(), resident(pid));
    println!();
    let first_usage = before.until(&after_first);
    let first_reconciles = Metrics::default().delta(&first_metrics);
    report_window(
        &format!(
            "first pass: controller start → every CDTarget has its {} children ({}) and its status",
            expected.names().len(),
            expected.names().join(", ")
        ),
        &first,
        converged_at,
        &first_usage,
        &first_reconciles,
        options,
        mode,
    );
    println!("    controller memory: {memory_after_first}");

    // 2. Settle: the trailing reconciles and Events of the first pass.
    let settle_started = Instant::now();
    let mut settle = Window::default();
    let quiet = settle_quietly(&mut audit, &mut settle);
    let settled = Usage::now(apiserver, etcd, Some(pid));
    let settled_metrics = scrape(metrics_address).await;
    println!();
    report_window(
        &format!(
            "after the first pass, until {}",
            if quiet {
                format!("{} s without a request but watches and Lease renewals", QUIET.as_secs())
            } else {
                format!("{} s had passed (never quiet that long: periodic resyncs)", SETTLE_AT_MOST.as_secs())
            }
        ),
        &settle,
        settle_started.elapsed(),
        &after_first.until(&settled),
        &first_metrics.delta(&settled_metrics),
        options,
        mode,
    );

    // 3. The no-op poll of every registration.
    let annotate = || {
        let request = "cdtarget.io/requestedAt=bench-no-op-poll";
        cluster
            .kubectl(&["annotate", "tenantrepositories", "--all", "-n", PLATFORM_NAMESPACE, request, "--overwrite"])
            .success();
    };
    // The poll ends with each registration's status write recording the request.
    let polled = |reads: &DriftReads| reads.done(options) && reads.requests_recorded(options);
    let (poll, poll_wall) =
        no_op_window(&mut audit, annotate, polled, options).map_err(|e| format!("no-op poll: {e}"))?;
    let polled_usage = Usage::now(apiserver, etcd, Some(pid));
    let polled_metrics = scrape(metrics_address).await;
    println!();
    let poll_usage = settled.until(&polled_usage);
    let poll_reconciles = settled_metrics.delta(&polled_metrics);
    report_window(
        "no-op poll: `cdtarget.io/requestedAt` on every registration (kubectl annotate --all; each request handled is recorded in one status write) → every registration's drift reads",
        &poll,
        poll_wall,
        &poll_usage,
        &poll_reconciles,
        options,
        mode,
    );

    // 4. The no-op re-render of everything.
    let apply_policy = || {
        let file = cluster.dir().join("onboarding/policy.yaml");
        let policy = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cdtarget-policy\n  namespace: {PLATFORM_NAMESPACE}\ndata:\n  policy.yaml: \"{{}}\"\n"
        );
        fs::write(&file, policy).expect("write the policy ConfigMap");
        cluster.kubectl(&["apply", "-f", path_str(&file)]).success();
    };
    let everything = |reads: &DriftReads| reads.done(options) && reads.targets_done(options);
    let (render, render_wall) =
        no_op_window(&mut audit, apply_policy, everything, options).map_err(|e| format!("no-op re-render: {e}"))?;
    let rendered_usage = Usage::now(apiserver, etcd, Some(pid));
    let rendered_metrics = scrape(metrics_address).await;
    println!();
    let render_usage = polled_usage.until(&rendered_usage);
    let render_reconciles = polled_metrics.delta(&rendered_metrics);
    report_window(
        "no-op re-render: the policy ConfigMap created with the defaults written out (`policy.yaml: {}`) → every registration's drift reads and every CDTarget's last read (Deployment mode: its ScaledObject; Job mode: the LIST of its agent Jobs)",
        &render,
        render_wall,
        &render_usage,
        &render_reconciles,
        options,
        mode,
    );

    // What the fleet left in the cluster: the children (watched above), and what other
    // controllers made of them (nothing: none runs).
    let derived = derived_objects(&client).await;

    // 5. Memory, then the summary.
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let peak = status_kib(&status, "VmHWM:").map(|kib| kib / 1024.0);
    sampler.abort();
    let sampled = memory.lock().unwrap().clone();
    let failures = fs::read_to_string(controller.log())
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("reconcile failed"))
        .count();
    let server_memory = |pid: u32| {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status_kib(&status, "VmHWM:").map_or_else(|| "?".into(), |kib| format!("{:.0} MiB", kib / 1024.0))
    };
    println!();
    println!(
        "  summary ({} registrations × {} CDTargets, load average now {}):",
        options.registrations,
        options.targets,
        load_average()
    );
    println!("    time to converge: {:.1} s", converged_at.as_secs_f64());
    if options.is_fake_shape(mode) {
        println!(
            "      {:.1}x the fake API server's first pass ({:.1} s, benches/controller.rs: reconcilers called directly, 16 at a time)",
            converged_at.as_secs_f64() / fake::FIRST_PASS_S,
            fake::FIRST_PASS_S
        );
        println!(
            "      no-op re-render {:.1} s: {:.1}x the fake API server's no-op pass ({:.1} s)",
            render_wall.as_secs_f64(),
            render_wall.as_secs_f64() / fake::NO_OP_PASS_S,
            fake::NO_OP_PASS_S
        );
    }
    match peak {
        Some(peak) => println!(
            "    controller peak memory (VmHWM): {peak:.1} MiB, goal ≤ {MEMORY_GOAL_MIB} MiB: {}; {:.2}x the fake-server run's {} MiB",
            if peak <= MEMORY_GOAL_MIB { "met" } else { "NOT met" },
            peak / fake::PEAK_MIB,
            fake::PEAK_MIB
        ),
        None => println!("    controller peak memory: unreadable (the process is gone)"),
    }
    println!("    controller memory sampled every second: {}; {}", sampled.describe(), resident(pid));
    println!("    audit log rotations followed: {}", audit.rotations);
    for (name, window) in [("no-op poll", &poll), ("no-op re-render", &render)] {
        let writes = window.writes();
        println!(
            "    writes by the controller in the {name}: {writes} (goal 0: {}); SubjectAccessReviews {}, Lease writes {}",
            if writes == 0 { "met" } else { "NOT met" },
            window.reviews(),
            window.lease_writes()
        );
    }
    println!("    reconcile failures in the controller's log: {failures}");
    println!("    peak memory of kube-apiserver {}, etcd {}", server_memory(apiserver), server_memory(etcd));
    let derived_line: Vec<String> = derived.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
    let children_line: Vec<String> = children.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
    println!(
        "    objects: the controller's children {}; made of them by other controllers (none runs here: no Deployment, ReplicaSet or Job controller, no KEDA operator) {}",
        children_line.join(", "),
        derived_line.join(", ")
    );
    controller.kill();
    Ok(Report {
        mode,
        children,
        derived,
        peak_mib: peak,
        windows: vec![
            Measured {
                name: "first pass",
                window: first,
                wall: converged_at,
                usage: first_usage,
                metrics: first_reconciles,
            },
            Measured { name: "no-op poll", window: poll, wall: poll_wall, usage: poll_usage, metrics: poll_reconciles },
            Measured {
                name: "no-op re-render",
                window: render,
                wall: render_wall,
                usage: render_usage,
                metrics: render_reconciles,
            },
        ],
    })
}

/// Runs `trigger`, then reads the audit log until the controller's reads say `done`: the requests
/// of the window and its wall time.
fn no_op_window(
    audit: &mut AuditTail,
    trigger: impl FnOnce(),
    done: impl Fn(&DriftReads) -> bool,
    options: Options,
) -> Result<(Window, Duration), String> {
    let started = Instant::now();
    let mut window = Window::default();
    let mut reads = DriftReads::default();
    tokio::task::block_in_place(|| {
        trigger();
        audit.until(NO_OP_WITHIN, |audit| {
            audit.read_new(|event| {
                window.add(event);
                reads.add(event);
            });
            done(&reads)
        })
    });
    if !done(&reads) {
        return Err(format!("{} within {NO_OP_WITHIN:?}", reads.describe(options)));
    }
    Ok((window, started.elapsed()))
}

/// Waits until every expected CDTarget has the children of its mode (`expected`) and a status for
/// its generation, as seen by watches of the admin, printing progress at every tenth; the
/// children then present, by kind.
#[allow(clippy::too_many_arguments)] // the run's state, passed once
async fn converge(
    client: Client,
    options: Options,
    expected_children: ChildKinds,
    started: Instant,
    mut exited: tokio::sync::watch::Receiver<bool>,
    memory: &Arc<Mutex<Memory>>,
    audit: &mut AuditTail,
    first: &mut FirstPass,
) -> Result<BTreeMap<&'static str, usize>, String> {
    let expected = options.cdtargets();
    // Every kind in either mode: a child of the other mode would show as one too many.
    let mut changes = futures::stream::select_all([
        targets(&client),
        children::<NetworkPolicy>(&client, NETWORK_POLICY),
        children::<Deployment>(&client, DEPLOYMENT),
        children::<ScaledObject>(&client, SCALED_OBJECT),
        children::<ScaledJob>(&client, SCALED_JOB),
        children::<TriggerAuthentication>(&client, TRIGGER_AUTHENTICATION),
    ]);
    let mut fleet = Fleet { expected: expected_children, ..Fleet::default() };
    let mut reported = 0;
    let mut all_applied = false;
    loop {
        let change = tokio::select! {
            _ = exited.wait_for(|exited| *exited) => {
                return Err(format!("the controller exited; {} of {expected} converged", fleet.converged));
            }
            change = changes.next() => change,
        };
        let change = match change {
            None => return Err("the watches ended".into()),
            Some(Ok(change)) => change,
            Some(Err(e)) => {
                eprintln!("  watch error (retried): {e}");
                continue;
            }
        };
        fleet.apply(change);
        if !all_applied && fleet.existing >= expected {
            all_applied = true;
            println!(
                "    {:7.1} s  every CDTarget exists (all registrations applied)",
                started.elapsed().as_secs_f64()
            );
        }
        let tenth = fleet.converged * 10 / expected;
        if tenth > reported {
            reported = tenth;
            // Keep up with the audit log as it grows (hundreds of MB at 10,000 CDTargets).
            tokio::task::block_in_place(|| audit.read_new(|event| first.add(event)));
            println!(
                "    {:7.1} s  {:>3}% converged ({} of {expected}); controller RSS {}; load {}",
                started.elapsed().as_secs_f64(),
                tenth * 10,
                fleet.converged,
                memory.lock().unwrap().now_mib.map_or_else(|| "?".into(), |mib| format!("{mib:.1} MiB")),
                load_average()
            );
        }
        if fleet.converged >= expected {
            let reasons: Vec<String> = fleet.reasons().into_iter().map(|(r, n)| format!("{r} ×{n}")).collect();
            println!("    status of the CDTargets: {}", reasons.join(", "));
            return Ok(fleet.children());
        }
    }
}

/// What converging is judged on, per CDTarget (`namespace`, `name`).
#[derive(Default)]
struct Fleet {
    /// The children every CDTarget has once converged.
    expected: ChildKinds,
    targets: HashMap<(String, String), Target>,
    existing: usize,
    converged: usize,
}

#[derive(Default)]
struct Target {
    exists: bool,
    /// `Ready=<status> <reason>` once the status describes the CDTarget's generation.
    ready: Option<String>,
    /// One bit per child kind present.
    children: u8,
}

impl Target {
    fn converged(&self, expected: ChildKinds) -> bool {
        self.exists && self.ready.is_some() && self.children == expected.0
    }
}

const NETWORK_POLICY: u8 = 1;
const DEPLOYMENT: u8 = 2;
const SCALED_OBJECT: u8 = 4;
const TRIGGER_AUTHENTICATION: u8 = 8;
const SCALED_JOB: u8 = 16;
/// Each child kind's bit and name, in the order of application.
const CHILD_KINDS: [(u8, &str); 5] = [
    (TRIGGER_AUTHENTICATION, "TriggerAuthentication"),
    (NETWORK_POLICY, "NetworkPolicy"),
    (DEPLOYMENT, "Deployment"),
    (SCALED_OBJECT, "ScaledObject"),
    (SCALED_JOB, "ScaledJob"),
];

/// A set of child kinds, one bit each.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct ChildKinds(u8);

impl ChildKinds {
    /// The children of a CDTarget in `mode` (docs/agents.md): KEDA's ScaledJob in Job mode where
    /// Deployment mode has a Deployment and its ScaledObject.
    fn of(mode: AgentMode) -> ChildKinds {
        ChildKinds(match mode {
            AgentMode::Deployment => NETWORK_POLICY | DEPLOYMENT | SCALED_OBJECT | TRIGGER_AUTHENTICATION,
            AgentMode::Job => NETWORK_POLICY | SCALED_JOB | TRIGGER_AUTHENTICATION,
        })
    }

    fn names(self) -> Vec<&'static str> {
        CHILD_KINDS.iter().filter(|(bit, _)| self.0 & bit != 0).map(|(_, name)| *name).collect()
    }
}

/// One thing a watch saw.
enum Change {
    /// A CDTarget exists (`Some(readiness)`) or is gone (`None`).
    Target((String, String), Option<Option<String>>),
    /// A child of the CDTarget named by its owner reference is present or gone.
    Child((String, String), u8, bool),
}

impl Fleet {
    fn apply(&mut self, change: Change) {
        let key = match &change {
            Change::Target(key, _) | Change::Child(key, _, _) => key.clone(),
        };
        let target = self.targets.entry(key).or_default();
        let (existed, was) = (target.exists, target.converged(self.expected));
        match change {
            Change::Target(_, seen) => {
                target.exists = seen.is_some();
                target.ready = seen.flatten();
            }
            Change::Child(_, bit, true) => target.children |= bit,
            Change::Child(_, bit, false) => target.children &= !bit,
        }
        self.existing = self.existing + usize::from(target.exists) - usize::from(existed);
        self.converged = self.converged + usize::from(target.converged(self.expected)) - usize::from(was);
    }

    /// The children present, by kind (every kind either mode has, 0 where none).
    fn children(&self) -> BTreeMap<&'static str, usize> {
        CHILD_KINDS
            .iter()
            .map(|(bit, name)| (*name, self.targets.values().filter(|target| target.children & bit != 0).count()))
            .collect()
    }

    fn reasons(&self) -> BTreeMap<String, usize> {
        let mut reasons = BTreeMap::new();
        for target in self.targets.values() {
            *reasons.entry(target.ready.clone().unwrap_or_else(|| "no status".into())).or_default() += 1;
        }
        reasons
    }
}

type Changes = BoxStream<'static, Result<Change, watcher::Error>>;

fn targets(client: &Client) -> Changes {
    watcher(Api::<CDTarget>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .try_filter_map(|event| async move {
            Ok(match event {
                watcher::Event::Apply(target) | watcher::Event::InitApply(target) => {
                    Some(Change::Target(key_of(&target.metadata), Some(readiness(&target))))
                }
                watcher::Event::Delete(target) => Some(Change::Target(key_of(&target.metadata), None)),
                watcher::Event::Init | watcher::Event::InitDone => None,
            })
        })
        .boxed()
}

/// `Ready=<status> <reason>` when the status describes the CDTarget's generation.
fn readiness(target: &CDTarget) -> Option<String> {
    let status = target.status.as_ref()?;
    if status.observed_generation != target.metadata.generation {
        return None;
    }
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some(format!("Ready={} {}", ready.status, ready.reason))
}

fn children<K>(client: &Client, bit: u8) -> Changes
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let config = watcher::Config::default().labels(CHILDREN);
    watcher(Api::<PartialObjectMeta<K>>::all(client.clone()), config)
        .default_backoff()
        .try_filter_map(move |event| async move {
            Ok(match event {
                watcher::Event::Apply(child) | watcher::Event::InitApply(child) => {
                    owner_of(&child.metadata).map(|key| Change::Child(key, bit, true))
                }
                watcher::Event::Delete(child) => owner_of(&child.metadata).map(|key| Change::Child(key, bit, false)),
                watcher::Event::Init | watcher::Event::InitDone => None,
            })
        })
        .boxed()
}

fn key_of(meta: &ObjectMeta) -> (String, String) {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// The CDTarget owning a child (its controller owner reference).
fn owner_of(meta: &ObjectMeta) -> Option<(String, String)> {
    let owner = meta.owner_references.as_ref()?.iter().find(|owner| owner.kind == "CDTarget")?;
    Some((meta.namespace.clone().unwrap_or_default(), owner.name.clone()))
}

/// Reads the audit log until the controller has sent nothing but watches and Lease renewals for
/// [`QUIET`], at most [`SETTLE_AT_MOST`]; whether it went quiet.
fn settle_quietly(audit: &mut AuditTail, window: &mut Window) -> bool {
    let started = Instant::now();
    let mut last = Instant::now();
    loop {
        let quiet_left = QUIET.saturating_sub(last.elapsed());
        if quiet_left.is_zero() {
            return true;
        }
        let settle_left = SETTLE_AT_MOST.saturating_sub(started.elapsed());
        if settle_left.is_zero() {
            return false;
        }
        // Woken by the log's next append, or by the end of the quiet time without one.
        let active = audit.until(quiet_left.min(settle_left), |audit| {
            let mut active = false;
            audit.read_new(|event| {
                window.add(event);
                active |= counted(event)
                    && event.user == CONTROLLER_USER
                    && event.verb != "watch"
                    && event.resource != "leases";
            });
            active
        });
        if active {
            last = Instant::now();
        }
    }
}

/// The first pass as the audit log shows it: the controller's requests, and which CDTargets had
/// their status written.
#[derive(Default)]
struct FirstPass {
    window: Window,
    statuses: HashSet<(String, String)>,
}

impl FirstPass {
    fn add(&mut self, event: &AuditEvent) {
        self.window.add(event);
        if counted(event)
            && event.user == CONTROLLER_USER
            && event.is_mutating()
            && event.full_resource() == "cdtargets/status"
            && (200..300).contains(&event.code)
        {
            self.statuses.insert((event.namespace.clone(), event.name.clone()));
        }
    }
}

/// The requests that end an unchanged reconcile, counted as the audit log shows them: per
/// registration its drift reads (GETs of its CDTargets as its tenant), per CDTarget its last read
/// (Deployment mode: the GET of its ScaledObject; Job mode: the LIST of its ScaledJob's agent
/// Jobs by KEDA's label, which follows the child reads).
#[derive(Default)]
struct DriftReads {
    registrations: HashMap<String, HashSet<String>>,
    targets: HashSet<(String, String)>,
    /// Registrations whose status the controller wrote (a request recorded as handled).
    recorded: HashSet<String>,
}

impl DriftReads {
    fn add(&mut self, event: &AuditEvent) {
        if !counted(event) || event.user != CONTROLLER_USER {
            return;
        }
        if event.verb == "patch" && event.resource == "tenantrepositories" && event.subresource == "status" {
            self.recorded.insert(event.name.clone());
        }
        if event.verb == "list" && event.resource == "jobs" {
            if let Some(scaled_job) = scaled_job_selected(&event.uri) {
                self.targets.insert((event.namespace.clone(), scaled_job));
            }
            return;
        }
        if event.verb != "get" {
            return;
        }
        if event.impersonated_user.is_some() && event.resource == "cdtargets" {
            self.registrations.entry(event.namespace.clone()).or_default().insert(event.name.clone());
        } else if event.impersonated_user.is_none() && event.resource == "scaledobjects" {
            self.targets.insert((event.namespace.clone(), event.name.clone()));
        }
    }

    fn done(&self, options: Options) -> bool {
        self.registrations.len() >= options.registrations
            && self.registrations.values().all(|names| names.len() >= options.targets)
    }

    /// Every registration recorded the request it handled (its last write of the poll).
    fn requests_recorded(&self, options: Options) -> bool {
        self.recorded.len() >= options.registrations
    }

    fn targets_done(&self, options: Options) -> bool {
        self.targets.len() >= options.cdtargets()
    }

    fn describe(&self, options: Options) -> String {
        let complete = self.registrations.values().filter(|names| names.len() >= options.targets).count();
        format!(
            "the drift reads of {complete} of {} registrations ({} recorded their request) and the last child read of {} of {} CDTargets",
            options.registrations,
            self.recorded.len(),
            self.targets.len(),
            options.cdtargets()
        )
    }
}

/// The ScaledJob a LIST of Jobs selects by KEDA's label (`labelSelector=scaledjob.keda.sh/name=N`,
/// percent-encoded in the request URI), if that is its selector.
fn scaled_job_selected(uri: &str) -> Option<String> {
    let (_, query) = uri.split_once('?')?;
    let selector = query.split('&').find_map(|pair| pair.strip_prefix("labelSelector="))?;
    percent_decoded(selector).strip_prefix("scaledjob.keda.sh/name=").map(str::to_owned)
}

/// `text` with its `%XX` escapes (and `+` for a space) decoded; an invalid escape is kept as it
/// is.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[i], escaped) {
            (_, Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            (b'+', None) => {
                decoded.push(b' ');
                i += 1;
            }
            (byte, None) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

// === the audit log ===

/// Who in the controller sent a request, as far as the audit log tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Sender {
    /// The TenantRepository reconciler: its applies, drift reads and prunes as the tenant, the
    /// registration's status, Events and Secrets in the platform namespace.
    Registrations,
    /// The CDTarget reconciler: children, status, referenced Secrets, SubjectAccessReviews,
    /// Events in tenant namespaces, and in Job mode the LIST of a ScaledJob's agent Jobs.
    Targets,
    /// Lists and watches (the reflectors' and the CDTarget reconciler's periodic list of the
    /// registrations).
    ListsAndWatches,
    /// Leader election.
    Election,
    /// Discovery and other requests without a resource.
    Discovery,
    /// Anything else.
    Other,
}

impl Sender {
    fn of(event: &AuditEvent) -> Sender {
        if event.impersonated_user.is_some() {
            return Sender::Registrations;
        }
        match (event.verb.as_str(), event.resource.as_str()) {
            // Job mode: each reconcile lists its ScaledJob's agent Jobs (never watched).
            ("list", "jobs") => Sender::Targets,
            ("list" | "watch", _) => Sender::ListsAndWatches,
            (_, "") => Sender::Discovery,
            (_, "leases") => Sender::Election,
            (_, "tenantrepositories") => Sender::Registrations,
            (_, "events" | "secrets") if event.namespace == PLATFORM_NAMESPACE => Sender::Registrations,
            (
                _,
                "cdtargets"
                | "subjectaccessreviews"
                | "secrets"
                | "events"
                | "deployments"
                | "networkpolicies"
                | "scaledobjects"
                | "scaledjobs"
                | "triggerauthentications",
            ) => Sender::Targets,
            _ => Sender::Other,
        }
    }
}

/// The requests of one window.
#[derive(Default)]
struct Window {
    /// The controller's requests by sender, verb and resource (`resource/subresource`, with ` as
    /// tenant` when impersonated; the path for requests without a resource).
    controller: BTreeMap<(Sender, String, String), u64>,
    /// Everyone else's requests (kubectl, kube-controller-manager, the benchmark's watches).
    others: u64,
}

impl Window {
    fn add(&mut self, event: &AuditEvent) {
        if !counted(event) {
            return;
        }
        if event.user != CONTROLLER_USER {
            self.others += 1;
            return;
        }
        let mut resource = if event.resource.is_empty() {
            event.uri.split('?').next().unwrap_or_default().to_owned()
        } else {
            event.full_resource()
        };
        if event.impersonated_user.is_some() {
            resource.push_str(" as tenant");
        }
        *self.controller.entry((Sender::of(event), event.verb.clone(), resource)).or_default() += 1;
    }

    fn total(&self, sender: Option<Sender>) -> u64 {
        self.controller.iter().filter(|((s, _, _), _)| sender.is_none_or(|want| *s == want)).map(|(_, n)| n).sum()
    }

    fn is_write(verb: &str, resource: &str) -> bool {
        matches!(verb, "create" | "update" | "patch" | "delete" | "deletecollection")
            && !resource.starts_with("subjectaccessreviews")
            && !resource.starts_with("leases")
    }

    /// Writes, SubjectAccessReview creates and Lease writes aside.
    fn writes_of(&self, sender: Option<Sender>) -> u64 {
        self.controller
            .iter()
            .filter(|((s, verb, resource), _)| sender.is_none_or(|want| *s == want) && Window::is_write(verb, resource))
            .map(|(_, n)| n)
            .sum()
    }

    fn writes(&self) -> u64 {
        self.writes_of(None)
    }

    fn reviews(&self) -> u64 {
        self.controller.iter().filter(|((_, _, resource), _)| resource == "subjectaccessreviews").map(|(_, n)| n).sum()
    }

    fn lease_writes(&self) -> u64 {
        self.controller
            .iter()
            .filter(|((_, verb, resource), _)| resource == "leases" && verb != "get")
            .map(|(_, n)| n)
            .sum()
    }

    fn by_verb(&self) -> BTreeMap<&str, u64> {
        let mut verbs = BTreeMap::new();
        for ((_, verb, _), n) in &self.controller {
            *verbs.entry(verb.as_str()).or_default() += n;
        }
        verbs
    }
}

fn report_window(
    title: &str,
    window: &Window,
    wall: Duration,
    usage: &UsageDelta,
    metrics: &Metrics,
    options: Options,
    mode: AgentMode,
) {
    println!("  {title}");
    println!(
        "    {:.1} s wall; CPU: kube-apiserver {:.1} s, etcd {:.1} s, controller {:.1} s; load average {}",
        wall.as_secs_f64(),
        usage.apiserver,
        usage.etcd,
        usage.controller,
        load_average()
    );
    let verbs: Vec<String> = window.by_verb().iter().map(|(verb, n)| format!("{verb} {n}")).collect();
    println!(
        "    the controller's requests: {} ({}); writes {} (SubjectAccessReviews {}, Lease writes {} apart); other clients' requests {}",
        window.total(None),
        verbs.join(", "),
        window.writes(),
        window.reviews(),
        window.lease_writes(),
        window.others
    );
    for ((sender, verb, resource), n) in &window.controller {
        println!("      {:<16} {verb:<7} {resource:<40} {n:>8}", format!("{sender:?}"));
    }
    if !metrics.0.is_empty() {
        let lines: Vec<String> = metrics.0.iter().map(|(series, n)| format!("{series} +{n}")).collect();
        println!("    from /metrics: {}", lines.join(", "));
    }
    // benches/controller.rs measured Deployment mode only.
    let fake = if mode == AgentMode::Job {
        None
    } else if title.starts_with("first pass") {
        Some((fake::REGISTRATION_FIRST, fake::TARGET_FIRST))
    } else if title.starts_with("no-op") {
        Some((fake::REGISTRATION_NO_OP, fake::TARGET_NO_OP))
    } else {
        None
    };
    let kinds = [
        ("TenantRepository", Sender::Registrations, options.registrations, fake.map(|f| f.0)),
        ("CDTarget", Sender::Targets, options.cdtargets(), fake.map(|f| f.1)),
    ];
    for (kind, sender, objects, fake) in kinds {
        let (requests, writes) = (window.total(Some(sender)) as f64, window.writes_of(Some(sender)) as f64);
        let reconciles = metrics.reconciles(kind) as f64;
        let mut line = format!(
            "    {kind}: {reconciles} reconciles of {objects}; per object {:.2} requests ({:.2} writes)",
            requests / objects.max(1) as f64,
            writes / objects.max(1) as f64
        );
        if reconciles > 0.0 {
            let _ = write!(line, ", per reconcile {:.2} ({:.2})", requests / reconciles, writes / reconciles);
            if let Some((fake_requests, fake_writes)) = fake {
                let _ = write!(
                    line,
                    "; fake API server per reconcile {fake_requests} ({fake_writes}): {:.2}x the requests",
                    requests / reconciles / fake_requests
                );
            }
        }
        println!("{line}");
    }
    println!("    lists and watches: {}", window.total(Some(Sender::ListsAndWatches)));
}

// === processes: CPU and memory ===

/// CPU seconds of kube-apiserver, etcd and the controller at one moment.
struct Usage {
    apiserver: f64,
    etcd: f64,
    controller: f64,
}

/// CPU seconds spent between two moments.
struct UsageDelta {
    apiserver: f64,
    etcd: f64,
    controller: f64,
}

impl Usage {
    fn now(apiserver: u32, etcd: u32, controller: Option<u32>) -> Usage {
        Usage {
            apiserver: cpu_seconds(apiserver),
            etcd: cpu_seconds(etcd),
            controller: controller.map_or(0.0, cpu_seconds),
        }
    }

    fn until(&self, later: &Usage) -> UsageDelta {
        UsageDelta {
            apiserver: later.apiserver - self.apiserver,
            etcd: later.etcd - self.etcd,
            controller: later.controller - self.controller,
        }
    }
}

/// The resident set of `pid` now, by kind, and its thread count.
fn resident(pid: u32) -> String {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mib = |field: &str| status_kib(&status, field).map_or_else(|| "?".into(), |kib| format!("{:.1}", kib / 1024.0));
    let threads = status.lines().find_map(|line| line.strip_prefix("Threads:")).unwrap_or("?").trim().to_owned();
    format!(
        "resident {} MiB = anonymous {} + files {} + shared {}; {threads} threads",
        mib("VmRSS:"),
        mib("RssAnon:"),
        mib("RssFile:"),
        mib("RssShmem:")
    )
}

/// The controller's resident set as sampled.
#[derive(Clone, Default)]
struct Memory {
    now_mib: Option<f64>,
    max_mib: f64,
    samples: usize,
}

impl Memory {
    fn describe(&self) -> String {
        format!(
            "RSS now {}, highest sample {:.1} MiB ({} samples)",
            self.now_mib.map_or_else(|| "?".into(), |mib| format!("{mib:.1} MiB")),
            self.max_mib,
            self.samples
        )
    }
}

/// Samples `VmRSS` of `pid` every second into `memory` (a sampling period, not a wait); says on
/// `exited` when the process has ended.
async fn sample_memory(pid: u32, memory: Arc<Mutex<Memory>>, exited: tokio::sync::watch::Sender<bool>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        if !process_running(pid) {
            exited.send_replace(true);
            return;
        }
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let Some(kib) = status_kib(&status, "VmRSS:") else { continue };
        let mut memory = memory.lock().unwrap();
        memory.now_mib = Some(kib / 1024.0);
        memory.max_mib = memory.max_mib.max(kib / 1024.0);
        memory.samples += 1;
    }
}

// === the controller's /metrics ===

/// The counters of interest from `/metrics`: reconciles by kind and result, Git fetches by
/// result, writes by verb and kind.
#[derive(Clone, Default)]
struct Metrics(BTreeMap<String, u64>);

impl Metrics {
    /// Reconciles of `kind`, every result.
    fn reconciles(&self, kind: &str) -> u64 {
        let prefix = format!("reconciles_total{{kind=\"{kind}\"");
        self.0.iter().filter(|(series, _)| series.starts_with(&prefix)).map(|(_, n)| n).sum()
    }

    fn delta(&self, later: &Metrics) -> Metrics {
        Metrics(
            later
                .0
                .iter()
                .map(|(series, n)| (series.clone(), n - self.0.get(series).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect(),
        )
    }
}

async fn scrape(address: std::net::SocketAddr) -> Metrics {
    let text = match reqwest::get(format!("http://{address}/metrics")).await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(e) => {
            eprintln!("  /metrics: {e}");
            String::new()
        }
    };
    let wanted =
        ["cdtarget_reconciles_total", "cdtarget_git_fetch_duration_seconds_count", "cdtarget_api_writes_total"];
    Metrics(
        text.lines()
            .filter(|line| wanted.iter().any(|name| line.starts_with(name)))
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let series = series.trim_start_matches("cdtarget_").replace("_duration_seconds_count", "es");
                Some((series, value.parse::<f64>().ok()? as u64))
            })
            .collect(),
    )
}

/// The last lines of the controller's log, for a failure message.
fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!("--- controller log (last 40 lines):\n{}", lines[lines.len().saturating_sub(40)..].join("\n"))
}

// === per CDTarget, mode beside mode ===

/// What one run of the fleet in one mode measured, for the per-CDTarget table.
struct Report {
    mode: AgentMode,
    /// The controller's children present at the end of the first pass, by kind.
    children: BTreeMap<&'static str, usize>,
    /// Objects other controllers made of the children, at the end of the run.
    derived: BTreeMap<&'static str, usize>,
    /// The controller's `VmHWM`, MiB.
    peak_mib: Option<f64>,
    windows: Vec<Measured>,
}

/// One measured window.
struct Measured {
    name: &'static str,
    window: Window,
    wall: Duration,
    usage: UsageDelta,
    metrics: Metrics,
}

/// ReplicaSets, Pods and Jobs in the tenants' namespaces (listed as the admin, after the last
/// window): what other controllers made of the children. None here: the control plane's
/// kube-controller-manager runs without the Deployment, ReplicaSet and Job controllers, and no
/// KEDA operator runs, so no agent Job, no HPA; counted to show it, not assumed.
async fn derived_objects(client: &Client) -> BTreeMap<&'static str, usize> {
    async fn count<K>(client: &Client) -> usize
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let api = Api::<PartialObjectMeta<K>>::all(client.clone());
        match api.list_metadata(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|object| object.metadata.namespace.as_deref().is_some_and(|ns| ns.starts_with("tenant-")))
                .count(),
            Err(e) => {
                eprintln!("  listing {}: {e}", K::plural(&()));
                0
            }
        }
    }
    BTreeMap::from([
        ("ReplicaSet", count::<ReplicaSet>(client).await),
        ("Pod", count::<Pod>(client).await),
        ("Job", count::<Job>(client).await),
    ])
}

/// Per CDTarget and per window, each mode run in a column, and with two modes the ratio of the
/// second to the first (Job / Deployment), as a Markdown table.
fn print_per_target(reports: &[Report], options: Options) {
    let Some(first) = reports.first() else { return };
    let cdtargets = options.cdtargets().max(1) as f64;
    let registrations = options.registrations.max(1) as f64;
    let modes: Vec<String> = reports.iter().map(|report| format!("{} mode", report.mode)).collect();
    let ratio_header = match reports {
        [base, other] => format!(" {} / {} |", other.mode, base.mode),
        _ => String::new(),
    };
    println!(
        "per CDTarget ({} registrations × {} CDTargets = {} CDTargets; requests from the audit log, reconciles from /metrics)",
        options.registrations,
        options.targets,
        options.cdtargets()
    );
    println!();
    println!("| | {} |{ratio_header}", modes.join(" | "));
    println!("|---|{}", "--:|".repeat(reports.len() + usize::from(reports.len() == 2)));
    let row = |label: &str, values: &[f64], decimals: usize| {
        let cells: Vec<String> = values.iter().map(|v| format!("{v:.decimals$}")).collect();
        let ratio = match values {
            [base, other] if *base > 0.0 => format!(" {:.2}x |", other / base),
            [base, other] if *base == 0.0 && *other == 0.0 => " – |".to_owned(),
            [_, _] => " (none before) |".to_owned(),
            _ => String::new(),
        };
        println!("| {label} | {} |{ratio}", cells.join(" | "));
    };

    println!("| **objects** | |{}", if reports.len() == 2 { " |" } else { "" });
    let kinds: Vec<&str> = first.children.keys().copied().collect();
    let children: Vec<f64> =
        reports.iter().map(|report| report.children.values().sum::<usize>() as f64 / cdtargets).collect();
    row("children per CDTarget (the controller's, kept)", &children, 2);
    for kind in kinds {
        let values: Vec<f64> =
            reports.iter().map(|r| r.children.get(kind).copied().unwrap_or(0) as f64 / cdtargets).collect();
        row(&format!("  {kind}"), &values, 2);
    }
    for kind in first.derived.keys() {
        let values: Vec<f64> =
            reports.iter().map(|r| r.derived.get(kind).copied().unwrap_or(0) as f64 / cdtargets).collect();
        row(&format!("{kind}s made of them (no workload controller, no KEDA operator runs)"), &values, 2);
    }
    let peaks: Vec<f64> = reports.iter().map(|r| r.peak_mib.unwrap_or(0.0)).collect();
    row("controller peak memory (VmHWM), MiB", &peaks, 1);

    for (i, measured) in first.windows.iter().enumerate() {
        let windows: Vec<&Measured> = reports.iter().filter_map(|r| r.windows.get(i)).collect();
        println!("| **{}** | |{}", measured.name, if reports.len() == 2 { " |" } else { "" });
        let of = |f: &dyn Fn(&Measured) -> f64| windows.iter().map(|m| f(m)).collect::<Vec<f64>>();
        row("wall time, s", &of(&|m| m.wall.as_secs_f64()), 1);
        row("CDTarget reconciles per CDTarget", &of(&|m| m.metrics.reconciles("CDTarget") as f64 / cdtargets), 2);
        row(
            "TenantRepository reconciles per registration",
            &of(&|m| m.metrics.reconciles("TenantRepository") as f64 / registrations),
            2,
        );
        row("the controller's requests per CDTarget", &of(&|m| m.window.total(None) as f64 / cdtargets), 2);
        row(
            "  of which the CDTarget reconciler's",
            &of(&|m| m.window.total(Some(Sender::Targets)) as f64 / cdtargets),
            2,
        );
        row("  writes (SubjectAccessReviews, Leases apart)", &of(&|m| m.window.writes() as f64 / cdtargets), 2);
        let mut keys: Vec<(String, String)> = windows
            .iter()
            .flat_map(|m| m.window.controller.keys().map(|(_, verb, resource)| (verb.clone(), resource.clone())))
            .collect();
        keys.sort();
        keys.dedup();
        for (verb, resource) in keys {
            let values = of(&|m| {
                m.window
                    .controller
                    .iter()
                    .filter(|((_, v, r), _)| *v == verb && *r == resource)
                    .map(|(_, n)| *n)
                    .sum::<u64>() as f64
                    / cdtargets
            });
            row(&format!("  {verb} {resource}"), &values, 3);
        }
        row("other clients' requests per CDTarget", &of(&|m| m.window.others as f64 / cdtargets), 2);
        row("kube-apiserver CPU per CDTarget, ms", &of(&|m| m.usage.apiserver * 1000.0 / cdtargets), 1);
        row("etcd CPU per CDTarget, ms", &of(&|m| m.usage.etcd * 1000.0 / cdtargets), 1);
        row("controller CPU per CDTarget, ms", &of(&|m| m.usage.controller * 1000.0 / cdtargets), 1);
    }
}
