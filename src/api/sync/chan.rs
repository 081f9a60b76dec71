//! Eager chunk channels: from any rank to any rank, single writer, single reader,
//! in order, with flow control and no handshake — the transport of the collectives.
//!
//! Writer `w` owns, in every reader `r`'s sync area, [`SLOTS`] slots of one header
//! line plus `Area::chunk` data bytes. Chunk number `s` (counted over the life of the
//! pair) goes to slot `s % SLOTS`:
//! 1. wait until `s - credit < SLOTS`, where `credit` is the word in *our* area the
//!    reader advances after it consumed a chunk (so the slot is free);
//! 2. put the data, completed (`put_sync`);
//! 3. set the header word to `(s + 1) << 32 | len` (after the data, so a reader that
//!    sees the tag sees the data).
//!
//! The reader waits for the tag `s + 1` in its slot, uses the bytes in place, then
//! advances our credit word. Invariant: `rcvd[w] <= sent-by-w[r] <= rcvd[w] + SLOTS`.
//! Because collectives are called in the same order on every rank, the next chunk
//! of a pair always belongs to the collective both are in.

use super::area::SLOTS;
use crate::api::ctx::CtxInner;
use crate::conduit::AtomicOp;
use crate::runtime::error::Result;
use crate::{bail, err};
use std::sync::atomic::{fence, Ordering};

/// Per-pair counters of this rank.
pub struct Chans {
    /// Chunks sent to each rank.
    pub sent: Vec<u64>,
    /// Chunks consumed from each rank.
    pub rcvd: Vec<u64>,
}

impl Chans {
    pub fn new(n: usize) -> Chans {
        Chans {
            sent: vec![0; n],
            rcvd: vec![0; n],
        }
    }
}

const TAG_MASK: u64 = 0xffff_ffff;

impl CtxInner {
    /// Send `len` bytes (at most one chunk) from local `src` to `dst`.
    pub(crate) fn chan_send(
        &self,
        ch: &mut Chans,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> Result<()> {
        let a = self.area()?;
        debug_assert!(dst != self.rank && len <= a.chunk);
        let seq = ch.sent[dst];
        let credit = a.credit(self.area_base(self.rank), dst);
        if seq >= SLOTS as u64 {
            let what = crate::api::stall::Wait::new(
                "fh_broadcast/fh_reduce/fh_allreduce/fh_allgather",
                Some(dst),
                "room in its inbox (a credit): it has not entered the collective",
            );
            self.sync_wait(what, || {
                Ok(seq - self.word(self.rank, credit, AtomicOp::Fetch)? < SLOTS as u64)
            })?;
        }
        let slot = (seq % SLOTS as u64) as usize;
        let base = self.area_base(dst);
        if len > 0 {
            let mut from = src;
            if self.fh.local_side && !self.heap_or_area(src as usize, len) {
                // A strict-RDMA conduit reads only registered memory: stage it.
                let stage = a.stage(self.area_base(self.rank));
                // SAFETY: the stage buffer holds a.chunk >= len bytes of our heap and
                // is used only by the collective holding the coll lock (us); src is
                // valid for len bytes (caller).
                unsafe { std::ptr::copy_nonoverlapping(src, stage as *mut u8, len) };
                from = stage as *const u8;
            }
            // SAFETY: the slot lies in dst's sync area (registered heap); from is valid
            // for len bytes until put_sync returns.
            unsafe {
                self.conduit
                    .put_sync(dst, a.inbox_data(base, self.rank, slot), from, len)?
            };
        }
        let tag = ((seq + 1) & TAG_MASK) << 32 | len as u64;
        self.word(dst, a.inbox_hdr(base, self.rank, slot), AtomicOp::Set(tag))?;
        ch.sent[dst] = seq + 1;
        Ok(())
    }

    /// Wait for the next chunk from `src`; returns where its bytes are (in our area)
    /// and how many. Call [`Self::chan_done`] when they are no longer needed.
    pub(crate) fn chan_recv(&self, ch: &Chans, src: usize) -> Result<(*const u8, usize)> {
        let a = self.area()?;
        let seq = ch.rcvd[src];
        let slot = (seq % SLOTS as u64) as usize;
        let hdr = a.inbox_hdr(self.area_base(self.rank), src, slot);
        let want = (seq + 1) & TAG_MASK;
        let mut word = 0;
        let what = crate::api::stall::Wait::new(
            "fh_broadcast/fh_reduce/fh_allreduce/fh_allgather",
            Some(src),
            "its next chunk: it has not entered the collective",
        );
        self.sync_wait(what, || {
            word = self.word(self.rank, hdr, AtomicOp::Fetch)?;
            Ok(word >> 32 == want)
        })?;
        fence(Ordering::Acquire);
        let len = (word & TAG_MASK) as usize;
        if len > a.chunk {
            bail!(
                Transport,
                "collective chunk from rank {} claims {} bytes",
                src,
                len
            );
        }
        Ok((
            a.inbox_data(self.area_base(self.rank), src, slot) as *const u8,
            len,
        ))
    }

    /// Give the slot of the chunk [`Self::chan_recv`] returned back to its writer.
    pub(crate) fn chan_done(&self, ch: &mut Chans, src: usize) -> Result<()> {
        let a = self.area()?;
        ch.rcvd[src] += 1;
        let credit = a.credit(self.area_base(src), self.rank);
        self.word(src, credit, AtomicOp::Set(ch.rcvd[src]))?;
        Ok(())
    }

    /// Receive the next chunk from `src` into `dst`, which expects exactly `len` bytes.
    pub(crate) fn chan_recv_into(
        &self,
        ch: &mut Chans,
        src: usize,
        dst: *mut u8,
        len: usize,
        what: &str,
    ) -> Result<()> {
        let (p, got) = self.chan_recv(ch, src)?;
        if got != len {
            let _ = self.chan_done(ch, src);
            return Err(err!(
                InvalidArg,
                "{}: rank {} sent a chunk of {} bytes where {} were expected (ranks called \
                 the collective with different sizes, roots or in a different order)",
                what,
                src,
                got,
                len
            ));
        }
        // SAFETY: p is `len` bytes of our area; dst is valid for len bytes (caller).
        unsafe { std::ptr::copy_nonoverlapping(p, dst, len) };
        self.chan_done(ch, src)
    }

    fn heap_or_area(&self, addr: usize, len: usize) -> bool {
        let (b, l) = self.remote_heaps[self.rank];
        addr >= b && addr.checked_add(len).is_some_and(|e| e <= b + l)
    }
}
