//! Duplicate deliveries: a bounded memory of the delivery ids already accepted.
//!
//! GitLab's `Idempotency-Key` stays the same across retries and a manual "Resend"; the Standard
//! Webhooks `webhook-id` equals it and is covered by the signature. A key is remembered per
//! registration for a time-to-live, and at most `capacity` keys are held: the oldest goes
//! first. Keys are stored as 128-bit digests, so a long key costs no more memory than a short
//! one; only verified deliveries are remembered, so nobody without the secrets can fill it.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// How many keys are remembered by default (about 1 MiB).
pub(crate) const DEFAULT_CAPACITY: usize = 16 * 1024;
/// How long a key is remembered by default: longer than any retry, and a resend after a day
/// only costs one more (idempotent) sync.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

type Key = [u8; 16];

/// The remembered delivery ids, oldest first.
#[derive(Debug)]
pub struct Dedupe {
    capacity: usize,
    ttl: Duration,
    seen: HashMap<Key, Instant>,
    order: VecDeque<(Key, Instant)>,
}

impl Dedupe {
    /// A memory of at most `capacity` keys (at least 1), each kept for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let capacity = capacity.max(1);
        Dedupe { capacity, ttl, seen: HashMap::new(), order: VecDeque::new() }
    }

    /// Records `key` for `scope` (the registration) at `now`; true when it was not remembered,
    /// i.e. the delivery is not a duplicate.
    pub fn first_time(&mut self, scope: &str, key: &str, now: Instant) -> bool {
        self.expire(now);
        let key = digest(scope, key);
        if self.seen.contains_key(&key) {
            return false;
        }
        while self.seen.len() >= self.capacity {
            let Some((oldest, at)) = self.order.pop_front() else { break };
            self.forget(oldest, at);
        }
        self.seen.insert(key, now);
        self.order.push_back((key, now));
        true
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(key, at)) = self.order.front() {
            if now.saturating_duration_since(at) < self.ttl {
                break;
            }
            self.order.pop_front();
            self.forget(key, at);
        }
    }

    /// Drops `key` if the map still holds the entry made at `at`.
    fn forget(&mut self, key: Key, at: Instant) {
        if self.seen.get(&key) == Some(&at) {
            self.seen.remove(&key);
        }
    }
}

fn digest(scope: &str, key: &str) -> Key {
    // The separator keeps ("ab", "c") and ("a", "bc") apart.
    let full = Sha256::new().chain_update(scope).chain_update([0]).chain_update(key).finalize();
    let mut short = [0; 16];
    short.copy_from_slice(&full[..16]);
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_accepted_once_per_registration() {
        let mut dedupe = Dedupe::new(10, DEFAULT_TTL);
        let now = Instant::now();
        assert!(dedupe.first_time("ns/a", "key-1", now));
        assert!(!dedupe.first_time("ns/a", "key-1", now));
        assert!(dedupe.first_time("ns/b", "key-1", now), "another registration has its own keys");
        assert!(dedupe.first_time("ns/a", "key-2", now));
        assert!(dedupe.first_time("ns/", "akey-1", now), "scope and key do not run together");
    }

    #[test]
    fn keys_expire_after_the_ttl() {
        let mut dedupe = Dedupe::new(10, Duration::from_secs(60));
        let start = Instant::now();
        assert!(dedupe.first_time("r", "k", start));
        assert!(!dedupe.first_time("r", "k", start + Duration::from_secs(59)));
        assert!(dedupe.first_time("r", "k", start + Duration::from_secs(60)));
        assert_eq!(dedupe.len(), 1);
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_key_goes_first() {
        let mut dedupe = Dedupe::new(3, DEFAULT_TTL);
        let now = Instant::now();
        for key in ["a", "b", "c", "d"] {
            assert!(dedupe.first_time("r", key, now));
        }
        assert_eq!(dedupe.len(), 3);
        assert!(dedupe.first_time("r", "a", now), "the oldest was forgotten");
        assert!(!dedupe.first_time("r", "d", now), "the newest is remembered");
        for i in 0..10_000 {
            dedupe.first_time("r", &format!("k{i}"), now);
        }
        assert_eq!(dedupe.len(), 3);
        assert!(dedupe.order.len() <= 3);
    }
}
