//! What one CDTarget reconcile reads before it decides: the policy, the Secrets and ConfigMaps
//! the CDTarget references, who the namespace's tenant is, and what that tenant may read (asked
//! of the API server with SubjectAccessReviews). Reads only; the decision is [`super::plan`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};

use super::borrowed::{self, Refusal};
use super::plan::SecretsRead;
use super::{Context, Error};
use crate::api::CDTarget;
use crate::api::tenant_repository::TenantRepository;
use crate::controller::inputs::PolicyRead;

/// What a reconcile read.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The platform policy, or why it is invalid.
    pub policy: Arc<PolicyRead>,
    /// The referenced Secrets' data (`None`: the Secret does not exist).
    pub secrets: SecretsRead,
    /// The referenced objects the agents may not be given.
    pub refused: Vec<Refusal>,
}

/// Reads everything [`super::plan::plan`] needs for `target` in `namespace`.
#[tracing::instrument(name = "observe", skip_all)]
pub async fn observe(target: &CDTarget, namespace: &str, ctx: &Context) -> Result<Observed, Error> {
    let client = ctx.writer.client();
    let policy = ctx.policy.current().await.map_err(|source| Error::Read {
        kind: "ConfigMap",
        name: ctx.policy.describe(),
        source,
    })?;
    let references = borrowed::references(target);
    let secrets = read_secrets(client, namespace, &references).await?;
    let identities = ctx.tenants.of(client, &ctx.platform_namespace, namespace).await?;
    let answers = ask(client, &borrowed::questions(&references, &identities)).await?;
    let refused = borrowed::refusals(namespace, &references, &secrets, &identities, &answers);
    let secrets =
        secrets.into_iter().map(|(name, secret)| (name, secret.map(|s| s.data.unwrap_or_default()))).collect();
    Ok(Observed { policy, secrets, refused })
}

/// Every referenced Secret, read once (`None`: it does not exist). Their data feeds the digests;
/// their type and annotations the ServiceAccount-token rule.
async fn read_secrets(
    client: &Client,
    namespace: &str,
    references: &[borrowed::Reference],
) -> Result<BTreeMap<String, Option<Secret>>, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut secrets = BTreeMap::new();
    for name in borrowed::secret_names(references) {
        let secret = api.get_opt(name).await.map_err(|source| Error::Read {
            kind: "Secret",
            name: format!("{namespace}/{name}"),
            source,
        })?;
        secrets.insert(name.to_owned(), secret);
    }
    Ok(secrets)
}

/// Asks the API server every question with a `SubjectAccessReview` (a question, not a write).
async fn ask(client: &Client, questions: &[borrowed::Question]) -> Result<borrowed::Answers, Error> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let mut answers = borrowed::Answers::new();
    for question in questions {
        let answer =
            api.create(&PostParams::default(), &borrowed::access_review(question)).await.map_err(|source| {
                Error::Review {
                    user: question.identity.user(),
                    object: format!("{} {}/{}", question.resource.kind(), question.identity.namespace, question.name),
                    source,
                }
            })?;
        answers.insert(question.clone(), borrowed::allowed(&answer));
    }
    Ok(answers)
}

/// The tenant identities of namespaces: the registrations (read at most every
/// [`REGISTRATIONS_TTL`], shared by every reconcile) and the default ServiceAccount.
#[derive(Clone, Debug, Default)]
pub struct Tenants {
    /// The ServiceAccount (in the CDTarget's namespace) whose read rights bound what a CDTarget
    /// may hand its agents when no TenantRepository applies into that namespace
    /// (`--default-tenant-service-account`); `None`: only the ServiceAccount-token rule applies
    /// there.
    pub default_service_account: Option<String>,
    registrations: Arc<Mutex<Option<Listed>>>,
}

/// The registrations as listed, and when.
type Listed = (Instant, Arc<Vec<TenantRepository>>);

/// How long a list of the registrations serves the CDTarget reconciles: one list per this
/// period instead of one per reconcile (a thousand registrations times ten thousand CDTargets).
/// A new registration's identity applies within it; a removed one is still asked about meanwhile
/// (stricter, never looser). Every shard's registrations count, so this is a list of its own,
/// not the (sharded) reflector of the TenantRepository controller.
pub const REGISTRATIONS_TTL: Duration = Duration::from_secs(30);

impl Tenants {
    /// `default_service_account` for namespaces without a registration.
    pub fn new(default_service_account: Option<String>) -> Self {
        let default_service_account = default_service_account.filter(|name| !name.trim().is_empty());
        Tenants { default_service_account, ..Tenants::default() }
    }

    /// The tenant identities of `namespace`.
    async fn of(&self, client: &Client, platform: &str, namespace: &str) -> Result<Vec<borrowed::Identity>, Error> {
        let registrations = self.registrations(client, platform).await?;
        Ok(borrowed::tenant_identities(namespace, registrations.iter(), self.default_service_account.as_deref()))
    }

    async fn registrations(&self, client: &Client, platform: &str) -> Result<Arc<Vec<TenantRepository>>, Error> {
        let fresh = |read: &Option<Listed>| {
            read.as_ref().filter(|(at, _)| at.elapsed() < REGISTRATIONS_TTL).map(|(_, list)| list.clone())
        };
        if let Some(list) = fresh(&self.registrations.lock().unwrap_or_else(std::sync::PoisonError::into_inner)) {
            return Ok(list);
        }
        let api: Api<TenantRepository> = Api::namespaced(client.clone(), platform);
        let listed = api.list(&ListParams::default()).await.map_err(|source| Error::Read {
            kind: "TenantRepository",
            name: format!("{platform}/*"),
            source,
        })?;
        let list = Arc::new(listed.items);
        *self.registrations.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((Instant::now(), list.clone()));
        Ok(list)
    }
}
