//! The load of a fetched revision, kept from hurting every other tenant: on a thread of its own
//! (stack sized for the depth bound, never tokio's), at most a few at once in the process, within
//! the revision's budget, abandoned at its deadline; a revision its budget refused is remembered
//! and not loaded again until it or the registration's path changes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::budget::{self, Overrun};
use crate::manifests::{self, ApplySet};
use crate::policy::Policy;
use crate::problem::Problem;

/// Loads at once in one process by default: each may hold its budget's bytes
/// (`manifests::Limits::budget`), and together they stay far below the pod's memory limit.
pub(crate) const DEFAULT_LOAD_CONCURRENCY: usize = 2;

/// Past the budget's own deadline (which the load checks as it works), how long the caller still
/// waits before it abandons the thread.
const ABANDON_GRACE: Duration = Duration::from_secs(5);

/// What one load reads.
#[derive(Clone, Debug)]
pub struct LoadRequest {
    /// `namespace/name` of the registration.
    pub key: String,
    /// The commit fetched.
    pub revision: String,
    /// The snapshot's root (the build's boundary).
    pub root: PathBuf,
    /// The synced directory, relative to the root.
    pub synced: String,
    /// The tenant's namespace.
    pub namespace: String,
}

/// A revision its budget refused, and the problem it was refused with.
#[derive(Clone, Debug)]
struct Refused {
    revision: String,
    synced: String,
    namespace: String,
    problems: Vec<Problem>,
}

/// Loads revisions for every registration of the process.
#[derive(Clone, Debug)]
pub struct Loader {
    slots: Arc<Semaphore>,
    refused: Arc<Mutex<HashMap<String, Refused>>>,
}

impl Default for Loader {
    fn default() -> Self {
        Loader::new(DEFAULT_LOAD_CONCURRENCY)
    }
}

impl Loader {
    /// At most `concurrency` loads at once (at least one).
    pub fn new(concurrency: usize) -> Self {
        Loader { slots: Arc::new(Semaphore::new(concurrency.max(1))), refused: Arc::default() }
    }

    /// Loads `request` under `limits` and `policy`: the apply set, or every problem (one, naming
    /// the limit, when the budget stopped it).
    pub async fn load(
        &self,
        request: LoadRequest,
        limits: manifests::Limits,
        policy: Policy,
    ) -> Result<ApplySet, Vec<Problem>> {
        if let Some(problems) = self.refused_before(&request) {
            return Err(problems);
        }
        let _slot = self.slots.acquire().await.map_err(|_| vec![Problem::field("", "the controller is stopping")])?;
        let abandon = Arc::new(AtomicBool::new(false));
        let (done, outcome) = tokio::sync::oneshot::channel();
        let (root, synced, namespace) = (request.root.clone(), request.synced.clone(), request.namespace.clone());
        let flag = Arc::clone(&abandon);
        let spawned = budget::spawn_loader("cdtarget-load", move || {
            let _span = tracing::info_span!("load").entered();
            let loaded = manifests::read_and_load_abandonable(&root, &synced, &limits, &namespace, &policy, flag);
            let _ = done.send(loaded);
        });
        if let Err(e) = spawned {
            return Err(vec![Problem::field("", format!("the load could not start: {e}"))]);
        }
        let at = if request.synced.is_empty() { ".".to_owned() } else { request.synced.clone() };
        let (loaded, overrun) = match tokio::time::timeout(limits.budget.deadline + ABANDON_GRACE, outcome).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => {
                return Err(vec![Problem::field("", "the load stopped before it finished").located(&at, None, None)]);
            }
            Err(_) => {
                // The thread sees the flag at its next look at the clock and ends by itself.
                abandon.store(true, Ordering::Relaxed);
                let overrun = Overrun::Deadline(limits.budget.deadline);
                (Err(vec![Problem::field("", overrun.to_string()).located(&at, None, None)]), Some(overrun))
            }
        };
        self.remember(&request, &loaded, overrun);
        loaded
    }

    fn refused_before(&self, request: &LoadRequest) -> Option<Vec<Problem>> {
        let refused = self.refused.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        refused.get(&request.key).filter(|r| same_input(r, request)).map(|r| r.problems.clone())
    }

    fn remember(&self, request: &LoadRequest, loaded: &Result<ApplySet, Vec<Problem>>, overrun: Option<Overrun>) {
        let mut refused = self.refused.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match (loaded, overrun) {
            // Abandoned by a stopping process is no verdict on the revision.
            (Err(problems), Some(overrun)) if overrun != Overrun::Abandoned => {
                refused.insert(
                    request.key.clone(),
                    Refused {
                        revision: request.revision.clone(),
                        synced: request.synced.clone(),
                        namespace: request.namespace.clone(),
                        problems: problems.clone(),
                    },
                );
            }
            _ => {
                refused.remove(&request.key);
            }
        }
    }
}

fn same_input(refused: &Refused, request: &LoadRequest) -> bool {
    refused.revision == request.revision && refused.synced == request.synced && refused.namespace == request.namespace
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n";

    fn request(root: &std::path::Path, revision: &str) -> LoadRequest {
        LoadRequest {
            key: "cdtarget-system/team-a".into(),
            revision: revision.into(),
            root: root.to_path_buf(),
            synced: String::new(),
            namespace: "team-a".into(),
        }
    }

    fn one_object() -> manifests::Limits {
        manifests::Limits { budget: budget::Limits { objects: 1, ..budget::Limits::default() }, ..Default::default() }
    }

    #[tokio::test]
    async fn a_revision_its_budget_refused_is_not_loaded_again_until_a_new_commit() {
        let dir = tempfile::tempdir().unwrap();
        let two = format!("{CONFIG_MAP}---\n{}", CONFIG_MAP.replace("name: a", "name: b"));
        std::fs::write(dir.path().join("objects.yaml"), two).unwrap();
        let loader = Loader::new(1);
        let refused = loader.load(request(dir.path(), "abc"), one_object(), Policy::default()).await.unwrap_err();
        assert!(refused[0].message.contains("more than 1 objects"), "{refused:?}");

        // The same commit is not read again: what is on disk no longer matters.
        std::fs::write(dir.path().join("objects.yaml"), CONFIG_MAP).unwrap();
        let again = loader.load(request(dir.path(), "abc"), one_object(), Policy::default()).await.unwrap_err();
        assert_eq!(again, refused);

        let loaded = loader.load(request(dir.path(), "def"), one_object(), Policy::default()).await.unwrap();
        assert_eq!(loaded.documents.len(), 1, "a new commit is loaded");
    }

    #[tokio::test]
    async fn a_refusal_by_the_tenancy_rules_is_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ns.yaml"), CONFIG_MAP.replace("{name: a}", "{name: a, namespace: other}"))
            .unwrap();
        let loader = Loader::new(1);
        let limits = manifests::Limits::default();
        loader.load(request(dir.path(), "abc"), limits, Policy::default()).await.unwrap_err();
        // The platform may change the policy or the namespace rules: the same commit is read again.
        std::fs::write(dir.path().join("ns.yaml"), CONFIG_MAP).unwrap();
        assert!(loader.load(request(dir.path(), "abc"), limits, Policy::default()).await.is_ok());
    }
}
