//! What a tenant reads about their registrations and CDTargets, decided here and nowhere else:
//! the conditions of their `SyncStatus`, the Warning Events in their namespace (made from that
//! SyncStatus), the commit statuses on GitLab (docs/feedback.md, "What a tenant is told"), and
//! the conditions of their CDTargets with the Events that quote them.
//!
//! Tenants are hostile, and a condition message written for the platform team names what the
//! platform keeps to itself: the policy's ranges, hosts and values, the Git server, the cache,
//! known_hosts and CA details, GitLab project, key and hook ids. So the tenant's text comes from an
//! allow-list by object, condition type and reason ([`for_tenant`]): a message about the tenant's
//! own files and objects (a located problem, an object the API server refused or found unhealthy,
//! what was applied) is shown as it is; every other one, and anything not on the list (fail
//! closed), is replaced by a fixed sentence of its class, which holds no content. The
//! TenantRepository (platform namespace) keeps every detail, and that is how the platform team
//! is told: its conditions and Events, the alerts on them (docs/operations.md) and the logs. A
//! CDTarget has no platform copy: a child it could not write fails the reconcile, which is logged,
//! and an invalid policy is logged with its problems once per change of the policy.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::conditions::{
    self as vocabulary, APPLIED, BUSY_AGENTS_COUNTED, COMMIT_STATUS_POSTED, READY, REASON_AGENT_JOBS_FAILING,
    REASON_AGENTS_NOT_AVAILABLE, REASON_API_ERROR, REASON_APPLIED, REASON_APPLY_FAILED, REASON_CONFIG_MAP_NOT_ALLOWED,
    REASON_HEALTH_CHECK_FAILED, REASON_HEALTH_CHECK_PENDING, REASON_INVALID_POLICY, REASON_INVALID_SPEC,
    REASON_JOB_MODE, REASON_KEDA_DROPS_BUSY_AGENTS, REASON_KEDA_NOT_INSTALLED, REASON_NAME_CONFLICT, REASON_POSTED,
    REASON_PRUNE_FAILED, REASON_ROLLOUT_FAILED, REASON_SCALE_ON_IN_FLIGHT, REASON_SCALE_ON_IN_FLIGHT_DISABLED,
    REASON_SCALED_JOB_NOT_READY, REASON_SCALED_OBJECT_NOT_READY, REASON_SECRET_NOT_ALLOWED, REASON_SECRET_NOT_FOUND,
    REASON_SUCCEEDED, REASON_SUSPENDED, REASON_SYNCED, REASON_VALIDATION_FAILED, RECONCILING, SOURCE_READY, STALLED,
};
use crate::problem::Problem;
use crate::source::FailureKind;

/// Whose conditions a tenant reads: one type and reason can mean different things on each
/// (`InvalidSpec` is the platform's registration, or the tenant's own CDTarget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    /// A TenantRepository, read through its SyncStatus, the tenant Events and GitLab.
    Registration,
    /// A CDTarget, read in its own status and the Events about it.
    CDTarget,
}

/// The platform's own configuration (its policy, the registration, the registration's Secret)
/// is invalid or incomplete.
pub const PLATFORM_CONFIGURATION: &str = "the platform configuration is invalid; the platform team has been told";
/// The repository cannot be fetched (credentials, host keys, certificates, the network, the
/// cache, the URL or path as registered).
pub const UNFETCHABLE: &str = "the repository cannot be fetched; the platform team has been told";
/// The branch, tag or commit the registration follows is not in the repository.
pub(crate) const REF_NOT_FOUND: &str = "the branch, tag or commit this registration follows (spec.gitRef) is not in the \
                                 repository: push it, or ask the platform team to follow another one";
/// The repository, its checked-out tree or the cache it needs is over the platform's bounds.
pub(crate) const TOO_LARGE: &str = "the repository is larger than the platform allows (its history, its checked-out tree, \
                             one file or the number of entries): make it smaller; the platform team has been told";
/// The revision's tree holds an entry that cannot be checked out safely.
pub(crate) const UNSAFE_TREE: &str = "the revision's tree holds an entry that cannot be checked out safely (a duplicate or \
                               reserved name, an odd file mode, deep nesting or a long path): push a commit without \
                               it; the platform team has been told";
/// The API server refused the controller itself (its right to act as the tenant's
/// ServiceAccount), not the tenant's objects.
pub(crate) const NO_ACCESS: &str =
    "the platform cannot act as this namespace's ServiceAccount; the platform team has been told";
/// `GitLabSynced=True`.
pub const GITLAB_SYNCED: &str = "the deploy key and the webhook are in place on the GitLab project";
/// `GitLabSynced=False`, whatever the reason.
pub(crate) const GITLAB_NOT_SYNCED: &str = "the platform cannot keep the deploy key and the webhook on the GitLab project; \
                                     the platform team has been told (the repository is still fetched at its interval)";
/// `CommitStatusPosted=True`.
pub(crate) const STATUS_POSTED: &str = "the commit status of the revision evaluated last is on GitLab";
/// `CommitStatusPosted=False`, whatever the reason.
pub(crate) const STATUS_NOT_POSTED: &str = "the platform cannot post commit statuses on GitLab; the platform team has been \
                                     told (the apply is not affected)";
/// A CDTarget's children could not be written by the controller (its rights, a CRD missing, a
/// rendering the API server refuses).
pub(crate) const CHILDREN_NOT_WRITTEN: &str = "the platform cannot write this CDTarget's NetworkPolicy, Deployment or KEDA \
                                        objects; the platform team has been told";
/// A condition type or reason not on the allow-list.
pub(crate) const NOT_LISTED: &str = "the details are the platform's; the platform team has been told";

/// The reasons of the kstatus summary (`Ready`, `Reconciling`, `Stalled`) that are about the
/// tenant's own files and objects.
const SUMMARY_THEIRS: &[&str] = &[
    REASON_SUCCEEDED,
    REASON_VALIDATION_FAILED,
    REASON_APPLY_FAILED,
    REASON_PRUNE_FAILED,
    REASON_HEALTH_CHECK_PENDING,
    REASON_HEALTH_CHECK_FAILED,
    REASON_SUSPENDED,
];

/// The reasons of a CDTarget that are about the tenant's own CDTarget, Secrets, ConfigMaps,
/// namespace and agents.
const CDTARGET_THEIRS: &[&str] = &[
    REASON_APPLIED,
    REASON_KEDA_NOT_INSTALLED,
    REASON_AGENTS_NOT_AVAILABLE,
    REASON_SCALED_OBJECT_NOT_READY,
    REASON_ROLLOUT_FAILED,
    REASON_SCALED_JOB_NOT_READY,
    REASON_AGENT_JOBS_FAILING,
    REASON_INVALID_SPEC,
    REASON_SECRET_NOT_FOUND,
    REASON_NAME_CONFLICT,
    REASON_SECRET_NOT_ALLOWED,
    REASON_CONFIG_MAP_NOT_ALLOWED,
];

/// The allow-list of a CDTarget: by condition type, the reasons whose message the tenant reads
/// as it is.
const CDTARGET: &[(&str, &[&str])] = &[
    (READY, CDTARGET_THEIRS),
    (RECONCILING, CDTARGET_THEIRS),
    (STALLED, CDTARGET_THEIRS),
    (APPLIED, CDTARGET_THEIRS),
    (BUSY_AGENTS_COUNTED, BUSY_AGENTS_THEIRS),
];

/// `BusyAgentsCounted` says what the KEDA release does to the tenant's agents and how to avoid
/// it (their `spec.mode`, their `triggerMeta`); the release it names is what API discovery shows
/// every tenant anyway.
const BUSY_AGENTS_THEIRS: &[&str] =
    &[REASON_JOB_MODE, REASON_SCALE_ON_IN_FLIGHT, REASON_KEDA_DROPS_BUSY_AGENTS, REASON_SCALE_ON_IN_FLIGHT_DISABLED];

/// The allow-list of a registration: by condition type, the reasons whose message the tenant
/// reads as it is.
const REGISTRATION: &[(&str, &[&str])] = &[
    (READY, SUMMARY_THEIRS),
    (RECONCILING, SUMMARY_THEIRS),
    (STALLED, SUMMARY_THEIRS),
    (APPLIED, &[REASON_SUCCEEDED, REASON_VALIDATION_FAILED, REASON_APPLY_FAILED, REASON_PRUNE_FAILED]),
    (SOURCE_READY, &[REASON_SUCCEEDED]),
];

/// What a tenant reads of one condition message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TenantText<'a> {
    /// About the tenant's own files and objects: the message as the object has it.
    Theirs(&'a str),
    /// The platform's trouble, or a condition not on the allow-list: a fixed sentence of its
    /// class, in place of the message.
    Fixed(&'static str),
}

impl<'a> TenantText<'a> {
    /// The text the tenant reads.
    pub fn message(&self) -> &'a str {
        match self {
            TenantText::Theirs(message) => message,
            TenantText::Fixed(sentence) => sentence,
        }
    }
}

/// What the tenant reads of a condition of `object` of type `condition_type` with `reason` and
/// `message`: the message when the type and reason are on the object's allow-list, else the
/// fixed sentence of the reason's class ([`NOT_LISTED`] for what no class names).
pub(crate) fn for_tenant<'a>(object: Object, condition_type: &str, reason: &str, message: &'a str) -> TenantText<'a> {
    let list = match object {
        Object::Registration => REGISTRATION,
        Object::CDTarget => CDTARGET,
    };
    let listed = list.iter().any(|(kind, reasons)| *kind == condition_type && reasons.contains(&reason));
    // An API server refusing the controller's impersonation refuses every object alike.
    let refused_the_controller = object == Object::Registration
        && [REASON_APPLY_FAILED, REASON_PRUNE_FAILED].contains(&reason)
        && refuses_the_controller(message);
    if listed && !refused_the_controller {
        return TenantText::Theirs(message);
    }
    TenantText::Fixed(match object {
        Object::Registration => registration_sentence(condition_type, reason),
        Object::CDTarget => cdtarget_sentence(condition_type, reason),
    })
}

/// `condition` of `object` as the tenant reads it: its message through [`for_tenant`], the
/// rest as it is (the reason is an API identifier, never content).
pub(crate) fn condition_for_tenant(object: Object, condition: &Condition) -> Condition {
    let message = for_tenant(object, &condition.type_, &condition.reason, &condition.message).message().to_owned();
    Condition { message, ..condition.clone() }
}

/// The located problems a tenant reads: all of them but the API server's refusals of the
/// controller itself (their message says who was refused: the platform's ServiceAccount).
pub(crate) fn problems_for_tenant(problems: &[Problem]) -> Cow<'_, [Problem]> {
    if !problems.iter().any(|p| refuses_the_controller(&p.message)) {
        return Cow::Borrowed(problems);
    }
    Cow::Owned(problems.iter().filter(|p| !refuses_the_controller(&p.message)).cloned().collect())
}

/// Whether the API server's `message` refuses the controller's impersonation of the tenant's
/// ServiceAccount (RBAC's words: `User "..." cannot impersonate resource "serviceaccounts"`).
fn refuses_the_controller(message: &str) -> bool {
    message.contains("cannot impersonate")
}

/// The fixed sentence of a CDTarget's condition not shown as it is.
fn cdtarget_sentence(condition_type: &str, reason: &str) -> &'static str {
    match (condition_type, reason) {
        (READY | RECONCILING | STALLED | APPLIED, REASON_INVALID_POLICY) => PLATFORM_CONFIGURATION,
        (READY | RECONCILING | STALLED | APPLIED, REASON_API_ERROR) => CHILDREN_NOT_WRITTEN,
        _ => NOT_LISTED,
    }
}

/// The fixed sentence of a registration's condition not shown as it is.
fn registration_sentence(condition_type: &str, reason: &str) -> &'static str {
    let fetch = |kinds: &[FailureKind]| kinds.iter().any(|kind| kind.reason() == reason);
    match condition_type {
        vocabulary::GITLAB_SYNCED if reason == REASON_SYNCED => GITLAB_SYNCED,
        vocabulary::GITLAB_SYNCED => GITLAB_NOT_SYNCED,
        COMMIT_STATUS_POSTED if reason == REASON_POSTED => STATUS_POSTED,
        COMMIT_STATUS_POSTED => STATUS_NOT_POSTED,
        READY | RECONCILING | STALLED | APPLIED | SOURCE_READY => match reason {
            REASON_INVALID_POLICY | REASON_INVALID_SPEC | REASON_SECRET_NOT_FOUND => PLATFORM_CONFIGURATION,
            REASON_APPLY_FAILED | REASON_PRUNE_FAILED => NO_ACCESS,
            _ if fetch(&[FailureKind::RefNotFound]) => REF_NOT_FOUND,
            _ if fetch(&[FailureKind::TooLarge, FailureKind::SnapshotTooLarge, FailureKind::CacheTooLarge]) => {
                TOO_LARGE
            }
            _ if fetch(&[FailureKind::UnsafeTree]) => UNSAFE_TREE,
            _ if fetch(&UNFETCHABLE_KINDS) => UNFETCHABLE,
            _ => NOT_LISTED,
        },
        _ => NOT_LISTED,
    }
}

/// The fetch failures that are the platform's to mend (or to explain).
const UNFETCHABLE_KINDS: [FailureKind; 10] = [
    FailureKind::AuthenticationFailed,
    FailureKind::HostKeyMismatch,
    FailureKind::HostKeyUnknown,
    FailureKind::CertificateInvalid,
    FailureKind::Unreachable,
    FailureKind::Timeout,
    FailureKind::RedirectRefused,
    FailureKind::CorruptCache,
    FailureKind::InvalidRequest,
    FailureKind::Other,
];

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    /// Text of the platform's that must never reach a tenant.
    const PLATFORM_DETAIL: &str = "10.99.0.0/16 secret-host.platform.internal /var/cache/cdtarget/cdtarget-system/x \
                                   ssh://git@127.0.0.1:2222 deploy key 7340004 on project 7340001";

    fn told(condition_type: &str, reason: &str) -> TenantText<'static> {
        for_tenant(Object::Registration, condition_type, reason, PLATFORM_DETAIL)
    }

    #[test]
    fn the_tenants_own_files_and_objects_are_told_in_full() {
        let located = "revision 3f2a9c1 was not applied: deploy/agents.yaml:1: spec.ip[0]: not an IP address";
        for reason in [REASON_VALIDATION_FAILED, REASON_APPLY_FAILED, REASON_PRUNE_FAILED] {
            for kind in [READY, STALLED, RECONCILING, APPLIED] {
                assert_eq!(
                    for_tenant(Object::Registration, kind, reason, located),
                    TenantText::Theirs(located),
                    "{kind} {reason}"
                );
            }
        }
        for reason in [REASON_HEALTH_CHECK_PENDING, REASON_HEALTH_CHECK_FAILED, REASON_SUSPENDED] {
            assert_eq!(for_tenant(Object::Registration, READY, reason, located).message(), located, "{reason}");
        }
        let applied = "applied 4 objects of revision 3f2a9c1d8e7b into team-a";
        assert_eq!(for_tenant(Object::Registration, APPLIED, REASON_SUCCEEDED, applied).message(), applied);
        assert_eq!(for_tenant(Object::Registration, READY, REASON_SUCCEEDED, applied).message(), applied);
        let fetched = "fetched revision 3f2a9c1d8e7b0c5d4e3f2a1b0c9d8e7f6a5b4c3d";
        assert_eq!(for_tenant(Object::Registration, SOURCE_READY, REASON_SUCCEEDED, fetched).message(), fetched);
    }

    #[test]
    fn an_invalid_policy_registration_or_secret_reads_the_platform_configuration_sentence() {
        for reason in [REASON_INVALID_POLICY, REASON_INVALID_SPEC, REASON_SECRET_NOT_FOUND] {
            for kind in [READY, STALLED, RECONCILING, APPLIED, SOURCE_READY] {
                assert_eq!(told(kind, reason), TenantText::Fixed(PLATFORM_CONFIGURATION), "{kind} {reason}");
            }
        }
    }

    #[test]
    fn a_source_the_platform_cannot_fetch_reads_the_unfetchable_sentence() {
        for kind in UNFETCHABLE_KINDS {
            for condition_type in [SOURCE_READY, READY, STALLED, RECONCILING] {
                assert_eq!(told(condition_type, kind.reason()), TenantText::Fixed(UNFETCHABLE), "{kind:?}");
            }
        }
    }

    #[test]
    fn what_the_tenant_can_change_in_the_repository_reads_a_sentence_saying_what_without_the_detail() {
        assert_eq!(told(SOURCE_READY, FailureKind::RefNotFound.reason()), TenantText::Fixed(REF_NOT_FOUND));
        for kind in [FailureKind::TooLarge, FailureKind::SnapshotTooLarge, FailureKind::CacheTooLarge] {
            assert_eq!(told(READY, kind.reason()), TenantText::Fixed(TOO_LARGE), "{kind:?}");
        }
        assert_eq!(told(STALLED, FailureKind::UnsafeTree.reason()), TenantText::Fixed(UNSAFE_TREE));
    }

    #[test]
    fn every_source_failure_reason_belongs_to_a_class() {
        for kind in FailureKind::ALL {
            assert_ne!(told(SOURCE_READY, kind.reason()), TenantText::Fixed(NOT_LISTED), "{kind:?}");
        }
    }

    #[test]
    fn the_api_server_refusing_the_controllers_impersonation_reads_the_no_access_sentence() {
        let refused = "revision 3f2a9c1 was not applied: the API server refused 1 of 1 objects in a server-side \
                       dry run as system:serviceaccount:team-a:deployer, so nothing was written: settings.yaml:1: \
                       ConfigMap team-a/settings was refused by the API server: serviceaccounts \"deployer\" is \
                       forbidden: User \"system:serviceaccount:cdtarget-system:cdtarget\" cannot impersonate \
                       resource \"serviceaccounts\" in API group \"\" in the namespace \"team-a\"";
        for reason in [REASON_APPLY_FAILED, REASON_PRUNE_FAILED] {
            assert_eq!(for_tenant(Object::Registration, READY, reason, refused), TenantText::Fixed(NO_ACCESS));
            assert_eq!(for_tenant(Object::Registration, APPLIED, reason, refused), TenantText::Fixed(NO_ACCESS));
        }
        let theirs = Problem::field(
            "",
            "ingresses.networking.k8s.io \"web\" is forbidden: User \
                                         \"system:serviceaccount:team-a:deployer\" cannot patch resource \"ingresses\"",
        )
        .located("ingress.yaml", Some(1), Some(1));
        let controllers = Problem::field("", refused).located("settings.yaml", Some(1), Some(1));
        assert_eq!(problems_for_tenant(&[theirs.clone(), controllers]).as_ref(), std::slice::from_ref(&theirs));
        assert!(matches!(problems_for_tenant(std::slice::from_ref(&theirs)), Cow::Borrowed(_)));
    }

    #[test]
    fn gitlab_conditions_read_a_sentence_per_state_without_ids() {
        assert_eq!(told(vocabulary::GITLAB_SYNCED, REASON_SYNCED), TenantText::Fixed(GITLAB_SYNCED));
        for reason in ["GitLabUnauthorized", "GitLabProjectNotFound", "DeployKeyInUse", "ClusterError", "Other"] {
            assert_eq!(told(vocabulary::GITLAB_SYNCED, reason), TenantText::Fixed(GITLAB_NOT_SYNCED), "{reason}");
        }
        assert_eq!(told(COMMIT_STATUS_POSTED, REASON_POSTED), TenantText::Fixed(STATUS_POSTED));
        for reason in ["GitLabStatusForbidden", "GitLabUnavailable", "Other"] {
            assert_eq!(told(COMMIT_STATUS_POSTED, reason), TenantText::Fixed(STATUS_NOT_POSTED), "{reason}");
        }
    }

    #[test]
    fn a_cdtargets_own_spec_secrets_and_agents_are_told_in_full_and_the_platforms_trouble_is_not() {
        let theirs = "spec.ip[0]: `10.1.2.3` is in the forbidden range 10.0.0.0/8; use the service's host name";
        for reason in CDTARGET_THEIRS {
            for kind in [READY, STALLED, RECONCILING, APPLIED] {
                assert_eq!(for_tenant(Object::CDTarget, kind, reason, theirs), TenantText::Theirs(theirs), "{reason}");
            }
        }
        for reason in BUSY_AGENTS_THEIRS {
            let read = for_tenant(Object::CDTarget, BUSY_AGENTS_COUNTED, reason, theirs);
            assert_eq!(read, TenantText::Theirs(theirs), "BusyAgentsCounted {reason}: the risk and the ways out");
        }
        let of_cdtarget = |reason: &str| for_tenant(Object::CDTarget, READY, reason, PLATFORM_DETAIL);
        assert_eq!(of_cdtarget(REASON_INVALID_POLICY), TenantText::Fixed(PLATFORM_CONFIGURATION));
        assert_eq!(of_cdtarget(REASON_API_ERROR), TenantText::Fixed(CHILDREN_NOT_WRITTEN));
        assert_eq!(of_cdtarget("SomeNewReason"), TenantText::Fixed(NOT_LISTED));
        // The same reason means the platform's registration on a TenantRepository.
        assert_eq!(told(READY, REASON_INVALID_SPEC), TenantText::Fixed(PLATFORM_CONFIGURATION));
    }

    #[test]
    fn what_is_not_on_the_list_is_replaced_fail_closed() {
        assert_eq!(told(READY, "SomeNewReason"), TenantText::Fixed(NOT_LISTED));
        assert_eq!(told(SOURCE_READY, REASON_VALIDATION_FAILED), TenantText::Fixed(NOT_LISTED));
        assert_eq!(told("SomeNewCondition", REASON_SUCCEEDED), TenantText::Fixed(NOT_LISTED));
        assert_eq!(
            for_tenant(Object::CDTarget, "SomeNewCondition", REASON_APPLIED, PLATFORM_DETAIL),
            TenantText::Fixed(NOT_LISTED)
        );
    }

    #[test]
    fn no_fixed_sentence_holds_platform_content() {
        let sentences = [
            PLATFORM_CONFIGURATION,
            UNFETCHABLE,
            REF_NOT_FOUND,
            TOO_LARGE,
            UNSAFE_TREE,
            NO_ACCESS,
            CHILDREN_NOT_WRITTEN,
            GITLAB_SYNCED,
            GITLAB_NOT_SYNCED,
            STATUS_POSTED,
            STATUS_NOT_POSTED,
            NOT_LISTED,
        ];
        for sentence in sentences {
            assert!(!sentence.chars().any(|c| c.is_ascii_digit() || c == '/' || c == '@'), "{sentence}");
            assert!(!sentence.contains("  "), "a line break of the source left in: {sentence}");
        }
    }

    #[test]
    fn a_condition_keeps_its_type_status_reason_and_times_and_changes_only_its_message() {
        let condition = Condition {
            type_: READY.into(),
            status: "False".into(),
            reason: REASON_INVALID_POLICY.into(),
            message: PLATFORM_DETAIL.into(),
            observed_generation: Some(3),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        };
        let told = condition_for_tenant(Object::Registration, &condition);
        assert_eq!(told, Condition { message: PLATFORM_CONFIGURATION.into(), ..condition });
    }
}
