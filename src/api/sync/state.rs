//! The synchronisation subsystem's per-context state (pure data): the sync area's
//! layout, the barrier's phase, the collectives' channels and tree, the lock ids in
//! use, and the lock handle. The protocols are in the sibling modules.

use super::area;
use super::settings::Algo;
use crate::runtime::solo::SoloMutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// Spare heap every rank keeps beyond the sync area for fh_malloc and rpipe.
pub(crate) const MIN_SPARE: usize = 64 << 10;

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

/// A broadcast tree over *relative* ranks (root = 0).
#[derive(Clone, Debug)]
pub struct Tree {
    pub parent: Vec<usize>,
    pub children: Vec<Vec<usize>>,
}

/// The postal-model optimal broadcast tree for `n` ranks and latency `lambda`.
pub fn postal_tree(n: usize, lambda: u32) -> Tree {
    let lambda = lambda.max(1) as u64;
    let mut parent = vec![0; n];
    let mut children = vec![Vec::new(); n];
    // (time this rank can send next, rank); min-heap by time, then rank.
    let mut ready = std::collections::BinaryHeap::new();
    ready.push(std::cmp::Reverse((0u64, 0usize)));
    for (next, p) in parent.iter_mut().enumerate().skip(1) {
        let std::cmp::Reverse((t, r)) = ready.pop().expect("root is always there");
        *p = r;
        children[r].push(next);
        ready.push(std::cmp::Reverse((t + 1, r)));
        ready.push(std::cmp::Reverse((t + lambda, next)));
    }
    Tree { parent, children }
}

/// Per-context collective state.
pub struct CollState {
    pub chans: Chans,
    /// Collective calls made on this context (the same count on every rank).
    pub(crate) seq: u64,
    pub(crate) tree: Option<(u32, Tree)>,
    /// The last call's rank lists, kept for their capacity (no allocation per call).
    pub(crate) spare: [Vec<usize>; 3],
    /// The reduction's accumulator, kept for its capacity.
    pub(crate) acc: Vec<u8>,
    /// A second accumulator (recursive doubling's `theirs op ours`), kept likewise.
    pub(crate) tmp: Vec<u8>,
    /// The flag value the last large node allreduce ended with (`coll::node_big`).
    pub(crate) big_last: u64,
    /// The lowest node `done` word this rank last read (`coll::node`): no slot up to
    /// that call plus `NDEPTH` is still being read.
    pub(crate) node_seen: u64,
}

impl CollState {
    pub fn new(n: usize) -> CollState {
        CollState {
            chans: Chans::new(n),
            seq: 0,
            tree: None,
            spare: Default::default(),
            acc: Vec::new(),
            tmp: Vec::new(),
            big_last: 0,
            node_seen: 0,
        }
    }
}

/// `flags` bit: this rank takes part without an id.
pub const ANONYMOUS: i32 = 1;

/// What one rank (or a set of ranks) said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Val {
    Anon,
    Named(u64),
    Mismatch,
}

impl Val {
    pub fn of(id: i64, flags: i32) -> Val {
        if flags & ANONYMOUS != 0 {
            Val::Anon
        } else {
            Val::Named(id as u64)
        }
    }
    pub fn combine(self, o: Val) -> Val {
        match (self, o) {
            (Val::Mismatch, _) | (_, Val::Mismatch) => Val::Mismatch,
            (Val::Anon, x) | (x, Val::Anon) => x,
            (Val::Named(a), Val::Named(b)) if a == b => Val::Named(a),
            _ => Val::Mismatch,
        }
    }
    pub(crate) fn encode(self) -> (u64, u64) {
        match self {
            Val::Anon => (0, 0),
            Val::Named(id) => (id, 1),
            Val::Mismatch => (0, 2),
        }
    }
    pub(crate) fn decode(id: u64, kind: u64) -> Val {
        match kind {
            0 => Val::Anon,
            1 => Val::Named(id),
            _ => Val::Mismatch,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Dissemination: waiting for round `round`'s flag (the flag of every earlier
    /// round was received and this round's was sent).
    Diss { round: u32 },
    /// Tree: children heard from (bit mask); nothing sent up yet.
    Gather { got: u32 },
    /// Tree: arrival sent to the parent; waiting for the release.
    Release,
    /// The transport's reduction in flight (`Conduit::reduce3_test`).
    Transport,
    /// Node barrier: notified; waiting for the node's release (`node`).
    NodeWait,
    /// Node barrier, leader of a node of a several-node job: waiting for the
    /// node's ranks, before the leaders' dissemination.
    NodeGather,
    /// Node barrier: this rank released it (transient; `notify` turns it into Done).
    NodeDone,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Running { step: Step },
    Done { result: Val },
}

/// One context's barrier state. Invariant: `phase != Idle` iff a notify has not yet
/// been matched by a successful wait/try.
pub struct Barrier {
    pub(crate) algo: Algo,
    /// Epoch of the current (or last) barrier; the first is 1.
    pub(crate) epoch: u64,
    pub(crate) id: i64,
    pub(crate) flags: i32,
    pub(crate) acc: Val,
    pub(crate) phase: Phase,
}

impl Barrier {
    pub fn new(algo: Algo) -> Barrier {
        Barrier {
            algo,
            epoch: 0,
            id: 0,
            flags: ANONYMOUS,
            acc: Val::Anon,
            phase: Phase::Idle,
        }
    }
}

/// Lock ids in use on this context (the same on every rank: create/destroy are
/// collective and called in the same order).
#[derive(Default)]
pub struct LockIds {
    pub(crate) used: Vec<bool>,
}

/// This rank's use of one lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Local {
    Free = 0,
    /// A thread of this rank is queued or holds it.
    Busy = 1,
}

pub struct Lock {
    pub id: usize,
    pub home: usize,
    local: AtomicU8,
    /// The thread that made `local` Busy (a per-thread token; 0 while Free, and
    /// between a thread's taking it and writing its token). Written only by that
    /// thread, so a thread that reads its own token holds or waits for the lock.
    owner: AtomicU64,
}

thread_local! {
    static THREAD_TOKEN: u8 = const { 0 };
}

/// This thread's token: the address of a thread-local, unique among live threads
/// (a thread that exits holding a lock may leave its token to a later thread, which
/// then gets FH_ERR_STATE instead of waiting: the lock was abandoned anyway).
fn thread_token() -> u64 {
    THREAD_TOKEN.with(|t| t as *const u8 as u64)
}

impl Lock {
    pub(crate) fn new(id: usize, home: usize) -> Lock {
        Lock {
            id,
            home,
            local: AtomicU8::new(Local::Free as u8),
            owner: AtomicU64::new(0),
        }
    }

    /// Make this rank's entry Busy for this thread, if it is Free.
    pub(crate) fn take(&self) -> bool {
        let ok = self
            .local
            .compare_exchange(
                Local::Free as u8,
                Local::Busy as u8,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok();
        if ok {
            self.owner.store(thread_token(), Ordering::Relaxed);
        }
        ok
    }

    /// Make the entry Busy for this thread whatever it was (tests driving the
    /// acquire's halves by hand).
    pub(crate) fn mark_taken(&self) {
        self.local.store(Local::Busy as u8, Ordering::Release);
        self.owner.store(thread_token(), Ordering::Relaxed);
    }

    /// Free the entry (by the thread that took it).
    pub(crate) fn give_back(&self) {
        self.owner.store(0, Ordering::Relaxed);
        self.local.store(Local::Free as u8, Ordering::Release);
    }

    pub(crate) fn is_free(&self) -> bool {
        self.local.load(Ordering::Acquire) == Local::Free as u8
    }

    /// Does this thread hold the lock or wait for it?
    pub(crate) fn taken_by_me(&self) -> bool {
        !self.is_free() && self.owner.load(Ordering::Relaxed) == thread_token()
    }
}

/// Per-context synchronisation state.
pub struct SyncState {
    /// `None` when some rank's heap is too small for the area (the calls then return
    /// FH_ERR_NO_RESOURCE naming FH_HEAP_SIZE).
    pub area: Option<area::Area>,
    /// The locks below are plain flags below MPI_THREAD_MULTIPLE (`SoloMutex`).
    pub barrier: SoloMutex<Barrier>,
    /// A split-phase barrier is in flight (the progress thread advances it).
    pub barrier_active: AtomicBool,
    pub coll: SoloMutex<CollState>,
    pub locks: SoloMutex<LockIds>,
    /// This rank's node (`node`): its ranks, leaders, and where their words are.
    pub node: Node,
}

impl SyncState {
    /// Decide the area for `heaps` (every rank's `(base, len)`): returns the state and
    /// how many bytes at the start of this rank's heap it reserves.
    /// `concurrent`: threads may race inside the library (the context's flag).
    pub fn new(heaps: &[(usize, usize)], algo: Algo, concurrent: bool) -> (SyncState, usize) {
        let a = area::Area::new(heaps.len()).with_big(heaps.iter().map(|h| h.1));
        let fits = heaps.iter().all(|&(_, l)| l >= a.bytes + MIN_SPARE);
        let st = SyncState {
            area: fits.then_some(a),
            barrier: SoloMutex::new(Barrier::new(algo), concurrent),
            barrier_active: AtomicBool::new(false),
            coll: SoloMutex::new(CollState::new(heaps.len()), concurrent),
            locks: SoloMutex::new(LockIds::default(), concurrent),
            node: Default::default(),
        };
        (st, if fits { a.bytes } else { 0 })
    }
}

/// This rank's node as the node-aware algorithms see it.
#[derive(Default)]
pub struct Node {
    /// The node's ranks, ascending (this rank among them); `members[0]` leads.
    pub members: Vec<usize>,
    /// This rank's index in `members`.
    pub idx: usize,
    /// Every node's leader, ascending.
    pub leaders: Vec<usize>,
    /// Each member's `node_val` line, mapped here.
    pub val_at: Vec<usize>,
    /// Each member's node collective slots, mapped here.
    pub slot_at: Vec<[usize; area::NDEPTH]>,
    /// The leader's barrier line, mapped here.
    pub bar: usize,
    /// Each member's large-allreduce staging region, mapped here (empty: the layout
    /// has none, or it is not mapped).
    pub stage_at: Vec<usize>,
    /// Every address above is mapped (else the node algorithms are not used).
    pub ok: bool,
}

impl Node {
    /// The node of `me`, from every rank's leader. `view(rank, addr)` maps an address
    /// of a node peer's heap here.
    pub fn new(
        me: usize,
        leader_of: &[usize],
        area: Option<area::Area>,
        heaps: &[(usize, usize)],
        view: &dyn Fn(usize, usize) -> Option<usize>,
    ) -> Node {
        let Some(a) = area else {
            return Node::default();
        };
        let mine = leader_of.get(me).copied().unwrap_or(me);
        let members: Vec<usize> = (0..leader_of.len())
            .filter(|&r| leader_of[r] == mine)
            .collect();
        let mut leaders = leader_of.to_vec();
        leaders.sort_unstable();
        leaders.dedup();
        let idx = members.iter().position(|&r| r == me).unwrap_or(0);
        let base = |r: usize| heaps[r].0;
        let val_at: Option<Vec<usize>> = members
            .iter()
            .map(|&r| view(r, a.node_val(base(r))))
            .collect();
        let slot_at: Option<Vec<[usize; area::NDEPTH]>> = members
            .iter()
            .map(|&r| {
                let mut at = [0; area::NDEPTH];
                for (p, a_p) in at.iter_mut().enumerate() {
                    *a_p = view(r, a.nslot(base(r), p))?;
                }
                Some(at)
            })
            .collect();
        let bar = view(mine, a.node_barrier(base(mine)));
        // A staging region is used only when all of it is mapped, for every member.
        let stage_at: Vec<usize> = members
            .iter()
            .map(|&r| {
                let (at, len) = a.big(base(r))?;
                let (lo, hi) = (view(r, at)?, view(r, at + len - 64)?);
                (hi - lo == len - 64).then_some(lo)
            })
            .collect::<Option<_>>()
            .unwrap_or_default();
        match (val_at, slot_at, bar) {
            (Some(val_at), Some(slot_at), Some(bar)) if members[0] == mine => Node {
                members,
                idx,
                leaders,
                val_at,
                slot_at,
                bar,
                stage_at,
                ok: true,
            },
            _ => Node::default(),
        }
    }

    /// This rank leads its node.
    pub fn leads(&self) -> bool {
        self.idx == 0
    }

    /// The job is this one node.
    pub fn alone(&self) -> bool {
        self.leaders.len() == 1
    }
}
