//! The GitLab phase before the fetch: our finalizer is on the registration, and the key pair
//! Secret exists (generated and created when missing, so the first fetch already has
//! credentials). A failure here is reported by the keys and hooks phase after the apply; it
//! never stops the Git apply.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::{Inputs, StepError, bytes, finalizers_adding, patch_finalizers, syncs};
use crate::api::tenant_repository::TenantRepository;
use crate::apply::{Done, Write};
use crate::gitlab::{self, keys};

/// Before the fetch: our finalizer is on the registration, and the key pair Secret exists
/// (generated and created when missing, so the first fetch already has credentials).
pub(crate) async fn prepare(repo: &TenantRepository, namespace: &str, inputs: Inputs<'_>) -> Result<(), StepError> {
    let (Some(spec), Some(settings)) = (&repo.spec.gitlab, inputs.settings) else { return Ok(()) };
    let secrets = inputs.secrets;
    if !syncs(repo) {
        return Ok(());
    }
    if let Some(list) = finalizers_adding(repo) {
        patch_finalizers(inputs.writer, namespace, repo, list).await?;
    }
    let Some(secret_ref) = &repo.spec.secret_ref else { return Ok(()) };
    if !spec.manage_deploy_key || secrets.get(&secret_ref.name).await?.is_some() {
        return Ok(());
    }
    let marker = gitlab::marker(namespace, &repo.name_any());
    let pair = match keys::generate(&marker) {
        Ok(pair) => pair,
        // Reported by the sync step, which finds no Secret.
        Err(error) => {
            tracing::warn!(%error, registration = %marker, "cannot generate a deploy key");
            return Ok(());
        }
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_ref.name.clone()),
            namespace: Some(namespace.to_owned()),
            owner_references: repo.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(bytes(pair.secret_data(&settings.known_hosts))),
        ..Secret::default()
    };
    match inputs.writer.execute(Write::CreateSecret { what: "creating the deploy key", secret: Box::new(secret) }).await
    {
        Ok(Done::AlreadyExists) => {
            // Made meanwhile (by a person, or a previous attempt): use it.
            secrets.forget(&secret_ref.name);
            Ok(())
        }
        Ok(_) => {
            tracing::info!(registration = %marker, fingerprint = %pair.fingerprint, "generated the deploy key Secret");
            secrets.forget(&secret_ref.name);
            Ok(())
        }
        Err(e) => Err(StepError::Write(e)),
    }
}
