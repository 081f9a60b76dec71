//! Firehose inside a context: the glue between the API objects and `firehose`.
//!
//! Firehose (seed 000 §3) owns its move protocol: the handlers
//! (`firehose::protocol`), the initiator's state machine (`firehose::initiator`) and
//! the explicit pin API (`firehose::pins`), all written against the traits of
//! `firehose::host`. This module gives them the context:
//! - `target.rs`: the AM entry points of the protocol's handlers, and the context
//!   as their `MoveHost` and `Mover` (sending through the AM engine, waiting with
//!   stall diagnosis, progress, completing RMA);
//! - `pinner.rs`: pinning for the tables (mlock, then conduit registration);
//! - `pins.rs`: the explicit pin API's argument checks and prepinned memory (heap,
//!   registered regions), before Firehose pins;
//! - `stats.rs`: `fh_stats_t`, Firehose's counters with the context's AM and RMA
//!   ones;
//! - this file: the subsystem registration (handlers, progress and shutdown
//!   hooks), the RMA hit path's table access, long-AM destination checks,
//!   invalidation.
//!
//! Handler context: the move and answer handlers never wait; the local table is
//! locked for a bounded time (no polling under any table lock).

use super::am::{self, LibHandler, Token};
use super::ctx::CtxInner;
use super::wire::Frame;
use crate::bail;
use crate::firehose::initiator::{self, Carry, Grant};
use crate::firehose::local::Pinner;
use crate::firehose::remote::PeerTable;
use crate::runtime::config::Pin;
use crate::runtime::error::Result;
use crate::runtime::os;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::firehose::state::*;

mod pinner;
mod pins;
mod stats;
mod target;

pub use crate::firehose::pins::PinHow;
pub use pinner::CtxPinner;
pub use stats::FhSnapshot;
use target::{handle_answer, handle_move};

/// Firehose: the move protocol's handlers, pins waiting for answers (progress), and
/// unpinning everything at finalize.
pub(crate) static SUBSYSTEM: super::ctx::Subsystem = super::ctx::Subsystem {
    name: "firehose",
    handlers: &[
        (LibHandler::FhMove, handle_move),
        (LibHandler::FhAnswer, handle_answer),
    ],
    progress: Some(crate::firehose::pins::progress::<CtxInner>),
    idle: None,
    shutdown: Some(CtxInner::fh_shutdown),
};

/// Peers' moves meeting a range wait while this lives ([`CtxInner::fh_quiesce`]).
pub(crate) struct Quiesce<'a> {
    ctx: &'a CtxInner,
    span: (usize, usize),
}

impl Drop for Quiesce<'_> {
    fn drop(&mut self) {
        let (a, b) = self.span;
        self.ctx.fh.local.lock().end_quiesce(a, b);
        crate::firehose::protocol::drain_parked(self.ctx);
    }
}

impl CtxInner {
    pub fn fh(&self) -> &FhState {
        &self.fh
    }

    /// Run `f` on `rank`'s firehose table: locked when threads may race, else
    /// directly (the hit path's two table visits would otherwise cost two lock round
    /// trips).
    #[inline]
    pub fn with_peer<R>(&self, rank: usize, f: impl FnOnce(&mut PeerTable) -> R) -> R {
        if self.concurrent {
            f(&mut self.fh.peers[rank].lock())
        } else {
            // SAFETY: without MPI_THREAD_MULTIPLE at most one thread is inside the
            // library and there is no progress thread; handlers (the other users of
            // this table) run only inside that thread's polls, never during `f`.
            f(unsafe { &mut *self.fh.peers[rank].data_ptr() })
        }
    }

    /// Does a hit need no message under the registration strategy in use?
    #[inline]
    pub fn fh_hits_one_sided(&self) -> bool {
        self.fh.params.strategy.hits_one_sided()
    }

    /// Target side of a remote invalidation: the firehose half (the registered-region
    /// half is in `mem`).
    pub fn fh_forget(&self, src: usize, start: usize, end: usize) {
        self.fh.peers[src].lock().invalidate(start, end);
    }

    /// Hold peers' moves that meet `[a, b)` (widened to whole granules: every unit
    /// that overlaps it) until the returned guard is dropped; they are answered then,
    /// with fresh pins of what is mapped at that time. The caller holds it across
    /// [`Self::fh_invalidate`] and whatever must happen before peers may pin the
    /// range again (a registration published, a registered region retracted).
    ///
    /// Served at once, those moves gave the holders an invalidation had just told to
    /// forget the range new firehoses there, which its next round had to invalidate
    /// again: a peer that kept accessing the range held the invalidation until it
    /// stopped (test_churn, FH_CMA=0 at 8 ranks: 1.5 s, the whole of the peer's
    /// loop).
    pub(crate) fn fh_quiesce(&self, a: usize, b: usize) -> Quiesce<'_> {
        let p = &self.fh.params;
        let span = (p.granule(a).0, p.granule(b.max(a + 1) - 1).1);
        self.fh.local.lock().begin_quiesce(span.0, span.1);
        Quiesce { ctx: self, span }
    }

    /// Drop every firehose unit overlapping `[a, b)` on this rank, first telling every
    /// peer holding one to forget it and complete its operations (waiting for their
    /// acknowledgements), so no rank keeps using the old mapping. Returns how many
    /// units were unpinned. The caller's `_q` keeps peers from taking new firehoses
    /// there meanwhile, so one round usually does. Invalidations of one context take
    /// turns (`FhState::invalidating`): one still waiting for its holders owns the
    /// units it handed back.
    pub(crate) fn fh_invalidate(&self, _q: &Quiesce<'_>, a: usize, b: usize) -> Result<usize> {
        let fh = &self.fh;
        let _turn = fh.invalidating.lock();
        let mut total = 0;
        loop {
            let mut l = fh.local.lock();
            let holders: Vec<(usize, usize, Vec<usize>)> = l
                .units()
                .filter(|(s, u)| *s < b && u.end > a && u.remote > 0)
                .map(|(s, u)| (s, u.end, u.holder_ranks()))
                .collect();
            if holders.is_empty() {
                let mut pinner = CtxPinner {
                    ctx: self,
                    maps: None,
                };
                total += l.invalidate(a, b, &mut pinner).len();
                return Ok(total);
            }
            // The holders' firehoses end now; the units stay pinned (held here)
            // until every holder acknowledged. Moves meeting the range park
            // meanwhile (`_q`), so the next round finds no new holder.
            let mut by_rank: HashMap<usize, (usize, usize)> = HashMap::new();
            let mut held = Vec::new();
            for (s, e, hs) in holders {
                for h in hs {
                    held.extend(l.hand_back(h, s));
                    let ent = by_rank.entry(h).or_insert((s, e));
                    ent.0 = ent.0.min(s);
                    ent.1 = ent.1.max(e);
                }
            }
            drop(l);
            let targets: Vec<(usize, usize, usize)> =
                by_rank.iter().map(|(&h, &(s, e))| (h, s, e)).collect();
            let (w, sends) = self.invalidate_holders(&targets, "fh_mem_register/fh_mem_invalidate");
            if w.is_err() {
                // A holder did not confirm: the memory stays exposed (held for good).
                return w.and(Ok(total));
            }
            let mut l = fh.local.lock();
            let mut pinner = CtxPinner {
                ctx: self,
                maps: None,
            };
            for h in held {
                l.local_release(h, &mut pinner);
            }
            l.trim(&mut pinner);
            drop(l);
            sends?;
        }
    }

    /// Finalize: unpin everything.
    pub fn fh_shutdown(&self) {
        let mut pinner = CtxPinner {
            ctx: self,
            maps: None,
        };
        self.fh.local.lock().clear(&mut pinner);
    }

    /// Long-AM destinations must be the peer's heap or a region it registered: ask
    /// the target (a move answers registered regions as prepinned) if we do not know.
    pub fn check_registered(&self, rank: usize, addr: usize, len: usize) -> Result<()> {
        if len == 0 || self.plain_access(rank, addr, len).is_some() {
            return Ok(());
        }
        if rank != self.rank && self.regtab_lookup(rank, addr, len)? {
            return Ok(());
        }
        if rank != self.rank {
            if let (Grant::Pins(p), _) =
                initiator::acquire_prefix(self, rank, addr, len, addr, Carry::None, true)?
            {
                initiator::release(self, p);
            }
            if self.plain_access(rank, addr, len).is_some() {
                return Ok(());
            }
        }
        self.count(&self.stats.access_refused, 1);
        bail!(
            Access,
            "[{:#x}, +{}) is not registered memory of rank {} (long AM destinations must be fh_malloc'd or fh_mem_register'ed there)",
            addr,
            len,
            rank
        )
    }

    /// Every peer table's state (for debugging hangs in tests).
    pub fn fh_debug_dump(&self) -> String {
        let mut out = format!(
            "rank {}: moves in flight {:?}, parked {}, inflight {:?}, pin refs {:?}, blocked {:?}\n",
            self.rank,
            self.fh.moves.lock().keys().collect::<Vec<_>>(),
            self.fh.parked.lock().len(),
            self.fh.inflight.lock().iter().map(|q| q.len()).collect::<Vec<_>>(),
            self.fh.pin_refs.iter().map(|a| a.load(Ordering::Relaxed)).collect::<Vec<_>>(),
            self.fh.pin_refs_blocked.iter().map(|a| a.load(Ordering::Relaxed)).collect::<Vec<_>>()
        );
        for (r, p) in self.fh.peers.iter().enumerate() {
            if let Some(p) = p.try_lock() {
                out += &format!(" peer {r}: {}", p.debug_summary());
            } else {
                out += &format!(" peer {r}: (locked)\n");
            }
        }
        out
    }

    pub fn fh_debug_validate(&self) -> std::result::Result<(), String> {
        self.fh.local.lock().validate()?;
        for (r, p) in self.fh.peers.iter().enumerate() {
            let p = p.lock();
            p.validate()?;
            if p.used > self.fh.params.f.saturating_add(MAX_PIECES_PER_MOVE) {
                return Err(format!("{} firehoses used towards rank {r}", p.used));
            }
        }
        Ok(())
    }
}
