//! Leader election on a coordination.k8s.io Lease: only the replica holding it reconciles.

use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;
use tracing::{info, warn};

use super::RunError;
use crate::telemetry::State;

/// The Lease to hold while reconciling.
#[derive(Clone, Debug)]
pub struct Lease {
    /// Its namespace (the controller's).
    pub namespace: String,
    /// Its name (`--lease-name`).
    pub lease_name: String,
    /// This replica's identity in it.
    pub identity: String,
}

/// Without leader election (`lease` is `None`): runs `work` until stopped. With it: waits for
/// the lease, runs `work` while holding it, and returns an error when it is lost (a restart is
/// the clean way to drop every cache and in-flight reconcile). `work` stops when the stop flag
/// it is given is set.
pub(crate) async fn while_leading<F, Fut>(
    lease: Option<Lease>,
    client: Client,
    state: Arc<State>,
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
    work: F,
) -> Result<(), RunError>
where
    F: FnOnce(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = Result<(), RunError>>,
{
    let Some(args) = lease else {
        state.set_leader(true);
        return work(stop_rx).await;
    };
    let identity = args.identity.clone();
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&args.namespace)
        .with_identity(&identity)
        .with_field_manager(field_manager(&identity))
        .build()
        .await
        .map_err(|e| RunError::Lease(format!("Lease {}/{}: {e}", args.namespace, args.lease_name)))?;
    let (mut leading, lease_task) = manager.watch().await;
    // The lease state is known from here on: a follower is ready.
    state.set_ready(true);
    info!(identity, lease = %args.lease_name, "waiting for the lease");

    let mut stop = stop_rx.clone();
    // Some(acquired) when the lease state settled first, None when stopped first.
    let acquired = tokio::select! {
        acquired = leading.wait_for(|leader| *leader) => Some(acquired.is_ok()),
        _ = stop.wait_for(|stop| *stop) => None,
    };
    match acquired {
        Some(true) => {}
        Some(false) => return Err(RunError::Lease("the lease task ended".into())),
        None => {
            drop(leading);
            let _ = lease_task.await;
            return Ok(());
        }
    }
    info!(identity, "acquired the lease: starting the reconcilers");
    state.set_leader(true);
    state.set_ready(false);

    // Losing the lease stops the reconcilers as a signal would.
    let mut lost = leading.clone();
    let lost_lease = tokio::spawn(async move {
        let lost = lost.wait_for(|leader| !*leader).await.is_ok();
        if lost {
            warn!("lost the lease: stopping the reconcilers");
            let _ = stop_tx.send(true);
        }
        lost
    });
    let result = work(stop_rx).await;
    // The watcher task holds a receiver of the lease channel: end it so the lease is released.
    let lost = if lost_lease.is_finished() {
        lost_lease.await.unwrap_or(false)
    } else {
        lost_lease.abort();
        let _ = lost_lease.await;
        false
    };
    state.set_leader(false);
    // Dropping the receiver makes the lease task release the lease.
    drop(leading);
    let _ = lease_task.await;
    result?;
    if lost { Err(RunError::Lease("lost the lease".into())) } else { Ok(()) }
}

/// The field manager of this replica's writes of the Lease: one per identity. A free Lease is
/// taken with a server-side apply of `holderIdentity` without force, and the conflict the API
/// server answers when another manager set it meanwhile is what keeps two replicas from taking it
/// at the same moment; with one manager name for all, both applies succeed and both lead until
/// the next renewal (kube-lease-manager requires unique managers for this reason). An identity
/// too long for the API server's 128 characters is replaced by a digest of it.
pub fn field_manager(identity: &str) -> String {
    let manager = format!("{}-lease-{identity}", crate::api::FIELD_MANAGER);
    if manager.len() <= 128 {
        return manager;
    }
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(identity.as_bytes()));
    format!("{}-lease-{}", crate::api::FIELD_MANAGER, &digest[..32])
}

/// This replica's name when `--identity`/`POD_NAME` is not set.
pub(crate) fn host_name() -> Option<String> {
    std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_replica_writes_the_lease_under_a_field_manager_of_its_own() {
        let (a, b) = (field_manager("cdtarget-7d4f9-abcde"), field_manager("cdtarget-7d4f9-fghij"));
        assert_ne!(a, b, "two replicas under one manager both take a free Lease");
        assert_ne!(a, crate::api::FIELD_MANAGER, "the manager of the children and status");
        assert_eq!(a, "cdtarget-lease-cdtarget-7d4f9-abcde");
        let (long_a, long_b) = (field_manager(&"a".repeat(200)), field_manager(&format!("{}b", "a".repeat(199))));
        assert!(long_a.len() <= 128 && long_b.len() <= 128 && long_a != long_b, "{long_a} {long_b}");
    }
}
