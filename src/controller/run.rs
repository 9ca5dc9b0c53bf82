//! `cdtarget controller`: both reconcilers in one process, driven by watches, behind leader
//! election, with the webhook receiver, metrics, health endpoints and graceful shutdown.
//!
//! Wiring only: the decisions live in [`super::cdtarget`] and [`super::tenant_repository`]; the
//! one pure mapping here ([`cdtargets_referencing_secret`]) is tested on its own.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{PredicateConfig, WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::keda::{ScaledObject, TriggerAuthentication};
use crate::api::labels;
use crate::api::{CDTarget, TenantRepository};
use crate::controller::{cdtarget, tenant_repository};
use crate::gitlab;
use crate::source::error::redact_userinfo;
use crate::source::{self, Fetcher};
use crate::telemetry::{self, LogFormat, State};
use crate::webhook;

/// How long the start-up check waits for the API server.
pub const API_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags of `cdtarget controller`; every flag has an environment-variable equivalent.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Namespace the controller runs in (the platform namespace): it holds the TenantRepositories
    /// (registrations elsewhere are ignored), the policy ConfigMap and the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "cdtarget-system")]
    pub namespace: String,
    /// Name of the platform policy ConfigMap in the controller's namespace (key `policy.yaml`).
    /// When it does not exist the documented defaults apply; a change re-renders every CDTarget.
    #[arg(long, env = "CDTARGET_POLICY_CONFIGMAP", default_value = "cdtarget-policy", value_name = "NAME")]
    pub policy_configmap: String,
    /// Directory caching the tenants' repositories (one bare repository and its checked-out
    /// snapshots per registration). Use a volume that survives restarts to keep polls cheap.
    #[arg(long, env = "CDTARGET_CACHE_DIR", default_value = "/var/cache/cdtarget", value_name = "DIR")]
    pub cache_dir: PathBuf,
    /// Most Git fetches running at once.
    #[arg(long, env = "CDTARGET_FETCH_CONCURRENCY", default_value_t = 4, value_name = "N")]
    pub fetch_concurrency: usize,
    /// Most reconciles running at once, per kind (0: unbounded).
    #[arg(long, env = "CDTARGET_RECONCILE_CONCURRENCY", default_value_t = 8, value_name = "N")]
    pub reconcile_concurrency: u16,
    /// Upper bound on one Git fetch, in seconds; a socket silent for this long is cut too.
    #[arg(long, env = "CDTARGET_GIT_TIMEOUT", default_value_t = 60, value_name = "SECONDS")]
    pub git_timeout: u64,
    /// Most bytes one Git fetch may receive (the pack); more stalls the registration with
    /// `TooLarge`.
    #[arg(long, env = "CDTARGET_GIT_MAX_FETCH_BYTES", default_value_t = source::Limits::default().max_fetch_bytes, value_name = "BYTES")]
    pub git_max_fetch_bytes: u64,
    /// Most bytes of a checked-out tree (all files); more stalls the registration with
    /// `SnapshotTooLarge`.
    #[arg(long, env = "CDTARGET_GIT_MAX_SNAPSHOT_BYTES", default_value_t = source::Limits::default().max_tree_bytes, value_name = "BYTES")]
    pub git_max_snapshot_bytes: u64,
    /// Disk budget of one registration's cache (repository, running snapshot and the one being
    /// written); more stalls it with `CacheTooLarge`. Keep it at least fetch + 2 × snapshot.
    #[arg(long, env = "CDTARGET_GIT_MAX_CACHE_BYTES", default_value_t = source::Limits::default().max_cache_bytes, value_name = "BYTES")]
    pub git_max_cache_bytes: u64,
    /// Label selector for sharding: only TenantRepositories and CDTargets matching it are
    /// reconciled by this replica (e.g. `cdtarget.io/shard=a`). Give each shard its own
    /// `--lease-name`.
    #[arg(long, env = "CDTARGET_SHARD_SELECTOR", value_name = "SELECTOR")]
    pub shard_selector: Option<String>,
    /// Elect a leader on a coordination.k8s.io Lease so that only one replica reconciles;
    /// `--leader-elect=false` for a single replica or local runs.
    #[arg(long, env = "CDTARGET_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease in the controller's namespace.
    #[arg(long, env = "CDTARGET_LEASE_NAME", default_value = "cdtarget-controller", value_name = "NAME")]
    pub lease_name: String,
    /// This replica's identity in the Lease (the pod name; the host name when unset).
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub identity: Option<String>,
    /// Listen address of `/metrics`, `/healthz` and `/readyz` (`:8080` is every interface).
    #[arg(long, env = "CDTARGET_METRICS_ADDRESS", default_value = ":8080", value_name = "ADDRESS")]
    pub metrics_address: String,
    /// Listen address of the webhook receiver (`POST /hook/<digest>`; `:9292` is every
    /// interface).
    #[arg(long, env = "CDTARGET_WEBHOOK_ADDR", default_value = ":9292", value_name = "ADDRESS")]
    pub webhook_addr: String,
    /// Webhook body reads per second from everyone together (twice as many in a burst): requests
    /// that found their registration and passed the header checks; more are answered 429. 0
    /// disables the limit.
    #[arg(long, env = "CDTARGET_WEBHOOK_GLOBAL_RATE", default_value_t = 100, value_name = "PER_SECOND")]
    pub webhook_global_rate: u32,
    /// Verified webhook deliveries per minute accepted for one registration (20 in a burst);
    /// more are answered 429. 0 disables the limit.
    #[arg(long, env = "CDTARGET_WEBHOOK_REGISTRATION_RATE", default_value_t = 60, value_name = "PER_MINUTE")]
    pub webhook_registration_rate: u32,
    /// Webhook body reads per second for one registration, verified or not (ten times as many in
    /// a burst); taken before the global limit. 0 disables the limit.
    #[arg(long, env = "CDTARGET_WEBHOOK_REGISTRATION_READ_RATE", default_value_t = 5, value_name = "PER_SECOND")]
    pub webhook_registration_read_rate: u32,
    /// MiB that webhook bodies being read may hold at once (a quarter of it per registration,
    /// at least one body of 3 MiB); more are answered 503 unread.
    #[arg(long, env = "CDTARGET_WEBHOOK_IN_FLIGHT_MIB", default_value_t = 32, value_name = "MIB",
          value_parser = clap::value_parser!(u32).range(3..))]
    pub webhook_in_flight_mib: u32,
    /// ServiceAccount (in each tenant namespace) whose read rights bound the Secrets and
    /// ConfigMaps a CDTarget may hand its agents in a namespace no TenantRepository applies into.
    /// Unset: there, only ServiceAccount-token Secrets are refused.
    #[arg(long, env = "CDTARGET_DEFAULT_TENANT_SERVICE_ACCOUNT", value_name = "NAME")]
    pub default_tenant_service_account: Option<String>,
    /// Log format.
    #[arg(long, env = "CDTARGET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level or filter (`info`, `debug`, `info,kube=warn`, ...).
    #[arg(long, env = "CDTARGET_LOG_LEVEL", default_value = "info", value_name = "FILTER")]
    pub log_level: String,
    /// GitLab base URL (e.g. `https://gitlab.example.com`): registrations with `spec.gitlab` get
    /// their deploy key and webhook managed. Needs the three flags below.
    #[arg(long, env = "CDTARGET_GITLAB_URL", value_name = "URL")]
    pub gitlab_url: Option<String>,
    /// File holding the GitLab bot token (scope `api`, Maintainer), e.g. a mounted Secret.
    #[arg(long, env = "CDTARGET_GITLAB_TOKEN_FILE", value_name = "FILE")]
    pub gitlab_token_file: Option<PathBuf>,
    /// File holding the `known_hosts` lines of the GitLab SSH server, written into generated
    /// key pair Secrets (no trust on first use).
    #[arg(long, env = "CDTARGET_GITLAB_KNOWN_HOSTS_FILE", value_name = "FILE")]
    pub gitlab_known_hosts_file: Option<PathBuf>,
    /// The receiver's URL as GitLab reaches it (e.g. `https://cd.example.com`); webhooks point
    /// at this URL + `/hook/<digest>`.
    #[arg(long, env = "CDTARGET_WEBHOOK_EXTERNAL_URL", value_name = "URL")]
    pub webhook_external_url: Option<String>,
}

/// The GitLab settings from the flags: `None` without `--gitlab-url`; every companion flag is
/// then required, and the files must be readable (the token never appears in an error).
pub fn gitlab_settings(args: &Args) -> Result<Option<tenant_repository::GitLabSettings>, String> {
    let Some(url) = args.gitlab_url.as_deref().filter(|u| !u.trim().is_empty()) else {
        let given = [
            ("--gitlab-token-file", args.gitlab_token_file.is_some()),
            ("--gitlab-known-hosts-file", args.gitlab_known_hosts_file.is_some()),
            ("--webhook-external-url", args.webhook_external_url.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
            return Err(format!("{flag} is set but --gitlab-url is not"));
        }
        return Ok(None);
    };
    let missing = |flag: &str| format!("--gitlab-url is set: {flag} is required too");
    let token_file = args.gitlab_token_file.as_deref().ok_or_else(|| missing("--gitlab-token-file"))?;
    let known_hosts_file =
        args.gitlab_known_hosts_file.as_deref().ok_or_else(|| missing("--gitlab-known-hosts-file"))?;
    let external = args.webhook_external_url.as_deref().ok_or_else(|| missing("--webhook-external-url"))?;
    gitlab::receiver_url(external, "/").map_err(|e| e.to_string())?;
    let token =
        gitlab::Secret::from_file(token_file, "the GitLab token").map_err(|e| format!("--gitlab-token-file: {e}"))?;
    let known_hosts = std::fs::read_to_string(known_hosts_file)
        .map_err(|e| format!("--gitlab-known-hosts-file {}: {e}", known_hosts_file.display()))?;
    if known_hosts.trim().is_empty() {
        return Err(format!(
            "--gitlab-known-hosts-file {} is empty; put the GitLab SSH host keys in it (ssh-keyscan)",
            known_hosts_file.display()
        ));
    }
    let client =
        gitlab::GitLabClient::new(gitlab::ClientConfig::new(url, token)).map_err(|e| format!("--gitlab-url: {e}"))?;
    Ok(Some(tenant_repository::GitLabSettings {
        client,
        webhook_external_url: external.trim().to_owned(),
        known_hosts,
    }))
}

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
    info!(%address, "serving /metrics, /healthz and /readyz");
    let (http_stop_tx, http_stop_rx) = watch::channel(false);
    let http = tokio::spawn(telemetry::serve(listener, state.clone(), stopped(http_stop_rx.clone())));

    // The receiver serves from the start (a follower answers 503); the index follows the
    // registrations by watch whether or not this replica leads.
    let webhook_listener = tokio::net::TcpListener::bind(webhook_address)
        .await
        .map_err(|source| RunError::Serve { address: args.webhook_addr.clone(), source })?;
    info!(address = %webhook_address, "serving the webhook receiver on /hook/<digest>");
    let index = Arc::new(webhook::Index::default());
    let receiver = webhook::Receiver::new(index.clone(), webhook_limits(&args), state.metrics.webhook.clone());
    let webhook_server =
        tokio::spawn(webhook::serve(webhook_listener, receiver.clone(), stopped(http_stop_rx.clone())));
    let shard = shard_config(args.shard_selector.as_deref());
    let keeper = tokio::spawn({
        let (client, namespace) = (client.clone(), args.namespace.clone());
        async move { webhook::keep_index(client, &namespace, shard, index, stopped(http_stop_rx)).await }
    });

    let result = lead_and_reconcile(&args, client, gitlab, state.clone(), &receiver, stop_tx, stop_rx).await;
    state.set_ready(false);
    let _ = http_stop_tx.send(true);
    let _ = http.await;
    let _ = webhook_server.await;
    let _ = keeper.await;
    result
}

/// The receiver's limits from the flags (the rest are the defaults).
fn webhook_limits(args: &Args) -> webhook::Limits {
    let global = args.webhook_global_rate;
    let registration = args.webhook_registration_rate;
    let reads = args.webhook_registration_read_rate;
    let defaults = webhook::Limits::default();
    let in_flight = args.webhook_in_flight_mib as usize * 1024 * 1024;
    webhook::Limits {
        global_rate: (global > 0).then(|| webhook::Rate::new(f64::from(global), global.saturating_mul(2))),
        registration_rate: (registration > 0).then(|| webhook::Rate::new(f64::from(registration) / 60.0, 20)),
        registration_read_rate: (reads > 0).then(|| webhook::Rate::new(f64::from(reads), reads.saturating_mul(10))),
        in_flight_bytes: in_flight,
        registration_in_flight_bytes: (in_flight / 4).max(defaults.max_body_bytes),
        ..defaults
    }
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

/// Sets `stop` on SIGTERM or SIGINT.
async fn stop_on_signal(stop: watch::Sender<bool>) {
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
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// A shareable (`Sync`) future completing once `stop` is set, for `graceful_shutdown_on`.
fn shutdown_future(stop: watch::Receiver<bool>) -> impl Future<Output = ()> + Send + Sync + 'static {
    stopped(stop).boxed().shared()
}

/// Without leader election: runs the reconcilers until stopped. With it: waits for the lease,
/// runs the reconcilers while holding it, and returns an error when it is lost (a restart is
/// the clean way to drop every cache and in-flight reconcile).
async fn lead_and_reconcile(
    args: &Args,
    client: Client,
    gitlab: Option<tenant_repository::GitLabSettings>,
    state: Arc<State>,
    receiver: &webhook::Receiver,
    stop_tx: watch::Sender<bool>,
    stop_rx: watch::Receiver<bool>,
) -> Result<(), RunError> {
    if !args.leader_elect {
        state.set_leader(true);
        return reconcile_until_stopped(args, client, gitlab, state, receiver, stop_rx).await;
    }
    let identity = args.identity.clone().or_else(host_name).unwrap_or_else(|| "cdtarget".into());
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&args.namespace)
        .with_identity(&identity)
        .with_field_manager(crate::api::FIELD_MANAGER)
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
    let result = reconcile_until_stopped(args, client, gitlab, state.clone(), receiver, stop_rx).await;
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

fn host_name() -> Option<String> {
    std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty())
}

/// Runs both controllers until `stop` is set; the webhook `receiver` triggers the
/// TenantRepository controller meanwhile.
async fn reconcile_until_stopped(
    args: &Args,
    client: Client,
    gitlab: Option<tenant_repository::GitLabSettings>,
    state: Arc<State>,
    receiver: &webhook::Receiver,
    stop: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let keda = keda_installed(&client).await.map_err(|source| RunError::Kube { what: "discovering KEDA", source })?;
    if !keda {
        info!("KEDA (keda.sh/v1alpha1 ScaledObject) is not installed: agents run as plain Deployments");
    }
    let git_timeout = Duration::from_secs(args.git_timeout.max(1));
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

    let apply_metrics = state.clone();
    let instance = args.identity.clone().or_else(host_name);
    let recorder = kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter { controller: "cdtarget".into(), instance },
    );
    let mut repo_ctx =
        tenant_repository::Context::new(client.clone(), fetcher, &args.namespace, &args.policy_configmap);
    match gitlab {
        Some(settings) => repo_ctx = repo_ctx.with_gitlab(settings),
        None => {
            info!("no --gitlab-url: registrations with spec.gitlab report GitLabSynced=False (GitLabNotConfigured)")
        }
    }
    let repo_ctx = Arc::new(repo_ctx.with_recorder(recorder.clone()).with_observer(Arc::new(
        move |report: &tenant_repository::ApplyReport| {
            apply_metrics.metrics.observe_apply(&report.registration, report.applied, report.pruned, report.managed)
        },
    )));
    let keda_flag = cdtarget::Keda::new(keda);
    let target_ctx = Arc::new(cdtarget::Context {
        client: client.clone(),
        policy_namespace: args.namespace.clone(),
        policy_name: args.policy_configmap.clone(),
        keda: keda_flag.clone(),
        recorder: Some(recorder),
        tenants: cdtarget::Tenants::new(args.default_tenant_service_account.clone()),
    });
    let shard = shard_config(args.shard_selector.as_deref());
    let controller_config = controller::Config::default().concurrency(args.reconcile_concurrency);

    // The webhook receiver holds this trigger while the controllers run.
    let (trigger, triggered) = Trigger::new();
    let repositories =
        tenant_repository_controller(&client, &args.namespace, &args.policy_configmap, shard.clone(), triggered)
            .with_config(controller_config.clone())
            .graceful_shutdown_on(shutdown_future(stop.clone()));
    // KEDA installed or removed while running: every CDTarget is rendered again.
    let (keda_changed, keda_changes) = mpsc::unbounded();
    let keda_check = tokio::spawn(recheck_keda(client.clone(), keda_flag, keda_changed));
    let targets = cdtarget_controller(&client, shard, &args.namespace, &args.policy_configmap, keda)
        .reconcile_all_on(keda_changes)
        .with_config(controller_config)
        .graceful_shutdown_on(shutdown_future(stop.clone()));

    let repo_metrics = state.clone();
    let repositories = repositories.run(
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
    );
    let target_metrics = state.clone();
    let targets = targets.run(
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
    );
    state.set_ready(true);
    info!("reconcilers running");
    receiver.set_trigger(Some(Arc::new(trigger)));
    tokio::join!(drain("TenantRepository", repositories), drain("CDTarget", targets));
    keda_check.abort();
    receiver.set_trigger(None);
    info!("reconcilers stopped");
    Ok(())
}

/// Logs what a controller stream yields until it ends.
async fn drain<K, E1, E2>(
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

/// The watcher configuration of the sharded kinds.
fn shard_config(selector: Option<&str>) -> watcher::Config {
    let config = watcher::Config::default().any_semantic();
    match selector.filter(|s| !s.trim().is_empty()) {
        Some(selector) => config.labels(selector),
        None => config,
    }
}

/// How often the controller checks whether KEDA was installed or removed.
pub const KEDA_RECHECK: Duration = Duration::from_secs(5 * 60);

/// Checks for KEDA every [`KEDA_RECHECK`] and, when it appeared or went away, updates `keda`
/// and asks for every CDTarget to be reconciled. A failed check changes nothing. The owned
/// ScaledObject and TriggerAuthentication watches are set up at start-up only: after KEDA is
/// installed, drift of those children is repaired by the periodic resync until a restart.
async fn recheck_keda(client: Client, keda: cdtarget::Keda, changed: mpsc::UnboundedSender<()>) {
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
pub async fn keda_installed(client: &Client) -> Result<bool, kube::Error> {
    match client.list_api_group_resources("keda.sh/v1alpha1").await {
        Ok(list) => {
            let has = |kind: &str| list.resources.iter().any(|r| r.kind == kind);
            Ok(has("ScaledObject") && has("TriggerAuthentication"))
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

// === TenantRepository ===

/// Asks for a reconcile of one TenantRepository now (the webhook receiver's path). Cloneable;
/// triggers for the same object while one is queued are merged by the controller.
#[derive(Clone, Debug)]
pub struct Trigger {
    sender: mpsc::UnboundedSender<ObjectRef<TenantRepository>>,
}

/// The controller behind a [`Trigger`] has stopped.
#[derive(Debug, thiserror::Error)]
#[error("the TenantRepository controller is not running")]
pub struct TriggerClosed;

impl Trigger {
    /// A trigger and the stream the controller reads (`Controller::reconcile_on`).
    pub fn new() -> (Trigger, impl Stream<Item = ObjectRef<TenantRepository>> + Send + 'static) {
        let (sender, receiver) = mpsc::unbounded();
        (Trigger { sender }, receiver)
    }

    /// Queues a reconcile of `namespace/name`.
    pub fn fire(&self, namespace: &str, name: &str) -> Result<(), TriggerClosed> {
        self.sender.unbounded_send(ObjectRef::new(name).within(namespace)).map_err(|_| TriggerClosed)
    }
}

/// The TenantRepository controller: watches the (sharded) registrations in the platform
/// namespace, reconciles on every change (including the `cdtarget.io/requestedAt` annotation:
/// any change of the object is seen), on a change of a Secret a registration references (fixed
/// credentials are used at once, not at the next resync), on a change of the policy ConfigMap
/// (every registration's documents are checked again), and on `triggers`. Registrations
/// elsewhere are ignored: a registration chooses which ServiceAccount the controller
/// impersonates, so only the platform namespace may hold them.
pub fn tenant_repository_controller(
    client: &Client,
    platform_namespace: &str,
    policy_name: &str,
    shard: watcher::Config,
    triggers: impl Stream<Item = ObjectRef<TenantRepository>> + Send + 'static,
) -> Controller<TenantRepository> {
    let controller = controller_of(Api::<TenantRepository>::namespaced(client.clone(), platform_namespace), shard);
    let store = controller.store();
    // Metadata only: Secret values never enter the controller's caches.
    let secrets = Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), platform_namespace);
    let secrets = watcher(secrets, watcher::Config::default()).default_backoff().touched_objects();
    let policy = watcher::Config::default().fields(&format!("metadata.name={policy_name}"));
    let policy_maps =
        watcher(Api::<PartialObjectMeta<ConfigMap>>::namespaced(client.clone(), platform_namespace), policy)
            .default_backoff()
            .touched_objects();
    let secrets_store = store.clone();
    controller
        .watches_stream(secrets, move |secret| {
            let namespace = secret.namespace().unwrap_or_default();
            registrations_referencing_secret(&namespace, &secret.name_any(), secrets_store.state())
        })
        .watches_stream(policy_maps, move |_config_map| {
            store.state().iter().map(|repo| ObjectRef::from_obj(repo.as_ref())).collect::<Vec<_>>()
        })
        .reconcile_on(triggers)
}

/// A controller of the objects of `api` selected by `config`: its cache drops managedFields
/// (nothing reads them; they would double the cache), and an object reaches the reconciler only
/// when [`reconcile_worthy`] changes.
fn controller_of<K>(api: Api<K>, config: watcher::Config) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let objects = watcher(api, config)
        .default_backoff()
        .modify(|object| object.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects()
        .predicate_filter(reconcile_worthy, PredicateConfig::default());
    Controller::for_stream(objects, reader)
}

/// What of a watched object calls for a reconcile, hashed: its generation (the spec), its
/// annotations (`cdtarget.io/requestedAt` and other requests) and whether it is being deleted.
/// Status writes change none of these, so the reconciler's own status update does not wake it
/// again; the periodic requeue and the owned and referenced objects still do.
pub fn reconcile_worthy<K: Resource>(object: &K) -> Option<u64> {
    let meta = object.meta();
    let mut hasher = std::hash::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// The registrations that read Secret `namespace/name`: their Git credentials or their webhook
/// token.
pub fn registrations_referencing_secret(
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

// === CDTarget ===

/// The CDTarget controller: watches the (sharded) CDTargets, owns their children, and watches
/// the Secrets they reference and the policy ConfigMap. Children, Secrets and the ConfigMap are
/// watched as metadata only: Secret values never enter the controller's caches.
pub fn cdtarget_controller(
    client: &Client,
    shard: watcher::Config,
    policy_namespace: &str,
    policy_name: &str,
    keda: bool,
) -> Controller<CDTarget> {
    let controller = controller_of(Api::<CDTarget>::all(client.clone()), shard);
    let store = controller.store();
    let children = watcher::Config::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE));
    let mut controller = controller
        .owns_stream(
            watcher(Api::<PartialObjectMeta<Deployment>>::all(client.clone()), children.clone())
                .default_backoff()
                .touched_objects(),
        )
        .owns_stream(
            watcher(Api::<PartialObjectMeta<NetworkPolicy>>::all(client.clone()), children.clone())
                .default_backoff()
                .touched_objects(),
        );
    if keda {
        controller = controller
            .owns_stream(
                watcher(Api::<PartialObjectMeta<ScaledObject>>::all(client.clone()), children.clone())
                    .default_backoff()
                    .touched_objects(),
            )
            .owns_stream(
                watcher(Api::<PartialObjectMeta<TriggerAuthentication>>::all(client.clone()), children)
                    .default_backoff()
                    .touched_objects(),
            );
    }

    let secrets_store = store.clone();
    let secrets = watcher(Api::<PartialObjectMeta<Secret>>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .touched_objects();
    let policy = watcher::Config::default().fields(&format!("metadata.name={policy_name}"));
    let policy_maps =
        watcher(Api::<PartialObjectMeta<ConfigMap>>::namespaced(client.clone(), policy_namespace), policy);
    controller
        .watches_stream(secrets, move |secret| {
            let namespace = secret.namespace().unwrap_or_default();
            cdtargets_referencing_secret(&namespace, &secret.name_any(), secrets_store.state())
        })
        .watches_stream(policy_maps.default_backoff().touched_objects(), move |_config_map| {
            store.state().iter().map(|target| ObjectRef::from_obj(target.as_ref())).collect::<Vec<_>>()
        })
}

/// The CDTargets among `targets` that reference Secret `namespace/name` (token, proxy, CA,
/// image pull Secret or `env[].valueFrom.secretKeyRef`): a change of any of them may change what
/// the agents are given, or whether they may be given it.
pub fn cdtargets_referencing_secret(
    namespace: &str,
    name: &str,
    targets: impl IntoIterator<Item = Arc<CDTarget>>,
) -> Vec<ObjectRef<CDTarget>> {
    targets
        .into_iter()
        .filter(|target| target.namespace().as_deref() == Some(namespace))
        .filter(|target| {
            crate::controller::borrowed::references(target)
                .iter()
                .any(|r| r.resource == crate::controller::borrowed::Resource::Secret && r.name == name)
        })
        .map(|target| ObjectRef::from_obj(target.as_ref()))
        .collect()
}

// === Driven by given streams ===

/// What a controller yields per reconcile (the streams of [`controllers_on_streams`]).
pub type Reconciled<K, E> = Result<(ObjectRef<K>, Action), controller::Error<E, watcher::Error>>;

/// Both controllers, with the same reconcile and error-policy functions as the production ones,
/// fed by event streams given by the caller instead of watches; they stop when `stop` is set.
/// The returned streams yield one item per reconcile and must be polled to run.
///
/// For in-process end-to-end tests against an API server that serves no watches
/// (kube-fake-client): `repositories` and `targets` carry what the TenantRepository and
/// CDTarget watches would deliver, and must begin with an initial list (`Init`, `InitApply`...,
/// `InitDone`) as a watcher's do, since a controller holds its reconciles until its store is
/// ready; `triggers` is the stream of a [`Trigger`]. The production path
/// ([`tenant_repository_controller`], [`cdtarget_controller`]) stays watch-driven.
pub fn controllers_on_streams(
    repo_ctx: Arc<tenant_repository::Context>,
    target_ctx: Arc<cdtarget::Context>,
    repositories: impl Stream<Item = Result<watcher::Event<TenantRepository>, watcher::Error>> + Send + 'static,
    triggers: impl Stream<Item = ObjectRef<TenantRepository>> + Send + 'static,
    targets: impl Stream<Item = Result<watcher::Event<CDTarget>, watcher::Error>> + Send + 'static,
    stop: watch::Receiver<bool>,
) -> (
    impl Stream<Item = Reconciled<TenantRepository, tenant_repository::Error>> + Send + 'static,
    impl Stream<Item = Reconciled<CDTarget, cdtarget::Error>> + Send + 'static,
) {
    let (repo_store, repo_writer) = kube::runtime::reflector::store();
    let repo_events = kube::runtime::reflector(repo_writer, repositories).applied_objects();
    let repositories = Controller::for_stream(repo_events, repo_store)
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown_future(stop.clone()))
        .run(tenant_repository::reconcile, tenant_repository::error_policy, repo_ctx);
    let (target_store, target_writer) = kube::runtime::reflector::store();
    let target_events = kube::runtime::reflector(target_writer, targets).applied_objects();
    let targets = Controller::for_stream(target_events, target_store).graceful_shutdown_on(shutdown_future(stop)).run(
        cdtarget::reconcile,
        cdtarget::error_policy,
        target_ctx,
    );
    (repositories, targets)
}

#[cfg(test)]
mod tests {
    use crate::api::CDTargetSpec;

    use super::*;

    fn target(namespace: &str, name: &str, token: &str, proxy: Option<&str>, ca: Option<&str>) -> Arc<CDTarget> {
        let spec = CDTargetSpec {
            token_ref: token.into(),
            proxy_ref: proxy.map(Into::into),
            ca_cert_ref: ca.map(Into::into),
            ..CDTargetSpec::default()
        };
        let mut target = CDTarget::new(name, spec);
        target.metadata.namespace = Some(namespace.into());
        Arc::new(target)
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

    fn names(refs: Vec<ObjectRef<CDTarget>>) -> Vec<String> {
        refs.iter().map(|r| format!("{}/{}", r.namespace.as_deref().unwrap_or(""), r.name)).collect()
    }

    fn registration(
        namespace: &str,
        name: &str,
        credentials: Option<&str>,
        webhook: Option<&str>,
    ) -> Arc<TenantRepository> {
        use crate::api::tenant_repository::{LocalSecretReference, TenantRepositorySpec, WebhookSpec};
        let secret = |name: &str| LocalSecretReference { name: name.into() };
        let spec = TenantRepositorySpec {
            secret_ref: credentials.map(secret),
            webhook: webhook.map(|w| WebhookSpec { secret_ref: secret(w), ..WebhookSpec::default() }),
            ..TenantRepositorySpec::default()
        };
        let mut repo = TenantRepository::new(name, spec);
        repo.metadata.namespace = Some(namespace.into());
        Arc::new(repo)
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

    #[test]
    fn webhook_rate_flags_become_buckets_and_zero_disables_them() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |extra: &[&str]| Cli::parse_from([&["cdtarget"], extra].concat()).args;
        let defaults = parse(&[]);
        assert_eq!(defaults.webhook_addr, ":9292");
        let limits = webhook_limits(&defaults);
        assert_eq!(limits.global_rate, Some(webhook::Rate::new(100.0, 200)));
        assert_eq!(limits.registration_rate, Some(webhook::Rate::new(1.0, 20)));
        let off = webhook_limits(&parse(&["--webhook-global-rate", "0", "--webhook-registration-rate", "0"]));
        assert_eq!((off.global_rate, off.registration_rate), (None, None));
    }

    #[test]
    fn gitlab_flags_come_together_and_never_show_the_token() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |extra: &[&str]| Cli::parse_from([&["cdtarget"], extra].concat()).args;
        assert!(gitlab_settings(&parse(&[])).unwrap().is_none());
        let error = gitlab_settings(&parse(&["--webhook-external-url", "https://cd.example.com"])).unwrap_err();
        assert!(error.contains("--gitlab-url is not"), "{error}");
        let error = gitlab_settings(&parse(&["--gitlab-url", "https://gitlab.example.com"])).unwrap_err();
        assert!(error.contains("--gitlab-token-file is required"), "{error}");

        let dir = std::env::temp_dir().join(format!("cdtarget-gitlab-flags-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (token, hosts) = (dir.join("token"), dir.join("known_hosts"));
        std::fs::write(&token, "glpat-secret-value\n").unwrap();
        std::fs::write(&hosts, "").unwrap();
        let full = |url: &str| {
            parse(&[
                "--gitlab-url",
                "https://gitlab.example.com",
                "--gitlab-token-file",
                token.to_str().unwrap(),
                "--gitlab-known-hosts-file",
                hosts.to_str().unwrap(),
                "--webhook-external-url",
                url,
            ])
        };
        let error = gitlab_settings(&full("https://cd.example.com")).unwrap_err();
        assert!(error.contains("is empty") && !error.contains("glpat"), "{error}");
        std::fs::write(&hosts, "gitlab.example.com ssh-ed25519 AAAA\n").unwrap();
        let error = gitlab_settings(&full("ftp://cd.example.com")).unwrap_err();
        assert!(error.contains("--webhook-external-url"), "{error}");
        let settings = gitlab_settings(&full("https://cd.example.com/")).unwrap().unwrap();
        assert_eq!(settings.webhook_external_url, "https://cd.example.com/");
        assert!(settings.known_hosts.starts_with("gitlab.example.com"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_shard_selector_selects_everything() {
        assert_eq!(shard_config(Some("  ")).label_selector, None);
        assert_eq!(shard_config(Some("shard=a")).label_selector.as_deref(), Some("shard=a"));
        assert_eq!(shard_config(None).label_selector, None);
    }

    #[tokio::test]
    async fn fired_triggers_reach_the_controller_stream_in_order() {
        let (trigger, mut triggered) = Trigger::new();
        let webhook = trigger.clone();
        trigger.fire("team-a", "repo").unwrap();
        webhook.fire("team-b", "other").unwrap();
        let first = triggered.next().await.unwrap();
        assert_eq!((first.namespace.as_deref(), first.name.as_str()), (Some("team-a"), "repo"));
        assert_eq!(triggered.next().await.unwrap().name, "other");
        drop(triggered);
        assert!(trigger.fire("team-a", "repo").is_err(), "a stopped controller is reported");
    }
}
