//! What KEDA is installed: asked of the API server at start-up and every [`KEDA_RECHECK`]; when
//! it appears, goes away or changes release, every CDTarget is rendered again.
//!
//! How the release is told: [`crate::apply::keda`].

use std::time::Duration;

use futures::channel::mpsc;
use kube::Client;
use tracing::{info, warn};

use crate::apply::keda::discover_keda;
use crate::controller::inputs::Keda;

/// How often the controller checks whether KEDA was installed, removed or upgraded.
pub(crate) const KEDA_RECHECK: Duration = Duration::from_secs(5 * 60);

/// Checks KEDA every [`KEDA_RECHECK`] and, when what is seen changed, updates `keda` and asks
/// for every CDTarget to be reconciled. A failed check changes nothing. The owned KEDA watches
/// are set up at start-up only: after KEDA is installed, drift of those children is repaired by
/// the periodic resync until a restart.
pub(crate) async fn recheck_keda(client: Client, keda: Keda, changed: mpsc::UnboundedSender<()>) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + KEDA_RECHECK, KEDA_RECHECK);
    loop {
        ticks.tick().await;
        match discover_keda(&client).await {
            Ok(seen) if keda.set(seen) => {
                info!(
                    installed = seen.installed,
                    version = seen.version.map(|v| v.to_string()),
                    "KEDA changed: rendering every CDTarget again"
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
