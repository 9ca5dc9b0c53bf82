//! What one CDTarget reconcile reads before it decides: the policy, the Secrets and ConfigMaps
//! the CDTarget references, who the namespace's tenant is, and what that tenant may read (asked
//! of the API server with SubjectAccessReviews). Reads only; the decision is [`super::plan`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

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
pub(crate) async fn observe(target: &CDTarget, namespace: &str, ctx: &Context) -> Result<Observed, Error> {
    let client = ctx.frame.writer.client();
    let policy = ctx.frame.policy.current().await.map_err(|source| Error::Read {
        kind: "ConfigMap",
        name: ctx.frame.policy.describe(),
        source,
    })?;
    let references = borrowed::references(target);
    let secrets = read_secrets(client, namespace, &references).await?;
    let identities = ctx.tenants.of(client, &ctx.platform_namespace, namespace).await?;
    let answers = ctx.tenants.ask(client, &borrowed::questions(&references, &identities)).await?;
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

/// The tenant identities of namespaces: the registrations (one list shared by every reconcile,
/// read again as soon as the registrations watch reports a change of an identity
/// ([`Tenants::follower`]), else at most every [`REGISTRATIONS_TTL`]) and the default
/// ServiceAccount.
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
    /// What the registrations watch reported, for [`Tenants::follower`].
    followed: Arc<Followed>,
    /// The answers of the SubjectAccessReviews asked within [`REVIEW_TTL`].
    reviews: Arc<std::sync::Mutex<HashMap<borrowed::Question, Arc<Review>>>>,
}

/// One SubjectAccessReview: when it was asked, and its answer once the API server gave it
/// (reconciles asking meanwhile wait for that answer instead of asking again).
#[derive(Debug)]
struct Review {
    asked: Instant,
    allowed: tokio::sync::OnceCell<bool>,
}

/// How long an answer of the API server to a SubjectAccessReview serves every reconcile asking
/// the same question: the ten CDTargets of a tenant that reconcile together ask once. A change of
/// the tenant's RBAC is not watched at all (it shows at the next reconcile), so this adds at
/// most these seconds to it.
pub const REVIEW_TTL: Duration = Duration::from_secs(10);

/// Answers remembered at most (then the expired ones, or all, are forgotten): bounds memory
/// whatever the tenants reference.
const REVIEWS_REMEMBERED: usize = 100_000;

/// What the registrations said, as listed, when, and how many identity changes the watch had
/// reported when the list began.
#[derive(Debug)]
struct Listed {
    at: Instant,
    changes: u64,
    registered: Arc<Vec<borrowed::Registered>>,
}

/// What the registrations watch reported: each registration's namespace and ServiceAccount, and
/// a count of the events that may have changed an identity.
#[derive(Debug, Default)]
struct Followed {
    /// By the registration's namespace and name.
    seen: std::sync::Mutex<HashMap<(String, String), borrowed::Registered>>,
    changes: AtomicU64,
}

impl Followed {
    fn saw(&self, event: &watcher::Event<TenantRepository>) {
        let key = |repo: &TenantRepository| (repo.namespace().unwrap_or_default(), repo.name_any());
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = match event {
            // A new list: a registration deleted meanwhile is simply not in it.
            watcher::Event::Init => {
                seen.clear();
                true
            }
            watcher::Event::InitDone => true,
            // A status write (every sync) changes no identity: it lists nothing again.
            watcher::Event::InitApply(repo) | watcher::Event::Apply(repo) => {
                let registered = borrowed::Registered::from(repo);
                seen.insert(key(repo), registered.clone()).as_ref() != Some(&registered)
            }
            watcher::Event::Delete(repo) => {
                seen.remove(&key(repo));
                true
            }
        };
        if changed {
            self.changes.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Registrations per page of the list: only a page of whole objects (status, managed fields) is
/// in memory at a time, the rest is kept as [`borrowed::Registered`].
const PAGE: u32 = 200;

/// How long a list of the registrations serves the CDTarget reconciles when the registrations
/// watch reports no change of an identity: one list per this period instead of one per
/// reconcile (a thousand registrations times ten thousand CDTargets). A registration the watch
/// reports created, deleted or with another `targetNamespace` or `serviceAccountName` makes the
/// next reconcile list again at once ([`Tenants::follower`]), so the identities are never looser
/// than the registrations the watch has seen. Every shard's registrations count, so this is a
/// list of its own, not the (sharded) reflector of the TenantRepository controller: in a sharded
/// deployment the watch sees this shard's registrations only, and a change of another shard's
/// (a new one, or one moved to a ServiceAccount with fewer rights) binds within this period.
pub const REGISTRATIONS_TTL: Duration = Duration::from_secs(30);

impl Tenants {
    /// `default_service_account` for namespaces without a registration.
    pub fn new(default_service_account: Option<String>) -> Self {
        let default_service_account = default_service_account.filter(|name| !name.trim().is_empty());
        Tenants { default_service_account, ..Tenants::default() }
    }

    /// What the controller's registrations watch must tell, for the identities to follow it at
    /// once ([`crate::controller::process::Registrations::observe`]): each of its events. Cheap,
    /// synchronous; `false` once these tenants are gone.
    pub fn follower(&self) -> impl FnMut(&watcher::Event<TenantRepository>) -> bool + Send + 'static {
        let followed: Weak<Followed> = Arc::downgrade(&self.followed);
        move |event| followed.upgrade().map(|followed| followed.saw(event)).is_some()
    }

    /// The tenant identities of `namespace`.
    async fn of(&self, client: &Client, platform: &str, namespace: &str) -> Result<Vec<borrowed::Identity>, Error> {
        let registrations = self.registrations(client, platform).await?;
        Ok(borrowed::tenant_identities(namespace, registrations.iter(), self.default_service_account.as_deref()))
    }

    /// Asks the API server every question with a `SubjectAccessReview` (a question, not a
    /// write), or takes the answer given within [`REVIEW_TTL`]. A failed review is not remembered.
    async fn ask(&self, client: &Client, questions: &[borrowed::Question]) -> Result<borrowed::Answers, Error> {
        let api: Api<SubjectAccessReview> = Api::all(client.clone());
        let mut answers = borrowed::Answers::new();
        for question in questions {
            let review = self.review(question);
            let allowed = review
                .allowed
                .get_or_try_init(|| async {
                    let answer = api.create(&PostParams::default(), &borrowed::access_review(question)).await?;
                    Ok::<_, kube::Error>(borrowed::allowed(&answer))
                })
                .await
                .map_err(|source| Error::Review {
                    user: question.identity.user(),
                    object: format!("{} {}/{}", question.resource.kind(), question.identity.namespace, question.name),
                    source,
                })?;
            answers.insert(question.clone(), *allowed);
        }
        Ok(answers)
    }

    /// The review of `question` asked within [`REVIEW_TTL`], or a new one to ask.
    fn review(&self, question: &borrowed::Question) -> Arc<Review> {
        let mut reviews = self.reviews.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(review) = reviews.get(question).filter(|review| review.asked.elapsed() < REVIEW_TTL) {
            return review.clone();
        }
        if reviews.len() >= REVIEWS_REMEMBERED {
            reviews.retain(|_, review| review.asked.elapsed() < REVIEW_TTL);
            if reviews.len() >= REVIEWS_REMEMBERED {
                reviews.clear();
            }
        }
        let review = Arc::new(Review { asked: Instant::now(), allowed: tokio::sync::OnceCell::new() });
        reviews.insert(question.clone(), review.clone());
        review
    }

    async fn registrations(&self, client: &Client, platform: &str) -> Result<Arc<Vec<borrowed::Registered>>, Error> {
        let mut listed = self.registrations.lock().await;
        // Read before the list: a change reported while it is under way leaves it stale.
        let changes = self.followed.changes.load(Ordering::SeqCst);
        if let Some(listed) = listed.as_ref()
            && listed.changes == changes
            && listed.at.elapsed() < REGISTRATIONS_TTL
        {
            return Ok(listed.registered.clone());
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
        let registered = Arc::new(registered);
        *listed = Some(Listed { at: Instant::now(), changes, registered: registered.clone() });
        Ok(registered)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A client whose API server records each request's URI and answers with what `answer`
    /// makes of the URI and the request's number (from 1), after a yield so that concurrent
    /// reconciles overlap.
    fn recording_server(
        requests: Arc<Mutex<Vec<String>>>,
        answer: impl Fn(&str, usize) -> (u16, serde_json::Value) + Clone + Send + 'static,
    ) -> Client {
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let uri = request.uri().to_string();
            let seen = {
                let mut requests = requests.lock().unwrap();
                requests.push(uri.clone());
                requests.len()
            };
            let (status, body) = answer(&uri, seen);
            async move {
                tokio::task::yield_now().await;
                let mut response = http::Response::new(kube::client::Body::from(serde_json::to_vec(&body).unwrap()));
                *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        Client::new(service, "default")
    }

    /// Answers with the page of registrations the request's `continue` token asks for
    /// (`team-a`'s first, then `team-b`'s).
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
        recording_server(requests, move |uri, _| {
            (200, if uri.contains("continue=rest") { page("team-b", None) } else { page("team-a", Some("rest")) })
        })
    }

    /// Answers every SubjectAccessReview with `allowed`, except that the first `failing` requests
    /// get a 500.
    fn review_server(requests: Arc<Mutex<Vec<String>>>, failing: usize) -> Client {
        recording_server(requests, move |_, seen| {
            if seen <= failing {
                let failure = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
                (500, failure)
            } else {
                let answer = serde_json::json!({"apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview", "spec": {}, "status": {"allowed": true}});
                (201, answer)
            }
        })
    }

    fn question(namespace: &str, secret: &str) -> borrowed::Question {
        borrowed::Question {
            identity: borrowed::Identity { namespace: namespace.into(), name: "deployer".into() },
            resource: borrowed::Resource::Secret,
            name: secret.into(),
        }
    }

    #[tokio::test]
    async fn reconciles_asking_the_same_question_together_send_one_review() {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let client = review_server(requests.clone(), 0);
        let tenants = Tenants::default();
        let same = [question("team-a", "azp-token")];
        let (a, b, c) =
            tokio::join!(tenants.ask(&client, &same), tenants.ask(&client, &same), tenants.ask(&client, &same));
        for answers in [a, b, c] {
            assert_eq!(answers.unwrap().get(&same[0]), Some(&true));
        }
        assert_eq!(requests.lock().unwrap().len(), 1, "one review for the three reconciles");
        // Another question is asked on its own.
        tenants.ask(&client, &[question("team-b", "azp-token")]).await.unwrap();
        assert_eq!(requests.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_failed_review_is_not_remembered() {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let client = review_server(requests.clone(), 1);
        let tenants = Tenants::default();
        let asked = [question("team-a", "azp-token")];
        let failed = tenants.ask(&client, &asked).await.unwrap_err();
        assert!(failed.to_string().contains("system:serviceaccount:team-a:deployer"), "{failed}");
        assert_eq!(tenants.ask(&client, &asked).await.unwrap().get(&asked[0]), Some(&true));
        assert_eq!(requests.lock().unwrap().len(), 2, "asked again after the failure");
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

    #[tokio::test]
    async fn an_identity_change_the_watch_reports_lists_again_at_once_and_a_status_write_does_not() {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let client = paging_server(requests.clone());
        let tenants = Tenants::default();
        let mut follow = tenants.follower();
        let lists = || requests.lock().unwrap().iter().filter(|uri| !uri.contains("continue=")).count();
        let repo = TenantRepository::test().with_name("team-a").target_namespace("team-a").service_account("deployer");
        assert!(follow(&watcher::Event::Apply(repo.clone())), "the tenants are alive");
        tenants.of(&client, "cdtarget-system", "team-a").await.unwrap();
        assert_eq!(lists(), 1);

        // A status write (the watch's Modified event of every sync): the list still serves.
        let mut synced = repo.clone();
        synced.metadata.resource_version = Some("2".into());
        follow(&watcher::Event::Apply(synced));
        tenants.of(&client, "cdtarget-system", "team-a").await.unwrap();
        assert_eq!(lists(), 1, "no identity changed");

        // Within REGISTRATIONS_TTL of the list: each change of an identity lists again.
        for change in [
            watcher::Event::Apply(repo.clone().service_account("weaker")),
            watcher::Event::Apply(repo.clone().with_name("team-a-second")),
            watcher::Event::Delete(repo.clone()),
            watcher::Event::Init,
        ] {
            let before = lists();
            follow(&change);
            tenants.of(&client, "cdtarget-system", "team-a").await.unwrap();
            assert_eq!(lists(), before + 1, "{change:?}");
        }
        drop(tenants);
        assert!(!follow(&watcher::Event::Apply(repo)), "gone with the tenants");
    }
}
