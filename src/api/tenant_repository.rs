//! `TenantRepository`: the platform team's registration of one tenant Git repository.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a tenant's manifests live, where they go, and as whom they are applied.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cdtarget.io",
    version = "v1alpha1",
    kind = "TenantRepository",
    plural = "tenantrepositories",
    singular = "tenantrepository",
    namespaced,
    status = "TenantRepositoryStatus",
    shortname = "trepo",
    doc = "A tenant Git repository registered by the platform team, and how it is applied.",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".spec.url","priority":1}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.lastAppliedRevision","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TenantRepositorySpec {
    /// Repository URL: `ssh://`, `https://`, `git://` or `file://`.
    pub url: String,

    /// What to check out; the default is the branch `main`.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<GitRef>,

    /// Directory inside the repository holding the manifests (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// How often the repository is polled, as a Go duration (`30s`, `5m`, `1h`); default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub interval: Option<String>,

    /// Upper bound on one fetch, as a Go duration; default `60s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: Option<String>,

    /// Stop reconciling this registration; what is applied stays as it is.
    #[serde(default)]
    pub suspend: bool,

    /// Secret with the Git credentials: `identity` (SSH private key), optional
    /// `identity.passphrase`, `known_hosts`; or `username`/`password` or `bearerToken` for HTTPS,
    /// with an optional `ca.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalSecretReference>,

    /// The tenant namespace every document is applied into.
    pub target_namespace: String,

    /// The ServiceAccount in `targetNamespace` impersonated for every apply.
    pub service_account_name: String,

    /// Delete objects that left Git (only objects cdtarget applied itself); default true.
    #[serde(default = "default_true")]
    pub prune: bool,

    /// Push notifications that trigger a sync at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSpec>,

    /// Let cdtarget register the deploy key and the webhook on GitLab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<GitLabSpec>,

    /// Wait for what a revision applied to become healthy (kstatus) before the registration is
    /// Ready; absent: Ready once applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitSpec>,
}

/// How long to wait for what a revision applied to become healthy.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitSpec {
    /// How long the objects of a revision may take to become healthy after they were applied,
    /// as a Go duration; default `5m`. Past it the registration reports `HealthCheckFailed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"))]
    pub timeout: Option<String>,
}

/// The receiver path of a registration: `/hook/<hex sha256(token + name + namespace)>`. Only
/// someone who knows the webhook token can compute it.
pub fn webhook_path(token: &str, name: &str, namespace: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new().chain_update(token).chain_update(name).chain_update(namespace).finalize();
    format!("/hook/{}", hex::encode(digest))
}

/// The webhook token as stored in the `token` key of the webhook Secret: UTF-8, with one
/// trailing line break removed (what `echo token > file` and `kubectl create secret
/// --from-file` leave); `None` when empty or not UTF-8. The receiver, `status.webhookPath`, the
/// GitLab hook and `cdtarget webhook-path` all read the token through this one function, so they
/// agree on the path.
pub(crate) fn webhook_token(raw: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(raw).ok()?;
    let text = text.strip_suffix('\n').map_or(text, |t| t.strip_suffix('\r').unwrap_or(t));
    (!text.is_empty()).then_some(text)
}

fn default_true() -> bool {
    true
}

/// Exactly one of `branch`, `tag` or `commit`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRef {
    /// A branch name, e.g. `main`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// A tag name, e.g. `v1.2.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// A full commit SHA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// A reference to a Secret in the TenantRepository's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalSecretReference {
    /// Name of the Secret.
    pub name: String,
}

/// How pushes are announced to the receiver.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSpec {
    /// How deliveries are verified.
    #[serde(rename = "type")]
    pub kind: WebhookType,
    /// Secret with the webhook `token` (and, for GitLab, an optional `signingToken`).
    pub secret_ref: LocalSecretReference,
    /// Event types that trigger a sync; default `Push Hook` and `Tag Push Hook`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
}

/// Verification scheme of webhook deliveries.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WebhookType {
    /// `X-Gitlab-Token`, plus Standard Webhooks signatures when a signing token is set.
    #[default]
    Gitlab,
    /// `X-Hub-Signature-256`.
    Github,
    /// `X-Signature: sha256=<hex>` over the body.
    GenericHmac,
    /// The unguessable path alone.
    Generic,
}

/// GitLab project management for this registration.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitLabSpec {
    /// Project path (`group/project`); derived from `url` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Register the read-only deploy key; default true.
    #[serde(default = "default_true")]
    pub manage_deploy_key: bool,
    /// Register the project webhook; default true.
    #[serde(default = "default_true")]
    pub manage_webhook: bool,
}

/// What the controller last did with a registration.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantRepositoryStatus {
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Reconciling`, `Stalled`, `SourceReady`, `Applied`, `GitLabSynced`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The commit last fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetched_revision: Option<String>,
    /// The commit last applied in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    /// Digest of the set last applied in full (every object as sent, in order): with
    /// `lastAppliedRevision` it lets an unchanged cycle send no request at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_digest: Option<String>,
    /// Every object applied from the repository, so that what leaves Git can be pruned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
    /// The receiver path for this registration: `/hook/<hex sha256(token + name + namespace)>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_path: Option<String>,
    /// Ids of what cdtarget registered on GitLab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<GitLabStatus>,
    /// The value of the `cdtarget.io/requestedAt` annotation the last finished reconcile (success
    /// or failure) was started with: `cdtarget reconcile tenantrepository NAME --wait` waits for
    /// it to match its request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The health check of what was applied (`spec.wait`); absent without `spec.wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheckStatus>,
}

/// Where the health check of the applied set stands (`spec.wait`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// Digest of the set checked (`lastAppliedDigest` when the check began).
    pub digest: String,
    /// When the check began: when the set was applied, or repaired after it was healthy;
    /// `spec.wait.timeout` counts from here.
    pub started_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// Every object was healthy at a check: unchanged cycles check nothing more until the set
    /// is applied or repaired again.
    #[serde(default)]
    pub healthy: bool,
}

/// One applied object.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    /// `apiVersion` of the object.
    pub api_version: String,
    /// `kind` of the object.
    pub kind: String,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
}

/// Ids of the deploy key and hook cdtarget owns on the GitLab project.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitLabStatus {
    /// Numeric project id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<i64>,
    /// The project path `projectId` was resolved from; the id is reused only while
    /// `spec.gitlab.project` (or the URL) names the same path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_path: Option<String>,
    /// Id of the deploy key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_key_id: Option<i64>,
    /// Id of the project hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_id: Option<i64>,
    /// The last commit status posted on GitLab for this registration: a revision evaluated
    /// again posts nothing new (`docs/gitlab.md`, "Commit statuses and comments").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_status: Option<PostedCommitStatus>,
    /// The revision whose refusal was last commented on GitLab (one comment per revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commented_sha: Option<String>,
}

/// A commit status as cdtarget last posted it, keyed by `sha`, `ref` and `name` (GitLab's own
/// key, with the bot user).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostedCommitStatus {
    /// The full commit SHA.
    pub sha: String,
    /// The branch or tag the status was posted for; absent for a registration pinned to a commit.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// The status name (`--gitlab-status-name`).
    pub name: String,
    /// `pending`, `running`, `success`, `failed`, `canceled` or `skipped`.
    pub state: String,
    /// The GitLab pipeline the status lives in: later posts for the same commit name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_id: Option<i64>,
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn webhook_path_is_the_digest_of_token_name_and_namespace() {
        let expected = hex::encode(Sha256::digest(b"s3cretteam-arepoplatform"));
        assert_eq!(webhook_path("s3cret", "team-arepo", "platform"), format!("/hook/{expected}"));
        assert_ne!(webhook_path("s3cret", "a", "b"), webhook_path("other", "a", "b"));
    }

    #[test]
    fn webhook_token_drops_one_trailing_line_break_and_refuses_empty_or_binary() {
        assert_eq!(webhook_token(b"s3cret"), Some("s3cret"));
        assert_eq!(webhook_token(b"s3cret\n"), Some("s3cret"));
        assert_eq!(webhook_token(b"s3cret\r\n"), Some("s3cret"));
        assert_eq!(webhook_token(b"s3cret\n\n"), Some("s3cret\n"), "only one line break is removed");
        assert_eq!(webhook_token(b""), None);
        assert_eq!(webhook_token(b"\n"), None);
        assert_eq!(webhook_token(&[0xff, 0xfe]), None);
    }
}
