//! Registered-region tables.
//!
//! [`LocalRegions`]: the ranges this rank made remotely accessible with
//! `fh_mem_register`. Invariant: regions never overlap; each records which peers were
//! told about it (so unregistering can tell exactly those peers to forget it).
//!
//! [`RemoteCache`]: per peer, the ranges that peer said are registered. Invariant: an
//! entry is only inserted from the target's own answer, and removed (with a flush of
//! outstanding operations) before the target is told it may detach, so an access is
//! never issued to memory the target no longer has registered. One lock per peer so
//! lookups towards different peers do not contend.

use crate::bail;
use crate::runtime::error::Result;
use parking_lot::{RwLock, RwLockReadGuard};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Region {
    pub end: usize,
    /// Bit i set: rank i may have this region cached.
    pub holders: Vec<u64>,
    /// The pages are mlocked.
    pub locked: bool,
}

impl Region {
    pub fn add_holder(&mut self, rank: usize) {
        self.holders[rank / 64] |= 1 << (rank % 64);
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

pub struct LocalRegions {
    size: usize,
    map: RwLock<BTreeMap<usize, Region>>,
}

impl LocalRegions {
    pub fn new(size: usize) -> LocalRegions {
        LocalRegions {
            size,
            map: RwLock::new(BTreeMap::new()),
        }
    }

    /// Insert `[start, end)`; refuses overlap with an existing region.
    pub fn insert(&self, start: usize, end: usize, locked: bool) -> Result<()> {
        debug_assert!(start < end);
        let mut m = self.map.write();
        if let Some((&s, r)) = m.range(..end).next_back() {
            if r.end > start {
                bail!(
                    InvalidArg,
                    "[{:#x}, {:#x}) overlaps the registered region [{:#x}, {:#x}); unregister it first",
                    start,
                    end,
                    s,
                    r.end
                );
            }
        }
        m.insert(
            start,
            Region {
                end,
                holders: vec![0; self.size.div_ceil(64)],
                locked,
            },
        );
        Ok(())
    }

    /// Remove exactly `[start, end)`.
    pub fn remove_exact(&self, start: usize, end: usize) -> Result<Region> {
        let mut m = self.map.write();
        match m.get(&start) {
            Some(r) if r.end == end => Ok(m.remove(&start).expect("present")),
            Some(r) => bail!(
                NotPinned,
                "the region registered at {:#x} is {} bytes long, not {}",
                start,
                r.end - start,
                end - start
            ),
            None => bail!(
                NotPinned,
                "no region is registered starting at {:#x}",
                start
            ),
        }
    }

    /// Remove every region overlapping `[start, end)`.
    pub fn remove_overlapping(&self, start: usize, end: usize) -> Vec<(usize, Region)> {
        let mut m = self.map.write();
        let keys: Vec<usize> = m
            .range(..end)
            .filter(|(_, r)| r.end > start)
            .map(|(&s, _)| s)
            .collect();
        keys.into_iter()
            .map(|k| (k, m.remove(&k).expect("present")))
            .collect()
    }

    /// The region containing `[addr, addr+len)` and, if `holder` is given, record that
    /// rank as a holder. Returns its bounds.
    pub fn lookup(&self, addr: usize, len: usize, holder: Option<usize>) -> Option<(usize, usize)> {
        let end = addr.checked_add(len)?;
        if let Some(h) = holder {
            let mut m = self.map.write();
            let (&s, r) = m.range_mut(..=addr).next_back()?;
            if end > r.end {
                return None;
            }
            r.add_holder(h);
            return Some((s, r.end));
        }
        let m = self.map.read();
        let (&s, r) = m.range(..=addr).next_back()?;
        (end <= r.end).then_some((s, r.end))
    }

    /// Bounds of the regions overlapping `[lo, hi)`.
    pub fn bounds_near(&self, lo: usize, hi: usize) -> Vec<(usize, usize)> {
        let m = self.map.read();
        m.range(..hi)
            .rev()
            .take_while(|(_, r)| r.end > lo)
            .map(|(&s, r)| (s, r.end))
            .collect()
    }

    /// Start of the first region beginning in `(addr, limit)`, else `limit`.
    pub fn next_start(&self, addr: usize, limit: usize) -> usize {
        let m = self.map.read();
        m.range(addr.saturating_add(1)..limit)
            .next()
            .map_or(limit, |(&s, _)| s)
    }

    /// Hold the table for reading (keeps regions from being removed meanwhile).
    pub fn read(&self) -> RwLockReadGuard<'_, BTreeMap<usize, Region>> {
        self.map.read()
    }

    pub fn drain(&self) -> Vec<(usize, Region)> {
        std::mem::take(&mut *self.map.write()).into_iter().collect()
    }

    pub fn len(&self) -> usize {
        self.map.read().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// True if `[addr, addr+len)` lies within one range of `map` (start -> end).
pub fn covered<V>(
    map: &BTreeMap<usize, V>,
    addr: usize,
    len: usize,
    end_of: impl Fn(&V) -> usize,
) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    match map.range(..=addr).next_back() {
        Some((_, v)) => end <= end_of(v),
        None => false,
    }
}

/// One peer's cached regions.
pub struct PeerRegions {
    /// start -> end. Invariant: non-overlapping.
    map: BTreeMap<usize, usize>,
    /// The most recently inserted region (checked before the map: the common case is
    /// repeated access to the region just approved). Invariant: present in `map`, or
    /// (0, 0).
    recent: (usize, usize),
}

impl PeerRegions {
    #[inline]
    fn covers(&self, addr: usize, len: usize) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        if addr >= self.recent.0 && end <= self.recent.1 {
            return true;
        }
        covered(&self.map, addr, len, |e| *e)
    }
}

pub struct RemoteCache {
    per_rank: Vec<RwLock<PeerRegions>>,
    /// Entries per rank (mirrors the maps, for a lock-free emptiness check).
    count: Vec<std::sync::atomic::AtomicUsize>,
}

impl RemoteCache {
    pub fn new(size: usize) -> RemoteCache {
        RemoteCache {
            per_rank: (0..size)
                .map(|_| {
                    RwLock::new(PeerRegions {
                        map: BTreeMap::new(),
                        recent: (0, 0),
                    })
                })
                .collect(),
            count: (0..size).map(|_| Default::default()).collect(),
        }
    }

    /// Read guard on `rank`'s table if it covers the range (a hit), else `None`.
    #[inline]
    pub fn hit(
        &self,
        rank: usize,
        addr: usize,
        len: usize,
    ) -> Option<RwLockReadGuard<'_, PeerRegions>> {
        let g = self.per_rank[rank].read();
        g.covers(addr, len).then_some(g)
    }

    /// As `hit`, without taking the lock.
    ///
    /// # Safety
    /// No other thread may modify this cache for the duration of the caller's use of
    /// the answer (the context is used by one thread at a time, and handlers, the only
    /// other writers, run inside that thread's polls).
    #[inline]
    pub unsafe fn hit_unlocked(&self, rank: usize, addr: usize, len: usize) -> bool {
        // SAFETY: no concurrent writer (caller's contract), so a shared read is sound.
        unsafe { (*self.per_rank[rank].data_ptr()).covers(addr, len) }
    }

    /// True if nothing of `rank` is cached (a relaxed hint, exact without
    /// concurrent writers: entries only appear from that peer's answers).
    #[inline]
    pub fn is_empty(&self, rank: usize) -> bool {
        self.count[rank].load(std::sync::atomic::Ordering::Relaxed) == 0
    }

    pub fn insert(&self, rank: usize, start: usize, end: usize) {
        let mut g = self.per_rank[rank].write();
        let m = &mut g.map;
        // Drop stale overlapping entries (the target's answer is authoritative).
        let stale: Vec<usize> = m
            .range(..end)
            .filter(|(_, &e)| e > start)
            .map(|(&s, _)| s)
            .collect();
        for s in stale {
            m.remove(&s);
        }
        m.insert(start, end);
        self.count[rank].store(m.len(), std::sync::atomic::Ordering::Relaxed);
        debug_assert!(
            m.iter().zip(m.iter().skip(1)).all(|(a, b)| a.1 <= b.0),
            "cache entries overlap"
        );
        g.recent = (start, end);
    }

    /// Forget every entry of `rank` overlapping `[start, end)`; returns how many.
    pub fn invalidate(&self, rank: usize, start: usize, end: usize) -> usize {
        let mut g = self.per_rank[rank].write();
        let stale: Vec<usize> = g
            .map
            .range(..end)
            .filter(|(_, &e)| e > start)
            .map(|(&s, _)| s)
            .collect();
        for s in &stale {
            g.map.remove(s);
        }
        self.count[rank].store(g.map.len(), std::sync::atomic::Ordering::Relaxed);
        if g.recent.0 < end && g.recent.1 > start {
            g.recent = (0, 0);
        }
        stale.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_refuse_overlap_and_track_holders() {
        let r = LocalRegions::new(130);
        r.insert(1000, 2000, false).unwrap();
        assert!(r.insert(1500, 2500, false).is_err());
        assert!(r.insert(500, 1001, false).is_err());
        r.insert(2000, 3000, false).unwrap();
        assert_eq!(r.lookup(1200, 100, Some(129)), Some((1000, 2000)));
        assert_eq!(
            r.lookup(1900, 200, None),
            None,
            "spanning two regions is not covered"
        );
        assert!(r.remove_exact(1000, 1500).is_err());
        let reg = r.remove_exact(1000, 2000).unwrap();
        assert_eq!(reg.holder_ranks(), vec![129]);
        assert_eq!(r.remove_overlapping(0, 2001).len(), 1);
        assert!(r.is_empty());
    }

    #[test]
    fn cache_hits_and_invalidates() {
        let c = RemoteCache::new(2);
        assert!(c.hit(1, 100, 10).is_none());
        c.insert(1, 100, 200);
        assert!(c.hit(1, 150, 50).is_some());
        assert!(c.hit(1, 150, 51).is_none());
        assert!(c.hit(0, 150, 1).is_none());
        c.insert(1, 150, 300); // replaces the overlapping entry
        assert!(c.hit(1, 100, 10).is_none());
        assert_eq!(c.invalidate(1, 0, 1000), 1);
        assert!(c.hit(1, 160, 1).is_none());
    }
}
