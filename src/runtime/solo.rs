//! A mutex that costs no locked instruction when one thread at a time is inside the
//! library.
//!
//! Below `MPI_THREAD_MULTIPLE` (and without a progress thread) the program promises
//! that no two threads call the library at once; whatever orders their calls (the
//! program's own locks, thread joins) also orders their memory. A lock then only has
//! to keep one thread from reaching the same state twice through reentry, and a plain
//! flag does that. A locked instruction costs several nanoseconds on this machine and
//! more right after a store to a line another core reads (it waits for the store to
//! leave), which is how a small message's calls run: an rpipe message took five pairs
//! of them on each side.
//!
//! Guarantees: with `concurrent`, a [`SoloMutex`] is a `parking_lot` mutex. Without,
//! it hands out one guard at a time to the (serialised) threads; a second lock while
//! a guard lives, which only reentry on one thread can cause, panics with a message
//! (the C boundary turns it into an error) instead of handing out a second `&mut`.
//! Which mode a mutex runs in is fixed at its creation.

use parking_lot::lock_api::RawMutex as _;
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

pub struct SoloMutex<T> {
    /// Threads may race: lock `raw`. Otherwise `busy` marks a live guard.
    concurrent: bool,
    raw: parking_lot::RawMutex,
    /// Invariant: true exactly while a guard of the solo mode lives.
    busy: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: access to `data` goes through a guard, which exists once at a time: under
// `raw` when threads may race, and under the caller's promise of one thread at a
// time plus `busy` otherwise.
unsafe impl<T: Send> Sync for SoloMutex<T> {}

pub struct SoloGuard<'a, T> {
    m: &'a SoloMutex<T>,
}

impl<T> SoloMutex<T> {
    /// `concurrent`: several threads may call `lock` at once.
    pub const fn new(data: T, concurrent: bool) -> SoloMutex<T> {
        SoloMutex {
            concurrent,
            raw: parking_lot::RawMutex::INIT,
            busy: AtomicBool::new(false),
            data: UnsafeCell::new(data),
        }
    }

    #[inline]
    pub fn lock(&self) -> SoloGuard<'_, T> {
        if self.concurrent {
            self.raw.lock();
        } else if !self.take_solo() {
            reentered();
        }
        SoloGuard { m: self }
    }

    /// The lock if nobody holds it (in the solo mode: unless this thread does).
    #[inline]
    pub fn try_lock(&self) -> Option<SoloGuard<'_, T>> {
        let got = if self.concurrent {
            self.raw.try_lock()
        } else {
            self.take_solo()
        };
        // `then`, not `then_some`: a guard built and dropped on failure would unlock.
        got.then(|| SoloGuard { m: self })
    }

    /// Solo mode: mark the mutex busy unless it is (then only this thread can hold
    /// it). Relaxed: another thread's guard ended before this call started, ordered
    /// by the program (its promise); only this thread's own reentry is left.
    #[inline]
    fn take_solo(&self) -> bool {
        if self.busy.load(Ordering::Relaxed) {
            return false;
        }
        self.busy.store(true, Ordering::Relaxed);
        true
    }
}

#[cold]
#[inline(never)]
fn reentered() -> ! {
    panic!("internal error: a library lock was taken again by the thread that holds it")
}

impl<T> Drop for SoloGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.m.concurrent {
            // SAFETY: this guard's `lock` locked `raw` (concurrent mode), and a guard
            // unlocks once.
            unsafe { self.m.raw.unlock() };
        } else {
            debug_assert!(self.m.busy.load(Ordering::Relaxed));
            self.m.busy.store(false, Ordering::Release);
        }
    }
}

impl<T> Deref for SoloGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one alive (module guarantee).
        unsafe { &*self.m.data.get() }
    }
}

impl<T> DerefMut for SoloGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` keeps this the only reference.
        unsafe { &mut *self.m.data.get() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn solo_mode_hands_out_one_guard_and_catches_reentry() {
        let m = SoloMutex::new(5, false);
        {
            let mut g = m.lock();
            *g += 1;
            let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = m.lock();
            }));
            assert!(again.is_err(), "a second guard must not be handed out");
        }
        // The first guard ended: the lock is free again.
        assert_eq!(*m.lock(), 6);
        let g = m.try_lock().expect("free");
        assert!(m.try_lock().is_none(), "held by this thread");
        assert!(m.try_lock().is_none(), "a failed try_lock left it held");
        drop(g);
        assert!(m.try_lock().is_some());
    }

    #[test]
    fn concurrent_mode_excludes_threads() {
        let m = Arc::new(SoloMutex::new(0u64, true));
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let mut g = m.lock();
                        // A torn read-modify-write would lose increments.
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(*m.lock(), 40_000);
        let g = m.try_lock().expect("free");
        let other = {
            let m = m.clone();
            std::thread::spawn(move || m.try_lock().is_none())
        };
        assert!(other.join().unwrap(), "held by another thread");
        assert!(m.try_lock().is_none(), "a failed try_lock left it held");
        drop(g);
    }

    #[test]
    fn serialised_threads_see_each_others_writes() {
        // One thread at a time (joined in turn), as MPI_THREAD_SERIALIZED promises.
        let m = Arc::new(SoloMutex::new(Vec::new(), false));
        for i in 0..8 {
            let m = m.clone();
            std::thread::spawn(move || m.lock().push(i)).join().unwrap();
        }
        assert_eq!(*m.lock(), (0..8).collect::<Vec<_>>());
    }
}
