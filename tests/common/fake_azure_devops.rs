//! A stateful fake Azure DevOps on `https://127.0.0.1:<port>`, faithful to
//! `../shared/contracts/azure-devops.md` (§8 is its specification): organizations as the first
//! path segment, agent pools, agents and job requests with the service's JSON field names and
//! shapes (absent fields omitted, never `null`), personal access tokens with scopes, expiry and
//! revocation, Entra tokens from a client-credentials token endpoint, the three ways the service
//! answers an unauthenticated request (401 with `X-TFS-FedAuthRedirect: Suppress`, else 302 to a
//! sign-in page or 203 with one), `api-version` checks, per-pool permissions, rate-limit headers
//! and a blocked mode, and injectable faults. Every timestamp comes from a fake clock that only
//! tests move ([`FakeAzureDevOps::advance_clock`]).
//!
//! It serves HTTPS only, with a certificate for `IP:127.0.0.1` and `DNS:localhost` signed by a CA
//! of its own, written to [`FakeAzureDevOps::ca_pem_path`]: a Go client (KEDA's operator) trusts it
//! through `SSL_CERT_FILE`, reqwest through `add_root_certificate`. The server runs on its own
//! runtime thread and stops on drop.
//!
//! Test controls are methods of the handle (no admin API over HTTP); the request log keeps which
//! credential each request carried as a [`Credential`], never the token itself.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;

use super::Tls;
use super::http_git::{TlsFiles, TlsListener, generate_certificate, tls_acceptor};
use super::process::loopback;
use super::server_thread::ServerThread;

/// The organization every fake starts with; [`FakeAzureDevOps::org_url`] is its URL.
pub const DEFAULT_ORG: &str = "cdtarget-test";
/// The highest `api-version` a new organization serves.
pub const DEFAULT_API_CEILING: &str = "7.2";
/// The Azure DevOps resource id; tokens are asked for `<this>/.default`.
pub const DEVOPS_RESOURCE: &str = "499b84ac-1321-427f-aa17-267ca6975798";
/// Tenant GUID an organization backed by Microsoft accounts reports in `X-VSS-ResourceTenant`.
pub const MSA_TENANT: &str = "00000000-0000-0000-0000-000000000000";
/// Most job requests one `$top` answer holds.
pub const TOP_CAP: usize = 200;

/// What a personal access token may do (contract §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// `vso.agentpools`, "Agent Pools (Read)": list pools, agents and job requests.
    AgentPoolsRead,
    /// `vso.agentpools_manage`, "Agent Pools (Read & manage)": also add, update, delete agents.
    AgentPoolsManage,
    /// `full`: everything.
    Full,
}

impl Scope {
    /// The scope's name as Azure DevOps spells it.
    pub fn name(self) -> &'static str {
        match self {
            Scope::AgentPoolsRead => "vso.agentpools",
            Scope::AgentPoolsManage => "vso.agentpools_manage",
            Scope::Full => "full",
        }
    }
}

/// How an organization answers an unauthenticated request that lacks
/// `X-TFS-FedAuthRedirect: Suppress` (contract §8.2 rule 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unauthenticated {
    /// 401 with the JSON body and challenge headers, as with `Suppress`.
    Status401,
    /// 302 to `/_signin?realm=dev.azure.com&…` with an "Object moved" HTML body; the sign-in page
    /// itself answers 200 HTML, so a client following redirects sees a 200 HTML page.
    #[default]
    Redirect302,
    /// 203 with an HTML sign-in page.
    SignIn203,
}

/// A permission an identity holds on a pool (contract §8.2 rule 8). Every identity holds
/// [`PoolAccess::Manage`] on every pool until [`FakeAzureDevOps::set_pool_access`] says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PoolAccess {
    /// Cannot see the pool: absent from lists, its agents list empty, its GET 404.
    None,
    /// Reader: sees the pool, its agents and job requests; writes on agents answer 403.
    View,
    /// Administrator: may also add, update and delete agents.
    Manage,
}

/// How a job request ended (`result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobResult {
    /// `succeeded`
    Succeeded,
    /// `succeededWithIssues`
    SucceededWithIssues,
    /// `failed`
    Failed,
    /// `canceled`
    Canceled,
    /// `skipped`
    Skipped,
    /// `abandoned` (what a request held by a dead agent becomes once its lock lapses)
    Abandoned,
}

impl JobResult {
    /// The value of `result` in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            JobResult::Succeeded => "succeeded",
            JobResult::SucceededWithIssues => "succeededWithIssues",
            JobResult::Failed => "failed",
            JobResult::Canceled => "canceled",
            JobResult::Skipped => "skipped",
            JobResult::Abandoned => "abandoned",
        }
    }
}

/// A fault answered instead of the real thing (contract §8.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// This status: 500 with the service's JSON error body, any other (502, 503, 504, …) with a
    /// small HTML page, as a proxy in front of the service answers.
    Status(u16),
    /// The connection is aborted before the response's body (no usable response).
    Reset,
    /// No answer at all until the fake is dropped (the client times out).
    Stall,
    /// 302 to the sign-in page, as a proxy or a policy change would answer.
    SignInRedirect,
    /// 203 with the HTML sign-in page.
    SignInPage,
}

/// How the rate limiter treats an identity (contract §5, §8.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RateMode {
    /// Headers from 80 % of the limit on; over the limit the identity is delayed.
    #[default]
    Normal,
    /// Every answer carries the headers, `X-RateLimit-Remaining: 0` and `X-RateLimit-Delay` (the
    /// fake does not actually wait).
    Delayed,
    /// Every request answers 429 with `Retry-After` and the `TF400733` message.
    Blocked,
}

/// Which credential a request carried, as the request log keeps it: never the token itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// No `Authorization` header.
    None,
    /// HTTP Basic whose password is a known PAT, named by its owner's display name.
    Pat(String),
    /// A Bearer token the token endpoint issued, named by its identity's display name.
    Bearer(String),
    /// An `Authorization` header the fake does not know: `"basic"`, `"bearer"` or `"other"`.
    Unknown(&'static str),
}

/// One request as the fake saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedRequest {
    /// `GET`, `POST`, ….
    pub method: String,
    /// Path and query as sent, e.g. `/org/_apis/distributedtask/pools?poolName=x`.
    pub path: String,
    /// The endpoint (see [`Counts`]).
    pub endpoint: String,
    /// The credential, redacted.
    pub credential: Credential,
    /// Whether it carried `X-TFS-FedAuthRedirect: Suppress`.
    pub suppress_redirect: bool,
    /// The `api-version` it asked for (query or `Accept`), if any.
    pub api_version: Option<String>,
    /// The status answered; `None` for [`Fault::Reset`] and [`Fault::Stall`].
    pub status: Option<u16>,
}

/// Requests received so far, counted before authentication and faults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// By endpoint: `connectionData`, `pools.list`, `pools.get`, `agents.list`, `agents.get`,
    /// `agents.add`, `agents.update`, `agents.replace`, `agents.delete`, `jobrequests.list`,
    /// `jobrequests.get`, `token`, `signin`, `other`.
    pub by_endpoint: BTreeMap<String, usize>,
    /// Answers by status.
    pub by_status: BTreeMap<u16, usize>,
}

impl Counts {
    /// Requests to `endpoint`.
    pub fn endpoint(&self, endpoint: &str) -> usize {
        self.by_endpoint.get(endpoint).copied().unwrap_or(0)
    }

    /// Answers with `status`.
    pub fn status(&self, status: u16) -> usize {
        self.by_status.get(&status).copied().unwrap_or(0)
    }

    /// Every request.
    pub fn total(&self) -> usize {
        self.by_endpoint.values().sum()
    }
}

/// A job request as the fake stores it (timestamps formatted as the JSON shows them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRequestView {
    /// `requestId`.
    pub request_id: i64,
    /// `poolId`.
    pub pool_id: i32,
    /// `queueTime`.
    pub queue_time: String,
    /// `assignTime`, once assigned.
    pub assign_time: Option<String>,
    /// `receiveTime`, once an agent received it.
    pub receive_time: Option<String>,
    /// `lockedUntil`, once received.
    pub locked_until: Option<String>,
    /// `finishTime`, once finished.
    pub finish_time: Option<String>,
    /// `result`, once finished.
    pub result: Option<JobResult>,
    /// The reserved agent's id.
    pub agent_id: Option<i32>,
    /// `demands`.
    pub demands: Vec<String>,
}

/// An agent as the fake stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentView {
    /// `id`.
    pub id: i32,
    /// The pool.
    pub pool_id: i32,
    /// `name`.
    pub name: String,
    /// `online` or `offline`.
    pub status: String,
    /// `enabled`.
    pub enabled: bool,
    /// `statusChangedOn`.
    pub status_changed_on: String,
    /// The request it holds now.
    pub assigned_request: Option<i64>,
    /// The last request it finished.
    pub last_completed_request: Option<i64>,
}

// === state ===

/// Time in 100 ns ticks since the Unix epoch (the service's 7 fractional digits).
type Ticks = u64;

const TICKS_PER_SECOND: u64 = 10_000_000;
const RATE_WINDOW: Ticks = 300 * TICKS_PER_SECOND;

struct Clock {
    now: Ticks,
    stamps: u64,
}

impl Clock {
    /// The next timestamp: the clock moves on by a little more than a tenth of a second and is
    /// rounded up to 0..=7 fractional digits, cycling, so the JSON shows every precision the
    /// service uses (`…:17Z`, `….1Z`, `….4633333Z`).
    fn stamp(&mut self) -> Ticks {
        let digits = (self.stamps % 8) as u32;
        self.stamps += 1;
        let unit = 10u64.pow(7 - digits);
        self.now = (self.now + 1_234_567).div_ceil(unit) * unit;
        self.now
    }
}

#[derive(Clone)]
struct OrgRecord {
    name: String,
    instance_id: String,
    deployment_id: String,
    /// Entra tenant GUID for an Entra-backed organization.
    tenant: Option<String>,
    unauthenticated: Unauthenticated,
    ceiling: (u32, u32),
}

#[derive(Clone)]
struct IdentityRecord {
    id: String,
    name: String,
    /// Organizations the identity is a member of (Entra service principals; PAT owners always are).
    member_of: BTreeSet<String>,
}

struct PatRecord {
    org: String,
    identity: String,
    scopes: Vec<Scope>,
    expired: bool,
    revoked: bool,
}

struct AppRecord {
    tenant: String,
    secret: String,
    identity: String,
}

struct EntraToken {
    identity: String,
    tenant: String,
    expires_at: Ticks,
}

struct PoolRecord {
    id: i32,
    org: String,
    name: String,
    scope: String,
    created_on: Ticks,
    access: BTreeMap<String, PoolAccess>,
}

#[derive(Clone)]
struct AgentRecord {
    id: i32,
    pool: i32,
    name: String,
    version: String,
    os_description: String,
    enabled: bool,
    online: bool,
    /// Killed: its held request is abandoned when the lock lapses instead of being renewed.
    dead: bool,
    provisioning_state: String,
    max_parallelism: i64,
    created_on: Ticks,
    status_changed_on: Ticks,
    system_capabilities: BTreeMap<String, String>,
    user_capabilities: BTreeMap<String, String>,
    client_id: Option<String>,
    public_key: Option<Value>,
    assigned_request: Option<i64>,
    last_completed_request: Option<i64>,
}

struct RequestRecord {
    id: i64,
    pool: i32,
    queue_time: Ticks,
    assign_time: Option<Ticks>,
    receive_time: Option<Ticks>,
    locked_until: Option<Ticks>,
    finish_time: Option<Ticks>,
    result: Option<JobResult>,
    agent: Option<i32>,
    /// The reserved agent as it was when last seen, for when the agent is deleted.
    agent_snapshot: Option<Value>,
    demands: Vec<String>,
    plan_id: String,
    job_id: String,
    host_id: String,
    scope_id: String,
    service_owner: String,
    definition: (i64, String),
    owner: (i64, String),
}

struct Ledger {
    spent: VecDeque<(Ticks, u32)>,
    mode: RateMode,
}

struct FaultRule {
    endpoint: Option<String>,
    fault: Fault,
    remaining: usize,
}

struct Switches {
    pool_name_wildcards: bool,
    matched_agents_include_disabled: bool,
    top_includes_matched_agents: bool,
    delete_unknown_agent_status: u16,
    minimum_agent_version: String,
    lock_duration: Ticks,
    rate_limit: u32,
    costs: BTreeMap<String, u32>,
}

struct StateData {
    clock: Clock,
    orgs: BTreeMap<String, OrgRecord>,
    identities: BTreeMap<String, IdentityRecord>,
    pats: BTreeMap<String, PatRecord>,
    apps: BTreeMap<String, AppRecord>,
    entra_tokens: BTreeMap<String, EntraToken>,
    pools: BTreeMap<i32, PoolRecord>,
    agents: BTreeMap<i32, AgentRecord>,
    requests: BTreeMap<i64, RequestRecord>,
    next_pool_id: i32,
    next_agent_id: i32,
    next_request_id: i64,
    next_numeric: i64,
    ledgers: BTreeMap<String, Ledger>,
    faults: Vec<FaultRule>,
    switches: Switches,
    counts: Counts,
    log: Vec<LoggedRequest>,
}

struct Shared {
    state: Mutex<StateData>,
    /// Bumped after every request is logged: what [`FakeAzureDevOps::until_counted`] awaits.
    answered: tokio::sync::watch::Sender<u64>,
    base_url: String,
    uuid_counter: AtomicU64,
    uuid_seed: u64,
}

/// The fake Azure DevOps. Stopped on drop.
pub struct FakeAzureDevOps {
    port: u16,
    tls: TlsFiles,
    shared: Arc<Shared>,
    _server: ServerThread,
}

impl FakeAzureDevOps {
    /// Starts the fake on `127.0.0.1:0` with one organization, [`DEFAULT_ORG`] (backed by
    /// Microsoft accounts, unauthenticated requests without `Suppress` redirected), and nothing
    /// else: add PATs and pools with [`add_pat`](Self::add_pat) and
    /// [`create_pool`](Self::create_pool). The port is bound before this returns.
    pub fn start() -> FakeAzureDevOps {
        let tls = generate_certificate(Tls::SignedByCa);
        let acceptor = tls_acceptor(tls.dir.path());
        let listener = std::net::TcpListener::bind(loopback(0)).expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let port = listener.local_addr().expect("local address").port();
        let started = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let seed = started ^ (u64::from(port) << 40) ^ u64::from(std::process::id()) << 20;
        let shared = Arc::new(Shared {
            state: Mutex::new(StateData {
                clock: Clock { now: started * TICKS_PER_SECOND, stamps: 0 },
                orgs: BTreeMap::new(),
                identities: BTreeMap::new(),
                pats: BTreeMap::new(),
                apps: BTreeMap::new(),
                entra_tokens: BTreeMap::new(),
                pools: BTreeMap::new(),
                agents: BTreeMap::new(),
                requests: BTreeMap::new(),
                next_pool_id: 10,
                next_agent_id: 9700,
                next_request_id: 890_600,
                next_numeric: 4800,
                ledgers: BTreeMap::new(),
                faults: Vec::new(),
                switches: Switches {
                    pool_name_wildcards: false,
                    matched_agents_include_disabled: true,
                    top_includes_matched_agents: false,
                    delete_unknown_agent_status: 404,
                    minimum_agent_version: "2.0.0".to_owned(),
                    lock_duration: 600 * TICKS_PER_SECOND,
                    rate_limit: 200,
                    costs: BTreeMap::new(),
                },
                counts: Counts::default(),
                log: Vec::new(),
            }),
            base_url: format!("https://127.0.0.1:{port}"),
            uuid_counter: AtomicU64::new(0),
            uuid_seed: seed,
            answered: tokio::sync::watch::Sender::new(0),
        });
        let fake_shared = Arc::clone(&shared);
        let app = Router::new().fallback(handle).with_state(shared);
        let server = ServerThread::spawn(format!("fake-azure-devops-{port}"), move |stopped| {
            serve(listener, acceptor, app, stopped)
        });
        let fake = FakeAzureDevOps { port, tls, shared: fake_shared, _server: server };
        fake.create_org(DEFAULT_ORG);
        fake
    }

    /// `https://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// The URL of [`DEFAULT_ORG`], `https://127.0.0.1:PORT/cdtarget-test` (no trailing `/`: KEDA
    /// takes the organization's name after the last `/`).
    pub fn org_url(&self) -> String {
        self.org_url_of(DEFAULT_ORG)
    }

    /// The URL of organization `org`.
    pub fn org_url_of(&self, org: &str) -> String {
        format!("{}/{org}", self.shared.base_url)
    }

    /// The port (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The CA that signed the server's certificate, as a PEM file (for `SSL_CERT_FILE`).
    pub fn ca_pem_path(&self) -> PathBuf {
        self.tls.dir.path().join("ca.crt")
    }

    /// The CA certificate in PEM.
    pub fn ca_pem(&self) -> &str {
        &self.tls.ca_pem
    }

    fn state(&self) -> MutexGuard<'_, StateData> {
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.settle();
        state
    }

    // === tenants and credentials ===

    /// Creates an organization backed by Microsoft accounts (no Entra tenant) and returns its URL.
    pub fn create_org(&self, name: &str) -> String {
        self.insert_org(name, None)
    }

    /// Creates an organization connected to the Entra tenant `tenant` (a GUID) and returns its URL:
    /// its 401s carry a `Bearer authorization_uri=…` challenge and it accepts Bearer tokens of
    /// that tenant.
    pub fn create_entra_org(&self, name: &str, tenant: &str) -> String {
        self.insert_org(name, Some(tenant.to_owned()))
    }

    fn insert_org(&self, name: &str, tenant: Option<String>) -> String {
        let instance_id = self.shared.uuid();
        let deployment_id = self.shared.uuid();
        let ceiling = parse_version(DEFAULT_API_CEILING).map(|v| (v.major, v.minor)).expect("ceiling");
        let org = OrgRecord {
            name: name.to_owned(),
            instance_id,
            deployment_id,
            tenant,
            unauthenticated: Unauthenticated::default(),
            ceiling,
        };
        self.state().orgs.insert(name.to_ascii_lowercase(), org);
        self.org_url_of(name)
    }

    /// How `org` answers unauthenticated requests that lack `X-TFS-FedAuthRedirect: Suppress`.
    pub fn set_unauthenticated_style(&self, org: &str, style: Unauthenticated) {
        self.state().org_mut(org).unauthenticated = style;
    }

    /// The highest `api-version` `org` serves, e.g. `"7.1"`.
    pub fn set_api_ceiling(&self, org: &str, ceiling: &str) {
        let version = parse_version(ceiling).expect("a version like 7.1");
        self.state().org_mut(org).ceiling = (version.major, version.minor);
    }

    /// Adds the personal access token `token` of organization `org`, owned by a new user
    /// identity called `owner`, with `scopes`; returns the owner's identity id.
    pub fn add_pat(&self, org: &str, owner: &str, token: &str, scopes: &[Scope]) -> String {
        let identity = self.shared.uuid();
        let mut state = self.state();
        state.org_mut(org);
        let record = IdentityRecord {
            id: identity.clone(),
            name: owner.to_owned(),
            member_of: BTreeSet::from([org.to_ascii_lowercase()]),
        };
        state.identities.insert(identity.clone(), record);
        let pat = PatRecord {
            org: org.to_ascii_lowercase(),
            identity: identity.clone(),
            scopes: scopes.to_vec(),
            expired: false,
            revoked: false,
        };
        state.pats.insert(token.to_owned(), pat);
        identity
    }

    /// The PAT is past its `validTo` from now on: 401 "has expired" (contract §8.2 rule 3).
    pub fn expire_pat(&self, token: &str) {
        self.state().pat_mut(token).expired = true;
    }

    /// The PAT is revoked from now on: 401 like an unknown credential (rule 4).
    pub fn revoke_pat(&self, token: &str) {
        self.state().pat_mut(token).revoked = true;
    }

    /// Replaces the PAT's scopes.
    pub fn set_pat_scopes(&self, token: &str, scopes: &[Scope]) {
        self.state().pat_mut(token).scopes = scopes.to_vec();
    }

    /// The identity id of the PAT's owner.
    pub fn identity_of(&self, token: &str) -> String {
        self.state().pat_mut(token).identity.clone()
    }

    /// Registers an Entra application (service principal) `client_id` with `secret` in `tenant`,
    /// member of organization `org`; the token endpoint (`POST /{tenant}/oauth2/v2.0/token`)
    /// issues it tokens. Returns its identity id.
    pub fn add_service_principal(&self, tenant: &str, org: &str, name: &str, client_id: &str, secret: &str) -> String {
        let identity = self.shared.uuid();
        let mut state = self.state();
        let record = IdentityRecord {
            id: identity.clone(),
            name: name.to_owned(),
            member_of: BTreeSet::from([org.to_ascii_lowercase()]),
        };
        state.identities.insert(identity.clone(), record);
        let app = AppRecord { tenant: tenant.to_owned(), secret: secret.to_owned(), identity: identity.clone() };
        state.apps.insert(client_id.to_owned(), app);
        identity
    }

    /// Takes `identity` out of organization `org` (its tokens then get `TF401444`).
    pub fn remove_from_org(&self, identity: &str, org: &str) {
        let mut state = self.state();
        let record = state.identities.get_mut(identity).expect("identity exists");
        record.member_of.remove(&org.to_ascii_lowercase());
    }

    // === pools and agents ===

    /// Creates pool `name` in `org` and returns its id (ids increase, never reused).
    pub fn create_pool(&self, org: &str, name: &str) -> i32 {
        let scope = self.shared.uuid();
        let mut state = self.state();
        state.org_mut(org);
        let id = state.next_pool_id;
        state.next_pool_id += 1;
        let created_on = state.clock.stamp();
        let pool = PoolRecord {
            id,
            org: org.to_ascii_lowercase(),
            name: name.to_owned(),
            scope,
            created_on,
            access: BTreeMap::new(),
        };
        state.pools.insert(id, pool);
        id
    }

    /// Renames a pool (its id stays).
    pub fn rename_pool(&self, pool: i32, name: &str) {
        self.state().pool_mut(pool).name = name.to_owned();
    }

    /// Deletes a pool with its agents and job requests.
    pub fn delete_pool(&self, pool: i32) {
        let mut state = self.state();
        state.pools.remove(&pool);
        state.agents.retain(|_, agent| agent.pool != pool);
        state.requests.retain(|_, request| request.pool != pool);
    }

    /// What the owner of PAT `token` may do on `pool`.
    pub fn set_pool_access(&self, pool: i32, token: &str, access: PoolAccess) {
        let mut state = self.state();
        let identity = state.pat_mut(token).identity.clone();
        state.pool_mut(pool).access.insert(identity, access);
    }

    /// What `config.sh` does: an agent record `name` in `pool`, `offline`, with these system
    /// capabilities (plus `Agent.Name` and `Agent.Version`), version `4.255.0`, and an RSA public
    /// key with an OAuth client id when `with_key`. Returns its id.
    pub fn register_agent(&self, pool: i32, name: &str, capabilities: &[(&str, &str)], with_key: bool) -> i32 {
        let client_id = with_key.then(|| self.shared.uuid());
        let mut state = self.state();
        state.pool_mut(pool);
        let mut system: BTreeMap<String, String> =
            capabilities.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        system.entry("Agent.Name".to_owned()).or_insert_with(|| name.to_owned());
        system.entry("Agent.Version".to_owned()).or_insert_with(|| "4.255.0".to_owned());
        let version = system["Agent.Version"].clone();
        let public_key = with_key.then(|| json!({"exponent": "AQAB", "modulus": synthetic_modulus(name)}));
        let now = state.clock.stamp();
        let id = state.take_agent_id();
        state.agents.insert(
            id,
            AgentRecord {
                id,
                pool,
                name: name.to_owned(),
                version,
                os_description: "Linux 6.6.0 #1 SMP".to_owned(),
                enabled: true,
                online: false,
                dead: false,
                provisioning_state: "Provisioned".to_owned(),
                max_parallelism: 1,
                created_on: now,
                status_changed_on: now,
                system_capabilities: system,
                user_capabilities: BTreeMap::new(),
                client_id,
                public_key,
                assigned_request: None,
                last_completed_request: None,
            },
        );
        id
    }

    /// The agent's listener connected: `online`, `statusChangedOn` now.
    pub fn agent_online(&self, agent: i32) {
        let mut state = self.state();
        let now = state.clock.stamp();
        let record = state.agent_mut(agent);
        record.online = true;
        record.dead = false;
        record.status_changed_on = now;
    }

    /// The agent's listener went away cleanly: `offline`, `statusChangedOn` now.
    pub fn agent_offline(&self, agent: i32) {
        let mut state = self.state();
        let now = state.clock.stamp();
        let record = state.agent_mut(agent);
        record.online = false;
        record.status_changed_on = now;
    }

    /// The agent's pod died: `offline` now; a request it holds stays assigned until its
    /// `lockedUntil` (now + the lock duration when it had none), then finishes `abandoned`.
    pub fn kill_agent(&self, agent: i32) {
        let mut state = self.state();
        let now = state.clock.stamp();
        let lock = state.switches.lock_duration;
        let record = state.agent_mut(agent);
        record.online = false;
        record.dead = true;
        record.status_changed_on = now;
        if let Some(request) = record.assigned_request
            && let Some(request) = state.requests.get_mut(&request)
            && request.locked_until.is_none()
        {
            request.locked_until = Some(now + lock);
        }
    }

    /// Enables or disables an agent (what the PATCH of §4.7 does).
    pub fn set_agent_enabled(&self, agent: i32, enabled: bool) {
        self.state().agent_mut(agent).enabled = enabled;
    }

    // === job requests ===

    /// Queues a job request in `pool` with these `demands` (strings such as
    /// `"Agent.Version -gtVersion 2.182.1"`) and returns its `requestId`.
    pub fn queue_request(&self, pool: i32, demands: &[&str]) -> i64 {
        let uuids: Vec<String> = (0..5).map(|_| self.shared.uuid()).collect();
        let mut state = self.state();
        let scope_id = state.pool_mut(pool).scope.clone();
        let id = state.next_request_id;
        state.next_request_id += 1;
        let definition = state.take_numeric();
        let owner = state.take_numeric();
        let queue_time = state.clock.stamp();
        state.requests.insert(
            id,
            RequestRecord {
                id,
                pool,
                queue_time,
                assign_time: None,
                receive_time: None,
                locked_until: None,
                finish_time: None,
                result: None,
                agent: None,
                agent_snapshot: None,
                demands: demands.iter().map(|d| (*d).to_owned()).collect(),
                plan_id: uuids[0].clone(),
                job_id: uuids[1].clone(),
                host_id: uuids[2].clone(),
                scope_id,
                service_owner: uuids[3].clone(),
                definition: (definition, format!("pipeline-{definition}")),
                owner: (owner, format!("run-{owner}")),
            },
        );
        id
    }

    /// The next [`queue_request`](Self::queue_request) gets this id (e.g. above 2³¹).
    pub fn set_next_request_id(&self, next: i64) {
        self.state().next_request_id = next;
    }

    /// The service assigned `request` to `agent`: `assignTime`, `reservedAgent`, and the agent's
    /// `assignedRequest`.
    pub fn assign(&self, request: i64, agent: i32) {
        let mut state = self.state();
        let now = state.clock.stamp();
        state.assign(request, agent, now, &self.shared.base_url);
    }

    /// `agent` received `request` (assigning it first when not yet assigned): `receiveTime`, and
    /// `lockedUntil` one lock duration (10 minutes) ahead.
    pub fn receive(&self, request: i64, agent: i32) {
        let mut state = self.state();
        let now = state.clock.stamp();
        if state.requests.get(&request).expect("request exists").agent != Some(agent) {
            state.assign(request, agent, now, &self.shared.base_url);
        }
        let lock = state.switches.lock_duration;
        let record = state.requests.get_mut(&request).expect("request exists");
        record.receive_time = Some(now);
        record.locked_until = Some(now + lock);
    }

    /// `request` finished with `result`: `finishTime`, `result`; its agent no longer holds it and
    /// shows it as `lastCompletedRequest`.
    pub fn finish(&self, request: i64, result: JobResult) {
        let mut state = self.state();
        let now = state.clock.stamp();
        state.finish(request, result, now);
    }

    /// Moves the fake clock on; lock expiry and the rate window follow.
    pub fn advance_clock(&self, by: Duration) {
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let ticks = by.as_secs() * TICKS_PER_SECOND + u64::from(by.subsec_nanos()) / 100;
        state.clock.now += ticks;
        state.settle();
    }

    /// The fake clock now, formatted as the JSON does.
    pub fn now(&self) -> String {
        format_time(self.state().clock.now)
    }

    // === switches (contract §8.3 and §9) ===

    /// `poolName` also honours `*` wildcards (default: exact, case-insensitive).
    pub fn set_pool_name_wildcards(&self, on: bool) {
        self.state().switches.pool_name_wildcards = on;
    }

    /// Whether disabled agents count in `matchedAgents` (default: yes).
    pub fn set_matched_agents_include_disabled(&self, on: bool) {
        self.state().switches.matched_agents_include_disabled = on;
    }

    /// Whether `$top` answers carry `matchedAgents` (default: no).
    pub fn set_top_includes_matched_agents(&self, on: bool) {
        self.state().switches.top_includes_matched_agents = on;
    }

    /// The status of a DELETE of an unknown agent id: 404 (default) or 204.
    pub fn set_delete_unknown_agent_status(&self, status: u16) {
        assert!(status == 404 || status == 204, "404 or 204");
        self.state().switches.delete_unknown_agent_status = status;
    }

    /// The lowest agent version `POST …/agents` accepts (default `2.0.0`).
    pub fn set_minimum_agent_version(&self, version: &str) {
        self.state().switches.minimum_agent_version = version.to_owned();
    }

    /// How far ahead `lockedUntil` is set when a request is received (default 10 minutes).
    pub fn set_lock_duration(&self, lock: Duration) {
        self.state().switches.lock_duration = lock.as_secs() * TICKS_PER_SECOND;
    }

    // === rate limits and faults ===

    /// TSTUs per identity in a sliding 5-minute window before delays (default 200).
    pub fn set_rate_limit(&self, limit: u32) {
        self.state().switches.rate_limit = limit;
    }

    /// What one request to `endpoint` costs (defaults: 1 for GET, 2 for writes).
    pub fn set_endpoint_cost(&self, endpoint: &str, cost: u32) {
        self.state().switches.costs.insert(endpoint.to_owned(), cost);
    }

    /// Rate mode of the owner of PAT `token`.
    pub fn set_rate_mode(&self, token: &str, mode: RateMode) {
        let mut state = self.state();
        let identity = state.pat_mut(token).identity.clone();
        state.ledger(&identity).mode = mode;
    }

    /// Answers the next `times` requests to `endpoint` (any endpoint with `None`) with `fault`,
    /// before authentication.
    pub fn inject(&self, endpoint: Option<&str>, fault: Fault, times: usize) {
        let rule = FaultRule { endpoint: endpoint.map(str::to_owned), fault, remaining: times };
        self.state().faults.push(rule);
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.state().faults.clear();
    }

    // === inspection ===

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.state().log.clone()
    }

    /// The counters so far.
    pub fn counts(&self) -> Counts {
        self.state().counts.clone()
    }

    /// Waits until `endpoint` has been asked at least `at_least` times in all (see [`Counts`]),
    /// woken by each request the fake logs (no timer), at most `within`; then panics with `what`
    /// and `diagnostics()`.
    pub async fn until_counted(
        &self,
        endpoint: &str,
        at_least: usize,
        within: Duration,
        what: &str,
        diagnostics: impl FnOnce() -> String,
    ) {
        let mut answered = self.shared.answered.subscribe();
        let counted = async {
            while self.counts().endpoint(endpoint) < at_least {
                answered.changed().await.expect("the fake is running");
            }
        };
        if tokio::time::timeout(within, counted).await.is_err() {
            panic!("{what}: not within {within:?}{}", diagnostics());
        }
    }

    /// Clears the request log and the counters.
    pub fn reset_log(&self) {
        let mut state = self.state();
        state.log.clear();
        state.counts = Counts::default();
    }

    /// A job request as stored.
    pub fn job_request(&self, request: i64) -> JobRequestView {
        let state = self.state();
        let record = state.requests.get(&request).expect("request exists");
        JobRequestView {
            request_id: record.id,
            pool_id: record.pool,
            queue_time: format_time(record.queue_time),
            assign_time: record.assign_time.map(format_time),
            receive_time: record.receive_time.map(format_time),
            locked_until: record.locked_until.map(format_time),
            finish_time: record.finish_time.map(format_time),
            result: record.result,
            agent_id: record.agent,
            demands: record.demands.clone(),
        }
    }

    /// The agents of `pool`, by id.
    pub fn agents(&self, pool: i32) -> Vec<AgentView> {
        let state = self.state();
        state
            .agents
            .values()
            .filter(|agent| agent.pool == pool)
            .map(|agent| AgentView {
                id: agent.id,
                pool_id: agent.pool,
                name: agent.name.clone(),
                status: status_of(agent).to_owned(),
                enabled: agent.enabled,
                status_changed_on: format_time(agent.status_changed_on),
                assigned_request: agent.assigned_request,
                last_completed_request: agent.last_completed_request,
            })
            .collect()
    }

    /// The whole state as JSON (organizations, identities, PATs by owner with their scopes but
    /// never the token, pools, agents, job requests with every field, the clock), for assertions
    /// and failure messages.
    pub fn state_document(&self) -> Value {
        let state = self.state();
        let base = &self.shared.base_url;
        let orgs: Vec<Value> = state
            .orgs
            .values()
            .map(|org| json!({"name": org.name, "instanceId": org.instance_id, "tenant": org.tenant}))
            .collect();
        let pats: Vec<Value> = state
            .pats
            .values()
            .map(|pat| {
                let scopes: Vec<&str> = pat.scopes.iter().map(|s| s.name()).collect();
                json!({"org": pat.org, "identity": pat.identity, "scopes": scopes, "expired": pat.expired, "revoked": pat.revoked})
            })
            .collect();
        let pools: Vec<Value> = state.pools.values().map(|pool| state.pool_entity(pool, base)).collect();
        let all = Includes { capabilities: true, assigned_request: true, last_completed_request: true };
        let agents: Vec<Value> = state.agents.values().map(|agent| state.agent_entity(agent, base, all)).collect();
        let requests: Vec<Value> =
            state.requests.values().map(|request| state.request_entity(request, base, true)).collect();
        json!({"now": format_time(state.clock.now), "organizations": orgs, "pats": pats, "pools": pools,
               "agents": agents, "jobRequests": requests})
    }
}

impl Shared {
    /// A fresh version-4-shaped UUID, distinct within this fake and across fakes.
    fn uuid(&self) -> String {
        let n = self.uuid_counter.fetch_add(1, Ordering::Relaxed);
        let high = mix(self.uuid_seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let low = mix(high ^ n);
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xfff,
            0x8000 | (low >> 48) & 0x3fff,
            low & 0xffff_ffff_ffff
        )
    }
}

/// splitmix64's finalizer.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn synthetic_modulus(name: &str) -> String {
    let bytes: Vec<u8> = (0..256u64).map(|i| (mix(i ^ name.len() as u64 ^ 0x5eed) & 0xff) as u8).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn serve(listener: std::net::TcpListener, acceptor: TlsAcceptor, app: Router, stopped: oneshot::Receiver<()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fake-azure-devops-worker")
        .enable_all()
        .build()
        .expect("build the fake Azure DevOps runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
        let listener = TlsListener::new(listener, acceptor);
        tokio::select! {
            _ = async { axum::serve(listener, app).await } => {}
            _ = stopped => {}
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
}

// === state helpers ===

/// Which optional fields an agent entity carries (`include*` query switches).
#[derive(Clone, Copy, Default)]
struct Includes {
    capabilities: bool,
    assigned_request: bool,
    last_completed_request: bool,
}

fn status_of(agent: &AgentRecord) -> &'static str {
    if agent.online { "online" } else { "offline" }
}

impl StateData {
    fn org_mut(&mut self, org: &str) -> &mut OrgRecord {
        self.orgs.get_mut(&org.to_ascii_lowercase()).unwrap_or_else(|| panic!("no organization {org}"))
    }

    fn pat_mut(&mut self, token: &str) -> &mut PatRecord {
        self.pats.get_mut(token).expect("a PAT added with add_pat")
    }

    fn pool_mut(&mut self, pool: i32) -> &mut PoolRecord {
        self.pools.get_mut(&pool).unwrap_or_else(|| panic!("no pool {pool}"))
    }

    fn agent_mut(&mut self, agent: i32) -> &mut AgentRecord {
        self.agents.get_mut(&agent).unwrap_or_else(|| panic!("no agent {agent}"))
    }

    fn take_agent_id(&mut self) -> i32 {
        let id = self.next_agent_id;
        self.next_agent_id += 1;
        id
    }

    fn take_numeric(&mut self) -> i64 {
        let n = self.next_numeric;
        self.next_numeric += 1;
        n
    }

    fn ledger(&mut self, identity: &str) -> &mut Ledger {
        self.ledgers
            .entry(identity.to_owned())
            .or_insert_with(|| Ledger { spent: VecDeque::new(), mode: RateMode::Normal })
    }

    fn access_of(&self, pool: &PoolRecord, identity: &str) -> PoolAccess {
        pool.access.get(identity).copied().unwrap_or(PoolAccess::Manage)
    }

    fn assign(&mut self, request: i64, agent: i32, now: Ticks, base: &str) {
        let reference = agent_reference(self.agents.get(&agent).expect("agent exists"), &self.pool_org(agent), base);
        let record = self.requests.get_mut(&request).expect("request exists");
        assert!(record.result.is_none(), "request {request} already finished");
        let previous = record.agent.replace(agent);
        record.assign_time = Some(now);
        record.agent_snapshot = Some(reference);
        if let Some(previous) = previous
            && let Some(old) = self.agents.get_mut(&previous)
            && old.assigned_request == Some(request)
        {
            old.assigned_request = None;
        }
        self.agents.get_mut(&agent).expect("agent exists").assigned_request = Some(request);
    }

    fn pool_org(&self, agent: i32) -> String {
        let pool = self.agents.get(&agent).map(|a| a.pool).unwrap_or_default();
        self.pools.get(&pool).map(|p| p.org.clone()).unwrap_or_default()
    }

    fn finish(&mut self, request: i64, result: JobResult, at: Ticks) {
        let record = self.requests.get_mut(&request).expect("request exists");
        assert!(record.result.is_none(), "request {request} already finished");
        record.finish_time = Some(at);
        record.result = Some(result);
        if let Some(agent) = record.agent
            && let Some(agent) = self.agents.get_mut(&agent)
        {
            if agent.assigned_request == Some(request) {
                agent.assigned_request = None;
            }
            agent.last_completed_request = Some(request);
        }
    }

    /// Lets the clock act: a request whose lock lapsed is renewed while its agent lives, and
    /// finished `abandoned` (at the lock's end) when its agent was killed or deleted.
    fn settle(&mut self) {
        let now = self.clock.now;
        let lock = self.switches.lock_duration;
        let lapsed: Vec<(i64, Ticks, bool)> = self
            .requests
            .values()
            .filter(|r| r.result.is_none())
            .filter_map(|r| {
                let until = r.locked_until?;
                let dead = r.agent.is_none_or(|a| self.agents.get(&a).is_none_or(|agent| agent.dead));
                (until <= now).then_some((r.id, until, dead))
            })
            .collect();
        for (id, until, dead) in lapsed {
            if dead {
                self.finish(id, JobResult::Abandoned, until);
            } else if let Some(record) = self.requests.get_mut(&id) {
                record.locked_until = Some(now + lock);
            }
        }
    }

    /// Whether `agent` satisfies every demand: `name` (the capability exists),
    /// `name -equals value` (case-insensitive) and `name -gtVersion value` (at least that
    /// version). Capability names compare case-insensitively.
    fn satisfies(agent: &AgentRecord, demands: &[String]) -> bool {
        let capability = |name: &str| {
            agent
                .system_capabilities
                .iter()
                .chain(&agent.user_capabilities)
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        demands.iter().all(|demand| {
            if let Some((name, value)) = demand.split_once(" -equals ") {
                capability(name.trim()).is_some_and(|v| v.eq_ignore_ascii_case(value.trim()))
            } else if let Some((name, value)) = demand.split_once(" -gtVersion ") {
                capability(name.trim()).is_some_and(|v| version_at_least(v, value.trim()))
            } else {
                capability(demand.trim()).is_some()
            }
        })
    }

    fn matched_agents(&self, request: &RequestRecord, base: &str) -> Vec<Value> {
        let org = self.pools.get(&request.pool).map(|p| p.org.clone()).unwrap_or_default();
        self.agents
            .values()
            .filter(|a| a.pool == request.pool)
            .filter(|a| a.enabled || self.switches.matched_agents_include_disabled)
            .filter(|a| StateData::satisfies(a, &request.demands))
            .map(|a| agent_reference(a, &org, base))
            .collect()
    }

    fn pool_entity(&self, pool: &PoolRecord, base: &str) -> Value {
        let size = self.agents.values().filter(|a| a.pool == pool.id).count();
        let owner =
            json!({"id": "00000000-0000-0000-0000-000000000000", "displayName": "Project Collection Build Service"});
        json!({
            "createdOn": format_time(pool.created_on),
            "autoProvision": false,
            "autoUpdate": true,
            "autoSize": true,
            "createdBy": owner,
            "owner": owner,
            "id": pool.id,
            "scope": pool.scope,
            "name": pool.name,
            "isHosted": false,
            "isLegacy": false,
            "poolType": "automation",
            "size": size,
            "options": "none",
            "_links": {"self": {"href": format!("{base}/{}/_apis/distributedtask/pools/{}", pool.org, pool.id)}},
        })
    }

    fn agent_entity(&self, agent: &AgentRecord, base: &str, includes: Includes) -> Value {
        let org = self.pools.get(&agent.pool).map(|p| p.org.clone()).unwrap_or_default();
        let Value::Object(mut fields) = agent_reference(agent, &org, base) else { unreachable!() };
        fields.insert("maxParallelism".into(), json!(agent.max_parallelism));
        fields.insert("createdOn".into(), json!(format_time(agent.created_on)));
        fields.insert("statusChangedOn".into(), json!(format_time(agent.status_changed_on)));
        if let Some(client_id) = &agent.client_id {
            let mut authorization = Map::new();
            authorization.insert("clientId".into(), json!(client_id));
            if let Some(key) = &agent.public_key {
                authorization.insert("publicKey".into(), key.clone());
            }
            authorization
                .insert("authorizationUrl".into(), json!(format!("{base}/{org}/_apis/oauth2/token/{client_id}")));
            fields.insert("authorization".into(), Value::Object(authorization));
        }
        if includes.capabilities {
            fields.insert("systemCapabilities".into(), json!(agent.system_capabilities));
            fields.insert("userCapabilities".into(), json!(agent.user_capabilities));
        }
        let request_of = |id: Option<i64>| {
            let request = self.requests.get(&id?)?;
            let Value::Object(mut entity) = self.request_entity(request, base, false) else { return None };
            entity.remove("reservedAgent");
            Some(Value::Object(entity))
        };
        if includes.assigned_request
            && let Some(request) = request_of(agent.assigned_request)
        {
            fields.insert("assignedRequest".into(), request);
        }
        if includes.last_completed_request
            && let Some(request) = request_of(agent.last_completed_request)
        {
            fields.insert("lastCompletedRequest".into(), request);
        }
        Value::Object(fields)
    }

    /// A `TaskAgentJobRequest`: fields without a value are left out.
    fn request_entity(&self, request: &RequestRecord, base: &str, with_matched: bool) -> Value {
        let org = self.pools.get(&request.pool).map(|p| p.org.clone()).unwrap_or_default();
        let mut fields = Map::new();
        fields.insert("requestId".into(), json!(request.id));
        fields.insert("queueTime".into(), json!(format_time(request.queue_time)));
        let times = [
            ("assignTime", request.assign_time),
            ("receiveTime", request.receive_time),
            ("lockedUntil", request.locked_until),
            ("finishTime", request.finish_time),
        ];
        for (name, time) in times {
            if let Some(time) = time {
                fields.insert(name.into(), json!(format_time(time)));
            }
        }
        if let Some(result) = request.result {
            fields.insert("result".into(), json!(result.as_str()));
        }
        fields.insert("serviceOwner".into(), json!(request.service_owner));
        fields.insert("hostId".into(), json!(request.host_id));
        fields.insert("scopeId".into(), json!(request.scope_id));
        fields.insert("planType".into(), json!("Build"));
        fields.insert("planId".into(), json!(request.plan_id));
        fields.insert("jobId".into(), json!(request.job_id));
        fields.insert("demands".into(), json!(request.demands));
        if let Some(agent) = request.agent {
            let reference = match self.agents.get(&agent) {
                Some(live) => agent_reference(live, &org, base),
                None => request.agent_snapshot.clone().unwrap_or(Value::Null),
            };
            fields.insert("reservedAgent".into(), reference);
        }
        let link = |kind: &str, id: i64| {
            json!({"web": {"href": format!("{base}/{org}/_build/{kind}?id={id}")},
                   "self": {"href": format!("{base}/{org}/_apis/build/{kind}s/{id}")}})
        };
        let (definition_id, definition_name) = &request.definition;
        let (owner_id, owner_name) = &request.owner;
        fields.insert(
            "definition".into(),
            json!({"_links": link("definition", *definition_id), "id": definition_id, "name": definition_name}),
        );
        fields.insert("owner".into(), json!({"_links": link("result", *owner_id), "id": owner_id, "name": owner_name}));
        fields.insert("data".into(), json!({"ParallelismTag": "Private", "IsScheduledKey": "False"}));
        fields.insert("poolId".into(), json!(request.pool));
        fields.insert("orchestrationId".into(), json!(format!("{}.job.__default", request.plan_id)));
        fields.insert("priority".into(), json!(0));
        if with_matched {
            fields.insert("matchedAgents".into(), Value::Array(self.matched_agents(request, base)));
        }
        Value::Object(fields)
    }
}

/// A `TaskAgentReference` (what `reservedAgent` and `matchedAgents[]` hold).
fn agent_reference(agent: &AgentRecord, org: &str, base: &str) -> Value {
    let self_href = format!("{base}/{org}/_apis/distributedtask/pools/{}/agents/{}", agent.pool, agent.id);
    let web_href = format!("{base}/{org}/_settings/agentpools?poolId={}&agentId={}", agent.pool, agent.id);
    json!({
        "_links": {"self": {"href": self_href}, "web": {"href": web_href}},
        "id": agent.id,
        "name": agent.name,
        "version": agent.version,
        "osDescription": agent.os_description,
        "enabled": agent.enabled,
        "status": status_of(agent),
        "provisioningState": agent.provisioning_state,
        "accessPoint": "CodexAccessMapping",
    })
}

/// Whether dotted version `have` is at least `want` (missing parts count as 0).
fn version_at_least(have: &str, want: &str) -> bool {
    let parts = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.trim().parse().unwrap_or(0)).collect() };
    let (have, want) = (parts(have), parts(want));
    let length = have.len().max(want.len());
    let at = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
    (0..length).map(|i| (at(&have, i), at(&want, i))).find(|(h, w)| h != w).is_none_or(|(h, w)| h > w)
}

/// `2026-05-02T11:40:17.1Z`: RFC 3339 UTC, fractional digits as stored (trailing zeros dropped).
fn format_time(ticks: Ticks) -> String {
    let secs = ticks / TICKS_PER_SECOND;
    let fraction = ticks % TICKS_PER_SECOND;
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    let mut text =
        format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}", of_day / 3600, of_day / 60 % 60, of_day % 60);
    if fraction != 0 {
        let digits = format!("{fraction:07}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text.push('Z');
    text
}

/// Year, month, day of the `days`-th day after 1970-01-01 (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

// === the handler ===

/// The parsed request.
struct Call {
    method: Method,
    path: String,
    segments: Vec<String>,
    query: Vec<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
}

impl Call {
    /// A query parameter, its name compared case-insensitively (as the service binds them).
    fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        self.query(name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn suppress_redirect(&self) -> bool {
        self.header("x-tfs-fedauthredirect").is_some_and(|v| v.trim().eq_ignore_ascii_case("suppress"))
    }

    /// The `api-version` asked for: the query parameter, else the `Accept` header's parameter.
    fn api_version(&self) -> Option<String> {
        if let Some(version) = self.query("api-version") {
            return Some(version.to_owned());
        }
        let accept = self.header("accept")?;
        accept.split([';', ',']).find_map(|part| {
            let (name, value) = part.split_once('=')?;
            name.trim().eq_ignore_ascii_case("api-version").then(|| value.trim().to_owned())
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Route {
    ConnectionData,
    Pools,
    Pool(i32),
    Agents(i32),
    Agent(i32, i32),
    JobRequests(i32),
    JobRequest(i32, i64),
    Token(String),
    SignIn,
    Unknown,
}

/// The organization (first segment) and the route below it.
fn route_of(segments: &[String]) -> (Option<String>, Route) {
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    let lower: Vec<String> = s.iter().map(|p| p.to_ascii_lowercase()).collect();
    let l: Vec<&str> = lower.iter().map(String::as_str).collect();
    match l.as_slice() {
        ["_signin", ..] => return (None, Route::SignIn),
        [_, "oauth2", "v2.0", "token"] => return (None, Route::Token(s[0].to_owned())),
        _ => {}
    }
    let Some((org, rest)) = s.split_first() else { return (None, Route::Unknown) };
    let org = Some((*org).to_owned());
    let rest_lower = &l[1..];
    let number = |i: usize| rest.get(i).and_then(|p| p.parse::<i64>().ok());
    let pool = number(3).and_then(|n| i32::try_from(n).ok());
    let route = match (rest_lower, pool) {
        (["_apis", "connectiondata"], _) => Route::ConnectionData,
        (["_apis", "distributedtask", "pools"], _) => Route::Pools,
        (["_apis", "distributedtask", "pools", _], Some(pool)) => Route::Pool(pool),
        (["_apis", "distributedtask", "pools", _, "agents"], Some(pool)) => Route::Agents(pool),
        (["_apis", "distributedtask", "pools", _, "agents", _], Some(pool)) => {
            match number(5).and_then(|n| i32::try_from(n).ok()) {
                Some(agent) => Route::Agent(pool, agent),
                None => Route::Unknown,
            }
        }
        (["_apis", "distributedtask", "pools", _, "jobrequests"], Some(pool)) => Route::JobRequests(pool),
        (["_apis", "distributedtask", "pools", _, "jobrequests", _], Some(pool)) => match number(5) {
            Some(request) => Route::JobRequest(pool, request),
            None => Route::Unknown,
        },
        _ => Route::Unknown,
    };
    (org, route)
}

/// The counter and fault name of a request.
fn endpoint_name(method: &Method, route: &Route) -> &'static str {
    match (route, method.as_str()) {
        (Route::ConnectionData, "GET") => "connectionData",
        (Route::Pools, "GET") => "pools.list",
        (Route::Pool(_), "GET") => "pools.get",
        (Route::Agents(_), "GET") => "agents.list",
        (Route::Agents(_), "POST") => "agents.add",
        (Route::Agent(..), "GET") => "agents.get",
        (Route::Agent(..), "PATCH") => "agents.update",
        (Route::Agent(..), "PUT") => "agents.replace",
        (Route::Agent(..), "DELETE") => "agents.delete",
        (Route::JobRequests(_), "GET") => "jobrequests.list",
        (Route::JobRequest(..), "GET") => "jobrequests.get",
        (Route::Token(_), "POST") => "token",
        (Route::SignIn, _) => "signin",
        _ => "other",
    }
}

enum Payload {
    Json(Value),
    Html(String),
    Empty,
}

/// The answer being built.
struct Answer {
    status: u16,
    payload: Payload,
    headers: Vec<(String, String)>,
    /// For JSON from the API: the version echoed in `Content-Type`.
    api_version: Option<String>,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer { status, payload: Payload::Json(body), headers: Vec::new(), api_version: None }
    }

    fn html(status: u16, page: String) -> Answer {
        Answer { status, payload: Payload::Html(page), headers: Vec::new(), api_version: None }
    }

    fn empty(status: u16) -> Answer {
        Answer { status, payload: Payload::Empty, headers: Vec::new(), api_version: None }
    }

    fn list(items: Vec<Value>) -> Answer {
        Answer::json(200, json!({"count": items.len(), "value": items}))
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Answer {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    fn into_response(self, shared: &Shared, call: &Call) -> Response {
        let status = StatusCode::from_u16(self.status).expect("status");
        let mut response = match self.payload {
            Payload::Json(body) => {
                let content_type = match &self.api_version {
                    Some(version) => format!("application/json; charset=utf-8; api-version={version}"),
                    None => "application/json; charset=utf-8".to_owned(),
                };
                (status, [(header::CONTENT_TYPE, content_type)], body.to_string()).into_response()
            }
            Payload::Html(page) => (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response(),
            Payload::Empty => status.into_response(),
        };
        let session = call.header("x-tfs-session").map(str::to_owned).unwrap_or_else(|| shared.uuid());
        let common = [("ActivityId", shared.uuid()), ("X-TFS-Session", session), ("X-VSS-E2EID", shared.uuid())];
        let headers = common.into_iter().map(|(n, v)| (n.to_owned(), v)).chain(self.headers);
        for (name, value) in headers {
            if let (Ok(name), Ok(value)) = (name.parse::<axum::http::HeaderName>(), HeaderValue::from_str(&value)) {
                response.headers_mut().append(name, value);
            }
        }
        response
    }
}

/// What the handler does with a request.
enum Outcome {
    Answer(Answer),
    Reset,
    Stall,
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 4 << 20).await.unwrap_or_default();
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| parts.uri.path().to_owned());
    let segments = parts.uri.path().split('/').filter(|s| !s.is_empty()).map(percent_decode).collect();
    let query = parts.uri.query().map(parse_form).unwrap_or_default();
    let call = Call { method: parts.method, path, segments, query, headers: parts.headers, body };
    let outcome = {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.settle();
        let (org, route) = route_of(&call.segments);
        let endpoint = endpoint_name(&call.method, &route);
        *state.counts.by_endpoint.entry(endpoint.to_owned()).or_default() += 1;
        let credential = describe_credential(&state, &call);
        let outcome = match take_fault(&mut state, endpoint) {
            Some(fault) => fault_outcome(fault, &shared.base_url, &call),
            None => Outcome::Answer(answer(&mut state, &shared, &call, org.as_deref(), &route, endpoint)),
        };
        let status = match &outcome {
            Outcome::Answer(answer) => Some(answer.status),
            Outcome::Reset | Outcome::Stall => None,
        };
        if let Some(status) = status {
            *state.counts.by_status.entry(status).or_default() += 1;
        }
        state.log.push(LoggedRequest {
            method: call.method.to_string(),
            path: call.path.clone(),
            endpoint: endpoint.to_owned(),
            credential,
            suppress_redirect: call.suppress_redirect(),
            api_version: call.api_version(),
            status,
        });
        shared.answered.send_modify(|n| *n += 1);
        outcome
    };
    match outcome {
        Outcome::Answer(answer) => answer.into_response(&shared, &call),
        Outcome::Stall => std::future::pending::<Response>().await,
        Outcome::Reset => {
            let mut response = Response::new(Body::new(AbortedBody));
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
    }
}

/// A response body that fails at once: hyper aborts the connection instead of finishing the
/// response.
struct AbortedBody;

impl http_body::Body for AbortedBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected: connection reset"))))
    }
}

fn take_fault(state: &mut StateData, endpoint: &str) -> Option<Fault> {
    let rule = state
        .faults
        .iter_mut()
        .find(|rule| rule.remaining > 0 && rule.endpoint.as_deref().is_none_or(|e| e == endpoint))?;
    rule.remaining -= 1;
    let fault = rule.fault;
    state.faults.retain(|rule| rule.remaining > 0);
    Some(fault)
}

fn fault_outcome(fault: Fault, base: &str, call: &Call) -> Outcome {
    match fault {
        Fault::Reset => Outcome::Reset,
        Fault::Stall => Outcome::Stall,
        Fault::SignInRedirect => Outcome::Answer(sign_in_redirect(base, call)),
        Fault::SignInPage => Outcome::Answer(sign_in_page(203)),
        Fault::Status(500) => {
            Outcome::Answer(error(500, "VssServiceException", "Injected fault: internal server error."))
        }
        Fault::Status(status) => {
            let page = format!("<html><head><title>{status}</title></head><body><h1>{status}</h1></body></html>");
            Outcome::Answer(Answer::html(status, page))
        }
    }
}

/// The credential of a request as the log names it.
fn describe_credential(state: &StateData, call: &Call) -> Credential {
    let Some(value) = call.header("authorization") else { return Credential::None };
    if let Some(password) = basic_password(value) {
        return match state.pats.get(&password).and_then(|pat| state.identities.get(&pat.identity)) {
            Some(identity) => Credential::Pat(identity.name.clone()),
            None => Credential::Unknown("basic"),
        };
    }
    if let Some(token) = bearer_token(value) {
        return match state.entra_tokens.get(token).and_then(|t| state.identities.get(&t.identity)) {
            Some(identity) => Credential::Bearer(identity.name.clone()),
            None => Credential::Unknown("bearer"),
        };
    }
    Credential::Unknown("other")
}

/// The password of an HTTP Basic header; the user part is ignored (contract §8.2 rule 7).
fn basic_password(value: &str) -> Option<String> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    Some(decoded.split_once(':').map_or(decoded.as_str(), |(_, password)| password).to_owned())
}

fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Who is calling, once authenticated.
struct Caller {
    identity: String,
    scopes: Vec<Scope>,
}

fn answer(
    state: &mut StateData,
    shared: &Shared,
    call: &Call,
    org: Option<&str>,
    route: &Route,
    endpoint: &str,
) -> Answer {
    let base = shared.base_url.as_str();
    match route {
        Route::SignIn => return sign_in_page(200),
        Route::Token(tenant) if call.method == Method::POST => return token_endpoint(state, shared, call, tenant),
        _ => {}
    }
    let Some(org) = org.and_then(|name| state.orgs.get(&name.to_ascii_lowercase())).cloned() else {
        return Answer::html(404, "<html><body>No such organization (fake Azure DevOps).</body></html>".to_owned());
    };
    let org_key = org.name.to_ascii_lowercase();
    let caller = match authenticate(state, base, call, &org) {
        Ok(caller) => caller,
        Err(answer) => return answer,
    };
    let needs_manage = call.method != Method::GET && call.method != Method::HEAD;
    let allowed = match route {
        Route::ConnectionData => !caller.scopes.is_empty(),
        _ if needs_manage => caller.scopes.iter().any(|s| matches!(s, Scope::AgentPoolsManage | Scope::Full)),
        _ => !caller.scopes.is_empty(),
    };
    let rate_headers = match charge(state, &caller.identity, endpoint, &call.method) {
        Ok(headers) => headers,
        Err(answer) => return answer,
    };
    if !allowed {
        let message = format!("TF400813: The user '{}' is not authorized to access this resource.", caller.identity);
        return unauthorized(base, &org, &message);
    }
    if endpoint == "other" {
        let known_path = *route != Route::Unknown;
        return match known_path {
            true => Answer::empty(405),
            false => error(404, "VssResourceNotFoundException", "The requested REST API resource was not found."),
        };
    }
    let rule = match route {
        Route::ConnectionData => VersionRule::PreviewOnly,
        Route::JobRequests(_) | Route::JobRequest(..) => VersionRule::Internal,
        _ => VersionRule::ReleasedUpTo(7, 1),
    };
    let served = match check_version(call, org.ceiling, rule) {
        Ok(served) => served,
        Err(answer) => return answer,
    };
    let mut answer = match route {
        Route::ConnectionData => connection_data(state, &org_key, &caller),
        Route::Pools => list_pools(state, base, call, &org_key, &caller),
        Route::Pool(pool) => match visible_pool(state, &org_key, *pool, &caller) {
            Some(pool) => Answer::json(200, state.pool_entity(pool, base)),
            None => pool_not_found(*pool),
        },
        Route::Agents(pool) if call.method == Method::GET => list_agents(state, base, call, &org_key, *pool, &caller),
        Route::Agents(pool) => add_agent(state, shared, call, &org_key, *pool, &caller),
        Route::Agent(pool, agent) => agent_call(state, base, call, &org_key, *pool, *agent, &caller),
        Route::JobRequests(pool) => list_job_requests(state, base, call, &org_key, *pool, &caller),
        Route::JobRequest(pool, request) => match visible_pool(state, &org_key, *pool, &caller) {
            None => pool_not_found(*pool),
            Some(_) => match state.requests.get(request).filter(|r| r.pool == *pool) {
                Some(record) => Answer::json(200, state.request_entity(record, base, true)),
                None => error(
                    404,
                    "TaskAgentJobNotFoundException",
                    &format!("No job request with identifier {request} was found in pool {pool}."),
                ),
            },
        },
        Route::Token(_) | Route::SignIn | Route::Unknown => unreachable!("answered above"),
    };
    if answer.is_success() {
        answer.headers.extend(rate_headers);
    }
    if matches!(answer.payload, Payload::Json(_)) {
        answer.api_version = Some(served);
    }
    answer
}

// === authentication (contract §3, §8.2) ===

fn authenticate(state: &mut StateData, base: &str, call: &Call, org: &OrgRecord) -> Result<Caller, Answer> {
    let org_key = org.name.to_ascii_lowercase();
    let value = call.header("authorization").unwrap_or("");
    if let Some(password) = basic_password(value) {
        let Some(pat) = state.pats.get(&password).filter(|pat| pat.org == org_key) else {
            return Err(unauthenticated(base, org, call));
        };
        if pat.revoked {
            return Err(unauthorized(base, org, ANONYMOUS));
        }
        if pat.expired {
            let message = "Access Denied: The Personal Access Token used has expired.";
            let mut answer = error(401, "AccessCheckException", message);
            if let Payload::Json(body) = &mut answer.payload {
                body["customProperties"] = json!({});
            }
            return Err(with_challenge(answer, base, org).header("X-TFS-ServiceError", percent_encode(message)));
        }
        return Ok(Caller { identity: pat.identity.clone(), scopes: pat.scopes.clone() });
    }
    if let Some(token) = bearer_token(value) {
        let Some(record) = state.entra_tokens.get(token) else { return Err(unauthenticated(base, org, call)) };
        if org.tenant.as_deref() != Some(record.tenant.as_str()) {
            return Err(unauthenticated(base, org, call));
        }
        let identity = state.identities.get(&record.identity).cloned().expect("token identity");
        if record.expires_at <= state.clock.now {
            let message = format!("TF400813: The user '{}' is not authorized to access this resource.", identity.id);
            return Err(unauthorized(base, org, &message));
        }
        if !identity.member_of.contains(&org_key) {
            let tenant = &record.tenant;
            let message = format!(
                "TF401444: Please sign-in at least once as {tenant}\\{tenant}\\{} in a web browser to enable access to the service.",
                identity.name
            );
            return Err(unauthorized(base, org, &message));
        }
        return Ok(Caller { identity: identity.id, scopes: vec![Scope::Full] });
    }
    Err(unauthenticated(base, org, call))
}

const ANONYMOUS: &str = "TF400813: Resource not available for anonymous access. Client authentication required.";

/// No usable credential (rules 1 and 2): 401 with `Suppress`, else the organization's style.
fn unauthenticated(base: &str, org: &OrgRecord, call: &Call) -> Answer {
    if call.suppress_redirect() {
        return unauthorized(base, org, ANONYMOUS);
    }
    match org.unauthenticated {
        Unauthenticated::Status401 => unauthorized(base, org, ANONYMOUS),
        Unauthenticated::Redirect302 => sign_in_redirect(base, call),
        Unauthenticated::SignIn203 => sign_in_page(203),
    }
}

/// 401 `UnauthorizedRequestException` with `message` and the challenge headers.
fn unauthorized(base: &str, org: &OrgRecord, message: &str) -> Answer {
    with_challenge(error(401, "UnauthorizedRequestException", message), base, org)
}

fn with_challenge(answer: Answer, base: &str, org: &OrgRecord) -> Answer {
    let mut answer = answer
        .header("WWW-Authenticate", format!("Basic realm=\"{base}/\""))
        .header("X-TFS-FedAuthRealm", format!("{base}/"))
        .header("X-TFS-FedAuthIssuer", format!("{base}/"))
        .header("X-VSS-ResourceTenant", org.tenant.clone().unwrap_or_else(|| MSA_TENANT.to_owned()));
    if let Some(tenant) = &org.tenant {
        answer = answer
            .header("WWW-Authenticate", format!("Bearer authorization_uri=https://login.microsoftonline.com/{tenant}"));
    }
    answer
}

/// 302 to the sign-in page ("Object moved").
fn sign_in_redirect(base: &str, call: &Call) -> Answer {
    let reply_to = percent_encode(&format!("{base}{}", call.path));
    let location = format!("{base}/_signin?realm=dev.azure.com&reply_to={reply_to}&redirect=1");
    let page = format!(
        "<html><head><title>Object moved</title></head><body>\r\n<h2>Object moved to <a href=\"{location}\">here</a>.</h2>\r\n</body></html>\r\n"
    );
    Answer::html(302, page).header("Location", location).header("X-TFS-FedAuthRealm", format!("{base}/"))
}

fn sign_in_page(status: u16) -> Answer {
    let page = "<!DOCTYPE html><html><head><title>Azure DevOps Services | Sign In</title></head>\
                <body><p>Sign in to continue to Azure DevOps (fake).</p></body></html>";
    Answer::html(status, page.to_owned())
}

/// The service's error body.
fn error(status: u16, type_key: &str, message: &str) -> Answer {
    let (namespace, assembly) = match type_key {
        k if k.starts_with("TaskAgent") || k == "AccessDeniedException" => {
            ("Microsoft.TeamFoundation.DistributedTask.WebApi", "Microsoft.TeamFoundation.DistributedTask.WebApi")
        }
        k if k.starts_with("Vss") => {
            ("Microsoft.VisualStudio.Services.WebApi", "Microsoft.VisualStudio.Services.WebApi")
        }
        "AccessCheckException" => {
            ("Microsoft.VisualStudio.Services.Security", "Microsoft.VisualStudio.Services.WebApi")
        }
        "UnauthorizedRequestException" => {
            ("Microsoft.TeamFoundation.Framework.Server", "Microsoft.TeamFoundation.Framework.Server")
        }
        "ArgumentException" => ("System", "mscorlib"),
        _ => ("Microsoft.VisualStudio.Services.Common", "Microsoft.VisualStudio.Services.Common"),
    };
    Answer::json(
        status,
        json!({
            "$id": "1",
            "innerException": null,
            "message": message,
            "typeName": format!("{namespace}.{type_key}, {assembly}"),
            "typeKey": type_key,
            "errorCode": 0,
            "eventId": 3000,
        }),
    )
}

fn pool_not_found(pool: i32) -> Answer {
    error(404, "TaskAgentPoolNotFoundException", &format!("Agent pool {pool} could not be found."))
}

// === rate limits (contract §5, §8.4) ===

/// Adds the request's cost to the caller's ledger; the rate headers for a 2xx answer, or the 429.
fn charge(
    state: &mut StateData,
    identity: &str,
    endpoint: &str,
    method: &Method,
) -> Result<Vec<(String, String)>, Answer> {
    let now = state.clock.now;
    let limit = state.switches.rate_limit;
    let cost = state.switches.costs.get(endpoint).copied().unwrap_or(if *method == Method::GET { 1 } else { 2 });
    let ledger = state.ledger(identity);
    while ledger.spent.front().is_some_and(|(at, _)| at + RATE_WINDOW <= now) {
        ledger.spent.pop_front();
    }
    let blocked = ledger.mode == RateMode::Blocked;
    if !blocked {
        ledger.spent.push_back((now, cost));
    }
    let used: u32 = ledger.spent.iter().map(|(_, c)| c).sum();
    let delayed = ledger.mode == RateMode::Delayed || used > limit;
    let oldest = ledger.spent.front().map_or(now, |(at, _)| *at);
    let reset = oldest + RATE_WINDOW;
    let retry_after = (reset.saturating_sub(now)).div_ceil(TICKS_PER_SECOND).max(1);
    let remaining = if delayed || blocked { 0 } else { limit.saturating_sub(used) };
    let headers = vec![
        ("X-RateLimit-Resource".to_owned(), "Core".to_owned()),
        ("X-RateLimit-Limit".to_owned(), limit.to_string()),
        ("X-RateLimit-Remaining".to_owned(), remaining.to_string()),
        ("X-RateLimit-Reset".to_owned(), reset.div_ceil(TICKS_PER_SECOND).to_string()),
        ("Retry-After".to_owned(), retry_after.to_string()),
    ];
    if blocked {
        let message = "TF400733: The request has been canceled: Request was blocked due to exceeding usage of resource Core in namespace User.";
        let mut answer = error(429, "RequestBlockedException", message);
        answer.headers.extend(headers);
        return Err(answer);
    }
    if delayed {
        let mut headers = headers;
        headers.push(("X-RateLimit-Delay".to_owned(), "0.500".to_owned()));
        return Ok(headers);
    }
    if u64::from(used) * 5 >= u64::from(limit) * 4 { Ok(headers) } else { Ok(Vec::new()) }
}

// === api-version (contract §2.1, §8.3) ===

#[derive(Clone, Copy)]
enum VersionRule {
    /// Released (no `-preview` needed) up to this version; preview only above it.
    ReleasedUpTo(u32, u32),
    /// Only ever a preview resource.
    PreviewOnly,
    /// Internal: any well-formed version up to the ceiling.
    Internal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ApiVersion {
    major: u32,
    minor: u32,
    preview: bool,
}

/// `major.minor[-stage[.resourceVersion]]`.
fn parse_version(text: &str) -> Option<ApiVersion> {
    let (number, stage) = match text.split_once('-') {
        Some((number, stage)) => (number, Some(stage)),
        None => (text, None),
    };
    let (major, minor) = number.split_once('.')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(major) || !all_digits(minor) {
        return None;
    }
    let preview = match stage {
        None => false,
        Some(stage) => {
            let (name, resource) = match stage.split_once('.') {
                Some((name, resource)) => (name, Some(resource)),
                None => (stage, None),
            };
            if name.is_empty()
                || !name.bytes().all(|b| b.is_ascii_alphabetic())
                || resource.is_some_and(|r| !all_digits(r))
            {
                return None;
            }
            true
        }
    };
    Some(ApiVersion { major: major.parse().ok()?, minor: minor.parse().ok()?, preview })
}

/// The version served (echoed in `Content-Type`), or the 400 the service gives.
fn check_version(call: &Call, ceiling: (u32, u32), rule: VersionRule) -> Result<String, Answer> {
    let ceiling_text = format!("{}.{}", ceiling.0, ceiling.1);
    let Some(asked) = call.api_version() else {
        let preview = match rule {
            VersionRule::ReleasedUpTo(major, minor) => ceiling > (major, minor),
            VersionRule::PreviewOnly => true,
            VersionRule::Internal => false,
        };
        return Ok(if preview { format!("{ceiling_text}-preview.1") } else { ceiling_text });
    };
    let Some(version) = parse_version(&asked) else {
        let message = format!(
            "The api-version '{asked}' is not valid: use major.minor[-stage[.resourceVersion]], for example 7.1 or 7.1-preview.1."
        );
        return Err(error(400, "ArgumentException", &message));
    };
    if (version.major, version.minor) > ceiling {
        let message = format!(
            "The requested REST API version of {}.{} is out of range for this server. The latest REST API version this server supports is {ceiling_text}.",
            version.major, version.minor
        );
        return Err(error(400, "VssVersionOutOfRangeException", &message));
    }
    let needs_preview = match rule {
        VersionRule::ReleasedUpTo(major, minor) => (version.major, version.minor) > (major, minor),
        VersionRule::PreviewOnly => true,
        VersionRule::Internal => false,
    };
    if needs_preview && !version.preview {
        let plain = format!("{}.{}", version.major, version.minor);
        let message = format!(
            "The requested version \"{plain}\" of the resource is under preview. The -preview flag must be supplied in the api-version for such requests. For example: \"{plain}-preview\""
        );
        return Err(error(400, "VssInvalidPreviewVersionException", &message));
    }
    Ok(asked)
}

// === endpoints (contract §4) ===

fn connection_data(state: &StateData, org_key: &str, caller: &Caller) -> Answer {
    let org = &state.orgs[org_key];
    let identity = state.identities.get(&caller.identity).expect("caller identity");
    let user = json!({
        "id": identity.id,
        "descriptor": format!("Microsoft.IdentityModel.Claims.ClaimsIdentity;{}", identity.id),
        "subjectDescriptor": format!("aad.{}", identity.id),
        "providerDisplayName": identity.name,
        "isActive": true,
        "properties": {},
    });
    Answer::json(
        200,
        json!({
            "authenticatedUser": user,
            "authorizedUser": user,
            "instanceId": org.instance_id,
            "deploymentId": org.deployment_id,
            "deploymentType": "hosted",
            "lastUserAccess": format_time(state.clock.now),
        }),
    )
}

/// The pool if it exists in `org` and the caller can view it.
fn visible_pool<'a>(state: &'a StateData, org_key: &str, pool: i32, caller: &Caller) -> Option<&'a PoolRecord> {
    state
        .pools
        .get(&pool)
        .filter(|p| p.org == org_key)
        .filter(|p| state.access_of(p, &caller.identity) >= PoolAccess::View)
}

fn list_pools(state: &StateData, base: &str, call: &Call, org_key: &str, caller: &Caller) -> Answer {
    let name = call.query("poolName");
    let pool_type = call.query("poolType");
    let ids: Option<Vec<i32>> =
        call.query("poolIds").map(|ids| ids.split(',').filter_map(|id| id.trim().parse().ok()).collect());
    let needed = match call.query("actionFilter").map(str::to_ascii_lowercase).as_deref() {
        Some("manage") => PoolAccess::Manage,
        _ => PoolAccess::View,
    };
    let wildcards = state.switches.pool_name_wildcards;
    let pools = state
        .pools
        .values()
        .filter(|p| p.org == org_key && state.access_of(p, &caller.identity) >= needed)
        .filter(|p| match name {
            None => true,
            Some(name) if wildcards && name.contains('*') => glob(&name.to_lowercase(), &p.name.to_lowercase()),
            Some(name) => p.name.eq_ignore_ascii_case(name),
        })
        .filter(|_| pool_type.is_none_or(|t| t.eq_ignore_ascii_case("automation")))
        .filter(|p| ids.as_ref().is_none_or(|ids| ids.contains(&p.id)))
        .map(|p| state.pool_entity(p, base))
        .collect();
    Answer::list(pools)
}

fn includes_of(call: &Call) -> Includes {
    Includes {
        capabilities: call.flag("includeCapabilities"),
        assigned_request: call.flag("includeAssignedRequest"),
        last_completed_request: call.flag("includeLastCompletedRequest"),
    }
}

fn list_agents(state: &StateData, base: &str, call: &Call, org_key: &str, pool: i32, caller: &Caller) -> Answer {
    if visible_pool(state, org_key, pool, caller).is_none() {
        return Answer::list(Vec::new());
    }
    let name = call.query("agentName");
    let demands: Option<Vec<String>> =
        call.query("demands").map(|d| d.split(',').map(|d| d.trim().to_owned()).filter(|d| !d.is_empty()).collect());
    let includes = includes_of(call);
    let agents = state
        .agents
        .values()
        .filter(|a| a.pool == pool)
        .filter(|a| name.is_none_or(|name| a.name.eq_ignore_ascii_case(name)))
        .filter(|a| demands.as_ref().is_none_or(|demands| StateData::satisfies(a, demands)))
        .map(|a| state.agent_entity(a, base, includes))
        .collect();
    Answer::list(agents)
}

fn agent_not_found(pool: i32, agent: i32) -> Answer {
    error(404, "TaskAgentNotFoundException", &format!("Agent {agent} could not be found in pool {pool}."))
}

fn access_denied(state: &StateData, pool: &PoolRecord, caller: &Caller) -> Answer {
    let name = state.identities.get(&caller.identity).map_or("", |i| i.name.as_str());
    let message =
        format!("Access denied. {name} needs Manage permissions for pool {} to perform the action.", pool.name);
    error(403, "AccessDeniedException", &message)
}

fn json_object(call: &Call) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(&call.body) {
        Ok(Value::Object(fields)) => Some(fields),
        _ => None,
    }
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    let Some(Value::Object(fields)) = value else { return BTreeMap::new() };
    fields.iter().map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned))).collect()
}

/// `POST …/pools/{id}/agents` (§4.8).
fn add_agent(state: &mut StateData, shared: &Shared, call: &Call, org_key: &str, pool: i32, caller: &Caller) -> Answer {
    let base = shared.base_url.as_str();
    let Some(pool_record) = visible_pool(state, org_key, pool, caller) else { return pool_not_found(pool) };
    if state.access_of(pool_record, &caller.identity) < PoolAccess::Manage {
        return access_denied(state, pool_record, caller);
    }
    let pool_name = pool_record.name.clone();
    let Some(body) = json_object(call) else {
        return error(400, "ArgumentException", "The request body must be a TaskAgent object.");
    };
    let Some(name) = body.get("name").and_then(Value::as_str).filter(|n| !n.trim().is_empty()) else {
        return error(400, "ArgumentException", "Value cannot be null.\r\nParameter name: agent.Name");
    };
    if state.agents.values().any(|a| a.pool == pool && a.name.eq_ignore_ascii_case(name)) {
        let message = format!("An agent named {name} already exists in pool {pool_name}.");
        return error(409, "TaskAgentExistsException", &message);
    }
    let system = string_map(body.get("systemCapabilities"));
    let version = body
        .get("version")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| system.get("Agent.Version").cloned())
        .unwrap_or_else(|| "1.0.0".to_owned());
    let minimum = state.switches.minimum_agent_version.clone();
    if !version_at_least(&version, &minimum) {
        let message = format!("Version {version} of the agent is not supported; the minimum is {minimum}.");
        return error(400, "TaskAgentVersionNotSupportedException", &message);
    }
    let public_key = body.get("authorization").and_then(|a| a.get("publicKey")).filter(|k| !k.is_null()).cloned();
    let client_id = public_key.as_ref().map(|_| shared.uuid());
    let now = state.clock.stamp();
    let id = state.take_agent_id();
    let record = AgentRecord {
        id,
        pool,
        name: name.to_owned(),
        version,
        os_description: body.get("osDescription").and_then(Value::as_str).unwrap_or_default().to_owned(),
        enabled: body.get("enabled").and_then(Value::as_bool).unwrap_or(true),
        online: false,
        dead: false,
        provisioning_state: body.get("provisioningState").and_then(Value::as_str).unwrap_or("Provisioned").to_owned(),
        max_parallelism: body.get("maxParallelism").and_then(Value::as_i64).unwrap_or(1),
        created_on: now,
        status_changed_on: now,
        system_capabilities: system,
        user_capabilities: string_map(body.get("userCapabilities")),
        client_id,
        public_key,
        assigned_request: None,
        last_completed_request: None,
    };
    let entity = state.agent_entity(&record, base, Includes { capabilities: true, ..Includes::default() });
    state.agents.insert(id, record);
    Answer::json(200, entity)
}

/// GET, PATCH, PUT and DELETE of `…/pools/{id}/agents/{agentId}` (§4.5–§4.7).
fn agent_call(
    state: &mut StateData,
    base: &str,
    call: &Call,
    org_key: &str,
    pool: i32,
    agent: i32,
    caller: &Caller,
) -> Answer {
    let Some(pool_record) = visible_pool(state, org_key, pool, caller) else { return pool_not_found(pool) };
    let pool_name = pool_record.name.clone();
    let manage = state.access_of(pool_record, &caller.identity) >= PoolAccess::Manage;
    let exists = state.agents.get(&agent).is_some_and(|a| a.pool == pool);
    if call.method == Method::GET {
        return match state.agents.get(&agent).filter(|a| a.pool == pool) {
            Some(record) => Answer::json(200, state.agent_entity(record, base, includes_of(call))),
            None => agent_not_found(pool, agent),
        };
    }
    if !manage {
        return access_denied(state, pool_record, caller);
    }
    if !exists {
        if call.method == Method::DELETE && state.switches.delete_unknown_agent_status == 204 {
            return Answer::empty(204);
        }
        return agent_not_found(pool, agent);
    }
    match call.method {
        Method::DELETE => {
            let record = &state.agents[&agent];
            if let Some(request) = record.assigned_request
                && state.requests.get(&request).is_some_and(|r| r.result.is_none())
            {
                let message = format!("Agent \"{}\" is running a job for pool \"{pool_name}\"", record.name);
                return error(400, "TaskAgentJobStillRunningException", &message);
            }
            let snapshot = agent_reference(record, org_key, base);
            for request in state.requests.values_mut().filter(|r| r.agent == Some(agent)) {
                request.agent_snapshot = Some(snapshot.clone());
            }
            state.agents.remove(&agent);
            Answer::empty(204)
        }
        Method::PATCH | Method::PUT => {
            let Some(body) = json_object(call) else {
                return error(400, "ArgumentException", "The request body must be a TaskAgent object.");
            };
            if let Some(name) = body.get("name").and_then(Value::as_str)
                && state.agents.values().any(|a| a.pool == pool && a.id != agent && a.name.eq_ignore_ascii_case(name))
            {
                let message = format!("An agent named {name} already exists in pool {pool_name}.");
                return error(409, "TaskAgentExistsException", &message);
            }
            let record = state.agents.get_mut(&agent).expect("agent exists");
            if let Some(enabled) = body.get("enabled").and_then(Value::as_bool) {
                record.enabled = enabled;
            }
            if let Some(name) = body.get("name").and_then(Value::as_str) {
                record.name = name.to_owned();
            }
            if call.method == Method::PUT {
                record.system_capabilities = string_map(body.get("systemCapabilities"));
                record.user_capabilities = string_map(body.get("userCapabilities"));
                if let Some(version) = body.get("version").and_then(Value::as_str) {
                    record.version = version.to_owned();
                }
                if let Some(os) = body.get("osDescription").and_then(Value::as_str) {
                    record.os_description = os.to_owned();
                }
            }
            let includes = Includes { capabilities: call.method == Method::PUT, ..Includes::default() };
            Answer::json(200, state.agent_entity(&state.agents[&agent], base, includes))
        }
        _ => Answer::empty(405),
    }
}

/// `GET …/pools/{id}/jobrequests` in each of its query forms (§4.9).
fn list_job_requests(state: &StateData, base: &str, call: &Call, org_key: &str, pool: i32, caller: &Caller) -> Answer {
    if visible_pool(state, org_key, pool, caller).is_none() {
        return pool_not_found(pool);
    }
    let top = call.query("$top");
    let completed = call.query("completedRequestCount");
    if top.is_some() && completed.is_some() {
        return error(400, "ArgumentException", "$top and completedRequestCount cannot be combined.");
    }
    let mut requests: Vec<&RequestRecord> = state.requests.values().filter(|r| r.pool == pool).collect();
    if let Some(plan) = call.query("planId") {
        requests.retain(|r| r.plan_id.eq_ignore_ascii_case(plan));
        if let Some(job) = call.query("jobId") {
            requests.retain(|r| r.job_id.eq_ignore_ascii_case(job));
        }
    }
    if let Some(top) = top {
        let Ok(top) = top.trim().parse::<usize>() else {
            return error(400, "ArgumentException", &format!("The value '{top}' is not valid for $top."));
        };
        if let Some(token) = call.query("continuationToken") {
            let Ok(token) = token.parse::<i64>() else {
                return error(400, "InvalidContinuationTokenException", "The continuation token is not valid.");
            };
            requests.retain(|r| r.id < token);
        }
        requests.sort_by_key(|r| std::cmp::Reverse(r.id));
        let take = top.min(TOP_CAP);
        let more = requests.len() > take;
        requests.truncate(take);
        let with_matched = state.switches.top_includes_matched_agents;
        let items: Vec<Value> = requests.iter().map(|r| state.request_entity(r, base, with_matched)).collect();
        let answer = Answer::list(items);
        return match (more, requests.last()) {
            (true, Some(last)) => answer.header("X-MS-ContinuationToken", last.id.to_string()),
            _ => answer,
        };
    }
    let agents: Option<Vec<i32>> = call
        .query("agentIds")
        .or(call.query("agentId"))
        .map(|ids| ids.split(',').filter_map(|id| id.trim().parse().ok()).collect());
    let completed = match completed {
        None if agents.is_some() => Some(50),
        None => None,
        Some(text) => match text.trim().parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => return error(400, "ArgumentException", "completedRequestCount must be a number."),
        },
    };
    if let Some(agents) = &agents {
        requests.retain(|r| r.agent.is_some_and(|a| agents.contains(&a)));
    }
    if let Some(keep) = completed {
        let mut finished: Vec<i64> = requests.iter().filter(|r| r.result.is_some()).map(|r| r.id).collect();
        finished.sort_by_key(|id| std::cmp::Reverse(*id));
        finished.truncate(keep);
        requests.retain(|r| r.result.is_none() || finished.contains(&r.id));
    }
    let items = requests.iter().map(|r| state.request_entity(r, base, true)).collect();
    Answer::list(items)
}

// === the Entra token endpoint (§4.10) ===

fn token_endpoint(state: &mut StateData, shared: &Shared, call: &Call, tenant: &str) -> Answer {
    let form: BTreeMap<String, String> = parse_form(&String::from_utf8_lossy(&call.body)).into_iter().collect();
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or("");
    let oauth_error = |status: u16, code: &str, description: String| {
        Answer::json(status, json!({"error": code, "error_description": description, "error_codes": []}))
    };
    if field("grant_type") != "client_credentials" {
        return oauth_error(
            400,
            "unsupported_grant_type",
            "AADSTS70003: The app requested an unsupported grant type.".into(),
        );
    }
    let client_id = field("client_id");
    let Some(app) = state.apps.get(client_id).filter(|app| app.tenant.eq_ignore_ascii_case(tenant)) else {
        return oauth_error(
            400,
            "unauthorized_client",
            format!(
                "AADSTS700016: Application with identifier '{client_id}' was not found in the directory '{tenant}'."
            ),
        );
    };
    let by_secret = !app.secret.is_empty() && field("client_secret") == app.secret;
    let by_assertion = field("client_assertion_type") == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        && !field("client_assertion").is_empty();
    if !by_secret && !by_assertion {
        return oauth_error(401, "invalid_client", "AADSTS7000215: Invalid client secret provided.".into());
    }
    if field("scope") != format!("{DEVOPS_RESOURCE}/.default") {
        return oauth_error(
            400,
            "invalid_scope",
            format!("AADSTS70011: The provided value for scope {} is not valid.", field("scope")),
        );
    }
    let token = format!("fake-entra-{}", shared.uuid());
    let record = EntraToken {
        identity: app.identity.clone(),
        tenant: app.tenant.clone(),
        expires_at: state.clock.now + 3599 * TICKS_PER_SECOND,
    };
    state.entra_tokens.insert(token.clone(), record);
    Answer::json(
        200,
        json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token}),
    )
}

// === text helpers ===

/// `a=1&b=x+y` into pairs, percent-decoded, `+` as a space.
fn parse_form(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            (percent_decode(&name.replace('+', " ")), percent_decode(&value.replace('+', " ")))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(high << 4 | low);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every byte but the unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `*` matches any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            text.starts_with(head)
                && (head.len()..=text.len()).any(|at| text.is_char_boundary(at) && glob(tail, &text[at..]))
        }
    }
}
