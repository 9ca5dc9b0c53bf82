//! The GitLab phase of a deletion: the registration's deploy key and webhook removed from the
//! project, unless the escape hatch says to leave them ([`deletion_of`]). Releasing the
//! finalizer and reporting a refusal are the deletion path's ([`super::super::cleanup`]).

use kube::ResourceExt;

use super::{GitLabStep, Inputs, StepError, input_for, not_configured, step_of};
use crate::api::tenant_repository::TenantRepository;
use crate::gitlab::{self, SyncOutcome};

/// What a deletion of the registration calls for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// Remove key and hook from GitLab, then release the finalizer.
    Remove,
    /// The escape hatch (`SKIP_CLEANUP_ANNOTATION: "true"`): release the finalizer, GitLab
    /// untouched.
    Skip,
}

/// `Some` when the registration is being deleted and still holds our finalizer.
pub(crate) fn deletion_of(repo: &TenantRepository) -> Option<Deletion> {
    repo.metadata.deletion_timestamp.as_ref()?;
    if !repo.finalizers().iter().any(|f| f == gitlab::FINALIZER) {
        return None;
    }
    let skip = repo.annotations().get(gitlab::SKIP_CLEANUP_ANNOTATION).is_some_and(|v| v.trim() == "true");
    Some(if skip { Deletion::Skip } else { Deletion::Remove })
}

/// The note of the Event recorded when the escape hatch released the finalizer.
pub(crate) fn skipped_note(repo: &TenantRepository) -> String {
    let recorded = repo.status.as_ref().and_then(|s| s.gitlab.clone()).unwrap_or_default();
    let id = |v: Option<i64>| v.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
    format!(
        "{} is set: GitLab was not cleaned up; remove by hand on project {} (id {}): deploy key {}, webhook {}",
        gitlab::SKIP_CLEANUP_ANNOTATION,
        recorded.project_path.as_deref().unwrap_or("unknown"),
        id(recorded.project_id),
        id(recorded.deploy_key_id),
        id(recorded.hook_id),
    )
}

/// Removes the deploy key and the webhook of `repo` from GitLab: what was removed, or the step
/// that says why not (GitLab refused, or the controller has no GitLab settings).
pub async fn cleanup(
    repo: &TenantRepository,
    namespace: &str,
    inputs: Inputs<'_>,
) -> Result<Result<SyncOutcome, GitLabStep>, StepError> {
    Ok(match inputs.settings {
        None => Err(not_configured()),
        Some(settings) => match input_for(repo, namespace, inputs.secrets, settings, true).await? {
            Err(step) => Err(step),
            Ok((input, _)) => gitlab::remove(&settings.client, &input).await.map_err(|e| step_of(&Err(e))),
        },
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::api::tenant_repository::{GitLabSpec, GitLabStatus};
    use crate::controller::tenant_repository::gitlab::syncs;

    fn repo() -> TenantRepository {
        TenantRepository::test().with_name("app").with_gitlab(GitLabSpec::test())
    }

    #[test]
    fn deletion_needs_the_timestamp_and_our_finalizer_and_honours_the_escape_hatch() {
        let mut repo = repo();
        repo.metadata.finalizers = Some(vec![gitlab::FINALIZER.into()]);
        assert_eq!(deletion_of(&repo), None, "not being deleted");
        repo.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(deletion_of(&repo), Some(Deletion::Remove));
        repo.annotations_mut().insert(gitlab::SKIP_CLEANUP_ANNOTATION.into(), "true".into());
        assert_eq!(deletion_of(&repo), Some(Deletion::Skip));
        assert!(!syncs(&repo), "no sync while being deleted");
        repo.metadata.finalizers = None;
        assert_eq!(deletion_of(&repo), None, "released already");
        assert!(!syncs(&repo), "released: nothing is added again");
    }

    #[test]
    fn the_skip_event_names_what_is_left_behind() {
        let mut repo = repo();
        repo.status = Some(crate::api::TenantRepositoryStatus {
            gitlab: Some(GitLabStatus {
                project_id: Some(42),
                project_path: Some("team-a/app".into()),
                deploy_key_id: Some(7),
                hook_id: Some(9),
                ..GitLabStatus::default()
            }),
            ..Default::default()
        });
        let note = skipped_note(&repo);
        assert!(note.contains("team-a/app (id 42): deploy key 7, webhook 9"), "{note}");
    }
}
