//! Maps keyed by offsets into a pipe's inbox, with a hasher of one multiplication
//! (the allocator's live set; the reader's held messages are bitmaps in `pipe/read.rs`).
//!
//! Guarantees: every bit of the offset reaches the low bits the table indexes by, so
//! offsets that are multiples of a cache line spread over the buckets.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Hashes an inbox offset with one multiplication, folded so the low bits (the
/// table's bucket index) depend on every bit: the writer looks offsets up in the
/// allocator's live set on rmalloc, rmem and rwrite, and an
/// ordered map or SipHash cost more than the rest of the call.
#[derive(Default)]
pub struct OffHasher(u64);

impl std::hash::Hasher for OffHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_usize((self.0 as usize).rotate_left(8) ^ b as usize);
        }
    }
    fn write_usize(&mut self, n: usize) {
        let h = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }
}

/// A map keyed by offsets, with [`OffHasher`].
pub type OffMap<V> = HashMap<usize, V, BuildHasherDefault<OffHasher>>;
