//! Which kinds the cluster serves, with their scope and their plural, as the API server's
//! discovery documents say — the controller's answer to "may a tenant apply this kind?" and
//! "to which URL?". Offline (`render`, `validate`) only the table of
//! [`crate::manifests::scope`] is there.
//!
//! The decision is pure ([`GroupVersionResources`], [`tenant_resource`]); [`Discovery`] reads
//! the documents: the served group versions (`/api`, `/apis`), then each group version's
//! resources (`/api/v1`, `/apis/GROUP/VERSION`) when first needed. Both are cached and read
//! again on a miss, so a CustomResourceDefinition installed a moment ago is found on the next
//! reconcile; a miss refreshes at most once per [`Discovery::min_refresh`], so a tenant pushing
//! kinds that do not exist cannot make the controller hammer the API server, and everything is
//! read again after [`MAX_AGE`]. The cache holds only what the server serves, whatever tenants
//! ask for.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kube::Client;
use kube::core::gvk::GroupVersion;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};

use crate::manifests::{ApplySet, type_meta};
use crate::problem::Problem;

/// The shortest time between two reads of the same discovery document caused by misses.
pub(crate) const DEFAULT_MIN_REFRESH: Duration = Duration::from_secs(10);
/// Cached discovery documents older than this are read again when used.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(10 * 60);

/// What discovery says of one `apiVersion` and `kind`.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// Served: where to send it, and whether it lives in a namespace.
    Served {
        /// Group, version, kind and the plural the server gave.
        resource: ApiResource,
        /// Namespaced (`true`) or cluster-scoped.
        namespaced: bool,
    },
    /// The group version is served, but not this kind.
    KindNotServed,
    /// The group version is not served at all.
    VersionNotServed,
}

/// The resources one group version serves, by kind; subresources are left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GroupVersionResources {
    by_kind: BTreeMap<String, (ApiResource, bool)>,
}

impl GroupVersionResources {
    /// From what kube parsed of a group version's `APIResourceList`. A kind listed twice keeps
    /// its first resource, as the API server's RESTMapper does.
    pub fn new(resources: impl IntoIterator<Item = (ApiResource, ApiCapabilities)>) -> Self {
        let mut by_kind = BTreeMap::new();
        for (resource, capabilities) in resources {
            let namespaced = matches!(capabilities.scope, Scope::Namespaced);
            by_kind.entry(resource.kind.clone()).or_insert((resource, namespaced));
        }
        GroupVersionResources { by_kind }
    }

    /// What this group version says of `kind`.
    pub fn lookup(&self, kind: &str) -> Lookup {
        match self.by_kind.get(kind) {
            Some((resource, namespaced)) => Lookup::Served { resource: resource.clone(), namespaced: *namespaced },
            None => Lookup::KindNotServed,
        }
    }
}

/// A refusal of discovery, with the field of the document it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `apiVersion` or `kind`.
    pub field: &'static str,
    /// What is wrong and what would be accepted.
    pub message: String,
}

/// The resource a tenant object of `api_version`/`kind` is applied to, or why it is refused:
/// a kind the cluster does not serve, or serves cluster-wide, never reaches the API server.
pub(crate) fn tenant_resource(lookup: &Lookup, api_version: &str, kind: &str) -> Result<ApiResource, Refusal> {
    match lookup {
        Lookup::Served { resource, namespaced: true } => Ok(resource.clone()),
        Lookup::Served { namespaced: false, .. } => Err(Refusal {
            field: "kind",
            message: format!(
                "{kind} is cluster-scoped (the cluster's API discovery says so); tenants may only apply namespaced objects into their namespace"
            ),
        }),
        Lookup::KindNotServed => Err(Refusal {
            field: "kind",
            message: format!(
                "kind {kind} is not served by the cluster in `{api_version}`; check the spelling (kinds are case-sensitive) or ask the platform team to install its CustomResourceDefinition"
            ),
        }),
        Lookup::VersionNotServed => Err(Refusal {
            field: "apiVersion",
            message: format!(
                "`{api_version}` is not served by the cluster; use a served version of the group (`kubectl api-versions`) or ask the platform team to install the API"
            ),
        }),
    }
}

/// Every document of `set` whose kind the cluster does not serve, or serves cluster-wide,
/// located at its file, document and field. Empty when the whole set may be applied.
pub(crate) async fn check_set(discovery: &Discovery, set: &ApplySet) -> Result<Vec<Problem>, kube::Error> {
    let mut problems = Vec::new();
    for document in &set.documents {
        let api_version = document.api_version();
        let kind = document.kind();
        if let Err(refusal) = discovery.tenant_resource(api_version, kind).await? {
            let problem = Problem::field(refusal.field, refusal.message);
            problems.push(document.locate(problem));
        }
    }
    Ok(problems)
}

/// The cluster's discovery documents, cached (see the module documentation).
pub struct Discovery {
    client: Client,
    min_refresh: Duration,
    cache: tokio::sync::Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    /// Every served group version; the core group is `""`.
    versions: Option<Fetched<BTreeSet<(String, String)>>>,
    /// Resources of the group versions needed so far (only served ones).
    resources: BTreeMap<(String, String), Fetched<GroupVersionResources>>,
}

struct Fetched<T> {
    value: T,
    at: Instant,
}

impl<T> Fetched<T> {
    fn now(value: T) -> Self {
        Fetched { value, at: Instant::now() }
    }
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").field("min_refresh", &self.min_refresh).finish_non_exhaustive()
    }
}

impl Discovery {
    /// Reads discovery through `client` (the controller's own: discovery is not the tenant's).
    pub fn new(client: Client) -> Self {
        Discovery { client, min_refresh: DEFAULT_MIN_REFRESH, cache: tokio::sync::Mutex::default() }
    }

    /// Misses refresh a document at most once per `min_refresh` ([`DEFAULT_MIN_REFRESH`]).
    pub fn with_min_refresh(mut self, min_refresh: Duration) -> Self {
        self.min_refresh = min_refresh;
        self
    }

    /// The shortest time between two reads of the same document caused by misses.
    pub fn min_refresh(&self) -> Duration {
        self.min_refresh
    }

    /// What the cluster says of `api_version`/`kind` (a checked `apiVersion`), reading the
    /// documents once more when the cached ones do not know it.
    pub async fn lookup(&self, api_version: &str, kind: &str) -> Result<Lookup, kube::Error> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let key = (group.to_owned(), version.to_owned());
        let mut cache = self.cache.lock().await;
        if !self.serves(&mut cache, &key).await? {
            return Ok(Lookup::VersionNotServed);
        }
        let stale = cache.resources.get(&key).is_none_or(|r| r.at.elapsed() >= MAX_AGE);
        if stale && !self.read_resources(&mut cache, &key).await? {
            return Ok(Lookup::VersionNotServed);
        }
        let cached = &cache.resources[&key];
        let found = cached.value.lookup(kind);
        if found != Lookup::KindNotServed || cached.at.elapsed() < self.min_refresh {
            return Ok(found);
        }
        if !self.read_resources(&mut cache, &key).await? {
            return Ok(Lookup::VersionNotServed);
        }
        Ok(cache.resources[&key].value.lookup(kind))
    }

    /// The resource a tenant object is applied to, or why it is refused ([`tenant_resource`]).
    pub async fn tenant_resource(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Result<ApiResource, Refusal>, kube::Error> {
        Ok(tenant_resource(&self.lookup(api_version, kind).await?, api_version, kind))
    }

    /// The resource to delete a tenant object recorded as `api_version`/`kind` through: that
    /// version, or, when the cluster no longer serves it (an API version removed by an upgrade),
    /// any served version of the same group with that kind. `None` when none serves it, or
    /// serves it cluster-wide: no such object can exist in a tenant namespace.
    pub async fn resource_for_deletion(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<ApiResource>, kube::Error> {
        match self.lookup(api_version, kind).await? {
            Lookup::Served { resource, namespaced } => return Ok(namespaced.then_some(resource)),
            Lookup::KindNotServed | Lookup::VersionNotServed => {}
        }
        let group = group_of(api_version);
        let others: Vec<String> = {
            let cache = self.cache.lock().await;
            let served = cache.versions.as_ref().map(|v| &v.value);
            served.into_iter().flatten().filter(|(g, _)| g == group).map(|(_, v)| v.clone()).collect()
        };
        for version in others {
            let other = type_meta::join(group, &version);
            if let Lookup::Served { resource, namespaced } = self.lookup(&other, kind).await? {
                return Ok(namespaced.then_some(resource));
            }
        }
        Ok(None)
    }

    /// Whether `key` is a served group version, reading the list once more on a miss.
    async fn serves(&self, cache: &mut Cache, key: &(String, String)) -> Result<bool, kube::Error> {
        let stale = cache.versions.as_ref().is_none_or(|v| v.at.elapsed() >= MAX_AGE);
        if stale {
            self.read_versions(cache).await?;
        }
        let versions = cache.versions.as_ref().expect("read above");
        if versions.value.contains(key) {
            return Ok(true);
        }
        if stale || versions.at.elapsed() < self.min_refresh {
            return Ok(false);
        }
        self.read_versions(cache).await?;
        Ok(cache.versions.as_ref().is_some_and(|v| v.value.contains(key)))
    }

    async fn read_versions(&self, cache: &mut Cache) -> Result<(), kube::Error> {
        let core = self.client.list_core_api_versions().await?;
        let groups = self.client.list_api_groups().await?;
        let mut served: BTreeSet<(String, String)> = core.versions.into_iter().map(|v| (String::new(), v)).collect();
        for group in groups.groups {
            served.extend(group.versions.into_iter().map(|v| (group.name.clone(), v.version)));
        }
        // What the server no longer serves leaves the cache too.
        cache.resources.retain(|key, _| served.contains(key));
        cache.versions = Some(Fetched::now(served));
        Ok(())
    }

    /// Reads the resources of `key`; `false` when the server says it is not served (404).
    async fn read_resources(&self, cache: &mut Cache, key: &(String, String)) -> Result<bool, kube::Error> {
        let (group, version) = key;
        match kube::discovery::pinned_group(&self.client, &GroupVersion::gv(group, version)).await {
            Ok(found) => {
                let resources = GroupVersionResources::new(found.versioned_resources(version));
                cache.resources.insert(key.clone(), Fetched::now(resources));
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                cache.resources.remove(key);
                if let Some(versions) = &mut cache.versions {
                    versions.value.remove(key);
                }
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

#[cfg(test)]
mod tests {
    use kube::api::GroupVersionKind;

    use super::*;

    fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
        let mut resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        resource.plural = plural.into();
        resource
    }

    fn capabilities(scope: Scope) -> ApiCapabilities {
        ApiCapabilities { scope, subresources: Vec::new(), operations: Vec::new() }
    }

    fn zoo() -> GroupVersionResources {
        GroupVersionResources::new([
            (resource("zoo.example.com", "v1", "Octopus", "octopodes"), capabilities(Scope::Namespaced)),
            (resource("zoo.example.com", "v1", "Habitat", "habitats"), capabilities(Scope::Cluster)),
        ])
    }

    #[test]
    fn the_plural_is_the_one_discovery_gives_not_a_guess() {
        let found = tenant_resource(&zoo().lookup("Octopus"), "zoo.example.com/v1", "Octopus").unwrap();
        assert_eq!(found.plural, "octopodes");
        assert_ne!(
            ApiResource::from_gvk(&GroupVersionKind::gvk("zoo.example.com", "v1", "Octopus")).plural,
            "octopodes"
        );
    }

    #[test]
    fn a_cluster_scoped_kind_unknown_offline_is_refused_on_the_kind() {
        let refusal = tenant_resource(&zoo().lookup("Habitat"), "zoo.example.com/v1", "Habitat").unwrap_err();
        assert_eq!(refusal.field, "kind");
        assert!(refusal.message.starts_with("Habitat is cluster-scoped"), "{}", refusal.message);
    }

    #[test]
    fn kinds_and_versions_the_cluster_does_not_serve_are_refused_saying_so() {
        let kind = tenant_resource(&zoo().lookup("Unicorn"), "zoo.example.com/v1", "Unicorn").unwrap_err();
        assert_eq!(kind.field, "kind");
        assert!(kind.message.starts_with("kind Unicorn is not served by the cluster"), "{}", kind.message);
        // Case-exact, as the API server: another spelling is another (unserved) kind.
        assert_eq!(zoo().lookup("octopus"), Lookup::KindNotServed);
        let version = tenant_resource(&Lookup::VersionNotServed, "zoo.example.com/v9", "Octopus").unwrap_err();
        assert_eq!(version.field, "apiVersion");
        assert!(version.message.contains("`zoo.example.com/v9` is not served"), "{}", version.message);
    }

    #[test]
    fn a_kind_listed_twice_keeps_its_first_resource() {
        let resources = GroupVersionResources::new([
            (resource("", "v1", "Thing", "things"), capabilities(Scope::Namespaced)),
            (resource("", "v1", "Thing", "otherthings"), capabilities(Scope::Cluster)),
        ]);
        assert_eq!(
            resources.lookup("Thing"),
            Lookup::Served { resource: resource("", "v1", "Thing", "things"), namespaced: true }
        );
    }
}
