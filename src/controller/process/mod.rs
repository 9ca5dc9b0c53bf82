//! `cdtarget controller`: both reconcilers in one process, driven by watches, behind leader
//! election, with the webhook receiver, metrics, health endpoints and graceful shutdown.
//!
//! Wiring only, one concern per file: [`flags`] (what is read from the command line),
//! [`watches`] (the watches and which objects a change maps to), [`registrations`] (the one
//! watch of the registrations), [`lease`] (leader election), [`keda`] (is KEDA installed?),
//! [`shutdown`] (signals and draining), and [`builder`], which puts both controllers together
//! for the process and for the end-to-end tests alike.

pub mod builder;
pub mod flags;
pub mod keda;
pub mod lease;
pub mod registrations;
pub mod shutdown;
pub mod sync_statuses;
pub(crate) mod vanished;
pub mod watches;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Client;
use tokio::sync::watch;
use tracing::info;

use crate::gitlab;
use crate::source::{self, Fetcher};
use crate::telemetry::{self, State};
use crate::webhook;

pub(crate) use crate::apply::keda::discover_keda;
pub use builder::{Builder, Reconciled, Running, Settings};
pub use flags::gitlab_settings;
pub(crate) use flags::{Args, shard_config, webhook_limits};
pub use registrations::Registrations;
pub(crate) use shutdown::stop_on_signal;
pub use shutdown::stopped;
pub use watches::Sources;

/// How long the start-up check waits for the API server.
pub(crate) const API_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable kubeconfig or in-cluster configuration.
    #[error("no Kubernetes configuration (in-cluster or kubeconfig): {0}")]
    Config(String),
    /// The API server did not answer the start-up check.
    #[error("the Kubernetes API server at {url} is not reachable: {reason}")]
    Unreachable {
        /// The server's URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// A flag has an unusable value.
    #[error("{0}")]
    Flag(String),
    /// The cache directory cannot be created.
    #[error("cache directory {dir}: {source}")]
    Cache {
        /// The directory.
        dir: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The health/metrics server could not start.
    #[error("serving on {address}: {source}")]
    Serve {
        /// The address.
        address: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A request of the start-up (discovery, Lease) failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done.
        what: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Leader election failed or the lease was lost; the process exits so that it restarts
    /// clean.
    #[error("leader election: {0}")]
    Lease(String),
}

/// Runs `cdtarget controller` and maps the outcome to an exit code.
pub fn main(args: Args) -> ExitCode {
    // kube, reqwest and jsonschema must agree on one rustls provider (see dependencies.md).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    if let Err(message) = telemetry::init_logging(args.log_format, &args.log_level) {
        eprintln!("cdtarget controller: {message}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cdtarget controller: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cdtarget controller: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Connects, starts the health server and the webhook receiver, then runs the reconcilers
/// (while leading).
pub async fn run(args: Args) -> Result<(), RunError> {
    let address = telemetry::parse_listen_address(&args.metrics_address).map_err(RunError::Flag)?;
    // Bad GitLab flags stop the start-up, before anything connects.
    let gitlab = gitlab_settings(&args).map_err(RunError::Flag)?;
    let webhook_address = telemetry::parse_listen_address(&args.webhook_addr)
        .map_err(|e| RunError::Flag(format!("--webhook-addr: {e}")))?;
    let client = connect(API_CHECK_TIMEOUT).await?;
    std::fs::create_dir_all(&args.cache_dir)
        .map_err(|source| RunError::Cache { dir: args.cache_dir.display().to_string(), source })?;

    let state = Arc::new(State::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(stop_on_signal(stop_tx.clone()));

    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| RunError::Serve { address: args.metrics_address.clone(), source })?;
    // The bound address, so that a port the OS picked (`:0`) can be read off the log.
    let address = listener.local_addr().unwrap_or(address);
    info!(%address, "serving /metrics, /healthz and /readyz");
    let (http_stop_tx, http_stop_rx) = watch::channel(false);
    let http = tokio::spawn(telemetry::serve(listener, state.clone(), stopped(http_stop_rx.clone())));

    // The receiver serves from the start (a follower answers 503); the index follows the
    // registrations by watch whether or not this replica leads.
    let webhook_listener = tokio::net::TcpListener::bind(webhook_address)
        .await
        .map_err(|source| RunError::Serve { address: args.webhook_addr.clone(), source })?;
    let webhook_address = webhook_listener.local_addr().unwrap_or(webhook_address);
    info!(address = %webhook_address, "serving the webhook receiver on /hook/<digest>");
    let index = Arc::new(webhook::Index::default());
    let receiver = webhook::Receiver::new(index.clone(), webhook_limits(&args), state.metrics.webhook.clone());
    let webhook_server =
        tokio::spawn(webhook::serve(webhook_listener, receiver.clone(), stopped(http_stop_rx.clone())));
    // One watch of the registrations for the life of the process: the receiver's index follows
    // it whether or not this replica leads, and the TenantRepository controller joins it when it
    // does.
    let shard = shard_config(args.shard_selector.as_deref());
    let metrics = state.clone();
    // A registration gone (deleted, or missing from a re-list) leaves no series behind.
    let events = watches::registrations(&client, &args.namespace, shard)
        .inspect(vanished::on_vanished(move |namespace, name| {
            metrics.metrics.forget_registration(&format!("{namespace}/{name}"));
            metrics.metrics.forget_object("TenantRepository", namespace, name);
        }))
        .boxed();
    let (registrations, registrations_watch) = Registrations::new(events, |_| {});
    let registrations_watch = tokio::spawn(registrations_watch);
    let keeper = tokio::spawn(keep_receiver_index(
        client.clone(),
        index,
        &registrations,
        watches::secret_names(&client, &args.namespace),
        stopped(http_stop_rx),
    ));

    let lease = args.leader_elect.then(|| lease::Lease {
        namespace: args.namespace.clone(),
        lease_name: args.lease_name.clone(),
        identity: args.identity.clone().or_else(lease::host_name).unwrap_or_else(|| "cdtarget".into()),
    });
    let result = lease::while_leading(lease, client.clone(), state.clone(), stop_tx, stop_rx, |stop| {
        reconcile_until_stopped(&args, client, gitlab, state.clone(), receiver.clone(), registrations, stop)
    })
    .await;
    state.set_ready(false);
    let _ = http_stop_tx.send(true);
    let _ = http.await;
    let _ = webhook_server.await;
    let _ = keeper.await;
    registrations_watch.abort();
    result
}

/// Builds a client from the environment and checks, briefly, that the API server answers.
pub async fn connect(timeout: Duration) -> Result<Client, RunError> {
    let config = kube::Config::infer().await.map_err(|e| RunError::Config(e.to_string()))?;
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config)
        .map_err(|e| RunError::Unreachable { url: url.clone(), reason: format!("building the client: {e}") })?;
    match tokio::time::timeout(timeout, client.apiserver_version()).await {
        Err(_) => Err(RunError::Unreachable { url, reason: format!("no answer within {}s", timeout.as_secs()) }),
        Ok(Err(e)) => Err(RunError::Unreachable { url, reason: e.to_string() }),
        Ok(Ok(version)) => {
            info!(%url, version = %version.git_version, "connected to the API server");
            Ok(client)
        }
    }
}

/// Keeps the receiver's `index` in step with `registrations` and the Secrets named by
/// `secret_names` (changes in the platform namespace) until `stop` completes.
pub fn keep_receiver_index(
    client: Client,
    index: Arc<webhook::Index>,
    registrations: &Registrations,
    secret_names: impl Stream<Item = Result<String, kube::runtime::watcher::Error>> + Send + 'static,
    stop: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let events = registrations.subscribe().map(Ok);
    webhook::keep_index_on_streams(client, index, events, secret_names, stop)
}

/// Builds both controllers with the production watches and runs them until `stop` is set; the
/// webhook `receiver` triggers the TenantRepository controller meanwhile.
async fn reconcile_until_stopped(
    args: &Args,
    client: Client,
    gitlab: Option<gitlab::Settings>,
    state: Arc<State>,
    receiver: Arc<webhook::Receiver>,
    registrations: Registrations,
    stop: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let keda = discover_keda(&client).await.map_err(|source| RunError::Kube { what: "discovering KEDA", source })?;
    match keda.version {
        _ if !keda.installed => {
            info!("KEDA (keda.sh/v1alpha1 ScaledObject, ScaledJob) is not installed: agents run as plain Deployments")
        }
        Some(version) => info!(%version, "KEDA is installed (release from the schema of its CRDs)"),
        None => {}
    }
    let git_timeout = args.git_timeout;
    source::set_io_timeout(git_timeout);
    let limits = source::Limits {
        timeout: git_timeout,
        max_fetch_bytes: args.git_max_fetch_bytes,
        max_tree_bytes: args.git_max_snapshot_bytes,
        max_cache_bytes: args.git_max_cache_bytes,
        ..source::Limits::default()
    };
    let fetch_metrics = state.clone();
    let fetcher = Fetcher::new(&args.cache_dir, limits, args.fetch_concurrency)
        .with_observer(Arc::new(move |result, duration| fetch_metrics.metrics.observe_fetch(result, duration)));

    let instance = args.identity.clone().or_else(lease::host_name);
    let recorder = crate::controller::events::EventSink::new(
        client.clone(),
        kube::runtime::events::Reporter { controller: "cdtarget".into(), instance },
    );
    let settings = Settings {
        namespace: args.namespace.clone(),
        policy_name: args.policy_configmap.clone(),
        reconcile_concurrency: args.reconcile_concurrency,
        keda: keda.installed,
        keda_version: keda.version,
        recheck_keda: true,
        default_tenant_service_account: args.default_tenant_service_account.clone(),
        cdtarget_resync: args.cdtarget_resync_interval,
        manifest_limits: crate::manifests::Limits {
            budget: crate::budget::Limits {
                bytes: args.revision_max_object_bytes,
                objects: args.revision_max_objects,
                deadline: args.revision_load_timeout,
                ..crate::budget::Limits::default()
            },
            ..crate::manifests::Limits::default()
        },
        load_concurrency: args.load_concurrency,
    };
    let shard = shard_config(args.shard_selector.as_deref());
    let sources = Sources::watches(&client, &args.namespace, &args.policy_configmap, shard, keda.installed);
    let running = Builder::new(client, settings, fetcher, registrations, sources)
        .with_gitlab(gitlab)
        .with_recorder(recorder)
        .with_state(state.clone())
        .with_receiver(receiver)
        .start(stop);
    state.set_ready(true);
    info!("reconcilers running");
    running.drain().await;
    info!("reconcilers stopped");
    Ok(())
}
