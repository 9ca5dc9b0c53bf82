//! The CDTarget reconciler: read the policy and the referenced Secrets, check that the CDTarget
//! lends its agents nothing its tenant could not read ([`super::borrowed`]), render the four
//! children, server-side apply them with controller owner references, and write status once.
//!
//! The decision (what to apply, which health to report, when to come back) is [`plan`], a pure
//! function over what was read; which children may be written at all is
//! [`super::children::plan`], over the live objects: a child never takes over an object it does
//! not control. [`reconcile`] only reads, calls them, and executes the result.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;

use crate::api::tenant_repository::TenantRepository;
use crate::api::{CDTarget, CDTargetStatus, FIELD_MANAGER, RenderedSummary};
use crate::controller::borrowed::{self, Refusal};
use crate::controller::children::{self, Conflict, Write};
use crate::controller::conditions::{self, Health};
use crate::policy::Policy;
use crate::problem::Problem;
use crate::render::{self, Children, Scaling, SecretDigests};

/// Condition reason: every child was applied.
pub const REASON_APPLIED: &str = "Applied";
/// Condition reason: children applied, but as a plain Deployment because KEDA is not installed.
pub const REASON_KEDA_NOT_INSTALLED: &str = "KedaNotInstalled";
/// Condition reason: the CDTarget breaks a rule; every problem is in the message.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// Condition reason: the cluster admin's policy ConfigMap cannot be read as a policy.
pub const REASON_INVALID_POLICY: &str = "InvalidPolicy";
/// Condition reason: a referenced Secret (or the token key in it) does not exist yet.
pub const REASON_SECRET_NOT_FOUND: &str = "SecretNotFound";
/// Condition reason: the API server refused a request; retried with back-off.
pub const REASON_API_ERROR: &str = "ApiError";
/// Condition reason: an object with a child's kind and name exists and is not controlled by this
/// CDTarget; nothing is written.
pub const REASON_NAME_CONFLICT: &str = "NameConflict";
/// Condition reason: a referenced Secret is a ServiceAccount token, or the namespace's tenant
/// identity may not read it (or a referenced ConfigMap, when no Secret is refused).
pub const REASON_SECRET_NOT_ALLOWED: &str = "SecretNotAllowed";
/// Condition reason: a referenced ConfigMap cannot be read by the namespace's tenant identity.
pub const REASON_CONFIG_MAP_NOT_ALLOWED: &str = "ConfigMapNotAllowed";

/// Resync of a CDTarget whose children are in place (drift repair).
pub const RESYNC: Duration = Duration::from_secs(10 * 60);
pub use super::{STALLED_RESYNC, TRANSIENT_RETRY, WAIT_RETRY};

/// What the CDTarget reconciler needs.
#[derive(Clone)]
pub struct Context {
    /// The controller's own client (not impersonating anyone).
    pub client: Client,
    /// Namespace of the policy ConfigMap (the controller's namespace).
    pub policy_namespace: String,
    /// Name of the policy ConfigMap (key `policy.yaml`, or the seed's key `ports`).
    pub policy_name: String,
    /// Whether the KEDA CRDs (`ScaledObject`, `TriggerAuthentication`) exist in the cluster;
    /// re-checked while running.
    pub keda: Keda,
    /// Records Events on state changes (none in tests that do not look at them).
    pub recorder: Option<kube::runtime::events::Recorder>,
    /// Who the tenant of a namespace is, for what a CDTarget may hand its agents
    /// ([`super::borrowed`]).
    pub tenants: Tenants,
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
/// (stricter, never looser).
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

/// Whether KEDA is installed, shared between the reconciler and the task that re-checks it.
#[derive(Clone, Debug, Default)]
pub struct Keda(Arc<AtomicBool>);

impl Keda {
    /// A flag saying KEDA is (`true`) or is not installed.
    pub fn new(installed: bool) -> Self {
        Keda(Arc::new(AtomicBool::new(installed)))
    }

    /// Whether KEDA is installed, as last seen.
    pub fn installed(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Records what was seen; returns whether it changed.
    pub fn set(&self, installed: bool) -> bool {
        self.0.swap(installed, Ordering::Relaxed) != installed
    }
}

// === impl Error ===

/// How an error is handled (Flux's classes): it decides the condition and the requeue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Someone must change the spec or the cluster: retry only after a long while.
    Stalled,
    /// A dependency is not there yet: retry soon.
    Waiting,
    /// Anything else: back off and retry.
    Transient,
}

/// A failure of one CDTarget reconcile. Problems with the tenant's or admin's input are not
/// errors: they end in a Stalled or Reconciling status written by [`reconcile`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CDTarget has no namespace (it was not read from the cluster).
    #[error("CDTarget {0} has no namespace")]
    NotNamespaced(String),
    /// Reading an object failed.
    #[error("reading {kind} {name}: {source}")]
    Read {
        /// Kind read.
        kind: &'static str,
        /// `namespace/name`.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Applying a child failed.
    #[error("applying {kind} {name}: {source}")]
    Apply {
        /// Kind applied.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Asking the API server whether the tenant identity may read a referenced object failed.
    #[error("asking whether {user} may get {object}: {source}")]
    Review {
        /// The tenant identity.
        user: String,
        /// `Kind namespace/name` of the object.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing status failed.
    #[error("writing the status of CDTarget {name}: {source}")]
    Status {
        /// `namespace/name`.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        let source = match self {
            Error::NotNamespaced(_) => return ErrorClass::Stalled,
            Error::Read { source, .. }
            | Error::Apply { source, .. }
            | Error::Review { source, .. }
            | Error::Status { source, .. } => source,
        };
        match source {
            // The rendered object was refused as invalid: retrying the same object cannot help.
            kube::Error::Api(status) if status.code == 400 || status.code == 422 => ErrorClass::Stalled,
            // A missing kind (CRD removed) or missing permissions: waiting for the platform.
            kube::Error::Api(status) if status.code == 403 || status.code == 404 => ErrorClass::Waiting,
            _ => ErrorClass::Transient,
        }
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NotNamespaced(_) => "not_namespaced",
            Error::Read { .. } => "read",
            Error::Apply { .. } => "apply",
            Error::Review { .. } => "review",
            Error::Status { .. } => "status",
        }
    }
}

/// The requeue after a failed reconcile, chosen by the error's class.
pub fn error_policy(_target: Arc<CDTarget>, error: &Error, _ctx: Arc<Context>) -> Action {
    match error.class() {
        ErrorClass::Stalled => Action::requeue(STALLED_RESYNC),
        ErrorClass::Waiting => Action::requeue(WAIT_RETRY),
        ErrorClass::Transient => Action::requeue(TRANSIENT_RETRY),
    }
}

// === the pure decision ===

/// A referenced Secret as read: its data, or `None` when it does not exist.
pub type SecretsRead = BTreeMap<String, Option<BTreeMap<String, ByteString>>>;

/// What one reconcile decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The health to report.
    pub health: Health,
    /// The children to apply, in order; `None` leaves the children in the cluster untouched.
    pub children: Option<Children>,
    /// The rendered summary for status (the previous one when nothing is applied).
    pub rendered: Option<RenderedSummary>,
    /// When to reconcile again.
    pub requeue: Duration,
}

/// Decides what to do with `target` given the policy (or why it is invalid), the referenced
/// Secrets as read, whether KEDA is installed, and the referenced objects the agents may not be
/// given ([`borrowed::refusals`]). Order: the admin's policy, then the tenant's spec, then the
/// refused references (all three need a human, so they are reported before waiting for a
/// Secret), then the Secrets.
pub fn plan(
    target: &CDTarget,
    policy: &Result<Policy, Vec<Problem>>,
    secrets: &SecretsRead,
    keda: bool,
    refused: &[Refusal],
) -> Plan {
    let previous = target.status.as_ref().and_then(|s| s.rendered.clone());
    let keep = |health: Health, requeue: Duration| Plan { health, children: None, rendered: previous.clone(), requeue };

    let policy = match policy {
        Ok(policy) => policy,
        Err(problems) => {
            let message = format!("the platform policy is invalid (ask a cluster admin): {}", list(problems));
            return keep(stalled(REASON_INVALID_POLICY, message), STALLED_RESYNC);
        }
    };
    let valid = match render::validate(target, policy) {
        Ok(valid) => valid,
        Err(problems) => return keep(stalled(REASON_INVALID_SPEC, list(&problems)), STALLED_RESYNC),
    };
    if !refused.is_empty() {
        let secret = refused.iter().any(|r| r.resource == borrowed::Resource::Secret);
        let reason = if secret { REASON_SECRET_NOT_ALLOWED } else { REASON_CONFIG_MAP_NOT_ALLOWED };
        let each = refused.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        return keep(
            stalled(reason, format!("{each}. Nothing was applied; running children are left as they are")),
            STALLED_RESYNC,
        );
    }
    let digests = match secret_digests(target, secrets) {
        Ok(digests) => digests,
        Err(message) => {
            let health = Health::Progressing { reason: REASON_SECRET_NOT_FOUND.into(), message };
            return keep(health, WAIT_RETRY);
        }
    };

    let scaling = if keda { Scaling::Keda } else { Scaling::Fixed };
    let children = render::children(&valid, policy, &digests, scaling);
    let rendered = RenderedSummary {
        network_policy: children.network_policy.name_any(),
        deployment: children.deployment.name_any(),
        scaled_object: children.scaled_object.as_ref().map(ResourceExt::name_any),
        trigger_authentication: children.trigger_authentication.as_ref().map(ResourceExt::name_any),
        destinations: valid.destinations.iter().map(ToString::to_string).collect(),
        secrets_digest: Some(render::secrets_digest(target, &digests)),
    };
    let applied = format!("applied NetworkPolicy {} and Deployment {}", rendered.network_policy, rendered.deployment);
    let health = if keda {
        Health::Ready {
            reason: REASON_APPLIED.into(),
            message: format!("{applied}, with KEDA ScaledObject {0} and TriggerAuthentication {0}", valid.name),
        }
    } else {
        Health::Ready {
            reason: REASON_KEDA_NOT_INSTALLED.into(),
            message: format!(
                "{applied}; KEDA is not installed, so a plain Deployment at minReplicaCount ({} replicas) and no autoscaling",
                valid.min_replicas
            ),
        }
    };
    Plan { health, children: Some(children), rendered: Some(rendered), requeue: RESYNC }
}

/// Digests of the referenced Secrets, or why the agents cannot start yet. Never mentions a
/// Secret's content.
fn secret_digests(target: &CDTarget, secrets: &SecretsRead) -> Result<SecretDigests, String> {
    let mut digests = SecretDigests::new();
    let mut missing = Vec::new();
    for name in render::referenced_secrets(target) {
        match secrets.get(name).and_then(Option::as_ref) {
            None => missing.push(format!("Secret {name} does not exist")),
            Some(data) => {
                if name == target.spec.token_ref && data.get(render::keda::TOKEN_KEY).is_none_or(|v| v.0.is_empty()) {
                    missing.push(format!("Secret {name} has no non-empty key {}", render::keda::TOKEN_KEY));
                }
                digests.insert(name.to_owned(), render::secret_digest(data));
            }
        }
    }
    if missing.is_empty() {
        Ok(digests)
    } else {
        Err(format!("waiting for the referenced Secrets: {}", missing.join("; ")))
    }
}

fn stalled(reason: &str, message: String) -> Health {
    Health::Stalled { reason: reason.into(), message }
}

/// `field: message; field: message` (a problem's display leaves out unknown parts).
fn list(problems: &[Problem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// The status after a reconcile: conditions summarised from `health`, for the current generation.
pub fn next_status(
    target: &CDTarget,
    health: &Health,
    rendered: Option<RenderedSummary>,
    now: &Time,
) -> CDTargetStatus {
    let generation = target.metadata.generation;
    let mut status = target.status.clone().unwrap_or_default();
    conditions::summarize(&mut status.conditions, health, generation, now);
    status.observed_generation = generation;
    status.rendered = rendered;
    status
}

// === the I/O ===

/// Reconciles one CDTarget (see the module documentation).
pub async fn reconcile(target: Arc<CDTarget>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = target.name_any();
    let namespace = target.namespace().ok_or_else(|| Error::NotNamespaced(name.clone()))?;

    let policy = read_policy(&ctx).await?;
    let references = borrowed::references(&target);
    let secrets = read_secrets(&ctx.client, &namespace, &references).await?;
    let identities = ctx.tenants.of(&ctx.client, &ctx.policy_namespace, &namespace).await?;
    let answers = ask(&ctx.client, &borrowed::questions(&references, &identities)).await?;
    let refused = borrowed::refusals(&namespace, &references, &secrets, &identities, &answers);
    let data: SecretsRead =
        secrets.into_iter().map(|(name, secret)| (name, secret.map(|s| s.data.unwrap_or_default()))).collect();
    let plan = plan(&target, &policy, &data, ctx.keda.installed(), &refused);

    let result = match &plan.children {
        Some(children) => write_children(&ctx.client, &namespace, &target, children).await,
        None => Ok(Written::Nothing),
    };
    let (health, requeue) = match &result {
        Ok(Written::Conflicts(conflicts)) => {
            (stalled(REASON_NAME_CONFLICT, children::conflict_message(conflicts)), STALLED_RESYNC)
        }
        Ok(_) => (plan.health.clone(), plan.requeue),
        // The condition tells the same story as the requeue `error_policy` will pick.
        Err(e) if e.class() == ErrorClass::Stalled => {
            (Health::Stalled { reason: REASON_API_ERROR.into(), message: e.to_string() }, STALLED_RESYNC)
        }
        Err(e) => (Health::Progressing { reason: REASON_API_ERROR.into(), message: e.to_string() }, TRANSIENT_RETRY),
    };
    // A plan without children already carries the previous summary; a failed write keeps it too.
    let rendered = match (&plan.children, &result) {
        (None, _) | (Some(_), Ok(Written::Children)) => plan.rendered,
        _ => target.status.as_ref().and_then(|s| s.rendered.clone()),
    };
    let status = next_status(&target, &health, rendered, &Time(Timestamp::now()));
    let previous = target.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let transition = super::events::transition(previous, &status.conditions);
    write_status(&ctx.client, &namespace, &target, status).await?;
    super::events::publish(ctx.recorder.as_ref(), target.as_ref(), transition).await;
    result?;
    Ok(Action::requeue(requeue))
}

/// The policy ConfigMap: absent means the documented defaults.
async fn read_policy(ctx: &Context) -> Result<Result<Policy, Vec<Problem>>, Error> {
    super::read_policy(&ctx.client, &ctx.policy_namespace, &ctx.policy_name).await.map_err(|source| Error::Read {
        kind: "ConfigMap",
        name: format!("{}/{}", ctx.policy_namespace, ctx.policy_name),
        source,
    })
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

/// Asks the API server every question with a `SubjectAccessReview`.
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

/// What [`write_children`] did.
#[derive(Debug)]
enum Written {
    /// Nothing was planned.
    Nothing,
    /// Every child is in place (written where it was missing or had drifted).
    Children,
    /// An object with a child's name is not ours: nothing was written.
    Conflicts(Vec<Conflict>),
}

/// Reads every child's live object, decides with [`children::plan`] whether the children may be
/// written at all, and applies those missing or drifted, in order (the TriggerAuthentication
/// before the ScaledObject using it).
async fn write_children(
    client: &Client,
    namespace: &str,
    target: &CDTarget,
    children: &Children,
) -> Result<Written, Error> {
    let mut objects: Vec<(ApiResource, Value)> = Vec::new();
    if let Some(auth) = &children.trigger_authentication {
        objects.push(as_value(auth));
    }
    objects.push(as_value(&children.network_policy));
    objects.push(as_value(&children.deployment));
    if let Some(scaled) = &children.scaled_object {
        objects.push(as_value(scaled));
    }

    let mut observed = Vec::with_capacity(objects.len());
    for (resource, desired) in &objects {
        let name = desired.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        let failed = |source| Error::Apply { kind: resource.kind.clone(), name: format!("{namespace}/{name}"), source };
        let live = api.get_opt(&name).await.map_err(failed)?.and_then(|live| serde_json::to_value(live).ok());
        observed.push(children::Observed {
            kind: resource.kind.clone(),
            namespace: namespace.to_owned(),
            name,
            desired: desired.clone(),
            live,
        });
    }
    let writes = match children::plan(&observed, target.meta().uid.as_deref()) {
        Ok(writes) => writes,
        Err(conflicts) => return Ok(Written::Conflicts(conflicts)),
    };

    let params = PatchParams::apply(FIELD_MANAGER).force();
    for ((resource, desired), (child, write)) in objects.iter().zip(observed.iter().zip(writes)) {
        let mut body = desired.clone();
        match write {
            Write::Nothing => continue,
            Write::Create => {}
            // The apply is refused (409) if the object changed since its owner was checked.
            Write::Update { resource_version } => {
                if let (Some(version), Some(meta)) = (resource_version, body.get_mut("metadata")) {
                    meta["resourceVersion"] = Value::String(version);
                }
            }
        }
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
        api.patch(&child.name, &params, &Patch::Apply(&body)).await.map_err(|source| Error::Apply {
            kind: child.kind.clone(),
            name: format!("{namespace}/{}", child.name),
            source,
        })?;
    }
    Ok(Written::Children)
}

/// A child as its API resource and the JSON it is applied as.
fn as_value<K>(object: &K) -> (ApiResource, Value)
where
    K: Resource<DynamicType = ()> + serde::Serialize,
{
    (ApiResource::erase::<K>(&()), serde_json::to_value(object).unwrap_or_default())
}

/// Writes status once, only when it changed.
async fn write_status(
    client: &Client,
    namespace: &str,
    target: &CDTarget,
    status: CDTargetStatus,
) -> Result<(), Error> {
    super::write_status(client, namespace, target, target.status.as_ref(), &status)
        .await
        .map_err(|source| Error::Status { name: format!("{namespace}/{}", target.name_any()), source })
}

#[cfg(test)]
mod tests {
    use crate::api::{AgentConfig, CDTargetSpec};

    use super::*;

    fn target(ip: &[&str]) -> CDTarget {
        let spec = CDTargetSpec {
            ip: ip.iter().map(|s| (*s).to_owned()).collect(),
            agent_image: "ghcr.io/acme/azp-agent:1".into(),
            token_ref: "azp-token".into(),
            config: AgentConfig {
                url: "https://dev.azure.com/acme".into(),
                pool_name: "pool".into(),
                ..AgentConfig::default()
            },
            ..CDTargetSpec::default()
        };
        let mut target = CDTarget::new("agents", spec);
        target.metadata.namespace = Some("team-a".into());
        target
    }

    fn token(value: &str) -> SecretsRead {
        let data = BTreeMap::from([("AZP_TOKEN".to_owned(), ByteString(value.as_bytes().to_vec()))]);
        SecretsRead::from([("azp-token".to_owned(), Some(data))])
    }

    fn reason(health: &Health) -> &str {
        match health {
            Health::Ready { reason, .. } | Health::Stalled { reason, .. } | Health::Progressing { reason, .. } => {
                reason
            }
        }
    }

    #[test]
    fn invalid_spec_is_reported_before_a_missing_secret_and_applies_nothing() {
        let plan = plan(&target(&["10.0.0.0/8"]), &Ok(Policy::default()), &SecretsRead::new(), true, &[]);
        assert!(
            matches!(&plan.health, Health::Stalled { reason, message } if reason == REASON_INVALID_SPEC && message.starts_with("spec.ip[0]: "))
        );
        assert_eq!(plan.children, None);
    }

    #[test]
    fn empty_token_waits_without_revealing_secret_content() {
        let plan = plan(&target(&["10.1.2.3"]), &Ok(Policy::default()), &token(""), true, &[]);
        assert_eq!(reason(&plan.health), REASON_SECRET_NOT_FOUND);
        assert_eq!((plan.children, plan.requeue), (None, WAIT_RETRY));
    }

    #[test]
    fn without_keda_no_autoscaler_is_planned() {
        let plan = plan(&target(&["10.1.2.3"]), &Ok(Policy::default()), &token("pat"), false, &[]);
        assert_eq!(reason(&plan.health), REASON_KEDA_NOT_INSTALLED);
        let children = plan.children.expect("children");
        assert!(children.scaled_object.is_none() && children.trigger_authentication.is_none());
    }

    #[test]
    fn invalid_policy_stalls_and_keeps_the_previous_summary() {
        let mut target = target(&["10.1.2.3"]);
        let previous = RenderedSummary { deployment: "agents".into(), ..RenderedSummary::default() };
        target.status = Some(CDTargetStatus { rendered: Some(previous.clone()), ..CDTargetStatus::default() });
        let problems = Err(vec![Problem::field("data.ports", "bad")]);
        let plan = plan(&target, &problems, &token("pat"), true, &[]);
        assert_eq!(reason(&plan.health), REASON_INVALID_POLICY);
        assert_eq!(plan.rendered, Some(previous));
    }

    #[test]
    fn a_refused_reference_stalls_before_a_missing_secret_is_awaited_and_applies_nothing() {
        let refused = [Refusal {
            field: "spec.caCertRef".into(),
            resource: borrowed::Resource::Secret,
            namespace: "team-a".into(),
            name: "builder-token".into(),
            why: borrowed::Why::ServiceAccountToken,
        }];
        let plan = plan(&target(&["10.1.2.3"]), &Ok(Policy::default()), &SecretsRead::new(), true, &refused);
        assert_eq!(
            (reason(&plan.health), plan.children, plan.requeue),
            (REASON_SECRET_NOT_ALLOWED, None, STALLED_RESYNC)
        );
        let Health::Stalled { message, .. } = &plan.health else { panic!("{:?}", plan.health) };
        assert!(
            message.starts_with("spec.caCertRef: Secret team-a/builder-token is a ServiceAccount token"),
            "{message}"
        );
    }
}
