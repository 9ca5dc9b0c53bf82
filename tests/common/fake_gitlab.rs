//! A stateful fake GitLab on 127.0.0.1 for the syncer's tests and benchmark, faithful to
//! `contracts/gitlab.md`: `/api/v4` with `PRIVATE-TOKEN` / `Bearer` tokens and their scopes and
//! roles, projects by id and by `%2F`-encoded path (301/405 for moved ones), a global key table
//! with the three outcomes of adding a deploy key (existing link kept with its `can_push`, reuse
//! of an accessible key, 400 "has already been taken"), hooks whose URL edit without a token
//! wipes the token, pagination with every header, both kinds of 429, injectable 5xx, a
//! Rack::Attack-style rate limit, request counters per route, and a webhook emitter that
//! delivers push events with GitLab's headers (and Standard Webhooks signatures).
//!
//! Commit statuses and comments (contract §14): a repository model per project (commits with
//! parents and per-file added/removed lines, branches, tags, protected branches; seeded, or read
//! from a real bare repository with `git` on every request), pipelines (external ones and CI
//! pipelines with jobs), status records with their user and `retried`, the transition table with
//! GitLab's exact refusals, finished records never updated (a new record retries them), the
//! external pipeline persisted before validation and the protected-branch 403, `:sha` resolved
//! from a full SHA, a branch, a tag or a short SHA while listings match the raw string, commit
//! comments with best-effort inline positions and no id, quick actions (202 for a note of
//! commands only), and per-endpoint counts at `GET /__state`
//! (`counts["statuses.create"]["writes"]`).
//!
//! Self-contained (std, axum, tokio, reqwest, serde_json, sha2, hmac, base64) so the benchmark
//! can include it with `#[path]`. The server runs on its own runtime thread and stops on drop.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::server_thread::ServerThread;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

/// The bot's token: scope `api`, Maintainer of every project made with [`FakeGitLab::add_project`].
pub const BOT_TOKEN: &str = "glpat-fake-bot-token-0123456789";
/// The bot's user id.
pub const BOT_USER: u64 = 1;
/// Access level of Maintainer.
pub const MAINTAINER: u32 = 40;
/// Access level of Developer.
pub const DEVELOPER: u32 = 30;
/// Access level of Reporter.
pub const REPORTER: u32 = 20;
/// Access level of Guest.
pub const GUEST: u32 = 10;
/// The version the fake claims in `User-Agent` of deliveries.
pub const VERSION: &str = "18.5.0";
/// Hooks a project may have.
pub const HOOK_LIMIT: usize = 100;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything.
    Api,
    /// GET and HEAD only.
    ReadApi,
}

/// Whether a token still works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenState {
    /// Works.
    Valid,
    /// 401 `invalid_token`, "Token is expired".
    Expired,
    /// 401 `invalid_token`, "Token was revoked".
    Revoked,
}

/// A fault answered instead of the real thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Rack::Attack throttle: 429 `text/plain` `Retry later`, `Retry-After`, `RateLimit-*`.
    Throttle {
        /// Seconds in `Retry-After`.
        retry_after: u64,
    },
    /// Rack::Attack throttle as older proxies pass it: `RateLimit-Reset` (epoch) but no
    /// `Retry-After`.
    ThrottleResetOnly {
        /// Seconds from now to the `RateLimit-Reset` moment.
        reset_in: u64,
    },
    /// Application rate limit: 429 JSON `{"message":{"error":"This endpoint has been requested
    /// too many times. Try again later."}}`, no `RateLimit-*`, no `Retry-After`.
    AppRateLimit,
    /// 500 `{"message":"500 Internal Server Error"}`.
    ServerError,
    /// 502 with an HTML body, as a proxy in front of GitLab answers.
    BadGateway,
    /// 409: another update of the commit status holds the lock (body text unverified).
    StatusLocked,
}

/// How listings announce their next page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pagination {
    /// `Link`, `X-Next-Page`, `X-Page`, `X-Per-Page`, `X-Prev-Page`, `X-Total`, `X-Total-Pages`.
    #[default]
    AllHeaders,
    /// `Link` only.
    LinkOnly,
    /// No pagination header at all (GitLab.com sometimes omits them).
    None,
}

/// Rack::Attack's authenticated API throttle: `requests` per `period` seconds per token, windows
/// aligned on the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests allowed in a window.
    pub requests: u32,
    /// Window length in whole seconds.
    pub period_secs: u64,
}

/// A linked deploy key as the fake stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyView {
    /// Key id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Stored key string.
    pub key: String,
    /// `SHA256:...`.
    pub fingerprint: String,
    /// Per-project write access.
    pub can_push: bool,
}

/// A hook as the fake stores it, token included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookView {
    /// Hook id.
    pub id: i64,
    /// URL.
    pub url: String,
    /// Name.
    pub name: String,
    /// The stored secret token.
    pub token: Option<String>,
    /// The stored signing token.
    pub signing_token: Option<String>,
    /// Every `*_events` flag.
    pub events: BTreeMap<String, bool>,
    /// TLS verification.
    pub enable_ssl_verification: bool,
    /// Branch filter.
    pub push_events_branch_filter: String,
    /// `wildcard`, `regex` or `all_branches`.
    pub branch_filter_strategy: String,
    /// `executable`, `temporarily_disabled`, `disabled`.
    pub alert_status: String,
}

/// A push to deliver with [`FakeGitLab::emit_push`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    /// Full ref, e.g. `refs/heads/main` or `refs/tags/v1`.
    pub git_ref: String,
    /// Previous SHA (zeros for a new ref).
    pub before: String,
    /// New SHA (zeros for a deletion).
    pub after: String,
}

impl Push {
    /// A push of `after` onto branch `branch` (an existing branch).
    pub fn branch(branch: &str, after: &str) -> Push {
        Push { git_ref: format!("refs/heads/{branch}"), before: "1".repeat(40), after: after.to_owned() }
    }
}

/// One delivery attempt of the emitter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The hook.
    pub hook_id: i64,
    /// Where it went.
    pub url: String,
    /// `Idempotency-Key` (stable across resends).
    pub idempotency_key: String,
    /// `X-Gitlab-Webhook-UUID` (new per attempt).
    pub webhook_uuid: String,
    /// The receiver's status, or `None` when the request failed.
    pub status: Option<u16>,
    /// The failure, when there was one.
    pub error: Option<String>,
    /// The JSON body sent.
    pub body: String,
    /// Every header sent.
    pub headers: Vec<(String, String)>,
}

/// Requests received so far, counted before authentication and faults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// By `METHOD /route/:template` (e.g. `GET /projects/:id/deploy_keys`).
    pub by_route: BTreeMap<String, usize>,
    /// By method.
    pub by_method: BTreeMap<String, usize>,
    /// Answers by status.
    pub by_status: BTreeMap<u16, usize>,
    /// By endpoint (`statuses.create`, `statuses.list`, `comments.create`, `comments.list`, else
    /// the route): requests, and writes that changed something (2xx answers to non-GET).
    pub by_endpoint: BTreeMap<String, EndpointCount>,
}

/// Requests to one endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointCount {
    /// Every request.
    pub requests: usize,
    /// Non-GET requests answered 2xx.
    pub writes: usize,
}

impl Counts {
    /// Requests of `method` (`GET`, `POST`, `PUT`, `DELETE`).
    pub fn method(&self, method: &str) -> usize {
        self.by_method.get(method).copied().unwrap_or(0)
    }

    /// Requests on one route, e.g. `"POST /projects/:id/hooks"`.
    pub fn route(&self, route: &str) -> usize {
        self.by_route.get(route).copied().unwrap_or(0)
    }

    /// Every request other than GET.
    pub fn writes(&self) -> usize {
        self.by_method.iter().filter(|(m, _)| m.as_str() != "GET").map(|(_, n)| n).sum()
    }

    /// Every request.
    pub fn total(&self) -> usize {
        self.by_method.values().sum()
    }

    /// Answers with `status`.
    pub fn status(&self, status: u16) -> usize {
        self.by_status.get(&status).copied().unwrap_or(0)
    }

    /// Requests and writes of `endpoint`, e.g. `"statuses.create"`.
    pub fn endpoint(&self, endpoint: &str) -> EndpointCount {
        self.by_endpoint.get(endpoint).copied().unwrap_or_default()
    }
}

// === state ===

struct TokenRecord {
    user: u64,
    scope: Scope,
    state: TokenState,
}

struct ProjectRecord {
    id: i64,
    path: String,
    old_paths: Vec<String>,
    members: BTreeMap<u64, u32>,
    /// key id → can_push
    links: BTreeMap<i64, bool>,
    hooks: BTreeMap<i64, HookRecord>,
    repo: RepoModel,
    pipelines: Vec<PipelineRecord>,
    statuses: Vec<StatusRecord>,
    comments: Vec<CommentRecord>,
}

#[derive(Clone)]
struct KeyRecord {
    id: i64,
    title: String,
    key: String,
    fingerprint: String,
    /// A user's SSH key (not a deploy key): occupies its fingerprint, never linkable.
    user_key: bool,
    public: bool,
    created_at: String,
}

#[derive(Clone)]
struct HookRecord {
    id: i64,
    url: String,
    name: String,
    description: String,
    token: Option<String>,
    signing_token: Option<String>,
    events: BTreeMap<String, bool>,
    enable_ssl_verification: bool,
    push_events_branch_filter: String,
    branch_filter_strategy: String,
    alert_status: String,
    failures: u32,
    created_at: String,
}

struct FaultRule {
    method: Option<Method>,
    route: Option<String>,
    fault: Fault,
    remaining: usize,
}

struct Throttle {
    limit: RateLimit,
    window: u64,
    observed: BTreeMap<String, u32>,
}

struct AppLimit {
    per_minute: u32,
    window: u64,
    observed: u32,
}

struct StateData {
    tokens: BTreeMap<String, TokenRecord>,
    projects: BTreeMap<i64, ProjectRecord>,
    keys: BTreeMap<i64, KeyRecord>,
    next_id: i64,
    faults: Vec<FaultRule>,
    throttle: Option<Throttle>,
    project_lookup_limit: Option<AppLimit>,
    pagination: Pagination,
    allow_local_requests: bool,
    auto_disable: bool,
    drop_deliveries: bool,
    latency: Duration,
    counts: Counts,
    /// Per project: the set of linked fingerprints after every change.
    key_timeline: BTreeMap<i64, Vec<BTreeSet<String>>>,
    log: Vec<String>,
    /// Every quick action GitLab would have run from a note: `(project, "/command args")`.
    quick_actions: Vec<(i64, String)>,
}

struct Shared {
    state: Mutex<StateData>,
    base_url: String,
    uuid_counter: AtomicU64,
}

/// The fake GitLab. Stopped on drop.
pub struct FakeGitLab {
    port: u16,
    shared: Arc<Shared>,
    _server: ServerThread,
}

impl FakeGitLab {
    /// Starts the fake on `127.0.0.1:0` with the bot token ([`BOT_TOKEN`], scope `api`).
    pub fn start() -> FakeGitLab {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let port = listener.local_addr().expect("local address").port();
        let mut tokens = BTreeMap::new();
        tokens
            .insert(BOT_TOKEN.to_owned(), TokenRecord { user: BOT_USER, scope: Scope::Api, state: TokenState::Valid });
        let shared = Arc::new(Shared {
            state: Mutex::new(StateData {
                tokens,
                projects: BTreeMap::new(),
                keys: BTreeMap::new(),
                next_id: 1,
                faults: Vec::new(),
                throttle: None,
                project_lookup_limit: None,
                pagination: Pagination::AllHeaders,
                allow_local_requests: true,
                auto_disable: false,
                drop_deliveries: false,
                latency: Duration::ZERO,
                counts: Counts::default(),
                key_timeline: BTreeMap::new(),
                log: Vec::new(),
                quick_actions: Vec::new(),
            }),
            base_url: format!("http://127.0.0.1:{port}"),
            uuid_counter: AtomicU64::new(0),
        });
        let app = Router::new().fallback(handle).with_state(Arc::clone(&shared));
        let server = ServerThread::spawn(format!("fake-gitlab-{port}"), move |stopped| serve(listener, app, stopped));
        FakeGitLab { port, shared, _server: server }
    }

    /// `http://127.0.0.1:PORT` (the instance URL; the API is under `/api/v4`).
    pub fn url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn state(&self) -> std::sync::MutexGuard<'_, StateData> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    // === seeding ===

    /// A project at `path` of which the bot is Maintainer; returns its id.
    pub fn add_project(&self, path: &str) -> i64 {
        self.add_project_with_role(path, Some(MAINTAINER))
    }

    /// A project at `path`; the bot has access level `role` (`None`: not a member, so the
    /// project is invisible to it).
    pub fn add_project_with_role(&self, path: &str, role: Option<u32>) -> i64 {
        let mut state = self.state();
        let id = state.take_id();
        let members = role.map(|level| BTreeMap::from([(BOT_USER, level)])).unwrap_or_default();
        state.projects.insert(
            id,
            ProjectRecord {
                id,
                path: path.to_owned(),
                old_paths: Vec::new(),
                members,
                links: BTreeMap::new(),
                hooks: BTreeMap::new(),
                repo: RepoModel::default(),
                pipelines: Vec::new(),
                statuses: Vec::new(),
                comments: Vec::new(),
            },
        );
        id
    }

    /// Moves a project to `new_path`; the old path answers 301 to GET and 405 to the rest.
    pub fn rename_project(&self, id: i64, new_path: &str) {
        let mut state = self.state();
        let project = state.projects.get_mut(&id).expect("project exists");
        let old = std::mem::replace(&mut project.path, new_path.to_owned());
        project.old_paths.push(old);
    }

    /// Deletes a project and everything linked to it.
    pub fn delete_project(&self, id: i64) {
        let mut state = self.state();
        if let Some(project) = state.projects.remove(&id) {
            for key_id in project.links.keys() {
                state.drop_orphan(*key_id);
            }
        }
    }

    /// Another token for `user`.
    pub fn add_token(&self, token: &str, user: u64, scope: Scope, token_state: TokenState) {
        self.state().tokens.insert(token.to_owned(), TokenRecord { user, scope, state: token_state });
    }

    /// Sets the bot's access level on a project.
    pub fn set_bot_role(&self, project_id: i64, level: u32) {
        self.state().projects.get_mut(&project_id).expect("project exists").members.insert(BOT_USER, level);
    }

    /// Links a deploy key to a project directly (as a person would in the UI); returns its id.
    /// An existing key with the same fingerprint is linked instead of a new one.
    pub fn seed_deploy_key(&self, project_id: i64, title: &str, key: &str, can_push: bool) -> i64 {
        let mut state = self.state();
        let fingerprint = fingerprint(key).expect("a valid public key");
        let id = match state.keys.values().find(|k| k.fingerprint == fingerprint) {
            Some(existing) => existing.id,
            None => state.insert_key(title, key.trim(), &fingerprint, false),
        };
        state.projects.get_mut(&project_id).expect("project exists").links.insert(id, can_push);
        state.record_keys(project_id);
        id
    }

    /// A user's SSH key: its fingerprint is taken for every deploy key.
    pub fn seed_user_key(&self, key: &str) {
        let mut state = self.state();
        let fingerprint = fingerprint(key).expect("a valid public key");
        let id = state.insert_key("user key", key.trim(), &fingerprint, false);
        state.keys.get_mut(&id).expect("just inserted").user_key = true;
    }

    /// A hook made by a person: push events, `url`, `token`, name `name`; returns its id.
    pub fn seed_hook(&self, project_id: i64, url: &str, name: &str, token: Option<&str>) -> i64 {
        let mut state = self.state();
        let id = state.take_id();
        let mut hook = HookRecord::new(id);
        hook.url = url.to_owned();
        hook.name = name.to_owned();
        hook.token = token.map(str::to_owned);
        state.projects.get_mut(&project_id).expect("project exists").hooks.insert(id, hook);
        id
    }

    /// Sets a hook's `alert_status` (`executable`, `temporarily_disabled`, `disabled`).
    pub fn set_hook_alert_status(&self, project_id: i64, hook_id: i64, status: &str) {
        let mut state = self.state();
        let hook = state.projects.get_mut(&project_id).and_then(|p| p.hooks.get_mut(&hook_id)).expect("hook exists");
        hook.alert_status = status.to_owned();
    }

    /// `count` hooks pointing elsewhere (for pagination tests).
    pub fn seed_foreign_hooks(&self, project_id: i64, count: usize) {
        for n in 0..count {
            self.seed_hook(project_id, &format!("https://ci-{n}.example.com/hook"), &format!("ci {n}"), Some("x"));
        }
    }

    /// `count` deploy keys that belong to other people (for pagination tests).
    pub fn seed_foreign_keys(&self, project_id: i64, count: usize) {
        for n in 0..count {
            let key = synthetic_key(&format!("foreign-{project_id}-{n}"));
            self.seed_deploy_key(project_id, &format!("someone's key {n}"), &key, false);
        }
    }

    /// Moves the id counter on to `next`: projects, keys and hooks made from now on get ids a
    /// test can tell apart from every other number in a text it scans.
    pub fn start_ids_at(&self, next: i64) {
        let mut state = self.state();
        state.next_id = state.next_id.max(next);
    }

    // === switches ===

    /// Answers the next `times` requests matching `method` and `route` (a template such as
    /// `/projects/:id/deploy_keys`; `None` for any) with `fault`.
    pub fn inject(&self, method: Option<&str>, route: Option<&str>, fault: Fault, times: usize) {
        let method = method.map(|m| Method::from_bytes(m.as_bytes()).expect("a method"));
        self.state().faults.push(FaultRule { method, route: route.map(str::to_owned), fault, remaining: times });
    }

    /// Drops every injected fault not answered yet (the end of an outage injected with a large
    /// `times`).
    pub fn clear_faults(&self) {
        self.state().faults.clear();
    }

    /// Turns the authenticated API throttle on (or off with `None`). `RateLimit-*` headers are
    /// then sent on every answer, as newer GitLab does.
    pub fn set_rate_limit(&self, limit: Option<RateLimit>) {
        self.state().throttle = limit.map(|limit| Throttle { limit, window: 0, observed: BTreeMap::new() });
    }

    /// Limits `GET /projects/:id` to `per_minute` (GitLab.com: 400), answered with the JSON 429.
    pub fn set_project_lookup_limit(&self, per_minute: Option<u32>) {
        self.state().project_lookup_limit =
            per_minute.map(|per_minute| AppLimit { per_minute, window: 0, observed: 0 });
    }

    /// How listings announce their pages.
    pub fn set_pagination(&self, pagination: Pagination) {
        self.state().pagination = pagination;
    }

    /// GitLab's `allow_local_requests_from_web_hooks_and_services` (on by default here, since
    /// receivers in tests live on 127.0.0.1).
    pub fn set_allow_local_requests(&self, allow: bool) {
        self.state().allow_local_requests = allow;
    }

    /// Auto-disable hooks after failed deliveries (4th failure temporarily, 40th for good).
    pub fn set_auto_disable(&self, on: bool) {
        self.state().auto_disable = on;
    }

    /// Drop every delivery (the `web_hook_calls` rate limit), as GitLab does silently.
    pub fn set_drop_deliveries(&self, on: bool) {
        self.state().drop_deliveries = on;
    }

    /// Adds `latency` to every answer.
    pub fn set_latency(&self, latency: Duration) {
        self.state().latency = latency;
    }

    // === inspection ===

    /// The requests received so far.
    pub fn counts(&self) -> Counts {
        self.state().counts.clone()
    }

    /// Sets every counter back to zero.
    pub fn reset_counts(&self) {
        let mut state = self.state();
        state.counts = Counts::default();
        state.log.clear();
    }

    /// `METHOD /path -> status` of every request, in order.
    pub fn log(&self) -> Vec<String> {
        self.state().log.clone()
    }

    /// The deploy keys linked to a project.
    pub fn deploy_keys(&self, project_id: i64) -> Vec<KeyView> {
        let state = self.state();
        let project = state.projects.get(&project_id).expect("project exists");
        project
            .links
            .iter()
            .map(|(id, can_push)| {
                let key = &state.keys[id];
                KeyView {
                    id: *id,
                    title: key.title.clone(),
                    key: key.key.clone(),
                    fingerprint: key.fingerprint.clone(),
                    can_push: *can_push,
                }
            })
            .collect()
    }

    /// The hooks of a project, tokens included.
    pub fn hooks(&self, project_id: i64) -> Vec<HookView> {
        let state = self.state();
        state.projects.get(&project_id).expect("project exists").hooks.values().map(HookRecord::view).collect()
    }

    /// Every set of linked fingerprints the project went through, in order.
    pub fn key_timeline(&self, project_id: i64) -> Vec<BTreeSet<String>> {
        self.state().key_timeline.get(&project_id).cloned().unwrap_or_default()
    }

    /// Whether a key with this fingerprint exists anywhere (deploy or user key).
    pub fn key_exists(&self, fingerprint: &str) -> bool {
        self.state().keys.values().any(|k| k.fingerprint == fingerprint)
    }

    // === the webhook emitter ===

    /// Delivers `push` to every hook of the project that wants it (push or tag push events,
    /// branch filter, not disabled): one POST each, 10 s timeout, no retry.
    pub async fn emit_push(&self, project_id: i64, push: &Push) -> Vec<Delivery> {
        let idempotency_key = self.uuid();
        self.deliver(project_id, push, &idempotency_key).await
    }

    /// Delivers a push touching `refs` in one `git push`: more than 3 refs and GitLab sends no
    /// push hook at all (`push_event_hooks_limit`).
    pub async fn emit_multi_ref_push(&self, project_id: i64, pushes: &[Push]) -> Vec<Delivery> {
        if pushes.len() > 3 {
            return Vec::new();
        }
        let mut deliveries = Vec::new();
        for push in pushes {
            deliveries.extend(self.emit_push(project_id, push).await);
        }
        deliveries
    }

    /// Sends the event of `delivery` again (a manual "Resend"): same `Idempotency-Key`, fresh
    /// UUID headers.
    pub async fn resend(&self, project_id: i64, push: &Push, delivery: &Delivery) -> Vec<Delivery> {
        let mut all = self.deliver(project_id, push, &delivery.idempotency_key).await;
        all.retain(|d| d.hook_id == delivery.hook_id);
        all
    }

    async fn deliver(&self, project_id: i64, push: &Push, idempotency_key: &str) -> Vec<Delivery> {
        let is_tag = push.git_ref.starts_with("refs/tags/");
        let (targets, payload) = {
            let state = self.state();
            if state.drop_deliveries {
                return Vec::new();
            }
            let project = state.projects.get(&project_id).expect("project exists");
            let branch = push.git_ref.strip_prefix("refs/heads/");
            let targets: Vec<HookRecord> = project
                .hooks
                .values()
                .filter(|hook| hook.alert_status == "executable")
                .filter(|hook| {
                    if is_tag {
                        hook.events.get("tag_push_events") == Some(&true)
                    } else {
                        hook.events.get("push_events") == Some(&true)
                            && branch.is_none_or(|b| {
                                branch_matches(&hook.push_events_branch_filter, &hook.branch_filter_strategy, b)
                            })
                    }
                })
                .cloned()
                .collect();
            (targets, push_payload(project, push, &self.shared.base_url))
        };
        let body = payload.to_string();
        let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("HTTP client");
        let mut deliveries = Vec::new();
        for hook in targets {
            let webhook_uuid = self.uuid();
            let mut headers = vec![
                ("Content-Type".to_owned(), "application/json".to_owned()),
                ("User-Agent".to_owned(), format!("GitLab/{VERSION}")),
                ("X-Gitlab-Event".to_owned(), if is_tag { "Tag Push Hook" } else { "Push Hook" }.to_owned()),
                ("X-Gitlab-Instance".to_owned(), self.shared.base_url.clone()),
                ("Idempotency-Key".to_owned(), idempotency_key.to_owned()),
                ("X-Gitlab-Webhook-UUID".to_owned(), webhook_uuid.clone()),
                ("X-Gitlab-Event-UUID".to_owned(), self.uuid()),
            ];
            if let Some(token) = &hook.token {
                headers.push(("X-Gitlab-Token".to_owned(), token.replace(['\n', '\r'], "")));
            }
            if let Some(signing) = &hook.signing_token {
                let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs().to_string();
                headers.push(("webhook-id".to_owned(), idempotency_key.to_owned()));
                headers.push(("webhook-timestamp".to_owned(), timestamp.clone()));
                headers.push(("webhook-signature".to_owned(), sign(signing, idempotency_key, &timestamp, &body)));
            }
            let mut request = client.post(&hook.url).body(body.clone());
            for (name, value) in &headers {
                request = request.header(name, value);
            }
            let (status, error) = match request.send().await {
                Ok(response) => (Some(response.status().as_u16()), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let success = status.is_some_and(|s| (200..400).contains(&s));
            self.after_delivery(project_id, hook.id, success);
            deliveries.push(Delivery {
                hook_id: hook.id,
                url: hook.url.clone(),
                idempotency_key: idempotency_key.to_owned(),
                webhook_uuid,
                status,
                error,
                body: body.clone(),
                headers,
            });
        }
        deliveries
    }

    fn after_delivery(&self, project_id: i64, hook_id: i64, success: bool) {
        let mut state = self.state();
        let auto_disable = state.auto_disable;
        let Some(hook) = state.projects.get_mut(&project_id).and_then(|p| p.hooks.get_mut(&hook_id)) else { return };
        if success {
            hook.failures = 0;
            return;
        }
        hook.failures += 1;
        if auto_disable {
            hook.alert_status = match hook.failures {
                0..=3 => "executable",
                4..=39 => "temporarily_disabled",
                _ => "disabled",
            }
            .to_owned();
        }
    }

    fn uuid(&self) -> String {
        self.shared.uuid()
    }
}

impl Shared {
    fn uuid(&self) -> String {
        let n = self.uuid_counter.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        let digest = hex(&Sha256::digest(format!("{}-{n}-{nanos}", self.base_url)));
        format!("{}-{}-4{}-a{}-{}", &digest[0..8], &digest[8..12], &digest[13..16], &digest[17..20], &digest[20..32])
    }
}

fn serve(listener: TcpListener, app: Router, stopped: oneshot::Receiver<()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fake-gitlab-worker")
        .enable_all()
        .build()
        .expect("build the fake GitLab runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
        tokio::select! {
            _ = async { axum::serve(listener, app).await } => {}
            _ = stopped => {}
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
}

// === state helpers ===

impl StateData {
    fn take_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn insert_key(&mut self, title: &str, key: &str, fingerprint: &str, public: bool) -> i64 {
        let id = self.take_id();
        self.keys.insert(
            id,
            KeyRecord {
                id,
                title: title.to_owned(),
                key: key.to_owned(),
                fingerprint: fingerprint.to_owned(),
                user_key: false,
                public,
                created_at: now_iso(),
            },
        );
        id
    }

    /// Destroys a private deploy key no project links any more.
    fn drop_orphan(&mut self, key_id: i64) {
        let linked = self.projects.values().any(|p| p.links.contains_key(&key_id));
        if let Some(key) = self.keys.get(&key_id)
            && !linked
            && !key.public
            && !key.user_key
        {
            self.keys.remove(&key_id);
        }
    }

    fn record_keys(&mut self, project_id: i64) {
        let Some(project) = self.projects.get(&project_id) else { return };
        let set = project.links.keys().filter_map(|id| self.keys.get(id)).map(|k| k.fingerprint.clone()).collect();
        self.key_timeline.entry(project_id).or_default().push(set);
    }
}

impl HookRecord {
    fn new(id: i64) -> HookRecord {
        let mut events = BTreeMap::new();
        for flag in EVENT_FLAGS {
            events.insert((*flag).to_owned(), *flag == "push_events");
        }
        HookRecord {
            id,
            url: String::new(),
            name: String::new(),
            description: String::new(),
            token: None,
            signing_token: None,
            events,
            enable_ssl_verification: true,
            push_events_branch_filter: String::new(),
            branch_filter_strategy: "wildcard".to_owned(),
            alert_status: "executable".to_owned(),
            failures: 0,
            created_at: now_iso(),
        }
    }

    fn view(&self) -> HookView {
        HookView {
            id: self.id,
            url: self.url.clone(),
            name: self.name.clone(),
            token: self.token.clone(),
            signing_token: self.signing_token.clone(),
            events: self.events.clone(),
            enable_ssl_verification: self.enable_ssl_verification,
            push_events_branch_filter: self.push_events_branch_filter.clone(),
            branch_filter_strategy: self.branch_filter_strategy.clone(),
            alert_status: self.alert_status.clone(),
        }
    }

    /// The API entity: never the tokens, only whether they are set.
    fn entity(&self, project_id: i64) -> Value {
        let mut fields = Map::new();
        fields.insert("id".into(), json!(self.id));
        fields.insert("url".into(), json!(self.url));
        fields.insert("name".into(), json!(self.name));
        fields.insert("description".into(), json!(self.description));
        fields.insert("created_at".into(), json!(self.created_at));
        fields.insert("project_id".into(), json!(project_id));
        for (flag, on) in &self.events {
            fields.insert(flag.clone(), json!(on));
        }
        fields.insert("enable_ssl_verification".into(), json!(self.enable_ssl_verification));
        fields.insert("alert_status".into(), json!(self.alert_status));
        fields.insert("disabled_until".into(), Value::Null);
        fields.insert("push_events_branch_filter".into(), json!(self.push_events_branch_filter));
        fields.insert("branch_filter_strategy".into(), json!(self.branch_filter_strategy));
        fields.insert("custom_webhook_template".into(), Value::Null);
        fields.insert("token_present".into(), json!(self.token.is_some()));
        fields.insert("signing_token_present".into(), json!(self.signing_token.is_some()));
        Value::Object(fields)
    }
}

const EVENT_FLAGS: &[&str] = &[
    "push_events",
    "tag_push_events",
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

fn key_entity(key: &KeyRecord, can_push: Option<bool>) -> Value {
    let mut value = json!({
        "id": key.id,
        "title": key.title,
        "created_at": key.created_at,
        "expires_at": null,
        "key": key.key,
        "usage_type": "auth_and_signing",
        "fingerprint_sha256": key.fingerprint,
    });
    if let Some(can_push) = can_push {
        value["can_push"] = json!(can_push);
    }
    value
}

// === the handler ===

/// The answer being built: status, body, extra headers.
struct Answer {
    status: StatusCode,
    body: Option<Value>,
    text: Option<(&'static str, String)>,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).expect("status"),
            body: Some(body),
            text: None,
            headers: Vec::new(),
        }
    }

    fn empty(status: u16) -> Answer {
        Answer { status: StatusCode::from_u16(status).expect("status"), body: None, text: None, headers: Vec::new() }
    }

    fn message(status: u16, message: &str) -> Answer {
        Answer::json(status, json!({ "message": message }))
    }

    fn error(status: u16, error: &str) -> Answer {
        Answer::json(status, json!({ "error": error }))
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Answer {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    fn into_response(self) -> Response {
        let mut response = match (self.body, self.text) {
            (Some(body), _) => {
                (self.status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
            }
            (None, Some((content_type, text))) => {
                (self.status, [(header::CONTENT_TYPE, content_type)], text).into_response()
            }
            (None, None) => self.status.into_response(),
        };
        for (name, value) in self.headers {
            if let (Ok(name), Ok(value)) = (name.parse::<axum::http::HeaderName>(), HeaderValue::from_str(&value)) {
                response.headers_mut().append(name, value);
            }
        }
        response
    }
}

/// The parsed request.
struct Call {
    method: Method,
    segments: Vec<String>,
    raw_segments: Vec<String>,
    query: Vec<(String, String)>,
    params: Map<String, Value>,
    headers: HeaderMap,
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body: Bytes = axum::body::to_bytes(body, 8 << 20).await.unwrap_or_default();
    let raw_path = parts.uri.path().to_owned();
    let shown_path = parts.uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| raw_path.clone());
    let query = parts.uri.query().map(parse_form).unwrap_or_default();
    let mut params: Map<String, Value> = query.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if content_type.starts_with("application/json") {
        if let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&body) {
            params.extend(fields);
        }
    } else if content_type.starts_with("application/x-www-form-urlencoded") {
        for (k, v) in parse_form(&String::from_utf8_lossy(&body)) {
            params.insert(k, json!(v));
        }
    }
    let raw_segments: Vec<String> = raw_path.trim_start_matches('/').split('/').map(str::to_owned).collect();
    let segments = raw_segments.iter().map(|s| percent_decode(s)).collect();
    let call = Call { method: parts.method.clone(), segments, raw_segments, query, params, headers: parts.headers };
    if call.method == Method::GET && raw_path == "/__state" {
        let state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        return Answer::json(200, state_document(&state)).into_response();
    }
    let route = route_template(&call);
    let latency = {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        *state.counts.by_route.entry(format!("{} {route}", call.method)).or_default() += 1;
        *state.counts.by_method.entry(call.method.to_string()).or_default() += 1;
        state.latency
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let answer = {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let answer = answer(&mut state, &shared.base_url, &call, &route);
        *state.counts.by_status.entry(answer.status.as_u16()).or_default() += 1;
        let endpoint = endpoint_name(&call.method, &route);
        let count = state.counts.by_endpoint.entry(endpoint).or_default();
        count.requests += 1;
        if call.method != Method::GET && answer.status.is_success() {
            count.writes += 1;
        }
        let line = format!("{} {shown_path} -> {}", call.method, answer.status.as_u16());
        state.log.push(line);
        answer
    };
    answer.into_response()
}

/// `/projects/:id/deploy_keys/:key_id` and the like, for counters and fault rules.
fn route_template(call: &Call) -> String {
    let s: Vec<&str> = call.raw_segments.iter().map(String::as_str).collect();
    let rest = match s.as_slice() {
        ["api", "v4", rest @ ..] => rest,
        _ => return format!("/{}", s.join("/")),
    };
    let templated: Vec<String> = rest
        .iter()
        .enumerate()
        .map(|(i, part)| match (i, rest.get(i.wrapping_sub(1))) {
            (1, Some(&"projects")) => ":id".to_owned(),
            (3, Some(&"deploy_keys")) => ":key_id".to_owned(),
            (3, Some(&"statuses")) => ":sha".to_owned(),
            (4, Some(&"commits")) => ":sha".to_owned(),
            (3, Some(&"hooks")) => ":hook_id".to_owned(),
            _ => (*part).to_owned(),
        })
        .collect();
    format!("/{}", templated.join("/"))
}

fn answer(state: &mut StateData, base_url: &str, call: &Call, route: &str) -> Answer {
    let segments: Vec<&str> = call.segments.iter().map(String::as_str).collect();
    if segments.first() == Some(&"api") && segments.get(1) == Some(&"v3") {
        return Answer::error(410, "API V3 is no longer supported. Use API V4 instead.");
    }
    if segments.len() < 2 || segments[0] != "api" || segments[1] != "v4" {
        return Answer::error(404, "404 Not Found");
    }
    // Authentication first: Rack::Attack throttles authenticated requests per user.
    let token = call
        .headers
        .get("private-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            let bearer = call.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
            bearer.strip_prefix("Bearer ").map(str::to_owned)
        })
        .or_else(|| call.query.iter().find(|(k, _)| k == "private_token").map(|(_, v)| v.clone()));
    let (user, scope) = match token.as_deref().and_then(|t| state.tokens.get(t)) {
        None => return Answer::message(401, "401 Unauthorized"),
        Some(record) => match record.state {
            TokenState::Valid => (record.user, record.scope),
            TokenState::Expired => {
                return invalid_token("Token is expired. You can either do re-authorization or token refresh.");
            }
            TokenState::Revoked => return invalid_token("Token was revoked. You have to re-authorize from the user."),
        },
    };
    let token = token.unwrap_or_default();
    let mut rate_headers = Vec::new();
    if let Some(answer) = throttle(state, &token, &mut rate_headers) {
        return answer;
    }
    if let Some(answer) = injected_fault(state, call, route) {
        return with_headers(answer, &rate_headers);
    }
    if scope == Scope::ReadApi && call.method != Method::GET && call.method != Method::HEAD {
        return with_headers(
            Answer::json(
                403,
                json!({"error":"insufficient_scope","error_description":"The request requires higher privileges than provided by the access token.","scope":"api"}),
            ),
            &rate_headers,
        );
    }
    let answer = route_call(state, base_url, call, user, &segments[2..]);
    with_headers(answer, &rate_headers)
}

fn invalid_token(description: &str) -> Answer {
    Answer::json(401, json!({"error": "invalid_token", "error_description": description})).header(
        "WWW-Authenticate",
        format!("Bearer realm=\"\", error=\"invalid_token\", error_description=\"{description}\""),
    )
}

fn with_headers(mut answer: Answer, headers: &[(String, String)]) -> Answer {
    answer.headers.extend(headers.iter().cloned());
    answer
}

/// Rack::Attack: counts the request; the `RateLimit-*` headers go on every answer, a request
/// over the limit gets 429 `Retry later`.
fn throttle(state: &mut StateData, token: &str, headers: &mut Vec<(String, String)>) -> Option<Answer> {
    let throttle = state.throttle.as_mut()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let period = throttle.limit.period_secs.max(1);
    let window = now.as_secs() / period;
    if window != throttle.window {
        throttle.window = window;
        throttle.observed.clear();
    }
    let observed = throttle.observed.entry(token.to_owned()).or_default();
    *observed += 1;
    let limit = throttle.limit.requests;
    let reset = (window + 1) * period;
    let normalised = (u64::from(limit) * 60).div_ceil(period);
    headers.push(("RateLimit-Name".into(), "throttle_authenticated_api".into()));
    headers.push(("RateLimit-Limit".into(), normalised.to_string()));
    headers.push(("RateLimit-Observed".into(), observed.to_string()));
    headers.push(("RateLimit-Remaining".into(), limit.saturating_sub(*observed).to_string()));
    headers.push(("RateLimit-Reset".into(), reset.to_string()));
    if *observed <= limit {
        return None;
    }
    let retry_after = period - now.as_secs() % period;
    Some(throttled(retry_after, reset, headers, true))
}

fn throttled(retry_after: u64, reset: u64, headers: &[(String, String)], with_retry_after: bool) -> Answer {
    let mut answer = Answer {
        status: StatusCode::TOO_MANY_REQUESTS,
        body: None,
        text: Some(("text/plain", "Retry later\n".to_owned())),
        headers: headers.to_vec(),
    };
    if with_retry_after {
        answer = answer.header("Retry-After", retry_after.to_string());
    }
    answer.header("RateLimit-ResetTime", http_date(reset))
}

fn injected_fault(state: &mut StateData, call: &Call, route: &str) -> Option<Answer> {
    let rule = state.faults.iter_mut().find(|rule| {
        rule.remaining > 0
            && rule.method.as_ref().is_none_or(|m| *m == call.method)
            && rule.route.as_deref().is_none_or(|r| r == route)
    })?;
    rule.remaining -= 1;
    let fault = rule.fault;
    state.faults.retain(|rule| rule.remaining > 0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    Some(match fault {
        Fault::Throttle { retry_after } => {
            let reset = now + retry_after;
            let headers = vec![
                ("RateLimit-Name".to_owned(), "throttle_authenticated_api".to_owned()),
                ("RateLimit-Limit".to_owned(), "600".to_owned()),
                ("RateLimit-Observed".to_owned(), "601".to_owned()),
                ("RateLimit-Remaining".to_owned(), "0".to_owned()),
                ("RateLimit-Reset".to_owned(), reset.to_string()),
            ];
            throttled(retry_after, reset, &headers, true)
        }
        Fault::ThrottleResetOnly { reset_in } => {
            let reset = now + reset_in;
            let headers = vec![
                ("RateLimit-Name".to_owned(), "throttle_authenticated_api".to_owned()),
                ("RateLimit-Remaining".to_owned(), "0".to_owned()),
                ("RateLimit-Reset".to_owned(), reset.to_string()),
            ];
            throttled(0, reset, &headers, false)
        }
        Fault::AppRateLimit => app_rate_limited(),
        Fault::ServerError => Answer::message(500, "500 Internal Server Error"),
        Fault::StatusLocked => Answer::message(409, "Another update to this commit status is in progress"),
        Fault::BadGateway => Answer {
            status: StatusCode::BAD_GATEWAY,
            body: None,
            text: Some(("text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>\n".to_owned())),
            headers: Vec::new(),
        },
    })
}

fn app_rate_limited() -> Answer {
    Answer::json(429, json!({"message":{"error":"This endpoint has been requested too many times. Try again later."}}))
}

/// Resolves `:id` (number or encoded path): the project, or the answer to give instead.
fn find_project<'a>(
    state: &'a StateData,
    base_url: &str,
    id: &str,
    user: u64,
    method: &Method,
) -> Result<&'a ProjectRecord, Answer> {
    let not_found = || Answer::message(404, "404 Project Not Found");
    let project = if !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()) {
        state.projects.get(&id.parse::<i64>().map_err(|_| not_found())?)
    } else if id.contains('/') {
        match state.projects.values().find(|p| p.path == id) {
            Some(project) => Some(project),
            None => match state.projects.values().find(|p| p.old_paths.iter().any(|old| old == id)) {
                Some(moved) if moved.members.contains_key(&user) => {
                    return Err(if *method == Method::GET {
                        Answer::empty(301).header("Location", format!("{base_url}/api/v4/projects/{}", moved.id))
                    } else {
                        Answer::message(405, "Non GET methods are not allowed for moved projects")
                    });
                }
                _ => None,
            },
        }
    } else {
        None
    };
    match project {
        Some(project) if project.members.contains_key(&user) => Ok(project),
        _ => Err(not_found()),
    }
}

fn route_call(state: &mut StateData, base_url: &str, call: &Call, user: u64, rest: &[&str]) -> Answer {
    let method = &call.method;
    if rest == ["user"] && *method == Method::GET {
        return Answer::json(
            200,
            json!({"id": user, "username": format!("bot-{user}"), "name": "cdtarget bot", "state": "active"}),
        );
    }
    // Routes are matched before the project is looked up: a raw `/` in the path matches none.
    let known_route = match rest {
        ["projects", _, "statuses", _] => true,
        ["projects", _, "repository", "commits", _, "statuses" | "comments"] => true,
        ["projects", _] => true,
        ["projects", _, "deploy_keys" | "hooks", ..] => rest.len() <= 6,
        _ => false,
    };
    if !known_route {
        return Answer::error(404, "404 Not Found");
    }
    // Grape checks parameters before the project is looked up.
    if let Some(answer) = feedback_params_refused(call, rest) {
        return answer;
    }
    // A raw `/` in the path gives more segments than any route has: 404 like GitLab.
    let project = match find_project(state, base_url, rest[1], user, method) {
        Ok(project) => project,
        Err(answer) => return answer,
    };
    let project_id = project.id;
    let role = project.members.get(&user).copied().unwrap_or(0);
    if rest.len() == 2 {
        if *method != Method::GET {
            return Answer::error(405, "405 Method Not Allowed");
        }
        if let Some(limit) = state.project_lookup_limit.as_mut() {
            let minute = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / 60;
            if minute != limit.window {
                limit.window = minute;
                limit.observed = 0;
            }
            limit.observed += 1;
            if limit.observed > limit.per_minute {
                return app_rate_limited();
            }
        }
        let project = &state.projects[&project_id];
        let name = project.path.rsplit('/').next().unwrap_or_default();
        return Answer::json(
            200,
            json!({
                "id": project.id,
                "name": name,
                "path": name,
                "path_with_namespace": project.path,
                "default_branch": "main",
                "ssh_url_to_repo": format!("git@127.0.0.1:{}.git", project.path),
                "http_url_to_repo": format!("{base_url}/{}.git", project.path),
                "web_url": format!("{base_url}/{}", project.path),
                "archived": false,
                "empty_repo": false,
                "permissions": {"project_access": {"access_level": role, "notification_level": 3}, "group_access": null},
            }),
        );
    }
    if matches!(rest.get(2), Some(&"statuses" | &"repository")) {
        refresh_repository(state, project_id);
    }
    match rest {
        ["projects", _, "statuses", sha] if *method == Method::POST => {
            return set_status(state, call, project_id, user, role, sha);
        }
        ["projects", _, "repository", "commits", sha, "statuses"] if *method == Method::GET => {
            return list_statuses(state, base_url, call, project_id, role, sha);
        }
        ["projects", _, "repository", "commits", sha, "comments"] if *method == Method::GET => {
            return list_comments(state, base_url, call, project_id, role, sha);
        }
        ["projects", _, "repository", "commits", sha, "comments"] if *method == Method::POST => {
            return add_comment(state, call, project_id, user, role, sha);
        }
        ["projects", _, "statuses" | "repository", ..] => return Answer::error(405, "405 Method Not Allowed"),
        _ => {}
    }
    let resource = rest[2];
    if !matches!(resource, "deploy_keys" | "hooks") {
        return Answer::error(404, "404 Not Found");
    }
    if role < MAINTAINER {
        return Answer::message(403, "403 Forbidden");
    }
    match (resource, &rest[3..]) {
        ("deploy_keys", []) if *method == Method::GET => {
            let project = &state.projects[&project_id];
            let items: Vec<Value> =
                project.links.iter().map(|(id, can_push)| key_entity(&state.keys[id], Some(*can_push))).collect();
            paginate(state.pagination, base_url, call, &format!("projects/{project_id}/deploy_keys"), items)
        }
        ("deploy_keys", []) if *method == Method::POST => add_deploy_key(state, call, project_id, user),
        ("deploy_keys", [key_id]) => {
            let Ok(key_id) = key_id.parse::<i64>() else { return Answer::error(400, "key_id is invalid") };
            let linked = state.projects[&project_id].links.get(&key_id).copied();
            match (method.clone(), linked) {
                (Method::GET, Some(can_push)) => Answer::json(200, key_entity(&state.keys[&key_id], Some(can_push))),
                (Method::GET, None) | (Method::PUT, None) => Answer::message(404, "404 Not found"),
                (Method::PUT, Some(_)) => {
                    let title = call.params.get("title").and_then(Value::as_str).map(str::to_owned);
                    let can_push = param_bool(&call.params, "can_push");
                    if title.is_none() && can_push.is_none() {
                        return Answer::error(
                            400,
                            "title, can_push are missing, at least one parameter must be provided",
                        );
                    }
                    let project = state.projects.get_mut(&project_id).expect("exists");
                    if let Some(can_push) = can_push {
                        project.links.insert(key_id, can_push);
                    }
                    let can_push = project.links[&key_id];
                    if let Some(title) = title {
                        state.keys.get_mut(&key_id).expect("linked keys exist").title = title;
                    }
                    Answer::json(200, key_entity(&state.keys[&key_id], Some(can_push)))
                }
                (Method::DELETE, None) => Answer::message(404, "404 Deploy key Not Found"),
                (Method::DELETE, Some(_)) => {
                    state.projects.get_mut(&project_id).expect("exists").links.remove(&key_id);
                    state.drop_orphan(key_id);
                    state.record_keys(project_id);
                    Answer::empty(204)
                }
                _ => Answer::error(405, "405 Method Not Allowed"),
            }
        }
        ("deploy_keys", [key_id, "enable"]) if *method == Method::POST => {
            let Ok(key_id) = key_id.parse::<i64>() else { return Answer::message(404, "404 Deploy key Not Found") };
            if !accessible_keys(state, user).contains(&key_id) {
                return Answer::message(404, "404 Deploy key Not Found");
            }
            let project = state.projects.get_mut(&project_id).expect("exists");
            project.links.entry(key_id).or_insert(false);
            state.record_keys(project_id);
            Answer::json(201, key_entity(&state.keys[&key_id], None))
        }
        ("hooks", []) if *method == Method::GET => {
            let items: Vec<Value> = state.projects[&project_id].hooks.values().map(|h| h.entity(project_id)).collect();
            paginate(state.pagination, base_url, call, &format!("projects/{project_id}/hooks"), items)
        }
        ("hooks", []) if *method == Method::POST => add_hook(state, call, project_id),
        ("hooks", [hook_id]) => {
            let Ok(hook_id) = hook_id.parse::<i64>() else { return Answer::error(400, "hook_id is invalid") };
            let allow_local = state.allow_local_requests;
            let project = state.projects.get_mut(&project_id).expect("exists");
            let Some(hook) = project.hooks.get_mut(&hook_id) else { return Answer::message(404, "404 Not found") };
            match method.clone() {
                Method::GET => Answer::json(200, hook.entity(project_id)),
                Method::PUT => {
                    if !HOOK_SETTINGS.iter().chain(EVENT_FLAGS).any(|p| call.params.contains_key(*p)) {
                        return Answer::error(400, "No parameters provided");
                    }
                    let mut edited = hook.clone();
                    if let Some(answer) = apply_hook_params(&mut edited, &call.params, allow_local) {
                        return answer;
                    }
                    // `self.token = nil if url_changed? && !encrypted_token_changed?`
                    if edited.url != hook.url && !call.params.contains_key("token") {
                        edited.token = None;
                    }
                    *hook = edited;
                    Answer::json(200, hook.entity(project_id))
                }
                Method::DELETE => {
                    project.hooks.remove(&hook_id);
                    Answer::empty(204)
                }
                _ => Answer::error(405, "405 Method Not Allowed"),
            }
        }
        ("hooks", [hook_id, "test", trigger]) if *method == Method::POST => {
            let Ok(hook_id) = hook_id.parse::<i64>() else { return Answer::message(404, "404 Not found") };
            if !matches!(*trigger, "push_events" | "tag_push_events") {
                return Answer::error(400, "trigger does not have a valid value");
            }
            let project = state.projects.get_mut(&project_id).expect("exists");
            let Some(hook) = project.hooks.get_mut(&hook_id) else { return Answer::message(404, "404 Not found") };
            // The fake does not deliver test events; a test counts as answered 2xx.
            hook.alert_status = "executable".to_owned();
            hook.failures = 0;
            Answer::json(201, json!({"message": "201 Created"}))
        }
        _ => Answer::error(404, "404 Not Found"),
    }
}

/// Keys the user may link: those on projects where the user is Maintainer, plus public keys.
fn accessible_keys(state: &StateData, user: u64) -> BTreeSet<i64> {
    let mut ids: BTreeSet<i64> = state
        .projects
        .values()
        .filter(|p| p.members.get(&user).is_some_and(|level| *level >= MAINTAINER))
        .flat_map(|p| p.links.keys().copied())
        .collect();
    ids.extend(state.keys.values().filter(|k| k.public && !k.user_key).map(|k| k.id));
    ids
}

/// `POST /projects/:id/deploy_keys` and its three outcomes.
fn add_deploy_key(state: &mut StateData, call: &Call, project_id: i64, user: u64) -> Answer {
    let Some(key) = call.params.get("key").and_then(Value::as_str) else { return Answer::error(400, "key is missing") };
    let Some(title) = call.params.get("title").and_then(Value::as_str) else {
        return Answer::error(400, "title is missing");
    };
    let key = key.trim();
    let can_push = param_bool(&call.params, "can_push").unwrap_or(false);
    // 1. This project already links exactly this key string: the existing link, unchanged.
    let project = &state.projects[&project_id];
    if let Some((id, existing_can_push)) =
        project.links.iter().find(|(id, _)| state.keys.get(id).is_some_and(|k| k.key == key))
    {
        return Answer::json(201, key_entity(&state.keys[id], Some(*existing_can_push)));
    }
    // 2. An accessible key with exactly this string: linked with the requested can_push.
    let accessible = accessible_keys(state, user);
    if let Some(id) = state.keys.values().find(|k| k.key == key && accessible.contains(&k.id)).map(|k| k.id) {
        state.projects.get_mut(&project_id).expect("exists").links.insert(id, can_push);
        state.record_keys(project_id);
        return Answer::json(201, key_entity(&state.keys[&id], Some(can_push)));
    }
    // 3. A new key: its fingerprint must be free everywhere.
    let Some(fingerprint) = fingerprint(key) else {
        return Answer::json(
            400,
            json!({"message":{"deploy_key.key":["is invalid"],"deploy_key.fingerprint_sha256":["cannot be generated"]}}),
        );
    };
    if state.keys.values().any(|k| k.fingerprint == fingerprint) {
        return Answer::json(400, json!({"message":{"deploy_key.fingerprint_sha256":["has already been taken"]}}));
    }
    let id = state.insert_key(title, key, &fingerprint, false);
    state.projects.get_mut(&project_id).expect("exists").links.insert(id, can_push);
    state.record_keys(project_id);
    Answer::json(201, key_entity(&state.keys[&id], Some(can_push)))
}

/// The hook parameters besides the event flags ([`EVENT_FLAGS`]).
const HOOK_SETTINGS: &[&str] = &[
    "url",
    "name",
    "description",
    "token",
    "signing_token",
    "enable_ssl_verification",
    "push_events_branch_filter",
    "branch_filter_strategy",
    "custom_webhook_template",
];

fn add_hook(state: &mut StateData, call: &Call, project_id: i64) -> Answer {
    if call.params.get("url").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Answer::error(400, "url is missing");
    }
    if state.projects[&project_id].hooks.len() >= HOOK_LIMIT {
        return Answer::error(422, &format!("Maximum number of project hooks ({HOOK_LIMIT}) exceeded"));
    }
    let id = state.take_id();
    let mut hook = HookRecord::new(id);
    if let Some(answer) = apply_hook_params(&mut hook, &call.params, state.allow_local_requests) {
        return answer;
    }
    let entity = hook.entity(project_id);
    state.projects.get_mut(&project_id).expect("exists").hooks.insert(id, hook);
    Answer::json(201, entity)
}

fn apply_hook_params(hook: &mut HookRecord, params: &Map<String, Value>, allow_local: bool) -> Option<Answer> {
    if let Some(url) = params.get("url").and_then(Value::as_str) {
        if !url_allowed(url, allow_local) {
            return Some(Answer::error(422, "Invalid url given"));
        }
        hook.url = url.to_owned();
    }
    for (field, target) in [("name", &mut hook.name), ("description", &mut hook.description)] {
        if let Some(value) = params.get(field).and_then(Value::as_str) {
            *target = value.to_owned();
        }
    }
    if let Some(token) = params.get("token").and_then(Value::as_str) {
        hook.token = (!token.is_empty()).then(|| token.to_owned());
    }
    if let Some(token) = params.get("signing_token").and_then(Value::as_str) {
        hook.signing_token = (!token.is_empty()).then(|| token.to_owned());
    }
    for flag in EVENT_FLAGS {
        if let Some(on) = param_bool(params, flag) {
            hook.events.insert((*flag).to_owned(), on);
        }
    }
    if let Some(on) = param_bool(params, "enable_ssl_verification") {
        hook.enable_ssl_verification = on;
    }
    if let Some(filter) = params.get("push_events_branch_filter").and_then(Value::as_str) {
        hook.push_events_branch_filter = filter.to_owned();
    }
    if let Some(strategy) = params.get("branch_filter_strategy").and_then(Value::as_str) {
        if !matches!(strategy, "wildcard" | "regex" | "all_branches") {
            return Some(Answer::error(400, "branch_filter_strategy does not have a valid value"));
        }
        hook.branch_filter_strategy = strategy.to_owned();
    }
    None
}

/// GitLab's URL validation: http(s) with a host; loopback and private addresses only when
/// local requests are allowed.
fn url_allowed(url: &str, allow_local: bool) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else { return false };
    if !matches!(parsed.scheme(), "http" | "https") {
        return false;
    }
    let Some(host) = parsed.host_str() else { return false };
    if allow_local {
        return true;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host == "localhost" {
        return false;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => !(ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()),
        Ok(IpAddr::V6(ip)) => !(ip.is_loopback() || ip.is_unspecified()),
        Err(_) => true,
    }
}

/// A page of `items` with GitLab's headers.
fn paginate(pagination: Pagination, base_url: &str, call: &Call, path: &str, items: Vec<Value>) -> Answer {
    let number = |name: &str, default: usize| {
        call.query.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.parse::<usize>().ok()).unwrap_or(default)
    };
    let per_page = number("per_page", 20).clamp(1, 100);
    let page = number("page", 1).max(1);
    let total = items.len();
    let pages = total.div_ceil(per_page).max(1);
    let page_items: Vec<Value> = items.into_iter().skip((page - 1) * per_page).take(per_page).collect();
    let link = |p: usize| {
        format!("{base_url}/api/v4/{path}?id={}&page={p}&per_page={per_page}", path.split('/').nth(1).unwrap_or(""))
    };
    let mut links = Vec::new();
    if page > 1 {
        links.push(format!("<{}>; rel=\"prev\"", link(page - 1)));
    }
    if page < pages {
        links.push(format!("<{}>; rel=\"next\"", link(page + 1)));
    }
    links.push(format!("<{}>; rel=\"first\"", link(1)));
    links.push(format!("<{}>; rel=\"last\"", link(pages)));
    let mut answer = Answer::json(200, Value::Array(page_items));
    match pagination {
        Pagination::None => {}
        Pagination::LinkOnly => answer = answer.header("Link", links.join(", ")),
        Pagination::AllHeaders => {
            let next = if page < pages { (page + 1).to_string() } else { String::new() };
            let prev = if page > 1 { (page - 1).to_string() } else { String::new() };
            answer = answer
                .header("Link", links.join(", "))
                .header("X-Next-Page", next)
                .header("X-Page", page.to_string())
                .header("X-Per-Page", per_page.to_string())
                .header("X-Prev-Page", prev)
                .header("X-Total", total.to_string())
                .header("X-Total-Pages", pages.to_string());
        }
    }
    answer
}

// === payloads and signatures ===

fn push_payload(project: &ProjectRecord, push: &Push, base_url: &str) -> Value {
    let is_tag = push.git_ref.starts_with("refs/tags/");
    let kind = if is_tag { "tag_push" } else { "push" };
    let deleted = push.after.chars().all(|c| c == '0');
    let name = project.path.rsplit('/').next().unwrap_or_default();
    let ssh = format!("git@127.0.0.1:{}.git", project.path);
    let http = format!("{base_url}/{}.git", project.path);
    let web = format!("{base_url}/{}", project.path);
    json!({
        "object_kind": kind,
        "event_name": kind,
        "before": push.before,
        "after": push.after,
        "ref": push.git_ref,
        "ref_protected": !is_tag,
        "checkout_sha": if deleted { Value::Null } else { json!(push.after) },
        "message": null,
        "user_id": BOT_USER,
        "user_name": "A Tenant",
        "user_username": "tenant",
        "user_email": "",
        "user_avatar": null,
        "project_id": project.id,
        "project": {
            "id": project.id,
            "name": name,
            "description": "",
            "web_url": web,
            "avatar_url": null,
            "git_ssh_url": ssh,
            "git_http_url": http,
            "namespace": project.path.rsplit_once('/').map(|(ns, _)| ns).unwrap_or_default(),
            "visibility_level": 0,
            "path_with_namespace": project.path,
            "default_branch": "main",
            "ci_config_path": null,
            "homepage": web,
            "url": ssh,
            "ssh_url": ssh,
            "http_url": http,
        },
        "commits": if deleted { json!([]) } else { json!([{
            "id": push.after,
            "message": "change\n",
            "title": "change",
            "timestamp": now_iso(),
            "url": format!("{web}/-/commit/{}", push.after),
            "author": {"name": "A Tenant", "email": "[REDACTED]"},
            "added": [], "modified": [], "removed": [],
        }]) },
        "total_commits_count": if deleted { 0 } else { 1 },
        "push_options": {},
        "repository": {
            "name": name,
            "url": ssh,
            "description": "",
            "homepage": web,
            "git_http_url": http,
            "git_ssh_url": ssh,
            "visibility_level": 0,
        },
    })
}

/// Standard Webhooks: `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`, the key being
/// the base64 after `whsec_`.
fn sign(signing_token: &str, id: &str, timestamp: &str, body: &str) -> String {
    use hmac::{KeyInit, Mac};
    let secret = signing_token.strip_prefix("whsec_").unwrap_or(signing_token);
    let key = STANDARD.decode(secret).unwrap_or_else(|_| secret.as_bytes().to_vec());
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

fn branch_matches(filter: &str, strategy: &str, branch: &str) -> bool {
    if filter.is_empty() || strategy == "all_branches" {
        return true;
    }
    if strategy == "regex" {
        return filter == branch;
    }
    filter.split(',').map(str::trim).any(|pattern| glob(pattern, branch))
}

fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((prefix, rest)) => {
            let Some(tail) = text.strip_prefix(prefix) else { return false };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && glob(rest, &tail[i..]))
        }
    }
}

// === small helpers ===

/// `ssh-keygen -lf`: `SHA256:` + unpadded base64 of SHA-256 over the decoded key blob.
pub fn fingerprint(key: &str) -> Option<String> {
    let blob = STANDARD.decode(key.split_whitespace().nth(1)?).ok()?;
    if blob.len() < 8 {
        return None;
    }
    Some(format!("SHA256:{}", STANDARD_NO_PAD.encode(Sha256::digest(&blob))))
}

/// A syntactically valid ed25519 public key line derived from `seed` (not a usable key pair:
/// enough for keys that only have to occupy a fingerprint).
pub fn synthetic_key(seed: &str) -> String {
    let mut blob = Vec::new();
    blob.extend_from_slice(&11u32.to_be_bytes());
    blob.extend_from_slice(b"ssh-ed25519");
    blob.extend_from_slice(&32u32.to_be_bytes());
    blob.extend_from_slice(&Sha256::digest(seed.as_bytes()));
    format!("ssh-ed25519 {} {seed}", STANDARD.encode(blob))
}

fn param_bool(params: &Map<String, Value>, name: &str) -> Option<bool> {
    match params.get(name)? {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.as_str() {
            "true" | "1" | "yes" => Some(true),
            "false" | "0" | "no" => Some(false),
            _ => None,
        },
        Value::Number(n) => Some(n.as_i64() != Some(0)),
        _ => None,
    }
}

fn parse_form(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(&k.replace('+', " ")), percent_decode(&v.replace('+', " ")))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex_value(bytes[i + 1]), hex_value(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_value(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|d| d as u8)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_iso() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.000Z")
}

fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (y, mo, d, h, mi, s) = civil(secs);
    let weekday = DAYS[((secs / 86_400) % 7) as usize];
    format!("{weekday}, {d:02} {} {y} {h:02}:{mi:02}:{s:02} GMT", MONTHS[(mo - 1) as usize])
}

/// Unix seconds to (year, month, day, hour, minute, second), proleptic Gregorian, UTC.
fn civil(secs: u64) -> (u64, u64, u64, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year as u64, month as u64, day as u64, rem / 3600, rem % 3600 / 60, rem % 60)
}

// === commit statuses, pipelines and commit comments (contract §14) ===

/// One file of a commit's diff: the lines it added (numbers in the new file) and removed
/// (numbers in the old file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileDiff {
    /// Added lines.
    pub added: BTreeSet<u32>,
    /// Removed lines.
    pub removed: BTreeSet<u32>,
}

#[derive(Clone, Debug)]
struct CommitRecord {
    parents: Vec<String>,
    files: BTreeMap<String, FileDiff>,
}

#[derive(Clone, Debug, Default)]
struct RepoModel {
    commits: BTreeMap<String, CommitRecord>,
    branches: BTreeMap<String, String>,
    tags: BTreeMap<String, String>,
    /// Branches only Maintainers may push and merge to (GitLab's default for the default branch).
    protected: BTreeSet<String>,
    /// A real bare repository read on every request instead of seeded commits.
    git_dir: Option<PathBuf>,
}

#[derive(Clone, Debug)]
struct PipelineRecord {
    id: i64,
    sha: String,
    git_ref: String,
    source: &'static str,
}

#[derive(Clone, Debug)]
struct StatusRecord {
    id: i64,
    sha: String,
    git_ref: String,
    name: String,
    status: String,
    description: Option<String>,
    target_url: Option<String>,
    coverage: Option<f64>,
    pipeline_id: i64,
    user: u64,
    retried: bool,
    /// A CI job of a pipeline, not an external status.
    ci_job: bool,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    /// Every state the record was in, in order.
    history: Vec<String>,
}

#[derive(Clone, Debug)]
struct CommentRecord {
    sha: String,
    note: String,
    path: Option<String>,
    line: Option<u32>,
    line_type: Option<String>,
    user: u64,
    created_at: String,
}

/// A status record as the fake stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusView {
    /// Record id.
    pub id: i64,
    /// Full SHA.
    pub sha: String,
    /// Ref.
    pub git_ref: String,
    /// Name.
    pub name: String,
    /// `created`, `pending`, `running`, `success`, `failed`, `canceled`, `skipped`.
    pub status: String,
    /// Description.
    pub description: Option<String>,
    /// Target URL.
    pub target_url: Option<String>,
    /// Pipeline.
    pub pipeline_id: i64,
    /// Who posted it.
    pub user: u64,
    /// Replaced by a newer record of the same name in its pipeline.
    pub retried: bool,
    /// A CI job rather than an external status.
    pub ci_job: bool,
    /// Every state the record went through, in order (e.g. `["pending", "success"]`).
    pub history: Vec<String>,
}

/// A commit comment as the fake stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommentView {
    /// Full SHA.
    pub sha: String,
    /// The stored note (quick actions removed).
    pub note: String,
    /// Inline position, when it stuck.
    pub path: Option<String>,
    /// Line, when it stuck.
    pub line: Option<u32>,
    /// Author.
    pub user: u64,
}

/// A pipeline as the fake stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineView {
    /// Id.
    pub id: i64,
    /// Full SHA.
    pub sha: String,
    /// Ref.
    pub git_ref: String,
    /// `external` (made by a status POST) or `push` (a CI pipeline).
    pub source: String,
}

impl FakeGitLab {
    /// Gives `user` access level `level` on a project.
    pub fn set_role(&self, project_id: i64, user: u64, level: u32) {
        self.state().projects.get_mut(&project_id).expect("project exists").members.insert(user, level);
    }

    /// Adds a commit whose diff is `files` (path, added lines, removed lines) on top of `branch`
    /// (created when missing) and moves the branch to it; returns its SHA (40 hex digits).
    pub fn commit(&self, project_id: i64, branch: &str, files: &[(&str, &[u32], &[u32])]) -> String {
        let mut state = self.state();
        let n = state.take_id();
        let project = state.projects.get_mut(&project_id).expect("project exists");
        let sha = hex(&Sha256::digest(format!("commit-{project_id}-{n}")))[..40].to_owned();
        let parents = project.repo.branches.get(branch).cloned().into_iter().collect();
        let files = files
            .iter()
            .map(|(path, added, removed)| {
                let diff =
                    FileDiff { added: added.iter().copied().collect(), removed: removed.iter().copied().collect() };
                ((*path).to_owned(), diff)
            })
            .collect();
        project.repo.commits.insert(sha.clone(), CommitRecord { parents, files });
        project.repo.branches.insert(branch.to_owned(), sha.clone());
        sha
    }

    /// Deletes branch `name` (its commits stay, reachable or not).
    pub fn delete_branch(&self, project_id: i64, name: &str) {
        self.state().projects.get_mut(&project_id).expect("project exists").repo.branches.remove(name);
    }

    /// Points tag `name` at `sha`.
    pub fn tag(&self, project_id: i64, name: &str, sha: &str) {
        self.state().projects.get_mut(&project_id).expect("project exists").repo.tags.insert(name.into(), sha.into());
    }

    /// Protects `branch`: only Maintainers may push or merge (GitLab's default for `main`).
    pub fn protect_branch(&self, project_id: i64, branch: &str) {
        self.state().projects.get_mut(&project_id).expect("project exists").repo.protected.insert(branch.into());
    }

    /// Serves the project's commits, branches and tags from the bare repository `git_dir`,
    /// read with `git` on every request (pushes show at once).
    pub fn back_with_git(&self, project_id: i64, git_dir: &Path) {
        let mut state = self.state();
        let project = state.projects.get_mut(&project_id).expect("project exists");
        project.repo.git_dir = Some(git_dir.to_owned());
        refresh_repository(&mut state, project_id);
    }

    /// A CI pipeline (source `push`) for `sha` on `git_ref` with jobs `jobs` (each `running`);
    /// returns its id.
    pub fn add_ci_pipeline(&self, project_id: i64, sha: &str, git_ref: &str, jobs: &[&str]) -> i64 {
        let mut state = self.state();
        let pipeline = state.take_id();
        let ids: Vec<i64> = jobs.iter().map(|_| state.take_id()).collect();
        let project = state.projects.get_mut(&project_id).expect("project exists");
        project.pipelines.push(PipelineRecord {
            id: pipeline,
            sha: sha.into(),
            git_ref: git_ref.into(),
            source: "push",
        });
        for (job, id) in jobs.iter().zip(ids) {
            project.statuses.push(StatusRecord {
                id,
                sha: sha.into(),
                git_ref: git_ref.into(),
                name: (*job).into(),
                status: "running".into(),
                description: None,
                target_url: None,
                coverage: None,
                pipeline_id: pipeline,
                user: BOT_USER + 1000,
                retried: false,
                ci_job: true,
                created_at: now_iso(),
                started_at: Some(now_iso()),
                finished_at: None,
                history: vec!["running".into()],
            });
        }
        pipeline
    }

    /// Every status record of the project (retried ones and CI jobs included), oldest first.
    pub fn statuses(&self, project_id: i64) -> Vec<StatusView> {
        let state = self.state();
        let project = state.projects.get(&project_id).expect("project exists");
        project
            .statuses
            .iter()
            .map(|r| StatusView {
                id: r.id,
                sha: r.sha.clone(),
                git_ref: r.git_ref.clone(),
                name: r.name.clone(),
                status: r.status.clone(),
                description: r.description.clone(),
                target_url: r.target_url.clone(),
                pipeline_id: r.pipeline_id,
                user: r.user,
                retried: r.retried,
                ci_job: r.ci_job,
                history: r.history.clone(),
            })
            .collect()
    }

    /// Every pipeline of the project, oldest first.
    pub fn pipelines(&self, project_id: i64) -> Vec<PipelineView> {
        let state = self.state();
        let project = state.projects.get(&project_id).expect("project exists");
        project
            .pipelines
            .iter()
            .map(|p| PipelineView { id: p.id, sha: p.sha.clone(), git_ref: p.git_ref.clone(), source: p.source.into() })
            .collect()
    }

    /// Every commit comment of the project, oldest first.
    pub fn comments(&self, project_id: i64) -> Vec<CommentView> {
        let state = self.state();
        let project = state.projects.get(&project_id).expect("project exists");
        project
            .comments
            .iter()
            .map(|c| CommentView {
                sha: c.sha.clone(),
                note: c.note.clone(),
                path: c.path.clone(),
                line: c.line,
                user: c.user,
            })
            .collect()
    }

    /// Every quick action GitLab would have run from a note (`/command args`), in order.
    pub fn quick_actions(&self) -> Vec<String> {
        self.state().quick_actions.iter().map(|(_, command)| command.clone()).collect()
    }

    /// What `GET /__state` answers.
    pub fn state_document(&self) -> Value {
        state_document(&self.state())
    }
}

/// `GET /__state`: counts by endpoint and the feedback records of every project.
fn state_document(state: &StateData) -> Value {
    let counts: Map<String, Value> = state
        .counts
        .by_endpoint
        .iter()
        .map(|(name, c)| (name.clone(), json!({"requests": c.requests, "writes": c.writes})))
        .collect();
    let projects: Map<String, Value> = state
        .projects
        .values()
        .map(|p| {
            let statuses: Vec<Value> = p.statuses.iter().map(|r| status_entity(r, true)).collect();
            let comments: Vec<Value> = p.comments.iter().map(comment_entity).collect();
            let pipelines: Vec<Value> = p
                .pipelines
                .iter()
                .map(|x| json!({"id": x.id, "sha": x.sha, "ref": x.git_ref, "source": x.source}))
                .collect();
            (p.path.clone(), json!({"id": p.id, "statuses": statuses, "comments": comments, "pipelines": pipelines}))
        })
        .collect();
    let actions: Vec<&String> = state.quick_actions.iter().map(|(_, c)| c).collect();
    json!({"counts": counts, "projects": projects, "quick_actions": actions})
}

/// The endpoint name of a request for the counts of `/__state`.
fn endpoint_name(method: &Method, route: &str) -> String {
    match (method.as_str(), route) {
        ("POST", "/api/v4/projects/:id/statuses/:sha") | ("POST", "/projects/:id/statuses/:sha") => {
            "statuses.create".into()
        }
        ("GET", r) if r.ends_with("/repository/commits/:sha/statuses") => "statuses.list".into(),
        ("POST", r) if r.ends_with("/repository/commits/:sha/comments") => "comments.create".into(),
        ("GET", r) if r.ends_with("/repository/commits/:sha/comments") => "comments.list".into(),
        (method, route) => format!("{method} {route}"),
    }
}

/// Grape's parameter checks of the feedback routes, which GitLab runs before anything else.
fn feedback_params_refused(call: &Call, rest: &[&str]) -> Option<Answer> {
    match (rest, &call.method) {
        (["projects", _, "statuses", _], &Method::POST) => {
            let Some(state) = call.params.get("state") else { return Some(Answer::error(400, "state is missing")) };
            let valid = ["pending", "running", "success", "failed", "canceled", "skipped"];
            if !state.as_str().is_some_and(|s| valid.contains(&s)) {
                return Some(Answer::error(400, "state does not have a valid value"));
            }
            if let Some(coverage) = call.params.get("coverage")
                && number(coverage).is_none()
            {
                return Some(Answer::error(400, "coverage is invalid"));
            }
            if let Some(id) = call.params.get("pipeline_id")
                && integer(id).is_none()
            {
                return Some(Answer::error(400, "pipeline_id is invalid"));
            }
            None
        }
        (["projects", _, "repository", "commits", _, "comments"], &Method::POST) => {
            if !call.params.contains_key("note") {
                return Some(Answer::error(400, "note is missing"));
            }
            if call.params.contains_key("path") && !call.params.contains_key("line") {
                return Some(Answer::error(400, "line is missing"));
            }
            if let Some(line_type) = call.params.get("line_type")
                && !matches!(line_type.as_str(), Some("new" | "old"))
            {
                return Some(Answer::error(400, "line_type does not have a valid value"));
            }
            None
        }
        (["projects", _, "repository", "commits", _, "statuses"], &Method::GET) => {
            let query = |name: &str| call.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
            if query("order_by").is_some_and(|o| !matches!(o, "id" | "pipeline_id")) {
                return Some(Answer::error(400, "order_by does not have a valid value"));
            }
            if query("sort").is_some_and(|o| !matches!(o, "asc" | "desc")) {
                return Some(Answer::error(400, "sort does not have a valid value"));
            }
            None
        }
        _ => None,
    }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn text_param<'a>(params: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    params.get(name).and_then(Value::as_str)
}

/// Reads the project's bare repository again, when it has one: refs, and every commit not
/// known yet with its parents and the added and removed lines of each file.
fn refresh_repository(state: &mut StateData, project_id: i64) {
    let Some(project) = state.projects.get_mut(&project_id) else { return };
    let Some(git_dir) = project.repo.git_dir.clone() else { return };
    let git = |args: &[&str]| -> Option<String> {
        let output = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&git_dir)
            .args(["-c", "core.quotePath=false"])
            .args(args)
            .output()
            .ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let Some(refs) = git(&["for-each-ref", "--format=%(refname)%00%(objectname)%00%(*objectname)"]) else { return };
    let repo = &mut project.repo;
    repo.branches.clear();
    repo.tags.clear();
    for line in refs.lines() {
        let mut parts = line.split('\0');
        let (Some(name), Some(object), peeled) = (parts.next(), parts.next(), parts.next()) else { continue };
        let commit = peeled.filter(|p| !p.is_empty()).unwrap_or(object).to_owned();
        if let Some(branch) = name.strip_prefix("refs/heads/") {
            repo.branches.insert(branch.to_owned(), commit);
        } else if let Some(tag) = name.strip_prefix("refs/tags/") {
            repo.tags.insert(tag.to_owned(), commit);
        }
    }
    let Some(all) = git(&["rev-list", "--parents", "--all"]) else { return };
    for line in all.lines() {
        let mut ids = line.split_whitespace();
        let Some(sha) = ids.next() else { continue };
        if repo.commits.contains_key(sha) {
            continue;
        }
        let parents: Vec<String> = ids.map(str::to_owned).collect();
        let diff = git(&["diff-tree", "--root", "-p", "-U0", "--no-renames", "--no-color", "--no-commit-id", sha])
            .unwrap_or_default();
        repo.commits.insert(sha.to_owned(), CommitRecord { parents, files: parse_diff(&diff) });
    }
}

/// The added and removed line numbers of each file of a `-U0` patch.
fn parse_diff(patch: &str) -> BTreeMap<String, FileDiff> {
    let mut files: BTreeMap<String, FileDiff> = BTreeMap::new();
    let mut old_path: Option<String> = None;
    let mut current: Option<String> = None;
    for line in patch.lines() {
        if let Some(path) = line.strip_prefix("--- ") {
            old_path = path.strip_prefix("a/").map(str::to_owned);
        } else if let Some(path) = line.strip_prefix("+++ ") {
            current = path.strip_prefix("b/").map(str::to_owned).or(old_path.clone());
        } else if let (Some(hunk), Some(path)) = (line.strip_prefix("@@ -"), current.as_ref()) {
            let Some((ranges, _)) = hunk.split_once(" @@") else { continue };
            let Some((old, new)) = ranges.split_once(" +") else { continue };
            let range = |text: &str| -> (u32, u32) {
                let (start, count) = text.split_once(',').unwrap_or((text, "1"));
                (start.parse().unwrap_or(0), count.parse().unwrap_or(1))
            };
            let ((old_start, old_count), (new_start, new_count)) = (range(old), range(new));
            let diff = files.entry(path.clone()).or_default();
            diff.removed.extend(old_start..old_start + old_count);
            diff.added.extend(new_start..new_start + new_count);
        }
    }
    files
}

/// `project.commit(:sha)`: a full SHA, a branch, a tag, or an unambiguous abbreviated SHA.
fn resolve_commit(repo: &RepoModel, sha: &str) -> Option<String> {
    if repo.commits.contains_key(sha) {
        return Some(sha.to_owned());
    }
    if let Some(head) = repo.branches.get(sha).or_else(|| repo.tags.get(sha)) {
        return Some(head.clone());
    }
    if sha.len() >= 4 && sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut found = repo.commits.keys().filter(|full| full.starts_with(&sha.to_ascii_lowercase()));
        if let (Some(one), None) = (found.next(), found.next()) {
            return Some(one.clone());
        }
    }
    None
}

/// The first branch (by name) whose history holds `sha`.
fn branch_containing(repo: &RepoModel, sha: &str) -> Option<String> {
    repo.branches.iter().find(|(_, head)| reachable(repo, head, sha)).map(|(name, _)| name.clone())
}

fn reachable(repo: &RepoModel, from: &str, target: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_owned()];
    while let Some(sha) = stack.pop() {
        if sha == target {
            return true;
        }
        if seen.insert(sha.clone())
            && let Some(commit) = repo.commits.get(&sha)
        {
            stack.extend(commit.parents.iter().cloned());
        }
    }
    false
}

fn status_entity(record: &StatusRecord, with_retried: bool) -> Value {
    let mut value = json!({
        "id": record.id,
        "sha": record.sha,
        "ref": record.git_ref,
        "status": record.status,
        "name": record.name,
        "stage": if record.ci_job { "test" } else { "external" },
        "target_url": record.target_url,
        "description": record.description,
        "created_at": record.created_at,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "allow_failure": false,
        "coverage": record.coverage,
        "pipeline_id": record.pipeline_id,
        "author": {"id": record.user, "username": format!("bot-{}", record.user), "name": "cdtarget bot", "state": "active"},
    });
    if with_retried {
        value["retried"] = json!(record.retried);
    }
    value
}

fn comment_entity(comment: &CommentRecord) -> Value {
    json!({
        "note": comment.note,
        "path": comment.path,
        "line": comment.line,
        "line_type": comment.line_type,
        "author": {"id": comment.user, "username": format!("bot-{}", comment.user), "name": "cdtarget bot", "state": "active"},
        "created_at": comment.created_at,
    })
}

fn field_errors(field: &str, messages: &[String]) -> Answer {
    Answer::json(400, json!({ "message": { field: messages } }))
}

/// `POST /projects/:id/statuses/:sha`, in the order of `Ci::CreateCommitStatusService`.
fn set_status(state: &mut StateData, call: &Call, project_id: i64, user: u64, role: u32, raw_sha: &str) -> Answer {
    if role < DEVELOPER {
        return Answer::message(403, "403 Forbidden");
    }
    let project = state.projects.get(&project_id).expect("exists");
    let Some(sha) = resolve_commit(&project.repo, raw_sha) else {
        return Answer::message(404, "404 Commit Not Found");
    };
    let wanted = text_param(&call.params, "state").unwrap_or_default().to_owned();
    let sent_ref = text_param(&call.params, "ref").filter(|r| !r.is_empty()).map(str::to_owned);
    let pipeline_id = call.params.get("pipeline_id").and_then(integer);
    // 1. The newest pipeline for the SHA (among the newest 100 unless pinned), by ref and id.
    let mut candidates: Vec<&PipelineRecord> = project.pipelines.iter().filter(|p| p.sha == sha).collect();
    candidates.sort_by_key(|p| std::cmp::Reverse(p.id));
    if pipeline_id.is_none() {
        candidates.truncate(100);
    }
    let pipeline = candidates
        .into_iter()
        .filter(|p| sent_ref.as_ref().is_none_or(|r| *r == p.git_ref))
        .find(|p| pipeline_id.is_none_or(|id| id == p.id))
        .cloned();
    // 2. The ref: as sent, else the pipeline's, else the first branch holding the commit.
    let Some(git_ref) = sent_ref
        .clone()
        .or_else(|| pipeline.as_ref().map(|p| p.git_ref.clone()))
        .or_else(|| branch_containing(&project.repo, &sha))
    else {
        return Answer::message(404, "404 References for commit Not Found");
    };
    if pipeline_id.is_some() && pipeline.is_none() {
        return Answer::message(404, "404 Pipeline for pipeline_id, sha and ref Not Found");
    }
    let protected = project.repo.protected.contains(&git_ref);
    // 3. No pipeline: an external one is persisted now, whatever follows.
    let pipeline_id = match pipeline {
        Some(pipeline) => pipeline.id,
        None => {
            let id = state.take_id();
            let project = state.projects.get_mut(&project_id).expect("exists");
            project.pipelines.push(PipelineRecord {
                id,
                sha: sha.clone(),
                git_ref: git_ref.clone(),
                source: "external",
            });
            id
        }
    };
    // `update_pipeline`: on a protected branch, only who may push or merge there.
    if protected && role < MAINTAINER {
        return Answer::message(403, "403 Forbidden");
    }
    let name = text_param(&call.params, "name")
        .or_else(|| text_param(&call.params, "context"))
        .map(str::to_owned)
        .unwrap_or_else(|| "default".to_owned());
    // 4. The open record of this pipeline, ref, name and user, or a new one.
    let next_id = state.next_id;
    let project = state.projects.get_mut(&project_id).expect("exists");
    let open = project.statuses.iter().position(|r| {
        !r.ci_job
            && r.pipeline_id == pipeline_id
            && r.git_ref == git_ref
            && r.name == name
            && r.user == user
            && !r.retried
            && matches!(r.status.as_str(), "created" | "pending" | "running")
    });
    let mut record = match open {
        Some(index) => project.statuses[index].clone(),
        None => StatusRecord {
            id: next_id,
            sha: sha.clone(),
            git_ref: git_ref.clone(),
            name: name.clone(),
            status: "created".into(),
            description: None,
            target_url: None,
            coverage: None,
            pipeline_id,
            user,
            retried: false,
            ci_job: false,
            created_at: now_iso(),
            started_at: None,
            finished_at: None,
            history: Vec::new(),
        },
    };
    // 5. Only present (non-blank) values are assigned.
    if let Some(description) = text_param(&call.params, "description").filter(|d| !d.trim().is_empty()) {
        record.description = Some(description.to_owned());
    }
    if let Some(url) = text_param(&call.params, "target_url").filter(|u| !u.trim().is_empty()) {
        record.target_url = Some(url.trim().to_owned());
    }
    if let Some(coverage) = call.params.get("coverage").and_then(number) {
        record.coverage = Some(coverage);
    }
    // 6. Validation.
    if record.description.as_ref().is_some_and(|d| d.chars().count() > 255) {
        return field_errors("description", &["is too long (maximum is 255 characters)".into()]);
    }
    if let Some(url) = &record.target_url {
        let mut errors = Vec::new();
        if url.contains(['\r', '\n']) {
            errors.push("is blocked: URI is invalid".to_owned());
        } else {
            match reqwest::Url::parse(url) {
                Ok(parsed) if !matches!(parsed.scheme(), "http" | "https") => {
                    errors.push("is blocked: Only allowed schemes are http, https".into());
                }
                Ok(parsed) if parsed.host_str().is_none_or(str::is_empty) => {
                    errors.push("is blocked: Hostname or IP address invalid".into());
                }
                Ok(_) => {}
                Err(_) => errors.push("is blocked: Only allowed schemes are http, https".into()),
            }
        }
        if url.chars().count() > 255 {
            errors.push("is too long (maximum is 255 characters)".into());
        }
        if !errors.is_empty() {
            return field_errors("target_url", &errors);
        }
    }
    if name.trim().is_empty() {
        return field_errors("name", &["can't be blank".into()]);
    }
    if project.statuses.iter().any(|r| r.ci_job && r.pipeline_id == pipeline_id && r.name == name) {
        return field_errors("name", &["has already been taken".into()]);
    }
    // 7. The transition (`running` fires `enqueue` silently first).
    let refused = |event: &str, from: &str| {
        Answer::message(
            400,
            &format!(
                "Cannot transition status via :{event} from :{from} (Reason(s): Status cannot transition via \"{event}\")"
            ),
        )
    };
    match (record.status.as_str(), wanted.as_str()) {
        ("pending", "pending") => return refused("enqueue", "pending"),
        ("running", "pending") => return refused("enqueue", "running"),
        ("running", "running") => return refused("run", "running"),
        ("running", "skipped") => return refused("skip", "running"),
        _ => {}
    }
    let now = now_iso();
    if wanted == "running" {
        record.started_at = Some(now.clone());
    }
    if matches!(wanted.as_str(), "success" | "failed" | "canceled") {
        record.finished_at = Some(now);
    }
    record.history.push(wanted.clone());
    record.status = wanted;
    let id = record.id;
    match open {
        Some(index) => project.statuses[index] = record.clone(),
        None => project.statuses.push(record.clone()),
    }
    // Every other record of this name in the pipeline is retried (any user, any type).
    for other in project.statuses.iter_mut() {
        if other.id != id && other.pipeline_id == pipeline_id && other.name == name && !other.retried {
            other.retried = true;
        }
    }
    if open.is_none() {
        state.next_id += 1;
    }
    Answer::json(201, status_entity(&record, false))
}

/// `GET /projects/:id/repository/commits/:sha/statuses`: the 404 check resolves `:sha`, the
/// records are matched on the raw string.
fn list_statuses(state: &StateData, base_url: &str, call: &Call, project_id: i64, role: u32, raw_sha: &str) -> Answer {
    if role < REPORTER {
        return Answer::message(403, "403 Forbidden");
    }
    let project = &state.projects[&project_id];
    if resolve_commit(&project.repo, raw_sha).is_none() {
        return Answer::message(404, "404 Commit Not Found");
    }
    let query = |name: &str| call.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let all = query("all").is_some_and(|v| v == "true");
    let mut records: Vec<&StatusRecord> = project
        .statuses
        .iter()
        .filter(|r| r.sha == raw_sha)
        .filter(|r| all || !r.retried)
        .filter(|r| query("ref").is_none_or(|v| v == r.git_ref))
        .filter(|r| query("name").is_none_or(|v| v == r.name))
        .filter(|r| query("stage").is_none_or(|v| v == if r.ci_job { "test" } else { "external" }))
        .filter(|r| query("pipeline_id").is_none_or(|v| v == r.pipeline_id.to_string()))
        .collect();
    match query("order_by").as_deref() {
        Some("pipeline_id") => records.sort_by_key(|r| (r.pipeline_id, r.id)),
        _ => records.sort_by_key(|r| r.id),
    }
    if query("sort").as_deref() == Some("desc") {
        records.reverse();
    }
    let items = records.into_iter().map(|r| status_entity(r, false)).collect();
    paginate(
        state.pagination,
        base_url,
        call,
        &format!("projects/{project_id}/repository/commits/{raw_sha}/statuses"),
        items,
    )
}

fn list_comments(state: &StateData, base_url: &str, call: &Call, project_id: i64, role: u32, raw_sha: &str) -> Answer {
    if role < REPORTER {
        return Answer::message(403, "403 Forbidden");
    }
    let project = &state.projects[&project_id];
    let Some(sha) = resolve_commit(&project.repo, raw_sha) else {
        return Answer::message(404, "404 Commit Not Found");
    };
    let items = project.comments.iter().filter(|c| c.sha == sha).map(comment_entity).collect();
    paginate(
        state.pagination,
        base_url,
        call,
        &format!("projects/{project_id}/repository/commits/{sha}/comments"),
        items,
    )
}

/// The quick actions of `note` (lines starting with `/word` outside code blocks, stricter than
/// GitLab, which only runs the commands a commit knows) and the note without them.
fn extract_quick_actions(note: &str) -> (Vec<String>, String) {
    let mut commands = Vec::new();
    let mut kept = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in note.split('\n') {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        if let Some(c) = marker {
            let run = trimmed.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                match fence {
                    None => fence = Some((c, run)),
                    Some((open, length)) if open == c && run >= length && trimmed[run..].trim().is_empty() => {
                        fence = None
                    }
                    Some(_) => {}
                }
                kept.push(line);
                continue;
            }
        }
        let is_command = fence.is_none()
            && line.starts_with('/')
            && line[1..].chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && line[1..].chars().take_while(|c| !c.is_whitespace()).all(|c| c.is_ascii_alphanumeric() || c == '_');
        if is_command {
            commands.push(line.to_owned());
        } else {
            kept.push(line);
        }
    }
    (commands, kept.join("\n"))
}

/// `POST /projects/:id/repository/commits/:sha/comments`.
fn add_comment(state: &mut StateData, call: &Call, project_id: i64, user: u64, role: u32, raw_sha: &str) -> Answer {
    if role < REPORTER {
        return Answer::message(403, "403 Forbidden");
    }
    let project = &state.projects[&project_id];
    let Some(sha) = resolve_commit(&project.repo, raw_sha) else {
        return Answer::message(404, "404 Commit Not Found");
    };
    let note = text_param(&call.params, "note").unwrap_or_default().to_owned();
    let (commands, stored) = extract_quick_actions(&note);
    if !commands.is_empty() && stored.trim().is_empty() {
        state.quick_actions.extend(commands.iter().map(|c| (project_id, c.clone())));
        return Answer::json(202, json!({"commands_changes": {}, "summary": commands}));
    }
    if stored.trim().is_empty() {
        return Answer::message(400, "400 Bad request - Note {:note=>[\"can't be blank\"]}");
    }
    if note.chars().count() > 1_000_000 {
        return Answer::message(
            400,
            "400 Bad request - Note {:note=>[\"is too long (maximum is 1000000 characters)\"]}",
        );
    }
    state.quick_actions.extend(commands.iter().map(|c| (project_id, c.clone())));
    // The inline position sticks only on an added (`new`) or removed (`old`) line of this
    // commit's own diff; for `old` the answer's line is null.
    let path = text_param(&call.params, "path").map(str::to_owned);
    let line = call.params.get("line").and_then(integer).and_then(|l| u32::try_from(l).ok());
    let line_type = text_param(&call.params, "line_type").unwrap_or("new").to_owned();
    let diff = path.as_ref().and_then(|p| project.repo.commits.get(&sha)?.files.get(p));
    let sticks = match (diff, line) {
        (Some(diff), Some(line)) if line_type == "new" => diff.added.contains(&line),
        (Some(diff), Some(line)) => diff.removed.contains(&line),
        _ => false,
    };
    let comment = CommentRecord {
        sha,
        note: stored,
        path: path.filter(|_| sticks),
        line: line.filter(|_| sticks && line_type == "new"),
        line_type: sticks.then_some(line_type),
        user,
        created_at: now_iso(),
    };
    let entity = comment_entity(&comment);
    state.projects.get_mut(&project_id).expect("exists").comments.push(comment);
    Answer::json(201, entity)
}
