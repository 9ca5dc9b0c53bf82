//! The vocabulary of the controller's status: every condition type and every reason it sets, on
//! a TenantRepository and on a CDTarget, and the reasons of the Events it records besides those
//! of `Ready`. Defined here, beside the API types, and nowhere else; [`reasons`] lists which
//! reasons each condition type takes, and a test checks the tables of `docs/operations.md`
//! against it.
//!
//! Errors that end in a condition say their reason through [`crate::error::Reason`]; the fetch
//! and GitLab errors' reasons are listed here as [`FETCH_REASONS`] and [`GITLAB_ERROR_REASONS`].

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

// === condition types ===

/// `Ready` (kstatus): the object is reconciled and what it describes is in place.
pub const READY: &str = "Ready";
/// `Reconciling` (kstatus): work is under way or will be retried.
pub const RECONCILING: &str = "Reconciling";
/// `Stalled` (kstatus): nothing will change until someone fixes the spec or a referenced object.
pub const STALLED: &str = "Stalled";
/// TenantRepository: the repository was fetched at the requested ref.
pub const SOURCE_READY: &str = "SourceReady";
/// TenantRepository: the whole set of the fetched revision is applied. CDTarget: the children
/// are applied (what `Ready` said before agents counted).
pub const APPLIED: &str = "Applied";
/// TenantRepository with `spec.gitlab`: the deploy key and webhook are on the GitLab project.
pub const GITLAB_SYNCED: &str = "GitLabSynced";
/// TenantRepository with `spec.gitlab`: the commit status of the revision evaluated last is on
/// GitLab.
pub const COMMIT_STATUS_POSTED: &str = "CommitStatusPosted";
/// CDTarget scaled by KEDA: whether KEDA counts the jobs its agents are running, so that it
/// neither removes a busy agent nor leaves queued jobs waiting while all agents are busy.
pub const BUSY_AGENTS_COUNTED: &str = "BusyAgentsCounted";
/// TenantRepository: present only while writing its SyncStatus fails (`False`,
/// [`REASON_WRITE_FAILED`]); the apply is not affected.
pub const SYNC_STATUS_WRITTEN: &str = "SyncStatusWritten";

// === reasons of both kinds ===

/// The registration (its ref, interval, timeouts, Secret content), or the CDTarget, breaks a
/// rule; every problem is in the message.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// A Secret the object needs does not exist (yet): the registration's credentials Secret, a
/// Secret a CDTarget references (or the token key in it).
pub const REASON_SECRET_NOT_FOUND: &str = "SecretNotFound";
/// The platform policy ConfigMap cannot be read as a policy.
pub const REASON_INVALID_POLICY: &str = "InvalidPolicy";

// === TenantRepository reasons ===

/// The step succeeded (`SourceReady`, `Applied`, `Ready`).
pub const REASON_SUCCEEDED: &str = "Succeeded";
/// A document of the fetched revision breaks a rule; every problem is listed.
pub const REASON_VALIDATION_FAILED: &str = "ValidationFailed";
/// The API server refused an object of the set.
pub const REASON_APPLY_FAILED: &str = "ApplyFailed";
/// The set was applied but an object that left Git could not be deleted.
pub const REASON_PRUNE_FAILED: &str = "PruneFailed";
/// `spec.suspend` is set; nothing is fetched or applied (`Ready` only).
pub const REASON_SUSPENDED: &str = "Suspended";
/// `spec.wait`: what was applied is not healthy yet; checked again shortly.
pub const REASON_HEALTH_CHECK_PENDING: &str = "HealthCheckPending";
/// `spec.wait`: what was applied did not become healthy within `spec.wait.timeout`, or an
/// object of it failed.
pub const REASON_HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";
/// `GitLabSynced=True`: key and hook are as wanted.
pub const REASON_SYNCED: &str = "Synced";
/// `GitLabSynced=False`: the registration has `spec.gitlab` but the controller runs without
/// `--gitlab-url` (and its companions).
pub const REASON_GITLAB_NOT_CONFIGURED: &str = "GitLabNotConfigured";
/// `GitLabSynced=False`: reading the Secrets or writing the finalizer or the key pair Secret in
/// the cluster failed (e.g. missing RBAC); retried.
pub const REASON_CLUSTER_ERROR: &str = "ClusterError";
/// `GitLabSynced=False` while a deleted registration's key and hook cannot be removed yet.
pub const REASON_CLEANUP_PENDING: &str = "CleanupPending";
/// `CommitStatusPosted=True`.
pub const REASON_POSTED: &str = "Posted";
/// `SyncStatusWritten=False`: the SyncStatus write was refused or could not be sent.
pub const REASON_WRITE_FAILED: &str = "WriteFailed";

// Why a fetch failed (`SourceReady=False`): [`crate::source::FailureKind`]'s reasons.
/// The server refused the key or token, or the key cannot be used.
pub const REASON_AUTHENTICATION_FAILED: &str = "AuthenticationFailed";
/// The SSH host key differs from the one in `known_hosts`.
pub const REASON_HOST_KEY_MISMATCH: &str = "HostKeyMismatch";
/// `known_hosts` has no entry for the host (and port).
pub const REASON_HOST_KEY_UNKNOWN: &str = "HostKeyUnknown";
/// The HTTPS certificate is not trusted.
pub const REASON_CERTIFICATE_INVALID: &str = "CertificateInvalid";
/// The branch, tag or commit does not exist on the remote.
pub const REASON_REF_NOT_FOUND: &str = "RefNotFound";
/// The server cannot be reached or the connection broke.
pub const REASON_UNREACHABLE: &str = "Unreachable";
/// The fetch took longer than `spec.timeout` (default `--git-timeout`).
pub const REASON_TIMEOUT: &str = "Timeout";
/// The fetch received more than `--git-max-fetch-bytes`.
pub const REASON_TOO_LARGE: &str = "TooLarge";
/// The checked-out tree is over `--git-max-snapshot-bytes` (or a file or entry count bound).
pub const REASON_SNAPSHOT_TOO_LARGE: &str = "SnapshotTooLarge";
/// The registration's cache would pass `--git-max-cache-bytes` even after a fresh clone.
pub const REASON_CACHE_TOO_LARGE: &str = "CacheTooLarge";
/// The commit's tree holds an entry that cannot be checked out safely.
pub const REASON_UNSAFE_TREE: &str = "UnsafeTree";
/// The server redirected to another host, to plain http, or (with credentials) another port.
pub const REASON_REDIRECT_REFUSED: &str = "RedirectRefused";
/// The local cache was damaged; it is discarded and cloned again.
pub const REASON_CORRUPT_CACHE: &str = "CorruptCache";
/// The request itself is wrong: URL scheme, ref name, or `spec.path`.
pub const REASON_INVALID_REQUEST: &str = "InvalidRequest";
/// Anything else libgit2 reported.
pub const REASON_GIT_ERROR: &str = "GitError";

/// Every reason of a failed fetch.
pub const FETCH_REASONS: &[&str] = &[
    REASON_AUTHENTICATION_FAILED,
    REASON_HOST_KEY_MISMATCH,
    REASON_HOST_KEY_UNKNOWN,
    REASON_CERTIFICATE_INVALID,
    REASON_REF_NOT_FOUND,
    REASON_UNREACHABLE,
    REASON_TIMEOUT,
    REASON_TOO_LARGE,
    REASON_SNAPSHOT_TOO_LARGE,
    REASON_CACHE_TOO_LARGE,
    REASON_UNSAFE_TREE,
    REASON_REDIRECT_REFUSED,
    REASON_CORRUPT_CACHE,
    REASON_INVALID_REQUEST,
    REASON_GIT_ERROR,
];

// Why a GitLab call failed (`GitLabSynced=False`, `CommitStatusPosted=False`):
// [`crate::gitlab::ErrorKind`]'s reasons.
/// GitLab refused the bot token (401).
pub const REASON_GITLAB_UNAUTHORIZED: &str = "GitLabUnauthorized";
/// The bot token lacks the `api` scope.
pub const REASON_GITLAB_INSUFFICIENT_SCOPE: &str = "GitLabInsufficientScope";
/// The bot is below Maintainer on the project.
pub const REASON_GITLAB_NOT_MAINTAINER: &str = "GitLabNotMaintainer";
/// The bot may not post commit statuses (below Developer, or a protected branch).
pub const REASON_GITLAB_STATUS_FORBIDDEN: &str = "GitLabStatusForbidden";
/// The project does not exist or the bot cannot see it.
pub const REASON_GITLAB_PROJECT_NOT_FOUND: &str = "GitLabProjectNotFound";
/// GitLab refuses the deploy key (used where the bot cannot see).
pub const REASON_DEPLOY_KEY_IN_USE: &str = "DeployKeyInUse";
/// An object GitLab was asked about is gone (404 on a key, hook or commit).
pub const REASON_GITLAB_OBJECT_GONE: &str = "GitLabObjectGone";
/// GitLab refused the request with another 4xx.
pub const REASON_GITLAB_REJECTED: &str = "GitLabRejected";
/// GitLab is throttling (429).
pub const REASON_GITLAB_RATE_LIMITED: &str = "GitLabRateLimited";
/// GitLab is down or answering 5xx, or cannot be reached.
pub const REASON_GITLAB_UNAVAILABLE: &str = "GitLabUnavailable";
/// GitLab answered with something the controller cannot read.
pub const REASON_GITLAB_INVALID_RESPONSE: &str = "GitLabInvalidResponse";
/// A registration or Secret the syncer cannot use (no `spec.secretRef`, no webhook `token`).
pub const REASON_GITLAB_CONFIG_INVALID: &str = "GitLabConfigInvalid";

/// Every reason of a failed GitLab call.
pub const GITLAB_ERROR_REASONS: &[&str] = &[
    REASON_GITLAB_UNAUTHORIZED,
    REASON_GITLAB_INSUFFICIENT_SCOPE,
    REASON_GITLAB_NOT_MAINTAINER,
    REASON_GITLAB_STATUS_FORBIDDEN,
    REASON_GITLAB_PROJECT_NOT_FOUND,
    REASON_DEPLOY_KEY_IN_USE,
    REASON_GITLAB_OBJECT_GONE,
    REASON_GITLAB_REJECTED,
    REASON_GITLAB_RATE_LIMITED,
    REASON_GITLAB_UNAVAILABLE,
    REASON_GITLAB_INVALID_RESPONSE,
    REASON_GITLAB_CONFIG_INVALID,
];

// === CDTarget reasons ===

/// Every child was applied (and, on `Ready`, the agents are available).
pub const REASON_APPLIED: &str = "Applied";
/// Children applied, but as a plain Deployment because KEDA is not installed.
pub const REASON_KEDA_NOT_INSTALLED: &str = "KedaNotInstalled";
/// The API server refused a request; retried with back-off.
pub const REASON_API_ERROR: &str = "ApiError";
/// An object with a child's kind and name exists and is not controlled by this CDTarget;
/// nothing is written.
pub const REASON_NAME_CONFLICT: &str = "NameConflict";
/// A referenced Secret is a ServiceAccount token, or the namespace's tenant identity may not
/// read it (or a referenced ConfigMap, when no Secret is refused).
pub const REASON_SECRET_NOT_ALLOWED: &str = "SecretNotAllowed";
/// A referenced ConfigMap cannot be read by the namespace's tenant identity.
pub const REASON_CONFIG_MAP_NOT_ALLOWED: &str = "ConfigMapNotAllowed";
/// Fewer agents are available than `minReplicaCount`, or the Deployment has not observed its
/// current template yet.
pub const REASON_AGENTS_NOT_AVAILABLE: &str = "AgentsNotAvailable";
/// KEDA has not reported the ScaledObject `Ready`.
pub const REASON_SCALED_OBJECT_NOT_READY: &str = "ScaledObjectNotReady";
/// KEDA has not reported the ScaledJob `Ready` (Job mode).
pub const REASON_SCALED_JOB_NOT_READY: &str = "ScaledJobNotReady";
/// The most recent agent Jobs of a Job-mode CDTarget failed, or their pods cannot start (an
/// image that cannot be pulled, a container that cannot be created).
pub const REASON_AGENT_JOBS_FAILING: &str = "AgentJobsFailing";
/// `BusyAgentsCounted=True`: the agents run as KEDA Jobs, one per pipeline job, each running to
/// its end.
pub const REASON_JOB_MODE: &str = "JobMode";
/// `BusyAgentsCounted=True`: KEDA (2.21 or newer) counts jobs agents are running
/// (`scaleOnInFlight`).
pub const REASON_SCALE_ON_IN_FLIGHT: &str = "ScaleOnInFlight";
/// `BusyAgentsCounted=False`: the KEDA release (2.20) counts only jobs no agent has received, so
/// its autoscaler may remove agents that are running a job.
pub const REASON_KEDA_DROPS_BUSY_AGENTS: &str = "KedaDropsBusyAgents";
/// `BusyAgentsCounted=False`: the CDTarget sets `triggerMeta.scaleOnInFlight: "false"`.
pub const REASON_SCALE_ON_IN_FLIGHT_DISABLED: &str = "ScaleOnInFlightDisabled";
/// The Deployment's rollout exceeded its progress deadline (`Progressing=False`,
/// `ProgressDeadlineExceeded`); a person has to look at the agents.
pub const REASON_ROLLOUT_FAILED: &str = "RolloutFailed";

// === Event reasons (besides those of `Ready`, which every change of `Ready` records) ===

/// Tenant Event: objects that left Git were deleted.
pub const REASON_PRUNED: &str = "Pruned";
/// Tenant Event: objects changed on the cluster were put back as Git says.
pub const REASON_DRIFT_REPAIRED: &str = "DriftRepaired";
/// Event on a registration whose deletion released the finalizer without contacting GitLab.
pub const REASON_GITLAB_CLEANUP_SKIPPED: &str = "GitLabCleanupSkipped";

/// Every Event reason that is not a reason of `Ready`.
pub const EVENT_REASONS: &[&str] = &[REASON_PRUNED, REASON_DRIFT_REPAIRED, REASON_GITLAB_CLEANUP_SKIPPED];

/// Which object a condition is set on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A TenantRepository (a registration).
    TenantRepository,
    /// A CDTarget.
    CDTarget,
}

/// Every condition type `kind` carries, with every reason it may take.
pub fn reasons(kind: Kind) -> Vec<(&'static str, Vec<&'static str>)> {
    match kind {
        Kind::TenantRepository => {
            let source: Vec<&str> =
                [REASON_SUCCEEDED, REASON_INVALID_SPEC, REASON_SECRET_NOT_FOUND].into_iter().chain(fetch()).collect();
            let applied = vec![
                REASON_SUCCEEDED,
                REASON_VALIDATION_FAILED,
                REASON_INVALID_POLICY,
                REASON_APPLY_FAILED,
                REASON_PRUNE_FAILED,
            ];
            // `Ready` carries the reason of whichever step decided it.
            let ready: Vec<&str> = source
                .iter()
                .chain(&applied)
                .copied()
                .chain([REASON_SUSPENDED, REASON_HEALTH_CHECK_PENDING, REASON_HEALTH_CHECK_FAILED])
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let gitlab_synced: Vec<&str> =
                [REASON_SYNCED, REASON_GITLAB_NOT_CONFIGURED, REASON_CLUSTER_ERROR, REASON_CLEANUP_PENDING]
                    .into_iter()
                    .chain(gitlab())
                    .collect();
            let posted: Vec<&str> = [REASON_POSTED].into_iter().chain(gitlab()).collect();
            vec![
                (READY, ready.clone()),
                (RECONCILING, ready.clone()),
                (STALLED, ready),
                (SOURCE_READY, source),
                (APPLIED, applied),
                (GITLAB_SYNCED, gitlab_synced),
                (COMMIT_STATUS_POSTED, posted),
                (SYNC_STATUS_WRITTEN, vec![REASON_WRITE_FAILED]),
            ]
        }
        Kind::CDTarget => {
            let applied = vec![
                REASON_APPLIED,
                REASON_KEDA_NOT_INSTALLED,
                REASON_INVALID_SPEC,
                REASON_INVALID_POLICY,
                REASON_SECRET_NOT_FOUND,
                REASON_API_ERROR,
                REASON_NAME_CONFLICT,
                REASON_SECRET_NOT_ALLOWED,
                REASON_CONFIG_MAP_NOT_ALLOWED,
            ];
            let ready: Vec<&str> = applied
                .iter()
                .copied()
                .chain([
                    REASON_AGENTS_NOT_AVAILABLE,
                    REASON_SCALED_OBJECT_NOT_READY,
                    REASON_ROLLOUT_FAILED,
                    REASON_SCALED_JOB_NOT_READY,
                    REASON_AGENT_JOBS_FAILING,
                ])
                .collect();
            let busy = vec![
                REASON_JOB_MODE,
                REASON_SCALE_ON_IN_FLIGHT,
                REASON_KEDA_DROPS_BUSY_AGENTS,
                REASON_SCALE_ON_IN_FLIGHT_DISABLED,
            ];
            vec![
                (READY, ready.clone()),
                (RECONCILING, ready.clone()),
                (STALLED, ready),
                (APPLIED, applied),
                (BUSY_AGENTS_COUNTED, busy),
            ]
        }
    }
}

/// Whether condition `kind` of `conditions` is `True`.
pub fn is_true(conditions: &[Condition], kind: &str) -> bool {
    conditions.iter().any(|c| c.type_ == kind && c.status == "True")
}

/// Every condition reason the controller sets, on either kind.
pub fn all_reasons() -> BTreeSet<&'static str> {
    [Kind::TenantRepository, Kind::CDTarget].into_iter().flat_map(reasons).flat_map(|(_, reasons)| reasons).collect()
}

fn fetch() -> impl Iterator<Item = &'static str> {
    FETCH_REASONS.iter().copied()
}

fn gitlab() -> impl Iterator<Item = &'static str> {
    GITLAB_ERROR_REASONS.iter().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_unique_per_condition_type_and_no_event_reason_is_a_condition_reason() {
        for kind in [Kind::TenantRepository, Kind::CDTarget] {
            for (condition, reasons) in reasons(kind) {
                let unique: BTreeSet<_> = reasons.iter().collect();
                assert_eq!(unique.len(), reasons.len(), "{kind:?} {condition}: {reasons:?}");
            }
        }
        let all = all_reasons();
        assert!(EVENT_REASONS.iter().all(|r| !all.contains(r)));
    }
}
