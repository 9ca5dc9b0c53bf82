//! The fake API server on the wire: an HTTP server on 127.0.0.1 that hands every request to a
//! `kube-fake-client` client and records what arrived, headers included.
//!
//! kube-fake-client answers inside the process and never sees HTTP headers, so the
//! impersonation a reconciler sets (`Impersonate-User`) cannot be observed through it. Behind
//! this bridge the controller talks HTTP to `url()` with an ordinary `kube::Client`, exactly as
//! it would to an API server, and the test reads the recorded requests. The benchmark also uses
//! it to keep the fake's store out of the measured process.

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
        let shared = Shared { fake, record, requests: Arc::default(), counts: Arc::default() };
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
    let Ok(bytes) = axum::body::to_bytes(body, BODY_LIMIT).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response();
    };
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
