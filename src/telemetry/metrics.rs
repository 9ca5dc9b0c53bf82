//! The Prometheus metrics: their families and labels, the one [`Metrics`] registry (the
//! `cdtarget_*` series and the standard `process_*` ones) and the helpers that count into it.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::process::ProcessCollector;

/// The verb a server-side dry-run request is reported under (`apply::writer` reports it, and
/// [`Metrics::count_write`] counts it in `cdtarget_api_dry_runs_total`, never as a write).
pub const DRY_RUN: &str = "dry-run";

/// Labels of the per-registration gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistrationLabels {
    /// `namespace/name` of the TenantRepository.
    pub registration: String,
}

/// Labels of the Git fetch histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchLabels {
    /// `updated`, `unchanged` (a no-op poll) or the failure reason (`AuthenticationFailed`, ...).
    pub result: String,
}

/// Labels of the reconcile duration histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `TenantRepository` or `CDTarget`.
    pub kind: String,
}

/// Labels of the reconcile result counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `TenantRepository` or `CDTarget`.
    pub kind: String,
    /// `success`, or the error's short label (`read`, `apply`, `prune`, `status`, ...).
    pub result: String,
}

/// Labels of the API write counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// What the write did (`apply`, `delete`, `status`, `finalizers`, `create`, `patch`).
    pub verb: &'static str,
    /// Kind of the object written.
    pub kind: String,
}

/// Labels of the webhook request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `spec.webhook.type` of the registration (`gitlab`, `github`, `generic-hmac`, `generic`), or
    /// `none` when the request matched no registration.
    pub r#type: &'static str,
    /// `accepted`, `ignored`, `duplicate`, `unauthorized`, `bad_request`, `not_found`,
    /// `method_not_allowed`, `too_large`, `timeout`, `rate_limited` or `unavailable`.
    pub result: &'static str,
}

/// Labels of the per-object readiness gauge (as Flux's `gotk_*` metrics name an object).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    /// `TenantRepository` or `CDTarget`.
    pub kind: &'static str,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// `true` while `spec.suspend` is set (nothing is reconciled; Ready keeps its last status).
    pub suspended: &'static str,
}

/// One sample of `cdtarget_object_ready`: what the Ready condition a reconciler wrote says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// The series.
    pub labels: ObjectLabels,
    /// `Ready=True`.
    pub ready: bool,
}

impl Readiness {
    /// The sample of object `kind` `namespace/name` whose status holds `conditions`: ready when
    /// its `Ready` condition is `True` (absent, `False` or `Unknown` is not ready).
    pub fn of(kind: &'static str, namespace: &str, name: &str, conditions: &[Condition], suspended: bool) -> Self {
        Readiness {
            labels: ObjectLabels {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                suspended: if suspended { "true" } else { "false" },
            },
            ready: conditions.iter().any(|c| c.type_ == crate::api::conditions::READY && c.status == "True"),
        }
    }
}

/// Receives the readiness of every status a reconciler wrote (or found already written).
pub type ReadinessObserver = Arc<dyn Fn(Readiness) + Send + Sync>;

/// Labels of the GitLab request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GitLabLabels {
    /// `GET`, `POST`, `PUT` or `DELETE`.
    pub method: String,
    /// `success`, or the class of the failure as the `GitLabSynced` condition names it
    /// (`GitLabUnauthorized`, `GitLabUnavailable`, `GitLabRateLimited`, ...).
    pub result: &'static str,
}

/// Labels of the webhook handling-time histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookTypeLabels {
    /// As [`WebhookLabels::type`].
    pub r#type: &'static str,
}

/// The webhook receiver's metrics: cheap to clone (the families are shared), so the receiver
/// holds its own copy. Labels are static strings: never a path, digest or registration name.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    /// Requests per registration type and result.
    pub requests: Family<WebhookLabels, Counter>,
    /// Time from the request's arrival to the answer, per registration type.
    pub duration: Family<WebhookTypeLabels, Histogram>,
}

impl Default for WebhookMetrics {
    /// Families not registered anywhere (for tests and benchmarks); the controller's are in
    /// [`Metrics`].
    fn default() -> Self {
        WebhookMetrics {
            requests: Family::default(),
            // 50 µs .. ~1.6 s
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_05, 2.0, 16))),
        }
    }
}

impl WebhookMetrics {
    /// Counts one answered request and its handling time.
    pub fn observe(&self, kind: &'static str, result: &'static str, duration: std::time::Duration) {
        self.requests.get_or_create(&WebhookLabels { r#type: kind, result }).inc();
        self.duration.get_or_create(&WebhookTypeLabels { r#type: kind }).observe(duration.as_secs_f64());
    }
}

/// The controller's metrics.
pub struct Metrics {
    registry: Registry,
    /// Wall time of one Git fetch (a no-op poll included), per outcome.
    pub git_fetch_duration: Family<FetchLabels, Histogram>,
    /// Objects server-side applied from tenant repositories.
    pub objects_applied: Counter,
    /// Objects deleted because they left Git.
    pub objects_pruned: Counter,
    /// Objects in each registration's inventory.
    pub managed_objects: Family<RegistrationLabels, Gauge>,
    /// Wall time of one reconcile, per kind.
    pub reconcile_duration: Family<KindLabels, Histogram>,
    /// Reconciles per kind and result.
    pub reconciles: Family<ResultLabels, Counter>,
    /// Writes the controller sent to the API server, per verb and kind (every write passes
    /// through `apply::writer`, which counts it here).
    pub writes: Family<WriteLabels, Counter>,
    /// Server-side dry-run requests (the all-or-nothing check before a tenant apply), per kind:
    /// not writes, nothing is persisted, so never in `writes`.
    pub dry_runs: Family<KindLabels, Counter>,
    /// The webhook receiver's requests and handling time.
    pub webhook: WebhookMetrics,
    /// 1 per object whose Ready condition is True, 0 otherwise (suspended ones included).
    pub object_ready: Family<ObjectLabels, Gauge>,
    /// 1 while this replica holds the lease (or runs without leader election).
    pub leader: Gauge,
    /// GitLab API calls (after the client's retries) per method and result.
    pub gitlab_requests: Family<GitLabLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        // The standard process_* names, outside the cdtarget_ prefix.
        root.register_collector(Box::new(ProcessCollector));
        let registry = root.sub_registry_with_prefix("cdtarget");
        let reconcile_duration = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            // 5 ms .. ~2.7 min
            Histogram::new(exponential_buckets(0.005, 2.0, 16))
        });
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register(
            "reconcile_duration_seconds",
            "Wall time of one reconcile, per kind",
            reconcile_duration.clone(),
        );
        registry.register("reconciles", "Reconciles per kind and result", reconciles.clone());
        let git_fetch_duration = Family::<FetchLabels, Histogram>::new_with_constructor(|| {
            // 1 ms .. ~33 s
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        registry.register(
            "git_fetch_duration_seconds",
            "Wall time of one Git fetch per result (updated, unchanged = no-op poll, or the failure reason)",
            git_fetch_duration.clone(),
        );
        let objects_applied = Counter::default();
        registry.register(
            "objects_applied",
            "Objects server-side applied from tenant repositories",
            objects_applied.clone(),
        );
        let objects_pruned = Counter::default();
        registry.register("objects_pruned", "Objects deleted because they left Git", objects_pruned.clone());
        let managed_objects = Family::<RegistrationLabels, Gauge>::default();
        registry.register("managed_objects", "Objects in each registration's inventory", managed_objects.clone());
        let writes = Family::<WriteLabels, Counter>::default();
        registry.register("api_writes", "Writes sent to the API server, per verb and kind", writes.clone());
        let dry_runs = Family::<KindLabels, Counter>::default();
        registry.register(
            "api_dry_runs",
            "Server-side dry-run requests sent before tenant applies (nothing persisted), per kind",
            dry_runs.clone(),
        );
        let webhook = WebhookMetrics::default();
        registry.register(
            "webhook_requests",
            "Webhook requests per registration type and result",
            webhook.requests.clone(),
        );
        registry.register(
            "webhook_request_duration_seconds",
            "Time from a webhook request's arrival to its answer, per registration type",
            webhook.duration.clone(),
        );
        let object_ready = Family::<ObjectLabels, Gauge>::default();
        registry.register(
            "object_ready",
            "1 when the object's Ready condition is True, else 0, per kind and object (suspended ones included)",
            object_ready.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the lease and runs the reconcilers, else 0",
            leader.clone(),
        );
        let gitlab_requests = Family::<GitLabLabels, Counter>::default();
        registry.register(
            "gitlab_requests",
            "GitLab API calls after retries, per method and result (success or the failure class)",
            gitlab_requests.clone(),
        );
        Metrics {
            registry: root,
            git_fetch_duration,
            objects_applied,
            objects_pruned,
            managed_objects,
            reconcile_duration,
            reconciles,
            writes,
            dry_runs,
            webhook,
            object_ready,
            leader,
            gitlab_requests,
        }
    }
}

impl Metrics {
    /// Starts timing a reconcile of `kind`; the guard records the duration when dropped.
    pub fn time_reconcile(&self, kind: &str) -> ReconcileTimer<'_> {
        ReconcileTimer { metrics: self, kind: kind.to_owned(), start: Instant::now() }
    }

    /// Records one Git fetch ending in `result` (`updated`, `unchanged` or a failure reason).
    pub fn observe_fetch(&self, result: &str, duration: std::time::Duration) {
        self.git_fetch_duration
            .get_or_create(&FetchLabels { result: result.to_owned() })
            .observe(duration.as_secs_f64());
    }

    /// Records what one TenantRepository reconcile did.
    pub fn observe_apply(&self, registration: &str, applied: usize, pruned: usize, managed: usize) {
        self.objects_applied.inc_by(applied as u64);
        self.objects_pruned.inc_by(pruned as u64);
        let labels = RegistrationLabels { registration: registration.to_owned() };
        self.managed_objects.get_or_create(&labels).set(i64::try_from(managed).unwrap_or(i64::MAX));
    }

    /// Drops the series of a registration that is gone, so that `/metrics` does not report it
    /// for the life of the process.
    pub fn forget_registration(&self, registration: &str) {
        self.managed_objects.remove(&RegistrationLabels { registration: registration.to_owned() });
    }

    /// Records the readiness of one object (replacing its series of the other `suspended` value).
    pub fn set_readiness(&self, sample: Readiness) {
        let mut other = sample.labels.clone();
        other.suspended = if other.suspended == "true" { "false" } else { "true" };
        self.object_ready.remove(&other);
        self.object_ready.get_or_create(&sample.labels).set(i64::from(sample.ready));
    }

    /// Drops the readiness series of an object that is gone.
    pub fn forget_object(&self, kind: &'static str, namespace: &str, name: &str) {
        for suspended in ["true", "false"] {
            self.object_ready.remove(&ObjectLabels {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                suspended,
            });
        }
    }

    /// Counts one GitLab call of `method` ending in `result` (`success` or a failure class).
    pub fn count_gitlab_request(&self, method: &str, result: &'static str) {
        self.gitlab_requests.get_or_create(&GitLabLabels { method: method.to_owned(), result }).inc();
    }

    /// Counts one write of `verb` to an object of `kind`; the writer's dry runs (verb
    /// `dry-run`) are counted in `cdtarget_api_dry_runs_total` instead, never as writes.
    pub fn count_write(&self, verb: &'static str, kind: &str) {
        if verb == DRY_RUN {
            self.dry_runs.get_or_create(&KindLabels { kind: kind.to_owned() }).inc();
            return;
        }
        self.writes.get_or_create(&WriteLabels { verb, kind: kind.to_owned() }).inc();
    }

    /// Counts one reconcile of `kind` ending in `result`.
    pub fn count_reconcile(&self, kind: &str, result: &str) {
        self.reconciles.get_or_create(&ResultLabels { kind: kind.to_owned(), result: result.to_owned() }).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// Records a reconcile's duration when dropped (also when the reconcile future is cancelled).
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    kind: String,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        let labels = KindLabels { kind: std::mem::take(&mut self.kind) };
        self.metrics.reconcile_duration.get_or_create(&labels).observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_expose_reconcile_duration_and_results_per_kind() {
        let metrics = Metrics::default();
        drop(metrics.time_reconcile("CDTarget"));
        metrics.count_reconcile("CDTarget", "success");
        let text = metrics.encode();
        assert!(text.contains("cdtarget_reconcile_duration_seconds_count{kind=\"CDTarget\"} 1"), "{text}");
        assert!(text.contains("cdtarget_reconciles_total{kind=\"CDTarget\",result=\"success\"} 1"), "{text}");
    }

    #[test]
    fn metrics_expose_git_fetches_per_result_including_no_op_polls() {
        let metrics = Metrics::default();
        metrics.observe_fetch("unchanged", std::time::Duration::from_millis(3));
        metrics.observe_fetch("unchanged", std::time::Duration::from_millis(4));
        metrics.observe_fetch("AuthenticationFailed", std::time::Duration::from_millis(9));
        let text = metrics.encode();
        assert!(text.contains("cdtarget_git_fetch_duration_seconds_count{result=\"unchanged\"} 2"), "{text}");
        assert!(
            text.contains("cdtarget_git_fetch_duration_seconds_count{result=\"AuthenticationFailed\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn metrics_expose_webhook_requests_per_type_and_result() {
        let metrics = Metrics::default();
        let receiver = metrics.webhook.clone();
        receiver.observe("gitlab", "accepted", std::time::Duration::from_micros(300));
        receiver.observe("none", "not_found", std::time::Duration::from_micros(40));
        let text = metrics.encode();
        assert!(text.contains("cdtarget_webhook_requests_total{type=\"gitlab\",result=\"accepted\"} 1"), "{text}");
        assert!(text.contains("cdtarget_webhook_requests_total{type=\"none\",result=\"not_found\"} 1"), "{text}");
        assert!(text.contains("cdtarget_webhook_request_duration_seconds_count{type=\"gitlab\"} 1"), "{text}");
    }

    #[test]
    fn metrics_expose_applied_pruned_and_managed_objects() {
        let metrics = Metrics::default();
        metrics.observe_apply("cdtarget-system/team-a", 5, 0, 5);
        metrics.observe_apply("cdtarget-system/team-a", 4, 1, 4);
        let text = metrics.encode();
        assert!(text.contains("cdtarget_objects_applied_total 9"), "{text}");
        assert!(text.contains("cdtarget_objects_pruned_total 1"), "{text}");
        assert!(text.contains("cdtarget_managed_objects{registration=\"cdtarget-system/team-a\"} 4"), "{text}");
    }

    #[test]
    fn a_gone_registration_leaves_no_series_behind() {
        let metrics = Metrics::default();
        metrics.observe_apply("cdtarget-system/gone", 2, 0, 2);
        metrics.observe_apply("cdtarget-system/kept", 1, 0, 1);
        metrics.forget_registration("cdtarget-system/gone");
        let text = metrics.encode();
        assert!(!text.contains("registration=\"cdtarget-system/gone\""), "{text}");
        assert!(text.contains("cdtarget_managed_objects{registration=\"cdtarget-system/kept\"} 1"), "{text}");
    }

    #[test]
    fn metrics_count_writes_per_verb_and_kind() {
        let metrics = Metrics::default();
        metrics.count_write("apply", "ConfigMap");
        metrics.count_write("apply", "ConfigMap");
        metrics.count_write("status", "CDTarget");
        let text = metrics.encode();
        assert!(text.contains("cdtarget_api_writes_total{verb=\"apply\",kind=\"ConfigMap\"} 2"), "{text}");
        assert!(text.contains("cdtarget_api_writes_total{verb=\"status\",kind=\"CDTarget\"} 1"), "{text}");
    }

    #[test]
    fn dry_runs_are_counted_apart_from_writes() {
        let metrics = Metrics::default();
        metrics.count_write(DRY_RUN, "ConfigMap");
        let text = metrics.encode();
        assert!(text.contains("cdtarget_api_dry_runs_total{kind=\"ConfigMap\"} 1"), "{text}");
        assert!(!text.contains("cdtarget_api_writes_total{"), "a dry run counted as a write: {text}");
    }

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "Test".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        }
    }

    #[test]
    fn readiness_is_the_ready_condition_being_true_and_nothing_else() {
        let of =
            |conditions: &[Condition], suspended| Readiness::of("CDTarget", "team-a", "agents", conditions, suspended);
        assert!(of(&[condition("Ready", "True")], false).ready);
        assert!(!of(&[condition("Ready", "False"), condition("Stalled", "True")], false).ready);
        assert!(!of(&[condition("Ready", "Unknown")], false).ready);
        assert!(!of(&[], false).ready, "no status yet is not ready");
        assert!(!of(&[condition("Applied", "True")], false).ready, "another condition says nothing of Ready");
        let suspended = of(&[condition("Ready", "True")], true);
        assert_eq!(
            suspended.labels,
            ObjectLabels { kind: "CDTarget", namespace: "team-a".into(), name: "agents".into(), suspended: "true" }
        );
    }

    #[test]
    fn object_readiness_has_one_series_per_object_and_none_once_it_is_gone() {
        let metrics = Metrics::default();
        let ready = [condition("Ready", "True")];
        let failing = [condition("Ready", "False")];
        metrics.set_readiness(Readiness::of("TenantRepository", "cdtarget-system", "team-a", &ready, false));
        metrics.set_readiness(Readiness::of("CDTarget", "team-b", "agents", &failing, false));
        let text = metrics.encode();
        assert!(text.contains(
            "cdtarget_object_ready{kind=\"TenantRepository\",namespace=\"cdtarget-system\",name=\"team-a\",suspended=\"false\"} 1"
        ), "{text}");
        assert!(
            text.contains(
                "cdtarget_object_ready{kind=\"CDTarget\",namespace=\"team-b\",name=\"agents\",suspended=\"false\"} 0"
            ),
            "{text}"
        );

        // Suspending replaces the series rather than adding one.
        metrics.set_readiness(Readiness::of("TenantRepository", "cdtarget-system", "team-a", &ready, true));
        let text = metrics.encode();
        assert!(text.contains("name=\"team-a\",suspended=\"true\"} 1"), "{text}");
        assert!(!text.contains("name=\"team-a\",suspended=\"false\""), "{text}");

        metrics.forget_object("TenantRepository", "cdtarget-system", "team-a");
        let text = metrics.encode();
        assert!(!text.contains("team-a"), "{text}");
        assert!(text.contains("name=\"agents\""), "{text}");
    }

    #[test]
    fn metrics_expose_process_figures_under_their_standard_names() {
        let text = Metrics::default().encode();
        for name in ["process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds "] {
            assert!(text.lines().any(|line| line.starts_with(name)), "no {name}in {text}");
        }
        assert!(!text.contains("cdtarget_process_"), "{text}");
    }
}
