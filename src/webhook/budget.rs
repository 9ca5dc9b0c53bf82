//! The budget of bodies in flight: bytes that requests being read may hold at once, one budget
//! for the whole receiver and one per registration. A read holds its share from before its first
//! byte until its request is answered; a request that finds the budget spent is answered at once,
//! without reading its body, so slow senders cannot pile up memory.
//!
//! Never waits: a full budget is a refusal, not a queue (a queue would hold the connection, which
//! is what a slow sender wants).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes held by bodies in flight, against a cap given at each reservation.
#[derive(Debug, Default)]
pub struct InFlight {
    bytes: AtomicUsize,
}

impl InFlight {
    /// Holds `bytes` if that keeps the total at most `cap`; the bytes are given back when the
    /// returned [`Held`] is dropped. An empty body holds no memory and always fits.
    pub fn try_hold(self: &Arc<Self>, bytes: usize, cap: usize) -> Option<Held> {
        if bytes == 0 {
            return Some(Held { of: self.clone(), bytes });
        }
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= cap)
            })
            .ok()?;
        Some(Held { of: self.clone(), bytes })
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }
}

/// Bytes held in an [`InFlight`] budget until dropped.
#[derive(Debug)]
pub struct Held {
    of: Arc<InFlight>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.of.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_up_to_the_cap_and_gives_back_on_drop() {
        let budget = Arc::new(InFlight::default());
        let first = budget.try_hold(600, 1000).expect("room");
        assert!(budget.try_hold(401, 1000).is_none(), "past the cap");
        let second = budget.try_hold(400, 1000).expect("exactly the cap");
        assert_eq!(budget.bytes(), 1000);
        assert!(budget.try_hold(1, 1000).is_none());
        drop(first);
        assert_eq!(budget.bytes(), 400);
        assert!(budget.try_hold(600, 1000).is_some(), "given back; and dropped at once");
        drop(second);
        assert_eq!(budget.bytes(), 0);
    }

    #[test]
    fn a_reservation_larger_than_the_cap_never_fits_and_overflow_is_refused() {
        let budget = Arc::new(InFlight::default());
        assert!(budget.try_hold(1001, 1000).is_none());
        let _most = budget.try_hold(usize::MAX - 1, usize::MAX).unwrap();
        assert!(budget.try_hold(2, usize::MAX).is_none(), "no wrap-around");
        assert!(budget.try_hold(0, 0).is_some(), "an empty body always fits, even a full budget");
    }
}
