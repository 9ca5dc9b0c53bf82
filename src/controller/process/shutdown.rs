//! Stopping: SIGTERM/SIGINT set the stop flag, the controllers finish their reconciles in
//! flight, and what they yield until then is logged.

use futures::{FutureExt, Stream, StreamExt};
use kube::Resource;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::text::redact_userinfo;

/// Sets `stop` on SIGTERM or SIGINT.
pub(crate) async fn stop_on_signal(stop: watch::Sender<bool>) {
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => futures::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = futures::future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
        () = terminate => info!("SIGTERM: shutting down"),
    }
    let _ = stop.send(true);
}

/// Completes once `stop` is set (or its sender is gone).
pub async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// A shareable (`Sync`) future completing once `stop` is set, for `graceful_shutdown_on`.
pub(crate) fn shutdown_future(stop: watch::Receiver<bool>) -> impl Future<Output = ()> + Send + Sync + 'static {
    stopped(stop).boxed().shared()
}

/// Logs what a controller stream yields until it ends.
pub async fn drain<K, E1, E2>(
    kind: &'static str,
    stream: impl Stream<Item = Result<(ObjectRef<K>, Action), controller::Error<E1, E2>>>,
) where
    K: Resource,
    E1: std::error::Error + 'static,
    E2: std::error::Error + 'static,
{
    stream
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(kind, %object, "reconciled"),
                // URL userinfo never reaches the logs, whatever an error quotes.
                Err(controller::Error::ReconcilerFailed(error, object)) => {
                    warn!(kind, %object, error = %redact_userinfo(&error.to_string()), "reconcile failed")
                }
                Err(error) => warn!(kind, error = %redact_userinfo(&error.to_string()), "controller"),
            }
        })
        .await;
}
