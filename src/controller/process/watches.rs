//! Where the controllers' events come from ([`Sources`]: the production watches, or streams a
//! test gives), and the pure mappings from a changed object to the objects to reconcile.
//!
//! The registrations are watched once for the controller and the webhook receiver's index
//! ([`super::registrations`]); the policy ConfigMap is watched whole and parsed once per change
//! ([`keep_policy`]). Children and Secrets are watched as metadata only: Secret values never
//! enter a cache.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::{CDTarget, SyncStatus, TenantRepository, labels};
use crate::controller::cdtarget::borrowed;
use crate::controller::inputs::{PolicyRead, policy_of};
use crate::render::ChildKind;

/// A watch's events.
pub type Events<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;
/// Objects a watch saw added, changed or deleted.
pub(crate) type Touched<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// The watch of one kind of child: its objects' metadata, as their API resource's.
pub struct ChildWatch {
    /// The kind watched.
    pub kind: ChildKind,
    /// The children of that kind added, changed or deleted (metadata only).
    pub objects: Touched<PartialObjectMeta<DynamicObject>>,
}

impl ChildWatch {
    /// The production watch of the children of `kind` selected by `config`, in every namespace.
    pub fn of(client: &Client, kind: ChildKind, config: watcher::Config) -> ChildWatch {
        let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &kind.resource());
        let objects = restarting(move || watcher(api.clone(), config.clone()).boxed())
            .default_backoff()
            .touched_objects()
            .boxed();
        ChildWatch { kind, objects }
    }
}

/// Every stream the controllers are driven by, but the registrations' (they live as long as the
/// process, [`super::registrations::Registrations`]).
pub struct Sources {
    /// The (sharded) CDTargets of every namespace.
    pub targets: Events<CDTarget>,
    /// The policy ConfigMap (whole: its data is parsed once per change).
    pub policy: Events<ConfigMap>,
    /// Secrets of the platform namespace (credentials and webhook tokens of registrations).
    pub platform_secrets: Touched<PartialObjectMeta<Secret>>,
    /// Secrets of every namespace (what CDTargets reference).
    pub secrets: Touched<PartialObjectMeta<Secret>>,
    /// The children the controller manages, one watch per kind of the table
    /// ([`ChildKind::ALL`]; KEDA's only when installed at start-up).
    pub children: Vec<ChildWatch>,
    /// The SyncStatuses the controller manages (of its shard); `None`: no SyncStatus is kept and
    /// no tenant Event recorded (end-to-end tests against an API server without watches).
    pub sync_statuses: Option<Events<SyncStatus>>,
    /// Whether the child streams above are watches of the API server (`false`: given streams
    /// that never change), so that a change of a child reconciles its CDTarget at once.
    pub children_watched: bool,
}

impl Sources {
    /// The production watches: the CDTargets selected by `shard`, the policy ConfigMap
    /// `namespace/policy_name`, the Secrets, and the children labelled as managed by cdtarget
    /// (KEDA's kinds when `keda`).
    pub fn watches(client: &Client, namespace: &str, policy_name: &str, shard: watcher::Config, keda: bool) -> Sources {
        fn touched<K>(api: Api<K>, config: watcher::Config) -> Touched<K>
        where
            K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
            K::DynamicType: Default + Eq + Hash + Clone,
        {
            watched(api, config).touched_objects().boxed()
        }
        let children =
            watcher::Config::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE));
        let policy = watcher::Config::default().fields(&format!("metadata.name={policy_name}"));
        // A SyncStatus carries its registration's labels, so the shard's selector selects the
        // SyncStatuses of the shard's registrations.
        let managed = format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE);
        let sync_statuses = match &shard.label_selector {
            Some(selector) => watcher::Config::default().labels(&format!("{managed},{selector}")),
            None => watcher::Config::default().labels(&managed),
        };
        Sources {
            sync_statuses: Some(watched(Api::all(client.clone()), sync_statuses)),
            targets: watched(Api::all(client.clone()), shard),
            policy: watched(Api::namespaced(client.clone(), namespace), policy),
            platform_secrets: touched(Api::namespaced(client.clone(), namespace), watcher::Config::default()),
            secrets: touched(Api::all(client.clone()), watcher::Config::default()),
            children: ChildKind::ALL
                .into_iter()
                .filter(|kind| keda || !kind.needs_keda())
                .map(|kind| ChildWatch::of(client, kind, children.clone()))
                .collect(),
            children_watched: true,
        }
    }

    /// The CDTargets' events given by the caller (beginning with an initial list, `Init`,
    /// `InitApply`..., `InitDone`, as a watch does); no policy ConfigMap (the documented
    /// defaults), and no Secret or child ever changes. For end-to-end tests against an API
    /// server that serves no watches.
    pub fn given(targets: impl Stream<Item = watcher::Event<CDTarget>> + Send + 'static) -> Sources {
        let no_policy = futures::stream::iter([Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)]);
        Sources {
            targets: targets.map(Ok).boxed(),
            policy: no_policy.chain(futures::stream::pending()).boxed(),
            platform_secrets: futures::stream::pending().boxed(),
            secrets: futures::stream::pending().boxed(),
            children: Vec::new(),
            sync_statuses: None,
            children_watched: false,
        }
    }
}

/// The events of `api`'s objects selected by `config`: kube-runtime's `watcher`, started over
/// (a new list, then a new watch) whenever its watch stream fails, with the default back-off
/// between attempts. Every watch of the controller is one of these.
///
/// The watcher alone keeps reading a watch stream that failed, one error per read (and per
/// back-off step): a connection cut by a kube-apiserver restart, or the pretty-printed `Status`
/// of a watch refused while a restarted apiserver's authorizer warms up (one line, one error).
/// Against a real apiserver restarted under it, the controller's watches then took two minutes
/// and more to come back, and missed every change in between.
pub fn watched<K>(api: Api<K>, config: watcher::Config) -> Events<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    restarting(move || watcher(api.clone(), config.clone()).boxed()).default_backoff().boxed()
}

/// The events of the streams `start` gives: one until it yields a failed watch
/// ([`watcher::Error::WatchFailed`], [`watcher::Error::WatchError`]), then a new one, and so on.
/// A failed list or a watch that could not start is retried by the watcher itself.
pub fn restarting<K, S>(start: impl Fn() -> S + Send + 'static) -> impl Stream<Item = S::Item> + Send + 'static
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + Unpin + 'static,
{
    futures::stream::unfold((start(), start), |(mut events, start)| async move {
        let event = events.next().await?;
        let failed = matches!(event, Err(watcher::Error::WatchFailed(_) | watcher::Error::WatchError(_)));
        if failed {
            info!("a watch stream failed: starting the watch over with a new list");
            events = start();
        }
        Some((event, (events, start)))
    })
}

/// The watch of the (sharded) TenantRepositories of the platform namespace: registrations
/// elsewhere are ignored, since a registration chooses which ServiceAccount the controller
/// impersonates and only the platform namespace may hold them.
pub fn registrations(client: &Client, namespace: &str, shard: watcher::Config) -> Events<TenantRepository> {
    watched(Api::namespaced(client.clone(), namespace), shard)
}

/// The names of the Secrets of `namespace` that were added, changed or deleted (metadata only),
/// for the webhook receiver's index.
pub(crate) fn secret_names(client: &Client, namespace: &str) -> BoxStream<'static, Result<String, watcher::Error>> {
    watched(Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), namespace), watcher::Config::default())
        .touched_objects()
        .map(|secret| secret.map(|s| s.name_any()))
        .boxed()
}

/// Keeps `policy` current from the events of the policy ConfigMap: parsed once per change of
/// its data (absent: the documented defaults), and each of `changed` told after every change
/// but the first read so that its controller renders everything again.
pub(crate) async fn keep_policy(
    mut events: Events<ConfigMap>,
    policy: watch::Sender<Option<Arc<PolicyRead>>>,
    changed: Vec<mpsc::UnboundedSender<()>>,
) {
    // The data last parsed, and whether the list under way has seen the ConfigMap.
    let mut last: Option<Option<std::collections::BTreeMap<String, String>>> = None;
    let mut listed = false;
    while let Some(event) = events.next().await {
        let seen = match event {
            Ok(watcher::Event::Init) => {
                listed = false;
                continue;
            }
            Ok(watcher::Event::InitApply(config_map) | watcher::Event::Apply(config_map)) => {
                listed = true;
                Some(config_map)
            }
            Ok(watcher::Event::InitDone) if listed => continue,
            Ok(watcher::Event::InitDone | watcher::Event::Delete(_)) => None,
            Err(error) => {
                warn!(%error, "watching the policy ConfigMap");
                continue;
            }
        };
        let data = seen.as_ref().map(|config_map| config_map.data.clone().unwrap_or_default());
        if last.as_ref() == Some(&data) {
            continue;
        }
        let read = policy_of(seen.as_ref());
        match &read {
            Ok(_) => info!(present = seen.is_some(), "read the platform policy"),
            // The one place a CDTarget's invalid policy is told in full: tenants read a fixed sentence.
            Err(problems) => {
                let detail = problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
                warn!(problems = problems.len(), %detail, "the platform policy is invalid")
            }
        }
        // The first read only lets reconciles start (they wait for it); the initial lists of
        // the objects reconcile everything anyway. Every later change renders everything again.
        let first = last.is_none();
        last = Some(data);
        policy.send_replace(Some(Arc::new(read)));
        if !first {
            for sender in &changed {
                let _ = sender.unbounded_send(());
            }
        }
    }
}

/// What of a watched object calls for a reconcile, hashed: its generation (the spec), its
/// annotations (`cdtarget.io/requestedAt` and other requests) and whether it is being deleted.
/// Status writes change none of these, so the reconciler's own status update does not wake it
/// again; the periodic requeue and the owned and referenced objects still do.
pub(crate) fn reconcile_worthy<K: Resource>(object: &K) -> Option<u64> {
    let meta = object.meta();
    let mut hasher = std::hash::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// The registrations that read Secret `namespace/name`: their Git credentials or their webhook
/// token.
pub(crate) fn registrations_referencing_secret(
    namespace: &str,
    name: &str,
    registrations: impl IntoIterator<Item = Arc<TenantRepository>>,
) -> Vec<ObjectRef<TenantRepository>> {
    registrations
        .into_iter()
        .filter(|repo| repo.namespace().as_deref() == Some(namespace))
        .filter(|repo| {
            let credentials = repo.spec.secret_ref.as_ref().map(|s| s.name.as_str());
            let webhook = repo.spec.webhook.as_ref().map(|w| w.secret_ref.name.as_str());
            credentials == Some(name) || webhook == Some(name)
        })
        .map(|repo| ObjectRef::from_obj(repo.as_ref()))
        .collect()
}

/// The CDTargets among `targets` that reference Secret `namespace/name` (token, proxy, CA,
/// image pull Secret or `env[].valueFrom.secretKeyRef`): a change of any of them may change what
/// the agents are given, or whether they may be given it.
pub(crate) fn cdtargets_referencing_secret(
    namespace: &str,
    name: &str,
    targets: impl IntoIterator<Item = Arc<CDTarget>>,
) -> Vec<ObjectRef<CDTarget>> {
    targets
        .into_iter()
        .filter(|target| target.namespace().as_deref() == Some(namespace))
        .filter(|target| {
            borrowed::references(target).iter().any(|r| r.resource == borrowed::Resource::Secret && r.name == name)
        })
        .map(|target| ObjectRef::from_obj(target.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(namespace: &str, name: &str, token: &str, proxy: Option<&str>, ca: Option<&str>) -> Arc<CDTarget> {
        let mut target = CDTarget::test().in_namespace(namespace).with_name(name).with_token_ref(token);
        if let Some(proxy) = proxy {
            target = target.with_proxy_ref(proxy);
        }
        if let Some(ca) = ca {
            target = target.with_ca_cert_ref(ca);
        }
        Arc::new(target)
    }

    fn names(refs: Vec<ObjectRef<CDTarget>>) -> Vec<String> {
        refs.iter().map(|r| format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name)).collect()
    }

    fn registration(
        namespace: &str,
        name: &str,
        credentials: Option<&str>,
        webhook: Option<&str>,
    ) -> Arc<TenantRepository> {
        let mut repo = TenantRepository::test().in_namespace(namespace).with_name(name);
        if let Some(secret) = credentials {
            repo = repo.with_secret_ref(secret);
        }
        if let Some(secret) = webhook {
            repo = repo.with_webhook_secret(secret);
        }
        Arc::new(repo)
    }

    #[tokio::test]
    async fn a_failed_watch_is_started_over_with_a_new_list_instead_of_read_on() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        fn failed() -> Result<watcher::Event<ConfigMap>, watcher::Error> {
            let cut = std::io::Error::other("error reading a body from connection");
            Err(watcher::Error::WatchFailed(kube::Error::ReadEvents(cut)))
        }
        fn map(name: &str) -> ConfigMap {
            ConfigMap {
                metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
                ..Default::default()
            }
        }
        let started = Arc::new(AtomicUsize::new(0));
        let starts = started.clone();
        let events = restarting(move || {
            // The first watch fails and, read on, would fail again and again (what the watcher
            // does with a cut connection); the second lists what is there now.
            let script = if starts.fetch_add(1, Ordering::SeqCst) == 0 {
                vec![Ok(watcher::Event::Init), Ok(watcher::Event::InitDone), failed(), failed(), failed()]
            } else {
                vec![Ok(watcher::Event::Init), Ok(watcher::Event::InitApply(map("a"))), Ok(watcher::Event::InitDone)]
            };
            futures::stream::iter(script).chain(futures::stream::pending()).boxed()
        });
        let seen: Vec<String> = events
            .take(6)
            .map(|event| match event {
                Ok(watcher::Event::Init) => "Init".to_owned(),
                Ok(watcher::Event::InitApply(map)) => format!("InitApply {}", map.name_any()),
                Ok(watcher::Event::InitDone) => "InitDone".to_owned(),
                Ok(other) => format!("{other:?}"),
                Err(_) => "failed".to_owned(),
            })
            .collect()
            .await;
        assert_eq!(seen, ["Init", "InitDone", "failed", "Init", "InitApply a", "InitDone"]);
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn status_writes_do_not_call_for_a_reconcile_but_spec_annotations_and_deletion_do() {
        let mut repo = Arc::unwrap_or_clone(registration("cdtarget-system", "a", None, None));
        repo.metadata.generation = Some(1);
        let before = reconcile_worthy(&repo);
        repo.status = Some(Default::default());
        repo.metadata.resource_version = Some("2".into());
        assert_eq!(reconcile_worthy(&repo), before, "a status write");

        let mut spec_changed = repo.clone();
        spec_changed.metadata.generation = Some(2);
        let mut requested = repo.clone();
        requested.annotations_mut().insert("cdtarget.io/requestedAt".into(), "2026-11-22T10:00:00Z".into());
        let mut deleting = repo.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        for changed in [spec_changed, requested, deleting] {
            assert_ne!(reconcile_worthy(&changed), before, "{:?}", changed.metadata);
        }
    }

    #[test]
    fn a_secret_maps_to_every_registration_reading_it_for_git_or_the_webhook() {
        let registrations = vec![
            registration("cdtarget-system", "by-credentials", Some("shared"), None),
            registration("cdtarget-system", "by-webhook", Some("other"), Some("shared")),
            registration("cdtarget-system", "unrelated", Some("other"), Some("hook")),
            registration("elsewhere", "same-name-elsewhere", Some("shared"), None),
        ];
        let found: Vec<String> = registrations_referencing_secret("cdtarget-system", "shared", registrations)
            .iter()
            .map(|r| format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name))
            .collect();
        assert_eq!(found, ["cdtarget-system/by-credentials", "cdtarget-system/by-webhook"]);
    }

    #[test]
    fn a_secret_maps_to_every_cdtarget_of_its_namespace_referencing_it_as_token_proxy_or_ca() {
        let targets = vec![
            target("team-a", "by-token", "shared", None, None),
            target("team-a", "by-proxy", "other", Some("shared"), None),
            target("team-a", "by-ca", "other", None, Some("shared")),
            target("team-a", "unrelated", "other", Some("proxy"), Some("ca")),
            target("team-b", "same-name-elsewhere", "shared", None, None),
        ];
        let found = names(cdtargets_referencing_secret("team-a", "shared", targets));
        assert_eq!(found, ["team-a/by-token", "team-a/by-proxy", "team-a/by-ca"]);
    }

    #[test]
    fn a_secret_nobody_references_maps_to_nothing() {
        let targets = vec![target("team-a", "agents", "azp-token", None, None)];
        assert!(cdtargets_referencing_secret("team-a", "unrelated", targets.clone()).is_empty());
        assert!(cdtargets_referencing_secret("team-b", "azp-token", targets).is_empty());
    }

    #[tokio::test]
    async fn the_policy_is_parsed_once_per_change_and_every_controller_is_told() {
        use std::collections::BTreeMap;
        let config_map = |forbidden: &str| ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some("cdtarget-policy".into()), ..Default::default() },
            data: Some(BTreeMap::from([("policy.yaml".to_owned(), format!("egress:\n  forbidden: [{forbidden}]\n"))])),
            ..ConfigMap::default()
        };
        let events = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(config_map("10.0.0.0/8"))),
            Ok(watcher::Event::InitDone),
            // A status-only or metadata-only change of the ConfigMap: same data, nothing to do.
            Ok(watcher::Event::Apply(config_map("10.0.0.0/8"))),
            Ok(watcher::Event::Apply(config_map("192.168.0.0/16"))),
            Ok(watcher::Event::Delete(config_map("192.168.0.0/16"))),
        ]);
        let (sender, mut receiver) = watch::channel(None);
        let (told, mut tells) = mpsc::unbounded();
        keep_policy(events.boxed(), sender, vec![told]).await;
        let mut count = 0;
        while let Ok(()) = tells.try_recv() {
            count += 1;
        }
        assert_eq!(count, 2, "the change and the deletion (the first read only lets reconciles start)");
        let last = receiver.borrow_and_update().clone().expect("a policy");
        assert_eq!(*last, policy_of(None), "a deleted ConfigMap leaves the defaults");
    }
}
