//! The fake API server on the wire: an HTTP server on 127.0.0.1 that hands every request to a
//! `kube-fake-client` client and records what arrived, headers included.
//!
//! kube-fake-client answers inside the process and never sees HTTP headers, so the
//! impersonation a reconciler sets (`Impersonate-User`) cannot be observed through it. Behind
//! this bridge the controller talks HTTP to `url()` with an ordinary `kube::Client`, exactly as
//! it would to an API server, and the test reads the recorded requests. The benchmark also uses
//! it to keep the fake's store out of the measured process.
//!
//! kube-fake-client does not serve API discovery either (`/api`, `/apis`, `/api/v1`,
//! `/apis/GROUP/VERSION`), which the TenantRepository reconciler reads to decide scope and
//! plural. The bridge answers those itself from a table of served kinds: the built-in kinds
//! kube-fake-client knows, cdtarget's and KEDA's, and whatever a test adds with
//! [`ApiBridge::serve_kind`] (a CRD installed while the controller runs).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Largest request body forwarded (the API server's own limit is 3 MiB).
const BODY_LIMIT: usize = 3 * 1024 * 1024;

/// One request as it arrived on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireRequest {
    /// `GET`, `PATCH`, ...
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The `Impersonate-User` header, if any.
    pub impersonate_user: Option<String>,
    /// Every `Impersonate-Group` header.
    pub impersonate_groups: Vec<String>,
}

/// What the bridge keeps of the requests it forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Every request, in order (tests).
    All,
    /// Only counts per [`WireRequest::verb`] (benchmarks: thousands of requests).
    Counts,
}

#[derive(Clone)]
struct Shared {
    fake: kube::Client,
    record: Record,
    requests: Arc<Mutex<Vec<WireRequest>>>,
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
    served: Arc<Mutex<Vec<ServedKind>>>,
}

/// A kind listed in the bridge's discovery documents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedKind {
    /// API group; empty for the core group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// The resource name (plural) requests use.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

impl ServedKind {
    /// A kind served in `group`/`version` under `plural`.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ServedKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }
}

/// The built-in kinds kube-fake-client knows, with cdtarget's and KEDA's.
fn default_served() -> Vec<ServedKind> {
    let builtin = kube_fake_client::discovery::list_resources().iter().map(|(group, version, kind, plural)| {
        let namespaced = kube_fake_client::discovery::is_namespaced(group, version, kind).unwrap_or(true);
        ServedKind::new(group, version, kind, plural, namespaced)
    });
    let added = [
        ServedKind::new("cdtarget.io", "v1alpha1", "CDTarget", "cdtargets", true),
        ServedKind::new("cdtarget.io", "v1alpha1", "TenantRepository", "tenantrepositories", true),
        ServedKind::new("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects", true),
        ServedKind::new("keda.sh", "v1alpha1", "ScaledJob", "scaledjobs", true),
        ServedKind::new("keda.sh", "v1alpha1", "TriggerAuthentication", "triggerauthentications", true),
        ServedKind::new("keda.sh", "v1alpha1", "ClusterTriggerAuthentication", "clustertriggerauthentications", false),
    ];
    builtin.chain(added).collect()
}

/// A running bridge; the server stops when this is dropped.
pub struct ApiBridge {
    addr: SocketAddr,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl WireRequest {
    /// The verb for counting: the method, with `/status` marked (`PATCH status`).
    pub fn verb(&self) -> String {
        let path = self.path.split('?').next().unwrap_or_default();
        if path.ends_with("/status") { format!("{} status", self.method) } else { self.method.clone() }
    }

    /// Whether the request changes the cluster.
    pub fn is_mutating(&self) -> bool {
        self.method != "GET"
    }
}

impl ApiBridge {
    /// Serves `fake` on 127.0.0.1 (a port the OS picks), on the current Tokio runtime.
    pub async fn start(fake: kube::Client, record: Record) -> ApiBridge {
        let served = Arc::new(Mutex::new(default_served()));
        let shared = Shared { fake, record, requests: Arc::default(), counts: Arc::default(), served };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the API bridge");
        let addr = listener.local_addr().expect("local address");
        let app = axum::Router::new().fallback(forward).with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ApiBridge { addr, shared, server }
    }

    /// The API server URL to put in a `kube::Config`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A plain (not impersonating) client of the bridge, as the controller builds from its config.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url().parse().expect("bridge URL"));
        kube::Client::try_from(config).expect("client of the bridge")
    }

    /// Every request forwarded so far (empty with [`Record::Counts`]).
    pub fn requests(&self) -> Vec<WireRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Requests forwarded so far per [`WireRequest::verb`].
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.shared.counts.lock().unwrap().clone()
    }

    /// Lists `kind` in the discovery documents from now on, as an installed CRD would be.
    pub fn serve_kind(&self, kind: ServedKind) {
        self.shared.served.lock().unwrap().push(kind);
    }

    /// Forgets the requests recorded so far.
    pub fn clear(&self) {
        self.shared.requests.lock().unwrap().clear();
        self.shared.counts.lock().unwrap().clear();
    }
}

impl Drop for ApiBridge {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(State(shared): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let header = |name: &str| parts.headers.get_all(name).iter().filter_map(|v| v.to_str().ok().map(str::to_owned));
    let seen = WireRequest {
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |pq| pq.to_string()),
        impersonate_user: header("impersonate-user").next(),
        impersonate_groups: header("impersonate-group").collect(),
    };
    *shared.counts.lock().unwrap().entry(seen.verb()).or_default() += 1;
    if shared.record == Record::All {
        shared.requests.lock().unwrap().push(seen);
    }
    if parts.method == http::Method::GET
        && let Some(document) = discovery(&shared.served.lock().unwrap(), parts.uri.path())
    {
        return document;
    }
    let Ok(bytes) = axum::body::to_bytes(body, BODY_LIMIT).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response();
    };
    // kube-fake-client ignores `dryRun=All` and would persist the object: the bridge answers a
    // dry run itself, accepting it and echoing the body, with nothing stored (the real API
    // server's refusals are tested on the real control plane, tests/cluster/dry_run.rs).
    if parts.uri.query().is_some_and(|query| query.split('&').any(|pair| pair == "dryRun=All")) {
        return (StatusCode::OK, [(http::header::CONTENT_TYPE, "application/json")], bytes).into_response();
    }
    let mut forwarded = http::Request::builder().method(parts.method).uri(parts.uri);
    for (name, value) in &parts.headers {
        forwarded = forwarded.header(name, value);
    }
    let forwarded =
        forwarded.body(kube::client::Body::from(bytes.to_vec())).expect("a request rebuilt from a valid one");
    match shared.fake.send(forwarded).await {
        Ok(response) => response.map(Body::new),
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// The discovery document at `path`, if `path` is a discovery path; unknown group versions get
/// the API server's 404.
fn discovery(served: &[ServedKind], path: &str) -> Option<Response> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let json = |value: serde_json::Value| (StatusCode::OK, axum::Json(value)).into_response();
    let versions_of = |group: &str| {
        let versions: std::collections::BTreeSet<&str> =
            served.iter().filter(|k| k.group == group).map(|k| k.version.as_str()).collect();
        versions.into_iter().collect::<Vec<_>>()
    };
    let resources = |group: &str, version: &str| {
        let listed: Vec<serde_json::Value> = served
            .iter()
            .filter(|k| k.group == group && k.version == version)
            .map(|k| {
                serde_json::json!({
                    "name": k.plural, "singularName": k.kind.to_lowercase(), "namespaced": k.namespaced,
                    "kind": k.kind, "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                })
            })
            .collect();
        let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        if listed.is_empty() {
            let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404});
            (StatusCode::NOT_FOUND, axum::Json(status)).into_response()
        } else {
            json(
                serde_json::json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": listed}),
            )
        }
    };
    match segments.as_slice() {
        ["api"] => Some(json(serde_json::json!({
            "kind": "APIVersions", "versions": versions_of(""), "serverAddressByClientCIDRs": [],
        }))),
        ["apis"] => {
            let groups: std::collections::BTreeSet<&str> =
                served.iter().map(|k| k.group.as_str()).filter(|g| !g.is_empty()).collect();
            let groups: Vec<serde_json::Value> = groups
                .into_iter()
                .map(|group| {
                    let versions: Vec<serde_json::Value> = versions_of(group)
                        .into_iter()
                        .map(|v| serde_json::json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                        .collect();
                    serde_json::json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
                })
                .collect();
            Some(json(serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})))
        }
        ["api", version] => Some(resources("", version)),
        ["apis", group, version] => Some(resources(group, version)),
        _ => None,
    }
}
