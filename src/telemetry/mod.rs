//! What the controller process tells the outside world: logs (text or JSON), Prometheus metrics
//! and the `/healthz`, `/readyz` and `/metrics` endpoints.
//!
//! - [`logging`]: the `tracing` subscriber;
//! - [`metrics`]: the metric families, their labels and the registry;
//! - [`process`]: the standard `process_*` metrics, read from `/proc/self`;
//! - [`server`]: the HTTP endpoints, sharing a [`State`] that never holds the kube client.
//!
//! Telemetry imports nothing of the crate: every floor may count into it.

pub(crate) mod logging;
pub(crate) mod metrics;
pub(crate) mod process;
pub(crate) mod server;

pub use logging::{LogFormat, init_logging, subscriber};
pub use metrics::{
    DRY_RUN, FetchLabels, GitLabLabels, KindLabels, Metrics, ObjectLabels, Readiness, ReadinessObserver,
    ReconcileTimer, RegistrationLabels, ResultLabels, WebhookLabels, WebhookMetrics, WebhookTypeLabels, WriteLabels,
};
pub use server::{State, parse_listen_address, router, serve};
