//! Firehose-SMP (seed 000 §4): the deadlock-avoidance flag and the request driver
//! that many client threads of one node use to share one firehose table fairly.
//!
//! The problem (§4, first paragraphs): threads compete for the per-node firehoses f
//! (and locally for M + MAXVICTIM). If each collects part of what it needs while it
//! polls for the rest, all of them can end up holding a share and none completes
//! (livelock, then deadlock).
//!
//! The protocol (§4.1, Fig. 5 and Fig. 6), as [`acquire`] runs it:
//! 1. *Estimate* — the first [`DaClient::step`]: a hit, or a miss that finds enough
//!    unused or replaceable firehoses right now, commits at once (the easy path).
//! 2. Otherwise the request *enters deadlock avoidance*: it keeps what it collected
//!    (PENDING_UNCOMMITTED entries, reaped replacements), polls, and steps again.
//! 3. After `DA_LIMIT` unsuccessful rounds it tries to post the per-node DA flag
//!    ([`DaGate::try_claim`]). At most one request owns the flag.
//! 4. A request that sees the flag owned by another *rolls back* (returns its
//!    replacements, destroys its uncommitted entries, drops its references) and
//!    sleeps on the gate's condition variable until the winner commits; then it
//!    restarts from the estimate. So the winner alone collects resources and, as long
//!    as operations in flight complete, it finishes.
//! 5. A request whose range meets another request's uncommitted entry (Table 3,
//!    second row) rolls back unless it is the winner; the winner polls until the
//!    losers have removed them.
//! 6. Beyond the paper: a request that is a pure hit completes even while another
//!    request holds the flag (it takes nothing the winner could need — and the
//!    winner may be waiting for the pin this very hit runs inside). A request gives
//!    up ([`DaClient::exhausted`]) only when its poll reports that nothing but pins
//!    of threads blocked here holds what it lacks, twice in a row with a fresh step
//!    in between.
//!
//! Guarantees: at most one owner per gate; every rollback leaves the request holding
//! nothing; a waiter is woken by every release of the flag (no lost wake-up: the
//! owner field and the condition variable share one mutex). Fairness: every request
//! gets the same number of rounds before it may claim the flag, and waiters restart
//! in the order the scheduler wakes them.
//!
//! The module is written against [`sync`](self::sync) so that `loom` can explore its
//! interleavings (`make loom`); it knows nothing of MPI.

use std::time::{Duration, Instant};

/// The synchronisation primitives the protocol uses: std's, or loom's models under
/// `--cfg loom`.
pub mod sync {
    #[cfg(loom)]
    pub use loom::sync::atomic::{AtomicU64, Ordering};
    #[cfg(loom)]
    pub use loom::sync::{Condvar, Mutex, MutexGuard};
    #[cfg(not(loom))]
    pub use std::sync::atomic::{AtomicU64, Ordering};
    #[cfg(not(loom))]
    pub use std::sync::{Condvar, Mutex, MutexGuard};
}
use sync::{AtomicU64, Condvar, Mutex, Ordering};

/// Rounds a request polls in deadlock avoidance before it may post the DA flag
/// (seed 000 Fig. 5's `DA_LIMIT`). One under the model checker, so that the
/// flag is contended within its bounded exploration.
pub const DA_LIMIT: u32 = if cfg!(loom) { 1 } else { 4 };

/// No owner.
const FREE: u64 = 0;

/// The per-node deadlock-avoidance flag (`fh_all_da[node]` of Fig. 5) with its
/// "no deadlock" condition variable.
pub struct DaGate {
    /// Request id of the owner, or `FREE`. Written only under `lock`; read without
    /// it on the fast path (a stale read only delays the check by one round).
    owner: AtomicU64,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Default for DaGate {
    fn default() -> Self {
        DaGate {
            owner: AtomicU64::new(FREE),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }
}

impl DaGate {
    /// Is the flag posted by a request other than `me`?
    #[inline]
    pub fn held_by_other(&self, me: u64) -> bool {
        let o = self.owner.load(Ordering::Acquire);
        o != FREE && o != me
    }

    /// Post the flag for `me` if nobody holds it. True if `me` owns it now.
    pub fn try_claim(&self, me: u64) -> bool {
        debug_assert_ne!(me, FREE);
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let o = self.owner.load(Ordering::Relaxed);
        if o == FREE {
            self.owner.store(me, Ordering::Release);
            true
        } else {
            o == me
        }
    }

    /// Clear the flag `me` holds and wake every waiter.
    pub fn release(&self, me: u64) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.owner.load(Ordering::Relaxed) == me {
            self.owner.store(FREE, Ordering::Release);
            self.cv.notify_all();
        }
    }

    /// Sleep until no other request holds the flag.
    pub fn wait_free(&self, me: u64) {
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.held_by_other(me) {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One optimistic round's verdict (the caller's table step, seen by the driver).
#[derive(Debug, PartialEq, Eq)]
pub enum Round<T> {
    /// Committed (or hit): the request needs nothing more from the table.
    Done(T),
    /// Parts are in flight (PENDING): wait for them, keeping progress.
    Wait,
    /// Not enough resources yet: poll and try again, keeping progress.
    Short,
    /// Met another request's uncommitted entry.
    Conflict,
}

/// What the driver needs from a table and its environment.
pub trait DaClient {
    type Out;
    type Err;
    /// One estimate/acquisition step under the table lock.
    fn step(&mut self) -> Round<Self::Out>;
    /// Complete only if the request is a pure hit (it then needs nothing the DA
    /// winner could be waiting for), taking nothing otherwise.
    fn try_hit(&mut self) -> Option<Self::Out>;
    /// Give back everything the request holds (under the table lock).
    fn rollback(&mut self);
    /// Does the request hold anything?
    fn holds(&self) -> bool;
    /// Make progress without any table lock held: run handlers, complete operations
    /// in flight, wait for PENDING moves (`wait`: the last round was `Wait`).
    /// `Ok(false)`: nothing but explicit pins holds what the request lacks, so
    /// waiting cannot help (the caller gives up after one more step).
    fn poll(&mut self, wait: bool) -> Result<bool, Self::Err>;
    /// The error for a request that cannot complete.
    fn exhausted(&mut self) -> Self::Err;
    /// The request is about to wait (poll or sleep) rather than complete at once:
    /// from now on what its thread holds elsewhere (explicit pins) stays held until
    /// it completes.
    fn blocking(&mut self) {}
}

/// Counters of one acquisition (added to the per-thread and per-context stats).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaTally {
    /// The request left the easy path (entered deadlock avoidance).
    pub entered: bool,
    /// It posted the DA flag.
    pub won: bool,
    pub rollbacks: u64,
    /// Times it slept on the condition variable.
    pub waits: u64,
    pub stalled: Duration,
}

/// Run one request through the protocol of seed 000 §4.1 (see the module docs).
/// A request whose missing resources are held only by explicit pins gives up with
/// [`DaClient::exhausted`] instead of spinning forever.
pub fn acquire<C: DaClient>(
    gate: &DaGate,
    me: u64,
    c: &mut C,
    tally: &mut DaTally,
) -> Result<C::Out, C::Err> {
    let t0 = Instant::now();
    let r = drive(gate, me, c, tally);
    if gate.owner.load(Ordering::Acquire) == me {
        gate.release(me);
    }
    if tally.entered {
        tally.stalled = t0.elapsed();
    }
    r
}

/// Long because it is the whole request loop of seed 000 §4.1's deadlock
/// avoidance: `rounds` and `last_chance` carry across iterations, the gate check
/// (roll back and sleep when another request won) and the `Round` arms (claim the
/// flag after DA_LIMIT rounds) both update them, and error exits roll back holdings.
fn drive<C: DaClient>(
    gate: &DaGate,
    me: u64,
    c: &mut C,
    tally: &mut DaTally,
) -> Result<C::Out, C::Err> {
    let mut rounds: u32 = 0;
    let mut last_chance = false;
    loop {
        if gate.held_by_other(me) {
            // Someone else won the deadlock avoidance: roll back and sleep — unless
            // the request is a pure hit (e.g. inside a pin its thread holds: the
            // winner may be waiting for that very pin to be released).
            if c.holds() {
                c.rollback();
                tally.rollbacks += 1;
            }
            if let Some(x) = c.try_hit() {
                return Ok(x);
            }
            c.blocking();
            gate.wait_free(me);
            tally.waits += 1;
            rounds = 0;
            continue;
        }
        let round = c.step();
        let mine = gate.owner.load(Ordering::Acquire) == me;
        let wait = match round {
            Round::Done(x) => {
                if mine {
                    gate.release(me);
                }
                return Ok(x);
            }
            Round::Wait => true,
            Round::Short => {
                tally.entered = true;
                rounds += 1;
                if rounds > DA_LIMIT && !mine && gate.try_claim(me) {
                    tally.won = true;
                }
                false
            }
            Round::Conflict => {
                tally.entered = true;
                if !mine {
                    // Table 3, second row: not the winner — roll back and count a
                    // round towards claiming the flag.
                    c.rollback();
                    tally.rollbacks += 1;
                    rounds += 1;
                    if rounds > DA_LIMIT && gate.try_claim(me) {
                        tally.won = true;
                    }
                }
                false
            }
        };
        c.blocking();
        match c.poll(wait) {
            Ok(true) => last_chance = false,
            Ok(false) if !last_chance => {
                // Only pins hold what we lack — but a release may have happened
                // between our step and that verdict: one more step decides.
                last_chance = true;
            }
            Ok(false) => {
                if c.holds() {
                    c.rollback();
                }
                return Err(c.exhausted());
            }
            Err(e) => {
                if c.holds() {
                    c.rollback();
                }
                return Err(e);
            }
        }
    }
}
