//! The writer's end of a pipe (seed 003, "rpipe – rwrite()"): allocation in the
//! reader's inbox without asking it, the free-map sync that learns the reader's
//! frees, and `rwrite`, which delivers the data before the notice that announces it.
//!
//! Guarantees: at most `slots` allocations are outstanding and only space the
//! reader freed is reallocated, so no notice slot and no held message is ever
//! overwritten; an allocation stays marked written only when both its data and its
//! notice went out; a free bit from the reader that names no written message is
//! refused and reported, never trusted.

use super::shape::WORDS_STAGED;
use super::{extent, Inner, Pipe, PipeStats, Shape, Side, Transfer, ADDR_SHIFT, INLINE_BIT, UNIT};
use crate::api::am;
use crate::api::rpipe::rmalloc::{Policy, Rmalloc};
use crate::api::rpipe::{freemap, slots};
use crate::api::CtxInner;
use crate::runtime::error::Result;
use crate::{bail, err};
use std::sync::atomic::{fence, Ordering};

/// The writer's record of one allocation, kept as its tag in the allocator.
#[derive(Clone, Copy, Debug)]
pub(super) struct Alloc {
    /// Bytes asked of rmalloc (the allocator keeps the rounded extent).
    pub(super) len: usize,
    /// rwrite sent it: the reader owns it until its free comes back.
    pub(super) written: bool,
}

/// What `rwrite` tells the reader: the words for slot `slot` of its ring, and
/// whether the bytes travel in that slot (`inline`) or at the allocation.
#[derive(Clone, Copy)]
struct Notice {
    slot: usize,
    inline: bool,
    words: [u64; 2],
}

/// The side that writes into the peer's inbox.
pub(super) struct Tx {
    /// The peer's inbox space, each live allocation tagged with its record.
    pub(super) space: Rmalloc<Alloc>,
    /// Local outbox block.
    pub(super) outbox: usize,
    /// The peer's inbox block.
    pub(super) peer_inbox: usize,
    /// The peer's whole inbox block as mapped here (a node-shared peer: `rwrite`
    /// stores straight into it), or None (through the transport). The mapping lasts
    /// as long as the context, which every call checks is live first.
    pub(super) peer_view: Option<usize>,
    /// Notices written so far (the last sequence number used).
    pub(super) seq: u64,
    /// The reader's free bitmap as of the last sync.
    pub(super) seen: Vec<u64>,
}

impl Tx {
    pub(super) fn new(
        ctx: &CtxInner,
        peer: usize,
        shape: Shape,
        policy: Policy,
        outbox: usize,
        peer_inbox: usize,
    ) -> Tx {
        Tx {
            space: Rmalloc::tagged(shape.width, UNIT, policy),
            outbox,
            peer_inbox,
            peer_view: ctx
                .conduit
                .native(peer, peer_inbox, shape.inbox_bytes())
                .map(|p| p as usize),
            seq: 0,
            seen: vec![0; shape.bitmap / 8],
        }
    }
}

impl Pipe {
    /// Allocate `nbytes` in the peer's inbox. `wait`: block (progressing) until space
    /// is free; otherwise `Ok(None)` when it is not.
    pub fn rmalloc(&self, nbytes: usize, wait: bool) -> Result<Option<u64>> {
        self.live()?;
        if wait {
            am::check_not_in_handler("rpipe_rmalloc")?;
        }
        if nbytes > self.max_message {
            bail!(
                InvalidArg,
                "a {}-byte message can never fit this pipe: its width is {} bytes (open a wider pipe)",
                nbytes,
                self.max_message
            );
        }
        let mut counted = false;
        let mut got = None;
        let mut attempt = || -> Result<bool> {
            got = self.alloc_or_closed(nbytes, &mut counted)?;
            Ok(got.is_some())
        };
        if attempt()? {
            return Ok(got);
        }
        if !wait {
            // A caller spinning on try_rmalloc must still serve the peer (an MPI
            // without asynchronous progress completes RMA aimed at us only when we
            // call it).
            self.ctx.maybe_poll_idle();
            return Ok(got);
        }
        // The reader frees without telling us (we read its free map), so this
        // wait never sleeps: it spins, then yields (`runtime::wait`).
        self.ctx.wait_awake(
            crate::api::stall::Wait::call(
                "rpipe_rmalloc",
                Some(self.peer),
                "free space: the reader has not read and freed enough messages",
            ),
            attempt,
        )?;
        Ok(got)
    }

    /// One allocation attempt (syncing the free map as the policy says); an error
    /// once the peer closed.
    fn alloc_or_closed(&self, nbytes: usize, counted: &mut bool) -> Result<Option<u64>> {
        let immediate = matches!(self.policy, Policy::BestFit | Policy::WorstFit);
        if self.peer_closed.load(Ordering::Acquire) {
            // Nobody will read what is written now: refuse at once (space left over
            // once let such messages through, and they were silently lost).
            bail!(
                State,
                "rank {} closed the pipe: nothing written now would be read",
                self.peer
            );
        }
        {
            let mut g = self.inner.lock();
            let Inner { tx, stats, .. } = &mut *g;
            let tx = tx
                .as_mut()
                .ok_or_else(|| err!(State, "this end of the pipe only reads"))?;
            if immediate {
                self.sync(tx, stats)?;
            }
            let mut got = self.try_alloc(tx, nbytes);
            if got.is_none() && !immediate {
                self.sync(tx, stats)?;
                got = self.try_alloc(tx, nbytes);
            }
            if let Some(off) = got {
                return Ok(Some(self.tx_tag << ADDR_SHIFT | off as u64));
            }
            if !*counted {
                *counted = true;
                stats.rmalloc_waits += 1;
            }
        }
        Ok(None)
    }

    fn try_alloc(&self, tx: &mut Tx, nbytes: usize) -> Option<usize> {
        if tx.space.allocations() >= self.shape.slots {
            return None;
        }
        let rec = Alloc {
            len: nbytes,
            written: false,
        };
        let off = tx.space.alloc_tagged(nbytes, rec)?;
        debug_assert!(off + extent(nbytes) <= self.shape.width);
        Some(off)
    }

    /// Bring the writer's view of the reader's frees up to date (one RDMA get).
    fn sync(&self, tx: &mut Tx, stats: &mut PipeStats) -> Result<()> {
        let view = tx.outbox + self.shape.view_off();
        let remote = tx.peer_inbox + self.shape.bitmap_off();
        // SAFETY: `view` is our outbox's bitmap-sized area (library heap, registered,
        // written by nothing else); `remote` is the peer's bitmap, in its library
        // heap, checked at open.
        unsafe {
            self.ctx
                .conduit
                .get_sync(self.peer, remote, view as *mut u8, self.shape.bitmap)?
        };
        stats.syncs += 1;
        // SAFETY: the get completed; the area is ours, 64-byte aligned, bitmap/8
        // words long, and nothing writes it until the next sync (under our lock).
        let fresh =
            unsafe { std::slice::from_raw_parts(view as *const u64, self.shape.bitmap / 8) };
        // Messages the reader freed (in ascending order), given back in one batch;
        // a flip of a unit that holds no written message is refused and reported.
        let changed = freemap::changed(&mut tx.seen, fresh);
        let mut refused = 0u64;
        tx.space.free_batch(
            changed.iter().map(|&u| u * UNIT),
            |a| a.written,
            |off| {
                refused += 1;
                self.ctx.record_async_error(err!(
                    Transport,
                    "rpipe: rank {} freed offset {:#x} of pipe {}, which holds no message it was sent: ignored",
                    self.peer,
                    off,
                    self.id
                ));
            },
        );
        stats.refused += refused;
        stats.frees_seen += changed.len() as u64 - refused;
        Ok(())
    }

    /// Send the allocation at `addr` to the reader: data, then the notice, under the
    /// pipe lock (`push_direct` or `write_through`); `tx.seq` advances, and the
    /// allocation stays marked written, only when both went out.
    pub fn rwrite(&self, addr: u64) -> Result<()> {
        self.live()?;
        am::check_not_in_handler("rpipe_rwrite")?;
        let mut g = self.inner.lock();
        let Side::Tx(off) = self.decode(&g, addr)? else {
            bail!(
                InvalidArg,
                "{:#x} is a message this rank received; rpipe_rwrite takes addresses from rpipe_rmalloc",
                addr
            );
        };
        let Inner { tx, stats, .. } = &mut *g;
        let tx = tx.as_mut().expect("decoded");
        // Marked written in the same lookup; a failed transfer below marks it back.
        let len = match tx.space.tag_mut(off) {
            Some(_) if self.peer_closed.load(Ordering::Acquire) => bail!(
                State,
                "rank {} closed the pipe: this message would never be read, so it is not sent",
                self.peer
            ),
            Some(a) if !a.written => {
                a.written = true;
                a.len
            }
            Some(_) => bail!(
                InvalidArg,
                "{:#x} was already written (rpipe_rwrite twice)",
                addr
            ),
            None => bail!(
                InvalidArg,
                "{:#x} is not allocated (never returned by rpipe_rmalloc, or already freed)",
                addr
            ),
        };
        let seq = tx.seq + 1;
        let slot = slots::slot_addr(tx.peer_inbox + self.shape.ring_off(), self.shape.ring, seq);
        let inline = self.transfer == Transfer::Push && len <= slots::INLINE_MAX;
        let (off_units, len_word) = ((off / UNIT) as u64, len as u64);
        let a = off_units | if inline { INLINE_BIT } else { 0 };
        let notice = Notice {
            slot,
            inline,
            words: slots::encode(seq, a, len_word),
        };
        match (tx.peer_view, self.transfer) {
            (Some(view), Transfer::Push) => self.push_direct(tx, view, off, len, &notice),
            _ => {
                if let Err(e) = self.write_through(tx, off, len, &notice) {
                    tx.space.tag_mut(off).expect("checked").written = false;
                    return Err(e);
                }
            }
        }
        self.ctx.bells.ring(self.peer);
        tx.seq = seq;
        stats.written += 1;
        stats.bytes_written += len as u64;
        Ok(())
    }

    /// `rwrite` into a node-shared peer's mapping, push mode: the bytes (into the
    /// slot when inline, else into the inbox at the allocation) straight from our
    /// mirror, then the notice words with release stores. Plain stores become
    /// visible in program order, so data-before-notice needs no fence beyond the
    /// release (a full fence would stall until the peer's lines arrived).
    fn push_direct(&self, tx: &Tx, view: usize, off: usize, len: usize, n: &Notice) {
        let here = |raddr: usize| {
            debug_assert!(
                raddr >= tx.peer_inbox && raddr < tx.peer_inbox + self.shape.inbox_bytes()
            );
            view + (raddr - tx.peer_inbox)
        };
        let src = (tx.outbox + off) as *const u8;
        if n.inline {
            // SAFETY: `len` (<= INLINE_MAX) bytes of our mirror at the allocation
            // (library heap) into the peer's slot as mapped here (inside its ring).
            unsafe { slots::inline_in(here(n.slot), src, len) };
        } else {
            // SAFETY: `len` bytes of our mirror into the allocation's extent in the
            // peer's space as mapped here (inside the width, checked at rmalloc).
            unsafe {
                std::ptr::copy_nonoverlapping(src, here(tx.peer_inbox + off) as *mut u8, len)
            };
        }
        // SAFETY: the peer's slot as mapped here: 64-byte aligned, inside its ring.
        unsafe { slots::store(here(n.slot), n.words) };
    }

    /// `rwrite` through the transport (and pull mode through a mapping): the data
    /// put and its completion (or a full fence for pull), then the notice words put
    /// from our staging block and completed.
    fn write_through(&self, tx: &Tx, off: usize, len: usize, n: &Notice) -> Result<()> {
        let Notice {
            slot,
            inline,
            words,
        } = *n;
        let c = &self.ctx.conduit;
        let stage = tx.outbox + self.shape.stage_off();
        // A node-shared peer: write straight through its mapping. Plain stores become
        // visible in program order, so data-before-notice needs only a release fence
        // (a full fence, as in flush, would stall until the peer's lines arrived).
        let (view, inbox) = (tx.peer_view, tx.peer_inbox);
        let direct = view.is_some();
        let put = |raddr: usize, src: *const u8, n: usize| -> Result<()> {
            debug_assert!(raddr >= inbox && raddr + n <= inbox + self.shape.inbox_bytes());
            match view {
                // SAFETY: `n` bytes of the peer's inbox block (its ring or space: the
                // callers below) as mapped here, from `src`, valid for `n` bytes.
                Some(v) => unsafe {
                    std::ptr::copy_nonoverlapping(src, (v + (raddr - inbox)) as *mut u8, n)
                },
                // SAFETY: as above, through the transport; completed by `complete`.
                None => unsafe { c.put(self.peer, raddr, src, n)? },
            }
            Ok(())
        };
        let complete = || -> Result<()> {
            if direct {
                fence(Ordering::Release);
                Ok(())
            } else {
                c.flush(self.peer)
            }
        };
        match (self.transfer, inline) {
            (Transfer::Push, true) => {
                if len > 0 {
                    // SAFETY: mirror bytes of this allocation into our staging block
                    // (INLINE_MAX bytes before its words, ours; the previous put from
                    // it completed at its flush).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            (tx.outbox + off) as *const u8,
                            stage as *mut u8,
                            len,
                        )
                    };
                    // The staged bytes into the slot's inline area, around its words
                    // (the peer's ring, checked at open).
                    for (at, from, n) in slots::inline_parts(len) {
                        put(slot + at, (stage + from) as *const u8, n)?;
                    }
                    // As for any data: complete before the words leave.
                    complete()?;
                }
            }
            (Transfer::Push, false) => {
                // Source: our mirror at the allocation (library heap, valid for len
                // bytes, unchanged until completion); target: the same offset of the
                // peer's inbox, inside its inbox (checked at open).
                put(tx.peer_inbox + off, (tx.outbox + off) as *const u8, len)?;
                // The data must be complete at the target before the notice leaves.
                complete()?;
            }
            // The reader gets the bytes after it sees the notice: our stores to the
            // mirror must be globally visible before the notice is.
            (Transfer::Pull, _) => fence(Ordering::SeqCst),
        }
        let wstage = stage + WORDS_STAGED;
        // SAFETY: the last 16 bytes of our staging block, 8-byte aligned; the
        // previous notice put from it completed at its flush.
        unsafe { std::ptr::write(wstage as *mut [u64; 2], words) };
        // 16 bytes from our staging block to the words of the peer's slot.
        put(slot + slots::WORDS_AT, wstage as *const u8, 16)?;
        // Complete the notice too: a reader must never wait on a put that an MPI
        // library keeps queued until our next call.
        complete()?;
        Ok(())
    }
}
