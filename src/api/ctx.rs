//! The context's core: one per communicator (or sim node). Holds the conduit, the
//! settings and every subsystem's state; runs the registered progress hooks. Its
//! construction and teardown are in [`super::context`], which composes the
//! subsystems ([`Subsystem`]); this file names none of them by function.
//!
//! Guarantees: a context is `Live` until `finalize`, then every call returns
//! `FH_ERR_STATE`. Blocking calls progress AMs while they wait (so two ranks waiting
//! on each other both make progress) and refuse to run inside an AM handler.
//! Asynchronous errors (a peer refused one of our AMs) are kept and returned by the
//! next `fh_poll`, never dropped.

use super::am::table::{self as am, AmState, LibHandler, Token};
use super::heap::Heap;
use super::rma::handles::RmaState;
use super::settings::Settings;
use super::stats::Stats;
use super::wire::Frame;
use crate::conduit::Conduit;
use crate::err;
use crate::firehose::registry::{LocalRegions, RemoteCache};
use crate::firehose::state::{FhState, Invalidations};
use crate::runtime::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// A library AM handler: runs inside the poll that received its frame.
pub type LibHandlerFn = fn(&CtxInner, &Token, &Frame<'_>);

/// What a subsystem of the API contributes to every context: its AM handlers at
/// their library indices, and hooks the context runs. Subsystems export one each;
/// `api::context` lists them.
pub struct Subsystem {
    pub name: &'static str,
    pub handlers: &'static [(LibHandler, LibHandlerFn)],
    /// Run in every poll, after the arrived frames were dispatched.
    pub progress: Option<fn(&CtxInner)>,
    /// Run in every round of a blocking wait that found nothing to do (`api::wait`):
    /// work of every live context that a rank blocked in one of them must still do.
    pub idle: Option<fn()>,
    /// Run at finalize, once every rank arrived, before the conduit is released.
    pub shutdown: Option<fn(&CtxInner)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    Live = 0,
    Finalizing = 1,
    Finalized = 2,
}

/// Non-blocking calls poll once every this many calls (blocking calls always poll
/// while they wait). Bounds the cost of polling on the fast path.
pub const POLL_EVERY: u64 = 32;

pub struct CtxInner {
    pub conduit: Arc<dyn Conduit>,
    pub rank: usize,
    pub size: usize,
    /// Several threads may be inside the library at once (MPI_THREAD_MULTIPLE, the
    /// progress thread, or the sim conduit). When false, the fast paths skip locks and
    /// atomic read-modify-writes.
    pub concurrent: bool,
    pub cfg: Settings,
    pub state: AtomicU8,
    /// The subsystems composed into this context (their hooks run from here).
    pub(crate) subsystems: &'static [&'static Subsystem],
    /// Their progress hooks, gathered once from `subsystems` (every poll runs them;
    /// walking every subsystem's optional hook cost about 20 instructions a poll).
    pub(crate) progress_hooks: Vec<fn(&CtxInner)>,
    pub am: AmState<LibHandlerFn>,
    pub rma: RmaState,
    pub heap: Heap,
    /// What the heap grew by when it was full (`fh_malloc`).
    pub segments: super::heap::Segments,
    pub local_regs: LocalRegions,
    /// Every rank's library heap `(base, len)` (a copy of the conduit's table, so the
    /// access check needs no virtual call).
    pub remote_heaps: Vec<(usize, usize)>,
    /// Bytes at the start of every rank's heap that hold the library's own
    /// structures (the sync area): public puts, gets and atomics are refused there.
    pub internal: usize,
    /// Offset of the registration table from every heap's base (`api::regtab`).
    pub regtab_off: usize,
    pub regtab: super::regtab::table::RegTab,
    pub remote: RemoteCache,
    pub stats: Stats,
    /// Firehose: tables, moves in flight, explicit pins (`firehose::state`; run by
    /// `firehose::initiator` and `pins` with this context as host: `api::moves`).
    pub fh: FhState,
    /// rpipe handshakes and open pipes (`api::rpipe`).
    pub rpipe: super::rpipe::state::RpipeState,
    /// Where the ranks of this node sleep, and who wakes them (`api::bells`).
    pub bells: super::bells::Bells,
    /// Atomics' helpers, locks, barriers, collectives (`api::sync`).
    pub sync: super::sync::state::SyncState,
    /// Outstanding invalidations: id -> acks still missing.
    pub(crate) invals: Mutex<HashMap<u64, usize>>,
    /// Target side: bumped by every invalidation this rank sends; move answers carry
    /// the value they were made under (see `mem::Invalidations`).
    pub(crate) inval_epoch: AtomicU64,
    /// Holder side: recent invalidations received, per sender.
    pub(crate) inval_seen: Invalidations,
    pub(crate) next_id: AtomicU64,
    /// First asynchronous error not yet reported, and how many more occurred.
    pub(crate) async_err: Mutex<Option<(Error, u64)>>,
    /// Fast check for `async_err` (polling must not take its lock every time).
    pub(crate) async_pending: AtomicBool,
    /// Hot-path counters, sharded by thread.
    pub hot: crate::api::stats::Hot,
    /// Lines for fh_config_print beyond the settings table.
    pub info: Mutex<Vec<String>>,
    /// Keeps the sim poll hook alive (the sim conduit holds a Weak to it).
    pub(crate) sim_hook: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

impl CtxInner {
    /// Identifies this context among the live ones (objects it hands out record it).
    pub fn id(&self) -> usize {
        self as *const CtxInner as usize
    }

    pub fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Live,
            1 => State::Finalizing,
            _ => State::Finalized,
        }
    }

    /// Error unless the context is live.
    #[inline]
    pub fn check_live(&self) -> Result<()> {
        if self.state.load(Ordering::Acquire) != State::Live as u8 {
            return Err(not_live());
        }
        Ok(())
    }

    #[inline]
    pub fn check_rank(&self, rank: i64) -> Result<usize> {
        if rank < 0 || rank as u64 >= self.size as u64 {
            return Err(self.bad_rank(rank));
        }
        Ok(rank as usize)
    }

    #[cold]
    #[inline(never)]
    fn bad_rank(&self, rank: i64) -> Error {
        err!(
            BadRank,
            "rank {} is out of range: this context has ranks 0..{}",
            rank,
            self.size.saturating_sub(1)
        )
    }

    /// Run arrived AMs once. Returns how many frames were handled.
    pub fn progress_once(&self) -> Result<usize> {
        let st = self.state.load(Ordering::Acquire);
        if st == State::Finalized as u8 {
            return Ok(0);
        }
        self.run_postponed();
        let n = self
            .conduit
            .am_poll(&mut |src, bytes, long| self.dispatch(src, bytes, long))?;
        for hook in &self.progress_hooks {
            hook(self);
        }
        Ok(n)
    }

    /// `fh_poll`: progress, then report any asynchronous error.
    pub fn poll(&self) -> Result<usize> {
        self.check_live()?;
        am::check_not_in_handler("fh_poll")?;
        let n = self.progress_once()?;
        if n == 0 {
            self.idle_if_crowded();
        }
        self.take_async_error()?;
        Ok(n)
    }

    /// After a poll from the program (`fh_poll`, a `try` call that found nothing)
    /// that found nothing: when the node's ranks outnumber its
    /// cores, give ours away, as MPI's own poll does when oversubscribed (Open MPI's
    /// `mpi_yield_when_idle`). A program spinning on such calls would otherwise keep
    /// the rank it waits for off the core for a whole time slice (measured:
    /// `test_rpipe` at 8 ranks on 2 cores took 31 s instead of 3 once the poll of an
    /// all-node job stopped calling MPI). The library's own waits yield by their
    /// policy instead (`runtime::wait`).
    #[inline]
    fn idle_if_crowded(&self) {
        if self.bells.policy() == crate::runtime::wait::CROWDED {
            self.conduit.idle();
        }
    }

    /// Add to a statistics counter: an atomic add when threads may race, else a plain
    /// load and store (no locked instruction on the fast path).
    #[inline]
    pub fn count(&self, c: &AtomicU64, n: u64) {
        if self.concurrent {
            c.fetch_add(n, Ordering::Relaxed);
        } else {
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    /// As [`Self::maybe_poll`], for a `try` call that found nothing (a program spins
    /// on it): an empty poll also gives the core away when ranks outnumber cores.
    #[inline]
    pub fn maybe_poll_idle(&self) {
        if self.poll_due(self.hot.shard()) && self.progress_once() == Ok(0) {
            self.idle_if_crowded();
        }
    }

    /// Cheap periodic polling for non-blocking calls.
    #[inline]
    pub fn maybe_poll(&self) {
        self.maybe_poll_in(self.hot.shard())
    }

    /// As [`Self::maybe_poll`], with this thread's counter shard already at hand.
    #[inline]
    pub fn maybe_poll_in(&self, sh: &crate::api::stats::HotShard) {
        if self.poll_due(sh) {
            let _ = self.progress_once();
        }
    }

    /// Count one call on this thread's shard: true on every `POLL_EVERY`-th, outside
    /// handlers. A plain load/store, not an atomic add: under concurrency a lost
    /// increment only shifts when the next poll happens.
    #[inline]
    fn poll_due(&self, sh: &crate::api::stats::HotShard) -> bool {
        let c = &sh.calls;
        let n = c.load(Ordering::Relaxed).wrapping_add(1);
        c.store(n, Ordering::Relaxed);
        n % POLL_EVERY == 0 && !am::in_handler()
    }

    pub(crate) fn record_async_error(&self, e: Error) {
        if self.cfg.verbose {
            eprintln!("firehose[{}]: {}", self.rank, e);
        }
        let mut g = self.async_err.lock();
        match g.as_mut() {
            Some((_, more)) => *more += 1,
            None => *g = Some((e, 0)),
        }
        self.async_pending.store(true, Ordering::Release);
    }

    #[inline]
    pub fn take_async_error(&self) -> Result<()> {
        if !self.async_pending.load(Ordering::Acquire) {
            return Ok(());
        }
        self.take_async_error_now()
    }

    #[cold]
    #[inline(never)]
    fn take_async_error_now(&self) -> Result<()> {
        let mut g = self.async_err.lock();
        self.async_pending.store(false, Ordering::Release);
        match g.take() {
            Some((mut e, more)) => {
                if more > 0 {
                    e.msg
                        .push_str(&format!(" (and {} more asynchronous errors)", more));
                }
                Err(e)
            }
            None => Ok(()),
        }
    }

    pub(crate) fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Every setting with its source, then facts about this context.
    pub fn render_config(&self) -> String {
        let mut s = format!(
            "firehose {} rank {}/{} configuration:\n",
            env!("CARGO_PKG_VERSION"),
            self.rank,
            self.size
        );
        s.push_str(&self.cfg.render());
        for l in self.info.lock().iter().chain(&self.conduit.describe_now()) {
            s.push_str(&format!("  {}\n", l));
        }
        s
    }
}

#[cold]
#[inline(never)]
fn not_live() -> Error {
    err!(State, "context is finalized")
}
