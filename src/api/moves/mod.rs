//! Firehose inside a context: the move protocol (seed 000 §3.1, Fig. 2), the
//! integration with put/get, the explicit pin API (§3.3) and invalidation.
//!
//! Protocol. A request for `[addr, addr+len)` on rank r consults r's remote firehose
//! table ([`PeerTable::plan`]). A hit is fully one-sided. A miss reserves firehoses
//! (placeholders in state PENDING) and sends one `H_FH_MOVE` request carrying the
//! releases of replaced firehoses, the pieces to pin and, for a small put, the data
//! itself (put-in-move). The target's handler releases, pins (mlock + conduit
//! registration through [`LocalTable`]), writes a carried put, and answers with the
//! units it pinned for us (plus any explicitly registered region the request fell in:
//! those act as prepinned and cost no firehose). Requests touching only pending
//! entries wait for the move in flight instead of sending another.
//!
//! Safety. The target validates everything: pieces must be inside one granule, mapped
//! (`mincore`), outside the library heap; a carried put is written with
//! `process_vm_writev` on itself, which fails with EFAULT on unwritable memory instead
//! of faulting. A bad release is ignored and counted. Refusals travel back in the
//! answer's status and become the initiator's `FH_ERR_*`.
//!
//! Handler context: the move and answer handlers never wait; the local table is
//! locked for a bounded time (no polling under any table lock).
//!
//! Files: `initiator.rs` (acquiring firehoses for an RMA: plan, PENDING waits,
//! sending the move request and waiting for its answer), `target.rs` (the AM entry
//! points of the protocol's handlers, which are Firehose's own:
//! `firehose::protocol`, and the context as their `MoveHost`), `pinner.rs` (mlock + conduit registration for the
//! tables), `pins.rs` (the explicit pin API), `stats.rs` (counters). This file: the
//! subsystem registration, the tables' accessors, invalidation and shutdown.

use super::am::{self, LibHandler, Token};
use super::ctx::CtxInner;
use super::wire::{Category, Frame};
use crate::firehose::local::{Held, LocalBegin, Pinner};
use crate::firehose::remote::{Acq, PeerTable, Plan, Step};
use crate::firehose::settings::Strategy;
use crate::firehose::smp::{self, DaClient, DaTally, Round};
use crate::runtime::config::Pin;
use crate::runtime::error::{Error, Result, Status};
use crate::runtime::os;
use crate::{bail, err};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub use crate::firehose::state::*;
use crate::firehose::wire::{Carried, MoveRequest};

mod initiator;
mod pinner;
mod pins;
mod stats;
mod target;

use initiator::fh_any_read_only;
pub use initiator::{Carry, Grant};
pub use pinner::CtxPinner;
pub use pins::PinHow;
pub use stats::FhSnapshot;
use target::{handle_answer, handle_move};

/// Target side of a move: args [id, nrel, npins, op_addr, op_len, op_kind]; payload:
/// nrel u64 releases, npins (a, b) pairs, then for a carried put its op_len bytes.
/// Answer: args [id, status, n, done], payload: n (kind, start, end) triples, then for
/// a carried get (done) its op_len bytes.
/// Firehose: the move protocol's handlers, pins waiting for answers (progress), and
/// unpinning everything at finalize.
pub(crate) static SUBSYSTEM: super::ctx::Subsystem = super::ctx::Subsystem {
    name: "firehose",
    handlers: &[
        (LibHandler::FhMove, handle_move),
        (LibHandler::FhAnswer, handle_answer),
    ],
    progress: Some(CtxInner::fh_progress_pins),
    shutdown: Some(CtxInner::fh_shutdown),
};

impl CtxInner {
    pub fn fh(&self) -> &FhState {
        &self.fh
    }

    fn strategy(&self) -> Strategy {
        self.fh.params.strategy
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
        matches!(
            self.fh.params.strategy,
            Strategy::Firehose | Strategy::PinEverything
        )
    }

    /// Largest part (bytes from `addr`) of a transfer one acquisition may cover:
    /// at most f firehoses, and (conduits pinning the local side) at most the local
    /// share for the local buffer at `local`.
    pub fn fh_chunk(&self, addr: usize, len: usize, local: usize) -> usize {
        let p = &self.fh.params;
        // A move's request and answer must fit one medium frame.
        let max_pieces =
            p.f.min(MAX_PIECES_PER_MOVE)
                .min(self.am_max_medium() / 96)
                .max(1);
        let mut c = if p.piece_count(addr, len) <= max_pieces {
            len
        } else {
            let (lo, _) = p.granule(addr);
            lo + max_pieces * p.unit_bytes - addr
        };
        if self.fh.local_side {
            let lmax = p.victim_units.max(1);
            while c > 1 && p.piece_count(local, c) > lmax {
                let (lo, _) = p.granule(local + c - 1);
                c = if lo > local { lo - local } else { c / 2 };
            }
        }
        c.max(1)
    }

    /// Target side of a remote invalidation: the firehose half (the registered-region
    /// half is in `mem`).
    pub fn fh_forget(&self, src: usize, start: usize, end: usize) {
        self.fh.peers[src].lock().invalidate(start, end);
    }

    /// Drop every firehose unit overlapping `[a, b)` on this rank, first telling every
    /// peer holding one to forget it and complete its operations (waiting for their
    /// acknowledgements), so no rank keeps using the old mapping. Returns how many
    /// units were unpinned.
    pub fn fh_invalidate(&self, a: usize, b: usize) -> Result<usize> {
        let fh = &self.fh;
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
            // until every holder acknowledged. Moves served meanwhile take new
            // firehoses, which the next round finds.
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
            let c = self.fh_chunk(addr, len, addr);
            if let Grant::Pins(p) = self.fh_acquire_remote(rank, addr, c, Carry::None, true)? {
                self.fh_release_pins(p);
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

    /// Is `[addr, addr+len)` fully covered by `rank`'s explicitly registered region
    /// we know of?
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
