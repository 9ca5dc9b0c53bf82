//! What every reconcile reads that is not its own object, kept once for all of them: the
//! admin's policy (parsed once per change of its ConfigMap, [`PolicySource`]) and whether KEDA is
//! installed ([`Keda`]). The process wiring ([`super::process`]) feeds both from its watches.

use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use tokio::sync::watch;

use crate::policy::{self, Policy};
use crate::problem::Problem;

/// The platform policy as read: the policy, or every problem of its ConfigMap.
pub(crate) type PolicyRead = Result<Policy, Vec<Problem>>;

/// The policy from ConfigMap `config_map` (`None`: absent, the documented defaults).
pub(crate) fn policy_of(config_map: Option<&ConfigMap>) -> PolicyRead {
    match config_map {
        None => Ok(Policy::default()),
        Some(config_map) => policy::from_config_map(&serde_json::to_value(config_map).unwrap_or_default()),
    }
}

/// Where reconciles get the policy.
#[derive(Clone)]
pub enum PolicySource {
    /// Parsed by the policy watch once per change and shared by every reconcile (the
    /// controller). `None` until the watch has listed the ConfigMap once: no reconcile runs on a
    /// policy it has not read.
    Shared(watch::Receiver<Option<Arc<PolicyRead>>>),
    /// Read from the API server and parsed on every use (reconciler tests against a fake API
    /// server that serves no watches).
    Read {
        /// The client reading it.
        client: Client,
        /// The ConfigMap's namespace (the controller's).
        namespace: String,
        /// The ConfigMap's name.
        name: String,
    },
}

impl std::fmt::Debug for PolicySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PolicySource::Shared(_) => "PolicySource::Shared",
            PolicySource::Read { .. } => "PolicySource::Read",
        })
    }
}

impl PolicySource {
    /// A source and the sender the policy watch keeps current.
    pub fn shared() -> (watch::Sender<Option<Arc<PolicyRead>>>, PolicySource) {
        let (sender, receiver) = watch::channel(None);
        (sender, PolicySource::Shared(receiver))
    }

    /// The policy as it stands; waits for the first list of the shared source.
    pub async fn current(&self) -> Result<Arc<PolicyRead>, kube::Error> {
        match self {
            PolicySource::Shared(receiver) => {
                let mut receiver = receiver.clone();
                let read = receiver
                    .wait_for(Option::is_some)
                    .await
                    .map_err(|_| kube::Error::Service("the policy watch has stopped".into()))?;
                Ok(read.clone().unwrap_or_else(|| Arc::new(Ok(Policy::default()))))
            }
            PolicySource::Read { client, namespace, name } => {
                let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), namespace);
                Ok(Arc::new(policy_of(api.get_opt(name).await?.as_ref())))
            }
        }
    }

    /// `namespace/name` of the ConfigMap, for errors.
    pub fn describe(&self) -> String {
        match self {
            PolicySource::Shared(_) => "the policy ConfigMap".to_owned(),
            PolicySource::Read { namespace, name, .. } => format!("{namespace}/{name}"),
        }
    }
}

pub use crate::api::keda::KedaSeen;

/// What is known of KEDA, shared between the reconciler and the task that re-checks it.
#[derive(Clone, Debug, Default)]
pub struct Keda(Arc<RwLock<KedaSeen>>);

impl Keda {
    /// KEDA is (`true`) or is not installed, its release not known.
    pub fn new(installed: bool) -> Self {
        Keda::discovered(KedaSeen { installed, version: None })
    }

    /// What discovery found.
    pub fn discovered(seen: KedaSeen) -> Self {
        Keda(Arc::new(RwLock::new(seen)))
    }

    /// Whether KEDA is installed, as last seen.
    pub fn installed(&self) -> bool {
        self.seen().installed
    }

    /// Everything last seen.
    pub fn seen(&self) -> KedaSeen {
        *self.0.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records what was seen; returns whether it changed.
    pub fn set(&self, seen: KedaSeen) -> bool {
        let mut current = self.0.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::replace(&mut *current, seen) != seen
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[tokio::test]
    async fn a_shared_policy_is_read_only_after_the_watch_listed_it() {
        let (sender, source) = PolicySource::shared();
        let waiting = tokio::spawn({
            let source = source.clone();
            async move { source.current().await.unwrap() }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no policy before the first list");
        let config_map = ConfigMap {
            data: Some(BTreeMap::from([("policy.yaml".to_owned(), "forbiddenCIDRs: [10.0.0.0/8]\n".to_owned())])),
            ..ConfigMap::default()
        };
        sender.send_replace(Some(Arc::new(policy_of(Some(&config_map)))));
        let read = waiting.await.unwrap();
        assert_eq!(*read, policy_of(Some(&config_map)));
    }
}
