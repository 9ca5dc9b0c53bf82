//! Whether KEDA is installed: asked of API discovery at start-up and every [`KEDA_RECHECK`];
//! when it appears or goes away every CDTarget is rendered again.

use std::time::Duration;

use futures::channel::mpsc;
use kube::Client;
use tracing::{info, warn};

use crate::controller::inputs::Keda;

/// How often the controller checks whether KEDA was installed or removed.
pub(crate) const KEDA_RECHECK: Duration = Duration::from_secs(5 * 60);

/// Checks for KEDA every [`KEDA_RECHECK`] and, when it appeared or went away, updates `keda`
/// and asks for every CDTarget to be reconciled. A failed check changes nothing. The owned
/// ScaledObject and TriggerAuthentication watches are set up at start-up only: after KEDA is
/// installed, drift of those children is repaired by the periodic resync until a restart.
pub(crate) async fn recheck_keda(client: Client, keda: Keda, changed: mpsc::UnboundedSender<()>) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + KEDA_RECHECK, KEDA_RECHECK);
    loop {
        ticks.tick().await;
        match keda_installed(&client).await {
            Ok(installed) if keda.set(installed) => {
                info!(
                    installed,
                    "KEDA was {}: rendering every CDTarget again",
                    if installed { "installed" } else { "removed" }
                );
                if changed.unbounded_send(()).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(error) => warn!(%error, "checking whether KEDA is installed"),
        }
    }
}

/// Whether `keda.sh/v1alpha1` serves ScaledObject and TriggerAuthentication.
pub(crate) async fn keda_installed(client: &Client) -> Result<bool, kube::Error> {
    match client.list_api_group_resources("keda.sh/v1alpha1").await {
        Ok(list) => {
            let has = |kind: &str| list.resources.iter().any(|r| r.kind == kind);
            Ok(has("ScaledObject") && has("TriggerAuthentication"))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}
