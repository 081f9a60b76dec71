//! Eager chunk channels: from any rank to any rank, single writer, single reader,
//! in order, with flow control and no handshake — the transport of the collectives.
//!
//! Writer `w` owns, in every reader `r`'s sync area, [`SLOTS`] slots of one header
//! line plus `Area::chunk` data bytes. Chunk number `s` (counted over the life of the
//! pair) goes to slot `s % SLOTS`:
//! 1. wait until `s - credit < SLOTS`, where `credit` is the word in *our* area the
//!    reader advances after it consumed a chunk (so the slot is free);
//! 2. put the chunk's [`Desc`] into the header line and the data into the slot, both
//!    completed (`put_sync`);
//! 3. set the header's tag word to `(s + 1) << 32 | flags | len` (after the rest, so
//!    a reader that sees the tag sees the description and the data).
//!
//! The reader waits for the tag `s + 1` in its slot, uses the bytes in place, then
//! advances our credit word. Invariant: `rcvd[w] <= sent-by-w[r] <= rcvd[w] + SLOTS`.
//!
//! How the bytes move: plain stores between ranks of one node mapping; otherwise a
//! small chunk is one active message whose handler does steps 2 and 3 in the
//! reader's own memory, and every credit one message back ([`super::chan_am`]); a
//! larger chunk is put and flushed, then its tag set with a transport atomic.
//!
//! Every chunk says which collective call it belongs to (the per-context call number
//! and the call's arguments) and whether it is the last of its stream or carries an
//! error instead of data, so a reader recognises a chunk of another call or of a call
//! made with other arguments, and can skip a whole stream (`coll` relies on this to
//! report mismatched arguments instead of hanging).

use super::area::{LEN_MASK, SLOTS};
use super::chan_am::TOGETHER;
pub use super::state::Chans;
use crate::api::ctx::CtxInner;
use crate::bail;
use crate::conduit::AtomicOp;
use crate::runtime::error::Result;
use std::sync::atomic::{fence, Ordering};

/// Tag flag: the last chunk of the sender's stream to this reader in this call.
pub const LAST: u64 = 1 << 31;
/// Tag flag: no data; the sender's call failed (its arguments were wrong or did not
/// match another rank's). Always also `LAST`.
pub const ERR: u64 = 1 << 30;

/// What a chunk belongs to: the collective call (`seq` counts a context's calls, the
/// same on every rank) and the arguments its sender called it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub seq: u64,
    pub kind: u8,
    pub dt: u8,
    pub op: u8,
    pub root: u32,
    /// Bytes of the call's payload as the sender sees it (per rank for allgather).
    pub nbytes: u64,
}

impl Desc {
    fn words(&self, err_rank: Option<usize>) -> [u64; 4] {
        [
            self.seq,
            (self.kind as u64) << 48
                | (self.dt as u64) << 40
                | (self.op as u64) << 32
                | self.root as u64,
            self.nbytes,
            err_rank.map_or(0, |r| r as u64 + 1),
        ]
    }
    fn from_words(w: [u64; 4]) -> (Desc, Option<usize>) {
        (
            Desc {
                seq: w[0],
                kind: (w[1] >> 48) as u8,
                dt: (w[1] >> 40) as u8,
                op: (w[1] >> 32) as u8,
                root: w[1] as u32,
                nbytes: w[2],
            },
            w[3].checked_sub(1).map(|r| r as usize),
        )
    }
}

/// A chunk that arrived (still in its slot until [`CtxInner::chan_done`]).
#[derive(Clone, Copy, Debug)]
pub struct Chunk {
    pub data: *const u8,
    pub len: usize,
    pub last: bool,
    pub err: bool,
    pub desc: Desc,
    /// With `err`: the rank that found the problem.
    pub err_rank: Option<usize>,
}

const TAG_MASK: u64 = 0xffff_ffff;

impl CtxInner {
    /// Send `len` bytes (at most one chunk) from local `src` to `dst`, described by
    /// `desc`, with `flags` (`LAST`, `ERR`). While it waits for room, chunks of this
    /// call or an earlier one from ranks outside `expect` (the ranks this call
    /// receives from) are handed to `unexpected` and consumed: they mean the ranks
    /// disagree about the call, and their writers may be waiting for room in our
    /// inbox just as we wait for room in `dst`'s (a cycle of such waits would
    /// otherwise never end).
    ///
    /// Long because one slot-ownership argument spans it: the credit wait (which also
    /// drains unexpected chunks) is what frees the slot, both the node-shared store path
    /// and the put path's SAFETY comments rely on it, and each writes data and
    /// description before the tag, then advances `ch.sent[dst]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn chan_send(
        &self,
        ch: &mut Chans,
        dst: usize,
        src: *const u8,
        len: usize,
        desc: &Desc,
        flags: u64,
        err_rank: Option<usize>,
        expect: &[usize],
        unexpected: &mut dyn FnMut(usize, &Chunk),
    ) -> Result<()> {
        let a = self.area()?;
        debug_assert!(dst != self.rank && len <= a.chunk);
        let seq = ch.sent[dst];
        let credit = a.credit(self.area_base(self.rank), dst);
        if seq >= SLOTS as u64 {
            let what = crate::api::stall::Wait::call(
                "fh_broadcast/fh_reduce/fh_allreduce/fh_allgather",
                Some(dst),
                "room in its inbox (a credit): it has not entered the collective",
            );
            // SAFETY: our own credit word for dst (our sync area, mapped for the
            // context's life, 8-byte aligned), written by CPU atomics only: dst's
            // stores through the node mapping, or our handler of its credit AMs.
            let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(credit as *mut u64) };
            self.chan_wait(dst, what, || {
                if seq - word.load(Ordering::Acquire) < SLOTS as u64 {
                    return Ok(true);
                }
                for r in (0..self.size).filter(|r| *r != self.rank && !expect.contains(r)) {
                    while let Some(c) = self.chan_peek(ch, r)? {
                        if c.desc.seq > desc.seq {
                            break;
                        }
                        unexpected(r, &c);
                        self.chan_done(ch, r)?;
                    }
                }
                Ok(false)
            })?;
        }
        let slot = (seq % SLOTS as u64) as usize;
        let base = self.area_base(dst);
        let hdr = a.inbox_hdr(base, self.rank, slot);
        let words = desc.words(err_rank);
        debug_assert!(len as u64 <= LEN_MASK && flags & LEN_MASK == 0);
        let tag = ((seq + 1) & TAG_MASK) << 32 | flags | len as u64;
        if let Some(p) = self.conduit.native(dst, hdr, 64 + len) {
            // The node-shared mapping: plain stores, then the tag with release order.
            // SAFETY: p is dst's header line and data slot mapped here (native
            // checked the range), written only by us (single writer per slot, and
            // the credit check above says the reader is done with it); src is valid
            // for len bytes (caller); the tag word is 8-byte aligned.
            unsafe {
                std::ptr::copy_nonoverlapping(src, p.add(64), len);
                std::ptr::copy_nonoverlapping(words.as_ptr(), p.add(8) as *mut u64, 4);
                std::sync::atomic::AtomicU64::from_ptr(p as *mut u64).store(tag, Ordering::Release);
            }
            ch.sent[dst] = seq + 1;
            return Ok(());
        }
        if len <= TOGETHER.min(self.cfg.am_max_medium) {
            // Outside the node mapping, a small chunk is one message (`chan_am`).
            let data = if len == 0 {
                &[][..]
            } else {
                // SAFETY: src is valid for len bytes (caller).
                unsafe { std::slice::from_raw_parts(src, len) }
            };
            self.chan_send_am(dst, tag, &words, data)?;
            ch.sent[dst] = seq + 1;
            return Ok(());
        }
        let mine = self.area_base(self.rank);
        let stage = a.desc_stage(mine);
        // SAFETY: the desc stage line is 64 bytes of our own heap, used only by the
        // collective holding the coll lock (us), and complete before we reuse it
        // (every put below is completed by a put_sync before this function returns).
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), (stage + 8) as *mut u64, 4) };
        // A small chunk the AM path did not take (FH_AM_MAX_MEDIUM below it) travels
        // with its description in one put: the data stage follows the description
        // line as a slot's data follows its header.
        let together = len <= TOGETHER;
        let mut from = src;
        if len > 0 && (together || self.fh.local_side && !self.heap_or_area(src as usize, len)) {
            // Also: a strict-RDMA conduit reads only registered memory.
            let data = a.stage(mine);
            // SAFETY: the stage buffer holds a.chunk >= len bytes of our heap and
            // is used only by the collective holding the coll lock (us); src is
            // valid for len bytes (caller).
            unsafe { std::ptr::copy_nonoverlapping(src, data as *mut u8, len) };
            from = data as *const u8;
        }
        // SAFETY: the header line and slot lie in dst's sync area (registered heap);
        // the stage lines and `from` stay valid and unchanged until put_sync returns.
        unsafe {
            if together {
                let line = super::area::LINE - 8;
                self.conduit
                    .put_sync(dst, hdr + 8, (stage + 8) as *const u8, line + len)?
            } else {
                self.conduit
                    .put(dst, hdr + 8, (stage + 8) as *const u8, 32)?;
                self.conduit
                    .put_sync(dst, a.inbox_data(base, self.rank, slot), from, len)?
            }
        };
        self.word(dst, hdr, AtomicOp::Set(tag))?;
        ch.sent[dst] = seq + 1;
        Ok(())
    }

    /// The next chunk from `src` if it has arrived (not consumed).
    #[inline]
    pub(crate) fn chan_peek(&self, ch: &Chans, src: usize) -> Result<Option<Chunk>> {
        let a = self.area()?;
        let seq = ch.rcvd[src];
        let slot = (seq % SLOTS as u64) as usize;
        let hdr = a.inbox_hdr(self.area_base(self.rank), src, slot);
        // SAFETY: our own inbox (our heap, mapped for the context's life), 8-byte
        // aligned; writers store the tag atomically (CPU or MPI atomics, which
        // `word` makes atomic with each other).
        let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(hdr as *mut u64) }
            .load(Ordering::Acquire);
        if word >> 32 != (seq + 1) & TAG_MASK {
            return Ok(None);
        }
        fence(Ordering::Acquire);
        let len = (word & LEN_MASK) as usize;
        if len > a.chunk {
            bail!(
                Transport,
                "collective chunk from rank {} claims {} bytes",
                src,
                len
            );
        }
        let mut w = [0u64; 4];
        for (i, x) in w.iter_mut().enumerate() {
            // SAFETY: the header line is in our own area; the writer completed these
            // words before it set the tag we just saw (acquire above).
            *x = unsafe { std::ptr::read_volatile((hdr + 8 + 8 * i) as *const u64) };
        }
        let (desc, err_rank) = Desc::from_words(w);
        Ok(Some(Chunk {
            data: a.inbox_data(self.area_base(self.rank), src, slot) as *const u8,
            len,
            last: word & LAST != 0,
            err: word & ERR != 0,
            desc,
            err_rank,
        }))
    }

    /// Wait for the next chunk from `src`. `pending` runs in the wait loop (the
    /// caller skips stale chunks there) and may end the wait: `None` then.
    pub(crate) fn chan_recv(
        &self,
        ch: &mut Chans,
        src: usize,
        pending: &mut dyn FnMut(&CtxInner, &mut Chans) -> Result<bool>,
    ) -> Result<Option<Chunk>> {
        if let Some(c) = self.chan_peek(ch, src)? {
            return Ok(Some(c));
        }
        let what = crate::api::stall::Wait::call(
            "fh_broadcast/fh_reduce/fh_allreduce/fh_allgather",
            Some(src),
            "its next chunk: it has not entered the collective",
        );
        let mut got = None;
        self.chan_wait(src, what, || {
            got = self.chan_peek(ch, src)?;
            Ok(got.is_some() || pending(self, ch)?)
        })?;
        Ok(got)
    }

    /// Give the slot of the chunk [`Self::chan_peek`] returned back to its writer.
    pub(crate) fn chan_done(&self, ch: &mut Chans, src: usize) -> Result<()> {
        let a = self.area()?;
        ch.rcvd[src] += 1;
        if !self.chan_native(src) {
            return self.chan_credit_am(src, ch.rcvd[src]);
        }
        let credit = a.credit(self.area_base(src), self.rank);
        self.word(src, credit, AtomicOp::Set(ch.rcvd[src]))?;
        Ok(())
    }

    /// Wait for what `peer` makes appear in our area: a tag or a credit. From a rank
    /// outside the node mapping it is written by our own handler of its AM
    /// (`chan_am`), so the wait polls from its first round.
    fn chan_wait(
        &self,
        peer: usize,
        what: crate::api::stall::Wait,
        done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        if self.chan_native(peer) {
            self.wait_awake(what, done)
        } else {
            self.wait_for(what, done)
        }
    }

    fn heap_or_area(&self, addr: usize, len: usize) -> bool {
        let (b, l) = self.remote_heaps[self.rank];
        addr >= b && addr.checked_add(len).is_some_and(|e| e <= b + l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_round_trip() {
        let d = Desc {
            seq: 77,
            kind: 3,
            dt: 5,
            op: 6,
            root: 12345,
            nbytes: 1 << 40,
        };
        assert_eq!(Desc::from_words(d.words(None)), (d, None));
        assert_eq!(Desc::from_words(d.words(Some(0))), (d, Some(0)));
        assert_eq!(Desc::from_words(d.words(Some(9))).1, Some(9));
    }
}
