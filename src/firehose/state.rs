//! Firehose's per-context state (seed 000 §3 and §4): the local and remote tables,
//! the deadlock-avoidance gates, moves in flight, explicit pins, counters; and the
//! move protocol's wire constants. Pure data: the protocol that drives it is
//! `protocol`, `initiator` and `pins`.
//!
//! Invariants: an explicit pin's references are counted in `pin_refs` (per peer
//! table, the local table last); `pin_refs_blocked[i] <= pin_refs[i]`.

use super::local::{Held, LocalTable};
use super::params::Params;
use super::remote::PeerTable;
use super::smp::DaGate;
use crate::runtime::error::Result;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most pieces one move may ask for (keeps the frame bounded).
pub(crate) const MAX_PIECES_PER_MOVE: usize = 256;

/// Firehose counters (see `fh_stats_t`).
#[derive(Default)]
pub struct FhStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub pending_hits: AtomicU64,
    pub local_hits: AtomicU64,
    pub local_misses: AtomicU64,
    pub try_hits: AtomicU64,
    pub try_misses: AtomicU64,
    pub partial_pins: AtomicU64,
    pub moves_sent: AtomicU64,
    pub moves_handled: AtomicU64,
    pub putinmove: AtomicU64,
    pub stall_ns: AtomicU64,
    pub bad_releases: AtomicU64,
    /// Seed 000 §5's fairness counters: requests that left the easy path, posted
    /// the DA flag, rolled back, slept on the condition variable; time they spent.
    pub da_entries: AtomicU64,
    pub da_wins: AtomicU64,
    pub rollbacks: AtomicU64,
    pub da_waits: AtomicU64,
    pub da_stall_ns: AtomicU64,
}

/// Per-thread firehose counters (`fh_thread_stats_t`), over every context.
#[derive(Default, Clone, Copy, Debug)]
#[repr(C)]
pub struct ThreadStats {
    /// sizeof(fh_thread_stats_t) of the library (set by fh_stats_thread_get).
    pub struct_size: u64,
    /// Acquisitions that needed the table beyond a one-entry hit.
    pub requests: u64,
    pub da_entries: u64,
    pub da_wins: u64,
    pub rollbacks: u64,
    pub da_waits: u64,
    pub stall_ns: u64,
}

thread_local! {
    pub(crate) static THREAD_STATS: std::cell::Cell<ThreadStats> = const { std::cell::Cell::new(ThreadStats {
        struct_size: 0, requests: 0, da_entries: 0, da_wins: 0, rollbacks: 0, da_waits: 0, stall_ns: 0,
    }) };
}

thread_local! {
    /// Explicit-pin references this thread holds: (context address, table index)
    /// -> references (table index = peer rank, or the context size for local).
    pub(crate) static MY_PIN_REFS: std::cell::RefCell<Vec<(usize, usize, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) fn my_pin_refs_add(ctx: usize, idx: usize, n: u64, add: bool) {
    if n == 0 {
        return;
    }
    MY_PIN_REFS.with(|m| {
        let mut m = m.borrow_mut();
        match m.iter_mut().find(|e| e.0 == ctx && e.1 == idx) {
            Some(e) => e.2 = if add { e.2 + n } else { e.2.saturating_sub(n) },
            None if add => m.push((ctx, idx, n)),
            None => {}
        }
        m.retain(|e| e.2 > 0);
    });
}

/// While alive, this thread's pin references count as blocked (see
/// `FhState::pin_refs_blocked`).
pub(crate) struct Blocked<'a> {
    pub(crate) fh: &'a FhState,
    pub(crate) refs: Vec<(usize, u64)>,
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        for &(i, n) in &self.refs {
            self.fh.pin_refs_blocked[i].fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// This thread's counters.
pub fn thread_stats() -> ThreadStats {
    let mut s = THREAD_STATS.with(|c| c.get());
    s.struct_size = std::mem::size_of::<ThreadStats>() as u64;
    s
}

/// Zero this thread's counters.
pub fn thread_stats_reset() {
    THREAD_STATS.with(|c| c.set(ThreadStats::default()));
}

impl FhStats {
    pub fn reset(&self) {
        for c in [
            &self.hits,
            &self.misses,
            &self.pending_hits,
            &self.local_hits,
            &self.local_misses,
            &self.try_hits,
            &self.try_misses,
            &self.partial_pins,
            &self.moves_sent,
            &self.moves_handled,
            &self.putinmove,
            &self.stall_ns,
            &self.bad_releases,
            &self.da_entries,
            &self.da_wins,
            &self.rollbacks,
            &self.da_waits,
            &self.da_stall_ns,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// A move in flight: `None` until answered, then the status, whether a carried put
/// was written, and why the target refused it (an index into [`WHY`]).
pub(crate) type MoveSlot = Option<(i32, bool, u8)>;

/// Why a target refused memory, as its answer says (bits 32..40 of the status word;
/// the texts are `os::Maps::why_not`'s).
pub(crate) const WHY: [&str; 8] = [
    "not mapped with the protection the access needs",
    "not mapped",
    "not user memory (a kernel address)",
    "PROT_NONE (no access)",
    "read-only",
    "read-only in part",
    "partly outside a mapping (it runs past the end of the memory there)",
    "in use by the library",
];

pub(crate) fn why_code(why: Option<&str>) -> u64 {
    WHY.iter().position(|w| Some(*w) == why).unwrap_or(0) as u64
}

/// References an operation or a pin holds until it completes or is released.
#[derive(Default, Debug)]
pub struct OpPins {
    pub rank: usize,
    pub remote: Vec<Held>,
    pub local: Vec<Held>,
}

impl OpPins {
    pub fn is_empty(&self) -> bool {
        self.remote.is_empty() && self.local.is_empty()
    }
}

/// An explicit pin (`fh_pin_t`).
#[derive(Debug)]
pub struct PinObj {
    /// The context that made it ([`CtxInner::id`]): another context refuses it.
    pub owner: usize,
    pub start: usize,
    pub len: usize,
    /// `None`: a local pin.
    pub rank: Option<usize>,
    pub pins: OpPins,
}

/// A non-blocking remote pin waiting for its moves.
pub struct PendingPin {
    pub rank: usize,
    pub addr: usize,
    pub len: usize,
    pub waits: Vec<u64>,
    /// The move this pin sent itself (its answer is consumed here).
    pub own: Option<u64>,
    pub cb: Box<dyn FnOnce(Result<Box<PinObj>>) + Send>,
    /// For a put or an atomic (writable memory needed), not only a get.
    pub write: bool,
    /// An explicit pin (counted in `pin_refs`); false: the references of a
    /// non-blocking transfer, released when it completes.
    pub track: bool,
}

impl PendingPin {
    pub fn new(
        rank: usize,
        addr: usize,
        len: usize,
        cb: Box<dyn FnOnce(Result<Box<PinObj>>) + Send>,
        write: bool,
        track: bool,
    ) -> PendingPin {
        PendingPin {
            rank,
            addr,
            len,
            waits: vec![],
            own: None,
            cb,
            write,
            track,
        }
    }
}

/// A move request waiting for a local pin to finish.
pub(crate) struct ParkedMove {
    pub(crate) src: usize,
    pub(crate) args: Vec<u64>,
    pub(crate) payload: Vec<u8>,
}

pub struct FhState {
    pub params: Params,
    pub local: Mutex<LocalTable>,
    pub peers: Vec<Mutex<PeerTable>>,
    /// Per peer: the deadlock-avoidance flag (seed 000 §4.1).
    pub(crate) gates: Vec<DaGate>,
    /// The same for the local table (M + MAXVICTIM).
    pub(crate) local_gate: DaGate,
    pub(crate) moves: Mutex<HashMap<u64, MoveSlot>>,
    /// Moves carrying a get: id -> (destination, length), written by the answer.
    pub(crate) get_dst: Mutex<HashMap<u64, (usize, usize)>>,
    /// Per rank: references of issued operations, released once `completed[rank]`
    /// reaches their sequence number.
    pub(crate) inflight: Mutex<Vec<VecDeque<(u64, OpPins)>>>,
    pub pending_pins: Mutex<Vec<PendingPin>>,
    /// `!pending_pins.is_empty()`, readable without the lock (the progress hook's
    /// fast path); written under the lock.
    pub has_pending_pins: std::sync::atomic::AtomicBool,
    /// Moves whose handler met a local unit being pinned (seed 000 Table 3, fourth
    /// row: handlers cannot poll or roll back): run again after every local pin.
    pub(crate) parked: Mutex<Vec<ParkedMove>>,
    /// Held by the one invalidation under way in this context. While it waits for
    /// its holders, the units it handed back look unheld (their references are
    /// local ones it owns); a second, overlapping invalidation would unpin them and
    /// return before those holders confirmed. Invalidations are rare and rank-wide
    /// round trips, so they simply take turns.
    pub(crate) invalidating: Mutex<()>,
    pub stats: FhStats,
    /// References held by explicit pins (`fh_pin_t`), per peer table and (last)
    /// in the local table.
    pub(crate) pin_refs: Vec<AtomicU64>,
    /// Of those, held by threads now blocked in a firehose acquisition: they cannot
    /// release them before that acquisition ends. A request is stuck (and fails)
    /// only when every reference it waits for is one of these — pins held by a
    /// thread that is off doing other work may still be released, so it waits.
    pub(crate) pin_refs_blocked: Vec<AtomicU64>,
    /// The conduit needs the local side of a transfer registered too.
    pub local_side: bool,
    /// Per peer: a non-blocking acquisition found every firehose referenced by
    /// operations in flight (a wait must complete some before it can go on).
    pub starved: Vec<std::sync::atomic::AtomicBool>,
}

impl FhState {
    pub fn new(params: Params, size: usize, local_side: bool) -> FhState {
        FhState {
            local: Mutex::new(LocalTable::new(params.clone(), size)),
            peers: (0..size)
                .map(|_| Mutex::new(PeerTable::default()))
                .collect(),
            gates: (0..size).map(|_| DaGate::default()).collect(),
            local_gate: DaGate::default(),
            moves: Mutex::new(HashMap::new()),
            get_dst: Mutex::new(HashMap::new()),
            inflight: Mutex::new((0..size).map(|_| VecDeque::new()).collect()),
            pending_pins: Mutex::new(Vec::new()),
            has_pending_pins: std::sync::atomic::AtomicBool::new(false),
            parked: Mutex::new(Vec::new()),
            invalidating: Mutex::new(()),
            pin_refs: (0..=size).map(|_| AtomicU64::new(0)).collect(),
            pin_refs_blocked: (0..=size).map(|_| AtomicU64::new(0)).collect(),
            stats: FhStats::default(),
            local_side,
            starved: (0..size).map(|_| Default::default()).collect(),
            params,
        }
    }
}

/// Invalidations a holder received, per sender: `(epoch, start, end)`, the most
/// recent few. The conduit may hand two frames of one sender over in another order
/// than they were sent (receives complete out of order), so a move answer made
/// *before* an invalidation can arrive *after* it: its units for that range are
/// stale (the target dropped our holder bit when we acknowledged) and must not be
/// entered. Answers carry the sender's epoch; see [`Invalidations::stale`].
pub struct Invalidations(Vec<parking_lot::Mutex<std::collections::VecDeque<(u64, usize, usize)>>>);

/// Invalidations remembered per sender (older ones: an answer that old is long gone).
pub(crate) const SEEN_KEEP: usize = 64;

impl Invalidations {
    pub fn new(ranks: usize) -> Invalidations {
        Invalidations(
            (0..ranks)
                .map(|_| parking_lot::Mutex::new(Default::default()))
                .collect(),
        )
    }

    pub(crate) fn note(&self, src: usize, epoch: u64, a: usize, b: usize) {
        let mut q = self.0[src].lock();
        if q.len() == SEEN_KEEP {
            q.pop_front();
        }
        q.push_back((epoch, a, b));
    }

    /// Was `[a, b)` of `src` invalidated after an answer made under `epoch`?
    pub fn stale(&self, src: usize, epoch: u64, a: usize, b: usize) -> bool {
        self.0[src]
            .lock()
            .iter()
            .any(|&(e, s, t)| e > epoch && s < b && t > a)
    }
}
