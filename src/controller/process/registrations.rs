//! The one watch of the registrations: reflected into one store, and handed to every consumer
//! that subscribes (the webhook receiver's index for the life of the process, the
//! TenantRepository controller while this replica leads). A late subscriber starts with the
//! registrations as they stand, as an initial list, so it never misses one. An observer
//! ([`Registrations::observe`]) is told each event in step with the store, before any subscriber.

use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::watcher;
use tracing::warn;

use super::watches::Events;
use crate::api::TenantRepository;

/// The registrations as one watch sees them.
#[derive(Clone)]
pub struct Registrations {
    store: Store<TenantRepository>,
    hub: Arc<Mutex<Hub>>,
}

/// Told an event of the registrations watch; returns `false` once it wants no more.
pub(crate) type Observer = Box<dyn FnMut(&watcher::Event<TenantRepository>) -> bool + Send>;

struct Hub {
    writer: Writer<TenantRepository>,
    subscribers: Vec<mpsc::UnboundedSender<watcher::Event<TenantRepository>>>,
    observers: Vec<Observer>,
    /// The registrations of a list under way (`Init` seen, `InitDone` not yet).
    listing: Option<Vec<TenantRepository>>,
    /// An initial list has completed: the store holds every registration.
    listed: bool,
}

impl Registrations {
    /// Reflects `events` into one store. `gone` is told of every registration deleted (its
    /// metric series are dropped). The returned future drives the watch; it ends with `events`.
    pub fn new(
        events: Events<TenantRepository>,
        gone: impl Fn(&TenantRepository) + Send + 'static,
    ) -> (Registrations, impl Future<Output = ()> + Send + 'static) {
        let writer = Writer::default();
        let store = writer.as_reader();
        let hub = Arc::new(Mutex::new(Hub {
            writer,
            subscribers: Vec::new(),
            observers: Vec::new(),
            listing: None,
            listed: false,
        }));
        let driver = {
            let hub = hub.clone();
            events.for_each(move |event| {
                match event {
                    // Nothing reconciles managedFields; dropping them halves the cache.
                    Ok(event) => hub
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .apply(event.modify(|repo| repo.managed_fields_mut().clear()), &gone),
                    Err(error) => warn!(%error, "watching the TenantRepositories"),
                }
                futures::future::ready(())
            })
        };
        (Registrations { store, hub }, driver)
    }

    /// The store every consumer reads.
    pub fn store(&self) -> Store<TenantRepository> {
        self.store.clone()
    }

    /// Tells `observer` every event from now on, synchronously: once the store holds it and
    /// before any subscriber sees it, so what the observer keeps is never behind a subscriber
    /// (nor a reconcile the event starts). It runs under the watch's lock: it must be quick and
    /// must not call back into [`Registrations`]. It is dropped once it returns `false`.
    pub fn observe(&self, observer: impl FnMut(&watcher::Event<TenantRepository>) -> bool + Send + 'static) {
        self.hub.lock().unwrap_or_else(PoisonError::into_inner).observers.push(Box::new(observer));
    }

    /// The events from now on, beginning with the registrations as they stand (or as listed so
    /// far, when a list is under way).
    pub fn subscribe(&self) -> impl Stream<Item = watcher::Event<TenantRepository>> + Send + 'static {
        let (sender, receiver) = mpsc::unbounded();
        let mut hub = self.hub.lock().unwrap_or_else(PoisonError::into_inner);
        let replay: Vec<watcher::Event<TenantRepository>> = match (&hub.listing, hub.listed) {
            (Some(so_far), _) => std::iter::once(watcher::Event::Init)
                .chain(so_far.iter().cloned().map(watcher::Event::InitApply))
                .collect(),
            (None, true) => std::iter::once(watcher::Event::Init)
                .chain(self.store.state().iter().map(|repo| watcher::Event::InitApply(repo.as_ref().clone())))
                .chain(std::iter::once(watcher::Event::InitDone))
                .collect(),
            (None, false) => Vec::new(),
        };
        for event in replay {
            let _ = sender.unbounded_send(event);
        }
        hub.subscribers.push(sender);
        receiver
    }
}

impl Hub {
    fn apply(&mut self, event: watcher::Event<TenantRepository>, gone: &impl Fn(&TenantRepository)) {
        self.writer.apply_watcher_event(&event);
        match &event {
            watcher::Event::Init => self.listing = Some(Vec::new()),
            watcher::Event::InitApply(repo) => self.listing.get_or_insert_with(Vec::new).push(repo.clone()),
            watcher::Event::InitDone => {
                self.listing = None;
                self.listed = true;
            }
            watcher::Event::Delete(repo) => gone(repo),
            watcher::Event::Apply(_) => {}
        }
        self.observers.retain_mut(|observe| observe(&event));
        // A consumer that stopped no longer needs anything.
        self.subscribers.retain(|sender| sender.unbounded_send(event.clone()).is_ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(name: &str) -> TenantRepository {
        TenantRepository::test().with_name(name)
    }

    fn names(events: &[watcher::Event<TenantRepository>]) -> Vec<String> {
        events
            .iter()
            .map(|event| match event {
                watcher::Event::Init => "Init".to_owned(),
                watcher::Event::InitApply(r) => format!("InitApply {}", r.name_any()),
                watcher::Event::InitDone => "InitDone".to_owned(),
                watcher::Event::Apply(r) => format!("Apply {}", r.name_any()),
                watcher::Event::Delete(r) => format!("Delete {}", r.name_any()),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_late_subscriber_starts_with_the_registrations_as_they_stand_and_one_watch_serves_all() {
        let (events, watch) = mpsc::unbounded();
        let deleted = Arc::new(Mutex::new(Vec::new()));
        let (registrations, driver) = Registrations::new(watch.map(Ok).boxed(), {
            let deleted = deleted.clone();
            move |repo: &TenantRepository| deleted.lock().unwrap().push(repo.name_any())
        });
        let driver = tokio::spawn(driver);
        let early = registrations.subscribe();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(repo("a")),
            watcher::Event::InitApply(repo("b")),
            watcher::Event::InitDone,
            watcher::Event::Delete(repo("a")),
        ] {
            events.unbounded_send(event).unwrap();
        }
        // Wait until the watch saw the deletion.
        while deleted.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let late = registrations.subscribe();
        events.unbounded_send(watcher::Event::Apply(repo("c"))).unwrap();
        drop(events);
        driver.await.unwrap();
        // The hub keeps its subscribers' channels open while it lives: take what was sent.
        let early: Vec<_> = early.take(6).collect().await;
        let late: Vec<_> = late.take(4).collect().await;
        assert_eq!(names(&early), ["Init", "InitApply a", "InitApply b", "InitDone", "Delete a", "Apply c"]);
        assert_eq!(names(&late), ["Init", "InitApply b", "InitDone", "Apply c"]);
        assert_eq!(*deleted.lock().unwrap(), ["a"]);
        let mut stored: Vec<String> = registrations.store().state().iter().map(|r| r.name_any()).collect();
        stored.sort();
        assert_eq!(stored, ["b", "c"]);
    }

    #[tokio::test]
    async fn an_observer_is_told_each_event_before_any_subscriber_and_dropped_when_done() {
        let (events, watch) = mpsc::unbounded();
        let (registrations, driver) = Registrations::new(watch.map(Ok).boxed(), |_| {});
        let driver = tokio::spawn(driver);
        let told = Arc::new(Mutex::new(Vec::new()));
        let stays = told.clone();
        registrations.observe(move |event| {
            stays.lock().unwrap().push(names(std::slice::from_ref(event)).remove(0));
            true
        });
        let once = told.clone();
        registrations.observe(move |event| {
            once.lock().unwrap().push(format!("once: {}", names(std::slice::from_ref(event))[0]));
            false
        });
        let mut subscriber = registrations.subscribe();
        for name in ["a", "b"] {
            events.unbounded_send(watcher::Event::Apply(repo(name))).unwrap();
            // By the time a subscriber sees the event, every observer was told.
            assert_eq!(names(&[subscriber.next().await.unwrap()]), [format!("Apply {name}")]);
            assert!(told.lock().unwrap().contains(&format!("Apply {name}")), "{told:?}");
        }
        drop(events);
        driver.await.unwrap();
        assert_eq!(*told.lock().unwrap(), ["Apply a", "once: Apply a", "Apply b"]);
    }
}
