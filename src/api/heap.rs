//! The library heap allocator behind `fh_malloc`/`fh_free`.
//!
//! Guarantees: allocations are 64-byte aligned (cache line; fine for atomics), lie
//! inside the always-registered heap, never overlap; freeing coalesces neighbours;
//! freeing something that is not a live allocation is refused, not corrupting.
//! First fit over an address-ordered free list: simple and predictable.

use crate::bail;
use crate::runtime::error::Result;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

pub const ALIGN: usize = 64;

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
        let Some((&off, &flen)) = g.free.iter().find(|(_, &l)| l >= need) else {
            bail!(
                NoMemory,
                "no free block of {} bytes in the {}-byte heap ({} in use; raise FH_HEAP_SIZE)",
                need,
                self.len,
                g.in_use
            );
        };
        g.free.remove(&off);
        if flen > need {
            g.free.insert(off + need, flen - need);
        }
        g.live.insert(off, need);
        g.in_use += need;
        Ok(self.base + off)
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

    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.base + self.len)
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

    proptest! {
        #[test]
        fn random_alloc_free_keeps_blocks_disjoint(ops in proptest::collection::vec((any::<bool>(), 1usize..300), 1..200)) {
            let h = Heap::new(1 << 20, 16384);
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (alloc, n) in ops {
                if alloc || live.is_empty() {
                    if let Ok(a) = h.alloc(n) {
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
            prop_assert!(h.alloc(16384).is_ok());
        }
    }
}
