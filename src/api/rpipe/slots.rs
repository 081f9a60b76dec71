//! Tagged slot rings: how one side tells the other something by RDMA alone.
//!
//! A ring is `n` slots of two cache lines each in the *consumer's* memory: the
//! first line holds 48 bytes of inline data, then two little-endian `u64` tag
//! words; the second line holds the inline data's next 64 bytes (up to
//! [`INLINE_MAX`] = 112 in all). The producer writes the `s`-th record (s = 1, 2,
//! ...) into slot `(s - 1) % n`; the consumer polls that slot's words in its own
//! memory. Both words carry the tag `s mod 2^24` in their top 24 bits and a 40-bit
//! payload below it:
//!
//! ```text
//!   line 0: bytes 0..48: inline data 0..48   word 0 (at 48): tag(24) | a(40)
//!                                            word 1 (at 56): tag(24) | b(40)
//!   line 1: bytes 64..128: inline data 48..112
//! ```
//!
//! Inline data is written (and completed) before the words, like any message data.
//! Up to 48 bytes share the words' cache line: a small message costs one line
//! transfer. Up to 112, the second line is right after the first, at an address the
//! consumer knows before it reads the words, instead of at the message's place in
//! the inbox, which only the words name: its transfer no longer waits for theirs to
//! be decoded, and a hardware prefetcher may bring it along (docs/PERFORMANCE.md,
//! "rpipe: 112 bytes inline").
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
//!   credit rule (see `pipe/write.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

pub const TAG_BITS: u32 = 24;
pub const PAYLOAD_BITS: u32 = 40;
/// The largest payload value a slot word carries.
pub const PAYLOAD_MAX: u64 = (1 << PAYLOAD_BITS) - 1;
/// Bytes per slot (two cache lines).
pub const SLOT_BYTES: usize = 128;
/// Inline data the first line carries before the words.
const HEAD_INLINE: usize = 48;
/// Where the second line (the rest of the inline data) starts in a slot.
const TAIL_AT: usize = 64;
/// Inline data a slot carries.
pub const INLINE_MAX: usize = HEAD_INLINE + SLOT_BYTES - TAIL_AT;
/// Offset of the two words in a slot.
pub const WORDS_AT: usize = HEAD_INLINE;

/// Where `len` (at most [`INLINE_MAX`]) inline bytes lie in a slot: the non-empty
/// pieces of `(offset in the slot, offset in the data, bytes)`, one up to 48 bytes.
/// (Empty pieces are left out: each copy of a length known only at run time is a
/// call to `memcpy`, and small messages are the common case.)
#[inline]
pub fn inline_parts(len: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    debug_assert!(len <= INLINE_MAX);
    let head = len.min(HEAD_INLINE);
    [(0, 0, head), (TAIL_AT, HEAD_INLINE, len - head)]
        .into_iter()
        .filter(|p| p.2 > 0)
}

/// Copy `len` inline bytes from `src` into the slot at `slot`.
///
/// # Safety
/// `slot` is a slot ([`SLOT_BYTES`], writable, not read as the record before its
/// words are stored), `src` is valid for `len` <= [`INLINE_MAX`] bytes.
#[inline]
pub unsafe fn inline_in(slot: usize, src: *const u8, len: usize) {
    for (at, from, n) in inline_parts(len) {
        // SAFETY: the caller's contract; the pieces lie inside the slot and `src`.
        unsafe { std::ptr::copy_nonoverlapping(src.add(from), (slot + at) as *mut u8, n) };
    }
}

/// Copy `len` inline bytes of the slot at `slot` to `dst`.
///
/// # Safety
/// `slot` is a slot whose words named `len` <= [`INLINE_MAX`] inline bytes (loaded
/// with [`load`], so the bytes are visible); `dst` is valid for `len` bytes.
#[inline]
pub unsafe fn inline_out(slot: usize, dst: *mut u8, len: usize) {
    for (at, to, n) in inline_parts(len) {
        // SAFETY: the caller's contract; the pieces lie inside the slot and `dst`.
        unsafe { std::ptr::copy_nonoverlapping((slot + at) as *const u8, dst.add(to), n) };
    }
}

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
            line.0[..WORDS_AT].iter().all(|&b| b == 0) && line.0[TAIL_AT..].iter().all(|&b| b == 0),
            "inline area untouched"
        );
    }

    /// Every inline length round-trips through a slot without touching the words,
    /// and the second line is used only past 48 bytes.
    #[test]
    fn inline_bytes_round_trip_around_the_words() {
        #[repr(align(64))]
        struct Slot([u8; SLOT_BYTES]);
        for len in 0..=INLINE_MAX {
            let mut slot = Slot([0; SLOT_BYTES]);
            let addr = slot.0.as_mut_ptr() as usize;
            let w = encode(5, 1, len as u64);
            // SAFETY: a live, aligned slot of SLOT_BYTES.
            unsafe { store(addr, w) };
            let src: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) | 1).collect();
            // SAFETY: as above; src is valid for len <= INLINE_MAX bytes.
            unsafe { inline_in(addr, src.as_ptr(), len) };
            // SAFETY: as above.
            assert_eq!(decode(5, unsafe { load(addr) }), Some((1, len as u64)));
            let used = slot.0[TAIL_AT..].iter().filter(|&&b| b != 0).count();
            assert_eq!(used, len.saturating_sub(HEAD_INLINE), "len {}", len);
            let mut dst = vec![0u8; len];
            // SAFETY: as above; dst is valid for len bytes.
            unsafe { inline_out(addr, dst.as_mut_ptr(), len) };
            assert_eq!(dst, src, "len {}", len);
        }
    }

    #[test]
    fn slots_wrap() {
        assert_eq!(slot_addr(1000, 4, 1), 1000);
        assert_eq!(slot_addr(1000, 4, 4), 1000 + 3 * SLOT_BYTES);
        assert_eq!(slot_addr(1000, 4, 5), 1000);
    }
}
