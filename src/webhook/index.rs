//! Which registration a `/hook/<digest>` path belongs to: the [`Index`], kept in step with the
//! TenantRepositories and their webhook Secrets (by [`super::keeper`]), read by every request.
//!
//! A [`Registration`] is built by a pure function ([`Registration::from_parts`]) from the
//! TenantRepository and its webhook Secret's data. The digest is the one in
//! `status.webhookPath`: `sha256(token + name + namespace)`.
//!
//! Lookups do not compare the secret path with `==`: the map is keyed by the digest's first 8
//! bytes (a probe's timing can only tell whether some 64-bit prefix exists, which takes 2⁶⁴
//! guesses to exploit), and the candidate's full 32 bytes are compared in constant time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use k8s_openapi::ByteString;
use kube::ResourceExt;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::watch;

use super::budget::InFlight;
use super::filter::{Tracked, effective_events};
use super::rate::{Bucket, Rate};
use super::verify::{Secrets, SigningKey, parse_signing_secret};
use crate::api::TenantRepository;
use crate::api::tenant_repository::{WebhookType, webhook_token};

/// Key of the webhook Secret holding the path token (also GitLab's `X-Gitlab-Token` and the
/// HMAC key of `github` and `generic-hmac`).
pub(crate) const TOKEN_KEY: &str = "token";
/// Key of the webhook Secret holding GitLab's Standard Webhooks signing token (`whsec_...`).
pub(crate) const SIGNING_TOKEN_KEY: &str = "signingToken";

/// Everything the receiver needs to know about one registration's webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// Namespace of the TenantRepository (the platform namespace).
    pub namespace: String,
    /// Name of the TenantRepository.
    pub name: String,
    /// How deliveries are verified.
    pub kind: WebhookType,
    /// The webhook Secret's values.
    pub secrets: Secrets,
    /// The events that trigger a sync (empty: every event).
    pub events: Vec<String>,
    /// The ref pushes are matched against.
    pub tracked: Tracked,
    /// `sha256(token + name + namespace)`: the path of `status.webhookPath`.
    pub digest: [u8; 32],
}

/// Why a registration is not served (logged by namespace/name, never with a value).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotServed {
    /// The webhook Secret does not exist.
    #[error("webhook Secret {0} does not exist")]
    SecretNotFound(String),
    /// The webhook Secret has no usable `token`.
    #[error("webhook Secret {0} has no non-empty UTF-8 `token`")]
    NoToken(String),
}

impl Registration {
    /// The registration of `repo` given its webhook Secret's data (`None`: the Secret does not
    /// exist). `Ok(None)` when `repo` has no `spec.webhook`. The token is taken exactly as the
    /// reconciler takes it for `status.webhookPath`, so the two always agree.
    pub fn from_parts(
        repo: &TenantRepository,
        secret: Option<&BTreeMap<String, ByteString>>,
    ) -> Result<Option<Registration>, NotServed> {
        let Some(webhook) = &repo.spec.webhook else { return Ok(None) };
        let namespace = repo.namespace().unwrap_or_default();
        let name = repo.name_any();
        let secret_name = format!("{namespace}/{}", webhook.secret_ref.name);
        let data = secret.ok_or_else(|| NotServed::SecretNotFound(secret_name.clone()))?;
        let token = data.get(TOKEN_KEY).and_then(|t| webhook_token(&t.0)).ok_or(NotServed::NoToken(secret_name))?;
        // Standard Webhooks signing exists for GitLab only; the key is ignored for other types.
        let signing_key = match (webhook.kind, data.get(SIGNING_TOKEN_KEY)) {
            (WebhookType::Gitlab, Some(value)) => Some(match std::str::from_utf8(&value.0) {
                Ok(text) => parse_signing_secret(text).map_or_else(SigningKey::Unusable, SigningKey::Key),
                Err(_) => SigningKey::Unusable("is not UTF-8".into()),
            }),
            _ => None,
        };
        Ok(Some(Registration {
            digest: digest(token, &name, &namespace),
            kind: webhook.kind,
            secrets: Secrets::new(token.as_bytes(), signing_key),
            events: effective_events(webhook.kind, &webhook.events),
            tracked: Tracked::of(&repo.spec),
            namespace,
            name,
        }))
    }

    /// `namespace/name`: how the registration appears in logs.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// What an admin should fix although the registration is served (logged when indexed).
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(SigningKey::Unusable(reason)) = &self.secrets.signing_key {
            warnings.push(format!("`{SIGNING_TOKEN_KEY}` {reason}: every delivery is refused until it is fixed"));
        }
        if self.kind == WebhookType::Gitlab && self.secrets.token.iter().any(|b| matches!(b, b'\r' | b'\n')) {
            warnings.push(format!(
                "`{TOKEN_KEY}` contains a line break, which GitLab removes from X-Gitlab-Token: no delivery can match"
            ));
        }
        warnings
    }
}

/// `sha256(token + name + namespace)`, as [`crate::api::tenant_repository::webhook_path`].
pub fn digest(token: &str, name: &str, namespace: &str) -> [u8; 32] {
    Sha256::new().chain_update(token).chain_update(name).chain_update(namespace).finalize().into()
}

/// A registration in the index, with its own budgets: the bucket of verified deliveries, the
/// bucket of body reads, and the bytes of its bodies in flight.
#[derive(Debug)]
pub struct Slot {
    /// The registration.
    pub registration: Registration,
    bucket: Mutex<Option<Bucket>>,
    reads: Mutex<Option<Bucket>>,
    in_flight: Arc<InFlight>,
}

impl Slot {
    fn new(registration: Registration) -> Self {
        Slot { registration, bucket: Mutex::default(), reads: Mutex::default(), in_flight: Arc::default() }
    }

    /// Takes one token of this registration's bucket of verified deliveries (created full on
    /// first use).
    pub fn take(&self, rate: Rate, now: Instant) -> Result<(), std::time::Duration> {
        take(&self.bucket, rate, now)
    }

    /// Takes one token of this registration's bucket of body reads (created full on first use):
    /// every request that passed the header checks pays one, verified or not.
    pub fn take_read(&self, rate: Rate, now: Instant) -> Result<(), std::time::Duration> {
        take(&self.reads, rate, now)
    }

    /// This registration's bodies in flight.
    pub fn in_flight(&self) -> &Arc<InFlight> {
        &self.in_flight
    }
}

fn take(bucket: &Mutex<Option<Bucket>>, rate: Rate, now: Instant) -> Result<(), std::time::Duration> {
    let mut bucket = bucket.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    bucket.get_or_insert_with(|| Bucket::new(rate, now)).take(now)
}

#[derive(Debug, Default)]
struct Inner {
    /// First 8 bytes of the digest → the slots with that prefix.
    by_prefix: HashMap<u64, Vec<Arc<Slot>>>,
    /// `(namespace, name)` → its slot.
    by_name: HashMap<(String, String), Arc<Slot>>,
}

/// The registrations served, by digest. Thread-safe; updated one registration at a time.
#[derive(Debug)]
pub struct Index {
    inner: RwLock<Inner>,
    /// Bumped on every change, so that tests and callers can await an update.
    generation: watch::Sender<u64>,
}

impl Default for Index {
    fn default() -> Self {
        Index { inner: RwLock::default(), generation: watch::Sender::new(0) }
    }
}

fn prefix(digest: &[u8; 32]) -> u64 {
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

impl Index {
    /// Adds or replaces the registration `namespace/name`. An unchanged registration keeps its
    /// slot (and its budgets). Returns whether anything changed.
    pub fn upsert(&self, registration: Registration) -> bool {
        let key = (registration.namespace.clone(), registration.name.clone());
        {
            let mut inner = self.write();
            if inner.by_name.get(&key).is_some_and(|slot| slot.registration == registration) {
                return false;
            }
            if let Some(old) = inner.by_name.remove(&key) {
                inner.remove_slot(&old);
            }
            let slot = Arc::new(Slot::new(registration));
            inner.by_prefix.entry(prefix(&slot.registration.digest)).or_default().push(slot.clone());
            inner.by_name.insert(key, slot);
        }
        self.generation.send_modify(|g| *g += 1);
        true
    }

    /// Drops the registration `namespace/name`; returns whether it was there.
    pub fn remove(&self, namespace: &str, name: &str) -> bool {
        let removed = {
            let mut inner = self.write();
            let removed = inner.by_name.remove(&(namespace.to_owned(), name.to_owned()));
            if let Some(old) = &removed {
                inner.remove_slot(old);
            }
            removed.is_some()
        };
        if removed {
            self.generation.send_modify(|g| *g += 1);
        }
        removed
    }

    /// Drops every registration for which `keep(namespace, name)` is false (after a relist).
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        let gone: Vec<(String, String)> =
            self.read().by_name.keys().filter(|(ns, name)| !keep(ns, name)).cloned().collect();
        for (namespace, name) in gone {
            self.remove(&namespace, &name);
        }
    }

    /// The registration whose digest is `hex_digest` (64 hex characters), compared in constant
    /// time.
    pub fn lookup(&self, hex_digest: &str) -> Option<Arc<Slot>> {
        let mut wanted = [0u8; 32];
        hex::decode_to_slice(hex_digest, &mut wanted).ok()?;
        let inner = self.read();
        let candidates = inner.by_prefix.get(&prefix(&wanted))?;
        candidates.iter().find(|slot| bool::from(slot.registration.digest.ct_eq(&wanted))).cloned()
    }

    /// The registration `namespace/name`, if served.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Slot>> {
        self.read().by_name.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// How many registrations are served.
    pub fn len(&self) -> usize {
        self.read().by_name.len()
    }

    /// Whether no registration is served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A receiver that changes whenever the index does.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent maps (every update is one insert or
        // remove), so a poisoned lock is still usable.
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Inner {
    fn remove_slot(&mut self, slot: &Arc<Slot>) {
        let key = prefix(&slot.registration.digest);
        if let Some(slots) = self.by_prefix.get_mut(&key) {
            slots.retain(|s| !Arc::ptr_eq(s, slot));
            if slots.is_empty() {
                self.by_prefix.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tenant_repository::webhook_path;
    use crate::fixtures::secret_data as data;

    fn repo(name: &str, kind: WebhookType) -> TenantRepository {
        TenantRepository::test().with_name(name).in_namespace("platform").with_webhook(kind, "hook")
    }

    fn registration(name: &str, token: &str) -> Registration {
        Registration::from_parts(&repo(name, WebhookType::Gitlab), Some(&data(&[("token", token)]))).unwrap().unwrap()
    }

    #[test]
    fn the_digest_is_the_one_in_status_webhook_path() {
        let registration = registration("team-a", "s3cret");
        assert_eq!(format!("/hook/{}", hex::encode(registration.digest)), webhook_path("s3cret", "team-a", "platform"));
        assert_eq!(registration.id(), "platform/team-a");
        assert_eq!(registration.events, ["Push Hook", "Tag Push Hook"]);
        assert_eq!(registration.tracked, Tracked::Branch("main".into()));
    }

    #[test]
    fn registrations_without_webhook_token_or_secret_are_not_served() {
        let mut plain = repo("a", WebhookType::Gitlab);
        plain.spec.webhook = None;
        assert_eq!(Registration::from_parts(&plain, None), Ok(None));
        let repo = repo("a", WebhookType::Gitlab);
        assert_eq!(Registration::from_parts(&repo, None), Err(NotServed::SecretNotFound("platform/hook".into())));
        let empty = data(&[("token", "")]);
        assert_eq!(Registration::from_parts(&repo, Some(&empty)), Err(NotServed::NoToken("platform/hook".into())));
    }

    #[test]
    fn signing_tokens_are_read_for_gitlab_and_an_unusable_one_is_reported() {
        let key = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let gitlab = Registration::from_parts(
            &repo("a", WebhookType::Gitlab),
            Some(&data(&[("token", "t"), ("signingToken", key)])),
        )
        .unwrap()
        .unwrap();
        assert_eq!(gitlab.secrets.signing_key, Some(SigningKey::Key((0u8..32).collect())));
        assert!(gitlab.warnings().is_empty());
        let bad = Registration::from_parts(
            &repo("a", WebhookType::Gitlab),
            Some(&data(&[("token", "t\nu"), ("signingToken", "secret-not-base64!")])),
        )
        .unwrap()
        .unwrap();
        let warnings = bad.warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings.iter().all(|w| !w.contains("secret-not-base64")), "{warnings:?}");
        let github = Registration::from_parts(
            &repo("a", WebhookType::Github),
            Some(&data(&[("token", "t"), ("signingToken", key)])),
        )
        .unwrap()
        .unwrap();
        assert_eq!(github.secrets.signing_key, None);
        assert_eq!(github.events, ["push"]);
    }

    #[test]
    fn lookups_find_by_hex_digest_and_follow_updates_and_removals() {
        let index = Index::default();
        let mut changes = index.subscribe();
        let first = registration("a", "one");
        let hex_first = hex::encode(first.digest);
        assert!(index.upsert(first.clone()));
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert!(!index.upsert(first.clone()), "an unchanged registration is no change");
        assert!(!changes.has_changed().unwrap());
        assert_eq!(index.lookup(&hex_first).unwrap().registration.name, "a");
        assert!(index.lookup(&hex_first.to_uppercase()).is_some(), "hex is case-insensitive");
        assert!(index.lookup("not hex").is_none());
        assert!(index.lookup(&hex_first[..62]).is_none());
        // A new token moves the registration to a new path; the old one is gone.
        let second = registration("a", "two");
        index.upsert(second.clone());
        assert!(index.lookup(&hex_first).is_none());
        assert!(index.lookup(&hex::encode(second.digest)).is_some());
        assert_eq!(index.len(), 1);
        index.upsert(registration("b", "three"));
        index.retain(|_, name| name == "b");
        assert_eq!(index.len(), 1);
        assert!(index.remove("platform", "b"));
        assert!(!index.remove("platform", "b"));
        assert!(index.is_empty());
    }

    #[test]
    fn two_digests_sharing_a_prefix_are_told_apart() {
        let index = Index::default();
        let mut a = registration("a", "one");
        let mut b = registration("b", "two");
        a.digest = [7; 32];
        b.digest = [7; 32];
        b.digest[31] = 8;
        index.upsert(a);
        index.upsert(b);
        assert_eq!(index.lookup(&hex::encode([7u8; 32])).unwrap().registration.name, "a");
        let mut other = [7u8; 32];
        other[31] = 8;
        assert_eq!(index.lookup(&hex::encode(other)).unwrap().registration.name, "b");
        other[31] = 9;
        assert!(index.lookup(&hex::encode(other)).is_none());
        index.remove("platform", "a");
        assert_eq!(index.lookup(&hex::encode([8u8; 32])).map(|s| s.registration.name.clone()), None);
    }
}
