//! Put and get: blocking, explicit-handle (`_nb`) and implicit-handle (`_nbi`), with
//! the synchronisation calls of seed 002's extended API.
//!
//! Completion model: every operation to rank r gets a sequence number `seq` from
//! `issued[r]`; a conduit flush of r that *starts* after the operation was issued
//! completes it, after which `completed[r] >= seq`. A handle is a generation-tagged
//! slot index, so a handle that was already synced (or never existed) is refused
//! with `FH_ERR_INVALID_ARG` instead of aliasing a newer operation.
//! Puts complete remotely (the data is visible at the target), gets locally.

pub mod handles;
pub mod pack;
pub mod region;
pub mod settings;
pub mod shape;
pub mod value;
pub mod vis;

use handles::{DState, Deferred, DeferredRef, Dir, Op, Started};
pub use handles::{Handle, RmaState, HANDLE_NULL, NBI_ALL, NBI_GETS, NBI_PUTS};
use std::sync::atomic::Ordering;

use super::ctx::CtxInner;
use super::moves::OpPins;
use crate::bail;
use crate::firehose::initiator::{self, Carry, Grant};
use crate::runtime::error::Result;
use crate::runtime::os;
use parking_lot::Mutex;
use std::sync::Arc;

impl RmaState {
    /// Flush `rank`, record what that completed and release its firehoses.
    fn flush_rank(&self, ctx: &CtxInner, rank: usize) -> Result<()> {
        let upto = self.inner.lock().issued[rank];
        ctx.conduit.flush(rank)?;
        {
            let mut g = self.inner.lock();
            if g.completed[rank] < upto {
                g.completed[rank] = upto;
            }
        }
        initiator::completed(ctx, rank, upto);
        Ok(())
    }

    fn flush_all(&self, ctx: &CtxInner) -> Result<()> {
        let upto = self.inner.lock().issued.clone();
        ctx.conduit.flush_all()?;
        {
            let mut g = self.inner.lock();
            for (c, u) in g.completed.iter_mut().zip(upto.iter()) {
                if *c < *u {
                    *c = *u;
                }
            }
        }
        for (r, u) in upto.into_iter().enumerate() {
            initiator::completed(ctx, r, u);
        }
        Ok(())
    }

    /// Finalize: complete every outstanding operation.
    pub fn complete_everything(&self, ctx: &CtxInner) -> Result<()> {
        self.flush_all(ctx)?;
        let mut g = self.inner.lock();
        g.nbi_puts = false;
        g.nbi_gets = false;
        Ok(())
    }
}

#[cold]
#[inline(never)]
fn rma_arg_error(local: usize, remote: usize, nbytes: usize) -> crate::runtime::error::Error {
    if local == 0 || remote == 0 {
        crate::err!(InvalidArg, "a buffer pointer is NULL (nbytes {})", nbytes)
    } else {
        crate::err!(
            InvalidArg,
            "nbytes {} is too large for the address space",
            nbytes
        )
    }
}

#[cold]
#[inline(never)]
fn internal_error(
    rank: usize,
    addr: usize,
    len: usize,
    hb: usize,
    n: usize,
) -> crate::runtime::error::Error {
    crate::err!(
        Access,
        "[{:#x}, +{}) of rank {} touches the library's own structures (the first {} bytes of its heap at {:#x}: barrier flags, lock words, collective slots); use fh_malloc'd memory",
        addr,
        len,
        rank,
        n,
        hb
    )
}

impl CtxInner {
    #[inline]
    fn rma_checks(&self, rank: i64, local: usize, remote: usize, nbytes: usize) -> Result<usize> {
        self.check_live()?;
        // RMA may need an access query (a round trip): never from a handler.
        super::am::check_not_in_handler("put/get")?;
        let r = self.check_rank(rank)?;
        if nbytes > 0
            && (local == 0
                || remote == 0
                || nbytes > isize::MAX as usize
                || local.checked_add(nbytes).is_none()
                || remote.checked_add(nbytes).is_none())
        {
            return Err(rma_arg_error(local, remote, nbytes));
        }
        self.check_not_internal(r, remote, nbytes)?;
        Ok(r)
    }

    /// `fh_local_addr`: where `len` bytes at `raddr` of `rank` can be loaded and
    /// stored by this process (0: not from here; use put and get). This rank's own
    /// addresses are themselves; a peer's are its library heap or heap segments
    /// when it shares this node's mapping. The library's own structures are refused.
    pub fn local_addr(&self, rank: i64, raddr: usize, len: usize) -> Result<usize> {
        self.check_live()?;
        let r = self.check_rank(rank)?;
        if raddr == 0 || raddr.checked_add(len).is_none() || len > isize::MAX as usize {
            bail!(
                InvalidArg,
                "fh_local_addr: raddr {:#x} with nbytes {} is not a range",
                raddr,
                len
            );
        }
        self.check_not_internal(r, raddr, len)?;
        if r == self.rank {
            return Ok(raddr);
        }
        Ok(self
            .conduit
            .local_view(r, raddr, len)
            .map_or(0, |p| p as usize))
    }

    /// Refuse a public access that touches the library's own structures at the start
    /// of `rank`'s heap (barrier flags, lock words, channel slots): one bounds
    /// compare, so heap accesses stay as fast.
    #[inline]
    pub(crate) fn check_not_internal(&self, rank: usize, addr: usize, len: usize) -> Result<()> {
        let hb = self.remote_heaps[rank].0;
        if addr < hb + self.internal && addr.saturating_add(len.max(1)) > hb {
            return Err(internal_error(rank, addr, len, hb, self.internal));
        }
        Ok(())
    }

    /// Move `nbytes` between local `local` and `remote` on `rank`.
    /// `seq_out`: `None` for a blocking transfer (complete before returning), else
    /// the operations are left in flight (completed by a later flush) and every
    /// firehose reference they hold is recorded for release at completion.
    ///
    /// Long because it is the one dispatch over every transfer path, tried cheapest
    /// first (plain, kernel copy, own memory, one-sided hit, registration table, firehose
    /// chunks) with `local_plain`/`remote_plain` computed once; the chunk loop's order
    /// (remote firehoses before local pins, see inside) and each path's release-or-hold
    /// of its references are what its SAFETY comments rely on.
    fn transfer(
        &self,
        dir: Dir,
        rank: usize,
        remote: usize,
        local: usize,
        nbytes: usize,
        blocking: bool,
    ) -> Result<()> {
        let local_plain =
            !self.fh.local_side || self.plain_access(self.rank, local, nbytes).is_some();
        let remote_plain = match self.plain_access(rank, remote, nbytes) {
            Some(_proof) if local_plain => {
                // Library heap or an explicitly registered region: no firehose.
                // SAFETY: the caller of the public functions guarantees `local` is
                // valid for nbytes until the operation completes (documented per
                // call); `remote` was approved by the target (proof held).
                return unsafe { self.plain(dir, rank, remote, local, nbytes, blocking) };
            }
            other => other.is_some(),
        };
        if !remote_plain {
            // A node peer: the kernel copies to or from any of its addresses without
            // its CPU; bad memory is FH_ERR_ACCESS, checked by the kernel.
            // SAFETY: local is valid for nbytes (the public calls' contract).
            if let Some(r) = unsafe {
                self.conduit
                    .copy_any(rank, dir == Dir::Put, remote, local, nbytes)
            } {
                if r.is_err() {
                    crate::api::stats::Stats::add(&self.stats.access_refused, 1);
                }
                return r;
            }
        }
        if rank == self.rank && !remote_plain {
            // Own memory outside registered regions: the kernel copies it, so a bad
            // address is FH_ERR_ACCESS, never a fault.
            return match dir {
                Dir::Put => os::copy_checked(remote, local, nbytes),
                Dir::Get => os::copy_checked(local, remote, nbytes),
            };
        }
        if local_plain && !remote_plain && self.fh_hits_one_sided() {
            // The firehose hit path (seed 000 Fig. 2 step 1): one live firehose covers
            // the target; take a reference, transfer, release.
            let hit = self.with_peer(rank, |t| {
                t.hit_one(remote, remote + nbytes, dir == Dir::Put)
            });
            if let Some(h) = hit {
                self.count(&self.hot.shard().hits, 1);
                // SAFETY: as above; the firehose keeps the target pinned and
                // registered until our reference is released after completion.
                let r = unsafe { self.raw(dir, rank, remote, local, nbytes, blocking) };
                if blocking || r.is_err() {
                    self.with_peer(rank, |t| t.release(h));
                } else {
                    let seq = self.rma.bump(rank);
                    initiator::hold(
                        &self.fh,
                        rank,
                        seq,
                        OpPins {
                            rank,
                            remote: vec![h],
                            local: vec![],
                        },
                    );
                }
                return r;
            }
        }
        if local_plain && !remote_plain && self.regtab_lookup(rank, remote, nbytes)? {
            // Registered at the target, found in its table one-sidedly: plain RMA.
            if let Some(_proof) = self.plain_access(rank, remote, nbytes) {
                // SAFETY: as for the plain path above.
                return unsafe { self.plain(dir, rank, remote, local, nbytes, blocking) };
            }
        }
        let mut off = 0;
        while off < nbytes {
            let c = initiator::chunk(self, remote + off, nbytes - off, local + off);
            // Remote side first, holding nothing local while it waits (a thread
            // waiting for firehoses while holding local pins, and one waiting for
            // local pins while holding firehoses, would wait for each other).
            let carry = match dir {
                Dir::Put => Carry::Put((local + off) as *const u8),
                Dir::Get => Carry::Get((local + off) as *mut u8),
            };
            let acquired = if remote_plain {
                // Registered/heap target, local side pinned above.
                Ok(Grant::Pins(OpPins {
                    rank,
                    remote: vec![],
                    local: vec![],
                }))
            } else {
                initiator::acquire_remote(self, rank, remote + off, c, carry, dir == Dir::Put)
            };
            let grant = acquired?;
            let (mut pins, carried) = match grant {
                Grant::Done => (
                    OpPins {
                        rank,
                        remote: vec![],
                        local: vec![],
                    },
                    true,
                ),
                Grant::Pins(p) => (p, false),
            };
            if !carried && !local_plain {
                // A carried transfer travelled in the move: no local pin needed.
                match initiator::acquire_local(self, local + off, c) {
                    Ok(l) => pins.local = l,
                    Err(e) => {
                        initiator::release(self, pins);
                        return Err(e);
                    }
                }
            }
            if !carried {
                // SAFETY: as above; the target range is covered by live firehoses
                // (pinned and registered there until we release them, which happens
                // only after this operation completes).
                let r = unsafe {
                    self.issue_units(dir, rank, remote + off, local + off, c, blocking, &pins)
                };
                if let Err(e) = r {
                    initiator::release(self, pins);
                    return Err(e);
                }
            }
            if blocking {
                initiator::release(self, pins);
            } else {
                let seq = self.rma.bump(rank);
                initiator::hold(&self.fh, rank, seq, pins);
            }
            off += c;
        }
        Ok(())
    }

    /// A transfer that needs no firehose (heap or registered memory, proof held by
    /// the caller): issue it, and count it when it stays in flight.
    ///
    /// # Safety
    /// As `raw`.
    #[inline]
    unsafe fn plain(
        &self,
        dir: Dir,
        rank: usize,
        remote: usize,
        local: usize,
        nbytes: usize,
        blocking: bool,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.raw(dir, rank, remote, local, nbytes, blocking)? };
        if !blocking {
            self.rma.bump(rank);
        }
        Ok(())
    }

    /// Issue a transfer covered by several firehose units as one operation per unit:
    /// a conduit registration is one unit (an MPI dynamic window refuses an access
    /// that spans two attachments).
    ///
    /// # Safety
    /// As `raw`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn issue_units(
        &self,
        dir: Dir,
        rank: usize,
        remote: usize,
        local: usize,
        n: usize,
        blocking: bool,
        pins: &OpPins,
    ) -> Result<()> {
        if pins.remote.len() <= 1 {
            // SAFETY: forwarded contract.
            return unsafe { self.raw(dir, rank, remote, local, n, blocking) };
        }
        let mut cuts: Vec<(usize, usize)> = {
            let t = self.fh.peers[rank].lock();
            pins.remote
                .iter()
                .filter_map(|&(s, _)| t.end_of(s).map(|e| (s, e)))
                .collect()
        };
        cuts.sort_unstable();
        let end = remote + n;
        for (s, e) in cuts {
            let a = s.max(remote);
            let b = e.min(end);
            if a >= b {
                continue;
            }
            // SAFETY: forwarded contract; [a, b) lies inside one unit.
            unsafe { self.raw(dir, rank, a, local + (a - remote), b - a, false)? };
        }
        if blocking {
            self.conduit.flush(rank)?;
        }
        Ok(())
    }

    /// Hand one transfer to the conduit.
    ///
    /// # Safety
    /// `local` valid for `nbytes` until completion; `remote` accessible at `rank`.
    #[inline]
    unsafe fn raw(
        &self,
        dir: Dir,
        r: usize,
        remote: usize,
        local: usize,
        nbytes: usize,
        blocking: bool,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            match (blocking, dir) {
                (true, Dir::Put) => self.conduit.put_sync(r, remote, local as *const u8, nbytes),
                (true, Dir::Get) => self.conduit.get_sync(r, remote, local as *mut u8, nbytes),
                (false, Dir::Put) => self.conduit.put(r, remote, local as *const u8, nbytes),
                (false, Dir::Get) => self.conduit.get(r, remote, local as *mut u8, nbytes),
            }
        }
    }

    fn blocking(
        &self,
        dir: Dir,
        rank: i64,
        remote: usize,
        local: usize,
        nbytes: usize,
    ) -> Result<()> {
        let r = self.rma_checks(rank, local, remote, nbytes)?;
        if nbytes == 0 {
            return Ok(());
        }
        self.transfer(dir, r, remote, local, nbytes, true)?;
        let sh = self.hot.shard();
        self.count_rma_in(sh, dir, nbytes);
        self.maybe_poll_in(sh);
        Ok(())
    }

    #[inline]
    fn count_rma(&self, dir: Dir, nbytes: usize) {
        self.count_rma_in(self.hot.shard(), dir, nbytes)
    }

    #[inline]
    fn count_rma_in(&self, sh: &crate::api::stats::HotShard, dir: Dir, nbytes: usize) {
        let (ops, bytes) = match dir {
            Dir::Put => (&sh.puts, &sh.put_bytes),
            Dir::Get => (&sh.gets, &sh.get_bytes),
        };
        self.count(ops, 1);
        self.count(bytes, nbytes as u64);
    }

    /// `fh_put`: returns when the data is visible at the target.
    pub fn put(&self, rank: i64, dst: usize, src: usize, nbytes: usize) -> Result<()> {
        self.blocking(Dir::Put, rank, dst, src, nbytes)
    }

    /// `fh_get`: returns when the data is in `dst`.
    pub fn get(&self, dst: usize, rank: i64, src: usize, nbytes: usize) -> Result<()> {
        self.blocking(Dir::Get, rank, src, dst, nbytes)
    }

    fn nb(
        &self,
        dir: Dir,
        rank: i64,
        remote: usize,
        local: usize,
        nbytes: usize,
    ) -> Result<Handle> {
        let r = self.rma_checks(rank, local, remote, nbytes)?;
        if nbytes == 0 {
            return Ok(HANDLE_NULL);
        }
        if let Some(d) = self.start_deferred(dir, r, remote, local, nbytes, false)? {
            self.count_rma(dir, nbytes);
            return Ok(match d {
                Started::Issued => self.rma.new_handle(r),
                Started::Waiting(d) => self.rma.new_deferred(d),
            });
        }
        self.transfer(dir, r, remote, local, nbytes, false)?;
        self.count_rma(dir, nbytes);
        let h = self.rma.new_handle(r);
        self.maybe_poll();
        Ok(h)
    }

    /// The non-blocking miss path: when `[remote, +nbytes)` of `rank` needs a firehose
    /// move (not heap, registered, node peer or a hit), send the move and return at
    /// once; the transfer is issued when the answer is in (see [`Deferred`]).
    /// `None`: take the ordinary path (which does not wait for the target there).
    ///
    /// Kept in one piece: each early `Ok(None)` hands the transfer back to
    /// `transfer`'s ordinary path (a case it serves without a move: plain, kernel
    /// copy, hit, registration table; or one where deferring is not allowed: several
    /// threads, firehose-local side, the per-peer cap), and only past all of them is
    /// the `Deferred` record made and its move sent.
    fn start_deferred(
        &self,
        dir: Dir,
        rank: usize,
        remote: usize,
        local: usize,
        nbytes: usize,
        implicit: bool,
    ) -> Result<Option<Started>> {
        let write = dir == Dir::Put;
        // Several threads in the library (MPI_THREAD_MULTIPLE, the progress thread):
        // their acquisitions compete through the deadlock-avoidance protocol, which
        // this path does not take part in, so misses stay synchronous there.
        if self.concurrent
            || rank == self.rank
            || self.fh.local_side
            || !self.fh_hits_one_sided()
            || self.plain_access(rank, remote, nbytes).is_some()
            || self.conduit.reaches_any_address(rank)
        {
            return Ok(None);
        }
        if let Some(h) = self.with_peer(rank, |t| t.hit_one(remote, remote + nbytes, write)) {
            self.with_peer(rank, |t| t.release(h));
            return Ok(None); // a hit: the ordinary path takes it again
        }
        if self.regtab_lookup(rank, remote, nbytes)? {
            return Ok(None); // registered: plain from now on
        }
        let waiting = self
            .rma
            .inner
            .lock()
            .deferred
            .iter()
            .filter(|d| {
                let g = d.lock();
                g.rank == rank && matches!(g.state, DState::Waiting)
            })
            .count();
        if waiting >= (self.fh.params.f / 2).max(1) {
            // Deferred moves compete for the peer's firehoses outside the deadlock
            // avoidance: at most half of them may be spoken for this way (more thrash
            // when f is small). This one waits, like any miss, for its move.
            return Ok(None);
        }
        let d: DeferredRef = Arc::new(Mutex::new(Deferred {
            dir,
            rank,
            remote,
            local,
            nbytes,
            state: DState::Waiting,
            implicit,
        }));
        let d2 = d.clone();
        let done = Box::new(move |r: Result<OpPins>| {
            d2.lock().state = match r {
                Ok(p) => DState::Ready(p),
                Err(e) => DState::Failed(Some(e)),
            }
        });
        match crate::firehose::pins::acquire_async(self, rank, remote, nbytes, write, done) {
            Err(e) if e.status == crate::runtime::error::Status::NoResource => Ok(None),
            Err(e) => Err(e),
            Ok(Some(pins)) => {
                d.lock().state = DState::Ready(pins);
                self.issue_deferred(&d);
                match std::mem::replace(&mut d.lock().state, DState::Failed(None)) {
                    DState::Failed(Some(e)) => Err(e),
                    _ => Ok(Some(Started::Issued)),
                }
            }
            Ok(None) => {
                let mut g = self.rma.inner.lock();
                g.deferred.push(d.clone());
                self.rma.has_deferred.store(true, Ordering::Release);
                g.nbi_waiting += implicit as usize;
                Ok(Some(Started::Waiting(d)))
            }
        }
    }

    /// Issue a deferred transfer whose references arrived (`Ready` becomes `Issued`
    /// or `Failed`). True when it is no longer waiting.
    fn issue_deferred(&self, d: &DeferredRef) -> bool {
        let mut g = d.lock();
        let pins = match std::mem::replace(&mut g.state, DState::Waiting) {
            DState::Ready(p) => p,
            DState::Waiting => return false,
            other => {
                g.state = other;
                return true;
            }
        };
        let (dir, rank, remote, local, n) = (g.dir, g.rank, g.remote, g.local, g.nbytes);
        // SAFETY: the caller of fh_*_nb(i) keeps `local` valid until the operation
        // completes (header contract); the references keep the target pinned and
        // registered until they are released after completion.
        let r = unsafe { self.issue_units(dir, rank, remote, local, n, false, &pins) };
        g.state = match r {
            Ok(()) => {
                let seq = self.rma.bump(rank);
                initiator::hold(&self.fh, rank, seq, pins);
                DState::Issued(seq)
            }
            Err(e) => {
                initiator::release(self, pins);
                DState::Failed(Some(e))
            }
        };
        true
    }

    /// The progress hook, run by every poll: issue the deferred non-blocking
    /// transfers whose moves were answered (so their references do the work they
    /// were taken for at once). One load when nothing is deferred.
    #[inline]
    pub(crate) fn rma_progress(&self) {
        if self.rma.has_deferred.load(Ordering::Acquire) {
            self.rma_progress_deferred();
        }
    }

    #[cold]
    #[inline(never)]
    fn rma_progress_deferred(&self) {
        let list = {
            let g = self.rma.inner.lock();
            if g.deferred.is_empty() {
                self.rma.has_deferred.store(false, Ordering::Release);
                return;
            }
            g.deferred.clone()
        };
        let mut finished = Vec::new();
        for d in &list {
            if self.issue_deferred(d) {
                finished.push(d.clone());
            }
        }
        if finished.is_empty() {
            return;
        }
        let mut g = self.rma.inner.lock();
        for d in finished {
            g.deferred.retain(|x| !Arc::ptr_eq(x, &d));
            let mut dg = d.lock();
            if !dg.implicit {
                continue;
            }
            g.nbi_waiting -= 1;
            match &mut dg.state {
                DState::Issued(_) => match dg.dir {
                    Dir::Put => g.nbi_puts = true,
                    Dir::Get => g.nbi_gets = true,
                },
                DState::Failed(e) if g.nbi_error.is_none() => g.nbi_error = e.take(),
                _ => {}
            }
        }
    }

    pub fn put_nb(&self, rank: i64, dst: usize, src: usize, nbytes: usize) -> Result<Handle> {
        self.nb(Dir::Put, rank, dst, src, nbytes)
    }

    pub fn get_nb(&self, dst: usize, rank: i64, src: usize, nbytes: usize) -> Result<Handle> {
        self.nb(Dir::Get, rank, src, dst, nbytes)
    }

    fn nbi(&self, dir: Dir, rank: i64, remote: usize, local: usize, nbytes: usize) -> Result<()> {
        let r = self.rma_checks(rank, local, remote, nbytes)?;
        if nbytes == 0 {
            return Ok(());
        }
        // Inside this thread's access region the operation belongs to the region's
        // handle, not to the implicit set.
        let region = self.rma.in_region();
        match self.start_deferred(dir, r, remote, local, nbytes, !region)? {
            Some(Started::Waiting(d)) => {
                if region {
                    self.rma.region_add(r, Some(d));
                }
                self.count_rma(dir, nbytes);
                self.maybe_poll();
                return Ok(());
            }
            Some(Started::Issued) => {}
            None => self.transfer(dir, r, remote, local, nbytes, false)?,
        }
        self.count_rma(dir, nbytes);
        self.nbi_issued(dir, r, region);
        self.maybe_poll();
        Ok(())
    }

    /// An implicit-handle operation to `r` was issued (it completes with a flush of
    /// `r`): into this thread's access region (`region`), else into the implicit set.
    pub(crate) fn nbi_issued(&self, dir: Dir, r: usize, region: bool) {
        if region {
            self.rma.region_add(r, None);
            return;
        }
        let mut g = self.rma.inner.lock();
        match dir {
            Dir::Put => g.nbi_puts = true,
            Dir::Get => g.nbi_gets = true,
        }
    }

    pub fn put_nbi(&self, rank: i64, dst: usize, src: usize, nbytes: usize) -> Result<()> {
        self.nbi(Dir::Put, rank, dst, src, nbytes)
    }

    pub fn get_nbi(&self, dst: usize, rank: i64, src: usize, nbytes: usize) -> Result<()> {
        self.nbi(Dir::Get, rank, src, dst, nbytes)
    }

    /// Complete `h` if it can be completed now. On this design a flush never waits for
    /// the application on the target, so `test` completes the operation; `NOT_READY`
    /// is reserved for conduits where it would.
    pub fn test(&self, h: Handle) -> Result<bool> {
        self.check_live()?;
        if h == HANDLE_NULL {
            return Ok(true);
        }
        let (rank, seq) = match self.rma.lookup(h)? {
            Op::Issued { rank, seq } => (rank, seq),
            Op::Deferred(d) => match self.deferred_seq(&d) {
                Ok(Some((rank, seq))) => {
                    self.rma.set_issued(h, rank, seq);
                    (rank, seq)
                }
                Ok(None) => return Ok(false),
                Err(e) => {
                    self.rma.retire(h);
                    return Err(e);
                }
            },
            Op::Group {
                seqs,
                deferred,
                packs,
            } => return self.test_group(h, &seqs, &deferred, &packs),
        };
        if !self.rma.is_complete(rank, seq) {
            super::am::check_not_in_handler("fh_test")?;
            let r = self.rma.flush_rank(self, rank);
            if let Err(e) = r {
                self.rma.retire(h);
                return Err(e);
            }
        }
        debug_assert!(self.rma.is_complete(rank, seq));
        self.rma.retire(h);
        self.maybe_poll();
        Ok(true)
    }

    /// `test` of a group handle: every deferred piece issued, then every rank it
    /// touched flushed past the piece's operation.
    fn test_group(
        &self,
        h: Handle,
        seqs: &[(usize, u64)],
        deferred: &[DeferredRef],
        packs: &[Arc<handles::PackOp>],
    ) -> Result<bool> {
        if !packs.iter().all(|p| p.done()) {
            if !super::am::in_handler() {
                self.progress_once()?;
            }
            if !packs.iter().all(|p| p.done()) {
                return Ok(false);
            }
        }
        let mut upto: Vec<(usize, u64)> = seqs.to_vec();
        for d in deferred {
            match self.deferred_seq(d) {
                Ok(Some(rs)) => upto.push(rs),
                Ok(None) => return Ok(false),
                Err(e) => {
                    self.rma.retire(h);
                    return Err(e);
                }
            }
        }
        for p in packs {
            if let Err(e) = p.take_error() {
                self.rma.retire(h);
                return Err(e);
            }
        }
        for (rank, seq) in upto {
            if self.rma.is_complete(rank, seq) {
                continue;
            }
            super::am::check_not_in_handler("fh_test")?;
            if let Err(e) = self.rma.flush_rank(self, rank) {
                self.rma.retire(h);
                return Err(e);
            }
            debug_assert!(self.rma.is_complete(rank, seq));
        }
        self.rma.retire(h);
        self.maybe_poll();
        Ok(true)
    }

    /// Where a deferred transfer stands: `Some((rank, seq))` once issued, `None`
    /// while its move is in flight (after letting the answer in), its error once
    /// refused.
    fn deferred_seq(&self, d: &DeferredRef) -> Result<Option<(usize, u64)>> {
        if matches!(d.lock().state, DState::Waiting | DState::Ready(_)) {
            // Let the answer in (progress issues it when it is there).
            if !super::am::in_handler() {
                self.progress_once()?;
                let r = d.lock().rank;
                if self.fh.starved[r].swap(false, std::sync::atomic::Ordering::AcqRel) {
                    // Its move needs firehoses our operations in flight hold.
                    initiator::recover(self, r)?;
                }
            }
            self.rma_progress();
        }
        let mut g = d.lock();
        let rank = g.rank;
        match &mut g.state {
            DState::Issued(seq) => Ok(Some((rank, *seq))),
            DState::Failed(e) => Err(e
                .take()
                .unwrap_or_else(|| crate::err!(Internal, "non-blocking transfer failed earlier"))),
            DState::Waiting | DState::Ready(_) => Ok(None),
        }
    }

    pub fn wait(&self, h: Handle) -> Result<()> {
        let mut watch = super::stall::Watch::new(
            self,
            super::stall::Wait::new(
                "fh_wait",
                None,
                "the answer to the firehose move of a non-blocking put/get",
            ),
        );
        while !self.test(h)? {
            if self.progress_once()? == 0 {
                self.conduit.idle();
            }
            watch.round()?;
        }
        Ok(())
    }

    /// Complete all; completed entries become `HANDLE_NULL`. Returns the first error
    /// (after still completing the others).
    pub fn wait_all(&self, hs: &mut [Handle]) -> Result<()> {
        self.check_live()?;
        let mut first = Ok(());
        for h in hs.iter_mut() {
            if *h != HANDLE_NULL {
                let r = self.wait(*h);
                *h = HANDLE_NULL;
                if first.is_ok() {
                    first = r;
                }
            }
        }
        first
    }

    /// True if all completed (those become `HANDLE_NULL`).
    pub fn test_all(&self, hs: &mut [Handle]) -> Result<bool> {
        self.check_live()?;
        let mut all = true;
        for h in hs.iter_mut() {
            if *h != HANDLE_NULL {
                if self.test(*h)? {
                    *h = HANDLE_NULL;
                } else {
                    all = false;
                }
            }
        }
        Ok(all)
    }

    /// Complete at least one (unless all are already `HANDLE_NULL`).
    pub fn wait_some(&self, hs: &mut [Handle]) -> Result<()> {
        self.check_live()?;
        loop {
            let mut any_left = false;
            let mut done_one = false;
            for h in hs.iter_mut() {
                if *h != HANDLE_NULL {
                    any_left = true;
                    if self.test(*h)? {
                        *h = HANDLE_NULL;
                        done_one = true;
                    }
                }
            }
            if done_one || !any_left {
                return Ok(());
            }
            if self.progress_once()? == 0 {
                self.conduit.idle();
            }
        }
    }

    /// Complete what can be completed now without waiting: true if at least one
    /// handle completed (those become `HANDLE_NULL`) or all already were.
    /// A handle whose operation failed becomes `HANDLE_NULL` and its error is
    /// returned.
    pub fn test_some(&self, hs: &mut [Handle]) -> Result<bool> {
        self.check_live()?;
        let mut any_left = false;
        let mut done_one = false;
        for h in hs.iter_mut() {
            if *h == HANDLE_NULL {
                continue;
            }
            any_left = true;
            match self.test(*h) {
                Ok(true) => {
                    *h = HANDLE_NULL;
                    done_one = true;
                }
                Ok(false) => {}
                Err(e) if e.status == crate::runtime::error::Status::InvalidArg => return Err(e),
                Err(e) => {
                    // `test` retired it: the slot no longer names this operation.
                    *h = HANDLE_NULL;
                    return Err(e);
                }
            }
        }
        Ok(done_one || !any_left)
    }

    fn check_which(which: i32) -> Result<()> {
        if which & !NBI_ALL != 0 || which == 0 {
            bail!(
                InvalidArg,
                "which = {} must be FH_NBI_PUTS, FH_NBI_GETS or FH_NBI_ALL",
                which
            );
        }
        Ok(())
    }

    pub fn wait_nbi(&self, which: i32) -> Result<()> {
        self.check_live()?;
        Self::check_which(which)?;
        super::am::check_not_in_handler("fh_wait_nbi")?;
        let what = super::stall::Wait::new(
            "fh_wait_nbi",
            None,
            "the answer to the firehose move of an implicit-handle put/get",
        );
        self.wait_for(what, || {
            for r in 0..self.size {
                if self.fh.starved[r].swap(false, std::sync::atomic::Ordering::AcqRel) {
                    initiator::recover(self, r)?;
                }
            }
            self.rma_progress();
            let g = self.rma.inner.lock();
            Ok(g.nbi_waiting == 0 && g.nbi_packs.iter().all(|p| p.done()))
        })?;
        let packs = std::mem::take(&mut self.rma.inner.lock().nbi_packs);
        let mut first = self.rma.inner.lock().nbi_error.take();
        for p in packs {
            if let (None, Err(e)) = (&first, p.take_error()) {
                first = Some(e);
            }
        }
        if let Some(e) = first {
            return Err(e);
        }
        let pending = {
            let g = self.rma.inner.lock();
            (which & NBI_PUTS != 0 && g.nbi_puts) || (which & NBI_GETS != 0 && g.nbi_gets)
        };
        if pending {
            self.rma.flush_all(self)?;
            let mut g = self.rma.inner.lock();
            // A full flush completes both kinds.
            g.nbi_puts = false;
            g.nbi_gets = false;
        }
        self.maybe_poll();
        Ok(())
    }

    pub fn test_nbi(&self, which: i32) -> Result<bool> {
        self.check_live()?;
        Self::check_which(which)?;
        if !super::am::in_handler() {
            self.progress_once()?;
        }
        self.rma_progress();
        {
            let g = self.rma.inner.lock();
            if g.nbi_waiting > 0 || !g.nbi_packs.iter().all(|p| p.done()) {
                return Ok(false);
            }
        }
        self.wait_nbi(which)?;
        Ok(true)
    }

    /// Flush `rank` (firehose replacement: complete operations, release firehoses).
    pub fn rma_flush_rank(&self, rank: usize) -> Result<()> {
        self.rma.flush_rank(self, rank)
    }

    pub fn rma_flush_all(&self) -> Result<()> {
        self.rma.flush_all(self)
    }

    /// Number of explicit handles not yet synced (for tests and leak checks).
    pub fn outstanding_handles(&self) -> usize {
        let g = self.rma.inner.lock();
        g.slots.iter().filter(|s| s.op.is_some()).count()
    }
}

/// RMA: issues deferred transfers as their firehose moves are answered.
pub(crate) static SUBSYSTEM: super::ctx::Subsystem = super::ctx::Subsystem {
    name: "rma",
    handlers: pack::HANDLERS,
    progress: Some(CtxInner::rma_progress),
    idle: None,
    shutdown: None,
};
