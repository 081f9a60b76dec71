//! Free synchronisation between the reader and the writer's allocator (seed 003,
//! "rfree()/rmalloc() synchronization"), done one-sidedly.
//!
//! The writer owns the allocator of the reader's heap, so space the reader frees is
//! free only once the writer hears of it. The reader keeps a **toggle bitmap** in its
//! registered memory, one bit per allocation unit of its heap: `rfree` flips the bit
//! of the message's first unit, a local atomic XOR and nothing else. The writer
//! brings its view up to date with one RDMA get of the whole bitmap and compares it
//! with the copy it saw last: every bit that changed is one message the reader freed
//! (the writer knows each message's length from its own allocation record). So:
//! - **deferred** synchronisation (next-fit, first-fit): the writer syncs only when
//!   an allocation fails; all frees since the last sync come back in one get (a
//!   batch, written into the writer's view by RDMA). Throughput.
//! - **immediate** synchronisation (best-fit, worst-fit): the writer syncs before
//!   every allocation, so it fits against the true free list. Latency per rmalloc.
//!
//! Neither sends the writer a message or runs code of ours on the reader: a writer
//! waiting for space is not stuck behind a reader that stopped calling the library
//! (over node-shared heaps or an RDMA NIC; an MPI without asynchronous progress
//! still needs the reader inside some MPI call for the get to complete).
//!
//! Guarantees: a bit flips at most once between two syncs, because the reader can
//! only free a message at unit `u` after the writer allocated `u`, and the writer
//! allocates `u` again only after it has seen the flip; so any snapshot a get
//! returns (even one that races with flips) reports each free exactly once, now or
//! at the next sync. Words are read whole (the slot rule in `slots.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of bitmap for `units` allocation units (whole 64-byte lines).
pub fn bytes_for(units: usize) -> usize {
    units.div_ceil(64).div_ceil(8) * 64
}

/// Reader side: flip unit `u`'s bit in the bitmap at `base`.
///
/// # Safety
/// `base` must be the 8-byte aligned bitmap of at least `u + 1` bits, live for the
/// pipe's life, and the caller its only writer (the reader, under its pipe lock).
pub unsafe fn toggle(base: usize, u: usize) {
    // SAFETY: in bounds and aligned per the contract. The writer only reads this word
    // (by RDMA, concurrently): one whole-word store, and no read-modify-write (a
    // locked instruction) is needed, since nobody else stores to it.
    let w = unsafe { AtomicU64::from_ptr((base + (u / 64) * 8) as *mut u64) };
    let v = w.load(Ordering::Relaxed) ^ (1u64 << (u % 64)).to_le();
    w.store(v, Ordering::Release);
}

/// Writer side: the units whose bits differ between `seen` and `fresh` (a newer
/// snapshot); `seen` becomes `fresh`.
pub fn changed(seen: &mut [u64], fresh: &[u64]) -> Vec<usize> {
    debug_assert_eq!(seen.len(), fresh.len());
    let mut out = Vec::new();
    for (i, (s, &f)) in seen.iter_mut().zip(fresh).enumerate() {
        let mut d = *s ^ u64::from_le(f);
        while d != 0 {
            let b = d.trailing_zeros() as usize;
            out.push(i * 64 + b);
            d &= d - 1;
        }
        *s = u64::from_le(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toggles_are_seen_once() {
        let mut bm = vec![0u64; 2];
        let base = bm.as_mut_ptr() as usize;
        let mut seen = vec![0u64; 2];
        // SAFETY: bm is a live, aligned 128-bit bitmap.
        unsafe {
            toggle(base, 3);
            toggle(base, 70);
        }
        assert_eq!(changed(&mut seen, &bm), vec![3, 70]);
        assert_eq!(changed(&mut seen, &bm), Vec::<usize>::new());
        // SAFETY: as above.
        unsafe { toggle(base, 3) };
        assert_eq!(changed(&mut seen, &bm), vec![3], "freed again after reuse");
        assert_eq!(bytes_for(1), 64);
        assert_eq!(bytes_for(512), 64);
        assert_eq!(bytes_for(513), 128);
    }
}
