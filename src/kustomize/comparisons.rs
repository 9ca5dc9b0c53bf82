//! A count of the comparisons and lookups the indexed paths make (merging keyed lists, resolving
//! name references, generator merges, `replicas`, `images`, labels), so that tests can prove the
//! work a tenant's input causes stays linear without ever timing it.
//!
//! The count is kept per thread, in test builds only; elsewhere [`note`] compiles to nothing.

#[cfg(test)]
use std::cell::Cell;

#[cfg(test)]
thread_local! {
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

/// Notes `n` comparisons or lookups made.
#[inline]
pub(crate) fn note(n: usize) {
    #[cfg(test)]
    COUNT.with(|count| count.set(count.get().saturating_add(n)));
    #[cfg(not(test))]
    let _ = n;
}

/// Runs `work` and says how many comparisons and lookups it noted (on this thread).
#[cfg(test)]
pub(crate) fn counted<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let before = COUNT.with(Cell::get);
    let result = work();
    (result, COUNT.with(Cell::get) - before)
}

/// A value whose every comparison and hash is noted: the keys of the indexes and sets, so that
/// a lookup costs what it costs, and a scan of a list of them would show as one per element.
#[derive(Clone, Debug, PartialOrd, Ord)]
pub(crate) struct Counted<T>(pub T);

impl<T: PartialEq> PartialEq for Counted<T> {
    fn eq(&self, other: &Self) -> bool {
        note(1);
        self.0 == other.0
    }
}

impl<T: Eq> Eq for Counted<T> {}

impl<T: std::hash::Hash> std::hash::Hash for Counted<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        note(1);
        self.0.hash(state);
    }
}
