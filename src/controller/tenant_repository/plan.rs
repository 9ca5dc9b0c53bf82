//! The TenantRepository reconciler's decision, a pure function over what [`super::observe`]
//! read: what to apply and prune, which conditions to report, what to record, and when to come
//! back. Nothing is lost on failure: a fetch, load or validation failure applies and prunes
//! nothing, and the record keeps the last applied revision and the inventory. The plan is the
//! decision only: what the later steps find is in the reconcile's [`super::report::Report`],
//! and [`super::concluded`] turns both into what the reconcile concluded.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::observe::Observed;
use super::{STALLED_RESYNC, TRANSIENT_RETRY, WAIT_RETRY};
use crate::api::conditions::{
    REASON_INVALID_POLICY, REASON_INVALID_SPEC, REASON_SECRET_NOT_FOUND, REASON_SUCCEEDED, REASON_VALIDATION_FAILED,
};
use crate::api::tenant_repository::{InventoryEntry, TenantRepository};
use crate::apply::applied::{Digests, digests_of, unchanged};
use crate::apply::refusal::{Origin, Origins};
use crate::apply::server_side;
use crate::apply::{entry_of, inventory_of, prune_plan};
use crate::controller::conditions::{Health, Verdict};
use crate::error::{Classify, Schedule};
use crate::problem::Problem;
use crate::source::registration::{DEFAULT_INTERVAL, interval_of};
use crate::text::redact_userinfo;
use crate::text::short_revision;

/// When the reconciler comes back after a failed fetch: a stalled source waits for a change of
/// the registration or its Secret (both watched), a missing ref for the next poll.
pub(crate) fn fetch_schedule(interval: Duration) -> Schedule {
    Schedule { stalled: STALLED_RESYNC, waiting: interval, transient: TRANSIENT_RETRY }
}

/// When the reconciler comes back after a failed apply or prune (and in its error policy): a
/// refused object waits for a push, which the next poll picks up.
pub(crate) fn apply_schedule(interval: Duration) -> Schedule {
    Schedule { stalled: interval, waiting: interval, transient: TRANSIENT_RETRY }
}

/// What one reconcile decided (the default: nothing at all, as for a suspended registration).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The overall health; `None` while suspended (`Ready` then keeps its status).
    pub health: Option<Health>,
    /// `SourceReady`; `None` leaves it as it is.
    pub source_ready: Option<Verdict>,
    /// `Applied`; `None` leaves it as it is.
    pub applied: Option<Verdict>,
    /// The objects to server-side apply, in order; `None` applies nothing.
    pub apply: Option<Vec<Value>>,
    /// The set was applied before (same revision, same rendered set): `apply` holds it, but only
    /// objects whose live copy no longer holds what Git says are sent (drift is repaired, an
    /// unchanged cycle writes nothing).
    pub only_drifted: bool,
    /// Objects of `apply` this process applied before exactly as they are now
    /// ([`Plan::skip_unchanged`]): after a new revision, only the objects it changed are sent,
    /// and these only when their live copy drifted.
    pub unchanged: BTreeSet<InventoryEntry>,
    /// The digest of each object of `apply` as sent, remembered once the set is applied.
    pub digests: Option<Arc<Digests>>,
    /// The objects to delete (they left Git), dependents first.
    pub prune: Vec<InventoryEntry>,
    /// The inventory to record before anything is applied, when the set holds objects the
    /// recorded inventory does not: the recorded one plus the new set. An apply cut short after
    /// creating some of them (the process killed, the Lease lost, a failed status write) then
    /// leaves nothing that a later prune cannot see. `None`: nothing new, nothing to record first.
    pub intent: Option<Vec<InventoryEntry>>,
    /// The commit fetched, when one was.
    pub fetched_revision: Option<String>,
    /// The record to keep once `apply` and `prune` succeeded; `None` keeps the previous one.
    pub record: Option<Record>,
    /// When to reconcile again; `None` waits for a change of the registration.
    pub requeue: Option<Duration>,
    /// Every located problem of the evaluated revision (validation, or objects the API server
    /// refused), as data for the tenant's feedback; empty when there is none.
    pub problems: Vec<Problem>,
    /// Where each object of `apply` came from (file, document, line), so that an object the API
    /// server refuses is reported at its document ([`super::concluded`]).
    pub origins: Origins,
}

/// What status records of an applied set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The applied commit.
    pub revision: String,
    /// Digest of the applied objects.
    pub digest: String,
    /// Every applied object.
    pub inventory: Vec<InventoryEntry>,
}

/// Decides what to do with `repo` given what was read. `jitter` is added to the interval so that
/// registrations created together do not poll together.
pub fn plan(repo: &TenantRepository, observed: Observed, jitter: Duration) -> Plan {
    let status = repo.status.clone().unwrap_or_default();
    let interval = interval_of(&repo.spec).unwrap_or(DEFAULT_INTERVAL) + jitter;
    let nothing = |health: Health, source_ready: Option<Verdict>, applied: Option<Verdict>, requeue| Plan {
        health: Some(health),
        source_ready,
        applied,
        requeue: Some(requeue),
        ..Plan::default()
    };

    match observed {
        Observed::Suspended => Plan::default(),
        Observed::InvalidSpec(message) => {
            let verdict = Verdict::new(false, REASON_INVALID_SPEC, &message);
            nothing(stalled(REASON_INVALID_SPEC, message), Some(verdict), None, STALLED_RESYNC)
        }
        Observed::SecretNotFound(name) => {
            let message = format!("waiting for the credentials Secret {name}");
            let verdict = Verdict::new(false, REASON_SECRET_NOT_FOUND, &message);
            let health = Health::Progressing { reason: REASON_SECRET_NOT_FOUND.into(), message };
            nothing(health, Some(verdict), None, WAIT_RETRY)
        }
        Observed::FetchFailed(error) => {
            let reason = error.kind.reason();
            let message = format!("fetching {}: {}", redact_userinfo(&repo.spec.url), error.message);
            let verdict = Some(Verdict::new(false, reason, &message));
            let settled = fetch_schedule(interval).settle(error.class());
            nothing(Health::failed(settled, reason, message), verdict, None, settled.requeue)
        }
        Observed::InvalidPolicy { revision, problems } => {
            let message = format!("the platform policy is invalid (ask a cluster admin): {}", list(&problems));
            let source = Verdict::new(true, REASON_SUCCEEDED, fetched_message(&revision));
            let applied = Verdict::new(false, REASON_INVALID_POLICY, &message);
            let mut plan = nothing(stalled(REASON_INVALID_POLICY, message), Some(source), Some(applied), interval);
            plan.fetched_revision = Some(revision);
            plan
        }
        Observed::Fetched { revision, load: Err(problems) } => {
            let message = format!("revision {} was not applied: {}", short_revision(&revision), list(&problems));
            let source = Verdict::new(true, REASON_SUCCEEDED, fetched_message(&revision));
            let applied = Verdict::new(false, REASON_VALIDATION_FAILED, &message);
            // A tenant fixes this with a push, which the next poll (or the webhook) picks up.
            let mut plan = nothing(stalled(REASON_VALIDATION_FAILED, message), Some(source), Some(applied), interval);
            plan.fetched_revision = Some(revision);
            plan.problems = problems;
            plan
        }
        Observed::Fetched { revision, load: Ok(set) } => {
            let namespace = repo.spec.target_namespace.as_str();
            let objects = set.objects(namespace);
            // `objects` keeps the documents' order: the side table from each object to its file.
            let origins = objects
                .iter()
                .zip(&set.documents)
                .filter_map(|(object, document)| Some((entry_of(object)?, Origin::of(document))))
                .collect();
            let inventory = inventory_of(&objects);
            let digest = server_side::digest(&objects);
            let digests = Some(Arc::new(digests_of(&objects)));
            let unchanged = status.last_applied_revision.as_deref() == Some(revision.as_str())
                && status.last_applied_digest.as_deref() == Some(digest.as_str());
            let prune = if repo.spec.prune {
                // Only what this registration applied, and only in its own target namespace.
                let previous: Vec<InventoryEntry> =
                    status.inventory.iter().filter(|e| e.namespace == namespace).cloned().collect();
                prune_plan(&previous, &inventory)
            } else {
                Vec::new()
            };
            let recorded: BTreeSet<&InventoryEntry> = status.inventory.iter().collect();
            let intent =
                inventory.iter().any(|entry| !recorded.contains(entry)).then(|| union(&status.inventory, &inventory));
            let message =
                format!("applied {} objects of revision {} into {namespace}", objects.len(), short_revision(&revision));
            Plan {
                health: Some(Health::Ready { reason: REASON_SUCCEEDED.into(), message: message.clone() }),
                source_ready: Some(Verdict::new(true, REASON_SUCCEEDED, fetched_message(&revision))),
                applied: Some(Verdict::new(true, REASON_SUCCEEDED, message)),
                apply: Some(objects),
                only_drifted: unchanged,
                digests,
                prune,
                intent,
                fetched_revision: Some(revision.clone()),
                record: Some(Record { revision, digest, inventory }),
                requeue: Some(interval),
                origins,
                ..Plan::default()
            }
        }
    }
}

impl Plan {
    /// The plan sending, after a new revision, only what changed since `before` (what this
    /// process applied last for the registration): the objects whose content is the same are
    /// marked [`Plan::unchanged`], read back and sent only when their live copy drifted. An
    /// unchanged revision already sends only what drifted; without `before` everything is sent.
    pub fn skip_unchanged(mut self, before: Option<&Digests>) -> Plan {
        if let (Some(before), Some(objects), false) = (before, &self.apply, self.only_drifted) {
            self.unchanged = unchanged(objects, before);
        }
        self
    }
}

pub(super) fn union(a: &[InventoryEntry], b: &[InventoryEntry]) -> Vec<InventoryEntry> {
    a.iter().chain(b).cloned().collect::<BTreeSet<_>>().into_iter().collect()
}

fn stalled(reason: &str, message: String) -> Health {
    Health::Stalled { reason: reason.into(), message }
}

fn fetched_message(revision: &str) -> String {
    format!("fetched revision {revision}")
}

/// `file:doc: field: message; …`.
fn list(problems: &[Problem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Most problems a condition message lists (a condition message is bounded; every problem is in
/// `Plan::problems`, which the tenant's SyncStatus carries).
const LISTED_PROBLEMS: usize = 20;

/// [`list`] of at most [`LISTED_PROBLEMS`], saying how many more there are.
pub(super) fn capped_list(problems: &[Problem]) -> String {
    let listed = list(&problems[..problems.len().min(LISTED_PROBLEMS)]);
    match problems.len().saturating_sub(LISTED_PROBLEMS) {
        0 => listed,
        more => format!("{listed}; and {more} more"),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::api::tenant_repository::TenantRepositoryStatus;
    use crate::controller::tenant_repository::concluded::conclude;
    use crate::controller::tenant_repository::report::Report;
    use crate::controller::tenant_repository::summarize::summarize;
    use crate::manifests::{self, ApplySet, Content};
    use crate::source::{FailureKind, SourceError};

    pub(crate) fn repo(prune: bool, status: Option<TenantRepositoryStatus>) -> TenantRepository {
        let repo = TenantRepository::test().with_url("file:///repo.git").with_interval("1m").pruning(prune);
        match status {
            Some(status) => repo.with_status(status),
            None => repo,
        }
    }

    pub(crate) fn config_map(name: &str) -> ApplySet {
        let value = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "team-a"}});
        let document = manifests::Document {
            file: "a.yaml".into(),
            index: 1,
            line: 1,
            content: Content::Object(value),
            generator: None,
        };
        ApplySet { documents: vec![document] }
    }

    pub(crate) fn entry(name: &str) -> InventoryEntry {
        InventoryEntry::test("v1", "ConfigMap", name)
    }

    /// A status with revision `abc` applied and `inventory` recorded.
    pub(crate) fn applied_abc(inventory: Vec<InventoryEntry>) -> TenantRepositoryStatus {
        TenantRepositoryStatus {
            last_applied_revision: Some("abc".into()),
            inventory,
            ..TenantRepositoryStatus::default()
        }
    }

    #[test]
    fn first_apply_applies_records_and_requeues_at_the_interval_with_jitter() {
        let plan = plan(
            &repo(true, None),
            Observed::Fetched { revision: "abc".into(), load: Ok(config_map("a")) },
            Duration::from_secs(3),
        );
        assert_eq!(plan.apply.as_ref().map(Vec::len), Some(1));
        assert_eq!(plan.record.as_ref().unwrap().inventory, [entry("a")]);
        assert_eq!(plan.requeue, Some(Duration::from_secs(63)));
        assert!(matches!(plan.health, Some(Health::Ready { .. })));
    }

    #[test]
    fn a_failed_fetch_names_the_url_without_its_userinfo() {
        let mut repo = repo(true, None);
        repo.spec.url = "https://oauth2:glpat-in-the-url@gitlab.example.com/team/app.git".into();
        let error = SourceError::new(FailureKind::Unreachable, "connection refused");
        let plan = plan(&repo, Observed::FetchFailed(error), Duration::ZERO);
        let message = plan.source_ready.expect("SourceReady").message;
        assert_eq!(message, "fetching https://***@gitlab.example.com/team/app.git: connection refused");
    }

    #[test]
    fn unchanged_revision_and_set_apply_only_what_drifted() {
        let first = plan(
            &repo(true, None),
            Observed::Fetched { revision: "abc".into(), load: Ok(config_map("a")) },
            Duration::ZERO,
        );
        let record = first.record.unwrap();
        let status = TenantRepositoryStatus {
            last_applied_revision: Some("abc".into()),
            last_applied_digest: Some(record.digest),
            inventory: record.inventory,
            ..TenantRepositoryStatus::default()
        };
        let again = plan(
            &repo(true, Some(status)),
            Observed::Fetched { revision: "abc".into(), load: Ok(config_map("a")) },
            Duration::ZERO,
        );
        assert!(again.only_drifted, "the live objects are compared, not applied blindly");
        assert_eq!((again.apply.map(|a| a.len()), again.prune), (Some(1), vec![]));
    }

    #[test]
    fn prune_only_from_the_previous_inventory_and_only_when_enabled() {
        let status =
            TenantRepositoryStatus { inventory: vec![entry("a"), entry("old")], ..TenantRepositoryStatus::default() };
        let observed = || Observed::Fetched { revision: "def".into(), load: Ok(config_map("a")) };
        assert_eq!(plan(&repo(true, Some(status.clone())), observed(), Duration::ZERO).prune, [entry("old")]);
        assert!(plan(&repo(false, Some(status)), observed(), Duration::ZERO).prune.is_empty());
    }

    #[test]
    fn objects_new_to_the_inventory_are_recorded_before_they_are_applied() {
        let status = applied_abc;
        let two = || {
            let mut set = config_map("a");
            set.documents.extend(config_map("b").documents);
            Observed::Fetched { revision: "def".into(), load: Ok(set) }
        };
        // New objects: the recorded inventory and the new set, before anything is sent, so an
        // apply cut short leaves "b" (and "old") where the next prune sees them.
        let adding = plan(&repo(true, Some(status(vec![entry("a"), entry("old")]))), two(), Duration::ZERO);
        assert_eq!(adding.intent, Some(vec![entry("a"), entry("b"), entry("old")]));
        assert_eq!(adding.prune, [entry("old")]);
        assert_eq!(adding.record.unwrap().inventory, [entry("a"), entry("b")]);
        // Nothing new (an unchanged set, or one that only loses objects): nothing recorded first,
        // so a no-op poll still writes nothing.
        let same = plan(&repo(true, Some(status(vec![entry("a"), entry("b")]))), two(), Duration::ZERO);
        assert_eq!(same.intent, None);
        let losing = plan(&repo(true, Some(status(vec![entry("a"), entry("b"), entry("c")]))), two(), Duration::ZERO);
        assert_eq!((losing.intent, losing.prune), (None, vec![entry("c")]));
    }

    #[test]
    fn validation_failure_applies_and_prunes_nothing_and_keeps_the_record() {
        let status = applied_abc(vec![entry("a")]);
        let repo = repo(true, Some(status));
        let problems = vec![Problem::field("spec.ip[0]", "bad").located("targets.yaml", Some(1), Some(1))];
        let plan = plan(&repo, Observed::Fetched { revision: "def".into(), load: Err(problems) }, Duration::ZERO);
        assert_eq!((plan.apply.clone(), plan.prune.clone(), plan.record.clone()), (None, vec![], None));
        assert!(
            matches!(&plan.health, Some(Health::Stalled { reason, message }) if reason == REASON_VALIDATION_FAILED && message.contains("targets.yaml:1: spec.ip[0]: bad"))
        );
        let report = Report::default();
        let concluded = conclude(&repo, &plan, &report.executed, &report.waited);
        let status = summarize(&repo, &concluded, &report, &Time(Timestamp::UNIX_EPOCH));
        assert_eq!(status.last_applied_revision.as_deref(), Some("abc"));
        assert_eq!(status.last_fetched_revision.as_deref(), Some("def"));
        assert_eq!(status.inventory, [entry("a")]);
    }

    #[test]
    fn source_failures_requeue_by_class() {
        let failed = |kind| plan(&repo(true, None), Observed::FetchFailed(SourceError::new(kind, "x")), Duration::ZERO);
        let auth = failed(FailureKind::AuthenticationFailed);
        assert!(matches!(&auth.health, Some(Health::Stalled { reason, .. }) if reason == "AuthenticationFailed"));
        assert_eq!(auth.requeue, Some(STALLED_RESYNC));
        assert_eq!(failed(FailureKind::RefNotFound).requeue, Some(Duration::from_secs(60)));
        assert_eq!(failed(FailureKind::Timeout).requeue, Some(TRANSIENT_RETRY));
        assert_eq!(auth.source_ready.unwrap().reason, "AuthenticationFailed");
    }

    #[test]
    fn a_condition_lists_at_most_twenty_problems_and_counts_the_rest() {
        let problems: Vec<Problem> = (0..25).map(|i| Problem::field("", format!("p{i}"))).collect();
        let listed = capped_list(&problems);
        assert!(listed.contains("p19") && !listed.contains("p20"), "{listed}");
        assert!(listed.ends_with("; and 5 more"), "{listed}");
    }
}
