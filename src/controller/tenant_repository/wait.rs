//! `spec.wait`: after an apply, the registration is Ready only when everything it applied is
//! healthy by kstatus rules ([`crate::health`]), within `spec.wait.timeout` (default
//! [`DEFAULT_TIMEOUT`]) of the apply.
//!
//! - The check begins when a new set is applied (a new revision, or a new rendering), when a
//!   set that was healthy is repaired (drift), or when `spec.wait` first sees it;
//!   `status.healthCheck` records when, for which set, and whether it passed. A repair during a
//!   check keeps its deadline.
//! - While it runs, every object of the set is read as the tenant (the identity that applied
//!   it; Secrets and ConfigMaps are always healthy and are not read), and the registration
//!   comes back on a short schedule ([`recheck_after`]): every 2 s at first, at most every
//!   30 s, and at the deadline. `Ready=False`, `Reconciling=True`, reason
//!   [`REASON_HEALTH_CHECK_PENDING`], naming what is not healthy yet.
//! - Once every object is healthy the registration is Ready, and unchanged cycles read nothing
//!   more (the no-op cycle stays a no-op) until the set is written again.
//! - Past the timeout, or as soon as an object has failed (a Job that failed, a Deployment past
//!   its progress deadline): `Ready=False`, `Stalled=True`, reason [`REASON_HEALTH_CHECK_FAILED`],
//!   each unhealthy object named with its file and document, also as located problems. Checked
//!   again at every `spec.interval` (a rollout may still finish).
//!
//! The decision is [`decide`], a pure function over the objects as read; [`wait`] does the reads
//! and reports what it found ([`Waited`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject};

use super::execute::Executed;
use super::parse_go_duration;
use super::plan::Plan;
use crate::api::conditions::{
    REASON_HEALTH_CHECK_FAILED, REASON_HEALTH_CHECK_PENDING, REASON_INVALID_SPEC, REASON_SUCCEEDED,
};
use crate::api::tenant_repository::{HealthCheckStatus, InventoryEntry, TenantRepository};
use crate::apply::Writer;
use crate::apply::refusal::Origins;
use crate::apply::server_side::service_account_user;
use crate::controller::conditions::Health;
use crate::health::{self, Assessment, Status};
use crate::problem::Problem;

/// `spec.wait.timeout` when it is not given.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Most objects named in a message; the located problems name all of them.
const NAMED: usize = 10;

/// `spec.wait.timeout`, or why it cannot be read.
pub fn timeout_of(repo: &TenantRepository) -> Result<Duration, String> {
    match repo.spec.wait.as_ref().and_then(|w| w.timeout.as_deref()) {
        None | Some("") => Ok(DEFAULT_TIMEOUT),
        Some(text) => match parse_go_duration(text) {
            Some(d) if !d.is_zero() => Ok(d),
            _ => Err(format!("spec.wait.timeout: `{text}` is not a positive duration such as `30s`, `5m` or `1h`")),
        },
    }
}

/// The health of one object of the set, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The object.
    pub entry: InventoryEntry,
    /// Its kstatus status and why.
    pub assessment: Assessment,
}

/// What [`decide`] concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The registration's health.
    pub health: Health,
    /// When to check again (`None`: the plan's own requeue).
    pub recheck: Option<Duration>,
    /// Every object not healthy when the check failed, located (empty otherwise).
    pub problems: Vec<Problem>,
    /// Every object was healthy.
    pub healthy: bool,
}

/// Decides the registration's health from the objects of the set as `checked`, the check
/// having begun `elapsed` ago with `timeout`; `applied` is what the apply reported
/// (`applied N objects of revision R into NS`).
pub fn decide(
    applied: &str,
    checked: &[Checked],
    locations: &Origins,
    elapsed: Duration,
    timeout: Duration,
) -> Decision {
    let unhealthy: Vec<&Checked> = checked.iter().filter(|c| !c.assessment.is_current()).collect();
    if unhealthy.is_empty() {
        return Decision {
            health: Health::Ready { reason: REASON_SUCCEEDED.into(), message: healthy_message(applied, checked.len()) },
            recheck: None,
            problems: Vec::new(),
            healthy: true,
        };
    }
    let failed = unhealthy.iter().any(|c| c.assessment.status == Status::Failed);
    let located = |c: &Checked| match locations.get(&c.entry) {
        Some(origin) => {
            format!("{} ({origin}): {}", object(&c.entry), c.assessment.message)
        }
        None => format!("{}: {}", object(&c.entry), c.assessment.message),
    };
    let mut named: Vec<String> = unhealthy.iter().take(NAMED).map(|c| located(c)).collect();
    if unhealthy.len() > NAMED {
        named.push(format!("and {} more", unhealthy.len() - NAMED));
    }
    let list = named.join("; ");
    let total = checked.len();
    if failed || elapsed >= timeout {
        let why = if failed && elapsed < timeout { "failed" } else { "is not healthy" };
        let message = format!(
            "{applied}, but {} of {total} objects {why} after the wait of {}: {list}",
            unhealthy.len(),
            go_duration(timeout)
        );
        let problems = unhealthy
            .iter()
            .map(|c| {
                let problem =
                    Problem::field("", format!("{} is not healthy: {}", object(&c.entry), c.assessment.message));
                match locations.get(&c.entry) {
                    Some(origin) => origin.locate(problem),
                    None => problem,
                }
            })
            .collect();
        return Decision {
            health: Health::Stalled { reason: REASON_HEALTH_CHECK_FAILED.into(), message },
            recheck: None,
            problems,
            healthy: false,
        };
    }
    let message = format!(
        "{applied}; waiting up to {} for {} of {total} objects to become healthy: {list}",
        go_duration(timeout),
        unhealthy.len()
    );
    Decision {
        health: Health::Progressing { reason: REASON_HEALTH_CHECK_PENDING.into(), message },
        recheck: Some(recheck_after(elapsed, timeout)),
        problems: Vec::new(),
        healthy: false,
    }
}

/// When a pending check is run again: half the time it has run so far, from 2 s up to 30 s,
/// and no later than the deadline (at least 1 s on).
pub(crate) fn recheck_after(elapsed: Duration, timeout: Duration) -> Duration {
    let step = (elapsed / 2).clamp(Duration::from_secs(2), Duration::from_secs(30));
    let left = timeout.saturating_sub(elapsed).max(Duration::from_secs(1));
    step.min(left)
}

fn healthy_message(applied: &str, total: usize) -> String {
    format!("{applied}; all {total} objects are healthy")
}

fn object(entry: &InventoryEntry) -> String {
    format!("{} {}/{}", entry.kind, entry.namespace, entry.name)
}

/// `5m`, `90s`, `1h`: how a Go duration of whole seconds reads best.
fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// The check to run: the `previous` one, or a new one from `now` for a new set (`digest`), for
/// a first look, or for a set that was healthy and was `written` again (a drift repair). A
/// repair during a check keeps its deadline: a document that drifts on every pass must not
/// wait forever.
pub(crate) fn check_of(
    previous: Option<HealthCheckStatus>,
    digest: &str,
    written: bool,
    now: Timestamp,
) -> HealthCheckStatus {
    match previous {
        Some(check) if check.digest == digest && !(written && check.healthy) => check,
        _ => HealthCheckStatus { digest: digest.to_owned(), started_at: Time(now), healthy: false },
    }
}

/// Kinds kstatus counts as always healthy: not read (a Secret's data never enters the check).
fn always_healthy(entry: &InventoryEntry) -> bool {
    entry.api_version == "v1" && matches!(entry.kind.as_str(), "ConfigMap" | "Secret")
}

/// What the health check found, for the reconcile's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Waited {
    /// The registration's health as the check found it; `None` keeps the plan's.
    pub health: Option<Health>,
    /// Every object not healthy when the check failed, located.
    pub problems: Vec<Problem>,
    /// When to check again, sooner than the plan's requeue.
    pub recheck: Option<Duration>,
    /// The `status.healthCheck` to record (`None` without `spec.wait`).
    pub health_check: Option<HealthCheckStatus>,
}

/// Applies `spec.wait` after the apply carried out `plan`: the health the check found, and the
/// `status.healthCheck` to record. A plan that applied nothing successfully keeps its health
/// and the previous record.
#[tracing::instrument(name = "wait", skip_all)]
pub async fn wait(
    writer: &Writer,
    repo: &TenantRepository,
    plan: &Plan,
    executed: &Executed,
    now: Timestamp,
) -> Waited {
    let previous = repo.status.as_ref().and_then(|s| s.health_check.clone());
    if repo.spec.wait.is_none() {
        return Waited::default();
    }
    let kept = Waited { health_check: previous.clone(), ..Waited::default() };
    let (message, record) = match (&plan.health, &plan.record, &executed.error) {
        (Some(Health::Ready { message, .. }), Some(record), None) if !record.digest.is_empty() => (message, record),
        _ => return kept,
    };
    let timeout = match timeout_of(repo) {
        Ok(timeout) => timeout,
        Err(message) => {
            return Waited { health: Some(Health::Stalled { reason: REASON_INVALID_SPEC.into(), message }), ..kept };
        }
    };
    let check = check_of(previous, &record.digest, !executed.applied_objects.is_empty(), now);
    if check.healthy {
        let health = Health::Ready {
            reason: REASON_SUCCEEDED.into(),
            message: healthy_message(message, record.inventory.len()),
        };
        return Waited { health: Some(health), health_check: Some(check), ..Waited::default() };
    }

    let user = service_account_user(&repo.spec.target_namespace, &repo.spec.service_account_name);
    let checked = read(writer, &user, &record.inventory).await;
    let elapsed = Duration::try_from(now.duration_since(check.started_at.0)).unwrap_or_default();
    let decision = decide(message, &checked, &plan.origins, elapsed, timeout);
    Waited {
        health: Some(decision.health),
        problems: decision.problems,
        recheck: decision.recheck,
        health_check: Some(HealthCheckStatus { healthy: decision.healthy, ..check }),
    }
}

/// Reads every object of `inventory` as `user` and computes its kstatus health; an object that
/// cannot be read counts as not healthy, saying why.
async fn read(writer: &Writer, user: &str, inventory: &[InventoryEntry]) -> Vec<Checked> {
    let client = match writer.tenant(user) {
        Ok(client) => Some(client),
        Err(error) => {
            tracing::warn!(%error, "building the tenant's client for the health check");
            None
        }
    };
    let mut checked = Vec::with_capacity(inventory.len());
    for entry in inventory {
        let assessment = if always_healthy(entry) {
            health::compute(Some(&serde_json::json!({"apiVersion": entry.api_version, "kind": entry.kind})))
        } else {
            read_one(writer, client.as_ref(), entry).await
        };
        checked.push(Checked { entry: entry.clone(), assessment });
    }
    checked
}

async fn read_one(writer: &Writer, client: Option<&kube::Client>, entry: &InventoryEntry) -> Assessment {
    let unreadable = |why: String| Assessment { status: Status::InProgress, message: format!("cannot be read: {why}") };
    let Some(client) = client else { return unreadable("no client for the tenant".into()) };
    let resource = match writer.discovery().tenant_resource(&entry.api_version, &entry.kind).await {
        Ok(Ok(resource)) => resource,
        Ok(Err(refusal)) => return unreadable(refusal.message),
        Err(error) => return unreadable(error.to_string()),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &entry.namespace, &resource);
    match api.get_opt(&entry.name).await {
        Ok(live) => {
            let value = live.and_then(|live| serde_json::to_value(live).ok());
            health::compute(value.as_ref())
        }
        Err(error) => unreadable(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: &str, name: &str) -> InventoryEntry {
        let api_version = if kind == "Deployment" { "apps/v1" } else { "v1" };
        InventoryEntry {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: "team-a".into(),
            name: name.into(),
        }
    }

    fn checked(kind: &str, name: &str, status: Status, message: &str) -> Checked {
        Checked { entry: entry(kind, name), assessment: Assessment { status, message: message.into() } }
    }

    fn locations() -> Origins {
        use crate::apply::refusal::Origin;
        Origins::from([(
            entry("Deployment", "web"),
            Origin { file: "deploy/web.yaml".to_owned(), document: 1, line: 1, generator: None },
        )])
    }

    const APPLIED: &str = "applied 2 objects of revision 0123456 into team-a";
    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn healthy_when_every_object_is_current() {
        let all = [
            checked("ConfigMap", "settings", Status::Current, "always"),
            checked("Deployment", "web", Status::Current, "2 of 2"),
        ];
        let decision = decide(APPLIED, &all, &locations(), Duration::from_secs(3), MINUTE);
        assert!(decision.healthy);
        assert_eq!(
            decision.health,
            Health::Ready { reason: "Succeeded".into(), message: format!("{APPLIED}; all 2 objects are healthy") }
        );
    }

    #[test]
    fn while_waiting_the_objects_not_yet_healthy_are_named_with_their_file() {
        let some = [
            checked("ConfigMap", "settings", Status::Current, "always"),
            checked("Deployment", "web", Status::InProgress, "0 of 2 replicas available"),
        ];
        let decision = decide(APPLIED, &some, &locations(), Duration::from_secs(10), MINUTE);
        assert_eq!(
            decision.health,
            Health::Progressing {
                reason: REASON_HEALTH_CHECK_PENDING.into(),
                message: format!(
                    "{APPLIED}; waiting up to 1m for 1 of 2 objects to become healthy: Deployment team-a/web (deploy/web.yaml:1): 0 of 2 replicas available"
                )
            }
        );
        assert_eq!(decision.recheck, Some(Duration::from_secs(5)));
        assert!(decision.problems.is_empty());
    }

    #[test]
    fn past_the_timeout_the_check_fails_with_located_problems() {
        let some = [checked("Deployment", "web", Status::InProgress, "0 of 2 replicas available")];
        let decision = decide(APPLIED, &some, &locations(), MINUTE, MINUTE);
        let Health::Stalled { reason, message } = &decision.health else { panic!("{:?}", decision.health) };
        assert_eq!(reason, REASON_HEALTH_CHECK_FAILED);
        assert_eq!(
            message,
            &format!(
                "{APPLIED}, but 1 of 1 objects is not healthy after the wait of 1m: Deployment team-a/web (deploy/web.yaml:1): 0 of 2 replicas available"
            )
        );
        assert_eq!(decision.problems.len(), 1);
        assert_eq!(
            decision.problems[0].to_string(),
            "deploy/web.yaml:1: Deployment team-a/web is not healthy: 0 of 2 replicas available"
        );
        assert_eq!(decision.recheck, None, "checked again at the interval");
    }

    #[test]
    fn a_failed_object_fails_the_check_before_the_timeout() {
        let some = [checked("Deployment", "web", Status::Failed, "progress deadline exceeded")];
        let decision = decide(APPLIED, &some, &locations(), Duration::from_secs(5), MINUTE);
        let Health::Stalled { message, .. } = &decision.health else { panic!("{:?}", decision.health) };
        assert!(message.contains("1 of 1 objects failed after the wait of 1m"), "{message}");
    }

    #[test]
    fn an_object_without_a_location_is_still_named_and_long_lists_are_cut() {
        let many: Vec<Checked> =
            (0..12).map(|i| checked("Pod", &format!("p{i}"), Status::InProgress, "pending")).collect();
        let decision = decide(APPLIED, &many, &Origins::new(), Duration::ZERO, MINUTE);
        let Health::Progressing { message, .. } = &decision.health else { panic!() };
        assert!(message.contains("Pod team-a/p0: pending"), "{message}");
        assert!(message.ends_with("and 2 more"), "{message}");
    }

    #[test]
    fn rechecks_start_quick_slow_down_and_meet_the_deadline() {
        assert_eq!(recheck_after(Duration::ZERO, MINUTE * 5), Duration::from_secs(2));
        assert_eq!(recheck_after(Duration::from_secs(20), MINUTE * 5), Duration::from_secs(10));
        assert_eq!(recheck_after(MINUTE * 3, MINUTE * 5), Duration::from_secs(30));
        assert_eq!(recheck_after(Duration::from_secs(58), MINUTE), Duration::from_secs(2));
        assert_eq!(recheck_after(Duration::from_secs(59), MINUTE), Duration::from_secs(1));
    }

    #[test]
    fn a_repair_during_a_check_keeps_its_deadline_and_one_after_health_starts_a_new_check() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let check = |healthy| HealthCheckStatus { digest: "d1".into(), started_at: Time(at(100)), healthy };
        assert_eq!(check_of(None, "d1", false, at(200)).started_at, Time(at(200)), "a first look");
        assert_eq!(check_of(Some(check(false)), "d1", true, at(200)), check(false), "repaired while pending");
        assert_eq!(check_of(Some(check(true)), "d1", false, at(200)), check(true), "unchanged and healthy");
        let repaired = check_of(Some(check(true)), "d1", true, at(200));
        assert_eq!((repaired.started_at, repaired.healthy), (Time(at(200)), false), "repaired after health");
        let new_set = check_of(Some(check(true)), "d2", true, at(300));
        assert_eq!((new_set.digest.as_str(), new_set.started_at), ("d2", Time(at(300))));
    }

    #[test]
    fn the_timeout_defaults_to_five_minutes_and_must_be_a_positive_duration() {
        let mut repo = TenantRepository::test();
        repo.spec.wait = Some(Default::default());
        assert_eq!(timeout_of(&repo), Ok(DEFAULT_TIMEOUT));
        repo.spec.wait = Some(crate::api::tenant_repository::WaitSpec { timeout: Some("90s".into()) });
        assert_eq!(timeout_of(&repo), Ok(Duration::from_secs(90)));
        repo.spec.wait = Some(crate::api::tenant_repository::WaitSpec { timeout: Some("0s".into()) });
        assert!(timeout_of(&repo).unwrap_err().starts_with("spec.wait.timeout: `0s`"));
    }
}
