//! Test fixtures: builders of the objects tests keep making, so that a test states only what it
//! is about. `CDTarget::test()` is a valid CDTarget and `TenantRepository::test()` a valid
//! registration; chainable `with_*` methods change one thing each:
//!
//! ```
//! use cdtarget::api::{CDTarget, TenantRepository};
//! use cdtarget::fixtures::{self, SecretFixture};
//!
//! let target = CDTarget::test().with_ips(&["10.0.0.0/8"]).with_proxy_ref("proxy");
//! assert_eq!((target.spec.ip.as_slice(), target.spec.proxy_ref.as_deref()), (&["10.0.0.0/8".to_owned()][..], Some("proxy")));
//! let url = "https://git.example.com/team-a.git";
//! let repo = TenantRepository::test().with_url(url).with_webhook_secret("hook").pruning(false);
//! assert!(!repo.spec.prune && repo.spec.url == url);
//! let token = fixtures::secret("azp-token", &[("AZP_TOKEN", "pat-1")]).in_namespace("team-a");
//! assert_eq!(token.metadata.namespace.as_deref(), Some("team-a"));
//! ```
//!
//! Compiled for the crate's unit tests and, through the `fixtures` feature, for the integration
//! tests (a dev-dependency of the crate on itself enables it); a build of the binary never has it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, EnvVar, EnvVarSource, LocalObjectReference, PodDNSConfig, Secret,
    SecretKeySelector,
};
use kube::api::ObjectMeta;

use crate::api::tenant_repository::{
    GitLabSpec, GitLabStatus, GitRef, InventoryEntry, LocalSecretReference, WebhookSpec, WebhookType,
};
use crate::api::{AgentConfig, CDTarget, CDTargetSpec, CDTargetStatus};
use crate::api::{TenantRepository, TenantRepositorySpec, TenantRepositoryStatus};

/// The tenant namespace of the fixtures: where CDTargets live and registrations apply into.
pub const TENANT_NAMESPACE: &str = "team-a";
/// Name of [`CDTarget::test`].
pub const TARGET_NAME: &str = "agents";
/// The Secret [`CDTarget::test`] reads its Azure DevOps token from.
pub const TOKEN_SECRET: &str = "azp-token";
/// Agent image of [`CDTarget::test`], under the default policy's allowed prefix.
pub const AGENT_IMAGE: &str = "ghcr.io/acme/azp-agent:1";
/// Organization URL of [`CDTarget::test`].
pub const ORGANIZATION_URL: &str = "https://dev.azure.com/acme";
/// Agent pool of [`CDTarget::test`].
pub const POOL: &str = "pool";
/// The platform (controller's) namespace, where [`TenantRepository::test`] is registered.
pub const PLATFORM_NAMESPACE: &str = "cdtarget-system";
/// Name of [`TenantRepository::test`].
pub const REGISTRATION_NAME: &str = "team-a-repo";
/// Repository URL of [`TenantRepository::test`].
pub const REPOSITORY_URL: &str = "https://git.example.com/team-a.git";
/// The tenant ServiceAccount [`TenantRepository::test`] applies as.
pub const SERVICE_ACCOUNT: &str = "deployer";
/// Namespace and name of the policy ConfigMap the controller reads by default.
pub const POLICY_CONFIG_MAP: (&str, &str) = (PLATFORM_NAMESPACE, "cdtarget-policy");

// === impl CDTarget ===

impl CDTarget {
    /// A valid CDTarget `team-a/agents`: image [`AGENT_IMAGE`], token Secret [`TOKEN_SECRET`],
    /// pool [`POOL`] of [`ORGANIZATION_URL`], no destinations and no replica bounds (the
    /// policy's defaults).
    pub fn test() -> CDTarget {
        let spec = CDTargetSpec {
            agent_image: AGENT_IMAGE.into(),
            token_ref: TOKEN_SECRET.into(),
            config: AgentConfig { url: ORGANIZATION_URL.into(), pool_name: POOL.into(), ..AgentConfig::default() },
            ..CDTargetSpec::default()
        };
        let mut target = CDTarget::new(TARGET_NAME, spec);
        target.metadata.namespace = Some(TENANT_NAMESPACE.into());
        target
    }

    /// Renamed to `name`.
    pub fn with_name(mut self, name: &str) -> Self {
        self.metadata.name = Some(name.into());
        self
    }

    /// Moved to `namespace`.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.metadata.namespace = Some(namespace.into());
        self
    }

    /// `spec.ip` replaced by `ips` (addresses or CIDRs, valid or not).
    pub fn with_ips<I>(mut self, ips: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.spec.ip = ips.into_iter().map(|ip| ip.as_ref().to_owned()).collect();
        self
    }

    /// `spec.minReplicaCount` and `spec.maxReplicaCount`.
    pub fn with_replicas(mut self, min: i32, max: i32) -> Self {
        self.spec.min_replica_count = Some(min);
        self.spec.max_replica_count = Some(max);
        self
    }

    /// `spec.agentImage`.
    pub fn with_image(mut self, image: &str) -> Self {
        self.spec.agent_image = image.into();
        self
    }

    /// `spec.tokenRef`: the Secret holding `AZP_TOKEN`.
    pub fn with_token_ref(mut self, secret: &str) -> Self {
        self.spec.token_ref = secret.into();
        self
    }

    /// `spec.proxyRef`: the Secret with the proxy settings.
    pub fn with_proxy_ref(mut self, secret: &str) -> Self {
        self.spec.proxy_ref = Some(secret.into());
        self
    }

    /// `spec.caCertRef`: the Secret of CA certificates the agents trust.
    pub fn with_ca_cert_ref(mut self, secret: &str) -> Self {
        self.spec.ca_cert_ref = Some(secret.into());
        self
    }

    /// One more `spec.imagePullSecrets` entry.
    pub fn with_image_pull_secret(mut self, secret: &str) -> Self {
        self.spec.image_pull_secrets.push(LocalObjectReference { name: secret.into() });
        self
    }

    /// One more `spec.env` entry (see [`env_from_secret`], [`env_from_config_map`]).
    pub fn with_env(mut self, variable: EnvVar) -> Self {
        self.spec.env.push(variable);
        self
    }

    /// `spec.config.url`: where the agents register (and send their token).
    pub fn with_url(mut self, url: &str) -> Self {
        self.spec.config.url = url.into();
        self
    }

    /// `spec.dnsConfig` with these nameservers and nothing else.
    pub fn with_nameservers<I>(mut self, nameservers: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let nameservers = nameservers.into_iter().map(|n| n.as_ref().to_owned()).collect();
        self.spec.dns_config = Some(PodDNSConfig { nameservers: Some(nameservers), ..PodDNSConfig::default() });
        self
    }

    /// One `spec.triggerMeta` entry.
    pub fn with_trigger_meta(mut self, key: &str, value: &str) -> Self {
        self.spec.trigger_meta.insert(key.into(), value.into());
        self
    }

    /// `spec.mode` (`Deployment`, `Job`, or anything a tenant might write).
    pub fn with_mode(mut self, mode: &str) -> Self {
        self.spec.mode = Some(mode.into());
        self
    }

    /// `spec.config.agentName`.
    pub fn with_agent_name(mut self, name: &str) -> Self {
        self.spec.config.agent_name = Some(name.into());
        self
    }

    /// `status`, as the controller last wrote it.
    pub fn with_status(mut self, status: CDTargetStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// The YAML file a tenant pushes for this CDTarget: `apiVersion`, `kind`, `metadata.name` and
    /// `spec` (no namespace: the registration decides it).
    pub fn to_manifest(&self) -> String {
        let document = serde_json::json!({
            "apiVersion": crate::api::API_VERSION,
            "kind": "CDTarget",
            "metadata": { "name": self.metadata.name },
            "spec": self.spec,
        });
        crate::yaml::to_yaml(&document)
    }
}

// === impl TenantRepository ===

impl TenantRepository {
    /// A valid registration `cdtarget-system/team-a-repo` of [`REPOSITORY_URL`] (branch `main`,
    /// the repository root), applied into [`TENANT_NAMESPACE`] as [`SERVICE_ACCOUNT`], pruning
    /// (the API's default); no credentials, webhook or GitLab management.
    pub fn test() -> TenantRepository {
        let spec = TenantRepositorySpec {
            url: REPOSITORY_URL.into(),
            target_namespace: TENANT_NAMESPACE.into(),
            service_account_name: SERVICE_ACCOUNT.into(),
            prune: true,
            ..TenantRepositorySpec::default()
        };
        let mut repo = TenantRepository::new(REGISTRATION_NAME, spec);
        repo.metadata.namespace = Some(PLATFORM_NAMESPACE.into());
        repo
    }

    /// Renamed to `name`.
    pub fn with_name(mut self, name: &str) -> Self {
        self.metadata.name = Some(name.into());
        self
    }

    /// Registered in `namespace` (the platform namespace).
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.metadata.namespace = Some(namespace.into());
        self
    }

    /// `spec.url`: the repository fetched.
    pub fn with_url(mut self, url: &str) -> Self {
        self.spec.url = url.into();
        self
    }

    /// `spec.path`: the directory holding the manifests.
    pub fn with_path(mut self, path: &str) -> Self {
        self.spec.path = Some(path.into());
        self
    }

    /// `spec.interval`: how often the repository is polled (a Go duration).
    pub fn with_interval(mut self, interval: &str) -> Self {
        self.spec.interval = Some(interval.into());
        self
    }

    /// `spec.timeout`: the bound on one fetch (a Go duration).
    pub fn with_timeout(mut self, timeout: &str) -> Self {
        self.spec.timeout = Some(timeout.into());
        self
    }

    /// `spec.ref` set to `git_ref`, or removed (branch `main`) for `None`.
    pub fn with_git_ref(mut self, git_ref: Option<GitRef>) -> Self {
        self.spec.git_ref = git_ref;
        self
    }

    /// Follows branch `branch`.
    pub fn with_branch(self, branch: &str) -> Self {
        self.with_git_ref(Some(GitRef { branch: Some(branch.into()), ..GitRef::default() }))
    }

    /// Follows tag `tag`.
    pub fn with_tag(self, tag: &str) -> Self {
        self.with_git_ref(Some(GitRef { tag: Some(tag.into()), ..GitRef::default() }))
    }

    /// `spec.targetNamespace`: the tenant namespace everything is applied into.
    pub fn target_namespace(mut self, namespace: &str) -> Self {
        self.spec.target_namespace = namespace.into();
        self
    }

    /// `spec.serviceAccountName`: the tenant identity every apply impersonates.
    pub fn service_account(mut self, name: &str) -> Self {
        self.spec.service_account_name = name.into();
        self
    }

    /// `spec.secretRef`: the Secret with the Git credentials.
    pub fn with_secret_ref(mut self, secret: &str) -> Self {
        self.spec.secret_ref = Some(LocalSecretReference { name: secret.into() });
        self
    }

    /// A GitLab webhook whose token is in Secret `secret`, default events.
    pub fn with_webhook_secret(self, secret: &str) -> Self {
        self.with_webhook(WebhookType::Gitlab, secret)
    }

    /// A webhook of `kind` whose token is in Secret `secret`, default events.
    pub fn with_webhook(mut self, kind: WebhookType, secret: &str) -> Self {
        let secret_ref = LocalSecretReference { name: secret.into() };
        self.spec.webhook = Some(WebhookSpec { kind, secret_ref, events: Vec::new() });
        self
    }

    /// `spec.webhook.events` of the webhook set before.
    ///
    /// # Panics
    /// When no webhook is set.
    pub fn with_webhook_events(mut self, events: &[&str]) -> Self {
        let webhook = self.spec.webhook.as_mut().expect("with_webhook_events needs a webhook set first");
        webhook.events = events.iter().map(|e| (*e).to_owned()).collect();
        self
    }

    /// `spec.gitlab`: cdtarget manages the deploy key and webhook on GitLab (see
    /// [`GitLabSpec::test`]).
    pub fn with_gitlab(mut self, gitlab: GitLabSpec) -> Self {
        self.spec.gitlab = Some(gitlab);
        self
    }

    /// `spec.suspend`: reconciling is paused.
    pub fn suspended(mut self) -> Self {
        self.spec.suspend = true;
        self
    }

    /// `spec.prune`: whether objects that left Git are deleted.
    pub fn pruning(mut self, prune: bool) -> Self {
        self.spec.prune = prune;
        self
    }

    /// `status`, as the controller last wrote it.
    pub fn with_status(mut self, status: TenantRepositoryStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// A status holding only `status.gitlab`: the ids cdtarget recorded on GitLab.
    pub fn with_gitlab_status(self, gitlab: GitLabStatus) -> Self {
        self.with_status(TenantRepositoryStatus { gitlab: Some(gitlab), ..TenantRepositoryStatus::default() })
    }
}

// === impl GitLabSpec ===

impl GitLabSpec {
    /// Both the deploy key and the webhook managed, the project path derived from the URL.
    pub fn test() -> GitLabSpec {
        GitLabSpec { project: None, manage_deploy_key: true, manage_webhook: true }
    }

    /// `project` named explicitly (`group/project`).
    pub fn for_project(mut self, path: &str) -> Self {
        self.project = Some(path.into());
        self
    }

    /// The deploy key left to someone else.
    pub fn without_deploy_key(mut self) -> Self {
        self.manage_deploy_key = false;
        self
    }
}

// === impl InventoryEntry ===

impl InventoryEntry {
    /// The entry of object `name` of `kind` in [`TENANT_NAMESPACE`].
    pub fn test(api_version: &str, kind: &str, name: &str) -> InventoryEntry {
        InventoryEntry {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: TENANT_NAMESPACE.into(),
            name: name.into(),
        }
    }
}

// === Secrets, ConfigMaps and environment variables ===

/// `data` of a Secret: each value as its UTF-8 bytes.
pub fn secret_data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
    pairs.iter().map(|(key, value)| ((*key).to_owned(), ByteString(value.as_bytes().to_vec()))).collect()
}

/// A Secret `name` holding `data` (no namespace: the API it is created through decides).
pub fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        data: Some(secret_data(data)),
        ..Secret::default()
    }
}

/// Chainable changes of a [`secret`].
pub trait SecretFixture: Sized {
    /// Placed in `namespace`.
    fn in_namespace(self, namespace: &str) -> Self;
    /// Of `type_` (`Opaque`, `kubernetes.io/service-account-token`, ...).
    fn of_type(self, type_: &str) -> Self;
    /// With one more annotation.
    fn with_annotation(self, key: &str, value: &str) -> Self;
}

impl SecretFixture for Secret {
    fn in_namespace(mut self, namespace: &str) -> Self {
        self.metadata.namespace = Some(namespace.into());
        self
    }

    fn of_type(mut self, type_: &str) -> Self {
        self.type_ = Some(type_.into());
        self
    }

    fn with_annotation(mut self, key: &str, value: &str) -> Self {
        self.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }
}

/// The policy ConfigMap the controller reads ([`POLICY_CONFIG_MAP`]) with one `key`: `policy.yaml`
/// (the current format) or one of the seed's keys such as `ports`.
pub fn policy_config_map(key: &str, value: &str) -> ConfigMap {
    let (namespace, name) = POLICY_CONFIG_MAP;
    ConfigMap {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some(namespace.into()), ..ObjectMeta::default() },
        data: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
        ..ConfigMap::default()
    }
}

/// Environment variable `name` taken from `key` of Secret `secret`.
pub fn env_from_secret(name: &str, secret: &str, key: &str) -> EnvVar {
    let selector = SecretKeySelector { name: secret.into(), key: key.into(), optional: None };
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource { secret_key_ref: Some(selector), ..EnvVarSource::default() }),
    }
}

/// Environment variable `name` taken from `key` of ConfigMap `config_map`.
pub fn env_from_config_map(name: &str, config_map: &str, key: &str) -> EnvVar {
    let selector = ConfigMapKeySelector { name: config_map.into(), key: key.into(), optional: None };
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource { config_map_key_ref: Some(selector), ..EnvVarSource::default() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keda::KedaVersion;
    use crate::policy::Policy;
    use crate::render::{self, Scaling, SecretDigests};

    #[test]
    fn the_test_cdtarget_renders_under_the_default_policy() {
        let target = CDTarget::test().with_ips(&["10.1.2.3", "192.168.10.0/24"]).with_replicas(2, 5);
        let children = render::render(
            &target,
            &Policy::default(),
            &SecretDigests::new(),
            Scaling::Keda(KedaVersion::NEWEST_SUPPORTED),
        );
        assert!(children.is_ok(), "{children:?}");
    }

    #[test]
    fn a_manifest_loads_back_as_the_cdtarget_it_was_written_from() {
        let target = CDTarget::test().with_ips(&["10.1.2.3"]).with_proxy_ref("proxy");
        let file = crate::manifests::SourceFile { path: "agents.yaml".into(), text: target.to_manifest() };
        let set = crate::manifests::load(vec![file], TENANT_NAMESPACE, &Policy::default()).expect("loads");
        let loaded = set.cdtargets().next().expect("one CDTarget");
        assert_eq!((loaded.metadata.name.as_deref(), &loaded.spec), (Some(TARGET_NAME), &target.spec));
    }

    #[test]
    fn the_test_registration_has_the_api_defaults_and_its_changes_compose() {
        let repo = TenantRepository::test()
            .with_webhook(WebhookType::Github, "hook")
            .with_webhook_events(&["push"])
            .with_tag("v1")
            .pruning(false);
        assert_eq!(repo.metadata.namespace.as_deref(), Some(PLATFORM_NAMESPACE));
        let webhook = repo.spec.webhook.as_ref().unwrap();
        assert_eq!(
            (webhook.kind, webhook.secret_ref.name.as_str(), webhook.events.as_slice()),
            (WebhookType::Github, "hook", ["push".to_owned()].as_slice())
        );
        assert_eq!(repo.spec.git_ref.as_ref().and_then(|r| r.tag.as_deref()), Some("v1"));
        assert!(!repo.spec.prune);
        assert!(TenantRepository::test().spec.prune, "prune defaults to true, as the API reads it");
    }
}
