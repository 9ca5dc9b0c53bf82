//! Which objects left a watch: deleted, or missing from a re-list (deleted while the watch was
//! down, e.g. across a kube-apiserver restart, where no `Delete` event is ever seen). Their
//! metric series are dropped there, so `/metrics` never reports an object that is gone.

use std::collections::BTreeSet;

use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

/// `namespace` and `name` of an object.
pub type Key = (String, String);

/// Follows one watch's events and names the objects that left it.
#[derive(Debug, Default)]
pub(crate) struct Vanished {
    /// Every object the watch holds.
    known: BTreeSet<Key>,
    /// The objects of a re-list under way.
    listing: Option<BTreeSet<Key>>,
}

impl Vanished {
    /// Takes one event; returns the objects it shows gone.
    pub fn see<K: Resource>(&mut self, event: &watcher::Event<K>) -> Vec<Key> {
        let key = |object: &K| (object.namespace().unwrap_or_default(), object.name_any());
        match event {
            watcher::Event::Init => {
                self.listing = Some(BTreeSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                self.listing.get_or_insert_with(BTreeSet::new).insert(key(object));
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let gone = self.known.difference(&listed).cloned().collect();
                self.known = listed;
                gone
            }
            watcher::Event::Apply(object) => {
                self.known.insert(key(object));
                Vec::new()
            }
            watcher::Event::Delete(object) => {
                let key = key(object);
                self.known.remove(&key);
                vec![key]
            }
        }
    }
}

/// Calls `gone` for every object that leaves the watch whose events pass through the returned
/// closure (for `StreamExt::inspect`).
pub(crate) fn on_vanished<K: Resource, E>(
    gone: impl Fn(&str, &str) + Send + 'static,
) -> impl FnMut(&Result<watcher::Event<K>, E>) + Send + 'static {
    let mut vanished = Vanished::default();
    move |event| {
        if let Ok(event) = event {
            for (namespace, name) in vanished.see(event) {
                gone(&namespace, &name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CDTarget;

    fn target(namespace: &str, name: &str) -> CDTarget {
        CDTarget::test().with_name(name).in_namespace(namespace)
    }

    #[test]
    fn deleted_objects_and_those_missing_from_a_re_list_are_gone() {
        let mut vanished = Vanished::default();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(target("a", "one")),
            watcher::Event::InitApply(target("a", "two")),
            watcher::Event::InitDone,
            watcher::Event::Apply(target("b", "three")),
        ] {
            assert!(vanished.see(&event).is_empty());
        }
        assert_eq!(vanished.see(&watcher::Event::Delete(target("a", "one"))), vec![("a".into(), "one".into())]);
        // The watch broke; `a/two` was deleted meanwhile, `b/three` is still there.
        assert!(vanished.see::<CDTarget>(&watcher::Event::Init).is_empty());
        assert!(vanished.see(&watcher::Event::InitApply(target("b", "three"))).is_empty());
        assert_eq!(vanished.see::<CDTarget>(&watcher::Event::InitDone), vec![("a".into(), "two".into())]);
        assert_eq!(vanished.see(&watcher::Event::Delete(target("b", "three"))), vec![("b".into(), "three".into())]);
    }
}
