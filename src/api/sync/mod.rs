//! NIC-style synchronisation (seed 004): remote atomics, the MCS queue lock, split-phase
//! barriers and tree collectives. The idea carried over from 2003: the *target's host*
//! does no work. An operation is done by the transport (CPU atomics on node-shared
//! memory, MPI-3 atomics, RDMA writes of flags) and the target learns of it by looking
//! at its own memory. One exception, measured (docs/PERFORMANCE.md): between ranks
//! that do not share the node mapping, barrier flags, small collective chunks and
//! their credits travel as active messages whose handlers write the same words, since
//! Open MPI applies one-sided atomics only inside the target's MPI calls anyway and
//! each would block the writer until then; the reader of such words is waiting in
//! the library, so it polls.
//!
//! - [`atomic`]: the operations of seed 004 Table 5.1 on 32/64-bit words, atomic across
//!   *different* operations from all ranks.
//! - [`lock`]: seed 004 §5.3's distributed MCS queue lock.
//! - [`barrier`]: seed 004 ch. 3, dissemination (pairwise exchange) and
//!   gather-and-broadcast trees by one-sided flag writes, split-phase, named ids;
//!   [`node`]: the default, shared-memory words inside a node and dissemination
//!   across nodes.
//! - [`chan`]: eager single-writer chunk channels between any two ranks (flow control
//!   by credits written back into the writer's memory); the collectives' transport.
//!   Outside the node mapping small chunks and credits travel as active messages
//!   (`chan_am`).
//! - [`coll`]: broadcast on seed 004 §2.3's postal-model optimal tree with pipelined
//!   chunks, reduce/allreduce in a fixed order, allgather.

pub mod area;
pub mod atomic;
pub mod barrier;
pub mod chan;
mod chan_am;
pub mod coll;
pub mod lock;
pub mod node;
pub mod settings;
pub mod signal;
pub mod state;
pub mod wordlock;

pub use state::SyncState;
use state::MIN_SPARE;

use crate::api::ctx::CtxInner;
use crate::api::wire::LibHandler;
use crate::runtime::error::Result;
use std::sync::atomic::Ordering;

/// Synchronisation: advances a split-phase barrier in every poll, and those of every
/// live context in every idle round of a wait.
pub(crate) static SUBSYSTEM: crate::api::ctx::Subsystem = crate::api::ctx::Subsystem {
    name: "sync",
    handlers: &[
        (LibHandler::CollChunk, chan_am::handle_chunk),
        (LibHandler::CollCredit, chan_am::handle_credit),
        (LibHandler::BarrierFlag, barrier::handle_flag),
    ],
    progress: Some(CtxInner::sync_progress),
    idle: Some(progress_all),
    shutdown: None,
};

/// The process is exiting without `fh_finalize`: say so in every live context's life
/// word, so peers waiting for one of its calls stop waiting.
pub fn mark_all_exited() {
    crate::api::wait::for_each_live(|c| {
        if c.state() == crate::api::ctx::State::Live {
            c.set_life(area::Life::Exited);
        }
    });
}

/// Advance the pending split-phase barrier of every live context. Where flags can
/// come as AMs (ranks outside the node mapping), they arrive only in that context's
/// own poll, so such a context is polled (which advances its barrier too).
pub fn progress_all() {
    crate::api::wait::for_each_live(|c| {
        if c.state() != crate::api::ctx::State::Live {
            return;
        }
        if c.sync.barrier_active.load(Ordering::Acquire) && c.conduit.needs_progress() {
            if let Err(e) = c.progress_once() {
                c.record_async_error(e);
            }
        } else {
            c.sync_progress();
        }
    });
}

impl CtxInner {
    /// The sync area, or the error every synchronisation call returns without it.
    pub(crate) fn area(&self) -> Result<area::Area> {
        self.sync.area.ok_or_else(|| {
            crate::err!(
                NoResource,
                "the library heap is too small for the synchronisation area ({} bytes + {} spare \
                 on every rank): raise FH_HEAP_SIZE",
                area::Area::new(self.size).bytes,
                MIN_SPARE
            )
        })
    }

    /// Publish this rank's [`area::Life`] (a store to our own area, which peers read;
    /// no MPI call, so it is safe at exit), with the epoch of the last barrier it
    /// notified. At exit the state is not waited for (0 if a thread holds it).
    pub(crate) fn set_life(&self, l: area::Life) {
        let epoch = match l {
            area::Life::Finalizing => self.sync.barrier.lock().epoch,
            _ => self.sync.barrier.try_lock().map_or(0, |b| b.epoch),
        };
        if let Ok(a) = self.area() {
            let w = a.life(self.area_base(self.rank));
            // SAFETY: our own heap, mapped for the context's life, 8-byte aligned;
            // only this rank writes its life word.
            unsafe { std::sync::atomic::AtomicU64::from_ptr(w as *mut u64) }
                .store(area::life_word(l, epoch), Ordering::Release);
        }
    }

    /// What `rank`'s life word says (`Live` when there is no sync area or the read
    /// fails).
    /// `rank`'s life word: what it says and the epoch of the last barrier the rank
    /// notified before it finalized.
    pub(crate) fn peer_life(&self, rank: usize) -> (area::Life, u64) {
        let Ok(a) = self.area() else {
            return (area::Life::Live, 0);
        };
        match self.word(
            rank,
            a.life(self.area_base(rank)),
            crate::conduit::AtomicOp::Fetch,
        ) {
            Ok(w) => area::read_life(w),
            Err(_) => (area::Life::Live, 0),
        }
    }

    /// Base of `rank`'s sync area (the start of its heap).
    #[inline]
    pub(crate) fn area_base(&self, rank: usize) -> usize {
        self.remote_heaps[rank].0
    }

    /// Called from every poll (and so from the progress thread): advance a split-phase
    /// barrier this rank notified, so a rank that computes between notify and wait
    /// does not hold the others up beyond its own arrival (seed 004 ch. 6).
    #[inline]
    pub(crate) fn sync_progress(&self) {
        if self.sync.barrier_active.load(Ordering::Acquire) {
            if let Some(mut b) = self.sync.barrier.try_lock() {
                if let Err(e) = self.barrier_advance(&mut b) {
                    self.record_async_error(e);
                }
            }
        }
    }
}
