//! Token buckets for the receiver's rate limits: one global bucket in front of everything, and
//! one per registration for verified deliveries. Hand-written (a few lines) rather than a crate:
//! the receiver needs two kinds of bucket, a deterministic clock for its tests, and a
//! `Retry-After` value.

use std::time::{Duration, Instant};

/// A sustained rate and the burst allowed on top of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Requests added to the bucket per second.
    pub per_second: f64,
    /// Largest number of requests the bucket holds (at least 1).
    pub burst: f64,
}

impl Rate {
    /// `per_second` with a burst of `burst`.
    pub fn new(per_second: f64, burst: u32) -> Self {
        Rate { per_second: per_second.max(0.0), burst: f64::from(burst.max(1)) }
    }
}

/// One token bucket; starts full.
#[derive(Clone, Debug)]
pub(crate) struct Bucket {
    rate: Rate,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket for `rate` at `now`.
    pub fn new(rate: Rate, now: Instant) -> Self {
        Bucket { rate, tokens: rate.burst, last: now }
    }

    /// Takes one token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate.per_second).min(self.rate.burst);
        self.last = now.max(self.last);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let missing = 1.0 - self.tokens;
        if self.rate.per_second <= 0.0 {
            return Err(Duration::from_secs(3600));
        }
        Err(Duration::from_secs_f64(missing / self.rate.per_second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(Rate::new(2.0, 3), start);
        for _ in 0..3 {
            assert_eq!(bucket.take(start), Ok(()));
        }
        let wait = bucket.take(start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert_eq!(bucket.take(start + Duration::from_millis(500)), Ok(()));
        assert!(bucket.take(start + Duration::from_millis(500)).is_err());
        // Idle time refills up to the burst, not beyond.
        let later = start + Duration::from_secs(100);
        for _ in 0..3 {
            assert_eq!(bucket.take(later), Ok(()));
        }
        assert!(bucket.take(later).is_err());
    }

    #[test]
    fn a_clock_going_backwards_adds_nothing() {
        let start = Instant::now() + Duration::from_secs(10);
        let mut bucket = Bucket::new(Rate::new(1.0, 1), start);
        assert_eq!(bucket.take(start), Ok(()));
        assert!(bucket.take(start - Duration::from_secs(5)).is_err());
    }
}
