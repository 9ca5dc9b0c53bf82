//! cdtarget and Flux side by side on the same kind of control plane, the same repositories and the
//! same machine (issue #16).
//!
//! ```text
//! cargo bench --bench flux                                   # 1,000 tenants × 10 CDTargets, 100 pushes
//! cargo bench --bench flux -- --tenants 20 --pushes 20
//! CDTARGET_BENCH_TENANTS=50 cargo bench --bench flux
//! FLUX_SOURCE_CONTROLLER=/work/flux-bin/source-controller \
//! FLUX_KUSTOMIZE_CONTROLLER=/work/flux-bin/kustomize-controller \
//! FLUX_NOTIFICATION_CONTROLLER=/work/flux-bin/notification-controller \
//! FLUX_CRDS=/work/flux-src/crds cargo bench --bench flux -- --tenants 20
//! ```
//!
//! Flux is a peer the benchmark is given, never part of this repository: the three controller
//! binaries and a directory of their CRDs, named by the four `FLUX_*` variables above
//! (docs/performance.md says which release was measured and how it was built). Without them the
//! benchmark runs cdtarget alone and says so.
//!
//! What it does:
//!
//! 1. generates one repository per tenant, `tenant-N.git`, served over smart HTTP by
//!    `git http-backend` on 127.0.0.1 (`tests/common/http_git.rs`, which counts requests and the
//!    bytes it sends). Each holds the same plain manifests twice (a ConfigMap `settings` and a
//!    Service) and the tenant's `--targets` CDTargets: as CDTargets under `deploy/` (what cdtarget
//!    reads), and as their rendered children under `flux/` (what Flux applies: `cdtarget::render`
//!    of the same CDTargets, so both controllers end up writing the same NetworkPolicies,
//!    Deployments, ScaledObjects and TriggerAuthentications);
//! 2. for each contender, a control plane of its own (`tests/common/control_plane.rs`: etcd,
//!    kube-apiserver, kube-controller-manager), started fresh, so that neither pays for the other's
//!    objects, watches or namespace deletions; the same admission policies and per-tenant
//!    Namespace, ServiceAccount `cdtarget-tenant`, Role and RoleBinding of
//!    `examples/platform/tenant-rbac.yaml` (Flux's Role also grants the three child kinds cdtarget
//!    writes as itself: Flux applies them as the tenant; and Flux's control plane goes without the
//!    example's `cdtarget-tenant-no-agent-labels` policy, which refuses the rendered Deployments
//!    written as the tenant);
//! 3. starts the controller(s) as processes, then **registers** all tenants with one
//!    `kubectl apply --server-side` (cdtarget: a TenantRepository each; Flux: a GitRepository, a
//!    Kustomization impersonating the tenant's ServiceAccount, and a generic Receiver each) and
//!    waits, by watches of the admin, until every expected object exists in the tenant
//!    namespaces: **time to all applied**;
//! 4. **one no-op interval**: every registration asked to reconcile with nothing changed
//!    (cdtarget: `cdtarget.io/requestedAt` on every TenantRepository; Flux:
//!    `reconcile.fluxcd.io/requestedAt` on every GitRepository and Kustomization, which is what
//!    one interval of both does), until every one recorded the request in its status
//!    (`lastHandledReconcileAt`), then until the controllers are quiet (no request but watches
//!    and Leases for 3 s, at most 30 s). Over that window: the controllers' requests and writes
//!    from the audit log, the Git requests and bytes the server sent, and the CPU seconds of the
//!    controllers, kube-apiserver and etcd (`/proc/<pid>/stat`);
//! 5. **push → applied**: `--pushes` commits, each changing the `settings` ConfigMap of one
//!    tenant (round robin), each announced by a webhook delivery to the contender's receiver
//!    (cdtarget: its `generic` webhook; Flux: the tenant's generic Receiver), timed from the
//!    delivery to the changed ConfigMap seen by a watch; p50 and p99;
//! 6. peak resident memory (`VmHWM`) of the controller process(es), summed for Flux.
//!
//! `CDTARGET_BENCH_LOGS=DIR` keeps the controllers' logs there (with `CDTARGET_LOG_SPANS=close`
//! cdtarget's log times every step of every reconcile).
//!
//! Then it prints every figure side by side with the ratio and the goal of issue #16. Nothing is
//! asserted. Flux's controllers run with their release defaults (`--watch-all-namespaces`,
//! concurrency as compiled in) and without leader election (outside a pod controller-runtime
//! has no namespace for its Lease; cdtarget keeps its Lease, whose renewals are counted apart),
//! each with a token of a ServiceAccount bound to `cluster-admin`, which is what Flux's install
//! gives kustomize-controller (`cluster-reconciler`).

#[path = "support/args.rs"]
mod args;
#[path = "support/deployment.rs"]
mod deployment;

#[path = "../tests/common/mod.rs"]
mod common;

// Only its CDTarget documents and token name: the repositories here hold more.
#[allow(dead_code)]
#[path = "support/fleet.rs"]
mod fleet;

#[path = "support/measure.rs"]
mod measure;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cdtarget::api::CDTarget;
use cdtarget::api::keda::KedaVersion;
use cdtarget::api::keda::{ScaledObject, TriggerAuthentication};
use cdtarget::api::tenant_repository::webhook_path;
use cdtarget::render::{Scaling, SecretDigests};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};

use common::cluster::{
    CONTROLLER_USER, Controller, PLATFORM_NAMESPACE, await_established, install, keda_crds_dir, path_str,
};
use common::control_plane::AuditEvent;
use common::http_git::HttpGit;
use common::process::{find_on_path, free_port, kill_with_children, process_running, wait_until_serving};
use common::{ControlPlane, HarnessError, Upstream, skip_or_fail};
use fleet::TOKEN;
use measure::{AuditTail, counted, cpu_seconds, load_average, status_kib};

/// The tenant ServiceAccount of `examples/platform/tenant-rbac.yaml`, impersonated by both.
const TENANT_SERVICE_ACCOUNT: &str = "cdtarget-tenant";
/// The Secret holding the webhook token (cdtarget: in its namespace; Flux: in each tenant's).
const WEBHOOK_SECRET: &str = "bench-webhook";
/// The webhook token; both receivers derive the path `sha256(token + name + namespace)` from it.
const WEBHOOK_TOKEN: &str = "bench-webhook-token-4f1c2a9d7e";
/// The admission policy (and its binding) of `examples/platform/tenant-rbac.yaml` that Flux's
/// tenants cannot live with.
const AGENT_LABELS_POLICY: &str = "name: cdtarget-tenant-no-agent-labels";
/// Flux's namespace.
const FLUX_NAMESPACE: &str = "flux-system";
/// The user prefix of Flux's controllers in the audit log.
const FLUX_USERS: &str = "system:serviceaccount:flux-system:";
/// Every registration polls this rarely: only the triggered reconciles are measured.
const INTERVAL: &str = "1h";
/// The value of the reconcile request of the no-op interval.
const NO_OP_REQUEST: &str = "bench-no-op";
/// How long registration → all applied may take before the benchmark gives up.
const CONVERGE_WITHIN: Duration = Duration::from_secs(3 * 60 * 60);
/// How long the no-op interval may take before the benchmark gives up.
const NO_OP_WITHIN: Duration = Duration::from_secs(60 * 60);
/// How long one push may take to be applied before the benchmark gives up on it.
const PUSH_WITHIN: Duration = Duration::from_secs(5 * 60);
/// Silence (no request but watches and Leases) that ends a no-op window; as benches/cluster.rs
/// (3 s let a first pass's trailing CDTarget and SyncStatus writes into the no-op window).
const QUIET: Duration = Duration::from_secs(5);
/// The longest wait for that silence.
const SETTLE_AT_MOST: Duration = Duration::from_secs(60);

fn main() {
    let options = Options::parse(&env::args().skip(1).collect::<Vec<_>>());
    // Before any thread exists: cdtarget's process runs with what deploy/ gives it, as Flux's
    // run as Flux's install runs them.
    let deployment_env = deployment::deployment_env();
    deployment::set_env(&deployment_env);
    if let Err(e) = run(&options, &deployment_env) {
        eprintln!("flux bench: {e}");
        std::process::exit(1);
    }
}

/// The size of the run and which contenders run.
struct Options {
    tenants: usize,
    targets: usize,
    pushes: usize,
    only: Option<String>,
}

impl Options {
    fn parse(args: &[String]) -> Options {
        let env_num = |name: &str, default: usize| env::var(name).ok().map_or(default, |v| number(&v));
        let mut options = Options {
            tenants: env_num("CDTARGET_BENCH_TENANTS", 1_000),
            targets: env_num("CDTARGET_BENCH_TARGETS", 10),
            pushes: env_num("CDTARGET_BENCH_PUSHES", 100),
            only: None,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value"))).clone();
            match arg.as_str() {
                "--bench" => {} // passed by `cargo bench`
                "--tenants" => options.tenants = number(&value()),
                "--targets" => options.targets = number(&value()),
                "--pushes" => options.pushes = number(&value()),
                "--only" => {
                    let only = value();
                    if only != "cdtarget" && only != "flux" {
                        usage("--only takes cdtarget or flux");
                    }
                    options.only = Some(only);
                }
                other if other.starts_with('-') => usage(&format!("unknown option {other}")),
                _ => {} // a name filter given to `cargo bench`: there is only one benchmark
            }
        }
        options
    }

    fn runs(&self, contender: &str) -> bool {
        self.only.as_deref().is_none_or(|only| only == contender)
    }
}

fn number(text: &str) -> usize {
    args::positive(text).unwrap_or_else(|why| usage(&why))
}

fn usage(message: &str) -> ! {
    eprintln!(
        "flux bench: {message}\nusage: cargo bench --bench flux -- [--tenants 1000] [--targets 10] [--pushes 100] [--only cdtarget|flux]"
    );
    std::process::exit(2)
}

/// The Flux controllers and CRDs the benchmark is given.
struct Flux {
    source: PathBuf,
    kustomize: PathBuf,
    notification: PathBuf,
    crds: PathBuf,
}

impl Flux {
    /// From `FLUX_SOURCE_CONTROLLER`, `FLUX_KUSTOMIZE_CONTROLLER`, `FLUX_NOTIFICATION_CONTROLLER`
    /// and `FLUX_CRDS`; what is missing otherwise.
    fn from_env() -> Result<Flux, String> {
        let mut missing = Vec::new();
        let mut path = |name: &str, directory: bool| {
            let value =
                env::var_os(name).map(PathBuf::from).filter(|p| if directory { p.is_dir() } else { p.is_file() });
            if value.is_none() {
                missing.push(name.to_owned());
            }
            value.unwrap_or_default()
        };
        let flux = Flux {
            source: path("FLUX_SOURCE_CONTROLLER", false),
            kustomize: path("FLUX_KUSTOMIZE_CONTROLLER", false),
            notification: path("FLUX_NOTIFICATION_CONTROLLER", false),
            crds: path("FLUX_CRDS", true),
        };
        if missing.is_empty() { Ok(flux) } else { Err(missing.join(", ")) }
    }

    fn binaries(&self) -> [(&'static str, &Path); 3] {
        [
            ("source-controller", &self.source),
            ("kustomize-controller", &self.kustomize),
            ("notification-controller", &self.notification),
        ]
    }
}

// === the run ===

fn run(options: &Options, deployment_env: &[(String, String)]) -> Result<(), String> {
    let Options { tenants, targets, pushes, .. } = *options;
    println!(
        "flux bench: {tenants} tenants × {targets} CDTargets' objects, {pushes} pushes, cdtarget and Flux side by side"
    );
    println!(
        "  machine: {} CPUs, load average {}",
        thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!("  cdtarget's environment from deploy/deployment.yaml: {}", deployment::describe(deployment_env));
    let bench = "flux bench";
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
    let flux = match Flux::from_env() {
        Ok(flux) => {
            for (name, binary) in flux.binaries() {
                println!("  Flux {name}: {}", binary.display());
            }
            println!("  Flux CRDs: {}", flux.crds.display());
            Some(flux)
        }
        Err(missing) => {
            println!("  Flux is not given ({missing} unset or not found): cdtarget runs ALONE, no comparison");
            None
        }
    };

    let started = Instant::now();
    let upstream = Upstream::new();
    generate(&upstream, tenants, targets)?;
    println!("  generated {tenants} repositories in {:.1} s", started.elapsed().as_secs_f64());
    let git = HttpGit::start(&upstream.root());
    println!("  serving them over smart HTTP at {}", git.url(""));

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    if options.runs("cdtarget") {
        results.push(runtime.block_on(contender(Contender::Cdtarget, options, &upstream, &git, &keda))?);
    }
    if let Some(flux) = &flux
        && options.runs("flux")
    {
        results.push(runtime.block_on(contender(Contender::Flux(flux), options, &upstream, &git, &keda))?);
    }
    summary(options, &results);
    Ok(())
}

/// The plain manifests of tenant `i` at revision `rev`: the ConfigMap the pushes change, and a
/// Service.
fn plain_manifests(rev: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  rev: \"{rev}\"\n  log-level: info\n---\n\
         apiVersion: v1\nkind: Service\nmetadata:\n  name: agents-metrics\nspec:\n  selector:\n    app: agents\n  ports:\n    \
         - name: metrics\n      port: 9090\n"
    )
}

/// Creates `tenant-N.git` for every tenant: `deploy/` for cdtarget, `flux/` for Flux (see the
/// module documentation).
fn generate(upstream: &Upstream, tenants: usize, targets: usize) -> Result<(), String> {
    let threads = thread::available_parallelism().map_or(4, |n| n.get()).min(16);
    let policy = cdtarget::policy::Policy::default();
    thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let policy = &policy;
                scope.spawn(move || -> Result<(), String> {
                    for i in (worker..tenants).step_by(threads) {
                        let ns = format!("tenant-{i}");
                        let mut cdtargets = Vec::new();
                        let mut children = Vec::new();
                        for t in 0..targets {
                            let yaml = fleet::cdtarget_yaml(i, t, None);
                            let mut target: CDTarget =
                                serde_saphyr::from_str(&yaml).map_err(|e| format!("fleet CDTarget: {e}"))?;
                            target.metadata.namespace = Some(ns.clone());
                            let rendered = cdtarget::render::render(
                                &target,
                                policy,
                                &SecretDigests::new(),
                                Scaling::Keda(KedaVersion::NEWEST_SUPPORTED),
                            )
                            .map_err(|p| format!("rendering {ns}/agents-{t}: {p:?}"))?;
                            children.extend(rendered.iter().map(cdtarget::yaml::to_yaml));
                            cdtargets.push(yaml);
                        }
                        let plain = plain_manifests("0");
                        let cdtargets = cdtargets.join("---\n");
                        let children = children.join("---\n");
                        let files = [
                            ("deploy/settings.yaml", plain.as_str()),
                            ("deploy/agents.yaml", cdtargets.as_str()),
                            ("flux/settings.yaml", plain.as_str()),
                            ("flux/agents.yaml", children.as_str()),
                        ];
                        upstream.create(&format!("{ns}.git")).commit_and_push(&files, "tenant");
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|worker| worker.join().expect("a generating thread"))
    })
}

/// One side of the comparison.
#[derive(Clone, Copy)]
enum Contender<'a> {
    Cdtarget,
    Flux(&'a Flux),
}

impl Contender<'_> {
    fn name(&self) -> &'static str {
        match self {
            Contender::Cdtarget => "cdtarget",
            Contender::Flux(_) => "Flux",
        }
    }

    /// Whether the audit event is a request of this contender's controllers.
    fn sent(&self, event: &AuditEvent) -> bool {
        match self {
            Contender::Cdtarget => event.user == CONTROLLER_USER,
            Contender::Flux(_) => event.user.starts_with(FLUX_USERS),
        }
    }
}

/// What one contender measured.
struct Figures {
    name: &'static str,
    converge: Duration,
    /// Peak resident set (`VmHWM`) of each controller process, MiB.
    peaks: Vec<(String, f64)>,
    /// The highest sum of the processes' resident sets sampled every second, MiB.
    sampled_sum_mib: f64,
    no_op: NoOp,
    pushes: Vec<Duration>,
    failed_pushes: usize,
}

impl Figures {
    fn peak_mib(&self) -> f64 {
        self.peaks.iter().map(|(_, mib)| mib).sum()
    }
}

/// One no-op interval.
#[derive(Default)]
struct NoOp {
    wall: Duration,
    /// Requests by verb and resource (`resource/subresource`, ` as tenant` when impersonated,
    /// ` (dry run)` for dry runs).
    requests: BTreeMap<(String, String), u64>,
    git_requests: usize,
    git_bytes: u64,
    cpu: Cpu,
}

/// CPU seconds (`utime + stime`) of the contender's controllers, kube-apiserver and etcd: read
/// at a point, or spent between two.
#[derive(Clone, Copy, Default)]
struct Cpu {
    controllers: f64,
    apiserver: f64,
    etcd: f64,
}

impl Cpu {
    fn now(processes: &Processes, apiserver: u32, etcd: u32) -> Cpu {
        Cpu { controllers: processes.cpu_seconds(), apiserver: cpu_seconds(apiserver), etcd: cpu_seconds(etcd) }
    }

    /// What was spent since `before`.
    fn since(before: Cpu, processes: &Processes, apiserver: u32, etcd: u32) -> Cpu {
        let now = Cpu::now(processes, apiserver, etcd);
        Cpu {
            controllers: now.controllers - before.controllers,
            apiserver: now.apiserver - before.apiserver,
            etcd: now.etcd - before.etcd,
        }
    }
}

impl NoOp {
    fn add(&mut self, event: &AuditEvent) {
        let mut resource = if event.resource.is_empty() {
            event.uri.split('?').next().unwrap_or_default().to_owned()
        } else {
            event.full_resource()
        };
        if event.impersonated_user.is_some() {
            resource.push_str(" as tenant");
        }
        if event.is_dry_run() {
            resource.push_str(" (dry run)");
        }
        *self.requests.entry((event.verb.clone(), resource)).or_default() += 1;
    }

    fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Writes that change something: mutating verbs, dry runs, SubjectAccessReviews and Leases aside.
    fn writes(&self) -> u64 {
        self.requests
            .iter()
            .filter(|((verb, resource), _)| {
                matches!(verb.as_str(), "create" | "update" | "patch" | "delete" | "deletecollection")
                    && !resource.ends_with("(dry run)")
                    && !resource.starts_with("subjectaccessreviews")
                    && !resource.starts_with("leases")
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// The writes of a status subresource among [`NoOp::writes`]: each registration recording
    /// the reconcile request it handled (`lastHandledReconcileAt`), which both contenders do
    /// once per request, by design.
    fn status_writes(&self) -> u64 {
        self.requests
            .iter()
            .filter(|((verb, resource), _)| {
                matches!(verb.as_str(), "update" | "patch")
                    && resource.split(' ').next().is_some_and(|r| r.ends_with("/status"))
            })
            .map(|(_, n)| n)
            .sum()
    }
}

async fn contender(
    who: Contender<'_>,
    options: &Options,
    upstream: &Upstream,
    git: &HttpGit,
    keda: &Path,
) -> Result<Figures, String> {
    let name = who.name();
    println!();
    println!("== {name}: a control plane of its own");
    let bench = "flux bench";
    let Some(cluster) = skip_or_fail(bench, ControlPlane::start()) else {
        return Err("no control plane".into());
    };
    let started = Instant::now();
    match who {
        Contender::Cdtarget => {
            install(&cluster, keda);
        }
        Contender::Flux(flux) => {
            cluster.kubectl(&["apply", "--server-side", "-f", path_str(keda)]).success();
            cluster.kubectl(&["apply", "--server-side", "-f", path_str(&flux.crds)]).success();
            await_established(
                &cluster,
                &[
                    "crd/gitrepositories.source.toolkit.fluxcd.io",
                    "crd/kustomizations.kustomize.toolkit.fluxcd.io",
                    "crd/receivers.notification.toolkit.fluxcd.io",
                    "crd/scaledobjects.keda.sh",
                    "crd/triggerauthentications.keda.sh",
                ],
            );
        }
    }
    onboard(&cluster, who, options.tenants);
    println!("  installed and onboarded {} tenants in {:.1} s", options.tenants, started.elapsed().as_secs_f64());

    let client = cluster.admin_client().await;
    let pids = cluster.pids();
    let (etcd, apiserver) = (pids[0], pids[1]);
    let seen = Seen::watch(&client, who);
    let mut audit = AuditTail::at_end(cluster.audit_log());

    // The controllers, idle until the registrations arrive.
    let mut processes = Processes::start(&cluster, who).await?;
    let memory = processes.sample_memory();

    // 1. Registration → all applied.
    let cpu_before = Cpu::now(&processes, apiserver, etcd);
    let started = Instant::now();
    register(&cluster, who, git, options.tenants);
    println!(
        "  registered {} tenants ({:.1} s for the kubectl apply)",
        options.tenants,
        started.elapsed().as_secs_f64()
    );
    let expected = Expected::of(options);
    let applied = seen.until(CONVERGE_WITHIN, |seen| expected.met(seen), || processes.alive()).await;
    let converge = started.elapsed();
    if !applied {
        return Err(format!("{name}: not all applied: {}\n{}", expected.describe(&seen), processes.log_tails()));
    }
    // Who was busy: a contender bound by the API server leaves its own process mostly idle.
    let busy = Cpu::since(cpu_before, &processes, apiserver, etcd);
    println!(
        "  every object applied {:.1} s after registration; load average {}; CPU meanwhile: controller(s) {:.1} s, kube-apiserver {:.1} s, etcd {:.1} s",
        converge.as_secs_f64(),
        load_average(),
        busy.controllers,
        busy.apiserver,
        busy.etcd,
    );
    // The steady state a real cluster reaches: the agents run and KEDA reports every
    // ScaledObject Ready (the bench does the part of the controllers the control plane lacks),
    // and cdtarget's CDTargets, which wait for their agents, become Ready. Outside every
    // measured window.
    let started = Instant::now();
    let scaled = agents_run(&client).await?;
    if let Contender::Cdtarget = who {
        let wanted = options.tenants * options.targets;
        let ready = |o: &Observed| o.ready.get("CDTarget").map_or(0, HashSet::len) >= wanted;
        if !seen.until(CONVERGE_WITHIN, ready, || processes.alive()).await {
            return Err(format!("{name}: the CDTargets did not all become Ready\n{}", processes.log_tails()));
        }
    }
    println!(
        "  agents reported running ({scaled} Deployments and ScaledObjects); all Ready {:.1} s later",
        started.elapsed().as_secs_f64()
    );
    // The trailing requests of the first pass (statuses, Events) before the quiet window.
    let mut first_pass = NoOp::default();
    tokio::task::block_in_place(|| settle(&mut audit, who, &mut first_pass));
    println!(
        "  first pass (registration → Ready, trailing writes included): {} requests, {} writes",
        first_pass.total(),
        first_pass.writes()
    );
    for ((verb, resource), n) in &first_pass.requests {
        println!("      {verb:<7} {resource:<60} {n:>8}");
    }

    // 2. One no-op interval.
    let mut no_op = NoOp::default();
    let before = Cpu::now(&processes, apiserver, etcd);
    git.reset_counts();
    let window = Instant::now();
    request_reconcile(&cluster, who);
    let handled = seen.until(NO_OP_WITHIN, |seen| seen.handled_all(who, options.tenants), || processes.alive()).await;
    if !handled {
        return Err(format!("{name}: the no-op requests were not all handled\n{}", processes.log_tails()));
    }
    no_op.wall = window.elapsed();
    tokio::task::block_in_place(|| {
        audit.read_new(|event| {
            if counted(event) && who.sent(event) {
                no_op.add(event);
            }
        });
        settle(&mut audit, who, &mut no_op);
    });
    let counts = git.counts();
    (no_op.git_requests, no_op.git_bytes) = (counts.total, counts.response_bytes);
    no_op.cpu = Cpu::since(before, &processes, apiserver, etcd);
    println!(
        "  no-op interval: {:.1} s until every request was handled; {} requests, {} writes ({} of them status); Git {} requests, {} bytes",
        no_op.wall.as_secs_f64(),
        no_op.total(),
        no_op.writes(),
        no_op.status_writes(),
        no_op.git_requests,
        no_op.git_bytes
    );
    for ((verb, resource), n) in &no_op.requests {
        println!("      {verb:<7} {resource:<60} {n:>8}");
    }

    // 3. Pushes through the webhook.
    let receiver = processes.receiver_address(&cluster);
    let http = reqwest::Client::new();
    let mut pushes = Vec::new();
    let mut failed_pushes = 0;
    for k in 0..options.pushes {
        let i = (k * 7919) % options.tenants; // spread over the tenants, round robin when few
        let ns = format!("tenant-{i}");
        let rev = format!("push-{k}");
        let plain = plain_manifests(&rev);
        upstream
            .repo(&format!("{ns}.git"))
            .commit_and_push(&[("deploy/settings.yaml", plain.as_str()), ("flux/settings.yaml", plain.as_str())], &rev);
        let path = match who {
            Contender::Cdtarget => webhook_path(WEBHOOK_TOKEN, &ns, PLATFORM_NAMESPACE),
            Contender::Flux(_) => {
                let found = seen.until(Duration::from_secs(60), |s| s.webhook_paths.contains_key(&ns), || true).await;
                if !found {
                    return Err(format!("Flux: the Receiver of {ns} has no webhook path"));
                }
                seen.lock().webhook_paths[&ns].clone()
            }
        };
        let delivered = Instant::now();
        let response = http
            .post(format!("http://{receiver}{path}"))
            .header("Content-Type", "application/json")
            .header("X-Event", "push")
            .body("{}")
            .send()
            .await
            .map_err(|e| format!("{name}: webhook delivery: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{name}: the receiver answered {} to {path}", response.status()));
        }
        let applied =
            seen.until(PUSH_WITHIN, |s| s.revs.get(&ns).is_some_and(|seen| *seen == rev), || processes.alive()).await;
        if applied {
            pushes.push(delivered.elapsed());
        } else {
            failed_pushes += 1;
            eprintln!("  {name}: push {k} to {ns} not applied within {PUSH_WITHIN:?}");
        }
    }
    if !pushes.is_empty() {
        println!(
            "  push → applied through the webhook: p50 {}, p99 {} over {} pushes",
            millis(percentile(&pushes, 50.0)),
            millis(percentile(&pushes, 99.0)),
            pushes.len()
        );
    }

    // 4. Memory.
    let peaks = processes.peaks();
    let sampled_sum_mib = memory.lock().unwrap().max_sum_mib;
    for (process, mib) in &peaks {
        println!("  peak resident set of {process}: {mib:.1} MiB");
    }
    // The controllers' logs outlive the control plane's directory when asked for.
    if let Some(dir) = env::var_os("CDTARGET_BENCH_LOGS") {
        for (process, log) in processes.logs() {
            let _ = fs::copy(&log, Path::new(&dir).join(format!("{name}-{process}.log")));
        }
    }
    processes.stop();
    seen.stop();
    drop(cluster);
    Ok(Figures { name, converge, peaks, sampled_sum_mib, no_op, pushes, failed_pushes })
}

/// Does the part of kube-controller-manager's Deployment controller (not run by the test
/// suite's control plane) and of KEDA's operator (not installed): every Deployment in a tenant
/// namespace has observed its generation with its `minReplicaCount` (1) agent available, every
/// ScaledObject is `Ready`; status subresources, as the admin. How many objects were patched.
async fn agents_run(client: &Client) -> Result<usize, String> {
    let ready = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "the bench does KEDA's part"},
    ]}});
    let mut patches: Vec<futures::future::BoxFuture<'static, Result<(), String>>> = Vec::new();
    let deployments = Api::<Deployment>::all(client.clone()).list(&Default::default()).await;
    for deployment in deployments.map_err(|e| format!("listing Deployments: {e}"))?.items {
        let (Some(ns), Some(name)) =
            (tenant_namespace(deployment.metadata.namespace.as_ref()), deployment.metadata.name)
        else {
            continue;
        };
        let available = serde_json::json!({"status": {
            "observedGeneration": deployment.metadata.generation.unwrap_or(1),
            "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}],
        }});
        let api = Api::<Deployment>::namespaced(client.clone(), &ns);
        patches.push(Box::pin(async move {
            let patch = kube::api::Patch::Merge(&available);
            let done = api.patch_status(&name, &kube::api::PatchParams::default(), &patch).await;
            done.map(drop).map_err(|e| format!("Deployment {ns}/{name} available: {e}"))
        }));
    }
    let scaled_objects = Api::<ScaledObject>::all(client.clone()).list(&Default::default()).await;
    for scaled in scaled_objects.map_err(|e| format!("listing ScaledObjects: {e}"))?.items {
        let (Some(ns), Some(name)) = (tenant_namespace(scaled.metadata.namespace.as_ref()), scaled.metadata.name)
        else {
            continue;
        };
        let api = Api::<ScaledObject>::namespaced(client.clone(), &ns);
        let ready = ready.clone();
        patches.push(Box::pin(async move {
            let patch = kube::api::Patch::Merge(&ready);
            let done = api.patch_status(&name, &kube::api::PatchParams::default(), &patch).await;
            done.map(drop).map_err(|e| format!("ScaledObject {ns}/{name} Ready: {e}"))
        }));
    }
    let patched = patches.len();
    let done: Vec<Result<(), String>> = futures::stream::iter(patches).buffer_unordered(16).collect().await;
    done.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(patched)
}

/// Reads the audit log into `window` until the contender has sent nothing but watches and Lease
/// requests for [`QUIET`], at most [`SETTLE_AT_MOST`].
fn settle(audit: &mut AuditTail, who: Contender<'_>, window: &mut NoOp) {
    let started = Instant::now();
    let mut last = Instant::now();
    loop {
        let quiet_left = QUIET.saturating_sub(last.elapsed());
        let settle_left = SETTLE_AT_MOST.saturating_sub(started.elapsed());
        if quiet_left.is_zero() || settle_left.is_zero() {
            return;
        }
        let active = audit.until(quiet_left.min(settle_left), |audit| {
            let mut active = false;
            audit.read_new(|event| {
                if counted(event) && who.sent(event) {
                    window.add(event);
                    active |= event.verb != "watch" && event.resource != "leases";
                }
            });
            active
        });
        if active {
            last = Instant::now();
        }
    }
}

// === onboarding and registration ===

/// The admission policies and per-tenant objects of `examples/platform/tenant-rbac.yaml`, the
/// tenant's token Secret, and the contender's own: cdtarget's webhook Secret; Flux's namespace,
/// controller ServiceAccounts bound to cluster-admin, and per tenant a Role for the child kinds
/// and the Receiver's Secret.
fn onboard(cluster: &ControlPlane, who: Contender<'_>, tenants: usize) {
    let (tenant_documents, cluster_wide) = measure::tenant_rbac_documents();
    let dir = cluster.dir().join("onboarding");
    fs::create_dir_all(&dir).expect("onboarding directory");
    // The policy keeping `cdtarget.io/` labels off tenants' pod templates exempts only the
    // controllers; Flux writes the rendered Deployments *as the tenant*, which it refuses. Under
    // Flux a tenant can so write the labels that select a CDTarget's egress: that rule is given up.
    let cluster_wide: Vec<String> = match who {
        Contender::Cdtarget => cluster_wide,
        Contender::Flux(_) => {
            cluster_wide.into_iter().filter(|document| !document.contains(AGENT_LABELS_POLICY)).collect()
        }
    };
    let mut all = cluster_wide.join("\n---\n") + "\n---\n";
    match who {
        Contender::Cdtarget => {
            let _ = write!(
                all,
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {WEBHOOK_SECRET}\n  namespace: {PLATFORM_NAMESPACE}\nstringData:\n  token: {WEBHOOK_TOKEN}\n---\n"
            );
        }
        Contender::Flux(_) => {
            let _ = write!(all, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {FLUX_NAMESPACE}\n---\n");
            for controller in ["source-controller", "kustomize-controller", "notification-controller"] {
                let _ = write!(
                    all,
                    "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {controller}\n  namespace: {FLUX_NAMESPACE}\n---\n\
                     apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: flux-{controller}\n\
                     roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n  \
                     - kind: ServiceAccount\n    name: {controller}\n    namespace: {FLUX_NAMESPACE}\n---\n"
                );
            }
        }
    }
    for i in 0..tenants {
        let ns = format!("tenant-{i}");
        for document in &tenant_documents {
            let _ = write!(all, "{}\n---\n", document.replace("team-payments", &ns));
        }
        let _ = write!(
            all,
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {TOKEN}\n  namespace: {ns}\nstringData:\n  AZP_TOKEN: not-a-real-pat-{i}\n---\n"
        );
        if let Contender::Flux(_) = who {
            // Flux applies the rendered children as the tenant: its Role needs the three kinds
            // cdtarget writes as itself (NetworkPolicies are what a tenant of cdtarget never gets).
            let _ = write!(
                all,
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: flux-children\n  namespace: {ns}\nrules:\n  \
                 - apiGroups: [\"networking.k8s.io\"]\n    resources: [\"networkpolicies\"]\n    verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]\n  \
                 - apiGroups: [\"keda.sh\"]\n    resources: [\"scaledobjects\", \"triggerauthentications\"]\n    verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: flux-children\n  namespace: {ns}\n\
                 roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: flux-children\nsubjects:\n  \
                 - kind: ServiceAccount\n    name: {TENANT_SERVICE_ACCOUNT}\n    namespace: {ns}\n---\n\
                 apiVersion: v1\nkind: Secret\nmetadata:\n  name: {WEBHOOK_SECRET}\n  namespace: {ns}\nstringData:\n  token: {WEBHOOK_TOKEN}\n---\n"
            );
        }
    }
    let file = dir.join("tenants.yaml");
    fs::write(&file, all).expect("write the onboarding");
    cluster.kubectl(&["apply", "--server-side", "-f", path_str(&file)]).success();
}

/// Registers every tenant with one `kubectl apply --server-side`.
fn register(cluster: &ControlPlane, who: Contender<'_>, git: &HttpGit, tenants: usize) {
    let mut all = String::new();
    for i in 0..tenants {
        let ns = format!("tenant-{i}");
        let url = git.url(&format!("{ns}.git"));
        let _ = match who {
            Contender::Cdtarget => write!(
                all,
                "apiVersion: cdtarget.io/v1alpha1\nkind: TenantRepository\nmetadata:\n  name: {ns}\n  namespace: {PLATFORM_NAMESPACE}\nspec:\n  \
                 url: {url}\n  ref:\n    branch: main\n  path: deploy\n  interval: {INTERVAL}\n  targetNamespace: {ns}\n  \
                 serviceAccountName: {TENANT_SERVICE_ACCOUNT}\n  prune: true\n  webhook:\n    type: generic\n    secretRef:\n      name: {WEBHOOK_SECRET}\n---\n"
            ),
            Contender::Flux(_) => write!(
                all,
                "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: {ns}\n  namespace: {ns}\nspec:\n  \
                 url: {url}\n  ref:\n    branch: main\n  interval: {INTERVAL}\n---\n\
                 apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {ns}\n  namespace: {ns}\nspec:\n  \
                 interval: {INTERVAL}\n  sourceRef:\n    kind: GitRepository\n    name: {ns}\n  path: ./flux\n  prune: true\n  \
                 targetNamespace: {ns}\n  serviceAccountName: {TENANT_SERVICE_ACCOUNT}\n---\n\
                 apiVersion: notification.toolkit.fluxcd.io/v1\nkind: Receiver\nmetadata:\n  name: {ns}\n  namespace: {ns}\nspec:\n  \
                 type: generic\n  secretRef:\n    name: {WEBHOOK_SECRET}\n  resources:\n    - apiVersion: source.toolkit.fluxcd.io/v1\n      \
                 kind: GitRepository\n      name: {ns}\n---\n"
            ),
        };
    }
    let file = cluster.dir().join("onboarding/registrations.yaml");
    fs::write(&file, all).expect("write the registrations");
    cluster.kubectl(&["apply", "--server-side", "-f", path_str(&file)]).success();
}

/// Asks every registration to reconcile now (one interval's worth of work, nothing changed).
fn request_reconcile(cluster: &ControlPlane, who: Contender<'_>) {
    match who {
        Contender::Cdtarget => {
            let request = format!("cdtarget.io/requestedAt={NO_OP_REQUEST}");
            cluster
                .kubectl(&[
                    "annotate",
                    "tenantrepositories",
                    "--all",
                    "-n",
                    PLATFORM_NAMESPACE,
                    &request,
                    "--overwrite",
                ])
                .success();
        }
        Contender::Flux(_) => {
            let request = format!("reconcile.fluxcd.io/requestedAt={NO_OP_REQUEST}");
            cluster
                .kubectl(&["annotate", "gitrepositories,kustomizations", "--all", "-A", &request, "--overwrite"])
                .success();
        }
    }
}

// === the controllers as processes ===

/// The contender's controller processes.
struct Processes {
    cdtarget: Option<Controller>,
    flux: Vec<(String, Child, PathBuf)>,
    /// notification-controller's receiver address.
    flux_receiver: Option<std::net::SocketAddr>,
    /// The memory sampler, stopped with the processes.
    sampler: Option<tokio::task::AbortHandle>,
}

/// The highest sum of the processes' resident sets, sampled every second.
#[derive(Default)]
struct Memory {
    max_sum_mib: f64,
}

impl Processes {
    async fn start(cluster: &ControlPlane, who: Contender<'_>) -> Result<Processes, String> {
        match who {
            Contender::Cdtarget => {
                let controller = Controller::start(cluster, "cdtarget-flux-bench", &[]).await;
                let _ = controller.metrics_address(); // serving: the log says so
                println!("  cdtarget controller started (pid {})", controller.pid());
                Ok(Processes { cdtarget: Some(controller), flux: Vec::new(), flux_receiver: None, sampler: None })
            }
            Contender::Flux(flux) => {
                let dir = cluster.dir().join("flux");
                fs::create_dir_all(dir.join("storage")).map_err(|e| e.to_string())?;
                let mut processes = Processes { cdtarget: None, flux: Vec::new(), flux_receiver: None, sampler: None };
                for (name, binary) in flux.binaries() {
                    let kubeconfig = cluster.service_account_kubeconfig(FLUX_NAMESPACE, name).await;
                    let health = free_port();
                    let mut args = vec![
                        "--watch-all-namespaces".to_owned(),
                        "--log-level=info".to_owned(),
                        "--log-encoding=json".to_owned(),
                        format!("--metrics-addr=127.0.0.1:{}", free_port()),
                        format!("--health-addr=127.0.0.1:{health}"),
                    ];
                    match name {
                        "source-controller" => {
                            let storage = free_port();
                            args.push(format!("--storage-path={}", dir.join("storage").display()));
                            args.push(format!("--storage-addr=127.0.0.1:{storage}"));
                            args.push(format!("--storage-adv-addr=127.0.0.1:{storage}"));
                        }
                        "notification-controller" => {
                            let receiver = free_port();
                            args.push(format!("--receiverAddr=127.0.0.1:{receiver}"));
                            args.push(format!("--events-addr=127.0.0.1:{}", free_port()));
                            processes.flux_receiver = Some(common::process::loopback(receiver));
                        }
                        _ => {}
                    }
                    let log = dir.join(format!("{name}.log"));
                    let out = fs::File::create(&log).map_err(|e| e.to_string())?;
                    let child = Command::new(binary)
                        .args(&args)
                        .env("KUBECONFIG", &kubeconfig)
                        .env("RUNTIME_NAMESPACE", FLUX_NAMESPACE)
                        .env("TUF_ROOT", dir.join("sigstore"))
                        .stdin(Stdio::null())
                        .stdout(out.try_clone().map_err(|e| e.to_string())?)
                        .stderr(out)
                        .spawn()
                        .map_err(|e| format!("starting {}: {e}", binary.display()))?;
                    println!("  Flux {name} started (pid {})", child.id());
                    let pid = child.id();
                    processes.flux.push((name.to_owned(), child, log));
                    tokio::task::block_in_place(|| {
                        wait_until_serving(health, Duration::from_secs(120), answers_ready, || process_running(pid))
                    })
                    .map_err(|why| format!("Flux {name}: {why}\n{}", processes.log_tails()))?;
                }
                Ok(processes)
            }
        }
    }

    /// Each process's name and log file.
    fn logs(&self) -> Vec<(String, PathBuf)> {
        let mut logs: Vec<(String, PathBuf)> = self.flux.iter().map(|(n, _, l)| (n.clone(), l.clone())).collect();
        if let Some(c) = &self.cdtarget {
            logs.push(("controller".into(), c.log().to_path_buf()));
        }
        logs
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.cdtarget.iter().map(Controller::pid).collect();
        pids.extend(self.flux.iter().map(|(_, child, _)| child.id()));
        pids
    }

    fn alive(&self) -> bool {
        self.pids().into_iter().all(process_running)
    }

    fn cpu_seconds(&self) -> f64 {
        self.pids().into_iter().map(cpu_seconds).sum()
    }

    fn peaks(&self) -> Vec<(String, f64)> {
        let names: Vec<String> = match &self.cdtarget {
            Some(_) => vec!["cdtarget controller".into()],
            None => self.flux.iter().map(|(name, _, _)| name.clone()).collect(),
        };
        names
            .into_iter()
            .zip(self.pids())
            .map(|(name, pid)| {
                let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                (name, status_kib(&status, "VmHWM:").unwrap_or(0.0) / 1024.0)
            })
            .collect()
    }

    /// Samples the sum of the processes' `VmRSS` every second (a sampling period, not a wait).
    fn sample_memory(&mut self) -> Arc<Mutex<Memory>> {
        let memory = Arc::new(Mutex::new(Memory::default()));
        let pids = self.pids();
        let shared = memory.clone();
        let sampler = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                let sum: f64 = pids
                    .iter()
                    .map(|pid| {
                        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                        status_kib(&status, "VmRSS:").unwrap_or(0.0) / 1024.0
                    })
                    .sum();
                let mut memory = shared.lock().unwrap();
                memory.max_sum_mib = memory.max_sum_mib.max(sum);
            }
        });
        self.sampler = Some(sampler.abort_handle());
        memory
    }

    fn receiver_address(&self, _cluster: &ControlPlane) -> std::net::SocketAddr {
        match &self.cdtarget {
            Some(controller) => controller.webhook_address(),
            None => self.flux_receiver.expect("notification-controller's receiver"),
        }
    }

    fn log_tails(&self) -> String {
        let mut logs: Vec<PathBuf> = self.cdtarget.iter().map(|c| c.log().to_path_buf()).collect();
        logs.extend(self.flux.iter().map(|(_, _, log)| log.clone()));
        let mut out = String::new();
        for log in logs {
            let text = fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let _ = write!(
                out,
                "--- {} (last 20 lines):\n{}\n",
                log.display(),
                lines[lines.len().saturating_sub(20)..].join("\n")
            );
        }
        out
    }

    fn stop(&mut self) {
        if let Some(sampler) = self.sampler.take() {
            sampler.abort();
        }
        if let Some(controller) = &mut self.cdtarget {
            controller.kill();
        }
        for (_, child, _) in &mut self.flux {
            kill_with_children(child);
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether the controller on `stream` answers `GET /readyz` with 200 (controller-runtime's
/// readiness), for [`wait_until_serving`].
fn answers_ready(stream: &mut std::net::TcpStream) -> bool {
    use std::io::{Read as _, Write as _};
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 16];
    let read = stream.read(&mut head).unwrap_or(0);
    // "HTTP/1.x 200 ..."
    head[..read].get(9..12) == Some(b"200")
}

// === what the watches see ===

/// What the admin's watches saw in the tenant namespaces.
#[derive(Default)]
struct Observed {
    /// Objects by kind, (namespace, name).
    objects: HashMap<&'static str, HashSet<(String, String)>>,
    /// `data.rev` of each tenant's `settings` ConfigMap, by namespace.
    revs: HashMap<String, String>,
    /// `status.lastHandledReconcileAt` by (kind, namespace, name).
    handled: HashMap<(&'static str, String, String), String>,
    /// `status.webhookPath` of Flux's Receivers, by namespace.
    webhook_paths: HashMap<String, String>,
    /// (namespace, name) of the objects whose `Ready` condition is `True`, by kind.
    ready: HashMap<&'static str, HashSet<(String, String)>>,
}

impl Observed {
    fn count(&self, kind: &str) -> usize {
        self.objects.get(kind).map_or(0, HashSet::len)
    }

    fn handled_all(&self, who: Contender<'_>, tenants: usize) -> bool {
        let handled = |kind: &str| {
            self.handled.iter().filter(|((k, _, _), value)| *k == kind && *value == NO_OP_REQUEST).count() >= tenants
        };
        match who {
            Contender::Cdtarget => handled("TenantRepository"),
            Contender::Flux(_) => handled("GitRepository") && handled("Kustomization"),
        }
    }
}

/// The admin's watches and what they saw, with a wake-up on every change.
struct Seen {
    observed: Mutex<Observed>,
    changed: tokio::sync::Notify,
    /// The watch tasks, stopped with [`Seen::stop`] before their control plane goes.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// The child kinds both contenders write, and the plain Service.
const CHILD_KINDS: [&str; 5] = ["NetworkPolicy", "Deployment", "ScaledObject", "TriggerAuthentication", "Service"];

impl Seen {
    fn watch(client: &Client, who: Contender<'_>) -> Arc<Seen> {
        let seen = Arc::new(Seen {
            observed: Mutex::new(Observed::default()),
            changed: tokio::sync::Notify::new(),
            tasks: Mutex::new(Vec::new()),
        });
        spawn_metadata::<NetworkPolicy>(client, &seen, "NetworkPolicy");
        spawn_metadata::<Deployment>(client, &seen, "Deployment");
        spawn_metadata::<ScaledObject>(client, &seen, "ScaledObject");
        spawn_metadata::<TriggerAuthentication>(client, &seen, "TriggerAuthentication");
        spawn_metadata::<Service>(client, &seen, "Service");
        spawn_settings(client, &seen);
        let statuses: &[(&str, &str, &str, &str)] = match who {
            Contender::Cdtarget => &[
                ("cdtarget.io", "v1alpha1", "TenantRepository", "tenantrepositories"),
                ("cdtarget.io", "v1alpha1", "CDTarget", "cdtargets"),
            ],
            Contender::Flux(_) => &[
                ("source.toolkit.fluxcd.io", "v1", "GitRepository", "gitrepositories"),
                ("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations"),
                ("notification.toolkit.fluxcd.io", "v1", "Receiver", "receivers"),
            ],
        };
        for &(group, version, kind, plural) in statuses {
            spawn_status(client, &seen, group, version, kind, plural);
        }
        seen
    }

    /// Stops the watches.
    fn stop(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.observed.lock().unwrap()
    }

    /// Waits until `done` holds (woken by every change, no polling), at most `within`, while
    /// `alive` says the controllers run; whether it held.
    async fn until(&self, within: Duration, done: impl Fn(&Observed) -> bool, alive: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(&self.lock()) {
                return true;
            }
            if !alive() {
                eprintln!("  a controller process exited");
                return false;
            }
            // Woken by a change; the second bound notices a controller that died meanwhile.
            let wake = deadline.min(tokio::time::Instant::now() + Duration::from_secs(5));
            if tokio::time::timeout_at(wake, notified).await.is_err() && tokio::time::Instant::now() >= deadline {
                return false;
            }
        }
    }

    fn changed(&self, change: impl FnOnce(&mut Observed)) {
        change(&mut self.lock());
        self.changed.notify_waiters();
    }
}

fn tenant_namespace(namespace: Option<&String>) -> Option<String> {
    namespace.filter(|ns| ns.starts_with("tenant-")).cloned()
}

fn spawn_metadata<K>(client: &Client, seen: &Arc<Seen>, kind: &'static str)
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let api = Api::<PartialObjectMeta<K>>::all(client.clone());
    let seen = seen.clone();
    let tasks = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let (object, present) = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, true),
                Ok(watcher::Event::Delete(o)) => (o, false),
                _ => continue,
            };
            let Some(ns) = tenant_namespace(object.metadata.namespace.as_ref()) else { continue };
            let key = (ns, object.metadata.name.clone().unwrap_or_default());
            seen.changed(|o| {
                let set = o.objects.entry(kind).or_default();
                if present {
                    set.insert(key);
                } else {
                    set.remove(&key);
                }
            });
        }
    });
    tasks.tasks.lock().unwrap().push(task.abort_handle());
}

fn spawn_settings(client: &Client, seen: &Arc<Seen>) {
    let api = Api::<ConfigMap>::all(client.clone());
    let seen = seen.clone();
    let tasks = seen.clone();
    let task = tokio::spawn(async move {
        let config = watcher::Config::default().fields("metadata.name=settings");
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let Ok(watcher::Event::Apply(map) | watcher::Event::InitApply(map)) = event else { continue };
            let Some(ns) = tenant_namespace(map.metadata.namespace.as_ref()) else { continue };
            let rev = map.data.as_ref().and_then(|d| d.get("rev")).cloned().unwrap_or_default();
            seen.changed(|o| {
                o.objects.entry("ConfigMap").or_default().insert((ns.clone(), "settings".into()));
                o.revs.insert(ns, rev);
            });
        }
    });
    tasks.tasks.lock().unwrap().push(task.abort_handle());
}

fn spawn_status(client: &Client, seen: &Arc<Seen>, group: &str, version: &str, kind: &'static str, plural: &str) {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let seen = seen.clone();
    let tasks = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) = event else { continue };
            let ns = object.metadata.namespace.clone().unwrap_or_default();
            let name = object.metadata.name.clone().unwrap_or_default();
            let status = &object.data["status"];
            let handled = status["lastHandledReconcileAt"].as_str().map(str::to_owned);
            let path = status["webhookPath"].as_str().map(str::to_owned);
            let ready = status["conditions"]
                .as_array()
                .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
            seen.changed(|o| {
                let readies = o.ready.entry(kind).or_default();
                if ready {
                    readies.insert((ns.clone(), name.clone()));
                } else {
                    readies.remove(&(ns.clone(), name.clone()));
                }
                if let Some(handled) = handled {
                    o.handled.insert((kind, ns.clone(), name), handled);
                }
                if let Some(path) = path {
                    o.webhook_paths.insert(ns, path);
                }
            });
        }
    });
    tasks.tasks.lock().unwrap().push(task.abort_handle());
}

/// What "all applied" means: every child of every CDTarget, and each tenant's plain manifests.
struct Expected {
    children: usize,
    tenants: usize,
}

impl Expected {
    fn of(options: &Options) -> Expected {
        Expected { children: options.tenants * options.targets, tenants: options.tenants }
    }

    fn wanted(&self, kind: &str) -> usize {
        if kind == "Service" || kind == "ConfigMap" { self.tenants } else { self.children }
    }

    fn met(&self, observed: &Observed) -> bool {
        CHILD_KINDS.iter().chain(&["ConfigMap"]).all(|kind| observed.count(kind) >= self.wanted(kind))
    }

    fn describe(&self, seen: &Seen) -> String {
        let observed = seen.lock();
        let counts: Vec<String> = CHILD_KINDS
            .iter()
            .chain(&["ConfigMap"])
            .map(|kind| format!("{kind} {} of {}", observed.count(kind), self.wanted(kind)))
            .collect();
        counts.join(", ")
    }
}

// === the summary ===

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn millis(duration: Duration) -> String {
    format!("{:.0} ms", duration.as_secs_f64() * 1000.0)
}

fn summary(options: &Options, results: &[Figures]) {
    println!();
    println!(
        "summary: {} tenants × {} CDTargets' objects, {} pushes; load average now {}",
        options.tenants,
        options.targets,
        options.pushes,
        load_average()
    );
    for figures in results {
        let peaks: Vec<String> = figures.peaks.iter().map(|(name, mib)| format!("{name} {mib:.1} MiB")).collect();
        println!(
            "  {}: peaks {}; highest sampled sum {:.1} MiB; pushes not applied {}",
            figures.name,
            peaks.join(", "),
            figures.sampled_sum_mib,
            figures.failed_pushes
        );
    }
    let (Some(ours), Some(theirs)) =
        (results.iter().find(|f| f.name == "cdtarget"), results.iter().find(|f| f.name == "Flux"))
    else {
        println!("  (one contender only: no ratios)");
        for figures in results {
            print_alone(figures);
        }
        return;
    };
    println!();
    println!("  {:<58} {:>14} {:>14} {:>9}  goal", "figure", "cdtarget", "Flux", "ratio");
    let row = |figure: &str, ours: f64, theirs: f64, unit: &str, goal: &str, met: bool| {
        let ratio = if ours > 0.0 { format!("{:.2}x", theirs / ours) } else { "-".into() };
        println!(
            "  {figure:<58} {:>14} {:>14} {ratio:>9}  {goal}: {}",
            format!("{ours:.1} {unit}"),
            format!("{theirs:.1} {unit}"),
            if met { "met" } else { "NOT met" }
        );
    };
    let (a, b) = (ours.converge.as_secs_f64(), theirs.converge.as_secs_f64());
    row("registration of all → all applied", a, b, "s", "≥ 5x faster", b >= 5.0 * a);
    let (a, b) = (ours.peak_mib(), theirs.peak_mib());
    row("peak resident memory of the controller process(es)", a, b, "MiB", "≤ 1/3 of Flux's", a * 3.0 <= b);
    let (a, b) = (ours.no_op.total() as f64, theirs.no_op.total() as f64);
    row("API requests in one no-op interval", a, b, "", "≤ 1/2", a * 2.0 <= b);
    let (a, b) = (ours.no_op.writes() as f64, theirs.no_op.writes() as f64);
    row("API writes in one no-op interval (all)", a, b, "", "(printed)", true);
    let (a, b) = (
        (ours.no_op.writes() - ours.no_op.status_writes()) as f64,
        (theirs.no_op.writes() - theirs.no_op.status_writes()) as f64,
    );
    row("API writes in one no-op interval, status of the request aside", a, b, "", "0", a == 0.0);
    let (a, b) = (ours.no_op.git_requests as f64, theirs.no_op.git_requests as f64);
    row("Git requests in one no-op interval", a, b, "", "≤ Flux's", a <= b);
    let (a, b) = (ours.no_op.git_bytes as f64 / 1024.0, theirs.no_op.git_bytes as f64 / 1024.0);
    row("Git bytes served in one no-op interval", a, b, "KiB", "≤ Flux's", a <= b);
    if !ours.pushes.is_empty() && !theirs.pushes.is_empty() {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (a, b) = (ms(percentile(&ours.pushes, 50.0)), ms(percentile(&theirs.pushes, 50.0)));
        row("push → applied through the webhook, p50", a, b, "ms", "≥ 3x better", b >= 3.0 * a);
        let (a, b) = (ms(percentile(&ours.pushes, 99.0)), ms(percentile(&theirs.pushes, 99.0)));
        row(
            "push → applied through the webhook, p99",
            a,
            b,
            "ms",
            "≤ 1 s and ≥ 3x better",
            a <= 1000.0 && b >= 3.0 * a,
        );
    }
    let (a, b) = (ours.no_op.cpu.controllers, theirs.no_op.cpu.controllers);
    row("CPU of the controller(s) in the no-op interval", a, b, "s", "lower", a < b);
    let (a, b) = (ours.no_op.cpu.apiserver, theirs.no_op.cpu.apiserver);
    row("CPU of kube-apiserver in the no-op interval", a, b, "s", "lower", a < b);
    let (a, b) = (ours.no_op.cpu.etcd, theirs.no_op.cpu.etcd);
    row("CPU of etcd in the no-op interval", a, b, "s", "(printed, no goal)", true);
    let (a, b) = (ours.no_op.wall.as_secs_f64(), theirs.no_op.wall.as_secs_f64());
    row("no-op interval: request → all handled", a, b, "s", "(printed, no goal)", true);
}

fn print_alone(figures: &Figures) {
    println!("  {}: all applied {:.1} s after registration", figures.name, figures.converge.as_secs_f64());
    println!("    peak memory {:.1} MiB", figures.peak_mib());
    println!(
        "    no-op interval: {} requests, {} writes, Git {} requests {} bytes, CPU controller(s) {:.2} s, kube-apiserver {:.2} s",
        figures.no_op.total(),
        figures.no_op.writes(),
        figures.no_op.git_requests,
        figures.no_op.git_bytes,
        figures.no_op.cpu.controllers,
        figures.no_op.cpu.apiserver
    );
    if !figures.pushes.is_empty() {
        println!(
            "    push → applied: p50 {}, p99 {}",
            millis(percentile(&figures.pushes, 50.0)),
            millis(percentile(&figures.pushes, 99.0))
        );
    }
}
