//! GitLab syncer benchmark: API calls and wall time to bring many registrations into sync from
//! scratch, then for a no-op pass, against the fake GitLab with a rate limit.
//!
//! ```text
//! cargo bench --bench gitlab                                        # 500 registrations, GitLab.com limits
//! cargo bench --bench gitlab -- --registrations 100 --concurrency 8 --rate-limit 100/1
//! cargo bench --bench gitlab -- --rate-limit off --project-lookup-limit 0
//! ```
//!
//! The fake GitLab (`tests/common/fake_gitlab.rs`) runs in this process on 127.0.0.1 with one
//! empty project per registration. By default it enforces GitLab.com's limits for one user:
//! the authenticated API throttle at 2,000 requests per 60 s window (Rack::Attack: `RateLimit-*`
//! headers on every answer, 429 `Retry later` with `Retry-After` over the limit) and the
//! application limit of 400 `GET /projects/:id` per minute (429 JSON, no timing headers).
//!
//! Pass 1 syncs every registration from scratch with `gitlab::sync_many` (one shared client,
//! `--concurrency` at a time). Pass 2 syncs them again with the ids the first pass returned, as
//! the controller does after writing status. The fake counts every request by method and route;
//! the goal of the no-op pass is exactly two GETs per registration and no write. Nothing here
//! asserts on time; it prints the numbers.

#[allow(dead_code)]
#[path = "../tests/common/fake_gitlab.rs"]
mod fake_gitlab;
#[path = "../tests/common/server_thread.rs"]
mod server_thread;

use std::env;
use std::process::exit;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cdtarget::api::tenant_repository::{
    GitLabSpec, GitRef, TenantRepository, TenantRepositorySpec, TenantRepositoryStatus,
};
use cdtarget::gitlab::{self, ClientConfig, GitLabClient, Secret, SyncInput, SyncOutcome, keys};

use fake_gitlab::{BOT_TOKEN, Counts, FakeGitLab, RateLimit};

struct Options {
    registrations: usize,
    concurrency: usize,
    rate_limit: Option<RateLimit>,
    project_lookup_limit: Option<u32>,
}

fn main() {
    let options = options();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let fake = FakeGitLab::start();
    fake.set_rate_limit(options.rate_limit);
    fake.set_project_lookup_limit(options.project_lookup_limit);
    let started = Instant::now();
    let mut registrations = Vec::with_capacity(options.registrations);
    let mut public_keys = Vec::with_capacity(options.registrations);
    for n in 0..options.registrations {
        let path = format!("tenant-{n}/app");
        fake.add_project(&path);
        registrations.push(registration(n, &path));
        public_keys.push(keys::generate(&format!("cdtarget:platform/app-{n}")).expect("key pair").public_openssh);
    }
    println!("setup: {} projects and key pairs in {:.1} s", options.registrations, started.elapsed().as_secs_f64());
    println!(
        "fake GitLab limits: API throttle {}, GET /projects/:id {}; concurrency {}",
        match options.rate_limit {
            Some(limit) => format!("{} requests per {} s", limit.requests, limit.period_secs),
            None => "off".to_owned(),
        },
        match options.project_lookup_limit {
            Some(limit) => format!("{limit} per minute"),
            None => "unlimited".to_owned(),
        },
        options.concurrency
    );

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let client = GitLabClient::new(ClientConfig::new(fake.url(), Secret::new(BOT_TOKEN))).expect("client");
    let token = Secret::new("bench-webhook-token");

    let inputs: Vec<SyncInput> = registrations
        .iter()
        .zip(&public_keys)
        .map(|(repo, key)| SyncInput::for_registration(repo, key, &token, "https://cd.example.com").expect("input"))
        .collect();
    let (first, outcomes) = pass(&runtime, &client, &fake, &inputs, &options);
    report("from scratch", &first, options.registrations);

    // The controller writes each outcome to status; the next pass starts from there.
    let inputs: Vec<SyncInput> = registrations
        .into_iter()
        .zip(&public_keys)
        .zip(&outcomes)
        .map(|((mut repo, key), outcome)| {
            if let Some(outcome) = outcome {
                repo.status = Some(TenantRepositoryStatus { gitlab: Some(outcome.status()), ..Default::default() });
            }
            SyncInput::for_registration(&repo, key, &token, "https://cd.example.com").expect("input")
        })
        .collect();
    fake.reset_counts();
    let (second, _) = pass(&runtime, &client, &fake, &inputs, &options);
    report("no-op", &second, options.registrations);

    let gets = second.counts.method("GET");
    let writes = second.counts.writes();
    let goal = gets == 2 * options.registrations && writes == 0 && second.errors == 0;
    println!(
        "goal (no-op pass: exactly 2 GETs per registration, 0 writes): {} ({gets} GETs, {writes} writes, {} errors)",
        if goal { "met" } else { "NOT met" },
        second.errors
    );
}

struct Pass {
    wall: Duration,
    counts: Counts,
    errors: usize,
    first_error: Option<String>,
    changes: usize,
    retries: u64,
}

fn pass(
    runtime: &tokio::runtime::Runtime,
    client: &GitLabClient,
    fake: &FakeGitLab,
    inputs: &[SyncInput],
    options: &Options,
) -> (Pass, Vec<Option<SyncOutcome>>) {
    // Each pass starts with a fresh rate-limit window, so the figures do not depend on where in
    // a window the previous work left off (the fake's windows are aligned on the epoch).
    let period = match (options.rate_limit, options.project_lookup_limit) {
        (Some(limit), _) => Some(limit.period_secs),
        (None, Some(_)) => Some(60),
        (None, None) => None,
    };
    if let Some(period) = period {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let window = Duration::from_secs(period);
        let into = Duration::from_nanos((now.as_nanos() % window.as_nanos()) as u64);
        let wait = window - into + Duration::from_millis(50);
        println!("\n(waiting {:.1} s for a fresh rate-limit window)", wait.as_secs_f64());
        std::thread::sleep(wait);
    }
    let concurrency = options.concurrency;
    let retries_before = client.stats().retries;
    let started = Instant::now();
    let results = runtime.block_on(gitlab::sync_many(client, inputs, concurrency));
    let wall = started.elapsed();
    let errors = results.iter().filter(|r| r.is_err()).count();
    let first_error = results.iter().find_map(|r| r.as_ref().err()).map(ToString::to_string);
    let changes = results.iter().filter_map(|r| r.as_ref().ok()).map(|o| o.writes).sum();
    let outcomes = results.into_iter().map(Result::ok).collect();
    let retries = client.stats().retries - retries_before;
    (Pass { wall, counts: fake.counts(), errors, first_error, changes, retries }, outcomes)
}

fn report(name: &str, pass: &Pass, registrations: usize) {
    let counts = &pass.counts;
    let per = |n: usize| n as f64 / registrations as f64;
    println!("\n== {name} ==");
    println!("wall time: {:.2} s", pass.wall.as_secs_f64());
    println!(
        "requests: {} total, {:.2} per registration; 429 answers: {}; writes reported by the syncer: {}",
        counts.total(),
        per(counts.total()),
        counts.status(429),
        pass.changes
    );
    for method in ["GET", "POST", "PUT", "DELETE"] {
        let n = counts.method(method);
        println!("  {method:<6} {n:>6}  ({:.2} per registration)", per(n));
    }
    println!("by route (429s included):");
    for (route, n) in &counts.by_route {
        println!("  {route:<45} {n:>6}");
    }
    println!("retries by the syncer's client (5xx, connection, 429): {}", pass.retries);
    println!(
        "errors: {}{}",
        pass.errors,
        pass.first_error.as_ref().map(|e| format!(" (first: {e})")).unwrap_or_default()
    );
}

fn registration(n: usize, path: &str) -> TenantRepository {
    let mut repo = TenantRepository::new(
        &format!("app-{n}"),
        TenantRepositorySpec {
            url: format!("ssh://git@gitlab.example.com/{path}.git"),
            git_ref: Some(GitRef { branch: Some("main".into()), ..GitRef::default() }),
            target_namespace: format!("tenant-{n}"),
            service_account_name: "deployer".into(),
            gitlab: Some(GitLabSpec { project: None, manage_deploy_key: true, manage_webhook: true }),
            ..TenantRepositorySpec::default()
        },
    );
    repo.metadata.namespace = Some("platform".into());
    repo
}

fn options() -> Options {
    let mut options = Options {
        registrations: 500,
        concurrency: 16,
        rate_limit: Some(RateLimit { requests: 2000, period_secs: 60 }),
        project_lookup_limit: Some(400),
    };
    let args: Vec<String> = env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--registrations" => options.registrations = number(value),
            "--concurrency" => options.concurrency = number(value),
            "--rate-limit" if value == "off" => options.rate_limit = None,
            "--rate-limit" => {
                let (requests, period) =
                    value.split_once('/').unwrap_or_else(|| usage("--rate-limit REQUESTS/SECONDS"));
                options.rate_limit =
                    Some(RateLimit { requests: number(requests) as u32, period_secs: number(period) as u64 });
            }
            "--project-lookup-limit" => {
                options.project_lookup_limit = Some(number(value) as u32).filter(|limit| *limit > 0);
            }
            _ => usage(&format!("unknown option {flag}")),
        }
    }
    options
}

fn number(text: &str) -> usize {
    text.parse().unwrap_or_else(|_| usage(&format!("`{text}` is not a number")))
}

fn usage(message: &str) -> ! {
    eprintln!(
        "{message}\nusage: cargo bench --bench gitlab -- [--registrations N] [--concurrency N] [--rate-limit REQUESTS/SECONDS|off] [--project-lookup-limit PER_MINUTE|0]"
    );
    exit(2)
}
