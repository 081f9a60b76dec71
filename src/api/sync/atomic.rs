//! Remote atomics (seed 004 ch. 5, Table 5.1): fetch, set, swap (fetch&write),
//! compare&swap, fetch&add, fetch&and/or/xor on aligned 32- and 64-bit words of any
//! rank, the caller's own included.
//!
//! Guarantee: every operation issued through this module on a word is atomic with
//! every other one on that word, whatever the operations and the ranks. How
//! (`conduit::Conduit::native` / `atomic`):
//! - a word the conduit maps for *every* rank (the node-shared library heaps of a
//!   one-node job, or the sim conduit) is operated on with one CPU atomic instruction,
//!   so it is also atomic with respect to the host (seed 004 §5.2.3);
//! - any other word goes through the transport, which makes every operation one kind
//!   (MPI: compare-and-swap loops), because MPI-3 only promises atomicity between the
//!   *same* operation.
//!
//! The rule for the owner of a word (seed 004 §5.2.3's "atomicity with respect to the
//! host"): while any rank may operate on the word, the owner too reads and writes it
//! only through these calls (with its own rank). Plain loads and stores are fine once
//! a barrier separates them from the last remote operation.
//!
//! Where a word may live: the library heap (`fh_malloc`) of any rank, a region the
//! owner registered (`fh_mem_register`), or any address of another rank (firehose
//! pins it on demand). The caller's own unregistered memory is refused with
//! `FH_ERR_ACCESS`: other ranks would reach it through the transport and the two
//! paths would not be atomic with each other.

use crate::api::ctx::CtxInner;
use crate::conduit::cpu_atomic;
/// The operations and widths of the atomics (the C boundary names them from here).
pub use crate::conduit::{AtomicOp, Width};
use crate::firehose::initiator::{self, Carry, Grant};
use crate::runtime::error::Result;
use crate::{bail, err};

impl CtxInner {
    /// Run `op` on the `w`-wide word at `addr` of `rank`; returns the old value.
    pub fn atomic(&self, rank: i64, addr: usize, w: Width, op: AtomicOp) -> Result<u64> {
        self.check_live()?;
        let r = self.check_rank(rank)?;
        let len = w.bytes();
        if addr == 0 {
            bail!(InvalidArg, "atomic: the target address is NULL");
        }
        if addr % len != 0 {
            bail!(
                InvalidArg,
                "atomic: address {:#x} is not aligned to {} bytes (a {}-bit word)",
                addr,
                len,
                len * 8
            );
        }
        self.check_not_internal(r, addr, len)?;
        if let Some(p) = self.conduit.native(r, addr, len) {
            // SAFETY: the conduit maps this word for every rank and every rank operates
            // on it only through cpu_atomic (native()'s contract); aligned above.
            // No ring: a user's atomic rarely ends a wait of its target, and waking a
            // sleeper per operation cost the coarray ATOMIC_ADD row 2.6x.
            return Ok(unsafe { cpu_atomic(p, w, op) });
        }
        let v = self.atomic_transport(r, addr, w, op);
        self.maybe_poll();
        v
    }

    #[inline(never)]
    fn atomic_transport(&self, r: usize, addr: usize, w: Width, op: AtomicOp) -> Result<u64> {
        let len = w.bytes();
        if self.plain_access(r, addr, len).is_some() {
            // Library heap, or a region registered at the target (already approved).
            return self.conduit.atomic(r, addr, w, op);
        }
        if r == self.rank {
            return Err(err!(
                Access,
                "atomic on own address {:#x}: an atomic word must be in fh_malloc memory or a \
                 region registered with fh_mem_register (other ranks reach it through the \
                 transport, and a plain CPU atomic here would not be atomic with theirs)",
                addr
            ));
        }
        if self.regtab_lookup(r, addr, len)? && self.plain_access(r, addr, len).is_some() {
            // Registered at the target, found in its table one-sidedly.
            return self.conduit.atomic(r, addr, w, op);
        }
        super::super::am::check_not_in_handler("atomic on firehose-managed memory")?;
        // Any address of another rank: firehose pins it there (or the target refuses
        // with FH_ERR_ACCESS); the transport then operates on it one-sidedly.
        match initiator::acquire_remote(self, r, addr, len, Carry::None, true)? {
            Grant::Pins(p) => {
                let v = self
                    .still_mapped(r, addr, len)
                    .and_then(|()| self.conduit.atomic(r, addr, w, op));
                initiator::release(self, p);
                v
            }
            Grant::Done => Err(err!(
                Internal,
                "atomic: firehose reported a carried transfer for an atomic"
            )),
        }
    }
}

impl CtxInner {
    /// A word the target pinned may have been unmapped there since (memory freed
    /// without `fh_mem_invalidate`): the transport's atomic would then fault the
    /// target inside its MPI progress. Where the kernel's single copy reaches the
    /// target, read the word first: an unmapped or `PROT_NONE` word is
    /// `FH_ERR_ACCESS` here instead. (A word made read-only after it was pinned is
    /// not caught: a read cannot tell.)
    fn still_mapped(&self, r: usize, addr: usize, len: usize) -> Result<()> {
        let mut word = [0u8; 8];
        debug_assert!(len <= word.len());
        // SAFETY: `word` is a local buffer of 8 >= len writable bytes.
        let read = unsafe {
            self.conduit
                .copy_any(r, false, addr, word.as_mut_ptr() as usize, len)
        };
        match read {
            Some(Err(e)) if e.status == crate::runtime::error::Status::Access => Err(err!(
                Access,
                "atomic on [{:#x}, +{}) of rank {}: that memory is no longer mapped there (freed \
                 or unmapped without fh_mem_invalidate?): {}",
                addr,
                len,
                r,
                e.msg
            )),
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// One operation on a 64-bit word of the library's sync area (or heap) of `rank`,
    /// without the public checks (the caller computed the address). Same atomicity
    /// as [`CtxInner::atomic`].
    #[inline]
    pub(crate) fn word(&self, rank: usize, addr: usize, op: AtomicOp) -> Result<u64> {
        debug_assert!(addr % 8 == 0, "sync words are 8-byte aligned");
        if let Some(p) = self.conduit.native(rank, addr, 8) {
            // SAFETY: as in `atomic`: mapped for every rank, aligned, and every rank
            // operates on library words only through `word`/`atomic`.
            let old = unsafe { cpu_atomic(p, Width::W64, op) };
            if rank != self.rank && !matches!(op, AtomicOp::Fetch) {
                self.bells.ring(rank);
            }
            return Ok(old);
        }
        self.conduit.atomic(rank, addr, Width::W64, op)
    }
}
