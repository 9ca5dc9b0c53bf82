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
//! serves them with a `git://` daemon on 127.0.0.1. Two children of this binary (re-executed with a
//! hidden argument) play the cluster and the controller:
//!
//! - the **API server**: one `kube-fake-client` cluster with cdtarget's and KEDA's kinds, holding
//!   the registrations (platform namespace) and one token Secret per tenant namespace, served over
//!   HTTP on 127.0.0.1 by the bridge of `tests/common/api_bridge.rs`;
//! - the **controller**: an ordinary `kube::Client` over HTTP to it, tenant clients impersonating
//!   through it as in `cdtarget controller`, and two passes of
//!   1. `tenant_repository::reconcile` for every registration (fetch, load, server-side apply of
//!      the CDTargets into the tenant namespace, status), `--concurrency` at a time;
//!   2. `cdtarget::reconcile` for every CDTarget now in the cluster (render, apply the four
//!      children, status), `--concurrency` at a time.
//!
//! The controller child is reaped with `wait4(2)`, so `ru_maxrss` is its peak resident set alone:
//! the fake's store lives in the other process, as a real API server would. Requests are counted
//! in the controller by method, around its client. The reconcilers are handed the objects from a
//! list made before each phase (standing for the watch cache, and held in memory like one); that
//! list is not counted. Nothing here asserts on time; it prints the numbers and the goals.

#[path = "support/args.rs"]
mod args;

#[path = "../tests/common/mod.rs"]
mod common;

#[path = "support/fleet.rs"]
mod fleet;

#[path = "support/reap.rs"]
mod reap;

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::io::{self, BufRead, Read, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cdtarget::api::CDTarget;
use cdtarget::api::keda::{ScaledObject, TriggerAuthentication};
use cdtarget::api::tenant_repository::{TenantRepository, TenantRepositorySpec};
use cdtarget::controller::frame::Framed;
use cdtarget::controller::inputs::PolicySource;
use cdtarget::controller::{cdtarget as cdtarget_controller, tenant_repository};
use cdtarget::source::{Fetcher, Limits};
use futures::{StreamExt as _, stream};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube_fake_client::ClientBuilder;

use common::api_bridge::{ApiBridge, Record};
use common::{GitDaemon, Upstream};
use fleet::TOKEN;
use reap::wait4;

/// The hidden argument under which this binary is the controller side:
/// `__controller API_URL REGISTRATIONS TARGETS CONCURRENCY CACHE_DIR`.
const CONTROLLER_ARG: &str = "__controller";
/// The hidden argument under which this binary is the API server: `__apiserver GIT_BASE
/// REGISTRATIONS`. It prints its URL on the first line of stdout and exits when stdin closes.
const APISERVER_ARG: &str = "__apiserver";
/// The controller's namespace: registrations and the (absent, so default) policy.
const PLATFORM: &str = "cdtarget-system";
/// The policy ConfigMap's name (not created: the default policy applies).
const POLICY: &str = "cdtarget-policy";
/// The ServiceAccount every registration impersonates.
const SERVICE_ACCOUNT: &str = "deployer";
/// Peak memory goal of the issue, MiB.
const MEMORY_GOAL_MIB: f64 = 150.0;

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some(CONTROLLER_ARG) => {
            let [url, registrations, targets, concurrency, cache] = &args[1..] else {
                usage("usage: __controller API_URL REGISTRATIONS TARGETS CONCURRENCY CACHE_DIR")
            };
            let shape = Shape { registrations: number(registrations), targets: number(targets) };
            controller_side(url, shape, number(concurrency), Path::new(cache));
        }
        Some(APISERVER_ARG) => {
            let [base, registrations] = &args[1..] else { usage("usage: __apiserver GIT_BASE REGISTRATIONS") };
            apiserver_side(base, number(registrations));
        }
        _ => {
            let options = Options::parse(&args);
            if let Err(e) = run(&options) {
                eprintln!("controller bench: {e}");
                std::process::exit(1);
            }
        }
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
    args::positive(text).unwrap_or_else(|why| usage(&why))
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
    fleet::generate(&upstream, options.shape.registrations, options.shape.targets, None);
    println!("  generated {registrations} repositories in {:.1?}", started.elapsed());
    let daemon = GitDaemon::start(&upstream.root());
    let cache = common::test_dir();
    let base = daemon.url("");

    // The API server: its URL comes on the first line; closing its stdin ends it.
    let mut apiserver = Command::new(env::current_exe()?)
        .arg(APISERVER_ARG)
        .arg(&base)
        .arg(registrations.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut url = String::new();
    io::BufReader::new(apiserver.stdout.take().expect("piped")).read_line(&mut url)?;
    let url = url.trim().to_owned();
    if !url.starts_with("http://") {
        let _ = apiserver.kill();
        return Err(io::Error::other("the API server did not start"));
    }

    let mut command = Command::new(env::current_exe()?);
    command
        .arg(CONTROLLER_ARG)
        .arg(&url)
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

    drop(apiserver.stdin.take());
    let (_, server_usage) = wait4(apiserver.id() as libc::pid_t)?;
    drop(apiserver);
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(io::Error::other(format!("the controller side failed (wait status {status})")));
    }
    // Linux reports ru_maxrss in KiB.
    let peak_mib = usage.ru_maxrss as f64 / 1024.0;
    let verdict = if peak_mib <= MEMORY_GOAL_MIB { "met" } else { "NOT met" };
    println!("  peak RSS of the controller process: {peak_mib:.1} MiB (goal ≤ {MEMORY_GOAL_MIB} MiB: {verdict})");
    println!(
        "  peak RSS of the fake API server process (not the controller's): {:.1} MiB",
        server_usage.ru_maxrss as f64 / 1024.0
    );
    println!("  git daemon connections: {}", daemon.connections());
    Ok(())
}

// === the controller side (child process) ===

/// Requests the controller sent, by method (`PATCH status` for status writes).
#[derive(Clone, Default)]
struct Counters(Arc<Mutex<BTreeMap<String, u64>>>);

impl Counters {
    fn hit(&self, verb: String) {
        *self.0.lock().unwrap().entry(verb).or_default() += 1;
    }

    fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap().clone()
    }
}

/// Requests by verb between two snapshots.
fn since(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after.iter().map(|(verb, n)| (verb.clone(), n - before.get(verb).copied().unwrap_or(0))).collect()
}

/// `base`, counting every request it sends (impersonating clients built on it included).
fn counting(base: Client, counters: Counters) -> Client {
    let default_namespace = base.default_namespace().to_owned();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let path = request.uri().path();
        let verb = if path.ends_with("/status") {
            format!("{} status", request.method())
        } else {
            request.method().to_string()
        };
        counters.hit(verb);
        let base = base.clone();
        async move { base.send(request).await }
    });
    Client::new(service, default_namespace)
}

// === the API server (child process) ===

fn apiserver_side(base: &str, registrations: usize) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let fake = ClientBuilder::new()
            .with_resource::<CDTarget>()
            .with_status_subresource::<CDTarget>()
            .with_resource::<TenantRepository>()
            .with_status_subresource::<TenantRepository>()
            .with_resource::<ScaledObject>()
            .with_resource::<TriggerAuthentication>()
            // The CDTarget reconciler asks whether each tenant may read its Secrets.
            .with_interceptor_funcs(kube_fake_client::interceptor::Funcs::new().create({
                let reviews = common::access_review::AccessReviews::default();
                move |ctx| Ok(reviews.answer(ctx.object))
            }))
            .build()
            .await
            .expect("fake client");
        setup(&fake, base, registrations).await;
        let bridge = ApiBridge::start(fake, Record::Counts).await;
        println!("{}", bridge.url());
        let _ = io::stdout().flush();
        // Serve until the benchmark closes stdin.
        let _ = tokio::task::spawn_blocking(|| io::copy(&mut io::stdin(), &mut io::sink())).await;
        drop(bridge);
    });
}

/// Creates the registrations, one per repository, and the token Secret of every tenant.
async fn setup(client: &Client, base: &str, registrations: usize) {
    let started = Instant::now();
    let api: Api<TenantRepository> = Api::namespaced(client.clone(), PLATFORM);
    for i in 0..registrations {
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
        api.create(&PostParams::default(), &repo).await.expect("create TenantRepository");
        let secret = Secret {
            metadata: ObjectMeta { name: Some(TOKEN.into()), ..ObjectMeta::default() },
            data: Some(BTreeMap::from([("AZP_TOKEN".to_owned(), ByteString(format!("pat-{i}").into_bytes()))])),
            ..Secret::default()
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &format!("tenant-{i}"));
        secrets.create(&PostParams::default(), &secret).await.expect("create Secret");
    }
    eprintln!("  created {registrations} registrations and Secrets in {:.1?}", started.elapsed());
}

// === the controller side (child process) ===

fn controller_side(url: &str, shape: Shape, concurrency: usize, cache: &Path) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let counters = Counters::default();
        let config = kube::Config::new(url.parse().expect("API server URL"));
        let client = counting(Client::try_from(config).expect("client"), counters.clone());
        // As `cdtarget controller` builds it: tenant clients impersonate over this client, and
        // the policy is read once and shared (the process keeps it current by watch).
        let read = PolicySource::Read { client: client.clone(), namespace: PLATFORM.into(), name: POLICY.into() }
            .current()
            .await
            .expect("the policy ConfigMap");
        let (policy_sender, policy) = PolicySource::shared();
        policy_sender.send_replace(Some(read));
        let tenant_ctx = Arc::new(
            tenant_repository::Context::new(
                client.clone(),
                Fetcher::new(cache.to_path_buf(), Limits::default(), concurrency),
                PLATFORM,
                POLICY,
            )
            .with_policy(policy.clone()),
        );
        let target_ctx = Arc::new(
            cdtarget_controller::Context::new(client.clone(), PLATFORM, POLICY)
                .with_policy(policy)
                .with_keda(cdtarget_controller::Keda::new(true)),
        );

        let mut report = String::new();
        let _ = writeln!(report, "  controller at start: {}", memory());
        for pass in ["first pass", "no-op pass"] {
            let registrations = pass_registrations(&client, &tenant_ctx, &counters, concurrency).await;
            let targets = pass_targets(&client, &target_ctx, &counters, concurrency, shape.registrations).await;
            describe(&mut report, pass, shape, &registrations, &targets);
            let _ = writeln!(report, "    after the {pass}: {}", memory());
        }
        print!("{report}");
    });
}

/// This process's resident set now and at its peak so far, from `/proc/self/status`.
#[allow(unsafe_code)] // a libc call of the benchmark; `[lints]` denies unsafe code, src/ forbids it
fn memory() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or_else(|| "?".to_owned(), |kib| format!("{:.1} MiB", kib / 1024.0))
    };
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let heap = unsafe { libc::mallinfo2() };
    let mib = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
    format!(
        "RSS {} (anonymous {}, files {}), peak {}; malloc: {:.1} MiB in use, {:.1} MiB free in the arenas",
        field("VmRSS:"),
        field("RssAnon:"),
        field("RssFile:"),
        field("VmHWM:"),
        mib(heap.uordblks + heap.hblkhd),
        mib(heap.fordblks)
    )
}

/// What one phase of a pass did.
struct Phase {
    objects: usize,
    wall: Duration,
    requests: BTreeMap<String, u64>,
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
    registrations: usize,
) -> Phase {
    // Namespace by namespace: small responses, as a watch cache fills from pages. One unpaged
    // list of every CDTarget would be a transient allocation no controller makes (and the fake
    // does not continue paged lists).
    let mut list = Vec::new();
    for namespace in 0..registrations {
        let api: Api<CDTarget> = Api::namespaced(client.clone(), &format!("tenant-{namespace}"));
        list.extend(api.list(&ListParams::default()).await.expect("list CDTargets").items);
    }
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
        let mutating: u64 = phase.requests.iter().filter(|(verb, _)| verb.as_str() != "GET").map(|(_, n)| n).sum();
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
