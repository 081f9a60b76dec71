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
use std::collections::BTreeMap;

/// State of a remote firehose entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RState {
    /// A move for this range is in flight (the id of that move).
    Pending(u64),
    /// The target pinned it for us: one-sided access allowed.
    Live,
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
    queued: Option<u64>,
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

#[derive(Default)]
pub struct PeerTable {
    /// start -> entry. Invariant: non-overlapping.
    entries: BTreeMap<usize, RemoteEntry>,
    fifo: VictimFifo,
    /// Live + pending entries: the firehoses in use out of f.
    pub used: usize,
    /// Live entries with no references (the remote victim FIFO's valid content).
    pub idle: usize,
    /// Releases decided but not yet sent (they ride on the next move).
    pub deferred: Vec<usize>,
    next_gen: u64,
    /// Most recent hit entry (start, end, gen): checked before the tree.
    recent: (usize, usize),
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

    /// Fast path for a request inside one live entry: take a reference.
    #[inline]
    pub fn hit_one(&mut self, addr: usize, end: usize) -> Option<Held> {
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

    /// Take the least recently used unreferenced firehose out of the table (to be
    /// released at the target); `None` if every firehose is referenced or pending.
    pub fn evict_one(&mut self) -> Option<usize> {
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
            self.remove(s);
            return Some(s);
        }
        None
    }

    /// Plan a request for `[addr, addr+len)` (seed 000 Fig. 2 step 1): a hit takes
    /// references; a miss reserves firehoses for the missing pieces (replacing idle
    /// ones when all f are in use) and returns the move to send as move `id`.
    /// `always_move`: the rendezvous baselines ask the target on every request.
    pub fn plan(
        &mut self,
        p: &Params,
        addr: usize,
        len: usize,
        id: u64,
        always_move: bool,
    ) -> Plan {
        let end = addr + len;
        let mut missing: Vec<(usize, usize)> = Vec::new();
        let mut waits: Vec<u64> = Vec::new();
        let mut live: Vec<usize> = Vec::new();
        for (pa, pb) in p.pieces(addr, len) {
            let mut cur = pa;
            while cur < pb {
                match self.containing(cur) {
                    Some((s, e)) => {
                        match e.state {
                            RState::Live => live.push(s),
                            RState::Pending(m) => {
                                if !waits.contains(&m) {
                                    waits.push(m)
                                }
                            }
                        }
                        cur = e.end.min(pb);
                    }
                    None => {
                        let next = self.entries.range(cur..pb).next().map_or(pb, |(&s, _)| s);
                        missing.push((cur, next));
                        cur = next;
                    }
                }
            }
        }
        debug_assert!(missing.iter().all(|&(a, b)| a < b && a >= addr && b <= end));
        if always_move && !waits.is_empty() {
            return Plan::Wait(waits);
        }
        if missing.is_empty() && !always_move {
            if !waits.is_empty() {
                return Plan::Wait(waits);
            }
            live.dedup();
            return Plan::Hit(live.into_iter().map(|s| self.take_ref(s)).collect());
        }
        // Reserve: unused firehoses first (before steady state), then replacements —
        // never the live firehoses this very request is about to use (they are
        // referenced meanwhile; evicting them would make the request chase its own
        // tail forever).
        let need = missing.len();
        live.dedup();
        let guard: Vec<Held> = live.iter().map(|&s| self.take_ref(s)).collect();
        let mut releases = std::mem::take(&mut self.deferred);
        let mut short = false;
        while self.used + need > p.f {
            match self.evict_one() {
                Some(s) => releases.push(s),
                None => {
                    short = true;
                    break;
                }
            }
        }
        for h in guard {
            self.release(h);
        }
        if short {
            self.deferred = releases;
            return Plan::NeedReplacements;
        }
        // The rendezvous baselines ask for the whole range every time (the parts
        // already held are answered idempotently by the target).
        let pins = if always_move {
            p.pieces(addr, len).collect()
        } else {
            missing.clone()
        };
        Plan::Move { releases, pins }.with_placeholders(self, &missing, id)
    }

    /// The target answered move `id`: drop its placeholders and enter the units it
    /// pinned for us (already-known units are not entered twice), and the registered
    /// regions it reported (`prepinned`). Units of other moves' placeholders that this
    /// answer covers replace those placeholders.
    pub fn complete_move(&mut self, id: u64, units: &[(usize, usize, bool)]) {
        let ph: Vec<usize> = self
            .entries
            .iter()
            .filter(|(_, e)| e.state == RState::Pending(id))
            .map(|(&s, _)| s)
            .collect();
        for s in ph {
            self.remove(s);
        }
        for &(s, e, pre) in units {
            if let Some(x) = self.entries.get(&s) {
                if x.end == e && x.state == RState::Live && x.prepinned == pre {
                    continue;
                }
            }
            let overlapping: Vec<usize> = self
                .entries
                .range(..e)
                .filter(|(_, x)| x.end > s)
                .map(|(&k, _)| k)
                .collect();
            let mut keep_out = false;
            for k in overlapping {
                let x = &self.entries[&k];
                if x.state == RState::Live && x.refs > 0 {
                    // Should not happen (units at the target never overlap); keep the
                    // referenced entry and skip the new one.
                    debug_assert!(false, "new unit overlaps a referenced firehose");
                    keep_out = true;
                } else if x.state == RState::Live {
                    let old = self.remove(k).expect("present");
                    if !old.prepinned {
                        self.deferred.push(k);
                    }
                } else {
                    self.remove(k);
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
                    queued,
                },
            );
            if !pre {
                self.used += 1;
                self.idle += 1;
            }
        }
    }

    /// A move failed: drop its placeholders.
    pub fn abort_move(&mut self, id: u64) {
        self.complete_move(id, &[]);
    }

    /// The target invalidated `[a, b)`: forget every entry overlapping it (the
    /// caller completes outstanding operations to the target before acknowledging).
    pub fn invalidate(&mut self, a: usize, b: usize) -> usize {
        let ks: Vec<usize> = self
            .entries
            .range(..b)
            .filter(|(_, x)| x.end > a && x.state == RState::Live)
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

impl Plan {
    fn with_placeholders(self, t: &mut PeerTable, missing: &[(usize, usize)], id: u64) -> Plan {
        for &(a, b) in missing {
            t.entries.insert(
                a,
                RemoteEntry {
                    end: b,
                    state: RState::Pending(id),
                    refs: 0,
                    gen: 0,
                    prepinned: false,
                    queued: None,
                },
            );
            t.used += 1;
        }
        self
    }
}
