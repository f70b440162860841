//! The one place the lock-free code gets its atomics from.
//!
//! Under `--cfg loom` every atomic, the mutex and `yield_now` come from `loom`, so the model
//! checker sees (and permutes) every access of the free list, the bump index and the grow flag.
//! Otherwise they are the `std` types, at no cost.
//!
//! The other crates' lock-free code (the SW ROD's shared state, the ROS store's page table, the
//! queues of [`crate::queue`]) takes its atomics, `Arc` and [`UnsafeCell`] from here too, so one
//! `RUSTFLAGS="--cfg loom"` build model-checks all of it (scripts/test-all runs the checks).

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub use loom::sync::{Arc, Mutex};

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub use std::sync::{Arc, Mutex};

/// A cell written through a raw pointer under a rule of its own, that loom can check: under
/// `--cfg loom` every access is recorded and two unordered accesses (a data race) fail the
/// model; otherwise it is `std::cell::UnsafeCell`, at no cost.
#[derive(Debug)]
pub struct UnsafeCell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> UnsafeCell<T> {
        #[cfg(loom)]
        return UnsafeCell(loom::cell::UnsafeCell::new(value));
        #[cfg(not(loom))]
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a mutable pointer to the value (the caller's rules make it exclusive).
    #[inline]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        f(self.0.get())
    }
}

/// Marks accesses to memory that loom cannot see (raw pointers into pages): under
/// `--cfg loom` each [`write`](AccessMark::write) and [`read`](AccessMark::read) is recorded as
/// an access to a loom cell, so a read not ordered after the last write (or two unordered
/// writes) fails the model; otherwise a zero-sized no-op.
#[derive(Debug, Default)]
pub struct AccessMark(#[cfg(loom)] loom::cell::UnsafeCell<()>);

impl AccessMark {
    /// A mark with no access yet.
    pub fn new() -> AccessMark {
        AccessMark(
            #[cfg(loom)]
            loom::cell::UnsafeCell::new(()),
        )
    }

    /// Records a write of the marked memory.
    #[inline(always)]
    pub fn write(&self) {
        #[cfg(loom)]
        self.0.with_mut(|_| ());
    }

    /// Records a read of the marked memory.
    #[inline(always)]
    pub fn read(&self) {
        #[cfg(loom)]
        self.0.with(|_| ());
    }
}

/// Lets another thread run while this one waits for a region to be mapped.
pub fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Locks `m`, ignoring poisoning: the data behind our mutexes (region owners, the warm-up
/// report) stays consistent even if a holder panicked.
pub fn lock<T>(m: &Mutex<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Keeps a hot atomic on its own cache line(s) so that unrelated counters do not bounce it.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
