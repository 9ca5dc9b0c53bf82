//! What the controller process tells the outside world: logs (text or JSON), Prometheus metrics
//! and the `/healthz`, `/readyz` and `/metrics` endpoints.
//!
//! The HTTP side shares a [`State`] that never holds the kube client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Router;
use axum::extract::State as AxumState;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// Installs the global tracing subscriber (as [`subscriber`], writing to stderr, in colour only
/// when stderr is a terminal). `filter` is an `EnvFilter` directive such as `info` or
/// `info,cdtarget=debug`.
pub fn init_logging(format: LogFormat, filter: &str) -> Result<(), String> {
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let subscriber = build_subscriber(format, filter, std::io::stderr, colour)?;
    tracing::subscriber::set_global_default(subscriber).map_err(|e| format!("installing the logger: {e}"))
}

/// The subscriber of `cdtarget controller`: lines in `format` written by `writer`, without
/// terminal colour codes (a container's log, a file or a collector is no terminal). In JSON each
/// line carries the current span (`span`) and every span it runs in (`spans`): a reconcile's
/// kind, namespace, object and revision, and its step.
pub fn subscriber<W>(
    format: LogFormat,
    filter: &str,
    writer: W,
) -> Result<Box<dyn tracing::Subscriber + Send + Sync>, String>
where
    W: for<'writer> tracing_subscriber::fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    build_subscriber(format, filter, writer, false)
}

fn build_subscriber<W>(
    format: LogFormat,
    filter: &str,
    writer: W,
    colour: bool,
) -> Result<Box<dyn tracing::Subscriber + Send + Sync>, String>
where
    W: for<'writer> tracing_subscriber::fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| format!("--log-level `{filter}`: {e}"))?;
    // tracing-subscriber colours by default (unless NO_COLOR is set), terminal or not.
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(colour);
    Ok(match format {
        LogFormat::Text => Box::new(builder.finish()),
        LogFormat::Json => {
            Box::new(builder.json().flatten_event(true).with_current_span(true).with_span_list(true).finish())
        }
    })
}

/// Labels of the per-registration gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistrationLabels {
    /// `namespace/name` of the TenantRepository.
    pub registration: String,
}

/// Labels of the Git fetch histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchLabels {
    /// `updated`, `unchanged` (a no-op poll) or the failure reason (`AuthenticationFailed`, ...).
    pub result: String,
}

/// Labels of the reconcile duration histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `TenantRepository` or `CDTarget`.
    pub kind: String,
}

/// Labels of the reconcile result counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `TenantRepository` or `CDTarget`.
    pub kind: String,
    /// `success`, or the error's short label (`read`, `apply`, `prune`, `status`, ...).
    pub result: String,
}

/// Labels of the API write counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// What the write did (`apply`, `delete`, `status`, `finalizers`, `create`, `patch`).
    pub verb: &'static str,
    /// Kind of the object written.
    pub kind: String,
}

/// Labels of the webhook request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `spec.webhook.type` of the registration (`gitlab`, `github`, `generic-hmac`, `generic`), or
    /// `none` when the request matched no registration.
    pub r#type: &'static str,
    /// `accepted`, `ignored`, `duplicate`, `unauthorized`, `bad_request`, `not_found`,
    /// `method_not_allowed`, `too_large`, `timeout`, `rate_limited` or `unavailable`.
    pub result: &'static str,
}

/// Labels of the webhook handling-time histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookTypeLabels {
    /// As [`WebhookLabels::type`].
    pub r#type: &'static str,
}

/// The webhook receiver's metrics: cheap to clone (the families are shared), so the receiver
/// holds its own copy. Labels are static strings: never a path, digest or registration name.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    /// Requests per registration type and result.
    pub requests: Family<WebhookLabels, Counter>,
    /// Time from the request's arrival to the answer, per registration type.
    pub duration: Family<WebhookTypeLabels, Histogram>,
}

impl Default for WebhookMetrics {
    /// Families not registered anywhere (for tests and benchmarks); the controller's are in
    /// [`Metrics`].
    fn default() -> Self {
        WebhookMetrics {
            requests: Family::default(),
            // 50 µs .. ~1.6 s
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_05, 2.0, 16))),
        }
    }
}

impl WebhookMetrics {
    /// Counts one answered request and its handling time.
    pub fn observe(&self, kind: &'static str, result: &'static str, duration: std::time::Duration) {
        self.requests.get_or_create(&WebhookLabels { r#type: kind, result }).inc();
        self.duration.get_or_create(&WebhookTypeLabels { r#type: kind }).observe(duration.as_secs_f64());
    }
}

/// The controller's metrics.
pub struct Metrics {
    registry: Registry,
    /// Wall time of one Git fetch (a no-op poll included), per outcome.
    pub git_fetch_duration: Family<FetchLabels, Histogram>,
    /// Objects server-side applied from tenant repositories.
    pub objects_applied: Counter,
    /// Objects deleted because they left Git.
    pub objects_pruned: Counter,
    /// Objects in each registration's inventory.
    pub managed_objects: Family<RegistrationLabels, Gauge>,
    /// Wall time of one reconcile, per kind.
    pub reconcile_duration: Family<KindLabels, Histogram>,
    /// Reconciles per kind and result.
    pub reconciles: Family<ResultLabels, Counter>,
    /// Writes the controller sent to the API server, per verb and kind (every write passes
    /// through `apply::writer`, which counts it here).
    pub writes: Family<WriteLabels, Counter>,
    /// The webhook receiver's requests and handling time.
    pub webhook: WebhookMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("cdtarget");
        let reconcile_duration = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            // 5 ms .. ~2.7 min
            Histogram::new(exponential_buckets(0.005, 2.0, 16))
        });
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register(
            "reconcile_duration_seconds",
            "Wall time of one reconcile, per kind",
            reconcile_duration.clone(),
        );
        registry.register("reconciles", "Reconciles per kind and result", reconciles.clone());
        let git_fetch_duration = Family::<FetchLabels, Histogram>::new_with_constructor(|| {
            // 1 ms .. ~33 s
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        registry.register(
            "git_fetch_duration_seconds",
            "Wall time of one Git fetch per result (updated, unchanged = no-op poll, or the failure reason)",
            git_fetch_duration.clone(),
        );
        let objects_applied = Counter::default();
        registry.register(
            "objects_applied",
            "Objects server-side applied from tenant repositories",
            objects_applied.clone(),
        );
        let objects_pruned = Counter::default();
        registry.register("objects_pruned", "Objects deleted because they left Git", objects_pruned.clone());
        let managed_objects = Family::<RegistrationLabels, Gauge>::default();
        registry.register("managed_objects", "Objects in each registration's inventory", managed_objects.clone());
        let writes = Family::<WriteLabels, Counter>::default();
        registry.register("api_writes", "Writes sent to the API server, per verb and kind", writes.clone());
        let webhook = WebhookMetrics::default();
        registry.register(
            "webhook_requests",
            "Webhook requests per registration type and result",
            webhook.requests.clone(),
        );
        registry.register(
            "webhook_request_duration_seconds",
            "Time from a webhook request's arrival to its answer, per registration type",
            webhook.duration.clone(),
        );
        Metrics {
            registry,
            git_fetch_duration,
            objects_applied,
            objects_pruned,
            managed_objects,
            reconcile_duration,
            reconciles,
            writes,
            webhook,
        }
    }
}

impl Metrics {
    /// Starts timing a reconcile of `kind`; the guard records the duration when dropped.
    pub fn time_reconcile(&self, kind: &str) -> ReconcileTimer<'_> {
        ReconcileTimer { metrics: self, kind: kind.to_owned(), start: Instant::now() }
    }

    /// Records one Git fetch ending in `result` (`updated`, `unchanged` or a failure reason).
    pub fn observe_fetch(&self, result: &str, duration: std::time::Duration) {
        self.git_fetch_duration
            .get_or_create(&FetchLabels { result: result.to_owned() })
            .observe(duration.as_secs_f64());
    }

    /// Records what one TenantRepository reconcile did.
    pub fn observe_apply(&self, registration: &str, applied: usize, pruned: usize, managed: usize) {
        self.objects_applied.inc_by(applied as u64);
        self.objects_pruned.inc_by(pruned as u64);
        let labels = RegistrationLabels { registration: registration.to_owned() };
        self.managed_objects.get_or_create(&labels).set(i64::try_from(managed).unwrap_or(i64::MAX));
    }

    /// Drops the series of a registration that is gone, so that `/metrics` does not report it
    /// for the life of the process.
    pub fn forget_registration(&self, registration: &str) {
        self.managed_objects.remove(&RegistrationLabels { registration: registration.to_owned() });
    }

    /// Counts one write of `verb` to an object of `kind`.
    pub fn count_write(&self, verb: &'static str, kind: &str) {
        self.writes.get_or_create(&WriteLabels { verb, kind: kind.to_owned() }).inc();
    }

    /// Counts one reconcile of `kind` ending in `result`.
    pub fn count_reconcile(&self, kind: &str, result: &str) {
        self.reconciles.get_or_create(&ResultLabels { kind: kind.to_owned(), result: result.to_owned() }).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// Records a reconcile's duration when dropped (also when the reconcile future is cancelled).
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    kind: String,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        let labels = KindLabels { kind: std::mem::take(&mut self.kind) };
        self.metrics.reconcile_duration.get_or_create(&labels).observe(self.start.elapsed().as_secs_f64());
    }
}

/// What the HTTP endpoints read: readiness flags and the metrics. Never the kube client.
#[derive(Default)]
pub struct State {
    /// The watchers run (this replica leads), or the leader is known (it does not).
    ready: AtomicBool,
    /// Whether this replica holds the lease.
    leader: AtomicBool,
    /// The metrics.
    pub metrics: Metrics,
}

impl State {
    /// Marks the process ready (or not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Whether the process is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::SeqCst);
    }

    /// Whether this replica leads.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }
}

/// The HTTP routes: `/healthz`, `/readyz`, `/metrics`.
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(AxumState(state): AxumState<Arc<State>>) -> impl IntoResponse {
    if state.is_ready() {
        (StatusCode::OK, if state.is_leader() { "ready (leader)\n" } else { "ready\n" })
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics(AxumState(state): AxumState<Arc<State>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
}

/// Reads a listen address: `:8080` means every interface, port 8080.
pub fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    let full = if text.starts_with(':') { format!("0.0.0.0{text}") } else { text.to_owned() };
    full.parse().map_err(|e| format!("`{text}` is not an address like `:8080` or `127.0.0.1:8080`: {e}"))
}

/// Serves the routes on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<State>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_logs_carry_no_terminal_colour_codes() {
        let written = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let writer = {
            let written = written.clone();
            move || SharedBuffer(written.clone())
        };
        let subscriber = subscriber(LogFormat::Text, "info", writer).unwrap();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(address = "127.0.0.1:8080", "serving /metrics");
        });
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        // What a log reader (or `kubectl logs | grep`) matches on: the plain `key=value`.
        assert!(text.contains("serving /metrics address=\"127.0.0.1:8080\""), "{text:?}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
    }

    /// A writer appending to a shared buffer.
    struct SharedBuffer(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for SharedBuffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn listen_addresses_accept_a_bare_port() {
        assert_eq!(parse_listen_address(":8080").unwrap(), "0.0.0.0:8080".parse().unwrap());
        assert_eq!(parse_listen_address("127.0.0.1:9").unwrap(), "127.0.0.1:9".parse().unwrap());
        assert!(parse_listen_address("8080").is_err());
    }

    #[test]
    fn metrics_expose_reconcile_duration_and_results_per_kind() {
        let metrics = Metrics::default();
        drop(metrics.time_reconcile("CDTarget"));
        metrics.count_reconcile("CDTarget", "success");
        let text = metrics.encode();
        assert!(text.contains("cdtarget_reconcile_duration_seconds_count{kind=\"CDTarget\"} 1"), "{text}");
        assert!(text.contains("cdtarget_reconciles_total{kind=\"CDTarget\",result=\"success\"} 1"), "{text}");
    }

    #[test]
    fn metrics_expose_git_fetches_per_result_including_no_op_polls() {
        let metrics = Metrics::default();
        metrics.observe_fetch("unchanged", std::time::Duration::from_millis(3));
        metrics.observe_fetch("unchanged", std::time::Duration::from_millis(4));
        metrics.observe_fetch("AuthenticationFailed", std::time::Duration::from_millis(9));
        let text = metrics.encode();
        assert!(text.contains("cdtarget_git_fetch_duration_seconds_count{result=\"unchanged\"} 2"), "{text}");
        assert!(
            text.contains("cdtarget_git_fetch_duration_seconds_count{result=\"AuthenticationFailed\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn metrics_expose_webhook_requests_per_type_and_result() {
        let metrics = Metrics::default();
        let receiver = metrics.webhook.clone();
        receiver.observe("gitlab", "accepted", std::time::Duration::from_micros(300));
        receiver.observe("none", "not_found", std::time::Duration::from_micros(40));
        let text = metrics.encode();
        assert!(text.contains("cdtarget_webhook_requests_total{type=\"gitlab\",result=\"accepted\"} 1"), "{text}");
        assert!(text.contains("cdtarget_webhook_requests_total{type=\"none\",result=\"not_found\"} 1"), "{text}");
        assert!(text.contains("cdtarget_webhook_request_duration_seconds_count{type=\"gitlab\"} 1"), "{text}");
    }

    #[test]
    fn metrics_expose_applied_pruned_and_managed_objects() {
        let metrics = Metrics::default();
        metrics.observe_apply("cdtarget-system/team-a", 5, 0, 5);
        metrics.observe_apply("cdtarget-system/team-a", 4, 1, 4);
        let text = metrics.encode();
        assert!(text.contains("cdtarget_objects_applied_total 9"), "{text}");
        assert!(text.contains("cdtarget_objects_pruned_total 1"), "{text}");
        assert!(text.contains("cdtarget_managed_objects{registration=\"cdtarget-system/team-a\"} 4"), "{text}");
    }

    #[test]
    fn a_gone_registration_leaves_no_series_behind() {
        let metrics = Metrics::default();
        metrics.observe_apply("cdtarget-system/gone", 2, 0, 2);
        metrics.observe_apply("cdtarget-system/kept", 1, 0, 1);
        metrics.forget_registration("cdtarget-system/gone");
        let text = metrics.encode();
        assert!(!text.contains("registration=\"cdtarget-system/gone\""), "{text}");
        assert!(text.contains("cdtarget_managed_objects{registration=\"cdtarget-system/kept\"} 1"), "{text}");
    }

    #[test]
    fn metrics_count_writes_per_verb_and_kind() {
        let metrics = Metrics::default();
        metrics.count_write("apply", "ConfigMap");
        metrics.count_write("apply", "ConfigMap");
        metrics.count_write("status", "CDTarget");
        let text = metrics.encode();
        assert!(text.contains("cdtarget_api_writes_total{verb=\"apply\",kind=\"ConfigMap\"} 2"), "{text}");
        assert!(text.contains("cdtarget_api_writes_total{verb=\"status\",kind=\"CDTarget\"} 1"), "{text}");
    }
}
