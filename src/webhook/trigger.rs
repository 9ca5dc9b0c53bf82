//! The receiver's way into the TenantRepository controller: a [`Trigger`] queues a reconcile of
//! one registration now; the controller reads the other end (`Controller::reconcile_on`).

use futures::Stream;
use futures::channel::mpsc;
use kube::runtime::reflector::ObjectRef;

use crate::api::TenantRepository;

/// Asks for a reconcile of one TenantRepository now (the webhook receiver's path). Cloneable;
/// triggers for the same object while one is queued are merged by the controller.
#[derive(Clone, Debug)]
pub struct Trigger {
    sender: mpsc::UnboundedSender<ObjectRef<TenantRepository>>,
}

/// The controller behind a [`Trigger`] has stopped.
#[derive(Debug, thiserror::Error)]
#[error("the TenantRepository controller is not running")]
pub struct TriggerClosed;

impl Trigger {
    /// A trigger and the stream the controller reads (`Controller::reconcile_on`).
    pub fn new() -> (Trigger, impl Stream<Item = ObjectRef<TenantRepository>> + Send + 'static) {
        let (sender, receiver) = mpsc::unbounded();
        (Trigger { sender }, receiver)
    }

    /// Queues a reconcile of `namespace/name`.
    pub fn fire(&self, namespace: &str, name: &str) -> Result<(), TriggerClosed> {
        self.sender.unbounded_send(ObjectRef::new(name).within(namespace)).map_err(|_| TriggerClosed)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn fired_triggers_reach_the_controller_stream_in_order() {
        let (trigger, mut triggered) = Trigger::new();
        let webhook = trigger.clone();
        trigger.fire("team-a", "repo").unwrap();
        webhook.fire("team-b", "other").unwrap();
        let first = triggered.next().await.unwrap();
        assert_eq!((first.namespace.as_deref(), first.name.as_str()), (Some("team-a"), "repo"));
        assert_eq!(triggered.next().await.unwrap().name, "other");
        drop(triggered);
        assert!(trigger.fire("team-a", "repo").is_err(), "a stopped controller is reported");
    }
}
