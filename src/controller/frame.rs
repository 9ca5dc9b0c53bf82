//! What both reconcilers share: the [`Frame`] each `Context` holds (the one writer, the policy,
//! Events, readiness) with its builders ([`Framed`]), and the end of every reconcile
//! ([`Frame::finish`]): the status written once, only when it changed, then the readiness told
//! and the Event of a change of `Ready` recorded.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::ApiResource;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use tracing::Instrument;

use super::events::{self, EventSink};
use super::inputs::PolicySource;
use crate::api::tenant_repository::{TenantRepository, TenantRepositoryStatus};
use crate::api::{CDTarget, CDTargetStatus};
use crate::apply::{Write, WriteError, Writer};
use crate::telemetry::{Readiness, ReadinessObserver};

/// What every reconcile of either kind works through.
#[derive(Clone)]
pub struct Frame {
    /// Sends every write (status included); its client (the controller's own) reads.
    pub writer: Writer,
    /// The platform policy.
    pub policy: PolicySource,
    /// Records Events on state changes (none in tests that do not look at them).
    pub recorder: Option<EventSink>,
    /// Told the readiness of every status written, for `cdtarget_object_ready`.
    pub readiness: Option<ReadinessObserver>,
}

impl Frame {
    /// Writes through the controller's own `client` and reads policy ConfigMap
    /// `policy_namespace/policy_name` on every reconcile; no Events, no readiness. The controller
    /// process replaces the policy source with its shared watch ([`Framed::with_policy`]).
    pub fn new(client: Client, policy_namespace: &str, policy_name: &str) -> Self {
        Frame {
            writer: Writer::new(client.clone()),
            policy: PolicySource::Read { client, namespace: policy_namespace.to_owned(), name: policy_name.to_owned() },
            recorder: None,
            readiness: None,
        }
    }

    /// The end of a reconcile: writes `status` of `object` when it differs from what the object
    /// holds, then tells the readiness observer and records the Event of a change of `Ready`.
    /// A failed write tells and records nothing: the next reconcile does.
    pub async fn finish<K: Reconciled>(
        &self,
        object: &K,
        namespace: &str,
        status: &K::Status,
        suspended: bool,
    ) -> Result<(), WriteError> {
        let previous = object.status().map(K::conditions).unwrap_or_default();
        let transition = events::transition(previous, K::conditions(status));
        write_status(&self.writer, namespace, object, status).instrument(tracing::info_span!("status")).await?;
        if let Some(observer) = &self.readiness {
            observer(Readiness::of(K::KIND, namespace, &object.name_any(), K::conditions(status), suspended));
        }
        events::publish(self.recorder.as_ref(), object, transition).await;
        Ok(())
    }
}

/// A kind a reconciler writes the status of.
pub trait Reconciled: Resource<DynamicType = ()> + Sync {
    /// Its status.
    type Status: Serialize + PartialEq + Sync;
    /// Its kind, for metrics.
    const KIND: &'static str;
    /// The status it holds.
    fn status(&self) -> Option<&Self::Status>;
    /// The conditions of `status`.
    fn conditions(status: &Self::Status) -> &[Condition];
}

impl Reconciled for TenantRepository {
    type Status = TenantRepositoryStatus;
    const KIND: &'static str = "TenantRepository";
    fn status(&self) -> Option<&TenantRepositoryStatus> {
        self.status.as_ref()
    }
    fn conditions(status: &TenantRepositoryStatus) -> &[Condition] {
        &status.conditions
    }
}

impl Reconciled for CDTarget {
    type Status = CDTargetStatus;
    const KIND: &'static str = "CDTarget";
    fn status(&self) -> Option<&CDTargetStatus> {
        self.status.as_ref()
    }
    fn conditions(status: &CDTargetStatus) -> &[Condition] {
        &status.conditions
    }
}

/// Writes `status` of `object` through the one writer, and only when it differs from what the
/// object holds (an unchanged cycle writes nothing).
pub(crate) async fn write_status<K: Reconciled>(
    writer: &Writer,
    namespace: &str,
    object: &K,
    status: &K::Status,
) -> Result<(), WriteError> {
    if object.status() == Some(status) {
        return Ok(());
    }
    let write = Write::Status {
        resource: ApiResource::erase::<K>(&()),
        namespace: namespace.to_owned(),
        name: object.name_any(),
        status: serde_json::to_value(status).unwrap_or_default(),
    };
    writer.execute(write).await.map(|_| ())
}

/// The builders both reconcilers' contexts share, over their [`Frame`].
pub trait Framed: Sized {
    /// The context's frame.
    fn frame_mut(&mut self) -> &mut Frame;

    /// Reads the policy from `policy`.
    fn with_policy(mut self, policy: PolicySource) -> Self {
        self.frame_mut().policy = policy;
        self
    }

    /// Sends writes through `writer`.
    fn with_writer(mut self, writer: Writer) -> Self {
        self.frame_mut().writer = writer;
        self
    }

    /// Records Events through `recorder`.
    fn with_recorder(mut self, recorder: EventSink) -> Self {
        self.frame_mut().recorder = Some(recorder);
        self
    }

    /// Tells `observer` the readiness of every status written.
    fn with_readiness(mut self, observer: ReadinessObserver) -> Self {
        self.frame_mut().readiness = Some(observer);
        self
    }
}
