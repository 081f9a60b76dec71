//! The reader's end of a pipe (seed 003, "rpipe – rread()"): the notices taken
//! in order from our ring, the checks a notice must pass before its message is
//! handed out, and the record of held messages (read, not yet freed).
//!
//! Guarantees: a notice naming an extent outside the inbox, over a held message,
//! or with more inline bytes than a slot holds is refused (`FH_ERR_TRANSPORT`) and
//! counted, never followed; messages are handed out in the order written; an
//! empty poll takes no lock.

use super::{extent, Inner, Pipe, Shape, Transfer, ADDR_SHIFT, INLINE_BIT, UNIT};
use crate::api::am;
use crate::api::rpipe::slots;
use crate::runtime::error::Result;
use crate::{bail, err};
use std::sync::atomic::Ordering;

/// The side that reads from the peer.
pub(super) struct Rx {
    pub(super) inbox: usize,
    /// The peer's outbox block (pull mode reads from its mirror).
    pub(super) peer_outbox: usize,
    /// Notices taken so far (the next expected is `taken + 1`).
    pub(super) taken: u64,
    /// One bit per inbox unit, set while a held message (read, not yet freed) covers
    /// it (the overlap check of a notice costs a bit test per unit, not an
    /// ordered-map search).
    pub(super) held_units: Vec<u64>,
    /// One bit per inbox unit, set where a held message starts. Invariant: every
    /// start is held, and a held message's units run from its start to the next
    /// start or the next unit not held (messages never overlap), so the two bitmaps
    /// say where each held message is without a map to look up on every call.
    pub(super) starts: Vec<u64>,
    /// Held messages (set bits of `starts`).
    pub(super) held: usize,
}

impl Rx {
    pub(super) fn new(shape: Shape, inbox: usize, peer_outbox: usize) -> Rx {
        let words = (shape.width / UNIT).div_ceil(64);
        Rx {
            inbox,
            peer_outbox,
            taken: 0,
            held_units: vec![0; words],
            starts: vec![0; words],
            held: 0,
        }
    }
    /// The units of `[off, off + ext)`, as (word, mask) pieces.
    fn unit_words(off: usize, ext: usize) -> impl Iterator<Item = (usize, u64)> {
        let (first, end) = (off / UNIT, (off + ext) / UNIT);
        (first / 64..end.div_ceil(64)).map(move |w| {
            let lo = first.max(w * 64) - w * 64;
            let hi = end.min(w * 64 + 64) - w * 64;
            // hi - lo units, 1 to 64 of them, from bit lo.
            (w, (!0u64 >> (64 - (hi - lo))) << lo)
        })
    }

    /// Whether a held message covers any unit of `[off, off + ext)` (inside the inbox).
    fn any_held(&self, off: usize, ext: usize) -> bool {
        Self::unit_words(off, ext).any(|(w, m)| self.held_units[w] & m != 0)
    }

    /// Unit `u`'s word and bit in a bitmap.
    fn bit(u: usize) -> (usize, u64) {
        (u / 64, 1 << (u % 64))
    }

    /// Whether a held message starts at `off`.
    pub(super) fn holds(&self, off: usize) -> bool {
        let (w, b) = Self::bit(off / UNIT);
        off % UNIT == 0 && self.starts.get(w).is_some_and(|s| s & b != 0)
    }

    /// Hold the message at `off` (its units are free: checked by the caller).
    fn hold(&mut self, off: usize, len: usize) {
        for (w, m) in Self::unit_words(off, extent(len)) {
            debug_assert_eq!(self.held_units[w] & m, 0);
            self.held_units[w] |= m;
        }
        let (w, b) = Self::bit(off / UNIT);
        self.starts[w] |= b;
        self.held += 1;
    }

    /// Units of the held message that starts at unit `u`: up to the next start or
    /// the first unit not held (bits past the inbox are never held).
    fn held_extent(&self, u: usize) -> usize {
        let mut w = u / 64;
        // Bits that end the message, from unit u + 1 on.
        let mut stop = (self.starts[w] | !self.held_units[w]) & (!0u64 << (u % 64)) << 1;
        while stop == 0 {
            w += 1;
            match (self.starts.get(w), self.held_units.get(w)) {
                (Some(&s), Some(&h)) => stop = s | !h,
                _ => return w * 64 - u,
            }
        }
        w * 64 + stop.trailing_zeros() as usize - u
    }

    /// Give back the message at `off`; false if none is held there.
    pub(super) fn unhold(&mut self, off: usize) -> bool {
        if !self.holds(off) {
            return false;
        }
        let u = off / UNIT;
        for (w, m) in Self::unit_words(off, self.held_extent(u) * UNIT) {
            debug_assert_eq!(self.held_units[w] & m, m);
            self.held_units[w] &= !m;
        }
        let (w, b) = Self::bit(u);
        self.starts[w] &= !b;
        self.held -= 1;
        true
    }
}

impl Pipe {
    /// Take the next message in order. `wait`: block (progressing) until one comes,
    /// under the library's wait policy (`runtime::wait`): the writer rings our bell
    /// after each notice, so a reader that outlasted its spin and yield stages sleeps.
    pub fn rread(&self, wait: bool) -> Result<Option<(u64, usize)>> {
        self.live()?;
        if wait {
            am::check_not_in_handler("rpipe_rread")?;
        }
        if let Some(m) = self.take_or_closed()? {
            return Ok(Some(m));
        }
        if !wait {
            // As in rmalloc: a caller spinning on try_rread still progresses.
            self.ctx.maybe_poll_idle();
            return Ok(None);
        }
        let mut got = None;
        self.ctx.wait_rung(
            crate::api::stall::Wait::call("rpipe_rread", Some(self.peer), "a message"),
            || {
                got = self.take_or_closed()?;
                Ok(got.is_some())
            },
        )?;
        Ok(got)
    }

    /// The next message, or an error once the peer closed and none is left.
    fn take_or_closed(&self) -> Result<Option<(u64, usize)>> {
        // Loaded before the attempt: if the peer had closed by then, its last
        // notices are already visible to the take below.
        let peer_closed = self.peer_closed.load(Ordering::Acquire);
        if let Some(m) = self.take_one()? {
            return Ok(Some(m));
        }
        if peer_closed {
            bail!(
                State,
                "rank {} closed the pipe and every message it sent has been read",
                self.peer
            );
        }
        Ok(None)
    }

    /// Kept in one piece: under the pipe lock it claims slot `seq` (`rx.taken`,
    /// `rx_next`), validates the extent the peer claims, then copies inline bytes or
    /// pulls the data; the copies' SAFETY rests on that validation just above them, and
    /// a failed pull rolls the claim back.
    fn take_one(&self) -> Result<Option<(u64, usize)>> {
        let mut peeked = None;
        if self.rx_ring != 0 {
            // Peek without the lock: nothing new is the common case of a poll.
            let seq = self.rx_next.load(Ordering::Acquire);
            let slot = slots::slot_addr(self.rx_ring, self.shape.ring, seq);
            // SAFETY: a slot of our own ring (library heap, 64-byte aligned).
            let words = unsafe { slots::load(slot) };
            if slots::decode(seq, words).is_none() {
                return Ok(None);
            }
            peeked = Some((seq, slot, words));
        }
        let mut g = self.inner.lock();
        let Inner { rx, stats, .. } = &mut *g;
        let rx = rx
            .as_mut()
            .ok_or_else(|| err!(State, "this end of the pipe only writes"))?;
        let seq = rx.taken + 1;
        // The peeked record is still the next one unless another thread took it
        // meanwhile (a record's words never change until it is taken).
        let (slot, words) = match peeked {
            Some((s, slot, words)) if s == seq => (slot, words),
            _ => {
                let slot = slots::slot_addr(rx.inbox + self.shape.ring_off(), self.shape.ring, seq);
                // SAFETY: a slot of our own ring (library heap, 64-byte aligned).
                (slot, unsafe { slots::load(slot) })
            }
        };
        let Some((units, len)) = slots::decode(seq, words) else {
            return Ok(None);
        };
        rx.taken = seq;
        self.rx_next.store(seq + 1, Ordering::Release);
        let inline = units & INLINE_BIT != 0;
        let (off, len) = ((units & !INLINE_BIT) as usize * UNIT, len as usize);
        let ext = extent(len);
        let fits = off.checked_add(ext).is_some_and(|e| e <= self.shape.width);
        let overlaps = fits && rx.any_held(off, ext);
        let bad_inline = inline && (len > slots::INLINE_MAX || self.transfer == Transfer::Pull);
        if !fits || overlaps || bad_inline {
            stats.refused += 1;
            bail!(
                Transport,
                "rpipe: rank {} sent message {} at [{:#x}, +{}) of pipe {}, which {}: refused",
                self.peer,
                seq,
                off,
                len,
                self.id,
                if !fits {
                    "lies outside the inbox"
                } else if overlaps {
                    "overlaps a message still held"
                } else {
                    "claims more inline bytes than a slot holds"
                }
            );
        }
        if inline && len > 0 {
            // The slot is reused once later messages are written, while this one may
            // be held for long: move the bytes to the message's place in our inbox
            // (the line just arrived, so this is a cache-hot copy).
            // SAFETY: from our own slot's inline area (len <= INLINE_MAX, checked) to
            // our inbox at the message's extent (allocated to it by the writer).
            unsafe { slots::inline_out(slot, (rx.inbox + off) as *mut u8, len) };
        }
        if self.transfer == Transfer::Pull && len > 0 {
            // SAFETY: destination = our inbox at the message's extent (ours, unused
            // until now: the writer allocated it); source = the same offset of the
            // peer's mirror (its outbox, checked at open).
            let got = unsafe {
                self.ctx.conduit.get_sync(
                    self.peer,
                    rx.peer_outbox + off,
                    (rx.inbox + off) as *mut u8,
                    len,
                )
            };
            if let Err(e) = got {
                rx.taken = seq - 1;
                self.rx_next.store(seq, Ordering::Release);
                return Err(e);
            }
        }
        rx.hold(off, len);
        stats.read += 1;
        stats.bytes_read += len as u64;
        Ok(Some((self.rx_tag << ADDR_SHIFT | off as u64, len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(units: usize) -> Rx {
        Rx {
            inbox: 0,
            peer_outbox: 0,
            taken: 0,
            held_units: vec![0; units.div_ceil(64)],
            starts: vec![0; units.div_ceil(64)],
            held: 0,
        }
    }

    /// The two bitmaps against a map of (start unit -> units): adjacent messages,
    /// messages across word boundaries and to the inbox's end, frees in any order,
    /// double and stray frees refused.
    #[test]
    fn held_messages_are_found_from_the_bitmaps() {
        let units = 200;
        let mut r = rx(units);
        let mut model = std::collections::BTreeMap::new();
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let u = (next() % units as u64) as usize;
            let n = 1 + (next() % 70) as usize;
            if next() % 2 == 0 {
                let fits = u + n <= units;
                if fits && !r.any_held(u * UNIT, n * UNIT) {
                    // A length that takes exactly n units.
                    r.hold(u * UNIT, n * UNIT - (next() % UNIT as u64) as usize);
                    model.insert(u, n);
                }
            } else {
                let want = model.remove(&u);
                assert_eq!(r.unhold(u * UNIT), want.is_some(), "free of unit {u}");
                assert!(!r.holds(u * UNIT));
            }
            assert_eq!(r.held, model.len());
            for (&s, &n) in &model {
                assert!(r.holds(s * UNIT));
                // Inside its first unit is not its address.
                assert!(!r.holds(s * UNIT + 1) && !r.holds(s * UNIT + UNIT - 1));
                assert_eq!(r.held_extent(s), n, "message at unit {s}");
            }
        }
        for s in std::mem::take(&mut model).into_keys() {
            assert!(r.unhold(s * UNIT));
        }
        assert!(r.held_units.iter().chain(&r.starts).all(|&w| w == 0));
        assert!(!r.unhold(0), "nothing is held");
    }
}
