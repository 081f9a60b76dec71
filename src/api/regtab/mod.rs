//! The registration table: every rank publishes the ranges it registered
//! (`fh_mem_register`) in its own library heap, right after the sync area, where
//! peers read it with one-sided gets. The first access to a peer's registered memory
//! therefore needs no message and no help from the peer's CPU, at any thread level
//! and with any `FH_SHM`.
//!
//! Layout (the same on every rank, at `CtxInner::regtab_off` from the heap base):
//! a version word (a seqlock: odd while the owner changes an entry), `MAX_REGS`
//! entries `{start, end}` (end 0: free), then per entry a bitmap with one bit per rank:
//! the ranks that may have cached the entry.
//!
//! Guarantees (the invariant unregister/invalidate rely on: no access lands after
//! they return):
//! - A reader caches an entry only after it set its holder bit (a remote atomic) and
//!   then saw the version unchanged. The owner removes an entry (version bump) before
//!   it reads the bitmap (atomic reads). So either the owner sees the bit and sends
//!   that rank an invalidation (and waits for its ack), or the reader's check sees the
//!   new version and does not cache (Dekker's argument; both sides' atomics are
//!   ordered, `sync::atomic` makes them atomic with each other).
//! - A slot is reused only after its bitmap was cleared, which happens after every
//!   holder acknowledged.
//! - Every table word is written by its owner only; holder words only through
//!   `CtxInner::word` (atomic for every rank).

pub mod table;

use table::Slot;
pub use table::{Layout, RegTab, MAX_REGS};

use super::ctx::CtxInner;
use crate::conduit::AtomicOp;
use crate::runtime::error::Result;
use crate::{bail, err};
use std::sync::atomic::{fence, AtomicU64, Ordering};

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl CtxInner {
    /// This rank's table words (in its own heap).
    fn regtab_word(&self, off: usize) -> &AtomicU64 {
        let a = self.remote_heaps[self.rank].0 + self.regtab_off + off;
        // SAFETY: inside our own heap's reserved part (mapped for the context's life),
        // 8-byte aligned; only this rank stores to it, peers read it with gets.
        unsafe { AtomicU64::from_ptr(a as *mut u64) }
    }

    /// Change entry `i` to `[start, end)` under the seqlock.
    fn regtab_write(&self, l: &Layout, i: usize, start: usize, end: usize) {
        let v = self.regtab_word(0);
        let old = v.load(Ordering::Relaxed);
        debug_assert!(old % 2 == 0, "only the owner writes, under the slots lock");
        v.store(old + 1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.regtab_word(l.entry(i))
            .store(start as u64, Ordering::Relaxed);
        self.regtab_word(l.entry(i) + 8)
            .store(end as u64, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        v.store(old + 2, Ordering::Release);
        fence(Ordering::SeqCst);
    }

    /// Publish a new registration. `FH_ERR_NO_RESOURCE` when the table is full.
    pub(crate) fn regtab_publish(&self, start: usize, end: usize) -> Result<()> {
        let Some(l) = self.regtab.layout else {
            return Ok(());
        };
        let mut slots = self.regtab.slots.lock();
        let Some(i) = slots.iter().position(|s| *s == Slot::Free) else {
            bail!(
                NoResource,
                "this rank already has {} registered regions (the most peers can look up one-sidedly); \
                 unregister some or register larger ranges",
                MAX_REGS
            );
        };
        slots[i] = Slot::Published { start, end };
        self.regtab_write(&l, i, start, end);
        Ok(())
    }

    /// Remove the registration starting at `start` from the table; returns its slot
    /// and the ranks that may have cached it. Call [`Self::regtab_retire`] with the
    /// slot once they all acknowledged.
    pub(crate) fn regtab_remove(&self, start: usize) -> Result<Option<(usize, Vec<usize>)>> {
        let Some(l) = self.regtab.layout else {
            return Ok(None);
        };
        let i = {
            let mut slots = self.regtab.slots.lock();
            let Some(i) = slots
                .iter()
                .position(|s| matches!(s, Slot::Published { start: s0, .. } if *s0 == start))
            else {
                return Ok(None);
            };
            slots[i] = Slot::Retiring;
            self.regtab_write(&l, i, 0, 0);
            i
        };
        let base = self.remote_heaps[self.rank].0 + self.regtab_off;
        let mut holders = Vec::new();
        for w in 0..l.words {
            let bits = self.word(self.rank, base + l.holder_word(i, w * 64), AtomicOp::Fetch)?;
            holders.extend((0..64).filter(|b| bits >> b & 1 == 1).map(|b| w * 64 + b));
        }
        holders.retain(|&r| r < self.size && r != self.rank);
        Ok(Some((i, holders)))
    }

    /// Every holder of slot `i` acknowledged: clear its bitmap and free it.
    pub(crate) fn regtab_retire(&self, i: usize) -> Result<()> {
        let Some(l) = self.regtab.layout else {
            return Ok(());
        };
        let base = self.remote_heaps[self.rank].0 + self.regtab_off;
        let mut r = Ok(());
        for w in 0..l.words {
            if let Err(e) = self.word(self.rank, base + l.holder_word(i, w * 64), AtomicOp::Set(0))
            {
                r = Err(e);
            }
        }
        self.regtab.slots.lock()[i] = Slot::Free;
        r.map(|_| ())
    }

    /// Look `[addr, addr+len)` up in `rank`'s table with one-sided gets; on a hit,
    /// register as a holder and cache the region (later accesses are plain). False:
    /// not registered there (go through firehose).
    pub(crate) fn regtab_lookup(&self, rank: usize, addr: usize, len: usize) -> Result<bool> {
        let Some(l) = self.regtab.layout else {
            return Ok(false);
        };
        if rank == self.rank {
            return Ok(false);
        }
        let base = self.remote_heaps[rank].0 + self.regtab_off;
        let scratch = Scratch::new(self, l.scan_len() + 8)?;
        let (buf_at, v_at) = (scratch.addr, scratch.addr + l.scan_len());
        for round in 0..1000u32 {
            // SAFETY: the table lies in rank's heap (always accessible); the scratch
            // buffer holds scan_len + 8 bytes and lives until get_sync returns.
            unsafe {
                self.conduit
                    .get_sync(rank, base, buf_at as *mut u8, l.scan_len())?
            };
            // SAFETY: the scratch buffer's first scan_len bytes, just written.
            let buf = unsafe { std::slice::from_raw_parts(buf_at as *const u8, l.scan_len()) };
            let v1 = u64_at(buf, 0);
            let version_now = || -> Result<u64> {
                // SAFETY: as above, the scratch buffer's last 8 bytes.
                unsafe {
                    self.conduit.get_sync(rank, base, v_at as *mut u8, 8)?;
                    Ok(u64::from_le_bytes(*(v_at as *const [u8; 8])))
                }
            };
            if v1 % 2 == 0 && version_now()? == v1 {
                let hit = (0..MAX_REGS)
                    .map(|i| {
                        let at = l.entry(i);
                        (i, u64_at(buf, at) as usize, u64_at(buf, at + 8) as usize)
                    })
                    .find(|&(_, s, e)| e > s && s <= addr && addr.saturating_add(len) <= e);
                let Some((i, s, e)) = hit else {
                    return Ok(false);
                };
                let bit = 1u64 << (self.rank % 64);
                self.word(
                    rank,
                    base + l.holder_word(i, self.rank),
                    AtomicOp::FetchOr(bit),
                )?;
                if version_now()? == v1 {
                    self.remote.insert(rank, s, e);
                    crate::api::stats::Stats::add(&self.stats.remote_cache_misses, 1);
                    return Ok(true);
                }
            }
            // The owner is changing its table: let it finish.
            if round > 8 {
                std::thread::yield_now();
            }
        }
        Err(err!(
            Transport,
            "the registration table of rank {} kept changing for 1000 reads",
            rank
        ))
    }
}

/// Where a table read lands: memory the conduit can write into. On conduits that
/// need local buffers registered it is taken from the library heap (freed on drop);
/// elsewhere it is an ordinary allocation.
struct Scratch<'a> {
    ctx: &'a CtxInner,
    addr: usize,
    /// The ordinary allocation (conduits that reach any local memory).
    plain: Option<Vec<u64>>,
}

impl<'a> Scratch<'a> {
    fn new(ctx: &'a CtxInner, len: usize) -> Result<Scratch<'a>> {
        if ctx.fh.local_side {
            let addr = ctx.heap.alloc(len)?;
            return Ok(Scratch {
                ctx,
                addr,
                plain: None,
            });
        }
        let mut v = vec![0u64; len.div_ceil(8)];
        let addr = v.as_mut_ptr() as usize;
        Ok(Scratch {
            ctx,
            addr,
            plain: Some(v),
        })
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        if self.plain.is_none() {
            let _ = self.ctx.heap.free(self.addr);
        }
    }
}
