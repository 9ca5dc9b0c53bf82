//! The GitLab phase after the apply: the deploy key and the webhook on the project as the
//! registration wants them, the key rotated first when its annotation asks
//! ([`rotation_due`]). What it did is a [`GitLabStep`] for the reconcile's report.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::{
    GitLabStep, Inputs, StepError, bytes, cluster_failed, input_for, invalid, not_configured, step_of, syncs, text,
};
use crate::api::tenant_repository::TenantRepository;
use crate::apply::{Write, Writer};
use crate::gitlab::{self, SyncInput, keys};

/// The rotation to carry out: the registration's `ROTATE_ANNOTATION` value when it differs from
/// the `ROTATED_ANNOTATION` recorded on the Secret.
pub(crate) fn rotation_due(repo: &TenantRepository, secret: &Secret) -> Option<String> {
    let wanted = repo.annotations().get(gitlab::ROTATE_ANNOTATION).map(|v| v.trim()).filter(|v| !v.is_empty())?;
    let done = secret.annotations().get(gitlab::ROTATED_ANNOTATION).map(|v| v.trim());
    (done != Some(wanted)).then(|| wanted.to_owned())
}

/// After the apply, whatever its outcome: syncs key and hook (rotating the key first when asked)
/// and says what to report; when [`super::prepare()`] failed (`prepared`), or a read or write in
/// the cluster fails here, that failure instead ([`cluster_failed`]). `None` for a registration
/// without `spec.gitlab`.
pub async fn sync(
    repo: &TenantRepository,
    namespace: &str,
    inputs: Inputs<'_>,
    prepared: Result<(), StepError>,
) -> Option<GitLabStep> {
    let synced = match prepared {
        Ok(()) => keys_and_hooks(repo, namespace, inputs).await,
        Err(e) => Err(e),
    };
    synced.unwrap_or_else(|e| Some(cluster_failed(&e)))
}

#[tracing::instrument(name = "gitlab", skip_all)]
async fn keys_and_hooks(
    repo: &TenantRepository,
    namespace: &str,
    inputs: Inputs<'_>,
) -> Result<Option<GitLabStep>, StepError> {
    if !syncs(repo) {
        return Ok(None);
    }
    let Some(settings) = inputs.settings else { return Ok(Some(not_configured())) };
    let secrets = inputs.secrets;
    let (input, secret) = match input_for(repo, namespace, secrets, settings, false).await? {
        Ok(found) => found,
        Err(step) => return Ok(Some(step)),
    };
    let mut input = input;
    if let Some(secret) = secret
        && let Some(value) = rotation_due(repo, &secret)
    {
        let name = secret.name_any();
        if let Some(step) = rotate(repo, namespace, inputs.writer, settings, &input, secret, &value).await? {
            return Ok(Some(step));
        }
        secrets.forget(&name);
        // The Secret holds the new pair: this plain sync removes the old key.
        input = match input_for(repo, namespace, secrets, settings, false).await? {
            Ok((input, _)) => input,
            Err(step) => return Ok(Some(step)),
        };
    }
    Ok(Some(step_of(&gitlab::sync(&settings.client, &input).await)))
}

/// Rotation: new pair, synced with the old key kept, then written into the Secret. `Some` when
/// it stopped (the old key is still in the Secret and on the project).
async fn rotate(
    repo: &TenantRepository,
    namespace: &str,
    writer: &Writer,
    settings: &gitlab::Settings,
    input: &SyncInput,
    secret: Secret,
    value: &str,
) -> Result<Option<GitLabStep>, StepError> {
    let marker = gitlab::marker(namespace, &repo.name_any());
    let pair = match keys::generate(&marker) {
        Ok(pair) => pair,
        Err(e) => return Ok(Some(invalid(e.to_string()))),
    };
    let rotating = match input.clone().rotating_to(&pair.public_openssh) {
        Ok(rotating) => rotating,
        Err(error) => return Ok(Some(step_of(&Err(error)))),
    };
    if let Err(error) = gitlab::sync(&settings.client, &rotating).await {
        let mut step = step_of(&Err(error));
        step.verdict.message = format!("rotating the deploy key: {}", step.verdict.message);
        return Ok(Some(step));
    }
    let data = secret.data.clone().unwrap_or_default();
    let known_hosts = text(&data, keys::KNOWN_HOSTS).unwrap_or_else(|| settings.known_hosts.clone());
    let patch = serde_json::json!({
        "metadata": { "annotations": { gitlab::ROTATED_ANNOTATION: value } },
        "data": bytes(pair.secret_data(&known_hosts)),
    });
    let write = Write::PatchSecret {
        what: "writing the rotated key into",
        namespace: namespace.to_owned(),
        name: secret.name_any(),
        patch,
    };
    writer.execute(write).await.map_err(StepError::Write)?;
    tracing::info!(registration = %marker, fingerprint = %pair.fingerprint, "rotated the deploy key");
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tenant_repository::GitLabSpec;

    #[test]
    fn rotation_is_due_once_per_value() {
        let mut repo = TenantRepository::test().with_name("app").with_gitlab(GitLabSpec::test());
        let mut secret = Secret::default();
        assert_eq!(rotation_due(&repo, &secret), None);
        repo.annotations_mut().insert(gitlab::ROTATE_ANNOTATION.into(), "2026-11-22".into());
        assert_eq!(rotation_due(&repo, &secret).as_deref(), Some("2026-11-22"));
        secret.annotations_mut().insert(gitlab::ROTATED_ANNOTATION.into(), "2026-11-22".into());
        assert_eq!(rotation_due(&repo, &secret), None);
    }
}
