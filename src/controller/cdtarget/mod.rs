//! The CDTarget reconciler: read the policy and the referenced Secrets, check that the CDTarget
//! lends its agents nothing its tenant could not read ([`borrowed`]), render the children (a
//! list of kind-tagged objects, [`crate::render::Children`]), server-side apply them with
//! controller owner references, delete those no longer rendered that it controls
//! ([`inventory`]), and write status once.
//!
//! `Ready` means the agents run ([`agents`]): the children are applied (the `Applied`
//! condition) and at least `minReplicaCount` agents are available (and the ScaledObject is
//! Ready when KEDA runs).
//!
//! One file per step: [`observe`] reads, [`plan`] decides (a pure function over what was read),
//! [`execute`] writes the children through the one writer (which children may be written at all
//! is [`children::plan`], over the live objects: a child never takes over an object it does not
//! control; which children no longer rendered are deleted is [`inventory`], only those this
//! CDTarget controls), [`decide`] sums up what the writes did (a pure function again), and
//! [`status`] computes and writes the status. [`reconcile`] runs them in order.

pub mod agents;
pub mod borrowed;
pub mod children;
pub mod decide;
pub(crate) mod echoes;
pub mod execute;
pub mod inventory;
pub(crate) mod observe;
pub mod plan;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use tracing::Instrument;

use crate::api::CDTarget;
use crate::apply::WriteError;
use crate::controller::frame::{Frame, Framed};
use crate::error::{Class, Classify, Schedule};

pub use crate::controller::inputs::Keda;
pub use decide::{Decision, decide};
pub use execute::{Applied, Written};
pub use observe::{REGISTRATIONS_TTL, REVIEW_TTL, Tenants};
pub use plan::plan;
pub(crate) use status::next_status;

/// Resync of a CDTarget whose children are in place (drift repair), unless
/// `--cdtarget-resync-interval` says otherwise ([`Context::with_resync`]).
pub(crate) const RESYNC: Duration = Duration::from_secs(10 * 60);
pub use super::TRANSIENT_RETRY;
pub(crate) use super::{STALLED_RESYNC, WAIT_RETRY};

/// When the CDTarget reconciler comes back after a failure of each class.
pub(crate) const SCHEDULE: Schedule =
    Schedule { stalled: STALLED_RESYNC, waiting: WAIT_RETRY, transient: TRANSIENT_RETRY };

/// What the CDTarget reconciler needs.
#[derive(Clone)]
pub struct Context {
    /// The writer (children, status; its client, the controller's own, reads), the policy,
    /// Events and readiness.
    pub frame: Frame,
    /// The controller's namespace: the registrations (tenant identities) live there.
    pub platform_namespace: String,
    /// Whether the KEDA CRDs (`ScaledObject`, `TriggerAuthentication`) exist in the cluster;
    /// re-checked while running.
    pub keda: Keda,
    /// Who the tenant of a namespace is, for what a CDTarget may hand its agents ([`borrowed`]).
    pub tenants: Tenants,
    /// When a CDTarget whose children are in place is checked again ([`RESYNC`] by default).
    pub resync: Duration,
    /// The children's versions this process wrote, so that their echo on the watches does not
    /// reconcile their CDTarget again ([`echoes`]).
    pub echoes: echoes::Echoes,
    /// Which of the agents' objects are watched (none by default).
    pub agent_watches: AgentWatches,
}

/// Which of the agents' objects a watch reports every change of (status included), so that a
/// CDTarget waiting for its agents is reconciled as soon as they change instead of polling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentWatches {
    /// The Deployments.
    pub deployments: bool,
    /// The ScaledObjects (not when KEDA was installed after start-up).
    pub scaled_objects: bool,
}

impl AgentWatches {
    /// Whether a change of every object the agents of `children` are judged by is watched.
    pub fn cover(&self, children: &crate::render::Children) -> bool {
        (children.deployment().is_none() || self.deployments)
            && (children.scaled_object().is_none() || self.scaled_objects)
    }
}

impl Context {
    /// A context over the controller's own `client`, reading policy ConfigMap
    /// `policy_namespace/policy_name` on every reconcile, KEDA not installed, no Events, no
    /// default tenant ServiceAccount. The controller process replaces the policy source with
    /// its shared watch ([`Framed::with_policy`]).
    pub fn new(client: Client, policy_namespace: &str, policy_name: &str) -> Self {
        Context {
            frame: Frame::new(client, policy_namespace, policy_name),
            platform_namespace: policy_namespace.to_owned(),
            keda: Keda::new(false),
            tenants: Tenants::default(),
            resync: RESYNC,
            echoes: echoes::Echoes::default(),
            agent_watches: AgentWatches::default(),
        }
    }

    /// Polls waiting agents only where `watches` do not report their changes.
    pub fn with_agent_watches(mut self, watches: AgentWatches) -> Self {
        self.agent_watches = watches;
        self
    }

    /// Checks a CDTarget whose children are in place again every `resync`.
    pub fn with_resync(mut self, resync: Duration) -> Self {
        self.resync = resync;
        self
    }

    /// Renders for KEDA as `keda` says.
    pub fn with_keda(mut self, keda: Keda) -> Self {
        self.keda = keda;
        self
    }

    /// Finds tenant identities through `tenants`.
    pub fn with_tenants(mut self, tenants: Tenants) -> Self {
        self.tenants = tenants;
        self
    }
}

impl Framed for Context {
    fn frame_mut(&mut self) -> &mut Frame {
        &mut self.frame
    }
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
    #[error(transparent)]
    Apply(WriteError),
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
    #[error(transparent)]
    Status(WriteError),
}

impl Classify for Error {
    fn class(&self) -> Class {
        match self {
            Error::NotNamespaced(_) => Class::Stalled,
            Error::Read { source, .. } | Error::Review { source, .. } => source.class(),
            Error::Apply(e) | Error::Status(e) => e.class(),
        }
    }
}

impl Error {
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

/// The requeue after a failed reconcile, chosen by the error's class ([`SCHEDULE`]).
pub(crate) fn error_policy(_target: Arc<CDTarget>, error: &Error, _ctx: Arc<Context>) -> Action {
    Action::requeue(SCHEDULE.settle(error.class()).requeue)
}

/// Reconciles one CDTarget: observe, plan, execute, status (see the module documentation).
pub async fn reconcile(target: Arc<CDTarget>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = target.name_any();
    let namespace = target.namespace().ok_or_else(|| Error::NotNamespaced(name.clone()))?;
    let span = tracing::info_span!(
        "reconcile",
        kind = "CDTarget",
        namespace = %namespace,
        object = %format!("{namespace}/{name}"),
        generation = target.metadata.generation.unwrap_or_default(),
    );
    reconcile_in(target, ctx, namespace).instrument(span).await
}

async fn reconcile_in(target: Arc<CDTarget>, ctx: Arc<Context>, namespace: String) -> Result<Action, Error> {
    let observed = observe::observe(&target, &namespace, &ctx).await?;
    let plan = plan::plan(&target, &observed.policy, &observed.secrets, ctx.keda.seen(), &observed.refused, ctx.resync);
    let written = match &plan.children {
        Some(children) => execute::write_children(&ctx.frame.writer, &ctx.echoes, &namespace, &target, children).await,
        None => Ok(Written::Nothing),
    };
    let decision = decide::decide(&target, plan, written.as_ref(), ctx.agent_watches, Timestamp::now());
    let status = next_status(&target, &decision, &Time(Timestamp::now()));
    ctx.frame.finish(target.as_ref(), &namespace, &status, false).await.map_err(Error::Status)?;
    written?;
    tracing::debug!(reason = decision.health.reason(), requeue_seconds = decision.requeue.as_secs(), "reconciled");
    Ok(Action::requeue(decision.requeue))
}
