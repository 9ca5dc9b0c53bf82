//! `cdtarget reconcile tenantrepository|cdtarget NAME`: "reconcile now" from the command line.
//! It sets the annotation `cdtarget.io/requestedAt` to the current time with a merge patch (the
//! change reaches the controller through its watch); with `--wait` it watches the object until
//! `status.lastHandledReconcileAt` says the controller handled that request and the object no
//! longer says `Reconciling=True` (a CDTarget whose agents are starting, a registration waiting
//! for the health of what it applied, `spec.wait`), and prints the `Ready` condition it left.
//! Handled but still reconciling at `--timeout`: that `Ready` is printed (exit 1).
//!
//! Exit codes: 0 requested (and, with `--wait`, Ready), 1 handled but not Ready, 2 the request
//! could not be made or followed (not found, forbidden, suspended, no cluster, deleted while
//! waiting; also usage errors), 3 timed out before the controller handled it.

use std::fmt::Debug;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::pin::pin;
use std::process::ExitCode;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::runtime::watcher;
use kube::{Api, Client, Config, Resource};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::api::conditions::is_true;
use crate::api::conditions::{READY, RECONCILING};
use crate::api::reconcile_request::{REQUESTED_AT, is_handled};
use crate::api::{CDTarget, TenantRepository};

/// The namespace TenantRepositories live in unless `--namespace` says otherwise: where
/// `deploy/` runs the controller.
pub const DEFAULT_REGISTRATION_NAMESPACE: &str = "cdtarget-system";

/// The field manager of the request's patch (who set the annotation, in `managedFields`).
const FIELD_MANAGER: &str = "cdtarget-reconcile";

/// Exit code: handled, but the object is not Ready.
pub const EXIT_NOT_READY: u8 = 1;
/// Exit code: the request could not be made or followed.
pub const EXIT_ERROR: u8 = 2;
/// Exit code: the controller did not handle the request within `--timeout`.
pub const EXIT_TIMED_OUT: u8 = 3;

/// Arguments of `reconcile`.
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// What to reconcile.
    #[command(subcommand)]
    pub kind: Kind,
}

/// The kinds that can be asked to reconcile.
#[derive(Debug, clap::Subcommand)]
pub enum Kind {
    /// Reconcile a TenantRepository (a registration) now: fetch its repository, apply, prune.
    #[command(name = "tenantrepository", visible_alias = "trepo")]
    TenantRepository(RequestArgs),
    /// Reconcile a CDTarget now: render its children again, repair them, check what it borrows.
    #[command(name = "cdtarget")]
    CDTarget(RequestArgs),
}

/// The object and how to reach and wait for it.
#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// Name of the object.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Namespace of the object. Default: `cdtarget-system` for a TenantRepository (where the
    /// controller of `deploy/` reads them), the kubeconfig context's namespace for a CDTarget.
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Wait until the controller handled the request (`status.lastHandledReconcileAt`), print
    /// the `Ready` condition it left and exit 0 when Ready, 1 when not.
    #[arg(long)]
    pub wait: bool,
    /// Upper bound on the whole command, as a duration (`30s`, `5m`); exit code 3 when the
    /// controller has not handled the request by then.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = crate::source::registration::parse_timeout)]
    pub timeout: Duration,
    /// The kubeconfig file. Default: `$KUBECONFIG`, `~/.kube/config`, or the in-cluster
    /// ServiceAccount.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use. Default: its current context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// What a kind offers the command: where the request's answer and the outcome are.
trait Requestable:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    /// `status.lastHandledReconcileAt`.
    fn last_handled(&self) -> Option<&str>;
    /// `status.conditions`.
    fn conditions(&self) -> &[Condition];
    /// Whether the controller is told to leave the object alone.
    fn suspended(&self) -> bool;
}

impl Requestable for TenantRepository {
    fn last_handled(&self) -> Option<&str> {
        self.status.as_ref()?.last_handled_reconcile_at.as_deref()
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default()
    }
    fn suspended(&self) -> bool {
        self.spec.suspend
    }
}

impl Requestable for CDTarget {
    fn last_handled(&self) -> Option<&str> {
        self.status.as_ref()?.last_handled_reconcile_at.as_deref()
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default()
    }
    fn suspended(&self) -> bool {
        false
    }
}

/// Why the command stopped short of an outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// The request could not be made or followed: exit code 2.
    Error(String),
    /// The controller did not handle the request in time: exit code 3.
    TimedOut(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Error(_) => EXIT_ERROR,
            Failure::TimedOut(_) => EXIT_TIMED_OUT,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Error(message) | Failure::TimedOut(message) => f.write_str(message),
        }
    }
}

/// The `Ready` condition a handled request left, as printed.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `Ready` is `True`.
    pub ready: bool,
    /// `KIND NAMESPACE/NAME: Ready=STATUS REASON: MESSAGE`.
    pub line: String,
}

/// The outcome of a handled request on the object `what` (`KIND NAMESPACE/NAME`) from its
/// conditions.
pub fn outcome(what: &str, conditions: &[Condition]) -> Outcome {
    match conditions.iter().find(|c| c.type_ == READY) {
        Some(ready) => Outcome {
            ready: ready.status == "True",
            line: format!("{what}: Ready={} {}: {}", ready.status, ready.reason, ready.message),
        },
        None => Outcome { ready: false, line: format!("{what}: no Ready condition in its status") },
    }
}

/// Runs the command on a runtime of its own; the exit code as documented in the module.
pub fn main(args: &ReconcileArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cdtarget reconcile: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    // The process-level rustls provider, as the controller installs it (kube's client needs one).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let terminal = io::stderr().is_terminal();
    let stdout = io::stdout();
    let result = runtime.block_on(async {
        match &args.kind {
            Kind::TenantRepository(request) => {
                run::<TenantRepository>(request, Some(DEFAULT_REGISTRATION_NAMESPACE), terminal).await
            }
            Kind::CDTarget(request) => run::<CDTarget>(request, None, terminal).await,
        }
    });
    match result {
        Ok(Done::Requested(line)) => {
            let _ = writeln!(stdout.lock(), "{line}");
            ExitCode::SUCCESS
        }
        Ok(Done::Handled(outcome)) => {
            let _ = writeln!(stdout.lock(), "{}", outcome.line);
            if outcome.ready { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NOT_READY) }
        }
        Err(failure) => {
            eprintln!("cdtarget reconcile: {failure}");
            ExitCode::from(failure.code())
        }
    }
}

/// How the command ended well.
enum Done {
    /// Without `--wait`: the request is made.
    Requested(String),
    /// With `--wait`: the controller handled it.
    Handled(Outcome),
}

async fn run<K: Requestable>(
    args: &RequestArgs,
    default_namespace: Option<&str>,
    terminal: bool,
) -> Result<Done, Failure> {
    let deadline = Instant::now() + args.timeout;
    let timeout = args.timeout;
    let within =
        |what: &'static str| move |_| Failure::TimedOut(format!("timed out after {} {what}", format_duration(timeout)));
    let client = tokio::time::timeout_at(deadline, client(args)).await.map_err(within("loading the kubeconfig"))??;
    let namespace = match (&args.namespace, default_namespace) {
        (Some(namespace), _) => namespace.clone(),
        (None, Some(namespace)) => namespace.to_owned(),
        (None, None) => client.default_namespace().to_owned(),
    };
    let kind = K::kind(&());
    let what = format!("{kind} {namespace}/{}", args.name);
    let api: Api<K> = Api::namespaced(client, &namespace);

    let object = tokio::time::timeout_at(deadline, api.get(&args.name))
        .await
        .map_err(within("reading the object"))?
        .map_err(|e| api_failure(&what, "read", &e, &kind))?;
    if object.suspended() {
        return Err(Failure::Error(format!(
            "{what} is suspended (spec.suspend: true): the controller does not reconcile it; set spec.suspend to false first"
        )));
    }

    let requested = Timestamp::now().to_string();
    let patch = serde_json::json!({ "metadata": { "annotations": { REQUESTED_AT: requested } } });
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
    tokio::time::timeout_at(deadline, api.patch(&args.name, &params, &Patch::Merge(&patch)))
        .await
        .map_err(within("making the request"))?
        .map_err(|e| api_failure(&what, "annotate", &e, &kind))?;
    if !args.wait {
        return Ok(Done::Requested(format!("{what}: reconcile requested ({REQUESTED_AT}={requested})")));
    }

    let mut progress = Progress::new(terminal, &what, &requested, timeout);
    let outcome = wait_until_handled(&api, &args.name, &requested, deadline, &mut progress).await;
    progress.finish();
    let handled = outcome.map_err(|failure| match failure {
        Waited::Deleted => Failure::Error(format!("{what} was deleted before the controller handled the request")),
        Waited::WatchFailed(e) => Failure::Error(format!("cannot watch {what}: {}", api_message(&e))),
        Waited::TimedOut(last_handled) => Failure::TimedOut(format!(
            "timed out after {}: the controller has not handled the request {requested} on {what} \
             (status.lastHandledReconcileAt: {}); is a controller running for namespace {namespace}, \
             leading, and does its --shard-selector match the object?",
            format_duration(timeout),
            last_handled.as_deref().unwrap_or("none"),
        )),
    })?;
    Ok(Done::Handled(outcome_of(&what, &handled)))
}

fn outcome_of<K: Requestable>(what: &str, object: &K) -> Outcome {
    outcome(what, object.conditions())
}

/// How waiting ended without the request handled.
enum Waited {
    /// The object is gone.
    Deleted,
    /// The watch was refused (RBAC, a missing CRD).
    WatchFailed(kube::Error),
    /// The deadline passed; `status.lastHandledReconcileAt` as last seen.
    TimedOut(Option<String>),
}

/// Watches the object (no polling) until its `status.lastHandledReconcileAt` covers `requested`
/// and it is no longer `Reconciling`; at the deadline, the handled object as last seen, if any.
async fn wait_until_handled<K: Requestable>(
    api: &Api<K>,
    name: &str,
    requested: &str,
    deadline: Instant,
    progress: &mut Progress,
) -> Result<K, Waited> {
    let mut changes = pin!(watcher::watch_object(api.clone(), name));
    let mut last_handled = None;
    // Handled, but the outcome is still coming (agents starting, a health check under way).
    let mut handled: Option<K> = None;
    // Redraws the spinner; only on a terminal.
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let expired = tokio::time::sleep_until(deadline);
    let mut expired = pin!(expired);
    loop {
        tokio::select! {
            change = changes.try_next() => match change {
                Ok(Some(Some(object))) => {
                    if is_handled(requested, object.last_handled()) {
                        if !is_true(object.conditions(), RECONCILING) {
                            return Ok(object);
                        }
                        handled = Some(object);
                        continue;
                    }
                    last_handled = object.last_handled().map(str::to_owned);
                }
                Ok(Some(None)) => return Err(Waited::Deleted),
                // The watcher's stream does not end; should it, nothing more will come.
                Ok(None) => return handled.ok_or(Waited::TimedOut(last_handled)),
                Err(error) => {
                    let error = watch_error(error);
                    // 410 Gone and dropped connections: the watcher lists again by itself.
                    if let Some(error) = error.filter(is_refusal) {
                        return Err(Waited::WatchFailed(error));
                    }
                }
            },
            () = &mut expired => return handled.ok_or(Waited::TimedOut(last_handled)),
            _ = ticks.tick(), if progress.terminal => progress.tick(),
        }
    }
}

/// The kube error inside a watcher error, if any.
fn watch_error(error: watcher::Error) -> Option<kube::Error> {
    match error {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            Some(e)
        }
        watcher::Error::WatchError(status) => Some(kube::Error::Api(status)),
        _ => None,
    }
}

/// An answer that will not change by trying again: unauthenticated, forbidden, not found.
fn is_refusal(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if matches!(status.code, 401 | 403 | 404))
}

/// The client for `--kubeconfig` and `--context`, or the environment's.
async fn client(args: &RequestArgs) -> Result<Client, Failure> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let failed = |e: &KubeconfigError| Failure::Error(format!("--kubeconfig {}: {}", path.display(), said(e)));
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| failed(&e))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(|e| failed(&e))?
        }
        (None, Some(context)) => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| Failure::Error(format!("--context {context}: {}", said(&e))))?,
        (None, None) => Config::infer().await.map_err(|e| {
            let shown = match std::error::Error::source(&e).and_then(|s| s.downcast_ref::<KubeconfigError>()) {
                Some(parse @ KubeconfigError::Parse(_)) => said(parse),
                _ => e.to_string(),
            };
            Failure::Error(format!("no cluster: {shown} (give --kubeconfig FILE, or set KUBECONFIG)"))
        })?,
    };
    Client::try_from(config).map_err(|e| Failure::Error(format!("cannot build a client: {e}")))
}

/// A kubeconfig error, without the YAML parser's message: it can quote the file's values, a
/// token among them.
fn said(error: &KubeconfigError) -> String {
    match error {
        KubeconfigError::Parse(_) => "not a valid kubeconfig (YAML); its content is not shown".to_owned(),
        other => other.to_string(),
    }
}

/// A failed request on the object `what`, said plainly.
fn api_failure(what: &str, verb: &str, error: &kube::Error, kind: &str) -> Failure {
    let message = match error {
        kube::Error::Api(status) if status.code == 404 => {
            let plural = kind.to_lowercase();
            let namespace = what.split_once(' ').and_then(|(_, object)| object.split_once('/')).map(|(ns, _)| ns);
            format!(
                "{what} not found (`kubectl get {plural} -n {}` lists them; -n/--namespace picks another namespace)",
                namespace.unwrap_or_default()
            )
        }
        _ => format!("cannot {verb} {what}: {}", api_message(error)),
    };
    Failure::Error(message)
}

/// The API server's own message for a refused request, or the error.
fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// `5m`, `90s`, `1h`, `250ms`: a duration as the flags take it.
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match (seconds, duration.subsec_millis()) {
        (0, millis) => format!("{millis}ms"),
        (s, 0) if s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        _ => format!("{:.1}s", duration.as_secs_f64()),
    }
}

/// The wait on stderr: on a terminal a spinner with the time waited, redrawn in place and
/// cleared at the end; otherwise one plain line.
struct Progress {
    terminal: bool,
    started: Instant,
    what: String,
    frame: usize,
    drawn: bool,
}

impl Progress {
    fn new(terminal: bool, what: &str, requested: &str, timeout: Duration) -> Progress {
        if !terminal {
            eprintln!(
                "waiting for the controller to reconcile {what} (request {requested}, up to {})",
                format_duration(timeout)
            );
        }
        Progress { terminal, started: Instant::now(), what: what.to_owned(), frame: 0, drawn: false }
    }

    fn tick(&mut self) {
        const FRAMES: [char; 4] = ['-', '\\', '|', '/'];
        let frame = FRAMES[self.frame % FRAMES.len()];
        self.frame += 1;
        self.drawn = true;
        let mut err = io::stderr().lock();
        let _ = write!(
            err,
            "\r{frame} waiting for the controller to reconcile {} ({:.1}s)",
            self.what,
            self.started.elapsed().as_secs_f64()
        );
        let _ = err.flush();
    }

    fn finish(&mut self) {
        if self.drawn {
            // Back to the start of the line, and the line erased.
            eprint!("\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn a_handled_request_is_ready_only_with_ready_true() {
        let what = "TenantRepository cdtarget-system/team-a";
        let ready = outcome(what, &[condition("True", "Succeeded", "applied 3 objects of revision abc into team-a")]);
        assert_eq!(
            ready,
            Outcome {
                ready: true,
                line: "TenantRepository cdtarget-system/team-a: Ready=True Succeeded: applied 3 objects of revision abc into team-a".into()
            }
        );
        let failed = outcome(what, &[condition("False", "ValidationFailed", "a.yaml:1: spec.ip[0]: broader")]);
        assert!(!failed.ready);
        assert!(
            failed.line.ends_with("Ready=False ValidationFailed: a.yaml:1: spec.ip[0]: broader"),
            "{}",
            failed.line
        );
        let unknown = outcome(what, &[condition("Unknown", "Progressing", "fetching")]);
        assert!(!unknown.ready);
        let none = outcome(what, &[]);
        assert!(!none.ready && none.line.contains("no Ready condition"), "{}", none.line);
    }

    #[test]
    fn exit_codes_tell_an_error_from_a_timeout() {
        assert_eq!(Failure::Error("x".into()).code(), 2);
        assert_eq!(Failure::TimedOut("x".into()).code(), 3);
        assert_eq!(EXIT_NOT_READY, 1);
    }

    #[test]
    fn durations_are_printed_as_the_flags_take_them() {
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_secs(1)), "1s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    }

    #[test]
    fn a_kubeconfig_that_is_not_yaml_is_reported_without_its_content() {
        let dir = std::env::temp_dir().join(format!("cdtarget-reconcile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(&path, "users:\n- name: admin\n  user:\n    token: [s3cret-token\n").unwrap();
        let error = Kubeconfig::read_from(&path).expect_err("not YAML");
        assert!(error.to_string().contains("s3cret"), "the parser quotes the file: {error}");
        let shown = said(&error);
        assert!(!shown.contains("s3cret") && shown.contains("not a valid kubeconfig"), "{shown}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn only_refusals_end_the_wait_early() {
        let status = |code| {
            kube::Error::Api(Box::new(kube::core::Status { code, ..kube::core::Status::failure("no", "Reason") }))
        };
        assert!(is_refusal(&status(403)));
        assert!(is_refusal(&status(404)));
        assert!(!is_refusal(&status(410)), "410 Gone: the watcher lists again");
        assert!(!is_refusal(&status(500)));
    }
}
