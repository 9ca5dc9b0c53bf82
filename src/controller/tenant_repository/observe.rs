//! What one TenantRepository reconcile reads before it decides, step by step up to the first
//! failure: the registration's own settings, its credentials Secret, the fetch, the policy, and
//! the load of the fetched tree (read, kustomizations built, checked under the tenancy rules and
//! against the cluster's discovery). Reads only; the decision is [`super::plan()`].

use kube::ResourceExt;
use tracing::Instrument;

use super::load::LoadRequest;
use super::secrets::SecretReads;
use super::{Context, Error};
use crate::api::tenant_repository::{TenantRepository, webhook_path, webhook_token};
use crate::apply::discovery;
use crate::manifests::ApplySet;
use crate::problem::Problem;
use crate::source::registration::{credentials_from_secret, interval_of, reference_of, timeout_of};
use crate::source::{Credentials, Request, SourceError, path_components};

/// What one reconcile read, step by step, up to the first failure.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    /// `spec.suspend` is set: nothing was read.
    Suspended,
    /// The registration is wrong (ref, interval, path rules, Secret content); nothing was fetched.
    InvalidSpec(String),
    /// The credentials Secret (named here) does not exist; nothing was fetched.
    SecretNotFound(String),
    /// The fetch (or reading `spec.path` of the snapshot) failed.
    FetchFailed(SourceError),
    /// The revision was fetched but the platform policy is invalid, so nothing can be loaded.
    InvalidPolicy {
        /// The fetched commit.
        revision: String,
        /// What is wrong with the policy.
        problems: Vec<Problem>,
    },
    /// The revision was fetched and loaded: the apply set, or every problem of every document.
    Fetched {
        /// The fetched commit.
        revision: String,
        /// The load's outcome (all or nothing).
        load: Result<ApplySet, Vec<Problem>>,
    },
}

/// Reads what the plan needs, stopping at the first step that fails.
#[tracing::instrument(name = "observe", skip_all)]
pub(crate) async fn observe(
    repo: &TenantRepository,
    namespace: &str,
    ctx: &Context,
    secrets: &SecretReads,
) -> Result<Observed, Error> {
    if repo.spec.suspend {
        return Ok(Observed::Suspended);
    }
    let checked = reference_of(&repo.spec)
        .and_then(|r| interval_of(&repo.spec).map(|_| r))
        .and_then(|r| timeout_of(&repo.spec).map(|timeout| (r, timeout)));
    let (reference, timeout) = match checked {
        Ok(checked) => checked,
        Err(message) => return Ok(Observed::InvalidSpec(message)),
    };
    let (credentials, ca_bundle) = match &repo.spec.secret_ref {
        None => (Credentials::None, None),
        Some(secret_ref) => match secrets.data(&secret_ref.name).await? {
            None => return Ok(Observed::SecretNotFound(format!("{namespace}/{}", secret_ref.name))),
            Some(data) => match credentials_from_secret(&data) {
                Ok(found) => found,
                Err(message) => {
                    return Ok(Observed::InvalidSpec(format!("Secret {namespace}/{}: {message}", secret_ref.name)));
                }
            },
        },
    };
    let request = Request { url: repo.spec.url.clone(), reference, credentials, ca_bundle };
    let key = format!("{namespace}/{}", repo.name_any());
    let fetched = match ctx.fetcher.fetch_within(&key, request, timeout).instrument(tracing::info_span!("fetch")).await
    {
        Ok(fetched) => fetched,
        Err(error) => return Ok(Observed::FetchFailed(error)),
    };
    let snapshot = fetched.snapshot();
    let revision = snapshot.revision.clone();
    // Checked component by component (no link, no `..`); the build's boundary is the whole
    // snapshot, so `spec.path` may name an overlay whose bases are elsewhere in the repository.
    if let Err(error) = snapshot.dir(repo.spec.path.as_deref()) {
        return Ok(Observed::FetchFailed(error));
    }
    let root = snapshot.root.clone();
    let synced = path_components(repo.spec.path.as_deref().unwrap_or_default()).unwrap_or_default().join("/");
    let read = ctx.frame.policy.current().await.map_err(|source| Error::Read {
        kind: "ConfigMap",
        name: ctx.frame.policy.describe(),
        source,
    })?;
    let policy = match read.as_ref() {
        Ok(policy) => policy.clone(),
        Err(problems) => return Ok(Observed::InvalidPolicy { revision, problems: problems.clone() }),
    };
    // Reading and checking a tree is blocking file work and CPU, bounded by the revision's budget:
    // on a loader thread, off the runtime.
    let request = LoadRequest {
        key: key.clone(),
        revision: revision.clone(),
        root,
        synced,
        namespace: repo.spec.target_namespace.clone(),
    };
    let load = ctx.loader.load(request, ctx.manifest_limits, policy).await;
    // Scope and kind by the cluster's own discovery, before anything is applied.
    let load = match load {
        Ok(set) => {
            let problems = discovery::check_set(ctx.frame.writer.discovery(), &set)
                .await
                .map_err(|source| Error::Read { kind: "API discovery", name: "/api, /apis".into(), source })?;
            if problems.is_empty() { Ok(set) } else { Err(problems) }
        }
        Err(problems) => Err(problems),
    };
    Ok(Observed::Fetched { revision, load })
}

/// The receiver path, when the registration has a webhook whose Secret holds a `token`.
pub(crate) async fn read_webhook_path(
    secrets: &SecretReads,
    namespace: &str,
    repo: &TenantRepository,
) -> Result<Option<String>, Error> {
    let Some(webhook) = &repo.spec.webhook else { return Ok(None) };
    let data = secrets.data(&webhook.secret_ref.name).await?;
    let token = data.as_ref().and_then(|d| d.get("token")).and_then(|t| webhook_token(&t.0));
    Ok(token.map(|t| webhook_path(t, &repo.name_any(), namespace)))
}

impl Observed {
    /// The commit fetched, when the fetch got that far.
    pub fn revision(&self) -> Option<&str> {
        match self {
            Observed::InvalidPolicy { revision, .. } | Observed::Fetched { revision, .. } => Some(revision),
            _ => None,
        }
    }
}
