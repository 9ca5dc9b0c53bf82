//! The HTTP side: `/healthz`, `/readyz` and `/metrics`, served from a [`State`] that never
//! holds the kube client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State as AxumState;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::Metrics;

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

    /// Records whether this replica leads (also in `cdtarget_leader`).
    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::SeqCst);
        self.metrics.leader.set(i64::from(leader));
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
    fn listen_addresses_accept_a_bare_port() {
        assert_eq!(parse_listen_address(":8080").unwrap(), "0.0.0.0:8080".parse().unwrap());
        assert_eq!(parse_listen_address("127.0.0.1:9").unwrap(), "127.0.0.1:9".parse().unwrap());
        assert!(parse_listen_address("8080").is_err());
    }

    #[test]
    fn metrics_expose_leadership_and_gitlab_calls() {
        let state = State::default();
        assert!(state.metrics.encode().contains("cdtarget_leader 0"));
        state.set_leader(true);
        state.metrics.count_gitlab_request("GET", "success");
        state.metrics.count_gitlab_request("POST", "GitLabUnauthorized");
        let text = state.metrics.encode();
        assert!(text.contains("cdtarget_leader 1"), "{text}");
        assert!(text.contains("cdtarget_gitlab_requests_total{method=\"GET\",result=\"success\"} 1"), "{text}");
        assert!(
            text.contains("cdtarget_gitlab_requests_total{method=\"POST\",result=\"GitLabUnauthorized\"} 1"),
            "{text}"
        );
    }
}
