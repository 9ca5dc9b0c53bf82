//! Controller benchmark: one full reconcile pass over many TenantRepositories, each holding
//! several CDTargets, then a second pass over the unchanged set (the no-op cycle).
//!
//! ```text
//! cargo bench --bench controller                                  # 1,000 registrations × 10 CDTargets
//! cargo bench --bench controller -- --registrations 100 --targets 10 --concurrency 16
//! CDTARGET_BENCH_REGISTRATIONS=100 cargo bench --bench controller
//! ```
//!
//! The benchmark process generates the repositories (through the harness of `tests/common`) and
//! serves them with a `git://` daemon on 127.0.0.1. The controller side runs in a child process
//! (this binary re-executed with a hidden argument), reaped with `wait4(2)`, so that `ru_maxrss`
//! is that child's peak resident set alone. The child builds one `kube-fake-client` cluster with
//! cdtarget's and KEDA's kinds, creates the registrations (platform namespace) and one token
//! Secret per tenant namespace, and runs two passes of:
//!
//! 1. `tenant_repository::reconcile` for every registration (fetch, load, server-side apply of
//!    the CDTargets into the tenant namespace, status), `--concurrency` at a time;
//! 2. `cdtarget::reconcile` for every CDTarget now in the cluster (render, apply the four
//!    children, status), `--concurrency` at a time.
//!
//! The fake's interceptor counts every API request by verb. The reconcilers are handed the
//! objects from a list made before each phase (standing for the watch cache); that list is not
//! counted. The fake API server lives inside the child, so its stored objects count in the peak
//! memory reported (a real controller would hold a watch cache of them instead). Nothing here
//! asserts on time; it prints the numbers and the goals.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::io::{self, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use cdtarget::api::CDTarget;
use cdtarget::api::keda::{ScaledObject, TriggerAuthentication};
use cdtarget::api::tenant_repository::{TenantRepository, TenantRepositorySpec};
use cdtarget::controller::{cdtarget as cdtarget_controller, tenant_repository};
use cdtarget::manifests;
use cdtarget::source::{Fetcher, Limits};
use futures::{StreamExt as _, stream};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube_fake_client::{ClientBuilder, interceptor};

use common::{GitDaemon, Upstream};

/// The hidden argument under which this binary is the controller side:
/// `__controller BASE_URL REGISTRATIONS TARGETS CONCURRENCY CACHE_DIR`.
const CONTROLLER_ARG: &str = "__controller";
/// The controller's namespace: registrations and the (absent, so default) policy.
const PLATFORM: &str = "cdtarget-system";
/// The policy ConfigMap's name (not created: the default policy applies).
const POLICY: &str = "cdtarget-policy";
/// The ServiceAccount every registration impersonates.
const SERVICE_ACCOUNT: &str = "deployer";
/// The token Secret every CDTarget references.
const TOKEN: &str = "azp-token";
/// CDTarget documents per file in a generated repository.
const DOCS_PER_FILE: usize = 5;
/// Peak memory goal of the issue, MiB.
const MEMORY_GOAL_MIB: f64 = 150.0;

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(CONTROLLER_ARG) {
        let [base, registrations, targets, concurrency, cache] = &args[1..] else {
            usage("usage: __controller BASE_URL REGISTRATIONS TARGETS CONCURRENCY CACHE_DIR")
        };
        let shape = Shape { registrations: number(registrations), targets: number(targets) };
        controller_side(base, shape, number(concurrency), Path::new(cache));
        return;
    }
    let options = Options::parse(&args);
    if let Err(e) = run(&options) {
        eprintln!("controller bench: {e}");
        std::process::exit(1);
    }
}

/// The size of the fleet.
#[derive(Clone, Copy)]
struct Shape {
    registrations: usize,
    targets: usize,
}

struct Options {
    shape: Shape,
    concurrency: usize,
}

impl Options {
    fn parse(args: &[String]) -> Options {
        let env_num = |name: &str, default: usize| env::var(name).ok().map_or(default, |v| number(&v));
        let mut registrations = env_num("CDTARGET_BENCH_REGISTRATIONS", 1_000);
        let mut targets = env_num("CDTARGET_BENCH_TARGETS", 10);
        let mut concurrency = env_num("CDTARGET_BENCH_CONCURRENCY", 16);
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value"))).clone();
            match arg.as_str() {
                "--bench" => {} // passed by `cargo bench`
                "--registrations" => registrations = number(&value()),
                "--targets" => targets = number(&value()),
                "--concurrency" => concurrency = number(&value()),
                other if other.starts_with('-') => usage(&format!("unknown option {other}")),
                _ => {} // a name filter given to `cargo bench`: there is only one benchmark
            }
        }
        Options { shape: Shape { registrations, targets }, concurrency }
    }
}

fn number(text: &str) -> usize {
    text.trim()
        .replace('_', "")
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or_else(|| usage(&format!("`{text}` is not a positive number (write 1000 or 1_000)")))
}

fn usage(message: &str) -> ! {
    eprintln!(
        "controller bench: {message}\n\
         usage: cargo bench --bench controller -- [--registrations 1000] [--targets 10] [--concurrency 16]"
    );
    std::process::exit(2)
}

// === the benchmark process ===

fn run(options: &Options) -> io::Result<()> {
    let Shape { registrations, targets } = options.shape;
    println!(
        "controller bench: {registrations} registrations × {targets} CDTargets, concurrency {}",
        options.concurrency
    );
    let started = Instant::now();
    let upstream = Upstream::new();
    generate(&upstream, options.shape);
    println!("  generated {registrations} repositories in {:.1?}", started.elapsed());
    let daemon = GitDaemon::start(&upstream.root());
    let cache = common::test_dir();
    let base = daemon.url("");

    let mut command = Command::new(env::current_exe()?);
    command
        .arg(CONTROLLER_ARG)
        .arg(&base)
        .arg(registrations.to_string())
        .arg(targets.to_string())
        .arg(options.concurrency.to_string())
        .arg(cache.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = command.spawn()?;
    let mut stdout = child.stdout.take().expect("piped");
    let out = thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let (status, usage) = wait4(child.id() as libc::pid_t)?;
    // `child` was reaped by wait4; dropping it neither waits nor kills.
    drop(child);
    let text = out.join().expect("stdout thread");
    print!("{text}");
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(io::Error::other(format!("the controller side failed (wait status {status})")));
    }
    // Linux reports ru_maxrss in KiB.
    let peak_mib = usage.ru_maxrss as f64 / 1024.0;
    let verdict = if peak_mib <= MEMORY_GOAL_MIB { "met" } else { "NOT met" };
    println!("  peak RSS of the controller process: {peak_mib:.1} MiB (goal ≤ {MEMORY_GOAL_MIB} MiB: {verdict})");
    println!("  git daemon connections: {}", daemon.connections());
    Ok(())
}

/// Creates `registrations` repositories `tenant-N.git`, each with `targets` CDTargets in files of
/// [`DOCS_PER_FILE`] documents under `deploy/`, on as many threads as there are CPUs.
fn generate(upstream: &Upstream, shape: Shape) {
    let threads = thread::available_parallelism().map_or(4, |n| n.get()).min(16);
    thread::scope(|scope| {
        for worker in 0..threads {
            scope.spawn(move || {
                for i in (worker..shape.registrations).step_by(threads) {
                    let repo = upstream.create(&format!("tenant-{i}.git"));
                    let files: Vec<(String, String)> = (0..shape.targets)
                        .collect::<Vec<_>>()
                        .chunks(DOCS_PER_FILE)
                        .enumerate()
                        .map(|(file, chunk)| {
                            let docs: Vec<String> = chunk.iter().map(|&t| cdtarget_yaml(i, t)).collect();
                            (format!("deploy/agents-{file}.yaml"), docs.join("---\n"))
                        })
                        .collect();
                    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
                    repo.commit_and_push(&files, "agents");
                }
            });
        }
    });
}

/// A CDTarget valid under the default policy.
fn cdtarget_yaml(repo: usize, target: usize) -> String {
    let ip = format!("10.{}.{}.{}", repo / 250 % 250, repo % 250, target % 250 + 1);
    format!(
        "apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: agents-{target}\nspec:\n  \
         ip: [\"{ip}\", \"192.168.{}.0/24\"]\n  agentImage: ghcr.io/acme/azp-agent:1\n  tokenRef: {TOKEN}\n  \
         minReplicaCount: 1\n  maxReplicaCount: 5\n  config:\n    url: https://dev.azure.com/acme\n    \
         poolName: pool-{target}\n",
        target % 250
    )
}

fn wait4(pid: libc::pid_t) -> io::Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain old data, and wait4 only writes to the two pointers it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: as above; `pid` is our own unreaped child.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            return Ok((status, usage));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

// === the controller side (child process) ===

/// The verbs counted.
const VERBS: [&str; 8] = ["create", "patch", "patch_status", "delete", "update", "replace", "get", "list"];
/// The verbs that change the cluster.
const MUTATING: [&str; 6] = ["create", "patch", "patch_status", "delete", "update", "replace"];

/// Requests seen by the fake, by verb (index into [`VERBS`]).
#[derive(Clone, Default)]
struct Counters(Arc<[AtomicU64; VERBS.len()]>);

impl Counters {
    fn hit(&self, verb: &str) {
        let index = VERBS.iter().position(|v| *v == verb).expect("a counted verb");
        self.0[index].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        VERBS.iter().zip(self.0.iter()).map(|(verb, n)| (*verb, n.load(Ordering::Relaxed))).collect()
    }
}

/// Requests by verb between two snapshots.
fn since(before: &BTreeMap<&'static str, u64>, after: &BTreeMap<&'static str, u64>) -> BTreeMap<&'static str, u64> {
    after.iter().map(|(verb, n)| (*verb, n - before[verb])).collect()
}

fn funcs(counters: &Counters) -> interceptor::Funcs {
    let c = |c: &Counters| c.clone();
    let (create, patch, status, delete) = (c(counters), c(counters), c(counters), c(counters));
    let (update, replace, get, list) = (c(counters), c(counters), c(counters), c(counters));
    interceptor::Funcs::new()
        .create(move |_| {
            create.hit("create");
            Ok(None)
        })
        .patch(move |_| {
            patch.hit("patch");
            Ok(None)
        })
        .patch_status(move |_| {
            status.hit("patch_status");
            Ok(None)
        })
        .delete(move |_| {
            delete.hit("delete");
            Ok(None)
        })
        .update(move |_| {
            update.hit("update");
            Ok(None)
        })
        .replace(move |_| {
            replace.hit("replace");
            Ok(None)
        })
        .get(move |_| {
            get.hit("get");
            Ok(None)
        })
        .list(move |_| {
            list.hit("list");
            Ok(None)
        })
}

fn controller_side(base: &str, shape: Shape, concurrency: usize, cache: &Path) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let counters = Counters::default();
        let client = ClientBuilder::new()
            .with_resource::<CDTarget>()
            .with_status_subresource::<CDTarget>()
            .with_resource::<TenantRepository>()
            .with_status_subresource::<TenantRepository>()
            .with_resource::<ScaledObject>()
            .with_resource::<TriggerAuthentication>()
            .with_interceptor_funcs(funcs(&counters))
            .build()
            .await
            .expect("fake client");
        setup(&client, base, shape).await;

        let tenant_ctx = Arc::new(tenant_repository::Context {
            client: client.clone(),
            client_for: {
                let client = client.clone();
                Arc::new(move |_user: &str| Ok(client.clone()))
            },
            fetcher: Fetcher::new(cache.to_path_buf(), Limits::default(), concurrency),
            policy_namespace: PLATFORM.into(),
            policy_name: POLICY.into(),
            manifest_limits: manifests::Limits::default(),
            recorder: None,
            observer: None,
        });
        let target_ctx = Arc::new(cdtarget_controller::Context {
            client: client.clone(),
            policy_namespace: PLATFORM.into(),
            policy_name: POLICY.into(),
            keda: cdtarget_controller::Keda::new(true),
            recorder: None,
        });

        let mut report = String::new();
        let _ = writeln!(report, "  after setup (fake cluster holds the registrations and Secrets): {}", memory());
        for pass in ["first pass", "no-op pass"] {
            let registrations = pass_registrations(&client, &tenant_ctx, &counters, concurrency).await;
            let targets = pass_targets(&client, &target_ctx, &counters, concurrency).await;
            describe(&mut report, pass, shape, &registrations, &targets);
            let _ = writeln!(report, "    after the {pass}: {}", memory());
        }
        print!("{report}");
    });
}

/// Creates the registrations, one per repository, and the token Secret of every tenant.
async fn setup(client: &Client, base: &str, shape: Shape) {
    let started = Instant::now();
    let registrations: Api<TenantRepository> = Api::namespaced(client.clone(), PLATFORM);
    for i in 0..shape.registrations {
        let spec = TenantRepositorySpec {
            url: format!("{base}tenant-{i}.git"),
            path: Some("deploy".into()),
            interval: Some("5m".into()),
            target_namespace: format!("tenant-{i}"),
            service_account_name: SERVICE_ACCOUNT.into(),
            prune: true,
            ..TenantRepositorySpec::default()
        };
        let mut repo = TenantRepository::new(&format!("tenant-{i}"), spec);
        repo.metadata.namespace = Some(PLATFORM.into());
        registrations.create(&PostParams::default(), &repo).await.expect("create TenantRepository");
        let secret = Secret {
            metadata: ObjectMeta { name: Some(TOKEN.into()), ..ObjectMeta::default() },
            data: Some(BTreeMap::from([("AZP_TOKEN".to_owned(), ByteString(format!("pat-{i}").into_bytes()))])),
            ..Secret::default()
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &format!("tenant-{i}"));
        secrets.create(&PostParams::default(), &secret).await.expect("create Secret");
    }
    eprintln!("  created {} registrations and Secrets in {:.1?}", shape.registrations, started.elapsed());
}

/// This process's resident set now and at its peak so far, from `/proc/self/status`.
fn memory() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or_else(|| "?".to_owned(), |kib| format!("{:.1} MiB", kib / 1024.0))
    };
    format!("RSS {}, peak {}", field("VmRSS:"), field("VmHWM:"))
}

/// What one phase of a pass did.
struct Phase {
    objects: usize,
    wall: Duration,
    requests: BTreeMap<&'static str, u64>,
    errors: usize,
}

async fn pass_registrations(
    client: &Client,
    ctx: &Arc<tenant_repository::Context>,
    counters: &Counters,
    concurrency: usize,
) -> Phase {
    let api: Api<TenantRepository> = Api::namespaced(client.clone(), PLATFORM);
    let list = api.list(&ListParams::default()).await.expect("list TenantRepositories").items;
    let objects = list.len();
    let before = counters.snapshot();
    let started = Instant::now();
    let errors = stream::iter(list)
        .map(|repo| tenant_repository::reconcile(Arc::new(repo), ctx.clone()))
        .buffer_unordered(concurrency)
        .filter(|result| {
            if let Err(e) = result {
                eprintln!("  TenantRepository reconcile failed: {e}");
            }
            futures::future::ready(result.is_err())
        })
        .count()
        .await;
    let wall = started.elapsed();
    Phase { objects, wall, requests: since(&before, &counters.snapshot()), errors }
}

async fn pass_targets(
    client: &Client,
    ctx: &Arc<cdtarget_controller::Context>,
    counters: &Counters,
    concurrency: usize,
) -> Phase {
    let api: Api<CDTarget> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.expect("list CDTargets").items;
    let objects = list.len();
    let before = counters.snapshot();
    let started = Instant::now();
    let errors = stream::iter(list)
        .map(|target| cdtarget_controller::reconcile(Arc::new(target), ctx.clone()))
        .buffer_unordered(concurrency)
        .filter(|result| {
            if let Err(e) = result {
                eprintln!("  CDTarget reconcile failed: {e}");
            }
            futures::future::ready(result.is_err())
        })
        .count()
        .await;
    let wall = started.elapsed();
    Phase { objects, wall, requests: since(&before, &counters.snapshot()), errors }
}

fn describe(out: &mut String, pass: &str, shape: Shape, registrations: &Phase, targets: &Phase) {
    let total = registrations.wall + targets.wall;
    let _ = writeln!(out, "  {pass}: {:.2} s wall", total.as_secs_f64());
    if registrations.objects != shape.registrations || targets.objects != shape.registrations * shape.targets {
        let _ = writeln!(
            out,
            "    WARNING: expected {} registrations and {} CDTargets, found {} and {}",
            shape.registrations,
            shape.registrations * shape.targets,
            registrations.objects,
            targets.objects
        );
    }
    for (kind, phase) in [("TenantRepository", registrations), ("CDTarget", targets)] {
        let mutating: u64 = MUTATING.iter().map(|verb| phase.requests[verb]).sum();
        let all: u64 = phase.requests.values().sum();
        let per = |n: u64| n as f64 / phase.objects.max(1) as f64;
        let verbs: Vec<String> =
            phase.requests.iter().filter(|(_, n)| **n > 0).map(|(verb, n)| format!("{verb} {n}")).collect();
        let _ = writeln!(
            out,
            "    {kind} ×{}: {:.2} s, {:.2} requests/object ({:.2} mutating), errors {}; {}",
            phase.objects,
            phase.wall.as_secs_f64(),
            per(all),
            per(mutating),
            phase.errors,
            verbs.join(", ")
        );
    }
}
