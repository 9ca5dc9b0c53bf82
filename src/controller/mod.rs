//! The controller: the TenantRepository and CDTarget reconcilers and the process that runs them.
//!
//! - [`tenant_repository`] and [`cdtarget`]: one folder per reconciler, one file per step
//!   (observe, plan, execute, status, and the TenantRepository's wait, GitLab phases, SyncStatus
//!   and summarize), run in order by the reconciler's `reconcile`.
//! - [`inputs`]: what every reconcile reads that is not its own object (the policy, parsed
//!   once per change; whether KEDA is installed).
//! - [`conditions`] and [`events`]: how an outcome is reported (kstatus conditions, whose types
//!   and reasons are [`crate::api::conditions`]'s; Events, through one publisher);
//!   [`tenant_text`]: what of it a tenant reads.
//! - [`process`]: the wiring of `cdtarget controller` (flags, watches, leader election, KEDA
//!   discovery, shutdown) and the builder the end-to-end tests start it through.
//!
//! Failures are classified once ([`crate::error`]) and every write goes through the one writer
//! ([`crate::apply::writer`]). Nothing below this module imports it.

pub mod cdtarget;
pub mod conditions;
pub mod events;
pub mod frame;
pub mod inputs;
pub mod process;
pub mod tenant_repository;
pub mod tenant_text;

use std::time::Duration;

/// Retry of an object waiting for something to appear (a Secret); its watch usually comes first.
pub(crate) const WAIT_RETRY: Duration = Duration::from_secs(30);
/// Resync of a stalled object: only a change of its spec (or of what it references) helps; this
/// is a safety net.
pub(crate) const STALLED_RESYNC: Duration = Duration::from_secs(60 * 60);
/// Back-off after a transient error.
pub const TRANSIENT_RETRY: Duration = Duration::from_secs(15);

/// The sooner of two requeues, `None` meaning "wait for a change" (so any requeue is sooner).
pub(crate) fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
