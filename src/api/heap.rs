//! The library heap allocator behind `fh_malloc`/`fh_free`, and the segments the
//! heap grows by.
//!
//! Guarantees: allocations are 64-byte aligned (cache line; fine for atomics), lie
//! inside the always-registered heap or one of its segments, never overlap; freeing
//! coalesces neighbours; freeing something that is not a live allocation is refused,
//! not corrupting. Placement over an address-ordered free list, by size: a block
//! smaller than [`LARGE`] takes the lowest free block that fits (first fit), a larger
//! one the highest, carved from its top end. Small blocks made while large ones come
//! and go (a pipe's ring, a registration table, a user's buffer) then collect at the
//! bottom instead of landing in the hole a large block left, where they would split
//! the space the next large block needs: a heap with room for two large blocks in
//! total must not refuse the second because a few small ones sit between the halves.
//!
//! Segments (issue 18): when the first region (`FH_HEAP_SIZE`) has no room, `fh_malloc`
//! maps a new one of at least that size and registers it as `fh_mem_register` would
//! (`CtxInner::grow_heap`), so a peer finds it the way it finds any registration: in
//! this rank's registration table, read one-sidedly, without this rank's CPU. The
//! conduit provides the memory (`Conduit::heap_segment`). On the MPI conduit, node
//! peers map it on their first access, and from then on their puts and gets are
//! memory copies (`conduit/mpi/segs.rs`). Segments live until the context is
//! finalized.

use crate::bail;
use crate::runtime::error::Result;
use crate::runtime::os::Mapping;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};

pub const ALIGN: usize = 64;

/// Blocks of this many bytes or more are placed from the top of the heap.
const LARGE: usize = 256 << 10;

struct Inner {
    /// Free blocks: offset -> length. Invariant: disjoint, non-adjacent (coalesced).
    free: BTreeMap<usize, usize>,
    /// Live allocations: offset -> length.
    live: HashMap<usize, usize>,
    in_use: usize,
}

pub struct Heap {
    base: usize,
    len: usize,
    inner: Mutex<Inner>,
}

impl Heap {
    pub fn new(base: usize, len: usize) -> Heap {
        debug_assert_eq!(base % ALIGN, 0);
        let len = len - len % ALIGN;
        let mut free = BTreeMap::new();
        free.insert(0, len);
        Heap {
            base,
            len,
            inner: Mutex::new(Inner {
                free,
                live: HashMap::new(),
                in_use: 0,
            }),
        }
    }

    pub fn alloc(&self, nbytes: usize) -> Result<usize> {
        if nbytes == 0 {
            bail!(InvalidArg, "nbytes is 0");
        }
        if nbytes > self.len {
            bail!(
                NoMemory,
                "{} bytes requested, the heap is {} bytes (raise FH_HEAP_SIZE)",
                nbytes,
                self.len
            );
        }
        let need = nbytes.div_ceil(ALIGN) * ALIGN;
        let mut g = self.inner.lock();
        let fits = |(_, &l): &(&usize, &usize)| l >= need;
        let found = match need >= LARGE {
            false => g.free.iter().find(fits),
            true => g.free.iter().rev().find(fits),
        };
        let Some((&off, &flen)) = found else {
            // Say how the free space lies: first fit can leave it in pieces that are
            // each too short while their sum is not.
            let largest = g.free.values().copied().max().unwrap_or(0);
            bail!(
                NoMemory,
                "no free block of {} bytes in the {}-byte heap ({} in use, {} free in {} \
                 piece(s), the largest {} bytes; raise FH_HEAP_SIZE)",
                need,
                self.len,
                g.in_use,
                self.len - g.in_use,
                g.free.len(),
                largest
            );
        };
        // A small block takes the free block's start, a large one its end.
        let at = match need >= LARGE {
            false => {
                g.free.remove(&off);
                if flen > need {
                    g.free.insert(off + need, flen - need);
                }
                off
            }
            true if flen > need => {
                g.free.insert(off, flen - need);
                off + flen - need
            }
            true => {
                g.free.remove(&off);
                off
            }
        };
        g.live.insert(at, need);
        g.in_use += need;
        Ok(self.base + at)
    }

    pub fn free(&self, addr: usize) -> Result<()> {
        if addr < self.base || addr >= self.base + self.len {
            bail!(InvalidArg, "{:#x} is not in this context's heap", addr);
        }
        let off = addr - self.base;
        let mut g = self.inner.lock();
        let Some(len) = g.live.remove(&off) else {
            bail!(
                InvalidArg,
                "{:#x} is not a live fh_malloc allocation (double free?)",
                addr
            );
        };
        g.in_use -= len;
        let (mut start, mut end) = (off, off + len);
        if let Some((&ps, &pl)) = g.free.range(..start).next_back() {
            if ps + pl == start {
                g.free.remove(&ps);
                start = ps;
            }
        }
        if let Some(&nl) = g.free.get(&end) {
            g.free.remove(&end);
            end += nl;
        }
        g.free.insert(start, end - start);
        Ok(())
    }

    pub fn in_use(&self) -> usize {
        self.inner.lock().in_use
    }

    /// Bytes this heap manages.
    pub fn size(&self) -> usize {
        self.len
    }

    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.base + self.len)
    }
}

/// The heap's further segments. Invariant: disjoint mappings, each registered with
/// the conduit and in the registration table for as long as it is in the list.
#[derive(Default)]
pub struct Segments {
    list: RwLock<Vec<(Heap, Mapping)>>,
    /// Held while a segment is made, so two threads that both miss make one.
    pub grow: Mutex<()>,
}

impl Segments {
    /// A block from an existing segment, if one has room.
    pub fn alloc(&self, nbytes: usize) -> Option<usize> {
        self.list
            .read()
            .iter()
            .find_map(|(h, _)| h.alloc(nbytes).ok())
    }

    /// Take `map` (registered by the caller) as a new segment; allocate from it.
    pub fn add(&self, map: Mapping, nbytes: usize) -> Result<usize> {
        let h = Heap::new(map.addr(), map.len());
        let a = h.alloc(nbytes);
        self.list.write().push((h, map));
        a
    }

    /// Whether `[start, end)` overlaps a segment.
    pub fn overlaps(&self, start: usize, end: usize) -> bool {
        self.list
            .read()
            .iter()
            .any(|(_, m)| start < m.addr() + m.len() && m.addr() < end)
    }

    /// Free `addr` if a segment holds it (`None`: no segment does).
    pub fn free(&self, addr: usize) -> Option<Result<()>> {
        let g = self.list.read();
        g.iter()
            .find(|(h, _)| h.contains(addr, 1))
            .map(|(h, _)| h.free(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn alloc_free_coalesce() {
        let h = Heap::new(4096, 1024);
        let a = h.alloc(100).unwrap();
        let b = h.alloc(64).unwrap();
        assert_eq!(a % ALIGN, 0);
        assert_eq!(b, a + 128);
        assert!(h.alloc(0).is_err());
        assert!(h.alloc(2000).is_err());
        h.free(a).unwrap();
        assert!(h.free(a).is_err(), "double free refused");
        assert!(h.free(b + 1).is_err());
        h.free(b).unwrap();
        assert_eq!(h.in_use(), 0);
        assert_eq!(h.alloc(1024).unwrap(), 4096, "fully coalesced");
    }

    /// A refusal says how the free space lies when its pieces are each too short.
    #[test]
    fn refusal_names_the_largest_free_piece() {
        let h = Heap::new(4096, 1024);
        let a = h.alloc(320).unwrap();
        let _b = h.alloc(64).unwrap();
        h.free(a).unwrap();
        // Free: 320 bytes before the live block, 640 after it.
        let e = h.alloc(900).unwrap_err();
        assert!(
            e.msg
                .contains("64 in use, 960 free in 2 piece(s), the largest 640 bytes"),
            "{}",
            e.msg
        );
    }

    /// A small block made while the middle one of three large blocks is free lands
    /// below them all, so the two large blocks that fit in the total fit again once
    /// the others are gone (first fit put it in the hole and left two pieces each a
    /// little short).
    #[test]
    fn small_blocks_do_not_split_the_room_of_large_ones() {
        const MIB: usize = 1 << 20;
        let h = Heap::new(1 << 30, 32 * MIB);
        let (a, b, c) = (
            h.alloc(10 * MIB).unwrap(),
            h.alloc(10 * MIB).unwrap(),
            h.alloc(10 * MIB).unwrap(),
        );
        assert_eq!(
            (a, b, c),
            (h.base + 22 * MIB, h.base + 12 * MIB, h.base + 2 * MIB)
        );
        h.free(b).unwrap();
        let s = h.alloc(4096).unwrap();
        assert_eq!(s, h.base, "a small block goes to the bottom");
        h.free(a).unwrap();
        h.free(c).unwrap();
        let (x, y) = (h.alloc(15 * MIB).unwrap(), h.alloc(15 * MIB).unwrap());
        assert!(x.max(y) >= x.min(y) + 15 * MIB && x.min(y) >= s + 4096);
        assert!(h.alloc(2 * MIB).is_err(), "30 MiB + 4 KiB of 32 MiB in use");
        assert!(h.alloc(MIB).is_ok(), "the rest is one piece");
    }

    #[test]
    fn segments_allocate_free_and_refuse_strangers() {
        let s = Segments::default();
        assert!(s.alloc(64).is_none(), "no segment yet");
        let a = s.add(Mapping::new(1 << 16).unwrap(), 40000).unwrap();
        let b = s.alloc(20000).unwrap();
        assert!(b >= a + 40000, "blocks of one segment are disjoint");
        assert!(s.alloc(20000).is_none(), "the segment is full");
        assert!(
            s.free(a + 64).unwrap().is_err(),
            "an inner address is refused"
        );
        assert!(s.free(1).is_none(), "an address of no segment");
        assert!(s.overlaps(a + 10, a + 11) && s.overlaps(a - 8, a + 1));
        assert!(!s.overlaps(a - 8, a) && !s.overlaps(1, 2));
        s.free(a).unwrap().unwrap();
        assert_eq!(s.alloc(30000), Some(a), "freed space is reused");
    }

    proptest! {
        #[test]
        fn random_alloc_free_keeps_blocks_disjoint(ops in proptest::collection::vec((any::<bool>(), prop_oneof![1usize..300, LARGE..3 * LARGE]), 1..200)) {
            let h = Heap::new(1 << 30, 8 * LARGE);
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (alloc, n) in ops {
                if alloc || live.is_empty() {
                    if let Ok(a) = h.alloc(n) {
                        prop_assert!(h.contains(a, n) && a % ALIGN == 0);
                        for &(b, m) in &live {
                            prop_assert!(a + n <= b || b + m <= a, "overlap");
                        }
                        live.push((a, n));
                    }
                } else {
                    let (a, _) = live.remove(n % live.len());
                    h.free(a).unwrap();
                }
            }
            for (a, _) in live { h.free(a).unwrap(); }
            prop_assert_eq!(h.in_use(), 0);
            prop_assert!(h.alloc(8 * LARGE).is_ok(), "fully coalesced");
        }
    }
}
