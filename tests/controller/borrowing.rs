//! A hostile tenant makes its CDTarget hand the agents (and so its pipelines) a Secret it may
//! not read itself, or a ServiceAccount token it minted. The reconciler refuses (`Stalled`,
//! `SecretNotAllowed` naming the field and the Secret) and writes no child.

use std::sync::Arc;

use cdtarget::api::CDTarget;
use cdtarget::api::conditions::is_true;
use cdtarget::api::conditions::{READY, STALLED};
use cdtarget::api::conditions::{REASON_CONFIG_MAP_NOT_ALLOWED, REASON_SECRET_NOT_ALLOWED};
use cdtarget::controller::cdtarget::Context;
use cdtarget::controller::cdtarget::borrowed::{SERVICE_ACCOUNT_NAME_ANNOTATION, SERVICE_ACCOUNT_TOKEN_TYPE};
use cdtarget::fixtures::{env_from_config_map, env_from_secret};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::api::networking::v1::NetworkPolicy;

use crate::support::{Cluster, NAME, NAMESPACE, TOKEN, cluster_with_target, target};

const DEPLOYER: &str = "system:serviceaccount:team-a:deployer";
const MINTED_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.minted-token-of-builder";

/// Environment variable `name` from key `value` of Secret `secret`.
fn env_secret(name: &str, secret: &str) -> EnvVar {
    env_from_secret(name, secret, "value")
}

fn ready(target: &CDTarget) -> (String, String, String) {
    condition(target, READY)
}

/// The children's outcome (Ready also waits for the agents, which never run on the fake).
fn applied(target: &CDTarget) -> (String, String, String) {
    condition(target, "Applied")
}

fn condition(target: &CDTarget, type_: &str) -> (String, String, String) {
    let status = target.status.as_ref().expect("status");
    let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_}"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

async fn no_children(cluster: &Cluster) -> bool {
    cluster.api::<Deployment>().get_opt(NAME).await.unwrap().is_none()
        && cluster.api::<NetworkPolicy>().get_opt(NAME).await.unwrap().is_none()
}

/// A change of the CDTarget under test.
type SpecChange = fn(CDTarget) -> CDTarget;

/// Gives the stored CDTarget the spec of [`target`] changed by `change` (a tenant push).
async fn with_spec(cluster: &Cluster, change: impl FnOnce(CDTarget) -> CDTarget) {
    cluster.set_spec(&change(target()).spec).await;
}

/// A ServiceAccount token Secret, as the token controller fills it for `kubernetes.io/
/// service-account-token` Secrets annotated with a ServiceAccount.
async fn minted_token(cluster: &Cluster, name: &str) {
    cluster
        .put_typed_secret(
            name,
            SERVICE_ACCOUNT_TOKEN_TYPE,
            &[(SERVICE_ACCOUNT_NAME_ANNOTATION, "builder")],
            &[("token", MINTED_TOKEN)],
        )
        .await;
}

#[tokio::test]
async fn a_service_account_token_secret_as_ca_env_or_pull_secret_is_refused_and_nothing_is_applied() {
    let cases: [(&str, SpecChange); 3] = [
        ("spec.caCertRef", |target| target.with_ca_cert_ref("builder-token")),
        ("spec.env[0].valueFrom.secretKeyRef.name", |target| {
            target.with_env(env_secret("KUBE_TOKEN", "builder-token"))
        }),
        ("spec.imagePullSecrets[0].name", |target| target.with_image_pull_secret("builder-token")),
    ];
    for (field, change) in cases {
        let cluster = cluster_with_target(true).await;
        minted_token(&cluster, "builder-token").await;
        with_spec(&cluster, change).await;
        cluster.clear_writes();

        cluster.reconcile().await;

        let (status, reason, message) = ready(&cluster.target().await);
        assert_eq!((status.as_str(), reason.as_str()), ("False", REASON_SECRET_NOT_ALLOWED), "{field}: {message}");
        assert!(
            message.starts_with(&format!("{field}: Secret team-a/builder-token is a ServiceAccount token Secret")),
            "{message}"
        );
        assert!(!message.contains(MINTED_TOKEN), "{message}");
        assert!(is_true(&cluster.target().await.status.unwrap().conditions, STALLED));
        assert!(no_children(&cluster).await, "{field}: nothing is applied");
        assert_eq!(cluster.writes(), ["status CDTarget team-a/agents"], "{field}");
    }
}

#[tokio::test]
async fn an_opaque_secret_annotated_for_a_service_account_is_refused_too() {
    let cluster = cluster_with_target(true).await;
    cluster
        .put_typed_secret("sneaky", "Opaque", &[(SERVICE_ACCOUNT_NAME_ANNOTATION, "builder")], &[("value", "x")])
        .await;
    with_spec(&cluster, |target| target.with_proxy_ref("sneaky")).await;
    cluster.reconcile().await;
    let (_, reason, message) = ready(&cluster.target().await);
    assert_eq!(reason, REASON_SECRET_NOT_ALLOWED);
    assert!(message.starts_with("spec.proxyRef: Secret team-a/sneaky is a ServiceAccount token Secret"), "{message}");
    assert!(no_children(&cluster).await);
}

#[tokio::test]
async fn a_secret_the_tenant_identity_cannot_read_is_refused_and_running_children_stay() {
    let cluster = cluster_with_target(true).await;
    cluster.register_tenant("team-a-repo", "deployer").await;
    cluster.put_secret("platform-db", &[("value", "platform-db-password")]).await;
    cluster.reviews.deny(DEPLOYER, "secrets", NAMESPACE, "platform-db");
    cluster.reconcile().await;
    let running = cluster.api::<Deployment>().get(NAME).await.unwrap();

    with_spec(&cluster, |target| target.with_env(env_secret("DB_PASSWORD", "platform-db"))).await;
    cluster.clear_writes();
    cluster.reconcile().await;

    let (_, reason, message) = ready(&cluster.target().await);
    assert_eq!(reason, REASON_SECRET_NOT_ALLOWED);
    assert!(
        message.starts_with(
            "spec.env[0].valueFrom.secretKeyRef.name: Secret team-a/platform-db cannot be read by the tenant identity system:serviceaccount:team-a:deployer"
        ),
        "{message}"
    );
    assert!(!message.contains("platform-db-password"));
    assert_eq!(cluster.api::<Deployment>().get(NAME).await.unwrap(), running, "what runs is left as it is");
    assert_eq!(cluster.writes(), ["status CDTarget team-a/agents"]);
    assert!(
        cluster.reviews.asked().contains(&format!("{DEPLOYER} get secrets team-a/platform-db")),
        "{:?}",
        cluster.reviews.asked()
    );
}

#[tokio::test]
async fn every_registration_of_the_namespace_must_be_able_to_read_what_the_agents_get() {
    let cluster = cluster_with_target(true).await;
    cluster.register_tenant("team-a-repo", "deployer").await;
    cluster.register_tenant("team-a-other-repo", "ci").await;
    cluster.reviews.deny("system:serviceaccount:team-a:ci", "secrets", NAMESPACE, TOKEN);
    cluster.reconcile().await;
    let (_, reason, message) = ready(&cluster.target().await);
    assert_eq!(reason, REASON_SECRET_NOT_ALLOWED);
    assert!(message.contains("spec.tokenRef: Secret team-a/azp-token cannot be read by the tenant identity system:serviceaccount:team-a:ci"), "{message}");
    assert!(no_children(&cluster).await);
}

#[tokio::test]
async fn a_readable_reference_is_applied_after_asking_about_every_one() {
    let cluster = cluster_with_target(true).await;
    cluster.register_tenant("team-a-repo", "deployer").await;
    cluster.put_secret("db", &[("value", "db-password")]).await;
    with_spec(&cluster, |target| target.with_env(env_secret("DB_PASSWORD", "db"))).await;
    cluster.reconcile().await;

    assert_eq!(applied(&cluster.target().await).1, "Applied");
    let mut asked = cluster.reviews.asked();
    asked.sort();
    assert_eq!(
        asked,
        [format!("{DEPLOYER} get secrets team-a/azp-token"), format!("{DEPLOYER} get secrets team-a/db")]
    );
}

#[tokio::test]
async fn a_config_map_the_tenant_identity_cannot_read_is_refused() {
    let cluster = cluster_with_target(true).await;
    cluster.register_tenant("team-a-repo", "deployer").await;
    cluster.reviews.deny(DEPLOYER, "configmaps", NAMESPACE, "platform-settings");
    with_spec(&cluster, |target| target.with_env(env_from_config_map("SETTING", "platform-settings", "k"))).await;
    cluster.reconcile().await;
    let (_, reason, message) = ready(&cluster.target().await);
    assert_eq!(reason, REASON_CONFIG_MAP_NOT_ALLOWED);
    assert!(
        message.starts_with(
            "spec.env[0].valueFrom.configMapKeyRef.name: ConfigMap team-a/platform-settings cannot be read"
        ),
        "{message}"
    );
    assert!(no_children(&cluster).await);
}

#[tokio::test]
async fn without_a_registration_the_default_tenant_service_account_is_asked_and_without_one_nobody_is() {
    let cluster = cluster_with_target(true).await;
    cluster.reconcile().await;
    assert_eq!(cluster.reviews.asked(), Vec::<String>::new(), "no tenant identity: only the token rule");
    assert_eq!(applied(&cluster.target().await).1, "Applied");

    let mut ctx = (*cluster.context()).clone();
    ctx.tenants = cdtarget::controller::cdtarget::Tenants::new(Some("cdtarget-tenant".into()));
    let ctx: Arc<Context> = Arc::new(ctx);
    cluster.reviews.deny("system:serviceaccount:team-a:cdtarget-tenant", "secrets", NAMESPACE, TOKEN);
    cluster.reconcile_named(NAME, ctx).await;
    let (_, reason, message) = ready(&cluster.target().await);
    assert_eq!(reason, REASON_SECRET_NOT_ALLOWED);
    assert!(message.contains("system:serviceaccount:team-a:cdtarget-tenant"), "{message}");
}
