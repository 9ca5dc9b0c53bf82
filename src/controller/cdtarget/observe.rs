//! What one CDTarget reconcile reads before it decides: the policy, the Secrets and ConfigMaps
//! the CDTarget references, who the namespace's tenant is, and what that tenant may read (asked
//! of the API server with SubjectAccessReviews). Reads only; the decision is [`super::plan`].

use std::collections::BTreeMap;
use std::sync::Arc;
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
    /// Held while a list is under way, so that the reconciles that find it stale wait for one
    /// list instead of each sending their own.
    registrations: Arc<tokio::sync::Mutex<Option<Listed>>>,
}

/// What the registrations said, as listed, and when.
type Listed = (Instant, Arc<Vec<borrowed::Registered>>);

/// Registrations per page of the list: only a page of whole objects (status, managed fields) is
/// in memory at a time, the rest is kept as [`borrowed::Registered`].
const PAGE: u32 = 200;

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

    async fn registrations(&self, client: &Client, platform: &str) -> Result<Arc<Vec<borrowed::Registered>>, Error> {
        let mut listed = self.registrations.lock().await;
        if let Some((at, list)) = listed.as_ref()
            && at.elapsed() < REGISTRATIONS_TTL
        {
            return Ok(list.clone());
        }
        let api: Api<TenantRepository> = Api::namespaced(client.clone(), platform);
        let mut registered = Vec::new();
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = api.list(&params).await.map_err(|source| Error::Read {
                kind: "TenantRepository",
                name: format!("{platform}/*"),
                source,
            })?;
            registered.extend(page.items.iter().map(borrowed::Registered::from));
            match page.metadata.continue_.filter(|token| !token.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        let list = Arc::new(registered);
        *listed = Some((Instant::now(), list.clone()));
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A client whose API server answers every request with the page of registrations the
    /// request's `continue` token asks for (`team-a`'s first, then `team-b`'s), recording the
    /// request URIs.
    fn paging_server(requests: Arc<Mutex<Vec<String>>>) -> Client {
        let page = |target: &str, next: Option<&str>| {
            let repo = TenantRepository::test().with_name(target).target_namespace(target).service_account("deployer");
            serde_json::json!({
                "apiVersion": "cdtarget.io/v1alpha1",
                "kind": "TenantRepositoryList",
                "metadata": {"continue": next.unwrap_or_default()},
                "items": [repo],
            })
        };
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let uri = request.uri().to_string();
            requests.lock().unwrap().push(uri.clone());
            let body = if uri.contains("continue=rest") { page("team-b", None) } else { page("team-a", Some("rest")) };
            async move {
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                    serde_json::to_vec(&body).unwrap(),
                )))
            }
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn concurrent_reconciles_share_one_paged_list_of_the_registrations() {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let client = paging_server(requests.clone());
        let tenants = Tenants::default();
        let (a, b) = tokio::join!(
            tenants.of(&client, "cdtarget-system", "team-a"),
            tenants.of(&client, "cdtarget-system", "team-b")
        );
        let users = |ids: Vec<borrowed::Identity>| ids.iter().map(borrowed::Identity::user).collect::<Vec<_>>();
        assert_eq!(users(a.unwrap()), ["system:serviceaccount:team-a:deployer"]);
        assert_eq!(users(b.unwrap()), ["system:serviceaccount:team-b:deployer"]);
        // One list for both reconciles, in two pages.
        let requests = requests.lock().unwrap().clone();
        assert_eq!(requests.len(), 2, "{requests:?}");
        assert!(requests.iter().all(|uri| uri.contains(&format!("limit={PAGE}"))), "{requests:?}");
        assert!(requests[1].contains("continue=rest"), "{requests:?}");
    }
}
