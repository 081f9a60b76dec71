//! One rpipe between two ranks (seed 003, "rpipe – rwrite()" and "rpipe – rread()").
//!
//! Each direction of a pipe (writer W → reader R) owns two blocks of library heap,
//! which is always registered:
//!
//! ```text
//!   R's inbox : [ space: width | notice ring: slots × 128 B | free bitmap ]
//!   W's outbox: [ mirror: width | view of R's free bitmap | staging (128 B) ]
//! ```
//!
//! W allocates in R's inbox without asking R ([`Rmalloc`], the policy chosen at
//! open), fills the same offsets of its mirror through `rpipe_rmem`, and:
//! - **push** (`rwrite` of seed 003): puts mirror → inbox, flushes, then puts the
//!   notice `{seq, offset, length}` into R's ring and flushes again. A message of
//!   at most `slots::INLINE_MAX` (112) bytes goes into the notice slot itself, the
//!   first 48 in the notice's cache line, the rest in the next (same puts and
//!   flushes), and R copies it to its place in the inbox when it reads it;
//! - **pull** (`rread` of seed 003, `RPIPE_PULL`): puts only the notice; R's
//!   `rread` fetches the bytes from W's mirror into its own inbox with one RDMA get.
//!
//! R polls its own ring in order (record `seq` lives in slot `(seq-1) mod ring`, see
//! `slots.rs`), hands out the message in place, and `rfree` flips one bit of the
//! free bitmap, which W collects by RDMA (`freemap.rs`).
//!
//! **Why a reader never sees a notice before its data** (push): the notice is put
//! only after `Conduit::flush(R)` returned for the data put, and the conduit
//! contract (MPI: `MPI_Win_flush` completes the operation at the target) makes the
//! data visible in R's memory before the notice put is even issued. R loads the
//! notice with acquire ordering and only then touches the data. In pull mode the
//! data never travels before R asks for it: R's get is issued after it saw the
//! notice, and W stored the bytes (then a full fence) before it put the notice.
//! The test `rpipe_order` in `tests/rpipe.rs` runs on the sim conduit, where puts
//! land only at a flush, so a missing flush would show up as wrong data there.
//!
//! **Flow control**: W never has more than `slots` allocations outstanding (so a
//! notice slot is never overwritten before R read it: a message in slot `s - slots`
//! still unread would be one allocation too many) and never allocates space R has
//! not freed; a full inbox makes `rmalloc` wait (progressing) and `try_rmalloc`
//! report "not ready". Nothing is overwritten or dropped.
//!
//! Invariants (checked with `debug_assert!` and by the tests): every allocation W
//! holds lies in `[0, width)` and is either unwritten (W may fill and rwrite it) or
//! written (R owns it until it rfrees); R's held messages never overlap; the
//! sequence numbers W assigns and R expects advance by one per message.

use super::freemap;
use super::rmalloc::{Policy, Rmalloc};
use super::slots;
use crate::api::am;
use crate::api::CtxInner;
use crate::runtime::error::Result;
use crate::runtime::solo::SoloMutex;
use crate::{bail, err};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Allocation unit: a cache line. Every message takes whole units (at least one).
pub const UNIT: usize = 64;
/// Most notice slots per direction (bounds messages in flight and the ring's size).
pub const SLOTS_MAX: usize = 1024;
/// Largest pipe width: offsets in units and lengths in bytes fit a slot payload.
pub const WIDTH_MAX: usize = 1 << 40;
/// Notice payload bit: the data is inline in the slot (offsets in units are < 2^34).
const INLINE_BIT: u64 = 1 << 39;
/// `rpipe_addr_t` = inbox tag << ADDR_SHIFT | offset.
const ADDR_SHIFT: u32 = 48;
/// The staging block of `write_through`: inline bytes, then the notice's words.
const STAGE: usize = slots::INLINE_MAX + 16;
const WORDS_STAGED: usize = slots::INLINE_MAX;

/// Bytes a message of `len` bytes takes in the inbox.
pub fn extent(len: usize) -> usize {
    len.max(1).div_ceil(UNIT) * UNIT
}

/// How a message's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// The writer puts the data, then the notice (seed 003's rwrite).
    Push,
    /// The writer puts only the notice; the reader gets the data (seed 003's rread).
    Pull,
}

/// Sizes and offsets of one direction's blocks, derived from the width alone so
/// both ends compute the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub width: usize,
    /// Most messages in flight (allocated and not yet freed by the reader).
    pub slots: usize,
    /// Notice slots in the ring: `slots` rounded up to a power of two, so a
    /// sequence number finds its slot with a mask (a division cost more than the
    /// rest of an empty poll). At least `slots`, so a slot is reused only after
    /// its notice was taken (`slots` bounds the messages not yet freed).
    pub ring: usize,
    pub bitmap: usize,
}

impl Shape {
    /// The blocks for a pipe whose largest message is `width` bytes (the inbox space is
    /// `width` rounded up to whole units).
    pub fn new(width: usize) -> Shape {
        let width = width.div_ceil(UNIT) * UNIT;
        let units = width / UNIT;
        let slots = units.clamp(1, SLOTS_MAX);
        Shape {
            width,
            slots,
            ring: slots.next_power_of_two(),
            bitmap: freemap::bytes_for(units),
        }
    }
    pub fn ring_off(&self) -> usize {
        self.width
    }
    pub fn bitmap_off(&self) -> usize {
        self.width + self.ring * slots::SLOT_BYTES
    }
    pub fn inbox_bytes(&self) -> usize {
        self.bitmap_off() + self.bitmap
    }
    pub fn view_off(&self) -> usize {
        self.width
    }
    pub fn stage_off(&self) -> usize {
        self.width + self.bitmap
    }
    pub fn outbox_bytes(&self) -> usize {
        self.stage_off() + STAGE
    }
}

/// Counters of one pipe (`rpipe_stats`).
#[derive(Clone, Copy, Debug, Default)]
pub struct PipeStats {
    pub written: u64,
    pub read: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    /// rmalloc/try_rmalloc calls that found no space (flow control engaged).
    pub rmalloc_waits: u64,
    /// Free-bitmap syncs (RDMA gets of the reader's bitmap).
    pub syncs: u64,
    /// Frees the writer learned of.
    pub frees_seen: u64,
    /// Notices or free bits from the peer that named no valid message (refused).
    pub refused: u64,
    /// Messages still unread or unfreed when the pipe closed.
    pub discarded: u64,
}

/// The allocator's state for `rpipe_stats` (the writer's view of the peer's inbox).
#[derive(Clone, Copy, Debug, Default)]
pub struct HeapView {
    pub free_bytes: usize,
    pub largest_free: usize,
    pub allocations: usize,
    pub fragmentation: f64,
}

/// The writer's record of one allocation, kept as its tag in the allocator.
#[derive(Clone, Copy, Debug)]
struct Alloc {
    /// Bytes asked of rmalloc (the allocator keeps the rounded extent).
    len: usize,
    /// rwrite sent it: the reader owns it until its free comes back.
    written: bool,
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
struct Tx {
    /// The peer's inbox space, each live allocation tagged with its record.
    space: Rmalloc<Alloc>,
    /// Local outbox block.
    outbox: usize,
    /// The peer's inbox block.
    peer_inbox: usize,
    /// The peer's whole inbox block as mapped here (a node-shared peer: `rwrite`
    /// stores straight into it), or None (through the transport). The mapping lasts
    /// as long as the context, which every call checks is live first.
    peer_view: Option<usize>,
    /// Notices written so far (the last sequence number used).
    seq: u64,
    /// The reader's free bitmap as of the last sync.
    seen: Vec<u64>,
}

/// The side that reads from the peer.
struct Rx {
    inbox: usize,
    /// The peer's outbox block (pull mode reads from its mirror).
    peer_outbox: usize,
    /// Notices taken so far (the next expected is `taken + 1`).
    taken: u64,
    /// One bit per inbox unit, set while a held message (read, not yet freed) covers
    /// it (the overlap check of a notice costs a bit test per unit, not an
    /// ordered-map search).
    held_units: Vec<u64>,
    /// One bit per inbox unit, set where a held message starts. Invariant: every
    /// start is held, and a held message's units run from its start to the next
    /// start or the next unit not held (messages never overlap), so the two bitmaps
    /// say where each held message is without a map to look up on every call.
    starts: Vec<u64>,
    /// Held messages (set bits of `starts`).
    held: usize,
}

impl Rx {
    /// The units of `[off, off + ext)`, as (word, mask) pieces.
    fn unit_words(off: usize, ext: usize) -> impl Iterator<Item = (usize, u64)> {
        let (first, end) = (off / UNIT, (off + ext) / UNIT);
        (first / 64..end.div_ceil(64)).map(move |w| {
            let lo = first.max(w * 64) - w * 64;
            let hi = end.min(w * 64 + 64) - w * 64;
            // hi - lo units, 1 to 64 of them, from bit lo.
            (w, (!0u64 >> (64 - (hi - lo))) << lo)
        })
    }

    /// Whether a held message covers any unit of `[off, off + ext)` (inside the inbox).
    fn any_held(&self, off: usize, ext: usize) -> bool {
        Self::unit_words(off, ext).any(|(w, m)| self.held_units[w] & m != 0)
    }

    /// Unit `u`'s word and bit in a bitmap.
    fn bit(u: usize) -> (usize, u64) {
        (u / 64, 1 << (u % 64))
    }

    /// Whether a held message starts at `off`.
    fn holds(&self, off: usize) -> bool {
        let (w, b) = Self::bit(off / UNIT);
        off % UNIT == 0 && self.starts.get(w).is_some_and(|s| s & b != 0)
    }

    /// Hold the message at `off` (its units are free: checked by the caller).
    fn hold(&mut self, off: usize, len: usize) {
        for (w, m) in Self::unit_words(off, extent(len)) {
            debug_assert_eq!(self.held_units[w] & m, 0);
            self.held_units[w] |= m;
        }
        let (w, b) = Self::bit(off / UNIT);
        self.starts[w] |= b;
        self.held += 1;
    }

    /// Units of the held message that starts at unit `u`: up to the next start or
    /// the first unit not held (bits past the inbox are never held).
    fn held_extent(&self, u: usize) -> usize {
        let mut w = u / 64;
        // Bits that end the message, from unit u + 1 on.
        let mut stop = (self.starts[w] | !self.held_units[w]) & (!0u64 << (u % 64)) << 1;
        while stop == 0 {
            w += 1;
            match (self.starts.get(w), self.held_units.get(w)) {
                (Some(&s), Some(&h)) => stop = s | !h,
                _ => return w * 64 - u,
            }
        }
        w * 64 + stop.trailing_zeros() as usize - u
    }

    /// Give back the message at `off`; false if none is held there.
    fn unhold(&mut self, off: usize) -> bool {
        if !self.holds(off) {
            return false;
        }
        let u = off / UNIT;
        for (w, m) in Self::unit_words(off, self.held_extent(u) * UNIT) {
            debug_assert_eq!(self.held_units[w] & m, m);
            self.held_units[w] &= !m;
        }
        let (w, b) = Self::bit(u);
        self.starts[w] &= !b;
        self.held -= 1;
        true
    }
}

#[derive(Default)]
struct Inner {
    tx: Option<Tx>,
    rx: Option<Rx>,
    stats: PipeStats,
}

/// Where an `rpipe_addr_t` points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// An allocation in the peer's inbox (ours to fill and rwrite).
    Tx(usize),
    /// A message in our inbox (ours to use and rfree).
    Rx(usize),
}

pub struct Pipe {
    pub(super) ctx: Arc<CtxInner>,
    pub peer: usize,
    /// The width asked for at open: the largest message.
    max_message: usize,
    /// Pairwise open number: the k-th pipe these two ranks opened.
    pub id: u64,
    pub shape: Shape,
    pub transfer: Transfer,
    pub policy: Policy,
    /// Address tags of our allocations in the peer's inbox and of messages in ours.
    tx_tag: u64,
    rx_tag: u64,
    inner: SoloMutex<Inner>,
    /// Our notice ring (0 when this end does not read) and the next sequence number
    /// expected there, readable without the lock so an empty poll costs two loads.
    rx_ring: usize,
    rx_next: AtomicU64,
    /// The peer said BYE (shared with the context's table of open pipes).
    pub(super) peer_closed: Arc<AtomicBool>,
    pub(super) closed: AtomicBool,
}

/// The ends' blocks, as agreed at open.
pub struct Ends {
    /// (our outbox, the peer's inbox) when we write.
    pub tx: Option<(usize, usize)>,
    /// (our inbox, the peer's outbox) when we read.
    pub rx: Option<(usize, usize)>,
}

/// The address tag of the direction whose reader is `owner` in the `id`-th pipe of
/// the pair (both ends agree): the direction (1 or 2) in the low two bits, and
/// above them 14 bits of a hash of the pair and the open number, so an address of
/// another pipe (to the same peer or another) is refused, unless the 14 bits of the
/// two pipes collide (one pair of pipes in 16 384).
fn inbox_tag(owner: usize, other: usize, id: u64) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let (lo, hi) = (owner.min(other) as u64, owner.max(other) as u64);
    let pipe = ((id.wrapping_mul(K) ^ lo).wrapping_mul(K) ^ hi).wrapping_mul(K) >> 50;
    pipe << 2 | if owner < other { 1 } else { 2 }
}

impl Pipe {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        ctx: Arc<CtxInner>,
        peer: usize,
        id: u64,
        max_message: usize,
        shape: Shape,
        transfer: Transfer,
        policy: Policy,
        ends: Ends,
    ) -> Pipe {
        let (me, concurrent) = (ctx.rank, ctx.concurrent);
        let words = shape.bitmap / 8;
        let rx_ring = ends.rx.map_or(0, |(inbox, _)| inbox + shape.ring_off());
        let inner = Inner {
            tx: ends.tx.map(|(outbox, peer_inbox)| Tx {
                space: Rmalloc::tagged(shape.width, UNIT, policy),
                outbox,
                peer_inbox,
                peer_view: ctx
                    .conduit
                    .native(peer, peer_inbox, shape.inbox_bytes())
                    .map(|p| p as usize),
                seq: 0,
                seen: vec![0; words],
            }),
            rx: ends.rx.map(|(inbox, peer_outbox)| Rx {
                inbox,
                peer_outbox,
                taken: 0,
                held_units: vec![0; (shape.width / UNIT).div_ceil(64)],
                starts: vec![0; (shape.width / UNIT).div_ceil(64)],
                held: 0,
            }),
            stats: PipeStats::default(),
        };
        Pipe {
            ctx,
            peer,
            id,
            max_message,
            shape,
            transfer,
            policy,
            tx_tag: inbox_tag(peer, me, id),
            rx_tag: inbox_tag(me, peer, id),
            inner: SoloMutex::new(inner, concurrent),
            rx_ring,
            rx_next: AtomicU64::new(1),
            peer_closed: Arc::new(AtomicBool::new(false)),
            closed: AtomicBool::new(false),
        }
    }

    pub fn writes(&self) -> bool {
        self.inner.lock().tx.is_some()
    }

    pub fn reads(&self) -> bool {
        self.inner.lock().rx.is_some()
    }

    /// The largest message this pipe carries.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    pub(super) fn live(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            bail!(State, "the pipe is closed");
        }
        self.ctx.check_live()
    }

    fn decode(&self, g: &Inner, addr: u64) -> Result<Side> {
        let tag = addr >> ADDR_SHIFT;
        let off = (addr & ((1 << ADDR_SHIFT) - 1)) as usize;
        if off < self.shape.width {
            if tag == self.tx_tag && g.tx.is_some() {
                return Ok(Side::Tx(off));
            }
            if tag == self.rx_tag && g.rx.is_some() {
                return Ok(Side::Rx(off));
            }
        }
        bail!(
            InvalidArg,
            "{:#x} is not an address of this pipe (use what rpipe_rmalloc or rpipe_rread returned)",
            addr
        )
    }

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
    /// once the peer closed and no room is left.
    fn alloc_or_closed(&self, nbytes: usize, counted: &mut bool) -> Result<Option<u64>> {
        let immediate = matches!(self.policy, Policy::BestFit | Policy::WorstFit);
        // Loaded before the attempt: if the peer had closed by then, its last
        // frees are already visible to the sync below.
        let peer_closed = self.peer_closed.load(Ordering::Acquire);
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
        if peer_closed {
            bail!(
                State,
                "rank {} closed the pipe: the space it still holds will never be freed",
                self.peer
            );
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

    /// The local address behind `addr`: our mirror for an allocation not yet
    /// written, our inbox for a message read and not yet freed.
    pub fn rmem(&self, addr: u64) -> Result<usize> {
        self.live()?;
        let g = self.inner.lock();
        match self.decode(&g, addr)? {
            Side::Tx(off) => {
                let tx = g.tx.as_ref().expect("decoded");
                match tx.space.tag(off) {
                    Some(a) if !a.written => Ok(tx.outbox + off),
                    Some(_) => bail!(
                        InvalidArg,
                        "{:#x} was already written with rpipe_rwrite; the reader owns it until it frees it",
                        addr
                    ),
                    None => bail!(
                        InvalidArg,
                        "{:#x} is not allocated (never returned by rpipe_rmalloc, or already freed)",
                        addr
                    ),
                }
            }
            Side::Rx(off) => {
                let rx = g.rx.as_ref().expect("decoded");
                if rx.holds(off) {
                    Ok(rx.inbox + off)
                } else {
                    bail!(
                        InvalidArg,
                        "{:#x} is not a message this rank has read and not yet freed",
                        addr
                    )
                }
            }
        }
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

    /// Take the next message in order. `wait`: block (progressing) until one comes,
    /// under the library's wait policy (`runtime::wait`): the writer rings our bell
    /// after each notice, so a reader that outlasted its spin and yield stages sleeps.
    pub fn rread(&self, wait: bool) -> Result<Option<(u64, usize)>> {
        self.live()?;
        if wait {
            am::check_not_in_handler("rpipe_rread")?;
        }
        if let Some(m) = self.take_or_closed()? {
            return Ok(Some(m));
        }
        if !wait {
            // As in rmalloc: a caller spinning on try_rread still progresses.
            self.ctx.maybe_poll_idle();
            return Ok(None);
        }
        let mut got = None;
        self.ctx.wait_rung(
            crate::api::stall::Wait::call("rpipe_rread", Some(self.peer), "a message"),
            || {
                got = self.take_or_closed()?;
                Ok(got.is_some())
            },
        )?;
        Ok(got)
    }

    /// The next message, or an error once the peer closed and none is left.
    fn take_or_closed(&self) -> Result<Option<(u64, usize)>> {
        // Loaded before the attempt: if the peer had closed by then, its last
        // notices are already visible to the take below.
        let peer_closed = self.peer_closed.load(Ordering::Acquire);
        if let Some(m) = self.take_one()? {
            return Ok(Some(m));
        }
        if peer_closed {
            bail!(
                State,
                "rank {} closed the pipe and every message it sent has been read",
                self.peer
            );
        }
        Ok(None)
    }

    /// Kept in one piece: under the pipe lock it claims slot `seq` (`rx.taken`,
    /// `rx_next`), validates the extent the peer claims, then copies inline bytes or
    /// pulls the data; the copies' SAFETY rests on that validation just above them, and
    /// a failed pull rolls the claim back.
    fn take_one(&self) -> Result<Option<(u64, usize)>> {
        let mut peeked = None;
        if self.rx_ring != 0 {
            // Peek without the lock: nothing new is the common case of a poll.
            let seq = self.rx_next.load(Ordering::Acquire);
            let slot = slots::slot_addr(self.rx_ring, self.shape.ring, seq);
            // SAFETY: a slot of our own ring (library heap, 64-byte aligned).
            let words = unsafe { slots::load(slot) };
            if slots::decode(seq, words).is_none() {
                return Ok(None);
            }
            peeked = Some((seq, slot, words));
        }
        let mut g = self.inner.lock();
        let Inner { rx, stats, .. } = &mut *g;
        let rx = rx
            .as_mut()
            .ok_or_else(|| err!(State, "this end of the pipe only writes"))?;
        let seq = rx.taken + 1;
        // The peeked record is still the next one unless another thread took it
        // meanwhile (a record's words never change until it is taken).
        let (slot, words) = match peeked {
            Some((s, slot, words)) if s == seq => (slot, words),
            _ => {
                let slot = slots::slot_addr(rx.inbox + self.shape.ring_off(), self.shape.ring, seq);
                // SAFETY: a slot of our own ring (library heap, 64-byte aligned).
                (slot, unsafe { slots::load(slot) })
            }
        };
        let Some((units, len)) = slots::decode(seq, words) else {
            return Ok(None);
        };
        rx.taken = seq;
        self.rx_next.store(seq + 1, Ordering::Release);
        let inline = units & INLINE_BIT != 0;
        let (off, len) = ((units & !INLINE_BIT) as usize * UNIT, len as usize);
        let ext = extent(len);
        let fits = off.checked_add(ext).is_some_and(|e| e <= self.shape.width);
        let overlaps = fits && rx.any_held(off, ext);
        let bad_inline = inline && (len > slots::INLINE_MAX || self.transfer == Transfer::Pull);
        if !fits || overlaps || bad_inline {
            stats.refused += 1;
            bail!(
                Transport,
                "rpipe: rank {} sent message {} at [{:#x}, +{}) of pipe {}, which {}: refused",
                self.peer,
                seq,
                off,
                len,
                self.id,
                if !fits {
                    "lies outside the inbox"
                } else if overlaps {
                    "overlaps a message still held"
                } else {
                    "claims more inline bytes than a slot holds"
                }
            );
        }
        if inline && len > 0 {
            // The slot is reused once later messages are written, while this one may
            // be held for long: move the bytes to the message's place in our inbox
            // (the line just arrived, so this is a cache-hot copy).
            // SAFETY: from our own slot's inline area (len <= INLINE_MAX, checked) to
            // our inbox at the message's extent (allocated to it by the writer).
            unsafe { slots::inline_out(slot, (rx.inbox + off) as *mut u8, len) };
        }
        if self.transfer == Transfer::Pull && len > 0 {
            // SAFETY: destination = our inbox at the message's extent (ours, unused
            // until now: the writer allocated it); source = the same offset of the
            // peer's mirror (its outbox, checked at open).
            let got = unsafe {
                self.ctx.conduit.get_sync(
                    self.peer,
                    rx.peer_outbox + off,
                    (rx.inbox + off) as *mut u8,
                    len,
                )
            };
            if let Err(e) = got {
                rx.taken = seq - 1;
                self.rx_next.store(seq, Ordering::Release);
                return Err(e);
            }
        }
        rx.hold(off, len);
        stats.read += 1;
        stats.bytes_read += len as u64;
        Ok(Some((self.rx_tag << ADDR_SHIFT | off as u64, len)))
    }

    /// Give a message back (reader), or drop an allocation never written (writer).
    pub fn rfree(&self, addr: u64) -> Result<()> {
        self.live()?;
        let mut g = self.inner.lock();
        match self.decode(&g, addr)? {
            Side::Rx(off) => {
                let rx = g.rx.as_mut().expect("decoded");
                if !rx.unhold(off) {
                    bail!(
                        InvalidArg,
                        "{:#x} is not a message this rank holds (not read yet, or already freed: double rpipe_rfree?)",
                        addr
                    );
                }
                // SAFETY: our bitmap (inbox, library heap), unit off/UNIT < width/UNIT; we hold
                // the pipe lock, so this is the bitmap's only writer.
                unsafe { freemap::toggle(rx.inbox + self.shape.bitmap_off(), off / UNIT) };
                Ok(())
            }
            Side::Tx(off) => {
                let tx = g.tx.as_mut().expect("decoded");
                match tx.space.tag(off) {
                    Some(a) if !a.written => {
                        let freed = tx.space.free(off);
                        debug_assert!(freed.is_ok());
                        Ok(())
                    }
                    Some(_) => bail!(
                        InvalidArg,
                        "{:#x} was written; the reader frees it (the writer may only rfree allocations it never wrote)",
                        addr
                    ),
                    None => bail!(
                        InvalidArg,
                        "{:#x} is not allocated (never returned by rpipe_rmalloc, or already freed)",
                        addr
                    ),
                }
            }
        }
    }

    pub fn stats(&self) -> (PipeStats, HeapView) {
        let g = self.inner.lock();
        let view = g.tx.as_ref().map_or(HeapView::default(), |tx| HeapView {
            free_bytes: tx.space.free_bytes(),
            largest_free: tx.space.largest_free(),
            allocations: tx.space.allocations(),
            fragmentation: tx.space.fragmentation(),
        });
        (g.stats, view)
    }

    /// Messages this end still holds or has not read (counted at close).
    pub(super) fn outstanding(&self) -> u64 {
        let g = self.inner.lock();
        let Some(rx) = g.rx.as_ref() else { return 0 };
        let mut n = rx.held as u64;
        let mut seq = rx.taken + 1;
        loop {
            let slot = slots::slot_addr(rx.inbox + self.shape.ring_off(), self.shape.ring, seq);
            // SAFETY: a slot of our own ring.
            if slots::decode(seq, unsafe { slots::load(slot) }).is_none() {
                break;
            }
            n += 1;
            seq += 1;
        }
        n
    }

    pub(super) fn note_discarded(&self, n: u64) {
        self.inner.lock().stats.discarded += n;
    }

    /// The blocks to give back at close.
    pub(super) fn blocks(&self) -> Vec<usize> {
        let g = self.inner.lock();
        g.tx.iter()
            .map(|t| t.outbox)
            .chain(g.rx.iter().map(|r| r.inbox))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(units: usize) -> Rx {
        Rx {
            inbox: 0,
            peer_outbox: 0,
            taken: 0,
            held_units: vec![0; units.div_ceil(64)],
            starts: vec![0; units.div_ceil(64)],
            held: 0,
        }
    }

    /// The two bitmaps against a map of (start unit -> units): adjacent messages,
    /// messages across word boundaries and to the inbox's end, frees in any order,
    /// double and stray frees refused.
    #[test]
    fn held_messages_are_found_from_the_bitmaps() {
        let units = 200;
        let mut r = rx(units);
        let mut model = std::collections::BTreeMap::new();
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let u = (next() % units as u64) as usize;
            let n = 1 + (next() % 70) as usize;
            if next() % 2 == 0 {
                let fits = u + n <= units;
                if fits && !r.any_held(u * UNIT, n * UNIT) {
                    // A length that takes exactly n units.
                    r.hold(u * UNIT, n * UNIT - (next() % UNIT as u64) as usize);
                    model.insert(u, n);
                }
            } else {
                let want = model.remove(&u);
                assert_eq!(r.unhold(u * UNIT), want.is_some(), "free of unit {u}");
                assert!(!r.holds(u * UNIT));
            }
            assert_eq!(r.held, model.len());
            for (&s, &n) in &model {
                assert!(r.holds(s * UNIT));
                // Inside its first unit is not its address.
                assert!(!r.holds(s * UNIT + 1) && !r.holds(s * UNIT + UNIT - 1));
                assert_eq!(r.held_extent(s), n, "message at unit {s}");
            }
        }
        for s in std::mem::take(&mut model).into_keys() {
            assert!(r.unhold(s * UNIT));
        }
        assert!(r.held_units.iter().chain(&r.starts).all(|&w| w == 0));
        assert!(!r.unhold(0), "nothing is held");
    }
}
