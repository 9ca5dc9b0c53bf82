//! The SyncStatuses' watch: reflected into the store the TenantRepository reconciler reads (what
//! it wrote last, so an unchanged cycle writes nothing), and kept clean. There is no owner
//! reference across namespaces (a SyncStatus lives in the tenant namespace, its registration in
//! the platform namespace), so the controller deletes a SyncStatus itself when its registration
//! is deleted, when the registration now targets another namespace, and, after every (re-)list
//! of either watch, whenever one names a registration of this platform namespace that is not
//! there ([`sync_status::stale`]): a registration deleted while the controller was down, or while
//! the watch was cut, leaves nothing behind either. Each deletion is guarded by the uid judged.

use std::collections::HashMap;

use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store, store};
use kube::runtime::watcher;
use tracing::{info, warn};

use super::watches::Events;
use crate::api::{SyncStatus, TenantRepository};
use crate::apply::{Write, Writer};
use crate::controller::tenant_repository::sync_status;

/// Reflects `events` into `reflected` and deletes stale SyncStatuses, following `registrations`
/// (whose store is `registry`). Runs until both streams end.
pub(crate) async fn keep_clean(
    events: Events<SyncStatus>,
    mut reflected: store::Writer<SyncStatus>,
    registrations: impl Stream<Item = watcher::Event<TenantRepository>> + Send + Unpin,
    registry: Store<TenantRepository>,
    writer: Writer,
    platform_namespace: String,
) {
    let statuses = reflected.as_reader();
    let janitor = Janitor { statuses, registry, writer, platform_namespace };
    // The target namespace each registration had when last seen.
    let mut targets: HashMap<String, String> = HashMap::new();
    let (mut statuses_listed, mut registrations_listed) = (false, false);
    let mut events = events.fuse();
    let mut registrations = registrations.fuse();
    loop {
        tokio::select! {
            Some(event) = events.next() => {
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        warn!(%error, "watching the SyncStatuses");
                        continue;
                    }
                };
                reflected.apply_watcher_event(&event);
                match event {
                    watcher::Event::InitDone => {
                        statuses_listed = true;
                        if registrations_listed {
                            janitor.sweep().await;
                        }
                    }
                    // Written after its registration went (a reconcile under way at the time).
                    watcher::Event::Apply(status) if registrations_listed => {
                        janitor.check(&status.namespace().unwrap_or_default(), &status.name_any()).await;
                    }
                    _ => {}
                }
            }
            Some(event) = registrations.next() => match event {
                watcher::Event::InitApply(repo) | watcher::Event::Apply(repo) => {
                    let target = repo.spec.target_namespace.clone();
                    let before = targets.insert(repo.name_any(), target.clone());
                    if let Some(before) = before.filter(|before| *before != target)
                        && statuses_listed
                    {
                        janitor.check(&before, &repo.name_any()).await;
                    }
                }
                watcher::Event::Delete(repo) => {
                    targets.remove(&repo.name_any());
                    if statuses_listed {
                        janitor.check(&repo.spec.target_namespace, &repo.name_any()).await;
                    }
                }
                watcher::Event::InitDone => {
                    registrations_listed = true;
                    if statuses_listed {
                        janitor.sweep().await;
                    }
                }
                watcher::Event::Init => {}
            },
            else => break,
        }
    }
}

struct Janitor {
    statuses: Store<SyncStatus>,
    registry: Store<TenantRepository>,
    writer: Writer,
    platform_namespace: String,
}

impl Janitor {
    /// Deletes every stale SyncStatus.
    async fn sweep(&self) {
        for status in self.statuses.state() {
            self.delete_if_stale(&status).await;
        }
    }

    /// Deletes SyncStatus `namespace/name` if it is stale.
    async fn check(&self, namespace: &str, name: &str) {
        if let Some(status) = self.statuses.get(&ObjectRef::new(name).within(namespace)) {
            self.delete_if_stale(&status).await;
        }
    }

    async fn delete_if_stale(&self, status: &SyncStatus) {
        let registration = ObjectRef::new(&status.spec.registration.name).within(&self.platform_namespace);
        let registration = self.registry.get(&registration);
        if !sync_status::stale(status, &self.platform_namespace, registration.as_deref()) {
            return;
        }
        let namespace = status.namespace().unwrap_or_default();
        let write =
            Write::DeleteSyncStatus { namespace: namespace.clone(), name: status.name_any(), uid: status.uid() };
        match self.writer.execute(write).await {
            Ok(_) => info!(
                namespace,
                name = status.name_any(),
                "deleted a SyncStatus whose registration is gone or targets another namespace"
            ),
            Err(error) => warn!(%error, "deleting a stale SyncStatus (tried again after the next list)"),
        }
    }
}
