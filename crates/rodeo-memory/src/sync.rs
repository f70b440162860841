//! The one place the lock-free code gets its atomics from.
//!
//! Under `--cfg loom` every atomic, the mutex and `yield_now` come from `loom`, so the model
//! checker sees (and permutes) every access of the free list, the bump index and the grow flag.
//! Otherwise they are the `std` types, at no cost.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Mutex;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;

/// Lets another thread run while this one waits for a region to be mapped.
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Locks `m`, ignoring poisoning: the data behind our mutexes (region owners, the warm-up
/// report) stays consistent even if a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Keeps a hot atomic on its own cache line(s) so that unrelated counters do not bounce it.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
