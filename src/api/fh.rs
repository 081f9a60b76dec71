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

use super::am::{self, LibHandler, Token};
use super::ctx::CtxInner;
use super::wire::{Category, Frame};
use crate::firehose::local::{Held, LocalBegin, Pinner};
use crate::firehose::remote::{Acq, PeerTable, Plan, Step};
use crate::firehose::smp::{self, DaClient, DaTally, Round};
use crate::runtime::config::{Pin, Strategy};
use crate::runtime::error::{Error, Result, Status};
use crate::runtime::os;
use crate::{bail, err};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub use crate::firehose::state::*;
use crate::firehose::wire::{Carried, Granted, MoveAnswer, MoveRequest};

/// Pins on behalf of the local table: mlock (the physical resource) + conduit
/// registration; the extent check keeps units out of the heap and registered regions.
pub struct CtxPinner<'a> {
    pub ctx: &'a CtxInner,
    /// The mappings a move handler read once for all its pieces (`None`: read them
    /// when a unit is created).
    pub maps: Option<&'a os::Maps>,
}

impl Pinner for CtxPinner<'_> {
    fn pin(&mut self, s: usize, e: usize) -> Result<bool> {
        let ctx = self.ctx;
        let (ls, le) = inner_pages(s, e);
        let locked = ctx.cfg.pin == Pin::Mlock && le > ls && os::mlock(ls, le - ls).is_ok();
        if ctx.cfg.pin == Pin::Mlock && le > ls && !locked {
            ctx.count(&ctx.stats.mlock_failures, 1);
        }
        if let Err(e2) = ctx.conduit.register(s, e - s) {
            if locked {
                os::munlock(ls, le - ls);
            }
            return Err(e2);
        }
        Ok(locked || ctx.cfg.pin == Pin::None)
    }

    fn unpin(&mut self, s: usize, e: usize, locked: bool) {
        let ctx = self.ctx;
        if let Err(err) = ctx.conduit.deregister(s, e - s) {
            ctx.record_async_error(err);
        }
        let (ls, le) = inner_pages(s, e);
        if locked && ctx.cfg.pin == Pin::Mlock && le > ls {
            os::munlock(ls, le - ls);
        }
    }

    fn extent(&self, a: usize, b: usize, lo: usize, hi: usize) -> Option<(usize, usize, bool)> {
        let ctx = self.ctx;
        let (hb, hl) = ctx.conduit.heap();
        let (mut lo, mut hi) = (lo, hi);
        // Keep out of the library heap and of explicitly registered regions.
        for (s, e) in std::iter::once((hb, hb + hl)).chain(ctx.local_regs.bounds_near(lo, hi)) {
            if s < b && e > a {
                return None;
            }
            if e <= a {
                lo = lo.max(e);
            } else if s >= b {
                hi = hi.min(s);
            }
        }
        // Protection, not only mapping: a unit never spans pages without read
        // access, and is marked read-only unless every page of it is writable.
        match self.maps {
            Some(m) => m.extent(a, b - a, lo, hi),
            None => os::Maps::read().extent(a, b - a, lo, hi),
        }
    }
}

fn inner_pages(s: usize, e: usize) -> (usize, usize) {
    let p = os::page_size();
    let ls = (s + p - 1) & !(p - 1);
    let le = e & !(p - 1);
    (ls, le.max(ls))
}

/// A small transfer that may ride in the move (seed 000's put-in-move, and the same
/// for gets: the answer carries the data).
#[derive(Clone, Copy, Debug)]
pub enum Carry {
    None,
    /// Source of a put.
    Put(*const u8),
    /// Destination of a get.
    Get(*mut u8),
}

/// What an RMA request was granted.
pub enum Grant {
    /// Hold these references until the operation completes.
    Pins(OpPins),
    /// A put was carried by the move and is complete.
    Done,
}

impl Grant {
    fn into_pins(self) -> OpPins {
        match self {
            Grant::Pins(p) => p,
            Grant::Done => OpPins {
                rank: 0,
                remote: vec![],
                local: vec![],
            },
        }
    }
}

/// Does any of `held` lie on memory the target pinned read-only?
fn fh_any_read_only(t: &PeerTable, held: &[Held]) -> bool {
    held.iter().any(|h| t.is_read_only(h.0))
}

/// A local request going through seed 000 §4.1's protocol (all or nothing, so a
/// rollback has nothing to return).
struct LocalReq<'a> {
    ctx: &'a CtxInner,
    addr: usize,
    len: usize,
    /// The table's release count at the last step.
    epoch: u64,
    /// Set once the request waits (see `DaClient::blocking`).
    blocked: Option<Blocked<'a>>,
}

impl DaClient for LocalReq<'_> {
    type Out = Result<Vec<Held>>;
    type Err = Error;

    fn step(&mut self) -> Round<Result<Vec<Held>>> {
        let ctx = self.ctx;
        let fh = &ctx.fh;
        let (a, b) = (self.addr, self.addr + self.len);
        let begin = {
            let mut l = fh.local.lock();
            self.epoch = l.releases;
            l.local_begin(a, b, &mut CtxPinner { ctx, maps: None })
        };
        let r = self.finish(begin);
        // Moves parked on units that are pinned (or dropped) now can run.
        if !fh.parked.lock().is_empty() {
            ctx.fh_drain_parked();
        }
        r
    }

    fn rollback(&mut self) {}

    fn try_hit(&mut self) -> Option<Result<Vec<Held>>> {
        let (a, b) = (self.addr, self.addr + self.len);
        let h = self.ctx.fh.local.lock().local_try(a, b, false)?;
        Some(Ok(h.2))
    }

    fn holds(&self) -> bool {
        false
    }

    fn poll(&mut self, _wait: bool) -> Result<bool> {
        let ctx = self.ctx;
        let fh = &ctx.fh;
        if fh.inflight.lock().iter().any(|q| !q.is_empty()) {
            ctx.rma_flush_all()?;
            return Ok(true);
        }
        if ctx.progress_once()? > 0 {
            return Ok(true);
        }
        // Stuck only if nothing was released since our step and every local
        // reference belongs to an explicit pin whose thread is blocked here too.
        let stuck = {
            let l = fh.local.lock();
            let (refs, pinning) = l.local_refs();
            l.releases == self.epoch
                && !pinning
                && refs <= fh.pin_refs_blocked[ctx.size].load(Ordering::Acquire)
        };
        if !stuck {
            std::thread::yield_now();
        }
        Ok(!stuck)
    }

    fn blocking(&mut self) {
        if self.blocked.is_none() {
            self.blocked = Some(self.ctx.fh_blocked(self.ctx.size));
        }
    }

    fn exhausted(&mut self) -> Error {
        err!(
            NoResource,
            "local pinnable share (MAXVICTIM = {} units) is held by pins that were not released",
            self.ctx.fh.params.victim_units
        )
    }
}

impl LocalReq<'_> {
    /// Phase two of a local request after [`LocalTable::local_begin`].
    fn finish(&self, begin: Result<LocalBegin>) -> Round<Result<Vec<Held>>> {
        match begin {
            Err(e) => Round::Done(Err(e)),
            Ok(LocalBegin::Done(h)) => Round::Done(Ok(h)),
            Ok(LocalBegin::Busy) => Round::Conflict,
            Ok(LocalBegin::Full) => Round::Short,
            Ok(LocalBegin::Pin { held, pins }) => {
                // Phase two, without the table lock (Table 3, third row).
                let ctx = self.ctx;
                let fh = &ctx.fh;
                let results: Vec<Result<bool>> = pins
                    .iter()
                    .map(|&(s, e, _)| CtxPinner { ctx, maps: None }.pin(s, e))
                    .collect();
                let r = fh.local.lock().local_finish(
                    held,
                    &pins,
                    results,
                    &mut CtxPinner { ctx, maps: None },
                );
                Round::Done(r)
            }
        }
    }
}

/// A remote request going through seed 000 §4.1's protocol ([`smp::acquire`]).
struct RemoteReq<'a> {
    ctx: &'a CtxInner,
    rank: usize,
    acq: Acq,
    /// The id the committed move goes by.
    move_id: u64,
    /// Moves the last round found in flight.
    waits: Vec<u64>,
    waited: bool,
    /// The table's release count at the last step.
    epoch: u64,
    /// Set once the request waits (see `DaClient::blocking`).
    blocked: Option<Blocked<'a>>,
}

impl DaClient for RemoteReq<'_> {
    type Out = Step;
    type Err = Error;

    fn step(&mut self) -> Round<Step> {
        let fh = &self.ctx.fh;
        let id = self.ctx.new_id();
        let st = {
            let mut t = fh.peers[self.rank].lock();
            self.epoch = t.releases;
            t.step(&fh.params, &mut self.acq, id)
        };
        match st {
            Step::Hit(_) => Round::Done(st),
            Step::Commit { .. } => {
                self.move_id = id;
                Round::Done(st)
            }
            Step::Wait(w) => {
                self.waits = w;
                self.waited = true;
                Round::Wait
            }
            Step::Short => Round::Short,
            Step::Conflict => Round::Conflict,
        }
    }

    fn rollback(&mut self) {
        self.ctx.fh.peers[self.rank].lock().rollback(&mut self.acq);
    }

    fn try_hit(&mut self) -> Option<Step> {
        let (a, b) = (self.acq.addr, self.acq.addr + self.acq.len);
        let h = self.ctx.fh.peers[self.rank].lock().partial(a, b, true)?;
        Some(Step::Hit(h.2))
    }

    fn holds(&self) -> bool {
        !self.acq.is_clear()
    }

    fn poll(&mut self, wait: bool) -> Result<bool> {
        if wait {
            let w = std::mem::take(&mut self.waits);
            self.ctx.wait_moves(&w)?;
            return Ok(true);
        }
        // seed 000 §3.4 "steady state": poll until operations in flight complete and
        // give their firehoses back.
        if self.ctx.fh_recover(self.rank)? {
            return Ok(true);
        }
        let fh = &self.ctx.fh;
        let pins = fh.pin_refs_blocked[self.rank].load(Ordering::Acquire);
        let stuck = {
            let t = fh.peers[self.rank].lock();
            t.releases == self.epoch && t.only_pins_hold(&self.acq, pins)
        };
        if !stuck {
            std::thread::yield_now();
        }
        Ok(!stuck)
    }

    fn blocking(&mut self) {
        if self.blocked.is_none() {
            self.blocked = Some(self.ctx.fh_blocked(self.rank));
        }
    }

    fn exhausted(&mut self) -> Error {
        if crate::runtime::config::debug_tables() {
            eprintln!(
                "STUCK req {:?} epoch {}\n{}",
                self.acq,
                self.epoch,
                self.ctx.fh.peers[self.rank].lock().debug_summary()
            );
        }
        err!(
            NoResource,
            "all {} firehoses to rank {} are held by pins that were not released (fh_release them)",
            self.ctx.fh.params.f,
            self.rank
        )
    }
}

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

    /// Acquire remote firehoses for `[addr, addr+len)` on `rank` (one chunk, see
    /// [`Self::fh_chunk`]). `put`: the source of a blocking or non-blocking put, which
    /// may travel in the move on a miss.
    pub fn fh_acquire_remote(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        carry: Carry,
        write: bool,
    ) -> Result<Grant> {
        let g = self.fh_acquire_remote_any(rank, addr, len, carry, write)?;
        if let Grant::Pins(p) = &g {
            if write && fh_any_read_only(&self.fh.peers[rank].lock(), &p.remote) {
                self.fh_release_pins(g.into_pins());
                bail!(
                    Access,
                    "[{:#x}, +{}) of rank {} is read-only memory there: puts and atomics are refused",
                    addr,
                    len,
                    rank
                );
            }
        }
        Ok(g)
    }

    fn fh_acquire_remote_any(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        carry: Carry,
        write: bool,
    ) -> Result<Grant> {
        debug_assert!(rank != self.rank && len > 0);
        let fh = &self.fh;
        // Fast path: one live entry covers it.
        if self.fh_hits_one_sided() {
            if let Some(h) = fh.peers[rank].lock().hit_one(addr, addr + len, write) {
                self.count(&self.hot.shard().hits, 1);
                return Ok(Grant::Pins(OpPins {
                    rank,
                    remote: vec![h],
                    local: vec![],
                }));
            }
        }
        let always = matches!(
            self.strategy(),
            Strategy::RendezvousKeep | Strategy::RendezvousUnpin
        );
        let mut first = true;
        let mut missed = false;
        let mut waited = false;
        let t0 = Instant::now();
        // References kept from our own committed move until the request is served
        // (so no other request can replace those firehoses meanwhile).
        let mut keep: Vec<Held> = Vec::new();
        let res = loop {
            let req = self.new_id();
            let mut c = RemoteReq {
                ctx: self,
                rank,
                acq: Acq::new(req, addr, len, always && first),
                move_id: 0,
                waits: Vec::new(),
                waited: false,
                epoch: 0,
                blocked: None,
            };
            let mut tally = DaTally::default();
            let r = smp::acquire(&fh.gates[rank], req, &mut c, &mut tally);
            c.blocked = None;
            self.fh_tally(&tally);
            waited |= c.waited;
            match r {
                Err(e) => break Err(e),
                Ok(Step::Hit(held)) => {
                    break Ok(Grant::Pins(OpPins {
                        rank,
                        remote: held,
                        local: vec![],
                    }))
                }
                Ok(Step::Commit { releases, pins }) => {
                    missed = true;
                    let id = c.move_id;
                    keep.append(&mut c.acq.held);
                    let room = self
                        .am_max_medium()
                        .saturating_sub(8 * releases.len() + 40 * pins.len());
                    let carry = if first && len <= fh.params.putinmove && len <= room {
                        carry
                    } else {
                        Carry::None
                    };
                    let done = self.send_move(rank, id, &releases, &pins, addr, len, carry, write);
                    keep.append(&mut fh.peers[rank].lock().take_handoff(id));
                    match done {
                        Ok(true) => break Ok(Grant::Done),
                        Ok(false) => {}
                        Err(e) => break Err(e),
                    }
                    // Our move is answered and `keep` holds its units: the range is
                    // normally a hit now. Take it without the gate (never wait there
                    // holding references: the DA winner may need them).
                    let mut acq = Acq::new(self.new_id(), addr, len, false);
                    let mut t = fh.peers[rank].lock();
                    // (u64::MAX: a move id never used, in case it commits.)
                    match t.step(&fh.params, &mut acq, u64::MAX) {
                        Step::Hit(held) => {
                            for h in keep.drain(..) {
                                t.release(h);
                            }
                            break Ok(Grant::Pins(OpPins {
                                rank,
                                remote: held,
                                local: vec![],
                            }));
                        }
                        Step::Commit { .. } => {
                            // That move is never sent: undo.
                            t.abort_move(u64::MAX);
                            for h in std::mem::take(&mut acq.held) {
                                t.release(h);
                            }
                        }
                        _ => t.rollback(&mut acq),
                    }
                    for h in keep.drain(..) {
                        t.release(h);
                    }
                }
                Ok(other) => {
                    debug_assert!(false, "acquire returned {other:?}");
                    break Err(err!(Internal, "firehose acquisition ended in {:?}", other));
                }
            }
            first = false;
        };
        if !keep.is_empty() {
            let mut t = fh.peers[rank].lock();
            for h in keep {
                t.release(h);
            }
        }
        if missed {
            self.count(&fh.stats.misses, 1);
        } else if waited {
            self.count(&fh.stats.pending_hits, 1);
        } else {
            self.count(&fh.stats.hits, 1);
        }
        if missed || waited {
            self.count(&fh.stats.stall_ns, t0.elapsed().as_nanos() as u64);
        }
        res
    }

    /// Count this thread's pin references in table `idx` as blocked on that
    /// table's gate until the guard drops. (A thread blocked on another gate will
    /// get going once that gate's resources free up, independently of this one.)
    fn fh_blocked(&self, idx: usize) -> Blocked<'_> {
        let me = self as *const CtxInner as usize;
        let refs: Vec<(usize, u64)> = MY_PIN_REFS.with(|m| {
            m.borrow()
                .iter()
                .filter(|e| e.0 == me && e.1 == idx)
                .map(|e| (e.1, e.2))
                .collect()
        });
        for &(i, n) in &refs {
            self.fh.pin_refs_blocked[i].fetch_add(n, Ordering::AcqRel);
        }
        Blocked { fh: &self.fh, refs }
    }

    /// Add one acquisition's deadlock-avoidance counters to the context's and this
    /// thread's statistics.
    fn fh_tally(&self, t: &DaTally) {
        let st = &self.fh.stats;
        let ns = t.stalled.as_nanos() as u64;
        if t.entered {
            self.count(&st.da_entries, 1);
            self.count(&st.da_stall_ns, ns);
        }
        if t.won {
            self.count(&st.da_wins, 1);
        }
        self.count(&st.rollbacks, t.rollbacks);
        self.count(&st.da_waits, t.waits);
        THREAD_STATS.with(|c| {
            let mut x = c.get();
            x.requests += 1;
            x.da_entries += t.entered as u64;
            x.da_wins += t.won as u64;
            x.rollbacks += t.rollbacks;
            x.da_waits += t.waits;
            x.stall_ns += if t.entered { ns } else { 0 };
            c.set(x);
        });
    }

    /// Send one move and wait for its answer. Returns whether a carried put was
    /// written by the target (or a carried get's data delivered).
    #[allow(clippy::too_many_arguments)]
    fn send_move(
        &self,
        rank: usize,
        id: u64,
        releases: &[usize],
        pins: &[(usize, usize)],
        addr: usize,
        len: usize,
        carry: Carry,
        write: bool,
    ) -> Result<bool> {
        let fh = &self.fh;
        let (carried, put_data): (Carried, &[u8]) = match carry {
            Carry::None => (Carried::None, &[]),
            // SAFETY: the caller of put guarantees `src` is readable for `len` bytes
            // until the operation completes; the encoder copies it now.
            Carry::Put(src) => (Carried::Put { addr, len }, unsafe {
                std::slice::from_raw_parts(src, len)
            }),
            Carry::Get(d) => {
                fh.get_dst.lock().insert(id, (d as usize, len));
                (Carried::Get { addr, len }, &[])
            }
        };
        let (args, payload) = MoveRequest {
            id,
            releases: releases.to_vec(),
            pins: pins.to_vec(),
            carried,
            write,
            put_data,
        }
        .encode();
        fh.moves.lock().insert(id, None);
        if let Err(e) = self.am_request(
            rank,
            Category::Medium,
            LibHandler::FhMove as u8,
            &args,
            &payload,
            None,
        ) {
            fh.moves.lock().remove(&id);
            fh.get_dst.lock().remove(&id);
            fh.peers[rank].lock().abort_move(id);
            return Err(e);
        }
        self.count(&fh.stats.moves_sent, 1);
        let w = self.wait_for(
            crate::api::stall::Wait::new(
                "fh_put/fh_get/atomic/fh_remote_pin (firehose miss)",
                Some(rank),
                "the answer to a firehose move (the target pins its memory)",
            ),
            || Ok(fh.moves.lock().get(&id).is_some_and(|s| s.is_some())),
        );
        let ans = fh.moves.lock().remove(&id).flatten();
        fh.get_dst.lock().remove(&id);
        if w.is_err() && ans.is_none() {
            // Given up (stall abort, dead peer): drop the move's placeholders so later
            // requests do not wait for it. A late answer still enters its units (the
            // target did pin them for us); its releases are sent again, and the
            // target ignores the duplicates.
            fh.peers[rank].lock().abort_move(id);
        }
        w?;
        match ans {
            Some((0, done, _)) => {
                if done {
                    self.count(&fh.stats.putinmove, 1);
                }
                Ok(done)
            }
            Some((code, _, why)) => {
                let st = Status::from_code(code).unwrap_or(Status::Access);
                if st == Status::Access {
                    self.count(&self.stats.access_refused, 1);
                }
                let dir = if write { "a put to" } else { "a get from" };
                Err(Error::new(
                    st,
                    match st {
                        Status::Access => format!(
                            "rank {} refused {} [{:#x}, +{}): the memory is {} there",
                            rank,
                            dir,
                            addr,
                            len,
                            WHY.get(why as usize).unwrap_or(&WHY[0])
                        ),
                        Status::NoResource => format!(
                            "rank {} could not pin [{:#x}, +{}) for {}: its pinnable memory \
                             (M + MAXVICTIM, FH_FIREHOSE_M) is used up",
                            rank, addr, len, dir
                        ),
                        s => format!(
                            "rank {} refused to pin [{:#x}, +{}): {}",
                            rank,
                            addr,
                            len,
                            s.describe().trim_end_matches('\0')
                        ),
                    },
                ))
            }
            None => bail!(Internal, "move to rank {} ended without an answer", rank),
        }
    }

    fn wait_moves(&self, ids: &[u64]) -> Result<()> {
        let fh = &self.fh;
        // A move whose slot is gone was answered and consumed by its sender.
        let what = crate::api::stall::Wait::new(
            "fh_put/fh_get (firehose miss)",
            None,
            "the answer to another thread's firehose move",
        );
        self.wait_for(what, || {
            let m = fh.moves.lock();
            Ok(ids.iter().all(|i| m.get(i).map_or(true, |s| s.is_some())))
        })
    }

    /// Complete operations to `rank` (or all, for local pins) and release what they
    /// held. True if that freed anything.
    pub(crate) fn fh_recover(&self, rank: usize) -> Result<bool> {
        am::check_not_in_handler("firehose replacement")?;
        let before = self.fh.inflight.lock()[rank].len();
        if before == 0 {
            // No operation of ours holds firehoses to that rank. Moves still in
            // flight (non-blocking pins, other threads) will free or fill entries:
            // progress and retry. Otherwise pins the application holds are in the way.
            let moving = !self.fh.moves.lock().is_empty();
            if self.progress_once()? == 0 {
                self.conduit.idle();
            }
            return Ok(moving);
        }
        self.rma_flush_rank(rank)?;
        Ok(self.fh.inflight.lock()[rank].len() < before)
    }

    /// Record references held by an operation with sequence `seq` to `rank`.
    pub fn fh_hold(&self, rank: usize, seq: u64, pins: OpPins) {
        if !pins.is_empty() {
            self.fh.inflight.lock()[rank].push_back((seq, pins));
        }
    }

    /// Operations to `rank` up to `completed` finished: release their references.
    pub fn fh_completed(&self, rank: usize, completed: u64) {
        let done: Vec<OpPins> = {
            let mut g = self.fh.inflight.lock();
            let q = &mut g[rank];
            let mut v = Vec::new();
            while q.front().is_some_and(|(s, _)| *s <= completed) {
                v.push(q.pop_front().expect("front").1);
            }
            v
        };
        for p in done {
            self.fh_release_pins(p);
        }
    }

    /// Drop an operation's or a pin's references.
    pub fn fh_release_pins(&self, p: OpPins) {
        let fh = &self.fh;
        if !p.remote.is_empty() {
            let mut t = fh.peers[p.rank].lock();
            for h in &p.remote {
                t.release(*h);
            }
            if self.strategy() == Strategy::RendezvousUnpin {
                // The baseline unpins after every operation: the release rides on the
                // next move to that rank (a separate message could be handled after
                // that move — MPI may complete our pre-posted receives out of order —
                // and the target would briefly hold more than f of our firehoses).
                while t.evict_one().is_some() {}
            }
        }
        if !p.local.is_empty() {
            let mut l = fh.local.lock();
            let mut pinner = CtxPinner {
                ctx: self,
                maps: None,
            };
            for h in p.local {
                l.local_release(h, &mut pinner);
            }
        }
    }

    /// Pin local `[addr, addr+len)` for an operation (conduits that need the local
    /// side registered, and `fh_local_pin`): seed 000 §4.1's local protocol — an
    /// all-or-nothing two-phase request; when the local share is used up or a unit
    /// it needs is being pinned by another thread it holds nothing and retries, and
    /// after `DA_LIMIT` rounds it posts the local DA flag so the others wait.
    pub fn fh_acquire_local(&self, addr: usize, len: usize) -> Result<Vec<Held>> {
        let fh = &self.fh;
        {
            let mut l = fh.local.lock();
            if let Some((_, _, h)) = l.local_try(addr, addr + len, false) {
                self.count(&fh.stats.local_hits, 1);
                return Ok(h);
            }
        }
        let req = self.new_id();
        let mut c = LocalReq {
            ctx: self,
            addr,
            len,
            epoch: 0,
            blocked: None,
        };
        let mut tally = DaTally::default();
        let r = smp::acquire(&fh.local_gate, req, &mut c, &mut tally);
        self.fh_tally(&tally);
        let held = r??;
        self.count(&fh.stats.local_misses, 1);
        Ok(held)
    }

    /// Run the moves handlers parked because they met a unit being pinned, and
    /// answer them (by request: their handler returned long ago).
    fn fh_drain_parked(&self) {
        let list = std::mem::take(&mut *self.fh.parked.lock());
        for pm in list {
            let reply = |args: &[u64], payload: &[u8]| {
                let _ = self.am_request(
                    pm.src,
                    Category::Medium,
                    LibHandler::FhAnswer as u8,
                    args,
                    payload,
                    None,
                );
            };
            // Parks itself again if the unit is still being pinned.
            process_move(self, pm.src, &pm.args, &pm.payload, &reply);
        }
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

    /// Per-rank summary printed at finalize with FH_STATS=1.
    pub fn stats_summary(&self) -> String {
        let s = self.fh_stats();
        let hr = if s.hits + s.misses > 0 {
            100.0 * s.hits as f64 / (s.hits + s.misses) as f64
        } else {
            100.0
        };
        format!(
            "firehose[{}] stats: puts {} gets {} | hits {} misses {} pending-hits {} (hit rate {:.3}%) | local hits {} misses {} | moves sent {} handled {} put-in-move {} | pins {} unpins {} pinned {} B (peak {} B, limit {} B) victims {} B local, {} remote | f {} used {} | stalled {:.3} ms | DA entries {} wins {} rollbacks {} waits {} ({:.3} ms) | AMs sent {} handled {} | bad releases refused {}\n",
            self.rank,
            s.puts,
            s.gets,
            s.hits,
            s.misses,
            s.pending_hits,
            hr,
            s.local_hits,
            s.local_misses,
            s.moves_sent,
            s.moves_handled,
            s.putinmove,
            s.pins,
            s.unpins,
            s.bytes_pinned,
            s.bytes_pinned_peak,
            s.limit_bytes,
            s.victim_local_bytes,
            s.victim_remote,
            s.firehoses_per_peer,
            s.firehoses_used,
            s.stall_ns as f64 / 1e6,
            s.da_entries,
            s.da_wins,
            s.rollbacks,
            s.da_waits,
            s.da_stall_ns as f64 / 1e6,
            s.am_sent,
            s.am_handled,
            self.fh.stats.bad_releases.load(Ordering::Relaxed)
        )
    }

    /// A snapshot of every counter `fh_stats_t` reports.
    pub fn fh_stats(&self) -> FhSnapshot {
        let fh = &self.fh;
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let lc = fh.local.lock().counts;
        let (mut used, mut idle) = (0u64, 0u64);
        for p in &fh.peers {
            let p = p.lock();
            used += p.used as u64;
            idle += p.idle as u64;
        }
        let mut st = self.stats.snapshot();
        st.puts += self.hot.sum(|s| &s.puts);
        st.gets += self.hot.sum(|s| &s.gets);
        st.put_bytes += self.hot.sum(|s| &s.put_bytes);
        st.get_bytes += self.hot.sum(|s| &s.get_bytes);
        FhSnapshot {
            struct_size: std::mem::size_of::<FhSnapshot>() as u64,
            hits: g(&fh.stats.hits) + self.hot.sum(|s| &s.hits),
            misses: g(&fh.stats.misses),
            pending_hits: g(&fh.stats.pending_hits),
            local_hits: g(&fh.stats.local_hits),
            local_misses: g(&fh.stats.local_misses),
            try_hits: g(&fh.stats.try_hits),
            try_misses: g(&fh.stats.try_misses),
            partial_pins: g(&fh.stats.partial_pins),
            moves_sent: g(&fh.stats.moves_sent),
            moves_handled: g(&fh.stats.moves_handled),
            putinmove: g(&fh.stats.putinmove),
            pins: lc.pins,
            unpins: lc.unpins,
            bytes_pinned: lc.bytes as u64,
            bytes_pinned_peak: lc.peak as u64,
            limit_bytes: fh.params.limit_bytes() as u64,
            victim_local_bytes: lc.idle_bytes as u64,
            victim_remote: idle,
            firehoses_used: used,
            firehoses_per_peer: fh.params.f.min(u32::MAX as usize) as u64,
            mode: matches!(fh.params.mode, crate::runtime::config::FhMode::Region) as u64,
            unit_bytes: fh.params.unit_bytes as u64,
            stall_ns: g(&fh.stats.stall_ns),
            am_sent: st.am_requests_sent + st.am_replies_sent,
            am_handled: st.am_handled,
            access_refused: st.access_refused,
            mlock_failures: st.mlock_failures + lc.mlock_failures,
            puts: st.puts,
            gets: st.gets,
            put_bytes: st.put_bytes,
            get_bytes: st.get_bytes,
            da_entries: g(&fh.stats.da_entries),
            da_wins: g(&fh.stats.da_wins),
            rollbacks: g(&fh.stats.rollbacks),
            da_waits: g(&fh.stats.da_waits),
            da_stall_ns: g(&fh.stats.da_stall_ns),
        }
    }

    /// `fh_stats_reset`: zero the counters (levels such as bytes pinned stay; the
    /// peak restarts from the current level).
    pub fn fh_stats_reset(&self) {
        self.fh.stats.reset();
        self.stats.reset();
        self.hot.reset();
        let mut l = self.fh.local.lock();
        l.counts.pins = 0;
        l.counts.unpins = 0;
        l.counts.mlock_failures = 0;
        l.counts.peak = l.counts.bytes;
    }

    // ---------------------------------------------------------------- explicit API

    fn check_range(&self, addr: usize, len: usize) -> Result<usize> {
        if addr == 0 {
            bail!(InvalidArg, "address is NULL");
        }
        if len == 0 {
            bail!(InvalidArg, "len is 0");
        }
        addr.checked_add(len)
            .ok_or_else(|| err!(InvalidArg, "[{:#x}, +{}) wraps around", addr, len))
    }

    /// A pin of memory that needs none (library heap, registered regions: they act
    /// as prepinned): it holds no references.
    fn prepinned_pin(&self, rank: Option<usize>, addr: usize, len: usize) -> Box<PinObj> {
        Box::new(PinObj {
            magic: PIN_MAGIC,
            owner: self.id(),
            start: addr,
            len,
            rank,
            pins: OpPins {
                rank: rank.unwrap_or(self.rank),
                remote: vec![],
                local: vec![],
            },
        })
    }

    /// `fh_local_pin` and its try/partial forms.
    pub fn local_pin(&self, addr: usize, len: usize, how: PinHow) -> Result<Box<PinObj>> {
        self.local_pin_inner(addr, len, how)
            .map(|p| self.tracked(p))
    }

    fn local_pin_inner(&self, addr: usize, len: usize, how: PinHow) -> Result<Box<PinObj>> {
        self.check_live()?;
        let end = self.check_range(addr, len)?;
        if self.plain_access(self.rank, addr, len).is_some() {
            return Ok(self.prepinned_pin(None, addr, len));
        }
        let fh = &self.fh;
        let (s, e, held) = match how {
            PinHow::Blocking => {
                am::check_not_in_handler("fh_local_pin")?;
                if fh.params.piece_count(addr, len) > fh.params.victim_units.max(1) {
                    bail!(
                        NoResource,
                        "{} bytes need more units than the local share (MAXVICTIM = {} units of {} bytes)",
                        len,
                        fh.params.victim_units,
                        fh.params.unit_bytes
                    );
                }
                (addr, end, self.fh_acquire_local(addr, len)?)
            }
            PinHow::Try | PinHow::Partial => {
                let r = fh.local.lock().local_try(addr, end, how == PinHow::Partial);
                match r {
                    Some(x) => {
                        self.count(&fh.stats.try_hits, 1);
                        if how == PinHow::Partial {
                            self.count(&fh.stats.partial_pins, 1);
                        }
                        x
                    }
                    None => {
                        self.count(&fh.stats.try_misses, 1);
                        bail!(NotPinned, "[{:#x}, +{}) is not pinned here", addr, len)
                    }
                }
            }
        };
        Ok(Box::new(PinObj {
            magic: PIN_MAGIC,
            owner: self.id(),
            start: s,
            len: e - s,
            rank: None,
            pins: OpPins {
                rank: self.rank,
                remote: vec![],
                local: held,
            },
        }))
    }

    /// `fh_try_remote_pin` / `fh_partial_remote_pin`.
    pub fn remote_pin_try(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        partial: bool,
    ) -> Result<Box<PinObj>> {
        self.remote_pin_try_inner(rank, addr, len, partial)
            .map(|p| self.tracked(p))
    }

    fn remote_pin_try_inner(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        partial: bool,
    ) -> Result<Box<PinObj>> {
        self.check_live()?;
        let end = self.check_range(addr, len)?;
        if rank == self.rank {
            bail!(InvalidArg, "rank {} is this rank: use fh_local_pin", rank);
        }
        if self.plain_access(rank, addr, len).is_some() {
            self.count(&self.fh.stats.try_hits, 1);
            return Ok(self.prepinned_pin(Some(rank), addr, len));
        }
        let fh = &self.fh;
        let r = fh.peers[rank].lock().partial(addr, end, !partial);
        match r {
            Some((s, e, held)) => {
                self.count(&fh.stats.try_hits, 1);
                if partial {
                    self.count(&fh.stats.partial_pins, 1);
                }
                Ok(Box::new(PinObj {
                    magic: PIN_MAGIC,
                    owner: self.id(),
                    start: s,
                    len: e - s,
                    rank: Some(rank),
                    pins: OpPins {
                        rank,
                        remote: held,
                        local: vec![],
                    },
                }))
            }
            None => {
                self.count(&fh.stats.try_misses, 1);
                bail!(
                    NotPinned,
                    "[{:#x}, +{}) on rank {} is not covered by firehoses of this rank",
                    addr,
                    len,
                    rank
                )
            }
        }
    }

    fn check_remote_pin_size(&self, addr: usize, len: usize) -> Result<()> {
        let p = &self.fh.params;
        let n = p.piece_count(addr, len);
        if n > p.f.min(MAX_PIECES_PER_MOVE) {
            bail!(
                NoResource,
                "[{:#x}, +{}) needs {} firehoses; a pin may use at most {} (f) — pin it in parts",
                addr,
                len,
                n,
                p.f.min(MAX_PIECES_PER_MOVE)
            );
        }
        Ok(())
    }

    /// `fh_remote_pin`, blocking.
    pub fn remote_pin(&self, rank: usize, addr: usize, len: usize) -> Result<Box<PinObj>> {
        self.remote_pin_inner(rank, addr, len)
            .map(|p| self.tracked(p))
    }

    fn remote_pin_inner(&self, rank: usize, addr: usize, len: usize) -> Result<Box<PinObj>> {
        self.check_live()?;
        am::check_not_in_handler("fh_remote_pin")?;
        self.check_range(addr, len)?;
        if rank == self.rank {
            bail!(InvalidArg, "rank {} is this rank: use fh_local_pin", rank);
        }
        if self.plain_access(rank, addr, len).is_some() {
            return Ok(self.prepinned_pin(Some(rank), addr, len));
        }
        self.check_remote_pin_size(addr, len)?;
        match self.fh_acquire_remote(rank, addr, len, Carry::None, true)? {
            Grant::Pins(pins) => Ok(Box::new(PinObj {
                magic: PIN_MAGIC,
                owner: self.id(),
                start: addr,
                len,
                rank: Some(rank),
                pins,
            })),
            Grant::Done => bail!(Internal, "a pin carried a put"),
        }
    }

    /// `fh_remote_pin` with a callback: a hit returns the pin; a miss sends the move
    /// and returns `None`; `cb` runs later from a library call on this context.
    pub fn remote_pin_async(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        cb: Box<dyn FnOnce(Result<Box<PinObj>>) + Send>,
    ) -> Result<Option<Box<PinObj>>> {
        self.check_live()?;
        am::check_not_in_handler("fh_remote_pin")?;
        self.check_range(addr, len)?;
        if rank == self.rank {
            bail!(InvalidArg, "rank {} is this rank: use fh_local_pin", rank);
        }
        if self.plain_access(rank, addr, len).is_some() {
            return Ok(Some(self.prepinned_pin(Some(rank), addr, len)));
        }
        self.check_remote_pin_size(addr, len)?;
        let mut pp = PendingPin {
            rank,
            addr,
            len,
            waits: vec![],
            own: None,
            cb,
            write: true,
            track: true,
        };
        match self.advance_pin(&mut pp)? {
            Some(pin) => Ok(Some(pin)),
            None => {
                self.fh.pending_pins.lock().push(pp);
                Ok(None)
            }
        }
    }

    /// Acquire firehoses for a non-blocking transfer without waiting (seed 002:
    /// non-blocking even on a miss): `Ok(Some)` on a hit; `Ok(None)` when a move was
    /// sent, and `done` receives the references (or the refusal) from a later
    /// library call on this context. `Err(NoResource)`: more than one move's worth of
    /// firehoses (the caller takes the blocking path).
    pub fn fh_acquire_async(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
        write: bool,
        done: Box<dyn FnOnce(Result<OpPins>) + Send>,
    ) -> Result<Option<OpPins>> {
        self.check_remote_pin_size(addr, len)?;
        let mut pp = PendingPin {
            rank,
            addr,
            len,
            waits: vec![],
            own: None,
            cb: Box::new(move |r: Result<Box<PinObj>>| done(r.map(|p| p.pins))),
            write,
            track: false,
        };
        match self.advance_pin(&mut pp)? {
            Some(pin) => Ok(Some(pin.pins)),
            None => {
                self.fh.pending_pins.lock().push(pp);
                Ok(None)
            }
        }
    }

    /// One non-blocking step of a pending pin: `Some` when it holds its references.
    fn advance_pin(&self, pp: &mut PendingPin) -> Result<Option<Box<PinObj>>> {
        let fh = &self.fh;
        {
            let m = fh.moves.lock();
            if pp
                .waits
                .iter()
                .any(|i| m.get(i).is_some_and(|s| s.is_none()))
            {
                return Ok(None);
            }
        }
        // Consume the answer of our own move (errors end the pin). Moves of other
        // requests we waited for are theirs to consume: their senders wait on them.
        pp.waits.clear();
        if let Some(id) = pp.own.take() {
            if let Some(Some((code, _, _))) = fh.moves.lock().remove(&id) {
                if code != 0 {
                    let st = Status::from_code(code).unwrap_or(Status::Access);
                    return Err(Error::new(
                        st,
                        format!(
                            "rank {} refused to pin [{:#x}, +{})",
                            pp.rank, pp.addr, pp.len
                        ),
                    ));
                }
            }
        }
        let id = self.new_id();
        if fh.gates[pp.rank].held_by_other(id) {
            // A request won seed 000 §4.1's deadlock avoidance: let it finish before
            // this pin competes for firehoses again (it would only steal them back).
            return Ok(None);
        }
        let plan = fh.peers[pp.rank]
            .lock()
            .plan(&fh.params, pp.addr, pp.len, id, false);
        match plan {
            Plan::Hit(held) => {
                let pins = OpPins {
                    rank: pp.rank,
                    remote: held,
                    local: vec![],
                };
                if pp.write && fh_any_read_only(&fh.peers[pp.rank].lock(), &pins.remote) {
                    self.fh_release_pins(pins);
                    bail!(
                        Access,
                        "[{:#x}, +{}) of rank {} is read-only memory there: puts and atomics are refused",
                        pp.addr,
                        pp.len,
                        pp.rank
                    );
                }
                let pin = Box::new(PinObj {
                    magic: PIN_MAGIC,
                    owner: self.id(),
                    start: pp.addr,
                    len: pp.len,
                    rank: Some(pp.rank),
                    pins,
                });
                Ok(Some(if pp.track { self.tracked(pin) } else { pin }))
            }
            Plan::Wait(ids) => {
                pp.waits = ids;
                Ok(None)
            }
            Plan::NeedReplacements => {
                // Every firehose to that peer is referenced by operations in flight:
                // the waiter completes some (`fh_recover`), then this tries again.
                self.fh.starved[pp.rank].store(true, Ordering::Release);
                Ok(None)
            }
            Plan::Move { releases, pins } => {
                let (args, payload) = MoveRequest {
                    id,
                    releases,
                    pins,
                    carried: Carried::None,
                    write: pp.write,
                    put_data: &[],
                }
                .encode();
                fh.moves.lock().insert(id, None);
                if let Err(e) = self.am_request(
                    pp.rank,
                    Category::Medium,
                    LibHandler::FhMove as u8,
                    &args,
                    &payload,
                    None,
                ) {
                    fh.moves.lock().remove(&id);
                    fh.peers[pp.rank].lock().abort_move(id);
                    return Err(e);
                }
                self.count(&fh.stats.moves_sent, 1);
                self.count(&fh.stats.misses, 1);
                pp.waits = vec![id];
                pp.own = Some(id);
                Ok(None)
            }
        }
    }

    /// Advance pending non-blocking pins; run the callbacks of finished ones (outside
    /// every lock, marked as handler context: they must not block).
    pub fn fh_progress_pins(&self) {
        if am::in_handler() {
            return;
        }
        let mut list = {
            let mut g = self.fh.pending_pins.lock();
            if g.is_empty() {
                return;
            }
            std::mem::take(&mut *g)
        };
        let mut keep = Vec::new();
        let mut ready = Vec::new();
        for mut pp in list.drain(..) {
            match self.advance_pin(&mut pp) {
                Ok(None) => keep.push(pp),
                Ok(Some(pin)) => ready.push((pp.cb, Ok(pin))),
                Err(e) => ready.push((pp.cb, Err(e))),
            }
        }
        self.fh.pending_pins.lock().extend(keep);
        for (cb, r) in ready {
            am::run_as_handler(|| cb(r));
        }
    }

    /// `fh_release`.
    pub fn release_pin(&self, pin: PinObj) -> Result<()> {
        let (rank, nr, nl) = (pin.pins.rank, pin.pins.remote.len(), pin.pins.local.len());
        self.fh_release_pins(pin.pins);
        // Uncounted only after the references are gone (a waiter comparing the
        // two may see more references than pins, never fewer: it keeps waiting).
        self.fh.pin_refs[rank].fetch_sub(nr as u64, Ordering::AcqRel);
        self.fh.pin_refs[self.size].fetch_sub(nl as u64, Ordering::AcqRel);
        let me = self as *const CtxInner as usize;
        my_pin_refs_add(me, rank, nr as u64, false);
        my_pin_refs_add(me, self.size, nl as u64, false);
        Ok(())
    }

    /// Count an explicit pin's references (see `FhState::pin_refs`).
    fn tracked(&self, p: Box<PinObj>) -> Box<PinObj> {
        let fh = &self.fh;
        fh.pin_refs[p.pins.rank].fetch_add(p.pins.remote.len() as u64, Ordering::AcqRel);
        fh.pin_refs[self.size].fetch_add(p.pins.local.len() as u64, Ordering::AcqRel);
        let me = self as *const CtxInner as usize;
        my_pin_refs_add(me, p.pins.rank, p.pins.remote.len() as u64, true);
        my_pin_refs_add(me, self.size, p.pins.local.len() as u64, true);
        p
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

/// Firehose and RMA statistics of one context (fh_stats_get). Counters count since
/// init or the last fh_stats_reset; `bytes_pinned`, `victim_*`, `firehoses_used` are
/// current levels; `limit_bytes`, `firehoses_per_peer`, `mode`, `unit_bytes` are
/// parameters. Hit rate = hits / (hits + misses).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct FhSnapshot {
    /// sizeof(fh_stats_t) of the library (set by fh_stats_get).
    pub struct_size: u64,
    /// Remote accesses fully covered by live firehoses (one-sided).
    pub hits: u64,
    /// Remote accesses that sent a move (one round trip).
    pub misses: u64,
    /// Remote accesses that waited for a move already in flight (no new message).
    pub pending_hits: u64,
    /// Local pins (conduits that register the local side) found / not found pinned.
    pub local_hits: u64,
    pub local_misses: u64,
    /// fh_try_* / fh_partial_* outcomes.
    pub try_hits: u64,
    pub try_misses: u64,
    pub partial_pins: u64,
    /// Move requests sent by this rank and handled for peers.
    pub moves_sent: u64,
    pub moves_handled: u64,
    /// Small puts and gets that travelled inside their move (no separate RMA).
    pub putinmove: u64,
    /// Units pinned and unpinned on this rank.
    pub pins: u64,
    pub unpins: u64,
    /// Bytes pinned by firehose on this rank now, the peak, and the bound M+MAXVICTIM.
    pub bytes_pinned: u64,
    pub bytes_pinned_peak: u64,
    pub limit_bytes: u64,
    /// Pinned but unreferenced bytes kept for reuse (local victim FIFO).
    pub victim_local_bytes: u64,
    /// Idle firehoses this rank holds into peers (remote victim FIFOs).
    pub victim_remote: u64,
    /// Firehoses this rank holds into all peers, and f (per peer).
    pub firehoses_used: u64,
    pub firehoses_per_peer: u64,
    /// 0 page mode, 1 region mode; the unit (page or largest region) in bytes.
    pub mode: u64,
    pub unit_bytes: u64,
    /// Nanoseconds spent waiting for firehose moves and replacements.
    pub stall_ns: u64,
    /// Active messages sent (requests + replies) and handled.
    pub am_sent: u64,
    pub am_handled: u64,
    /// Accesses refused because the target memory was not accessible.
    pub access_refused: u64,
    /// Pins that could not be mlocked (RLIMIT_MEMLOCK) and were registered only.
    pub mlock_failures: u64,
    /// Put/get operations and bytes.
    pub puts: u64,
    pub gets: u64,
    pub put_bytes: u64,
    pub get_bytes: u64,
    /// Firehose-SMP (seed 000 §4, §5): acquisitions that left the easy path and
    /// entered deadlock avoidance; that posted the DA flag; rollbacks; sleeps on the
    /// "no deadlock" condition variable; nanoseconds spent in deadlock avoidance.
    pub da_entries: u64,
    pub da_wins: u64,
    pub rollbacks: u64,
    pub da_waits: u64,
    pub da_stall_ns: u64,
}

/// How a local pin behaves on a miss.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PinHow {
    Blocking,
    Try,
    Partial,
}


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

pub(crate) fn handle_move(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let reply = |args: &[u64], payload: &[u8]| {
        let _ = ctx.am_reply(
            tok,
            Category::Medium,
            LibHandler::FhAnswer as u8,
            args,
            payload,
            None,
        );
    };
    process_move(ctx, tok.src, f.args(), f.payload, &reply);
}

/// The body of a move (see [`handle_move`]); answers through `reply`. False: parked
/// (nothing was done yet; it runs again from [`CtxInner::fh_drain_parked`]).
/// A frame that is not a move request is answered with `FH_ERR_INVALID_ARG` (the
/// mover waits for an answer, so it is never dropped).
fn process_move(
    ctx: &CtxInner,
    src: usize,
    args: &[u64],
    body: &[u8],
    reply: &dyn Fn(&[u64], &[u8]),
) -> bool {
    let Some(req) = MoveRequest::decode(args, body) else {
        if let Some(&id) = args.first() {
            let (a, p) = refusal(id, Status::InvalidArg, 0, 0).encode();
            reply(&a, &p);
        }
        return true;
    };
    let fh = &ctx.fh;
    // Puts and atomics need writable memory, gets readable: checked against the
    // mappings as they are now, for every piece and for a carried transfer.
    let need = if req.write {
        os::Need::ReadWrite
    } else {
        os::Need::Read
    };
    let maps = os::Maps::read();
    // The invalidations this answer already reflects (see `Invalidations`).
    let epoch = ctx.inval_epoch.load(Ordering::Acquire);
    let granted = {
        let mut l = fh.local.lock();
        if req.pins.iter().any(|&(a, b)| b > a && l.any_pinning(a, b)) {
            // A piece meets a unit a local thread is pinning: park the move (handlers
            // never wait). Parked under the table lock, so the pinning thread, which
            // finishes under it too, sees it when it drains the queue after its pin.
            fh.parked.lock().push(ParkedMove {
                src,
                args: args.to_vec(),
                payload: body.to_vec(),
            });
            return false;
        }
        ctx.count(&fh.stats.moves_handled, 1);
        for &r in &req.releases {
            if !l.remote_release(src, r) {
                ctx.count(&fh.stats.bad_releases, 1);
            }
        }
        grant_pieces(ctx, &mut l, src, &req, &maps, need)
    };
    fh_debug_over_f(ctx, src, req.id);
    let mut ans = match granted {
        Ok(granted) => MoveAnswer {
            id: req.id,
            status: Status::Ok.code(),
            why: 0,
            granted,
            carried_done: false,
            epoch,
            get_data: &[],
        },
        Err((st, why)) => refusal(req.id, st, why, epoch),
    };
    let mut get_buf = Vec::new();
    if ans.status == Status::Ok.code() {
        carry_out(ctx, &req, &maps, &mut ans, &mut get_buf);
    }
    ans.get_data = &get_buf;
    if ans.status == Status::Access.code() {
        ctx.count(&ctx.stats.access_refused, 1);
    }
    let (a, p) = ans.encode();
    reply(&a, &p);
    // Unpin what the releases left beyond the victim FIFO's limit only now, after
    // answering: the requester does not wait for it.
    fh.local.lock().trim(&mut CtxPinner { ctx, maps: None });
    true
}

/// Why a move was refused: its status and, with `FH_ERR_ACCESS`, an index into
/// [`WHY`].
type Refused = (Status, u8);

/// An answer that grants nothing.
fn refusal(id: u64, st: Status, why: u8, epoch: u64) -> MoveAnswer<'static> {
    MoveAnswer {
        id,
        status: st.code(),
        why,
        granted: Vec::new(),
        carried_done: false,
        epoch,
        get_data: &[],
    }
}

/// Reference, pinning where needed, the units covering every piece of `req` on
/// behalf of `src` (registered regions answer as prepinned). Err: the status and,
/// with `FH_ERR_ACCESS`, why (an index into [`WHY`]).
fn grant_pieces(
    ctx: &CtxInner,
    l: &mut crate::firehose::local::LocalTable,
    src: usize,
    req: &MoveRequest<'_>,
    maps: &os::Maps,
    need: os::Need,
) -> std::result::Result<Vec<(Granted, usize, usize)>, Refused> {
    let fh = &ctx.fh;
    let unit = fh.params.unit_bytes;
    let mut pinner = CtxPinner {
        ctx,
        maps: Some(maps),
    };
    let mut out = Vec::new();
    for &(pa, pb) in &req.pins {
        let (glo, ghi) = fh.params.granule(pa);
        if pa == 0 || pb <= pa || pb - pa > unit || pa < glo || pb > ghi {
            return Err((Status::InvalidArg, 0));
        }
        if !maps.allows(pa, pb - pa, need) {
            return Err((
                Status::Access,
                why_code(maps.why_not(pa, pb - pa, need)) as u8,
            ));
        }
        let mut cur = pa;
        while cur < pb {
            if let Some((s, e)) = ctx.local_regs.lookup(cur, 1, Some(src)) {
                out.push((Granted::Region, s, e));
                cur = e.min(pb);
                continue;
            }
            let stop = ctx.local_regs.next_start(cur, pb);
            match l.remote_acquire(src, cur, stop, req.write, &mut pinner) {
                Ok(units) => out.extend(units.into_iter().map(|(s, e, ro)| {
                    let g = if ro {
                        Granted::UnitReadOnly
                    } else {
                        Granted::Unit
                    };
                    (g, s, e)
                })),
                Err(e) if e.status == Status::Access => {
                    // Mapped as needed, yet refused: a unit pinned read-only, or
                    // memory the library uses.
                    let why = match maps.why_not(cur, stop - cur, need) {
                        Some(w) => why_code(Some(w)),
                        None if req.write => why_code(Some("read-only")),
                        None => 7,
                    };
                    return Err((Status::Access, why as u8));
                }
                Err(e) => return Err((e.status, 0)),
            }
            cur = stop;
        }
    }
    Ok(out)
}

/// The transfer a granted move carries: write a carried put (checked against the
/// mappings), or read a carried get through the kernel into `get_buf`.
fn carry_out(
    ctx: &CtxInner,
    req: &MoveRequest<'_>,
    maps: &os::Maps,
    ans: &mut MoveAnswer<'_>,
    get_buf: &mut Vec<u8>,
) {
    match req.carried {
        Carried::None => {}
        Carried::Put { addr, len } => {
            let covered = addr != 0
                && addr.checked_add(len).is_some()
                && maps.allows(addr, len, os::Need::ReadWrite);
            if !covered {
                ans.status = Status::Access.code();
                ans.why = why_code(maps.why_not(addr, len, os::Need::ReadWrite)) as u8;
                return;
            }
            match os::write_checked(addr, req.put_data) {
                Ok(()) => ans.carried_done = true,
                Err(e) => ans.status = e.status.code(),
            }
        }
        Carried::Get { addr, len } => {
            if len > fh_putinmove_cap(ctx) || 24 * ans.granted.len() + len > ctx.am_max_medium() {
                return;
            }
            // Read through the kernel (never faults); answer with the bytes.
            get_buf.resize(len, 0);
            match os::copy_checked(get_buf.as_mut_ptr() as usize, addr, len) {
                Ok(()) => ans.carried_done = true,
                Err(_) => get_buf.clear(),
            }
        }
    }
}

/// `FH_DEBUG_TABLES`: say when a peer holds more firehoses here than f.
fn fh_debug_over_f(ctx: &CtxInner, src: usize, id: u64) {
    if !crate::runtime::config::debug_tables() {
        return;
    }
    let l = ctx.fh.local.lock();
    let held: Vec<usize> = l
        .units()
        .filter(|(_, u)| u.holder_ranks().contains(&src))
        .map(|(s, _)| s)
        .collect();
    if held.len() > ctx.fh.params.f {
        eprintln!(
            "[{}] OVER-F peer {} holds {:x?} after move {}",
            ctx.rank, src, held, id
        );
    }
}

/// Initiator side: enter the answer into the peer's table and wake the mover.
pub(crate) fn handle_answer(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let fh = &ctx.fh;
    let Some(id) = MoveAnswer::id_of(f.args()) else {
        return;
    };
    if !fh.moves.lock().contains_key(&id) {
        return; // not ours (or a duplicate): ignore
    }
    let Some(ans) = MoveAnswer::decode(f.args(), f.payload) else {
        fh.get_dst.lock().remove(&id);
        fh.peers[tok.src].lock().abort_move(id);
        fh.moves
            .lock()
            .insert(id, Some((Status::Internal.code(), false, 0)));
        return;
    };
    let mut units = Vec::new();
    let mut read_only = Vec::new();
    for &(g, s, e) in &ans.granted {
        if e <= s || ctx.inval_seen.stale(tok.src, ans.epoch, s, e) {
            // Made before an invalidation of this range that we already obeyed: the
            // target no longer counts us as a holder there. The waiting request
            // moves again.
            continue;
        }
        match g {
            Granted::Unit => units.push((s, e, false)),
            Granted::UnitReadOnly => {
                units.push((s, e, false));
                read_only.push((s, e));
            }
            Granted::Region => {
                ctx.remote.insert(tok.src, s, e);
                units.push((s, e, true));
            }
        }
    }
    {
        let mut t = fh.peers[tok.src].lock();
        t.complete_move(id, &units);
        for (s, e) in read_only {
            t.mark_read_only(s, e);
        }
    }
    let mut done = ans.carried_done;
    if let Some((dst, len)) = fh.get_dst.lock().remove(&id) {
        if done && ans.get_data.len() == len {
            // SAFETY: `dst` is the destination of the get that sent this move, valid
            // for `len` bytes until that get completes (it is waiting for this).
            unsafe { std::ptr::copy_nonoverlapping(ans.get_data.as_ptr(), dst as *mut u8, len) };
        } else {
            done = false;
        }
    }
    // Only a move someone still waits for (an abandoned one left no slot).
    if let Some(slot) = fh.moves.lock().get_mut(&id) {
        *slot = Some((ans.status, done, ans.why));
    }
}

/// Largest carried get a target answers (it must fit the answer frame).
fn fh_putinmove_cap(ctx: &CtxInner) -> usize {
    ctx.fh.params.putinmove.min(ctx.am_max_medium() / 2)
}
