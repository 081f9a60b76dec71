//! The RMA engine's state: per-rank sequence numbers (issued, completed), the
//! generation-checked handle table, and transfers deferred until their firehose move
//! is answered. Pure data and bookkeeping; the operations are in [`super`].
//!
//! Invariants: `completed[r] <= issued[r]`; a slot's generation changes when it is
//! retired, so a stale handle never names a newer operation.

use crate::bail;
use crate::firehose::state::OpPins;
use crate::runtime::error::Result;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Put,
    Get,
}

pub type Handle = u64;
pub const HANDLE_NULL: Handle = 0;

pub const NBI_PUTS: i32 = 1;
pub const NBI_GETS: i32 = 2;
pub const NBI_ALL: i32 = 3;

/// A non-blocking transfer whose firehose move is still in flight (seed 002:
/// non-blocking even on a miss). Progress issues it as soon as its references arrive
/// (so they never sit idle holding firehoses the rank itself may need); from then on
/// it completes like any other operation.
pub(crate) struct Deferred {
    pub(crate) dir: Dir,
    pub(crate) rank: usize,
    pub(crate) remote: usize,
    pub(crate) local: usize,
    pub(crate) nbytes: usize,
    pub(crate) state: DState,
    /// An implicit-handle transfer (counts for fh_wait_nbi).
    pub(crate) implicit: bool,
}

pub(crate) enum DState {
    /// Its move is in flight.
    Waiting,
    /// The references arrived (set by the move's completion); not issued yet.
    Ready(OpPins),
    /// Issued as operation `seq` to `rank`.
    Issued(u64),
    /// Refused (or issuing failed); the error is reported once.
    Failed(Option<crate::runtime::error::Error>),
}

pub(crate) type DeferredRef = Arc<Mutex<Deferred>>;

/// How [`CtxInner::start_deferred`] left a transfer.
pub(crate) enum Started {
    /// Issued at once (its firehoses turned out to be live).
    Issued,
    /// Waiting for its move.
    Waiting(DeferredRef),
}

/// One packed operation: its messages' answers still missing, and the first error.
#[derive(Default)]
pub(crate) struct PackOp {
    /// Invariant: the number of its messages whose answer was not processed.
    pub(crate) left: AtomicUsize,
    pub(crate) err: Mutex<Option<crate::runtime::error::Error>>,
}

impl PackOp {
    /// Every answer is in.
    pub(crate) fn done(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
    }

    /// Its first error, once (after `done`).
    pub(crate) fn take_error(&self) -> Result<()> {
        match self.err.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One message's answer was processed (`e`: its refusal).
    pub(crate) fn answered(&self, e: Option<crate::runtime::error::Error>) {
        if let Some(e) = e {
            let mut g = self.err.lock();
            if g.is_none() {
                *g = Some(e);
            }
        }
        let before = self.left.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "more answers than messages");
    }
}

/// A packed message in flight.
pub(crate) struct Msg {
    pub(crate) op: Arc<PackOp>,
    pub(crate) rank: usize,
    /// A get's local destination pieces `(addr, len)`, in the reply's order.
    pub(crate) scatter: Vec<(usize, usize)>,
    /// The target pieces (to name a refused one).
    pub(crate) remote: Vec<(usize, usize)>,
}

/// The packed messages in flight, by id. Invariant: an id is in `msgs` exactly
/// while its answer is outstanding.
#[derive(Default)]
pub(crate) struct Packs {
    pub(crate) next: u64,
    pub(crate) msgs: std::collections::HashMap<u64, Msg>,
}

/// An open access region (`super::region`).
/// Invariant: `ranks` is sorted and free of duplicates.
pub(crate) struct Region {
    pub(crate) owner: std::thread::ThreadId,
    /// Ranks an operation of the region was issued to.
    pub(crate) ranks: Vec<usize>,
    /// Operations of the region still waiting for their firehose moves when issued.
    pub(crate) deferred: Vec<DeferredRef>,
    /// Packed transfers of the region.
    pub(crate) packs: Vec<Arc<PackOp>>,
}

#[derive(Clone)]
pub(crate) enum Op {
    Issued {
        rank: usize,
        seq: u64,
    },
    Deferred(DeferredRef),
    /// Several operations completing as one: a non-contiguous transfer (`vis`) or an
    /// access region. The pieces issued at once are complete when operation `seq` to
    /// `rank` is, for each `(rank, seq)` of `seqs`; the others wait for their moves.
    Group {
        seqs: Arc<[(usize, u64)]>,
        deferred: Arc<[DeferredRef]>,
        /// Packed transfers (`super::pack`) of the group.
        packs: Arc<[Arc<PackOp>]>,
    },
}

#[derive(Default)]
pub(crate) struct Slot {
    pub(crate) gen: u32,
    pub(crate) op: Option<Op>,
}

pub(crate) struct Inner {
    pub(crate) issued: Vec<u64>,
    /// Invariant: completed[r] <= issued[r].
    pub(crate) completed: Vec<u64>,
    pub(crate) slots: Vec<Slot>,
    pub(crate) free: Vec<u32>,
    pub(crate) nbi_puts: bool,
    pub(crate) nbi_gets: bool,
    /// Transfers waiting for their firehose moves (explicit and implicit handles).
    pub(crate) deferred: Vec<DeferredRef>,
    /// Implicit-handle transfers of `deferred` not issued yet.
    pub(crate) nbi_waiting: usize,
    /// The first refusal of an implicit-handle transfer, for fh_wait_nbi.
    pub(crate) nbi_error: Option<crate::runtime::error::Error>,
    /// The open access region, if any (`fh_begin_nbi_accessregion`).
    pub(crate) region: Option<Region>,
    /// Implicit-handle packed transfers not known to be complete.
    pub(crate) nbi_packs: Vec<Arc<PackOp>>,
}

pub struct RmaState {
    pub(crate) inner: Mutex<Inner>,
    /// `inner.region.is_some()`, readable without the lock (the `_nbi` fast path).
    pub(crate) region_open: std::sync::atomic::AtomicBool,
    /// `!inner.deferred.is_empty()`, readable without the lock (the progress hook's
    /// fast path); written under the lock.
    pub(crate) has_deferred: std::sync::atomic::AtomicBool,
    /// Packed transfers' messages in flight (`super::pack`).
    pub(crate) packs: Mutex<Packs>,
}

pub(crate) fn encode(idx: u32, gen: u32) -> Handle {
    ((gen as u64) << 32) | (idx as u64 + 1)
}

impl RmaState {
    pub fn new(size: usize) -> RmaState {
        RmaState {
            inner: Mutex::new(Inner {
                issued: vec![0; size],
                completed: vec![0; size],
                slots: Vec::new(),
                free: Vec::new(),
                nbi_puts: false,
                nbi_gets: false,
                deferred: Vec::new(),
                nbi_waiting: 0,
                nbi_error: None,
                region: None,
                nbi_packs: Vec::new(),
            }),
            packs: Mutex::new(Packs::default()),
            region_open: std::sync::atomic::AtomicBool::new(false),
            has_deferred: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn new_handle(&self, rank: usize) -> Handle {
        let mut g = self.inner.lock();
        g.issued[rank] += 1;
        let seq = g.issued[rank];
        Self::slot_for(&mut g, Op::Issued { rank, seq })
    }

    pub(crate) fn new_deferred(&self, d: DeferredRef) -> Handle {
        Self::slot_for(&mut self.inner.lock(), Op::Deferred(d))
    }

    /// A handle for pieces issued to `rank` (complete with the next sequence
    /// number) and `deferred` ones waiting for their moves.
    pub(crate) fn new_group(&self, rank: usize, deferred: Vec<DeferredRef>) -> Handle {
        if deferred.is_empty() {
            return self.new_handle(rank);
        }
        let mut g = self.inner.lock();
        g.issued[rank] += 1;
        let seq = g.issued[rank];
        let op = Op::Group {
            seqs: Arc::new([(rank, seq)]),
            deferred: deferred.into(),
            packs: Arc::new([]),
        };
        Self::slot_for(&mut g, op)
    }

    /// A handle for a packed transfer (complete when every answer is in).
    pub(crate) fn new_pack(&self, op: Arc<PackOp>) -> Handle {
        let op = Op::Group {
            seqs: Arc::new([]),
            deferred: Arc::new([]),
            packs: Arc::new([op]),
        };
        Self::slot_for(&mut self.inner.lock(), op)
    }

    /// A deferred handle was issued as operation `seq` to `rank`.
    pub(crate) fn set_issued(&self, h: Handle, rank: usize, seq: u64) {
        let mut g = self.inner.lock();
        let idx = (h & 0xffff_ffff) as usize - 1;
        g.slots[idx].op = Some(Op::Issued { rank, seq });
    }

    pub(crate) fn slot_for(g: &mut Inner, op: Op) -> Handle {
        let idx = match g.free.pop() {
            Some(i) => i,
            None => {
                g.slots.push(Slot::default());
                (g.slots.len() - 1) as u32
            }
        };
        let slot = &mut g.slots[idx as usize];
        debug_assert!(slot.op.is_none(), "free slot still holds an operation");
        slot.op = Some(op);
        encode(idx, slot.gen)
    }

    pub(crate) fn lookup(&self, h: Handle) -> Result<Op> {
        let g = self.inner.lock();
        let idx = (h & 0xffff_ffff).wrapping_sub(1) as usize;
        let gen = (h >> 32) as u32;
        match g.slots.get(idx) {
            Some(s) if s.gen == gen && s.op.is_some() => Ok(s.op.clone().expect("checked")),
            _ => bail!(
                InvalidArg,
                "handle {:#x} is not an outstanding operation (already synced, or never issued)",
                h
            ),
        }
    }

    pub(crate) fn retire(&self, h: Handle) {
        let mut g = self.inner.lock();
        let idx = (h & 0xffff_ffff) as usize - 1;
        let s = &mut g.slots[idx];
        s.op = None;
        s.gen = s.gen.wrapping_add(1);
        g.free.push(idx as u32);
    }

    pub(crate) fn is_complete(&self, rank: usize, seq: u64) -> bool {
        self.inner.lock().completed[rank] >= seq
    }

    /// A sequence number for an operation left in flight to `rank`.
    pub(crate) fn bump(&self, rank: usize) -> u64 {
        let mut g = self.inner.lock();
        g.issued[rank] += 1;
        g.issued[rank]
    }
}
