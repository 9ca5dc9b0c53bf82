//! Label and annotation keys cdtarget puts on the objects it renders.

/// Unique per CDTarget: selects exactly that CDTarget's agent pods (seed defect 21).
pub const CDTARGET: &str = "cdtarget.io/cdtarget";
/// Digest of every Secret the agent pods read; a change rolls the agents.
pub const SECRETS_DIGEST: &str = "cdtarget.io/secrets-digest";
/// Standard: the application.
pub(crate) const APP_NAME: &str = "app.kubernetes.io/name";
/// Standard: the instance of the application (the CDTarget's name).
pub(crate) const APP_INSTANCE: &str = "app.kubernetes.io/instance";
/// Standard: the component within the application.
pub(crate) const APP_COMPONENT: &str = "app.kubernetes.io/component";
/// Standard: the tool managing the object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Value of `app.kubernetes.io/name` on every rendered object.
pub(crate) const APP_NAME_VALUE: &str = "azure-pipelines-agent";
/// Value of `app.kubernetes.io/managed-by` on every rendered object.
pub const MANAGED_BY_VALUE: &str = "cdtarget";

/// Label key prefixes reserved for cdtarget and the standard labels it sets; tenants'
/// `additionalSelector` may not use them.
pub(crate) const RESERVED_PREFIXES: &[&str] = &["cdtarget.io/", "app.kubernetes.io/"];
