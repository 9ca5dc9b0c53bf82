//! What a tenant is told about their pushes, in their own namespace: the registration's
//! [`SyncStatus`] and Warning Events about it (docs/feedback.md).
//!
//! The decisions are plain functions over data: [`sync_status`] (the object a reconcile calls
//! for), [`changes`] (the write, only of what changed: an unchanged cycle writes nothing),
//! [`notices`] (the Events, one per occurrence) and [`stale`] (whether a SyncStatus outlived
//! its registration or its target namespace). [`update`] reads the previous object from the
//! controller's watch of SyncStatuses ([`SyncStatuses`]) and sends the write through the one
//! writer; a failure is returned, never raised: the apply is done already and stays as it is
//! (it ends in the registration's `SyncStatusWritten` condition, set by [`super::summarize()`]).
//! [`step`] is the reconcile's step: the registration's status it shows is the one
//! [`summarize`] makes of the report so far, since its own outcome only adds
//! `SyncStatusWritten`, a condition the SyncStatus leaves out.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use tracing::Instrument;

use super::Context;
use super::concluded::Concluded;
use super::execute::Executed;
use super::report::Report;
use super::summarize::summarize;
use crate::api::conditions::{
    APPLIED, REASON_APPLY_FAILED, REASON_DRIFT_REPAIRED, REASON_PRUNE_FAILED, REASON_PRUNED, REASON_VALIDATION_FAILED,
    SYNC_STATUS_WRITTEN,
};
use crate::api::sync_status::{LocatedProblem, RegistrationReference, SyncReport};
use crate::api::tenant_repository::{InventoryEntry, TenantRepository, TenantRepositoryStatus};
use crate::api::{API_VERSION, SyncStatus, SyncStatusSpec, SyncStatusStatus, labels};
use crate::apply::{Done, Write, Writer};
use crate::controller::events::{self, EventSink, Notice};
use crate::controller::tenant_text::{self, Object};
use crate::problem::Problem;
use crate::text::redact_userinfo;
use crate::text::short_revision;

/// How long a reconcile waits for the first list of the SyncStatus watch.
const STORE_READY: Duration = Duration::from_secs(30);
/// Objects named in one Event before `and N more`.
const NAMED: usize = 5;

/// The controller's view of the SyncStatuses (its watch), for the reconciler.
#[derive(Clone)]
pub struct SyncStatuses {
    /// Every SyncStatus the controller manages (label `app.kubernetes.io/managed-by: cdtarget`,
    /// and the shard selector when sharded).
    pub store: Store<SyncStatus>,
    /// Whether `store` has listed them, awaited by every reconcile at once. kube-runtime's
    /// `Store::wait_until_ready` wakes only the last of several tasks waiting on it (one
    /// oneshot receiver, one waker): on a first pass all reconciles but one waited out the 30 s
    /// bound. A shared future wakes them all.
    listed: Shared<BoxFuture<'static, bool>>,
}

impl SyncStatuses {
    /// The reconcilers' view of `store`.
    pub fn new(store: Store<SyncStatus>) -> Self {
        let listing = store.clone();
        let listed = async move { listing.wait_until_ready().await.is_ok() }.boxed().shared();
        SyncStatuses { store, listed }
    }
}

/// What [`sync_status`] is computed from.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The registration.
    pub repo: &'a TenantRepository,
    /// Its namespace (the platform namespace).
    pub platform_namespace: &'a str,
    /// Its status after this reconcile.
    pub status: &'a TenantRepositoryStatus,
    /// What the reconcile concluded (the revision fetched, every located problem, the record).
    pub concluded: &'a Concluded,
    /// What the execution did.
    pub executed: &'a Executed,
    /// The SyncStatus as the watch holds it.
    pub previous: Option<&'a SyncStatus>,
    /// Now.
    pub now: &'a Time,
}

/// The SyncStatus a reconcile calls for: in `spec.targetNamespace`, named after the
/// registration, with the registration's labels (so a shard's selector selects it too) and
/// `app.kubernetes.io/managed-by: cdtarget`. Its conditions and problems are the registration's
/// as [`tenant_text`] lets a tenant read them. What the last reconcile that changed something did
/// is kept from `previous` when this one changed nothing, and so are the problems when no
/// revision was evaluated (a failed fetch says nothing new about the tenant's documents).
pub fn sync_status(inputs: &Inputs) -> SyncStatus {
    let Inputs { repo, platform_namespace, status, concluded, executed, previous, now } = *inputs;
    let before = previous.and_then(|p| p.status.clone()).unwrap_or_default();
    let mut labels: BTreeMap<String, String> = repo.labels().clone();
    labels.insert(labels::MANAGED_BY.into(), labels::MANAGED_BY_VALUE.into());
    let mut object = SyncStatus::new(
        &repo.name_any(),
        SyncStatusSpec {
            registration: RegistrationReference { namespace: platform_namespace.to_owned(), name: repo.name_any() },
            url: redact_userinfo(&repo.spec.url),
            git_ref: repo.spec.git_ref.as_ref().map(describe_ref),
            path: repo.spec.path.clone(),
        },
    );
    object.metadata.namespace = Some(repo.spec.target_namespace.clone());
    object.metadata.labels = Some(labels);
    let problems = if concluded.fetched_revision.is_some() {
        located(&tenant_text::problems_for_tenant(&concluded.problems))
    } else {
        before.problems.clone()
    };
    let changed =
        !executed.applied_objects.is_empty() || !executed.pruned_objects.is_empty() || !executed.repaired.is_empty();
    let last_sync = if changed {
        Some(SyncReport {
            time: seconds(now),
            revision: concluded.record.as_ref().map(|r| r.revision.clone()).filter(|r| !r.is_empty()),
            applied: executed.applied_objects.clone(),
            pruned: executed.pruned_objects.clone(),
            repaired: executed.repaired.clone(),
        })
    } else {
        before.last_sync.clone()
    };
    object.status = Some(SyncStatusStatus {
        observed_generation: status.observed_generation,
        // Written for the tenant: the platform's detail stays on the registration.
        conditions: status
            .conditions
            .iter()
            .filter(|c| c.type_ != SYNC_STATUS_WRITTEN)
            .map(|c| tenant_text::condition_for_tenant(Object::Registration, c))
            .collect(),
        last_fetched_revision: status.last_fetched_revision.clone(),
        last_applied_revision: status.last_applied_revision.clone(),
        problems,
        last_sync,
        inventory: status.inventory.clone(),
    });
    object
}

/// The write that takes `previous` to `next`, sending only what changed: the object (labels,
/// spec) when it is new or they changed, the status when it changed; `None` when nothing did.
pub fn changes(previous: Option<&SyncStatus>, next: &SyncStatus) -> Option<Write> {
    let labels_held = |p: &SyncStatus| next.labels().iter().all(|(k, v)| p.labels().get(k) == Some(v));
    let object_changed = previous.is_none_or(|p| p.spec != next.spec || !labels_held(p));
    let status_changed = previous.is_none_or(|p| p.status != next.status);
    if !object_changed && !status_changed {
        return None;
    }
    let object = object_changed.then(|| {
        json!({
            "apiVersion": API_VERSION,
            "kind": "SyncStatus",
            "metadata": {
                "name": next.name_any(),
                "namespace": next.namespace(),
                "labels": next.labels(),
            },
            "spec": serde_json::to_value(&next.spec).unwrap_or_default(),
        })
    });
    let status = status_changed.then(|| serde_json::to_value(&next.status).unwrap_or(Value::Null));
    Some(Write::SyncStatus { namespace: next.namespace().unwrap_or_default(), name: next.name_any(), object, status })
}

/// The Events a reconcile calls for, each once per occurrence: a revision refused (validation,
/// apply or prune failure) when the refusal is new (another revision, or another message), and
/// every prune and drift repair that happened, naming the objects. Their notes come from `next`
/// (what [`sync_status`] lets the tenant read) and the objects sent, never from the registration.
pub fn notices(previous: Option<&SyncStatus>, next: &SyncStatus, executed: &Executed) -> Vec<Notice> {
    let mut notices = Vec::new();
    let applied = |s: Option<&SyncStatus>| {
        s.and_then(|s| s.status.as_ref()).and_then(|s| s.conditions.iter().find(|c| c.type_ == APPLIED).cloned())
    };
    let fetched = |s: Option<&SyncStatus>| s.and_then(|s| s.status.as_ref()?.last_fetched_revision.clone());
    if let Some(now) = applied(Some(next)).filter(|c| c.status == "False") {
        let refused =
            [REASON_VALIDATION_FAILED, REASON_APPLY_FAILED, REASON_PRUNE_FAILED].contains(&now.reason.as_str());
        let before = applied(previous);
        let new = before.is_none_or(|b| b.status != now.status || b.reason != now.reason || b.message != now.message)
            || fetched(previous) != fetched(Some(next));
        if refused && new {
            let note = if now.reason == REASON_VALIDATION_FAILED {
                let problems = next.status.as_ref().map(|s| s.problems.as_slice()).unwrap_or_default();
                refusal_note(fetched(Some(next)).as_deref().unwrap_or_default(), problems, &next.name_any())
            } else {
                now.message.clone()
            };
            notices.push(Notice::warning(&now.reason, note));
        }
    }
    if !executed.pruned_objects.is_empty() {
        let note = format!("deleted, since they left Git: {}", named(&executed.pruned_objects));
        notices.push(Notice::warning(REASON_PRUNED, note));
    }
    if !executed.repaired.is_empty() {
        let note = format!("changed on the cluster, put back as Git says: {}", named(&executed.repaired));
        notices.push(Notice::warning(REASON_DRIFT_REPAIRED, note));
    }
    notices
}

/// Whether `status` outlived its registration: it names a registration of this platform
/// namespace that is gone (`registration` is `None`) or that now targets another namespace.
/// A SyncStatus of another platform namespace (another installation) is never stale here.
pub fn stale(status: &SyncStatus, platform_namespace: &str, registration: Option<&TenantRepository>) -> bool {
    if status.spec.registration.namespace != platform_namespace {
        return false;
    }
    match registration {
        None => true,
        Some(repo) => status.namespace().as_deref() != Some(repo.spec.target_namespace.as_str()),
    }
}

/// The step of a reconcile, after the apply whatever its outcome: the tenant's SyncStatus and
/// Events ([`update`]) for the registration's status as [`summarize`] makes it of what the
/// reconcile `concluded` and the `report` so far (the SyncStatus leaves out the one condition
/// its own outcome sets). A failed write is logged, and returned for `SyncStatusWritten` and a
/// retry; it never undoes anything. `None` when the controller keeps no SyncStatuses (tests).
pub async fn step(
    ctx: &Context,
    repo: &TenantRepository,
    namespace: &str,
    concluded: &Concluded,
    report: &Report,
    now: &Time,
) -> Option<Result<(), String>> {
    let statuses = ctx.sync_statuses.as_ref()?;
    let status = summarize(repo, concluded, report, now);
    let inputs = Inputs {
        repo,
        platform_namespace: namespace,
        status: &status,
        concluded,
        executed: &report.executed,
        previous: None,
        now,
    };
    let written = update(statuses, &ctx.frame.writer, ctx.frame.recorder.as_ref(), inputs)
        .instrument(tracing::info_span!("sync_status"))
        .await;
    if let Err(error) = &written {
        tracing::warn!(%error, "writing the SyncStatus failed; retried");
    }
    Some(written)
}

/// Writes the SyncStatus of this reconcile when it changed and records the Events it calls for
/// (regarding the SyncStatus, in the tenant namespace). The error of a failed write is returned
/// for the registration's conditions; nothing is undone.
pub async fn update(
    statuses: &SyncStatuses,
    writer: &Writer,
    recorder: Option<&EventSink>,
    inputs: Inputs<'_>,
) -> Result<(), String> {
    if tokio::time::timeout(STORE_READY, statuses.listed.clone()).await != Ok(true) {
        return Err("the controller's watch of SyncStatuses has not listed them yet".into());
    }
    let key = ObjectRef::<SyncStatus>::new(&inputs.repo.name_any()).within(&inputs.repo.spec.target_namespace);
    let previous = statuses.store.get(&key);
    let inputs = Inputs { previous: previous.as_deref(), ..inputs };
    let mut next = sync_status(&inputs);
    let (written, written_uid) = match changes(previous.as_deref(), &next) {
        Some(write) => match writer.execute(write).await {
            Ok(Done::SyncStatusWritten { uid }) => (Ok(()), uid),
            Ok(_) => (Ok(()), None),
            Err(e) => (Err(e.to_string()), None),
        },
        None => (Ok(()), None),
    };
    // The Events regard the SyncStatus (its reference: kind, namespace, name, uid); one created
    // by this very reconcile is not in the watch's store yet, so its uid is the write's.
    let notices = notices(previous.as_deref(), &next, inputs.executed);
    next.metadata.uid = previous.as_ref().and_then(|p| p.uid()).or(written_uid);
    for notice in notices {
        events::publish(recorder, &next, Some(notice)).await;
    }
    written
}

fn describe_ref(git_ref: &crate::api::tenant_repository::GitRef) -> String {
    match (&git_ref.branch, &git_ref.tag, &git_ref.commit) {
        (Some(branch), _, _) => format!("branch {branch}"),
        (_, Some(tag), _) => format!("tag {tag}"),
        (_, _, Some(commit)) => format!("commit {commit}"),
        _ => "branch main".into(),
    }
}

/// The problems as the SyncStatus carries them, cleared of URL userinfo (a tenant document may
/// quote a URL with credentials, and the problem may quote the document).
fn located(problems: &[Problem]) -> Vec<LocatedProblem> {
    let number = |n: Option<usize>| n.and_then(|n| i64::try_from(n).ok());
    problems
        .iter()
        .map(|p| LocatedProblem {
            file: p.file.as_deref().map(redact_userinfo),
            document: number(p.document),
            line: number(p.line),
            field: redact_userinfo(&p.field),
            message: redact_userinfo(&p.message),
        })
        .collect()
}

/// `file:DOC: field: message`, as [`Problem`] prints it.
fn printed(problem: &LocatedProblem) -> String {
    let as_problem = Problem {
        file: problem.file.clone(),
        document: problem.document.and_then(|d| usize::try_from(d).ok()),
        line: problem.line.and_then(|l| usize::try_from(l).ok()),
        field: problem.field.clone(),
        message: problem.message.clone(),
    };
    as_problem.to_string()
}

fn refusal_note(revision: &str, problems: &[LocatedProblem], name: &str) -> String {
    let short = short_revision(revision);
    let first: Vec<String> = problems.iter().take(3).map(printed).collect();
    let more = problems.len().saturating_sub(first.len());
    let mut note = format!(
        "revision {short} was refused, nothing of it was applied ({} problems): {}",
        problems.len(),
        first.join("; ")
    );
    if more > 0 {
        note.push_str(&format!("; and {more} more (kubectl get syncstatus {name} -o yaml)"));
    }
    note
}

fn named(entries: &[InventoryEntry]) -> String {
    let mut text = entries.iter().take(NAMED).map(|e| format!("{} {}", e.kind, e.name)).collect::<Vec<_>>().join(", ");
    if entries.len() > NAMED {
        text.push_str(&format!(" and {} more", entries.len() - NAMED));
    }
    text
}

/// RFC 3339 to the second, as the API server stores times (a finer one would never compare
/// equal to what the watch reads back).
fn seconds(now: &Time) -> String {
    now.0.round(k8s_openapi::jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_else(|_| now.0.to_string())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    #[tokio::test]
    async fn every_reconcile_waiting_for_the_first_list_goes_on_once_it_is_done() {
        let (store, mut reflected) = kube::runtime::reflector::store::<SyncStatus>();
        let statuses = SyncStatuses::new(store);
        let waiters: Vec<_> = (0..5).map(|_| tokio::spawn(statuses.listed.clone())).collect();
        tokio::task::yield_now().await; // every waiter is parked on the store
        assert!(waiters.iter().all(|w| !w.is_finished()));
        reflected.apply_watcher_event(&kube::runtime::watcher::Event::Init);
        reflected.apply_watcher_event(&kube::runtime::watcher::Event::InitDone);
        // One thread: the woken waiters run while this task yields.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(waiters.iter().all(|w| w.is_finished()), "a waiter was left asleep after the list was done");
        for waiter in waiters {
            assert!(waiter.await.unwrap());
        }
    }
    use crate::api::conditions::{READY, REASON_INVALID_POLICY, REASON_SUCCEEDED, STALLED};
    use crate::controller::conditions::Health;
    use crate::controller::conditions::Verdict;
    use crate::controller::tenant_repository::concluded::conclude;
    use crate::controller::tenant_repository::plan::{Plan, Record};
    use crate::controller::tenant_repository::wait::Waited;

    const PLATFORM: &str = "cdtarget-system";

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn entry(kind: &str, name: &str) -> InventoryEntry {
        InventoryEntry::test("v1", kind, name)
    }

    /// The plan of a revision applied in full (`problems` empty) or refused by validation.
    fn plan_of(revision: &str, problems: Vec<Problem>) -> Plan {
        let ok = problems.is_empty();
        let (reason, message) = if ok {
            (REASON_SUCCEEDED, format!("applied 1 objects of revision {revision}"))
        } else {
            let listed = problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            (REASON_VALIDATION_FAILED, format!("revision {revision} was not applied: {listed}"))
        };
        Plan {
            health: Some(if ok {
                Health::Ready { reason: reason.into(), message: message.clone() }
            } else {
                Health::Stalled { reason: reason.into(), message: message.clone() }
            }),
            source_ready: Some(Verdict::new(true, REASON_SUCCEEDED, format!("fetched revision {revision}"))),
            applied: Some(Verdict::new(ok, reason, message)),
            fetched_revision: Some(revision.into()),
            record: ok.then(|| Record {
                revision: revision.into(),
                digest: "d".into(),
                inventory: vec![entry("ConfigMap", "settings")],
            }),
            problems,
            ..Plan::default()
        }
    }

    /// One reconcile of `repo`: the SyncStatus it calls for after `previous`, and the
    /// registration as it is afterwards (its status written).
    fn reconcile(
        repo: &TenantRepository,
        plan: &Plan,
        executed: &Executed,
        previous: Option<&SyncStatus>,
        now: i64,
    ) -> (SyncStatus, TenantRepository) {
        let concluded = conclude(repo, plan, &Executed::default(), &Waited::default());
        let status = summarize(repo, &concluded, &Report::default(), &at(now));
        let inputs = Inputs {
            repo,
            platform_namespace: PLATFORM,
            status: &status,
            concluded: &concluded,
            executed,
            previous,
            now: &at(now),
        };
        let next = sync_status(&inputs);
        let mut repo = repo.clone();
        repo.status = Some(status);
        (next, repo)
    }

    /// `object` as a watch reads it back (through JSON).
    fn read_back(object: &SyncStatus) -> SyncStatus {
        serde_json::from_value(serde_json::to_value(object).unwrap()).unwrap()
    }

    fn applied(names: &[&str]) -> Executed {
        Executed { applied_objects: names.iter().map(|n| entry("ConfigMap", n)).collect(), ..Executed::default() }
    }

    fn problems(n: usize) -> Vec<Problem> {
        (0..n)
            .map(|i| {
                Problem::field(format!("spec.ip[{i}]"), "not an IP address").located(
                    "deploy/agents.yaml",
                    Some(1),
                    Some(3),
                )
            })
            .collect()
    }

    #[test]
    fn a_good_push_reports_revision_conditions_and_what_was_applied_in_the_target_namespace() {
        let repo = TenantRepository::test().with_branch("main").with_path("deploy");
        let (next, _) = reconcile(&repo, &plan_of("abc123", vec![]), &applied(&["settings"]), None, 100);
        assert_eq!(next.namespace().as_deref(), Some(repo.spec.target_namespace.as_str()));
        assert_eq!(next.name_any(), repo.name_any());
        assert_eq!(next.labels().get(labels::MANAGED_BY).map(String::as_str), Some("cdtarget"));
        assert_eq!(next.spec.registration, RegistrationReference { namespace: PLATFORM.into(), name: repo.name_any() });
        assert_eq!((next.spec.git_ref.as_deref(), next.spec.path.as_deref()), (Some("branch main"), Some("deploy")));
        let status = next.status.clone().unwrap();
        assert_eq!(status.last_applied_revision.as_deref(), Some("abc123"));
        assert!(status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let sync = status.last_sync.unwrap();
        assert_eq!((sync.time.as_str(), sync.revision.as_deref()), ("1970-01-01T00:01:40Z", Some("abc123")));
        assert_eq!(sync.applied, [entry("ConfigMap", "settings")]);
        assert!(status.problems.is_empty());
        // The first write sends the object and its status.
        assert!(matches!(changes(None, &next), Some(Write::SyncStatus { object: Some(_), status: Some(_), .. })));
    }

    #[test]
    fn an_unchanged_cycle_writes_nothing_and_keeps_what_the_last_change_did() {
        let repo = TenantRepository::test();
        let (first, repo) = reconcile(&repo, &plan_of("abc123", vec![]), &applied(&["settings"]), None, 100);
        let watched = read_back(&first);
        // The next poll: same revision, nothing drifted, nothing sent.
        let (again, repo) = reconcile(&repo, &plan_of("abc123", vec![]), &Executed::default(), Some(&watched), 400);
        assert_eq!(changes(Some(&watched), &again), None, "{again:#?}");
        assert_eq!(again.status.as_ref().unwrap().last_sync, first.status.as_ref().unwrap().last_sync);
        // A status change alone sends the status alone.
        let (refused, _) = reconcile(&repo, &plan_of("def456", problems(1)), &Executed::default(), Some(&watched), 700);
        assert!(matches!(
            changes(Some(&watched), &refused),
            Some(Write::SyncStatus { object: None, status: Some(_), .. })
        ));
    }

    #[test]
    fn a_refused_revision_lists_every_located_problem_and_warns_once_per_refusal() {
        let repo = TenantRepository::test();
        let (good, repo) = reconcile(&repo, &plan_of("abc123", vec![]), &applied(&["settings"]), None, 100);
        let good = read_back(&good);
        let (refused, repo) = reconcile(&repo, &plan_of("def456", problems(5)), &Executed::default(), Some(&good), 200);
        let status = refused.status.clone().unwrap();
        assert_eq!(status.problems.len(), 5);
        assert_eq!(
            status.problems[4],
            LocatedProblem {
                file: Some("deploy/agents.yaml".into()),
                document: Some(1),
                line: Some(3),
                field: "spec.ip[4]".into(),
                message: "not an IP address".into()
            }
        );
        // What ran before is still what was applied last.
        assert_eq!(status.last_applied_revision.as_deref(), Some("abc123"));
        assert!(status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "False"));
        let notices = notices(Some(&good), &refused, &Executed::default());
        assert_eq!(notices.len(), 1, "{notices:#?}");
        assert!(notices[0].warning && notices[0].reason == REASON_VALIDATION_FAILED);
        let note = &notices[0].note;
        assert!(note.contains("revision def456 was refused") && note.contains("(5 problems)"), "{note}");
        assert!(
            note.contains("deploy/agents.yaml:1: spec.ip[0]: not an IP address") && note.contains("and 2 more"),
            "{note}"
        );
        // The next poll of the same refused revision: no Event, no write.
        let watched = read_back(&refused);
        let (again, _) = reconcile(&repo, &plan_of("def456", problems(5)), &Executed::default(), Some(&watched), 500);
        assert!(notices_of(&watched, &again).is_empty());
        assert_eq!(changes(Some(&watched), &again), None);
    }

    fn notices_of(previous: &SyncStatus, next: &SyncStatus) -> Vec<Notice> {
        notices(Some(previous), next, &Executed::default())
    }

    #[test]
    fn a_failed_fetch_keeps_the_problems_of_the_last_evaluated_revision() {
        let repo = TenantRepository::test();
        let (refused, repo) = reconcile(&repo, &plan_of("def456", problems(2)), &Executed::default(), None, 100);
        let mut fetch_failed = plan_of("def456", problems(2));
        fetch_failed.fetched_revision = None;
        fetch_failed.problems = Vec::new();
        let (after, _) = reconcile(&repo, &fetch_failed, &Executed::default(), Some(&read_back(&refused)), 200);
        assert_eq!(after.status.unwrap().problems.len(), 2);
    }

    #[test]
    fn prunes_and_drift_repairs_are_warning_events_naming_the_objects() {
        let repo = TenantRepository::test();
        let (good, repo) = reconcile(&repo, &plan_of("abc123", vec![]), &applied(&["settings"]), None, 100);
        let executed = Executed {
            applied_objects: vec![entry("ConfigMap", "settings")],
            repaired: vec![entry("ConfigMap", "settings")],
            pruned_objects: (0..7).map(|i| entry("ConfigMap", &format!("old-{i}"))).collect(),
            ..Executed::default()
        };
        let (next, _) = reconcile(&repo, &plan_of("abc123", vec![]), &executed, Some(&read_back(&good)), 200);
        let notices = notices(Some(&read_back(&good)), &next, &executed);
        let by_reason = |reason: &str| notices.iter().find(|n| n.reason == reason).map(|n| n.note.clone()).unwrap();
        let pruned = by_reason(REASON_PRUNED);
        assert!(
            pruned.contains("ConfigMap old-0") && pruned.contains("ConfigMap old-4") && pruned.contains("and 2 more"),
            "{pruned}"
        );
        assert!(by_reason(REASON_DRIFT_REPAIRED).contains("ConfigMap settings"));
        assert!(notices.iter().all(|n| n.warning));
        let sync = next.status.unwrap().last_sync.unwrap();
        assert_eq!((sync.pruned.len(), sync.repaired.len()), (7, 1));
    }

    #[test]
    fn url_userinfo_never_reaches_the_sync_status_or_its_events() {
        // A hostile tenant quotes a URL with credentials in a document; the registration's own
        // URL holds a token too.
        let repo = TenantRepository::test().with_url("https://oauth2:glpat-registration@gitlab.example.com/t/r.git");
        let quoted = Problem::field(
            "spec.config.url",
            "https://agent:glpat-s3cr3t@dev.azure.com/acme is not https://dev.azure.com/...",
        )
        .located("deploy/agents.yaml", Some(1), Some(1));
        let (next, _) = reconcile(&repo, &plan_of("def456", vec![quoted]), &Executed::default(), None, 100);
        let text = serde_json::to_string(&next).unwrap();
        assert!(!text.contains("glpat"), "{text}");
        assert!(
            text.contains("https://***@dev.azure.com/acme") && text.contains("https://***@gitlab.example.com/t/r.git")
        );
        for notice in notices(None, &next, &Executed::default()) {
            assert!(!notice.recorded_note().contains("glpat"), "{notice:?}");
        }
    }

    #[test]
    fn a_platform_failure_reaches_the_sync_status_as_its_fixed_sentence_and_the_registration_keeps_the_detail() {
        let repo = TenantRepository::test();
        let detail =
            "the platform policy is invalid (ask a cluster admin): egress.nat64Prefixes[0]: `10.99.0.0/16` is IPv4";
        let mut invalid_policy = plan_of("def456", vec![]);
        invalid_policy.health = Some(Health::Stalled { reason: REASON_INVALID_POLICY.into(), message: detail.into() });
        invalid_policy.applied = Some(Verdict::new(false, REASON_INVALID_POLICY, detail));
        invalid_policy.record = None;
        let (next, registration) = reconcile(&repo, &invalid_policy, &Executed::default(), None, 100);
        let conditions = next.status.unwrap().conditions;
        for kind in [READY, STALLED, APPLIED] {
            let condition = conditions.iter().find(|c| c.type_ == kind).unwrap();
            assert_eq!(condition.reason, REASON_INVALID_POLICY);
            assert_eq!(condition.message, tenant_text::PLATFORM_CONFIGURATION, "{kind}");
        }
        let kept = registration.status.unwrap().conditions;
        assert!(kept.iter().filter(|c| c.type_ != "SourceReady").all(|c| c.message == detail), "{kept:#?}");
    }

    #[test]
    fn a_sync_status_is_stale_when_its_registration_is_gone_or_targets_another_namespace() {
        let repo = TenantRepository::test();
        let (status, _) = reconcile(&repo, &plan_of("abc123", vec![]), &Executed::default(), None, 100);
        assert!(!stale(&status, PLATFORM, Some(&repo)));
        assert!(stale(&status, PLATFORM, None), "registration deleted");
        let mut moved = repo.clone();
        moved.spec.target_namespace = "team-b".into();
        assert!(stale(&status, PLATFORM, Some(&moved)), "registration now targets team-b");
        // Another installation's (another platform namespace): never touched.
        assert!(!stale(&status, "other-platform", None));
    }
}
