//! The channels' messages to ranks outside the node mapping, as active messages.
//!
//! Between ranks that do not share a mapping, a chunk written with one-sided MPI
//! costs a put, a flush and a compare-and-swap for the tag, and its credit another
//! compare-and-swap; Open MPI applies those atomics only inside the target's MPI
//! calls, so each blocks until the peer polls. Here a small chunk (at most
//! [`TOGETHER`] bytes, and what a medium AM carries) travels instead as one medium
//! AM whose handler, run by the reader's own progress, writes the slot and then the
//! tag into the reader's own inbox, exactly as a node peer's stores would; and every
//! credit to such a writer is a short AM whose handler raises the credit word in the
//! writer's own area. Larger chunks keep the one-sided path (their tag is written
//! after the data as before); their credits come back as AMs too.
//!
//! Guarantees: a reader sees a slot's tag only after its description and data (the
//! handler stores them first, the tag with release order). Credit words only grow
//! (`fetch_max`), so a late or repeated credit frame cannot hand out a slot twice.
//! A frame that does not describe a chunk of this area (wrong arguments, a length
//! beyond the chunk or unlike its payload) is refused and reported, never written.
//! Waits for what these handlers write poll (`chan::chan_wait`): they run only in
//! this rank's progress.

use super::area::{LEN_MASK, LINE, SLOTS};
use crate::api::am::table::Token;
use crate::api::ctx::CtxInner;
use crate::api::wire::{Category, Frame, LibHandler};
use crate::err;
use crate::runtime::error::Result;
use std::sync::atomic::{AtomicU64, Ordering};

/// Chunks up to this many bytes travel as one message with their description.
pub(super) const TOGETHER: usize = 4096;

impl CtxInner {
    /// Whether `peer`'s area is reached by plain stores (the node mapping).
    pub(super) fn chan_native(&self, peer: usize) -> bool {
        let (base, _) = self.remote_heaps[peer];
        self.conduit.native(peer, base, 1).is_some()
    }

    /// Send a chunk as an AM: the tag word and the description, then the data.
    pub(super) fn chan_send_am(
        &self,
        dst: usize,
        tag: u64,
        words: &[u64; 4],
        data: &[u8],
    ) -> Result<()> {
        let args = [tag, words[0], words[1], words[2], words[3]];
        let h = LibHandler::CollChunk as u8;
        self.am_request(dst, Category::Medium, h, &args, data, None)
    }

    /// Tell writer `src` (outside the node mapping) that `rcvd` of its chunks are
    /// consumed.
    pub(super) fn chan_credit_am(&self, src: usize, rcvd: u64) -> Result<()> {
        let h = LibHandler::CollCredit as u8;
        self.am_request(src, Category::Short, h, &[rcvd], &[], None)
    }
}

fn refuse(ctx: &CtxInner, src: usize, what: &str) {
    ctx.record_async_error(err!(
        Transport,
        "collective channel: refused a {} from rank {}",
        what,
        src
    ));
}

/// A chunk from `tok.src`: into its slot of our inbox, tag last.
pub(super) fn handle_chunk(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let Ok(a) = ctx.area() else {
        return refuse(ctx, tok.src, "chunk before the sync area exists");
    };
    let &[tag, w0, w1, w2, w3] = f.args() else {
        return refuse(ctx, tok.src, "malformed chunk");
    };
    let len = (tag & LEN_MASK) as usize;
    let seq1 = tag >> 32;
    if len != f.payload.len() || len > a.chunk || seq1 == 0 || tok.src >= ctx.size {
        return refuse(ctx, tok.src, "chunk whose length or number is wrong");
    }
    let slot = ((seq1 - 1) % SLOTS as u64) as usize;
    let hdr = a.inbox_hdr(ctx.area_base(ctx.rank), tok.src, slot);
    // SAFETY: the slot lies in our own sync area (our heap, mapped for the context's
    // life): the header line and `a.chunk >= len` data bytes after it, written only
    // by this writer's chunks, and the writer sends one only once its credit says we
    // are done with the slot; the tag word is 8-byte aligned and stored last.
    unsafe {
        std::ptr::copy_nonoverlapping(f.payload.as_ptr(), (hdr + LINE) as *mut u8, len);
        std::ptr::copy_nonoverlapping([w0, w1, w2, w3].as_ptr(), (hdr + 8) as *mut u64, 4);
        AtomicU64::from_ptr(hdr as *mut u64).store(tag, Ordering::Release);
    }
}

/// A credit from reader `tok.src`: raise our credit word for it.
pub(super) fn handle_credit(ctx: &CtxInner, tok: &Token, f: &Frame<'_>) {
    let Ok(a) = ctx.area() else {
        return refuse(ctx, tok.src, "credit before the sync area exists");
    };
    let &[rcvd] = f.args() else {
        return refuse(ctx, tok.src, "malformed credit");
    };
    if tok.src >= ctx.size {
        return refuse(ctx, tok.src, "credit from no rank");
    }
    let at = a.credit(ctx.area_base(ctx.rank), tok.src);
    // SAFETY: the credit word for this reader in our own sync area, 8-byte aligned,
    // touched only through atomics.
    unsafe { AtomicU64::from_ptr(at as *mut u64) }.fetch_max(rcvd, Ordering::AcqRel);
}
