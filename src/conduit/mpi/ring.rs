//! A rank's receive queue in node-shared memory: a bounded multi-producer,
//! single-consumer ring of cache-line cells holding variable-size messages, filled by
//! the rank's node peers and drained by the rank itself (GASNet's PSHM AM queues;
//! the per-cell sequence numbers are D. Vyukov's bounded queue).
//!
//! Layout, from the ring's base (every part starts on a cache line):
//! - line 0: `tail`, the next free position; producers reserve with compare-and-swap;
//! - line 1: `head`, the next position the consumer reads; written by the consumer only;
//! - `extra` words the conduit keeps beside the queue (counters peers update);
//! - `cap` cells of [`CELL`] bytes: a message is a head (16 bytes, 48 with a long
//!   payload's description) and its body in consecutive cells. A message never
//!   wraps: a producer whose message would cross the end also reserves the cells up
//!   to the end and publishes them as padding.
//!
//! The first word of a message's first cell is its sequence word: the message at
//! position `p` is published when it holds `tag(p)`, a bijective 64-bit function of `p`.
//! A stale word is `tag(q)` for an earlier position `q` of that cell (never
//! `tag(p)`), zero, or body bytes of an earlier lap, which equal `tag(p)` with
//! probability 2^-64 (no plain counter could promise that: a body holding small
//! integers would look published). So the consumer never writes a cell: releasing
//! is one store to `head`, and nothing it does after a message makes its next
//! locked instruction wait for a cache line to travel. A producer keeps its own
//! copy of `head` and reads the shared one only when its copy says the ring is
//! full, so a message costs the producer one cache line written and the consumer
//! one read.
//!
//! Guarantees:
//! - no loss: `push` places the whole message or returns an error and changes nothing;
//! - one producer thread's messages are popped in the order it pushed them;
//! - the consumer reads a message only after its producer published it (Release on
//!   the sequence word, Acquire when reading it), and a producer writes only cells the
//!   consumer has released (Acquire on `head`);
//! - nothing in a message is trusted: a length that cannot be right is reported as
//!   [`Popped::Corrupt`] and one cell is skipped, so a peer that scribbles on the ring
//!   costs its owner messages, never a fault or an endless loop.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per cell (one cache line).
pub(super) const CELL: usize = 64;
/// Bytes of a message's head: sequence word, then kind, body length and source in
/// one word; a pull adds the payload's address, length and sequence number. Both
/// multiples of 16, so a body starts as aligned as a receive buffer of the MPI
/// path does.
const HEAD: usize = 16;
const HEAD_PULL: usize = 48;
/// Largest body length the head's 24-bit field holds.
const MAX_LEN: usize = (1 << 24) - 1;

const LINE: usize = 64;

/// The sequence word that publishes position `p`: `p + 1` times an odd constant
/// (2^64 / golden ratio), a bijection, so two positions never share a tag, and the
/// tags of the positions a job reaches are spread over all 64 bits (no small
/// integer a body holds is likely to be one). Two instructions: the producer
/// computes one per message, the consumer one per poll (an earlier version used
/// splitmix64's finaliser, 17).
#[inline]
fn tag(p: u64) -> u64 {
    p.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// What a message carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub(super) enum Kind {
    /// Cells up to the ring's end, skipped.
    Pad = 1,
    /// An AM frame.
    Frame = 2,
    /// An AM frame whose long payload the consumer copies from the producer's memory
    /// (`long_ptr`, `long_len`) and then acknowledges with `long_seq`.
    Pull = 3,
}

/// A message's head as the producer fills it in (the body length is the body's).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Head {
    pub src: u32,
    pub long_ptr: u64,
    pub long_len: u64,
    pub long_seq: u64,
}

/// Why a push placed nothing.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PushError {
    /// The consumer has not released enough cells yet.
    Full,
    /// Larger than half the ring: never fits with its padding.
    TooBig,
}

/// What the consumer found at the head.
pub(super) enum Popped<'a> {
    Empty,
    Msg {
        kind: Kind,
        head: Head,
        body: &'a mut [u8],
        cells: u64,
    },
    /// A head that cannot be right (unknown kind, impossible length): one cell to skip.
    Corrupt {
        src: u32,
    },
}

/// One rank's ring, at `base` in this address space.
#[derive(Clone, Copy)]
pub(super) struct Ring {
    base: usize,
    /// Cells, a power of two (positions wrap with a mask, not a division).
    cap: u64,
    extra: usize,
    /// Offset of the first cell.
    cells_at: usize,
}

// Offsets of the parts.
const TAIL: usize = 0;
const HEADW: usize = LINE;
const EXTRA: usize = 2 * LINE;

fn lines(bytes: usize) -> usize {
    bytes.div_ceil(LINE) * LINE
}

impl Ring {
    /// Bytes a ring of `cap` cells (a power of two) with `extra` words occupies.
    pub(super) fn bytes(cap: usize, extra: usize) -> usize {
        EXTRA + lines(8 * extra) + CELL * cap
    }

    /// The ring at `base`.
    ///
    /// # Safety
    /// `base` is cache-line aligned and `[base, base + Ring::bytes(cap, extra))` stays
    /// mapped, readable and writable, for as long as the ring is used.
    pub(super) unsafe fn at(base: usize, cap: usize, extra: usize) -> Ring {
        assert!(cap.is_power_of_two(), "ring of {cap} cells");
        debug_assert!(cap >= 4 && CELL * cap / 2 <= MAX_LEN);
        debug_assert_eq!(base % LINE, 0);
        Ring {
            base,
            cap: cap as u64,
            extra,
            cells_at: EXTRA + lines(8 * extra),
        }
    }

    /// Make the ring empty (its owner, before any peer may push; the conduit zeroes
    /// the whole segment instead).
    ///
    /// # Safety
    /// Nobody else uses the ring meanwhile.
    #[cfg(test)]
    pub(super) unsafe fn reset(&self) {
        let len = Ring::bytes(self.cap as usize, self.extra);
        // SAFETY: the caller's contract: the ring is ours and mapped.
        unsafe { std::ptr::write_bytes(self.base as *mut u8, 0, len) };
    }

    #[inline]
    fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is 8-aligned inside the ring's words (callers below); the
        // memory is mapped for the ring's life (`at`'s contract) and only ever used
        // through atomics.
        unsafe { &*((self.base + off) as *const AtomicU64) }
    }

    /// Extra word `i` (< `extra`).
    #[inline]
    pub(super) fn extra(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.extra, "extra word {} of {}", i, self.extra);
        self.word(EXTRA + 8 * i)
    }

    /// Position `pos` within the ring: `pos % cap`.
    #[inline]
    fn wrap(&self, pos: u64) -> u64 {
        pos & (self.cap - 1)
    }

    #[inline]
    fn cell_off(&self, pos: u64) -> usize {
        self.cells_at + CELL * self.wrap(pos) as usize
    }

    /// The sequence word of the cell at `pos`.
    #[inline]
    fn seq(&self, pos: u64) -> &AtomicU64 {
        self.word(self.cell_off(pos))
    }

    fn cell(&self, pos: u64) -> *mut u8 {
        (self.base + self.cell_off(pos)) as *mut u8
    }

    /// Largest body a message may have.
    pub(super) fn max_body(&self) -> usize {
        CELL * (self.cap as usize / 2) - HEAD_PULL
    }

    fn head_len(kind: Kind) -> usize {
        if kind == Kind::Pull {
            HEAD_PULL
        } else {
            HEAD
        }
    }

    fn cells_for(kind: Kind, body: usize) -> u64 {
        (Ring::head_len(kind) + body).div_ceil(CELL) as u64
    }

    /// Reserve `n` cells (a message, after padding when it would wrap): the first
    /// reserved position and the pad length. `seen` is this producer's copy of
    /// `head` (never ahead of it: the shared one only grows).
    fn reserve(&self, n: u64, seen: &AtomicU64) -> Result<(u64, u64), PushError> {
        let tail = self.word(TAIL);
        let mut t = tail.load(Ordering::Relaxed);
        loop {
            let pad = if self.wrap(t) + n > self.cap {
                self.cap - self.wrap(t)
            } else {
                0
            };
            let mut h = seen.load(Ordering::Relaxed);
            if t + pad + n > h + self.cap {
                h = self.word(HEADW).load(Ordering::Acquire);
                seen.fetch_max(h, Ordering::Relaxed);
                if t + pad + n > h + self.cap {
                    return Err(PushError::Full);
                }
            }
            match tail.compare_exchange_weak(t, t + pad + n, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Ok((t, pad)),
                Err(now) => t = now,
            }
        }
    }

    /// Write a head at `pos`, but for its sequence word (written by `publish`).
    fn write_head(&self, pos: u64, kind: Kind, h: &Head, body: usize) {
        debug_assert!(body <= MAX_LEN);
        let w = kind as u64 | (body as u64) << 8 | (h.src as u64) << 32;
        let words: &[u64] = if kind == Kind::Pull {
            &[w, h.long_ptr, h.long_len, h.long_seq, 0]
        } else {
            &[w]
        };
        debug_assert_eq!(8 + 8 * words.len(), Ring::head_len(kind));
        for (i, x) in words.iter().enumerate() {
            // SAFETY: the cell at `pos` is reserved by this producer (`reserve`), so
            // no one reads or writes it until it is published; bytes 8.. of the head
            // are not its sequence word, and a cell is 8-aligned.
            unsafe { (self.cell(pos).add(8 + 8 * i) as *mut u64).write(x.to_le()) };
        }
    }

    fn publish(&self, pos: u64) {
        self.seq(pos).store(tag(pos), Ordering::Release);
    }

    /// Place one message (any thread of any node peer). `seen`: the caller's copy of
    /// this ring's head (0 at first), kept in the caller's own memory.
    pub(super) fn push(
        &self,
        kind: Kind,
        h: &Head,
        body: &[u8],
        seen: &AtomicU64,
    ) -> Result<(), PushError> {
        self.push_with(kind, h, body.len(), seen, |dst| dst.copy_from_slice(body))
    }

    /// As [`Self::push`], for a body of `len` bytes that `fill` writes in place:
    /// every byte of the slice it gets (which holds an earlier lap's bytes). A small
    /// frame is encoded straight into its cells this way, with no copy on the stack.
    pub(super) fn push_with(
        &self,
        kind: Kind,
        h: &Head,
        len: usize,
        seen: &AtomicU64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), PushError> {
        debug_assert!(kind != Kind::Pad);
        if len > self.max_body() {
            return Err(PushError::TooBig);
        }
        let n = Ring::cells_for(kind, len);
        let (t, pad) = self.reserve(n, seen)?;
        let at = t + pad;
        self.write_head(at, kind, h, len);
        // SAFETY: cells [at, at + n) are reserved by us and do not wrap (reserve
        // padded to the end), so the body's bytes fit behind the head; nobody reads
        // or writes them until `publish` (a peer that scribbles on our reserved cells
        // only garbles its own message, which the consumer checks).
        fill(unsafe {
            std::slice::from_raw_parts_mut(self.cell(at).add(Ring::head_len(kind)), len)
        });
        if pad > 0 {
            self.write_head(t, Kind::Pad, &Head::default(), 0);
            self.publish(t);
        }
        self.publish(at);
        Ok(())
    }

    /// The message at the head, if one is published (the consumer only). Padding is
    /// skipped here. The body stays valid until `release`.
    pub(super) fn peek(&self) -> Popped<'_> {
        for _ in 0..2 {
            let h = self.word(HEADW).load(Ordering::Relaxed);
            if self.seq(h).load(Ordering::Acquire) != tag(h) {
                return Popped::Empty;
            }
            let mut b = [0u8; HEAD_PULL];
            let room = self.cap - self.wrap(h);
            // SAFETY: the head cell is published and not yet released: its producer
            // is done with it and no other producer may reuse it.
            unsafe { std::ptr::copy_nonoverlapping(self.cell(h), b.as_mut_ptr(), HEAD) };
            let w = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
            let (kind, len, src) = (w & 0xff, ((w >> 8) & 0xff_ffff) as usize, (w >> 32) as u32);
            if kind == Kind::Pad as u64 {
                self.release(room);
                continue;
            }
            let kind = match kind {
                2 => Kind::Frame,
                3 => Kind::Pull,
                _ => return Popped::Corrupt { src },
            };
            let cells = Ring::cells_for(kind, len);
            if len > self.max_body() || cells > room {
                return Popped::Corrupt { src };
            }
            if kind == Kind::Pull {
                // SAFETY: as above; the whole head lies in the message's cells
                // (`cells` counts it and fits `room`).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.cell(h).add(HEAD),
                        b[HEAD..].as_mut_ptr(),
                        HEAD_PULL - HEAD,
                    )
                };
            }
            let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
            let head = match kind {
                Kind::Pull => Head {
                    src,
                    long_ptr: word(16),
                    long_len: word(24),
                    long_seq: word(32),
                },
                _ => Head {
                    src,
                    ..Head::default()
                },
            };
            // SAFETY: the message's cells are published, ours until `release`, and
            // contiguous (checked against `room` above).
            let body = unsafe {
                std::slice::from_raw_parts_mut(self.cell(h).add(Ring::head_len(kind)), len)
            };
            return Popped::Msg {
                kind,
                head,
                body,
                cells,
            };
        }
        Popped::Empty
    }

    /// Give `cells` cells at the head back to the producers (the consumer only).
    pub(super) fn release(&self, cells: u64) {
        debug_assert!(cells >= 1 && cells <= self.cap);
        let h = self.word(HEADW);
        h.store(h.load(Ordering::Relaxed) + cells, Ordering::Release);
    }

    /// True when a message is published at the head (two loads).
    #[inline]
    pub(super) fn published(&self) -> bool {
        let h = self.word(HEADW).load(Ordering::Relaxed);
        self.seq(h).load(Ordering::Acquire) == tag(h)
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        !self.published()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Mem(Vec<u64>);

    fn ring(cap: usize, extra: usize) -> (Arc<Mem>, Ring) {
        let m = Arc::new(Mem(vec![0u64; (Ring::bytes(cap, extra) + LINE) / 8]));
        let base = (m.0.as_ptr() as usize).div_ceil(LINE) * LINE;
        // SAFETY: the vector outlives every use in the test and is large enough.
        let r = unsafe { Ring::at(base, cap, extra) };
        // SAFETY: nobody else uses it yet.
        unsafe { r.reset() };
        (m, r)
    }

    fn pop(r: &Ring) -> Option<(u32, Vec<u8>)> {
        match r.peek() {
            Popped::Empty => None,
            Popped::Msg {
                head, body, cells, ..
            } => {
                let v = body.to_vec();
                r.release(cells);
                Some((head.src, v))
            }
            Popped::Corrupt { .. } => panic!("corrupt"),
        }
    }

    #[test]
    fn order_wrap_and_full() {
        let (_m, r) = ring(16, 1);
        let seen = AtomicU64::new(0);
        assert!(r.is_empty());
        assert_eq!(
            r.push(Kind::Frame, &Head::default(), &[0; 600], &seen),
            Err(PushError::TooBig)
        );
        let mut sent = 0u32;
        let mut got = 0u32;
        for round in 0..200u32 {
            // Sizes that make messages of 1..=3 cells, so padding happens.
            let body = vec![round as u8; (round as usize * 37) % 150];
            let h = Head {
                src: round,
                ..Head::default()
            };
            match r.push(Kind::Frame, &h, &body, &seen) {
                Ok(()) => sent += 1,
                Err(PushError::Full) => {
                    while let Some((src, b)) = pop(&r) {
                        assert_eq!(src, got);
                        assert!(b.iter().all(|&x| x == got as u8));
                        got += 1;
                    }
                    r.push(Kind::Frame, &h, &body, &seen)
                        .expect("room after draining");
                    sent += 1;
                }
                Err(e) => panic!("{:?}", e),
            }
            // Renumber so the receiver can check order: src == sequence number.
            if sent != round + 1 {
                panic!("lost a push");
            }
        }
        while let Some((src, _)) = pop(&r) {
            assert_eq!(src, got);
            got += 1;
        }
        assert_eq!(got, sent);
    }

    #[test]
    fn many_producers_lose_nothing() {
        let (m, r) = ring(64, 2);
        let producers = 4u32;
        let each = 5000u32;
        let hs: Vec<_> = (0..producers)
            .map(|p| {
                let m = m.clone();
                std::thread::spawn(move || {
                    let _keep = &m;
                    let seen = AtomicU64::new(0);
                    for i in 0..each {
                        let h = Head {
                            src: p,
                            long_seq: i as u64,
                            ..Head::default()
                        };
                        let body = vec![p as u8; (i % 200) as usize];
                        // Pull heads carry the sequence number the check below needs.
                        while r.push(Kind::Pull, &h, &body, &seen) == Err(PushError::Full) {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = vec![0u64; producers as usize];
        let mut total = 0;
        while total < producers * each {
            match r.peek() {
                Popped::Msg {
                    head, body, cells, ..
                } => {
                    let p = head.src as usize;
                    assert_eq!(head.long_seq, next[p], "producer {} out of order", p);
                    assert_eq!(body.len() as u64, next[p] % 200);
                    assert!(body.iter().all(|&x| x == p as u8));
                    next[p] += 1;
                    total += 1;
                    r.release(cells);
                }
                Popped::Empty => std::thread::yield_now(),
                Popped::Corrupt { .. } => panic!("corrupt"),
            }
        }
        for h in hs {
            h.join().expect("producer");
        }
        assert!(r.is_empty());
    }

    #[test]
    fn scribbled_head_is_reported_not_trusted() {
        let (_m, r) = ring(16, 0);
        let seen = AtomicU64::new(0);
        r.push(Kind::Frame, &Head::default(), &[1, 2, 3], &seen)
            .expect("room");
        // A hostile peer rewrites the length to something impossible.
        // SAFETY: the test owns the ring; the head cell is published.
        unsafe { std::ptr::write_unaligned(r.cell(0).add(8) as *mut u64, 2 | 0xff_ffff << 8) };
        assert!(matches!(r.peek(), Popped::Corrupt { .. }));
        r.release(1);
        assert!(r.is_empty());
    }
}
