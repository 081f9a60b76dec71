//! The remote firehose table (seed 000 Table 2, "Firehose Table") for one peer node:
//! the firehoses this node owns into that peer, with reference counts, the per-node
//! remote victim FIFO, and PENDING placeholders for moves in flight (§3.4).
//!
//! Guarantees (checked by [`PeerTable::validate`]):
//! - entries never overlap; a `Live` entry is exactly a unit the target reported it
//!   pinned for us, and stays pinned there until we send its release — which we only
//!   do for entries with no references, after removing them here. So a hit (an
//!   operation issued on `Live` entries only) always lands in registered memory.
//! - `used` (live + pending entries) never exceeds f before a move is sent: a miss
//!   first replaces unreferenced firehoses (oldest first), and before steady state
//!   simply uses unused ones (seed 000 Table 3, last row).
//! - A request that touches only `Live` or `Pending` entries sends nothing: it waits
//!   for the moves already in flight (the PENDING optimisation of §3.4).

use super::local::Held;
use super::params::Params;
use super::victim::VictimFifo;
use std::collections::{BTreeMap, HashMap};

/// State of a remote firehose entry (seed 000 §3.4 and §4.1; the C original encoded
/// these as magic pointer values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RState {
    /// A committed move for this range is in flight (the id of that move): PENDING.
    Pending(u64),
    /// The target pinned it for us: one-sided access allowed.
    Live,
    /// PENDING_UNCOMMITTED (§4.1): reserved by request `req`, which is still
    /// collecting replacements; destroyed if that request rolls back.
    Uncommitted(u64),
    /// A live, unreferenced firehose request `req` took as its replacement (its
    /// release is not sent yet, so the unit is still pinned at the target). Another
    /// request that needs it takes it back (it becomes `Live` again) and the reaper
    /// notices and rolls back (seed 000 Table 3, first row). Counted in `used`
    /// (the target still holds it) except by its reaper, whose move releases it.
    Reaped(u64),
    /// Released, the release not sent yet: it rides on the next move. Still pinned at
    /// the target, so a request needing it revives it. Counted in `used`.
    Deferred,
    /// Its release travels in move `id`: requests touching it wait for that move
    /// (a new pin could otherwise overtake the release at the target — MPI does not
    /// order two messages — and be undone by it). Counted in `used` until answered.
    Releasing(u64),
}

#[derive(Clone, Debug)]
pub struct RemoteEntry {
    pub end: usize,
    pub state: RState,
    pub refs: u32,
    pub gen: u64,
    /// An explicitly registered region of the target (acts as prepinned: costs no
    /// firehose, is never replaced; removed only by the target's invalidation).
    pub prepinned: bool,
    /// The target pinned it on read-only memory: gets only (puts and atomics on it
    /// are refused here, without a message).
    pub ro: bool,
    queued: Option<u64>,
    /// A placeholder's piece to ask the target for. The placeholder itself spans
    /// the whole free part of its granule, so no two moves in flight ever ask for
    /// the same unit: the target keeps one holder bit per peer and unit, and two
    /// pins racing one release would leave us believing in a unit it unpinned.
    piece: (usize, usize),
}

/// What a request must do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Fully covered by live firehoses: references taken.
    Hit(Vec<Held>),
    /// Covered, partly by moves in flight: wait for these moves, then plan again.
    Wait(Vec<u64>),
    /// Send a move: release these unit starts, pin these pieces (placeholders are in
    /// place under move `id`).
    Move {
        releases: Vec<usize>,
        pins: Vec<(usize, usize)>,
    },
    /// Every firehose is referenced by operations in flight: complete some, retry.
    NeedReplacements,
}

/// One request's progress through the optimistic acquisition of seed 000 §4.1 (its
/// rollback log): references on the live firehoses of its range, the replacements
/// it reaped, and its PENDING_UNCOMMITTED placeholders.
#[derive(Debug)]
pub struct Acq {
    /// Request id (distinct from every move id: both come from one counter).
    pub req: u64,
    pub addr: usize,
    pub len: usize,
    /// The rendezvous baselines ask the target for the whole range every time.
    pub always_move: bool,
    /// References on live entries of the range (released on rollback; on commit the
    /// request keeps them until its move is answered, so they cannot be replaced).
    pub held: Vec<Held>,
    /// Starts of entries in state `Reaped(req)`.
    reaped: Vec<usize>,
    /// Number of entries in state `Uncommitted(req)`.
    uncommitted: usize,
    /// The granules the request touches (its placeholders lie inside).
    span: (usize, usize),
}

impl Acq {
    pub fn new(req: u64, addr: usize, len: usize, always_move: bool) -> Acq {
        Acq {
            req,
            addr,
            len,
            always_move,
            held: Vec::new(),
            reaped: Vec::new(),
            uncommitted: 0,
            span: (addr, addr + len),
        }
    }

    /// Holds nothing (nothing to roll back).
    pub fn is_clear(&self) -> bool {
        self.held.is_empty() && self.reaped.is_empty() && self.uncommitted == 0
    }
}

/// The outcome of one optimistic step ([`PeerTable::step`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Fully covered by live firehoses: these references are the caller's.
    Hit(Vec<Held>),
    /// Parts are PENDING or being released by moves in flight: wait for them (the
    /// request keeps its progress).
    Wait(Vec<u64>),
    /// Committed as move `id`: send it. The request keeps `Acq::held`; the answer
    /// hands the new units over with a reference each ([`PeerTable::take_handoff`]).
    Commit {
        releases: Vec<usize>,
        pins: Vec<(usize, usize)>,
    },
    /// Not enough replacements yet (progress kept): poll and step again.
    Short,
    /// The range touches another request's PENDING_UNCOMMITTED entry: the estimate is
    /// unreliable (seed 000 Table 3, second row). Losers roll back.
    Conflict,
}

#[derive(Default)]
pub struct PeerTable {
    /// start -> entry. Invariant: non-overlapping; only `Live` entries carry
    /// references.
    entries: BTreeMap<usize, RemoteEntry>,
    fifo: VictimFifo,
    /// Entries that are not prepinned, in every state: the firehoses in use out of
    /// f. A unit whose release is not yet confirmed still counts (moves from several
    /// threads reach the target in any order, so a release in one move cannot make
    /// room for the pins of another; a release that rides in a request's own move
    /// is processed before that move's pins, and the step discounts those).
    /// Invariant: `used - (releases riding on the move) <= f` whenever a move is
    /// sent, so the target never holds more than f units for us.
    pub used: usize,
    /// Live entries with no references (the remote victim FIFO's valid content).
    pub idle: usize,
    /// Starts of `Deferred` releases (they ride on the next move).
    pub deferred: Vec<usize>,
    next_gen: u64,
    /// Most recent hit entry (start, end): checked before the tree.
    recent: (usize, usize),
    /// Committed moves whose requester wants the answered units handed over with a
    /// reference each (so no other request can replace them before it uses them).
    handoff: HashMap<u64, Vec<Held>>,
    /// Events that can free firehoses (releases, rollbacks, answered or aborted
    /// moves, invalidations) so far: a waiter that sees it unchanged since its last
    /// step knows nothing was freed meanwhile.
    pub releases: u64,
}

impl PeerTable {
    #[inline]
    fn containing(&self, addr: usize) -> Option<(usize, &RemoteEntry)> {
        self.entries
            .range(..=addr)
            .next_back()
            .filter(|(_, e)| e.end > addr)
            .map(|(&s, e)| (s, e))
    }

    /// The longest prefix of `[addr, addr + len)` (at least its first entry or gap)
    /// that needs at most `max` firehoses: one per entry already there, one per gap
    /// in each granule (what [`Self::step`] counts). Memory the target once pinned in
    /// small units (mappings that changed since, freed and mapped again without an
    /// invalidation) can need more than f firehoses for a range of one granule; a
    /// request for all of it references its own units and could never be satisfied.
    pub fn fitting(&self, p: &Params, addr: usize, len: usize, max: usize) -> usize {
        let end = addr + len;
        let mut cur = addr;
        let mut n = 0;
        while cur < end {
            let next = match self.containing(cur) {
                Some((_, e)) => e.end.min(end),
                None => {
                    let gap = self.entries.range(cur..end).next().map_or(end, |(&s, _)| s);
                    gap.min(p.granule(cur).1)
                }
            };
            n += 1;
            if n > max.max(1) {
                return cur - addr;
            }
            cur = next;
        }
        len
    }

    /// Fast path for a request inside one live entry: take a reference.
    #[inline(always)]
    pub fn hit_one(&mut self, addr: usize, end: usize, write: bool) -> Option<Held> {
        let s = if addr >= self.recent.0 && end <= self.recent.1 {
            self.recent.0
        } else {
            let (s, e) = self.containing(addr)?;
            if e.end < end || e.state != RState::Live {
                return None;
            }
            self.recent = (s, e.end);
            s
        };
        let e = self.entries.get_mut(&s)?;
        debug_assert_eq!(e.state, RState::Live);
        if write && e.ro {
            return None; // the slow path refuses it with a message
        }
        if e.refs == 0 && !e.prepinned {
            self.idle -= 1;
        }
        e.refs += 1;
        Some((s, e.gen))
    }

    fn take_ref(&mut self, s: usize) -> Held {
        let e = self.entries.get_mut(&s).expect("entry");
        if e.refs == 0 && !e.prepinned {
            self.idle -= 1;
        }
        e.refs += 1;
        (s, e.gen)
    }

    /// The target answered the unit `[s, e)` as read-only memory.
    pub fn mark_read_only(&mut self, s: usize, e: usize) {
        if let Some(x) = self.entries.get_mut(&s).filter(|x| x.end == e) {
            x.ro = true;
        }
    }

    /// Is the entry starting at `s` on read-only memory?
    pub fn is_read_only(&self, s: usize) -> bool {
        self.entries.get(&s).is_some_and(|x| x.ro)
    }

    /// End of the entry starting at `s` (if present).
    pub fn end_of(&self, s: usize) -> Option<usize> {
        self.entries.get(&s).map(|e| e.end)
    }

    /// Drop a reference; a stale one (entry invalidated or replaced) is ignored. An
    /// entry left unreferenced becomes the newest in the victim FIFO.
    pub fn release(&mut self, h: Held) {
        let Some(e) = self.entries.get_mut(&h.0) else {
            return;
        };
        if e.gen != h.1 || e.refs == 0 {
            return;
        }
        e.refs -= 1;
        self.releases += 1;
        if e.refs == 0 && !e.prepinned {
            self.idle += 1;
            if e.queued == Some(self.fifo.newest()) {
                return; // already the newest (the hot-hit case): nothing to move
            }
            e.queued = Some(self.fifo.push(h.0));
            let entries = &self.entries;
            self.fifo.compact(self.idle, |seq, k| {
                entries.get(&k).is_some_and(|x| x.queued == Some(seq))
            });
        }
    }

    /// Remove an entry, keeping counts right.
    fn remove(&mut self, s: usize) -> Option<RemoteEntry> {
        let e = self.entries.remove(&s)?;
        if !e.prepinned {
            self.used -= 1;
            if e.state == RState::Live && e.refs == 0 {
                self.idle -= 1;
            }
        }
        if self.recent.0 == s {
            self.recent = (0, 0);
        }
        Some(e)
    }

    /// Turn the least recently used unreferenced live firehose into `st` (a
    /// tombstone that still names the unit pinned at the target); `None` if every
    /// firehose is referenced or pending.
    fn evict_as(&mut self, st: RState) -> Option<usize> {
        while let Some((seq, s)) = self.fifo.pop() {
            let Some(e) = self.entries.get_mut(&s) else {
                continue;
            };
            if e.queued != Some(seq) {
                continue;
            }
            e.queued = None;
            if e.refs > 0 || e.state != RState::Live || e.prepinned {
                continue; // in use again: queued anew when released
            }
            e.state = st;
            self.idle -= 1;
            if self.recent.0 == s {
                self.recent = (0, 0);
            }
            return Some(s);
        }
        None
    }

    /// Release the least recently used unreferenced firehose (the release rides on
    /// the next move); `None` if every firehose is referenced or pending.
    pub fn evict_one(&mut self) -> Option<usize> {
        let s = self.evict_as(RState::Deferred)?;
        self.deferred.push(s);
        Some(s)
    }

    /// A `Reaped` or `Deferred` tombstone becomes a live (unreferenced) firehose
    /// again: its release was never sent, so the target still pins it for us.
    fn revive(&mut self, s: usize) {
        let e = self.entries.get_mut(&s).expect("tombstone present");
        debug_assert!(matches!(e.state, RState::Reaped(_) | RState::Deferred));
        if e.state == RState::Deferred {
            self.deferred.retain(|&d| d != s);
        }
        e.state = RState::Live;
        debug_assert_eq!(e.refs, 0);
        e.queued = Some(self.fifo.push(s));
        self.idle += 1;
    }

    /// Plan a request for `[addr, addr+len)` in one go (seed 000 Fig. 2 step 1, for
    /// a single client): a hit takes references; a miss reserves firehoses for the
    /// missing pieces (replacing idle ones when all f are in use) and returns the
    /// move to send as move `id`; nothing is held otherwise. `always_move`: the
    /// rendezvous baselines ask the target on every request.
    pub fn plan(
        &mut self,
        p: &Params,
        addr: usize,
        len: usize,
        id: u64,
        always_move: bool,
    ) -> Plan {
        let mut acq = Acq::new(id, addr, len, always_move);
        match self.step(p, &mut acq, id) {
            Step::Hit(h) => Plan::Hit(h),
            Step::Wait(w) => {
                self.rollback(&mut acq);
                Plan::Wait(w)
            }
            Step::Commit { releases, pins } => {
                self.handoff.remove(&id);
                for h in std::mem::take(&mut acq.held) {
                    self.release(h);
                }
                Plan::Move { releases, pins }
            }
            Step::Short | Step::Conflict => {
                self.rollback(&mut acq);
                Plan::NeedReplacements
            }
        }
    }

    /// One step of the optimistic acquisition of seed 000 §4.1 (Fig. 5's loop body;
    /// the first step is Fig. 6's "estimate": it commits at once when the request
    /// can certainly be satisfied). Takes references on the live firehoses of the
    /// range, revives tombstones it needs, waits for PENDING entries, reaps
    /// replacements (least recently used first) and reserves the missing pieces as
    /// PENDING_UNCOMMITTED. When every missing piece is reserved and `used <= f`, it
    /// commits as move `move_id`. Progress is kept in `acq` between steps; a caller
    /// that gives up must [`Self::rollback`].
    ///
    /// Long because its phases (re-validate reaped, reference the range, reap
    /// replacements, reserve, commit) share `acq` and the local `missing`/`waits`/`riding`
    /// counts: the f bound (`used - riding + need <= f`) is checked across reaping and
    /// reserving, so splitting would pass half-done accounting between helpers.
    pub fn step(&mut self, p: &Params, acq: &mut Acq, move_id: u64) -> Step {
        // Seed 000 Table 3, first row: a replacement another request took back since
        // the last step invalidates this request's progress.
        let req = acq.req;
        if acq
            .reaped
            .iter()
            .any(|s| self.entries.get(s).map(|e| e.state) != Some(RState::Reaped(req)))
        {
            self.rollback(acq);
        }
        let end = acq.addr + acq.len;
        acq.span = (p.granule(acq.addr).0, p.granule(end - 1).1);
        let mut missing: Vec<(usize, usize)> = Vec::new();
        let mut waits: Vec<u64> = Vec::new();
        let mut conflict = false;
        let mut mine = 0;
        for (pa, pb) in p.pieces(acq.addr, acq.len) {
            let mut cur = pa;
            while cur < pb {
                let Some((s, e)) = self.containing(cur) else {
                    let next = self.entries.range(cur..pb).next().map_or(pb, |(&s, _)| s);
                    missing.push((cur, next));
                    cur = next;
                    continue;
                };
                let next = e.end.min(pb);
                match e.state {
                    RState::Live => {
                        let gen = e.gen;
                        if !acq.held.contains(&(s, gen)) {
                            // A reference on an older entry at `s` is stale (that
                            // entry was replaced): drop it from the log.
                            acq.held.retain(|h| h.0 != s);
                            let h = self.take_ref(s);
                            acq.held.push(h);
                        }
                    }
                    RState::Pending(m) | RState::Releasing(m) => {
                        if !waits.contains(&m) {
                            waits.push(m)
                        }
                    }
                    // Placeholders lie in one granule, visited once per piece.
                    RState::Uncommitted(r) if r == req => mine += 1,
                    RState::Uncommitted(_) => conflict = true,
                    RState::Deferred if acq.always_move => {
                        // The baselines re-pin: the release (still in `deferred`)
                        // travels in this request's move, ahead of the pin.
                        self.remove(s);
                        missing.push((cur, next));
                    }
                    RState::Reaped(_) | RState::Deferred => {
                        acq.reaped.retain(|&x| x != s);
                        self.revive(s);
                        let h = self.take_ref(s);
                        acq.held.push(h);
                    }
                }
                cur = next;
            }
        }
        acq.uncommitted = mine;
        debug_assert!(missing
            .iter()
            .all(|&(a, b)| a < b && a >= acq.addr && b <= end));
        if conflict {
            return Step::Conflict;
        }
        if !waits.is_empty() {
            return Step::Wait(waits);
        }
        if missing.is_empty() && mine == 0 && !acq.always_move {
            self.give_back_reaped(acq);
            return Step::Hit(std::mem::take(&mut acq.held));
        }
        // Replacements first when all f are in use (steady state), else unused
        // firehoses (Table 3, last row). The range's own live firehoses are
        // referenced by `acq`, so they are never chosen.
        // Deferred releases and our own replacements ride on this request's move,
        // ahead of its pins: they do not take room from it.
        let mut riding = self
            .deferred
            .iter()
            .filter(|s| {
                self.entries
                    .get(s)
                    .is_some_and(|e| e.state == RState::Deferred)
            })
            .count()
            + acq.reaped.len();
        let need = missing.len();
        while self.used - riding + need > p.f {
            match self.evict_as(RState::Reaped(req)) {
                Some(s) => {
                    acq.reaped.push(s);
                    riding += 1;
                }
                None => break,
            }
        }
        let k = need.min(p.f.saturating_sub(self.used - riding));
        for &(a, b) in &missing[..k] {
            // Widen the reservation to the free part of the granule.
            let (glo, ghi) = p.granule(a);
            let lo = self
                .entries
                .range(..a)
                .next_back()
                .map_or(glo, |(_, e)| e.end.max(glo));
            let hi = self
                .entries
                .range(a..)
                .next()
                .map_or(ghi, |(&s, _)| s.min(ghi));
            debug_assert!(lo <= a && b <= hi);
            self.entries.insert(
                lo,
                RemoteEntry {
                    end: hi,
                    state: RState::Uncommitted(req),
                    refs: 0,
                    gen: 0,
                    prepinned: false,
                    ro: false,
                    queued: None,
                    piece: (a, b),
                },
            );
            self.used += 1;
            acq.uncommitted += 1;
        }
        if k < need || self.used - riding > p.f {
            return Step::Short;
        }
        // Commit: uncommitted -> PENDING, replacements -> being released by this move.
        let mut releases = std::mem::take(&mut acq.reaped);
        for s in std::mem::take(&mut self.deferred) {
            releases.push(s);
        }
        for &s in &releases {
            if let Some(e) = self.entries.get_mut(&s) {
                if matches!(e.state, RState::Reaped(_) | RState::Deferred) {
                    e.state = RState::Releasing(move_id);
                }
            }
        }
        let mut pins = Vec::new();
        for (_, e) in self.entries.range_mut(acq.span.0..acq.span.1) {
            if e.state == RState::Uncommitted(req) {
                e.state = RState::Pending(move_id);
                pins.push(e.piece);
            }
        }
        if acq.always_move {
            pins = p.pieces(acq.addr, acq.len).collect();
        }
        acq.uncommitted = 0;
        self.handoff.insert(move_id, Vec::new());
        Step::Commit { releases, pins }
    }

    /// Put reaped replacements back (they become live, unreferenced firehoses).
    fn give_back_reaped(&mut self, acq: &mut Acq) {
        for s in std::mem::take(&mut acq.reaped) {
            if self.entries.get(&s).map(|e| e.state) == Some(RState::Reaped(acq.req)) {
                self.revive(s);
            }
        }
    }

    /// Roll a request back (seed 000 §4.1): drop its references, return its
    /// replacements to the FIFO and destroy its PENDING_UNCOMMITTED entries.
    pub fn rollback(&mut self, acq: &mut Acq) {
        self.releases += 1;
        for h in std::mem::take(&mut acq.held) {
            self.release(h);
        }
        self.give_back_reaped(acq);
        let ks: Vec<usize> = self
            .entries
            .range(acq.span.0..acq.span.1)
            .filter(|(_, e)| e.state == RState::Uncommitted(acq.req))
            .map(|(&k, _)| k)
            .collect();
        for k in ks {
            self.remove(k);
        }
        acq.uncommitted = 0;
    }

    /// The units the answer of committed move `id` handed over (one reference each).
    pub fn take_handoff(&mut self, id: u64) -> Vec<Held> {
        self.handoff.remove(&id).unwrap_or_default()
    }

    /// The target answered move `id`: drop its placeholders and release tombstones,
    /// and enter the units it pinned for us (already-known units are not entered
    /// twice) and the registered regions it reported (`prepinned`). Entries of other
    /// requests that this answer covers are replaced. If the mover asked for a
    /// handoff, each answered unit gets a reference for it.
    ///
    /// Kept in one piece: the answer's effects land in one pass over `entries`:
    /// move `id`'s placeholders are dropped, then each unit removes the entries it
    /// overlaps (queuing their releases in `deferred` by state), is entered if new and
    /// counted in `used`/`idle`, and gets its handoff reference if one was asked for.
    pub fn complete_move(&mut self, id: u64, units: &[(usize, usize, bool)]) {
        self.releases += 1;
        let ph: Vec<usize> = self
            .entries
            .iter()
            .filter(
                |(_, e)| matches!(e.state, RState::Pending(m) | RState::Releasing(m) if m == id),
            )
            .map(|(&s, _)| s)
            .collect();
        for s in ph {
            self.remove(s);
        }
        let want = self.handoff.contains_key(&id);
        let mut handed = Vec::new();
        for &(s, e, pre) in units {
            let known = self
                .entries
                .get(&s)
                .is_some_and(|x| x.end == e && x.state == RState::Live && x.prepinned == pre);
            if !known {
                let overlapping: Vec<usize> = self
                    .entries
                    .range(..e)
                    .filter(|(_, x)| x.end > s)
                    .map(|(&k, _)| k)
                    .collect();
                let mut keep_out = false;
                for k in overlapping {
                    let x = &self.entries[&k];
                    match x.state {
                        RState::Live if x.refs > 0 => {
                            // Should not happen (units at the target never overlap);
                            // keep the referenced entry and skip the new one.
                            debug_assert!(false, "new unit overlaps a referenced firehose");
                            keep_out = true;
                        }
                        RState::Live | RState::Reaped(_) => {
                            let old = self.remove(k).expect("present");
                            if !old.prepinned {
                                self.deferred.push(k);
                            }
                        }
                        RState::Deferred => {
                            // Its release is already in `deferred`.
                            self.remove(k);
                        }
                        RState::Pending(_) | RState::Uncommitted(_) | RState::Releasing(_) => {
                            self.remove(k);
                        }
                    }
                }
                if keep_out {
                    if !pre {
                        self.deferred.push(s);
                    }
                    continue;
                }
                self.next_gen += 1;
                let queued = (!pre).then(|| self.fifo.push(s));
                self.entries.insert(
                    s,
                    RemoteEntry {
                        end: e,
                        state: RState::Live,
                        refs: 0,
                        gen: self.next_gen,
                        prepinned: pre,
                        ro: false,
                        queued,
                        piece: (0, 0),
                    },
                );
                if !pre {
                    self.used += 1;
                    self.idle += 1;
                }
            }
            if want {
                handed.push(self.take_ref(s));
            }
        }
        if want {
            self.handoff.insert(id, handed);
        }
    }

    /// Move `id` was never delivered: drop its placeholders; its releases were not
    /// sent, so they are deferred again.
    pub fn abort_move(&mut self, id: u64) {
        self.releases += 1;
        let ks: Vec<(usize, RState)> = self
            .entries
            .iter()
            .filter(
                |(_, e)| matches!(e.state, RState::Pending(m) | RState::Releasing(m) if m == id),
            )
            .map(|(&s, e)| (s, e.state))
            .collect();
        for (s, st) in ks {
            if st == RState::Pending(id) {
                self.remove(s);
            } else if let Some(e) = self.entries.get_mut(&s) {
                e.state = RState::Deferred;
                self.deferred.push(s);
            }
        }
        self.handoff.remove(&id);
    }

    /// The target invalidated `[a, b)`: forget every entry overlapping it that names
    /// a unit there (the caller completes outstanding operations to the target
    /// before acknowledging). PENDING and uncommitted placeholders stay: their
    /// moves are answered afresh.
    pub fn invalidate(&mut self, a: usize, b: usize) -> usize {
        self.releases += 1;
        let ks: Vec<usize> = self
            .entries
            .range(..b)
            .filter(|(_, x)| {
                x.end > a && !matches!(x.state, RState::Pending(_) | RState::Uncommitted(_))
            })
            .map(|(&k, _)| k)
            .collect();
        for &k in &ks {
            self.remove(k);
        }
        self.deferred.retain(|&d| d < a || d >= b);
        ks.len()
    }

    /// Longest live run inside `[a, b)`; references taken on its entries.
    pub fn partial(
        &mut self,
        a: usize,
        b: usize,
        whole: bool,
    ) -> Option<(usize, usize, Vec<Held>)> {
        let mut best: Option<(usize, usize, Vec<usize>)> = None;
        let mut run: Option<(usize, usize, Vec<usize>)> = None;
        let mut cur = a;
        while cur < b {
            match self.containing(cur) {
                Some((s, e)) if e.state == RState::Live => {
                    let r = run.get_or_insert((cur, cur, Vec::new()));
                    r.1 = e.end.min(b);
                    r.2.push(s);
                    cur = e.end;
                }
                other => {
                    if let Some(r) = run.take() {
                        if best.as_ref().map_or(true, |x| r.1 - r.0 > x.1 - x.0) {
                            best = Some(r);
                        }
                    }
                    cur = match other {
                        Some((_, e)) => e.end,
                        None => self.entries.range(cur..b).next().map_or(b, |(&s, _)| s),
                    };
                }
            }
        }
        if let Some(r) = run.take() {
            if best.as_ref().map_or(true, |x| r.1 - r.0 > x.1 - x.0) {
                best = Some(r);
            }
        }
        let (s, e, starts) = best?;
        if whole && (s != a || e != b) {
            return None;
        }
        let held = starts.into_iter().map(|k| self.take_ref(k)).collect();
        Some((s, e, held))
    }

    /// Is every reference in this table, besides `acq`'s own, one of the `pin_refs`
    /// references explicit pins hold, with no move or other request in progress?
    /// Then nothing but releasing pins can free a firehose.
    pub fn only_pins_hold(&self, acq: &Acq, pin_refs: u64) -> bool {
        let mut refs = 0u64;
        for e in self.entries.values() {
            match e.state {
                RState::Live => refs += e.refs as u64,
                RState::Uncommitted(r) | RState::Reaped(r) if r == acq.req => {}
                RState::Deferred => {}
                _ => return false,
            }
        }
        refs.saturating_sub(acq.held.len() as u64) <= pin_refs
    }

    /// One line per non-live entry and the counters (for debugging hangs).
    pub fn debug_summary(&self) -> String {
        let mut out = format!(
            "used {} idle {} deferred {:?} handoffs {:?}\n",
            self.used,
            self.idle,
            self.deferred,
            self.handoff.keys().collect::<Vec<_>>()
        );
        for (s, e) in &self.entries {
            out += &format!(
                "  {:#x}+{:#x} {:?} refs {}\n",
                s,
                e.end - s,
                e.state,
                e.refs
            );
        }
        out
    }

    pub fn validate(&self) -> std::result::Result<(), String> {
        let mut prev = 0usize;
        let (mut idle, mut n) = (0, 0);
        for (&s, e) in &self.entries {
            if s < prev || e.end <= s {
                return Err(format!(
                    "remote entry [{s:#x},{:#x}) overlaps or is empty",
                    e.end
                ));
            }
            prev = e.end;
            if e.state != RState::Live && e.refs != 0 {
                return Err(format!(
                    "entry {s:#x} in state {:?} has references",
                    e.state
                ));
            }
            if e.state == RState::Deferred && !self.deferred.contains(&s) {
                return Err(format!("deferred entry {s:#x} has no queued release"));
            }
            if e.prepinned {
                continue;
            }
            n += 1;
            if e.state == RState::Live && e.refs == 0 {
                idle += 1;
            }
        }
        if n != self.used || idle != self.idle {
            return Err(format!(
                "counts drifted: {n} entries / {idle} idle vs used {} / idle {}",
                self.used, self.idle
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firehose::settings::{FhMode, FirehoseSettings};
    use crate::runtime::config::Group;

    /// A target that pinned a granule in small units (its mappings changed since):
    /// the part of a request that fits f firehoses stops where the (f+1)-th unit or
    /// gap would begin; gaps count once per granule.
    #[test]
    fn fitting_counts_the_units_already_known() {
        let unit = 1 << 20;
        let p = Params::derive_with(
            &FirehoseSettings::defaults(),
            2,
            1,
            FhMode::Region,
            None,
            Some(unit),
        );
        let f = p.f;
        assert!(f >= 2, "f = {f}");
        let g = 64 * unit; // a granule-aligned base
        let mut t = PeerTable::default();
        // Nothing known: one gap per granule, as many granules as f allows.
        assert_eq!(t.fitting(&p, g, unit / 2, f), unit / 2);
        assert_eq!(t.fitting(&p, g + 8, 3 * unit, 2), 2 * unit - 8);
        // The target answered a move for the first granule with f + 2 units of 4 KiB.
        let Plan::Move { .. } = t.plan(&p, g, unit, 1, false) else {
            panic!("a miss plans a move");
        };
        let small: Vec<(usize, usize, bool)> = (0..f + 2)
            .map(|i| (g + 4096 * i, g + 4096 * (i + 1), false))
            .collect();
        t.complete_move(1, &small);
        // f of them fit; the rest of the granule waits for the next chunk.
        assert_eq!(t.fitting(&p, g, unit, f), 4096 * f);
        // From inside the third unit: f - 1 more units, then a gap would be one too many.
        assert_eq!(t.fitting(&p, g + 2 * 4096 + 100, unit, f), 4096 * f - 100);
        // Past the small units: the rest of the granule is one gap.
        let rest = g + 4096 * (f + 2);
        assert_eq!(t.fitting(&p, rest, g + unit - rest, 1), g + unit - rest);
        // At least the first unit, whatever `max`.
        assert_eq!(t.fitting(&p, g, unit, 0), 4096);
    }
}
