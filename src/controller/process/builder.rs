//! The one way both controllers are put together: their contexts, the shared inputs (one policy
//! parsed per change, one reflector of registrations, the KEDA flag), the watches that trigger
//! them, and the reconcile wrappers that time, count and log every reconcile. `cdtarget
//! controller` starts them with the production watches; the end-to-end tests start them with
//! the same [`Builder`] and streams of their own ([`Sources::given`]).

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc;
use futures::stream::BoxStream;
use kube::Client;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use super::keda::recheck_keda;
use super::registrations::Registrations;
use super::shutdown::{drain, shutdown_future};
use super::watches::{
    Sources, Touched, cdtargets_referencing_secret, keep_policy, reconcile_worthy, registrations_referencing_secret,
};
use crate::api::{CDTarget, TenantRepository};
use crate::apply::Writer;
use crate::controller::cdtarget::echoes::Echoes;
use crate::controller::events::EventSink;
use crate::controller::frame::Framed;
use crate::controller::inputs::{Keda, KedaSeen, PolicySource};
use crate::controller::{cdtarget, tenant_repository};
use crate::gitlab;
use crate::render::ChildKind;
use crate::source::Fetcher;
use crate::telemetry::State;
use crate::webhook;

/// What a controller yields per reconcile.
pub type Reconciled<K, E> = Result<(ObjectRef<K>, Action), controller::Error<E, watcher::Error>>;

/// The settings both controllers are built with.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The platform namespace: registrations, the policy ConfigMap.
    pub namespace: String,
    /// Name of the policy ConfigMap.
    pub policy_name: String,
    /// Most reconciles running at once, per kind (0: unbounded).
    pub reconcile_concurrency: u16,
    /// Whether KEDA was installed at start-up.
    pub keda: bool,
    /// KEDA's release as discovered at start-up (`None`: not known).
    pub keda_version: Option<crate::api::keda::KedaVersion>,
    /// Ask discovery every [`super::keda::KEDA_RECHECK`] whether KEDA came or went.
    pub recheck_keda: bool,
    /// `--default-tenant-service-account`.
    pub default_tenant_service_account: Option<String>,
    /// `--cdtarget-resync-interval`: when a CDTarget whose children are in place is checked again.
    pub cdtarget_resync: std::time::Duration,
    /// Bounds on a repository's YAML and the budget of one revision's load (`--revision-*`).
    pub manifest_limits: crate::manifests::Limits,
    /// `--load-concurrency`: revisions loaded at once.
    pub load_concurrency: usize,
}

impl Settings {
    /// Settings for the platform namespace `namespace` and policy ConfigMap `policy_name`:
    /// reconcile concurrency 8, KEDA installed and not re-checked, no default tenant, CDTargets
    /// resynced every [`cdtarget::RESYNC`].
    pub fn new(namespace: &str, policy_name: &str) -> Self {
        Settings {
            namespace: namespace.to_owned(),
            policy_name: policy_name.to_owned(),
            reconcile_concurrency: 8,
            keda: true,
            keda_version: None,
            recheck_keda: false,
            default_tenant_service_account: None,
            cdtarget_resync: cdtarget::RESYNC,
            manifest_limits: crate::manifests::Limits::default(),
            load_concurrency: tenant_repository::load::DEFAULT_LOAD_CONCURRENCY,
        }
    }
}

/// Builds both controllers (see the module documentation).
pub struct Builder {
    client: Client,
    settings: Settings,
    fetcher: Fetcher,
    registrations: Registrations,
    sources: Sources,
    gitlab: Option<gitlab::Settings>,
    writer: Option<Writer>,
    recorder: Option<EventSink>,
    state: Arc<State>,
    receiver: Option<Arc<webhook::Receiver>>,
}

impl Builder {
    /// Controllers over `client`, fed by `registrations` and `sources`, fetching through
    /// `fetcher`.
    pub fn new(
        client: Client,
        settings: Settings,
        fetcher: Fetcher,
        registrations: Registrations,
        sources: Sources,
    ) -> Self {
        Builder {
            client,
            settings,
            fetcher,
            registrations,
            sources,
            gitlab: None,
            writer: None,
            recorder: None,
            state: Arc::new(State::default()),
            receiver: None,
        }
    }

    /// Manages GitLab deploy keys and webhooks through `settings` (`None`: not configured).
    pub fn with_gitlab(mut self, settings: Option<gitlab::Settings>) -> Self {
        self.gitlab = settings;
        self
    }

    /// Sends every write through `writer` (its observer is replaced by the metrics).
    pub fn with_writer(mut self, writer: Writer) -> Self {
        self.writer = Some(writer);
        self
    }

    /// Records Events through `recorder`.
    pub fn with_recorder(mut self, recorder: EventSink) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Reports metrics and readiness into `state`.
    pub fn with_state(mut self, state: Arc<State>) -> Self {
        self.state = state;
        self
    }

    /// Hands the TenantRepository controller's trigger to `receiver` while the controllers run.
    pub fn with_receiver(mut self, receiver: Arc<webhook::Receiver>) -> Self {
        self.receiver = Some(receiver);
        self
    }

    /// Starts both controllers; they stop when `stop` is set. The returned streams must be
    /// polled ([`Running::drain`]) for anything to happen.
    pub fn start(self, stop: watch::Receiver<bool>) -> Running {
        let Builder { client, settings, fetcher, registrations, sources, gitlab, writer, recorder, state, receiver } =
            self;
        let mut tasks = Vec::new();

        let metrics = state.clone();
        let writer = writer
            .unwrap_or_else(|| Writer::new(client.clone()))
            .with_observer(Arc::new(move |verb, kind| metrics.metrics.count_write(verb, kind)));
        let (policy_sender, policy) = PolicySource::shared();
        let (repo_policy_changed, repo_policy_changes) = mpsc::unbounded();
        let (target_policy_changed, target_policy_changes) = mpsc::unbounded();
        tasks.push(tokio::spawn(keep_policy(
            sources.policy,
            policy_sender,
            vec![repo_policy_changed, target_policy_changed],
        )));
        let keda = Keda::discovered(KedaSeen { installed: settings.keda, version: settings.keda_version });
        let (keda_changed, keda_changes) = mpsc::unbounded();
        if settings.recheck_keda {
            tasks.push(tokio::spawn(recheck_keda(client.clone(), keda.clone(), keda_changed)));
        }

        let mut repo_ctx =
            tenant_repository::Context::new(client.clone(), fetcher, &settings.namespace, &settings.policy_name)
                .with_policy(policy.clone())
                .with_writer(writer.clone())
                .with_manifest_limits(settings.manifest_limits);
        repo_ctx.loader = tenant_repository::load::Loader::new(settings.load_concurrency);
        let child_watched = |kind: ChildKind| sources.children.iter().any(|child| child.kind == kind);
        let mut target_ctx = cdtarget::Context::new(client.clone(), &settings.namespace, &settings.policy_name)
            .with_policy(policy)
            .with_writer(writer)
            .with_keda(keda)
            .with_agent_watches(cdtarget::AgentWatches {
                deployments: sources.children_watched && child_watched(ChildKind::Deployment),
                scaled_objects: sources.children_watched && child_watched(ChildKind::ScaledObject),
            })
            .with_tenants(cdtarget::Tenants::new(settings.default_tenant_service_account.clone()))
            .with_resync(settings.cdtarget_resync);
        if let Some(settings) = gitlab {
            let gitlab_metrics = state.clone();
            settings.client.observe_requests(Arc::new(move |method, result| {
                let result = result.map_or_else(|kind| kind.reason(), |()| "success");
                gitlab_metrics.metrics.count_gitlab_request(method, result)
            }));
            repo_ctx = repo_ctx.with_gitlab(settings);
        } else {
            info!("no --gitlab-url: registrations with spec.gitlab report GitLabSynced=False (GitLabNotConfigured)");
        }
        if let Some(recorder) = recorder {
            repo_ctx = repo_ctx.with_recorder(recorder.clone());
            target_ctx = target_ctx.with_recorder(recorder);
        }
        // SyncStatuses: one watch, read by the reconciler and kept clean of stale ones.
        if let Some(events) = sources.sync_statuses {
            let (statuses, reflected) = reflector::store();
            tasks.push(tokio::spawn(super::sync_statuses::keep_clean(
                events,
                reflected,
                registrations.subscribe().boxed(),
                registrations.store(),
                repo_ctx.frame.writer.clone(),
                settings.namespace.clone(),
            )));
            repo_ctx = repo_ctx.with_sync_statuses(tenant_repository::SyncStatuses::new(statuses));
        }
        let apply_metrics = state.clone();
        let readiness_metrics = state.clone();
        let readiness: crate::telemetry::ReadinessObserver =
            Arc::new(move |sample| readiness_metrics.metrics.set_readiness(sample));
        let repo_ctx = Arc::new(
            repo_ctx
                .with_observer(Arc::new(move |report: &tenant_repository::ApplyReport| {
                    apply_metrics.metrics.observe_apply(
                        &report.registration,
                        report.applied,
                        report.pruned,
                        report.managed,
                    )
                }))
                .with_readiness(readiness.clone()),
        );
        // A registration's identity changed binds the very next CDTarget reconcile.
        registrations.observe(target_ctx.tenants.follower());
        let target_ctx = Arc::new(target_ctx.with_readiness(readiness));
        let config = controller::Config::default().concurrency(settings.reconcile_concurrency);

        // TenantRepositories: the one reflector of the registrations, re-read when a Secret of
        // the platform namespace or the policy changes, and when the receiver fires.
        let (trigger, triggered) = webhook::Trigger::new();
        let store = registrations.store();
        let applied = repo_ctx.applied.clone();
        let changed = registrations
            .subscribe()
            .filter_map(move |event| {
                // A deleted registration's applied objects need no remembering.
                if let watcher::Event::Delete(repo) = &event {
                    applied.forget(&format!("{}/{}", repo.namespace().unwrap_or_default(), repo.name_any()));
                }
                futures::future::ready(match event {
                    watcher::Event::Apply(repo) | watcher::Event::InitApply(repo) => Some(Ok(repo)),
                    _ => None,
                })
            })
            .predicate_filter(reconcile_worthy, PredicateConfig::default());
        let secrets_store = store.clone();
        let repositories = Controller::for_stream(changed, store)
            .with_config(config.clone())
            .trigger_backoff(EachWatchBacksOff)
            .watches_stream(sources.platform_secrets, move |secret| {
                let namespace = secret.namespace().unwrap_or_default();
                registrations_referencing_secret(&namespace, &secret.name_any(), secrets_store.state())
            })
            .reconcile_all_on(repo_policy_changes)
            .reconcile_on(triggered)
            .graceful_shutdown_on(shutdown_future(stop.clone()));

        // CDTargets: their own reflector, their children, the Secrets they reference, the policy
        // and KEDA coming or going.
        let (target_store, target_writer) = reflector::store();
        let gone_metrics = state.clone();
        let targets = sources
            .targets
            .inspect(super::vanished::on_vanished(move |namespace, name| {
                gone_metrics.metrics.forget_object("CDTarget", namespace, name)
            }))
            .modify(|target| target.managed_fields_mut().clear())
            .reflect(target_writer)
            .applied_objects()
            .predicate_filter(reconcile_worthy, PredicateConfig::default());
        let secrets_store = target_store.clone();
        let echoes = &target_ctx.echoes;
        let mut targets =
            Controller::for_stream(targets, target_store).with_config(config).trigger_backoff(EachWatchBacksOff);
        for child in sources.children {
            targets =
                targets.owns_stream_with(without_echoes(child.kind, child.objects, echoes), child.kind.resource());
        }
        let targets = targets
            .watches_stream(sources.secrets, move |secret| {
                let namespace = secret.namespace().unwrap_or_default();
                cdtargets_referencing_secret(&namespace, &secret.name_any(), secrets_store.state())
            })
            .reconcile_all_on(futures::stream::select(target_policy_changes, keda_changes))
            .graceful_shutdown_on(shutdown_future(stop));

        let repo_metrics = state.clone();
        let repositories = repositories
            .run(
                move |repo, ctx| {
                    let state = repo_metrics.clone();
                    async move {
                        let _timer = state.metrics.time_reconcile(TenantRepository::kind(&()).as_ref());
                        let result = tenant_repository::reconcile(repo, ctx).await;
                        let label = result.as_ref().map_or_else(tenant_repository::Error::metric_label, |_| "success");
                        state.metrics.count_reconcile("TenantRepository", label);
                        result
                    }
                },
                tenant_repository::error_policy,
                repo_ctx,
            )
            .boxed();
        let target_metrics = state.clone();
        let targets = targets
            .run(
                move |target, ctx| {
                    let state = target_metrics.clone();
                    async move {
                        let _timer = state.metrics.time_reconcile("CDTarget");
                        let result = cdtarget::reconcile(target, ctx).await;
                        let label = result.as_ref().map_or_else(cdtarget::Error::metric_label, |_| "success");
                        state.metrics.count_reconcile("CDTarget", label);
                        result
                    }
                },
                cdtarget::error_policy,
                target_ctx,
            )
            .boxed();
        if let Some(receiver) = &receiver {
            receiver.set_trigger(Some(Arc::new(trigger.clone())));
        }
        Running { repositories, targets, trigger, tasks, receiver }
    }
}

/// The events of the children of `kind` but the echoes of the controller's own writes
/// ([`Echoes`]).
fn without_echoes(
    kind: ChildKind,
    children: Touched<PartialObjectMeta<DynamicObject>>,
    echoes: &Echoes,
) -> Touched<PartialObjectMeta<DynamicObject>> {
    let echoes = echoes.clone();
    children
        .filter(move |child| {
            let echo = child.as_ref().is_ok_and(|child| {
                let namespace = child.metadata.namespace.as_deref().unwrap_or_default();
                let name = child.metadata.name.as_deref().unwrap_or_default();
                echoes.is_echo(kind.kind(), namespace, name, child.metadata.resource_version.as_deref())
            });
            futures::future::ready(!echo)
        })
        .boxed()
}

/// The back-off of a controller's triggers taken together: none, since every watch backs off on
/// its own ([`super::watches::watched`]). kube-runtime's default pauses all the watches of a
/// controller after an error of any one of them (800 ms, doubling up to 30 s, reset after two
/// quiet minutes): when kube-apiserver restarted, the six watches of the CDTarget controller
/// failed together and its healthy triggers were paused for a minute.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EachWatchBacksOff;

impl Iterator for EachWatchBacksOff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        // `None` would end the triggers for good.
        Some(std::time::Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for EachWatchBacksOff {
    fn reset(&mut self) {}
}

/// Both controllers, started.
pub struct Running {
    /// One item per finished TenantRepository reconcile.
    pub repositories: BoxStream<'static, Reconciled<TenantRepository, tenant_repository::Error>>,
    /// One item per finished CDTarget reconcile.
    pub targets: BoxStream<'static, Reconciled<CDTarget, cdtarget::Error>>,
    trigger: webhook::Trigger,
    tasks: Vec<JoinHandle<()>>,
    receiver: Option<Arc<webhook::Receiver>>,
}

impl Running {
    /// Runs both controllers until they stop, logging what they yield.
    pub async fn drain(mut self) {
        let (repositories, targets) = self.take_streams();
        tokio::join!(drain("TenantRepository", repositories), drain("CDTarget", targets));
    }

    /// Both controllers' streams, for a caller that polls them itself (they run only while
    /// polled, and their shared inputs only while `self` lives).
    #[allow(clippy::type_complexity)]
    pub fn take_streams(
        &mut self,
    ) -> (
        BoxStream<'static, Reconciled<TenantRepository, tenant_repository::Error>>,
        BoxStream<'static, Reconciled<CDTarget, cdtarget::Error>>,
    ) {
        (
            std::mem::replace(&mut self.repositories, futures::stream::empty().boxed()),
            std::mem::replace(&mut self.targets, futures::stream::empty().boxed()),
        )
    }

    /// The TenantRepository controller's trigger (the receiver's path in).
    pub fn trigger(&self) -> webhook::Trigger {
        self.trigger.clone()
    }
}

impl Drop for Running {
    /// The shared-input tasks end with the controllers, and the receiver stops firing.
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Some(receiver) = &self.receiver {
            receiver.set_trigger(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    #[tokio::test]
    async fn the_echo_of_a_child_the_controller_wrote_triggers_nothing_and_later_changes_do() {
        let child = |version: &str| {
            let metadata = ObjectMeta {
                name: Some("agents".into()),
                namespace: Some("team-a".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            };
            Ok(PartialObjectMeta::<DynamicObject> { types: None, metadata, _phantom: std::marker::PhantomData })
        };
        let echoes = Echoes::default();
        echoes.wrote("Deployment", "team-a", "agents", "41".into());
        // The echo of the write, the Deployment controller's status write, someone's edit.
        let events = futures::stream::iter([child("41"), child("42"), child("43")]).boxed();
        let versions: Vec<String> = without_echoes(ChildKind::Deployment, events, &echoes)
            .map(|child| child.unwrap().metadata.resource_version.unwrap())
            .collect()
            .await;
        assert_eq!(versions, ["42", "43"]);
    }

    #[tokio::test]
    async fn failed_watches_do_not_pause_the_other_triggers_of_their_controller() {
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let map = ConfigMap {
            metadata: ObjectMeta { name: Some("a".into()), namespace: Some("team-a".into()), ..ObjectMeta::default() },
            ..ConfigMap::default()
        };
        for event in [watcher::Event::Init, watcher::Event::InitApply(map.clone()), watcher::Event::InitDone] {
            writer.apply_watcher_event(&event);
        }
        // Six watches cut at once, as when kube-apiserver restarts, then a change another one saw.
        let cut = || {
            let cut = std::io::Error::other("error reading a body from connection");
            Err(watcher::Error::WatchFailed(kube::Error::ReadEvents(cut)))
        };
        let mut triggers: Vec<Result<ConfigMap, watcher::Error>> = (0..6).map(|_| cut()).collect();
        triggers.push(Ok(map));
        let triggers = futures::stream::iter(triggers).chain(futures::stream::pending());
        let mut reconciled = Controller::for_stream(triggers, reader)
            .trigger_backoff(EachWatchBacksOff)
            .run(
                |_, _| async { Ok::<_, std::io::Error>(Action::await_change()) },
                |_, _, _| Action::await_change(),
                Arc::new(()),
            )
            .filter_map(|result| async move { result.ok() })
            .boxed();
        // At once; kube-runtime's default back-off sleeps after each error first (800 ms, then
        // doubling), which does not fit in this bound.
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(10), reconciled.next()).await;
        assert!(matches!(outcome, Ok(Some(_))), "the change was not reconciled: {outcome:?}");
    }
}
