//! Webhook receiver benchmark, driven by `wrk` on loopback.
//!
//! ```text
//! cargo bench --bench webhook                       # 10 s per run, 2 wrk threads, 32 connections
//! cargo bench --bench webhook -- --duration 5 --connections 64
//! ```
//!
//! In one process and one run:
//!
//! 1. **Throughput.** A bare axum handler that only answers 200 (`axum::serve`), then the
//!    receiver with one `gitlab` registration, each driven by the same `wrk` command with the same
//!    request: a GitLab push payload (the test fixture, ~2 KB) with `X-Gitlab-Event`,
//!    `X-Gitlab-Token` and a fresh `Idempotency-Key` per request, so that every receiver request
//!    is looked up, read, verified (constant-time token check), filtered (JSON parsed), deduplicated
//!    and triggers. Prints both request rates and their ratio.
//! 2. **Valid triggers under a flood.** One `wrk` connection sends valid deliveries (as above)
//!    alone, then again while a second `wrk` floods the same path with deliveries carrying a
//!    wrong token (401, answered from the headers: their bodies are never read); prints the
//!    valid deliveries' p50/p99 latency in both runs.
//!
//! The rate limits (global, per registration, body reads) are off in both parts (they would
//! answer 429 and measure the limiter instead); the trigger is a counter (no controller runs).
//! Both servers run on this process's tokio runtime (one worker per core); `wrk` runs beside them
//! on the same cores. Nothing is asserted: the numbers and the goal (receiver ≥ 50% of the bare
//! handler) are printed.

use std::io::Write as _;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use cdtarget::api::TenantRepository;
use cdtarget::api::tenant_repository::{
    LocalSecretReference, TenantRepositorySpec, WebhookSpec, WebhookType, webhook_path,
};
use cdtarget::telemetry::WebhookMetrics;
use cdtarget::webhook::TriggerClosed;
use cdtarget::webhook::{self, Fire, Index, Limits, Receiver, Registration};
use k8s_openapi::ByteString;

const NAMESPACE: &str = "cdtarget-system";
const NAME: &str = "team-payments";
const TOKEN: &str = "bench-token-0123456789abcdef";

/// Counts triggers.
#[derive(Default)]
struct Counter(AtomicU64);

impl Fire for Counter {
    fn fire(&self, _namespace: &str, _name: &str) -> Result<(), TriggerClosed> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

struct Options {
    duration: u64,
    connections: u32,
    threads: u32,
}

fn options() -> Options {
    let mut options = Options { duration: 10, connections: 32, threads: 2 };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let value = || args.get(i + 1).and_then(|v| v.parse::<u64>().ok()).expect("a number after the flag");
        match args[i].as_str() {
            "--duration" => options.duration = value(),
            "--connections" => options.connections = value() as u32,
            "--threads" => options.threads = value() as u32,
            // `cargo bench` passes `--bench`.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    options
}

/// What one wrk run measured.
#[derive(Debug, Default)]
struct WrkResult {
    requests_per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    requests: u64,
    non_2xx: u64,
}

fn parse_ms(text: &str) -> f64 {
    let text = text.trim();
    let (number, factor) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (text, 1.0)
    };
    number.trim().parse::<f64>().unwrap_or(f64::NAN) * factor
}

fn parse_wrk(output: &str) -> WrkResult {
    let mut result = WrkResult::default();
    for line in output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", rate] => result.requests_per_second = rate.parse().unwrap_or(0.0),
            ["50%", latency] => result.p50_ms = parse_ms(latency),
            ["99%", latency] => result.p99_ms = parse_ms(latency),
            ["Non-2xx", "or", "3xx", "responses:", count] => result.non_2xx = count.parse().unwrap_or(0),
            [count, "requests", "in", ..] => result.requests = count.parse().unwrap_or(0),
            _ => {}
        }
    }
    result
}

/// A wrk Lua script POSTing `body` with `headers`, plus a fresh `Idempotency-Key` per request
/// when `unique_key` is set.
fn script(dir: &std::path::Path, name: &str, body: &str, headers: &[(&str, &str)], unique_key: bool) -> String {
    let mut lua = String::from("wrk.method = \"POST\"\n");
    lua.push_str(&format!("wrk.body = [==[{body}]==]\n"));
    for (name, value) in headers {
        lua.push_str(&format!("wrk.headers[\"{name}\"] = \"{value}\"\n"));
    }
    if unique_key {
        // Each wrk thread gets its own id from `setup`, so keys never repeat across threads.
        lua.push_str(
            "local threads = 0\n\
             function setup(thread) threads = threads + 1; thread:set(\"tid\", threads) end\n\
             local n = 0\n\
             function request()\n  n = n + 1\n  wrk.headers[\"Idempotency-Key\"] = \"bench-\" .. tid .. \"-\" .. n\n  return wrk.format()\nend\n",
        );
    }
    let path = dir.join(format!("{name}.lua"));
    std::fs::File::create(&path).unwrap().write_all(lua.as_bytes()).unwrap();
    path.display().to_string()
}

fn wrk(url: &str, script: &str, threads: u32, connections: u32, duration: u64) -> std::process::Child {
    Command::new("wrk")
        .args(["-t", &threads.to_string(), "-c", &connections.to_string(), "-d", &format!("{duration}s")])
        .args(["--latency", "--timeout", "10s", "-s", script, url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start wrk")
}

fn finish(child: std::process::Child) -> WrkResult {
    let output = child.wait_with_output().expect("wrk runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "wrk failed: {text}{}", String::from_utf8_lossy(&output.stderr));
    parse_wrk(&text)
}

fn registration() -> Registration {
    let spec = TenantRepositorySpec {
        webhook: Some(WebhookSpec {
            kind: WebhookType::Gitlab,
            secret_ref: LocalSecretReference { name: "hook".into() },
            events: vec![],
        }),
        ..TenantRepositorySpec::default()
    };
    let mut repo = TenantRepository::new(NAME, spec);
    repo.metadata.namespace = Some(NAMESPACE.into());
    let data = [("token".to_owned(), ByteString(TOKEN.into()))].into();
    Registration::from_parts(&repo, Some(&data)).unwrap().unwrap()
}

fn main() {
    if Command::new("wrk").arg("--version").output().is_err() {
        println!("SKIP webhook benchmark: `wrk` is not installed (Debian: apt-get install wrk)");
        return;
    }
    let options = options();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/webhook/fixtures/gitlab-push.json"))
            .expect("fixture");
    // One line: the Lua long string keeps it verbatim.
    let body = serde_json::to_string(&serde_json::from_str::<serde_json::Value>(&fixture).unwrap()).unwrap();
    let valid_headers =
        [("Content-Type", "application/json"), ("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", TOKEN)];
    let valid = script(dir.path(), "valid", &body, &valid_headers, true);
    let invalid_headers = [
        ("Content-Type", "application/json"),
        ("X-Gitlab-Event", "Push Hook"),
        ("X-Gitlab-Token", "not-the-token-0123456789abc"),
    ];
    let invalid = script(dir.path(), "invalid", &body, &invalid_headers, false);

    let (bare_url, receiver_url, fired) = runtime.block_on(async {
        let bare = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bare_url = format!("http://{}/hook/bare", bare.local_addr().unwrap());
        let app = Router::new().route("/hook/{digest}", post(|| async { StatusCode::OK }));
        tokio::spawn(async move { axum::serve(bare, app).await });

        let index = Arc::new(Index::default());
        index.upsert(registration());
        let limits =
            Limits { global_rate: None, registration_rate: None, registration_read_rate: None, ..Limits::default() };
        let receiver = Receiver::new(index, limits, WebhookMetrics::default());
        let fired = Arc::new(Counter::default());
        receiver.set_trigger(Some(fired.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver_url = format!("http://{}{}", listener.local_addr().unwrap(), webhook_path(TOKEN, NAME, NAMESPACE));
        tokio::spawn(webhook::serve(listener, receiver, futures::future::pending()));
        (bare_url, receiver_url, fired)
    });
    // The servers run on the runtime's workers; this thread only drives wrk.
    let (t, c, d) = (options.threads, options.connections, options.duration);
    println!("webhook benchmark: wrk -t{t} -c{c} -d{d}s, body {} bytes, {} cores", body.len(), cores());

    let bare = finish(wrk(&bare_url, &valid, t, c, d));
    let before = fired.0.load(Ordering::Relaxed);
    let verified = finish(wrk(&receiver_url, &valid, t, c, d));
    let triggered = fired.0.load(Ordering::Relaxed) - before;
    println!();
    println!("| server | requests/s | p50 | p99 | requests | non-2xx |");
    println!("|---|---|---|---|---|---|");
    row("bare axum handler (200)", &bare);
    row("receiver, verified GitLab deliveries (202)", &verified);
    println!();
    println!(
        "receiver / bare: {:.0}% (goal: at least 50%); {triggered} triggers for {} requests",
        100.0 * verified.requests_per_second / bare.requests_per_second,
        verified.requests
    );

    let alone = finish(wrk(&receiver_url, &valid, 1, 1, d));
    let flood = wrk(&receiver_url, &invalid, t, c, d);
    let under_flood = finish(wrk(&receiver_url, &valid, 1, 1, d));
    let flood = finish(flood);
    println!();
    println!("| valid deliveries (1 connection) | requests/s | p50 | p99 | requests | non-2xx |");
    println!("|---|---|---|---|---|---|");
    row("alone", &alone);
    row(&format!("during a flood of wrong-token deliveries ({c} connections)"), &under_flood);
    row("the flood itself (401)", &flood);
}

fn row(what: &str, result: &WrkResult) {
    println!(
        "| {what} | {:.0} | {:.2} ms | {:.2} ms | {} | {} |",
        result.requests_per_second, result.p50_ms, result.p99_ms, result.requests, result.non_2xx
    );
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
