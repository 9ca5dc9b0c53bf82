//! The API types: the `cdtarget.io/v1alpha1` custom resources, the KEDA objects cdtarget renders,
//! the cluster admin's policy document, the labels and names shared by every module, and the
//! vocabulary of conditions and reasons ([`conditions`]).

pub(crate) mod cdtarget;
pub mod conditions;
pub mod keda;
pub mod labels;
pub(crate) mod names;
pub mod policy;
pub mod reconcile_request;
pub mod sync_status;
pub mod tenant_repository;

pub use cdtarget::{AgentConfig, AgentMode, CDTarget, CDTargetSpec, CDTargetStatus, ChildReference, RenderedSummary};
pub use policy::PolicyDocument;
pub use sync_status::{SyncStatus, SyncStatusSpec, SyncStatusStatus};
pub use tenant_repository::{TenantRepository, TenantRepositorySpec, TenantRepositoryStatus};

/// The API group of cdtarget's own kinds.
pub(crate) const GROUP: &str = "cdtarget.io";
/// `apiVersion` of cdtarget's own kinds.
pub(crate) const API_VERSION: &str = "cdtarget.io/v1alpha1";
/// `apiVersion` of the seed operator's CDTarget, still accepted in tenant repositories.
pub(crate) const LEGACY_API_VERSION: &str = "cnad.gofound.nl/v1alpha1";
/// The field manager of every server-side apply the controller sends as itself (children,
/// status, the Lease); applies made as a tenant use
/// [`crate::apply::server_side::TENANT_FIELD_MANAGER`].
pub const FIELD_MANAGER: &str = "cdtarget";
