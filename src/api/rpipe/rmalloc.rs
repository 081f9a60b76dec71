//! The rmalloc allocator of one pipe direction (seed 003, "rmalloc"): the writer
//! allocates space in the *reader's* memory (its inbox) without asking it. Not the
//! library heap (`api::heap`, `fh_malloc`) nor the node-shared mapping
//! (`conduit::mpi::shm`). This module is the allocator
//! alone — pure bookkeeping over offsets `[0, size)`, no memory and no messages.
//!
//! Policies (seed 003's "allocation heuristics"):
//! - **next-fit**: the first free block at or after the end of the previous
//!   allocation, wrapping around — the cheapest, and the one seed 003 pairs with
//!   deferred synchronisation (frees are batched back to the writer);
//! - **first-fit**: the lowest-addressed block that fits;
//! - **best-fit**: the smallest block that fits (immediate synchronisation);
//! - **worst-fit**: the largest block.
//!
//! Guarantees (checked by [`Rmalloc::validate`]): allocations and free blocks
//! never overlap and together tile `[0, size)`; free blocks are coalesced (no two
//! are adjacent); every offset handed out is a multiple of `align`; a free of an
//! offset that is not a live allocation is refused (double free, stray offset),
//! never corrupting the lists.
//!
//! Each live allocation carries a tag of the caller's (`Rmalloc<T>`; `()` by
//! default): the pipe keeps its per-allocation record there, so one map, not two,
//! is touched per allocation and per free.

use super::offmap::OffMap;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

/// Allocation policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    NextFit,
    FirstFit,
    BestFit,
    WorstFit,
}

/// Why a free was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// Not the start of a live allocation (never allocated, or already freed).
    NotAllocated,
}

#[derive(Debug)]
pub struct Rmalloc<T = ()> {
    size: usize,
    align: usize,
    policy: Policy,
    /// Free blocks: start -> length. Invariant: coalesced, disjoint from `live`.
    free: BTreeMap<usize, usize>,
    /// The same blocks by (length, start), kept for best/worst fit only (next and
    /// first fit never need it on the allocation path).
    by_size: BTreeSet<(usize, usize)>,
    /// Live allocations: start -> (length rounded to `align`, the caller's tag).
    live: OffMap<(usize, T)>,
    /// Next-fit's roving pointer: where the previous allocation ended.
    cursor: usize,
    /// Next fit's run `[start, end)`: the rest of the free block the last allocation
    /// came from, kept out of `free` so the next allocation that fits is one bump of
    /// `start` (next fit hands out space in address order, so in steady state every
    /// allocation comes from the run and the maps change only when it is spent).
    /// Free space, counted in `free_bytes`; it may border free blocks of `free`
    /// (freed after it was cut), which are merged with it when it ends. Invariant:
    /// empty (`start == end`) unless the policy is next fit; `cursor == start`
    /// while it is not empty.
    run: (usize, usize),
    free_bytes: usize,
}

impl Rmalloc {
    /// A heap of `size` bytes handing out offsets aligned to `align` (a power of
    /// two); `size` is rounded down to a multiple of `align`. Allocations untagged.
    pub fn new(size: usize, align: usize, policy: Policy) -> Rmalloc {
        Rmalloc::tagged(size, align, policy)
    }

    /// Allocate `len` bytes; `None` if no free block is large enough (the caller
    /// waits for frees: flow control).
    pub fn alloc(&mut self, len: usize) -> Option<usize> {
        self.alloc_tagged(len, ())
    }
}

impl<T> Rmalloc<T> {
    /// As [`Rmalloc::new`], for allocations that carry a `T`.
    pub fn tagged(size: usize, align: usize, policy: Policy) -> Rmalloc<T> {
        assert!(align.is_power_of_two());
        let size = size & !(align - 1);
        let mut h = Rmalloc {
            size,
            align,
            policy,
            free: BTreeMap::new(),
            by_size: BTreeSet::new(),
            live: OffMap::default(),
            cursor: 0,
            run: (0, 0),
            free_bytes: 0,
        };
        if size > 0 {
            h.insert_free(0, size);
        }
        h
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn free_bytes(&self) -> usize {
        self.free_bytes
    }

    /// The largest allocation that would succeed now.
    pub fn largest_free(&self) -> usize {
        if self.sized() {
            self.by_size.last().map_or(0, |&(l, _)| l)
        } else {
            let blocks = self.free.values().copied().max().unwrap_or(0);
            blocks.max(self.run_merged())
        }
    }

    /// The run's length with the free blocks that border it (0 without a run).
    fn run_merged(&self) -> usize {
        let (s, e) = self.run;
        if e == s {
            return 0;
        }
        let before = self.free.range(..s).next_back();
        let before = before
            .filter(|(&ps, &pl)| ps + pl == s)
            .map_or(0, |(_, &l)| l);
        before + (e - s) + self.free.get(&e).copied().unwrap_or(0)
    }

    /// External fragmentation: 1 − largest free block / free bytes (0 when the
    /// free space is one block, or none).
    pub fn fragmentation(&self) -> f64 {
        if self.free_bytes == 0 {
            0.0
        } else {
            1.0 - self.largest_free() as f64 / self.free_bytes as f64
        }
    }

    /// Bytes an allocation of `len` really takes (at least one `align` unit).
    pub fn rounded(&self, len: usize) -> Option<usize> {
        let l = len.max(1).checked_add(self.align - 1)? & !(self.align - 1);
        Some(l)
    }

    /// Length of the live allocation at `off`.
    pub fn len_of(&self, off: usize) -> Option<usize> {
        self.live.get(&off).map(|&(l, _)| l)
    }

    /// The tag of the live allocation at `off`.
    pub fn tag(&self, off: usize) -> Option<&T> {
        self.live.get(&off).map(|(_, t)| t)
    }

    /// The tag of the live allocation at `off`, to change it.
    pub fn tag_mut(&mut self, off: usize) -> Option<&mut T> {
        self.live.get_mut(&off).map(|(_, t)| t)
    }

    /// Live allocations.
    pub fn allocations(&self) -> usize {
        self.live.len()
    }

    /// Whether the by-size index is kept.
    fn sized(&self) -> bool {
        matches!(self.policy, Policy::BestFit | Policy::WorstFit)
    }

    fn insert_free(&mut self, s: usize, l: usize) {
        debug_assert!(l > 0);
        self.free.insert(s, l);
        if self.sized() {
            self.by_size.insert((l, s));
        }
        self.free_bytes += l;
    }

    fn remove_free(&mut self, s: usize) -> usize {
        let l = self.free.remove(&s).expect("free block");
        if self.sized() {
            self.by_size.remove(&(l, s));
        }
        self.free_bytes -= l;
        l
    }

    /// The free block the policy picks for `need` bytes.
    fn pick(&self, need: usize) -> Option<usize> {
        match self.policy {
            Policy::FirstFit => self.free.iter().find(|(_, &l)| l >= need).map(|(&s, _)| s),
            Policy::BestFit => self.by_size.range((need, 0)..).next().map(|&(_, s)| s),
            Policy::WorstFit => self
                .by_size
                .last()
                .filter(|&&(l, _)| l >= need)
                .map(|&(_, s)| s),
            Policy::NextFit => {
                // A block containing the cursor counts from the cursor on.
                if let Some((&s, &l)) = self.free.range(..=self.cursor).next_back() {
                    if s + l > self.cursor && s + l - self.cursor >= need {
                        return Some(self.cursor);
                    }
                }
                self.free
                    .range(self.cursor + 1..)
                    .chain(self.free.range(..=self.cursor))
                    .find(|(_, &l)| l >= need)
                    .map(|(&s, _)| s)
            }
        }
    }

    /// Allocate `len` bytes tagged `tag`; `None` if no free block is large enough
    /// (the caller waits for frees: flow control).
    pub fn alloc_tagged(&mut self, len: usize, tag: T) -> Option<usize> {
        let need = self.rounded(len)?;
        let next_fit = self.policy == Policy::NextFit;
        if next_fit {
            if self.run.1 - self.run.0 >= need {
                return Some(self.take_run(need, tag));
            }
            self.end_run();
        }
        let at = self.pick(need)?;
        // `at` lies in the free block starting at or before it.
        let (&s, &l) = self.free.range(..=at).next_back().expect("block");
        debug_assert!(s <= at && at + need <= s + l);
        self.remove_free(s);
        if at > s {
            self.insert_free(s, at - s);
        }
        if next_fit {
            // The rest of the block becomes the run, this allocation its first bump.
            self.run = (at, s + l);
            self.free_bytes += s + l - at;
            return Some(self.take_run(need, tag));
        }
        if at + need < s + l {
            self.insert_free(at + need, s + l - at - need);
        }
        self.live.insert(at, (need, tag));
        self.cursor = (at + need) % self.size.max(1);
        self.check();
        Some(at)
    }

    /// The next `need` bytes of the run (it has them).
    fn take_run(&mut self, need: usize, tag: T) -> usize {
        let at = self.run.0;
        debug_assert!(self.run.1 - at >= need);
        self.run.0 += need;
        self.free_bytes -= need;
        self.live.insert(at, (need, tag));
        self.cursor = self.run.0 % self.size.max(1);
        self.check();
        at
    }

    /// Give what is left of the run back to the free blocks.
    fn end_run(&mut self) {
        let (s, e) = std::mem::take(&mut self.run);
        if e > s {
            self.free_bytes -= e - s;
            self.insert_coalesced(s, e);
        }
    }

    /// Free the allocation starting at `off`, coalescing with its neighbours.
    /// Returns its length.
    pub fn free(&mut self, off: usize) -> Result<usize, FreeError> {
        let (l, _) = self.live.remove(&off).ok_or(FreeError::NotAllocated)?;
        self.insert_coalesced(off, off + l);
        self.check();
        Ok(l)
    }

    /// Free many allocations at once, in any order (cheapest ascending, as a writer
    /// learns them from the reader's free bitmap): neighbours freed together become
    /// one free block before they reach the free map. Only allocations whose tag
    /// `accept`s are freed; `refused` gets every other offset, and every offset that
    /// is not a live allocation (nothing is changed for them).
    pub fn free_batch(
        &mut self,
        offs: impl IntoIterator<Item = usize>,
        mut accept: impl FnMut(&T) -> bool,
        mut refused: impl FnMut(usize),
    ) {
        let mut pending: Option<(usize, usize)> = None;
        for off in offs {
            let l = match self.live.entry(off) {
                Entry::Occupied(e) if accept(&e.get().1) => e.remove().0,
                _ => {
                    refused(off);
                    continue;
                }
            };
            pending = match pending {
                Some((s, e)) if e == off => Some((s, off + l)),
                other => {
                    if let Some((s, e)) = other {
                        self.insert_coalesced(s, e);
                    }
                    Some((off, off + l))
                }
            };
        }
        if let Some((s, e)) = pending {
            self.insert_coalesced(s, e);
        }
        self.check();
    }

    /// Make `[s, e)` a free block, merged with the free blocks that border it.
    fn insert_coalesced(&mut self, mut s: usize, mut e: usize) {
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            if ps + pl == s {
                self.remove_free(ps);
                s = ps;
            }
        }
        if let Some(&nl) = self.free.get(&e) {
            self.remove_free(e);
            e += nl;
        }
        self.insert_free(s, e - s);
    }

    fn check(&self) {
        if cfg!(debug_assertions) {
            self.validate().expect("remote heap invariant");
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let (rs, re) = self.run;
        if re > rs && (self.policy != Policy::NextFit || self.cursor != rs) {
            return Err(format!("run [{rs:#x}, {re:#x}) outside next fit's cursor"));
        }
        // (start, length, free block of `free`); the run is free space that may
        // border free blocks, so it never counts as one here.
        let mut blocks: Vec<(usize, usize, bool)> = self
            .free
            .iter()
            .map(|(&s, &l)| (s, l, true))
            .chain(self.live.iter().map(|(&s, &(l, _))| (s, l, false)))
            .chain((re > rs).then_some((rs, re - rs, false)))
            .collect();
        blocks.sort_unstable();
        let mut at = 0;
        let mut prev_free = false;
        for &(s, l, is_free) in &blocks {
            if s != at {
                return Err(format!("gap or overlap at {s:#x} (expected {at:#x})"));
            }
            if s % self.align != 0 || l % self.align != 0 || l == 0 {
                return Err(format!("block {s:#x}+{l:#x} not aligned to {}", self.align));
            }
            if is_free && prev_free {
                return Err(format!("free block at {s:#x} not coalesced"));
            }
            prev_free = is_free;
            at = s + l;
        }
        if at != self.size {
            return Err(format!("blocks end at {at:#x}, heap size {:#x}", self.size));
        }
        let fb = self.free.values().sum::<usize>() + (re - rs);
        if fb != self.free_bytes || (self.sized() && self.by_size.len() != self.free.len()) {
            return Err("free-space counters drifted".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_pick_the_block_their_rule_names() {
        // Free blocks of 4, 1 and 2 units (units of 8 bytes) after these frees.
        let layout = |p| {
            let mut h = Rmalloc::new(8 * 10, 8, p);
            let a: Vec<usize> = (0..10).map(|_| h.alloc(8).unwrap()).collect();
            for &i in &[0, 1, 2, 3, 5, 7, 8] {
                h.free(a[i]).unwrap();
            }
            h
        };
        // Free: [0,32) 4 units, [40,48) 1 unit, [56,72) 2 units.
        assert_eq!(layout(Policy::FirstFit).alloc(8), Some(0));
        assert_eq!(layout(Policy::BestFit).alloc(8), Some(40));
        assert_eq!(layout(Policy::BestFit).alloc(16), Some(56));
        assert_eq!(layout(Policy::WorstFit).alloc(8), Some(0));
        let mut n = layout(Policy::NextFit);
        // The cursor is after the last allocation (offset 80 wraps to 0).
        assert_eq!(n.alloc(8), Some(0));
        assert_eq!(n.alloc(16), Some(8));
        // [24, 32) is too small: on to the next block that fits.
        assert_eq!(n.alloc(16), Some(56));
        // Nothing of 16 bytes is left; 8 bytes wrap around to [24, 32).
        assert_eq!(n.alloc(16), None);
        assert_eq!(n.alloc(8), Some(24));
    }

    #[test]
    fn full_heap_refuses_then_recovers_and_bad_frees_are_refused() {
        let mut h = Rmalloc::new(64, 8, Policy::NextFit);
        let a = h.alloc(40).unwrap();
        let b = h.alloc(24).unwrap();
        assert_eq!(h.alloc(1), None);
        assert_eq!(h.free(a + 8), Err(FreeError::NotAllocated));
        assert_eq!(h.free(a), Ok(40));
        assert_eq!(h.free(a), Err(FreeError::NotAllocated));
        assert_eq!(h.free(b), Ok(24));
        assert_eq!(h.largest_free(), 64);
        assert_eq!(h.fragmentation(), 0.0);
    }

    #[test]
    fn next_fit_run_merges_with_frees_that_border_it() {
        // Units of 8 bytes, 8 units: a, b from the run, then the run is [16, 64).
        let mut h = Rmalloc::new(64, 8, Policy::NextFit);
        let a = h.alloc(8).unwrap();
        let b = h.alloc(8).unwrap();
        assert_eq!((a, b), (0, 8));
        // b borders the run: freed, it is free space of one block with it.
        h.free(b).unwrap();
        assert_eq!(h.largest_free(), 56);
        assert_eq!(h.free_bytes(), 56);
        // Fill the run exactly, then free everything: one block again.
        let c = h.alloc(48).unwrap();
        assert_eq!(c, 16);
        assert_eq!(h.largest_free(), 8);
        // Next fit goes on from the cursor (64 wraps to 0): the freed [8, 16).
        assert_eq!(h.alloc(8), Some(8));
        for x in [a, 8, c] {
            h.free(x).unwrap();
        }
        assert_eq!(h.largest_free(), 64);
        h.validate().unwrap();
        // A request larger than the run but within the run and the free block
        // before it: the merged block, where next fit without the run puts it.
        let mut h = Rmalloc::new(64, 8, Policy::NextFit);
        let x = h.alloc(8).unwrap();
        let y = h.alloc(8).unwrap();
        let z = h.alloc(8).unwrap();
        assert_eq!((x, y, z), (0, 8, 16));
        h.free(z).unwrap();
        assert_eq!(h.largest_free(), 48);
        assert_eq!(h.alloc(48), Some(16));
        assert_eq!(h.alloc(8), None);
        h.validate().unwrap();
    }

    #[test]
    fn a_batch_of_frees_leaves_the_heap_as_single_frees_do() {
        for p in [
            Policy::NextFit,
            Policy::FirstFit,
            Policy::BestFit,
            Policy::WorstFit,
        ] {
            let (mut one, mut batch) = (Rmalloc::new(80, 8, p), Rmalloc::new(80, 8, p));
            for h in [&mut one, &mut batch] {
                for _ in 0..10 {
                    h.alloc(8).unwrap();
                }
            }
            let offs = [0, 8, 16, 40, 56, 48, 72];
            for &o in &offs {
                one.free(o).unwrap();
            }
            let mut refused = Vec::new();
            batch.free_batch(
                offs.iter().copied().chain([12, 8]),
                |_| true,
                |o| refused.push(o),
            );
            assert_eq!(refused, vec![12, 8], "{p:?}");
            batch.validate().unwrap();
            assert_eq!(batch.free_bytes(), one.free_bytes());
            assert_eq!(batch.largest_free(), one.largest_free());
            for len in [24, 8, 8, 16] {
                assert_eq!(batch.alloc(len), one.alloc(len), "{p:?}");
            }
        }
    }
}
