//! Memory: `fh_malloc` heap, explicit registration, and the remote access check.
//!
//! Access to a peer's user memory goes through Firehose (`firehose::initiator`): the target is
//! the only authority. When a move asks for memory inside a region the target
//! registered explicitly, the target answers with that region (it acts as prepinned),
//! remembers the initiator as a holder, and the initiator caches it: later accesses
//! inside it are fully one-sided and cost no firehose. Unregistering tells every
//! holder to drop the region and flush its operations (`H_INVALIDATE`) and waits for
//! all acknowledgements before detaching: no rank keeps using a stale registration.

use super::am::{self, LibHandler, Token};
use super::ctx::CtxInner;
use super::stats::Stats;
use super::wire::{Category, Frame};
use crate::firehose::registry::{covered, PeerRegions, Region};
use crate::runtime::config::Pin;
use crate::runtime::error::{Result, Status};
use crate::runtime::os;
use crate::{bail, err};
use parking_lot::RwLockReadGuard;
use std::collections::BTreeMap;

/// Proof that an access may be issued; hold it while issuing (it keeps the entry that
/// allowed it from being invalidated meanwhile).
pub enum Access<'a> {
    Heap,
    /// Approved without a lock: the context is used by one thread at a time.
    Unshared,
    Cached(#[allow(dead_code)] RwLockReadGuard<'a, PeerRegions>),
    Local(#[allow(dead_code)] RwLockReadGuard<'a, BTreeMap<usize, Region>>),
}

/// What a call that would let heap memory go is told to do instead.
const GIVE_BACK: &str = "; give fh_malloc memory back with fh_free";

impl CtxInner {
    pub fn malloc(&self, nbytes: usize) -> Result<usize> {
        self.check_live()?;
        match self.heap.alloc(nbytes) {
            Err(e) if e.status == Status::NoMemory => self.grow_heap(nbytes).map_err(|g| {
                err!(
                    NoMemory,
                    "{}; growing the heap failed too: {}",
                    e.msg,
                    g.msg
                )
            }),
            r => r,
        }
    }

    /// The heap is full: a block from a segment, making one (at least `FH_HEAP_SIZE`
    /// bytes, registered as `fh_mem_register` does) when none has room.
    fn grow_heap(&self, nbytes: usize) -> Result<usize> {
        if let Some(a) = self.segments.alloc(nbytes) {
            return Ok(a);
        }
        let _g = self.segments.grow.lock();
        if let Some(a) = self.segments.alloc(nbytes) {
            return Ok(a);
        }
        let want = nbytes
            .checked_add(super::heap::ALIGN)
            .ok_or_else(|| err!(NoMemory, "{} bytes cannot be allocated", nbytes))?
            .max(self.heap.size() + self.internal);
        let ram = os::phys_mem();
        if ram > 0 && want as u64 > ram {
            bail!(
                NoMemory,
                "a segment of {} bytes is more than this machine's memory ({} bytes)",
                want,
                ram
            );
        }
        let map = self.conduit.heap_segment(want)?;
        self.mem_register(map.addr(), map.len())?;
        self.conduit.segment_registered(&map);
        self.segments.add(map, nbytes)
    }

    pub fn free(&self, addr: usize) -> Result<()> {
        self.check_live()?;
        if self.heap.contains(addr, 1) {
            return self.heap.free(addr);
        }
        match self.segments.free(addr) {
            Some(r) => r,
            None => self.heap.free(addr),
        }
    }

    /// Long because registering is a ladder (mlock, conduit register, `local_regs`
    /// entry, `regtab` publish) whose failure paths each undo the earlier rungs in
    /// reverse order: split up, every helper would need to know which rungs its caller
    /// already holds.
    pub fn mem_register(&self, addr: usize, len: usize) -> Result<()> {
        self.check_live()?;
        if addr == 0 {
            bail!(InvalidArg, "addr is NULL");
        }
        if len == 0 {
            bail!(InvalidArg, "len is 0");
        }
        let end = addr.checked_add(len).ok_or_else(|| {
            err!(
                InvalidArg,
                "[{:#x}, +{}) wraps around the address space",
                addr,
                len
            )
        })?;
        self.check_registration_room()?;
        self.refuse_segment(addr, end, "fh_mem_register", "")?;
        if !os::Maps::read().allows(addr, len, os::Need::ReadWrite) {
            bail!(
                Access,
                "[{:#x}, +{}) is not readable and writable memory of this process (unmapped, PROT_NONE or read-only): peers could not put there",
                addr,
                len
            );
        }
        if let Some((s, e)) = self.overlapping_region(addr, end) {
            bail!(
                InvalidArg,
                "[{:#x}, {:#x}) overlaps the registered region [{:#x}, {:#x}); unregister it first",
                addr,
                end,
                s,
                e
            );
        }
        // Firehose units of this memory (pinned for peers' puts) give way: their
        // holders are told to drop them first, then the registration replaces them.
        am::check_not_in_handler("fh_mem_register")?;
        // Peers' moves for this memory wait until the region is published (or the
        // call failed): answered earlier, they would pin units inside the region.
        let q = self.fh_quiesce(addr, end);
        self.fh_invalidate(&q, addr, end)?;
        let (ps, pl) = os::page_span(addr, len);
        // mlock is the physical resource RLIMIT_MEMLOCK bounds. This conduit does not
        // need it for correctness, so running out degrades (registered, not locked;
        // counted and reported with FH_VERBOSE) instead of failing the call.
        let locked = self.cfg.pin == Pin::Mlock
            && match os::mlock(ps, pl) {
                Ok(()) => true,
                Err(e) => {
                    Stats::add(&self.stats.mlock_failures, 1);
                    if self.cfg.verbose {
                        eprintln!(
                            "firehose[{}]: registering without locking: {}",
                            self.rank, e.msg
                        );
                    }
                    false
                }
            };
        if let Err(e) = self.conduit.register(addr, len) {
            if locked {
                os::munlock(ps, pl);
            }
            return Err(e);
        }
        if let Err(e) = self.local_regs.insert(addr, end, locked) {
            let _ = self.conduit.deregister(addr, len);
            if locked {
                os::munlock(ps, pl);
            }
            return Err(e);
        }
        // Peers find it from now on with one-sided reads (`regtab`).
        if let Err(e) = self.regtab_publish(addr, end) {
            let _ = self.local_regs.remove_exact(addr, end);
            let _ = self.conduit.deregister(addr, len);
            if locked {
                os::munlock(ps, pl);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Registrations are bounded: the registration table's slots, and on Open MPI the
    /// dynamic window's attachments kept for them (the rest are firehose's). Refuse
    /// before MPI would fail (a failed attach leaves Open MPI's window locked).
    fn check_registration_room(&self) -> Result<()> {
        let n = self.local_regs.len();
        let table = self.regtab.layout.map(|_| super::regtab::MAX_REGS);
        let conduit = self.conduit.caps().user_registrations;
        let limit = match (table, conduit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(limit) = limit.filter(|&l| n >= l) {
            let caps = self.conduit.caps();
            let more = if conduit == Some(limit) {
                format!(", or {}", caps.registrations_fix)
            } else {
                String::new()
            };
            bail!(
                NoResource,
                "rank {} has {} of {} registrations in use: unregister a range or register \
                 larger ranges{}",
                self.rank,
                n,
                limit,
                more
            );
        }
        Ok(())
    }

    fn overlapping_region(&self, start: usize, end: usize) -> Option<(usize, usize)> {
        let g = self.local_regs.read();
        g.range(..end)
            .next_back()
            .filter(|(_, r)| r.end > start)
            .map(|(&s, r)| (s, r.end))
    }

    pub fn mem_unregister(&self, addr: usize, len: usize) -> Result<()> {
        self.check_live()?;
        am::check_not_in_handler("fh_mem_unregister")?;
        if addr == 0 || len == 0 {
            bail!(InvalidArg, "addr is NULL or len is 0");
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| err!(InvalidArg, "range wraps around"))?;
        self.refuse_segment(addr, end, "fh_mem_unregister", GIVE_BACK)?;
        let region = self.local_regs.remove_exact(addr, end)?;
        self.retract(addr, region)
    }

    /// The heap's segments are registered by the library for the context's life:
    /// the registration calls refuse them and the first region. `advice` ends the
    /// message ([`GIVE_BACK`] for the calls that would let memory go).
    fn refuse_segment(&self, addr: usize, end: usize, call: &str, advice: &str) -> Result<()> {
        let (hb, hl) = self.conduit.heap();
        if (addr < hb + hl && end > hb) || self.segments.overlaps(addr, end) {
            bail!(
                InvalidArg,
                "{}: [{:#x}, {:#x}) overlaps the library heap, which stays registered until fh_finalize{}",
                call,
                addr,
                end,
                advice
            );
        }
        Ok(())
    }

    /// Drop every registration overlapping `[addr, addr+len)`, everywhere it is cached.
    pub fn mem_invalidate(&self, addr: usize, len: usize) -> Result<usize> {
        self.check_live()?;
        am::check_not_in_handler("fh_mem_invalidate")?;
        if addr == 0 {
            bail!(InvalidArg, "addr is NULL");
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| err!(InvalidArg, "range wraps around"))?;
        self.refuse_segment(addr, end.max(addr + 1), "fh_mem_invalidate", GIVE_BACK)?;
        let end = end.max(addr + 1);
        // Peers' moves for this memory wait until every holder of it was told.
        let q = self.fh_quiesce(addr, end);
        let gone = self.local_regs.remove_overlapping(addr, end);
        let n = gone.len() + self.fh_invalidate(&q, addr, end)?;
        let mut first = Ok(());
        for (s, r) in gone {
            if let Err(e) = self.retract(s, r) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first.map(|_| n)
    }

    /// Tell the holders of a removed region to forget it, wait, then detach.
    fn retract(&self, start: usize, region: Region) -> Result<()> {
        // Out of the table first, then the ranks that may have cached it: those that
        // found it there (holder bits) and those a move answered (region holders).
        let published = self.regtab_remove(start)?;
        let mut holders: Vec<usize> = region
            .holder_ranks()
            .into_iter()
            .filter(|&h| h != self.rank)
            .collect();
        if let Some((_, more)) = &published {
            holders.extend(more.iter().copied());
            holders.sort_unstable();
            holders.dedup();
        }
        let targets: Vec<(usize, usize, usize)> =
            holders.iter().map(|&h| (h, start, region.end)).collect();
        let (w, mut res) = self.invalidate_holders(&targets, "fh_mem_unregister/fh_mem_invalidate");
        w?;
        if let Some((slot, _)) = published {
            res = res.and(self.regtab_retire(slot));
        }
        let d = self.conduit.deregister(start, region.end - start);
        if region.locked {
            let (ps, pl) = os::page_span(start, region.end - start);
            os::munlock(ps, pl);
        }
        res.and(d)
    }

    /// Access that needs no firehose: the peer's library heap, or a registered
    /// region of the peer we learnt of from its own answer (this rank's own
    /// registrations for `rank == self`). `None`: go through firehose.
    #[inline]
    pub fn plain_access(&self, rank: usize, addr: usize, len: usize) -> Option<Access<'_>> {
        let (hb, hl) = self.remote_heaps[rank];
        if addr >= hb && addr.checked_add(len).is_some_and(|e| e <= hb + hl) {
            return Some(Access::Heap);
        }
        if rank == self.rank {
            let g = self.local_regs.read();
            return covered(&g, addr, len, |r| r.end).then_some(Access::Local(g));
        }
        if self.remote.is_empty(rank) {
            return None;
        }
        if !self.concurrent {
            // SAFETY: without MPI_THREAD_MULTIPLE at most one thread is inside the
            // library (the MPI thread-level contract) and there is no progress
            // thread, so no handler can change the cache until this call returns.
            if unsafe { self.remote.hit_unlocked(rank, addr, len) } {
                self.count(&self.stats.remote_cache_hits, 1);
                return Some(Access::Unshared);
            }
        } else if let Some(g) = self.remote.hit(rank, addr, len) {
            Stats::add(&self.stats.remote_cache_hits, 1);
            return Some(Access::Cached(g));
        }
        None
    }
}

impl CtxInner {
    /// Tell every `(rank, start, end)` to forget that range of ours and complete its
    /// operations there, and wait for all acknowledgements (so no access lands there
    /// afterwards). Returns how the wait ended (an error: not every holder confirmed,
    /// so the memory must stay exposed) and the first holder that could not be
    /// reached (it is not waited for).
    pub(crate) fn invalidate_holders(
        &self,
        targets: &[(usize, usize, usize)],
        call: &'static str,
    ) -> (Result<()>, Result<()>) {
        if targets.is_empty() {
            return (Ok(()), Ok(()));
        }
        let epoch = self.next_inval_epoch();
        let id = self.new_id();
        self.invals.lock().insert(id, targets.len());
        let mut first = Ok(());
        for &(h, s, e) in targets {
            let args = [s as u64, e as u64, id, epoch];
            if let Err(err) = self.am_request(
                h,
                Category::Short,
                LibHandler::Invalidate as u8,
                &args,
                &[],
                None,
            ) {
                // Could not reach the holder: do not wait for its ack.
                *self.invals.lock().get_mut(&id).expect("present") -= 1;
                if first.is_ok() {
                    first = Err(err);
                }
            }
            Stats::add(&self.stats.invalidations_sent, 1);
        }
        let what = crate::api::stall::Wait::new(
            call,
            None,
            "the acknowledgement of an invalidation from a rank holding that memory",
        );
        let w = self.wait_for(what, || {
            Ok(self.invals.lock().get(&id).copied().unwrap_or(0) == 0)
        });
        self.invals.lock().remove(&id);
        (w, first)
    }

    /// The epoch the next invalidation this rank sends carries.
    pub(crate) fn next_inval_epoch(&self) -> u64 {
        self.inval_epoch
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            + 1
    }
}

/// Invalidation of memory peers cached (its handlers; no hooks).
pub(crate) static SUBSYSTEM: super::ctx::Subsystem = super::ctx::Subsystem {
    name: "memory",
    handlers: &[
        (LibHandler::Invalidate, handle_invalidate),
        (LibHandler::InvalAck, handle_inval_ack),
    ],
    progress: None,
    idle: None,
    shutdown: None,
};

/// Holder side: forget `[start, end)` of the sender, complete our operations to it,
/// then acknowledge. Args [start, end, id, epoch].
pub(crate) fn handle_invalidate(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let a = f.args();
    if a.len() != 4 {
        return;
    }
    ctx.inval_seen
        .note(tok.src, a[3], a[0] as usize, a[1] as usize);
    ctx.remote.invalidate(tok.src, a[0] as usize, a[1] as usize);
    ctx.fh_forget(tok.src, a[0] as usize, a[1] as usize);
    if let Err(e) = ctx.conduit.flush(tok.src) {
        ctx.record_async_error(e);
    }
    Stats::add(&ctx.stats.invalidations_handled, 1);
    let _ = ctx.am_reply(
        tok,
        Category::Short,
        LibHandler::InvalAck as u8,
        &[a[2]],
        &[],
        None,
    );
}

pub(crate) fn handle_inval_ack(ctx: &CtxInner, _tok: &Token, f: &Frame<'_>) {
    if let Some(&id) = f.args().first() {
        if let Some(n) = ctx.invals.lock().get_mut(&id) {
            *n = n.saturating_sub(1);
        }
    }
}
