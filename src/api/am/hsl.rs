//! Handler-safe locks and no-interrupt sections (seed 002's core API, "atomicity
//! control"): how application code and its AM handlers share data when handlers run
//! inside the library's progress (any call that polls, `MPI_*` calls the library
//! serves, or the progress thread).
//!
//! Guarantees:
//! - a thread in a no-interrupt section (`fh_hold_interrupts` .. `fh_resume_interrupts`,
//!   nestable) or holding a handler-safe lock runs no *application* handler: a frame
//!   for one that its progress receives is kept, in arrival order, and run by the next
//!   progress of a thread outside such a section, or when this thread leaves its
//!   section. So a handler never blocks on an hsl held by the thread it interrupted.
//!   The library's own handlers (firehose moves, barriers, ...) still run, so blocking
//!   calls inside a section complete;
//! - an hsl is held by one thread at a time, is not recursive (taking one the thread
//!   already holds is `FH_ERR_STATE`, not a deadlock), and is released by the thread
//!   that took it (else `FH_ERR_STATE`);
//! - a handler that returns holding an hsl it took is an error: the library releases
//!   the lock (so the job does not deadlock) and reports `FH_ERR_STATE` as the
//!   context's asynchronous error (returned by the next `fh_poll` or sync).
//!
//! Invariants: `HOLDS` of a thread >= the number of hsls in its `HELD`; `HOLDING` is
//! the number of threads whose `HOLDS` > 0.

use crate::bail;
use crate::runtime::error::Result;
use parking_lot::lock_api::RawMutex as _;
use parking_lot::RawMutex;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

thread_local! {
    /// This thread's no-interrupt holds: open sections plus hsls held.
    static HOLDS: Cell<u32> = const { Cell::new(0) };
    /// The hsls this thread holds (addresses), in the order taken.
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// This thread's name for hsl ownership (never 0).
    static ME: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);
/// Threads with a hold, so that dispatch skips the thread-local lookup when none has.
static HOLDING: AtomicUsize = AtomicUsize::new(0);

/// Does any thread hold an hsl or a no-interrupt section? False: this one holds
/// nothing either, without a look at the thread-locals.
#[inline]
pub fn anyone_holds() -> bool {
    HOLDING.load(Ordering::Acquire) != 0
}

/// Is this thread in a no-interrupt section (or holding an hsl)?
#[inline]
pub fn interrupts_held() -> bool {
    HOLDING.load(Ordering::Acquire) != 0 && holds_here()
}

/// The thread-local half of [`interrupts_held`], out of line (as `in_handler`'s:
/// inlined, the thread-local's address is computed before the count's test).
#[inline(never)]
fn holds_here() -> bool {
    HOLDS.with(|h| h.get() > 0)
}

fn hold() {
    HOLDS.with(|h| {
        if h.get() == 0 {
            HOLDING.fetch_add(1, Ordering::AcqRel);
        }
        h.set(h.get() + 1);
    });
}

/// Drop one hold; true when this thread has none left.
fn unhold() -> bool {
    HOLDS.with(|h| {
        debug_assert!(h.get() > 0, "unbalanced no-interrupt hold");
        h.set(h.get() - 1);
        if h.get() == 0 {
            HOLDING.fetch_sub(1, Ordering::AcqRel);
            return true;
        }
        false
    })
}

/// `fh_hold_interrupts`.
pub fn hold_interrupts() {
    hold();
}

/// `fh_resume_interrupts`: true when the thread left its last section.
pub fn resume_interrupts() -> Result<bool> {
    let explicit = HOLDS.with(|h| h.get()) as usize - HELD.with(|l| l.borrow().len());
    if explicit == 0 {
        bail!(
            State,
            "fh_resume_interrupts without a matching fh_hold_interrupts on this thread"
        );
    }
    Ok(unhold())
}

/// A handler-safe lock.
pub struct Hsl {
    raw: RawMutex,
    /// The holding thread's `ME`, 0 when free.
    owner: AtomicU64,
}

impl Default for Hsl {
    fn default() -> Self {
        Hsl {
            raw: RawMutex::INIT,
            owner: AtomicU64::new(0),
        }
    }
}

impl Hsl {
    fn mine(&self) -> bool {
        self.owner.load(Ordering::Acquire) == ME.with(|m| *m)
    }

    fn took(&self) {
        self.owner.store(ME.with(|m| *m), Ordering::Release);
        hold();
        HELD.with(|l| l.borrow_mut().push(self as *const Hsl as usize));
    }

    /// Block until this thread holds it.
    pub fn lock(&self) -> Result<()> {
        if self.mine() {
            bail!(
                State,
                "this thread already holds the handler-safe lock (they are not recursive)"
            );
        }
        self.raw.lock();
        self.took();
        Ok(())
    }

    /// Take it if it is free: true if taken.
    pub fn try_lock(&self) -> Result<bool> {
        if self.mine() {
            bail!(
                State,
                "this thread already holds the handler-safe lock (they are not recursive)"
            );
        }
        if !self.raw.try_lock() {
            return Ok(false);
        }
        self.took();
        Ok(true)
    }

    /// Release it; true when the thread has no hold left (postponed handlers may run).
    pub fn unlock(&self) -> Result<bool> {
        if !self.mine() {
            bail!(
                State,
                "the handler-safe lock is not held by this thread (only the thread that took it releases it)"
            );
        }
        let me = self as *const Hsl as usize;
        HELD.with(|l| {
            let mut l = l.borrow_mut();
            let i = l
                .iter()
                .rposition(|&p| p == me)
                .expect("held locks are listed");
            l.remove(i);
        });
        self.owner.store(0, Ordering::Release);
        // SAFETY: this thread took `raw` (owner was ours) and has not released it.
        unsafe { self.raw.unlock() };
        Ok(unhold())
    }

    /// Is it held (by any thread)?
    pub fn is_held(&self) -> bool {
        self.owner.load(Ordering::Acquire) != 0
    }
}

/// This thread's holds (a handler's mark before it runs).
pub(crate) fn holds() -> u32 {
    HOLDS.with(|h| h.get())
}

/// Drop the holds this thread took beyond `mark` (a handler returned in a section it
/// opened); how many there were. Call after `release_since`.
pub(crate) fn reset_holds(mark: u32) -> usize {
    let extra = holds().saturating_sub(mark);
    for _ in 0..extra {
        unhold();
    }
    extra as usize
}

/// How many hsls this thread holds (a handler's mark before it runs).
pub(crate) fn held_mark() -> usize {
    HELD.with(|l| l.borrow().len())
}

/// Release the hsls this thread took after `mark` (a handler returned holding them);
/// how many there were.
pub(crate) fn release_since(mark: usize) -> usize {
    let extra: Vec<usize> = HELD.with(|l| l.borrow().get(mark..).unwrap_or(&[]).to_vec());
    for &p in extra.iter().rev() {
        // SAFETY: `p` is an hsl this thread holds; a held hsl is never destroyed
        // (`fh_hsl_destroy` refuses one that is held), so it is alive.
        let h = unsafe { &*(p as *const Hsl) };
        let _ = h.unlock();
    }
    extra.len()
}

impl crate::api::ctx::CtxInner {
    /// `fh_hold_interrupts`.
    pub fn hold_interrupts(&self) -> Result<()> {
        self.check_live()?;
        hold_interrupts();
        Ok(())
    }

    /// `fh_resume_interrupts`: the handler calls postponed meanwhile run now.
    pub fn resume_interrupts(&self) -> Result<()> {
        self.check_live()?;
        if resume_interrupts()? {
            self.run_postponed();
        }
        Ok(())
    }

    /// `fh_hsl_lock`.
    pub fn hsl_lock(&self, h: &Hsl) -> Result<()> {
        self.check_live()?;
        h.lock()
    }

    /// `fh_hsl_trylock`: true if taken.
    pub fn hsl_trylock(&self, h: &Hsl) -> Result<bool> {
        self.check_live()?;
        h.try_lock()
    }

    /// `fh_hsl_unlock`: the handler calls postponed meanwhile run now.
    pub fn hsl_unlock(&self, h: &Hsl) -> Result<()> {
        if h.unlock()? {
            self.run_postponed();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hsl_holds_off_interrupts_until_released() {
        let h = Hsl::default();
        assert!(!interrupts_held());
        h.lock().unwrap();
        assert!(interrupts_held() && h.is_held());
        assert_eq!(
            h.lock().unwrap_err().status,
            crate::runtime::error::Status::State
        );
        assert_eq!(
            h.try_lock().unwrap_err().status,
            crate::runtime::error::Status::State
        );
        // Another thread cannot take it, nor release it.
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!h.try_lock().unwrap());
                assert!(h.unlock().is_err());
                assert!(!interrupts_held());
            });
        });
        assert!(h.unlock().unwrap());
        assert!(!interrupts_held() && !h.is_held());
        assert!(h.unlock().is_err());
    }

    #[test]
    fn sections_nest_and_resume_needs_a_hold() {
        assert!(resume_interrupts().is_err());
        hold_interrupts();
        hold_interrupts();
        let h = Hsl::default();
        h.lock().unwrap();
        assert!(!resume_interrupts().unwrap());
        assert!(!h.unlock().unwrap());
        assert!(interrupts_held());
        assert!(resume_interrupts().unwrap());
        assert!(!interrupts_held());
        // A held lock is not an explicit section: resume refuses.
        h.lock().unwrap();
        assert!(resume_interrupts().is_err());
        h.unlock().unwrap();
    }

    #[test]
    fn release_since_frees_what_a_handler_left_held() {
        let a = Hsl::default();
        let b = Hsl::default();
        a.lock().unwrap();
        let mark = held_mark();
        b.lock().unwrap();
        assert_eq!(release_since(mark), 1);
        assert!(!b.is_held() && a.is_held());
        a.unlock().unwrap();
        assert!(!interrupts_held());
    }
}
