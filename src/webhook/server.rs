//! The HTTP side of the receiver: `POST /hook/<digest>`, answered in well under a millisecond of
//! work; the sync itself runs afterwards in the controller.
//!
//! A request goes through, in this order (each step answers alone when it refuses). Nothing
//! shared is spent before the path is found and the headers pass, and no body byte is read
//! before every budget is held:
//!
//! | step | refusal |
//! | --- | --- |
//! | route and method | any other path `404 not found`; another method on `/hook/...` `405` |
//! | digest lookup (constant-time; no budget spent) | `404 not found`, the same answer as any unknown path |
//! | header checks ([`super::admit`]): length, media type, the proof the headers carry, the event | `413`, `415`, `401`, `400`, `200 ignored: ...` |
//! | the registration's bucket of body reads | `429`, `Retry-After` |
//! | the registration's share of bodies in flight | `503`, `Retry-After` |
//! | the global rate limit | `429`, `Retry-After` |
//! | the global budget of bodies in flight | `503`, `Retry-After` |
//! | body: a bounded read within the request timeout | `413` past the limit (chunked), `408` when too slow |
//! | the proof the body carries ([`super::verify::verify_body`]) | `401`, naming the header, never a value |
//! | ref filter ([`super::filter`]) | `400` for a payload that cannot be read; `200 ignored: ...` |
//! | the registration's rate limit (verified deliveries only, so strangers cannot use it up) | `429`, `Retry-After` |
//! | duplicate delivery id | `200 duplicate` |
//! | trigger | `503` when this replica does not lead; else `202 accepted` |
//!
//! Connections are served by hyper's HTTP/1 builder with a header read timeout (a client that
//! dribbles its headers, or idles on a kept-alive connection, is cut), a bounded head
//! ([`Limits::max_head_bytes`], `431` past it) and at most [`Limits::max_connections`] at once; a
//! `TimeoutLayer` bounds every request as a safety net.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tower_http::timeout::TimeoutLayer;
use tracing::{debug, info, warn};

use super::admit::{self, Refusal};
use super::budget::{Held, InFlight};
use super::dedupe::{self, Dedupe};
use super::filter::{self, Decision};
use super::index::{Index, Slot};
use super::rate::{Bucket, Rate};
use super::trigger::{Trigger, TriggerClosed};
use super::verify::{self, Pending, Verified};
use crate::api::tenant_repository::WebhookType;
use crate::telemetry::WebhookMetrics;

/// GitLab's (and the IETF draft's) duplicate key header.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// GitHub's delivery id, kept across redeliveries.
pub(crate) const GITHUB_DELIVERY: &str = "x-github-delivery";

/// The receiver's bounds.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest body read; more is answered 413. GitLab sends up to 25 MB, but a push payload
    /// lists at most 20 commits; 3 MiB is Flux's bound too.
    pub max_body_bytes: usize,
    /// Time allowed to read a request's body (and, with a second of slack, the whole request).
    pub request_timeout: Duration,
    /// Time allowed for a request's headers, and for an idle kept-alive connection.
    pub header_timeout: Duration,
    /// Largest request head (request line and headers) a connection buffers, at least 8 KiB; a
    /// larger one is answered 431 (hyper checks between reads, so up to twice this is buffered).
    /// With [`Limits::max_connections`] it bounds what anonymous clients can make the receiver
    /// hold before any check runs.
    pub max_head_bytes: usize,
    /// Connections served at once; more are closed on arrival.
    pub max_connections: usize,
    /// Body reads of all registrations together: requests that found their registration and
    /// passed the header checks (`None`: unlimited).
    pub global_rate: Option<Rate>,
    /// Verified deliveries of one registration (`None`: unlimited).
    pub registration_rate: Option<Rate>,
    /// Body reads of one registration, verified or not, taken before the global limit so that a
    /// flood on one path cannot use up everyone's (`None`: unlimited).
    pub registration_read_rate: Option<Rate>,
    /// Bytes all bodies being read may hold at once (a chunked body counts as
    /// [`Limits::max_body_bytes`]); a request that does not fit is answered 503 unread.
    pub in_flight_bytes: usize,
    /// Bytes the bodies of one registration may hold at once, within [`Limits::in_flight_bytes`].
    pub registration_in_flight_bytes: usize,
    /// Delivery ids remembered for duplicate detection.
    pub dedupe_capacity: usize,
    /// How long a delivery id is remembered.
    pub dedupe_ttl: Duration,
    /// Largest distance between a Standard Webhooks timestamp and the receiver's clock.
    pub timestamp_tolerance: Duration,
}

/// Default of [`Limits::max_body_bytes`]: 3 MiB.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// Default of [`Limits::in_flight_bytes`]: 32 MiB (ten bodies at the limit, thousands of
/// ordinary pushes), a sixteenth of the shipped Deployment's memory limit.
pub(crate) const DEFAULT_IN_FLIGHT_BYTES: usize = 32 * 1024 * 1024;
/// Default of [`Limits::registration_in_flight_bytes`]: a quarter of the global budget.
pub(crate) const DEFAULT_REGISTRATION_IN_FLIGHT_BYTES: usize = DEFAULT_IN_FLIGHT_BYTES / 4;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            // GitLab gives up after 10 s.
            request_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(5),
            // hyper's default is ~400 KB; a Git host's head is 1-2 KB.
            max_head_bytes: 64 * 1024,
            max_connections: 1024,
            global_rate: Some(Rate::new(100.0, 200)),
            registration_rate: Some(Rate::new(1.0, 20)),
            registration_read_rate: Some(Rate::new(5.0, 50)),
            in_flight_bytes: DEFAULT_IN_FLIGHT_BYTES,
            registration_in_flight_bytes: DEFAULT_REGISTRATION_IN_FLIGHT_BYTES,
            dedupe_capacity: dedupe::DEFAULT_CAPACITY,
            dedupe_ttl: dedupe::DEFAULT_TTL,
            timestamp_tolerance: verify::DEFAULT_TIMESTAMP_TOLERANCE,
        }
    }
}

/// Where an accepted delivery goes: the TenantRepository controller's [`Trigger`] in
/// production, a counter in tests and benchmarks.
pub trait Fire: Send + Sync {
    /// Requests a reconcile of `namespace/name`.
    fn fire(&self, namespace: &str, name: &str) -> Result<(), TriggerClosed>;
}

impl Fire for Trigger {
    fn fire(&self, namespace: &str, name: &str) -> Result<(), TriggerClosed> {
        Trigger::fire(self, namespace, name)
    }
}

/// The receiver's shared state: the index, the limits and their buckets, the budget of bodies in
/// flight, the duplicate memory, the trigger and the metrics. Never the kube client.
pub struct Receiver {
    index: Arc<Index>,
    limits: Limits,
    global: Mutex<Option<Bucket>>,
    in_flight: Arc<InFlight>,
    dedupe: Mutex<Dedupe>,
    trigger: RwLock<Option<Arc<dyn Fire>>>,
    metrics: WebhookMetrics,
}

impl Receiver {
    /// A receiver serving `index` within `limits`; it triggers nothing until
    /// [`Receiver::set_trigger`].
    pub fn new(index: Arc<Index>, limits: Limits, metrics: WebhookMetrics) -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Receiver {
            global: Mutex::new(limits.global_rate.map(|rate| Bucket::new(rate, now))),
            in_flight: Arc::default(),
            dedupe: Mutex::new(Dedupe::new(limits.dedupe_capacity, limits.dedupe_ttl)),
            trigger: RwLock::new(None),
            index,
            limits,
            metrics,
        })
    }

    /// Sets where accepted deliveries go (`None`: this replica does not lead, deliveries are
    /// answered 503).
    pub fn set_trigger(&self, trigger: Option<Arc<dyn Fire>>) {
        *self.trigger.write().unwrap_or_else(PoisonError::into_inner) = trigger;
    }

    /// The index this receiver serves.
    pub fn index(&self) -> &Arc<Index> {
        &self.index
    }

    /// The limits this receiver applies.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn current_trigger(&self) -> Option<Arc<dyn Fire>> {
        self.trigger.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn take_global(&self, now: Instant) -> Result<(), Duration> {
        match self.global.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            None => Ok(()),
            Some(bucket) => bucket.take(now),
        }
    }

    /// Bytes of bodies being read now (all registrations).
    pub fn bytes_in_flight(&self) -> usize {
        self.in_flight.bytes()
    }

    /// Spends what reading a body of `reserve` bytes for `slot` costs, cheapest refusal first and
    /// the registration's own budgets before the shared ones: its bucket of reads, its share of
    /// bodies in flight, the global bucket, the global budget of bodies in flight. The bytes are
    /// held until the returned guards are dropped.
    fn budget_body(&self, slot: &Slot, reserve: usize, now: Instant) -> Result<[Held; 2], Busy> {
        if let Some(rate) = self.limits.registration_read_rate {
            slot.take_read(rate, now).map_err(Busy::Rate)?;
        }
        let mine = slot
            .in_flight()
            .try_hold(reserve, self.limits.registration_in_flight_bytes)
            .ok_or(Busy::InFlight(Scope::Registration))?;
        self.take_global(now).map_err(Busy::Rate)?;
        let everyone =
            self.in_flight.try_hold(reserve, self.limits.in_flight_bytes).ok_or(Busy::InFlight(Scope::Global))?;
        Ok([mine, everyone])
    }

    fn first_time(&self, scope: &str, key: &str, now: Instant) -> bool {
        self.dedupe.lock().unwrap_or_else(PoisonError::into_inner).first_time(scope, key, now)
    }
}

// === answers ===

/// What a response counts as, for the metrics middleware.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    kind: &'static str,
    result: &'static str,
}

/// The metric label of a registration type.
pub(crate) fn type_label(kind: WebhookType) -> &'static str {
    match kind {
        WebhookType::Gitlab => "gitlab",
        WebhookType::Github => "github",
        WebhookType::GenericHmac => "generic-hmac",
        WebhookType::Generic => "generic",
    }
}

/// The label of requests that matched no registration.
const NO_TYPE: &str = "none";

fn answer(status: StatusCode, kind: &'static str, result: &'static str, text: &str) -> Response {
    let mut response =
        (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{text}\n")).into_response();
    response.extensions_mut().insert(Outcome { kind, result });
    response
}

/// The one answer for every path, digest or registration that is not served.
fn not_found() -> Response {
    answer(StatusCode::NOT_FOUND, NO_TYPE, "not_found", "not found")
}

fn rate_limited(kind: &'static str, retry_after: Duration) -> Response {
    let response = answer(StatusCode::TOO_MANY_REQUESTS, kind, "rate_limited", "rate limit reached; retry later");
    with_retry_after(response, retry_after)
}

fn with_retry_after(mut response: Response, retry_after: Duration) -> Response {
    let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// Whose budget of bodies in flight is spent.
#[derive(Clone, Copy, Debug)]
enum Scope {
    Registration,
    Global,
}

/// Why a body is not read now.
#[derive(Clone, Copy, Debug)]
enum Busy {
    /// A token bucket is empty; one is there after this long.
    Rate(Duration),
    /// A budget of bodies in flight is spent.
    InFlight(Scope),
}

fn busy(kind: &'static str, why: Busy, limits: &Limits) -> Response {
    match why {
        Busy::Rate(retry_after) => rate_limited(kind, retry_after),
        Busy::InFlight(scope) => {
            let text = match scope {
                Scope::Registration => "too many deliveries of this registration are being read; retry later",
                Scope::Global => "too many deliveries are being read; retry later",
            };
            // Every body now in flight is read or cut within the request timeout.
            let response = answer(StatusCode::SERVICE_UNAVAILABLE, kind, "busy", text);
            with_retry_after(response, limits.request_timeout)
        }
    }
}

/// The answer to a request refused by its headers.
fn refused(kind: &'static str, refusal: Refusal) -> Response {
    match refusal {
        Refusal::TooLarge { limit } => {
            answer(StatusCode::PAYLOAD_TOO_LARGE, kind, "too_large", &format!("body larger than {limit} bytes"))
        }
        Refusal::UnsupportedMediaType => {
            let mut response = answer(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                kind,
                "unsupported_media_type",
                "deliveries are JSON: Content-Type application/json (or none)",
            );
            response.headers_mut().insert(header::ACCEPT, HeaderValue::from_static("application/json"));
            response
        }
        Refusal::Unauthorized(rejection) => {
            answer(StatusCode::UNAUTHORIZED, kind, "unauthorized", &format!("unauthorized: {rejection}"))
        }
        Refusal::BadRequest(bad) => answer(StatusCode::BAD_REQUEST, kind, "bad_request", &bad.to_string()),
        Refusal::Ignored(why) => answer(StatusCode::OK, kind, "ignored", &format!("ignored: {why}")),
    }
}

/// The result label of a response that carries no [`Outcome`] (answered by a layer).
fn result_of_status(status: StatusCode) -> &'static str {
    match status {
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_client_error() => "bad_request",
        _ => "unavailable",
    }
}

// === the router ===

/// The receiver's routes: `POST /hook/{digest}`; every other path is 404, another method 405.
pub fn router(receiver: Arc<Receiver>) -> Router {
    let metrics = receiver.metrics.clone();
    // The handler bounds the body read itself; this layer only catches what slips past it.
    let timeout = receiver.limits.request_timeout + Duration::from_secs(1);
    Router::new()
        .route("/hook/{digest}", post(hook).fallback(method_not_allowed))
        .fallback(|| async { not_found() })
        .with_state(receiver)
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, timeout))
        .layer(middleware::from_fn_with_state(metrics, observe))
}

async fn method_not_allowed() -> Response {
    let mut response = answer(
        StatusCode::METHOD_NOT_ALLOWED,
        NO_TYPE,
        "method_not_allowed",
        "method not allowed; deliveries are POSTed",
    );
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}

/// Counts every answer by type and result, with its handling time.
async fn observe(State(metrics): State<WebhookMetrics>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let response = next.run(request).await;
    let outcome = response
        .extensions()
        .get::<Outcome>()
        .copied()
        .unwrap_or_else(|| Outcome { kind: NO_TYPE, result: result_of_status(response.status()) });
    metrics.observe(outcome.kind, outcome.result, started.elapsed());
    response
}

async fn hook(State(receiver): State<Arc<Receiver>>, request: Request) -> Response {
    let arrived = Instant::now();
    let (parts, body) = request.into_parts();
    // An unknown path costs a hex decode and a map probe, and spends no budget another request
    // could need.
    let digest = parts.uri.path().strip_prefix("/hook/").unwrap_or_default();
    let Some(slot) = receiver.index.lookup(digest) else {
        debug!("webhook: no registration for the path");
        return not_found();
    };
    let registration = &slot.registration;
    let kind = type_label(registration.kind);
    let limits = &receiver.limits;
    // hyper's framing: the exact length of a `Content-Length` body (0 without any), none for a
    // chunked one.
    let framed_length = body.size_hint().exact();
    let now_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let admitted = match admit::before_body(
        registration,
        &parts.headers,
        framed_length,
        limits.max_body_bytes,
        now_unix,
        limits.timestamp_tolerance,
    ) {
        Ok(admitted) => admitted,
        Err(refusal) => {
            debug!(registration = %registration.id(), ?refusal, "webhook: refused before the body");
            return refused(kind, refusal);
        }
    };
    let _held = match receiver.budget_body(&slot, admitted.reserve, arrived) {
        Ok(held) => held,
        Err(why) => {
            debug!(registration = %registration.id(), ?why, "webhook: no budget to read the body");
            return busy(kind, why, limits);
        }
    };
    let body = match read_body(body, limits).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            debug!(registration = %registration.id(), "webhook: body too large");
            return refused(kind, Refusal::TooLarge { limit: limits.max_body_bytes });
        }
        Err(BodyError::Timeout) => {
            debug!(registration = %registration.id(), "webhook: body not received in time");
            return answer(StatusCode::REQUEST_TIMEOUT, kind, "timeout", "the body did not arrive in time");
        }
        Err(BodyError::Broken) => {
            return answer(StatusCode::BAD_REQUEST, kind, "bad_request", "the body could not be read");
        }
    };
    handle(&receiver, &slot, kind, &parts.headers, &admitted.pending, &body, arrived)
}

/// Everything after the body is read: pure decisions plus the buckets, the duplicate memory and
/// the trigger.
fn handle(
    receiver: &Receiver,
    slot: &Slot,
    kind: &'static str,
    headers: &HeaderMap,
    pending: &Pending,
    body: &[u8],
    arrived: Instant,
) -> Response {
    let registration = &slot.registration;
    let verified = match verify::verify_body(pending, body, &registration.secrets) {
        Ok(verified) => verified,
        Err(rejection) => {
            debug!(registration = %registration.id(), reason = %rejection, "webhook: delivery refused");
            return refused(kind, Refusal::Unauthorized(rejection));
        }
    };
    let deleted = match filter::decide(registration.kind, headers, body, &registration.events, &registration.tracked) {
        Ok(Decision::Sync { deleted }) => deleted,
        Ok(Decision::Ignore(why)) => {
            debug!(registration = %registration.id(), reason = %why, "webhook: delivery ignored");
            return refused(kind, Refusal::Ignored(why));
        }
        Err(bad) => {
            debug!(registration = %registration.id(), reason = %bad, "webhook: unreadable delivery");
            return refused(kind, Refusal::BadRequest(bad));
        }
    };
    if let Some(rate) = receiver.limits.registration_rate
        && let Err(retry_after) = slot.take(rate, arrived)
    {
        debug!(registration = %registration.id(), "webhook: registration rate limit reached");
        return rate_limited(kind, retry_after);
    }
    let Some(trigger) = receiver.current_trigger() else {
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            kind,
            "unavailable",
            "this replica does not run the reconcilers; the next poll picks the push up",
        );
    };
    if let Some(key) = delivery_id(registration.kind, headers, &verified)
        && !receiver.first_time(&registration.id(), &key, arrived)
    {
        debug!(registration = %registration.id(), "webhook: duplicate delivery");
        return answer(StatusCode::OK, kind, "duplicate", "duplicate: this delivery was already accepted");
    }
    if trigger.fire(&registration.namespace, &registration.name).is_err() {
        warn!(registration = %registration.id(), "webhook: the TenantRepository controller is not running");
        return answer(StatusCode::SERVICE_UNAVAILABLE, kind, "unavailable", "the controller is shutting down");
    }
    info!(registration = %registration.id(), r#type = kind, deleted, "webhook: sync requested");
    answer(StatusCode::ACCEPTED, kind, "accepted", "accepted")
}

/// The duplicate key of a delivery: the signed `webhook-id` (a replay cannot change it), else
/// `Idempotency-Key`, else GitHub's delivery id.
fn delivery_id(kind: WebhookType, headers: &HeaderMap, verified: &Verified) -> Option<String> {
    let text = |name: &str| {
        headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned()).filter(|v| !v.is_empty())
    };
    verified
        .signed_id
        .clone()
        .or_else(|| text(IDEMPOTENCY_KEY))
        .or_else(|| if kind == WebhookType::Github { text(GITHUB_DELIVERY) } else { None })
}

enum BodyError {
    TooLarge,
    Timeout,
    Broken,
}

/// Reads at most `max_body_bytes` within `request_timeout` (a sender that trickles its body is
/// cut there). The length was checked against the limit before; a chunked body is cut at it.
async fn read_body(body: Body, limits: &Limits) -> Result<Vec<u8>, BodyError> {
    let limit = limits.max_body_bytes;
    let expected = body.size_hint().exact().map_or(0, |length| (length as usize).min(limit));
    let read = async {
        let mut stream = body.into_data_stream();
        let mut bytes = Vec::with_capacity(expected);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|_| BodyError::Broken)?;
            if bytes.len() + chunk.len() > limit {
                return Err(BodyError::TooLarge);
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    tokio::time::timeout(limits.request_timeout, read).await.unwrap_or(Err(BodyError::Timeout))
}

// === serving ===

/// Completes once `closing` is set (or its sender is gone).
async fn closed(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}

/// Serves the receiver on `listener` until `shutdown` completes, then lets requests in flight
/// finish (for at most the request timeout).
pub async fn serve(
    listener: TcpListener,
    receiver: Arc<Receiver>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = receiver.limits.clone();
    let app = router(receiver);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    debug!(%error, "webhook: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            debug!("webhook: connection limit reached; connection closed");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut closing = closing_rx.clone();
        let header_timeout = limits.header_timeout;
        // hyper refuses (panics on) a read buffer below 8 KiB.
        let max_head_bytes = limits.max_head_bytes.max(8 * 1024);
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout).max_buf_size(max_head_bytes);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = closed(&mut closing) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.as_mut().await;
                }
            }
        });
        // Reap finished connections so the set stays as small as the open ones.
        while connections.try_join_next().is_some() {}
    }
    let _ = closing_tx.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.request_timeout, drained).await.is_err() {
        connections.abort_all();
    }
    Ok(())
}
