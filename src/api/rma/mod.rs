//! Put and get: blocking, explicit-handle (`_nb`) and implicit-handle (`_nbi`), with
//! the synchronisation calls of seed 002's extended API.
//!
//! Completion model: every operation to rank r gets a sequence number `seq` from
//! `issued[r]`; a conduit flush of r that *starts* after the operation was issued
//! completes it, after which `completed[r] >= seq`. A handle is a generation-tagged
//! slot index, so a handle that was already synced (or never existed) is refused
//! with `FH_ERR_INVALID_ARG` instead of aliasing a newer operation.
//! Puts complete remotely (the data is visible at the target), gets locally.
//!
//! This file issues transfers (the checks, the paths a transfer takes, the blocking
//! calls); `nb.rs` has the non-blocking calls and their deferred path, `complete.rs`
//! the calls that complete them.

mod complete;
pub mod handles;
mod nb;
pub mod pack;
pub mod region;
pub mod settings;
pub mod shape;
pub mod value;
pub mod vis;

use handles::Dir;
pub use handles::{Handle, RmaState, HANDLE_NULL, NBI_ALL, NBI_GETS, NBI_PUTS};

use super::ctx::CtxInner;
use super::moves::OpPins;
use crate::bail;
use crate::firehose::initiator::{self, Carry, Grant};
use crate::runtime::error::Result;
use crate::runtime::os;

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

    /// Finalize: issue, then complete, every outstanding operation; the first error,
    /// also of an implicit-handle transfer nobody waited for. What was issued is
    /// completed even when issuing the rest failed.
    pub fn complete_everything(&self, ctx: &CtxInner) -> Result<()> {
        let issued = ctx.rma_issue_everything();
        let flushed = self.flush_all(ctx);
        let mut g = self.inner.lock();
        g.nbi_puts = false;
        g.nbi_gets = false;
        let lost = g.nbi_error.take();
        let packs = std::mem::take(&mut g.nbi_packs);
        drop(g);
        let pack_err = packs.iter().find_map(|p| p.take_error().err());
        issued.and(flushed)?;
        match lost.or(pack_err) {
            Some(e) => Err(e),
            None => Ok(()),
        }
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
            // Remote side first, holding nothing local while it waits (a thread
            // waiting for firehoses while holding local pins, and one waiting for
            // local pins while holding firehoses, would wait for each other).
            let carry = match dir {
                Dir::Put => Carry::Put((local + off) as *const u8),
                Dir::Get => Carry::Get((local + off) as *mut u8),
            };
            let (grant, c) = if remote_plain {
                // Registered/heap target, local side pinned below.
                let c = initiator::chunk(self, rank, remote + off, nbytes - off, local + off);
                (
                    Grant::Pins(OpPins {
                        rank,
                        remote: vec![],
                        local: vec![],
                    }),
                    c,
                )
            } else {
                initiator::acquire_prefix(
                    self,
                    rank,
                    remote + off,
                    nbytes - off,
                    local + off,
                    carry,
                    dir == Dir::Put,
                )?
            };
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
}

/// RMA: issues deferred transfers as their firehose moves are answered.
pub(crate) static SUBSYSTEM: super::ctx::Subsystem = super::ctx::Subsystem {
    name: "rma",
    handlers: pack::HANDLERS,
    progress: Some(CtxInner::rma_progress),
    idle: None,
    shutdown: None,
};
