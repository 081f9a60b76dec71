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
//!
//! The files: `shape.rs` (the blocks' layout, which both ends derive from the
//! width), `write.rs` (the writer: `rmalloc`, the free-map sync, `rwrite`),
//! `read.rs` (the reader: `rread`, the record of held messages); this file keeps
//! the pipe itself, the address tags, and what both ends do (`rmem`, `rfree`,
//! counters, close).

mod read;
mod shape;
mod write;

pub use shape::{extent, Shape};

use super::rmalloc::Policy;
use super::{freemap, slots};
use crate::api::CtxInner;
use crate::bail;
use crate::runtime::error::Result;
use crate::runtime::solo::SoloMutex;
use read::Rx;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use write::Tx;

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

/// How a message's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// The writer puts the data, then the notice (seed 003's rwrite).
    Push,
    /// The writer puts only the notice; the reader gets the data (seed 003's rread).
    Pull,
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
        let rx_ring = ends.rx.map_or(0, |(inbox, _)| inbox + shape.ring_off());
        let inner = Inner {
            tx: ends
                .tx
                .map(|(outbox, peer_inbox)| Tx::new(&ctx, peer, shape, policy, outbox, peer_inbox)),
            rx: ends
                .rx
                .map(|(inbox, peer_outbox)| Rx::new(shape, inbox, peer_outbox)),
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
