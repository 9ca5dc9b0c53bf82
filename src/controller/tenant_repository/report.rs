//! What the steps of one reconcile found, each in its own field, filled in the order
//! [`super::reconcile`] runs them; [`super::summarize()`] turns it (with what the reconcile
//! concluded, [`super::concluded`]) into every condition and the status, and the requeue.

use super::execute::Executed;
use super::gitlab::{CommitStatusReport, GitLabStep};
use super::wait::Waited;

/// The outcome of every step of one reconcile after the plan.
#[derive(Debug, Default)]
pub struct Report {
    /// The receiver path of the registration's webhook, when its Secret holds a `token`.
    pub webhook_path: Option<String>,
    /// What the dry run, the apply and the prune did.
    pub executed: Executed,
    /// What `spec.wait`'s health check found.
    pub waited: Waited,
    /// The GitLab keys and hooks phase (`GitLabSynced`, `status.gitlab`); `None` for a
    /// registration without `spec.gitlab`.
    pub gitlab: Option<GitLabStep>,
    /// The commit status phases (`CommitStatusPosted`, what `status.gitlab` remembers).
    pub commit_status: CommitStatusReport,
    /// Writing the tenant's SyncStatus: `None` when the controller keeps none (tests), else the
    /// write's outcome (`SyncStatusWritten`).
    pub sync_status: Option<Result<(), String>>,
}
