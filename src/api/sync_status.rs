//! `SyncStatus`: what happened to a registration's pushes, written by the controller into the
//! tenant's own namespace. The TenantRepository and its Events live in the platform namespace,
//! which tenants cannot read; this object (and the Warning Events beside it) is how a tenant
//! learns that a push was refused, applied, pruned or repaired. Tenants read it, only the
//! controller writes it, and nothing secret is in it (the URL's userinfo is removed).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::tenant_repository::InventoryEntry;

/// Which registration this status belongs to and what it fetches (no credentials).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cdtarget.io",
    version = "v1alpha1",
    kind = "SyncStatus",
    plural = "syncstatuses",
    singular = "syncstatus",
    namespaced,
    status = "SyncStatusStatus",
    shortname = "sync",
    doc = "What cdtarget did with the latest pushes of a tenant repository (written by the controller, read by the tenant).",
    derive = "Default",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.lastAppliedRevision"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatusSpec {
    /// The TenantRepository (in the platform namespace) this status reports on.
    pub registration: RegistrationReference,
    /// The repository URL, without userinfo.
    pub url: String,
    /// The ref fetched (`branch main`, `tag v1`, `commit <sha>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// The directory inside the repository holding the manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Namespace and name of a TenantRepository.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RegistrationReference {
    /// Namespace of the TenantRepository.
    pub namespace: String,
    /// Name of the TenantRepository.
    pub name: String,
}

/// What the controller last did with the registration's repository.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatusStatus {
    /// The registration's generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The registration's kstatus conditions (`Ready`, `Reconciling`, `Stalled`, `SourceReady`,
    /// `Applied`, ...), as on the TenantRepository, each message as a tenant may read it: in full
    /// about the tenant's own files and objects, else a fixed sentence (docs/feedback.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The commit last fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetched_revision: Option<String>,
    /// The commit last applied in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    /// Every problem of the last evaluated revision, located (`file:document: field: message`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<LocatedProblem>,
    /// What the last reconcile that changed something did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync: Option<SyncReport>,
    /// Every object applied from the repository (what a later push can prune).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
}

/// One problem of a tenant document.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocatedProblem {
    /// The file, relative to the synced path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The 1-based document in the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<i64>,
    /// The 1-based line where the document starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
    /// The field path (`spec.ip[2]`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

/// What one reconcile did to the tenant namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    /// When it happened (RFC 3339).
    pub time: String,
    /// The commit it applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Objects created or changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<InventoryEntry>,
    /// Objects deleted because they left Git.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<InventoryEntry>,
    /// Objects changed on the cluster and put back as Git says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repaired: Vec<InventoryEntry>,
}
