//! The local bucket table (seed 000 Table 2, "Local Page Table"): every unit of this
//! node's memory that is pinned, with reference counts from remote firehoses and
//! from locally initiated operations, and the local victim FIFO (lazy deregistration).
//!
//! Guarantees (checked by [`LocalTable::check`], run after every operation in debug
//! builds):
//! - units never overlap; each lies inside one granule of [`Params::granule`];
//! - `units.len() <= capacity` = M + MAXVICTIM (in units), so pinned memory stays
//!   within `limit_bytes` no matter what peers ask;
//! - a unit with a non-zero reference count is never unpinned (except by an explicit
//!   `invalidate`, whose caller has told every holder to stop first);
//! - units used only locally number at most MAXVICTIM (the local guarantee of §3.1),
//!   so remote moves, which run in handlers and cannot wait, always find room by
//!   evicting unreferenced units once peers respect f;
//! - unreferenced units beyond `victim_keep` are unpinned at once (the FIFO length
//!   limit).
//!
//! - local requests are two-phase (seed 000 Table 3, third row): `local_begin`
//!   reserves units (`pinning`), the caller pins them without the table lock, then
//!   `local_finish`; a unit being pinned is never a hit, and units with local
//!   references never exceed MAXVICTIM.
//!
//! Side effects (mlock + conduit registration) go through the [`Pinner`] given to
//! each call, so the table itself is pure and is tested against a model.

use super::params::Params;
use super::victim::VictimFifo;
use crate::bail;
use crate::runtime::error::Result;
use std::collections::BTreeMap;

/// Pins and unpins memory for the table (the conduit side of seed 000 §3.3).
pub trait Pinner {
    /// Pin `[s, e)`; returns whether the memory is also locked in RAM.
    fn pin(&mut self, s: usize, e: usize) -> Result<bool>;
    fn unpin(&mut self, s: usize, e: usize, locked: bool);
    /// The largest range within `[lo, hi)` containing `[a, b)` that may be pinned
    /// (mapped readable with one protection throughout, and not library heap or an
    /// explicitly registered region), and whether it is writable; `None` if `[a, b)`
    /// itself may not be (not readable throughout, or reserved).
    fn extent(&self, a: usize, b: usize, lo: usize, hi: usize) -> Option<(usize, usize, bool)>;
}

/// How a unit is used; derived from its counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// At least one remote firehose points at it.
    Remote,
    /// Only local operations reference it.
    LocalOnly,
    /// Unreferenced: a victim, kept pinned for reuse until evicted.
    Idle,
}

#[derive(Clone, Debug)]
pub struct LocalUnit {
    pub end: usize,
    /// Peers holding a firehose on this unit (bit per rank).
    holders: Vec<u64>,
    /// Invariant: `remote == popcount(holders)`.
    pub remote: u32,
    pub local: u32,
    pub locked: bool,
    /// Distinguishes this unit from an earlier one at the same address.
    pub gen: u64,
    /// Sequence number of this unit's valid victim-FIFO entry.
    queued: Option<u64>,
    /// Phase one of a two-phase local pin (seed 000 Table 3, third row): reserved
    /// and referenced by the pinning thread, which pins it without the table lock.
    /// A local request meeting it rolls back; a handler meeting it parks its move.
    pub pinning: bool,
    /// The memory was read-only when pinned: only gets may use it. Peers learn this
    /// with the unit and refuse puts and atomics on it without asking (a flag on the
    /// hit path, no system call).
    pub ro: bool,
}

impl LocalUnit {
    pub fn usage(&self) -> Use {
        if self.remote > 0 {
            Use::Remote
        } else if self.local > 0 {
            Use::LocalOnly
        } else {
            Use::Idle
        }
    }
    fn has(&self, peer: usize) -> bool {
        self.holders[peer / 64] & (1 << (peer % 64)) != 0
    }
    pub fn holder_ranks(&self) -> Vec<usize> {
        let mut v = Vec::new();
        for (w, bits) in self.holders.iter().enumerate() {
            for b in 0..64 {
                if bits & (1u64 << b) != 0 {
                    v.push(w * 64 + b);
                }
            }
        }
        v
    }
}

/// A reference a caller holds: (unit start, unit generation).
pub type Held = (usize, u64);

/// Phase one of a local request ([`LocalTable::local_begin`]).
#[derive(Debug, PartialEq, Eq)]
pub enum LocalBegin {
    /// Everything was pinned already: references taken.
    Done(Vec<Held>),
    /// References taken; these reserved units `(start, end, gen)` must be pinned
    /// (without the table lock) and then [`LocalTable::local_finish`]ed.
    Pin {
        held: Vec<Held>,
        pins: Vec<(usize, usize, u64)>,
    },
    /// The range meets a unit another thread is pinning: nothing taken, retry.
    Busy,
    /// The local share (MAXVICTIM) is used up: nothing taken, retry after
    /// operations in flight complete.
    Full,
}

#[derive(Default, Clone, Copy, Debug)]
pub struct LocalCounts {
    pub pins: u64,
    pub unpins: u64,
    pub bytes: usize,
    pub peak: usize,
    pub remote_units: usize,
    pub local_only_units: usize,
    /// Units with at least one local reference, whatever else uses them. Bounded
    /// by MAXVICTIM for new local references: with peers bounded by f (M in
    /// all), referenced units never exceed M + MAXVICTIM, so a move always finds a
    /// victim (threads pinning memory that peers also hold made local-only
    /// counting overshoot when those peers released it).
    pub local_refd_units: usize,
    pub idle_units: usize,
    pub idle_bytes: usize,
    pub mlock_failures: u64,
}

pub struct LocalTable {
    params: Params,
    nodes: usize,
    /// start -> unit. Invariant: non-overlapping.
    units: BTreeMap<usize, LocalUnit>,
    fifo: VictimFifo,
    next_gen: u64,
    pub counts: LocalCounts,
    /// False between a release and the next `trim` (the FIFO may be over its limit).
    trimmed: bool,
    /// References dropped and units removed so far (see `PeerTable::releases`).
    pub releases: u64,
    /// Ranges a local thread is invalidating (`quiesce`): moves meeting them park
    /// until it ends, so holders it told to forget them cannot take new firehoses
    /// there meanwhile and keep its rounds going for as long as they access.
    quiescing: Vec<(usize, usize)>,
}

impl LocalTable {
    pub fn new(params: Params, nodes: usize) -> LocalTable {
        LocalTable {
            params,
            nodes,
            units: BTreeMap::new(),
            fifo: VictimFifo::default(),
            next_gen: 0,
            counts: LocalCounts::default(),
            trimmed: true,
            releases: 0,
            quiescing: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.units.len()
    }

    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// The unit containing `addr`, if any.
    fn containing(&self, addr: usize) -> Option<(usize, &LocalUnit)> {
        self.units
            .range(..=addr)
            .next_back()
            .filter(|(_, u)| u.end > addr)
            .map(|(&s, u)| (s, u))
    }

    fn set_use(&mut self, before: Use, after: Use, len: usize) {
        if before == after {
            return;
        }
        let c = &mut self.counts;
        match before {
            Use::Remote => c.remote_units -= 1,
            Use::LocalOnly => c.local_only_units -= 1,
            Use::Idle => {
                c.idle_units -= 1;
                c.idle_bytes -= len;
            }
        }
        match after {
            Use::Remote => c.remote_units += 1,
            Use::LocalOnly => c.local_only_units += 1,
            Use::Idle => {
                c.idle_units += 1;
                c.idle_bytes += len;
            }
        }
    }

    /// Apply `f` to the unit at `start`, keeping the use counters and the FIFO right.
    fn update(&mut self, start: usize, f: impl FnOnce(&mut LocalUnit)) {
        let u = self.units.get_mut(&start).expect("unit present");
        let before = u.usage();
        let had_local = u.local > 0;
        f(u);
        let after = u.usage();
        match (had_local, u.local > 0) {
            (false, true) => self.counts.local_refd_units += 1,
            (true, false) => self.counts.local_refd_units -= 1,
            _ => {}
        }
        let len = u.end - start;
        if after == Use::Idle && before != Use::Idle && u.queued != Some(self.fifo.newest()) {
            // Newest in the victim FIFO (exact LRU; older entries become stale).
            u.queued = Some(self.fifo.push(start));
        }
        self.set_use(before, after, len);
        if after == Use::Idle {
            let units = &self.units;
            self.fifo.compact(self.counts.idle_units, |seq, k| {
                units.get(&k).is_some_and(|x| x.queued == Some(seq))
            });
        }
    }

    fn unpin_unit(&mut self, start: usize, pinner: &mut dyn Pinner) -> LocalUnit {
        let u = self.units.remove(&start).expect("unit present");
        self.releases += 1;
        if u.local > 0 {
            self.counts.local_refd_units -= 1;
        }
        let c = &mut self.counts;
        match u.usage() {
            Use::Remote => c.remote_units -= 1,
            Use::LocalOnly => c.local_only_units -= 1,
            Use::Idle => {
                c.idle_units -= 1;
                c.idle_bytes -= u.end - start;
            }
        }
        if !u.pinning {
            pinner.unpin(start, u.end, u.locked);
            self.counts.unpins += 1;
        }
        self.counts.bytes -= u.end - start;
        u
    }

    /// Evict the least recently used unreferenced unit; false if there is none.
    fn evict_one(&mut self, pinner: &mut dyn Pinner) -> bool {
        while let Some((seq, start)) = self.fifo.pop() {
            let Some(u) = self.units.get_mut(&start) else {
                continue;
            };
            if u.queued != Some(seq) {
                continue;
            }
            u.queued = None;
            if u.usage() != Use::Idle {
                continue; // in use again; queued anew when released
            }
            self.unpin_unit(start, pinner);
            return true;
        }
        false
    }

    /// Unpin unreferenced units beyond the FIFO length limit.
    pub fn trim(&mut self, pinner: &mut dyn Pinner) {
        while self.counts.idle_units > self.params.victim_keep() {
            if !self.evict_one(pinner) {
                break;
            }
        }
        self.trimmed = true;
    }

    /// Pin a new unit around `[a, b)` (inside one granule, not covered by any unit),
    /// in one phase (the table stays locked meanwhile: handlers, which cannot roll
    /// back, use this).
    fn new_unit(
        &mut self,
        a: usize,
        b: usize,
        write: bool,
        pinner: &mut dyn Pinner,
    ) -> Result<usize> {
        let (s, e, gen) = self.reserve_unit(a, b, write, pinner)?;
        let r = pinner.pin(s, e);
        self.finish_unit(s, e, gen, r, pinner)?;
        Ok(s)
    }

    /// Phase one: reserve (and count) a unit around `[a, b)`, evicting victims to
    /// stay within capacity; it is `pinning` until [`Self::finish_unit`].
    fn reserve_unit(
        &mut self,
        a: usize,
        b: usize,
        write: bool,
        pinner: &mut dyn Pinner,
    ) -> Result<(usize, usize, u64)> {
        let (glo, ghi) = self.params.granule(a);
        debug_assert!(b <= ghi);
        let lo = self
            .units
            .range(..a)
            .next_back()
            .map_or(glo, |(_, u)| u.end.max(glo));
        let hi = self
            .units
            .range(a..)
            .next()
            .map_or(ghi, |(&s, _)| s.min(ghi));
        let bb = b.min(hi);
        let Some((s, e, writable)) = pinner.extent(a, bb, lo, hi) else {
            bail!(
                Access,
                "[{:#x}, {:#x}) is not readable memory of the target (unmapped, PROT_NONE, a guard page, or the library's own)",
                a,
                bb
            );
        };
        if write && !writable {
            bail!(
                Access,
                "[{:#x}, {:#x}) is read-only memory of the target: puts and atomics are refused",
                a,
                bb
            );
        }
        debug_assert!(lo <= s && s <= a && bb <= e && e <= hi);
        while self.units.len() >= self.params.capacity() {
            if !self.evict_one(pinner) {
                if crate::runtime::config::debug_tables() {
                    self.dump_full();
                }
                bail!(
                    NoResource,
                    "all {} units of pinnable memory (M + MAXVICTIM = {} bytes) are in use",
                    self.params.capacity(),
                    self.params.limit_bytes()
                );
            }
        }
        self.next_gen += 1;
        self.units.insert(
            s,
            LocalUnit {
                end: e,
                holders: vec![0; self.nodes.div_ceil(64)],
                remote: 0,
                local: 0,
                locked: false,
                gen: self.next_gen,
                queued: None,
                pinning: true,
                ro: !writable,
            },
        );
        self.counts.idle_units += 1;
        self.counts.idle_bytes += e - s;
        self.counts.bytes += e - s;
        self.counts.peak = self.counts.peak.max(self.counts.bytes);
        Ok((s, e, self.next_gen))
    }

    /// The `debug_tables` report of a full table: counts, units held per peer and
    /// units still pinning.
    fn dump_full(&self) {
        let mut per = vec![0usize; self.nodes];
        for u in self.units.values() {
            for r in u.holder_ranks() {
                per[r] += 1;
            }
        }
        eprintln!(
            "FULL: {:?} units {} per-peer {:?} pinning {}",
            self.counts,
            self.units.len(),
            per,
            self.units.values().filter(|u| u.pinning).count()
        );
    }

    /// Phase two: the pin of reserved unit `(s, e, gen)` finished with `r`. On
    /// failure the reservation is dropped; if the unit was invalidated meanwhile, a
    /// successful pin is undone.
    fn finish_unit(
        &mut self,
        s: usize,
        e: usize,
        gen: u64,
        r: Result<bool>,
        pinner: &mut dyn Pinner,
    ) -> Result<()> {
        let present = self
            .units
            .get(&s)
            .is_some_and(|u| u.gen == gen && u.pinning);
        match r {
            Ok(locked) if present => {
                let u = self.units.get_mut(&s).expect("present");
                u.pinning = false;
                u.locked = locked;
                if !locked {
                    self.counts.mlock_failures += 1;
                }
                self.counts.pins += 1;
                Ok(())
            }
            Ok(locked) => {
                pinner.unpin(s, e, locked);
                Ok(())
            }
            Err(err) => {
                if present {
                    self.unpin_unit(s, pinner);
                }
                Err(err)
            }
        }
    }

    /// Local references in the table, and whether any unit is in phase one.
    pub fn local_refs(&self) -> (u64, bool) {
        self.units
            .values()
            .fold((0, false), |(n, p), u| (n + u.local as u64, p || u.pinning))
    }

    /// Does `[a, b)` meet a unit in phase one of a local pin?
    pub fn any_pinning(&self, a: usize, b: usize) -> bool {
        self.units
            .range(..b)
            .rev()
            .take_while(|(_, u)| u.end > a)
            .any(|(_, u)| u.pinning)
    }

    /// A local thread starts invalidating `[a, b)`: moves that meet it park
    /// ([`Self::must_park`]) until the matching [`Self::end_quiesce`].
    pub fn begin_quiesce(&mut self, a: usize, b: usize) {
        debug_assert!(a < b);
        self.quiescing.push((a, b));
    }

    /// The invalidation of `[a, b)` that [`Self::begin_quiesce`] started is over.
    pub fn end_quiesce(&mut self, a: usize, b: usize) {
        let i = self.quiescing.iter().position(|&r| r == (a, b));
        debug_assert!(i.is_some(), "end_quiesce of [{a:#x}, {b:#x}) never begun");
        if let Some(i) = i {
            self.quiescing.swap_remove(i);
        }
    }

    /// Must a move piece `[a, b)` wait: does it meet a unit being pinned here, or a
    /// range being invalidated?
    pub fn must_park(&self, a: usize, b: usize) -> bool {
        self.any_pinning(a, b) || self.quiescing.iter().any(|&(s, e)| s < b && a < e)
    }

    /// A peer's move asks for `[a, b)` (one granule piece): reference (pinning where
    /// needed) the units covering it on behalf of `peer`. Returns the units' bounds.
    /// Never waits: runs in a handler.
    pub fn remote_acquire(
        &mut self,
        peer: usize,
        a: usize,
        b: usize,
        write: bool,
        pinner: &mut dyn Pinner,
    ) -> Result<Vec<(usize, usize, bool)>> {
        let mut got: Vec<usize> = Vec::new();
        let mut newly: Vec<usize> = Vec::new();
        let mut cur = a;
        let res = (|| {
            while cur < b {
                let start = match self.containing(cur) {
                    Some((_, u)) if u.pinning => {
                        bail!(NotReady, "unit at {:#x} is being pinned", cur)
                    }
                    Some((s, u)) if write && u.ro => {
                        bail!(
                            Access,
                            "[{:#x}, {:#x}) is read-only memory of the target: puts and atomics are refused",
                            s,
                            u.end
                        )
                    }
                    Some((s, _)) => s,
                    None => self.new_unit(cur, b, write, pinner)?,
                };
                let fresh = !self.units[&start].has(peer);
                if fresh {
                    self.update(start, |u| {
                        u.holders[peer / 64] |= 1 << (peer % 64);
                        u.remote += 1;
                    });
                    newly.push(start);
                }
                got.push(start);
                cur = self.units[&start].end;
            }
            Ok(())
        })();
        if let Err(e) = res {
            for s in newly {
                self.remote_release(peer, s);
            }
            self.trim(pinner);
            return Err(e);
        }
        self.check();
        Ok(got
            .into_iter()
            .map(|s| (s, self.units[&s].end, self.units[&s].ro))
            .collect())
    }

    /// A peer gives up its firehose on the unit at `start`. False if it held none
    /// there (a stale or bad release: ignored). Unreferenced units beyond the FIFO
    /// limit stay pinned until the caller's `trim` (a move handler answers first, so
    /// unpinning is off the requester's critical path).
    pub fn remote_release(&mut self, peer: usize, start: usize) -> bool {
        match self.units.get(&start) {
            Some(u) if peer < self.nodes && u.has(peer) => {}
            _ => return false,
        }
        self.update(start, |u| {
            u.holders[peer / 64] &= !(1 << (peer % 64));
            u.remote -= 1;
        });
        self.releases += 1;
        self.trimmed = false;
        true
    }

    /// `peer` is being told to forget its firehose on the unit at `start`
    /// (invalidation): drop that firehose now and keep the unit pinned with a local
    /// reference until the peer acknowledged. A move the peer sends after it forgot
    /// (frames may overtake the acknowledgement) then takes a *new* firehose, which
    /// the acknowledgement must not drop. `None` if the peer held none there.
    pub fn hand_back(&mut self, peer: usize, start: usize) -> Option<Held> {
        if !self.remote_release(peer, start) {
            return None;
        }
        self.update(start, |u| u.local += 1);
        Some((start, self.units[&start].gen))
    }

    /// Phase one of a local request for `[a, b)` (seed 000 Table 3, third row):
    /// reference the pinned units, reserve the missing ones (the caller pins them
    /// without the lock, then calls [`Self::local_finish`]). All or nothing: on
    /// `Busy`/`Full`/error nothing is held.
    pub fn local_begin(
        &mut self,
        a: usize,
        b: usize,
        pinner: &mut dyn Pinner,
    ) -> Result<LocalBegin> {
        let mut got: Vec<Held> = Vec::new();
        let mut pins: Vec<(usize, usize, u64)> = Vec::new();
        let mut cur = a;
        let budget = self.params.victim_units.max(1);
        let res: Result<Option<LocalBegin>> = (|| {
            while cur < b {
                let (_, ghi) = self.params.granule(cur);
                let pe = ghi.min(b);
                let start = match self.containing(cur) {
                    Some((_, u)) if u.pinning => return Ok(Some(LocalBegin::Busy)),
                    Some((s, _)) => s,
                    None => {
                        if self.counts.local_refd_units >= budget {
                            return Ok(Some(LocalBegin::Full));
                        }
                        let (s, e, g) = self.reserve_unit(cur, pe, false, pinner)?;
                        pins.push((s, e, g));
                        s
                    }
                };
                if self.units[&start].local == 0 && self.counts.local_refd_units >= budget {
                    return Ok(Some(LocalBegin::Full));
                }
                self.update(start, |u| u.local += 1);
                got.push((start, self.units[&start].gen));
                cur = self.units[&start].end;
            }
            Ok(None)
        })();
        match res {
            Ok(None) => {
                self.check();
                Ok(if pins.is_empty() {
                    LocalBegin::Done(got)
                } else {
                    LocalBegin::Pin { held: got, pins }
                })
            }
            other => {
                for h in got {
                    self.local_release(h, pinner);
                }
                for (s, _, g) in pins {
                    // Reservations never pinned: drop them.
                    if self.units.get(&s).is_some_and(|u| u.gen == g && u.pinning) {
                        self.unpin_unit(s, pinner);
                    }
                }
                other.map(|x| x.expect("early exits carry a verdict"))
            }
        }
    }

    /// Phase two: the pins of `pins` finished with `results`. On any failure every
    /// reference in `held` is dropped and the first error returned.
    pub fn local_finish(
        &mut self,
        held: Vec<Held>,
        pins: &[(usize, usize, u64)],
        results: Vec<Result<bool>>,
        pinner: &mut dyn Pinner,
    ) -> Result<Vec<Held>> {
        let mut first = Ok(());
        for (&(s, e, g), r) in pins.iter().zip(results) {
            if let Err(err) = self.finish_unit(s, e, g, r, pinner) {
                if first.is_ok() {
                    first = Err(err);
                }
            }
        }
        if let Err(err) = first {
            for h in held {
                self.local_release(h, pinner);
            }
            return Err(err);
        }
        self.check();
        Ok(held)
    }

    /// Reference `[a, b)` only if it is entirely pinned already (`try`); with
    /// `partial`, the longest pinned run starting at `a` (or any later pinned unit).
    pub fn local_try(
        &mut self,
        a: usize,
        b: usize,
        partial: bool,
    ) -> Option<(usize, usize, Vec<Held>)> {
        // Longest covered run within [a, b) (first run found).
        let mut runs: Vec<(usize, usize, Vec<usize>)> = Vec::new();
        let mut cur = a;
        let mut run: Option<(usize, usize, Vec<usize>)> = None;
        while cur < b {
            // A unit in phase one is not pinned yet: it cannot count as a hit.
            if let Some((s, u)) = self.containing(cur).filter(|(_, u)| !u.pinning) {
                let e = u.end;
                let r = run.get_or_insert((cur, cur, Vec::new()));
                r.1 = e.min(b);
                r.2.push(s);
                cur = e;
            } else {
                if let Some(r) = run.take() {
                    runs.push(r);
                }
                cur = match self.containing(cur) {
                    Some((_, u)) => u.end, // being pinned: skip it
                    None => match self.units.range(cur..b).next() {
                        Some((&s, _)) => s,
                        None => b,
                    },
                };
            }
        }
        if let Some(r) = run.take() {
            runs.push(r);
        }
        let mut best = runs.into_iter().max_by_key(|r| r.1 - r.0)?;
        if !partial && (best.0 != a || best.1 != b) {
            return None;
        }
        // New local references respect the local share too: a whole-range pin that
        // would exceed it fails; a partial pin keeps the longest part that fits.
        let allowance = self
            .params
            .victim_units
            .max(1)
            .saturating_sub(self.counts.local_refd_units);
        let fresh = |s: &usize| self.units[s].local == 0;
        if best.2.iter().filter(|s| fresh(s)).count() > allowance {
            if !partial {
                return None;
            }
            // Longest window of units with at most `allowance` fresh ones.
            let v = &best.2;
            let (mut lo, mut nf, mut win) = (0, 0, None::<(usize, usize)>);
            let len = |i: usize, j: usize| self.units[&v[j]].end.min(b) - v[i].max(a);
            for hi in 0..v.len() {
                nf += fresh(&v[hi]) as usize;
                while nf > allowance {
                    nf -= fresh(&v[lo]) as usize;
                    lo += 1;
                }
                if lo <= hi && win.map_or(true, |(i, j)| len(lo, hi) > len(i, j)) {
                    win = Some((lo, hi));
                }
            }
            let (i, j) = win?;
            let units = v[i..=j].to_vec();
            best = (v[i].max(a), self.units[&v[j]].end.min(b), units);
        }
        let mut held = Vec::new();
        for s in best.2 {
            self.update(s, |u| u.local += 1);
            held.push((s, self.units[&s].gen));
        }
        Some((best.0, best.1, held))
    }

    /// Drop a local reference (stale ones, from before an invalidation, are ignored).
    pub fn local_release(&mut self, h: Held, pinner: &mut dyn Pinner) {
        match self.units.get(&h.0) {
            Some(u) if u.gen == h.1 && u.local > 0 => {}
            _ => return,
        }
        self.update(h.0, |u| u.local -= 1);
        self.releases += 1;
        self.trim(pinner);
    }

    /// Unpin every unit overlapping `[a, b)` regardless of references; returns each
    /// removed unit's bounds and holders (the caller must have them stop first, or
    /// tell them now and wait before the memory is reused).
    pub fn invalidate(
        &mut self,
        a: usize,
        b: usize,
        pinner: &mut dyn Pinner,
    ) -> Vec<(usize, usize, Vec<usize>)> {
        let starts: Vec<usize> = self
            .units
            .range(..b)
            .filter(|(_, u)| u.end > a)
            .map(|(&s, _)| s)
            .collect();
        let mut out = Vec::new();
        for s in starts {
            let holders = self.units[&s].holder_ranks();
            let u = self.unpin_unit(s, pinner);
            out.push((s, u.end, holders));
        }
        self.check();
        out
    }

    /// Unpin everything (finalize).
    pub fn clear(&mut self, pinner: &mut dyn Pinner) {
        let starts: Vec<usize> = self.units.keys().copied().collect();
        for s in starts {
            self.unpin_unit(s, pinner);
        }
        self.fifo.clear();
    }

    /// Units with their state, for tests and validation.
    pub fn units(&self) -> impl Iterator<Item = (usize, &LocalUnit)> {
        self.units.iter().map(|(&s, u)| (s, u))
    }

    /// Verify the invariants (debug builds; tests call it directly).
    pub fn check(&self) {
        if cfg!(debug_assertions) {
            self.validate().expect("local firehose table invariant");
        }
    }

    pub fn validate(&self) -> std::result::Result<(), String> {
        let mut prev_end = 0usize;
        let (mut r, mut l, mut i, mut bytes) = (0, 0, 0, 0);
        for (&s, u) in &self.units {
            if s < prev_end || u.end <= s {
                return Err(format!("unit [{s:#x},{:#x}) overlaps or is empty", u.end));
            }
            let (glo, ghi) = self.params.granule(s);
            if u.end > ghi || s < glo {
                return Err(format!("unit [{s:#x},{:#x}) crosses a granule", u.end));
            }
            let pop: u32 = u.holders.iter().map(|w| w.count_ones()).sum();
            if pop != u.remote {
                return Err(format!("unit {s:#x}: remote {} != holders {pop}", u.remote));
            }
            match u.usage() {
                Use::Remote => r += 1,
                Use::LocalOnly => l += 1,
                Use::Idle => i += 1,
            }
            bytes += u.end - s;
            prev_end = u.end;
        }
        let c = &self.counts;
        let lr = self.units.values().filter(|u| u.local > 0).count();
        if lr != c.local_refd_units {
            return Err(format!(
                "{lr} units with local references, counter {}",
                c.local_refd_units
            ));
        }
        if (r, l, i, bytes) != (c.remote_units, c.local_only_units, c.idle_units, c.bytes) {
            return Err(format!(
                "counts drifted: table ({r},{l},{i},{bytes}) vs counters ({},{},{},{})",
                c.remote_units, c.local_only_units, c.idle_units, c.bytes
            ));
        }
        if self.units.len() > self.params.capacity() {
            return Err(format!(
                "{} units pinned, capacity {}",
                self.units.len(),
                self.params.capacity()
            ));
        }
        if self.trimmed && c.idle_units > self.params.victim_keep() {
            return Err(format!(
                "{} idle units kept, FIFO limit {}",
                c.idle_units,
                self.params.victim_keep()
            ));
        }
        Ok(())
    }
}
