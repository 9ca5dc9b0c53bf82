//! A thin GitLab REST client (reqwest) for the few endpoints the syncer needs: project lookup,
//! deploy keys and project hooks. It pages with `per_page=100`, waits out both kinds of 429,
//! retries 5xx and connection failures with backoff, bounds every body it reads, and maps
//! failures to [`GitLabError`]s whose messages never hold the token.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::error::{ErrorKind, GitLabError};
use crate::text::short_revision;

/// Items asked for per page: GitLab's maximum.
pub const PER_PAGE: usize = 100;
/// Pages read from one listing at most (10,000 items): a guard against a server that never ends.
const MAX_PAGES: usize = 100;
/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

// === secrets ===

/// A secret string (the bot token, a webhook token): `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value` as it is.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// Reads a token file: at most 64 KiB, surrounding whitespace removed, non-empty, one line.
    pub fn from_file(path: &Path, what: &str) -> Result<Self, GitLabError> {
        let invalid =
            |why: String| GitLabError::new(ErrorKind::InvalidConfig, format!("{what} {}: {why}", path.display()));
        let size = std::fs::metadata(path).map_err(|e| invalid(format!("cannot read it: {e}")))?.len();
        if size > MAX_TOKEN_FILE_BYTES {
            return Err(invalid(format!(
                "is {size} bytes; a token file of at most {MAX_TOKEN_FILE_BYTES} bytes is read"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read it: {e}")))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(invalid("is empty; expected the token on one line".into()));
        }
        if token.contains(['\n', '\r']) {
            return Err(invalid("holds more than one line; expected the token alone on one line".into()));
        }
        Ok(Secret(token.to_owned()))
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

// === time ===

/// The wall clock and the sleeping the client does while it waits out a 429 or backs off.
/// Injectable so tests can see the waits without spending them.
pub trait Clock: Send + Sync + 'static {
    /// Now, for `RateLimit-Reset` (Unix seconds).
    fn now(&self) -> SystemTime;
    /// Waits `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// The real clock: `SystemTime::now` and `tokio::time::sleep`.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

// === configuration ===

/// How often and how long the client retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included, when it meets 5xx or connection failures
    /// (429s do not count here).
    pub max_attempts: u32,
    /// First backoff after a 5xx or a connection failure; doubled each time, with jitter.
    pub base_backoff: Duration,
    /// Longest single backoff.
    pub max_backoff: Duration,
    /// Longest total wait for 429s one request accepts (`Retry-After`, `RateLimit-Reset`, or
    /// backoff for an application limit that names no time); beyond it the request fails with
    /// [`ErrorKind::RateLimited`] so the caller requeues instead of holding a worker.
    pub max_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_rate_limit_wait: Duration::from_secs(120),
        }
    }
}

/// Everything a [`GitLabClient`] is built from.
#[derive(Clone)]
pub struct ClientConfig {
    /// The GitLab instance, e.g. `https://gitlab.example.com` (a trailing `/api/v4` is accepted).
    pub base_url: String,
    /// The bot's access token, sent as `PRIVATE-TOKEN`.
    pub token: Secret,
    /// Upper bound on one request, body included.
    pub timeout: Duration,
    /// Upper bound on connecting.
    pub connect_timeout: Duration,
    /// Largest response body read.
    pub max_body_bytes: usize,
    /// Retries and waits.
    pub retry: RetryPolicy,
    /// The clock waits go through.
    pub clock: Arc<dyn Clock>,
}

impl ClientConfig {
    /// Defaults: 30 s per request, 10 s to connect, 8 MiB bodies, [`RetryPolicy::default`].
    pub fn new(base_url: impl Into<String>, token: Secret) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            token,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_body_bytes: 8 << 20,
            retry: RetryPolicy::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("token", &self.token)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

// === what GitLab returns ===

/// `GET /projects/:id`, the fields used.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Project {
    /// Numeric id: stable across renames and transfers.
    pub id: i64,
    /// `group/subgroup/project`.
    #[serde(default)]
    pub path_with_namespace: String,
}

/// A deploy key linked to a project.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct DeployKey {
    /// Id of the key (shared by every project it is linked to).
    pub id: i64,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// GitLab's stored form of the public key.
    #[serde(default)]
    pub key: String,
    /// `SHA256:...`, what keys are matched by.
    #[serde(default)]
    pub fingerprint_sha256: Option<String>,
    /// Write access on this project; absent in `enable` answers.
    #[serde(default)]
    pub can_push: Option<bool>,
}

/// A project hook. GitLab never returns its token.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Hook {
    /// Id of the hook.
    pub id: i64,
    /// Where deliveries go.
    pub url: String,
    /// Name (GitLab 17+); cdtarget writes its ownership marker here.
    #[serde(default)]
    pub name: Option<String>,
    /// Push events.
    #[serde(default)]
    pub push_events: bool,
    /// Tag push events.
    #[serde(default)]
    pub tag_push_events: bool,
    /// TLS verification of the receiver.
    #[serde(default = "default_true")]
    pub enable_ssl_verification: bool,
    /// Which branches trigger push events.
    #[serde(default)]
    pub push_events_branch_filter: Option<String>,
    /// `wildcard`, `regex` or `all_branches` (absent on older GitLab).
    #[serde(default)]
    pub branch_filter_strategy: Option<String>,
    /// GitLab 19+: whether a token is stored.
    #[serde(default)]
    pub token_present: Option<bool>,
    /// `executable`, `temporarily_disabled` or `disabled`.
    #[serde(default)]
    pub alert_status: Option<String>,
    /// Every other `*_events` flag that is on (e.g. `merge_requests_events`).
    #[serde(skip)]
    pub other_events: Vec<String>,
}

fn default_true() -> bool {
    true
}

impl Hook {
    fn from_value(value: Value) -> Result<Hook, serde_json::Error> {
        let other_events = match &value {
            Value::Object(fields) => fields
                .iter()
                .filter(|(name, on)| {
                    name.ends_with("_events")
                        && *on == &Value::Bool(true)
                        && !matches!(name.as_str(), "push_events" | "tag_push_events")
                })
                .map(|(name, _)| name.clone())
                .collect(),
            _ => Vec::new(),
        };
        let mut hook: Hook = serde_json::from_value(value)?;
        hook.other_events = other_events;
        Ok(hook)
    }
}

/// The event flags of project hooks the syncer always sends as `false` (GitLab turns
/// `push_events` on by default and keeps what is not sent).
pub const OTHER_EVENT_FLAGS: &[&str] = &[
    "merge_requests_events",
    "issues_events",
    "confidential_issues_events",
    "note_events",
    "confidential_note_events",
    "job_events",
    "pipeline_events",
    "wiki_page_events",
    "deployment_events",
    "releases_events",
    "feature_flag_events",
    "emoji_events",
    "resource_access_token_events",
    "member_events",
    "project_events",
    "milestone_events",
    "vulnerability_events",
];

/// What a created or edited hook is set to. Every flag is sent explicitly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookParams {
    /// Receiver URL.
    pub url: String,
    /// Secret token GitLab sends as `X-Gitlab-Token`; always sent (a URL change wipes it).
    pub token: Secret,
    /// Ownership marker.
    pub name: String,
    /// Tag push events (when the registration follows a tag).
    pub tag_push_events: bool,
    /// Branch filter for push events; empty for all branches.
    pub branch_filter: String,
    /// Other `*_events` flags the hook has on and that must be switched off.
    pub switch_off: Vec<String>,
}

impl HookParams {
    /// The JSON body, token included.
    fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("url".into(), json!(self.url));
        body.insert("token".into(), json!(self.token.expose()));
        body.insert("name".into(), json!(self.name));
        body.insert("push_events".into(), json!(true));
        body.insert("tag_push_events".into(), json!(self.tag_push_events));
        for flag in OTHER_EVENT_FLAGS.iter().copied().chain(self.switch_off.iter().map(String::as_str)) {
            body.insert(flag.into(), json!(false));
        }
        body.insert("enable_ssl_verification".into(), json!(true));
        body.insert("push_events_branch_filter".into(), json!(self.branch_filter));
        let strategy = if self.branch_filter.is_empty() { "all_branches" } else { "wildcard" };
        body.insert("branch_filter_strategy".into(), json!(strategy));
        Value::Object(body)
    }
}

// === commit statuses and comments ===

/// GitLab's longest commit status `description` and `target_url`, in characters.
pub const MAX_STATUS_FIELD_CHARS: usize = 255;
/// GitLab's longest note, in characters.
pub const MAX_NOTE_CHARS: usize = 1_000_000;
/// How long a note POST answered with the application rate limit (JSON 429, no `Retry-After`)
/// waits at least before it is tried again (`notes_create` counts per minute).
pub const NOTE_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// The state of a commit status (`POST /projects/:id/statuses/:sha`, `state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommitState {
    /// Waiting: cdtarget fetched the revision and is applying it.
    Pending,
    /// Running.
    Running,
    /// The revision is applied.
    Success,
    /// The revision was refused, or its apply failed.
    Failed,
    /// Canceled.
    Canceled,
    /// Skipped.
    Skipped,
}

impl CommitState {
    /// GitLab's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Running => "running",
            CommitState::Success => "success",
            CommitState::Failed => "failed",
            CommitState::Canceled => "canceled",
            CommitState::Skipped => "skipped",
        }
    }

    /// The state named `word` (GitLab's words only: `error` or `failure` are GitHub's).
    pub fn parse(word: &str) -> Option<CommitState> {
        Some(match word {
            "pending" => CommitState::Pending,
            "running" => CommitState::Running,
            "success" => CommitState::Success,
            "failed" => CommitState::Failed,
            "canceled" => CommitState::Canceled,
            "skipped" => CommitState::Skipped,
            _ => return None,
        })
    }

    /// Whether GitLab never updates a record in this state again (a later POST makes a new one).
    pub fn is_final(self) -> bool {
        !matches!(self, CommitState::Pending | CommitState::Running)
    }
}

/// What one `POST /projects/:id/statuses/:sha` sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusParams {
    /// The full commit SHA (40 or 64 hex digits).
    pub sha: String,
    /// The branch or tag; `None` lets GitLab choose (only for a registration pinned to a commit).
    pub git_ref: Option<String>,
    /// The status name, never blank.
    pub name: String,
    /// The state.
    pub state: CommitState,
    /// Cut to [`MAX_STATUS_FIELD_CHARS`] characters before it is sent.
    pub description: String,
    /// Sent only when it is an http(s) URL of at most [`MAX_STATUS_FIELD_CHARS`] characters.
    pub target_url: Option<String>,
    /// The pipeline of the first answer for this SHA, so that later posts land in it.
    pub pipeline_id: Option<i64>,
}

impl StatusParams {
    /// The JSON body: `description` cut, `target_url` only when GitLab would take it, blank
    /// values left out (GitLab drops them anyway).
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("state".into(), json!(self.state.as_str()));
        body.insert("name".into(), json!(self.name));
        if let Some(git_ref) = self.git_ref.as_deref().filter(|r| !r.is_empty()) {
            body.insert("ref".into(), json!(git_ref));
        }
        let description = cut_chars(&single_line(&self.description), MAX_STATUS_FIELD_CHARS);
        if !description.trim().is_empty() {
            body.insert("description".into(), json!(description));
        }
        if let Some(url) = self.target_url.as_deref().and_then(acceptable_target_url) {
            body.insert("target_url".into(), json!(url));
        }
        if let Some(pipeline_id) = self.pipeline_id {
            body.insert("pipeline_id".into(), json!(pipeline_id));
        }
        Value::Object(body)
    }
}

/// `text` cut to at most `max` characters (code points, as GitLab counts), on a character
/// boundary.
pub fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// `text` on one line: line breaks and other control characters become spaces.
pub fn single_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// `url` trimmed when GitLab accepts it as a `target_url`: `http`/`https` with a host, no
/// userinfo, no line break, at most [`MAX_STATUS_FIELD_CHARS`] characters.
pub fn acceptable_target_url(url: &str) -> Option<String> {
    let url = url.trim();
    if url.is_empty() || url.chars().count() > MAX_STATUS_FIELD_CHARS || url.chars().any(char::is_control) {
        return None;
    }
    let parsed = Url::parse(url).ok()?;
    let ok = matches!(parsed.scheme(), "http" | "https")
        && parsed.host_str().is_some_and(|h| !h.is_empty())
        && parsed.username().is_empty()
        && parsed.password().is_none();
    ok.then(|| url.to_owned())
}

/// Whether `sha` is a full commit id (40 hex digits, or 64 for SHA-256 repositories).
pub fn is_full_sha(sha: &str) -> bool {
    matches!(sha.len(), 40 | 64) && sha.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The user of a status or a comment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Author {
    /// User id.
    #[serde(default)]
    pub id: i64,
    /// User name.
    #[serde(default)]
    pub username: String,
}

/// A commit status as GitLab returns it (`Entities::CommitStatus`), the fields used.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CommitStatus {
    /// Record id.
    pub id: i64,
    /// The full SHA.
    #[serde(default)]
    pub sha: String,
    /// The ref it was posted for.
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
    /// `created`, `pending`, `running`, `success`, `failed`, `canceled`, `skipped`.
    #[serde(default)]
    pub status: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// Target URL.
    #[serde(default)]
    pub target_url: Option<String>,
    /// The pipeline the record lives in.
    #[serde(default)]
    pub pipeline_id: Option<i64>,
    /// Who posted it.
    #[serde(default)]
    pub author: Option<Author>,
}

/// What a status POST did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusPosted {
    /// 201: the record as stored.
    Stored(CommitStatus),
    /// 400 `Cannot transition status via :enqueue from :pending` (or `:run from :running`, or
    /// `:enqueue from :running`): the open record is already in that state or beyond it.
    AlreadyThere,
}

/// A commit comment as GitLab returns it (`CommitNote`: no id).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CommitComment {
    /// The text.
    #[serde(default)]
    pub note: String,
    /// The file, when the comment sits on a line of the commit's diff.
    #[serde(default)]
    pub path: Option<String>,
    /// The line.
    #[serde(default)]
    pub line: Option<i64>,
    /// Who wrote it.
    #[serde(default)]
    pub author: Option<Author>,
}

/// What a comment POST did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommentPosted {
    /// 201: the comment as stored.
    Stored(CommitComment),
    /// 202: GitLab read the note as quick actions only and stored no comment.
    CommandsOnly,
}

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
pub type RequestObserver = Arc<dyn Fn(&str, Result<(), ErrorKind>) + Send + Sync>;

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

    /// `GET /projects/<url-encoded path>`: resolves a project path once; use the id afterwards.
    pub async fn project(&self, path: &str) -> Result<Project, GitLabError> {
        let url = self.endpoint(&["projects", path.trim_matches('/')]);
        let answer = self.send(Method::GET, url, None, &format!("project `{path}`")).await?;
        parse(&answer.body, "the project")
    }

    /// `GET /projects/:id/deploy_keys`, every page.
    pub async fn deploy_keys(&self, project_id: i64) -> Result<Vec<DeployKey>, GitLabError> {
        let values = self.list(&["projects", &project_id.to_string(), "deploy_keys"], project_id).await?;
        values.into_iter().map(|v| serde_json::from_value(v).map_err(|e| invalid_json("a deploy key", &e))).collect()
    }

    /// `POST /projects/:id/deploy_keys`. GitLab may answer with an existing link whose
    /// `can_push` is not the one asked for: check the result.
    pub async fn create_deploy_key(
        &self,
        project_id: i64,
        title: &str,
        key: &str,
        can_push: bool,
    ) -> Result<DeployKey, GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "deploy_keys"]);
        let body = json!({"title": title, "key": key.trim(), "can_push": can_push});
        let answer = self
            .send(Method::POST, url, Some(&body), &format!("adding the deploy key to project {project_id}"))
            .await?;
        parse(&answer.body, "the deploy key")
    }

    /// `PUT /projects/:id/deploy_keys/:key_id` with `can_push`.
    pub async fn set_deploy_key_can_push(
        &self,
        project_id: i64,
        key_id: i64,
        can_push: bool,
    ) -> Result<DeployKey, GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "deploy_keys", &key_id.to_string()]);
        let what = format!("changing deploy key {key_id} of project {project_id}");
        let answer = self.send(Method::PUT, url, Some(&json!({"can_push": can_push})), &what).await?;
        parse(&answer.body, "the deploy key")
    }

    /// `DELETE /projects/:id/deploy_keys/:key_id` (unlinks it). 404 is [`ErrorKind::NotFound`].
    pub async fn delete_deploy_key(&self, project_id: i64, key_id: i64) -> Result<(), GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "deploy_keys", &key_id.to_string()]);
        let what = format!("removing deploy key {key_id} from project {project_id}");
        self.send(Method::DELETE, url, None, &what).await.map(drop)
    }

    /// `GET /projects/:id/hooks`, every page.
    pub async fn hooks(&self, project_id: i64) -> Result<Vec<Hook>, GitLabError> {
        let values = self.list(&["projects", &project_id.to_string(), "hooks"], project_id).await?;
        values.into_iter().map(|v| Hook::from_value(v).map_err(|e| invalid_json("a hook", &e))).collect()
    }

    /// `POST /projects/:id/hooks`.
    pub async fn create_hook(&self, project_id: i64, params: &HookParams) -> Result<Hook, GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "hooks"]);
        let what = format!("adding the webhook to project {project_id}");
        let answer = self.send(Method::POST, url, Some(&params.body()), &what).await?;
        parse_hook(&answer.body)
    }

    /// `PUT /projects/:id/hooks/:hook_id` with every parameter, the token included.
    pub async fn edit_hook(&self, project_id: i64, hook_id: i64, params: &HookParams) -> Result<Hook, GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "hooks", &hook_id.to_string()]);
        let what = format!("editing webhook {hook_id} of project {project_id}");
        let answer = self.send(Method::PUT, url, Some(&params.body()), &what).await?;
        parse_hook(&answer.body)
    }

    /// `DELETE /projects/:id/hooks/:hook_id`. 404 is [`ErrorKind::NotFound`].
    pub async fn delete_hook(&self, project_id: i64, hook_id: i64) -> Result<(), GitLabError> {
        let url = self.endpoint(&["projects", &project_id.to_string(), "hooks", &hook_id.to_string()]);
        let what = format!("removing webhook {hook_id} from project {project_id}");
        self.send(Method::DELETE, url, None, &what).await.map(drop)
    }

    /// `POST /projects/:id/hooks/:hook_id/test/push_events`: a test delivery, which re-enables a
    /// hook GitLab disabled after failures when the receiver answers 2xx.
    pub async fn test_hook(&self, project_id: i64, hook_id: i64) -> Result<(), GitLabError> {
        let url =
            self.endpoint(&["projects", &project_id.to_string(), "hooks", &hook_id.to_string(), "test", "push_events"]);
        let what = format!("testing webhook {hook_id} of project {project_id}");
        self.send(Method::POST, url, None, &what).await.map(drop)
    }

    /// `POST /projects/:id/statuses/:sha`: sets a commit status (see [`StatusParams::body`] for
    /// what is sent). A refused transition to where the record already is comes back as
    /// [`StatusPosted::AlreadyThere`]; a 409 (another update holds the lock) is retried with
    /// backoff; a 403 says which role and rights the bot needs.
    pub async fn set_commit_status(&self, project_id: i64, params: &StatusParams) -> Result<StatusPosted, GitLabError> {
        let what = format!(
            "posting commit status `{}` for {} on project {project_id}",
            params.state.as_str(),
            short_revision(&params.sha)
        );
        if !is_full_sha(&params.sha) {
            return Err(GitLabError::new(ErrorKind::InvalidConfig, format!("{what}: not a full commit SHA")));
        }
        if params.name.trim().is_empty() {
            return Err(GitLabError::new(ErrorKind::InvalidConfig, format!("{what}: the status name is blank")));
        }
        let url = self.endpoint(&["projects", &project_id.to_string(), "statuses", &params.sha]);
        let options = Options { retry_conflict: true, ..Options::default() };
        match self.send_with(Method::POST, url, Some(&params.body()), &what, options).await {
            Ok(answer) => parse(&answer.body, "the commit status").map(StatusPosted::Stored),
            Err(e) if e.status == Some(400) && already_there(&e.message) => Ok(StatusPosted::AlreadyThere),
            Err(e) if e.status == Some(403) && e.kind == ErrorKind::NotMaintainer => {
                Err(status_forbidden(e, params.git_ref.as_deref(), "post commit statuses"))
            }
            Err(e) => Err(e),
        }
    }

    /// `GET /projects/:id/repository/commits/:sha/statuses?name=&ref=`, every page, retried
    /// records included (`all=true`). `sha` must be the full SHA: GitLab matches the raw string.
    pub async fn commit_statuses(
        &self,
        project_id: i64,
        sha: &str,
        name: &str,
        git_ref: Option<&str>,
    ) -> Result<Vec<CommitStatus>, GitLabError> {
        if !is_full_sha(sha) {
            return Err(GitLabError::new(
                ErrorKind::InvalidConfig,
                format!("listing commit statuses of `{}`: not a full commit SHA", short_revision(sha)),
            ));
        }
        let mut filters = vec![("name", name.to_owned()), ("all", "true".to_owned())];
        if let Some(git_ref) = git_ref.filter(|r| !r.is_empty()) {
            filters.push(("ref", git_ref.to_owned()));
        }
        let segments = ["projects", &project_id.to_string(), "repository", "commits", sha, "statuses"];
        let what = format!("listing commit statuses of {} on project {project_id}", short_revision(sha));
        let values = self.list_filtered(&segments, &filters, &what).await?;
        values.into_iter().map(|v| serde_json::from_value(v).map_err(|e| invalid_json("a commit status", &e))).collect()
    }

    /// `GET /projects/:id/repository/commits/:sha/comments`, every page (oldest first).
    pub async fn commit_comments(&self, project_id: i64, sha: &str) -> Result<Vec<CommitComment>, GitLabError> {
        let segments = ["projects", &project_id.to_string(), "repository", "commits", sha, "comments"];
        let what = format!("listing the comments of {} on project {project_id}", short_revision(sha));
        let values = self.list_filtered(&segments, &[], &what).await?;
        values
            .into_iter()
            .map(|v| serde_json::from_value(v).map_err(|e| invalid_json("a commit comment", &e)))
            .collect()
    }

    /// `POST /projects/:id/repository/commits/:sha/comments` with `note` (at most
    /// [`MAX_NOTE_CHARS`] characters, else refused here). The caller neutralises quick actions
    /// ([`super::feedback::neutralise_quick_actions`]); a 202 (commands only) is reported, not
    /// an error. The application rate limit (JSON 429 without `Retry-After`) is not waited out
    /// here: the error asks for [`NOTE_RATE_LIMIT_WAIT`].
    pub async fn comment_on_commit(
        &self,
        project_id: i64,
        sha: &str,
        note: &str,
    ) -> Result<CommentPosted, GitLabError> {
        let what = format!("commenting on {} of project {project_id}", short_revision(sha));
        if note.trim().is_empty() || note.chars().count() > MAX_NOTE_CHARS {
            return Err(GitLabError::new(
                ErrorKind::InvalidConfig,
                format!("{what}: a note must hold 1 to {MAX_NOTE_CHARS} characters"),
            ));
        }
        let url = self.endpoint(&["projects", &project_id.to_string(), "repository", "commits", sha, "comments"]);
        let options = Options { app_limit_wait: Some(NOTE_RATE_LIMIT_WAIT), ..Options::default() };
        match self.send_with(Method::POST, url, Some(&json!({ "note": note })), &what, options).await {
            Ok(answer) if answer.status == StatusCode::ACCEPTED => Ok(CommentPosted::CommandsOnly),
            Ok(answer) => parse(&answer.body, "the commit comment").map(CommentPosted::Stored),
            Err(e) if e.status == Some(403) && e.kind == ErrorKind::NotMaintainer => {
                Err(status_forbidden(e, None, "comment on commits"))
            }
            Err(e) => Err(e),
        }
    }

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

/// Whether a 400 is GitLab refusing a transition to where the open record already is (or
/// beyond): `:enqueue from :pending`, `:run from :running`, `:enqueue from :running`.
fn already_there(message: &str) -> bool {
    [":enqueue from :pending", ":run from :running", ":enqueue from :running"]
        .iter()
        .any(|transition| message.contains(&format!("Cannot transition status via {transition}")))
}

/// A 403 on a commit status or comment, explained: the role and rights GitLab wants.
fn status_forbidden(error: GitLabError, git_ref: Option<&str>, doing: &str) -> GitLabError {
    let on_ref = git_ref.map(|r| format!(" on `{r}`")).unwrap_or_default();
    let message = format!(
        "{}; to {doing}{on_ref} the bot user needs the Developer role or higher on the project and, when the branch is protected, the right to push or merge to it (a default-protected branch allows only Maintainers): make the bot Maintainer or allow it in the branch protection",
        error.message.split("; the bot user must be").next().unwrap_or(&error.message)
    );
    GitLabError { kind: ErrorKind::StatusForbidden, message, ..error }
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

fn parse_hook(body: &[u8]) -> Result<Hook, GitLabError> {
    let value: Value = parse(body, "the hook")?;
    Hook::from_value(value).map_err(|e| invalid_json("the hook", &e))
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
pub fn error_text(body: &[u8]) -> String {
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

    #[test]
    fn hook_listing_collects_other_events_that_are_on() {
        let hook = Hook::from_value(json!({
            "id": 1, "url": "u", "push_events": true, "tag_push_events": false,
            "merge_requests_events": true, "note_events": false, "enable_ssl_verification": true
        }))
        .unwrap();
        assert_eq!(hook.other_events, ["merge_requests_events"]);
    }
}
