//! The distributed MCS queue lock of seed 004 §5.3 (Mellor-Crummey & Scott).
//!
//! Words (all in the sync area, all accessed only through `CtxInner::word`):
//! - `tail` at the home rank: 0 when free, else `rank + 1` of the last waiter;
//! - per rank, `next` (successor `rank + 1`, or 0) and `locked` (1 while waiting).
//!
//! Acquire: clear our `next`, set our `locked`, **fetch&write** our id into `tail`.
//! A predecessor means we queue: one **remote write** links us into its `next`, then
//! we **poll our own `locked`** word (local memory: the holder's release writes it,
//! no message, no host involvement at the home).
//! Release: if no successor has linked yet, **compare&swap** `tail` from us back to
//! 0; if that fails a successor swapped itself in but has not linked yet (the
//! successor race), so wait for our `next`, then clear the successor's `locked`.
//! Grants follow tail-swap order: FIFO.
//!
//! One lock line per lock id on every rank; ids are handed out in creation order, so
//! collective creates give every rank the same id without exchanging anything.
//! Within one rank the lock is held by one thread at a time: the rank's entry in
//! the queue is `local` (other threads of the rank wait for it first).

use super::area::MAX_LOCKS;
pub use super::state::{Lock, LockIds};
use crate::api::ctx::CtxInner;
use crate::conduit::AtomicOp;
use crate::runtime::error::Result;
use crate::{bail, err};

const NEXT: usize = 0;
const LOCKED: usize = 8;
const TAIL: usize = 16;

/// What `fh_lock_create`'s barrier checks, for its message.
const CREATE_WHAT: &str = "fh_lock_create: home rank or creation order";
/// The barrier name of a create whose home is out of range (the lock slot bits, all
/// ones, are beyond every slot id).
const BAD_HOME: i64 = 0x4c4b_0000_0000_ffff;

impl CtxInner {
    fn lock_word(&self, rank: usize, id: usize, off: usize) -> Result<usize> {
        Ok(self.area()?.lock_line(self.area_base(rank), id) + off)
    }

    /// `fh_lock_create` (collective; every rank names the same home).
    pub fn lock_create(&self, home: i64) -> Result<Lock> {
        self.check_live()?;
        crate::api::am::check_not_in_handler("fh_lock_create")?;
        self.area()?;
        let home = match self.check_rank(home) {
            Ok(h) => h,
            Err(e) => {
                // Take part in the creation's barrier all the same, under a name no
                // good home gives: the others fail with "the ranks disagree" instead
                // of pairing this call with our next create (or creating a lock we
                // do not have). Ranks that all passed a bad home agree and fail here.
                let _ = self.barrier_named(BAD_HOME, CREATE_WHAT);
                return Err(e);
            }
        };
        let id = {
            let mut g = self.sync.locks.lock();
            if g.used.len() < MAX_LOCKS {
                g.used.resize(MAX_LOCKS, false);
            }
            let Some(id) = g.used.iter().position(|u| !u) else {
                bail!(
                    NoResource,
                    "fh_lock_create: all {} locks of this context are in use",
                    MAX_LOCKS
                );
            };
            g.used[id] = true;
            id
        };
        let r = (|| {
            // Our words start clear (a destroyed lock left them so, and fresh heaps are
            // zero); make sure before anyone can see us.
            self.word(
                self.rank,
                self.lock_word(self.rank, id, NEXT)?,
                AtomicOp::Set(0),
            )?;
            self.word(
                self.rank,
                self.lock_word(self.rank, id, LOCKED)?,
                AtomicOp::Set(0),
            )?;
            self.word(
                self.rank,
                self.lock_word(self.rank, id, TAIL)?,
                AtomicOp::Set(0),
            )?;
            // Nobody touches the lock until every rank cleared its words; the named
            // barrier also catches ranks that disagree on the home or the order.
            self.barrier_named(
                (0x4c4b_0000_0000_0000u64 | (home as u64) << 16 | id as u64) as i64,
                CREATE_WHAT,
            )
        })();
        if let Err(e) = r {
            self.sync.locks.lock().used[id] = false;
            return Err(e);
        }
        Ok(Lock::new(id, home))
    }

    /// Take the rank's entry for this lock (one thread per rank in the queue).
    fn lock_local(&self, l: &Lock, wait: bool) -> Result<bool> {
        loop {
            if l.take() {
                return Ok(true);
            }
            if !wait {
                // Held, also by this thread (FH_NOT_READY, as for any holder).
                return Ok(false);
            }
            if l.taken_by_me() {
                bail!(
                    State,
                    "fh_lock_acquire: this thread already holds the lock or waits for it (the lock is not recursive)"
                );
            }
            let what = crate::api::stall::Wait::new(
                "fh_lock",
                None,
                "another thread of this rank releasing the lock",
            );
            self.wait_rung(what, || Ok(l.is_free()))?;
        }
    }

    /// `fh_lock_acquire`.
    pub fn lock_acquire(&self, l: &Lock) -> Result<()> {
        self.check_live()?;
        crate::api::am::check_not_in_handler("fh_lock_acquire")?;
        self.lock_local(l, true)?;
        let r = self.lock_enqueue(l).and_then(|pred| match pred {
            Some(p) => self.lock_wait_granted(l, p),
            None => Ok(()),
        });
        if r.is_err() {
            l.give_back();
        }
        r
    }

    /// Release after [`Self::lock_enqueue`] + [`Self::lock_wait_granted`] used
    /// directly (tests drive the two halves by hand to check FIFO order).
    pub fn lock_release_granted(&self, l: &Lock) -> Result<()> {
        l.mark_taken();
        self.lock_release(l)
    }

    /// The first half of acquire: join the queue. `Ok(None)`: the lock was free and
    /// is now ours; `Ok(Some(p))`: we are queued behind rank `p` (linked already).
    pub fn lock_enqueue(&self, l: &Lock) -> Result<Option<usize>> {
        let me = self.rank;
        let next = self.lock_word(me, l.id, NEXT)?;
        let locked = self.lock_word(me, l.id, LOCKED)?;
        self.word(me, next, AtomicOp::Set(0))?;
        self.word(me, locked, AtomicOp::Set(1))?;
        let tail = self.lock_word(l.home, l.id, TAIL)?;
        let pred = self.word(l.home, tail, AtomicOp::Swap(me as u64 + 1))?;
        if pred == 0 {
            return Ok(None);
        }
        let pred = self.check_waiter(pred, "tail")?;
        self.word(
            pred,
            self.lock_word(pred, l.id, NEXT)?,
            AtomicOp::Set(me as u64 + 1),
        )?;
        Ok(Some(pred))
    }

    /// The second half: poll our own `locked` word until predecessor `pred` clears it.
    pub fn lock_wait_granted(&self, l: &Lock, pred: usize) -> Result<()> {
        let locked = self.lock_word(self.rank, l.id, LOCKED)?;
        let what = crate::api::stall::Wait::call(
            "fh_lock_acquire",
            Some(pred),
            "the lock, handed over by the rank ahead in the queue",
        );
        self.wait_rung(what, || {
            Ok(self.word(self.rank, locked, AtomicOp::Fetch)? == 0)
        })
    }

    /// `fh_lock_try`: `Ok(true)` if acquired, `Ok(false)` (FH_NOT_READY) if held.
    pub fn lock_try(&self, l: &Lock) -> Result<bool> {
        self.check_live()?;
        if !self.lock_local(l, false)? {
            return Ok(false);
        }
        let me = self.rank;
        let r = (|| {
            self.word(me, self.lock_word(me, l.id, NEXT)?, AtomicOp::Set(0))?;
            self.word(me, self.lock_word(me, l.id, LOCKED)?, AtomicOp::Set(0))?;
            let tail = self.lock_word(l.home, l.id, TAIL)?;
            let old = self.word(
                l.home,
                tail,
                AtomicOp::Cas {
                    expected: 0,
                    desired: me as u64 + 1,
                },
            )?;
            Ok(old == 0)
        })();
        if matches!(r, Ok(true)) {
            self.maybe_poll();
        } else {
            l.give_back();
            self.maybe_poll_idle();
        }
        r
    }

    /// `fh_lock_release`.
    pub fn lock_release(&self, l: &Lock) -> Result<()> {
        self.check_live()?;
        if l.is_free() {
            bail!(State, "fh_lock_release: this rank does not hold the lock");
        }
        let me = self.rank;
        let next = self.lock_word(me, l.id, NEXT)?;
        let mut succ = self.word(me, next, AtomicOp::Fetch)?;
        if succ == 0 {
            let tail = self.lock_word(l.home, l.id, TAIL)?;
            let old = self.word(
                l.home,
                tail,
                AtomicOp::Cas {
                    expected: me as u64 + 1,
                    desired: 0,
                },
            )?;
            if old == me as u64 + 1 {
                l.give_back();
                return Ok(());
            }
            if old == 0 {
                bail!(
                    State,
                    "fh_lock_release: the lock is not held (tail is empty)"
                );
            }
            // The successor race: someone swapped the tail but has not linked yet.
            crate::api::am::check_not_in_handler("fh_lock_release")?;
            let what = crate::api::stall::Wait::new(
                "fh_lock_release",
                None,
                "the next waiter linking itself behind us",
            );
            self.wait_rung(what, || {
                succ = self.word(me, next, AtomicOp::Fetch)?;
                Ok(succ != 0)
            })?;
        }
        let s = self.check_waiter(succ, "next")?;
        self.word(s, self.lock_word(s, l.id, LOCKED)?, AtomicOp::Set(0))?;
        l.give_back();
        if self.bells.policy() == crate::runtime::wait::CROWDED {
            // Ranks outnumber cores: the successor is likely waiting for one (or
            // just woken by the hand-over). Give it ours now instead of running on
            // to our next acquire, which would only queue behind it.
            std::thread::yield_now();
        }
        Ok(())
    }

    /// `fh_lock_destroy` (collective). Returns whether the lock is gone (the handle
    /// is then dead whatever the result) and the result:
    /// - refused, lock kept, while this rank holds it or waits for it (it must release
    ///   first; its destroy would otherwise wait for ranks that wait for its release);
    /// - at the home, `FH_ERR_STATE` when some rank held or wanted the lock after
    ///   every rank arrived (another thread's acquire): destroyed all the same.
    pub fn lock_destroy(&self, l: &Lock) -> (bool, Result<()>) {
        let pre = (|| {
            self.check_live()?;
            crate::api::am::check_not_in_handler("fh_lock_destroy")?;
            if !l.is_free() {
                bail!(
                    State,
                    "fh_lock_destroy: this rank holds the lock (release it first; the lock stays)"
                );
            }
            Ok(())
        })();
        if let Err(e) = pre {
            return (false, Err(e));
        }
        // Only what holds once every rank arrived counts: a rank may hold the lock
        // while the home calls this, and release it before its own call (a correct
        // program whose ranks finish at different times).
        if let Err(e) = self.barrier_named(
            (0x4c44_0000_0000_0000u64 | (l.home as u64) << 16 | l.id as u64) as i64,
            "fh_lock_destroy: which lock",
        ) {
            return (false, Err(e));
        }
        self.sync.locks.lock().used[l.id] = false;
        if self.rank != l.home {
            return (true, Ok(()));
        }
        let after = self
            .lock_word(l.home, l.id, TAIL)
            .and_then(|t| self.word(l.home, t, AtomicOp::Fetch));
        let t = match after {
            Ok(t) => t,
            Err(e) => return (true, Err(e)),
        };
        if t != 0 {
            return (
                true,
                Err(err!(
                    State,
                    "fh_lock_destroy: rank {} held or wanted the lock after every rank had called fh_lock_destroy (destroyed all the same; release before destroying, and acquire on no other thread meanwhile)",
                    t - 1
                )),
            );
        }
        (true, Ok(()))
    }

    /// A waiter id read from a lock word must name a rank.
    fn check_waiter(&self, v: u64, what: &str) -> Result<usize> {
        if v == 0 || v > self.size as u64 {
            bail!(
                Transport,
                "lock word {} holds {}, which names no rank",
                what,
                v
            );
        }
        Ok(v as usize - 1)
    }
}
