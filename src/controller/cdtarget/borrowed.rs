//! A CDTarget cannot lend its author rights.
//!
//! The agents of a CDTarget read Secrets (and ConfigMaps) that the CDTarget names, but the
//! Deployment that mounts them is written by the controller, and Kubernetes does not check that
//! whoever makes a pod read a Secret could read it: the kubelet fetches it for any pod of the
//! namespace. So a tenant could hand its agents (and so its pipelines) a Secret it was never
//! allowed to see. Two rules close that, decided here as pure functions over what was read:
//!
//! - a referenced Secret that is a ServiceAccount token (type
//!   `kubernetes.io/service-account-token`, or annotated with the ServiceAccount it is for) is
//!   refused: it would give the agents that ServiceAccount's API rights;
//! - every referenced object must be readable (`get`) by the namespace's tenant identity: the
//!   ServiceAccounts the registrations applying into the namespace impersonate (each of them), or
//!   the controller's default tenant ServiceAccount when no registration targets the namespace.
//!   Readability is asked of the API server with a `SubjectAccessReview`; an unanswered review
//!   counts as "no".

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Secret;

use crate::api::CDTarget;
use crate::api::tenant_repository::TenantRepository;
use crate::apply::server_side::service_account_user;

/// `type` of a Secret the token controller fills with a ServiceAccount's token.
pub const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// Annotation naming the ServiceAccount a token Secret is for.
pub const SERVICE_ACCOUNT_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";

/// The kinds of object a CDTarget makes its agents read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// A core/v1 Secret.
    Secret,
    /// A core/v1 ConfigMap.
    ConfigMap,
}

impl Resource {
    /// The kind, e.g. `Secret`.
    pub fn kind(self) -> &'static str {
        match self {
            Resource::Secret => "Secret",
            Resource::ConfigMap => "ConfigMap",
        }
    }

    /// The API resource, e.g. `secrets`.
    pub fn plural(self) -> &'static str {
        match self {
            Resource::Secret => "secrets",
            Resource::ConfigMap => "configmaps",
        }
    }
}

/// One place where a CDTarget names an object its agents read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The field naming it, e.g. `spec.env[2].valueFrom.secretKeyRef.name`.
    pub field: String,
    /// What it names.
    pub resource: Resource,
    /// The object's name (in the CDTarget's namespace).
    pub name: String,
}

/// Every object `target` makes its agents (or the kubelet, for image pulls) read, in field order:
/// `tokenRef`, `proxyRef`, `caCertRef`, `imagePullSecrets[]`, then `env[].valueFrom`'s
/// `secretKeyRef` and `configMapKeyRef`. Empty names are left out (validation reports them).
pub fn references(target: &CDTarget) -> Vec<Reference> {
    let spec = &target.spec;
    let mut found = Vec::new();
    let mut add = |field: String, resource: Resource, name: &str| {
        if !name.is_empty() {
            found.push(Reference { field, resource, name: name.to_owned() });
        }
    };
    add("spec.tokenRef".into(), Resource::Secret, &spec.token_ref);
    if let Some(proxy) = &spec.proxy_ref {
        add("spec.proxyRef".into(), Resource::Secret, proxy);
    }
    if let Some(ca) = &spec.ca_cert_ref {
        add("spec.caCertRef".into(), Resource::Secret, ca);
    }
    for (i, pull) in spec.image_pull_secrets.iter().enumerate() {
        add(format!("spec.imagePullSecrets[{i}].name"), Resource::Secret, &pull.name);
    }
    for (i, var) in spec.env.iter().enumerate() {
        let Some(from) = &var.value_from else { continue };
        if let Some(secret) = &from.secret_key_ref {
            add(format!("spec.env[{i}].valueFrom.secretKeyRef.name"), Resource::Secret, &secret.name);
        }
        if let Some(config_map) = &from.config_map_key_ref {
            add(format!("spec.env[{i}].valueFrom.configMapKeyRef.name"), Resource::ConfigMap, &config_map.name);
        }
    }
    found
}

/// Names of the Secrets among `references`, each once.
pub(crate) fn secret_names(references: &[Reference]) -> BTreeSet<&str> {
    references.iter().filter(|r| r.resource == Resource::Secret).map(|r| r.name.as_str()).collect()
}

// === the tenant identity ===

/// A ServiceAccount acting for the tenant of a namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    /// Its namespace (the tenant namespace).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Identity {
    /// The user name the API server authenticates it as.
    pub fn user(&self) -> String {
        service_account_user(&self.namespace, &self.name)
    }

    /// The groups the API server gives every ServiceAccount of its namespace.
    pub fn groups(&self) -> Vec<String> {
        vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".into(),
        ]
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.user())
    }
}

/// What the tenant identities are read from, per registration: the namespace it applies into
/// and the ServiceAccount it impersonates there (all a CDTarget reconcile keeps of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    /// `spec.targetNamespace`.
    pub target_namespace: String,
    /// `spec.serviceAccountName`.
    pub service_account_name: String,
}

impl From<&TenantRepository> for Registered {
    fn from(repo: &TenantRepository) -> Self {
        Registered {
            target_namespace: repo.spec.target_namespace.clone(),
            service_account_name: repo.spec.service_account_name.clone(),
        }
    }
}

/// The tenant identities of `namespace`: the ServiceAccount of every registration applying into
/// it; when there is none, `default` (the controller's `--default-tenant-service-account`) in
/// that namespace; when that is not set either, nobody (only the ServiceAccount-token rule
/// applies then).
pub(crate) fn tenant_identities<'a>(
    namespace: &str,
    registrations: impl IntoIterator<Item = &'a Registered>,
    default: Option<&str>,
) -> Vec<Identity> {
    let of = |name: &str| Identity { namespace: namespace.to_owned(), name: name.to_owned() };
    let registered: BTreeSet<Identity> = registrations
        .into_iter()
        .filter(|registered| registered.target_namespace == namespace)
        .map(|registered| of(&registered.service_account_name))
        .collect();
    if registered.is_empty() {
        default.filter(|d| !d.is_empty()).map(of).into_iter().collect()
    } else {
        registered.into_iter().collect()
    }
}

// === the reviews ===

/// One question to the API server: may `identity` `get` this object?
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Question {
    /// Who asks.
    pub identity: Identity,
    /// The kind of object.
    pub resource: Resource,
    /// The object's name, in the identity's namespace.
    pub name: String,
}

/// The answers of the API server: whether each question was allowed.
pub type Answers = BTreeMap<Question, bool>;

/// Every question `references` raise for `identities`, each once.
pub fn questions(references: &[Reference], identities: &[Identity]) -> Vec<Question> {
    let objects: BTreeSet<(Resource, &str)> = references.iter().map(|r| (r.resource, r.name.as_str())).collect();
    let mut asked = BTreeSet::new();
    for identity in identities {
        for (resource, name) in &objects {
            asked.insert(Question { identity: identity.clone(), resource: *resource, name: (*name).to_owned() });
        }
    }
    asked.into_iter().collect()
}

/// The `SubjectAccessReview` asking `question`: `get` on the object, as the ServiceAccount with
/// its groups.
pub fn access_review(question: &Question) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(question.identity.user()),
            groups: Some(question.identity.groups()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(question.identity.namespace.clone()),
                verb: Some("get".into()),
                group: Some(String::new()),
                version: Some("v1".into()),
                resource: Some(question.resource.plural().into()),
                name: Some(question.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

/// Whether the API server's answer to a review allows the access (a denial or no status: no).
pub fn allowed(answer: &SubjectAccessReview) -> bool {
    answer.status.as_ref().is_some_and(|s| s.allowed && s.denied != Some(true))
}

// === the decision ===

/// Why a referenced object is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// The Secret holds (or will hold) a ServiceAccount's token.
    ServiceAccountToken,
    /// The tenant identity may not read it.
    NotReadable {
        /// The identity that may not.
        identity: Identity,
    },
}

/// A referenced object the agents may not be given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The field naming it.
    pub field: String,
    /// Its kind.
    pub resource: Resource,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Why.
    pub why: Why,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (field, kind, namespace, name) = (&self.field, self.resource.kind(), &self.namespace, &self.name);
        match &self.why {
            Why::ServiceAccountToken => write!(
                f,
                "{field}: {kind} {namespace}/{name} is a ServiceAccount token Secret (type {SERVICE_ACCOUNT_TOKEN_TYPE} \
                 or annotation {SERVICE_ACCOUNT_NAME_ANNOTATION}); agents are never given ServiceAccount credentials: \
                 reference an Opaque Secret holding only what the agents need"
            ),
            Why::NotReadable { identity } => write!(
                f,
                "{field}: {kind} {namespace}/{name} cannot be read by the tenant identity {identity}; a CDTarget may \
                 only give its agents what its tenant could read itself: reference another {kind}, or have the \
                 platform team grant that ServiceAccount `get` on it"
            ),
        }
    }
}

/// Whether `secret` is, or will be filled as, a ServiceAccount token.
pub(crate) fn is_service_account_token(secret: &Secret) -> bool {
    secret.type_.as_deref() == Some(SERVICE_ACCOUNT_TOKEN_TYPE)
        || secret.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(SERVICE_ACCOUNT_NAME_ANNOTATION))
}

/// Every reference of `references` (in `namespace`) that must be refused, given the Secrets as
/// read (`None`: absent, nothing to check yet; the Secret watch brings the CDTarget back when it
/// appears), the tenant identities and the API server's answers. A question without an answer
/// counts as denied.
pub fn refusals(
    namespace: &str,
    references: &[Reference],
    secrets: &BTreeMap<String, Option<Secret>>,
    identities: &[Identity],
    answers: &Answers,
) -> Vec<Refusal> {
    let mut refused = Vec::new();
    for reference in references {
        let refuse = |why| Refusal {
            field: reference.field.clone(),
            resource: reference.resource,
            namespace: namespace.to_owned(),
            name: reference.name.clone(),
            why,
        };
        let token = reference.resource == Resource::Secret
            && secrets.get(&reference.name).and_then(Option::as_ref).is_some_and(is_service_account_token);
        if token {
            refused.push(refuse(Why::ServiceAccountToken));
            continue;
        }
        let denied = identities.iter().find(|identity| {
            let question =
                Question { identity: (*identity).clone(), resource: reference.resource, name: reference.name.clone() };
            !answers.get(&question).copied().unwrap_or(false)
        });
        if let Some(identity) = denied {
            refused.push(refuse(Why::NotReadable { identity: identity.clone() }));
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus;
    use k8s_openapi::api::core::v1::EnvVar;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::fixtures;

    fn target() -> CDTarget {
        let plain = EnvVar { name: "PLAIN".into(), value: Some("x".into()), value_from: None };
        CDTarget::test()
            .with_proxy_ref("proxy")
            .with_ca_cert_ref("ca")
            .with_image_pull_secret("pull")
            .with_env(plain)
            .with_env(fixtures::env_from_secret("DB", "db", "password"))
            .with_env(fixtures::env_from_config_map("SETTING", "settings", "k"))
    }

    fn secret(type_: Option<&str>, annotation: Option<&str>) -> Option<Secret> {
        let annotations = annotation.map(|sa| [(SERVICE_ACCOUNT_NAME_ANNOTATION.to_owned(), sa.to_owned())].into());
        Some(Secret {
            metadata: ObjectMeta { annotations, ..ObjectMeta::default() },
            type_: type_.map(Into::into),
            ..Secret::default()
        })
    }

    fn deployer() -> Identity {
        Identity { namespace: "team-a".into(), name: "deployer".into() }
    }

    fn all_allowed(references: &[Reference], identities: &[Identity]) -> Answers {
        questions(references, identities).into_iter().map(|q| (q, true)).collect()
    }

    #[test]
    fn every_field_that_names_a_secret_or_config_map_is_found_with_its_path() {
        let found: Vec<(String, Resource, String)> =
            references(&target()).into_iter().map(|r| (r.field, r.resource, r.name)).collect();
        let expected = [
            ("spec.tokenRef", Resource::Secret, "azp-token"),
            ("spec.proxyRef", Resource::Secret, "proxy"),
            ("spec.caCertRef", Resource::Secret, "ca"),
            ("spec.imagePullSecrets[0].name", Resource::Secret, "pull"),
            ("spec.env[1].valueFrom.secretKeyRef.name", Resource::Secret, "db"),
            ("spec.env[2].valueFrom.configMapKeyRef.name", Resource::ConfigMap, "settings"),
        ];
        assert_eq!(found, expected.map(|(f, r, n)| (f.to_owned(), r, n.to_owned())));
    }

    #[test]
    fn a_service_account_token_secret_is_refused_by_type_or_by_annotation_wherever_it_is_named() {
        let target = target();
        let references = references(&target);
        for (field, name) in [("spec.caCertRef", "ca"), ("spec.env[1].valueFrom.secretKeyRef.name", "db")] {
            for token in [secret(Some(SERVICE_ACCOUNT_TOKEN_TYPE), None), secret(Some("Opaque"), Some("builder"))] {
                let secrets = BTreeMap::from([(name.to_owned(), token)]);
                let refused = refusals("team-a", &references, &secrets, &[], &Answers::new());
                assert_eq!(refused.len(), 1, "{refused:?}");
                assert_eq!((refused[0].field.as_str(), &refused[0].why), (field, &Why::ServiceAccountToken));
                let message = refused[0].to_string();
                assert!(
                    message.starts_with(&format!("{field}: Secret team-a/{name} is a ServiceAccount token")),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn without_a_tenant_identity_only_the_token_rule_applies() {
        let target = target();
        let references = references(&target);
        let secrets = BTreeMap::from([("db".to_owned(), secret(Some("Opaque"), None))]);
        assert_eq!(refusals("team-a", &references, &secrets, &[], &Answers::new()), []);
    }

    #[test]
    fn a_secret_the_tenant_identity_cannot_read_is_refused_naming_field_secret_and_identity() {
        let target = target();
        let references = references(&target);
        let identities = [deployer()];
        let mut answers = all_allowed(&references, &identities);
        let db = Question { identity: deployer(), resource: Resource::Secret, name: "db".into() };
        answers.insert(db, false);
        let refused = refusals("team-a", &references, &BTreeMap::new(), &identities, &answers);
        assert_eq!(refused.len(), 1, "{refused:?}");
        let message = refused[0].to_string();
        assert!(
            message.starts_with("spec.env[1].valueFrom.secretKeyRef.name: Secret team-a/db cannot be read by the tenant identity system:serviceaccount:team-a:deployer"),
            "{message}"
        );
    }

    #[test]
    fn an_unanswered_question_counts_as_denied_and_config_maps_are_asked_about_too() {
        let target = target();
        let references = references(&target);
        let identities = [deployer()];
        let mut answers = all_allowed(&references, &identities);
        answers.retain(|q, _| q.resource != Resource::ConfigMap);
        let refused = refusals("team-a", &references, &BTreeMap::new(), &identities, &answers);
        assert_eq!(
            refused.iter().map(|r| r.field.as_str()).collect::<Vec<_>>(),
            ["spec.env[2].valueFrom.configMapKeyRef.name"]
        );
        assert!(refused[0].to_string().contains("ConfigMap team-a/settings"));
    }

    #[test]
    fn every_registration_applying_into_the_namespace_is_an_identity_and_the_default_only_without_one() {
        let registration = |target: &str, sa: &str| {
            TenantRepository::test().with_name("r").target_namespace(target).service_account(sa)
        };
        let registrations: Vec<Registered> =
            [registration("team-a", "deployer"), registration("team-a", "ci"), registration("team-b", "x")]
                .iter()
                .map(Registered::from)
                .collect();
        let names = |ids: Vec<Identity>| ids.into_iter().map(|i| i.user()).collect::<Vec<_>>();
        assert_eq!(
            names(tenant_identities("team-a", &registrations, Some("cdtarget-tenant"))),
            ["system:serviceaccount:team-a:ci", "system:serviceaccount:team-a:deployer"]
        );
        assert_eq!(
            names(tenant_identities("team-c", &registrations, Some("cdtarget-tenant"))),
            ["system:serviceaccount:team-c:cdtarget-tenant"]
        );
        assert!(tenant_identities("team-c", &registrations, None).is_empty());
    }

    #[test]
    fn the_review_asks_get_on_the_named_object_as_the_service_account_with_its_groups() {
        let question = Question { identity: deployer(), resource: Resource::Secret, name: "db".into() };
        let review = serde_json::to_value(access_review(&question)).unwrap();
        assert_eq!(
            review["spec"],
            serde_json::json!({
                "user": "system:serviceaccount:team-a:deployer",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"],
                "resourceAttributes": {"namespace": "team-a", "verb": "get", "group": "", "version": "v1", "resource": "secrets", "name": "db"},
            })
        );
        let answer = |allowed, denied| SubjectAccessReview {
            status: Some(SubjectAccessReviewStatus { allowed, denied, ..SubjectAccessReviewStatus::default() }),
            ..SubjectAccessReview::default()
        };
        assert!(allowed(&answer(true, None)));
        assert!(!allowed(&answer(false, None)) && !allowed(&answer(true, Some(true))));
        assert!(!allowed(&SubjectAccessReview::default()), "no status is no");
    }
}
