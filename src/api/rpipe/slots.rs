//! Tagged slot rings: how one side tells the other something by RDMA alone.
//!
//! A ring is `n` slots of one cache line each in the *consumer's* memory: up to
//! [`INLINE_MAX`] bytes of inline data, then two little-endian `u64` tag words. The
//! producer writes the `s`-th record (s = 1, 2, ...) into slot `(s - 1) % n`; the
//! consumer polls that slot's words in its own memory. Both words carry the tag
//! `s mod 2^24` in their top 24 bits and a 40-bit payload below it:
//!
//! ```text
//!   bytes 0..48: inline data       word 0 (at 48): tag(24) | a(40)
//!                                  word 1 (at 56): tag(24) | b(40)
//! ```
//!
//! Inline data is written (and completed) before the words, like any message data,
//! so it shares the words' cache line: a small message costs one line transfer.
//!
//! Guarantees:
//! - **Freshness.** A slot is accepted as record `s` only when *both* words carry
//!   `s`'s tag. A slot still holding record `s - n` (the previous use of the same
//!   space) carries another tag, so a stale record is never taken for a new one, and
//!   a slot whose two words come from different records (a put seen half-way) is
//!   not accepted either. Tag 0 belongs to `s = 2^24, 2^25, ...`, which are written
//!   long after the zero-filled ring was first overwritten, so zero memory never
//!   matches the next expected record.
//! - **Whole words.** The consumer reads each word with one aligned 64-bit load.
//!   The one assumption beyond MPI's own rules is that a put writes an aligned
//!   8-byte word whole, never byte by byte, which holds for every transport we run
//!   on (the sim conduit copies words; shared-memory MPI single-copy and RDMA NICs
//!   move at least aligned 8-byte units).
//! - **Overrun.** The producer never writes record `s` before the consumer has
//!   finished with record `s - n`; each ring's owner enforces that with its own
//!   credit rule (see `pipe.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

pub const TAG_BITS: u32 = 24;
pub const PAYLOAD_BITS: u32 = 40;
/// The largest payload value a slot word carries.
pub const PAYLOAD_MAX: u64 = (1 << PAYLOAD_BITS) - 1;
/// Bytes per slot (one cache line).
pub const SLOT_BYTES: usize = 64;
/// Inline data a slot carries before its words.
pub const INLINE_MAX: usize = 48;
/// Offset of the two words in a slot.
pub const WORDS_AT: usize = INLINE_MAX;

#[inline]
fn tag(seq: u64) -> u64 {
    seq & ((1 << TAG_BITS) - 1)
}

/// The two words of record `seq` carrying `(a, b)`.
#[inline]
pub fn encode(seq: u64, a: u64, b: u64) -> [u64; 2] {
    debug_assert!(seq > 0, "records are numbered from 1");
    debug_assert!(a <= PAYLOAD_MAX && b <= PAYLOAD_MAX);
    let t = tag(seq) << PAYLOAD_BITS;
    [(t | a).to_le(), (t | b).to_le()]
}

/// `(a, b)` if `words` hold record `seq`.
#[inline]
pub fn decode(seq: u64, words: [u64; 2]) -> Option<(u64, u64)> {
    let (w0, w1) = (u64::from_le(words[0]), u64::from_le(words[1]));
    let t = tag(seq);
    if w0 >> PAYLOAD_BITS == t && w1 >> PAYLOAD_BITS == t {
        Some((w0 & PAYLOAD_MAX, w1 & PAYLOAD_MAX))
    } else {
        None
    }
}

/// Address of the slot record `seq` goes to in a ring at `base` with `n` slots (a
/// power of two).
#[inline]
pub fn slot_addr(base: usize, n: usize, seq: u64) -> usize {
    debug_assert!(n.is_power_of_two());
    base + ((seq - 1) as usize & (n - 1)) * SLOT_BYTES
}

/// Read the words of the slot at `addr` (our own memory, written by the peer's puts).
///
/// # Safety
/// `addr` must be 64-byte aligned and valid for reads of [`SLOT_BYTES`] for the
/// life of the ring.
#[inline]
pub unsafe fn load(addr: usize) -> [u64; 2] {
    let addr = addr + WORDS_AT;
    // SAFETY: the caller guarantees alignment and validity; the words are only
    // written by the conduit (another process or thread) and read here with atomic
    // loads, so no torn read of a single word. Acquire: data the producer completed
    // before the flag (it flushed) is visible after the tag matches.
    unsafe {
        let w0 = AtomicU64::from_ptr(addr as *mut u64).load(Ordering::Acquire);
        let w1 = AtomicU64::from_ptr((addr + 8) as *mut u64).load(Ordering::Acquire);
        [w0, w1]
    }
}

/// Write the words of the slot at `addr` (a peer's ring, mapped here), each with a
/// release store: data written before (the slot's inline bytes, or the message in
/// the inbox) is visible to a reader whose [`load`] sees both words.
///
/// # Safety
/// `addr` must be 64-byte aligned and valid for writes of [`SLOT_BYTES`].
#[inline]
pub unsafe fn store(addr: usize, words: [u64; 2]) {
    let addr = addr + WORDS_AT;
    // SAFETY: aligned and valid per the contract; the reader loads each word
    // atomically, so each is stored whole.
    unsafe {
        AtomicU64::from_ptr(addr as *mut u64).store(words[0], Ordering::Release);
        AtomicU64::from_ptr((addr + 8) as *mut u64).store(words[1], Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_freshness() {
        for seq in [1u64, 2, 1 << 20, (1 << 24) - 1, 1 << 24, (1 << 24) + 5] {
            let w = encode(seq, 12345, PAYLOAD_MAX);
            assert_eq!(decode(seq, w), Some((12345, PAYLOAD_MAX)));
            assert_eq!(decode(seq + 1, w), None, "another record's tag");
        }
        // A zero-filled ring never matches record 1.
        assert_eq!(decode(1, [0, 0]), None);
        // Half-written slot: word 0 from record 9, word 1 from record 1.
        let (old, new) = (encode(1, 1, 1), encode(9, 2, 2));
        assert_eq!(decode(9, [new[0], old[1]]), None);
        assert_eq!(decode(1, [new[0], old[1]]), None);
    }

    #[test]
    fn store_then_load() {
        #[repr(align(64))]
        struct Line([u8; SLOT_BYTES]);
        let mut line = Line([0; SLOT_BYTES]);
        let addr = line.0.as_mut_ptr() as usize;
        let w = encode(7, 3, 40);
        // SAFETY: a live, 64-byte aligned line of SLOT_BYTES.
        unsafe { store(addr, w) };
        // SAFETY: as above.
        assert_eq!(decode(7, unsafe { load(addr) }), Some((3, 40)));
        assert!(
            line.0[..WORDS_AT].iter().all(|&b| b == 0),
            "inline area untouched"
        );
    }

    #[test]
    fn slots_wrap() {
        assert_eq!(slot_addr(1000, 4, 1), 1000);
        assert_eq!(slot_addr(1000, 4, 4), 1000 + 3 * SLOT_BYTES);
        assert_eq!(slot_addr(1000, 4, 5), 1000);
    }
}
