//! Keeps the [`Index`] in step with the TenantRepositories of the platform namespace and their
//! webhook Secrets, driven by watches (no polling).
//!
//! - A registration added or changed: its webhook Secret is read (one `get`) and its entry
//!   replaced, or dropped when it has no webhook, no Secret or no token.
//! - A registration deleted: its entry is dropped.
//! - A Secret added, changed or deleted (watched as metadata only, so Secret values never enter a
//!   cache): every registration naming it as webhook Secret is read again.
//! - A watch relist (`Init` ... `InitDone`): entries of registrations no longer listed go.
//! - A failed read keeps the previous entry and is retried after [`RETRY_AFTER`].
//!
//! [`keep_index_on_streams`] does the work on any event streams: the controller process feeds it
//! its one watch of the registrations and a metadata watch of the platform namespace's Secrets
//! (`controller::process::keep_receiver_index`); tests against an API server without watches
//! feed their own events.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FusedStream as _;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::index::{Index, Registration};
use crate::api::TenantRepository;

/// How long after a failed Secret read it is tried again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Keeps `index` in step with `registrations` (TenantRepository watch events) and `secrets`
/// (names of Secrets added, changed or deleted in the registrations' namespace), reading
/// webhook Secrets through `client`, until `stop` completes or both streams end.
pub async fn keep_index_on_streams(
    client: Client,
    index: Arc<Index>,
    registrations: impl Stream<Item = Result<watcher::Event<TenantRepository>, watcher::Error>> + Send,
    secrets: impl Stream<Item = Result<String, watcher::Error>> + Send,
    stop: impl Future<Output = ()> + Send,
) {
    let mut keeper = Keeper { client, index, known: BTreeMap::new(), listing: None, retry: BTreeSet::new() };
    let mut registrations = std::pin::pin!(registrations.fuse());
    let mut secrets = std::pin::pin!(secrets.fuse());
    let mut stop = std::pin::pin!(stop);
    let mut retry_at: Option<Instant> = None;
    loop {
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => futures::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut stop => return,
            event = registrations.next(), if !registrations.is_terminated() => match event {
                Some(Ok(event)) => keeper.on_registration(event).await,
                Some(Err(error)) => warn!(%error, "webhook index: TenantRepository watch"),
                None => {}
            },
            name = secrets.next(), if !secrets.is_terminated() => match name {
                Some(Ok(name)) => keeper.on_secret(&name).await,
                Some(Err(error)) => warn!(%error, "webhook index: Secret watch"),
                None => {}
            },
            () = retry => {
                retry_at = None;
                keeper.retry_failed().await;
            }
        }
        if registrations.is_terminated() && secrets.is_terminated() {
            return;
        }
        if !keeper.retry.is_empty() && retry_at.is_none() {
            retry_at = Some(Instant::now() + RETRY_AFTER);
        }
    }
}

struct Keeper {
    client: Client,
    index: Arc<Index>,
    /// The registrations as last delivered, by name.
    known: BTreeMap<String, Arc<TenantRepository>>,
    /// Names listed since `Init`, while a relist is under way.
    listing: Option<BTreeSet<String>>,
    /// Registrations whose Secret could not be read.
    retry: BTreeSet<String>,
}

impl Keeper {
    async fn on_registration(&mut self, event: watcher::Event<TenantRepository>) {
        match event {
            watcher::Event::Init => self.listing = Some(BTreeSet::new()),
            watcher::Event::InitApply(repo) => {
                if let Some(listing) = &mut self.listing {
                    listing.insert(repo.name_any());
                }
                self.apply(repo).await;
            }
            watcher::Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.known.retain(|name, _| listing.contains(name));
                    self.retry.retain(|name| listing.contains(name));
                    let known = &self.known;
                    self.index.retain(|_, name| known.contains_key(name));
                }
            }
            watcher::Event::Apply(repo) => self.apply(repo).await,
            watcher::Event::Delete(repo) => {
                let name = repo.name_any();
                self.known.remove(&name);
                self.retry.remove(&name);
                if self.index.remove(&repo.namespace().unwrap_or_default(), &name) {
                    info!(registration = %format!("{}/{name}", repo.namespace().unwrap_or_default()), "webhook: registration deleted; no longer served");
                }
            }
        }
    }

    async fn on_secret(&mut self, secret: &str) {
        let affected: Vec<Arc<TenantRepository>> = self
            .known
            .values()
            .filter(|repo| repo.spec.webhook.as_ref().is_some_and(|w| w.secret_ref.name == secret))
            .cloned()
            .collect();
        for repo in affected {
            self.refresh(&repo).await;
        }
    }

    async fn apply(&mut self, repo: TenantRepository) {
        let repo = Arc::new(repo);
        self.known.insert(repo.name_any(), repo.clone());
        self.refresh(&repo).await;
    }

    async fn retry_failed(&mut self) {
        let names = std::mem::take(&mut self.retry);
        for name in names {
            if let Some(repo) = self.known.get(&name).cloned() {
                self.refresh(&repo).await;
            }
        }
    }

    /// Reads `repo`'s webhook Secret and updates its entry.
    async fn refresh(&mut self, repo: &TenantRepository) {
        let namespace = repo.namespace().unwrap_or_default();
        let name = repo.name_any();
        let id = format!("{namespace}/{name}");
        self.retry.remove(&name);
        let secret = match &repo.spec.webhook {
            None => None,
            Some(webhook) => {
                let api = Api::<Secret>::namespaced(self.client.clone(), &namespace);
                match api.get_opt(&webhook.secret_ref.name).await {
                    Ok(secret) => secret,
                    Err(error) => {
                        warn!(registration = %id, %error, "webhook: reading the webhook Secret failed; retrying");
                        self.retry.insert(name);
                        return;
                    }
                }
            }
        };
        let data = secret.map(|s| s.data.unwrap_or_default());
        match Registration::from_parts(repo, data.as_ref()) {
            Ok(Some(registration)) => {
                for warning in registration.warnings() {
                    warn!(registration = %id, "webhook: {warning}");
                }
                if self.index.upsert(registration) {
                    info!(registration = %id, "webhook: registration served");
                }
            }
            Ok(None) => {
                if self.index.remove(&namespace, &name) {
                    info!(registration = %id, "webhook: no spec.webhook; no longer served");
                } else {
                    debug!(registration = %id, "webhook: no spec.webhook");
                }
            }
            Err(reason) => {
                let was_served = self.index.remove(&namespace, &name);
                warn!(registration = %id, %reason, was_served, "webhook: registration not served");
            }
        }
    }
}
