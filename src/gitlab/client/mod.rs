//! A thin GitLab REST client (reqwest) for the few endpoints the syncer needs: project lookup,
//! deploy keys, project hooks, commit statuses and comments. It pages with `per_page=100`, waits out both kinds of 429,
//! retries 5xx and connection failures with backoff, bounds every body it reads, and maps
//! failures to [`GitLabError`]s whose messages never hold the token.
//!
//! - [`config`]: the token, the clock, the retry policy and the configuration;
//! - [`wire`]: what GitLab returns and what the client sends;
//! - [`endpoints`]: one method per endpoint;
//! - this module: the client and its transport (retries, 429s, paging, bounded reads, the
//!   requests in flight and their counts).

mod config;
mod endpoints;
mod wire;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{ErrorKind, GitLabError};

/// Items asked for per page: GitLab's maximum.
pub(crate) const PER_PAGE: usize = 100;
/// Pages read from one listing at most (10,000 items): a guard against a server that never ends.
const MAX_PAGES: usize = 100;

pub use config::{ClientConfig, Clock, RetryPolicy, Secret, SystemClock};
pub use endpoints::NOTE_RATE_LIMIT_WAIT;
pub use wire::{
    Author, CommentPosted, CommitComment, CommitState, CommitStatus, DeployKey, Hook, HookParams, OTHER_EVENT_FLAGS,
    Project, StatusParams, StatusPosted,
};

// === the client ===

/// Requests sent so far, by method (retries included), and the 429s received.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests by method (`GET`, `POST`, `PUT`, `DELETE`).
    pub requests: BTreeMap<String, u64>,
    /// 429 answers received.
    pub throttled: u64,
    /// Requests sent again after a 5xx, a 429 or a connection failure.
    pub retries: u64,
}

impl ClientStats {
    /// Requests of `method`.
    pub fn count(&self, method: &str) -> u64 {
        self.requests.get(method).copied().unwrap_or(0)
    }

    /// Requests other than `GET`.
    pub fn writes(&self) -> u64 {
        self.requests.iter().filter(|(method, _)| method.as_str() != "GET").map(|(_, n)| n).sum()
    }
}

/// A GitLab REST client; cheap to clone (one connection pool, one rate-limit gate shared by
/// every clone, so concurrent syncs pause together when GitLab says so).
#[derive(Clone)]
pub struct GitLabClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    api: Url,
    token: HeaderValue,
    max_body_bytes: usize,
    retry: RetryPolicy,
    clock: Arc<dyn Clock>,
    /// The shared view of GitLab's throttle window.
    gate: Mutex<Gate>,
    /// Woken whenever a request is answered (or fails): the gate may open.
    answered: tokio::sync::Notify,
    stats: Mutex<ClientStats>,
    jitter: AtomicU64,
    /// Told the outcome of every call (the controller's metrics), once set.
    observer: std::sync::OnceLock<RequestObserver>,
}

/// Receives the method and outcome of every call, after the client's retries (the failure's
/// class, never its message).
pub(crate) type RequestObserver = Arc<dyn Fn(&str, Result<(), ErrorKind>) + Send + Sync>;

impl fmt::Debug for GitLabClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitLabClient").field("api", &self.inner.api.as_str()).finish_non_exhaustive()
    }
}

/// What the client knows of GitLab's throttle window (`RateLimit-Remaining` and
/// `RateLimit-Reset`, which newer GitLab sends on every answer when the throttle is on).
///
/// GitLab's count when it answered a request is exact; requests still in flight may or may not
/// be in it. So `remaining - in_flight` never overestimates what is left: a request is sent only
/// while that is positive. At zero with requests in flight, their answers are awaited (they
/// sharpen the count); at zero with none, the window's end is.
#[derive(Default)]
struct Gate {
    /// Nobody sends before this moment (a 429's `Retry-After`).
    paused_until: Option<SystemTime>,
    /// The lowest `RateLimit-Remaining` answered in the current window.
    remaining: Option<i64>,
    /// When the current window ends.
    reset: Option<SystemTime>,
    /// Requests sent and not answered yet.
    in_flight: i64,
}

/// A request counted in the gate until it is answered or fails.
struct InFlight<'a> {
    client: &'a GitLabClient,
}

impl InFlight<'_> {
    /// Takes `RateLimit-Remaining` and `-Reset` of an answer.
    fn observe(&self, headers: &HeaderMap) {
        let (Some(left), Some(reset)) =
            (header_u64(headers, "ratelimit-remaining"), header_u64(headers, "ratelimit-reset"))
        else {
            return;
        };
        let left = i64::try_from(left).unwrap_or(i64::MAX);
        let reset = UNIX_EPOCH + Duration::from_secs(reset);
        let mut gate = self.client.gate();
        match gate.reset {
            Some(known) if known > reset => {} // an answer from a window already over
            Some(known) if known == reset => gate.remaining = Some(gate.remaining.map_or(left, |r| r.min(left))),
            _ => {
                gate.reset = Some(reset);
                gate.remaining = Some(left);
            }
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.client.gate().in_flight -= 1;
        self.client.inner.answered.notify_waiters();
    }
}

/// One answer, body read (bounded).
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// How one request treats answers beyond the retry policy.
#[derive(Clone, Copy, Debug, Default)]
struct Options {
    /// 409 (commit status lock held by another update) is retried with backoff.
    retry_conflict: bool,
    /// An application rate limit (429 without `Retry-After` or `RateLimit-*`) is not waited out:
    /// it fails at once asking for at least this wait.
    app_limit_wait: Option<Duration>,
}

impl GitLabClient {
    /// A client for `config.base_url`; refuses URLs that are not `http(s)://host[/path]`, carry
    /// credentials or a query, and tokens that cannot be an HTTP header.
    pub fn new(config: ClientConfig) -> Result<Self, GitLabError> {
        let api = api_url(&config.base_url)?;
        let mut token = HeaderValue::from_str(config.token.expose()).map_err(|_| {
            GitLabError::new(ErrorKind::InvalidConfig, "the bot token holds characters an HTTP header cannot carry")
        })?;
        token.set_sensitive(true);
        let origin = api.origin();
        // Redirects (moved projects answer 301) are followed only on the same origin: the
        // PRIVATE-TOKEN header would otherwise go to whatever host a Location names.
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 || attempt.url().origin() != origin {
                attempt.stop()
            } else {
                attempt.follow()
            }
        });
        let http = reqwest::Client::builder()
            .user_agent(concat!("cdtarget/", env!("CARGO_PKG_VERSION")))
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .redirect(redirects)
            .build()
            .map_err(|e| GitLabError::new(ErrorKind::InvalidConfig, format!("cannot build the HTTP client: {e}")))?;
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
        Ok(GitLabClient {
            inner: Arc::new(Inner {
                http,
                api,
                token,
                max_body_bytes: config.max_body_bytes,
                retry: config.retry,
                clock: config.clock,
                gate: Mutex::new(Gate::default()),
                answered: tokio::sync::Notify::new(),
                stats: Mutex::new(ClientStats::default()),
                jitter: AtomicU64::new(seed | 1),
                observer: std::sync::OnceLock::new(),
            }),
        })
    }

    /// `<base>/api/v4/`.
    pub fn api_url(&self) -> &str {
        self.inner.api.as_str()
    }

    /// Tells `observer` the outcome of every call from now on (of this client and its clones); a
    /// second observer is ignored.
    pub fn observe_requests(&self, observer: RequestObserver) {
        let _ = self.inner.observer.set(observer);
    }

    /// Requests sent so far.
    pub fn stats(&self) -> ClientStats {
        self.inner.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl GitLabClient {
    // === internals ===

    /// `<api>/<segments...>`, each segment percent-encoded on its own (`/` becomes `%2F`).
    fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.inner.api.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Every page of a listing: `X-Next-Page` when GitLab sends it, else `Link: rel="next"`,
    /// else the next page while pages come back full.
    async fn list(&self, segments: &[&str], project_id: i64) -> Result<Vec<Value>, GitLabError> {
        let what = format!("listing {} of project {project_id}", segments.last().unwrap_or(&"").replace('_', " "));
        self.list_filtered(segments, &[], &what).await
    }

    /// [`Self::list`] with query `filters` sent on every page.
    async fn list_filtered(
        &self,
        segments: &[&str],
        filters: &[(&str, String)],
        what: &str,
    ) -> Result<Vec<Value>, GitLabError> {
        let base = self.endpoint(segments);
        let mut query = format!("per_page={PER_PAGE}&page=1");
        let mut items = Vec::new();
        let what = what.to_owned();
        for _ in 0..MAX_PAGES {
            let mut url = base.clone();
            url.set_query(Some(&query));
            if !filters.is_empty() {
                let mut pairs = url.query_pairs_mut();
                for (name, value) in filters {
                    if !query.split('&').any(|pair| pair.split('=').next() == Some(name)) {
                        pairs.append_pair(name, value);
                    }
                }
            }
            let answer = self.send(Method::GET, url, None, &what).await?;
            let page: Vec<Value> = parse(&answer.body, "a page of the listing")?;
            let count = page.len();
            items.extend(page);
            match next_page(&answer.headers, &query, count) {
                Some(next) if next != query => query = next,
                _ => return Ok(items),
            }
        }
        Err(GitLabError::new(
            ErrorKind::InvalidResponse,
            format!("{what}: more than {MAX_PAGES} pages of {PER_PAGE}; GitLab's pagination does not end"),
        ))
    }

    /// Sends one request with the retries of the policy; returns 2xx answers, maps the rest.
    async fn send(&self, method: Method, url: Url, body: Option<&Value>, what: &str) -> Result<Answer, GitLabError> {
        self.send_with(method, url, body, what, Options::default()).await
    }

    /// [`Self::send`] with `options`.
    async fn send_with(
        &self,
        method: Method,
        url: Url,
        body: Option<&Value>,
        what: &str,
        options: Options,
    ) -> Result<Answer, GitLabError> {
        let result = self.send_with_retries(method.clone(), url, body, what, options).await;
        if let Some(observer) = self.inner.observer.get() {
            observer(method.as_str(), result.as_ref().map(|_| ()).map_err(|e| e.kind));
        }
        result
    }

    async fn send_with_retries(
        &self,
        method: Method,
        url: Url,
        body: Option<&Value>,
        what: &str,
        options: Options,
    ) -> Result<Answer, GitLabError> {
        let inner = &self.inner;
        let idempotent = method != Method::POST;
        // Failures (5xx, connection) count against `max_attempts`; 429s against the time
        // waited for them, since a per-minute window can take longer than a few attempts.
        let mut attempt = 0;
        let mut throttles = 0;
        let mut throttled_for = Duration::ZERO;
        loop {
            attempt += 1;
            let sent = self.acquire().await;
            self.count(&method, attempt + throttles > 1);
            let mut request =
                inner.http.request(method.clone(), url.clone()).header("PRIVATE-TOKEN", inner.token.clone());
            if let Some(body) = body {
                request = request.json(body);
            }
            let last = attempt >= inner.retry.max_attempts;
            let response = match request.send().await {
                Ok(response) => response,
                // A POST that timed out may have been carried out: not sent twice (the next
                // reconcile lists and sees). A refused connection never reached GitLab.
                Err(e) if !last && (e.is_connect() || (e.is_timeout() && idempotent)) => {
                    drop(sent);
                    inner.clock.sleep(self.backoff(attempt)).await;
                    continue;
                }
                Err(e) => return Err(transport_error(what, &e)),
            };
            let status = response.status();
            let headers = response.headers().clone();
            sent.observe(&headers);
            drop(sent);
            if status == StatusCode::TOO_MANY_REQUESTS {
                inner.stats.lock().unwrap_or_else(|e| e.into_inner()).throttled += 1;
                let body = read_body(response, 4096).await.unwrap_or_default();
                attempt -= 1;
                throttles += 1;
                let (wait, announced) = self.rate_limit_wait(&headers, throttles);
                let (wait, give_up) = match options.app_limit_wait {
                    // notes_create counts per minute and names no time: come back later.
                    Some(floor) if !announced => (floor.max(wait), true),
                    _ => (wait, throttled_for + wait > inner.retry.max_rate_limit_wait),
                };
                if give_up {
                    let mut error = GitLabError::new(
                        ErrorKind::RateLimited,
                        format!(
                            "{what}: GitLab rate limit ({}); asked to wait {}s more",
                            error_text(&body),
                            wait.as_secs_f64().ceil()
                        ),
                    )
                    .with_status(429);
                    error.retry_after = Some(wait);
                    return Err(error);
                }
                throttled_for += wait;
                if announced {
                    // The throttle counts every request of the token: everyone waits.
                    self.pause_until(inner.clock.now() + wait);
                } else {
                    // An application limit of one endpoint: only this request backs off.
                    inner.clock.sleep(wait).await;
                }
                continue;
            }
            let conflict = status == StatusCode::CONFLICT && options.retry_conflict;
            if (status.is_server_error() || conflict) && !last {
                drop(response);
                inner.clock.sleep(self.backoff(attempt)).await;
                continue;
            }
            let body = match read_body(response, inner.max_body_bytes).await {
                Ok(body) => body,
                Err(BodyError::TooLarge) => {
                    return Err(GitLabError::new(
                        ErrorKind::InvalidResponse,
                        format!("{what}: the answer is larger than {} bytes", inner.max_body_bytes),
                    )
                    .with_status(status.as_u16()));
                }
                Err(BodyError::Transport(e)) => return Err(transport_error(what, &e)),
            };
            if status.is_success() {
                return Ok(Answer { status, headers, body });
            }
            return Err(classify(status, &headers, &body, what));
        }
    }

    /// Waits while the gate is closed (a 429 asked everyone to wait, or what is left of the
    /// window may all be taken by requests in flight), then counts this request in.
    async fn acquire(&self) -> InFlight<'_> {
        enum Step {
            Go,
            AwaitAnswer,
            Sleep(Duration),
        }
        let clock = &self.inner.clock;
        loop {
            let answered = self.inner.answered.notified();
            tokio::pin!(answered);
            let step = {
                let mut gate = self.gate();
                let now = clock.now();
                if gate.reset.is_some_and(|reset| now >= reset) {
                    gate.remaining = None;
                    gate.reset = None;
                }
                let pause = gate.paused_until.and_then(|until| until.duration_since(now).ok()).unwrap_or_default();
                match gate.remaining {
                    _ if !pause.is_zero() => Step::Sleep(pause),
                    Some(left) if left - gate.in_flight <= 0 && gate.in_flight > 0 => {
                        // Registered under the lock: an answer arriving now still wakes us.
                        answered.as_mut().enable();
                        Step::AwaitAnswer
                    }
                    Some(left) if left <= 0 => {
                        Step::Sleep(gate.reset.and_then(|reset| reset.duration_since(now).ok()).unwrap_or_default())
                    }
                    _ => {
                        gate.in_flight += 1;
                        Step::Go
                    }
                }
            };
            match step {
                Step::Go => return InFlight { client: self },
                Step::AwaitAnswer => answered.await,
                Step::Sleep(wait) => {
                    clock.sleep(wait).await;
                    // What was waited for is over (also when the clock only pretends to wait).
                    let mut gate = self.gate();
                    if gate.paused_until.is_some_and(|until| until <= clock.now() + wait) {
                        gate.paused_until = None;
                    }
                    if gate.remaining.is_some_and(|left| left <= 0) {
                        gate.remaining = None;
                        gate.reset = None;
                    }
                }
            }
        }
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.inner.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pause_until(&self, until: SystemTime) {
        let mut gate = self.gate();
        if gate.paused_until.is_none_or(|current| current < until) {
            gate.paused_until = Some(until);
        }
    }

    /// `Retry-After` (seconds) when sent, else `RateLimit-Reset` (Unix seconds), else backoff;
    /// and whether GitLab announced the wait (a throttle of the whole token).
    fn rate_limit_wait(&self, headers: &HeaderMap, throttles: u32) -> (Duration, bool) {
        if let Some(seconds) = header_u64(headers, "retry-after") {
            return (Duration::from_secs(seconds), true);
        }
        if let Some(reset) = header_u64(headers, "ratelimit-reset") {
            let reset = UNIX_EPOCH + Duration::from_secs(reset);
            let wait = reset.duration_since(self.inner.clock.now()).unwrap_or_default();
            return (wait.max(Duration::from_millis(100)), true);
        }
        (self.backoff(throttles), false)
    }

    /// `base * 2^(attempt-1)`, capped, with jitter in its upper half.
    fn backoff(&self, attempt: u32) -> Duration {
        let policy = &self.inner.retry;
        let full = policy.base_backoff.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(policy.max_backoff);
        // xorshift: jitter only has to spread clients apart, not be unpredictable.
        let mut x = self.inner.jitter.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.inner.jitter.store(x, Ordering::Relaxed);
        let half = full / 2;
        half + half.mul_f64((x % 1000) as f64 / 1000.0)
    }

    fn count(&self, method: &Method, retry: bool) {
        let mut stats = self.inner.stats.lock().unwrap_or_else(|e| e.into_inner());
        *stats.requests.entry(method.as_str().to_owned()).or_default() += 1;
        if retry {
            stats.retries += 1;
        }
    }
}

/// `<base>/api/v4/` from what an operator gives: with or without `/api/v4`, with a trailing `/`
/// or not, on a relative path (`https://host/gitlab`) or not.
fn api_url(base: &str) -> Result<Url, GitLabError> {
    let invalid = |why: &str| {
        GitLabError::new(
            ErrorKind::InvalidConfig,
            format!(
                "GitLab URL `{}` {why}; expected e.g. https://gitlab.example.com",
                crate::text::redact_userinfo(base)
            ),
        )
    };
    let mut url = Url::parse(base.trim()).map_err(|_| invalid("is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid("is not an http(s) URL with a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("carries credentials; give the token with the token file"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("has a query or fragment"));
    }
    let path = url.path().trim_end_matches('/').trim_end_matches("/api/v4").trim_end_matches('/').to_owned();
    url.set_path(&format!("{path}/api/v4/"));
    Ok(url)
}

/// The query of the next page, or `None` on the last.
fn next_page(headers: &HeaderMap, current: &str, count: usize) -> Option<String> {
    if let Some(next) = headers.get("x-next-page") {
        let next = next.to_str().ok()?.trim();
        return match next {
            "" => None,
            page => Some(format!("per_page={PER_PAGE}&page={}", page.parse::<u64>().ok()?)),
        };
    }
    if let Some(link) = headers.get("link").and_then(|v| v.to_str().ok()) {
        // The link's own host may be GitLab's external URL, not the one we talk to: take only
        // its query and keep our URL.
        return link.split(',').find(|part| part.contains("rel=\"next\"")).and_then(|part| {
            let target = part.split_once('<')?.1.split_once('>')?.0;
            Url::parse(target).ok()?.query().map(str::to_owned)
        });
    }
    if count < PER_PAGE {
        return None;
    }
    let page = current.split('&').find_map(|pair| pair.strip_prefix("page="))?.parse::<u64>().ok()?;
    Some(format!("per_page={PER_PAGE}&page={}", page + 1))
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

enum BodyError {
    TooLarge,
    Transport(reqwest::Error),
}

/// Reads at most `limit` bytes of body; more is an error, not a truncation.
async fn read_body(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|length| length > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Transport)? {
        if body.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn parse<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, GitLabError> {
    serde_json::from_slice(body).map_err(|e| invalid_json(what, &e))
}

fn invalid_json(what: &str, error: &serde_json::Error) -> GitLabError {
    GitLabError::new(ErrorKind::InvalidResponse, format!("GitLab answered {what} with unexpected JSON: {error}"))
}

fn transport_error(what: &str, error: &reqwest::Error) -> GitLabError {
    let why = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "the connection failed"
    };
    // The URL holds no secret (the token travels in a header), but the path is noise here.
    let detail = std::error::Error::source(error).map(|s| format!(": {s}")).unwrap_or_default();
    GitLabError::new(ErrorKind::Unavailable, format!("{what}: GitLab {why}{detail}"))
}

/// The error text of a GitLab body: `message` (a string or an object of field errors) or
/// `error` (+ `error_description`), else the text itself, shortened.
pub(crate) fn error_text(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(fields)) => match (fields.get("message"), fields.get("error")) {
            (Some(Value::String(message)), _) => message.clone(),
            (Some(message), _) => message.to_string(),
            (None, Some(error)) => {
                let error = error.as_str().map(str::to_owned).unwrap_or_else(|| error.to_string());
                match fields.get("error_description").and_then(Value::as_str) {
                    Some(description) => format!("{error}: {description}"),
                    None => error,
                }
            }
            (None, None) => Value::Object(fields).to_string(),
        },
        _ => String::from_utf8_lossy(body).trim().to_owned(),
    };
    let mut text: String = text.chars().take(300).collect();
    if text.is_empty() {
        text = "no body".into();
    }
    text
}

/// Maps a non-2xx answer to an error naming what is wrong and what would be accepted.
fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8], what: &str) -> GitLabError {
    let text = error_text(body);
    let code = status.as_u16();
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let (kind, message) = match code {
        401 => (
            ErrorKind::Unauthorized,
            format!(
                "{what}: GitLab refused the bot token (401, {text}); it is missing, invalid, expired or revoked: give a personal, group or project access token with scope `api`"
            ),
        ),
        403 if json.get("error").and_then(Value::as_str) == Some("insufficient_scope") => (
            ErrorKind::InsufficientScope,
            format!(
                "{what}: the bot token lacks scope `api` (403, {text}); `read_api` only reads: use a token with scope `api`"
            ),
        ),
        403 => (
            ErrorKind::NotMaintainer,
            format!("{what}: GitLab forbids it (403, {text}); the bot user must be Maintainer or Owner of the project"),
        ),
        404 if text.contains("Project Not Found") => (
            ErrorKind::ProjectNotFound,
            format!(
                "{what}: project not found (404); it does not exist, or the bot user is not a member who can see it: check spec.gitlab.project and add the bot as Maintainer"
            ),
        ),
        404 => (ErrorKind::NotFound, format!("{what}: not found (404, {text})")),
        400 if key_taken(&json) => (
            ErrorKind::KeyTakenElsewhere,
            format!(
                "{what}: GitLab refuses the public key, its fingerprint is already taken (400, {text}): the key is registered on a project the bot cannot see or as a user's SSH key; rotate the key pair (annotation cdtarget.io/rotate-deploy-key) or remove the other registration"
            ),
        ),
        300..=399 => (
            ErrorKind::InvalidResponse,
            format!(
                "{what}: GitLab redirected to {} (another host, not followed with the token); give the URL GitLab's API is served from",
                headers.get("location").and_then(|v| v.to_str().ok()).unwrap_or("an unknown place")
            ),
        ),
        400..=499 => (ErrorKind::Rejected, format!("{what}: GitLab refused the request ({code}, {text})")),
        500..=599 => (ErrorKind::Unavailable, format!("{what}: GitLab failed ({code}, {text}) after retries")),
        _ => (ErrorKind::InvalidResponse, format!("{what}: unexpected answer {code} ({text})")),
    };
    GitLabError::new(kind, message).with_status(code)
}

/// `{"message":{"deploy_key.fingerprint_sha256":["has already been taken"]}}` (or the older
/// `deploy_key.fingerprint` / `deploy_key.key` fields).
fn key_taken(json: &Value) -> bool {
    let Some(fields) = json.get("message").and_then(Value::as_object) else { return false };
    ["deploy_key.fingerprint_sha256", "deploy_key.fingerprint", "deploy_key.key", "fingerprint_sha256", "fingerprint"]
        .iter()
        .filter_map(|field| fields.get(*field)?.as_array())
        .flatten()
        .any(|message| message.as_str().is_some_and(|m| m.contains("already been taken")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_url_accepts_the_usual_spellings() {
        for base in [
            "https://gl.example.com",
            "https://gl.example.com/",
            "https://gl.example.com/api/v4",
            "https://gl.example.com/api/v4/",
        ] {
            assert_eq!(api_url(base).unwrap().as_str(), "https://gl.example.com/api/v4/", "{base}");
        }
        assert_eq!(api_url("http://127.0.0.1:8080/gitlab/").unwrap().as_str(), "http://127.0.0.1:8080/gitlab/api/v4/");
        let error = api_url("https://bot:glpat-xyz@gl.example.com").unwrap_err();
        assert!(!error.message.contains("glpat-xyz") && error.message.contains("carries credentials"), "{error}");
        assert_eq!(api_url("ftp://x").unwrap_err().kind, ErrorKind::InvalidConfig);
    }

    #[test]
    fn project_paths_are_one_encoded_segment() {
        let client = GitLabClient::new(ClientConfig::new("https://gl.example.com", Secret::new("t"))).unwrap();
        let url = client.endpoint(&["projects", "group/sub group/app"]);
        assert_eq!(url.as_str(), "https://gl.example.com/api/v4/projects/group%2Fsub%20group%2Fapp");
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn next_page_follows_x_next_page_then_link_then_full_pages() {
        let first = "per_page=100&page=1";
        assert_eq!(next_page(&headers(&[("x-next-page", "2")]), first, 100).as_deref(), Some("per_page=100&page=2"));
        assert_eq!(next_page(&headers(&[("x-next-page", "")]), first, 100), None, "empty on the last page");
        let link = "<https://other.example/api/v4/projects/1/hooks?page=3&per_page=100>; rel=\"next\", <https://other.example/api/v4/projects/1/hooks?page=1&per_page=100>; rel=\"first\"";
        assert_eq!(next_page(&headers(&[("link", link)]), first, 100).as_deref(), Some("page=3&per_page=100"));
        let last = "<https://x/api/v4/p?page=1>; rel=\"first\"";
        assert_eq!(next_page(&headers(&[("link", last)]), first, 100), None);
        assert_eq!(
            next_page(&HeaderMap::new(), first, 100).as_deref(),
            Some("per_page=100&page=2"),
            "no headers, full page"
        );
        assert_eq!(next_page(&HeaderMap::new(), first, 99), None, "no headers, short page");
    }

    #[test]
    fn error_bodies_of_both_shapes_are_read() {
        assert_eq!(error_text(br#"{"message":"401 Unauthorized"}"#), "401 Unauthorized");
        assert_eq!(
            error_text(br#"{"error":"invalid_token","error_description":"Token is expired."}"#),
            "invalid_token: Token is expired."
        );
        assert_eq!(
            error_text(br#"{"message":{"deploy_key.fingerprint_sha256":["has already been taken"]}}"#),
            r#"{"deploy_key.fingerprint_sha256":["has already been taken"]}"#
        );
        assert_eq!(error_text(b"Retry later\n"), "Retry later");
        assert_eq!(error_text(b""), "no body");
    }

    #[test]
    fn statuses_map_to_kinds() {
        let kind = |code: u16, body: &str| {
            classify(StatusCode::from_u16(code).unwrap(), &HeaderMap::new(), body.as_bytes(), "x").kind
        };
        assert_eq!(kind(401, r#"{"message":"401 Unauthorized"}"#), ErrorKind::Unauthorized);
        assert_eq!(
            kind(403, r#"{"error":"insufficient_scope","error_description":"...","scope":"api"}"#),
            ErrorKind::InsufficientScope
        );
        assert_eq!(kind(403, r#"{"message":"403 Forbidden"}"#), ErrorKind::NotMaintainer);
        assert_eq!(kind(404, r#"{"message":"404 Project Not Found"}"#), ErrorKind::ProjectNotFound);
        assert_eq!(kind(404, r#"{"message":"404 Deploy key Not Found"}"#), ErrorKind::NotFound);
        assert_eq!(
            kind(400, r#"{"message":{"deploy_key.fingerprint_sha256":["has already been taken"]}}"#),
            ErrorKind::KeyTakenElsewhere
        );
        assert_eq!(
            kind(400, r#"{"message":{"deploy_key.fingerprint":["has already been taken"]}}"#),
            ErrorKind::KeyTakenElsewhere
        );
        assert_eq!(kind(400, r#"{"error":"key is missing"}"#), ErrorKind::Rejected);
        assert_eq!(kind(422, r#"{"error":"Invalid url given"}"#), ErrorKind::Rejected);
        assert_eq!(kind(500, r#"{"message":"500 Internal Server Error"}"#), ErrorKind::Unavailable);
    }

    #[test]
    fn secrets_never_show() {
        let token = Secret::new("glpat-very-secret");
        assert_eq!(format!("{token:?} {token}"), "*** ***");
        let config = ClientConfig::new("https://gl.example.com", token.clone());
        assert!(!format!("{config:?}").contains("glpat"));
        let params = HookParams {
            url: "https://r.example/hook/x".into(),
            token: Secret::new("hook-secret"),
            name: "n".into(),
            tag_push_events: false,
            branch_filter: String::new(),
            switch_off: vec![],
        };
        assert!(!format!("{params:?}").contains("hook-secret"));
        assert_eq!(params.body()["token"], "hook-secret", "but the body carries it");
    }
}
