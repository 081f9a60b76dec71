//! Windows and one-sided operations: which window an address falls in, puts and
//! gets (node-shared heaps by copy, node peers' user memory by the kernel copy, the
//! rest by `MPI_Put`/`MPI_Get` in the windows' `lock_all` epochs), flushes, atomics
//! as `MPI_Compare_and_swap` loops, the dynamic window's attachments (`attach`), and
//! the barrier's non-blocking reduction.
//!
//! Guarantees: every MPI error is returned; an origin retries a dynamic-window access
//! refused as out of range for a bounded time only ([`RANGE_RETRY`]).

use super::{attach, boot, boot::check, u8t, MpiConduit, H, WIN_DYN, WIN_HEAP};
use crate::bail;
use crate::conduit::{AtomicOp, Conduit, Width};
use crate::runtime::error::Result;
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{fence, Ordering};

const _: () = assert!(
    cfg!(target_endian = "little"),
    "cas_once assumes little-endian"
);
pub(super) const GUESS_SLOTS: usize = 256;

/// A reduction in flight: its request and the in/out words it reads and writes.
pub(super) type Max3 = (H<ffi::MPI_Request>, Box<[u64; 6]>);

pub(super) fn guess_slot(rank: usize, raddr: usize) -> usize {
    let h = (raddr as u64 >> 2) ^ ((rank as u64) << 40);
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % GUESS_SLOTS
}

impl MpiConduit {
    /// `Conduit::put_sync` without dynamic dispatch (the blocking fast path).
    ///
    /// # Safety
    /// As `Conduit::put_sync`.
    #[inline]
    pub unsafe fn put_now(
        &self,
        rank: usize,
        raddr: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(true, rank, raddr, src as *mut u8, len, true) }
    }

    /// `Conduit::get_sync` without dynamic dispatch.
    ///
    /// # Safety
    /// As `Conduit::get_sync`.
    #[inline]
    pub unsafe fn get_now(
        &self,
        rank: usize,
        raddr: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(false, rank, raddr, dst, len, true) }
    }

    /// Which window and displacement address `raddr` on `rank` falls in.
    #[inline]
    pub(super) fn resolve(
        &self,
        rank: usize,
        raddr: usize,
        len: usize,
    ) -> (ffi::MPI_Win, ffi::MPI_Aint, u8) {
        let (base, hlen) = self.remote_heaps[rank];
        if raddr >= base
            && raddr.wrapping_add(len) <= base + hlen
            && raddr.checked_add(len).is_some()
        {
            (self.heap_win.0, (raddr - base) as ffi::MPI_Aint, WIN_HEAP)
        } else {
            (self.dyn_win.0, raddr as ffi::MPI_Aint, WIN_DYN)
        }
    }

    /// One MPI call of the attachment map ([`attach`]).
    pub(super) fn attach_step(&self, st: attach::Step) -> Result<()> {
        match st {
            attach::Step::Attach { start, end } => {
                // SAFETY: attaching local memory a user of the map owns; MPI only
                // records the range.
                let rc = unsafe {
                    ffi::MPI_Win_attach(
                        self.dyn_win.0,
                        start as *mut c_void,
                        (end - start) as ffi::MPI_Aint,
                    )
                };
                check(rc, || format!("MPI_Win_attach([{:#x}, {:#x}))", start, end))
            }
            attach::Step::Detach { start, end } => {
                // SAFETY: detaching a range the map attached before.
                let rc = unsafe { ffi::MPI_Win_detach(self.dyn_win.0, start as *const c_void) };
                check(rc, || format!("MPI_Win_detach([{:#x}, {:#x}))", start, end))
            }
        }
    }

    /// (Longer than most functions: it is the path every put and get takes, and its
    /// order of checks — own rank, node-shared heap, kernel copy or a mapped heap
    /// segment, MPI — reads best, and inlines best, in one piece.)
    ///
    /// Issue a put (`is_put`) or get, optionally flushing just the window it used,
    /// under one serialisation guard.
    ///
    /// # Safety
    /// `local` must be valid (readable for puts, writable for gets) for `len` bytes
    /// until the operation completes; `raddr` must be accessible on `rank`.
    #[inline]
    pub(super) unsafe fn rma(
        &self,
        is_put: bool,
        rank: usize,
        raddr: usize,
        local: *mut u8,
        len: usize,
        sync: bool,
    ) -> Result<()> {
        // The layer above validated rank; out of range here is a bug, not user input.
        debug_assert!(rank < self.size);
        if rank == self.rank {
            // SAFETY: our own memory; the layer above checked raddr is registered here
            // and local is valid for len bytes (this function's contract).
            unsafe {
                if is_put {
                    std::ptr::copy(local as *const u8, raddr as *mut u8, len)
                } else {
                    std::ptr::copy(raddr as *const u8, local, len)
                }
            }
            return Ok(());
        }
        if let Some(view) = self.peer_heaps[rank] {
            let (base, hlen) = self.remote_heaps[rank];
            if raddr >= base && raddr.checked_add(len).is_some_and(|e| e <= base + hlen) {
                let at = view + (raddr - base);
                // SAFETY: `at` is the same heap bytes mapped into this process (MPI
                // shared window of this node), in range per the check above; `local`
                // is valid for len bytes (contract). The copy is complete on return,
                // so a later flush has nothing to wait for.
                unsafe { super::cma::plain_copy(is_put, at, local as usize, len) };
                return Ok(());
            }
        }
        let (win, disp, bit) = self.resolve(rank, raddr, len);
        if bit == WIN_DYN {
            if self.pid_for_copy(rank).is_some() {
                // User memory of a node peer (or its heap segment mapped here, which
                // `single_copy` looks at first): the kernel copies it and checks it.
                // Open MPI's one-sided path over the same copy retries an EFAULT for
                // ever (a peer that unmapped memory it had exposed would spin us),
                // MPICH's UCX aborts; here it is FH_ERR_ACCESS.
                let r = self.single_copy(rank, is_put, raddr, local as usize, len);
                fence(Ordering::Release);
                return r;
            }
            // Without the single copy (FH_CMA=0) a node peer's heap segment mapped
            // here is still a memory copy.
            if let Some(at) = self.seg_view(rank, raddr, len) {
                // SAFETY: `at` lies in the peer's shared heap segment mapped here
                // (seg_view checked the whole span); `local` per the contract.
                unsafe { super::cma::plain_copy(is_put, at, local as usize, len) };
                return Ok(());
            }
        }
        self.ring_peer(rank);
        let _s = self.serial();
        let dt = u8t();
        let mut off = 0usize;
        let mut retry_until = None;
        loop {
            let n = (len - off).min(i32::MAX as usize) as c_int;
            // SAFETY: local is valid for len bytes until completion (contract); raddr
            // is accessible on rank; n fits an int.
            let rc = unsafe {
                let d = disp + off as ffi::MPI_Aint;
                if is_put {
                    ffi::MPI_Put(
                        local.add(off) as *const c_void,
                        n,
                        dt,
                        rank as c_int,
                        d,
                        n,
                        dt,
                        win,
                    )
                } else {
                    ffi::MPI_Get(
                        local.add(off) as *mut c_void,
                        n,
                        dt,
                        rank as c_int,
                        d,
                        n,
                        dt,
                        win,
                    )
                }
            };
            if rc != ffi::MPI_SUCCESS as c_int {
                if bit == WIN_DYN && range_retry(rc, &mut retry_until) {
                    continue;
                }
                return Err(rma_error(rc, is_put, n as usize, rank, raddr + off));
            }
            off += n as usize;
            if off >= len {
                break;
            }
        }
        if sync {
            // SAFETY: flushing the window just used, inside its lock_all epoch.
            let rc = unsafe { ffi::PMPI_Win_flush(rank as c_int, win) };
            check(rc, || format!("MPI_Win_flush(rank {})", rank))?;
        } else if self.used[rank].load(Ordering::Relaxed) & bit == 0 {
            self.used[rank].fetch_or(bit, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The datatype algorithm of a non-contiguous transfer: one `MPI_Put`/`MPI_Get`
    /// of all `pieces` `(raddr, local, len)`, with an `MPI_Type_create_hindexed`
    /// on each side. `None` when MPI is not the path to these pieces (own rank, the
    /// node-shared heap, the kernel copy), when they do not all fall in one window,
    /// or when a count does not fit an int. A dynamic-window caller guarantees the
    /// pieces' whole extent lies in one attachment (MPI refuses a datatype spanning
    /// two).
    ///
    /// # Safety
    /// Every `local` range valid (readable for puts, writable for gets) until the
    /// operation completes; every `raddr` accessible on `rank`.
    pub(super) unsafe fn rma_typed(
        &self,
        is_put: bool,
        rank: usize,
        pieces: &[(usize, usize, usize)],
        sync: bool,
    ) -> Option<Result<()>> {
        if rank == self.rank || pieces.is_empty() || pieces.len() > i32::MAX as usize {
            return None;
        }
        self.ring_peer(rank);
        let (win, _, bit) = self.resolve(rank, pieces[0].0, pieces[0].2);
        let served_elsewhere = match bit {
            WIN_HEAP => self.peer_heaps[rank].is_some(),
            _ => self.pid_for_copy(rank).is_some(),
        };
        if served_elsewhere {
            return None;
        }
        let mut lens = Vec::with_capacity(pieces.len());
        let mut tdisp = Vec::with_capacity(pieces.len());
        let mut odisp = Vec::with_capacity(pieces.len());
        let base = pieces[0].1;
        for &(raddr, local, len) in pieces {
            let (_, d, b) = self.resolve(rank, raddr, len);
            if b != bit || len > i32::MAX as usize {
                return None;
            }
            lens.push(len as c_int);
            tdisp.push(d);
            odisp.push(local.wrapping_sub(base) as isize as ffi::MPI_Aint);
        }
        // The target datatype is relative to the lowest displacement, which is the
        // operation's target_disp (MPI looks the window's memory up from there).
        let lo = tdisp.iter().copied().min().unwrap_or(0);
        for d in tdisp.iter_mut() {
            *d -= lo;
        }
        let _s = self.serial();
        // SAFETY: the lists hold pieces.len() entries each; the types are committed
        // before use and freed after the call (MPI keeps them until completion);
        // local and remote validity per this function's contract.
        Some(unsafe {
            self.typed_call(
                is_put,
                rank,
                (win, lo),
                bit,
                base,
                &lens,
                &odisp,
                &tdisp,
                sync,
            )
        })
    }

    /// The MPI calls of [`MpiConduit::rma_typed`], under its serialisation guard.
    ///
    /// # Safety
    /// As `rma_typed`; the three lists are of equal length.
    #[allow(clippy::too_many_arguments)]
    unsafe fn typed_call(
        &self,
        is_put: bool,
        rank: usize,
        (win, lo): (ffi::MPI_Win, ffi::MPI_Aint),
        bit: u8,
        base: usize,
        lens: &[c_int],
        odisp: &[ffi::MPI_Aint],
        tdisp: &[ffi::MPI_Aint],
        sync: bool,
    ) -> Result<()> {
        let n = lens.len() as c_int;
        // SAFETY: MPI_DATATYPE_NULL-initialised handles are written by the calls.
        let (mut ot, mut tt) = unsafe { (ffi::RSMPI_DATATYPE_NULL, ffi::RSMPI_DATATYPE_NULL) };
        // SAFETY: n entries in each list (contract).
        let rc = unsafe {
            ffi::MPI_Type_create_hindexed(n, lens.as_ptr(), odisp.as_ptr(), u8t(), &mut ot)
        };
        check(rc, || "MPI_Type_create_hindexed (origin)".into())?;
        // SAFETY: as above.
        let rc = unsafe {
            ffi::MPI_Type_create_hindexed(n, lens.as_ptr(), tdisp.as_ptr(), u8t(), &mut tt)
        };
        if let Err(e) = check(rc, || "MPI_Type_create_hindexed (target)".into()) {
            // SAFETY: `ot` was created above.
            unsafe { ffi::MPI_Type_free(&mut ot) };
            return Err(e);
        }
        let mut retry_until = None;
        let rc = loop {
            // SAFETY: committing the types just created; the put/get reads or writes
            // the local pieces through `ot` from `base` and the remote ones through
            // `tt` at displacement `lo` (contract).
            let rc = unsafe {
                ffi::MPI_Type_commit(&mut ot);
                ffi::MPI_Type_commit(&mut tt);
                if is_put {
                    ffi::MPI_Put(base as *const c_void, 1, ot, rank as c_int, lo, 1, tt, win)
                } else {
                    ffi::MPI_Get(base as *mut c_void, 1, ot, rank as c_int, lo, 1, tt, win)
                }
            };
            if rc != ffi::MPI_SUCCESS as c_int
                && bit == WIN_DYN
                && range_retry(rc, &mut retry_until)
            {
                continue;
            }
            break rc;
        };
        // SAFETY: freeing the committed types; pending operations keep them alive.
        unsafe {
            ffi::MPI_Type_free(&mut ot);
            ffi::MPI_Type_free(&mut tt);
        }
        if rc != ffi::MPI_SUCCESS as c_int {
            let total: usize = lens.iter().map(|&l| l as usize).sum();
            return Err(rma_error(rc, is_put, total, rank, lo as usize));
        }
        if sync {
            // SAFETY: flushing the window just used, inside its lock_all epoch.
            let rc = unsafe { ffi::PMPI_Win_flush(rank as c_int, win) };
            check(rc, || format!("MPI_Win_flush(rank {})", rank))?;
        } else if self.used[rank].load(Ordering::Relaxed) & bit == 0 {
            self.used[rank].fetch_or(bit, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Start `MPI_Iallreduce` (`MPI_MAX` or `MPI_SUM`) of `v`: the maximum (a
    /// barrier's) on the sync communicator, the sum (finalize's count of frames, after
    /// the AM communicator's last barrier) on the AM communicator, each in its own
    /// slot, so a barrier left pending at finalize cannot pair with the count.
    pub(super) fn start_reduce3(&self, op: crate::conduit::Reduce3, v: [u64; 3]) -> Result<()> {
        let _s = self.serial();
        let (slot, comm) = match op {
            crate::conduit::Reduce3::Max => (&self.max3, self.sync_comm.0),
            crate::conduit::Reduce3::Sum => (&self.sum3, self.am_comm.0),
        };
        let mut g = slot.lock();
        if g.is_some() {
            bail!(
                State,
                "an MPI barrier is already in progress on this context"
            );
        }
        let mut buf = Box::new([v[0], v[1], v[2], 0, 0, 0]);
        // SAFETY: reads an immutable extern constant (MPI_REQUEST_NULL) from rsmpi's C shim.
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: the boxed buffer is kept with the request until it completes.
        let rc = unsafe {
            ffi::MPI_Iallreduce(
                buf.as_ptr() as *const c_void,
                buf.as_mut_ptr().add(3) as *mut c_void,
                3,
                ffi::RSMPI_UINT64_T,
                match op {
                    crate::conduit::Reduce3::Max => ffi::RSMPI_MAX,
                    crate::conduit::Reduce3::Sum => ffi::RSMPI_SUM,
                },
                comm,
                &mut req,
            )
        };
        check(rc, || "MPI_Iallreduce (barrier)".into())?;
        *g = Some((H(req), buf));
        Ok(())
    }

    /// Test the reduction `start_reduce3` began with `op`; its result once complete.
    pub(super) fn test_reduce3(&self, op: crate::conduit::Reduce3) -> Result<Option<[u64; 3]>> {
        let _s = self.serial();
        let mut g = match op {
            crate::conduit::Reduce3::Max => self.max3.lock(),
            crate::conduit::Reduce3::Sum => self.sum3.lock(),
        };
        let Some((req, buf)) = g.as_mut() else {
            bail!(State, "no MPI barrier in progress");
        };
        let mut flag: c_int = 0;
        check(
            // SAFETY: testing the Iallreduce request we own (held in `self.max3` under its
            // lock, with the buffer it writes); flag is a local, the status is ignored.
            unsafe { ffi::MPI_Test(&mut req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
            || "MPI_Test (barrier)".into(),
        )?;
        if flag == 0 {
            return Ok(None);
        }
        let r = [buf[3], buf[4], buf[5]];
        *g = None;
        Ok(Some(r))
    }

    /// Enter MPI's progress engine once (an `MPI_Iprobe` on the AM communicator).
    pub(super) fn nudge_mpi(&self) {
        let _s = self.serial();
        let mut flag: c_int = 0;
        // SAFETY: probing our own communicator; the status is ignored.
        unsafe {
            ffi::MPI_Iprobe(
                ffi::RSMPI_ANY_SOURCE,
                ffi::RSMPI_ANY_TAG,
                self.am_comm.0,
                &mut flag,
                ffi::RSMPI_STATUS_IGNORE,
            );
        }
    }

    /// One `MPI_Compare_and_swap` + flush on the word; returns the old value.
    pub(super) fn cas_once(
        &self,
        rank: usize,
        raddr: usize,
        w: Width,
        compare: u64,
        new: u64,
    ) -> Result<u64> {
        let (win, disp, _) = self.resolve(rank, raddr, w.bytes());
        let _s = self.serial();
        let (c, n) = (w.mask(compare), w.mask(new));
        let mut out = 0u64;
        // SAFETY: the three buffers are locals valid for 8 bytes; for 32-bit words
        // the value sits in the low half of a little-endian u64 (checked below);
        // raddr is accessible on rank (caller's contract); we flush before reading.
        unsafe {
            let dt = match w {
                Width::W32 => ffi::RSMPI_UINT32_T,
                Width::W64 => ffi::RSMPI_UINT64_T,
            };
            let rc = ffi::MPI_Compare_and_swap(
                &n as *const u64 as *const c_void,
                &c as *const u64 as *const c_void,
                &mut out as *mut u64 as *mut c_void,
                dt,
                rank as c_int,
                disp,
                win,
            );
            check(rc, || {
                format!("MPI_Compare_and_swap(rank {}, {:#x})", rank, raddr)
            })?;
            let rc = ffi::PMPI_Win_flush(rank as c_int, win);
            check(rc, || format!("MPI_Win_flush(rank {})", rank))?;
        }
        Ok(w.mask(out))
    }

    /// Every operation becomes `MPI_Compare_and_swap`: MPI promises atomicity only
    /// between accumulates of the *same* operation (`accumulate_ops`), so with one
    /// operation for everything, fetch&add racing swap racing compare&swap stays
    /// atomic. Fetch is CAS(g, g) (one round trip whatever g is); the others loop:
    /// read-guess, compute, CAS, retry with the value CAS returned.
    /// Wake node peer `rank` if it sleeps in a wait: an operation through the
    /// transport is about to need its progress.
    #[inline]
    pub(super) fn ring_peer(&self, rank: usize) {
        if let (Some(off), Some(Some(view))) = (self.bell_off.get(), self.peer_heaps.get(rank)) {
            if rank != self.rank {
                // SAFETY: the bell line of a node peer's sync area, in the node-shared
                // mapping for the conduit's life, only ever used as a Bell.
                unsafe { crate::runtime::wait::Bell::at((view + off) as *mut u8) }.ring();
            }
        }
    }

    pub(super) fn atomic_op(
        &self,
        rank: usize,
        raddr: usize,
        w: Width,
        op: AtomicOp,
    ) -> Result<u64> {
        self.live()?;
        self.check_rank(rank)?;
        if let Some(p) = self.native(rank, raddr, w.bytes()) {
            // SAFETY: a heap word mapped here, aligned (checked above us); with
            // all_native every rank reaches heap words only through cpu_atomic.
            return Ok(unsafe { crate::conduit::cpu_atomic(p, w, op) });
        }
        self.ring_peer(rank);
        if w == Width::W32 {
            // Every 32-bit operation is a 64-bit compare-and-swap loop on the aligned
            // word around it: Open MPI's shared-memory transport emulates 32-bit CAS as
            // lock + get + put, which is not atomic with our own CPU atomics below,
            // while its 64-bit operations are CPU atomics at the target.
            let base = raddr & !7;
            let sh = ((raddr & 4) * 8) as u32;
            loop {
                let cur = self.atomic(rank, base, Width::W64, AtomicOp::Fetch)?;
                let old = (cur >> sh) & 0xffff_ffff;
                let Some(new) = op.apply(old, Width::W32) else {
                    return Ok(old);
                };
                let want = (cur & !(0xffff_ffffu64 << sh)) | (new << sh);
                let got = self.atomic(
                    rank,
                    base,
                    Width::W64,
                    AtomicOp::Cas {
                        expected: cur,
                        desired: want,
                    },
                )?;
                if got == cur {
                    return Ok(old);
                }
            }
        }
        if rank == self.rank && boot::BUILT_FOR == "openmpi" {
            // Open MPI 4.1's osc/rdma crashes on an atomic aimed at the calling rank
            // (btl/vader's emulated compare-and-swap has no endpoint for self). That
            // emulation applies every remote operation *at the target* with CPU
            // atomics (btl_vader_sc_emu.c), so our own CPU atomic on the word is
            // atomic with them.
            // SAFETY: our own address, accessible (caller's contract) and aligned.
            let v = unsafe { crate::conduit::cpu_atomic(raddr as *mut u8, w, op) };
            // Those remote operations are applied only when we enter MPI: a rank
            // hammering its own words must not starve its peers' operations on them.
            self.nudge_mpi();
            return Ok(v);
        }
        let slot = &self.guess[guess_slot(rank, raddr)];
        let mut guess = slot.load(Ordering::Relaxed);
        loop {
            let (compare, new) = match op {
                AtomicOp::Cas { expected, desired } => (expected, desired),
                AtomicOp::Fetch => (guess, guess),
                _ => (guess, op.apply(guess, w).unwrap_or(guess)),
            };
            let old = self.cas_once(rank, raddr, w, compare, new)?;
            let swapped = old == w.mask(compare);
            // Remember what the word holds now: the next operation's first guess.
            slot.store(if swapped { w.mask(new) } else { old }, Ordering::Relaxed);
            if swapped || matches!(op, AtomicOp::Cas { .. } | AtomicOp::Fetch) {
                return Ok(old);
            }
            guess = old;
        }
    }
}

/// How long an origin retries an access the target's MPI refused as out of range.
/// The layer above only accesses ranges the target attached, so a refusal is the
/// target replacing attachments by their union ([`attach`]): two MPI calls.
pub(super) const RANGE_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether to retry a dynamic-window access that failed with `rc`.
#[cold]
#[inline(never)]
pub(super) fn range_retry(rc: c_int, until: &mut Option<std::time::Instant>) -> bool {
    let mut class: c_int = 0;
    // SAFETY: MPI_Error_class writes one int.
    unsafe { ffi::MPI_Error_class(rc, &mut class) };
    if class != ffi::MPI_ERR_RMA_RANGE as c_int {
        return false;
    }
    let now = std::time::Instant::now();
    let deadline = *until.get_or_insert(now + RANGE_RETRY);
    if now >= deadline {
        return false;
    }
    std::thread::yield_now();
    true
}

#[cold]
#[inline(never)]
pub(super) fn rma_error(
    rc: c_int,
    is_put: bool,
    n: usize,
    rank: usize,
    at: usize,
) -> crate::runtime::error::Error {
    crate::err!(
        Mpi,
        "{} of {} bytes {} rank {} at {:#x} failed: {}",
        if is_put { "MPI_Put" } else { "MPI_Get" },
        n,
        if is_put { "to" } else { "from" },
        rank,
        at,
        boot::error_string(rc)
    )
}
